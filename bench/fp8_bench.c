/*
 * bench/fp8_bench.c - what the FP8 modes cost per training step on the CPU backend against bf16 (issue 23): the same
 * model and batch trained in
 *   bf16        the baseline,
 *   fp8         --precision fp8 (delayed scaling, FP32 accumulation),
 *   fp8-fast    fp8 with --fp8-accum fast (the model of Hopper's accumulator, kernels/cpu/fp8.c),
 *   mxfp8       --precision mxfp8 (E8M0 scales per 32 elements),
 * run alternately (bf16, fp8, fp8-fast, mxfp8, bf16, ...) so that the machine's drift hits every variant alike.
 * Each sample is the time of `steps` training steps after `warmup` untimed ones, on synthetic data (the step's work
 * does not depend on the pixel values). Prints every sample, then per variant the median milliseconds per step and
 * the median, min and max of the per-round ratio to bf16 (> 1: slower than bf16), and in how many rounds it was the
 * slower.
 *
 * The CPU runs FP8 GEMMs as an exact emulation (decode to FP32, FP32 GEMM; or the fast model, element by element):
 * on a CPU FP8 costs time (casts, transposed copies, decoding) and saves none; the figures say how much, not what a
 * GPU would gain (docs/benchmarks.md).
 *
 * Usage: OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 build-rel/bench/fp8_bench [--model mlp] [--batch 128] [--rounds 9]
 *        [--steps 40] [--warmup 5] [--variants bf16,fp8,fp8-fast,mxfp8] [--cpu-time]
 * --cpu-time times with the process's CPU clock instead of the wall clock (meaningful with one thread: OpenBLAS's
 * and oneDNN's OpenMP threads both). --variants runs a subset (bf16, the baseline, always runs): fp8-fast costs about
 * 200 bf16 steps a step, so a run without it can afford longer samples.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "datasets/synthetic.h"
#include "engine/layers/layers.h"
#include "engine/train.h"
#include "models/models.h"

enum { N_VARIANTS = 4, MAX_ROUNDS = 101 };
static const char *const variant_names[N_VARIANTS] = {"bf16", "fp8", "fp8-fast", "mxfp8"};
static const mpt_precision variant_prec[N_VARIANTS] = {MPT_PRECISION_BF16, MPT_PRECISION_FP8, MPT_PRECISION_FP8,
                                                       MPT_PRECISION_MXFP8};

typedef struct opts {
    const char *model;
    int batch, rounds, steps, warmup, cpu_time;
    int use[N_VARIANTS]; /* which variants run (--variants); use[0] (bf16) always */
} opts;

/* A trainer for variant v on its own backend; exits with a message on failure. */
static mpt_trainer *make_trainer(mpt_backend *be, const opts *o, int v) {
    mpt_policy pol = mpt_policy_make(variant_prec[v]);
    if (v == 2) pol.fp8.accum = MPT_FP8_ACCUM_FAST;
    mpt_graph *g = mpt_graph_create(be, &pol, o->batch);
    mpt_tensor *logits = NULL;
    if (mpt_model_build(g, o->model, &logits) != MPT_OK) {
        fprintf(stderr, "fp8_bench: %s\n", mpt_last_error());
        exit(2);
    }
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_train_config_default(variant_prec[v]);
    cfg.seed = 5;
    mpt_trainer *t = NULL;
    if (mpt_trainer_create(&t, g, &cfg) != MPT_OK) {
        fprintf(stderr, "fp8_bench: mpt_trainer_create: %s\n", mpt_last_error());
        exit(1);
    }
    return t;
}

/* Seconds for o->steps steps after o->warmup untimed ones. */
static double time_steps(mpt_trainer *t, const mpt_mnist *d, const opts *o, int32_t *idx) {
    double t0 = 0.0;
    for (int s = 0; s < o->warmup + o->steps; s++) {
        if (s == o->warmup) t0 = bench_now_s(bench_clock_of(o->cpu_time));
        for (int i = 0; i < o->batch; i++) idx[i] = (int32_t)(((int64_t)s * o->batch + i) % d->n_train);
        mpt_trainer_gather(t, d->train_images, d->train_labels, idx, d->dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
    }
    mpt_train_stats st;
    mpt_trainer_stats(t, &st); /* waits for the step's results */
    return bench_now_s(bench_clock_of(o->cpu_time)) - t0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "fp8_bench: %s expects an integer in [%d, %d], got '%s'\n", flag, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

/* --variants LIST: comma-separated names of variant_names; bf16 is added when missing. */
static void parse_variants(const char *s, int use[N_VARIANTS]) {
    for (int v = 0; v < N_VARIANTS; v++) use[v] = v == 0;
    const char *p = s;
    while (*p) {
        size_t n = strcspn(p, ",");
        int found = 0;
        for (int v = 0; v < N_VARIANTS; v++)
            if (strlen(variant_names[v]) == n && strncmp(p, variant_names[v], n) == 0) use[v] = found = 1;
        if (!found) {
            fprintf(stderr, "fp8_bench: --variants: unknown variant '%.*s' in '%s' (expected bf16, fp8, fp8-fast, "
                            "mxfp8)\n", (int)n, p, s);
            exit(2);
        }
        p += n + (p[n] == ',');
    }
}

static void parse(int argc, char **argv, opts *o) {
    *o = (opts){"mlp", 128, 9, 40, 5, 0, {1, 1, 1, 1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("Usage: fp8_bench [--model mlp] [--batch 128] [--rounds 9] [--steps 40] [--warmup 5]\n"
                   "                 [--variants bf16,fp8,fp8-fast,mxfp8] [--cpu-time]\n"
                   "Training-step time of the FP8 recipes against bf16 on the CPU, alternating, median of the rounds.\n"
                   "--cpu-time: the process's CPU clock (meaningful with one thread: OPENBLAS_NUM_THREADS=1\n"
                   "OMP_NUM_THREADS=1); --variants: a subset (bf16, the baseline, always runs).\n");
            exit(0);
        }
        if (strcmp(a, "--cpu-time") == 0) { o->cpu_time = 1; continue; }
        if (!v) { fprintf(stderr, "fp8_bench: unknown or incomplete argument '%s'\n", a); exit(2); }
        i++;
        if (strcmp(a, "--model") == 0) o->model = v;
        else if (strcmp(a, "--batch") == 0) o->batch = parse_int(a, v, 1, 65536);
        else if (strcmp(a, "--rounds") == 0) o->rounds = parse_int(a, v, 1, MAX_ROUNDS);
        else if (strcmp(a, "--steps") == 0) o->steps = parse_int(a, v, 1, 1000000);
        else if (strcmp(a, "--warmup") == 0) o->warmup = parse_int(a, v, 0, 1000000);
        else if (strcmp(a, "--variants") == 0) parse_variants(v, o->use);
        else { fprintf(stderr, "fp8_bench: unknown argument '%s'\n", a); exit(2); }
    }
}

int main(int argc, char **argv) {
    opts o;
    parse(argc, argv, &o);
    mpt_mnist d;
    if (mpt_synthetic_blobs(&d, 4096, 16, 784, 10, 3) != MPT_OK) {
        fprintf(stderr, "fp8_bench: synthetic data: %s\n", mpt_last_error());
        return 1;
    }
    mpt_backend *be[N_VARIANTS] = {0};
    mpt_trainer *tr[N_VARIANTS] = {0};
    int32_t *idx = malloc((size_t)o.batch * sizeof *idx);
    if (!idx) { fprintf(stderr, "fp8_bench: out of memory\n"); return 1; }
    for (int v = 0; v < N_VARIANTS; v++) { /* a backend each: the FP8 state lives in the backend's memory */
        if (!o.use[v]) continue;
        be[v] = mpt_backend_cpu_create();
        if (!be[v]) { fprintf(stderr, "fp8_bench: no CPU backend\n"); return 1; }
        tr[v] = make_trainer(be[v], &o, v);
    }
    static double sec[N_VARIANTS][MAX_ROUNDS], ratio[N_VARIANTS][MAX_ROUNDS];
    int slower[N_VARIANTS] = {0};
    printf("# %s batch %d, %d steps per sample, %s clock\nround", o.model, o.batch, o.steps,
           o.cpu_time ? "process CPU" : "wall");
    for (int v = 0; v < N_VARIANTS; v++)
        if (o.use[v]) printf(" %s_s_per_step", variant_names[v]);
    printf("\n");
    for (int r = 0; r < o.rounds; r++) {
        printf("%d", r);
        for (int v = 0; v < N_VARIANTS; v++) {
            if (!o.use[v]) continue;
            sec[v][r] = time_steps(tr[v], &d, &o, idx) / o.steps;
            printf(" %.6f", sec[v][r]);
        }
        for (int v = 1; v < N_VARIANTS; v++) {
            if (!o.use[v]) continue;
            ratio[v][r] = sec[v][r] / sec[0][r];
            slower[v] += ratio[v][r] > 1.0;
        }
        printf("\n");
        fflush(stdout);
    }
    printf("variant median_ms_per_step ratio_to_bf16_median ratio_min ratio_max rounds_slower\n");
    for (int v = 0; v < N_VARIANTS; v++) {
        if (!o.use[v]) continue;
        double med = bench_median(sec[v], o.rounds) * 1e3;
        if (v == 0) { printf("%s %.3f 1 1 1 -\n", variant_names[v], med); continue; }
        double m = bench_median(ratio[v], o.rounds); /* sorts ratio[v] */
        printf("%s %.3f %.3f %.3f %.3f %d/%d\n", variant_names[v], med, m, ratio[v][0], ratio[v][o.rounds - 1],
               slower[v], o.rounds);
    }
    for (int v = 0; v < N_VARIANTS; v++) {
        if (!o.use[v]) continue;
        mpt_trainer_free(&tr[v]);
        mpt_backend_free(&be[v]);
    }
    mpt_mnist_free(&d);
    free(idx);
    return 0;
}
