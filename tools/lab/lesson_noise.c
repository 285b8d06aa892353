/*
 * tools/lab/lesson_noise.c - lesson `noise`: how much a one-seed comparison of precisions moves from seed to seed
 * (the statistics of `compare --seeds`, tools/stats.h).
 *
 * Plan: train fp32, fp16 and bf16 with each seed (a seed gives every precision the same initial weights and batch
 * order: a paired design). For each precision against fp32: the per-seed differences d_i = acc_p(seed i) -
 * acc_fp32(seed i), their mean and their sd (sd_paired: the noise of a one-seed comparison), with the 95% interval
 * of the mean. Beside it, fp32's own sd over seeds (sd_between: how much one run moves), which is larger because a
 * seed moves both runs of a pair alike and the difference cancels it; the report says what each spread means.
 * Criterion: the effect (one seed cannot rank these precisions) is observed when, for every precision, the mean
 * paired difference lies within twice the paired sd: a one-seed difference of that size is inside the noise of a
 * one-seed comparison. The conclusion also gives what the pairing did to the noise (sd_paired /
 * sd_between), whatever it is: it is information, not the criterion. The conclusion is mpt_text_noise_conclusion
 * (tools/sentences.h), a pure function of these statistics that tests/test_sentences.c checks on both sides of each
 * threshold.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lab/lab.h"
#include "tools/sentences.h"
#include "tools/stats.h"

#define NP 3
static const char *const precs[NP] = {"fp32", "fp16", "bf16"};

static mpt_status run(mpt_lab_ctx *c) {
    double seeds_d;
    MPT_TRY(mpt_lab_param(c, "seeds", c->n_seeds, &seeds_d));
    int ns = (int)seeds_d;
    if (ns < 2 || ns > 16 || ns != seeds_d)
        return mpt_errorf(MPT_ERR_ARG, "--param seeds: expected an integer in [2, 16], found %g", seeds_d);
    const char *lr;
    MPT_TRY(mpt_lab_param_flag(c, "lr", "0.001", MPT_OPT_LR, &lr));
    MPT_LAB_PARAMS_CHECKED(c);
    double acc[NP][16];
    /* every run at once: independent of each other, so under mpirun the ranks share them */
    char seed[16][16], name[16 * NP][32];
    const char *fl[16 * NP][8];
    mpt_lab_run runs[16 * NP];
    static mpt_run_result res[16 * NP];
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
            mpt_run_result_free(&res[k * NP + p]);
        }
    mpt_stats_summary s32;
    mpt_stats_summarize(acc[0], ns, &s32);
    mpt_stats_paired d[NP];
    mpt_stats_noise z[NP];
    mpt_stats_summary ds[NP];
    int have_ci = mpt_stats_available();
    double mean_diff[NP - 1], sd_paired[NP - 1], sd_between[NP - 1];
    for (int p = 1; p < NP; p++) {
        double x[16];
        for (int i = 0; i < ns; i++) x[i] = acc[p][i] - acc[0][i];
        mpt_stats_summarize(x, ns, &ds[p]);
        mpt_stats_noise_of(acc[p], acc[0], ns, &z[p]);
        if (have_ci) MPT_TRY(mpt_stats_compare_paired(acc[p], acc[0], ns, 0.95, c->base->margin, &d[p]));
        mean_diff[p - 1] = ds[p].mean, sd_paired[p - 1] = z[p].sd_paired, sd_between[p - 1] = z[p].sd_between;
    }
    const mpt_text_noise t = {.np = NP - 1, .n_seeds = ns, .ref = precs[0], .names = precs + 1,
                              .mean_diff = mean_diff, .sd_paired = sd_paired, .sd_between = sd_between,
                              .ref_sd = s32.sd, .ref_min = s32.min, .ref_max = s32.max};
    c->observed = mpt_text_noise_conclusion(c->conclusion, sizeof c->conclusion, &t);

    FILE *dat = mpt_lab_open(c, "noise.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# seed fp32 fp16 bf16 fp16-fp32 bf16-fp32 (%%, pp)\n");
    for (int i = 0; i < ns; i++)
        fprintf(dat, "%d %.4f %.4f %.4f %.4f %.4f\n", i, acc[0][i], acc[1][i], acc[2][i], acc[1][i] - acc[0][i],
                acc[2][i] - acc[0][i]);
    char dat_path[MPT_CLI_PATH + 32];
    snprintf(dat_path, sizeof dat_path, "%s/noise.dat", c->dir);
    MPT_TRY(mpt_outdir_close_written(dat, dat_path));
    FILE *gp = mpt_lab_open(c, "noise.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 900, 760, "noise.png");
    fprintf(gp, "set multiplot layout 2,1\nset xlabel 'seed'\nset xtics 1\nset grid\nset key outside right\n"
                "set offsets 0.3, 0.3, 0, 0\n"
                "set title 'final test accuracy per seed: one run moves this much from seed to seed'\n"
                "set ylabel 'test accuracy (%%)'\n"
                "plot 'noise.dat' using 1:2 with linespoints lw 2 pt 7 ps 1.5 lt 1 title 'fp32', "
                "'' using 1:3 with linespoints lw 1.5 pt 5 lt 3 title 'fp16', "
                "'' using 1:4 with linespoints lw 1.5 pt 9 lt 4 title 'bf16'\n"
                "set title 'paired difference to fp32, same seed: a one-seed comparison moves this much'\n"
                "set ylabel 'difference (pp)'\n"
                "plot 'noise.dat' using 1:5 with linespoints lw 1.5 pt 5 lt 3 title sprintf('fp16 - fp32 (mean %+.2f, sd "
                "%.2f)'), '' using 1:6 with linespoints lw 1.5 pt 9 lt 4 title sprintf('bf16 - fp32 (mean %+.2f, sd "
                "%.2f)'), 0 with lines lt -1 dt 2 notitle\nunset multiplot\n",
            ds[1].mean, z[1].sd_paired, ds[2].mean, z[2].sd_paired);
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "noise.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_noise, &f));
    fprintf(f, "Each seed fixes the initial weights and the batch order and gives them to every precision: a paired "
               "design.\n\n| seed | fp32 | fp16 | bf16 | fp16 - fp32 | bf16 - fp32 |\n|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < ns; i++)
        fprintf(f, "| %d | %.2f%% | %.2f%% | %.2f%% | %+.2f | %+.2f |\n", i, acc[0][i], acc[1][i], acc[2][i],
                acc[1][i] - acc[0][i], acc[2][i] - acc[0][i]);
    fprintf(f, "\n## Two spreads, two questions\n\n"
               "- **The noise of a comparison** is the sd of the paired differences (same seed) over seeds: how much "
               "the difference one seed shows would move with another seed. A one-seed difference smaller than about "
               "twice it says nothing about the precision.\n"
               "- **The spread of one run** is fp32's sd over seeds: how much one run's accuracy moves. A seed moves "
               "both runs of a pair alike (same initial weights, same batches), and their difference cancels that "
               "shared part, so the paired spread is usually smaller; how much smaller is measured, not assumed "
               "(after a few steps the two runs of a pair are still close; after longer training their paths have "
               "diverged and the pairing cancels less). Reading a difference against fp32's spread instead of the "
               "paired one measures the wrong noise.\n\n"
               "| | mean | sd over %d seeds | range |\n|---|---:|---:|---:|\n"
               "| fp32 alone | %.2f%% | %.2f pp | %.2f..%.2f%% |\n",
            ns, s32.mean, s32.sd, s32.min, s32.max);
    for (int p = 1; p < NP; p++)
        fprintf(f, "| %s - fp32, paired | %+.2f pp | %.2f pp (%.2fx fp32's) | %+.2f..%+.2f |\n", precs[p], ds[p].mean,
                z[p].sd_paired, z[p].sd_between > 0 ? z[p].sd_paired / z[p].sd_between : NAN, ds[p].min, ds[p].max);
    fprintf(f, "\n");
    if (have_ci)
        for (int p = 1; p < NP; p++)
            fprintf(f, "- %s: mean paired difference %+.2f pp, 95%% CI [%.2f, %.2f] (Student t, %d degrees of freedom); "
                       "verdict against ±%.2g pp: **%s**%s\n",
                    precs[p], d[p].mean, d[p].lo, d[p].hi, ns - 1, d[p].margin, mpt_verdict_name(d[p].verdict),
                    d[p].verdict == MPT_VERDICT_INCONCLUSIVE && d[p].seeds_needed > 0 ? " (more seeds needed)" : "");
    fprintf(f, "\nCriterion for the effect: for every precision, the mean paired difference lies within twice the sd "
               "of the paired differences, so a one-seed difference of that size is inside the noise of a one-seed "
               "comparison. `mptrain compare --seeds N` runs the same comparison for any model, with the full "
               "statistics.\n");
    return mpt_lab_report_close(c, &mpt_lab_noise, f, plot_error);
}

const mpt_lab_lesson mpt_lab_noise = {
    "noise",
    "How far does a one-seed comparison of precisions move from seed to seed (the spread of same-seed differences), "
    "and can one seed rank fp16, bf16 and fp32?",
    "seeds=N (2..16; default: the lesson's size), lr=X (default 0.001)",
    run,
    {20000, 10000, 2, 4}, /* full */
    {4000, 1000, 1, 3}, /* --quick */
    "seeds lr",
    "--quick 2 s, full 27 s of CPU time (2-core VM, 2026-11-28)",
};
