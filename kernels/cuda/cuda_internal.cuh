/*
 * kernels/cuda/cuda_internal.cuh - what the CUDA backend's .cu files share (internal, C++ only).
 *
 *  - The library-call checks (ARCHITECTURE decision 8, STYLE item 5): one generic macro, MPT_GPU_CHECK_TEXT, that
 *    evaluates a call, and on failure aborts through mpt_fatal() printing the call as text, the library's
 *    description of the status, file and line (during a step recording it keeps the failure for capture_end
 *    instead: mpt_cuda_capture_absorb); per-library wrappers MPT_CUDA_CHECK, MPT_CUBLAS_CHECK,
 *    MPT_CUDNN_CHECK, MPT_CURAND_CHECK, and MPT_CUDA_CHECK_LAUNCH for kernel launches. With
 *    MPT_CUDA_SYNC_DEBUG=1 in the environment every checked call is followed by cudaDeviceSynchronize(), so an
 *    asynchronous fault is reported at the call that caused it rather than at a later one.
 *  - The backend's private context (stream, library handles, plan caches, small persistent scratch).
 *  - Device-side dtype-dispatching loads and stores built on the per-element conversions of
 *    engine/numerics.h (the same RNE functions the CPU backend calls: decision 6).
 *  - The entry points each .cu file contributes to the backend table (backend.cu assembles the table).
 *
 * Every public entry runs on the context's one stream; nothing here synchronises except where the contract
 * says so (to_host, synchronize) or under MPT_CUDA_SYNC_DEBUG.
 */
#ifndef MPT_KERNELS_CUDA_INTERNAL_CUH
#define MPT_KERNELS_CUDA_INTERNAL_CUH

#include <math.h> /* before the extern "C" block: engine/numerics.h includes it too, and C++'s math.h has templates */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <curand.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "engine/backend.h"
#include "engine/status.h"
#include "engine/cuda_backend.h"
#include "engine/numerics.h"
}

/* ---- library-call checks --------------------------------------------------------------------------- */

/* 1 if MPT_CUDA_SYNC_DEBUG=1 is set, else 0 (the environment is read once, so every caller agrees). */
int mpt_cuda_sync_debug_on(void);
/* Under MPT_CUDA_SYNC_DEBUG=1: synchronises the device and aborts naming `what` if an asynchronous error
 * surfaced. Otherwise a no-op (the environment is read once). */
void mpt_cuda_debug_sync(const char *what, const char *file, int line);

static inline int mpt_cuda_ok(cudaError_t s) { return s == cudaSuccess; }
static inline int mpt_cublas_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
static inline int mpt_cudnn_ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }
static inline int mpt_curand_ok(curandStatus_t s) { return s == CURAND_STATUS_SUCCESS; }

/* Descriptions of a failed status (static or thread-local text). */
const char *mpt_cuda_describe(cudaError_t s);
const char *mpt_cublas_describe(cublasStatus_t s);
const char *mpt_cudnn_describe(cudnnStatus_t s); /* adds cudnnGetLastErrorString() when it has text */
const char *mpt_curand_describe(curandStatus_t s);

/* While this thread records a step (graph.cu, between capture_begin and capture_end), a failed check does not
 * abort: the first failure ("<text> failed: <description> (file:line)") is kept, and capture_end discards the
 * recording and returns it as its error, so the trainer runs the step directly instead (a call the capture
 * rules forbid fails there, and every later call of the invalidated capture fails too). Returns 1 when the
 * failure was kept that way, 0 when no recording is in progress on this thread (the caller aborts). */
int mpt_cuda_capture_absorb(const char *text, const char *description, const char *file, int line);

/* The one generic check: evaluates `expr` (a call returning a status), and if the status is not success
 * aborts with "<text> failed: <description> (file:line)" (during a step recording: see
 * mpt_cuda_capture_absorb). The description is taken once (cuDNN's includes its last-error text). */
#define MPT_GPU_CHECK_TEXT(status_type, expr, text, is_ok, describe)                                 \
    do {                                                                                             \
        status_type mpt_gpu_s_ = (expr);                                                             \
        if (!is_ok(mpt_gpu_s_)) {                                                                    \
            const char *mpt_gpu_d_ = describe(mpt_gpu_s_);                                           \
            if (!mpt_cuda_capture_absorb(text, mpt_gpu_d_, __FILE__, __LINE__))                      \
                mpt_fatal(__FILE__, __LINE__, "%s failed: %s", text, mpt_gpu_d_);                    \
        }                                                                                            \
        mpt_cuda_debug_sync(text, __FILE__, __LINE__);                                               \
    } while (0)

#define MPT_CUDA_CHECK(call) MPT_GPU_CHECK_TEXT(cudaError_t, call, #call, mpt_cuda_ok, mpt_cuda_describe)
#define MPT_CUBLAS_CHECK(call) MPT_GPU_CHECK_TEXT(cublasStatus_t, call, #call, mpt_cublas_ok, mpt_cublas_describe)
#define MPT_CUDNN_CHECK(call) MPT_GPU_CHECK_TEXT(cudnnStatus_t, call, #call, mpt_cudnn_ok, mpt_cudnn_describe)
#define MPT_CURAND_CHECK(call) MPT_GPU_CHECK_TEXT(curandStatus_t, call, #call, mpt_curand_ok, mpt_curand_describe)
/* After a <<<...>>> launch (kernel_name: a string literal): configuration errors (bad grid, no kernel image
 * for this GPU) and earlier asynchronous faults show up here. */
#define MPT_CUDA_CHECK_LAUNCH(kernel_name)                                                           \
    MPT_GPU_CHECK_TEXT(cudaError_t, cudaGetLastError(), "launch of " kernel_name, mpt_cuda_ok, mpt_cuda_describe)

/* ---- plan caches and records (gemm.cu, conv.cu) ---------------------------------------------------- */

typedef struct mpt_cuda_gemm_cache mpt_cuda_gemm_cache; /* gemm.cu */
typedef struct mpt_cuda_conv_cache mpt_cuda_conv_cache; /* conv.cu */

/* ---- the context ------------------------------------------------------------------------------------ */

/* Bytes of the context's persistent device scratch: the per-row losses of softmax + cross-entropy (one
 * FP32 per row: at most MPT_CUDA_SCRATCH_BYTES / 4 rows) and the per-block FP64 partial sums of sum_squares.
 * Stream order keeps the users apart. */
#define MPT_CUDA_SCRATCH_BYTES ((size_t)1 << 20)

/* Bytes of the update pass's plan (optim.cu: a counter, found_inf and the optimizer's per-step scalars). */
#define MPT_CUDA_UPDATE_PLAN_BYTES ((size_t)64)

typedef struct mpt_cuda_ctx {
    int device;                  /* CUDA device ordinal (0, or mpt_cuda_set_device's) */
    cudaDeviceProp prop;         /* its properties (name, compute capability, SM count, memory) */
    cudaStream_t stream;         /* the one stream every operation is ordered on */
    cublasLtHandle_t lt;         /* cuBLASLt handle (GEMM) */
    cudnnHandle_t dnn;           /* cuDNN handle, bound to `stream` (convolution) */
    curandGenerator_t rng;       /* cuRAND device Philox4x32-10 generator, bound to `stream` (dropout) */
    mpt_cuda_gemm_cache *gemm;   /* GEMM plans (algorithm per shape/config) and records, gemm.cu */
    mpt_cuda_conv_cache *conv;   /* convolution plans and records, conv.cu */
    void *scratch;               /* [MPT_CUDA_SCRATCH_BYTES] device scratch for two-pass deterministic reductions */
    int32_t *valid_rows;         /* [1] device I32: rows with a label >= 0 (softmax_xent backward; under fused_loss
                                    the forward stores it), followed in the same allocation by: */
    unsigned int *xent_blocks_done; /* [1] device U32 (valid_rows + 1): blocks of the fused softmax_xent forward that
                                    have finished; 0 between launches (zeroed at creation, reset by the last block) */
    int fused_loss;              /* MPT_CUDA_FUSED_LOSS=1 at creation: softmax_xent forward in one kernel (mean and
                                    valid count by its last block), backward in one (elementwise.cu) */
    void *update_plan;           /* [MPT_CUDA_UPDATE_PLAN_BYTES] device, zeroed at creation: the update pass's
                                    block counter and this step's scalars (optim.cu, update_pass) */
    int split_narrow_bgrad;      /* MPT_CUDA_SPLIT_NARROW_BGRAD=1 at creation: BGRAD GEMMs with fewer than 16
                                    outputs run as a plain GEMM plus the bias_grad kernel (gemm.cu) */
    int fused_drelu_bgrad;       /* MPT_CUDA_FUSED_DRELU_BGRAD=1 at creation: the two-step DRELU_BGRAD epilogue in
                                    one kernel (gemm.cu drelu_bgrad_kernel: the same bits, D read once) */
    int conv_find;               /* MPT_CUDA_CONV_FIND=1 at creation: convolution algorithms ranked by cudnnFind*
                                    (measured) instead of the heuristic, outside recordings (conv.cu conv_find) */
    cudaStream_t side_stream;    /* MPT_CUDA_WGRAD_STREAM=1 at creation: the second stream that GEMMs with
                                    mpt_gemm_args.beside run on (gemm.cu run_beside), else NULL; with: */
    cudaEvent_t side_fork;       /* recorded on `stream` before each beside GEMM, waited for by side_stream */
    cudaEvent_t side_join;       /* recorded on side_stream by join, waited for by `stream` */
    int side_pending;            /* beside GEMMs issued since the last join */
    void *side_ws;               /* [side_ws_bytes] device: the beside GEMMs' workspace (cuBLASLt's and the two-step
                                    path's FP32 D), sized by gemm_workspace queries at graph build time */
    size_t side_ws_bytes;
    struct mpt_cuda_retired *side_retired; /* smaller side workspaces replaced by gemm_workspace: kept until the
                                    backend is destroyed (a recorded step may point into them) */
    int side_delay;              /* MPT_CUDA_SIDE_DELAY=1 at creation (a test switch): each beside GEMM waits
                                    SIDE_DELAY_US on its stream first, so a missing fork or join edge, or an operand
                                    overwritten before the join, shows as other bits (gemm.cu, test_cuda_graph) */
    int bias_grad_ilp;           /* MPT_CUDA_BIAS_GRAD_ILP=1 at creation: bias_grad_kernel issues 8 rows' loads at
                                    once (the same sums in the same order: the same bits; elementwise.cu) */
    int split_channel_sum;       /* MPT_CUDA_SPLIT_CHANNEL_SUM=1 at creation: the channel sums (conv bias gradient)
                                    over (chunks, K) blocks and a fixed-order second pass (elementwise.cu) */
    int fused_update;            /* MPT_CUDA_FUSED_UPDATE=1 at creation: be->update_pass is set (two kernels for
                                    the update pass instead of five; optim.cu). Off by default until a GPU session
                                    has run tests/test_cuda.c test_update_pass_bit_identical */
    struct mpt_cuda_capture *capture; /* the recording in progress (graph.cu), or NULL */
    int gemm_refuse_direct;      /* MPT_CUDA_GEMM_REFUSE_DIRECT=1 at creation: every direct cuBLASLt GEMM call is
                                    treated as refused (CUBLAS_STATUS_NOT_SUPPORTED) before it runs, so the
                                    fallback to the two-step path can be tested (gemm.cu, tests/test_cuda.c) */
    int64_t opt_in_calls[MPT_CUDA_OPT_IN_COUNT]; /* calls that took each opt-in path (mpt_cuda_opt_in_calls) */
} mpt_cuda_ctx;

static inline mpt_cuda_ctx *mpt_cuda_ctx_of(mpt_backend *be) { return (mpt_cuda_ctx *)be->ctx; }

/* Counts one call that enqueues opt-in path k's work instead of the default's (engine/cuda_backend.h
 * mpt_cuda_opt_in_calls): host bookkeeping only, the kernels and their bits are unchanged by it. */
static inline void mpt_cuda_opt_in_taken(mpt_cuda_ctx *ctx, mpt_cuda_opt_in k) { ctx->opt_in_calls[k]++; }

/* ---- launch geometry -------------------------------------------------------------------------------- */

#define MPT_CUDA_THREADS 256

/* Blocks for a grid-stride loop over n elements with MPT_CUDA_THREADS threads: enough to fill the GPU
 * (32 blocks per SM), never more than the elements need, at least 1. */
static inline unsigned mpt_cuda_blocks(const mpt_cuda_ctx *ctx, int64_t n) {
    int64_t need = (n + MPT_CUDA_THREADS - 1) / MPT_CUDA_THREADS;
    int64_t cap = (int64_t)ctx->prop.multiProcessorCount * 32;
    if (need > cap) need = cap;
    if (need < 1) need = 1;
    return (unsigned)need;
}

/* Bytes rounded up to the 256-byte alignment that cuBLASLt and cuDNN want for workspace sub-buffers. */
static inline size_t mpt_cuda_align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* ---- device-side loads and stores of float dtypes (F32, F16, BF16; U8 loads widen exactly) ----------- */

/* Element i of a buffer of dtype t, as FP32 (exact). */
static __device__ __forceinline__ float mpt_dev_load(const void *p, mpt_dtype t, int64_t i) {
    switch (t) {
    case MPT_DTYPE_F16: return mpt_f16_to_f32(((const uint16_t *)p)[i]);
    case MPT_DTYPE_BF16: return mpt_bf16_to_f32(((const uint16_t *)p)[i]);
    case MPT_DTYPE_U8: return (float)((const uint8_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

/* Stores v into element i of a float buffer of dtype t, rounding to nearest even (engine/numerics.h). */
static __device__ __forceinline__ void mpt_dev_store(void *p, mpt_dtype t, int64_t i, float v) {
    switch (t) {
    case MPT_DTYPE_F16: ((uint16_t *)p)[i] = mpt_f32_to_f16(v); break;
    case MPT_DTYPE_BF16: ((uint16_t *)p)[i] = mpt_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* ---- block reductions ------------------------------------------------------------------------------- */

/* Sum of v over the block, returned to every thread; blockDim.x must be a multiple of 32 (at most 1024) and
 * every thread must call it. `shared` holds 32 values. The tree has a fixed shape, so the result is the same
 * on every run (deterministic, unlike atomics). */
template <typename T>
static __device__ __forceinline__ T mpt_block_sum(T v, T *shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    __syncthreads(); /* `shared` may still be read from a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? shared[lane] : (T)0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}

/* Aborts (programmer error) unless t is F32, F16 or BF16; `what` names the operation. */
void mpt_cuda_require_float(mpt_dtype t, const char *what);

/* Aborts (programmer error) unless the workspace holds `bytes`; `what` names the operation and the query
 * that should have reserved it. */
void mpt_cuda_require_workspace(mpt_backend *be, size_t bytes, const char *what);

/* ---- entry points (engine/backend.h documents each contract) ----------------------------------------- */

/* gemm.cu */
mpt_cuda_gemm_cache *mpt_cuda_gemm_cache_create(void);
void mpt_cuda_gemm_cache_destroy(mpt_cuda_gemm_cache *c);
void mpt_cuda_gemm(mpt_backend *be, const mpt_gemm_args *a);
/* be->join (engine/backend.h): `stream` waits for side_stream's beside GEMMs; nothing when none is pending. */
void mpt_cuda_gemm_join(mpt_backend *be);
/* Releases the side stream, its events and workspaces (ctx_release; synchronises the side stream first). */
void mpt_cuda_gemm_side_release(mpt_backend *be, mpt_cuda_ctx *ctx);
size_t mpt_cuda_gemm_workspace(mpt_backend *be, const mpt_gemm_args *a);
int mpt_cuda_gemm_supports(mpt_backend *be, const mpt_gemm_args *a, int running, char *why, size_t len);

/* The call counters of the GEMM / convolution records, for graph.cu's replay accounting: counter i is record
 * i's `calls` for 0 <= i < count - 1, and the calls of unrecorded call sites for i == count - 1. */
int mpt_cuda_gemm_counter_count(const mpt_cuda_gemm_cache *c);
int64_t *mpt_cuda_gemm_counter(mpt_cuda_gemm_cache *c, int i);
int mpt_cuda_conv_counter_count(const mpt_cuda_conv_cache *c);
int64_t *mpt_cuda_conv_counter(mpt_cuda_conv_cache *c, int i);

/* graph.cu: the step capture entries of the backend table (engine/backend.h) */
mpt_status mpt_cuda_capture_begin(mpt_backend *be);
mpt_status mpt_cuda_capture_end(mpt_backend *be, void **out);
void mpt_cuda_replay(mpt_backend *be, void *graph);
void mpt_cuda_replay_free(mpt_backend *be, void *graph);

/* timing.cu: the device timing entries of the backend table (engine/backend.h) */
mpt_status mpt_cuda_event_create(mpt_backend *be, void **out);
void mpt_cuda_event_record(mpt_backend *be, void *mark);
mpt_status mpt_cuda_event_elapsed(mpt_backend *be, void *start, void *end, double *seconds);
void mpt_cuda_event_destroy(mpt_backend *be, void *mark);

/* conv.cu */
mpt_cuda_conv_cache *mpt_cuda_conv_cache_create(void);
void mpt_cuda_conv_cache_destroy(mpt_cuda_conv_cache *c);
void mpt_cuda_conv2d_forward(mpt_backend *be, const mpt_conv_args *a);
void mpt_cuda_conv2d_backward_data(mpt_backend *be, const mpt_conv_args *a);
void mpt_cuda_conv2d_backward_filter(mpt_backend *be, const mpt_conv_args *a);
size_t mpt_cuda_conv2d_workspace(mpt_backend *be, const mpt_conv_args *a);

/* elementwise.cu */
void mpt_cuda_cast(mpt_backend *be, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype, int64_t n);
void mpt_cuda_relu_forward(mpt_backend *be, void *y, const void *x, mpt_dtype dtype, int64_t n);
void mpt_cuda_relu_backward(mpt_backend *be, void *dx, const void *dy, const void *y, mpt_dtype dtype, int64_t n,
                            int accumulate);
void mpt_cuda_maxpool_forward(mpt_backend *be, const mpt_pool_args *a);
void mpt_cuda_maxpool_backward(mpt_backend *be, const mpt_pool_args *a);
void mpt_cuda_dropout_forward(mpt_backend *be, void *y, const void *x, uint8_t *mask, mpt_dtype dtype, int64_t n,
                              float p, uint64_t seed, uint64_t offset, const int64_t *iteration, uint64_t stride);
void mpt_cuda_dropout_backward(mpt_backend *be, void *dx, const void *dy, const uint8_t *mask, mpt_dtype dtype,
                               int64_t n, float p, int accumulate);
void mpt_cuda_softmax_xent_forward(mpt_backend *be, float *loss, float *probs, int32_t *n_correct,
                                   const void *logits, mpt_dtype logits_dtype, const int32_t *labels, int N, int C);
void mpt_cuda_softmax_xent_backward(mpt_backend *be, void *dlogits, mpt_dtype dlogits_dtype, const float *probs,
                                    const int32_t *labels, int N, int C, const float *scale, int accumulate);
void mpt_cuda_bias_grad(mpt_backend *be, float *db, const void *dy, mpt_dtype dtype, int64_t rows, int64_t cols,
                        int accumulate);
void mpt_cuda_gather_batch(mpt_backend *be, void *x, mpt_dtype x_dtype, int32_t *labels, const uint8_t *images,
                           const uint8_t *image_labels, const int32_t *idx, int B, int64_t D, float mean,
                           float inv_std);
/* Internal helpers of elementwise.cu used by conv.cu (raw device pointers, the context's stream):
 * y[n, k, :, :] = bias[k] for y [N, K, HW] of dtype (bias of the same dtype, copied bit for bit). */
void mpt_cuda_broadcast_channel_bias(mpt_cuda_ctx *ctx, void *y, const void *bias, mpt_dtype dtype, int N, int K,
                                     int64_t HW);
/* db[k] += sum over n and the HW plane of dy[n, k, :], FP32 (accumulate = 0: db[k] = that sum); dy [N, K, HW] of
 * dtype. */
void mpt_cuda_channel_sum(mpt_cuda_ctx *ctx, float *db, const void *dy, mpt_dtype dtype, int N, int K, int64_t HW,
                          int accumulate);
/* dst[i] = round(dst_dtype, src[i]) on raw pointers (the kernel behind mpt_cuda_cast). */
void mpt_cuda_cast_raw(mpt_cuda_ctx *ctx, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype,
                       int64_t n);

/* activation.cu */
void mpt_cuda_act_forward(mpt_backend *be, mpt_act kind, void *y, const void *x, mpt_dtype dtype, int64_t n,
                          float alpha);
void mpt_cuda_act_backward(mpt_backend *be, mpt_act kind, void *dx, const void *dy, const void *x, const void *y,
                           mpt_dtype dtype, int64_t n, float alpha, int accumulate);
void mpt_cuda_avgpool_forward(mpt_backend *be, const mpt_avgpool_args *a);
void mpt_cuda_avgpool_backward(mpt_backend *be, const mpt_avgpool_args *a);

/* norm.cu (uses the context's scratch in batchnorm_backward: 2 C floats, stream-ordered like its other users) */
void mpt_cuda_batchnorm_forward(mpt_backend *be, const mpt_norm_args *a);
void mpt_cuda_batchnorm_backward(mpt_backend *be, const mpt_norm_args *a);
void mpt_cuda_layernorm_forward(mpt_backend *be, const mpt_norm_args *a);
void mpt_cuda_layernorm_backward(mpt_backend *be, const mpt_norm_args *a);

/* fp8.cu */
void mpt_cuda_fp8_cast(mpt_backend *be, const mpt_fp8_cast_args *a);
void mpt_cuda_fp8_update(mpt_backend *be, const mpt_fp8_update_args *a);
int mpt_cuda_fp8_support(mpt_backend *be, int mx, mpt_fp8_accum accum, int promote, char *msg, size_t len);
/* dst [rows, K] FP32 = src (E4M3/E5M2 [rows, K]) decoded, times 2^(c - 127) per block of 32 when block_scales
 * ([rows, mpt_mx_blocks(K)] E8M0) is given: exact. Raw device pointers, the context's stream. */
void mpt_cuda_fp8_decode(mpt_cuda_ctx *ctx, float *dst, const uint8_t *src, mpt_dtype fmt, int64_t rows, int64_t K,
                         const uint8_t *block_scales);

/* quant.cu */
void mpt_cuda_fake_quant(mpt_backend *be, const mpt_fake_quant_args *a);
void mpt_cuda_quantize(mpt_backend *be, const mpt_quantize_args *a);
void mpt_cuda_gemm_i8(mpt_backend *be, const mpt_gemm_i8_args *a);
void mpt_cuda_conv2d_forward_i8(mpt_backend *be, const mpt_conv_i8_args *a);

/* optim.cu */
void mpt_cuda_unscale_check(mpt_backend *be, float *g, int64_t n, mpt_scaler_state *st);
void mpt_cuda_sum_squares(mpt_backend *be, const float *g, int64_t n, mpt_scaler_state *st);
void mpt_cuda_clip_coef(mpt_backend *be, mpt_scaler_state *st, float max_norm);
void mpt_cuda_lr_update(mpt_backend *be, mpt_scaler_state *st, const mpt_lr_schedule *schedule);
void mpt_cuda_step_begin(mpt_backend *be, mpt_scaler_state *st);
void mpt_cuda_optim_step(mpt_backend *be, const mpt_optim_args *a);
void mpt_cuda_unscale_check_multi(mpt_backend *be, const mpt_param_slot *slots, int count, int64_t numel,
                                  mpt_scaler_state *st);
void mpt_cuda_optim_step_multi(mpt_backend *be, const mpt_optim_multi_args *a);
void mpt_cuda_scaler_update(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic);
void mpt_cuda_update_pass(mpt_backend *be, const mpt_update_pass_args *u);

/* telemetry.cu: the telemetry reductions (engine/backend.h; set in the table only under
 * MPT_CUDA_DEVICE_TELEMETRY=1, backend.cu). They use the context's reduction scratch. */
void mpt_cuda_telemetry_range(mpt_backend *be, mpt_range *r, const void *x, mpt_dtype dtype, int64_t n);
void mpt_cuda_telemetry_rounding(mpt_backend *be, mpt_exp_hist *h, mpt_round_err *err, const int *k, int n_k,
                                 const float *v, int64_t n);
void mpt_cuda_telemetry_lost(mpt_backend *be, mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype,
                             const float *delta, int64_t n);
void mpt_cuda_telemetry_lost_counterfactual(mpt_backend *be, mpt_lost *r, const void *w_old, mpt_dtype dtype,
                                            const float *delta, int64_t n);

/* nccl.cu: NCCL's version at run time (and the header's) into version, and the file it was loaded from into file
 * ("" when it is not loadable: version then says why). Loads NCCL if it was not yet. For `mptrain info`. */
void mpt_cuda_nccl_describe(char *version, size_t vlen, char *file, size_t flen);

#endif
