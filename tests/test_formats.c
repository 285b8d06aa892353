/*
 * tests/test_formats.c - `mptrain formats` and the conversions it shows (tools/formats.h, engine/numerics.h).
 *
 *  - the bit patterns the issue lists: 3.14159265 -> BF16 0x4049 (3.140625), FP16 0x4248 (3.140625), TF32
 *    3.140625; 65536 -> FP16 inf, BF16 65536; 65519 -> FP16 65504, 65520 -> inf; 1e-8 -> FP16 0 (flushed),
 *    BF16 normal;
 *  - FP8 against the OCP v1.0 tables (E4M3: max 448 = 0x7e, no inf, NaN 0x7f; E5M2: max 57344 = 0x7b, inf 0x7c;
 *    1.0 = 0x38 / 0x3c; smallest subnormals 2^-9 / 2^-16) and, for random inputs, against a brute-force
 *    nearest-even search over all 256 codes decoded here from the OCP definition (value = (-1)^s * 2^(e-bias) *
 *    (1 + m/2^M), subnormals 2^(1-bias) * m/2^M), independent of the engine's decoder;
 *  - the format table's constants against their textbook values (E8M0: 2^-127 .. 2^127, no sign);
 *  - INT8 and INT4 against hand-computed codes: the rows' widths, the scale from amax (254 / 127 = 2, 14 / 7 = 2),
 *    ties to even (x / s = 2.5, 3.5, -1.5, 0.5, 126.5), clamping to +-qmax and never to the unused -128 / -8, the
 *    two's complement bits, NaN and inf;
 *  - the command: its output shows the patterns, FP8 saturating by default and NaN with --fp8-saturate off, the INT8
 *    and INT4 rows at the amax scale and at --int-scale (a tie, a clamp), and a malformed value or flag exits 2
 *    naming it;
 *  - the ends, from the definitions: E8M0 (OCP MX: 2^-127 .. 2^127, NaN 0xff, no inf, no zero) clamped past 1.5 * 2^127,
 *    raised below 0.75 * 2^-127, NaN for an FP32 inf, the midpoints plain ties; binary16's 2^-25 a tie to 0; the
 *    command's words for them, the INT scale's fallback at amax 0 or inf, and "--" before a negative value.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "engine/numerics.h"
#include "tools/formats.h"

static mpt_fmt_value conv(mpt_format f, double x) {
    mpt_fmt_value v;
    mpt_fmt_convert(f, x, 1, &v);
    return v;
}

START_TEST(test_issue_patterns) {
    mpt_fmt_value v = conv(MPT_FORMAT_BF16, 3.14159265);
    ck_assert_uint_eq(v.bits, 0x4049);
    ck_assert(v.value == 3.140625);
    v = conv(MPT_FORMAT_FP16, 3.14159265);
    ck_assert_uint_eq(v.bits, 0x4248);
    ck_assert(v.value == 3.140625);
    v = conv(MPT_FORMAT_TF32, 3.14159265);
    ck_assert(v.value == 3.140625);
    ck_assert(!v.exact && !v.overflow && !v.subnormal);
    v = conv(MPT_FORMAT_FP16, 65536.0);
    ck_assert(v.overflow && isinf(v.value) && v.bits == 0x7c00);
    v = conv(MPT_FORMAT_BF16, 65536.0);
    ck_assert(v.value == 65536.0 && v.exact && !v.overflow);
    v = conv(MPT_FORMAT_FP16, 65519.0);
    ck_assert(v.value == 65504.0 && v.bits == 0x7bff && !v.overflow);
    v = conv(MPT_FORMAT_FP16, 65520.0);
    ck_assert(v.overflow && isinf(v.value));
    v = conv(MPT_FORMAT_FP16, 1e-8);
    ck_assert(v.value == 0.0 && v.flushed && v.bits == 0);
    v = conv(MPT_FORMAT_BF16, 1e-8);
    ck_assert(v.value != 0.0 && !v.flushed && !v.subnormal);
    ck_assert(v.rel_err <= ldexp(1.0, -8));
    v = conv(MPT_FORMAT_FP16, 1e-5); /* below 2^-14 = 6.1e-5: subnormal */
    ck_assert(v.subnormal && !v.flushed);
}
END_TEST

START_TEST(test_fp8_ocp_values) {
    ck_assert_uint_eq(mpt_f32_to_e4m3(448.0f), 0x7e);
    ck_assert_uint_eq(mpt_f32_to_e4m3(463.9f), 0x7e);
    /* 464 lies halfway between 448 (mantissa 110, even) and 480 (111, the NaN pattern): ties to even keep 448,
     * as IEEE rounding with an unbounded exponent does; anything above rounds to 480, past the largest: NaN */
    ck_assert_uint_eq(mpt_f32_to_e4m3(464.0f), 0x7e);
    ck_assert_uint_eq(mpt_f32_to_e4m3(464.1f), 0x7f);
    ck_assert_uint_eq(mpt_f32_to_e4m3(-1e30f), 0xff);
    ck_assert_uint_eq(mpt_f32_to_e4m3(1.0f), 0x38);
    ck_assert_uint_eq(mpt_f32_to_e4m3(0x1p-9f), 0x01);
    ck_assert_uint_eq(mpt_f32_to_e4m3(0x1p-10f), 0x00);      /* tie between 0 and 2^-9: even, 0 */
    ck_assert_uint_eq(mpt_f32_to_e4m3(0x1.8p-9f), 0x02);     /* tie between 1 and 2 (x 2^-9): even, 2 */
    ck_assert_uint_eq(mpt_f32_to_e4m3(NAN) & 0x7f, 0x7f);
    ck_assert_uint_eq(mpt_f32_to_e5m2(57344.0f), 0x7b);
    ck_assert_uint_eq(mpt_f32_to_e5m2(61439.0f), 0x7b);
    ck_assert_uint_eq(mpt_f32_to_e5m2(61440.0f), 0x7c);
    ck_assert_uint_eq(mpt_f32_to_e5m2(INFINITY), 0x7c);
    ck_assert_uint_eq(mpt_f32_to_e5m2(1.0f), 0x3c);
    ck_assert_uint_eq(mpt_f32_to_e5m2(0x1p-16f), 0x01);
    ck_assert_uint_eq(mpt_f32_to_e5m2(-2.0f), 0xc0);
    ck_assert(mpt_e4m3_to_f32(0x7e) == 448.0f && isnan(mpt_e4m3_to_f32(0x7f)));
    ck_assert(mpt_e5m2_to_f32(0x7b) == 57344.0f && isinf(mpt_e5m2_to_f32(0x7c)) && isnan(mpt_e5m2_to_f32(0x7d)));
}
END_TEST

/* The OCP definition, written out: the value of code c, or NAN for NaN/inf codes. */
static double ocp_value(unsigned c, int E, int M, int bias, int has_inf) {
    unsigned s = c >> 7, e = (c >> M) & ((1u << E) - 1u), m = c & ((1u << M) - 1u);
    if (has_inf && e == (1u << E) - 1u) return NAN;
    if (!has_inf && e == (1u << E) - 1u && m == (1u << M) - 1u) return NAN;
    double v = e == 0 ? ldexp((double)m / (1 << M), 1 - bias) : ldexp(1.0 + (double)m / (1 << M), (int)e - bias);
    return s ? -v : v;
}

/* Brute force: the nearest code to |x| among the finite ones and the first step past the largest (which stands
 * for overflow), ties to the even code, with x's sign. */
static unsigned brute(float x, int E, int M, int bias, int has_inf) {
    double a = fabs((double)x), best = INFINITY, maxv = 0.0;
    unsigned code = 0, sign = signbit(x) ? 0x80u : 0u, maxc = 0;
    for (unsigned c = 0; c < 128; c++) {
        double v = ocp_value(c, E, M, bias, has_inf);
        if (isnan(v)) continue;
        if (v > maxv) {
            maxv = v;
            maxc = c;
        }
        double d = fabs(v - a);
        if (d < best || (d == best && (c & 1u) == 0)) {
            best = d;
            code = c;
        }
    }
    unsigned over = maxc + 1; /* the grid's next point, maxv + one ulp of the top binade */
    double d = fabs(maxv + ldexp(1.0, (int)floor(log2(maxv)) - M) - a);
    if (d < best || (d == best && (over & 1u) == 0)) return sign | (has_inf ? 0x7cu : 0x7fu);
    return sign | code;
}

START_TEST(test_fp8_against_brute_force) {
    tests_rng r = {12345};
    for (int i = 0; i < 20000; i++) {
        float mag = (float)ldexp(tests_uniform(&r, 1.0, 2.0), tests_int(&r, -20, 17));
        float x = (tests_next(&r) & 1) ? -mag : mag;
        ck_assert_msg(mpt_f32_to_e4m3(x) == brute(x, 4, 3, 7, 0), "E4M3(%a): 0x%02x, brute force 0x%02x", x,
                      mpt_f32_to_e4m3(x), brute(x, 4, 3, 7, 0));
        ck_assert_msg(mpt_f32_to_e5m2(x) == brute(x, 5, 2, 15, 1), "E5M2(%a): 0x%02x, brute force 0x%02x", x,
                      mpt_f32_to_e5m2(x), brute(x, 5, 2, 15, 1));
    }
    /* every finite code decodes to the OCP value and encodes back to itself */
    for (unsigned c = 0; c < 256; c++) {
        double v4 = ocp_value(c, 4, 3, 7, 0), v5 = ocp_value(c, 5, 2, 15, 1);
        if (!isnan(v4)) {
            ck_assert(mpt_e4m3_to_f32((uint8_t)c) == v4);
            ck_assert_uint_eq(mpt_f32_to_e4m3((float)v4), c);
        }
        if (!isnan(v5)) {
            ck_assert(mpt_e5m2_to_f32((uint8_t)c) == v5);
            ck_assert_uint_eq(mpt_f32_to_e5m2((float)v5), c);
        }
    }
}
END_TEST

START_TEST(test_table) {
    /* the rows' constants, by hand (IEEE 754, OCP FP8 v1.0, OCP MX v1.0) */
    const mpt_format_desc *i = mpt_format_info(MPT_FORMAT_FP32);
    ck_assert(i->max_finite == 0x1.fffffep127 && i->min_normal == 0x1p-126 && i->min_subnormal == 0x1p-149);
    ck_assert(i->unit_roundoff == 0x1p-24);
    i = mpt_format_info(MPT_FORMAT_TF32);
    ck_assert(i->max_finite == 0x1.ffcp127 && i->min_normal == 0x1p-126 && i->min_subnormal == 0x1p-136);
    ck_assert(i->unit_roundoff == 0x1p-11);
    i = mpt_format_info(MPT_FORMAT_BF16);
    ck_assert(i->max_finite == 0x1.fep127 && i->min_subnormal == 0x1p-133 && i->unit_roundoff == 0x1p-8);
    i = mpt_format_info(MPT_FORMAT_FP16);
    ck_assert(i->max_finite == 65504.0 && i->min_normal == 0x1p-14 && i->min_subnormal == 0x1p-24);
    ck_assert(fabs(mpt_fmt_digits(MPT_FORMAT_FP16) - 3.311) < 1e-3);
    i = mpt_format_info(MPT_FORMAT_E4M3);
    ck_assert(i->max_finite == 448.0 && i->min_normal == 0x1p-6 && i->min_subnormal == 0x1p-9);
    ck_assert(i->special == MPT_SPECIAL_FN && i->saturates);
    i = mpt_format_info(MPT_FORMAT_E5M2);
    ck_assert(i->max_finite == 57344.0 && i->min_normal == 0x1p-14 && i->min_subnormal == 0x1p-16);
    ck_assert(i->special == MPT_SPECIAL_IEEE && i->saturates);
    i = mpt_format_info(MPT_FORMAT_E8M0);
    ck_assert(i->max_finite == 0x1p127 && i->min_normal == 0x1p-127 && i->sign_bits == 0 && i->man_bits == 0);
    ck_assert(!i->has_subnormals);
    ck_assert_ptr_null(mpt_format_info(MPT_FORMAT_COUNT));
    /* every row against the decoders and its own field widths */
    for (int f = 0; f < MPT_FORMAT_COUNT; f++) {
        const mpt_format_desc *d = mpt_format_info((mpt_format)f);
        ck_assert_msg(mpt_fmt_decode((mpt_format)f, d->max_bits) == d->max_finite, "%s: max", d->name);
        ck_assert_msg(mpt_fmt_decode((mpt_format)f, d->min_normal_bits) == d->min_normal, "%s: min normal", d->name);
        ck_assert_msg(mpt_fmt_decode((mpt_format)f, d->min_subnormal_bits) == d->min_subnormal, "%s: min sub", d->name);
        ck_assert_msg(d->unit_roundoff == ldexp(1.0, -(d->man_bits + 1)), "%s: unit roundoff", d->name);
        ck_assert_msg(d->min_normal == ldexp(1.0, d->emin), "%s: emin", d->name);
        ck_assert_msg(ilogb(d->max_finite) == d->emax, "%s: emax", d->name);
        if (d->man_bits > 0) {
            ck_assert_msg(d->emin == 1 - d->bias, "%s: emin from the bias", d->name);
            ck_assert_msg(d->min_subnormal == ldexp(1.0, d->emin - d->man_bits), "%s: subnormal step", d->name);
        }
        /* the pattern just above the largest finite value is not finite (inf, or NaN without inf) */
        if (d->special != MPT_SPECIAL_E8M0)
            ck_assert_msg(!isfinite(mpt_fmt_decode((mpt_format)f, d->max_bits + 1)), "%s: past max", d->name);
    }
    /* the dtype and math tables point at the right rows */
    ck_assert_int_eq(mpt_dtype_info(MPT_DTYPE_F16)->format, MPT_FORMAT_FP16);
    ck_assert_int_eq(mpt_dtype_info(MPT_DTYPE_I32)->format, -1);
    ck_assert(mpt_dtype_is_fp8(MPT_DTYPE_E5M2) && !mpt_dtype_is_fp8(MPT_DTYPE_E8M0) && mpt_dtype_is_float(MPT_DTYPE_BF16));
    ck_assert(mpt_math_unit_roundoff(MPT_MATH_TF32) == 0x1p-11 && mpt_math_unit_roundoff(MPT_MATH_MXFP8) == 0x1p-4);
    /* fp8's forward operands are E4M3 (3 mantissa bits: u = 2^-4; E5M2 is the gradients' format) */
    ck_assert(mpt_math_info(MPT_MATH_FP8)->operand == MPT_FORMAT_E4M3);
    ck_assert(mpt_math_unit_roundoff(MPT_MATH_FP8) == 0x1p-4);
    /* FP32 GEMMs run on the CUDA cores (IEEE FP32 FMA), TF32, FP16 and BF16 on Tensor Cores (NVIDIA A100 whitepaper):
     * the summary's "ieee" label reads this (tools/run_summary.c) */
    ck_assert(!mpt_math_info(MPT_MATH_FP32)->tensor_cores);
    ck_assert(mpt_math_info(MPT_MATH_TF32)->tensor_cores && mpt_math_info(MPT_MATH_F16)->tensor_cores &&
              mpt_math_info(MPT_MATH_BF16)->tensor_cores);
    char b[64];
    ck_assert_str_eq(mpt_fmt_bits_text(MPT_FORMAT_E8M0, 0x88, b, sizeof b), "10001000");
    ck_assert_str_eq(mpt_fmt_bits_text(MPT_FORMAT_FP16, 0x4248, b, sizeof b), "0 | 10000 | 1001001000");
    ck_assert_str_eq(mpt_fmt_bits_text(MPT_FORMAT_E4M3, 0x7e, b, sizeof b), "0 | 1111 | 110");
}
END_TEST

/* The code and value of x in format f at scale s, checked against the hand-computed q. */
static void int_case(mpt_int_format f, double x, float s, int q, int tie, int clamped) {
    mpt_fmt_int_value v;
    mpt_fmt_int_convert(f, x, s, &v);
    ck_assert_msg(v.q == q && v.value == (double)q * s && v.tie == tie && v.clamped == clamped,
                  "%s(%g) at s = %g: q %d (want %d), value %g, tie %d, clamped %d", mpt_int_format_info(f)->name, x,
                  (double)s, (int)v.q, q, v.value, v.tie, v.clamped);
    ck_assert_int_eq((int)mpt_int_quantize((float)x, s, mpt_int_format_info(f)->qmax), q);
}

START_TEST(test_int_formats) {
    const mpt_int_format_desc *i8 = mpt_int_format_info(MPT_INT_FORMAT_INT8), *i4 = mpt_int_format_info(MPT_INT_FORMAT_INT4);
    ck_assert(i8->bits == 8 && i8->qmax == 127 && i8->code_min == -128 && strcmp(i8->key, "int8") == 0);
    ck_assert(i4->bits == 4 && i4->qmax == 7 && i4->code_min == -8 && strcmp(i4->key, "int4") == 0);
    ck_assert_ptr_null(mpt_int_format_info(MPT_INT_FORMAT_COUNT));
    for (int f = 0; f < MPT_INT_FORMAT_COUNT; f++) { /* symmetric two's complement of the row's width */
        const mpt_int_format_desc *d = mpt_int_format_info((mpt_int_format)f);
        ck_assert_int_eq(d->qmax, (1 << (d->bits - 1)) - 1);
        ck_assert_int_eq(d->code_min, -(1 << (d->bits - 1)));
    }
    ck_assert_str_eq(mpt_dtype_name(MPT_DTYPE_I8), "i8");
    ck_assert(mpt_dtype_size(MPT_DTYPE_I8) == 1 && mpt_dtype_info(MPT_DTYPE_I8)->format == -1);
    /* the scale from amax: s = amax / qmax */
    const double a[] = {5.0, -254.0, 7.0}, b[] = {14.0, -3.0}, z[] = {0.0, -0.0};
    ck_assert(mpt_fmt_int_scale(MPT_INT_FORMAT_INT8, a, 3) == 2.0f);
    ck_assert(mpt_fmt_int_scale(MPT_INT_FORMAT_INT4, b, 2) == 2.0f);
    ck_assert(mpt_fmt_int_scale(MPT_INT_FORMAT_INT8, z, 2) == 1.0f); /* all zero: any scale; 1 */
    ck_assert(mpt_int_scale_from_amax(INFINITY, 127) == 1.0f && mpt_int_scale_from_amax(NAN, 7) == 1.0f);
    ck_assert(mpt_int_scale_from_amax(1.0f, 127) == 1.0f / 127.0f);
    /* ties to even at s = 2 (x / s exact): 2.5 -> 2, 3.5 -> 4, -1.5 -> -2, 0.5 -> 0, 126.5 -> 126 */
    int_case(MPT_INT_FORMAT_INT8, 5.0, 2.0f, 2, 1, 0);
    int_case(MPT_INT_FORMAT_INT8, 7.0, 2.0f, 4, 1, 0);
    int_case(MPT_INT_FORMAT_INT8, -3.0, 2.0f, -2, 1, 0);
    int_case(MPT_INT_FORMAT_INT8, 1.0, 2.0f, 0, 1, 0);
    int_case(MPT_INT_FORMAT_INT8, 253.0, 2.0f, 126, 1, 0);
    int_case(MPT_INT_FORMAT_INT8, -253.0, 2.0f, -126, 1, 0);
    int_case(MPT_INT_FORMAT_INT8, 254.0, 2.0f, 127, 0, 0); /* amax on the top code */
    int_case(MPT_INT_FORMAT_INT8, 5.2, 2.0f, 3, 0, 0);      /* 2.6 -> 3 */
    int_case(MPT_INT_FORMAT_INT4, 13.0, 2.0f, 6, 1, 0);     /* 6.5 -> 6 */
    int_case(MPT_INT_FORMAT_INT4, 11.0, 2.0f, 6, 1, 0);     /* 5.5 -> 6 */
    int_case(MPT_INT_FORMAT_INT4, -14.0, 2.0f, -7, 0, 0);
    /* clamping at s = 1: past qmax + 1/2 to +-qmax, never to the unused -128 / -8 */
    int_case(MPT_INT_FORMAT_INT8, 127.49, 1.0f, 127, 0, 0);
    int_case(MPT_INT_FORMAT_INT8, 127.5, 1.0f, 127, 1, 1); /* a tie to 128, even, past 127: clamped */
    int_case(MPT_INT_FORMAT_INT8, 200.0, 1.0f, 127, 0, 1);
    int_case(MPT_INT_FORMAT_INT8, -128.0, 1.0f, -127, 0, 1);
    int_case(MPT_INT_FORMAT_INT8, -1000.0, 1.0f, -127, 0, 1);
    int_case(MPT_INT_FORMAT_INT4, 7.5, 1.0f, 7, 1, 1);
    int_case(MPT_INT_FORMAT_INT4, 6.5, 1.0f, 6, 1, 0);
    int_case(MPT_INT_FORMAT_INT4, -8.0, 1.0f, -7, 0, 1);
    /* NaN has no code: 0; inf clamps */
    ck_assert_int_eq((int)mpt_int_quantize(NAN, 1.0f, 127), 0);
    /* the same at run time (a literal NaN lets the compiler fold the conversion; (int32_t)NaN is undefined in C and
     * INT32_MIN on x86-64's cvttss2si) */
    volatile float nan_rt = NAN;
    ck_assert_int_eq((int)mpt_int_quantize(nan_rt, 0.25f, 127), 0);
    ck_assert_int_eq((int)mpt_int_quantize(-nan_rt, 1.0f, 7), 0);
    ck_assert(mpt_int_fake_quant(nan_rt, 0.25f, 127) == 0.0f);
    ck_assert_int_eq((int)mpt_int_quantize(INFINITY, 1.0f, 127), 127);
    ck_assert_int_eq((int)mpt_int_quantize(-INFINITY, 1.0f, 7), -7);
    /* two's complement bits in the format's width */
    mpt_fmt_int_value v;
    char buf[16];
    mpt_fmt_int_convert(MPT_INT_FORMAT_INT8, -3.0, 1.0f, &v);
    ck_assert(v.bits == 0xfd && strcmp(mpt_fmt_int_bits_text(MPT_INT_FORMAT_INT8, v.bits, buf, sizeof buf), "11111101") == 0);
    mpt_fmt_int_convert(MPT_INT_FORMAT_INT4, -3.0, 1.0f, &v);
    ck_assert(v.bits == 0xd && strcmp(mpt_fmt_int_bits_text(MPT_INT_FORMAT_INT4, v.bits, buf, sizeof buf), "1101") == 0);
    mpt_fmt_int_convert(MPT_INT_FORMAT_INT8, -1000.0, 1.0f, &v);
    ck_assert_uint_eq(v.bits, 0x81); /* -127 */
    /* errors against the decimal value: 0.1 at s = 0.25 -> q 0 (0.4 rounds down), error 0.1, relative 1 */
    mpt_fmt_int_convert(MPT_INT_FORMAT_INT8, 0.1, 0.25f, &v);
    ck_assert(v.q == 0 && v.zeroed && v.abs_err == 0.1 && v.rel_err == 1.0);
    /* a grid that is not a power of two: s = 0.1f; 0.3f / 0.1f rounds to 3 in FP32 (q 3), and 3 * 0.1f rounds once */
    mpt_fmt_int_convert(MPT_INT_FORMAT_INT8, 0.3, 0.1f, &v);
    ck_assert(v.q == 3 && v.value == (double)(3.0f * 0.1f) && !v.exact);
}
END_TEST

/* The ends of E8M0 and the tie at half the smallest subnormal, from the definitions, not the engine's output.
 * E8M0 (OCP MX v1.0, section 5.4.1): codes 0..254 hold 2^(code - 127), 2^-127 .. 2^127; 0xff is NaN; no inf, no
 * zero, no sign. Rounding to nearest picks the nearer power of two, so a value past the midpoint 1.5 * 2^127 (nearer
 * 2^128, which has no code) is clamped to 2^127, and one below 0.75 * 2^-127 (nearer 2^-128) raised to 2^-127; at
 * a midpoint the even code wins (254 over 255, 0 over the missing -1), which is ordinary rounding. IEEE 754 binary16:
 * smallest subnormal 2^-24, so 2^-25 is a tie between 0 (even) and 2^-24 (last bit odd): 0. */
START_TEST(test_format_ends) {
    mpt_fmt_value v = conv(MPT_FORMAT_E8M0, 3e38); /* 1.76 * 2^127 */
    ck_assert(v.bits == 0xfe && v.value == 0x1p127 && v.saturated && v.overflow && !v.exact && !v.raised);
    v = conv(MPT_FORMAT_E8M0, 2.5e38); /* 1.47 * 2^127: nearer 2^127, plain rounding */
    ck_assert(v.bits == 0xfe && v.value == 0x1p127 && !v.saturated && !v.overflow);
    v = conv(MPT_FORMAT_E8M0, 0x1.8p127); /* the midpoint: a tie, even code 254 */
    ck_assert(v.bits == 0xfe && !v.saturated && !v.overflow);
    v = conv(MPT_FORMAT_E8M0, 0x1.800002p127); /* just past it */
    ck_assert(v.bits == 0xfe && v.saturated && v.overflow);
    v = conv(MPT_FORMAT_E8M0, 1e39); /* inf in FP32: E8M0 has no inf, its one special code is NaN 0xff */
    ck_assert(v.bits == 0xff && isnan(v.value) && v.overflow && !v.saturated);
    v = conv(MPT_FORMAT_E8M0, 1e-50); /* 0 in FP32: no zero in E8M0, the smallest code */
    ck_assert(v.bits == 0x00 && v.value == 0x1p-127 && v.raised && !v.saturated && !v.overflow && !v.unrepresentable);
    v = conv(MPT_FORMAT_E8M0, 0x1.7p-128); /* below 0.75 * 2^-127 */
    ck_assert(v.bits == 0x00 && v.raised);
    v = conv(MPT_FORMAT_E8M0, 0x1.8p-128); /* 0.75 * 2^-127 exactly: a tie, code 0 */
    ck_assert(v.bits == 0x00 && !v.raised);
    v = conv(MPT_FORMAT_E8M0, 0x1p-127);
    ck_assert(v.bits == 0x00 && v.exact && !v.raised);
    v = conv(MPT_FORMAT_E8M0, 0.0);
    ck_assert(v.unrepresentable && !v.raised && !v.overflow);

    v = conv(MPT_FORMAT_FP16, 0x1p-25); /* exactly half of 2^-24: tie to even, 0 */
    ck_assert(v.bits == 0 && v.flushed && v.flush_tie);
    v = conv(MPT_FORMAT_FP16, 0x1.000002p-25); /* above half: the smallest subnormal */
    ck_assert(v.bits == 1 && v.value == 0x1p-24 && !v.flushed && !v.flush_tie && v.subnormal);
    v = conv(MPT_FORMAT_FP16, 0x1.fffffep-26); /* below half */
    ck_assert(v.bits == 0 && v.flushed && !v.flush_tie);
    v = conv(MPT_FORMAT_FP16, 0x1.8p-24); /* 1.5 * 2^-24: a tie between 2^-24 (odd) and 2^-23 (even) */
    ck_assert(v.bits == 2 && v.value == 0x1p-23);
    v = conv(MPT_FORMAT_FP32, 0x1p-150); /* binary32: half of 2^-149, a tie in the double -> float conversion */
    ck_assert(v.bits == 0 && v.flushed && v.flush_tie);
    v = conv(MPT_FORMAT_FP32, 0x1.0000000001p-150);
    ck_assert(v.bits == 1 && !v.flushed);
}
END_TEST

/* Runs `mptrain formats ARGS` and returns its exit status, output in buf. */
static int run_formats(const char *args, char *buf, size_t len) {
    const char *root = getenv("MPT_BUILD_ROOT");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/tools/mptrain' formats %s 2>&1", root ? root : ".", args);
    FILE *p = popen(cmd, "r");
    ck_assert(p != NULL);
    size_t n = fread(buf, 1, len - 1, p);
    buf[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

START_TEST(test_command) {
    static char out[1 << 16];
    ck_assert_int_eq(run_formats("3.14159265 65520", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "0x4049") && strstr(out, "0x4248") && strstr(out, "3.140625"), "%s", out);
    ck_assert_msg(strstr(out, "overflow -> inf") && strstr(out, "| 65504 |"), "%s", out);
    ck_assert_int_eq(run_formats("", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "flushed to zero") && strstr(out, "1e-8"), "defaults: %s", out);
    ck_assert_int_eq(run_formats("3.1x", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "'3.1x'") != NULL, "%s", out);
    ck_assert_int_eq(run_formats("--bogus", out, sizeof out), 2);
    /* a C hexadecimal float, as the help says: 0x1p-14 is exactly FP16's smallest normal, bits 0x0400 */
    ck_assert_int_eq(run_formats("0x1p-14", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "0x0400     6.10351562e-05") != NULL, "%s", out);
    /* FP8 overflow: saturating by default (448 = 0x7e), NaN (0x7f) with --fp8-saturate off; E8M0 rounds 500 to 2^9 */
    ck_assert_int_eq(run_formats("500", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "0x7e ") && strstr(out, "saturated to 448") && strstr(out, "E8M0      10001000"), "%s", out);
    ck_assert_int_eq(run_formats("--fp8-saturate off 500", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "0x7f ") && strstr(out, "overflow -> NaN (E4M3 has no inf)"), "%s", out);
    ck_assert_int_eq(run_formats("--fp8-saturate maybe 1", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "--fp8-saturate") != NULL, "%s", out);
    /* INT8 / INT4 beside them: 254 sets the scale (2 for INT8), 5 is a tie to 2 (0x02), INT4's s = 254 / 7 makes 5 zero */
    ck_assert_int_eq(run_formats("254 5", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "s = amax / 127 = 2 (INT8)") && strstr(out, "INT8      00000010") &&
                      strstr(out, "x / s = 2.5 is a tie, rounded to even") && strstr(out, "INT4      0000") &&
                      strstr(out, "became 0") && strstr(out, "| INT8 | 8, two's complement | -127 .. 127 (-128 unused)"),
                  "%s", out);
    /* --int-scale: 200 at s = 1 clamps to 127 (0x7f), -9 to INT4's -7 (1001) */
    ck_assert_int_eq(run_formats("--int-scale 1 200 -9", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "INT8      01111111") && strstr(out, "clamped to q = 127 (|x / s| = 200 is past 127.5)") &&
                      strstr(out, "INT4      1001") && strstr(out, "clamped to q = -7"),
                  "%s", out);
    ck_assert_int_eq(run_formats("--int-scale 0 1", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "--int-scale") && strstr(out, "'0'"), "%s", out);
    ck_assert_int_eq(run_formats("--int-scale 1e-60 1", out, sizeof out), 2); /* zero in FP32 */
}
END_TEST

/* The line of `out` that starts with `head` (copied into line), or "" if none. */
static const char *line_of(const char *out, const char *head, char *line, size_t len) {
    const char *p = out;
    line[0] = '\0';
    while (p && *p) {
        if (strncmp(p, head, strlen(head)) == 0) {
            size_t n = strcspn(p, "\n");
            if (n >= len) n = len - 1;
            memcpy(line, p, n);
            line[n] = '\0';
            return line;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
    return line;
}

/* What the command says at the ends: the INT scale's fallback when amax is 0 or inf in FP32 (0 / 127 is not 1), E8M0
 * clamped, raised or NaN (never "inf", never plainly "rounded" past its range), the FP16 tie at 2^-25, and "--"
 * ending the options so that a negative value can follow it. */
START_TEST(test_command_ends) {
    static char out[1 << 16];
    char line[512];
    ck_assert_int_eq(run_formats("0", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "amax is 0 in FP32") && strstr(out, "falls back to 1 (INT8), 1 (INT4)") &&
                      !strstr(out, "amax / 127 = 1"), "%s", out);
    ck_assert_int_eq(run_formats("1e39", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "amax is inf in FP32") && !strstr(out, "amax / 127 = 1"), "%s", out);
    line_of(out, "  E8M0 ", line, sizeof line);
    ck_assert_msg(strstr(line, "0xff") && strstr(line, "nan") && strstr(line, "overflow -> NaN") && !strstr(line, "overflow -> inf"),
                  "%s", line);
    ck_assert_int_eq(run_formats("3e38", out, sizeof out), 0);
    line_of(out, "  E8M0 ", line, sizeof line);
    ck_assert_msg(strstr(line, "0xfe") && strstr(line, "clamped to the largest code 2^127") && !strstr(line, "rounded"),
                  "%s", line);
    ck_assert_int_eq(run_formats("2.5e38", out, sizeof out), 0); /* nearer 2^127 than 2^128: ordinary rounding */
    line_of(out, "  E8M0 ", line, sizeof line);
    ck_assert_msg(strstr(line, "0xfe") && strstr(line, "rounded") && !strstr(line, "clamped"), "%s", line);
    ck_assert_int_eq(run_formats("1e-50", out, sizeof out), 0);
    line_of(out, "  E8M0 ", line, sizeof line);
    ck_assert_msg(strstr(line, "0x00") && strstr(line, "raised to the smallest code 2^-127") && !strstr(line, "rounded"),
                  "%s", line);
    ck_assert_int_eq(run_formats("2.98023223876953125e-08", out, sizeof out), 0); /* 2^-25 */
    line_of(out, "  FP16 ", line, sizeof line);
    ck_assert_msg(strstr(line, "exactly half the smallest subnormal") && !strstr(line, "below half"), "%s", line);
    ck_assert_int_eq(run_formats("2.9e-08", out, sizeof out), 0);
    line_of(out, "  FP16 ", line, sizeof line);
    ck_assert_msg(strstr(line, "below half the smallest subnormal"), "%s", line);
    /* "--" ends the options: -5 after it is a value, and so is a word that looks like an option */
    ck_assert_int_eq(run_formats("-- -5", out, sizeof out), 0);
    line_of(out, "  FP16 ", line, sizeof line);
    ck_assert_msg(strstr(out, "-5  (as a double: -5)") && strstr(line, "0xc500"), "%s", out); /* 1 10001 0100000000 */
    ck_assert_int_eq(run_formats("--int-scale 1 -- -200", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "clamped to q = -127"), "%s", out);
    ck_assert_int_eq(run_formats("-- --int-scale", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "expected a finite number") && strstr(out, "'--int-scale'"), "%s", out);
}
END_TEST

static Suite *formats_suite(void) {
    Suite *s = suite_create("formats");
    TCase *tc = tcase_create("formats");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_issue_patterns);
    tcase_add_test(tc, test_fp8_ocp_values);
    tcase_add_test(tc, test_fp8_against_brute_force);
    tcase_add_test(tc, test_table);
    tcase_add_test(tc, test_int_formats);
    tcase_add_test(tc, test_command);
    tcase_add_test(tc, test_format_ends);
    tcase_add_test(tc, test_command_ends);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(formats_suite()); }
