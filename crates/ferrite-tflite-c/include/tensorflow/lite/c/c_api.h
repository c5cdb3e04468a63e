/* ferrite's libtensorflowlite_c: the TensorFlow Lite C API, run by ferrite.
 *
 * The functions keep the names, signatures and behaviour of LiteRT's C API, so a
 * program built against LiteRT's libtensorflowlite_c.so runs on ferrite's by library
 * path alone (LD_LIBRARY_PATH, or replacing the file). Typical use:
 *
 *   TfLiteModel *model = TfLiteModelCreateFromFile("model.tflite");
 *   TfLiteInterpreterOptions *options = TfLiteInterpreterOptionsCreate();
 *   TfLiteInterpreterOptionsSetNumThreads(options, 2);
 *   TfLiteInterpreter *interpreter = TfLiteInterpreterCreate(model, options);
 *   TfLiteInterpreterAllocateTensors(interpreter);
 *   TfLiteTensorCopyFromBuffer(TfLiteInterpreterGetInputTensor(interpreter, 0), in, in_bytes);
 *   TfLiteInterpreterInvoke(interpreter);
 *   TfLiteTensorCopyToBuffer(TfLiteInterpreterGetOutputTensor(interpreter, 0), out, out_bytes);
 *   TfLiteInterpreterDelete(interpreter);
 *   TfLiteInterpreterOptionsDelete(options);
 *   TfLiteModelDelete(model);
 *
 * ferrite's rules on top of the API's: every function accepts NULL and out-of-range
 * arguments (returning NULL, 0, -1 or kTfLiteError rather than crashing), and errors
 * are reported to the error reporter set in the interpreter options, or printed to
 * stderr as "ERROR: <message>" when none is set. One interpreter (with its signature
 * runners and tensors) must not be used by two threads at once; distinct interpreters
 * may run in parallel. */
#ifndef FERRITE_TFLITE_C_C_API_H
#define FERRITE_TFLITE_C_C_API_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorflow/lite/c/c_api_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handles. TfLiteTensor's public fields are declared in common.h. */
typedef struct TfLiteModel TfLiteModel;
typedef struct TfLiteInterpreterOptions TfLiteInterpreterOptions;
typedef struct TfLiteInterpreter TfLiteInterpreter;
typedef struct TfLiteTensor TfLiteTensor;
typedef struct TfLiteSignatureRunner TfLiteSignatureRunner;

/* ---- Library ---------------------------------------------------------------- */

/* The runtime's version, a static semver string: the TFLite API level implemented
 * with ferrite's version as build metadata, "2.17.0+ferrite.<version>". */
TFL_CAPI_EXPORT extern const char *TfLiteVersion(void);

/* The model file schema version read (3). */
TFL_CAPI_EXPORT extern int TfLiteSchemaVersion(void);

/* ---- Models ----------------------------------------------------------------- */

/* A model read from `model_size` bytes at `model_data`, or NULL on failure (reason on
 * stderr). The bytes are used in place, not copied: the buffer must stay valid and
 * unchanged until the model and every interpreter made from it are deleted. */
TFL_CAPI_EXPORT extern TfLiteModel *TfLiteModelCreate(const void *model_data, size_t model_size);

/* As TfLiteModelCreate, with failures sent to `reporter(user_data, format, args)`. */
TFL_CAPI_EXPORT extern TfLiteModel *TfLiteModelCreateWithErrorReporter(
    const void *model_data, size_t model_size,
    void (*reporter)(void *user_data, const char *format, va_list args), void *user_data);

/* A model read from the file at `model_path` (memory-mapped: the file must not change
 * while the model or its interpreters exist), or NULL on failure (reason on stderr). */
TFL_CAPI_EXPORT extern TfLiteModel *TfLiteModelCreateFromFile(const char *model_path);

/* As TfLiteModelCreateFromFile, with failures sent to `reporter`. */
TFL_CAPI_EXPORT extern TfLiteModel *TfLiteModelCreateFromFileWithErrorReporter(
    const char *model_path, void (*reporter)(void *user_data, const char *format, va_list args),
    void *user_data);

/* Deletes a model; interpreters made from it keep working. NULL is ignored. */
TFL_CAPI_EXPORT extern void TfLiteModelDelete(TfLiteModel *model);

/* ---- Interpreter options ---------------------------------------------------- */

/* New options: default thread count, errors printed to stderr. */
TFL_CAPI_EXPORT extern TfLiteInterpreterOptions *TfLiteInterpreterOptionsCreate(void);

/* A copy of `from`, to be deleted with TfLiteInterpreterOptionsDelete. */
TFL_CAPI_EXPORT extern TfLiteInterpreterOptions *TfLiteInterpreterOptionsCopy(
    const TfLiteInterpreterOptions *from);

/* Deletes options; interpreters made with them are unaffected. NULL is ignored. */
TFL_CAPI_EXPORT extern void TfLiteInterpreterOptionsDelete(TfLiteInterpreterOptions *options);

/* Worker threads of interpreters made with these options. Values below 1 (-1 means
 * "runtime default") run on one thread. */
TFL_CAPI_EXPORT extern void TfLiteInterpreterOptionsSetNumThreads(TfLiteInterpreterOptions *options,
                                                                  int32_t num_threads);

/* Sends the errors of interpreters made with these options to
 * reporter(user_data, format, args), a vprintf-style callback. `user_data` must stay
 * valid while those interpreters exist. */
TFL_CAPI_EXPORT extern void TfLiteInterpreterOptionsSetErrorReporter(
    TfLiteInterpreterOptions *options,
    void (*reporter)(void *user_data, const char *format, va_list args), void *user_data);

/* ---- Interpreter ------------------------------------------------------------ */

/* A new interpreter for `model` with `optional_options` (NULL: defaults). The model and
 * the options may be deleted once it exists. NULL on failure, reported to the options'
 * reporter. Ops that cannot run are reported by TfLiteInterpreterAllocateTensors
 * (kTfLiteUnresolvedOps for a custom op nobody implements), as in LiteRT. Call
 * TfLiteInterpreterAllocateTensors before touching tensor data or invoking. */
TFL_CAPI_EXPORT extern TfLiteInterpreter *TfLiteInterpreterCreate(
    const TfLiteModel *model, const TfLiteInterpreterOptions *optional_options);

/* Deletes an interpreter and its tensors; delete its signature runners first. NULL is
 * ignored. */
TFL_CAPI_EXPORT extern void TfLiteInterpreterDelete(TfLiteInterpreter *interpreter);

/* Number of model inputs / outputs. */
TFL_CAPI_EXPORT extern int32_t TfLiteInterpreterGetInputTensorCount(const TfLiteInterpreter *interpreter);
TFL_CAPI_EXPORT extern int32_t TfLiteInterpreterGetOutputTensorCount(const TfLiteInterpreter *interpreter);

/* The model's tensor indices of the inputs / outputs: arrays of the counts above, owned
 * by the interpreter. */
TFL_CAPI_EXPORT extern const int *TfLiteInterpreterInputTensorIndices(const TfLiteInterpreter *interpreter);
TFL_CAPI_EXPORT extern const int *TfLiteInterpreterOutputTensorIndices(const TfLiteInterpreter *interpreter);

/* Input `input_index` (NULL when out of range). The pointer stays valid as long as the
 * interpreter; its data pointer changes at TfLiteInterpreterAllocateTensors. */
TFL_CAPI_EXPORT extern TfLiteTensor *TfLiteInterpreterGetInputTensor(const TfLiteInterpreter *interpreter,
                                                                      int32_t input_index);

/* Output `output_index` (NULL when out of range); shape and data are final after
 * TfLiteInterpreterInvoke. */
TFL_CAPI_EXPORT extern const TfLiteTensor *TfLiteInterpreterGetOutputTensor(
    const TfLiteInterpreter *interpreter, int32_t output_index);

/* Gives input `input_index` the shape input_dims[0 .. input_dims_size) (copied). It takes
 * effect at the next TfLiteInterpreterAllocateTensors, which must precede the next
 * invoke. A resize to the current shape changes nothing. The rank may change; the
 * model's ops check the ranks they take at AllocateTensors. */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteInterpreterResizeInputTensor(TfLiteInterpreter *interpreter,
                                                                       int32_t input_index,
                                                                       const int *input_dims,
                                                                       int32_t input_dims_size);

/* Prepares the ops and plans memory for the current input shapes, and points the
 * tensors at it. Cheap when nothing was resized since the last call. */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteInterpreterAllocateTensors(TfLiteInterpreter *interpreter);

/* Runs the model on the inputs' current contents. kTfLiteError before
 * TfLiteInterpreterAllocateTensors, or after a resize without one. */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteInterpreterInvoke(TfLiteInterpreter *interpreter);

/* ---- Signature runners ------------------------------------------------------ */

/* Number of signatures in the model, and the key of signature `signature_index` (owned
 * by the interpreter; NULL when out of range). */
TFL_CAPI_EXPORT extern int32_t TfLiteInterpreterGetSignatureCount(const TfLiteInterpreter *interpreter);
TFL_CAPI_EXPORT extern const char *TfLiteInterpreterGetSignatureKey(const TfLiteInterpreter *interpreter,
                                                                    int32_t signature_index);

/* A runner for the signature keyed `signature_key`, NULL when there is none. Delete it
 * with TfLiteSignatureRunnerDelete before the interpreter. In ferrite a signature runs
 * in a session of its own: its tensors and variables are not the interpreter's. */
TFL_CAPI_EXPORT extern TfLiteSignatureRunner *TfLiteInterpreterGetSignatureRunner(
    const TfLiteInterpreter *interpreter, const char *signature_key);

/* Inputs and outputs of the signature, by the signature's names (owned by the runner;
 * NULL when out of range). */
TFL_CAPI_EXPORT extern size_t TfLiteSignatureRunnerGetInputCount(const TfLiteSignatureRunner *signature_runner);
TFL_CAPI_EXPORT extern const char *TfLiteSignatureRunnerGetInputName(
    const TfLiteSignatureRunner *signature_runner, int32_t input_index);
TFL_CAPI_EXPORT extern size_t TfLiteSignatureRunnerGetOutputCount(const TfLiteSignatureRunner *signature_runner);
TFL_CAPI_EXPORT extern const char *TfLiteSignatureRunnerGetOutputName(
    const TfLiteSignatureRunner *signature_runner, int32_t output_index);

/* Gives the input called `input_name` the shape input_dims[0 .. input_dims_size); only
 * dimensions the model marks unknown (-1) may change. Takes effect at the next
 * TfLiteSignatureRunnerAllocateTensors. */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteSignatureRunnerResizeInputTensor(
    TfLiteSignatureRunner *signature_runner, const char *input_name, const int *input_dims,
    int32_t input_dims_size);

/* Plans memory for the signature's input shapes (cheap when nothing changed). */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteSignatureRunnerAllocateTensors(TfLiteSignatureRunner *signature_runner);

/* The input / output called `*_name` (NULL when there is none), valid while the
 * interpreter exists. */
TFL_CAPI_EXPORT extern TfLiteTensor *TfLiteSignatureRunnerGetInputTensor(TfLiteSignatureRunner *signature_runner,
                                                                          const char *input_name);
TFL_CAPI_EXPORT extern const TfLiteTensor *TfLiteSignatureRunnerGetOutputTensor(
    const TfLiteSignatureRunner *signature_runner, const char *output_name);

/* Runs the signature on its inputs' contents. */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteSignatureRunnerInvoke(TfLiteSignatureRunner *signature_runner);

/* Deletes a runner handle (the signature's session stays with the interpreter). NULL is
 * ignored. */
TFL_CAPI_EXPORT extern void TfLiteSignatureRunnerDelete(TfLiteSignatureRunner *signature_runner);

/* ---- Tensors ---------------------------------------------------------------- */

/* Element type (kTfLiteNoType for NULL). */
TFL_CAPI_EXPORT extern TfLiteType TfLiteTensorType(const TfLiteTensor *tensor);

/* Number of dimensions (-1 for NULL), and dimension `dim_index` (-1 when out of range). */
TFL_CAPI_EXPORT extern int32_t TfLiteTensorNumDims(const TfLiteTensor *tensor);
TFL_CAPI_EXPORT extern int32_t TfLiteTensorDim(const TfLiteTensor *tensor, int32_t dim_index);

/* Size of the data in bytes. */
TFL_CAPI_EXPORT extern size_t TfLiteTensorByteSize(const TfLiteTensor *tensor);

/* The live data: for an input, the memory the next invoke reads (writing it sets the
 * input without a copy); for an output, where the last invoke wrote. NULL before
 * TfLiteInterpreterAllocateTensors and after a resize until the next one. */
TFL_CAPI_EXPORT extern void *TfLiteTensorData(const TfLiteTensor *tensor);

/* The tensor's name in the model. */
TFL_CAPI_EXPORT extern const char *TfLiteTensorName(const TfLiteTensor *tensor);

/* Per-tensor quantization (scale 0 when the tensor has none or is quantized per channel). */
TFL_CAPI_EXPORT extern TfLiteQuantizationParams TfLiteTensorQuantizationParams(const TfLiteTensor *tensor);

/* Copy into / out of the tensor; the size must equal TfLiteTensorByteSize, and the
 * tensor must have memory (after TfLiteInterpreterAllocateTensors). */
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteTensorCopyFromBuffer(TfLiteTensor *tensor, const void *input_data,
                                                               size_t input_data_size);
TFL_CAPI_EXPORT extern TfLiteStatus TfLiteTensorCopyToBuffer(const TfLiteTensor *output_tensor,
                                                             void *output_data, size_t output_data_size);

#ifdef __cplusplus
}
#endif

#endif /* FERRITE_TFLITE_C_C_API_H */
