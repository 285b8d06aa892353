/*
 * kernels/cpu/fp8.c - the CPU backend's FP8 kernels: the scaled casts (per tensor and MX per block, with the
 * transposing copies the TN layout needs), the per-step scale update, the exact decoding of FP8 operands for the
 * emulated GEMM, and the model of Hopper's FP8 Tensor Core accumulator (contracts: engine/backend.h; the model and
 * its sources: kernels/cpu/gemm.c's header, docs/numerics.md; its arithmetic: kernels/cpu/tc_accum.h).
 *
 * Every per-element rule is engine/numerics.h's (mpt_f32_to_fp8, mpt_mx_scale_code, mpt_fp8_scale_from_amax), so
 * the CUDA kernels that call the same functions produce the same bits.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/tc_accum.h"

/* ---- casts --------------------------------------------------------------------------------------------------- */

/* max |x| over the tensor; NaN when any element is NaN (a NaN must not be lost by a max that ignores it). */
static float tensor_amax(const void *x, mpt_dtype t, int64_t n) {
    float m = 0.0f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = fabsf(mpt_load_f32(x, t, i));
        nan |= v != v;
        m = v > m ? v : m;
    }
    return nan ? NAN : m;
}

static void cast_check(const mpt_fp8_cast_args *a) {
    const char *tag = a->tag ? a->tag : "?";
    MPT_ASSERTF(mpt_dtype_is_float(a->x_dtype), "fp8 cast %s: source dtype %s is not F32, F16 or BF16", tag,
                mpt_dtype_name(a->x_dtype));
    MPT_ASSERTF(mpt_dtype_is_fp8(a->fmt), "fp8 cast %s: format %s is not E4M3 or E5M2", tag, mpt_dtype_name(a->fmt));
    MPT_ASSERTF(a->rows >= 0 && a->cols >= 0 && a->meta != NULL, "fp8 cast %s: bad sizes or no state", tag);
    MPT_ASSERTF(!a->mx || ((a->q == NULL) == (a->q_scales == NULL) && (a->qt == NULL) == (a->qt_scales == NULL)),
                "fp8 cast %s: an MX output needs its block scales", tag);
}

/* One MX block of n elements x[i * stride] (i < n): its scale code, and the elements quantized into q[i * qstride]. */
static uint8_t mx_block(const void *x, mpt_dtype t, int64_t at, int64_t stride, int n, uint8_t *q, int64_t qstride,
                        int e5, int sat, int rounding) {
    float v[MPT_MX_BLOCK], m = 0.0f;
    int nan = 0;
    for (int i = 0; i < n; i++) {
        v[i] = mpt_load_f32(x, t, at + (int64_t)i * stride);
        float av = fabsf(v[i]);
        nan |= av != av;
        m = av > m ? av : m;
    }
    const uint8_t code = mpt_mx_scale_code(nan ? NAN : m, e5, rounding);
    const float f = code == MPT_E8M0_NAN ? NAN : mpt_pow2f(127 - (int32_t)code); /* 1 / 2^(code - 127), exact */
    for (int i = 0; i < n; i++) q[(int64_t)i * qstride] = mpt_f32_to_fp8(v[i] * f, e5, sat);
    return code;
}

void mpt_cpu_fp8_cast(mpt_backend *be, const mpt_fp8_cast_args *a) {
    (void)be;
    cast_check(a);
    const int64_t R = a->rows, C = a->cols, n = R * C;
    const int e5 = a->fmt == MPT_DTYPE_E5M2, sat = a->saturate;
    mpt_fp8_meta *meta = a->meta;
    const float amax = tensor_amax(a->x, a->x_dtype, n);
    meta->amax = amax;
    const int finite = amax == amax && amax != INFINITY;
    if (!finite && a->found_inf) *a->found_inf = 1.0f;
    if (a->mx) {
        if (a->q) { /* blocks along each row (K = cols) */
            const int64_t nb = mpt_mx_blocks(C);
            for (int64_t r = 0; r < R; r++)
                for (int64_t b = 0; b < nb; b++) {
                    const int64_t c0 = b * MPT_MX_BLOCK;
                    const int len = (int)(C - c0 < MPT_MX_BLOCK ? C - c0 : MPT_MX_BLOCK);
                    a->q_scales[r * nb + b] =
                        mx_block(a->x, a->x_dtype, r * C + c0, 1, len, a->q + r * C + c0, 1, e5, sat, a->mx_rounding);
                }
        }
        if (a->qt) { /* blocks along each column (K = rows), written transposed */
            const int64_t nb = mpt_mx_blocks(R);
            for (int64_t c = 0; c < C; c++)
                for (int64_t b = 0; b < nb; b++) {
                    const int64_t r0 = b * MPT_MX_BLOCK;
                    const int len = (int)(R - r0 < MPT_MX_BLOCK ? R - r0 : MPT_MX_BLOCK);
                    a->qt_scales[c * nb + b] = mx_block(a->x, a->x_dtype, r0 * C + c, C, len, a->qt + c * R + r0, 1,
                                                        e5, sat, a->mx_rounding);
                }
        }
        return;
    }
    if (a->current) {
        const float s = mpt_fp8_scale_from_amax(amax, a->scaled_max, a->pow2, 1.0f);
        meta->scale = s;
        meta->scale_inv = 1.0f / s;
        if (finite && amax > 0.0f) meta->amax_used = amax;
    }
    const float s = meta->scale;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            const uint8_t v = mpt_f32_to_fp8(mpt_load_f32(a->x, a->x_dtype, r * C + c) * s, e5, sat);
            if (a->q) a->q[r * C + c] = v;
            if (a->qt) a->qt[c * R + r] = v;
        }
}

void mpt_cpu_fp8_update(mpt_backend *be, const mpt_fp8_update_args *a) {
    (void)be;
    MPT_ASSERTF(a->n >= 0 && a->len >= 1 && a->iteration != NULL, "fp8 update: bad arguments");
    const int64_t slot = *a->iteration % a->len;
    for (int i = 0; i < a->n; i++) {
        mpt_fp8_meta *m = &a->meta[i];
        float *h = a->history + (int64_t)i * a->len;
        const float amax = m->amax;
        h[slot] = amax == amax && amax != INFINITY ? amax : 0.0f;
        if (!a->delayed) continue;
        float w = 0.0f;
        for (int j = 0; j < a->len; j++) w = h[j] > w ? h[j] : w;
        if (!(w > 0.0f)) continue; /* an empty window keeps the scale (TE) */
        const float s = mpt_fp8_scale_from_amax(w, m->fmax * a->margin_factor, a->pow2, m->scale);
        m->scale = s;
        m->scale_inv = 1.0f / s;
        m->amax_used = w;
    }
}

/* ---- the GEMM's operands ------------------------------------------------------------------------------------- */

void mpt_cpu_fp8_decode(float *dst, const uint8_t *src, mpt_dtype fmt, int64_t rows, int64_t K,
                        const uint8_t *block_scales) {
    const int e5 = fmt == MPT_DTYPE_E5M2;
    float table[256];
    for (int c = 0; c < 256; c++) table[c] = mpt_fp8_decode((uint8_t)c, e5);
    const int64_t nb = mpt_mx_blocks(K);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = src + r * K;
        float *d = dst + r * K;
        if (!block_scales) {
            for (int64_t k = 0; k < K; k++) d[k] = table[s[k]];
            continue;
        }
        for (int64_t b = 0; b < nb; b++) {
            const float f = mpt_e8m0_to_f32(block_scales[r * nb + b]); /* 2^(c - 127): the product is exact */
            const int64_t k1 = (b + 1) * MPT_MX_BLOCK < K ? (b + 1) * MPT_MX_BLOCK : K;
            for (int64_t k = b * MPT_MX_BLOCK; k < k1; k++) d[k] = table[s[k]] * f;
        }
    }
}

/* ---- Hopper's FP8 accumulator (the model: kernels/cpu/gemm.c's header) -------------------------------------- */

/* The model is the H100 FP8 row of the Tensor Core summation models (kernels/cpu/tc_accum.h: blocks of 32 products,
 * neab -10, truncation; bench/tc_validate matches it to the published H100 and H200 measurements): each block of K
 * runs as one block FMA with the partial sum as its c, on the 256 codes of each operand format split once; a block
 * with a NaN or inf operand, or after a partial sum that is not finite, follows IEEE's rules (mpt_tc_block on the
 * values). --fp8-promote adds the partial sum into an FP32 accumulator every fp8_promote elements. */
void mpt_cpu_fp8_fast_tile(float *tile, const mpt_gemm_args *g) {
    const int e5a = g->a_dtype == MPT_DTYPE_E5M2, e5b = g->b_dtype == MPT_DTYPE_E5M2;
    mpt_tc_op op;
    const int rc = mpt_tc_op_init(&op, MPT_TC_MODEL_H100, e5a ? MPT_TC_FORMAT_E5M2 : MPT_TC_FORMAT_E4M3,
                                  e5b ? MPT_TC_FORMAT_E5M2 : MPT_TC_FORMAT_E4M3, MPT_TC_OUT_FP32);
    MPT_ASSERTF(rc == 0 && op.p->block == MPT_MX_BLOCK, "fp8 fast accumulator: no H100 FP8 row of 32 products");
    float va[256], vb[256];
    mpt_tc_term sa[256], sb[256];
    uint8_t special_a[256], special_b[256]; /* NaN or inf codes */
    for (int c = 0; c < 256; c++) {
        va[c] = mpt_fp8_decode((uint8_t)c, e5a);
        vb[c] = mpt_fp8_decode((uint8_t)c, e5b);
        special_a[c] = !mpt_is_finite(va[c]);
        special_b[c] = !mpt_is_finite(vb[c]);
        sa[c] = special_a[c] ? (mpt_tc_term){0, 0} : mpt_tc_split(va[c], op.emin_a);
        sb[c] = special_b[c] ? (mpt_tc_term){0, 0} : mpt_tc_split(vb[c], op.emin_b);
    }
    const int64_t M = g->M, N = g->N, K = g->K, promote = g->fp8_promote;
    const uint8_t *A = g->A, *B = g->B;
    mpt_tc_term x[MPT_MX_BLOCK], y[MPT_MX_BLOCK];
    float xv[MPT_MX_BLOCK], yv[MPT_MX_BLOCK];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const uint8_t *a = A + m * K, *b = B + n * K;
            float part = 0.0f, acc = 0.0f;
            int64_t since = 0;
            for (int64_t k0 = 0; k0 < K; k0 += MPT_MX_BLOCK) {
                const int len = (int)(K - k0 < MPT_MX_BLOCK ? K - k0 : MPT_MX_BLOCK);
                int special = !mpt_is_finite(part);
                for (int i = 0; i < len; i++) {
                    special |= special_a[a[k0 + i]] | special_b[b[k0 + i]];
                    x[i] = sa[a[k0 + i]], y[i] = sb[b[k0 + i]];
                }
                if (special) {
                    for (int i = 0; i < len; i++) xv[i] = va[a[k0 + i]], yv[i] = vb[b[k0 + i]];
                    part = mpt_tc_block(&op, part, xv, yv, len);
                } else {
                    part = mpt_tc_block_split(&op, part, x, y, len);
                }
                since += len;
                if (promote > 0 && since >= promote) { /* DeepSeek-V3: the partial sum joins an FP32 accumulator */
                    acc = acc + part;
                    part = 0.0f;
                    since = 0;
                }
            }
            tile[m * N + n] = promote > 0 ? acc + part : part;
        }
}
