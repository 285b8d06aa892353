/*
 * tools/lab/lesson_loss_scaling.c - lesson `loss-scaling`: why fp16 multiplies the loss by S.
 *
 * Plan (fp16, seed 0, telemetry every 10 steps, engine/telemetry): the dynamic scaler (from 2^16), a static
 * scale (default 2^8) and no scaling (S = 1). Per activation gradient (`X.out.grad`, the tensors S multiplies)
 * read the fraction of values that round to zero in FP16 (`flush_frac`, mean over telemetry steps) in each
 * run, and in the dynamic run also the counterfactual at S = 1 (`flush_frac@S=1`: the same values rounded
 * without the scale). Then skipped steps and accuracy of each run. If the default setting barely underflows
 * (no tensor loses 1% of its values at S = 1), the lesson says so with its numbers and repeats the dynamic run
 * in a named setting where gradients are smaller: a larger batch (the loss is a mean over the batch, so each
 * example's gradient shrinks as 1/B; default --batch-size 2048).
 * What the flushed values cost (issue 37 B): beside each flushed share, the share of the gradient's mass (sum |g|)
 * the flushed values carry (`mass_lost`) and the relative L2 error of the whole rounded gradient (`rel_l2_err`),
 * at the run's S and had S been 1 (telemetry, docs/numerics.md section 2); the lesson says what this network loses
 * by mass and error, not only by count (tools/sentences.h, mpt_text_underflow_cost). And accuracy over seeds: the
 * dynamic and the unscaled run are trained with `seeds` seeds (seed 0 with telemetry, the others without), and the
 * paired difference none - dynamic is reported with its interval and verdict (tools/stats.h).
 * Criterion: the effect is observed when, in a setting, some activation gradient loses at least 1% of its
 * values at S = 1 and the scaler's S saves most of them (flush at S below half the flush at S = 1): a count; the
 * mass, the error and the accuracy verdict are reported beside it, whatever they are. The two halves fail apart
 * and the conclusion says which: no underflow to save, or underflow the scale did not save (`--param init=1`,
 * a dynamic scaler that starts at 1 and cannot grow in a --quick run, shows the latter; tests/test_lab.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/telemetry/telemetry.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"
#include "tools/stats.h"

#define MAX_T 16
#define MAX_SEEDS 8

typedef struct flush_row {
    char tensor[80];
    double at_s, at_1;   /* mean flush_frac at the run's S and the counterfactual at S = 1 */
    double sub_s, sub_1; /* the same for made_subnormal_frac: kept, but with fewer significant bits */
    double mass_s, mass_1; /* mass_lost: the flushed values' share of sum |g| */
    double rel_s, rel_1;   /* rel_l2_err: the relative L2 error of the rounded gradient */
} flush_row;

typedef struct run_out {
    double acc, final_scale;
    int log2_scale;      /* log2 of the run's mean loss scale over the telemetry steps, rounded */
    int skipped;
    int tel_steps;       /* telemetry steps measured (the count of amp,loss_scale rows) */
    flush_row rows[MAX_T];
    int n;
    flush_row all;       /* all_activation_grads pooled */
} run_out;

/* One tensor's rounding rows, means over the telemetry steps. */
static void fill_row(const mpt_run_result *r, const char *tensor, flush_row *row) {
    snprintf(row->tensor, sizeof row->tensor, "%s", tensor);
    row->at_s = mpt_run_stat_mean(r, tensor, "flush_frac");
    row->at_1 = mpt_run_stat_mean(r, tensor, "flush_frac@S=1");
    row->sub_s = mpt_run_stat_mean(r, tensor, "made_subnormal_frac");
    row->sub_1 = mpt_run_stat_mean(r, tensor, "made_subnormal_frac@S=1");
    row->mass_s = mpt_run_stat_mean(r, tensor, "mass_lost");
    row->mass_1 = mpt_run_stat_mean(r, tensor, "mass_lost@S=1");
    row->rel_s = mpt_run_stat_mean(r, tensor, "rel_l2_err");
    row->rel_1 = mpt_run_stat_mean(r, tensor, "rel_l2_err@S=1");
}

/* The flush fractions of one finished run (r: from mpt_lab_train or a batch; s: its status). */
static mpt_status read_run(mpt_run_result *r0, mpt_status s, run_out *o) {
    mpt_run_result r = *r0;
    memset(r0, 0, sizeof *r0);
    memset(o, 0, sizeof *o);
    o->acc = 100.0 * r.final_test_acc;
    o->final_scale = r.final_scale;
    o->skipped = r.steps_skipped;
    double mean_scale = mpt_run_stat_mean(&r, "amp", "loss_scale");
    o->log2_scale = isfinite(mean_scale) && mean_scale > 0 ? (int)lround(log2(mean_scale)) : 0;
    for (int i = 0; i < r.n_telemetry; i++)
        if (strcmp(r.telemetry[i].tensor, "amp") == 0 && strcmp(r.telemetry[i].metric, "loss_scale") == 0)
            o->tel_steps = r.telemetry[i].count;
    for (int i = 0; s == MPT_OK && i < r.n_telemetry && o->n < MAX_T; i++) {
        const mpt_telemetry_stat *t = &r.telemetry[i];
        size_t len = strlen(t->tensor);
        if (strcmp(t->metric, "flush_frac") != 0 || len < 9 || strcmp(t->tensor + len - 9, ".out.grad") != 0) continue;
        fill_row(&r, t->tensor, &o->rows[o->n++]);
    }
    fill_row(&r, MPT_TELEMETRY_ALL_ACT_GRAD, &o->all);
    mpt_run_result_free(&r);
    return s;
}

static mpt_status train(mpt_lab_ctx *c, const char *name, const char *const *flags, run_out *o) {
    mpt_run_result r;
    mpt_status s = mpt_lab_train(c, name, flags, &r);
    return read_run(&r, s, o);
}

/* The largest counterfactual loss at S = 1 and whether the scale saved most of it. */
static int effect(const run_out *o, double *worst_1, double *worst_s, const char **where) {
    *worst_1 = 0.0;
    *worst_s = 0.0;
    *where = "-";
    for (int i = 0; i < o->n; i++)
        if (isfinite(o->rows[i].at_1) && o->rows[i].at_1 >= *worst_1) {
            *worst_1 = o->rows[i].at_1;
            *worst_s = o->rows[i].at_s;
            *where = o->rows[i].tensor;
        }
    return *worst_1 >= 0.01 && *worst_s < 0.5 * *worst_1;
}

/* "; at S = 1 x% of `t` would become subnormal (...)" for the tensor of o with the largest such share, or "". */
static void subnormal_text(char *b, size_t n, const run_out *o) {
    const flush_row *r = NULL;
    for (int i = 0; i < o->n; i++)
        if (isfinite(o->rows[i].sub_1) && isfinite(o->rows[i].sub_s) && (!r || o->rows[i].sub_1 > r->sub_1))
            r = &o->rows[i];
    if (!r) {
        snprintf(b, n, "%s", "");
        return;
    }
    snprintf(b, n, "; and at S = 1, %.2f%% of `%s` would become subnormal (kept, with fewer than FP16's 11 "
             "significant bits), %.4f%% at S", 100.0 * r->sub_1, r->tensor, 100.0 * r->sub_s);
}

static void cell(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, " %.4f%% |", 100.0 * v);
    else fprintf(f, " - |");
}

static void table(FILE *f, const char *title, const run_out *dyn, const run_out *st, const run_out *none, double S) {
    fprintf(f, "### %s\n\nFlushed to zero / made subnormal, mean over the telemetry steps:\n\n"
               "| activation gradient | dynamic run: flushed at its S | made subnormal at S | had S been 1: flushed | "
               "made subnormal | static 2^%.0f run: flushed | no-scaling run: flushed |\n"
               "|---|---:|---:|---:|---:|---:|---:|\n", title, log2(S));
    for (int i = 0; i < dyn->n; i++) {
        double s_st = NAN, s_none = NAN;
        for (int k = 0; st && k < st->n; k++)
            if (strcmp(st->rows[k].tensor, dyn->rows[i].tensor) == 0) s_st = st->rows[k].at_s;
        for (int k = 0; none && k < none->n; k++)
            if (strcmp(none->rows[k].tensor, dyn->rows[i].tensor) == 0) s_none = none->rows[k].at_s;
        const flush_row *r = &dyn->rows[i];
        fprintf(f, "| `%s` |", r->tensor);
        cell(f, r->at_s);
        cell(f, r->sub_s);
        cell(f, r->at_1);
        cell(f, r->sub_1);
        cell(f, s_st);
        cell(f, s_none);
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

/* The accuracy sentence: the paired difference none - dynamic over the seeds, with its interval and verdict, and
 * what that verdict says; the static run (seed 0 only) beside it. */
static void accuracy_text(char *b, size_t n, const run_out *dyn, const run_out *sta, const run_out *none, double S,
                          const mpt_stats_paired *d, const mpt_stats_summary *diff, int ns) {
    char pv[600], rd[300];
    mpt_text_paired(pv, sizeof pv, "final test accuracy, no scaling - dynamic:", d, diff);
    mpt_text_verdict_reading(rd, sizeof rd, "without loss scaling", d);
    snprintf(b, n, "Over %d seeds, %s: %s. Seed 0 (the telemetry runs): dynamic %.2f%% (%d skipped, final S %g), "
             "static 2^%.0f %.2f%% (%d skipped), no scaling %.2f%%.", ns, pv, rd, dyn->acc, dyn->skipped,
             dyn->final_scale, log2(S), sta->acc, sta->skipped, none->acc);
}

/* Micikevicius et al. 2018, Figure 3, from the run's exponents.csv (engine/telemetry: exponents of the FP32
 * activation gradients before rounding, divided by S): the share of one tensor's nonzero values per binade
 * e = floor(log2 |g|), as at S = 1, and the same shifted by log2 S (what the loss scale does to them), drawn over
 * FP16's bands: flushed to zero below 2^-25, subnormal from 2^-25 to 2^-14, normal up to 65504, overflow from
 * 2^16 (binade 15 holds 65504 and, from 65520 up, values that round to inf). */
#define EXP_MAXBINS 400
typedef struct exp_picture {
    char tensor[80];
    int n, log2_scale;
    int e[EXP_MAXBINS];
    double share[EXP_MAXBINS]; /* % of the tensor's nonzero values over the run's telemetry steps */
    double below_normal;       /* % below 2^-14 at S = 1 (flushed or subnormal) */
    double below_normal_s;     /* the same at S */
} exp_picture;

static mpt_status exponent_data(mpt_lab_ctx *c, const char *run, const char *tensor, int log2_scale, exp_picture *ex) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s/exponents.csv", c->dir, run);
    FILE *f = fopen(path, "r");
    if (!f) return mpt_errorf(MPT_ERR_IO, "%s: cannot read", path);
    char line[256];
    double total = 0.0;
    int64_t cnt[EXP_MAXBINS];
    snprintf(ex->tensor, sizeof ex->tensor, "%s", tensor);
    ex->log2_scale = log2_scale;
    while (fgets(line, sizeof line, f) && ex->n < EXP_MAXBINS) { /* tensor,exponent,count */
        char name[128];
        int e;
        long long k;
        if (sscanf(line, "%127[^,],%d,%lld", name, &e, &k) != 3 || strcmp(name, tensor) != 0) continue;
        ex->e[ex->n] = e;
        cnt[ex->n++] = k;
        total += (double)k;
    }
    fclose(f);
    for (int i = 0; i < ex->n; i++) {
        ex->share[i] = total > 0 ? 100.0 * (double)cnt[i] / total : 0.0;
        if (ex->e[i] < -14) ex->below_normal += ex->share[i];
        if (ex->e[i] + log2_scale < -14) ex->below_normal_s += ex->share[i];
    }
    FILE *d = mpt_lab_open(c, "loss-scaling-exponents.dat");
    if (!d) return MPT_ERR_IO;
    /* a binade e holds the values from 2^e to 2^(e+1): its bar is drawn centred on e + 0.5 of the log2 |g| axis */
    fprintf(d, "# %s: exponent share(%%) at S = 1; exponent + log2 S = %d; bar centre at S = 1; bar centre at S\n",
            tensor, log2_scale);
    for (int i = 0; i < ex->n; i++)
        fprintf(d, "%d %.6g %d %.1f %.1f\n", ex->e[i], ex->share[i], ex->e[i] + log2_scale, ex->e[i] + 0.5,
                ex->e[i] + log2_scale + 0.5);
    snprintf(path, sizeof path, "%s/loss-scaling-exponents.dat", c->dir);
    return mpt_outdir_close_written(d, path);
}

/* The x axis is log2 |g|, on which FP16's bands have their edges (-25, -14, 16); a binade e holds the values from
 * 2^e to 2^(e+1), so its bar (width 0.9) is drawn centred on e + 0.5 and lies wholly in its band (centred on e,
 * the first normal binade's bar straddled the subnormal edge). The y range has room above the bars for the key. */
static void exponent_plot(FILE *gp, const exp_picture *ex) {
    int lo = ex->e[0], hi = ex->e[0] + ex->log2_scale;
    for (int i = 0; i < ex->n; i++) {
        if (ex->e[i] < lo) lo = ex->e[i];
        if (ex->e[i] + ex->log2_scale > hi) hi = ex->e[i] + ex->log2_scale;
    }
    lo = lo < -70 ? -70 : lo - 2;
    hi = hi < 18 ? 18 : hi + 2;
    fprintf(gp, "unset xtics\nset xtics 5 nomirror\nset style data boxes\nset style fill transparent solid 0.55 "
                "border -1\nset boxwidth 0.9\nset xrange [%d:%d]\nset yrange [0:*]\nset grid ytics\n"
                "set offsets 0, 0, graph 0.45, 0\nset key at graph 0.01, graph 0.88 left top box opaque\n"
                "set xlabel 'log_2 |g| of the FP32 value (a bar: the binade e = floor(log_2 |g|), from 2^e to 2^{e+1})'\n"
                "set ylabel '%% of nonzero values'\n"
                "set title '%s: exponents of the activation gradients (telemetry steps of the dynamic run), and "
                "FP16 bands'\n"
                "set object 1 rect from %d, graph 0 to -25, graph 1 fc rgb '#f2b8b8' fs solid 0.35 noborder behind\n"
                "set object 2 rect from -25, graph 0 to -14, graph 1 fc rgb '#f7dca0' fs solid 0.45 noborder behind\n"
                "set object 3 rect from -14, graph 0 to 16, graph 1 fc rgb '#c4e6c4' fs solid 0.45 noborder behind\n"
                "set object 4 rect from 16, graph 0 to %d, graph 1 fc rgb '#c8c8c8' fs solid 0.45 noborder behind\n"
                "set label 1 'flushed to 0' at %d, graph 0.95 left\nset label 2 'subnormal' at -24.5, graph 0.95 left\n"
                "set label 3 'FP16 normal' at -13.5, graph 0.95 left\nset label 4 'inf' at 16.5, graph 0.95 left\n"
                "plot 'loss-scaling-exponents.dat' using 4:2 lc rgb '#c0392b' "
                "title 'at S = 1 (%.1f%% below 2^{-14})', "
                "'' using 5:2 lc rgb '#1f5fa8' fs transparent solid 0.35 border -1 "
                "title 'times S = 2^{%d}: shifted %d binades (%.1f%% below 2^{-14})'\n",
            lo, hi, ex->tensor, lo, hi, lo + 1, ex->below_normal, ex->log2_scale, ex->log2_scale, ex->below_normal_s);
}

static mpt_status run(mpt_lab_ctx *c) {
    double S, big_batch;
    MPT_TRY(mpt_lab_param(c, "static", 256.0, &S));
    MPT_TRY(mpt_lab_param(c, "batch", 2048.0, &big_batch));
    double init;
    MPT_TRY(mpt_lab_param(c, "init", 65536.0, &init));
    if (!(S >= 1.0 && S <= 16777216.0)) return mpt_errorf(MPT_ERR_ARG, "--param static: expected [1, 2^24], found %g", S);
    if (!(init >= 1.0 && init <= 16777216.0))
        return mpt_errorf(MPT_ERR_ARG, "--param init: expected [1, 2^24], found %g", init);
    char dyn_flag[64];
    snprintf(dyn_flag, sizeof dyn_flag, "dynamic:%.17g", init);
    if (!(big_batch >= 1.0 && big_batch <= 65536.0 && big_batch == floor(big_batch)))
        return mpt_errorf(MPT_ERR_ARG, "--param batch: expected an integer in [1, 65536], found %g", big_batch);
    const char *batch;
    MPT_TRY(mpt_lab_param_flag(c, "default-batch", "128", MPT_OPT_BATCH_SIZE, &batch));
    char st[64], bb[32];
    snprintf(st, sizeof st, "static:%.17g", S);
    /* at least 4 steps per epoch, so the small-gradient run has telemetry steps (--quick has 2000 images) */
    if (big_batch > (double)(c->cd->d.n_train / 4)) big_batch = (double)(c->cd->d.n_train / 4);
    snprintf(bb, sizeof bb, "%.0f", big_batch);
    run_out dyn, sta, none, big;
    int ns;
    MPT_TRY(mpt_lab_seeds(c, MAX_SEEDS, &ns));
    MPT_LAB_PARAMS_CHECKED(c);
    /* about 30 telemetry steps per run (so that the mean covers the run and not only its first steps): the
     * report counts the steps it measured */
    char every[32];
    snprintf(every, sizeof every, "%lld", (long long)mpt_lab_telemetry_every(mpt_lab_steps(c, atoi(batch)), 30));
    const char *fd[] = {"--precision", "fp16", "--telemetry", every, "--batch-size", batch, "--loss-scale", dyn_flag, NULL};
    const char *fs[] = {"--precision", "fp16", "--telemetry", every, "--batch-size", batch, "--loss-scale", st, NULL};
    const char *fn[] = {"--precision", "fp16", "--telemetry", every, "--batch-size", batch, "--loss-scale", "none", NULL};
    /* seed 0 with telemetry; the other seeds, dynamic and unscaled, for the accuracy's paired verdict: independent
     * runs, one batch */
    mpt_lab_run runs3[3 + 2 * MAX_SEEDS] = {{"dynamic", fd}, {"static", fs}, {"none", fn}};
    static mpt_lab_seed_run sr[2 * MAX_SEEDS];
    int nr = 3;
    for (int k = 1; k < ns; k++)
        for (int m = 0; m < 2; m++, nr++) {
            const char *f[] = {"--precision", "fp16", "--batch-size", batch, "--loss-scale", m ? "none" : dyn_flag, NULL};
            runs3[nr] = mpt_lab_seed_run_make(&sr[nr - 3], m ? "none" : "dynamic", k, f);
        }
    static mpt_run_result res[3 + 2 * MAX_SEEDS];
    MPT_TRY(mpt_lab_train_batch(c, runs3, nr, res));
    double acc_dyn[MAX_SEEDS], acc_none[MAX_SEEDS];
    acc_dyn[0] = 100.0 * res[0].final_test_acc;
    acc_none[0] = 100.0 * res[2].final_test_acc;
    for (int k = 1; k < ns; k++) {
        acc_dyn[k] = 100.0 * res[3 + 2 * (k - 1)].final_test_acc;
        acc_none[k] = 100.0 * res[3 + 2 * (k - 1) + 1].final_test_acc;
    }
    for (int i = 3; i < nr; i++) mpt_run_result_free(&res[i]);
    MPT_TRY(read_run(&res[0], MPT_OK, &dyn));
    MPT_TRY(read_run(&res[1], MPT_OK, &sta));
    MPT_TRY(read_run(&res[2], MPT_OK, &none));
    mpt_lab_paired pd;
    MPT_TRY(mpt_lab_compare_paired(c, acc_none, acc_dyn, ns, &pd));
    double w1, ws, b1 = 0.0, bs = 0.0;
    const char *where, *bwhere = "-";
    int seen_default = effect(&dyn, &w1, &ws, &where), seen_big = 0, ran_big = 0;
    if (!seen_default) {
        const char *fb[] = {"--precision", "fp16", "--telemetry", "1", "--batch-size", bb, "--loss-scale", dyn_flag, NULL};
        MPT_TRY(train(c, "dynamic-big-batch", fb, &big));
        ran_big = 1;
        seen_big = effect(&big, &b1, &bs, &bwhere);
    }
    char sub[300], acc[1200], cost[900] = "";
    subnormal_text(sub, sizeof sub, seen_big ? &big : &dyn);
    accuracy_text(acc, sizeof acc, &dyn, &sta, &none, S, mpt_lab_paired_ci(&pd), &pd.diff, ns);
    /* what the most-flushed gradient loses by mass and error, not only by count */
    const run_out *lost_run = seen_big ? &big : &dyn;
    const char *lost_t = seen_big ? bwhere : where;
    for (int i = 0; i < lost_run->n; i++)
        if (strcmp(lost_run->rows[i].tensor, lost_t) == 0) {
            const flush_row *r = &lost_run->rows[i];
            mpt_text_underflow u = {r->tensor, r->at_1, r->mass_1, r->rel_1, r->at_s, r->mass_s, r->rel_s,
                                    (double)lost_run->log2_scale};
            mpt_text_underflow_cost(cost, sizeof cost, &u);
        }
    c->observed = seen_default || seen_big;
    if (seen_default)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: without loss scaling %.2f%% of `%s` would round to zero in FP16; at the scaler's S "
                 "%.2f%% do%s. %s. %s", 100.0 * w1, where, 100.0 * ws, sub, cost, acc);
    else if (seen_big && w1 >= 0.01) /* the default batch underflowed, but its scale did not save it */
        snprintf(c->conclusion, sizeof c->conclusion,
                 "At the default batch %.2f%% of `%s` would flush to zero at S = 1, but %.2f%% still did at the "
                 "scaler's S (mean 2^%d): the scale did not save most of them there. Observed with --batch-size %.0f: "
                 "%.2f%% of `%s` would flush at S = 1, %.3f%% do at the scaler's S%s. %s. %s",
                 100.0 * w1, where, 100.0 * ws, dyn.log2_scale, big_batch, 100.0 * b1, bwhere, 100.0 * bs, sub, cost,
                 acc);
    else if (seen_big)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Barely at the default batch (at most %.3f%% of an activation gradient, `%s`, would flush to zero at "
                 "S = 1). Observed with --batch-size %.0f, whose per-example gradients are smaller: %.2f%% of `%s` "
                 "would flush at S = 1, %.3f%% do at the scaler's S%s. %s. %s",
                 100.0 * w1, where, big_batch, 100.0 * b1, bwhere, 100.0 * bs, sub, cost, acc);
    else if (w1 >= 0.01 || b1 >= 0.01) /* underflow at S = 1, but the scale did not save most of it: say so */
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: FP16 underflow is there at S = 1, but the scaler's S did not save most of it: at the "
                 "default batch %.2f%% of `%s` would flush at S = 1 and %.2f%% still did at its S (mean 2^%d); with "
                 "--batch-size %.0f, %.2f%% of `%s` at S = 1 and %.2f%% at its S (mean 2^%d). The criterion asks for "
                 "less than half of the S = 1 share at the scaler's S. %s",
                 100.0 * w1, where, 100.0 * ws, dyn.log2_scale, big_batch, 100.0 * b1, bwhere, 100.0 * bs,
                 big.log2_scale, acc);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: no activation gradient lost 1%% of its values to FP16 underflow at S = 1, neither at the "
                 "default batch (at most %.3f%%, `%s`) nor with --batch-size %.0f (at most %.3f%%, `%s`). %s",
                 100.0 * w1, where, big_batch, 100.0 * b1, bwhere, acc);

    const run_out *shown = ran_big ? &big : &dyn;
    FILE *dat = mpt_lab_open(c, "loss-scaling.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# tensor at_S(%%) at_1(%%) subnormal_at_S(%%) subnormal_at_1(%%)\n");
    for (int i = 0; i < shown->n; i++)
        fprintf(dat, "%s %.6e %.6e %.6e %.6e\n", shown->rows[i].tensor, 100.0 * shown->rows[i].at_s,
                100.0 * shown->rows[i].at_1, 100.0 * shown->rows[i].sub_s, 100.0 * shown->rows[i].sub_1);
    char dat_path[MPT_CLI_PATH + 32];
    snprintf(dat_path, sizeof dat_path, "%s/loss-scaling.dat", c->dir);
    MPT_TRY(mpt_outdir_close_written(dat, dat_path));
    /* the exponent picture: the tensor of the shown run that loses most at S = 1 (flushed or made subnormal) */
    const flush_row *pick = NULL;
    for (int i = 0; i < shown->n; i++)
        if (isfinite(shown->rows[i].at_1) && isfinite(shown->rows[i].sub_1) &&
            (!pick || shown->rows[i].at_1 + shown->rows[i].sub_1 > pick->at_1 + pick->sub_1))
            pick = &shown->rows[i];
    exp_picture ex;
    memset(&ex, 0, sizeof ex);
    if (pick) MPT_TRY(exponent_data(c, ran_big ? "dynamic-big-batch" : "dynamic", pick->tensor, shown->log2_scale, &ex));
    FILE *gp = mpt_lab_open(c, "loss-scaling.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, ex.n > 0 ? 980 : 520, "loss-scaling.png");
    if (ex.n > 0) fprintf(gp, "set multiplot layout 2,1\n");
    fprintf(gp, "set title 'FP16 activation gradients rounded to zero (mean over telemetry steps)%s'\n"
                "set ylabel 'flushed to zero (%%)'\nset grid ytics\nset style data histograms\n"
                "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\nset key top left\n"
                "set xtics rotate by -20\nset yrange [0:*]\n"
                "plot 'loss-scaling.dat' using 3:xtic(1) title 'had S been 1 (no scaling)' lt 1, "
                "'' using 2 title 'at the dynamic scale S' lt 2\n",
            ran_big ? ", --batch-size large" : "");
    if (ex.n > 0) {
        exponent_plot(gp, &ex);
        fprintf(gp, "unset multiplot\n");
    }
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "loss-scaling.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_loss_scaling, &f));
    fprintf(f, "FP16's smallest subnormal is 2^-24 (6.0e-8): an activation gradient below half of it rounds to zero "
               "and its information is gone. Multiplying the loss by S multiplies every gradient by S, lifting them "
               "into FP16's range; they are divided by S again in FP32 before the optimizer step. Telemetry reads "
               "the activation gradients of %s (%d telemetry steps in the dynamic run: the rows of its "
               "`dynamic/telemetry.csv`) and counts what rounds to zero "
               "at the run's S and, counterfactually and exactly, what would at S = 1 (docs/numerics.md). Flushing "
               "is not the only loss: a value below FP16's smallest normal 2^-14 (6.1e-5) that does not flush "
               "becomes subnormal and keeps fewer than 11 significant bits (a relative error up to 2^-25 / |v|), "
               "which the scale also avoids.\n\n", mpt_lab_every_text((char[40]){0}, 40, every), dyn.tel_steps);
    table(f, "Default setting", &dyn, &sta, &none, S);
    if (ran_big) table(f, "Larger batch: gradients of a mean loss shrink as 1/B", &big, NULL, NULL, S);
    if (ex.n > 0)
        fprintf(f, "The picture's lower panel is Micikevicius et al. 2018's Figure 3 for this network: the binary "
                   "exponents of `%s`, the activation gradient that loses most at S = 1, as FP32 values before rounding "
                   "(from `%s/exponents.csv`, all telemetry steps), over FP16's bands. At S = 1, %.1f%% of its nonzero "
                   "values lie below FP16's smallest normal 2^-14; multiplied by the loss scale S = 2^%d, every value "
                   "moves %d binades up, and %.1f%% do.\n\n",
                ex.tensor, ran_big ? "dynamic-big-batch" : "dynamic", ex.below_normal, ex.log2_scale, ex.log2_scale,
                ex.below_normal_s);
    /* what the flushed values carried: mass and error beside the count */
    const run_out *mr = ran_big ? &big : &dyn;
    fprintf(f, "### What the flushed values carry\n\nA count says how many values vanish, not how much of the "
               "gradient: beside each share flushed, the flushed values' share of the gradient's mass (sum |g|; "
               "`mass_lost`) and the relative L2 error of the whole rounded gradient against its FP32 values "
               "(`rel_l2_err`), at the %s run's S and had S been 1 (means over its telemetry steps; `%s/telemetry.csv`, "
               "and `summary.json` for the means):\n\n"
               "| activation gradient | flushed at S = 1 | mass lost at S = 1 | rel. L2 error at S = 1 | flushed at S | "
               "mass lost at S | rel. L2 error at S |\n|---|---:|---:|---:|---:|---:|---:|\n",
            ran_big ? "large-batch" : "dynamic", ran_big ? "dynamic-big-batch" : "dynamic");
    const flush_row *mrows[MAX_T + 1];
    int nm = 0;
    for (int i = 0; i < mr->n; i++) mrows[nm++] = &mr->rows[i];
    mrows[nm++] = &mr->all;
    for (int i = 0; i < nm; i++)
        fprintf(f, "| `%s` | %.4f%% | %.3g | %.3g | %.4f%% | %.3g | %.3g |\n", mrows[i]->tensor, 100.0 * mrows[i]->at_1,
                mrows[i]->mass_1, mrows[i]->rel_1, 100.0 * mrows[i]->at_s, mrows[i]->mass_s, mrows[i]->rel_s);
    char pooled[900];
    mpt_text_underflow pu = {mr->all.tensor, mr->all.at_1, mr->all.mass_1, mr->all.rel_1, mr->all.at_s,
                             mr->all.mass_s, mr->all.rel_s, (double)mr->log2_scale};
    mpt_text_underflow_cost(pooled, sizeof pooled, &pu);
    if (*cost) fprintf(f, "\n%s.\n", cost);
    fprintf(f, "\n%s.\n\n", pooled);
    fprintf(f, "### Accuracy\n\nThe dynamic and the unscaled runs with %d seeds (seed 0: the telemetry runs above; the "
               "others `dynamic-seed<k>/`, `none-seed<k>/`), a paired design:\n\n", ns);
    const char *arm_names[2] = {"dynamic", "no scaling"};
    const double *arm_acc[2] = {acc_dyn, acc_none};
    mpt_lab_seed_table(f, ns, 2, arm_names, arm_acc);
    fprintf(f, "\n%s\n\nCriterion for the effect: some activation gradient loses at least 1%% "
               "of its values at S = 1, and at the scaler's S less than half of that (a count: the mass, the error "
               "and the accuracy above say what the count costs).\n", acc);
    return mpt_lab_report_close(c, &mpt_lab_loss_scaling, f, plot_error);
}

const mpt_lab_lesson mpt_lab_loss_scaling = {
    "loss-scaling",
    "How many small FP16 activation gradients round to zero without a loss scale, how many does the scale S keep, "
    "and what do they carry: their share of the gradient's mass, the rounded gradient's error, accuracy over seeds?",
    "static=S (default 256), init=S, the dynamic scaler's initial scale (default 65536), batch=B for the "
    "small-gradient setting (default 2048, at most a quarter of the training images), default-batch=B (default 128), "
    "seeds=N (2..8; default: the lesson's size)",
    run,
    {20000, 10000, 2, 3}, /* full */
    {6000, 1000, 1, 3}, /* --quick: 47 steps; the effect grows as training proceeds (16 steps barely show it) */
    "static init batch default-batch seeds",
    "--quick 7 s, full 19 s of CPU time (2-core VM, 2026-11-28)",
};
