/*
 * tools/lab/lesson_master_weights.c - lesson `master-weights`: why the optimizer updates FP32 master weights.
 *
 * Plan (seed 0, telemetry every 10 steps, engine/telemetry's lost-update meter): bf16 and fp16 with SGD at a
 * small learning rate (default 0.01, no momentum), and bf16 with Adam, each three ways: FP32 master weights
 * (the default), no masters (--master-weights none: the update is added to the 16-bit weights with
 * round-to-nearest), and no masters with stochastic rounding (--update-rounding stochastic). Read for each run
 * the share of updates lost (`lost_frac` of all parameters: the weight did not change although its update
 * was nonzero; for runs with masters also `lost_frac_if_16bit`, had the update gone to the 16-bit copy),
 * its mean over the run and its course over steps, and the final test accuracy.
 * Criterion: the effect is observed when, in bf16 with SGD, the run without masters loses at least 10% of its
 * updates and ends at least 1 point of test accuracy below the run with masters.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/telemetry/telemetry.h"
#include "tools/lab/lab.h"

#define N_CASES 3
#define N_MODES 3
static const char *const modes[N_MODES] = {"masters", "none", "none-stochastic"};

typedef struct run_out {
    char name[48];
    double acc, lost, lost_if16; /* lost fractions: means over telemetry steps (NAN when not measured) */
} run_out;

static double stat_mean(const mpt_cli_result *r, const char *tensor, const char *metric) {
    for (int i = 0; i < r->n_telemetry; i++)
        if (strcmp(r->telemetry[i].tensor, tensor) == 0 && strcmp(r->telemetry[i].metric, metric) == 0)
            return r->telemetry[i].count > 0 ? r->telemetry[i].sum / (double)r->telemetry[i].count : NAN;
    return NAN;
}

/* The accuracy and the lost-update fractions of a finished run (frees it). */
static void read_run(mpt_cli_result *r, run_out *o) {
    o->acc = 100.0 * r->final_test_acc;
    o->lost = stat_mean(r, MPT_TELEMETRY_ALL_PARAMS, "lost_frac");
    o->lost_if16 = stat_mean(r, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit");
    mpt_cli_result_free(r);
}

static mpt_status run(mpt_lab_ctx *c) {
    const char *lr_sgd = mpt_lab_param_text(c, "sgd-lr", "0.01");
    const char *cases[N_CASES][3] = {{"bf16", "sgd", lr_sgd}, {"fp16", "sgd", lr_sgd}, {"bf16", "adam", "0.001"}};
    run_out ro[N_CASES][N_MODES];
    /* the nine runs are independent: one batch (shared by the ranks under mpirun) */
    const char *fl[N_CASES * N_MODES][14];
    mpt_lab_run runs[N_CASES * N_MODES];
    static mpt_cli_result res[N_CASES * N_MODES];
    for (int k = 0; k < N_CASES; k++)
        for (int m = 0; m < N_MODES; m++) {
            run_out *o = &ro[k][m];
            snprintf(o->name, sizeof o->name, "%s-%s-%s", cases[k][0], cases[k][1], modes[m]);
            const char *mw = m == 0 ? "fp32" : "none", *ur = m == 2 ? "stochastic" : "nearest";
            const char *f[] = {"--precision", cases[k][0], "--optimizer", cases[k][1], "--lr", cases[k][2],
                               "--master-weights", mw, "--update-rounding", ur, "--telemetry", "10", NULL};
            memcpy(fl[k * N_MODES + m], f, sizeof f);
            runs[k * N_MODES + m] = (mpt_lab_run){o->name, fl[k * N_MODES + m]};
        }
    MPT_TRY(mpt_lab_train_batch(c, runs, N_CASES * N_MODES, res));
    for (int k = 0; k < N_CASES; k++)
        for (int m = 0; m < N_MODES; m++) read_run(&res[k * N_MODES + m], &ro[k][m]);
    const run_out *bm = &ro[0][0], *bn = &ro[0][1], *bs = &ro[0][2];
    c->observed = bn->lost >= 0.10 && bm->acc - bn->acc >= 1.0;
    char others[600];
    snprintf(others, sizeof others, "fp16 with SGD: masters %.2f%%, none %.2f%% (%.1f%% lost), stochastic %.2f%%; bf16 with "
             "Adam: masters %.2f%%, none %.2f%% (%.1f%% lost), stochastic %.2f%%",
             ro[1][0].acc, ro[1][1].acc, 100.0 * ro[1][1].lost, ro[1][2].acc, ro[2][0].acc, ro[2][1].acc,
             100.0 * ro[2][1].lost, ro[2][2].acc);
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: bf16 with SGD (lr %s) without master weights lost %.1f%% of its weight updates (rounded "
                 "away: below half an ulp of the bf16 weight) and reached %.2f%% test accuracy against %.2f%% with "
                 "FP32 masters (which would have lost %.1f%% in bf16); stochastic rounding without masters: %.2f%%. "
                 "%s.",
                 lr_sgd, 100.0 * bn->lost, bn->acc, bm->acc, 100.0 * bm->lost_if16, bs->acc, others);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: bf16 with SGD (lr %s) without master weights lost %.1f%% of its updates and reached "
                 "%.2f%% against %.2f%% with FP32 masters (the criterion asks for >= 10%% lost and >= 1 point "
                 "less); stochastic rounding: %.2f%%. %s.",
                 lr_sgd, 100.0 * bn->lost, bn->acc, bm->acc, bs->acc, others);

    FILE *gp = mpt_lab_open(c, "master-weights.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_cli_gnuplot_terminal(gp, 1000, 520, "master-weights.png");
    fprintf(gp, "set datafile separator ','\nset title 'bf16, SGD lr %s: weight updates lost (all parameters), per "
                "telemetry step'\nset xlabel 'step'\nset ylabel 'updates lost (%%)'\nset grid\nset key outside right\n"
                "f(t, m) = (strcol(2) eq 'all_parameters' && strcol(3) eq m) ? 100*$4 : NaN\n"
                "plot '%s/telemetry.csv' using 1:(f(0, 'lost_frac_if_16bit')) with linespoints pt 7 ps 0.5 lt 1 "
                "title 'masters: had the update gone to bf16', \\\n"
                "     '%s/telemetry.csv' using 1:(f(0, 'lost_frac')) with linespoints pt 7 ps 0.5 lt 2 "
                "title 'masters: FP32 master', \\\n"
                "     '%s/telemetry.csv' using 1:(f(0, 'lost_frac')) with linespoints pt 7 ps 0.5 lt 3 "
                "title 'no masters', \\\n"
                "     '%s/telemetry.csv' using 1:(f(0, 'lost_frac')) with linespoints pt 7 ps 0.5 lt 4 "
                "title 'no masters, stochastic rounding'\n",
            lr_sgd, bm->name, bm->name, bn->name, bs->name);
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "master-weights.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_master_weights, &f));
    fprintf(f, "An update is lost when it is smaller than half the spacing of the numbers around the weight in the "
               "format the update is added to: the weight rounds back to itself. For a weight near 0.05 that spacing "
               "is 2^-28 in FP32, 2^-15 in FP16 and 2^-12 in BF16. FP32 master weights take the update in FP32 and "
               "give the 16-bit copy only the rounded result; without them the update is added to the 16-bit "
               "weight, and stochastic rounding (round up with a probability proportional to the remainder) keeps "
               "small updates in expectation.\n\n"
               "| run | optimizer, lr | updates lost (mean) | lost had it gone to 16 bit | final test acc |\n"
               "|---|---|---:|---:|---:|\n");
    for (int k = 0; k < N_CASES; k++)
        for (int m = 0; m < N_MODES; m++) {
            const run_out *o = &ro[k][m];
            fprintf(f, "| %s | %s, %s | %.2f%% |", o->name, cases[k][1], cases[k][2], 100.0 * o->lost);
            if (isfinite(o->lost_if16)) fprintf(f, " %.2f%% |", 100.0 * o->lost_if16);
            else fprintf(f, " - |");
            fprintf(f, " %.2f%% |\n", o->acc);
        }
    fprintf(f, "\nMeans over the telemetry steps (every 10th step) of the share of parameters whose nonzero update "
               "left them unchanged, over all parameters (docs/numerics.md, section 3). Criterion for the effect: "
               "bf16 with SGD without masters loses at least 10%% of its updates and ends at least 1 point below "
               "the run with masters.\n");
    return mpt_lab_report_close(c, &mpt_lab_master_weights, f, plot_error);
}

const mpt_lab_lesson mpt_lab_master_weights = {
    "master-weights",
    "Without FP32 master weights, small updates round away in 16-bit weights (stale weights); masters or "
    "stochastic rounding keep them.",
    "sgd-lr=X, the small SGD learning rate (default 0.01)",
    run,
};
