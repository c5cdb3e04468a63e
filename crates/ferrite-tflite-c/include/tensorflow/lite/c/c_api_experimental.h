/* ferrite's libtensorflowlite_c: the experimental additions of the TensorFlow Lite C
 * API that ferrite implements. */
#ifndef FERRITE_TFLITE_C_C_API_EXPERIMENTAL_H
#define FERRITE_TFLITE_C_C_API_EXPERIMENTAL_H

#include "tensorflow/lite/c/c_api.h"
#include "tensorflow/lite/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Resets the tensors the model flags as variables (zeros; an int8 one its zero point),
 * in the interpreter and its signature runners. Resource variables (the state of
 * streaming models, VAR_HANDLE) keep their values, as in LiteRT. */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteInterpreterResetVariableTensors(TfLiteInterpreter *interpreter);

/* The model's tensor index of input / output `*_index` (-1 when out of range). */
TFL_CAPI_EXPORT extern int32_t TfLiteInterpreterGetInputTensorIndex(const TfLiteInterpreter *interpreter,
                                                                    int32_t input_index);
TFL_CAPI_EXPORT extern int32_t TfLiteInterpreterGetOutputTensorIndex(const TfLiteInterpreter *interpreter,
                                                                     int32_t output_index);

#ifdef __cplusplus
}
#endif

#endif /* FERRITE_TFLITE_C_C_API_EXPERIMENTAL_H */
