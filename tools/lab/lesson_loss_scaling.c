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
 * Criterion: the effect is observed when, in a setting, some activation gradient loses at least 1% of its
 * values at S = 1 and the scaler's S saves most of them (flush at S below half the flush at S = 1).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lab/lab.h"

#define MAX_T 16

typedef struct flush_row {
    char tensor[80];
    double at_s, at_1; /* mean flush_frac at the run's S and the counterfactual at S = 1 */
} flush_row;

typedef struct run_out {
    double acc, final_scale;
    int skipped;
    flush_row rows[MAX_T];
    int n;
} run_out;

static double stat_mean(const mpt_cli_result *r, const char *tensor, const char *metric) {
    for (int i = 0; i < r->n_telemetry; i++)
        if (strcmp(r->telemetry[i].tensor, tensor) == 0 && strcmp(r->telemetry[i].metric, metric) == 0)
            return r->telemetry[i].count > 0 ? r->telemetry[i].sum / (double)r->telemetry[i].count : NAN;
    return NAN;
}

/* The flush fractions of one finished run (r: from mpt_lab_train or a batch; s: its status). */
static mpt_status read_run(mpt_cli_result *r0, mpt_status s, run_out *o) {
    mpt_cli_result r = *r0;
    memset(r0, 0, sizeof *r0);
    memset(o, 0, sizeof *o);
    o->acc = 100.0 * r.final_test_acc;
    o->final_scale = r.final_scale;
    o->skipped = r.steps_skipped;
    for (int i = 0; s == MPT_OK && i < r.n_telemetry && o->n < MAX_T; i++) {
        const mpt_telemetry_stat *t = &r.telemetry[i];
        size_t len = strlen(t->tensor);
        if (strcmp(t->metric, "flush_frac") != 0 || len < 9 || strcmp(t->tensor + len - 9, ".out.grad") != 0) continue;
        flush_row *row = &o->rows[o->n++];
        snprintf(row->tensor, sizeof row->tensor, "%s", t->tensor);
        row->at_s = stat_mean(&r, t->tensor, "flush_frac");
        row->at_1 = stat_mean(&r, t->tensor, "flush_frac@S=1");
    }
    mpt_cli_result_free(&r);
    return s;
}

static mpt_status train(mpt_lab_ctx *c, const char *name, const char *const *flags, run_out *o) {
    mpt_cli_result r;
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

static void table(FILE *f, const char *title, const run_out *dyn, const run_out *st, const run_out *none, double S) {
    fprintf(f, "### %s\n\n| activation gradient | dynamic run: at its S | dynamic run: had S been 1 | static 2^%.0f run | "
               "no-scaling run |\n|---|---:|---:|---:|---:|\n", title, log2(S));
    for (int i = 0; i < dyn->n; i++) {
        double s_st = NAN, s_none = NAN;
        for (int k = 0; st && k < st->n; k++)
            if (strcmp(st->rows[k].tensor, dyn->rows[i].tensor) == 0) s_st = st->rows[k].at_s;
        for (int k = 0; none && k < none->n; k++)
            if (strcmp(none->rows[k].tensor, dyn->rows[i].tensor) == 0) s_none = none->rows[k].at_s;
        fprintf(f, "| `%s` | %.4f%% | %.4f%% |", dyn->rows[i].tensor, 100.0 * dyn->rows[i].at_s, 100.0 * dyn->rows[i].at_1);
        if (isfinite(s_st)) fprintf(f, " %.4f%% |", 100.0 * s_st);
        else fprintf(f, " - |");
        if (isfinite(s_none)) fprintf(f, " %.4f%% |\n", 100.0 * s_none);
        else fprintf(f, " - |\n");
    }
    fprintf(f, "\n");
}

static mpt_status run(mpt_lab_ctx *c) {
    double S, big_batch;
    MPT_TRY(mpt_lab_param(c, "static", 256.0, &S));
    MPT_TRY(mpt_lab_param(c, "batch", 2048.0, &big_batch));
    if (!(S >= 1.0 && S <= 16777216.0)) return mpt_errorf(MPT_ERR_ARG, "--param static: expected [1, 2^24], found %g", S);
    if (!(big_batch >= 1.0 && big_batch <= 65536.0 && big_batch == floor(big_batch)))
        return mpt_errorf(MPT_ERR_ARG, "--param batch: expected an integer in [1, 65536], found %g", big_batch);
    const char *batch = mpt_lab_param_text(c, "default-batch", "128");
    char st[64], bb[32];
    snprintf(st, sizeof st, "static:%.17g", S);
    /* at least 4 steps per epoch, so the small-gradient run has telemetry steps (--quick has 2000 images) */
    if (big_batch > (double)(c->cd->d.n_train / 4)) big_batch = (double)(c->cd->d.n_train / 4);
    snprintf(bb, sizeof bb, "%.0f", big_batch);
    run_out dyn, sta, none, big;
    const char *fd[] = {"--precision", "fp16", "--telemetry", "10", "--batch-size", batch, NULL};
    const char *fs[] = {"--precision", "fp16", "--telemetry", "10", "--batch-size", batch, "--loss-scale", st, NULL};
    const char *fn[] = {"--precision", "fp16", "--telemetry", "10", "--batch-size", batch, "--loss-scale", "none", NULL};
    const mpt_lab_run three[] = {{"dynamic", fd}, {"static", fs}, {"none", fn}}; /* independent: one batch */
    static mpt_cli_result res[3];
    MPT_TRY(mpt_lab_train_batch(c, three, 3, res));
    MPT_TRY(read_run(&res[0], MPT_OK, &dyn));
    MPT_TRY(read_run(&res[1], MPT_OK, &sta));
    MPT_TRY(read_run(&res[2], MPT_OK, &none));
    double w1, ws, b1 = 0.0, bs = 0.0;
    const char *where, *bwhere = "-";
    int seen_default = effect(&dyn, &w1, &ws, &where), seen_big = 0, ran_big = 0;
    if (!seen_default) {
        const char *fb[] = {"--precision", "fp16", "--telemetry", "1", "--batch-size", bb, NULL};
        MPT_TRY(train(c, "dynamic-big-batch", fb, &big));
        ran_big = 1;
        seen_big = effect(&big, &b1, &bs, &bwhere);
    }
    c->observed = seen_default || seen_big;
    char runs[600];
    snprintf(runs, sizeof runs, "accuracy: dynamic %.2f%% (%d skipped, final S %g), static 2^%.0f %.2f%% (%d skipped), "
             "none %.2f%%", dyn.acc, dyn.skipped, dyn.final_scale, log2(S), sta.acc, sta.skipped, none.acc);
    if (seen_default)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: without loss scaling %.2f%% of `%s` would round to zero in FP16; at the scaler's S "
                 "%.2f%% do; %s.", 100.0 * w1, where, 100.0 * ws, runs);
    else if (seen_big)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Barely at the default batch (at most %.3f%% of an activation gradient, `%s`, would flush to zero at "
                 "S = 1; %s). Observed with --batch-size %.0f, whose per-example gradients are smaller: %.2f%% of `%s` "
                 "would flush at S = 1, %.3f%% do at the scaler's S.",
                 100.0 * w1, where, runs, big_batch, 100.0 * b1, bwhere, 100.0 * bs);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: no activation gradient lost 1%% of its values to FP16 underflow at S = 1, neither at the "
                 "default batch (at most %.3f%%, `%s`) nor with --batch-size %.0f (at most %.3f%%, `%s`); %s.",
                 100.0 * w1, where, big_batch, 100.0 * b1, bwhere, runs);

    const run_out *shown = ran_big ? &big : &dyn;
    FILE *dat = mpt_lab_open(c, "loss-scaling.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# tensor at_S(%%) at_1(%%)\n");
    for (int i = 0; i < shown->n; i++)
        fprintf(dat, "%s %.6e %.6e\n", shown->rows[i].tensor, 100.0 * shown->rows[i].at_s, 100.0 * shown->rows[i].at_1);
    fclose(dat);
    FILE *gp = mpt_lab_open(c, "loss-scaling.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_cli_gnuplot_terminal(gp, 1000, 520, "loss-scaling.png");
    fprintf(gp, "set title 'FP16 activation gradients rounded to zero (mean over telemetry steps)%s'\n"
                "set ylabel 'flushed to zero (%%)'\nset grid ytics\nset style data histograms\n"
                "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\nset key top left\n"
                "set xtics rotate by -20\nset yrange [0:*]\n"
                "plot 'loss-scaling.dat' using 3:xtic(1) title 'had S been 1 (no scaling)' lt 1, "
                "'' using 2 title 'at the dynamic scale S' lt 2\n",
            ran_big ? ", --batch-size large" : "");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "loss-scaling.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_loss_scaling, &f));
    fprintf(f, "FP16's smallest subnormal is 2^-24 (6.0e-8): an activation gradient below half of it rounds to zero "
               "and its information is gone. Multiplying the loss by S multiplies every gradient by S, lifting them "
               "into FP16's range; they are divided by S again in FP32 before the optimizer step. Telemetry reads "
               "every activation gradient of every 10th step and counts what rounds to zero at the run's S and, "
               "counterfactually and exactly, what would at S = 1 (docs/numerics.md).\n\n");
    table(f, "Default setting", &dyn, &sta, &none, S);
    if (ran_big) table(f, "Larger batch: gradients of a mean loss shrink as 1/B", &big, NULL, NULL, S);
    fprintf(f, "Runs: %s.\n\nCriterion for the effect: some activation gradient loses at least 1%% of its values at "
               "S = 1, and at the scaler's S less than half of that.\n", runs);
    return mpt_lab_report_close(c, &mpt_lab_loss_scaling, f, plot_error);
}

const mpt_lab_lesson mpt_lab_loss_scaling = {
    "loss-scaling",
    "Without a loss scale, small FP16 activation gradients round to zero; the scale S keeps them.",
    "static=S (default 256), batch=B for the small-gradient setting (default 2048, at most a quarter of the training images), default-batch=B (default 128)",
    run,
};
