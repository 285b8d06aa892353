/*
 * kernels/cuda/elementwise.cu - the CUDA backend's element-wise and reduction kernels: cast, ReLU, max pooling,
 * inverted dropout, fused softmax + cross-entropy, the bias gradient, the batch gather, and the two channel
 * helpers of conv.cu (bias broadcast, bias gradient over NCHW).
 *
 * Each operation is three layers (STYLE item 3): a `static __global__` kernel, a `static` launcher that takes
 * raw device pointers and the context (its stream and SM count) and checks the launch, and the public entry
 * that checks dtypes and shapes. Contracts: engine/backend.h. As in the CPU backend (kernels/cpu/elementwise.c,
 * the oracle), every kernel loads its inputs as FP32 (exact widening), computes in FP32 with the per-element
 * functions of engine/numerics.h, and rounds each output once to its dtype (RNE); an accumulating output is
 * round(old + update). Arithmetic that must match the CPU bit for bit is written with the _rn intrinsics
 * (IEEE round-to-nearest, never contracted into an FMA). Reductions use fixed-shape trees (deterministic);
 * their summation order differs from the CPU's sequential loops, which the cuda tests bound.
 *
 * Sources: inverted dropout (Srivastava et al. 2014; torch.nn.Dropout); softmax + cross-entropy through
 * logsumexp with mean reduction and ignore_index (torch.nn.functional.cross_entropy); max pooling with
 * PyTorch's rules (padding is -inf, the first maximum wins, NaN propagates); cuRAND's Philox4x32-10 stream
 * (dropout computes it per element, engine/numerics.h mpt_philox_uniform; mpt_cuda_rng_uniform draws it with
 * cuRAND's device generator, documented to produce the host generator's sequence, for the tests).
 */
#include <assert.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

/* ---- cast ---------------------------------------------------------------------------------------------- */

static __global__ void cast_kernel(void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        mpt_dev_store(dst, dst_dtype, i, mpt_dev_load(src, src_dtype, i));
}

void mpt_cuda_cast_raw(mpt_cuda_ctx *ctx, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype,
                       int64_t n) {
    if (n == 0) return;
    if (dst_dtype == src_dtype) { /* a copy: bit for bit, as the CPU's memmove */
        if (dst != src)
            MPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * mpt_dtype_size(dst_dtype), cudaMemcpyDeviceToDevice,
                                           ctx->stream));
        return;
    }
    cast_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(dst, dst_dtype, src, src_dtype, n);
    MPT_CUDA_CHECK_LAUNCH("cast_kernel");
}

void mpt_cuda_cast(mpt_backend *be, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype, int64_t n) {
    mpt_cuda_require_float(dst_dtype, "cast (destination)");
    MPT_ASSERTF(mpt_dtype_is_float(src_dtype) || src_dtype == MPT_DTYPE_U8,
                "cast: source dtype %s is not F32, F16, BF16 or U8", mpt_dtype_name(src_dtype));
    MPT_ASSERT(n >= 0);
    mpt_cuda_cast_raw(mpt_cuda_ctx_of(be), dst, dst_dtype, src, src_dtype, n);
}

/* ---- ReLU ------------------------------------------------------------------------------------------------ */

static __global__ void relu_forward_kernel(void *y, const void *x, mpt_dtype dtype, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        mpt_dev_store(y, dtype, i, mpt_elem_relu(mpt_dev_load(x, dtype, i)));
}

static __global__ void relu_backward_kernel(void *dx, const void *dy, const void *y, mpt_dtype dtype, int64_t n,
                                            int accumulate) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = mpt_elem_relu_grad(mpt_dev_load(dy, dtype, i), mpt_dev_load(y, dtype, i));
        mpt_dev_store(dx, dtype, i, accumulate ? __fadd_rn(mpt_dev_load(dx, dtype, i), g) : g);
    }
}

static void launch_relu_forward(const mpt_cuda_ctx *ctx, void *y, const void *x, mpt_dtype dtype, int64_t n) {
    relu_forward_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(y, x, dtype, n);
    MPT_CUDA_CHECK_LAUNCH("relu_forward_kernel");
}

static void launch_relu_backward(const mpt_cuda_ctx *ctx, void *dx, const void *dy, const void *y, mpt_dtype dtype,
                                 int64_t n, int accumulate) {
    relu_backward_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(dx, dy, y, dtype, n,
                                                                                       accumulate);
    MPT_CUDA_CHECK_LAUNCH("relu_backward_kernel");
}

void mpt_cuda_relu_forward(mpt_backend *be, void *y, const void *x, mpt_dtype dtype, int64_t n) {
    mpt_cuda_require_float(dtype, "relu_forward");
    MPT_ASSERT(n >= 0);
    if (n == 0) return;
    launch_relu_forward(mpt_cuda_ctx_of(be), y, x, dtype, n);
}

void mpt_cuda_relu_backward(mpt_backend *be, void *dx, const void *dy, const void *y, mpt_dtype dtype, int64_t n,
                            int accumulate) {
    mpt_cuda_require_float(dtype, "relu_backward");
    MPT_ASSERT(n >= 0);
    if (n == 0) return;
    launch_relu_backward(mpt_cuda_ctx_of(be), dx, dy, y, dtype, n, accumulate);
}

/* ---- max pooling ---------------------------------------------------------------------------------------------- */

/* One thread per output element (plane, p, q): the window scan is the CPU's loop, so value and argmax are
 * the CPU's bit for bit (padding counts as -inf; first maximum wins; a NaN is taken, as PyTorch does). */
static __global__ void maxpool_forward_kernel(void *y, int32_t *argmax, const void *x, mpt_dtype dtype, int64_t planes,
                                              int H, int W, int P, int Q, int k, int s, int pad) {
    const int64_t total = planes * P * Q;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int q = (int)(o % Q), p = (int)((o / Q) % P);
        const int64_t xin = (o / ((int64_t)P * Q)) * H * W;
        int h0, h1, w0, w1;
        mpt_pool_window(p, s, pad, k, H, &h0, &h1);
        mpt_pool_window(q, s, pad, k, W, &w0, &w1);
        float best = -INFINITY;
        int32_t arg = h0 * W + w0;
        for (int h = h0; h < h1; h++)
            for (int w = w0; w < w1; w++) {
                float v = mpt_dev_load(x, dtype, xin + h * W + w);
                if (v > best || isnan(v)) {
                    best = v;
                    arg = h * W + w;
                }
            }
        mpt_dev_store(y, dtype, o, best);
        argmax[o] = arg;
    }
}

/* One thread per input element: gathers the dy of the windows whose argmax it is (no atomics, deterministic),
 * sums them in FP32 in window order and adds the sum to dx with one rounding, as the CPU does. */
static __global__ void maxpool_backward_kernel(void *dx, const void *dy, const int32_t *argmax, mpt_dtype dtype,
                                               int64_t planes, int H, int W, int P, int Q, int k, int s, int pad) {
    const int64_t total = planes * H * W;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int w = (int)(e % W), h = (int)((e / W) % H);
        const int64_t yout = (e / ((int64_t)H * W)) * P * Q;
        int p0, p1, q0, q1; /* the windows that cover (h, w) */
        mpt_pool_covering(h, s, pad, k, P, &p0, &p1);
        mpt_pool_covering(w, s, pad, k, Q, &q0, &q1);
        const int32_t self = h * W + w;
        float acc = 0.0f;
        int hit = 0;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++)
                if (argmax[yout + p * Q + q] == self) {
                    acc = __fadd_rn(acc, mpt_dev_load(dy, dtype, yout + p * Q + q));
                    hit = 1;
                }
        if (hit) mpt_dev_store(dx, dtype, e, __fadd_rn(mpt_dev_load(dx, dtype, e), acc));
    }
}

static void launch_maxpool_forward(const mpt_cuda_ctx *ctx, void *y, int32_t *argmax, const void *x, mpt_dtype dtype,
                                   int64_t planes, int H, int W, int P, int Q, int k, int s, int pad) {
    maxpool_forward_kernel<<<mpt_cuda_blocks(ctx, planes * P * Q), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        y, argmax, x, dtype, planes, H, W, P, Q, k, s, pad);
    MPT_CUDA_CHECK_LAUNCH("maxpool_forward_kernel");
}

static void launch_maxpool_backward(const mpt_cuda_ctx *ctx, void *dx, const void *dy, const int32_t *argmax,
                                    mpt_dtype dtype, int64_t planes, int H, int W, int P, int Q, int k, int s,
                                    int pad) {
    maxpool_backward_kernel<<<mpt_cuda_blocks(ctx, planes * H * W), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        dx, dy, argmax, dtype, planes, H, W, P, Q, k, s, pad);
    MPT_CUDA_CHECK_LAUNCH("maxpool_backward_kernel");
}

void mpt_cuda_maxpool_forward(mpt_backend *be, const mpt_pool_args *a) {
    mpt_pool_args_check(a, "maxpool_forward");
    launch_maxpool_forward(mpt_cuda_ctx_of(be), a->y, a->argmax, a->x, a->dtype, (int64_t)a->N * a->C, a->H, a->W, a->P,
                           a->Q, a->kernel, a->stride, a->pad);
}

void mpt_cuda_maxpool_backward(mpt_backend *be, const mpt_pool_args *a) {
    mpt_pool_args_check(a, "maxpool_backward");
    launch_maxpool_backward(mpt_cuda_ctx_of(be), a->dx, a->dy, a->argmax, a->dtype, (int64_t)a->N * a->C, a->H, a->W,
                            a->P, a->Q, a->kernel, a->stride, a->pad);
}

/* ---- dropout ------------------------------------------------------------------------------------------------------
 */

/* The host-API device generator, with seed and offset set as engine/rng.c sets them on the host generator, so
 * the uniforms are mpt_rng_uniform's (cuRAND documents host and device generation as giving the same sequence;
 * test_cuda checks it bit for bit). */
extern "C" void mpt_cuda_rng_uniform(mpt_backend *be, float *out, size_t n, uint64_t seed, uint64_t offset) {
    MPT_ASSERTF(be != NULL && be->device == MPT_DEVICE_CUDA, "mpt_cuda_rng_uniform needs a CUDA backend");
    if (n == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    MPT_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(ctx->rng, seed));
    MPT_CURAND_CHECK(curandSetGeneratorOffset(ctx->rng, offset));
    MPT_CURAND_CHECK(curandGenerateUniform(ctx->rng, out, n));
}

/* u[i] = element offset + i of cuRAND's Philox uniform stream for `seed`, computed in place
 * (mpt_philox_uniform, engine/numerics.h: the numbers cuRAND's host generator gives the CPU backend);
 * mask[i] = u[i] > p; y[i] = mask ? x[i] / (1 - p) : 0 (one IEEE division). */
static __global__ void dropout_forward_kernel(void *y, uint8_t *mask, const void *x, uint64_t seed, uint64_t offset,
                                              const int64_t *iteration, uint64_t stride, mpt_dtype dtype, int64_t n,
                                              float p) {
    const float keep = __fsub_rn(1.0f, p);
    if (iteration) offset += (uint64_t)*iteration * stride;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint8_t k = mpt_philox_uniform(seed, offset + (uint64_t)i) > p;
        mask[i] = k;
        mpt_dev_store(y, dtype, i, k ? __fdiv_rn(mpt_dev_load(x, dtype, i), keep) : 0.0f);
    }
}

static __global__ void dropout_backward_kernel(void *dx, const void *dy, const uint8_t *mask, mpt_dtype dtype,
                                               int64_t n, float p, int accumulate) {
    const float keep = __fsub_rn(1.0f, p);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = mask[i] ? __fdiv_rn(mpt_dev_load(dy, dtype, i), keep) : 0.0f;
        mpt_dev_store(dx, dtype, i, accumulate ? __fadd_rn(mpt_dev_load(dx, dtype, i), g) : g);
    }
}

static void launch_dropout_forward(const mpt_cuda_ctx *ctx, void *y, uint8_t *mask, const void *x, uint64_t seed,
                                   uint64_t offset, const int64_t *iteration, uint64_t stride, mpt_dtype dtype,
                                   int64_t n, float p) {
    dropout_forward_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(y, mask, x, seed, offset,
                                                                                          iteration, stride, dtype, n, p);
    MPT_CUDA_CHECK_LAUNCH("dropout_forward_kernel");
}

static void launch_dropout_backward(const mpt_cuda_ctx *ctx, void *dx, const void *dy, const uint8_t *mask,
                                    mpt_dtype dtype, int64_t n, float p, int accumulate) {
    dropout_backward_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(dx, dy, mask, dtype, n, p,
                                                                                          accumulate);
    MPT_CUDA_CHECK_LAUNCH("dropout_backward_kernel");
}

void mpt_cuda_dropout_forward(mpt_backend *be, void *y, const void *x, uint8_t *mask, mpt_dtype dtype, int64_t n,
                              float p, uint64_t seed, uint64_t offset, const int64_t *iteration, uint64_t stride) {
    mpt_cuda_require_float(dtype, "dropout_forward");
    MPT_ASSERTF(p >= 0.0f && p < 1.0f, "dropout_forward: p = %g outside [0, 1)", (double)p);
    MPT_ASSERT(n >= 0);
    if (n == 0) return;
    /* one launch: the uniforms are computed inside the kernel (no cuRAND call, no workspace, nothing that a
     * CUDA graph would have to re-seed) */
    launch_dropout_forward(mpt_cuda_ctx_of(be), y, mask, x, seed, offset, iteration, stride, dtype, n, p);
}

void mpt_cuda_dropout_backward(mpt_backend *be, void *dx, const void *dy, const uint8_t *mask, mpt_dtype dtype,
                               int64_t n, float p, int accumulate) {
    mpt_cuda_require_float(dtype, "dropout_backward");
    MPT_ASSERTF(p >= 0.0f && p < 1.0f, "dropout_backward: p = %g outside [0, 1)", (double)p);
    MPT_ASSERT(n >= 0);
    if (n == 0) return;
    launch_dropout_backward(mpt_cuda_ctx_of(be), dx, dy, mask, dtype, n, p, accumulate);
}

/* ---- softmax + cross-entropy ------------------------------------------------------------------------------------- */

#define XENT_MAX_THREADS 256
#define XENT_MEAN_THREADS 256 /* softmax_xent_mean_kernel's block; the fused forward's mean reproduces its order */
#define XENT_MEAN_WARPS (XENT_MEAN_THREADS / 32)

/* The fused forward's finish, run by the last block of softmax_xent_rows_kernel<true> (blockDim.x any multiple
 * of 32): *loss = the mean of the N row losses exactly as softmax_xent_mean_kernel computes it, and
 * *valid_rows = the number of rows with labels[i] >= 0 (for softmax_xent_backward).
 * Why the loss has the mean kernel's bits: that kernel's thread t (0 <= t < 256) sums row_loss[t],
 * row_loss[t + 256], ... in FP64 from 0.0; mpt_block_sum then adds the 32 partials of each warp with the
 * shuffle-down tree (offsets 16, 8, 4, 2, 1: lane 0 ends with the warp's sum), and warp 0 adds the 8 warp sums,
 * padded with 24 zeros, with the same tree. Here the block may be smaller (32 threads for C <= 32), so warp w
 * plays the mean kernel's warps v = w, w + blockDim.x/32, ... below 8 (all lanes of a warp take the same turns,
 * so every shuffle is whole): lane l sums rows v*32 + l + 256k in the same order from 0.0, the same shuffle tree
 * gives lane 0 warp v's sum, and warp 0 runs the same tree over the same 8 sums and the same zeros. Every FP64
 * addition has the same operands in the same order (an addition without a multiply is never contracted into an
 * FMA), and the division and the rounding to FP32 are the same expression. The valid count is an integer sum,
 * exact in any order. row_loss is read with __ldcg (from L2, where the other blocks' fenced stores are; never a
 * stale L1 line). */
static __device__ void softmax_xent_finish(float *loss, int32_t *valid_rows, const float *row_loss,
                                           const int32_t *labels, int N) {
    __shared__ double warp_sum[XENT_MEAN_WARPS];
    __shared__ int red_i[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    int valid = 0;
    for (int v = warp; v < XENT_MEAN_WARPS; v += n_warps) {
        double sum = 0.0;
        for (int i = v * 32 + lane; i < N; i += XENT_MEAN_THREADS) {
            sum += (double)__ldcg(row_loss + i);
            valid += labels[i] >= 0;
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (lane == 0) warp_sum[v] = sum;
    }
    valid = mpt_block_sum(valid, red_i); /* its __syncthreads also publish warp_sum */
    if (warp == 0) {
        double sum = lane < XENT_MEAN_WARPS ? warp_sum[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (lane == 0) {
            *loss = valid > 0 ? (float)(sum / (double)valid) : 0.0f;
            *valid_rows = valid;
        }
    }
}

/* One block per row i: probs[i,:] = softmax(logits[i,:]) in FP32; row_loss[i] = logsumexp - logit[label] for a
 * valid row (label >= 0), 0 for an ignored one; n_correct += [argmax == label] for a valid row. The argmax and
 * the max it shifts by are the CPU loop's, NaN included (see the comment inside).
 * fused (MPT_CUDA_FUSED_LOSS=1): the block that finishes last (threadFenceReduction, CUDA samples: each block's
 * thread 0 makes its row loss visible device-wide with __threadfence() and then counts the block done on
 * *blocks_done) also computes *loss and *valid_rows from all row losses (softmax_xent_finish) and resets
 * *blocks_done to 0 for the next launch or graph replay; loss, valid_rows and blocks_done are unused otherwise.
 * Both variants are this one source, so the row computation compiles from the same code at the same block size. */
template <bool fused>
static __global__ void softmax_xent_rows_kernel(float *probs, float *row_loss, int32_t *n_correct, const void *logits,
                                                mpt_dtype dtype, const int32_t *labels, int C, float *loss,
                                                int32_t *valid_rows, unsigned int *blocks_done, int N) {
    __shared__ float red[32];
    __shared__ float s_max;
    __shared__ int s_arg;
    const int64_t row = blockIdx.x;
    const int64_t base = row * C;
    /* The CPU's rule (a sequential scan from element 0 taking v > max): the argmax is the first index of the
     * largest non-NaN value, except that a NaN at element 0 is never replaced (no comparison with NaN is
     * true), and the max is the value at the argmax. Here: per-thread first index of the largest non-NaN
     * value over c = tid, tid + blockDim, ..., then a block reduction (larger value wins, equal values ->
     * smaller index), then element 0's NaN rule. */
    float mx = -INFINITY;
    int arg = C; /* "none yet" sorts after every real index */
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = mpt_dev_load(logits, dtype, base + c);
        if (!isnan(v) && (arg == C || v > mx)) {
            mx = v;
            arg = c;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_down_sync(0xffffffffu, mx, o);
        int oa = __shfl_down_sync(0xffffffffu, arg, o);
        if (oa != C && (arg == C || om > mx || (om == mx && oa < arg))) {
            mx = om;
            arg = oa;
        }
    }
    __shared__ float w_max[32];
    __shared__ int w_arg[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    if (lane == 0) {
        w_max[warp] = mx;
        w_arg[warp] = arg;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int a = w_arg[0];
        float m = w_max[0];
        for (int w = 1; w < n_warps; w++)
            if (w_arg[w] != C && (a == C || w_max[w] > m || (w_max[w] == m && w_arg[w] < a))) {
                m = w_max[w];
                a = w_arg[w];
            }
        if (a == C || isnan(mpt_dev_load(logits, dtype, base))) a = 0; /* all NaN, or NaN first: element 0 */
        s_max = mpt_dev_load(logits, dtype, base + a);
        s_arg = a;
    }
    __syncthreads();
    const float m = s_max;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) sum += expf(mpt_dev_load(logits, dtype, base + c) - m);
    sum = mpt_block_sum(sum, red);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        probs[base + c] = expf(mpt_dev_load(logits, dtype, base + c) - m) / sum;
    if (threadIdx.x == 0) {
        const int32_t label = labels[row];
        assert(label < C); /* valid labels are checked where they enter (data loading) */
        if (label >= 0) {
            const float lse = m + logf(sum);
            row_loss[row] = lse - mpt_dev_load(logits, dtype, base + label);
            if (n_correct && s_arg == label) atomicAdd(n_correct, 1);
        } else {
            row_loss[row] = 0.0f;
        }
    }
    if (fused) {
        __shared__ int s_last;
        if (threadIdx.x == 0) {
            __threadfence(); /* row_loss[row] (written by this thread) is visible to every block before... */
            const unsigned int done = atomicAdd(blocks_done, 1u); /* ...this block counts itself done */
            s_last = done == gridDim.x - 1;
            if (s_last) __threadfence(); /* every other block's row loss is visible to this one from here on */
        }
        __syncthreads();
        if (s_last) {
            softmax_xent_finish(loss, valid_rows, row_loss, labels, N);
            if (threadIdx.x == 0) *blocks_done = 0; /* every block has counted: the next launch starts from 0 */
        }
    }
}

/* One block: *loss = sum of the row losses (FP64) / number of valid rows, rounded once to FP32 (0 when no row is
 * valid), as the CPU computes the mean. Launched with XENT_MEAN_THREADS threads. */
static __global__ void softmax_xent_mean_kernel(float *loss, const float *row_loss, const int32_t *labels, int N) {
    __shared__ double red_d[32];
    __shared__ int red_i[32];
    double sum = 0.0;
    int valid = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        sum += (double)row_loss[i];
        valid += labels[i] >= 0;
    }
    sum = mpt_block_sum(sum, red_d);
    valid = mpt_block_sum(valid, red_i);
    if (threadIdx.x == 0) *loss = valid > 0 ? (float)(sum / (double)valid) : 0.0f;
}

/* One block: *valid = number of rows with labels[i] >= 0. */
static __global__ void count_valid_rows_kernel(int32_t *valid, const int32_t *labels, int N) {
    __shared__ int red[32];
    int v = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) v += labels[i] >= 0;
    v = mpt_block_sum(v, red);
    if (threadIdx.x == 0) *valid = v;
}

/* dlogits[i,c] = round(dlogits[i,c] + scale * (probs[i,c] - [c == label_i]) / N_valid) for valid rows, with the
 * CPU's operation order (multiply, then divide, then add; no contraction); accumulate = 0: without the old value,
 * and +0 on ignored rows. */
static __global__ void softmax_xent_backward_kernel(void *dlogits, mpt_dtype dtype, const float *probs,
                                                    const int32_t *labels, const int32_t *valid, int N, int C,
                                                    const float *scale, int accumulate) {
    const float s = *scale, fN = (float)*valid;
    const int64_t total = (int64_t)N * C;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / C;
        const int c = (int)(e % C);
        const int32_t label = labels[i];
        if (label < 0) {
            if (!accumulate) mpt_dev_store(dlogits, dtype, e, 0.0f);
            continue;
        }
        const float onehot = c == label ? 1.0f : 0.0f;
        const float g = __fdiv_rn(__fmul_rn(s, __fsub_rn(probs[e], onehot)), fN);
        mpt_dev_store(dlogits, dtype, e, accumulate ? __fadd_rn(mpt_dev_load(dlogits, dtype, e), g) : g);
    }
}

static int xent_threads(int C) {
    int t = 32;
    while (t < C && t < XENT_MAX_THREADS) t *= 2;
    return t;
}

/* fused = 0: the rows kernel, then the mean kernel; fused = 1: the rows kernel alone, whose last block takes the mean
 * and stores the valid count in *valid (for the backward) */
static void launch_softmax_xent_forward(const mpt_cuda_ctx *ctx, float *loss, float *probs, int32_t *n_correct,
                                        float *row_loss, const void *logits, mpt_dtype dtype, const int32_t *labels,
                                        int N, int C, int fused, int32_t *valid, unsigned int *blocks_done) {
    if (fused) {
        softmax_xent_rows_kernel<true><<<N, xent_threads(C), 0, ctx->stream>>>(
            probs, row_loss, n_correct, logits, dtype, labels, C, loss, valid, blocks_done, N);
        MPT_CUDA_CHECK_LAUNCH("softmax_xent_rows_kernel<fused>");
        return;
    }
    softmax_xent_rows_kernel<false><<<N, xent_threads(C), 0, ctx->stream>>>(probs, row_loss, n_correct, logits, dtype,
                                                                            labels, C, NULL, NULL, NULL, N);
    MPT_CUDA_CHECK_LAUNCH("softmax_xent_rows_kernel");
    softmax_xent_mean_kernel<<<1, XENT_MEAN_THREADS, 0, ctx->stream>>>(loss, row_loss, labels, N);
    MPT_CUDA_CHECK_LAUNCH("softmax_xent_mean_kernel");
}

/* fused = 0: counts the valid rows into *valid first; fused = 1: *valid is the count the last fused forward stored */
static void launch_softmax_xent_backward(const mpt_cuda_ctx *ctx, void *dlogits, mpt_dtype dtype, const float *probs,
                                         const int32_t *labels, int32_t *valid, int N, int C, const float *scale,
                                         int accumulate, int fused) {
    if (!fused) {
        count_valid_rows_kernel<<<1, 256, 0, ctx->stream>>>(valid, labels, N);
        MPT_CUDA_CHECK_LAUNCH("count_valid_rows_kernel");
    }
    softmax_xent_backward_kernel<<<mpt_cuda_blocks(ctx, (int64_t)N * C), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        dlogits, dtype, probs, labels, valid, N, C, scale, accumulate);
    MPT_CUDA_CHECK_LAUNCH("softmax_xent_backward_kernel");
}

void mpt_cuda_softmax_xent_forward(mpt_backend *be, float *loss, float *probs, int32_t *n_correct, const void *logits,
                                   mpt_dtype logits_dtype, const int32_t *labels, int N, int C) {
    mpt_cuda_require_float(logits_dtype, "softmax_xent_forward");
    MPT_ASSERTF(N >= 1 && C >= 1, "softmax_xent_forward: N = %d, C = %d", N, C);
    MPT_ASSERTF((size_t)N * sizeof(float) <= MPT_CUDA_SCRATCH_BYTES,
                "softmax_xent_forward: %d rows exceed the CUDA backend's loss scratch (%zu rows)", N,
                MPT_CUDA_SCRATCH_BYTES / sizeof(float));
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (ctx->fused_loss) mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_FUSED_LOSS);
    launch_softmax_xent_forward(ctx, loss, probs, n_correct, (float *)ctx->scratch, logits, logits_dtype, labels, N, C,
                                ctx->fused_loss, ctx->valid_rows, ctx->xent_blocks_done);
}

void mpt_cuda_softmax_xent_backward(mpt_backend *be, void *dlogits, mpt_dtype dlogits_dtype, const float *probs,
                                    const int32_t *labels, int N, int C, const float *scale, int accumulate) {
    mpt_cuda_require_float(dlogits_dtype, "softmax_xent_backward");
    MPT_ASSERTF(N >= 1 && C >= 1, "softmax_xent_backward: N = %d, C = %d", N, C);
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (ctx->fused_loss) mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_FUSED_LOSS);
    launch_softmax_xent_backward(ctx, dlogits, dlogits_dtype, probs, labels, ctx->valid_rows, N, C, scale, accumulate,
                                 ctx->fused_loss);
}

/* ---- bias gradient (column sums of a row-major [rows, cols]) --------------------------------------------------------
 */

#define BIAS_TILE_X 32
#define BIAS_TILE_Y 8

/* Block (32, 8) per 32 columns: thread (x, y) sums rows y, y+8, ... of its column in FP32, then the 8 partials
 * are added in order; db[c] = db[c] + sum (accumulate) or sum. U = 1: one load, then its add, at a time, so each
 * thread waits out U-fold the load latency (the mlp's 128 rows: 16 loads in a row, 9.4 us on an H200, ncu
 * 2026-11-26). U = 8 (MPT_CUDA_BIAS_GRAD_ILP=1, opt-in until a GPU session has run test_bias_grad_ilp_bit_identical):
 * the next U rows' loads are issued together, then added in the same row order: the same sums, the same bits. */
template <int U>
static __global__ void bias_grad_kernel(float *db, const void *dy, mpt_dtype dtype, int64_t rows, int64_t cols,
                                        int accumulate) {
    __shared__ float part[BIAS_TILE_Y][BIAS_TILE_X + 1];
    const int64_t c = (int64_t)blockIdx.x * BIAS_TILE_X + threadIdx.x;
    float acc = 0.0f;
    if (c < cols)
        for (int64_t r0 = threadIdx.y; r0 < rows; r0 += (int64_t)U * BIAS_TILE_Y) {
            float v[U];
#pragma unroll
            for (int u = 0; u < U; u++) { /* all loads first */
                const int64_t r = r0 + (int64_t)u * BIAS_TILE_Y;
                v[u] = r < rows ? mpt_dev_load(dy, dtype, r * cols + c) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < U; u++) /* then the adds, in row order; rows past the end add nothing (not +0) */
                if (r0 + (int64_t)u * BIAS_TILE_Y < rows) acc += v[u];
        }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float s = part[0][threadIdx.x];
        for (int y = 1; y < BIAS_TILE_Y; y++) s += part[y][threadIdx.x];
        db[c] = accumulate ? db[c] + s : s;
    }
}

static void launch_bias_grad(const mpt_cuda_ctx *ctx, float *db, const void *dy, mpt_dtype dtype, int64_t rows,
                             int64_t cols, int accumulate) {
    dim3 block(BIAS_TILE_X, BIAS_TILE_Y);
    unsigned grid = (unsigned)((cols + BIAS_TILE_X - 1) / BIAS_TILE_X);
    if (ctx->bias_grad_ilp) bias_grad_kernel<8><<<grid, block, 0, ctx->stream>>>(db, dy, dtype, rows, cols, accumulate);
    else bias_grad_kernel<1><<<grid, block, 0, ctx->stream>>>(db, dy, dtype, rows, cols, accumulate);
    MPT_CUDA_CHECK_LAUNCH("bias_grad_kernel");
}

void mpt_cuda_bias_grad(mpt_backend *be, float *db, const void *dy, mpt_dtype dtype, int64_t rows, int64_t cols,
                        int accumulate) {
    mpt_cuda_require_float(dtype, "bias_grad");
    MPT_ASSERT(rows >= 0 && cols >= 0);
    MPT_ASSERTF((cols + BIAS_TILE_X - 1) / BIAS_TILE_X <= 0x7fffffff, "bias_grad: %lld columns", (long long)cols);
    if (cols == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (ctx->bias_grad_ilp) mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_BIAS_GRAD_ILP);
    launch_bias_grad(ctx, db, dy, dtype, rows, cols, accumulate);
}

/* ---- channel helpers of conv.cu (NCHW) ----------------------------------------------------------------------------
 */

/* y[n, k, j] = bias[k], copied bit for bit (elem_size 2 or 4). */
static __global__ void broadcast_channel_bias_kernel(void *y, const void *bias, int elem_size, int K, int64_t HW,
                                                     int64_t total) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int k = (int)((e / HW) % K);
        if (elem_size == 2) ((uint16_t *)y)[e] = ((const uint16_t *)bias)[k];
        else ((float *)y)[e] = ((const float *)bias)[k];
    }
}

void mpt_cuda_broadcast_channel_bias(mpt_cuda_ctx *ctx, void *y, const void *bias, mpt_dtype dtype, int N, int K,
                                     int64_t HW) {
    const int64_t total = (int64_t)N * K * HW;
    broadcast_channel_bias_kernel<<<mpt_cuda_blocks(ctx, total), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        y, bias, (int)mpt_dtype_size(dtype), K, HW, total);
    MPT_CUDA_CHECK_LAUNCH("broadcast_channel_bias_kernel");
}

/* One block of CHANNEL_SUM_THREADS per channel k: db[k] = db[k] + sum over n and j of dy[n, k, j] (FP32, fixed
 * order and tree: the same bits on every run); accumulate = 0: db[k] = the sum. A channel is a few blocks' worth of
 * work at most (lenet5's conv1: 6 channels of 128 x 28 x 28), so the time is load latency: each thread keeps
 * CHANNEL_SUM_ILP loads in flight, 1024 threads a block. The first form (256 threads, one load at a time) took
 * 222 us a step for conv1 on an H200, 40% of lenet5's step (ncu, 2026-11-26). */
#define CHANNEL_SUM_THREADS 1024
#define CHANNEL_SUM_ILP 8 /* the final sum below adds exactly 8 */
/* The block's sum of values [begin, end) of channel k (value e of the channel: dy[e / HW, k, e % HW]): thread i adds
 * values begin + i, begin + i + blockDim.x, ... in CHANNEL_SUM_ILP accumulators (all loads of a round first, then
 * the adds), joins them in a fixed tree, then the block's tree (mpt_block_sum); every thread gets the sum. */
static __device__ float channel_range_sum(const void *dy, mpt_dtype dtype, int K, int64_t HW, int k, int64_t begin,
                                          int64_t end, float *red) {
    const int64_t step = (int64_t)CHANNEL_SUM_ILP * blockDim.x;
    float acc[CHANNEL_SUM_ILP];
#pragma unroll
    for (int u = 0; u < CHANNEL_SUM_ILP; u++) acc[u] = 0.0f;
    for (int64_t base = begin + threadIdx.x; base < end; base += step) {
        float v[CHANNEL_SUM_ILP];
#pragma unroll
        for (int u = 0; u < CHANNEL_SUM_ILP; u++) { /* all loads first, then the adds */
            const int64_t e = base + (int64_t)u * blockDim.x;
            v[u] = e < end ? mpt_dev_load(dy, dtype, ((e / HW) * K + k) * HW + e % HW) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < CHANNEL_SUM_ILP; u++) acc[u] += v[u];
    }
    const float t = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    return mpt_block_sum(t, red);
}

static __global__ void __launch_bounds__(CHANNEL_SUM_THREADS)
    channel_sum_kernel(float *db, const void *dy, mpt_dtype dtype, int N, int K, int64_t HW, int accumulate) {
    __shared__ float red[32];
    const int k = blockIdx.x;
    const float t = channel_range_sum(dy, dtype, K, HW, k, 0, (int64_t)N * HW, red);
    if (threadIdx.x == 0) db[k] = accumulate ? db[k] + t : t;
}

/* The split form (MPT_CUDA_SPLIT_CHANNEL_SUM=1, opt-in until a GPU session has run test_channel_sum_split): a channel
 * of lenet5's conv1 is 100352 values, and 6 blocks on 132 SMs took 64 us a step (ncu, H200, 2026-11-26). Here a grid of
 * (chunks, K) blocks of CHANNEL_SPLIT_THREADS each sums one chunk of CHANNEL_SPLIT_CHUNK consecutive values of one
 * channel (the same ILP loop and block tree as above) into partial[k * chunks + c] in the context's scratch; then one
 * warp per channel adds its chunks' partials in a fixed order (lane l: chunks l, l + 32, ... in turn, then the warp's
 * shuffle tree) and adds db[k] last, as the one-block kernel does. Fixed shapes and orders: the same bits on every
 * run and in a graph replay; another summation order than the one-block kernel's (a different last bit, bounded as
 * any FP32 sum of N*HW terms). Two kernels, no counter: nothing to reset if a launch fails. */
#define CHANNEL_SPLIT_THREADS 256
#define CHANNEL_SPLIT_CHUNK ((int64_t)CHANNEL_SPLIT_THREADS * CHANNEL_SUM_ILP) /* 2048 values per block */
#define CHANNEL_SPLIT_MAX_CHUNKS 1024 /* per channel: a warp adds at most 32 partials per lane */
static __global__ void __launch_bounds__(CHANNEL_SPLIT_THREADS)
    channel_partial_kernel(float *partial, const void *dy, mpt_dtype dtype, int K, int64_t HW, int64_t per_channel,
                           int64_t chunk_len) {
    __shared__ float red[32];
    const int c = blockIdx.x, k = blockIdx.y;
    const int64_t begin = (int64_t)c * chunk_len;
    const int64_t end = begin + chunk_len < per_channel ? begin + chunk_len : per_channel;
    const float t = channel_range_sum(dy, dtype, K, HW, k, begin, end, red);
    if (threadIdx.x == 0) partial[(int64_t)k * gridDim.x + c] = t;
}

static __global__ void channel_partials_sum_kernel(float *db, const float *partial, int chunks, int accumulate) {
    const int k = blockIdx.x;
    float t = 0.0f;
    for (int c = threadIdx.x; c < chunks; c += 32) t += partial[(int64_t)k * chunks + c];
    for (int o = 16; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) db[k] = accumulate ? db[k] + t : t;
}

/* Chunks per channel of the split form for n values (0: the one-block kernel, when the partials of K channels
 * would not fit the scratch). At least CHANNEL_SPLIT_CHUNK values a chunk, at most CHANNEL_SPLIT_MAX_CHUNKS. */
static int channel_split_chunks(int K, int64_t per_channel, int64_t *chunk_len) {
    int64_t chunks = (per_channel + CHANNEL_SPLIT_CHUNK - 1) / CHANNEL_SPLIT_CHUNK;
    if (chunks > CHANNEL_SPLIT_MAX_CHUNKS) chunks = CHANNEL_SPLIT_MAX_CHUNKS;
    if (chunks < 1) chunks = 1;
    if ((size_t)K * (size_t)chunks * sizeof(float) > MPT_CUDA_SCRATCH_BYTES) return 0;
    *chunk_len = (per_channel + chunks - 1) / chunks;
    return (int)chunks;
}

void mpt_cuda_channel_sum(mpt_cuda_ctx *ctx, float *db, const void *dy, mpt_dtype dtype, int N, int K, int64_t HW,
                          int accumulate) {
    const int64_t per_channel = (int64_t)N * HW;
    int64_t chunk_len = 0;
    const int chunks = ctx->split_channel_sum && K <= 65535 ? channel_split_chunks(K, per_channel, &chunk_len) : 0;
    if (chunks == 0) {
        channel_sum_kernel<<<K, CHANNEL_SUM_THREADS, 0, ctx->stream>>>(db, dy, dtype, N, K, HW, accumulate);
        MPT_CUDA_CHECK_LAUNCH("channel_sum_kernel");
        return;
    }
    mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_SPLIT_CHANNEL_SUM);
    float *partial = (float *)ctx->scratch;
    channel_partial_kernel<<<dim3((unsigned)chunks, (unsigned)K), CHANNEL_SPLIT_THREADS, 0, ctx->stream>>>(
        partial, dy, dtype, K, HW, per_channel, chunk_len);
    MPT_CUDA_CHECK_LAUNCH("channel_partial_kernel");
    channel_partials_sum_kernel<<<K, 32, 0, ctx->stream>>>(db, partial, chunks, accumulate);
    MPT_CUDA_CHECK_LAUNCH("channel_partials_sum_kernel");
}

/* ---- batch gather -------------------------------------------------------------------------------------------------
 */

/* Grid (column blocks, B): x[b, d] = ((u8 / 255) - mean) * inv_std rounded to x_dtype, the CPU's FP32
 * expression with IEEE operations; a padding row (idx[b] < 0) becomes zeros with label -1. */
static __global__ void gather_batch_kernel(void *x, mpt_dtype x_dtype, int32_t *labels, const uint8_t *images,
                                           const uint8_t *image_labels, const int32_t *idx, int64_t D, float mean,
                                           float inv_std) {
    const int b = blockIdx.y;
    const int32_t id = idx[b];
    const int64_t row = (int64_t)b * D;
    for (int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; d < D; d += (int64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        if (id >= 0) v = __fmul_rn(__fsub_rn(__fdiv_rn((float)images[(int64_t)id * D + d], 255.0f), mean), inv_std);
        mpt_dev_store(x, x_dtype, row + d, v);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) labels[b] = id >= 0 ? (int32_t)image_labels[id] : -1;
}

static void launch_gather_batch(const mpt_cuda_ctx *ctx, void *x, mpt_dtype x_dtype, int32_t *labels,
                                const uint8_t *images, const uint8_t *image_labels, const int32_t *idx, int B,
                                int64_t D, float mean, float inv_std) {
    int64_t cols = (D + MPT_CUDA_THREADS - 1) / MPT_CUDA_THREADS;
    if (cols > 64) cols = 64;
    if (cols < 1) cols = 1;
    dim3 grid((unsigned)cols, (unsigned)B);
    gather_batch_kernel<<<grid, MPT_CUDA_THREADS, 0, ctx->stream>>>(x, x_dtype, labels, images, image_labels, idx, D,
                                                                     mean, inv_std);
    MPT_CUDA_CHECK_LAUNCH("gather_batch_kernel");
}

void mpt_cuda_gather_batch(mpt_backend *be, void *x, mpt_dtype x_dtype, int32_t *labels, const uint8_t *images,
                           const uint8_t *image_labels, const int32_t *idx, int B, int64_t D, float mean,
                           float inv_std) {
    mpt_cuda_require_float(x_dtype, "gather_batch");
    MPT_ASSERTF(B >= 0 && B <= 65535 && D >= 0, "gather_batch: B = %d (at most 65535), D = %lld", B, (long long)D);
    if (B == 0) return;
    launch_gather_batch(mpt_cuda_ctx_of(be), x, x_dtype, labels, images, image_labels, idx, B, D, mean, inv_std);
}
