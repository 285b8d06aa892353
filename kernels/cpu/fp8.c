/*
 * kernels/cpu/fp8.c - the CPU backend's FP8 kernels: the scaled casts (per tensor and MX per block, with the
 * transposing copies the TN layout needs), the per-step scale update, the exact decoding of FP8 operands for the
 * emulated GEMM, and the model of Hopper's FP8 Tensor Core accumulator (contracts: engine/backend.h; the model and
 * its sources: kernels/cpu/gemm.c's header, docs/numerics.md).
 *
 * Every per-element rule is engine/numerics.h's (mpt_f32_to_fp8, mpt_mx_scale_code, mpt_fp8_scale_from_amax), so
 * the CUDA kernels that call the same functions produce the same bits.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"

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

/* An FP8 code as value = sig * 2^(exp - man_bits): sig the signed integer significand (implicit bit included,
 * 0 for zeros), exp the exponent of its leading bit position for normals and the smallest normal exponent for
 * subnormals (the model's convention: a subnormal's significand is below 1); special = NaN or inf. */
typedef struct fp8_parts {
    int16_t sig;
    int8_t exp;
    uint8_t special;
} fp8_parts;

static void fp8_parts_table(fp8_parts t[256], int e5) {
    const int man = e5 ? 2 : 3, bias = e5 ? 15 : 7, top = e5 ? 31 : 15;
    for (int c = 0; c < 256; c++) {
        const int e = (c >> man) & top, m = c & ((1 << man) - 1), neg = c >> 7;
        fp8_parts p = {0, 0, 0};
        const float v = mpt_fp8_decode((uint8_t)c, e5);
        if (v != v || v == INFINITY || v == -INFINITY) p.special = 1;
        else if (e == 0) p = (fp8_parts){(int16_t)(neg ? -m : m), (int8_t)(1 - bias), 0};
        else p = (fp8_parts){(int16_t)(neg ? -(m | (1 << man)) : (m | (1 << man))), (int8_t)(e - bias), 0};
        t[c] = p;
    }
}

/* c + sum of the block's products through the fast accumulator: every nonzero term (the products, exact, and c)
 * is truncated toward zero to a multiple of 2^(E - 13), E the largest exponent among them (products: exp(a) +
 * exp(b); c: its FP32 exponent), the truncated terms are summed exactly, and the sum is truncated toward zero to
 * 14 significant bits. A block with a NaN or inf operand gives c + the FP32 sum of its products (IEEE rules). */
static float fast_block(float c, const uint8_t *a, const uint8_t *b, int n, const fp8_parts *ta, const fp8_parts *tb,
                        const float *va, const float *vb, int man_ab) {
    int emax = -1000;
    for (int i = 0; i < n; i++) {
        const fp8_parts pa = ta[a[i]], pb = tb[b[i]];
        if (pa.special | pb.special) {
            float s = c;
            for (int j = 0; j < n; j++) s += va[a[j]] * vb[b[j]];
            return s;
        }
        if (pa.sig == 0 || pb.sig == 0) continue;
        const int e = pa.exp + pb.exp;
        emax = e > emax ? e : emax;
    }
    const uint32_t cb = mpt_f32_bits(c), field = (cb >> 23) & 0xffu;
    int ec = 0;
    uint32_t csig = 0;
    if ((cb & 0x7fffffffu) != 0u) {
        ec = field ? (int)field - 127 : -126;
        csig = (cb & 0x7fffffu) | (field ? 0x800000u : 0u);
        emax = ec > emax ? ec : emax;
    }
    if (emax == -1000) return c; /* no nonzero term: c is +-0 */
    const int unit = emax - 13;  /* the alignment grid, 2^unit */
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        const fp8_parts pa = ta[a[i]], pb = tb[b[i]];
        const int p = pa.sig * pb.sig;
        if (p == 0) continue;
        const int shift = unit - (pa.exp + pb.exp - man_ab); /* the product is p * 2^(exp(a) + exp(b) - man_ab) */
        int64_t mag = p < 0 ? -(int64_t)p : (int64_t)p;
        mag = shift >= 0 ? (shift >= 31 ? 0 : mag >> shift) : mag << -shift;
        sum += p < 0 ? -mag : mag;
    }
    if (csig) {
        const int shift = unit - (ec - 23); /* >= 10: c = csig * 2^(ec - 23), csig < 2^24 */
        const int64_t mag = shift >= 24 ? 0 : (int64_t)(csig >> shift);
        sum += (cb >> 31) ? -mag : mag;
    }
    if (sum == 0) return 0.0f;
    uint64_t mag = sum < 0 ? (uint64_t)(-sum) : (uint64_t)sum;
    const int len = 64 - __builtin_clzll(mag);
    if (len > 14) mag = (mag >> (len - 14)) << (len - 14); /* truncate to 14 significant bits */
    const float v = ldexpf((float)mag, unit);
    return sum < 0 ? -v : v;
}

void mpt_cpu_fp8_fast_tile(float *tile, const mpt_gemm_args *g) {
    const int e5a = g->a_dtype == MPT_DTYPE_E5M2, e5b = g->b_dtype == MPT_DTYPE_E5M2;
    fp8_parts ta[256], tb[256];
    float va[256], vb[256];
    fp8_parts_table(ta, e5a);
    fp8_parts_table(tb, e5b);
    for (int c = 0; c < 256; c++) {
        va[c] = mpt_fp8_decode((uint8_t)c, e5a);
        vb[c] = mpt_fp8_decode((uint8_t)c, e5b);
    }
    const int man_ab = (e5a ? 2 : 3) + (e5b ? 2 : 3);
    const int64_t M = g->M, N = g->N, K = g->K, promote = g->fp8_promote;
    const uint8_t *A = g->A, *B = g->B;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const uint8_t *a = A + m * K, *b = B + n * K;
            float part = 0.0f, acc = 0.0f;
            int64_t since = 0;
            for (int64_t k0 = 0; k0 < K; k0 += MPT_MX_BLOCK) {
                const int len = (int)(K - k0 < MPT_MX_BLOCK ? K - k0 : MPT_MX_BLOCK);
                part = fast_block(part, a + k0, b + k0, len, ta, tb, va, vb, man_ab);
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
