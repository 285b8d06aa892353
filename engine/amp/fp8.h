/*
 * engine/amp/fp8.h - FP8 training: the recipe, which GEMMs run in FP8, and the scale state (ARCHITECTURE decision
 * 10: FP8 and MX are scaled formats).
 *
 * An FP8 operand is a tensor plus a scale. Per tensor (--precision fp8, fp8-e4m3): the cast stores round(x * s) in
 * E4M3 or E5M2, and the GEMM multiplies its result by 1/s of each operand (cuBLASLt's A/B_SCALE_POINTER), with
 *     s = fmax / amax / 2^margin                         (TransformerEngine DelayedScaling: "new_scaling_factor =
 *                                                          (FP8_MAX / amax) / (2 ^ margin)"; recipe/__init__.py)
 * in FP32 (engine/numerics.h mpt_fp8_scale_from_amax, which also covers an amax of 0, inf or NaN, a scale that
 * overflows FP32, and --fp8-pow2-scales, which rounds s down to a power of two as TE's force_pow_2_scales does).
 * Where amax comes from is the scaling recipe:
 *   delayed  (TE's DelayedScaling, the default): amax = the maximum over an amax history of the last
 *            --amax-history steps (default 1024, TE's amax_history_len), this step's included; each cast records
 *            its tensor's amax, and after the step every scale is recomputed from its history (TE
 *            transformer_engine/common/recipe/delayed_scaling.cu, amax_compute_algo "max"), so a step casts with
 *            the scale its predecessors chose. An amax of 0 keeps the previous scale (TE). The first step casts
 *            with s = 1.
 *   current  (TE's Float8CurrentScaling, torchao's "tensorwise"): amax of the tensor being cast, now (a second
 *            pass over it); an amax of 0 gives s = 1 (TE recipe_common.cuh compute_scale_from_amax).
 * A non-finite amax (the tensor holds inf or NaN) skips the step like found_inf, and is recorded in the history
 * as 0 (TE records it, which pins the scale for amax_history_len steps; mptrain skips that step instead).
 * Per block (--precision mxfp8; OCP Microscaling Formats (MX) v1.0): every 32 consecutive elements along K share
 * an E8M0 scale 2^e chosen from the block's amax by --mx-scale floor | ceil | rceil (engine/numerics.h
 * mpt_mx_scale_code: the OCP rule floor(log2 amax) - emax_elem, torchao's ceil, cuBLAS's rceil); no state.
 *
 * Formats: fp8 is TE's Format.HYBRID (E4M3 for the forward operands x and W, E5M2 for the gradient dy in the
 * dgrad and wgrad GEMMs); fp8-e4m3 is Format.E4M3 (dy in E4M3 too); mxfp8 is E4M3 throughout (TE's
 * MXFP8BlockScaling default). Casts saturate by default (CUDA __NV_SATFINITE, as TE's do); --fp8-saturate off makes
 * an overflow NaN (E4M3) or inf (E5M2), which skips the step.
 *
 * Which GEMMs: those whose M, N and K are all multiples of 16 (mpt_fp8_gemm_ok). TE checks each operand of the
 * forward GEMM instead (rows % 8, cols % 16: transformer_engine/pytorch/utils.py check_dim_for_fp8_exec), which
 * admits a few shapes this rule refuses (lenet5's fc1: 120 outputs). cuBLASLt's FP8 kernels also need the "TN"
 * layout (A and B both K-contiguous), which the backward GEMMs get from transposed FP8 copies (a transposing cast,
 * counted in the activation, activation-gradient and weight memory of the run).
 *
 * The accumulator of an FP8 GEMM: --fp8-accum fp32 (exact products, FP32 sums) or fast (Hopper's narrow FP8 Tensor
 * Core accumulator, modelled on the CPU: kernels/cpu/gemm.c) with --fp8-promote N (DeepSeek-V3's remedy: the partial
 * sum goes into FP32 every N elements of K). mxfp8 accumulates in FP32 only (no model of B200's block-scaled
 * accumulator here).
 *
 * State (ARCHITECTURE decision 10): one mpt_fp8_meta per FP8 operand tensor (engine/backend.h) and its amax
 * history, FP32 in backend memory (the optimizer arena), read by the recorded step without a host sync, and saved in
 * the checkpoint, so that a resumed run continues bit for bit. The layers register their operand tensors
 * (mpt_fp8_register); mpt_graph_alloc allocates and initialises the state; the trainer updates it once per step
 * (be->fp8_update).
 */
#ifndef MPT_ENGINE_AMP_FP8_H
#define MPT_ENGINE_AMP_FP8_H

#include <stdint.h>

#include "engine/api.h"
#include "engine/backend.h"
#include "engine/dtype.h"
#include "engine/status.h"

struct mpt_graph;

typedef enum mpt_fp8_scaling {
    MPT_FP8_SCALING_DELAYED = 0, /* the maximum over the amax history (TE DelayedScaling) */
    MPT_FP8_SCALING_CURRENT,     /* this tensor's amax now (TE Float8CurrentScaling, torchao tensorwise) */
} mpt_fp8_scaling;

/* The FP8 settings of a run (mpt_policy.fp8). Defaults: mpt_fp8_recipe_default(). */
typedef struct mpt_fp8_recipe {
    mpt_fp8_scaling scaling;  /* delayed */
    int32_t amax_history;     /* delayed: window length in steps, 1..65536 (1024, TE's amax_history_len) */
    int32_t margin;           /* s = fmax / amax / 2^margin, 0..32 (0) */
    int32_t pow2_scales;      /* round s down to a power of two (0) */
    int32_t mx_rounding;      /* mxfp8: mpt_mx_rounding, MPT_MX_FLOOR (the OCP rule) */
    mpt_fp8_accum accum;      /* MPT_FP8_ACCUM_FP32 */
    int32_t promote;          /* with FAST: promote into FP32 every N elements of K, a multiple of 32; 0 = never (0) */
    int32_t saturate;         /* casts saturate (1) or overflow to NaN/inf (0) */
} mpt_fp8_recipe;

/* The defaults above. */
MPT_API mpt_fp8_recipe mpt_fp8_recipe_default(void);
/* MPT_ERR_ARG naming the setting (as the mptrain flag) when a field is out of range, or when mxfp8 (mx != 0) is
 * asked for the fast accumulator. */
MPT_API mpt_status mpt_fp8_recipe_check(const mpt_fp8_recipe *r, int mx);

/* "delayed" / "current", "fp32" / "fast", "floor" / "ceil" / "rceil"; the parsers return 0, or -1 for an unknown
 * name. */
MPT_API const char *mpt_fp8_scaling_name(mpt_fp8_scaling s);
MPT_API int mpt_fp8_scaling_parse(const char *s, mpt_fp8_scaling *out);
MPT_API const char *mpt_fp8_accum_name(mpt_fp8_accum a);
MPT_API int mpt_fp8_accum_parse(const char *s, mpt_fp8_accum *out);
MPT_API const char *mpt_mx_rounding_name(int r);
MPT_API int mpt_mx_rounding_parse(const char *s, int *out);

/* Whether a GEMM of these sizes may run with FP8 operands: M, N and K positive multiples of 16 (issue #23's rule;
 * see the file comment for TE's and cuBLASLt's). */
MPT_API int mpt_fp8_gemm_ok(int64_t M, int64_t N, int64_t K);

/* One FP8 operand tensor of a graph (host description; its state is g->fp8_meta[index]). */
typedef struct mpt_fp8_tensor {
    char name[MPT_NAME_LEN]; /* "<layer>.x", "<layer>.weight", "<layer>.dy" */
    mpt_dtype fmt;           /* E4M3 or E5M2 */
} mpt_fp8_tensor;

/* Registers an FP8 operand tensor named `name` in format fmt with graph g (before mpt_graph_alloc) and returns its
 * index in the state. */
MPT_API int mpt_fp8_register(struct mpt_graph *g, const char *name, mpt_dtype fmt);
/* (mpt_graph_alloc then adds the state tensors, "amp.fp8_state" and "amp.fp8_amax_history" in MPT_MEM_OPTIM, and
 * writes the initial state: scale 1, scale_inv 1, amax 0, amax_used 0, histories 0.) */

/* The graph's FP8 state as host arrays (for checkpoints): state[i*3 + 0..2] = scale, scale_inv, amax_used of tensor
 * i, history[i*len + j]; buffers of 3*n and n*len floats. Synchronises. */
MPT_API void mpt_fp8_state_to_host(struct mpt_graph *g, float *state, float *history);
/* Writes them back (amax = 0), after checking every value: scale finite and > 0, scale_inv == 1/scale in FP32,
 * amax_used and history finite and >= 0. MPT_ERR_FORMAT naming `what` (the file) and the tensor otherwise; nothing
 * is written then. */
MPT_API mpt_status mpt_fp8_state_from_host(struct mpt_graph *g, const float *state, const float *history,
                                           const char *what);

/* The length of g's amax histories (the recipe's, at least 1). */
MPT_API int mpt_fp8_history_len(const struct mpt_graph *g);

#endif
