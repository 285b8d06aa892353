/*
 * tests/test_accum.c - the accumulators of the lesson `accumulation` (tools/lab/accum.h).
 *
 *  - mpt_accum_round agrees with the engine's own FP32 -> FP16 / BF16 conversions (engine/numerics.h) on every
 *    kind of FP32 input (normal, subnormal in the target, overflowing, ties), and with C's double -> float
 *    conversion (round to nearest even) for FP32;
 *  - on doubles that are not floats, the result is a value of the format and the nearest one: no representable
 *    value of the format lies closer (checked against the neighbours one ulp away);
 *  - mpt_accum_dot by hand: 1 + 300 x 2^-9 sums exactly in FP32 and FP16 but stagnates at 1 in BF16 (each term is
 *    below half of BF16's ulp at 1, 2^-8), the swamping the lesson shows; the compensated reference is exact on a
 *    sum where plain FP64 summation loses the small terms;
 *  - mpt_accum_exact returns mpt_accum_dot's reference, sum |p| and FP32 sum, bit for bit;
 *  - the sign test's p-value against the binomial tail summed from Pascal's triangle (another method: no lgamma) for
 *    every k of every n up to 60, and by hand (2^-9 for 10 of 10, 112/1024 for 8 of 10 and for 2 of 10, 1 for 5 of
 *    10); the direction of a set of errors counted by hand.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "harness.h"
#include "engine/numerics.h"
#include "tools/lab/accum.h"

/* A float with a random exponent in [lo, hi] and random significand bits, either sign. */
static float random_float(tests_rng *r, int lo, int hi) {
    double m = 1.0 + tests_uniform(r, 0.0, 1.0);
    float f = (float)ldexp(m, tests_int(r, lo, hi));
    return tests_next(r) & 1 ? -f : f;
}

START_TEST(test_round_matches_engine_on_floats) {
    tests_rng r = {12345};
    for (int i = 0; i < 200000; i++) {
        float f = random_float(&r, -30, 20);
        if (i % 7 == 0) f = mpt_f16_to_f32((uint16_t)(tests_next(&r) & 0x7bff)) +
                            ldexp(1.0, -25) * (double)(tests_int(&r, -2, 2)); /* near FP16 values and ties */
        double want16 = mpt_f16_to_f32(mpt_f32_to_f16(f)), got16 = mpt_accum_round(f, MPT_DTYPE_F16);
        ck_assert_msg(want16 == got16 || (isnan(want16) && isnan(got16)), "FP16 of %a: engine %a, accum %a", (double)f,
                      want16, got16);
        float g = random_float(&r, -140, 127);
        double wantb = mpt_bf16_to_f32(mpt_f32_to_bf16(g)), gotb = mpt_accum_round(g, MPT_DTYPE_BF16);
        ck_assert_msg(wantb == gotb, "BF16 of %a: engine %a, accum %a", (double)g, wantb, gotb);
        double x = ldexp(1.0 + tests_uniform(&r, 0.0, 1.0), tests_int(&r, -150, 127));
        ck_assert_msg((double)(float)x == mpt_accum_round(x, MPT_DTYPE_F32) || isinf((float)x), "FP32 of %a", x);
    }
    ck_assert(isinf(mpt_accum_round(65520.0, MPT_DTYPE_F16)));
    ck_assert(mpt_accum_round(65519.99, MPT_DTYPE_F16) == 65504.0);
    ck_assert(mpt_accum_round(ldexp(1.0, -25), MPT_DTYPE_F16) == 0.0);              /* a tie: to the even 0 */
    ck_assert(mpt_accum_round(ldexp(1.5, -25), MPT_DTYPE_F16) == ldexp(1.0, -24));  /* above it: the smallest */
}
END_TEST

/* On doubles: the result is on the format's grid and no neighbour on the grid is nearer. The grid spacing at |v|
 * is 2^(max(e, emin) - (p - 1)) for |v| in [2^e, 2^(e+1)) (subnormals share emin's), and the neighbour below a
 * power of two 2^e > 2^emin is half a spacing away. */
START_TEST(test_round_is_nearest_on_doubles) {
    tests_rng r = {777};
    const mpt_dtype fmts[2] = {MPT_DTYPE_F16, MPT_DTYPE_BF16};
    const int bits[2] = {11, 8}, emin[2] = {-14, -126};
    for (int i = 0; i < 100000; i++) {
        int k = i & 1;
        double x = ldexp(1.0 + tests_uniform(&r, 0.0, 1.0), tests_int(&r, k ? -130 : -26, k ? 120 : 14));
        if (tests_next(&r) & 1) x = -x;
        double v = fabs(mpt_accum_round(x, fmts[k])), ax = fabs(x);
        int e = emin[k];
        if (v > 0.0) {
            frexp(v, &e);
            e = e - 1 < emin[k] ? emin[k] : e - 1;
        }
        double ulp = ldexp(1.0, e - (bits[k] - 1));
        double below = v > ldexp(1.0, emin[k]) && v == ldexp(1.0, e) ? ulp / 2 : ulp;
        ck_assert_msg(v / ulp == nearbyint(v / ulp), "%a rounded to %a, which is not a value of the format", x, v);
        ck_assert_msg(fabs(ax - v) <= fabs(ax - (v + ulp)) && (v == 0.0 || fabs(ax - v) <= fabs(ax - (v - below))),
                      "%a: a neighbour of %a is nearer", x, v);
    }
}
END_TEST

START_TEST(test_dot_by_hand) {
    float p[301];
    p[0] = 1.0f;
    for (int i = 1; i <= 300; i++) p[i] = 0x1p-9f;
    double ref, abs_sum, s[MPT_ACCUM_COUNT];
    mpt_accum_dot(p, 301, &ref, &abs_sum, s);
    ck_assert(ref == 1.0 + 300.0 * 0x1p-9); /* 1.5859375 */
    ck_assert(abs_sum == ref);
    ck_assert(s[MPT_ACCUM_F32] == ref);
    ck_assert(s[MPT_ACCUM_F16] == ref);  /* FP16's ulp at [1, 2) is 2^-10: every term fits */
    ck_assert(s[MPT_ACCUM_BF16] == 1.0); /* each 2^-9 is below half of BF16's ulp 2^-7 at 1: swamped */
    /* 2^60, then 1000 ones, then -2^60: plain FP64 loses the ones, the compensated sum keeps them */
    float q[1002];
    q[0] = 0x1p60f;
    for (int i = 1; i <= 1000; i++) q[i] = 1.0f;
    q[1001] = -0x1p60f;
    mpt_accum_dot(q, 1002, &ref, &abs_sum, s);
    ck_assert(ref == 1000.0);
    ck_assert(s[MPT_ACCUM_F32] == 0.0);
}
END_TEST

/* The swamped BF16 sum above, by the other methods: Kahan's compensation carries the lost 2^-9's along, pairwise
 * adds them to each other before they meet the 1, blocked (32) sums 31 of them into the first block's 1 (lost) and
 * the others 32 at a time (2^-4 each, exact). Exact answer 1 + 75/128, itself a BF16 value. */
START_TEST(test_methods_by_hand) {
    float p[301];
    p[0] = 1.0f;
    for (int i = 1; i <= 300; i++) p[i] = 0x1p-9f;
    double scratch[301], exact = 1.0 + 300.0 * 0x1p-9;
    ck_assert(mpt_accum_sum(p, 301, MPT_DTYPE_BF16, MPT_ACCUM_RECURSIVE, 0, NULL) == 1.0);
    ck_assert(mpt_accum_sum(p, 301, MPT_DTYPE_BF16, MPT_ACCUM_PAIRWISE, 0, scratch) == exact);
    double k = mpt_accum_sum(p, 301, MPT_DTYPE_BF16, MPT_ACCUM_KAHAN, 0, NULL);
    ck_assert_msg(fabs(k - exact) <= 0x1p-7, "Kahan in BF16: %a, exact %a", k, exact); /* within one BF16 ulp */
    double b = mpt_accum_sum(p, 301, MPT_DTYPE_BF16, MPT_ACCUM_BLOCKED, 32, NULL);
    /* the first block (1 and 31 x 2^-9) stays 1; eight blocks of 32 x 2^-9 = 2^-4 give 1.5 exactly; the last block,
     * 13 x 2^-9, makes 1 + 67.25 / 128, which rounds to 1 + 67 / 128 */
    ck_assert_msg(b == 1.0 + 67.0 / 128.0, "blocked in BF16: %a", b);
    ck_assert_str_eq(mpt_accum_method_name(MPT_ACCUM_KAHAN), "Kahan");
}
END_TEST

/* In FP32 every method equals the same algorithm written with float arithmetic (IEEE single on x86-64), bit for bit,
 * on random products of both signs spread over 2^-20..2^4. */
static float pw(const float *x, int64_t k) {
    if (k == 1) return x[0];
    int64_t h = k / 2;
    volatile float a = pw(x, h), c = pw(x + h, k - h);
    return a + c;
}

START_TEST(test_methods_match_float_arithmetic) {
    enum { K = 5000 };
    static float p[K];
    static double scratch[K];
    uint64_t st = 12345;
    for (int i = 0; i < K; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        int e = (int)((st >> 40) % 25) - 20;
        float m = 1.0f + (float)((st >> 11) & 0xfffff) * 0x1p-20f;
        p[i] = ((st >> 63) ? -1.0f : 1.0f) * ldexpf(m, e);
    }
    volatile float r = 0.0f;
    for (int i = 0; i < K; i++) r = r + p[i];
    ck_assert(mpt_accum_sum(p, K, MPT_DTYPE_F32, MPT_ACCUM_RECURSIVE, 0, NULL) == (double)r);
    ck_assert(mpt_accum_sum(p, K, MPT_DTYPE_F32, MPT_ACCUM_PAIRWISE, 0, scratch) == (double)pw(p, K));
    volatile float s = 0.0f, c = 0.0f;
    for (int i = 0; i < K; i++) {
        volatile float y = p[i] - c, t = s + y, d = t - s;
        c = d - y;
        s = t;
    }
    ck_assert(mpt_accum_sum(p, K, MPT_DTYPE_F32, MPT_ACCUM_KAHAN, 0, NULL) == (double)s);
    volatile float bs = 0.0f;
    for (int b0 = 0; b0 < K; b0 += 64) {
        volatile float t = 0.0f;
        for (int i = b0; i < K && i < b0 + 64; i++) t = t + p[i];
        bs = bs + t;
    }
    ck_assert(mpt_accum_sum(p, K, MPT_DTYPE_F32, MPT_ACCUM_BLOCKED, 64, NULL) == (double)bs);
}
END_TEST

START_TEST(test_exact_matches_dot) {
    tests_rng r = {4242};
    static float p[3000];
    for (int i = 0; i < 3000; i++) p[i] = random_float(&r, -20, 3);
    double ref, abs_sum, s[MPT_ACCUM_COUNT], abs2;
    float s32;
    for (int k = 0; k <= 3000; k += 250) {
        mpt_accum_dot(p, k, &ref, &abs_sum, s);
        ck_assert(mpt_accum_exact(p, k, &abs2, &s32) == ref);
        ck_assert(abs2 == abs_sum);
        ck_assert((double)s32 == s[MPT_ACCUM_F32]);
    }
    /* by hand: 2^100 + 1 - 2^100 = 1, which a plain double sum loses (2^100 + 1 rounds to 2^100); the compensation
     * keeps it whichever of the two terms is larger in magnitude */
    const float big[3] = {0x1p100f, 1.0f, -0x1p100f}, small_first[3] = {1.0f, 0x1p100f, -0x1p100f};
    ck_assert(mpt_accum_exact(big, 3, &abs2, &s32) == 1.0);
    ck_assert(mpt_accum_exact(small_first, 3, &abs2, &s32) == 1.0);
    mpt_accum_dot(big, 3, &ref, &abs_sum, s);
    ck_assert(ref == 1.0);
    mpt_accum_dot(small_first, 3, &ref, &abs_sum, s);
    ck_assert(ref == 1.0);
}
END_TEST

START_TEST(test_sign_test) {
    /* Pascal's triangle in doubles: C(n, i) / 2^n row by row (each row's entries halved sums of the last row's) */
    static double row[61], next[61];
    row[0] = 1.0;
    for (int n = 1; n <= 60; n++) {
        for (int i = 0; i <= n; i++) next[i] = 0.5 * ((i > 0 ? row[i - 1] : 0.0) + (i < n ? row[i] : 0.0));
        memcpy(row, next, sizeof row);
        for (int k = 0; k <= n; k++) {
            int hi = k > n - k ? k : n - k;
            double tail = 0.0;
            for (int i = hi; i <= n; i++) tail += row[i];
            double want = 2.0 * tail > 1.0 ? 1.0 : 2.0 * tail, got = mpt_accum_sign_test(k, n);
            ck_assert_msg(fabs(got - want) <= 1e-10 * want, "sign test %d of %d: %.17g, want %.17g", k, n, got, want);
        }
    }
    ck_assert(mpt_accum_sign_test(0, 0) == 1.0);
    ck_assert(fabs(mpt_accum_sign_test(10, 10) - 0x1p-9) <= 1e-14);
    ck_assert(fabs(mpt_accum_sign_test(8, 10) - 112.0 / 1024.0) <= 1e-14);
    ck_assert(fabs(mpt_accum_sign_test(2, 10) - 112.0 / 1024.0) <= 1e-14);
    ck_assert(mpt_accum_sign_test(5, 10) == 1.0);
    /* far tails stay positive and ordered: 2^-199 for 200 of 200 */
    ck_assert(fabs(mpt_accum_sign_test(200, 200) / 0x1p-199 - 1.0) <= 1e-10);
}
END_TEST

START_TEST(test_bias_by_hand) {
    const double e[5] = {-1.0, -2.0, 0.0, 3.0, -0.5};
    mpt_accum_bias b;
    mpt_accum_bias_of(e, 5, &b);
    ck_assert(b.n == 5 && b.toward_zero == 3 && b.away == 1 && b.exact == 1);
    ck_assert(b.share_toward == 0.75);
    ck_assert(fabs(b.p_sign - 10.0 / 16.0) <= 1e-14); /* 2 P(X >= 3), X ~ Binomial(4, 1/2): 2 x 5/16 */
    ck_assert(fabs(b.mean_ratio - (-0.5 / 6.5)) <= 1e-15);
    const double z[3] = {0.0, 0.0, 0.0};
    mpt_accum_bias_of(z, 3, &b);
    ck_assert(b.exact == 3 && isnan(b.share_toward) && isnan(b.mean_ratio) && b.p_sign == 1.0);
    const double all[4] = {-1e-9, -2e-9, -3e-9, -4e-9};
    mpt_accum_bias_of(all, 4, &b);
    ck_assert(b.share_toward == 1.0 && b.mean_ratio == -1.0 && fabs(b.p_sign - 0.125) <= 1e-14);
}
END_TEST

static Suite *accum_suite(void) {
    Suite *s = suite_create("accum");
    TCase *tc = tcase_create("accum");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_round_matches_engine_on_floats);
    tcase_add_test(tc, test_round_is_nearest_on_doubles);
    tcase_add_test(tc, test_dot_by_hand);
    tcase_add_test(tc, test_methods_by_hand);
    tcase_add_test(tc, test_methods_match_float_arithmetic);
    tcase_add_test(tc, test_exact_matches_dot);
    tcase_add_test(tc, test_sign_test);
    tcase_add_test(tc, test_bias_by_hand);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(accum_suite()); }
