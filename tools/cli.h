/*
 * tools/cli.h - the mptrain command's internals, shared by its files:
 *   main.c            dispatch, `mptrain --help`, `--version`
 *   opts.c            the option table, strict parsing of flags and values, per-command help, the canonical
 *                     text of each setting (what a checkpoint records and a resumed run compares)
 *   data.c            the dataset on the host (one load) and on a backend (one copy per run)
 *   cmd_train.c       `mptrain train` and mpt_cli_train_run(), the training loop that `compare` reuses
 *   cmd_compare.c     `mptrain compare`: one run per precision, then report.md and convergence.png
 *   cmd_eval.c        `mptrain eval`: a checkpoint's test loss and accuracy
 *   cmd_info.c        `mptrain info`: library versions, OpenBLAS, the GPU, NVIDIA_TF32_OVERRIDE
 *   run_checkpoint.c  a run's state <-> a safetensors file (engine/checkpoint.h)
 *   report.c          metrics.csv / epochs.csv, summary.json, report.md
 *   compare_seeds.c   `compare --seeds`: statistics over seeds, the verdict table, report.md, compare.json,
 *                     the mean-and-band convergence.png
 *   cmd_formats.c     `mptrain formats`: a value in FP32/TF32/BF16/FP16/FP8 and the formats' table
 *   formats.c         the conversions it shows, through kernels/elemwise.h (tools/formats.h)
 *   sweep.c           the runs of compare and lab dealt out to the ranks of an MPI job, results gathered on
 *                     rank 0; atomic report files
 *   stats.c           summaries and the paired t interval with its equivalence verdict (GSL; tools/stats.h)
 *   plot.c            convergence.png through gnuplot
 *
 * Exit codes: 0 success, 1 a failure while running (bad data file, I/O, device), 2 a usage error (unknown or
 * malformed flag, missing value), with a one-line message on stderr that names the flag and what was expected.
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

#define MPT_CLI_EXIT_FAIL 1
#define MPT_CLI_EXIT_USAGE 2
#define MPT_CLI_PATH 4096
#define MPT_CLI_MAX_SEEDS 64

/* Every long option of every command. The value is also getopt_long's return value. */
typedef enum mpt_opt_id {
    MPT_OPT_FIRST = 256,
    /* settings that define a run's math: recorded in checkpoints, fixed when resuming */
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
    MPT_OPT_LAST_RECORDED = MPT_OPT_SCALE_CEILING,
    /* settings of one invocation */
    MPT_OPT_EPOCHS,
    MPT_OPT_DEVICE,
    MPT_OPT_CUDA_GRAPH,
    MPT_OPT_DATA,
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
    MPT_OPT_PRECISIONS,
    MPT_OPT_SEEDS,
    MPT_OPT_MARGIN,
    MPT_OPT_CHECKPOINT,
    MPT_OPT_HELP,
    MPT_OPT_END
} mpt_opt_id;
#define MPT_OPT_COUNT (MPT_OPT_END - MPT_OPT_FIRST)

/* Which commands take an option (bit mask). */
typedef enum mpt_cmd_mask {
    MPT_CMD_TRAIN = 1,
    MPT_CMD_COMPARE = 2,
    MPT_CMD_EVAL = 4,
    MPT_CMD_INFO = 8,
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
    char model[16];
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
    mpt_scaler_preset scaler;            /* where the loss-scaler defaults below come from */
    double growth_factor, backoff_factor, scale_floor, scale_ceiling;
    int hysteresis;
    /* this invocation */
    int epochs;
    mpt_device_choice device;
    int cuda_graph;              /* 1 (default): on the CUDA backend, run each step as one replayed CUDA Graph */
    char data[MPT_CLI_PATH];
    char out[MPT_CLI_PATH];      /* "" = the command's default */
    char resume[MPT_CLI_PATH];   /* "" = start fresh */
    int64_t limit_test;          /* 0 = all test images */
    int threads;                 /* OpenBLAS threads, 0 = OpenBLAS's default */
    int64_t log_every;           /* read the step statistics every N iterations */
    int64_t save_every;          /* 0 = checkpoint only at the end */
    int64_t max_steps;           /* 0 = no limit: stop after `epochs` */
    mpt_progress_mode progress;
    int64_t telemetry;           /* measure numerics every N steps (telemetry.csv), 0 = off */
    int shadow;                  /* with telemetry: run the FP32 shadow twin on telemetry steps */
    int data_parallel;           /* train: one rank of an MPI job (engine/dist), batch sharded over the ranks */
    mpt_grad_comm grad_comm;     /* data-parallel: the dtype gradients travel in (default fp32) */
    mpt_precision precisions[MPT_PRECISION_COUNT]; /* compare */
    int n_precisions;
    uint64_t seeds[MPT_CLI_MAX_SEEDS]; /* compare --seeds: the seeds, distinct */
    int n_seeds;                 /* 0 = --seeds not given: one run per precision with --seed */
    double margin;               /* compare: equivalence margin in accuracy points (default 0.3) */
    char checkpoint[MPT_CLI_PATH]; /* eval */
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

/* The canonical text of a recorded setting (what mpt_cli_apply accepts back and gives the same value for;
 * floats with 17 significant digits). buf: at least 64 bytes. */
const char *mpt_cli_format(const mpt_cli_opts *o, mpt_opt_id id, char *buf, size_t len);

/* Fills in the defaults that depend on other settings: the weight decay (0.01 for adamw, as in PyTorch,
 * unless given), the loss scaling (dynamic for fp16 with the --scaler preset's initial scale, none otherwise,
 * unless given), the scaler knobs not given (from the --scaler preset) and the TF32 switches not given (on in
 * tf32 mode, off otherwise). Call once the precision is final (compare: once per precision). */
void mpt_cli_resolve(mpt_cli_opts *o);

/* Checks combinations of resolved switches: --update-rounding stochastic needs --master-weights none,
 * --nonfinite apply needs a loss scaling other than dynamic, --scale-ceiling >= --scale-floor. MPT_ERR_ARG
 * naming the flags. */
mpt_status mpt_cli_check_switches(const mpt_cli_opts *o);

/* Prints what the issue #10 switches do in this run, one line each (prefixed with label): notes for
 * switches that change nothing in this precision, the warning of --nonfinite apply, and that
 * NVIDIA_TF32_OVERRIDE=0 (tf32_override) wins over the TF32 switches. */
void mpt_cli_switch_notes(const mpt_cli_opts *o, int tf32_override, const char *label, FILE *f);

/* The training configuration for the engine (engine/train.h) from resolved options; batches_per_epoch gives
 * the cosine schedule its horizon (epochs x batches_per_epoch). */
mpt_train_config mpt_cli_train_config(const mpt_cli_opts *o, int64_t batches_per_epoch);

/* Prints a command's help (cmd: one mask bit) to f. */
void mpt_cli_print_help(FILE *f, mpt_cmd_mask cmd);

/* Prints "mptrain <command>: <message>" for the current mpt_last_error() and returns MPT_CLI_EXIT_USAGE for
 * MPT_ERR_ARG, MPT_CLI_EXIT_FAIL otherwise. */
int mpt_cli_fail(const char *command, mpt_status s);

/* Sets the OpenBLAS thread count (n > 0) and returns the count in effect. */
int mpt_cli_set_threads(int n);

/* ---- the dataset (data.c) ---------------------------------------------------------------------------- */

/* The dataset on the host, loaded once, limited to --limit-train / --limit-test rows. */
typedef struct mpt_cli_data {
    mpt_mnist d;
    char dir[MPT_CLI_PATH];
} mpt_cli_data;

/* Loads `dir` (MPT_ERR_IO naming the directory and the Debian package when it is missing) and keeps the
 * first limit_train / limit_test rows (0 = all). */
mpt_status mpt_cli_data_load(mpt_cli_data *cd, const char *dir, int64_t limit_train, int64_t limit_test);
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

/* ---- devices (cmd_train.c) ----------------------------------------------------------------------------- */

/* Creates the backend for --device; *why receives one line saying which device and why (auto's choice).
 * MPT_ERR_DEVICE when --device cuda was asked for and no GPU is usable. */
mpt_status mpt_cli_backend_create(mpt_device_choice choice, mpt_backend **out, char *why, size_t len);

/* ---- one training run (cmd_train.c) ------------------------------------------------------------------- */

#define MPT_CLI_MAX_EPOCHS 100000

/* What a finished run reports (to summary.json, the compare table and the caller). */
typedef struct mpt_cli_result {
    char out_dir[MPT_CLI_PATH];
    char device[256];
    int epochs_run;              /* epochs completed in this invocation */
    int64_t iterations;          /* iterations so far (resumed ones included) */
    double final_test_acc, best_test_acc, final_test_loss, final_train_loss;
    int best_epoch;              /* 1-based epoch of best_test_acc */
    double final_val_acc, final_val_loss; /* NAN without --val-split */
    double mean_epoch_s;         /* mean training time per completed epoch (evaluation excluded; host clock) */
    double samples_per_s;        /* training samples / training time, over the whole invocation (host clock) */
    double *epoch_s;             /* [epochs_run] training seconds per epoch (malloc'd): host monotonic clock from the
                                    epoch's first operation to the stream drained at its end */
    double *epoch_gpu_s;         /* [epochs_run] the same epochs' device seconds between two CUDA events recorded at
                                    the host clock's start and end (malloc'd); NULL on a backend without device
                                    timing (CPU) */
    size_t mem_peak[MPT_MEM_COUNT];
    size_t mem_peak_total;
    int32_t steps_skipped, floor_hits;
    int32_t steps_nonfinite;     /* steps applied with non-finite gradients (--nonfinite apply) */
    int weights_nonfinite;       /* the final weights hold inf/NaN (only possible with --nonfinite apply) */
    int checkpoint_refused;      /* the final save was refused (non-finite weights): the checkpoint file, if any,
                                  * is an earlier step's */
    char cuda_graph[704];        /* mpt_trainer_graph_status: on (with counts), off and why, or not applicable */
    float final_scale;
    float *final_master;         /* all FP32 master weights, concatenated in parameter order (malloc'd) */
    float *init_master;          /* the same at the start of this invocation (malloc'd) */
    int64_t n_master;
    mpt_telemetry_stat *telemetry; /* [n_telemetry] last and mean of each (tensor, metric) (malloc'd), or NULL */
    int n_telemetry;
} mpt_cli_result;

void mpt_cli_result_free(mpt_cli_result *r);

/* Trains one run with resolved options o on data cd (already loaded), writing into o->out: metrics.csv,
 * epochs.csv, summary.json and checkpoint.safetensors. `label` prefixes the progress lines ("" or "fp16").
 * Fills *res. */
mpt_status mpt_cli_train_run(const mpt_cli_opts *o, const mpt_cli_data *cd, const char *label,
                             mpt_cli_result *res);

/* Evaluates the trainer on a U8 dataset in backend memory: rows 0..n-1 in order, padded last batch
 * (ignored rows). *loss = mean cross-entropy over the n rows, *acc = fraction correct. */
void mpt_cli_evaluate(mpt_trainer *t, const uint8_t *images, const uint8_t *labels, const int32_t *idx_dev,
                      int64_t n, int64_t dim, float mean, float inv_std, double *loss, double *acc);

/* Creates the output directory and its parents (mkdir -p). MPT_ERR_IO naming the path. */
mpt_status mpt_cli_mkdirs(const char *path);

/* Closes f, a file being written at path, and says whether every write reached it: MPT_OK, or MPT_ERR_IO
 * "<path>: cannot write (<reason>)" when a write failed (a full disk) or the close did. The buffered rest is
 * flushed first, so that a failure there gives its errno as the reason; when an earlier fprintf failed and
 * stdio has nothing left to write, the reason is said to be unknown (errno has moved on since). f is closed
 * in every case. */
mpt_status mpt_cli_close_written(FILE *f, const char *path);

/* ---- run checkpoints (run_checkpoint.c) ------------------------------------------------------------------ */

/* Where a run is, besides its tensors: what a resumed run needs to continue exactly. */
typedef struct mpt_cli_run_state {
    int64_t iteration;       /* training iterations done (== trainer->iteration) */
    int64_t epoch;           /* 0-based epoch the next iteration belongs to */
    int64_t batch;           /* batches of that epoch already done (0 at an epoch boundary) */
    float mean, inv_std;     /* pixel standardisation in use (0 and 1 without --standardize) */
    int64_t n_train, n_val;  /* rows trained on and held out (checked again on resume) */
    double best_test_acc;    /* best test accuracy so far and its 1-based epoch (0: none yet) */
    int best_epoch;
    int ranks;               /* data-parallel ranks that trained it (1: a single process, and older checkpoints) */
    mpt_grad_comm grad_comm; /* their wire dtype (fp32 for single-process runs) */
    double epoch_loss_sum;   /* sum and count of the losses logged so far in the unfinished epoch (0 at a */
    int64_t epoch_loss_n;    /* boundary): epochs.csv's train_loss of a resumed epoch averages all of them */
    int threads;             /* the CPU backend's OpenBLAS threads (0: a GPU run, or not recorded) */
} mpt_cli_run_state;

/* The checkpoint file name inside an output directory. */
#define MPT_CLI_CHECKPOINT_FILE "checkpoint.safetensors"

/* Writes the trainer's FP32 master weights (named like the parameters: "fc1.weight"), its optimizer state
 * ("fc1.weight:exp_avg", ...) and, in the metadata, the run's recorded settings ("config"), `rs` ("state"),
 * the loss-scaler state ("scaler"), the RNG streams ("rng") and the precision map; atomically
 * (engine/checkpoint.h). Synchronises the backend. */
mpt_status mpt_cli_checkpoint_save(const char *path, mpt_trainer *t, const mpt_cli_opts *o,
                                   const mpt_cli_run_state *rs);

/* Reads a checkpoint's metadata: applies its recorded settings to *o (which holds the defaults) and fills
 * *rs. MPT_ERR_FORMAT naming the file when the metadata is missing or malformed. */
mpt_status mpt_cli_checkpoint_read_config(const char *path, mpt_cli_opts *o, mpt_cli_run_state *rs);

/* Loads a checkpoint written for the same model and settings into a created trainer: master weights (and
 * working copies rewritten from them), optimizer state, loss-scaler state and the iteration counter.
 * MPT_ERR_SHAPE when the tensors do not match the model. */
mpt_status mpt_cli_checkpoint_load(const char *path, mpt_trainer *t);

/* ---- reports (report.c) ----------------------------------------------------------------------------------- */

/* The graph's precision map as a JSON array (a json_t *, returned as void * to keep jansson out of this
 * header): one object per node {"node", "op", "input", "weight", "output", "math"}. */
void *mpt_cli_precision_map_json(const mpt_graph *g);

/* Writes summary.json into dir. */
mpt_status mpt_cli_write_summary(const char *dir, const mpt_cli_opts *o, const mpt_cli_result *r,
                                 const mpt_graph *g, const mpt_policy *policy);

/* One row of the compare table. */
typedef struct mpt_cli_compare_row {
    mpt_precision precision;
    const mpt_cli_result *r;
    double rel_l2;           /* ||w - w_fp32|| / ||w_fp32|| of the final masters; NAN without an fp32 run */
} mpt_cli_compare_row;

/* What the report says about the scale of rel_l2: ||w_end - w_init|| / ||w_end|| of the fp32 run (how far
 * training moved the weights), NAN without an fp32 run. */
typedef struct mpt_cli_compare_ref {
    double fp32_travel;
} mpt_cli_compare_ref;

/* Writes the comparison table as Markdown (the same text `compare` prints). */
void mpt_cli_write_table(FILE *f, const mpt_cli_compare_row *rows, int n);

/* The pictures report.md refers to: a file name, or NULL with a message saying why there is none. */
typedef struct mpt_cli_plot_info {
    const char *convergence, *convergence_error;
    const char *numerics, *numerics_error; /* both NULL when telemetry was off */
} mpt_cli_plot_info;

/* Writes report.md into dir: settings, the table, what each precision does, how to read the plots, and with
 * telemetry a "Numerics" section (per precision: the tensors that underflow most, lost updates per layer, the
 * error against the FP32 twin per layer, each with a sentence filled from the measurements). */
mpt_status mpt_cli_write_report(const char *dir, const mpt_cli_opts *o, const mpt_cli_compare_row *rows, int n,
                                const mpt_cli_compare_ref *ref, const mpt_cli_plot_info *plots);

/* ---- several seeds (compare_seeds.c) ---------------------------------------------------------------------- */

/* The runs of `compare --seeds`: res[s * n_precisions + p] is seed seeds[s] in precision precisions[p], trained
 * into out/seed-<seed>/<precision>/; rel_l2 is indexed the same way (NAN without an fp32 run). */
typedef struct mpt_cli_seed_runs {
    const char *out;
    int n_seeds, n_precisions;
    const uint64_t *seeds;
    const mpt_precision *precisions;
    const mpt_cli_result *res;
    const double *rel_l2;
} mpt_cli_seed_runs;

/* The run directory of seed index s, precision index p: out/seed-<seed>/<precision> (buf: MPT_CLI_PATH). */
mpt_status mpt_cli_seed_run_dir(char *buf, size_t len, const char *out, uint64_t seed, mpt_precision p);

/* Writes report.md and compare.json into runs->out and prints the summary table with its verdicts: per
 * precision the mean and sd over seeds of the final and best test accuracy and the final test loss; against
 * fp32 the mean paired difference with its 95% confidence interval and the verdict against o->margin
 * (tools/stats.h); the fp32 seed-to-seed spread as the noise floor. plot_file: the PNG's name, or NULL with
 * plot_error saying why there is none. MPT_ERR_IO when a file cannot be written; MPT_ERR_ARG without GSL. */
mpt_status mpt_cli_write_seeds_report(const mpt_cli_opts *o, const mpt_cli_seed_runs *runs, const char *plot_file,
                                      const char *plot_error);

/* Writes compare.json for a one-seed comparison (the same keys as the multi-seed one, one seed, no
 * intervals). */
mpt_status mpt_cli_write_compare_json(const mpt_cli_opts *o, const mpt_cli_compare_row *rows, int n);

/* convergence.png of a multi-seed comparison: per precision the mean training-loss and test-accuracy curves
 * over seeds with a min-max band, from out/curves/<precision>_{steps,epochs}.csv (written here from each
 * run's metrics.csv and epochs.csv), and every seed's fp16 loss scale. Errors as for mpt_cli_plot. */
mpt_status mpt_cli_plot_seeds(const mpt_cli_seed_runs *runs);

/* ---- the plot (plot.c) -------------------------------------------------------------------------------------- */

/* Writes dir/convergence.gp and runs gnuplot on it to make dir/convergence.png from each run's
 * dir/<precision>/metrics.csv and epochs.csv. MPT_ERR_IO with a message when gnuplot is missing or fails
 * (the caller reports it and goes on). */
mpt_status mpt_cli_plot(const char *dir, const mpt_precision *precisions, int n);

/* Writes dir/numerics.gp (and numerics_twin.dat, the twin's mean error per activation and precision) and runs
 * gnuplot to make dir/numerics.png from each run's <precision>/telemetry.csv: activation gradients flushed to
 * zero per step (fp16/bf16; fp16 also at S = 1), updates lost per step (and if applied to the 16-bit copy),
 * and the twin error per activation when the runs had --shadow. Errors as mpt_cli_plot's. */
mpt_status mpt_cli_plot_numerics(const char *dir, const mpt_cli_compare_row *rows, int n);

/* Writes the PNG terminal lines of a gnuplot script (pngcairo when available, else png) for a width x height
 * picture named png. */
void mpt_cli_gnuplot_terminal(FILE *f, int width, int height, const char *png);

/* Runs gnuplot on dir/script with dir as its working directory; its messages go to dir/<script>.log (removed
 * on success). MPT_ERR_IO saying so when gnuplot is missing (naming gnuplot-nox) or fails; when it fails, the
 * picture of a script X.gp (X.png, the name every caller's script sets as its output) is removed, so that no
 * half-drawn or stale PNG passes for the plot. */
mpt_status mpt_cli_gnuplot(const char *dir, const char *script);

/* ---- a plan of runs over the ranks of an MPI job (sweep.c) ------------------------------------------------- */

/* A plan of n independent runs. The callbacks are the command's; ctx is theirs. */
typedef struct mpt_cli_sweep {
    int n;
    void *ctx;
    /* Trains run i into *res (zeroed by the caller; freed by the sweep on failure). */
    mpt_status (*train)(void *ctx, int i, mpt_cli_result *res);
    /* Run i's label for messages ("seed 0 fp16") and its output directory. */
    void (*describe)(void *ctx, int i, char *label, size_t label_len, char *dir, size_t dir_len);
    /* On rank 0 (or the single process): run i's result, in plan order; the callee owns *res. */
    mpt_status (*deliver)(void *ctx, int i, mpt_cli_result *res);
} mpt_cli_sweep;

/* Runs the plan. Without a job (d NULL): run by run, each delivered as it finishes; the first failure stops
 * the plan and is returned as it is. In a job (collective; every rank passes the same plan): run i trains on
 * rank i mod N (static round-robin); a failed run writes <dir>/FAILED (the message) and the other ranks start
 * no further runs; then, if any rank failed (or its `setup` status, e.g. loading the data, was an error), every
 * rank returns that status with the message "rank R of N, run I of M 'LABEL' (DIR): MESSAGE" (the lowest failed
 * rank's) and nothing is delivered; otherwise rank 0 receives every result in plan order and delivers it (a run
 * whose directory rank 0 cannot see fails the plan: --out must be shared). A stale FAILED mark in a run's
 * directory is removed before it trains. */
mpt_status mpt_cli_sweep_run(mpt_dist *d, const mpt_cli_sweep *sw, mpt_status setup);

/* Joins the MPI job when a launcher started this process as one of N >= 2 ranks (engine/dist: mpt_dist_env_size);
 * *out stays NULL for a single process (no launcher, or one rank). MPT_ERR_ARG when started as one of several
 * ranks by a build without MPI (every rank would run the whole plan into one --out). */
mpt_status mpt_cli_sweep_join(mpt_dist **out);

/* The OpenBLAS threads of one rank: `given` (--threads) when > 0; else the CPUs the launcher bound the rank to,
 * when fewer than the node has; else the node's online cores divided by the job's ranks on the node (at least
 * 1; d NULL counts one). *why receives the reason, one phrase. */
int mpt_cli_sweep_threads(const mpt_dist *d, int given, char *why, size_t n);

/* Prints which of the plan's n runs this rank trains and its OpenBLAS threads (and why), one line. */
void mpt_cli_sweep_announce(const mpt_dist *d, int n, int threads, const char *why);

/* Removes dir/file if it exists (a result of an earlier job that this one will write again). MPT_ERR_IO. */
mpt_status mpt_cli_remove_result(const char *dir, const char *file);

/* Atomic writes of a report: open path.tmp (tmp receives its name, n bytes; NULL with the error set), then
 * commit: flush, fsync, close, rename over path (on failure the temporary file is removed; MPT_ERR_IO). */
FILE *mpt_cli_open_atomic(const char *path, char *tmp, size_t n);
mpt_status mpt_cli_commit_atomic(FILE *f, const char *tmp, const char *path);

/* ---- commands ---------------------------------------------------------------------------------------- */

int mpt_cmd_train(int argc, char **argv);
int mpt_cmd_compare(int argc, char **argv);
int mpt_cmd_eval(int argc, char **argv);
int mpt_cmd_info(int argc, char **argv);
int mpt_cmd_formats(int argc, char **argv);

#endif
