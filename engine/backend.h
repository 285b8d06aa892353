/*
 * engine/backend.h - the backend table: how the math runs (ARCHITECTURE decision 5).
 *
 * Layers never call OpenBLAS, cuBLASLt or cuDNN directly: they fill an argument struct and call through
 * this table, so one layer runs on both backends. kernels/cpu implements it with OpenBLAS and loops that
 * emulate Tensor Core numerics (decision 2); kernels/cuda with cuBLASLt, cuDNN and own kernels.
 *
 * Conventions for every operation:
 *  - Pointers are backend memory (host memory for the CPU backend, device memory for CUDA), except where a
 *    parameter is marked "host". Scalars that the training step produces and consumes without a host sync
 *    (loss, loss scale, found_inf, counters) live in backend memory too.
 *  - Dense row-major layouts; dtypes are given next to each pointer. F16/BF16 are uint16_t bit patterns.
 *  - Gradient outputs ACCUMULATE (+=) when the call's `accumulate` flag is nonzero (GEMM: beta = 1), and are
 *    OVERWRITTEN (=, without reading the old contents, which may be garbage) when it is 0 (GEMM: beta = 0): the
 *    autograd graph lets the first writer of a gradient in a backward pass overwrite it and later writers
 *    accumulate, instead of zeroing the gradient arenas every step (engine/graph.h). Overwriting gives the bits
 *    of accumulating into zeros, except that a -0 result stays -0 (0 + -0 is +0).
 *  - Operations are stream-ordered: they may return before the work is done (CUDA). to_host() and
 *    synchronize() wait.
 *  - No operation allocates: scratch comes from be->workspace, sized at graph build time through the
 *    *_workspace() queries and mpt_backend_reserve_workspace().
 *
 * Numerics of GEMM and convolution (both backends): operands are rounded to the math mode's format
 * (TF32 with round-to-nearest-even on the CPU; F16/BF16 operands are already in that format), products and
 * sums are FP32 (on the CPU, IEEE additions, or a GPU's Tensor Core summation with mpt_backend_cpu_set_accum), the
 * epilogue (beta*C, bias, ReLU) is applied in FP32, and the result is rounded once to C's dtype. The two backends differ in summation order (and in the TF32 rounding mode, see
 * engine/numerics.h), which the cuda test suite bounds, and, measured on an H200 (cuBLASLt 13.1, cuDNN 9.19,
 * 2026-11-26; docs/cuda.md), in one more rounding of 16-bit outputs: cuBLASLt's bias epilogues round
 * alpha*op(A)op(B) + beta*C to the F16/BF16 output and add the bias to that, rounding again; cuDNN blends a
 * convolution's prior value (accumulate, or the bias written first) into an already-rounded 16-bit result. Such an
 * element can be one unit in the last place from the CPU's (which rounds once); FP32 outputs are unaffected. The
 * cuda tests pin both models (test_gemm_rounding_model, test_conv_rounding_model).
 */
#ifndef MPT_ENGINE_BACKEND_H
#define MPT_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"
#include "engine/dtype.h"
#include "engine/status.h"
#include "engine/tensor.h"

typedef struct mpt_backend mpt_backend;

/* The telemetry counters the telemetry entries fill (engine/telemetry/range.h, lost.h: internal headers, so here
 * incomplete types; only the collector calls these entries). */
typedef struct mpt_range mpt_range;
typedef struct mpt_exp_hist mpt_exp_hist;
typedef struct mpt_round_err mpt_round_err;
typedef struct mpt_lost mpt_lost;

/* Most rounding-error shifts one telemetry_rounding call sums (k = 0 and k = -log2 S). */
#define MPT_TELEMETRY_MAX_SHIFTS 2

/* ---- GEMM ----------------------------------------------------------------------------------------- */

typedef enum mpt_epilogue {
    MPT_EPILOGUE_NONE = 0,  /* D = alpha*op(A)op(B) + beta*C */
    MPT_EPILOGUE_BIAS,      /* ... + bias[n] on every row */
    MPT_EPILOGUE_RELU_BIAS, /* relu(... + bias[n]) */
    MPT_EPILOGUE_BGRAD,     /* D as NONE, and bias_grad[m] = sum_k op(A)[m, k] in FP32, written (not added): the
                               bias gradient of a linear layer fused into its weight-gradient GEMM (cuBLASLt
                               CUBLASLT_EPILOGUE_BGRADB; A is dy stored [K, M], so trans_a must be 1; alpha 1;
                               C F32). On the CPU: the GEMM, then be->bias_grad's loop over the stored [K, M] A
                               (the unfused bits). cuBLASLt's reduction order is its own: on the GPU the fused bias
                               gradient differs from bias_grad's within FP32 summation error (K terms). */
    MPT_EPILOGUE_RELU_AUX_BIAS, /* RELU_BIAS, and the ReLU bitmask of the result written to aux (format below): bit
                               (m, n) = [C[m, n] > 0] for the rounded, stored C (mpt_elem_relu_mask), padding bits
                               0. A linear layer's forward with the relu after it fused in (engine/graph.h). CPU: the
                               RELU_BIAS GEMM, then the mask from the stored C (the unfused relu backward's rule, so
                               the bits are those of relu_backward from the saved output). CUDA: cuBLASLt
                               CUBLASLT_EPILOGUE_RELU_AUX_BIAS, whose mask is most likely [FP32 result > 0] before
                               the rounding: it differs from ours only where a positive FP32 value rounds to +0 in
                               a 16-bit C (below half the smallest subnormal), where the unfused backward passes no
                               gradient and cuBLASLt's mask passes it. The two-step path computes our rule. */
    MPT_EPILOGUE_DRELU_BGRAD, /* D = alpha*op(A)op(B) (beta must be 0: C is written, never read), then
                               C[m, n] = aux bit (m, n) ? D : +0 (mpt_elem_drelu) rounded once to C's dtype, and
                               bias_grad[n] = sum_m C[m, n] in FP32, written (not added): the data-gradient GEMM of
                               the linear layer after a fused relu, producing the gradient of the earlier linear
                               layer's output (relu backward applied) and that layer's bias gradient (cuBLASLt
                               CUBLASLT_EPILOGUE_DRELU_BGRAD). aux: the bitmask RELU_AUX_BIAS wrote for this
                               [M, N]. Masking commutes with the rounding (round(+0) = +0), so on the CPU the
                               GEMM, the mask over the stored C and be->bias_grad's loop over the rounded C give
                               the unfused bits exactly. On the GPU cuBLASLt sums the bias gradient in its own
                               order and, for a 16-bit C, most likely over the FP32 values before rounding (the
                               unfused sum and the two-step path add the rounded ones): within FP32 summation
                               error (M terms) plus M * u(C) of the sum of |C|. */
} mpt_epilogue;

/* Whether an epilogue adds the bias vector (BIAS, RELU_BIAS, RELU_AUX_BIAS). */
static inline int mpt_epilogue_adds_bias(mpt_epilogue e) {
    return e == MPT_EPILOGUE_BIAS || e == MPT_EPILOGUE_RELU_BIAS || e == MPT_EPILOGUE_RELU_AUX_BIAS;
}

/* Whether an epilogue reads or writes the ReLU bitmask mpt_gemm_args.aux (RELU_AUX_BIAS, DRELU_BGRAD). */
static inline int mpt_epilogue_uses_aux(mpt_epilogue e) {
    return e == MPT_EPILOGUE_RELU_AUX_BIAS || e == MPT_EPILOGUE_DRELU_BGRAD;
}

/* The ReLU bitmask (mpt_gemm_args.aux) of a row-major [M, N] C is cuBLASLt's: a column-major bit matrix in
 * cuBLASLt's view of C (C^T, N rows and M columns; kernels/cuda/gemm.cu), i.e. row m of our C is column m of the
 * mask: element (m, n) is bit number m * ld + n, where the leading dimension ld (in bits) is N rounded up to a
 * multiple of 128 (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: "ReLu bit-mask matrix leading dimension in
 * elements (i.e. bits) ... Must be divisible by 128 and be no less than the number of rows in the output
 * matrix"). Bit number i is bit (i % 8) of byte i / 8 (least significant first; the same bits as little-endian
 * 32-bit words): this byte order is our assumption about cuBLASLt's, checked against [y > 0] by the cuda suite
 * (test_gemm_relu_aux_layout). Bits n >= N of each column are padding: written 0 by our kernels, unspecified
 * after cuBLASLt, never read. The buffer needs 16-byte alignment (our arenas give 256; cublasLt.h states no
 * figure, only that the heuristic reads CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER for its alignment). */
static inline int64_t mpt_relu_aux_ld(int64_t N) { return (N + 127) / 128 * 128; }
/* Bytes of the ReLU bitmask of an [M, N] C: M * ld / 8. */
static inline size_t mpt_relu_aux_bytes(int64_t M, int64_t N) { return (size_t)M * (size_t)(mpt_relu_aux_ld(N) / 8); }

/* The accumulator of an FP8 GEMM (math MPT_MATH_FP8; engine/amp/fp8.h, kernels/cpu/gemm.c has the model). */
typedef enum mpt_fp8_accum {
    MPT_FP8_ACCUM_FP32 = 0, /* exact FP8 x FP8 products summed in FP32 (the CPU's default; on the GPU cuBLASLt
                               CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0, which promotes partial sums into FP32 at an
                               interval of its own) */
    MPT_FP8_ACCUM_FAST,     /* Hopper's FP8 Tensor Core accumulator: blocks of 32 products aligned to their largest
                               exponent and truncated to 13 fraction bits (the CPU's model; on the GPU
                               CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1), optionally promoted into FP32 every
                               fp8_promote elements of K */
} mpt_fp8_accum;

/* Elements of K that share one E8M0 scale in an MX operand (OCP MX v1.0: k = 32). */
#define MPT_MX_BLOCK 32
/* Block scales per row of an MX operand with K elements: ceil(K / 32) (a short last block is a block padded with
 * zeros, which do not change its amax). */
MPT_HD int64_t mpt_mx_blocks(int64_t K) { return (K + MPT_MX_BLOCK - 1) / MPT_MX_BLOCK; }

typedef struct mpt_gemm_args {
    /* C[M,N] = epilogue(alpha * op(A)[M,K] * op(B)[K,N] + beta * C[M,N]), row-major, C written in place.
     * op(A) = A stored [M,K] (trans_a = 0) or A stored [K,M] read transposed (trans_a = 1); same for B
     * with [K,N] / [N,K]. Leading dimensions are the stored row lengths (dense). */
    int trans_a, trans_b;
    int64_t M, N, K;
    const void *A; mpt_dtype a_dtype; /* F32, F16 or BF16 */
    const void *B; mpt_dtype b_dtype; /* same dtype as A */
    void *C; mpt_dtype c_dtype;       /* F32, F16 or BF16; read when beta != 0 */
    const void *bias; mpt_dtype bias_dtype; /* [N], for the BIAS epilogues; else NULL */
    float *bias_grad;                 /* FP32 output, written: [M] for MPT_EPILOGUE_BGRAD, [N] for
                                         MPT_EPILOGUE_DRELU_BGRAD; else NULL */
    void *aux;                        /* ReLU bitmask of C (format above, mpt_relu_aux_bytes(M, N) bytes): written
                                         by RELU_AUX_BIAS, read by DRELU_BGRAD; else NULL */
    float alpha, beta;
    mpt_math math;                    /* FP32/TF32 need F32 operands; F16/BF16 need A/B of that dtype; FP8 and
                                         MXFP8 need E4M3/E5M2 A and B (each its own) in the TN layout below */
    mpt_epilogue epilogue;
    /* FP8 operands (math FP8 or MXFP8): A stored [M, K] and B stored [N, K], both K-contiguous (trans_a = 0,
     * trans_b = 1: the "TN" layout cuBLASLt requires for FP8), E4M3 or E5M2. What they stand for is their stored
     * value times their scale: per tensor (FP8), op(A)op(B) = a_scale_inv * b_scale_inv * sum_k A[m,k] B[n,k], the
     * factor applied with alpha in the epilogue (cuBLASLt: D = alpha * scale_A * scale_B * AB + beta * C); per
     * block of 32 along K (MXFP8), element k of row m is A[m, k] * 2^(a_block_scales[m, k / 32] - 127). */
    const float *a_scale_inv, *b_scale_inv; /* FP8: backend scalars, 1/s of each operand (mpt_fp8_meta.scale_inv);
                                               16-byte aligned on the CUDA backend (cuBLASLt's scale pointers) */
    const uint8_t *a_block_scales;    /* MXFP8: E8M0 [M, mpt_mx_blocks(K)] */
    const uint8_t *b_block_scales;    /* MXFP8: E8M0 [N, mpt_mx_blocks(K)] */
    mpt_fp8_accum fp8_accum;          /* FP8: the accumulator (FP32 for MXFP8) */
    int32_t fp8_promote;              /* FAST: add the partial sum into an FP32 accumulator every this many elements
                                         of K (a multiple of 32; 0 = never) */
    /* Operand copies that live across calls (allocated at graph build, decision 4). A backend whose GEMM of this
     * math runs on converted FP32 copies of its operands (gemm_copies below: the CPU emulation of TF32, F16 and
     * BF16) reads op A's copy from a_copy when it is set: it first converts A into it when a_copy_write is
     * nonzero, else it takes a_copy as converted by an earlier call from the same stored A (same elements, same
     * math; a copy is elementwise in A's storage order, so one copy serves A read plain or transposed). B likewise.
     * The caller owns the promise that A has not changed since; the result is bit for bit the call without copies.
     * Backends whose gemm_copies is NULL or says 0 ignore these four fields. */
    float *a_copy, *b_copy;           /* F32, as many elements as A / B */
    int a_copy_write, b_copy_write;
    int beside;                       /* 1: nothing reads C (nor bias_grad) until the caller's next `join`, so a
                                         backend with a second stream may run the call there, beside the caller's
                                         later operations (a weight gradient during the backward pass); the same
                                         bits either way. Backends without one ignore it */
    const char *tag;                  /* host string naming the call site ("fc1.fwd"), for the GEMM record;
                                         may live on the caller's stack: a backend that keeps it copies it */
} mpt_gemm_args;

/* ---- Convolution (NCHW, weights KCRS, cross-correlation as in PyTorch/cuDNN) --------------------- */

typedef struct mpt_conv_shape {
    int N, C, H, W;      /* input [N, C, H, W] */
    int K, R, S;         /* weights [K, C, R, S] */
    int pad_h, pad_w;    /* zero padding */
    int stride_h, stride_w;
    int P, Q;            /* output [N, K, P, Q]: P = (H + 2*pad_h - R)/stride_h + 1, Q likewise */
} mpt_conv_shape;

typedef struct mpt_conv_args {
    mpt_conv_shape s;
    mpt_math math;       /* as for GEMM */
    mpt_dtype dtype;     /* dtype of x, w, y, dy, dx (the compute dtype) */
    const void *x;       /* [N, C, H, W] */
    const void *w;       /* [K, C, R, S] */
    const void *bias;    /* [K] (dtype) or NULL; forward only */
    void *y;             /* [N, K, P, Q] forward output, overwritten */
    const void *dy;      /* [N, K, P, Q] backward input */
    void *dx;            /* [N, C, H, W] backward-data output, += (accumulate) or = */
    float *dw;           /* [K, C, R, S] FP32 weight gradient, += (accumulate) or = */
    float *db;           /* [K] FP32 bias gradient, += (accumulate) or = (or NULL) */
    int accumulate;      /* backward passes: nonzero adds into dx / dw and db, 0 overwrites them */
    const char *tag;
} mpt_conv_args;

/* ---- Max pooling ----------------------------------------------------------------------------------- */

typedef struct mpt_pool_args {
    int N, C, H, W;          /* input [N, C, H, W] */
    int kernel, stride, pad; /* square window; padding counts as -inf */
    int P, Q;                /* output [N, C, P, Q] */
    mpt_dtype dtype;
    const void *x; void *y;  /* forward */
    int32_t *argmax;         /* [N, C, P, Q]: index h*W+w of the max within its input plane (saved) */
    const void *dy; void *dx;/* backward: dx += scatter(dy, argmax) */
} mpt_pool_args;

/* ---- Average pooling ------------------------------------------------------------------------------- */

typedef struct mpt_avgpool_args {
    int N, C, H, W;          /* input [N, C, H, W] */
    int kh, kw, sh, sw;      /* window kh x kw, strides; no padding (global average pooling: kh = H, kw = W) */
    int P, Q;                /* output [N, C, P, Q]: P = (H - kh) / sh + 1, Q = (W - kw) / sw + 1 */
    mpt_dtype dtype;         /* x, y, dy, dx */
    const void *x; void *y;  /* forward: y = (sum of the window in FP32, row-major window order) / (kh kw), rounded */
    const void *dy; void *dx;/* backward: dx[h, w] (+)= (sum in FP32 of dy over the windows covering (h, w), in
                                window order) / (kh kw), one rounding per element */
    int accumulate;          /* backward: nonzero adds into dx, 0 overwrites it */
} mpt_avgpool_args;

/* ---- Normalisation (batch norm, layer norm) ---------------------------------------------------------- */

/* Both keep their statistics, the normalisation and the affine parameters in FP32 with x, y, dy, dx in the
 * activation dtype (F32, F16 or BF16): cuDNN's batch norm with half tensors and float scale/bias/statistics
 * (cudnnBatchNormalizationForwardTraining's "bnScaleBiasMeanVarDesc" is float for half data), PyTorch's
 * mixed-precision batch norm and its FP32 layer norm under autocast. Sums are FP32 (the CPU sums each row's part of
 * a channel, then the rows: an error bound of (S + N) u per sum instead of N S u; the GPU sums in a block tree). */
typedef struct mpt_norm_args {
    int64_t N;               /* rows (the batch) */
    int64_t C;               /* batchnorm: channels (features after a linear layer); layernorm: unused (1) */
    int64_t S;               /* batchnorm: elements of a channel per row (H W after a convolution, 1 after a linear
                                layer); layernorm: features normalised per row (everything after the batch dim) */
    mpt_dtype dtype;         /* x, y, dy, dx: F32, F16 or BF16 */
    const void *x;           /* [N, C, S] batchnorm, [N, S] layernorm */
    void *y;                 /* forward output, same shape, overwritten */
    const float *gamma, *beta; /* FP32: [C] batchnorm, [S] layernorm */
    float *mean, *rstd;      /* FP32, written by the forward pass, read by the backward pass: batchnorm training
                                [C] (the batch statistics: rstd = 1 / sqrt(biased var + eps)); layernorm [N] */
    float *running_mean, *running_var; /* batchnorm, FP32 [C]: read in evaluation; in training updated as
                                r = (1 - momentum) r + momentum s with s the batch mean and the unbiased batch
                                variance (n / (n - 1) times the biased one; n = 1: the biased one) */
    float momentum, eps;     /* batchnorm: 0.1 and 1e-5 by default; layernorm: eps (1e-5) */
    int training;            /* batchnorm: batch statistics and the running update (1), or the running statistics
                                (0: the evaluation forward; no backward follows) */
    const int32_t *labels;   /* batchnorm training: [N] backend I32 or NULL. A row whose label is negative is a padding
                                row of a last partial batch (mpt_trainer_gather): it takes no part in the statistics
                                (n = S x the valid rows, PyTorch's smaller last batch) and its dx is 0. NULL: every row
                                is valid. (A layer norm row is its own statistic: a padding row's dy = 0 gives dx = 0.) */
    const void *dy;          /* backward input */
    void *dx;                /* backward output: += (accumulate) or =; NULL: not computed (the layer's input has no
                                gradient: the network starts with the normalisation) */
    float *dgamma, *dbeta;   /* FP32 parameter gradients: sum of dy x^ and of dy; += (accumulate_params) or = */
    int accumulate, accumulate_params;
    const char *tag;         /* host string naming the call site ("bn1.fwd") */
    /* The forward statistics (training batch norm, layer norm), engine/amp/policy.h mpt_norm_stats: stat_dtype F32
     * with one_pass 0 (the default: the policy) is the two-pass FP32 computation above. Any other pair is an ablation
     * (--norm-stats) with R(v) = v rounded to nearest even in stat_dtype (F32, F16 or BF16) applied to the result of
     * every operation: over the same elements in the same order as the FP32 sums (batch norm: each valid row's part of
     * the channel, then the rows; layer norm: chunks of 512 features, then the chunks), part = R(part + t) and
     * total = R(total + part), for the terms t = x (s1), t = R(x x) (s2, one_pass) and t = R(d d) with d = R(x - mean)
     * (sq, two passes); mean = R(s1 / n); var = R(sq / n), or with one_pass max(0, R(R(s2 / n) - R(mean mean)))
     * (a NaN stays NaN); rstd = R(1 / sqrt(var + eps)); mean and rstd are saved as so rounded; the running variance
     * takes var n / (n - 1) in FP32 (n = 1: var). The normalisation, y and the backward pass are unchanged. The CPU
     * backend implements every pair; the CUDA backend the default only (the run refuses the others there). */
    mpt_dtype stat_dtype;
    int one_pass;
} mpt_norm_args;

/* ---- FP8 casts and scale state (engine/amp/fp8.h) ------------------------------------------------------ */

/* The scaling state of one FP8 operand tensor, in backend memory (ARCHITECTURE decision 10: training state like
 * the loss scale: FP32, on the device, in the checkpoint). The FP8 value stored for x is round(x * scale). */
typedef struct mpt_fp8_meta {
    float scale_inv; /* 1/s in FP32, what the GEMM multiplies by. First, so that it is 16-byte aligned in an array of
                        metas on a 32-byte aligned base: cuBLASLt 13.1 refuses an FP8 GEMM (NOT_SUPPORTED) whose
                        A/B_SCALE_POINTER is less aligned (H200 probe, 2026-11-26: 4 and 8 refused, 16 and 256 ran) */
    float scale;     /* s, what the cast multiplies by (1 at the start) */
    float amax;      /* max |x| of the tensor's last cast (NaN/inf when the tensor held one) */
    float amax_used; /* the amax that s was computed from (delayed: the history's maximum; current: amax; 0 before
                        the first update) */
    float fmax;      /* the format's largest finite value (448 or 57344): constant */
    int32_t e5m2;    /* 1: E5M2, 0: E4M3 (constant) */
    float pad_[2];   /* 32 bytes, the same layout in C and CUDA C++ */
} mpt_fp8_meta;

typedef struct mpt_fp8_cast_args {
    const void *x; mpt_dtype x_dtype; /* [rows, cols] F32, F16 or BF16 (row-major, dense) */
    int64_t rows, cols;
    mpt_dtype fmt;                    /* E4M3 or E5M2 */
    uint8_t *q;                       /* [rows, cols]: the FP8 copy, or NULL */
    uint8_t *qt;                      /* [cols, rows]: the FP8 copy transposed, or NULL (the TN layout of a GEMM
                                         whose K is `rows`: a "transposing cast") */
    int saturate;                     /* overflow -> +-max (1) or NaN/inf (0): engine/numerics.h */
    mpt_fp8_meta *meta;               /* backend: amax is written (max |x| over the tensor, NaN if any x is NaN);
                                         per-tensor scaling reads scale, or with `current` first writes scale =
                                         mpt_fp8_scale_from_amax(amax, scaled_max, pow2, 1), scale_inv = 1/scale,
                                         and amax_used = amax where that amax is finite and > 0 (else amax_used
                                         keeps its value: a checkpoint requires it finite); q = round(x * scale)
                                         (one FP32 product, then the cast) */
    int current;                      /* current scaling: the scale from this tensor's own amax (two passes) */
    float scaled_max;                 /* fmax * 2^-margin */
    int pow2;                         /* round the current scale down to a power of two */
    int mx;                           /* MX block scaling instead: per block of 32 along each output's rows (q: along
                                         cols, qt: along rows), scale code c = mpt_mx_scale_code(block amax, fmt,
                                         mx_rounding), element = round(x * 2^(127 - c)); meta->amax written only */
    int mx_rounding;                  /* mpt_mx_rounding */
    uint8_t *q_scales;                /* MX: E8M0 [rows, mpt_mx_blocks(cols)] for q (NULL without q) */
    uint8_t *qt_scales;               /* MX: E8M0 [cols, mpt_mx_blocks(rows)] for qt (NULL without qt) */
    float *found_inf;                 /* backend scalar or NULL: set to 1 when the amax is not finite (the step is
                                         skipped like one with non-finite gradients) */
    const char *tag;                  /* host string naming the call site ("fc1.x"), for messages */
} mpt_fp8_cast_args;

typedef struct mpt_fp8_update_args {
    mpt_fp8_meta *meta;               /* [n] backend */
    float *history;                   /* [n, len] backend: amax histories, slot iteration % len of row i this step's */
    int n, len;
    const int64_t *iteration;         /* backend scalar (mpt_scaler_state.iteration): this step's */
    int delayed;                      /* delayed scaling: recompute scale from the history */
    float margin_factor;              /* 2^-margin */
    int pow2;
} mpt_fp8_update_args;

/* ---- Quantization: scaled INT8 / INT4 / E4M3 tensors and the exact integer GEMM and convolution ----------------
 * (engine/quant.h: `mptrain eval --quantize`, `train --qat`.) The per-element rules are engine/numerics.h's:
 * s = amax / qmax, q = clamp(rint(x / s), -qmax, qmax), x' = q s (mpt_quant_fake for the three formats of
 * engine/dtype.h's mpt_qformat), and an integer output y = fmaf((float)acc, s_x s_w, bias) (mpt_int_rescale).
 * Integer products and their int32 sums are exact, so the two backends agree bit for bit on every output of these
 * operations (the max of an amax is order-independent too): tests/test_cuda.c checks it. */

/* Integer sums stay exact in int32 while K * 127 * 127 <= 2^31 - 1: K <= 133144 for INT8 codes. */
#define MPT_GEMM_I8_MAX_K 133144

typedef struct mpt_fake_quant_args {
    const float *x;          /* [rows, cols] FP32, row-major (master weights) */
    int64_t rows, cols;      /* one scale per row (rows = output channels: per channel), or rows = 1 (per tensor) */
    mpt_qformat fmt;         /* INT8, INT4, E4M3 (scaled) or BF16 (no scale: x' = RNE(x), scales 1) */
    void *y; mpt_dtype y_dtype; /* [rows, cols] x' rounded once to y_dtype (F32, F16, BF16), or NULL */
    int8_t *q;               /* [rows, cols] I8 codes (integer formats only), or NULL */
    float *scales;           /* [rows] the scales s = mpt_int_scale_from_amax(row amax, qmax) (1 for BF16), or NULL */
    const char *tag;         /* host string naming the call site ("fc1.weight"), for messages */
} mpt_fake_quant_args;

typedef struct mpt_quantize_args {
    const void *x; mpt_dtype x_dtype; /* [n] F32, F16 or BF16 */
    int64_t n;
    float *amax;             /* backend scalar or NULL: *amax = max(*amax, max |x|), NaN when an x is NaN */
    const float *scale;      /* backend scalar s > 0, read when q is set */
    int8_t *q;               /* [n] I8 codes mpt_int_quantize(x, *scale, qmax), or NULL */
    int qmax;                /* 127 (INT8) or 7 (INT4) */
    const char *tag;
} mpt_quantize_args;

typedef struct mpt_gemm_i8_args {
    /* acc[M, N] = sum_k A[m, k] B[n, k] exactly (int32; |acc| <= K * 127 * 127 < 2^31), the TN layout of cuBLASLt's
     * integer GEMM (A [M, K] and B [N, K], both K-contiguous); then, when C is set,
     * C[m, n] = mpt_int_rescale(acc[m, n], *a_scale * b_scales[n], bias[n]) rounded once to c_dtype (scale product
     * one FP32 rounding; b_scales[0] for every n with b_per_tensor; bias 0 without a bias). */
    int64_t M, N, K;         /* K <= MPT_GEMM_I8_MAX_K */
    const int8_t *A, *B;     /* I8 codes */
    int32_t *acc;            /* [M, N] I32, written */
    void *C; mpt_dtype c_dtype; /* [M, N] F32, F16 or BF16, or NULL */
    const float *a_scale;    /* backend scalar, read with C */
    const float *b_scales;   /* backend [N], or [1] with b_per_tensor, read with C */
    int b_per_tensor;
    const void *bias; mpt_dtype bias_dtype; /* [N] float, or NULL */
    const char *tag;
} mpt_gemm_i8_args;

typedef struct mpt_conv_i8_args {
    /* y[n, k, p, q] = mpt_int_rescale(sum_{c,r,s} x[n, c, h, w] w[k, c, r, s], *x_scale * w_scales[k], bias[k]) rounded
     * once to y_dtype, h = p * stride - pad + r (zero outside the image), the int32 sum exact (C R S <=
     * MPT_GEMM_I8_MAX_K). The CPU backend needs mpt_conv_i8_workspace(&s) bytes of workspace; CUDA none. */
    mpt_conv_shape s;
    const int8_t *x;         /* [N, C, H, W] I8 */
    const int8_t *w;         /* [K, C, R, S] I8 */
    void *y; mpt_dtype y_dtype; /* [N, K, P, Q] F32, F16 or BF16 */
    const float *x_scale;    /* backend scalar */
    const float *w_scales;   /* backend [K], or [1] with w_per_tensor */
    int w_per_tensor;
    const void *bias; mpt_dtype bias_dtype; /* [K] float, or NULL */
    const char *tag;
} mpt_conv_i8_args;

/* Workspace of the CPU's integer convolution: one image's columns, P Q x C R S codes. */
static inline size_t mpt_conv_i8_workspace(const mpt_conv_shape *s) {
    return (size_t)s->P * (size_t)s->Q * (size_t)s->C * (size_t)s->R * (size_t)s->S;
}

/* ---- Optimizer, loss scaler (the fused FP32 update pass) ------------------------------------------ */

typedef enum mpt_optim_kind { MPT_OPTIM_SGD = 0, MPT_OPTIM_ADAM, MPT_OPTIM_ADAMW } mpt_optim_kind;

/* A learning-rate schedule (formulas, PyTorch counterparts and checks: engine/optim/schedule.h). Defined here
 * because the backends evaluate it on their own iteration counter (lr_update below), so the learning rate of a
 * step never has to come from the host (a captured CUDA Graph replays without host values). */
typedef enum mpt_lr_kind { MPT_LR_CONSTANT = 0, MPT_LR_STEP, MPT_LR_COSINE } mpt_lr_kind;

typedef struct mpt_lr_schedule {
    mpt_lr_kind kind;
    float base_lr;
    float min_lr;          /* cosine: the final LR */
    int64_t warmup_steps;  /* cosine: linear warmup iterations (0 = none) */
    int64_t total_steps;   /* cosine: iterations over which to anneal */
    int64_t step_size;     /* step: iterations between decays */
    float gamma;           /* step: decay factor */
} mpt_lr_schedule;

typedef struct mpt_optim_hparams {
    mpt_optim_kind kind;
    float lr;            /* this step's learning rate (after the schedule), unless mpt_optim_args.lr is set */
    float momentum, dampening, weight_decay;
    int nesterov;
    float beta1, beta2, eps;
} mpt_optim_hparams;

typedef struct mpt_optim_args {
    mpt_optim_hparams h;     /* host values */
    int64_t n;               /* elements of this parameter */
    float *master;           /* [n] FP32 master weights, updated in place; NULL without FP32 masters
                                (--master-weights none): then the update reads and writes `working` */
    const float *grad;       /* [n] FP32 gradient, already unscaled */
    void *m;                 /* [n] state_dtype: SGD momentum buffer / Adam exp_avg (NULL if unused) */
    void *v;                 /* [n] state_dtype: Adam exp_avg_sq (NULL if unused) */
    mpt_dtype state_dtype;   /* F32 (default), BF16 or F16: each state element is widened exactly, updated in
                                FP32 (the weight update uses these FP32 values) and rounded to nearest even on
                                store (--optimizer-state) */
    void *working;           /* [n] weights in working_dtype. With a master: rewritten from the updated master
                                (RNE). Without one: widened, updated in FP32 and rounded once into
                                working_dtype (RNE, or stochastically). NULL when the master is the working
                                weight (fp32/tf32 modes) */
    mpt_dtype working_dtype;
    int stochastic;          /* without a master and with a 16-bit working_dtype: round the updated weights
                                stochastically (engine/numerics.h mpt_f32_to_bf16_sr / mpt_f32_to_f16_sr) with
                                the bits mpt_sr_bits(sr_seed, sr_iteration, sr_offset + i) for element i */
    uint64_t sr_seed;        /* host: the rounding stream's seed (Philox key) */
    uint64_t sr_iteration;   /* host: the training iteration (Philox counter, high words), unless `iteration` */
    const float *lr;         /* backend scalar: this step's learning rate (the trainer points it at
                                mpt_scaler_state.lr, written by lr_update); NULL: h.lr */
    const int64_t *iteration;/* backend scalar: the training iteration for stochastic rounding (the trainer points
                                it at mpt_scaler_state.iteration); NULL: sr_iteration */
    uint64_t sr_offset;      /* host: number of this parameter's element 0 across all parameters */
    const float *found_inf;  /* backend scalar: nonzero -> this step is skipped, nothing is written. NULL: never
                                skip (--nonfinite apply: non-finite gradients reach the weights) */
    const float *grad_mul;   /* backend scalar multiplying the gradient (clip coefficient), or NULL */
    const int32_t *step;     /* backend scalar: 1-based count of steps taken (for Adam's bias correction,
                                and SGD's first-step momentum init), already incremented for this step */
    float *update_out;       /* [n] FP32 or NULL (ordinary steps). When set, element i receives the update
                                delta the optimizer adds to weight i this step, in FP32 before any rounding
                                into the storage dtype: SGD -lr*d, Adam -step_size*m/denom, AdamW the same
                                plus the exact decoupled-decay change (engine/numerics.h, mpt_elem_sgd /
                                mpt_elem_adam); 0 on a skipped step (found_inf). Writing it changes nothing
                                else: weights and state are bit-identical with and without. Read by the
                                lost-update meter (engine/telemetry). */
} mpt_optim_args;

/* One parameter in the multi-tensor update pass (one launch over all parameters, the pattern of PyTorch's
 * multi_tensor_apply / apex's amp_C): an entry of a table in backend memory, built once after the arenas are
 * allocated (the pointers do not move) and read by every step. Field meanings as in mpt_optim_args. */
typedef struct mpt_param_slot {
    float *master;          /* [n] FP32 master, or NULL (the update reads and writes `working`) */
    float *grad;            /* [n] FP32 gradient: unscaled in place by unscale_check_multi */
    void *m, *v;            /* [n] optimizer state in mpt_optim_multi_args.state_dtype, or NULL if unused */
    void *working;          /* [n] working weights (working_dtype), or NULL (the master is the working weight) */
    mpt_dtype working_dtype;
    int32_t pad_;           /* keeps n 8-byte aligned with the same layout in C and CUDA C++ (always 0) */
    int64_t n;              /* elements (0 allowed: the entry is skipped) */
    uint64_t sr_offset;     /* number of this parameter's element 0 across all parameters (stochastic rounding) */
} mpt_param_slot;

/* The multi-tensor optimizer step: the per-tensor mpt_optim_args applied to every entry of a slot table, with the
 * same per-element math and therefore the same bits as `count` calls of optim_step (the CPU backend makes exactly
 * those calls). No update_out here: a step that records update deltas uses optim_step per tensor. */
typedef struct mpt_optim_multi_args {
    mpt_optim_hparams h;           /* host values, as in mpt_optim_args */
    const mpt_param_slot *slots;   /* [count] backend memory (the table) */
    int count;                     /* entries */
    int64_t numel;                 /* host: sum of slots[i].n (sizes the launch without reading the table) */
    mpt_dtype state_dtype;         /* as in mpt_optim_args */
    int stochastic;
    uint64_t sr_seed, sr_iteration;
    const float *found_inf;        /* backend scalar, or NULL (never skip) */
    const float *grad_mul;         /* backend scalar, or NULL */
    const int32_t *step;           /* backend scalar, 1-based, already incremented */
    const float *lr;               /* backend scalar or NULL, as mpt_optim_args.lr */
    const int64_t *iteration;      /* backend scalar or NULL, as mpt_optim_args.iteration */
} mpt_optim_multi_args;

typedef struct mpt_scaler_params {
    float growth_factor;     /* 2.0 */
    float backoff_factor;    /* 0.5 */
    int32_t growth_interval; /* 2000 */
    int32_t hysteresis;      /* h: the first h - 1 overflows since the scale last grew are skipped without backing off
                                (DeepSpeed delayed_shift; 1 = PyTorch behaviour) */
    float min_scale;         /* floor (1.0) */
    float max_scale;         /* ceiling (2^24) */
    int32_t apply_nonfinite; /* 0: a step with non-finite gradients is skipped (GradScaler); 1: it is applied
                                (--nonfinite apply, plain PyTorch without GradScaler): a taken step, also
                                counted in steps_nonfinite, never in steps_skipped; needs dynamic = 0 */
} mpt_scaler_params;

/* Loss-scaler and step-count state in backend memory: updated by the device without a host sync. */
typedef struct mpt_scaler_state {
    float scale;             /* current loss scale S */
    float inv_scale;         /* 1/S, what unscale multiplies by */
    float found_inf;         /* 0 or 1 for the current step */
    float grad_mul;          /* clip coefficient for the current step (1 if no clipping) */
    float sumsq;             /* sum of squared unscaled gradients for the current step (clipping) */
    int32_t growth_tracker;  /* clean steps since the last growth or backoff */
    int32_t hysteresis_left; /* overflows still skipped without backing off, plus 1 (1: the next one backs off) */
    int32_t steps_taken;     /* optimizer steps applied (the 1-based step of the update), those applied with
                                non-finite gradients included: steps_taken + steps_skipped == iteration */
    int32_t steps_skipped;   /* steps skipped because of found_inf (never with apply_nonfinite) */
    int32_t floor_hits;      /* backoffs that were clamped at min_scale */
    int32_t steps_nonfinite; /* of steps_taken, those applied with non-finite gradients (apply_nonfinite only) */
    float lr;                /* this step's learning rate: written by lr_update from `iteration` */
    int64_t iteration;       /* 0-based index of the current training iteration (skipped ones count): read by
                                lr_update, dropout and stochastic rounding; advanced by scaler_update at the end
                                of each step. Equal to the host's mpt_trainer.iteration between steps. */
} mpt_scaler_state;

/* The whole update pass of one ordinary step in one call (update_pass below): the calls unscale_check_multi,
 * step_begin, lr_update, optim_step_multi and scaler_update make, in that order, with found_inf, step, lr and
 * iteration read from and written to `st`. Only for a step without --nonfinite apply, clipping, update deltas or
 * FP8 scale updates between the optimizer and the scaler (the trainer checks; the others keep the calls). */
typedef struct mpt_update_pass_args {
    mpt_optim_multi_args optim;    /* found_inf = &st->found_inf, step = &st->steps_taken, lr = &st->lr,
                                      iteration = &st->iteration, grad_mul NULL */
    mpt_scaler_state *st;          /* backend memory */
    mpt_lr_schedule schedule;      /* host values, as lr_update's */
    mpt_scaler_params scaler;      /* host values, as scaler_update's */
    int dynamic;                   /* as scaler_update's */
} mpt_update_pass_args;

/* ---- The table -------------------------------------------------------------------------------------- */

struct mpt_backend {
    const char *name;          /* "cpu" or "cuda" */
    mpt_device device;
    void *ctx;                 /* backend-private (handles, stream, GEMM records) */

    /* Memory accounting, bytes per category: what is allocated now and the peak (host values). */
    size_t mem_current[MPT_MEM_COUNT];
    size_t mem_peak[MPT_MEM_COUNT];
    size_t mem_peak_total;
    /* Workspace: one buffer, sized by the largest reservation made while building graphs. */
    void *workspace;
    size_t workspace_bytes;

    /* ---- memory ---- */
    void *(*alloc)(mpt_backend *be, size_t bytes);             /* NULL on failure; 256-byte aligned */
    void (*free)(mpt_backend *be, void *p);
    void (*memset_zero)(mpt_backend *be, void *p, size_t bytes);
    void (*to_host)(mpt_backend *be, void *dst_host, const void *src, size_t bytes);       /* waits */
    /* Stream-ordered; the host buffer may be reused when the call returns (the CUDA backend copies from
     * pageable memory, which cudaMemcpyAsync stages before returning). */
    void (*from_host)(mpt_backend *be, void *dst, const void *src_host, size_t bytes);
    void (*copy)(mpt_backend *be, void *dst, const void *src, size_t bytes);  /* dst and src must not overlap */
    void (*synchronize)(mpt_backend *be);
    void (*destroy)(mpt_backend *be);

    /* ---- math ---- */
    /* Both backends accept exactly the calls mpt_gemm_args_check accepts (the contract above), except those their
     * gemm_supports refuses. */
    void (*gemm)(mpt_backend *be, const mpt_gemm_args *a);
    size_t (*gemm_workspace)(mpt_backend *be, const mpt_gemm_args *a);      /* bytes of scratch it needs */
    /* Orders every later operation after the GEMMs issued with `beside` since the last join (stream-ordered: no
     * host wait; the graph calls it at the end of each backward pass, before anything reads a gradient). NULL where
     * every call runs in order (CPU; CUDA unless MPT_CUDA_WGRAD_STREAM=1, which runs beside GEMMs on a second
     * stream forked from and joined to the backend's stream by events: graph edges in a recording). to_host,
     * synchronize and capture_end join first. */
    void (*join)(mpt_backend *be);
    /* What this backend's hardware or library cannot run of what the contract allows: 0 with why (host, len bytes)
     * for such a call (CUDA: E5M2 x E5M2, which cuBLASLt has no FP8 configuration for; FP8 scale pointers that are
     * not 16-byte aligned, which cuBLASLt 13.1 refuses), 1 otherwise. `running`: as for mpt_gemm_args_check. NULL:
     * every call the contract allows (the CPU's exact emulation). */
    int (*gemm_supports)(mpt_backend *be, const mpt_gemm_args *a, int running, char *why, size_t len);
    /* Nonzero when this backend's GEMM of math m converts its operands into FP32 copies, so that a caller that
     * keeps copies across calls (mpt_gemm_args.a_copy) saves a conversion per reuse; may be NULL (none does). */
    int (*gemm_copies)(mpt_backend *be, mpt_math m);
    void (*conv2d_forward)(mpt_backend *be, const mpt_conv_args *a);        /* y = conv(x, w) + bias */
    void (*conv2d_backward_data)(mpt_backend *be, const mpt_conv_args *a);  /* dx += conv^T(dy, w) */
    void (*conv2d_backward_filter)(mpt_backend *be, const mpt_conv_args *a);/* dw += ..., db += sum dy */
    size_t (*conv2d_workspace)(mpt_backend *be, const mpt_conv_args *a);    /* max over the three passes */

    /* dst[i] = round_to(dst_dtype, src[i]) for float dtypes; U8 src is widened exactly. n elements. */
    void (*cast)(mpt_backend *be, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype, int64_t n);
    /* y = max(x, 0); n elements of dtype. */
    void (*relu_forward)(mpt_backend *be, void *y, const void *x, mpt_dtype dtype, int64_t n);
    /* dx += dy * [y > 0] (accumulate), or dx = dy * [y > 0] (accumulate = 0), from the saved output y. */
    void (*relu_backward)(mpt_backend *be, void *dx, const void *dy, const void *y, mpt_dtype dtype, int64_t n,
                          int accumulate);
    void (*maxpool_forward)(mpt_backend *be, const mpt_pool_args *a);
    void (*maxpool_backward)(mpt_backend *be, const mpt_pool_args *a);
    /* Average pooling (mpt_avgpool_args: window sums in FP32 in window order, divided by the window's size, one
     * rounding; PyTorch's AvgPool2d without padding, AdaptiveAvgPool2d(1) for the global window). */
    void (*avgpool_forward)(mpt_backend *be, const mpt_avgpool_args *a);
    void (*avgpool_backward)(mpt_backend *be, const mpt_avgpool_args *a);
    /* y = act(x) for the activations of engine/numerics.h (mpt_act; alpha: the leaky ReLU's slope), computed in FP32
     * and rounded once; n elements of dtype. */
    void (*act_forward)(mpt_backend *be, mpt_act kind, void *y, const void *x, mpt_dtype dtype, int64_t n,
                        float alpha);
    /* dx += act'(x) dy (accumulate) or dx = that (0), from the saved input x and output y (mpt_elem_act_grad). */
    void (*act_backward)(mpt_backend *be, mpt_act kind, void *dx, const void *dy, const void *x, const void *y,
                         mpt_dtype dtype, int64_t n, float alpha, int accumulate);
    /* Batch normalisation over [N, C, S] per channel (mpt_norm_args): training: mean and biased variance of the valid
     * rows' elements of each channel (two passes, FP32), saved mean and rstd, the running update, y = x^ gamma + beta;
     * evaluation: the same y from the running statistics. Backward (training only): with n the valid elements of a
     * channel, dgamma (+)= sum dy x^, dbeta (+)= sum dy, dx (+)= gamma rstd (dy - sum dy / n - x^ sum(dy x^) / n) on
     * valid rows and 0 on padding rows. torch.nn.BatchNorm1d / BatchNorm2d(eps, momentum). */
    void (*batchnorm_forward)(mpt_backend *be, const mpt_norm_args *a);
    void (*batchnorm_backward)(mpt_backend *be, const mpt_norm_args *a);
    /* Layer normalisation of each row of [N, S] (mpt_norm_args): mean and biased variance of the row (FP32), saved,
     * y = x^ gamma + beta per feature. Backward: g = dy gamma, dx (+)= rstd (g - mean g - x^ mean(g x^)); dgamma (+)=
     * sum over rows of dy x^, dbeta (+)= sum of dy. torch.nn.LayerNorm(x.shape[1:], eps). */
    void (*layernorm_forward)(mpt_backend *be, const mpt_norm_args *a);
    void (*layernorm_backward)(mpt_backend *be, const mpt_norm_args *a);
    /* Inverted dropout: u = Philox uniform (0,1] from (seed, offset + stride * *iteration) as cuRAND's
     * CURAND_RNG_PSEUDO_PHILOX4_32_10 generates it (host or device generator, same numbers);
     * mask[i] = u[i] > p; y[i] = mask[i] ? x[i] / (1 - p) : 0. Needs n floats of workspace (the CPU backend
     * draws u there with cuRAND's host generator; the CUDA backend computes each u inside its kernel with
     * engine/numerics.h's mpt_philox_uniform, which reproduces that generator's stream). iteration: backend
     * scalar (the trainer's mpt_scaler_state.iteration, read when the operation runs), or NULL for 0; so a
     * replayed step draws the numbers of its own iteration. */
    void (*dropout_forward)(mpt_backend *be, void *y, const void *x, uint8_t *mask, mpt_dtype dtype,
                            int64_t n, float p, uint64_t seed, uint64_t offset, const int64_t *iteration,
                            uint64_t stride);
    /* dx += mask ? dy / (1 - p) : 0 (accumulate), or dx = that (accumulate = 0). */
    void (*dropout_backward)(mpt_backend *be, void *dx, const void *dy, const uint8_t *mask, mpt_dtype dtype,
                             int64_t n, float p, int accumulate);
    /* Fused, numerically stable softmax + cross-entropy, always FP32 (logits widened exactly):
     * probs[N,C] = softmax(logits); *loss = mean over valid rows i of -log probs[i, labels[i]] (computed as
     * logsumexp - logit, FP32); *n_correct += count of valid rows with argmax == label (if n_correct != NULL).
     * A row with labels[i] < 0 is ignored (PyTorch's ignore_index): it adds nothing to the loss, the count or
     * the gradient, and the mean divides by the number of valid rows (0 valid rows: loss 0). This is how a
     * static-shape graph runs the last partial batch with exactly PyTorch's semantics.
     * Valid labels must be in [0, C) (checked where they enter: data loading). */
    void (*softmax_xent_forward)(mpt_backend *be, float *loss, float *probs, int32_t *n_correct,
                                 const void *logits, mpt_dtype logits_dtype, const int32_t *labels, int N, int C);
    /* dlogits += (*scale) * (probs - onehot(labels)) / N_valid for valid rows (0 for ignored rows), rounded to
     * dlogits_dtype; scale is the loss scale (backend scalar; the seed of the backward pass); N_valid = number
     * of rows with labels >= 0. accumulate = 0: dlogits = that (ignored rows become +0).
     * Call it after a softmax_xent_forward of the same labels on this backend, with no forward of other labels
     * in between: the CUDA backend under MPT_CUDA_FUSED_LOSS=1 takes N_valid from that forward instead of
     * recounting (the graph's backward and the telemetry probe, whose FP32 twin gathers the same rows, do so). */
    void (*softmax_xent_backward)(mpt_backend *be, void *dlogits, mpt_dtype dlogits_dtype, const float *probs,
                                  const int32_t *labels, int N, int C, const float *scale, int accumulate);
    /* db[c] += sum_r dy[r, c] in FP32 (accumulate), or db[c] = that sum (accumulate = 0); dy [rows, cols] of
     * dtype. */
    void (*bias_grad)(mpt_backend *be, float *db, const void *dy, mpt_dtype dtype, int64_t rows, int64_t cols,
                      int accumulate);
    /* x[b, :] = (images[idx[b], :] / 255 - mean) * inv_std rounded to x_dtype; labels[b] = image_labels[idx[b]].
     * images U8 [n_total, D], image_labels U8 [n_total]; idx I32 [B] in backend memory. idx[b] < 0 marks a
     * padding row (last partial batch): x[b, :] = 0 and labels[b] = -1 (ignored by the loss). */
    void (*gather_batch)(mpt_backend *be, void *x, mpt_dtype x_dtype, int32_t *labels, const uint8_t *images,
                         const uint8_t *image_labels, const int32_t *idx, int B, int64_t D, float mean, float inv_std);

    /* ---- FP8 (engine/amp/fp8.h) ---- */
    /* The cast of an FP8 operand: a->meta->amax = max |x|; with current scaling the scale from it; q and/or qt in
     * a->fmt with the tensor's scale or, with a->mx, with a block scale per 32 elements (mpt_fp8_cast_args). A
     * non-finite amax sets *a->found_inf. NULL on a backend without FP8 (then fp8 modes are refused). */
    void (*fp8_cast)(mpt_backend *be, const mpt_fp8_cast_args *a);
    /* After a step, for every FP8 tensor i: history[i, iteration % len] = meta[i].amax (0 when it is not finite:
     * the step was skipped, and an inf would pin the scale for len steps); with delayed scaling, m = the maximum
     * of row i, and if m > 0: scale = mpt_fp8_scale_from_amax(m, fmax * margin_factor, pow2, scale), scale_inv =
     * 1/scale, amax_used = m (TransformerEngine's DelayedScaling: amax_compute_algo "max" over the window; the
     * scale computed after this step serves the next one). */
    void (*fp8_update)(mpt_backend *be, const mpt_fp8_update_args *a);
    /* Whether this backend's device runs the FP8 modes: per-tensor FP8 GEMMs (mx = 0) or MXFP8 ones (mx = 1), with
     * the accumulator `accum` and, for MPT_FP8_ACCUM_FAST, promotion into FP32 every `promote` elements of K (0:
     * never). 1 with msg (host, len bytes) "" or a note on how (CUDA: mxfp8 is emulated on the device without MX
     * Tensor Cores); 0 with msg saying why not (CUDA: per-tensor FP8 needs compute capability 8.9 or newer; cuBLASLt
     * has the fast accumulator with promotion every 128 or never, nothing else: measured on an H200,
     * tests/test_cuda_fp8.c). NULL: everything runs, no note (the CPU's exact emulation). */
    int (*fp8_support)(mpt_backend *be, int mx, mpt_fp8_accum accum, int promote, char *msg, size_t len);

    /* ---- quantization (engine/quant.h; the section "Quantization" above) ---- */
    /* Per row of a->x: amax = max |x| (NaN if any is), s = amax / qmax (mpt_int_scale_from_amax), and
     * y = mpt_quant_fake(x, s) rounded to y_dtype, q = the integer codes, scales[row] = s, for those set. */
    void (*fake_quant)(mpt_backend *be, const mpt_fake_quant_args *a);
    /* An activation's amax (*amax = max(*amax, max |x|)) and/or its INT8 codes at the scale *scale. */
    void (*quantize)(mpt_backend *be, const mpt_quantize_args *a);
    /* The exact integer GEMM and its rescale (mpt_gemm_i8_args). CUDA: cuBLASLt's INT8 GEMM (CUDA_R_8I operands,
     * CUBLAS_COMPUTE_32I, CUDA_R_32I output) where its IMMA rules allow the shape, else an own kernel; both exact. */
    void (*gemm_i8)(mpt_backend *be, const mpt_gemm_i8_args *a);
    /* The exact integer convolution forward and its rescale (mpt_conv_i8_args). */
    void (*conv2d_forward_i8)(mpt_backend *be, const mpt_conv_i8_args *a);

    /* ---- mixed-precision update (engine/amp, engine/optim) ---- */
    /* g *= st->inv_scale in place (FP32) and, in the same pass, st->found_inf = 1 if any g is inf/NaN
     * (before or after scaling). PyTorch: _amp_foreach_non_finite_check_and_unscale_. */
    void (*unscale_check)(mpt_backend *be, float *g, int64_t n, mpt_scaler_state *st);
    /* unscale_check over every slots[i].grad (slots: [count] backend memory; numel: host, the sum of the
     * slots' n): one launch on the GPU; the same bits and found_inf as count calls of unscale_check. */
    void (*unscale_check_multi)(mpt_backend *be, const mpt_param_slot *slots, int count, int64_t numel,
                                mpt_scaler_state *st);
    /* st->sumsq += sum g^2 (for clipping by global L2 norm). */
    void (*sum_squares)(mpt_backend *be, const float *g, int64_t n, mpt_scaler_state *st);
    /* st->grad_mul = min(1, max_norm / (sqrt(st->sumsq) + 1e-6)) (torch.nn.utils.clip_grad_norm_). */
    void (*clip_coef)(mpt_backend *be, mpt_scaler_state *st, float max_norm);
    /* st->lr = the schedule's learning rate at iteration st->iteration (engine/numerics.h mpt_lr_eval, the
     * function mpt_lr_at evaluates on the host: same bits on the CPU backend). Before the optimizer step. */
    void (*lr_update)(mpt_backend *be, mpt_scaler_state *st, const mpt_lr_schedule *schedule);
    /* Before the parameter updates: if !found_inf, steps_taken += 1. */
    void (*step_begin)(mpt_backend *be, mpt_scaler_state *st);
    /* One fused pass: unless *found_inf, update the weights (FP32 master, or the working weights directly) and
     * state with grad * (*grad_mul), and rewrite the working copy from the master (RNE); when a->update_out is
     * set, also write each element's update delta there (zeros on a skipped step). Formulas:
     * engine/optim/optim.h; storage and rounding: mpt_optim_args. */
    void (*optim_step)(mpt_backend *be, const mpt_optim_args *a);
    /* optim_step over every slot of a->slots (one launch on the GPU, each block one chunk of one tensor);
     * bit-identical to optim_step per slot with the same arguments. */
    void (*optim_step_multi)(mpt_backend *be, const mpt_optim_multi_args *a);
    /* After the updates: dynamic loss-scale update (PyTorch _amp_update_scale_, plus hysteresis, floor and
     * ceiling; see engine/amp/scaler.h), steps_skipped accounting, and found_inf/sumsq reset for the next step.
     * dynamic = 0: the scale stays fixed (static or no scaling) but skipping still counts. Last: iteration += 1. */
    void (*scaler_update)(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic);
    /* unscale_check_multi, step_begin, lr_update, optim_step_multi and scaler_update of one step as one call
     * (mpt_update_pass_args), with the same bits in every buffer and in *st as those five calls. NULL: the trainer
     * makes the five calls. CUDA, MPT_CUDA_FUSED_UPDATE=1 at backend creation (until a GPU session has checked
     * it: tests/test_cuda.c test_update_pass_bit_identical): two kernels instead of five, a check kernel whose last
     * block to finish runs the step's scalar updates (found_inf known before any weight moves: the stream orders
     * the update kernel after it) and the update kernel (kernels/cuda/optim.cu). */
    void (*update_pass)(mpt_backend *be, const mpt_update_pass_args *a);

    /* ---- step capture (CUDA Graphs). NULL on a backend that runs each operation as it is called (CPU) ---- */
    /* Starts recording, instead of running, every operation enqueued from now on (CUDA: stream capture of the
     * backend's stream, cudaStreamCaptureModeThreadLocal). Until capture_end only stream-ordered operations may be
     * called: no to_host, synchronize, alloc or free, and no host value may change between replays unless the
     * operations read it from backend memory. MPT_ERR_DEVICE with the reason when capture cannot start (e.g.
     * MPT_CUDA_SYNC_DEBUG=1, which synchronises after every call). */
    mpt_status (*capture_begin)(mpt_backend *be);
    /* Ends the recording and instantiates it into *out (a handle owned by the caller: replay_free). The recorded
     * operations have not run. MPT_ERR_DEVICE naming the CUDA error when the recording was invalidated or cannot
     * be instantiated (then *out is NULL). */
    mpt_status (*capture_end)(mpt_backend *be, void **out);
    /* Runs the recorded operations once, in order, on the backend's stream (cudaGraphLaunch), with the kernel
     * arguments of the recording; the GEMM and convolution records count the calls as if made again. */
    void (*replay)(mpt_backend *be, void *graph);
    /* Frees a handle from capture_end (NULL: nothing). */
    void (*replay_free)(mpt_backend *be, void *graph);

    /* ---- device timing (CUDA events). NULL on a backend whose operations have finished when the call returns
     * (CPU): there the host clock around the calls is the work's time, and no device time exists. ----
     * A mark is a point in the backend's stream; the time between two marks is the device's time from the moment
     * it reached the first to the moment it finished everything enqueued before the second, idle gaps (waiting for
     * the host to enqueue more) included. Source: CUDA Runtime API, "Event Management" (cudaEventCreate,
     * cudaEventRecord, cudaEventElapsedTime: milliseconds, resolution about 0.5 microseconds). */
    /* Creates a mark (CUDA: cudaEventCreate, timing enabled) into *out, owned by the caller (event_destroy).
     * MPT_ERR_DEVICE naming the CUDA error (then *out is NULL). Not between capture_begin and capture_end. */
    mpt_status (*event_create)(mpt_backend *be, void **out);
    /* Enqueues the mark at the current end of the backend's stream (cudaEventRecord). Asynchronous: it never
     * waits for the device. Recording a mark again moves it (its previous time is lost). Never between
     * capture_begin and capture_end: a mark recorded into a CUDA Graph takes no time stamp, so that aborts
     * (programmer error). */
    void (*event_record)(mpt_backend *be, void *mark);
    /* *seconds = device time from mark `start` to mark `end` (seconds, >= 0 when `end` was recorded after
     * `start`), both recorded on this backend. Waits for `end` to complete (cudaEventSynchronize): called after
     * synchronize(), as the trainer does, it does not wait at all. MPT_ERR_DEVICE naming the CUDA error when a
     * mark was never recorded or the device failed (then *seconds is NAN). */
    mpt_status (*event_elapsed)(mpt_backend *be, void *start, void *end, double *seconds);
    /* Destroys a mark from event_create (NULL: nothing). */
    void (*event_destroy)(mpt_backend *be, void *mark);

    /* ---- telemetry reductions (engine/telemetry; issue 32) ----
     * Each reduces a tensor in backend memory into counters in host memory (the structs of range.h and lost.h, which
     * the caller initialises; the entry ADDS to them, as the host functions do), without copying the tensor: the CPU
     * backend calls the host functions themselves on its host pointers (the same bits), the CUDA backend runs the
     * per-element math of engine/telemetry/elem.h in kernels and copies a small result (a few hundred bytes; the
     * rounding histogram's 11 KiB). Each waits for its result (like to_host); never between capture_begin and
     * capture_end. Integer counts are exact in any order, so they equal the host functions' on both backends. The
     * FP64 sums (the histogram's mass per bin, err2 and ref2, the lost-update masses) are deterministic on the CUDA
     * backend too (a fixed grid for the GPU, per-thread sums in element order, a fixed reduction tree, then the
     * per-block partials summed by one block in block order: no floating-point atomics; the histogram's mass is
     * exact, an integer sum of 24-bit significands per binade, rounded once), and differ from the host's left-to-right
     * sums only in the order of the additions (and, for err2, in whether nvcc fuses a square into the addition):
     * |cuda - host| <= 2 gamma_n sum |terms|, gamma_n = n u / (1 - n u), u = 2^-53, n the elements of the call (Higham,
     * Accuracy and Stability of Numerical Algorithms, 2nd ed., sections 3.1 and 4.2: the bound of a sum, or a sum of
     * rounded products, in any order). For the non-negative sums (mass, err2, ref2, mass_lost) sum |terms| is the sum
     * itself: a relative bound (2.2e-10 for a million elements). err2 is +inf on both backends once a value
     * overflowed.
     * NULL on a backend without them: the collector copies the tensor to the host and calls the host functions (the
     * CUDA backend leaves them NULL unless MPT_CUDA_DEVICE_TELEMETRY=1 was set when it was created, until a GPU run
     * has verified them: docs/outputs.md). */
    /* mpt_range_count: *r += the range counts (zero, subnormal, at_max, nonfinite, n) of the n elements of x, dtype
     * F32, F16 or BF16 (aborts otherwise). */
    void (*telemetry_range)(mpt_backend *be, mpt_range *r, const void *x, mpt_dtype dtype, int64_t n);
    /* mpt_exp_hist_add(h, v, n) for n FP32 values v, into h (its target F16 or BF16 set by mpt_exp_hist_init), and,
     * for j < n_k (0..MPT_TELEMETRY_MAX_SHIFTS), mpt_round_err_add(&err[j], v, n, k[j], h->target): the relative L2
     * error of the rounding at shift k[j] (k and err host arrays of n_k; err may be NULL when n_k is 0). */
    void (*telemetry_rounding)(mpt_backend *be, mpt_exp_hist *h, mpt_round_err *err, const int *k, int n_k,
                               const float *v, int64_t n);
    /* mpt_lost_count: *r += the lost updates of n elements, w_old and w_new the update target before and after the
     * step (dtype F32, F16 or BF16), delta FP32 the optimizer's update. */
    void (*telemetry_lost)(mpt_backend *be, mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype,
                           const float *delta, int64_t n);
    /* mpt_lost_counterfactual: *r += what would have been lost had delta (FP32) been added to w_old (dtype F16 or
     * BF16) with round-to-nearest-even. */
    void (*telemetry_lost_counterfactual)(mpt_backend *be, mpt_lost *r, const void *w_old, mpt_dtype dtype,
                                          const float *delta, int64_t n);
};

/* Creates the CPU backend (always available; aborts only when out of memory). The caller owns it: free it with
 * mpt_backend_free after every graph, trainer and buffer made on it. */
MPT_API mpt_backend *mpt_backend_cpu_create(void);
/* The CPU backend's two kernel sets for GEMMs and convolutions (ARCHITECTURE decision 11; kernels/cpu/gemm.c):
 *  EMULATE (the default): Tensor Core numerics emulated exactly (operands rounded to TF32 / widened from FP16/BF16,
 *           exact products, FP32 accumulation, one rounding of the output): the oracle the GPU is tested against.
 *  NATIVE:  bf16 mode's GEMMs and convolutions run on the CPU's BF16 dot-product units (AVX512-BF16 / AMX, through
 *           oneDNN's bf16 primitives) with FP32 accumulation: round to nearest even, BF16 denormal inputs read as
 *           zero, denormal results flushed to zero, pairs of products summed in the instruction's own order. It
 *           agrees with EMULATE within the FP32 summation bound except where an operand is a BF16 subnormal
 *           (tests/test_gemm.c). fp16 and tf32 have no native units on the supported CPUs: they stay emulated.
 * Both run their FP32 products on oneDNN where the build has it (OpenBLAS otherwise). */
typedef enum mpt_cpu_kernels { MPT_CPU_KERNELS_EMULATE = 0, MPT_CPU_KERNELS_NATIVE } mpt_cpu_kernels;

/* "emulate" / "native". */
MPT_API const char *mpt_cpu_kernels_name(mpt_cpu_kernels k);

/* Chooses the kernel set of a CPU backend; call it before building any graph on be (the workspace a graph reserves
 * depends on it). MPT_ERR_ARG when be is not a CPU backend, already has graphs (a reserved workspace), or NATIVE is
 * asked for under a summation model (mpt_backend_cpu_set_accum); MPT_ERR_DEVICE, with the reason, when NATIVE is
 * asked for and unavailable (a build without oneDNN, or a CPU without BF16 units). The backend keeps its previous set
 * on error. */
MPT_API mpt_status mpt_backend_cpu_set_kernels(mpt_backend *be, mpt_cpu_kernels k);

/* The kernel set of a CPU backend (EMULATE for any other backend). */
MPT_API mpt_cpu_kernels mpt_backend_cpu_kernels(const mpt_backend *be);

/* The summation model of the emulate kernel set's TF32, FP16 and BF16 GEMMs and convolutions (--accum-model; issue 39):
 *  IEEE (the default): the exact products summed by FP32 additions, each rounded to nearest, in the FP32 engine's
 *        order (oneDNN or OpenBLAS): what the emulate kernel set computes without a model.
 *  V100, A100, ADA, H100, B200: summed as that GPU's Tensor Cores sum (kernels/cpu/tc_accum.h: Khattak & Mikaitis,
 *        "Accurate Models of NVIDIA Tensor Cores", arXiv 2512.07004): blocks of products aligned to their largest
 *        exponent, truncated, added exactly and rounded once (toward zero into FP32), chained over K in order; every
 *        element of a GEMM is that chain over its row and column, started from +0 (an FP32 accumulator). alpha, beta*C
 *        and the bias then apply in the FP32 epilogue and the result is rounded once to C's dtype, as with IEEE: a
 *        16-bit output is the modelled FP32 sum rounded once (RNE), not the Tensor Cores' FP16-output row. A
 *        convolution runs per-image GEMMs (kernels/cpu/conv.c), each modelled; its weight gradient adds the images'
 *        products in FP32 in image order, as with IEEE.
 * Untouched by a model: FP32 GEMMs (no Tensor Cores), FP8 and MXFP8 GEMMs (their accumulator is --fp8-accum:
 * mpt_gemm_args.fp8_accum), the native kernel set (the CPU's BF16 units sum for themselves: the two exclude each
 * other), and the CUDA backend (its Tensor Cores sum for themselves: only the CPU backend takes a model). The values
 * and their order are kernels/cpu/tc_accum.h's mpt_tc_model (kernels/cpu/backend.c checks it). */
typedef enum mpt_accum_model {
    MPT_ACCUM_MODEL_IEEE = 0,
    MPT_ACCUM_MODEL_V100, /* V100: FP16 only */
    MPT_ACCUM_MODEL_A100, /* A100, A30, A2 */
    MPT_ACCUM_MODEL_ADA,  /* L40S, RTX 1000 */
    MPT_ACCUM_MODEL_H100, /* H100, H200 */
    MPT_ACCUM_MODEL_B200, /* B200 */
    MPT_ACCUM_MODEL_COUNT
} mpt_accum_model;

/* "ieee", "v100", "a100", "ada", "h100", "b200" (NULL out of range). */
MPT_API const char *mpt_accum_model_name(mpt_accum_model m);
/* The GPUs whose published measurements model m reproduces ("H100, H200"; "none" for IEEE; NULL out of range). */
MPT_API const char *mpt_accum_model_gpus(mpt_accum_model m);
/* The model named s (exactly, lower case) into *out: 0, or -1 for an unknown name (*out untouched). */
MPT_API int mpt_accum_model_parse(const char *s, mpt_accum_model *out);
/* Whether a GEMM of math mode `math` can run under model m: 0 only for a Tensor Core model without a row for the
 * math's format (V100 with TF32 or BF16: Volta's Tensor Cores take FP16 only); 1 for IEEE, and for FP32, FP8 and
 * MXFP8 GEMMs, which a model leaves alone. */
MPT_API int mpt_accum_model_covers(mpt_accum_model m, mpt_math math);

/* Chooses the summation model of a CPU backend's emulated GEMMs; call it before building any graph on be (a model's
 * GEMMs reserve other scratch). MPT_ERR_ARG, the backend unchanged, when be is not a CPU backend (the GPU's Tensor
 * Cores sum for themselves), when m is not IEEE and the kernel set is NATIVE (and mpt_backend_cpu_set_kernels refuses
 * NATIVE under a model), when be already has graphs (a reserved workspace), or for m out of range. A GEMM whose math
 * the model does not cover (mpt_accum_model_covers) aborts at graph build, naming it: check before building. */
MPT_API mpt_status mpt_backend_cpu_set_accum(mpt_backend *be, mpt_accum_model m);

/* The summation model of a CPU backend (IEEE for any other backend). */
MPT_API mpt_accum_model mpt_backend_cpu_accum(const mpt_backend *be);

/* How a GEMM (conv = 0) or convolution (conv = 1) of math mode m runs on be, one word for tables: on the CPU
 * "<kernel set>:<engine>" ("emulate:onednn", "native:onednn", "emulate:openblas"), or "emulate:<model>" for the
 * TF32, FP16 and BF16 GEMMs summed by a Tensor Core model ("emulate:h100": mpt_backend_cpu_set_accum);
 * "cublaslt" / "cudnn" on the CUDA backend. Static string. */
MPT_API const char *mpt_backend_kernels_of(const mpt_backend *be, int conv, mpt_math m);

/* Whether NATIVE can run here (oneDNN in the build and a CPU with BF16 dot-product units); if not, why (host buf,
 * may be NULL). */
MPT_API int mpt_cpu_native_available(char *why, size_t len);

/* Threads of the CPU backend's GEMMs from now on: OpenBLAS's and oneDNN's (OpenMP) are set to n; n <= 0 keeps
 * OpenBLAS's (OPENBLAS_NUM_THREADS, else all cores) and gives oneDNN the same count. Set it before building graphs
 * (oneDNN primitives are made for a thread count). Returns the thread count.
 * A process that has run a parallel GEMM must not fork a child that trains (libgomp does not survive fork). */
MPT_API int mpt_cpu_set_threads(int n);

/* Whether the CPU backend's FP32 GEMMs run on OpenBLAS (a build without oneDNN, or MPT_CPU_ENGINE=openblas in the
 * environment): what a program that guards against OpenBLAS's own failure modes needs to know (tools/guards.c). */
MPT_API int mpt_cpu_gemm_on_openblas(void);

/* One line describing the CPU GEMM engine: library and version, the instruction set it runs, and its threads
 * (e.g. "oneDNN 2.6.3 (avx512_core_bf16), 2 OpenMP threads; OpenBLAS 0.3.21 ..."). Writes into buf (host). */
MPT_API void mpt_cpu_engine_describe(char *buf, size_t len);

/* Creates the CUDA backend on device 0, loading the CUDA backend module on first use (engine/cuda_loader.c
 * says where it is looked for); NULL, with mpt_last_error() saying why (no module, no driver, no GPU of
 * compute capability >= 8.0: MPT_ERR_DEVICE), when no GPU is usable. Owned by the caller like the CPU one. */
MPT_API mpt_backend *mpt_backend_cuda_create(void);
/* Whether a CUDA device is usable (driver, device present, compute capability >= 8.0); msg (host, may be
 * NULL) receives a one-line description of the device or of why not. */
MPT_API int mpt_cuda_available(char *msg, size_t len);
/* Destroys a backend (its workspace and context; buffers still allocated from it are not tracked: free them
 * first) and sets *be to NULL. NULL *be: nothing. */
MPT_API void mpt_backend_free(mpt_backend **be);

/* ---- the contract's argument checks, written once (engine/backend.c) ----------------------------------------------
 * Both backends call these on every call, so the CPU oracle and the GPU accept the same calls; what one of them cannot
 * run besides, its capability query says (gemm_supports, fp8_support). A violation is a programmer error: the checks
 * abort (MPT_ASSERTF) naming the call site's tag and the rule. */

/* mpt_gemm_args: sizes >= 0 and within the BLAS integer range; operands of the math mode's format (F32 for FP32 and
 * TF32, F16, BF16; E4M3/E5M2 in the TN layout for FP8 and MXFP8, with scales: per-tensor scale_inv for FP8, block
 * scales for MXFP8, no fast accumulator for MXFP8, fp8_promote a multiple of 32); a float C; an epilogue in range,
 * with a float bias for the bias epilogues; BGRAD: trans_a, alpha 1, F32 C, not on FP8 operands; DRELU_BGRAD: beta 0;
 * the ReLU mask 16-byte aligned. `running`: the call executes, so every pointer it will use must be set (bias,
 * bias_grad, aux, scales, A, B, C); 0 at graph build (gemm_workspace), where tensors may not be allocated yet. */
MPT_API void mpt_gemm_args_check(const mpt_gemm_args *a, int running);

/* mpt_pool_args of operation `op` ("maxpool_forward"): a float dtype, a non-empty input, kernel >= 1, stride >= 1,
 * 0 <= pad <= kernel / 2, and P, Q the output size PyTorch's MaxPool2d gives ((H + 2 pad - kernel) / stride + 1). */
MPT_API void mpt_pool_args_check(const mpt_pool_args *a, const char *op);

/* mpt_avgpool_args of operation `op`: a float dtype, a non-empty input, a window within it, strides >= 1 and P, Q as
 * PyTorch's AvgPool2d without padding gives them. */
MPT_API void mpt_avgpool_args_check(const mpt_avgpool_args *a, const char *op);

/* mpt_norm_args of operation `op` ("batchnorm_forward", ...): a float dtype, N, C, S >= 1, the pointers the operation
 * reads and writes (batchnorm: running statistics always, saved statistics in training; backward: dy, dgamma,
 * dbeta and the saved statistics), eps > 0 and finite, momentum in [0, 1]. */
MPT_API void mpt_norm_args_check(const mpt_norm_args *a, const char *op, int backward);

/* The quantization entries' arguments (section "Quantization"): sizes >= 0, formats and dtypes in range, K (or C R S) at
 * most MPT_GEMM_I8_MAX_K, the pointers a running call uses set. */
MPT_API void mpt_fake_quant_args_check(const mpt_fake_quant_args *a);
MPT_API void mpt_quantize_args_check(const mpt_quantize_args *a);
MPT_API void mpt_gemm_i8_args_check(const mpt_gemm_i8_args *a);
MPT_API void mpt_conv_i8_args_check(const mpt_conv_i8_args *a);

/* mpt_optim_args: n >= 0, gradient and step counter set, a master or working weight, the optimizer's state buffers
 * (SGD with momentum: m; Adam, AdamW: m and v), float dtypes for the working copy and the state. */
MPT_API void mpt_optim_args_check(const mpt_optim_args *a);

/* mpt_update_pass_args: found_inf, step, lr and iteration point into st, no grad_mul, no --nonfinite apply, a
 * known optimizer and float state (aborts naming the field otherwise). */
MPT_API void mpt_update_pass_args_check(const mpt_update_pass_args *u);
/* update_pass as the five calls it stands for (unscale_check_multi, step_begin, lr_update, optim_step_multi,
 * scaler_update): the CPU backend's update_pass (no launch cost to save), and the reference every fused
 * implementation must equal bit for bit. */
MPT_API void mpt_update_pass_as_calls(mpt_backend *be, const mpt_update_pass_args *u);

/* Accounting helpers for implementations: record an allocation of `bytes` in category `mem`. */
MPT_API void mpt_backend_account(mpt_backend *be, mpt_mem mem, int64_t delta_bytes);
/* Makes sure be->workspace holds at least `bytes` (called while building graphs, never in a step).
 * Returns MPT_ERR_NOMEM if the allocation fails. */
MPT_API mpt_status mpt_backend_reserve_workspace(mpt_backend *be, size_t bytes);

#endif
