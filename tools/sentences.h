/*
 * tools/sentences.h - the comparative and causal sentences of reports, lessons and `lab --list`, each chosen by the
 * numbers it describes (issue 37).
 *
 * A sentence that compares two measurements or names a cause is a template with a branch for every outcome the
 * numbers allow: the opposite of the expected effect included. Each function here takes the measurements (and
 * the format constants it needs, as numbers: this file includes no kernel header) and writes one sentence or clause
 * into b[n] (always NUL-terminated, cut to n). They are pure functions of their arguments, so tests/test_sentences.c
 * feeds each the expected case and the opposite one and checks that the text flips.
 *
 * Thresholds are stated where they are used; each says what "about the same", "as fast" or "negligible" means in
 * that sentence, so a reader of the source can check the words against the numbers.
 */
#ifndef MPT_TOOLS_SENTENCES_H
#define MPT_TOOLS_SENTENCES_H

#include <stddef.h>
#include <stdint.h>

#include "engine/dtype.h"
#include "tools/stats.h"

/* ---- statistics over seeds ------------------------------------------------------------------------------------ */

/* The two spreads of a paired design, said as measured: one run's spread over seeds (sd_between: the reference's
 * sd) against the spread of the paired differences (sd_paired) of precision `name`. The pairing "cancelled part of
 * the seed's effect" when sd_paired < 0.8 sd_between, "spread more than one run" when sd_paired > 1.25 sd_between,
 * "about the same" otherwise; NAN spreads (fewer than 2 seeds) say so. */
void mpt_text_pairing(char *b, size_t n, const char *name, double sd_between, double sd_paired);

/* The conclusion of lesson `noise` (tools/lab/lesson_noise.c): np precisions, each paired with the reference `ref`
 * over n_seeds seeds (same seed: same initial weights and batch order). Per precision p: names[p]; mean_diff[p], the
 * mean over seeds of acc_p - acc_ref (percentage points); sd_paired[p], the sd of those differences (the noise of a
 * one-seed comparison); sd_between[p], the reference's own sd over the same seeds (the spread of one run). ref_sd,
 * ref_min, ref_max: the reference's sd and accuracy range (%). The effect, "one seed cannot rank these precisions",
 * is observed when every |mean_diff| <= 2 sd_paired: the right noise for a paired design is the paired sd, not the
 * reference's sd over seeds. The pairing clause uses mpt_text_pairing's thresholds: "cancelled part of the seed's
 * effect" when every sd_paired < 0.8 sd_between, "spread more" when every sd_paired > 1.25 sd_between, "about"
 * otherwise. Returns 1 when observed, 0 when not. At most 8 precisions are named. */
typedef struct mpt_text_noise {
    int np, n_seeds;
    const char *ref;
    const char *const *names;
    const double *mean_diff, *sd_paired, *sd_between;
    double ref_sd, ref_min, ref_max;
} mpt_text_noise;

int mpt_text_noise_conclusion(char *b, size_t n, const mpt_text_noise *x);

/* A time-to-accuracy claim (`mptrain speedrun`, tools/speedrun.h): whether precision `name` reaches `target` % test
 * accuracy, read off the mean over n_seeds seeds and its 95% interval ci (NULL with one seed: then `mean`, the one
 * run's accuracy, and no claim about the recipe's mean). Four outcomes, each its own sentence: the whole interval at
 * or above the target; the mean at or above it with the interval reaching below; the mean below with the interval
 * reaching it; the whole interval below. at_target: the seeds whose accuracy is >= target, said as "K of n". */
void mpt_text_target_verdict(char *b, size_t n, const char *name, double target, int n_seeds,
                             const mpt_stats_interval *ci, double mean, int at_target);

/* The same claim as a table cell: "yes (whole interval)", "yes (mean; interval reaches below)", "**no**" (the mean
 * below), or with one seed (ci NULL) "yes (one seed, no interval)" / "no (one seed)". A static string. */
const char *mpt_text_target_reached(double target, const mpt_stats_interval *ci, double mean);

/* An accuracy comparison over seeds with its verdict and interval, never a bare "same":
 *   "<what> +0.10 pp, 95% CI [-3.08, 3.28] over 2 seeds: inconclusive at ±0.3 pp; equivalence would need about 212
 *    seeds at this spread"
 * d: the paired comparison (tools/stats.h), or NULL when there is no interval (a build without GSL, or one seed):
 * then the mean difference and its sd over the n seeds of `diff`, and why there is no interval. */
void mpt_text_paired(char *b, size_t n, const char *what, const mpt_stats_paired *d, const mpt_stats_summary *diff);

/* What an accuracy verdict says about a comparison "<what>" (e.g. "without loss scaling"), read off its interval:
 * worse / better beyond the margin, equivalent within it, or, when inconclusive, whether the interval holds 0 (no
 * difference resolved either way) or lies on one side of it (lower or higher on average, not beyond the margin). */
void mpt_text_verdict_reading(char *b, size_t n, const char *what, const mpt_stats_paired *d);

/* A figure measured here over several samples against a published one measured on more outputs: the published
 * figure is a maximum over ref_outputs values, ours over `outputs`; for Gaussian-like errors the maximum of n grows
 * like sqrt(2 ln n), so the published figure is first scaled by sqrt(ln outputs / ln ref_outputs). The sentence
 * gives our samples' range, mean and relative sd, and says whether the scaled figure lies inside the range of the
 * samples, or how far outside. */
void mpt_text_vs_published(char *b, size_t n, const char *source, double published, double ref_outputs,
                           double outputs, const double *samples, int n_samples);

/* ---- number formats ------------------------------------------------------------------------------------------- */

/* A format's range as the lessons state it, from its constants: fmax (largest finite), emin (exponent of the
 * smallest normal), esub (exponent of the smallest subnormal). */
typedef struct mpt_text_format {
    const char *name;
    double fmax;
    int emin, esub;
} mpt_text_format;

/* A format's constants from its row of the format table (engine/dtype.h mpt_format_info, checked against the
 * engine's decoders by tests/test_formats.c); name: how the sentence names it ("E4M3"). */
void mpt_text_format_of(mpt_format fmt, const char *name, mpt_text_format *out);

/* log2 of a format's dynamic range, fmax / smallest subnormal. */
double mpt_text_range_log2(const mpt_text_format *f);

/* "E5M2 has 2^14 times E4M3's range (fmax / smallest subnormal: 2^31.8 against 2^17.8)", the power from the
 * constants; the wider format first whichever order a and b come in. */
void mpt_text_range_ratio(char *b, size_t n, const mpt_text_format *a, const mpt_text_format *b_fmt);

/* With one scale per tensor mapping amax to fmax: below which multiple of amax a value becomes subnormal (amax /
 * 2^x with x = log2(fmax) - emin) and below which it flushes to zero (x = log2(fmax) - esub + 1: half the smallest
 * subnormal), for two formats: "... subnormal more than 2^14.8 below amax in E4M3 (2^29.8 in E5M2), flushed to zero
 * more than 2^18.8 below it (2^32.8)". */
void mpt_text_scaled_thresholds(char *b, size_t n, const mpt_text_format *a, const mpt_text_format *b_fmt);

/* Swamping in recursive summation: a term is lost entirely once it is below half an ulp of the running sum, i.e.
 * once the sum is 2^p to 2^(p+1) times the term (p = significant bits, the range by where the sum lies in its
 * binade): "in BF16 once the sum is 2^8 to 2^9 times the term". */
void mpt_text_swamping(char *b, size_t n, const char *name, int significant_bits);

/* ---- accumulation --------------------------------------------------------------------------------------------- */

/* How an FP32 accumulator's error relative to the output grew with K beside a 16-bit one's: grow32 and grow16 the
 * ratios of the median errors at k_hi and k_lo, start_ratio = error16 / error32 at k_lo. "as fast" when grow32 is
 * at least half of grow16, "slower" when below a fifth of it, "more slowly" between; grow32 <= 2 "did not grow". */
void mpt_text_accum_growth(char *b, size_t n, const char *name16, double grow16, double grow32, double start_ratio,
                           int64_t k_lo, int64_t k_hi);

/* What a blocked or compensated sum did against the recursive one in the same accumulator (median errors err_rec and
 * err_m): "10x less" when err_rec / err_m >= 2, "about as much" within [0.5, 2), "more" below 0.5; exact (err_m = 0)
 * and both exact said as such. */
void mpt_text_method_gain(char *b, size_t n, const char *method, const char *accum, double err_rec, double err_m,
                          int64_t K);

/* The direction of one summation's errors over many dot products (tools/lab/accum.h, mpt_accum_bias): of the nonzero
 * errors sign(exact) (sum - exact), `toward` shrank the sum's magnitude and `away` grew it; p the two-sided sign test's
 * p-value; mean_ratio = mean error / mean |error| (-1: every error toward zero; about 0: either sign alike). */
typedef struct mpt_text_signs {
    int64_t toward, away;
    double p, mean_ratio;
} mpt_text_signs;

/* What truncation did to the sign of a Tensor Core model's errors (`model`'s sums of `format` products: round toward
 * zero inside each block FMA), beside round-to-nearest's (IEEE recursive summation of the same products). A sign is
 * "resolved" at the 1% level (p < 0.01). Branches: the model biased toward zero and round-to-nearest not ("a bias,
 * not noise"); both biased ("not truncation's alone"); the model biased away from zero (the opposite of what
 * truncation leads one to expect); no bias resolved; no error to measure (every sum exact). */
void mpt_text_truncation_bias(char *b, size_t n, const char *model, const char *format, const mpt_text_signs *tc,
                              const mpt_text_signs *rn);

/* A Tensor Core model's median error against IEEE recursive FP32 summation's at the shortest and the longest K
 * (tc_lo, rn_lo at k_lo; tc_hi, rn_hi at k_hi; any unit, the same for all four): "less" when the model's is below 0.8x
 * IEEE's, "more" above 1.25x, "about as much" between, at each end; then each one's growth with its exponent (the
 * slope of log error over log K between the ends: 0.5 is sqrt(K), 1 is K). The causal reading (one-signed errors add up
 * with the number of blocks, errors of either sign partly cancel) is given only when the model's exponent is at least
 * 0.75 and IEEE's at most 0.65; when the model's grew no faster than IEEE's (exponent within 0.1), the sentence says
 * so. An error of 0 at either end leaves the growth out. */
void mpt_text_tc_vs_ieee(char *b, size_t n, const char *model, const char *format, int64_t k_lo, int64_t k_hi,
                         double tc_lo, double tc_hi, double rn_lo, double rn_hi);

/* Whether two summation models gave the same bits on the same dot products: `differ` of `total` sums differed in
 * some bit. */
void mpt_text_same_bits(char *b, size_t n, const char *m1, const char *m2, int64_t differ, int64_t total);

/* ---- FP8 ------------------------------------------------------------------------------------------------------ */

/* The fast accumulator with promotion every `promote` along a ladder of K: fast_lo/fast_hi the fast accumulator's
 * error at k_lo/k_hi without promotion, prom_min/prom_max the promoted error's range over the ladder, prom_lo/prom_hi
 * at the two ends. Promotion "caps" the error when the promoted error grew at most 2x from k_lo to k_hi and stayed
 * below the unpromoted one at k_hi; otherwise the sentence says it still grew. */
void mpt_text_promotion(char *b, size_t n, int promote, int64_t k_lo, int64_t k_hi, double fast_lo, double fast_hi,
                        double prom_lo, double prom_hi, double prom_min, double prom_max);

/* Delayed scaling's warm-up against its steady state for gradients in E4M3 and E5M2 (fractions of nonzero values
 * flushed or made subnormal): warm_steps steps cast with the initial scale 1; the rest is the steady state. Says how
 * much of the whole-run share (e4_all, e5_all: a run whose telemetry included the warm-up steps) came from the
 * warm-up; NAN whole-run shares: the run's telemetry did not measure the warm-up. */
void mpt_text_fp8_warmup(char *b, size_t n, int warm_steps, int steady_steps, double e4_warm, double e5_warm,
                         double e4_steady, double e5_steady, double e4_all, double e5_all);

/* Delayed scaling's amax history going stale on one tensor: max_stale = the largest ratio of a step's amax to the
 * amax its scale came from, stale_steps = the telemetry steps where it exceeded 1 (values above the old amax
 * saturate there), sat_stale = the saturated share on those steps, sat_current = the same tensor's saturated share
 * under current scaling (s from the step's own amax). */
void mpt_text_staleness(char *b, size_t n, const char *tensor, double max_stale, int stale_steps, int steps,
                        double sat_stale, double sat_current);

/* MX block scales, FLOOR (OCP's rule: block amax / X in [256, 512), values above 448 X saturate) against RCEIL (the
 * smallest X with amax / X <= 448: nothing saturates): the saturated and flushed shares of the operands under each
 * (means over the operand tensors and telemetry steps). */
void mpt_text_mx_rounding(char *b, size_t n, double sat_floor, double sat_rceil, double flush_floor,
                          double flush_rceil);

/* An FP16 all-reduce wire without the loss scale, at N ranks: the shares of the ranks' nonzero terms flushed and made
 * subnormal, and its error (against the FP32 all-reduce) beside the error at the loss scale S = 2^log2_scale. The
 * unscaled wire "costs" when its error exceeds the scaled one's by more than 10%. */
void mpt_text_wire_unscaled(char *b, size_t n, int N, double flush1, double sub1, double err1, double err_s,
                            double log2_scale);

/* ---- loss scaling --------------------------------------------------------------------------------------------- */

/* What FP16 underflow costs one activation gradient, not only how often: flushed share, the flushed values' share of
 * the gradient's mass (sum |v|), and the relative L2 error of the rounded gradient, at S = 1 and at the run's S. The
 * loss is "negligible" when the mass lost at S = 1 is below 1e-4 and its relative L2 error below 1e-3 (an FP16
 * rounding alone errs up to 2^-11 = 4.9e-4 per value); else it "carries a real share". log2_scale 0: a run without
 * loss scaling, whose S = 1 values (flush_1, mass_1, rel_1) are what happened. */
typedef struct mpt_text_underflow {
    const char *tensor;
    double flush_1, mass_1, rel_1;   /* at S = 1 */
    double flush_s, mass_s, rel_s;   /* at the run's S */
    double log2_scale;               /* log2 of the run's mean S */
} mpt_text_underflow;

void mpt_text_underflow_cost(char *b, size_t n, const mpt_text_underflow *u);

/* A share v (0..1) as a percentage for a report's tables and sentences: "n/a" when v is not finite, two significant
 * digits in e-notation below 0.01% (a share of 3e-7 must not print as 0.000%), three decimals otherwise. */
void mpt_text_pct(char *b, size_t n, double v);

/* The closing sentence of compare's Underflow paragraph: over all activation gradients (the pooled row), the share of
 * nonzero values that rounding into the run's 16-bit format `name` flushed to zero, and what it says.
 * f16 (the format is FP16), a loss scale (scale: the run's mean S, > 1) and a finite S = 1 counterfactual
 * (u->flush_1): "N times fewer values vanished" when the scale flushed fewer but not none (0 < u->flush_s <
 * u->flush_1), "none vanished" when it flushed none, and "the expected effect of loss scaling ... is absent" when it
 * flushed as many or more; each followed by mpt_text_underflow_cost's sentence. f16 without a loss scale (scale <= 1
 * or no counterfactual): the cost sentence at S = 1 (u->flush_s, mass_s, rel_s: what happened), or "absent" when
 * nothing flushed. Not f16 (BF16, also the FP8 modes' working format: FP32's 8 exponent bits): "needs no loss scale",
 * or "the expected absence of underflow does not hold" when more than 0.1% of the values flushed. */
void mpt_text_grad_underflow(char *b, size_t n, const char *name, int f16, double scale, const mpt_text_underflow *u);

/* compare's FP8 gradient casts: e4_lost and e5_lost are the shares (0..1) of the pooled gradient operands flushed to
 * zero or made subnormal when cast to E4M3 and to E5M2, each with its own scale by the run's scaling rule (one format
 * measured, the other its `@other_format` counterfactual). mx: the scales are per block of 32 (MXFP8), else per
 * tensor. E4M3 losing more is the expected effect, the reason TransformerEngine's HYBRID recipe casts gradients to
 * E5M2 (its range is mpt_text_range_ratio's); when E4M3 loses as little or less the sentence says the advantage is
 * not observed. "Not measured." when either share is not finite. */
void mpt_text_fp8_grad_formats(char *b, size_t n, double e4_lost, double e5_lost, int mx);

/* ---- overflow ------------------------------------------------------------------------------------------------- */

/* The scale bound of a mean loss over a batch of B in FP16: S (1 - p) / B < 65520 for the logits' gradient of an
 * example with probability p on its label, so any S below 65520 B / (1 - p) cannot overflow there; the largest power
 * of two below 65520 B is 2^floor(log2(65520 B)) (p -> 0). settled: the scale every dynamic run held for the most
 * steps (0 when they differ); backoffs_above / backoffs_below: the dynamic runs' backoffs from a scale above that
 * power of two and from one at or below it. The sentence says whether the settle point is that power of two, below
 * it (other gradients overflowed first), or above it, and whether any run backed off at or below the bound. */
void mpt_text_overflow_bound(char *b, size_t n, int batch, double settled, int backoffs_above, int backoffs_below);

/* ---- optimizer state ------------------------------------------------------------------------------------------ */

/* The measured sequence of a run whose FP16-stored Adam moments failed: each step number is the first step after
 * which the thing was seen (0: not seen in the steps looked at, up to `looked`). */
typedef struct mpt_text_state_seq {
    int looked;               /* steps examined one by one (runs stopped after 1, 2, ..., looked steps) */
    double update2_max;       /* largest |w2 - w1| of the second step */
    double lr;
    int grad_big_step;        /* first step whose gradient (from the stored m: (m_k - beta1 m_{k-1}) / (1 - beta1))
                                 exceeded 1 in magnitude; 0 if none */
    double grad_big_max;      /* the largest such |g| at that step */
    int state_nonfinite_step; /* first step after which the stored state held inf/NaN (the checkpoint refused it) */
    char state_tensor[96];    /* the first non-finite state tensor named by the refusal, and its value ("+inf") */
    char state_value[16];
    int weights_nonfinite_step; /* first step after which a master weight was inf/NaN */
    char bad_weights[200];    /* the master tensors non-finite then, with counts ("fc1.weight: 12, fc2.weight: 3") */
    int bad_last;             /* one of them belongs to the layer that feeds the loss (its logits would be NaN) */
    int first_skip;           /* first skipped step of the whole run (0: none) */
    int skipped, steps;       /* of the whole run */
    int loss_all_finite;      /* every logged loss of the whole run was finite */
    double loss_max;          /* the largest logged loss */
} mpt_text_state_seq;

void mpt_text_state_sequence(char *b, size_t n, const mpt_text_state_seq *s);

/* Adam's v = (1 - beta2) g^2 after the first step in FP16: below the smallest subnormal 2^esub for |g| < t_sub and
 * rounded to zero for |g| <= t_zero (half the smallest subnormal ties to the even 0); both thresholds from beta2 and
 * esub. */
void mpt_text_adam_v_thresholds(char *b, size_t n, double beta2, int esub, double *t_sub, double *t_zero);

/* ---- master weights ------------------------------------------------------------------------------------------- */

/* Stochastic rounding without masters: lost (share of updates rounded back on their step) and applied (share of the
 * update mass the weights moved by) beside round-to-nearest's applied mass. The "unbiased in expectation" reading is
 * given only when applied is within 10% of 1, and the contrast "most updates rounded back, yet the mass applied:
 * the few that move a weight move it by a whole ulp" only when lost is at least one half. */
void mpt_text_stochastic(char *b, size_t n, double acc, double lost, double applied, double applied_nearest);

/* ---- lost updates in FP32 ------------------------------------------------------------------------------------- */

/* FP32 weights' lost updates: share and mass. The mass is "almost nothing" below 1e-4, else said as a real share. */
void mpt_text_fp32_lost(char *b, size_t n, double lost_frac, double lost_mass);

/* ---- normalisation -------------------------------------------------------------------------------------------- */

/* The variance of a normalisation's units (batch-norm channels or layer-norm rows) computed in the two 16-bit formats
 * and in FP32, relative errors against the exact variance of the same stored activations, medians over the units:
 * onepass16[f] (E[x^2] - E[x]^2 in format f's arithmetic), twopass16[f], twopass32 (the policy's), welford32;
 * clamped16[f] and nonfinite16[f] the shares of units whose one-pass variance cancelled to zero or below (clamped to 0)
 * or was not finite (a sum overflowed). Per format, the formula "cost" Nx when onepass16 >= 2 twopass16, erred "about
 * as much" within [0.5, 2), "less" below; the 16-bit arithmetic "cost" Nx over FP32's two passes when twopass16 >= 2
 * twopass32, else erred "no more"; Welford "about as much as" FP32's two passes within a factor 2, else "more" or
 * "less". kappa_med: the median condition 1 + mean^2 / var (the one-pass formula's error grows like kappa u). */
typedef struct mpt_text_norm_var {
    const char *units;       /* "batch-norm channels" */
    int n_units;
    double kappa_med;
    double twopass32, welford32;
    const char *fmt[2];      /* "BF16", "FP16" */
    double onepass16[2], twopass16[2], clamped16[2], nonfinite16[2];
} mpt_text_norm_var;

void mpt_text_norm_variance(char *b, size_t n, const mpt_text_norm_var *v);

/* The same units shifted by t standard deviations each (t[0] = 0 up to t[n_t - 1]: the condition grows like t^2):
 * median errors per shift of the one-pass variance in BF16, FP16 and FP32 and of two passes in BF16 and FP32, and the
 * share of units whose BF16 one-pass variance was clamped. The one-pass error "grew" when its value at the largest t
 * is at least 10x its value at t = 0; two passes "stayed within" a factor 3 of their t = 0 value, or "grew too". */
#define MPT_TEXT_NORM_MAX_SHIFTS 8
typedef struct mpt_text_norm_shift {
    const char *units;
    int n_t;
    double t[MPT_TEXT_NORM_MAX_SHIFTS], kappa[MPT_TEXT_NORM_MAX_SHIFTS];
    double onepass_bf16[MPT_TEXT_NORM_MAX_SHIFTS], onepass_fp16[MPT_TEXT_NORM_MAX_SHIFTS];
    double onepass_fp32[MPT_TEXT_NORM_MAX_SHIFTS], twopass_bf16[MPT_TEXT_NORM_MAX_SHIFTS];
    double twopass_fp32[MPT_TEXT_NORM_MAX_SHIFTS], clamped_bf16[MPT_TEXT_NORM_MAX_SHIFTS];
} mpt_text_norm_shift;

void mpt_text_norm_shifted(char *b, size_t n, const mpt_text_norm_shift *v);

/* FP16 statistics at two batch sizes (lo < hi): the shares of batch-norm channels whose FP16 statistics were not
 * finite on the trained network's activations at those batches (nonfinite_*: NAN when not measured), and the fp16
 * training runs with FP16 statistics at the same batches: skipped steps of their steps, test accuracy, beside the run
 * with FP32 statistics (acc_ref_*). Says per batch whether sums overflowed and whether the run skipped every step,
 * some or none. */
typedef struct mpt_text_norm_fp16 {
    int batch_lo, batch_hi;
    double nonfinite_lo, nonfinite_hi;
    int skipped_lo, steps_lo, skipped_hi, steps_hi;
    double acc_lo, acc_ref_lo, acc_hi, acc_ref_hi;
} mpt_text_norm_fp16;

void mpt_text_norm_fp16_batches(char *b, size_t n, const mpt_text_norm_fp16 *f);

/* ---- scale ---------------------------------------------------------------------------------------------------- */

/* One effect of the lesson `scale` on two networks (net[0] the mlp, net[1] the deeper one): what was counted on each
 * (measured[i], a clause with its numbers, e.g. "23% of the activation gradients' nonzero values flush at S = 1,
 * carrying 4.5e-05 of their mass"), how much the primary count grew from net[0] to net[1] (grow = count1 / count0:
 * "grew" at >= 2, "about the same" in [0.5, 2), "fell" below; NAN when a count is 0 on both), and the paired accuracy
 * difference (diff_what, e.g. "no scaling - dynamic") on each with its interval and verdict (d[i] NULL without GSL:
 * then diff[i]). A network "pays" when its verdict is worse beyond the margin; the last sentence says which paid:
 * neither (at these sizes, with the seeds used), only the deeper one, only the mlp, or both. */
typedef struct mpt_text_scale {
    const char *effect;
    const char *net[2];
    const char *measured[2];
    double grow;
    const char *diff_what;
    const mpt_stats_paired *d[2];
    const mpt_stats_summary *diff[2];
} mpt_text_scale;

void mpt_text_scale_effect(char *b, size_t n, const mpt_text_scale *s);
/* The same in one short sentence for a lesson's conclusion (measured[i] short clauses): each network's count, the
 * growth, each accuracy difference with its interval, and which network paid. */
void mpt_text_scale_brief(char *b, size_t n, const mpt_text_scale *s);

/* ---- checkpoints ---------------------------------------------------------------------------------------------- */

/* Why the final checkpoint was refused, for `mptrain train`'s last line: why is the writer's message (it names the
 * tensor: "... tensor fc1.weight:exp_avg_sq holds +inf ..."). A tensor name with ':' is optimizer state, one without
 * a master weight; the scaler's values are named as such. kept: an earlier step's checkpoint is on disk. */
void mpt_text_checkpoint_refused(char *b, size_t n, int kept, const char *why);

#endif
