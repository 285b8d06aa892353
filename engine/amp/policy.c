/* engine/amp/policy.c - the autocast-style op table. Change precision rules here and only here. */
#include "engine/amp/policy.h"

#include <stdlib.h>
#include <string.h>

/* How an op chooses its compute dtype. */
typedef enum { RULE_LOWP, RULE_FP32, RULE_FOLLOW } rule_kind;

/* The policy table (cf. PyTorch autocast: matmul/conv -> lower precision; softmax/log_softmax/nll_loss/
 * cross_entropy/reductions -> float32; everything else runs in its input's type). */
static const rule_kind mpt_policy_rules[MPT_OP_COUNT] = {
    [MPT_OP_INPUT] = RULE_LOWP,        /* the batch is converted once, to the mode's activation dtype */
    [MPT_OP_LINEAR] = RULE_LOWP,
    [MPT_OP_CONV2D] = RULE_LOWP,
    [MPT_OP_RELU] = RULE_FOLLOW,
    [MPT_OP_MAXPOOL2D] = RULE_FOLLOW,
    [MPT_OP_FLATTEN] = RULE_FOLLOW,
    [MPT_OP_DROPOUT] = RULE_FOLLOW,
    [MPT_OP_SOFTMAX_XENT] = RULE_FP32,
};

static const char *const mpt_precision_names[MPT_PRECISION_COUNT] = {"fp32", "tf32", "fp16", "bf16",
                                                                      "fp8",  "fp8-e4m3", "mxfp8"};

mpt_policy mpt_policy_make_explicit(mpt_precision mode, int tf32_matmul, int tf32_conv) {
    mpt_policy p = {.mode = mode, .tf32_matmul = tf32_matmul, .tf32_conv = tf32_conv, .tf32_override = 0,
                    .fp8 = mpt_fp8_recipe_default()};
    return p;
}

mpt_policy mpt_policy_make(mpt_precision mode) {
    int tf32 = mode == MPT_PRECISION_TF32;
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
    switch (p->mode) {
    case MPT_PRECISION_FP16: return MPT_DTYPE_F16;
    case MPT_PRECISION_BF16:
    case MPT_PRECISION_FP8:
    case MPT_PRECISION_FP8_E4M3:
    case MPT_PRECISION_MXFP8: return MPT_DTYPE_BF16;
    default: return MPT_DTYPE_F32;
    }
}

mpt_op_precision mpt_policy_for(const mpt_policy *p, mpt_op op, mpt_dtype in_dtype) {
    mpt_op_precision r = {MPT_DTYPE_F32, MPT_MATH_FP32};
    rule_kind k = (unsigned)op < MPT_OP_COUNT ? mpt_policy_rules[op] : RULE_FP32;
    if (k == RULE_FOLLOW) {
        r.compute_dtype = in_dtype;
        return r;
    }
    if (k == RULE_FP32) return r;
    r.compute_dtype = mpt_policy_act_dtype(p);
    switch (p->mode) {
    case MPT_PRECISION_FP16: r.math = MPT_MATH_F16; break;
    case MPT_PRECISION_BF16:
    case MPT_PRECISION_FP8: /* BF16 unless the layer qualifies for FP8 GEMMs (mpt_policy_fp8_linear) */
    case MPT_PRECISION_FP8_E4M3:
    case MPT_PRECISION_MXFP8: r.math = MPT_MATH_BF16; break;
    default: {
        int tf32 = op == MPT_OP_LINEAR ? p->tf32_matmul : op == MPT_OP_CONV2D ? p->tf32_conv : 0;
        r.math = tf32 ? MPT_MATH_TF32 : MPT_MATH_FP32;
    }
    }
    if (op == MPT_OP_INPUT) r.math = MPT_MATH_FP32;
    return r;
}

int mpt_policy_default_loss_scaling(const mpt_policy *p) { return p->mode == MPT_PRECISION_FP16; }

int mpt_policy_is_fp8(const mpt_policy *p) {
    return p->mode == MPT_PRECISION_FP8 || p->mode == MPT_PRECISION_FP8_E4M3 || p->mode == MPT_PRECISION_MXFP8;
}

int mpt_policy_fp8_linear(const mpt_policy *p, int64_t B, int64_t in, int64_t out, mpt_math *math, mpt_dtype fmt[3]) {
    if (!mpt_policy_is_fp8(p) || !mpt_fp8_gemm_ok(B, out, in)) return 0;
    *math = p->mode == MPT_PRECISION_MXFP8 ? MPT_MATH_MXFP8 : MPT_MATH_FP8;
    fmt[0] = MPT_DTYPE_E4M3; /* x: forward operand */
    fmt[1] = MPT_DTYPE_E4M3; /* W: forward operand */
    fmt[2] = p->mode == MPT_PRECISION_FP8 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3; /* dy: HYBRID's E5M2, or E4M3 */
    return 1;
}

const char *mpt_precision_name(mpt_precision m) {
    return (unsigned)m < MPT_PRECISION_COUNT ? mpt_precision_names[m] : "?";
}

int mpt_precision_parse(const char *s, mpt_precision *out) {
    for (int i = 0; i < MPT_PRECISION_COUNT; i++)
        if (strcmp(s, mpt_precision_names[i]) == 0) {
            *out = (mpt_precision)i;
            return 0;
        }
    return -1;
}

const char *mpt_op_name(mpt_op op) {
    static const char *names[MPT_OP_COUNT] = {"input", "linear", "conv2d", "relu",
                                              "maxpool2d", "flatten", "dropout", "softmax_xent"};
    return (unsigned)op < MPT_OP_COUNT ? names[op] : "?";
}
