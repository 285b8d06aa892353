/*
 * engine/telemetry/elem.h - the per-element math of the telemetry counters, written once and compiled by gcc (the
 * host functions of range.c and lost.c) and nvcc (kernels/cuda/telemetry.cu), so the CPU's and the GPU's counts
 * cannot drift apart (STYLE item 4, the pattern of engine/numerics.h: MPT_HD functions, pure, no tables).
 *
 * What each function decides is defined in range.h (stored range, rounding histogram, rounding error) and lost.h
 * (lost updates); the formats' constants come from their rows (engine/dtype.h) through the *_fmt_of helpers, which
 * the host code calls and whose results it passes to the kernels as arguments.
 */
#ifndef MPT_ENGINE_TELEMETRY_ELEM_H
#define MPT_ENGINE_TELEMETRY_ELEM_H

#include <stdint.h>

#include "engine/numerics.h"

/* Exponent bins of the rounding histogram: e = MPT_EXP_HIST_EMIN .. MPT_EXP_HIST_EMAX (FP32's smallest subnormal to
 * its largest binade). */
#define MPT_EXP_HIST_EMIN (-149)
#define MPT_EXP_HIST_EMAX 127
#define MPT_EXP_HIST_BINS (MPT_EXP_HIST_EMAX - MPT_EXP_HIST_EMIN + 1)

/* ---- 1. stored range ------------------------------------------------------------------------------------------ */

/* A float format's fields on |x|'s bit pattern (right-aligned: 16-bit formats in the low 16 bits). */
typedef struct mpt_range_fmt {
    uint32_t exp_mask, man_mask, max_finite_abs;
} mpt_range_fmt;

/* From the format's row: exp_bits, man_bits and max_bits of mpt_format_desc. */
MPT_HD mpt_range_fmt mpt_range_fmt_of(int exp_bits, int man_bits, uint32_t max_bits) {
    mpt_range_fmt f;
    f.man_mask = (1u << man_bits) - 1u;
    f.exp_mask = ((1u << exp_bits) - 1u) << man_bits;
    f.max_finite_abs = max_bits;
    return f;
}

/* Classes of one stored element (bit flags; an element may be in several: inf is at_max and nonfinite). */
#define MPT_RANGE_ZERO 1u
#define MPT_RANGE_SUBNORMAL 2u
#define MPT_RANGE_AT_MAX 4u
#define MPT_RANGE_NONFINITE 8u

/* The classes of the element whose |x| has bit pattern a (sign bit cleared) in format f: zero (+-0), subnormal
 * (nonzero with a zero exponent field), at_max (|x| >= the largest finite value, inf included, NaN not), nonfinite
 * (inf or NaN). */
MPT_HD unsigned mpt_range_classify(uint32_t a, mpt_range_fmt f) {
    const uint32_t e = a & f.exp_mask;
    unsigned c = 0u;
    if (a == 0u) c |= MPT_RANGE_ZERO;
    else if (e == 0u) c |= MPT_RANGE_SUBNORMAL;
    if (e == f.exp_mask) {
        c |= MPT_RANGE_NONFINITE;
        if ((a & f.man_mask) == 0u) c |= MPT_RANGE_AT_MAX; /* inf */
    } else if (a >= f.max_finite_abs) {
        c |= MPT_RANGE_AT_MAX;
    }
    return c;
}

/* ---- 2. the rounding histogram -------------------------------------------------------------------------------- */

/* Whether the top bits+1 bits of a 23-bit fraction are all ones (RNE to `bits` bits carries out of the binade). */
MPT_HD int mpt_exp_carries(uint32_t frac, int bits) {
    const int keep = bits + 1;
    const uint32_t top = frac >> (23 - keep);
    return top == (1u << keep) - 1u;
}

/* One FP32 value's bin of the rounding histogram. */
typedef struct mpt_exp_class {
    int idx;        /* e - MPT_EXP_HIST_EMIN, e = floor(log2 |v|) (FP32 subnormals normalised) */
    int pow2;       /* |v| is a power of two (significand 1.000...) */
    int carry;      /* its significand rounds up into the next binade at b explicit bits */
    int carry_sub;  /* ... at b - 1 bits */
    uint32_t sig;   /* the 24-bit significand with its leading one: |v| = sig * 2^(e - 23) exactly */
    float abs;      /* |v| */
} mpt_exp_class;

/* Position of the leading one of x != 0 (0..31). */
MPT_HD int mpt_leading_one(uint32_t x) {
#if defined(__CUDA_ARCH__)
    return 31 - __clz((int)x);
#else
    return 31 - __builtin_clz(x);
#endif
}

#define MPT_EXP_ZERO 0     /* +-0: counted in `zero`, not binned */
#define MPT_EXP_NONFINITE 1 /* inf or NaN: counted in `nonfinite`, not binned */
#define MPT_EXP_BINNED 2   /* *c holds the value's bin */

/* Classifies v for rounding into a format with b explicit significand bits: MPT_EXP_ZERO, MPT_EXP_NONFINITE, or
 * MPT_EXP_BINNED with *c filled. */
MPT_HD int mpt_exp_classify(float v, int b, mpt_exp_class *c) {
    const uint32_t a = mpt_f32_bits(v) & 0x7fffffffu;
    if (a == 0u) return MPT_EXP_ZERO;
    const uint32_t ex = a >> 23;
    uint32_t frac = a & 0x7fffffu;
    if (ex == 0xffu) return MPT_EXP_NONFINITE;
    int e;
    if (ex == 0u) { /* FP32 subnormal: frac * 2^-149; normalise so the leading one is implicit */
        const int p = mpt_leading_one(frac); /* 0..22 */
        e = p + MPT_EXP_HIST_EMIN;
        frac = (frac << (23 - p)) & 0x7fffffu;
    } else {
        e = (int)ex - 127;
    }
    c->idx = e - MPT_EXP_HIST_EMIN;
    c->pow2 = frac == 0u;
    c->carry = mpt_exp_carries(frac, b);
    c->carry_sub = mpt_exp_carries(frac, b - 1);
    c->sig = frac | 0x800000u;
    c->abs = mpt_bits_f32(a);
    return MPT_EXP_BINNED;
}

/* ---- 4. the rounding error ------------------------------------------------------------------------------------ */

/* Exponents of a 16-bit target format. */
typedef struct mpt_round_fmt {
    int esub, emin, emax; /* binary exponents: smallest subnormal, smallest normal, largest finite binade */
    int b;                /* explicit significand bits */
} mpt_round_fmt;

/* From the format's row: emin, emax and man_bits of mpt_format_desc. */
MPT_HD mpt_round_fmt mpt_round_fmt_of(int emin, int emax, int man_bits) {
    mpt_round_fmt f;
    f.esub = emin - man_bits;
    f.emin = emin;
    f.emax = emax;
    f.b = man_bits;
    return f;
}

/* x (a double) rounded to nearest even into the 16-bit format f, as a double: its spacing around x is 2^(e - b)
 * with e the binade of x clamped at emin (subnormals: the smallest spacing), so x / spacing is exact and nearbyint
 * rounds it to even in the default rounding mode (CUDA's nearbyint always rounds to nearest even); beyond the largest
 * finite value, inf. */
MPT_HD double mpt_round_to_fmt(double x, mpt_round_fmt f) {
    if (x == 0.0) return x;
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    const int ex = e - 1 < f.emin ? f.emin : e - 1;
    const double q = ldexp(1.0, ex - f.b);
    const double r = nearbyint(x / q) * q;
    const double max = ldexp(2.0 - ldexp(1.0, -f.b), f.emax);
    return fabs(r) > max ? copysign((double)INFINITY, x) : r;
}

/* The error of one finite FP32 value v rounded at shift k: RNE(v 2^k) 2^-k - v, exact in FP64. */
MPT_HD double mpt_round_err_one(float v, int k, mpt_round_fmt f) {
    const double x = (double)v;
    return ldexp(mpt_round_to_fmt(ldexp(x, k), f), -k) - x;
}

/* ---- the lost-update meter (lost.h) --------------------------------------------------------------------------- */

/* Running sums of a lost-update count. */
typedef struct mpt_lost_sums {
    int64_t nonzero, lost;
    double mass, mass_lost, mass_applied;
} mpt_lost_sums;

/* Adds one element: the weight as stored before (old) and after (neu) the step, widened, and the update delta d. */
MPT_HD void mpt_lost_add_one(mpt_lost_sums *s, float old, float neu, float d) {
    const int64_t nz = d != 0.0f, lost = nz & (neu == old);
    const double ad = fabs((double)d);
    s->nonzero += nz;
    s->lost += lost;
    s->mass += ad;
    s->mass_lost += lost ? ad : 0.0;
    /* the movement along the update (exact in FP64: both are floats of nearby magnitude) */
    const double moved = (double)neu - (double)old;
    s->mass_applied += d > 0.0f ? moved : d < 0.0f ? -moved : 0.0;
}

/* The counterfactual's new weight: old (a 16-bit value, widened) plus d in FP32, rounded to nearest even into F16
 * (f16 = 1) or BF16 (f16 = 0), widened. */
MPT_HD float mpt_lost_counterfactual_new(float old, float d, int f16) {
    return f16 ? mpt_f16_to_f32(mpt_f32_to_f16(old + d)) : mpt_bf16_to_f32(mpt_f32_to_bf16(old + d));
}

#endif
