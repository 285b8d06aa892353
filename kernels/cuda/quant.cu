/*
 * kernels/cuda/quant.cu - the CUDA backend's quantization kernels (contracts: engine/backend.h, "Quantization"): fake
 * quantization per row from amax scales, an activation's amax and INT8 codes, the exact integer GEMM (cuBLASLt's INT8
 * GEMM where it applies, else an own kernel) and the exact integer convolution, each with the rescale of
 * engine/numerics.h.
 *
 * Bit for bit with the CPU backend (kernels/cpu/quant.c): every per-element rule is engine/numerics.h's (the FP32
 * division x / s and rintf, the product q * s, the rescale's fmaf), written for nvcc's default IEEE division and
 * rounding (this module is not built with --use_fast_math); the combined scale s_x * s_w is one __fmul_rn; an amax is
 * a max, whose value does not depend on the order; integer products and int32 sums are exact in any order. So the
 * outputs do not depend on the kernel or on cuBLASLt's algorithm, and tests/test_cuda.c compares them with the CPU's
 * bit for bit.
 *
 * cuBLASLt's integer GEMM (cublasLtMatmul, "Datatypes supported": CUBLAS_COMPUTE_32I with scale type CUDA_R_32I, A and
 * B CUDA_R_8I, C and D CUDA_R_32I) has the IMMA rules of the cuBLASLt documentation for the regular (non-COL32)
 * layouts: the "TN" format (its A transposed, its B not), m and k multiples of 4, leading dimensions multiples of 4,
 * pointers 4-byte aligned. Our row-major acc[M, N] = A[M, K] B[N, K]^T is the column-major product D[N, M] = B A^T: its
 * A is our B (stored [N, K]: column-major K x N, ld K, transposed), its B our A (column-major K x M, ld K, not
 * transposed), D column-major N x M with ld N. So it applies when N and K are multiples of 4 and the pointers 4-byte
 * aligned, and its heuristic offers an algorithm; otherwise (the 10 outputs of a classifier layer, K = 25 or 150 of a
 * convolution) the own kernel runs: one thread per output, the same integer sum. The plan (descriptors, heuristic) is
 * made per call: these GEMMs run in `mptrain eval --quantize`, never inside a training step. MPT_CUDA_GEMM_I8_OWN=1 in
 * the environment makes every call take the own kernel (the cuda suite runs both).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

/* The largest of v over the block, to every thread (NaN is tracked apart by the caller); blockDim.x a multiple of
 * 32. `shared` holds 32 values. */
static __device__ __forceinline__ float block_max(float v, float *shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float t = __shfl_down_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? shared[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            const float t = __shfl_down_sync(0xffffffffu, v, o);
            v = t > v ? t : v;
        }
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}

/* ---- fake quantization: one block per row ------------------------------------------------------------------------ */

static __global__ void fake_quant_kernel(const float *x, int64_t rows, int64_t cols, int qmax, int kind, int scaled, void *y,
                                         mpt_dtype y_dtype, int8_t *q, float *scales) {
    __shared__ float shared[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols;
        float m = 0.0f;
        int nan = 0;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const float v = fabsf(xr[c]);
            nan |= v != v;
            m = v > m ? v : m;
        }
        m = block_max(m, shared);
        nan = __syncthreads_or(nan);
        const float s = scaled ? mpt_int_scale_from_amax(nan ? NAN : m, qmax) : 1.0f;
        if (scales && threadIdx.x == 0) scales[r] = s;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const int64_t i = r * cols + c;
            if (q) q[i] = (int8_t)mpt_int_quantize(xr[c], s, qmax);
            if (y) mpt_dev_store(y, y_dtype, i, mpt_quant_fake(xr[c], s, qmax, kind));
        }
        __syncthreads(); /* `shared` is reused by the next row */
    }
}

static void launch_fake_quant(const mpt_cuda_ctx *ctx, const mpt_fake_quant_args *a, int qmax, int kind, int scaled) {
    int64_t blocks = a->rows < (int64_t)ctx->prop.multiProcessorCount * 32 ? a->rows
                                                                            : (int64_t)ctx->prop.multiProcessorCount * 32;
    fake_quant_kernel<<<(unsigned)(blocks > 0 ? blocks : 1), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        a->x, a->rows, a->cols, qmax, kind, scaled, a->y, a->y_dtype, a->q, a->scales);
    MPT_CUDA_CHECK_LAUNCH("fake_quant_kernel");
}

void mpt_cuda_fake_quant(mpt_backend *be, const mpt_fake_quant_args *a) {
    mpt_fake_quant_args_check(a);
    if (a->rows == 0) return;
    const mpt_qformat_desc *f = mpt_qformat_info(a->fmt);
    launch_fake_quant(mpt_cuda_ctx_of(be), a, f->qmax, f->kind, f->scaled);
}

/* ---- an activation's amax and codes -------------------------------------------------------------------------------- */

/* *amax = max(*amax, max |x|) through the bit patterns of non-negative floats, whose integer order is their order
 * (NaN patterns, 0x7fc00000 and up, above every finite value and inf: a NaN wins, as on the CPU). */
static __global__ void amax_kernel(float *amax, const void *x, mpt_dtype dtype, int64_t n) {
    __shared__ float shared[32];
    float m = 0.0f;
    int nan = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = fabsf(mpt_dev_load(x, dtype, i));
        nan |= v != v;
        m = v > m ? v : m;
    }
    m = block_max(m, shared);
    nan = __syncthreads_or(nan);
    if (threadIdx.x == 0) atomicMax((unsigned int *)amax, nan ? 0x7fc00000u : __float_as_uint(m));
}

static __global__ void quantize_kernel(int8_t *q, const void *x, mpt_dtype dtype, int64_t n, const float *scale,
                                       int qmax) {
    const float s = *scale;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        q[i] = (int8_t)mpt_int_quantize(mpt_dev_load(x, dtype, i), s, qmax);
}

void mpt_cuda_quantize(mpt_backend *be, const mpt_quantize_args *a) {
    mpt_quantize_args_check(a);
    if (a->n == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (a->amax) {
        amax_kernel<<<mpt_cuda_blocks(ctx, a->n), MPT_CUDA_THREADS, 0, ctx->stream>>>(a->amax, a->x, a->x_dtype, a->n);
        MPT_CUDA_CHECK_LAUNCH("amax_kernel");
    }
    if (a->q) {
        quantize_kernel<<<mpt_cuda_blocks(ctx, a->n), MPT_CUDA_THREADS, 0, ctx->stream>>>(a->q, a->x, a->x_dtype, a->n,
                                                                                        a->scale, a->qmax);
        MPT_CUDA_CHECK_LAUNCH("quantize_kernel");
    }
}

/* ---- the integer GEMM ---------------------------------------------------------------------------------------------- */

/* acc[m, n] = sum_k A[m, k] B[n, k] in int32, one thread per output. */
static __global__ void gemm_i8_kernel(int32_t *acc, const int8_t *A, const int8_t *B, int64_t M, int64_t N, int64_t K) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < M * N; o += (int64_t)gridDim.x * blockDim.x) {
        const int8_t *a = A + (o / N) * K, *b = B + (o % N) * K;
        int32_t s = 0;
        for (int64_t k = 0; k < K; k++) s += (int32_t)a[k] * (int32_t)b[k];
        acc[o] = s;
    }
}

/* C[m, n] = mpt_int_rescale(acc[m, n], a_scale * b_scales[n], bias[n]) rounded to c_dtype. */
static __global__ void rescale_kernel(void *C, mpt_dtype c_dtype, const int32_t *acc, const float *a_scale,
                                      const float *b_scales, int b_per_tensor, const void *bias, mpt_dtype bias_dtype,
                                      int64_t M, int64_t N) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < M * N; o += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = o % N;
        const float s = __fmul_rn(*a_scale, b_scales[b_per_tensor ? 0 : n]);
        const float b = bias ? mpt_dev_load(bias, bias_dtype, n) : 0.0f;
        mpt_dev_store(C, c_dtype, o, mpt_int_rescale(acc[o], s, b));
    }
}

/* cuBLASLt's INT8 GEMM into acc, when its IMMA rules and heuristic allow: 1 when it ran, 0 when the caller must. */
static int gemm_i8_cublaslt(mpt_cuda_ctx *ctx, const mpt_gemm_i8_args *a) {
    const char *own = getenv("MPT_CUDA_GEMM_I8_OWN");
    if (own && strcmp(own, "1") == 0) return 0;
    if (a->N % 4 || a->K % 4 || a->K == 0 || ((uintptr_t)a->A | (uintptr_t)a->B | (uintptr_t)a->acc) % 4) return 0;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int ran = 0;
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, (uint64_t)a->K, (uint64_t)a->N, a->K) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, (uint64_t)a->K, (uint64_t)a->M, a->K) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32I, (uint64_t)a->N, (uint64_t)a->M, a->N) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
        uint64_t ws = 0; /* no workspace: an algorithm without split-K reduction buffers */
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        cublasLtMatmulHeuristicResult_t res;
        int count = 0;
        memset(&res, 0, sizeof res);
        if (cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, la, lb, ld, ld, pref, 1, &res, &count) ==
                CUBLAS_STATUS_SUCCESS &&
            count > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
            const int32_t one = 1, zero = 0;
            /* its A is our B, its B our A (header comment); nothing has run when it refuses */
            ran = cublasLtMatmul(ctx->lt, desc, &one, a->B, la, a->A, lb, &zero, a->acc, ld, a->acc, ld, &res.algo, NULL,
                                 0, ctx->stream) == CUBLAS_STATUS_SUCCESS;
        }
    }
    if (pref) MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (ld) MPT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
    if (lb) MPT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    if (la) MPT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    if (desc) MPT_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    if (ran) mpt_cuda_debug_sync("cublasLtMatmul (INT8)", __FILE__, __LINE__);
    return ran;
}

void mpt_cuda_gemm_i8(mpt_backend *be, const mpt_gemm_i8_args *a) {
    mpt_gemm_i8_args_check(a);
    if (a->M == 0 || a->N == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (!gemm_i8_cublaslt(ctx, a)) {
        gemm_i8_kernel<<<mpt_cuda_blocks(ctx, a->M * a->N), MPT_CUDA_THREADS, 0, ctx->stream>>>(a->acc, a->A, a->B, a->M,
                                                                                              a->N, a->K);
        MPT_CUDA_CHECK_LAUNCH("gemm_i8_kernel");
    }
    if (a->C) {
        rescale_kernel<<<mpt_cuda_blocks(ctx, a->M * a->N), MPT_CUDA_THREADS, 0, ctx->stream>>>(
            a->C, a->c_dtype, a->acc, a->a_scale, a->b_scales, a->b_per_tensor, a->bias, a->bias_dtype, a->M, a->N);
        MPT_CUDA_CHECK_LAUNCH("rescale_kernel");
    }
}

/* ---- the integer convolution: one thread per output ------------------------------------------------------------ */

static __global__ void conv_i8_kernel(void *y, mpt_dtype y_dtype, const int8_t *x, const int8_t *w, mpt_conv_shape s,
                                      const float *x_scale, const float *w_scales, int w_per_tensor, const void *bias,
                                      mpt_dtype bias_dtype) {
    const int64_t PQ = (int64_t)s.P * s.Q, total = (int64_t)s.N * s.K * PQ, HW = (int64_t)s.H * s.W;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int q = (int)(o % s.Q), p = (int)((o / s.Q) % s.P), k = (int)((o / PQ) % s.K);
        const int64_t n = o / ((int64_t)s.K * PQ);
        const int8_t *xn = x + n * s.C * HW, *wk = w + (int64_t)k * s.C * s.R * s.S;
        int32_t acc = 0;
        for (int c = 0; c < s.C; c++)
            for (int r = 0; r < s.R; r++) {
                const int h = p * s.stride_h - s.pad_h + r;
                if (h < 0 || h >= s.H) continue;
                for (int t = 0; t < s.S; t++) {
                    const int ww = q * s.stride_w - s.pad_w + t;
                    if (ww < 0 || ww >= s.W) continue;
                    acc += (int32_t)xn[c * HW + (int64_t)h * s.W + ww] * (int32_t)wk[(c * s.R + r) * s.S + t];
                }
            }
        const float sc = __fmul_rn(*x_scale, w_scales[w_per_tensor ? 0 : k]);
        const float b = bias ? mpt_dev_load(bias, bias_dtype, k) : 0.0f;
        mpt_dev_store(y, y_dtype, o, mpt_int_rescale(acc, sc, b));
    }
}

void mpt_cuda_conv2d_forward_i8(mpt_backend *be, const mpt_conv_i8_args *a) {
    mpt_conv_i8_args_check(a);
    const int64_t total = (int64_t)a->s.N * a->s.K * a->s.P * a->s.Q;
    if (total == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    conv_i8_kernel<<<mpt_cuda_blocks(ctx, total), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        a->y, a->y_dtype, a->x, a->w, a->s, a->x_scale, a->w_scales, a->w_per_tensor, a->bias, a->bias_dtype);
    MPT_CUDA_CHECK_LAUNCH("conv_i8_kernel");
}
