/*
 * kernels/cpu/tc_accum.c - the Tensor Core summation models: the descriptor table (one row per GPU model,
 * instruction family and output) and the block FMA, dot product and GEMM that read it.
 *
 * The model, its parameters and their sources: kernels/cpu/tc_accum.h. Integer arithmetic throughout: an operand
 * is its FP32 significand (24 bits) and exponent; a product is the 48-bit product of two significands shifted
 * right by 23 (exact for formats with at most 12 significant bits); the aligned terms of one block (at most 32
 * products of magnitude below 2^27 and c below 2^26) sum exactly in an int64.
 */
#include "kernels/cpu/tc_accum.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "engine/status.h"
#include "kernels/cpu/parallel.h"
#include "engine/numerics.h"

/* ---- the tables ---------------------------------------------------------------------------------------------- */

static const char *const model_names[] = {
    [MPT_TC_MODEL_IEEE] = "ieee", [MPT_TC_MODEL_V100] = "v100", [MPT_TC_MODEL_A100] = "a100",
    [MPT_TC_MODEL_ADA] = "ada",   [MPT_TC_MODEL_H100] = "h100", [MPT_TC_MODEL_B200] = "b200",
};
_Static_assert(sizeof model_names / sizeof model_names[0] == MPT_TC_MODEL_COUNT, "a name per mpt_tc_model");

static const mpt_tc_format_info format_info[] = {
    [MPT_TC_FORMAT_FP16] = {.name = "fp16", .family = MPT_TC_FAMILY_FP16, .man_bits = 10, .emin = -14, .emax = 15},
    [MPT_TC_FORMAT_BF16] = {.name = "bf16", .family = MPT_TC_FAMILY_BF16, .man_bits = 7, .emin = -126, .emax = 127},
    [MPT_TC_FORMAT_TF32] = {.name = "tf32", .family = MPT_TC_FAMILY_TF32, .man_bits = 10, .emin = -126, .emax = 127},
    [MPT_TC_FORMAT_E4M3] = {.name = "e4m3", .family = MPT_TC_FAMILY_FP8, .man_bits = 3, .emin = -6, .emax = 8},
    [MPT_TC_FORMAT_E5M2] = {.name = "e5m2", .family = MPT_TC_FAMILY_FP8, .man_bits = 2, .emin = -14, .emax = 15},
};
_Static_assert(sizeof format_info / sizeof format_info[0] == MPT_TC_FORMAT_COUNT, "a row per mpt_tc_format");

static const mpt_tc_out_info out_info[] = {
    [MPT_TC_OUT_FP32] = {.name = "fp32", .man_bits = 23, .emin = -126, .emax = 127},
    [MPT_TC_OUT_FP16] = {.name = "fp16", .man_bits = 10, .emin = -14, .emax = 15},
};
_Static_assert(sizeof out_info / sizeof out_info[0] == MPT_TC_OUT_COUNT, "a row per mpt_tc_out");

/* The rows, from the repository's models/<GPU>TC.m (each file's defaults, then its per-format changes):
 *   V100TC.m   fma 4, neab 0, frmode rz, min_exp_limit -1024 (none); FP16 output: rne, -19
 *   A100TC.m   fma 8, neab 1, rz, -132; TF32: fma 4; FP16 output: rne, -20       (A2TC.m, A30TC.m: A100TC.m)
 *   AdaTC.m    as A100TC.m; FP8: fma 16, neab -10                                (L40STC.m: the same values)
 *   H100TC.m   fma 16, neab 2, rz, -133; TF32: fma 8; FP16 output: rne, -21; FP8: fma 32, neab -10
 *                                                                                (H200TC.m: H100TC.m)
 *   B200TC.m   as H100TC.m, but FP8: fma 32, neab 2 (its FP8 output is always FP32)
 * Not modelled: FP8 with an FP16 output (the repository's validation script does not check it either), and B200's
 * FP8 rows: B200TC.m's parameters (fma 32, neab 2, rz) reproduce only 3207 of the 5000 published B200 E4M3 vectors
 * and 3236 of the 5000 E5M2 ones, every other one 1 ulp below the GPU's magnitude (B200TCRN.m's rne: 4754 and 4717;
 * docs/numerics.md). */
static const mpt_tc_params rows[] = {
    {.name = "ieee fp16 -> fp32", .model = MPT_TC_MODEL_IEEE, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP32,
     .sum = MPT_TC_SUM_IEEE, .gpus = "none (IEEE 754 FP32 recursive summation)"},
    {.name = "ieee bf16 -> fp32", .model = MPT_TC_MODEL_IEEE, .family = MPT_TC_FAMILY_BF16, .out = MPT_TC_OUT_FP32,
     .sum = MPT_TC_SUM_IEEE, .gpus = "none (IEEE 754 FP32 recursive summation)"},
    {.name = "ieee tf32 -> fp32", .model = MPT_TC_MODEL_IEEE, .family = MPT_TC_FAMILY_TF32, .out = MPT_TC_OUT_FP32,
     .sum = MPT_TC_SUM_IEEE, .gpus = "none (IEEE 754 FP32 recursive summation)"},
    {.name = "ieee fp8 -> fp32", .model = MPT_TC_MODEL_IEEE, .family = MPT_TC_FAMILY_FP8, .out = MPT_TC_OUT_FP32,
     .sum = MPT_TC_SUM_IEEE, .gpus = "none (IEEE 754 FP32 recursive summation)"},
    {.name = "v100 fp16 -> fp32", .model = MPT_TC_MODEL_V100, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP32,
     .block = 4, .neab = 0, .min_exp = -1024, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "V100"},
    {.name = "v100 fp16 -> fp16", .model = MPT_TC_MODEL_V100, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP16,
     .block = 4, .neab = 0, .min_exp = -19, .round = MPT_TC_ROUND_RNE, .acc_man = 10, .gpus = "V100"},
    {.name = "a100 fp16 -> fp32", .model = MPT_TC_MODEL_A100, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP32,
     .block = 8, .neab = 1, .min_exp = -132, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "A100, A30, A2"},
    {.name = "a100 fp16 -> fp16", .model = MPT_TC_MODEL_A100, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP16,
     .block = 8, .neab = 1, .min_exp = -20, .round = MPT_TC_ROUND_RNE, .acc_man = 10, .gpus = "A100, A30, A2"},
    {.name = "a100 bf16 -> fp32", .model = MPT_TC_MODEL_A100, .family = MPT_TC_FAMILY_BF16, .out = MPT_TC_OUT_FP32,
     .block = 8, .neab = 1, .min_exp = -132, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "A100, A30, A2"},
    {.name = "a100 tf32 -> fp32", .model = MPT_TC_MODEL_A100, .family = MPT_TC_FAMILY_TF32, .out = MPT_TC_OUT_FP32,
     .block = 4, .neab = 1, .min_exp = -132, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "A100, A30, A2"},
    {.name = "ada fp16 -> fp32", .model = MPT_TC_MODEL_ADA, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP32,
     .block = 8, .neab = 1, .min_exp = -132, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "L40S, RTX 1000"},
    {.name = "ada fp16 -> fp16", .model = MPT_TC_MODEL_ADA, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP16,
     .block = 8, .neab = 1, .min_exp = -20, .round = MPT_TC_ROUND_RNE, .acc_man = 10, .gpus = "L40S, RTX 1000"},
    {.name = "ada bf16 -> fp32", .model = MPT_TC_MODEL_ADA, .family = MPT_TC_FAMILY_BF16, .out = MPT_TC_OUT_FP32,
     .block = 8, .neab = 1, .min_exp = -132, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "L40S, RTX 1000"},
    {.name = "ada tf32 -> fp32", .model = MPT_TC_MODEL_ADA, .family = MPT_TC_FAMILY_TF32, .out = MPT_TC_OUT_FP32,
     .block = 4, .neab = 1, .min_exp = -132, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "L40S, RTX 1000"},
    {.name = "ada fp8 -> fp32", .model = MPT_TC_MODEL_ADA, .family = MPT_TC_FAMILY_FP8, .out = MPT_TC_OUT_FP32,
     .block = 16, .neab = -10, .min_exp = -132, .round = MPT_TC_ROUND_RZ, .acc_man = 13, .gpus = "L40S, RTX 1000"},
    {.name = "h100 fp16 -> fp32", .model = MPT_TC_MODEL_H100, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP32,
     .block = 16, .neab = 2, .min_exp = -133, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "H100, H200"},
    {.name = "h100 fp16 -> fp16", .model = MPT_TC_MODEL_H100, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP16,
     .block = 16, .neab = 2, .min_exp = -21, .round = MPT_TC_ROUND_RNE, .acc_man = 10, .gpus = "H100, H200"},
    {.name = "h100 bf16 -> fp32", .model = MPT_TC_MODEL_H100, .family = MPT_TC_FAMILY_BF16, .out = MPT_TC_OUT_FP32,
     .block = 16, .neab = 2, .min_exp = -133, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "H100, H200"},
    {.name = "h100 tf32 -> fp32", .model = MPT_TC_MODEL_H100, .family = MPT_TC_FAMILY_TF32, .out = MPT_TC_OUT_FP32,
     .block = 8, .neab = 2, .min_exp = -133, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "H100, H200"},
    {.name = "h100 fp8 -> fp32", .model = MPT_TC_MODEL_H100, .family = MPT_TC_FAMILY_FP8, .out = MPT_TC_OUT_FP32,
     .block = 32, .neab = -10, .min_exp = -133, .round = MPT_TC_ROUND_RZ, .acc_man = 13, .gpus = "H100, H200"},
    {.name = "b200 fp16 -> fp32", .model = MPT_TC_MODEL_B200, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP32,
     .block = 16, .neab = 2, .min_exp = -133, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "B200"},
    {.name = "b200 fp16 -> fp16", .model = MPT_TC_MODEL_B200, .family = MPT_TC_FAMILY_FP16, .out = MPT_TC_OUT_FP16,
     .block = 16, .neab = 2, .min_exp = -21, .round = MPT_TC_ROUND_RNE, .acc_man = 10, .gpus = "B200"},
    {.name = "b200 bf16 -> fp32", .model = MPT_TC_MODEL_B200, .family = MPT_TC_FAMILY_BF16, .out = MPT_TC_OUT_FP32,
     .block = 16, .neab = 2, .min_exp = -133, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "B200"},
    {.name = "b200 tf32 -> fp32", .model = MPT_TC_MODEL_B200, .family = MPT_TC_FAMILY_TF32, .out = MPT_TC_OUT_FP32,
     .block = 8, .neab = 2, .min_exp = -133, .round = MPT_TC_ROUND_RZ, .acc_man = 23, .gpus = "B200"},
};
enum { N_ROWS = (int)(sizeof rows / sizeof rows[0]) };
/* ieee: 4 families; v100: 2; a100: 4; ada: 5; h100: 5; b200: 4 */
_Static_assert(sizeof rows / sizeof rows[0] == 24, "the row count the comment above lists");

const char *mpt_tc_model_name(mpt_tc_model m) {
    return (unsigned)m < MPT_TC_MODEL_COUNT ? model_names[m] : NULL;
}
const mpt_tc_format_info *mpt_tc_format_info_of(mpt_tc_format f) {
    return (unsigned)f < MPT_TC_FORMAT_COUNT ? &format_info[f] : NULL;
}
const mpt_tc_out_info *mpt_tc_out_info_of(mpt_tc_out o) { return (unsigned)o < MPT_TC_OUT_COUNT ? &out_info[o] : NULL; }

int mpt_tc_model_parse(const char *name) {
    for (int m = 0; name && m < MPT_TC_MODEL_COUNT; m++)
        if (strcasecmp(name, model_names[m]) == 0) return m;
    return -1;
}
int mpt_tc_format_parse(const char *name) {
    for (int f = 0; name && f < MPT_TC_FORMAT_COUNT; f++)
        if (strcasecmp(name, format_info[f].name) == 0) return f;
    return -1;
}

const mpt_tc_params *mpt_tc_rows(int *n) {
    *n = N_ROWS;
    return rows;
}

const mpt_tc_params *mpt_tc_find(mpt_tc_model m, mpt_tc_family f, mpt_tc_out o) {
    for (int i = 0; i < N_ROWS; i++)
        if (rows[i].model == m && rows[i].family == f && rows[i].out == o) return &rows[i];
    return NULL;
}

int mpt_tc_op_init(mpt_tc_op *op, mpt_tc_model m, mpt_tc_format fa, mpt_tc_format fb, mpt_tc_out o) {
    const mpt_tc_format_info *ia = mpt_tc_format_info_of(fa), *ib = mpt_tc_format_info_of(fb);
    if (!ia || !ib || ia->family != ib->family || !mpt_tc_out_info_of(o)) return -1;
    const mpt_tc_params *p = mpt_tc_find(m, ia->family, o);
    if (!p) return -1;
    *op = (mpt_tc_op){.p = p, .out = &out_info[o], .emin_a = ia->emin, .emin_b = ib->emin};
    return 0;
}

/* ---- the arithmetic ------------------------------------------------------------------------------------------ */

/* x (finite) split with its exponent raised to at least emin (step 1 of the header): the significand shifts right
 * by what the exponent rises, which drops no bit for a value of a format whose smallest normal exponent is emin. */
static inline mpt_tc_term tc_split(float x, int emin) {
    const uint32_t u = mpt_f32_bits(x), field = (u >> 23) & 0xffu;
    int32_t sig = (int32_t)((u & 0x7fffffu) | (field ? 0x800000u : 0u));
    int32_t exp = field ? (int32_t)field - 127 : -126;
    if (exp < emin) {
        const int32_t d = emin - exp;
        sig = d >= 24 ? 0 : sig >> d;
        exp = emin;
    }
    return (mpt_tc_term){u >> 31 ? -sig : sig, sig ? exp : 0};
}

/* x rounded to the output format (FP16 rows: RNE to FP16; FP32: itself). */
static inline float tc_to_out(const mpt_tc_op *op, float x) {
    return op->p->out == MPT_TC_OUT_FP16 ? mpt_f16_to_f32(mpt_f32_to_f16(x)) : x;
}

/* The value S * 2^u (S != 0 possible) rounded as step 5 of the header says. */
static float tc_round(const mpt_tc_op *op, int64_t S, int u) {
    if (S == 0) return 0.0f;
    const mpt_tc_params *p = op->p;
    const int neg = S < 0;
    const uint64_t M = neg ? (uint64_t)0 - (uint64_t)S : (uint64_t)S;
    const int L = 64 - __builtin_clzll(M);    /* M in [2^(L-1), 2^L) */
    const int dexp = u + L - 1;                /* the exponent of the exact sum */
    int qe = (dexp > op->out->emin ? dexp : op->out->emin) - p->acc_man; /* the quantum, 2^qe */
    const int s = qe - u;                      /* bits of M below the quantum */
    uint64_t q;
    if (s <= 0) {
        q = M << -s; /* exact: s >= L - 1 - acc_man, so q < 2^(acc_man + 1) */
    } else if (s >= 64) {
        q = 0; /* below half a quantum: M < 2^63 <= 2^(s - 1) */
    } else {
        q = M >> s;
        const uint64_t rem = M & ((UINT64_C(1) << s) - 1u), half = UINT64_C(1) << (s - 1);
        if (p->round == MPT_TC_ROUND_RNE && (rem > half || (rem == half && (q & 1u)))) q++;
    }
    if (q >> (p->acc_man + 1)) { /* rounding carried into the next binade: q = 2^(acc_man + 1) */
        q >>= 1;
        qe++;
    }
    if (q != 0 && qe + (63 - __builtin_clzll(q)) > op->out->emax) return neg ? -INFINITY : INFINITY;
    /* q 2^qe, exact: q < 2^24, and -149 <= qe <= emax - acc_man, so 2^qe is a float (subnormal below 2^-126) */
    const float scale = mpt_bits_f32(qe >= -126 ? (uint32_t)(qe + 127) << 23 : UINT32_C(1) << (qe + 149));
    const float v = (float)q * scale;
    return neg ? -v : v;
}

/* One block FMA on split operands: c (finite, a value of the output format) + sum_{i < n} a[i] b[i]. Two passes:
 * the alignment exponent E, then the terms on its grid. */
static float tc_block_terms(const mpt_tc_op *op, float c, const mpt_tc_term *a, const mpt_tc_term *b, int n) {
    const mpt_tc_params *p = op->p;
    int emax = INT32_MIN;
    for (int i = 0; i < n; i++) {
        const int e = a[i].exp + b[i].exp; /* a product's un-normalised exponent; zero products are dropped */
        if (a[i].sig != 0 && b[i].sig != 0 && e > emax) emax = e;
    }
    mpt_tc_term ct = {0, 0};
    if (c != 0.0f) {
        ct = tc_split(c, -126); /* c keeps its FP32 exponent (subnormal: -126) */
        emax = ct.exp > emax ? ct.exp : emax;
    }
    if (emax == INT32_MIN) return 0.0f; /* no term: +0 */
    if (emax < p->min_exp) emax = p->min_exp;
    const int base = emax - p->neab; /* a term of exponent e moves right by base - e bits */
    int64_t S = 0;
    for (int i = 0; i < n; i++) {
        const int64_t prod = (int64_t)a[i].sig * b[i].sig;
        if (prod == 0) continue;
        const uint64_t P = (prod < 0 ? (uint64_t)(-prod) : (uint64_t)prod) >> 23; /* significand x 2^23, < 2^25 */
        const int r = base - (a[i].exp + b[i].exp);
        const uint64_t v = r >= 0 ? (r >= 32 ? 0u : P >> r) : P << -r; /* magnitude truncated to the grid */
        S += prod < 0 ? -(int64_t)v : (int64_t)v;
    }
    if (ct.sig != 0) {
        const uint64_t cm = (uint64_t)(ct.sig < 0 ? -ct.sig : ct.sig);
        const int r = base - ct.exp;
        const uint64_t v = r >= 0 ? (r >= 32 ? 0u : cm >> r) : cm << -r;
        S += ct.sig < 0 ? -(int64_t)v : (int64_t)v;
    }
    return tc_round(op, S, emax - 23 - p->neab);
}

/* IEEE's rule for a set of terms of which at least one is NaN or infinite: c and the products a_k b_k (in double:
 * exact, so a finite pair never overflows). */
static float tc_special(float c, const float *a, int64_t sa, const float *b, int64_t sb, int64_t K) {
    int nan = c != c, pinf = c == INFINITY, ninf = c == -INFINITY;
    for (int64_t k = 0; k < K; k++) {
        const double pr = (double)a[k * sa] * (double)b[k * sb];
        nan |= pr != pr;
        pinf |= pr == INFINITY;
        ninf |= pr == -INFINITY;
    }
    if (nan || (pinf && ninf)) return NAN;
    return pinf ? INFINITY : -INFINITY;
}

static int tc_any_special(float c, const float *a, int64_t sa, const float *b, int64_t sb, int64_t K) {
    int bad = !mpt_is_finite(c);
    for (int64_t k = 0; k < K; k++) bad |= !mpt_is_finite(a[k * sa]) | !mpt_is_finite(b[k * sb]);
    return bad;
}

static float tc_ieee(float c, const float *a, int64_t sa, const float *b, int64_t sb, int64_t K) {
    float d = c;
    for (int64_t k = 0; k < K; k++) d = fmaf(a[k * sa], b[k * sb], d);
    return d;
}

/* The block FMAs of a dot product with finite operands, from c (finite or not). */
static float tc_dot_finite(const mpt_tc_op *op, float c, const float *a, int64_t sa, const float *b, int64_t sb,
                           int64_t K) {
    const int blk = op->p->block;
    mpt_tc_term ta[MPT_TC_MAX_BLOCK], tb[MPT_TC_MAX_BLOCK];
    float d = c;
    for (int64_t k0 = 0; k0 < K; k0 += blk) {
        if (!mpt_is_finite(d)) return d; /* overflowed in an earlier block: inf + finite products */
        const int n = (int)(K - k0 < blk ? K - k0 : blk);
        for (int i = 0; i < n; i++) {
            ta[i] = tc_split(a[(k0 + i) * sa], op->emin_a);
            tb[i] = tc_split(b[(k0 + i) * sb], op->emin_b);
        }
        d = tc_block_terms(op, d, ta, tb, n);
    }
    return d;
}

float mpt_tc_block(const mpt_tc_op *op, float c, const float *a, const float *b, int n) {
    if (op->p->sum == MPT_TC_SUM_IEEE) return tc_ieee(c, a, 1, b, 1, n);
    MPT_ASSERTF(n >= 0 && n <= op->p->block, "tc block (%s): %d products, the block takes at most %d", op->p->name, n,
                op->p->block);
    c = tc_to_out(op, c);
    mpt_tc_term ta[MPT_TC_MAX_BLOCK], tb[MPT_TC_MAX_BLOCK];
    uint32_t bad = (mpt_f32_bits(c) & 0x7f800000u) == 0x7f800000u;
    for (int i = 0; i < n; i++) { /* an exponent field of all ones: NaN or inf */
        bad |= (mpt_f32_bits(a[i]) & 0x7f800000u) == 0x7f800000u;
        bad |= (mpt_f32_bits(b[i]) & 0x7f800000u) == 0x7f800000u;
        ta[i] = tc_split(a[i], op->emin_a);
        tb[i] = tc_split(b[i], op->emin_b);
    }
    if (bad) return tc_special(c, a, 1, b, 1, n);
    return tc_block_terms(op, c, ta, tb, n);
}

mpt_tc_term mpt_tc_split(float x, int emin) { return tc_split(x, emin); }

float mpt_tc_block_split(const mpt_tc_op *op, float c, const mpt_tc_term *a, const mpt_tc_term *b, int n) {
    MPT_ASSERTF(op->p->sum == MPT_TC_SUM_BLOCK && n >= 0 && n <= op->p->block,
                "tc block (%s): %d split products (an IEEE row, or more than the block's %d)", op->p->name, n,
                op->p->block);
    return tc_block_terms(op, tc_to_out(op, c), a, b, n);
}

float mpt_tc_dot(const mpt_tc_op *op, float c, const float *a, int64_t a_stride, const float *b, int64_t b_stride,
                 int64_t K) {
    MPT_ASSERTF(K >= 0, "tc dot (%s): K = %lld", op->p->name, (long long)K);
    if (op->p->sum == MPT_TC_SUM_IEEE) return tc_ieee(c, a, a_stride, b, b_stride, K);
    c = tc_to_out(op, c);
    if (tc_any_special(c, a, a_stride, b, b_stride, K)) return tc_special(c, a, a_stride, b, b_stride, K);
    return tc_dot_finite(op, c, a, a_stride, b, b_stride, K);
}

/* ---- the GEMM ------------------------------------------------------------------------------------------------ */

/* The GEMM splits each operand once, into separate arrays of significands and exponents (what the compiler
 * vectorises): a significand keeps its top 12 of 24 bits, sig >> 12, exact for every format here (at most 11
 * significant bits, subnormals included), so a product of two is below 2^24 and the block's P = s_a s_b / 2^23 is
 * (s_a >> 12)(s_b >> 12) * 2, the same number as tc_block_terms forms. */
enum { TC_SIG_DROP = 12 };

size_t mpt_tc_gemm_ws_bytes(const mpt_tc_op *op, int64_t M, int64_t N, int64_t K) {
    if (op->p->sum == MPT_TC_SUM_IEEE || M <= 0 || N <= 0 || K <= 0) return 0;
    return (size_t)(M + N) * ((size_t)K * 2u * sizeof(int32_t) + 1u);
}

/* sig[k], exp[k] = the split of x[k * stride] (k < K; NaN and inf as zeros), significands shifted as above;
 * returns whether any of them is NaN or inf. */
static uint8_t tc_split_row(int32_t *sig, int32_t *exp, const float *x, int64_t stride, int64_t K, int emin) {
    uint8_t bad = 0;
    for (int64_t k = 0; k < K; k++) {
        const float v = x[k * stride];
        const int fin = mpt_is_finite(v);
        const mpt_tc_term t = fin ? tc_split(v, emin) : (mpt_tc_term){0, 0};
        bad |= !fin;
        sig[k] = t.sig / (1 << TC_SIG_DROP); /* exact: the low bits are zero (toward zero for other values) */
        exp[k] = t.exp;
    }
    return bad;
}

/* tc_block_terms on split rows (significands shifted by TC_SIG_DROP): the same arithmetic, the same bits. */
static float tc_block_rows(const mpt_tc_op *op, float c, const int32_t *sa, const int32_t *ea, const int32_t *sb,
                           const int32_t *eb, int n) {
    const mpt_tc_params *p = op->p;
    enum { NONE = -(1 << 30) };
    int32_t emax = NONE;
    for (int i = 0; i < n; i++) {
        const int32_t e = sa[i] * sb[i] != 0 ? ea[i] + eb[i] : NONE;
        emax = e > emax ? e : emax;
    }
    mpt_tc_term ct = {0, 0};
    if (c != 0.0f) {
        ct = tc_split(c, -126);
        emax = ct.exp > emax ? ct.exp : emax;
    }
    if (emax == NONE) return 0.0f;
    if (emax < p->min_exp) emax = p->min_exp;
    const int32_t base = emax - p->neab;
    int64_t S = 0;
    for (int i = 0; i < n; i++) {
        const int32_t prod = sa[i] * sb[i];                               /* below 2^24 in magnitude */
        const uint32_t P = (uint32_t)(prod < 0 ? -prod : prod) << 1;     /* s_a s_b / 2^23 */
        const int32_t r = base - (ea[i] + eb[i]);
        /* a nonzero product has r >= -neab >= -2, so P << -r stays below 2^27 and the mask changes nothing;
         * a zero one (its exponent may be anything, even above emax) has P = 0, and the mask keeps its shift
         * defined (UBSan) without a branch on the product in this loop, which would make it 1.9x slower */
        const uint32_t v = r >= 0 ? (r < 32 ? P >> r : 0u) : P << (-r & 31);
        S += prod < 0 ? -(int64_t)v : (int64_t)v;
    }
    if (ct.sig != 0) {
        const uint64_t cm = (uint64_t)(ct.sig < 0 ? -ct.sig : ct.sig);
        const int r = base - ct.exp;
        const uint64_t v = r >= 0 ? (r >= 32 ? 0u : cm >> r) : cm << -r;
        S += ct.sig < 0 ? -(int64_t)v : (int64_t)v;
    }
    return tc_round(op, S, emax - 23 - p->neab);
}

void mpt_tc_gemm(const mpt_tc_op *op, const mpt_tc_gemm_args *g, void *ws, size_t ws_bytes) {
    const int64_t M = g->M, N = g->N, K = g->K;
    MPT_ASSERTF(M >= 0 && N >= 0 && K >= 0, "tc gemm (%s): bad sizes M %lld N %lld K %lld", op->p->name,
                (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return;
    MPT_ASSERTF(g->D && (K == 0 || (g->A && g->B)), "tc gemm (%s): missing operand or output", op->p->name);
    /* op(A)[m, k] = A[m * as_m + k * as_k]; op(B)[k, n] = B[k * bs_k + n * bs_n] */
    const int64_t as_m = g->trans_a ? 1 : K, as_k = g->trans_a ? M : 1;
    const int64_t bs_k = g->trans_b ? 1 : N, bs_n = g->trans_b ? K : 1;
    if (op->p->sum == MPT_TC_SUM_IEEE || K == 0) { /* K = 0: no operand is read (A and B may be NULL) */
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                const float c = g->C0 ? g->C0[m * N + n] : 0.0f;
                g->D[m * N + n] = K == 0 ? mpt_tc_dot(op, c, NULL, 0, NULL, 0, 0)
                                         : mpt_tc_dot(op, c, g->A + m * as_m, as_k, g->B + n * bs_n, bs_k, K);
            }
        return;
    }
    const size_t need = mpt_tc_gemm_ws_bytes(op, M, N, K);
    MPT_ASSERTF(ws && ws_bytes >= need && ((uintptr_t)ws & 3u) == 0,
                "tc gemm (%s): scratch of %zu bytes at %p, needs %zu bytes, 4-byte aligned", op->p->name, ws_bytes,
                ws, need);
    /* scratch: significands and exponents of the rows of op(A) [M, K] and of the columns of op(B) [N, K], then a
     * NaN/inf flag per row and per column */
    int32_t *sa = ws, *ea = sa + M * K, *sb = ea + M * K, *eb = sb + N * K;
    uint8_t *bad_a = (uint8_t *)(eb + N * K), *bad_b = bad_a + M;
    for (int64_t m = 0; m < M; m++)
        bad_a[m] = tc_split_row(sa + m * K, ea + m * K, g->A + m * as_m, as_k, K, op->emin_a);
    for (int64_t n = 0; n < N; n++)
        bad_b[n] = tc_split_row(sb + n * K, eb + n * K, g->B + n * bs_n, bs_k, K, op->emin_b);
    const int blk = op->p->block;
    /* rows are independent: each element is the same function of its own row and column on any thread */
    MPT_OMP(omp parallel for schedule(static) if (M * N * K >= 64 * MPT_PAR_MIN))
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const float c = tc_to_out(op, g->C0 ? g->C0[m * N + n] : 0.0f);
            if (bad_a[m] || bad_b[n] || !mpt_is_finite(c)) { /* IEEE's rule (mpt_tc_dot) */
                g->D[m * N + n] = tc_special(c, g->A + m * as_m, as_k, g->B + n * bs_n, bs_k, K);
                continue;
            }
            float d = c;
            for (int64_t k0 = 0; k0 < K && mpt_is_finite(d); k0 += blk)
                d = tc_block_rows(op, d, sa + m * K + k0, ea + m * K + k0, sb + n * K + k0, eb + n * K + k0,
                                  (int)(K - k0 < blk ? K - k0 : blk));
            g->D[m * N + n] = d;
        }
}
