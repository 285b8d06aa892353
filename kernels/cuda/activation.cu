/*
 * kernels/cuda/activation.cu - the CUDA backend's smooth activations (gelu, tanh, sigmoid, leaky ReLU) and average
 * pooling, forward and backward.
 *
 * Three layers per operation (STYLE item 3): a `static __global__` kernel, a `static` launcher on raw device pointers
 * and the context's stream that checks the launch, and the public entry that checks its arguments. Contracts:
 * engine/backend.h. The CPU backend is the oracle (kernels/cpu/activation.c): the same per-element functions of
 * engine/numerics.h (mpt_elem_act, mpt_elem_act_grad), each output rounded once. The activations' erff, expf and tanhf
 * are CUDA's (within 2 ulp), so they agree with the CPU's C library within a few FP32 ulps before the output's rounding
 * (tests/test_cuda.c bounds it). Average pooling sums each window in row-major window order and its backward gathers the
 * covering windows' gradients in the CPU's order, with IEEE _rn additions and division: the CPU's bits.
 */
#include "kernels/cuda/cuda_internal.cuh"

/* ---- activations --------------------------------------------------------------------------------------------- */

static __global__ void act_forward_kernel(int kind, void *y, const void *x, mpt_dtype dtype, int64_t n, float alpha) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        mpt_dev_store(y, dtype, i, mpt_elem_act(kind, mpt_dev_load(x, dtype, i), alpha));
}

static __global__ void act_backward_kernel(int kind, void *dx, const void *dy, const void *x, const void *y,
                                           mpt_dtype dtype, int64_t n, float alpha, int accumulate) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = mpt_elem_act_grad(kind, mpt_dev_load(dy, dtype, i), mpt_dev_load(x, dtype, i),
                                          mpt_dev_load(y, dtype, i), alpha);
        mpt_dev_store(dx, dtype, i, accumulate ? __fadd_rn(mpt_dev_load(dx, dtype, i), g) : g);
    }
}

static void launch_act_forward(const mpt_cuda_ctx *ctx, int kind, void *y, const void *x, mpt_dtype dtype, int64_t n,
                               float alpha) {
    act_forward_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(kind, y, x, dtype, n, alpha);
    MPT_CUDA_CHECK_LAUNCH("act_forward_kernel");
}

static void launch_act_backward(const mpt_cuda_ctx *ctx, int kind, void *dx, const void *dy, const void *x,
                                const void *y, mpt_dtype dtype, int64_t n, float alpha, int accumulate) {
    act_backward_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(kind, dx, dy, x, y, dtype, n,
                                                                                      alpha, accumulate);
    MPT_CUDA_CHECK_LAUNCH("act_backward_kernel");
}

void mpt_cuda_act_forward(mpt_backend *be, mpt_act kind, void *y, const void *x, mpt_dtype dtype, int64_t n,
                          float alpha) {
    mpt_cuda_require_float(dtype, "act_forward");
    MPT_ASSERTF((unsigned)kind < MPT_ACT_COUNT && n >= 0, "act_forward: kind %d, n %lld", (int)kind, (long long)n);
    if (n == 0) return;
    launch_act_forward(mpt_cuda_ctx_of(be), (int)kind, y, x, dtype, n, alpha);
}

void mpt_cuda_act_backward(mpt_backend *be, mpt_act kind, void *dx, const void *dy, const void *x, const void *y,
                           mpt_dtype dtype, int64_t n, float alpha, int accumulate) {
    mpt_cuda_require_float(dtype, "act_backward");
    MPT_ASSERTF((unsigned)kind < MPT_ACT_COUNT && n >= 0, "act_backward: kind %d, n %lld", (int)kind, (long long)n);
    if (n == 0) return;
    launch_act_backward(mpt_cuda_ctx_of(be), (int)kind, dx, dy, x, y, dtype, n, alpha, accumulate);
}

/* ---- average pooling ------------------------------------------------------------------------------------------ */

/* One thread per output element: the window's sum in row-major order, divided by its size. */
static __global__ void avgpool_forward_kernel(void *y, const void *x, mpt_dtype dtype, int64_t planes, int H, int W,
                                              int P, int Q, int kh, int kw, int sh, int sw) {
    const int64_t total = planes * P * Q;
    const float count = (float)(kh * kw);
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int q = (int)(o % Q), p = (int)((o / Q) % P);
        const int64_t xin = (o / ((int64_t)P * Q)) * H * W;
        float sum = 0.0f;
        for (int r = 0; r < kh; r++)
            for (int s = 0; s < kw; s++)
                sum = __fadd_rn(sum, mpt_dev_load(x, dtype, xin + (int64_t)(p * sh + r) * W + q * sw + s));
        mpt_dev_store(y, dtype, o, __fdiv_rn(sum, count));
    }
}

/* One thread per input element: the gradients of the windows covering it (rows, then columns, ascending). */
static __global__ void avgpool_backward_kernel(void *dx, const void *dy, mpt_dtype dtype, int64_t planes, int H, int W,
                                               int P, int Q, int kh, int kw, int sh, int sw, int accumulate) {
    const int64_t total = planes * H * W;
    const float count = (float)(kh * kw);
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int w = (int)(e % W), h = (int)((e / W) % H);
        const int64_t yout = (e / ((int64_t)H * W)) * P * Q;
        int p0, p1, q0, q1;
        mpt_pool_covering(h, sh, 0, kh, P, &p0, &p1);
        mpt_pool_covering(w, sw, 0, kw, Q, &q0, &q1);
        float acc = 0.0f;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) acc = __fadd_rn(acc, mpt_dev_load(dy, dtype, yout + (int64_t)p * Q + q));
        const float g = __fdiv_rn(acc, count);
        mpt_dev_store(dx, dtype, e, accumulate ? __fadd_rn(mpt_dev_load(dx, dtype, e), g) : g);
    }
}

static void launch_avgpool_forward(const mpt_cuda_ctx *ctx, const mpt_avgpool_args *a) {
    const int64_t planes = (int64_t)a->N * a->C;
    avgpool_forward_kernel<<<mpt_cuda_blocks(ctx, planes * a->P * a->Q), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        a->y, a->x, a->dtype, planes, a->H, a->W, a->P, a->Q, a->kh, a->kw, a->sh, a->sw);
    MPT_CUDA_CHECK_LAUNCH("avgpool_forward_kernel");
}

static void launch_avgpool_backward(const mpt_cuda_ctx *ctx, const mpt_avgpool_args *a) {
    const int64_t planes = (int64_t)a->N * a->C;
    avgpool_backward_kernel<<<mpt_cuda_blocks(ctx, planes * a->H * a->W), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        a->dx, a->dy, a->dtype, planes, a->H, a->W, a->P, a->Q, a->kh, a->kw, a->sh, a->sw, a->accumulate);
    MPT_CUDA_CHECK_LAUNCH("avgpool_backward_kernel");
}

void mpt_cuda_avgpool_forward(mpt_backend *be, const mpt_avgpool_args *a) {
    mpt_avgpool_args_check(a, "avgpool_forward");
    launch_avgpool_forward(mpt_cuda_ctx_of(be), a);
}

void mpt_cuda_avgpool_backward(mpt_backend *be, const mpt_avgpool_args *a) {
    mpt_avgpool_args_check(a, "avgpool_backward");
    launch_avgpool_backward(mpt_cuda_ctx_of(be), a);
}
