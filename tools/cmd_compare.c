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

#include "tools/cli.h"
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

/* Trains o->model in precision p with seed `seed` into dir, labelled "[<label>] " on the progress lines. */
static mpt_status train_one(const mpt_cli_opts *o, const mpt_cli_data *cd, mpt_precision p, uint64_t seed,
                            const char *dir, const char *label, mpt_cli_result *res) {
    mpt_cli_opts op = *o;
    op.precision = p;
    op.seed = seed;
    mpt_cli_resolve(&op);
    int len = snprintf(op.out, sizeof op.out, "%s", dir);
    if (len < 0 || (size_t)len >= sizeof op.out) return mpt_errorf(MPT_ERR_ARG, "--out %s: path too long", o->out);
    char lab[64];
    snprintf(lab, sizeof lab, "[%s] ", label);
    printf("%s---- training %s in %s -> %s\n", lab, op.model, mpt_precision_name(p), op.out);
    fflush(stdout);
    return mpt_cli_train_run(&op, cd, lab, res);
}

/* compare --seeds: every precision with every seed; statistics over seeds (tools/compare_seeds.c). */
static int compare_seeds(const mpt_cli_opts *o, const mpt_cli_data *cd) {
    int ns = o->n_seeds, np = o->n_precisions;
    mpt_cli_result *res = calloc((size_t)ns * (size_t)np, sizeof *res);
    double *l2 = malloc((size_t)ns * (size_t)np * sizeof *l2);
    mpt_status s = MPT_OK;
    if (!res || !l2) s = mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the results of %d runs", ns * np);
    int ref = -1;
    for (int p = 0; p < np; p++)
        if (o->precisions[p] == MPT_PRECISION_FP32) ref = p;
    for (int k = 0; k < ns && s == MPT_OK; k++) {
        mpt_cli_result *row = &res[k * np];
        for (int p = 0; p < np && s == MPT_OK; p++) {
            char dir[MPT_CLI_PATH], label[64];
            s = mpt_cli_seed_run_dir(dir, sizeof dir, o->out, o->seeds[k], o->precisions[p]);
            snprintf(label, sizeof label, "seed %llu %s", (unsigned long long)o->seeds[k],
                     mpt_precision_name(o->precisions[p]));
            if (s == MPT_OK) s = train_one(o, cd, o->precisions[p], o->seeds[k], dir, label, &row[p]);
        }
        if (s != MPT_OK) break;
        /* the distances of this seed's runs to its fp32 run; then the weights are no longer needed */
        for (int p = 0; p < np; p++)
            l2[k * np + p] = ref >= 0 && row[p].n_master == row[ref].n_master
                                 ? rel_l2(row[p].final_master, row[ref].final_master, row[ref].n_master) : NAN;
        for (int p = 0; p < np; p++) {
            free(row[p].final_master);
            free(row[p].init_master);
            row[p].final_master = row[p].init_master = NULL;
        }
    }
    if (s == MPT_OK) {
        mpt_cli_seed_runs runs = {o->out, ns, np, o->seeds, o->precisions, res, l2};
        const char *plot_file = "convergence.png";
        char plot_error[600] = "";
        mpt_status ps = mpt_cli_plot_seeds(&runs);
        if (ps != MPT_OK) {
            snprintf(plot_error, sizeof plot_error, "%s", mpt_last_error());
            fprintf(stderr, "mptrain compare: no plot: %s\n", plot_error);
            plot_file = NULL;
        }
        s = mpt_cli_write_seeds_report(o, &runs, plot_file, plot_error);
        if (s == MPT_OK) {
            printf("\nreport: %s/report.md\nsummary: %s/compare.json\n", o->out, o->out);
            if (plot_file) printf("plot:   %s/%s\n", o->out, plot_file);
        }
    }
    if (res)
        for (int i = 0; i < ns * np; i++) mpt_cli_result_free(&res[i]);
    free(res);
    free(l2);
    return s == MPT_OK ? 0 : mpt_cli_fail("compare", s);
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
    if (!o.out[0]) snprintf(o.out, sizeof o.out, "runs/compare-%s", o.model);
    mpt_status s = mpt_cli_mkdirs(o.out);
    if (s != MPT_OK) return mpt_cli_fail("compare", s);
    mpt_cli_set_threads(o.threads);

    for (int i = 0; i < o.n_precisions; i++) { /* switch combinations, before any data is loaded */
        mpt_cli_opts op = o;
        op.precision = o.precisions[i];
        mpt_cli_resolve(&op);
        s = mpt_cli_check_switches(&op);
        if (s != MPT_OK) return mpt_cli_fail("compare", s);
    }
    mpt_cli_data cd;
    s = mpt_cli_data_load(&cd, o.data, o.limit_train, o.limit_test);
    if (s != MPT_OK) return mpt_cli_fail("compare", s);
    if (o.n_seeds > 1) {
        rc = compare_seeds(&o, &cd);
        mpt_cli_data_free(&cd);
        return rc;
    }

    mpt_cli_result res[MPT_PRECISION_COUNT];
    memset(res, 0, sizeof res);
    int n_done = 0;
    for (int i = 0; i < o.n_precisions && s == MPT_OK; i++) {
        char dir[MPT_CLI_PATH + 8];
        snprintf(dir, sizeof dir, "%s/%s", o.out, mpt_precision_name(o.precisions[i]));
        s = train_one(&o, &cd, o.precisions[i], o.seed, dir, mpt_precision_name(o.precisions[i]), &res[i]);
        if (s == MPT_OK) n_done++;
    }
    mpt_cli_data_free(&cd);
    if (s != MPT_OK) {
        for (int i = 0; i < o.n_precisions; i++) mpt_cli_result_free(&res[i]);
        return mpt_cli_fail("compare", s);
    }

    const mpt_cli_result *ref = NULL;
    for (int i = 0; i < n_done; i++)
        if (o.precisions[i] == MPT_PRECISION_FP32) ref = &res[i];
    mpt_cli_compare_row rows[MPT_PRECISION_COUNT];
    for (int i = 0; i < n_done; i++) {
        rows[i].precision = o.precisions[i];
        rows[i].r = &res[i];
        rows[i].rel_l2 = ref && res[i].n_master == ref->n_master
                             ? rel_l2(res[i].final_master, ref->final_master, ref->n_master) : NAN;
    }
    mpt_cli_compare_ref scale = {NAN};
    if (ref) scale.fp32_travel = rel_l2(ref->init_master, ref->final_master, ref->n_master);

    const char *plot_file = "convergence.png";
    char plot_error[600] = "";
    s = mpt_cli_plot(o.out, o.precisions, n_done);
    if (s != MPT_OK) {
        snprintf(plot_error, sizeof plot_error, "%s", mpt_last_error());
        fprintf(stderr, "mptrain compare: no plot: %s\n", plot_error);
        plot_file = NULL;
    }
    const char *numerics_file = NULL;
    char numerics_error[600] = "";
    if (o.telemetry > 0) {
        numerics_file = "numerics.png";
        s = mpt_cli_plot_numerics(o.out, rows, n_done);
        if (s != MPT_OK) {
            snprintf(numerics_error, sizeof numerics_error, "%s", mpt_last_error());
            fprintf(stderr, "mptrain compare: no numerics plot: %s\n", numerics_error);
            numerics_file = NULL;
        }
    }
    mpt_cli_plot_info plots = {plot_file, plot_error, numerics_file, numerics_error};
    s = mpt_cli_write_report(o.out, &o, rows, n_done, &scale, &plots);
    if (s == MPT_OK) s = mpt_cli_write_compare_json(&o, rows, n_done);
    printf("\n");
    mpt_cli_write_table(stdout, rows, n_done);
    if (!ref)
        printf("(no fp32 run in --precisions: no relative L2 distance)\n");
    else
        printf("(for scale: training moved the fp32 weights by ||w_end - w_init|| / ||w_end|| = %.3e)\n",
               scale.fp32_travel);
    printf("\nreport: %s/report.md\n", o.out);
    if (plot_file) printf("plot:   %s/%s\n", o.out, plot_file);
    if (numerics_file) printf("numerics plot: %s/%s\n", o.out, numerics_file);
    for (int i = 0; i < o.n_precisions; i++) mpt_cli_result_free(&res[i]);
    if (s != MPT_OK) return mpt_cli_fail("compare", s);
    return 0;
}
