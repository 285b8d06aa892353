/*
 * tools/cmd_compare.c - `mptrain compare`: the same model trained in several precisions, side by side.
 *
 * Every run uses the same seed, so the FP32 initial weights (drawn on the host from the seed, then rounded to
 * each working dtype), the shuffles and the dropout masks are the same; only the number formats differ.
 * Each run gets a fresh backend (so its peak-memory figures are its own) and writes into --out/<precision>/.
 * Then: the relative L2 distance of each run's final FP32 master weights from the fp32 run's,
 *   rel_l2 = sqrt(sum_i (w_i - w32_i)^2) / sqrt(sum_i w32_i^2)   (FP64 sums over all parameters),
 * with, for scale, the same distance between the fp32 run's final and initial weights,
 * the table (printed and in report.md), compare.json and convergence.png (tools/plot.c).
 *
 * With --seeds (a list, or N for 0..N-1) the same is done for every seed, into --out/seed-<S>/<precision>/, and
 * tools/compare_seeds.c turns the runs into statistics over seeds: each precision against fp32 of the same seed
 * (a paired design), with a 95% confidence interval and an equivalence verdict (tools/stats.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/report.h"
#include "tools/sweep.h"
#include "tools/stats.h"

/* ||w - ref|| / ||ref|| over n weights, sums in FP64. */
static double rel_l2(const float *w, const float *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)w[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    return den > 0.0 ? sqrt(num) / sqrt(den) : NAN;
}

static int compare_with(mpt_cli_opts *op, mpt_dist *dist);

/* The results an earlier compare left in --out (rank 0, holding its lock): the report, its JSON and pictures, the
 * curves of --seeds, and every run directory it could have written (one per precision, and per seed with
 * --seeds). A job that fails or is stopped then leaves only its own runs, never an earlier job's beside them. */
static mpt_status clear_earlier_job(const mpt_cli_opts *o) {
    static const char *const files[] = {"report.md", "compare.json", "convergence.png", "convergence.gp",
                                        "convergence.gp.log", "numerics.png", "numerics.gp", "numerics.gp.log",
                                        "numerics_twin.dat"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) MPT_TRY(mpt_outdir_remove_result(o->out, files[i]));
    char dir[MPT_CLI_PATH + 320], name[64];
    for (int p = 0; p < MPT_PRECISION_COUNT; p++) {
        const char *pn = mpt_precision_name((mpt_precision)p);
        snprintf(dir, sizeof dir, "%s/%s", o->out, pn);
        MPT_TRY(mpt_run_clear(dir));
        snprintf(dir, sizeof dir, "%s/curves", o->out);
        snprintf(name, sizeof name, "%s_steps.csv", pn);
        MPT_TRY(mpt_outdir_remove_result(dir, name));
        snprintf(name, sizeof name, "%s_epochs.csv", pn);
        MPT_TRY(mpt_outdir_remove_result(dir, name));
    }
    snprintf(dir, sizeof dir, "%s/curves", o->out);
    (void)rmdir(dir); /* only when empty */
    return mpt_run_clear_seeds(o->out);
}

/* Trains o->model in precision p with seed `seed` into dir, labelled "[<label>] " on the progress lines. */
static mpt_status train_one(const mpt_cli_opts *o, const mpt_cli_data *cd, mpt_precision p, uint64_t seed,
                            const char *dir, const char *label, mpt_run_result *res) {
    mpt_cli_opts op = *o;
    op.precision = p;
    op.seed = seed;
    mpt_cli_resolve(&op);
    int len = snprintf(op.out, sizeof op.out, "%s", dir);
    if (len < 0 || (size_t)len >= sizeof op.out) return mpt_errorf(MPT_ERR_ARG, "--out %s: path too long", o->out);
    char lab[192];
    snprintf(lab, sizeof lab, "[%s] ", label);
    printf("%s---- training %s in %s -> %s\n", lab, op.model, mpt_precision_name(p), op.out);
    fflush(stdout);
    return mpt_run_train(&op, cd, lab, res);
}

/* The plan of one compare: every precision (with --seeds: for every seed, seed-major), dealt out to the ranks
 * when mptrain runs under mpirun (tools/sweep.c); rank 0 (or the single process) receives the results in
 * plan order. */
typedef struct compare_plan {
    const mpt_cli_opts *o;
    const mpt_cli_data *cd;
    mpt_dist *dist;          /* NULL: a single process */
    int seeds;               /* --seeds: run i is seed i / n_precisions, precision i % n_precisions */
    mpt_run_result *res;     /* [n] delivered results (rank 0) */
    double *l2;              /* [n] --seeds: each run's distance to its seed's fp32 run */
    int ref;                 /* index of fp32 in --precisions, -1 without */
    mpt_cli_job job;         /* in a job: the settings every rank must share (the plan, the data) */
} compare_plan;

static void plan_describe(void *ctx, int i, char *label, size_t ln, char *dir, size_t dn) {
    const compare_plan *pl = ctx;
    const mpt_cli_opts *o = pl->o;
    int np = o->n_precisions;
    mpt_precision p = o->precisions[pl->seeds ? i % np : i];
    if (pl->seeds) {
        uint64_t seed = o->seeds[i / np];
        if (mpt_report_seed_run_dir(dir, dn, o->out, seed, p) != MPT_OK) snprintf(dir, dn, "%s", o->out);
        snprintf(label, ln, "seed %llu %s", (unsigned long long)seed, mpt_precision_name(p));
    } else {
        snprintf(dir, dn, "%s/%s", o->out, mpt_precision_name(p));
        snprintf(label, ln, "%s", mpt_precision_name(p));
    }
}

static mpt_status plan_train(void *ctx, int i, mpt_run_result *res) {
    const compare_plan *pl = ctx;
    const mpt_cli_opts *o = pl->o;
    int np = o->n_precisions;
    mpt_precision p = o->precisions[pl->seeds ? i % np : i];
    uint64_t seed = pl->seeds ? o->seeds[i / np] : o->seed;
    char dir[MPT_CLI_PATH + 8], label[128], tag[160];
    if (pl->seeds) MPT_TRY(mpt_report_seed_run_dir(dir, sizeof dir, o->out, seed, p));
    plan_describe(ctx, i, label, sizeof label, dir, sizeof dir);
    if (pl->dist) snprintf(tag, sizeof tag, "rank %d: %s", mpt_dist_rank(pl->dist), label);
    else snprintf(tag, sizeof tag, "%s", label);
    MPT_TRY(train_one(o, pl->cd, p, seed, dir, tag, res));
    if (res->interrupted) /* the run saved its state; the plan stops here, and no report compares partial runs */
        return mpt_errorf(MPT_ERR_INTERRUPTED, "interrupted by %s at step %lld of run %s: its checkpoint is in %s (the "
                          "finished runs are beside it); no report.md, which compares complete runs",
                          mpt_guard_signal_name(res->interrupted), (long long)res->iterations, label, dir);
    return MPT_OK;
}

/* The job starts (rank 0, every rank ready): an earlier job's results go now, not before, so that a job that
 * cannot start (a mistyped --data on any rank, ranks that disagree) loses nothing. */
static mpt_status plan_start(void *ctx) { return clear_earlier_job(((const compare_plan *)ctx)->o); }

static mpt_status plan_deliver(void *ctx, int i, mpt_run_result *r) {
    compare_plan *pl = ctx;
    int np = pl->o->n_precisions;
    pl->res[i] = *r;
    if (!pl->seeds || i % np != np - 1) return MPT_OK;
    /* a seed's runs are all in: their distances to its fp32 run; then the weights are no longer needed */
    mpt_run_result *row = &pl->res[i - (np - 1)];
    double *l2 = &pl->l2[i - (np - 1)];
    int ref = pl->ref;
    for (int p = 0; p < np; p++)
        l2[p] = ref >= 0 && row[p].n_master == row[ref].n_master
                    ? rel_l2(row[p].final_master, row[ref].final_master, row[ref].n_master) : NAN;
    for (int p = 0; p < np; p++) {
        free(row[p].final_master);
        free(row[p].init_master);
        row[p].final_master = row[p].init_master = NULL;
    }
    return MPT_OK;
}

/* Runs the plan; on rank 0 (or alone) pl->res holds every result afterwards. */
static mpt_status run_plan(compare_plan *pl, mpt_status setup) {
    const mpt_cli_opts *o = pl->o;
    int n = pl->seeds ? o->n_seeds * o->n_precisions : o->n_precisions;
    pl->ref = -1;
    for (int p = 0; p < o->n_precisions; p++)
        if (mpt_mode_info(o->precisions[p])->reference) pl->ref = p;
    pl->res = calloc((size_t)n, sizeof *pl->res);
    pl->l2 = malloc((size_t)n * sizeof *pl->l2);
    if (!pl->res || !pl->l2) setup = mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the results of %d runs", n);
    if (pl->dist && setup == MPT_OK)
        mpt_cli_job_settings(o, MPT_CMD_COMPARE, &pl->cd->fp, 0, NULL, &pl->job);
    mpt_sweep sw = {n, pl, plan_train, plan_describe, plan_deliver, pl->job.item, pl->job.n, plan_start};
    mpt_status s = mpt_sweep_run(pl->dist, &sw, setup);
    mpt_cli_job_free(&pl->job);
    return s;
}

static void plan_free(compare_plan *pl) {
    int n = pl->seeds ? pl->o->n_seeds * pl->o->n_precisions : pl->o->n_precisions;
    if (pl->res)
        for (int i = 0; i < n; i++) mpt_run_result_free(&pl->res[i]);
    free(pl->res);
    free(pl->l2);
    pl->res = NULL;
    pl->l2 = NULL;
}

/* compare --seeds, once every run is in: statistics over seeds (tools/compare_seeds.c). */
static mpt_status report_seeds(const mpt_cli_opts *o, const compare_plan *pl, const mpt_report_machine *machine) {
    mpt_report_seed_runs runs = {o->out, o->n_seeds, o->n_precisions, o->seeds, o->precisions, pl->res, pl->l2, machine};
    const char *plot_file = "convergence.png";
    char plot_error[600] = "";
    mpt_status ps = mpt_report_plot_seeds(&runs);
    if (ps != MPT_OK) {
        snprintf(plot_error, sizeof plot_error, "%s", mpt_last_error());
        fprintf(stderr, "mptrain compare: no plot: %s\n", plot_error);
        plot_file = NULL;
    }
    /* with telemetry: numerics.png of the first seed's runs (the report adds the means over seeds) */
    mpt_report_plot_info plots = {plot_file, plot_error, NULL, NULL};
    char numerics_error[600] = "", dirs[MPT_PRECISION_COUNT][64];
    if (o->telemetry > 0) {
        mpt_report_row rows[MPT_PRECISION_COUNT];
        for (int p = 0; p < o->n_precisions; p++) {
            snprintf(dirs[p], sizeof dirs[p], "seed-%llu/%s", (unsigned long long)o->seeds[0],
                     mpt_precision_name(o->precisions[p]));
            rows[p] = (mpt_report_row){o->precisions[p], &pl->res[p], pl->l2[p], dirs[p]};
        }
        plots.numerics = "numerics.png";
        if (mpt_report_plot_numerics(o->out, rows, o->n_precisions, o->telemetry) != MPT_OK) {
            snprintf(numerics_error, sizeof numerics_error, "%s", mpt_last_error());
            fprintf(stderr, "mptrain compare: no numerics plot: %s\n", numerics_error);
            plots.numerics = NULL;
            plots.numerics_error = numerics_error;
        }
    }
    MPT_TRY(mpt_report_write_seeds(o, &runs, &plots));
    printf("\nreport: %s/report.md\nsummary: %s/compare.json\n", o->out, o->out);
    if (plot_file) printf("plot:   %s/%s\n", o->out, plot_file);
    if (plots.numerics) printf("numerics plot: %s/%s\n", o->out, plots.numerics);
    return MPT_OK;
}

int mpt_cmd_compare(int argc, char **argv) {
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    int rc = mpt_cli_parse(argc, argv, MPT_CMD_COMPARE, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;
    if (o.n_seeds > 1 && !mpt_stats_available()) {
        fprintf(stderr, "mptrain compare: --seeds %d: the confidence intervals need GSL (Student t quantiles), and "
                        "this mptrain was built without it: apt-get install libgsl-dev, then rebuild (meson setup "
                        "--reconfigure build; ./run build)\n", o.n_seeds);
        return MPT_CLI_EXIT_USAGE;
    }
    if (o.n_seeds == 1) o.seed = o.seeds[0]; /* one seed: today's layout and report */
    char shortname[32];
    if (!o.out[0])
        snprintf(o.out, sizeof o.out, "runs/compare-%s", mpt_cli_model_short(o.model, shortname, sizeof shortname));
    mpt_cpu_set_threads(o.threads);
    mpt_report_set_plot_timeout(o.plot_timeout);
    mpt_status s;

    for (int i = 0; i < o.n_precisions; i++) { /* switch combinations, before any data is loaded */
        mpt_cli_opts op = o;
        op.precision = o.precisions[i];
        mpt_cli_resolve(&op);
        s = mpt_cli_check_switches(&op);
        if (s != MPT_OK) return mpt_cli_fail("compare", s);
    }
    mpt_dist *dist = NULL;
    s = mpt_sweep_join(&dist);
    if (s != MPT_OK) return mpt_cli_fail("compare", s);
    if (dist) mpt_dist_set_timeout(dist, o.comm_timeout);
    else if (mpt_cli_given(&o, MPT_OPT_COMM_TIMEOUT)) /* a note: the same command may run with and without mpirun */
        printf("note: --comm-timeout changes nothing: this compare is not a rank of an mpirun job, so there are no "
               "other ranks to wait for\n");
    mpt_run_answer(dist);
    rc = compare_with(&o, dist);
    mpt_run_answer(NULL);
    if (dist) mpt_guard_stop_done();
    mpt_dist_free(&dist);
    return rc;
}

/* The rest of compare once the options are final (and, under mpirun, the job joined). */
static int compare_with(mpt_cli_opts *op, mpt_dist *dist) {
    mpt_cli_opts o = *op;
    int rank = dist ? mpt_dist_rank(dist) : 0;
    if (dist) {
        char why[128];
        o.threads = mpt_sweep_threads(dist, o.threads, why, sizeof why);
        mpt_cpu_set_threads(o.threads);
        mpt_sweep_announce(dist, o.n_seeds > 1 ? o.n_seeds * o.n_precisions : o.n_precisions, o.threads, why);
    }
    mpt_report_machine machine; /* the load while the runs train: host-clock times on a busy machine are not theirs */
    mpt_report_machine_start(&machine);
    /* rank 0 holds --out for the job; a job that fails or is stopped must not leave an earlier job's results
     * looking like its own */
    mpt_status s = MPT_OK;
    mpt_outdir od = {.fd = -1, .lock_fd = -1};
    if (rank == 0) s = mpt_outdir_open(&od, o.out, MPT_OUTDIR_USER_LINK, "compare");
    mpt_cli_data cd;
    memset(&cd, 0, sizeof cd);
    if (s == MPT_OK) s = mpt_guard_blas_ready();
    if (s == MPT_OK) s = mpt_cli_data_load(&cd, o.data, o.limit_train, o.limit_test, o.classes, o.data_layout);
    compare_plan pl = {&o, &cd, dist, o.n_seeds > 1, NULL, NULL, -1, {0}};
    s = run_plan(&pl, s);
    mpt_cli_data_free(&cd);
    if (s != MPT_OK || rank != 0) {
        mpt_outdir_close(&od);
        plan_free(&pl);
        if (s == MPT_OK) return 0;
        return rank == 0 ? mpt_cli_fail("compare", s) : s == MPT_ERR_ARG ? MPT_CLI_EXIT_USAGE : MPT_CLI_EXIT_FAIL;
    }
    if (pl.seeds) {
        mpt_report_machine_end(&machine);
        s = report_seeds(&o, &pl, &machine);
        mpt_outdir_close(&od);
        plan_free(&pl);
        return s == MPT_OK ? 0 : mpt_cli_fail("compare", s);
    }
    mpt_run_result *res = pl.res;
    int n_done = o.n_precisions;

    const mpt_run_result *ref = NULL;
    for (int i = 0; i < n_done; i++)
        if (mpt_mode_info(o.precisions[i])->reference) ref = &res[i];
    mpt_report_row rows[MPT_PRECISION_COUNT];
    for (int i = 0; i < n_done; i++) {
        rows[i].precision = o.precisions[i];
        rows[i].r = &res[i];
        rows[i].rel_l2 = ref && res[i].n_master == ref->n_master
                             ? rel_l2(res[i].final_master, ref->final_master, ref->n_master) : NAN;
        rows[i].dir = NULL; /* <out>/<precision> */
    }
    mpt_report_machine_end(&machine);
    mpt_report_ref scale = {NAN, &machine};
    if (ref) scale.fp32_travel = rel_l2(ref->init_master, ref->final_master, ref->n_master);

    const char *plot_file = "convergence.png";
    char plot_error[600] = "";
    s = mpt_report_plot(o.out, o.precisions, n_done);
    if (s != MPT_OK) {
        snprintf(plot_error, sizeof plot_error, "%s", mpt_last_error());
        fprintf(stderr, "mptrain compare: no plot: %s\n", plot_error);
        plot_file = NULL;
    }
    const char *numerics_file = NULL;
    char numerics_error[600] = "";
    if (o.telemetry > 0) {
        numerics_file = "numerics.png";
        s = mpt_report_plot_numerics(o.out, rows, n_done, o.telemetry);
        if (s != MPT_OK) {
            snprintf(numerics_error, sizeof numerics_error, "%s", mpt_last_error());
            fprintf(stderr, "mptrain compare: no numerics plot: %s\n", numerics_error);
            numerics_file = NULL;
        }
    }
    mpt_report_plot_info plots = {plot_file, plot_error, numerics_file, numerics_error};
    s = mpt_report_write(o.out, &o, rows, n_done, &scale, &plots);
    if (s == MPT_OK) s = mpt_report_write_compare_json(&o, rows, n_done);
    printf("\n");
    mpt_report_write_table(stdout, rows, n_done);
    if (!ref)
        printf("(no fp32 run in --precisions: no relative L2 distance)\n");
    else
        printf("(for scale: training moved the fp32 weights by ||w_end - w_init|| / ||w_end|| = %.3e)\n",
               scale.fp32_travel);
    mpt_report_write_machine(stdout, &machine);
    mpt_report_write_kernels(stdout, rows, n_done);
    mpt_report_write_instruments(stdout, rows, n_done);
    printf("\nreport: %s/report.md\n", o.out);
    if (plot_file) printf("plot:   %s/%s\n", o.out, plot_file);
    if (numerics_file) printf("numerics plot: %s/%s\n", o.out, numerics_file);
    mpt_outdir_close(&od);
    plan_free(&pl);
    if (s != MPT_OK) return mpt_cli_fail("compare", s);
    return 0;
}
