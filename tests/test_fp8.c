/*
 * tests/test_fp8.c - the FP8 and MX formats and their scale rules (engine/numerics.h; issue #23 section A).
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
#include "engine/numerics.h"

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

/* E8M0 at the ends of its range, from OCP MX v1.0's definition (code c is 2^(c - 127), c in 0..254; 0xff NaN):
 *  - nearest (mpt_f32_to_e8m0): 1.5 * 2^-127 (the FP32 subnormal 0x00600000) is the midpoint of codes 0 and 1 and
 *    ties to the even code 0, its FP32 neighbours go to the nearer code; 1.5 * 2^-126 ties up to the even code 2;
 *    FLT_MAX, nearer 2^128 (no code: 255 is NaN) than 2^127, takes the last code 254, as does 1.5 * 2^127;
 *  - round up (mpt_f32_to_e8m0_ru, the smallest power of two >= d): 2^-127 is code 0 itself, anything above it up to
 *    2^-126 is code 1, anything at or below it (FP32's smallest subnormal 2^-149 included) code 0; past 2^127 it
 *    saturates at 254. */
START_TEST(test_e8m0_range_ends) {
    ck_assert_uint_eq(mpt_f32_to_e8m0(0x1.8p-127f), 0);
    ck_assert_uint_eq(mpt_f32_to_e8m0(nextafterf(0x1.8p-127f, 1.0f)), 1);
    ck_assert_uint_eq(mpt_f32_to_e8m0(nextafterf(0x1.8p-127f, 0.0f)), 0);
    ck_assert_uint_eq(mpt_f32_to_e8m0(0x1p-127f), 0);
    ck_assert_uint_eq(mpt_f32_to_e8m0(0x1p-126f), 1);
    ck_assert_uint_eq(mpt_f32_to_e8m0(0x1.8p-126f), 2);
    ck_assert_uint_eq(mpt_f32_to_e8m0(0x1p127f), 254);
    ck_assert_uint_eq(mpt_f32_to_e8m0(0x1.8p127f), 254);
    ck_assert_uint_eq(mpt_f32_to_e8m0(FLT_MAX), 254);
    ck_assert_uint_eq(mpt_f32_to_e8m0(INFINITY), 0xff);
    ck_assert_uint_eq(mpt_f32_to_e8m0(NAN), 0xff);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(0x1p-127f), 0);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(nextafterf(0x1p-127f, 1.0f)), 1);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(0x1p-126f), 1);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(0x1p-149f), 0);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(1.0f), 127);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(nextafterf(1.0f, 2.0f)), 128);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(0x1p127f), 254);
    ck_assert_uint_eq(mpt_f32_to_e8m0_ru(FLT_MAX), 254);
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

/* ---- the CPU backend's FP8 kernels ------------------------------------------------------------------------ */

#include "engine/backend.h"

#define EXPECT(cond, ...)                                                                                          \
    do {                                                                                                           \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                                    \
    } while (0)

/* The value code c of format f stands for, from the definition (def_value), as a double. */
static double val(const fmt *f, uint8_t c) { return def_value(f, c); }

/* A random finite code of f (NaN and inf codes excluded), of magnitude at most `max`. */
static uint8_t rand_code_max(tests_rng *r, const fmt *f, double max) {
    for (;;) {
        uint8_t c = (uint8_t)(tests_next(r) >> 56);
        if (isfinite(def_value(f, c)) && fabs(def_value(f, c)) <= max) return c;
    }
}
static uint8_t rand_code(tests_rng *r, const fmt *f) { return rand_code_max(r, f, INFINITY); }

static void run_gemm(mpt_backend *be, mpt_gemm_args *g) {
    size_t need = be->gemm_workspace(be, g);
    EXPECT(mpt_backend_reserve_workspace(be, need) == MPT_OK, "workspace");
    be->gemm(be, g);
}

/* FP8 GEMMs (per-tensor scales, and MX block scales) with FP32 accumulation against the FP64 sum of the decoded,
 * scaled operands. Bound (Higham sec. 3.1, as tests/test_gemm.c): the products are exact in FP32, so only the FP32
 * sum (K terms), the scale factor fl(alpha * fl(sa * sb)) (2 roundings) and the epilogue (beta*C, bias: 3 operations)
 * err: 2 (K + 6) u32 (|alpha sa sb| T + |beta C| + |bias|), then one rounding to C's dtype. */
START_TEST(test_gemm_fp8_fp32_accum) {
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {8};
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int cs = 0; cs < 24; cs++) {
        const int mx = cs % 2, M = 16 * tests_int(&r, 1, 3), N = 16 * tests_int(&r, 1, 3);
        const int K = (int)(mx ? 16 * tests_int(&r, 1, 40) : 16 * tests_int(&r, 1, 64));
        const fmt *fa = fs[tests_int(&r, 0, 1)], *fb = mx ? &E4M3 : fs[tests_int(&r, 0, 1)];
        const mpt_dtype cd = (cs / 2) % 3 == 0 ? MPT_DTYPE_F32 : (cs / 2) % 3 == 1 ? MPT_DTYPE_BF16 : MPT_DTYPE_F16;
        const int bias = cs % 4 >= 2, nb = (K + 31) / 32;
        const float beta = cd == MPT_DTYPE_F32 && cs % 3 == 0 ? 1.0f : 0.0f, alpha = cs % 5 == 0 ? 0.75f : 1.0f;
        uint8_t *A = malloc((size_t)M * K), *B = malloc((size_t)N * K), *sa = malloc((size_t)M * nb),
                *sb = malloc((size_t)N * nb);
        float *bv = malloc((size_t)N * sizeof(float));
        void *C = calloc((size_t)M * N, 4), *C0 = calloc((size_t)M * N, 4);
        const double vmax = cd == MPT_DTYPE_F16 ? 8.0 : INFINITY; /* keep an F16 C finite */
        for (int i = 0; i < M * K; i++) A[i] = rand_code_max(&r, fa, vmax);
        for (int i = 0; i < N * K; i++) B[i] = rand_code_max(&r, fb, vmax);
        for (int i = 0; i < M * nb; i++) sa[i] = (uint8_t)tests_int(&r, 117, 137);
        for (int i = 0; i < N * nb; i++) sb[i] = (uint8_t)tests_int(&r, 117, cd == MPT_DTYPE_F16 ? 124 : 137);
        for (int i = 0; i < N; i++) bv[i] = (float)tests_uniform(&r, -4, 4);
        for (int i = 0; i < M * N; i++) mpt_store_f32(C, cd, i, (float)tests_uniform(&r, -8, 8));
        memcpy(C0, C, (size_t)M * N * 4);
        float a_si = (float)tests_uniform(&r, 1e-3, 1.0), b_si = (float)tests_uniform(&r, 1e-3, 1.0);
        mpt_gemm_args g = {0};
        g.trans_a = 0;
        g.trans_b = 1;
        g.M = M;
        g.N = N;
        g.K = K;
        g.A = A;
        g.a_dtype = fa == &E5M2 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3;
        g.B = B;
        g.b_dtype = fb == &E5M2 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3;
        g.C = C;
        g.c_dtype = cd;
        g.bias = bias ? bv : NULL;
        g.bias_dtype = MPT_DTYPE_F32;
        g.epilogue = bias ? MPT_EPILOGUE_BIAS : MPT_EPILOGUE_NONE;
        g.alpha = alpha;
        g.beta = beta;
        g.math = mx ? MPT_MATH_MXFP8 : MPT_MATH_FP8;
        g.a_scale_inv = &a_si;
        g.b_scale_inv = &b_si;
        g.a_block_scales = sa;
        g.b_block_scales = sb;
        g.tag = "fp8 test";
        run_gemm(be, &g);
        const double f = mx ? (double)alpha : (double)alpha * (double)a_si * (double)b_si;
        const double uo = cd == MPT_DTYPE_F32 ? 0 : cd == MPT_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double sum = 0, T = 0;
                for (int k = 0; k < K; k++) {
                    double x = val(fa, A[i * K + k]), y = val(fb, B[j * K + k]);
                    if (mx) x *= ldexp(1.0, sa[i * nb + k / 32] - 127), y *= ldexp(1.0, sb[j * nb + k / 32] - 127);
                    sum += x * y;
                    T += fabs(x * y);
                }
                double ref = f * sum, extra = 0;
                if (beta != 0.0f) ref += (double)beta * mpt_load_f32(C0, cd, i * N + j), extra += fabs(mpt_load_f32(C0, cd, i * N + j));
                if (bias) ref += bv[j], extra += fabs(bv[j]);
                double e32 = 2.0 * (K + 6) * 0x1p-24 * (fabs(f) * T + extra);
                double bound = e32 + uo * (fabs(ref) + e32) + 1e-30;
                double got = mpt_load_f32(C, cd, i * N + j);
                EXPECT(fabs(got - ref) <= bound, "case %d (%s, %s x %s, K %d, C %s): C[%d,%d] = %.9g, FP64 %.9g, bound %.3g",
                       cs, mx ? "mxfp8" : "fp8", fa->name, fb->name, K, mpt_dtype_name(cd), i, j, got, ref, bound);
            }
        free(A), free(B), free(sa), free(sb), free(bv), free(C), free(C0);
    }
    mpt_backend_free(&be);
}
END_TEST

/* The fast accumulator, written here independently of kernels/cpu/fp8.c from the model's description (kernels/cpu/
 * gemm.c): exact products in FP64, exponents from frexp, truncations by floor on magnitudes. */
static int model_exp(double a, const fmt *f) { /* exponent of an FP8 value's leading bit; emin for subnormals */
    int e;
    frexp(fabs(a), &e);
    int emin = 1 - f->bias;
    return e - 1 < emin ? emin : e - 1;
}
static double trunc_to(double x, double unit) { return (x < 0 ? -1 : 1) * floor(fabs(x) / unit) * unit; }
static double model_block(double c, const double *a, const double *b, int n, const fmt *fa, const fmt *fb) {
    int emax = INT32_MIN;
    for (int i = 0; i < n; i++)
        if (a[i] != 0 && b[i] != 0) {
            int e = model_exp(a[i], fa) + model_exp(b[i], fb);
            if (e > emax) emax = e;
        }
    if (c != 0) {
        int e;
        frexp(fabs(c), &e);
        if (e - 1 > emax) emax = e - 1;
    }
    if (emax == INT32_MIN) return c;
    const double unit = ldexp(1.0, emax - 13);
    double s = trunc_to(c, unit);
    for (int i = 0; i < n; i++) s += trunc_to(a[i] * b[i], unit);
    if (s == 0) return 0;
    int e;
    frexp(fabs(s), &e); /* |s| in [2^(e-1), 2^e): keep 14 significant bits */
    return trunc_to(s, ldexp(1.0, e - 14));
}
static double model_dot(const double *a, const double *b, int K, int promote, const fmt *fa, const fmt *fb) {
    double part = 0, acc = 0;
    int since = 0;
    for (int k0 = 0; k0 < K; k0 += 32) {
        int n = K - k0 < 32 ? K - k0 : 32;
        part = model_block(part, a + k0, b + k0, n, fa, fb);
        since += n;
        if (promote && since >= promote) {
            acc = (double)((float)acc + (float)part); /* one FP32 addition */
            part = 0;
            since = 0;
        }
    }
    return promote ? (double)((float)acc + (float)part) : part;
}

/* C (F32 [M, N]) of an FP8 GEMM with unit scales, alpha 1, accumulator accum / promote. */
static void fp8_gemm(mpt_backend *be, const uint8_t *A, mpt_dtype at, const uint8_t *B, mpt_dtype bt, int M, int N,
                     int K, mpt_fp8_accum accum, int promote, float *C) {
    static const float one = 1.0f;
    mpt_gemm_args g = {0};
    g.trans_b = 1;
    g.M = M, g.N = N, g.K = K;
    g.A = A, g.a_dtype = at, g.B = B, g.b_dtype = bt;
    g.C = C, g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.math = MPT_MATH_FP8;
    g.a_scale_inv = &one, g.b_scale_inv = &one;
    g.fp8_accum = accum;
    g.fp8_promote = promote;
    g.tag = "fast test";
    run_gemm(be, &g);
}

START_TEST(test_fast_accumulator_model) {
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {14};
    static const int ks[] = {1, 16, 31, 32, 33, 64, 100, 128, 256, 1000};
    for (int cs = 0; cs < 40; cs++) {
        const fmt *fa = cs % 2 ? &E5M2 : &E4M3, *fb = &E4M3;
        const int K = ks[cs % 10], M = 3, N = 4, promote = cs % 3 == 0 ? 0 : cs % 3 == 1 ? 32 : 128;
        uint8_t *A = malloc((size_t)M * K), *B = malloc((size_t)N * K);
        for (int i = 0; i < M * K; i++) A[i] = rand_code(&r, fa);
        for (int i = 0; i < N * K; i++) B[i] = rand_code(&r, fb);
        if (cs % 4 == 3) /* zeros and mixed magnitudes: many products vanish, the alignment varies per block */
            for (int i = 0; i < M * K; i += 3) A[i] = 0;
        float C[12];
        fp8_gemm(be, A, fa == &E5M2 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, M, N, K, MPT_FP8_ACCUM_FAST,
                 promote, C);
        double *a = malloc(sizeof(double) * K), *b = malloc(sizeof(double) * K);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                for (int k = 0; k < K; k++) a[k] = val(fa, A[i * K + k]), b[k] = val(fb, B[j * K + k]);
                double want = model_dot(a, b, K, promote, fa, fb);
                EXPECT((double)C[i * N + j] == want, "case %d (%s x %s, K %d, promote %d): C[%d,%d] = %a, model %a", cs,
                       fa->name, fb->name, K, promote, i, j, C[i * N + j], want);
            }
        free(a), free(b), free(A), free(B);
    }
    /* constructed: products 2^-14 beside 1 fall below the grid 2^(0 - 13) and are lost; FP32 keeps them */
    {
        uint8_t A[32] = {0}, B[32] = {0};
        A[0] = B[0] = 0x38; /* 1.0 */
        A[1] = B[1] = A[2] = B[2] = 0x04; /* 2^-7 = 4 * 2^-9 (subnormal E4M3): products 2^-14 */
        float c_fast, c_32;
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 32, MPT_FP8_ACCUM_FAST, 0, &c_fast);
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 32, MPT_FP8_ACCUM_FP32, 0, &c_32);
        EXPECT(c_fast == 1.0f && c_32 == 1.0f + 0x1p-13f, "fast %a (expected 1), fp32 %a (expected 1 + 2^-13)", c_fast, c_32);
    }
    /* constructed: 32 products 32 * 1 make the accumulator 1024; then 32 products 2^-4 (2^-2 x 2^-2) fall below its grid
     * 2^(10 - 13) in the next block and are lost (fast: 1024); promoting every 32 adds that block's own 2 in FP32 (1026) */
    {
        uint8_t A[64], B[64];
        for (int k = 0; k < 32; k++) A[k] = 0x60, B[k] = 0x38;          /* 32 (2^5) x 1 */
        for (int k = 32; k < 64; k++) A[k] = B[k] = 0x28;               /* 2^-2 x 2^-2 */
        ck_assert(val(&E4M3, 0x60) == 32.0 && val(&E4M3, 0x28) == 0.25);
        float c_fast, c_prom, c_32;
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 64, MPT_FP8_ACCUM_FAST, 0, &c_fast);
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 64, MPT_FP8_ACCUM_FAST, 32, &c_prom);
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 64, MPT_FP8_ACCUM_FP32, 0, &c_32);
        EXPECT(c_fast == 1024.0f && c_prom == 1026.0f && c_32 == 1026.0f, "fast %g (1024), promoted %g (1026), fp32 %g (1026)",
               c_fast, c_prom, c_32);
    }
    /* constructed: a partial sum far below the next block's products (2^-8 after the first block, then 448 x 448 =
     * 200704: the grid is 2^(16 - 13), c's significand shifted right by 34 bits) is truncated to nothing, not
     * wrapped around; FP32 rounds it away too (ulp of 200704: 2^-6) */
    {
        uint8_t A[64] = {0}, B[64] = {0};
        A[0] = B[0] = 0x18;  /* 2^-4: the product 2^-8 */
        A[32] = B[32] = 0x7e; /* 448 */
        ck_assert(val(&E4M3, 0x18) == 0x1p-4 && val(&E4M3, 0x7e) == 448.0);
        float c_fast, c_32;
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 64, MPT_FP8_ACCUM_FAST, 0, &c_fast);
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 64, MPT_FP8_ACCUM_FP32, 0, &c_32);
        double a[64], b[64];
        for (int k = 0; k < 64; k++) a[k] = val(&E4M3, A[k]), b[k] = val(&E4M3, B[k]);
        EXPECT(c_fast == 200704.0f && c_32 == 200704.0f && model_dot(a, b, 64, 0, &E4M3, &E4M3) == 200704.0,
               "fast %.9g, fp32 %.9g (expected 200704 both)", c_fast, c_32);
    }
    /* constructed: a NaN operand in the first block makes that block's sum NaN, and NaN + finite products stays NaN in
     * the second block (IEEE; the model sums finite terms only). The accumulator once read a NaN c as the finite
     * significand of its bits times 2^128 and returned +inf. With an infinity the same: +inf stays +inf. */
    {
        uint8_t A[64], B[64];
        for (int k = 0; k < 64; k++) A[k] = B[k] = 0x38; /* 1.0 */
        A[0] = 0x7f;                                     /* E4M3 NaN */
        float c_fast, c_prom;
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 64, MPT_FP8_ACCUM_FAST, 0, &c_fast);
        fp8_gemm(be, A, MPT_DTYPE_E4M3, B, MPT_DTYPE_E4M3, 1, 1, 64, MPT_FP8_ACCUM_FAST, 32, &c_prom);
        EXPECT(c_fast != c_fast && c_prom != c_prom, "NaN in block 1: fast %g, promoted every 32 %g (expected NaN)",
               c_fast, c_prom);
        A[0] = 0x7b, B[0] = 0x7c; /* E5M2 x E5M2: 57344 x inf = +inf */
        for (int k = 1; k < 64; k++) A[k] = B[k] = 0x3c; /* E5M2 1.0 */
        fp8_gemm(be, A, MPT_DTYPE_E5M2, B, MPT_DTYPE_E5M2, 1, 1, 64, MPT_FP8_ACCUM_FAST, 0, &c_fast);
        EXPECT(c_fast == INFINITY, "inf in block 1: fast %g (expected +inf)", c_fast);
    }
    mpt_backend_free(&be);
}
END_TEST

/* The per-step update on a constructed amax sequence: delayed scaling takes the maximum of the last `len` amaxes
 * (this step's included), keeps the scale while the window holds nothing, records a non-finite amax as 0. */
START_TEST(test_delayed_scaling_sequence) {
    mpt_backend *be = mpt_backend_cpu_create();
    const float seq[] = {0.0f, 2.0f, 8.0f, 1.0f, 0.5f, 0.25f, NAN, 4.0f, INFINITY, 0.125f};
    const int n_seq = (int)(sizeof seq / sizeof seq[0]), len = 3;
    for (int variant = 0; variant < 3; variant++) { /* margin 0; margin 1; margin 0 + pow2 */
        const int margin = variant == 1, pow2 = variant == 2;
        mpt_fp8_meta m = {.scale = 1.0f, .scale_inv = 1.0f, .fmax = 448.0f};
        float hist[3] = {0, 0, 0};
        int64_t it = 0;
        double want_scale = 1.0;
        for (int t = 0; t < n_seq; t++, it++) {
            m.amax = seq[t];
            mpt_fp8_update_args u = {.meta = &m, .history = hist, .n = 1, .len = len, .iteration = &it, .delayed = 1,
                                     .margin_factor = ldexpf(1.0f, -margin), .pow2 = pow2};
            be->fp8_update(be, &u);
            double w = 0; /* the window: steps t-2..t, non-finite as 0 */
            for (int j = t - len + 1; j <= t; j++)
                if (j >= 0 && isfinite(seq[j]) && seq[j] > w) w = seq[j];
            if (w > 0) {
                want_scale = (double)(float)(448.0 / ldexp(1.0, margin) / w);
                if (pow2) want_scale = ldexp(1.0, floor_log2(want_scale));
            }
            EXPECT((double)m.scale == want_scale && m.scale_inv == 1.0f / m.scale,
                   "variant %d step %d (amax %g): scale %a, expected %a", variant, t, (double)seq[t], m.scale, want_scale);
            EXPECT(hist[t % len] == (isfinite(seq[t]) ? seq[t] : 0.0f), "step %d: history slot %d holds %g", t, t % len,
                   (double)hist[t % len]);
            if (w > 0) EXPECT((double)m.amax_used == w, "step %d: amax_used %g, window max %g", t, (double)m.amax_used, w);
        }
    }
    /* current scaling (delayed = 0) records the history but leaves the scale alone */
    mpt_fp8_meta m = {.scale = 3.0f, .scale_inv = 1.0f / 3.0f, .fmax = 57344.0f, .amax = 5.0f};
    float hist[2] = {0, 0};
    int64_t it = 7;
    mpt_fp8_update_args u = {.meta = &m, .history = hist, .n = 1, .len = 2, .iteration = &it, .delayed = 0,
                             .margin_factor = 1.0f};
    be->fp8_update(be, &u);
    ck_assert(m.scale == 3.0f && hist[1] == 5.0f && hist[0] == 0.0f);
    mpt_backend_free(&be);
}
END_TEST

/* The per-tensor cast: q = fp8(x * s) (one FP32 product, then RNE), qt its transpose, amax = max |x|; current
 * scaling sets s from the amax first; a NaN sets found_inf. */
START_TEST(test_cast_per_tensor) {
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {5};
    const int R = 5, C = 7;
    uint16_t x[35];
    double amax = 0;
    for (int i = 0; i < R * C; i++) {
        x[i] = mpt_f32_to_bf16((float)(tests_uniform(&r, -3, 3) * ldexp(1.0, tests_int(&r, -12, 6))));
        amax = fmax(amax, fabs(mpt_bf16_to_f32(x[i])));
    }
    for (int current = 0; current <= 1; current++)
        for (int e5 = 0; e5 <= 1; e5++) {
            uint8_t q[35], qt[35];
            float found = 0.0f;
            mpt_fp8_meta m = {.scale = 17.5f, .scale_inv = 1.0f / 17.5f, .fmax = e5 ? 57344.0f : 448.0f, .e5m2 = e5};
            mpt_fp8_cast_args a = {.x = x, .x_dtype = MPT_DTYPE_BF16, .rows = R, .cols = C,
                                   .fmt = e5 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3, .q = q, .qt = qt, .saturate = 1,
                                   .meta = &m, .current = current, .scaled_max = m.fmax, .found_inf = &found, .tag = "t"};
            be->fp8_cast(be, &a);
            ck_assert((double)m.amax == amax && found == 0.0f);
            const float s = current ? (float)((double)(float)(m.fmax / amax)) : 17.5f;
            ck_assert(m.scale == s && (!current || m.scale_inv == 1.0f / s));
            for (int i = 0; i < R; i++)
                for (int j = 0; j < C; j++) {
                    const uint8_t want = mpt_f32_to_fp8(mpt_bf16_to_f32(x[i * C + j]) * s, e5, 1);
                    EXPECT(q[i * C + j] == want && qt[j * R + i] == want, "x[%d,%d]: q 0x%02x, qt 0x%02x, expected 0x%02x",
                           i, j, q[i * C + j], qt[j * R + i], want);
                }
        }
    x[11] = 0x7fc0; /* BF16 NaN */
    uint8_t q[35];
    float found = 0.0f;
    mpt_fp8_meta m = {.scale = 1.0f, .scale_inv = 1.0f, .fmax = 448.0f};
    mpt_fp8_cast_args a = {.x = x, .x_dtype = MPT_DTYPE_BF16, .rows = R, .cols = C, .fmt = MPT_DTYPE_E4M3, .q = q,
                           .saturate = 1, .meta = &m, .found_inf = &found, .tag = "nan"};
    be->fp8_cast(be, &a);
    ck_assert(isnan(m.amax) && found == 1.0f && q[11] == 0x7f);
    mpt_backend_free(&be);
}
END_TEST

/* The scale state at its edges, from the contracts of engine/backend.h (fp8_cast, fp8_update) and TransformerEngine's
 * rules they cite, with hand-chosen inputs:
 *  - an inf in the tensor makes the amax inf: found_inf is set (the step is skipped, as for a NaN);
 *  - current scaling of a tensor with a NaN: the scale falls back to 1 (TE compute_scale_from_amax), and amax_used,
 *    which the checkpoint requires finite and >= 0 (mpt_fp8_state_from_host), keeps its last finite value;
 *  - an MX block holding a NaN gets the NaN scale code 0xff (OCP MX v1.0 section 6.3: a block whose amax is NaN has a
 *    NaN scale), its neighbour block its own code, and found_inf is set;
 *  - delayed scaling whose window holds nothing (all amaxes 0) keeps the scale and the amax it came from. */
START_TEST(test_scale_state_edges) {
    mpt_backend *be = mpt_backend_cpu_create();
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = 0.5f;
    x[5] = INFINITY;
    uint8_t q[64];
    float found = 0.0f;
    mpt_fp8_meta m = {.scale = 2.0f, .scale_inv = 0.5f, .amax_used = 3.0f, .fmax = 448.0f};
    mpt_fp8_cast_args a = {.x = x, .x_dtype = MPT_DTYPE_F32, .rows = 2, .cols = 32, .fmt = MPT_DTYPE_E4M3, .q = q,
                           .saturate = 1, .meta = &m, .found_inf = &found, .tag = "inf"};
    be->fp8_cast(be, &a);
    ck_assert(m.amax == INFINITY && found == 1.0f && m.scale == 2.0f && q[5] == 0x7e && q[0] == 0x38); /* 0.5 * 2 */
    /* current scaling, a NaN: scale 1, amax_used kept */
    x[5] = NAN;
    found = 0.0f;
    a.current = 1;
    a.scaled_max = 448.0f;
    a.tag = "nan";
    be->fp8_cast(be, &a);
    ck_assert(isnan(m.amax) && found == 1.0f && m.scale == 1.0f && m.scale_inv == 1.0f && m.amax_used == 3.0f);
    /* MX: the NaN's block (row 0) gets code 0xff, row 1's block of 0.5s 2^(-1 - 8) (FLOOR) */
    uint8_t qs[2];
    found = 0.0f;
    mpt_fp8_cast_args mx = {.x = x, .x_dtype = MPT_DTYPE_F32, .rows = 2, .cols = 32, .fmt = MPT_DTYPE_E4M3, .q = q,
                            .saturate = 1, .meta = &m, .mx = 1, .mx_rounding = MPT_MX_FLOOR, .q_scales = qs,
                            .found_inf = &found, .tag = "mx"};
    be->fp8_cast(be, &mx);
    ck_assert_uint_eq(qs[0], 0xff);
    ck_assert_uint_eq(qs[1], 127 - 1 - 8);
    ck_assert(found == 1.0f && q[5] == 0x7f && q[32] == 0x78); /* 0.5 * 2^9 = 256 = 1.0 x 2^8 */
    /* delayed scaling, an empty window */
    mpt_fp8_meta d = {.scale = 448.0f / 3.0f, .scale_inv = 1.0f / (448.0f / 3.0f), .amax_used = 3.0f, .fmax = 448.0f};
    float hist[4] = {0, 0, 0, 0};
    int64_t it = 9;
    mpt_fp8_update_args u = {.meta = &d, .history = hist, .n = 1, .len = 4, .iteration = &it, .delayed = 1,
                             .margin_factor = 1.0f};
    be->fp8_update(be, &u);
    ck_assert(d.scale == 448.0f / 3.0f && d.scale_inv == 1.0f / d.scale && d.amax_used == 3.0f && hist[1] == 0.0f);
    mpt_backend_free(&be);
}
END_TEST

/* MX blocks built to show each case: an all-zero block (code 0, zeros), a block whose max is a power of two (2^5:
 * FLOOR gives 2^(5 - 8), the max maps to 256), a block with one huge value (10^6: its scale flushes the small ones
 * to zero), a short last block (80 = 2 x 32 + 16); rows along q, columns along qt. */
START_TEST(test_mx_blocks) {
    mpt_backend *be = mpt_backend_cpu_create();
    enum { R = 33, C = 80 };
    static float x[R * C];
    tests_rng r = {6};
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            float v;
            if (j < 32) v = 0.0f;                                             /* block 0: zeros */
            else if (j < 64) v = (float)tests_uniform(&r, -31.9, 31.9);       /* block 1: max 2^5 below */
            else v = (float)tests_uniform(&r, -1e-3, 1e-3);                   /* block 2 (16 wide): small, one huge */
            x[i * C + j] = v;
        }
    for (int i = 0; i < R; i++) x[i * C + 40] = i % 2 ? -32.0f : 32.0f; /* block 1's max: exactly 2^5 */
    x[3 * C + 70] = 1e6f;
    for (int rounding = 0; rounding < 3; rounding++) {
        static uint8_t q[R * C], qt[R * C], qs[R * 3], qts[C * 2];
        mpt_fp8_meta m = {.scale = 1.0f, .scale_inv = 1.0f, .fmax = 448.0f};
        mpt_fp8_cast_args a = {.x = x, .x_dtype = MPT_DTYPE_F32, .rows = R, .cols = C, .fmt = MPT_DTYPE_E4M3, .q = q,
                               .qt = qt, .saturate = 1, .meta = &m, .mx = 1, .mx_rounding = rounding, .q_scales = qs,
                               .qt_scales = qts, .tag = "mx"};
        be->fp8_cast(be, &a);
        ck_assert(m.amax == 1e6f);
        for (int i = 0; i < R; i++) {
            ck_assert_uint_eq(qs[i * 3 + 0], 0); /* all zeros: code 0 (2^-127) */
            for (int j = 0; j < 32; j++) ck_assert_uint_eq(q[i * C + j], 0);
            ck_assert_uint_eq(qs[i * 3 + 1], 127 + 5 - 8); /* every rule: 2^(5 - 8) for a max of exactly 2^5 */
            ck_assert_uint_eq(q[i * C + 40], i % 2 ? 0xf8 : 0x78); /* +-32 / 2^-3 = +-256 = 1.0 x 2^8 */
            for (int j = 32; j < 64; j++)
                ck_assert_uint_eq(q[i * C + j], mpt_f32_to_e4m3_sat(x[i * C + j] * 8.0f));
            /* block 2: its amax from the definitions of the three rules */
            double am = 0;
            for (int j = 64; j < 80; j++) am = fmax(am, fabs(x[i * C + j]));
            const unsigned want = expect_mx(am, 8, 448.0, rounding);
            ck_assert_uint_eq(qs[i * 3 + 2], want);
            for (int j = 64; j < 80; j++) {
                const uint8_t w = mpt_f32_to_e4m3_sat((float)(x[i * C + j] * ldexp(1.0, 127 - (int)want)));
                ck_assert_uint_eq(q[i * C + j], w);
                if (i == 3 && j != 70) ck_assert_uint_eq(q[i * C + j] & 0x7f, 0); /* flushed beside 10^6 */
            }
        }
        /* qt: column j of x in blocks of 32 rows (33 = 32 + 1) */
        for (int j = 0; j < C; j++)
            for (int b = 0; b < 2; b++) {
                const int r0 = 32 * b, r1 = b ? R : 32;
                double am = 0;
                for (int i = r0; i < r1; i++) am = fmax(am, fabs(x[i * C + j]));
                const unsigned want = am == 0 ? 0 : expect_mx(am, 8, 448.0, rounding);
                EXPECT(qts[j * 2 + b] == want, "column %d block %d: code %u, expected %u", j, b, qts[j * 2 + b], want);
                for (int i = r0; i < r1; i++)
                    EXPECT(qt[j * R + i] == mpt_f32_to_e4m3_sat((float)(x[i * C + j] * ldexp(1.0, 127 - (int)want))),
                           "qt[%d, %d]", j, i);
            }
    }
    mpt_backend_free(&be);
}
END_TEST

/* ---- training --------------------------------------------------------------------------------------------- */

#include "datasets/synthetic.h"
#include "engine/layers/layers.h"
#include "engine/train.h"
#include "models/models.h"

typedef struct fp8_run {
    mpt_backend *be;
    mpt_trainer *tr;
    mpt_mnist data;
} fp8_run;

/* An MLP 64 -> 64 -> 8 (fc1 qualifies for FP8, fc2's 8 outputs do not) on synthetic blobs, or lenet5 on 28 x 28. */
static void fp8_open(fp8_run *r, mpt_precision mode, const mpt_fp8_recipe *rec, const char *model, int batch) {
    memset(r, 0, sizeof *r);
    const int lenet = model != NULL;
    ck_assert_int_eq(mpt_synthetic_blobs(&r->data, 2048, 512, lenet ? 784 : 64, lenet ? 10 : 8, 77), MPT_OK);
    r->be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(mode, 0, 0);
    if (rec) pol.fp8 = *rec;
    mpt_graph *g = mpt_graph_create(r->be, &pol, batch);
    mpt_tensor *x;
    if (lenet) {
        ck_assert_int_eq(mpt_model_build(g, model, &x), MPT_OK);
    } else {
        int64_t shape[2] = {batch, r->data.dim};
        x = mpt_input(g, 2, shape);
        x = mpt_relu(g, mpt_linear(g, x, 64, "fc1"), "relu1");
        x = mpt_linear(g, x, r->data.n_classes, "fc2");
    }
    mpt_softmax_xent(g, x, "loss");
    mpt_train_config cfg = mpt_train_config_default(mode);
    ck_assert_int_eq(mpt_trainer_create(&r->tr, g, &cfg), MPT_OK);
}

static void fp8_close(fp8_run *r) {
    mpt_trainer_free(&r->tr);
    mpt_backend_free(&r->be);
    mpt_mnist_free(&r->data);
}

static void fp8_steps(fp8_run *r, int steps) {
    const int b = r->tr->g->batch;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)b);
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < b; i++) idx[i] = (int32_t)((s * b + i * 7) % r->data.n_train);
        mpt_trainer_gather(r->tr, r->data.train_images, r->data.train_labels, idx, r->data.dim, 0.0f, 1.0f);
        mpt_trainer_step(r->tr);
    }
    free(idx);
}

static double fp8_accuracy(fp8_run *r) {
    const int b = r->tr->g->batch;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)b);
    mpt_trainer_reset_correct(r->tr);
    int64_t counted = 0;
    for (int64_t s = 0; s + b <= r->data.n_test; s += b, counted += b) {
        for (int i = 0; i < b; i++) idx[i] = (int32_t)(s + i);
        mpt_trainer_gather(r->tr, r->data.test_images, r->data.test_labels, idx, r->data.dim, 0.0f, 1.0f);
        mpt_trainer_eval_batch(r->tr);
    }
    free(idx);
    mpt_train_stats st;
    mpt_trainer_stats(r->tr, &st);
    return (double)st.n_correct / (double)counted;
}

/* Every FP8 mode and recipe learns the blobs (> 90%) without a skipped step, fc1 in FP8 and fc2 in BF16, and the
 * delayed scales moved off their initial 1 to fmax / amax of their histories. */
START_TEST(test_fp8_modes_learn) {
    struct { mpt_precision mode; mpt_fp8_scaling scaling; mpt_fp8_accum accum; int promote, mx; } cases[] = {
        {MPT_PRECISION_FP8, MPT_FP8_SCALING_DELAYED, MPT_FP8_ACCUM_FP32, 0, MPT_MX_FLOOR},
        {MPT_PRECISION_FP8, MPT_FP8_SCALING_CURRENT, MPT_FP8_ACCUM_FP32, 0, MPT_MX_FLOOR},
        {MPT_PRECISION_FP8_E4M3, MPT_FP8_SCALING_DELAYED, MPT_FP8_ACCUM_FP32, 0, MPT_MX_FLOOR},
        {MPT_PRECISION_FP8, MPT_FP8_SCALING_DELAYED, MPT_FP8_ACCUM_FAST, 64, MPT_MX_FLOOR},
        {MPT_PRECISION_MXFP8, MPT_FP8_SCALING_DELAYED, MPT_FP8_ACCUM_FP32, 0, MPT_MX_RCEIL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mpt_fp8_recipe rec = mpt_fp8_recipe_default();
        rec.scaling = cases[c].scaling;
        rec.accum = cases[c].accum;
        rec.promote = cases[c].promote;
        rec.mx_rounding = cases[c].mx;
        fp8_run r;
        fp8_open(&r, cases[c].mode, &rec, NULL, 64);
        const mpt_graph *g = r.tr->g;
        ck_assert(g->nodes[1]->fp8 && g->nodes[1]->math == (cases[c].mode == MPT_PRECISION_MXFP8 ? MPT_MATH_MXFP8 : MPT_MATH_FP8));
        ck_assert(!g->nodes[3]->fp8 && g->nodes[3]->math == MPT_MATH_BF16);
        ck_assert_int_eq(g->n_fp8, 3);
        ck_assert(g->fp8[2].fmt == (cases[c].mode == MPT_PRECISION_FP8 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3));
        /* every scale_inv a GEMM reads is 16-byte aligned: cuBLASLt 13.1 refuses an FP8 GEMM otherwise (measured on
         * an H200, bench/results/gpu-2026-11-26-b.md); the CPU backend lays the metas out as the CUDA one does */
        for (int i = 0; i < g->n_fp8; i++)
            EXPECT((uintptr_t)&g->fp8_meta[i].scale_inv % 16 == 0, "case %zu: %s scale_inv at %p", c, g->fp8[i].name,
                   (const void *)&g->fp8_meta[i].scale_inv);
        fp8_steps(&r, 64);
        const double acc = fp8_accuracy(&r);
        mpt_train_stats st;
        mpt_trainer_stats(r.tr, &st);
        EXPECT(acc > 0.9 && st.steps_skipped == 0, "case %zu (%s): accuracy %.3f, %d skipped", c,
               mpt_precision_name(cases[c].mode), acc, st.steps_skipped);
        if (cases[c].mode != MPT_PRECISION_MXFP8)
            for (int i = 0; i < g->n_fp8; i++) {
                const mpt_fp8_meta *m = &g->fp8_meta[i];
                EXPECT(m->amax_used > 0 && m->scale == mpt_fp8_scale_from_amax(m->amax_used, m->fmax, 0, -1.0f),
                       "case %zu: %s scale %g from amax %g", c, g->fp8[i].name, (double)m->scale, (double)m->amax_used);
            }
        fp8_close(&r);
    }
}
END_TEST

/* lenet5's linear layers (120, 84, 10 outputs) do not qualify: in every FP8 mode it trains bit for bit as in bf16. */
START_TEST(test_lenet5_fp8_is_bf16) {
    const mpt_precision modes[4] = {MPT_PRECISION_BF16, MPT_PRECISION_FP8, MPT_PRECISION_FP8_E4M3, MPT_PRECISION_MXFP8};
    float *ref = NULL;
    int64_t n_ref = 0;
    for (int m = 0; m < 4; m++) {
        fp8_run r;
        fp8_open(&r, modes[m], NULL, "lenet5", 16);
        ck_assert_int_eq(r.tr->g->n_fp8, 0);
        fp8_steps(&r, 3);
        int64_t n = 0;
        for (int i = 0; i < r.tr->n_params; i++) n += mpt_tensor_numel(r.tr->master[i]);
        float *w = malloc(sizeof(float) * (size_t)n);
        int64_t off = 0;
        for (int i = 0; i < r.tr->n_params; i++) {
            const int64_t k = mpt_tensor_numel(r.tr->master[i]);
            memcpy(w + off, r.tr->master[i]->data, sizeof(float) * (size_t)k);
            off += k;
        }
        if (!ref) {
            ref = w;
            n_ref = n;
        } else {
            EXPECT(n == n_ref && memcmp(w, ref, sizeof(float) * (size_t)n) == 0, "%s lenet5 differs from bf16",
                   mpt_precision_name(modes[m]));
            free(w);
        }
        fp8_close(&r);
    }
    free(ref);
}
END_TEST

/* A NaN in an FP8 operand (here the batch itself) makes its amax non-finite: the step is skipped like one with
 * non-finite gradients (masters unchanged), the history records 0 for it, and the next clean step trains. */
START_TEST(test_nonfinite_amax_skips_step) {
    fp8_run r;
    fp8_open(&r, MPT_PRECISION_FP8, NULL, NULL, 64);
    fp8_steps(&r, 2);
    mpt_graph *g = r.tr->g;
    const int64_t n0 = mpt_tensor_numel(r.tr->master[0]);
    float *before = malloc(sizeof(float) * (size_t)n0);
    memcpy(before, r.tr->master[0]->data, sizeof(float) * (size_t)n0);
    /* the batch of the last step is still in g->input: poison one element and step on it without a gather */
    ((uint16_t *)g->input->data)[5] = 0x7fc0;
    mpt_trainer_step(r.tr);
    mpt_train_stats st;
    mpt_trainer_stats(r.tr, &st);
    ck_assert_int_eq(st.steps_skipped, 1);
    ck_assert(memcmp(before, r.tr->master[0]->data, sizeof(float) * (size_t)n0) == 0);
    ck_assert(g->fp8_history[0 * mpt_fp8_history_len(g) + 2] == 0.0f); /* fc1.x at iteration 2 */
    ck_assert(g->fp8_history[1 * mpt_fp8_history_len(g) + 2] > 0.0f);  /* fc1.weight's amax is recorded */
    fp8_steps(&r, 1);
    mpt_trainer_stats(r.tr, &st);
    ck_assert_int_eq(st.steps_skipped, 1);
    ck_assert(memcmp(before, r.tr->master[0]->data, sizeof(float) * (size_t)n0) != 0);
    free(before);
    fp8_close(&r);
}
END_TEST

/* The FP8 state a checkpoint restores is checked before anything is written (engine/amp/fp8.h): a scale_inv that is
 * not the FP32 inverse of its scale (one ulp off here), a negative or NaN amax_used, a negative history entry are
 * refused with MPT_ERR_FORMAT naming the file, and the state on the backend is what it was; the state as read
 * restores. */
START_TEST(test_fp8_state_restore_checks) {
    fp8_run r;
    mpt_fp8_recipe rec = mpt_fp8_recipe_default();
    rec.amax_history = 4;
    fp8_open(&r, MPT_PRECISION_FP8, &rec, NULL, 64);
    fp8_steps(&r, 3);
    mpt_graph *g = r.tr->g;
    ck_assert_int_gt(g->n_fp8, 0);
    const int len = mpt_fp8_history_len(g), n = g->n_fp8;
    float *state = malloc(sizeof(float) * 3 * (size_t)n), *hist = malloc(sizeof(float) * (size_t)(n * len));
    float *state2 = malloc(sizeof(float) * 3 * (size_t)n), *hist2 = malloc(sizeof(float) * (size_t)(n * len));
    mpt_fp8_state_to_host(g, state, hist);
    ck_assert(state[0] != 1.0f && state[1] == 1.0f / state[0]); /* the scale moved off 1 in three steps */
    for (int bad = 0; bad < 4; bad++) {
        memcpy(state2, state, sizeof(float) * 3 * (size_t)n);
        memcpy(hist2, hist, sizeof(float) * (size_t)(n * len));
        if (bad == 0) state2[1] = nextafterf(state2[1], INFINITY);
        if (bad == 1) state2[2] = -1.0f;
        if (bad == 2) state2[2] = NAN;
        if (bad == 3) hist2[1] = -0.5f;
        ck_assert_int_eq(mpt_fp8_state_from_host(g, state2, hist2, "ckpt.safetensors"), MPT_ERR_FORMAT);
        ck_assert_msg(strstr(mpt_last_error(), "ckpt.safetensors") != NULL, "case %d: %s", bad, mpt_last_error());
        float now[3 * 64], hnow[64 * 4];
        ck_assert_int_le(n, 64);
        mpt_fp8_state_to_host(g, now, hnow);
        ck_assert_msg(memcmp(now, state, sizeof(float) * 3 * (size_t)n) == 0 &&
                          memcmp(hnow, hist, sizeof(float) * (size_t)(n * len)) == 0,
                      "case %d: a refused restore changed the state", bad);
    }
    ck_assert_int_eq(mpt_fp8_state_from_host(g, state, hist, "ckpt.safetensors"), MPT_OK);
    free(state);
    free(hist);
    free(state2);
    free(hist2);
    fp8_close(&r);
}
END_TEST

/* ---- telemetry ---------------------------------------------------------------------------------------------- */

#include "engine/telemetry/range.h"
#include "engine/telemetry/telemetry.h"

/* The FP8 range counters against their definitions: saturated |x s| > fmax, flushed when the cast gives 0, subnormal
 * when it gives a subnormal; per tensor and per MX block (a block with a power-of-two max keeps every value). */
START_TEST(test_fp8_range_counts) {
    tests_rng r = {31};
    enum { R = 4, C = 80 };
    float x[R * C];
    for (int i = 0; i < R * C; i++) x[i] = (float)(tests_uniform(&r, -1, 1) * ldexp(1.0, tests_int(&r, -30, 4)));
    x[3] = 0.0f;
    for (int e5 = 0; e5 <= 1; e5++)
        for (int k = 0; k < 3; k++) {
            const float s = (float)ldexp(3.0, 4 * k); /* 3, 48, 768 */
            mpt_fp8_range got;
            memset(&got, 0, sizeof got);
            mpt_fp8_range_count(&got, x, R * C, s, e5);
            const fmt *f = e5 ? &E5M2 : &E4M3;
            int64_t nz = 0, sat = 0, fl = 0, sub = 0;
            for (int i = 0; i < R * C; i++) {
                if (x[i] == 0.0f) continue;
                nz++;
                const double v = (double)(x[i] * s); /* the FP32 product, as the cast sees it */
                if (fabs(v) > f->max) {
                    sat++;
                    continue;
                }
                const double q = fabs(val(f, mpt_f32_to_fp8((float)v, e5, 1)));
                if (q == 0.0) fl++;
                else if (q < ldexp(1.0, 1 - f->bias)) sub++; /* below the smallest normal */
            }
            EXPECT(got.nonzero == nz && got.saturated == sat && got.flushed == fl && got.subnormal == sub,
                   "%s s=%g: got %lld/%lld/%lld/%lld, expected %lld/%lld/%lld/%lld", f->name, (double)s,
                   (long long)got.nonzero, (long long)got.saturated, (long long)got.flushed, (long long)got.subnormal,
                   (long long)nz, (long long)sat, (long long)fl, (long long)sub);
        }
    /* MX, FLOOR, as cast: a block whose max is 2^5 loses nothing to saturation; with the scale doubled (k = +1) its
     * max maps to 512 > 448 and saturates */
    float b[32];
    for (int i = 0; i < 32; i++) b[i] = i == 7 ? 32.0f : 1.0f;
    mpt_fp8_range m0, m1;
    memset(&m0, 0, sizeof m0), memset(&m1, 0, sizeof m1);
    mpt_mx_range_count(&m0, b, 1, 32, 0, MPT_MX_FLOOR, 0);
    mpt_mx_range_count(&m1, b, 1, 32, 0, MPT_MX_FLOOR, 1);
    ck_assert(m0.nonzero == 32 && m0.saturated == 0 && m1.saturated == 1 && m0.flushed == 0);
}
END_TEST

/* Telemetry every step (with the FP32 twin) reads only: an fp8 and an mxfp8 run train bit for bit as without it
 * (masters, optimizer state, FP8 scale state), and the FP8 rows are there. */
START_TEST(test_fp8_telemetry_only_reads) {
    const mpt_precision modes[2] = {MPT_PRECISION_FP8, MPT_PRECISION_MXFP8};
    for (int m = 0; m < 2; m++) {
        fp8_run off, on;
        fp8_open(&off, modes[m], NULL, NULL, 64);
        fp8_open(&on, modes[m], NULL, NULL, 64);
        mpt_policy fp32 = mpt_policy_make_explicit(MPT_PRECISION_FP32, 0, 0);
        mpt_graph *tw = mpt_graph_create(on.be, &fp32, 64);
        int64_t shape[2] = {64, on.data.dim};
        mpt_tensor *x = mpt_input(tw, 2, shape);
        x = mpt_relu(tw, mpt_linear(tw, x, 64, "fc1"), "relu1");
        x = mpt_linear(tw, x, on.data.n_classes, "fc2");
        mpt_softmax_xent(tw, x, "loss");
        ck_assert_int_eq(mpt_telemetry_create(on.tr, 1, tw), MPT_OK);
        fp8_steps(&off, 12);
        fp8_steps(&on, 12);
        for (int i = 0; i < off.tr->n_params; i++)
            EXPECT(memcmp(off.tr->master[i]->data, on.tr->master[i]->data, mpt_tensor_nbytes(off.tr->master[i])) == 0 &&
                       memcmp(off.tr->m[i]->data, on.tr->m[i]->data, mpt_tensor_nbytes(off.tr->m[i])) == 0,
                   "%s: %s differs with telemetry on", mpt_precision_name(modes[m]), off.tr->master[i]->name);
        const mpt_graph *a = off.tr->g, *b = on.tr->g;
        const size_t hist = sizeof(float) * (size_t)a->n_fp8 * (size_t)mpt_fp8_history_len(a);
        EXPECT(memcmp(a->fp8_meta, b->fp8_meta, sizeof(mpt_fp8_meta) * (size_t)a->n_fp8) == 0 &&
                   memcmp(a->fp8_history, b->fp8_history, hist) == 0,
               "%s: the FP8 state differs with telemetry on", mpt_precision_name(modes[m]));
        const mpt_telemetry_stat *st;
        int ns = mpt_telemetry_stats(on.tr->telemetry, &st), rows = 0;
        for (int i = 0; i < ns; i++)
            if (strcmp(st[i].metric, "fp8_flush_frac@other_format") == 0 && strcmp(st[i].tensor, "fc1.dy") == 0) rows++;
        EXPECT(rows == 1, "%s: no fp8_flush_frac@other_format row for fc1.dy", mpt_precision_name(modes[m]));
        fp8_close(&off);
        fp8_close(&on);
    }
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
    tcase_add_test(tc, test_e8m0_range_ends);
    tcase_add_test(tc, test_scale_from_amax);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("kernels");
    tcase_set_timeout(tk, 240);
    tcase_add_test(tk, test_gemm_fp8_fp32_accum);
    tcase_add_test(tk, test_fast_accumulator_model);
    tcase_add_test(tk, test_delayed_scaling_sequence);
    tcase_add_test(tk, test_cast_per_tensor);
    tcase_add_test(tk, test_scale_state_edges);
    tcase_add_test(tk, test_mx_blocks);
    suite_add_tcase(s, tk);
    TCase *tt = tcase_create("training");
    tcase_set_timeout(tt, 300);
    tcase_add_test(tt, test_fp8_modes_learn);
    tcase_add_test(tt, test_lenet5_fp8_is_bf16);
    tcase_add_test(tt, test_nonfinite_amax_skips_step);
    tcase_add_test(tt, test_fp8_state_restore_checks);
    tcase_add_test(tt, test_fp8_range_counts);
    tcase_add_test(tt, test_fp8_telemetry_only_reads);
    suite_add_tcase(s, tt);
    return s;
}

int main(void) { return mpt_test_run(fp8_suite()); }
