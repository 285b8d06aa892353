/*
 * tools/cli.h - the mptrain command's options and dataset, shared by its files. The command's modules, each with
 * its header (dependencies point down: a file includes only headers of its own row or below):
 *   main.c            dispatch, `mptrain --help`, `--version`
 *   cmd_train.c       `mptrain train`: the command line merged with a checkpoint (--resume), one run
 *   cmd_compare.c     `mptrain compare`: one run per precision (and seed), then report.md and convergence.png
 *   cmd_speedrun.c    `mptrain speedrun`: the fixed Fashion-MNIST recipe over seeds and precisions, timed
 *                     (tools/speedrun.h, prefix mpt_speedrun_); speedrun_report.c: its statistics, report.md and
 *                     speedrun.json
 *   cmd_eval.c        `mptrain eval`: a checkpoint's test loss and accuracy
 *   ptq.c             `mptrain eval --quantize`: post-training quantization of a checkpoint (tools/ptq.h, mpt_ptq_)
 *   cmd_info.c        `mptrain info`: library versions, OpenBLAS, the GPU, NVIDIA_TF32_OVERRIDE
 *   cmd_formats.c     `mptrain formats`: a value in FP32/TF32/BF16/FP16/FP8 and INT8/INT4, and the formats' tables
 *   lab/              `mptrain lab`: the lessons (tools/lab/lab.h)
 *   -- reports of several runs (tools/report.h, prefix mpt_report_; tools/sweep.h, mpt_sweep_) --
 *   report.c          the compare table and report.md
 *   compare_seeds.c   `compare --seeds`: statistics over seeds, the verdict table, report.md, compare.json,
 *                     the mean-and-band convergence.png
 *   plot.c            convergence.png and numerics.png through gnuplot
 *   sweep.c           the runs of compare and lab dealt out to the ranks of an MPI job, results gathered on
 *                     rank 0
 *   stats.c           summaries and the paired t interval with its equivalence verdict (GSL; tools/stats.h; as
 *                     JSON for compare.json and speedrun.json: tools/stats_json.h)
 *   sentences.c       the comparative and causal sentences of reports and lessons, each chosen by the numbers it
 *                     describes, with a branch for the opposite outcome (tools/sentences.h, mpt_text_)
 *   -- one training run (tools/run.h, prefix mpt_run_) --
 *   run.c             the device, setup, the training loop, evaluation, the run's telemetry statistics
 *   run_checkpoint.c  a run's state <-> a safetensors file (engine/checkpoint.h)
 *   run_summary.c     summary.json and the precision map
 *   csv.c             metrics.csv / epochs.csv / telemetry.csv: rows, resume, publish (tools/csv.h, mpt_csv_)
 *   progress.c        the progress bar (tools/progress.h, mpt_progress_)
 *   -- the output directory (tools/outdir.h, mpt_outdir_ / mpt_outfile_) --
 *   outdir.c          the one owner of the files written into --out: lock, exclusive creation, publish sets
 *                     (a run's checkpoint and CSVs committed together, completed after a kill)
 *   -- the process (tools/guards.h, mpt_guard_) --
 *   guards.c          a graceful stop on SIGINT / SIGTERM / SIGHUP / SIGQUIT / SIGALRM / SIGPIPE, a checkpoint on
 *                     SIGUSR1; OpenBLAS and oneDNN under a memory limit
 *   -- the command line (this header, mpt_cli_) --
 *   opts.c            the option table (each option's scope: what a checkpoint records, what a resumed run keeps),
 *                     strict parsing of flags and values, per-command help, the canonical text of each setting,
 *                     the settings the ranks of an MPI job must share (mpt_cli_job_settings)
 *   data.c            the dataset on the host (one load of the rows used, fingerprinted) and on a backend (one copy
 *                     per run)
 *   formats.c         the conversions `formats` shows, through engine/numerics.h (tools/formats.h)
 *
 * Exit codes: 0 success, 1 a failure while running (bad data file, I/O, device), 2 a usage error (unknown or
 * malformed flag, missing value), with a one-line message on stderr that names the flag and what was expected;
 * 128 + the signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT, 142 SIGALRM, 141 SIGPIPE) a run stopped by a
 * signal after saving its state (guards.c).
 */
#ifndef MPT_TOOLS_CLI_H
#define MPT_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "datasets/idx.h"
#include "engine/amp/policy.h"
#include "engine/backend.h"
#include "engine/dist/dist.h"
#include "engine/optim/schedule.h"
#include "engine/status.h"
#include "engine/telemetry/telemetry.h"
#include "engine/train.h"
#include "models/models.h"
#include "tools/guards.h"

#define MPT_CLI_EXIT_FAIL 1 /* = MPT_GUARD_EXIT_FAIL */
#define MPT_CLI_EXIT_USAGE 2
#define MPT_CLI_PATH 4096
#define MPT_CLI_MAX_SEEDS 64
#define MPT_CLI_MAX_EPOCHS 100000

/* Every long option of every command. The value is also getopt_long's return value. What a checkpoint records and
 * a resumed run keeps is each option's scope, in the option table (tools/opts.c, mpt_cli_opt_scope); the order
 * here is the order of the recorded settings in a checkpoint's "config". */
typedef enum mpt_opt_id {
    MPT_OPT_FIRST = 256,
    MPT_OPT_MODEL = MPT_OPT_FIRST,
    MPT_OPT_PRECISION,
    MPT_OPT_OPTIMIZER,
    MPT_OPT_LR,
    MPT_OPT_MOMENTUM,
    MPT_OPT_NESTEROV,
    MPT_OPT_WEIGHT_DECAY,
    MPT_OPT_BETA1,
    MPT_OPT_BETA2,
    MPT_OPT_EPS,
    MPT_OPT_BATCH_SIZE,
    MPT_OPT_SEED,
    MPT_OPT_LOSS_SCALE,
    MPT_OPT_GROWTH_INTERVAL,
    MPT_OPT_LR_SCHEDULE,
    MPT_OPT_WARMUP_STEPS,
    MPT_OPT_MIN_LR,
    MPT_OPT_STEP_SIZE,
    MPT_OPT_GAMMA,
    MPT_OPT_CLIP_NORM,
    MPT_OPT_LIMIT_TRAIN,
    MPT_OPT_VAL_SPLIT,
    MPT_OPT_STANDARDIZE,
    MPT_OPT_INJECT_NONFINITE,
    MPT_OPT_EPOCHS,
    MPT_OPT_MASTER_WEIGHTS,   /* issue #10's switches (recorded; absent from older checkpoints: defaults) */
    MPT_OPT_UPDATE_ROUNDING,
    MPT_OPT_OPTIMIZER_STATE,
    MPT_OPT_NONFINITE,
    MPT_OPT_TF32_MATMUL,
    MPT_OPT_TF32_CONV,
    MPT_OPT_SCALER,
    MPT_OPT_GROWTH_FACTOR,
    MPT_OPT_BACKOFF_FACTOR,
    MPT_OPT_HYSTERESIS,
    MPT_OPT_SCALE_FLOOR,
    MPT_OPT_SCALE_CEILING,
    MPT_OPT_CPU_KERNELS,      /* issue #25 (recorded; absent from older checkpoints: emulate) */
    MPT_OPT_FP8_SCALING,      /* issue #23's FP8 recipe (recorded; absent from older checkpoints: defaults) */
    MPT_OPT_AMAX_HISTORY,
    MPT_OPT_FP8_MARGIN,
    MPT_OPT_FP8_POW2_SCALES,
    MPT_OPT_MX_SCALE,
    MPT_OPT_FP8_ACCUM,
    MPT_OPT_FP8_PROMOTE,
    MPT_OPT_FP8_SATURATE,
    MPT_OPT_ACCUM_MODEL,      /* issue #39 (recorded when not ieee; absent from older checkpoints: ieee) */
    MPT_OPT_NORM_STATS,       /* issue 37 (recorded when not fp32; absent from older checkpoints: fp32) */
    MPT_OPT_QAT,              /* issue #38 (recorded when not none: absent from older checkpoints and runs without it) */
    MPT_OPT_DEVICE,
    MPT_OPT_CUDA_GRAPH,
    MPT_OPT_DATA,
    MPT_OPT_CLASSES,          /* issue 33: the data's class count and rank-4 layout (a checkpoint records the data's
                                 shape in its own metadata, "data") */
    MPT_OPT_DATA_LAYOUT,
    MPT_OPT_OUT,
    MPT_OPT_RESUME,
    MPT_OPT_LIMIT_TEST,
    MPT_OPT_THREADS,
    MPT_OPT_LOG_EVERY,
    MPT_OPT_SAVE_EVERY,
    MPT_OPT_MAX_STEPS,
    MPT_OPT_PROGRESS,
    MPT_OPT_TELEMETRY,
    MPT_OPT_SHADOW,
    MPT_OPT_DATA_PARALLEL,
    MPT_OPT_GRAD_COMM,
    MPT_OPT_COMM_TIMEOUT,
    MPT_OPT_PRECISIONS,
    MPT_OPT_SEEDS,
    MPT_OPT_MARGIN,
    MPT_OPT_PLOT_TIMEOUT,
    MPT_OPT_CHECKPOINT,
    MPT_OPT_PRINT_RECIPE,     /* issue 34: speedrun's own */
    MPT_OPT_UNTIMED_WARMUP,
    MPT_OPT_QUANTIZE,         /* eval's post-training quantization (issue #38): command options */
    MPT_OPT_GRANULARITY,
    MPT_OPT_ACTIVATIONS,
    MPT_OPT_CALIBRATE,
    MPT_OPT_HELP,
    MPT_OPT_END
} mpt_opt_id;
#define MPT_OPT_COUNT (MPT_OPT_END - MPT_OPT_FIRST)

/* What an option is to a run, which decides what a checkpoint records and what a resumed run keeps (the column
 * `scope` of the option table). */
typedef enum mpt_opt_scope {
    MPT_SCOPE_MATH = 1,        /* defines the run's math: recorded in checkpoints, fixed when resuming (a different
                                  value given with --resume is refused) */
    MPT_SCOPE_MATH_OPTIONAL,   /* the same, added after the first checkpoints were written: a checkpoint without the
                                  key trained with the option's default */
    MPT_SCOPE_LENGTH,          /* the run's length (--epochs): recorded, and a resumed run may extend it */
    MPT_SCOPE_INVOCATION,      /* this invocation only (device, paths, logging, instruments): a resumed run takes it
                                  from the command line */
    MPT_SCOPE_COMMAND,         /* a command's own option (compare's --precisions, eval's --checkpoint, --help): no
                                  run records it */
} mpt_opt_scope;

/* Which commands take an option (bit mask). */
typedef enum mpt_cmd_mask {
    MPT_CMD_TRAIN = 1,
    MPT_CMD_COMPARE = 2,
    MPT_CMD_EVAL = 4,
    MPT_CMD_INFO = 8,
    MPT_CMD_SPEEDRUN = 16,
} mpt_cmd_mask;

typedef enum mpt_device_choice {
    MPT_DEVICE_CHOICE_AUTO = 0, /* the GPU when one is usable, else the CPU */
    MPT_DEVICE_CHOICE_CPU,
    MPT_DEVICE_CHOICE_CUDA,     /* the GPU or an error */
} mpt_device_choice;

typedef enum mpt_progress_mode {
    MPT_PROGRESS_AUTO = 0, /* a progress bar when stdout is a terminal */
    MPT_PROGRESS_ON,
    MPT_PROGRESS_OFF,
} mpt_progress_mode;

/* The loss-scaler presets of --scaler: each system's documented defaults (tools/opts.c, scaler_presets[]). */
typedef enum mpt_scaler_preset {
    MPT_SCALER_MPTRAIN = 0, /* GradScaler's factors and interval, with Apex's floor 1 and ceiling 2^24 */
    MPT_SCALER_PYTORCH,
    MPT_SCALER_APEX,
    MPT_SCALER_DEEPSPEED,
    MPT_SCALER_KERAS,
    MPT_SCALER_PRESET_COUNT
} mpt_scaler_preset;

/* All settings of one invocation. Defaults: mpt_cli_opts_default(). */
typedef struct mpt_cli_opts {
    /* the run's math (recorded) */
    char model[MPT_MODEL_SPEC_MAX]; /* a built-in model's name or a spec's canonical text (models/models.h) */
    mpt_precision precision;
    mpt_optim_kind optimizer;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    int nesterov;
    int batch;
    uint64_t seed;
    mpt_loss_scaling loss_scaling;
    double loss_scale_value;     /* dynamic: the initial scale; static: the fixed scale; none: 1 */
    int growth_interval;
    mpt_lr_kind lr_schedule;
    int64_t warmup_steps;
    double min_lr;
    int64_t step_size;
    double gamma;
    double clip_norm;            /* 0 = off */
    int64_t limit_train;         /* 0 = all training images */
    double val_split;            /* fraction of the (limited) training set held out for validation */
    int standardize;             /* standardise pixels with the training set's mean and std */
    int64_t inject_nonfinite;    /* iteration whose gradients become NaN, -1 = off */
    mpt_master_mode master_weights;      /* fp32 (default) | none */
    mpt_update_rounding update_rounding; /* nearest (default) | stochastic (needs master_weights none) */
    mpt_dtype optimizer_state;           /* F32 (default) | BF16 | F16 */
    mpt_nonfinite_mode nonfinite;        /* skip (default) | apply */
    int tf32_matmul, tf32_conv;          /* 1 = TF32 allowed; resolved: on in tf32 mode, off otherwise */
    mpt_cpu_kernels cpu_kernels;         /* EMULATE (default) | NATIVE: the CPU backend's kernel set (engine/backend.h) */
    int cpu_kernels_auto;                /* --cpu-kernels auto, not yet resolved: a run measures both sets and keeps
                                            the faster in cpu_kernels (tools/run.c), then clears this */
    mpt_scaler_preset scaler;            /* where the loss-scaler defaults below come from */
    double growth_factor, backoff_factor, scale_floor, scale_ceiling;
    int hysteresis;
    mpt_accum_model accum_model;         /* IEEE (default) | a GPU's Tensor Core summation model for the CPU backend's
                                            emulated TF32/FP16/BF16 GEMMs (engine/backend.h) */
    mpt_norm_stats norm_stats;           /* FP32 (default, the policy) | an ablation of the normalisations' forward
                                            statistics: 16-bit arithmetic, the one-pass formula (engine/amp/policy.h) */
    mpt_fp8_recipe fp8;                  /* FP8 modes: --fp8-scaling, --amax-history, --fp8-margin, --fp8-pow2-scales,
                                            --mx-scale, --fp8-accum, --fp8-promote, --fp8-saturate */
    mpt_qat qat;                         /* --qat: none (default) | int8 | int4 (engine/quant.h) */
    /* this invocation */
    int epochs;
    mpt_device_choice device;
    int cuda_graph;              /* 1 (default): on the CUDA backend, run each step as one replayed CUDA Graph */
    char data[MPT_CLI_PATH];
    int classes;                 /* --classes K: 0 = the largest training label + 1 */
    mpt_idx_layout data_layout;  /* --data-layout: rank-4 image files [N, C, H, W] (default) or [N, H, W, C] */
    char out[MPT_CLI_PATH];      /* "" = the command's default */
    char resume[MPT_CLI_PATH];   /* "" = start fresh */
    int64_t limit_test;          /* 0 = all test images */
    int threads;                 /* CPU GEMM threads (OpenBLAS and oneDNN), 0 = OpenBLAS's default */
    int64_t log_every;           /* read the step statistics every N iterations */
    int64_t save_every;          /* 0 = checkpoint only at the end */
    int64_t max_steps;           /* 0 = no limit: stop after `epochs` */
    mpt_progress_mode progress;
    int64_t telemetry;           /* measure numerics every N steps (telemetry.csv), 0 = off */
    int shadow;                  /* with telemetry: run the FP32 shadow twin on telemetry steps */
    int data_parallel;           /* train: one rank of an MPI job (engine/dist), batch sharded over the ranks */
    mpt_grad_comm grad_comm;     /* data-parallel: the dtype gradients travel in (default fp32) */
    double comm_timeout;         /* data-parallel: seconds a step's collective may take before the job is aborted */
    mpt_precision precisions[MPT_PRECISION_COUNT]; /* compare */
    int n_precisions;
    uint64_t seeds[MPT_CLI_MAX_SEEDS]; /* compare --seeds: the seeds, distinct */
    int n_seeds;                 /* 0 = --seeds not given: one run per precision with --seed */
    double margin;               /* compare: equivalence margin in accuracy points (default 0.3) */
    double plot_timeout;         /* compare, lab: seconds gnuplot may take per picture (default 60) */
    int print_recipe;            /* speedrun --print-recipe: print the recipe's options and exit */
    int64_t untimed_warmup;      /* training steps of a throw-away copy of the network on the run's backend before the
                                    run's clocks start (speedrun --untimed-warmup; 0 = none): the run itself trains
                                    bit-identically with or without them (tools/run.c) */
    char checkpoint[MPT_CLI_PATH]; /* eval */
    int quantize;                /* eval --quantize: -1 (none) or the weights' mpt_qformat */
    int per_channel;             /* eval --granularity: 1 channel (default), 0 tensor */
    int act_int8;                /* eval --activations int8: INT8 activations and integer GEMMs/convolutions */
    int calibrate;               /* eval --calibrate N: training batches for the activations' amax (default 16) */
    unsigned char given[MPT_OPT_COUNT]; /* 1 for each option given on the command line */
} mpt_cli_opts;

/* The defaults (see `mptrain train --help`). */
void mpt_cli_opts_default(mpt_cli_opts *o);

/* Whether option id was given on the command line. */
int mpt_cli_given(const mpt_cli_opts *o, mpt_opt_id id);

/* Parses argv[1..argc) (argv[0] is the command name, e.g. "train") into *o, which holds the defaults.
 * Returns 0 on success, MPT_CLI_EXIT_USAGE after printing a message naming the flag to stderr, or -1 when
 * --help was given (the help has been printed to stdout: the caller exits 0). */
int mpt_cli_parse(int argc, char **argv, mpt_cmd_mask cmd, mpt_cli_opts *o);

/* The checks between settings that a command line must pass (--nesterov needs --optimizer sgd and
 * --momentum > 0), also applied to a checkpoint's recorded settings. MPT_ERR_ARG naming the flags. */
mpt_status mpt_cli_check(const mpt_cli_opts *o);

/* Sets option id from its text, as if "--<name> <arg>" had been given (arg NULL for flags without a
 * value). MPT_ERR_ARG with a message naming the flag for a malformed or out-of-range value. */
mpt_status mpt_cli_apply(mpt_cli_opts *o, mpt_opt_id id, const char *arg);

/* The option's long name without dashes ("batch-size"). */
const char *mpt_cli_opt_name(mpt_opt_id id);

/* Whether the option takes a value (--lr X) rather than being a flag (--nesterov). */
int mpt_cli_opt_takes_value(mpt_opt_id id);

/* The option's scope (its row of the option table). */
mpt_opt_scope mpt_cli_opt_scope(mpt_opt_id id);
/* Whether a checkpoint records the option (MATH, MATH_OPTIONAL, LENGTH); the recorded ones, in mpt_opt_id order, are
 * a checkpoint's "config" and summary.json's. */
int mpt_cli_opt_recorded(mpt_opt_id id);
/* Whether a checkpoint of a run with settings o writes recorded option id into its "config": every recorded option,
 * except a MATH_OPTIONAL one whose row says it is written only when it differs from its default (--accum-model), so
 * that the checkpoints of runs that leave it alone are byte for byte those written before it existed. A checkpoint
 * without the key trained with the default, which is how reading it takes the key's absence. */
int mpt_cli_opt_written(const mpt_cli_opts *o, mpt_opt_id id);

/* Whether a checkpoint's "config" holds the option: a recorded one, except an option whose row says written_if_set at
 * its default value (--qat none), so that a run without it writes the config of the checkpoints written before the
 * option existed, byte for byte; a reader takes the absent key as the default (MATH_OPTIONAL). */
int mpt_cli_opt_written(const mpt_cli_opts *o, mpt_opt_id id);

/* A resumed run's settings from the checkpoint's (*out) and the command line's (*cli): every INVOCATION option takes
 * the command line's value (given or default) and given-flag, a LENGTH option the command line's when given. The
 * MATH options stay the checkpoint's (mpt_cli_check_resume refuses a different one). */
void mpt_cli_take_invocation(mpt_cli_opts *out, const mpt_cli_opts *cli);

/* The canonical text of a recorded setting (what mpt_cli_apply accepts back and gives the same value for;
 * floats with 17 significant digits). buf: at least 64 bytes. */
const char *mpt_cli_format(const mpt_cli_opts *o, mpt_opt_id id, char *buf, size_t len);

/* Fills in the defaults that depend on other settings: the weight decay (0.01 for adamw, as in PyTorch,
 * unless given), the loss scaling (dynamic for fp16 with the --scaler preset's initial scale, none otherwise,
 * unless given), the scaler knobs not given (from the --scaler preset) and the TF32 switches not given (on in
 * tf32 mode, off otherwise). Call once the precision is final (compare: once per precision). */
void mpt_cli_resolve(mpt_cli_opts *o);

/* The flags that count steps against the run's length, known once the data is: the cosine warmup must end before
 * the last of the epochs x batches_per_epoch steps (or --max-steps), and --inject-nonfinite, when given, must name one
 * of the epochs' steps (0-based). MPT_ERR_ARG naming the flag and the numbers. */
mpt_status mpt_cli_check_schedule(const mpt_cli_opts *o, int64_t batches_per_epoch);

/* After mpt_cli_check_schedule: notes on f (each line prefixed with label) on step counts that make a flag change
 * nothing here: --inject-nonfinite past --max-steps, within the epochs (this invocation stops first, a run resumed from
 * its checkpoint injects it); --lr-schedule step whose first decay (--step-size) comes after the epochs' last step;
 * --save-every no smaller than the steps this invocation runs (only the final checkpoint is written). */
void mpt_cli_schedule_notes(const mpt_cli_opts *o, int64_t batches_per_epoch, const char *label, FILE *f);

/* Checks combinations of resolved switches: --update-rounding stochastic needs --master-weights none,
 * --nonfinite apply needs a loss scaling other than dynamic, --scale-ceiling >= --scale-floor. MPT_ERR_ARG
 * naming the flags. */
mpt_status mpt_cli_check_switches(const mpt_cli_opts *o);

/* 1 when the TF32 switches reach some GEMM or convolution of the run's model: --tf32-matmul on, or --tf32-conv on and
 * the model has convolutions (a spec that does not parse counts as having them). Says nothing of the mode (only its
 * FP32 operands become TF32) or of NVIDIA_TF32_OVERRIDE. */
int mpt_cli_tf32_reaches(const mpt_cli_opts *o);

/* Prints what the issue #10 switches do in this run, one line each (prefixed with label): notes for
 * switches that change nothing in this precision, the warning of --nonfinite apply, and that
 * NVIDIA_TF32_OVERRIDE=0 (tf32_override) wins over the TF32 switches. */
void mpt_cli_switch_notes(const mpt_cli_opts *o, int tf32_override, const char *label, FILE *f);

/* The training configuration for the engine (engine/train.h) from resolved options; batches_per_epoch gives
 * the cosine schedule its horizon (epochs x batches_per_epoch). */
mpt_train_config mpt_cli_train_config(const mpt_cli_opts *o, int64_t batches_per_epoch);

/* Prints a command's help (cmd: one mask bit) to f. */
void mpt_cli_print_help(FILE *f, mpt_cmd_mask cmd);

/* x, with a NaN of either sign made the positive one: printf writes it "nan" (a NaN from arithmetic is negative on
 * x86 and printed "-nan"), the same in the CSVs (gnuplot's `set datafile missing 'nan'`) and on the screen. */
double mpt_cli_nan_plain(double x);

/* Text from the command line (or a file) as a message quotes it: control bytes escaped (mpt_escape), and cut to a
 * readable length: more than 64 bytes become the first 48 and "... (N bytes)". Returns buf (cap: >= 256). */
const char *mpt_cli_echo(char *buf, size_t cap, const char *text);

/* Appends text to b (cap bytes, NUL-terminated) as one word a POSIX shell reads back unchanged: as it is when it holds
 * only [A-Za-z0-9_.,:=+-/@%], else single-quoted, a ' inside written '\'' (close, escaped quote, reopen). Cut at cap
 * (the caller sizes b for its words). Used where mptrain prints a command to run: speedrun's recipe, the continue
 * command of a stopped run. */
void mpt_cli_shell_word(char *b, size_t cap, const char *text);

/* Prints "mptrain <command>: <message>" for the current mpt_last_error() and returns MPT_CLI_EXIT_USAGE for
 * MPT_ERR_ARG, 128 + the signal for MPT_ERR_INTERRUPTED (a stop by a signal, tools/guards.h), MPT_CLI_EXIT_FAIL
 * otherwise. */
int mpt_cli_fail(const char *command, mpt_status s);

/* Whether a command failed for want of memory (mpt_cli_fail with MPT_ERR_NOMEM): main then ends the process with
 * _exit, after flushing, without exit()'s handlers: OpenBLAS's destructor joins its threads, and one may loop in
 * blas_memory_alloc. */
int mpt_cli_failed_nomem(void);

/* ---- the dataset (data.c) ---------------------------------------------------------------------------- */

/* The fingerprint of a dataset as loaded (docs/checkpoints.md "The data fingerprint"): per part, its item count and
 * the CRC-32 (zlib's, ISO 3309) of its images' bytes followed by its labels' bytes. Recorded in every checkpoint,
 * checked when a run resumes, and compared between the ranks of an MPI job. */
typedef struct mpt_cli_data_fp {
    int64_t n_train, n_test;
    uint32_t train_crc32, test_crc32;
} mpt_cli_data_fp;

/* The dataset on the host, loaded once, limited to --limit-train / --limit-test rows. */
typedef struct mpt_cli_data {
    mpt_mnist d;
    char dir[MPT_CLI_PATH];
    mpt_cli_data_fp fp;      /* of d as loaded (a view with fewer rows, as the lab's, computes its own) */
} mpt_cli_data;

/* Loads `dir` (MPT_ERR_IO naming the directory and the Debian package when it is missing) with the class count
 * `classes` (0: the largest training label + 1) and rank-4 images in `layout` (datasets/idx.h), reading only the first
 * limit_train / limit_test rows (0 = all; MPT_ERR_NOMEM before allocating when they cannot fit in memory), and
 * fingerprints them (cd->fp). */
mpt_status mpt_cli_data_load(mpt_cli_data *cd, const char *dir, int64_t limit_train, int64_t limit_test, int classes,
                             mpt_idx_layout layout);
/* The data's shape as a network's input (models/models.h): channels, height, width, classes. */
mpt_model_input mpt_cli_data_input(const mpt_mnist *d);
/* A file-name-safe short name of a model for default output directories: a built-in model's name, or "spec-" and 8
 * hex digits of the spec's FNV-1a hash. buf: at least 16 bytes. */
const char *mpt_cli_model_short(const char *model, char *buf, size_t len);

/* The fingerprint of d's rows (cd->fp for the data as loaded). */
void mpt_cli_data_fingerprint(const mpt_mnist *d, mpt_cli_data_fp *fp);

/* The fingerprint as text (opts.c), "60000 training images crc32 1a2b3c4d, 10000 test images crc32 5e6f7a8b". buf: >= 96. */
const char *mpt_cli_data_fp_text(const mpt_cli_data_fp *fp, char *buf, size_t len);
void mpt_cli_data_free(mpt_cli_data *cd);

/* The dataset in one backend's memory (MPT_MEM_DATA), copied once per run. */
typedef struct mpt_cli_device_data {
    mpt_backend *be;
    uint8_t *train_images, *train_labels; /* U8 [n_train, dim], [n_train] */
    uint8_t *test_images, *test_labels;   /* U8 [n_test, dim], [n_test] */
    size_t bytes;
} mpt_cli_device_data;

mpt_status mpt_cli_data_upload(mpt_cli_device_data *dd, mpt_backend *be, const mpt_mnist *d);
void mpt_cli_data_release(mpt_cli_device_data *dd);

/* ---- the settings the ranks of an MPI job share (opts.c) -------------------------------------------------- */

#define MPT_CLI_JOB_MAX 96

/* A list of (name, canonical text) pairs for mpt_dist_agree (engine/dist/dist.h); the strings are malloc'd. */
typedef struct mpt_cli_job {
    int n;
    mpt_dist_item item[MPT_CLI_JOB_MAX];
} mpt_cli_job;

/* Adds one setting (name as the user writes it, "--lr"; the value printf-style). */
void mpt_cli_job_add(mpt_cli_job *j, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The settings every rank of a job of `cmd` (MPT_CMD_TRAIN: --data-parallel; MPT_CMD_COMPARE) must share, from
 * resolved options o: the mptrain version, every recorded setting (the text a checkpoint records), the invocation's
 * settings that change what the ranks compute together (--max-steps, --log-every, --telemetry, --shadow, --device,
 * --limit-test; train: --grad-comm, `threads` (the GEMM threads in use: the summation order a resumed run must
 * repeat) and `resumed` (the run and step resumed, or "none"); compare: --precisions, --seeds, --out), and the
 * data's fingerprint. Appended to *j (which mpt_cli_job_free releases). */
void mpt_cli_job_settings(const mpt_cli_opts *o, mpt_cmd_mask cmd, const mpt_cli_data_fp *fp, int threads,
                          const char *resumed, mpt_cli_job *j);

void mpt_cli_job_free(mpt_cli_job *j);

/* ---- commands ---------------------------------------------------------------------------------------- */

int mpt_cmd_train(int argc, char **argv);
int mpt_cmd_compare(int argc, char **argv);
int mpt_cmd_eval(int argc, char **argv);
int mpt_cmd_info(int argc, char **argv);
int mpt_cmd_formats(int argc, char **argv);
int mpt_cmd_speedrun(int argc, char **argv);

#endif
