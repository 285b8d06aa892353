/*
 * bench/fusion_bench.c - what the GEMM-epilogue fusions (engine/graph.h "Fused epilogues") cost or save per
 * training step on the CPU backend: the same model, precision and batch trained with
 *   off   no fusion (g->fuse_epilogues = 0, as MPT_FUSED_EPILOGUES=0),
 *   bgrad the bias gradient from the weight-gradient GEMM only (MPT_EPILOGUE_BGRAD: fuse_epilogues cleared at
 *         mpt_graph_alloc, so no linear -> relu pair is planned, and set again before the first step),
 *   all   every fusion (BGRAD, RELU_AUX_BIAS, DRELU_BGRAD),
 * run alternately (off, bgrad, all, off, ...) so that the machine's drift hits every variant alike. Each
 * sample is the time of `steps` training steps after `warmup` untimed ones, on synthetic data (the step's work
 * does not depend on the pixel values). Prints every sample, then per variant the median seconds per step and,
 * for bgrad and all, the median, min and max of the per-round ratio to off (> 1: slower than off).
 *
 * Usage: OPENBLAS_NUM_THREADS=1 build-rel/bench/fusion_bench [--model mlp] [--precision fp32] [--batch 128]
 *        [--rounds 9] [--steps 40] [--warmup 5] [--cpu-time]
 * --cpu-time times with the process's CPU clock instead of the wall clock: on a machine shared with other jobs
 * it leaves out the time the process was not running (meaningful with one OpenBLAS thread).
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

enum { N_VARIANTS = 3, MAX_ROUNDS = 101 };
static const char *const variant_names[N_VARIANTS] = {"off", "bgrad", "all"};

typedef struct opts {
    const char *model;
    mpt_precision precision;
    int batch, rounds, steps, warmup, cpu_time;
} opts;

/* A trainer for variant v (index into variant_names) on be; exits with a message on failure. */
static mpt_trainer *make_trainer(mpt_backend *be, const opts *o, int v) {
    mpt_policy pol = mpt_policy_make(o->precision);
    mpt_graph *g = mpt_graph_create(be, &pol, o->batch);
    mpt_tensor *logits = NULL;
    if (mpt_model_build(g, o->model, &logits) != MPT_OK) {
        fprintf(stderr, "fusion_bench: %s\n", mpt_last_error());
        exit(2);
    }
    mpt_softmax_xent(g, logits, "loss");
    g->fuse_epilogues = v == 2;
    mpt_train_config cfg = mpt_train_config_default(o->precision);
    cfg.seed = 5;
    mpt_trainer *t = NULL;
    if (mpt_trainer_create(&t, g, &cfg) != MPT_OK) {
        fprintf(stderr, "fusion_bench: mpt_trainer_create: %s\n", mpt_last_error());
        exit(1);
    }
    g->fuse_epilogues = v != 0; /* bgrad: no relu pair was planned, the BGRAD epilogue still runs */
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
        fprintf(stderr, "fusion_bench: %s expects an integer in [%d, %d], got '%s'\n", flag, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

static void parse(int argc, char **argv, opts *o) {
    *o = (opts){"mlp", MPT_PRECISION_FP32, 128, 9, 40, 5, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("Usage: fusion_bench [--model mlp] [--precision fp32] [--batch 128] [--rounds 9] [--steps 40]\n"
                   "                    [--warmup 5] [--cpu-time]\n"
                   "Training-step time with the GEMM-epilogue fusions off, in part and on, on the CPU, alternating, median of the\n"
                   "rounds. --cpu-time: the process's CPU clock (meaningful with one thread: OPENBLAS_NUM_THREADS=1).\n");
            exit(0);
        }
        if (strcmp(a, "--cpu-time") == 0) { o->cpu_time = 1; continue; }
        if (!v) { fprintf(stderr, "fusion_bench: unknown or incomplete argument '%s'\n", a); exit(2); }
        i++;
        if (strcmp(a, "--model") == 0) o->model = v;
        else if (strcmp(a, "--precision") == 0) {
            if (mpt_precision_parse(v, &o->precision) != 0) {
                fprintf(stderr, "fusion_bench: --precision expects fp32, tf32, fp16 or bf16, got '%s'\n", v);
                exit(2);
            }
        } else if (strcmp(a, "--batch") == 0) o->batch = parse_int(a, v, 1, 65536);
        else if (strcmp(a, "--rounds") == 0) o->rounds = parse_int(a, v, 1, MAX_ROUNDS);
        else if (strcmp(a, "--steps") == 0) o->steps = parse_int(a, v, 1, 1000000);
        else if (strcmp(a, "--warmup") == 0) o->warmup = parse_int(a, v, 0, 1000000);
        else { fprintf(stderr, "fusion_bench: unknown argument '%s'\n", a); exit(2); }
    }
}

int main(int argc, char **argv) {
    opts o;
    parse(argc, argv, &o);
    mpt_mnist d;
    if (mpt_synthetic_blobs(&d, 4096, 16, 784, 10, 3) != MPT_OK) {
        fprintf(stderr, "fusion_bench: synthetic data: %s\n", mpt_last_error());
        return 1;
    }
    mpt_backend *be = mpt_backend_cpu_create();
    int32_t *idx = malloc((size_t)o.batch * sizeof *idx);
    if (!be || !idx) { fprintf(stderr, "fusion_bench: out of memory\n"); return 1; }
    mpt_trainer *tr[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++) tr[v] = make_trainer(be, &o, v);
    static double sec[N_VARIANTS][MAX_ROUNDS], ratio[N_VARIANTS][MAX_ROUNDS];
    printf("# %s %s batch %d, %d steps per sample, %s clock\nround", o.model, mpt_precision_name(o.precision),
           o.batch, o.steps, o.cpu_time ? "process CPU" : "wall");
    for (int v = 0; v < N_VARIANTS; v++) printf(" %s_s_per_step", variant_names[v]);
    printf("\n");
    for (int r = 0; r < o.rounds; r++) {
        printf("%d", r);
        for (int v = 0; v < N_VARIANTS; v++) {
            sec[v][r] = time_steps(tr[v], &d, &o, idx) / o.steps;
            printf(" %.6f", sec[v][r]);
        }
        for (int v = 1; v < N_VARIANTS; v++) ratio[v][r] = sec[v][r] / sec[0][r];
        printf("\n");
        fflush(stdout);
    }
    printf("variant median_ms_per_step ratio_to_off_median ratio_min ratio_max\n");
    for (int v = 0; v < N_VARIANTS; v++) {
        double med = bench_median(sec[v], o.rounds) * 1e3;
        if (v == 0) { printf("%s %.3f 1 1 1\n", variant_names[v], med); continue; }
        double m = bench_median(ratio[v], o.rounds); /* sorts ratio[v] */
        printf("%s %.3f %.3f %.3f %.3f\n", variant_names[v], med, m, ratio[v][0], ratio[v][o.rounds - 1]);
    }
    for (int v = 0; v < N_VARIANTS; v++) mpt_trainer_free(&tr[v]);
    mpt_backend_free(&be);
    mpt_mnist_free(&d);
    free(idx);
    return 0;
}
