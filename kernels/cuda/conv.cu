/*
 * kernels/cuda/conv.cu - 2-D convolution on the GPU through cuDNN's legacy convolution API.
 *
 *   y[n,k,p,q]  = sum_{c,r,s} x[n,c,p*sh-ph+r, q*sw-pw+s] w[k,c,r,s] (+ bias[k])      forward
 *   dx[n,c,h,w] += sum_{k,r,s} dy[n,k,p,q] w[k,c,r,s] over (p,q) that read (h,w)     backward data
 *   dw[k,c,r,s] += sum_{n,p,q} dy[n,k,p,q] x[n,c,p*sh-ph+r, q*sw-pw+s]               backward filter (FP32)
 *   db[k]       += sum_{n,p,q} dy[n,k,p,q]                                          (FP32, own kernel)
 * NCHW tensors, KCRS filters, cross-correlation (CUDNN_CROSS_CORRELATION), as in PyTorch (engine/backend.h).
 *
 * Numerics (cuDNN 9 docs, "Supported configurations" of cudnnConvolutionForward/BackwardData/BackwardFilter):
 * the convolution descriptor's compute type is always CUDNN_DATA_FLOAT, so F16 data runs as
 * PSEUDO_HALF_CONFIG and BF16 data as PSEUDO_BFLOAT16_CONFIG (16-bit operands, FP32 accumulation). Math type:
 * fp32 mode runs every pass with CUDNN_FMA_MATH (no TF32: the descriptor is set to FMA whatever the heuristic
 * suggests, and an algorithm that cannot run so is skipped); tf32 mode runs every pass with
 * CUDNN_TENSOR_OP_MATH, preferring an algorithm the heuristic lists with CUDNN_TENSOR_OP_MATH. That math type
 * PERMITS Tensor Cores, it does not require them (cuDNN docs, cudnnMathType_t): where the heuristic lists no
 * Tensor Core algorithm for a shape, the pass computes in FP32 like fp32 mode. Measured on an H200 (cuDNN
 * 9.19, 2026-11-26): a 2x3x8x8 conv with 4 3x3 filters ran its tf32 forward in FP32. The record's "algo listed
 * as" column says which (the cuda tests require tf32 results to differ from fp32 ones only where it says
 * CUDNN_TENSOR_OP_MATH, and a Tensor Core algorithm for a shape with 16 channels). fp16/bf16 modes use the
 * heuristic's math type for the algorithm, preferring CUDNN_TENSOR_OP_MATH;
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION is never used (it would round FP32 data to FP16). Transform-based algorithms (FFT, FFT_TILING, WINOGRAD,
 * WINOGRAD_NONFUSED) are excluded: their transforms add rounding error beyond the contract's "FP32 products
 * and sums, differing only in summation order"; the GEMM-like and direct algorithms remain.
 *
 * Accumulation: backward data and backward filter use beta = 1. Forward with a bias first writes bias[k] into y
 * and then runs with beta = 1. For FP32 outputs the blend is FP32 arithmetic. For 16-bit outputs cuDNN does NOT
 * round once: measured on an H200 (cuDNN 9.19, backward data ALGO_1, F16, 2026-11-26), the result was rounded to
 * F16 first and the blend with the prior F16 value rounded again, dx = round16(round16(conv) + dx_old): the
 * element the cuda test reported (-2.61328125 where one rounding gives -2.615234375) is reproduced exactly by that
 * model from the test's inputs. So a 16-bit dx that accumulates, and a 16-bit y with a bias, can be one unit in
 * the last place from the CPU's single rounding (half an ulp each); engine/backend.h lists it among the known
 * differences and the cuda tests bound it.
 *
 * Backward filter in fp16/bf16 modes: the legacy API has no configuration with 16-bit x/dy and an FP32 dW
 * (decision 9 wants FP32 weight gradients), and running it in 16 bits would round (and, with a loss scale,
 * possibly overflow) dW before it reaches FP32. So x and dy are widened to FP32 copies in the workspace
 * (exactly) and the pass runs on FP32 data with CUDNN_TENSOR_OP_MATH, straight into the FP32 dW with beta = 1.
 * F16 and BF16 values have at most 11 significant bits, so their TF32 rounding is exact and each product is
 * exact in FP32: the arithmetic is that of a 16-bit-operand, FP32-accumulate kernel. The cost: the copies'
 * memory traffic and TF32 rather than FP16 Tensor Core throughput for this one pass. The record says
 * "cudnn on FP32 copies (exact)".
 *
 * Determinism: only algorithms the heuristic reports as CUDNN_DETERMINISTIC are used (backward-data ALGO_0 and
 * backward-filter ALGO_0/ALGO_3 add with atomics: their results change from run to run), unless a pass has no
 * other; then a warning is printed and the record's "determ." column says "NO".
 *
 * Plans: descriptors are created once per (shape, dtype, math), and each pass's algorithm is chosen with
 * cudnnGetConvolution*Algorithm_v7 on its first use (normally when the graph asks conv2d_workspace() at
 * build time); a pass without a usable algorithm aborts only when it runs (the first layer never runs
 * backward data). Plans live in a fixed table, so a training step creates nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define CONV_PLANS 64
#define CONV_RECORDS 192
#define CONV_PASS_WORKSPACE_LIMIT ((size_t)256 << 20) /* largest cuDNN workspace an algorithm may use */

typedef enum conv_pass {
    CONV_PASS_FORWARD = 0,
    CONV_PASS_BACKWARD_DATA,
    CONV_PASS_BACKWARD_FILTER,
    CONV_PASS_COUNT
} conv_pass;
static const char *const conv_pass_names[CONV_PASS_COUNT] = {"forward", "backward_data", "backward_filter"};

typedef struct conv_key {
    mpt_conv_shape s;
    int32_t dtype, math;
} conv_key;

typedef struct conv_plan {
    conv_key key;
    int used;
    cudnnDataType_t data_type;                 /* of x, w, y (and dx, dy) */
    cudnnTensorDescriptor_t x, y;              /* [N,C,H,W], [N,K,P,Q] in data_type */
    cudnnFilterDescriptor_t w;                 /* [K,C,R,S] in data_type */
    cudnnConvolutionDescriptor_t conv[CONV_PASS_COUNT]; /* one per pass: each carries its algorithm's math type */
    int wgrad_widened;                         /* backward filter on FP32 copies (fp16/bf16 modes) */
    cudnnTensorDescriptor_t x32, y32;          /* FP32 descriptors of the copies (widened only) */
    cudnnFilterDescriptor_t w32;               /* FP32 dW descriptor (widened only; else w is FP32 already) */
    size_t widen_bytes;                        /* x32 + dy32, each 256-aligned (widened only) */
    int chosen[CONV_PASS_COUNT];               /* 0: not chosen yet; 1: algo[] holds it; -1: none (why[]) */
    int algo[CONV_PASS_COUNT];
    cudnnMathType_t math_type[CONV_PASS_COUNT];  /* set on the pass's descriptor: what cuDNN may use */
    cudnnMathType_t listed_math[CONV_PASS_COUNT]; /* the heuristic's math type of the chosen algorithm: what it has
                                                     kernels for (TENSOR_OP: Tensor Cores; else FMA) */
    int deterministic[CONV_PASS_COUNT];        /* the heuristic's determinism of the chosen algorithm */
    int measured[CONV_PASS_COUNT];             /* 1: chosen from cudnnFind*Algorithm's measured ranking
                                                  (MPT_CUDA_CONV_FIND=1), 0: from the heuristic's */
    size_t ws[CONV_PASS_COUNT];                /* cuDNN workspace of each pass's algorithm */
    char why[CONV_PASS_COUNT][160];            /* why a pass has no algorithm (chosen == -1) */
} conv_plan;

typedef struct conv_record_key {
    conv_key key;
    int32_t pass;
} conv_record_key;

struct mpt_cuda_conv_cache {
    conv_plan plans[CONV_PLANS];
    int next_evict;
    mpt_cuda_conv_record records[CONV_RECORDS];
    conv_record_key record_keys[CONV_RECORDS];
    int n_records;
    int64_t unrecorded_calls;
};

/* ---- names -------------------------------------------------------------------------------------------- */

static const char *data_type_name(cudnnDataType_t t) {
    switch (t) {
    case CUDNN_DATA_FLOAT: return "CUDNN_DATA_FLOAT";
    case CUDNN_DATA_HALF: return "CUDNN_DATA_HALF";
    case CUDNN_DATA_BFLOAT16: return "CUDNN_DATA_BFLOAT16";
    default: return "CUDNN_DATA_?";
    }
}

static const char *math_type_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "CUDNN_DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH: return "CUDNN_TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "CUDNN_FMA_MATH";
    default: return "CUDNN_?_MATH";
    }
}

static const char *algo_name(conv_pass pass, int algo) {
    static const char *const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT",
                                      "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const bwd_data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const bwd_filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                             "FFT_TILING"};
    switch (pass) {
    case CONV_PASS_FORWARD:
        if (algo >= 0 && algo < (int)(sizeof fwd / sizeof *fwd)) return fwd[algo];
        break;
    case CONV_PASS_BACKWARD_DATA:
        if (algo >= 0 && algo < (int)(sizeof bwd_data / sizeof *bwd_data)) return bwd_data[algo];
        break;
    default:
        if (algo >= 0 && algo < (int)(sizeof bwd_filter / sizeof *bwd_filter)) return bwd_filter[algo];
        break;
    }
    return "?";
}

static cudnnDataType_t to_cudnn_type(mpt_dtype t) {
    switch (t) {
    case MPT_DTYPE_F16: return CUDNN_DATA_HALF;
    case MPT_DTYPE_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* ---- validation ----------------------------------------------------------------------------------------- */

static void validate(const mpt_conv_args *a) {
    const mpt_conv_shape *s = &a->s;
    const char *tag = a->tag ? a->tag : "(untagged)";
    mpt_cuda_require_float(a->dtype, "conv2d");
    MPT_ASSERTF(s->N > 0 && s->C > 0 && s->H > 0 && s->W > 0 && s->K > 0 && s->R > 0 && s->S > 0 && s->pad_h >= 0 &&
                    s->pad_w >= 0 && s->stride_h > 0 && s->stride_w > 0,
                "conv2d %s: bad shape", tag);
    MPT_ASSERTF(s->P == (s->H + 2 * s->pad_h - s->R) / s->stride_h + 1 &&
                    s->Q == (s->W + 2 * s->pad_w - s->S) / s->stride_w + 1 && s->P > 0 && s->Q > 0,
                "conv2d %s: output %dx%d does not match input %dx%d, kernel %dx%d, pad %d/%d, stride %d/%d", tag, s->P,
                s->Q, s->H, s->W, s->R, s->S, s->pad_h, s->pad_w, s->stride_h, s->stride_w);
    int ok = (a->math == MPT_MATH_FP32 || a->math == MPT_MATH_TF32) ? a->dtype == MPT_DTYPE_F32
             : a->math == MPT_MATH_F16                             ? a->dtype == MPT_DTYPE_F16
             : a->math == MPT_MATH_BF16                            ? a->dtype == MPT_DTYPE_BF16
                                                                   : 0;
    MPT_ASSERTF(ok, "conv2d %s: math %s does not go with %s data", tag, mpt_math_name(a->math),
                mpt_dtype_name(a->dtype));
}

static conv_key make_key(const mpt_conv_args *a) {
    conv_key k;
    memset(&k, 0, sizeof k);
    k.s = a->s;
    k.dtype = a->dtype;
    k.math = a->math;
    return k;
}

/* ---- algorithm choice ----------------------------------------------------------------------------------- */

/* The cuDNN workspace of `algo` for `pass` with the pass's descriptors as set now; CUDNN_STATUS_SUCCESS or the
 * reason cuDNN cannot run that combination. */
static cudnnStatus_t pass_workspace(mpt_cuda_ctx *ctx, const conv_plan *p, conv_pass pass, int algo, size_t *bytes) {
    switch (pass) {
    case CONV_PASS_FORWARD:
        return cudnnGetConvolutionForwardWorkspaceSize(ctx->dnn, p->x, p->w, p->conv[pass], p->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case CONV_PASS_BACKWARD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(ctx->dnn, p->w, p->y, p->conv[pass], p->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    default:
        if (p->wgrad_widened)
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->dnn, p->x32, p->y32, p->conv[pass], p->w32,
                                                                  (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->dnn, p->x, p->y, p->conv[pass], p->w,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
}

/* Whether an algorithm computes the convolution as plain products and sums (GEMM-like or direct), not through
 * an FFT or Winograd transform. */
static int plain_sums(conv_pass pass, int algo) {
    switch (pass) {
    case CONV_PASS_FORWARD:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
    case CONV_PASS_BACKWARD_DATA:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    default:
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    }
}

/* A candidate from the v7 heuristic, whatever the pass. */
typedef struct conv_candidate {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnMathType_t math_type;
    cudnnDeterminism_t determinism;
} conv_candidate;

/* The math type a candidate runs with in this plan's mode: fp32 CUDNN_FMA_MATH (no TF32), tf32
 * CUDNN_TENSOR_OP_MATH (TF32 Tensor Cores, whatever the heuristic suggests: CUDNN_DEFAULT_MATH would leave the
 * choice to cuDNN), fp16/bf16 the heuristic's math type. */
static cudnnMathType_t mode_math_type(const conv_plan *p, const conv_candidate *c) {
    if (p->key.math == MPT_MATH_FP32) return CUDNN_FMA_MATH;
    if (p->key.math == MPT_MATH_TF32) return CUDNN_TENSOR_OP_MATH;
    return c->math_type;
}

/* Whether candidate c can run in this plan (status, plain sums, no ALLOW_CONVERSION, the mode's math type,
 * workspace within the limit); sets the pass descriptor's math type to the mode's and *bytes to its
 * workspace. */
static int candidate_usable(mpt_cuda_ctx *ctx, conv_plan *p, conv_pass pass, const conv_candidate *c, size_t *bytes) {
    if (c->status != CUDNN_STATUS_SUCCESS || c->math_type == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return 0;
    if (!plain_sums(pass, c->algo)) return 0;
    if (p->key.math == MPT_MATH_FP32 && c->math_type == CUDNN_TENSOR_OP_MATH) return 0;
    MPT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv[pass], mode_math_type(p, c)));
    *bytes = 0;
    if (pass_workspace(ctx, p, pass, c->algo, bytes) != CUDNN_STATUS_SUCCESS) return 0;
    return *bytes <= CONV_PASS_WORKSPACE_LIMIT;
}

/* Picks the algorithm of one pass among the heuristic's candidates (best first): only usable ones
 * (candidate_usable); deterministic ones (determinism == CUDNN_DETERMINISTIC) first, so training is
 * reproducible bit for bit (backward-data ALGO_0 and backward-filter ALGO_0/ALGO_3 add with atomics in an
 * order that changes from run to run); a non-deterministic one only when nothing else runs, and the record
 * says so. tf32/fp16/bf16 modes prefer a candidate the heuristic lists with CUDNN_TENSOR_OP_MATH (one that
 * has Tensor Core kernels: the math type only permits them) within the same determinism. Sets
 * p->chosen[pass] to 1 with algo, math type, determinism and workspace, or to -1 with the reason in
 * p->why[pass] (nothing aborts here: a pass the run never needs may have no algorithm). */
static void pick_algo(mpt_cuda_ctx *ctx, conv_plan *p, conv_pass pass, const conv_candidate *cand, int count) {
    int chosen = -1;
    size_t ws_chosen = 0;
    for (int want_det = 1; want_det >= 0 && chosen < 0; want_det--) {
        int first = -1, first_tc = -1;
        size_t ws_first = 0, ws_tc = 0;
        for (int i = 0; i < count; i++) {
            if ((cand[i].determinism == CUDNN_DETERMINISTIC) != want_det) continue;
            size_t bytes = 0;
            if (!candidate_usable(ctx, p, pass, &cand[i], &bytes)) continue;
            if (first < 0) {
                first = i;
                ws_first = bytes;
            }
            if (first_tc < 0 && cand[i].math_type == CUDNN_TENSOR_OP_MATH) {
                first_tc = i;
                ws_tc = bytes;
            }
        }
        int use_tc = first_tc >= 0 && p->key.math != MPT_MATH_FP32;
        chosen = use_tc ? first_tc : first;
        ws_chosen = use_tc ? ws_tc : ws_first;
    }
    const mpt_conv_shape *s = &p->key.s;
    if (chosen < 0) {
        p->chosen[pass] = -1;
        snprintf(p->why[pass], sizeof p->why[pass], "none of the %d candidates of cudnnGetConvolution*Algorithm_v7 "
                 "runs with plain sums and the mode's math type", count);
        return;
    }
    p->chosen[pass] = 1;
    p->algo[pass] = cand[chosen].algo;
    p->math_type[pass] = mode_math_type(p, &cand[chosen]);
    p->listed_math[pass] = cand[chosen].math_type;
    p->deterministic[pass] = cand[chosen].determinism == CUDNN_DETERMINISTIC;
    p->ws[pass] = ws_chosen;
    MPT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv[pass], p->math_type[pass]));
    if (!p->deterministic[pass])
        fprintf(stderr,
                "mptrain: warning: cuDNN offers only non-deterministic %s algorithms for conv N=%d C=%d H=%d W=%d "
                "K=%d R=%d S=%d (%s data, math %s): runs with it are not bit-reproducible\n",
                conv_pass_names[pass], s->N, s->C, s->H, s->W, s->K, s->R, s->S,
                mpt_dtype_name((mpt_dtype)p->key.dtype), mpt_math_name((mpt_math)p->key.math));
}

/* Whether this choice ranks the candidates by measurement: MPT_CUDA_CONV_FIND=1 (off until a GPU session has
 * measured it), and not while a step is being recorded (cudnnFind* allocates, runs every algorithm and blocks the
 * host: none of which a stream capture allows; a plan is normally made at graph build time, before any recording).
 * cudnnFind*Algorithm (cudnn_cnn.h) times each algorithm on buffers it allocates and returns them fastest first,
 * with the same status, memory, math type and determinism fields as the heuristic; pick_algo then applies the same
 * rules (plain sums, the mode's math type, deterministic first, Tensor Core listed first in tf32/fp16/bf16), so the
 * choice is the fastest measured algorithm the rules allow, as PyTorch's torch.backends.cudnn.benchmark = True with
 * deterministic = True chooses. Two runs may measure a different winner (timing noise) and then sum in another
 * order: each run stays deterministic, and the record names the algorithm and "measured". */
static int conv_find(mpt_cuda_ctx *ctx) {
    const int find = ctx->conv_find && ctx->capture == NULL;
    if (find) mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_CONV_FIND);
    return find;
}

static void choose_forward(mpt_cuda_ctx *ctx, conv_plan *p) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    p->measured[CONV_PASS_FORWARD] = conv_find(ctx);
    if (p->measured[CONV_PASS_FORWARD])
        MPT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(ctx->dnn, p->x, p->w, p->conv[CONV_PASS_FORWARD], p->y,
                                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
    else
        MPT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx->dnn, p->x, p->w, p->conv[CONV_PASS_FORWARD], p->y,
                                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
    conv_candidate c[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    for (int i = 0; i < n; i++)
        c[i] = conv_candidate{(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].mathType, perf[i].determinism};
    pick_algo(ctx, p, CONV_PASS_FORWARD, c, n);
}

static void choose_backward_data(mpt_cuda_ctx *ctx, conv_plan *p) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    p->measured[CONV_PASS_BACKWARD_DATA] = conv_find(ctx);
    if (p->measured[CONV_PASS_BACKWARD_DATA])
        MPT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(ctx->dnn, p->w, p->y,
                                                                  p->conv[CONV_PASS_BACKWARD_DATA], p->x,
                                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
    else
        MPT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx->dnn, p->w, p->y,
                                                                    p->conv[CONV_PASS_BACKWARD_DATA], p->x,
                                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
    conv_candidate c[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    for (int i = 0; i < n; i++)
        c[i] = conv_candidate{(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].mathType, perf[i].determinism};
    pick_algo(ctx, p, CONV_PASS_BACKWARD_DATA, c, n);
}

static void choose_backward_filter(mpt_cuda_ctx *ctx, conv_plan *p) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    cudnnTensorDescriptor_t x = p->wgrad_widened ? p->x32 : p->x, y = p->wgrad_widened ? p->y32 : p->y;
    cudnnFilterDescriptor_t w = p->wgrad_widened ? p->w32 : p->w;
    p->measured[CONV_PASS_BACKWARD_FILTER] = conv_find(ctx);
    if (p->measured[CONV_PASS_BACKWARD_FILTER])
        MPT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(
            ctx->dnn, x, y, p->conv[CONV_PASS_BACKWARD_FILTER], w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
    else
        MPT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            ctx->dnn, x, y, p->conv[CONV_PASS_BACKWARD_FILTER], w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
    conv_candidate c[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    for (int i = 0; i < n; i++)
        c[i] = conv_candidate{(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].mathType, perf[i].determinism};
    pick_algo(ctx, p, CONV_PASS_BACKWARD_FILTER, c, n);
}

/* ---- plans ------------------------------------------------------------------------------------------------ */

static void plan_release(conv_plan *p) {
    if (p->x) MPT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->x));
    if (p->y) MPT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->y));
    if (p->w) MPT_CUDNN_CHECK(cudnnDestroyFilterDescriptor(p->w));
    if (p->x32) MPT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->x32));
    if (p->y32) MPT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(p->y32));
    if (p->w32) MPT_CUDNN_CHECK(cudnnDestroyFilterDescriptor(p->w32));
    for (int i = 0; i < CONV_PASS_COUNT; i++)
        if (p->conv[i]) MPT_CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(p->conv[i]));
    memset(p, 0, sizeof *p);
}

static void plan_build(mpt_cuda_ctx *ctx, conv_plan *p, const conv_key *k) {
    const mpt_conv_shape *s = &k->s;
    p->key = *k;
    p->data_type = to_cudnn_type((mpt_dtype)k->dtype);
    MPT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    MPT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    MPT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    MPT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, p->data_type, s->N, s->C, s->H, s->W));
    MPT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, p->data_type, s->N, s->K, s->P, s->Q));
    MPT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, p->data_type, CUDNN_TENSOR_NCHW, s->K, s->C, s->R, s->S));
    for (int i = 0; i < CONV_PASS_COUNT; i++) {
        MPT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv[i]));
        MPT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv[i], s->pad_h, s->pad_w, s->stride_h, s->stride_w, 1, 1,
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        MPT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv[i], k->math == MPT_MATH_FP32 ? CUDNN_FMA_MATH
                                                                                          : CUDNN_TENSOR_OP_MATH));
    }
    int n, c, h, w;
    MPT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv[CONV_PASS_FORWARD], p->x, p->w, &n, &c, &h, &w));
    MPT_ASSERTF(n == s->N && c == s->K && h == s->P && w == s->Q,
                "cuDNN computes conv output [%d,%d,%d,%d], the caller expects [%d,%d,%d,%d]", n, c, h, w, s->N, s->K,
                s->P, s->Q);
    p->wgrad_widened = k->dtype != MPT_DTYPE_F32;
    if (p->wgrad_widened) {
        MPT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x32));
        MPT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y32));
        MPT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w32));
        MPT_CUDNN_CHECK(
            cudnnSetTensor4dDescriptor(p->x32, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->C, s->H, s->W));
        MPT_CUDNN_CHECK(
            cudnnSetTensor4dDescriptor(p->y32, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->K, s->P, s->Q));
        MPT_CUDNN_CHECK(
            cudnnSetFilter4dDescriptor(p->w32, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->K, s->C, s->R, s->S));
        p->widen_bytes = mpt_cuda_align256((size_t)s->N * s->C * s->H * s->W * sizeof(float)) +
                         mpt_cuda_align256((size_t)s->N * s->K * s->P * s->Q * sizeof(float));
    }
    p->used = 1; /* each pass's algorithm is chosen on its first use (ensure_pass) */
}

/* Chooses pass `pass`'s algorithm if that has not been tried yet (the first layer never runs backward data,
 * evaluation never runs the backward passes: a pass that has no algorithm matters only when it runs). */
static void ensure_pass(mpt_cuda_ctx *ctx, conv_plan *p, conv_pass pass) {
    if (p->chosen[pass] != 0) return;
    if (pass == CONV_PASS_FORWARD) choose_forward(ctx, p);
    else if (pass == CONV_PASS_BACKWARD_DATA) choose_backward_data(ctx, p);
    else choose_backward_filter(ctx, p);
}

/* The plan's pass, ready to run: aborts (a configuration cuDNN cannot run here) if it has no algorithm. */
static void require_pass(mpt_cuda_ctx *ctx, conv_plan *p, conv_pass pass, const char *tag) {
    ensure_pass(ctx, p, pass);
    const mpt_conv_shape *s = &p->key.s;
    MPT_ASSERTF(p->chosen[pass] == 1,
                "conv2d %s: cuDNN offers no usable %s algorithm for N=%d C=%d H=%d W=%d K=%d R=%d S=%d pad %d/%d "
                "stride %d/%d, %s data, math %s: %s",
                tag ? tag : "(untagged)", conv_pass_names[pass], s->N, s->C, s->H, s->W, s->K, s->R, s->S, s->pad_h,
                s->pad_w, s->stride_h, s->stride_w, mpt_dtype_name((mpt_dtype)p->key.dtype),
                mpt_math_name((mpt_math)p->key.math), p->why[pass]);
}

static conv_plan *plan_get(mpt_cuda_ctx *ctx, const conv_key *k) {
    mpt_cuda_conv_cache *c = ctx->conv;
    conv_plan *slot = NULL;
    for (int i = 0; i < CONV_PLANS; i++) {
        conv_plan *p = &c->plans[i];
        if (!p->used) {
            if (!slot) slot = p;
            continue;
        }
        if (memcmp(&p->key, k, sizeof *k) == 0) return p;
    }
    if (!slot) {
        slot = &c->plans[c->next_evict];
        c->next_evict = (c->next_evict + 1) % CONV_PLANS;
        plan_release(slot);
    }
    plan_build(ctx, slot, k);
    return slot;
}

/* Workspace of one pass (the FP32 copies included for a widened backward filter); 0 for a pass without an
 * algorithm. */
static size_t pass_total_workspace(const conv_plan *p, conv_pass pass) {
    if (p->chosen[pass] != 1) return 0;
    if (pass == CONV_PASS_BACKWARD_FILTER && p->wgrad_widened) return p->widen_bytes + mpt_cuda_align256(p->ws[pass]);
    return p->ws[pass];
}

/* ---- records -------------------------------------------------------------------------------------------------- */

static void record_call(mpt_cuda_conv_cache *c, const char *tag, const conv_plan *p, conv_pass pass) {
    if (!tag) tag = "(untagged)";
    conv_record_key rk;
    memset(&rk, 0, sizeof rk);
    rk.key = p->key;
    rk.pass = pass;
    for (int i = 0; i < c->n_records; i++) {
        if (strncmp(c->records[i].tag, tag, MPT_CUDA_TAG_LEN - 1) == 0 &&
            memcmp(&c->record_keys[i], &rk, sizeof rk) == 0) {
            c->records[i].calls++;
            return;
        }
    }
    if (c->n_records == CONV_RECORDS) {
        c->unrecorded_calls++;
        return;
    }
    mpt_cuda_conv_record *r = &c->records[c->n_records];
    c->record_keys[c->n_records] = rk;
    c->n_records++;
    memset(r, 0, sizeof *r);
    snprintf(r->tag, sizeof r->tag, "%s", tag);
    r->pass = conv_pass_names[pass];
    r->s = p->key.s;
    r->math = mpt_math_name((mpt_math)p->key.math);
    int widened = pass == CONV_PASS_BACKWARD_FILTER && p->wgrad_widened;
    r->data_type = data_type_name(widened ? CUDNN_DATA_FLOAT : p->data_type);
    r->math_type = math_type_name(p->math_type[pass]);
    r->listed_math_type = math_type_name(p->listed_math[pass]);
    r->algo = p->algo[pass];
    r->algo_name = algo_name(pass, p->algo[pass]);
    r->deterministic = p->deterministic[pass];
    r->workspace_bytes = p->ws[pass];
    if (p->measured[pass])
        r->path = widened ? "cudnn on FP32 copies (exact), algorithm measured" : "cudnn, algorithm measured";
    else
        r->path = widened ? "cudnn on FP32 copies (exact)" : "cudnn";
    r->calls = 1;
}

int mpt_cuda_conv_counter_count(const mpt_cuda_conv_cache *c) { return c->n_records + 1; }

int64_t *mpt_cuda_conv_counter(mpt_cuda_conv_cache *c, int i) {
    MPT_ASSERTF(i >= 0 && i <= c->n_records, "conv call counter %d of %d", i, c->n_records + 1);
    return i < c->n_records ? &c->records[i].calls : &c->unrecorded_calls;
}

static mpt_cuda_conv_cache *cache_of(mpt_backend *be) {
    MPT_ASSERTF(be != NULL && be->device == MPT_DEVICE_CUDA, "convolution records need a CUDA backend");
    return mpt_cuda_ctx_of(be)->conv;
}

extern "C" int mpt_cuda_conv_record_count(mpt_backend *be) { return cache_of(be)->n_records; }

extern "C" int mpt_cuda_conv_record_get(mpt_backend *be, int i, mpt_cuda_conv_record *out) {
    mpt_cuda_conv_cache *c = cache_of(be);
    if (i < 0 || i >= c->n_records) return 0;
    *out = c->records[i];
    return 1;
}

extern "C" void mpt_cuda_print_conv_records(mpt_backend *be, FILE *f) {
    mpt_cuda_conv_cache *c = cache_of(be);
    int nondet = 0;
    fprintf(f, "convolution records (cuDNN, compute type CUDNN_DATA_FLOAT):\n");
    fprintf(f, "  %-16s %-15s %-28s %-4s %-19s %-22s %-22s %-22s %-7s %10s %8s  %s\n", "tag", "pass",
            "NxCxHxW,KxRxS", "math", "data", "math type", "algo", "algo listed as", "determ.", "workspace", "calls",
            "path");
    for (int i = 0; i < c->n_records; i++) {
        const mpt_cuda_conv_record *r = &c->records[i];
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%dx%dx%d,%dx%dx%d", r->s.N, r->s.C, r->s.H, r->s.W, r->s.K, r->s.R, r->s.S);
        fprintf(f, "  %-16s %-15s %-28s %-4s %-19s %-22s %-22s %-22s %-7s %10zu %8lld  %s\n", r->tag, r->pass, shape,
                r->math, r->data_type, r->math_type, r->algo_name, r->listed_math_type,
                r->deterministic ? "yes" : "NO", r->workspace_bytes, (long long)r->calls, r->path);
        if (!r->deterministic) nondet++;
    }
    int fma_tf32 = 0;
    for (int i = 0; i < c->n_records; i++)
        fma_tf32 += strcmp(c->records[i].math, "tf32") == 0 &&
                    strcmp(c->records[i].listed_math_type, "CUDNN_TENSOR_OP_MATH") != 0;
    if (fma_tf32)
        fprintf(f, "  (%d tf32 pass(es) ran an algorithm cuDNN lists without Tensor Core kernels for that shape: "
                   "CUDNN_TENSOR_OP_MATH only permits TF32, so those passes computed in FP32, like fp32 mode)\n",
                fma_tf32);
    if (nondet)
        fprintf(f, "  (%d pass(es) ran a non-deterministic algorithm: cuDNN offered no deterministic one for them, so "
                   "runs with them are not bit-reproducible)\n", nondet);
    if (c->unrecorded_calls)
        fprintf(f, "  (%lld calls of further call sites not recorded: the table holds %d)\n",
                (long long)c->unrecorded_calls, CONV_RECORDS);
}

/* ---- cache lifetime ------------------------------------------------------------------------------------------- */

mpt_cuda_conv_cache *mpt_cuda_conv_cache_create(void) {
    mpt_cuda_conv_cache *c = (mpt_cuda_conv_cache *)calloc(1, sizeof *c);
    MPT_ASSERT(c != NULL);
    return c;
}

void mpt_cuda_conv_cache_destroy(mpt_cuda_conv_cache *c) {
    if (!c) return;
    for (int i = 0; i < CONV_PLANS; i++)
        if (c->plans[i].used) plan_release(&c->plans[i]);
    free(c);
}

/* ---- public entries -------------------------------------------------------------------------------------------- */

size_t mpt_cuda_conv2d_workspace(mpt_backend *be, const mpt_conv_args *a) {
    validate(a);
    conv_key k = make_key(a);
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    conv_plan *p = plan_get(ctx, &k);
    size_t m = 0;
    for (int i = 0; i < CONV_PASS_COUNT; i++) {
        ensure_pass(ctx, p, (conv_pass)i);
        size_t w = pass_total_workspace(p, (conv_pass)i);
        if (w > m) m = w;
    }
    return m;
}

void mpt_cuda_conv2d_forward(mpt_backend *be, const mpt_conv_args *a) {
    validate(a);
    MPT_ASSERTF(a->x && a->w && a->y, "conv2d %s forward: NULL x, w or y", a->tag ? a->tag : "(untagged)");
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    conv_key k = make_key(a);
    conv_plan *p = plan_get(ctx, &k);
    require_pass(ctx, p, CONV_PASS_FORWARD, a->tag);
    mpt_cuda_require_workspace(be, p->ws[CONV_PASS_FORWARD], "conv2d forward");
    const float one = 1.0f, zero = 0.0f;
    if (a->bias)
        mpt_cuda_broadcast_channel_bias(ctx, a->y, a->bias, a->dtype, a->s.N, a->s.K, (int64_t)a->s.P * a->s.Q);
    MPT_CUDNN_CHECK(cudnnConvolutionForward(ctx->dnn, &one, p->x, a->x, p->w, a->w, p->conv[CONV_PASS_FORWARD],
                                            (cudnnConvolutionFwdAlgo_t)p->algo[CONV_PASS_FORWARD], be->workspace,
                                            p->ws[CONV_PASS_FORWARD], a->bias ? &one : &zero, p->y, a->y));
    record_call(ctx->conv, a->tag, p, CONV_PASS_FORWARD);
}

void mpt_cuda_conv2d_backward_data(mpt_backend *be, const mpt_conv_args *a) {
    validate(a);
    MPT_ASSERTF(a->dy && a->w && a->dx, "conv2d %s backward data: NULL dy, w or dx", a->tag ? a->tag : "(untagged)");
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    conv_key k = make_key(a);
    conv_plan *p = plan_get(ctx, &k);
    require_pass(ctx, p, CONV_PASS_BACKWARD_DATA, a->tag);
    mpt_cuda_require_workspace(be, p->ws[CONV_PASS_BACKWARD_DATA], "conv2d backward data");
    const float one = 1.0f, zero = 0.0f; /* beta 0: cuDNN does not read dx */
    MPT_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx->dnn, &one, p->w, a->w, p->y, a->dy,
                                                 p->conv[CONV_PASS_BACKWARD_DATA],
                                                 (cudnnConvolutionBwdDataAlgo_t)p->algo[CONV_PASS_BACKWARD_DATA],
                                                 be->workspace, p->ws[CONV_PASS_BACKWARD_DATA],
                                                 a->accumulate ? &one : &zero, p->x, a->dx));
    record_call(ctx->conv, a->tag, p, CONV_PASS_BACKWARD_DATA);
}

void mpt_cuda_conv2d_backward_filter(mpt_backend *be, const mpt_conv_args *a) {
    validate(a);
    MPT_ASSERTF(a->x && a->dy && a->dw, "conv2d %s backward filter: NULL x, dy or dw", a->tag ? a->tag : "(untagged)");
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    conv_key k = make_key(a);
    conv_plan *p = plan_get(ctx, &k);
    const conv_pass pass = CONV_PASS_BACKWARD_FILTER;
    require_pass(ctx, p, pass, a->tag);
    mpt_cuda_require_workspace(be, pass_total_workspace(p, pass), "conv2d backward filter");
    const float one = 1.0f, zero = 0.0f;
    const float *beta = a->accumulate ? &one : &zero; /* beta 0: cuDNN does not read dw */
    const mpt_conv_shape *s = &a->s;
    cudnnConvolutionBwdFilterAlgo_t algo = (cudnnConvolutionBwdFilterAlgo_t)p->algo[pass];
    if (p->wgrad_widened) {
        /* [x32 | dy32 | cuDNN workspace], each 256-aligned */
        int64_t nx = (int64_t)s->N * s->C * s->H * s->W, ny = (int64_t)s->N * s->K * s->P * s->Q;
        char *ws = (char *)be->workspace;
        float *x32 = (float *)ws;
        float *dy32 = (float *)(ws + mpt_cuda_align256((size_t)nx * sizeof(float)));
        void *cudnn_ws = ws + p->widen_bytes;
        mpt_cuda_cast_raw(ctx, x32, MPT_DTYPE_F32, a->x, a->dtype, nx);
        mpt_cuda_cast_raw(ctx, dy32, MPT_DTYPE_F32, a->dy, a->dtype, ny);
        MPT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx->dnn, &one, p->x32, x32, p->y32, dy32, p->conv[pass], algo,
                                                       cudnn_ws, p->ws[pass], beta, p->w32, a->dw));
    } else {
        MPT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx->dnn, &one, p->x, a->x, p->y, a->dy, p->conv[pass], algo,
                                                       be->workspace, p->ws[pass], beta, p->w, a->dw));
    }
    if (a->db)
        mpt_cuda_channel_sum(ctx, a->db, a->dy, a->dtype, s->N, s->K, (int64_t)s->P * s->Q, a->accumulate);
    record_call(ctx->conv, a->tag, p, pass);
}
