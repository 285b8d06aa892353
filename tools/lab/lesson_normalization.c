/*
 * tools/lab/lesson_normalization.c - lesson `normalization`: why batch norm and layer norm compute their statistics in
 * FP32 with two passes, measured on a CNN's real pre-normalisation activations and in training.
 *
 * Network: --model when it has a batchnorm or layernorm layer, else the lesson's own CNN (SPEC below: two convolutions
 * each followed by batch norm, a hidden linear layer followed by layer norm).
 *
 * Part 1, the statistics (a measurement). From the checkpoint of a bf16 run with the policy's FP32 statistics (seed 0,
 * below), the network is rebuilt on a CPU backend in FP32 and one training-mode forward pass runs on the first 4B
 * training images (B the training batch); the input of every normalisation layer is copied out (the engine's own
 * forward: tools/ never include kernels/) and written to activations.safetensors (the first B rows, for
 * recomputation). Each unit's statistics (a batch norm channel over the first b rows, b = B/4, B, 4B; a layer norm row)
 * are then computed on the host seven ways: the six rows of --norm-stats (engine/amp/policy.h: FP32, BF16 and FP16
 * arithmetic, each with two passes or the one-pass E[x^2] - E[x]^2; the same element order, blocks and roundings as
 * the CPU kernel's contract, engine/backend.h mpt_norm_args, through engine/numerics.h mpt_elem_stat_round) and
 * Welford's update in FP32 (Welford 1962; the running mean and sum of squared deviations, element by element). A
 * 16-bit method reads the activations rounded to its format (what a run in that format stores); FP32 methods read them
 * as they are; each error is against the exact (FP64, two-pass) variance of the values that method read, so it is the
 * computation's error, not the activations' rounding. Per unit: the relative error of the variance and of rstd =
 * 1 / sqrt(var + eps), and whether the one-pass variance cancelled to <= 0 (clamped to 0) or was not finite.
 *
 * Part 2, training. The CNN in bf16 with the policy's FP32 statistics and with --norm-stats bf16-onepass (16-bit
 * arithmetic, the one-pass formula: a naive half-precision kernel), over `seeds` seeds: the paired difference of final
 * test accuracy with its interval and verdict (tools/stats.h). And in fp16, seed 0, with FP32 and with fp16-onepass
 * statistics at batch B and at 4B, where a channel's sums over n = batch x H x W elements reach FP16's 65504 sooner:
 * skipped steps and accuracy. Every run trains on the CPU backend (--device cpu): the CUDA backend runs the policy's
 * statistics only.
 *
 * The same units are also shifted by t = 0, 2, 8, 32, 128 of their own standard deviations (the condition 1 + mean^2/var
 * grows like t^2), which is where the one-pass formula cancels: real activations here are nearly centred.
 * The sentences summarise the batch-norm channels (long sums), or the layer-norm rows of a network without batch norm.
 * Criterion: the effect is observed when, at the training batch, the one-pass variance in BF16 and in FP16 each err at
 * least 10x more than the policy's FP32 two passes, and at some shift the BF16 one-pass errs at least 10x more than two
 * passes in BF16 (medians over the units). What training does with the errors is reported beside it, whatever it is.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "engine/graph.h"
#include "engine/layers/layers.h"
#include "engine/numerics.h"
#include "tools/lab/lab.h"
#include "tools/run.h"
#include "tools/sentences.h"
#include "tools/stats.h"

/* The lesson's own network when --model has no normalisation layer. */
#define SPEC "conv(8,3,pad=1),batchnorm,relu,maxpool(2),conv(16,3,pad=1),batchnorm,relu,maxpool(2),flatten,linear(64)," \
             "layernorm,relu,linear"
#define MAX_NORM 16
#define MAX_SEEDS 8
#define N_B 3                        /* rows of the ladder: B/4, B, 4B */
#define N_M (MPT_NORM_STATS_COUNT + 1) /* the --norm-stats rows in their enum order, then Welford in FP32 */
#define M_WELFORD MPT_NORM_STATS_COUNT
#define BLOCK_LN 512                 /* layer norm's chunk (kernels' contract: mpt_norm_args) */

static const char *method_name(int m) { return m == M_WELFORD ? "welford-fp32" : mpt_norm_stats_name((mpt_norm_stats)m); }

/* One normalisation layer's input, captured. */
typedef struct norm_in {
    char name[MPT_NAME_LEN];
    int layernorm;
    int64_t C, S;     /* batch norm: channels and elements per row of a channel; layer norm: C = 1, S features */
    int ndim;         /* of the input: 4 ([B, C, H, W]) or 2 */
    int64_t shape[4];
    float eps;
    float *x;         /* [rows, C, S] FP32 */
} norm_in;

typedef struct capture {
    int n, rows;
    norm_in l[MAX_NORM];
} capture;

static void capture_free(capture *cp) {
    for (int i = 0; i < cp->n; i++) free(cp->l[i].x);
    memset(cp, 0, sizeof *cp);
}

/* Rebuilds `model` from the checkpoint on a CPU backend in FP32, runs one training-mode forward pass on the first
 * `rows` training images and copies out the input of every batchnorm and layernorm node. */
static mpt_status capture_inputs(const mpt_lab_ctx *c, const char *model, const char *ckpt, int rows, capture *cp) {
    memset(cp, 0, sizeof *cp);
    const mpt_mnist *d = &c->cd->d;
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP32, 0, 0);
    mpt_graph *g = mpt_graph_create(be, &pol, rows);
    mpt_trainer *t = NULL;
    mpt_tensor *logits = NULL;
    const mpt_model_input in = mpt_cli_data_input(d);
    mpt_status s = mpt_model_build_for(g, model, &in, &logits);
    if (s == MPT_OK) {
        mpt_softmax_xent(g, logits, "loss");
        mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP32);
        cfg.init_scale = 1.0f; /* the bf16 run's: no loss scaling (S = 1), which the checkpoint's scaler state holds */
        s = mpt_trainer_create(&t, g, &cfg); /* takes g, also on failure */
    } else {
        mpt_graph_free(&g);
    }
    if (s == MPT_OK) s = mpt_run_checkpoint_load(ckpt, t);
    float *xin = NULL;
    int32_t *lab = NULL;
    if (s == MPT_OK) {
        g = t->g;
        xin = malloc(sizeof(float) * (size_t)(rows * d->dim));
        lab = malloc(sizeof(int32_t) * (size_t)rows);
        if (!xin || !lab) s = mpt_errorf(MPT_ERR_NOMEM, "lab normalization: no memory for %d images", rows);
    }
    if (s == MPT_OK) {
        MPT_ASSERTF(g->input->dtype == MPT_DTYPE_F32 && mpt_tensor_numel(g->input) == (int64_t)rows * d->dim,
                    "lab normalization: the FP32 graph's input is not [%d, %lld] F32", rows, (long long)d->dim);
        for (int64_t i = 0; i < rows * d->dim; i++) xin[i] = (float)d->train_images[i] / 255.0f;
        for (int i = 0; i < rows; i++) lab[i] = d->train_labels[i];
        be->from_host(be, g->input->data, xin, sizeof(float) * (size_t)(rows * d->dim));
        be->from_host(be, g->labels->data, lab, sizeof(int32_t) * (size_t)rows);
        g->training = 1;
        mpt_graph_forward(g);
        be->synchronize(be);
        for (int i = 0; s == MPT_OK && i < g->n_nodes; i++) {
            const mpt_node *nd = g->nodes[i];
            if (nd->op != MPT_OP_BATCHNORM && nd->op != MPT_OP_LAYERNORM) continue;
            if (cp->n == MAX_NORM) {
                s = mpt_errorf(MPT_ERR_ARG, "lab normalization: the network has more than %d normalisation layers",
                               MAX_NORM);
                break;
            }
            norm_in *l = &cp->l[cp->n];
            const mpt_tensor *x = nd->in[0];
            snprintf(l->name, sizeof l->name, "%s", nd->name);
            l->layernorm = nd->op == MPT_OP_LAYERNORM;
            l->C = l->layernorm ? 1 : nd->attr.norm.C;
            l->S = nd->attr.norm.S;
            l->eps = nd->attr.norm.eps;
            l->ndim = x->ndim;
            for (int k = 0; k < x->ndim && k < 4; k++) l->shape[k] = x->shape[k];
            const int64_t ne = mpt_tensor_numel(x);
            MPT_ASSERTF(x->dtype == MPT_DTYPE_F32 && ne == (int64_t)rows * l->C * l->S,
                        "lab normalization: %s's input is not F32 [%d, %lld, %lld]", nd->name, rows, (long long)l->C,
                        (long long)l->S);
            l->x = malloc(sizeof(float) * (size_t)ne);
            if (!l->x) s = mpt_errorf(MPT_ERR_NOMEM, "lab normalization: no memory for %s's input", nd->name);
            else be->to_host(be, l->x, x->data, sizeof(float) * (size_t)ne);
            cp->n++;
        }
        cp->rows = rows;
    }
    free(xin);
    free(lab);
    mpt_trainer_free(&t);
    mpt_backend_free(&be);
    if (s == MPT_OK && cp->n == 0) s = mpt_errorf(MPT_ERR_ARG, "lab normalization: %s has no batchnorm or layernorm", model);
    if (s != MPT_OK) capture_free(cp);
    return s;
}

/* A unit: the elements one statistic is taken over, in the kernel's order. Row r (0..rows) holds S elements at
 * x + r * rstride; the sums run in blocks of `blk` elements within a row (batch norm: the whole row's part of the
 * channel; layer norm: chunks of 512), each block's part added to the total. */
typedef struct unit {
    const float *x;
    int64_t rows, rstride, S, blk;
    float shift;      /* added to every element first (FP32), the shifted activation being what the methods read */
} unit;

static float elem(const unit *u, int64_t r, int64_t k) { return u->x[r * u->rstride + k] + u->shift; }

/* The exact mean and variance (FP64, two passes) of the unit's elements rounded to format fmt (0: as they are). */
static void exact_stats(const unit *u, int fmt, double *mean, double *var) {
    double s = 0.0, q = 0.0;
    const double n = (double)(u->rows * u->S);
    for (int64_t r = 0; r < u->rows; r++)
        for (int64_t k = 0; k < u->S; k++) s += mpt_elem_stat_round(elem(u, r, k), fmt);
    const double m = s / n;
    for (int64_t r = 0; r < u->rows; r++)
        for (int64_t k = 0; k < u->S; k++) {
            const double dd = mpt_elem_stat_round(elem(u, r, k), fmt) - m;
            q += dd * dd;
        }
    *mean = m;
    *var = q / n;
}

enum { TERM_X, TERM_X2, TERM_DEV2 };

/* The blocked sum of the unit's terms with every operation rounded to fmt (an ablation row's contract), or, for the
 * policy's FP32 two-pass (policy = 1), the kernel's FP32 sums (plain additions; squares through fmaf). */
static float unit_sum(const unit *u, int fmt, int policy, int term, float mean) {
    float total = 0.0f;
    for (int64_t r = 0; r < u->rows; r++) {
        float part = 0.0f;
        for (int64_t k = 0; k < u->S; k++) {
            const float v = mpt_elem_stat_round(elem(u, r, k), fmt); /* the stored activation */
            if (policy) {
                const float dd = v - mean;
                part = term == TERM_X ? part + v : fmaf(dd, dd, part);
            } else {
                float t = v;
                if (term != TERM_X) {
                    const float dd = term == TERM_DEV2 ? mpt_elem_stat_round(v - mean, fmt) : v;
                    t = mpt_elem_stat_round(dd * dd, fmt);
                }
                part = mpt_elem_stat_round(part + t, fmt);
            }
            if ((k + 1) % u->blk == 0 || k + 1 == u->S) {
                total = policy ? total + part : mpt_elem_stat_round(total + part, fmt);
                part = 0.0f;
            }
        }
    }
    return total;
}

/* Method m's mean and variance of the unit; *clamped: the one-pass variance was <= 0 before the clamp. */
static void method_stats(const unit *u, int m, float *mean, float *var, int *clamped) {
    const float n = (float)(u->rows * u->S);
    *clamped = 0;
    if (m == M_WELFORD) { /* mean_k = mean_{k-1} + d / k, M2 += d (x - mean_k), d = x - mean_{k-1}; FP32 */
        float mu = 0.0f, m2 = 0.0f, k = 0.0f;
        for (int64_t r = 0; r < u->rows; r++)
            for (int64_t i = 0; i < u->S; i++) {
                const float x = elem(u, r, i);
                k += 1.0f;
                const float dd = x - mu;
                mu += dd / k;
                m2 += dd * (x - mu);
            }
        *mean = mu;
        *var = m2 / n;
        return;
    }
    const mpt_norm_stats_desc *row = mpt_norm_stats_info((mpt_norm_stats)m);
    const int fmt = (int)row->dtype, policy = m == MPT_NORM_STATS_FP32;
    if (policy) {
        const float mu = unit_sum(u, 0, 1, TERM_X, 0.0f) / n;
        *mean = mu;
        *var = unit_sum(u, 0, 1, TERM_DEV2, mu) / n;
        return;
    }
    const float mu = mpt_elem_stat_round(unit_sum(u, fmt, 0, TERM_X, 0.0f) / n, fmt);
    float v;
    if (row->one_pass) {
        const float ex2 = mpt_elem_stat_round(unit_sum(u, fmt, 0, TERM_X2, 0.0f) / n, fmt);
        v = mpt_elem_stat_round(ex2 - mpt_elem_stat_round(mu * mu, fmt), fmt);
        if (v <= 0.0f) *clamped = 1;
        if (v < 0.0f) v = 0.0f;
    } else {
        v = mpt_elem_stat_round(unit_sum(u, fmt, 0, TERM_DEV2, mu) / n, fmt);
    }
    *mean = mu;
    *var = v;
}

/* What one unit measured. */
typedef struct unit_res {
    int layer;
    int64_t n;
    double mean, var, kappa;   /* exact, of the FP32 activations; kappa = 1 + mean^2 / var */
    double err[N_M];           /* |var_m - var| / var against the exact variance of what method m read (inf: not
                                  finite) */
    double rstd_err[N_M];      /* the same for rstd = 1 / sqrt(var + eps) */
    int clamped[N_M], nonfinite[N_M];
} unit_res;

static int fmt_of(int m) { return m == M_WELFORD ? 0 : (int)mpt_norm_stats_info((mpt_norm_stats)m)->dtype; }

static void measure_unit(const unit *u, float eps, int layer, unit_res *o) {
    memset(o, 0, sizeof *o);
    o->layer = layer;
    o->n = u->rows * u->S;
    double ex_mean[3], ex_var[3];
    for (int f = 0; f < 3; f++) exact_stats(u, f, &ex_mean[f], &ex_var[f]);
    o->mean = ex_mean[0];
    o->var = ex_var[0];
    o->kappa = ex_var[0] > 0.0 ? 1.0 + ex_mean[0] * ex_mean[0] / ex_var[0] : INFINITY;
    for (int m = 0; m < N_M; m++) {
        float mu, v;
        method_stats(u, m, &mu, &v, &o->clamped[m]);
        const int f = fmt_of(m);
        const double ev = ex_var[f], er = 1.0 / sqrt(ev + (double)eps);
        float rstd = mpt_elem_rstd(v, eps);
        if (m != M_WELFORD && m != MPT_NORM_STATS_FP32 && m != MPT_NORM_STATS_FP32_ONEPASS)
            rstd = mpt_elem_stat_round(rstd, f);
        o->nonfinite[m] = !isfinite(mu) || !isfinite(v);
        o->err[m] = o->nonfinite[m] ? INFINITY : ev > 0.0 ? fabs((double)v - ev) / ev : v == 0.0f ? 0.0 : INFINITY;
        o->rstd_err[m] = o->nonfinite[m] || !isfinite(rstd) ? INFINITY : fabs((double)rstd - er) / er;
    }
}

/* The units the lesson's sentences summarise: the batch-norm channels (long sums: b x H x W elements) when the network
 * has batch norm, else the layer-norm rows. */
static int in_focus(const capture *cp, int focus_ln, int layer) { return cp->l[layer].layernorm == focus_ln; }

/* Every unit over the first b rows: batch norm channels over rows [0, b), layer norm rows [0, b); with focus_only,
 * only the units in focus. Each unit shifted by t of its own standard deviations (exact, FP64, of its FP32
 * activations; t = 0: the activations as they are). *out: malloc'd, *n_out units. */
static mpt_status measure_all(const capture *cp, int b, double t, int focus_ln, int focus_only, unit_res **out,
                              int *n_out) {
    int n = 0;
    for (int i = 0; i < cp->n; i++)
        if (!focus_only || in_focus(cp, focus_ln, i)) n += cp->l[i].layernorm ? b : (int)cp->l[i].C;
    unit_res *r = malloc(sizeof *r * (size_t)(n > 0 ? n : 1));
    if (!r) return mpt_errorf(MPT_ERR_NOMEM, "lab normalization: no memory for %d units", n);
    int k = 0;
    for (int i = 0; i < cp->n; i++) {
        const norm_in *l = &cp->l[i];
        if (focus_only && !in_focus(cp, focus_ln, i)) continue;
        const int64_t units = l->layernorm ? b : l->C;
        for (int64_t j = 0; j < units; j++) {
            unit u = l->layernorm ? (unit){l->x + j * l->S, 1, l->S, l->S, BLOCK_LN, 0.0f}
                                  : (unit){l->x + j * l->S, b, l->C * l->S, l->S, l->S, 0.0f};
            if (t != 0.0) {
                double mean, var;
                exact_stats(&u, 0, &mean, &var);
                u.shift = (float)(t * sqrt(var));
            }
            measure_unit(&u, l->eps, i, &r[k++]);
        }
    }
    *out = r;
    *n_out = n;
    return MPT_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place; NAN for n = 0). */
static double median(double *v, int n) {
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Summary of method m over the units of layer `layer`, or (layer < 0) over the units in focus. */
typedef struct summary {
    int units;
    double med_err, max_err, med_rstd, clamped, nonfinite, med_kappa;
} summary;

typedef struct unit_set {
    const capture *cp;
    const unit_res *r;
    int n, focus_ln;
} unit_set;

static int takes(const unit_set *u, int i, int layer) {
    return layer >= 0 ? u->r[i].layer == layer : in_focus(u->cp, u->focus_ln, u->r[i].layer);
}

static summary summarize(const unit_set *u, int m, int layer, double *scratch) {
    summary s = {0};
    int k = 0, c = 0, nf = 0;
    double mx = 0.0;
    for (int i = 0; i < u->n; i++) {
        if (!takes(u, i, layer)) continue;
        scratch[k++] = u->r[i].err[m];
        c += u->r[i].clamped[m], nf += u->r[i].nonfinite[m];
        if (u->r[i].err[m] > mx) mx = u->r[i].err[m];
    }
    s.units = k;
    s.med_err = median(scratch, k);
    s.max_err = mx;
    s.clamped = k ? (double)c / k : 0.0;
    s.nonfinite = k ? (double)nf / k : 0.0;
    k = 0;
    for (int i = 0; i < u->n; i++)
        if (takes(u, i, layer)) scratch[k++] = u->r[i].rstd_err[m];
    s.med_rstd = median(scratch, k);
    k = 0;
    for (int i = 0; i < u->n; i++)
        if (takes(u, i, layer)) scratch[k++] = u->r[i].kappa;
    s.med_kappa = median(scratch, k);
    return s;
}

/* Whether the spec has a normalisation layer (0 also for a spec that does not parse: the lesson's own is used). */
static int has_norm(const char *model) {
    static mpt_model_plan p;
    if (mpt_model_parse(model, &p) != MPT_OK) return 0;
    for (int i = 0; i < p.n; i++)
        if (p.layer[i].kind == MPT_LAYER_BATCHNORM || p.layer[i].kind == MPT_LAYER_LAYERNORM) return 1;
    return 0;
}

/* Writes the first b rows of every captured input to <dir>/activations.safetensors ("<layer>.input", FP32, the
 * input's shape with b rows). */
static mpt_status write_activations(const mpt_lab_ctx *c, const capture *cp, int b) {
    mpt_checkpoint_tensor t[MAX_NORM];
    char names[MAX_NORM][MPT_NAME_LEN + 8];
    for (int i = 0; i < cp->n; i++) {
        snprintf(names[i], sizeof names[i], "%s.input", cp->l[i].name);
        t[i] = (mpt_checkpoint_tensor){.name = names[i], .dtype = MPT_DTYPE_F32, .ndim = cp->l[i].ndim,
                                       .data = cp->l[i].x};
        for (int k = 0; k < cp->l[i].ndim; k++) t[i].shape[k] = cp->l[i].shape[k];
        t[i].shape[0] = b;
    }
    const mpt_checkpoint_meta meta[] = {
        {"what", "the input of every normalisation layer in one training-mode FP32 forward pass of the first rows of "
                 "the training set (pixels / 255), weights from bf16-seed0/checkpoint.safetensors"}};
    char path[MPT_CLI_PATH + 64];
    snprintf(path, sizeof path, "%s/activations.safetensors", c->dir);
    return mpt_checkpoint_save(path, t, cp->n, meta, 1);
}

typedef struct fp16_run {
    double acc;
    int skipped, steps;
} fp16_run;

#define N_T 5
static const double shifts[N_T] = {0, 2, 8, 32, 128}; /* standard deviations */

/* What part 1 measured: the units at each b of the ladder, and the units in focus at batch B under each shift. */
typedef struct measured {
    unit_res *ur[N_B];
    int nu[N_B];
    unit_res *sr[N_T];
    int ns[N_T];
    double *scratch;
} measured;

static void measured_free(measured *m) {
    for (int i = 0; i < N_B; i++) free(m->ur[i]);
    for (int i = 0; i < N_T; i++) free(m->sr[i]);
    free(m->scratch);
    memset(m, 0, sizeof *m);
}

static mpt_status measure(const capture *cp, const int *ladder, int focus_ln, measured *me) {
    memset(me, 0, sizeof *me);
    mpt_status s = MPT_OK;
    for (int i = 0; s == MPT_OK && i < N_B; i++) s = measure_all(cp, ladder[i], 0.0, focus_ln, 0, &me->ur[i], &me->nu[i]);
    for (int i = 0; s == MPT_OK && i < N_T; i++) s = measure_all(cp, ladder[1], shifts[i], focus_ln, 1, &me->sr[i], &me->ns[i]);
    if (s == MPT_OK && !(me->scratch = malloc(sizeof(double) * (size_t)me->nu[N_B - 1])))
        s = mpt_errorf(MPT_ERR_NOMEM, "lab normalization: no memory");
    if (s != MPT_OK) measured_free(me);
    return s;
}

/* The report and the data files of part 1 and the training runs. */
typedef struct trained {
    int ns, B;
    double acc32[MAX_SEEDS], acc16[MAX_SEEDS];
    fp16_run f16[2][2]; /* [batch B, 4B][FP32, FP16 one-pass statistics] */
} trained;

static mpt_status write_units(mpt_lab_ctx *c, const capture *cp, const measured *me, int B) {
    FILE *dat = mpt_lab_open(c, "normalization-units.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# units at batch %d: layer (index into the layer list below) unit n mean var kappa (exact, FP64, of "
                 "the FP32 activations; kappa = 1 + mean^2 / var), then per method the relative error of the variance "
                 "and of rstd against the exact statistics of the values the method read (inf: not finite), then per "
                 "method clamped nonfinite (0/1).\n# layers:", B);
    for (int i = 0; i < cp->n; i++)
        fprintf(dat, " %d=%s(%s)", i, cp->l[i].name, cp->l[i].layernorm ? "layernorm" : "batchnorm");
    fprintf(dat, "\n# methods:");
    for (int m = 0; m < N_M; m++) fprintf(dat, " %s", method_name(m));
    fprintf(dat, "\n");
    int unit_no = 0, last = -1;
    for (int i = 0; i < me->nu[1]; i++) {
        const unit_res *u = &me->ur[1][i];
        unit_no = u->layer == last ? unit_no + 1 : 0;
        last = u->layer;
        fprintf(dat, "%d %d %lld %.9g %.9g %.9g", u->layer, unit_no, (long long)u->n, u->mean, u->var, u->kappa);
        for (int m = 0; m < N_M; m++) fprintf(dat, " %.6e %.6e", u->err[m], u->rstd_err[m]);
        for (int m = 0; m < N_M; m++) fprintf(dat, " %d %d", u->clamped[m], u->nonfinite[m]);
        fprintf(dat, "\n");
    }
    return mpt_lab_close(c, dat, "normalization-units.dat");
}

/* One summary row per ladder entry: x (the rows b or the shift t), units, median condition, then per method the
 * median error of the variance, its maximum, the median error of rstd, the shares clamped and not finite. */
static mpt_status write_summaries(mpt_lab_ctx *c, const char *file, const char *what, const double *x,
                                  const summary (*sm)[N_M], int rows) {
    FILE *dat = mpt_lab_open(c, file);
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# %s, units, median condition, then per method (", what);
    for (int m = 0; m < N_M; m++) fprintf(dat, "%s%s", m ? " " : "", method_name(m));
    fprintf(dat, "): median relative error of the variance, its maximum, median relative error of rstd, share of units "
                 "clamped, share not finite\n");
    for (int i = 0; i < rows; i++) {
        fprintf(dat, "%g %d %.6g", x[i], sm[i][0].units, sm[i][0].med_kappa);
        for (int m = 0; m < N_M; m++)
            fprintf(dat, " %.6e %.6e %.6e %.6g %.6g", sm[i][m].med_err, sm[i][m].max_err, sm[i][m].med_rstd,
                    sm[i][m].clamped, sm[i][m].nonfinite);
        fprintf(dat, "\n");
    }
    return mpt_lab_close(c, dat, file);
}

static mpt_status run(mpt_lab_ctx *c) {
    double batch_d, seeds_d;
    MPT_TRY(mpt_lab_param(c, "batch", 128, &batch_d));
    MPT_TRY(mpt_lab_param(c, "seeds", c->n_seeds, &seeds_d));
    const int64_t n_train = c->cd->d.n_train;
    if (!(batch_d >= 4 && batch_d == floor(batch_d) && 4 * batch_d <= (double)n_train && batch_d <= 4096))
        return mpt_errorf(MPT_ERR_ARG, "--param batch: expected an integer in [4, 4096] with 4 x batch <= the %lld "
                          "training images, found %g", (long long)n_train, batch_d);
    const int ns = (int)seeds_d, B = (int)batch_d;
    if (ns < 2 || ns > MAX_SEEDS || ns != seeds_d)
        return mpt_errorf(MPT_ERR_ARG, "--param seeds: expected an integer in [2, %d], found %g", MAX_SEEDS, seeds_d);
    MPT_LAB_PARAMS_CHECKED(c);
    const int own = !has_norm(c->base->model);
    char model[MPT_MODEL_SPEC_MAX];
    snprintf(model, sizeof model, "%s", own ? SPEC : c->base->model);
    snprintf(c->opts.model, sizeof c->opts.model, "%s", model); /* what the report's header names */
    const int ladder[N_B] = {B / 4, B, 4 * B};
    char bs[2][16]; /* the training batch B and 4B */
    snprintf(bs[0], sizeof bs[0], "%d", B);
    snprintf(bs[1], sizeof bs[1], "%d", 4 * B);

    /* the runs: bf16 with the policy's and with BF16 one-pass statistics over the seeds; fp16 seed 0 at B and 4B */
    enum { MAXR = 2 * MAX_SEEDS + 4 };
    mpt_lab_run runs[MAXR];
    const char *fl[MAXR][18];
    char names[MAXR][48], seed[MAX_SEEDS][8];
    int nr = 0;
    for (int k = 0; k < ns; k++)
        for (int v = 0; v < 2; v++, nr++) {
            snprintf(seed[k], sizeof seed[k], "%d", k);
            snprintf(names[nr], sizeof names[nr], "bf16%s-seed%d", v ? "-stats16" : "", k);
            const char *f[] = {"--precision", "bf16", "--model", model, "--device", "cpu", "--batch-size", bs[0],
                               "--seed", seed[k], "--norm-stats", v ? "bf16-onepass" : "fp32", NULL};
            memcpy(fl[nr], f, sizeof f);
            runs[nr] = (mpt_lab_run){names[nr], fl[nr]};
        }
    for (int bi = 0; bi < 2; bi++)
        for (int v = 0; v < 2; v++, nr++) {
            snprintf(names[nr], sizeof names[nr], "fp16%s-b%s", v ? "-stats16" : "", bs[bi]);
            const char *f[] = {"--precision", "fp16", "--model", model, "--device", "cpu", "--batch-size", bs[bi],
                               "--norm-stats", v ? "fp16-onepass" : "fp32", NULL};
            memcpy(fl[nr], f, sizeof f);
            runs[nr] = (mpt_lab_run){names[nr], fl[nr]};
        }
    static mpt_run_result res[MAXR];
    MPT_TRY(mpt_lab_train_batch(c, runs, nr, res));
    trained tr = {.ns = ns, .B = B};
    for (int k = 0; k < ns; k++)
        tr.acc32[k] = 100.0 * res[2 * k].final_test_acc, tr.acc16[k] = 100.0 * res[2 * k + 1].final_test_acc;
    for (int bi = 0; bi < 2; bi++)
        for (int v = 0; v < 2; v++) {
            const mpt_run_result *r = &res[2 * ns + 2 * bi + v];
            tr.f16[bi][v] = (fp16_run){100.0 * r->final_test_acc, r->steps_skipped, (int)r->iterations};
        }
    for (int i = 0; i < nr; i++) mpt_run_result_free(&res[i]);

    /* part 1: the activations of the seed-0 bf16 run with the policy's statistics */
    char ckpt[MPT_CLI_PATH + 64];
    snprintf(ckpt, sizeof ckpt, "%s/bf16-seed0/%s", c->dir, MPT_CLI_CHECKPOINT_FILE);
    static capture cp;
    MPT_TRY(capture_inputs(c, model, ckpt, 4 * B, &cp));
    int focus_ln = 1;
    for (int i = 0; i < cp.n; i++) focus_ln &= cp.l[i].layernorm;
    const char *units = focus_ln ? "layer-norm rows" : "batch-norm channels";
    static measured me;
    mpt_status s = write_activations(c, &cp, B);
    if (s == MPT_OK) s = measure(&cp, ladder, focus_ln, &me);
    if (s != MPT_OK) {
        capture_free(&cp);
        return s;
    }
    summary lad[N_B][N_M], sh[N_T][N_M];
    for (int i = 0; i < N_B; i++)
        for (int m = 0; m < N_M; m++)
            lad[i][m] = summarize(&(unit_set){&cp, me.ur[i], me.nu[i], focus_ln}, m, -1, me.scratch);
    for (int i = 0; i < N_T; i++)
        for (int m = 0; m < N_M; m++)
            sh[i][m] = summarize(&(unit_set){&cp, me.sr[i], me.ns[i], focus_ln}, m, -1, me.scratch);
    const summary *at = lad[1]; /* the training batch */
    const int M32 = MPT_NORM_STATS_FP32, MB1 = MPT_NORM_STATS_BF16_ONEPASS, MH1 = MPT_NORM_STATS_FP16_ONEPASS;
    const int MB2 = MPT_NORM_STATS_BF16, MH2 = MPT_NORM_STATS_FP16, M31 = MPT_NORM_STATS_FP32_ONEPASS;
    int cancels = 0; /* at some shift the BF16 one-pass errs 10x more than two passes in BF16 */
    for (int i = 0; i < N_T; i++) cancels |= sh[i][MB1].med_err >= 10.0 * sh[i][MB2].med_err;
    c->observed = at[MB1].med_err >= 10.0 * at[M32].med_err && at[MH1].med_err >= 10.0 * at[M32].med_err && cancels;

    char vt[1800], st[1400], ptxt[700], rd[300], f16txt[1200];
    const mpt_text_norm_var tv = {units, at[0].units, at[0].med_kappa, at[M32].med_err, at[M_WELFORD].med_err,
                                  {"BF16", "FP16"}, {at[MB1].med_err, at[MH1].med_err},
                                  {at[MB2].med_err, at[MH2].med_err}, {at[MB1].clamped, at[MH1].clamped},
                                  {at[MB1].nonfinite, at[MH1].nonfinite}};
    mpt_text_norm_variance(vt, sizeof vt, &tv);
    mpt_text_norm_shift ts = {.units = units, .n_t = N_T};
    for (int i = 0; i < N_T; i++) {
        ts.t[i] = shifts[i], ts.kappa[i] = sh[i][0].med_kappa;
        ts.onepass_bf16[i] = sh[i][MB1].med_err, ts.onepass_fp16[i] = sh[i][MH1].med_err;
        ts.onepass_fp32[i] = sh[i][M31].med_err, ts.twopass_bf16[i] = sh[i][MB2].med_err;
        ts.twopass_fp32[i] = sh[i][M32].med_err, ts.clamped_bf16[i] = sh[i][MB1].clamped;
    }
    mpt_text_norm_shifted(st, sizeof st, &ts);
    mpt_stats_paired pd;
    mpt_stats_summary diff;
    double dd[MAX_SEEDS];
    for (int k = 0; k < ns; k++) dd[k] = tr.acc16[k] - tr.acc32[k];
    mpt_stats_summarize(dd, ns, &diff);
    const int have_ci = mpt_stats_available();
    if (have_ci) s = mpt_stats_compare_paired(tr.acc16, tr.acc32, ns, 0.95, c->base->margin, &pd);
    if (s == MPT_OK) {
        mpt_text_paired(ptxt, sizeof ptxt, "final test accuracy of bf16, BF16 one-pass statistics - FP32 statistics:",
                        have_ci ? &pd : NULL, &diff);
        mpt_text_verdict_reading(rd, sizeof rd, "with BF16 one-pass statistics", have_ci ? &pd : NULL);
        summary b1 = lad[1][MH1], b2 = lad[2][MH1];
        mpt_text_norm_fp16 ft = {B, 4 * B, focus_ln ? NAN : b1.nonfinite, focus_ln ? NAN : b2.nonfinite,
                                 tr.f16[0][1].skipped, tr.f16[0][1].steps, tr.f16[1][1].skipped, tr.f16[1][1].steps,
                                 tr.f16[0][1].acc, tr.f16[0][0].acc, tr.f16[1][1].acc, tr.f16[1][0].acc};
        mpt_text_norm_fp16_batches(f16txt, sizeof f16txt, &ft);
        c->conclusion[0] = '\0';
        mpt_lab_append(c->conclusion, sizeof c->conclusion, "%s: on the pre-normalisation activations of %s (%d normalisation "
               "layers, batch %d). ", c->observed ? "Observed" : "Not observed", own ? "the lesson's CNN" : "--model",
               cp.n, B);
        mpt_lab_append(c->conclusion, sizeof c->conclusion, "%s. %s. ", vt, st);
        mpt_lab_append(c->conclusion, sizeof c->conclusion, "In training, over %d seeds, %s: %s. %s.", ns, ptxt, rd, f16txt);
        if (!c->observed)
            mpt_lab_append(c->conclusion, sizeof c->conclusion, " (The criterion asks the one-pass variance in BF16 and in FP16 "
                   "to err at least 10x more than the policy's FP32 two passes, and, at some shift, the BF16 one-pass "
                   "10x more than BF16's two passes: medians over the units.)");
    }
    if (s == MPT_OK) s = write_units(c, &cp, &me, B);
    double lx[N_B] = {ladder[0], ladder[1], ladder[2]};
    if (s == MPT_OK) s = write_summaries(c, "normalization-ladder.dat", "rows b", lx, lad, N_B);
    if (s == MPT_OK) s = write_summaries(c, "normalization-shift.dat", "shift t (standard deviations)", shifts, sh, N_T);
    char plot_buf[600];
    const char *plot_error = NULL;
    static const int draw[] = {MPT_NORM_STATS_BF16_ONEPASS, MPT_NORM_STATS_FP16_ONEPASS, MPT_NORM_STATS_BF16,
                               MPT_NORM_STATS_FP16, MPT_NORM_STATS_FP32_ONEPASS, MPT_NORM_STATS_FP32, M_WELFORD};
    const int n_draw = (int)(sizeof draw / sizeof draw[0]);
    FILE *gp = s == MPT_OK ? mpt_lab_open(c, "normalization.gp") : NULL;
    if (s == MPT_OK && !gp) s = MPT_ERR_IO;
    if (gp) {
        mpt_report_gnuplot_terminal(gp, 1000, 1300, "normalization.png");
        fprintf(gp, "set multiplot layout 3,1\nset grid\nset key outside right\nset logscale y 10\n"
                    "set format y '10^{%%L}'\nset datafile missing 'inf'\nset logscale x 10\n"
                    "set title 'each unit''s variance against its condition (batch %d; not finite: not drawn)'\n"
                    "set xlabel 'condition 1 + mean^2 / var (exact)'\nset ylabel '|var - exact| / exact'\nplot ", B);
        for (int k = 0; k < n_draw; k++)
            fprintf(gp, "%s'normalization-units.dat' using 6:(($%d) > 0 ? $%d : 1e-12) with points pt %d lt %d title "
                        "'%s'", k ? ", \\\n     " : "", 7 + 2 * draw[k], 7 + 2 * draw[k], k + 1, k + 1,
                    method_name(draw[k]));
        fprintf(gp, "\nset title 'median over the %s, shifted by t standard deviations each (batch %d)'\nset xlabel "
                    "'median condition 1 + mean^2 / var'\nplot ", units, B);
        for (int k = 0; k < n_draw; k++)
            fprintf(gp, "%s'normalization-shift.dat' using 3:(($%d) > 0 ? $%d : 1e-12) with linespoints lw 2 pt %d lt "
                        "%d title '%s'", k ? ", \\\n     " : "", 4 + 5 * draw[k], 4 + 5 * draw[k], k + 1, k + 1,
                    method_name(draw[k]));
        fprintf(gp, "\nset title 'median over the %s against the rows b (a batch-norm channel sums b x H x W "
                    "elements)'\nset xlabel 'rows b'\nset logscale x 2\nplot ", units);
        for (int k = 0; k < n_draw; k++)
            fprintf(gp, "%s'normalization-ladder.dat' using 1:(($%d) > 0 ? $%d : 1e-12) with linespoints lw 2 pt %d lt "
                        "%d title '%s'", k ? ", \\\n     " : "", 4 + 5 * draw[k], 4 + 5 * draw[k], k + 1, k + 1,
                    method_name(draw[k]));
        fprintf(gp, "\nunset multiplot\n");
        plot_error = mpt_lab_plot(c, gp, "normalization.gp", plot_buf, sizeof plot_buf);
    }
    FILE *f = NULL;
    if (s == MPT_OK) s = mpt_lab_report_open(c, &mpt_lab_normalization, &f);
    if (s == MPT_OK) {
        fprintf(f, "Batch norm and layer norm subtract a mean and divide by a standard deviation that they compute from "
                   "the activations: sums over n = batch x H x W elements per channel (batch norm) or over the "
                   "features of a row (layer norm). The policy (engine/amp/policy.c, RULE_NORM; cuDNN's and PyTorch's "
                   "mixed-precision batch norm, autocast's FP32 layer_norm) computes them in FP32 with two passes: the "
                   "mean, then the mean of squared deviations. The one-pass formula var = E[x^2] - E[x]^2 subtracts two "
                   "numbers that are close when |mean| >> sd: its relative error grows like (1 + mean^2/var) u (Chan, "
                   "Golub & LeVeque 1983), and a 16-bit accumulator adds its own (u = 2^-8 in BF16, 2^-11 in FP16; FP16 "
                   "overflows past 65504).\n\n"
                   "Network: `%s`%s. Its weights are those of run `bf16-seed0/` (bf16, the policy's statistics); one "
                   "training-mode forward pass in FP32 on the first %d training images gives every normalisation "
                   "layer's input, whose first %d rows are in `activations.safetensors` (tensor `<layer>.input`). Each "
                   "unit's statistics (a batch-norm channel over the first b rows, a layer-norm row) are computed in the "
                   "six ways of `--norm-stats` (the CPU kernel's element order and roundings: engine/backend.h, "
                   "mpt_norm_args) and by Welford's update in FP32; a 16-bit method reads the activations rounded to its "
                   "format, and each error is against the exact variance of the values it read. Per unit: "
                   "`normalization-units.dat` (batch %d); medians over the %s against b: `normalization-ladder.dat`; "
                   "the same channels shifted by t of their standard deviations: `normalization-shift.dat`.\n\n",
                model, own ? " (the lesson's own CNN: --model had no normalisation layer)" : " (--model)", 4 * B, B, B,
                units);
        fprintf(f, "Median relative error of the variance per layer at batch %d (normalization-units.dat; condition = 1 "
                   "+ mean^2/var):\n\n| layer | kind | units | n per unit | median condition |", B);
        for (int m = 0; m < N_M; m++) fprintf(f, " %s |", method_name(m));
        fprintf(f, "\n|---|---|---:|---:|---:|");
        for (int m = 0; m < N_M; m++) fprintf(f, "---:|");
        fprintf(f, "\n");
        for (int i = 0; i < cp.n; i++) {
            summary sm[N_M];
            for (int m = 0; m < N_M; m++)
                sm[m] = summarize(&(unit_set){&cp, me.ur[1], me.nu[1], focus_ln}, m, i, me.scratch);
            fprintf(f, "| %s | %s | %d | %lld | %.3g |", cp.l[i].name, cp.l[i].layernorm ? "layernorm" : "batchnorm",
                    sm[0].units, (long long)(cp.l[i].layernorm ? cp.l[i].S : (int64_t)B * cp.l[i].S), sm[0].med_kappa);
            for (int m = 0; m < N_M; m++) fprintf(f, " %.2e |", sm[m].med_err);
            fprintf(f, "\n");
        }
        const char *ttl[2] = {"the rows b (normalization-ladder.dat)",
                              "a shift of t standard deviations (normalization-shift.dat)"};
        for (int q = 0; q < 2; q++) {
            const int rows = q ? N_T : N_B;
            fprintf(f, "\nMedian relative error of the variance over the %s against %s; in brackets the share clamped to "
                       "0 / not finite where not 0:\n\n| %s | units | median condition |", units, ttl[q],
                    q ? "t" : "b");
            for (int m = 0; m < N_M; m++) fprintf(f, " %s |", method_name(m));
            fprintf(f, "\n|---:|---:|---:|");
            for (int m = 0; m < N_M; m++) fprintf(f, "---:|");
            fprintf(f, "\n");
            for (int i = 0; i < rows; i++) {
                const summary *row = q ? sh[i] : lad[i];
                fprintf(f, "| %g | %d | %.3g |", q ? shifts[i] : lx[i], row[0].units, row[0].med_kappa);
                for (int m = 0; m < N_M; m++) {
                    fprintf(f, " %.2e", row[m].med_err);
                    if (row[m].clamped > 0 || row[m].nonfinite > 0)
                        fprintf(f, " (%.3g%% / %.3g%%)", 100.0 * row[m].clamped, 100.0 * row[m].nonfinite);
                    fprintf(f, " |");
                }
                fprintf(f, "\n");
            }
        }
        fprintf(f, "\n%s.\n\n%s.\n\n", vt, st);
        fprintf(f, "### Training\n\n`--norm-stats bf16-onepass` computes every batch norm's and layer norm's forward "
                   "statistics as above in BF16 with the one-pass formula (an ablation of the CPU backend: the "
                   "normalisation itself, the running statistics and the backward pass stay FP32; engine/amp/policy.h). "
                   "bf16 runs at batch %d with the policy's statistics (`bf16-seed<k>/`) and with it "
                   "(`bf16-stats16-seed<k>/`), final test accuracy from each run's summary.json:\n\n"
                   "| seed | FP32 statistics | BF16 one-pass | difference |\n|---:|---:|---:|---:|\n", B);
        for (int k = 0; k < ns; k++)
            fprintf(f, "| %d | %.2f%% | %.2f%% | %+.2f |\n", k, tr.acc32[k], tr.acc16[k], dd[k]);
        fprintf(f, "\n%s: %s.\n\nfp16, seed 0, with the policy's statistics and with `--norm-stats fp16-onepass` "
                   "(`fp16-b<batch>/`, `fp16-stats16-b<batch>/`; skipped steps and accuracy from their summary.json; "
                   "the shares of channels whose FP16 one-pass statistics were not finite are "
                   "normalization-ladder.dat's at b = %d and %d):\n\n| batch | FP32 statistics | skipped | FP16 "
                   "one-pass | skipped |\n|---:|---:|---:|---:|---:|\n", ptxt, rd, B, 4 * B);
        for (int bi = 0; bi < 2; bi++)
            fprintf(f, "| %d | %.2f%% | %d of %d | %.2f%% | %d of %d |\n", bi ? 4 * B : B, tr.f16[bi][0].acc,
                    tr.f16[bi][0].skipped, tr.f16[bi][0].steps, tr.f16[bi][1].acc, tr.f16[bi][1].skipped,
                    tr.f16[bi][1].steps);
        fprintf(f, "\n%s.\n\nCriterion for the effect: at batch %d the one-pass variance in BF16 and in FP16 each err at "
                   "least 10x more than the policy's FP32 two passes, and at some shift the BF16 one-pass errs 10x more "
                   "than BF16's two passes (medians over the %s). The training results are reported whatever they "
                   "are.\n", f16txt, B, units);
        s = mpt_lab_report_close(c, &mpt_lab_normalization, f, plot_error);
    }
    measured_free(&me);
    capture_free(&cp);
    return s;
}

const mpt_lab_lesson mpt_lab_normalization = {
    "normalization",
    "How wrong is a batch norm's or layer norm's variance computed as E[x^2] - E[x]^2 in BF16 or FP16 on a CNN's real "
    "activations, against two passes or Welford in FP32, and what does training with 16-bit statistics do?",
    "batch=B, the training batch (default 128; the statistics are measured at B/4, B and 4B rows); seeds=N (2..8; "
    "default: the lesson's size)",
    run,
    {20000, 10000, 2, 5}, /* full */
    {4000, 2000, 1, 3},   /* --quick */
    "batch seeds",
    "--quick 13 s, full 119 s of CPU time (2-core VM, 2026-11-28)",
};
