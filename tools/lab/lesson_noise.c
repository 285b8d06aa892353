/*
 * tools/lab/lesson_noise.c - lesson `noise`: the fp32 seed-to-seed spread against the differences between
 * precisions (the statistics of `compare --seeds`, tools/stats.h).
 *
 * Plan: train fp32, fp16 and bf16 with each seed (a seed gives every precision the same initial weights and
 * batch order). Measure the fp32 spread over seeds (sd, range) and each precision's mean paired difference to
 * fp32 with its 95% interval. Criterion: the effect (precision differences are within seed noise) is observed
 * when every precision's |mean paired difference| is below the fp32 seed-to-seed sd.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lab/lab.h"
#include "tools/stats.h"

#define NP 3
static const char *const precs[NP] = {"fp32", "fp16", "bf16"};

static mpt_status run(mpt_lab_ctx *c) {
    double seeds_d;
    MPT_TRY(mpt_lab_param(c, "seeds", c->n_seeds, &seeds_d));
    int ns = (int)seeds_d;
    if (ns < 2 || ns > 16 || ns != seeds_d)
        return mpt_errorf(MPT_ERR_ARG, "--param seeds: expected an integer in [2, 16], found %g", seeds_d);
    const char *lr = mpt_lab_param_text(c, "lr", "0.001");
    double acc[NP][16];
    /* every run at once: independent of each other, so under mpirun the ranks share them */
    char seed[16][16], name[16 * NP][32];
    const char *fl[16 * NP][8];
    mpt_lab_run runs[16 * NP];
    static mpt_cli_result res[16 * NP];
    for (int k = 0; k < ns; k++) {
        snprintf(seed[k], sizeof seed[k], "%d", k);
        for (int p = 0; p < NP; p++) {
            int i = k * NP + p;
            snprintf(name[i], sizeof name[i], "%s-seed%d", precs[p], k);
            const char *f[] = {"--precision", precs[p], "--seed", seed[k], "--lr", lr, NULL};
            memcpy(fl[i], f, sizeof f);
            runs[i] = (mpt_lab_run){name[i], fl[i]};
        }
    }
    MPT_TRY(mpt_lab_train_batch(c, runs, ns * NP, res));
    for (int k = 0; k < ns; k++)
        for (int p = 0; p < NP; p++) {
            acc[p][k] = 100.0 * res[k * NP + p].final_test_acc;
            mpt_cli_result_free(&res[k * NP + p]);
        }
    mpt_stats_summary s32;
    mpt_stats_summarize(acc[0], ns, &s32);
    mpt_stats_paired d[NP];
    int have_ci = mpt_stats_available();
    double max_abs = 0.0;
    char diffs[600] = "";
    size_t k = 0;
    for (int p = 1; p < NP; p++) {
        double x[16];
        for (int i = 0; i < ns; i++) x[i] = acc[p][i] - acc[0][i];
        mpt_stats_summary sd;
        mpt_stats_summarize(x, ns, &sd);
        max_abs = fmax(max_abs, fabs(sd.mean));
        if (have_ci) MPT_TRY(mpt_stats_compare_paired(acc[p], acc[0], ns, 0.95, c->base->margin, &d[p]));
        if (have_ci)
            k += (size_t)snprintf(diffs + k, sizeof diffs - k, "%s%s %+.2f pp [95%% CI %.2f, %.2f]", p > 1 ? ", " : "",
                                  precs[p], d[p].mean, d[p].lo, d[p].hi);
        else
            k += (size_t)snprintf(diffs + k, sizeof diffs - k, "%s%s %+.2f pp", p > 1 ? ", " : "", precs[p], sd.mean);
    }
    c->observed = max_abs < s32.sd;
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: fp32 alone varies from seed to seed by sd %.2f pp (range %.2f..%.2f%% over %d seeds), more "
                 "than the mean paired difference of any precision to fp32 (%s): a one-seed comparison of precisions "
                 "measures mostly seed noise.",
                 s32.sd, s32.min, s32.max, ns, diffs);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: a precision's mean paired difference to fp32 (%s) reached the fp32 seed-to-seed sd "
                 "(%.2f pp, range %.2f..%.2f%% over %d seeds): here the precision effect is at least as large as the "
                 "seed noise.",
                 diffs, s32.sd, s32.min, s32.max, ns);

    FILE *dat = mpt_lab_open(c, "noise.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# seed fp32 fp16 bf16\n");
    for (int i = 0; i < ns; i++) fprintf(dat, "%d %.4f %.4f %.4f\n", i, acc[0][i], acc[1][i], acc[2][i]);
    fclose(dat);
    FILE *gp = mpt_lab_open(c, "noise.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_cli_gnuplot_terminal(gp, 900, 500, "noise.png");
    fprintf(gp, "set title 'final test accuracy per seed: the seeds move it more than the precisions'\n"
                "set xlabel 'seed'\nset ylabel 'test accuracy (%%)'\nset xtics 1\nset grid\nset key outside right\n"
                "set offsets 0.3, 0.3, 0, 0\n"
                "plot 'noise.dat' using 1:2 with linespoints lw 2 pt 7 ps 1.5 lt 1 title 'fp32', "
                "'' using 1:3 with linespoints lw 1.5 pt 5 lt 3 title 'fp16', "
                "'' using 1:4 with linespoints lw 1.5 pt 9 lt 4 title 'bf16'\n");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "noise.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_noise, &f));
    fprintf(f, "Each seed fixes the initial weights and the batch order and gives them to every precision.\n\n"
               "| seed | fp32 | fp16 | bf16 |\n|---:|---:|---:|---:|\n");
    for (int i = 0; i < ns; i++) fprintf(f, "| %d | %.2f%% | %.2f%% | %.2f%% |\n", i, acc[0][i], acc[1][i], acc[2][i]);
    fprintf(f, "\nfp32 seed-to-seed: mean %.2f%%, sd %.2f pp, range %.2f pp. Mean paired differences to fp32: %s.\n\n",
            s32.mean, s32.sd, s32.max - s32.min, diffs);
    if (have_ci)
        for (int p = 1; p < NP; p++)
            fprintf(f, "- %s: verdict against ±%.2g pp: **%s**%s\n", precs[p], d[p].margin, mpt_verdict_name(d[p].verdict),
                    d[p].verdict == MPT_VERDICT_INCONCLUSIVE && d[p].seeds_needed > 0 ? " (more seeds needed)" : "");
    fprintf(f, "\nCriterion for the effect: every |mean paired difference| below the fp32 sd. `mptrain compare --seeds "
               "N` runs the same comparison for any model, with the full statistics.\n");
    return mpt_lab_report_close(c, &mpt_lab_noise, f, plot_error);
}

const mpt_lab_lesson mpt_lab_noise = {
    "noise",
    "Between seeds fp32 itself moves more than the precisions differ: one seed cannot rank precisions.",
    "seeds=N (2..16; default 3, 2 with --quick), lr=X (default 0.001)",
    run,
};
