/*
 * tools/run.h - one training run, the module that `train`, `compare` and `lab` call (tools/run.c: setup, the
 * loop, the CSVs; tools/run_checkpoint.c: the run's state as a safetensors file; tools/run_summary.c:
 * summary.json and the precision map). Its output directory is owned by tools/outdir.h.
 */
#ifndef MPT_TOOLS_RUN_H
#define MPT_TOOLS_RUN_H

#include "tools/cli.h"
#include "tools/outdir.h"

/* ---- devices (run.c) ----------------------------------------------------------------------------- */

/* Creates the backend for --device; *why receives one line saying which device and why (auto's choice).
 * MPT_ERR_DEVICE when --device cuda was asked for and no GPU is usable. */
mpt_status mpt_run_backend_create(mpt_device_choice choice, mpt_backend **out, char *why, size_t len);

/* Whether backend be runs FP8 precision p with recipe r's accumulator (be->fp8_support): MPT_ERR_DEVICE naming
 * --precision and the reason when it does not; prints the backend's note (label-prefixed), e.g. that mxfp8 is
 * emulated on a GPU without MX Tensor Cores. */
mpt_status mpt_run_fp8_device_check(mpt_backend *be, mpt_precision p, const mpt_fp8_recipe *r, const char *label);

/* ---- one training run (run.c) ------------------------------------------------------------------- */

/* Where a run's time went, host clock (CLOCK_MONOTONIC) seconds unless said otherwise; `mptrain speedrun` reports
 * them (tools/speedrun.h). Setup comes before the training's clock starts: */
typedef struct mpt_run_timing {
    double backend_s;            /* creating the backend (on the GPU: the CUDA context, library handles) */
    double upload_s;             /* the dataset copied into the backend's memory (MPT_MEM_DATA) */
    double kernels_s;            /* --cpu-kernels auto's measurement (0 when it did not measure) */
    double warmup_s;             /* the untimed warm-up (mpt_cli_opts.untimed_warmup; 0 without one) */
    int64_t warmup_steps;        /* its steps */
    double build_s;              /* the graph and the trainer: plans, allocation, weight initialisation, index arrays */
    /* The time to result: from the training loop's start (before the first epoch's batch order is drawn) to the final
     * evaluation's accuracy on the host, every epoch, batch order, logged statistic and evaluation inside it (a run
     * evaluates after every epoch: the speedrun's recipe has one): */
    double result_s, result_cpu_s; /* host clock; CPU time of the process, all threads (CLOCK_PROCESS_CPUTIME_ID) */
    double order_s;              /* inside it: drawing and uploading the epochs' batch orders */
    double eval_s;               /* inside it: the final evaluation (test set, and validation set if any) */
    double eval_cpu_s;
    /* After the result: */
    double outputs_s;            /* the final checkpoint, the CSVs published, summary.json */
    double total_s;              /* mpt_run_train from its call to its return */
} mpt_run_timing;

/* What a finished run reports (to summary.json, the compare table and the caller). */
typedef struct mpt_run_result {
    char out_dir[MPT_CLI_PATH];
    char run_id[17];             /* the run's id (mpt_run_state.run_id) */
    char device[256];
    int epochs_run;              /* epochs completed in this invocation */
    int64_t iterations;          /* iterations so far (resumed ones included) */
    double final_test_acc, best_test_acc, final_test_loss, final_train_loss;
    int best_epoch;              /* 1-based epoch of best_test_acc */
    double final_val_acc, final_val_loss; /* NAN without --val-split */
    double mean_epoch_s;         /* mean training time per completed epoch (evaluation excluded; host clock); NAN
                                  * without a completed epoch */
    double samples_per_s;        /* training samples / training time, over the whole invocation (host clock); NAN
                                  * when no step ran */
    double *epoch_s;             /* [epochs_run] training seconds per epoch (malloc'd): host monotonic clock from the
                                    epoch's first operation to the stream drained at its end, less the instruments'
                                    own time (telemetry_s) */
    double *epoch_gpu_s;         /* [epochs_run] the same epochs' device seconds between two CUDA events recorded at
                                    the host clock's start and end (malloc'd); NULL on a backend without device
                                    timing (CPU) */
    double *epoch_cpu_s;         /* [epochs_run] the same epochs' CPU seconds of this process, all its threads
                                    (CLOCK_PROCESS_CPUTIME_ID, user + system; malloc'd): unlike the host clock, not
                                    inflated by other work on a shared machine, but summed over OpenBLAS's threads */
    double mean_epoch_cpu_s;     /* their mean */
    double telemetry_s, telemetry_cpu_s; /* the instruments' own host-clock and CPU seconds in this invocation's
                                    epochs (mpt_telemetry_time), which the epoch times above exclude: they measure
                                    training (docs/outputs.md) */
    size_t mem_peak[MPT_MEM_COUNT];
    size_t mem_peak_total;
    int32_t steps_skipped, floor_hits;
    int32_t steps_nonfinite;     /* steps applied with non-finite gradients (--nonfinite apply) */
    int weights_nonfinite;       /* the final weights hold inf/NaN (only possible with --nonfinite apply) */
    int checkpoint_refused;      /* the final save was refused (non-finite weights, optimizer state or scaler
                                  * value): the checkpoint file, if any, is an earlier step's */
    char checkpoint_refused_why[320]; /* the refusal's message (it names the tensor or value), "" otherwise */
    int interrupted;             /* the signal that stopped the run after `iterations` steps (SIGINT, SIGTERM, ...;
                                  * tools/guards.h), its state saved; 0 when it ran to its end */
    char cuda_graph[704];        /* mpt_trainer_graph_status: on (with counts), off and why, or not applicable */
    char kernels_auto[320];      /* --cpu-kernels auto: what was measured and chosen, one line; "" otherwise */
    double kernels_auto_s[2];    /* its median step times (seconds, host clock): emulate, native; NAN when nothing
                                    was measured (no bf16 GEMM, native unavailable) */
    float final_scale;
    float *final_master;         /* all FP32 master weights, concatenated in parameter order (malloc'd) */
    float *init_master;          /* the same at the start of this invocation (malloc'd) */
    int64_t n_master;
    mpt_telemetry_stat *telemetry; /* [n_telemetry] last and mean of each (tensor, metric) (malloc'd), or NULL */
    int n_telemetry;
    mpt_run_timing timing;
} mpt_run_result;

void mpt_run_result_free(mpt_run_result *r);

/* The run's telemetry statistic (tensor, metric) (engine/telemetry/telemetry.h names them), or NULL when the run
 * never measured it. */
const mpt_telemetry_stat *mpt_run_stat(const mpt_run_result *r, const char *tensor, const char *metric);

/* Its mean over the run's telemetry steps, NAN when it was never measured (or measured on no step). */
double mpt_run_stat_mean(const mpt_run_result *r, const char *tensor, const char *metric);

/* Trains one run with resolved options o on data cd (already loaded), writing into o->out: metrics.csv,
 * epochs.csv, summary.json and checkpoint.safetensors. `label` prefixes the progress lines ("" or "fp16").
 * Fills *res. */
mpt_status mpt_run_train(const mpt_cli_opts *o, const mpt_cli_data *cd, const char *label,
                             mpt_run_result *res);

/* Evaluates the trainer on a U8 dataset in backend memory: rows 0..n-1 in order, padded last batch
 * (ignored rows). *loss = mean cross-entropy over the n rows, *acc = fraction correct. */
void mpt_run_evaluate(mpt_trainer *t, const uint8_t *images, const uint8_t *labels, const int32_t *idx_dev,
                      int64_t n, int64_t dim, float mean, float inv_std, double *loss, double *acc);

/* ---- run checkpoints (run_checkpoint.c) ------------------------------------------------------------------ */

/* Where a run is, besides its tensors: what a resumed run needs to continue exactly. */
typedef struct mpt_run_state {
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
    int threads;             /* the CPU backend's GEMM threads (0: a GPU run, or not recorded) */
    char run_id[17];         /* the run's id: 16 random hex digits drawn when the run started, kept by --resume;
                              * the last column of its CSV rows ("" in an older checkpoint: a new one is drawn) */
    mpt_model_input data;    /* the data the network was built for: channels, height, width, classes (checkpoint
                                metadata "data"; an older checkpoint lacks it: has_data 0, Fashion-MNIST's shape) */
    int has_data;
    mpt_cli_data_fp fp;      /* the fingerprint of the data the run trains on (checkpoint metadata "data_fingerprint") */
    int fp_known;            /* 0: an older checkpoint without it */
} mpt_run_state;

/* The checkpoint file name inside an output directory. */
#define MPT_CLI_CHECKPOINT_FILE "checkpoint.safetensors"

/* Writes the trainer's FP32 master weights (named like the parameters: "fc1.weight"), its optimizer state
 * ("fc1.weight:exp_avg", ...) and, in the metadata, the run's recorded settings ("config"), `rs` ("state", and
 * "data": the fingerprint of the data it trains on), the loss-scaler state ("scaler"), the RNG streams ("rng") and
 * the precision map, as a complete, fsync'ed temporary file in tx's directory that joins the publish set tx as
 * checkpoint.safetensors (engine/checkpoint.h: mpt_checkpoint_write_temp_at; tools/outdir.h). Synchronises the
 * backend. MPT_ERR_NONFINITE (nothing written) for non-finite weights or state. */
mpt_status mpt_run_checkpoint_stage(mpt_outdir_txn *tx, mpt_trainer *t, const mpt_cli_opts *o,
                                    const mpt_run_state *rs);

/* The run id recorded in the checkpoint at path, into id: 1, or 0 when the file cannot be read (any reason) or
 * records none (the message is not set). */
int mpt_run_checkpoint_run_id(const char *path, char id[17]);

/* An upper bound of the checkpoint's size in bytes: its tensors and 1 MiB for the header. */
uint64_t mpt_run_checkpoint_bytes(const mpt_trainer *t);

/* Reads a checkpoint's metadata: applies its recorded settings to *o (which holds the defaults) and fills
 * *rs. MPT_ERR_FORMAT naming the file when the metadata is missing or malformed. */
mpt_status mpt_run_checkpoint_read_config(const char *path, mpt_cli_opts *o, mpt_run_state *rs);

/* Loads the data in `dir` for the network of `checkpoint` (rs: its mpt_run_checkpoint_read_config state): labels read
 * with the class count the network was built for, limit_train / limit_test rows (0 = all; eval and post-training
 * quantization read training rows only to calibrate), rank-4 images in `layout`. MPT_ERR_ARG naming both shapes
 * (nothing kept) when the data's channels, size or classes differ from the network's; mpt_cli_data_load's errors. */
mpt_status mpt_run_checkpoint_data_load(mpt_cli_data *cd, const char *checkpoint, const mpt_run_state *rs,
                                        const char *dir, int64_t limit_train, int64_t limit_test,
                                        mpt_idx_layout layout);

/* Loads a checkpoint written for the same model and settings into a created trainer: master weights (and
 * working copies rewritten from them), optimizer state, loss-scaler state and the iteration counter.
 * MPT_ERR_SHAPE when the tensors do not match the model. */
mpt_status mpt_run_checkpoint_load(const char *path, mpt_trainer *t);

/* ---- what a run leaves for scripts (run_summary.c) --------------------------------------------------------- */

/* The graph's precision map as a JSON array (a json_t *, returned as void * to keep jansson out of this
 * header): one object per node {"node", "op", "input", "weight", "output", "math", "kernels"} ("kernels": how a
 * GEMM or convolution ran, mpt_backend_kernels_of; null for other nodes). */
void *mpt_run_precision_map_json(const mpt_graph *g);

/* The network of model `model` planned for input `in` as a JSON array (a json_t *, as void *): one object per layer in
 * the spec's order, {"name", "type", ...its arguments with the shapes resolved: in_channels, out_channels, kernel,
 * stride, pad, in_features, out_features, num_features, normalized_shape, eps, momentum, p, negative_slope}, what a
 * PyTorch module needs to rebuild it (docs/checkpoints.md); NULL with the plan's error when it does not plan. */
void *mpt_run_model_json(const char *model, const mpt_model_input *in);
/* The data shape {"channels", "height", "width", "classes"} as a JSON object (json_t *, as void *). */
void *mpt_run_data_json(const mpt_model_input *in);

/* Writes summary.json into od (created exclusively, published by rename); `data` is the shape the network was built
 * for. */
mpt_status mpt_run_write_summary(const mpt_outdir *od, const mpt_cli_opts *o, const mpt_run_result *r,
                                 const mpt_graph *g, const mpt_policy *policy, const mpt_model_input *data);

/* Removes the files of a run from dir (the results of an earlier job), holding the directory's lock meanwhile
 * (MPT_ERR_IO when another mptrain uses it), and then dir itself when nothing else is in it. Only regular files are
 * removed: a symbolic link or a directory in place of one is left for the run to refuse. An absent dir, or one that
 * is not a directory: MPT_OK. */
mpt_status mpt_run_clear(const char *dir);

/* mpt_run_clear for every run directory <out>/seed-<N>/<precision> of an earlier compare --seeds or speedrun, and
 * then each seed-<N> directory left empty. MPT_ERR_IO when out cannot be listed. */
mpt_status mpt_run_clear_seeds(const char *out);

/* The MPI job that the next runs train in as data-parallel ranks (mptrain train --data-parallel), or NULL. */
void mpt_run_join(mpt_dist *d);

/* The MPI job of independent runs (compare, lab; tools/sweep.h) whose waiting peers the next runs answer between
 * their steps (mpt_dist_poll: "working"), or NULL. */
void mpt_run_answer(mpt_dist *d);

#endif
