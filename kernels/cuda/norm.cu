/*
 * kernels/cuda/norm.cu - the CUDA backend's batch norm and layer norm, forward and backward.
 *
 * Own kernels, not cuDNN's batch norm (cudnnBatchNormalizationForwardTraining and its backward): the padding rows of
 * a last partial batch must stay out of the statistics (mpt_norm_args.labels: PyTorch's smaller last batch), which the
 * cuDNN call cannot be told without a host synchronisation; cuDNN 9 marks those legacy entry points deprecated; and
 * own kernels keep the CPU oracle's formulas (engine/numerics.h) and its two-pass variance. Numerics as cuDNN's with
 * half data: FP32 statistics, FP32 gamma, beta and running statistics, 16-bit input and output.
 *
 * Three layers per operation (STYLE item 3); contracts in engine/backend.h (mpt_norm_args). Sums are FP32 in a fixed
 * block tree (mpt_block_sum: the same bits on every run); their order differs from the CPU's blocked sums, so the
 * statistics agree with the CPU within the FP32 summation bound, which tests/test_cuda.c checks. The per-element
 * normalisation, its backward, the variance's squared deviations and the running update are the CPU's functions
 * (mpt_elem_norm, mpt_elem_norm_dx, mpt_elem_sq_dev, mpt_elem_running), which use fmaf explicitly: the same bits
 * from the same statistics.
 *   batchnorm forward    bn_stats_kernel (training: one block per channel: valid rows, mean, two-pass variance,
 *                        saved mean and rstd, running update), then bn_apply_kernel (every element)
 *   batchnorm backward   bn_grad_sums_kernel (one block per channel: sum dy, sum dy x^ -> dbeta, dgamma and the two
 *                        means in the context's scratch), then bn_dx_kernel (every element; 0 on padding rows)
 *   layernorm forward    ln_forward_kernel (one block per row: statistics and y)
 *   layernorm backward   ln_dx_kernel (one block per row), ln_param_grad_kernel (one thread per feature: the rows in
 *                        order, as the CPU)
 */
#include "kernels/cuda/cuda_internal.cuh"

#define NORM_THREADS 256

static __device__ __forceinline__ int row_valid(const int32_t *labels, int64_t r) { return !labels || labels[r] >= 0; }

/* The number of valid rows (labels NULL: all N), for every thread of the block. */
static __device__ int64_t block_valid_rows(const int32_t *labels, int64_t N) {
    __shared__ int64_t red[32];
    int64_t v = 0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) v += row_valid(labels, r);
    return mpt_block_sum<int64_t>(v, red);
}

/* ---- batch norm ------------------------------------------------------------------------------------------------ */

static __global__ void bn_stats_kernel(const void *x, mpt_dtype dtype, int64_t N, int64_t C, int64_t S,
                                       const int32_t *labels, float *mean_out, float *rstd_out, float *running_mean,
                                       float *running_var, float eps, float momentum) {
    __shared__ float red[32];
    const int64_t c = blockIdx.x;
    const int64_t valid = block_valid_rows(labels, N), n = valid * S, total = N * S;
    float sum = 0.0f;
    for (int64_t e = threadIdx.x; e < total; e += blockDim.x) {
        const int64_t r = e / S;
        if (row_valid(labels, r)) sum = __fadd_rn(sum, mpt_dev_load(x, dtype, (r * C + c) * S + e % S));
    }
    sum = mpt_block_sum(sum, red);
    const float mean = n > 0 ? __fdiv_rn(sum, (float)n) : 0.0f;
    float sq = 0.0f;
    for (int64_t e = threadIdx.x; e < total; e += blockDim.x) {
        const int64_t r = e / S;
        if (row_valid(labels, r)) sq = mpt_elem_sq_dev(sq, mpt_dev_load(x, dtype, (r * C + c) * S + e % S), mean);
    }
    sq = mpt_block_sum(sq, red);
    if (threadIdx.x == 0) {
        const float var = n > 0 ? __fdiv_rn(sq, (float)n) : 0.0f;
        mean_out[c] = mean;
        rstd_out[c] = mpt_elem_rstd(var, eps);
        if (n > 0) {
            const float unbiased = n > 1 ? __fdiv_rn(sq, (float)(n - 1)) : var;
            running_mean[c] = mpt_elem_running(running_mean[c], mean, momentum);
            running_var[c] = mpt_elem_running(running_var[c], unbiased, momentum);
        }
    }
}

/* y = x^ gamma + beta from the batch statistics (training) or the running ones (evaluation). */
static __global__ void bn_apply_kernel(void *y, const void *x, mpt_dtype dtype, int64_t C, int64_t S, int64_t total,
                                       const float *mean, const float *rstd, const float *running_mean,
                                       const float *running_var, const float *gamma, const float *beta, float eps,
                                       int training) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = (e / S) % C;
        const float m = training ? mean[c] : running_mean[c];
        const float rs = training ? rstd[c] : mpt_elem_rstd(running_var[c], eps);
        mpt_dev_store(y, dtype, e, mpt_elem_norm(mpt_dev_load(x, dtype, e), m, rs, gamma[c], beta[c]));
    }
}

/* One block per channel: sum dy and sum dy x^ over the valid rows; dbeta, dgamma (+)= them; means[c] and
 * means[C + c] = the two sums / n for bn_dx_kernel. */
static __global__ void bn_grad_sums_kernel(const void *x, const void *dy, mpt_dtype dtype, int64_t N, int64_t C,
                                           int64_t S, const int32_t *labels, const float *mean, const float *rstd,
                                           float *dgamma, float *dbeta, int accumulate_params, float *means) {
    __shared__ float red[32];
    const int64_t c = blockIdx.x;
    const int64_t valid = block_valid_rows(labels, N), n = valid * S, total = N * S;
    const float m = mean[c], rs = rstd[c];
    float s_dy = 0.0f, s_dyx = 0.0f;
    for (int64_t e = threadIdx.x; e < total; e += blockDim.x) {
        const int64_t r = e / S;
        if (!row_valid(labels, r)) continue;
        const int64_t i = (r * C + c) * S + e % S;
        const float g = mpt_dev_load(dy, dtype, i);
        s_dy = __fadd_rn(s_dy, g);
        s_dyx = fmaf(g, __fmul_rn(__fsub_rn(mpt_dev_load(x, dtype, i), m), rs), s_dyx);
    }
    s_dy = mpt_block_sum(s_dy, red);
    s_dyx = mpt_block_sum(s_dyx, red);
    if (threadIdx.x == 0) {
        dbeta[c] = accumulate_params ? __fadd_rn(dbeta[c], s_dy) : s_dy;
        dgamma[c] = accumulate_params ? __fadd_rn(dgamma[c], s_dyx) : s_dyx;
        means[c] = n > 0 ? __fdiv_rn(s_dy, (float)n) : 0.0f;
        means[C + c] = n > 0 ? __fdiv_rn(s_dyx, (float)n) : 0.0f;
    }
}

static __global__ void bn_dx_kernel(void *dx, const void *dy, const void *x, mpt_dtype dtype, int64_t C, int64_t S,
                                    int64_t total, const int32_t *labels, const float *mean, const float *rstd,
                                    const float *gamma, const float *means, int accumulate) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = (e / S) % C, r = e / (S * C);
        float g = 0.0f; /* a padding row passes no gradient */
        if (row_valid(labels, r)) {
            const float rs = rstd[c], xhat = __fmul_rn(__fsub_rn(mpt_dev_load(x, dtype, e), mean[c]), rs);
            g = mpt_elem_norm_dx(mpt_dev_load(dy, dtype, e), xhat, means[c], means[C + c], __fmul_rn(gamma[c], rs));
        }
        mpt_dev_store(dx, dtype, e, accumulate ? __fadd_rn(mpt_dev_load(dx, dtype, e), g) : g);
    }
}

static void launch_bn_forward(const mpt_cuda_ctx *ctx, const mpt_norm_args *a) {
    const int64_t total = a->N * a->C * a->S;
    if (a->training) {
        bn_stats_kernel<<<(unsigned)a->C, NORM_THREADS, 0, ctx->stream>>>(a->x, a->dtype, a->N, a->C, a->S, a->labels,
                                                                          a->mean, a->rstd, a->running_mean,
                                                                          a->running_var, a->eps, a->momentum);
        MPT_CUDA_CHECK_LAUNCH("bn_stats_kernel");
    }
    bn_apply_kernel<<<mpt_cuda_blocks(ctx, total), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        a->y, a->x, a->dtype, a->C, a->S, total, a->mean, a->rstd, a->running_mean, a->running_var, a->gamma, a->beta,
        a->eps, a->training);
    MPT_CUDA_CHECK_LAUNCH("bn_apply_kernel");
}

static void launch_bn_backward(const mpt_cuda_ctx *ctx, const mpt_norm_args *a, float *means) {
    const int64_t total = a->N * a->C * a->S;
    bn_grad_sums_kernel<<<(unsigned)a->C, NORM_THREADS, 0, ctx->stream>>>(a->x, a->dy, a->dtype, a->N, a->C, a->S,
                                                                          a->labels, a->mean, a->rstd, a->dgamma,
                                                                          a->dbeta, a->accumulate_params, means);
    MPT_CUDA_CHECK_LAUNCH("bn_grad_sums_kernel");
    if (!a->dx) return; /* the input has no gradient */
    bn_dx_kernel<<<mpt_cuda_blocks(ctx, total), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        a->dx, a->dy, a->x, a->dtype, a->C, a->S, total, a->labels, a->mean, a->rstd, a->gamma, means, a->accumulate);
    MPT_CUDA_CHECK_LAUNCH("bn_dx_kernel");
}

/* What every public entry checks: the arguments (mpt_norm_args_check), FP32 two-pass statistics in a forward pass
 * (--norm-stats is refused on the GPU: tools/run.c), and its one-block-per-channel or per-row grid (`blocks` of
 * `what`) within CUDA's limit on gridDim.x, 2^31 - 1. */
static void norm_entry_check(const mpt_norm_args *a, const char *fn, int backward, int64_t blocks, const char *what) {
    mpt_norm_args_check(a, fn, backward);
    MPT_ASSERTF(backward || (a->stat_dtype == MPT_DTYPE_F32 && !a->one_pass), "%s: the CUDA backend computes FP32 "
                "two-pass statistics only (--norm-stats is refused on the GPU: tools/run.c)", fn);
    MPT_ASSERTF(blocks <= 0x7fffffff, "%s: %lld %s", fn, (long long)blocks, what);
}

void mpt_cuda_batchnorm_forward(mpt_backend *be, const mpt_norm_args *a) {
    norm_entry_check(a, "batchnorm_forward", 0, a->C, "channels");
    launch_bn_forward(mpt_cuda_ctx_of(be), a);
}

void mpt_cuda_batchnorm_backward(mpt_backend *be, const mpt_norm_args *a) {
    norm_entry_check(a, "batchnorm_backward", 1, a->C, "channels");
    MPT_ASSERTF(a->training, "batchnorm_backward: defined for training passes only (%s)", a->tag ? a->tag : "");
    MPT_ASSERTF((size_t)(2 * a->C) * sizeof(float) <= MPT_CUDA_SCRATCH_BYTES,
                "batchnorm_backward: %lld channels exceed the CUDA backend's scratch (%zu)", (long long)a->C,
                MPT_CUDA_SCRATCH_BYTES / (2 * sizeof(float)));
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    launch_bn_backward(ctx, a, (float *)ctx->scratch);
}

/* ---- layer norm ------------------------------------------------------------------------------------------------ */

/* One block per row: mean, two-pass biased variance, rstd (saved), y = x^ gamma + beta per feature. */
static __global__ void ln_forward_kernel(void *y, const void *x, mpt_dtype dtype, int64_t S, const float *gamma,
                                         const float *beta, float *mean_out, float *rstd_out, float eps) {
    __shared__ float red[32];
    const int64_t base = (int64_t)blockIdx.x * S;
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) sum = __fadd_rn(sum, mpt_dev_load(x, dtype, base + j));
    sum = mpt_block_sum(sum, red);
    const float mean = __fdiv_rn(sum, (float)S);
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
        sq = mpt_elem_sq_dev(sq, mpt_dev_load(x, dtype, base + j), mean);
    sq = mpt_block_sum(sq, red);
    const float rstd = mpt_elem_rstd(__fdiv_rn(sq, (float)S), eps);
    if (threadIdx.x == 0) {
        mean_out[blockIdx.x] = mean;
        rstd_out[blockIdx.x] = rstd;
    }
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
        mpt_dev_store(y, dtype, base + j, mpt_elem_norm(mpt_dev_load(x, dtype, base + j), mean, rstd, gamma[j], beta[j]));
}

/* One block per row: g = dy gamma, dx (+)= rstd (g - mean g - x^ mean(g x^)). */
static __global__ void ln_dx_kernel(void *dx, const void *dy, const void *x, mpt_dtype dtype, int64_t S,
                                    const float *gamma, const float *mean, const float *rstd, int accumulate) {
    __shared__ float red[32];
    const int64_t r = blockIdx.x, base = r * S;
    const float m = mean[r], rs = rstd[r];
    float s_g = 0.0f, s_gx = 0.0f;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
        const float g = __fmul_rn(mpt_dev_load(dy, dtype, base + j), gamma[j]);
        s_g = __fadd_rn(s_g, g);
        s_gx = fmaf(g, __fmul_rn(__fsub_rn(mpt_dev_load(x, dtype, base + j), m), rs), s_gx);
    }
    s_g = mpt_block_sum(s_g, red);
    s_gx = mpt_block_sum(s_gx, red);
    const float mean_g = __fdiv_rn(s_g, (float)S), mean_gx = __fdiv_rn(s_gx, (float)S);
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
        const float xhat = __fmul_rn(__fsub_rn(mpt_dev_load(x, dtype, base + j), m), rs);
        const float g = mpt_elem_norm_dx(__fmul_rn(mpt_dev_load(dy, dtype, base + j), gamma[j]), xhat, mean_g, mean_gx,
                                         rs);
        mpt_dev_store(dx, dtype, base + j, accumulate ? __fadd_rn(mpt_dev_load(dx, dtype, base + j), g) : g);
    }
}

/* One thread per feature j: the sums over the rows, in row order (the CPU's order: the same bits from the same
 * statistics), then one addition into the gradients. */
static __global__ void ln_param_grad_kernel(float *dgamma, float *dbeta, const void *dy, const void *x,
                                            mpt_dtype dtype, int64_t N, int64_t S, const float *mean,
                                            const float *rstd, int accumulate_params) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < S; j += (int64_t)gridDim.x * blockDim.x) {
        float sg = 0.0f, sb = 0.0f;
        for (int64_t r = 0; r < N; r++) {
            const float g = mpt_dev_load(dy, dtype, r * S + j);
            sb = __fadd_rn(sb, g);
            sg = fmaf(g, __fmul_rn(__fsub_rn(mpt_dev_load(x, dtype, r * S + j), mean[r]), rstd[r]), sg);
        }
        dgamma[j] = accumulate_params ? __fadd_rn(dgamma[j], sg) : sg;
        dbeta[j] = accumulate_params ? __fadd_rn(dbeta[j], sb) : sb;
    }
}

static void launch_ln_forward(const mpt_cuda_ctx *ctx, const mpt_norm_args *a) {
    ln_forward_kernel<<<(unsigned)a->N, NORM_THREADS, 0, ctx->stream>>>(a->y, a->x, a->dtype, a->S, a->gamma, a->beta,
                                                                        a->mean, a->rstd, a->eps);
    MPT_CUDA_CHECK_LAUNCH("ln_forward_kernel");
}

static void launch_ln_backward(const mpt_cuda_ctx *ctx, const mpt_norm_args *a) {
    if (a->dx) { /* NULL: the input has no gradient */
        ln_dx_kernel<<<(unsigned)a->N, NORM_THREADS, 0, ctx->stream>>>(a->dx, a->dy, a->x, a->dtype, a->S, a->gamma,
                                                                       a->mean, a->rstd, a->accumulate);
        MPT_CUDA_CHECK_LAUNCH("ln_dx_kernel");
    }
    ln_param_grad_kernel<<<mpt_cuda_blocks(ctx, a->S), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        a->dgamma, a->dbeta, a->dy, a->x, a->dtype, a->N, a->S, a->mean, a->rstd, a->accumulate_params);
    MPT_CUDA_CHECK_LAUNCH("ln_param_grad_kernel");
}

void mpt_cuda_layernorm_forward(mpt_backend *be, const mpt_norm_args *a) {
    norm_entry_check(a, "layernorm_forward", 0, a->N, "rows");
    launch_ln_forward(mpt_cuda_ctx_of(be), a);
}

void mpt_cuda_layernorm_backward(mpt_backend *be, const mpt_norm_args *a) {
    norm_entry_check(a, "layernorm_backward", 1, a->N, "rows");
    launch_ln_backward(mpt_cuda_ctx_of(be), a);
}
