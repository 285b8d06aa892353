/*
 * tests/test_policy.c - the precision policy (engine/amp/policy.h): which dtype and math mode each op runs in.
 *
 * Expected table, written out here independently of policy.c (PyTorch autocast spirit):
 *   linear, conv2d:       compute dtype = the mode's activation dtype; math fp32 -> FP32, tf32 -> TF32 (per
 *                         switch: matmul for linear, conv for conv2d), fp16 -> F16, bf16 -> BF16
 *   input:                activation dtype, FP32 math (a conversion, not a GEMM)
 *   softmax_xent:         always F32 / FP32, whatever its input
 *   relu, maxpool2d, flatten, dropout: follow their input's dtype, FP32 math
 * NVIDIA_TF32_OVERRIDE=0 in the environment turns TF32 off (and sets tf32_override); other values do not.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/amp/policy.h"
#include "harness.h"

static const mpt_precision modes[] = {MPT_PRECISION_FP32, MPT_PRECISION_TF32, MPT_PRECISION_FP16,
                                      MPT_PRECISION_BF16};
static const mpt_dtype float_dtypes[] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};

/* The activation dtype each mode should use. */
static mpt_dtype expected_act(mpt_precision m) {
    return m == MPT_PRECISION_FP16 ? MPT_DTYPE_F16 : m == MPT_PRECISION_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}

/* The GEMM/conv math a mode should give an op when the op's TF32 switch is `tf32`. */
static mpt_math expected_lowp_math(mpt_precision m, int tf32) {
    switch (m) {
    case MPT_PRECISION_FP16: return MPT_MATH_F16;
    case MPT_PRECISION_BF16: return MPT_MATH_BF16;
    default: return tf32 ? MPT_MATH_TF32 : MPT_MATH_FP32;
    }
}

START_TEST(test_default_table) {
    unsetenv("NVIDIA_TF32_OVERRIDE");
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        mpt_precision mode = modes[i];
        mpt_policy p = mpt_policy_make(mode);
        int tf32 = mode == MPT_PRECISION_TF32;
        ck_assert_int_eq(p.mode, mode);
        ck_assert_int_eq(p.tf32_matmul, tf32);
        ck_assert_int_eq(p.tf32_conv, tf32);
        ck_assert_int_eq(p.tf32_override, 0);
        ck_assert_int_eq(mpt_policy_act_dtype(&p), expected_act(mode));
        for (size_t j = 0; j < sizeof float_dtypes / sizeof float_dtypes[0]; j++) {
            mpt_dtype in = float_dtypes[j];
            mpt_op_precision lin = mpt_policy_for(&p, MPT_OP_LINEAR, in);
            mpt_op_precision conv = mpt_policy_for(&p, MPT_OP_CONV2D, in);
            ck_assert_int_eq(lin.compute_dtype, expected_act(mode));
            ck_assert_int_eq(conv.compute_dtype, expected_act(mode));
            ck_assert_msg(lin.math == expected_lowp_math(mode, tf32), "%s linear: math %s", mpt_precision_name(mode),
                          mpt_math_name(lin.math));
            ck_assert_msg(conv.math == expected_lowp_math(mode, tf32), "%s conv: math %s", mpt_precision_name(mode),
                          mpt_math_name(conv.math));

            mpt_op_precision in_op = mpt_policy_for(&p, MPT_OP_INPUT, in);
            ck_assert_int_eq(in_op.compute_dtype, expected_act(mode));
            ck_assert_int_eq(in_op.math, MPT_MATH_FP32);

            mpt_op_precision sx = mpt_policy_for(&p, MPT_OP_SOFTMAX_XENT, in);
            ck_assert_int_eq(sx.compute_dtype, MPT_DTYPE_F32);
            ck_assert_int_eq(sx.math, MPT_MATH_FP32);

            /* element-wise and shape ops, and the normalisations (16-bit activations, FP32 statistics) follow their
             * input; only the normalisations compute in FP32 with FP32 parameters */
            const mpt_op follow[] = {MPT_OP_RELU,      MPT_OP_MAXPOOL2D, MPT_OP_FLATTEN,   MPT_OP_DROPOUT,
                                     MPT_OP_AVGPOOL2D, MPT_OP_GELU,      MPT_OP_TANH,      MPT_OP_SIGMOID,
                                     MPT_OP_LEAKYRELU, MPT_OP_BATCHNORM, MPT_OP_LAYERNORM};
            for (size_t k = 0; k < sizeof follow / sizeof follow[0]; k++) {
                mpt_op_precision f = mpt_policy_for(&p, follow[k], in);
                ck_assert_msg(f.compute_dtype == in, "%s %s on %s input: got %s", mpt_precision_name(mode),
                              mpt_op_name(follow[k]), mpt_dtype_name(in), mpt_dtype_name(f.compute_dtype));
                ck_assert_int_eq(f.math, MPT_MATH_FP32);
                const int norm = follow[k] == MPT_OP_BATCHNORM || follow[k] == MPT_OP_LAYERNORM;
                ck_assert_msg(mpt_policy_op_fp32_math(follow[k]) == norm, "%s", mpt_op_name(follow[k]));
                if (norm) ck_assert_int_eq(mpt_policy_param_dtype(&p, follow[k]), MPT_DTYPE_F32);
            }
            ck_assert(mpt_policy_op_fp32_math(MPT_OP_SOFTMAX_XENT) && !mpt_policy_op_fp32_math(MPT_OP_LINEAR));
            ck_assert_int_eq(mpt_policy_param_dtype(&p, MPT_OP_LINEAR), expected_act(mode));
            for (int op = 0; op < MPT_OP_COUNT; op++) /* every rule says why */
                ck_assert_msg(strlen(mpt_policy_op_reason((mpt_op)op)) > 20, "%s: no reason", mpt_op_name((mpt_op)op));
        }
    }
}
END_TEST

START_TEST(test_tf32_switches_separate) {
    for (int mm = 0; mm <= 1; mm++)
        for (int cc = 0; cc <= 1; cc++) {
            mpt_policy p = mpt_policy_make_explicit(MPT_PRECISION_TF32, mm, cc);
            ck_assert_int_eq(p.tf32_override, 0);
            mpt_op_precision lin = mpt_policy_for(&p, MPT_OP_LINEAR, MPT_DTYPE_F32);
            mpt_op_precision conv = mpt_policy_for(&p, MPT_OP_CONV2D, MPT_DTYPE_F32);
            ck_assert_int_eq(lin.math, mm ? MPT_MATH_TF32 : MPT_MATH_FP32);
            ck_assert_int_eq(conv.math, cc ? MPT_MATH_TF32 : MPT_MATH_FP32);
            ck_assert_int_eq(lin.compute_dtype, MPT_DTYPE_F32);
            ck_assert_int_eq(conv.compute_dtype, MPT_DTYPE_F32);
            /* TF32 switches never touch the softmax or pointwise ops */
            ck_assert_int_eq(mpt_policy_for(&p, MPT_OP_SOFTMAX_XENT, MPT_DTYPE_F32).math, MPT_MATH_FP32);
            ck_assert_int_eq(mpt_policy_for(&p, MPT_OP_RELU, MPT_DTYPE_F32).math, MPT_MATH_FP32);
        }
    /* the fp32 mode has FP32 operands too: its switches (off by default, PyTorch's allow_tf32 flags, which act on FP32
     * matmuls and convolutions whatever the mode) choose TF32 per op as in tf32, which differs only in their default */
    for (int mm = 0; mm <= 1; mm++)
        for (int cc = 0; cc <= 1; cc++) {
            mpt_policy p = mpt_policy_make_explicit(MPT_PRECISION_FP32, mm, cc);
            ck_assert_int_eq(mpt_policy_for(&p, MPT_OP_LINEAR, MPT_DTYPE_F32).math, mm ? MPT_MATH_TF32 : MPT_MATH_FP32);
            ck_assert_int_eq(mpt_policy_for(&p, MPT_OP_CONV2D, MPT_DTYPE_F32).math, cc ? MPT_MATH_TF32 : MPT_MATH_FP32);
        }
    /* fp16/bf16 modes use their own Tensor Core format whatever the TF32 switches say */
    mpt_policy h = mpt_policy_make_explicit(MPT_PRECISION_FP16, 1, 1);
    ck_assert_int_eq(mpt_policy_for(&h, MPT_OP_LINEAR, MPT_DTYPE_F16).math, MPT_MATH_F16);
    mpt_policy b = mpt_policy_make_explicit(MPT_PRECISION_BF16, 1, 0);
    ck_assert_int_eq(mpt_policy_for(&b, MPT_OP_CONV2D, MPT_DTYPE_BF16).math, MPT_MATH_BF16);
}
END_TEST

START_TEST(test_tf32_override_env) {
    ck_assert_int_eq(setenv("NVIDIA_TF32_OVERRIDE", "0", 1), 0);
    mpt_policy p = mpt_policy_make(MPT_PRECISION_TF32);
    ck_assert_int_eq(p.tf32_override, 1);
    ck_assert_int_eq(p.tf32_matmul, 0);
    ck_assert_int_eq(p.tf32_conv, 0);
    ck_assert_int_eq(mpt_policy_for(&p, MPT_OP_LINEAR, MPT_DTYPE_F32).math, MPT_MATH_FP32);
    ck_assert_int_eq(mpt_policy_for(&p, MPT_OP_CONV2D, MPT_DTYPE_F32).math, MPT_MATH_FP32);
    /* the explicit constructor ignores the environment */
    mpt_policy e = mpt_policy_make_explicit(MPT_PRECISION_TF32, 1, 1);
    ck_assert_int_eq(e.tf32_override, 0);
    ck_assert_int_eq(mpt_policy_for(&e, MPT_OP_LINEAR, MPT_DTYPE_F32).math, MPT_MATH_TF32);
    /* fp16 is unaffected: no TF32 there to turn off */
    mpt_policy h = mpt_policy_make(MPT_PRECISION_FP16);
    ck_assert_int_eq(mpt_policy_for(&h, MPT_OP_LINEAR, MPT_DTYPE_F16).math, MPT_MATH_F16);

    const char *others[] = {"1", "", "00", "false", "off"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        ck_assert_int_eq(setenv("NVIDIA_TF32_OVERRIDE", others[i], 1), 0);
        mpt_policy q = mpt_policy_make(MPT_PRECISION_TF32);
        ck_assert_msg(q.tf32_override == 0 && q.tf32_matmul == 1 && q.tf32_conv == 1,
                      "NVIDIA_TF32_OVERRIDE='%s' changed the tf32 policy", others[i]);
        mpt_policy f = mpt_policy_make(MPT_PRECISION_FP32);
        ck_assert_int_eq(mpt_policy_for(&f, MPT_OP_LINEAR, MPT_DTYPE_F32).math, MPT_MATH_FP32);
    }
    unsetenv("NVIDIA_TF32_OVERRIDE");
}
END_TEST

START_TEST(test_names_and_loss_scaling) {
    const char *names[] = {"fp32", "tf32", "fp16", "bf16"};
    for (int i = 0; i < 4; i++) {
        mpt_precision m = MPT_PRECISION_COUNT;
        ck_assert_int_eq(mpt_precision_parse(names[i], &m), 0);
        ck_assert_int_eq(m, modes[i]);
        ck_assert_str_eq(mpt_precision_name(modes[i]), names[i]);
        mpt_policy p = mpt_policy_make_explicit(modes[i], 0, 0);
        ck_assert_int_eq(mpt_policy_default_loss_scaling(&p), modes[i] == MPT_PRECISION_FP16);
    }
    mpt_precision m = MPT_PRECISION_BF16;
    const char *fp8_names[] = {"fp8", "fp8-e4m3", "mxfp8"};
    const mpt_precision fp8_modes[] = {MPT_PRECISION_FP8, MPT_PRECISION_FP8_E4M3, MPT_PRECISION_MXFP8};
    for (int i = 0; i < 3; i++) { /* the FP8 modes (issue #23): BF16 storage, no loss scaling by default */
        ck_assert_int_eq(mpt_precision_parse(fp8_names[i], &m), 0);
        ck_assert_int_eq(m, fp8_modes[i]);
        ck_assert_str_eq(mpt_precision_name(m), fp8_names[i]);
        mpt_policy p = mpt_policy_make_explicit(m, 0, 0);
        ck_assert(mpt_policy_is_fp8(&p) && !mpt_policy_default_loss_scaling(&p));
        ck_assert_int_eq(mpt_policy_act_dtype(&p), MPT_DTYPE_BF16);
        ck_assert_int_eq(mpt_policy_for(&p, MPT_OP_CONV2D, MPT_DTYPE_BF16).math, MPT_MATH_BF16);
    }
    /* compare's default --precisions are the modes marked * in --help: fp32, tf32, fp16, bf16 (FP8 only when asked for,
     * tools/opts.c); fp32 alone is the reference the others are measured against */
    for (int i = 0; i < MPT_PRECISION_COUNT; i++) {
        const mpt_mode_desc *d = mpt_mode_info((mpt_precision)i);
        const int classic = i == MPT_PRECISION_FP32 || i == MPT_PRECISION_TF32 || i == MPT_PRECISION_FP16 ||
                            i == MPT_PRECISION_BF16;
        ck_assert_msg(d->compare_default == classic, "%s: compare_default %d", d->name, d->compare_default);
        ck_assert_msg(d->reference == (i == MPT_PRECISION_FP32), "%s: reference %d", d->name, d->reference);
    }
    ck_assert_int_eq(mpt_precision_parse("fp8-e5m2", &m), -1);
    ck_assert_int_eq(mpt_precision_parse("FP16", &m), -1);
    ck_assert_str_eq(mpt_op_name(MPT_OP_LINEAR), "linear");
    ck_assert_str_eq(mpt_op_name(MPT_OP_SOFTMAX_XENT), "softmax_xent");
}
END_TEST

/* Which linear layers run FP8 GEMMs (issue #23): batch, in and out features all multiples of 16, and the operand
 * formats of each mode. */
START_TEST(test_fp8_linear_rule) {
    mpt_math math = MPT_MATH_COUNT;
    mpt_dtype fmt[3];
    mpt_policy p = mpt_policy_make_explicit(MPT_PRECISION_FP8, 0, 0);
    ck_assert(mpt_policy_fp8_linear(&p, 128, 784, 512, &math, fmt) && math == MPT_MATH_FP8);
    ck_assert(fmt[0] == MPT_DTYPE_E4M3 && fmt[1] == MPT_DTYPE_E4M3 && fmt[2] == MPT_DTYPE_E5M2);
    ck_assert(!mpt_policy_fp8_linear(&p, 128, 512, 10, &math, fmt));  /* the 10-way output layer */
    ck_assert(!mpt_policy_fp8_linear(&p, 128, 400, 120, &math, fmt)); /* lenet5 fc1: 120 = 7.5 x 16 */
    ck_assert(!mpt_policy_fp8_linear(&p, 100, 784, 512, &math, fmt)); /* a batch of 100 */
    ck_assert(!mpt_policy_fp8_linear(&p, 128, 100, 512, &math, fmt)); /* 100 input features: K = 6.25 x 16 */
    p = mpt_policy_make_explicit(MPT_PRECISION_FP8_E4M3, 0, 0);
    ck_assert(mpt_policy_fp8_linear(&p, 16, 32, 48, &math, fmt) && math == MPT_MATH_FP8 && fmt[2] == MPT_DTYPE_E4M3);
    p = mpt_policy_make_explicit(MPT_PRECISION_MXFP8, 0, 0);
    ck_assert(mpt_policy_fp8_linear(&p, 16, 32, 48, &math, fmt) && math == MPT_MATH_MXFP8 && fmt[2] == MPT_DTYPE_E4M3);
    p = mpt_policy_make_explicit(MPT_PRECISION_BF16, 0, 0);
    ck_assert(!mpt_policy_fp8_linear(&p, 128, 784, 512, &math, fmt));
    ck_assert(mpt_fp8_gemm_ok(16, 16, 16) && !mpt_fp8_gemm_ok(16, 16, 8) && !mpt_fp8_gemm_ok(0, 16, 16));
}
END_TEST

/* --norm-stats: every row parses back from its name, the list names every row, the names say the row's format and
 * formula (so the flag's text cannot drift from what the kernels are told), and every policy starts at the policy's
 * own FP32 two passes. */
START_TEST(test_norm_stats_rows) {
    const char *list = mpt_norm_stats_names();
    for (int i = 0; i < MPT_NORM_STATS_COUNT; i++) {
        const mpt_norm_stats_desc *d = mpt_norm_stats_info((mpt_norm_stats)i);
        mpt_norm_stats back = MPT_NORM_STATS_COUNT;
        ck_assert_msg(d && mpt_norm_stats_parse(d->name, &back) == 0 && back == (mpt_norm_stats)i, "row %d", i);
        ck_assert_msg(strstr(list, d->name) != NULL, "mpt_norm_stats_names() lacks %s: %s", d->name, list);
        const char *fmt = d->dtype == MPT_DTYPE_F32 ? "fp32" : d->dtype == MPT_DTYPE_BF16 ? "bf16" : "fp16";
        ck_assert_msg(strncmp(d->name, fmt, 4) == 0 && (strstr(d->name, "onepass") != NULL) == d->one_pass,
                      "row %s: dtype %s, one_pass %d", d->name, mpt_dtype_name(d->dtype), d->one_pass);
    }
    mpt_norm_stats x;
    ck_assert_int_eq(mpt_norm_stats_parse("bf16-twopass", &x), -1);
    ck_assert(mpt_norm_stats_info(MPT_NORM_STATS_COUNT) == NULL);
    for (int m = 0; m < MPT_PRECISION_COUNT; m++)
        ck_assert_int_eq(mpt_policy_make((mpt_precision)m).norm_stats, MPT_NORM_STATS_FP32);
    const mpt_norm_stats_desc *p = mpt_norm_stats_info(MPT_NORM_STATS_FP32);
    ck_assert(p->dtype == MPT_DTYPE_F32 && p->one_pass == 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("policy");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_default_table);
    tcase_add_test(tc, test_tf32_switches_separate);
    tcase_add_test(tc, test_tf32_override_env);
    tcase_add_test(tc, test_names_and_loss_scaling);
    tcase_add_test(tc, test_fp8_linear_rule);
    tcase_add_test(tc, test_norm_stats_rows);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
