/*
 * kernels/cuda/backend.cu - the CUDA backend: device discovery, device memory on one stream, library
 * handles, the library-call checks, and the backend table (engine/backend.h).
 *
 * One context per backend: device 0, one CUDA stream created once, and one handle each for cuBLASLt (GEMM),
 * cuDNN (convolution, bound to the stream) and cuRAND (a device Philox4x32-10 generator bound to the stream,
 * for dropout). Every operation is enqueued on that stream, so the training step needs no host
 * synchronisation; to_host() and synchronize() wait (cudaMemcpyAsync + cudaStreamSynchronize). Memory is
 * plain cudaMalloc/cudaFree (no managed memory); the graph accounts its arenas and
 * mpt_backend_reserve_workspace() the workspace, this file accounts only the context's own small scratch.
 *
 * Where the math lives: gemm.cu (cuBLASLt), conv.cu (cuDNN), elementwise.cu (own kernels), optim.cu (the
 * FP32 update pass), fp8.cu (FP8 casts and scale updates); graph.cu (step capture) and timing.cu (CUDA events) complete the table. Sources: CUDA
 * Runtime API, cuBLASLt, cuDNN 9 and cuRAND host API documentation.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

/* ---- status descriptions and the debug synchronisation ---------------------------------------------- */

int mpt_cuda_sync_debug_on(void) {
    static int mode = -1; /* -1: environment not read yet */
    if (mode < 0) {
        const char *e = getenv("MPT_CUDA_SYNC_DEBUG");
        mode = e != NULL && strcmp(e, "1") == 0;
    }
    return mode;
}

/* Whether s is a fault of a running kernel, which the runtime reports at a later call (a launch check, a copy, a
 * synchronisation), often not the one that caused it, and which leaves the context unusable. */
static int asynchronous_fault(cudaError_t s) {
    switch (s) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure: return 1;
    default: return 0;
    }
}

const char *mpt_cuda_describe(cudaError_t s) {
    static thread_local char buf[512];
    snprintf(buf, sizeof buf, "%s (%s, %d)%s", cudaGetErrorString(s), cudaGetErrorName(s), (int)s,
             asynchronous_fault(s) && !mpt_cuda_sync_debug_on()
                 ? "; a kernel fault surfaces at a later call, so the call named here may not be its cause: rerun "
                   "with MPT_CUDA_SYNC_DEBUG=1 (the device is synchronised after every call, the step graph is off) "
                   "to stop at the call that caused it"
                 : "");
    return buf;
}

const char *mpt_cublas_describe(cublasStatus_t s) {
    static thread_local char buf[256];
    snprintf(buf, sizeof buf, "%s (%s, %d)", cublasLtGetStatusString(s), cublasLtGetStatusName(s), (int)s);
    return buf;
}

const char *mpt_cudnn_describe(cudnnStatus_t s) {
    static thread_local char buf[1024];
    char last[768];
    last[0] = '\0';
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(buf, sizeof buf, "%s (%d)%s%s", cudnnGetErrorString(s), (int)s, last[0] ? ": " : "", last);
    return buf;
}

const char *mpt_curand_describe(curandStatus_t s) {
    switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH (header and library versions differ)";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED (generator not initialised)";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED (memory allocation failed)";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR (wrong generator type)";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE (argument out of range)";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE:
        return "CURAND_STATUS_LENGTH_NOT_MULTIPLE (length not a multiple of dimension)";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE (kernel launch failed)";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE (an earlier error is pending)";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED (CUDA initialisation failed)";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH (GPU does not support the operation)";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: break;
    }
    static thread_local char buf[64];
    snprintf(buf, sizeof buf, "curandStatus %d", (int)s);
    return buf;
}

void mpt_cuda_debug_sync(const char *what, const char *file, int line) {
    if (!mpt_cuda_sync_debug_on()) return;
    cudaError_t s = cudaDeviceSynchronize();
    if (s != cudaSuccess)
        mpt_fatal(file, line, "asynchronous CUDA error surfaced right after %s (MPT_CUDA_SYNC_DEBUG=1): %s", what,
                  mpt_cuda_describe(s));
}

void mpt_cuda_require_float(mpt_dtype t, const char *what) {
    MPT_ASSERTF(t == MPT_DTYPE_F32 || t == MPT_DTYPE_F16 || t == MPT_DTYPE_BF16,
                "cuda backend: %s takes F32, F16 or BF16 data, got dtype %d", what, (int)t);
}

void mpt_cuda_require_workspace(mpt_backend *be, size_t bytes, const char *what) {
    MPT_ASSERTF(be->workspace_bytes >= bytes && (bytes == 0 || be->workspace != NULL),
                "cuda backend: %s needs %zu bytes of workspace, %zu reserved (reserve it at graph build time "
                "with mpt_backend_reserve_workspace)", what, bytes, be->workspace_bytes);
}

/* ---- device discovery -------------------------------------------------------------------------------- */

/* A kernel that does nothing: asking for its attributes tells whether this build has code for the GPU. */
static __global__ void probe_kernel(void) {}

/* Fills *p for device 0 and returns MPT_CUDA_USABLE, or returns why there is no device the runtime can open
 * (reason in msg): MPT_CUDA_NO_DRIVER when no NVIDIA driver is installed (cudaDriverGetVersion reports 0),
 * MPT_CUDA_NO_DEVICE when the driver reports no device (cudaErrorNoDevice, or a count of 0), MPT_CUDA_BROKEN
 * for every other failure (an old driver: cudaErrorInsufficientDriver; a driver/library mismatch; devices
 * busy or unavailable; ...), which is a broken setup rather than a machine without a GPU. */
static mpt_cuda_probe_result query_device(cudaDeviceProp *p, char *msg, size_t len) {
    int driver = 0, runtime = 0;
    cudaError_t e = cudaDriverGetVersion(&driver);
    if (e == cudaSuccess && driver == 0) {
        if (msg) snprintf(msg, len, "no usable GPU: no NVIDIA driver is installed (libcuda.so not found)");
        return MPT_CUDA_NO_DRIVER;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (msg) snprintf(msg, len, "CUDA error: cudaDriverGetVersion failed: %s", mpt_cuda_describe(e));
        return MPT_CUDA_BROKEN;
    }
    cudaRuntimeGetVersion(&runtime);
    int n = 0;
    e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
        cudaGetLastError();
        if (msg)
            snprintf(msg, len, "no usable GPU: the NVIDIA driver %d.%d reports no CUDA device", driver / 1000,
                     (driver % 1000) / 10);
        return MPT_CUDA_NO_DEVICE;
    }
    if (e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        if (msg)
            snprintf(msg, len,
                     "CUDA error: the NVIDIA driver supports CUDA %d.%d, older than the runtime %d.%d this build "
                     "uses (%s); CUDA 13 needs an R580 or newer driver",
                     driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10,
                     mpt_cuda_describe(e));
        return MPT_CUDA_BROKEN;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (msg)
            snprintf(msg, len, "CUDA error: cudaGetDeviceCount failed with driver %d.%d, runtime %d.%d: %s",
                     driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10,
                     mpt_cuda_describe(e));
        return MPT_CUDA_BROKEN;
    }
    e = cudaGetDeviceProperties(p, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (msg) snprintf(msg, len, "CUDA error: cudaGetDeviceProperties(0) failed: %s", mpt_cuda_describe(e));
        return MPT_CUDA_BROKEN;
    }
    return MPT_CUDA_USABLE;
}

extern "C" mpt_cuda_probe_result mpt_cuda_probe(char *msg, size_t len) {
    cudaDeviceProp p;
    mpt_cuda_probe_result r = query_device(&p, msg, len);
    if (r != MPT_CUDA_USABLE) return r;
    if (p.major < 8) {
        if (msg)
            snprintf(msg, len, "no usable GPU: %s has compute capability %d.%d; mptrain needs 8.0 (Ampere) or newer",
                     p.name, p.major, p.minor);
        return MPT_CUDA_UNSUPPORTED;
    }
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, probe_kernel);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (msg)
            snprintf(msg, len,
                     "CUDA error: GPU %s (compute capability %d.%d) cannot run this build's code (%s): reconfigure "
                     "with -Dgpu_arch=%d%d",
                     p.name, p.major, p.minor, mpt_cuda_describe(e), p.major, p.minor);
        return MPT_CUDA_BROKEN;
    }
    if (msg)
        snprintf(msg, len, "%s (compute capability %d.%d, %d SMs)", p.name, p.major, p.minor, p.multiProcessorCount);
    return MPT_CUDA_USABLE;
}

extern "C" int mpt_cuda_available(char *msg, size_t len) { return mpt_cuda_probe(msg, len) == MPT_CUDA_USABLE; }

extern "C" int mpt_cuda_device_info(char *buf, size_t len) {
    cudaDeviceProp p;
    if (query_device(&p, buf, len) != MPT_CUDA_USABLE) return 0;
    int driver = 0, runtime = 0;
    MPT_CUDA_CHECK(cudaDriverGetVersion(&driver));
    MPT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    char usable[256];
    int ok = mpt_cuda_available(usable, sizeof usable);
    int cc = p.major * 10 + p.minor;
    /* Tensor Core input formats by architecture (NVIDIA Volta/Ampere/Ada/Hopper whitepapers): FP16 since
     * sm_70, TF32 and BF16 since sm_80, FP8 (E4M3/E5M2) since sm_89. */
    snprintf(buf, len,
             "%s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB, driver %d.%d, runtime %d.%d; "
             "Tensor Cores: TF32 %s, BF16 %s, FP16 %s, FP8 %s%s%s",
             p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             (double)p.l2CacheSize / (1024.0 * 1024.0), driver / 1000, (driver % 1000) / 10, runtime / 1000,
             (runtime % 1000) / 10, cc >= 80 ? "yes" : "no", cc >= 80 ? "yes" : "no", cc >= 70 ? "yes" : "no",
             cc >= 89 ? "yes" : "no", ok ? "" : "; not usable: ", ok ? "" : usable);
    return 1;
}

/* ---- memory --------------------------------------------------------------------------------------------- */

static void *cuda_alloc(mpt_backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* out of memory is not sticky: clear it and report NULL as the contract says */
        return NULL;
    }
    MPT_GPU_CHECK_TEXT(cudaError_t, e, "cudaMalloc(&p, bytes)", mpt_cuda_ok, mpt_cuda_describe);
    MPT_ASSERTF(((uintptr_t)p & 255u) == 0, "cudaMalloc returned %p, not 256-byte aligned", p);
    return p;
}

static void cuda_free(mpt_backend *be, void *p) {
    (void)be;
    if (p) MPT_CUDA_CHECK(cudaFree(p));
}

static void cuda_memset_zero(mpt_backend *be, void *p, size_t bytes) {
    if (bytes == 0) return;
    MPT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, mpt_cuda_ctx_of(be)->stream));
}

static void cuda_to_host(mpt_backend *be, void *dst_host, const void *src, size_t bytes) {
    if (bytes == 0) return;
    mpt_cuda_gemm_join(be); /* src may be a gradient a beside GEMM writes */
    cudaStream_t s = mpt_cuda_ctx_of(be)->stream;
    MPT_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, s));
    MPT_CUDA_CHECK(cudaStreamSynchronize(s));
}

/* Stream-ordered. From pageable host memory the runtime stages the source before returning, so the caller
 * may reuse it at once; from page-locked memory the copy is truly asynchronous (keep the buffer until the
 * next synchronize()). */
static void cuda_from_host(mpt_backend *be, void *dst, const void *src_host, size_t bytes) {
    if (bytes == 0) return;
    MPT_CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, mpt_cuda_ctx_of(be)->stream));
}

static void cuda_copy(mpt_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    MPT_ASSERTF(d + bytes <= s || s + bytes <= d,
                "cuda backend: copy between overlapping buffers %p and %p (%zu bytes)", dst, src, bytes);
    MPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, mpt_cuda_ctx_of(be)->stream));
}

static void cuda_synchronize(mpt_backend *be) {
    mpt_cuda_gemm_join(be); /* the side stream's work too */
    MPT_CUDA_CHECK(cudaStreamSynchronize(mpt_cuda_ctx_of(be)->stream));
}

/* ---- the context ------------------------------------------------------------------------------------------ */

/* Releases whatever part of the context exists (used by destroy and by a failed create). */
static void ctx_release(mpt_backend *be, mpt_cuda_ctx *ctx) {
    if (!ctx) return;
    if (ctx->stream) MPT_CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    mpt_cuda_gemm_side_release(be, ctx);
    if (ctx->gemm) mpt_cuda_gemm_cache_destroy(ctx->gemm);
    if (ctx->conv) mpt_cuda_conv_cache_destroy(ctx->conv);
    if (ctx->rng) MPT_CURAND_CHECK(curandDestroyGenerator(ctx->rng));
    if (ctx->dnn) MPT_CUDNN_CHECK(cudnnDestroy(ctx->dnn));
    if (ctx->lt) MPT_CUBLAS_CHECK(cublasLtDestroy(ctx->lt));
    if (ctx->scratch) {
        MPT_CUDA_CHECK(cudaFree(ctx->scratch));
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)MPT_CUDA_SCRATCH_BYTES);
    }
    if (ctx->valid_rows) { /* and xent_blocks_done, in the same allocation */
        MPT_CUDA_CHECK(cudaFree(ctx->valid_rows));
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)(2 * sizeof(int32_t)));
    }
    if (ctx->update_plan) {
        MPT_CUDA_CHECK(cudaFree(ctx->update_plan));
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)MPT_CUDA_UPDATE_PLAN_BYTES);
    }
    if (ctx->stream) MPT_CUDA_CHECK(cudaStreamDestroy(ctx->stream));
    free(ctx);
}

static void cuda_destroy(mpt_backend *be) {
    ctx_release(be, mpt_cuda_ctx_of(be));
    free(be);
}

/* A failed step of mpt_backend_cuda_create: releases what exists, records the message, returns NULL. */
static mpt_backend *create_failed(mpt_backend *be, mpt_cuda_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mpt_backend *create_failed(mpt_backend *be, mpt_cuda_ctx *ctx, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx_release(be, ctx);
    free(be);
    mpt_errorf(MPT_ERR_DEVICE, "cuda backend: %s", msg);
    return NULL;
}

/* The GPU of the next backend (mpt_cuda_set_device): one GPU per data-parallel rank. */
static int next_device = 0;

extern "C" mpt_status mpt_cuda_set_device(int ordinal) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return mpt_errorf(MPT_ERR_DEVICE, "cudaGetDeviceCount failed: %s", mpt_cuda_describe(e));
    if (ordinal < 0 || ordinal >= n)
        return mpt_errorf(MPT_ERR_DEVICE, "GPU %d requested (one GPU per rank: the rank's index on its node), but %d "
                                          "GPU(s) are visible: start at most %d ranks per node", ordinal, n, n);
    next_device = ordinal;
    return MPT_OK;
}

extern "C" mpt_backend *mpt_backend_cuda_create(void) {
    char msg[256];
    if (!mpt_cuda_available(msg, sizeof msg)) {
        mpt_errorf(MPT_ERR_DEVICE, "cuda backend: %s", msg);
        return NULL;
    }
    mpt_backend *be = (mpt_backend *)calloc(1, sizeof *be);
    mpt_cuda_ctx *ctx = (mpt_cuda_ctx *)calloc(1, sizeof *ctx);
    MPT_ASSERT(be != NULL && ctx != NULL);
    be->name = "cuda";
    be->device = MPT_DEVICE_CUDA;

    ctx->device = next_device;
    const char *refuse = getenv("MPT_CUDA_GEMM_REFUSE_DIRECT");
    ctx->gemm_refuse_direct = refuse != NULL && strcmp(refuse, "1") == 0;
    const char *split_bgrad = getenv("MPT_CUDA_SPLIT_NARROW_BGRAD");
    ctx->split_narrow_bgrad = split_bgrad != NULL && strcmp(split_bgrad, "1") == 0;
    const char *fused_drelu = getenv("MPT_CUDA_FUSED_DRELU_BGRAD");
    ctx->fused_drelu_bgrad = fused_drelu != NULL && strcmp(fused_drelu, "1") == 0;
    const char *conv_find = getenv("MPT_CUDA_CONV_FIND");
    ctx->conv_find = conv_find != NULL && strcmp(conv_find, "1") == 0;
    const char *bias_ilp = getenv("MPT_CUDA_BIAS_GRAD_ILP");
    ctx->bias_grad_ilp = bias_ilp != NULL && strcmp(bias_ilp, "1") == 0;
    const char *split_channel = getenv("MPT_CUDA_SPLIT_CHANNEL_SUM");
    ctx->split_channel_sum = split_channel != NULL && strcmp(split_channel, "1") == 0;
    const char *fused_update = getenv("MPT_CUDA_FUSED_UPDATE");
    ctx->fused_update = fused_update != NULL && strcmp(fused_update, "1") == 0;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return create_failed(be, ctx, "cudaSetDevice(%d) failed: %s", ctx->device, mpt_cuda_describe(e));
    e = cudaGetDeviceProperties(&ctx->prop, ctx->device);
    if (e != cudaSuccess) return create_failed(be, ctx, "cudaGetDeviceProperties failed: %s", mpt_cuda_describe(e));
    e = cudaStreamCreate(&ctx->stream);
    if (e != cudaSuccess) return create_failed(be, ctx, "cudaStreamCreate failed: %s", mpt_cuda_describe(e));
    const char *wgrad_stream = getenv("MPT_CUDA_WGRAD_STREAM");
    if (wgrad_stream != NULL && strcmp(wgrad_stream, "1") == 0) { /* gemm.cu run_beside */
        e = cudaStreamCreate(&ctx->side_stream);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ctx->side_fork, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ctx->side_join, cudaEventDisableTiming);
        if (e != cudaSuccess)
            return create_failed(be, ctx, "cannot create the second stream of MPT_CUDA_WGRAD_STREAM=1: %s",
                                 mpt_cuda_describe(e));
    }
    const char *side_delay = getenv("MPT_CUDA_SIDE_DELAY");
    ctx->side_delay = side_delay != NULL && strcmp(side_delay, "1") == 0;

    cublasStatus_t bs = cublasLtCreate(&ctx->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        ctx->lt = NULL;
        return create_failed(be, ctx, "cublasLtCreate failed: %s", mpt_cublas_describe(bs));
    }
    cudnnStatus_t ds = cudnnCreate(&ctx->dnn);
    if (ds != CUDNN_STATUS_SUCCESS) {
        ctx->dnn = NULL;
        return create_failed(be, ctx, "cudnnCreate failed (is cuDNN 9 with its engine libraries installed?): %s",
                             mpt_cudnn_describe(ds));
    }
    ds = cudnnSetStream(ctx->dnn, ctx->stream);
    if (ds != CUDNN_STATUS_SUCCESS) return create_failed(be, ctx, "cudnnSetStream failed: %s", mpt_cudnn_describe(ds));
    curandStatus_t rs = curandCreateGenerator(&ctx->rng, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    if (rs != CURAND_STATUS_SUCCESS) {
        ctx->rng = NULL;
        return create_failed(be, ctx, "curandCreateGenerator(PHILOX4_32_10) failed: %s", mpt_curand_describe(rs));
    }
    rs = curandSetStream(ctx->rng, ctx->stream);
    if (rs != CURAND_STATUS_SUCCESS)
        return create_failed(be, ctx, "curandSetStream failed: %s", mpt_curand_describe(rs));

    e = cudaMalloc(&ctx->scratch, MPT_CUDA_SCRATCH_BYTES);
    if (e != cudaSuccess) {
        ctx->scratch = NULL;
        cudaGetLastError();
        return create_failed(be, ctx, "cannot allocate %zu bytes of reduction scratch: %s", MPT_CUDA_SCRATCH_BYTES,
                             mpt_cuda_describe(e));
    }
    mpt_backend_account(be, MPT_MEM_WORKSPACE, (int64_t)MPT_CUDA_SCRATCH_BYTES);
    e = cudaMalloc((void **)&ctx->valid_rows, 2 * sizeof(int32_t));
    if (e != cudaSuccess) {
        ctx->valid_rows = NULL;
        cudaGetLastError();
        return create_failed(be, ctx, "cannot allocate the row counters: %s", mpt_cuda_describe(e));
    }
    mpt_backend_account(be, MPT_MEM_WORKSPACE, (int64_t)(2 * sizeof(int32_t)));
    ctx->xent_blocks_done = (unsigned int *)(ctx->valid_rows + 1);
    e = cudaMemsetAsync(ctx->valid_rows, 0, 2 * sizeof(int32_t), ctx->stream); /* ordered before every kernel */
    if (e != cudaSuccess) return create_failed(be, ctx, "cannot zero the row counters: %s", mpt_cuda_describe(e));
    const char *fused_loss = getenv("MPT_CUDA_FUSED_LOSS");
    ctx->fused_loss = fused_loss != NULL && strcmp(fused_loss, "1") == 0;
    e = cudaMalloc(&ctx->update_plan, MPT_CUDA_UPDATE_PLAN_BYTES);
    if (e != cudaSuccess) {
        ctx->update_plan = NULL;
        cudaGetLastError();
        return create_failed(be, ctx, "cannot allocate the update pass's plan: %s", mpt_cuda_describe(e));
    }
    mpt_backend_account(be, MPT_MEM_WORKSPACE, (int64_t)MPT_CUDA_UPDATE_PLAN_BYTES);
    e = cudaMemsetAsync(ctx->update_plan, 0, MPT_CUDA_UPDATE_PLAN_BYTES, ctx->stream); /* before every kernel */
    if (e != cudaSuccess) return create_failed(be, ctx, "cannot zero the update pass's plan: %s", mpt_cuda_describe(e));
    ctx->gemm = mpt_cuda_gemm_cache_create();
    ctx->conv = mpt_cuda_conv_cache_create();
    be->ctx = ctx;

    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->memset_zero = cuda_memset_zero;
    be->to_host = cuda_to_host;
    be->from_host = cuda_from_host;
    be->copy = cuda_copy;
    be->synchronize = cuda_synchronize;
    be->destroy = cuda_destroy;

    be->gemm = mpt_cuda_gemm;
    be->gemm_workspace = mpt_cuda_gemm_workspace;
    be->gemm_supports = mpt_cuda_gemm_supports;
    be->conv2d_forward = mpt_cuda_conv2d_forward;
    be->conv2d_backward_data = mpt_cuda_conv2d_backward_data;
    be->conv2d_backward_filter = mpt_cuda_conv2d_backward_filter;
    be->conv2d_workspace = mpt_cuda_conv2d_workspace;
    be->cast = mpt_cuda_cast;
    be->relu_forward = mpt_cuda_relu_forward;
    be->relu_backward = mpt_cuda_relu_backward;
    be->maxpool_forward = mpt_cuda_maxpool_forward;
    be->maxpool_backward = mpt_cuda_maxpool_backward;
    be->dropout_forward = mpt_cuda_dropout_forward;
    be->dropout_backward = mpt_cuda_dropout_backward;
    be->softmax_xent_forward = mpt_cuda_softmax_xent_forward;
    be->softmax_xent_backward = mpt_cuda_softmax_xent_backward;
    be->bias_grad = mpt_cuda_bias_grad;
    be->gather_batch = mpt_cuda_gather_batch;
    be->avgpool_forward = mpt_cuda_avgpool_forward;
    be->avgpool_backward = mpt_cuda_avgpool_backward;
    be->act_forward = mpt_cuda_act_forward;
    be->act_backward = mpt_cuda_act_backward;
    be->batchnorm_forward = mpt_cuda_batchnorm_forward;
    be->batchnorm_backward = mpt_cuda_batchnorm_backward;
    be->layernorm_forward = mpt_cuda_layernorm_forward;
    be->layernorm_backward = mpt_cuda_layernorm_backward;

    be->fp8_cast = mpt_cuda_fp8_cast;
    be->fp8_update = mpt_cuda_fp8_update;
    be->fp8_support = mpt_cuda_fp8_support;
    be->fake_quant = mpt_cuda_fake_quant;
    be->quantize = mpt_cuda_quantize;
    be->gemm_i8 = mpt_cuda_gemm_i8;
    be->conv2d_forward_i8 = mpt_cuda_conv2d_forward_i8;
    be->unscale_check = mpt_cuda_unscale_check;
    be->unscale_check_multi = mpt_cuda_unscale_check_multi;
    be->sum_squares = mpt_cuda_sum_squares;
    be->clip_coef = mpt_cuda_clip_coef;
    be->lr_update = mpt_cuda_lr_update;
    be->step_begin = mpt_cuda_step_begin;
    be->optim_step = mpt_cuda_optim_step;
    be->optim_step_multi = mpt_cuda_optim_step_multi;
    be->scaler_update = mpt_cuda_scaler_update;
    be->update_pass = ctx->fused_update ? mpt_cuda_update_pass : NULL;
    be->join = ctx->side_stream ? mpt_cuda_gemm_join : NULL;

    be->capture_begin = mpt_cuda_capture_begin;
    be->capture_end = mpt_cuda_capture_end;
    be->replay = mpt_cuda_replay;
    be->replay_free = mpt_cuda_replay_free;

    be->event_create = mpt_cuda_event_create;
    be->event_record = mpt_cuda_event_record;
    be->event_elapsed = mpt_cuda_event_elapsed;
    be->event_destroy = mpt_cuda_event_destroy;

    /* The telemetry reductions on the device (telemetry.cu), opt-in until a GPU run has verified them against the
     * host's (tests/test_cuda.c); without them the collector copies tensors to the host as before. */
    const char *devtel = getenv("MPT_CUDA_DEVICE_TELEMETRY");
    if (devtel != NULL && strcmp(devtel, "1") == 0) {
        be->telemetry_range = mpt_cuda_telemetry_range;
        be->telemetry_rounding = mpt_cuda_telemetry_rounding;
        be->telemetry_lost = mpt_cuda_telemetry_lost;
        be->telemetry_lost_counterfactual = mpt_cuda_telemetry_lost_counterfactual;
    }
    return be;
}
