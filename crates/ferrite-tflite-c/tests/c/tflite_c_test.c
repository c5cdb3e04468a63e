/* A program written against the TensorFlow Lite C API, used to test ferrite's
 * libtensorflowlite_c.so and to compare it with LiteRT's: it runs unchanged on either
 * library (the one found at load time). Checks whose answer differs between the two
 * (ferrite refuses what LiteRT leaves undefined) run only on ferrite's, recognised by
 * its TfLiteVersion.
 *
 *   tflite_c_test errors DEMO SIGNATURE UNKNOWN_OP     API contract and error paths
 *   tflite_c_test reset ACCUMULATOR_MODEL             what ResetVariableTensors resets
 *   tflite_c_test run MODEL DUMP_FILE INVOKES         seeded inputs -> outputs, dumped
 *   tflite_c_test bench MODEL ITERATIONS              per-call overheads
 *
 * Exits 0 when every check holds; prints "tflite c test: ok". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorflow/lite/c/c_api.h"
#include "tensorflow/lite/c/c_api_experimental.h"
#include "tensorflow/lite/c/common.h"

static int failures = 0;

#define EXPECT(cond)                                                            \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                         \
        }                                                                       \
    } while (0)

#define REQUIRE(cond)                                                                     \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: required %s, stopping\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static int is_ferrite(void) { return strstr(TfLiteVersion(), "ferrite") != NULL; }

/* An error reporter that counts calls and keeps the last message. */
struct capture {
    int calls;
    char last[512];
};

static void capture_reporter(void *user_data, const char *format, va_list args) {
    struct capture *c = user_data;
    c->calls++;
    vsnprintf(c->last, sizeof c->last, format, args);
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* xorshift64*: the same seeded inputs on every library and run. */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Fills `n` bytes of a tensor of type `type` with seeded values suited to the type. */
static void fill(void *dst, size_t n, TfLiteType type, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    if (type == kTfLiteFloat32) {
        float *f = dst;
        for (size_t i = 0; i < n / 4; i++) f[i] = (float)((rng_next(&s) >> 40) / (double)(1 << 24) * 2.0 - 1.0);
    } else if (type == kTfLiteInt32 || type == kTfLiteInt64) {
        memset(dst, 0, n); /* small non-negative values: indices and counts stay valid */
        size_t w = type == kTfLiteInt32 ? 4 : 8;
        for (size_t i = 0; i < n / w; i++) ((unsigned char *)dst)[i * w] = (unsigned char)(rng_next(&s) % 4);
    } else if (type == kTfLiteBool) {
        for (size_t i = 0; i < n; i++) ((unsigned char *)dst)[i] = (unsigned char)(rng_next(&s) & 1);
    } else {
        for (size_t i = 0; i < n; i++) ((unsigned char *)dst)[i] = (unsigned char)(rng_next(&s) >> 56);
    }
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* ---- errors: the API contract on a float model and a model with a signature ---- */

static void check_layout(const TfLiteTensor *t) {
    /* Fields read directly (common.h) agree with the accessors: the struct layout is the
     * library's. */
    EXPECT(t->type == TfLiteTensorType(t));
    EXPECT(t->data.data == TfLiteTensorData(t));
    EXPECT(t->bytes == TfLiteTensorByteSize(t));
    EXPECT(t->dims != NULL && t->dims->size == TfLiteTensorNumDims(t));
    for (int d = 0; t->dims && d < t->dims->size; d++) EXPECT(t->dims->data[d] == TfLiteTensorDim(t, d));
    EXPECT(t->name == TfLiteTensorName(t));
    TfLiteQuantizationParams q = TfLiteTensorQuantizationParams(t);
    EXPECT(t->params.scale == q.scale && t->params.zero_point == q.zero_point);
}

static void errors(const char *demo_path, const char *sig_path, const char *unknown_op_path) {
    printf("library %s\n", TfLiteVersion());
    const char *v = TfLiteVersion();
    EXPECT(v != NULL && v[0] >= '0' && v[0] <= '9' && strchr(v, '.') != NULL);
    EXPECT(TfLiteSchemaVersion() == 3);
    EXPECT(strcmp(TfLiteTypeGetName(kTfLiteFloat32), "FLOAT32") == 0);
    EXPECT(strcmp(TfLiteTypeGetName(kTfLiteInt8), "INT8") == 0);

    /* Model errors: missing file, bytes that are not a model. */
    EXPECT(TfLiteModelCreateFromFile("/nonexistent/model.tflite") == NULL);
    struct capture model_errors = {0};
    unsigned char junk[256];
    for (int i = 0; i < 256; i++) junk[i] = (unsigned char)(i * 37 + 11);
    EXPECT(TfLiteModelCreateWithErrorReporter(junk, sizeof junk, capture_reporter, &model_errors) == NULL);
    EXPECT(model_errors.calls > 0 && strlen(model_errors.last) > 0);
    printf("bad model reported: %s\n", model_errors.last);

    /* A model with an op the runtime lacks: it loads and gets an interpreter, and
     * AllocateTensors answers kTfLiteUnresolvedOps with a report. */
    TfLiteModel *unknown = TfLiteModelCreateFromFile(unknown_op_path);
    REQUIRE(unknown != NULL);
    struct capture create_errors = {0};
    TfLiteInterpreterOptions *reporting = TfLiteInterpreterOptionsCreate();
    TfLiteInterpreterOptionsSetErrorReporter(reporting, capture_reporter, &create_errors);
    TfLiteInterpreterOptions *copy = TfLiteInterpreterOptionsCopy(reporting);
    TfLiteInterpreterOptionsDelete(reporting);
    TfLiteInterpreter *unresolved = TfLiteInterpreterCreate(unknown, copy);
    REQUIRE(unresolved != NULL);
    EXPECT(TfLiteInterpreterAllocateTensors(unresolved) == kTfLiteUnresolvedOps);
    EXPECT(create_errors.calls > 0);
    printf("unknown op reported: %s\n", create_errors.last);
    EXPECT(TfLiteInterpreterInvoke(unresolved) == kTfLiteError);
    TfLiteInterpreterDelete(unresolved);
    TfLiteInterpreterOptionsDelete(copy);
    TfLiteModelDelete(unknown);

    /* The model from caller bytes, used in place: the buffer outlives the interpreter. */
    size_t len = 0;
    unsigned char *bytes = read_file(demo_path, &len);
    REQUIRE(bytes != NULL);
    TfLiteModel *model = TfLiteModelCreate(bytes, len);
    REQUIRE(model != NULL);
    struct capture rep = {0};
    TfLiteInterpreterOptions *options = TfLiteInterpreterOptionsCreate();
    TfLiteInterpreterOptionsSetNumThreads(options, 2);
    TfLiteInterpreterOptionsSetErrorReporter(options, capture_reporter, &rep);
    TfLiteInterpreter *it = TfLiteInterpreterCreate(model, options);
    REQUIRE(it != NULL);
    /* Both may go once the interpreter exists. */
    TfLiteInterpreterOptionsDelete(options);
    TfLiteModelDelete(model);

    EXPECT(TfLiteInterpreterGetInputTensorCount(it) == 1);
    EXPECT(TfLiteInterpreterGetOutputTensorCount(it) == 1);
    TfLiteTensor *in = TfLiteInterpreterGetInputTensor(it, 0);
    const TfLiteTensor *out = TfLiteInterpreterGetOutputTensor(it, 0);
    REQUIRE(in != NULL && out != NULL);
    EXPECT(TfLiteTensorType(in) == kTfLiteFloat32);
    EXPECT(TfLiteTensorNumDims(in) == 4 && TfLiteTensorDim(in, 3) == 3);
    EXPECT(strcmp(TfLiteTensorName(in), "image") == 0);
    EXPECT(TfLiteTensorByteSize(in) == 32 * 32 * 3 * 4);
    EXPECT(TfLiteTensorData(in) == NULL); /* no memory before AllocateTensors */
    EXPECT(TfLiteInterpreterGetInputTensorIndex(it, 0) == TfLiteInterpreterInputTensorIndices(it)[0]);
    EXPECT(TfLiteInterpreterGetOutputTensorIndex(it, 0) == TfLiteInterpreterOutputTensorIndices(it)[0]);

    /* Invoke before AllocateTensors: an error, reported. */
    int before = rep.calls;
    EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteError);
    EXPECT(rep.calls > before);
    printf("invoke before allocate reported: %s\n", rep.last);

    EXPECT(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    float *data = TfLiteTensorData(in);
    REQUIRE(data != NULL);
    check_layout(in);
    check_layout(out);

    /* Write the input through its live buffer, read the output both ways. */
    size_t n_in = TfLiteTensorByteSize(in) / 4;
    fill(data, n_in * 4, kTfLiteFloat32, 1);
    EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteOk);
    EXPECT(TfLiteTensorNumDims(out) == 2 && TfLiteTensorDim(out, 1) == 10);
    float first[10], again[10];
    EXPECT(TfLiteTensorCopyToBuffer(out, first, sizeof first) == kTfLiteOk);
    EXPECT(memcmp(first, TfLiteTensorData(out), sizeof first) == 0);
    float sum = 0;
    for (int i = 0; i < 10; i++) sum += first[i];
    EXPECT(fabsf(sum - 1.0f) < 1e-4f); /* softmax */

    /* Wrong sizes are errors and change nothing. */
    float *scratch = malloc(n_in * 4);
    fill(scratch, n_in * 4, kTfLiteFloat32, 99);
    EXPECT(TfLiteTensorCopyFromBuffer(in, scratch, n_in * 4 - 1) == kTfLiteError);
    EXPECT(TfLiteTensorCopyToBuffer(out, again, sizeof again + 4) == kTfLiteError);
    /* The input stays for the next invoke; an AllocateTensors with nothing resized
     * keeps buffers and contents. */
    EXPECT(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    EXPECT(TfLiteTensorData(in) == data);
    EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteOk);
    EXPECT(TfLiteTensorCopyToBuffer(out, again, sizeof again) == kTfLiteOk);
    EXPECT(memcmp(first, again, sizeof first) == 0);
    /* CopyFromBuffer of the same image gives the same answer. */
    memcpy(scratch, data, n_in * 4);
    EXPECT(TfLiteTensorCopyFromBuffer(in, scratch, n_in * 4) == kTfLiteOk);
    EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteOk);
    EXPECT(TfLiteTensorCopyToBuffer(out, again, sizeof again) == kTfLiteOk);
    EXPECT(memcmp(first, again, sizeof first) == 0);

    /* Resize to the current shape: nothing changes. */
    int dims1[4] = {1, 32, 32, 3};
    EXPECT(TfLiteInterpreterResizeInputTensor(it, 0, dims1, 4) == kTfLiteOk);
    EXPECT(TfLiteTensorData(in) == data);
    EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteOk);

    /* Batch of two: no memory until AllocateTensors; both rows answer as the batch of one. */
    int dims2[4] = {2, 32, 32, 3};
    EXPECT(TfLiteInterpreterResizeInputTensor(it, 0, dims2, 4) == kTfLiteOk);
    EXPECT(TfLiteTensorByteSize(in) == 2 * n_in * 4);
    EXPECT(TfLiteTensorData(in) == NULL);
    EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteError);
    EXPECT(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    float *data2 = TfLiteTensorData(in);
    REQUIRE(data2 != NULL);
    memcpy(data2, scratch, n_in * 4);
    memcpy(data2 + n_in, scratch, n_in * 4);
    EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteOk);
    EXPECT(TfLiteTensorNumDims(out) == 2 && TfLiteTensorDim(out, 0) == 2 && TfLiteTensorByteSize(out) == 80);
    float two[20];
    EXPECT(TfLiteTensorCopyToBuffer(out, two, sizeof two) == kTfLiteOk);
    for (int i = 0; i < 10; i++) EXPECT(fabsf(two[i] - first[i]) < 1e-5f && fabsf(two[10 + i] - first[i]) < 1e-5f);
    check_layout(in);
    check_layout(out);
    EXPECT(TfLiteInterpreterResetVariableTensors(it) == kTfLiteOk);

    if (is_ferrite()) {
        /* Where LiteRT's behaviour is undefined or differs, ferrite answers safely. */
        EXPECT(TfLiteInterpreterGetInputTensor(it, -1) == NULL);
        EXPECT(TfLiteInterpreterGetInputTensor(it, 1) == NULL);
        EXPECT(TfLiteInterpreterGetOutputTensor(it, 7) == NULL);
        EXPECT(TfLiteInterpreterGetInputTensorIndex(it, 3) == -1);
        EXPECT(TfLiteTensorDim(in, 4) == -1 && TfLiteTensorDim(in, -1) == -1);
        before = rep.calls;
        int negative[4] = {1, -32, 32, 3};
        EXPECT(TfLiteInterpreterResizeInputTensor(it, 0, negative, 4) == kTfLiteError);
        EXPECT(TfLiteInterpreterResizeInputTensor(it, 0, NULL, 4) == kTfLiteError);
        EXPECT(TfLiteInterpreterResizeInputTensor(it, 5, dims1, 4) == kTfLiteError);
        EXPECT(rep.calls == before + 3);
        EXPECT(TfLiteTensorCopyFromBuffer(in, NULL, TfLiteTensorByteSize(in)) == kTfLiteError);
        /* NULL everywhere: no crash, neutral answers. */
        EXPECT(TfLiteModelCreate(NULL, 10) == NULL);
        EXPECT(TfLiteModelCreateFromFile(NULL) == NULL);
        TfLiteModelDelete(NULL);
        TfLiteInterpreterOptionsDelete(NULL);
        TfLiteInterpreterOptionsSetNumThreads(NULL, 2);
        TfLiteInterpreterOptionsSetErrorReporter(NULL, capture_reporter, &rep);
        EXPECT(TfLiteInterpreterOptionsCopy(NULL) == NULL);
        EXPECT(TfLiteInterpreterCreate(NULL, NULL) == NULL);
        TfLiteInterpreterDelete(NULL);
        EXPECT(TfLiteInterpreterGetInputTensorCount(NULL) == 0);
        EXPECT(TfLiteInterpreterGetOutputTensorCount(NULL) == 0);
        EXPECT(TfLiteInterpreterGetInputTensor(NULL, 0) == NULL);
        EXPECT(TfLiteInterpreterGetOutputTensor(NULL, 0) == NULL);
        EXPECT(TfLiteInterpreterInputTensorIndices(NULL) == NULL);
        EXPECT(TfLiteInterpreterResizeInputTensor(NULL, 0, dims1, 4) == kTfLiteError);
        EXPECT(TfLiteInterpreterAllocateTensors(NULL) == kTfLiteError);
        EXPECT(TfLiteInterpreterInvoke(NULL) == kTfLiteError);
        EXPECT(TfLiteInterpreterResetVariableTensors(NULL) == kTfLiteError);
        EXPECT(TfLiteTensorType(NULL) == kTfLiteNoType);
        EXPECT(TfLiteTensorNumDims(NULL) == -1);
        EXPECT(TfLiteTensorDim(NULL, 0) == -1);
        EXPECT(TfLiteTensorByteSize(NULL) == 0);
        EXPECT(TfLiteTensorData(NULL) == NULL);
        EXPECT(TfLiteTensorName(NULL) == NULL);
        EXPECT(TfLiteTensorQuantizationParams(NULL).scale == 0.0f);
        EXPECT(TfLiteTensorCopyFromBuffer(NULL, scratch, 4) == kTfLiteError);
        EXPECT(TfLiteTensorCopyToBuffer(NULL, scratch, 4) == kTfLiteError);
        EXPECT(TfLiteInterpreterGetSignatureCount(NULL) == 0);
        EXPECT(TfLiteInterpreterGetSignatureKey(NULL, 0) == NULL);
        EXPECT(TfLiteInterpreterGetSignatureRunner(NULL, "serve") == NULL);
        EXPECT(TfLiteInterpreterGetSignatureRunner(it, NULL) == NULL);
        EXPECT(TfLiteSignatureRunnerGetInputCount(NULL) == 0);
        EXPECT(TfLiteSignatureRunnerGetInputName(NULL, 0) == NULL);
        EXPECT(TfLiteSignatureRunnerGetInputTensor(NULL, "x") == NULL);
        EXPECT(TfLiteSignatureRunnerAllocateTensors(NULL) == kTfLiteError);
        EXPECT(TfLiteSignatureRunnerInvoke(NULL) == kTfLiteError);
        EXPECT(TfLiteSignatureRunnerResizeInputTensor(NULL, "x", dims1, 4) == kTfLiteError);
        TfLiteSignatureRunnerDelete(NULL);
    }
    free(scratch);
    TfLiteInterpreterDelete(it);
    free(bytes); /* only now: the interpreter read the model in place */

    /* A signature: runner inputs and outputs by name; strict resizes. The model is
     * y = relu(x * w + b) over x [n, 3] with n marked -1, signature "serve". */
    TfLiteModel *sm = TfLiteModelCreateFromFile(sig_path);
    REQUIRE(sm != NULL);
    TfLiteInterpreter *si = TfLiteInterpreterCreate(sm, NULL);
    TfLiteModelDelete(sm);
    REQUIRE(si != NULL);
    EXPECT(TfLiteInterpreterGetSignatureCount(si) == 1);
    EXPECT(strcmp(TfLiteInterpreterGetSignatureKey(si, 0), "serve") == 0);
    EXPECT(TfLiteInterpreterGetSignatureKey(si, 1) == NULL);
    EXPECT(TfLiteInterpreterGetSignatureRunner(si, "nope") == NULL);
    TfLiteSignatureRunner *r = TfLiteInterpreterGetSignatureRunner(si, "serve");
    REQUIRE(r != NULL);
    EXPECT(TfLiteSignatureRunnerGetInputCount(r) == 1 && TfLiteSignatureRunnerGetOutputCount(r) == 1);
    EXPECT(strcmp(TfLiteSignatureRunnerGetInputName(r, 0), "x") == 0);
    EXPECT(strcmp(TfLiteSignatureRunnerGetOutputName(r, 0), "y") == 0);
    EXPECT(TfLiteSignatureRunnerGetInputName(r, 1) == NULL);
    EXPECT(TfLiteSignatureRunnerGetInputTensor(r, "y") == NULL);
    EXPECT(TfLiteSignatureRunnerGetOutputTensor(r, "x") == NULL);
    int fixed_changed[2] = {2, 4};
    EXPECT(TfLiteSignatureRunnerResizeInputTensor(r, "x", fixed_changed, 2) == kTfLiteError);
    int batch4[2] = {4, 3};
    EXPECT(TfLiteSignatureRunnerResizeInputTensor(r, "x", batch4, 2) == kTfLiteOk);
    EXPECT(TfLiteSignatureRunnerAllocateTensors(r) == kTfLiteOk);
    TfLiteTensor *x = TfLiteSignatureRunnerGetInputTensor(r, "x");
    REQUIRE(x != NULL);
    EXPECT(TfLiteTensorDim(x, 0) == 4 && TfLiteTensorByteSize(x) == 48);
    float xs[12], ys[12];
    for (int i = 0; i < 12; i++) xs[i] = (float)i * 0.5f - 2.0f;
    EXPECT(TfLiteTensorCopyFromBuffer(x, xs, sizeof xs) == kTfLiteOk);
    EXPECT(TfLiteSignatureRunnerInvoke(r) == kTfLiteOk);
    const TfLiteTensor *y = TfLiteSignatureRunnerGetOutputTensor(r, "y");
    REQUIRE(y != NULL);
    EXPECT(TfLiteTensorCopyToBuffer(y, ys, sizeof ys) == kTfLiteOk);
    const float w[3] = {1.0f, -2.0f, 0.5f};
    for (int i = 0; i < 12; i++) EXPECT(ys[i] == fmaxf(xs[i] * w[i % 3] + 0.25f, 0.0f));
    /* A second handle on the same signature sees the same tensors. */
    TfLiteSignatureRunner *r2 = TfLiteInterpreterGetSignatureRunner(si, "serve");
    EXPECT(r2 != NULL && TfLiteSignatureRunnerGetInputTensor(r2, "x") == x);
    TfLiteSignatureRunnerDelete(r2);
    TfLiteSignatureRunnerDelete(r);
    TfLiteInterpreterDelete(si);
}

/* ---- reset: ResetVariableTensors on a model whose output accumulates a resource
 * variable (state := state + x, initialised to z by CALL_ONCE) ---- */

static void reset(const char *path) {
    TfLiteModel *m = TfLiteModelCreateFromFile(path);
    REQUIRE(m != NULL);
    TfLiteInterpreter *it = TfLiteInterpreterCreate(m, NULL);
    REQUIRE(it != NULL);
    EXPECT(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    TfLiteTensor *in = TfLiteInterpreterGetInputTensor(it, 0);
    const TfLiteTensor *out = TfLiteInterpreterGetOutputTensor(it, 0);
    float x[3] = {0.25f, 1.0f, -1.0f}, y[3], steps[3][3];
    for (int k = 0; k < 3; k++) {
        if (k == 2) EXPECT(TfLiteInterpreterResetVariableTensors(it) == kTfLiteOk);
        EXPECT(TfLiteTensorCopyFromBuffer(in, x, sizeof x) == kTfLiteOk);
        EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteOk);
        EXPECT(TfLiteTensorCopyToBuffer(out, y, sizeof y) == kTfLiteOk);
        memcpy(steps[k], y, sizeof y);
    }
    /* z = {1, -2, 0.5}: the state streams across invokes. */
    EXPECT(steps[0][0] == 1.25f && steps[1][0] == 1.5f);
    /* ResetVariableTensors resets variable tensors (is_variable), not resource
     * variables: on both libraries the stream goes on. */
    EXPECT(steps[2][0] == 1.75f);
    printf("after reset: %g (resource variables kept: 1.75)\n", steps[2][0]);
    TfLiteInterpreterDelete(it);
    TfLiteModelDelete(m);
}

/* ---- run: seeded inputs, outputs dumped for comparison with another runtime ---- */

static void dump_tensor(FILE *f, const TfLiteTensor *t) {
    int32_t type = TfLiteTensorType(t), rank = TfLiteTensorNumDims(t);
    uint64_t n = TfLiteTensorByteSize(t);
    fwrite(&type, 4, 1, f);
    fwrite(&rank, 4, 1, f);
    for (int d = 0; d < rank; d++) {
        int32_t v = TfLiteTensorDim(t, d);
        fwrite(&v, 4, 1, f);
    }
    fwrite(&n, 8, 1, f);
    void *buf = malloc(n ? n : 1);
    EXPECT(TfLiteTensorCopyToBuffer(t, buf, n) == kTfLiteOk);
    fwrite(buf, 1, n, f);
    free(buf);
}

/* Runs `invokes` times with seeded inputs; returns the outputs of every invoke,
 * concatenated, and writes inputs and outputs to `dump` when it is not NULL. Input 0 is
 * written through its live buffer (TfLiteTensorData), the others copied. */
static unsigned char *run_interpreter(TfLiteInterpreter *it, int invokes, FILE *dump, size_t *total) {
    int n_in = TfLiteInterpreterGetInputTensorCount(it), n_out = TfLiteInterpreterGetOutputTensorCount(it);
    unsigned char *all = NULL;
    *total = 0;
    for (int k = 0; k < invokes; k++) {
        for (int i = 0; i < n_in; i++) {
            TfLiteTensor *t = TfLiteInterpreterGetInputTensor(it, i);
            size_t n = TfLiteTensorByteSize(t);
            if (i == 0) {
                REQUIRE(TfLiteTensorData(t) != NULL || n == 0);
                if (n) fill(TfLiteTensorData(t), n, TfLiteTensorType(t), (uint64_t)(k * 31 + i));
            } else {
                void *buf = malloc(n ? n : 1);
                fill(buf, n, TfLiteTensorType(t), (uint64_t)(k * 31 + i));
                EXPECT(TfLiteTensorCopyFromBuffer(t, buf, n) == kTfLiteOk);
                free(buf);
            }
        }
        EXPECT(TfLiteInterpreterInvoke(it) == kTfLiteOk);
        if (dump) {
            for (int i = 0; i < n_in; i++) dump_tensor(dump, TfLiteInterpreterGetInputTensor(it, i));
            for (int o = 0; o < n_out; o++) dump_tensor(dump, TfLiteInterpreterGetOutputTensor(it, o));
        }
        for (int o = 0; o < n_out; o++) {
            const TfLiteTensor *t = TfLiteInterpreterGetOutputTensor(it, o);
            size_t n = TfLiteTensorByteSize(t);
            all = realloc(all, *total + n + 1);
            EXPECT(TfLiteTensorCopyToBuffer(t, all + *total, n) == kTfLiteOk);
            *total += n;
        }
    }
    return all;
}

/* The same invokes through the model's first signature, on a fresh interpreter. */
static unsigned char *run_signature(TfLiteInterpreter *it, int invokes, size_t *total) {
    TfLiteSignatureRunner *r = TfLiteInterpreterGetSignatureRunner(it, TfLiteInterpreterGetSignatureKey(it, 0));
    REQUIRE(r != NULL);
    EXPECT(TfLiteSignatureRunnerAllocateTensors(r) == kTfLiteOk);
    size_t n_in = TfLiteSignatureRunnerGetInputCount(r), n_out = TfLiteSignatureRunnerGetOutputCount(r);
    EXPECT((int)n_in == TfLiteInterpreterGetInputTensorCount(it));
    unsigned char *all = NULL;
    *total = 0;
    for (int k = 0; k < invokes; k++) {
        /* Signature order may differ from the model's: match inputs by tensor name. */
        for (int i = 0; i < TfLiteInterpreterGetInputTensorCount(it); i++) {
            const char *want = TfLiteTensorName(TfLiteInterpreterGetInputTensor(it, i));
            for (size_t j = 0; j < n_in; j++) {
                TfLiteTensor *t = TfLiteSignatureRunnerGetInputTensor(r, TfLiteSignatureRunnerGetInputName(r, (int32_t)j));
                if (strcmp(TfLiteTensorName(t), want) != 0) continue;
                size_t n = TfLiteTensorByteSize(t);
                void *buf = malloc(n ? n : 1);
                fill(buf, n, TfLiteTensorType(t), (uint64_t)(k * 31 + i));
                EXPECT(TfLiteTensorCopyFromBuffer(t, buf, n) == kTfLiteOk);
                free(buf);
            }
        }
        EXPECT(TfLiteSignatureRunnerInvoke(r) == kTfLiteOk);
        for (int o = 0; o < TfLiteInterpreterGetOutputTensorCount(it); o++) {
            const char *want = TfLiteTensorName(TfLiteInterpreterGetOutputTensor(it, o));
            for (size_t j = 0; j < n_out; j++) {
                const TfLiteTensor *t = TfLiteSignatureRunnerGetOutputTensor(r, TfLiteSignatureRunnerGetOutputName(r, (int32_t)j));
                if (strcmp(TfLiteTensorName(t), want) != 0) continue;
                size_t n = TfLiteTensorByteSize(t);
                all = realloc(all, *total + n + 1);
                EXPECT(TfLiteTensorCopyToBuffer(t, all + *total, n) == kTfLiteOk);
                *total += n;
            }
        }
    }
    TfLiteSignatureRunnerDelete(r);
    return all;
}

static void run(const char *path, const char *dump_path, int invokes) {
    size_t len = 0;
    unsigned char *bytes = read_file(path, &len);
    REQUIRE(bytes != NULL);
    TfLiteModel *m = TfLiteModelCreate(bytes, len);
    REQUIRE(m != NULL);
    TfLiteInterpreterOptions *o = TfLiteInterpreterOptionsCreate();
    TfLiteInterpreterOptionsSetNumThreads(o, 2);
    TfLiteInterpreter *it = TfLiteInterpreterCreate(m, o);
    REQUIRE(it != NULL);
    EXPECT(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    FILE *dump = fopen(dump_path, "wb");
    REQUIRE(dump != NULL);
    size_t n1 = 0, n2 = 0;
    unsigned char *a = run_interpreter(it, invokes, dump, &n1);
    fclose(dump);
    printf("%s: %d invokes, %zu output bytes each\n", path, invokes, n1 / (size_t)invokes);
    if (TfLiteInterpreterGetSignatureCount(it) > 0) {
        /* A fresh interpreter, so that streaming state starts over as it did above. */
        TfLiteInterpreter *fresh = TfLiteInterpreterCreate(m, o);
        REQUIRE(fresh != NULL);
        unsigned char *b = run_signature(fresh, invokes, &n2);
        EXPECT(n1 == n2 && memcmp(a, b, n1) == 0);
        printf("signature runner: %s\n", n1 == n2 && memcmp(a, b, n1) == 0 ? "same outputs" : "DIFFERENT outputs");
        free(b);
        TfLiteInterpreterDelete(fresh);
    }
    free(a);
    TfLiteInterpreterDelete(it);
    TfLiteInterpreterOptionsDelete(o);
    TfLiteModelDelete(m);
    free(bytes);
}

/* ---- bench: per-call costs ---- */

static void bench(const char *path, int iters) {
    TfLiteModel *m = TfLiteModelCreateFromFile(path);
    REQUIRE(m != NULL);
    TfLiteInterpreter *it = TfLiteInterpreterCreate(m, NULL);
    REQUIRE(it != NULL);
    REQUIRE(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    TfLiteTensor *in = TfLiteInterpreterGetInputTensor(it, 0);
    const TfLiteTensor *out = TfLiteInterpreterGetOutputTensor(it, 0);
    size_t n = TfLiteTensorByteSize(in), no = TfLiteTensorByteSize(out);
    void *buf = calloc(1, n), *obuf = calloc(1, no);
    fill(buf, n, TfLiteTensorType(in), 7);
    for (int i = 0; i < iters / 10 + 1; i++) REQUIRE(TfLiteInterpreterInvoke(it) == kTfLiteOk);
    double t0 = now_ns();
    for (int i = 0; i < iters; i++) REQUIRE(TfLiteInterpreterInvoke(it) == kTfLiteOk);
    double t1 = now_ns();
    for (int i = 0; i < iters; i++) REQUIRE(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    double t2 = now_ns();
    for (int i = 0; i < iters; i++) REQUIRE(TfLiteTensorCopyFromBuffer(in, buf, n) == kTfLiteOk);
    double t3 = now_ns();
    for (int i = 0; i < iters; i++) REQUIRE(TfLiteTensorCopyToBuffer(out, obuf, no) == kTfLiteOk);
    double t4 = now_ns();
    /* The per-frame pattern of streaming apps: resize to the shape it has, allocate. */
    int dims[16], rank = TfLiteTensorNumDims(in);
    for (int d = 0; d < rank && d < 16; d++) dims[d] = TfLiteTensorDim(in, d);
    for (int i = 0; i < iters; i++) {
        REQUIRE(TfLiteInterpreterResizeInputTensor(it, 0, dims, rank) == kTfLiteOk);
        REQUIRE(TfLiteInterpreterAllocateTensors(it) == kTfLiteOk);
    }
    double t5 = now_ns();
    printf("%s\n  Invoke %.0f ns, AllocateTensors (nothing changed) %.1f ns, CopyFromBuffer (%zu B) %.1f ns, CopyToBuffer (%zu B) %.1f ns, "
           "Resize (same shape) + AllocateTensors %.1f ns\n",
           TfLiteVersion(), (t1 - t0) / iters, (t2 - t1) / iters, n, (t3 - t2) / iters, no, (t4 - t3) / iters, (t5 - t4) / iters);
    free(buf);
    free(obuf);
    TfLiteInterpreterDelete(it);
    TfLiteModelDelete(m);
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "errors") == 0) {
        errors(argv[2], argv[3], argv[4]);
    } else if (argc >= 3 && strcmp(argv[1], "reset") == 0) {
        reset(argv[2]);
    } else if (argc >= 5 && strcmp(argv[1], "run") == 0) {
        run(argv[2], argv[3], atoi(argv[4]));
    } else if (argc >= 4 && strcmp(argv[1], "bench") == 0) {
        bench(argv[2], atoi(argv[3]));
    } else {
        fprintf(stderr, "usage: %s errors DEMO SIG UNKNOWN_OP | reset ACC | run MODEL DUMP N | bench MODEL N\n", argv[0]);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("tflite c test: ok\n");
    return 0;
}
