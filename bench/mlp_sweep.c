/*
 * bench/mlp_sweep.c - how the cost of the mlp's training step grows with the work (issue 31 D): the mlp
 * 784-H-H-10 (ReLU, softmax cross-entropy, Adam) trained at hidden widths H and batches B in each precision, with
 * the achieved GEMM TFLOP/s against the GPU's dense peak for that precision, so the table shows where the step stops
 * being launch-bound (time flat in the work) and becomes compute-bound (time proportional to it), and where the
 * 16-bit and FP8 modes start to beat fp32 by the factors the hardware promises.
 *
 * Each configuration: a graph built like models/models.c's mlp with width H, batch B, on the chosen backend; a
 * trainer with mptrain's defaults (Adam lr 1e-3, FP32 masters, dynamic loss scale for fp16) and the step graph on
 * (--graph off: each operation launched); synthetic data (datasets/synthetic.h blobs, 2B rows resident in backend
 * memory, the two halves alternating as batches). --warmup untimed steps (the first selects the GEMM algorithms,
 * the second records the step graph), then --rounds samples of --steps steps each: device time by two backend marks
 * (CUDA events) around the steps on a GPU, the wall clock on the CPU backend. Per configuration: the median
 * seconds per step over the rounds, min-max beside it.
 *
 * Work per step (GEMM FLOPs only: 2 per multiply-add): forward fc1, fc2, fc3; the weight gradient of each; the data
 * gradient of fc3 and fc2 (none for fc1: the input needs no gradient, and mptrain computes none):
 *     F = 2 B (2 * 784 H + 3 H^2 + 3 * 10 H).
 * Element-wise passes, the loss and the optimizer are not counted (they are the launch-bound part at small sizes).
 * Achieved TFLOP/s = F / (seconds per step). Peak: NVIDIA's dense figure for the precision's arithmetic, from
 * mpt_sweep_peaks below (bench/README.md, "Tensor Core peaks", gives the sources): fp32 (TF32 off) against the FP32
 * non-Tensor peak, tf32 against TF32, fp16 and bf16 against FP16/BF16, fp8 and fp8-e4m3 against FP8 (their fc3,
 * 10 outputs, runs BF16: FP8 GEMMs need dimensions in multiples of 16). A GPU whose name is not in the table gets
 * no peak column (never a guessed one); --gpu-name NAME overrides the name read from the device.
 *
 * Usage: BUILDDIR/bench/mlp_sweep [--device cuda|cpu] [--precisions fp32,tf32,bf16,fp16,fp8] [--hidden 512,2048,8192]
 *        [--batch 128,1024,4096] [--steps 20] [--warmup 3] [--rounds 3] [--graph on|off] [--budget S]
 *        [--gpu-name NAME]
 * --budget S: no configuration starts after S seconds of the sweep (it is listed "not run"); 0: no limit. The
 * configurations run smallest work first. Output: a Markdown table on stdout, one row as each configuration ends;
 * exit status 0, 1 when a configuration failed (its row says why), 2 for a usage error.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "datasets/synthetic.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "engine/layers/layers.h"
#include "engine/train.h"
#include "models/models.h"

enum { MAX_LIST = 8, MAX_ROUNDS = 51 };

/* Dense peaks in TFLOP/s of one GPU (bench/README.md "Tensor Core peaks": NVIDIA's H100 architecture whitepaper and
 * the H100/H200 datasheets, their "with sparsity" figures halved). `match` is a part of the device name; `unless`,
 * when set, a part that excludes the row (an H100 PCIe is not an SXM). */
typedef struct mpt_sweep_peak {
    const char *label, *match, *unless;
    double fp32, tf32, fp16, fp8; /* TFLOP/s: FP32 FMA, TF32, FP16/BF16, FP8 Tensor Cores (FP32 accumulation) */
} mpt_sweep_peak;

static const mpt_sweep_peak mpt_sweep_peaks[] = {
    {.label = "H100 PCIe", .match = "H100 PCIe", .unless = NULL, .fp32 = 51.2, .tf32 = 378.0, .fp16 = 756.0, .fp8 = 1513.0},
    {.label = "H100 SXM5", .match = "H100 80GB HBM3", .unless = NULL, .fp32 = 66.9, .tf32 = 494.7, .fp16 = 989.4, .fp8 = 1978.9},
    {.label = "H200 SXM", .match = "H200", .unless = "NVL", .fp32 = 66.9, .tf32 = 494.7, .fp16 = 989.4, .fp8 = 1978.9},
};
#define MPT_SWEEP_N_PEAKS ((int)(sizeof mpt_sweep_peaks / sizeof mpt_sweep_peaks[0]))
_Static_assert(MPT_SWEEP_N_PEAKS == 3, "bench/README.md's peak table lists three GPUs: keep them in step");

typedef struct opts {
    int cuda, graph, steps, warmup, rounds;
    double budget;
    mpt_precision prec[MAX_LIST];
    int n_prec;
    int hidden[MAX_LIST], n_hidden;
    int batch[MAX_LIST], n_batch;
    const char *gpu_name;
} opts;

static void usage_error(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "mlp_sweep: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see the header of bench/mlp_sweep.c)\n");
    exit(2);
}

/* A comma-separated list of integers in [lo, hi] into out (at most MAX_LIST); returns the count. */
static int parse_ints(const char *flag, const char *s, int lo, int hi, int *out) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || (*end != ',' && *end != '\0') || n == MAX_LIST) {
            char range[64];
            snprintf(range, sizeof range, "[%d, %d], at most %d of them", lo, hi, MAX_LIST);
            fprintf(stderr, "mlp_sweep: %s expects comma-separated integers in %s, got '%s'\n", flag, range, s);
            exit(2);
        }
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) usage_error("%s needs at least one value, got '%s'", flag, s);
    return n;
}

static int parse_int(const char *flag, const char *s, int lo, int hi) {
    int v[MAX_LIST];
    if (parse_ints(flag, s, lo, hi, v) != 1) usage_error("%s expects one integer, got '%s'", flag, s);
    return v[0];
}

static void parse(int argc, char **argv, opts *o) {
    *o = (opts){.cuda = 1, .graph = 1, .steps = 20, .warmup = 3, .rounds = 3, .budget = 0.0,
                .prec = {MPT_PRECISION_FP32, MPT_PRECISION_TF32, MPT_PRECISION_BF16, MPT_PRECISION_FP16,
                         MPT_PRECISION_FP8},
                .n_prec = 5, .hidden = {512, 2048, 8192}, .n_hidden = 3, .batch = {128, 1024, 4096}, .n_batch = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: mlp_sweep [--device cuda|cpu] [--precisions LIST] [--hidden LIST] [--batch LIST] "
                   "[--steps N] [--warmup N] [--rounds N] [--graph on|off] [--budget S] [--gpu-name NAME]\n"
                   "(what it measures and how: the header of bench/mlp_sweep.c)\n");
            exit(0);
        }
        if (i + 1 >= argc) usage_error("%s needs a value%s", a, "");
        const char *v = argv[++i];
        if (strcmp(a, "--device") == 0) {
            if (strcmp(v, "cuda") != 0 && strcmp(v, "cpu") != 0) usage_error("--device expects cuda or cpu, got '%s'%s", v, "");
            o->cuda = strcmp(v, "cuda") == 0;
        } else if (strcmp(a, "--precisions") == 0) {
            o->n_prec = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (o->n_prec == MAX_LIST || mpt_precision_parse(t, &o->prec[o->n_prec]) != 0)
                    usage_error("--precisions expects at most 8 of mptrain's precision names, got '%s' ('%s')", v, t);
                o->n_prec++;
            }
            if (o->n_prec == 0) usage_error("--precisions needs at least one name, got '%s'%s", v, "");
        } else if (strcmp(a, "--hidden") == 0) {
            o->n_hidden = parse_ints(a, v, 16, 65536, o->hidden);
        } else if (strcmp(a, "--batch") == 0) {
            o->n_batch = parse_ints(a, v, 1, 65536, o->batch);
        } else if (strcmp(a, "--steps") == 0) {
            o->steps = parse_int(a, v, 1, 100000);
        } else if (strcmp(a, "--warmup") == 0) {
            o->warmup = parse_int(a, v, 0, 1000);
        } else if (strcmp(a, "--rounds") == 0) {
            o->rounds = parse_int(a, v, 1, MAX_ROUNDS);
        } else if (strcmp(a, "--graph") == 0) {
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) usage_error("--graph expects on or off, got '%s'%s", v, "");
            o->graph = strcmp(v, "on") == 0;
        } else if (strcmp(a, "--budget") == 0) {
            o->budget = parse_int(a, v, 0, 86400);
        } else if (strcmp(a, "--gpu-name") == 0) {
            o->gpu_name = v;
        } else {
            usage_error("unknown option '%s'%s", a, "");
        }
    }
}

/* GEMM FLOPs of one training step of the mlp 784-H-H-10 at batch B (the header's formula). */
static double step_flops(int H, int B) {
    const double h = H, in = MPT_MODEL_PIXELS, out = MPT_MODEL_CLASSES;
    return 2.0 * B * (2.0 * in * h + 3.0 * h * h + 3.0 * out * h);
}

static const mpt_sweep_peak *peak_of(const char *name) {
    for (int i = 0; name && i < MPT_SWEEP_N_PEAKS; i++) {
        const mpt_sweep_peak *p = &mpt_sweep_peaks[i];
        if (strstr(name, p->match) && !(p->unless && strstr(name, p->unless))) return p;
    }
    return NULL;
}

/* The peak (TFLOP/s) a precision's GEMMs run against; 0 when unknown. */
static double peak_for(const mpt_sweep_peak *p, mpt_precision m) {
    if (!p) return 0.0;
    switch (m) {
    case MPT_PRECISION_FP32: return p->fp32;
    case MPT_PRECISION_TF32: return p->tf32;
    case MPT_PRECISION_FP16:
    case MPT_PRECISION_BF16: return p->fp16;
    case MPT_PRECISION_FP8:
    case MPT_PRECISION_FP8_E4M3:
    case MPT_PRECISION_MXFP8: return p->fp8;
    default: return 0.0;
    }
}

typedef struct config {
    int H, B;
    mpt_precision prec;
    double flops;
} config;

static int by_work(const void *a, const void *b) {
    const config *x = a, *y = b;
    if (x->flops != y->flops) return x->flops < y->flops ? -1 : 1;
    return (int)x->prec - (int)y->prec;
}

/* Backend memory holding 2B synthetic rows and the row indices 0..2B-1 (I32). */
typedef struct sweep_data {
    uint8_t *images, *labels;
    int32_t *idx;
    int64_t dim;
} sweep_data;

static int data_make(mpt_backend *be, int B, sweep_data *sd, char *why, size_t len) {
    mpt_mnist d;
    if (mpt_synthetic_blobs(&d, 2 * (int64_t)B, 0, MPT_MODEL_PIXELS, MPT_MODEL_CLASSES, 7) != MPT_OK) {
        snprintf(why, len, "synthetic data: %s", mpt_last_error());
        return -1;
    }
    const size_t n = (size_t)d.n_train, img = n * (size_t)d.dim;
    int32_t *idx = malloc(n * sizeof *idx);
    sd->images = be->alloc(be, img);
    sd->labels = be->alloc(be, n);
    sd->idx = be->alloc(be, n * sizeof(int32_t));
    sd->dim = d.dim;
    int ok = idx && sd->images && sd->labels && sd->idx;
    if (ok) {
        for (size_t i = 0; i < n; i++) idx[i] = (int32_t)i;
        be->from_host(be, sd->images, d.train_images, img);
        be->from_host(be, sd->labels, d.train_labels, n);
        be->from_host(be, sd->idx, idx, n * sizeof(int32_t));
        be->synchronize(be);
    } else {
        snprintf(why, len, "out of memory for %zu rows of data", n);
    }
    free(idx);
    mpt_mnist_free(&d);
    return ok ? 0 : -1;
}

static void data_free(mpt_backend *be, sweep_data *sd) {
    be->free(be, sd->images);
    be->free(be, sd->labels);
    be->free(be, sd->idx);
    *sd = (sweep_data){0};
}

/* Runs one configuration; fills sec[0..rounds) (seconds per step) and the graph status; 0 on success, -1 with why. */
static int run_config(mpt_backend *be, const opts *o, const config *c, double *sec, char *graph, size_t glen,
                      char *why, size_t wlen) {
    sweep_data sd = {0};
    if (data_make(be, c->B, &sd, why, wlen) != 0) return -1;
    mpt_policy pol = mpt_policy_make(c->prec);
    mpt_graph *g = mpt_graph_create(be, &pol, c->B);
    if (!g) {
        snprintf(why, wlen, "graph: %s", mpt_last_error());
        data_free(be, &sd);
        return -1;
    }
    const int64_t shape[2] = {c->B, MPT_MODEL_PIXELS};
    mpt_tensor *x = mpt_input(g, 2, shape);                        /* [B, 784] */
    x = mpt_relu(g, mpt_linear(g, x, c->H, "fc1"), "relu1");       /* [B, H] */
    x = mpt_relu(g, mpt_linear(g, x, c->H, "fc2"), "relu2");       /* [B, H] */
    mpt_tensor *logits = mpt_linear(g, x, MPT_MODEL_CLASSES, "fc3"); /* [B, 10] */
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_train_config_default(c->prec);
    cfg.seed = 3;
    cfg.step_graph = o->graph;
    mpt_trainer *t = NULL;
    if (mpt_trainer_create(&t, g, &cfg) != MPT_OK) { /* frees g */
        snprintf(why, wlen, "trainer: %s", mpt_last_error());
        data_free(be, &sd);
        return -1;
    }
    void *m0 = NULL, *m1 = NULL;
    const int events = be->event_create && be->event_create(be, &m0) == MPT_OK && be->event_create(be, &m1) == MPT_OK;
    int s = 0, rc = 0;
    for (int w = 0; w < o->warmup; w++, s++) {
        mpt_trainer_gather(t, sd.images, sd.labels, sd.idx + (s % 2) * c->B, sd.dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
    }
    mpt_train_stats st;
    mpt_trainer_stats(t, &st); /* waits for the warm-up */
    for (int r = 0; r < o->rounds && rc == 0; r++) {
        double t0 = bench_now_s(CLOCK_MONOTONIC);
        if (events) be->event_record(be, m0);
        for (int k = 0; k < o->steps; k++, s++) {
            mpt_trainer_gather(t, sd.images, sd.labels, sd.idx + (s % 2) * c->B, sd.dim, 0.0f, 1.0f);
            mpt_trainer_step(t);
        }
        if (events) be->event_record(be, m1);
        mpt_trainer_stats(t, &st); /* waits for the steps */
        double seconds = bench_now_s(CLOCK_MONOTONIC) - t0;
        if (events && (be->event_elapsed(be, m0, m1, &seconds) != MPT_OK || !isfinite(seconds))) {
            snprintf(why, wlen, "device timer: %s", mpt_last_error());
            rc = -1;
        }
        sec[r] = seconds / o->steps;
    }
    if (rc == 0 && st.steps_taken == 0) {
        snprintf(why, wlen, "no step was applied (every step skipped: non-finite gradients)");
        rc = -1;
    }
    mpt_trainer_graph_status(t, graph, glen);
    if (events) {
        be->event_destroy(be, m0);
        be->event_destroy(be, m1);
    }
    mpt_trainer_free(&t);
    data_free(be, &sd);
    return rc;
}

int main(int argc, char **argv) {
    opts o;
    parse(argc, argv, &o);
    char name[512] = "cpu";
    mpt_backend *be = NULL;
    if (o.cuda) {
        char why[512];
        if (!mpt_cuda_available(why, sizeof why)) {
            fprintf(stderr, "mlp_sweep: --device cuda: no usable GPU: %s (--device cpu runs the sweep on the CPU "
                            "backend, small sizes only)\n", why);
            return 2;
        }
        be = mpt_backend_cuda_create();
        if (be && mpt_cuda_device_info(name, sizeof name)) {
            char *comma = strchr(name, ',');
            if (comma) *comma = '\0';
        }
    } else {
        be = mpt_backend_cpu_create();
    }
    if (!be) {
        fprintf(stderr, "mlp_sweep: cannot create the %s backend: %s\n", o.cuda ? "cuda" : "cpu", mpt_last_error());
        return 1;
    }
    if (o.gpu_name) snprintf(name, sizeof name, "%s", o.gpu_name);
    const mpt_sweep_peak *peak = o.cuda || o.gpu_name ? peak_of(name) : NULL;

    config cs[MAX_LIST * MAX_LIST * MAX_LIST];
    int n = 0;
    for (int h = 0; h < o.n_hidden; h++)
        for (int b = 0; b < o.n_batch; b++)
            for (int p = 0; p < o.n_prec; p++)
                cs[n++] = (config){o.hidden[h], o.batch[b], o.prec[p], step_flops(o.hidden[h], o.batch[b])};
    qsort(cs, (size_t)n, sizeof cs[0], by_work);

    printf("# mlp 784-H-H-10 sweep on %s (%s backend, step graph %s); %d steps x %d rounds after %d warm-up steps; "
           "time by %s\n", name, o.cuda ? "cuda" : "cpu", o.graph ? "on" : "off", o.steps, o.rounds, o.warmup,
           o.cuda ? "CUDA events" : "the wall clock");
    if (peak)
        printf("# peaks (TFLOP/s, dense, %s): fp32 %.1f, tf32 %.1f, fp16/bf16 %.1f, fp8 %.1f (bench/README.md)\n",
               peak->label, peak->fp32, peak->tf32, peak->fp16, peak->fp8);
    else
        printf("# no published peak known for '%s': no %% of peak column (bench/README.md lists the GPUs)\n", name);
    printf("\n| H | B | precision | GEMM GFLOP/step | us/step (median) | min-max (us) | achieved TFLOP/s | %% of peak | "
           "step graph |\n|---:|---:|---|---:|---:|---:|---:|---:|---|\n");
    fflush(stdout);
    const double t_start = bench_now_s(CLOCK_MONOTONIC);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const config *c = &cs[i];
        const char *pn = mpt_precision_name(c->prec);
        if (o.budget > 0 && bench_now_s(CLOCK_MONOTONIC) - t_start > o.budget) {
            printf("| %d | %d | %s | %.3f | not run: the %.0f s budget is spent | | | | |\n", c->H, c->B, pn,
                   c->flops / 1e9, o.budget);
            continue;
        }
        double sec[MAX_ROUNDS];
        char graph[256] = "", why[512] = "";
        if (run_config(be, &o, c, sec, graph, sizeof graph, why, sizeof why) != 0) {
            printf("| %d | %d | %s | %.3f | failed: %s | | | | %s |\n", c->H, c->B, pn, c->flops / 1e9, why, graph);
            failed = 1;
            fflush(stdout);
            continue;
        }
        const double med = bench_median(sec, o.rounds); /* sorts sec */
        const double tflops = c->flops / med / 1e12, pk = peak_for(peak, c->prec);
        char pct[32] = "-";
        if (pk > 0) snprintf(pct, sizeof pct, "%.1f%%", 100.0 * tflops / pk);
        printf("| %d | %d | %s | %.3f | %.1f | %.1f-%.1f | %.2f | %s | %s |\n", c->H, c->B, pn, c->flops / 1e9,
               1e6 * med, 1e6 * sec[0], 1e6 * sec[o.rounds - 1], tflops, pct, graph);
        fflush(stdout);
    }
    printf("\nGEMM FLOPs per step F = 2 B (2 * 784 H + 3 H^2 + 30 H) (forward, weight gradients, data gradients of fc2 "
           "and fc3); achieved = F / time per step, which also holds the step's element-wise passes, loss and optimizer: "
           "at small sizes those dominate and the figure says how far the step is from compute-bound.\n");
    mpt_backend_free(&be);
    return failed;
}
