/* tools/sentences.c - sentences chosen by their numbers (tools/sentences.h says what each branch means). */
#include "tools/sentences.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tools/formats.h"

/* ---- statistics over seeds ------------------------------------------------------------------------------------ */

/* What pairing did to the noise: -1 cancelled part of the seed's effect (sd_paired < 0.8 sd_between), 1 spread more
 * (sd_paired > 1.25 sd_between), 0 about the same: a 25% band either way is what "about the same" means here. */
static int pairing_side(double sd_between, double sd_paired) {
    return sd_paired < 0.8 * sd_between ? -1 : sd_paired > 1.25 * sd_between ? 1 : 0;
}

/* snprintf at b[*k], keeping *k within n (the text is cut at n - 1, never overrun) */
static void append(char *b, size_t n, size_t *k, const char *fmt, ...) {
    if (*k >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b + *k, n - *k, fmt, ap);
    va_end(ap);
    if (w > 0) *k = *k + (size_t)w < n ? *k + (size_t)w : n - 1;
}

void mpt_text_pairing(char *b, size_t n, const char *name, double sd_between, double sd_paired) {
    if (!isfinite(sd_between) || !isfinite(sd_paired)) {
        snprintf(b, n, "%s: no spread (fewer than 2 seeds)", name);
        return;
    }
    if (sd_between <= 0.0) {
        snprintf(b, n, "%s: paired sd %.2f pp against a reference that did not move at all over the seeds (sd 0)",
                 name, sd_paired);
        return;
    }
    const double r = sd_paired / sd_between;
    const int side = pairing_side(sd_between, sd_paired);
    if (side < 0)
        snprintf(b, n, "%s's paired sd %.2f pp is %.2fx the reference's own: smaller, because a seed moved both runs "
                 "of a pair alike and their difference cancelled that shared part", name, sd_paired, r);
    else if (side > 0)
        snprintf(b, n, "%s's paired sd %.2f pp is %.2fx the reference's own: larger, so here the two runs of a pair "
                 "did not move alike and the pairing cancelled none of the seed's effect", name, sd_paired, r);
    else
        snprintf(b, n, "%s's paired sd %.2f pp is %.2fx the reference's own: about the same, so here the pairing "
                 "cancelled little of the seed's effect", name, sd_paired, r);
}

int mpt_text_noise_conclusion(char *b, size_t n, const mpt_text_noise *x) {
    char diffs[1200] = "", ratios[300] = "";
    size_t kd = 0, kr = 0;
    int within = 1, less = 1, more = 1;
    for (int p = 0; p < x->np && p < 8; p++) {
        const double d = x->mean_diff[p], sp = x->sd_paired[p], sb = x->sd_between[p];
        const double r = sb > 0 ? sp / sb : NAN;
        within &= fabs(d) <= 2.0 * sp;
        less &= pairing_side(sb, sp) < 0;
        more &= pairing_side(sb, sp) > 0;
        append(diffs, sizeof diffs, &kd, "%s%s - %s %+.2f pp on average, moving by sd %.2f pp from seed to seed (%.2fx "
               "%s's own sd; a one-seed difference of this size %s)", p ? "; " : "", x->names[p], x->ref, d, sp, r,
               x->ref, fabs(d) > 2.0 * sp ? "stands out from that noise" : "would not stand out from that noise");
        append(ratios, sizeof ratios, &kr, "%s%.2f for %s", p ? ", " : "", r, x->names[p]);
    }
    char pairing[600];
    if (less)
        snprintf(pairing, sizeof pairing, "the pairing cancelled part of the seed's effect here (paired sd / %s's sd: "
                 "%s)", x->ref, ratios);
    else if (more)
        snprintf(pairing, sizeof pairing, "here the paired differences spread more than %s alone (paired sd / %s's "
                 "sd: %s)", x->ref, x->ref, ratios);
    else
        snprintf(pairing, sizeof pairing, "here the paired spreads are about %s's own, so the pairing cancelled little "
                 "of the seed's effect (paired sd / %s's sd: %s)", x->ref, x->ref, ratios);
    if (within)
        snprintf(b, n, "Observed: one seed cannot rank these precisions. With the same seed, %s over %d seeds: every "
                 "mean difference lies within twice its paired sd, the noise of a one-seed comparison. %s alone moves "
                 "by sd %.2f pp from seed to seed (%.2f..%.2f%%): that is the spread of one run, not of a comparison; "
                 "%s.", diffs, x->n_seeds, x->ref, x->ref_sd, x->ref_min, x->ref_max, pairing);
    else
        snprintf(b, n, "Not observed: with the same seed, %s over %d seeds: for at least one precision the mean "
                 "difference exceeds twice its paired sd, so here even one seed would show its sign. %s alone moves by "
                 "sd %.2f pp (%.2f..%.2f%%), the spread of one run; %s.", diffs, x->n_seeds, x->ref, x->ref_sd,
                 x->ref_min, x->ref_max, pairing);
    return within;
}

void mpt_text_target_verdict(char *b, size_t n, const char *name, double target, int n_seeds,
                             const mpt_stats_interval *ci, double mean, int at_target) {
    if (!ci) {
        snprintf(b, n, "%s: one seed, %.2f%%, %s %.1f%%; one seed gives no interval, so this is no claim about the "
                 "recipe's mean", name, mean, mean >= target ? "at or above" : "below", target);
        return;
    }
    if (ci->mean >= target && ci->lo >= target)
        snprintf(b, n, "%s reaches %.1f%%: mean %.2f%% over %d seeds, and its whole 95%% interval [%.2f, %.2f] lies "
                 "at or above the target; %d of %d seeds reached it", name, target, ci->mean, n_seeds, ci->lo, ci->hi,
                 at_target, n_seeds);
    else if (ci->mean >= target)
        snprintf(b, n, "%s reaches %.1f%% on the mean (%.2f%% over %d seeds), but its 95%% interval [%.2f, %.2f] "
                 "reaches below the target: these seeds do not rule out a true mean under it; %d of %d seeds reached "
                 "it", name, target, ci->mean, n_seeds, ci->lo, ci->hi, at_target, n_seeds);
    else if (ci->hi >= target)
        snprintf(b, n, "%s misses %.1f%% on the mean (%.2f%% over %d seeds), though its 95%% interval [%.2f, %.2f] "
                 "reaches the target; %d of %d seeds reached it", name, target, ci->mean, n_seeds, ci->lo, ci->hi,
                 at_target, n_seeds);
    else
        snprintf(b, n, "%s misses %.1f%%: mean %.2f%% over %d seeds, and its whole 95%% interval [%.2f, %.2f] lies "
                 "below the target; %d of %d seeds reached it", name, target, ci->mean, n_seeds, ci->lo, ci->hi,
                 at_target, n_seeds);
}

const char *mpt_text_target_reached(double target, const mpt_stats_interval *ci, double mean) {
    if (!ci) return mean >= target ? "yes (one seed, no interval)" : "no (one seed)";
    if (ci->mean < target) return "**no**";
    return ci->lo >= target ? "yes (whole interval)" : "yes (mean; interval reaches below)";
}

void mpt_text_paired(char *b, size_t n, const char *what, const mpt_stats_paired *d, const mpt_stats_summary *diff) {
    if (!d) {
        if (diff && diff->n >= 2)
            snprintf(b, n, "%s %+.2f pp (mean of %d seeds, sd %.2f; no interval: this build has no GSL, so no "
                     "verdict)", what, diff->mean, diff->n, diff->sd);
        else
            snprintf(b, n, "%s %+.2f pp (one seed: no spread, no interval, no verdict)", what,
                     diff ? diff->mean : NAN);
        return;
    }
    if (d->no_spread) { /* tools/stats.h: a point, not an interval */
        if (d->verdict == MPT_VERDICT_EQUIVALENT)
            snprintf(b, n, "%s 0 in each of %d seeds: identical outcomes in every pair (equivalent; no spread "
                     "measured)", what, d->n);
        else
            snprintf(b, n, "%s %+.2f pp in each of %d seeds: no spread measured, so no interval and no verdict "
                     "(with outcomes in discrete steps, equal differences at a few seeds can be chance: more seeds)",
                     what, d->mean, d->n);
        return;
    }
    int k = snprintf(b, n, "%s %+.2f pp, %.0f%% CI [%.2f, %.2f] over %d seeds: ", what, d->mean, 100.0 * d->level,
                     d->lo, d->hi, d->n);
    if (k < 0 || (size_t)k >= n) return;
    char *t = b + k;
    size_t m = n - (size_t)k;
    switch (d->verdict) {
    case MPT_VERDICT_EQUIVALENT: snprintf(t, m, "equivalent within ±%.2g pp", d->margin); return;
    case MPT_VERDICT_BETTER: snprintf(t, m, "better by more than %.2g pp", d->margin); return;
    case MPT_VERDICT_WORSE: snprintf(t, m, "worse by more than %.2g pp", d->margin); return;
    case MPT_VERDICT_INCONCLUSIVE: break;
    }
    const int inside = fabs(d->mean) < d->margin;
    const char *goal = inside ? "equivalence" : d->mean > 0 ? "a verdict of better" : "a verdict of worse";
    if (d->seeds_needed > 0)
        snprintf(t, m, "inconclusive at ±%.2g pp; %s would need about %d seeds at this spread (if the mean stayed "
                 "where it is)", d->margin, goal, d->seeds_needed);
    else if (fabs(fabs(d->mean) - d->margin) < 1e-12)
        snprintf(t, m, "inconclusive at ±%.2g pp; the mean sits on the margin, so no number of seeds decides",
                 d->margin);
    else
        snprintf(t, m, "inconclusive at ±%.2g pp; %s would need more than %d seeds at this spread", d->margin, goal,
                 MPT_STATS_MAX_SEEDS_SUGGESTED);
}

void mpt_text_verdict_reading(char *b, size_t n, const char *what, const mpt_stats_paired *d) {
    if (!d) {
        snprintf(b, n, "with no interval, these runs say nothing about accuracy %s", what);
        return;
    }
    switch (d->verdict) {
    case MPT_VERDICT_WORSE:
        snprintf(b, n, "%s the network ended worse beyond the ±%.2g pp margin", what, d->margin);
        return;
    case MPT_VERDICT_BETTER:
        snprintf(b, n, "%s the network ended better beyond the ±%.2g pp margin", what, d->margin);
        return;
    case MPT_VERDICT_EQUIVALENT:
        snprintf(b, n, "%s the network ended equivalent within ±%.2g pp: no accuracy cost at that margin", what,
                 d->margin);
        return;
    case MPT_VERDICT_INCONCLUSIVE: break;
    }
    if (d->no_spread)
        snprintf(b, n, "%s every seed pair differed by the same %+.2f pp: no spread was measured, so these seeds give "
                 "no interval and no verdict", what, d->mean);
    else if (d->lo <= 0.0 && d->hi >= 0.0)
        snprintf(b, n, "%s these seeds resolve no accuracy difference in either direction (the interval holds 0)",
                 what);
    else
        snprintf(b, n, "%s the network ended %s on average, but not beyond the ±%.2g pp margin with these seeds", what,
                 d->hi < 0.0 ? "lower" : "higher", d->margin);
}

void mpt_text_vs_published(char *b, size_t n, const char *source, double published, double ref_outputs,
                           double outputs, const double *samples, int n_samples) {
    mpt_stats_summary sm;
    mpt_stats_summarize(samples, n_samples, &sm);
    const double f = sqrt(log(ref_outputs) / log(outputs)), scaled = published / f;
    int k = snprintf(b, n, "%s %.2g is a maximum over %.2g outputs; over %.2g outputs a Gaussian-like maximum is "
                     "%.2fx smaller, %.2g. Over %d operand sample%s here the metric ranged %.3g..%.3g (mean %.3g",
                     source, published, ref_outputs, outputs, f, scaled, n_samples, n_samples == 1 ? "" : "s", sm.min,
                     sm.max, sm.mean);
    if (k < 0 || (size_t)k >= n) return;
    if (n_samples >= 2) k += snprintf(b + k, n - (size_t)k, ", sd %.1f%% of it", 100.0 * sm.sd / sm.mean);
    if (k < 0 || (size_t)k >= n) return;
    if (scaled >= sm.min && scaled <= sm.max)
        snprintf(b + k, n - (size_t)k, "): the scaled figure lies inside that range, so the two agree within the "
                 "sampling spread");
    else if (n_samples < 2)
        snprintf(b + k, n - (size_t)k, "): one sample, no spread to compare within; the scaled figure is %.2fx "
                 "ours", scaled / sm.mean);
    else
        snprintf(b + k, n - (size_t)k, "): the scaled figure lies %s that range (%.2fx the mean), outside the "
                 "sampling spread", scaled > sm.max ? "above" : "below", scaled / sm.mean);
}

/* ---- number formats ------------------------------------------------------------------------------------------- */

void mpt_text_format_of(mpt_format fmt, const char *name, mpt_text_format *out) {
    const mpt_format_desc *fi = mpt_format_info(fmt);
    out->name = name;
    out->fmax = fi->max_finite;
    out->emin = (int)lround(log2(fi->min_normal));
    out->esub = (int)lround(log2(fi->min_subnormal));
}

double mpt_text_range_log2(const mpt_text_format *f) { return log2(f->fmax) - (double)f->esub; }

void mpt_text_range_ratio(char *b, size_t n, const mpt_text_format *a, const mpt_text_format *c) {
    const double ra = mpt_text_range_log2(a), rc = mpt_text_range_log2(c);
    const mpt_text_format *wide = ra >= rc ? a : c, *narrow = ra >= rc ? c : a;
    const double rw = fmax(ra, rc), rn = fmin(ra, rc);
    snprintf(b, n, "%s has 2^%.3g times %s's range (fmax / smallest subnormal: 2^%.1f against 2^%.1f)", wide->name,
             rw - rn, narrow->name, rw, rn);
}

void mpt_text_scaled_thresholds(char *b, size_t n, const mpt_text_format *a, const mpt_text_format *c) {
    const double sa = log2(a->fmax) - a->emin, sc = log2(c->fmax) - c->emin;
    const double fa = log2(a->fmax) - a->esub + 1.0, fc = log2(c->fmax) - c->esub + 1.0;
    snprintf(b, n, "a value more than 2^%.1f below amax becomes subnormal in %s (2^%.1f in %s), and one more than "
             "2^%.1f below it flushes to zero (2^%.1f in %s)", sa, a->name, sc, c->name, fa, fc, c->name);
}

void mpt_text_swamping(char *b, size_t n, const char *name, int p) {
    snprintf(b, n, "in %s once the running sum is 2^%d to 2^%d times the term (by where the sum lies in its binade: "
             "%d significant bits)", name, p, p + 1, p);
}

/* ---- accumulation --------------------------------------------------------------------------------------------- */

void mpt_text_accum_growth(char *b, size_t n, const char *name16, double grow16, double grow32, double start_ratio,
                           int64_t k_lo, int64_t k_hi) {
    const char *how = grow32 <= 2.0            ? "did not grow"
                      : grow32 >= 0.5 * grow16 ? "grew as fast"
                      : grow32 < 0.2 * grow16  ? "grew far more slowly"
                                               : "grew more slowly";
    snprintf(b, n, "From K = %lld to %lld the FP32 accumulator's error relative to the output %s (%.0fx) as the %s "
             "one's (%.0fx)%s; it started 2^%.1f (%.0fx) lower, which is what FP32 buys: %s", (long long)k_lo,
             (long long)k_hi, how, grow32, name16, grow16,
             grow32 <= 2.0 ? "" : ": every recursive sum's error grows with K, FP32's included",
             log2(start_ratio), start_ratio,
             grow32 >= 0.5 * grow16 ? "the same growth from a far lower start, not an error that stays put"
                                    : "a lower start and a slower growth");
}

void mpt_text_method_gain(char *b, size_t n, const char *method, const char *accum, double err_rec, double err_m,
                          int64_t K) {
    (void)K; /* the caller names K once for a list of these */
    const double ratio = err_rec / err_m;
    if (err_m == 0.0 && err_rec == 0.0)
        snprintf(b, n, "%s and the recursive sum in %s were both exact in the median", method, accum);
    else if (err_m == 0.0)
        snprintf(b, n, "%s in %s was exact in the median, where the recursive sum erred by %.2g", method, accum,
                 err_rec);
    else if (ratio >= 2.0)
        snprintf(b, n, "%s in %s erred %.3gx less than the recursive sum", method, accum, ratio);
    else if (ratio >= 0.5)
        snprintf(b, n, "%s in %s erred about as much as the recursive sum (%.2gx)", method, accum, ratio);
    else
        snprintf(b, n, "%s in %s erred more than the recursive sum (%.2gx as much), which the method does not lead one "
                 "to expect", method, accum, 1.0 / ratio);
}

/* "p = 0.53", or "p < 1e-12" below that */
static void p_text(char *b, size_t n, double p) {
    if (p < 1e-12) snprintf(b, n, "p < 1e-12");
    else snprintf(b, n, "p = %.2g", p);
}

void mpt_text_truncation_bias(char *b, size_t n, const char *model, const char *format, const mpt_text_signs *tc,
                              const mpt_text_signs *rn) {
    const double alpha = 0.01; /* the level at which a sign counts as resolved */
    const int64_t nt = tc->toward + tc->away, nr = rn->toward + rn->away;
    if (nt == 0) {
        snprintf(b, n, "the %s model's sums of %s products were all exact: truncation left no error whose sign could "
                 "be measured", model, format);
        return;
    }
    const double st = (double)tc->toward / (double)nt, sr = nr ? (double)rn->toward / (double)nr : NAN;
    char pt[32], pr[32], rn_part[300];
    p_text(pt, sizeof pt, tc->p);
    p_text(pr, sizeof pr, rn->p);
    const int rn_biased = nr > 0 && rn->p < alpha;
    if (nr == 0) snprintf(rn_part, sizeof rn_part, "IEEE recursive summation (round to nearest) was exact on every one");
    else
        snprintf(rn_part, sizeof rn_part, "IEEE recursive summation (round to nearest) did in %lld of %lld (%.1f%%, %s; "
                 "%+.3f)", (long long)rn->toward, (long long)nr, 100.0 * sr, pr, rn->mean_ratio);
    if (tc->p < alpha && st > 0.5 && !rn_biased)
        snprintf(b, n, "Truncation biased the error, it was not noise: the %s model's sums of %s products (round toward "
                 "zero inside each block FMA) came out smaller in magnitude than the exact sum in %lld of the %lld dot "
                 "products whose sum was not exact (%.1f%%, sign test %s; mean error %+.3f of the mean absolute "
                 "error), where %s, a split that chance explains (p >= 0.01)", model, format, (long long)tc->toward,
                 (long long)nt, 100.0 * st, pt, tc->mean_ratio, rn_part);
    else if (tc->p < alpha && st > 0.5)
        snprintf(b, n, "The %s model's sums of %s products came out smaller in magnitude than the exact sum in %lld of "
                 "%lld dot products (%.1f%%, sign test %s; mean error %+.3f of the mean absolute error), and %s: both "
                 "were biased here, so the bias is not truncation's alone", model, format, (long long)tc->toward,
                 (long long)nt, 100.0 * st, pt, tc->mean_ratio, rn_part);
    else if (tc->p < alpha)
        snprintf(b, n, "The %s model's sums of %s products came out larger in magnitude than the exact sum more often "
                 "than smaller (smaller in %lld of %lld, %.1f%%, sign test %s; mean error %+.3f of the mean absolute "
                 "error), which truncation toward zero does not lead one to expect; %s", model, format,
                 (long long)tc->toward, (long long)nt, 100.0 * st, pt, tc->mean_ratio, rn_part);
    else
        snprintf(b, n, "No bias was resolved at the 1%% level: the %s model's sums of %s products came out smaller in "
                 "magnitude than the exact sum in %lld of %lld dot products (%.1f%%, sign test %s; mean error %+.3f of "
                 "the mean absolute error), though truncation toward zero would lead one to expect far more; %s",
                 model, format, (long long)tc->toward, (long long)nt, 100.0 * st, pt, tc->mean_ratio, rn_part);
}

/* A factor as "2278x" from 100 on, else "48.3x". */
static void times_text(char *b, size_t n, double x) {
    if (x >= 100.0) snprintf(b, n, "%.0fx", x);
    else snprintf(b, n, "%.3gx", x);
}

/* How error x compares with error y: "34x more than", "about as much as (1.1x)", "1.4x less than"; with a zero (an exact
 * median) no ratio: "as much as" (both 0), "more than", "less than". */
static void ratio_words(char *b, size_t n, double x, double y) {
    if (x == 0.0 && y == 0.0) snprintf(b, n, "as much as");
    else if (y == 0.0) snprintf(b, n, "more than");
    else if (x == 0.0) snprintf(b, n, "less than");
    else if (x / y >= 1.25) snprintf(b, n, "%.3gx more than", x / y);
    else if (x / y <= 0.8) snprintf(b, n, "%.3gx less than", y / x);
    else snprintf(b, n, "about as much as (%.2gx)", x / y);
}

void mpt_text_tc_vs_ieee(char *b, size_t n, const char *model, const char *format, int64_t k_lo, int64_t k_hi,
                         double tc_lo, double tc_hi, double rn_lo, double rn_hi) {
    char lo[64], hi[64], growth[400] = "";
    ratio_words(lo, sizeof lo, tc_lo, rn_lo);
    ratio_words(hi, sizeof hi, tc_hi, rn_hi);
    if (tc_lo > 0 && rn_lo > 0 && tc_hi > 0 && rn_hi > 0) {
        const double lk = log((double)k_hi / (double)k_lo), et = log(tc_hi / tc_lo) / lk, er = log(rn_hi / rn_lo) / lk;
        const char *why = et >= 0.75 && er <= 0.65
                              ? "; errors of one sign add up with the number of blocks, while round to nearest's "
                                "errors of either sign partly cancel"
                          : et <= er + 0.1 ? "; the truncated sums' error did not grow faster than round to nearest's here"
                                           : "";
        char gt[32], gr[32];
        times_text(gt, sizeof gt, tc_hi / tc_lo);
        times_text(gr, sizeof gr, rn_hi / rn_lo);
        snprintf(growth, sizeof growth, ": from K = %lld to %lld its error grew %s (like K^%.2f), round to nearest's "
                 "%s (like K^%.2f)%s", (long long)k_lo, (long long)k_hi, gt, et, gr, er, why);
    }
    snprintf(b, n, "the %s model's sums of %s products erred %s IEEE recursive FP32 summation at K = %lld (median %.2g "
             "against %.2g) and %s it at K = %lld (%.2g against %.2g)%s", model, format, lo, (long long)k_lo, tc_lo,
             rn_lo, hi, (long long)k_hi, tc_hi, rn_hi, growth);
}

void mpt_text_same_bits(char *b, size_t n, const char *m1, const char *m2, int64_t differ, int64_t total) {
    if (differ == 0)
        snprintf(b, n, "the %s model's sums were bit for bit the %s model's in all %lld dot products", m2, m1,
                 (long long)total);
    else
        snprintf(b, n, "the %s model's sums differed from the %s model's in %lld of %lld dot products", m2, m1,
                 (long long)differ, (long long)total);
}

/* ---- FP8 ------------------------------------------------------------------------------------------------------ */

void mpt_text_promotion(char *b, size_t n, int promote, int64_t k_lo, int64_t k_hi, double fast_lo, double fast_hi,
                        double prom_lo, double prom_hi, double prom_min, double prom_max) {
    const int capped = prom_hi <= 2.0 * prom_lo && prom_hi < fast_hi;
    if (capped)
        snprintf(b, n, "promoting to FP32 every %d caps the fast accumulator's error rather than removing it: from K "
                 "= %lld to %lld it stayed between %.1e and %.1e (%.1e at the ends: it does not grow with K), where "
                 "without promotion it went from %.1e to %.1e", promote, (long long)k_lo, (long long)k_hi, prom_min,
                 prom_max, prom_lo, fast_lo, fast_hi);
    else
        snprintf(b, n, "promoting to FP32 every %d did not cap the fast accumulator's error: from K = %lld to %lld it "
                 "went from %.1e to %.1e (%.2gx; range %.1e..%.1e), against %.1e to %.1e without promotion", promote,
                 (long long)k_lo, (long long)k_hi, prom_lo, prom_hi, prom_lo > 0 ? prom_hi / prom_lo : INFINITY,
                 prom_min, prom_max, fast_lo, fast_hi);
}

void mpt_text_fp8_warmup(char *b, size_t n, int warm_steps, int steady_steps, double e4_warm, double e5_warm,
                         double e4_steady, double e5_steady, double e4_all, double e5_all) {
    if (warm_steps <= 0) {
        snprintf(b, n, "no telemetry step cast gradients with the initial scale 1 (no warm-up among the %d steps "
                 "measured): E4M3 %.3g%%, E5M2 %.3g%% throughout", steady_steps, 100.0 * e4_all, 100.0 * e5_all);
        return;
    }
    int k = snprintf(b, n, "delayed scaling's warm-up (%d step%s cast with the initial scale 1, before any amax was "
                     "recorded) lost %.3g%% of the gradient values in E4M3 and %.3g%% in E5M2; the steady state (%d "
                     "telemetry steps) %.3g%% and %.3g%%. ", warm_steps, warm_steps == 1 ? "" : "s", 100.0 * e4_warm,
                     100.0 * e5_warm, steady_steps, 100.0 * e4_steady, 100.0 * e5_steady);
    if (k < 0 || (size_t)k >= n) return;
    if (!isfinite(e4_all) || !isfinite(e5_all)) {
        snprintf(b + k, n - (size_t)k, "The run's telemetry did not measure the warm-up, so its means are the steady "
                 "state's");
        return;
    }
    const double share4 = e4_all > 0 ? (e4_warm * warm_steps) / (e4_all * (warm_steps + steady_steps)) : 0.0;
    snprintf(b + k, n - (size_t)k, "The whole-run means (%.3g%%, %.3g%%) %s", 100.0 * e4_all, 100.0 * e5_all,
             share4 >= 0.5 ? "are mostly the warm-up's: read the steady state for what the formats do once scaled"
                           : "are mostly the steady state's: the warm-up adds little to them");
}

void mpt_text_staleness(char *b, size_t n, const char *tensor, double max_stale, int stale_steps, int steps,
                        double sat_stale, double sat_current) {
    if (!(max_stale > 1.0) || stale_steps == 0)
        snprintf(b, n, "on `%s` no step's amax exceeded the amax its scale came from (largest ratio %.3g over %d "
                 "steps): the history was never stale in the direction that saturates", tensor, max_stale, steps);
    else
        snprintf(b, n, "on `%s` the amax grew past the one its scale came from at %d of %d steps (up to %.3gx): values "
                 "above the old amax saturate there, %.3g%% of them on those steps, where current scaling, which "
                 "scales by the step's own amax, saturated %.3g%%", tensor, stale_steps, steps, max_stale,
                 100.0 * sat_stale, 100.0 * sat_current);
}

void mpt_text_mx_rounding(char *b, size_t n, double sat_floor, double sat_rceil, double flush_floor,
                          double flush_rceil) {
    int k;
    if (sat_floor > sat_rceil)
        k = snprintf(b, n, "with FLOOR block scales %.3g%% of the operands' values saturated (a block whose amax / X "
                     "lies in [448, 512) clips its largest values to 448 X), with RCEIL %.3g%%", 100.0 * sat_floor,
                     100.0 * sat_rceil);
    else
        k = snprintf(b, n, "FLOOR block scales saturated no more of the operands' values than RCEIL (%.3g%% against "
                     "%.3g%%): the expected clipping of block maxima in [448 X, 512 X) did not show", 100.0 * sat_floor,
                     100.0 * sat_rceil);
    if (k < 0 || (size_t)k >= n) return;
    if (flush_rceil > flush_floor)
        snprintf(b + k, n - (size_t)k, "; RCEIL's X, up to one binade larger, flushed more: %.3g%% against %.3g%%",
                 100.0 * flush_rceil, 100.0 * flush_floor);
    else
        snprintf(b + k, n - (size_t)k, "; RCEIL's X, up to one binade larger, did not flush more here (%.3g%% against "
                 "FLOOR's %.3g%%; the two runs' values differ from the first step on)", 100.0 * flush_rceil,
                 100.0 * flush_floor);
}

void mpt_text_wire_unscaled(char *b, size_t n, int N, double flush1, double sub1, double err1, double err_s,
                            double log2_scale) {
    if (flush1 <= 0.0 && sub1 <= 0.0)
        snprintf(b, n, "Sent without the loss scale, FP16 flushed none of the ranks' terms at N = %d and made none "
                 "subnormal (error %.2g, at S = 2^%.0f %.2g)", N, err1, log2_scale, err_s);
    else if (err1 <= 1.1 * err_s)
        snprintf(b, n, "Sent without the loss scale, FP16 flushed %.3g%% of the ranks' nonzero terms at N = %d and made "
                 "%.3g%% subnormal, yet its error was %.2g against %.2g at S = 2^%.0f: those terms carry almost none "
                 "of the gradient's norm", 100.0 * flush1, N, 100.0 * sub1, err1, err_s, log2_scale);
    else
        snprintf(b, n, "Sent without the loss scale, FP16 flushed %.3g%% of the ranks' nonzero terms at N = %d and made "
                 "%.3g%% subnormal, and its error was %.2g against %.2g at S = 2^%.0f: %.2gx, the cost of sending the "
                 "gradient unscaled", 100.0 * flush1, N, 100.0 * sub1, err1, err_s, log2_scale, err1 / err_s);
}

/* ---- loss scaling --------------------------------------------------------------------------------------------- */

void mpt_text_underflow_cost(char *b, size_t n, const mpt_text_underflow *u) {
    const int negligible = u->mass_1 < 1e-4 && u->rel_1 < 1e-3;
    if (u->log2_scale == 0.0) { /* a run without loss scaling: S = 1 is what happened */
        snprintf(b, n, "Without loss scaling, %.2f%% of `%s`'s nonzero values rounded to zero in FP16, carrying %.2g "
                 "of its mass (sum |g|); the rounded gradient differed from the FP32 one by a relative L2 error of "
                 "%.2g. %s", 100.0 * u->flush_1, u->tensor, u->mass_1, u->rel_1,
                 negligible ? "Many values, almost none of the signal: a loss scale would save them by count, not "
                              "by mass"
                            : "That is a real share of the signal, which a loss scale would keep");
        return;
    }
    snprintf(b, n, "At S = 1, %.2f%% of `%s`'s nonzero values would round to zero in FP16, but they carry %.2g of its "
             "mass (sum |g|), and the rounded gradient would differ from the FP32 one by a relative L2 error of "
             "%.2g; at the run's S = 2^%.0f, %.2f%% flush, carrying %.2g of the mass, relative L2 error %.2g. %s",
             100.0 * u->flush_1, u->tensor, u->mass_1, u->rel_1, u->log2_scale, 100.0 * u->flush_s, u->mass_s,
             u->rel_s,
             negligible ? "What underflows here is many values but almost none of the signal: by count the scale "
                          "saves them, by mass and error this network loses next to nothing without it"
                        : "What underflows here carries a real share of the signal: without the scale this network's "
                          "gradient loses it");
}

void mpt_text_pct(char *b, size_t n, double v) {
    if (!isfinite(v)) snprintf(b, n, "n/a");
    else if (v != 0.0 && fabs(v) < 1e-4) snprintf(b, n, "%.2e%%", 100.0 * v);
    else snprintf(b, n, "%.3f%%", 100.0 * v);
}

void mpt_text_grad_underflow(char *b, size_t n, const char *name, int f16, double scale, const mpt_text_underflow *u) {
    char at_s[32], at_1[32], cost[900];
    mpt_text_pct(at_s, sizeof at_s, u->flush_s);
    mpt_text_pct(at_1, sizeof at_1, u->flush_1);
    if (f16 && scale > 1.0 && isfinite(u->flush_1)) {
        mpt_text_underflow_cost(cost, sizeof cost, u);
        size_t k = 0;
        append(b, n, &k, "Over all activation gradients, rounding to FP16 flushed %s of the nonzero values at the loss "
               "scale used (mean S = %g)", at_s, scale);
        if (u->flush_1 > u->flush_s && u->flush_s > 0.0)
            append(b, n, &k, "; at S = 1, with no loss scaling, it would have flushed %s: with the scale, %.1f times "
                   "fewer values vanished", at_1, u->flush_1 / u->flush_s);
        else if (u->flush_1 > u->flush_s) /* nothing flushed at S: no ratio to give ("inf times fewer") */
            append(b, n, &k, "; at S = 1, with no loss scaling, it would have flushed %s: with the scale, none "
                   "vanished", at_1);
        else
            append(b, n, &k, ", and %s at S = 1: the expected effect of loss scaling (fewer values flushed) is absent "
                   "in this run", at_1);
        append(b, n, &k, ". %s.", cost);
    } else if (f16) {
        mpt_text_underflow w = *u; /* S = 1 is what happened */
        w.flush_1 = u->flush_s, w.mass_1 = u->mass_s, w.rel_1 = u->rel_s, w.log2_scale = 0.0;
        mpt_text_underflow_cost(cost, sizeof cost, &w);
        if (u->flush_s > 0.0) snprintf(b, n, "%s.", cost);
        else
            snprintf(b, n, "Over all activation gradients, rounding to FP16 without loss scaling flushed %s of the "
                     "nonzero values to zero (none: the expected FP16 underflow is absent in this run).", at_s);
    } else {
        snprintf(b, n, "Over all activation gradients, rounding to %s flushed %s of the nonzero values to zero%s.", name,
                 at_s, u->flush_s > 1e-3 ? " although BF16 has FP32's exponent range: the expected absence of "
                                           "underflow does not hold in this run"
                                         : ": BF16 keeps FP32's exponent range, so it needs no loss scale");
    }
}

/* ---- overflow ------------------------------------------------------------------------------------------------- */

void mpt_text_overflow_bound(char *b, size_t n, int batch, double settled, int backoffs_above, int backoffs_below) {
    const double bound = 65520.0 * batch;
    const int e = (int)floor(log2(bound));
    const double p2 = ldexp(1.0, e == log2(bound) ? e - 1 : e); /* the largest power of two strictly below */
    const int pe = (int)lround(log2(p2));
    int k = snprintf(b, n, "With a mean loss over a batch of B = %d, the logits' gradient of an example that puts "
                     "probability p on its label is S (p - 1) / B in that coordinate, which reaches FP16's overflow "
                     "threshold 65520 when S >= 65520 B / (1 - p) = %.0f / (1 - p): no S below %.0f can overflow "
                     "there, and 2^%d is the largest power of two below it. ", batch, bound, bound, pe);
    if (k < 0 || (size_t)k >= n) return;
    if (!(settled > 0))
        snprintf(b + k, n - (size_t)k, "The dynamic runs did not spend most of their steps at one scale, so there is "
                 "no common settle point to check against it.");
    else if (settled == p2 && backoffs_below == 0)
        snprintf(b + k, n - (size_t)k, "Every dynamic run spent most of its steps at 2^%.0f, the bound's power of "
                 "two, and none backed off from it or below: the %d backoffs of the distinct trajectories were all from "
                 "2^%d and above, where an example with probability below %.2g on its label overflows, as the bound "
                 "predicts.", log2(settled),
                 backoffs_above, pe + 1, 1.0 - bound / ldexp(1.0, pe + 1));
    else if (settled == p2)
        snprintf(b + k, n - (size_t)k, "Every dynamic run spent most of its steps at 2^%.0f, the bound's power of "
                 "two, but %d backoffs came from 2^%d or below, where the bound rules the logits' gradient out: a "
                 "gradient other than the logits' overflowed there.", log2(settled), backoffs_below, pe);
    else if (settled < p2)
        snprintf(b + k, n - (size_t)k, "The dynamic runs spent most of their steps at 2^%.0f, below the bound's 2^%d: a gradient "
                 "other than the logits' overflowed at or below 2^%d, where the bound rules the logits' out.",
                 log2(settled), pe, pe);
    else
        snprintf(b + k, n - (size_t)k, "The dynamic runs spent most of their steps at 2^%.0f, above the bound's 2^%d: no example was "
                 "confidently wrong enough (1 - p stayed below %.2g) for the logits' gradient to overflow there before "
                 "the run ended.",
                 log2(settled), pe, bound / settled);
}

/* ---- optimizer state ------------------------------------------------------------------------------------------ */

void mpt_text_adam_v_thresholds(char *b, size_t n, double beta2, int esub, double *t_sub, double *t_zero) {
    const double a = 1.0 - beta2;
    const double ts = sqrt(ldexp(1.0, esub) / a), tz = sqrt(ldexp(1.0, esub - 1) / a);
    if (t_sub) *t_sub = ts;
    if (t_zero) *t_zero = tz;
    snprintf(b, n, "(1 - beta2) g^2 = %.3g g^2: below FP16's smallest subnormal 2^%d (%.2g) for |g| < %.2g, and "
             "rounded to 0 for |g| <= %.2g (at or below half of it, 2^%d, the tie going to the even 0)", a, esub,
             ldexp(1.0, esub), ts, tz, esub - 1);
}

void mpt_text_state_sequence(char *b, size_t n, const mpt_text_state_seq *s) {
    size_t k = 0;
#define ADD(...)                                                                                                     \
    do {                                                                                                             \
        if (k < n) {                                                                                                 \
            int w_ = snprintf(b + k, n - k, __VA_ARGS__);                                                            \
            if (w_ > 0) k += (size_t)w_;                                                                             \
        }                                                                                                            \
    } while (0)
    b[0] = '\0';
    ADD("the second step's updates reached %.3g (%.0fx lr)", s->update2_max, s->update2_max / s->lr);
    if (s->grad_big_step > 0)
        ADD("; the weights they moved gave gradients up to %.3g at step %d", s->grad_big_max, s->grad_big_step);
    if (s->state_nonfinite_step > 0)
        ADD("; after step %d the stored state held %s in `%s` (%s: FP16 overflows from 65520 up)",
            s->state_nonfinite_step, s->state_value, s->state_tensor,
            strstr(s->state_tensor, "exp_avg_sq") ? "v = beta2 v + (1 - beta2) g^2 rounded to FP16"
                                                  : "m = beta1 m + (1 - beta1) g rounded to FP16");
    else
        ADD("; the stored state stayed finite over the first %d steps", s->looked);
    if (s->weights_nonfinite_step > 0)
        ADD("; after step %d master weights were non-finite (%s), so that step's update was",
            s->weights_nonfinite_step, s->bad_weights[0] ? s->bad_weights : "which ones not read");
    else
        ADD("; the master weights stayed finite over the first %d steps", s->looked);
    if (s->first_skip > 0)
        ADD("; from step %d on, steps were skipped for non-finite gradients (%d of %d)", s->first_skip, s->skipped,
            s->steps);
    else
        ADD("; no step of the whole run was skipped");
    if (s->loss_all_finite && s->skipped > 0 && s->weights_nonfinite_step > 0 && !s->bad_last)
        ADD(", while the loss stayed finite at every step (up to %.3g): the non-finite weights are all in hidden "
            "layers, whose outputs pass a ReLU that maps NaN to 0 (x > 0 ? x : 0) in the forward pass, while the "
            "backward pass multiplies gradients by those weights (0 x NaN = NaN)", s->loss_max);
    else if (s->loss_all_finite && s->skipped > 0)
        ADD(", while the loss stayed finite at every step (up to %.3g)", s->loss_max);
    else if (s->loss_all_finite)
        ADD(", and the loss stayed finite at every step (up to %.3g)", s->loss_max);
    else
        ADD(", and the loss itself became non-finite at some step");
#undef ADD
}

/* ---- master weights ------------------------------------------------------------------------------------------- */

void mpt_text_stochastic(char *b, size_t n, double acc, double lost, double applied, double applied_nearest) {
    if (fabs(applied - 1.0) <= 0.1 && lost < 0.5) /* most updates moved their weight: no "few" to speak of */
        snprintf(b, n, "stochastic rounding without masters reached %.2f%%: it rounded %.1f%% of its updates back to "
                 "the old weight on their step (that is what lost counts), and the weights moved by %.0f%% of the "
                 "update mass (round-to-nearest without masters: %.0f%%), as its unbiased rounding promises (most "
                 "updates moved their weight on their step here)", acc, 100.0 * lost,
                 100.0 * applied, 100.0 * applied_nearest);
    else if (fabs(applied - 1.0) <= 0.1)
        snprintf(b, n, "stochastic rounding without masters reached %.2f%%: it rounded %.1f%% of its updates back to "
                 "the old weight on their step (that is what lost counts), yet the weights moved by %.0f%% of the "
                 "update mass (round-to-nearest without masters: %.0f%%): the rounding is unbiased, and the few updates "
                 "that do move a weight move it by a whole ulp", acc, 100.0 * lost, 100.0 * applied,
                 100.0 * applied_nearest);
    else
        snprintf(b, n, "stochastic rounding without masters reached %.2f%%: it rounded %.1f%% of its updates back to "
                 "the old weight on their step, and the weights moved by %.0f%% of the update mass (round-to-nearest "
                 "without masters: %.0f%%): not the full mass its unbiased rounding promises in expectation, so here "
                 "it did not keep the updates", acc, 100.0 * lost, 100.0 * applied, 100.0 * applied_nearest);
}

/* ---- lost updates in FP32 ------------------------------------------------------------------------------------- */

void mpt_text_fp32_lost(char *b, size_t n, double lost_frac, double lost_mass) {
    if (!(lost_frac > 0.0))
        snprintf(b, n, "no nonzero update was lost in the FP32 weights");
    else if (lost_mass < 1e-4)
        snprintf(b, n, "%.3g%% of the nonzero updates were lost in the FP32 weights (below half an FP32 ulp of their "
                 "weight), but they carried only %.2g of the update mass: many tiny updates, almost no movement",
                 100.0 * lost_frac, lost_mass);
    else
        snprintf(b, n, "%.3g%% of the nonzero updates were lost in the FP32 weights (below half an FP32 ulp of their "
                 "weight), carrying %.2g of the update mass: a real share of the movement", 100.0 * lost_frac,
                 lost_mass);
}

/* ---- normalisation -------------------------------------------------------------------------------------------- */

/* "15x" for a ratio, "more than 1e6x" when a denominator is 0, "an infinite factor" when the numerator is inf. */
static void ratio_text(char *b, size_t n, double num, double den) {
    if (isinf(num)) snprintf(b, n, "without bound (inf)");
    else if (den <= 0.0) snprintf(b, n, "%s", num > 0.0 ? "without bound (against an exact result)" : "nothing");
    else snprintf(b, n, "%.3gx", num / den);
}

/* num / den, with a zero denominator read as "without bound" when num > 0 (inf) and as 1 when both are 0. */
static double ratio_of(double num, double den) {
    return den > 0.0 ? num / den : num > 0.0 || isinf(num) ? INFINITY : 1.0;
}

void mpt_text_norm_variance(char *b, size_t n, const mpt_text_norm_var *v) {
    int k = snprintf(b, n, "On the %d %s (median condition 1 + mean^2/var = %.3g), the one-pass variance E[x^2] - "
                     "E[x]^2 erred by %.2g in %s and %.2g in %s on the median one, against %.2g for the policy's two "
                     "passes in FP32; two passes in the same 16-bit formats erred %.2g and %.2g, so", v->n_units,
                     v->units, v->kappa_med, v->onepass16[0], v->fmt[0], v->onepass16[1], v->fmt[1], v->twopass32,
                     v->twopass16[0], v->twopass16[1]);
    for (int f = 0; f < 2 && k >= 0 && (size_t)k < n; f++) {
        char r[64];
        const double q = ratio_of(v->onepass16[f], v->twopass16[f]);
        ratio_text(r, sizeof r, v->onepass16[f], v->twopass16[f]);
        k += snprintf(b + k, n - (size_t)k, "%s in %s the one-pass formula %s", f ? ";" : "", v->fmt[f],
                      q >= 2.0 ? "cost " : q >= 0.5 ? "erred about as much as two passes (" : "erred less than two "
                                                                                               "passes (");
        if (k >= 0 && (size_t)k < n) k += snprintf(b + k, n - (size_t)k, "%s%s", r, q >= 2.0 ? " (its cancellation)" : ")");
        const double a = ratio_of(v->twopass16[f], v->twopass32);
        ratio_text(r, sizeof r, v->twopass16[f], v->twopass32);
        if (k >= 0 && (size_t)k < n)
            k += snprintf(b + k, n - (size_t)k, a >= 2.0 ? " and the 16-bit arithmetic itself cost %s over FP32's two passes"
                                                         : " and the 16-bit arithmetic erred no more than FP32 (%s)", r);
        if (k >= 0 && (size_t)k < n && v->nonfinite16[f] > 0.0)
            k += snprintf(b + k, n - (size_t)k, ", with a sum overflowing in %.3g%% of the %s", 100.0 * v->nonfinite16[f],
                          v->units);
        if (k >= 0 && (size_t)k < n && v->clamped16[f] > 0.0)
            k += snprintf(b + k, n - (size_t)k, ", cancelling to zero or below (clamped to 0, so scaled by "
                          "1/sqrt(eps)) in %.3g%%", 100.0 * v->clamped16[f]);
    }
    if (k < 0 || (size_t)k >= n) return;
    const double w = ratio_of(v->welford32, v->twopass32);
    snprintf(b + k, n - (size_t)k, ". Welford's update in FP32 erred %.2g, %s FP32's blocked two passes%s", v->welford32,
             w >= 2.0 ? "more than" : w >= 0.5 ? "about as much as" : "less than",
             w >= 2.0 ? " (it adds one element after another; the two passes add each row's part, then the parts)" : "");
}

void mpt_text_norm_shifted(char *b, size_t n, const mpt_text_norm_shift *v) {
    const int L = v->n_t - 1;
    if (L < 1) {
        snprintf(b, n, "(no shift ladder)");
        return;
    }
    const double g = ratio_of(v->onepass_bf16[L], v->onepass_bf16[0]);
    int first = -1;
    for (int i = 0; i <= L && first < 0; i++)
        if (v->clamped_bf16[i] > 0.0) first = i;
    double lo2 = INFINITY, hi2 = 0.0, lo32 = INFINITY, hi32 = 0.0;
    for (int i = 0; i <= L; i++) {
        lo2 = fmin(lo2, v->twopass_bf16[i]), hi2 = fmax(hi2, v->twopass_bf16[i]);
        lo32 = fmin(lo32, v->twopass_fp32[i]), hi32 = fmax(hi32, v->twopass_fp32[i]);
    }
    char cl[200];
    if (first >= 0)
        snprintf(cl, sizeof cl, "; from t = %g on it cancelled to zero or below in some %s (%.3g%% at t = %g, %.3g%% at "
                 "t = %g)", v->t[first], v->units, 100.0 * v->clamped_bf16[first], v->t[first],
                 100.0 * v->clamped_bf16[L], v->t[L]);
    else snprintf(cl, sizeof cl, "; it never cancelled to zero or below");
    const int two_flat = ratio_of(hi32, v->twopass_fp32[0]) <= 3.0;
    int k = snprintf(b, n, "Shifted by t standard deviations each (t = %g to %g, median condition %.3g to %.3g), the %s' "
                     "one-pass variance in BF16 %s from %.2g to %.2g%s; in FP16 it went from %.2g to %.2g and in FP32 "
                     "from %.2g to %.2g. ", v->t[0], v->t[L], v->kappa[0], v->kappa[L], v->units,
                     g >= 10.0 ? "grew" : "did not grow tenfold", v->onepass_bf16[0], v->onepass_bf16[L], cl,
                     v->onepass_fp16[0], v->onepass_fp16[L], v->onepass_fp32[0], v->onepass_fp32[L]);
    if (k < 0 || (size_t)k >= n) return;
    snprintf(b + k, n - (size_t)k, "Two passes in FP32 %s (%.2g to %.2g over the shifts); two passes in BF16 ranged "
             "%.2g to %.2g (%s)%s", two_flat ? "stayed within a factor 3 of their unshifted error" : "grew too",
             lo32, hi32, lo2, hi2,
             ratio_of(hi2, v->twopass_bf16[0]) <= 3.0 ? "the subtraction of the mean removes the shift"
                                                      : "its 16-bit sum of the shifted values loses the mean itself",
             g >= 10.0 && two_flat ? ": the one-pass subtraction cancels as the condition grows, FP32's two passes do "
                                     "not" : "");
}

/* One batch's clause of mpt_text_norm_fp16_batches. */
static void fp16_batch_clause(char *b, size_t n, int batch, double nonfinite, int skipped, int steps, double acc,
                              double acc_ref) {
    char over[160];
    if (isnan(nonfinite)) snprintf(over, sizeof over, "(not measured on the trained activations)");
    else if (nonfinite > 0.0)
        snprintf(over, sizeof over, "%.3g%% of the batch-norm channels' FP16 statistics were not finite on the "
                 "trained network's activations (a sum past 65504)", 100.0 * nonfinite);
    else snprintf(over, sizeof over, "no batch-norm channel's FP16 statistics overflowed on the trained network's "
                  "activations");
    const char *run = steps > 0 && skipped == steps ? "every step of the fp16 run with FP16 statistics was skipped"
                      : skipped > 0 ? "the fp16 run with FP16 statistics skipped some steps"
                                    : "the fp16 run with FP16 statistics skipped no step";
    snprintf(b, n, "at batch %d %s, and %s (%d of %d; test accuracy %.2f%% against %.2f%% with FP32 statistics)", batch,
             over, run, skipped, steps, acc, acc_ref);
}

void mpt_text_norm_fp16_batches(char *b, size_t n, const mpt_text_norm_fp16 *f) {
    char lo[400], hi[400];
    fp16_batch_clause(lo, sizeof lo, f->batch_lo, f->nonfinite_lo, f->skipped_lo, f->steps_lo, f->acc_lo,
                      f->acc_ref_lo);
    fp16_batch_clause(hi, sizeof hi, f->batch_hi, f->nonfinite_hi, f->skipped_hi, f->steps_hi, f->acc_hi,
                      f->acc_ref_hi);
    const int grew = f->skipped_hi * (f->steps_lo > 0 ? f->steps_lo : 1) > f->skipped_lo * (f->steps_hi > 0 ? f->steps_hi : 1);
    snprintf(b, n, "With FP16 statistics, %s; %s. %s", lo, hi,
             grew ? "The larger batch failed more: a channel's sums grow with n = batch x H x W and FP16 overflows past "
                    "65504, which FP32 statistics never reach"
                  : "The larger batch did not fail more often here, although a channel's sums grow with n = batch x H "
                    "x W toward FP16's 65504");
}

/* ---- scale ---------------------------------------------------------------------------------------------------- */

/* Which of the two networks paid in accuracy (a verdict of worse), as the last sentence of both forms says it. */
static const char *scale_who(const mpt_text_scale *s) {
    const int p0 = s->d[0] && s->d[0]->verdict == MPT_VERDICT_WORSE, p1 = s->d[1] && s->d[1]->verdict == MPT_VERDICT_WORSE;
    return p0 && p1 ? "Both networks paid for it in accuracy"
           : p1     ? "What cost no resolved accuracy on the first network cost accuracy on the deeper one"
           : p0     ? "Only the first network paid for it in accuracy; no cost was resolved on the deeper one"
                    : "Neither network's accuracy showed a cost that these seeds resolve: at these sizes the count did "
                      "not measurably cost accuracy";
}

void mpt_text_scale_brief(char *b, size_t n, const mpt_text_scale *s) {
    char acc[2][160];
    for (int i = 0; i < 2; i++) {
        const mpt_stats_paired *d = s->d[i];
        if (d)
            snprintf(acc[i], sizeof acc[i], "%+.2f pp [%.2f, %.2f] (%s)", d->mean, d->lo, d->hi,
                     mpt_verdict_name(d->verdict));
        else
            snprintf(acc[i], sizeof acc[i], "%+.2f pp (no interval)", s->diff[i] ? s->diff[i]->mean : NAN);
    }
    char grow[64];
    if (isnan(s->grow)) snprintf(grow, sizeof grow, "zero on both");
    else snprintf(grow, sizeof grow, "%.3gx", s->grow);
    snprintf(b, n, "%s: %s on %s, %s on %s (%s); %s %s and %s. %s", s->effect, s->measured[0], s->net[0],
             s->measured[1], s->net[1], grow, s->diff_what, acc[0], acc[1], scale_who(s));
}

void mpt_text_scale_effect(char *b, size_t n, const mpt_text_scale *s) {
    char acc[2][700];
    for (int i = 0; i < 2; i++) mpt_text_paired(acc[i], sizeof acc[i], s->diff_what, s->d[i], s->diff[i]);
    char grow[120];
    if (isnan(s->grow)) snprintf(grow, sizeof grow, "zero on both");
    else if (s->grow >= 2.0) snprintf(grow, sizeof grow, "it grew %.3gx from %s to %s", s->grow, s->net[0], s->net[1]);
    else if (s->grow >= 0.5)
        snprintf(grow, sizeof grow, "about the same on both (%.3gx)", s->grow);
    else snprintf(grow, sizeof grow, "it fell to %.3gx from %s to %s", s->grow, s->net[0], s->net[1]);
    snprintf(b, n, "%s. On %s, %s; %s. On %s, %s; %s. The count: %s. %s", s->effect, s->net[0], s->measured[0], acc[0],
             s->net[1], s->measured[1], acc[1], grow, scale_who(s));
}

/* ---- checkpoints ---------------------------------------------------------------------------------------------- */

void mpt_text_checkpoint_refused(char *b, size_t n, int kept, const char *why) {
    const char *what = "the final state is not finite";
    char buf[160] = "";
    const char *t = why ? strstr(why, "tensor ") : NULL;
    if (t) {
        t += strlen("tensor ");
        size_t len = strcspn(t, " ");
        const char *h = strstr(t, " holds ");
        snprintf(buf, sizeof buf, "%s %.*s holds %.*s", memchr(t, ':', len) ? "the optimizer state" : "the master weight",
                 (int)len, t, h ? (int)strcspn(h + 7, " ") : 1, h ? h + 7 : "?");
        what = buf;
    } else if (why && strstr(why, "scaler")) {
        what = "a loss-scaler value is not finite";
    } else if (why && strstr(why, "state ")) {
        what = "a run-state value is not finite";
    } else if (why && strstr(why, "weights hold")) {
        what = "the weights are non-finite";
    }
    snprintf(b, n, "%s (%s)", kept ? "kept from an earlier step" : "not written", what);
}

/* ---- FP8 ------------------------------------------------------------------------------------------------------ */

void mpt_text_fp8_grad_formats(char *b, size_t n, double e4_lost, double e5_lost, int mx) {
    if (!isfinite(e4_lost) || !isfinite(e5_lost)) {
        snprintf(b, n, "Not measured.");
        return;
    }
    if (!(e4_lost > e5_lost)) {
        snprintf(b, n, "E4M3 flushed or made subnormal %.3g%% of the gradient values and E5M2 %.3g%%: the expected "
                 "advantage of E5M2's wider range for gradients is not observed in this run (the gradients' dynamic "
                 "range fits E4M3's).", 100.0 * e4_lost, 100.0 * e5_lost);
        return;
    }
    char ratio[200];
    mpt_text_format e4, e5;
    mpt_text_format_of(MPT_FORMAT_E4M3, "E4M3", &e4);
    mpt_text_format_of(MPT_FORMAT_E5M2, "E5M2", &e5);
    mpt_text_range_ratio(ratio, sizeof ratio, &e4, &e5);
    snprintf(b, n, "E4M3 flushed or made subnormal %.3g%% of the gradient values against E5M2's %.3g%%: with one scale "
             "%s, E4M3's narrower range (%s) reaches fewer of the small gradients, which is why TransformerEngine's "
             "HYBRID recipe (`fp8`) casts gradients to E5M2%s.", 100.0 * e4_lost, 100.0 * e5_lost,
             mx ? "per block of 32" : "for the whole tensor", ratio,
             mx ? " (MXFP8 recipes keep E4M3 for gradients: each block's scale follows the block's own largest value)"
                : "");
}
