/*
 * tools/stats.c - summaries over seeds and the paired t interval with its TOST verdict (the math is in
 * tools/stats.h). The t distribution's quantiles and tail probabilities come from GSL (gsl_cdf_tdist_Pinv,
 * gsl_cdf_tdist_P/Q); everything else is plain sums in FP64.
 */
#include <math.h>

#include "mpt_config.h"
#include "tools/stats.h"

#ifdef MPT_HAVE_GSL
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#endif

void mpt_stats_summarize(const double *x, int n, mpt_stats_summary *s) {
    s->n = n;
    s->mean = s->sd = s->min = s->max = NAN;
    if (n < 1) return;
    double sum = 0.0;
    s->min = s->max = x[0];
    for (int i = 0; i < n; i++) {
        sum += x[i];
        if (x[i] < s->min) s->min = x[i];
        if (x[i] > s->max) s->max = x[i];
    }
    s->mean = sum / n;
    if (n < 2) return;
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (x[i] - s->mean) * (x[i] - s->mean);
    s->sd = sqrt(ss / (n - 1));
}

void mpt_stats_noise_of(const double *a, const double *b, int n, mpt_stats_noise *out) {
    out->n = n;
    out->sd_between = out->sd_paired = out->ratio = NAN;
    if (n < 2) return;
    double d[n];
    for (int i = 0; i < n; i++) d[i] = a[i] - b[i];
    mpt_stats_summary sb, sd;
    mpt_stats_summarize(b, n, &sb);
    mpt_stats_summarize(d, n, &sd);
    out->sd_between = sb.sd;
    out->sd_paired = sd.sd;
    out->ratio = sd.sd > 0.0 ? sb.sd / sd.sd : INFINITY;
}

const char *mpt_verdict_name(mpt_verdict v) {
    switch (v) {
    case MPT_VERDICT_EQUIVALENT: return "equivalent";
    case MPT_VERDICT_BETTER: return "better";
    case MPT_VERDICT_WORSE: return "worse";
    case MPT_VERDICT_INCONCLUSIVE: return "inconclusive";
    }
    return "?";
}

int mpt_stats_available(void) {
#ifdef MPT_HAVE_GSL
    return 1;
#else
    return 0;
#endif
}

#ifdef MPT_HAVE_GSL
/* The verdict read off the interval (tools/stats.h). */
static mpt_verdict verdict_of(double lo, double hi, double m) {
    if (lo > -m && hi < m) return MPT_VERDICT_EQUIVALENT;
    if (lo > m) return MPT_VERDICT_BETTER;
    if (hi < -m) return MPT_VERDICT_WORSE;
    return MPT_VERDICT_INCONCLUSIVE;
}

/* Smallest n' > n with t_{q, n'-1} * sd / sqrt(n') < target; -1 when none up to the cap. */
static int seeds_needed(int n, double sd, double target, double q) {
    if (!(target > 0.0) || !(sd > 0.0)) return -1;
    for (int k = n + 1; k <= MPT_STATS_MAX_SEEDS_SUGGESTED; k++)
        if (gsl_cdf_tdist_Pinv(q, (double)(k - 1)) * sd / sqrt((double)k) < target) return k;
    return -1;
}
#endif

mpt_status mpt_stats_mean_interval(const double *x, int n, double level, mpt_stats_interval *out) {
    if (n < 2) return mpt_errorf(MPT_ERR_ARG, "a confidence interval needs at least 2 seeds, found %d", n);
    if (!(level > 0.5 && level < 1.0))
        return mpt_errorf(MPT_ERR_ARG, "confidence level: expected a number in (0.5, 1), found %g", level);
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return mpt_errorf(MPT_ERR_ARG, "seed %d: a non-finite value (%g) has no interval", i, x[i]);
#ifndef MPT_HAVE_GSL
    (void)out;
    return mpt_errorf(MPT_ERR_ARG, "confidence intervals need Student t quantiles from GSL, and this mptrain was "
                                   "built without it: apt-get install libgsl-dev, then rebuild (meson setup "
                                   "--reconfigure build)");
#else
    gsl_set_error_handler_off();
    mpt_stats_summary s;
    mpt_stats_summarize(x, n, &s);
    out->n = n;
    out->mean = s.mean;
    out->sd = s.sd;
    out->se = s.sd / sqrt((double)n);
    out->level = level;
    out->t_crit = gsl_cdf_tdist_Pinv(1.0 - (1.0 - level) / 2.0, (double)(n - 1));
    out->lo = s.mean - out->t_crit * out->se;
    out->hi = s.mean + out->t_crit * out->se;
    return MPT_OK;
#endif
}

mpt_status mpt_stats_compare_paired(const double *a, const double *b, int n, double level, double margin,
                            mpt_stats_paired *out) {
    if (n < 2) return mpt_errorf(MPT_ERR_ARG, "a paired comparison needs at least 2 seeds, found %d", n);
    if (!(level > 0.5 && level < 1.0))
        return mpt_errorf(MPT_ERR_ARG, "confidence level: expected a number in (0.5, 1), found %g", level);
    if (!(margin > 0.0) || !isfinite(margin))
        return mpt_errorf(MPT_ERR_ARG, "--margin: expected a number > 0, found %g", margin);
    for (int i = 0; i < n; i++)
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return mpt_errorf(MPT_ERR_ARG, "seed %d: a non-finite value (%g, %g) cannot be compared", i, a[i], b[i]);
#ifndef MPT_HAVE_GSL
    (void)out;
    return mpt_errorf(MPT_ERR_ARG, "confidence intervals need Student t quantiles from GSL, and this mptrain was "
                                   "built without it: apt-get install libgsl-dev, then rebuild (meson setup "
                                   "--reconfigure build)");
#else
    double d[n];
    for (int i = 0; i < n; i++) d[i] = a[i] - b[i];
    mpt_stats_interval iv; /* the interval of the mean difference */
    MPT_TRY(mpt_stats_mean_interval(d, n, level, &iv));
    mpt_stats_summary s = {.n = n, .mean = iv.mean, .sd = iv.sd};
    double q = 1.0 - (1.0 - level) / 2.0;
    double df = (double)(n - 1);
    out->n = n;
    out->mean = iv.mean;
    out->sd = iv.sd;
    out->se = iv.se;
    out->level = level;
    out->margin = margin;
    out->t_crit = iv.t_crit;
    out->lo = iv.lo;
    out->hi = iv.hi;
    if (out->se > 0.0) {
        out->p_lower = gsl_cdf_tdist_Q((s.mean + margin) / out->se, df);
        out->p_upper = gsl_cdf_tdist_P((s.mean - margin) / out->se, df);
    } else {
        out->p_lower = s.mean > -margin ? 0.0 : 1.0;
        out->p_upper = s.mean < margin ? 0.0 : 1.0;
    }
    out->verdict = verdict_of(out->lo, out->hi, margin);
    out->seeds_needed = out->verdict == MPT_VERDICT_INCONCLUSIVE
                            ? seeds_needed(n, s.sd, fabs(fabs(s.mean) - margin), q) : 0;
    double scale = 1.0; /* the values' magnitude: what rounding of a_i - b_i leaves in sd when the pairs agree */
    for (int i = 0; i < n; i++) scale = fmax(scale, fmax(fabs(a[i]), fabs(b[i])));
    out->no_spread = !(out->sd > 1e-9 * scale);
    if (out->no_spread) {
        int all_zero = 1;
        for (int i = 0; i < n; i++) all_zero &= d[i] == 0.0;
        out->verdict = all_zero ? MPT_VERDICT_EQUIVALENT : MPT_VERDICT_INCONCLUSIVE;
        out->seeds_needed = all_zero ? 0 : -1;
    }
    return MPT_OK;
#endif
}
