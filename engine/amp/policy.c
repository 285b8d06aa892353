/* engine/amp/policy.c - the autocast-style op table. Change precision rules here and only here. */
#include "engine/amp/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How an op chooses its compute dtype. */
typedef enum {
    RULE_LOWP,   /* the mode's low-precision dtype and math (GEMM-like ops) */
    RULE_FP32,   /* FP32 whatever the mode */
    RULE_FOLLOW, /* the input's dtype, FP32 arithmetic per element */
    RULE_NORM,   /* the input's dtype for activations; statistics, normalisation and affine parameters in FP32 */
} rule_kind;

typedef struct op_rule {
    rule_kind rule;
    const char *reason; /* why (mpt_policy_op_reason; printed with the precision map) */
} op_rule;

/* The policy table (cf. PyTorch autocast, torch.amp docs "Autocast Op Reference": matmul/conv -> lower precision;
 * softmax/log_softmax/nll_loss/cross_entropy/layer_norm/reductions -> float32; everything else runs in its input's
 * type). */
static const op_rule mpt_policy_rules[] = {
    [MPT_OP_INPUT] = {RULE_LOWP, "the batch is converted once, to the mode's activation dtype"},
    [MPT_OP_LINEAR] = {RULE_LOWP, "a GEMM: autocast lowers matmul/linear, Tensor Cores multiply 16-bit (or TF32) "
                                  "operands with FP32 accumulation"},
    [MPT_OP_CONV2D] = {RULE_LOWP, "a convolution: autocast lowers conv2d, Tensor Cores with FP32 accumulation"},
    [MPT_OP_RELU] = {RULE_FOLLOW, "element-wise: exact in any dtype, runs in its input's (autocast's default)"},
    [MPT_OP_MAXPOOL2D] = {RULE_FOLLOW, "selects one input per window: exact in any dtype"},
    [MPT_OP_FLATTEN] = {RULE_FOLLOW, "a view: no arithmetic"},
    [MPT_OP_DROPOUT] = {RULE_FOLLOW, "element-wise, one FP32 division rounded once: runs in its input's dtype"},
    [MPT_OP_SOFTMAX_XENT] = {RULE_FP32, "autocast's float32 list has softmax, log_softmax and cross_entropy: exp and "
                                        "the sum over classes overflow or lose the small terms in 16 bits"},
    [MPT_OP_BATCHNORM] = {RULE_NORM, "mean and variance are sums over the batch (and the image): in FP32, with FP32 "
                                     "gamma, beta and running statistics and 16-bit input and output, as cuDNN's batch "
                                     "norm and PyTorch's mixed-precision batch_norm (not on autocast's lists: it keeps "
                                     "the input's dtype)"},
    [MPT_OP_LAYERNORM] = {RULE_NORM, "autocast's float32 list has layer_norm: statistics, normalisation and gamma, beta "
                                     "in FP32; the output is rounded once to the activation dtype, which is what the "
                                     "next lowered op's cast of autocast's FP32 output gives"},
    [MPT_OP_AVGPOOL2D] = {RULE_FOLLOW, "a window sum in FP32 rounded once: runs in its input's dtype (autocast's "
                                       "default)"},
    [MPT_OP_GELU] = {RULE_FOLLOW, "element-wise, computed in FP32 and rounded once: runs in its input's dtype (gelu is "
                                  "on none of autocast's lists)"},
    [MPT_OP_TANH] = {RULE_FOLLOW, "element-wise, computed in FP32 and rounded once: runs in its input's dtype"},
    [MPT_OP_SIGMOID] = {RULE_FOLLOW, "element-wise, computed in FP32 and rounded once: runs in its input's dtype"},
    [MPT_OP_LEAKYRELU] = {RULE_FOLLOW, "element-wise, one FP32 product rounded once: runs in its input's dtype"},
};
_Static_assert(sizeof mpt_policy_rules / sizeof mpt_policy_rules[0] == MPT_OP_COUNT, "one rule per mpt_op");

/* The precision modes: one row each (policy.h, mpt_mode_desc). */
static const mpt_mode_desc modes[] = {
    [MPT_PRECISION_FP32] = {
        .name = "fp32", .act_name = "fp32", .act_dtype = MPT_DTYPE_F32, .math = MPT_MATH_FP32, .fp32_operands = 1,
        .tf32_default = 0, .lowp_math = MPT_MATH_FP32, .compare_default = 1, .reference = 1,
        .summary = "FP32 storage and math, TF32 off: the reference",
        .explained = "**fp32**: weights, activations and gradients in IEEE binary32 (24-bit significand, unit roundoff "
                     "2^-24); GEMMs and convolutions multiply FP32 operands with FP32 FMAs, TF32 off. The reference the "
                     "others are measured against (last column)."},
    [MPT_PRECISION_TF32] = {
        .name = "tf32", .act_name = "tf32", .act_dtype = MPT_DTYPE_F32, .math = MPT_MATH_TF32, .fp32_operands = 1,
        .tf32_default = 1, .lowp_math = MPT_MATH_FP32, .compare_default = 1,
        .summary = "FP32 storage, GEMM/conv operands rounded to TF32",
        .explained = "**tf32**: storage stays FP32, but GEMM and convolution operands are rounded to TF32 (FP32's 8-bit "
                     "exponent, 10 explicit significand bits, unit roundoff 2^-11) before the Tensor Core multiply; "
                     "products and sums are FP32. Same memory as fp32; on Ampere and newer GPUs the GEMMs run several "
                     "times faster. In PyTorch: `torch.backends.cuda.matmul.allow_tf32 = True` or "
                     "`torch.set_float32_matmul_precision(\"high\")` for matmuls (off by default), and "
                     "`torch.backends.cudnn.allow_tf32` for convolutions (True by default: PyTorch convolutions on "
                     "Ampere already run in TF32 unless it is set to False). NVIDIA_TF32_OVERRIDE=0 turns all of it off."},
    [MPT_PRECISION_FP16] = {
        .name = "fp16", .act_name = "fp16", .act_dtype = MPT_DTYPE_F16, .math = MPT_MATH_F16,
        .lowp_math = MPT_MATH_F16, .dynamic_loss_scale = 1, .compare_default = 1,
        .summary = "FP16 weights and activations, FP32 masters, dynamic loss scaling",
        .explained = "**fp16**: weights (a working copy), activations and activation gradients in IEEE binary16 (5-bit "
                     "exponent: largest value 65504, smallest normal 2^-14, unit roundoff 2^-11); GEMM operands FP16 with "
                     "FP32 accumulation. FP32 master weights take the optimizer step, and the loss is multiplied by a "
                     "dynamic loss scale S before backward so small gradients do not underflow to zero; gradients are "
                     "divided by S in FP32 and a step whose gradients overflowed (inf/NaN) is skipped and S halved "
                     "(`torch.amp.GradScaler`). Skipped steps and the final S are in the table. One difference from "
                     "PyTorch AMP: AMP's weight-gradient GEMM writes FP16 and casts it to FP32; mptrain writes weight "
                     "gradients in FP32 straight from the FP32 accumulator, one FP16 rounding fewer."},
    [MPT_PRECISION_BF16] = {
        .name = "bf16", .act_name = "bf16", .act_dtype = MPT_DTYPE_BF16, .math = MPT_MATH_BF16,
        .lowp_math = MPT_MATH_BF16, .compare_default = 1,
        .summary = "BF16 weights and activations, FP32 masters, no loss scaling",
        .explained = "**bf16**: like fp16 but in bfloat16 (FP32's 8-bit exponent, so the same range as FP32, but only 7 "
                     "explicit significand bits: unit roundoff 2^-8). No loss scaling is needed; the price is coarser "
                     "rounding of weights and activations, which FP32 master weights and FP32 accumulation contain."},
    [MPT_PRECISION_FP8] = {
        .name = "fp8", .act_name = "bf16", .act_dtype = MPT_DTYPE_BF16, .math = MPT_MATH_FP8,
        .lowp_math = MPT_MATH_BF16, .fp8 = MPT_FP8_KIND_TENSOR,
        .fp8_fmt = {MPT_DTYPE_E4M3, MPT_DTYPE_E4M3, MPT_DTYPE_E5M2},
        .summary = "bf16, plus FP8 GEMMs: E4M3 forward, E5M2 gradients, a scale per tensor (TE's HYBRID)",
        .explained = "**fp8**: bf16, except that every linear layer whose batch, input and output sizes are multiples of "
                     "16 runs its GEMMs with FP8 operands, each tensor with its own FP32 scale s = fmax / amax (the largest "
                     "|x| over a history of steps: TransformerEngine's DelayedScaling): E4M3 (4-bit exponent, 3-bit "
                     "mantissa, largest 448, unit roundoff 2^-4) for activations and weights, E5M2 (largest 57344, unit "
                     "roundoff 2^-3) for the gradients of the backward GEMMs (TE's HYBRID recipe). Products are exact, sums "
                     "FP32 (or Hopper's narrower accumulator with --fp8-accum fast). The precision map lists which GEMMs."},
    [MPT_PRECISION_FP8_E4M3] = {
        .name = "fp8-e4m3", .act_name = "bf16", .act_dtype = MPT_DTYPE_BF16, .math = MPT_MATH_FP8,
        .lowp_math = MPT_MATH_BF16, .fp8 = MPT_FP8_KIND_TENSOR,
        .fp8_fmt = {MPT_DTYPE_E4M3, MPT_DTYPE_E4M3, MPT_DTYPE_E4M3},
        .summary = "bf16, plus FP8 GEMMs: E4M3 for every operand, gradients too, a scale per tensor",
        .explained = "**fp8-e4m3**: fp8 with E4M3 for the gradients too: one more bit of precision, less range (E4M3 "
                     "spans 2^17.8 from its smallest subnormal to its largest value 448, E5M2 2^31.8 up to 57344: 2^14 "
                     "times more), so gradients can saturate or flush more often than in fp8: the FP8 casts' table below "
                     "says how often they did (docs/numerics.md)."},
    [MPT_PRECISION_MXFP8] = {
        .name = "mxfp8", .act_name = "bf16", .act_dtype = MPT_DTYPE_BF16, .math = MPT_MATH_MXFP8,
        .lowp_math = MPT_MATH_BF16, .fp8 = MPT_FP8_KIND_MX,
        .fp8_fmt = {MPT_DTYPE_E4M3, MPT_DTYPE_E4M3, MPT_DTYPE_E4M3},
        .summary = "bf16, plus FP8 GEMMs: E4M3 with an E8M0 scale per block of 32 along K (OCP MX)",
        .explained = "**mxfp8**: fp8's GEMMs with E4M3 operands and one power-of-two (E8M0) scale per 32 consecutive "
                     "elements along the reduction (OCP Microscaling v1.0, Blackwell's MXFP8), chosen from each block's "
                     "amax: no per-tensor state, and a block's small values no longer share a scale with the tensor's "
                     "largest."},
};
_Static_assert(sizeof modes / sizeof modes[0] == MPT_PRECISION_COUNT, "one row per mpt_precision");

const mpt_mode_desc *mpt_mode_info(mpt_precision m) {
    return (unsigned)m < MPT_PRECISION_COUNT ? &modes[m] : NULL;
}

mpt_policy mpt_policy_make_explicit(mpt_precision mode, int tf32_matmul, int tf32_conv) {
    mpt_policy p = {.mode = mode, .tf32_matmul = tf32_matmul, .tf32_conv = tf32_conv, .tf32_override = 0,
                    .fp8 = mpt_fp8_recipe_default(), .norm_stats = MPT_NORM_STATS_FP32};
    return p;
}

/* The --norm-stats rows (policy.h, mpt_norm_stats_desc). */
static const mpt_norm_stats_desc norm_stats_rows[] = {
    [MPT_NORM_STATS_FP32] = {"fp32", MPT_DTYPE_F32, 0, "FP32, two passes (the policy)"},
    [MPT_NORM_STATS_FP32_ONEPASS] = {"fp32-onepass", MPT_DTYPE_F32, 1, "FP32, E[x^2] - E[x]^2"},
    [MPT_NORM_STATS_BF16] = {"bf16", MPT_DTYPE_BF16, 0, "BF16 arithmetic, two passes"},
    [MPT_NORM_STATS_BF16_ONEPASS] = {"bf16-onepass", MPT_DTYPE_BF16, 1, "BF16 arithmetic, E[x^2] - E[x]^2"},
    [MPT_NORM_STATS_FP16] = {"fp16", MPT_DTYPE_F16, 0, "FP16 arithmetic, two passes"},
    [MPT_NORM_STATS_FP16_ONEPASS] = {"fp16-onepass", MPT_DTYPE_F16, 1, "FP16 arithmetic, E[x^2] - E[x]^2"},
};
_Static_assert(sizeof norm_stats_rows / sizeof norm_stats_rows[0] == MPT_NORM_STATS_COUNT,
               "one row per mpt_norm_stats");

const mpt_norm_stats_desc *mpt_norm_stats_info(mpt_norm_stats s) {
    return (unsigned)s < MPT_NORM_STATS_COUNT ? &norm_stats_rows[s] : NULL;
}

const char *mpt_norm_stats_name(mpt_norm_stats s) {
    return (unsigned)s < MPT_NORM_STATS_COUNT ? norm_stats_rows[s].name : "?";
}

int mpt_norm_stats_parse(const char *s, mpt_norm_stats *out) {
    for (int i = 0; i < MPT_NORM_STATS_COUNT; i++)
        if (strcmp(s, norm_stats_rows[i].name) == 0) {
            *out = (mpt_norm_stats)i;
            return 0;
        }
    return -1;
}

const char *mpt_norm_stats_names(void) {
    static char buf[160]; /* from the rows, so that the list cannot drift from them */
    if (!buf[0])
        for (int i = 0, k = 0; i < MPT_NORM_STATS_COUNT && k >= 0 && (size_t)k < sizeof buf; i++)
            k += snprintf(buf + k, sizeof buf - (size_t)k, "%s%s", i ? " | " : "", norm_stats_rows[i].name);
    return buf;
}

mpt_policy mpt_policy_make(mpt_precision mode) {
    int tf32 = (unsigned)mode < MPT_PRECISION_COUNT && modes[mode].tf32_default;
    return mpt_policy_make_switches(mode, tf32, tf32);
}

mpt_policy mpt_policy_make_switches(mpt_precision mode, int tf32_matmul, int tf32_conv) {
    mpt_policy p = mpt_policy_make_explicit(mode, tf32_matmul, tf32_conv);
    const char *ov = getenv("NVIDIA_TF32_OVERRIDE");
    if (ov && strcmp(ov, "0") == 0) {
        p.tf32_override = 1;
        p.tf32_matmul = 0;
        p.tf32_conv = 0;
    }
    return p;
}

mpt_dtype mpt_policy_act_dtype(const mpt_policy *p) {
    return (unsigned)p->mode < MPT_PRECISION_COUNT ? modes[p->mode].act_dtype : MPT_DTYPE_F32;
}

mpt_op_precision mpt_policy_for(const mpt_policy *p, mpt_op op, mpt_dtype in_dtype) {
    mpt_op_precision r = {MPT_DTYPE_F32, MPT_MATH_FP32};
    rule_kind k = (unsigned)op < MPT_OP_COUNT ? mpt_policy_rules[op].rule : RULE_FP32;
    if (k == RULE_FOLLOW || k == RULE_NORM) {
        r.compute_dtype = in_dtype;
        return r;
    }
    if (k == RULE_FP32 || (unsigned)p->mode >= MPT_PRECISION_COUNT) return r;
    const mpt_mode_desc *m = &modes[p->mode];
    r.compute_dtype = m->act_dtype;
    if (m->fp32_operands) {
        int tf32 = op == MPT_OP_LINEAR ? p->tf32_matmul : op == MPT_OP_CONV2D ? p->tf32_conv : 0;
        r.math = tf32 ? MPT_MATH_TF32 : MPT_MATH_FP32;
    } else {
        r.math = m->lowp_math; /* FP8 modes: BF16 unless the layer qualifies for FP8 GEMMs (mpt_policy_fp8_linear) */
    }
    if (op == MPT_OP_INPUT) r.math = MPT_MATH_FP32;
    return r;
}

int mpt_policy_default_loss_scaling(const mpt_policy *p) {
    return (unsigned)p->mode < MPT_PRECISION_COUNT && modes[p->mode].dynamic_loss_scale;
}

int mpt_policy_is_fp8(const mpt_policy *p) {
    return (unsigned)p->mode < MPT_PRECISION_COUNT && modes[p->mode].fp8 != MPT_FP8_KIND_NONE;
}

int mpt_policy_fp8_mx(const mpt_policy *p) {
    return (unsigned)p->mode < MPT_PRECISION_COUNT && modes[p->mode].fp8 == MPT_FP8_KIND_MX;
}

int mpt_policy_fp8_linear(const mpt_policy *p, int64_t B, int64_t in, int64_t out, mpt_math *math, mpt_dtype fmt[3]) {
    if (!mpt_policy_is_fp8(p) || !mpt_fp8_gemm_ok(B, out, in)) return 0;
    const mpt_mode_desc *m = &modes[p->mode];
    *math = m->math;
    for (int i = 0; i < 3; i++) fmt[i] = m->fp8_fmt[i]; /* x, W: forward operands; dy: HYBRID's E5M2, or E4M3 */
    return 1;
}

const char *mpt_precision_name(mpt_precision m) {
    return (unsigned)m < MPT_PRECISION_COUNT ? modes[m].name : "?";
}

int mpt_precision_parse(const char *s, mpt_precision *out) {
    for (int i = 0; i < MPT_PRECISION_COUNT; i++)
        if (strcmp(s, modes[i].name) == 0) {
            *out = (mpt_precision)i;
            return 0;
        }
    return -1;
}

const char *mpt_op_name(mpt_op op) {
    static const char *const names[] = {[MPT_OP_INPUT] = "input", [MPT_OP_LINEAR] = "linear",
                                        [MPT_OP_CONV2D] = "conv2d", [MPT_OP_RELU] = "relu",
                                        [MPT_OP_MAXPOOL2D] = "maxpool2d", [MPT_OP_FLATTEN] = "flatten",
                                        [MPT_OP_DROPOUT] = "dropout", [MPT_OP_SOFTMAX_XENT] = "softmax_xent",
                                        [MPT_OP_BATCHNORM] = "batchnorm", [MPT_OP_LAYERNORM] = "layernorm",
                                        [MPT_OP_AVGPOOL2D] = "avgpool2d", [MPT_OP_GELU] = "gelu",
                                        [MPT_OP_TANH] = "tanh", [MPT_OP_SIGMOID] = "sigmoid",
                                        [MPT_OP_LEAKYRELU] = "leakyrelu"};
    _Static_assert(sizeof names / sizeof names[0] == MPT_OP_COUNT, "one name per mpt_op");
    return (unsigned)op < MPT_OP_COUNT ? names[op] : "?";
}

int mpt_policy_op_fp32_math(mpt_op op) {
    return (unsigned)op < MPT_OP_COUNT &&
           (mpt_policy_rules[op].rule == RULE_FP32 || mpt_policy_rules[op].rule == RULE_NORM);
}

mpt_dtype mpt_policy_param_dtype(const mpt_policy *p, mpt_op op) {
    if ((unsigned)op < MPT_OP_COUNT && mpt_policy_rules[op].rule == RULE_NORM) return MPT_DTYPE_F32;
    return mpt_policy_act_dtype(p);
}

const char *mpt_policy_op_reason(mpt_op op) { return (unsigned)op < MPT_OP_COUNT ? mpt_policy_rules[op].reason : "?"; }
