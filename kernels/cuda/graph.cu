/*
 * kernels/cuda/graph.cu - step capture for the CUDA backend: the operations of a training step recorded once
 * from the backend's stream as a CUDA Graph, and replayed with one cudaGraphLaunch per step
 * (engine/backend.h: capture_begin, capture_end, replay, replay_free; the trainer's use: engine/train.c).
 *
 * Recording is stream capture (cudaStreamBeginCapture in cudaStreamCaptureModeThreadLocal, so an unsafe call
 * from this thread, such as a cudaMalloc, fails the capture instead of racing it): every kernel launch, cuBLASLt
 * matmul, cuDNN call, cudaMemsetAsync and device-to-device cudaMemcpyAsync enqueued on ctx->stream between begin
 * and end becomes a node, with the arguments it had when recorded. A replay runs those nodes in stream order,
 * so whatever changes between steps must be read from device memory by the kernels (the trainer keeps the
 * iteration, learning rate, loss scale and batch rows there).
 *
 * A recording that fails midway is ended and discarded, never left open: while this thread records, a failed
 * checked call (cuda_internal.cuh, MPT_GPU_CHECK_TEXT) does not abort the process but is kept (the first one,
 * named with its status), and capture_end still calls cudaStreamEndCapture (which ends capture mode even on an
 * invalidated capture), clears the runtime's last error (capture errors are not sticky), discards the graph
 * and returns that first failure. Nothing of a discarded recording has run, so the trainer then runs the same
 * step directly, bit-identically (engine/train.c).
 *
 * The GEMM and convolution records (gpu_kernels.txt) count calls on the host when a call is made. A recorded
 * call does not run, so capture_end takes back what the recording added and keeps it as the per-replay
 * increment that replay() adds: the records count a replayed step as they count a direct one.
 *
 * Sources: CUDA Runtime API, "Graph Management" and "Stream Management" (cudaStreamBeginCapture,
 * cudaStreamEndCapture, cudaGraphInstantiate, cudaGraphLaunch); CUDA Programming Guide, "CUDA Graphs".
 */
#include <stdlib.h>

#include "kernels/cuda/cuda_internal.cuh"

/* The record counters as they stood when a capture began, and the first checked call that failed since. */
struct mpt_cuda_capture {
    int n_gemm, n_conv;
    int64_t *gemm, *conv; /* [n_gemm], [n_conv] */
    int failed;
    char failure[768];    /* "<call> failed: <status> (file:line)" */
};

/* The recording in progress on this thread (capture mode ThreadLocal: a capture belongs to its thread). */
static thread_local mpt_cuda_capture *recording = NULL;

int mpt_cuda_capture_absorb(const char *text, const char *description, const char *file, int line) {
    mpt_cuda_capture *cap = recording;
    if (!cap) return 0;
    if (!cap->failed) {
        cap->failed = 1;
        snprintf(cap->failure, sizeof cap->failure, "%s failed: %s (%s:%d)", text, description, file, line);
    }
    return 1;
}

/* A recorded step: the executable graph and what one replay adds to each record counter. */
typedef struct step_graph {
    cudaGraphExec_t exec;
    int n_gemm, n_conv;
    int64_t *gemm, *conv; /* [n_gemm], [n_conv] increments */
} step_graph;

static int64_t *snapshot(int n, int64_t *(*counter)(void *, int), void *cache) {
    int64_t *v = (int64_t *)calloc((size_t)n, sizeof *v);
    MPT_ASSERT(v != NULL);
    for (int i = 0; i < n; i++) v[i] = *counter(cache, i);
    return v;
}

static int64_t *gemm_counter(void *c, int i) { return mpt_cuda_gemm_counter((mpt_cuda_gemm_cache *)c, i); }
static int64_t *conv_counter(void *c, int i) { return mpt_cuda_conv_counter((mpt_cuda_conv_cache *)c, i); }

/* Counter i's value at the snapshot. Records are only ever appended, so record i of the snapshot is record i
 * now; the last snapshot entry is the unrecorded-calls counter, which is the last counter now. Records created
 * during the recording started at 0. */
static int64_t before(const int64_t *snap, int n_snap, int i, int n_now) {
    if (i == n_now - 1) return snap[n_snap - 1];
    return i < n_snap - 1 ? snap[i] : 0;
}

/* Takes back the counts the recording added (the recorded calls have not run); if inc is not NULL, stores them in
 * *inc / *n_inc as the increments of one replay. */
static void settle_counters(int64_t *(*counter)(void *, int), void *cache, int n_now, const int64_t *snap, int n_snap,
                            int64_t **inc, int *n_inc) {
    int64_t *d = inc ? (int64_t *)calloc((size_t)n_now, sizeof *d) : NULL;
    MPT_ASSERT(inc == NULL || d != NULL);
    for (int i = 0; i < n_now; i++) {
        int64_t *c = counter(cache, i);
        int64_t added = *c - before(snap, n_snap, i, n_now);
        *c -= added;
        if (d) d[i] = added;
    }
    if (inc) {
        *inc = d;
        *n_inc = n_now;
    }
}

static void capture_free(mpt_cuda_capture *cap) {
    if (!cap) return;
    free(cap->gemm);
    free(cap->conv);
    free(cap);
}

mpt_status mpt_cuda_capture_begin(mpt_backend *be) {
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    MPT_ASSERTF(ctx->capture == NULL, "capture_begin: a recording is already in progress");
    if (mpt_cuda_sync_debug_on())
        return mpt_errorf(MPT_ERR_DEVICE, "MPT_CUDA_SYNC_DEBUG=1 synchronises the device after every call, which a "
                                          "CUDA Graph recording cannot contain");
    mpt_cuda_capture *cap = (mpt_cuda_capture *)calloc(1, sizeof *cap);
    MPT_ASSERT(cap != NULL);
    cap->n_gemm = mpt_cuda_gemm_counter_count(ctx->gemm);
    cap->n_conv = mpt_cuda_conv_counter_count(ctx->conv);
    cap->gemm = snapshot(cap->n_gemm, gemm_counter, ctx->gemm);
    cap->conv = snapshot(cap->n_conv, conv_counter, ctx->conv);
    cudaError_t e = cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        capture_free(cap);
        return mpt_errorf(MPT_ERR_DEVICE, "cudaStreamBeginCapture failed: %s", mpt_cuda_describe(e));
    }
    ctx->capture = cap;
    recording = cap;
    return MPT_OK;
}

mpt_status mpt_cuda_capture_end(mpt_backend *be, void **out) {
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    mpt_cuda_capture *cap = ctx->capture;
    MPT_ASSERTF(cap != NULL, "capture_end: no recording in progress (capture_begin first)");
    *out = NULL;
    mpt_cuda_gemm_join(be); /* a side stream's work must rejoin the recorded stream before the capture ends */
    ctx->capture = NULL;
    recording = NULL; /* checks abort again from here on */
    cudaGraph_t graph = NULL;
    /* ends capture mode, also when invalidated, and for every stream in the capture: the side stream of beside
     * GEMMs too, even when join's event record failed on an invalidated capture (CUDA Programming Guide, "CUDA
     * Graphs", "Stream Capture", "Invalidation": cudaStreamEndCapture "will take the associated streams out of
     * capture mode, but will also return an error value and a NULL graph") */
    cudaError_t e = cudaStreamEndCapture(ctx->stream, &graph);
    const int n_gemm = mpt_cuda_gemm_counter_count(ctx->gemm), n_conv = mpt_cuda_conv_counter_count(ctx->conv);
    if (e != cudaSuccess || cap->failed) {
        cudaGetLastError(); /* the capture's errors are not sticky: clear the last error for the direct step */
        settle_counters(gemm_counter, ctx->gemm, n_gemm, cap->gemm, cap->n_gemm, NULL, NULL);
        settle_counters(conv_counter, ctx->conv, n_conv, cap->conv, cap->n_conv, NULL, NULL);
        if (graph) MPT_CUDA_CHECK(cudaGraphDestroy(graph)); /* a graph without the failed call: never replayed */
        mpt_status st;
        if (cap->failed)
            st = mpt_errorf(MPT_ERR_DEVICE, "%s; then cudaStreamEndCapture: %s", cap->failure,
                            e == cudaSuccess ? "cudaSuccess" : mpt_cuda_describe(e));
        else
            st = mpt_errorf(MPT_ERR_DEVICE, "cudaStreamEndCapture failed (an operation of the step could not be "
                                            "recorded): %s", mpt_cuda_describe(e));
        capture_free(cap);
        return st;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    MPT_CUDA_CHECK(cudaGraphDestroy(graph)); /* the executable graph holds its own copy */
    if (e != cudaSuccess) {
        cudaGetLastError();
        settle_counters(gemm_counter, ctx->gemm, n_gemm, cap->gemm, cap->n_gemm, NULL, NULL);
        settle_counters(conv_counter, ctx->conv, n_conv, cap->conv, cap->n_conv, NULL, NULL);
        capture_free(cap);
        return mpt_errorf(MPT_ERR_DEVICE, "cudaGraphInstantiate of the recorded step failed: %s", mpt_cuda_describe(e));
    }
    step_graph *sg = (step_graph *)calloc(1, sizeof *sg);
    MPT_ASSERT(sg != NULL);
    sg->exec = exec;
    settle_counters(gemm_counter, ctx->gemm, n_gemm, cap->gemm, cap->n_gemm, &sg->gemm, &sg->n_gemm);
    settle_counters(conv_counter, ctx->conv, n_conv, cap->conv, cap->n_conv, &sg->conv, &sg->n_conv);
    capture_free(cap);
    *out = sg;
    return MPT_OK;
}

void mpt_cuda_replay(mpt_backend *be, void *graph) {
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    step_graph *sg = (step_graph *)graph;
    MPT_ASSERTF(sg != NULL && ctx->capture == NULL, "replay: %s",
                sg ? "called while a recording is in progress" : "no recorded graph");
    MPT_CUDA_CHECK(cudaGraphLaunch(sg->exec, ctx->stream));
    /* records are only appended: counter i of the recording is counter i now, except the unrecorded-calls one,
     * which is always the last */
    const int n_gemm = mpt_cuda_gemm_counter_count(ctx->gemm), n_conv = mpt_cuda_conv_counter_count(ctx->conv);
    for (int i = 0; i < sg->n_gemm; i++)
        *mpt_cuda_gemm_counter(ctx->gemm, i == sg->n_gemm - 1 ? n_gemm - 1 : i) += sg->gemm[i];
    for (int i = 0; i < sg->n_conv; i++)
        *mpt_cuda_conv_counter(ctx->conv, i == sg->n_conv - 1 ? n_conv - 1 : i) += sg->conv[i];
}

void mpt_cuda_replay_free(mpt_backend *be, void *graph) {
    (void)be;
    step_graph *sg = (step_graph *)graph;
    if (!sg) return;
    MPT_CUDA_CHECK(cudaGraphExecDestroy(sg->exec));
    free(sg->gemm);
    free(sg->conv);
    free(sg);
}
