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

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
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

/* The mean over telemetry steps of metric `metric` of tensor all_fp8_grads, from dir/summary.json. */
static double telemetry_mean(const char *dir, const char *metric) {
    char p[700];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    json_error_t err;
    json_t *j = json_load_file(p, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", p, err.text);
    json_t *v = json_object_get(json_object_get(json_object_get(json_object_get(json_object_get(j, "telemetry"),
                                                                                "metrics"), "all_fp8_grads"), metric),
                                "mean");
    ck_assert_msg(json_is_number(v), "%s lacks telemetry all_fp8_grads %s", p, metric);
    double x = json_number_value(v);
    json_decref(j);
    return x;
}

START_TEST(test_all_lessons_quick) {
    if (!have_data()) return;
    make_tmpdir();
    const char *out = tmp_path("lab");
    char args[600];
    snprintf(args, sizeof args, "--quick --out '%s'", out);
    int rc = run_lab("", args);
    ck_assert_msg(rc == 0, "lab --quick failed (%d): %s", rc, out_buf);
    const char *names[] = {"tf32", "accumulation", "loss-scaling", "master-weights", "optimizer-state", "overflow",
                           "noise", "fp8", "quantization"};
    char p[700];
    snprintf(p, sizeof p, "%s/index.md", out);
    static char index[1 << 17];
    snprintf(index, sizeof index, "%s", slurp(p));
    for (int i = 0; i < 9; i++) {
        snprintf(p, sizeof p, "%s/%s/report.md", out, names[i]);
        const char *report = slurp(p);
        ck_assert_msg(strstr(report, "## Conclusion"), "%s has no conclusion", p);
        snprintf(p, sizeof p, "%s/%s/%s.png", out, names[i], names[i]);
        if (access(p, R_OK) != 0) ck_assert_msg(strstr(report, "gnuplot") != NULL, "no %s and no word why", p);
        char concl[2048], link[128];
        printed_conclusion(names[i], concl, sizeof concl);
        snprintf(link, sizeof link, "[%s](%s/report.md)", names[i], names[i]);
        ck_assert_msg(strstr(index, link) && strstr(index, concl), "index.md lacks %s or its conclusion", names[i]);
        ck_assert_msg(strncmp(concl, "Observed", 8) == 0, "%s --quick does not show its effect: %s", names[i], concl);
        ck_assert_msg(strstr(concl, "This was the --quick version") == NULL, "%s: the note of an unobserved effect "
                      "in an observed one: %s", names[i], concl);
    }
    /* numbers in the text are the runs' own */
    char concl[2048], want[128], dir[700];
    printed_conclusion("overflow", concl, sizeof concl);
    snprintf(dir, sizeof dir, "%s/overflow/static", out);
    snprintf(want, sizeof want, "in %d of", (int)summary_number(dir, "steps_skipped"));
    ck_assert_msg(strstr(concl, "Observed") == concl && strstr(concl, want), "overflow: want '%s' in: %s", want, concl);
    printed_conclusion("loss-scaling", concl, sizeof concl);
    snprintf(dir, sizeof dir, "%s/loss-scaling/none", out);
    snprintf(want, sizeof want, "none %.2f%%", 100.0 * summary_number(dir, "final_test_accuracy"));
    ck_assert_msg(strstr(concl, want) != NULL, "loss-scaling: want '%s' in: %s", want, concl);
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
    /* fp8: the gradient shares are the seed-0 fp8 run's telemetry (summary.json), E4M3 the other format */
    printed_conclusion("fp8", concl, sizeof concl);
    snprintf(dir, sizeof dir, "%s/fp8/mlp-fp8-seed0", out);
    const double e5 = telemetry_mean(dir, "fp8_flush_frac") + telemetry_mean(dir, "fp8_subnormal_frac");
    const double e4 = telemetry_mean(dir, "fp8_flush_frac@other_format") +
                      telemetry_mean(dir, "fp8_subnormal_frac@other_format");
    snprintf(want, sizeof want, "E4M3 lost (flushed or made subnormal) %.3g%% of their nonzero values where E5M2 "
             "lost %.3g%%", 100.0 * e4, 100.0 * e5);
    ck_assert_msg(strstr(concl, want) != NULL, "fp8: want '%s' in: %s", want, concl);
    ck_assert_msg(e4 > e5, "fp8: E4M3 %g, E5M2 %g", e4, e5);
    /* quantization: the fp32 column is the trained runs' accuracy (what post-training quantization starts from), seed
     * by seed, on the same test images */
    snprintf(p, sizeof p, "%s/quantization/report.md", out);
    static char qrep[1 << 17];
    snprintf(qrep, sizeof qrep, "%s", slurp(p));
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
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/overflow/pytorch/metrics.csv", out);
    snprintf(b, sizeof b, "%s/overflow/deepspeed/metrics.csv", out);
    static char pt[1 << 17];
    snprintf(pt, sizeof pt, "%s", slurp(a));
    ck_assert_msg(strcmp(pt, slurp(b)) != 0, "deepspeed's run is pytorch's");
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
    char concl[2048], concl1[2048];
    printed_conclusion("overflow", concl1, sizeof concl1);
    ck_assert_msg(strncmp(concl1, "Not observed", 12) == 0 && strstr(concl1, "skipped 0 of"), "%s", concl1);
    /* a --quick run that did not show the effect says it was the smallest version and names the full command,
     * with the run's --param's, in the printed line and in the report */
    ck_assert_msg(strstr(concl1, "This was the --quick version (") &&
                      strstr(concl1, "Run the full version, `mptrain lab overflow --param scale=1 --param batch=128` ("),
                  "%s", concl1);
    char rp[700];
    snprintf(rp, sizeof rp, "%s/overflow/report.md", tmp_path("lab"));
    ck_assert_msg(strstr(slurp(rp), concl1) != NULL, "the report's conclusion is not the printed one: %s", concl1);
    /* fp8: a ladder that stops at K = 2048, where the fast accumulator's error is still small against the
     * quantization error (0.07 of it in the quick run), cannot show where it starts to matter */
    snprintf(args, sizeof args, "fp8 --quick --param kmax=2048 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    char concl8[2048];
    printed_conclusion("fp8", concl8, sizeof concl8);
    ck_assert_msg(strncmp(concl8, "Not observed", 12) == 0 && strstr(concl8, "up to K = 2048"), "%s", concl8);
    /* quantization: a 16-bit integer grid holds the gradients, and two seeds give intervals too wide to decide */
    snprintf(args, sizeof args, "quantization --quick --param seeds=2 --param grad_bits=16 --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("", args), 0);
    char conclq[2048];
    printed_conclusion("quantization", conclq, sizeof conclq);
    ck_assert_msg(strncmp(conclq, "Not observed", 12) == 0 && strstr(conclq, "INT16 with the amax scale zeroed") &&
                      strstr(conclq, ": not the gap the lesson expects") && strstr(conclq, "over 2 seeds") &&
                      strstr(conclq, "This was the --quick version ("),
                  "%s", conclq);
    snprintf(args, sizeof args, "tf32 --quick --out '%s'", tmp_path("lab"));
    ck_assert_int_eq(run_lab("NVIDIA_TF32_OVERRIDE=0", args), 0);
    printed_conclusion("tf32", concl, sizeof concl);
    ck_assert_msg(strncmp(concl, "Not observed", 12) == 0 && strstr(concl, "NVIDIA_TF32_OVERRIDE=0"), "%s", concl);
    ck_assert_msg(strstr(concl, "Run the full version, `NVIDIA_TF32_OVERRIDE=0 mptrain lab tf32` ("), "%s", concl);
    char p[700];
    snprintf(p, sizeof p, "%s/index.md", tmp_path("lab"));
    const char *index = slurp(p);
    ck_assert_msg(strstr(index, "[overflow](overflow/report.md)") && strstr(index, concl1) &&
                      strstr(index, "[tf32](tf32/report.md)") && strstr(index, concl),
                  "index.md lost a lesson of an earlier run: %s", index);
    rm_tmpdir();
}
END_TEST

START_TEST(test_usage) {
    ck_assert_int_eq(run_lab("", "--list"), 0);
    const char *names[] = {"tf32", "accumulation", "loss-scaling", "master-weights", "optimizer-state", "overflow",
                           "noise", "fp8", "quantization"};
    for (int i = 0; i < 9; i++) ck_assert_msg(strstr(out_buf, names[i]) != NULL, "--list lacks %s", names[i]);
    ck_assert_msg(strstr(out_buf, "measured: ") != NULL, "--list gives no lesson's measured time: %s", out_buf);
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

int main(void) { return mpt_test_run(lab_suite()); }
