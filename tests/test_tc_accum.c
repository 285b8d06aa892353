/*
 * tests/test_tc_accum.c - the Tensor Core summation models (kernels/cpu/tc_accum.h).
 *
 *  - the descriptor table: every row is found by its key, names and parsers agree, the accumulator widths follow
 *    the rule the header states, and operand mixes without a row are refused;
 *  - vectors constructed by hand, each expected value derived below from the model's documented rules (the
 *    header's steps 1-5; the parameters of Khattak & Mikaitis's MATLAB models, arXiv 2512.07004), never from this
 *    code's output: truncation at alignment, the extra alignment bits and the block size of each GPU, un-normalised
 *    product exponents, c dominating, cancellation, subnormal operands and results, ties under round-to-nearest, the
 *    alignment floor, overflow, NaN and inf. The published GPU measurements themselves are checked by
 *    bench/tc_validate on a checkout of the authors' repository (not part of mptrain: docs/numerics.md);
 *  - properties on random inputs: the ieee model is the plain FP32 recursive sum; every model is exact when all
 *    terms sit on its grid and every partial sum is representable; with terms of one sign, a truncating model
 *    never exceeds the exact sum and loses at most its grid per term per block; the GEMM equals the dot product
 *    on every element, in every layout and on two threads.
 *
 * Hex-float literals are exact; an expected value written as a sum of powers of two is exact in double, and the
 * derivation shows it is a float of the output format.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "harness.h"
#include "kernels/cpu/tc_accum.h"
#include "engine/numerics.h"

#define EXPECT(cond, ...)                                                                                          \
    do {                                                                                                           \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                                    \
    } while (0)

static mpt_tc_op op_of(mpt_tc_model m, mpt_tc_format fa, mpt_tc_format fb, mpt_tc_out o) {
    mpt_tc_op op;
    ck_assert_msg(mpt_tc_op_init(&op, m, fa, fb, o) == 0, "no row for %s %s x %s -> %s", mpt_tc_model_name(m),
                  mpt_tc_format_info_of(fa)->name, mpt_tc_format_info_of(fb)->name, mpt_tc_out_info_of(o)->name);
    return op;
}

/* Same bits (two NaNs count as equal). */
static int same(float x, float y) { return mpt_f32_bits(x) == mpt_f32_bits(y) || (x != x && y != y); }

/* d of model m over the n products a[i] b[i] (one dot product, blocks in order) from c. */
static float dot_of(mpt_tc_model m, mpt_tc_format fa, mpt_tc_format fb, mpt_tc_out o, float c, const float *a,
                    const float *b, int n) {
    mpt_tc_op op = op_of(m, fa, fb, o);
    return mpt_tc_dot(&op, c, a, 1, b, 1, n);
}

static void expect_dot(const char *what, mpt_tc_model m, mpt_tc_format f, mpt_tc_out o, float c, const float *a,
                       const float *b, int n, float want) {
    const float got = dot_of(m, f, f, o, c, a, b, n);
    EXPECT(same(got, want), "%s, %s %s -> %s: d = %a (%08x), expected %a (%08x)", what, mpt_tc_model_name(m),
           mpt_tc_format_info_of(f)->name, mpt_tc_out_info_of(o)->name, (double)got, (unsigned)mpt_f32_bits(got),
           (double)want, (unsigned)mpt_f32_bits(want));
}

/* ---- the table ---------------------------------------------------------------------------------------------- */

START_TEST(test_table_rows) {
    int n;
    const mpt_tc_params *rows = mpt_tc_rows(&n);
    ck_assert_int_eq(n, 24);
    for (int i = 0; i < n; i++) {
        const mpt_tc_params *p = &rows[i];
        EXPECT(mpt_tc_find(p->model, p->family, p->out) == p, "row %s is not the one its key finds", p->name);
        char want[64];
        snprintf(want, sizeof want, "%s %s -> %s", mpt_tc_model_name(p->model),
                 p->family == MPT_TC_FAMILY_FP8 ? "fp8" : mpt_tc_format_info_of((mpt_tc_format)p->family)->name,
                 mpt_tc_out_info_of(p->out)->name);
        EXPECT(strcmp(p->name, want) == 0, "row named '%s', its key says '%s'", p->name, want);
        EXPECT(p->gpus && p->gpus[0], "row %s names no GPU", p->name);
        if (p->sum == MPT_TC_SUM_IEEE) {
            EXPECT(p->model == MPT_TC_MODEL_IEEE && p->out == MPT_TC_OUT_FP32, "row %s", p->name);
            continue;
        }
        EXPECT(p->block >= 1 && p->block <= MPT_TC_MAX_BLOCK, "row %s: block %d", p->name, p->block);
        /* GEMM.m: the sum keeps the output's fraction bits, or 23 + neab when neab < 0 (the FP8 rows) */
        const int want_man = p->neab < 0 ? 23 + p->neab : mpt_tc_out_info_of(p->out)->man_bits;
        EXPECT(p->acc_man == want_man, "row %s: acc_man %d, expected %d", p->name, p->acc_man, want_man);
        /* FP16 outputs round to nearest, FP32 outputs truncate, on every NVIDIA row the repository has */
        EXPECT(p->round == (p->out == MPT_TC_OUT_FP16 ? MPT_TC_ROUND_RNE : MPT_TC_ROUND_RZ), "row %s: rounding",
               p->name);
    }
    /* the family indices double as the 16-bit formats' (the name check above relies on it) */
    ck_assert_int_eq(MPT_TC_FAMILY_FP16, MPT_TC_FORMAT_FP16);
    ck_assert_int_eq(MPT_TC_FAMILY_BF16, MPT_TC_FORMAT_BF16);
    ck_assert_int_eq(MPT_TC_FAMILY_TF32, MPT_TC_FORMAT_TF32);
    for (int m = 0; m < MPT_TC_MODEL_COUNT; m++) ck_assert_int_eq(mpt_tc_model_parse(mpt_tc_model_name(m)), m);
    for (int f = 0; f < MPT_TC_FORMAT_COUNT; f++)
        ck_assert_int_eq(mpt_tc_format_parse(mpt_tc_format_info_of(f)->name), f);
    ck_assert_int_eq(mpt_tc_model_parse("H100"), MPT_TC_MODEL_H100);
    ck_assert_int_eq(mpt_tc_model_parse("h200"), -1);
    ck_assert_int_eq(mpt_tc_format_parse("fp32"), -1);
    ck_assert_ptr_null(mpt_tc_model_name(MPT_TC_MODEL_COUNT));
    /* refused: mixed families, formats a model lacks, FP8 to FP16 */
    mpt_tc_op op = {0};
    ck_assert_int_eq(mpt_tc_op_init(&op, MPT_TC_MODEL_H100, MPT_TC_FORMAT_FP16, MPT_TC_FORMAT_BF16, MPT_TC_OUT_FP32), -1);
    ck_assert_int_eq(mpt_tc_op_init(&op, MPT_TC_MODEL_V100, MPT_TC_FORMAT_BF16, MPT_TC_FORMAT_BF16, MPT_TC_OUT_FP32), -1);
    ck_assert_int_eq(mpt_tc_op_init(&op, MPT_TC_MODEL_B200, MPT_TC_FORMAT_E4M3, MPT_TC_FORMAT_E4M3, MPT_TC_OUT_FP32), -1);
    ck_assert_int_eq(mpt_tc_op_init(&op, MPT_TC_MODEL_H100, MPT_TC_FORMAT_E4M3, MPT_TC_FORMAT_E4M3, MPT_TC_OUT_FP16), -1);
    ck_assert_int_eq(mpt_tc_op_init(&op, MPT_TC_MODEL_A100, MPT_TC_FORMAT_BF16, MPT_TC_FORMAT_BF16, MPT_TC_OUT_FP16), -1);
    ck_assert_ptr_null(op.p);
    /* accepted: E4M3 x E5M2, each operand with its own emin */
    ck_assert_int_eq(mpt_tc_op_init(&op, MPT_TC_MODEL_H100, MPT_TC_FORMAT_E4M3, MPT_TC_FORMAT_E5M2, MPT_TC_OUT_FP32), 0);
    ck_assert_int_eq(op.emin_a, -6);
    ck_assert_int_eq(op.emin_b, -14);
    ck_assert_int_eq(op.p->block, 32);
}
END_TEST

/* ---- vectors by hand ----------------------------------------------------------------------------------------- */

#define FP16 MPT_TC_FORMAT_FP16
#define BF16 MPT_TC_FORMAT_BF16
#define TF32 MPT_TC_FORMAT_TF32
#define E4M3 MPT_TC_FORMAT_E4M3
#define E5M2 MPT_TC_FORMAT_E5M2
#define OUT32 MPT_TC_OUT_FP32
#define OUT16 MPT_TC_OUT_FP16
#define IEEE MPT_TC_MODEL_IEEE
#define V100 MPT_TC_MODEL_V100
#define A100 MPT_TC_MODEL_A100
#define ADA MPT_TC_MODEL_ADA
#define H100 MPT_TC_MODEL_H100
#define B200 MPT_TC_MODEL_B200

/* Notation: H100 and B200 (FP16/BF16/TF32) align on 2^(E - 25) (neab 2), A100 and Ada on 2^(E - 24) (neab 1), V100 on
 * 2^(E - 23) (neab 0), E the block's largest exponent; FP32 results keep 23 fraction bits, toward zero. */
START_TEST(test_alignment_truncation) {
    /* c = 1, three products (1.5 x 2^-12)(2^-13) = 1.5 x 2^-25 (FP16 values; exponents -12 + -13 = -25).
     * H100: E = 0 (c), grid 2^-25: each product is 1.5 units, truncated to 1. Sum 1 + 3 x 2^-25 = 1 + 0.75 x 2^-23,
     * truncated to 23 fraction bits: 1. Rounding each term to nearest instead (2 units) would give 1 + 6 x 2^-25 ->
     * 1 + 2^-23; the exact sum 1 + 4.5 x 2^-25 = 1 + 1.125 x 2^-23 truncates to 1 + 2^-23 as well. */
    const float a1[3] = {0x1.8p-12f, 0x1.8p-12f, 0x1.8p-12f}, b1[3] = {0x1p-13f, 0x1p-13f, 0x1p-13f};
    expect_dot("truncation at alignment", H100, FP16, OUT32, 1.0f, a1, b1, 3, 1.0f);
    expect_dot("truncation at alignment", B200, FP16, OUT32, 1.0f, a1, b1, 3, 1.0f);

    /* c = 1, four products 2^-12 x 2^-12 = 2^-24. A100: grid 2^-24, one unit each: 1 + 4 x 2^-24 = 1 + 2^-22, exact.
     * V100: grid 2^-23, half a unit each, truncated to 0: 1. H100: grid 2^-25: 1 + 2^-22. IEEE: 1 + 2^-24 is half an
     * ulp of 1, a tie, to even: 1, four times: 1. */
    const float a2[4] = {0x1p-12f, 0x1p-12f, 0x1p-12f, 0x1p-12f};
    expect_dot("extra alignment bits", A100, FP16, OUT32, 1.0f, a2, a2, 4, 1.0f + 0x1p-22f);
    expect_dot("extra alignment bits", ADA, FP16, OUT32, 1.0f, a2, a2, 4, 1.0f + 0x1p-22f);
    expect_dot("extra alignment bits", H100, FP16, OUT32, 1.0f, a2, a2, 4, 1.0f + 0x1p-22f);
    expect_dot("extra alignment bits", V100, FP16, OUT32, 1.0f, a2, a2, 4, 1.0f);
    expect_dot("extra alignment bits", IEEE, FP16, OUT32, 1.0f, a2, a2, 4, 1.0f);
}
END_TEST

START_TEST(test_block_size) {
    /* c = 0, products 1 x 1 and fifteen 2^-12 x 2^-13 = 2^-25 (FP16 and BF16 values alike).
     * H100/B200 (blocks of 16): one block, E = 0, grid 2^-25: each small product one unit. 1 + 15 x 2^-25 =
     * 1 + 3.75 x 2^-23, truncated: 1 + 3 x 2^-23.
     * A100/Ada (blocks of 8): block 1 = 1 and seven 2^-25 on the grid 2^-24: half a unit each, dropped: 1; block 2,
     * c = 1 and eight 2^-25: dropped again: 1. V100 (blocks of 4, grid 2^-23): 1. IEEE: 1 + 2^-25 rounds to 1. */
    float a[16], b[16];
    a[0] = b[0] = 1.0f;
    for (int i = 1; i < 16; i++) a[i] = 0x1p-12f, b[i] = 0x1p-13f;
    for (mpt_tc_format f = FP16; f <= BF16; f++) {
        expect_dot("block size", H100, f, OUT32, 0.0f, a, b, 16, 1.0f + 0x3p-23f);
        expect_dot("block size", B200, f, OUT32, 0.0f, a, b, 16, 1.0f + 0x3p-23f);
        expect_dot("block size", A100, f, OUT32, 0.0f, a, b, 16, 1.0f);
        expect_dot("block size", ADA, f, OUT32, 0.0f, a, b, 16, 1.0f);
        expect_dot("block size", IEEE, f, OUT32, 0.0f, a, b, 16, 1.0f);
    }
    expect_dot("block size", V100, FP16, OUT32, 0.0f, a, b, 16, 1.0f);
    /* The largest term late: c = 0, k = 0..7: (1.5 x 2^-12)(2^-13) = 1.5 x 2^-25, k = 8: 1 x 1, k = 9..15: zeros.
     * H100 (one block of 16): E = 0, grid 2^-25: each small product truncated to one unit: 1 + 8 x 2^-25 = 1 + 2^-22.
     * A100 (blocks of 8): block 1 holds only the small products, E = -25: exact, c = 12 x 2^-25 = 1.5 x 2^-22;
     * block 2: E = 0, grid 2^-24: c is 6 units, kept: 1 + 1.5 x 2^-22 = 1 + 3 x 2^-23, as IEEE (the small products
     * sum exactly before the 1 comes). */
    float la[16] = {0}, lb[16] = {0};
    for (int i = 0; i < 8; i++) la[i] = 0x1.8p-12f, lb[i] = 0x1p-13f;
    la[8] = lb[8] = 1.0f;
    expect_dot("largest term late", H100, FP16, OUT32, 0.0f, la, lb, 16, 1.0f + 0x1p-22f);
    expect_dot("largest term late", B200, FP16, OUT32, 0.0f, la, lb, 16, 1.0f + 0x1p-22f);
    expect_dot("largest term late", A100, FP16, OUT32, 0.0f, la, lb, 16, 1.0f + 0x3p-23f);
    expect_dot("largest term late", IEEE, FP16, OUT32, 0.0f, la, lb, 16, 1.0f + 0x3p-23f);
    /* TF32: 1 and seven 2^-25. H100/B200 (blocks of 8, grid 2^-25): 1 + 7 x 2^-25 = 1 + 1.75 x 2^-23 -> 1 + 2^-23.
     * A100/Ada (blocks of 4, grid 2^-24): 1 + three halves of a unit -> 1, then 1 + four halves -> 1. */
    expect_dot("tf32 block size", H100, TF32, OUT32, 0.0f, a, b, 8, 1.0f + 0x1p-23f);
    expect_dot("tf32 block size", B200, TF32, OUT32, 0.0f, a, b, 8, 1.0f + 0x1p-23f);
    expect_dot("tf32 block size", A100, TF32, OUT32, 0.0f, a, b, 8, 1.0f);
    expect_dot("tf32 block size", ADA, TF32, OUT32, 0.0f, a, b, 8, 1.0f);
}
END_TEST

START_TEST(test_unnormalised_products_and_c) {
    /* Products keep the exponent e(a) + e(b) with a significand in [1, 4). c = 0, products 1.5 x 1.5 = 2.25
     * (exponent 0, not 1) and eight (1.5 x 2^-12)(2^-13) = 1.5 x 2^-25. H100: E = 0, grid 2^-25: each small product
     * truncated to one unit; 2.25 + 8 x 2^-25 = 2.25 + 2^-22, a float (exponent 1, quantum 2^-22). Normalising the
     * products first (E = 1, grid 2^-24) would drop them: 2.25. */
    float a[9] = {1.5f}, b[9] = {1.5f};
    for (int i = 1; i < 9; i++) a[i] = 0x1.8p-12f, b[i] = 0x1p-13f;
    expect_dot("un-normalised product exponent", H100, FP16, OUT32, 0.0f, a, b, 9, 2.25f + 0x1p-22f);

    /* c dominates: c = 1024, sixteen (1.5 x 2^-7)(2^-8) = 1.5 x 2^-15. H100: E = 10 (c), grid 2^-15: each product
     * truncated to 2^-15; 1024 + 16 x 2^-15 = 1024 + 2^-11 (quantum at 1024: 2^-13). The exact sum is 1024 +
     * 1.5 x 2^-11; IEEE adds 0.375 of an ulp each time and stays at 1024; A100 (grid 2^-14) drops them: 1024. */
    float c16a[16], c16b[16];
    for (int i = 0; i < 16; i++) c16a[i] = 0x1.8p-7f, c16b[i] = 0x1p-8f;
    expect_dot("c dominates", H100, FP16, OUT32, 1024.0f, c16a, c16b, 16, 1024.0f + 0x1p-11f);
    expect_dot("c dominates", A100, FP16, OUT32, 1024.0f, c16a, c16b, 16, 1024.0f);
    expect_dot("c dominates", IEEE, FP16, OUT32, 1024.0f, c16a, c16b, 16, 1024.0f);

    /* Cancellation: c = 1, products (-1)(1 - 2^-11) and 2^-14 x 2^-14 = 2^-28. H100: E = 0, grid 2^-25: c = 2^25
     * units, the first product -(2^25 - 2^14) units, the second an eighth of a unit, dropped. Sum 2^14 units = 2^-11.
     * IEEE: 1 - (1 - 2^-11) = 2^-11 exactly, then 2^-11 + 2^-28 exactly (quantum at 2^-11: 2^-34). */
    const float ca[2] = {-1.0f, 0x1p-14f}, cb[2] = {1.0f - 0x1p-11f, 0x1p-14f};
    expect_dot("cancellation", H100, FP16, OUT32, 1.0f, ca, cb, 2, 0x1p-11f);
    expect_dot("cancellation", IEEE, FP16, OUT32, 1.0f, ca, cb, 2, 0x1p-11f + 0x1p-28f);

    /* Truncating each magnitude is no truncation of the sum: c = 1, product (-2^-14)(2^-14) = -2^-28, an eighth of
     * H100's grid unit, dropped: d = 1, above the exact 1 - 2^-28 (whose truncation to a float is 1 - 2^-24). */
    const float na[1] = {-0x1p-14f}, nb[1] = {0x1p-14f};
    expect_dot("negative term dropped", H100, FP16, OUT32, 1.0f, na, nb, 1, 1.0f);
}
END_TEST

START_TEST(test_subnormals) {
    /* An FP16 subnormal operand counts with exponent -14: 3 x 2^-24 = (3 x 2^-10) x 2^-14. Products (3 x 2^-24)(2^15)
     * = 3 x 2^-9 with exponent -14 + 15 = 1 (its true exponent is -8), and (1.5 x 2^-12)(2^-12) = 1.5 x 2^-24. H100:
     * E = 1, grid 2^-24: the second product truncated to 2^-24. d = 3 x 2^-9 + 2^-24 (a float: quantum at 2^-8 is
     * 2^-31). With the true exponent (E = -8) it would be kept whole: 3 x 2^-9 + 1.5 x 2^-24, IEEE's result. */
    const float sa[2] = {0x3p-24f, 0x1.8p-12f}, sb[2] = {0x1p15f, 0x1p-12f};
    expect_dot("fp16 subnormal operand", H100, FP16, OUT32, 0.0f, sa, sb, 2, 0x3p-9f + 0x1p-24f);
    expect_dot("fp16 subnormal operand", IEEE, FP16, OUT32, 0.0f, sa, sb, 2, 0x3p-9f + 0x1.8p-24f);

    /* A BF16 subnormal (an FP32 subnormal) counts with exponent -126: 2^-130 = 2^-4 x 2^-126. Products 2^-130 x
     * 2^100 = 2^-30 with exponent -26, and (1.5 x 2^-26)(2^-25) = 1.5 x 2^-51. H100: E = -26, grid 2^-51: the second
     * truncated to 2^-51; d = 2^-30 + 2^-51 (quantum at 2^-30: 2^-53). A100 (grid 2^-50): dropped, d = 2^-30. */
    const float ba[2] = {0x1p-130f, 0x1.8p-26f}, bb[2] = {0x1p100f, 0x1p-25f};
    expect_dot("bf16 subnormal operand", H100, BF16, OUT32, 0.0f, ba, bb, 2, 0x1p-30f + 0x1p-51f);
    expect_dot("bf16 subnormal operand", A100, BF16, OUT32, 0.0f, ba, bb, 2, 0x1p-30f);

    /* A subnormal FP32 result, toward zero: products 2^-70 x 1.5 x 2^-70 = 1.5 x 2^-140 = 768 x 2^-149, 2^-75 x 2^-75
     * = 2^-150 and 2^-75 x 2^-76 = 2^-151 (BF16). H100: E = max(-140, min_exp -133) = -133, grid 2^-158: all exact;
     * the sum is 768.75 x 2^-149, truncated to the subnormal quantum 2^-149: 768 x 2^-149 = 1.5 x 2^-140 (rounding to
     * nearest would give 769 x 2^-149). */
    const float ua[3] = {0x1p-70f, 0x1p-75f, 0x1p-75f}, ub[3] = {0x1.8p-70f, 0x1p-75f, 0x1p-76f};
    expect_dot("subnormal result", H100, BF16, OUT32, 0.0f, ua, ub, 3, 0x1.8p-140f);
    expect_dot("subnormal result", B200, BF16, OUT32, 0.0f, ua, ub, 3, 0x1.8p-140f);
}
END_TEST

START_TEST(test_fp16_output) {
    /* FP16 outputs round to nearest, ties to even, on 10 fraction bits (ulp of 1: 2^-10).
     * c = 1 + 2^-11 (2^-5 x 2^-6): half an ulp, a tie: to the even 1. c = 1 + 3 x 2^-11 (3 x 2^-6 x 2^-5): 1.5 ulps,
     * a tie between 1 + 2^-10 (odd) and 1 + 2^-9 (even): 1 + 2^-9. c = 1 + 3 x 2^-12: 0.75 of an ulp: up, 1 + 2^-10
     * (truncation would give 1). All products sit on every model's grid (2^-23 or finer at E = 0). */
    const float t1a[1] = {0x1p-5f}, t1b[1] = {0x1p-6f};
    const float t2a[1] = {0x3p-6f}, t2b[1] = {0x1p-5f};
    const float t3a[1] = {0x3p-7f}, t3b[1] = {0x1p-5f};
    const mpt_tc_model models[] = {V100, A100, ADA, H100, B200};
    for (int i = 0; i < 5; i++) {
        expect_dot("fp16 tie to even, down", models[i], FP16, OUT16, 1.0f, t1a, t1b, 1, 1.0f);
        expect_dot("fp16 tie to even, up", models[i], FP16, OUT16, 1.0f, t2a, t2b, 1, 1.0f + 0x1p-9f);
        expect_dot("fp16 above half", models[i], FP16, OUT16, 1.0f, t3a, t3b, 1, 1.0f + 0x1p-10f);
    }
    /* c is rounded to FP16 first: c = 1 + 2^-11 + 2^-23 (an FP32 value) becomes 1 + 2^-10 (above the tie); the
     * product (-2^-12)(2^-11) = -2^-23 then leaves 1 + 2^-10 - 2^-23, which rounds back to 1 + 2^-10. Taking c as it
     * is, 1 + 2^-11 would remain: a tie, to the even 1. */
    const float ra[1] = {-0x1p-12f}, rb[1] = {0x1p-11f};
    expect_dot("c rounded to fp16 first", H100, FP16, OUT16, 1.0f + 0x1p-11f + 0x1p-23f, ra, rb, 1, 1.0f + 0x1p-10f);

    /* The alignment floor min_exp: products 2^-12 x 2^-13 = 2^-25 and 2^-24 x 2^-24 = 2^-48 (FP16 subnormals:
     * exponent -14 + -14 = -28, significand 2^-20). H100 with an FP16 output: E = max(-25, -28, -21) = -21, grid 2^-46:
     * 2^-48 is a quarter of a unit, dropped; 2^-25 is exactly half of FP16's smallest subnormal 2^-24: a tie, to the
     * even 0. Without the floor (E = -25, grid 2^-50) 2^-48 would stay, the sum pass the tie and round up to 2^-24.
     * A100 (floor -20, grid 2^-44) and V100 (floor -19, grid 2^-42) drop it too. With an FP32 output H100's floor is
     * -133: E = -25, both kept, d = 2^-25 + 2^-48 (quantum at 2^-25: 2^-48). */
    const float fa[2] = {0x1p-12f, 0x1p-24f}, fb[2] = {0x1p-13f, 0x1p-24f};
    expect_dot("alignment floor", H100, FP16, OUT16, 0.0f, fa, fb, 2, 0.0f);
    expect_dot("alignment floor", A100, FP16, OUT16, 0.0f, fa, fb, 2, 0.0f);
    expect_dot("alignment floor", V100, FP16, OUT16, 0.0f, fa, fb, 2, 0.0f);
    expect_dot("alignment floor", H100, FP16, OUT32, 0.0f, fa, fb, 2, 0x1p-25f + 0x1p-48f);
}
END_TEST

START_TEST(test_fp8_rows) {
    /* H100 (one block of 32, neab -10: grid 2^(E - 13), sums truncated to 13 fraction bits) against Ada (blocks of
     * 16, the same grid). k = 0..15: 2^-6 x 2^-8 = 2^-14 (2^-8 is an E4M3 subnormal: exponent -6, significand 2^-2;
     * the product's exponent -12); k = 16: 1 x 1; k = 17..31: zeros.
     * H100: E = 0, grid 2^-13: each 2^-14 is half a unit, dropped: d = 1.
     * Ada: block 1, E = -12, grid 2^-25: the sixteen products are exact, c = 16 x 2^-14 = 2^-10; block 2, E = 0,
     * grid 2^-13: c = 2^-10 is 8 units, kept: d = 1 + 2^-10. IEEE: 2^-10 exactly, then 1 + 2^-10. */
    float a[32] = {0}, b[32] = {0};
    for (int i = 0; i < 16; i++) a[i] = 0x1p-6f, b[i] = 0x1p-8f;
    a[16] = b[16] = 1.0f;
    expect_dot("fp8 block of 32", H100, E4M3, OUT32, 0.0f, a, b, 32, 1.0f);
    expect_dot("fp8 blocks of 16", ADA, E4M3, OUT32, 0.0f, a, b, 32, 1.0f + 0x1p-10f);
    expect_dot("fp8", IEEE, E4M3, OUT32, 0.0f, a, b, 32, 1.0f + 0x1p-10f);

    /* The narrow accumulator: products 1.875 x 1.875 = 3.515625 (exponent 0), 2^-6 x 2^-6 = 2^-12 and 2^-6 x 2^-7 =
     * 2^-13 (2^-7: exponent -6, significand 0.5). H100: E = 0, grid 2^-13: 28800 + 2 + 1 units = 3.515625 + 3 x 2^-13,
     * exponent 1: truncated to 13 fraction bits (quantum 2^-12): 3.515625 + 2^-12. */
    const float na[3] = {1.875f, 0x1p-6f, 0x1p-6f}, nb[3] = {1.875f, 0x1p-6f, 0x1p-7f};
    expect_dot("fp8 13-bit accumulator", H100, E4M3, OUT32, 0.0f, na, nb, 3, 3.515625f + 0x1p-12f);
    expect_dot("fp8 13-bit accumulator", IEEE, E4M3, OUT32, 0.0f, na, nb, 3, 3.515625f + 0x3p-13f);

    /* E4M3 x E5M2, each operand with its own smallest normal exponent: 256 x 2^-16 (an E5M2 subnormal: exponent -14,
     * significand 2^-2) = 2^-8 with exponent 8 - 14 = -6, and (1.5 x 2^-6)(2^-14) = 1.5 x 2^-20. H100: E = -6, grid
     * 2^-19: the second is 0.75 of a unit, dropped: d = 2^-8. (With the true exponent -8, grid 2^-21, it would stay.) */
    mpt_tc_op op = op_of(H100, E4M3, E5M2, OUT32);
    const float ma[2] = {256.0f, 0x1.8p-6f}, mb[2] = {0x1p-16f, 0x1p-14f};
    const float got = mpt_tc_dot(&op, 0.0f, ma, 1, mb, 1, 2);
    EXPECT(same(got, 0x1p-8f), "e4m3 x e5m2: d = %a, expected 2^-8", (double)got);
}
END_TEST

START_TEST(test_overflow_and_specials) {
    /* c = FP32 max (2^24 - 1) x 2^104, product 2^52 x 2^52 = 2^104 (BF16). H100: E = 127, grid 2^102: c is
     * (2^24 - 1) x 4 units, the product 4: the sum 2^26 units = 2^128, past FP32's range: +inf, though the rounding is
     * toward zero (the model's rule; IEEE's round-toward-zero would give FP32 max). */
    const float oa[1] = {0x1p52f}, ob[1] = {0x1p52f};
    expect_dot("overflow", H100, BF16, OUT32, FLT_MAX, oa, ob, 1, INFINITY);
    expect_dot("overflow", A100, BF16, OUT32, FLT_MAX, oa, ob, 1, INFINITY);
    /* ... and it stays +inf through a later block of finite products (K = 32: two H100 blocks) */
    float la[32] = {0x1p52f}, lb[32] = {0x1p52f};
    for (int i = 16; i < 32; i++) la[i] = -0x1p126f, lb[i] = 1.0f;
    expect_dot("inf stays", H100, BF16, OUT32, FLT_MAX, la, lb, 32, INFINITY);

    /* Products beyond FP32's range are exact inside a block: 2^100 x 2^100 - 2^100 x 2^100 + 1 x 1. H100: E = 200,
     * grid 2^175: the 1 is dropped, the others cancel: S = 0, d = +0. IEEE: fma(2^100, 2^100, 0) rounds 2^200 to
     * +inf, then fma(-2^100, 2^100, +inf) adds the exact -2^200 (no product is rounded in an FMA) to +inf: +inf, and
     * so does fma(1, 1, +inf). (A sum of rounded products, d + a * b, would meet -inf and give NaN.) */
    const float pa[3] = {0x1p100f, -0x1p100f, 1.0f}, pb[3] = {0x1p100f, 0x1p100f, 1.0f};
    expect_dot("wide products", H100, BF16, OUT32, 0.0f, pa, pb, 3, 0.0f);
    expect_dot("wide products", IEEE, BF16, OUT32, 0.0f, pa, pb, 3, INFINITY);

    /* NaN and inf follow IEEE's rules over c and the products, whatever the block */
    const float one[2] = {1.0f, 1.0f};
    const float ia[2] = {INFINITY, 1.0f}, ib[2] = {2.0f, 1.0f};
    const float za[2] = {INFINITY, 1.0f}, zb[2] = {0.0f, 1.0f};
    const float pm[2] = {INFINITY, -INFINITY};
    const float qa[2] = {NAN, 1.0f};
    for (mpt_tc_model m = IEEE; m <= B200; m++) {
        expect_dot("inf x 2", m, FP16, OUT32, 1.0f, ia, ib, 2, INFINITY);
        expect_dot("inf x 0", m, FP16, OUT32, 1.0f, za, zb, 2, NAN);
        expect_dot("+inf and -inf", m, FP16, OUT32, 1.0f, pm, one, 2, NAN);
        expect_dot("c = -inf", m, FP16, OUT32, -INFINITY, one, one, 2, -INFINITY);
        expect_dot("NaN operand", m, FP16, OUT32, 1.0f, qa, one, 2, NAN);
        expect_dot("NaN c", m, FP16, OUT32, NAN, one, one, 2, NAN);
    }
    /* a NaN in the first block of a dot product over two blocks: NaN, not a number made of its bits */
    float ka[32], kb[32];
    for (int i = 0; i < 32; i++) ka[i] = kb[i] = 1.0f;
    ka[0] = NAN;
    expect_dot("NaN in block 1 of 2", H100, FP16, OUT32, 0.0f, ka, kb, 32, NAN);
    /* the block function alone: the same rules */
    mpt_tc_op op = op_of(H100, FP16, FP16, OUT32);
    EXPECT(isnan(mpt_tc_block(&op, NAN, one, one, 2)), "block with NaN c");
    EXPECT(mpt_tc_block(&op, 1.0f, ia, ib, 2) == INFINITY, "block with inf operand");
    /* zeros: no term gives +0, even from c = -0; K = 0 gives c */
    const float z[2] = {0.0f, -0.0f};
    expect_dot("no term", H100, FP16, OUT32, -0.0f, z, one, 2, 0.0f);
    EXPECT(same(mpt_tc_dot(&op, 0.5f, NULL, 1, NULL, 1, 0), 0.5f), "K = 0");
}
END_TEST

/* ---- properties --------------------------------------------------------------------------------------------- */

/* A random value of format f: sign, exponent in [elo, ehi] (at least the format's emin) and random fraction bits. */
static float rand_value(tests_rng *r, mpt_tc_format f, int elo, int ehi) {
    const mpt_tc_format_info *fi = mpt_tc_format_info_of(f);
    const int e = tests_int(r, elo, ehi);
    const uint32_t frac = (uint32_t)(tests_next(r) >> 40) & ((1u << fi->man_bits) - 1u);
    float v = ldexpf(1.0f + ldexpf((float)frac, -fi->man_bits), e);
    return tests_next(r) & 1 ? -v : v;
}

/* The ieee model is the plain FP32 recursive sum d = d + a_k b_k: the products of these formats are exact in FP32
 * (at most 2 x 11 significant bits, exponents kept in range), so the FMA's single rounding is the addition's. */
START_TEST(test_ieee_is_recursive_fp32_sum) {
    tests_rng r = {0x1eee};
    for (int t = 0; t < 3000; t++) {
        const mpt_tc_format f = (mpt_tc_format)(t % MPT_TC_FORMAT_COUNT);
        const int K = tests_int(&r, 0, 70);
        float a[70], b[70];
        for (int k = 0; k < K; k++) a[k] = rand_value(&r, f, -6, 6), b[k] = rand_value(&r, f, -6, 6);
        const float c = (float)tests_uniform(&r, -4.0, 4.0);
        volatile float d = c;
        for (int k = 0; k < K; k++) {
            volatile float p = a[k] * b[k];
            d = d + p;
        }
        const float got = dot_of(IEEE, f, f, OUT32, c, a, b, K);
        EXPECT(same(got, d), "trial %d (%s, K %d): ieee %a, recursive FP32 sum %a", t, mpt_tc_format_info_of(f)->name,
               K, (double)got, (double)d);
    }
}
END_TEST

/* Exact when nothing is lost: operands i x 2^-3 (|i| <= 7: three significant bits, in every format), c = j x 2^-6
 * (|j| <= 63; an FP16 value), K <= 32. Every product and c is a multiple of 2^-6, every partial sum below 2^5 in
 * magnitude, so each term sits on every model's grid (at most 2^(4 - 13) = 2^-9 for the FP8 rows, finer for the
 * others) and each partial sum is a value of the output (quantum at most 2^-6 for FP16 below 32, 2^-9 for the FP8
 * accumulator, 2^-19 for FP32): every model returns the exact sum. */
START_TEST(test_exact_when_representable) {
    tests_rng r = {0xe7ac7};
    int n;
    const mpt_tc_params *rows = mpt_tc_rows(&n);
    for (int ri = 0; ri < n; ri++) {
        const mpt_tc_params *p = &rows[ri];
        const mpt_tc_format f = p->family == MPT_TC_FAMILY_FP8 ? MPT_TC_FORMAT_E5M2 : (mpt_tc_format)p->family;
        mpt_tc_op op = op_of(p->model, f, f, p->out);
        for (int t = 0; t < 400; t++) {
            const int K = tests_int(&r, 0, 32);
            float a[32], b[32];
            double exact = 0;
            for (int k = 0; k < K; k++) {
                a[k] = ldexpf((float)tests_int(&r, -7, 7), -3);
                b[k] = ldexpf((float)tests_int(&r, -7, 7), -3);
                exact += (double)a[k] * b[k];
            }
            const float c = ldexpf((float)tests_int(&r, -63, 63), -6);
            exact += c;
            const float got = mpt_tc_dot(&op, c, a, 1, b, 1, K);
            EXPECT((double)got == exact, "%s, trial %d (K %d): d = %a, exact %a", p->name, t, K, (double)got, exact);
        }
    }
}
END_TEST

/* With every term of one sign a truncating model never exceeds the exact sum in magnitude, and each block loses
 * less than one grid unit per term (n products and c) plus one quantum of its result:
 *     0 <= (c_b + sum of block b's products) - d_b < (n + 1) 2^(E_b - 23 - neab) + 2^(e(d_b) - acc_man),
 * E_b at most the exponent of the block's largest term (normal operands: a product's exponent e(a) + e(b) is at
 * most its true one). c_b is the model's own previous result (a dot product over the first blocks), and the exact
 * block sum is exact in double (terms within 2^-13 .. 2^8 with at most 22 significant bits). */
START_TEST(test_truncation_bias_one_sign) {
    tests_rng r = {0xb1a5};
    int n;
    const mpt_tc_params *rows = mpt_tc_rows(&n);
    for (int ri = 0; ri < n; ri++) {
        const mpt_tc_params *p = &rows[ri];
        if (p->sum != MPT_TC_SUM_BLOCK || p->round != MPT_TC_ROUND_RZ) continue;
        const mpt_tc_format f = p->family == MPT_TC_FAMILY_FP8 ? MPT_TC_FORMAT_E4M3 : (mpt_tc_format)p->family;
        mpt_tc_op op = op_of(p->model, f, f, p->out);
        int below = 0, blocks = 0;
        for (int t = 0; t < 300; t++) {
            const int K = 3 * p->block, sign = t % 2 ? -1 : 1;
            float a[96], b[96];
            for (int k = 0; k < K; k++) {
                a[k] = fabsf(rand_value(&r, f, -6, 3));
                b[k] = sign * fabsf(rand_value(&r, f, -6, 3));
            }
            float c = sign * fabsf((float)tests_uniform(&r, 0.0, 8.0));
            for (int k0 = 0; k0 < K; k0 += p->block, blocks++) {
                const float d = mpt_tc_dot(&op, c, a + k0, 1, b + k0, 1, p->block);
                double exact = c, big = fabs(c);
                for (int i = 0; i < p->block; i++) {
                    const double pr = (double)a[k0 + i] * b[k0 + i];
                    exact += pr;
                    big = fabs(pr) > big ? fabs(pr) : big;
                }
                const double loss = sign * (exact - (double)d); /* >= 0: d no further from zero than exact */
                int eb, ed;
                frexp(big, &eb);
                frexp((double)d, &ed);
                const double bound = (p->block + 1) * ldexp(1.0, eb - 1 - 23 - p->neab) + ldexp(1.0, ed - 1 - p->acc_man);
                EXPECT(loss >= 0 && loss < bound, "%s, trial %d, block at %d: exact %a, d %a: loss %g, bound %g", p->name,
                       t, k0, exact, (double)d, loss, bound);
                below += loss > 0;
                c = d;
            }
        }
        /* the bias is real: most blocks lose something */
        EXPECT(below > blocks / 2, "%s: only %d of %d blocks below the exact sum", p->name, below, blocks);
    }
}
END_TEST

/* mpt_tc_gemm equals mpt_tc_dot on every element, in all four layouts, with and without C0 (and C0 == D), with a
 * NaN in one row of A and an inf in one column of B. */
START_TEST(test_gemm_is_dot) {
    tests_rng r = {0x6e33};
    const struct { mpt_tc_model m; mpt_tc_format f; mpt_tc_out o; } cases[] = {
        {H100, FP16, OUT32}, {A100, BF16, OUT32}, {B200, TF32, OUT32}, {ADA, MPT_TC_FORMAT_E4M3, OUT32},
        {H100, FP16, OUT16}, {IEEE, BF16, OUT32}, {V100, FP16, OUT32},
    };
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
        mpt_tc_op op = op_of(cases[ci].m, cases[ci].f, cases[ci].f, cases[ci].o);
        for (int variant = 0; variant < 8; variant++) {
            const int ta = variant & 1, tb = (variant >> 1) & 1, with_c = variant >> 2;
            const int64_t M = 5, N = 7, K = variant == 3 ? 0 : 37;
            float A[5 * 37], B[37 * 7], C0[5 * 7], D[5 * 7];
            for (int i = 0; i < M * K; i++) A[i] = rand_value(&r, cases[ci].f, -4, 4);
            for (int i = 0; i < K * N; i++) B[i] = rand_value(&r, cases[ci].f, -4, 4);
            for (int i = 0; i < M * N; i++) C0[i] = mpt_f16_to_f32(mpt_f32_to_f16((float)tests_uniform(&r, -8, 8)));
            if (K > 0 && variant == 5) {
                A[2 * (ta ? 1 : K)] = NAN;                   /* row 2 of op(A) */
                B[4 * (tb ? K : 1)] = INFINITY;              /* column 4 of op(B) */
            }
            mpt_tc_gemm_args g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .A = A, .B = B,
                                  .C0 = with_c ? C0 : NULL, .D = with_c && variant == 7 ? C0 : D};
            float want[5 * 7];
            for (int64_t m = 0; m < M; m++)
                for (int64_t n2 = 0; n2 < N; n2++)
                    want[m * N + n2] = mpt_tc_dot(&op, with_c ? C0[m * N + n2] : 0.0f, A + m * (ta ? 1 : K),
                                                  ta ? M : 1, B + n2 * (tb ? K : 1), tb ? 1 : N, K);
            const size_t ws_bytes = mpt_tc_gemm_ws_bytes(&op, M, N, K);
            double *ws = malloc(ws_bytes + 8);
            mpt_tc_gemm(&op, &g, ws, ws_bytes);
            free(ws);
            for (int i = 0; i < M * N; i++)
                EXPECT(same(g.D[i], want[i]), "%s variant %d: D[%d] = %a, dot %a", op.p->name, variant, i,
                       (double)g.D[i], (double)want[i]);
        }
    }
}
END_TEST

/* Large enough for the GEMM's OpenMP rows (M N K >= 64 x 65536), on two threads: still mpt_tc_dot on every
 * element. */
START_TEST(test_gemm_threads) {
    tests_rng r = {0x7421};
    mpt_cpu_set_threads(2);
    mpt_tc_op op = op_of(H100, BF16, BF16, OUT32);
    const int64_t M = 64, N = 64, K = 1024;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * N * K), *D = malloc(sizeof(float) * M * N);
    ck_assert(A && B && D);
    for (int64_t i = 0; i < M * K; i++) A[i] = rand_value(&r, BF16, -8, 8);
    for (int64_t i = 0; i < N * K; i++) B[i] = rand_value(&r, BF16, -8, 8);
    const size_t ws_bytes = mpt_tc_gemm_ws_bytes(&op, M, N, K);
    void *ws = malloc(ws_bytes);
    ck_assert(ws);
    const mpt_tc_gemm_args g = {.trans_b = 1, .M = M, .N = N, .K = K, .A = A, .B = B, .D = D};
    mpt_tc_gemm(&op, &g, ws, ws_bytes);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const float want = mpt_tc_dot(&op, 0.0f, A + m * K, 1, B + n * K, 1, K);
            EXPECT(same(D[m * N + n], want), "D[%lld, %lld] = %a, dot %a", (long long)m, (long long)n,
                   (double)D[m * N + n], (double)want);
        }
    free(A), free(B), free(D), free(ws);
}
END_TEST

/* The alignment floor in the GEMM's row path (tc_block_rows) as in the dot product: H100 bf16 -> fp32 (floor -133,
 * neab 2). a = (2^-76 x 1.111111b, 2^-81), b = (2^-73 x 1.0000001b, 2^-81): products p1 = 2^-149 x (2 - 2^-13) =
 * 2^-148 - 2^-162 (exponent -149) and p2 = 2^-162. E = max(-149, -162, -133) = -133, grid 2^(-133 - 23 - 2) =
 * 2^-158: p1 truncates to 2^-148 - 2^-158, p2 to 0; the sum is rounded toward zero into FP32, whose quantum here
 * is the subnormal 2^-149: d = 2^-149. Without the floor (E = -149, grid 2^-174) both stay and d = 2^-148 exactly
 * (the mutation audit's T01: the floor dropped from the GEMM path survived the random inputs of test_gemm_is_dot). */
START_TEST(test_alignment_floor_in_gemm) {
    const float a[2] = {0x1.fcp-76f, 0x1p-81f}, b[2] = {0x1.02p-73f, 0x1p-81f};
    ck_assert(mpt_bf16_to_f32(mpt_f32_to_bf16(a[0])) == a[0] && mpt_bf16_to_f32(mpt_f32_to_bf16(b[0])) == b[0]);
    ck_assert((double)a[0] * b[0] == 0x1p-148 - 0x1p-162);
    expect_dot("alignment floor, fp32 output", H100, BF16, OUT32, 0.0f, a, b, 2, 0x1p-149f);
    mpt_tc_op op = op_of(H100, BF16, BF16, OUT32);
    float D[1] = {-1.0f};
    mpt_tc_gemm_args g = {.M = 1, .N = 1, .K = 2, .A = a, .B = b, .D = D}; /* A [1, 2], B [2, 1] */
    const size_t ws_bytes = mpt_tc_gemm_ws_bytes(&op, 1, 1, 2);
    double *ws = malloc(ws_bytes + 8);
    mpt_tc_gemm(&op, &g, ws, ws_bytes);
    free(ws);
    EXPECT(same(D[0], 0x1p-149f), "h100 bf16 gemm below the alignment floor: D = %a, expected 2^-149", (double)D[0]);
    /* test_overflow_and_specials' "inf stays" in the GEMM's row path: c = FP32 max plus 2^52 x 2^52 overflows to +inf
     * in the first block of 16; the second block (finite products -2^126) must leave +inf (T03: a chain that went on
     * from an infinite partial sum survived) */
    float la[32] = {0x1p52f}, lb[32] = {0x1p52f}, c0[1] = {FLT_MAX};
    for (int i = 16; i < 32; i++) la[i] = -0x1p126f, lb[i] = 1.0f;
    mpt_tc_gemm_args h = {.M = 1, .N = 1, .K = 32, .A = la, .B = lb, .C0 = c0, .D = D};
    const size_t hb = mpt_tc_gemm_ws_bytes(&op, 1, 1, 32);
    ws = malloc(hb + 8);
    mpt_tc_gemm(&op, &h, ws, hb);
    free(ws);
    EXPECT(same(D[0], INFINITY), "h100 bf16 gemm: +inf partial sum, then a finite block: D = %a, expected +inf",
           (double)D[0]);
}
END_TEST

static Suite *tc_accum_suite(void) {
    Suite *s = suite_create("tc_accum");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_table_rows);
    suite_add_tcase(s, tc);
    TCase *th = tcase_create("by hand");
    tcase_set_timeout(th, 30);
    tcase_add_test(th, test_alignment_truncation);
    tcase_add_test(th, test_block_size);
    tcase_add_test(th, test_unnormalised_products_and_c);
    tcase_add_test(th, test_subnormals);
    tcase_add_test(th, test_fp16_output);
    tcase_add_test(th, test_fp8_rows);
    tcase_add_test(th, test_overflow_and_specials);
    tcase_add_test(th, test_alignment_floor_in_gemm);
    suite_add_tcase(s, th);
    TCase *tp = tcase_create("properties");
    tcase_set_timeout(tp, 120);
    tcase_add_test(tp, test_ieee_is_recursive_fp32_sum);
    tcase_add_test(tp, test_exact_when_representable);
    tcase_add_test(tp, test_truncation_bias_one_sign);
    tcase_add_test(tp, test_gemm_is_dot);
    tcase_add_test(tp, test_gemm_threads);
    suite_add_tcase(s, tp);
    return s;
}

int main(void) { return mpt_test_run(tc_accum_suite()); }
