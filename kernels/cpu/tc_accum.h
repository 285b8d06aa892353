/*
 * kernels/cpu/tc_accum.h - models of how NVIDIA Tensor Cores sum an inner product (internal to the CPU backend).
 *
 * The emulate kernel set rounds GEMM operands exactly as the GPU does, and a product of two such operands is exact
 * in FP32; what differs is the summation. A Tensor Core does not add products one FP32 FMA at a time: one
 * instruction (a "block FMA") takes n products and the accumulator c, aligns them all to the largest exponent
 * among them, truncates what falls below a fixed number of bits, adds the aligned significands exactly, and
 * rounds the sum once. These models compute that, bit for bit, on the CPU.
 *
 * Source of every rule and number below: F. A. Khattak and M. Mikaitis, "Accurate Models of NVIDIA Tensor Cores",
 * arXiv 2512.07004 (2025; ACM TACO, doi 10.1145/3830409), and its MATLAB models, repository
 * github.com/north-numerical-computing/MATLAB-tensor-core (BSD-2-Clause; read at commit b12b5a7): the parameters
 * of models/V100TC.m, A100TC.m (A2TC.m and A30TC.m call it), AdaTC.m and L40STC.m (identical rows), H100TC.m
 * (H200TC.m calls it) and B200TC.m, and the algorithm of models/tools/Generic_BFMA_TC.m and GEMM.m. This file is
 * our C, written from those descriptions; nothing of theirs is copied into the project. The repository's
 * model_validation/ holds inner products measured on the GPUs; bench/tc_validate checks these models against
 * them (counts in docs/numerics.md, "Tensor Core summation models").
 *
 * One block FMA, d = c + a_1 b_1 + ... + a_n b_n (n <= the row's `block`), for finite inputs:
 *   1. Every operand is split as x = s * 2^(e - 23), s an integer below 2^24 (the FP32 significand) and e its
 *      exponent, where a subnormal of the input format counts with the format's smallest normal exponent emin
 *      (its significand below 2^23). Zero products are dropped.
 *   2. A product a_i b_i keeps the un-normalised exponent e_i = e(a_i) + e(b_i) and its significand s_a s_b / 2^23
 *      (in [1, 4) times 2^23 for normal operands; exact, since the formats have at most 11 significant bits);
 *      c (FP32, or an FP16 value for the FP16-output rows) keeps its own FP32 exponent and 24-bit significand.
 *   3. E = max(all e_i, e(c) when c != 0, min_exp). Every term is put on the grid 2^(E - 23 - neab) by shifting its
 *      magnitude right: the bits below the grid are dropped (truncation toward zero of each magnitude, before its
 *      sign is applied). neab: the extra alignment bits below the 23 fraction bits of the largest term (negative:
 *      fewer). No sticky bit.
 *   4. The shifted, signed terms are added exactly (the accumulator has room for every carry).
 *   5. The sum is normalised and rounded once to acc_man fraction bits with the output format's exponent range
 *      (subnormal results kept), toward zero (RZ) or to nearest-even (RNE); an exact zero sum gives +0; a result
 *      at or above 2^(emax + 1) gives +-inf, also under RZ (the model's rule, where IEEE RZ would saturate).
 * A dot product over K runs ceil(K / block) block FMAs in order, the first with the given c, each next with the
 * previous result as its c (GEMM.m's "recursive accumulation"; a short last block is a block padded with zeros).
 * Inputs: as GEMM.m does, if any operand of the whole dot product or the initial c is NaN or infinite, the result
 * follows IEEE's rules for the set {c, a_k b_k} (NaN when any is NaN, inf x 0, or +inf meets -inf; else that
 * infinity); products are formed exactly, so finite operands never make one. An FP16-output row first rounds c to
 * FP16 (RNE; the measurement's CUDA kernel and GEMM.m do the same). Where the model is silent we chose: a c that
 * became infinite by overflow in an earlier block stays so (IEEE: inf + finite), and a single block FMA called
 * with a non-finite c or operand follows the IEEE rule above for its own terms.
 *
 * Fixed for every NVIDIA row (the repository's flags, not parameters here): global alignment of all products and
 * c together (c is aligned with the products, not added to their sum afterwards), un-normalised products (denorm_prd = 1), no
 * sticky bit, subnormal inputs and outputs supported, products allowed beyond the output's exponent range inside
 * the block (prd_limit = 0).
 *
 * The `ieee` model is no Tensor Core: d = c, then d = fma(a_k, b_k, d) in FP32 with RNE for k = 1..K in order
 * (IEEE 754 recursive summation; while no product leaves FP32's range, the products of these formats are exact
 * in FP32 and this equals d = d + a_k * b_k). The emulate kernel set computes that sum, up to its FP32 engine's
 * order (kernels/cpu/gemm.c).
 *
 * Operands are FP32 values already rounded to the input format (what the emulate kernel set holds in its
 * converted scratch). A value that is not one of the format's loses the bits the model has no room for (the
 * functions do not check; bench/tc_validate does).
 */
#ifndef MPT_KERNELS_CPU_TC_ACCUM_H
#define MPT_KERNELS_CPU_TC_ACCUM_H

#include <stddef.h>
#include <stdint.h>

/* The summation model: which GPU's Tensor Cores, or IEEE FP32 recursive summation. */
typedef enum mpt_tc_model {
    MPT_TC_MODEL_IEEE = 0, /* FP32 FMA per product, in order (the emulate kernel set's arithmetic) */
    MPT_TC_MODEL_V100,     /* Volta: V100 (FP16 only) */
    MPT_TC_MODEL_A100,     /* Ampere: A100, A30, A2 (the repository's A2TC.m and A30TC.m are A100TC.m) */
    MPT_TC_MODEL_ADA,      /* Ada Lovelace: L40S, RTX 1000 (AdaTC.m, L40STC.m: the same parameters) */
    MPT_TC_MODEL_H100,     /* Hopper: H100, H200 (H200TC.m is H100TC.m) */
    MPT_TC_MODEL_B200,     /* Blackwell: B200 (FP16, BF16, TF32; its FP8 is not modelled: tc_accum.c) */
    MPT_TC_MODEL_COUNT
} mpt_tc_model;

/* The operands' number format (held as FP32 values). */
typedef enum mpt_tc_format {
    MPT_TC_FORMAT_FP16 = 0, /* IEEE binary16: 10 fraction bits, emin -14 */
    MPT_TC_FORMAT_BF16,     /* bfloat16: 7 fraction bits, emin -126 */
    MPT_TC_FORMAT_TF32,     /* TensorFloat-32: 10 fraction bits, emin -126 */
    MPT_TC_FORMAT_E4M3,     /* OCP FP8 E4M3: 3 fraction bits, emin -6 */
    MPT_TC_FORMAT_E5M2,     /* OCP FP8 E5M2: 2 fraction bits, emin -14 */
    MPT_TC_FORMAT_COUNT
} mpt_tc_format;

/* The instruction family a format feeds (one parameter row per model, family and output): FP8 rows take E4M3 and
 * E5M2 operands in any mix; the others take A and B of the one format. */
typedef enum mpt_tc_family {
    MPT_TC_FAMILY_FP16 = 0,
    MPT_TC_FAMILY_BF16,
    MPT_TC_FAMILY_TF32,
    MPT_TC_FAMILY_FP8,
    MPT_TC_FAMILY_COUNT
} mpt_tc_family;

/* The output (and c) format. */
typedef enum mpt_tc_out {
    MPT_TC_OUT_FP32 = 0,
    MPT_TC_OUT_FP16,
    MPT_TC_OUT_COUNT
} mpt_tc_out;

/* The rounding of the block's sum (step 5 of the file comment). */
typedef enum mpt_tc_round {
    MPT_TC_ROUND_RZ = 0, /* toward zero (truncation of the magnitude) */
    MPT_TC_ROUND_RNE,    /* to nearest, ties to even */
} mpt_tc_round;

/* How a row sums. */
typedef enum mpt_tc_sum {
    MPT_TC_SUM_BLOCK = 0, /* block FMAs (the Tensor Core models) */
    MPT_TC_SUM_IEEE,      /* one FP32 FMA per product, in order */
} mpt_tc_sum;

/* A number format's properties (one row per mpt_tc_format). */
typedef struct mpt_tc_format_info {
    const char *name;     /* "fp16", "bf16", "tf32", "e4m3", "e5m2" */
    mpt_tc_family family; /* the instruction family it feeds */
    int man_bits;         /* fraction bits */
    int emin;             /* smallest normal exponent: subnormal operands count with it (step 1) */
    int emax;             /* largest finite exponent */
} mpt_tc_format_info;

/* An output format's properties (one row per mpt_tc_out). */
typedef struct mpt_tc_out_info {
    const char *name; /* "fp32", "fp16" */
    int man_bits;     /* fraction bits */
    int emin, emax;   /* normal exponent range: results below 2^emin are subnormal, at 2^(emax + 1) infinite */
} mpt_tc_out_info;

/* One model's block FMA for one instruction family and output: a row of the descriptor table (tc_accum.c). */
typedef struct mpt_tc_params {
    const char *name;      /* "h100 fp16 -> fp32" */
    mpt_tc_model model;
    mpt_tc_family family;
    mpt_tc_out out;
    mpt_tc_sum sum;        /* BLOCK, or IEEE (the remaining fields unused) */
    int block;             /* products per block FMA (the repository's `fma`) */
    int neab;              /* extra alignment bits below the largest term's 23 fraction bits; negative: fewer */
    int min_exp;           /* lowest alignment exponent E (`min_exp_limit`) */
    mpt_tc_round round;    /* rounding of the block's sum (`frmode`) */
    int acc_man;           /* fraction bits the sum is rounded to: the output's, or 23 + neab when neab < 0 (the
                              FP8 rows' narrow accumulator; GEMM.m) */
    const char *gpus;      /* the GPUs whose measurements the repository fits with this row */
} mpt_tc_params;

/* The largest `block` of any row: the products one block FMA call may take. */
#define MPT_TC_MAX_BLOCK 32

/* A model bound to its operands' formats: what the summing functions take (mpt_tc_op_init). */
typedef struct mpt_tc_op {
    const mpt_tc_params *p;          /* the row */
    const mpt_tc_out_info *out;      /* its output format */
    int emin_a, emin_b;              /* the operand formats' smallest normal exponents (step 1) */
} mpt_tc_op;

/* Names ("ieee", "v100", "a100", "ada", "h100", "b200"; "fp16", ...; "fp32", "fp16"), NULL when out of range. */
const char *mpt_tc_model_name(mpt_tc_model m);
const mpt_tc_format_info *mpt_tc_format_info_of(mpt_tc_format f);
const mpt_tc_out_info *mpt_tc_out_info_of(mpt_tc_out o);
/* The model / format named `name` (case-insensitive), or -1. */
int mpt_tc_model_parse(const char *name);
int mpt_tc_format_parse(const char *name);

/* The descriptor table: *n rows (every model, family and output the repository models), in a fixed order. */
const mpt_tc_params *mpt_tc_rows(int *n);
/* The row of model m for family f and output o, or NULL when the model has none (V100 has only FP16, B200 no FP8;
 * the IEEE model and the FP8 rows only an FP32 output). */
const mpt_tc_params *mpt_tc_find(mpt_tc_model m, mpt_tc_family f, mpt_tc_out o);

/* Binds model m to A in format fa, B in format fb and output o. Returns 0, or -1 (op untouched) when fa and fb feed
 * different families (FP16 x BF16, ...) or the model has no row for them. */
int mpt_tc_op_init(mpt_tc_op *op, mpt_tc_model m, mpt_tc_format fa, mpt_tc_format fb, mpt_tc_out o);

/* One block FMA: c + sum_{i < n} a[i] b[i] (n <= op->p->block for BLOCK rows; any n >= 0 for IEEE), a and b
 * values of op's formats held as FP32, c a value of the output format (FP16 rows round it to FP16, RNE). Returns
 * the result, a value of the output format held as FP32. */
float mpt_tc_block(const mpt_tc_op *op, float c, const float *a, const float *b, int n);

/* An operand split for the model (step 1): value = sig * 2^(exp - 23), sig signed with |sig| < 2^24 (0 for a zero),
 * exp raised to the format's smallest normal exponent. For callers that split each operand once and sum it many
 * times (a GEMM; a table of the 256 FP8 codes). */
typedef struct mpt_tc_term {
    int32_t sig;
    int32_t exp;
} mpt_tc_term;

/* x (finite, a value of a format whose smallest normal exponent is emin: mpt_tc_op.emin_a / emin_b) split. */
mpt_tc_term mpt_tc_split(float x, int emin);

/* mpt_tc_block on split operands (a[i] of A's format, b[i] of B's): c + sum_{i < n} a[i] b[i] for a BLOCK row, with
 * c, a and b finite (the caller handles NaN and inf, e.g. by mpt_tc_block on the values). The same bits as
 * mpt_tc_block on the values they were split from. */
float mpt_tc_block_split(const mpt_tc_op *op, float c, const mpt_tc_term *a, const mpt_tc_term *b, int n);

/* A dot product over K: c + sum_{k < K} a[k * a_stride] b[k * b_stride] as the model sums it (block FMAs over
 * k = 0..block-1, block..2 block-1, ... in order, each result the next one's c). K >= 0 (K = 0: c, rounded to the
 * output format). */
float mpt_tc_dot(const mpt_tc_op *op, float c, const float *a, int64_t a_stride, const float *b, int64_t b_stride,
                 int64_t K);

/* A GEMM summed by the model: D[M,N] = op(A)[M,K] op(B)[K,N] (+ C0), row-major, every element mpt_tc_dot of its
 * row of op(A) and column of op(B) with c = C0[m, n] (or +0 when C0 is NULL). Layouts as mpt_gemm_args
 * (engine/backend.h): op(A) = A stored [M, K] (trans_a = 0) or [K, M] read transposed (trans_a = 1); op(B) = B
 * stored [K, N] (trans_b = 0) or [N, K] (trans_b = 1); dense rows. */
typedef struct mpt_tc_gemm_args {
    int trans_a, trans_b;
    int64_t M, N, K;
    const float *A;  /* FP32 values of op->a's format: [M, K] or [K, M] */
    const float *B;  /* FP32 values of op->b's format: [K, N] or [N, K] */
    const float *C0; /* [M, N] values of the output format, the accumulators' start; NULL: +0. May equal D */
    float *D;        /* [M, N] output, values of the output format held as FP32 */
} mpt_tc_gemm_args;

/* Scratch bytes mpt_tc_gemm needs for these sizes: the operands split into significands and exponents once per
 * call and a NaN/inf flag per row of op(A) and column of op(B), (M + N) * (8 K + 1) bytes; 0 for an IEEE row. */
size_t mpt_tc_gemm_ws_bytes(const mpt_tc_op *op, int64_t M, int64_t N, int64_t K);

/* Runs the GEMM of g with op's model using ws (at least mpt_tc_gemm_ws_bytes bytes, 4-byte aligned) as scratch,
 * on the CPU backend's OpenMP threads (mpt_cpu_set_threads) when it is large; every element is computed alone, so
 * the result does not depend on the thread count. Every element equals mpt_tc_dot on its row and column (operands
 * that are values of op's formats, as everywhere here). Aborts (MPT_ASSERTF) on negative sizes, missing pointers
 * or too little scratch. */
void mpt_tc_gemm(const mpt_tc_op *op, const mpt_tc_gemm_args *g, void *ws, size_t ws_bytes);

#endif
