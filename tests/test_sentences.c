/*
 * tests/test_sentences.c - the sentences of reports and lessons follow their numbers (tools/sentences.h, issue 37).
 *
 * Each function is fed the case the lessons expect and the opposite one, built by hand, and the text must flip: the
 * words that state the comparison or the cause are checked in both directions (present in one case, absent in the
 * other), so a sentence printed whatever the numbers say fails here. The numbers in the format sentences are the
 * formats' own (E4M3 448 / 2^-6 / 2^-9, E5M2 57344 / 2^-14 / 2^-16, FP16 2^-24), worked out in the comments; and
 * docs/numerics.md must state the range ratio these functions compute.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tools/formats.h"
#include "tools/sentences.h"

static char t[4096];

#define HAS(s) ck_assert_msg(strstr(t, (s)) != NULL, "want '%s' in: %s", (s), t)
#define LACKS(s) ck_assert_msg(strstr(t, (s)) == NULL, "do not want '%s' in: %s", (s), t)

/* compare --seeds, paragraph after the table: the audit's 3-seed mlp run had fp32's sd 0.18 and the paired 0.24 */
START_TEST(test_pairing_follows_the_spreads) {
    mpt_text_pairing(t, sizeof t, "fp16", 0.18, 0.24);
    HAS("larger");
    LACKS("because a seed moved both runs");
    HAS("1.33x");
    mpt_text_pairing(t, sizeof t, "fp16", 2.19, 0.20);
    HAS("smaller, because a seed moved both runs of a pair alike");
    LACKS("larger");
    mpt_text_pairing(t, sizeof t, "bf16", 1.0, 1.1);
    HAS("about the same");
    LACKS("because a seed moved");
    mpt_text_pairing(t, sizeof t, "bf16", NAN, 0.1);
    HAS("fewer than 2 seeds");
}
END_TEST

/* lesson noise: the criterion reads the paired sd, not the reference's sd over seeds (a paired design's noise is the
 * spread of its differences); the pairing clause has three outcomes, each shown by hand-picked spreads */
START_TEST(test_noise_conclusion) {
    static const char *const names[] = {"fp16", "bf16"};
    double md[2] = {0.5, 0.1}, sp[2] = {0.2, 0.2}, sb[2] = {1.0, 1.0};
    mpt_text_noise x = {.np = 2, .n_seeds = 4, .ref = "fp32", .names = names, .mean_diff = md, .sd_paired = sp,
                        .sd_between = sb, .ref_sd = 1.0, .ref_min = 80.0, .ref_max = 82.5};
    /* fp16's 0.5 pp exceeds 2 x 0.2 (though not 2 x fp32's 1.0): even one seed would show its sign */
    ck_assert_int_eq(mpt_text_noise_conclusion(t, sizeof t, &x), 0);
    HAS("Not observed: with the same seed, fp16 - fp32 +0.50 pp on average, moving by sd 0.20 pp from seed to seed "
        "(0.20x fp32's own sd; a one-seed difference of this size stands out from that noise); bf16 - fp32 +0.10 pp on "
        "average, moving by sd 0.20 pp from seed to seed (0.20x fp32's own sd; a one-seed difference of this size "
        "would not stand out from that noise) over 4 seeds");
    HAS("fp32 alone moves by sd 1.00 pp (80.00..82.50%)");
    HAS("the pairing cancelled part of the seed's effect here (paired sd / fp32's sd: 0.20 for fp16, 0.20 for bf16)");
    /* within 2 x the paired sd but beyond 2 x fp32's: observed, and the pairs spread more than fp32 alone (1.5x) */
    md[0] = 0.3, md[1] = -0.35, sp[0] = sp[1] = 0.2, sb[0] = sb[1] = 0.2 / 1.5;
    ck_assert_int_eq(mpt_text_noise_conclusion(t, sizeof t, &x), 1);
    HAS("Observed: one seed cannot rank these precisions.");
    HAS("every mean difference lies within twice its paired sd");
    HAS("here the paired differences spread more than fp32 alone (paired sd / fp32's sd: 1.50 for fp16, 1.50 for "
        "bf16)");
    LACKS("stands out from");
    /* a ratio of 1.0 is "about the same" (inside 0.8..1.25); 0.5 and 1.5 together are neither all less nor all more */
    sb[0] = sb[1] = 0.2;
    mpt_text_noise_conclusion(t, sizeof t, &x);
    HAS("here the paired spreads are about fp32's own, so the pairing cancelled little of the seed's effect (paired sd "
        "/ fp32's sd: 1.00 for fp16, 1.00 for bf16)");
    sb[0] = 0.4, sb[1] = 0.2 / 1.5;
    mpt_text_noise_conclusion(t, sizeof t, &x);
    HAS("about fp32's own");
    HAS("0.50 for fp16, 1.50 for bf16");
    /* a difference of exactly twice the paired sd is still inside the noise */
    md[0] = 0.4, md[1] = 0.0, sp[0] = sp[1] = 0.2;
    ck_assert_int_eq(mpt_text_noise_conclusion(t, sizeof t, &x), 1);
}
END_TEST

static mpt_stats_paired paired(double mean, double lo, double hi, mpt_verdict v, int needed) {
    mpt_stats_paired d;
    memset(&d, 0, sizeof d);
    d.n = 2, d.mean = mean, d.lo = lo, d.hi = hi, d.level = 0.95, d.margin = 0.3, d.verdict = v;
    d.seeds_needed = needed;
    return d;
}

START_TEST(test_paired_carries_verdict_and_interval) {
    mpt_stats_paired d = paired(-0.15, -5.87, 5.57, MPT_VERDICT_INCONCLUSIVE, 212);
    mpt_text_paired(t, sizeof t, "tf32 - fp32", &d, NULL);
    HAS("-0.15 pp, 95% CI [-5.87, 5.57] over 2 seeds: inconclusive at ±0.3 pp; equivalence would need about 212 "
        "seeds");
    LACKS("same accuracy");
    d = paired(-0.9, -1.4, -0.4, MPT_VERDICT_INCONCLUSIVE, 9);
    mpt_text_paired(t, sizeof t, "fp8 - bf16", &d, NULL);
    HAS("a verdict of worse would need about 9 seeds");
    LACKS("equivalence");
    d = paired(0.05, -0.1, 0.2, MPT_VERDICT_EQUIVALENT, 0);
    mpt_text_paired(t, sizeof t, "fp8 - bf16", &d, NULL);
    HAS("equivalent within ±0.3 pp");
    LACKS("inconclusive");
    d = paired(-1.0, -1.5, -0.5, MPT_VERDICT_WORSE, 0);
    mpt_text_paired(t, sizeof t, "fp8 - bf16", &d, NULL);
    HAS("worse by more than 0.3 pp");
    d = paired(0.5, -10, 11, MPT_VERDICT_INCONCLUSIVE, -1);
    mpt_text_paired(t, sizeof t, "fp8 - bf16", &d, NULL);
    HAS("more than 10000 seeds");
    mpt_stats_summary s = {3, 0.1, 0.2, -0.1, 0.3};
    mpt_text_paired(t, sizeof t, "fp16 - fp32", NULL, &s);
    HAS("no interval");
    LACKS("equivalent");
    /* every pair differed by the same +0.40 (tools/stats.h no_spread): no "[0.40, 0.40]" interval, no verdict */
    d = paired(0.4, 0.4, 0.4, MPT_VERDICT_INCONCLUSIVE, -1);
    d.no_spread = 1;
    mpt_text_paired(t, sizeof t, "fp16 - fp32", &d, NULL);
    HAS("+0.40 pp in each of 2 seeds: no spread measured, so no interval and no verdict");
    LACKS("CI [");
    LACKS("better");
    mpt_text_verdict_reading(t, sizeof t, "in fp16", &d);
    HAS("no spread was measured");
    LACKS("higher on average");
    d = paired(0.0, 0.0, 0.0, MPT_VERDICT_EQUIVALENT, 0);
    d.no_spread = 1;
    mpt_text_paired(t, sizeof t, "fp16 - fp32", &d, NULL);
    HAS("0 in each of 2 seeds: identical outcomes in every pair");
}
END_TEST

START_TEST(test_verdict_reading) {
    mpt_stats_paired d = paired(-0.2, -0.9, 0.5, MPT_VERDICT_INCONCLUSIVE, 40);
    mpt_text_verdict_reading(t, sizeof t, "without loss scaling", &d);
    HAS("resolve no accuracy difference");
    d = paired(-0.25, -0.45, -0.05, MPT_VERDICT_INCONCLUSIVE, 40);
    mpt_text_verdict_reading(t, sizeof t, "without loss scaling", &d);
    HAS("lower on average, but not beyond");
    LACKS("resolve no");
    d = paired(-1.5, -2.0, -1.0, MPT_VERDICT_WORSE, 0);
    mpt_text_verdict_reading(t, sizeof t, "without loss scaling", &d);
    HAS("ended worse beyond");
    d = paired(0.0, -0.1, 0.1, MPT_VERDICT_EQUIVALENT, 0);
    mpt_text_verdict_reading(t, sizeof t, "without loss scaling", &d);
    HAS("equivalent within ±0.3 pp");
}
END_TEST

/* tf32: one max over 2.6e5 outputs moved 13% with a second operand sample; PyTorch's 2.2e-3 is over 1e8 outputs:
 * sqrt(ln 1e8 / ln 262144) = sqrt(18.42 / 12.48) = 1.215, so 2.2e-3 scales to 1.81e-3 */
START_TEST(test_vs_published) {
    const double in[4] = {1.70e-3, 1.88e-3, 1.95e-3, 1.75e-3}, out[4] = {1.0e-3, 1.1e-3, 1.05e-3, 1.2e-3};
    mpt_text_vs_published(t, sizeof t, "PyTorch's", 2.2e-3, 1e8, 262144, in, 4);
    HAS("1.22x smaller, 0.0018");
    HAS("lies inside that range");
    HAS("sd ");
    mpt_text_vs_published(t, sizeof t, "PyTorch's", 2.2e-3, 1e8, 262144, out, 4);
    HAS("lies above that range");
    LACKS("inside");
    mpt_text_vs_published(t, sizeof t, "PyTorch's", 2.2e-3, 1e8, 262144, in, 1);
    HAS("one sample, no spread");
}
END_TEST

static const mpt_text_format e4m3 = {"E4M3", 448.0, -6, -9}, e5m2 = {"E5M2", 57344.0, -14, -16};

/* fmax / smallest subnormal: E4M3 448 / 2^-9 = 2^17.8, E5M2 57344 / 2^-16 = 2^31.8: a ratio of 2^14 (not 2^17,
 * which the docs said). Scaled to amax = fmax: subnormal below 2^-6 = amax / 2^(8.8 + 6) in E4M3, 2^-14 = amax /
 * 2^(15.8 + 14) in E5M2; flushed below half the smallest subnormal, amax / 2^(8.8 + 10), amax / 2^(15.8 + 17). */
START_TEST(test_format_ranges) {
    mpt_text_range_ratio(t, sizeof t, &e4m3, &e5m2);
    HAS("E5M2 has 2^14 times E4M3's range (fmax / smallest subnormal: 2^31.8 against 2^17.8)");
    mpt_text_range_ratio(t, sizeof t, &e5m2, &e4m3);
    HAS("E5M2 has 2^14 times E4M3's range");
    mpt_text_scaled_thresholds(t, sizeof t, &e4m3, &e5m2);
    HAS("2^14.8 below amax becomes subnormal in E4M3 (2^29.8 in E5M2)");
    HAS("2^18.8 below it flushes to zero (2^32.8 in E5M2)");
    LACKS("2^17 below");
    /* swamping: BF16 has 8 significant bits, FP16 11 */
    /* the same constants from the engine's decoders */
    mpt_text_format a, c;
    mpt_text_format_of(MPT_FORMAT_E4M3, "E4M3", &a);
    mpt_text_format_of(MPT_FORMAT_E5M2, "E5M2", &c);
    ck_assert(a.fmax == 448.0 && a.emin == -6 && a.esub == -9);
    ck_assert(c.fmax == 57344.0 && c.emin == -14 && c.esub == -16);
    mpt_text_swamping(t, sizeof t, "BF16", 8);
    HAS("2^8 to 2^9 times the term");
    mpt_text_swamping(t, sizeof t, "FP16", 11);
    HAS("2^11 to 2^12 times the term");
}
END_TEST

/* docs/numerics.md states the ratio the function computes, and not the old one */
START_TEST(test_docs_range_ratio) {
    const char *root = getenv("MPT_SOURCE_ROOT");
    char p[1024];
    snprintf(p, sizeof p, "%s/docs/numerics.md", root ? root : "..");
    FILE *f = fopen(p, "r");
    ck_assert_msg(f != NULL, "%s", p);
    static char doc[1 << 18];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    doc[n] = '\0';
    fclose(f);
    for (size_t i = 0; i < n; i++) /* sentences run over line breaks: search the text as one line */
        if (doc[i] == '\n') doc[i] = ' ';
    char want[64];
    snprintf(want, sizeof want, "E5M2 has 2^%.3g times E4M3's range",
             mpt_text_range_log2(&e5m2) - mpt_text_range_log2(&e4m3));
    ck_assert_msg(strstr(doc, want) != NULL, "%s does not say '%s'", p, want);
    ck_assert_msg(strstr(doc, "2^17 times E4M3's range") == NULL, "%s still says 2^17", p);
    /* FP32's lost updates: a measured share with its mass, not "a few percent" */
    ck_assert_msg(strstr(doc, "a few percent of updates can be lost") == NULL, "%s: the unmeasured 'a few percent'", p);
}
END_TEST

/* the audit's numbers: FP32's error relative to the output grew 55x over K = 16..65536, FP16's 48x */
START_TEST(test_accumulation_growth) {
    mpt_text_accum_growth(t, sizeof t, "FP16", 48.0, 55.0, 8192.0, 16, 65536);
    HAS("grew as fast (55x) as the FP16 one's (48x)");
    HAS("every recursive sum's error grows with K, FP32's included");
    HAS("2^13.0");
    LACKS("did not grow");
    mpt_text_accum_growth(t, sizeof t, "FP16", 48.0, 1.5, 8192.0, 16, 65536);
    HAS("did not grow");
    LACKS("as fast");
    mpt_text_accum_growth(t, sizeof t, "FP16", 48.0, 5.0, 8192.0, 16, 65536);
    HAS("grew far more slowly");
    mpt_text_method_gain(t, sizeof t, "pairwise summation", "FP16", 1.2e-2, 1e-3, 4096);
    HAS("erred 12x less than the recursive sum");
    mpt_text_method_gain(t, sizeof t, "pairwise summation", "FP16", 1e-3, 4e-3, 4096);
    HAS("erred more than the recursive sum");
    LACKS("less than");
    mpt_text_method_gain(t, sizeof t, "Kahan", "FP32", 1.2e-7, 1e-7, 4096);
    HAS("about as much");
    mpt_text_method_gain(t, sizeof t, "Kahan", "FP32", 1.2e-7, 0.0, 4096);
    HAS("was exact in the median");
}
END_TEST

/* accumulation, Tensor Cores: the --quick run's h100 FP16 counts (772 of 838 toward zero, p 1e-153; IEEE 423 of 846,
 * p 1), and each other outcome */
START_TEST(test_truncation_bias) {
    const mpt_text_signs tc = {772, 66, 1.4e-153, -0.9916}, rn = {423, 423, 1.0, -0.028};
    mpt_text_truncation_bias(t, sizeof t, "h100", "FP16", &tc, &rn);
    HAS("Truncation biased the error, it was not noise");
    HAS("smaller in magnitude than the exact sum in 772 of the 838 dot products");
    HAS("(92.1%, sign test p < 1e-12; mean error -0.992 of the mean absolute error)");
    HAS("did in 423 of 846 (50.0%, p = 1; -0.028), a split that chance explains");
    LACKS("both were biased");
    /* round to nearest biased too */
    const mpt_text_signs rn_b = {600, 246, 1e-30, -0.4};
    mpt_text_truncation_bias(t, sizeof t, "h100", "FP16", &tc, &rn_b);
    HAS("both were biased here, so the bias is not truncation's alone");
    LACKS("it was not noise");
    /* the model's errors away from zero */
    const mpt_text_signs away = {66, 772, 1.4e-153, 0.99};
    mpt_text_truncation_bias(t, sizeof t, "a100", "BF16", &away, &rn);
    HAS("larger in magnitude than the exact sum more often than smaller (smaller in 66 of 838, 7.9%");
    HAS("which truncation toward zero does not lead one to expect");
    LACKS("it was not noise");
    /* no bias resolved */
    const mpt_text_signs even = {430, 410, 0.51, -0.02};
    mpt_text_truncation_bias(t, sizeof t, "v100", "FP16", &even, &rn);
    HAS("No bias was resolved at the 1% level");
    HAS("430 of 840 dot products (51.2%, sign test p = 0.51");
    LACKS("biased the error");
    /* every sum exact */
    const mpt_text_signs none = {0, 0, 1.0, NAN};
    mpt_text_truncation_bias(t, sizeof t, "h100", "BF16", &none, &rn);
    HAS("were all exact");
    LACKS("%");
}
END_TEST

/* the --quick run's h100 FP16 medians at K = 16 and 65536 (2.5e-8 / 5.7e-5 against IEEE's 3.5e-8 / 1.7e-6), then a
 * model that errs less at both ends and grows no faster, and zero medians */
START_TEST(test_tc_vs_ieee) {
    mpt_text_tc_vs_ieee(t, sizeof t, "h100", "FP16", 16, 65536, 2.5e-8, 5.7e-5, 3.5e-8, 1.7e-6);
    HAS("erred 1.4x less than IEEE recursive FP32 summation at K = 16 (median 2.5e-08 against 3.5e-08)");
    HAS("and 33.5x more than it at K = 65536 (5.7e-05 against 1.7e-06)");
    HAS("its error grew 2280x (like K^0.93), round to nearest's 48.6x (like K^0.47)");
    HAS("errors of one sign add up with the number of blocks");
    mpt_text_tc_vs_ieee(t, sizeof t, "a100", "TF32", 16, 65536, 2.0e-8, 8.0e-7, 3.5e-8, 1.7e-6);
    HAS("1.75x less than IEEE recursive FP32 summation at K = 16");
    HAS("2.12x less than it at K = 65536");
    HAS("did not grow faster than round to nearest's here");
    LACKS("add up");
    /* round to nearest grew faster than sqrt(K) too: no causal reading, though the model grew faster */
    mpt_text_tc_vs_ieee(t, sizeof t, "h100", "FP16", 16, 65536, 1e-8, 2e-5, 1e-8, 3.4e-6);
    HAS("like K^0.91), round to nearest's 340x (like K^0.70)");
    LACKS("add up");
    LACKS("did not grow faster");
    mpt_text_tc_vs_ieee(t, sizeof t, "h100", "FP16", 16, 65536, 3.6e-8, 1.7e-6, 3.5e-8, 1.8e-6);
    HAS("about as much as (1x) IEEE");
    HAS("about as much as (0.94x) it at K = 65536");
    mpt_text_tc_vs_ieee(t, sizeof t, "h100", "BF16", 16, 65536, 0.0, 5e-5, 0.0, 1.5e-6);
    HAS("erred as much as IEEE recursive FP32 summation at K = 16 (median 0 against 0)");
    LACKS("grew");
    mpt_text_tc_vs_ieee(t, sizeof t, "h100", "BF16", 16, 65536, 3e-9, 5e-5, 0.0, 1.5e-6);
    HAS("erred more than IEEE recursive FP32 summation at K = 16 (median 3e-09 against 0)");
    mpt_text_same_bits(t, sizeof t, "h100", "b200", 0, 2592);
    HAS("the b200 model's sums were bit for bit the h100 model's in all 2592 dot products");
    mpt_text_same_bits(t, sizeof t, "h100", "b200", 3, 2592);
    HAS("differed from the h100 model's in 3 of 2592 dot products");
    LACKS("bit for bit");
}
END_TEST

/* fp8: promotion every 128 capped the fast accumulator's error at 4-7e-5 over K = 512..65536 */
START_TEST(test_promotion_caps_not_removes) {
    mpt_text_promotion(t, sizeof t, 128, 512, 65536, 4.0e-4, 9.0e-3, 4.0e-5, 7.0e-5, 4.0e-5, 7.0e-5);
    HAS("caps the fast accumulator's error rather than removing it");
    LACKS("removes");
    mpt_text_promotion(t, sizeof t, 128, 512, 65536, 4.0e-4, 9.0e-3, 4.0e-5, 3.0e-3, 4.0e-5, 3.0e-3);
    HAS("did not cap");
    LACKS("caps");
}
END_TEST

/* fp8 --quick: E4M3 3.24% vs E5M2 1.04% over the run, 0.12% vs 0% without step 1 (32 telemetry steps) */
START_TEST(test_fp8_warmup_apart) {
    mpt_text_fp8_warmup(t, sizeof t, 1, 31, 1.0, 0.33, 0.0012, 0.0, 0.0324, 0.0104);
    HAS("warm-up (1 step cast with the initial scale 1");
    HAS("mostly the warm-up's");
    mpt_text_fp8_warmup(t, sizeof t, 1, 31, 0.02, 0.0, 0.03, 0.01, 0.0297, 0.0097);
    HAS("mostly the steady state's");
    LACKS("mostly the warm-up's");
    mpt_text_fp8_warmup(t, sizeof t, 0, 20, 0, 0, 0.01, 0.001, 0.01, 0.001);
    HAS("no warm-up");
    mpt_text_fp8_warmup(t, sizeof t, 1, 23, 1.0, 0.33, 0.0012, 0.0, NAN, NAN);
    HAS("did not measure the warm-up");
    LACKS("mostly");
}
END_TEST

/* fp8: amax grew between steps (staleness 3.5 at step 32 of the quick run) against a history that never went stale */
START_TEST(test_staleness_and_mx) {
    mpt_text_staleness(t, sizeof t, "fc2.dy", 3.5, 12, 31, 2e-4, 0.0);
    HAS("grew past the one its scale came from at 12 of 31 steps (up to 3.5x)");
    mpt_text_staleness(t, sizeof t, "fc2.dy", 0.97, 0, 31, 0.0, 0.0);
    HAS("never stale");
    LACKS("grew past");
    mpt_text_mx_rounding(t, sizeof t, 1e-3, 0.0, 1e-4, 2e-4);
    HAS("with FLOOR block scales 0.1% of the operands' values saturated");
    HAS("flushed more");
    mpt_text_mx_rounding(t, sizeof t, 0.0, 0.0, 2e-4, 1e-4);
    HAS("did not show");
    HAS("did not flush more");
}
END_TEST

/* grad-comm --quick: FP16 without the scale flushed 0.23% and made 44% subnormal at N = 16, same error as at 2^16 */
START_TEST(test_wire_unscaled) {
    mpt_text_wire_unscaled(t, sizeof t, 16, 0.00233, 0.44, 6.61e-4, 6.61e-4, 16);
    HAS("carry almost none of the gradient's norm");
    mpt_text_wire_unscaled(t, sizeof t, 16, 0.05, 0.6, 2e-2, 6.61e-4, 16);
    HAS("the cost of sending the gradient unscaled");
    LACKS("almost none");
    mpt_text_wire_unscaled(t, sizeof t, 16, 0.0, 0.0, 6.61e-4, 6.61e-4, 16);
    HAS("flushed none");
}
END_TEST

/* loss-scaling --quick: 14.36% of fc3.out.grad would flush at S = 1, carrying ~1e-6 of its mass */
START_TEST(test_underflow_cost_by_mass) {
    mpt_text_underflow u = {"fc3.out.grad", 0.1436, 1.2e-6, 3.0e-4, 0.0025, 1e-9, 1.4e-4, 16};
    mpt_text_underflow_cost(t, sizeof t, &u);
    HAS("14.36%");
    HAS("almost none of the signal");
    LACKS("carries a real share");
    u.mass_1 = 0.05, u.rel_1 = 0.2;
    mpt_text_underflow_cost(t, sizeof t, &u);
    HAS("carries a real share of the signal");
    LACKS("almost none");
    u.log2_scale = 0; /* the unscaled run itself */
    mpt_text_underflow_cost(t, sizeof t, &u);
    HAS("Without loss scaling");
    HAS("a real share of the signal, which a loss scale would keep");
    u.mass_1 = 1e-6, u.rel_1 = 2e-4;
    mpt_text_underflow_cost(t, sizeof t, &u);
    HAS("almost none of the signal");
    LACKS("would keep");
}
END_TEST

/* compare's Underflow paragraph, every outcome: the scale flushed fewer (ratio 0.05 / 0.0125 = 4.0), none, as many or
 * more; an unscaled FP16 run that flushed some or none; BF16 on either side of 0.1% */
START_TEST(test_grad_underflow_outcomes) {
    mpt_text_underflow u = {"all_act_grads", 0.05, 1e-6, 2e-4, 0.0125, 1e-8, 1e-4, 16};
    mpt_text_grad_underflow(t, sizeof t, "FP16", 1, 65536.0, &u);
    HAS("flushed 1.250% of the nonzero values at the loss scale used (mean S = 65536)");
    HAS("it would have flushed 5.000%: with the scale, 4.0 times fewer values vanished.");
    HAS("at the run's S = 2^16"); /* the cost sentence follows */
    LACKS("is absent");
    u.flush_s = 0.0;
    mpt_text_grad_underflow(t, sizeof t, "FP16", 1, 65536.0, &u);
    HAS("with the scale, none vanished.");
    LACKS("times fewer");
    LACKS("is absent");
    u.flush_s = 0.05; /* as many at S as at S = 1 */
    mpt_text_grad_underflow(t, sizeof t, "FP16", 1, 65536.0, &u);
    HAS("and 5.000% at S = 1: the expected effect of loss scaling (fewer values flushed) is absent in this run");
    LACKS("vanished");
    u.flush_s = 0.08, u.flush_1 = 0.02; /* more at S */
    mpt_text_grad_underflow(t, sizeof t, "FP16", 1, 65536.0, &u);
    HAS("is absent in this run");
    LACKS("vanished");
    /* no loss scale: what happened at S = 1 is the run's own flush_s / mass_s / rel_s */
    u.flush_s = 0.03, u.mass_s = 0.2, u.rel_s = 0.3, u.flush_1 = NAN;
    mpt_text_grad_underflow(t, sizeof t, "FP16", 1, 1.0, &u);
    HAS("Without loss scaling, 3.00% of `all_act_grads`'s nonzero values rounded to zero in FP16, carrying 0.2 of its "
        "mass");
    HAS("a real share of the signal, which a loss scale would keep.");
    u.flush_s = 0.0;
    mpt_text_grad_underflow(t, sizeof t, "FP16", 1, 1.0, &u);
    HAS("without loss scaling flushed 0.000% of the nonzero values to zero (none: the expected FP16 underflow is "
        "absent in this run)");
    /* BF16: 0.1% is the line between "needs no loss scale" and "does not hold" */
    u.flush_s = 0.0011;
    mpt_text_grad_underflow(t, sizeof t, "BF16", 0, 1.0, &u);
    HAS("rounding to BF16 flushed 0.110% of the nonzero values to zero although BF16 has FP32's exponent range: the "
        "expected absence of underflow does not hold in this run.");
    u.flush_s = 0.0009;
    mpt_text_grad_underflow(t, sizeof t, "BF16", 0, 1.0, &u);
    HAS("flushed 0.090% of the nonzero values to zero: BF16 keeps FP32's exponent range, so it needs no loss scale.");
    LACKS("does not hold");
    u.flush_s = 3e-7; /* below 0.01%: e-notation, not 0.000% */
    mpt_text_grad_underflow(t, sizeof t, "BF16", 0, 1.0, &u);
    HAS("flushed 3.00e-05% of the nonzero values");
}
END_TEST

/* compare's FP8 gradient casts: E4M3 losing more is the expected effect; equal or less says it is not observed */
START_TEST(test_fp8_grad_formats) {
    mpt_text_fp8_grad_formats(t, sizeof t, 0.02, 0.001, 0);
    HAS("E4M3 flushed or made subnormal 2% of the gradient values against E5M2's 0.1%: with one scale for the whole "
        "tensor, E4M3's narrower range (");
    HAS("casts gradients to E5M2.");
    LACKS("not observed");
    LACKS("MXFP8");
    mpt_text_fp8_grad_formats(t, sizeof t, 0.02, 0.001, 1);
    HAS("with one scale per block of 32");
    HAS("(MXFP8 recipes keep E4M3 for gradients");
    mpt_text_fp8_grad_formats(t, sizeof t, 0.001, 0.02, 0);
    HAS("E4M3 flushed or made subnormal 0.1% of the gradient values and E5M2 2%: the expected advantage of E5M2's "
        "wider range for gradients is not observed in this run");
    LACKS("HYBRID");
    mpt_text_fp8_grad_formats(t, sizeof t, 0.0, 0.0, 0); /* a tie is no advantage */
    HAS("is not observed");
    mpt_text_fp8_grad_formats(t, sizeof t, NAN, 0.0, 0);
    HAS("Not measured.");
    LACKS("E4M3");
}
END_TEST

/* batch 16: 65520 x 16 = 1048320, between 2^19 = 524288 and 2^20 = 1048576 */
START_TEST(test_overflow_bound) {
    mpt_text_overflow_bound(t, sizeof t, 16, 524288.0, 20, 0);
    HAS("65520 B / (1 - p) = 1048320 / (1 - p)");
    HAS("2^19 is the largest power of two below it");
    HAS("spent most of its steps at 2^19, the bound's power of two, and none backed off from it or below");
    mpt_text_overflow_bound(t, sizeof t, 16, 524288.0, 20, 3);
    HAS("but 3 backoffs came from 2^19 or below");
    LACKS("as the bound predicts");
    mpt_text_overflow_bound(t, sizeof t, 16, 131072.0, 20, 5);
    HAS("below the bound's 2^19");
    LACKS("the bound's power of two");
    mpt_text_overflow_bound(t, sizeof t, 16, 1048576.0, 20, 0);
    HAS("above the bound's 2^19");
    mpt_text_overflow_bound(t, sizeof t, 16, 0.0, 20, 0);
    HAS("no common settle point");
    /* a batch whose bound is itself a power of two: 65520 x B is never one (65520 = 2^4 x 4095), so any B works */
    mpt_text_overflow_bound(t, sizeof t, 128, 4194304.0, 0, 0);
    HAS("2^22 is the largest power of two below it");
}
END_TEST

/* Adam's v after the first step: 0.001 g^2 < 2^-24 for |g| < sqrt(2^-24 / 0.001) = 7.72e-3; rounds to 0 for
 * 0.001 g^2 <= 2^-25, |g| <= 5.46e-3 */
START_TEST(test_adam_thresholds) {
    double ts, tz;
    mpt_text_adam_v_thresholds(t, sizeof t, 0.999, -24, &ts, &tz);
    ck_assert(fabs(ts - 7.7208e-3) < 1e-6 && fabs(tz - 5.4594e-3) < 1e-6);
    HAS("|g| < 0.0077");
    HAS("|g| <= 0.0055");
}
END_TEST

/* optimizer-state: the audit's sequence (finite loss while every step skips) against a run that never skips */
START_TEST(test_state_sequence) {
    mpt_text_state_seq s;
    memset(&s, 0, sizeof s);
    s.looked = 7, s.update2_max = 250.0, s.lr = 0.001, s.grad_big_step = 3, s.grad_big_max = 2290.0;
    s.state_nonfinite_step = 4;
    snprintf(s.state_tensor, sizeof s.state_tensor, "fc1.weight:exp_avg_sq");
    snprintf(s.state_value, sizeof s.state_value, "+inf");
    s.weights_nonfinite_step = 6, s.first_skip = 7, s.skipped = 10, s.steps = 16, s.loss_all_finite = 1;
    s.loss_max = 2.1e8;
    snprintf(s.bad_weights, sizeof s.bad_weights, "fc1.weight: 12, fc2.weight: 3");
    mpt_text_state_sequence(t, sizeof t, &s);
    HAS("after step 4 the stored state held +inf in `fc1.weight:exp_avg_sq`");
    HAS("v = beta2 v + (1 - beta2) g^2");
    HAS("after step 6 master weights were non-finite (fc1.weight: 12, fc2.weight: 3)");
    HAS("while the loss stayed finite at every step");
    HAS("maps NaN to 0");
    LACKS("logits overflow");
    s.bad_last = 1; /* a NaN in the last layer: the ReLU explanation does not apply */
    mpt_text_state_sequence(t, sizeof t, &s);
    HAS("while the loss stayed finite at every step");
    LACKS("ReLU");
    s.bad_last = 0;
    s.state_nonfinite_step = 0, s.weights_nonfinite_step = 0, s.first_skip = 0, s.skipped = 0;
    mpt_text_state_sequence(t, sizeof t, &s);
    HAS("the stored state stayed finite over the first 7 steps");
    HAS("no step of the whole run was skipped");
    LACKS("ReLU");
    s.loss_all_finite = 0;
    mpt_text_state_sequence(t, sizeof t, &s);
    HAS("the loss itself became non-finite");
}
END_TEST

START_TEST(test_stochastic_and_fp32_lost) {
    mpt_text_stochastic(t, sizeof t, 54.9, 0.892, 1.0, 0.16);
    HAS("the rounding is unbiased");
    mpt_text_stochastic(t, sizeof t, 40.0, 0.892, 0.55, 0.16);
    HAS("did not keep the updates");
    LACKS("the rounding is unbiased,");
    /* a large learning rate (master-weights --param sgd-lr=2 measured 6.3% lost, 100% applied): most updates moved
     * their weight, so there are no "few updates that do move a weight" */
    mpt_text_stochastic(t, sizeof t, 10.7, 0.063, 1.0, 1.0);
    HAS("as its unbiased rounding promises");
    LACKS("the few updates");
    LACKS("yet the weights");
    mpt_text_fp32_lost(t, sizeof t, 0.21, 1e-7);
    HAS("almost no movement");
    mpt_text_fp32_lost(t, sizeof t, 0.21, 0.03);
    HAS("a real share of the movement");
    LACKS("almost no");
}
END_TEST

/* mptrain train's last line: the checkpoint refused for the optimizer state is not "the weights are non-finite" */
START_TEST(test_checkpoint_refusal_names_what) {
    mpt_text_checkpoint_refused(t, sizeof t, 0, "out/checkpoint.safetensors: not saved: tensor fc1.weight:exp_avg_sq "
                                "holds +inf at element 1605 (a checkpoint must hold finite values; ...)");
    HAS("not written (the optimizer state fc1.weight:exp_avg_sq holds +inf)");
    LACKS("weights are non-finite");
    mpt_text_checkpoint_refused(t, sizeof t, 1, "x: not saved: tensor fc2.weight holds NaN at element 3 (...)");
    HAS("kept from an earlier step (the master weight fc2.weight holds NaN)");
    mpt_text_checkpoint_refused(t, sizeof t, 1, "x: not saved: scaler scale is inf (...)");
    HAS("loss-scaler value");
}
END_TEST

/* normalization: the one-pass formula's cost and the 16-bit arithmetic's, each said by its ratio, both ways; the
 * quick lesson measured (batch-norm channels, batch 128) BF16 one-pass 0.051, two-pass 0.022, FP32 1.9e-7 */
START_TEST(test_norm_variance) {
    mpt_text_norm_var v = {"batch-norm channels", 24, 1.4, 1.9e-7, 4.5e-6, {"BF16", "FP16"}, {0.051, 0.0033},
                           {0.022, 0.0027}, {0, 0}, {0, 0}};
    mpt_text_norm_variance(t, sizeof t, &v);
    HAS("in BF16 the one-pass formula cost 2.32x (its cancellation) and the 16-bit arithmetic itself cost 1.16e+05x "
        "over FP32's two passes");
    HAS("in FP16 the one-pass formula erred about as much as two passes (1.22x)");
    HAS("Welford's update in FP32 erred 4.5e-06, more than FP32's blocked two passes");
    LACKS("clamped");
    LACKS("overflowing");
    /* the opposite: one pass no worse than two, 16-bit as exact as FP32, Welford better, clamps and overflows */
    mpt_text_norm_var o = {"layer-norm rows", 128, 1.1, 1e-7, 4e-8, {"BF16", "FP16"}, {0.001, 1.5e-7},
                           {0.004, 1.5e-7}, {0.25, 0}, {0, 0.5}};
    mpt_text_norm_variance(t, sizeof t, &o);
    HAS("in BF16 the one-pass formula erred less than two passes (0.25x)");
    LACKS("(its cancellation)");
    HAS("in BF16 the one-pass formula erred less than two passes (0.25x) and the 16-bit arithmetic itself cost 4e+04x");
    HAS("in FP16 the one-pass formula erred about as much as two passes (1x) and the 16-bit arithmetic erred no more "
        "than FP32 (1.5x)");
    HAS("Welford's update in FP32 erred 4e-08, less than FP32's blocked two passes");
    HAS("cancelling to zero or below (clamped to 0, so scaled by 1/sqrt(eps)) in 25%");
    HAS("with a sum overflowing in 50% of the layer-norm rows");
}
END_TEST

START_TEST(test_norm_shift_and_fp16) {
    mpt_text_norm_shift v = {.units = "batch-norm channels", .n_t = 3, .t = {0, 8, 128}, .kappa = {1.4, 65, 16400},
                             .onepass_bf16 = {0.05, 2.1, 1490}, .onepass_fp16 = {0.003, INFINITY, INFINITY},
                             .onepass_fp32 = {2.4e-7, 3.4e-5, 9.4e-3}, .twopass_bf16 = {0.022, 0.1, 66},
                             .twopass_fp32 = {1.9e-7, 1.7e-7, 1.6e-7}, .clamped_bf16 = {0, 0.375, 0.25}};
    mpt_text_norm_shifted(t, sizeof t, &v);
    HAS("one-pass variance in BF16 grew from 0.05 to 1.5e+03; from t = 8 on it cancelled to zero or below");
    HAS("Two passes in FP32 stayed within a factor 3");
    HAS("its 16-bit sum of the shifted values loses the mean itself");
    HAS("the one-pass subtraction cancels as the condition grows, FP32's two passes do not");
    mpt_text_norm_shift o = v; /* nothing grows, nothing cancels, FP32's two passes grow */
    for (int i = 0; i < 3; i++) o.onepass_bf16[i] = 0.05, o.clamped_bf16[i] = 0, o.twopass_bf16[i] = 0.02;
    o.twopass_fp32[2] = 1e-5;
    mpt_text_norm_shifted(t, sizeof t, &o);
    HAS("did not grow tenfold");
    HAS("it never cancelled to zero or below");
    HAS("Two passes in FP32 grew too");
    HAS("the subtraction of the mean removes the shift");
    LACKS("cancels as the condition grows");
    /* FP16 statistics at two batches: the lesson's quick numbers, then the opposite (nothing overflows or skips) */
    mpt_text_norm_fp16 f = {128, 512, 0.0, 0.208, 0, 32, 8, 8, 70.6, 70.7, 10.15, 62.5};
    mpt_text_norm_fp16_batches(t, sizeof t, &f);
    HAS("at batch 128 no batch-norm channel's FP16 statistics overflowed");
    HAS("skipped no step (0 of 32");
    HAS("at batch 512 20.8% of the batch-norm channels' FP16 statistics were not finite");
    HAS("every step of the fp16 run with FP16 statistics was skipped (8 of 8; test accuracy 10.15% against 62.50%");
    HAS("The larger batch failed more");
    mpt_text_norm_fp16 g = {128, 512, 0.0, 0.0, 0, 32, 0, 8, 70.6, 70.7, 60.0, 62.5};
    mpt_text_norm_fp16_batches(t, sizeof t, &g);
    LACKS("every step");
    LACKS("were not finite");
    HAS("The larger batch did not fail more often here");
    mpt_text_norm_fp16 h = {128, 512, NAN, 0.1, 3, 32, 2, 8, 70.6, 70.7, 60.0, 62.5};
    mpt_text_norm_fp16_batches(t, sizeof t, &h);
    HAS("(not measured on the trained activations)");
    HAS("skipped some steps (3 of 32");
}
END_TEST

/* The branches the tests above leave out, each fed a case on the side of its threshold that tools/sentences.h states
 * (mutation audit, tests/hostile/mutation-teaching.md). Hand-worked numbers in the comments. */
START_TEST(test_other_branches) {
    /* a reference that did not move over the seeds: its own sentence, not "larger" from a ratio over 0 */
    mpt_text_pairing(t, sizeof t, "fp16", 0.0, 0.3);
    HAS("did not move at all over the seeds");
    LACKS("larger");
    /* better beyond the margin, in both sentences; an interval above 0 inside the margins reads "higher" */
    mpt_stats_paired d = paired(1.0, 0.5, 1.5, MPT_VERDICT_BETTER, 0);
    mpt_text_paired(t, sizeof t, "fp16 - fp32", &d, NULL);
    HAS("better by more than 0.3 pp");
    LACKS("worse");
    mpt_text_verdict_reading(t, sizeof t, "in fp16", &d);
    HAS("in fp16 the network ended better beyond the ±0.3 pp margin");
    LACKS("worse");
    d = paired(0.25, 0.05, 0.45, MPT_VERDICT_INCONCLUSIVE, 40);
    mpt_text_verdict_reading(t, sizeof t, "in fp16", &d);
    HAS("ended higher on average, but not beyond");
    /* a mean difference on the margin (stats.c gives seeds_needed -1 there): no count of seeds, not "more than 10000" */
    d = paired(0.3, -0.2, 0.8, MPT_VERDICT_INCONCLUSIVE, -1);
    mpt_text_paired(t, sizeof t, "fp16 - fp32", &d, NULL);
    HAS("the mean sits on the margin, so no number of seeds decides");
    LACKS("10000");
    /* FP32's growth between half and a fifth of FP16's: 15 / 48 = 0.31 "more slowly"; 30 / 48 = 0.625 "as fast" */
    mpt_text_accum_growth(t, sizeof t, "FP16", 48.0, 15.0, 8192.0, 16, 65536);
    HAS("grew more slowly (15x)");
    LACKS("far");
    mpt_text_accum_growth(t, sizeof t, "FP16", 48.0, 30.0, 8192.0, 16, 65536);
    HAS("grew as fast (30x)");
    /* a sign split at p = 0.04 is not resolved at the 1% level (450 of 840: z = 30 / sqrt(210) = 2.07) */
    const mpt_text_signs tc = {450, 390, 0.04, -0.07}, rn = {423, 423, 1.0, -0.028};
    mpt_text_truncation_bias(t, sizeof t, "h100", "FP16", &tc, &rn);
    HAS("No bias was resolved at the 1% level");
    LACKS("biased the error");
    /* 1.3x is "more" (the header's 1.25x) */
    mpt_text_tc_vs_ieee(t, sizeof t, "h100", "FP16", 16, 65536, 1.3e-8, 2e-6, 1e-8, 1.7e-6);
    HAS("erred 1.3x more than IEEE recursive FP32 summation at K = 16");
    /* a growth of 999.7x is a factor from 100 on: "1000x", not "1e+03x" */
    mpt_text_tc_vs_ieee(t, sizeof t, "h100", "FP16", 16, 65536, 1e-8, 9.997e-6, 1e-8, 3.4e-6);
    HAS("its error grew 1000x");
    /* promotion that stays flat but above the unpromoted error does not cap it; nor does one that grew 3x */
    mpt_text_promotion(t, sizeof t, 128, 512, 65536, 1.0e-5, 3.0e-5, 4.0e-5, 7.0e-5, 4.0e-5, 7.0e-5);
    HAS("did not cap");
    mpt_text_promotion(t, sizeof t, 128, 512, 65536, 4.0e-4, 9.0e-3, 4.0e-5, 1.2e-4, 4.0e-5, 1.2e-4);
    HAS("did not cap");
    LACKS("caps");
    /* two warm-up steps at 30% and 30 steady ones at 1%: whole-run mean (0.6 + 0.3) / 32 = 0.028125, of which the
     * warm-up's share is 0.6 / 0.9 = 2/3: mostly the warm-up's */
    mpt_text_fp8_warmup(t, sizeof t, 2, 30, 0.3, 0.1, 0.01, 0.0, 0.028125, 0.00625);
    HAS("mostly the warm-up's");
    /* an unscaled wire at 1.5x the scaled error costs (above 1.1x); none flushed but some subnormal is not "none" */
    mpt_text_wire_unscaled(t, sizeof t, 16, 0.01, 0.3, 1.5e-3, 1.0e-3, 16);
    HAS("the cost of sending the gradient unscaled");
    mpt_text_wire_unscaled(t, sizeof t, 16, 0.0, 0.3, 1.0e-3, 1.0e-3, 16);
    LACKS("made none subnormal");
    HAS("30% subnormal");
    /* mass 5e-4 at S = 1 is above the 1e-4 of "negligible", whatever the L2 error */
    mpt_text_underflow u = {"fc3.out.grad", 0.1, 5e-4, 1e-4, 0.001, 1e-9, 1e-5, 16};
    mpt_text_underflow_cost(t, sizeof t, &u);
    HAS("carries a real share of the signal");
    /* batch 16: at 2^20 an example overflows when 1 - p >= 1048320 / 2^20, i.e. p below 256 / 2^20 = 0.00024; settled at
     * 2^21 with no overflow: 1 - p stayed below 1048320 / 2^21 = 0.49988 */
    mpt_text_overflow_bound(t, sizeof t, 16, 524288.0, 20, 0);
    HAS("probability below 0.00024 on its label overflows");
    mpt_text_overflow_bound(t, sizeof t, 16, 2097152.0, 20, 0);
    HAS("(1 - p stayed below 0.5)");
    /* stochastic rounding that lost few updates but applied 60% of the mass did not keep them */
    mpt_text_stochastic(t, sizeof t, 40.0, 0.3, 0.6, 0.16);
    HAS("did not keep the updates");
    LACKS("promises (most");
    /* FP32 lost updates carrying 1e-3 of the mass: above the 1e-4 of "almost nothing" */
    mpt_text_fp32_lost(t, sizeof t, 0.2, 1e-3);
    HAS("a real share of the movement");
    /* both variances exact (0 against 0): a ratio of 1, "about as much", not "less" */
    mpt_text_norm_var v = {"layer-norm rows", 8, 1.0, 0.0, 0.0, {"BF16", "FP16"}, {0.0, 0.0}, {0.0, 0.0}, {0, 0}, {0, 0}};
    mpt_text_norm_variance(t, sizeof t, &v);
    HAS("in BF16 the one-pass formula erred about as much as two passes");
    HAS("Welford's update in FP32 erred 0, about as much as");
    /* a one-pass error that grew 40x (0.05 to 2) grew more than tenfold */
    mpt_text_norm_shift s = {.units = "batch-norm channels", .n_t = 2, .t = {0, 8}, .kappa = {1.4, 65},
                             .onepass_bf16 = {0.05, 2.0}, .onepass_fp16 = {0.003, 0.1}, .onepass_fp32 = {2e-7, 3e-6},
                             .twopass_bf16 = {0.02, 0.02}, .twopass_fp32 = {1.9e-7, 1.9e-7}, .clamped_bf16 = {0, 0}};
    mpt_text_norm_shifted(t, sizeof t, &s);
    HAS("one-pass variance in BF16 grew from 0.05 to 2");
    /* the first moment's tensor is m, not v ("exp_avg" is a prefix of "exp_avg_sq") */
    mpt_text_state_seq q;
    memset(&q, 0, sizeof q);
    q.looked = 7, q.update2_max = 250.0, q.lr = 0.001, q.state_nonfinite_step = 4, q.loss_all_finite = 1;
    snprintf(q.state_tensor, sizeof q.state_tensor, "fc1.weight:exp_avg");
    snprintf(q.state_value, sizeof q.state_value, "-inf");
    mpt_text_state_sequence(t, sizeof t, &q);
    HAS("m = beta1 m + (1 - beta1) g rounded to FP16");
    LACKS("beta2");
    /* a batch whose run took no step skipped none */
    mpt_text_norm_fp16 f = {128, 512, 0.0, 0.0, 0, 0, 0, 8, 70.6, 70.7, 60.0, 62.5};
    mpt_text_norm_fp16_batches(t, sizeof t, &f);
    LACKS("every step");
}
END_TEST

/* The scale lesson's sentences: which network paid (a verdict of worse, and only that), and how the count grew. */
START_TEST(test_scale_effect) {
    mpt_stats_paired d0 = paired(-0.2, -0.9, 0.5, MPT_VERDICT_INCONCLUSIVE, 40);
    mpt_stats_paired d1 = paired(-1.0, -1.5, -0.5, MPT_VERDICT_WORSE, 0);
    mpt_text_scale s = {"FP16 underflow", {"mlp", "deep"}, {"1% flush", "20% flush"}, 1.5, "no scaling - dynamic",
                        {&d0, &d1}, {NULL, NULL}};
    mpt_text_scale_effect(t, sizeof t, &s);
    HAS("What cost no resolved accuracy on the first network cost accuracy on the deeper one");
    HAS("about the same on both (1.5x)");
    LACKS("it grew");
    mpt_text_scale_brief(t, sizeof t, &s);
    HAS("-1.00 pp [-1.50, -0.50] (worse)");
    HAS("cost accuracy on the deeper one");
    s.grow = 3.0, s.d[0] = &d1, s.d[1] = &d0;
    mpt_text_scale_effect(t, sizeof t, &s);
    HAS("it grew 3x from mlp to deep");
    HAS("Only the first network paid for it in accuracy");
    s.d[1] = &d1;
    mpt_text_scale_effect(t, sizeof t, &s);
    HAS("Both networks paid for it in accuracy");
    s.d[0] = &d0, s.d[1] = &d0, s.grow = 0.2;
    mpt_text_scale_effect(t, sizeof t, &s);
    HAS("Neither network's accuracy showed a cost");
    HAS("it fell to 0.2x");
}
END_TEST

/* mptrain speedrun's claim (tools/speedrun.h: a precision reaches the target when its mean does; the report says
 * whether the whole 95% interval lies at or above it). Each of the four outcomes at its closed end (a bound equal to
 * the target counts as reaching it: ">= 90.0%"), and one seed without an interval. */
static mpt_stats_interval ci3(double mean, double lo, double hi) {
    return (mpt_stats_interval){.n = 10, .mean = mean, .level = 0.95, .lo = lo, .hi = hi};
}

START_TEST(test_target_verdict) {
    mpt_stats_interval c = ci3(90.2, 90.0, 90.4); /* whole interval at or above: lo on the target */
    mpt_text_target_verdict(t, sizeof t, "bf16", 90.0, 10, &c, c.mean, 7);
    HAS("bf16 reaches 90.0%: mean 90.20% over 10 seeds, and its whole 95% interval [90.00, 90.40] lies at or above");
    HAS("7 of 10 seeds reached it");
    ck_assert_str_eq(mpt_text_target_reached(90.0, &c, c.mean), "yes (whole interval)");
    c = ci3(90.0, 89.99, 90.01); /* mean on the target, interval below it */
    mpt_text_target_verdict(t, sizeof t, "fp16", 90.0, 10, &c, c.mean, 5);
    HAS("fp16 reaches 90.0% on the mean (90.00% over 10 seeds), but its 95% interval [89.99, 90.01] reaches below");
    LACKS("whole");
    ck_assert_str_eq(mpt_text_target_reached(90.0, &c, c.mean), "yes (mean; interval reaches below)");
    c = ci3(89.99, 89.5, 90.0); /* mean below, hi on the target */
    mpt_text_target_verdict(t, sizeof t, "tf32", 90.0, 10, &c, c.mean, 4);
    HAS("tf32 misses 90.0% on the mean (89.99% over 10 seeds), though its 95% interval [89.50, 90.00] reaches the");
    ck_assert_str_eq(mpt_text_target_reached(90.0, &c, c.mean), "**no**");
    c = ci3(89.5, 89.0, 89.99); /* whole interval below */
    mpt_text_target_verdict(t, sizeof t, "fp32", 90.0, 10, &c, c.mean, 0);
    HAS("fp32 misses 90.0%: mean 89.50% over 10 seeds, and its whole 95% interval [89.00, 89.99] lies below");
    HAS("0 of 10 seeds");
    ck_assert_str_eq(mpt_text_target_reached(90.0, &c, c.mean), "**no**");
    mpt_text_target_verdict(t, sizeof t, "bf16", 90.0, 1, NULL, 90.0, 1);
    HAS("bf16: one seed, 90.00%, at or above 90.0%; one seed gives no interval");
    ck_assert_str_eq(mpt_text_target_reached(90.0, NULL, 90.0), "yes (one seed, no interval)");
    mpt_text_target_verdict(t, sizeof t, "bf16", 90.0, 1, NULL, 89.99, 0);
    HAS("bf16: one seed, 89.99%, below 90.0%");
    ck_assert_str_eq(mpt_text_target_reached(90.0, NULL, 89.99), "no (one seed)");
}
END_TEST

static Suite *sentences_suite(void) {
    Suite *s = suite_create("sentences");
    TCase *tc = tcase_create("sentences");
    tcase_add_test(tc, test_pairing_follows_the_spreads);
    tcase_add_test(tc, test_paired_carries_verdict_and_interval);
    tcase_add_test(tc, test_verdict_reading);
    tcase_add_test(tc, test_vs_published);
    tcase_add_test(tc, test_format_ranges);
    tcase_add_test(tc, test_docs_range_ratio);
    tcase_add_test(tc, test_accumulation_growth);
    tcase_add_test(tc, test_truncation_bias);
    tcase_add_test(tc, test_tc_vs_ieee);
    tcase_add_test(tc, test_promotion_caps_not_removes);
    tcase_add_test(tc, test_fp8_warmup_apart);
    tcase_add_test(tc, test_underflow_cost_by_mass);
    tcase_add_test(tc, test_staleness_and_mx);
    tcase_add_test(tc, test_wire_unscaled);
    tcase_add_test(tc, test_overflow_bound);
    tcase_add_test(tc, test_adam_thresholds);
    tcase_add_test(tc, test_state_sequence);
    tcase_add_test(tc, test_stochastic_and_fp32_lost);
    tcase_add_test(tc, test_checkpoint_refusal_names_what);
    tcase_add_test(tc, test_norm_variance);
    tcase_add_test(tc, test_norm_shift_and_fp16);
    tcase_add_test(tc, test_other_branches);
    tcase_add_test(tc, test_scale_effect);
    tcase_add_test(tc, test_target_verdict);
    tcase_add_test(tc, test_grad_underflow_outcomes);
    tcase_add_test(tc, test_fp8_grad_formats);
    tcase_add_test(tc, test_noise_conclusion);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(sentences_suite()); }
