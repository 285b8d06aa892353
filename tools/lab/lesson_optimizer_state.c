/*
 * tools/lab/lesson_optimizer_state.c - lesson `optimizer-state`: Adam's moments in FP32, BF16 and FP16.
 *
 * Plan (bf16 training with FP32 master weights, Adam, seed 0): the same run with the moments m and v stored in
 * FP32 (the default), BF16 and FP16 (--optimizer-state). Read the final test accuracy and the last epoch's
 * training loss of each. Adam's second moment v is a running mean of g^2: gradients of 1e-4 give v near 1e-8,
 * below FP16's smallest normal (6.1e-5) and near its smallest subnormal (6.0e-8), while BF16 has FP32's range.
 * Criterion: the effect (FP16 moments hurt, BF16 moments do not) is observed when the FP16-state run ends at
 * least 1 point of test accuracy below the FP32-state run and the BF16-state run within 1 point of it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lab/lab.h"

#define N_STATES 3
static const char *const states[N_STATES] = {"fp32", "bf16", "fp16"};

static mpt_status run(mpt_lab_ctx *c) {
    const char *prec = mpt_lab_param_text(c, "precision", "bf16");
    double acc[N_STATES], loss[N_STATES];
    char name[N_STATES][48];
    const char *fl[N_STATES][7];
    mpt_lab_run runs[N_STATES];
    static mpt_cli_result res[N_STATES];
    for (int i = 0; i < N_STATES; i++) { /* independent runs: one batch */
        snprintf(name[i], sizeof name[i], "state-%s", states[i]);
        const char *f[] = {"--precision", prec, "--optimizer", "adam", "--optimizer-state", states[i], NULL};
        memcpy(fl[i], f, sizeof f);
        runs[i] = (mpt_lab_run){name[i], fl[i]};
    }
    MPT_TRY(mpt_lab_train_batch(c, runs, N_STATES, res));
    for (int i = 0; i < N_STATES; i++) {
        acc[i] = 100.0 * res[i].final_test_acc;
        loss[i] = res[i].final_train_loss;
        mpt_cli_result_free(&res[i]);
    }
    double d_bf = acc[1] - acc[0], d_fp = acc[2] - acc[0];
    c->observed = d_fp <= -1.0 && fabs(d_bf) < 1.0;
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: Adam with FP16 moments ended at %.2f%% test accuracy, %.2f points below FP32 moments "
                 "(%.2f%%), while BF16 moments, with FP32's range, stayed within a point (%.2f%%, %+.2f); train loss "
                 "%.4f / %.4f / %.4f (FP32 / BF16 / FP16 moments).",
                 acc[2], -d_fp, acc[0], acc[1], d_bf, loss[0], loss[1], loss[2]);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: test accuracy with FP32 / BF16 / FP16 moments %.2f%% / %.2f%% / %.2f%% (BF16 %+.2f, "
                 "FP16 %+.2f points against FP32; the criterion asks for FP16 at least 1 point below and BF16 within "
                 "1); train loss %.4f / %.4f / %.4f.",
                 acc[0], acc[1], acc[2], d_bf, d_fp, loss[0], loss[1], loss[2]);

    FILE *gp = mpt_lab_open(c, "optimizer-state.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_cli_gnuplot_terminal(gp, 1000, 500, "optimizer-state.png");
    fprintf(gp, "set datafile separator ','\nset datafile missing 'nan'\n"
                "set title 'Adam moments stored in FP32, BF16, FP16 (%s training, FP32 masters): training loss'\n"
                "set xlabel 'step'\nset ylabel 'cross-entropy'\nset grid\nset key top right\nplot ", prec);
    for (int i = 0; i < N_STATES; i++)
        fprintf(gp, "%s'state-%s/metrics.csv' using 'step':'loss' with lines lw 1.5 lt %d title '%s moments (%.2f%%)'",
                i ? ", \\\n     " : "", states[i], i + 1, states[i], acc[i]);
    fprintf(gp, "\n");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "optimizer-state.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_optimizer_state, &f));
    fprintf(f, "Adam keeps two moments per weight: m, a running mean of the gradient, and v, of its square. Stored "
               "in 16 bits they halve or quarter the optimizer's memory. v is the fragile one: squares of small "
               "gradients fall below FP16's range (smallest subnormal 6.0e-8) and round to zero, and a zero v makes "
               "the step m / (sqrt(v) + eps) large. BF16 keeps FP32's exponent range with 8 significant bits.\n\n"
               "| moments | final test acc | last epoch's train loss |\n|---|---:|---:|\n");
    for (int i = 0; i < N_STATES; i++) fprintf(f, "| %s | %.2f%% | %.4f |\n", states[i], acc[i], loss[i]);
    fprintf(f, "\nCriterion for the effect: FP16 moments at least 1 point below FP32 moments, BF16 within 1 point.\n");
    return mpt_lab_report_close(c, &mpt_lab_optimizer_state, f, plot_error);
}

const mpt_lab_lesson mpt_lab_optimizer_state = {
    "optimizer-state",
    "Adam's moments survive BF16 storage (FP32's range) but not FP16's, where small squared gradients vanish.",
    "precision=P, the training precision (default bf16)",
    run,
};
