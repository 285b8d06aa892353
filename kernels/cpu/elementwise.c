/*
 * kernels/cpu/elementwise.c - the CPU backend's element-wise and reduction kernels.
 *
 * cast, ReLU, max pooling, inverted dropout, fused softmax + cross-entropy, the bias gradient and the batch
 * gather; and the vectorised buffer conversions of kernels/cpu/convert.h (AVX2/F16C, bit-equal to the
 * scalar functions of engine/numerics.h) that every CPU kernel uses. Contracts (shapes, dtypes,
 * += accumulation): engine/backend.h. Every kernel loads its inputs as FP32 (exact widening), computes in
 * FP32 and rounds each output once to its dtype with round-to-nearest-even (engine/numerics.h); an
 * accumulating output is computed as round(old + update), so it is rounded once per call. Buffers of
 * F16/BF16 values are processed in chunks widened into FP32 stack arrays, so nothing allocates.
 *
 * Sources: inverted dropout (Srivastava et al. 2014, as torch.nn.Dropout scales at training time);
 * softmax + cross-entropy through logsumexp (torch.nn.functional.cross_entropy, mean reduction over the
 * rows whose label is >= 0: a negative label is PyTorch's ignore_index, a padding row of the last batch);
 * max pooling with PyTorch's rules (padding is -inf, the first maximum wins, NaN propagates).
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/rng.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

enum { EW_CHUNK = 512 };

/* ---- buffer conversions (declared in kernels/cpu/convert.h) ---------------------------------------- */

/* dst[i] = src[i] as FP32, exactly; src is F32, F16, BF16 or U8. n elements, buffers must not overlap. */
void mpt_cpu_widen(float *dst, const void *src, mpt_dtype t, int64_t n) {
    int64_t i = 0;
    switch (t) {
    case MPT_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case MPT_DTYPE_F16: {
        /* F16C's vcvtph2ps is exact for every finite input (subnormals included; MXCSR's DAZ does not apply to it)
         * and for infinities and quiet NaNs, but quiets a signalling NaN, which mpt_f16_to_f32 keeps: a block of 8
         * with any exponent of all ones goes element by element (tests/test_dtype.c compares every pattern). */
        const uint16_t *s = src;
        const __m128i m_exp = _mm_set1_epi16(0x7c00);
        for (; i + 8 <= n; i += 8) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(s + i));
            if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, m_exp), m_exp))) {
                for (int k = 0; k < 8; k++) dst[i + k] = mpt_f16_to_f32(s[i + k]);
                continue;
            }
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
        }
        for (; i < n; i++) dst[i] = mpt_f16_to_f32(s[i]);
        return;
    }
    case MPT_DTYPE_BF16: {
        const uint16_t *s = src;
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
        }
        for (; i < n; i++) dst[i] = mpt_bf16_to_f32(s[i]);
        return;
    }
    case MPT_DTYPE_U8: {
        const uint8_t *s = src;
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + i)));
            _mm256_storeu_ps(dst + i, _mm256_cvtepi32_ps(w));
        }
        for (; i < n; i++) dst[i] = (float)s[i];
        return;
    }
    default:
        MPT_ASSERTF(0, "mpt_cpu_widen: dtype %s is not F32, F16, BF16 or U8", mpt_dtype_name(t));
    }
}

/* 8 FP32 -> 8 BF16 (RNE, NaN quiet), as mpt_f32_to_bf16. */
static __m128i ew_bf16x8(__m256i u) {
    const __m256i m_abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, m_abs), inf);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(hi, one)), 16);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* dst[i] = src[i] rounded to nearest even in dtype t (F32: copy, F16, BF16). n elements. */
void mpt_cpu_narrow(void *dst, mpt_dtype t, const float *src, int64_t n) {
    int64_t i = 0;
    switch (t) {
    case MPT_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case MPT_DTYPE_F16: {
        uint16_t *d = dst;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
        for (; i < n; i++) d[i] = mpt_f32_to_f16(src[i]);
        return;
    }
    case MPT_DTYPE_BF16: {
        uint16_t *d = dst;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(d + i), ew_bf16x8(_mm256_loadu_si256((const __m256i *)(src + i))));
        for (; i < n; i++) d[i] = mpt_f32_to_bf16(src[i]);
        return;
    }
    default:
        MPT_ASSERTF(0, "mpt_cpu_narrow: dtype %s is not F32, F16 or BF16", mpt_dtype_name(t));
    }
}

/* dst[i] = mpt_round_tf32(src[i]) (RNE to 10 mantissa bits; inf/NaN unchanged). dst may equal src. */
void mpt_cpu_round_tf32_n(float *dst, const float *src, int64_t n) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0xfff);
    const __m256i keep = _mm256_set1_epi32((int)0xffffe000u), m_exp = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 13), one);
        __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, half), lsb), keep);
        __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(u, m_exp), m_exp);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_blendv_epi8(r, u, special));
    }
    for (; i < n; i++) dst[i] = mpt_round_tf32(src[i]);
}

static void ew_check_float(mpt_dtype t, const char *op) {
    MPT_ASSERTF(mpt_dtype_is_float(t), "%s: dtype %s is not F32, F16 or BF16", op, mpt_dtype_name(t));
}

static const void *ew_at(const void *p, mpt_dtype t, int64_t i) {
    return (const char *)p + (size_t)i * mpt_dtype_size(t);
}

/* dst[0..n) = round(dst + add) in dtype t (one rounding per element); accumulate = 0: round(add), the old
 * contents unread. */
static void ew_accumulate(void *dst, mpt_dtype t, const float *add, int64_t n, int accumulate) {
    if (!accumulate) {
        mpt_cpu_narrow(dst, t, add, n);
        return;
    }
    if (t == MPT_DTYPE_F32) {
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = d[i] + add[i];
        return;
    }
    float old[EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        void *d = (void *)ew_at(dst, t, i0);
        mpt_cpu_widen(old, d, t, m);
        for (int64_t i = 0; i < m; i++) old[i] = old[i] + add[i0 + i];
        mpt_cpu_narrow(d, t, old, m);
    }
}

/* ---- cast ------------------------------------------------------------------------------------------- */

void mpt_cpu_cast(mpt_backend *be, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype, int64_t n) {
    (void)be;
    ew_check_float(dst_dtype, "cast (destination)");
    MPT_ASSERTF(mpt_dtype_is_float(src_dtype) || src_dtype == MPT_DTYPE_U8,
                "cast: source dtype %s is not F32, F16, BF16 or U8", mpt_dtype_name(src_dtype));
    MPT_ASSERT(n >= 0);
    if (n == 0) return;
    if (dst_dtype == src_dtype) {
        memmove(dst, src, (size_t)n * mpt_dtype_size(dst_dtype));
    } else if (dst_dtype == MPT_DTYPE_F32) {
        mpt_cpu_widen(dst, src, src_dtype, n);
    } else if (src_dtype == MPT_DTYPE_F32) {
        mpt_cpu_narrow(dst, dst_dtype, src, n);
    } else {
        float buf[EW_CHUNK];
        for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
            int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
            mpt_cpu_widen(buf, ew_at(src, src_dtype, i0), src_dtype, m);
            mpt_cpu_narrow((void *)ew_at(dst, dst_dtype, i0), dst_dtype, buf, m);
        }
    }
}

/* ---- ReLU ------------------------------------------------------------------------------------------- */

void mpt_cpu_relu_forward(mpt_backend *be, void *y, const void *x, mpt_dtype dtype, int64_t n) {
    (void)be;
    ew_check_float(dtype, "relu_forward");
    if (dtype == MPT_DTYPE_F32) {
        const float *xs = x;
        float *ys = y;
        MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
        for (int64_t i = 0; i < n; i++) ys[i] = mpt_elem_relu(xs[i]);
        return;
    }
    /* On the 16-bit patterns: x > 0 exactly when the pattern lies in [1, +inf]; otherwise (negative, zero,
     * NaN) the result is +0. Equal to widen -> mpt_elem_relu -> round, since x itself is representable. */
    const uint16_t top = dtype == MPT_DTYPE_F16 ? 0x7c00u : 0x7f80u;
    const uint16_t *xs = x;
    uint16_t *ys = y;
    MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
    for (int64_t i = 0; i < n; i++) ys[i] = (uint16_t)(xs[i] - 1u) < top ? xs[i] : 0;
}

void mpt_cpu_relu_backward(mpt_backend *be, void *dx, const void *dy, const void *y, mpt_dtype dtype, int64_t n,
                           int accumulate) {
    (void)be;
    ew_check_float(dtype, "relu_backward");
    if (dtype == MPT_DTYPE_F32) {
        float *d = dx;
        const float *g = dy, *ys = y;
        if (accumulate) {
            MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
            for (int64_t i = 0; i < n; i++) d[i] = d[i] + mpt_elem_relu_grad(g[i], ys[i]);
        } else {
            MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
            for (int64_t i = 0; i < n; i++) d[i] = mpt_elem_relu_grad(g[i], ys[i]);
        }
        return;
    }
    const int64_t chunks = (n + EW_CHUNK - 1) / EW_CHUNK;
    MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
    for (int64_t c = 0; c < chunks; c++) {
        float g[EW_CHUNK], yv[EW_CHUNK];
        const int64_t i0 = c * EW_CHUNK;
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        mpt_cpu_widen(g, ew_at(dy, dtype, i0), dtype, m);
        mpt_cpu_widen(yv, ew_at(y, dtype, i0), dtype, m);
        for (int64_t i = 0; i < m; i++) g[i] = mpt_elem_relu_grad(g[i], yv[i]);
        ew_accumulate((void *)ew_at(dx, dtype, i0), dtype, g, m, accumulate);
    }
}

/* ---- max pooling ------------------------------------------------------------------------------------ */

static void pool_check(const mpt_pool_args *a, const char *op) {
    ew_check_float(a->dtype, op);
    MPT_ASSERTF(a->kernel >= 1 && a->stride >= 1 && a->pad >= 0 && 2 * a->pad <= a->kernel,
                "%s: kernel %d, stride %d, pad %d (need pad <= kernel/2)", op, a->kernel, a->stride, a->pad);
    MPT_ASSERTF(a->P == (a->H + 2 * a->pad - a->kernel) / a->stride + 1 &&
                    a->Q == (a->W + 2 * a->pad - a->kernel) / a->stride + 1 && a->P >= 1 && a->Q >= 1,
                "%s: output %dx%d does not match input %dx%d, kernel %d, stride %d, pad %d", op, a->P, a->Q, a->H,
                a->W, a->kernel, a->stride, a->pad);
}

/* ---- tiled windows (stride == kernel, no padding: LeNet's and the cnn's 2x2/2) --------------------------
 * Each input element lies in at most one window, so the forward reads each input row once and the backward
 * is a scatter of dy to the argmax (one rounding per element, as the general path). Same rules as the general
 * path: the first maximum in row-major window order wins, a NaN replaces the running maximum (so a window
 * holding a NaN outputs NaN, PyTorch's CPU kernel does the same). F16/BF16 outputs copy the winning input's
 * bits (the maximum is one of the inputs, so this equals widen -> max -> round). */

enum { POOL_TILED_MAX_ROW = 1024 };

static int pool_is_tiled(const mpt_pool_args *a) {
    return a->pad == 0 && a->stride == a->kernel && a->W <= POOL_TILED_MAX_ROW;
}

/* Eight 2x2/2 windows: t0 and t1 hold 16 consecutive values of the window's top and bottom rows; i00 the
 * plane index of each window's top-left element (the top-right is +1, the bottom row +W). The four candidates
 * are taken in window order (top-left, top-right, bottom-left, bottom-right) when greater than the running
 * maximum or NaN, exactly as the scalar loop. */
static inline __attribute__((always_inline)) void pool2_block8(const float *t0, const float *t1, __m256i i00, int W,
                                                                __m256 *best_out, __m256i *arg_out) {
    __m256 a0 = _mm256_loadu_ps(t0), a1 = _mm256_loadu_ps(t0 + 8);
    __m256 b0 = _mm256_loadu_ps(t1), b1 = _mm256_loadu_ps(t1 + 8);
    /* even/odd columns, back in window order after the in-lane shuffle */
    __m256 v00 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a0, a1, 0x88)), 0xd8));
    __m256 v01 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a0, a1, 0xdd)), 0xd8));
    __m256 v10 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(b0, b1, 0x88)), 0xd8));
    __m256 v11 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(b0, b1, 0xdd)), 0xd8));
    __m256 best = v00; /* the first candidate is taken over -inf unless it is -inf itself: same result */
    __m256i arg = i00;
#define POOL2_TAKE(v, idx)                                                                                          \
    do {                                                                                                        \
        __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));     \
        best = _mm256_blendv_ps(best, v, take);                                                                 \
        arg = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(arg), _mm256_castsi256_ps(idx), take));  \
    } while (0)
    POOL2_TAKE(v01, _mm256_add_epi32(i00, _mm256_set1_epi32(1)));
    POOL2_TAKE(v10, _mm256_add_epi32(i00, _mm256_set1_epi32(W)));
    POOL2_TAKE(v11, _mm256_add_epi32(i00, _mm256_set1_epi32(W + 1)));
#undef POOL2_TAKE
    *best_out = best;
    *arg_out = arg;
}

/* One output row of 2x2/2 windows over the FP32 rows x[0..2Q) and x[W..W+2Q): y[q] (if y != NULL) and
 * am[q] = base + the argmax's index within the rows. The last Q % 8 windows go through the same block on
 * copies padded with -inf (their extra outputs are dropped). */
static void pool2_forward_row(const float *x, int W, int Q, float *y, int32_t *am, int32_t base) {
    const __m256i lane2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    __m256 best;
    __m256i arg;
    int q = 0;
    for (; q + 8 <= Q; q += 8) {
        pool2_block8(x + 2 * q, x + W + 2 * q, _mm256_add_epi32(lane2, _mm256_set1_epi32(base + 2 * q)), W, &best,
                     &arg);
        if (y) _mm256_storeu_ps(y + q, best);
        _mm256_storeu_si256((__m256i *)(am + q), arg);
    }
    if (q < Q) {
        float t0[16], t1[16], yb[8];
        int32_t ab[8];
        const int m = Q - q;
        for (int i = 0; i < 16; i++) {
            t0[i] = i < 2 * m ? x[2 * q + i] : -INFINITY;
            t1[i] = i < 2 * m ? x[W + 2 * q + i] : -INFINITY;
        }
        pool2_block8(t0, t1, _mm256_add_epi32(lane2, _mm256_set1_epi32(base + 2 * q)), W, &best, &arg);
        _mm256_storeu_ps(yb, best);
        _mm256_storeu_si256((__m256i *)ab, arg);
        for (int i = 0; i < m; i++) {
            if (y) y[q + i] = yb[i];
            am[q + i] = ab[i];
        }
    }
}

static inline __attribute__((always_inline)) void pool_tiled_forward_k(const mpt_pool_args *a, const int k) {
    const int H = a->H, W = a->W, P = a->P, Q = a->Q;
    const size_t es = mpt_dtype_size(a->dtype);
    const int64_t planes = (int64_t)a->N * a->C;
    float rows[POOL_TILED_MAX_ROW * 3]; /* k <= 3 here (see mpt_cpu_maxpool_forward) */
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t xin = pl * H * W, yout = pl * P * Q;
        int32_t *am = a->argmax + yout;
        for (int p = 0; p < P; p++) {
            const int64_t r0 = xin + (int64_t)p * k * W; /* first input row of this output row */
            const float *x;
            if (a->dtype == MPT_DTYPE_F32) {
                x = (const float *)a->x + r0;
            } else {
                for (int r = 0; r < k; r++)
                    mpt_cpu_widen(rows + r * W, (const char *)a->x + (size_t)(r0 + (int64_t)r * W) * es, a->dtype,
                                  Q * k);
                x = rows;
            }
            int q = 0;
            if (k == 2) {
                pool2_forward_row(x, W, Q, a->dtype == MPT_DTYPE_F32 ? (float *)a->y + yout + p * Q : NULL, am + p * Q,
                                  p * 2 * W);
                q = Q;
            }
            for (; q < Q; q++) {
                float best = -INFINITY;
                int32_t arg = q * k; /* the window's first element, if all are -inf */
                for (int r = 0; r < k; r++)
                    for (int t = 0; t < k; t++) {
                        const int32_t i = r * W + q * k + t;
                        const float v = x[i];
                        if (v > best || isnan(v)) {
                            best = v;
                            arg = i;
                        }
                    }
                am[p * Q + q] = p * k * W + arg;
                if (a->dtype == MPT_DTYPE_F32) ((float *)a->y)[yout + p * Q + q] = best;
            }
            if (a->dtype != MPT_DTYPE_F32) /* the winner's bits: am holds plane-relative indices */
                for (q = 0; q < Q; q++)
                    ((uint16_t *)a->y)[yout + p * Q + q] = ((const uint16_t *)a->x)[xin + am[p * Q + q]];
        }
    }
}

static void pool_tiled_forward(const mpt_pool_args *a) {
    switch (a->kernel) {
    case 1: pool_tiled_forward_k(a, 1); break;
    case 2: pool_tiled_forward_k(a, 2); break;
    default: pool_tiled_forward_k(a, 3); break; /* callers pass kernel <= 3 */
    }
}

static void pool_tiled_backward(const mpt_pool_args *a) {
    const int64_t HW = (int64_t)a->H * a->W, PQ = (int64_t)a->P * a->Q, planes = (int64_t)a->N * a->C;
    for (int64_t pl = 0; pl < planes; pl++) {
        const int32_t *am = a->argmax + pl * PQ;
        const int64_t xin = pl * HW, yout = pl * PQ;
        switch (a->dtype) {
        case MPT_DTYPE_F32: {
            float *dx = (float *)a->dx + xin;
            const float *dy = (const float *)a->dy + yout;
            for (int64_t o = 0; o < PQ; o++) dx[am[o]] = dx[am[o]] + dy[o];
            break;
        }
        case MPT_DTYPE_F16: {
            uint16_t *dx = (uint16_t *)a->dx + xin;
            const uint16_t *dy = (const uint16_t *)a->dy + yout;
            for (int64_t o = 0; o < PQ; o++)
                dx[am[o]] = mpt_f32_to_f16(mpt_f16_to_f32(dx[am[o]]) + mpt_f16_to_f32(dy[o]));
            break;
        }
        default: {
            uint16_t *dx = (uint16_t *)a->dx + xin;
            const uint16_t *dy = (const uint16_t *)a->dy + yout;
            for (int64_t o = 0; o < PQ; o++)
                dx[am[o]] = mpt_f32_to_bf16(mpt_bf16_to_f32(dx[am[o]]) + mpt_bf16_to_f32(dy[o]));
            break;
        }
        }
    }
}

/* ---- general windows -------------------------------------------------------------------------------- */

void mpt_cpu_maxpool_forward(mpt_backend *be, const mpt_pool_args *a) {
    (void)be;
    pool_check(a, "maxpool_forward");
    if (pool_is_tiled(a) && a->kernel <= 3) {
        pool_tiled_forward(a);
        return;
    }
    const int H = a->H, W = a->W, P = a->P, Q = a->Q, k = a->kernel, s = a->stride, pad = a->pad;
    const int64_t planes = (int64_t)a->N * a->C;
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t xin = pl * H * W, yout = pl * P * Q;
        for (int p = 0; p < P; p++) {
            int h0 = p * s - pad, h1 = h0 + k;
            if (h0 < 0) h0 = 0;
            if (h1 > H) h1 = H;
            for (int q = 0; q < Q; q++) {
                int w0 = q * s - pad, w1 = w0 + k;
                if (w0 < 0) w0 = 0;
                if (w1 > W) w1 = W;
                float best = -INFINITY;
                int32_t arg = h0 * W + w0; /* pad <= kernel/2: every window holds an input element */
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        float v = mpt_load_f32(a->x, a->dtype, xin + h * W + w);
                        if (v > best || isnan(v)) {
                            best = v;
                            arg = h * W + w;
                        }
                    }
                mpt_store_f32(a->y, a->dtype, yout + p * Q + q, best);
                a->argmax[yout + p * Q + q] = arg;
            }
        }
    }
}

/* Gathers, for each input element, the dy of the windows whose argmax it is, sums them in FP32 and adds
 * the sum to dx with one rounding (overlapping windows, stride < kernel, may pick one element twice). */
void mpt_cpu_maxpool_backward(mpt_backend *be, const mpt_pool_args *a) {
    (void)be;
    pool_check(a, "maxpool_backward");
    if (pool_is_tiled(a)) {
        pool_tiled_backward(a);
        return;
    }
    const int H = a->H, W = a->W, P = a->P, Q = a->Q, k = a->kernel, s = a->stride, pad = a->pad;
    const int64_t planes = (int64_t)a->N * a->C;
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t xin = pl * H * W, yout = pl * P * Q;
        const int32_t *am = a->argmax + yout;
        for (int h = 0; h < H; h++) {
            /* windows p with p*s - pad <= h < p*s - pad + k */
            int p0 = h + pad - k + 1 <= 0 ? 0 : (h + pad - k + 1 + s - 1) / s;
            int p1 = (h + pad) / s;
            if (p1 > P - 1) p1 = P - 1;
            for (int w = 0; w < W; w++) {
                int q0 = w + pad - k + 1 <= 0 ? 0 : (w + pad - k + 1 + s - 1) / s;
                int q1 = (w + pad) / s;
                if (q1 > Q - 1) q1 = Q - 1;
                const int32_t self = h * W + w;
                float acc = 0.0f;
                int hit = 0;
                for (int p = p0; p <= p1; p++)
                    for (int q = q0; q <= q1; q++)
                        if (am[p * Q + q] == self) {
                            acc += mpt_load_f32(a->dy, a->dtype, yout + p * Q + q);
                            hit = 1;
                        }
                if (hit) {
                    int64_t i = xin + self;
                    mpt_store_f32(a->dx, a->dtype, i, mpt_load_f32(a->dx, a->dtype, i) + acc);
                }
            }
        }
    }
}

/* ---- dropout ---------------------------------------------------------------------------------------- */

void mpt_cpu_dropout_forward(mpt_backend *be, void *y, const void *x, uint8_t *mask, mpt_dtype dtype, int64_t n,
                             float p, uint64_t seed, uint64_t offset, const int64_t *iteration, uint64_t stride) {
    ew_check_float(dtype, "dropout_forward");
    MPT_ASSERTF(p >= 0.0f && p < 1.0f, "dropout_forward: p = %g outside [0, 1)", (double)p);
    MPT_ASSERTF(be->workspace_bytes >= (size_t)n * sizeof(float),
                "dropout_forward: needs %zu bytes of workspace for %lld uniforms, has %zu",
                (size_t)n * sizeof(float), (long long)n, be->workspace_bytes);
    if (n == 0) return;
    float *u = be->workspace;
    if (iteration) offset += (uint64_t)*iteration * stride;
    mpt_rng_uniform(((mpt_cpu_ctx *)be->ctx)->rng, u, (size_t)n, seed, offset);
    const float keep = 1.0f - p;
    float xv[EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        mpt_cpu_widen(xv, ew_at(x, dtype, i0), dtype, m);
        /* the division runs for every element and dropped ones are cleared with a bit mask (exactly +0),
         * so the loop has no branch and vectorises */
        for (int64_t i = 0; i < m; i++) {
            uint32_t k = u[i0 + i] > p;
            mask[i0 + i] = (uint8_t)k;
            xv[i] = mpt_bits_f32(mpt_f32_bits(xv[i] / keep) & (0u - k));
        }
        mpt_cpu_narrow((void *)ew_at(y, dtype, i0), dtype, xv, m);
    }
}

void mpt_cpu_dropout_backward(mpt_backend *be, void *dx, const void *dy, const uint8_t *mask, mpt_dtype dtype,
                              int64_t n, float p, int accumulate) {
    (void)be;
    ew_check_float(dtype, "dropout_backward");
    MPT_ASSERTF(p >= 0.0f && p < 1.0f, "dropout_backward: p = %g outside [0, 1)", (double)p);
    const float keep = 1.0f - p;
    float g[EW_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_CHUNK) {
        int64_t m = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        mpt_cpu_widen(g, ew_at(dy, dtype, i0), dtype, m);
        for (int64_t i = 0; i < m; i++) /* branch-free select, as in the forward pass */
            g[i] = mpt_bits_f32(mpt_f32_bits(g[i] / keep) & (0u - (uint32_t)(mask[i0 + i] != 0)));
        ew_accumulate((void *)ew_at(dx, dtype, i0), dtype, g, m, accumulate);
    }
}

/* ---- softmax + cross-entropy ------------------------------------------------------------------------ */

void mpt_cpu_softmax_xent_forward(mpt_backend *be, float *loss, float *probs, int32_t *n_correct,
                                  const void *logits, mpt_dtype logits_dtype, const int32_t *labels, int N, int C) {
    (void)be;
    ew_check_float(logits_dtype, "softmax_xent_forward");
    MPT_ASSERTF(N >= 1 && C >= 1, "softmax_xent_forward: N = %d, C = %d", N, C);
    double total = 0.0; /* the batch mean is summed in double and rounded once to FP32 */
    int32_t correct = 0, valid = 0;
    for (int i = 0; i < N; i++) {
        float *pr = probs + (int64_t)i * C;
        mpt_cpu_widen(pr, ew_at(logits, logits_dtype, (int64_t)i * C), logits_dtype, C);
        const int32_t label = labels[i];
        MPT_ASSERTF(label < C, "softmax_xent_forward: label %d of row %d outside [0, %d)", label, i, C);
        float mx = pr[0];
        int arg = 0;
        for (int c = 1; c < C; c++)
            if (pr[c] > mx) {
                mx = pr[c];
                arg = c;
            }
        const float z_label = label >= 0 ? pr[label] : 0.0f;
        float sum = 0.0f;
        for (int c = 0; c < C; c++) {
            pr[c] = expf(pr[c] - mx);
            sum += pr[c];
        }
        const float lse = mx + logf(sum);
        for (int c = 0; c < C; c++) pr[c] = pr[c] / sum;
        if (label < 0) continue; /* padding row (ignore_index): probabilities only */
        total += (double)(lse - z_label);
        correct += arg == label;
        valid++;
    }
    *loss = valid > 0 ? (float)(total / valid) : 0.0f;
    if (n_correct) *n_correct += correct;
}

void mpt_cpu_softmax_xent_backward(mpt_backend *be, void *dlogits, mpt_dtype dlogits_dtype, const float *probs,
                                   const int32_t *labels, int N, int C, const float *scale, int accumulate) {
    (void)be;
    ew_check_float(dlogits_dtype, "softmax_xent_backward");
    int valid = 0;
    for (int i = 0; i < N; i++) valid += labels[i] >= 0;
    const float s = *scale, fN = (float)valid;
    float g[EW_CHUNK];
    for (int i = 0; i < N; i++) {
        if (labels[i] < 0) { /* padding row (ignore_index): no gradient (zeros when overwriting) */
            if (!accumulate)
                memset((void *)ew_at(dlogits, dlogits_dtype, (int64_t)i * C), 0,
                       (size_t)C * mpt_dtype_size(dlogits_dtype));
            continue;
        }
        const float *pr = probs + (int64_t)i * C;
        for (int c0 = 0; c0 < C; c0 += EW_CHUNK) {
            int m = C - c0 < EW_CHUNK ? C - c0 : EW_CHUNK;
            for (int c = 0; c < m; c++) {
                float onehot = c0 + c == labels[i] ? 1.0f : 0.0f;
                g[c] = s * (pr[c0 + c] - onehot) / fN;
            }
            ew_accumulate((void *)ew_at(dlogits, dlogits_dtype, (int64_t)i * C + c0), dlogits_dtype, g, m, accumulate);
        }
    }
}

/* ---- bias gradient ---------------------------------------------------------------------------------- */

void mpt_cpu_bias_grad(mpt_backend *be, float *db, const void *dy, mpt_dtype dtype, int64_t rows, int64_t cols,
                       int accumulate) {
    (void)be;
    ew_check_float(dtype, "bias_grad");
    float acc[EW_CHUNK], row[EW_CHUNK];
    for (int64_t c0 = 0; c0 < cols; c0 += EW_CHUNK) {
        int64_t m = cols - c0 < EW_CHUNK ? cols - c0 : EW_CHUNK;
        for (int64_t c = 0; c < m; c++) acc[c] = 0.0f;
        for (int64_t r = 0; r < rows; r++) {
            mpt_cpu_widen(row, ew_at(dy, dtype, r * cols + c0), dtype, m);
            for (int64_t c = 0; c < m; c++) acc[c] = acc[c] + row[c];
        }
        for (int64_t c = 0; c < m; c++) db[c0 + c] = accumulate ? db[c0 + c] + acc[c] : acc[c];
    }
}

/* ---- batch gather ----------------------------------------------------------------------------------- */

void mpt_cpu_gather_batch(mpt_backend *be, void *x, mpt_dtype x_dtype, int32_t *labels, const uint8_t *images,
                          const uint8_t *image_labels, const int32_t *idx, int B, int64_t D, float mean,
                          float inv_std) {
    (void)be;
    ew_check_float(x_dtype, "gather_batch");
    /* One table of the 256 possible results: the same FP32 expression per pixel value, rounded once. */
    float lut[256];
    uint16_t lut16[256];
    for (int v = 0; v < 256; v++) {
        lut[v] = ((float)v / 255.0f - mean) * inv_std;
        lut16[v] = x_dtype == MPT_DTYPE_F16 ? mpt_f32_to_f16(lut[v]) : mpt_f32_to_bf16(lut[v]);
    }
    MPT_OMP(omp parallel for schedule(static) if ((int64_t)B * D >= MPT_PAR_MIN))
    for (int b = 0; b < B; b++) {
        if (idx[b] < 0) { /* padding row of the last partial batch: zeros, label -1 (ignored by the loss) */
            memset((char *)x + (size_t)b * (size_t)D * mpt_dtype_size(x_dtype), 0, (size_t)D * mpt_dtype_size(x_dtype));
            labels[b] = -1;
            continue;
        }
        const uint8_t *img = images + (int64_t)idx[b] * D;
        if (x_dtype == MPT_DTYPE_F32) {
            float *xr = (float *)x + (int64_t)b * D;
            for (int64_t d = 0; d < D; d++) xr[d] = lut[img[d]];
        } else {
            uint16_t *xr = (uint16_t *)x + (int64_t)b * D;
            for (int64_t d = 0; d < D; d++) xr[d] = lut16[img[d]];
        }
        labels[b] = image_labels[idx[b]];
    }
}
