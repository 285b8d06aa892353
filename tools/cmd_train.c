/*
 * tools/cmd_train.c - `mptrain train`: the command line merged with a checkpoint's settings (--resume), the MPI
 * job of --data-parallel joined, then one training run (tools/run.h) and its closing lines.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/report.h"
#include "tools/run.h"
#include "tools/sentences.h"

/* The MPI job this process is one rank of (mptrain train --data-parallel), else NULL. */
static mpt_dist *train_dist;

static int train_with(const mpt_cli_opts *op, const char *resumed);

/* Merges a command line with a checkpoint's settings: the checkpoint's math, the command line's invocation
 * settings; a math flag given with a different value is an error. */
static mpt_status merge_resume(const mpt_cli_opts *cli, mpt_cli_opts *out, mpt_run_state *rs) {
    mpt_cli_opts ck;
    mpt_cli_opts_default(&ck);
    MPT_TRY(mpt_run_checkpoint_read_config(cli->resume, &ck, rs));
    static char a[MPT_MODEL_SPEC_MAX + 64], b[MPT_MODEL_SPEC_MAX + 64];
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++) {
        const mpt_opt_scope sc = mpt_cli_opt_scope(id);
        if (!mpt_cli_given(cli, id) || (sc != MPT_SCOPE_MATH && sc != MPT_SCOPE_MATH_OPTIONAL)) continue;
        if (id == MPT_OPT_CPU_KERNELS && cli->cpu_kernels_auto) continue; /* auto: the set the run measured and kept */
        mpt_cli_format(cli, id, a, sizeof a);
        mpt_cli_format(&ck, id, b, sizeof b);
        if (strcmp(a, b) != 0)
            return mpt_errorf(MPT_ERR_ARG,
                              "--%s %s conflicts with the checkpoint's %s (--resume %s continues the run with its "
                              "own settings; drop the flag or start a new run)",
                              mpt_cli_opt_name(id), a, b, cli->resume);
    }
    *out = ck;
    mpt_cli_take_invocation(out, cli); /* device, paths, logging, instruments, --epochs when given: the option table */
    /* the class count the network was built for, unless given (then the data shapes are checked in setup()) */
    if (!mpt_cli_given(cli, MPT_OPT_CLASSES) && rs->has_data) out->classes = rs->data.classes;
    /* From here on "given" means given on this command line: the notes on flags that change nothing in this precision
     * speak of those (reading the checkpoint marked every recorded setting given, and every resume of an fp32 run
     * said the FP8 flags, which nobody gave, change nothing). The values stay the checkpoint's. */
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++) {
        const mpt_opt_scope sc = mpt_cli_opt_scope(id);
        if (sc == MPT_SCOPE_MATH || sc == MPT_SCOPE_MATH_OPTIONAL) out->given[id - MPT_OPT_FIRST] = cli->given[id - MPT_OPT_FIRST];
    }
    if (rs->threads > 0) { /* a CPU run: its GEMM thread count decides its summation order */
        /* the count --threads gives here: OpenBLAS caps it (its MAX_THREADS, 64 in Debian's build), and the run
         * recorded the count it ran with */
        const int asked = mpt_cli_given(cli, MPT_OPT_THREADS) ? mpt_cpu_set_threads(cli->threads) : 0;
        if (mpt_cli_given(cli, MPT_OPT_THREADS) && asked != rs->threads)
            return mpt_errorf(MPT_ERR_ARG,
                              "--threads %d differs from the %d thread(s) the checkpoint's run used: the CPU GEMMs split "
                              "their sums by thread count, so the resumed run would not be bit-exact (drop --threads to "
                              "continue with %d)",
                              cli->threads, rs->threads, rs->threads);
        out->threads = rs->threads;
    }
    /* --data-parallel and --grad-comm are checked against the checkpoint's ranks and wire in setup() */
    return MPT_OK;
}

/* A resume whose checkpoint already reached --epochs or --max-steps: it would train no step, and its outputs (a
 * summary of zero epochs, a "stopped at step N" evaluation) would replace the finished run's. It says so in one
 * line and touches nothing, --out included (exit 0: a script that resumes after every preemption may run it once
 * more than needed). Needs no data: the checkpoint's position alone decides (setup() checks it against the data
 * when there is something to train). */
static int nothing_left(const mpt_cli_opts *o, const mpt_run_state *rs) {
    const int at_epochs = rs->epoch >= o->epochs, at_max = o->max_steps > 0 && rs->iteration >= o->max_steps;
    if (!at_epochs && !at_max) return 0;
    if (mpt_dist_env_rank() != 0) return 1; /* under mpirun every rank ends here, unjoined: rank 0 says it */
    if (at_epochs)
        printf("mptrain train: nothing to do: the checkpoint is at epoch %lld of %d (step %lld, all epochs done); "
               "nothing was trained or written (a larger --epochs continues the run)\n",
               (long long)rs->epoch, o->epochs, (long long)rs->iteration);
    else
        printf("mptrain train: nothing to do: the checkpoint is at step %lld, --max-steps is %lld; nothing was "
               "trained or written (a larger --max-steps continues the run)\n",
               (long long)rs->iteration, (long long)o->max_steps);
    return 1;
}

int mpt_cmd_train(int argc, char **argv) {
    mpt_cli_opts cli, o;
    mpt_cli_opts_default(&cli);
    int rc = mpt_cli_parse(argc, argv, MPT_CMD_TRAIN, &cli);
    if (rc != 0) return rc < 0 ? 0 : rc;
    mpt_run_state rs; /* read again by mpt_run_train */
    char resumed[96] = ""; /* the run and step a data-parallel job's ranks resume, which they must agree on */
    if (cli.resume[0]) {
        mpt_status s = merge_resume(&cli, &o, &rs);
        if (s != MPT_OK) return mpt_cli_fail("train", s);
        snprintf(resumed, sizeof resumed, "run %s at step %lld", rs.run_id[0] ? rs.run_id : "(no id)",
                 (long long)rs.iteration);
    } else {
        o = cli;
        mpt_cli_resolve(&o);
    }
    mpt_status cs = mpt_cli_check_switches(&o);
    if (cs != MPT_OK) return mpt_cli_fail("train", cs);
    if (cli.resume[0] && nothing_left(&o, &rs)) return 0;
    int launched = mpt_dist_env_size();
    if (!o.data_parallel && launched > 1) { /* N copies of one run writing one --out: refused, by rank 0's voice */
        if (mpt_dist_env_rank() != 0) return MPT_CLI_EXIT_USAGE;
        fprintf(stderr, "mptrain train: started as one of %d MPI ranks without --data-parallel: every rank would "
                        "train the same run into the same --out; add --data-parallel to train one model on the %d "
                        "ranks, or use `mpirun -np %d mptrain compare` (or lab) for independent runs\n",
                launched, launched, launched);
        return MPT_CLI_EXIT_USAGE;
    }
    if (o.data_parallel) {
        cs = mpt_dist_init(&train_dist, o.grad_comm);
        if (cs != MPT_OK) return mpt_cli_fail("train", cs);
        mpt_dist_set_timeout(train_dist, o.comm_timeout);
        if (launched == 0)
            printf("note: --data-parallel without a launcher trains as 1 rank; `mpirun -np N mptrain train "
                   "--data-parallel ...` trains on N\n");
        int n = mpt_dist_size(train_dist);
        if (o.batch % n != 0) {
            mpt_dist_free(&train_dist);
            fprintf(stderr, "mptrain train: --data-parallel: --batch-size %d (the global batch) must be divisible by "
                            "the %d ranks\n", o.batch, n);
            return MPT_CLI_EXIT_USAGE;
        }
        /* Only rank 0 speaks: the others' stdout goes nowhere (their errors still reach stderr). */
        if (mpt_dist_rank(train_dist) != 0 && !freopen("/dev/null", "w", stdout)) {
            mpt_dist_free(&train_dist);
            fprintf(stderr, "mptrain train: cannot redirect rank output to /dev/null (%s)\n", strerror(errno));
            return MPT_CLI_EXIT_FAIL;
        }
    }
    mpt_run_join(train_dist);
    int rc_dp = train_with(&o, resumed);
    fflush(stdout);
    mpt_run_join(NULL);
    if (train_dist) mpt_guard_stop_done();
    /* a rank failing alone aborts the job (its peers must not hang); else every rank exits with the worst code */
    return mpt_dist_finish(&train_dist, rc_dp);
}

/* --telemetry: what was measured, one line filled from the measurements, and numerics.png (writer only).
 * Appends the names of the files written to `files`. */
static void telemetry_closing(const mpt_cli_opts *o, const mpt_run_result *res, int writer, char *files, size_t n) {
    const mpt_telemetry_stat *ls = mpt_run_stat(res, "amp", "loss_scale");
    double steps = ls ? (double)ls->count : 0.0;
    size_t k = strlen(files);
    k += (size_t)snprintf(files + k, n - k, ", telemetry.csv, exponents.csv");
    if (steps == 0.0) {
        printf("telemetry: no telemetry step ran (it measures one step in %lld, and the run had %lld steps); "
               "telemetry.csv holds only its header\n", (long long)o->telemetry, (long long)res->iterations);
        return;
    }
    printf("telemetry: %.0f step%s measured (one every %lld; docs/numerics.md)", steps, steps == 1.0 ? "" : "s",
           (long long)o->telemetry);
    double fl = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac"), fl1 = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_ACT_GRAD,
                                                                                  "flush_frac@S=1");
    double sub = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_ACT_GRAD, "made_subnormal_frac");
    const mpt_mode_desc *mode = mpt_mode_info(o->precision);
    if (isfinite(fl)) { /* the FP8 modes keep activation gradients in BF16 */
        printf(": activation gradients rounded to %s flushed to zero %.3g%%", mode->act_name, 100.0 * fl);
        if (isfinite(fl1)) printf(" (had the loss scale been 1: %.3g%%)", 100.0 * fl1);
        if (isfinite(sub)) printf(", made subnormal %.3g%%", 100.0 * sub);
    } else {
        printf(": no activation gradient is rounded into a 16-bit format in %s", mpt_precision_name(o->precision));
    }
    double lost = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_PARAMS, "lost_frac");
    double lost16 = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit");
    if (isfinite(lost)) {
        printf("; weight updates lost %.3g%%", 100.0 * lost);
        if (isfinite(lost16)) printf(" (had they gone to the 16-bit copy: %.3g%%)", 100.0 * lost16);
    }
    const double g_fl = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac"),
                 g_sub = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_subnormal_frac"),
                 g_sat = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_sat_frac"),
                 o_lost = mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac@other_format") +
                          mpt_run_stat_mean(res, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_subnormal_frac@other_format");
    if (isfinite(g_fl)) { /* the FP8 casts of the gradient operands, and in the other format */
        const int e5 = mode->fp8_fmt[2] == MPT_DTYPE_E5M2;
        printf("; FP8 gradient casts (%s) flushed %.3g%%, made subnormal %.3g%%, saturated %.3g%% (in %s: %.3g%% "
               "flushed or subnormal)", e5 ? "E5M2" : "E4M3", 100.0 * g_fl, 100.0 * g_sub, 100.0 * g_sat,
               e5 ? "E4M3" : "E5M2", 100.0 * o_lost);
    }
    if (o->shadow) { /* the largest activation error against the FP32 twin */
        double worst = -1.0;
        const char *where = NULL;
        for (int i = 0; i < res->n_telemetry; i++) {
            const mpt_telemetry_stat *t = &res->telemetry[i];
            size_t len = strlen(t->tensor);
            if (strcmp(t->metric, "twin_rel_l2") != 0 || len < 4 || strcmp(t->tensor + len - 4, ".out") != 0 ||
                t->count == 0)
                continue;
            if (t->sum / (double)t->count > worst) {
                worst = t->sum / (double)t->count;
                where = t->tensor;
            }
        }
        if (where) printf("; largest activation error against the FP32 twin %.3g, at %s", worst, where);
    }
    printf("\n");
    if (!writer) return;
    mpt_report_row row = {o->precision, res, NAN, "."};
    if (mpt_report_plot_numerics(o->out, &row, 1, o->telemetry) == MPT_OK) {
        k = strlen(files);
        snprintf(files + k, n - k, ", numerics.png");
    } else {
        printf("no numerics.png: %s\n", mpt_last_error());
    }
}

/* The rest of mptrain train once the options are final (and, with --data-parallel, the MPI job joined). */
static int train_with(const mpt_cli_opts *op, const char *resumed) {
    mpt_cli_opts o = *op;
    mpt_status s;
    char shortname[32];
    if (!o.out[0])
        snprintf(o.out, sizeof o.out, "runs/%s-%s", mpt_cli_model_short(o.model, shortname, sizeof shortname),
                 mpt_precision_name(o.precision));
    const int threads = mpt_cpu_set_threads(o.threads);
    s = mpt_guard_blas_ready();
    if (s != MPT_OK) return mpt_cli_fail("train", s);

    mpt_cli_data cd;
    s = mpt_cli_data_load(&cd, o.data, o.limit_train, o.limit_test, o.classes, o.data_layout);
    if (s != MPT_OK) return mpt_cli_fail("train", s);
    if (train_dist) { /* the ranks train one run: the same settings, data and resumed step, or none trains */
        mpt_cli_job job = {0};
        mpt_cli_job_settings(&o, MPT_CMD_TRAIN, &cd.fp, threads, resumed, &job);
        s = mpt_dist_agree(train_dist, job.item, job.n);
        mpt_cli_job_free(&job);
        if (s != MPT_OK) {
            mpt_cli_data_free(&cd);
            /* every rank has the line; rank 0 says it (the others' stderr would repeat it) */
            return mpt_dist_rank(train_dist) == 0 ? mpt_cli_fail("train", s) : MPT_CLI_EXIT_USAGE;
        }
    }
    mpt_run_result res;
    s = mpt_run_train(&o, &cd, "", &res);
    mpt_cli_data_free(&cd);
    if (s != MPT_OK) {
        mpt_run_result_free(&res);
        return mpt_cli_fail("train", s);
    }
    if (res.interrupted) { /* run.c said where everything is and how to continue */
        int sig = res.interrupted;
        mpt_run_result_free(&res);
        return 128 + sig;
    }
    char masters_mib[64], sd[16];
    if (res.mem_peak[MPT_MEM_MASTER] == 0)
        snprintf(masters_mib, sizeof masters_mib, "none (%s)",
                 o.master_weights == MPT_MASTER_NONE ? "--master-weights none" : "the FP32 weights are their own");
    else
        snprintf(masters_mib, sizeof masters_mib, "%.2f MiB", (double)res.mem_peak[MPT_MEM_MASTER] / 1048576.0);
    printf("final test accuracy %.2f%% (best %.2f%% at epoch %d), %lld steps, %d skipped, final loss scale %g\n",
           100.0 * res.final_test_acc, 100.0 * res.best_test_acc, res.best_epoch, (long long)res.iterations,
           (int)res.steps_skipped, (double)res.final_scale);
    /* A refused final save wrote no checkpoint: name only the files this run wrote, and say which checkpoint
     * (an earlier step's, or none) is on disk. */
    char ckpt_note[MPT_CLI_PATH + 480] = "";
    char why[400] = ""; /* what was not finite: a master weight, the optimizer state or a scaler value */
    if (res.checkpoint_refused) {
        char ckpt_path[MPT_CLI_PATH + 64];
        snprintf(ckpt_path, sizeof ckpt_path, "%s/%s", o.out, MPT_CLI_CHECKPOINT_FILE);
        mpt_text_checkpoint_refused(why, sizeof why, access(ckpt_path, F_OK) == 0, res.checkpoint_refused_why);
        snprintf(ckpt_note, sizeof ckpt_note, "; %s: %s", MPT_CLI_CHECKPOINT_FILE, why);
    }
    char files[256] = "metrics.csv, epochs.csv, summary.json";
    if (!res.checkpoint_refused) strcat(files, ", " MPT_CLI_CHECKPOINT_FILE);
    if (o.telemetry > 0) telemetry_closing(&o, &res, !train_dist || mpt_dist_rank(train_dist) == 0, files, sizeof files);
    printf("peak memory %.1f MiB: weights and activations %.2f MiB (weights %.2f MiB), update state %.2f MiB (masters %s, "
           "optimizer state %.2f MiB in %s, weight gradients), the rest data, kernel workspace and telemetry; wrote "
           "%s/{%s}%s\n",
           (double)res.mem_peak_total / 1048576.0, (double)mpt_report_model_bytes(&res, 0) / 1048576.0,
           (double)res.mem_peak[MPT_MEM_WEIGHT] / 1048576.0, (double)mpt_report_model_bytes(&res, 1) / 1048576.0,
           masters_mib,
           (double)res.mem_peak[MPT_MEM_OPTIM] / 1048576.0, mpt_cli_format(&o, MPT_OPT_OPTIMIZER_STATE, sd, sizeof sd),
           o.out, files, ckpt_note);
    /* No checkpoint of the final weights: the run cannot be resumed or evaluated from here, so a script must see a
     * failure (exit 1), though the run's other files are written (summary.json's "checkpoint_refused" says why).
     * In-process runs (compare, lab) are not failed by it: they read mpt_run_result. */
    const int refused = res.checkpoint_refused;
    fflush(stdout); /* the reason is the last line, also when stdout is a pipe */
    if (refused)
        fprintf(stderr, "mptrain train: failed: %s: %s; the other outputs are in %s\n", MPT_CLI_CHECKPOINT_FILE, why,
                o.out);
    mpt_run_result_free(&res);
    return refused ? MPT_CLI_EXIT_FAIL : 0;
}
