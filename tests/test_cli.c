/*
 * tests/test_cli.c - the mptrain command, run as a user runs it: the built binary ($MPT_BUILD_ROOT/tools/mptrain)
 * through fork/exec, its exit status and its output captured.
 *
 *  - flags: unknown flags, malformed and out-of-range numbers, bad names, missing values and stray
 *    arguments are rejected with exit status 2 and a message that names the flag; --help works everywhere;
 *  - train on a synthetic dataset (datasets/synthetic.h, written as IDX files into a temporary directory, so
 *    this runs without Fashion-MNIST): every output exists; metrics.csv and epochs.csv have the rows the
 *    step count implies; summary.json parses (jansson) with the documented keys; the checkpoint loads
 *    (engine/checkpoint.h) with FP32 masters of the model's shapes; and the reported test accuracy and loss
 *    agree with an independent FP64 forward pass of the MLP, written here, on the checkpoint's weights;
 *  - each model (mlp, lenet5, cnn) trains and checkpoints exactly its reference architecture's parameters;
 *  - eval on that checkpoint prints the same test accuracy as training reported;
 *  - resume is bit-exact: N steps straight and N/2 + save + resume + N/2 give the same tensor bytes and the
 *    same logged losses (fp16 with a fault-injected skipped step after the resume point, so the loss
 *    scaler's state crosses the checkpoint; and bf16 cnn with dropout and SGD momentum); a resumed run
 *    rejects a flag that would change its math;
 *  - compare (fp32, fp16, bf16 on the synthetic data): every run's outputs, report.md, a PNG plot (or a message
 *    naming gnuplot when it is missing), and the relative L2 column recomputed in FP64 from the checkpoints;
 *    numerics.png still drawn when a series has no point, and a reason instead of a picture with no telemetry;
 *  - the same short train/eval on a few hundred real Fashion-MNIST images (skipped with a message when the
 *    dataset is not installed);
 *  - --accum-model h100 (issue 39): trains in every precision and every model, says what it does, records the model
 *    (summary.json: config, accum_model, each GEMM node's "accum" and kernels; the checkpoint's config, which leaves
 *    it out at ieee), changes the weights of a bf16 run and not those of an fp32 run, resumes bit-exactly, refuses a
 *    changed model on resume, and eval of its checkpoint reproduces the run's accuracy.
 */
#include <errno.h>
#include <ftw.h>
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
#include "engine/telemetry/telemetry.h"
#include "harness.h"
#include "same_tensors.h"
#define TESTS_TMP_PREFIX "mpt_test_cli"
#include "tmpdir.h"
#include "mpt_config.h"

/* ---- running the binary ----------------------------------------------------------------------------------- */

#define TESTS_OUT_BUF (1 << 16)
#include "run_capture.h"
#define MAX_ARGS TESTS_MAX_ARGS

/* ---- temporary files ------------------------------------------------------------------------------------------ */


static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

/* Lines of a text file (malloc'd array of malloc'd strings without the newline). */
static char **read_lines(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    char **lines = NULL;
    int cnt = 0, cap = 0;
    char buf[4096];
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        if (cnt == cap) {
            cap = cap ? 2 * cap : 64;
            lines = realloc(lines, (size_t)cap * sizeof *lines);
        }
        lines[cnt++] = strdup(buf);
    }
    fclose(f);
    *n = cnt;
    return lines;
}

static void free_lines(char **l, int n) {
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

/* ---- the synthetic dataset ------------------------------------------------------------------------------------ */

#define SYN_TRAIN 600
#define SYN_TEST 300

/* Writes a 28x28 synthetic dataset (gzip-compressed IDX) into tmpdir/data and returns the directory. */
static const char *write_synthetic(mpt_mnist *keep) {
    const char *dir = tmp_path("data");
    ck_assert(mkdir(dir, 0755) == 0);
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, SYN_TRAIN, SYN_TEST, 784, 10, 42), MPT_OK);
    ck_assert_msg(mpt_mnist_save(dir, &d, 1) == MPT_OK, "%s", mpt_last_error());
    if (keep)
        *keep = d;
    else
        mpt_mnist_free(&d);
    return dir;
}

/* ---- flags ------------------------------------------------------------------------------------------------------ */

START_TEST(test_help) {
    ck_assert_int_eq(run("--help", NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_buf, "compare"));
    const char *cmds[] = {"train", "compare", "eval", "info"};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(run(cmds[i], "--help", NULL), 0);
        ck_assert_msg(strstr(out_buf, "Usage: mptrain") != NULL, "%s --help: %s", cmds[i], out_buf);
    }
    ck_assert_int_eq(run("train", "--help", NULL), 0);
    const char *flags[] = {"--model", "--precision", "--optimizer", "--lr", "--momentum", "--weight-decay", "--epochs",
                           "--batch-size", "--seed", "--device", "--data", "--out", "--loss-scale", "--resume"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        ck_assert_msg(strstr(out_buf, flags[i]) != NULL, "train --help lacks %s", flags[i]);
    ck_assert_int_eq(run("compare", "--help", NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_buf, "--precisions"));
    ck_assert_int_eq(run(NULL), 2); /* no command */
    ck_assert_int_eq(run("--version", NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_buf, MPT_VERSION));
}
END_TEST

/* The line of `cmd --help` that describes option `opt` ("--seeds"), copied into line ("" if none). */
static const char *help_line(const char *cmd, const char *opt, char *line, size_t len) {
    ck_assert_int_eq(run(cmd, "--help", NULL), 0);
    char head[64];
    snprintf(head, sizeof head, "\n  %s ", opt);
    const char *p = strstr(out_buf, head);
    line[0] = '\0';
    if (p) {
        size_t n = strcspn(p + 1, "\n");
        if (n >= len) n = len - 1;
        memcpy(line, p + 1, n);
        line[n] = '\0';
    }
    return line;
}

/* Each command's --help names its own default for an option several commands share, never another command's: the
 * defaults as the commands apply them (speedrun trains seeds 0..9 and has no --seed; compare measures telemetry every
 * 50 steps; eval takes the batch size and kernel set from the checkpoint; each command's own --out). */
START_TEST(test_help_defaults_per_command) {
    char l[1024];
    help_line("speedrun", "--seeds", l, sizeof l);
    ck_assert_msg(strstr(l, "default 10") && !strstr(l, "--seed)") && !strstr(l, "one seed"), "%s", l);
    help_line("compare", "--seeds", l, sizeof l);
    ck_assert_msg(strstr(l, "default: one seed, --seed") && !strstr(l, "speedrun") && !strstr(l, "10"), "%s", l);
    help_line("speedrun", "--out", l, sizeof l);
    ck_assert_msg(strstr(l, "default runs/speedrun") && !strstr(l, "<model>"), "%s", l);
    help_line("compare", "--out", l, sizeof l);
    ck_assert_msg(strstr(l, "default runs/compare-<model>") && !strstr(l, "<precision>") && !strstr(l, "speedrun"), "%s",
                  l);
    help_line("train", "--out", l, sizeof l);
    ck_assert_msg(strstr(l, "default runs/<model>-<precision>") && !strstr(l, "compare") && !strstr(l, "speedrun"), "%s",
                  l);
    help_line("train", "--batch-size", l, sizeof l);
    ck_assert_msg(strstr(l, "default 128") && !strstr(l, "eval") && !strstr(l, "checkpoint"), "%s", l);
    help_line("eval", "--batch-size", l, sizeof l);
    ck_assert_msg(strstr(l, "the checkpoint's") && !strstr(l, "128"), "%s", l);
    help_line("train", "--cpu-kernels", l, sizeof l);
    ck_assert_msg(strstr(l, "default emulate;") && !strstr(l, "compare") && !strstr(l, "speedrun"), "%s", l);
    help_line("compare", "--cpu-kernels", l, sizeof l);
    ck_assert_msg(strstr(l, "default auto;") && !strstr(l, "emulate for train") && !strstr(l, "default emulate"), "%s", l);
    help_line("speedrun", "--cpu-kernels", l, sizeof l);
    ck_assert_msg(strstr(l, "default auto;"), "%s", l);
    help_line("eval", "--cpu-kernels", l, sizeof l);
    ck_assert_msg(strstr(l, "the set the checkpoint trained with") && !strstr(l, "default emulate"), "%s", l);
    help_line("compare", "--telemetry", l, sizeof l);
    ck_assert_msg(strstr(l, "default 50") && !strstr(l, "default 0"), "%s", l);
    help_line("train", "--telemetry", l, sizeof l);
    ck_assert_msg(strstr(l, "default 0 = off") && !strstr(l, "compare") && !strstr(l, "50"), "%s", l);
    /* no option line of any command names another command's default ("; speedrun: 10", "eval: the checkpoint's") */
    const char *cmds[] = {"train", "compare", "eval", "speedrun"};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(run(cmds[i], "--help", NULL), 0);
        const char *opts = strstr(out_buf, "\nOptions:\n");
        ck_assert_ptr_nonnull(opts);
        const char *end = strstr(opts + 1, "\n\n");
        for (int j = 0; j < 4; j++) {
            if (j == i) continue;
            char other[32];
            snprintf(other, sizeof other, "; %s:", cmds[j]);
            const char *hit = strstr(opts, other);
            ck_assert_msg(!hit || (end && hit > end), "%s --help names %s's default: %.200s", cmds[i], cmds[j], hit);
            snprintf(other, sizeof other, " for %s", cmds[j]);
            hit = strstr(opts, other);
            ck_assert_msg(!hit || (end && hit > end), "%s --help names %s's default: %.200s", cmds[i], cmds[j], hit);
        }
    }
}
END_TEST

typedef struct bad_case {
    const char *args[6];
    const char *must_name; /* text the message must contain (the flag) */
} bad_case;

static const bad_case bad_cases[] = {
    {{"train", "--bogus"}, "--bogus"},
    {{"train", "--lr", "abc"}, "--lr"},
    {{"train", "--lr", "-0.1"}, "--lr"},
    {{"train", "--lr", "nan"}, "--lr"},
    {{"train", "--lr", "1e999"}, "--lr"},
    {{"train", "--lr", ""}, "--lr"},
    {{"train", "--epochs", "3x"}, "--epochs"},
    {{"train", "--epochs", "0"}, "--epochs"},
    {{"train", "--epochs", " 3"}, "--epochs"},
    {{"train", "--batch-size", "12.5"}, "--batch-size"},
    {{"train", "--batch-size", "99999999999999999999"}, "--batch-size"},
    {{"train", "--seed", "-1"}, "--seed"},
    {{"train", "--momentum", "1"}, "--momentum"},
    {{"train", "--precision", "fp4"}, "--precision"},
    {{"train", "--precision", "FP16"}, "--precision"},
    {{"train", "--model", "resnet50"}, "--model"},
    {{"train", "--optimizer", "lamb"}, "--optimizer"},
    {{"train", "--device", "tpu"}, "--device"},
    {{"train", "--loss-scale", "static"}, "--loss-scale"},
    {{"train", "--loss-scale", "static:0"}, "--loss-scale"},
    {{"train", "--loss-scale", "dynamic:abc"}, "--loss-scale"},
    {{"train", "--lr-schedule", "linear"}, "--lr-schedule"},
    {{"train", "--val-split", "1"}, "--val-split"},
    {{"train", "--threads", "0"}, "--threads"},
    {{"train", "--lr"}, "--lr"},                      /* missing value */
    {{"train", "--lr", "--epochs", "3"}, "--lr"},     /* a flag where a value belongs */
    {{"train", "--standardize=yes"}, "--standardize"},
    {{"train", "stray"}, "stray"},
    {{"train", "--nesterov"}, "--nesterov"},
    {{"train", "--shadow"}, "--telemetry"},           /* the twin runs on telemetry steps */
    {{"train", "--telemetry", "-1"}, "--telemetry"},
    {{"compare", "--telemetry", "0", "--shadow"}, "--telemetry"},
    {{"compare", "--precisions", "fp32,fp64"}, "--precisions"},
    {{"compare", "--precisions", "fp16,fp16"}, "--precisions"},
    {{"compare", "--precisions", ""}, "--precisions"},
    {{"compare", "--resume", "x"}, "--resume"},
    {{"compare", "--seeds", "0"}, "--seeds"},
    {{"compare", "--seeds", "65"}, "--seeds"},
    {{"compare", "--seeds", "1,1"}, "--seeds"},
    {{"compare", "--seeds", "1,"}, "--seeds"},
    {{"compare", "--seeds", "1,-2"}, "--seeds"},
    {{"compare", "--seeds", "3", "--seed", "1"}, "--seeds"},
    {{"compare", "--seeds", "3", "--margin", "0"}, "--margin"},
    {{"compare", "--margin", "0.5"}, "--margin"}, /* a margin without seeds */
    {{"train", "--seeds", "3"}, "--seeds"},
    {{"eval", "--lr", "1"}, "--lr"},
    {{"eval"}, "--checkpoint"},
    {{"info", "--model", "mlp"}, "--model"},
    {{"train", "--model", "conv(6,5,pa=2)"}, "--model"},
    {{"train", "--model", "linear,relu,linear"}, "--model"},
    {{"train", "--classes", "1"}, "--classes"},
    {{"train", "--classes", "257"}, "--classes"},
    {{"train", "--data-layout", "chw"}, "--data-layout"},
    {{"frobnicate"}, "frobnicate"},
    {{"train", "--master-weights", "fp16"}, "--master-weights"},
    {{"train", "--update-rounding", "up"}, "--update-rounding"},
    {{"train", "--update-rounding", "stochastic"}, "--update-rounding"}, /* needs --master-weights none */
    {{"train", "--optimizer-state", "int8"}, "--optimizer-state"},
    {{"train", "--nonfinite", "ignore"}, "--nonfinite"},
    {{"train", "--nonfinite", "apply", "--loss-scale", "dynamic"}, "--nonfinite"}, /* dynamic scaling must skip */
    {{"train", "--precision", "fp8-e5m2"}, "--precision"},
    {{"train", "--fp8-scaling", "lazy"}, "--fp8-scaling"},
    {{"train", "--amax-history", "0"}, "--amax-history"},
    {{"train", "--fp8-margin", "33"}, "--fp8-margin"},
    {{"train", "--fp8-pow2-scales", "yes"}, "--fp8-pow2-scales"},
    {{"train", "--mx-scale", "round"}, "--mx-scale"},
    {{"train", "--fp8-accum", "fp16"}, "--fp8-accum"},
    {{"train", "--fp8-promote", "100"}, "--fp8-promote"},                 /* not whole blocks of 32 */
    {{"train", "--fp8-promote", "128"}, "--fp8-promote"},                 /* needs --fp8-accum fast */
    {{"train", "--precision", "mxfp8", "--fp8-accum", "fast"}, "--fp8-accum"}, /* no MX model */
    {{"train", "--fp8-saturate", "maybe"}, "--fp8-saturate"},
    {{"train", "--tf32-matmul", "yes"}, "--tf32-matmul"},
    {{"train", "--tf32-conv", "1"}, "--tf32-conv"},
    {{"train", "--scaler", "mxnet"}, "--scaler"},
    {{"train", "--growth-factor", "0.5"}, "--growth-factor"},
    {{"train", "--backoff-factor", "0"}, "--backoff-factor"},
    {{"train", "--hysteresis", "0"}, "--hysteresis"},
    {{"train", "--scale-floor", "0"}, "--scale-floor"},
    {{"train", "--scale-floor", "8", "--scale-ceiling", "4"}, "--scale-ceiling"},
    {{"compare", "--update-rounding", "stochastic"}, "--update-rounding"},
    {{"train", "--cuda-graph", "yes"}, "--cuda-graph"},
    {{"train", "--cpu-kernels", "fast"}, "--cpu-kernels"},
    {{"train", "--accum-model", "h200"}, "--accum-model"},                             /* h100's row models it */
    {{"train", "--accum-model", "v100", "--precision", "bf16"}, "--accum-model"},      /* Volta: FP16 only */
    {{"train", "--accum-model", "v100", "--precision", "tf32"}, "--accum-model"},
    {{"train", "--accum-model", "h100", "--cpu-kernels", "native"}, "--accum-model"},  /* its own sums */
    {{"train", "--norm-stats", "bf8"}, "--norm-stats"},
    {{"train", "--norm-stats", "onepass"}, "--norm-stats"},
};

START_TEST(test_bad_flags) {
    const bad_case *c = &bad_cases[_i];
    char *args[8];
    int n = 0;
    args[n++] = (char *)"mptrain";
    for (int k = 0; k < 6 && c->args[k]; k++) args[n++] = (char *)c->args[k];
    args[n] = NULL;
    int rc = run_argv(args);
    ck_assert_msg(rc == 2, "mptrain %s %s %s: exit %d (expected 2): %s", c->args[0], c->args[1] ? c->args[1] : "",
                  c->args[2] ? c->args[2] : "", rc, out_buf);
    ck_assert_msg(strstr(out_buf, c->must_name) != NULL, "message does not name %s: %s", c->must_name, out_buf);
    ck_assert_msg(strstr(out_buf, "mptrain") != NULL, "message does not say who speaks: %s", out_buf);
}
END_TEST

START_TEST(test_missing_data_dir) {
    make_tmpdir();
    int rc = run("train", "--data", tmp_path("nope"), "--out", tmp_path("out"), "--device", "cpu", NULL);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out_buf, "nope") != NULL, "message does not name the directory: %s", out_buf);
    rm_tmpdir();
}
END_TEST

START_TEST(test_info) {
    ck_assert_int_eq(run("info", NULL), 0);
    const char *want[] = {"backends:", "cpu   built: yes", "cuda  built:", "loadable:", "usable:", "OpenBLAS",
                          "NVIDIA_TF32_OVERRIDE"};
    for (int i = 0; i < 7; i++) ck_assert_msg(strstr(out_buf, want[i]) != NULL, "info lacks %s: %s", want[i], out_buf);
    /* the CPU kernel sets: the features that decide native math, the engine, each set available or why not */
    const char *cpu[] = {"CPU kernels (--cpu-kernels):", "avx512_bf16 ", "amx_bf16 ", "avx512_fp16 ", "GEMM engine",
                         "emulate             available", "native              ",
                         /* each command's default set, not one "default" for all (compare and speedrun: auto) */
                         "default set         train: emulate; compare, speedrun: auto",
                         "eval: the set the checkpoint trained with"};
    for (int i = 0; i < 9; i++) ck_assert_msg(strstr(out_buf, cpu[i]) != NULL, "info lacks %s: %s", cpu[i], out_buf);
    ck_assert_msg(!strstr(out_buf, "emulate (default)"), "info names one default for every command: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "OpenMP waiting      "), "info does not say how OpenMP threads wait: %s", out_buf);
    /* the user's GOMP_SPINCOUNT wins over mptrain's choice, and info says where it came from */
    const char *had_policy = getenv("OMP_WAIT_POLICY");
    char *saved = had_policy ? strdup(had_policy) : NULL;
    unsetenv("OMP_WAIT_POLICY");
    setenv("GOMP_SPINCOUNT", "1234", 1);
    ck_assert_int_eq(run("info", NULL), 0);
    unsetenv("GOMP_SPINCOUNT");
    if (saved) setenv("OMP_WAIT_POLICY", saved, 1);
    free(saved);
    ck_assert_msg(strstr(out_buf, "OpenMP waiting      GOMP_SPINCOUNT=1234 (spin that many rounds, then sleep) (from "
                                  "the environment)"), "info does not keep the user's GOMP_SPINCOUNT: %s", out_buf);
    char why[256];
    const int native = mpt_cpu_native_available(why, sizeof why);
    ck_assert_msg(strstr(out_buf, native ? "native              available" : why) != NULL,
                  "info does not say whether native is available (%d, %s): %s", native, why, out_buf);
#ifdef MPT_HAVE_MPI /* the MPI library loaded at run time, or how to get one */
    ck_assert_msg(strstr(out_buf, "  MPI                 Open MPI v"), "info does not name the MPI library: %.2000s", out_buf);
#else
    ck_assert_msg(strstr(out_buf, "  MPI                 not built") && strstr(out_buf, "-Dmpi=enabled"),
                  "a build without MPI's info does not say so and how to get it: %.2000s", out_buf);
#endif
#ifdef MPT_HAVE_CUDA /* the module of this build loads here, and reports its libraries */
    const char *libs[] = {"loadable: yes", "CUDA runtime", "cuBLASLt", "cuDNN", "cuRAND", "GPU code built for"};
    for (int i = 0; i < 6; i++) ck_assert_msg(strstr(out_buf, libs[i]) != NULL, "info lacks %s: %s", libs[i], out_buf);
#else
    ck_assert_msg(strstr(out_buf, "cuda  built:    no") && strstr(out_buf, "-Dcuda=enabled"),
                  "a CPU-only build's info does not say the CUDA backend is not built and how to get it: %s", out_buf);
#endif
    /* A module path that does not exist: info names it, and --device auto falls back to the CPU. */
    setenv("MPT_CUDA_MODULE", "/nonexistent/libmptrain-cuda.so", 1);
    ck_assert_int_eq(run("info", NULL), 0);
    unsetenv("MPT_CUDA_MODULE");
    ck_assert_msg(strstr(out_buf, "MPT_CUDA_MODULE=/nonexistent/libmptrain-cuda.so: no such file") &&
                      strstr(out_buf, "will train on the CPU backend"),
                  "info does not report the missing module: %s", out_buf);
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
    ck_assert_int_eq(run("info", NULL), 0);
    unsetenv("NVIDIA_TF32_OVERRIDE");
    ck_assert_msg(strstr(out_buf, "NVIDIA_TF32_OVERRIDE=0") != NULL, "info does not report the override: %s", out_buf);
    /* the CUDA backend's opt-in paths (engine/cuda_backend.h): none set, then two of them, named; another value is
     * not "on" */
    ck_assert_msg(strstr(out_buf, "CUDA opt-in paths:    none set"), "info does not say no opt-in path is set: %s",
                  out_buf);
    setenv("MPT_CUDA_FUSED_UPDATE", "1", 1);
    setenv("MPT_CUDA_CONV_FIND", "1", 1);
    setenv("MPT_CUDA_FUSED_LOSS", "0", 1);
    ck_assert_int_eq(run("info", NULL), 0);
    unsetenv("MPT_CUDA_FUSED_UPDATE");
    unsetenv("MPT_CUDA_CONV_FIND");
    unsetenv("MPT_CUDA_FUSED_LOSS");
    ck_assert_msg(strstr(out_buf, "CUDA opt-in paths:    MPT_CUDA_FUSED_UPDATE, MPT_CUDA_CONV_FIND set to 1"),
                  "info does not name the opt-in paths set: %s", out_buf);
}
END_TEST

/* ---- train, outputs, eval --------------------------------------------------------------------------------------- */

static json_t *load_summary(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    json_error_t err;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &err);
    ck_assert_msg(j != NULL, "%s: %s (line %d)", p, err.text, err.line);
    return j;
}

static double jnum(json_t *j, const char *key) {
    json_t *v = json_object_get(j, key);
    ck_assert_msg(v != NULL && json_is_number(v), "summary.json: no number \"%s\"", key);
    return json_number_value(v);
}

/* Every key of summary.json object j (prefix: its path, for messages) is named in docs/outputs.md, as `key` in the
 * text or "key" in its example, and so are the keys of its nested objects, but config's (the recorded flags, each
 * `--<name>` in README's command reference) and the instruments' telemetry block (docs/numerics.md): a key the run
 * writes and the page does not explain fails here. */
static void keys_documented(json_t *j, const char *prefix, const char *doc) {
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        char a[160], b[160];
        snprintf(a, sizeof a, "`%s`", key);
        snprintf(b, sizeof b, "\"%s\"", key);
        ck_assert_msg(strstr(doc, a) || strstr(doc, b), "summary.json's %s%s is not in docs/outputs.md", prefix, key);
        if (json_is_object(v) && strcmp(key, "config") != 0 && strcmp(key, "telemetry") != 0) {
            char sub[200];
            snprintf(sub, sizeof sub, "%s%s.", prefix, key);
            keys_documented(v, sub, doc);
        }
    }
}

static void expect_keys_documented(json_t *j) {
    const char *root = getenv("MPT_SOURCE_ROOT");
    ck_assert_msg(root && *root, "MPT_SOURCE_ROOT is not set (tests/meson.build sets it)");
    char path[600];
    snprintf(path, sizeof path, "%s/docs/outputs.md", root);
    keys_documented(j, "", mpt_test_read_text(path));
}

/* Reads a checkpoint tensor as FP32 (the masters are F32). */
static float *ckpt_f32(const mpt_checkpoint *c, const char *name, int64_t expect_numel) {
    const mpt_checkpoint_tensor *t = mpt_checkpoint_find(c, name);
    ck_assert_msg(t != NULL, "checkpoint lacks %s", name);
    ck_assert_int_eq(t->dtype, MPT_DTYPE_F32);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    ck_assert_int_eq(n, expect_numel);
    float *w = malloc((size_t)n * sizeof *w);
    ck_assert_int_eq(mpt_checkpoint_read(c, name, w, (size_t)n * sizeof *w), MPT_OK);
    return w;
}

/* FP64 reference of the mlp (784-512-512-10, ReLU) on x = (image / 255 - mean) * inv_std: accuracy and mean
 * cross-entropy over the test set. */
static void mlp_reference(const mpt_checkpoint *c, const mpt_mnist *d, double mean, double inv_std, double *acc,
                          double *loss) {
    float *w1 = ckpt_f32(c, "fc1.weight", 512 * 784), *b1 = ckpt_f32(c, "fc1.bias", 512);
    float *w2 = ckpt_f32(c, "fc2.weight", 512 * 512), *b2 = ckpt_f32(c, "fc2.bias", 512);
    float *w3 = ckpt_f32(c, "fc3.weight", 10 * 512), *b3 = ckpt_f32(c, "fc3.bias", 10);
    double x[784], h1[512], h2[512], z[10];
    int correct = 0;
    double sum = 0.0;
    for (int64_t i = 0; i < d->n_test; i++) {
        for (int p = 0; p < 784; p++) x[p] = (d->test_images[i * 784 + p] / 255.0 - mean) * inv_std;
        for (int o = 0; o < 512; o++) {
            double s = b1[o];
            for (int p = 0; p < 784; p++) s += (double)w1[o * 784 + p] * x[p];
            h1[o] = s > 0 ? s : 0;
        }
        for (int o = 0; o < 512; o++) {
            double s = b2[o];
            for (int p = 0; p < 512; p++) s += (double)w2[o * 512 + p] * h1[p];
            h2[o] = s > 0 ? s : 0;
        }
        int best = 0;
        double mx = -INFINITY;
        for (int o = 0; o < 10; o++) {
            double s = b3[o];
            for (int p = 0; p < 512; p++) s += (double)w3[o * 512 + p] * h2[p];
            z[o] = s;
            if (s > mx) {
                mx = s;
                best = o;
            }
        }
        double lse = 0.0;
        for (int o = 0; o < 10; o++) lse += exp(z[o] - mx);
        sum += mx + log(lse) - z[d->test_labels[i]];
        correct += best == d->test_labels[i];
    }
    *acc = (double)correct / (double)d->n_test;
    *loss = sum / (double)d->n_test;
    free(w1), free(b1), free(w2), free(b2), free(w3), free(b3);
}

START_TEST(test_train_outputs_and_eval) {
    make_tmpdir();
    mpt_mnist d;
    const char *data = write_synthetic(&d);
    const char *out = tmp_path("run");
    /* batch 64: 600 = 9 x 64 + 24, so the last batch is a padded partial one (and 300 = 4 x 64 + 44). */
    int rc = run("train", "--data", data, "--out", out, "--device", "cpu", "--model", "mlp", "--precision", "fp32",
                 "--epochs", "2", "--batch-size", "64", "--log-every", "1", "--progress", "off", "--standardize",
                 "--cuda-graph", "on", NULL);
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "device: cpu") != NULL, "the run does not say its device: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "--cuda-graph is ignored by the cpu backend") != NULL,
                  "the run does not say that the CPU backend ignores --cuda-graph: %s", out_buf);
    const int steps_per_epoch = (SYN_TRAIN + 63) / 64; /* 10 */

    char p[600];
    int n;
    snprintf(p, sizeof p, "%s/metrics.csv", out);
    char **lines = read_lines(p, &n);
    ck_assert_str_eq(lines[0], "step,epoch,loss,lr,loss_scale,steps_skipped,run_id");
    ck_assert_int_eq(n, 1 + 2 * steps_per_epoch);
    long step;
    double loss, lr, scale;
    int epoch, skipped;
    ck_assert_int_eq(sscanf(lines[n - 1], "%ld,%d,%lf,%lf,%lf,%d", &step, &epoch, &loss, &lr, &scale, &skipped), 6);
    ck_assert_int_eq(step, 2 * steps_per_epoch);
    ck_assert_int_eq(epoch, 2);
    ck_assert(isfinite(loss) && loss > 0);
    ck_assert(fabs(lr - 1e-3) < 1e-9);
    ck_assert(scale == 1.0 && skipped == 0);
    free_lines(lines, n);

    snprintf(p, sizeof p, "%s/epochs.csv", out);
    lines = read_lines(p, &n);
    ck_assert_int_eq(n, 3);
    ck_assert_ptr_nonnull(strstr(lines[0], "test_acc"));
    double e_acc = NAN, e_loss = NAN, e_train = NAN;
    ck_assert_int_eq(sscanf(lines[2], "%d,%ld,%lf,%lf,%lf", &epoch, &step, &e_train, &e_loss, &e_acc), 5);
    free_lines(lines, n);

    json_t *j = load_summary(out);
    const char *keys[] = {"final_test_accuracy", "best_test_accuracy", "time_per_epoch_s", "samples_per_s",
                          "steps_skipped", "final_loss_scale", "final_test_loss", "steps"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) jnum(j, keys[k]);
    expect_keys_documented(j);
    json_t *cg = json_object_get(j, "cuda_graph");
    const char *cg_status = json_string_value(json_object_get(cg, "status"));
    const char *cg_req = json_string_value(json_object_get(cg, "requested"));
    ck_assert_msg(cg_status && cg_req && strcmp(cg_status, "not applicable (cpu backend)") == 0 &&
                      strcmp(cg_req, "on") == 0,
                  "summary.json cuda_graph: requested %s, status %s", cg_req ? cg_req : "(none)",
                  cg_status ? cg_status : "(none)");
    double acc = jnum(j, "final_test_accuracy");
    ck_assert(acc == e_acc);
    ck_assert(jnum(j, "best_test_accuracy") >= acc);
    ck_assert(jnum(j, "steps") == 2 * steps_per_epoch);
    ck_assert(jnum(j, "samples_per_s") > 0);
    /* the epochs' host-clock times, one per epoch; the CPU backend has no device timer: GPU times are null */
    json_t *ep = json_object_get(j, "epoch_times_s");
    ck_assert_msg(json_is_array(ep) && json_array_size(ep) == 2, "summary.json epoch_times_s: not 2 host times");
    for (size_t k = 0; k < 2; k++) ck_assert(json_number_value(json_array_get(ep, k)) > 0);
    json_t *gpu_ep = json_object_get(j, "epoch_gpu_times_s");
    ck_assert_msg(gpu_ep != NULL && json_is_null(gpu_ep), "summary.json epoch_gpu_times_s on the CPU: %s, expected null",
                  gpu_ep ? "a value" : "absent");
    ck_assert_msg(strstr(out_buf, "s host clock") != NULL && strstr(out_buf, "CUDA events") == NULL,
                  "the epoch line does not name its clock (host), or claims CUDA events on the CPU: %s", out_buf);
    json_t *mem = json_object_get(j, "peak_memory_bytes");
    ck_assert(json_is_object(mem));
    ck_assert(json_integer_value(json_object_get(mem, "total")) > 0);
    ck_assert(json_integer_value(json_object_get(mem, "data")) >= (SYN_TRAIN + SYN_TEST) * 785);
    ck_assert_int_eq(json_integer_value(json_object_get(mem, "master")), 0); /* fp32: weights are the masters */
    json_t *map = json_object_get(j, "precision_map");
    ck_assert(json_is_array(map) && json_array_size(map) >= 6);
    json_t *fc1 = json_array_get(map, 1);
    ck_assert_str_eq(json_string_value(json_object_get(fc1, "op")), "linear");
    ck_assert_str_eq(json_string_value(json_object_get(fc1, "math")), "fp32");
    json_t *fused = json_object_get(fc1, "fused"); /* mlp: relu1 in fc1's forward GEMM, its backward in fc2's */
    ck_assert_msg(json_is_object(fused), "precision_map fc1 has no \"fused\" object");
    ck_assert_str_eq(json_string_value(json_object_get(fused, "relu")), "relu1");
    ck_assert_str_eq(json_string_value(json_object_get(fused, "forward")), "RELU_AUX_BIAS");
    ck_assert_str_eq(json_string_value(json_object_get(fused, "backward_in")), "fc2");
    const char *kernels = json_string_value(json_object_get(fc1, "kernels")); /* the default kernel set */
    ck_assert_msg(kernels && strncmp(kernels, "emulate:", 8) == 0, "fc1 kernels %s", kernels ? kernels : "(none)");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "cpu_kernels"), "set")), "emulate");
    json_decref(j);

    /* The checkpoint: loads, holds FP32 masters and Adam state, and its weights give the reported accuracy. */
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", out);
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    ck_assert_int_eq(mpt_checkpoint_n_tensors(c), 6 * 3); /* 6 parameters x (master, exp_avg, exp_avg_sq) */
    ck_assert_ptr_nonnull(mpt_checkpoint_find(c, "fc2.weight:exp_avg_sq"));
    ck_assert_ptr_nonnull(mpt_checkpoint_meta_get(c, "config"));
    ck_assert_ptr_nonnull(mpt_checkpoint_meta_get(c, "scaler"));
    ck_assert_str_eq(mpt_checkpoint_meta_get(c, "model"), "mlp");
    /* --standardize: the mean and 1/std of pixel/255 over the training images, recomputed here in FP64. */
    double sum = 0.0, sumsq = 0.0;
    for (int64_t i = 0; i < d.n_train * 784; i++) {
        double v = d.train_images[i] / 255.0;
        sum += v;
        sumsq += v * v;
    }
    double mean = sum / (double)(d.n_train * 784);
    double inv_std = 1.0 / sqrt(sumsq / (double)(d.n_train * 784) - mean * mean);
    json_error_t err;
    json_t *state = json_loads(mpt_checkpoint_meta_get(c, "state"), 0, &err);
    ck_assert_msg(state != NULL, "checkpoint metadata \"state\": %s", err.text);
    double ck_mean = json_number_value(json_object_get(state, "mean"));
    double ck_inv_std = json_number_value(json_object_get(state, "inv_std"));
    json_decref(state);
    ck_assert_msg(fabs(ck_mean - mean) <= 1e-6 * mean && fabs(ck_inv_std - inv_std) <= 1e-6 * inv_std,
                  "standardisation: checkpoint mean %.9g inv_std %.9g, FP64 %.9g %.9g", ck_mean, ck_inv_std, mean, inv_std);
    double ref_acc, ref_loss;
    mlp_reference(c, &d, ck_mean, ck_inv_std, &ref_acc, &ref_loss);
    mpt_checkpoint_close(&c);
    /* FP32 GEMMs (K <= 784) against FP64: logits agree to ~K * 2^-24 relative, so at most an exact near-tie
     * can flip a prediction: allow 1 of 300; the loss to 1e-4 relative. */
    ck_assert_msg(fabs(ref_acc - acc) <= 1.0 / SYN_TEST + 1e-12, "reported accuracy %.6f, FP64 reference %.6f", acc,
                  ref_acc);
    ck_assert_msg(fabs(ref_loss - e_loss) <= 1e-4 * fabs(ref_loss) + 1e-6, "reported test loss %.8f, FP64 %.8f",
                  e_loss, ref_loss);
    /* The blobs are separable (Bayes error < 0.3%): two epochs of Adam on standardised pixels must beat chance
     * (10%) by far. */
    ck_assert_msg(acc > 0.6, "test accuracy %.3f after 2 epochs on separable blobs", acc);

    /* eval prints the same accuracy. */
    rc = run("eval", "--checkpoint", p, "--data", data, "--device", "cpu", NULL);
    ck_assert_msg(rc == 0, "eval failed (%d): %s", rc, out_buf);
    char want[64];
    snprintf(want, sizeof want, "test accuracy %.2f%%", 100.0 * acc);
    ck_assert_msg(strstr(out_buf, want) != NULL, "eval output lacks '%s': %s", want, out_buf);
    /* eval with another batch size evaluates the same weights. */
    rc = run("eval", "--checkpoint", p, "--data", data, "--device", "cpu", "--batch-size", "37", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) != NULL, "eval --batch-size 37: %s", out_buf);
    mpt_mnist_free(&d);
    rm_tmpdir();
}
END_TEST

/* ---- the models ------------------------------------------------------------------------------------------------ */

/* Each model trains a step, and its checkpoint holds exactly the parameters of the reference architecture:
 * counts computed here from the layer shapes (they are also the counts PyTorch reports for these networks). */
static const struct {
    const char *name;
    int64_t params;
} model_cases[] = {
    /* 784*512+512 + 512*512+512 + 512*10+10 */
    {"mlp", 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10},
    /* conv1 6@1x5x5, conv2 16@6x5x5, fc 16*5*5 -> 120 -> 84 -> 10 */
    {"lenet5", 6 * 25 + 6 + 16 * 6 * 25 + 16 + 400 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10},
    /* conv1 32@1x3x3, conv2 64@32x3x3, fc 64*12*12 -> 128 -> 10 */
    {"cnn", 32 * 9 + 32 + 64 * 32 * 9 + 64 + 9216 * 128 + 128 + 128 * 10 + 10},
};

START_TEST(test_models) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *out = tmp_path("model");
    int rc = run("train", "--data", data, "--out", out, "--device", "cpu", "--model", model_cases[_i].name,
                 "--batch-size", "16", "--max-steps", "2", "--limit-test", "32", "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "train --model %s failed (%d): %s", model_cases[_i].name, rc, out_buf);
    char p[600];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", out);
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    int64_t n = 0;
    for (int i = 0; i < mpt_checkpoint_n_tensors(c); i++) {
        const mpt_checkpoint_tensor *t = mpt_checkpoint_tensor_at(c, i);
        if (!strchr(t->name, ':')) n += mpt_checkpoint_tensor_nbytes(t) / 4;
    }
    mpt_checkpoint_close(&c);
    ck_assert_msg(n == model_cases[_i].params, "%s: %lld parameters, expected %lld", model_cases[_i].name,
                  (long long)n, (long long)model_cases[_i].params);
    rm_tmpdir();
}
END_TEST

/* ---- resume --------------------------------------------------------------------------------------------------- */

/* A CSV row without its last column (the run_id: the straight and the resumed run are two runs). */
static char *without_run_id(char *row) {
    char *comma = strrchr(row, ',');
    if (comma) *comma = '\0';
    return row;
}

/* The metrics rows of the straight run from step `from` on equal the resumed run's rows (their run ids aside). */
static void assert_same_losses(const char *straight_dir, const char *resumed_dir, int from, int to) {
    char p[600];
    int na, nb;
    snprintf(p, sizeof p, "%s/metrics.csv", straight_dir);
    char **a = read_lines(p, &na);
    snprintf(p, sizeof p, "%s/metrics.csv", resumed_dir);
    char **b = read_lines(p, &nb);
    ck_assert_int_eq(na, 1 + to);
    ck_assert_int_eq(nb, 1 + to - from + 1);
    for (int s = from; s <= to; s++) ck_assert_str_eq(without_run_id(a[s]), without_run_id(b[s - from + 1]));
    free_lines(a, na);
    free_lines(b, nb);
}

static void resume_case(const char *model, const char *precision, const char *const *extra, int total, int half) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    char total_s[16], half_s[16];
    snprintf(total_s, sizeof total_s, "%d", total);
    snprintf(half_s, sizeof half_s, "%d", half);
    const char *dirs[2] = {tmp_path("straight"), tmp_path("first")};
    const char *steps[2] = {total_s, half_s};
    for (int r = 0; r < 2; r++) {
        char *args[MAX_ARGS];
        int n = 0;
        const char *common[] = {"mptrain", "train", "--data", data, "--device", "cpu", "--model", model, "--precision",
                                precision, "--batch-size", "32", "--epochs", "3", "--log-every", "1", "--limit-test",
                                "64", "--progress", "off", "--max-steps", steps[r], "--out", dirs[r]};
        for (size_t k = 0; k < sizeof common / sizeof common[0]; k++) args[n++] = (char *)common[k];
        for (int k = 0; extra[k]; k++) args[n++] = (char *)extra[k];
        args[n] = NULL;
        int rc = run_argv(args);
        ck_assert_msg(rc == 0, "train (%s steps) failed (%d): %s", steps[r], rc, out_buf);
    }
    char ck_first[600], ck_straight[600], ck_resumed[600];
    snprintf(ck_first, sizeof ck_first, "%s/checkpoint.safetensors", dirs[1]);
    snprintf(ck_straight, sizeof ck_straight, "%s/checkpoint.safetensors", dirs[0]);
    const char *resumed = tmp_path("resumed");
    snprintf(ck_resumed, sizeof ck_resumed, "%s/checkpoint.safetensors", resumed);
    int rc = run("train", "--resume", ck_first, "--data", data, "--device", "cpu", "--log-every", "1", "--limit-test",
                 "64", "--progress", "off", "--max-steps", total_s, "--out", resumed, NULL);
    ck_assert_msg(rc == 0, "resume failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "resuming") != NULL, "the resumed run does not say so: %s", out_buf);
    assert_same_tensors(ck_straight, ck_resumed, 1);
    assert_same_losses(dirs[0], resumed, half + 1, total);

    /* A flag that would change the math is refused when resuming. */
    rc = run("train", "--resume", ck_first, "--data", data, "--device", "cpu", "--lr", "0.5", "--out",
             tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--lr") != NULL, "conflicting --lr on resume: %d %s", rc, out_buf);
    /* Every setting of the invocation comes from the command line (the option table's scope): --cuda-graph off was
     * dropped by the hand-written merge before, and the resumed run recorded "on". */
    const char *inv = tmp_path("invocation");
    rc = run("train", "--resume", ck_first, "--data", data, "--device", "cpu", "--cuda-graph", "off", "--log-every",
             "3", "--progress", "off", "--max-steps", total_s, "--out", inv, NULL);
    ck_assert_msg(rc == 0, "resume with invocation flags failed (%d): %s", rc, out_buf);
    json_t *j = load_summary(inv);
    json_t *cg = json_object_get(j, "cuda_graph");
    ck_assert_str_eq(json_string_value(json_object_get(cg, "requested")), "off");
    json_decref(j);
    rm_tmpdir();
}

/* ---- networks written as specs, data of other shapes (issue 33) ------------------------------------------------ */

#define BN_SPEC "conv(8,3,pad=1),batchnorm,relu,maxpool(2),conv(8,3),batchnorm,relu,flatten,linear(32),batchnorm,relu,linear"

/* A synthetic dataset of C x H x W images and K classes (gzip IDX; rank 4 in `layout` when C > 1) in tmpdir/name. */
static const char *write_fixture(const char *name, int C, int H, int W, int K, mpt_idx_layout layout, uint64_t seed) {
    const char *dir = tmp_path(name);
    ck_assert(mkdir(dir, 0755) == 0);
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, SYN_TRAIN, SYN_TEST, (int64_t)C * H * W, K, seed), MPT_OK);
    d.channels = C, d.rows = H, d.cols = W;
    ck_assert_msg(mpt_mnist_save_layout(dir, &d, 1, layout) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&d);
    return dir;
}

/* The three fixtures of the issue train end to end: 47 classes, 32 x 32 images, 3 channels (channels last on disk),
 * each with batch norm in its network, to a test accuracy far above chance; summary.json records the data's shape. */
typedef struct fixture {
    const char *name;
    int C, H, W, K;
    mpt_idx_layout layout;
    const char *model;
} fixture;
static const fixture fixtures[] = {
    {"classes47", 1, 28, 28, 47, MPT_IDX_LAYOUT_NCHW, BN_SPEC},
    {"size32", 1, 32, 32, 10, MPT_IDX_LAYOUT_NCHW, "mlp"}, /* the built-in mlp, 1024 inputs wide */
    {"rgb", 3, 32, 32, 10, MPT_IDX_LAYOUT_NHWC, "conv(8,3,stride=2),batchnorm,gelu,avgpool(2),layernorm,flatten,linear"},
};

START_TEST(test_fixtures_train) {
    make_tmpdir();
    const fixture *f = &fixtures[_i];
    const char *data = write_fixture(f->name, f->C, f->H, f->W, f->K, f->layout, 17 + (uint64_t)_i);
    const char *out = tmp_path("out");
    int rc = run("train", "--data", data, "--data-layout", mpt_idx_layout_name(f->layout), "--out", out, "--device",
                 "cpu", "--model", f->model, "--precision", "bf16", "--batch-size", "32", "--epochs", "3",
                 "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "%s: train failed (%d): %s", f->name, rc, out_buf);
    ck_assert_msg(!strstr(out_buf, "--data-layout nhwc changes nothing"), "%s: rank-4 files are ordered by the flag, "
                  "yet a note says it changes nothing: %.2000s", f->name, out_buf);
    json_t *j = load_summary(out);
    json_t *dj = json_object_get(j, "data");
    ck_assert_msg(json_integer_value(json_object_get(dj, "channels")) == f->C &&
                      json_integer_value(json_object_get(dj, "height")) == f->H &&
                      json_integer_value(json_object_get(dj, "width")) == f->W &&
                      json_integer_value(json_object_get(dj, "classes")) == f->K,
                  "%s: summary.json data is not the fixture's", f->name);
    const double acc = jnum(j, "final_test_accuracy");
    ck_assert_msg(acc > 0.5, "%s: test accuracy %.3f after 3 epochs (chance %.3f)", f->name, acc, 1.0 / f->K);
    json_t *layers = json_object_get(j, "model_layers");
    json_t *last = json_array_get(layers, json_array_size(layers) - 1);
    ck_assert_msg(json_integer_value(json_object_get(last, "out_features")) == f->K, "%s: the head is not %d wide",
                  f->name, f->K);
    json_decref(j);
    rm_tmpdir();
}
END_TEST

/* --data-layout nhwc on rank-3 files ([N, H, W], Fashion-MNIST's) changed nothing and said nothing: a note says so, in
 * train and in eval, and the run goes on (the statement is not false for one-channel images: not an error). */
START_TEST(test_data_layout_rank3_note) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *out = tmp_path("out");
    const char *note = "note: --data-layout nhwc changes nothing: the images in ";
    int rc = run("train", "--data", data, "--data-layout", "nhwc", "--device", "cpu", "--max-steps", "2",
                 "--limit-test", "64", "--progress", "off", "--out", out, NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, note) && strstr(out_buf, "are rank 3 ([N, H, W], one channel)"),
                  "train: (%d) %.2000s", rc, out_buf);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", out);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--data-layout", "nhwc", "--device", "cpu", "--limit-test",
             "64", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, note), "eval: (%d) %.2000s", rc, out_buf);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "64", NULL);
    ck_assert_msg(rc == 0 && !strstr(out_buf, "--data-layout"), "eval without the flag: (%d) %.2000s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

/* --tf32-conv on a network without convolutions (the mlp) changed nothing and said nothing: a note says so in fp32
 * and tf32 (a 16-bit mode has its own note for both switches); a network with convolutions gets none. */
START_TEST(test_tf32_conv_without_convs) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *note = "note: --tf32-conv changes nothing: the model has no convolutions";
    static const struct {
        const char *model, *precision, *value;
        int expect;
    } c[] = {
        {"mlp", "fp32", "on", 1},     {"mlp", "tf32", "off", 1},   {"flatten,linear(32),relu,linear", "fp32", "on", 1},
        {"lenet5", "fp32", "on", 0},  {"lenet5", "tf32", "off", 0}, {"mlp", "bf16", "on", 0},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        char out[700];
        snprintf(out, sizeof out, "%s-%zu", tmp_path("o"), k);
        int rc = run("train", "--data", data, "--device", "cpu", "--model", c[k].model, "--precision", c[k].precision,
                     "--tf32-conv", c[k].value, "--max-steps", "1", "--limit-test", "32", "--progress", "off", "--out",
                     out, NULL);
        ck_assert_msg(rc == 0, "case %zu failed (%d): %.2000s", k, rc, out_buf);
        ck_assert_msg((strstr(out_buf, note) != NULL) == c[k].expect, "case %zu (%s %s): note %s: %.2000s", k,
                      c[k].model, c[k].precision, c[k].expect ? "missing" : "unexpected", out_buf);
    }
    rm_tmpdir();
}
END_TEST

/* eval --quantize bf16 --granularity G: BF16 has no scale, so the granularity of its scales meant nothing and the run
 * said nothing; refused before any file is read, naming the flag, the value and the formats that take it. The scaled
 * formats still take it (their parse reaches the missing checkpoint instead). */
START_TEST(test_granularity_needs_scale) {
    static const char *const g[] = {"channel", "tensor"};
    for (int k = 0; k < 2; k++) {
        int rc = run("eval", "--checkpoint", "/nonexistent/ck.safetensors", "--quantize", "bf16", "--granularity", g[k],
                     NULL);
        char want[200];
        snprintf(want, sizeof want, "mptrain eval: --granularity %s: expected --quantize int8|int4|fp8-e4m3 (the "
                 "formats with scales), found --quantize bf16", g[k]);
        ck_assert_msg(rc == 2 && strstr(out_buf, want) && !strstr(out_buf, "nonexistent"), "(%d) %s", rc, out_buf);
    }
    /* without --quantize: the flag given is named with the formats that take it (a scale: int8, int4, fp8-e4m3; integer
     * GEMMs, which --activations and its --calibrate run: int8, int4); one message named all three flags for each */
    static const struct { const char *flag, *value, *want; } alone[] = {
        {"--granularity", "tensor", "mptrain eval: --granularity sets up --quantize: give --quantize int8|int4|fp8-e4m3"},
        {"--activations", "int8", "mptrain eval: --activations sets up --quantize: give --quantize int8|int4 as well"},
        {"--calibrate", "4", "mptrain eval: --calibrate sets up --quantize: give --quantize int8|int4 as well"},
    };
    for (int k = 0; k < 3; k++) {
        int rc = run("eval", "--checkpoint", "/nonexistent/ck.safetensors", alone[k].flag, alone[k].value, NULL);
        ck_assert_msg(rc == 2 && strstr(out_buf, alone[k].want) && !strstr(out_buf, "nonexistent"), "%s: (%d) %s",
                      alone[k].flag, rc, out_buf);
    }
    static const char *const scaled[] = {"int8", "int4", "fp8-e4m3"};
    for (int k = 0; k < 3; k++) {
        int rc = run("eval", "--checkpoint", "/nonexistent/ck.safetensors", "--quantize", scaled[k], "--granularity",
                     "tensor", NULL);
        ck_assert_msg(rc != 0 && !strstr(out_buf, "--granularity") && strstr(out_buf, "nonexistent"),
                      "--quantize %s --granularity tensor: (%d) %s", scaled[k], rc, out_buf);
    }
}
END_TEST

/* A flag and whether its note is printed: `a` the extra flags (NULL-terminated, at most 6), `note` the text looked
 * for on the run's output, `expect` 1 when it must be there, 0 when it must not. */
typedef struct note_case {
    const char *a[6], *note;
    int expect;
} note_case;

/* Runs `mptrain <base...> --out <tmp>/o-K <case K's flags>` for each case: exit 0 and the note present or absent. */
static void check_notes(const char *const *base, int n_base, const note_case *c, size_t n_cases) {
    for (size_t k = 0; k < n_cases; k++) {
        char out[700];
        snprintf(out, sizeof out, "%s-%zu", tmp_path("o"), k);
        const char *argv[32];
        int n = 0;
        for (; n < n_base; n++) argv[n] = base[n];
        argv[n++] = "--out";
        argv[n++] = out;
        for (int i = 0; i < 6 && c[k].a[i]; i++) argv[n++] = c[k].a[i];
        argv[n] = NULL;
        int rc = run_argv((char *const *)argv);
        ck_assert_msg(rc == 0, "case %zu failed (%d): %.2000s", k, rc, out_buf);
        ck_assert_msg((strstr(out_buf, c[k].note) != NULL) == c[k].expect, "case %zu: '%s' %s in: %.2000s", k,
                      c[k].note, c[k].expect ? "missing" : "unexpected", out_buf);
    }
}

/* More flags that changed nothing and said nothing, each now with a note (a run goes on: a sweep may pass them to
 * every run): --optimizer-state for plain SGD (no state), --lr-schedule step whose first decay comes after the last
 * step, --save-every no smaller than the run, compare --comm-timeout outside mpirun. 600 images in batches of 100: 6
 * steps per epoch. */
START_TEST(test_more_unused_notes) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    static const note_case c[] = {
        {{"--optimizer", "sgd", "--optimizer-state", "bf16", NULL},
         "note: --optimizer-state bf16 changes nothing with --optimizer sgd and --momentum 0: plain SGD keeps no "
         "optimizer state", 1},
        {{"--optimizer", "sgd", "--momentum", "0.9", "--optimizer-state", "bf16"}, "--optimizer-state bf16 changes", 0},
        {{"--lr-schedule", "step", "--step-size", "6", NULL},
         "note: --lr-schedule step changes nothing: its first decay comes at iteration 6 (--step-size), past the run's "
         "6 steps (--epochs 1 x 6 batches per epoch)", 1},
        {{"--lr-schedule", "step", "--step-size", "5", NULL}, "--lr-schedule step changes nothing", 0},
        {{"--save-every", "6", NULL},
         "note: --save-every 6 changes nothing: the run ends at step 6 (--epochs 1 x 6 batches per epoch), where the "
         "checkpoint is written anyway", 1},
        {{"--save-every", "3", "--max-steps", "3", NULL},
         "note: --save-every 3 changes nothing: the run ends at step 3 (--max-steps 3)", 1},
        {{"--save-every", "5", NULL}, "--save-every 5 changes nothing", 0},
        /* --tf32-conv without convolutions makes no TF32 GEMM: --accum-model v100 (no TF32 on Volta) is accepted and
         * changes nothing (it was refused as though the mlp's GEMMs were TF32); lenet5's is refused (below) */
        {{"--tf32-conv", "on", "--accum-model", "v100", NULL}, "note: --accum-model v100 changes nothing in fp32", 1},
    };
    const char *base[] = {"mptrain", "train", "--data", data, "--device", "cpu", "--batch-size", "100", "--epochs", "1",
                          "--limit-test", "32", "--progress", "off"};
    check_notes(base, (int)(sizeof base / sizeof base[0]), c, sizeof c / sizeof c[0]);
    int rc = run("train", "--data", data, "--device", "cpu", "--model", "lenet5", "--tf32-conv", "on", "--accum-model",
                 "v100", "--max-steps", "1", "--progress", "off", "--out", tmp_path("lenet5"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--accum-model v100: the V100 Tensor Cores it models take no tf32 operands"),
                  "lenet5 with TF32 convolutions: (%d) %.2000s", rc, out_buf);
    rc = run("compare", "--precisions", "fp32", "--data", data, "--device", "cpu", "--max-steps", "1",
                 "--limit-test", "32", "--comm-timeout", "5", "--progress", "off", "--out", tmp_path("cmp"), NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "note: --comm-timeout changes nothing: this compare is not a rank of an "
                                             "mpirun job"), "compare --comm-timeout: (%d) %.2000s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

/* A spec'd network with batch norm: the checkpoint holds the running statistics under PyTorch's names and the
 * network's description; eval reproduces the run's test accuracy; --model @FILE reads a spec with comments. */
START_TEST(test_spec_checkpoint_eval) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *file = tmp_path("net.txt");
    FILE *f = fopen(file, "w");
    ck_assert(f != NULL);
    fprintf(f, "# a small network with batch norm\nconv(8,3,pad=1), batchnorm, relu,   # the stem\n"
               "maxpool(2),\nconv(8,3), batchnorm, relu,\nflatten, linear(32), batchnorm, relu,\nlinear,\n");
    fclose(f);
    char at[600];
    snprintf(at, sizeof at, "@%s", file);
    const char *out = tmp_path("out");
    int rc = run("train", "--data", data, "--out", out, "--device", "cpu", "--model", at, "--precision", "fp16",
                 "--batch-size", "32", "--epochs", "2", "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "train --model @FILE failed (%d): %s", rc, out_buf);
    json_t *j = load_summary(out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), BN_SPEC);
    char want[64];
    snprintf(want, sizeof want, "test accuracy %.2f%%", 100.0 * jnum(j, "final_test_accuracy"));
    json_decref(j);
    char p[600];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", out);
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    static const char *const names[] = {"bn1.running_mean", "bn1.running_var", "bn3.running_var", "bn2.weight",
                                        "conv2.bias", "fc2.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const mpt_checkpoint_tensor *t = mpt_checkpoint_find(c, names[i]);
        ck_assert_msg(t != NULL && t->dtype == MPT_DTYPE_F32, "checkpoint lacks %s", names[i]);
    }
    const mpt_checkpoint_tensor *rv = mpt_checkpoint_find(c, "bn1.running_var");
    int moved = 0; /* the running variance left its start (1) */
    for (int k = 0; k < 8; k++) moved |= ((const float *)rv->data)[k] != 1.0f;
    ck_assert_msg(moved, "bn1.running_var is still all ones after training");
    ck_assert_msg(mpt_checkpoint_find(c, "bn1.running_var:exp_avg") == NULL, "a buffer got optimizer state");
    ck_assert_msg(strstr(mpt_checkpoint_meta_get(c, "model_layers"), "\"name\":\"bn3\"") != NULL,
                  "model_layers: %s", mpt_checkpoint_meta_get(c, "model_layers"));
    mpt_checkpoint_close(&c);
    rc = run("eval", "--checkpoint", p, "--data", data, "--device", "cpu", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) != NULL, "eval does not reproduce the run's '%s': %s", want, out_buf);
    /* eval of the checkpoint on data of another shape: refused, naming both */
    const char *other = write_fixture("other", 1, 32, 32, 10, MPT_IDX_LAYOUT_NCHW, 5);
    rc = run("eval", "--checkpoint", p, "--data", other, "--device", "cpu", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "28 x 28") && strstr(out_buf, "32 x 32"), "eval on 32 x 32: %d %s", rc,
                  out_buf);
    rm_tmpdir();
}
END_TEST

/* Batch norm's running statistics resume bit-exactly (the run crosses the padded last batch of an epoch). */
START_TEST(test_resume_batchnorm) {
    const char *none[] = {NULL};
    resume_case(BN_SPEC, "bf16", none, 24, 11);
}
END_TEST

/* One-line errors and exit codes: bad specs and shapes (2), data that disagrees with itself or the class count (1). */
START_TEST(test_spec_and_data_errors) {
    make_tmpdir();
    const char *data = write_synthetic(NULL), *out = tmp_path("out");
    const struct {
        const char *model;
        int rc;
        const char *frag1, *frag2;
    } bad[] = {
        {"conv(6,5,pa=2),relu,flatten,linear", 2, "at character 10 (layer 1), found 'pa'", "an argument of conv"},
        {"resnet", 2, "'resnet' is not a built-in model (mlp, lenet5, cnn)", NULL},
        {"conv(6,5),relu,linear", 2, "layer 3 linear (fc): its input is [B, 6, 24, 24]", "put flatten before it"},
        {"conv(6,29),flatten,linear", 2, "kernel 29 is larger than the padded input 28 x 28", NULL},
        {"flatten,linear(12)", 2, "ends in [B, 12], the data has 10 classes", NULL},
        {"@/nonexistent/net.txt", 2, "--model @/nonexistent/net.txt: cannot open", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run("train", "--data", data, "--out", out, "--device", "cpu", "--model", bad[i].model, "--max-steps",
                     "1", "--progress", "off", NULL);
        ck_assert_msg(rc == bad[i].rc, "--model %s: exit %d, expected %d: %s", bad[i].model, rc, bad[i].rc, out_buf);
        ck_assert_msg(strstr(out_buf, bad[i].frag1) != NULL, "--model %s: message lacks \"%s\": %s", bad[i].model,
                      bad[i].frag1, out_buf);
        if (bad[i].frag2)
            ck_assert_msg(strstr(out_buf, bad[i].frag2) != NULL, "--model %s: message lacks \"%s\": %s", bad[i].model,
                          bad[i].frag2, out_buf);
        int lines = 0;
        for (const char *q = out_buf; *q; q++) lines += *q == '\n';
        ck_assert_msg(lines == 1, "--model %s: %d lines, expected one: %s", bad[i].model, lines, out_buf);
    }
    /* labels outside --classes: exit 1 naming the labels file */
    int rc = run("train", "--data", data, "--out", out, "--device", "cpu", "--classes", "5", "--max-steps", "1",
                 "--progress", "off", NULL);
    ck_assert_msg(rc == 1 && strstr(out_buf, "train-labels-idx1-ubyte") && strstr(out_buf, "outside [0, 5)"),
                  "--classes 5 on 10 classes: %d %s", rc, out_buf);
    /* test images of another size than the training images: exit 1 naming both files */
    const char *mixed = write_fixture("mixed", 1, 28, 28, 10, MPT_IDX_LAYOUT_NCHW, 3);
    const char *big = write_fixture("big", 1, 32, 32, 10, MPT_IDX_LAYOUT_NCHW, 4);
    char from[600], to[600];
    snprintf(from, sizeof from, "%s/t10k-images-idx3-ubyte.gz", big);
    snprintf(to, sizeof to, "%s/t10k-images-idx3-ubyte.gz", mixed);
    ck_assert(rename(from, to) == 0);
    rc = run("train", "--data", mixed, "--out", out, "--device", "cpu", "--max-steps", "1", "--progress", "off", NULL);
    ck_assert_msg(rc == 1 && strstr(out_buf, "train-images-idx3-ubyte.gz has 28 x 28 images") &&
                      strstr(out_buf, "t10k-images-idx3-ubyte.gz has 32 x 32"),
                  "28 x 28 train, 32 x 32 test: %d %s", rc, out_buf);
    /* a test label the training labels do not reach: exit 1 naming both label files */
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, SYN_TRAIN, SYN_TEST, 784, 10, 8), MPT_OK);
    for (int64_t i = 0; i < d.n_train; i++) d.train_labels[i] = (uint8_t)(d.train_labels[i] % 9); /* labels 0..8 */
    const char *nine = tmp_path("nine");
    ck_assert(mkdir(nine, 0755) == 0);
    ck_assert(mpt_mnist_save(nine, &d, 1) == MPT_OK);
    mpt_mnist_free(&d);
    rc = run("train", "--data", nine, "--out", out, "--device", "cpu", "--max-steps", "1", "--progress", "off", NULL);
    ck_assert_msg(rc == 1 && strstr(out_buf, "t10k-labels-idx1-ubyte.gz: label 9") &&
                      strstr(out_buf, "classes of") && strstr(out_buf, "train-labels-idx1-ubyte.gz") &&
                      strstr(out_buf, "--classes 10"),
                  "test label 9, training labels 0..8: %d %s", rc, out_buf);
    rc = run("train", "--data", nine, "--out", out, "--device", "cpu", "--classes", "10", "--max-steps", "2",
             "--batch-size", "16", "--limit-test", "32", "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "with --classes 10: %d %s", rc, out_buf);
    /* resuming with another class count is refused */
    char ck[600];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", out);
    rc = run("train", "--resume", ck, "--data", nine, "--device", "cpu", "--classes", "12", "--max-steps", "3",
             "--out", tmp_path("again"), "--progress", "off", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "10 classes") && strstr(out_buf, "12"), "resume with --classes 12: %d %s",
                  rc, out_buf);
    /* ... and without --classes it keeps the checkpoint's 10, though the training labels reach 8 */
    rc = run("train", "--resume", ck, "--data", nine, "--device", "cpu", "--max-steps", "3", "--out", tmp_path("again"),
             "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "resume without --classes: %d %s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

START_TEST(test_resume_fp16_mlp) {
    /* 600 / 32 = 19 steps per epoch (18 full + 1 padded): 30 steps cross an epoch boundary and the padded batch;
     * the fault injected at iteration 20 (after the checkpoint at 13) is skipped and halves the loss scale. */
    const char *extra[] = {"--inject-nonfinite", "20", "--growth-interval", "7", NULL};
    resume_case("mlp", "fp16", extra, 30, 13);
}
END_TEST

/* DeepSpeed-style hysteresis crosses the checkpoint: with --hysteresis 2 the overflow injected at iteration 5 is
 * tolerated at the same scale and uses up the budget (hysteresis_left 2 -> 1), which the checkpoint at 8 records; a
 * resume that refilled it would end with hysteresis_left 2 instead of 1 (the "scaler" metadata compared). No growth
 * within 12 steps (interval 100), so nothing refills it in the straight run. */
START_TEST(test_resume_fp16_hysteresis) {
    const char *extra[] = {"--hysteresis", "2", "--inject-nonfinite", "5", "--growth-interval", "100", NULL};
    resume_case("mlp", "fp16", extra, 12, 8);
}
END_TEST

/* A floor hit before the checkpoint: the floor is the initial scale 2^16, so the overflow injected at 5 backs off
 * to 2^15, is clamped back to 2^16 and counts floor_hits 1 (the collapse warning's input), which the resumed run
 * must carry on from (the "scaler" metadata compared). */
START_TEST(test_resume_fp16_floor) {
    const char *extra[] = {"--scale-floor", "65536", "--inject-nonfinite", "5", "--growth-interval", "100", NULL};
    resume_case("mlp", "fp16", extra, 12, 8);
}
END_TEST

START_TEST(test_resume_bf16_cnn_dropout) {
    const char *extra[] = {"--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05", "--limit-train", "256", NULL};
    resume_case("cnn", "bf16", extra, 10, 4);
}
END_TEST

/* FP8 (issue #23): the scaling state (scales, amax histories) crosses the checkpoint: a delayed-scaling fp8 run
 * whose 4-step amax window rolls over the resume point, and an mxfp8 run, resume bit for bit; the checkpoint holds
 * the state tensors, eval of it reproduces the run's accuracy, and a changed FP8 setting is refused. */
START_TEST(test_resume_fp8) {
    const char *extra[] = {"--amax-history", "4", "--fp8-margin", "1", NULL};
    resume_case("mlp", "fp8", extra, 12, 5);
    const char *extra_mx[] = {"--mx-scale", "rceil", NULL};
    resume_case("mlp", "mxfp8", extra_mx, 8, 3);
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *first = tmp_path("first");
    int rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp8-e4m3", "--fp8-scaling", "current",
                 "--max-steps", "3", "--limit-test", "64", "--progress", "off", "--out", first, NULL);
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "FP8 GEMMs (current scaling") && strstr(out_buf, "fc3   BF16"), "%s", out_buf);
    char ck[600];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", first);
    mpt_checkpoint *c = NULL;
    ck_assert(mpt_checkpoint_open(ck, NULL, 0, &c) == MPT_OK);
    const mpt_checkpoint_tensor *st = mpt_checkpoint_find(c, "amp.fp8_state");
    ck_assert(st && st->ndim == 2 && st->shape[0] == 6 && st->shape[1] == 3); /* fc1, fc2: x, weight, dy */
    ck_assert(mpt_checkpoint_find(c, "amp.fp8_amax_history") && strstr(mpt_checkpoint_meta_get(c, "fp8"), "fc2.dy"));
    mpt_checkpoint_close(&c);
    json_t *j = load_summary(first);
    char want[64];
    snprintf(want, sizeof want, "test accuracy %.2f%%",
             100.0 * json_number_value(json_object_get(j, "final_test_accuracy")));
    json_decref(j);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "64", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) != NULL, "eval of an fp8 checkpoint (want '%s'): %d %s", want, rc,
                  out_buf);
    rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--fp8-scaling", "delayed", "--out",
             tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--fp8-scaling delayed conflicts with the checkpoint's current"),
                  "changed --fp8-scaling on resume: %d %s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

/* Quantization-aware training (issue #38): lenet5 (convolutions and linear layers) in bf16 with --qat int4 resumes bit
 * for bit (the working copies are rebuilt from the masters); the run says what --qat does, the checkpoint's config
 * records "qat": "int4" and summary.json's precision map marks the quantized weights; a run without --qat writes no
 * "qat" key (so its config is byte for byte the one written before the option existed); eval reproduces the run's
 * accuracy; --qat int8 on resume, and --qat with an fp8 mode or --master-weights none, are refused naming --qat. */
START_TEST(test_resume_qat) {
    const char *extra[] = {"--qat", "int4", "--limit-train", "256", NULL};
    resume_case("lenet5", "bf16", extra, 10, 4);
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *qat = tmp_path("qat"), *plain = tmp_path("plain");
    int rc = run("train", "--data", data, "--device", "cpu", "--model", "lenet5", "--qat", "int4", "--max-steps", "3",
                 "--limit-test", "64", "--progress", "off", "--out", qat, NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "--qat int4: the forward pass reads the linear and conv weights "
                                             "fake-quantized to INT4 per output channel"),
                  "train --qat failed (%d): %s", rc, out_buf);
    char ck[600];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", qat);
    mpt_checkpoint *c = NULL;
    ck_assert(mpt_checkpoint_open(ck, NULL, 0, &c) == MPT_OK);
    ck_assert_msg(strstr(mpt_checkpoint_meta_get(c, "config"), "\"qat\":\"int4\"") != NULL, "%s",
                  mpt_checkpoint_meta_get(c, "config"));
    mpt_checkpoint_close(&c);
    json_t *j = load_summary(qat);
    json_t *map = json_object_get(j, "precision_map");
    int marked = 0;
    for (size_t i = 0; i < json_array_size(map); i++) {
        json_t *q = json_object_get(json_array_get(map, i), "qat");
        const char *node = json_string_value(json_object_get(json_array_get(map, i), "node"));
        if (q) {
            ck_assert_str_eq(json_string_value(json_object_get(q, "weight")), "int4");
            marked++;
        }
        if (strcmp(node, "conv1") == 0 || strcmp(node, "fc3") == 0) ck_assert_msg(q != NULL, "%s is not marked", node);
    }
    ck_assert_int_eq(marked, 5); /* conv1, conv2, fc1, fc2, fc3 */
    char want[64];
    snprintf(want, sizeof want, "test accuracy %.2f%%", 100.0 * json_number_value(json_object_get(j, "final_test_accuracy")));
    json_decref(j);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "64", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want), "eval of a QAT checkpoint (want '%s'): %d %s", want, rc, out_buf);
    rc = run("train", "--data", data, "--device", "cpu", "--max-steps", "1", "--limit-test", "64", "--progress", "off",
             "--out", plain, NULL);
    ck_assert_msg(rc == 0, "%s", out_buf);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", plain);
    ck_assert(mpt_checkpoint_open(ck, NULL, 0, &c) == MPT_OK);
    ck_assert_msg(strstr(mpt_checkpoint_meta_get(c, "config"), "qat") == NULL, "%s", mpt_checkpoint_meta_get(c, "config"));
    mpt_checkpoint_close(&c);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", qat);
    rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--qat", "int8", "--out", tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--qat"), "--qat changed on resume: %d %s", rc, out_buf);
    rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp8", "--qat", "int8", "--out",
             tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--qat int8 conflicts with --precision fp8"), "%d %s", rc, out_buf);
    rc = run("train", "--data", data, "--device", "cpu", "--precision", "bf16", "--master-weights", "none", "--qat",
             "int4", "--out", tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--qat int4 needs --master-weights fp32"), "%d %s", rc, out_buf);
    rc = run("train", "--data", data, "--device", "cpu", "--qat", "int2", "--out", tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--qat: expected one of none, int8, int4, found 'int2'"), "%d %s", rc,
                  out_buf);
    rm_tmpdir();
}
END_TEST

/* Post-training quantization (issue #38): `eval --quantize` of an fp32 mlp reports the unquantized accuracy plain
 * eval reports, the quantized one, the memory and a row per layer; with INT8 activations the calibrated input scales;
 * a lenet5 checkpoint runs its convolutions through the integer path; a checkpoint trained with --qat int4, quantized
 * to INT4 per channel, is the model it was trained as (same accuracy, output errors 0); a checkpoint without FP32
 * masters quantizes its BF16 weights (to BF16: unchanged); the flags that need --quantize
 * or --activations int8 are refused without them, naming them. */
START_TEST(test_eval_quantize) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *mlp = tmp_path("mlp"), *lenet = tmp_path("lenet"), *qat = tmp_path("qat");
    const char *dirs[3] = {mlp, lenet, qat};
    const char *models[3] = {"mlp", "lenet5", "mlp"};
    for (int i = 0; i < 3; i++) {
        int rc = run("train", "--data", data, "--device", "cpu", "--model", models[i], "--max-steps", "6", "--limit-test",
                     "100", "--progress", "off", "--qat", i == 2 ? "int4" : "none", "--out", dirs[i], NULL);
        ck_assert_msg(rc == 0, "train %s failed (%d): %s", models[i], rc, out_buf);
    }
    char ck[600], want[96];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", mlp);
    int rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "100", NULL);
    ck_assert_msg(rc == 0, "%s", out_buf);
    const char *acc = strstr(out_buf, "test accuracy ");
    ck_assert(acc != NULL);
    double a = strtod(acc + strlen("test accuracy "), NULL);
    snprintf(want, sizeof want, "test accuracy: unquantized %.2f%%, quantized ", a);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "100", "--quantize", "int8",
             NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) && strstr(out_buf, "| fc1 | ") && strstr(out_buf, "| fc3 | ") &&
                      strstr(out_buf, "weights INT8, one scale per output channel") &&
                      strstr(out_buf, "in FP32 -> ") && strstr(out_buf, "activations unquantized"),
                  "want '%s': %d %s", want, rc, out_buf);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "100", "--quantize", "int4",
             "--granularity", "tensor", "--activations", "int8", "--calibrate", "2", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) && strstr(out_buf, "input scale") &&
                      strstr(out_buf, "one scale per tensor") && strstr(out_buf, "exact int32 sums") &&
                      strstr(out_buf, "(2 batches, file order)"),
                  "%d %s", rc, out_buf);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", lenet);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "100", "--quantize", "int8",
             "--activations", "int8", "--calibrate", "1", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "| conv1 | ") && strstr(out_buf, "| conv2 | ") && strstr(out_buf, "| fc3 | "),
                  "%d %s", rc, out_buf);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", qat);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "100", "--quantize", "int4",
             NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "trained with --qat int4") && strstr(out_buf, "(+0.00 pp)"), "%d %s", rc,
                  out_buf);
    for (const char *p = strstr(out_buf, "| fc1 |"); p && strncmp(p, "| fc", 4) == 0; p = strchr(p, '\n') + 1)
        ck_assert_msg(strstr(p, "| 0.000e+00 |") && strstr(p, "| 0.000e+00 |") < strchr(p, '\n'),
                      "a QAT model quantized to its own grid changed: %s", out_buf);
    /* a checkpoint without FP32 masters (--master-weights none) holds BF16 weights: they are what is quantized, read as
     * BF16 (not as FP32 bytes). BF16 values rounded to BF16 are themselves, so --quantize bf16 changes no weight,
     * no output and no accuracy; INT8's amax is a weight's magnitude (the synthetic mlp's weights lie within 1) */
    const char *nomaster = tmp_path("nomaster");
    rc = run("train", "--data", data, "--device", "cpu", "--precision", "bf16", "--master-weights", "none",
             "--max-steps", "6", "--limit-test", "100", "--progress", "off", "--out", nomaster, NULL);
    ck_assert_msg(rc == 0, "%s", out_buf);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", nomaster);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "100", "--quantize", "bf16",
             NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "(+0.00 pp)") && strstr(out_buf, "it holds no FP32 masters, so its BF16 "
                  "weights") && strstr(out_buf, "against the BF16 weights"), "%d %s", rc, out_buf);
    for (const char *p = strstr(out_buf, "| fc1 |"); p && strncmp(p, "| fc", 4) == 0; p = strchr(p, '\n') + 1)
        ck_assert_msg(strstr(p, "| 0.000e+00 | 0.000e+00 |") && strstr(p, "| 0.000e+00 | 0.000e+00 |") < strchr(p, '\n'),
                      "BF16 weights rounded to BF16 changed: %s", out_buf);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "100", "--quantize", "int8",
             NULL);
    ck_assert_msg(rc == 0, "%d %s", rc, out_buf);
    for (const char *p = strstr(out_buf, "| fc1 |"); p && strncmp(p, "| fc", 4) == 0; p = strchr(p, '\n') + 1) {
        const char *c = strchr(p + 2, '|');
        c = c ? strchr(c + 1, '|') : NULL; /* | name | weights | amax | */
        const double amax = c ? strtod(c + 1, NULL) : -1.0;
        ck_assert_msg(amax > 0.0 && amax < 1.0, "a BF16 weight's amax read as %g: %s", amax, out_buf);
    }
    /* data of another shape: the message gives both shapes in full words (the data's class count only when it is
     * not the checkpoint's: its labels, 0..2, fit the checkpoint's 10) */
    const char *small = tmp_path("small");
    ck_assert(mkdir(small, 0755) == 0);
    mpt_mnist sd;
    ck_assert_int_eq(mpt_synthetic_blobs(&sd, 32, 16, 196, 3, 7), MPT_OK);
    ck_assert_msg(mpt_mnist_save(small, &sd, 0) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&sd);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", mlp);
    rc = run("eval", "--checkpoint", ck, "--data", small, "--device", "cpu", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "its network was built for 28 x 28 images with 1 channel(s) and 10 "
                  "classes") && strstr(out_buf, "holds 14 x 14 images with 1 channel(s)\n"), "%d %s", rc, out_buf);
    /* the other way round, a 3-class checkpoint against 10-class data: the labels do not fit its head, which is said
     * as the checkpoint's, not as a --classes the user never gave */
    const char *small_run = tmp_path("small-run");
    rc = run("train", "--data", small, "--device", "cpu", "--max-steps", "2", "--progress", "off", "--out", small_run,
             NULL);
    ck_assert_msg(rc == 0, "%d %s", rc, out_buf);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", small_run);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", NULL);
    ck_assert_msg(rc == 1 && strstr(out_buf, "its network has 3 classes, and --data") &&
                      strstr(out_buf, "(is it the data the checkpoint was trained on?)") && !strstr(out_buf, "--classes"),
                  "%d %s", rc, out_buf);
    /* usage */
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", qat);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--granularity", "tensor", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "give --quantize"), "%d %s", rc, out_buf);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--quantize", "fp8-e4m3", "--activations", "int8", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--activations int8 runs integer GEMMs"), "%d %s", rc, out_buf);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--quantize", "int8", "--calibrate", "4", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--calibrate sets the INT8 activations"), "%d %s", rc, out_buf);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--quantize", "int3", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--quantize: expected one of int8, int4, fp8-e4m3, bf16, found 'int3'"), "%d %s",
                  rc, out_buf);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--quantize", "int8", "--granularity", "row", NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--granularity: expected one of channel, tensor"), "%d %s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

/* ---- the safeguard switches (issue #10) ----------------------------------------------------------------------- */

/* A string from summary.json's "config" object. */
static const char *cfg_str(json_t *j, const char *key) {
    json_t *v = json_object_get(json_object_get(j, "config"), key);
    ck_assert_msg(v && json_is_string(v), "summary config has no \"%s\"", key);
    return json_string_value(v);
}

/* Without masters, with stochastic rounding and BF16 optimizer state, a run resumes bit-exactly (the rounding
 * bits come from (seed, iteration, element), not from a stream position), and a changed switch is refused
 * with a one-line message naming the flag, the checkpoint's value and the given one. */
START_TEST(test_resume_switches) {
    const char *extra[] = {"--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05", "--master-weights", "none",
                           "--update-rounding", "stochastic", "--optimizer-state", "bf16", NULL};
    resume_case("mlp", "bf16", extra, 12, 5);
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *first = tmp_path("first");
    int rc = run("train", "--data", data, "--device", "cpu", "--precision", "bf16", "--master-weights", "none",
                 "--optimizer-state", "fp16", "--scaler", "deepspeed", "--max-steps", "2", "--limit-test", "64",
                 "--progress", "off", "--out", first, NULL);
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    char ck[600];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", first);
    static const char *const changes[][2] = {{"--master-weights", "fp32"}, {"--optimizer-state", "fp32"},
                                             {"--update-rounding", "stochastic"}, {"--hysteresis", "1"},
                                             {"--scaler", "pytorch"}, {"--tf32-conv", "on"}, {"--nonfinite", "apply"},
                                             {"--cpu-kernels", "native"}};
    static const char *const ck_values[] = {"none", "fp16", "nearest", "2", "deepspeed", "off", "skip", "emulate"};
    for (size_t k = 0; k < sizeof changes / sizeof changes[0]; k++) {
        rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", changes[k][0], changes[k][1], "--out",
                 tmp_path("bad"), NULL);
        char want[160];
        snprintf(want, sizeof want, "%s %s conflicts with the checkpoint's %s", changes[k][0], changes[k][1],
                 ck_values[k]);
        ck_assert_msg(rc == 2 && strstr(out_buf, want) != NULL, "resume with %s %s: exit %d, expected 2 and '%s': %s",
                      changes[k][0], changes[k][1], rc, want, out_buf);
        ck_assert_msg(strchr(out_buf, '\n') == out_buf + strlen(out_buf) - 1, "not one line: %s", out_buf);
    }
    /* the same values given again are accepted */
    rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--master-weights", "none", "--scaler",
             "deepspeed", "--max-steps", "3", "--limit-test", "64", "--progress", "off", "--out", tmp_path("again"),
             NULL);
    ck_assert_msg(rc == 0, "resume with the same switches failed (%d): %s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

/* A file's bytes as a NUL-terminated string (malloc'd; text files only), or NULL when it cannot be read. */
static char *file_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    size_t n = 0, cap = 0, got;
    char chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n + got + 1 > cap) {
            cap = 2 * (n + got + 1);
            b = realloc(b, cap);
        }
        memcpy(b + n, chunk, got);
        n += got;
    }
    fclose(f);
    if (!b) b = calloc(1, 1);
    b[n] = '\0';
    return b;
}

/* A resume whose checkpoint already reached --epochs (or --max-steps) has nothing to train: it says so in one line,
 * exits 0 and leaves the finished run's files as they were (before: a summary.json of 0 epochs, time_per_epoch_s 0
 * and no final_train_loss replaced the run's, with "stopped at step N" and a best epoch that never ran), and writes
 * no other --out either. */
START_TEST(test_resume_nothing_left) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *dirs[2] = {tmp_path("epochs"), tmp_path("steps")};
    const char *limit[2][2] = {{"--epochs", "1"}, {"--max-steps", "3"}};
    for (int k = 0; k < 2; k++) {
        int rc = run("train", "--data", data, "--device", "cpu", limit[k][0], limit[k][1], "--limit-test", "64",
                     "--progress", "off", "--out", dirs[k], NULL);
        ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
        static const char *const files[] = {"summary.json", "metrics.csv", "epochs.csv", "checkpoint.safetensors"};
        char *before[4], p[600], ck[600];
        for (int f = 0; f < 4; f++) {
            snprintf(p, sizeof p, "%s/%s", dirs[k], files[f]);
            before[f] = file_text(p);
            ck_assert_msg(before[f] != NULL, "%s missing", p);
        }
        snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dirs[k]);
        const char *outs[2] = {dirs[k], tmp_path("elsewhere")};
        for (int o = 0; o < 2; o++) {
            rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", limit[k][0], limit[k][1],
                     "--limit-test", "64", "--progress", "off", "--out", outs[o], NULL);
            ck_assert_msg(rc == 0, "resume with nothing left (%s %s): exit %d: %s", limit[k][0], limit[k][1], rc,
                          out_buf);
            ck_assert_msg(strstr(out_buf, "nothing to do: the checkpoint is at ") != NULL &&
                          strchr(out_buf, '\n') == out_buf + strlen(out_buf) - 1,
                          "not one 'nothing to do' line: %s", out_buf);
            if (k == 0) ck_assert_msg(strstr(out_buf, "epoch 1 of 1") != NULL, "no epoch position: %s", out_buf);
            ck_assert_msg(strstr(out_buf, "stopped at step") == NULL, "evaluated as a stop: %s", out_buf);
        }
        for (int f = 0; f < 4; f++) {
            snprintf(p, sizeof p, "%s/%s", dirs[k], files[f]);
            char *after = file_text(p);
            ck_assert_msg(after != NULL && strcmp(after, before[f]) == 0, "%s changed by a resume with nothing left",
                          p);
            free(after);
            free(before[f]);
        }
        struct stat st;
        ck_assert_msg(stat(tmp_path("elsewhere"), &st) != 0, "a resume with nothing left created its --out");
    }
    rm_tmpdir();
}
END_TEST

/* A run stopped inside an epoch (--max-steps) completed no epoch: the per-epoch times are undefined, null for the
 * host clock as for the CPU time, their lists empty (before: time_per_epoch_s held the partial epoch's time while
 * time_per_epoch_cpu_s was null); samples_per_s is the rate of the steps it ran; best_epoch is the epoch of the final
 * evaluation, the one it stopped in (docs/outputs.md). */
START_TEST(test_partial_epoch_summary) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *dir = tmp_path("partial");
    int rc = run("train", "--data", data, "--device", "cpu", "--max-steps", "2", "--limit-test", "64", "--progress",
                 "off", "--out", dir, NULL); /* 600 images in batches of 128: 5 steps an epoch */
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    json_t *j = load_summary(dir);
    ck_assert_int_eq((int)jnum(j, "epochs_run"), 0);
    ck_assert_int_eq((int)jnum(j, "steps"), 2);
    static const char *const undefined[] = {"time_per_epoch_s", "time_per_epoch_cpu_s", "final_train_loss"};
    for (size_t i = 0; i < sizeof undefined / sizeof undefined[0]; i++)
        ck_assert_msg(json_is_null(json_object_get(j, undefined[i])), "%s is not null after no complete epoch",
                      undefined[i]);
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "epoch_times_s")), 0);
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "epoch_cpu_times_s")), 0);
    ck_assert_msg(jnum(j, "samples_per_s") > 0.0, "no rate of the 2 steps");
    ck_assert_int_eq((int)jnum(j, "best_epoch"), 1);
    ck_assert(jnum(j, "best_test_accuracy") == jnum(j, "final_test_accuracy"));
    json_decref(j);
    rm_tmpdir();
}
END_TEST

/* A run resumed in its own directory without --telemetry keeps the earlier part's telemetry.csv, exponents.csv and
 * numerics plots, and says so (before, the two CSVs were removed while the plots drawn from them stayed); a new run
 * there without telemetry removes all of them, the plots included (they stayed before). */
START_TEST(test_resume_keeps_telemetry) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *dir = tmp_path("tel");
    int rc = run("train", "--data", data, "--device", "cpu", "--max-steps", "4", "--telemetry", "2", "--limit-test",
                 "64", "--progress", "off", "--out", dir, NULL);
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    static const char *const files[] = {"telemetry.csv", "exponents.csv", "numerics.png", "numerics.gp"};
    enum { N_FILES = sizeof files / sizeof files[0] };
    char *before[N_FILES], p[600], ck[600];
    for (int f = 0; f < N_FILES; f++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[f]);
        before[f] = file_text(p); /* the plot files are there when gnuplot is */
        ck_assert_msg(f >= 2 || before[f] != NULL, "%s missing", p);
    }
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--max-steps", "5", "--limit-test", "64",
             "--progress", "off", "--out", dir, NULL);
    ck_assert_msg(rc == 0, "resume failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "keep the earlier part's, up to step 4") != NULL, "no note of the kept telemetry: %s",
                  out_buf);
    for (int f = 0; f < N_FILES; f++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[f]);
        char *after = file_text(p);
        ck_assert_msg((after == NULL) == (before[f] == NULL) && (!after || strcmp(after, before[f]) == 0),
                      "%s not kept by the resume without --telemetry", p);
        free(after);
        free(before[f]);
    }
    rc = run("train", "--data", data, "--device", "cpu", "--max-steps", "2", "--limit-test", "64", "--progress", "off",
             "--out", dir, NULL);
    ck_assert_msg(rc == 0, "new run failed (%d): %s", rc, out_buf);
    static const char *const gone[] = {"telemetry.csv", "exponents.csv", "numerics.png", "numerics.gp",
                                       "numerics_twin.dat"};
    for (size_t f = 0; f < sizeof gone / sizeof gone[0]; f++) {
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, gone[f]);
        ck_assert_msg(stat(p, &st) != 0, "%s of the earlier run stayed beside a new run without telemetry", p);
    }
    rm_tmpdir();
}
END_TEST

/* --cpu-kernels native (where the CPU and build have it): the bf16 run says so, records it in summary.json (config,
 * cpu_kernels, each GEMM node's kernels) and resumes bit-exactly; an fp32 run with it is emulated and says so. */
START_TEST(test_cpu_kernels_native) {
    char why[256];
    if (!mpt_cpu_native_available(why, sizeof why)) {
        printf("test_cpu_kernels_native: skipped, native is unavailable here: %s\n", why);
        make_tmpdir();
        const char *data = write_synthetic(NULL);
        int rc = run("train", "--data", data, "--device", "cpu", "--precision", "bf16", "--cpu-kernels", "native",
                     "--max-steps", "1", "--progress", "off", "--out", tmp_path("n"), NULL);
        ck_assert_msg(rc == 1 && strstr(out_buf, why), "native where unavailable: exit %d, expected 1 and '%s': %s",
                      rc, why, out_buf);
        rm_tmpdir();
        return;
    }
    const char *extra[] = {"--cpu-kernels", "native", NULL};
    resume_case("mlp", "bf16", extra, 12, 5);
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *precs[2] = {"bf16", "fp32"};
    for (int k = 0; k < 2; k++) {
        const char *out = tmp_path(precs[k]);
        int rc = run("train", "--data", data, "--device", "cpu", "--precision", precs[k], "--cpu-kernels", "native",
                     "--max-steps", "2", "--limit-test", "64", "--progress", "off", "--out", out, NULL);
        ck_assert_msg(rc == 0, "train %s --cpu-kernels native failed (%d): %s", precs[k], rc, out_buf);
        ck_assert_msg(strstr(out_buf, k == 0 ? "kernels native (bf16 on the CPU's BF16 units"
                                             : "--cpu-kernels native changes nothing in fp32") != NULL,
                      "%s: the run does not say what native does: %s", precs[k], out_buf);
        json_t *j = load_summary(out);
        ck_assert_str_eq(cfg_str(j, "cpu-kernels"), "native");
        json_t *ck = json_object_get(j, "cpu_kernels");
        ck_assert_str_eq(json_string_value(json_object_get(ck, "set")), "native");
        ck_assert_msg(strstr(json_string_value(json_object_get(ck, "engine")), "oneDNN") != NULL, "engine: %s",
                      json_string_value(json_object_get(ck, "engine")));
        json_t *fc1 = json_array_get(json_object_get(j, "precision_map"), 1);
        ck_assert_str_eq(json_string_value(json_object_get(fc1, "node")), "fc1");
        ck_assert_str_eq(json_string_value(json_object_get(fc1, "kernels")), k == 0 ? "native:onednn" : "emulate:onednn");
        json_decref(j);
    }
    /* fp8 on the mlp at batch 24 (not a multiple of 16): every layer runs BF16, natively; the run says so and does
     * not claim that native changes nothing (it did, before the mode table: "changes nothing in fp8") */
    const char *out = tmp_path("fp8");
    int rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp8", "--cpu-kernels", "native",
                 "--batch-size", "24", "--max-steps", "2", "--limit-test", "64", "--progress", "off", "--out", out,
                 NULL);
    ck_assert_msg(rc == 0, "train fp8 --cpu-kernels native failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "changes nothing in fp8") == NULL, "fp8: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "kernels native (bf16 on the CPU's BF16 units") != NULL &&
                      strstr(out_buf, "FP8 GEMMs emulated") != NULL && strstr(out_buf, "its FP8 GEMMs stay emulated"),
                  "fp8: the run does not say what native does: %s", out_buf);
    json_t *j = load_summary(out);
    json_t *fc1 = json_array_get(json_object_get(j, "precision_map"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(fc1, "kernels")), "native:onednn");
    json_decref(j);
    rm_tmpdir();
}
END_TEST

/* --cpu-kernels auto (issue 32 B): a bf16 run measures both kernel sets where native can run and keeps the faster; it
 * records the set it kept (config, cpu_kernels.set) and both times, and trains exactly as that set given by hand does
 * (same weights, bit for bit); fp32 has no bf16 GEMM and resolves to emulate without measuring; a resume with auto
 * keeps the recorded set. Where native is unavailable, auto is emulate and says why. */
START_TEST(test_cpu_kernels_auto) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    char why[256];
    const int native_ok = mpt_cpu_native_available(why, sizeof why);
    const char *a = tmp_path("auto");
    int rc = run("train", "--data", data, "--device", "cpu", "--precision", "bf16", "--cpu-kernels", "auto",
                 "--max-steps", "4", "--limit-test", "64", "--progress", "off", "--out", a, NULL);
    ck_assert_msg(rc == 0, "train --cpu-kernels auto failed (%d): %s", rc, out_buf);
    json_t *j = load_summary(a);
    const char *set = cfg_str(j, "cpu-kernels");
    json_t *ck = json_object_get(j, "cpu_kernels");
    ck_assert_str_eq(json_string_value(json_object_get(ck, "set")), set);
    json_t *au = json_object_get(ck, "auto");
    ck_assert_msg(json_is_object(au), "summary.json cpu_kernels.auto missing");
    if (native_ok) {
        const double e = json_number_value(json_object_get(au, "emulate_step_s"));
        const double n = json_number_value(json_object_get(au, "native_step_s"));
        ck_assert_msg(e > 0 && n > 0, "auto did not measure both sets: %g, %g", e, n);
        ck_assert_str_eq(set, n < e ? "native" : "emulate");
    } else {
        ck_assert_str_eq(set, "emulate");
        ck_assert_msg(strstr(out_buf, "auto: emulate (") != NULL, "%s", out_buf);
    }
    /* the same run with the chosen set given by hand: the same weights */
    char ka[600], kb[600];
    const char *b = tmp_path("byhand");
    rc = run("train", "--data", data, "--device", "cpu", "--precision", "bf16", "--cpu-kernels", set, "--max-steps",
             "4", "--limit-test", "64", "--progress", "off", "--out", b, NULL);
    ck_assert_msg(rc == 0, "train --cpu-kernels %s failed (%d): %s", set, rc, out_buf);
    snprintf(ka, sizeof ka, "%s/checkpoint.safetensors", a);
    snprintf(kb, sizeof kb, "%s/checkpoint.safetensors", b);
    assert_same_tensors(ka, kb, 1);
    /* resuming with auto keeps the recorded set (no conflict, no new measurement) */
    rc = run("train", "--resume", ka, "--data", data, "--device", "cpu", "--cpu-kernels", "auto", "--max-steps", "6",
             "--limit-test", "64", "--progress", "off", "--out", tmp_path("resumed"), NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "measured") == NULL, "resume with auto (%d): %s", rc, out_buf);
    json_decref(j);
    /* fp32: nothing to choose */
    const char *f = tmp_path("fp32");
    rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp32", "--cpu-kernels", "auto", "--max-steps",
             "2", "--limit-test", "64", "--progress", "off", "--out", f, NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "auto: emulate (no bf16 GEMM in this precision)") != NULL, "%s", out_buf);
    j = load_summary(f);
    ck_assert_str_eq(cfg_str(j, "cpu-kernels"), "emulate");
    json_decref(j);
    rm_tmpdir();
}
END_TEST

/* OpenBLAS on a CPU it does not recognise (issue 32): where it runs the GEMMs and no OPENBLAS_CORETYPE is set, a
 * detected core older than the CPU's instructions (MPT_TEST_OPENBLAS_DETECTED stands in for OpenBLAS's detection) is
 * replaced by the best core for them, and info says who chose it; a user's OPENBLAS_CORETYPE is kept, and with oneDNN
 * running the GEMMs nothing is chosen. */
START_TEST(test_openblas_core_choice) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) {
        printf("test_openblas_core_choice: skipped, no AVX2 here\n");
        return;
    }
    setenv("MPT_CPU_ENGINE", "openblas", 1);
    setenv("MPT_TEST_OPENBLAS_DETECTED", "Prescott", 1);
    unsetenv("OPENBLAS_CORETYPE");
    int rc = run("info", NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out_buf, "(chosen by mptrain: OpenBLAS detected Prescott") != NULL, "%s", out_buf);
    ck_assert_msg(strstr(out_buf, "core Prescott") == NULL, "the core was not replaced: %s", out_buf);
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    rc = run("info", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "OPENBLAS_CORETYPE=Haswell (from the environment)") &&
                      strstr(out_buf, "core Haswell,"), "a user's OPENBLAS_CORETYPE: %s", out_buf);
    unsetenv("OPENBLAS_CORETYPE");
    setenv("MPT_TEST_OPENBLAS_DETECTED", "SomethingNew", 1); /* a core the table does not know: left alone */
    rc = run("info", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "core as detected by OpenBLAS") != NULL, "%s", out_buf);
    unsetenv("MPT_TEST_OPENBLAS_DETECTED");
    unsetenv("MPT_CPU_ENGINE");
}
END_TEST

/* Epoch times measure training: the telemetry's own time is subtracted and reported apart (issue 32). With every
 * hook made 150 ms of CPU work longer (MPT_TELEMETRY_TEST_DELAY_MS), 8 telemetry steps add at least 2.4 s to both
 * clocks; the epoch's training time stays far below that, the telemetry time records it. Before the subtraction the
 * epoch time held all of it. */
START_TEST(test_epoch_time_excludes_telemetry) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *out = tmp_path("slow");
    setenv("MPT_TELEMETRY_TEST_DELAY_MS", "150", 1);
    int rc = run("train", "--data", data, "--device", "cpu", "--epochs", "1", "--batch-size", "75", "--telemetry",
                 "1", "--limit-test", "64", "--progress", "off", "--out", out, NULL); /* 600 / 75: 8 steps */
    unsetenv("MPT_TELEMETRY_TEST_DELAY_MS");
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    json_t *j = load_summary(out);
    const double tel = jnum(j, "telemetry_time_s"), tel_cpu = jnum(j, "telemetry_cpu_time_s");
    json_t *ep = json_object_get(j, "epoch_times_s"), *cp = json_object_get(j, "epoch_cpu_times_s");
    ck_assert_msg(json_array_size(ep) == 1 && json_array_size(cp) == 1, "one epoch expected");
    const double train = json_number_value(json_array_get(ep, 0)), cpu = json_number_value(json_array_get(cp, 0));
    ck_assert_msg(tel >= 8 * 2 * 0.15 && tel_cpu >= 8 * 2 * 0.15 * 0.9,
                  "telemetry time %.3f s host, %.3f s CPU: expected at least 2.4 s (16 hooks of 150 ms)", tel, tel_cpu);
    ck_assert_msg(train < 0.5 * tel && cpu < 0.5 * tel_cpu,
                  "the epoch time %.3f s (%.3f s CPU) still holds the telemetry's %.3f s (%.3f s CPU)", train, cpu, tel,
                  tel_cpu);
    ck_assert_msg(strstr(out_buf, "(telemetry ") != NULL, "the epoch line does not say the telemetry time: %s", out_buf);
    json_decref(j);
    rm_tmpdir();
}
END_TEST

/* In fp32, --master-weights none changes nothing (same bits) and the run says so; the memory report of a bf16
 * run without masters has no master category and BF16 optimizer state takes half the FP32 state's bytes; the
 * scaler presets and knobs land in summary.json; --tf32-matmul on turns fp32's GEMMs to TF32 and
 * NVIDIA_TF32_OVERRIDE=0 wins, announced. */
START_TEST(test_switches_in_outputs) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *dirs[2] = {tmp_path("fp32-masters"), tmp_path("fp32-none")};
    for (int k = 0; k < 2; k++) {
        int rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp32", "--max-steps", "4",
                     "--limit-test", "64", "--progress", "off", "--master-weights", k ? "none" : "fp32", "--out",
                     dirs[k], NULL);
        ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    }
    ck_assert_msg(strstr(out_buf, "--master-weights none changes nothing in fp32") != NULL, "no note: %s", out_buf);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/checkpoint.safetensors", dirs[0]);
    snprintf(b, sizeof b, "%s/checkpoint.safetensors", dirs[1]);
    assert_same_tensors(a, b, 1);

    /* bf16: masters none and bf16 state in the memory report; fp32 state for comparison */
    const char *bdirs[2] = {tmp_path("bf16-fp32state"), tmp_path("bf16-none-bf16state")};
    for (int k = 0; k < 2; k++) {
        int rc = run("train", "--data", data, "--device", "cpu", "--precision", "bf16", "--max-steps", "2",
                     "--limit-test", "64", "--progress", "off", "--master-weights", k ? "none" : "fp32",
                     "--optimizer-state", k ? "bf16" : "fp32", "--out", bdirs[k], NULL);
        ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    }
    ck_assert_msg(strstr(out_buf, "masters none (--master-weights none)") != NULL, "memory line: %s", out_buf);
    json_t *j0 = load_summary(bdirs[0]), *j1 = load_summary(bdirs[1]);
    json_t *m0 = json_object_get(j0, "peak_memory_bytes"), *m1 = json_object_get(j1, "peak_memory_bytes");
    ck_assert_ptr_nonnull(json_object_get(m0, "master"));
    ck_assert_msg(json_object_get(m1, "master") == NULL, "a run without masters reports a master category");
    double fp32_copy = jnum(m0, "master"), o0 = jnum(m0, "optim"), o1 = jnum(m1, "optim");
    /* Adam's two state tensors, each the size of the FP32 master copy in FP32, half of it in BF16 (plus the
     * scaler state's few bytes) */
    ck_assert_msg(o0 >= 2 * fp32_copy && o1 >= fp32_copy && o1 < 0.6 * o0, "optimizer state: fp32 %.0f, bf16 %.0f bytes",
                  o0, o1);
    ck_assert_str_eq(cfg_str(j1, "master-weights"), "none");
    ck_assert_str_eq(cfg_str(j1, "optimizer-state"), "bf16");
    json_decref(j0);
    json_decref(j1);

    /* scaler presets and knobs */
    const char *ds = tmp_path("deepspeed");
    int rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp16", "--scaler", "keras",
                 "--hysteresis", "3", "--max-steps", "1", "--limit-test", "64", "--progress", "off", "--out", ds, NULL);
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    json_t *j = load_summary(ds);
    ck_assert_str_eq(cfg_str(j, "scaler"), "keras");
    ck_assert_str_eq(cfg_str(j, "loss-scale"), "dynamic:32768"); /* Keras's initial scale 2^15 */
    ck_assert_str_eq(cfg_str(j, "hysteresis"), "3");              /* the knob overrides the preset */
    ck_assert_str_eq(cfg_str(j, "growth-interval"), "2000");
    json_decref(j);

    /* TF32 switches and the environment override */
    const char *tf = tmp_path("tf32");
    rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp32", "--tf32-matmul", "on",
             "--max-steps", "1", "--limit-test", "64", "--progress", "off", "--out", tf, NULL);
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    j = load_summary(tf);
    json_t *node = json_array_get(json_object_get(j, "precision_map"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(node, "op")), "linear");
    ck_assert_str_eq(json_string_value(json_object_get(node, "math")), "tf32");
    json_decref(j);
    ck_assert_int_eq(setenv("NVIDIA_TF32_OVERRIDE", "0", 1), 0);
    rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp32", "--tf32-matmul", "on",
             "--max-steps", "1", "--limit-test", "64", "--progress", "off", "--out", tmp_path("tf32-off"), NULL);
    unsetenv("NVIDIA_TF32_OVERRIDE");
    ck_assert_msg(rc == 0 && strstr(out_buf, "NVIDIA_TF32_OVERRIDE=0 is set: it wins over --tf32-matmul on"),
                  "override not announced (%d): %s", rc, out_buf);
    j = load_summary(tmp_path("tf32-off"));
    node = json_array_get(json_object_get(j, "precision_map"), 1);
    ck_assert_str_eq(json_string_value(json_object_get(node, "math")), "fp32");
    json_decref(j);
    rm_tmpdir();
}
END_TEST

/* Flags that only another optimizer, schedule or loss scaling reads are noted, naming them, not silently ignored;
 * the same flags where they are read get no note. */
START_TEST(test_unused_flag_notes) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    static const note_case c[] = {
        {{"--momentum", "0.9", NULL}, "note: --momentum changes nothing with --optimizer adam", 1},
        {{"--beta1", "0.8", "--eps", "1e-6", "--optimizer", "sgd"}, "note: --beta1, --eps change nothing with --optimizer sgd", 1},
        {{"--optimizer", "sgd", "--momentum", "0.9", NULL}, "--momentum", 0},
        {{"--optimizer", "sgd", "--eps", "1e-6", NULL}, "note: --eps changes nothing with --optimizer sgd", 1},
        {{"--warmup-steps", "2", NULL}, "note: --warmup-steps changes nothing without --lr-schedule cosine", 1},
        {{"--lr-schedule", "cosine", "--warmup-steps", "1", NULL}, "--warmup-steps change", 0},
        {{"--gamma", "0.5", NULL}, "note: --gamma changes nothing without --lr-schedule step", 1},
        {{"--growth-interval", "10", NULL}, "note: --growth-interval changes nothing in fp32: dynamic loss scaling's", 1},
    };
    const char *base[] = {"mptrain", "train", "--data", data, "--device", "cpu", "--precision", "fp32", "--max-steps",
                          "2", "--limit-test", "64", "--progress", "off"};
    check_notes(base, (int)(sizeof base / sizeof base[0]), c, sizeof c / sizeof c[0]);
    /* a warmup as long as the --max-steps run is refused naming the flags (it named the engine's total_steps) */
    int rc = run("train", "--data", data, "--device", "cpu", "--max-steps", "2", "--lr-schedule", "cosine",
                 "--warmup-steps", "2", "--progress", "off", "--out", tmp_path("warm"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--warmup-steps 2: expected fewer than the run's 2 steps (--max-steps 2)"),
                  "(%d) %.2000s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

/* --inject-nonfinite STEP past the run's last step injected nothing and said nothing: now refused once the data gives
 * the step count, before training, naming the flag, the count and where it comes from (train and compare). Past
 * --max-steps alone it is a note: the checkpoint records it and a resumed run injects it (resume_case relies on that).
 * A step inside the run is injected (one skipped step). 600 images in batches of 100: 6 steps per epoch. */
START_TEST(test_inject_nonfinite_in_run) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    int rc = run("train", "--data", data, "--device", "cpu", "--batch-size", "100", "--epochs", "2", "--limit-test",
                 "64", "--inject-nonfinite", "12", "--progress", "off", "--out", tmp_path("e"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "mptrain train: --inject-nonfinite 12: expected an iteration below the "
                                             "run's 12 steps (--epochs 2 x 6 batches per epoch"),
                  "(%d) %.2000s", rc, out_buf);
    ck_assert_msg(!strstr(out_buf, "epoch 1/2"), "trained before refusing: %.2000s", out_buf);
    /* a flag error is said before the device is set up, and leaves no --out behind */
    ck_assert_msg(!strstr(out_buf, "device:"), "refused after the device lines: %.2000s", out_buf);
    ck_assert_msg(access(tmp_path("e"), F_OK) != 0, "%s was left behind", tmp_path("e"));
    rc = run("compare", "--precisions", "fp32,bf16", "--data", data, "--device", "cpu", "--batch-size", "100",
             "--epochs", "1", "--limit-test", "64", "--inject-nonfinite", "6", "--progress", "off", "--out",
             tmp_path("c"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "mptrain compare: --inject-nonfinite 6: expected an iteration below the "
                                             "run's 6 steps (--epochs 1 x 6"), "(%d) %.2000s", rc, out_buf);
    rc = run("train", "--data", data, "--device", "cpu", "--batch-size", "100", "--max-steps", "3", "--limit-test",
             "64", "--inject-nonfinite", "2", "--progress", "off", "--out", tmp_path("ok"), NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "3 steps, 1 skipped") && !strstr(out_buf, "injects nothing"),
                  "(%d) %.2000s", rc, out_buf);
    /* past --max-steps: a note, and the resumed run injects it */
    const char *first = tmp_path("first");
    rc = run("train", "--data", data, "--device", "cpu", "--batch-size", "100", "--max-steps", "3", "--limit-test",
             "64", "--inject-nonfinite", "4", "--progress", "off", "--out", first, NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "note: --inject-nonfinite 4 injects nothing in this invocation, which "
                                             "stops at --max-steps 3; a run resumed from its checkpoint injects it") &&
                      strstr(out_buf, "3 steps, 0 skipped"), "(%d) %.2000s", rc, out_buf);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", first);
    rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--max-steps", "6", "--limit-test", "64",
             "--progress", "off", "--out", tmp_path("resumed"), NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "6 steps, 1 skipped") && !strstr(out_buf, "injects nothing"),
                  "resumed: (%d) %.2000s", rc, out_buf);
    rm_tmpdir();
}
END_TEST

/* --nonfinite apply: a NaN gradient reaches the weights (as plain PyTorch without GradScaler): the run warns,
 * finishes, counts the step as applied (not skipped), reports non-finite weights, and writes no checkpoint of them
 * (and its closing line does not claim one): it exits 1, its last line says why and summary.json's
 * "checkpoint_refused" too; the default (skip) on the same run skips the step, keeps the weights finite and exits 0. */
START_TEST(test_nonfinite_apply) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *dirs[2] = {tmp_path("skip"), tmp_path("apply")};
    for (int k = 0; k < 2; k++) {
        int rc = run("train", "--data", data, "--device", "cpu", "--precision", "fp32", "--inject-nonfinite", "2",
                     "--max-steps", "5", "--limit-test", "64", "--progress", "off", "--nonfinite", k ? "apply" : "skip",
                     "--out", dirs[k], NULL);
        ck_assert_msg(rc == (k ? 1 : 0), "train --nonfinite %s: exit %d, expected %d: %s", k ? "apply" : "skip", rc,
                      k ? 1 : 0, out_buf);
        json_t *j = load_summary(dirs[k]);
        json_t *why = json_object_get(j, "checkpoint_refused");
        ck_assert_msg(k ? json_is_string(why) && strstr(json_string_value(why), "inf/NaN") != NULL : json_is_null(why),
                      "checkpoint_refused of --nonfinite %s", k ? "apply" : "skip");
        if (k) {
            const char *last = out_buf + strlen(out_buf) - 1; /* the final line: the failure and its reason */
            while (last > out_buf && last[-1] != '\n') last--;
            ck_assert_msg(strncmp(last, "mptrain train: failed: checkpoint.safetensors: not written", 58) == 0,
                          "the last line does not say why it failed: %s", last);
        }
        ck_assert_int_eq((int)jnum(j, "steps_skipped"), k ? 0 : 1);
        ck_assert_int_eq((int)jnum(j, "steps_nonfinite_applied"), k ? 1 : 0);
        ck_assert(json_is_true(json_object_get(j, "weights_nonfinite")) == (k == 1));
        json_decref(j);
    }
    ck_assert_msg(strstr(out_buf, "warning: --nonfinite apply") != NULL, "no warning: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "weights are non-finite") != NULL, "no verdict: %s", out_buf);
    /* the closing line names only the files written: it must not claim the refused checkpoint */
    ck_assert_msg(strstr(out_buf, "summary.json, checkpoint.safetensors}") == NULL, "claims a checkpoint: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "checkpoint.safetensors: not written") != NULL, "no checkpoint verdict: %s",
                  out_buf);
    char p[600];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dirs[1]);
    ck_assert_msg(!file_exists(p), "a checkpoint of NaN weights was written");
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dirs[0]);
    ck_assert(file_exists(p));
    rm_tmpdir();
}
END_TEST

/* ---- compare ------------------------------------------------------------------------------------------------- */

/* The concatenated FP32 masters of a run's checkpoint, in file order, as doubles; *n receives the count. */
static double *all_masters(const char *ckpt, const char *ref_order_ckpt, int64_t *n) {
    mpt_checkpoint *c = NULL, *r = NULL;
    ck_assert_msg(mpt_checkpoint_open(ckpt, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    ck_assert_msg(mpt_checkpoint_open(ref_order_ckpt, NULL, 0, &r) == MPT_OK, "%s", mpt_last_error());
    double *w = NULL;
    int64_t cnt = 0;
    for (int i = 0; i < mpt_checkpoint_n_tensors(r); i++) {
        const mpt_checkpoint_tensor *tr = mpt_checkpoint_tensor_at(r, i);
        if (strchr(tr->name, ':')) continue; /* optimizer state, not a weight */
        const mpt_checkpoint_tensor *t = mpt_checkpoint_find(c, tr->name);
        ck_assert_msg(t != NULL, "%s lacks %s", ckpt, tr->name);
        int64_t k = mpt_checkpoint_tensor_nbytes(t) / 4;
        w = realloc(w, (size_t)(cnt + k) * sizeof *w);
        float *tmp = malloc((size_t)k * sizeof *tmp);
        ck_assert_int_eq(mpt_checkpoint_read(c, tr->name, tmp, (size_t)k * 4), MPT_OK);
        for (int64_t q = 0; q < k; q++) w[cnt + q] = tmp[q];
        free(tmp);
        cnt += k;
    }
    mpt_checkpoint_close(&c);
    mpt_checkpoint_close(&r);
    *n = cnt;
    return w;
}

/* The last column of the Markdown table row that starts with "| <name> |" in text, as a number. */
static double table_last_column(const char *text, const char *name) {
    char key[32];
    snprintf(key, sizeof key, "| %s |", name);
    const char *row = strstr(text, key);
    ck_assert_msg(row != NULL, "no table row for %s in: %s", name, text);
    const char *end = strchr(row, '\n');
    ck_assert(end != NULL);
    const char *bar = end - 1; /* the row ends with "| value |" */
    while (bar > row && *bar != '|') bar--;
    const char *prev = bar - 1;
    while (prev > row && *prev != '|') prev--;
    return strtod(prev + 1, NULL);
}

START_TEST(test_compare_report) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *out = tmp_path("cmp");
    int rc = run("compare", "--data", data, "--out", out, "--precisions", "fp32,fp16,bf16", "--limit-train", "256",
                 "--limit-test", "128", "--epochs", "2", "--batch-size", "64", "--device", "cpu", "--standardize",
                 "--progress", "off", "--telemetry", "2", "--shadow", NULL);
    ck_assert_msg(rc == 0, "compare failed (%d): %s", rc, out_buf);
    static char printed[sizeof out_buf];
    memcpy(printed, out_buf, sizeof out_buf);
    /* the device choice's reason is said in full by the first run only; the others say "as above" */
    ck_assert_msg(strstr(printed, "[fp32] device: cpu (--device cpu)") != NULL, "first run's device line: %s", printed);
    ck_assert_msg(strstr(printed, "[fp16] device: cpu (the same choice as above)") != NULL &&
                      strstr(printed, "[bf16] device: cpu (the same choice as above)") != NULL,
                  "later runs repeat the device reason: %s", printed);
    const char *names[] = {"fp32", "fp16", "bf16"};
    for (int i = 0; i < 3; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s/summary.json", out, names[i]);
        ck_assert_msg(file_exists(p), "%s missing", p);
        snprintf(p, sizeof p, "%s/%s/checkpoint.safetensors", out, names[i]);
        ck_assert_msg(file_exists(p), "%s missing", p);
    }
    char p[600];
    snprintf(p, sizeof p, "%s/report.md", out);
    ck_assert_msg(file_exists(p), "report.md missing");
    ck_assert_ptr_nonnull(strstr(printed, "report.md"));
    /* The picture exists and is a PNG, unless gnuplot is missing, which the command must then say. */
    snprintf(p, sizeof p, "%s/convergence.png", out);
    if (strstr(printed, "no plot")) {
        ck_assert_msg(strstr(printed, "gnuplot") != NULL, "the plot failed without naming gnuplot: %s", printed);
        printf("test_compare_report: gnuplot unavailable, plot not checked\n");
    } else {
        FILE *f = fopen(p, "rb");
        ck_assert_msg(f != NULL, "%s missing", p);
        unsigned char magic[8];
        ck_assert_int_eq(fread(magic, 1, 8, f), 8);
        fclose(f);
        ck_assert_msg(memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0, "%s is not a PNG", p);
        ck_assert_ptr_nonnull(strstr(printed, "convergence.png"));
        snprintf(p, sizeof p, "%s/numerics.png", out);
        f = fopen(p, "rb");
        ck_assert_msg(f != NULL, "%s missing", p);
        ck_assert_int_eq(fread(magic, 1, 8, f), 8);
        fclose(f);
        ck_assert_msg(memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0, "%s is not a PNG", p);
    }
    /* Telemetry (every 2nd of 8 steps) in every run, and its section in the report. */
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s/telemetry.csv", out, names[i]);
        ck_assert_msg(file_exists(p), "%s missing", p);
    }
    snprintf(p, sizeof p, "%s/report.md", out);
    FILE *rf = fopen(p, "r");
    static char report[1 << 16];
    size_t rn = fread(report, 1, sizeof report - 1, rf);
    fclose(rf);
    report[rn] = '\0';
    ck_assert_ptr_nonnull(strstr(report, "## Numerics"));
    ck_assert_ptr_nonnull(strstr(report, "fp32 runs the twin's own arithmetic: every error is exactly 0"));
    ck_assert_ptr_nonnull(strstr(report, "what the FP32 masters keep"));
    /* The fp16 underflow paragraph follows the run's own means (fp16/summary.json): fewer values flushed at the loss
     * scale than at S = 1 (none at all: "none vanished", not a ratio over 0), or the effect said absent; and the run's
     * scale said as 2^k, k = log2 of its mean. */
    {
        char d16[600];
        snprintf(d16, sizeof d16, "%s/fp16", out);
        json_t *sm = load_summary(d16);
        json_t *mt = json_object_get(json_object_get(sm, "telemetry"), "metrics");
        json_t *ag = json_object_get(mt, MPT_TELEMETRY_ALL_ACT_GRAD);
        const double all = jnum(json_object_get(ag, "flush_frac"), "mean");
        const double all1 = jnum(json_object_get(ag, "flush_frac@S=1"), "mean");
        const double scale = jnum(json_object_get(json_object_get(mt, "amp"), "loss_scale"), "mean");
        json_decref(sm);
        ck_assert_msg(scale > 1.0, "fp16's mean loss scale %g", scale);
        const char *want = !(all1 > all) ? "the expected effect of loss scaling (fewer values flushed) is absent"
                           : all > 0.0   ? "times fewer values vanished"
                                         : "with the scale, none vanished";
        ck_assert_msg(strstr(report, want) != NULL, "report.md lacks '%s' (flushed %g at S, %g at S = 1)", want, all,
                      all1);
        ck_assert_msg(strstr(report, "inf times") == NULL, "report.md: a ratio over 0");
        char s2[64];
        snprintf(s2, sizeof s2, "at the run's S = 2^%.0f,", log2(scale));
        ck_assert_msg(strstr(report, s2) != NULL, "report.md lacks '%s'", s2);
    }
    /* The relative L2 column, recomputed here in FP64 from the checkpoints. */
    char ref_ck[600];
    snprintf(ref_ck, sizeof ref_ck, "%s/fp32/checkpoint.safetensors", out);
    int64_t n32, n;
    double *w32 = all_masters(ref_ck, ref_ck, &n32);
    ck_assert(table_last_column(printed, "fp32") == 0.0);
    for (int i = 1; i < 3; i++) {
        char ck[600];
        snprintf(ck, sizeof ck, "%s/%s/checkpoint.safetensors", out, names[i]);
        double *w = all_masters(ck, ref_ck, &n);
        ck_assert_int_eq(n, n32);
        double num = 0.0, den = 0.0;
        for (int64_t k = 0; k < n; k++) {
            num += (w[k] - w32[k]) * (w[k] - w32[k]);
            den += w32[k] * w32[k];
        }
        double rel = sqrt(num) / sqrt(den);
        double shown = table_last_column(printed, names[i]);
        /* printed with 4 significant digits: relative rounding error <= 5e-4 */
        ck_assert_msg(fabs(shown - rel) <= 6e-4 * rel, "%s: table says %.4e, FP64 recomputation %.6e", names[i],
                      shown, rel);
        ck_assert_msg(rel > 0.0, "%s: final weights identical to fp32's", names[i]);
        free(w);
    }
    free(w32);
    rm_tmpdir();
}
END_TEST

/* The plot's loss-scale panel is described by the rule the fp16 run used, not by one preset's: Keras's preset starts at
 * 2^15 (tf.keras LossScaleOptimizer's initial_scale=2**15), and --hysteresis / --growth-interval override it. A
 * comparison without fp16 has no loss-scale panel, and the report describes none. */
START_TEST(test_compare_report_scale_rule) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *out = tmp_path("keras");
    int rc = run("compare", "--data", data, "--out", out, "--precisions", "fp32,fp16", "--limit-train", "128",
                 "--limit-test", "64", "--epochs", "1", "--batch-size", "64", "--device", "cpu", "--progress", "off",
                 "--scaler", "keras", "--hysteresis", "3", "--growth-interval", "500", NULL);
    ck_assert_msg(rc == 0, "compare failed (%d): %s", rc, out_buf);
    char p[600];
    snprintf(p, sizeof p, "%s/report.md", out);
    const char *report = mpt_test_read_text(p);
    const char *bottom = strstr(report, "Bottom: the fp16 loss scale");
    ck_assert_msg(bottom != NULL, "no loss-scale panel described: %s", report);
    ck_assert_msg(strstr(bottom, "starts at 2^15 (--scaler keras)") && strstr(bottom, "from the 3rd since it last grew") &&
                      strstr(bottom, "after 500 clean steps") && !strstr(report, "2^16"),
                  "the panel's rule is not the run's: %.400s", bottom);
    /* keras' floor is FLT_MIN = 2^-126 (tools/opts.c's preset row): a power of two is said as one */
    ck_assert_msg(strstr(bottom, "within [2^-126, "), "the scale's bounds: %.400s", bottom);
    /* the safeguards' sentences follow the flags: by default FP32 masters and FP32 optimizer state */
    ck_assert_msg(strstr(report, "`optim` the optimizer state (FP32 in every mode)") &&
                      strstr(report, "the optimizer updates FP32 master weights: ") &&
                      strstr(report, "this run's final FP32 master weights and the fp32 run's"),
                  "the default safeguards are not described: %s", report);
    out = tmp_path("nofp16");
    rc = run("compare", "--data", data, "--out", out, "--precisions", "fp32,bf16", "--limit-train", "128",
             "--limit-test", "64", "--epochs", "1", "--batch-size", "64", "--device", "cpu", "--progress", "off",
             "--master-weights", "none", "--optimizer-state", "bf16", NULL);
    ck_assert_msg(rc == 0, "compare failed (%d): %s", rc, out_buf);
    snprintf(p, sizeof p, "%s/report.md", out);
    report = mpt_test_read_text(p);
    ck_assert_msg(strstr(report, "Middle: test accuracy") && !strstr(report, "loss scale on a log axis"),
                  "a plot without fp16 described with a loss-scale panel");
    /* ... and without them (--master-weights none, --optimizer-state bf16) the report says so, not the defaults */
    ck_assert_msg(strstr(report, "`optim` the optimizer state (stored in BF16 in every mode by --optimizer-state") &&
                      strstr(report, "this comparison ran without that: --master-weights none") &&
                      strstr(report, "and --optimizer-state (the moments stored in a 16-bit format)") &&
                      strstr(report, "this run's final weights (with --master-weights none") &&
                      !strstr(report, "FP32 in every mode") && !strstr(report, "the optimizer updates FP32 master weights"),
                  "the report describes safeguards the comparison switched off: %s", report);
    rm_tmpdir();
}
END_TEST

/* Whether path starts with the PNG signature. */
static int is_png(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char magic[8];
    int ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0;
    fclose(f);
    return ok;
}

/* numerics.png when a series has no point: an fp16 run whose every telemetry step overflows (loss scale 2^24 on
 * batch-64 logits gradients) measures no lost update. gnuplot refuses a plot of empty series ("Skipping data
 * file with no valid points", "x range is invalid"), which lost the whole picture; now the panel stays, empty,
 * and names the series and why. With no telemetry step at all (--telemetry beyond the steps run) there is no
 * picture, and the command and report.md say why instead of "gnuplot failed". */
START_TEST(test_compare_numerics_without_points) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *out = tmp_path("skipped");
    int rc = run("compare", "--data", data, "--out", out, "--precisions", "fp16", "--limit-train", "256",
                 "--limit-test", "64", "--epochs", "1", "--batch-size", "64", "--max-steps", "2", "--device", "cpu",
                 "--progress", "off", "--telemetry", "1", "--loss-scale", "dynamic:16777216", NULL);
    ck_assert_msg(rc == 0, "compare failed (%d): %s", rc, out_buf);
    /* 2 of an epoch's 4 steps: no epoch completed, so its time and mean training loss are undefined: n/a, not nan */
    const char *row = strstr(out_buf, "\n| fp16 | ");
    ck_assert_msg(row && strstr(row, "| n/a | ") && strstr(row, "| n/a | ") < strchr(row + 1, '\n') &&
                      !strstr(out_buf, "nan"), "the table's undefined cells: %s", out_buf);
    if (strstr(out_buf, "gnuplot not found")) {
        printf("test_compare_numerics_without_points: gnuplot unavailable, plot not checked\n");
        rm_tmpdir();
        return;
    }
    char p[600];
    snprintf(p, sizeof p, "%s/fp16", out);
    json_t *j = load_summary(p);
    ck_assert_int_eq((int)jnum(j, "steps_skipped"), 2); /* the premise: both measured steps overflowed */
    json_decref(j);
    ck_assert_msg(strstr(out_buf, "no numerics plot") == NULL && strstr(out_buf, "numerics plot: ") != NULL,
                  "numerics.png not drawn: %s", out_buf);
    snprintf(p, sizeof p, "%s/numerics.png", out);
    ck_assert_msg(is_png(p), "numerics.png is not a PNG: %s", out_buf);
    snprintf(p, sizeof p, "%s/numerics.gp", out);
    FILE *f = fopen(p, "r");
    ck_assert(f != NULL);
    static char gp[1 << 15];
    size_t n = fread(gp, 1, sizeof gp - 1, f);
    fclose(f);
    gp[n] = '\0';
    ck_assert_msg(strstr(gp, "fp16:\\n  every telemetry step was skipped") != NULL,
                  "numerics.gp does not name the missing series: %s", gp);
    ck_assert_msg(strstr(gp, "nothing to draw in this panel") != NULL, "no empty-panel note: %s", gp);

    out = tmp_path("none");
    rc = run("compare", "--data", data, "--out", out, "--precisions", "fp32,bf16", "--limit-train", "256",
             "--limit-test", "64", "--epochs", "1", "--batch-size", "64", "--device", "cpu", "--progress", "off",
             "--telemetry", "1000", NULL);
    ck_assert_msg(rc == 0, "compare failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "no numerics plot: no run reached a telemetry step") != NULL, "output: %s", out_buf);
    snprintf(p, sizeof p, "%s/numerics.png", out);
    ck_assert(!file_exists(p));
    snprintf(p, sizeof p, "%s/report.md", out);
    f = fopen(p, "r");
    ck_assert(f != NULL);
    static char report[1 << 16];
    n = fread(report, 1, sizeof report - 1, f);
    fclose(f);
    report[n] = '\0';
    ck_assert_msg(strstr(report, "(No numerics plot: no run reached a telemetry step") != NULL, "report: %s", report);
    /* the reason names the interval and says where it came from (here the flag; compare's default otherwise) */
    ck_assert_msg(strstr(report, "telemetry measures every 1000-th step (--telemetry), and this run had 4 steps") !=
                      NULL, "report: %s", report);
    rm_tmpdir();
}
END_TEST

/* compare --seeds 2 on the synthetic data: the runs of every seed and precision, and a compare.json whose
 * statistics agree with the runs' own summary.json files: the mean paired difference recomputed here, the
 * interval centred on it, the verdict consistent with the interval and the margin, and the noise of a one-seed
 * comparison, the sd of the two paired differences d1, d2 (|d1 - d2| / sqrt 2), in compare.json and printed. */
START_TEST(test_compare_seeds) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *out = tmp_path("cmp-seeds");
    /* one step of lr 0.003 on 64 images, tested on all 300: the runs end apart (about 41-48%); trained to 100% in every
     * run, as with 256 images, every difference and spread below was 0 and checked nothing */
    int rc = run("compare", "--data", data, "--out", out, "--precisions", "fp32,bf16", "--seeds", "2", "--limit-train",
                 "64", "--lr", "0.003", "--limit-test", "300", "--epochs", "1", "--batch-size", "64", "--device", "cpu",
                 "--progress", "off", "--margin", "0.5", NULL);
#ifndef MPT_HAVE_GSL
    ck_assert_msg(rc == 2 && strstr(out_buf, "libgsl-dev"), "without GSL: %d %s", rc, out_buf);
    rm_tmpdir();
    return;
#endif
    ck_assert_msg(rc == 0, "compare --seeds failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "Noise: ") && strstr(out_buf, "verdict"), "no verdict table: %s", out_buf);
    char p[700];
    snprintf(p, sizeof p, "%s/report.md", out);
    ck_assert_msg(file_exists(p), "report.md missing");
    snprintf(p, sizeof p, "%s/compare.json", out);
    json_error_t err;
    json_t *j = json_load_file(p, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", p, err.text);
    ck_assert_int_eq(json_array_size(json_object_get(j, "seeds")), 2);
    json_t *precs = json_object_get(j, "precisions");
    ck_assert_int_eq(json_array_size(precs), 2);
    double acc[2][2], loss[2][2];
    for (int q = 0; q < 2; q++) {
        json_t *runs = json_object_get(json_array_get(precs, (size_t)q), "runs");
        ck_assert_int_eq(json_array_size(runs), 2);
        for (int k = 0; k < 2; k++) {
            char dir[700];
            snprintf(dir, sizeof dir, "%s/seed-%d/%s", out, k, q == 0 ? "fp32" : "bf16");
            json_t *sum = load_summary(dir);
            acc[q][k] = 100.0 * jnum(sum, "final_test_accuracy");
            loss[q][k] = jnum(sum, "final_test_loss");
            ck_assert(jnum(json_array_get(runs, (size_t)k), "final_test_accuracy") ==
                      jnum(sum, "final_test_accuracy"));
            json_decref(sum);
        }
    }
    ck_assert(json_is_null(json_object_get(json_array_get(precs, 0), "vs_fp32")));
    json_t *d = json_object_get(json_object_get(json_array_get(precs, 1), "vs_fp32"), "final_test_accuracy_pp");
    ck_assert(d != NULL);
    /* summary.json and compare.json hold 10 significant digits: 1e-7 pp is their rounding at these sizes, far below any
     * difference a wrong formula makes */
    const double tol = 1e-7;
    double mean = ((acc[1][0] - acc[0][0]) + (acc[1][1] - acc[0][1])) / 2.0;
    double lo = jnum(d, "ci_low"), hi = jnum(d, "ci_high");
    ck_assert_msg(fabs(jnum(d, "mean") - mean) < tol, "mean difference %g, recomputed %g", jnum(d, "mean"), mean);
    ck_assert(fabs((lo + hi) / 2.0 - mean) < tol && lo <= hi);
    const char *v = json_string_value(json_object_get(d, "verdict"));
    ck_assert(v != NULL);
    const char *want = lo > -0.5 && hi < 0.5 ? "equivalent" : lo > 0.5 ? "better" : hi < -0.5 ? "worse" : "inconclusive";
    ck_assert_str_eq(v, want);
    double sd_paired = fabs((acc[1][0] - acc[0][0]) - (acc[1][1] - acc[0][1])) / sqrt(2.0);
    json_t *noise = json_object_get(j, "noise_paired_sd_final_accuracy_pp");
    ck_assert_msg(fabs(jnum(noise, "bf16") - sd_paired) < tol, "paired sd %g, by hand %g", jnum(noise, "bf16"),
                  sd_paired);
    ck_assert(fabs(jnum(d, "sd") - sd_paired) < tol);
    char said[96];
    snprintf(said, sizeof said, "bf16 %.2f pp", sd_paired);
    ck_assert_msg(strstr(out_buf, said) != NULL, "the printed noise lacks '%s': %s", said, out_buf);
    double sd_fp32 = fabs(acc[0][0] - acc[0][1]) / sqrt(2.0);
    ck_assert(fabs(jnum(json_object_get(j, "fp32_between_seeds_final_accuracy"), "sd") - sd_fp32) < tol);
    /* the 95% interval's half-width is t_{0.975, 1} sd / sqrt(2) (t from a table); with one degree of freedom t is
     * Cauchy, P(T <= x) = 1/2 + atan(x) / pi, so the one-sided p-values at the margin m = 0.5 are p_not_worse =
     * P(T >= (mean + m) / se) and p_not_better = P(T <= (mean - m) / se), se = sd / sqrt(2) */
    const double t975_1 = 12.7062047362, pi = acos(-1.0), se = sd_paired / sqrt(2.0);
    ck_assert_msg(fabs(hi - (mean + t975_1 * se)) < 1e-6 && fabs(lo - (mean - t975_1 * se)) < 1e-6,
                  "interval [%g, %g], by hand [%g, %g]", lo, hi, mean - t975_1 * se, mean + t975_1 * se);
    ck_assert(jnum(d, "margin") == 0.5);
    if (se > 0.0) {
        const double pw = 0.5 - atan((mean + 0.5) / se) / pi, pb = 0.5 + atan((mean - 0.5) / se) / pi;
        ck_assert_msg(fabs(jnum(d, "p_not_worse") - pw) < tol && fabs(jnum(d, "p_not_better") - pb) < tol,
                      "p-values (%g, %g), by hand (%g, %g)", jnum(d, "p_not_worse"), jnum(d, "p_not_better"), pw, pb);
    }
    /* the pairing sentence sets the paired sd against fp32's own spread */
    if (sd_fp32 > 0.0)
        snprintf(said, sizeof said, "bf16's paired sd %.2f pp is %.2fx the reference's own", sd_paired,
                 sd_paired / sd_fp32);
    else
        snprintf(said, sizeof said, "bf16: paired sd %.2f pp against a reference that did not move", sd_paired);
    ck_assert_msg(strstr(out_buf, said) != NULL, "the printed noise lacks '%s': %.2000s", said, out_buf);
    /* the test loss's paired interval (bf16 - fp32, the same t) */
    const double dl0 = loss[1][0] - loss[0][0], dl1 = loss[1][1] - loss[0][1], ml = (dl0 + dl1) / 2.0;
    const double hl = t975_1 * fabs(dl0 - dl1) / 2.0; /* sd / sqrt(2) = |dl0 - dl1| / 2 */
    json_t *dl = json_object_get(json_object_get(json_array_get(precs, 1), "vs_fp32"), "final_test_loss");
    ck_assert_msg(fabs(jnum(dl, "mean") - ml) < 1e-8 && fabs(jnum(dl, "ci_low") - (ml - hl)) < 1e-8 &&
                      fabs(jnum(dl, "ci_high") - (ml + hl)) < 1e-8,
                  "loss difference %g [%g, %g], by hand %g [%g, %g]", jnum(dl, "mean"), jnum(dl, "ci_low"),
                  jnum(dl, "ci_high"), ml, ml - hl, ml + hl);
    json_decref(j);
    snprintf(p, sizeof p, "%s/report.md", out);
    ck_assert_msg(strstr(mpt_test_read_text(p), "n − 1 = 1 degrees of freedom") != NULL, "report.md: the t quantile's "
                  "degrees of freedom");
    /* a margin wide enough to decide: the table's verdict is the JSON's, said as the word */
    const char *out2 = tmp_path("cmp-seeds-wide");
    rc = run("compare", "--data", data, "--out", out2, "--precisions", "fp32,bf16", "--seeds", "2", "--limit-train", "64",
             "--lr", "0.003", "--limit-test", "300", "--epochs", "1", "--batch-size", "64", "--device", "cpu", "--progress",
             "off", "--margin", "50", NULL);
    ck_assert_msg(rc == 0, "compare --margin 50 failed (%d): %s", rc, out_buf);
    snprintf(p, sizeof p, "%s/compare.json", out2);
    j = json_load_file(p, 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", p, err.text);
    d = json_object_get(json_object_get(json_array_get(json_object_get(j, "precisions"), 1), "vs_fp32"),
                        "final_test_accuracy_pp");
    lo = jnum(d, "ci_low"), hi = jnum(d, "ci_high");
    want = lo > -50 && hi < 50 ? "equivalent" : lo > 50 ? "better" : hi < -50 ? "worse" : "inconclusive";
    ck_assert_str_eq(json_string_value(json_object_get(d, "verdict")), want);
    char cell[64];
    snprintf(cell, sizeof cell, "] | %s |", want);
    ck_assert_msg(strstr(out_buf, cell) != NULL, "the printed table lacks '%s': %.2000s", cell, out_buf);
    json_decref(j);
    snprintf(p, sizeof p, "%s/curves/bf16_epochs.csv", out);
    ck_assert_msg(file_exists(p), "%s missing", p);
    rm_tmpdir();
}
END_TEST

/* ---- real data -------------------------------------------------------------------------------------------------- */

static int have_fashion_mnist(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", MPT_DEFAULT_DATA_DIR);
    return access(p, R_OK) == 0;
}

START_TEST(test_fashion_mnist_short) {
    if (!have_fashion_mnist()) {
        printf("test_fashion_mnist_short: skipped: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)\n",
               MPT_DEFAULT_DATA_DIR);
        return;
    }
    make_tmpdir();
    const char *out = tmp_path("fm");
    int rc = run("train", "--limit-train", "300", "--limit-test", "200", "--epochs", "1", "--device", "cpu",
                 "--precision", "bf16", "--out", out, "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "train on Fashion-MNIST failed (%d): %s", rc, out_buf);
    const char *files[] = {"metrics.csv", "epochs.csv", "summary.json", "checkpoint.safetensors"};
    for (int i = 0; i < 4; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        ck_assert_msg(file_exists(p), "%s missing", p);
    }
    json_t *j = load_summary(out);
    double acc = jnum(j, "final_test_accuracy");
    ck_assert(acc >= 0.0 && acc <= 1.0);
    json_decref(j);
    char p[600];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", out);
    rc = run("eval", "--checkpoint", p, "--limit-test", "200", "--device", "cpu", NULL);
    char want[64];
    snprintf(want, sizeof want, "test accuracy %.2f%%", 100.0 * acc);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) != NULL, "eval: %d %s (want %s)", rc, out_buf, want);
    rm_tmpdir();
}
END_TEST

/* eval evaluates a checkpoint with the numerics its run evaluated with, the recorded TF32 switches included: a
 * lenet5 fp32 run with --tf32-conv on and --tf32-matmul on, evaluated by eval on the same 10000 Fashion-MNIST test
 * images, gives the run's own final test accuracy and loss (the same weights, batches and kernels: equal to the
 * printed digits). eval once built the policy without the switches and evaluated in true FP32: 52.10% against the
 * run's 52.14% (issue 36). */
START_TEST(test_eval_keeps_tf32_switches) {
    if (!have_fashion_mnist()) {
        printf("test_eval_keeps_tf32_switches: skipped: no Fashion-MNIST in %s\n", MPT_DEFAULT_DATA_DIR);
        return;
    }
    make_tmpdir();
    const char *out = tmp_path("tf32");
    int rc = run("train", "--model", "lenet5", "--precision", "fp32", "--tf32-conv", "on", "--tf32-matmul", "on",
                 "--lr", "0.01", "--limit-train", "2000", "--epochs", "1", "--device", "cpu", "--threads", "1",
                 "--out", out, "--progress", "off", NULL);
    ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    json_t *j = load_summary(out);
    double acc = jnum(j, "final_test_accuracy"), loss = jnum(j, "final_test_loss");
    json_decref(j);
    char p[600], want[96];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", out);
    rc = run("eval", "--checkpoint", p, "--device", "cpu", "--threads", "1", NULL);
    snprintf(want, sizeof want, "test loss %.4f  test accuracy %.2f%%", loss, 100.0 * acc);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) != NULL, "eval: %d %s (want %s)", rc, out_buf, want);
    rm_tmpdir();
}
END_TEST

/* Telemetry and the FP32 twin only read: the same run with them on every third step ends with the same bits,
 * logs the same losses, and adds telemetry.csv, its summary and its own memory categories. */
START_TEST(test_telemetry_only_reads) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *dirs[2] = {tmp_path("off"), tmp_path("on")};
    for (int r = 0; r < 2; r++) {
        char *args[MAX_ARGS];
        int n = 0;
        const char *common[] = {"mptrain", "train", "--data", data, "--device", "cpu", "--model", "lenet5",
                                "--precision", "fp16", "--batch-size", "32", "--epochs", "1", "--log-every", "1",
                                "--limit-train", "384", "--limit-test", "64", "--progress", "off", "--out", dirs[r]};
        for (size_t k = 0; k < sizeof common / sizeof common[0]; k++) args[n++] = (char *)common[k];
        if (r == 1) {
            args[n++] = (char *)"--telemetry";
            args[n++] = (char *)"3";
            args[n++] = (char *)"--shadow";
        }
        args[n] = NULL;
        int rc = run_argv(args);
        ck_assert_msg(rc == 0, "train failed (%d): %s", rc, out_buf);
    }
    /* the run says what telemetry does, what it measured (the summary's own means) and the files it wrote */
    ck_assert_msg(strstr(out_buf, "telemetry: on one step in 3,") != NULL, "no telemetry announcement: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "telemetry: 4 steps measured") != NULL, "no telemetry summary: %s", out_buf);
    ck_assert_msg(strstr(out_buf, "telemetry.csv, exponents.csv") != NULL, "wrote line: %s", out_buf);
    {
        json_t *sm = load_summary(dirs[1]);
        json_t *fl = json_object_get(json_object_get(json_object_get(json_object_get(sm, "telemetry"), "metrics"),
                                                     MPT_TELEMETRY_ALL_ACT_GRAD), "flush_frac@S=1");
        char want[96];
        snprintf(want, sizeof want, "(had the loss scale been 1: %.3g%%)", 100.0 * json_real_value(json_object_get(fl, "mean")));
        ck_assert_msg(strstr(out_buf, want) != NULL, "want '%s' in: %s", want, out_buf);
        json_decref(sm);
        char p[600];
        snprintf(p, sizeof p, "%s/exponents.csv", dirs[1]);
        ck_assert_msg(file_exists(p), "%s missing", p);
        /* train --telemetry promises numerics.png: drawn wherever gnuplot is installed (its child once lost the
         * picture's descriptor to the output directory's, both descriptor 3: "cannot start gnuplot (Not a
         * directory)"), else the reason names gnuplot */
        snprintf(p, sizeof p, "%s/numerics.png", dirs[1]);
        if (system("command -v gnuplot > /dev/null 2>&1") == 0)
            ck_assert_msg(file_exists(p) && strstr(out_buf, ", numerics.png}"), "no numerics.png: %s", out_buf);
        else
            ck_assert_msg(strstr(out_buf, "no numerics.png: gnuplot not found"), "no numerics.png and no reason: %s",
                          out_buf);
    }
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/checkpoint.safetensors", dirs[0]);
    snprintf(b, sizeof b, "%s/checkpoint.safetensors", dirs[1]);
    assert_same_tensors(a, b, 1);
    assert_same_losses(dirs[0], dirs[1], 1, 12); /* 384 / 32 = 12 steps */
    snprintf(a, sizeof a, "%s/telemetry.csv", dirs[0]);
    ck_assert_msg(!file_exists(a), "telemetry.csv written with telemetry off");
    snprintf(b, sizeof b, "%s/telemetry.csv", dirs[1]);
    int nl;
    char **lines = read_lines(b, &nl);
    ck_assert_str_eq(lines[0], MPT_TELEMETRY_CSV_HEADER);
    int steps_seen[13] = {0};
    for (int i = 1; i < nl; i++) {
        int step = atoi(lines[i]);
        ck_assert_msg(step == 3 || step == 6 || step == 9 || step == 12, "row of step %d: %s", step, lines[i]);
        steps_seen[step] = 1;
    }
    ck_assert(steps_seen[3] && steps_seen[6] && steps_seen[9] && steps_seen[12]);
    free_lines(lines, nl);
    json_t *off = load_summary(dirs[0]), *on = load_summary(dirs[1]);
    ck_assert(json_is_null(json_object_get(off, "telemetry")));
    json_t *t = json_object_get(on, "telemetry");
    ck_assert_int_eq(json_integer_value(json_object_get(t, "every")), 3);
    json_t *m = json_object_get(json_object_get(json_object_get(t, "metrics"), "fc1.out"), "twin_rel_l2");
    ck_assert_int_eq(json_integer_value(json_object_get(m, "steps")), 4);
    double err = json_real_value(json_object_get(m, "mean"));
    /* FP16 activations against FP32: errors of a few unit roundoffs (2^-11), never 0 */
    ck_assert_msg(err > 0.0 && err < 64 * 0x1p-11, "fc1.out twin error %g", err);
    json_t *mem_off = json_object_get(off, "peak_memory_bytes"), *mem_on = json_object_get(on, "peak_memory_bytes");
    ck_assert_int_eq(json_integer_value(json_object_get(mem_off, "twin")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(mem_off, "telemetry")), 0);
    ck_assert_int_gt(json_integer_value(json_object_get(mem_on, "twin")), 0);
    ck_assert_int_gt(json_integer_value(json_object_get(mem_on, "telemetry")), 0);
    json_decref(off);
    json_decref(on);
    rm_tmpdir();
}
END_TEST

/* ---- --accum-model (issue 39) ---------------------------------------------------------------------------------- */

/* The checkpoint's "config" (JSON, caller frees) of the run in dir. */
static json_t *ckpt_config(const char *dir) {
    char p[4400];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir);
    mpt_checkpoint *c = NULL;
    ck_assert_msg(mpt_checkpoint_open(p, NULL, 0, &c) == MPT_OK, "%s", mpt_last_error());
    json_error_t err;
    json_t *j = json_loads(mpt_checkpoint_meta_get(c, "config"), JSON_REJECT_DUPLICATES, &err);
    ck_assert_msg(j != NULL, "%s: config: %s", p, err.text);
    mpt_checkpoint_close(&c);
    return j;
}

/* Whether any tensor of the two runs' checkpoints differs in its bytes. */
static int tensors_differ(const char *dir_a, const char *dir_b) {
    char pa[4400], pb[4400];
    snprintf(pa, sizeof pa, "%.4300s/checkpoint.safetensors", dir_a);
    snprintf(pb, sizeof pb, "%.4300s/checkpoint.safetensors", dir_b);
    mpt_checkpoint *a = NULL, *b = NULL;
    ck_assert(mpt_checkpoint_open(pa, NULL, 0, &a) == MPT_OK && mpt_checkpoint_open(pb, NULL, 0, &b) == MPT_OK);
    int differ = 0;
    for (int i = 0; i < mpt_checkpoint_n_tensors(a) && !differ; i++) {
        const mpt_checkpoint_tensor *ta = mpt_checkpoint_tensor_at(a, i), *tb = mpt_checkpoint_find(b, ta->name);
        ck_assert_msg(tb != NULL, "%s lacks %s", pb, ta->name);
        differ = memcmp(ta->data, tb->data, (size_t)mpt_checkpoint_tensor_nbytes(ta)) != 0;
    }
    mpt_checkpoint_close(&a);
    mpt_checkpoint_close(&b);
    return differ;
}

/* The "accum" and "kernels" of precision-map node `node` in summary j. */
static void expect_node_accum(json_t *j, const char *what, const char *node, const char *accum, const char *kernels) {
    json_t *map = json_object_get(j, "precision_map");
    for (size_t i = 0; i < json_array_size(map); i++) {
        json_t *n = json_array_get(map, i);
        if (strcmp(json_string_value(json_object_get(n, "node")), node) != 0) continue;
        const char *a = json_string_value(json_object_get(n, "accum"));
        const char *k = json_string_value(json_object_get(n, "kernels"));
        ck_assert_msg(a && strcmp(a, accum) == 0, "%s: %s's accum is %s, expected %s", what, node, a ? a : "absent",
                      accum);
        ck_assert_msg(!kernels || (k && strcmp(k, kernels) == 0), "%s: %s's kernels are %s, expected %s", what, node,
                      k ? k : "absent", kernels);
        return;
    }
    ck_abort_msg("%s: no node %s in the precision map", what, node);
}

START_TEST(test_accum_model) {
    /* fc1's GEMMs in each mode (784 -> 512 at batch 16: FP8 in the FP8 modes, with --fp8-accum fp32's FP32 sums) and
     * fc3's (512 -> 10: BF16 in the FP8 modes); fp32 has no Tensor Core GEMM */
    static const struct {
        const char *precision, *fc1, *fc3;
    } modes[] = {{"fp32", "ieee", "ieee"},     {"tf32", "h100", "h100"},     {"fp16", "h100", "h100"},
                 {"bf16", "h100", "h100"},     {"fp8", "ieee", "h100"},      {"fp8-e4m3", "ieee", "h100"},
                 {"mxfp8", "ieee", "h100"}};
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    char dirs[sizeof modes / sizeof modes[0]][4200];
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        snprintf(dirs[m], sizeof dirs[m], "%s", tmp_path(modes[m].precision));
        int rc = run("train", "--data", data, "--device", "cpu", "--precision", modes[m].precision, "--accum-model",
                     "h100", "--batch-size", "16", "--max-steps", "2", "--limit-test", "32", "--progress", "off",
                     "--out", dirs[m], NULL);
        ck_assert_msg(rc == 0, "train --precision %s --accum-model h100 failed (%d): %s", modes[m].precision, rc,
                      out_buf);
        const int tc = strcmp(modes[m].fc3, "h100") == 0;
        ck_assert_msg(!tc || strstr(out_buf, "--accum-model h100: the TF32, FP16 and BF16 GEMMs and convolutions sum "
                                             "their products as H100, H200 Tensor Cores do"),
                      "%s: the run does not say what the model does: %s", modes[m].precision, out_buf);
        ck_assert_msg(tc || strstr(out_buf, "--accum-model h100 changes nothing in fp32"), "fp32: %s", out_buf);
        json_t *j = load_summary(dirs[m]);
        ck_assert_str_eq(cfg_str(j, "accum-model"), "h100");
        json_t *am = json_object_get(j, "accum_model");
        ck_assert_str_eq(json_string_value(json_object_get(am, "model")), "h100");
        ck_assert_str_eq(json_string_value(json_object_get(am, "gpus")), "H100, H200");
        expect_node_accum(j, modes[m].precision, "fc1", modes[m].fc1,
                          strcmp(modes[m].fc1, "h100") == 0 ? "emulate:h100" : NULL);
        expect_node_accum(j, modes[m].precision, "fc3", modes[m].fc3, tc ? "emulate:h100" : "emulate:onednn");
        json_decref(j);
        json_t *cfg = ckpt_config(dirs[m]);
        ck_assert_str_eq(json_string_value(json_object_get(cfg, "accum-model")), "h100");
        json_decref(cfg);
    }
    /* the same runs without the model: the checkpoint's config has no accum-model (ieee is the default, written as
     * before the option existed); bf16's weights differ, fp32's (no Tensor Core GEMM) do not */
    for (int k = 0; k < 2; k++) {
        const char *prec = k == 0 ? "bf16" : "fp32";
        const char *ieee = tmp_path(k == 0 ? "bf16-ieee" : "fp32-ieee");
        int rc = run("train", "--data", data, "--device", "cpu", "--precision", prec, "--batch-size", "16",
                     "--max-steps", "2", "--limit-test", "32", "--progress", "off", "--out", ieee, NULL);
        ck_assert_msg(rc == 0, "train %s failed (%d): %s", prec, rc, out_buf);
        json_t *cfg = ckpt_config(ieee);
        ck_assert_msg(json_object_get(cfg, "accum-model") == NULL, "an ieee run's checkpoint records accum-model");
        json_decref(cfg);
        json_t *j = load_summary(ieee);
        ck_assert_str_eq(cfg_str(j, "accum-model"), "ieee");
        expect_node_accum(j, prec, "fc1", "ieee", "emulate:onednn");
        json_decref(j);
        const int differ = tensors_differ(ieee, dirs[k == 0 ? 3 : 0]);
        ck_assert_msg(k == 0 ? differ : !differ, "%s: the h100 run's weights %s the ieee run's", prec,
                      differ ? "differ from" : "equal");
        if (k == 0) { /* an ieee checkpoint resumed with a model: refused, naming both */
            char ck[4400];
            snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", ieee);
            rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--accum-model", "h100", "--out",
                     tmp_path("bad-ieee"), NULL);
            ck_assert_msg(rc == 2 && strstr(out_buf, "--accum-model h100 conflicts with the checkpoint's ieee"),
                          "resume of an ieee run with --accum-model h100: %d %s", rc, out_buf);
        }
    }
    /* eval of the bf16 h100 checkpoint sums as it trained: the run's accuracy again; a changed model on resume */
    char ck[4400], want[64];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dirs[3]);
    json_t *j = load_summary(dirs[3]);
    snprintf(want, sizeof want, "test accuracy %.2f%%", 100.0 * jnum(j, "final_test_accuracy"));
    json_decref(j);
    int rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "32", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want) && strstr(out_buf, "summation: as H100, H200 Tensor Cores"),
                  "eval of an h100 checkpoint (want '%s'): %d %s", want, rc, out_buf);
    rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--accum-model", "a100", "--out",
             tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--accum-model a100 conflicts with the checkpoint's h100"),
                  "resume with another --accum-model: %d %s", rc, out_buf);
    /* the convolutional models: their convolutions and linear layers sum as the model */
    static const struct {
        const char *model, *precision, *conv;
    } convs[2] = {{"lenet5", "bf16", "conv1"}, {"cnn", "fp16", "conv1"}};
    for (int k = 0; k < 2; k++) {
        const char *out = tmp_path(convs[k].model);
        rc = run("train", "--data", data, "--device", "cpu", "--model", convs[k].model, "--precision",
                 convs[k].precision, "--accum-model", "h100", "--batch-size", "8", "--max-steps", "1", "--limit-test",
                 "16", "--progress", "off", "--out", out, NULL);
        ck_assert_msg(rc == 0, "train --model %s --accum-model h100 failed (%d): %s", convs[k].model, rc, out_buf);
        j = load_summary(out);
        expect_node_accum(j, convs[k].model, convs[k].conv, "h100", "emulate:h100");
        json_decref(j);
    }
    rm_tmpdir();
    /* resume is bit-exact under the model (the fp16 loss scaler crossing the checkpoint) */
    const char *extra[] = {"--accum-model", "h100", NULL};
    resume_case("mlp", "fp16", extra, 6, 3);
}
END_TEST

/* ---- --norm-stats (issue 37) ----------------------------------------------------------------------------------- */

#define NORM_SPEC "conv(4,3,pad=1),batchnorm,relu,maxpool(2),flatten,linear(16),layernorm,relu,linear"

/* The "stats" of precision-map node `node` in summary j (NULL when absent). */
static const char *node_stats(json_t *j, const char *node) {
    json_t *map = json_object_get(j, "precision_map");
    for (size_t i = 0; i < json_array_size(map); i++) {
        json_t *n = json_array_get(map, i);
        if (strcmp(json_string_value(json_object_get(n, "node")), node) == 0)
            return json_string_value(json_object_get(n, "stats"));
    }
    return NULL;
}

START_TEST(test_norm_stats) {
    make_tmpdir();
    const char *data = write_synthetic(NULL);
    const char *abl = tmp_path("stats16"), *pol = tmp_path("policy");
    /* an ablation row: said, recorded (summary.json's config and precision map, the checkpoint's config) */
    int rc = run("train", "--data", data, "--device", "cpu", "--model", NORM_SPEC, "--precision", "bf16",
                 "--norm-stats", "bf16-onepass", "--batch-size", "16", "--max-steps", "3", "--limit-test", "32",
                 "--progress", "off", "--out", abl, NULL);
    ck_assert_msg(rc == 0, "train --norm-stats bf16-onepass failed (%d): %s", rc, out_buf);
    ck_assert_msg(strstr(out_buf, "--norm-stats bf16-onepass: the forward statistics of the model's 2 normalisation "
                                  "layers in BF16 arithmetic, E[x^2] - E[x]^2") &&
                      strstr(out_buf, "batchnorm and layernorm statistics in BF16 arithmetic, E[x^2] - E[x]^2 "
                                      "(--norm-stats bf16-onepass)"),
                  "the run does not say what --norm-stats does: %s", out_buf);
    json_t *j = load_summary(abl);
    ck_assert_str_eq(cfg_str(j, "norm-stats"), "bf16-onepass");
    ck_assert_msg(node_stats(j, "bn") && strcmp(node_stats(j, "bn"), "bf16-onepass") == 0 && node_stats(j, "ln") &&
                      strcmp(node_stats(j, "ln"), "bf16-onepass") == 0 && node_stats(j, "fc1") == NULL,
                  "precision map stats: bn %s, ln %s", node_stats(j, "bn"), node_stats(j, "ln"));
    char want[64];
    snprintf(want, sizeof want, "test accuracy %.2f%%", 100.0 * jnum(j, "final_test_accuracy"));
    json_decref(j);
    json_t *cfg = ckpt_config(abl);
    ck_assert_str_eq(json_string_value(json_object_get(cfg, "norm-stats")), "bf16-onepass");
    json_decref(cfg);
    /* the policy: not written into the checkpoint (as before the option existed), and other weights */
    rc = run("train", "--data", data, "--device", "cpu", "--model", NORM_SPEC, "--precision", "bf16", "--batch-size",
             "16", "--max-steps", "3", "--limit-test", "32", "--progress", "off", "--out", pol, NULL);
    ck_assert_msg(rc == 0 && !strstr(out_buf, "--norm-stats"), "train (policy): %d %s", rc, out_buf);
    cfg = ckpt_config(pol);
    ck_assert_msg(json_object_get(cfg, "norm-stats") == NULL, "a policy run's checkpoint records norm-stats");
    json_decref(cfg);
    j = load_summary(pol);
    ck_assert_str_eq(cfg_str(j, "norm-stats"), "fp32");
    ck_assert_msg(node_stats(j, "bn") && strcmp(node_stats(j, "bn"), "fp32") == 0, "policy run: bn stats %s",
                  node_stats(j, "bn"));
    json_decref(j);
    ck_assert_msg(tensors_differ(abl, pol), "--norm-stats bf16-onepass trained the policy's weights");
    /* eval computes the layer norm's statistics as the run did: its accuracy again */
    char ck[4400];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", abl);
    rc = run("eval", "--checkpoint", ck, "--data", data, "--device", "cpu", "--limit-test", "32", NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, want), "eval of a --norm-stats checkpoint (want '%s'): %d %s", want, rc,
                  out_buf);
    /* a network that starts with a layer norm (its input has no gradient: no dx) trains; eval --quantize's unquantized
     * model is eval's, the same test loss (the layer norm's BF16 one-pass statistics as trained: FP32 ones give
     * another loss at the printed digits here) */
    const char *inln = tmp_path("inputln");
    rc = run("train", "--data", data, "--device", "cpu", "--model", "flatten,layernorm,linear(16),relu,linear",
             "--precision", "bf16", "--norm-stats", "bf16-onepass", "--batch-size", "16", "--max-steps", "3",
             "--limit-test", "32", "--progress", "off", "--out", inln, NULL);
    ck_assert_msg(rc == 0, "train with a layer norm first failed (%d): %s", rc, out_buf);
    char ckl[4400];
    snprintf(ckl, sizeof ckl, "%s/checkpoint.safetensors", inln);
    rc = run("eval", "--checkpoint", ckl, "--data", data, "--device", "cpu", "--limit-test", "32", NULL);
    const char *lp = strstr(out_buf, "test loss ");
    ck_assert_msg(rc == 0 && lp != NULL, "eval: %d %s", rc, out_buf);
    char wantq[96];
    snprintf(wantq, sizeof wantq, "test loss %.4f -> ", strtod(lp + strlen("test loss "), NULL));
    rc = run("eval", "--checkpoint", ckl, "--data", data, "--device", "cpu", "--limit-test", "32", "--quantize", "int8",
             NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, wantq), "eval --quantize of a --norm-stats checkpoint (want '%s'): %d %s",
                  wantq, rc, out_buf);
    /* resume keeps it: another row is refused, naming both */
    rc = run("train", "--resume", ck, "--data", data, "--device", "cpu", "--norm-stats", "fp16", "--out",
             tmp_path("bad"), NULL);
    ck_assert_msg(rc == 2 && strstr(out_buf, "--norm-stats fp16 conflicts with the checkpoint's bf16-onepass"),
                  "resume with another --norm-stats: %d %s", rc, out_buf);
    /* a network without normalisation: a note that it changes nothing */
    rc = run("train", "--data", data, "--device", "cpu", "--norm-stats", "fp16", "--max-steps", "1", "--limit-test",
             "16", "--progress", "off", "--out", tmp_path("mlp"), NULL);
    ck_assert_msg(rc == 0 && strstr(out_buf, "note: --norm-stats fp16 changes nothing: the model has no batchnorm or "
                                             "layernorm"), "mlp --norm-stats fp16: %d %s", rc, out_buf);
    rm_tmpdir();
    /* resume is bit-exact with 16-bit statistics */
    const char *extra[] = {"--norm-stats", "fp16-onepass", NULL};
    resume_case(NORM_SPEC, "fp16", extra, 6, 3);
}
END_TEST

static Suite *cli_suite(void) {
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("flags");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_help_defaults_per_command);
    tcase_add_loop_test(tc, test_bad_flags, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, test_missing_data_dir);
    tcase_add_test(tc, test_info);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("train");
    tcase_set_timeout(tr, 240);
    tcase_add_test(tr, test_train_outputs_and_eval);
    tcase_add_loop_test(tr, test_models, 0, (int)(sizeof model_cases / sizeof model_cases[0]));
    tcase_add_test(tr, test_resume_fp16_mlp);
    tcase_add_test(tr, test_resume_fp16_hysteresis);
    tcase_add_test(tr, test_resume_fp16_floor);
    tcase_add_test(tr, test_resume_bf16_cnn_dropout);
    tcase_add_test(tr, test_resume_switches);
    tcase_add_test(tr, test_cpu_kernels_native);
    tcase_add_test(tr, test_epoch_time_excludes_telemetry);
    tcase_add_test(tr, test_openblas_core_choice);
    tcase_add_test(tr, test_cpu_kernels_auto);
    tcase_add_test(tr, test_resume_fp8);
    tcase_add_test(tr, test_resume_qat);
    tcase_add_test(tr, test_eval_quantize);
    tcase_add_test(tr, test_switches_in_outputs);
    tcase_add_test(tr, test_unused_flag_notes);
    tcase_add_test(tr, test_compare_report);
    tcase_add_test(tr, test_compare_report_scale_rule);
    tcase_add_test(tr, test_compare_numerics_without_points);
    tcase_add_test(tr, test_telemetry_only_reads);
    tcase_add_test(tr, test_compare_seeds);
    tcase_add_test(tr, test_fashion_mnist_short);
    tcase_add_test(tr, test_accum_model);
    tcase_add_test(tr, test_norm_stats);
    tcase_add_loop_test(tr, test_fixtures_train, 0, (int)(sizeof fixtures / sizeof fixtures[0]));
    tcase_add_test(tr, test_spec_checkpoint_eval);
    tcase_add_test(tr, test_resume_batchnorm);
    tcase_add_test(tr, test_spec_and_data_errors);
    tcase_add_test(tr, test_eval_keeps_tf32_switches);
    suite_add_tcase(s, tr);
    TCase *ts = tcase_create("stops"); /* runs that end with nothing to train, inside an epoch, or without a checkpoint */
    tcase_set_timeout(ts, 120);
    tcase_add_test(ts, test_resume_nothing_left);
    tcase_add_test(ts, test_partial_epoch_summary);
    tcase_add_test(ts, test_nonfinite_apply);
    tcase_add_test(ts, test_inject_nonfinite_in_run);
    tcase_add_test(ts, test_resume_keeps_telemetry);
    suite_add_tcase(s, ts);
    TCase *tu = tcase_create("unused"); /* flags that did nothing where they cannot act: refused, or a note */
    tcase_set_timeout(tu, 120);
    tcase_add_test(tu, test_data_layout_rank3_note);
    tcase_add_test(tu, test_tf32_conv_without_convs);
    tcase_add_test(tu, test_granularity_needs_scale);
    tcase_add_test(tu, test_more_unused_notes);
    suite_add_tcase(s, tu);
    return s;
}

int main(void) { return mpt_test_run_msg(cli_suite(), sizeof out_buf + MPT_TEST_MSG_MARGIN); }
