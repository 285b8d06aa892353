/*
 * engine/train.h - the mixed-precision training step: FP32 master weights, the loss scaler and the
 * optimizer around a built graph (ARCHITECTURE, "The precision split: one training step").
 *
 *   zero grads -> forward (compute dtype) -> backward seeded with the loss scale S
 *   -> [data-parallel: all-reduce of the weight gradients over the ranks, found_inf agreed (engine/dist)]
 *   -> unscale (g *= 1/S) and found_inf in one pass over all FP32 weight gradients (one multi-tensor launch)
 *   -> [clip by global L2 norm] -> fused optimizer step on the FP32 masters unless found_inf (one multi-tensor
 *      launch over all parameters: be->optim_step_multi on the table t->slots)
 *      (and working copies rewritten from the masters, RNE) -> loss-scale update (grow / back off)
 *   -> [data-parallel with batch norm: rank 0's running statistics broadcast to every rank (DDP's broadcast_buffers)]
 * Every step is a fixed sequence of backend operations with no host synchronisation and no allocation;
 * the loss, the scale and the skip counters stay in backend memory until mpt_trainer_stats() reads them, and
 * nothing that changes from step to step is passed from the host (the iteration, the LR, the dropout offset and the
 * batch's rows are read from backend memory), so on the GPU the step can be recorded once as a CUDA Graph and
 * replayed (mpt_trainer_step).
 *
 * Masters: in fp16/bf16 modes each parameter has an FP32 master (MPT_MEM_MASTER) and a working copy in the
 * compute dtype (the graph's weight tensor, MPT_MEM_WEIGHT). In fp32/tf32 modes the weight tensor is FP32
 * and is the master itself (no copy). Weight gradients are FP32 in both cases (decision 9).
 * The switches that take a safeguard away, to show what it prevents (issue #10): master_weights NONE (the
 * optimizer updates the F16/BF16 weights directly, rounding once per step: RNE or stochastic), a 16-bit
 * optimizer state, and nonfinite APPLY (a non-finite gradient is applied instead of skipping the step).
 */
#ifndef MPT_ENGINE_TRAIN_H
#define MPT_ENGINE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"
#include "engine/amp/master.h"
#include "engine/backend.h"
#include "engine/graph.h"
#include "engine/optim/schedule.h"
#include "engine/quant.h"

typedef enum mpt_loss_scaling {
    MPT_LOSS_SCALE_NONE = 0,  /* S = 1, found_inf still skips steps */
    MPT_LOSS_SCALE_STATIC,    /* S fixed at static_scale */
    MPT_LOSS_SCALE_DYNAMIC,   /* GradScaler semantics (engine/amp/scaler.h) */
} mpt_loss_scaling;

/* How the updated weights are rounded into F16/BF16 storage when there are no FP32 masters. */
typedef enum mpt_update_rounding {
    MPT_ROUNDING_NEAREST = 0, /* round to nearest even */
    MPT_ROUNDING_STOCHASTIC,  /* stochastic rounding, Philox bits from (seed, iteration, element):
                                 engine/numerics.h mpt_sr_bits */
} mpt_update_rounding;

/* What a step with inf/NaN gradients does. */
typedef enum mpt_nonfinite_mode {
    MPT_NONFINITE_SKIP = 0, /* skip the optimizer step (GradScaler's rule; every mode by default) */
    MPT_NONFINITE_APPLY,    /* apply it: inf/NaN reach the weights, as plain PyTorch without GradScaler */
} mpt_nonfinite_mode;

/* "nearest"/"stochastic" and "skip"/"apply"; the parsers return 0 on success, -1 for an unknown name. */
MPT_API const char *mpt_update_rounding_name(mpt_update_rounding r);
MPT_API int mpt_update_rounding_parse(const char *s, mpt_update_rounding *out);
MPT_API const char *mpt_nonfinite_mode_name(mpt_nonfinite_mode m);
MPT_API int mpt_nonfinite_mode_parse(const char *s, mpt_nonfinite_mode *out);

typedef struct mpt_train_config {
    mpt_optim_hparams optim;     /* kind and hyper-parameters; optim.lr is overwritten by the schedule */
    mpt_lr_schedule schedule;
    float clip_norm;             /* max global L2 norm of the unscaled gradients; 0 = no clipping */
    mpt_loss_scaling loss_scaling;
    float init_scale;            /* dynamic: initial S (2^16); static: the fixed S */
    mpt_scaler_params scaler;    /* growth/backoff/interval/hysteresis/floor/ceiling */
    uint64_t seed;               /* init, dropout, shuffling */
    int64_t inject_nonfinite_step; /* fault injection: make this iteration's gradients NaN (-1 = off) */
    mpt_master_mode master_weights;      /* FP32 masters (default) or none */
    mpt_update_rounding update_rounding; /* without masters: nearest (default) or stochastic */
    mpt_dtype optim_state_dtype;         /* storage of m, v and the momentum buffer: F32 (default), BF16, F16 */
    mpt_nonfinite_mode nonfinite;        /* skip (default) or apply; apply needs loss scaling none or static */
    int step_graph;              /* 1: on a backend with step capture (CUDA), record the step once as a CUDA Graph
                                    and replay it (see mpt_trainer_step); 0: call each operation every step.
                                    Ignored by the CPU backend. Results are bit-identical either way. */
    mpt_qat qat;                 /* quantization-aware training (engine/quant.h): the forward pass reads the linear and
                                    conv weights fake-quantized per output channel to INT8 / INT4, rewritten from their
                                    FP32 masters after every optimizer step; NONE (default): off. Needs FP32 masters
                                    and a mode without FP8 GEMMs. */
} mpt_train_config;

/* A config with the defaults: Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8), constant LR, no clipping,
 * loss scaling dynamic for fp16 and none otherwise (from `precision`), GradScaler defaults
 * (2^16, x2, x0.5, 2000), hysteresis 1, floor 1, ceiling 2^24, seed 0, no fault injection, FP32 masters,
 * round-to-nearest updates, FP32 optimizer state, non-finite steps skipped, no step graph (the mptrain
 * command turns it on for --device cuda: --cuda-graph). */
MPT_API mpt_train_config mpt_train_config_default(mpt_precision precision);

/* Host copy of the step statistics (read with one synchronising copy). */
typedef struct mpt_train_stats {
    float loss;             /* loss of the last forward pass (unscaled, FP32) */
    float scale;            /* current loss scale */
    int32_t steps_taken;    /* optimizer steps applied so far (steps_taken + steps_skipped == iterations run) */
    int32_t steps_skipped;  /* steps skipped because of non-finite gradients */
    int32_t floor_hits;     /* backoffs clamped at the scale floor */
    int32_t steps_nonfinite;/* of steps_taken, those applied with non-finite gradients (--nonfinite apply) */
    int32_t n_correct;      /* correct predictions accumulated since the last reset */
} mpt_train_stats;

typedef struct mpt_trainer {
    mpt_graph *g;
    mpt_backend *be;
    mpt_train_config cfg;
    int n_params;
    mpt_tensor **weight;     /* [n_params] the graph's weights (compute dtype) */
    mpt_tensor **master;     /* [n_params] what the optimizer updates: FP32 masters (== weight[i] in fp32/tf32
                                modes, and in every mode with --master-weights none, where it is F16/BF16) */
    mpt_tensor **m, **v;     /* [n_params] optimizer state tensors (cfg.optim_state_dtype), or NULL entries */
    int *qat;                /* [n_params] 1 for the weights quantization-aware training fake-quantizes (cfg.qat; the
                                weights of linear and conv2d nodes), else 0 */
    mpt_scaler_state *scaler;/* backend memory */
    mpt_param_slot *slots;   /* [n_params] backend memory: the parameters' pointers and sizes for the multi-tensor
                                unscale and optimizer passes (one launch each), written once at creation */
    int64_t numel;           /* host: elements over all parameters */
    int64_t iteration;       /* iterations run (host counter: schedules, dropout offsets, fault injection) */
    /* Instrument hook, NULL by default (ordinary steps). To read the update deltas of one step, point it at
     * an array of n_params backend buffers, update_out[i] holding numel(weight[i]) FP32 elements (or NULL to
     * skip parameter i), before mpt_trainer_step(), and reset it to NULL after: the optimizer writes each
     * element's FP32 update delta there (mpt_optim_args.update_out). The trainer does not own the buffers.
     * Training is bit-identical with and without it. */
    float **update_out;
    struct mpt_dist *dist;   /* data-parallel communication (engine/dist), or NULL: attached by mpt_dist_attach,
                                not owned; when set, the step all-reduces the gradients before unscale */
    struct mpt_telemetry *telemetry; /* instruments read on telemetry steps (engine/telemetry), or NULL;
                                        attached by mpt_telemetry_create, freed with the trainer */
    /* The batch staged by mpt_trainer_gather and gathered as the first operation of the next step or
     * evaluation forward (so a captured step contains its gather). */
    mpt_tensor *batch_idx;   /* [B] I32 backend: the batch's rows, copied from the caller's index array */
    struct mpt_batch_source {
        const uint8_t *images, *labels; /* backend: U8 [n_total, D] and [n_total] */
        int64_t D;
        float mean, inv_std;
    } batch_src;
    int gather_pending;      /* 1 between mpt_trainer_gather and the step or evaluation that gathers */
    /* The step graph (cfg.step_graph on a backend with capture; engine/train.c "Step graph"). */
    void *replay;            /* the recorded step (backend handle) or NULL */
    struct mpt_capture_key {
        struct mpt_batch_source src;    /* the gather's source baked into the recording */
        int with_gather;                /* the recording starts with the gather */
        mpt_train_config cfg;           /* the settings baked into it */
        void *workspace;                /* the backend workspace its GEMM/conv calls use: reserving more moves it */
        size_t workspace_bytes;
        const float *loss_scale;        /* the graph's backward seed and fusion setting when it was recorded */
        int fuse_epilogues;
    } capture_key;
    int replay_off;           /* 1: the graph was asked for but is off for the rest of the run (replay_note says why) */
    char replay_note[640];    /* one line: why the step graph is off; "" while it is on or was not asked for */
    int64_t captures;  /* recordings made (1 normally; a changed capture_key records again) */
    int64_t replays;   /* steps run as one replay */
    int64_t direct_steps;    /* steps run operation by operation although the graph was asked for (the first step,
                                which selects the GEMM/conv algorithms; telemetry steps; the fault-injection step;
                                steps with update_out) */
} mpt_trainer;

/* Takes a built, not yet allocated graph (model + mpt_softmax_xent), adds masters and optimizer state,
 * allocates everything, initialises each parameter as its layer declared (mpt_param_info: PyTorch's defaults for
 * Linear/Conv2d, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases, from the host Philox stream
 * (engine/rng.h: cuRAND's Philox4x32-10 sequence) with cfg->seed; constants for the norms' gamma and beta), and writes
 * the working copies; the graph's buffers (running statistics) start at their initial values. The trainer takes
 * ownership of g: it is freed with the trainer, or before returning when creation fails (MPT_ERR_ARG for a bad
 * config, naming the setting; MPT_ERR_NOMEM). */
MPT_API mpt_status mpt_trainer_create(mpt_trainer **out, mpt_graph *g, const mpt_train_config *cfg);
/* Rewrites every working copy from its master: RNE for the others (mpt_master_refresh_working), and, with cfg.qat, the
 * fake-quantized values for the quantized weights. What creation and a checkpoint load do after writing the masters.
 * Stream-ordered. */
MPT_API void mpt_trainer_refresh_working(mpt_trainer *t);
/* Frees the trainer with its graph, masters, optimizer state and telemetry (not the backend, nor an attached
 * mpt_dist) and sets *t to NULL. NULL *t: nothing. */
MPT_API void mpt_trainer_free(mpt_trainer **t);

/* One training iteration: gathers the batch staged by mpt_trainer_gather (if one is staged; else the step runs on
 * the batch already in g->input / g->labels), then forward, backward seeded with the loss scale, unscale and
 * found_inf, optimizer step on the masters unless found_inf, loss-scale update. Stream-ordered: returns without
 * waiting for the device; read the results with mpt_trainer_stats. Non-finite gradients are not an error: the
 * step is skipped and counted.
 * Step graph (cfg.step_graph on a backend with capture_begin): the first step runs operation by operation (it
 * selects and caches the GEMM/convolution algorithms), the second is recorded once (gather, zero grads, forward,
 * backward, unscale + found_inf, clipping, LR update, optimizer, scaler update) and replayed with one launch from
 * then on. Everything that changes between steps is read by the recorded operations from backend memory:
 * the iteration, the LR and the dropout offset derive from mpt_scaler_state.iteration, the loss scale and
 * counters are in mpt_scaler_state, the batch's rows in batch_idx. A step that needs the host in the middle
 * (telemetry steps, the fault-injection step, update_out) runs operation by operation on the same state; a changed
 * batch source or config records again; when recording fails (or data-parallel training is attached, whose
 * all-reduce goes through the host) the graph is turned off for the run and replay_note says why. The results are
 * bit-identical with and without the graph. */
MPT_API void mpt_trainer_step(mpt_trainer *t);
/* Forward only, dropout off, accumulating g->n_correct; the loss is the batch mean. Gathers the staged batch
 * first, as mpt_trainer_step does. */
MPT_API void mpt_trainer_eval_batch(mpt_trainer *t);
/* Stages a batch from a U8 dataset in backend memory: copies rows idx[0..B) (idx in backend memory, I32) into
 * t->batch_idx, stream-ordered, and remembers the source; the next mpt_trainer_step or mpt_trainer_eval_batch
 * gathers it into the graph's input and labels (pixels scaled by 1/255 then standardised with (mean, inv_std);
 * be->gather_batch). images U8 [n_total, D] and labels U8 [n_total] (each in [0, C)) stay owned by the caller
 * (e.g. be->alloc + be->from_host, once per run) and must stay valid until that step or evaluation; D must equal
 * the input's features per row (else it aborts: a wiring error); idx[b] = -1 is a padding row (zeros, label -1,
 * ignored by the loss and the accuracy count). Stream-ordered, no allocation. */
MPT_API void mpt_trainer_gather(mpt_trainer *t, const uint8_t *images, const uint8_t *labels, const int32_t *idx,
                                int64_t D, float mean, float inv_std);
/* One line for run records: "on (1 recording, N replays, M steps run directly)", "off (asked)", "off: <why>",
 * or "not applicable (cpu backend)", into buf (len bytes). */
MPT_API void mpt_trainer_graph_status(const mpt_trainer *t, char *buf, size_t len);
/* Copies the statistics to *out (host): waits for the queued steps, one small device-to-host copy. */
MPT_API void mpt_trainer_stats(mpt_trainer *t, mpt_train_stats *out);
/* The dtype of the storage that parameter i's optimizer update is applied to: MPT_DTYPE_F32 when the update
 * goes to an FP32 master (fp16/bf16 modes with masters, and fp32/tf32 modes, where the FP32 weight is its own
 * master), else the weights' own dtype (F16/BF16 without FP32 masters). Whether an update was lost (left the
 * stored value unchanged) is decided in this dtype. */
MPT_API mpt_dtype mpt_trainer_update_dtype(const mpt_trainer *t, int i);
/* The tensor holding that storage (t->master[i]). */
MPT_API mpt_tensor *mpt_trainer_update_target(const mpt_trainer *t, int i);
/* Zeroes g->n_correct. */
MPT_API void mpt_trainer_reset_correct(mpt_trainer *t);
/* Forward passes over n rows of a U8 dataset in backend memory (images [.., dim], labels) for an evaluation:
 * batch b gathers the B = g->batch indices idx_dev[b*stride + lo ..) (I32, backend memory, -1 = padding row), of
 * which valid_b = clamp(n - b*stride - lo, 0, B) are rows; a batch with none is skipped. stride = B, lo = 0 for one
 * process; a data-parallel rank passes the global batch and its shard's first row. *loss_sum (host) = sum over
 * batches of (the batch's mean loss) * valid_b, in FP64 in batch order; *correct (host) = correct predictions.
 * Each batch's loss is copied in stream order into a backend array and the count accumulates in backend memory:
 * the host waits for the device once per call (and in mpt_trainer_stats), not once per batch. If that array
 * cannot be allocated, each batch's loss is read as it comes (the same numbers). Resets g->n_correct first. */
MPT_API void mpt_trainer_evaluate(mpt_trainer *t, const uint8_t *images, const uint8_t *labels,
                                  const int32_t *idx_dev, int64_t n, int64_t stride, int64_t lo, int64_t dim,
                                  float mean, float inv_std, double *loss_sum, int32_t *correct);

#endif
