/*
 * tools/stats.h - the statistics of a multi-seed comparison (`mptrain compare --seeds`): summaries over seeds,
 * and the paired comparison of one precision against fp32 with a Student t confidence interval and an
 * equivalence verdict (two one-sided tests, TOST).
 *
 * The math (Schuirmann 1987, "A comparison of the two one-sided tests procedure ..."; any statistics text for
 * the paired t interval): with per-seed differences d_i = a_i - b_i (i = 1..n, same seed for a_i and b_i),
 *   mean  d  = sum d_i / n,    sd s = sqrt(sum (d_i - d)^2 / (n - 1)),    standard error se = s / sqrt(n),
 *   the (1 - alpha) confidence interval  d -+ t_{1 - alpha/2, n-1} * se,
 * where t_{q, k} is the q-quantile of Student's t distribution with k degrees of freedom (GSL's
 * gsl_cdf_tdist_Pinv). Verdict against an equivalence margin m > 0, each one-sided test at level alpha/2,
 * so that every verdict can be read off the printed (1 - alpha) interval [lo, hi]:
 *   equivalent   both H0: mu <= -m and H0: mu >= +m rejected  <=>  -m < lo and hi < +m
 *   better       H0: mu <= +m rejected                          <=>  lo > +m
 *   worse        H0: mu >= -m rejected                          <=>  hi < -m
 *   inconclusive otherwise: the interval straddles -m or +m. The number of seeds suggested is the smallest
 *                n' > n for which an interval of the same centre and the observed s would decide, i.e.
 *                t_{1 - alpha/2, n'-1} * s / sqrt(n') < | |d| - m |  (none when |d| = m or s = 0).
 * With s = 0 the interval has zero width and the verdict follows from d alone.
 *
 * GSL is optional at build time (Meson feature `gsl`); without it the t quantiles are unavailable and
 * mpt_stats_compare_paired() returns MPT_ERR_ARG with a message naming libgsl-dev (callers check
 * mpt_stats_available() first, before any training, and refuse --seeds > 1 with the same advice).
 */
#ifndef MPT_TOOLS_STATS_H
#define MPT_TOOLS_STATS_H

#include "engine/status.h"

/* Mean, sample standard deviation (n - 1 in the denominator; NAN for n < 2), minimum and maximum. */
typedef struct mpt_stats_summary {
    int n;
    double mean, sd, min, max;
} mpt_stats_summary;

/* Summarises x[0..n) (n >= 1; n = 0 gives all NAN). */
void mpt_stats_summarize(const double *x, int n, mpt_stats_summary *s);

typedef enum mpt_verdict {
    MPT_VERDICT_EQUIVALENT = 0,
    MPT_VERDICT_BETTER,
    MPT_VERDICT_WORSE,
    MPT_VERDICT_INCONCLUSIVE,
} mpt_verdict;

/* "equivalent", "better", "worse", "inconclusive". */
const char *mpt_verdict_name(mpt_verdict v);

/* Cap on the suggested number of seeds: beyond it, seeds_needed is -1 ("more than this"). */
#define MPT_STATS_MAX_SEEDS_SUGGESTED 10000

/* The (level) confidence interval of a mean over n seeds: mean -+ t_{1 - alpha/2, n-1} * sd / sqrt(n), the one-sample
 * Student t interval (the paired comparison below is this interval on the differences). */
typedef struct mpt_stats_interval {
    int n;
    double mean, sd, se; /* sd and se are 0 when all values are equal */
    double level;        /* e.g. 0.95 */
    double t_crit;       /* t_{1 - alpha/2, n-1} */
    double lo, hi;
} mpt_stats_interval;

/* The interval of the mean of x[0..n) at confidence level `level` (0.5 < level < 1), into *out. MPT_ERR_ARG for n < 2
 * (no spread), a non-finite value, a level out of range, or a build without GSL (the message then says to install
 * libgsl-dev and rebuild). */
mpt_status mpt_stats_mean_interval(const double *x, int n, double level, mpt_stats_interval *out);

/* A paired comparison: per-seed differences a_i - b_i, in the caller's units (percentage points). */
typedef struct mpt_stats_paired {
    int n;               /* pairs */
    double mean, sd, se; /* of the differences; sd and se are 0 when all differences are equal */
    double level;        /* confidence level of [lo, hi], e.g. 0.95 */
    double t_crit;       /* t_{1 - alpha/2, n-1} */
    double lo, hi;       /* the confidence interval of the mean difference */
    double margin;       /* the equivalence margin m, > 0 */
    double p_lower;      /* one-sided p-value of H0: mu <= -m (small: not worse than -m) */
    double p_upper;      /* one-sided p-value of H0: mu >= +m (small: not better than +m) */
    mpt_verdict verdict;
    int seeds_needed;    /* inconclusive: suggested total number of seeds; 0 when decided; -1 when no finite
                            number would do (|d| = m, or more than MPT_STATS_MAX_SEEDS_SUGGESTED, or no_spread) */
    int no_spread;       /* 1 when every difference is the same (sd below 1e-9 of the values' magnitude: only
                            rounding of the subtraction): the sample measured no spread, so [lo, hi] is a point, not an
                            interval. A common difference of 0 (identical outcomes in every pair) keeps the verdict
                            equivalent; any other is INCONCLUSIVE (seeds_needed -1): discrete outcomes (accuracy in
                            steps of 1/test images) make equal differences a coincidence at a few seeds, and a
                            zero-width interval would call any such difference decided */
} mpt_stats_paired;

/* Compares a[0..n) with b[0..n) pairwise (a_i - b_i) at confidence level `level` (0.5 < level < 1) and
 * equivalence margin > 0, into *out.
 * MPT_ERR_ARG for n < 2, a non-finite value, a level or margin out of range, or a build without GSL (the
 * message then says to install libgsl-dev and rebuild). */
mpt_status mpt_stats_compare_paired(const double *a, const double *b, int n, double level, double margin,
                            mpt_stats_paired *out);

/* The seed noise of a paired comparison of a against a reference b, both trained with the same seeds: two
 * spreads, which answer two different questions.
 *   sd_between  the sample sd of b over seeds: how much one run's result moves from seed to seed (the spread of
 *               a single run of the reference about its mean);
 *   sd_paired   the sample sd of the per-seed differences a_i - b_i: how much a one-seed comparison of a with b
 *               moves from seed to seed. A seed moves both runs alike (same initial weights, same batches), and
 *               the difference cancels that shared part, so sd_paired is usually much smaller: it, not
 *               sd_between, is the noise a one-seed difference must be read against.
 * ratio = sd_between / sd_paired (INFINITY when sd_paired is 0). NAN for n < 2. No GSL needed. */
typedef struct mpt_stats_noise {
    int n;
    double sd_between, sd_paired, ratio;
} mpt_stats_noise;

void mpt_stats_noise_of(const double *a, const double *b, int n, mpt_stats_noise *out);

/* 1 when built with GSL (the t quantiles exist), 0 otherwise. */
int mpt_stats_available(void);

#endif
