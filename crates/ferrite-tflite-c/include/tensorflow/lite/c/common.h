/* ferrite's libtensorflowlite_c: the TfLiteTensor struct for programs that read its
 * fields directly rather than through the TfLiteTensor* accessors of c_api.h.
 *
 * The fields below are the public ones of the TensorFlow Lite struct, in its order and
 * with its C types, so code compiled against either library reads the same offsets.
 * ferrite fills type, data, dims, params, allocation_type, bytes, name, is_variable and
 * dims_signature; `quantization` is always kTfLiteNoQuantization (use `params` or
 * TfLiteTensorQuantizationParams), and the delegate fields are unused. Only ferrite
 * allocates these structs: treat them as read-only. */
#ifndef FERRITE_TFLITE_C_COMMON_H
#define FERRITE_TFLITE_C_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorflow/lite/c/c_api_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A count followed by that many ints: a tensor's dims. */
typedef struct TfLiteIntArray {
    int size;
#if defined(__cplusplus) || defined(_MSC_VER)
    int data[1];
#else
    int data[];
#endif
} TfLiteIntArray;

/* Pointers to a tensor's data, by element type; `data` is the untyped one. */
typedef union TfLitePtrUnion {
    int32_t *i32;
    uint32_t *u32;
    int64_t *i64;
    uint64_t *u64;
    float *f;
    double *f64;
    char *raw;
    const char *raw_const;
    uint8_t *uint8;
    bool *b;
    int16_t *i16;
    uint16_t *ui16;
    int8_t *int8;
    void *data;
} TfLitePtrUnion;

/* Where a tensor's memory comes from. ferrite reports kTfLiteArenaRw for planned memory
 * and kTfLiteDynamic for outputs whose size is only known after running. */
typedef enum TfLiteAllocationType {
    kTfLiteMemNone = 0,
    kTfLiteMmapRo = 1,
    kTfLiteArenaRw = 2,
    kTfLiteArenaRwPersistent = 3,
    kTfLiteDynamic = 4,
    kTfLitePersistentRo = 5,
    kTfLiteCustom = 6,
    kTfLiteVariantObject = 7,
} TfLiteAllocationType;

typedef enum TfLiteQuantizationType {
    kTfLiteNoQuantization = 0,
    kTfLiteAffineQuantization = 1,
} TfLiteQuantizationType;

typedef struct TfLiteQuantization {
    TfLiteQuantizationType type;
    void *params;
} TfLiteQuantization;

typedef int TfLiteBufferHandle;

struct TfLiteDelegate;
struct TfLiteSparsity;

typedef struct TfLiteTensor {
    TfLiteType type;
    TfLitePtrUnion data;
    TfLiteIntArray *dims;
    TfLiteQuantizationParams params;
    TfLiteAllocationType allocation_type;
    size_t bytes;
    const void *allocation;
    const char *name;
    struct TfLiteDelegate *delegate;
    TfLiteBufferHandle buffer_handle;
    bool data_is_stale;
    bool is_variable;
    TfLiteQuantization quantization;
    struct TfLiteSparsity *sparsity;
    /* The shape with -1 for dimensions that may be resized; NULL when the model gives none. */
    const TfLiteIntArray *dims_signature;
    /* ferrite's own fields follow; they are not part of the API. */
} TfLiteTensor;

/* The name of a TfLiteType value ("FLOAT32", "INT8", ...), or "Unknown type". */
TFL_CAPI_EXPORT extern const char *TfLiteTypeGetName(TfLiteType type);

#ifdef __cplusplus
}
#endif

#endif /* FERRITE_TFLITE_C_COMMON_H */
