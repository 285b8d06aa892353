/*
 * tests/test_speedrun.c - `mptrain speedrun` (issue 34), run as a user runs it (the built binary through fork/exec, as
 * tests/test_cli.c does), on a small synthetic dataset (datasets/synthetic.h written as IDX files): the plumbing, never
 * the 10-seed recipe itself (docs/speedrun.md has that run).
 *
 *  - flags: a recipe option (--lr, --model, --precision, --seed) is refused naming the flag and where to vary it;
 *    malformed --seeds, --precisions, --untimed-warmup and unknown flags exit 2 naming the flag; --help lists the
 *    options and the recipe; a missing data directory exits 1 naming it;
 *  - --print-recipe prints one line that splits (shell quoting) into the options of `mptrain train`, and that line,
 *    given to `mptrain train` with one run's precision and seed, trains that speedrun run bit for bit: the checkpoint's
 *    tensors are identical. That run of the speedrun had an untimed warm-up, the train run none, so this also checks
 *    that the warm-up leaves the training alone;
 *  - report.md and speedrun.json exist and carry their fields; the accuracy statistics are recomputed here from each
 *    run's own summary.json (mean, the 95% t interval with t(0.975, 1) = 12.7062047362 from a table, the seeds at the
 *    target, the paired difference to fp32), and the times are consistent (the time to result holds the epochs and the
 *    final evaluation; a run holds its warm-up, build and time to result; the process holds its runs);
 *  - epochs.csv: one row per epoch of the recipe, the last with the run's final accuracy;
 *  - a test set whose best accuracy is exactly 90.00% (9 of 10): the seeds there count as reaching the target, and the
 *    report's sentence, table cell and speedrun.json say it is reached (the synthetic runs above end far below it).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "datasets/idx.h"
#include "datasets/synthetic.h"
#include "engine/checkpoint.h"
#include "harness.h"
#include "same_tensors.h"
#define TESTS_TMP_PREFIX "mpt_test_speedrun"
#include "tmpdir.h"

/* ---- running the binary ----------------------------------------------------------------------------------------- */

#define TESTS_OUT_BUF (1 << 17)
#include "run_capture.h"
#define MAX_ARGS TESTS_MAX_ARGS

/* Exit status 2 and a message naming `flag`. */
#define EXPECT_USAGE(flag, ...)                                                                                        \
    do {                                                                                                               \
        int rc_ = run("speedrun", __VA_ARGS__, NULL);                                                                  \
        ck_assert_msg(rc_ == 2, "speedrun %s: exit %d, expected 2: %s", flag, rc_, out_buf);                           \
        ck_assert_msg(strstr(out_buf, flag) != NULL, "the message does not name %s: %s", flag, out_buf);               \
    } while (0)

/* ---- data and files ------------------------------------------------------------------------------------------------ */

#define SYN_TRAIN 400
#define SYN_TEST 200

static const char *write_synthetic(void) {
    const char *dir = tmp_path("data");
    ck_assert(mkdir(dir, 0755) == 0);
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, SYN_TRAIN, SYN_TEST, 784, 10, 34), MPT_OK);
    ck_assert_msg(mpt_mnist_save(dir, &d, 1) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&d);
    return dir;
}

static json_t *load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    ck_assert_msg(j != NULL, "%s: %s (line %d)", path, e.text, e.line);
    return j;
}

static double jnum(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    ck_assert_msg(v && json_is_number(v), "no number '%s'", key);
    return json_number_value(v);
}


/* Splits a line into words as the shell does for what --print-recipe writes: blanks separate words, '...' quotes
 * (the sequence '\'' inside is a quote). Returns the count; the words live in `store`. */
static int shell_split(const char *line, char **words, int max, char *store, size_t cap) {
    int n = 0;
    size_t k = 0;
    const char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\n' || *p == '\t') p++;
        if (!*p) break;
        ck_assert(n < max);
        words[n++] = store + k;
        while (*p && *p != ' ' && *p != '\n' && *p != '\t') {
            if (*p == '\'') {
                for (p++; *p && *p != '\''; p++) store[k++] = *p;
                ck_assert_msg(*p == '\'', "unterminated quote in: %s", line);
                p++;
            } else if (*p == '\\' && p[1]) {
                store[k++] = p[1];
                p += 2;
            } else {
                store[k++] = *p++;
            }
            ck_assert(k + 1 < cap);
        }
        store[k++] = '\0';
    }
    return n;
}

/* ---- flags --------------------------------------------------------------------------------------------------------- */

START_TEST(test_flags) {
    ck_assert_int_eq(run("speedrun", "--help", NULL), 0);
    const char *want[] = {"Usage: mptrain speedrun", "--precisions", "--seeds", "--device", "--threads", "--out",
                          "--print-recipe", "--untimed-warmup", "The recipe (--print-recipe):", "--model"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(out_buf, want[i]) != NULL, "--help lacks '%s': %s", want[i], out_buf);
    ck_assert_int_eq(run("--help", NULL), 0);
    ck_assert_msg(strstr(out_buf, "speedrun") != NULL, "mptrain --help does not list speedrun");

    EXPECT_USAGE("--lr", "--lr", "0.1");
    ck_assert_msg(strstr(out_buf, "recipe") && strstr(out_buf, "compare"), "%s", out_buf);
    EXPECT_USAGE("--model", "--model=mlp");
    EXPECT_USAGE("--epochs", "--epochs", "1");
    EXPECT_USAGE("--precisions", "--precision", "bf16"); /* pointed to --precisions */
    EXPECT_USAGE("--seeds", "--seed", "3");
    EXPECT_USAGE("--seeds", "--seeds", "0");
    EXPECT_USAGE("--seeds", "--seeds", "1,1");
    EXPECT_USAGE("--precisions", "--precisions", "fp33");
    EXPECT_USAGE("--untimed-warmup", "--untimed-warmup", "1001");
    EXPECT_USAGE("--untimed-warmup", "--untimed-warmup", "-1");
    EXPECT_USAGE("--threads", "--threads", "0");
    EXPECT_USAGE("--telemetry", "--telemetry", "5"); /* not a speedrun option */
    EXPECT_USAGE("stray", "stray");
    /* --print-recipe prints the fixed recipe and exits: another flag with it did nothing and said nothing */
    const char *out_dir = tmp_path("recipe-out");
    int rc0 = run("speedrun", "--print-recipe", "--seeds", "3", "--out", out_dir, NULL);
    ck_assert_msg(rc0 == 2 && strstr(out_buf, "mptrain speedrun: --print-recipe prints the recipe and exits, so ") &&
                      strstr(out_buf, "--seeds") && strstr(out_buf, "--out") &&
                      strstr(out_buf, "would change nothing: expected --print-recipe alone") &&
                      !strstr(out_buf, "--model"), "(%d) %s", rc0, out_buf);
    ck_assert_msg(access(out_dir, F_OK) != 0, "--print-recipe created %s", out_dir);
    rc0 = run("speedrun", "--untimed-warmup=0", "--print-recipe", NULL);
    ck_assert_msg(rc0 == 2 && strstr(out_buf, "so --untimed-warmup would change nothing"), "(%d) %s", rc0, out_buf);

    const char *missing = tmp_path("no-such-data");
    int rc = run("speedrun", "--data", missing, "--seeds", "1", "--precisions", "fp32", "--device", "cpu", "--out",
                 tmp_path("out-missing"), NULL);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, missing) != NULL, "the message does not name %s: %s", missing, out_buf);
}
END_TEST

/* ---- the runs and their report ---------------------------------------------------------------------------------- */

/* Each run's final test accuracy in % from its own summary.json. */
static double run_acc(const char *out, int seed, const char *prec) {
    char p[1024];
    snprintf(p, sizeof p, "%s/seed-%d/%s/summary.json", out, seed, prec);
    json_t *j = load_json(p);
    double a = 100.0 * jnum(j, "final_test_accuracy");
    json_decref(j);
    return a;
}

START_TEST(test_runs_and_report) {
    const char *data = write_synthetic(), *out = tmp_path("sr");
    const char *precs[2] = {"fp32", "bf16"};
    int rc = run("speedrun", "--data", data, "--seeds", "2", "--precisions", "fp32,bf16", "--device", "cpu",
                 "--cpu-kernels", "emulate", "--threads", "1", "--untimed-warmup", "3", "--progress", "off", "--out",
                 out, NULL);
    ck_assert_msg(rc == 0, "speedrun exit %d: %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "| fp32 |") && strstr(out_buf, "| bf16 |"), "no table printed: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "Not a record: these runs did not train and test on all of Fashion-MNIST"),
                  "the printed verdicts do not say that synthetic data is no record: %s", out_buf);

    /* --print-recipe: one line */
    ck_assert_int_eq(run("speedrun", "--print-recipe", NULL), 0);
    static char recipe[8192];
    ck_assert(strlen(out_buf) < sizeof recipe);
    memcpy(recipe, out_buf, strlen(out_buf) + 1);
    ck_assert_msg(strchr(recipe, '\n') == recipe + strlen(recipe) - 1, "not one line: %s", recipe);
    ck_assert_msg(strncmp(recipe, "--model ", 8) == 0, "%s", recipe);

    /* report.md */
    char p[1024];
    snprintf(p, sizeof p, "%s/report.md", out);
    const char *md = mpt_test_read_text(p);
    const char *sections[] = {"# mptrain speedrun", "## Accuracy and time to result", "## Against fp32, seed by seed",
                              "## Where the time goes", "## Every run", "## Settings", "**Not a record:**",
                              "time to result", "untimed warm-up (3 steps", "→ final evaluation (200 test images)"};
    _Static_assert(SYN_TEST == 200, "the evaluation row names the synthetic test set's size");
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        ck_assert_msg(strstr(md, sections[i]) != NULL, "report.md lacks '%s'", sections[i]);
    char line[8192];
    snprintf(line, sizeof line, "```\n%s```", recipe);
    ck_assert_msg(strstr(md, line) != NULL, "report.md lacks the recipe line %s", recipe);

    /* speedrun.json against the runs' own files */
    snprintf(p, sizeof p, "%s/speedrun.json", out);
    json_t *j = load_json(p);
    ck_assert(json_is_false(json_object_get(j, "record_data")));
    ck_assert_double_eq(jnum(j, "target_test_accuracy_pct"), 90.0);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "untimed_warmup_steps")), 3);
    char rj[8192];
    snprintf(rj, sizeof rj, "%s", recipe);
    rj[strcspn(rj, "\n")] = '\0';
    ck_assert_str_eq(json_string_value(json_object_get(j, "recipe")), rj);
    const json_t *cfg = json_object_get(j, "config");
    const int epochs = atoi(json_string_value(json_object_get(cfg, "epochs")));
    ck_assert_msg(epochs >= 1 && strstr(recipe, "--epochs ") != NULL, "epochs %d", epochs);
    char ep_opt[32];
    snprintf(ep_opt, sizeof ep_opt, "--epochs %d", epochs);
    ck_assert_msg(strstr(recipe, ep_opt) != NULL, "config's epochs %d is not the recipe's: %s", epochs, recipe);
    const json_t *proc = json_object_get(j, "process");
    const double whole = jnum(proc, "whole_s"), start = jnum(proc, "process_start_s");
    ck_assert_msg(start >= 0.0 && start < whole, "process start %g, whole %g", start, whole);
    const json_t *pa = json_object_get(j, "precisions");
    ck_assert_int_eq(json_array_size(pa), 2);
    double acc[2][2], runs_s = 0.0;
    for (int q = 0; q < 2; q++) {
        const json_t *e = json_array_get(pa, q);
        ck_assert_str_eq(json_string_value(json_object_get(e, "precision")), precs[q]);
        int at = 0;
        for (int s = 0; s < 2; s++) {
            acc[q][s] = run_acc(out, s, precs[q]);
            at += acc[q][s] >= 90.0;
        }
        /* the mean and its 95% t interval with one degree of freedom: sd = |a - b| / sqrt(2), se = |a - b| / 2 */
        const double mean = 0.5 * (acc[q][0] + acc[q][1]), half = 12.7062047362 * fabs(acc[q][0] - acc[q][1]) / 2.0;
        const json_t *iv = json_object_get(e, "test_accuracy_interval");
        ck_assert_msg(fabs(jnum(iv, "mean") - mean) < 1e-9, "%s mean %g, recomputed %g", precs[q], jnum(iv, "mean"),
                      mean);
        ck_assert_msg(fabs(jnum(iv, "ci_low") - (mean - half)) < 1e-6 && fabs(jnum(iv, "ci_high") - (mean + half)) < 1e-6,
                      "%s interval [%g, %g], recomputed [%g, %g]", precs[q], jnum(iv, "ci_low"), jnum(iv, "ci_high"),
                      mean - half, mean + half);
        ck_assert_int_eq(json_integer_value(json_object_get(e, "seeds_at_target")), at);
        ck_assert(fabs(jnum(e, "share_at_target") - at / 2.0) < 1e-12);
        ck_assert(json_is_true(json_object_get(e, "reaches_target_mean")) == (mean >= 90.0));
        /* report.md's sentence and the table's "reaches" cell say which side of the target the mean and the interval
         * lie on (here the seeds end far apart, so the interval straddles 90% whatever the mean) */
        const double lo = mean - half, hi = mean + half;
        char said[96], row[32];
        snprintf(said, sizeof said, "- %s %s", precs[q],
                 mean >= 90.0 && lo >= 90.0 ? "reaches 90.0%: mean"
                 : mean >= 90.0             ? "reaches 90.0% on the mean"
                 : hi >= 90.0               ? "misses 90.0% on the mean"
                                            : "misses 90.0%: mean");
        ck_assert_msg(strstr(md, said) != NULL, "report.md lacks '%s' (mean %g, [%g, %g])", said, mean, lo, hi);
        snprintf(row, sizeof row, "\n| %s | ", precs[q]);
        const char *r0 = strstr(strstr(md, "## Accuracy and time to result"), row), *r1 = r0 ? strchr(r0 + 1, '\n') : NULL;
        ck_assert(r0 != NULL && r1 != NULL);
        const char *word = mean < 90.0 ? "| **no** |" : lo >= 90.0 ? "| yes (whole interval) |" : "| yes (mean; interval reaches below) |";
        const char *w = strstr(r0, word);
        ck_assert_msg(w != NULL && w < r1, "%s's row lacks '%s'", precs[q], word);
        const json_t *runs = json_object_get(e, "runs");
        ck_assert_int_eq(json_array_size(runs), 2);
        for (int s = 0; s < 2; s++) {
            const json_t *r = json_array_get(runs, s);
            ck_assert_int_eq(json_integer_value(json_object_get(r, "seed")), s);
            const json_t *t = json_object_get(r, "timing");
            const json_t *ep = json_object_get(r, "epoch_times_s");
            ck_assert_int_eq((int)json_array_size(ep), epochs);
            double train = 0.0;
            for (int k = 0; k < epochs; k++) train += json_number_value(json_array_get(ep, k));
            const double result = jnum(t, "time_to_result_s"), eval = jnum(t, "final_eval_s");
            ck_assert_msg(result >= train + eval - 1e-6, "time to result %g < epochs %g + evaluation %g", result,
                          train, eval);
            ck_assert(jnum(t, "time_to_result_cpu_s") > 0.0);
            ck_assert_int_eq(json_integer_value(json_object_get(t, "untimed_warmup_steps")), 3);
            ck_assert(jnum(t, "untimed_warmup_s") > 0.0);
            ck_assert_msg(jnum(t, "run_s") >= result + jnum(t, "untimed_warmup_s") + jnum(t, "graph_build_s") - 1e-6,
                          "a run's time holds less than its parts");
            runs_s += jnum(t, "run_s");
        }
    }
    ck_assert_msg(whole >= runs_s, "whole process %g s < its runs' %g s", whole, runs_s);
    ck_assert(json_is_null(json_object_get(json_array_get(pa, 0), "vs_fp32")));
    const json_t *vs = json_object_get(json_object_get(json_array_get(pa, 1), "vs_fp32"), "test_accuracy_pp");
    const double d = 0.5 * ((acc[1][0] - acc[0][0]) + (acc[1][1] - acc[0][1]));
    ck_assert_msg(fabs(jnum(vs, "mean") - d) < 1e-9, "paired mean %g, recomputed %g", jnum(vs, "mean"), d);
    json_decref(j);

    /* epochs.csv: a row per epoch; the last has the run's accuracy */
    snprintf(p, sizeof p, "%s/seed-0/fp32/epochs.csv", out);
    char *csv = mpt_test_read_text(p), *save = NULL, *last = NULL;
    char *header = strtok_r(csv, "\n", &save);
    ck_assert_msg(header && strstr(header, "test_loss,test_acc") != NULL, "%s", header ? header : "(empty)");
    int rows = 0;
    for (char *row; (row = strtok_r(NULL, "\n", &save)) != NULL; rows++) last = row;
    ck_assert_int_eq(rows, epochs);
    for (int c = 0; c < 4; c++) last = strchr(last, ',') + 1; /* epoch,step,train_loss,test_loss, */
    ck_assert_msg(fabs(100.0 * strtod(last, NULL) - acc[0][0]) < 1e-6, "the last epoch's test_acc %s, summary %g", last,
                  acc[0][0]);

    /* the printed recipe, given to train with seed 1 in bf16, trains the speedrun's run of seed 1 in bf16 bit for bit
     * (that run had 3 warm-up steps and one evaluation; this one neither) */
    char *words[64], store[8192];
    int nw = shell_split(recipe, words, 64, store, sizeof store);
    ck_assert_msg(nw >= 4, "%d words in %s", nw, recipe);
    char *args[MAX_ARGS];
    int n = 0;
    args[n++] = (char *)"mptrain";
    args[n++] = (char *)"train";
    for (int i = 0; i < nw; i++) args[n++] = words[i];
    const char *tail[] = {"--precision", "bf16", "--seed", "1", "--cpu-kernels", "emulate", "--data", data,
                          "--threads", "1", "--progress", "off", "--out", tmp_path("train-bf16-1")};
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) args[n++] = (char *)tail[i];
    args[n] = NULL;
    rc = run_argv(args);
    ck_assert_msg(rc == 0, "train with the recipe's options: exit %d: %s", rc, out_buf);
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/seed-1/bf16/checkpoint.safetensors", out);
    snprintf(b, sizeof b, "%s/checkpoint.safetensors", tmp_path("train-bf16-1"));
    assert_same_tensors(a, b, 0);
}
END_TEST

/* A test set whose best possible accuracy is exactly the target: ten test images, one labelled against its picture,
 * so a network that learns the pictures scores 9 of 10 = 90.00%, and the target (>= 90.0%) is met at its boundary. The
 * pictures are trivial (class k: rows 2k + 2 and 2k + 3 lit), so the recipe's one epoch learns them. The contract
 * (tools/speedrun.h, docs/speedrun.md): a seed at or above the target counts, the mean reaches it, and an interval of
 * zero width at 90.00 lies wholly at or above it. */
static const char *write_at_target_data(void) {
    const char *dir = tmp_path("at-target");
    ck_assert(mkdir(dir, 0755) == 0);
    enum { N_TRAIN = 3200, N_TEST = 10, SIDE = 28 };
    mpt_mnist d = {.n_train = N_TRAIN, .n_test = N_TEST, .rows = SIDE, .cols = SIDE, .channels = 1,
                   .dim = SIDE * SIDE, .n_classes = 10};
    d.train_images = calloc((size_t)N_TRAIN * SIDE * SIDE, 1), d.train_labels = malloc(N_TRAIN);
    d.test_images = calloc((size_t)N_TEST * SIDE * SIDE, 1), d.test_labels = malloc(N_TEST);
    ck_assert(d.train_images && d.train_labels && d.test_images && d.test_labels);
    for (int i = 0; i < N_TRAIN + N_TEST; i++) {
        const int k = i % 10;
        uint8_t *img = i < N_TRAIN ? d.train_images + (size_t)i * SIDE * SIDE
                                   : d.test_images + (size_t)(i - N_TRAIN) * SIDE * SIDE;
        for (int r = 2 + 2 * k; r < 4 + 2 * k; r++) memset(img + r * SIDE + 4, 255, 20);
        if (i < N_TRAIN) d.train_labels[i] = (uint8_t)k;
        else d.test_labels[i - N_TRAIN] = (uint8_t)(i - N_TRAIN == 3 ? 7 : k); /* image 3 shows a 3, labelled 7 */
    }
    ck_assert_msg(mpt_mnist_save(dir, &d, 0) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&d);
    return dir;
}

START_TEST(test_exactly_at_target) {
    const char *data = write_at_target_data(), *out = tmp_path("sr-at");
    int rc = run("speedrun", "--data", data, "--seeds", "2", "--precisions", "fp32", "--device", "cpu",
                 "--cpu-kernels", "emulate", "--threads", "1", "--untimed-warmup", "1", "--progress", "off", "--out",
                 out, NULL);
    ck_assert_msg(rc == 0, "speedrun exit %d: %s", rc, out_buf);
    for (int s = 0; s < 2; s++) /* the precondition: both runs learned the pictures, so each scored exactly 9 of 10 */
        ck_assert_msg(run_acc(out, s, "fp32") == 90.0, "seed %d scored %.2f%%, not 9 of 10: the trivial pictures were "
                      "not learned, so this test checks nothing", s, run_acc(out, s, "fp32"));
    char p[1024];
    snprintf(p, sizeof p, "%s/speedrun.json", out);
    json_t *j = load_json(p);
    const json_t *e = json_array_get(json_object_get(j, "precisions"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "seeds_at_target")), 2);
    ck_assert(jnum(e, "share_at_target") == 1.0);
    ck_assert(json_is_true(json_object_get(e, "reaches_target_mean")));
    ck_assert(json_is_true(json_object_get(e, "reaches_target_interval")));
    const json_t *iv = json_object_get(e, "test_accuracy_interval");
    ck_assert_msg(jnum(iv, "ci_low") == 90.0 && jnum(iv, "ci_high") == 90.0, "interval [%g, %g] of two 90.00%% seeds",
                  jnum(iv, "ci_low"), jnum(iv, "ci_high"));
    json_decref(j);
    snprintf(p, sizeof p, "%s/report.md", out);
    const char *md = mpt_test_read_text(p);
    const char *said = "- fp32 reaches 90.0%: mean 90.00% over 2 seeds, and its whole 95% interval [90.00, 90.00] lies "
                       "at or above the target; 2 of 2 seeds reached it.";
    ck_assert_msg(strstr(md, said) != NULL, "report.md lacks '%s'", said);
    ck_assert_msg(strstr(md, "| 2 of 2 | yes (whole interval) |") != NULL, "the table's row lacks '| 2 of 2 | yes "
                  "(whole interval) |'");
}
END_TEST

static Suite *speedrun_suite(void) {
    Suite *s = suite_create("speedrun");
    TCase *tc = tcase_create("speedrun");
    tcase_set_timeout(tc, 280);
    tcase_add_checked_fixture(tc, make_tmpdir, rm_tmpdir);
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_runs_and_report);
    tcase_add_test(tc, test_exactly_at_target);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run_msg(speedrun_suite(), sizeof out_buf + MPT_TEST_MSG_MARGIN); }
