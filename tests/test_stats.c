/*
 * tests/test_stats.c - the statistics of `compare --seeds` (tools/stats.c) on constructed per-seed data.
 *
 *  - summaries: mean, sample sd, min, max of small hand-checked sets;
 *  - the paired 95% interval: hand-worked examples whose t quantiles come from a printed table (t_{0.975,2} =
 *    4.302653, t_{0.975,5} = 2.570582, t_{0.975,6} = 2.446912), so a wrong quantile (0.95 instead of 0.975, n
 *    instead of n - 1 degrees of freedom) fails; and random per-seed data against the interval computed here
 *    from GSL's own gsl_stats_mean / gsl_stats_sd and gsl_cdf_tdist_Pinv;
 *  - every verdict (equivalent, better, worse, inconclusive with a finite and with no seed suggestion, and a
 *    zero-width interval), the suggested seed count against a hand computation, and the duality of the
 *    interval and the two one-sided tests (equivalent <=> both p-values < 0.025);
 *  - bad input (one seed, NaN, margin <= 0) and, in a build without GSL, the message naming libgsl-dev.
 */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "mpt_config.h"
#include "tools/stats.h"

/* The two spreads of a paired design, by hand: the reference b = 87.0, 86.7, 88.1 has mean 87.2667 and squared
 * deviations 0.071111 + 0.321111 + 0.694444 = 1.086667, so sd_between = sqrt(1.086667 / 2) = 0.737111; the
 * differences a - b = 0.1, 0.2, 0.3 have sd_paired = 0.1; ratio 7.37111. */
START_TEST(test_noise_by_hand) {
    const double a[] = {87.1, 86.9, 88.4}, b[] = {87.0, 86.7, 88.1};
    mpt_stats_noise z;
    mpt_stats_noise_of(a, b, 3, &z);
    ck_assert_int_eq(z.n, 3);
    ck_assert(fabs(z.sd_between - 0.737111) < 1e-6);
    ck_assert(fabs(z.sd_paired - 0.1) < 1e-9);
    ck_assert(fabs(z.ratio - 7.37111) < 1e-5);
    /* equal differences: no paired noise at all */
    const double c[] = {88.0, 87.7, 89.1};
    mpt_stats_noise_of(c, b, 3, &z);
    ck_assert(z.sd_paired < 1e-12 && isinf(z.ratio));
    mpt_stats_noise_of(a, b, 1, &z);
    ck_assert(isnan(z.sd_between) && isnan(z.sd_paired));
}
END_TEST

#ifdef MPT_HAVE_GSL
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_statistics_double.h>
#endif

START_TEST(test_summary) {
    const double x[] = {2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0};
    mpt_stats_summary s;
    mpt_stats_summarize(x, 8, &s);
    ck_assert_int_eq(s.n, 8);
    ck_assert(s.mean == 5.0);
    /* sum of squares 32, n - 1 = 7 */
    ck_assert(fabs(s.sd - sqrt(32.0 / 7.0)) < 1e-15);
    ck_assert(s.min == 2.0 && s.max == 9.0);
    const double one[] = {3.5};
    mpt_stats_summarize(one, 1, &s);
    ck_assert(s.mean == 3.5 && s.min == 3.5 && s.max == 3.5 && isnan(s.sd));
}
END_TEST

#ifdef MPT_HAVE_GSL

/* b = 0, so the differences are a itself. */
static mpt_stats_paired paired(const double *d, int n, double margin) {
    double zero[64] = {0};
    mpt_stats_paired p;
    ck_assert_msg(mpt_stats_compare_paired(d, zero, n, 0.95, margin, &p) == MPT_OK, "%s", mpt_last_error());
    return p;
}

START_TEST(test_interval_by_hand) {
    /* d = 0.1, 0.2, 0.3: mean 0.2, sd 0.1, se 0.1/sqrt(3); half-width 4.302653 * 0.0577350 = 0.248414 */
    const double a[] = {87.1, 86.9, 88.4}, b[] = {87.0, 86.7, 88.1};
    mpt_stats_paired p;
    ck_assert_int_eq(mpt_stats_compare_paired(a, b, 3, 0.95, 0.5, &p), MPT_OK);
    ck_assert(fabs(p.mean - 0.2) < 1e-9);
    ck_assert(fabs(p.sd - 0.1) < 1e-9);
    ck_assert(fabs(p.t_crit - 4.302653) < 1e-6);
    ck_assert(fabs(p.lo - (0.2 - 0.248414)) < 1e-6);
    ck_assert(fabs(p.hi - (0.2 + 0.248414)) < 1e-6);
    ck_assert_int_eq(p.verdict, MPT_VERDICT_EQUIVALENT);
    ck_assert_int_eq(p.seeds_needed, 0);
}
END_TEST

START_TEST(test_mean_interval_by_hand) {
    /* x: mean 90.1, deviations -0.6, 0, 0.5, -0.2, 0.3: sd = sqrt(0.74 / 4) = 0.4301163, se = sd / sqrt(5) =
     * 0.1923538; t_{0.975, 4} = 2.776445 (any t table); half-width 0.5340599 */
    const double x[] = {89.5, 90.1, 90.6, 89.9, 90.4};
    mpt_stats_interval iv;
    ck_assert_int_eq(mpt_stats_mean_interval(x, 5, 0.95, &iv), MPT_OK);
    ck_assert_int_eq(iv.n, 5);
    ck_assert(fabs(iv.mean - 90.1) < 1e-9);
    ck_assert(fabs(iv.sd - 0.4301163) < 1e-6);
    ck_assert(fabs(iv.se - 0.1923538) < 1e-6);
    ck_assert(fabs(iv.t_crit - 2.776445) < 1e-6);
    ck_assert(fabs(iv.lo - (90.1 - 0.5340599)) < 1e-6);
    ck_assert(fabs(iv.hi - (90.1 + 0.5340599)) < 1e-6);
    /* the paired interval is this interval on the differences */
    const double zero[5] = {0};
    mpt_stats_paired p;
    ck_assert_int_eq(mpt_stats_compare_paired(x, zero, 5, 0.95, 0.3, &p), MPT_OK);
    ck_assert(p.lo == iv.lo && p.hi == iv.hi && p.t_crit == iv.t_crit);
    /* 99%: t_{0.995, 4} = 4.604095 */
    ck_assert_int_eq(mpt_stats_mean_interval(x, 5, 0.99, &iv), MPT_OK);
    ck_assert(fabs(iv.t_crit - 4.604095) < 1e-6);
}
END_TEST

START_TEST(test_verdicts) {
    const double eq[] = {0.1, 0.2, 0.3};
    ck_assert_int_eq(paired(eq, 3, 0.5).verdict, MPT_VERDICT_EQUIVALENT);
    const double up[] = {1.0, 1.1, 1.2}; /* [0.852, 1.348] lies above +0.3 */
    mpt_stats_paired p = paired(up, 3, 0.3);
    ck_assert_int_eq(p.verdict, MPT_VERDICT_BETTER);
    ck_assert_int_eq(p.seeds_needed, 0);
    const double down[] = {-1.0, -1.1, -1.2};
    ck_assert_int_eq(paired(down, 3, 0.3).verdict, MPT_VERDICT_WORSE);
    /* The same d = 0.1..0.3 with margin 0.3: [-0.048, 0.448] straddles +0.3. Deciding needs a half-width below
     * |0.2 - 0.3| = 0.1, i.e. t_{0.975,n-1} * 0.1 / sqrt(n) < 0.1, t < sqrt(n): n = 6 gives 2.570582 > 2.449490,
     * n = 7 gives 2.446912 < 2.645751: 7 seeds. */
    p = paired(eq, 3, 0.3);
    ck_assert_int_eq(p.verdict, MPT_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(p.seeds_needed, 7);
    /* A mean difference exactly at the margin: no number of seeds decides. */
    const double at[] = {0.25, 0.5, 0.75};
    p = paired(at, 3, 0.5);
    ck_assert_int_eq(p.verdict, MPT_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(p.seeds_needed, -1);
    /* A spread so large that more than the cap would be needed. */
    const double wide[] = {-30.0, 30.0, 0.29};
    p = paired(wide, 3, 0.3);
    ck_assert_int_eq(p.verdict, MPT_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(p.seeds_needed, -1);
    /* Identical differences: no spread was measured, so a zero-width "interval" decides nothing: inconclusive, with
     * no seed count to suggest; identical outcomes in every pair (all differences 0) stay equivalent. */
    const double flat[] = {0.1, 0.1, 0.1, 0.1};
    p = paired(flat, 4, 0.3);
    ck_assert(p.sd == 0.0 && p.lo == 0.1 && p.hi == 0.1 && p.no_spread);
    ck_assert_int_eq(p.verdict, MPT_VERDICT_INCONCLUSIVE);
    ck_assert_int_eq(p.seeds_needed, -1);
    const double flat_up[] = {0.5, 0.5};
    ck_assert_int_eq(paired(flat_up, 2, 0.3).verdict, MPT_VERDICT_INCONCLUSIVE);
    const double zeros[] = {0.0, 0.0, 0.0};
    p = paired(zeros, 3, 0.3);
    ck_assert(p.no_spread && p.verdict == MPT_VERDICT_EQUIVALENT && p.seeds_needed == 0);
    /* the case seen in `compare --seeds 2`: accuracies whose differences are both 0.40 but for the subtraction's
     * rounding (sd ~1e-14, not 0): a [0.40, 0.40] interval called "better"; now no spread, inconclusive */
    const double acc_a[] = {90.12, 91.00}, acc_b[] = {89.72, 90.60};
    ck_assert_int_eq(mpt_stats_compare_paired(acc_a, acc_b, 2, 0.95, 0.3, &p), MPT_OK);
    ck_assert_msg(p.no_spread && p.verdict == MPT_VERDICT_INCONCLUSIVE, "sd %g, verdict %s", p.sd,
                  mpt_verdict_name(p.verdict));
    /* a real spread, however small against the values, is a spread */
    const double near_a[] = {90.12, 91.00}, near_b[] = {89.72, 90.59};
    ck_assert_int_eq(mpt_stats_compare_paired(near_a, near_b, 2, 0.95, 0.3, &p), MPT_OK);
    ck_assert(!p.no_spread);
}
END_TEST

/* Random per-seed data against GSL's statistics computed here, and the interval/TOST duality. */
START_TEST(test_random_against_gsl) {
    tests_rng r = {0x9e3779b97f4a7c15ull};
    int seen[4] = {0};
    for (int trial = 0; trial < 2000; trial++) {
        int n = tests_int(&r, 2, 30);
        double a[30], b[30], d[30];
        double shift = tests_uniform(&r, -1.5, 1.5), spread = tests_uniform(&r, 0.0, 1.0);
        for (int i = 0; i < n; i++) {
            b[i] = tests_uniform(&r, 85.0, 89.0);
            a[i] = b[i] + shift + spread * tests_uniform(&r, -1.0, 1.0);
            d[i] = a[i] - b[i];
        }
        double margin = tests_uniform(&r, 0.05, 1.0);
        mpt_stats_paired p;
        ck_assert_int_eq(mpt_stats_compare_paired(a, b, n, 0.95, margin, &p), MPT_OK);
        double mean = gsl_stats_mean(d, 1, (size_t)n);
        double sd = gsl_stats_sd(d, 1, (size_t)n);
        double half = gsl_cdf_tdist_Pinv(0.975, n - 1) * sd / sqrt((double)n);
        double tol = 1e-9 * (1.0 + fabs(mean) + half);
        ck_assert_msg(fabs(p.lo - (mean - half)) < tol && fabs(p.hi - (mean + half)) < tol,
                      "n=%d: [%g, %g] vs GSL [%g, %g]", n, p.lo, p.hi, mean - half, mean + half);
        int eq_by_tests = p.p_lower < 0.025 && p.p_upper < 0.025;
        ck_assert_msg(eq_by_tests == (p.verdict == MPT_VERDICT_EQUIVALENT), "n=%d p=(%g, %g) verdict %s", n,
                      p.p_lower, p.p_upper, mpt_verdict_name(p.verdict));
        seen[p.verdict]++;
        if (p.verdict == MPT_VERDICT_INCONCLUSIVE && p.seeds_needed > 0) {
            /* the suggestion decides, and one seed fewer would not */
            int k = p.seeds_needed;
            double target = fabs(fabs(mean) - margin);
            ck_assert(gsl_cdf_tdist_Pinv(0.975, k - 1) * sd / sqrt((double)k) < target);
            if (k - 1 > n) ck_assert(gsl_cdf_tdist_Pinv(0.975, k - 2) * sd / sqrt((double)(k - 1)) >= target);
        }
    }
    for (int v = 0; v < 4; v++) ck_assert_msg(seen[v] > 0, "verdict %s never reached", mpt_verdict_name(v));
}
END_TEST

#endif

/* Edge cases of tools/stats.h's rules, each from the header's own words (mutation audit, tests/hostile/mutation-teaching.md):
 * the noise ratio is INFINITY whenever sd_paired is 0 (also when the reference did not move either); a level outside
 * (0.5, 1) and an infinite value have no interval; with no spread (sd below 1e-9 of the values' magnitude, the
 * magnitude taken over a and b) only a common difference of exactly 0 is equivalent, a common negative one is
 * inconclusive like a positive one; with se = 0 the one-sided statistics (d + m) / se and (d - m) / se are +-infinity,
 * so p_lower = Q(+inf) = 0 when d > -m and p_upper = P(-inf) = 0 when d < m, and 1 on the other side; a spread of
 * 5.8e-8 on values near 1 is a spread. */
START_TEST(test_stats_edges) {
    /* the names tools/stats.h documents, which compare.json and the tables print */
    ck_assert_str_eq(mpt_verdict_name(MPT_VERDICT_EQUIVALENT), "equivalent");
    ck_assert_str_eq(mpt_verdict_name(MPT_VERDICT_BETTER), "better");
    ck_assert_str_eq(mpt_verdict_name(MPT_VERDICT_WORSE), "worse");
    ck_assert_str_eq(mpt_verdict_name(MPT_VERDICT_INCONCLUSIVE), "inconclusive");
    const double same[] = {87.0, 86.7, 88.1};
    mpt_stats_noise z;
    mpt_stats_noise_of(same, same, 3, &z);
    ck_assert_msg(z.sd_paired == 0.0 && isinf(z.ratio) && z.ratio > 0, "ratio %g", z.ratio);
    const double flat_ref[] = {80.0, 80.0, 80.0};
    mpt_stats_noise_of(flat_ref, flat_ref, 3, &z);
    ck_assert_msg(z.sd_between == 0.0 && isinf(z.ratio), "both spreads 0: ratio %g, want INFINITY", z.ratio);
    mpt_stats_interval iv;
    const double x[] = {1.0, 2.0, 4.0};
    ck_assert_int_eq(mpt_stats_mean_interval(x, 3, 0.4, &iv), MPT_ERR_ARG);
    ck_assert_int_eq(mpt_stats_mean_interval(x, 3, 0.5, &iv), MPT_ERR_ARG);
    const double xi[] = {1.0, INFINITY, 4.0};
    ck_assert_int_eq(mpt_stats_mean_interval(xi, 3, 0.95, &iv), MPT_ERR_ARG);
#ifdef MPT_HAVE_GSL
    const double zero[4] = {0};
    mpt_stats_paired p;
    const double down[] = {-0.125, -0.125, -0.125}; /* exact in binary: sd exactly 0 */
    ck_assert_int_eq(mpt_stats_compare_paired(down, zero, 3, 0.95, 0.3, &p), MPT_OK);
    ck_assert_msg(p.no_spread && p.verdict == MPT_VERDICT_INCONCLUSIVE && p.seeds_needed == -1, "verdict %s",
                  mpt_verdict_name(p.verdict));
    const double in[] = {0.125, 0.125, 0.125};
    ck_assert_int_eq(mpt_stats_compare_paired(in, zero, 3, 0.95, 0.3, &p), MPT_OK);
    ck_assert_msg(p.se == 0.0 && p.p_lower == 0.0 && p.p_upper == 0.0, "p (%g, %g)", p.p_lower, p.p_upper);
    const double up[] = {0.5, 0.5};
    ck_assert_int_eq(mpt_stats_compare_paired(up, zero, 2, 0.95, 0.3, &p), MPT_OK);
    ck_assert_msg(p.p_lower == 0.0 && p.p_upper == 1.0, "p (%g, %g)", p.p_lower, p.p_upper);
    ck_assert_int_eq(mpt_stats_compare_paired(down, zero, 3, 0.95, 0.05, &p), MPT_OK);
    ck_assert_msg(p.p_lower == 1.0 && p.p_upper == 0.0, "p (%g, %g)", p.p_lower, p.p_upper);
    /* d = 1e-7, 0, 0: sd = 1e-7 / sqrt(3) = 5.8e-8, above 1e-9 x 1 (the magnitude, at least 1) */
    const double tiny[] = {1.0 + 1e-7, 1.0, 1.0}, ones[] = {1.0, 1.0, 1.0};
    ck_assert_int_eq(mpt_stats_compare_paired(tiny, ones, 3, 0.95, 0.3, &p), MPT_OK);
    ck_assert_msg(!p.no_spread && p.verdict == MPT_VERDICT_EQUIVALENT, "sd %g", p.sd);
    /* the magnitude is a's too: d = 1e6, 1e6 + 1e-4 against b = 0 has sd 7.1e-5 < 1e-9 x 1e6 */
    const double big[] = {1e6, 1e6 + 1e-4};
    ck_assert_int_eq(mpt_stats_compare_paired(big, zero, 2, 0.95, 0.3, &p), MPT_OK);
    ck_assert_msg(p.no_spread, "sd %g on values of 1e6", p.sd);
    /* a suggestion between 1000 and the cap of 10000: d = -1, 1.2 (mean 0.1, sd 1.5556) at margin 0.17 needs
     * t_{0.975, k-1} 1.5556 / sqrt(k) < 0.07, about (1.96 x 22.2)^2 = 1900 seeds; the count is checked against the
     * definition (it decides, one fewer does not) with GSL's quantile */
    const double spread[] = {-1.0, 1.2};
    ck_assert_int_eq(mpt_stats_compare_paired(spread, zero, 2, 0.95, 0.17, &p), MPT_OK);
    ck_assert_int_eq(p.verdict, MPT_VERDICT_INCONCLUSIVE);
    const int k = p.seeds_needed;
    ck_assert_msg(k > 1000 && k < 3000, "seeds_needed %d", k);
    const double target = 0.17 - 0.1;
    ck_assert(gsl_cdf_tdist_Pinv(0.975, k - 1) * p.sd / sqrt((double)k) < target);
    ck_assert(gsl_cdf_tdist_Pinv(0.975, k - 2) * p.sd / sqrt((double)(k - 1)) >= target);
#endif
}
END_TEST

START_TEST(test_bad_input) {
    const double a[] = {1.0, 2.0, NAN}, b[] = {1.0, 1.0, 1.0};
    mpt_stats_paired p;
    ck_assert_int_eq(mpt_stats_compare_paired(a, b, 1, 0.95, 0.3, &p), MPT_ERR_ARG);
    ck_assert_int_eq(mpt_stats_compare_paired(a, b, 3, 0.95, 0.3, &p), MPT_ERR_ARG);
    ck_assert_int_eq(mpt_stats_compare_paired(a, b, 2, 0.95, 0.0, &p), MPT_ERR_ARG);
    ck_assert(strstr(mpt_last_error(), "--margin") != NULL);
    mpt_stats_interval iv;
    ck_assert_int_eq(mpt_stats_mean_interval(a, 1, 0.95, &iv), MPT_ERR_ARG);
    ck_assert(strstr(mpt_last_error(), "at least 2") != NULL);
    ck_assert_int_eq(mpt_stats_mean_interval(a, 3, 0.95, &iv), MPT_ERR_ARG); /* the NaN */
    ck_assert_int_eq(mpt_stats_mean_interval(a, 2, 1.0, &iv), MPT_ERR_ARG);
#ifndef MPT_HAVE_GSL
    ck_assert_int_eq(mpt_stats_available(), 0);
    ck_assert_int_eq(mpt_stats_compare_paired(a, b, 2, 0.95, 0.3, &p), MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "libgsl-dev") != NULL, "%s", mpt_last_error());
#else
    ck_assert_int_eq(mpt_stats_available(), 1);
#endif
}
END_TEST

static Suite *stats_suite(void) {
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("stats");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_summary);
    tcase_add_test(tc, test_noise_by_hand);
#ifdef MPT_HAVE_GSL
    tcase_add_test(tc, test_interval_by_hand);
    tcase_add_test(tc, test_mean_interval_by_hand);
    tcase_add_test(tc, test_verdicts);
    tcase_add_test(tc, test_random_against_gsl);
#endif
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_stats_edges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(stats_suite()); }
