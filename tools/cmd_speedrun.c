/*
 * tools/cmd_speedrun.c - `mptrain speedrun` (issue 34): the recipe, and its runs.
 *
 * The recipe is a list of options of mptrain train and compare (recipe[] below), applied over the defaults exactly as
 * a command line is, so `mptrain speedrun --print-recipe | xargs mptrain train --precision bf16 --seed 3 --cpu-kernels K
 * --threads N` trains the speedrun's seed-3 bf16 run bit for bit, K the kernel set that run used (speedrun's default
 * auto chooses per run and its report names the choice; train's default is emulate) and N its threads
 * (tests/test_speedrun.c checks it with emulate). How it was found, and what each part
 * bought, is docs/speedrun.md.
 *
 * The runs: every seed in every precision (seed-major: a seed's precisions one after another, so a drift of the
 * machine's load falls on all precisions alike), each one run of tools/run.h into --out/seed-<S>/<precision>/ with the
 * files of mptrain train. A run evaluates after each epoch, and the recipe has one: its only evaluation is the final
 * one, with no evaluation inside the time to result that the recipe does not need (a recipe of more epochs would count
 * its intermediate evaluations there). Each run starts its clock after an untimed warm-up on a throw-away copy of the
 * network (--untimed-warmup; mpt_cli_opts.untimed_warmup): its time to result (mpt_run_timing) runs from the start of
 * training to the final evaluation's accuracy on the host.
 * Then tools/speedrun_report.c writes the statistics over the seeds.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpt_config.h"
#include "tools/speedrun.h"
#include "tools/stats.h"

/* The recipe (docs/speedrun.md, "The recipe", with what else was tried): a small CNN with batch norm after every
 * convolution and the hidden linear layer, Adam at 3e-3 annealed to 0 by a cosine schedule over one epoch of batches
 * of 64. Every other setting is mptrain's default (the report lists them all). */
static const mpt_speedrun_option recipe[] = {
    {MPT_OPT_MODEL, "conv(12,3,pad=1),batchnorm,relu,maxpool(2),conv(24,3,pad=1),batchnorm,relu,maxpool(2),flatten,"
                    "linear(64),batchnorm,relu,linear"},
    {MPT_OPT_OPTIMIZER, "adam"},
    {MPT_OPT_LR, "0.003"},
    {MPT_OPT_LR_SCHEDULE, "cosine"},
    {MPT_OPT_BATCH_SIZE, "64"},
    {MPT_OPT_EPOCHS, "1"},
};

const mpt_speedrun_option *mpt_speedrun_recipe(int *n) {
    *n = (int)(sizeof recipe / sizeof recipe[0]);
    return recipe;
}

mpt_status mpt_speedrun_recipe_apply(mpt_cli_opts *o) {
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++) {
        mpt_status s = mpt_cli_apply(o, recipe[i].id, recipe[i].value);
        if (s != MPT_OK) return mpt_errorf(s, "the speedrun's recipe does not parse: %s", mpt_last_error());
        o->given[recipe[i].id - MPT_OPT_FIRST] = 1;
    }
    return MPT_OK;
}

void mpt_speedrun_recipe_print(FILE *f) {
    for (size_t i = 0; i < sizeof recipe / sizeof recipe[0]; i++) {
        fprintf(f, "%s--%s", i ? " " : "", mpt_cli_opt_name(recipe[i].id));
        const char *v = recipe[i].value;
        if (!v) continue;
        char w[4 * MPT_MODEL_SPEC_MAX + 3] = ""; /* each ' becomes 4 bytes, plus the quotes */
        mpt_cli_shell_word(w, sizeof w, v);
        fprintf(f, " %s", w);
    }
    fputc('\n', f);
}

/* ---- the process's clock ------------------------------------------------------------------------------------------ */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds since this process started: the kernel's start time (/proc/self/stat, field 22: clock ticks since boot)
 * against CLOCK_BOOTTIME, the same clock. exec keeps the start time, so mptrain's re-execution of itself
 * (tools/main.c) is inside. NAN when /proc is unreadable. */
static double process_age_s(void) {
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* "pid (comm) state ...": comm may hold spaces and parentheses */
    if (!p) return NAN;
    p++;
    for (int field = 3; field <= 22; field++) { /* p is before field `field` */
        while (*p == ' ') p++;
        if (field == 22) break;
        while (*p && *p != ' ') p++;
    }
    char *end = NULL;
    unsigned long long ticks = strtoull(p, &end, 10);
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec ts;
    if (end == p || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return NAN;
    double age = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - (double)ticks / (double)hz;
    return age >= 0.0 ? age : NAN;
}

/* ---- the command -------------------------------------------------------------------------------------------------- */

/* A flag that would change a run's math is the recipe's to set: said as such, with where to vary it, instead of
 * getopt's "unknown option". Returns MPT_CLI_EXIT_USAGE after the message, 0 when argv holds none. */
static int refuse_recipe_flags(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) break;
        if (strncmp(a, "--", 2) != 0) continue;
        size_t len = strcspn(a + 2, "=");
        for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++) {
            const char *name = mpt_cli_opt_name(id);
            if (strlen(name) != len || strncmp(name, a + 2, len) != 0) continue;
            if (id == MPT_OPT_PRECISION || id == MPT_OPT_SEED) {
                fprintf(stderr, "mptrain speedrun: --%s: the speedrun trains every seed of --seeds in every precision "
                                "of --precisions (e.g. --precisions %s --seeds %s)\n", name,
                        id == MPT_OPT_PRECISION ? "bf16" : "fp32", id == MPT_OPT_PRECISION ? "10" : "3,7");
                return MPT_CLI_EXIT_USAGE;
            }
            if (mpt_cli_opt_recorded(id) && id != MPT_OPT_LIMIT_TRAIN && id != MPT_OPT_CPU_KERNELS) {
                fprintf(stderr, "mptrain speedrun: --%s: the recipe fixes the runs' math (mptrain speedrun "
                                "--print-recipe); to vary it, give mptrain compare the recipe's options and yours: "
                                "mptrain speedrun --print-recipe | xargs mptrain compare --seeds 3 --%s ...\n",
                        name, name);
                return MPT_CLI_EXIT_USAGE;
            }
        }
    }
    return 0;
}

/* The results an earlier speedrun left in --out (held locked): its report and every run directory it could have
 * written, so that a speedrun that fails or is stopped never leaves an earlier one's runs looking like its own. */
static mpt_status clear_earlier(const char *out) {
    MPT_TRY(mpt_outdir_remove_result(out, "report.md"));
    MPT_TRY(mpt_outdir_remove_result(out, "speedrun.json"));
    return mpt_run_clear_seeds(out);
}

/* The default precision list on a GPU whose Tensor Cores take FP8: compare's default list and fp8 (issue 34: "fp8
 * where the device has it"). A CPU emulates FP8 (tens of times slower): there, fp8 only when asked for. */
static void add_fp8_if_device_has_it(mpt_cli_opts *o) {
    if (o->device == MPT_DEVICE_CHOICE_CPU) return;
    mpt_backend *be = NULL;
    char why[640], msg[512];
    if (mpt_run_backend_create(o->device, &be, why, sizeof why) != MPT_OK || !be) return;
    const int fp8 = be->device == MPT_DEVICE_CUDA && be->fp8_support &&
                    be->fp8_support(be, 0, o->fp8.accum, o->fp8.promote, msg, sizeof msg);
    mpt_backend_free(&be);
    if (fp8 && o->n_precisions < MPT_PRECISION_COUNT) o->precisions[o->n_precisions++] = MPT_PRECISION_FP8;
}

int mpt_cmd_speedrun(int argc, char **argv) {
    const double age0 = process_age_s(), t0 = mono_s();
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    mpt_status s = mpt_speedrun_recipe_apply(&o);
    if (s != MPT_OK) return mpt_cli_fail("speedrun", s);
    o.n_seeds = MPT_SPEEDRUN_DEFAULT_SEEDS;
    for (int i = 0; i < o.n_seeds; i++) o.seeds[i] = (uint64_t)i;
    o.untimed_warmup = MPT_SPEEDRUN_DEFAULT_WARMUP;
    int rc = refuse_recipe_flags(argc, argv);
    if (rc != 0) return rc;
    rc = mpt_cli_parse(argc, argv, MPT_CMD_SPEEDRUN, &o);
    if (rc < 0) { /* --help: the recipe follows the options */
        printf("\nThe recipe (--print-recipe):\n  ");
        mpt_speedrun_recipe_print(stdout);
        return 0;
    }
    if (rc != 0) return rc;
    if (o.print_recipe) {
        mpt_speedrun_recipe_print(stdout);
        return 0;
    }
    if (o.n_seeds > 1 && !mpt_stats_available()) {
        fprintf(stderr, "mptrain speedrun: --seeds %d: the confidence intervals need GSL (Student t quantiles), and "
                        "this mptrain was built without it: apt-get install libgsl-dev, then rebuild (meson setup "
                        "--reconfigure build; ./run build)\n", o.n_seeds);
        return MPT_CLI_EXIT_USAGE;
    }
    if (!o.out[0]) snprintf(o.out, sizeof o.out, "runs/speedrun");
    mpt_cpu_set_threads(o.threads);
    for (int i = 0; i < o.n_precisions; i++) { /* switch combinations, before any data is loaded */
        mpt_cli_opts op = o;
        op.precision = o.precisions[i];
        mpt_cli_resolve(&op);
        s = mpt_cli_check_switches(&op);
        if (s != MPT_OK) return mpt_cli_fail("speedrun", s);
    }
    if (!mpt_cli_given(&o, MPT_OPT_PRECISIONS)) add_fp8_if_device_has_it(&o);

    mpt_report_machine machine;
    mpt_report_machine_start(&machine);
    mpt_outdir od = {.fd = -1, .lock_fd = -1};
    s = mpt_outdir_open(&od, o.out, MPT_OUTDIR_USER_LINK, "speedrun");
    if (s == MPT_OK) s = mpt_guard_blas_ready();
    mpt_speedrun_process proc = {.start_s = age0};
    mpt_cli_data cd;
    memset(&cd, 0, sizeof cd);
    if (s == MPT_OK) {
        const double d0 = mono_s();
        s = mpt_cli_data_load(&cd, o.data, o.limit_train, o.limit_test, o.classes, o.data_layout);
        proc.data_read_s = mono_s() - d0;
    }
    if (s == MPT_OK) s = clear_earlier(o.out); /* after the data: a mistyped --data loses no earlier results */
    const int n = o.n_seeds * o.n_precisions;
    mpt_run_result *res = s == MPT_OK ? calloc((size_t)n, sizeof *res) : NULL;
    if (s == MPT_OK && !res) s = mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the results of %d runs", n);
    int done = 0;
    for (int i = 0; s == MPT_OK && i < n; i++) {
        mpt_cli_opts op = o;
        op.precision = o.precisions[i % o.n_precisions];
        op.seed = o.seeds[i / o.n_precisions];
        mpt_cli_resolve(&op);
        s = mpt_report_seed_run_dir(op.out, sizeof op.out, o.out, op.seed, op.precision);
        if (s != MPT_OK) break;
        char label[96];
        snprintf(label, sizeof label, "[seed %llu %s] ", (unsigned long long)op.seed, mpt_precision_name(op.precision));
        printf("%s---- run %d of %d -> %s\n", label, i + 1, n, op.out);
        fflush(stdout);
        s = mpt_run_train(&op, &cd, label, &res[i]);
        done = i + 1;
        free(res[i].final_master); /* the report needs no weights */
        free(res[i].init_master);
        res[i].final_master = res[i].init_master = NULL;
        if (s == MPT_OK && res[i].interrupted)
            s = mpt_errorf(MPT_ERR_INTERRUPTED, "interrupted by %s at step %lld of the run of seed %llu in %s: its "
                           "checkpoint is in %s (the finished runs are beside it); no report.md, which needs every run",
                           mpt_guard_signal_name(res[i].interrupted), (long long)res[i].iterations,
                           (unsigned long long)op.seed, mpt_precision_name(op.precision), op.out);
    }
    const int64_t n_test = cd.d.n_test;
    mpt_cli_data_free(&cd);
    if (s == MPT_OK) {
        mpt_report_machine_end(&machine);
        proc.whole_s = (isfinite(age0) ? age0 : 0.0) + mono_s() - t0;
        proc.whole_cpu_s = cpu_s(); /* the process's CPU time since it started (exec keeps it), all threads */
        const int record = strcmp(o.data, MPT_DEFAULT_DATA_DIR) == 0 && o.limit_train == 0 && o.limit_test == 0;
        mpt_speedrun_runs runs = {.o = &o, .n_seeds = o.n_seeds, .n_precisions = o.n_precisions, .seeds = o.seeds,
                                  .precisions = o.precisions, .res = res, .machine = &machine, .process = &proc,
                                  .threads = mpt_cpu_set_threads(0), .record_data = record, .n_test = n_test};
        s = mpt_speedrun_report(&runs);
    }
    for (int i = 0; res && i < done; i++) mpt_run_result_free(&res[i]);
    free(res);
    mpt_outdir_close(&od);
    if (s != MPT_OK) return mpt_cli_fail("speedrun", s);
    printf("\nreport: %s/report.md\nsummary: %s/speedrun.json\nwhole process: %.2f s from its start to the report "
           "(%.2f s CPU)\n", o.out, o.out, proc.whole_s, proc.whole_cpu_s);
    return 0;
}
