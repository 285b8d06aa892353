/*
 * engine/telemetry/range.h - where the values of a tensor lie in its number format (host-side counters).
 *
 * Two instruments, both pure functions of host buffers (the collector, engine/telemetry/telemetry.c, runs them
 * through the backend's telemetry reductions where it has them, else on host copies of the tensors):
 *
 * 1. Stored range (mpt_range_count): for a buffer already stored in F32, F16 or BF16, the counts of elements
 *    that are zero, subnormal in that format, at or beyond its largest finite value (|x| >= max finite,
 *    infinities included, NaN excluded) and non-finite (inf or NaN).
 *
 * 2. Rounding histogram (mpt_exp_hist): for FP32 values *before* they are rounded into F16 or BF16, a
 *    histogram over e = floor(log2 |v|) (FP32 subnormals included, normalised), keeping per bin:
 *      count   elements with that exponent,
 *      pow2    those that are exact powers of two (significand 1.000...),
 *      carry   those whose significand rounds up into the next binade when rounded to b bits after the point
 *              (b = the format's explicit bits: decides overflow to inf at the top binade),
 *      carry_sub the same for b - 1 bits (decides whether a value one binade below the smallest normal
 *              rounds up to it),
 *      mass    sum of |v|.
 *    RNE ties round up into the next binade exactly when the top b+1 significand bits are all ones (the
 *    b-bit all-ones significand is odd), which is why one count per bin suffices.
 *    From it, mpt_exp_hist_round() answers exactly, for the values scaled by 2^k (any integer k), what
 *    round-to-nearest-even into the format does:
 *      flushed     the value rounds to zero:       e+k < esub-1, or e+k == esub-1 and |v| a power of two
 *                  (exactly half the smallest subnormal ties to the even 0);
 *      subnormal   it rounds to a nonzero subnormal: the rest of binade esub-1, binades esub..emin-2, and
 *                  binade emin-1 minus carry_sub;
 *      overflow    it rounds to inf:                e+k > emax, or e+k == emax with carry;
 *      mass lost   sum |v| of the flushed values / sum |v| of all finite values.
 *    (esub, emin, emax: binary exponents of the smallest subnormal, smallest normal and largest finite:
 *    FP16 -24, -14, 15; BF16 -133, -126, 127.) Scaling by a power of two moves every value by k binades and
 *    keeps its significand, so with the loss scale S = 2^s the same histogram of the scaled values answers
 *    "what if the scale had been S/2 (k = -1), 2S (k = +1), or 1 (k = -s)". That is exact for the rounding
 *    of this tensor's values; it does not re-run the layers below, whose inputs would also have changed.
 *
 * Fractions are of the nonzero finite values (exact zeros, e.g. ReLU's, are neither flushed nor kept).
 * Source of the formats: engine/numerics.h; of the question: Micikevicius et al. 2018, section 3.2.
 * The per-element decisions are engine/telemetry/elem.h's, which the CUDA backend's telemetry kernels call too
 * (engine/backend.h, "telemetry reductions": the same counts from device memory without a copy).
 */
#ifndef MPT_ENGINE_TELEMETRY_RANGE_H
#define MPT_ENGINE_TELEMETRY_RANGE_H

#include <stdint.h>

#include "engine/dtype.h"
#include "engine/telemetry/elem.h"

/* Counts of a stored buffer (see 1. above). */
typedef struct mpt_range {
    int64_t n;          /* elements counted */
    int64_t zero;       /* +-0 */
    int64_t subnormal;  /* nonzero with a zero exponent field, in the buffer's own format */
    int64_t at_max;     /* |x| >= the format's largest finite value (inf included, NaN not) */
    int64_t nonfinite;  /* inf or NaN */
} mpt_range;

/* Adds the n elements of host buffer p (dtype F32, F16 or BF16) to *r (zero *r first). */
void mpt_range_count(mpt_range *r, const void *p, mpt_dtype dtype, int64_t n);

/* The format constants of elem.h for float dtype t (F32, F16, BF16; aborts otherwise), from its row. */
mpt_range_fmt mpt_range_fmt_of_dtype(mpt_dtype t);
mpt_round_fmt mpt_round_fmt_of_dtype(mpt_dtype t);

/* Exponent bins: e = MPT_EXP_HIST_EMIN .. MPT_EXP_HIST_EMAX (engine/telemetry/elem.h). */

typedef struct mpt_exp_hist {
    mpt_dtype target;                      /* F16 or BF16: the format the values are rounded into */
    int64_t n;                             /* elements added */
    int64_t zero;                          /* exact zeros */
    int64_t nonfinite;                     /* inf or NaN (not binned) */
    int64_t count[MPT_EXP_HIST_BINS];      /* index e - MPT_EXP_HIST_EMIN */
    int64_t pow2[MPT_EXP_HIST_BINS];
    int64_t carry[MPT_EXP_HIST_BINS];
    int64_t carry_sub[MPT_EXP_HIST_BINS];
    double mass[MPT_EXP_HIST_BINS];        /* sum |v| */
} mpt_exp_hist;

/* Empties *h for values that will be rounded into `target` (MPT_DTYPE_F16 or MPT_DTYPE_BF16; aborts otherwise). */
void mpt_exp_hist_init(mpt_exp_hist *h, mpt_dtype target);
/* Adds n FP32 values (host buffer). */
void mpt_exp_hist_add(mpt_exp_hist *h, const float *v, int64_t n);

/* Adds the counts of src (same target) to dst: the histogram of both sets of values. */
void mpt_exp_hist_merge(mpt_exp_hist *dst, const mpt_exp_hist *src);

/* What RNE into the target format does to the histogram's values multiplied by 2^k. Fractions of the
 * nonzero finite values (0 when there are none); mass_lost a share of sum |v| (0 when the sum is 0). */
typedef struct mpt_round_stats {
    int64_t nonzero;       /* nonzero finite values */
    int64_t flushed, subnormal, overflow;
    double flushed_frac, subnormal_frac, overflow_frac;
    double mass_lost;
} mpt_round_stats;

void mpt_exp_hist_round(const mpt_exp_hist *h, int k, mpt_round_stats *out);

/* log2 of x if x is a positive power of two that is a normal FP32 value, else INT32_MIN (the counterfactual
 * shifts are only exact for power-of-two scales). */
int32_t mpt_exp_hist_log2_exact(float x);

/* 4. Rounding error (issue 37: what underflow costs, not only how often): for FP32 values v and an integer k, the
 * relative L2 error of rounding v 2^k into F16 or BF16 (RNE, subnormals included; a value beyond the largest finite
 * becomes inf) and scaling back,
 *     ||RNE(v 2^k) 2^-k - v||_2 / ||v||_2,
 * in FP64 and exactly: v 2^k is exact in FP64, and the rounding is done once on that double (no intermediate FP32,
 * which could round twice below FP32's normal range). With k = 0 it is the error of the rounding the run did; with
 * k = -s for a loss scale S = 2^s, the error had S been 1. Flushed values count with their whole size: the error of
 * a gradient whose small values vanish is their share of the norm. The sums are kept apart so that tensors pool by
 * adding them. */
typedef struct mpt_round_err {
    double err2; /* sum (RNE(v 2^k) 2^-k - v)^2; inf when a value overflowed */
    double ref2; /* sum v^2 over the finite values */
} mpt_round_err;

/* Adds n FP32 values (host buffer; inf and NaN skipped) rounded into `target` (F16 or BF16) at shift k. */
void mpt_round_err_add(mpt_round_err *e, const float *v, int64_t n, int k, mpt_dtype target);
/* sqrt(err2 / ref2); 0 when ref2 is 0 (no nonzero value), inf after an overflow. */
double mpt_round_err_rel(const mpt_round_err *e);

/* 3. FP8 operands (issue #23; engine/amp/fp8.h): what the scaled cast into E4M3 / E5M2 does to a tensor's values.
 * For the nonzero finite values x of a host FP32 buffer, with v = x * s in FP32 (s the scale; MX: 2^(127 - c) for
 * the block's E8M0 code c, blocks of 32 along each row), counts
 *   saturated   |v| > fmax (448 or 57344): the saturating cast clamps it (the non-saturating one overflows from
 *               464 / 61440 up),
 *   flushed     v rounds to zero (mpt_f32_to_fp8),
 *   subnormal   v rounds to a nonzero subnormal of the format.
 * Fractions are of the nonzero finite values, as above. */
typedef struct mpt_fp8_range {
    int64_t nonzero, saturated, flushed, subnormal;
} mpt_fp8_range;

/* Per-tensor scale s: adds the n values x (host FP32) to *r (zero it first). */
void mpt_fp8_range_count(mpt_fp8_range *r, const float *x, int64_t n, float s, int e5m2);
/* MX: the [rows, cols] values x with the block scales of rule `rounding` (mpt_mx_rounding) along each row, each
 * block's factor times 2^k (k = -1: the scale halved, +1: doubled, 0: as cast). */
void mpt_mx_range_count(mpt_fp8_range *r, const float *x, int64_t rows, int64_t cols, int e5m2, int rounding, int k);

#endif
