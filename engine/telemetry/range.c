/* engine/telemetry/range.c - stored-range counters and the rounding histogram (see range.h for the math). */
#include "engine/telemetry/range.h"

#include <math.h>
#include <string.h>

#include "engine/status.h"

static const mpt_format_desc *float_format(mpt_dtype t) {
    MPT_ASSERTF(mpt_dtype_is_float(t), "range: dtype %s is not a float format", mpt_dtype_name(t));
    return mpt_format_info((mpt_format)mpt_dtype_info(t)->format);
}

mpt_range_fmt mpt_range_fmt_of_dtype(mpt_dtype t) {
    const mpt_format_desc *d = float_format(t);
    return mpt_range_fmt_of(d->exp_bits, d->man_bits, d->max_bits);
}

static void range_one(mpt_range *r, uint32_t a, mpt_range_fmt f) {
    const unsigned c = mpt_range_classify(a, f);
    r->zero += (c & MPT_RANGE_ZERO) != 0;
    r->subnormal += (c & MPT_RANGE_SUBNORMAL) != 0;
    r->at_max += (c & MPT_RANGE_AT_MAX) != 0;
    r->nonfinite += (c & MPT_RANGE_NONFINITE) != 0;
}

void mpt_range_count(mpt_range *r, const void *p, mpt_dtype dtype, int64_t n) {
    const mpt_range_fmt f = mpt_range_fmt_of_dtype(dtype);
    if (mpt_dtype_size(dtype) == 4) {
        const uint32_t *u = p;
        for (int64_t i = 0; i < n; i++) range_one(r, u[i] & 0x7fffffffu, f);
    } else {
        const uint16_t *u = p;
        for (int64_t i = 0; i < n; i++) range_one(r, u[i] & 0x7fffu, f);
    }
    r->n += n;
}

/* ---- the rounding histogram ------------------------------------------------------------------------- */

mpt_round_fmt mpt_round_fmt_of_dtype(mpt_dtype t) {
    const mpt_format_desc *d = float_format(t);
    return mpt_round_fmt_of(d->emin, d->emax, d->man_bits);
}

void mpt_exp_hist_init(mpt_exp_hist *h, mpt_dtype target) {
    MPT_ASSERTF(target == MPT_DTYPE_F16 || target == MPT_DTYPE_BF16,
                "exp_hist: target %s is not F16 or BF16", mpt_dtype_name(target));
    memset(h, 0, sizeof *h);
    h->target = target;
}

void mpt_exp_hist_add(mpt_exp_hist *h, const float *v, int64_t n) {
    const int b = mpt_round_fmt_of_dtype(h->target).b;
    for (int64_t i = 0; i < n; i++) {
        mpt_exp_class c;
        const int k = mpt_exp_classify(v[i], b, &c);
        if (k == MPT_EXP_ZERO) {
            h->zero++;
            continue;
        }
        if (k == MPT_EXP_NONFINITE) {
            h->nonfinite++;
            continue;
        }
        h->count[c.idx]++;
        h->pow2[c.idx] += c.pow2;
        h->carry[c.idx] += c.carry;
        h->carry_sub[c.idx] += c.carry_sub;
        h->mass[c.idx] += (double)c.abs;
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
    const mpt_round_fmt f = mpt_round_fmt_of_dtype(h->target);
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

void mpt_round_err_add(mpt_round_err *e, const float *v, int64_t n, int k, mpt_dtype target) {
    MPT_ASSERTF(target == MPT_DTYPE_F16 || target == MPT_DTYPE_BF16, "round_err: target %s is not F16 or BF16",
                mpt_dtype_name(target));
    const mpt_round_fmt f = mpt_round_fmt_of_dtype(target);
    double err2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)v[i];
        if (!isfinite(x)) continue;
        const double d = mpt_round_err_one(v[i], k, f);
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
