/*
 * tools/speedrun.h - `mptrain speedrun` (issue 34): a fixed recipe trained to 90% test accuracy on Fashion-MNIST, over
 * seeds and precisions, with its accuracy claim and its clock (cmd_speedrun.c: the recipe and the runs;
 * speedrun_report.c: the statistics, report.md and speedrun.json; docs/speedrun.md: the recipe, how it was found, the
 * records).
 *
 * The claim is the mean final test accuracy over the seeds (in %, over the 10000 test images) with its 95% confidence
 * interval, the one-sample Student t interval mean -+ t_{0.975, n-1} sd / sqrt(n) (tools/stats.h,
 * mpt_stats_mean_interval), against MPT_SPEEDRUN_TARGET_PCT; a precision reaches it when its mean does, and the report
 * says whether the whole interval lies above. The clock is each run's time to result (tools/run.h, mpt_run_timing).
 */
#ifndef MPT_TOOLS_SPEEDRUN_H
#define MPT_TOOLS_SPEEDRUN_H

#include <stdio.h>

#include "tools/report.h"

#define MPT_SPEEDRUN_TARGET_PCT 90.0 /* test accuracy, % */
#define MPT_SPEEDRUN_DEFAULT_SEEDS 10
#define MPT_SPEEDRUN_DEFAULT_WARMUP 5 /* --untimed-warmup */
#define MPT_SPEEDRUN_LEVEL 0.95

/* One option of the recipe: what `--<name> <value>` gives mptrain train and compare (value NULL for a flag). */
typedef struct mpt_speedrun_option {
    mpt_opt_id id;
    const char *value;
} mpt_speedrun_option;

/* The recipe's options, in the order --print-recipe prints them; *n receives their count. */
const mpt_speedrun_option *mpt_speedrun_recipe(int *n);

/* Applies the recipe to *o (which holds the defaults), as the command line would: each option is set through
 * mpt_cli_apply and marked given. MPT_ERR_ARG with the option's message if one does not parse (a broken recipe). */
mpt_status mpt_speedrun_recipe_apply(mpt_cli_opts *o);

/* Writes the recipe as one line of options, each value that holds a character the shell treats specially single-quoted
 * ("--model 'conv(16,3,pad=1),...' --optimizer adam ..."), which the shell and xargs read back as the same words. */
void mpt_speedrun_recipe_print(FILE *f);

/* What the process spent outside the runs (host clock, seconds). */
typedef struct mpt_speedrun_process {
    double start_s;      /* from the process's start (the kernel's start time: exec, the dynamic libraries, mptrain's
                            re-execution to set the OpenMP wait policy, tools/main.c) to the command's first line; NAN
                            when /proc is unreadable (resolution 1 / CLK_TCK, 10 ms) */
    double data_read_s;  /* the dataset read from its files into host memory (once for all runs) */
    double whole_s;      /* from the process's start to the report written (the exit's own teardown is not in it) */
    double whole_cpu_s;  /* CPU time of the process, all threads, over the same span (CLOCK_PROCESS_CPUTIME_ID) */
} mpt_speedrun_process;

/* The runs of one speedrun: res[s * n_precisions + p] is seed seeds[s] in precision precisions[p], trained into
 * out/seed-<seed>/<precision>/. */
typedef struct mpt_speedrun_runs {
    const mpt_cli_opts *o;        /* the recipe with this invocation's options */
    int n_seeds, n_precisions;
    const uint64_t *seeds;
    const mpt_precision *precisions;
    const mpt_run_result *res;
    const mpt_report_machine *machine;
    const mpt_speedrun_process *process;
    int threads;                  /* the CPU backend's threads (0 on a GPU) */
    int record_data;              /* 1 when the runs used all of Fashion-MNIST at its default place: a record; 0 with
                                     --data, --limit-train or --limit-test (the report says it is no record) */
    int64_t n_test;               /* the test images each run's final evaluation reads */
} mpt_speedrun_runs;

/* Prints the summary table and writes out/report.md and out/speedrun.json: per precision the mean final test accuracy
 * with its 95% interval (n >= 2; GSL), sd, min and max, the seeds at or above the target, whether the target is
 * reached; the time to result (host clock and CPU time: mean, sd, min, max); against fp32 (same seed) the paired
 * difference of accuracy and of time to result with their 95% intervals; where the time went (process start, data
 * read and upload, backend, warm-up, graph build, each epoch, the batch orders, the evaluation, the outputs); every
 * run; the recipe, as options and as its full recorded settings; the machine. MPT_ERR_IO when a file cannot be
 * written. */
mpt_status mpt_speedrun_report(const mpt_speedrun_runs *r);

#endif
