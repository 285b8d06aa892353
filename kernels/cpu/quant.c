/*
 * kernels/cpu/quant.c - the CPU backend's quantization kernels (contracts: engine/backend.h, section "Quantization"):
 * per-row or per-tensor fake quantization from amax scales, the INT8 codes of an activation and its amax, and the
 * exact integer GEMM and convolution with their rescale.
 *
 * Exactness of the integer GEMM: every product of two codes is an integer of magnitude at most 127 * 127 = 16129
 * (14 bits) and the sum is kept in int32, exactly, whatever the order, while K * 16129 < 2^31 (K <= 133144, which the
 * contract asks). An FP32 accumulator would not be exact: FP32 holds every integer only up to 2^24 = 16777216, and
 * for the cnn's fc1 (K = 9216) a sum reaches 9216 * 16129 = 148644864, where FP32's spacing is 16: each addition
 * there rounds (tests/test_quant.c has a case whose exact sum is not an FP32 number at all). The only roundings are
 * the rescale's (engine/numerics.h mpt_int_rescale: the int32 sum to FP32, its product with the combined scale and
 * the bias in one fmaf) and the store into the output dtype. Each output is a function of its own inputs only, so the
 * OpenMP split over rows gives the same bits on any number of threads, and the CUDA kernels, which sum the same
 * integers, give the same bits as this code.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

/* ---- fake quantization ------------------------------------------------------------------------------------------ */

/* max |x| over n FP32 values; NaN when any is NaN. */
static float row_amax(const float *x, int64_t n) {
    float m = 0.0f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        const float v = fabsf(x[i]);
        nan |= v != v;
        m = v > m ? v : m;
    }
    return nan ? NAN : m;
}

void mpt_cpu_fake_quant(mpt_backend *be, const mpt_fake_quant_args *a) {
    (void)be;
    mpt_fake_quant_args_check(a);
    const mpt_qformat_desc *f = mpt_qformat_info(a->fmt);
    const int kind = f->kind, qmax = f->qmax;
    const int64_t rows = a->rows, cols = a->cols;
    MPT_OMP(omp parallel for schedule(static) if (rows * cols >= MPT_PAR_MIN && rows > 1))
    for (int64_t r = 0; r < rows; r++) {
        const float *x = a->x + r * cols;
        const float s = f->scaled ? mpt_int_scale_from_amax(row_amax(x, cols), qmax) : 1.0f;
        if (a->scales) a->scales[r] = s;
        for (int64_t c = 0; c < cols; c++) {
            const int64_t i = r * cols + c;
            if (a->q) a->q[i] = (int8_t)mpt_int_quantize(x[c], s, qmax);
            if (a->y) mpt_store_f32(a->y, a->y_dtype, i, mpt_quant_fake(x[c], s, qmax, kind));
        }
    }
}

/* ---- an activation's amax and codes ------------------------------------------------------------------------------ */

void mpt_cpu_quantize(mpt_backend *be, const mpt_quantize_args *a) {
    (void)be;
    mpt_quantize_args_check(a);
    const int64_t n = a->n;
    if (a->amax) {
        float m = 0.0f;
        int nan = 0;
        for (int64_t i = 0; i < n; i++) {
            const float v = fabsf(mpt_load_f32(a->x, a->x_dtype, i));
            nan |= v != v;
            m = v > m ? v : m;
        }
        const float old = *a->amax;
        *a->amax = nan || old != old ? NAN : m > old ? m : old;
    }
    if (a->q) {
        const float s = *a->scale;
        MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
        for (int64_t i = 0; i < n; i++) a->q[i] = (int8_t)mpt_int_quantize(mpt_load_f32(a->x, a->x_dtype, i), s, a->qmax);
    }
}

/* ---- the integer GEMM --------------------------------------------------------------------------------------------- */

/* sum_k a[k] b[k] in int32, exactly (|sum| <= K * 16129 < 2^31 by the contract); GCC vectorises the widening
 * multiply-add. */
static int32_t dot_i8(const int8_t *restrict a, const int8_t *restrict b, int64_t K) {
    int32_t s = 0;
    for (int64_t k = 0; k < K; k++) s += (int32_t)a[k] * (int32_t)b[k];
    return s;
}

/* The output of one rescaled sum: C[i] = round(mpt_int_rescale(acc, scale, bias)). */
static void rescale_store(void *C, mpt_dtype c_dtype, int64_t i, int32_t acc, float scale, const void *bias,
                          mpt_dtype bias_dtype, int64_t n) {
    const float b = bias ? mpt_load_f32(bias, bias_dtype, n) : 0.0f;
    mpt_store_f32(C, c_dtype, i, mpt_int_rescale(acc, scale, b));
}

void mpt_cpu_gemm_i8(mpt_backend *be, const mpt_gemm_i8_args *a) {
    (void)be;
    mpt_gemm_i8_args_check(a);
    const int64_t M = a->M, N = a->N, K = a->K;
    MPT_OMP(omp parallel for schedule(static) if (M * N * K >= MPT_PAR_MIN && M > 1))
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++) {
            const int32_t acc = K ? dot_i8(a->A + m * K, a->B + n * K, K) : 0;
            a->acc[m * N + n] = acc;
            if (a->C) {
                const float s = *a->a_scale * a->b_scales[a->b_per_tensor ? 0 : n];
                rescale_store(a->C, a->c_dtype, m * N + n, acc, s, a->bias, a->bias_dtype, n);
            }
        }
    }
}

/* ---- the integer convolution: im2col of one image at a time, then the dot products --------------------------- */

void mpt_cpu_conv2d_forward_i8(mpt_backend *be, const mpt_conv_i8_args *a) {
    mpt_conv_i8_args_check(a);
    const mpt_conv_shape *s = &a->s;
    const int64_t PQ = (int64_t)s->P * s->Q, CRS = (int64_t)s->C * s->R * s->S, HW = (int64_t)s->H * s->W;
    MPT_ASSERTF(be->workspace_bytes >= mpt_conv_i8_workspace(s), "conv2d_forward_i8 %s: the workspace holds %zu bytes, "
                "%zu needed (reserve mpt_conv_i8_workspace at graph build)", a->tag ? a->tag : "(untagged)",
                be->workspace_bytes, mpt_conv_i8_workspace(s));
    int8_t *cols = be->workspace; /* [PQ, CRS] */
    for (int64_t img = 0; img < s->N; img++) {
        const int8_t *x = a->x + img * (int64_t)s->C * HW;
        MPT_OMP(omp parallel for schedule(static) if (PQ * CRS >= MPT_PAR_MIN))
        for (int64_t pq = 0; pq < PQ; pq++) {
            const int p = (int)(pq / s->Q), q = (int)(pq % s->Q);
            int8_t *col = cols + pq * CRS;
            for (int c = 0; c < s->C; c++)
                for (int r = 0; r < s->R; r++)
                    for (int t = 0; t < s->S; t++) {
                        const int h = p * s->stride_h - s->pad_h + r, w = q * s->stride_w - s->pad_w + t;
                        const int inside = h >= 0 && h < s->H && w >= 0 && w < s->W;
                        *col++ = inside ? x[c * HW + (int64_t)h * s->W + w] : 0;
                    }
        }
        MPT_OMP(omp parallel for schedule(static) if (PQ * CRS * s->K >= MPT_PAR_MIN))
        for (int64_t pq = 0; pq < PQ; pq++) {
            for (int k = 0; k < s->K; k++) {
                const int32_t acc = dot_i8(cols + pq * CRS, a->w + (int64_t)k * CRS, CRS);
                const float sc = *a->x_scale * a->w_scales[a->w_per_tensor ? 0 : k];
                rescale_store(a->y, a->y_dtype, (img * s->K + k) * PQ + pq, acc, sc, a->bias, a->bias_dtype, k);
            }
        }
    }
}
