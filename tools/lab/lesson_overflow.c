/*
 * tools/lab/lesson_overflow.c - lesson `overflow`: FP16's largest value, 65504, in action.
 *
 * Plan (all fp16, seed 0, the loss scale read every step): a static loss scale S that is too large (default
 * 2^24: the scaled gradients of the first steps pass 65504 and become inf); then the dynamic scaler presets
 * (PyTorch GradScaler, Apex, DeepSpeed with hysteresis 2, Keras LossScaleOptimizer; tools/opts.c) started at
 * the same S, with the same seed and data order: their scale trajectories in one plot, their skipped steps
 * and their accuracy. Criterion: the effect is observed when the static run skipped steps (found_inf) and
 * every dynamic run ended below S (it backed off).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lab/lab.h"

#define N_PRESETS 4
static const char *const presets[N_PRESETS] = {"pytorch", "apex", "deepspeed", "keras"};

typedef struct run_out {
    char name[32];
    double acc, final_scale;
    int skipped;
    int64_t steps;
} run_out;

/* The numbers of a finished run (frees it). */
static void read_run(mpt_cli_result *r, const char *name, run_out *o) {
    snprintf(o->name, sizeof o->name, "%s", name);
    o->acc = 100.0 * r->final_test_acc;
    o->final_scale = r->final_scale;
    o->skipped = r->steps_skipped;
    o->steps = r->iterations;
    mpt_cli_result_free(r);
}

static mpt_status run(mpt_lab_ctx *c) {
    double S;
    MPT_TRY(mpt_lab_param(c, "scale", 16777216.0, &S));
    if (!(S >= 1.0 && S <= 16777216.0))
        return mpt_errorf(MPT_ERR_ARG, "--param scale: expected a number in [1, 2^24], found %g", S);
    char st[64], dy[64];
    snprintf(st, sizeof st, "static:%.17g", S);
    snprintf(dy, sizeof dy, "dynamic:%.17g", S);
    run_out ro[1 + N_PRESETS];
    const char *fs[] = {"--precision", "fp16", "--loss-scale", st, "--log-every", "1", NULL};
    const char *fd[N_PRESETS][9];
    mpt_lab_run runs[1 + N_PRESETS] = {{"static", fs}};
    static mpt_cli_result res[1 + N_PRESETS];
    for (int i = 0; i < N_PRESETS; i++) { /* the static run and the presets are independent: one batch */
        const char *f[] = {"--precision", "fp16", "--loss-scale", dy, "--scaler", presets[i], "--log-every", "1", NULL};
        memcpy(fd[i], f, sizeof f);
        runs[1 + i] = (mpt_lab_run){presets[i], fd[i]};
    }
    MPT_TRY(mpt_lab_train_batch(c, runs, 1 + N_PRESETS, res));
    for (int i = 0; i <= N_PRESETS; i++) read_run(&res[i], runs[i].name, &ro[i]);
    int backed_off = 1;
    for (int i = 1; i <= N_PRESETS; i++) backed_off &= ro[i].final_scale < S;
    c->observed = ro[0].skipped > 0 && backed_off;

    char dyn[1024] = "";
    size_t k = 0;
    for (int i = 1; i <= N_PRESETS && k < sizeof dyn; i++)
        k += (size_t)snprintf(dyn + k, sizeof dyn - k, "%s%s %d skipped, scale 2^%.0f at the end, %.2f%%",
                              i > 1 ? "; " : "", ro[i].name, ro[i].skipped, log2(ro[i].final_scale), ro[i].acc);
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: with a static loss scale of 2^%.0f the scaled FP16 gradients passed 65504 and became inf in "
                 "%d of %lld steps, every one skipped (test accuracy %.2f%%); the dynamic scalers started at the same "
                 "scale backed off until gradients fit (%s).",
                 log2(S), ro[0].skipped, (long long)ro[0].steps, ro[0].acc, dyn);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: with a loss scale of 2^%g the static run skipped %d of %lld steps (test accuracy "
                 "%.2f%%)%s; the dynamic scalers: %s.",
                 log2(S), ro[0].skipped, (long long)ro[0].steps, ro[0].acc,
                 ro[0].skipped == 0 ? ": the scaled gradients stayed below 65504" : ", but not every dynamic scaler backed off",
                 dyn);

    FILE *gp = mpt_lab_open(c, "overflow.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_cli_gnuplot_terminal(gp, 1000, 550, "overflow.png");
    fprintf(gp, "set datafile separator ','\nset title 'fp16 loss scale per step, started at 2^{%.0f} (same seed and data)'\n"
                "set xlabel 'step'\nset ylabel 'loss scale'\nset logscale y 2\nset format y '2^{%%L}'\nset grid\n"
                "set key top right\nset offsets 0, 0, graph 0.05, graph 0.05\nplot ",
            log2(S));
    for (int i = 0; i <= N_PRESETS; i++)
        fprintf(gp, "%s'%s/metrics.csv' using 'step':'loss_scale' with steps lw 1.6 lt %d title '%s (%d skipped)'",
                i ? ", \\\n     " : "", ro[i].name, i + 1, i ? ro[i].name : "static", ro[i].skipped);
    fprintf(gp, "\n");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "overflow.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_overflow, &f));
    fprintf(f, "FP16's largest finite value is 65504 (`mptrain formats 65504 65520`). Backward multiplies the loss by "
               "the loss scale S, so every gradient is S times larger; when one of them passes 65504 it becomes inf, "
               "the unscale pass sets found_inf, and the optimizer step is skipped. A static S never changes: it "
               "overflows again on the next step. A dynamic scaler multiplies S by its backoff factor at each "
               "overflow and grows it again after a number of clean steps (its growth interval).\n\n"
               "| run | loss scale | steps | skipped steps | final scale | final test acc |\n|---|---|---:|---:|---:|---:|\n");
    for (int i = 0; i <= N_PRESETS; i++)
        fprintf(f, "| %s | %s from 2^%.0f | %lld | %d | %g | %.2f%% |\n", ro[i].name,
                i ? "dynamic, preset's backoff/growth/hysteresis," : "static", log2(S), (long long)ro[i].steps,
                ro[i].skipped, ro[i].final_scale, ro[i].acc);
    fprintf(f, "\nThe presets are the documented defaults of each system (`mptrain train --help`, `--scaler`): they "
               "differ in backoff factor, growth interval and (DeepSpeed) hysteresis, the number of overflows "
               "tolerated before backing off. Every run has the same seed, so the same initial weights and batches. "
               "Criterion for the effect: the static run skipped steps and every dynamic run ended below its "
               "starting scale.\n");
    return mpt_lab_report_close(c, &mpt_lab_overflow, f, plot_error);
}

const mpt_lab_lesson mpt_lab_overflow = {
    "overflow",
    "A loss scale that is too large makes FP16 gradients overflow (65504); a static scale keeps skipping steps, "
    "dynamic scalers back off.",
    "scale=S, the starting loss scale in [1, 2^24] (default 16777216 = 2^24)",
    run,
};
