/*
 * engine/telemetry/telemetry.c - the telemetry collector (see telemetry.h): walks the graph on telemetry
 * steps and turns each tensor into rows with the counters of range.h and lost.h. Where the backend has the telemetry
 * reductions (engine/backend.h: the CPU backend always, the CUDA backend under MPT_CUDA_DEVICE_TELEMETRY=1) the
 * counters are computed where the tensor lives and only they reach the host; otherwise the tensor is copied to the
 * host once and counted there. The FP32 twin's comparisons and the FP8 rows always count host copies.
 */
#include "engine/telemetry/telemetry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/amp/scaler.h"
#include "engine/dist/dist.h"
#include "engine/telemetry/lost.h"
#include "engine/telemetry/range.h"

/* The run's exponent histogram of one scaled tensor, unscaled (mpt_telemetry_write_exponents). */
#define EXP_LOW (-181)
#define EXP_HIGH 159
#define EXP_BINS (EXP_HIGH - EXP_LOW + 1)
typedef struct exp_run {
    char tensor[MPT_NAME_LEN + 16];
    int64_t count[EXP_BINS]; /* index e - EXP_LOW */
} exp_run;

struct mpt_telemetry {
    mpt_trainer *t;
    int64_t every;
    mpt_graph *twin;            /* FP32 shadow twin, or NULL */
    float *probe_dst;           /* backend [max_numel] FP32: a probe's output */
    float *probe_scratch;       /* backend [max probe_scratch] FP32: a probe's widened operands */
    size_t bytes;               /* backend bytes of the two above (MPT_MEM_TELEMETRY) */
    int64_t max_numel;
    void *h_raw;                /* host [max_numel] floats: a tensor as stored */
    float *h_a, *h_b;           /* host [max_numel]: a tensor widened to FP32; its twin */
    FILE *csv;
    mpt_telemetry_stat *stats;
    int n_stats, cap_stats;
    int gathered;               /* the twin holds the coming step's batch */
    mpt_exp_hist all_act, all_grad; /* this step's rounding histograms over all probed activations / gradients */
    int n_act, n_grad;
    mpt_round_err err_act, err_grad, err_grad1; /* this step's rounding errors pooled: activations, gradients at S
                                                  * and had S been 1 */
    mpt_fp8_range fp8_grad, fp8_grad_other; /* this step's FP8 gradient casts pooled (and in the other format) */
    int n_fp8_grad;
    /* lost updates: per parameter, backend snapshots before the step and the optimizer's deltas */
    float **delta;              /* [n_params] backend FP32 [numel] */
    void **old;                 /* [n_params] backend, the update target as stored before the step */
    void **work_old;            /* [n_params] backend 16-bit working copy before the step, or NULL */
    void *h_c;                  /* host [max_numel] floats */
    exp_run *exps;              /* [n_exps] per scaled tensor, in the order first measured, then the pooled one */
    int n_exps, cap_exps;
    int32_t skipped_before;     /* steps_skipped before the measured step */
    int64_t step;               /* 1-based number of the step being measured */
    double host_s, cpu_s;       /* the instruments' own time so far: host clock and process CPU time in the hooks */
    double test_delay_s;        /* MPT_TELEMETRY_TEST_DELAY_MS: CPU work added to each hook (tests of the timing) */
};

/* ---- the instruments' own time (mpt_telemetry_time) ------------------------------------------------------------
 * Each hook is timed from a drained backend stream (the training work enqueued before it finishes first, outside
 * the timer) to the completion of what the hook itself enqueued, on the host clock and in process CPU time. */

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct hook_timer {
    double h0, c0;
} hook_timer;

static hook_timer hook_begin(mpt_telemetry *tel) {
    tel->t->be->synchronize(tel->t->be);
    return (hook_timer){clock_s(CLOCK_MONOTONIC), clock_s(CLOCK_PROCESS_CPUTIME_ID)};
}

static void hook_end(mpt_telemetry *tel, hook_timer h) {
    if (tel->test_delay_s > 0.0) { /* CPU work of this thread, so that both clocks see at least the delay */
        const double until = clock_s(CLOCK_THREAD_CPUTIME_ID) + tel->test_delay_s;
        volatile double x = 0.0;
        while (clock_s(CLOCK_THREAD_CPUTIME_ID) < until) x += 1.0;
        (void)x; /* volatile: the loop is work the compiler keeps, read by nothing (clang's unused-but-set) */
    }
    tel->t->be->synchronize(tel->t->be);
    tel->host_s += clock_s(CLOCK_MONOTONIC) - h.h0;
    tel->cpu_s += clock_s(CLOCK_PROCESS_CPUTIME_ID) - h.c0;
}

void mpt_telemetry_time(const mpt_telemetry *tel, double *host_s, double *cpu_s) {
    *host_s = tel ? tel->host_s : 0.0;
    *cpu_s = tel ? tel->cpu_s : 0.0;
}

/* ---- rows ---------------------------------------------------------------------------------------------- */

static mpt_telemetry_stat *stat_of(mpt_telemetry *tel, const char *tensor, const char *metric) {
    for (int i = 0; i < tel->n_stats; i++)
        if (strcmp(tel->stats[i].tensor, tensor) == 0 && strcmp(tel->stats[i].metric, metric) == 0)
            return &tel->stats[i];
    if (tel->n_stats == tel->cap_stats) {
        tel->cap_stats = tel->cap_stats ? 2 * tel->cap_stats : 128;
        tel->stats = realloc(tel->stats, (size_t)tel->cap_stats * sizeof *tel->stats);
        MPT_ASSERTF(tel->stats != NULL, "telemetry: out of host memory for %d statistics", tel->cap_stats);
    }
    mpt_telemetry_stat *s = &tel->stats[tel->n_stats++];
    memset(s, 0, sizeof *s);
    snprintf(s->tensor, sizeof s->tensor, "%s", tensor);
    snprintf(s->metric, sizeof s->metric, "%s", metric);
    return s;
}

static void row(mpt_telemetry *tel, const char *tensor, const char *metric, double value) {
    mpt_telemetry_stat *s = stat_of(tel, tensor, metric);
    s->last = value;
    s->last_step = tel->step;
    if (isfinite(value)) {
        s->sum += value;
        s->count++;
    }
    if (tel->csv) fprintf(tel->csv, "%lld,%s,%s,%.9g\n", (long long)tel->step, tensor, metric, value);
}

/* ---- host copies ------------------------------------------------------------------------------------------ */

static const mpt_tensor *root_of(const mpt_tensor *x) {
    while (x->view_of) x = x->view_of;
    return x;
}

/* Copies x to the host widened into dst (FP32) and returns the host copy as stored (dst itself for F32
 * tensors, else h_raw). */
static const void *fetch(mpt_telemetry *tel, const mpt_tensor *x, float *dst) {
    mpt_backend *be = tel->t->be;
    int64_t n = mpt_tensor_numel(x);
    if (x->dtype == MPT_DTYPE_F32) {
        be->to_host(be, dst, x->data, (size_t)n * sizeof(float));
        return dst;
    }
    be->to_host(be, tel->h_raw, x->data, (size_t)n * mpt_dtype_size(x->dtype));
    const uint16_t *h = tel->h_raw;
    if (x->dtype == MPT_DTYPE_F16)
        for (int64_t i = 0; i < n; i++) dst[i] = mpt_f16_to_f32(h[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = mpt_bf16_to_f32(h[i]);
    return tel->h_raw;
}

/* ---- measurements ------------------------------------------------------------------------------------------- */

/* Stored range of x: from its host copy as stored when the caller has one (stored: what fetch() returned), else
 * reduced by the backend where it can (no copy), else from a copy made here. */
static void measure_range(mpt_telemetry *tel, const mpt_tensor *x, const void *stored) {
    mpt_backend *be = tel->t->be;
    mpt_range r;
    memset(&r, 0, sizeof r);
    if (!stored && be->telemetry_range) be->telemetry_range(be, &r, x->data, x->dtype, mpt_tensor_numel(x));
    else mpt_range_count(&r, stored ? stored : fetch(tel, x, tel->h_a), x->dtype, mpt_tensor_numel(x));
    double n = r.n > 0 ? (double)r.n : 1.0;
    row(tel, x->name, "zero_frac", (double)r.zero / n);
    row(tel, x->name, "subnormal_frac", (double)r.subnormal / n);
    row(tel, x->name, "max_frac", (double)r.at_max / n);
    row(tel, x->name, "nonfinite_frac", (double)r.nonfinite / n);
}

static void round_rows(mpt_telemetry *tel, const char *tensor, const mpt_exp_hist *h, int k, const char *suffix) {
    mpt_round_stats rs;
    char m[32];
    mpt_exp_hist_round(h, k, &rs);
    snprintf(m, sizeof m, "flush_frac%s", suffix);
    row(tel, tensor, m, rs.flushed_frac);
    snprintf(m, sizeof m, "made_subnormal_frac%s", suffix);
    row(tel, tensor, m, rs.subnormal_frac);
    snprintf(m, sizeof m, "overflow_frac%s", suffix);
    row(tel, tensor, m, rs.overflow_frac);
    snprintf(m, sizeof m, "mass_lost%s", suffix);
    row(tel, tensor, m, rs.mass_lost);
}

/* The rows of one histogram: what the rounding did and, for gradients (scaled by S = 2^log2_scale), what it
 * would have done at S/2, 2S and S = 1. */
static void rounding_rows(mpt_telemetry *tel, const char *tensor, const mpt_exp_hist *h, int scaled,
                          int32_t log2_scale) {
    round_rows(tel, tensor, h, 0, "");
    if (!scaled || log2_scale == INT32_MIN) return; /* counterfactuals need a power-of-two S */
    round_rows(tel, tensor, h, -1, "@S/2");
    round_rows(tel, tensor, h, 1, "@2S");
    round_rows(tel, tensor, h, -log2_scale, "@S=1");
}

/* Adds h (values scaled by 2^log2_scale) to the run's histogram of `tensor`, divided by the scale. */
static void exps_add(mpt_telemetry *tel, const char *tensor, const mpt_exp_hist *h, int32_t log2_scale) {
    exp_run *x = NULL;
    for (int i = 0; i < tel->n_exps && !x; i++)
        if (strcmp(tel->exps[i].tensor, tensor) == 0) x = &tel->exps[i];
    if (!x) {
        if (tel->n_exps == tel->cap_exps) {
            tel->cap_exps = tel->cap_exps ? 2 * tel->cap_exps : 8;
            tel->exps = realloc(tel->exps, (size_t)tel->cap_exps * sizeof *tel->exps);
            MPT_ASSERTF(tel->exps != NULL, "telemetry: out of host memory for %d exponent histograms", tel->cap_exps);
        }
        x = &tel->exps[tel->n_exps++];
        memset(x, 0, sizeof *x);
        snprintf(x->tensor, sizeof x->tensor, "%s", tensor);
    }
    for (int b = 0; b < MPT_EXP_HIST_BINS; b++) {
        if (!h->count[b]) continue;
        int e = b + MPT_EXP_HIST_EMIN - log2_scale;
        e = e < EXP_LOW ? EXP_LOW : e > EXP_HIGH ? EXP_HIGH : e;
        x->count[e - EXP_LOW] += h->count[b];
    }
}

int mpt_telemetry_write_exponents(const mpt_telemetry *tel, FILE *f) {
    int rows = 0;
    if (fprintf(f, "tensor,exponent,count\n") < 0) return -1;
    for (int i = 0; i < tel->n_exps; i++)
        for (int b = 0; b < EXP_BINS; b++) {
            if (!tel->exps[i].count[b]) continue;
            if (fprintf(f, "%s,%d,%lld\n", tel->exps[i].tensor, b + EXP_LOW, (long long)tel->exps[i].count[b]) < 0)
                return -1;
            rows++;
        }
    return ferror(f) ? -1 : rows;
}

/* Runs a node's rounding probe for 16-bit tensor x (scaled: a gradient seeded with S = 2^log2_scale) and
 * records what the rounding did, with the loss-scale counterfactuals for gradients. */
static void measure_rounding(mpt_telemetry *tel, mpt_node *n, mpt_node_probe_fn probe, const mpt_tensor *x,
                             int scaled, int32_t log2_scale) {
    mpt_backend *be = tel->t->be;
    int64_t cnt = mpt_tensor_numel(x);
    probe(tel->t->g, n, tel->probe_dst, tel->probe_scratch);
    /* the histogram and the rounding errors at S (k = 0) and, for gradients, had S been 1 (k = -log2 S) */
    const int unscaled = scaled && log2_scale != INT32_MIN;
    const int ks[MPT_TELEMETRY_MAX_SHIFTS] = {0, unscaled ? -log2_scale : 0}, n_k = unscaled ? 2 : 1;
    mpt_round_err e[MPT_TELEMETRY_MAX_SHIFTS];
    memset(e, 0, sizeof e);
    mpt_exp_hist h;
    mpt_exp_hist_init(&h, x->dtype);
    if (be->telemetry_rounding) {
        be->telemetry_rounding(be, &h, e, ks, n_k, tel->probe_dst, cnt);
    } else {
        be->to_host(be, tel->h_a, tel->probe_dst, (size_t)cnt * sizeof(float));
        mpt_exp_hist_add(&h, tel->h_a, cnt);
        for (int j = 0; j < n_k; j++) mpt_round_err_add(&e[j], tel->h_a, cnt, ks[j], x->dtype);
    }
    rounding_rows(tel, x->name, &h, scaled, log2_scale);
    if (scaled && log2_scale != INT32_MIN) exps_add(tel, x->name, &h, log2_scale);
    mpt_exp_hist *all = scaled ? &tel->all_grad : &tel->all_act;
    int *count = scaled ? &tel->n_grad : &tel->n_act;
    if ((*count)++ == 0) mpt_exp_hist_init(all, x->dtype);
    mpt_exp_hist_merge(all, &h);
    /* what the rounding cost the values, not only how many: the relative L2 error, at S and had S been 1 */
    row(tel, x->name, "rel_l2_err", mpt_round_err_rel(&e[0]));
    mpt_round_err *pool = scaled ? &tel->err_grad : &tel->err_act;
    pool->err2 += e[0].err2;
    pool->ref2 += e[0].ref2;
    if (unscaled) {
        row(tel, x->name, "rel_l2_err@S=1", mpt_round_err_rel(&e[1]));
        tel->err_grad1.err2 += e[1].err2;
        tel->err_grad1.ref2 += e[1].ref2;
    }
}

static void fp8_pool(mpt_fp8_range *dst, const mpt_fp8_range *src) {
    dst->nonzero += src->nonzero;
    dst->saturated += src->saturated;
    dst->flushed += src->flushed;
    dst->subnormal += src->subnormal;
}

/* The pooled rows of this step's FP8 gradient casts (every dy of an FP8 layer, each element once). */
static void fp8_pooled_rows(mpt_telemetry *tel) {
    if (!tel->n_fp8_grad) return;
    const mpt_fp8_range *a = &tel->fp8_grad, *b = &tel->fp8_grad_other;
    const double na = a->nonzero > 0 ? (double)a->nonzero : 1.0, nb = b->nonzero > 0 ? (double)b->nonzero : 1.0;
    row(tel, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_sat_frac", (double)a->saturated / na);
    row(tel, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac", (double)a->flushed / na);
    row(tel, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_subnormal_frac", (double)a->subnormal / na);
    row(tel, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_sat_frac@other_format", (double)b->saturated / nb);
    row(tel, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac@other_format", (double)b->flushed / nb);
    row(tel, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_subnormal_frac@other_format", (double)b->subnormal / nb);
}

/* FP8 rows of one operand x of an FP8 GEMM (its BF16 source, widened in host[0..n)), as cast this step: its amax,
 * scale, and the saturated / flushed / subnormal fractions at the scale used, at half and at twice it (range.h 3);
 * with delayed per-tensor scaling how stale the scale was (amax now / the amax the scale came from); for gradients
 * (dy), the same fractions had the other FP8 format been used with its own scale (E4M3 <-> E5M2). */
static void fp8_rows(mpt_telemetry *tel, const mpt_fp8_operand *op, const mpt_fp8_meta *m, const float *h, int64_t n,
                     int64_t rows, int gradient) {
    const mpt_graph *g = tel->t->g;
    const char *name = g->fp8[op->meta].name;
    const int e5 = op->fmt == MPT_DTYPE_E5M2, mx = mpt_policy_fp8_mx(&g->policy);
    const int rounding = g->policy.fp8.mx_rounding;
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fabsf(h[i]) > amax ? fabsf(h[i]) : amax;
    row(tel, name, "fp8_amax", amax);
    if (!mx) row(tel, name, "fp8_scale", m->scale);
    static const char *const suffix[3] = {"@s/2", "", "@2s"};
    for (int k = -1; k <= 1; k++) {
        mpt_fp8_range r;
        memset(&r, 0, sizeof r);
        if (mx) mpt_mx_range_count(&r, h, rows, n / rows, e5, rounding, k);
        else mpt_fp8_range_count(&r, h, n, ldexpf(m->scale, k), e5);
        if (gradient && k == 0) fp8_pool(&tel->fp8_grad, &r);
        const double nz = r.nonzero > 0 ? (double)r.nonzero : 1.0;
        char metric[32];
        snprintf(metric, sizeof metric, "fp8_sat_frac%s", suffix[k + 1]);
        row(tel, name, metric, (double)r.saturated / nz);
        snprintf(metric, sizeof metric, "fp8_flush_frac%s", suffix[k + 1]);
        row(tel, name, metric, (double)r.flushed / nz);
        snprintf(metric, sizeof metric, "fp8_subnormal_frac%s", suffix[k + 1]);
        row(tel, name, metric, (double)r.subnormal / nz);
    }
    if (!mx && g->policy.fp8.scaling == MPT_FP8_SCALING_DELAYED && m->amax_used > 0.0f)
        row(tel, name, "fp8_staleness", (double)amax / (double)m->amax_used);
    if (gradient) { /* the other format, scaled by the same rule for its own largest value */
        mpt_fp8_range r;
        memset(&r, 0, sizeof r);
        if (mx) mpt_mx_range_count(&r, h, rows, n / rows, !e5, rounding, 0);
        else mpt_fp8_range_count(&r, h, n, m->scale * ((e5 ? MPT_E4M3_MAX : MPT_E5M2_MAX) / m->fmax), !e5);
        fp8_pool(&tel->fp8_grad_other, &r);
        tel->n_fp8_grad++;
        const double nz = r.nonzero > 0 ? (double)r.nonzero : 1.0;
        row(tel, name, "fp8_sat_frac@other_format", (double)r.saturated / nz);
        row(tel, name, "fp8_flush_frac@other_format", (double)r.flushed / nz);
        row(tel, name, "fp8_subnormal_frac@other_format", (double)r.subnormal / nz);
    }
}

/* The FP8 rows of node n's three operands (x, W, dy), from their BF16 sources and the scale state of this step
 * (the update comes after the optimizer). */
static void measure_fp8(mpt_telemetry *tel, const mpt_node *n) {
    mpt_trainer *t = tel->t;
    const mpt_graph *g = t->g;
    const mpt_fp8_operand *ops[3] = {&n->fp8_x, &n->fp8_w, &n->fp8_dy};
    const mpt_tensor *src[3] = {n->in[0], n->in[1], n->out->grad};
    for (int k = 0; k < 3; k++) {
        mpt_fp8_meta m;
        t->be->to_host(t->be, &m, &g->fp8_meta[ops[k]->meta], sizeof m);
        fetch(tel, src[k], tel->h_a);
        fp8_rows(tel, ops[k], &m, tel->h_a, mpt_tensor_numel(src[k]), src[k]->shape[0], k == 2);
    }
}

/* ||a/scale - b|| / ||b|| and, when want_cos, the cosine of a and b (host FP32 arrays, sums in double). */
static void compare(mpt_telemetry *tel, const char *tensor, const float *a, const float *b, int64_t n, double scale,
                    int want_cos) {
    double d2 = 0.0, b2 = 0.0, a2 = 0.0, ab = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = (double)a[i] / scale, y = (double)b[i];
        d2 += (x - y) * (x - y);
        b2 += y * y;
        a2 += x * x;
        ab += x * y;
    }
    row(tel, tensor, "twin_rel_l2", b2 > 0.0 ? sqrt(d2 / b2) : (d2 > 0.0 ? INFINITY : 0.0));
    if (want_cos) row(tel, tensor, "twin_cos", a2 > 0.0 && b2 > 0.0 ? ab / sqrt(a2 * b2) : NAN);
}

/* Loads the twin with the masters and runs it on the step's minibatch (forward and backward, S = 1). */
static void twin_run(mpt_telemetry *tel) {
    mpt_trainer *t = tel->t;
    mpt_graph *g = t->g, *tw = tel->twin;
    mpt_backend *be = t->be;
    for (int i = 0; i < t->n_params; i++) /* widened: without masters (--master-weights none) they are 16-bit */
        be->cast(be, tw->params[i].weight->data, MPT_DTYPE_F32, t->master[i]->data, t->master[i]->dtype,
                 mpt_tensor_numel(t->master[i]));
    tw->training = g->training;
    tw->seed = g->seed;
    tw->step = g->step;
    mpt_graph_zero_grad(tw);
    mpt_graph_forward(tw);
    mpt_graph_backward(tw);
}

static void lost_add(mpt_lost *dst, const mpt_lost *src) {
    dst->n += src->n;
    dst->nonzero += src->nonzero;
    dst->lost += src->lost;
    dst->mass += src->mass;
    dst->mass_lost += src->mass_lost;
    dst->mass_applied += src->mass_applied;
}

/* Snapshots each update target (and a separate 16-bit working copy) and asks the optimizer for its deltas. */
static void arm_lost_updates(mpt_telemetry *tel) {
    mpt_trainer *t = tel->t;
    mpt_backend *be = t->be;
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *target = mpt_trainer_update_target(t, i);
        be->copy(be, tel->old[i], target->data, mpt_tensor_nbytes(target));
        if (tel->work_old[i]) be->copy(be, tel->work_old[i], t->weight[i]->data, mpt_tensor_nbytes(t->weight[i]));
    }
    t->update_out = tel->delta;
}

/* Data-parallel: the all-reduce's communication error of this step (engine/dist measured it in the step's
 * hook, which runs before this call on every telemetry step). */
static void comm_rows(mpt_telemetry *tel) {
    mpt_trainer *t = tel->t;
    const double *rel;
    double all;
    if (!t->dist || mpt_dist_comm_error(t->dist, &rel, &all) != tel->step) return;
    for (int i = 0; i < t->n_params; i++) row(tel, t->weight[i]->grad->name, "comm_rel_l2", rel[i]);
    row(tel, MPT_TELEMETRY_ALL_PARAMS, "comm_rel_l2", all);
}

static void after_backward(mpt_telemetry *tel) {
    mpt_trainer *t = tel->t;
    mpt_graph *g = t->g;
    mpt_scaler_state st;
    t->be->to_host(t->be, &st, t->scaler, sizeof st);
    tel->step = t->iteration + 1;
    double S = (double)st.scale;
    int32_t log2_scale = mpt_exp_hist_log2_exact(st.scale);
    row(tel, "amp", "loss_scale", S);
    int twin = tel->twin != NULL && tel->gathered;
    /* fused epilogues leave a linear layer's pre-activation and a relu's output gradient unwritten: fill them in
     * (tensors the step does not read), so every node's out and out->grad below hold what an unfused step stores */
    mpt_graph_fill_fused(g);
    if (twin) twin_run(tel);
    tel->n_act = tel->n_grad = 0;
    memset(&tel->err_act, 0, sizeof tel->err_act);
    memset(&tel->err_grad, 0, sizeof tel->err_grad);
    memset(&tel->err_grad1, 0, sizeof tel->err_grad1);
    tel->n_fp8_grad = 0;
    memset(&tel->fp8_grad, 0, sizeof tel->fp8_grad);
    memset(&tel->fp8_grad_other, 0, sizeof tel->fp8_grad_other);

    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node *n = g->nodes[i];
        const mpt_node *tn = twin ? tel->twin->nodes[i] : NULL;
        const mpt_tensor *y = n->out;
        if (y && n->op != MPT_OP_SOFTMAX_XENT && !y->view_of && mpt_dtype_is_float(y->dtype)) {
            measure_range(tel, y, twin ? fetch(tel, y, tel->h_a) : NULL);
            if (twin) {
                fetch(tel, tn->out, tel->h_b);
                compare(tel, y->name, tel->h_a, tel->h_b, mpt_tensor_numel(y), 1.0, 0);
            }
            if (n->probe_forward) measure_rounding(tel, n, n->probe_forward, y, 0, log2_scale);
            if (y->grad) {
                measure_range(tel, y->grad, twin ? fetch(tel, y->grad, tel->h_a) : NULL);
                if (twin) {
                    fetch(tel, tn->out->grad, tel->h_b);
                    compare(tel, y->grad->name, tel->h_a, tel->h_b, mpt_tensor_numel(y), S, 0);
                }
            }
        }
        if (n->probe_backward) measure_rounding(tel, n, n->probe_backward, root_of(n->in[0]->grad), 1, log2_scale);
        if (n->fp8) measure_fp8(tel, n);
    }
    /* all rounded tensors of the step together, weighting each element once */
    if (tel->n_act) rounding_rows(tel, MPT_TELEMETRY_ALL_ACT, &tel->all_act, 0, log2_scale);
    if (tel->n_grad) rounding_rows(tel, MPT_TELEMETRY_ALL_ACT_GRAD, &tel->all_grad, 1, log2_scale);
    if (tel->n_grad && log2_scale != INT32_MIN) exps_add(tel, MPT_TELEMETRY_ALL_ACT_GRAD, &tel->all_grad, log2_scale);
    if (tel->n_act) row(tel, MPT_TELEMETRY_ALL_ACT, "rel_l2_err", mpt_round_err_rel(&tel->err_act));
    if (tel->n_grad) row(tel, MPT_TELEMETRY_ALL_ACT_GRAD, "rel_l2_err", mpt_round_err_rel(&tel->err_grad));
    if (tel->n_grad && log2_scale != INT32_MIN)
        row(tel, MPT_TELEMETRY_ALL_ACT_GRAD, "rel_l2_err@S=1", mpt_round_err_rel(&tel->err_grad1));
    fp8_pooled_rows(tel);
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *gr = t->weight[i]->grad;
        measure_range(tel, gr, twin ? fetch(tel, gr, tel->h_a) : NULL);
        if (twin) {
            fetch(tel, tel->twin->params[i].weight->grad, tel->h_b);
            compare(tel, gr->name, tel->h_a, tel->h_b, mpt_tensor_numel(gr), S, 1);
        }
    }
    comm_rows(tel);
    arm_lost_updates(tel);
    tel->skipped_before = st.steps_skipped;
    if (tel->csv) fflush(tel->csv);
    tel->gathered = 0;
}

void mpt_telemetry_after_backward(mpt_telemetry *tel) {
    hook_timer h = hook_begin(tel);
    after_backward(tel);
    hook_end(tel, h);
}

static void after_step(mpt_telemetry *tel) {
    mpt_trainer *t = tel->t;
    mpt_backend *be = t->be;
    t->update_out = NULL;
    mpt_scaler_state st;
    be->to_host(be, &st, t->scaler, sizeof st);
    if (st.steps_skipped != tel->skipped_before) { /* no update was applied: nothing to meter */
        row(tel, "amp", "step_skipped", 1.0);
        if (tel->csv) fflush(tel->csv);
        return;
    }
    mpt_lost all, all_cf;
    memset(&all, 0, sizeof all);
    memset(&all_cf, 0, sizeof all_cf);
    int any_cf = 0;
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *target = mpt_trainer_update_target(t, i), *w = t->weight[i];
        int64_t n = mpt_tensor_numel(target);
        size_t bytes = (size_t)n * mpt_dtype_size(target->dtype);
        int host_delta = 0; /* tel->h_a holds the deltas */
        mpt_lost r;
        memset(&r, 0, sizeof r);
        if (be->telemetry_lost) {
            be->telemetry_lost(be, &r, tel->old[i], target->data, target->dtype, tel->delta[i], n);
        } else {
            be->to_host(be, tel->h_raw, tel->old[i], bytes);
            be->to_host(be, tel->h_c, target->data, bytes);
            be->to_host(be, tel->h_a, tel->delta[i], (size_t)n * sizeof(float));
            host_delta = 1;
            mpt_lost_count(&r, tel->h_raw, tel->h_c, target->dtype, tel->h_a, n);
        }
        row(tel, w->name, "lost_frac", mpt_lost_frac(&r));
        row(tel, w->name, "lost_mass", mpt_lost_mass_share(&r));
        row(tel, w->name, "applied_mass", mpt_lost_applied_share(&r));
        lost_add(&all, &r);
        if (tel->work_old[i]) {
            memset(&r, 0, sizeof r);
            if (be->telemetry_lost_counterfactual) {
                be->telemetry_lost_counterfactual(be, &r, tel->work_old[i], w->dtype, tel->delta[i], n);
            } else {
                be->to_host(be, tel->h_raw, tel->work_old[i], (size_t)n * mpt_dtype_size(w->dtype));
                if (!host_delta) be->to_host(be, tel->h_a, tel->delta[i], (size_t)n * sizeof(float));
                mpt_lost_counterfactual(&r, tel->h_raw, w->dtype, tel->h_a, n);
            }
            row(tel, w->name, "lost_frac_if_16bit", mpt_lost_frac(&r));
            row(tel, w->name, "lost_mass_if_16bit", mpt_lost_mass_share(&r));
            row(tel, w->name, "applied_mass_if_16bit", mpt_lost_applied_share(&r));
            lost_add(&all_cf, &r);
            any_cf = 1;
        }
    }
    row(tel, MPT_TELEMETRY_ALL_PARAMS, "lost_frac", mpt_lost_frac(&all));
    row(tel, MPT_TELEMETRY_ALL_PARAMS, "lost_mass", mpt_lost_mass_share(&all));
    row(tel, MPT_TELEMETRY_ALL_PARAMS, "applied_mass", mpt_lost_applied_share(&all));
    if (any_cf) {
        row(tel, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit", mpt_lost_frac(&all_cf));
        row(tel, MPT_TELEMETRY_ALL_PARAMS, "lost_mass_if_16bit", mpt_lost_mass_share(&all_cf));
        row(tel, MPT_TELEMETRY_ALL_PARAMS, "applied_mass_if_16bit", mpt_lost_applied_share(&all_cf));
    }
    if (tel->csv) fflush(tel->csv);
}

void mpt_telemetry_after_step(mpt_telemetry *tel) {
    hook_timer h = hook_begin(tel);
    after_step(tel);
    hook_end(tel, h);
}

void mpt_telemetry_gather(mpt_telemetry *tel, const uint8_t *images, const uint8_t *labels, const int32_t *idx,
                          int64_t D, float mean, float inv_std) {
    if (!tel->twin || !mpt_telemetry_due(tel, tel->t->iteration + 1)) return;
    hook_timer h = hook_begin(tel);
    mpt_graph *tw = tel->twin;
    tel->t->be->gather_batch(tel->t->be, tw->input->data, tw->input->dtype, tw->labels->data, images, labels, idx,
                             tw->batch, D, mean, inv_std);
    tel->gathered = 1;
    hook_end(tel, h);
}

/* ---- life cycle ------------------------------------------------------------------------------------------------ */

static mpt_status check_twin(const mpt_graph *g, const mpt_graph *tw) {
    if (tw->be != g->be) return mpt_errorf(MPT_ERR_ARG, "telemetry twin: built on another backend");
    if (tw->batch != g->batch || tw->n_nodes != g->n_nodes || tw->n_params != g->n_params || !tw->loss)
        return mpt_errorf(MPT_ERR_ARG,
                          "telemetry twin: expected the run's model with its loss (%d nodes, %d parameters, batch %d), "
                          "found %d nodes, %d parameters, batch %d%s",
                          g->n_nodes, g->n_params, g->batch, tw->n_nodes, tw->n_params, tw->batch,
                          tw->loss ? "" : ", no loss");
    for (int i = 0; i < g->n_nodes; i++)
        if (tw->nodes[i]->op != g->nodes[i]->op || strcmp(tw->nodes[i]->name, g->nodes[i]->name) != 0)
            return mpt_errorf(MPT_ERR_ARG, "telemetry twin: node %d is %s (%s), the run's is %s (%s)", i,
                              tw->nodes[i]->name, mpt_op_name(tw->nodes[i]->op), g->nodes[i]->name,
                              mpt_op_name(g->nodes[i]->op));
    for (int i = 0; i < g->n_tensors; i++) {
        const mpt_tensor *a = g->tensors[i];
        if (a->mem != MPT_MEM_WEIGHT && a->mem != MPT_MEM_ACT && a->mem != MPT_MEM_ACT_GRAD) continue;
        const mpt_tensor *b = mpt_graph_find(tw, a->name);
        if (b && mpt_tensor_numel(b) != mpt_tensor_numel(a))
            return mpt_errorf(MPT_ERR_ARG, "telemetry twin: %s has %lld elements, the run's %lld", a->name,
                              (long long)mpt_tensor_numel(b), (long long)mpt_tensor_numel(a));
    }
    for (int i = 0; i < tw->n_tensors; i++) {
        const mpt_tensor *b = tw->tensors[i];
        if ((b->mem == MPT_MEM_WEIGHT || b->mem == MPT_MEM_ACT || b->mem == MPT_MEM_ACT_GRAD) &&
            mpt_dtype_is_float(b->dtype) && b->dtype != MPT_DTYPE_F32)
            return mpt_errorf(MPT_ERR_ARG, "telemetry twin: %s is %s, the twin must be all FP32 (fp32 policy)",
                              b->name, mpt_dtype_name(b->dtype));
    }
    return MPT_OK;
}

static void *backend_alloc(mpt_telemetry *tel, size_t bytes) {
    mpt_backend *be = tel->t->be;
    void *p = be->alloc(be, bytes);
    if (p) {
        mpt_backend_account(be, MPT_MEM_TELEMETRY, (int64_t)bytes);
        tel->bytes += bytes;
    }
    return p;
}

static mpt_status attach_twin(mpt_telemetry *tel, mpt_graph *tw) {
    mpt_graph *g = tel->t->g;
    mpt_status s = check_twin(g, tw);
    if (s != MPT_OK) {
        mpt_graph_free(&tw);
        return s;
    }
    int64_t one_shape[1] = {1};
    mpt_tensor *one = mpt_graph_tensor(tw, "telemetry.loss_scale_1", MPT_DTYPE_F32, MPT_MEM_ACT, 1, one_shape);
    tw->twin = 1;
    tel->twin = tw;
    MPT_TRY(mpt_graph_alloc(tw));
    static const float unit = 1.0f;
    tw->be->from_host(tw->be, one->data, &unit, sizeof unit);
    tw->loss_scale = one->data;
    return MPT_OK;
}

/* Whether parameter i's forward weight is a 16-bit copy of an FP32 update target (the counterfactual applies). */
static int has_16bit_copy(const mpt_trainer *t, int i) {
    const mpt_tensor *target = mpt_trainer_update_target(t, i), *w = t->weight[i];
    return target != w && target->dtype == MPT_DTYPE_F32 && (w->dtype == MPT_DTYPE_F16 || w->dtype == MPT_DTYPE_BF16);
}

static mpt_status alloc_lost_buffers(mpt_telemetry *tel) {
    mpt_trainer *t = tel->t;
    tel->delta = calloc((size_t)t->n_params, sizeof *tel->delta);
    tel->old = calloc((size_t)t->n_params, sizeof *tel->old);
    tel->work_old = calloc((size_t)t->n_params, sizeof *tel->work_old);
    MPT_ASSERT(tel->delta && tel->old && tel->work_old);
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *target = mpt_trainer_update_target(t, i);
        tel->delta[i] = backend_alloc(tel, (size_t)mpt_tensor_numel(target) * sizeof(float));
        tel->old[i] = backend_alloc(tel, mpt_tensor_nbytes(target));
        if (!tel->delta[i] || !tel->old[i])
            return mpt_errorf(MPT_ERR_NOMEM, "telemetry: cannot allocate the lost-update buffers of %s", target->name);
        if (has_16bit_copy(t, i)) {
            tel->work_old[i] = backend_alloc(tel, mpt_tensor_nbytes(t->weight[i]));
            if (!tel->work_old[i])
                return mpt_errorf(MPT_ERR_NOMEM, "telemetry: cannot allocate a copy of %s", t->weight[i]->name);
        }
    }
    return MPT_OK;
}

static mpt_status setup(mpt_telemetry *tel, mpt_graph *twin);

mpt_status mpt_telemetry_create(mpt_trainer *t, int64_t every, mpt_graph *twin) {
    MPT_ASSERTF(t->telemetry == NULL, "mpt_telemetry_create: the trainer already has telemetry");
    if (every < 1) {
        if (twin) mpt_graph_free(&twin);
        return mpt_errorf(MPT_ERR_ARG, "--telemetry: expected a step interval >= 1, found %lld", (long long)every);
    }
    mpt_telemetry *tel = calloc(1, sizeof *tel);
    MPT_ASSERT(tel != NULL);
    tel->t = t;
    tel->every = every;
    const char *delay = getenv("MPT_TELEMETRY_TEST_DELAY_MS");
    if (delay && *delay) tel->test_delay_s = 1e-3 * strtod(delay, NULL);
    t->telemetry = tel; /* freed with the trainer from here on */
    mpt_status s = setup(tel, twin);
    if (s != MPT_OK) mpt_telemetry_free(&t->telemetry); /* the trainer as it was: no half-made collector */
    return s;
}

/* The buffers of a new collector (mpt_telemetry_create). */
static mpt_status setup(mpt_telemetry *tel, mpt_graph *twin) {
    mpt_trainer *t = tel->t;
    mpt_graph *g = t->g;
    int64_t max_scratch = 1;
    size_t ws = 0;
    tel->max_numel = 1;
    for (int i = 0; i < g->n_tensors; i++)
        if (mpt_tensor_numel(g->tensors[i]) > tel->max_numel) tel->max_numel = mpt_tensor_numel(g->tensors[i]);
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i]->probe_scratch > max_scratch) max_scratch = g->nodes[i]->probe_scratch;
        if (g->nodes[i]->probe_workspace > ws) ws = g->nodes[i]->probe_workspace;
    }
    if (twin) MPT_TRY(attach_twin(tel, twin));
    MPT_TRY(mpt_backend_reserve_workspace(t->be, ws));
    tel->probe_dst = backend_alloc(tel, (size_t)tel->max_numel * sizeof(float));
    tel->probe_scratch = backend_alloc(tel, (size_t)max_scratch * sizeof(float));
    tel->h_raw = malloc((size_t)tel->max_numel * sizeof(float));
    tel->h_a = malloc((size_t)tel->max_numel * sizeof(float));
    tel->h_b = malloc((size_t)tel->max_numel * sizeof(float));
    tel->h_c = malloc((size_t)tel->max_numel * sizeof(float));
    MPT_TRY(alloc_lost_buffers(tel));
    if (!tel->probe_dst || !tel->probe_scratch || !tel->h_raw || !tel->h_a || !tel->h_b || !tel->h_c)
        return mpt_errorf(MPT_ERR_NOMEM, "telemetry: cannot allocate buffers for %lld elements",
                          (long long)tel->max_numel);
    return MPT_OK;
}

void mpt_telemetry_free(mpt_telemetry **ptel) {
    mpt_telemetry *tel = *ptel;
    if (!tel) return;
    mpt_backend *be = tel->t->be;
    if (tel->t->update_out == tel->delta) tel->t->update_out = NULL;
    if (tel->probe_dst) be->free(be, tel->probe_dst);
    if (tel->probe_scratch) be->free(be, tel->probe_scratch);
    for (int i = 0; i < tel->t->n_params; i++) {
        if (tel->delta && tel->delta[i]) be->free(be, tel->delta[i]);
        if (tel->old && tel->old[i]) be->free(be, tel->old[i]);
        if (tel->work_old && tel->work_old[i]) be->free(be, tel->work_old[i]);
    }
    free(tel->delta);
    free(tel->old);
    free(tel->work_old);
    free(tel->h_c);
    mpt_backend_account(be, MPT_MEM_TELEMETRY, -(int64_t)tel->bytes);
    mpt_graph_free(&tel->twin);
    free(tel->h_raw);
    free(tel->h_a);
    free(tel->h_b);
    free(tel->stats);
    free(tel->exps);
    free(tel);
    *ptel = NULL;
}

int mpt_telemetry_due(const mpt_telemetry *tel, int64_t step) { return step % tel->every == 0; }

void mpt_telemetry_set_csv(mpt_telemetry *tel, FILE *f) { tel->csv = f; }

int mpt_telemetry_stats(const mpt_telemetry *tel, const mpt_telemetry_stat **stats) {
    *stats = tel->stats;
    return tel->n_stats;
}

