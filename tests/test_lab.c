/*
 * tests/test_lab.c - `mptrain lab --quick` on real Fashion-MNIST (suite train; skipped with a message when the
 * dataset is not installed), run as a user runs it.
 *
 *  - every lesson runs: report.md, its PNG (unless gnuplot is missing, which the report must then say), and
 *    index.md linking each lesson with the conclusion the command printed;
 *  - each lesson's --quick version shows its effect ("Observed"): the quick sizes are chosen for that;
 *  - the conclusions carry the measured numbers: the overflow lesson's skipped-step count is the static run's
 *    own (its summary.json), the loss-scaling lesson's accuracy of the unscaled run is that run's, the noise
 *    lesson's paired spread is the sd of the per-seed differences recomputed here from the runs' summary.json,
 *    the fp8 lesson's E4M3 and E5M2 gradient losses are the seed-0 fp8 run's telemetry (its summary.json), the
 *    quantization lesson's fp32 accuracies (the models it quantizes) the training runs' own (their summary.json);
 *  - master-weights and optimizer-state state their accuracy comparisons as paired 95% intervals over the seeds run,
 *    and the interval and verdict they state are the ones recomputed here (t quantile from a table) from the per-seed
 *    accuracies in the runs' summary.json; an observed effect has the verdicts its criterion asks for (worse; FP16
 *    worse and BF16 equivalent), and the not-observed runs (SGD lr 0.3 over 2 seeds; 3 seeds) say which half failed;
 *  - the overflow lesson's DeepSpeed trajectory (hysteresis 2, interval 1000) differs from PyTorch's, and Apex's
 *    (which differs from PyTorch's only in a ceiling the run never reaches) is identical and said to be;
 *  - index.md keeps the lessons of earlier runs into the same --out;
 *  - the text follows the numbers: given configurations where the effect is absent (a loss scale of 1, which
 *    cannot overflow; NVIDIA_TF32_OVERRIDE=0, which turns TF32 math into FP32; an fp8 ladder too short for the
 *    fast accumulator to matter; a 16-bit integer grid, which holds the gradients, and two seeds, whose intervals
 *    decide nothing), the lessons say "Not observed", and, being --quick runs, name the full command
 *    (with the run's --param's) to run before concluding;
 *  - usage: --list, an unknown lesson and a malformed --param exit as documented.
 */
#include <errno.h>
#include <math.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#define TESTS_TMP_PREFIX "mpt_test_lab"
#include "tmpdir.h"
#include "mpt_config.h"
#include "engine/checkpoint.h"
#include "engine/numerics.h"

static char out_buf[1 << 18];

/* Runs `[env] mptrain lab ARGS` through the shell; output (both streams) in out_buf; returns the exit status. */
static int run_lab(const char *env, const char *args) {
    const char *root = getenv("MPT_BUILD_ROOT");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s '%s/tools/mptrain' lab %s 2>&1", env ? env : "", root ? root : ".", args);
    FILE *p = popen(cmd, "r");
    ck_assert(p != NULL);
    size_t n = fread(out_buf, 1, sizeof out_buf - 1, p);
    out_buf[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int have_data(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", MPT_DEFAULT_DATA_DIR);
    if (access(p, R_OK) == 0) return 1;
    printf("test_lab: skipped: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)\n", MPT_DEFAULT_DATA_DIR);
    return 0;
}

/* The printed conclusion line of a lesson ("<name>: ..."), copied into dst. */
static void printed_conclusion(const char *name, char *dst, size_t len) {
    char key[64];
    snprintf(key, sizeof key, "\n%s: ", name);
    const char *p = strstr(out_buf, key);
    ck_assert_msg(p != NULL, "no conclusion printed for %s: %s", name, out_buf);
    p += strlen(key);
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    ck_assert(n < len);
    memcpy(dst, p, n);
    dst[n] = '\0';
}

static double summary_number(const char *dir, const char *key) {
    char p[700];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    json_error_t err;
    json_t *j = json_load_file(p, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", p, err.text);
    json_t *v = json_object_get(j, key);
    ck_assert_msg(json_is_number(v), "%s lacks %s", p, key);
    double x = json_number_value(v);
    json_decref(j);
    return x;
}

/* FP16's band of a value with log2 |g| = x (binade edges on that axis): 0 flushed to zero (below 2^-25),
 * 1 subnormal (2^-25 to 2^-14), 2 normal (to 2^16), 3 overflow. */
static int fp16_band(double x) { return x < -25.0 ? 0 : x < -14.0 ? 1 : x < 16.0 ? 2 : 3; }

/* The mean over telemetry steps of metric `metric` of `tensor`, from dir/summary.json (NAN when absent). */
static double tensor_mean(const char *dir, const char *tensor, const char *metric) {
    char p[700];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    json_error_t err;
    json_t *j = json_load_file(p, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", p, err.text);
    json_t *v = json_object_get(json_object_get(json_object_get(json_object_get(json_object_get(j, "telemetry"),
                                                                                "metrics"), tensor), metric),
                                "mean");
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    json_decref(j);
    return x;
}

/* The mean over telemetry steps of metric `metric` of tensor all_fp8_grads, from dir/summary.json. */
static double telemetry_mean(const char *dir, const char *metric) {
    double x = tensor_mean(dir, "all_fp8_grads", metric);
    ck_assert_msg(isfinite(x), "%s lacks telemetry all_fp8_grads %s", dir, metric);
    return x;
}

/* One value of dir/telemetry.csv: step, tensor, metric; NAN when absent. */
static double csv_value(const char *csv, long step, const char *tensor, const char *metric) {
    char key[256];
    snprintf(key, sizeof key, "\n%ld,%s,%s,", step, tensor, metric);
    const char *p = strstr(csv, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* Delayed scaling's steady state, recomputed from a run's telemetry.csv: the steps where fc1.dy's or fc2.dy's scale
 * is no longer 1, and over them the mean flushed + subnormal share of all_fp8_grads in the format used (k = 0) or the
 * other (k = 1). */
static double steady_lost(const char *dir, int k, int *steps) {
    char p[700];
    snprintf(p, sizeof p, "%s/telemetry.csv", dir);
    static char csv[1 << 23];
    FILE *f = fopen(p, "rb");
    ck_assert_msg(f != NULL, "%s", p);
    csv[0] = '\n';
    size_t n = fread(csv + 1, 1, sizeof csv - 2, f);
    csv[n + 1] = '\0';
    fclose(f);
    double sum = 0.0;
    *steps = 0;
    for (const char *q = csv; (q = strstr(q, ",fc1.dy,fp8_scale,")) != NULL; q++) { /* one row per telemetry step */
        const char *l = q;
        while (l > csv && l[-1] != '\n') l--;
        long st = atol(l);
        double s1 = csv_value(csv, st, "fc1.dy", "fp8_scale"), s2 = csv_value(csv, st, "fc2.dy", "fp8_scale");
        if (s1 == 1.0 && s2 == 1.0) continue; /* the warm-up */
        sum += csv_value(csv, st, "all_fp8_grads", k ? "fp8_flush_frac@other_format" : "fp8_flush_frac") +
               csv_value(csv, st, "all_fp8_grads", k ? "fp8_subnormal_frac@other_format" : "fp8_subnormal_frac");
        (*steps)++;
    }
    return *steps ? sum / *steps : NAN;
}

/* One whitespace-separated column (0-based) of the data row of `file` whose first column is x (NAN when absent). */
static double dat_value(const char *file, double x, int col) {
    FILE *f = fopen(file, "r");
    ck_assert_msg(f != NULL, "%s: %s", file, strerror(errno));
    char line[8192];
    double v = NAN;
    while (isnan(v) && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        if (!tok || strtod(tok, NULL) != x) continue;
        for (int c = 1; c <= col && (tok = strtok_r(NULL, " \n", &save)); c++)
            if (c == col) v = strtod(tok, NULL);
    }
    fclose(f);
    return v;
}

/* normalization: the numbers of the conclusion are its files', and its variances recompute from its activations */
static void normalization_numbers(const char *out) {
    char concl[4096], want[512], dir[700], f[760];
    printed_conclusion("normalization", concl, sizeof concl);
    /* normalization-ladder.dat: b, units, condition, then per method (fp32, fp32-onepass, bf16, bf16-onepass, fp16,
     * fp16-onepass, welford-fp32) five columns, the median relative error first */
    snprintf(f, sizeof f, "%s/normalization/normalization-ladder.dat", out);
    const double e32 = dat_value(f, 128, 3), eb1 = dat_value(f, 128, 3 + 5 * 3), eh1 = dat_value(f, 128, 3 + 5 * 5);
    snprintf(want, sizeof want, "erred by %.2g in BF16 and %.2g in FP16 on the median one, against %.2g for the "
             "policy's two passes in FP32", eb1, eh1, e32);
    ck_assert_msg(strstr(concl, want) != NULL, "normalization: want '%s' in: %s", want, concl);
    ck_assert_msg(eb1 >= 10 * e32 && eh1 >= 10 * e32, "normalization: BF16 %g, FP16 %g, FP32 %g", eb1, eh1, e32);
    /* the criterion's second half, from normalization-shift.dat (same columns, keyed by the shift t): at some shift
     * the BF16 one-pass variance errs at least 10x more than two passes in BF16 */
    snprintf(f, sizeof f, "%s/normalization/normalization-shift.dat", out);
    static const double shift_t[] = {0, 2, 8, 32, 128};
    double best = 0.0;
    for (int i = 0; i < 5; i++) {
        const double one = dat_value(f, shift_t[i], 3 + 5 * 3), two = dat_value(f, shift_t[i], 3 + 5 * 2);
        ck_assert_msg(isfinite(two), "%s: no row for t = %g", f, shift_t[i]);
        if (two > 0.0 && one / two > best) best = one / two;
        if (two == 0.0 && one > 0.0) best = INFINITY;
    }
    ck_assert_msg(best >= 10.0, "normalization: BF16 one-pass over BF16 two passes at most %g over the shifts", best);
    /* the fp16 runs at batch 4 x 128: skipped steps and accuracies from their summary.json */
    snprintf(dir, sizeof dir, "%s/normalization/fp16-stats16-b512", out);
    const double acc16 = 100.0 * summary_number(dir, "final_test_accuracy");
    const int sk = (int)summary_number(dir, "steps_skipped"), st = (int)summary_number(dir, "steps");
    snprintf(dir, sizeof dir, "%s/normalization/fp16-b512", out);
    snprintf(want, sizeof want, "(%d of %d; test accuracy %.2f%% against %.2f%% with FP32 statistics)", sk, st, acc16,
             100.0 * summary_number(dir, "final_test_accuracy"));
    ck_assert_msg(strstr(concl, want) != NULL, "normalization: want '%s' in: %s", want, concl);
    /* recomputed from activations.safetensors: bn1's channel 0 over the 128 rows, its exact variance (FP64, two
     * passes) and its BF16 one-pass variance by --norm-stats' contract (rows' parts, then the rows; every operation
     * rounded), against normalization-units.dat's first row (layer 0 unit 0: n mean var kappa, then per method the
     * relative error of var and of rstd) */
    snprintf(f, sizeof f, "%s/normalization/activations.safetensors", out);
    mpt_checkpoint *ck = NULL;
    ck_assert_msg(mpt_checkpoint_open(f, NULL, 0, &ck) == MPT_OK, "%s", mpt_last_error());
    const mpt_checkpoint_tensor *t = mpt_checkpoint_find(ck, "bn1.input");
    ck_assert_msg(t && t->dtype == MPT_DTYPE_F32 && t->ndim == 4 && t->shape[0] == 128, "%s: bn1.input", f);
    const int64_t C = t->shape[1], S = t->shape[2] * t->shape[3];
    const float *x = t->data;
    double mean = 0.0, var = 0.0;
    for (int r = 0; r < 128; r++)
        for (int64_t k = 0; k < S; k++) mean += x[(r * C + 0) * S + k];
    mean /= 128.0 * (double)S;
    for (int r = 0; r < 128; r++)
        for (int64_t k = 0; k < S; k++) var += (x[(r * C) * S + k] - mean) * (x[(r * C) * S + k] - mean);
    var /= 128.0 * (double)S;
    /* the BF16 one-pass: the stored activations are the FP32 ones rounded to BF16; the exact variance of those */
    double mb = 0.0, vb = 0.0;
    float s1 = 0.0f, s2 = 0.0f;
    for (int r = 0; r < 128; r++) {
        float p1 = 0.0f, p2 = 0.0f;
        for (int64_t k = 0; k < S; k++) {
            const float v = mpt_bf16_to_f32(mpt_f32_to_bf16(x[(r * C) * S + k]));
            mb += v;
            p1 = mpt_bf16_to_f32(mpt_f32_to_bf16(p1 + v));
            p2 = mpt_bf16_to_f32(mpt_f32_to_bf16(p2 + mpt_bf16_to_f32(mpt_f32_to_bf16(v * v))));
        }
        s1 = mpt_bf16_to_f32(mpt_f32_to_bf16(s1 + p1)), s2 = mpt_bf16_to_f32(mpt_f32_to_bf16(s2 + p2));
    }
    mb /= 128.0 * (double)S;
    for (int r = 0; r < 128; r++)
        for (int64_t k = 0; k < S; k++) {
            const double v = mpt_bf16_to_f32(mpt_f32_to_bf16(x[(r * C) * S + k]));
            vb += (v - mb) * (v - mb);
        }
    vb /= 128.0 * (double)S;
    const float n = (float)(128 * S), m16 = mpt_bf16_to_f32(mpt_f32_to_bf16(s1 / n));
    float v16 = mpt_bf16_to_f32(mpt_f32_to_bf16(mpt_bf16_to_f32(mpt_f32_to_bf16(s2 / n)) -
                                                mpt_bf16_to_f32(mpt_f32_to_bf16(m16 * m16))));
    v16 = v16 < 0.0f ? 0.0f : v16;
    mpt_checkpoint_close(&ck);
    snprintf(f, sizeof f, "%s/normalization/normalization-units.dat", out);
    const double var_dat = dat_value(f, 0, 4), err_dat = dat_value(f, 0, 6 + 2 * 3);
    ck_assert_msg(fabs(var_dat - var) <= 1e-7 * var, "bn1 channel 0: variance %.9g from the activations, %.9g in %s",
                  var, var_dat, f);
    ck_assert_msg(fabs(err_dat - fabs(v16 - vb) / vb) <= 1e-5 * err_dat, "bn1 channel 0: BF16 one-pass error %.6e "
                  "recomputed, %.6e in %s", fabs(v16 - vb) / vb, err_dat, f);
}

/* scale: the counts of its conclusion are the seed-0 runs' telemetry, the accuracy differences their summary.json's */
static void scale_numbers(const char *out) {
    char concl[4096], want[512], dir[700];
    printed_conclusion("scale", concl, sizeof concl);
    double early_mass[2];
    for (int i = 0; i < 2; i++) { /* early and late: the first and last quarter of the telemetry steps */
        char tp[760];
        snprintf(tp, sizeof tp, "%s/scale/%s-fp16-none-seed0/telemetry.csv", out, i ? "deep" : "mlp");
        FILE *tf = fopen(tp, "r");
        ck_assert_msg(tf != NULL, "%s", tp);
        double fl[256], ma[256];
        int nf = 0, nm = 0;
        char line[512];
        while (fgets(line, sizeof line, tf)) {
            const char *v = strrchr(line, ',');
            if (strstr(line, ",all_activation_grads,flush_frac,") && nf < 256) fl[nf++] = strtod(v + 1, NULL);
            if (strstr(line, ",all_activation_grads,mass_lost,") && nm < 256) ma[nm++] = strtod(v + 1, NULL);
        }
        fclose(tf);
        ck_assert_msg(nf == nm && nf > 0, "%s: %d flush_frac, %d mass_lost rows", tp, nf, nm);
        const int q = (nf + 3) / 4;
        double fe = 0, me = 0, fla = 0, ml = 0;
        for (int k = 0; k < q; k++) fe += fl[k] / q, me += ma[k] / q;
        for (int k = nf - q; k < nf; k++) fla += fl[k] / q, ml += ma[k] / q;
        early_mass[i] = me;
        snprintf(want, sizeof want, "%.3g%% flushed early (mass %.2g), %.3g%% late (mass %.2g) on %s", 100.0 * fe, me,
                 100.0 * fla, ml, i ? "the 16-layer stack" : "the mlp");
        ck_assert_msg(strstr(concl, want) != NULL, "scale: want '%s' in: %s", want, concl);
    }
    ck_assert_msg(early_mass[1] >= 10 * early_mass[0], "scale: early mass %g (deeper) against %g (mlp)", early_mass[1],
                  early_mass[0]);
    /* the deeper network's underflow cost: the mean of the paired differences none - dynamic over its seeds */
    double d = 0.0;
    int ns = 0;
    for (int k = 0; k < 8; k++) {
        snprintf(dir, sizeof dir, "%s/scale/deep-fp16-seed%d", out, k);
        if (access(dir, F_OK) != 0) break;
        const double dyn = 100.0 * summary_number(dir, "final_test_accuracy");
        snprintf(dir, sizeof dir, "%s/scale/deep-fp16-none-seed%d", out, k);
        d += 100.0 * summary_number(dir, "final_test_accuracy") - dyn;
        ns++;
    }
    ck_assert_int_ge(ns, 2);
    snprintf(want, sizeof want, "and %+.2f pp [", d / ns);
    ck_assert_msg(strstr(concl, want) != NULL, "scale: want '%s' in: %s", want, concl);
}

/* ---- accuracy over seeds, recomputed: the paired t interval and verdict of tools/stats.h, by hand ---------------- */

/* Student t's 0.975 quantile for 1..15 degrees of freedom (any statistics table; to 4 decimals). */
static const double t975[16] = {NAN,    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646,
                                2.3060, 2.2622,  2.2281, 2.2010, 2.1788, 2.1604, 2.1448, 2.1314};
/* The equivalence margin of `mptrain compare --seeds` by default (--margin, 0.3 pp), which the lessons use. */
#define MARGIN_PP 0.3

/* The final test accuracies (percent) of an arm of a lesson over its seeds: seed 0 in <lesson dir>/<arm>, seed k in
 * <lesson dir>/<arm>-seed<k>, up to the first seed without a run; returns the seed count. */
static int arm_accuracies(const char *lesson_dir, const char *arm, double *acc, int max) {
    char dir[800];
    int n = 0;
    for (; n < max; n++) {
        if (n == 0) snprintf(dir, sizeof dir, "%s/%s", lesson_dir, arm);
        else snprintf(dir, sizeof dir, "%s/%s-seed%d", lesson_dir, arm, n);
        if (access(dir, F_OK) != 0) break;
        acc[n] = 100.0 * summary_number(dir, "final_test_accuracy");
    }
    return n;
}

/* The verdict of the paired differences a[i] - b[i] over n seeds, recomputed: mean d, sd s (n - 1), the 95% interval
 * d -+ t975[n-1] s / sqrt(n), read against the margin as tools/stats.h documents it. Checks that `concl` states, after
 * "<what> ", the same mean and interval (to the 2 decimals printed) over n seeds and the same verdict; returns the
 * verdict's phrase ("worse by more than", "better by more than", "equivalent within", "inconclusive at"). */
static const char *check_paired(const char *lesson, const char *concl, const char *what, const double *a,
                                const double *b, int n) {
    ck_assert_msg(n >= 2 && n <= 15, "%s: %d seeds", lesson, n);
    double mean = 0.0, ss = 0.0;
    for (int i = 0; i < n; i++) mean += (a[i] - b[i]) / n;
    for (int i = 0; i < n; i++) ss += (a[i] - b[i] - mean) * (a[i] - b[i] - mean);
    const double half = t975[n - 1] * sqrt(ss / (n - 1)) / sqrt((double)n), lo = mean - half, hi = mean + half;
    const char *verdict = -MARGIN_PP < lo && hi < MARGIN_PP ? "equivalent within"
                          : lo > MARGIN_PP                  ? "better by more than"
                          : hi < -MARGIN_PP                 ? "worse by more than"
                                                            : "inconclusive at";
    char key[200];
    snprintf(key, sizeof key, "%s ", what);
    const char *p = strstr(concl, key);
    ck_assert_msg(p != NULL, "%s: no '%s' in: %s", lesson, key, concl);
    double m_txt, lo_txt, hi_txt;
    int n_txt, used = 0;
    ck_assert_msg(sscanf(p + strlen(key), "%lf pp, 95%% CI [%lf, %lf] over %d seeds: %n", &m_txt, &lo_txt, &hi_txt,
                         &n_txt, &used) == 4 && used > 0,
                  "%s: no '95%% CI [' interval after '%s' in: %s", lesson, key, concl);
    /* printed to 2 decimals; the 4-decimal t quantile moves the ends by < 1e-4 se */
    ck_assert_msg(n_txt == n && fabs(m_txt - mean) <= 0.0051 && fabs(lo_txt - lo) <= 0.006 && fabs(hi_txt - hi) <= 0.006,
                  "%s: %s recomputed %+.4f pp [%.4f, %.4f] over %d seeds, the text says %+.2f [%.2f, %.2f] over %d",
                  lesson, what, mean, lo, hi, n, m_txt, lo_txt, hi_txt, n_txt);
    char want[256];
    snprintf(want, sizeof want, "%s ±0.3 pp", verdict);
    if (verdict[0] == 'w' || verdict[0] == 'b') snprintf(want, sizeof want, "%s 0.3 pp", verdict);
    ck_assert_msg(strncmp(p + strlen(key) + used, want, strlen(want)) == 0,
                  "%s: %s [%.3f, %.3f] against ±%.1f pp is '%s'; the text says: %.80s", lesson, what, lo, hi, MARGIN_PP,
                  want, p + strlen(key) + used);
    return verdict;
}

/* master-weights: bf16/SGD without masters - with FP32 masters, per seed, from the runs' summary.json */
static const char *master_weights_verdict(const char *out, const char *concl, int *n) {
    char ld[700];
    snprintf(ld, sizeof ld, "%s/master-weights", out);
    double none[16], masters[16];
    *n = arm_accuracies(ld, "bf16-sgd-masters", masters, 15);
    ck_assert_int_eq(arm_accuracies(ld, "bf16-sgd-none", none, 15), *n);
    return check_paired("master-weights", concl, "no masters - FP32 masters:", none, masters, *n);
}

/* optimizer-state: BF16 - FP32 and FP16 - FP32 moments, per seed, from the whole runs' summary.json */
static void optimizer_state_verdicts(const char *out, const char *concl, const char **bf, const char **fp, int *n) {
    char ld[700];
    snprintf(ld, sizeof ld, "%s/optimizer-state", out);
    double a32[16], a16b[16], a16[16];
    *n = arm_accuracies(ld, "state-fp32", a32, 15);
    ck_assert_int_eq(arm_accuracies(ld, "state-bf16", a16b, 15), *n);
    ck_assert_int_eq(arm_accuracies(ld, "state-fp16", a16, 15), *n);
    *bf = check_paired("optimizer-state", concl, "BF16 - FP32 moments:", a16b, a32, *n);
    *fp = check_paired("optimizer-state", concl, "FP16 - FP32 moments:", a16, a32, *n);
}

START_TEST(test_all_lessons_quick) {
    if (!have_data()) return;
    make_tmpdir();
    const char *out = tmp_path("lab");
    char args[600];
    snprintf(args, sizeof args, "--quick --out '%s'", out);
    int rc = run_lab("", args);
    ck_assert_msg(rc == 0, "lab --quick failed (%d): %s", rc, out_buf);
    const char *names[] = {"tf32", "accumulation", "softmax", "loss-scaling", "master-weights", "optimizer-state",
                           "overflow", "noise", "fp8", "grad-comm", "quantization", "normalization", "scale"};
    char p[700];
    snprintf(p, sizeof p, "%s/index.md", out);
    static char index[1 << 17];
    mpt_test_read_text_into(p, index, sizeof index);
    for (int i = 0; i < 13; i++) {
        snprintf(p, sizeof p, "%s/%s/report.md", out, names[i]);
        const char *report = mpt_test_read_text(p);
        ck_assert_msg(strstr(report, "## Conclusion"), "%s has no conclusion", p);
        snprintf(p, sizeof p, "%s/%s/%s.png", out, names[i], names[i]);
        if (access(p, R_OK) != 0) ck_assert_msg(strstr(report, "gnuplot") != NULL, "no %s and no word why", p);
        char concl[4096], link[128];
        printed_conclusion(names[i], concl, sizeof concl);
        snprintf(link, sizeof link, "[%s](%s/report.md)", names[i], names[i]);
        ck_assert_msg(strstr(index, link) && strstr(index, concl), "index.md lacks %s or its conclusion", names[i]);
        ck_assert_msg(strncmp(concl, "Observed", 8) == 0, "%s --quick does not show its effect: %s", names[i], concl);
        ck_assert_msg(strstr(concl, "This was the --quick version") == NULL, "%s: the note of an unobserved effect "
                      "in an observed one: %s", names[i], concl);
    }
    /* numbers in the text are the runs' own */
    char concl[4096], want[512], dir[700];
    printed_conclusion("overflow", concl, sizeof concl);
    snprintf(dir, sizeof dir, "%s/overflow/static", out);
    snprintf(want, sizeof want, "in %d of", (int)summary_number(dir, "steps_skipped"));
    ck_assert_msg(strstr(concl, "Observed") == concl && strstr(concl, want), "overflow: want '%s' in: %s", want, concl);
    printed_conclusion("loss-scaling", concl, sizeof concl);
    snprintf(dir, sizeof dir, "%s/loss-scaling/none", out);
    snprintf(want, sizeof want, "no scaling %.2f%%", 100.0 * summary_number(dir, "final_test_accuracy"));
    ck_assert_msg(strstr(concl, want) != NULL, "loss-scaling: want '%s' in: %s", want, concl);
    /* what underflows is said by mass too (issue 37 B): the most-flushed gradient's mass_lost@S=1 from the dynamic
     * run's summary.json, and an accuracy statement with its interval, not one seed's ranking */
    snprintf(dir, sizeof dir, "%s/loss-scaling/dynamic", out);
    {
        const char *grads[3] = {"relu1.out.grad", "relu2.out.grad", "fc3.out.grad"};
        int w = 0;
        for (int q = 1; q < 3; q++)
            if (tensor_mean(dir, grads[q], "flush_frac@S=1") >= tensor_mean(dir, grads[w], "flush_frac@S=1")) w = q;
        snprintf(want, sizeof want, "of `%s`'s nonzero values would round to zero in FP16, but they carry %.2g of its "
                 "mass", grads[w], tensor_mean(dir, grads[w], "mass_lost@S=1"));
        ck_assert_msg(strstr(concl, want) != NULL, "loss-scaling: want '%s' in: %s", want, concl);
        ck_assert_msg(strstr(concl, "95% CI [") && strstr(concl, "over 3 seeds"), "loss-scaling: %s", concl);
        /* the telemetry steps it names are the dynamic run's */
        char tp[760];
        snprintf(tp, sizeof tp, "%s/telemetry.csv", dir);
        FILE *tf = fopen(tp, "r");
        ck_assert_msg(tf != NULL, "%s", tp);
        int steps = 0;
        char line[512];
        while (fgets(line, sizeof line, tf)) steps += strstr(line, ",amp,loss_scale,") != NULL;
        fclose(tf);
        snprintf(tp, sizeof tp, "%s/loss-scaling/report.md", out);
        snprintf(want, sizeof want, "(%d telemetry steps in the dynamic run", steps);
        ck_assert_msg(strstr(mpt_test_read_text(tp), want) != NULL, "loss-scaling report: want '%s'", want);
    }
    /* the telemetry interval said in English: "every step", "every 2nd step", never "every 1th" or "every 2th" */
    const char *with_interval[] = {"loss-scaling", "master-weights"};
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/%s/report.md", out, with_interval[i]);
        const char *r = mpt_test_read_text(dir), *p;
        ck_assert_msg(strstr(r, "every step") || strstr(r, "th step") || strstr(r, "st step") || strstr(r, "nd step") ||
                          strstr(r, "rd step"), "%s names no telemetry interval", dir);
        for (p = strstr(r, "th step"); p; p = strstr(p + 1, "th step")) {
            const int d = p > r ? p[-1] : 0, tens = p - r > 1 ? p[-2] : 0;
            ck_assert_msg(!(d >= '1' && d <= '3' && tens != '1'), "%s: an ill-formed ordinal: '%.*s'", dir, 12,
                          p - 3 > r ? p - 3 : r);
        }
    }
    /* loss-scaling's Figure 3: every binade's bar (width 0.9, at its centre on the log2 |g| axis) lies in the FP16
     * band of the values it counts, 2^e to 2^(e+1): flushed below 2^-25, subnormal to 2^-14, normal to 2^16 */
    snprintf(dir, sizeof dir, "%s/loss-scaling/loss-scaling-exponents.dat", out);
    FILE *xf = fopen(dir, "r");
    ck_assert_msg(xf != NULL, "%s: %s", dir, strerror(errno));
    char xl[256];
    int bars = 0;
    double share_sum = 0.0;
    while (fgets(xl, sizeof xl, xf)) {
        int e, es;
        double share, c1, cs;
        if (xl[0] == '#') continue;
        ck_assert_msg(sscanf(xl, "%d %lf %d %lf %lf", &e, &share, &es, &c1, &cs) == 5, "%s: '%s'", dir, xl);
        const int be[2] = {e, es};
        const double bc[2] = {c1, cs};
        for (int q = 0; q < 2; q++) {
            int want_band = fp16_band(be[q]); /* the band edges are integers: the whole binade is in one band */
            ck_assert_msg(fp16_band(bc[q] - 0.45) == want_band && fp16_band(bc[q] + 0.45) == want_band,
                          "%s: the bar of binade %d, centred on %g, leaves its FP16 band", dir, be[q], bc[q]);
        }
        share_sum += share;
        bars++;
    }
    fclose(xf);
    ck_assert_msg(bars > 0 && fabs(share_sum - 100.0) < 0.01 * bars, "%s: %d bars, shares sum to %g", dir, bars,
                  share_sum);
    /* noise: the paired spread, by hand from the runs' accuracies (percent, as the lesson reads them) */
    printed_conclusion("noise", concl, sizeof concl);
    const char *precs[3] = {"fp32", "fp16", "bf16"};
    double acc[3][16];
    int ns = 0;
    for (int k = 0; k < 16; k++) {
        snprintf(dir, sizeof dir, "%s/noise/fp32-seed%d", out, k);
        if (access(dir, F_OK) != 0) break;
        for (int q = 0; q < 3; q++) {
            snprintf(dir, sizeof dir, "%s/noise/%s-seed%d", out, precs[q], k);
            acc[q][k] = 100.0 * summary_number(dir, "final_test_accuracy");
        }
        ns++;
    }
    ck_assert_int_ge(ns, 3);
    for (int q = 1; q < 3; q++) {
        double mean = 0.0, ss = 0.0;
        for (int k = 0; k < ns; k++) mean += (acc[q][k] - acc[0][k]) / ns;
        for (int k = 0; k < ns; k++) ss += (acc[q][k] - acc[0][k] - mean) * (acc[q][k] - acc[0][k] - mean);
        snprintf(want, sizeof want, "%s - fp32 %+.2f pp on average, moving by sd %.2f pp", precs[q], mean,
                 sqrt(ss / (ns - 1)));
        ck_assert_msg(strstr(concl, want) != NULL, "noise: want '%s' in: %s", want, concl);
    }
    /* the lesson's criterion and its words, recomputed: observed when every mean difference lies within twice its
     * paired sd (not fp32's own sd across seeds), and each precision's clause says whether a one-seed difference of
     * that size stands out; the ratio is the paired sd over fp32's sd, and the pairing sentence says less (below 0.8x for
     * both), more (above 1.25x for both) or about the same (mutation audit L1, L5) */
    int within = 1, less = 1, more = 1;
    double s32m = 0.0, s32s = 0.0;
    for (int k = 0; k < ns; k++) s32m += acc[0][k] / ns;
    for (int k = 0; k < ns; k++) s32s += (acc[0][k] - s32m) * (acc[0][k] - s32m);
    const double sd32 = sqrt(s32s / (ns - 1));
    for (int q = 1; q < 3; q++) {
        double mean = 0.0, ss = 0.0;
        for (int k = 0; k < ns; k++) mean += (acc[q][k] - acc[0][k]) / ns;
        for (int k = 0; k < ns; k++) ss += (acc[q][k] - acc[0][k] - mean) * (acc[q][k] - acc[0][k] - mean);
        const double sdp = sqrt(ss / (ns - 1));
        within &= fabs(mean) <= 2.0 * sdp;
        less &= sdp < 0.8 * sd32;
        more &= sdp > 1.25 * sd32;
        if (sd32 > 0.0) {
            snprintf(want, sizeof want, "moving by sd %.2f pp from seed to seed (%.2fx fp32's own sd; a one-seed "
                     "difference of this size %s)", sdp, sdp / sd32,
                     fabs(mean) > 2.0 * sdp ? "stands out from that noise" : "would not stand out from that noise");
            ck_assert_msg(strstr(concl, want) != NULL, "noise: want '%s' in: %s", want, concl);
        }
    }
    const char *pairing = less   ? "the pairing cancelled part of the seed's effect here"
                          : more ? "here the paired differences spread more than fp32 alone"
                                 : "here the paired spreads are about fp32's own";
    ck_assert_msg(strstr(concl, pairing) != NULL, "noise: want '%s' in: %s", pairing, concl);
    ck_assert_msg((strncmp(concl, "Observed", 8) == 0) == within, "noise: observed is %d by the paired sds: %s", within,
                  concl);
    /* fp8: the gradient shares are the seed-0 fp8 run's telemetry past delayed scaling's warm-up (the steps whose dy
     * scales are no longer 1, recomputed here from its telemetry.csv), E4M3 the other format; the whole-run means of
     * summary.json, warm-up included, are reported apart (issue 37: the quick run's 3.24% was step 1) */
    printed_conclusion("fp8", concl, sizeof concl);
    snprintf(dir, sizeof dir, "%s/fp8/mlp-fp8-seed0", out);
    int steady = 0;
    const double e5 = steady_lost(dir, 0, &steady), e4 = steady_lost(dir, 1, &steady);
    snprintf(want, sizeof want, "E4M3 lost (flushed or made subnormal) %.3g%% of their nonzero values where E5M2 "
             "lost %.3g%% (seed-0 fp8 run, both formats on the same gradients, %d telemetry steps)", 100.0 * e4,
             100.0 * e5, steady);
    ck_assert_msg(strstr(concl, want) != NULL, "fp8: want '%s' in: %s", want, concl);
    ck_assert_msg(e4 > e5, "fp8: E4M3 %g, E5M2 %g", e4, e5);
    snprintf(want, sizeof want, "The whole-run means (%.3g%%, %.3g%%)",
             100.0 * (telemetry_mean(dir, "fp8_flush_frac@other_format") +
                      telemetry_mean(dir, "fp8_subnormal_frac@other_format")),
             100.0 * (telemetry_mean(dir, "fp8_flush_frac") + telemetry_mean(dir, "fp8_subnormal_frac")));
    ck_assert_msg(strstr(concl, want) != NULL, "fp8: want '%s' in: %s", want, concl);
    ck_assert_msg(strstr(concl, "caps the fast accumulator's error rather than removing it") &&
                      !strstr(concl, "removes") && !strstr(concl, "trains like"), "fp8: %s", concl);
    /* tf32: accuracy carries its interval and verdict, never "the same accuracy" */
    printed_conclusion("tf32", concl, sizeof concl);
    ck_assert_msg(strstr(concl, "95% CI [") && strstr(concl, "over 2 seeds: ") && !strstr(concl, "same accuracy"),
                  "tf32: %s", concl);
    ck_assert_msg(strstr(concl, "operand samples here the metric ranged"), "tf32: no sampling spread: %s", concl);
    /* accumulation: FP32's own growth, from the second block of accumulation.dat (K, then per accumulator FP32,
     * FP16, BF16 the medians of recursive, pairwise, blocked, Kahan) */
    printed_conclusion("accumulation", concl, sizeof concl);
    {
        char ap[700];
        snprintf(ap, sizeof ap, "%s/accumulation/accumulation.dat", out);
        const char *dat = strstr(mpt_test_read_text(ap), "\n\n\n");
        ck_assert(dat != NULL);
        double first[13] = {0}, last[13] = {0};
        int rows = 0;
        for (const char *l = strchr(dat + 3, '\n'); l && l[1]; l = strchr(l + 1, '\n')) {
            double v[13];
            if (sscanf(l + 1, "%lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4],
                       &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12]) != 13)
                continue;
            if (rows++ == 0) memcpy(first, v, sizeof v);
            memcpy(last, v, sizeof v);
        }
        ck_assert_int_eq(rows, 7);
        snprintf(want, sizeof want, "(%.0fx) as the FP16 one's (%.0fx)", last[1] / first[1], last[5] / first[5]);
        ck_assert_msg(strstr(concl, want) != NULL, "accumulation: want '%s' in: %s", want, concl);
        ck_assert_msg(strstr(concl, "keeps it") == NULL, "accumulation: %s", concl);
    }
    /* accumulation, Tensor Cores: the h100 model's FP16 numbers in the conclusion are tensor-cores.dat's (block 0: K,
     * then per format the dot products and the medians of IEEE recursive, v100, a100, h100, b200; block 3: the pooled
     * sign counts; block 4: b200 against h100), and the branch follows the sign tests read from it */
    {
        char tp[700];
        snprintf(tp, sizeof tp, "%s/accumulation/tensor-cores.dat", out);
        static char dat[1 << 16];
        mpt_test_read_text_into(tp, dat, sizeof dat);
        const char *blk[5] = {dat};
        for (int i = 1; i < 5; i++) {
            blk[i] = strstr(blk[i - 1], "\n\n\n");
            ck_assert_msg(blk[i] != NULL, "%s: no block %d", tp, i);
            blk[i] += 3;
        }
        double lo[19] = {0}, hi[19] = {0};
        int rows = 0;
        for (const char *l = blk[0]; l && l < blk[1]; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
            double v[19];
            int got = 0;
            for (const char *q = l; got < 19; got++) {
                char *end;
                v[got] = strtod(q, &end);
                if (end == q) break;
                q = end;
            }
            if (got != 19) continue;
            if (rows++ == 0) memcpy(lo, v, sizeof v);
            memcpy(hi, v, sizeof v);
        }
        ck_assert_int_eq(rows, 7);
        /* the models ran: a100 (blocks of 8) and h100 (blocks of 16) cannot have one median at K = 65536 unless the
         * backend summed both the same way (no model set) */
        ck_assert_msg(hi[4] != hi[5] && hi[5] != hi[2], "%s: a100 %g, h100 %g, IEEE %g at K = %.0f", tp, hi[4], hi[5],
                      hi[2], hi[0]);
        snprintf(want, sizeof want, "the h100 model's sums of FP16 products erred");
        ck_assert_msg(strstr(concl, want), "accumulation: want '%s' in: %s", want, concl);
        snprintf(want, sizeof want, "at K = %.0f (median %.2g against %.2g)", lo[0], lo[5], lo[2]);
        ck_assert_msg(strstr(concl, want), "accumulation: want '%s' in: %s", want, concl);
        snprintf(want, sizeof want, "at K = %.0f (%.2g against %.2g)", hi[0], hi[5], hi[2]);
        ck_assert_msg(strstr(concl, want), "accumulation: want '%s' in: %s", want, concl);
        long long n[2] = {-1, -1}, tw[2] = {0}, aw[2] = {0};
        double pv[2] = {NAN, NAN};
        for (const char *l = blk[3]; l && l < blk[4]; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
            char fmt[16], sum[32];
            long long e, t, a, z;
            double share, p, ratio;
            if (sscanf(l, "%15s %31s %lld %lld %lld %lld %lf %lf %lf", fmt, sum, &e, &t, &a, &z, &share, &p, &ratio) != 9 ||
                strcmp(fmt, "FP16") != 0)
                continue;
            int k = strcmp(sum, "h100") == 0 ? 0 : strcmp(sum, "ieee-recursive") == 0 ? 1 : -1;
            if (k < 0) continue;
            n[k] = e, tw[k] = t, aw[k] = a, pv[k] = p;
            ck_assert_msg(t + a + z == e, "%s: %s %s counts do not add up", tp, fmt, sum);
        }
        ck_assert_msg(n[0] > 0 && n[1] > 0, "%s: no FP16 h100 or ieee-recursive row", tp);
        snprintf(want, sizeof want, "in %lld of the %lld dot products whose sum was not exact", tw[0], tw[0] + aw[0]);
        ck_assert_msg(strstr(concl, want), "accumulation: want '%s' in: %s", want, concl);
        snprintf(want, sizeof want, "did in %lld of %lld (", tw[1], tw[1] + aw[1]);
        ck_assert_msg(strstr(concl, want), "accumulation: want '%s' in: %s", want, concl);
        const int bias = pv[0] < 0.01 && tw[0] > aw[0] && !(pv[1] < 0.01);
        ck_assert_msg(bias == (strstr(concl, "Truncation biased the error, it was not noise") != NULL),
                      "accumulation: sign tests p = %g (h100), %g (IEEE): %s", pv[0], pv[1], concl);
        long long dots = 0, differ = 0;
        for (const char *l = blk[4]; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
            char fmt[16];
            long long d, x;
            if (sscanf(l, "%15s %lld %lld", fmt, &d, &x) == 3) dots += d, differ += x;
        }
        if (differ) snprintf(want, sizeof want, "differed from the h100 model's in %lld of %lld dot products", differ, dots);
        else snprintf(want, sizeof want, "bit for bit the h100 model's in all %lld dot products", dots);
        ck_assert_msg(strstr(concl, want), "accumulation: want '%s' in: %s", want, concl);
    }
    /* softmax: where FP16's log-sum-exp without the max starts to lose images, from softmax.dat (scale, largest and
     * smallest logit, then per format and method three columns: FP16 log-sum-exp's share lost is column 7) */
    printed_conclusion("softmax", concl, sizeof concl);
    {
        char sp[700];
        snprintf(sp, sizeof sp, "%s/softmax/softmax.dat", out);
        const char *dat = mpt_test_read_text(sp);
        double sc = NAN, zmax = NAN, lost = NAN;
        for (const char *l = strchr(dat, '\n'); l && l[1] && isnan(sc); l = strchr(l + 1, '\n')) {
            double v[7];
            if (sscanf(l + 1, "%lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) == 7 &&
                v[6] > 0)
                sc = v[0], zmax = v[1], lost = v[6];
        }
        ck_assert_msg(isfinite(sc), "softmax.dat: FP16's log-sum-exp never lost an image");
        snprintf(want, sizeof want, "first lost images at logit scale %.0f, where the largest logit was %.1f (exp "
                 "overflows FP16 from z = 11.09): %.1f%%", sc, zmax, 100.0 * lost);
        ck_assert_msg(strstr(concl, want) != NULL, "softmax: want '%s' in: %s", want, concl);
    }
    /* grad-comm: the errors in the conclusion are grad-comm.dat's (N, FP32 vs exact, BF16, FP16 S = 1, FP16 S, ...) */
    printed_conclusion("grad-comm", concl, sizeof concl);
    {
        char gp[700];
        snprintf(gp, sizeof gp, "%s/grad-comm/grad-comm.dat", out);
        const char *dat = mpt_test_read_text(gp);
        double first[5] = {NAN}, last[5] = {NAN};
        int rows = 0;
        for (const char *l = strchr(dat, '\n'); l && l[1]; l = strchr(l + 1, '\n')) {
            double v[5];
            if (sscanf(l + 1, "%lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5) continue;
            if (rows++ == 0) memcpy(first, v, sizeof v);
            memcpy(last, v, sizeof v);
        }
        ck_assert_int_eq(rows, 4);
        snprintf(want, sizeof want, "erred against the FP32 all-reduce by %.2g (N = %.0f) to %.2g (N = %.0f) in BF16 "
                 "and %.2g to %.2g in FP16", first[2], first[0], last[2], last[0], first[4], last[4]);
        ck_assert_msg(strstr(concl, want) != NULL, "grad-comm: want '%s' in: %s", want, concl);
        ck_assert_msg(strstr(concl, "is not measured here"), "grad-comm: %s", concl);
    }
    normalization_numbers(out);
    scale_numbers(out);
    /* optimizer-state: the sequence as the whole FP16-moment run's metrics.csv shows it */
    printed_conclusion("optimizer-state", concl, sizeof concl);
    {
        char mp[700];
        snprintf(mp, sizeof mp, "%s/optimizer-state/state-fp16/metrics.csv", out);
        const char *csv = mpt_test_read_text(mp);
        int first_skip = 0, finite = 1;
        for (const char *l = strchr(csv, '\n'); l && l[1]; l = strchr(l + 1, '\n')) {
            long st, ep, sk;
            double loss, lr, ls;
            if (sscanf(l + 1, "%ld,%ld,%lf,%lf,%lf,%ld", &st, &ep, &loss, &lr, &ls, &sk) != 6) continue;
            finite &= isfinite(loss);
            if (!first_skip && sk > 0) first_skip = (int)st;
        }
        ck_assert_int_gt(first_skip, 0);
        snprintf(want, sizeof want, "from step %d on, steps were skipped for non-finite gradients", first_skip);
        ck_assert_msg(strstr(concl, want) != NULL, "optimizer-state: want '%s' in: %s", want, concl);
        ck_assert_msg(finite == (strstr(concl, "while the loss stayed finite at every step") != NULL),
                      "optimizer-state (losses %s finite): %s", finite ? "all" : "not all", concl);
        ck_assert_msg(strstr(concl, "logits overflow") == NULL, "optimizer-state: %s", concl);
    }
    /* master-weights and optimizer-state: the accuracy claim is a paired interval over seeds whose verdict, recomputed
     * here from the runs' summary.json, is the one the text states and the one the criterion asks for */
    {
        int n = 0;
                printed_conclusion("master-weights", concl, sizeof concl);
        const char *v = master_weights_verdict(out, concl, &n);
        snprintf(want, sizeof want, "over %d seeds", n);
        ck_assert_msg(strstr(concl, "95% CI [") && strstr(concl, want), "master-weights: want '%s': %s", want, concl);
        ck_assert_msg(strcmp(v, "worse by more than") == 0, "master-weights observed with a verdict '%s': %s", v, concl);
        snprintf(dir, sizeof dir, "%s/master-weights/bf16-sgd-none", out);
        ck_assert_msg(tensor_mean(dir, "all_parameters", "lost_frac") >= 0.10, "master-weights: lost %g",
                      tensor_mean(dir, "all_parameters", "lost_frac"));
        const char *bf, *fp;
        printed_conclusion("optimizer-state", concl, sizeof concl);
        optimizer_state_verdicts(out, concl, &bf, &fp, &n);
        snprintf(want, sizeof want, "over %d seeds", n);
        ck_assert_msg(strstr(concl, "95% CI [") && strstr(concl, want), "optimizer-state: want '%s': %s", want, concl);
        ck_assert_msg(strcmp(fp, "worse by more than") == 0 && strcmp(bf, "equivalent within") == 0,
                      "optimizer-state observed with verdicts FP16 '%s', BF16 '%s': %s", fp, bf, concl);
    }
    /* quantization: the fp32 column is the trained runs' accuracy (what post-training quantization starts from), seed
     * by seed, on the same test images */
    snprintf(p, sizeof p, "%s/quantization/report.md", out);
    static char qrep[1 << 17];
    mpt_test_read_text_into(p, qrep, sizeof qrep);
    for (int k = 0; k < 3; k++) {
        snprintf(dir, sizeof dir, "%s/quantization/mlp-fp32-seed%d", out, k);
        snprintf(want, sizeof want, "| %d | %.2f |", k, 100.0 * summary_number(dir, "final_test_accuracy"));
        ck_assert_msg(strstr(qrep, want) != NULL, "quantization: want '%s' in the mlp table", want);
    }
    printed_conclusion("quantization", concl, sizeof concl);
    ck_assert_msg(strstr(concl, "INT8 weights per channel against fp32 over 3 seeds") &&
                      strstr(concl, "with the amax scale zeroed") && strstr(concl, ": training keeps floating point"),
                  "quantization: %s", concl);
    /* overflow: different parameters, different trajectories; Apex's is PyTorch's, and the lesson says so */
    printed_conclusion("overflow", concl, sizeof concl);
    ck_assert_msg(strstr(concl, "apex identical to pytorch") != NULL, "overflow: %s", concl);
    /* FP16 overflows from 65520; the bound S < 65520 B for batch 16 puts the largest safe power of two at 2^19 */
    ck_assert_msg(strstr(concl, "reached 65520") && !strstr(concl, "passed 65504") &&
                      strstr(concl, "2^19 is the largest power of two below it"), "overflow: %s", concl);
    /* identical trajectories are one line: in the first plot, every preset named once, the identical ones in one
     * title, and one entry fewer than runs for each run drawn with another */
    {
        char gpp[700];
        snprintf(gpp, sizeof gpp, "%s/overflow/overflow.gp", out);
        const char *gp = mpt_test_read_text(gpp), *p1 = strstr(gp, "\nplot "), *p2 = p1 ? strstr(p1 + 1, "\nplot ") : NULL;
        ck_assert(p1 && p2);
        int entries = 0;
        for (const char *q = p1; q && q < p2; q = strstr(q + 1, "'overflow.dat' index")) entries += q != p1;
        ck_assert_msg(strstr(p1, "title 'pytorch = apex = mptrain: identical trajectories, one line"),
                      "overflow.gp: %.*s", (int)(p2 - p1), p1);
        ck_assert_msg(entries == 4, "overflow.gp: %d lines, want 4 (static, pytorch = apex = mptrain, keras, "
                      "deepspeed): %.*s", entries, (int)(p2 - p1), p1);
    }
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/overflow/pytorch/metrics.csv", out);
    snprintf(b, sizeof b, "%s/overflow/deepspeed/metrics.csv", out);
    static char pt[1 << 17];
    mpt_test_read_text_into(a, pt, sizeof pt);
    ck_assert_msg(strcmp(pt, mpt_test_read_text(b)) != 0, "deepspeed's run is pytorch's");
    rm_tmpdir();
}
END_TEST

/* Given configurations where the effect is absent, the lessons say so; run one at a time into the same --out,
 * index.md keeps both. */
START_TEST(test_not_observed) {
    if (!have_data()) return;
    make_tmpdir();
    char args[700];
    snprintf(args, sizeof args, "overflow --quick --param scale=1 --param batch=128 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    char concl[4096], concl1[4096];
    printed_conclusion("overflow", concl1, sizeof concl1);
    ck_assert_msg(strncmp(concl1, "Not observed", 12) == 0 && strstr(concl1, "skipped 0 of"), "%s", concl1);
    /* a --quick run that did not show the effect says it was the smallest version and names the full command,
     * with the run's --param's, in the printed line and in the report */
    ck_assert_msg(strstr(concl1, "This was the --quick version (") &&
                      strstr(concl1, "Run the full version, `mptrain lab overflow --param scale=1 --param batch=128` ("),
                  "%s", concl1);
    char rp[700];
    snprintf(rp, sizeof rp, "%s/overflow/report.md", tmp_path("lab"));
    ck_assert_msg(strstr(mpt_test_read_text(rp), concl1) != NULL, "the report's conclusion is not the printed one: %s", concl1);
    /* fp8: a ladder that stops at K = 2048, where the fast accumulator's error is still small against the
     * quantization error (0.07 of it in the quick run), cannot show where it starts to matter */
    snprintf(args, sizeof args, "fp8 --quick --param kmax=2048 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    char concl8[4096];
    printed_conclusion("fp8", concl8, sizeof concl8);
    ck_assert_msg(strncmp(concl8, "Not observed", 12) == 0 && strstr(concl8, "up to K = 2048"), "%s", concl8);
    /* softmax: a ladder that stops at the trained logits themselves (scale 1, largest logit below 11.09) cannot
     * show FP16's overflow */
    snprintf(args, sizeof args, "softmax --quick --param tmax=1 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    printed_conclusion("softmax", concl8, sizeof concl8);
    ck_assert_msg(strncmp(concl8, "Not observed", 12) == 0 && strstr(concl8, "lost no image on this ladder"), "%s",
                  concl8);
    /* scale: a "deeper" network of 3 layers has the mlp's small gradients, not 10x their underflow mass */
    snprintf(args, sizeof args, "scale --quick --param depth=3 --param seeds=2 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    printed_conclusion("scale", concl8, sizeof concl8);
    ck_assert_msg(strncmp(concl8, "Not observed: the mlp against the 3-layer network", 49) == 0 &&
                      strstr(concl8, "The criterion asks the deeper network's underflow mass early in training"), "%s",
                  concl8);
    /* quantization: a 16-bit integer grid holds the gradients, and two seeds give intervals too wide to decide */
    snprintf(args, sizeof args, "quantization --quick --param seeds=2 --param grad_bits=16 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    char conclq[2048];
    printed_conclusion("quantization", conclq, sizeof conclq);
    ck_assert_msg(strncmp(conclq, "Not observed", 12) == 0 && strstr(conclq, "INT16 with the amax scale zeroed") &&
                      strstr(conclq, ": not the gap the lesson expects") && strstr(conclq, "over 2 seeds") &&
                      strstr(conclq, "This was the --quick version ("),
                  "%s", conclq);
    /* the note's sizes carry the run's --param seeds=2, not the sizes' own seed counts */
    ck_assert_msg(strstr(conclq, ", 2 seeds), the lesson's smallest") && strstr(conclq, ", 2 seeds), before concluding"),
                  "the --quick note does not say the run's 2 seeds: %s", conclq);
    /* loss-scaling: a dynamic scaler that starts at 1 cannot grow in a quick run (2000 clean steps before the first
     * doubling), so the gradients that underflow at S = 1 underflow at its S too: the conclusion says that the
     * underflow is there and the scale did not save it, never that no gradient underflowed */
    snprintf(args, sizeof args, "loss-scaling --quick --param init=1 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    printed_conclusion("loss-scaling", concl8, sizeof concl8);
    {
        char dir[700], want[300];
        snprintf(dir, sizeof dir, "%s/loss-scaling/dynamic", tmp_path("lab"));
        const char *grads[3] = {"relu1.out.grad", "relu2.out.grad", "fc3.out.grad"};
        int w = 0;
        for (int q = 1; q < 3; q++)
            if (tensor_mean(dir, grads[q], "flush_frac@S=1") >= tensor_mean(dir, grads[w], "flush_frac@S=1")) w = q;
        const double f1 = tensor_mean(dir, grads[w], "flush_frac@S=1"), fs = tensor_mean(dir, grads[w], "flush_frac");
        ck_assert_msg(f1 >= 0.01 && fabs(fs - f1) <= 1e-12, "%s: flushed %g at S = 1, %g at the scaler's S = 1",
                      grads[w], f1, fs);
        snprintf(want, sizeof want, "at the default batch %.2f%% of `%s` would flush at S = 1 and %.2f%% still did at "
                 "its S (mean 2^0)", 100.0 * f1, grads[w], 100.0 * fs);
        ck_assert_msg(strstr(concl8, "Not observed: FP16 underflow is there at S = 1, but the scaler's S did not save") ==
                          concl8 && strstr(concl8, want) && !strstr(concl8, "no activation gradient lost"),
                      "want '%s' in: %s", want, concl8);
    }
    /* master-weights: at SGD lr 0.3 bf16 without masters still loses updates (the mechanism), but two seeds resolve no
     * accuracy cost: the verdict, recomputed from the runs, is not worse, and the text says which half failed */
    snprintf(args, sizeof args, "master-weights --quick --param sgd-lr=0.3 --param seeds=2 --out '%s'",
             tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    printed_conclusion("master-weights", concl8, sizeof concl8);
    {
        int n = 0;
        char dir[700];
        const char *v = master_weights_verdict(tmp_path("lab"), concl8, &n);
        snprintf(dir, sizeof dir, "%s/master-weights/bf16-sgd-none", tmp_path("lab"));
        ck_assert_msg(n == 2 && strcmp(v, "worse by more than") != 0 &&
                          tensor_mean(dir, "all_parameters", "lost_frac") >= 0.10,
                      "master-weights at lr 0.3: %d seeds, verdict '%s', lost %g", n, v,
                      tensor_mean(dir, "all_parameters", "lost_frac"));
        ck_assert_msg(strstr(concl8, "Not observed: the updates were lost, but the accuracy cost is not resolved as "
                                     "worse over these seeds") == concl8, "%s", concl8);
    }
    /* optimizer-state: three seeds cannot resolve BF16 moments as equivalent within 0.3 pp (the recomputed interval is
     * wider than the margin), while FP16's cost is resolved: the text names the half that failed */
    snprintf(args, sizeof args, "optimizer-state --quick --param seeds=3 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    printed_conclusion("optimizer-state", concl8, sizeof concl8);
    {
        int n = 0;
        const char *bf, *fp;
        optimizer_state_verdicts(tmp_path("lab"), concl8, &bf, &fp, &n);
        ck_assert_msg(n == 3 && strcmp(bf, "equivalent within") != 0 && strcmp(fp, "worse by more than") == 0,
                      "optimizer-state, 3 seeds: BF16 '%s', FP16 '%s'", bf, fp);
        ck_assert_msg(strstr(concl8, "Not observed: BF16 moments were not resolved as equivalent to FP32 moments within "
                                     "the margin") == concl8, "%s", concl8);
    }
    snprintf(args, sizeof args, "tf32 --quick --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("NVIDIA_TF32_OVERRIDE=0", args), 0);
    printed_conclusion("tf32", concl, sizeof concl);
    ck_assert_msg(strncmp(concl, "Not observed", 12) == 0 && strstr(concl, "NVIDIA_TF32_OVERRIDE=0"), "%s", concl);
    ck_assert_msg(strstr(concl, "Run the full version, `NVIDIA_TF32_OVERRIDE=0 mptrain lab tf32` ("), "%s", concl);
    char p[700];
    snprintf(p, sizeof p, "%s/index.md", tmp_path("lab"));
    const char *index = mpt_test_read_text(p);
    ck_assert_msg(strstr(index, "[overflow](overflow/report.md)") && strstr(index, concl1) &&
                      strstr(index, "[tf32](tf32/report.md)") && strstr(index, concl),
                  "index.md lost a lesson of an earlier run: %s", index);
    rm_tmpdir();
}
END_TEST

START_TEST(test_usage) {
    ck_assert_int_eq(run_lab("", "--list"), 0);
    const char *names[] = {"tf32", "accumulation", "softmax", "loss-scaling", "master-weights", "optimizer-state",
                           "overflow", "noise", "fp8", "grad-comm", "quantization", "normalization", "scale"};
    for (int i = 0; i < 13; i++) ck_assert_msg(strstr(out_buf, names[i]) != NULL, "--list lacks %s", names[i]);
    /* the list asks what each lesson measures; it asserts none of the outcomes the runs may contradict (issue 37) */
    const char *claims[] = {"keeps it", "same accuracy", "trains like BF16", "removes", "passes 65504"};
    for (int i = 0; i < 5; i++) ck_assert_msg(strstr(out_buf, claims[i]) == NULL, "--list claims '%s'", claims[i]);
    /* the names line up: every claim starts in the same column */
    const char *l1 = strstr(out_buf, "optimizer-state "), *l2 = strstr(out_buf, "tf32 ");
    ck_assert(l1 && l2);
    size_t c1 = strspn(l1 + strlen("optimizer-state"), " ") + strlen("optimizer-state");
    size_t c2 = strspn(l2 + strlen("tf32"), " ") + strlen("tf32");
    ck_assert_msg(c1 == c2 && c1 > strlen("optimizer-state"), "--list columns: %zu vs %zu", c1, c2);
    ck_assert_int_eq(run_lab("", "nosuchlesson"), 2);
    ck_assert_msg(strstr(out_buf, "nosuchlesson") != NULL, "%s", out_buf);
    ck_assert_int_eq(run_lab("", "--param novalue"), 2);
    ck_assert_msg(strstr(out_buf, "--param") != NULL, "%s", out_buf);
    ck_assert_int_eq(run_lab("", "--bogus"), 2);
    ck_assert_int_eq(run_lab("", "--help"), 0);
    /* a bad --param value of a later lesson is refused before the first lesson trains: every chosen lesson reads and
     * checks its values first (MPT_LAB_PARAMS_CHECKED); tf32 computes, and writes, nothing */
    if (have_data()) {
        char dir[] = "/tmp/mpt_test_lab_param_XXXXXX", args[256], tf32[300];
        ck_assert(mkdtemp(dir) != NULL);
        snprintf(args, sizeof args, "tf32 softmax --quick --param tmax=3 --out %s/o", dir);
        ck_assert_int_eq(run_lab("", args), 2);
        ck_assert_msg(strstr(out_buf, "--param tmax: expected a power of two in [1, 1024], found 3") &&
                          !strstr(out_buf, "==== lesson tf32"), "%s", out_buf);
        snprintf(tf32, sizeof tf32, "%s/o/tf32", dir);
        ck_assert_msg(access(tf32, F_OK) != 0, "%s exists: the tf32 lesson ran before the bad value was refused", tf32);
        char rm[400];
        snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
        ck_assert(system(rm) == 0);
    }
}
END_TEST

static Suite *lab_suite(void) {
    Suite *s = suite_create("lab");
    TCase *tc = tcase_create("lab");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_usage);
    tcase_add_test(tc, test_all_lessons_quick);
    tcase_add_test(tc, test_not_observed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run_msg(lab_suite(), sizeof out_buf + MPT_TEST_MSG_MARGIN); }
