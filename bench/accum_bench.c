/*
 * bench/accum_bench.c - what --accum-model costs per training step on the CPU backend against ieee (issue 39, part C):
 * one model, precision and batch trained with
 *   ieee        the emulate kernel set's FP32 sums (oneDNN, else OpenBLAS): the baseline,
 *   h100, ...   the Tensor Core summation models (--models; mpt_backend_cpu_set_accum, kernels/cpu/tc_accum.h),
 * each on its own backend and trainer, run alternately (ieee, h100, ..., ieee, ...) so that the machine's drift hits
 * every variant alike. Each sample is the time of `steps` training steps after `warmup` untimed ones on synthetic data
 * (a step's work does not depend on the pixel values), by default with the process's CPU clock (all its threads). Prints
 * the machine (CPU model, threads, the 1-minute load average before and after: other jobs share the cores), every
 * sample, then per variant the median milliseconds per step and the median, min and max of the per-round ratio to ieee.
 *
 * Usage: build/bench/accum_bench [--model mlp] [--precision bf16] [--batch 128] [--models h100,a100] [--rounds 5]
 *        [--steps 3] [--warmup 1] [--threads 1] [--wall]
 * --threads sets the backend's GEMM threads (mpt_cpu_set_threads: OpenBLAS's, oneDNN's and the models' OpenMP
 * threads); --wall times with the wall clock instead of CPU time (for --threads above 1).
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

enum { MAX_VARIANTS = 1 + MPT_ACCUM_MODEL_COUNT, MAX_ROUNDS = 101 };

typedef struct opts {
    const char *model;
    mpt_precision precision;
    int batch, rounds, steps, warmup, threads, wall;
    mpt_accum_model variants[MAX_VARIANTS]; /* [0] = ieee */
    int n_variants;
} opts;

static void fail(const char *what) {
    fprintf(stderr, "accum_bench: %s: %s\n", what, mpt_last_error());
    exit(1);
}

/* A trainer for model m on its own backend. */
static mpt_trainer *make_trainer(mpt_backend *be, const opts *o, mpt_accum_model m) {
    if (mpt_backend_cpu_set_accum(be, m) != MPT_OK) fail("mpt_backend_cpu_set_accum");
    mpt_policy pol = mpt_policy_make(o->precision);
    mpt_graph *g = mpt_graph_create(be, &pol, o->batch);
    mpt_tensor *logits = NULL;
    if (mpt_model_build(g, o->model, &logits) != MPT_OK) fail("mpt_model_build");
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_train_config_default(o->precision);
    cfg.seed = 5;
    mpt_trainer *t = NULL;
    if (mpt_trainer_create(&t, g, &cfg) != MPT_OK) fail("mpt_trainer_create");
    return t;
}

/* Seconds for o->steps steps after o->warmup untimed ones. */
static double time_steps(mpt_trainer *t, const mpt_mnist *d, const opts *o, int32_t *idx) {
    const clockid_t c = bench_clock_of(!o->wall);
    double t0 = 0.0;
    for (int s = 0; s < o->warmup + o->steps; s++) {
        if (s == o->warmup) t0 = bench_now_s(c);
        for (int i = 0; i < o->batch; i++) idx[i] = (int32_t)(((int64_t)s * o->batch + i) % d->n_train);
        mpt_trainer_gather(t, d->train_images, d->train_labels, idx, d->dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
    }
    mpt_train_stats st;
    mpt_trainer_stats(t, &st); /* waits for the step's results */
    return bench_now_s(c) - t0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "accum_bench: %s expects an integer in [%d, %d], got '%s'\n", flag, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

/* --models LIST: comma-separated Tensor Core models (ieee is the baseline, always first). */
static void parse_models(const char *s, opts *o) {
    char buf[128];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "accum_bench: --models: list too long\n");
        exit(2);
    }
    snprintf(buf, sizeof buf, "%s", s);
    o->n_variants = 1;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        mpt_accum_model m;
        if (mpt_accum_model_parse(tok, &m) != 0 || m == MPT_ACCUM_MODEL_IEEE || o->n_variants >= MAX_VARIANTS) {
            fprintf(stderr, "accum_bench: --models: '%s' is not one of v100, a100, ada, h100, b200 (ieee always runs)\n",
                    tok);
            exit(2);
        }
        o->variants[o->n_variants++] = m;
    }
}

static void parse(int argc, char **argv, opts *o) {
    *o = (opts){.model = "mlp", .precision = MPT_PRECISION_BF16, .batch = 128, .rounds = 5, .steps = 3, .warmup = 1,
                .threads = 1};
    parse_models("h100,a100", o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("Usage: accum_bench [--model mlp] [--precision bf16] [--batch 128] [--models h100,a100] [--rounds 5]\n"
                   "                   [--steps 3] [--warmup 1] [--threads 1] [--wall]\n"
                   "CPU time of training steps with each --accum-model (Tensor Core summation models) against ieee,\n"
                   "alternating, median of the rounds. --threads: the backend's GEMM threads; --wall: the wall clock\n"
                   "instead of CPU time (for --threads above 1).\n");
            exit(0);
        }
        if (strcmp(a, "--wall") == 0) {
            o->wall = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "accum_bench: unknown or incomplete argument '%s'\n", a);
            exit(2);
        }
        i++;
        if (strcmp(a, "--model") == 0) o->model = v;
        else if (strcmp(a, "--precision") == 0) {
            if (mpt_precision_parse(v, &o->precision) != 0) {
                fprintf(stderr, "accum_bench: --precision: unknown mode '%s'\n", v);
                exit(2);
            }
        } else if (strcmp(a, "--batch") == 0) o->batch = parse_int(a, v, 1, 65536);
        else if (strcmp(a, "--rounds") == 0) o->rounds = parse_int(a, v, 1, MAX_ROUNDS);
        else if (strcmp(a, "--steps") == 0) o->steps = parse_int(a, v, 1, 1000000);
        else if (strcmp(a, "--warmup") == 0) o->warmup = parse_int(a, v, 0, 1000000);
        else if (strcmp(a, "--threads") == 0) o->threads = parse_int(a, v, 1, 256);
        else if (strcmp(a, "--models") == 0) parse_models(v, o);
        else {
            fprintf(stderr, "accum_bench: unknown argument '%s'\n", a);
            exit(2);
        }
    }
}

/* The CPU's model name from /proc/cpuinfo, or "unknown". */
static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(buf, len, "%s", strchr(line, ':') + 2);
            buf[strcspn(buf, "\n")] = '\0';
            break;
        }
    fclose(f);
}

int main(int argc, char **argv) {
    opts o;
    parse(argc, argv, &o);
    for (int v = 1; v < o.n_variants; v++)
        if (!mpt_accum_model_covers(o.variants[v], mpt_mode_info(o.precision)->lowp_math)) {
            fprintf(stderr, "accum_bench: --models %s has no model for --precision %s's GEMMs\n",
                    mpt_accum_model_name(o.variants[v]), mpt_precision_name(o.precision));
            return 2;
        }
    const int threads = mpt_cpu_set_threads(o.threads);
    mpt_mnist d;
    if (mpt_synthetic_blobs(&d, 2048, 16, 784, 10, 3) != MPT_OK) fail("synthetic data");
    mpt_backend *be[MAX_VARIANTS] = {0};
    mpt_trainer *tr[MAX_VARIANTS] = {0};
    int32_t *idx = malloc((size_t)o.batch * sizeof *idx);
    if (!idx) {
        fprintf(stderr, "accum_bench: out of memory\n");
        return 1;
    }
    for (int v = 0; v < o.n_variants; v++) {
        be[v] = mpt_backend_cpu_create();
        tr[v] = make_trainer(be[v], &o, o.variants[v]);
    }
    char cpu[256], engine[256];
    cpu_model(cpu, sizeof cpu);
    mpt_cpu_engine_describe(engine, sizeof engine);
    printf("# %s, %s, batch %d, %d steps per sample after %d untimed, %s clock; %s, %d thread(s); engine %s; load "
           "average %.2f\nround",
           o.model, mpt_precision_name(o.precision), o.batch, o.steps, o.warmup, o.wall ? "wall" : "process CPU", cpu,
           threads, engine, bench_load_avg());
    for (int v = 0; v < o.n_variants; v++) printf(" %s_s_per_step", mpt_accum_model_name(o.variants[v]));
    printf("\n");
    static double sec[MAX_VARIANTS][MAX_ROUNDS], ratio[MAX_VARIANTS][MAX_ROUNDS];
    for (int r = 0; r < o.rounds; r++) {
        printf("%d", r);
        for (int v = 0; v < o.n_variants; v++) {
            sec[v][r] = time_steps(tr[v], &d, &o, idx) / o.steps;
            printf(" %.6f", sec[v][r]);
        }
        for (int v = 1; v < o.n_variants; v++) ratio[v][r] = sec[v][r] / sec[0][r];
        printf("\n");
        fflush(stdout);
    }
    printf("# load average after: %.2f\nvariant median_ms_per_step ratio_to_ieee_median ratio_min ratio_max\n",
           bench_load_avg());
    for (int v = 0; v < o.n_variants; v++) {
        const double med = bench_median(sec[v], o.rounds) * 1e3;
        if (v == 0) {
            printf("ieee %.3f 1 1 1\n", med);
            continue;
        }
        const double m = bench_median(ratio[v], o.rounds); /* sorts ratio[v] */
        printf("%s %.3f %.1f %.1f %.1f\n", mpt_accum_model_name(o.variants[v]), med, m, ratio[v][0],
               ratio[v][o.rounds - 1]);
    }
    for (int v = 0; v < o.n_variants; v++) {
        mpt_trainer_free(&tr[v]);
        mpt_backend_free(&be[v]);
    }
    mpt_mnist_free(&d);
    free(idx);
    return 0;
}
