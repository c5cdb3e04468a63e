/* ferrite's libtensorflowlite_c: types of the TensorFlow Lite C API.
 *
 * Written for ferrite from the API's documented contract: the names, values and
 * layouts here are the ones programs built against LiteRT's C API rely on, so such a
 * program can run on ferrite's library unchanged. */
#ifndef FERRITE_TFLITE_C_C_API_TYPES_H
#define FERRITE_TFLITE_C_C_API_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef TFL_CAPI_EXPORT
#if defined(_WIN32)
#define TFL_CAPI_EXPORT __declspec(dllimport)
#else
#define TFL_CAPI_EXPORT __attribute__((visibility("default")))
#endif
#endif

/* What a call returns. ferrite answers kTfLiteOk, kTfLiteError, and
 * kTfLiteUnresolvedOps (AllocateTensors on a model with an unknown custom op); it
 * applies no delegates and has no cancellation, so the other values never come back. */
typedef enum TfLiteStatus {
    kTfLiteOk = 0,
    kTfLiteError = 1,
    kTfLiteDelegateError = 2,
    kTfLiteApplicationError = 3,
    kTfLiteDelegateDataNotFound = 4,
    kTfLiteDelegateDataWriteError = 5,
    kTfLiteDelegateDataReadError = 6,
    kTfLiteUnresolvedOps = 7,
    kTfLiteCancelled = 8,
} TfLiteStatus;

/* Element type of a tensor. */
typedef enum {
    kTfLiteNoType = 0,
    kTfLiteFloat32 = 1,
    kTfLiteInt32 = 2,
    kTfLiteUInt8 = 3,
    kTfLiteInt64 = 4,
    kTfLiteString = 5,
    kTfLiteBool = 6,
    kTfLiteInt16 = 7,
    kTfLiteComplex64 = 8,
    kTfLiteInt8 = 9,
    kTfLiteFloat16 = 10,
    kTfLiteFloat64 = 11,
    kTfLiteComplex128 = 12,
    kTfLiteUInt64 = 13,
    kTfLiteResource = 14,
    kTfLiteVariant = 15,
    kTfLiteUInt32 = 16,
    kTfLiteUInt16 = 17,
    kTfLiteInt4 = 18,
} TfLiteType;

/* Per-tensor affine quantization: real = scale * (quantized - zero_point). Both are 0
 * for a tensor that is not quantized, or is quantized per channel. */
typedef struct TfLiteQuantizationParams {
    float scale;
    int32_t zero_point;
} TfLiteQuantizationParams;

#ifdef __cplusplus
}
#endif

#endif /* FERRITE_TFLITE_C_C_API_TYPES_H */
