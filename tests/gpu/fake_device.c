/*
 * tests/gpu/fake_device.c - the stand-in for a GPU in tests/gpu/test_gpu_script.sh: bench/gpu.sh's plumbing
 * rehearsed on a machine without one. Installed under the names of what a prebuilt carry holds, it behaves, by
 * the name it was started as, like
 *   mptrain      --version; info (a usable fake GPU); train --out DIR (summary.json and metrics.csv as mptrain
 *                writes them, the fields bench/gpu.sh and bench/summarize.py read); compare --out DIR (report.md);
 *                speedrun --out DIR (report.md, speedrun.json, the summary's first line); speedrun --print-recipe
 *   test_*       a Check program run with CK_RUN_CASE=<case> and TAP on stdout: "ok N - ..." lines, then Check's
 *                summary line; test_cuda_tc also prints a result line and, with MPT_TC_REPORT=<file>, writes a table
 *                row there as tests/test_cuda_tc.c does
 *   mlp_sweep    bench/mlp_sweep: its Markdown table for the --hidden and --batch values (three precisions); with
 *                --device cuda it checks that the CUDA module is named (MPT_CUDA_MODULE), as the real one loads it
 * Its stdout is C stdio, block-buffered when it is a file, as the real programs' is: lines survive a kill only
 * when the runner makes them line-buffered (stdbuf), which is what the rehearsal checks. FAKE_HANG=<key> makes the
 * run whose key ("<program>/<case>" for a test, "mptrain <command> <model>" for mptrain) contains it print one more
 * line and then sleep (a hang); FAKE_FAIL=<key> makes it fail (a "not ok" line, exit 1); FAKE_GRAPH_CHANGES_MATH=1
 * makes `train --cuda-graph on` write another first loss than `--cuda-graph off` (metrics.csv), and
 * FAKE_FUSED_CHANGES_MATH=1 makes a `train` with MPT_CUDA_FUSED_UPDATE=1 do the same (a fused path that is wrong).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *arg_after(int argc, char **argv, const char *flag, const char *def) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0) return argv[i + 1];
    return def;
}

static int matches(const char *var, const char *key) {
    const char *v = getenv(var);
    return v && v[0] && strstr(key, v) != NULL;
}

/* A hang: one more line (left in the stdio buffer unless stdout is line-buffered), then sleep; bounded (FAKE_HANG_S,
 * default 120 s) so that a stand-in orphaned by a killed runner ends by itself. */
static void hang(const char *key) {
    printf("fake device: %s hangs now\n", key);
    const char *s = getenv("FAKE_HANG_S");
    sleep(s ? (unsigned)atoi(s) : 120u);
    exit(3);
}

static FILE *create(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "fake device: cannot create %s: %s\n", path, strerror(errno));
        exit(3);
    }
    return f;
}

static int fake_mptrain(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "--version") == 0) {
        printf("mptrain 0.1.0 (fake device)\n");
        return 0;
    }
    char key[256];
    snprintf(key, sizeof key, "mptrain %s %s", cmd, arg_after(argc, argv, "--model", "-"));
    if (strcmp(cmd, "info") == 0) {
        printf("mptrain 0.1.0\nbackends:\n  cpu   built: yes; loadable: yes; usable: yes\n");
        printf("  cuda  built:    yes (Meson -Dcuda)\n        loadable: yes, fake\n");
        printf("        usable:   yes: Fake H200 (stand-in for a GPU: tests/gpu/fake_device.c)\n");
        printf("cuda libraries (loaded by the CUDA module: the version found at run time, then its file):\n");
        printf("  CUDA runtime        13.0 (built against 13.0)\n                      /fake/libcudart.so.13\n");
        return 0;
    }
    if (strcmp(cmd, "speedrun") == 0 && argc > 2 && strcmp(argv[2], "--print-recipe") == 0) {
        printf("--model 'conv(4,3),relu,flatten,linear' --epochs 1\n");
        return 0;
    }
    if (strcmp(cmd, "train") != 0 && strcmp(cmd, "compare") != 0 && strcmp(cmd, "speedrun") != 0) {
        fprintf(stderr, "fake device: mptrain %s is not faked\n", cmd);
        return 2;
    }
    const char *out = arg_after(argc, argv, "--out", NULL);
    if (!out || (mkdir(out, 0777) != 0 && errno != EEXIST)) {
        fprintf(stderr, "fake device: no --out directory\n");
        return 2;
    }
    printf("data: 60000 training images, 10000 test images (fake)\n");
    printf("fake device: %s, epoch 1 done\n", key);
    if (matches("FAKE_HANG", key)) hang(key);
    if (matches("FAKE_FAIL", key)) {
        fprintf(stderr, "mptrain: fatal: fake failure of %s\n", key);
        return 1;
    }
    if (strcmp(cmd, "speedrun") == 0) {
        FILE *f = create(out, "report.md");
        fprintf(f, "# mptrain speedrun (fake)\n\n| precision | mean test acc (%%) [95%% CI] |\n|---|---:|\n"
                   "| bf16 | 90.50 [90.30, 90.70] |\n");
        fclose(f);
        f = create(out, "speedrun.json");
        fprintf(f, "{\"precisions\": [{\"precision\": \"bf16\"}]}\n");
        fclose(f);
        printf("mptrain speedrun: %s seed(s) per precision, target 90.0%% test accuracy (fake)\n",
               arg_after(argc, argv, "--seeds", "10"));
        return 0;
    }
    if (strcmp(cmd, "compare") == 0) {
        FILE *f = create(out, "report.md");
        fprintf(f, "# compare (fake)\n\n| precision | accuracy |\n|---|---:|\n| fp32 | 85.0 |\n");
        fclose(f);
        printf("| fp32 | 85.0 | (fake table)\n");
        return 0;
    }
    const int epochs = atoi(arg_after(argc, argv, "--epochs", "1"));
    FILE *f = create(out, "summary.json");
    fprintf(f, "{\"epoch_times_s\": [");
    for (int e = 0; e < epochs; e++) fprintf(f, "%s%.4f", e ? ", " : "", 0.5 - 0.01 * e);
    fprintf(f, "], \"epoch_gpu_times_s\": [");
    for (int e = 0; e < epochs; e++) fprintf(f, "%s%.4f", e ? ", " : "", 0.4 - 0.01 * e);
    fprintf(f, "], \"final_test_accuracy\": 0.85, \"final_test_loss\": 0.42, \"final_loss_scale\": 65536.0, "
               "\"steps_skipped\": 0, \"peak_memory_bytes\": {\"total\": 1048576}, "
               "\"cuda_graph\": {\"status\": \"fake\"}}\n");
    fclose(f);
    /* as mptrain's: each run's own id in the last column; FAKE_GRAPH_CHANGES_MATH: --cuda-graph on moves a loss,
     * FAKE_FUSED_CHANGES_MATH: MPT_CUDA_FUSED_UPDATE=1 does */
    const char *fused = getenv("MPT_CUDA_FUSED_UPDATE");
    const int moved = getenv("FAKE_GRAPH_CHANGES_MATH") && strcmp(arg_after(argc, argv, "--cuda-graph", ""), "on") == 0;
    const int moved_fused = getenv("FAKE_FUSED_CHANGES_MATH") && fused && strcmp(fused, "1") == 0;
    f = create(out, "metrics.csv");
    fprintf(f, "epoch,loss,run_id\n");
    for (int e = 0; e < epochs; e++)
        fprintf(f, "%d,0.%d%s%s,%08x\n", e + 1, 5 - e, moved && e == 0 ? "1" : "", moved_fused && e == 0 ? "2" : "",
                (unsigned)getpid());
    fclose(f);
    return 0;
}

static int fake_mlp_sweep(int argc, char **argv) {
    if (!getenv("MPT_CUDA_MODULE")) {
        fprintf(stderr, "mlp_sweep (fake): --device cuda: no usable GPU: CUDA backend module not found\n");
        return 2;
    }
    const char *hidden = arg_after(argc, argv, "--hidden", "512"), *batch = arg_after(argc, argv, "--batch", "128");
    printf("# mlp 784-H-H-10 sweep on Fake H200 (fake)\n\n| H | B | precision | GEMM GFLOP/step | us/step (median) | "
           "min-max (us) | achieved TFLOP/s | %% of peak | step graph |\n|---:|---:|---|---:|---:|---:|---:|---:|---|\n");
    char hb[128], bb[128];
    snprintf(hb, sizeof hb, "%s", hidden);
    for (char *s1 = NULL, *h = strtok_r(hb, ",", &s1); h; h = strtok_r(NULL, ",", &s1)) {
        snprintf(bb, sizeof bb, "%s", batch);
        for (char *s2 = NULL, *b = strtok_r(bb, ",", &s2); b; b = strtok_r(NULL, ",", &s2)) {
            const char *precs[] = {"fp32", "bf16", "fp16"};
            for (int p = 0; p < 3; p++)
                printf("| %s | %s | %s | 1.000 | 100.0 | 99.0-101.0 | 10.00 | 1.0%% | on (fake) |\n", h, b, precs[p]);
        }
    }
    return 0;
}

static int fake_check_program(const char *prog) {
    const char *tcase = getenv("CK_RUN_CASE");
    char key[256];
    snprintf(key, sizeof key, "%s/%s", prog, tcase ? tcase : "(all)");
    printf("%s: Fake H200 (stand-in for a GPU)\n", prog);
    printf("ok 1 - tests/%s.c:%s:first_test: Passed\n", prog, tcase ? tcase : "all");
    if (matches("FAKE_HANG", key)) hang(key);
    if (matches("FAKE_FAIL", key)) {
        printf("not ok 2 - tests/%s.c:%s:second_test: fake failure\n", prog, tcase ? tcase : "all");
        printf("50%%: Checks: 2, Failures: 1, Errors: 0\n");
        return 1;
    }
    printf("ok 2 - tests/%s.c:%s:second_test: Passed\n", prog, tcase ? tcase : "all");
    const char *report = getenv("MPT_TC_REPORT");
    if (strcmp(prog, "test_cuda_tc") == 0) {
        printf("test_cuda_tc: gemm fp16 fc1 fwd 128x 512x 784: bit-identical to h100 100.00%% (fake)\n");
        if (report && report[0]) {
            FILE *f = fopen(report, "w");
            if (!f) {
                fprintf(stderr, "fake device: cannot write %s: %s\n", report, strerror(errno));
                return 3;
            }
            fprintf(f, "| format | GEMM |\n|---|---|\n| fp16 | fc1 fwd (fake) |\n");
            fclose(f);
        }
    }
    printf("100%%: Checks: 2, Failures: 0, Errors: 0\n");
    return 0;
}

int main(int argc, char **argv) {
    const char *name = strrchr(argv[0], '/');
    name = name ? name + 1 : argv[0];
    if (strcmp(name, "mptrain") == 0) return fake_mptrain(argc, argv);
    if (strcmp(name, "mlp_sweep") == 0) return fake_mlp_sweep(argc, argv);
    return fake_check_program(name);
}
