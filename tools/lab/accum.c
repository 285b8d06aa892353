/* tools/lab/accum.c - recursive, pairwise, blocked and compensated summation in FP32, FP16 and BF16 accumulators, and
 * the sign test of their errors' direction (the math is in accum.h). */
#include "tools/lab/accum.h"

#include <math.h>

double mpt_accum_round(double x, mpt_dtype fmt) {
    int p, emin, emax; /* significant bits, exponent of the smallest normal, of the largest binade */
    switch (fmt) {
    case MPT_DTYPE_F16: p = 11, emin = -14, emax = 15; break;
    case MPT_DTYPE_BF16: p = 8, emin = -126, emax = 127; break;
    default: p = 24, emin = -126, emax = 127; break;
    }
    if (!isfinite(x) || x == 0.0) return x;
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    int exp = e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, exp - (p - 1)); /* the spacing of the format around x (subnormals: the smallest) */
    double r = nearbyint(x / quantum) * quantum; /* x / quantum is exact (a power of two); nearbyint rounds to even */
    double max = ldexp(2.0 - ldexp(1.0, 1 - p), emax);
    if (fabs(r) > max) return x > 0 ? INFINITY : -INFINITY;
    return r;
}

mpt_dtype mpt_accum_dtype(mpt_accum_kind k) {
    return k == MPT_ACCUM_F16 ? MPT_DTYPE_F16 : k == MPT_ACCUM_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}

const char *mpt_accum_name(mpt_accum_kind k) {
    return k == MPT_ACCUM_F16 ? "FP16" : k == MPT_ACCUM_BF16 ? "BF16" : "FP32";
}

void mpt_accum_dot(const float *p, int64_t k, double *ref, double *abs_sum, double sum[MPT_ACCUM_COUNT]) {
    double s = 0.0, comp = 0.0, a = 0.0;
    float s32 = 0.0f;
    double s16 = 0.0, sb16 = 0.0;
    for (int64_t i = 0; i < k; i++) {
        double v = p[i];
        double t = s + v; /* Neumaier's compensated sum */
        comp += fabs(s) >= fabs(v) ? (s - t) + v : (v - t) + s;
        s = t;
        a += fabs(v);
        s32 = s32 + p[i]; /* FP32 addition: correctly rounded */
        s16 = mpt_accum_round(s16 + v, MPT_DTYPE_F16);
        sb16 = mpt_accum_round(sb16 + v, MPT_DTYPE_BF16);
    }
    *ref = s + comp;
    *abs_sum = a;
    sum[MPT_ACCUM_F32] = s32;
    sum[MPT_ACCUM_F16] = s16;
    sum[MPT_ACCUM_BF16] = sb16;
}

const char *mpt_accum_method_name(mpt_accum_method m) {
    static const char *const names[MPT_ACCUM_METHOD_COUNT] = {
        [MPT_ACCUM_RECURSIVE] = "recursive", [MPT_ACCUM_PAIRWISE] = "pairwise", [MPT_ACCUM_BLOCKED] = "blocked",
        [MPT_ACCUM_KAHAN] = "Kahan"};
    _Static_assert(sizeof names / sizeof names[0] == MPT_ACCUM_METHOD_COUNT, "a name per method");
    return (unsigned)m < MPT_ACCUM_METHOD_COUNT ? names[m] : "?";
}

/* a + b rounded into fmt: for FP32 through double (a double holds the exact sum of two FP32 values, or rounds it
 * with 53 >= 2 x 24 + 2 bits, which makes the second rounding innocuous); for the 16-bit formats accum.h says why
 * one rounding of the double sum is correct. */
static double add_in(double a, double b, mpt_dtype fmt) { return mpt_accum_round(a + b, fmt); }

static double pairwise(const double *x, int64_t k, mpt_dtype fmt) {
    if (k == 1) return x[0];
    const int64_t h = k / 2;
    return add_in(pairwise(x, h, fmt), pairwise(x + h, k - h, fmt), fmt);
}

double mpt_accum_sum(const float *p, int64_t k, mpt_dtype fmt, mpt_accum_method m, int64_t block, double *scratch) {
    if (k <= 0) return 0.0;
    double s = 0.0;
    switch (m) {
    case MPT_ACCUM_RECURSIVE:
        for (int64_t i = 0; i < k; i++) s = add_in(s, p[i], fmt);
        return s;
    case MPT_ACCUM_PAIRWISE:
        for (int64_t i = 0; i < k; i++) scratch[i] = mpt_accum_round(p[i], fmt); /* the leaves, as held */
        return pairwise(scratch, k, fmt);
    case MPT_ACCUM_BLOCKED:
        if (block < 1) block = 1;
        for (int64_t b0 = 0; b0 < k; b0 += block) {
            double t = 0.0;
            for (int64_t i = b0; i < k && i < b0 + block; i++) t = add_in(t, p[i], fmt);
            s = add_in(s, t, fmt);
        }
        return s;
    case MPT_ACCUM_KAHAN: {
        double c = 0.0;
        for (int64_t i = 0; i < k; i++) {
            const double y = add_in(p[i], -c, fmt), t = add_in(s, y, fmt);
            c = add_in(add_in(t, -s, fmt), -y, fmt);
            s = t;
        }
        return s;
    }
    case MPT_ACCUM_METHOD_COUNT: break;
    }
    return NAN;
}

double mpt_accum_exact(const float *p, int64_t k, double *abs_sum, float *sum32) {
    double s = 0.0, comp = 0.0, a = 0.0;
    float s32 = 0.0f;
    for (int64_t i = 0; i < k; i++) {
        const double v = p[i], t = s + v;
        comp += fabs(s) >= fabs(v) ? (s - t) + v : (v - t) + s;
        s = t;
        a += fabs(v);
        s32 = s32 + p[i];
    }
    *abs_sum = a;
    *sum32 = s32;
    return s + comp;
}

double mpt_accum_sign_test(int64_t k, int64_t n) {
    if (n <= 0) return 1.0;
    const int64_t hi = k > n - k ? k : n - k;
    /* P(X >= hi) for X ~ Binomial(n, 1/2), its terms from lgamma (exact to rounding; terms below 2^-1074 are 0) */
    const double ln_all = (double)n * log(2.0), lg_n = lgamma((double)n + 1.0);
    double tail = 0.0;
    for (int64_t i = hi; i <= n; i++)
        tail += exp(lg_n - lgamma((double)i + 1.0) - lgamma((double)(n - i) + 1.0) - ln_all);
    const double p = 2.0 * tail;
    return p < 1.0 ? p : 1.0;
}

void mpt_accum_bias_of(const double *err, int64_t n, mpt_accum_bias *out) {
    mpt_accum_bias b = {.n = n};
    double sum = 0.0, sum_abs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (err[i] < 0) b.toward_zero++;
        else if (err[i] > 0) b.away++;
        else b.exact++;
        sum += err[i];
        sum_abs += fabs(err[i]);
    }
    const int64_t signed_n = b.toward_zero + b.away;
    b.share_toward = signed_n ? (double)b.toward_zero / (double)signed_n : NAN;
    b.p_sign = mpt_accum_sign_test(b.toward_zero, signed_n);
    b.mean_ratio = sum_abs > 0.0 ? sum / sum_abs : NAN;
    *out = b;
}
