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
 *  - the command: its output shows the patterns, FP8 saturating by default and NaN with --fp8-saturate off, and a
 *    malformed value or flag exits 2 naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "engine/numerics.h"
#include "tools/formats.h"

static mpt_fmt_value conv(mpt_fmt f, double x) {
    mpt_fmt_value v;
    mpt_fmt_convert(f, x, 1, &v);
    return v;
}

START_TEST(test_issue_patterns) {
    mpt_fmt_value v = conv(MPT_FMT_BF16, 3.14159265);
    ck_assert_uint_eq(v.bits, 0x4049);
    ck_assert(v.value == 3.140625);
    v = conv(MPT_FMT_FP16, 3.14159265);
    ck_assert_uint_eq(v.bits, 0x4248);
    ck_assert(v.value == 3.140625);
    v = conv(MPT_FMT_TF32, 3.14159265);
    ck_assert(v.value == 3.140625);
    ck_assert(!v.exact && !v.overflow && !v.subnormal);
    v = conv(MPT_FMT_FP16, 65536.0);
    ck_assert(v.overflow && isinf(v.value) && v.bits == 0x7c00);
    v = conv(MPT_FMT_BF16, 65536.0);
    ck_assert(v.value == 65536.0 && v.exact && !v.overflow);
    v = conv(MPT_FMT_FP16, 65519.0);
    ck_assert(v.value == 65504.0 && v.bits == 0x7bff && !v.overflow);
    v = conv(MPT_FMT_FP16, 65520.0);
    ck_assert(v.overflow && isinf(v.value));
    v = conv(MPT_FMT_FP16, 1e-8);
    ck_assert(v.value == 0.0 && v.flushed && v.bits == 0);
    v = conv(MPT_FMT_BF16, 1e-8);
    ck_assert(v.value != 0.0 && !v.flushed && !v.subnormal);
    ck_assert(v.rel_err <= ldexp(1.0, -8));
    v = conv(MPT_FMT_FP16, 1e-5); /* below 2^-14 = 6.1e-5: subnormal */
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
    mpt_fmt_info i;
    mpt_fmt_describe(MPT_FMT_FP32, &i);
    ck_assert(i.max_finite == 0x1.fffffep127 && i.min_normal == 0x1p-126 && i.min_subnormal == 0x1p-149);
    ck_assert(i.unit_roundoff == 0x1p-24);
    mpt_fmt_describe(MPT_FMT_TF32, &i);
    ck_assert(i.max_finite == 0x1.ffcp127 && i.min_normal == 0x1p-126 && i.min_subnormal == 0x1p-136);
    ck_assert(i.unit_roundoff == 0x1p-11);
    mpt_fmt_describe(MPT_FMT_BF16, &i);
    ck_assert(i.max_finite == 0x1.fep127 && i.min_subnormal == 0x1p-133 && i.unit_roundoff == 0x1p-8);
    mpt_fmt_describe(MPT_FMT_FP16, &i);
    ck_assert(i.max_finite == 65504.0 && i.min_normal == 0x1p-14 && i.min_subnormal == 0x1p-24);
    ck_assert(fabs(i.digits - 3.311) < 1e-3);
    mpt_fmt_describe(MPT_FMT_E4M3, &i);
    ck_assert(i.max_finite == 448.0 && i.min_normal == 0x1p-6 && i.min_subnormal == 0x1p-9 && !i.has_inf);
    mpt_fmt_describe(MPT_FMT_E5M2, &i);
    ck_assert(i.max_finite == 57344.0 && i.min_normal == 0x1p-14 && i.min_subnormal == 0x1p-16 && i.has_inf);
    mpt_fmt_describe(MPT_FMT_E8M0, &i);
    ck_assert(i.max_finite == 0x1p127 && i.min_normal == 0x1p-127 && i.sign_bits == 0 && i.man_bits == 0);
    char b[64];
    ck_assert_str_eq(mpt_fmt_bits_text(MPT_FMT_E8M0, 0x88, b, sizeof b), "10001000");
    ck_assert_str_eq(mpt_fmt_bits_text(MPT_FMT_FP16, 0x4248, b, sizeof b), "0 | 10000 | 1001001000");
    ck_assert_str_eq(mpt_fmt_bits_text(MPT_FMT_E4M3, 0x7e, b, sizeof b), "0 | 1111 | 110");
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
    /* FP8 overflow: saturating by default (448 = 0x7e), NaN (0x7f) with --fp8-saturate off; E8M0 rounds 500 to 2^9 */
    ck_assert_int_eq(run_formats("500", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "0x7e ") && strstr(out, "saturated to 448") && strstr(out, "E8M0      10001000"), "%s", out);
    ck_assert_int_eq(run_formats("--fp8-saturate off 500", out, sizeof out), 0);
    ck_assert_msg(strstr(out, "0x7f ") && strstr(out, "overflow -> NaN (E4M3 has no inf)"), "%s", out);
    ck_assert_int_eq(run_formats("--fp8-saturate maybe 1", out, sizeof out), 2);
    ck_assert_msg(strstr(out, "--fp8-saturate") != NULL, "%s", out);
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
    tcase_add_test(tc, test_command);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(formats_suite()); }
