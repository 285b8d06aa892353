/*
 * tests/test_train_fmnist.c - suite 'train': real training on Fashion-MNIST through the mptrain command.
 *
 * For each precision (fp32, tf32, fp16, bf16, and the FP8 modes fp8, fp8-e4m3, mxfp8, whose fc1 and fc2 run as FP8
 * GEMMs): the PyTorch-quickstart MLP (784-512-512-10), Adam lr 1e-3, batch 128, one epoch over the 60000 training
 * images, must reach more than 80% accuracy on the 10000 test images. (For scale: PyTorch's quickstart tutorial reaches ~65% after 5 epochs of plain SGD at lr 1e-3; Adam
 * gets an MLP to ~83-85% after one epoch; a linear classifier reaches ~84% after many.) The bound is the
 * same for every precision: the point of mixed precision with FP32 masters is that it costs no accuracy.
 * fp16 runs with the dynamic loss scaler: it must end with a finite scale >= 1 and skip at most a handful of
 * steps (each skip halves the scale from 2^16; more than 10 would mean gradients overflow persistently).
 *
 * And the safeguard of FP32 master weights made visible (issue #10): bf16 without masters, SGD at a small
 * learning rate, against the same run with masters and with stochastic rounding
 * (test_bf16_without_masters_loses_updates, with its measured numbers).
 *
 * Skipped (exit 77) when the dataset is not installed (Debian: dataset-fashion-mnist). The device is the CPU
 * unless MPT_TEST_DEVICE says otherwise (auto, cuda).
 */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/amp/policy.h"
#include "harness.h"
#include "mpt_config.h"

static char tmpdir[256];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* Runs `mptrain train --model mlp --epochs 1` for one precision into `out`, with up to 16 more arguments
 * (NULL-terminated `extra`); returns the exit status. */
static int train_with(const char *precision, const char *out, const char *const *extra) {
    char exe[1024];
    const char *root = getenv("MPT_BUILD_ROOT");
    snprintf(exe, sizeof exe, "%s/tools/mptrain", root ? root : ".");
    const char *device = getenv("MPT_TEST_DEVICE") ? getenv("MPT_TEST_DEVICE") : "cpu";
    const char *argv[40] = {"mptrain", "train", "--model", "mlp", "--precision", precision, "--epochs", "1",
                            "--device", device, "--data", MPT_DEFAULT_DATA_DIR, "--out", out, "--progress", "off"};
    int n = 16;
    for (int i = 0; extra && extra[i] && i < 16; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        execv(exe, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    int status = 0;
    ck_assert(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int train(const char *precision, const char *out) { return train_with(precision, out, NULL); }

/* A number from out/summary.json. */
static double summary_number(const char *out, const char *key) {
    char path[600];
    snprintf(path, sizeof path, "%s/summary.json", out);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", path, err.text);
    json_t *v = json_object_get(j, key);
    ck_assert_msg(v && json_is_number(v), "%s: no number \"%s\"", path, key);
    double x = json_number_value(v);
    json_decref(j);
    return x;
}

START_TEST(test_one_epoch) {
    const char *precision = mpt_precision_name((mpt_precision)_i);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mpt_test_fmnist_XXXXXX");
    ck_assert(mkdtemp(tmpdir) != NULL);
    char out[512];
    snprintf(out, sizeof out, "%s/%s", tmpdir, precision);
    int rc = train(precision, out);
    ck_assert_msg(rc == 0, "mptrain train --precision %s exited with %d", precision, rc);

    char path[600];
    snprintf(path, sizeof path, "%s/summary.json", out);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", path, err.text);
    double acc = json_number_value(json_object_get(j, "final_test_accuracy"));
    double scale = json_number_value(json_object_get(j, "final_loss_scale"));
    json_int_t skipped = json_integer_value(json_object_get(j, "steps_skipped"));
    json_int_t steps = json_integer_value(json_object_get(j, "steps"));
    printf("%s: test accuracy %.4f after 1 epoch (%lld steps, %lld skipped, final loss scale %g)\n", precision, acc,
           (long long)steps, (long long)skipped, scale);
    json_decref(j);
    ck_assert_int_eq(steps, 469); /* ceil(60000 / 128) */
    ck_assert_msg(acc > 0.80, "%s: test accuracy %.4f after one epoch, expected > 0.80", precision, acc);
    if (_i == MPT_PRECISION_FP16) {
        ck_assert_msg(isfinite(scale) && scale >= 1.0, "fp16: final loss scale %g", scale);
        ck_assert_msg(skipped <= 10, "fp16: %lld skipped steps", (long long)skipped);
    } else {
        ck_assert_msg(scale == 1.0 && skipped == 0, "%s: loss scale %g, %lld skipped (no scaling expected)", precision,
                      scale, (long long)skipped);
    }
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

/* Claim 2 of issue #10: bf16 weights without FP32 masters lose the small updates of SGD at a small learning
 * rate (each update below half a BF16 ulp of its weight rounds away), so the same run reaches a clearly lower
 * accuracy than with masters; stochastic rounding keeps those updates in expectation and recovers most of it.
 * Thresholds from a measured run (CPU, 1 OpenBLAS thread, 2026-11-23):
 *   mptrain train --model mlp --precision bf16 --optimizer sgd --lr 0.01 --epochs 1 --limit-train 30000
 *       --limit-test 5000 --seed 0 --master-weights fp32 | none | none --update-rounding stochastic
 *   -> test accuracy 57.92% (masters), 31.18% (none, nearest), 58.14% (none, stochastic); ~2.5 s each.
 * The bounds: masters above 50%; without masters at least 15 points lower (measured: 26.7); stochastic
 * rounding recovers at least 80% of the gap (measured: 101%). */
START_TEST(test_bf16_without_masters_loses_updates) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mpt_test_fmnist_XXXXXX");
    ck_assert(mkdtemp(tmpdir) != NULL);
    static const char *const variants[3][4] = {
        {"--master-weights", "fp32", NULL, NULL},
        {"--master-weights", "none", NULL, NULL},
        {"--master-weights", "none", "--update-rounding", "stochastic"},
    };
    static const char *const names[3] = {"masters", "none", "stochastic"};
    double acc[3];
    for (int k = 0; k < 3; k++) {
        const char *extra[12] = {"--optimizer", "sgd", "--lr", "0.01", "--limit-train", "30000", "--limit-test",
                                 "5000", variants[k][0], variants[k][1], variants[k][2], variants[k][3]};
        const char *args[13];
        for (int i = 0; i < 12; i++) args[i] = extra[i];
        args[12] = NULL;
        char out[512];
        snprintf(out, sizeof out, "%s/%s", tmpdir, names[k]);
        int rc = train_with("bf16", out, args);
        ck_assert_msg(rc == 0, "mptrain train (bf16, %s) exited with %d", names[k], rc);
        acc[k] = summary_number(out, "final_test_accuracy");
    }
    printf("bf16, SGD lr 0.01, 30000 images: test accuracy %.4f with FP32 masters, %.4f without (nearest), "
           "%.4f without (stochastic rounding)\n",
           acc[0], acc[1], acc[2]);
    ck_assert_msg(acc[0] > 0.50, "with masters: accuracy %.4f, expected > 0.50", acc[0]);
    ck_assert_msg(acc[1] < acc[0] - 0.15, "without masters: accuracy %.4f, expected 15 points below %.4f", acc[1],
                  acc[0]);
    ck_assert_msg(acc[2] >= acc[1] + 0.8 * (acc[0] - acc[1]),
                  "stochastic rounding: accuracy %.4f recovers less than 80%% of the gap %.4f -> %.4f", acc[2],
                  acc[1], acc[0]);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

int main(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", MPT_DEFAULT_DATA_DIR);
    char q[512];
    snprintf(q, sizeof q, "%s/train-images-idx3-ubyte", MPT_DEFAULT_DATA_DIR);
    if (access(p, R_OK) != 0 && access(q, R_OK) != 0) {
        printf("test_train_fmnist: skipped: Fashion-MNIST is not in %s (apt-get install dataset-fashion-mnist)\n",
               MPT_DEFAULT_DATA_DIR);
        return 77;
    }
    Suite *s = suite_create("train_fmnist");
    TCase *tc = tcase_create("one_epoch");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_one_epoch, 0, MPT_PRECISION_COUNT);
    tcase_add_test(tc, test_bf16_without_masters_loses_updates);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
