/*
 * tools/lab/lab.h - `mptrain lab`: the lessons of mixed-precision training as small experiments on real data.
 *
 * A lesson is a plan of runs (trainings through mpt_run_train, or direct measurements through the engine's
 * kernels), the measurements it reads from them, and a report template filled with those measurements. Every
 * lesson writes <out>/<lesson>/report.md and <out>/<lesson>/<lesson>.png and leaves a one-line conclusion that
 * the runner prints and links from <out>/index.md. A conclusion states the effect as observed or says plainly
 * that it was not observed, by comparing the measured numbers with a stated criterion: the text follows the
 * numbers, never the other way round. `--param KEY=VALUE` changes a lesson's configuration (each lesson lists
 * its keys), which is also how the tests show the "not observed" branch.
 *
 * Sizes: each lesson names its own (mpt_lab_size): the full version, the convincing one, and the --quick version,
 * the smallest run on real data in which the lesson's effect was measured to show. A --quick run that does not
 * show it says so: mpt_lab_report_close appends to the conclusion that this was the smallest version, why that
 * can hide an effect, and the full command with its size.
 *
 * Files: lab.c (the command, shared helpers, index.md), lesson_<name>.c (one lesson each), accum.c (the
 * accumulators of the lesson accumulation, also linked into tests/test_accum).
 */
#ifndef MPT_TOOLS_LAB_H
#define MPT_TOOLS_LAB_H

#include <stdio.h>

#include "engine/checkpoint.h"
#include "tools/report.h"
#include "tools/stats.h"
#include "tools/sweep.h"

#define MPT_LAB_MAX_PARAMS 16

/* How much data a version of a lesson trains on. */
typedef struct mpt_lab_size {
    int64_t n_train;            /* the first n_train Fashion-MNIST training images (<= 60000) */
    int64_t n_test;             /* the first n_test test images (<= 10000) */
    int epochs;                 /* epochs per training run */
    int seeds;                  /* seeds, for the lessons that train several (0 otherwise) */
} mpt_lab_size;

typedef struct mpt_lab_ctx {
    const mpt_cli_data *cd;     /* Fashion-MNIST cut to this lesson's size (a view of the data loaded once) */
    const mpt_cli_opts *base;   /* the settings every run starts from (data, device, epochs, threads) */
    mpt_cli_data view;          /* what cd points at: the loaded data's first rows (owns nothing) */
    mpt_cli_opts opts;          /* what base points at: the command's settings with this lesson's epochs */
    mpt_dist *dist;             /* under mpirun: the job whose ranks share the lesson's runs, else NULL */
    int quick;                  /* --quick: the lesson's quick size */
    int n_seeds;                /* seeds for lessons that need several (the size's seeds) */
    char dir[MPT_CLI_PATH];     /* this lesson's output directory */
    const char *params[MPT_LAB_MAX_PARAMS]; /* "KEY=VALUE" from --param */
    int n_params;
    char conclusion[4096];      /* the one-line (long) conclusion, filled by the lesson */
    int observed;               /* 1 when the lesson's effect was observed */
    const struct mpt_lab_lesson *lesson; /* the lesson run: the --param keys it may read (param_keys) */
    int check_only;             /* 1: read and check the --param values, then return (MPT_LAB_PARAMS_CHECKED) */
} mpt_lab_ctx;

/* In a lesson's run(), once every --param value it reads is read and checked and before anything is trained or
 * written: returns MPT_OK when the lab only checks the values. `mptrain lab` runs every chosen lesson this way first,
 * so a bad value of a later lesson is refused before the earlier lessons spend their time. */
#define MPT_LAB_PARAMS_CHECKED(c)                                                                                      \
    do {                                                                                                               \
        if ((c)->check_only) return MPT_OK;                                                                            \
    } while (0)

typedef struct mpt_lab_lesson {
    const char *name;           /* "tf32" */
    const char *claim;          /* the question the lesson answers, one line: asked, not asserted (the answer is the
                                 * conclusion, filled from the run's measurements; --list has no measurements) */
    const char *params_help;    /* its --param keys and defaults */
    mpt_status (*run)(mpt_lab_ctx *c);
    mpt_lab_size full, quick;   /* the convincing version and the smallest that shows the effect (--quick) */
    const char *param_keys;     /* its --param keys, separated by spaces ("" for none): any other key is refused */
    const char *measured;       /* what its two sizes took when last measured (CPU time, machine, date), for --list */
} mpt_lab_lesson;

/* The lessons, in the order `mptrain lab` runs them. */
extern const mpt_lab_lesson mpt_lab_tf32, mpt_lab_accumulation, mpt_lab_loss_scaling, mpt_lab_master_weights,
    mpt_lab_optimizer_state, mpt_lab_overflow, mpt_lab_noise, mpt_lab_fp8, mpt_lab_softmax, mpt_lab_grad_comm,
    mpt_lab_quantization, mpt_lab_normalization, mpt_lab_scale;

/* Appends printf-style text to b (n bytes, NUL-terminated), cut at the end: a lesson's sentences built in parts. */
__attribute__((format(printf, 3, 4))) void mpt_lab_append(char *b, size_t n, const char *fmt, ...);

/* The value of --param KEY=VALUE as a number, or def when not given. MPT_ERR_ARG naming the key when the
 * value is not a finite number. */
mpt_status mpt_lab_param(const mpt_lab_ctx *c, const char *key, double def, double *out);

/* The value of --param KEY=VALUE as text (the last one when KEY is given more than once), or def. */
const char *mpt_lab_param_text(const mpt_lab_ctx *c, const char *key, const char *def);

/* The value of --param KEY=VALUE as text (or def) that the lesson passes to its runs as the command-line option
 * `id` (--lr, --batch-size, --precision): *out is set once the option accepts it; else MPT_ERR_ARG naming the key,
 * the value and the option's own message ("--param default-batch=0: --batch-size: expected ..."). */
mpt_status mpt_lab_param_flag(const mpt_lab_ctx *c, const char *key, const char *def, mpt_opt_id id,
                              const char **out);

/* The training steps of one run of this lesson with batch size `batch`: ceil(n_train / batch) x epochs. */
int64_t mpt_lab_steps(const mpt_lab_ctx *c, int batch);

/* One GEMM (a: engine/backend.h) through a CPU backend made for it, with the oracle's numerics (the emulate kernel
 * set): the backend prepares the GEMM as a graph build does (gemm_workspace, mpt_backend_reserve_workspace) and runs
 * it. For lessons that measure single products on real operands. MPT_ERR_NOMEM when the workspace cannot be had. */
mpt_status mpt_lab_gemm(const mpt_gemm_args *a);

/* mpt_lab_gemm with its TF32, FP16 and BF16 products summed by summation model m (engine/backend.h
 * mpt_backend_cpu_set_accum: IEEE is mpt_lab_gemm; V100 .. B200 sum as that GPU's Tensor Cores, kernels/cpu/tc_accum.h
 * through the backend). MPT_ERR_ARG naming both when the model has no row for a->math (V100 with TF32 or BF16). */
mpt_status mpt_lab_gemm_accum(const mpt_gemm_args *a, mpt_accum_model m);

/* Linear layer l (1-based) of a checkpoint's mlp-shaped network, ck opened from the file ckpt: fc<l>.weight, FP32
 * [N, K] row-major, into *W and fc<l>.bias, FP32 [N], into *b (malloc'd: the caller frees both), its width into *N,
 * and into *last whether the checkpoint has no fc<l+1>.weight (the head: no ReLU after it). K is the layer's input
 * width (the image's pixels for l = 1, the previous layer's N after). Returns MPT_OK with *W = *b = NULL and *N = 0
 * when there is no fc<l>.weight (past the last layer); MPT_ERR_SHAPE naming ckpt and the tensor when it is not FP32
 * [N, K]; MPT_ERR_NOMEM; the checkpoint's read errors. For lessons that recompute the mlp's layers in FP64. */
mpt_status mpt_lab_fc_read(mpt_checkpoint *ck, const char *ckpt, int l, int64_t K, float **W, float **b, int64_t *N,
                           int *last);

/* A telemetry interval that gives about `points` telemetry steps in a run of `steps` steps (at least 1). */
int64_t mpt_lab_telemetry_every(int64_t steps, int points);
/* "every step" when `every` (a telemetry interval as text, e.g. "12") is "1", else "every 12th step" (English
 * ordinal suffixes: 1st, 2nd, 3rd, 11th-13th), into buf (len bytes); returns buf. For report sentences. */
const char *mpt_lab_every_text(char *buf, size_t len, const char *every);

/* One metric's course over a run: from <lesson dir>/<run>/telemetry.csv, the rows of (tensor, metric) in step
 * order. */
typedef struct mpt_lab_series {
    int n;
    int64_t *step;      /* [n] */
    double *value;      /* [n] */
} mpt_lab_series;

/* Reads the series (free with mpt_lab_series_free). MPT_ERR_IO naming the file when it cannot be read. */
mpt_status mpt_lab_series_read(const mpt_lab_ctx *c, const char *run, const char *tensor, const char *metric,
                               mpt_lab_series *out);
void mpt_lab_series_free(mpt_lab_series *s);

/* Trains one run into <lesson dir>/<name>/ from the base settings plus flags: a NULL-terminated list of
 * "--flag", "value" pairs, as on the command line (a flag without a value, such as --shadow, is given any text as its
 * value, which is ignored). Fills
 * *res (free with mpt_run_result_free). MPT_ERR_ARG naming the flag for a bad one. */
mpt_status mpt_lab_train(mpt_lab_ctx *c, const char *name, const char *const *flags, mpt_run_result *res);

/* One run of a batch: its directory name under the lesson's and its flags (as for mpt_lab_train). */
typedef struct mpt_lab_run {
    const char *name;
    const char *const *flags;
} mpt_lab_run;
#define MPT_LAB_MAX_FLAGS 24  /* entries of a run's flags, "--flag", "value" pairs (the NULL not counted) */
#define MPT_LAB_MAX_BATCH 64

/* Trains n (<= MPT_LAB_MAX_BATCH) independent runs into res[0..n): under mpirun dealt out to the ranks
 * (tools/sweep.c: run i on rank i mod N, results gathered here on rank 0, a failure named with its rank and
 * run), else one after the other. Each run trains exactly as through mpt_lab_train. On failure every res[i]
 * is left empty (free with mpt_run_result_free either way). */
mpt_status mpt_lab_train_batch(mpt_lab_ctx *c, const mpt_lab_run *runs, int n, mpt_run_result *res);

/* ---- accuracy over seeds: a paired design (a lesson trains two or more arms with the same seeds) ---------------- */

/* The `seeds` --param of a lesson that pairs arms over seeds: an integer in [2, max], by default the lesson's size's
 * (c->n_seeds). MPT_ERR_ARG naming --param seeds and the range otherwise. */
mpt_status mpt_lab_seeds(const mpt_lab_ctx *c, int max, int *ns);

/* One run of an arm at one seed, with its own storage: the name "<arm>-seed<k>", the seed as text and the flags. */
typedef struct mpt_lab_seed_run {
    char name[64];
    char seed[16];
    const char *flags[MPT_LAB_MAX_FLAGS + 1];
} mpt_lab_seed_run;

/* The run "<arm>-seed<seed>" of an arm: its flags (as for mpt_lab_train, without --seed) followed by "--seed"
 * "<seed>", kept in *b; returns the run for mpt_lab_train_batch, which points into *b (b must outlive the batch).
 * The arm's flags and the two of --seed must fit MPT_LAB_MAX_FLAGS (a programmer error otherwise). */
mpt_lab_run mpt_lab_seed_run_make(mpt_lab_seed_run *b, const char *arm, int seed, const char *const *flags);

/* The paired comparison of final test accuracies a[i] - b[i] (percent, so differences in percentage points) over
 * n >= 2 seeds, seed i for both a[i] and b[i]: the differences' mean and sd always; their 95% Student t interval
 * and verdict against the equivalence margin of `mptrain compare --seeds` (c->base->margin; tools/stats.h:
 * equivalent, better, worse, inconclusive) when the build has GSL. */
typedef struct mpt_lab_paired {
    mpt_stats_summary diff; /* of a[i] - b[i], pp */
    mpt_stats_paired d;     /* interval and verdict; meaningful only when have_ci */
    int have_ci;            /* 0 in a build without GSL: no interval, no verdict */
} mpt_lab_paired;

/* Fills *p from a[0..n) and b[0..n). MPT_ERR_ARG from mpt_stats_compare_paired (a non-finite accuracy, n < 2);
 * MPT_ERR_NOMEM. */
mpt_status mpt_lab_compare_paired(const mpt_lab_ctx *c, const double *a, const double *b, int n, mpt_lab_paired *p);

/* The interval and verdict of p for tools/sentences.h (mpt_text_paired, mpt_text_verdict_reading), or NULL when the
 * build has none. */
const mpt_stats_paired *mpt_lab_paired_ci(const mpt_lab_paired *p);

/* Whether p's verdict is v (0 without an interval: no verdict is any verdict). */
int mpt_lab_paired_is(const mpt_lab_paired *p, mpt_verdict v);

/* The per-seed table of a paired design into a report (markdown): a row per seed k < n with each arm's accuracy
 * acc[j][k] (percent; arm 0 is the reference) and, per arm j > 0, the difference acc[j][k] - acc[0][k] in pp,
 * headed "<name j> - <name 0> (pp)". */
void mpt_lab_seed_table(FILE *f, int n, int arms, const char *const *names, const double *const *acc);

/* Opens <lesson dir>/report.md and writes its title, the question and the data used. MPT_ERR_IO on failure. */
mpt_status mpt_lab_report_open(mpt_lab_ctx *c, const mpt_lab_lesson *l, FILE **f);

/* Writes the conclusion and the picture's link, and closes the report. In a --quick run whose effect was not
 * observed, first appends to c->conclusion the note naming the full version's command and size. */
mpt_status mpt_lab_report_close(mpt_lab_ctx *c, const mpt_lab_lesson *l, FILE *f, const char *plot_error);

/* Creates <lesson dir>/<file> for writing (a gnuplot script or its data). */
FILE *mpt_lab_open(mpt_lab_ctx *c, const char *file);

/* Publishes a file of mpt_lab_open that is not a gnuplot script (a .dat file): MPT_ERR_IO when a write failed. */
mpt_status mpt_lab_close(mpt_lab_ctx *c, FILE *f, const char *file);

/* Closes the gnuplot script gp (<lesson dir>/<script>, from mpt_lab_open) and runs gnuplot on it. Returns
 * NULL when the picture was drawn; otherwise the reason (a failed write of the script, or gnuplot's error),
 * copied into err (n bytes) for mpt_lab_report_close: a missing picture does not fail the lesson. */
const char *mpt_lab_plot(mpt_lab_ctx *c, FILE *gp, const char *script, char *err, size_t n);

/* `mptrain lab` */
int mpt_cmd_lab(int argc, char **argv);

#endif
