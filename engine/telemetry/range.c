/* engine/telemetry/range.c - stored-range counters and the rounding histogram (see range.h for the math). */
#include "engine/telemetry/range.h"

#include <math.h>
#include <string.h>

#include "engine/status.h"

/* Exponent-field layout of a float dtype's format, from its row (engine/dtype.h), on |x|'s bit pattern. */
typedef struct fmt_bits {
    uint32_t exp_mask, man_mask, max_finite_abs;
} fmt_bits;

static const mpt_format_desc *float_format(mpt_dtype t) {
    MPT_ASSERTF(mpt_dtype_is_float(t), "range: dtype %s is not a float format", mpt_dtype_name(t));
    return mpt_format_info((mpt_format)mpt_dtype_info(t)->format);
}

static fmt_bits fmt_of(mpt_dtype t) {
    const mpt_format_desc *d = float_format(t);
    const uint32_t man = (1u << d->man_bits) - 1u;
    return (fmt_bits){((1u << d->exp_bits) - 1u) << d->man_bits, man, d->max_bits};
}

static void range_one(mpt_range *r, uint32_t a, const fmt_bits *f) {
    uint32_t e = a & f->exp_mask;
    if (a == 0) r->zero++;
    else if (e == 0) r->subnormal++;
    if (e == f->exp_mask) {
        r->nonfinite++;
        if ((a & f->man_mask) == 0) r->at_max++; /* inf */
    } else if (a >= f->max_finite_abs) {
        r->at_max++;
    }
}

void mpt_range_count(mpt_range *r, const void *p, mpt_dtype dtype, int64_t n) {
    fmt_bits f = fmt_of(dtype);
    if (mpt_dtype_size(dtype) == 4) {
        const uint32_t *u = p;
        for (int64_t i = 0; i < n; i++) range_one(r, u[i] & 0x7fffffffu, &f);
    } else {
        const uint16_t *u = p;
        for (int64_t i = 0; i < n; i++) range_one(r, u[i] & 0x7fffu, &f);
    }
    r->n += n;
}

/* ---- the rounding histogram ------------------------------------------------------------------------- */

typedef struct fmt_exps {
    int esub, emin, emax; /* binary exponents: smallest subnormal, smallest normal, largest finite binade */
    int b;                /* explicit significand bits */
} fmt_exps;

static fmt_exps exps_of(mpt_dtype t) {
    const mpt_format_desc *d = float_format(t);
    return (fmt_exps){d->emin - d->man_bits, d->emin, d->emax, d->man_bits};
}

void mpt_exp_hist_init(mpt_exp_hist *h, mpt_dtype target) {
    MPT_ASSERTF(target == MPT_DTYPE_F16 || target == MPT_DTYPE_BF16,
                "exp_hist: target %s is not F16 or BF16", mpt_dtype_name(target));
    memset(h, 0, sizeof *h);
    h->target = target;
}

/* Whether the top bits+1 bits of a 23-bit fraction are all ones (RNE to `bits` bits carries out). */
static int carries(uint32_t frac, int bits) {
    int keep = bits + 1;
    uint32_t top = frac >> (23 - keep);
    return top == (1u << keep) - 1u;
}

void mpt_exp_hist_add(mpt_exp_hist *h, const float *v, int64_t n) {
    const int b = exps_of(h->target).b;
    for (int64_t i = 0; i < n; i++) {
        uint32_t a = mpt_f32_bits(v[i]) & 0x7fffffffu;
        if (a == 0) {
            h->zero++;
            continue;
        }
        uint32_t ex = a >> 23, frac = a & 0x7fffffu;
        if (ex == 0xffu) {
            h->nonfinite++;
            continue;
        }
        int e;
        if (ex == 0) { /* FP32 subnormal: frac * 2^-149; normalise so the leading one is implicit */
            int p = 31 - __builtin_clz(frac); /* position of the leading one, 0..22 */
            e = p + MPT_EXP_HIST_EMIN;
            frac = (frac << (23 - p)) & 0x7fffffu;
        } else {
            e = (int)ex - 127;
        }
        int idx = e - MPT_EXP_HIST_EMIN;
        h->count[idx]++;
        if (frac == 0) h->pow2[idx]++;
        if (carries(frac, b)) h->carry[idx]++;
        if (carries(frac, b - 1)) h->carry_sub[idx]++;
        h->mass[idx] += (double)mpt_bits_f32(a);
    }
    h->n += n;
}

void mpt_exp_hist_merge(mpt_exp_hist *dst, const mpt_exp_hist *src) {
    MPT_ASSERTF(dst->target == src->target, "exp_hist_merge: targets %s and %s", mpt_dtype_name(dst->target),
                mpt_dtype_name(src->target));
    dst->n += src->n;
    dst->zero += src->zero;
    dst->nonfinite += src->nonfinite;
    for (int i = 0; i < MPT_EXP_HIST_BINS; i++) {
        dst->count[i] += src->count[i];
        dst->pow2[i] += src->pow2[i];
        dst->carry[i] += src->carry[i];
        dst->carry_sub[i] += src->carry_sub[i];
        dst->mass[i] += src->mass[i];
    }
}

void mpt_exp_hist_round(const mpt_exp_hist *h, int k, mpt_round_stats *out) {
    const fmt_exps f = exps_of(h->target);
    memset(out, 0, sizeof *out);
    double mass = 0.0, lost = 0.0;
    for (int idx = 0; idx < MPT_EXP_HIST_BINS; idx++) {
        int64_t c = h->count[idx];
        if (c == 0) continue;
        int e = idx + MPT_EXP_HIST_EMIN, es = e + k;
        out->nonzero += c;
        mass += h->mass[idx];
        if (es < f.esub - 1) {
            out->flushed += c;
            lost += h->mass[idx];
        } else if (es == f.esub - 1) {
            out->flushed += h->pow2[idx]; /* exactly half the smallest subnormal: ties to the even zero */
            lost += (double)h->pow2[idx] * __builtin_ldexp(1.0, e);
            out->subnormal += c - h->pow2[idx];
        } else if (es <= f.emin - 2) {
            out->subnormal += c;
        } else if (es == f.emin - 1) {
            out->subnormal += c - h->carry_sub[idx]; /* the rest rounds up to the smallest normal */
        } else if (es > f.emax) {
            out->overflow += c;
        } else if (es == f.emax) {
            out->overflow += h->carry[idx];
        }
    }
    if (out->nonzero > 0) {
        out->flushed_frac = (double)out->flushed / (double)out->nonzero;
        out->subnormal_frac = (double)out->subnormal / (double)out->nonzero;
        out->overflow_frac = (double)out->overflow / (double)out->nonzero;
    }
    out->mass_lost = mass > 0.0 ? lost / mass : 0.0;
}

int32_t mpt_exp_hist_log2_exact(float x) {
    uint32_t u = mpt_f32_bits(x);
    uint32_t ex = (u >> 23) & 0xffu;
    if ((u >> 31) || ex == 0 || ex == 0xffu || (u & 0x7fffffu)) return INT32_MIN;
    return (int32_t)ex - 127;
}

/* ---- the rounding error --------------------------------------------------------------------------------------- */

/* x (a double) rounded to nearest even into the 16-bit format f, as a double: its spacing around x is 2^(e - b)
 * with e the binade of x clamped at emin (subnormals: the smallest spacing), so x / spacing is exact and nearbyint
 * rounds it to even in the default rounding mode; beyond the largest finite value, inf. */
static double round_to(double x, const fmt_exps *f) {
    if (x == 0.0) return x;
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    const int ex = e - 1 < f->emin ? f->emin : e - 1;
    const double q = ldexp(1.0, ex - f->b);
    const double r = nearbyint(x / q) * q;
    const double max = ldexp(2.0 - ldexp(1.0, -f->b), f->emax);
    return fabs(r) > max ? copysign(INFINITY, x) : r;
}

void mpt_round_err_add(mpt_round_err *e, const float *v, int64_t n, int k, mpt_dtype target) {
    MPT_ASSERTF(target == MPT_DTYPE_F16 || target == MPT_DTYPE_BF16, "round_err: target %s is not F16 or BF16",
                mpt_dtype_name(target));
    const fmt_exps f = exps_of(target);
    double err2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)v[i];
        if (!isfinite(x)) continue;
        const double r = ldexp(round_to(ldexp(x, k), &f), -k);
        const double d = r - x;
        err2 += d * d;
        ref2 += x * x;
    }
    e->err2 += err2;
    e->ref2 += ref2;
}

double mpt_round_err_rel(const mpt_round_err *e) {
    if (isinf(e->err2)) return INFINITY;
    return e->ref2 > 0.0 ? sqrt(e->err2 / e->ref2) : 0.0;
}

/* ---- FP8 operands ------------------------------------------------------------------------------------------ */

static void fp8_one(mpt_fp8_range *r, float x, float f, int e5m2) {
    if (x == 0.0f || !mpt_is_finite(x)) return;
    r->nonzero++;
    const float v = x * f, fmax = e5m2 ? MPT_E5M2_MAX : MPT_E4M3_MAX;
    if (fabsf(v) > fmax) {
        r->saturated++;
        return;
    }
    const uint8_t q = mpt_f32_to_fp8(v, e5m2, 1) & 0x7fu;
    if (q == 0) r->flushed++;
    else if ((q >> (e5m2 ? 2 : 3)) == 0) r->subnormal++;
}

void mpt_fp8_range_count(mpt_fp8_range *r, const float *x, int64_t n, float s, int e5m2) {
    for (int64_t i = 0; i < n; i++) fp8_one(r, x[i], s, e5m2);
}

void mpt_mx_range_count(mpt_fp8_range *r, const float *x, int64_t rows, int64_t cols, int e5m2, int rounding, int k) {
    for (int64_t row = 0; row < rows; row++)
        for (int64_t c0 = 0; c0 < cols; c0 += 32) {
            const int64_t c1 = c0 + 32 < cols ? c0 + 32 : cols;
            const float *b = x + row * cols;
            float m = 0.0f;
            int nan = 0;
            for (int64_t c = c0; c < c1; c++) {
                const float a = fabsf(b[c]);
                nan |= a != a;
                m = a > m ? a : m;
            }
            const uint8_t code = mpt_mx_scale_code(nan ? NAN : m, e5m2, rounding);
            if (code == MPT_E8M0_NAN) continue;
            int32_t e = 127 - (int32_t)code + k;
            const float f = e > 127 ? 0x1p127f : mpt_pow2f(e < -127 ? -127 : e);
            for (int64_t c = c0; c < c1; c++) fp8_one(r, b[c], f, e5m2);
        }
}
