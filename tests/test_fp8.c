/*
 * tests/test_fp8.c - the FP8 and MX formats and their scale rules (kernels/elemwise.h; issue #23 section A).
 *
 * Every expected value is computed here from the format definitions, never read from the engine:
 *  - decoding: all 256 codes of E4M3, E5M2 and E8M0 against (-1)^s * 2^(e - bias) * (1 + m / 2^M) (subnormals
 *    2^(1 - bias) * m / 2^M) and 2^(c - 127), with the OCP FP8 (Micikevicius et al. 2022, arXiv 2209.05433;
 *    OCP 8-bit Floating Point v1.0) and OCP MX v1.0 special codes;
 *  - rounding: every midpoint between two neighbouring codes goes to the even code, its FP32 neighbours to the
 *    nearer code; the subnormal boundary; saturation at 448 / 57344 and the rounding boundary just above each
 *    (464 and 61440), with and without saturation; inf and NaN;
 *  - with the CUDA toolkit's headers (MPT_TEST_HAVE_CUDA_FP8): both overflow modes against NVIDIA's reference
 *    conversion (the host code of cuda_fp8.hpp, __nv_cvt_float_to_fp8 with __NV_SATFINITE / __NV_NOSAT) over a
 *    sweep of FP32 bit patterns that covers every class (zeros, subnormals, normals of every exponent, inf,
 *    NaN), and the E8M0 round-up (__nv_cvt_float_to_e8m0, cudaRoundPosInf) that the MX RCEIL rule uses;
 *  - the MX block scale rules FLOOR, CEIL, RCEIL (torchao ScaleCalculationMode) from frexp in FP64;
 *  - the per-tensor scale s = fmax / amax / 2^margin against FP64 (a division rounded twice, FP64 then FP32,
 *    equals the FP32 division: double rounding is innocuous for division when 53 >= 2 * 24 + 2, Figueroa 1995),
 *    its power-of-two rounding, and what an amax of 0, inf or NaN leaves.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "kernels/elemwise.h"

#ifdef MPT_TEST_HAVE_CUDA_FP8
#include <cuda_fp8.h>
#endif

/* ---- the definitions, written out ------------------------------------------------------------------------ */

typedef struct fmt {
    const char *name;
    int E, M, bias, has_inf; /* exponent bits, mantissa bits, bias, IEEE-style inf/NaN (E5M2) or one NaN (E4M3) */
    int e5m2;                /* the engine's format argument */
    double max;              /* largest finite */
} fmt;

static const fmt E4M3 = {"E4M3", 4, 3, 7, 0, 0, 448.0};
static const fmt E5M2 = {"E5M2", 5, 2, 15, 1, 1, 57344.0};

/* What code c holds: its value, or NAN for NaN codes (and inf for E5M2's inf codes). */
static double def_value(const fmt *f, unsigned c) {
    unsigned s = c >> 7, e = (c >> f->M) & ((1u << f->E) - 1u), m = c & ((1u << f->M) - 1u);
    unsigned top = (1u << f->E) - 1u;
    if (f->has_inf && e == top) return m == 0 ? (s ? -INFINITY : INFINITY) : NAN;
    if (!f->has_inf && e == top && m == (1u << f->M) - 1u) return NAN;
    double v = e == 0 ? ldexp((double)m / (1 << f->M), 1 - f->bias)
                      : ldexp(1.0 + (double)m / (1 << f->M), (int)e - f->bias);
    return s ? -v : v;
}

static uint8_t enc(const fmt *f, float x, int sat) { return mpt_f32_to_fp8(x, f->e5m2, sat); }
static float dec(const fmt *f, uint8_t c) { return mpt_fp8_decode(c, f->e5m2); }

/* ---- decoding ---------------------------------------------------------------------------------------------- */

START_TEST(test_decode_all_codes) {
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int k = 0; k < 2; k++) {
        const fmt *f = fs[k];
        int n_nan = 0;
        for (unsigned c = 0; c < 256; c++) {
            double want = def_value(f, c);
            float got = dec(f, (uint8_t)c);
            if (isnan(want)) {
                ck_assert_msg(isnan(got), "%s 0x%02x: expected NaN, got %a", f->name, c, got);
                n_nan++;
            } else {
                ck_assert_msg((double)got == want, "%s 0x%02x: expected %a, got %a", f->name, c, want, got);
                ck_assert_int_eq(signbit(got) != 0, (c >> 7) != 0); /* -0 is 0x80 */
            }
        }
        /* E4M3: one NaN per sign (S.1111.111); E5M2: 3 NaN mantissas per sign */
        ck_assert_int_eq(n_nan, f->has_inf ? 6 : 2);
    }
    ck_assert(dec(&E4M3, 0x7e) == 448.0f && dec(&E4M3, 0x08) == 0x1p-6f && dec(&E4M3, 0x01) == 0x1p-9f);
    ck_assert(dec(&E5M2, 0x7b) == 57344.0f && dec(&E5M2, 0x04) == 0x1p-14f && dec(&E5M2, 0x01) == 0x1p-16f);
    ck_assert(isinf(dec(&E5M2, 0x7c)) && dec(&E5M2, 0xfc) < 0.0f);
    /* E8M0: 2^(c - 127), 0xff NaN */
    for (unsigned c = 0; c < 256; c++) {
        float got = mpt_e8m0_to_f32((uint8_t)c);
        if (c == 255) ck_assert(isnan(got));
        else ck_assert_msg((double)got == ldexp(1.0, (int)c - 127), "E8M0 0x%02x: got %a", c, got);
    }
    for (int k = -127; k <= 127; k++) ck_assert((double)mpt_pow2f(k) == ldexp(1.0, k));
}
END_TEST

/* ---- rounding ---------------------------------------------------------------------------------------------- */

START_TEST(test_round_trip_and_ties) {
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int k = 0; k < 2; k++) {
        const fmt *f = fs[k];
        for (int sat = 0; sat <= 1; sat++) {
            /* every finite code encodes back to itself */
            for (unsigned c = 0; c < 256; c++) {
                double v = def_value(f, c);
                if (isfinite(v)) ck_assert_uint_eq(enc(f, (float)v, sat), c);
            }
            /* neighbours c, c + 1 of the positive finite codes: the midpoint (exact in FP32: at most M + 2 significant
             * bits) goes to the even code, the FP32 numbers just beside it to the nearer code; negatives mirror */
            for (unsigned c = 0; c + 1 < 128; c++) {
                double lo = def_value(f, c), hi = def_value(f, c + 1);
                if (!isfinite(lo) || !isfinite(hi)) continue;
                float mid = (float)((lo + hi) / 2.0);
                ck_assert((double)mid == (lo + hi) / 2.0);
                unsigned even = (c & 1u) ? c + 1 : c;
                ck_assert_msg(enc(f, mid, sat) == even, "%s tie %a: 0x%02x, expected 0x%02x", f->name, mid,
                              enc(f, mid, sat), even);
                ck_assert_uint_eq(enc(f, -mid, sat), even | 0x80u);
                ck_assert_uint_eq(enc(f, nextafterf(mid, 0.0f), sat), c);
                ck_assert_uint_eq(enc(f, nextafterf(mid, INFINITY), sat), c + 1);
            }
            /* below the smallest subnormal: half of it is a tie with 0 (even): 0, with the sign kept */
            float half = (float)(def_value(f, 1) / 2.0);
            ck_assert_uint_eq(enc(f, half, sat), 0x00);
            ck_assert_uint_eq(enc(f, -half, sat), 0x80);
            ck_assert_uint_eq(enc(f, nextafterf(half, 1.0f), sat), 0x01);
            ck_assert_uint_eq(enc(f, 0x1p-149f, sat), 0x00);  /* FP32 subnormals flush */
            ck_assert_uint_eq(enc(f, -0.0f, sat), 0x80);
        }
    }
}
END_TEST

START_TEST(test_saturation_boundaries) {
    /* E4M3: the next grid point past 448 would be 480 (mantissa 111, the NaN pattern); 464 is the midpoint and ties
     * to 448 (mantissa 110 even); above it, non-saturating overflows to NaN with the sign kept, saturating to 448 */
    const float e4_mid = (float)((448.0 + 480.0) / 2.0);
    ck_assert(e4_mid == 464.0f);
    for (int sat = 0; sat <= 1; sat++) {
        ck_assert_uint_eq(mpt_f32_to_fp8(448.0f, 0, sat), 0x7e);
        ck_assert_uint_eq(mpt_f32_to_fp8(e4_mid, 0, sat), 0x7e);
        ck_assert_uint_eq(mpt_f32_to_fp8(-e4_mid, 0, sat), 0xfe);
    }
    const float above4 = nextafterf(e4_mid, INFINITY);
    ck_assert_uint_eq(mpt_f32_to_e4m3(above4), 0x7f);
    ck_assert_uint_eq(mpt_f32_to_e4m3(-above4), 0xff);
    ck_assert_uint_eq(mpt_f32_to_e4m3_sat(above4), 0x7e);
    ck_assert_uint_eq(mpt_f32_to_e4m3_sat(-above4), 0xfe);
    ck_assert_uint_eq(mpt_f32_to_e4m3(INFINITY), 0x7f);
    ck_assert_uint_eq(mpt_f32_to_e4m3(-INFINITY), 0xff);
    ck_assert_uint_eq(mpt_f32_to_e4m3_sat(INFINITY), 0x7e);
    ck_assert_uint_eq(mpt_f32_to_e4m3_sat(-FLT_MAX), 0xfe);
    /* E5M2: the next grid point past 57344 (1.11b x 2^15) is 65536; the midpoint 61440 ties to 65536 (57344's
     * mantissa 11 is odd): non-saturating gives inf there, saturating 57344 */
    const float e5_mid = (float)((57344.0 + 65536.0) / 2.0);
    ck_assert(e5_mid == 61440.0f);
    ck_assert_uint_eq(mpt_f32_to_e5m2(nextafterf(e5_mid, 0.0f)), 0x7b);
    ck_assert_uint_eq(mpt_f32_to_e5m2_sat(nextafterf(e5_mid, 0.0f)), 0x7b);
    ck_assert_uint_eq(mpt_f32_to_e5m2(e5_mid), 0x7c);
    ck_assert_uint_eq(mpt_f32_to_e5m2(-e5_mid), 0xfc);
    ck_assert_uint_eq(mpt_f32_to_e5m2_sat(e5_mid), 0x7b);
    ck_assert_uint_eq(mpt_f32_to_e5m2_sat(-e5_mid), 0xfb);
    ck_assert_uint_eq(mpt_f32_to_e5m2(INFINITY), 0x7c);
    ck_assert_uint_eq(mpt_f32_to_e5m2(-INFINITY), 0xfc);
    ck_assert_uint_eq(mpt_f32_to_e5m2_sat(INFINITY), 0x7b);
    ck_assert_uint_eq(mpt_f32_to_e5m2_sat(-INFINITY), 0xfb);
    /* NaN in any form becomes the canonical 0x7f in both formats and modes */
    const uint32_t nans[4] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu};
    for (int i = 0; i < 4; i++)
        for (int e5 = 0; e5 <= 1; e5++)
            for (int sat = 0; sat <= 1; sat++) ck_assert_uint_eq(mpt_f32_to_fp8(mpt_bits_f32(nans[i]), e5, sat), 0x7f);
}
END_TEST

/* Saturating equals non-saturating wherever the latter stays finite, and is +-max where it overflows. */
START_TEST(test_saturating_is_clamped_nonsaturating) {
    tests_rng r = {2209};
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int i = 0; i < 200000; i++) {
        float x = (float)ldexp(tests_uniform(&r, 1.0, 2.0), tests_int(&r, -30, 30));
        if (tests_next(&r) & 1) x = -x;
        for (int k = 0; k < 2; k++) {
            const fmt *f = fs[k];
            uint8_t ns = enc(f, x, 0), s = enc(f, x, 1);
            if (isfinite(dec(f, ns))) ck_assert_uint_eq(s, ns);
            else ck_assert_msg((double)fabsf(dec(f, s)) == f->max && (s & 0x80u) == (ns & 0x80u), "%s %a", f->name, x);
        }
    }
}
END_TEST

#ifdef MPT_TEST_HAVE_CUDA_FP8
/* Both modes against NVIDIA's reference over FP32 patterns 0, 16411, 32822, ... (every exponent, both signs, many
 * mantissas), the ends of every binade, and the specials. */
static void cuda_compare(uint32_t u) {
    float x = mpt_bits_f32(u);
    for (int e5 = 0; e5 <= 1; e5++) {
        __nv_fp8_interpretation_t in = e5 ? __NV_E5M2 : __NV_E4M3;
        uint8_t want_s = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, in), want_n = __nv_cvt_float_to_fp8(x, __NV_NOSAT, in);
        uint8_t got_s = mpt_f32_to_fp8(x, e5, 1), got_n = mpt_f32_to_fp8(x, e5, 0);
        ck_assert_msg(got_s == want_s && got_n == want_n,
                      "%s(%a = 0x%08x): saturating 0x%02x (CUDA 0x%02x), non-saturating 0x%02x (CUDA 0x%02x)",
                      e5 ? "E5M2" : "E4M3", x, u, got_s, want_s, got_n, want_n);
    }
}

START_TEST(test_against_cuda_reference) {
    for (uint64_t u = 0; u <= 0xffffffffull; u += 16411) cuda_compare((uint32_t)u);
    for (uint32_t e = 0; e < 256; e++)
        for (uint32_t s = 0; s < 2; s++) {
            cuda_compare((s << 31) | (e << 23));
            cuda_compare((s << 31) | (e << 23) | 0x7fffffu);
            cuda_compare((s << 31) | (e << 23) | 0x400000u);
        }
    /* the E8M0 round-up of RCEIL, over positive finite FP32 values (CUDA's is defined for them) */
    for (uint64_t u = 0; u < 0x7f800000ull; u += 4093) {
        float d = mpt_bits_f32((uint32_t)u);
        uint8_t want = __nv_cvt_float_to_e8m0(d, __NV_SATFINITE, cudaRoundPosInf);
        ck_assert_msg(mpt_f32_to_e8m0_ru(d) == want, "E8M0 ru(%a): 0x%02x, CUDA 0x%02x", d, mpt_f32_to_e8m0_ru(d), want);
    }
}
END_TEST
#endif

/* ---- E8M0 and the MX block scale rules --------------------------------------------------------------------- */

/* floor(log2(a)) and ceil(log2(a)) for a > 0, from frexp (a = m * 2^e, m in [1/2, 1)). */
static int floor_log2(double a) {
    int e;
    double m = frexp(a, &e);
    (void)m;
    return e - 1;
}
static int ceil_log2(double a) {
    int e;
    double m = frexp(a, &e);
    return m == 0.5 ? e - 1 : e;
}
static int clamp127(int k) { return k < -127 ? -127 : k > 127 ? 127 : k; }

/* The code each rule gives for amax (finite, > 0), for element format emax / max. */
static unsigned expect_mx(double amax, int emax, double max, int mode) {
    if (mode == MPT_MX_FLOOR) return (unsigned)(clamp127(floor_log2(amax) - emax) + 127);
    if (mode == MPT_MX_CEIL) return (unsigned)(clamp127(ceil_log2(amax) - emax) + 127);
    float d = (float)amax * (float)(1.0 / max); /* RCEIL: amax * (1/max) in FP32, then up to a power of two */
    int k = ceil_log2((double)d);
    return (unsigned)(k < -127 ? 0 : k > 127 ? 254 : k + 127);
}

START_TEST(test_mx_scale_rules) {
    const double pts[] = {1.0, 448.0, 449.0, 500.0, 512.0, 0x1.8p3, 0x1p-20, 3.0e-3, 7.5, 1e30, 0x1.fffffep127};
    tests_rng r = {32};
    for (int i = 0; i < 20000 + (int)(sizeof pts / sizeof pts[0]); i++) {
        double a = i < (int)(sizeof pts / sizeof pts[0]) ? pts[i] : ldexp(tests_uniform(&r, 1.0, 2.0), tests_int(&r, -120, 120));
        if (i % 7 == 0 && i >= (int)(sizeof pts / sizeof pts[0])) a = ldexp(1.0, tests_int(&r, -120, 120)); /* powers of 2 */
        float af = (float)a;
        for (int mode = 0; mode < 3; mode++) {
            ck_assert_uint_eq(mpt_mx_scale_code(af, 0, mode), expect_mx(af, 8, 448.0, mode));
            ck_assert_uint_eq(mpt_mx_scale_code(af, 1, mode), expect_mx(af, 15, 57344.0, mode));
        }
    }
    /* a block whose amax is a power of two 2^k: all three give 2^(k - emax) (RCEIL: 2^k / 448 = 2^(k-8) * 0.57) */
    for (int mode = 0; mode < 3; mode++) {
        ck_assert_uint_eq(mpt_mx_scale_code(0x1p5f, 0, mode), 5 - 8 + 127);
        ck_assert_uint_eq(mpt_mx_scale_code(0x1p5f, 1, mode), 5 - 15 + 127);
    }
    /* 500 = 1.95 * 2^8: FLOOR 2^0 (500 then saturates to 448), CEIL 2^1, RCEIL 2^1 (500/448 = 1.12 -> 2) */
    ck_assert_uint_eq(mpt_mx_scale_code(500.0f, 0, MPT_MX_FLOOR), 127);
    ck_assert_uint_eq(mpt_mx_scale_code(500.0f, 0, MPT_MX_CEIL), 128);
    ck_assert_uint_eq(mpt_mx_scale_code(500.0f, 0, MPT_MX_RCEIL), 128);
    /* 448 = 1.75 * 2^8: FLOOR and RCEIL 2^0 (maps to 448 exactly), CEIL 2^1 */
    ck_assert_uint_eq(mpt_mx_scale_code(448.0f, 0, MPT_MX_FLOOR), 127);
    ck_assert_uint_eq(mpt_mx_scale_code(448.0f, 0, MPT_MX_RCEIL), 127);
    ck_assert_uint_eq(mpt_mx_scale_code(448.0f, 0, MPT_MX_CEIL), 128);
    /* an all-zero block: code 0 (2^-127); a NaN or inf amax: the NaN code */
    for (int mode = 0; mode < 3; mode++) {
        ck_assert_uint_eq(mpt_mx_scale_code(0.0f, 0, mode), 0);
        ck_assert_uint_eq(mpt_mx_scale_code(NAN, 0, mode), 0xff);
        ck_assert_uint_eq(mpt_mx_scale_code(INFINITY, 1, mode), 0xff);
    }
    /* the rounding of E8M0 for `mptrain formats`: nearest, ties (1.5 * 2^e) to the even code */
    ck_assert_uint_eq(mpt_f32_to_e8m0(1.0f), 127);
    ck_assert_uint_eq(mpt_f32_to_e8m0(1.5f), 128);             /* 127 odd: up */
    ck_assert_uint_eq(mpt_f32_to_e8m0(3.0f), 128);             /* 1.5 * 2^1, code 128 even: stays */
    ck_assert_uint_eq(mpt_f32_to_e8m0(nextafterf(3.0f, 4.0f)), 129);
    ck_assert_uint_eq(mpt_f32_to_e8m0(-1.0f), 0xff);
    ck_assert_uint_eq(mpt_f32_to_e8m0(0.0f), 0);
}
END_TEST

/* ---- per-tensor scale -------------------------------------------------------------------------------------- */

START_TEST(test_scale_from_amax) {
    tests_rng r = {448};
    const double fmax[2] = {448.0, 57344.0};
    for (int i = 0; i < 50000; i++) {
        float amax = (float)ldexp(tests_uniform(&r, 1.0, 2.0), tests_int(&r, -60, 60));
        int margin = tests_int(&r, 0, 4), pow2 = tests_int(&r, 0, 1), k = tests_int(&r, 0, 1);
        float scaled_max = (float)ldexp(fmax[k], -margin);
        double want = (double)(float)(fmax[k] / ldexp(1.0, margin) / (double)amax);
        if (pow2) want = ldexp(1.0, floor_log2(want));
        float got = mpt_fp8_scale_from_amax(amax, scaled_max, pow2, -1.0f);
        ck_assert_msg((double)got == want, "amax %a margin %d pow2 %d: %a, expected %a", amax, margin, pow2, got, want);
    }
    ck_assert(mpt_fp8_scale_from_amax(0.0f, 448.0f, 0, 3.0f) == 3.0f);
    ck_assert(mpt_fp8_scale_from_amax(INFINITY, 448.0f, 0, 3.0f) == 3.0f);
    ck_assert(mpt_fp8_scale_from_amax(NAN, 448.0f, 1, 1.0f) == 1.0f);
    ck_assert(mpt_fp8_scale_from_amax(0x1p-140f, 448.0f, 0, 1.0f) == FLT_MAX); /* 448 / 2^-140 overflows FP32 */
    ck_assert(mpt_fp8_scale_from_amax(0x1p-140f, 448.0f, 1, 1.0f) == 0x1p127f);
    ck_assert(mpt_fp8_scale_from_amax(448.0f, 448.0f, 0, 0.0f) == 1.0f);
    ck_assert(mpt_fp8_scale_from_amax(3.0f, 448.0f, 1, 0.0f) == 128.0f); /* 149.3 -> 2^7 */
}
END_TEST

static Suite *fp8_suite(void) {
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("formats");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_decode_all_codes);
    tcase_add_test(tc, test_round_trip_and_ties);
    tcase_add_test(tc, test_saturation_boundaries);
    tcase_add_test(tc, test_saturating_is_clamped_nonsaturating);
#ifdef MPT_TEST_HAVE_CUDA_FP8
    tcase_add_test(tc, test_against_cuda_reference);
#endif
    tcase_add_test(tc, test_mx_scale_rules);
    tcase_add_test(tc, test_scale_from_amax);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(fp8_suite()); }
