/* ferrite C API example: load a model, describe it, run it twice (outputs copied
 * into caller buffers, then written there directly), run it with per-op callbacks
 * and a trace, and check the error paths. With --train, also train it (a float
 * classifier ending in SOFTMAX): steps, evaluation, checkpoint and resume, export.
 *
 *   cc -I target/release/include examples/run_model.c target/release/libferrite_c.a -lpthread -ldl -lm
 *   ./a.out models/demo.tflite [--train]
 *
 * Exits 0 when every check holds. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "ferrite.h"

#define CHECK(call)                                                                 \
    do {                                                                            \
        enum FerriteStatus st_ = (call);                                            \
        if (st_ != FERRITE_STATUS_OK) {                                             \
            int32_t sg_ = -1, op_ = -1, t_ = -1;                                    \
            ferrite_session_last_error_location(s, &sg_, &op_, &t_);               \
            fprintf(stderr, "%s:%d: %s -> %d: %s (subgraph %d op %d tensor %d)\n", \
                    __FILE__, __LINE__, #call, (int)st_,                            \
                    ferrite_session_last_error(s), sg_, op_, t_);                   \
            return 1;                                                               \
        }                                                                           \
    } while (0)

#define EXPECT(cond)                                                                \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);     \
            return 1;                                                               \
        }                                                                           \
    } while (0)

static void print_info(const char *what, size_t i, const struct FerriteTensorInfo *t) {
    printf("%s %zu '%s': type %d, shape [", what, i, t->name, (int)t->dtype);
    for (size_t d = 0; d < t->rank; d++) printf(d ? ",%zu" : "%zu", t->dims[d]);
    printf("], %zu bytes\n", t->bytes);
}

/* Reads a whole file into a malloc'd buffer. */
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

/* What the per-op callbacks saw. */
struct seen {
    size_t before, after, bad, ready_bytes, checksum;
    long stop_at;         /* op index whose `before` stops the run, or -1 */
    const char *out_name; /* graph output 0, whose bytes are kept */
    unsigned char *out_copy;
    size_t out_bytes;
};

static size_t type_size(enum FerriteType t) {
    switch (t) {
    case FERRITE_TYPE_FLOAT32: case FERRITE_TYPE_INT32: return 4;
    case FERRITE_TYPE_FLOAT16: case FERRITE_TYPE_INT16: return 2;
    case FERRITE_TYPE_INT8: case FERRITE_TYPE_UINT8: case FERRITE_TYPE_BOOL: return 1;
    case FERRITE_TYPE_INT64: return 8;
    default: return 0;
    }
}

static int on_before(const struct FerriteOpInfo *op, void *user) {
    struct seen *st = user;
    st->before++;
    if (!op->op_type[0] || !op->runs_on[0]) st->bad++;
    for (size_t i = 0; i < op->output_count; i++)
        if (op->outputs[i].state != FERRITE_TENSOR_STATE_PENDING || op->outputs[i].data) st->bad++;
    return (long)op->index == st->stop_at ? FERRITE_FLOW_STOP : FERRITE_FLOW_CONTINUE;
}

static int on_after(const struct FerriteOpInfo *op, void *user) {
    struct seen *st = user;
    st->after++;
    for (size_t i = 0; i < op->output_count; i++) {
        const struct FerriteTensorView *v = &op->outputs[i];
        if (v->state != FERRITE_TENSOR_STATE_READY) {
            if (v->data || v->bytes) st->bad++;
            continue;
        }
        size_t n = type_size(v->dtype);
        for (size_t d = 0; d < v->rank; d++) n *= v->dims[d];
        if (!v->data || (type_size(v->dtype) && n != v->bytes)) st->bad++;
        /* Read every byte (the sanitizer checks the view is real memory). */
        size_t sum = 0;
        for (size_t k = 0; k < v->bytes; k++) sum += ((const unsigned char *)v->data)[k];
        st->ready_bytes += v->bytes;
        st->checksum += sum;
        if (st->out_name && strcmp(v->name, st->out_name) == 0) {
            free(st->out_copy);
            st->out_copy = malloc(v->bytes ? v->bytes : 1);
            memcpy(st->out_copy, v->data, v->bytes);
            st->out_bytes = v->bytes;
        }
    }
    return FERRITE_FLOW_CONTINUE;
}

/* Runs with callbacks and a trace: every op seen before and after, the views are
 * real memory of the sizes their shapes say, the last op's output is the model's
 * output; a callback stops a run; the trace file is Chrome JSON with op slices. */
static int observe(struct FerriteSession *s, void **outs, size_t n_out) {
    struct FerriteTensorInfo t0;
    CHECK(ferrite_session_output_info(s, 0, &t0));
    struct seen st = {.stop_at = -1, .out_name = t0.name};
    bool completed = false;
    CHECK(ferrite_session_run_with_callbacks(s, on_before, on_after, &st, &completed));
    printf("callbacks: %zu ops before, %zu after, %zu ready bytes (byte sum %zu)\n", st.before, st.after, st.ready_bytes, st.checksum);
    EXPECT(completed && st.bad == 0 && st.before > 0 && st.before == st.after);
    /* The callbacks saw the output the run copied into the bound buffer. */
    EXPECT(n_out > 0 && st.out_copy && st.out_bytes == t0.bytes && memcmp(st.out_copy, outs[0], t0.bytes) == 0);
    free(st.out_copy);

    struct seen stop = {.stop_at = 0};
    CHECK(ferrite_session_run_with_callbacks(s, on_before, on_after, &stop, &completed));
    EXPECT(!completed && stop.before == 1 && stop.after == 0);
    const void *data = NULL;
    size_t bytes = 0;
    EXPECT(ferrite_session_output_data(s, 0, &data, &bytes) == FERRITE_STATUS_INVALID_STATE);
    CHECK(ferrite_session_run_with_callbacks(s, NULL, NULL, NULL, NULL));

    char path[64];
    snprintf(path, sizeof path, "/tmp/ferrite-capi-trace-%ld.json", (long)getpid());
    EXPECT(ferrite_session_write_trace(s, NULL) == FERRITE_STATUS_NULL_ARGUMENT);
    CHECK(ferrite_session_write_trace(s, path));
    size_t len = 0;
    unsigned char *trace = read_file(path, &len);
    remove(path);
    EXPECT(trace != NULL && len > 0);
    char *text = malloc(len + 1);
    memcpy(text, trace, len);
    text[len] = 0;
    free(trace);
    int ok = strncmp(text, "{\"displayTimeUnit\"", 18) == 0 && strstr(text, "\"cat\":\"op\"") && strstr(text, "\"cat\":\"prepare\"");
    free(text);
    EXPECT(ok);
    printf("trace: %zu bytes\n", len);
    return 0;
}

static int run(struct FerriteSession *s, int threads) {
    /* Tracing asked for before the thread count is set survives it. */
    CHECK(ferrite_session_set_tracing(s, true));
    CHECK(ferrite_session_set_num_threads(s, (size_t)threads));
    /* Backends in order of preference: $FERRITE_EXAMPLE_BACKENDS (e.g. "gpu,cpu" with
       a library built with the gpu feature), else the reference kernels first when the
       library has them (the `reference` feature), else cpu. An unknown name is an
       error; the thread count set above is kept. */
    const char *backends = getenv("FERRITE_EXAMPLE_BACKENDS");
    EXPECT(ferrite_session_set_backends(s, "no-such-backend,cpu") == FERRITE_STATUS_INVALID_ARGUMENT);
    EXPECT(ferrite_session_set_backends(s, NULL) == FERRITE_STATUS_NULL_ARGUMENT);
    if (backends) {
        CHECK(ferrite_session_set_backends(s, backends));
    } else if (ferrite_session_set_backends(s, "reference,cpu") != FERRITE_STATUS_OK) {
        CHECK(ferrite_session_set_backends(s, "cpu"));
    }
    size_t n_in = 0, n_out = 0;
    CHECK(ferrite_session_input_count(s, &n_in));
    CHECK(ferrite_session_output_count(s, &n_out));

    /* Running before prepare is a state error, not a crash. */
    EXPECT(ferrite_session_run(s) == FERRITE_STATUS_INVALID_STATE);
    EXPECT(strlen(ferrite_session_last_error(s)) > 0);
    /* A state error concerns no part of the model: no location. */
    int32_t where_op = 7;
    EXPECT(ferrite_session_last_error_location(s, NULL, &where_op, NULL) == FERRITE_STATUS_OK);
    EXPECT(where_op == -1);
    CHECK(ferrite_session_prepare(s));
    EXPECT(ferrite_session_set_num_threads(s, 2) == FERRITE_STATUS_INVALID_STATE);

    float **ins = calloc(n_in, sizeof(float *));
    for (size_t i = 0; i < n_in; i++) {
        struct FerriteTensorInfo t;
        CHECK(ferrite_session_input_info(s, i, &t));
        print_info("input", i, &t);
        size_t idx = 99;
        CHECK(ferrite_session_index_by_name(s, t.name, false, &idx));
        EXPECT(idx == i);
        ins[i] = malloc(t.bytes ? t.bytes : 1);
        unsigned char *b = (unsigned char *)ins[i];
        if (t.dtype == FERRITE_TYPE_FLOAT32)
            for (size_t k = 0; k < t.bytes / 4; k++) ins[i][k] = (float)((k * 7919) % 200) / 100.0f - 1.0f;
        else
            for (size_t k = 0; k < t.bytes; k++) b[k] = (unsigned char)(k * 31);
        CHECK(ferrite_session_set_input(s, i, ins[i], t.bytes));
    }

    /* Run 1: outputs read in place and copied into an undersized buffer (refused). */
    CHECK(ferrite_session_run(s));
    double first = 0;
    for (size_t i = 0; i < n_out; i++) {
        struct FerriteTensorInfo t;
        CHECK(ferrite_session_output_info(s, i, &t));
        print_info("output", i, &t);
        const void *data = NULL;
        size_t bytes = 0;
        CHECK(ferrite_session_output_data(s, i, &data, &bytes));
        EXPECT(bytes == t.bytes);
        if (t.dtype == FERRITE_TYPE_FLOAT32)
            for (size_t k = 0; k < bytes / 4; k++) first += ((const float *)data)[k];
    }

    /* Run 2: every output bound, so kernels write the caller's buffers directly. */
    void **outs = calloc(n_out, sizeof(void *));
    for (size_t i = 0; i < n_out; i++) {
        struct FerriteTensorInfo t;
        CHECK(ferrite_session_output_info(s, i, &t));
        outs[i] = malloc(t.bytes ? t.bytes : 1);
        CHECK(ferrite_session_set_output(s, i, outs[i], t.bytes));
    }
    CHECK(ferrite_session_run(s));
    double second = 0;
    for (size_t i = 0; i < n_out; i++) {
        struct FerriteTensorInfo t;
        CHECK(ferrite_session_output_info(s, i, &t));
        if (t.dtype == FERRITE_TYPE_FLOAT32)
            for (size_t k = 0; k < t.bytes / 4; k++) second += ((const float *)outs[i])[k];
    }
    printf("output checksum %.6f (in place) %.6f (bound)\n", first, second);
    EXPECT(first == second);
    if (observe(s, outs, n_out)) return 1;

    /* A bound buffer too small for its output. */
    if (n_out > 0) {
        struct FerriteTensorInfo t0;
        CHECK(ferrite_session_output_info(s, 0, &t0));
        if (t0.bytes > 0) {
            CHECK(ferrite_session_set_output(s, 0, outs[0], t0.bytes - 1));
            EXPECT(ferrite_session_run(s) != FERRITE_STATUS_OK);
        }
    }

    /* Argument checks. */
    struct FerriteTensorInfo t;
    EXPECT(ferrite_session_input_info(s, n_in, &t) == FERRITE_STATUS_INVALID_ARGUMENT);
    EXPECT(ferrite_session_input_info(s, 0, NULL) == FERRITE_STATUS_NULL_ARGUMENT);
    EXPECT(ferrite_session_set_input(s, 0, NULL, 4) == FERRITE_STATUS_NULL_ARGUMENT);
    EXPECT(ferrite_session_prepare(NULL) == FERRITE_STATUS_NULL_ARGUMENT);
    size_t idx;
    EXPECT(ferrite_session_index_by_name(s, "no such tensor", false, &idx) != FERRITE_STATUS_OK);

    for (size_t i = 0; i < n_in; i++) free(ins[i]);
    for (size_t i = 0; i < n_out; i++) free(outs[i]);
    free(ins);
    free(outs);
    return 0;
}

/* Binds every input of `s` (prepared first) to buffers filled the same way for
 * every session; the buffers are the caller's and stay bound, so they live in
 * `bufs` until the sessions are closed. */
static int fill_inputs(struct FerriteSession *s, unsigned char **bufs, size_t max) {
    size_t n_in = 0;
    CHECK(ferrite_session_input_count(s, &n_in));
    EXPECT(n_in <= max);
    for (size_t i = 0; i < n_in; i++) {
        struct FerriteTensorInfo t;
        CHECK(ferrite_session_input_info(s, i, &t));
        if (!bufs[i]) {
            bufs[i] = malloc(t.bytes ? t.bytes : 1);
            for (size_t k = 0; k < t.bytes; k++) bufs[i][k] = (unsigned char)((k * 13) % 61);
        }
        CHECK(ferrite_session_set_input(s, i, bufs[i], t.bytes));
    }
    return 0;
}

/* One thread's share of the concurrent check: runs its session `runs` times and
 * compares output 0 with the expected bytes each time. */
struct worker {
    struct FerriteSession *s;
    const unsigned char *want;
    size_t bytes;
    int failed;
};

static void *work(void *arg) {
    struct worker *w = arg;
    for (int r = 0; r < 4 && !w->failed; r++) {
        const void *data = NULL;
        size_t bytes = 0;
        if (ferrite_session_run(w->s) != FERRITE_STATUS_OK || ferrite_session_output_data(w->s, 0, &data, &bytes) != FERRITE_STATUS_OK ||
            bytes != w->bytes || memcmp(data, w->want, bytes) != 0)
            w->failed = 1;
    }
    return NULL;
}

/* Sessions sharing one model's weights: made from a session, they give the bits
 * of that session, run at the same time on two threads, and close in any order
 * (the first one, holding the load, closed before the others). The two that run
 * on threads also share one arena for their intermediates. */
static int shared(const char *path) {
    char err[256];
    struct FerriteSession *first = NULL, *s = NULL, *third = NULL;
    EXPECT(ferrite_session_create_shared(NULL, &s, err, sizeof err) == FERRITE_STATUS_NULL_ARGUMENT);
    CHECK(ferrite_session_create_from_file(path, &first, err, sizeof err));
    CHECK(ferrite_session_create_shared(first, &s, err, sizeof err));
    CHECK(ferrite_session_create_shared(s, &third, err, sizeof err));
    CHECK(ferrite_session_set_shared_arena(s, true));
    CHECK(ferrite_session_set_shared_arena(third, true));
    CHECK(ferrite_session_set_num_threads(third, 2));
    struct FerriteSession *all[3] = {first, s, third};
    unsigned char *bufs[8] = {0};
    for (int k = 0; k < 3; k++) {
        CHECK(ferrite_session_prepare(all[k]));
        if (fill_inputs(all[k], bufs, 8)) return 1;
    }
    CHECK(ferrite_session_run(first));
    const void *data = NULL;
    size_t bytes = 0;
    CHECK(ferrite_session_output_data(first, 0, &data, &bytes));
    unsigned char *want = malloc(bytes ? bytes : 1);
    memcpy(want, data, bytes);
    ferrite_session_close(first);
    struct worker w[2] = {{s, want, bytes, 0}, {third, want, bytes, 0}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++) EXPECT(pthread_create(&th[k], NULL, work, &w[k]) == 0);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    EXPECT(!w[0].failed && !w[1].failed);
    ferrite_session_close(third);
    w[0].failed = 0;
    work(&w[0]);
    EXPECT(!w[0].failed);
    ferrite_session_close(s);
    free(want);
    for (int i = 0; i < 8; i++) free(bufs[i]);
    printf("shared weights: 3 sessions of one model (2 sharing an arena), %zu output bytes identical on 2 threads\n", bytes);
    return 0;
}

/* Trains the model on one fixed batch of generated data: the loss falls; a
 * checkpoint resumes bit-identically; the exported model loads and runs. */
static int train(struct FerriteSession *s) {
    struct FerriteTrainInfo info = {
        .learning_rate = 0.05f, .batch_size = 4, .loss = FERRITE_LOSS_CATEGORICAL_CROSS_ENTROPY,
        .loss_reduction = FERRITE_LOSS_REDUCTION_SUM_OVER_BATCH_SIZE, .optimizer = FERRITE_OPTIMIZER_SGD,
        .momentum = 0.0f, .nesterov = false, .num_trainable_ops = -1, .threads = 2,
    };
    /* State and argument errors. */
    EXPECT(ferrite_session_train_prepare(s) == FERRITE_STATUS_INVALID_STATE);
    EXPECT(ferrite_session_train_step(s, true) == FERRITE_STATUS_INVALID_STATE);
    struct FerriteTrainInfo bad = info;
    bad.loss = 7;
    EXPECT(ferrite_session_train_set_info(s, &bad) == FERRITE_STATUS_INVALID_ARGUMENT);
    EXPECT(ferrite_session_train_set_info(s, NULL) == FERRITE_STATUS_NULL_ARGUMENT);
    CHECK(ferrite_session_train_set_info(s, &info));
    CHECK(ferrite_session_train_prepare(s));

    struct FerriteTensorInfo xt, yt;
    CHECK(ferrite_session_train_input_info(s, 0, &xt));
    CHECK(ferrite_session_train_expected_info(s, &yt));
    print_info("train input", 0, &xt);
    print_info("train expected", 0, &yt);
    EXPECT(xt.dims[0] == 4 && yt.dims[0] == 4 && yt.rank == 2);
    float *x = malloc(xt.bytes), *y = calloc(yt.bytes / 4, sizeof(float));
    EXPECT(x && y);
    for (size_t k = 0; k < xt.bytes / 4; k++) x[k] = (float)((k * 7919) % 200) / 100.0f - 1.0f;
    size_t classes = yt.dims[1];
    for (size_t b = 0; b < 4; b++) y[b * classes + (b * 3) % classes] = 1.0f;

    EXPECT(ferrite_session_train_step(s, true) == FERRITE_STATUS_INVALID_STATE); /* nothing bound */
    CHECK(ferrite_session_train_set_input(s, 0, x, xt.bytes));
    CHECK(ferrite_session_train_set_expected(s, 0, y, yt.bytes - 4));
    EXPECT(ferrite_session_train_step(s, true) == FERRITE_STATUS_INVALID_ARGUMENT); /* short labels */
    CHECK(ferrite_session_train_set_expected(s, 0, y, yt.bytes));
    float loss = 0, first = 0, acc = -1;
    EXPECT(ferrite_session_train_loss(s, 0, &loss) == FERRITE_STATUS_INVALID_STATE); /* no step yet */
    for (int step = 0; step < 20; step++) {
        CHECK(ferrite_session_train_step(s, true));
        CHECK(ferrite_session_train_loss(s, 0, &loss));
        if (step == 0) first = loss;
    }
    CHECK(ferrite_session_train_step(s, false));
    CHECK(ferrite_session_train_loss(s, 0, &loss));
    CHECK(ferrite_session_train_accuracy(s, &acc));
    printf("train: loss %.6f -> %.6f after 20 steps, accuracy %.2f\n", first, loss, acc);
    EXPECT(loss < first && acc >= 0.0f && acc <= 1.0f);

    /* Checkpoint, two steps, restore, the same two steps: the same losses, bit for bit. */
    char ckpt[96], out[96];
    snprintf(ckpt, sizeof ckpt, "/tmp/ferrite-capi-ckpt-%ld.bin", (long)getpid());
    snprintf(out, sizeof out, "/tmp/ferrite-capi-trained-%ld.tflite", (long)getpid());
    CHECK(ferrite_session_train_save_checkpoint(s, ckpt));
    float a[2], b[2];
    for (int i = 0; i < 2; i++) {
        CHECK(ferrite_session_train_step(s, true));
        CHECK(ferrite_session_train_loss(s, 0, &a[i]));
    }
    CHECK(ferrite_session_train_load_checkpoint(s, ckpt));
    for (int i = 0; i < 2; i++) {
        CHECK(ferrite_session_train_step(s, true));
        CHECK(ferrite_session_train_loss(s, 0, &b[i]));
    }
    remove(ckpt);
    EXPECT(memcmp(a, b, sizeof a) == 0);
    EXPECT(ferrite_session_train_load_checkpoint(s, "/nonexistent/ckpt") != FERRITE_STATUS_OK);
    EXPECT(ferrite_session_train_export(s, NULL) == FERRITE_STATUS_NULL_ARGUMENT);
    CHECK(ferrite_session_train_export(s, out));

    /* The exported model runs: its output for the batch's first sample sums to 1. */
    char err[256];
    struct FerriteSession *e = NULL;
    if (ferrite_session_create_from_file(out, &e, err, sizeof err) != FERRITE_STATUS_OK) {
        fprintf(stderr, "exported model: %s\n", err);
        remove(out);
        return 1;
    }
    remove(out); /* memory-mapped: the mapping stays valid */
    struct FerriteSession *keep = s;
    s = e;
    CHECK(ferrite_session_prepare(s));
    CHECK(ferrite_session_set_input(s, 0, x, xt.bytes / 4));
    CHECK(ferrite_session_run(s));
    const void *data = NULL;
    size_t bytes = 0;
    CHECK(ferrite_session_output_data(s, 0, &data, &bytes));
    double sum = 0;
    for (size_t k = 0; k < bytes / 4; k++) sum += ((const float *)data)[k];
    ferrite_session_close(e);
    s = keep;
    printf("exported model: output sums to %.6f\n", sum);
    EXPECT(sum > 0.999 && sum < 1.001);
    free(x);
    free(y);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.tflite [--train]\n", argv[0]);
        return 2;
    }
    char err[256];
    struct FerriteSession *s = NULL;

    /* A missing file: an error message, no session. */
    EXPECT(ferrite_session_create_from_file("/nonexistent.tflite", &s, err, sizeof err) != FERRITE_STATUS_OK);
    EXPECT(s == NULL && strlen(err) > 0);
    printf("missing file: %s\n", err);

    /* From a file (memory-mapped). */
    if (ferrite_session_create_from_file(argv[1], &s, err, sizeof err) != FERRITE_STATUS_OK) {
        fprintf(stderr, "load: %s\n", err);
        return 1;
    }
    int rc = run(s, 1);
    ferrite_session_close(s);
    if (rc) return rc;
    s = NULL;
    if (shared(argv[1])) return 1;

    /* From a caller buffer (used in place), on two threads. */
    size_t len = 0;
    unsigned char *model = read_file(argv[1], &len);
    EXPECT(model != NULL);
    CHECK(ferrite_session_create_from_buffer(model, len, &s, err, sizeof err));
    rc = run(s, 2);
    ferrite_session_close(s);

    /* Truncated bytes: an error, never a crash. */
    EXPECT(ferrite_session_create_from_buffer(model, len / 3, &s, err, sizeof err) != FERRITE_STATUS_OK);
    printf("truncated model: %s\n", err);
    free(model);
    if (rc == 0 && argc > 2 && strcmp(argv[2], "--train") == 0) {
        CHECK(ferrite_session_create_from_file(argv[1], &s, err, sizeof err));
        rc = train(s);
        ferrite_session_close(s);
    }
    if (rc == 0) printf("c api example: ok\n");
    return rc;
}
