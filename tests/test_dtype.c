/*
 * tests/test_dtype.c - number-format conversions (engine/numerics.h) and the CPU cast/convert loops.
 *
 * References, all independent of the code under test:
 *   - FP16 decoding: sign * m * 2^(e-25) evaluated with ldexp in double (IEEE 754-2008 binary16);
 *   - FP32 -> FP16: the CPU's own F16C instruction, _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
 *   - FP32 -> BF16 and FP32 -> TF32: the nearest value with 8 (BF16) or 11 (TF32) significant bits,
 *     computed in double with rint() (ties to even in the default rounding mode); below 2^-126 the spacing
 *     stays 2^-133 (BF16) / 2^-136 (TF32), as the formats keep FP32's exponent range;
 *   - halfway cases built exactly as the midpoint of two neighbouring values (exact in FP32).
 * The vectorised loops of kernels/cpu/convert.h and the backend's cast must equal the scalar functions bit
 * for bit.
 */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/backend.h"
#include "harness.h"

/* Check's ck_assert* records every passing assertion through a syscall (its "last location" mark), which
 * costs seconds over millions of element checks: these only call into Check when the condition fails. */
#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)
#define EXPECT1(cond) EXPECT(cond, "failed: %s", #cond)
#define EXPECT_EQ_U(a, b)                                                                            \
    do {                                                                                             \
        unsigned long long x_ = (a), y_ = (b);                                                       \
        EXPECT(x_ == y_, "%s == 0x%llx, expected 0x%llx", #a, x_, y_);                               \
    } while (0)
#include "kernels/cpu/convert.h"

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

/* Independent FP16 decoder. */
static double f16_ref(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -24);
    else v = ldexp(m + 1024, e - 25);
    return s ? -v : v;
}

/* Nearest value of x with `bits` significant bits and minimum exponent -126 (ties to even), in double;
 * overflow past FLT_MAX's format gives a value >= 2^128 that becomes inf when converted to float. */
static float round_ref(float x, int bits) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    e -= 1;
    if (e < -126) e = -126;
    double ulp = ldexp(1.0, e - (bits - 1));
    double r = rint((double)x / ulp) * ulp;
    if (r == 0.0) r = copysign(0.0, x);
    return (float)r;
}

/* A random FP32 spread over all exponents: uniformly random bits. */
static float random_bits_f32(tests_rng *r) { return bits_f((uint32_t)tests_next(r)); }

/* ---- stochastic rounding and its Philox bits -------------------------------------------------------------- */

/* Random123's published known-answer vectors for philox4x32 with 10 rounds (kat_vectors in the Random123
 * distribution: counter, key, result), the generator cuRAND's PHILOX4_32_10 also implements. */
START_TEST(test_philox_known_answers) {
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
         0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1},
    };
    for (int k = 0; k < 3; k++) {
        uint32_t out[4];
        mpt_philox4x32_10(kat[k], kat[k] + 4, out);
        for (int j = 0; j < 4; j++)
            ck_assert_msg(out[j] == kat[k][6 + j], "vector %d word %d: 0x%08x, expected 0x%08x", k, j, out[j],
                          kat[k][6 + j]);
    }
    /* the documented counter of mpt_sr_bits: element e uses word e & 3 of block {e >> 2, 0, iteration, 0} */
    uint32_t out[4];
    const uint32_t ctr[4] = {5, 0, 9, 0}, key[2] = {0x89abcdefu, 0x01234567u};
    mpt_philox4x32_10(ctr, key, out);
    for (int j = 0; j < 4; j++) ck_assert_uint_eq(mpt_sr_bits(0x0123456789abcdefULL, 9, 20 + (uint64_t)j), out[j]);
}
END_TEST

/* The two neighbours of x in a 16-bit format found by scanning every positive finite bit pattern (independent of
 * the rounding code): lo = largest magnitude <= |x|, hi = smallest magnitude > |x| (inf past the top). */
static void neighbours16(int bf16, float x, double *lo, double *hi) {
    double ax = fabs((double)x), best_lo = 0.0, best_hi = INFINITY;
    for (uint32_t b = 0; b < 0x7f80u; b++) {
        if (!bf16 && b >= 0x7c00u) break;
        double v = bf16 ? mpt_bf16_to_f32((uint16_t)b) : mpt_f16_to_f32((uint16_t)b);
        if (v <= ax && v > best_lo) best_lo = v;
        if (v > ax && v < best_hi) best_hi = v;
    }
    *lo = x < 0 ? -best_lo : best_lo;
    *hi = x < 0 ? -best_hi : best_hi;
}

/* 100000 stochastic roundings of each of a set of values (FP16's subnormal band, normal values, BF16's
 * small and large ranges, negatives, exactly representable ones): only ever one of the two neighbours, the
 * mean within 5 standard deviations of x (the rounding's variance is (hi-lo)^2 f (1-f), f = (x-lo)/(hi-lo)),
 * and the same bits again from the same seed. */
START_TEST(test_stochastic_rounding) {
    static const float xs[] = {1.0f + 0x1p-9f, -3.3333333f, 0.1f, 1e-6f, 3e-7f, -6e-8f, 1000.3f, 65500.0f,
                               1.0f, 0x1p-24f, 7.1e-20f, -2.5e30f};
    const int N = 100000;
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
            float x = xs[k];
            if (bf16 == 0 && fabsf(x) > 65504.0f) continue;
            double lo, hi;
            neighbours16(bf16, x, &lo, &hi);
            double sum = 0.0;
            for (int i = 0; i < N; i++) {
                uint32_t r = mpt_sr_bits(42, 7, (uint64_t)i);
                uint16_t h = bf16 ? mpt_f32_to_bf16_sr(x, r) : mpt_f32_to_f16_sr(x, r);
                ck_assert_uint_eq(h, bf16 ? mpt_f32_to_bf16_sr(x, mpt_sr_bits(42, 7, (uint64_t)i))
                                          : mpt_f32_to_f16_sr(x, mpt_sr_bits(42, 7, (uint64_t)i)));
                double v = bf16 ? mpt_bf16_to_f32(h) : mpt_f16_to_f32(h);
                if (!(v == lo || v == hi))
                    ck_abort_msg("%s SR of %a gave %a, neighbours %a and %a", bf16 ? "bf16" : "fp16", (double)x, v, lo,
                                 hi);
                sum += v;
            }
            double f = (fabs((double)x) - fabs(lo)) / (fabs(hi) - fabs(lo));
            double sd = fabs(hi - lo) * sqrt(f * (1 - f) / N);
            double mean = sum / N;
            ck_assert_msg(fabs(mean - x) <= 5 * sd + 1e-12 * fabs((double)x),
                          "%s SR of %a: mean %.10g, |mean - x| %.3g > 5 sd %.3g", bf16 ? "bf16" : "fp16",
                          (double)x, mean, fabs(mean - x), 5 * sd);
        }
    /* a different seed gives a different sequence (for a value half-way between neighbours) */
    int differ = 0;
    for (int i = 0; i < 64; i++)
        differ += mpt_f32_to_bf16_sr(1.0f + 0x1p-8f, mpt_sr_bits(1, 0, (uint64_t)i)) !=
                  mpt_f32_to_bf16_sr(1.0f + 0x1p-8f, mpt_sr_bits(2, 0, (uint64_t)i));
    ck_assert_int_gt(differ, 8);
    /* inf and NaN round as with RNE */
    ck_assert_uint_eq(mpt_f32_to_f16_sr(INFINITY, 0xffffffffu), 0x7c00u);
    ck_assert_uint_eq(mpt_f32_to_bf16_sr(-INFINITY, 0xffffffffu), 0xff80u);
    ck_assert_uint_eq(mpt_f32_to_f16_sr(NAN, 0), mpt_f32_to_f16(NAN));
    ck_assert_uint_eq(mpt_f32_to_bf16_sr(NAN, 0xffffu), mpt_f32_to_bf16(NAN));
}
END_TEST

/* Stochastic rounding at its edges, with random words chosen by hand (expected values from the definition of SR and
 * of the draw, not from the code): x becomes the upper neighbour iff draw < frac, draw = (r >> 8) * 2^-24.
 *  - a value the format holds exactly (frac = 0) never moves, whatever r: r = 0 (draw = 0) included;
 *  - frac = 1/2 (1 + 2^-11 in FP16, ulp 2^-10): r >> 8 = 2^23 - 1 (draw just below 1/2) rounds up, 2^23 (draw = 1/2)
 *    stays: exactly 2^23 of the 2^24 draws go up, P = frac;
 *  - past the largest finite FP16 the neighbours are 65504 (0x7bff) and inf: 65520 = 65504 + 16 has frac 16/32, so
 *    r = 0 gives inf and r = 0xffffffff 65504. The truncation SR starts from keeps 65504 for all of [65504, 65536)
 *    and gives inf from 2^16, the first point of FP16's grid past 65504 (its documented rule; IEEE 754's
 *    roundTowardZero would give 65504 there, but SR needs the upper neighbour, which is inf). */
START_TEST(test_stochastic_rounding_edges) {
    static const struct { float x; uint16_t f16, bf16; } exact[] = {
        {1.0f, 0x3c00, 0x3f80}, {-3.0f, 0xc200, 0xc040}, {0x1p-24f, 0x0001, 0x3380}, {0x1p-14f, 0x0400, 0x3880},
        {65504.0f, 0x7bff, 0xffff}, /* 0xffff: not a BF16 value, skipped */
        {0.0f, 0x0000, 0x0000}, {-0x1p-20f, 0x8010, 0xb580}};
    static const uint32_t rs[] = {0x00000000u, 0x000000ffu, 0x00000100u, 0x7fffffffu, 0xffffffffu};
    for (size_t k = 0; k < sizeof exact / sizeof exact[0]; k++)
        for (size_t j = 0; j < sizeof rs / sizeof rs[0]; j++) {
            EXPECT(mpt_f32_to_f16_sr(exact[k].x, rs[j]) == exact[k].f16, "fp16 SR of exact %a with r 0x%08x: 0x%04x",
                   (double)exact[k].x, rs[j], mpt_f32_to_f16_sr(exact[k].x, rs[j]));
            EXPECT(exact[k].bf16 == 0xffff || mpt_f32_to_bf16_sr(exact[k].x, rs[j]) == exact[k].bf16,
                   "bf16 SR of exact %a with r 0x%08x: 0x%04x", (double)exact[k].x, rs[j],
                   mpt_f32_to_bf16_sr(exact[k].x, rs[j]));
        }
    /* frac = 1/2: the draw's threshold */
    EXPECT_EQ_U(mpt_f32_to_f16_sr(1.0f + 0x1p-11f, 0x7fffffffu), 0x3c01); /* (2^23 - 1) 2^-24 < 1/2: up */
    EXPECT_EQ_U(mpt_f32_to_f16_sr(1.0f + 0x1p-11f, 0x80000000u), 0x3c00); /* 2^23 2^-24 = 1/2: stays */
    EXPECT_EQ_U(mpt_f32_to_f16_sr(-(1.0f + 0x1p-11f), 0x7fffffffu), 0xbc01);
    EXPECT_EQ_U(mpt_f32_to_bf16_sr(1.0f + 0x1p-8f, 0x00007fffu), 0x3f80); /* low bits 0x8000 + 0x7fff: no carry */
    EXPECT_EQ_U(mpt_f32_to_bf16_sr(1.0f + 0x1p-8f, 0x00008000u), 0x3f81); /* + 0x8000 carries: up */
    /* above the largest finite FP16 */
    EXPECT_EQ_U(mpt_f32_to_f16_rtz(65519.0f), 0x7bff);
    EXPECT_EQ_U(mpt_f32_to_f16_rtz(65535.0f), 0x7bff);
    EXPECT_EQ_U(mpt_f32_to_f16_rtz(-65535.0f), 0xfbff);
    EXPECT_EQ_U(mpt_f32_to_f16_rtz(65536.0f), 0x7c00);
    EXPECT_EQ_U(mpt_f32_to_f16_sr(65520.0f, 0x00000000u), 0x7c00);
    EXPECT_EQ_U(mpt_f32_to_f16_sr(65520.0f, 0xffffffffu), 0x7bff);
    EXPECT_EQ_U(mpt_f32_to_f16_sr(-65520.0f, 0xffffffffu), 0xfbff);
    /* truncation in the subnormal band: 3.75 * 2^-24 -> 3 * 2^-24; below 2^-24 -> 0 */
    EXPECT_EQ_U(mpt_f32_to_f16_rtz(0x1.ep-23f), 0x0003);
    EXPECT_EQ_U(mpt_f32_to_f16_rtz(0x1.fffffep-25f), 0x0000);
}
END_TEST

START_TEST(test_f16_all_patterns) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mpt_f16_to_f32((uint16_t)h);
        double ref = f16_ref((uint16_t)h);
        if (f16_is_nan((uint16_t)h)) {
            EXPECT(isnan(f), "f16 0x%04x: NaN widened to %g", h, (double)f);
            EXPECT(f16_is_nan(mpt_f32_to_f16(f)), "f16 0x%04x: NaN did not stay NaN", h);
            continue;
        }
        EXPECT((double)f == ref && !signbit(f) == !signbit(ref), "f16 0x%04x widened to %a, expected %a", h,
                      (double)f, ref);
        EXPECT(mpt_f32_to_f16(f) == h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f, mpt_f32_to_f16(f));
        /* the hardware agrees on the widening */
        EXPECT(f_bits(_cvtsh_ss((unsigned short)h)) == f_bits(f), "f16 0x%04x: F16C widening differs", h);
    }
}
END_TEST

START_TEST(test_bf16_all_patterns) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mpt_bf16_to_f32((uint16_t)h);
        EXPECT(f_bits(f) == h << 16, "bf16 0x%04x widened to bits 0x%08x", h, f_bits(f));
        uint16_t back = mpt_f32_to_bf16(f);
        if (bf16_is_nan((uint16_t)h))
            EXPECT(bf16_is_nan(back), "bf16 0x%04x: NaN became 0x%04x", h, back);
        else
            EXPECT(back == h, "bf16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}
END_TEST

/* Every midpoint between neighbouring finite values rounds to the even one; a nudge either side rounds
 * to the nearer one. Covers both rounding directions, the subnormal range and the subnormal/normal edge. */
START_TEST(test_ties_to_even) {
    for (int sign = 0; sign < 2; sign++) {
        uint16_t sb = (uint16_t)(sign << 15);
        for (uint32_t h = 0; h < 0x7bff; h++) { /* FP16 pairs (h, h+1) */
            uint16_t lo = (uint16_t)(sb | h), hi = (uint16_t)(sb | (h + 1));
            double mid = (f16_ref(lo) + f16_ref(hi)) / 2;
            float m = (float)mid;
            EXPECT((double)m == mid, "fp16 midpoint not exact");
            uint16_t even = (h & 1) ? hi : lo;
            EXPECT(mpt_f32_to_f16(m) == even, "fp16 tie %a -> 0x%04x, expected 0x%04x", mid,
                          mpt_f32_to_f16(m), even);
            float below = nextafterf(m, 0.0f), above = nextafterf(m, sign ? -INFINITY : INFINITY);
            EXPECT(mpt_f32_to_f16(below) == lo && mpt_f32_to_f16(above) == hi, "fp16 near-tie around %a", mid);
        }
        for (uint32_t h = 0; h < 0x7f7f; h++) { /* BF16 pairs */
            uint16_t lo = (uint16_t)(sb | h), hi = (uint16_t)(sb | (h + 1));
            double mid = ((double)mpt_bf16_to_f32(lo) + (double)mpt_bf16_to_f32(hi)) / 2;
            float m = (float)mid;
            EXPECT((double)m == mid, "bf16 midpoint not exact");
            uint16_t even = (h & 1) ? hi : lo;
            EXPECT(mpt_f32_to_bf16(m) == even, "bf16 tie %a -> 0x%04x, expected 0x%04x", mid,
                          mpt_f32_to_bf16(m), even);
            float below = nextafterf(m, 0.0f), above = nextafterf(m, sign ? -INFINITY : INFINITY);
            EXPECT(mpt_f32_to_bf16(below) == lo && mpt_f32_to_bf16(above) == hi, "bf16 near-tie around %a", mid);
        }
    }
    /* named edge cases */
    EXPECT_EQ_U(mpt_f32_to_f16(0x1p-25f), 0x0000);               /* half the smallest subnormal: to 0 */
    EXPECT_EQ_U(mpt_f32_to_f16(0x1.8p-24f), 0x0002);             /* 1.5 * 2^-24: to 2 (even) */
    EXPECT_EQ_U(mpt_f32_to_f16(0x1.ffcp-15f), 0x0400);           /* 1023.5 * 2^-24: to smallest normal */
    EXPECT_EQ_U(mpt_f32_to_bf16(0x1.01p0f), 0x3f80);             /* 1 + 2^-8: tie, down to 1 */
    EXPECT_EQ_U(mpt_f32_to_bf16(0x1.03p0f), 0x3f82);             /* 1 + 3*2^-8: tie, up to 1 + 2^-6 */
}
END_TEST

START_TEST(test_f16_overflow) {
    EXPECT_EQ_U(mpt_f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ_U(mpt_f32_to_f16(65519.99f), 0x7bff);
    EXPECT_EQ_U(mpt_f32_to_f16(65520.0f), 0x7c00);
    EXPECT_EQ_U(mpt_f32_to_f16(-65519.99f), 0xfbff);
    EXPECT_EQ_U(mpt_f32_to_f16(-65520.0f), 0xfc00);
    EXPECT_EQ_U(mpt_f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ_U(mpt_f32_to_f16(INFINITY), 0x7c00);
    EXPECT_EQ_U(mpt_f32_to_bf16(FLT_MAX), 0x7f80); /* FLT_MAX is past BF16's max + half ulp: inf */
    EXPECT1(f16_is_nan(mpt_f32_to_f16(NAN)) && bf16_is_nan(mpt_f32_to_bf16(NAN)));
}
END_TEST

/* 1,000,000 values: random bits (every exponent, subnormals, inf, NaN) and values concentrated where FP16
 * is delicate (65504..65520, around 2^-24 and 2^-25, the subnormal/normal boundary), against F16C. */
START_TEST(test_f16_vs_f16c) {
    tests_rng r = {0x5eed16};
    for (int i = 0; i < 1000000; i++) {
        float x;
        switch (i % 5) {
        case 0: case 1: x = random_bits_f32(&r); break;
        case 2: x = (float)tests_uniform(&r, 65500.0, 65530.0); break;
        case 3: x = (float)ldexp(tests_uniform(&r, 0.5, 4.0), -26 + tests_int(&r, 0, 2)); break;
        default: x = (float)ldexp(tests_uniform(&r, 0.9, 1.1), -14); break;
        }
        if (tests_next(&r) & 1) x = -x;
        uint16_t got = mpt_f32_to_f16(x), hw = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
        EXPECT(got == hw, "f32 %a (0x%08x): mpt 0x%04x, F16C 0x%04x", (double)x, f_bits(x), got, hw);
    }
}
END_TEST

START_TEST(test_bf16_vs_reference) {
    tests_rng r = {0x5eedbf};
    for (int i = 0; i < 1000000; i++) {
        float x = i % 2 ? random_bits_f32(&r) : (float)ldexp(tests_uniform(&r, -1.0, 1.0), tests_int(&r, -140, 128));
        uint16_t got = mpt_f32_to_bf16(x);
        if (isnan(x)) {
            EXPECT1(bf16_is_nan(got));
            continue;
        }
        float ref = round_ref(x, 8);
        EXPECT(f_bits(mpt_bf16_to_f32(got)) == f_bits(ref), "bf16 of %a: got %a, reference %a", (double)x,
                      (double)mpt_bf16_to_f32(got), (double)ref);
    }
}
END_TEST

START_TEST(test_tf32) {
    EXPECT1(mpt_round_tf32(1.0f + 0x1p-11f) == 1.0f);                 /* tie, down to even */
    EXPECT1(mpt_round_tf32(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);    /* tie, up to even */
    EXPECT1(mpt_round_tf32(1.0f + 0x1p-11f + 0x1p-23f) == 1.0f + 0x1p-10f); /* just above the tie */
    EXPECT1(isinf(mpt_round_tf32(INFINITY)) && isnan(mpt_round_tf32(NAN)));
    EXPECT1(isinf(mpt_round_tf32(FLT_MAX)));                          /* carries past FLT_MAX */
    tests_rng r = {0x5eedf3};
    for (int i = 0; i < 1000000; i++) {
        float x = i % 2 ? random_bits_f32(&r) : (float)ldexp(tests_uniform(&r, -1.0, 1.0), tests_int(&r, -149, 128));
        float got = mpt_round_tf32(x);
        if (isnan(x)) {
            EXPECT1(isnan(got));
            continue;
        }
        float ref = round_ref(x, 11);
        EXPECT(f_bits(got) == f_bits(ref), "tf32 of %a: got %a, reference %a", (double)x, (double)got,
                      (double)ref);
        EXPECT((f_bits(got) & 0x1fffu) == 0 || !isfinite(got), "tf32 of %a keeps low bits", (double)x);
    }
}
END_TEST

/* Test inputs for the buffer conversions: random bits plus every special class. */
static void fill_specials(float *f, int n, tests_rng *r) {
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                       0xffc00001u, 0x7f800001u, 0x7fbfffffu, 0x00000001u, 0x807fffffu,
                                       0x477fe000u, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u,
                                       0x387fe000u, 0x7f7fffffu, 0x7f7f8000u, 0x3f801000u, 0x3f803000u};
    for (int i = 0; i < n; i++) {
        if (i < (int)(sizeof special / sizeof special[0])) f[i] = bits_f(special[i]);
        else if (i % 3 == 0) f[i] = (float)ldexp(tests_uniform(r, -1.0, 1.0), tests_int(r, -30, 17));
        else f[i] = random_bits_f32(r);
    }
}

/* The vectorised loops of kernels/cpu/convert.h equal the scalar functions bit for bit. */
START_TEST(test_convert_loops) {
    enum { N = 200003 };
    float *f = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * sizeof(uint16_t));
    tests_rng r = {0xc0417};
    fill_specials(f, N, &r);
    mpt_cpu_narrow(h, MPT_DTYPE_F16, f, N);
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == mpt_f32_to_f16(f[i]), "narrow f16 of 0x%08x: 0x%04x vs 0x%04x", f_bits(f[i]), h[i],
                      mpt_f32_to_f16(f[i]));
    mpt_cpu_narrow(h, MPT_DTYPE_BF16, f, N);
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == mpt_f32_to_bf16(f[i]), "narrow bf16 of 0x%08x", f_bits(f[i]));
    mpt_cpu_round_tf32_n(g, f, N);
    for (int i = 0; i < N; i++)
        EXPECT(f_bits(g[i]) == f_bits(mpt_round_tf32(f[i])), "tf32 loop of 0x%08x", f_bits(f[i]));
    /* every 16-bit pattern, at every alignment of the 8-wide loop and its tail */
    uint16_t *all = malloc((65536 + 8) * sizeof(uint16_t));
    for (uint32_t i = 0; i < 65536 + 8; i++) all[i] = (uint16_t)(i * 40503u);
    for (int off = 0; off < 8; off++) {
        mpt_cpu_widen(g, all + off, MPT_DTYPE_F16, 65536);
        for (int i = 0; i < 65536; i++)
            EXPECT(f_bits(g[i]) == f_bits(mpt_f16_to_f32(all[off + i])), "widen f16 0x%04x", all[off + i]);
        mpt_cpu_widen(g, all + off, MPT_DTYPE_BF16, 65536);
        for (int i = 0; i < 65536; i++)
            EXPECT(f_bits(g[i]) == f_bits(mpt_bf16_to_f32(all[off + i])), "widen bf16 0x%04x", all[off + i]);
    }
    free(all);
    free(f);
    free(g);
    free(h);
}
END_TEST

/* The backend's cast, for every (source, destination) pair, equals the per-element definition. */
START_TEST(test_cast_pairs) {
    enum { N = 4099 }; /* not a multiple of the vector width: the tails run too */
    static const mpt_dtype src_types[] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16, MPT_DTYPE_U8};
    static const mpt_dtype dst_types[] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {0xca57};
    float *f = malloc(N * sizeof(float));
    fill_specials(f, N, &r);
    unsigned char *src = malloc(N * 4), *dst = malloc(N * 4);
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 3; di++) {
            mpt_dtype st = src_types[si], dt = dst_types[di];
            for (int i = 0; i < N; i++) { /* source data: the special/random floats, or their bits */
                uint32_t b = f_bits(f[i]);
                if (st == MPT_DTYPE_F32) memcpy(src + 4 * i, &b, 4);
                else if (st == MPT_DTYPE_U8) src[i] = (unsigned char)(b >> 7);
                else ((uint16_t *)src)[i] = (uint16_t)(b >> (i % 2 ? 16 : 3));
            }
            be->cast(be, dst, dt, src, st, N);
            for (int i = 0; i < N; i++) {
                float v = st == MPT_DTYPE_U8 ? (float)src[i] : mpt_load_f32(src, st, i);
                if (st == MPT_DTYPE_U8) EXPECT1((double)v == (double)src[i]);
                unsigned char want[4]; /* same dtype: a copy of the bits (NaN payloads included) */
                if (st == dt) memcpy(want, src + (size_t)i * mpt_dtype_size(st), mpt_dtype_size(st));
                else mpt_store_f32(want, dt, 0, v);
                EXPECT(memcmp(dst + (size_t)i * mpt_dtype_size(dt), want, mpt_dtype_size(dt)) == 0,
                              "cast %s -> %s differs at %d", mpt_dtype_name(st), mpt_dtype_name(dt), i);
            }
        }
    free(f);
    free(src);
    free(dst);
    mpt_backend_free(&be);
}
END_TEST

int main(void) {
    Suite *s = suite_create("dtype");
    TCase *tc = tcase_create("conversions");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_philox_known_answers);
    tcase_add_test(tc, test_stochastic_rounding);
    tcase_add_test(tc, test_stochastic_rounding_edges);
    tcase_add_test(tc, test_f16_all_patterns);
    tcase_add_test(tc, test_bf16_all_patterns);
    tcase_add_test(tc, test_ties_to_even);
    tcase_add_test(tc, test_f16_overflow);
    tcase_add_test(tc, test_f16_vs_f16c);
    tcase_add_test(tc, test_bf16_vs_reference);
    tcase_add_test(tc, test_tf32);
    tcase_add_test(tc, test_convert_loops);
    tcase_add_test(tc, test_cast_pairs);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
