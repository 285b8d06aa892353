/*
 * tools/formats.h - what `mptrain formats` shows: a number in each floating-point format the engine uses
 * (FP32, TF32, BF16, FP16, the OCP FP8 formats E4M3 and E5M2, and the MX block-scale format E8M0), and in the integer
 * formats INT8 and INT4 with a scale (symmetric: q = clamp(rint(x / s), -qmax, qmax), x' = q s), through the
 * engine's own conversion functions (engine/numerics.h: the ones the CPU loops and the CUDA kernels call), so
 * what it shows is what training does. FP8 conversions saturate (CUDA __NV_SATFINITE, training's default) or
 * not (--fp8-saturate off): mpt_fmt_convert takes the switch.
 *
 * A value given as a decimal number becomes FP32 first (C's double -> float conversion, round to nearest
 * even), as every value does in the engine; the narrower formats are rounded from that FP32 value. Errors are
 * measured against the decimal number itself (as a double).
 */
#ifndef MPT_TOOLS_FORMATS_H
#define MPT_TOOLS_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/dtype.h"

/* The formats are engine/dtype.h's rows (mpt_format, mpt_format_info): FP32, TF32, BF16, FP16, E4M3, E5M2, E8M0. */

/* The value a right-aligned bit pattern of format f holds, by engine/numerics.h's decoders (TF32: its 19 bits, the
 * top of an FP32). */
double mpt_fmt_decode(mpt_format f, uint32_t bits);

/* Decimal digits a format's significand carries: p * log10(2), p = man_bits + 1. */
double mpt_fmt_digits(mpt_format f);

/* What became of a value in one format. */
typedef struct mpt_fmt_value {
    uint32_t bits;     /* the format's bit pattern, right-aligned (TF32: its 19 bits, the top of an FP32) */
    double value;      /* what the pattern holds (inf/NaN as such) */
    double abs_err;    /* |value - x| (inf on overflow) */
    double rel_err;    /* abs_err / |x| (NAN for x = 0) */
    int exact;         /* value == x */
    int subnormal;     /* a nonzero subnormal of the format */
    int flushed;       /* x != 0 became 0 */
    int flush_tie;     /* flushed from exactly half the smallest subnormal (x as FP32; for FP32 itself, the double
                        * x): a tie between 0 and the smallest subnormal, whose odd last bit loses to 0's even one */
    int overflow;      /* a finite x became inf, or NaN (E4M3, E8M0: no inf); saturated FP8 and E8M0 included */
    int saturated;     /* FP8 with saturation: x rounded past the largest finite value and became +-max; E8M0: x
                        * (as FP32, finite) above 1.5 * 2^127, nearer 2^128 than 2^127, became 2^127 (code 0xfe) */
    int raised;        /* E8M0: 0 < x but x as FP32 below 0.75 * 2^-127, nearer 2^-128 than 2^-127 (or 0 in
                        * FP32), became the smallest code 2^-127: E8M0 has no zero */
    int unrepresentable; /* E8M0: x <= 0 (no sign, no zero): NaN for x < 0, the smallest code for 0 */
} mpt_fmt_value;

/* Converts x (finite) to format f through the engine's conversions and fills *out. fp8_saturate: FP8 overflow
 * saturates to +-max (nonzero) or becomes NaN / inf (0); other formats ignore it. */
void mpt_fmt_convert(mpt_format f, double x, int fp8_saturate, mpt_fmt_value *out);

/* The bit pattern as "s | eeeee | mmmmmmmmmm" ("eeeeeeee" for E8M0; buf: at least 48 bytes). */
const char *mpt_fmt_bits_text(mpt_format f, uint32_t bits, char *buf, size_t len);

/* ---- integer formats (engine/dtype.h mpt_int_format; engine/numerics.h mpt_int_quantize) ---------------------------- */

/* What became of a value in an integer format at scale s. */
typedef struct mpt_fmt_int_value {
    int32_t q;          /* the code, -qmax .. qmax */
    uint32_t bits;      /* its two's complement pattern in the format's width, right-aligned */
    float ratio;        /* x / s as the engine computes it (FP32 value of x, one FP32 division) */
    double value;       /* x' = q s as the engine computes it (one FP32 product) */
    double abs_err;     /* |x' - x| */
    double rel_err;     /* abs_err / |x| (NAN for x = 0) */
    int exact;          /* x' == x */
    int tie;            /* x / s lay exactly halfway between two integers: rounded to the even one */
    int clamped;        /* x / s rounded past qmax: q = +-qmax */
    int zeroed;         /* x != 0 became 0 (|x / s| <= 1/2) */
} mpt_fmt_int_value;

/* The scale of format f from the largest magnitude of xs[0..n) (each as FP32, as the engine sees it):
 * mpt_int_scale_from_amax(amax, qmax), amax / qmax (1 when every value is 0). */
float mpt_fmt_int_scale(mpt_int_format f, const double *xs, int n);

/* Converts x (finite) to format f at scale s (> 0, finite) through the engine's conversions and fills *out: x becomes
 * FP32 first, as every value does in the engine; errors are measured against the decimal x as a double. */
void mpt_fmt_int_convert(mpt_int_format f, double x, float s, mpt_fmt_int_value *out);

/* The two's complement pattern as bits ("11111101" for INT8 -3; buf: at least 12 bytes). */
const char *mpt_fmt_int_bits_text(mpt_int_format f, uint32_t bits, char *buf, size_t len);

#endif
