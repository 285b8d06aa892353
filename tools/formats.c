/*
 * tools/formats.c - a number in FP32, TF32, BF16, FP16, FP8 E4M3/E5M2 and E8M0, and in INT8 / INT4 at a scale, through
 * the engine's conversions (engine/numerics.h); each format's constants are its row in engine/dtype.c
 * (tools/formats.h).
 */
#include <math.h>
#include <stdio.h>

#include "engine/numerics.h"
#include "tools/formats.h"

double mpt_fmt_decode(mpt_format f, uint32_t bits) {
    switch (f) {
    case MPT_FORMAT_FP32: return mpt_bits_f32(bits);
    case MPT_FORMAT_TF32: return mpt_bits_f32(bits << 13);
    case MPT_FORMAT_BF16: return mpt_bf16_to_f32((uint16_t)bits);
    case MPT_FORMAT_FP16: return mpt_f16_to_f32((uint16_t)bits);
    case MPT_FORMAT_E4M3: return mpt_e4m3_to_f32((uint8_t)bits);
    case MPT_FORMAT_E5M2: return mpt_e5m2_to_f32((uint8_t)bits);
    case MPT_FORMAT_E8M0: return mpt_e8m0_to_f32((uint8_t)bits);
    case MPT_FORMAT_COUNT: break;
    }
    return NAN;
}

/* FP32 -> the format's pattern, by the engine's rounding functions. */
static uint32_t encode(mpt_format f, float v, int sat) {
    switch (f) {
    case MPT_FORMAT_FP32: return mpt_f32_bits(v);
    case MPT_FORMAT_TF32: return mpt_f32_bits(mpt_round_tf32(v)) >> 13;
    case MPT_FORMAT_BF16: return mpt_f32_to_bf16(v);
    case MPT_FORMAT_FP16: return mpt_f32_to_f16(v);
    case MPT_FORMAT_E4M3: return sat ? mpt_f32_to_e4m3_sat(v) : mpt_f32_to_e4m3(v);
    case MPT_FORMAT_E5M2: return sat ? mpt_f32_to_e5m2_sat(v) : mpt_f32_to_e5m2(v);
    case MPT_FORMAT_E8M0: return mpt_f32_to_e8m0(v);
    case MPT_FORMAT_COUNT: break;
    }
    return 0;
}

double mpt_fmt_digits(mpt_format f) { return (mpt_format_info(f)->man_bits + 1) * log10(2.0); }

void mpt_fmt_convert(mpt_format f, double x, int fp8_saturate, mpt_fmt_value *out) {
    const mpt_format_desc *d = mpt_format_info(f);
    uint32_t bits = encode(f, (float)x, fp8_saturate);
    double v = mpt_fmt_decode(f, bits);
    uint32_t exp_field = (bits >> d->man_bits) & ((1u << d->exp_bits) - 1u);
    uint32_t man_field = bits & ((1u << d->man_bits) - 1u);
    out->bits = bits;
    out->value = v;
    /* what this format rounds: the double x for FP32, its FP32 value for the others */
    const double src = f == MPT_FORMAT_FP32 ? x : (double)(float)x;
    const int e8m0 = d->special == MPT_SPECIAL_E8M0;
    out->unrepresentable = e8m0 && !(x > 0.0);
    /* saturated: the non-saturating conversion of the same FP32 value overflows; E8M0's conversion always clamps
     * (its 0xff is NaN, the next power of two 2^128 has no code): past the midpoint 1.5 * 2^127 it is clamped */
    out->saturated = (fp8_saturate && d->saturates && !isfinite(mpt_fmt_decode(f, encode(f, (float)x, 0)))) ||
                     (e8m0 && isfinite(src) && src > 1.5 * d->max_finite);
    /* E8M0 below the midpoint 0.75 * 2^-127 between 2^-128 (no code) and its smallest code 2^-127 */
    out->raised = e8m0 && x > 0.0 && src < 0.75 * d->min_normal;
    out->overflow = (!isfinite(v) && !out->unrepresentable) || out->saturated;
    out->abs_err = !isfinite(v) ? INFINITY : fabs(v - x);
    out->rel_err = x != 0.0 ? out->abs_err / fabs(x) : NAN;
    out->exact = v == x;
    out->flushed = x != 0.0 && v == 0.0;
    out->flush_tie = out->flushed && d->has_subnormals && fabs(src) == 0.5 * d->min_subnormal;
    out->subnormal = d->man_bits > 0 && exp_field == 0 && man_field != 0;
}

const char *mpt_fmt_bits_text(mpt_format f, uint32_t bits, char *buf, size_t len) {
    const mpt_format_desc *d = mpt_format_info(f);
    int total = d->sign_bits + d->exp_bits + d->man_bits;
    size_t k = 0;
    for (int i = total - 1; i >= 0 && k + 4 < len; i--) {
        buf[k++] = (char)('0' + ((bits >> i) & 1u));
        if ((d->sign_bits && i == total - 1) || (d->man_bits && i == d->man_bits)) {
            buf[k++] = ' ';
            buf[k++] = '|';
            buf[k++] = ' ';
        }
    }
    buf[k < len ? k : len - 1] = '\0';
    return buf;
}

/* ---- integer formats ------------------------------------------------------------------------------------------- */

float mpt_fmt_int_scale(mpt_int_format f, const double *xs, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf((float)xs[i]));
    return mpt_int_scale_from_amax(amax, mpt_int_format_info(f)->qmax);
}

void mpt_fmt_int_convert(mpt_int_format f, double x, float s, mpt_fmt_int_value *out) {
    const mpt_int_format_desc *d = mpt_int_format_info(f);
    const float xf = (float)x;
    out->ratio = xf / s;
    out->q = mpt_int_quantize(xf, s, d->qmax);
    out->bits = (uint32_t)out->q & ((1u << d->bits) - 1u);
    out->value = mpt_int_dequantize(out->q, s);
    out->abs_err = fabs(out->value - x);
    out->rel_err = x != 0.0 ? out->abs_err / fabs(x) : NAN;
    out->exact = out->value == x;
    const float r = rintf(out->ratio);
    out->tie = fabsf(out->ratio - truncf(out->ratio)) == 0.5f;
    out->clamped = fabsf(r) > (float)d->qmax;
    out->zeroed = x != 0.0 && out->q == 0;
}

const char *mpt_fmt_int_bits_text(mpt_int_format f, uint32_t bits, char *buf, size_t len) {
    const int n = mpt_int_format_info(f)->bits;
    size_t k = 0;
    for (int i = n - 1; i >= 0 && k + 1 < len; i--) buf[k++] = (char)('0' + ((bits >> i) & 1u));
    buf[k < len ? k : len - 1] = '\0';
    return buf;
}
