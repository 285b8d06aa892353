/*
 * kernels/cuda/gemm.cu - GEMM on the GPU through cuBLASLt: where each precision's GEMM numerics are chosen.
 *
 *   C[M,N] = epilogue(alpha * op(A)[M,K] op(B)[K,N] + beta * C[M,N])       (row-major, engine/backend.h)
 *
 * cuBLASLt is column-major. A row-major matrix is the column-major storage of its transpose, so the row-major
 * product is computed as the column-major product C^T[N,M] = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its
 * "B" is our A, with their transposes kept, and cuBLASLt's D has N rows (so the bias vector, one value per row
 * of D, is our bias[n]).
 *
 * Numerics per math mode (cuBLASLt docs, cublasLtMatmul "Datatypes supported"; scale type is always FP32):
 *   fp32  CUBLAS_COMPUTE_32F            A/B CUDA_R_32F   C/D CUDA_R_32F            (FP32 FMA, no TF32)
 *   tf32  CUBLAS_COMPUTE_32F_FAST_TF32  A/B CUDA_R_32F   C/D CUDA_R_32F            (operands rounded to TF32)
 *   fp16  CUBLAS_COMPUTE_32F            A/B CUDA_R_16F   C/D CUDA_R_16F or _32F    (FP32 accumulation)
 *   bf16  CUBLAS_COMPUTE_32F            A/B CUDA_R_16BF  C/D CUDA_R_16BF or _32F
 * C/D of CUDA_R_32F with 16-bit A/B is how weight gradients come out in FP32 (decision 9). The epilogues are
 * CUBLASLT_EPILOGUE_BIAS and CUBLASLT_EPILOGUE_RELU_BIAS; cuBLASLt requires the bias vector in D's type for
 * these configurations (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), and applies alpha, beta*C, bias and ReLU in the
 * FP32 compute type before D is rounded once. MPT_EPILOGUE_BGRAD is CUBLASLT_EPILOGUE_BGRADB: the weight-gradient
 * GEMM dW = dy^T x (our A = dy stored [K, M] is cuBLASLt's B) also writes the bias gradient, the reduction of
 * cuBLASLt's B over k, through CUBLASLT_MATMUL_DESC_BIAS_POINTER in D's type (FP32 here: cublasLt.h, "Bias
 * gradient vector elements are the same type as the output elements"); when the heuristic has no algorithm for
 * it, the two-step path below runs and the bias gradient comes from the bias_grad kernel.
 *
 * The relu fusions (engine/graph.h): MPT_EPILOGUE_RELU_AUX_BIAS is CUBLASLT_EPILOGUE_RELU_AUX_BIAS, which also
 * writes the ReLU bitmask through CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER with CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD
 * = mpt_relu_aux_ld(N) bits (cublasLt.h: "Must be divisible by 128 and be no less than the number of rows in the
 * output matrix"; cuBLASLt's D has N rows). MPT_EPILOGUE_DRELU_BGRAD is CUBLASLT_EPILOGUE_DRELU_BGRAD: the
 * data-gradient GEMM reads that mask through the same two attributes, zeroes what the mask drops, and writes the
 * bias gradient, the reduction of D over its M columns, through CUBLASLT_MATMUL_DESC_BIAS_POINTER. cublasLt.h says
 * bias-gradient elements have D's type; we ask for FP32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = CUDA_R_32F) and
 * take the two-step path when the heuristic declines (likely with a 16-bit D). The bitmask's byte order within
 * cuBLASLt's bit matrix is our assumption (engine/backend.h); test_gemm_relu_aux_layout checks it on a GPU.
 * Two-step path for these: our epilogue kernel, then the mask from the stored C (relu_aux_kernel), or the mask
 * applied before the rounding and the bias gradient summed by the bias_grad kernel over the stored C: the CPU
 * backend's rules. Differences of the direct path (engine/backend.h): cuBLASLt's mask most likely tests the FP32
 * value before rounding, and it sums the bias gradient in its own order, most likely over the unrounded values.
 * If a direct call is refused at run time although the heuristic offered it (cublasLtMatmul returns
 * CUBLAS_STATUS_NOT_SUPPORTED, _INVALID_VALUE or _ARCH_MISMATCH: nothing ran), whatever its epilogue (BIAS,
 * RELU_BIAS, BGRADB, RELU_AUX_BIAS, DRELU_BGRAD or none), the plan becomes two-step for this and every later call
 * of the configuration (said once on stderr, and in the GEMM record's path: "(direct refused)") instead of
 * aborting. gemm_workspace reserves room for both paths of every GEMM: the refused call's fallback, and a call
 * whose pointers turn out less aligned than the plan made at graph build time assumed (a new plan, built at run
 * time within the reserved workspace, may then find no direct algorithm). MPT_CUDA_GEMM_REFUSE_DIRECT=1 (read when
 * the backend is created) makes every direct call refused, for tests.
 *
 * A narrow bias gradient (issue 31 A, fusion 1): on an H200 the mlp's fc3 weight gradient with BGRADB (10 outputs)
 * ran a legacy kernel, magma_sgemmEx, for 14.1 us plus 3.1 us, where fc1/fc2's ran nvjet kernels in ~4.3 us
 * (bench/results/gpu-2026-11-26-b.md). With MPT_CUDA_SPLIT_NARROW_BGRAD=1 (read when the backend is created; off
 * until a GPU session has measured it), a BGRAD GEMM with fewer than NARROW_BGRAD outputs (M) runs as a plain
 * cuBLASLt GEMM into C followed by the bias_grad kernel over dy (the two-step path's bias gradient, without its FP32
 * D and epilogue kernel): expected ~4.3 + ~2-3 us. The record's path says "narrow BGRADB split".
 *
 * A call whose dtypes have no cuBLASLt configuration (16-bit C with FP32 operands, a bias dtype other than C's,
 * or a configuration the heuristic declines) runs as cuBLASLt with an FP32 D in the workspace and no epilogue,
 * followed by our epilogue kernel: C = round(relu(D + beta*C + bias)). Same arithmetic (FP32 epilogue, one
 * rounding of C); the record says which path ran.
 *
 * FP8 (math MPT_MATH_FP8; engine/amp/fp8.h): A and B are E4M3 or E5M2 (CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2, E5M2 x E5M2 is not
 * a cuBLASLt FP8 configuration), in our TN layout (A [M, K], B [N, K], both K-contiguous), which is cuBLASLt's "TN"
 * (its A, our B, transposed; its B, our A, not): the layout cublasLtMatmul requires for FP8 ("A must be transposed
 * and B non-transposed"). CUBLAS_COMPUTE_32F, scale type 32F; D (and C) BF16 or FP32, a bias epilogue with a bias of
 * D's type (BF16 in the forward GEMMs). The dequantisation factors are device pointers set per call:
 * CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = our B's scale_inv, B_SCALE_POINTER = our A's (cuBLASLt: D = alpha *
 * scale_A * scale_B * op(A) op(B) + beta * C). CUBLASLT_MATMUL_DESC_FAST_ACCUM (int8_t) is 1 for --fp8-accum fast,
 * 0 for fp32 (cuBLASLt's own promotion interval then, undocumented); it is part of the plan's key. AMAX_D_POINTER is
 * not used: each FP8 cast measures the amax of exactly what it casts in the same pass (with a ReLU after the GEMM,
 * D's amax would not be the next cast's). Sizes must satisfy mpt_fp8_gemm_ok (multiples of 16), the linear layer's
 * rule.
 * MXFP8 runs as its exact emulation on every GPU (this build does not use Blackwell's block-scaled cuBLASLt path,
 * CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0): both operands decoded to FP32 with their block scales into the start of
 * the workspace (fp8.cu, exact: powers of two), then the FP32 GEMM (CUBLAS_COMPUTE_32F, no TF32) on them; the
 * products are exact and the sums FP32, as on the CPU. The record's tag says "(mxfp8 emulated)".
 * Run on an H200 (cuBLASLt 13.1, 2026-11-26, bench/results/gpu-2026-11-26-b.md): the scale pointers must be 16-byte
 * aligned (cuBLASLt refuses the call otherwise, validate() asserts it); FAST_ACCUM = 1 was bit for bit the CPU's
 * narrow-accumulator model, FAST_ACCUM = 0 (our --fp8-accum fp32) that model promoted to FP32 every 128 elements of
 * K, not an FP32 sum (tests/test_cuda_fp8.c).
 *
 * Split-K algorithms are allowed only with FP32 partial sums (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, or any
 * scheme when D is FP32), so D is still rounded once.
 *
 * Plans: the algorithm is chosen once per distinct configuration (shape, transposes, dtypes, math, epilogue,
 * pointer alignment) with cublasLtMatmulAlgoGetHeuristic, normally when the graph asks gemm_workspace() at
 * build time, and kept in a fixed table with its descriptors, so a training step creates nothing. The
 * workspace reported is the chosen algorithm's own need (plus the FP32 D of the two-step path).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define GEMM_MAX_WORKSPACE ((size_t)32 << 20) /* cuBLASLt workspace offered to the heuristic (Hopper advice) */
#define GEMM_PLANS 128
#define GEMM_RECORDS 256
#define GEMM_HEURISTIC_RESULTS 8

/* Everything that selects an algorithm. Compared with memcmp: always zero-filled before it is set. */
typedef struct gemm_key {
    int32_t trans_a, trans_b;
    int64_t M, N, K;
    int32_t ab_dtype, c_dtype, bias_dtype; /* our A's dtype; bias_dtype -1 without a bias epilogue */
    int32_t math, epilogue;
    uint32_t align_a, align_b, align_c, align_bias; /* pointer alignment in bytes, capped at 256 */
    uint32_t align_aux;                             /* the ReLU mask's (256 without one) */
    int32_t b_dtype;                                /* our B's dtype (differs from A's only in FP8: E5M2 x E4M3) */
    int32_t fp8_fast;                               /* FP8: CUBLASLT_MATMUL_DESC_FAST_ACCUM */
    uint32_t pad_;                                  /* always 0 */
} gemm_key;

/* Bias gradients with fewer outputs than this run split when MPT_CUDA_SPLIT_NARROW_BGRAD=1 (header comment). */
#define NARROW_BGRAD 16

typedef struct gemm_plan {
    gemm_key key;
    int used;
    int direct;                         /* 1: one cuBLASLt call writes C; 0: FP32 D + epilogue kernel */
    cublasComputeType_t compute;
    cudaDataType_t ab_type, d_type, bias_type;  /* ab_type: our A's (cuBLASLt's B) */
    cudaDataType_t b_type;                      /* our B's (cuBLASLt's A): ab_type except in FP8 */
    cublasLtEpilogue_t epilogue;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;  /* cuBLASLt's A (our B), B (our A), C and D (same layout) */
    cublasLtMatmulAlgo_t algo;
    size_t algo_workspace;              /* cuBLASLt workspace of the chosen algorithm */
    size_t extra_bytes;                 /* FP32 D of the two-step path, 256-aligned (0 when direct) */
    int32_t algo_id, splitk;
    uint32_t tile_id, stages_id, reduction_scheme;
    int direct_refused;                 /* a direct call of this configuration was refused: now two-step */
    int fused_drelu;                    /* the two-step DRELU_BGRAD's epilogue runs as drelu_bgrad_kernel (the
                                           context's MPT_CUDA_FUSED_DRELU_BGRAD, copied for the record) */
    int split_bgrad;                    /* direct, a BGRAD GEMM run without its epilogue, then the bias_grad kernel
                                           (MPT_CUDA_SPLIT_NARROW_BGRAD=1 and fewer than NARROW_BGRAD outputs) */
} gemm_plan;

struct mpt_cuda_gemm_cache {
    gemm_plan plans[GEMM_PLANS];
    int next_evict;                     /* round-robin replacement once the table is full */
    mpt_cuda_gemm_record records[GEMM_RECORDS];
    gemm_key record_keys[GEMM_RECORDS];
    int n_records;
    int64_t unrecorded_calls;           /* calls of call sites beyond GEMM_RECORDS */
};

/* ---- names for records ----------------------------------------------------------------------------- */

static const char *cuda_type_name(cudaDataType_t t) {
    switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_8F_E4M3: return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2: return "CUDA_R_8F_E5M2";
    default: return "CUDA_R_?";
    }
}

static const char *compute_name(cublasComputeType_t c) {
    switch (c) {
    case CUBLAS_COMPUTE_32F: return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
    default: return "CUBLAS_COMPUTE_?";
    }
}

static const char *epilogue_name(cublasLtEpilogue_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "CUBLASLT_EPILOGUE_DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "CUBLASLT_EPILOGUE_BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case CUBLASLT_EPILOGUE_BGRADB: return "CUBLASLT_EPILOGUE_BGRADB";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "CUBLASLT_EPILOGUE_RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "CUBLASLT_EPILOGUE_DRELU_BGRAD";
    default: return "CUBLASLT_EPILOGUE_?";
    }
}

static cudaDataType_t to_cuda_type(mpt_dtype t) {
    switch (t) {
    case MPT_DTYPE_F16: return CUDA_R_16F;
    case MPT_DTYPE_BF16: return CUDA_R_16BF;
    case MPT_DTYPE_E4M3: return CUDA_R_8F_E4M3;
    case MPT_DTYPE_E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
    }
}

/* ---- the epilogue kernel of the two-step path -------------------------------------------------------- */

/* C[i] = round(c_dtype, epi(D[i] + beta*C[i] + bias[i % N])) over the M*N row-major elements; C is read only
 * when beta != 0 (the contract lets it hold garbage otherwise). D == NULL stands for a zero product (K = 0).
 * mask (DRELU_BGRAD), or NULL: the ReLU bitmask of engine/backend.h with leading dimension ld bits, applied with
 * mpt_elem_drelu before the rounding. */
static __global__ void gemm_epilogue_kernel(void *C, mpt_dtype c_dtype, const float *D, const void *bias,
                                            mpt_dtype bias_dtype, int relu, const uint8_t *mask, int64_t ld, float beta,
                                            int64_t M, int64_t N) {
    int64_t total = M * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = D ? D[i] : 0.0f;
        if (beta != 0.0f) v += beta * mpt_dev_load(C, c_dtype, i);
        if (bias) v += mpt_dev_load(bias, bias_dtype, i % N);
        if (relu) v = mpt_elem_relu(v);
        if (mask) {
            const int64_t bit = (i / N) * ld + i % N;
            v = mpt_elem_drelu(v, (mask[bit >> 3] >> (bit & 7)) & 1);
        }
        mpt_dev_store(C, c_dtype, i, v);
    }
}

static void launch_gemm_epilogue(const mpt_cuda_ctx *ctx, void *C, mpt_dtype c_dtype, const float *D, const void *bias,
                                 mpt_dtype bias_dtype, int relu, const void *mask, float beta, int64_t M, int64_t N) {
    gemm_epilogue_kernel<<<mpt_cuda_blocks(ctx, M * N), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        C, c_dtype, D, bias, bias_dtype, relu, (const uint8_t *)mask, mpt_relu_aux_ld(N), beta, M, N);
    MPT_CUDA_CHECK_LAUNCH("gemm_epilogue_kernel");
}

/* DRELU_BGRAD's two-step epilogue in one kernel (MPT_CUDA_FUSED_DRELU_BGRAD=1; until then gemm_epilogue_kernel and
 * then the bias_grad kernel over the stored C): C[i] = round(c_dtype, drelu(D[i] + beta*C[i], mask bit)) and
 * db[n] = the column sums of the stored C, D read once. The bits are those two kernels': each element through the
 * same steps as gemm_epilogue_kernel's (no bias, no relu), and the sums in bias_grad_kernel's order (block (32, 8)
 * per 32 columns, thread (x, y) adds the widened stored values of rows y, y + 8, ... in FP32, then the 8 partials
 * in order). */
#define DRELU_TILE_X 32
#define DRELU_TILE_Y 8
static __global__ void drelu_bgrad_kernel(void *C, mpt_dtype c_dtype, float *db, const float *D, const uint8_t *mask,
                                          int64_t ld, float beta, int64_t M, int64_t N) {
    __shared__ float part[DRELU_TILE_Y][DRELU_TILE_X + 1];
    const int64_t n = (int64_t)blockIdx.x * DRELU_TILE_X + threadIdx.x;
    float acc = 0.0f;
    if (n < N)
        for (int64_t m = threadIdx.y; m < M; m += DRELU_TILE_Y) {
            const int64_t i = m * N + n, bit = m * ld + n;
            float v = D ? D[i] : 0.0f;
            if (beta != 0.0f) v += beta * mpt_dev_load(C, c_dtype, i);
            v = mpt_elem_drelu(v, (mask[bit >> 3] >> (bit & 7)) & 1);
            mpt_dev_store(C, c_dtype, i, v);
            acc += mpt_dev_load(C, c_dtype, i); /* the stored value, as bias_grad_kernel reads it */
        }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && n < N) {
        float sum = part[0][threadIdx.x];
        for (int y = 1; y < DRELU_TILE_Y; y++) sum += part[y][threadIdx.x];
        db[n] = sum;
    }
}

static void launch_drelu_bgrad(const mpt_cuda_ctx *ctx, void *C, mpt_dtype c_dtype, float *db, const float *D,
                               const void *mask, float beta, int64_t M, int64_t N) {
    const dim3 block(DRELU_TILE_X, DRELU_TILE_Y);
    const int64_t grid = (N + DRELU_TILE_X - 1) / DRELU_TILE_X;
    MPT_ASSERTF(grid >= 1 && grid <= 0x7fffffff, "drelu_bgrad: %lld columns", (long long)N);
    drelu_bgrad_kernel<<<(unsigned)grid, block, 0, ctx->stream>>>(C, c_dtype, db, D, (const uint8_t *)mask,
                                                                    mpt_relu_aux_ld(N), beta, M, N);
    MPT_CUDA_CHECK_LAUNCH("drelu_bgrad_kernel");
}

/* The ReLU bitmask of the stored [M, N] C (engine/backend.h): one thread per 32-bit word, bit j of word w of
 * column m = [C[m, 32w + j] > 0] (mpt_elem_relu_mask), 0 past N. Little-endian words: bit i of the column is bit
 * i % 8 of byte i / 8, the layout the CPU backend writes. */
static __global__ void relu_aux_kernel(uint32_t *aux, const void *C, mpt_dtype c_dtype, int64_t M, int64_t N,
                                       int64_t words_per_col) {
    const int64_t total = M * words_per_col;
    for (int64_t w = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; w < total; w += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = w / words_per_col, n0 = (w % words_per_col) * 32;
        uint32_t bits = 0;
        for (int j = 0; j < 32 && n0 + j < N; j++)
            bits |= (uint32_t)mpt_elem_relu_mask(mpt_dev_load(C, c_dtype, m * N + n0 + j)) << j;
        aux[w] = bits;
    }
}

static void launch_relu_aux(const mpt_cuda_ctx *ctx, void *aux, const void *C, mpt_dtype c_dtype, int64_t M,
                            int64_t N) {
    const int64_t words = mpt_relu_aux_ld(N) / 32;
    relu_aux_kernel<<<mpt_cuda_blocks(ctx, M * words), MPT_CUDA_THREADS, 0, ctx->stream>>>((uint32_t *)aux, C, c_dtype,
                                                                                          M, N, words);
    MPT_CUDA_CHECK_LAUNCH("relu_aux_kernel");
}

/* ---- plans ------------------------------------------------------------------------------------------- */

static uint32_t pointer_alignment(const void *p) {
    uintptr_t u = (uintptr_t)p;
    if (u == 0) return 256; /* not known yet (graph build): arena tensors are 256-byte aligned */
    uint32_t a = 1;
    while (a < 256 && (u & (uintptr_t)(2 * a - 1)) == 0) a *= 2;
    return a;
}

/* What cuBLASLt cannot run of what the contract allows (engine/backend.h gemm_supports). */
int mpt_cuda_gemm_supports(mpt_backend *be, const mpt_gemm_args *a, int running, char *why, size_t len) {
    (void)be;
    const int fp8 = a->math == MPT_MATH_FP8 || a->math == MPT_MATH_MXFP8;
    if (fp8 && a->math == MPT_MATH_FP8 && a->a_dtype == MPT_DTYPE_E5M2 && a->b_dtype == MPT_DTYPE_E5M2) {
        snprintf(why, len, "E5M2 x E5M2 is not a cuBLASLt FP8 configuration");
        return 0;
    }
    /* cuBLASLt 13.1 refuses (NOT_SUPPORTED) an FP8 call whose scale pointers are not 16-byte aligned, with any
     * algorithm, also one its heuristic chose for these pointers (H200 probe, 2026-11-26) */
    if (running && a->math == MPT_MATH_FP8 &&
        ((uintptr_t)a->a_scale_inv % 16 != 0 || (uintptr_t)a->b_scale_inv % 16 != 0)) {
        snprintf(why, len, "FP8 scale_inv pointers %p and %p must be 16-byte aligned (cuBLASLt)",
                 (const void *)a->a_scale_inv, (const void *)a->b_scale_inv);
        return 0;
    }
    return 1;
}

/* Programmer-error checks: the contract (engine/backend.c), then what cuBLASLt cannot run. `running`: the call is
 * executing (pointers must be set); at graph build time (gemm_workspace) the tensors may not be allocated yet. */
static void validate(const mpt_gemm_args *a, int running) {
    mpt_gemm_args_check(a, running);
    char why[256];
    MPT_ASSERTF(mpt_cuda_gemm_supports(NULL, a, running, why, sizeof why), "gemm %s: %s", a->tag ? a->tag : "(untagged)", why);
}

static gemm_key make_key(const mpt_gemm_args *a) {
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.trans_a = a->trans_a ? 1 : 0;
    k.trans_b = a->trans_b ? 1 : 0;
    k.M = a->M;
    k.N = a->N;
    k.K = a->K;
    k.ab_dtype = a->a_dtype;
    k.b_dtype = a->b_dtype;
    /* --fp8-accum fast without promotion is FAST_ACCUM 1; fast with promotion every 128 is FAST_ACCUM 0, which the
     * H200 measurement found bit-identical to it (and which --fp8-accum fp32 gets too: cuBLASLt has no FP32-sum FP8
     * GEMM). Other intervals are refused before training (mpt_trainer_create). */
    k.fp8_fast = a->math == MPT_MATH_FP8 && a->fp8_accum == MPT_FP8_ACCUM_FAST && a->fp8_promote == 0;
    k.c_dtype = a->c_dtype;
    k.bias_dtype = mpt_epilogue_adds_bias(a->epilogue) ? (int32_t)a->bias_dtype : -1;
    k.math = a->math;
    k.epilogue = a->epilogue;
    k.align_a = pointer_alignment(a->A);
    k.align_b = pointer_alignment(a->B);
    k.align_c = pointer_alignment(a->C);
    k.align_bias = mpt_epilogue_adds_bias(a->epilogue) ? pointer_alignment(a->bias)
                   : a->epilogue == MPT_EPILOGUE_BGRAD || a->epilogue == MPT_EPILOGUE_DRELU_BGRAD
                       ? pointer_alignment(a->bias_grad)
                       : 256;
    k.align_aux = mpt_epilogue_uses_aux(a->epilogue) ? pointer_alignment(a->aux) : 256;
    return k;
}

/* Whether cuBLASLt has the configuration (COMPUTE_32F or _FAST_TF32, scale 32F) for these dtypes with the
 * caller's C as D and, for bias epilogues, the caller's bias as the bias vector (bias type = D type). */
static int direct_supported(const gemm_key *k) {
    int c_ok;
    if (k->math == MPT_MATH_FP32 || k->math == MPT_MATH_TF32) c_ok = k->c_dtype == MPT_DTYPE_F32;
    else if (k->math == MPT_MATH_FP8) c_ok = k->c_dtype == MPT_DTYPE_BF16 || k->c_dtype == MPT_DTYPE_F32;
    else c_ok = k->c_dtype == k->ab_dtype || k->c_dtype == MPT_DTYPE_F32;
    if (!c_ok) return 0;
    if (k->epilogue == MPT_EPILOGUE_BGRAD) return k->c_dtype == MPT_DTYPE_F32; /* bias gradient in D's type */
    if (k->epilogue == MPT_EPILOGUE_DRELU_BGRAD) return 1; /* FP32 bias gradient: the heuristic decides */
    return k->epilogue == MPT_EPILOGUE_NONE || k->bias_dtype == k->c_dtype;
}

static void plan_release(gemm_plan *p) {
    if (p->desc) MPT_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    if (p->la) MPT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    if (p->lb) MPT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    if (p->ld) MPT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
    memset(p, 0, sizeof *p);
}

/* Creates the descriptors of a plan for the direct (direct = 1) or the two-step path; split (direct BGRAD only):
 * no cuBLASLt epilogue, the bias gradient from the bias_grad kernel after the call. */
static void plan_describe(gemm_plan *p, const gemm_key *k, int direct, int split = 0) {
    p->key = *k;
    p->direct = direct;
    p->split_bgrad = direct && split;
    p->compute = k->math == MPT_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    p->ab_type = to_cuda_type((mpt_dtype)k->ab_dtype);
    p->b_type = to_cuda_type((mpt_dtype)k->b_dtype);
    p->d_type = direct ? to_cuda_type((mpt_dtype)k->c_dtype) : CUDA_R_32F;
    p->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (direct && k->epilogue == MPT_EPILOGUE_BIAS) p->epilogue = CUBLASLT_EPILOGUE_BIAS;
    if (direct && k->epilogue == MPT_EPILOGUE_RELU_BIAS) p->epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
    if (direct && k->epilogue == MPT_EPILOGUE_BGRAD && !p->split_bgrad) p->epilogue = CUBLASLT_EPILOGUE_BGRADB;
    if (direct && k->epilogue == MPT_EPILOGUE_RELU_AUX_BIAS) p->epilogue = CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    if (direct && k->epilogue == MPT_EPILOGUE_DRELU_BGRAD) p->epilogue = CUBLASLT_EPILOGUE_DRELU_BGRAD;
    /* the bias (gradient) vector: D's type, except the FP32 bias gradient of DRELU_BGRAD (engine/backend.h) */
    p->bias_type = k->epilogue == MPT_EPILOGUE_DRELU_BGRAD ? CUDA_R_32F : p->d_type;
    p->extra_bytes = direct ? 0 : mpt_cuda_align256((size_t)(k->M * k->N) * sizeof(float));

    MPT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, p->compute, CUDA_R_32F));
    /* cuBLASLt's A is our B, its B is our A (see the header comment). */
    cublasOperation_t op_a = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p->epilogue,
                                                    sizeof p->epilogue));
    if (p->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        int32_t bt = (int32_t)p->bias_type;
        MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (k->math == MPT_MATH_FP8) { /* int8_t (cublasLt.h) */
        const int8_t fast = (int8_t)k->fp8_fast;
        MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    }
    if (direct && mpt_epilogue_uses_aux((mpt_epilogue)k->epilogue)) { /* int64_t, in bits (cublasLt.h) */
        int64_t aux_ld = mpt_relu_aux_ld(k->N);
        MPT_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    /* Our B: stored [K,N] row-major = column-major N x K (ld N), or stored [N,K] = column-major K x N (ld K). */
    if (!k->trans_b)
        MPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, p->b_type, (uint64_t)k->N, (uint64_t)k->K, k->N));
    else MPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, p->b_type, (uint64_t)k->K, (uint64_t)k->N, k->K));
    /* Our A: stored [M,K] = column-major K x M (ld K), or stored [K,M] = column-major M x K (ld M). */
    if (!k->trans_a)
        MPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, p->ab_type, (uint64_t)k->K, (uint64_t)k->M, k->K));
    else MPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, p->ab_type, (uint64_t)k->M, (uint64_t)k->K, k->M));
    /* C and D: row-major [M,N] = column-major N x M (ld N). */
    MPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, p->d_type, (uint64_t)k->N, (uint64_t)k->M, k->N));
}

/* Asks the heuristic for an algorithm using at most ws_limit bytes of workspace. Returns 1 and fills
 * p->algo / p->algo_workspace, or 0 with the reason in *why (the heuristic's status, or
 * CUBLAS_STATUS_NOT_SUPPORTED when it returned no usable algorithm). */
static int plan_pick_algo(mpt_cuda_ctx *ctx, gemm_plan *p, size_t ws_limit, cublasStatus_t *why) {
    const gemm_key *k = &p->key;
    cublasLtMatmulPreference_t pref;
    MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = (uint64_t)ws_limit;
    uint32_t align_lt_a = k->align_b, align_lt_b = k->align_a, align_cd = k->align_c;
    if (!p->direct) align_cd = 256; /* D lives at the start of the workspace */
    MPT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_lt_a,
                                                          sizeof align_lt_a));
    MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_lt_b,
                                                          sizeof align_lt_b));
    MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd,
                                                          sizeof align_cd));
    MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd,
                                                          sizeof align_cd));
    /* Split-K partial sums must stay FP32: with a 16-bit D, the INPLACE and OUTPUT_TYPE schemes would add the
     * parts in D's type (extra roundings the contract does not allow). */
    uint32_t reductions = p->d_type == CUDA_R_32F ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK
                                                  : (uint32_t)CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                          sizeof reductions));
    if (p->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        /* The heuristic reads the bias pointer only for its alignment (cublasLt.h,
         * CUBLASLT_MATMUL_DESC_BIAS_POINTER): give it a value with the alignment the real pointer will have. */
        const void *bias_alignment = (const void *)(uintptr_t)k->align_bias;
        MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_alignment,
                                                        sizeof bias_alignment));
    }
    if (p->direct && mpt_epilogue_uses_aux((mpt_epilogue)k->epilogue)) {
        /* likewise the mask pointer (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER) */
        const void *aux_alignment = (const void *)(uintptr_t)k->align_aux;
        MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                        &aux_alignment, sizeof aux_alignment));
    }
    cublasLtMatmulHeuristicResult_t res[GEMM_HEURISTIC_RESULTS];
    memset(res, 0, sizeof res);
    int count = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref,
                                                      GEMM_HEURISTIC_RESULTS, res, &count);
    MPT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (s != CUBLAS_STATUS_SUCCESS) {
        *why = s;
        return 0;
    }
    for (int i = 0; i < count; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws_limit) continue;
        p->algo = res[i].algo;
        p->algo_workspace = res[i].workspaceSize;
        size_t w = 0;
        MPT_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_ID, &p->algo_id,
                                                              sizeof p->algo_id, &w));
        MPT_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &p->tile_id,
                                                              sizeof p->tile_id, &w));
        MPT_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &p->stages_id,
                                                              sizeof p->stages_id, &w));
        MPT_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &p->splitk,
                                                              sizeof p->splitk, &w));
        MPT_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                              &p->reduction_scheme, sizeof p->reduction_scheme, &w));
        return 1;
    }
    *why = CUBLAS_STATUS_NOT_SUPPORTED;
    return 0;
}

/* cuBLASLt workspace left for a plan of `extra` bytes when `total` bytes of workspace exist. */
static size_t lt_limit(size_t total, size_t extra) {
    size_t avail = total > extra ? total - extra : 0;
    return avail < GEMM_MAX_WORKSPACE ? avail : GEMM_MAX_WORKSPACE;
}

/* Fills plan p for key k: the direct path if cuBLASLt has it, else the two-step path, each within `total`
 * bytes of workspace (SIZE_MAX at graph build time: the graph reserves what the plan reports). Aborts if
 * neither path has an algorithm (a configuration cuBLASLt cannot run here). */
static void plan_build(mpt_cuda_ctx *ctx, gemm_plan *p, const gemm_key *k, size_t total, int allow_direct) {
    cublasStatus_t why_direct = CUBLAS_STATUS_NOT_SUPPORTED, why_two_step = CUBLAS_STATUS_NOT_SUPPORTED;
    if (allow_direct && direct_supported(k)) {
        plan_describe(p, k, 1, ctx->split_narrow_bgrad && k->epilogue == MPT_EPILOGUE_BGRAD && k->M < NARROW_BGRAD);
        if (plan_pick_algo(ctx, p, lt_limit(total, 0), &why_direct)) {
            p->used = 1;
            p->fused_drelu = ctx->fused_drelu_bgrad;
            return;
        }
        plan_release(p);
    }
    plan_describe(p, k, 0);
    MPT_ASSERTF(p->extra_bytes <= total,
                "cuda backend: GEMM M=%lld N=%lld needs %zu bytes of workspace for its FP32 result, %zu reserved "
                "(reserve gemm_workspace() at graph build time)",
                (long long)k->M, (long long)k->N, p->extra_bytes, total);
    if (plan_pick_algo(ctx, p, lt_limit(total, p->extra_bytes), &why_two_step)) {
        p->used = 1;
        p->fused_drelu = ctx->fused_drelu_bgrad;
        return;
    }
    mpt_fatal(__FILE__, __LINE__,
              "cuBLASLt has no algorithm for GEMM M=%lld N=%lld K=%lld trans_a=%d trans_b=%d operands %s math %s "
              "C %s epilogue %d (workspace %zu): direct path: %s; FP32-D path: %s",
              (long long)k->M, (long long)k->N, (long long)k->K, k->trans_a, k->trans_b,
              mpt_dtype_name((mpt_dtype)k->ab_dtype), mpt_math_name((mpt_math)k->math),
              mpt_dtype_name((mpt_dtype)k->c_dtype), k->epilogue, total, mpt_cublas_describe(why_direct),
              mpt_cublas_describe(why_two_step));
}

/* The plan for key k, built on first use (at graph build time through gemm_workspace, normally). A plan
 * that does not fit in `total` bytes of workspace is rebuilt within them. */
static gemm_plan *plan_get(mpt_cuda_ctx *ctx, const gemm_key *k, size_t total) {
    mpt_cuda_gemm_cache *c = ctx->gemm;
    gemm_plan *slot = NULL;
    for (int i = 0; i < GEMM_PLANS; i++) {
        gemm_plan *p = &c->plans[i];
        if (!p->used) {
            if (!slot) slot = p;
            continue;
        }
        if (memcmp(&p->key, k, sizeof *k) != 0) continue;
        if (p->extra_bytes + p->algo_workspace <= total) return p;
        const int refused = p->direct_refused;
        plan_release(p);
        plan_build(ctx, p, k, total, !refused);
        p->direct_refused = refused;
        return p;
    }
    if (!slot) {
        slot = &c->plans[c->next_evict];
        c->next_evict = (c->next_evict + 1) % GEMM_PLANS;
        plan_release(slot);
    }
    plan_build(ctx, slot, k, total, 1);
    return slot;
}

/* ---- records ------------------------------------------------------------------------------------------ */

/* The record's path: "cublasLt" (one call, cuBLASLt's epilogue), or the two-step path naming our epilogue, with
 * " (direct refused)" when cuBLASLt refused the direct call at run time. */
static const char *two_step_path(const gemm_plan *p) {
    if (p->direct) return p->split_bgrad ? "cublasLt + bias_grad kernel (narrow BGRADB split)" : "cublasLt";
    const int r = p->direct_refused;
    switch (p->key.epilogue) {
    case MPT_EPILOGUE_BGRAD:
        return r ? "cublasLt D=F32 + epilogue kernel + bias_grad kernel (direct refused)"
                 : "cublasLt D=F32 + epilogue kernel + bias_grad kernel";
    case MPT_EPILOGUE_RELU_AUX_BIAS:
        return r ? "cublasLt D=F32 + RELU_AUX_BIAS epilogue kernel + relu_aux kernel (direct refused)"
                 : "cublasLt D=F32 + RELU_AUX_BIAS epilogue kernel + relu_aux kernel";
    case MPT_EPILOGUE_DRELU_BGRAD:
        if (p->fused_drelu)
            return r ? "cublasLt D=F32 + drelu_bgrad kernel (direct refused)" : "cublasLt D=F32 + drelu_bgrad kernel";
        return r ? "cublasLt D=F32 + DRELU epilogue kernel + bias_grad kernel (direct refused)"
                 : "cublasLt D=F32 + DRELU epilogue kernel + bias_grad kernel";
    default: return r ? "cublasLt D=F32 + epilogue kernel (direct refused)" : "cublasLt D=F32 + epilogue kernel";
    }
}

/* What plan p runs, into record r (all fields but tag and calls). */
static void record_fill(mpt_cuda_gemm_record *r, const gemm_plan *p) {
    r->trans_a = p->key.trans_a;
    r->trans_b = p->key.trans_b;
    r->M = p->key.M;
    r->N = p->key.N;
    r->K = p->key.K;
    r->math = mpt_math_name((mpt_math)p->key.math);
    r->compute_type = compute_name(p->compute);
    r->scale_type = "CUDA_R_32F";
    r->a_type = cuda_type_name(p->ab_type);
    r->b_type = cuda_type_name(p->b_type);
    r->c_type = r->d_type = cuda_type_name(p->d_type);
    r->bias_type = p->epilogue != CUBLASLT_EPILOGUE_DEFAULT ? cuda_type_name(p->bias_type) : "-";
    r->epilogue = epilogue_name(p->epilogue);
    r->path = two_step_path(p);
    r->algo_id = p->algo_id;
    r->tile_id = p->tile_id;
    r->stages_id = p->stages_id;
    r->splitk = p->splitk;
    r->reduction_scheme = p->reduction_scheme;
    r->workspace_bytes = p->algo_workspace;
}

/* Counts one call of call site `tag` running plan p (a fixed table: no allocation). */
static void record_call(mpt_cuda_gemm_cache *c, const char *tag, const gemm_plan *p) {
    if (!tag) tag = "(untagged)";
    for (int i = 0; i < c->n_records; i++) {
        if (strncmp(c->records[i].tag, tag, MPT_CUDA_TAG_LEN - 1) == 0 &&
            memcmp(&c->record_keys[i], &p->key, sizeof p->key) == 0) {
            record_fill(&c->records[i], p); /* the plan may have been rebuilt (smaller workspace) */
            c->records[i].calls++;
            return;
        }
    }
    if (c->n_records == GEMM_RECORDS) {
        c->unrecorded_calls++;
        return;
    }
    mpt_cuda_gemm_record *r = &c->records[c->n_records];
    c->record_keys[c->n_records] = p->key;
    c->n_records++;
    memset(r, 0, sizeof *r);
    snprintf(r->tag, sizeof r->tag, "%s", tag);
    record_fill(r, p);
    r->calls = 1;
}

/* Marks the record of call site `tag` with plan key k as having run beside (record_call made it). */
static void record_beside(mpt_cuda_gemm_cache *c, const char *tag, const gemm_key *k) {
    if (!tag) tag = "(untagged)";
    for (int i = 0; i < c->n_records; i++)
        if (strncmp(c->records[i].tag, tag, MPT_CUDA_TAG_LEN - 1) == 0 &&
            memcmp(&c->record_keys[i], k, sizeof *k) == 0)
            c->records[i].beside = 1;
}

int mpt_cuda_gemm_counter_count(const mpt_cuda_gemm_cache *c) { return c->n_records + 1; }

int64_t *mpt_cuda_gemm_counter(mpt_cuda_gemm_cache *c, int i) {
    MPT_ASSERTF(i >= 0 && i <= c->n_records, "gemm call counter %d of %d", i, c->n_records + 1);
    return i < c->n_records ? &c->records[i].calls : &c->unrecorded_calls;
}

static mpt_cuda_gemm_cache *cache_of(mpt_backend *be) {
    MPT_ASSERTF(be != NULL && be->device == MPT_DEVICE_CUDA, "GEMM records need a CUDA backend");
    return mpt_cuda_ctx_of(be)->gemm;
}

extern "C" int mpt_cuda_gemm_record_count(mpt_backend *be) { return cache_of(be)->n_records; }

extern "C" int mpt_cuda_gemm_record_get(mpt_backend *be, int i, mpt_cuda_gemm_record *out) {
    mpt_cuda_gemm_cache *c = cache_of(be);
    if (i < 0 || i >= c->n_records) return 0;
    *out = c->records[i];
    return 1;
}

extern "C" void mpt_cuda_print_gemm_records(mpt_backend *be, FILE *f) {
    mpt_cuda_gemm_cache *c = cache_of(be);
    fprintf(f, "GEMM records (cuBLASLt; row-major C = op(A) op(B) runs as column-major C^T = op(B)^T op(A)^T):\n");
    fprintf(f, "  %-16s %-20s %-5s %-4s %-28s %-11s %-11s %-11s %-26s %5s %5s %6s %6s %10s %8s  %s\n", "tag",
            "MxNxK", "ta/tb", "math", "compute", "A/B", "C/D", "bias", "epilogue", "algo", "tile", "stages",
            "splitk", "workspace", "calls", "path");
    for (int i = 0; i < c->n_records; i++) {
        const mpt_cuda_gemm_record *r = &c->records[i];
        char shape[64];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)r->M, (long long)r->N, (long long)r->K);
        fprintf(f, "  %-16s %-20s %d/%d   %-4s %-28s %-11s %-11s %-11s %-26s %5d %5u %6u %6d %10zu %8lld  %s\n", r->tag,
                shape, r->trans_a, r->trans_b, r->math, r->compute_type, r->a_type, r->d_type, r->bias_type,
                r->epilogue, (int)r->algo_id, (unsigned)r->tile_id, (unsigned)r->stages_id, (int)r->splitk,
                r->workspace_bytes, (long long)r->calls, r->path);
    }
    if (c->unrecorded_calls)
        fprintf(f, "  (%lld calls of further call sites not recorded: the table holds %d)\n",
                (long long)c->unrecorded_calls, GEMM_RECORDS);
}

/* ---- cache lifetime ----------------------------------------------------------------------------------- */

mpt_cuda_gemm_cache *mpt_cuda_gemm_cache_create(void) {
    mpt_cuda_gemm_cache *c = (mpt_cuda_gemm_cache *)calloc(1, sizeof *c);
    MPT_ASSERT(c != NULL);
    return c;
}

void mpt_cuda_gemm_cache_destroy(mpt_cuda_gemm_cache *c) {
    if (!c) return;
    for (int i = 0; i < GEMM_PLANS; i++)
        if (c->plans[i].used) plan_release(&c->plans[i]);
    free(c);
}

/* ---- public entries ------------------------------------------------------------------------------------ */

/* ---- MXFP8: the exact emulation (see the file comment) ------------------------------------------------------- */

/* Bytes of the decoded FP32 operands at the start of the workspace. */
static size_t mx_operand_bytes(const mpt_gemm_args *a) {
    return mpt_cuda_align256((size_t)(a->M * a->K) * sizeof(float)) +
           mpt_cuda_align256((size_t)(a->N * a->K) * sizeof(float));
}

/* The FP32 GEMM on the decoded operands at ws (NULL at build time): same shapes, TN layout, C and epilogue; never
 * beside (its operands live in the backend's workspace, which the next GEMM on the backend's stream rewrites). */
static mpt_gemm_args mx_inner_args(const mpt_gemm_args *a, char *ws, char *tag, size_t tag_len) {
    mpt_gemm_args g = *a;
    g.beside = 0;
    g.math = MPT_MATH_FP32;
    g.a_dtype = g.b_dtype = MPT_DTYPE_F32;
    g.A = ws;
    g.B = ws ? ws + mpt_cuda_align256((size_t)(a->M * a->K) * sizeof(float)) : NULL;
    g.a_scale_inv = g.b_scale_inv = NULL;
    g.a_block_scales = g.b_block_scales = NULL;
    snprintf(tag, tag_len, "%s (mxfp8 emulated)", a->tag ? a->tag : "gemm");
    g.tag = tag;
    return g;
}

/* ---- weight gradients beside the data gradients (MPT_CUDA_WGRAD_STREAM=1) ----------------------------------------
 * A GEMM with mpt_gemm_args.beside runs on ctx->side_stream: the side stream waits for an event recorded on the
 * backend's stream at the call (so it sees every operand written before it), runs the same plan with the same
 * algorithm in a workspace of its own (two GEMMs in flight must not share one), and join makes the backend's stream
 * wait for the side stream's last work. In a recording the two events become graph edges: the weight-gradient GEMM of
 * layer k has no edge to layer k's data-gradient GEMM, so the two may run at once (docs/cuda.md, fusion 5). The
 * graph's arenas give every tensor its own storage for the whole step, so nothing the side GEMM reads is overwritten
 * before the join; the gradients it writes are read after the backward pass only (engine/graph.c joins there).
 * Same plan, same workspace bound, same bits as on one stream. Plain math modes only: FP8 and MXFP8 GEMMs, which
 * use the workspace for decoded operands and scales, stay on the backend's stream. */
struct mpt_cuda_retired {
    void *p;
    size_t bytes;
    struct mpt_cuda_retired *next;
};

/* MPT_CUDA_SIDE_DELAY=1 (a test switch): the side stream idles this long before each beside GEMM. The one-stream
 * order hides a race (the GEMMs are short, the backend's stream is rarely ahead by more than a kernel); with the side
 * GEMM started half a millisecond late, the backend's stream runs far ahead of it, so a consumer that does not wait for
 * the join reads a stale or partial weight gradient, and a producer that overwrites an operand before the join changes
 * what the GEMM reads: either gives other bits than the one-stream backend's (test_cuda_graph
 * test_graph_wgrad_stream_delayed runs with it). */
#define SIDE_DELAY_US 500

static __device__ uint64_t globaltimer_ns(void) { /* PTX ISA, special register %globaltimer: nanoseconds */
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __global__ void side_delay_kernel(int us) {
    const uint64_t start = globaltimer_ns();
    while (globaltimer_ns() - start < (uint64_t)us * 1000u) __nanosleep(1000); /* sm_70+ */
}

static int side_math(mpt_math m) {
    return m == MPT_MATH_FP32 || m == MPT_MATH_TF32 || m == MPT_MATH_F16 || m == MPT_MATH_BF16;
}

/* At graph build time (gemm_workspace): a side workspace of at least `need` bytes. The smaller one it replaces is
 * kept (a recording made earlier may point into it) until the backend is destroyed. Without memory for it the call
 * runs on the backend's stream (run_beside checks the size). */
static void side_reserve(mpt_backend *be, mpt_cuda_ctx *ctx, const mpt_gemm_args *a, size_t need) {
    if (!ctx->side_stream || !side_math(a->math) || need <= ctx->side_ws_bytes) return;
    void *p = NULL;
    if (cudaMalloc(&p, need) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (ctx->side_ws) {
        struct mpt_cuda_retired *r = (struct mpt_cuda_retired *)malloc(sizeof *r);
        MPT_ASSERT(r != NULL);
        *r = (struct mpt_cuda_retired){ctx->side_ws, ctx->side_ws_bytes, ctx->side_retired};
        ctx->side_retired = r;
    }
    ctx->side_ws = p;
    ctx->side_ws_bytes = need;
    mpt_backend_account(be, MPT_MEM_WORKSPACE, (int64_t)need);
}

void mpt_cuda_gemm_join(mpt_backend *be) {
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (!ctx->side_pending) return;
    MPT_CUDA_CHECK(cudaEventRecord(ctx->side_join, ctx->side_stream));
    MPT_CUDA_CHECK(cudaStreamWaitEvent(ctx->stream, ctx->side_join, 0));
    ctx->side_pending = 0;
}

void mpt_cuda_gemm_side_release(mpt_backend *be, mpt_cuda_ctx *ctx) {
    if (ctx->side_stream) MPT_CUDA_CHECK(cudaStreamSynchronize(ctx->side_stream));
    if (ctx->side_ws) {
        MPT_CUDA_CHECK(cudaFree(ctx->side_ws));
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)ctx->side_ws_bytes);
    }
    for (struct mpt_cuda_retired *r = ctx->side_retired, *next; r; r = next) {
        next = r->next;
        MPT_CUDA_CHECK(cudaFree(r->p));
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)r->bytes);
        free(r);
    }
    if (ctx->side_fork) MPT_CUDA_CHECK(cudaEventDestroy(ctx->side_fork));
    if (ctx->side_join) MPT_CUDA_CHECK(cudaEventDestroy(ctx->side_join));
    if (ctx->side_stream) MPT_CUDA_CHECK(cudaStreamDestroy(ctx->side_stream));
    ctx->side_ws = NULL;
    ctx->side_retired = NULL;
    ctx->side_stream = NULL;
}

size_t mpt_cuda_gemm_workspace(mpt_backend *be, const mpt_gemm_args *a) {
    validate(a, 0);
    if (a->math == MPT_MATH_MXFP8) {
        if (a->M == 0 || a->N == 0 || a->K == 0) return 0;
        char tag[MPT_CUDA_TAG_LEN + 24];
        const mpt_gemm_args g = mx_inner_args(a, NULL, tag, sizeof tag);
        return mx_operand_bytes(a) + mpt_cuda_gemm_workspace(be, &g);
    }
    if (a->M == 0 || a->N == 0 || a->K == 0) return 0;
    gemm_key k = make_key(a);
    gemm_plan *p = plan_get(mpt_cuda_ctx_of(be), &k, SIZE_MAX);
    size_t need = p->extra_bytes + p->algo_workspace;
    /* Room for the two-step path's FP32 D, should the direct call be refused at run time, or the call's pointers be
     * less aligned than this plan assumed (unset pointers count as 256-byte aligned) so that the plan made then
     * has no direct algorithm. Its cuBLASLt call then gets what is left of the workspace (lt_limit). */
    size_t two_step = mpt_cuda_align256((size_t)(a->M * a->N) * sizeof(float));
    if (two_step > need) need = two_step;
    if (a->beside) side_reserve(be, mpt_cuda_ctx_of(be), a, need);
    return need;
}

/* The two-step path of plan p: cuBLASLt's FP32 D in the workspace, then our epilogue kernels. */
/* FP8: the operands' dequantisation factors (device pointers), cuBLASLt's A being our B. */
static void set_fp8_scales(const gemm_plan *p, const mpt_gemm_args *a) {
    if (a->math != MPT_MATH_FP8) return;
    MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a->b_scale_inv,
                                                    sizeof a->b_scale_inv));
    MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a->a_scale_inv,
                                                    sizeof a->a_scale_inv));
}

static void gemm_two_step(mpt_backend *be, mpt_cuda_ctx *ctx, const gemm_plan *p, const mpt_gemm_args *a) {
    char *ws = (char *)be->workspace;
    set_fp8_scales(p, a);
    void *lt_ws = p->algo_workspace ? ws + p->extra_bytes : NULL;
    const void *bias = mpt_epilogue_adds_bias(a->epilogue) ? a->bias : NULL;
    const int relu = a->epilogue == MPT_EPILOGUE_RELU_BIAS || a->epilogue == MPT_EPILOGUE_RELU_AUX_BIAS;
    float *D = (float *)ws; /* [M, N] FP32 at the start of the workspace */
    const float zero = 0.0f;
    MPT_CUBLAS_CHECK(cublasLtMatmul(ctx->lt, p->desc, &a->alpha, a->B, p->la, a->A, p->lb, &zero, D, p->ld, D, p->ld,
                                    &p->algo, lt_ws, p->algo_workspace, ctx->stream));
    if (a->epilogue == MPT_EPILOGUE_DRELU_BGRAD && ctx->fused_drelu_bgrad) { /* one kernel, the same bits */
        mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_FUSED_DRELU_BGRAD);
        launch_drelu_bgrad(ctx, a->C, a->c_dtype, a->bias_grad, D, a->aux, a->beta, a->M, a->N);
        return;
    }
    launch_gemm_epilogue(ctx, a->C, a->c_dtype, D, bias, a->bias_dtype, relu,
                         a->epilogue == MPT_EPILOGUE_DRELU_BGRAD ? a->aux : NULL, a->beta, a->M, a->N);
    switch (a->epilogue) {
    case MPT_EPILOGUE_BGRAD: /* column sums of our A stored [K, M] (trans_a = 1, checked in validate) */
        mpt_cuda_bias_grad(be, a->bias_grad, a->A, a->a_dtype, a->K, a->M, 0);
        break;
    case MPT_EPILOGUE_RELU_AUX_BIAS: launch_relu_aux(ctx, a->aux, a->C, a->c_dtype, a->M, a->N); break;
    case MPT_EPILOGUE_DRELU_BGRAD: /* column sums of the stored, masked C */
        mpt_cuda_bias_grad(be, a->bias_grad, a->C, a->c_dtype, a->M, a->N, 0);
        break;
    default: break;
    }
}

/* Whether a cublasLtMatmul status means that cuBLASLt declined the call before running anything (so the
 * two-step path can run instead): an unsupported configuration, an argument it rejects (an alignment the chosen
 * algorithm cannot take), an algorithm for another architecture. */
static int direct_refusal(cublasStatus_t s) {
    return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE || s == CUBLAS_STATUS_ARCH_MISMATCH;
}

/* One direct call of plan p: 1 if cuBLASLt ran it; 0 if it refused it (direct_refusal: nothing ran; the caller
 * falls back to the two-step path), aborting on any other failure. */
static int gemm_direct(mpt_backend *be, mpt_cuda_ctx *ctx, const gemm_plan *p, const mpt_gemm_args *a) {
    void *lt_ws = p->algo_workspace ? (char *)be->workspace + p->extra_bytes : NULL;
    set_fp8_scales(p, a);
    if (p->epilogue == CUBLASLT_EPILOGUE_BGRADB || p->epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD)
        /* the bias-gradient output: void * (cublasLt.h) */
        MPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a->bias_grad,
                                                        sizeof a->bias_grad));
    else if (p->epilogue != CUBLASLT_EPILOGUE_DEFAULT) /* the bias input: const void * */
        MPT_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a->bias, sizeof a->bias));
    if (mpt_epilogue_uses_aux(a->epilogue)) /* the mask: void * out (RELU_AUX_BIAS), const void * in (DRELU_BGRAD) */
        MPT_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a->aux, sizeof a->aux));
    /* cuBLASLt's A is our B and its B our A; C is updated in place (C and D share pointer and layout). */
    cublasStatus_t s = ctx->gemm_refuse_direct
                           ? CUBLAS_STATUS_NOT_SUPPORTED
                           : cublasLtMatmul(ctx->lt, p->desc, &a->alpha, a->B, p->la, a->A, p->lb, &a->beta, a->C,
                                            p->ld, a->C, p->ld, &p->algo, lt_ws, p->algo_workspace, ctx->stream);
    if (s == CUBLAS_STATUS_SUCCESS) {
        if (p->split_bgrad) { /* column sums of our A stored [K, M], as the two-step path's */
            mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_SPLIT_NARROW_BGRAD);
            mpt_cuda_bias_grad(be, a->bias_grad, a->A, a->a_dtype, a->K, a->M, 0);
        }
        return 1;
    }
    MPT_ASSERTF(direct_refusal(s), "gemm %s: cublasLtMatmul failed: %s", a->tag ? a->tag : "gemm",
                mpt_cublas_describe(s));
    fprintf(stderr,
            "mptrain: warning: cuBLASLt refused %s for GEMM %s (%lldx%lldx%lld): %s; this configuration now runs as "
            "cuBLASLt with an FP32 D plus our epilogue kernels (the CPU backend's epilogue rules, more launches; the "
            "GEMM record's path says \"direct refused\")\n",
            epilogue_name(p->epilogue), a->tag ? a->tag : "(untagged)", (long long)a->M, (long long)a->N,
            (long long)a->K, mpt_cublas_describe(s));
    return 0;
}

/* Runs a beside GEMM (above) on the side stream and returns 1, or returns 0 when it runs on the backend's stream:
 * no side stream, a math mode that stays there, an empty product, or a plan (or its two-step fallback) that needs
 * more than the side workspace (a GEMM whose gemm_workspace was not asked with beside). */
static int run_beside(mpt_backend *be, mpt_cuda_ctx *ctx, const mpt_gemm_args *a) {
    if (!a->beside || !ctx->side_stream || !side_math(a->math) || a->K == 0) return 0;
    if (ctx->capture) { /* a recording already invalidated: the fork would fail and the side stream, not capturing,
                           would run the GEMM for real; on the backend's stream it fails (and is absorbed) with the
                           rest of the discarded recording, of which nothing runs (graph.cu) */
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(ctx->stream, &cs) != cudaSuccess) {
            cudaGetLastError();
            cs = cudaStreamCaptureStatusNone;
        }
        if (cs != cudaStreamCaptureStatusActive) return 0;
    }
    gemm_key k = make_key(a);
    const gemm_plan *p = plan_get(ctx, &k, be->workspace ? be->workspace_bytes : 0);
    const size_t two_step = mpt_cuda_align256((size_t)(a->M * a->N) * sizeof(float));
    const size_t need = p->extra_bytes + p->algo_workspace;
    if (need > ctx->side_ws_bytes || two_step > ctx->side_ws_bytes) return 0;
    MPT_CUDA_CHECK(cudaEventRecord(ctx->side_fork, ctx->stream));
    MPT_CUDA_CHECK(cudaStreamWaitEvent(ctx->side_stream, ctx->side_fork, 0));
    if (ctx->side_delay) {
        side_delay_kernel<<<1, 1, 0, ctx->side_stream>>>(SIDE_DELAY_US);
        MPT_CUDA_CHECK_LAUNCH("side_delay_kernel");
    }
    /* the call as usual, with the side stream and workspace in the context's place (as the MXFP8 path lends the
     * inner GEMM the rest of the workspace): its kernels, cuBLASLt call and epilogue all take them from there */
    cudaStream_t main_stream = ctx->stream;
    void *main_ws = be->workspace;
    const size_t main_ws_bytes = be->workspace_bytes;
    ctx->stream = ctx->side_stream;
    be->workspace = ctx->side_ws;
    be->workspace_bytes = ctx->side_ws_bytes;
    mpt_gemm_args g = *a;
    g.beside = 0;
    mpt_cuda_gemm(be, &g);
    ctx->stream = main_stream;
    be->workspace = main_ws;
    be->workspace_bytes = main_ws_bytes;
    ctx->side_pending = 1;
    record_beside(ctx->gemm, a->tag, &k);
    mpt_cuda_opt_in_taken(ctx, MPT_CUDA_OPT_WGRAD_STREAM);
    return 1;
}

void mpt_cuda_gemm(mpt_backend *be, const mpt_gemm_args *a) {
    validate(a, 1);
    if (a->M == 0 || a->N == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (run_beside(be, ctx, a)) return;
    if (a->math == MPT_MATH_MXFP8 && a->K > 0) { /* decode into the workspace, then the FP32 GEMM after it */
        const size_t dec = mx_operand_bytes(a);
        mpt_cuda_require_workspace(be, dec, a->tag ? a->tag : "mxfp8 gemm");
        char *ws = (char *)be->workspace;
        char tag[MPT_CUDA_TAG_LEN + 24];
        const mpt_gemm_args g = mx_inner_args(a, ws, tag, sizeof tag);
        mpt_cuda_fp8_decode(ctx, (float *)g.A, (const uint8_t *)a->A, a->a_dtype, a->M, a->K, a->a_block_scales);
        mpt_cuda_fp8_decode(ctx, (float *)g.B, (const uint8_t *)a->B, a->b_dtype, a->N, a->K, a->b_block_scales);
        void *saved = be->workspace;
        const size_t saved_bytes = be->workspace_bytes;
        be->workspace = ws + dec; /* the inner GEMM owns the rest (its two-step D starts there) */
        be->workspace_bytes = saved_bytes - dec;
        mpt_cuda_gemm(be, &g);
        be->workspace = saved;
        be->workspace_bytes = saved_bytes;
        return;
    }
    const void *bias = mpt_epilogue_adds_bias(a->epilogue) ? a->bias : NULL;
    if (a->K == 0) { /* an empty product: C = epilogue(beta*C), no cuBLASLt call; a bias gradient of 0 */
        const int relu = a->epilogue == MPT_EPILOGUE_RELU_BIAS || a->epilogue == MPT_EPILOGUE_RELU_AUX_BIAS;
        launch_gemm_epilogue(ctx, a->C, a->c_dtype, NULL, bias, a->bias_dtype, relu,
                             a->epilogue == MPT_EPILOGUE_DRELU_BGRAD ? a->aux : NULL, a->beta, a->M, a->N);
        if (a->epilogue == MPT_EPILOGUE_BGRAD) be->memset_zero(be, a->bias_grad, (size_t)a->M * sizeof(float));
        if (a->epilogue == MPT_EPILOGUE_DRELU_BGRAD) be->memset_zero(be, a->bias_grad, (size_t)a->N * sizeof(float));
        if (a->epilogue == MPT_EPILOGUE_RELU_AUX_BIAS) launch_relu_aux(ctx, a->aux, a->C, a->c_dtype, a->M, a->N);
        return;
    }
    gemm_key k = make_key(a);
    /* Normally the plan chosen at build time, which fits the workspace the graph reserved for it. */
    const size_t total = be->workspace ? be->workspace_bytes : 0;
    gemm_plan *p = plan_get(ctx, &k, total);
    mpt_cuda_require_workspace(be, p->extra_bytes + p->algo_workspace, a->tag ? a->tag : "gemm");
    if (p->direct && !gemm_direct(be, ctx, p, a)) { /* refused: rebuild as two-step, for this and later calls */
        plan_release(p);
        plan_build(ctx, p, &k, total, 0);
        p->direct_refused = 1;
        mpt_cuda_require_workspace(be, p->extra_bytes + p->algo_workspace, a->tag ? a->tag : "gemm");
    }
    if (!p->direct) gemm_two_step(be, ctx, p, a);
    record_call(ctx->gemm, a->tag, p);
}
