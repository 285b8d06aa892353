/*
 * engine/telemetry/telemetry.h - the telemetry collector: instruments that only read (ARCHITECTURE,
 * engine/telemetry/), run every N-th training step.
 *
 * On a telemetry step the trainer (engine/train.c) calls in twice:
 *   after backward (before unscale): for every activation, activation gradient and weight gradient, the
 *     stored-range counts (range.h); for every tensor that a pass rounds from FP32 into FP16/BF16, the
 *     node's rounding probe (engine/graph.h) recomputes the FP32 values on the backend and the rounding
 *     histogram answers flushed / made subnormal / overflowed / gradient mass lost, and for gradients the
 *     same at loss scales S/2, 2S and 1; with a shadow twin, the twin runs the same minibatch (same
 *     batch, labels, dropout masks) in FP32 with the current FP32 master weights, and each tensor is
 *     compared with its twin: relative L2 error, and the cosine for weight gradients (the run's gradients
 *     unscaled by S first);
 *     Before returning it snapshots the storage each update goes to (and a 16-bit working copy, if any) and
 *     points t->update_out at its own buffers, so the optimizer writes its per-element FP32 deltas there;
 *     with data-parallel training (t->dist), the communication error of the gradient all-reduce per weight
 *     gradient and over all of them (metric comm_rel_l2, measured by engine/dist: mpt_dist_allreduce_grads);
 *     for every FP8 operand tensor (x, W, dy of an FP8 linear layer: engine/amp/fp8.h), its amax, scale, the
 *     fractions its cast saturates, flushes and makes subnormal at the scale used, at half and twice it, how stale
 *     a delayed scale was (amax now / amax the scale came from), and for gradients the same in the other FP8
 *     format (range.h 3);
 *   after the optimizer step: the lost-update meter (lost.h) per parameter tensor, on the storage the update
 *     went to and, where the run keeps FP32 masters over 16-bit weights, the counterfactual "had the same
 *     update been applied to the 16-bit working copy"; then t->update_out is reset to NULL.
 * Fused epilogues (engine/graph.h) leave a linear layer's pre-activation output and its relu's output gradient
 * unwritten; after backward the collector first has mpt_graph_fill_fused write them with the unfused GEMMs (tensors
 * the step never reads), so they are measured as an unfused step stores them. The twin runs without the relu
 * fusions.
 * Everything it computes goes to its own buffers (MPT_MEM_TELEMETRY, the twin's arenas MPT_MEM_TWIN),
 * allocated by mpt_telemetry_create; a step synchronises only when it is a telemetry step, and the
 * training itself is bit-identical with telemetry on or off (tests/test_telemetry.c).
 *
 * Results are rows (step, tensor, metric, value): the rows of each telemetry step are appended to a CSV
 * file when one is set (mpt_telemetry_set_csv), and per (tensor, metric) the last value and the running
 * mean are kept (mpt_telemetry_stats). The metrics are defined in docs/numerics.md.
 */
#ifndef MPT_ENGINE_TELEMETRY_TELEMETRY_H
#define MPT_ENGINE_TELEMETRY_TELEMETRY_H

#include <stdint.h>
#include <stdio.h>

#include "engine/train.h"

/* Tensor names of the rows that pool every rounded activation / activation gradient of a step. */
#define MPT_TELEMETRY_ALL_ACT "all_activations"
#define MPT_TELEMETRY_ALL_ACT_GRAD "all_activation_grads"
/* Tensor name of the rows that pool every FP8 gradient cast (dy of each FP8 layer) of a step. */
#define MPT_TELEMETRY_ALL_FP8_GRAD "all_fp8_grads"
/* Tensor name of the rows that pool the lost updates of every parameter tensor. */
#define MPT_TELEMETRY_ALL_PARAMS "all_parameters"

/* The CSV header of mpt_telemetry_set_csv's file. */
#define MPT_TELEMETRY_CSV_HEADER "step,tensor,metric,value"

typedef struct mpt_telemetry mpt_telemetry;

/* Per (tensor, metric): the last value and the mean over the telemetry steps that produced one. */
typedef struct mpt_telemetry_stat {
    char tensor[MPT_NAME_LEN + 16]; /* "fc2.out.grad", "fc1.weight.grad", or "amp" for run-wide values */
    char metric[32];                /* e.g. "flush_frac", "flush_frac@S/2", "twin_rel_l2" */
    double last, sum;
    int64_t count;                  /* telemetry steps that produced a value */
    int64_t last_step;
} mpt_telemetry_stat;

/* Creates the collector for trainer t (created, not yet stepped or resumed to any step) and attaches it
 * (t->telemetry; freed with the trainer). every >= 1: telemetry steps are the steps whose 1-based number is a
 * multiple of `every` (the step number metrics.csv prints). twin: NULL, or a built, not yet allocated graph of
 * the same model under the fp32 policy (mpt_policy_make(MPT_PRECISION_FP32)) with its loss, on t's backend;
 * the collector owns it from here on, also on failure. MPT_ERR_ARG when `every` < 1 or the twin does not
 * match the model node for node; MPT_ERR_NOMEM when a buffer cannot be allocated. On failure t has no collector
 * (t->telemetry NULL), as before the call. */
mpt_status mpt_telemetry_create(mpt_trainer *t, int64_t every, mpt_graph *twin);
/* Frees the collector, its buffers and its twin; sets *tel to NULL. */
void mpt_telemetry_free(mpt_telemetry **tel);

/* Whether 1-based step `step` is a telemetry step. */
int mpt_telemetry_due(const mpt_telemetry *tel, int64_t step);
/* Appends each telemetry step's rows to f (which the caller owns, header written by the caller); NULL: none. */
void mpt_telemetry_set_csv(mpt_telemetry *tel, FILE *f);
/* The (tensor, metric) statistics so far: *stats points at n entries owned by the collector. */
int mpt_telemetry_stats(const mpt_telemetry *tel, const mpt_telemetry_stat **stats);
/* The binary exponents of the activation gradients over the run (Micikevicius et al. 2018, Figure 3): for every
 * tensor a backward pass rounds from FP32 into FP16/BF16 (the gradients the loss scale S multiplies), the count
 * of its nonzero finite FP32 values, before rounding and divided by S, per e = floor(log2 |v|), summed over the
 * telemetry steps whose S was a power of two (the histograms of range.h shifted by -log2 S, which is exact).
 * Writes the CSV header "tensor,exponent,count" and one row per nonzero bin (exponents from -181 to 159; values
 * beyond are counted in the end bins), the tensors in graph order, then the same rows for all of them pooled
 * (MPT_TELEMETRY_ALL_ACT_GRAD). Nothing but the header when no such tensor was measured. Returns the number of
 * rows, or -1 when a write to f failed. */
int mpt_telemetry_write_exponents(const mpt_telemetry *tel, FILE *f);

/* ---- called by the trainer (engine/train.c) ---------------------------------------------------------- */

/* The instruments' own time so far (seconds, never negative): the host clock and this process's CPU time (all
 * threads) spent inside the three hooks below, each hook timed from a drained backend stream (the step's training
 * work enqueued before it completes outside the timer) to the completion of the work it enqueued itself. What a
 * telemetry step costs besides stays inside the step's time: it runs operation by operation rather than as a replayed
 * CUDA Graph, and its optimizer writes the update deltas (per tensor instead of one multi-tensor pass). A run reports
 * its training time with this time subtracted (tools/run.c; docs/outputs.md). tel NULL: 0 and 0.
 * Test hook: MPT_TELEMETRY_TEST_DELAY_MS=X in the environment adds X ms of CPU work to every hook. */
void mpt_telemetry_time(const mpt_telemetry *tel, double *host_s, double *cpu_s);

/* After the batch was gathered into the run's graph: the same rows into the twin, when there is one and the
 * coming step is a telemetry step (an evaluation gather in between is overwritten by the next training
 * gather). Arguments as mpt_trainer_gather's. */
void mpt_telemetry_gather(mpt_telemetry *tel, const uint8_t *images, const uint8_t *labels, const int32_t *idx,
                          int64_t D, float mean, float inv_std);
/* After backward, before unscale, on a telemetry step: range, rounding and twin measurements; arms the
 * lost-update meter. */
void mpt_telemetry_after_backward(mpt_telemetry *tel);
/* After the optimizer step and the scaler update of the same telemetry step: lost updates. */
void mpt_telemetry_after_step(mpt_telemetry *tel);

#endif
