/*
 * tools/sweep.h - a plan of independent runs (compare, lab) over the ranks of an MPI job (tools/sweep.c).
 */
#ifndef MPT_TOOLS_SWEEP_H
#define MPT_TOOLS_SWEEP_H

#include "tools/run.h"

/* ---- a plan of runs over the ranks of an MPI job (sweep.c) ------------------------------------------------- */

/* A plan of n independent runs. The callbacks are the command's; ctx is theirs. */
typedef struct mpt_sweep {
    int n;
    void *ctx;
    /* Trains run i into *res (zeroed by the caller; freed by the sweep on failure). */
    mpt_status (*train)(void *ctx, int i, mpt_run_result *res);
    /* Run i's label for messages ("seed 0 fp16") and its output directory. */
    void (*describe)(void *ctx, int i, char *label, size_t label_len, char *dir, size_t dir_len);
    /* On rank 0 (or the single process): run i's result, in plan order; the callee owns *res. */
    mpt_status (*deliver)(void *ctx, int i, mpt_run_result *res);
    /* In a job: the settings every rank must share (mpt_cli_job_settings), compared before any run; n_plan 0: none. */
    const mpt_dist_item *plan;
    int n_plan;
    /* Or NULL. On rank 0 (or the single process), once every rank is ready and agrees on the plan, before the first
     * run: what the job does to --out only when it really starts (removing an earlier job's results). Its error
     * fails the plan as a rank's setup error does. */
    mpt_status (*start)(void *ctx);
} mpt_sweep;

/* Runs the plan. Without a job (d NULL): run by run, each delivered as it finishes; the first failure stops
 * the plan and is returned as it is. In a job (collective; every rank passes the same plan): run i trains on
 * rank i mod N (static round-robin); a failed run writes <dir>/FAILED (the message) and the other ranks start
 * no further runs (before the first run, the ranks agree on sw->plan: a difference is MPT_ERR_ARG on every rank, with
 * one line naming the setting and the two values, and no run starts; then rank 0 calls sw->start); then, if any rank failed (or its `setup`
 * status, e.g. loading the data, was an error), every
 * rank returns that status with the message "rank R of N, run I of M 'LABEL' (DIR): MESSAGE" (the lowest failed
 * rank's) and nothing is delivered; otherwise rank 0 receives every result in plan order and delivers it (a run
 * whose directory rank 0 cannot see fails the plan: --out must be shared). A stale FAILED mark in a run's
 * directory is removed before it trains. */
mpt_status mpt_sweep_run(mpt_dist *d, const mpt_sweep *sw, mpt_status setup);

/* Joins the MPI job when a launcher started this process as one of N >= 2 ranks (engine/dist: mpt_dist_env_size);
 * *out stays NULL for a single process (no launcher, or one rank). MPT_ERR_ARG when started as one of several
 * ranks by a build without MPI (every rank would run the whole plan into one --out). */
mpt_status mpt_sweep_join(mpt_dist **out);

/* The OpenBLAS threads of one rank: `given` (--threads) when > 0; else the CPUs the launcher bound the rank to,
 * when fewer than the node has; else the node's online cores divided by the job's ranks on the node (at least
 * 1; d NULL counts one). *why receives the reason, one phrase. */
int mpt_sweep_threads(const mpt_dist *d, int given, char *why, size_t n);

/* Prints which of the plan's n runs this rank trains and its OpenBLAS threads (and why), one line. */
void mpt_sweep_announce(const mpt_dist *d, int n, int threads, const char *why);

#endif
