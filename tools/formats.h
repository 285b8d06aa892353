/*
 * tools/formats.h - what `mptrain formats` shows: a number in each floating-point format the engine uses
 * (FP32, TF32, BF16, FP16, the OCP FP8 formats E4M3 and E5M2, and the MX block-scale format E8M0), through the
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

typedef enum mpt_fmt {
    MPT_FMT_FP32 = 0,
    MPT_FMT_TF32,
    MPT_FMT_BF16,
    MPT_FMT_FP16,
    MPT_FMT_E4M3,
    MPT_FMT_E5M2,
    MPT_FMT_E8M0, /* unsigned powers of two 2^-127 .. 2^127 (no zero, no mantissa): the MX block scale */
    MPT_FMT_COUNT
} mpt_fmt;

/* A format's constants, each derived from the engine's decoder applied to the bit pattern that holds it. */
typedef struct mpt_fmt_info {
    const char *name;      /* "FP32", "TF32", "BF16", "FP16", "FP8 E4M3", "FP8 E5M2", "E8M0" */
    int sign_bits;         /* 1, or 0 for E8M0 */
    int exp_bits, man_bits; /* explicit mantissa bits; the precision p is man_bits + 1 */
    int has_inf;
    double max_finite, min_normal, min_subnormal; /* E8M0: min_subnormal = min_normal = 2^-127 (it has none) */
    double unit_roundoff;  /* 2^-p: the largest relative error of rounding to nearest in the normal range */
    double digits;         /* p * log10(2): decimal digits the significand carries */
} mpt_fmt_info;

void mpt_fmt_describe(mpt_fmt f, mpt_fmt_info *out);

/* What became of a value in one format. */
typedef struct mpt_fmt_value {
    uint32_t bits;     /* the format's bit pattern, right-aligned (TF32: its 19 bits, the top of an FP32) */
    double value;      /* what the pattern holds (inf/NaN as such) */
    double abs_err;    /* |value - x| (inf on overflow) */
    double rel_err;    /* abs_err / |x| (NAN for x = 0) */
    int exact;         /* value == x */
    int subnormal;     /* a nonzero subnormal of the format */
    int flushed;       /* x != 0 became 0 */
    int overflow;      /* a finite x became inf (or NaN in E4M3, which has no inf); saturated FP8 included */
    int saturated;     /* FP8 with saturation: x rounded past the largest finite value and became +-max */
    int unrepresentable; /* E8M0: x <= 0 (no sign, no zero): NaN for x < 0, the smallest code for 0 */
} mpt_fmt_value;

/* Converts x (finite) to format f through the engine's conversions and fills *out. fp8_saturate: FP8 overflow
 * saturates to +-max (nonzero) or becomes NaN / inf (0); other formats ignore it. */
void mpt_fmt_convert(mpt_fmt f, double x, int fp8_saturate, mpt_fmt_value *out);

/* The bit pattern as "s | eeeee | mmmmmmmmmm" ("eeeeeeee" for E8M0; buf: at least 48 bytes). */
const char *mpt_fmt_bits_text(mpt_fmt f, uint32_t bits, char *buf, size_t len);

#endif
