/*
 * engine/amp/policy.h - the precision policy: which dtype and math mode each op of the graph runs in.
 *
 * One run mode per run (ARCHITECTURE decision 3: precision is runtime data). The per-op rules follow the
 * spirit of PyTorch's autocast op lists (torch.amp autocast docs, "CUDA Ops that can autocast to float16"
 * / "... autocast to float32"): GEMM-like ops (linear, conv) run in the mode's low-precision dtype;
 * softmax, cross-entropy, losses and reductions always run in FP32; shape and pointwise ops (relu, maxpool,
 * avgpool, flatten, dropout, gelu, tanh, sigmoid, leakyrelu) follow their input; the normalisations (batchnorm,
 * layernorm) keep 16-bit activations but compute their statistics, the normalisation and the affine parameters in
 * FP32 (FP32 parameters in every mode). The whole table, with the reason for each rule, is mpt_policy_rules[] in
 * policy.c (mpt_policy_op_reason).
 *
 * TF32 has two switches, like PyTorch's torch.backends.cuda.matmul.allow_tf32 (GEMMs; off by default since
 * PyTorch 1.12) and torch.backends.cudnn.allow_tf32 (convolutions; on by default). In mptrain the `tf32`
 * mode turns both on and the `fp32` mode both off by default, so that `fp32` is true FP32; --tf32-matmul and
 * --tf32-conv set them one by one (mpt_policy_make_switches). NVIDIA_TF32_OVERRIDE=0 in the
 * environment turns TF32 off everywhere, as it does in cuBLAS and cuDNN, on the CPU emulation too.
 *
 * FP8 modes (engine/amp/fp8.h has the recipe, its sources and the scale state): activations, weights' working
 * copies and every tensor outside an FP8 GEMM are BF16, as under TransformerEngine; a linear layer whose three
 * GEMMs qualify (mpt_policy_fp8_linear: batch, in and out features multiples of 16) runs them with FP8
 * operands; convolutions and the other linear layers run in BF16. The precision map shows each node's choice.
 *   fp8       TE's HYBRID recipe: E4M3 for the forward GEMM's operands (activations, weights), E5M2 for the
 *             gradient operand of the backward GEMMs (dgrad, wgrad); one scale per tensor
 *   fp8-e4m3  E4M3 for every operand, gradients too (TE's Format.E4M3): why E5M2 exists
 *   mxfp8     E4M3 for every operand with one E8M0 scale per 32 elements along K (OCP MX; TE's MXFP8BlockScaling,
 *             whose default format is E4M3)
 */
#ifndef MPT_ENGINE_AMP_POLICY_H
#define MPT_ENGINE_AMP_POLICY_H

#include "engine/amp/fp8.h"
#include "engine/api.h"
#include "engine/dtype.h"

typedef enum mpt_precision {
    MPT_PRECISION_FP32 = 0, /* FP32 storage and math (TF32 off) */
    MPT_PRECISION_TF32,     /* FP32 storage, TF32 operands for GEMM/conv */
    MPT_PRECISION_FP16,     /* FP16 weights/activations, FP32 masters, dynamic loss scaling */
    MPT_PRECISION_BF16,     /* BF16 weights/activations, FP32 masters, no loss scaling by default */
    MPT_PRECISION_FP8,      /* bf16, plus FP8 GEMMs: E4M3 forward, E5M2 gradients, per-tensor scales */
    MPT_PRECISION_FP8_E4M3, /* bf16, plus FP8 GEMMs: E4M3 for every operand, per-tensor scales */
    MPT_PRECISION_MXFP8,    /* bf16, plus FP8 GEMMs: E4M3 with an E8M0 scale per block of 32 */
    MPT_PRECISION_COUNT
} mpt_precision;

/* Whether and how a mode runs FP8 GEMMs. */
typedef enum mpt_fp8_kind {
    MPT_FP8_KIND_NONE = 0,   /* no FP8 GEMMs */
    MPT_FP8_KIND_TENSOR,     /* FP8 operands with one FP32 scale per tensor (TransformerEngine's recipes) */
    MPT_FP8_KIND_MX,         /* FP8 operands with one E8M0 scale per block of 32 along K (OCP MX) */
} mpt_fp8_kind;

/* A precision mode's properties: one row per mode (policy.c), read through mpt_mode_info() wherever a property of a
 * mode is needed (STYLE.md rule 9: code asks the row, never `precision == X`). A new mode is one row here plus its
 * enum value. */
typedef struct mpt_mode_desc {
    const char *name;        /* --precision's value: "fp32", "tf32", "fp16", "bf16", "fp8", "fp8-e4m3", "mxfp8" */
    const char *act_name;    /* the name reports give the format of its activations, activation gradients and working
                                weights: its own name, "bf16" in the FP8 modes (everything outside an FP8 GEMM) */
    mpt_dtype act_dtype;     /* working weights and activations: F32, F16 or BF16 */
    mpt_math math;           /* its characteristic GEMM/convolution math: FP32, TF32, F16, BF16, FP8 (per-tensor
                                scales) or MXFP8 */
    int fp32_operands;       /* GEMM/conv operands are FP32: the TF32 switches choose FP32 or TF32 math per op
                                (fp32, tf32) */
    int tf32_default;        /* the TF32 switches' default: on (tf32) or off */
    mpt_math lowp_math;      /* the math of the ops autocast lowers when the operands are 16-bit: F16 or BF16 (the FP8
                                modes' layers that do not qualify for FP8 GEMMs run BF16); FP32 for the FP32-operand
                                modes (their switches decide) */
    mpt_fp8_kind fp8;        /* FP8 GEMMs for the linear layers that qualify (mpt_policy_fp8_linear) */
    mpt_dtype fp8_fmt[3];    /* their operand formats: x, W (forward) and dy (dgrad, wgrad); E4M3 or E5M2 */
    int dynamic_loss_scale;  /* the dynamic loss scaler by default: FP16's range needs it (Micikevicius et al. 2018);
                                BF16 has FP32's exponent range, FP8 tensors carry their own scales */
    int compare_default;     /* in compare's default --precisions list */
    int reference;           /* the mode the others are measured against (compare's last column, the paired
                                differences): fp32 */
    const char *summary;     /* one line for --help */
    const char *explained;   /* report.md's paragraph on what the mode does */
} mpt_mode_desc;

/* The row of a mode (NULL outside the enum). */
MPT_API const mpt_mode_desc *mpt_mode_info(mpt_precision m);

/* Op kinds the policy has a rule for. */
typedef enum mpt_op {
    MPT_OP_INPUT = 0,
    MPT_OP_LINEAR,
    MPT_OP_CONV2D,
    MPT_OP_RELU,
    MPT_OP_MAXPOOL2D,
    MPT_OP_FLATTEN,
    MPT_OP_DROPOUT,
    MPT_OP_SOFTMAX_XENT,
    MPT_OP_BATCHNORM,
    MPT_OP_LAYERNORM,
    MPT_OP_AVGPOOL2D,
    MPT_OP_GELU,
    MPT_OP_TANH,
    MPT_OP_SIGMOID,
    MPT_OP_LEAKYRELU,
    MPT_OP_COUNT
} mpt_op;

/* How the normalisations (batchnorm, layernorm) compute their forward statistics, mean and variance (--norm-stats).
 * The policy (RULE_NORM) is FP32 with two passes (the mean, then the sum of squared deviations), as cuDNN's batch norm
 * and PyTorch's mixed-precision batch_norm and layer_norm compute them. The other rows are ablations that show what
 * that rule prevents (mptrain lab normalization): every sum, product and quotient of the statistics rounded to the
 * row's format (BF16 or FP16: a 16-bit accumulator), or the variance by the one-pass formula E[x^2] - E[x]^2,
 * clamped at 0 (Flax's BatchNorm with use_fast_variance=True computes it so), which cancels when |mean| >> sd
 * (Chan, Golub & LeVeque 1983). The summation order is the FP32 kernel's (engine/backend.h, mpt_norm_args); only the
 * forward statistics change: the normalisation, the affine transform, the running statistics' update and the backward
 * pass's sums stay FP32 (from the saved, rounded mean and rstd). The CPU backend runs every row; the CUDA backend runs
 * fp32 only (a run with another row on the GPU is refused). */
typedef enum mpt_norm_stats {
    MPT_NORM_STATS_FP32 = 0,     /* the policy: FP32, two passes */
    MPT_NORM_STATS_FP32_ONEPASS, /* FP32, E[x^2] - E[x]^2 */
    MPT_NORM_STATS_BF16,         /* BF16 arithmetic, two passes */
    MPT_NORM_STATS_BF16_ONEPASS, /* BF16 arithmetic, E[x^2] - E[x]^2 */
    MPT_NORM_STATS_FP16,         /* FP16 arithmetic, two passes */
    MPT_NORM_STATS_FP16_ONEPASS, /* FP16 arithmetic, E[x^2] - E[x]^2 */
    MPT_NORM_STATS_COUNT
} mpt_norm_stats;

/* One row of the --norm-stats table (policy.c). */
typedef struct mpt_norm_stats_desc {
    const char *name;   /* --norm-stats's value: "fp32", "fp32-onepass", "bf16", "bf16-onepass", "fp16", ... */
    mpt_dtype dtype;    /* the format every operation of the statistics rounds to: F32, BF16 or F16 */
    int one_pass;       /* variance as max(0, E[x^2] - E[x]^2) (1) or the mean of squared deviations (0) */
    const char *summary; /* for --help and the precision map */
} mpt_norm_stats_desc;

/* The row of s (NULL outside the enum). */
MPT_API const mpt_norm_stats_desc *mpt_norm_stats_info(mpt_norm_stats s);
/* "fp32", ...; parse returns 0 on success, -1 for an unknown name. */
MPT_API const char *mpt_norm_stats_name(mpt_norm_stats s);
MPT_API int mpt_norm_stats_parse(const char *s, mpt_norm_stats *out);
/* "fp32 | fp32-onepass | bf16 | ...", for messages and --help. */
MPT_API const char *mpt_norm_stats_names(void);

typedef struct mpt_policy {
    mpt_precision mode;
    int tf32_matmul;   /* TF32 allowed for linear (GEMM) */
    int tf32_conv;     /* TF32 allowed for conv */
    int tf32_override; /* 1 when NVIDIA_TF32_OVERRIDE=0 was found in the environment and applied */
    mpt_fp8_recipe fp8; /* FP8 modes: scaling, accumulator, saturation (mpt_fp8_recipe_default() otherwise) */
    mpt_norm_stats norm_stats; /* the normalisations' forward statistics: FP32 two-pass (the policy) unless an
                                  ablation is asked for (--norm-stats) */
} mpt_policy;

/* What the policy decides for one node. */
typedef struct mpt_op_precision {
    mpt_dtype compute_dtype; /* dtype of the node's output and of its low-precision operands */
    mpt_math math;           /* operand format of GEMM/conv; FP32 for everything else */
} mpt_op_precision;

/* The policy for a run mode, with NVIDIA_TF32_OVERRIDE read from the environment. */
MPT_API mpt_policy mpt_policy_make(mpt_precision mode);
/* The same with the two TF32 switches given (--tf32-matmul, --tf32-conv: PyTorch's
 * torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32). They matter where GEMM/conv
 * operands are FP32 (fp32 and tf32 modes); NVIDIA_TF32_OVERRIDE=0 still turns both off (tf32_override = 1). */
MPT_API mpt_policy mpt_policy_make_switches(mpt_precision mode, int tf32_matmul, int tf32_conv);
/* The policy for a run mode with explicit TF32 switches and no environment lookup (tests). */
MPT_API mpt_policy mpt_policy_make_explicit(mpt_precision mode, int tf32_matmul, int tf32_conv);
/* The dtype of weights (working copies) and activations in this mode: F32, F16 or BF16 (BF16 in FP8 modes). */
MPT_API mpt_dtype mpt_policy_act_dtype(const mpt_policy *p);
/* The rule for one op whose (first) input has dtype in_dtype. */
MPT_API mpt_op_precision mpt_policy_for(const mpt_policy *p, mpt_op op, mpt_dtype in_dtype);
/* Whether this mode uses the dynamic loss scaler by default (fp16 only). */
MPT_API int mpt_policy_default_loss_scaling(const mpt_policy *p);
/* Whether the mode is one of the FP8 ones (fp8, fp8-e4m3, mxfp8: its row's fp8 kind is not NONE). */
MPT_API int mpt_policy_is_fp8(const mpt_policy *p);
/* Whether the mode's FP8 GEMMs use MX block scales (mxfp8) rather than a scale per tensor. */
MPT_API int mpt_policy_fp8_mx(const mpt_policy *p);
/* What a linear layer with batch rows B, `in` input and `out` output features runs its GEMMs in under an FP8
 * mode: 1 when its fprop (M, N, K = B, out, in), dgrad (B, in, out) and wgrad (out, in, B) GEMMs all have M, N
 * and K multiples of 16 (mpt_fp8_gemm_ok; the three involve the same three sizes, so a layer qualifies as a
 * whole), with *math FP8 or MXFP8 and fmt[0..2] the formats of its input x, weight W and output gradient dy;
 * 0 otherwise (and in every other mode: the layer runs in BF16). */
MPT_API int mpt_policy_fp8_linear(const mpt_policy *p, int64_t B, int64_t in, int64_t out, mpt_math *math,
                                  mpt_dtype fmt[3]);

/* "fp32", "tf32", "fp16", "bf16", "fp8", "fp8-e4m3", "mxfp8"; parse returns 0 on success, -1 for an unknown
 * name. */
MPT_API const char *mpt_precision_name(mpt_precision m);
MPT_API int mpt_precision_parse(const char *s, mpt_precision *out);
/* "linear", "conv2d", ... */
MPT_API const char *mpt_op_name(mpt_op op);
/* Whether an op computes in FP32 whatever its activations' dtype (softmax + cross-entropy; the normalisations, whose
 * statistics and affine parameters are FP32): the precision map's math column says "fp32" for it. */
MPT_API int mpt_policy_op_fp32_math(mpt_op op);
/* The dtype of an op's parameters in a mode: the activation dtype (the working copy of an FP32 master) for linear and
 * conv2d, F32 for the normalisations' gamma and beta. */
MPT_API mpt_dtype mpt_policy_param_dtype(const mpt_policy *p, mpt_op op);
/* One sentence: why the op runs in the precision it runs in (the policy table's reason column), for the precision
 * map. */
MPT_API const char *mpt_policy_op_reason(mpt_op op);

#endif
