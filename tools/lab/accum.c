/* tools/lab/accum.c - recursive summation in FP32, FP16 and BF16 accumulators (the math is in accum.h). */
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
