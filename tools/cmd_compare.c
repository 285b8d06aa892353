/*
 * tools/cmd_compare.c - `mptrain compare`: the same model trained in several precisions, side by side.
 *
 * Every run uses the same seed, so the FP32 initial weights (drawn on the host from the seed, then rounded to
 * each working dtype), the shuffles and the dropout masks are the same; only the number formats differ.
 * Each run gets a fresh backend (so its peak-memory figures are its own) and writes into --out/<precision>/.
 * Then: the relative L2 distance of each run's final FP32 master weights from the fp32 run's,
 *   rel_l2 = sqrt(sum_i (w_i - w32_i)^2) / sqrt(sum_i w32_i^2)   (FP64 sums over all parameters),
 * with, for scale, the same distance between the fp32 run's final and initial weights,
 * the table (printed and in report.md) and convergence.png (tools/plot.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

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

int mpt_cmd_compare(int argc, char **argv) {
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    int rc = mpt_cli_parse(argc, argv, MPT_CMD_COMPARE, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;
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

    mpt_cli_result res[MPT_PRECISION_COUNT];
    memset(res, 0, sizeof res);
    int n_done = 0;
    for (int i = 0; i < o.n_precisions && s == MPT_OK; i++) {
        mpt_cli_opts op = o;
        op.precision = o.precisions[i];
        mpt_cli_resolve(&op);
        int len = snprintf(op.out, sizeof op.out, "%s/%s", o.out, mpt_precision_name(op.precision));
        if (len < 0 || (size_t)len >= sizeof op.out) {
            s = mpt_errorf(MPT_ERR_ARG, "--out %s: path too long", o.out);
            break;
        }
        char label[32];
        snprintf(label, sizeof label, "[%s] ", mpt_precision_name(op.precision));
        printf("%s---- training %s in %s -> %s\n", label, op.model, mpt_precision_name(op.precision), op.out);
        fflush(stdout);
        s = mpt_cli_train_run(&op, &cd, label, &res[i]);
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
