/*
 * tools/lab/accum.h - the arithmetic of the lesson `accumulation`: one dot product's products summed left to right
 * (recursive summation) in an accumulator of FP64, FP32, FP16 or BF16, rounding to nearest even after every
 * addition, and the error of each sum against an exact one.
 *
 * The products are exact FP32 values (a product of two FP16 operands has at most 22 significant bits, so FP32 holds
 * it exactly, as Tensor Cores compute it). An accumulator of FP16 or BF16 holds s, a value of that format; the sum
 * s + p is exact in FP64 whenever |p| and |s| are within 2^29 of each other, and otherwise the smaller term lies
 * far below half an ulp of the larger in the 16-bit format, so rounding the FP64 sum once to the format gives
 * the correctly rounded 16-bit sum either way (mpt_accum_round rounds a double to the format directly, without
 * passing through FP32, which could round twice). The reference is the FP64 sum with Neumaier's compensation
 * (its error is below 2^-100 of sum |p| for the lengths used here).
 *
 * The bound that goes with it (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 4.2): the
 * computed sum of K terms satisfies |s_hat - s| <= gamma_{K-1} sum |p_i|, gamma_n = n u / (1 - n u), for n u < 1,
 * u the accumulator's unit roundoff (FP32 2^-24, FP16 2^-11, BF16 2^-8); so the error relative to sum |p| is at
 * most about K u. Rounding errors of random sign typically add up like sqrt(K) u (Higham and Mary 2019,
 * "A new approach to probabilistic rounding error analysis").
 */
#ifndef MPT_TOOLS_LAB_ACCUM_H
#define MPT_TOOLS_LAB_ACCUM_H

#include <stdint.h>

#include "engine/dtype.h"

/* x rounded to nearest even into `fmt` (MPT_DTYPE_F32, F16 or BF16), returned as a double: subnormals of the
 * format included, magnitudes that round beyond its largest finite value become +-inf, NaN stays NaN. */
double mpt_accum_round(double x, mpt_dtype fmt);

/* The accumulators of mpt_accum_dot, in this order. */
typedef enum mpt_accum_kind { MPT_ACCUM_F32 = 0, MPT_ACCUM_F16, MPT_ACCUM_BF16, MPT_ACCUM_COUNT } mpt_accum_kind;

/* The format and name ("FP32", ...) of an accumulator. */
mpt_dtype mpt_accum_dtype(mpt_accum_kind k);
const char *mpt_accum_name(mpt_accum_kind k);

/* One dot product summed from its k products p[0..k) (exact FP32 values): ref receives the exact sum (compensated
 * FP64), abs_sum the sum of |p_i|, and sum[MPT_ACCUM_COUNT] the sum in each accumulator, rounded after every
 * addition, starting from 0. */
void mpt_accum_dot(const float *p, int64_t k, double *ref, double *abs_sum, double sum[MPT_ACCUM_COUNT]);

/* The summation orders and algorithms of the lesson, each run in one accumulator format (every operation rounded to
 * nearest even into it, as mpt_accum_round does):
 *   RECURSIVE  s = ((p0 + p1) + p2) + ...: the left-to-right sum of mpt_accum_dot; error bound (K - 1) u sum |p|.
 *   PAIRWISE   the halves summed recursively, then added (a balanced tree): bound about log2(K) u sum |p|
 *              (Higham, section 4.2).
 *   BLOCKED    blocks of `block` consecutive products summed left to right, then the block sums left to right: what
 *              a blocked GEMM does along K (cuBLAS and OpenBLAS split K into panels and add the panels' partial sums;
 *              Tensor Cores add blocks of products into the accumulator): bound about (block + K / block) u sum |p|.
 *   KAHAN      compensated summation (Kahan 1965): y = p - c; t = s + y; c = (t - s) - y; s = t, every operation
 *              rounded in the format: bound about 2u sum |p| + O(K u^2) (Higham, section 4.3), independent of K to
 *              first order.
 * Sources: N. J. Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., chapter 4; Blanchard, Higham
 * and Mary 2020, "A class of fast and accurate summation algorithms" (blocked summation). */
typedef enum mpt_accum_method {
    MPT_ACCUM_RECURSIVE = 0,
    MPT_ACCUM_PAIRWISE,
    MPT_ACCUM_BLOCKED,
    MPT_ACCUM_KAHAN,
    MPT_ACCUM_METHOD_COUNT
} mpt_accum_method;

/* "recursive", "pairwise", "blocked", "Kahan". */
const char *mpt_accum_method_name(mpt_accum_method m);

/* The sum of p[0..k) by method m in the accumulator of format fmt (MPT_DTYPE_F32, F16 or BF16); block: the block
 * length of MPT_ACCUM_BLOCKED (>= 1; ignored by the others). scratch: k doubles for PAIRWISE (may be NULL for the
 * others). */
double mpt_accum_sum(const float *p, int64_t k, mpt_dtype fmt, mpt_accum_method m, int64_t block, double *scratch);

/* The exact sum of p[0..k) (k >= 0): FP64 with Neumaier's compensation, as mpt_accum_dot's ref; sum |p_i| into
 * *abs_sum and the FP32 recursive sum (IEEE round to nearest even after every addition, from +0: mpt_accum_dot's
 * sum[MPT_ACCUM_F32]) into *sum32, for callers that need no 16-bit accumulator. */
double mpt_accum_exact(const float *p, int64_t k, double *abs_sum, float *sum32);

/* ---- the direction of summation errors --------------------------------------------------------------------------
 * Rounding to nearest errs up and down alike; truncation (round toward zero, as Tensor Cores' block FMAs do: the
 * aligned terms and the block's sum, kernels/cpu/tc_accum.h) only ever shrinks a magnitude. Over many dot products the
 * signed error sign(exact) (sum - exact) then is negative far more often than positive. The test of "more often than
 * chance" is the sign test: under errors of either sign with probability 1/2 (and zero errors set aside), the count of
 * negative ones among n is Binomial(n, 1/2); its two-sided p-value is min(1, 2 P(X >= max(k, n - k))), summed exactly
 * (any statistics text; e.g. Conover, Practical Nonparametric Statistics, 3rd ed., section 3.4). */

/* The two-sided sign test's p-value of k outcomes of one sign among n (0 <= k <= n; n = 0 gives 1). */
double mpt_accum_sign_test(int64_t k, int64_t n);

/* The direction of n errors err[i] = sign(exact_i) (sum_i - exact_i), each in any unit (divided by sum |p| or not:
 * only signs and the mean ratio are read). */
typedef struct mpt_accum_bias {
    int64_t n;           /* errors */
    int64_t toward_zero; /* err < 0: the computed sum smaller in magnitude than the exact one (or of the other sign) */
    int64_t away;        /* err > 0 */
    int64_t exact;       /* err == 0 */
    double share_toward; /* toward_zero / (toward_zero + away); NAN when every error is 0 */
    double p_sign;       /* mpt_accum_sign_test(toward_zero, toward_zero + away) */
    double mean_ratio;   /* mean err / mean |err|, in [-1, 1]: -1 when every error shrinks the magnitude, about 0 for
                          * errors of either sign alike; NAN when every error is 0 */
} mpt_accum_bias;

void mpt_accum_bias_of(const double *err, int64_t n, mpt_accum_bias *out);

#endif
