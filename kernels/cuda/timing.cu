/*
 * kernels/cuda/timing.cu - device timing for the CUDA backend: marks in the backend's stream (CUDA events) and
 * the device time between two of them (engine/backend.h: event_create, event_record, event_elapsed,
 * event_destroy; the trainer's use: tools/cmd_train.c, the epoch's GPU time).
 *
 * A mark is a cudaEvent_t created with timing enabled. Recording it is cudaEventRecord on ctx->stream: no host
 * wait, so marks around an epoch add no synchronisation to it. A mark may not be recorded while the stream is
 * being captured into a CUDA Graph (graph.cu): there cudaEventRecord would become a graph node without a time
 * stamp, so event_record refuses it (checked on the context's own recording state and on the stream's).
 *
 * Sources: CUDA Runtime API, "Event Management" (cudaEventCreate, cudaEventRecord, cudaEventSynchronize,
 * cudaEventElapsedTime: milliseconds, resolution about 0.5 us) and "Stream Management" (cudaStreamIsCapturing).
 */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

mpt_status mpt_cuda_event_create(mpt_backend *be, void **out) {
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    *out = NULL;
    MPT_ASSERTF(ctx->capture == NULL, "event_create: called while a recording is in progress");
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreate(&ev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mpt_errorf(MPT_ERR_DEVICE, "cudaEventCreate failed: %s", mpt_cuda_describe(e));
    }
    *out = (void *)ev;
    return MPT_OK;
}

void mpt_cuda_event_record(mpt_backend *be, void *mark) {
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    MPT_ASSERTF(mark != NULL, "event_record: no mark (event_create first)");
    MPT_ASSERTF(ctx->capture == NULL, "event_record: called while the step is being recorded as a CUDA Graph (a "
                                      "mark recorded into a graph takes no time stamp)");
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    MPT_CUDA_CHECK(cudaStreamIsCapturing(ctx->stream, &cs));
    MPT_ASSERTF(cs == cudaStreamCaptureStatusNone, "event_record: the backend's stream is being captured");
    MPT_CUDA_CHECK(cudaEventRecord((cudaEvent_t)mark, ctx->stream));
}

mpt_status mpt_cuda_event_elapsed(mpt_backend *be, void *start, void *end, double *seconds) {
    (void)be;
    *seconds = NAN;
    MPT_ASSERTF(start != NULL && end != NULL, "event_elapsed: no mark (event_create first)");
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)end);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mpt_errorf(MPT_ERR_DEVICE, "cudaEventSynchronize on the end mark failed: %s", mpt_cuda_describe(e));
    }
    float ms = 0.0f;
    e = cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mpt_errorf(MPT_ERR_DEVICE, "cudaEventElapsedTime failed (both marks must have been recorded, outside "
                                          "a CUDA Graph): %s", mpt_cuda_describe(e));
    }
    *seconds = 1e-3 * (double)ms;
    return MPT_OK;
}

void mpt_cuda_event_destroy(mpt_backend *be, void *mark) {
    (void)be;
    if (mark) MPT_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)mark));
}
