/*
 * tools/formats.c - a number in FP32, TF32, BF16, FP16, FP8 E4M3/E5M2 and E8M0 through the engine's
 * conversions (engine/numerics.h), and each format's constants read back from its bit patterns
 * (tools/formats.h).
 */
#include <math.h>
#include <stdio.h>

#include "engine/numerics.h"
#include "tools/formats.h"

typedef struct fmt_def {
    const char *name;
    int sign_bits, exp_bits, man_bits, has_inf;
    uint32_t max_bits, min_normal_bits, min_sub_bits; /* patterns of the constants, right-aligned */
} fmt_def;

static const fmt_def defs[MPT_FMT_COUNT] = {
    [MPT_FMT_FP32] = {"FP32", 1, 8, 23, 1, 0x7f7fffffu, 0x00800000u, 0x00000001u},
    [MPT_FMT_TF32] = {"TF32", 1, 8, 10, 1, 0x3fbffu, 0x00400u, 0x00001u},
    [MPT_FMT_BF16] = {"BF16", 1, 8, 7, 1, 0x7f7fu, 0x0080u, 0x0001u},
    [MPT_FMT_FP16] = {"FP16", 1, 5, 10, 1, 0x7bffu, 0x0400u, 0x0001u},
    [MPT_FMT_E4M3] = {"FP8 E4M3", 1, 4, 3, 0, 0x7eu, 0x08u, 0x01u},
    [MPT_FMT_E5M2] = {"FP8 E5M2", 1, 5, 2, 1, 0x7bu, 0x04u, 0x01u},
    [MPT_FMT_E8M0] = {"E8M0", 0, 8, 0, 0, 0xfeu, 0x00u, 0x00u},
};

/* A pattern's value, by the engine's decoders. */
static double decode(mpt_fmt f, uint32_t bits) {
    switch (f) {
    case MPT_FMT_FP32: return mpt_bits_f32(bits);
    case MPT_FMT_TF32: return mpt_bits_f32(bits << 13);
    case MPT_FMT_BF16: return mpt_bf16_to_f32((uint16_t)bits);
    case MPT_FMT_FP16: return mpt_f16_to_f32((uint16_t)bits);
    case MPT_FMT_E4M3: return mpt_e4m3_to_f32((uint8_t)bits);
    case MPT_FMT_E5M2: return mpt_e5m2_to_f32((uint8_t)bits);
    case MPT_FMT_E8M0: return mpt_e8m0_to_f32((uint8_t)bits);
    case MPT_FMT_COUNT: break;
    }
    return NAN;
}

/* FP32 -> the format's pattern, by the engine's rounding functions. */
static uint32_t encode(mpt_fmt f, float v, int sat) {
    switch (f) {
    case MPT_FMT_FP32: return mpt_f32_bits(v);
    case MPT_FMT_TF32: return mpt_f32_bits(mpt_round_tf32(v)) >> 13;
    case MPT_FMT_BF16: return mpt_f32_to_bf16(v);
    case MPT_FMT_FP16: return mpt_f32_to_f16(v);
    case MPT_FMT_E4M3: return sat ? mpt_f32_to_e4m3_sat(v) : mpt_f32_to_e4m3(v);
    case MPT_FMT_E5M2: return sat ? mpt_f32_to_e5m2_sat(v) : mpt_f32_to_e5m2(v);
    case MPT_FMT_E8M0: return mpt_f32_to_e8m0(v);
    case MPT_FMT_COUNT: break;
    }
    return 0;
}

void mpt_fmt_describe(mpt_fmt f, mpt_fmt_info *out) {
    const fmt_def *d = &defs[f];
    out->name = d->name;
    out->sign_bits = d->sign_bits;
    out->exp_bits = d->exp_bits;
    out->man_bits = d->man_bits;
    out->has_inf = d->has_inf;
    out->max_finite = decode(f, d->max_bits);
    out->min_normal = decode(f, d->min_normal_bits);
    out->min_subnormal = decode(f, d->min_sub_bits);
    out->unit_roundoff = ldexp(1.0, -(d->man_bits + 1));
    out->digits = (d->man_bits + 1) * log10(2.0);
}

void mpt_fmt_convert(mpt_fmt f, double x, int fp8_saturate, mpt_fmt_value *out) {
    const fmt_def *d = &defs[f];
    uint32_t bits = encode(f, (float)x, fp8_saturate);
    double v = decode(f, bits);
    uint32_t exp_field = (bits >> d->man_bits) & ((1u << d->exp_bits) - 1u);
    uint32_t man_field = bits & ((1u << d->man_bits) - 1u);
    out->bits = bits;
    out->value = v;
    out->unrepresentable = f == MPT_FMT_E8M0 && !(x > 0.0);
    /* saturated: the non-saturating conversion of the same FP32 value overflows */
    out->saturated = fp8_saturate && (f == MPT_FMT_E4M3 || f == MPT_FMT_E5M2) &&
                     !isfinite(decode(f, encode(f, (float)x, 0)));
    out->overflow = (!isfinite(v) && !out->unrepresentable) || out->saturated;
    out->abs_err = !isfinite(v) ? INFINITY : fabs(v - x);
    out->rel_err = x != 0.0 ? out->abs_err / fabs(x) : NAN;
    out->exact = v == x;
    out->flushed = x != 0.0 && v == 0.0;
    out->subnormal = d->man_bits > 0 && exp_field == 0 && man_field != 0;
}

const char *mpt_fmt_bits_text(mpt_fmt f, uint32_t bits, char *buf, size_t len) {
    const fmt_def *d = &defs[f];
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
