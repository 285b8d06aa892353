/*
 * kernels/cpu/gemm.c - the CPU GEMM: the one place where each precision's CPU GEMM numerics are decided.
 *
 * C[M,N] = epilogue(alpha * op(A) op(B) + beta * C), row-major (contract: mpt_gemm_args, engine/backend.h).
 * Two kernel sets (ARCHITECTURE decision 11; mpt_cpu_kernels in engine/backend.h) over one engine:
 *
 * emulate (the default, the GPU's oracle) emulates Tensor Core numerics (decision 2): the products run in an FP32
 * GEMM (FP32 FMA, FP32 accumulation), and what differs between the math modes is only what that GEMM is given:
 *
 *   math   A/B storage  operands given to the FP32 GEMM
 *   FP32   F32          A and B themselves (no copy)
 *   TF32   F32          each element rounded to TF32 (mpt_round_tf32: RNE to 10 mantissa bits) into scratch
 *   F16    F16          each element widened exactly to FP32 into scratch
 *   BF16   BF16         each element widened exactly to FP32 into scratch
 *
 * native runs the bf16 mode's GEMMs with BF16 operands on the CPU's BF16 dot-product units (oneDNN bf16 matmul,
 * FP32 accumulation; numerics in kernels/cpu/onednn.h: denormal BF16 inputs read as zero, denormal partial sums
 * flushed, pairs summed odd element first). fp16 and tf32 have no native units on the CPUs oneDNN 2.6 supports
 * for training, and fp32 is FP32 either way: they run as in emulate.
 *
 * The FP32 GEMM is oneDNN's f32 matmul (strict FP32 math; kernels/cpu/onednn.h): about twice OpenBLAS's sgemm
 * with OpenBLAS's AVX2 (Haswell) kernels on every shape measured, as fast as its AVX-512 (Cooperlake) kernels on
 * the MLP's shapes and up to 2.9x slower on some of LeNet-5's small per-image convolution GEMMs (bench/gemm_bench).
 * Whole convolution passes (bench/conv_bench) take as long on either engine: OpenBLAS's AVX-512 kernels win forward
 * and backward-data, oneDNN backward-filter, and OpenBLAS's AVX2 kernels lose everywhere, so there is no per-shape
 * choice of engine (docs/benchmarks.md), or
 * OpenBLAS cblas_sgemm where the build has no oneDNN or MPT_CPU_ENGINE=openblas asks for it (the engine is chosen
 * per backend when it is created: mpt_cpu_exec). Both compute the same products and FP32 sums; only the summation
 * order differs, so results agree within K*2^-24*sum|a*b| (tests/test_gemm.c checks the bound) and each engine is
 * deterministic for a given thread count.
 *
 * oneDNN primitives (kernels/cpu/onednn.h) are made at graph build only: the workspace query (mpt_cpu_gemm_workspace,
 * mpt_cpu_gemm_ws_bytes_on) creates the one its arguments will run on, and a call in a step finds it and aborts,
 * naming the GEMM, if the build did not make it (ARCHITECTURE decision 4: nothing is created in the step). A
 * primitive bakes in the engine's alpha and beta, which come from the call's: alpha and beta themselves when C is F32,
 * there is no epilogue and the math is not FP8, 1 and 0 otherwise (the tile, or acc in C before an in-place
 * epilogue; see Output). So a layer asks at build for every form its passes run: a gradient GEMM with beta 1 and 0
 * (accumulate or first write, engine/layers/layer_common.h mpt_layer_reserve_grad_gemm), a convolution's forward with
 * and without its bias (kernels/cpu/conv.c). core_gemm maps the fused epilogues to the GEMM they run (BGRAD and DRELU_BGRAD to none,
 * RELU_AUX_BIAS to RELU_BIAS) for the query and the call alike, so they share its primitive.
 *
 * Output: when C is F32 and there is no epilogue, the GEMM applies alpha and beta to C in place (oneDNN: output
 * scale and sum post-op, one rounding). Otherwise it writes acc = op(A) op(B) into an FP32 scratch tile, and the
 * epilogue runs in FP32,
 *     v = alpha*acc + beta*C_old + bias[n]   (C_old widened exactly; not read when beta == 0)
 *     v = max(v, 0)                          (RELU_BIAS, RELU_AUX_BIAS)
 * and v is rounded once to C's dtype with round-to-nearest-even. The fused epilogues' extra outputs come from
 * the stored C, with the loops of the unfused operations (so fused and unfused give the same bits):
 *     BGRAD          bias_grad = column sums of A (be->bias_grad)
 *     RELU_AUX_BIAS  aux bit (m, n) = [C[m, n] > 0] (relu_backward's rule, engine/numerics.h)
 *     DRELU_BGRAD    C[m, n] = aux bit ? C : +0 (relu_backward), then bias_grad = column sums of C (be->bias_grad)
 *
 * Why the emulation is what a Tensor Core computes (NVIDIA Ampere whitepaper; Micikevicius et al. 2018): the
 * hardware takes operands in TF32/FP16/BF16 and accumulates in FP32. A product of two such values has at
 * most 2*11 = 22 significant bits, so it is exact in FP32 (24 bits), and FMA-ing it into an FP32
 * accumulator equals the FP32 GEMM's FMA on the widened values. Known differences from the GPU:
 *   - summation order: oneDNN and OpenBLAS block K in panels and keep partial sums in registers; cuBLASLt/cuDNN
 *     pick other orders (and split-K). Results agree to within K*2^-24*sum|a*b|, not bit for bit.
 *   - TF32 operand rounding: we round FP32 operands with RNE. cuBLAS/cuDNN feed FP32 data to TF32 Tensor
 *     Cores with round-to-nearest-away (cvt.rna) on some paths and by truncating the low 13 bits on others,
 *     so a TF32 operand may differ by one TF32 ulp (2^-10 relative) on the GPU.
 *   - accumulation itself: a Tensor Core adds the exact products of one MMA block to the FP32 accumulator
 *     with a shared alignment and one rounding (truncation on some generations: Fasi, Higham, Mikaitis and
 *     Pranesh 2021, "Numerical behavior of NVIDIA tensor cores"), where the FP32 GEMM rounds to nearest after
 *     every FMA; and the order of cuBLASLt's epilogue (alpha, beta, bias) is not documented. Both stay within
 *     the K*2^-24 FP32 bounds the tests use. A summation model (below) computes the Tensor Cores' sum instead.
 *   - subnormal FP32 products (BF16/TF32 values below ~2^-63 each) are not exact on either side.
 *
 * FP8 (math FP8 / MXFP8; engine/amp/fp8.h). The operands are E4M3/E5M2 bytes in the TN layout (A [M, K], B
 * [N, K]). They are decoded exactly into FP32 scratch (kernels/cpu/fp8.c mpt_cpu_fp8_decode; MXFP8: times each
 * block's E8M0 scale, a power of two, exact) and given to the FP32 GEMM like the 16-bit modes: a product of two FP8
 * values (at most 4 x 4 significant bits) is exact in FP32, so with --fp8-accum fp32 this is FP32 accumulation of
 * exact products, as for BF16. FP8 GEMMs always go through the FP32 tile (the engine computes the plain product, so a
 * oneDNN primitive does not depend on a scale that changes every step). Per-tensor scales enter with alpha in the
 * epilogue: the FP32 accumulator is multiplied by
 * alpha * (a_scale_inv * b_scale_inv), one FP32 product of the factors first (cuBLASLt documents D = alpha *
 * scale_A * scale_B * op(A)op(B) + beta * C without the order of its roundings; with power-of-two scales
 * (--fp8-pow2-scales) every order gives the same bits).
 *
 * The fast accumulator (--fp8-accum fast, MPT_FP8_ACCUM_FAST): Hopper's FP8 Tensor Cores do not accumulate in FP32.
 * DeepSeek-V3 (technical report, arXiv 2412.19437, section 3.3.2) measured "around 14 bits" of accumulation
 * precision on H800 and promotes partial sums to FP32 registers every 128 elements of K; Khattak and Mikaitis
 * ("Accurate Models of NVIDIA Tensor Cores", arXiv 2512.07004) give bit-accurate models of the tensor cores' inner
 * products, with MATLAB code (github.com/north-numerical-computing/MATLAB-tensor-core: models/H100TC.m, FP8 inputs:
 * fma = 32, neab = -10, frmode 'rz', built on models/tools/Generic_BFMA_TC.m and GEMM.m; its comment: the hardware's
 * FMA is 16 wide and joins two 16-element vectors in an interleaved pattern, which the model treats as one block of
 * 32, as this one does). The model implemented here (kernels/cpu/fp8.c mpt_cpu_fp8_fast_tile, instead of the FP32
 * GEMM; its arithmetic is the h100 FP8 row of the Tensor Core summation models, kernels/cpu/tc_accum.h) is our
 * reading of theirs for FP8 inputs and an FP32 output:
 *   - K is consumed in blocks of 32 products, in order; the accumulator c (FP32, starting at +0) joins each block;
 *   - a block's terms (its 32 products, each exact, and c) are aligned to the largest exponent E among them (a
 *     product's exponent is exp(a) + exp(b), its significand in [1, 4); a subnormal operand has the smallest normal
 *     exponent), and each term is truncated toward zero to a multiple of 2^(E - 13): 13 fraction bits, no guard
 *     bits ("neab = -10": 23 - 10);
 *   - the truncated terms are added exactly, and the sum is truncated toward zero to 14 significant bits (13
 *     fraction bits: an "e8m13" accumulator) and becomes the next c;
 *   - --fp8-promote N: every N elements of K (a multiple of 32) the partial c is added into an FP32 accumulator with
 *     round-to-nearest and restarts from +0 (DeepSeek-V3's remedy, N = 128 there); the rest is added at the end;
 *   - NaN and inf operands: the block follows IEEE's rules (NaN if any NaN, inf x 0 or +inf meets -inf, else the
 *     infinity), and a NaN or infinite partial sum stays so through later blocks (the model does not say).
 * The per-tensor scales, alpha, beta * C and the bias then apply in the FP32 epilogue as above. The model's
 * assumptions (that cuBLASLt's FP8 kernels with CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1 accumulate all of K in the Tensor
 * Core in this order, though cuBLASLt may split K; that FAST_ACCUM = 0 equals some promotion interval, which NVIDIA
 * does not document; the truncation of c itself at alignment) have been measured once, on one H200 with cuBLASLt 13.1 (tests/test_cuda_fp8.c
 * test_fast_accumulator_measurement, bench/results/gpu-2026-11-26-b.md: random E4M3 x E4M3 GEMMs, 64 x 64 outputs,
 * K = 16 .. 4096, unit scales, FP32 C): with FAST_ACCUM = 1 every output was bit for bit this model without
 * promotion, with FAST_ACCUM = 0 this model with --fp8-promote 128. Still assumptions: another GPU (H100, Ada) or
 * cuBLASLt version, other shapes (split-K), and the epilogue's order with scales that are not 1. mxfp8 has no fast
 * model (Hopper has no MX Tensor Cores; B200's block-scaled accumulator is not modelled): it accumulates in FP32.
 *
 * Summation models (--accum-model; mpt_backend_cpu_set_accum, engine/backend.h mpt_accum_model; the models, their
 * parameters and sources: kernels/cpu/tc_accum.h). With a model other than IEEE the emulated TF32, F16 and BF16 GEMMs
 * (mpt_cpu_gemm_modelled) keep their operands, converted as above, and replace the FP32 engine by mpt_tc_gemm: every
 * element of acc = op(A) op(B) is the model's chain of block FMAs over its row and column, started from +0, rounded
 * toward zero into FP32 after each block, the GPU's Tensor Core accumulator in FP32 (the published measurements
 * reproduce bit for bit: docs/numerics.md). acc then goes through the FP32 epilogue like an engine's (alpha, beta * C,
 * bias, ReLU, one rounding to C's dtype), so beta * C is added to the finished sum rather than used as the
 * accumulator's start (CUTLASS's LinearCombination epilogue, D = alpha * acc + beta * C in FP32; cuBLASLt does not
 * document its own), and a 16-bit C is the modelled FP32 sum rounded once, not the Tensor Cores' FP16-output row
 * (what cuBLASLt does with FP32 compute and a 16-bit C). The model's GEMM makes no oneDNN primitive; its scratch (the
 * operands split into significands and exponents, mpt_tc_gemm_ws_bytes) is reserved at graph build with the rest. The
 * FP32 and FP8 maths and the native kernel set are summed as without a model.
 *
 * Operand copies (mpt_gemm_args.a_copy / b_copy; mpt_cpu_gemm_copies says when they are read: the emulated TF32,
 * F16 and BF16 GEMMs). A caller that runs several GEMMs on one operand (a linear layer: x in its forward and
 * weight-gradient GEMMs, W in its forward and data-gradient GEMMs, dy in both gradient GEMMs) keeps its converted
 * FP32 values in a copy of its own: the first GEMM converts into it, the later ones read it, instead of each
 * converting into scratch. The same conversion of the same values, so the same bits; the scratch for the operands
 * is still reserved (the build-time query sees no copies).
 *
 * Scratch (mpt_cpu_gemm_workspace: the exact bytes, each part padded to 64 bytes):
 *   [converted A: M*K floats, if emulated math != FP32][converted B: K*N floats, likewise]
 *   [FP32 C tile: M*N floats, if C is not F32 or the epilogue is not NONE][oneDNN's scratchpad, if oneDNN runs it]
 *   [the summation model's split operands: (M + N) * (8 K + 1) bytes, if a model sums the products]
 */
#include <cblas.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tc_accum.h"

enum { GEMM_ALIGN = 64, GEMM_CHUNK = 512, GEMM_CONVERT_CHUNK = 16384 };

static size_t gemm_pad(size_t bytes) { return (bytes + GEMM_ALIGN - 1) & ~(size_t)(GEMM_ALIGN - 1); }

/* Where each scratch part lives (byte offsets), which are used, and which engine runs the products. */
typedef struct gemm_plan {
    int convert_ops; /* A and B go through scratch (emulated TF32/F16/BF16) */
    int tile_c;      /* C goes through an FP32 tile */
    int onednn;      /* the products run in oneDNN (od), else in OpenBLAS */
    int tc;          /* the products are summed by a Tensor Core model (tc_op), not by an engine */
    mpt_onednn_gemm od;
    mpt_tc_op tc_op;
    size_t a_off, b_off, c_off, dnnl_off, dnnl_bytes, tc_off, tc_bytes, total;
} gemm_plan;

static int gemm_native(const mpt_cpu_exec *x, const mpt_gemm_args *a) {
    return x->kernels == MPT_CPU_KERNELS_NATIVE && a->math == MPT_MATH_BF16;
}

static int gemm_is_fp8(mpt_math m) { return m == MPT_MATH_FP8 || m == MPT_MATH_MXFP8; }

int mpt_cpu_gemm_converts(const mpt_cpu_exec *x, mpt_math m) {
    return (m == MPT_MATH_TF32 || m == MPT_MATH_F16 || m == MPT_MATH_BF16) &&
           !(x->kernels == MPT_CPU_KERNELS_NATIVE && m == MPT_MATH_BF16);
}

int mpt_cpu_gemm_modelled(const mpt_cpu_exec *x, mpt_math m) {
    return x->accum != MPT_ACCUM_MODEL_IEEE && mpt_cpu_gemm_converts(x, m);
}

int mpt_cpu_tc_format_of(mpt_math m) {
    switch (m) {
    case MPT_MATH_TF32: return MPT_TC_FORMAT_TF32;
    case MPT_MATH_F16: return MPT_TC_FORMAT_FP16;
    case MPT_MATH_BF16: return MPT_TC_FORMAT_BF16;
    default: return -1;
    }
}

/* The fast accumulator model runs on the FP8 bytes themselves, into the tile (no FP32 copies, no FP32 GEMM). */
static int gemm_fast_fp8(const mpt_gemm_args *a) {
    return a->math == MPT_MATH_FP8 && a->fp8_accum == MPT_FP8_ACCUM_FAST;
}

/* Aborts: the step is about to run a GEMM whose oneDNN primitive the graph build did not create. */
static void gemm_unprepared(const mpt_gemm_args *a, const mpt_onednn_gemm *od) {
    char what[192];
    mpt_onednn_gemm_describe(od, what, sizeof what);
    MPT_ASSERTF(0, "gemm %s: no oneDNN primitive for it was created when the graph was built (oneDNN %s; the call: "
                "math %s, C %s, epilogue %d, alpha %g, beta %g): a training step creates none (ARCHITECTURE decision 4). "
                "The layer must "
                "ask gemm_workspace() at build time for every form of a GEMM its passes run, and the thread count "
                "must be set (mpt_cpu_set_threads) before the graph is built",
                a->tag ? a->tag : "?", what, mpt_math_name(a->math), mpt_dtype_name(a->c_dtype), (int)a->epilogue,
                (double)a->alpha, (double)a->beta);
}

/* The plan of a GEMM. At graph build (`build`: the workspace query) it creates the oneDNN primitive the GEMM will
 * run on; in a step it only finds it, and aborts naming the GEMM if the build did not create it. */
static gemm_plan gemm_plan_of(const mpt_cpu_exec *x, const mpt_gemm_args *a, int build) {
    gemm_plan p = {0};
    const int native = gemm_native(x, a);
    const int fast = gemm_fast_fp8(a);
    p.convert_ops = a->math != MPT_MATH_FP32 && !native && !fast;
    p.tc = mpt_cpu_gemm_modelled(x, a->math);
    if (p.tc) {
        const mpt_tc_format f = (mpt_tc_format)mpt_cpu_tc_format_of(a->math);
        MPT_ASSERTF(mpt_tc_op_init(&p.tc_op, (mpt_tc_model)x->accum, f, f, MPT_TC_OUT_FP32) == 0,
                    "gemm %s: the %s summation model has no row for %s operands (check mpt_accum_model_covers before "
                    "building)", a->tag ? a->tag : "?", mpt_accum_model_name(x->accum), mpt_math_name(a->math));
    }
    /* an FP32 tile when C is 16-bit, when an epilogue must read the old C (beta != 0; with a summation model, any
     * beta != 0: the model's sums start from +0 and beta * C joins in the epilogue), or for FP8 (its scales join alpha
     * in the epilogue); an F32 C with an epilogue and beta 0 holds acc itself and the epilogue runs in place */
    p.tile_c = a->c_dtype != MPT_DTYPE_F32 || ((a->epilogue != MPT_EPILOGUE_NONE || p.tc) && a->beta != 0.0f) ||
               gemm_is_fp8(a->math);
    const int in_place = !p.tile_c && a->epilogue != MPT_EPILOGUE_NONE;
    p.od.trans_a = a->trans_a;
    p.od.trans_b = a->trans_b;
    p.od.M = a->M;
    p.od.N = a->N;
    p.od.K = a->K;
    p.od.ab_dtype = native ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
    p.od.alpha = p.tile_c || in_place ? 1.0f : a->alpha;
    p.od.beta = p.tile_c || in_place ? 0.0f : a->beta;
    if (a->M > 0 && a->N > 0 && a->K > 0 && !fast && !p.tc && (native || x->engine == MPT_CPU_ENGINE_ONEDNN)) {
        if (build) {
            p.onednn = mpt_onednn_gemm_prepare(&p.od, &p.dnnl_bytes);
        } else {
            const mpt_onednn_state st = mpt_onednn_gemm_lookup(&p.od, &p.dnnl_bytes);
            if (st == MPT_ONEDNN_UNPREPARED) gemm_unprepared(a, &p.od);
            p.onednn = st == MPT_ONEDNN_READY;
        }
    }
    MPT_ASSERTF(p.onednn || !native || a->M == 0 || a->N == 0 || a->K == 0,
                "gemm %s: oneDNN has no BF16 matmul for %lldx%lldx%lld (the native kernel set needs one)",
                a->tag ? a->tag : "?", (long long)a->M, (long long)a->N, (long long)a->K);
    size_t off = 0;
    if (p.convert_ops) {
        p.a_off = off;
        off += gemm_pad((size_t)a->M * (size_t)a->K * sizeof(float));
        p.b_off = off;
        off += gemm_pad((size_t)a->K * (size_t)a->N * sizeof(float));
    }
    if (p.tile_c) {
        p.c_off = off;
        off += gemm_pad((size_t)a->M * (size_t)a->N * sizeof(float));
    }
    if (p.onednn && p.dnnl_bytes > 0) {
        p.dnnl_off = off;
        off += gemm_pad(p.dnnl_bytes);
    }
    if (p.tc) {
        p.tc_bytes = mpt_tc_gemm_ws_bytes(&p.tc_op, a->M, a->N, a->K);
        p.tc_off = off;
        off += gemm_pad(p.tc_bytes);
    }
    p.total = off;
    return p;
}

static mpt_dtype gemm_operand_dtype(mpt_math m) {
    switch (m) {
    case MPT_MATH_F16: return MPT_DTYPE_F16;
    case MPT_MATH_BF16: return MPT_DTYPE_BF16;
    default: return MPT_DTYPE_F32;
    }
}

/* FP32 operand of the math mode: the same buffer (FP32), or converted into dst, rows x K elements (FP8: stored
 * [rows, K], with its block scales for MXFP8; TF32/F16/BF16: each element alone, in chunks on the threads,
 * kernels/cpu/parallel.h). */
static const float *gemm_operand(float *dst, const void *src, int64_t rows, int64_t K, mpt_math m, mpt_dtype t,
                                 const uint8_t *block_scales) {
    switch (m) {
    case MPT_MATH_FP32: return src;
    case MPT_MATH_FP8: mpt_cpu_fp8_decode(dst, src, t, rows, K, NULL); return dst;
    case MPT_MATH_MXFP8: mpt_cpu_fp8_decode(dst, src, t, rows, K, block_scales); return dst;
    default: break;
    }
    const int64_t n = rows * K;
    const size_t es = mpt_dtype_size(gemm_operand_dtype(m));
    const int64_t chunks = (n + GEMM_CONVERT_CHUNK - 1) / GEMM_CONVERT_CHUNK;
    MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t i0 = c * GEMM_CONVERT_CHUNK, k = n - i0 < GEMM_CONVERT_CHUNK ? n - i0 : GEMM_CONVERT_CHUNK;
        mpt_cpu_gemm_convert(dst + i0, (const char *)src + (size_t)i0 * es, m, k);
    }
    return dst;
}

/* The FP32 operand from the caller's copy (mpt_gemm_args.a_copy: converted into it first when `write`), else as
 * gemm_operand into scratch. FP8 operands have no copies (their decoding is per call: the scales change). */
static const float *gemm_operand_or_copy(float *scratch, const void *src, int64_t rows, int64_t K, mpt_math m,
                                         mpt_dtype t, const uint8_t *block_scales, float *copy, int write) {
    if (!copy || gemm_is_fp8(m)) return gemm_operand(scratch, src, rows, K, m, t, block_scales);
    return write ? gemm_operand(copy, src, rows, K, m, t, block_scales) : copy;
}

int mpt_cpu_gemm_copies(mpt_backend *be, mpt_math m) { return mpt_cpu_gemm_converts(mpt_cpu_exec_of(be), m); }

void mpt_cpu_gemm_convert(float *dst, const void *src, mpt_math m, int64_t n) {
    MPT_ASSERTF(m == MPT_MATH_TF32 || m == MPT_MATH_F16 || m == MPT_MATH_BF16,
                "mpt_cpu_gemm_convert: math %s has no FP32 operand conversion", mpt_math_name(m));
    if (m == MPT_MATH_TF32) mpt_cpu_round_tf32_n(dst, src, n);
    else mpt_cpu_widen(dst, src, gemm_operand_dtype(m), n);
}

/* v = alpha*acc (+ beta*cold) (+ bias), then ReLU, in FP32, in place over one chunk. The flags are
 * compile-time constants at each call site below, so every combination is its own branch-free loop. */
static inline __attribute__((always_inline)) void gemm_epilogue_chunk(float *t, const float *cold, const float *bv,
                                                                      int64_t n, float alpha, float beta,
                                                                      int has_beta, int has_bias, int relu) {
    for (int64_t j = 0; j < n; j++) {
        float v = alpha * t[j];
        if (has_beta) v = v + beta * cold[j];
        if (has_bias) v = v + bv[j];
        if (relu) v = mpt_elem_relu(v);
        t[j] = v;
    }
}

/* Epilogue of one row: tile row t (acc, FP32) -> C row c of dtype cd, rounded once. */
static void gemm_epilogue_row(void *c, mpt_dtype cd, float *t, const void *bias, mpt_dtype bd, int64_t N,
                              float alpha, float beta, mpt_epilogue ep) {
    float cold_buf[GEMM_CHUNK], bv_buf[GEMM_CHUNK];
    const size_t es = mpt_dtype_size(cd);
    const int has_beta = beta != 0.0f, has_bias = ep != MPT_EPILOGUE_NONE;
    for (int64_t j0 = 0; j0 < N; j0 += GEMM_CHUNK) {
        int64_t n = N - j0 < GEMM_CHUNK ? N - j0 : GEMM_CHUNK;
        float *tj = t + j0;
        /* F32 operands of the epilogue are read where they are (widening F32 is a copy) */
        const float *cold = cold_buf, *bv = bv_buf;
        if (has_beta && cd == MPT_DTYPE_F32) cold = (const float *)c + j0;
        else if (has_beta) mpt_cpu_widen(cold_buf, (const char *)c + (size_t)j0 * es, cd, n);
        if (has_bias && bd == MPT_DTYPE_F32) bv = (const float *)bias + j0;
        else if (has_bias) mpt_cpu_widen(bv_buf, (const char *)bias + (size_t)j0 * mpt_dtype_size(bd), bd, n);
        if (ep == MPT_EPILOGUE_RELU_BIAS) {
            if (has_beta) gemm_epilogue_chunk(tj, cold, bv, n, alpha, beta, 1, 1, 1);
            else gemm_epilogue_chunk(tj, cold, bv, n, alpha, beta, 0, 1, 1);
        } else if (has_bias) {
            if (has_beta) gemm_epilogue_chunk(tj, cold, bv, n, alpha, beta, 1, 1, 0);
            else gemm_epilogue_chunk(tj, cold, bv, n, alpha, beta, 0, 1, 0);
        } else {
            if (has_beta) gemm_epilogue_chunk(tj, cold, bv, n, alpha, beta, 1, 0, 0);
            else gemm_epilogue_chunk(tj, cold, bv, n, alpha, beta, 0, 0, 0);
        }
        if ((void *)tj != (void *)((char *)c + (size_t)j0 * es)) mpt_cpu_narrow((char *)c + (size_t)j0 * es, cd, tj, n);
    }
}

size_t mpt_cpu_gemm_ws_bytes_on(const mpt_cpu_exec *x, const mpt_gemm_args *a) { return gemm_plan_of(x, a, 1).total; }

size_t mpt_cpu_gemm_step_ws_bytes_on(const mpt_cpu_exec *x, const mpt_gemm_args *a) {
    return gemm_plan_of(x, a, 0).total;
}

size_t mpt_cpu_gemm_ws_bytes(const mpt_gemm_args *a) {
    const mpt_cpu_exec x = mpt_cpu_exec_default();
    return mpt_cpu_gemm_ws_bytes_on(&x, a);
}

/* C = alpha * op(A) op(B) + beta * C on the plan's operands: FP32 (emulate) or BF16 (native), C F32 dense. */
static void gemm_products(const gemm_plan *p, const mpt_gemm_args *a, const void *A, const void *B, float *C,
                          float alpha, float beta, char *w) {
    if (p->onednn) {
        mpt_onednn_gemm_run(&p->od, A, B, C, w + p->dnnl_off, p->dnnl_bytes);
        return;
    }
    /* Leading dimensions of the stored (row-major) matrices; BLAS wants at least 1. */
    int lda = (int)(a->trans_a ? a->M : a->K), ldb = (int)(a->trans_b ? a->K : a->N);
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    cblas_sgemm(CblasRowMajor, a->trans_a ? CblasTrans : CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans,
                (int)a->M, (int)a->N, (int)a->K, alpha, A, lda, B, ldb, beta, C, (int)a->N);
}

/* D = op(A) op(B) [M, N] (F32, dense) summed by the plan's Tensor Core model from +0, on the FP32 operand values. */
static void gemm_tc_products(const gemm_plan *p, const mpt_gemm_args *a, const float *A, const float *B, float *D,
                             char *w) {
    const mpt_tc_gemm_args t = {.trans_a = a->trans_a, .trans_b = a->trans_b, .M = a->M, .N = a->N, .K = a->K,
                                .A = A, .B = B, .C0 = NULL, .D = D};
    mpt_tc_gemm(&p->tc_op, &t, w + p->tc_off, p->tc_bytes);
}

void mpt_cpu_gemm_ws_on(const mpt_cpu_exec *x, const mpt_gemm_args *a, void *ws, size_t ws_bytes) {
    mpt_gemm_args_check(a, 1); /* the contract (engine/backend.c); the fused epilogues arrive mapped by core_gemm */
    if (a->M == 0 || a->N == 0) return;
    gemm_plan p = gemm_plan_of(x, a, 0);
    MPT_ASSERTF(ws_bytes >= p.total && (p.total == 0 || ws != NULL),
                "gemm %s: needs %zu bytes of workspace, has %zu (reserve gemm_workspace() at build time)",
                a->tag ? a->tag : "?", p.total, ws_bytes);
    char *w = ws;
    const int64_t M = a->M, N = a->N, K = a->K;

    const void *A = a->A, *B = a->B;
    if (p.convert_ops && K > 0) { /* rows x K: FP8 operands are TN ([M, K], [N, K]); the others' counts suffice */
        A = gemm_operand_or_copy((float *)(w + p.a_off), a->A, M, K, a->math, a->a_dtype, a->a_block_scales,
                                 a->a_copy, a->a_copy_write);
        B = gemm_operand_or_copy((float *)(w + p.b_off), a->B, N, K, a->math, a->b_dtype, a->b_block_scales,
                                 a->b_copy, a->b_copy_write);
    }
    if (!p.tile_c && a->epilogue == MPT_EPILOGUE_NONE && !p.tc) {
        gemm_products(&p, a, A, B, a->C, a->alpha, a->beta, w);
        return;
    }
    /* per-tensor FP8 scales join alpha in the epilogue (see the file comment) */
    const float alpha = a->math == MPT_MATH_FP8 ? a->alpha * (*a->a_scale_inv * *a->b_scale_inv) : a->alpha;
    /* acc into the tile, or into an F32 C itself (beta 0, not FP8), then the epilogue row by row */
    float *tile = p.tile_c ? (float *)(w + p.c_off) : a->C;
    if (gemm_fast_fp8(a)) mpt_cpu_fp8_fast_tile(tile, a);
    else if (p.tc) gemm_tc_products(&p, a, A, B, tile, w);
    else gemm_products(&p, a, A, B, tile, 1.0f, 0.0f, w);
    size_t es = mpt_dtype_size(a->c_dtype);
    MPT_OMP(omp parallel for schedule(static) if (M * N >= MPT_PAR_MIN)) /* rows are independent */
    for (int64_t i = 0; i < M; i++)
        gemm_epilogue_row((char *)a->C + (size_t)(i * N) * es, a->c_dtype, tile + i * N, a->bias, a->bias_dtype, N,
                          alpha, a->beta, a->epilogue);
}

void mpt_cpu_gemm_ws(const mpt_gemm_args *a, void *ws, size_t ws_bytes) {
    const mpt_cpu_exec x = mpt_cpu_exec_default();
    mpt_cpu_gemm_ws_on(&x, a, ws, ws_bytes);
}

/* The GEMM that the FP32 GEMM and the FP32 epilogue compute for a fused epilogue, whose extra outputs come after it:
 * BGRAD and DRELU_BGRAD run without an epilogue, RELU_AUX_BIAS as RELU_BIAS (the arguments checked by the caller). */
static mpt_gemm_args core_gemm(const mpt_gemm_args *a) {
    mpt_gemm_args g = *a;
    switch (a->epilogue) {
    case MPT_EPILOGUE_BGRAD:
    case MPT_EPILOGUE_DRELU_BGRAD: g.epilogue = MPT_EPILOGUE_NONE; break;
    case MPT_EPILOGUE_RELU_AUX_BIAS: g.epilogue = MPT_EPILOGUE_RELU_BIAS; break;
    default: break;
    }
    g.bias_grad = NULL;
    g.aux = NULL;
    return g;
}

/* aux (the bitmask of engine/backend.h) = [C > 0] of the stored [M, N] C, padding bits 0: eight elements per byte
 * by an ordered greater-than compare (false for NaN, as mpt_elem_relu_mask) of the exactly widened values. */
static void relu_aux_from_output(uint8_t *aux, const void *C, mpt_dtype cd, int64_t M, int64_t N) {
    const int64_t ld_bytes = mpt_relu_aux_ld(N) / 8;
    const __m256 zero = _mm256_setzero_ps();
    MPT_OMP(omp parallel for schedule(static) if (M * N >= MPT_PAR_MIN)) /* rows are independent */
    for (int64_t m = 0; m < M; m++) {
        float v[GEMM_CHUNK];
        uint8_t *col = aux + m * ld_bytes;
        memset(col, 0, (size_t)ld_bytes);
        for (int64_t n0 = 0; n0 < N; n0 += GEMM_CHUNK) { /* n0 is a multiple of 8: whole bytes */
            int64_t n = N - n0 < GEMM_CHUNK ? N - n0 : GEMM_CHUNK;
            const float *row = v;
            if (cd == MPT_DTYPE_F32) row = (const float *)C + m * N + n0;
            else mpt_cpu_widen(v, (const char *)C + (size_t)(m * N + n0) * mpt_dtype_size(cd), cd, n);
            int64_t j = 0;
            for (; j + 8 <= n; j += 8)
                col[(n0 + j) >> 3] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + j), zero, _CMP_GT_OQ));
            for (; j < n; j++) col[(n0 + j) >> 3] |= (uint8_t)(mpt_elem_relu_mask(row[j]) << ((n0 + j) & 7));
        }
    }
}

/* C[m, n] = mpt_elem_drelu(C[m, n], aux bit (m, n)) over the stored [M, N] C, on the stored bits: a kept value is
 * already in C's dtype and a dropped one is +0, all bits zero in every dtype; eight elements per mask byte. */
static void drelu_apply(void *C, mpt_dtype cd, const uint8_t *aux, int64_t M, int64_t N) {
    const int64_t ld_bytes = mpt_relu_aux_ld(N) / 8;
    const __m256i lanes32 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m128i lanes16 = _mm_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128);
    MPT_OMP(omp parallel for schedule(static) if (M * N >= MPT_PAR_MIN)) /* rows are independent */
    for (int64_t m = 0; m < M; m++) {
        const uint8_t *col = aux + m * ld_bytes;
        int64_t n = 0;
        if (cd == MPT_DTYPE_F32) {
            uint32_t *c = (uint32_t *)C + m * N;
            for (; n + 8 <= N; n += 8) {
                __m256i keep = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(col[n >> 3]), lanes32), lanes32);
                __m256i x = _mm256_loadu_si256((const __m256i *)(c + n));
                _mm256_storeu_si256((__m256i *)(c + n), _mm256_and_si256(x, keep));
            }
            for (; n < N; n++)
                if (!((col[n >> 3] >> (n & 7)) & 1)) c[n] = 0;
        } else {
            uint16_t *c = (uint16_t *)C + m * N;
            for (; n + 8 <= N; n += 8) {
                __m128i keep = _mm_cmpeq_epi16(_mm_and_si128(_mm_set1_epi16(col[n >> 3]), lanes16), lanes16);
                __m128i x = _mm_loadu_si128((const __m128i *)(c + n));
                _mm_storeu_si128((__m128i *)(c + n), _mm_and_si128(x, keep));
            }
            for (; n < N; n++)
                if (!((col[n >> 3] >> (n & 7)) & 1)) c[n] = 0;
        }
    }
}

size_t mpt_cpu_gemm_workspace(mpt_backend *be, const mpt_gemm_args *a) {
    mpt_gemm_args_check(a, 0);
    const mpt_gemm_args g = core_gemm(a);
    return mpt_cpu_gemm_ws_bytes_on(mpt_cpu_exec_of(be), &g);
}

void mpt_cpu_gemm(mpt_backend *be, const mpt_gemm_args *a) {
    mpt_gemm_args_check(a, 1);
    const mpt_gemm_args g = core_gemm(a);
    mpt_cpu_gemm_ws_on(mpt_cpu_exec_of(be), &g, be->workspace, be->workspace_bytes);
    switch (a->epilogue) {
    case MPT_EPILOGUE_BGRAD: /* column sums of A stored [K, M], the loop of the unfused be->bias_grad (same bits) */
        mpt_cpu_bias_grad(be, a->bias_grad, a->A, a->a_dtype, a->K, a->M, 0);
        break;
    case MPT_EPILOGUE_RELU_AUX_BIAS: relu_aux_from_output(a->aux, a->C, a->c_dtype, a->M, a->N); break;
    case MPT_EPILOGUE_DRELU_BGRAD: /* the unfused relu backward's bits, then bias_grad's loop over them */
        drelu_apply(a->C, a->c_dtype, a->aux, a->M, a->N);
        mpt_cpu_bias_grad(be, a->bias_grad, a->C, a->c_dtype, a->M, a->N, 0);
        break;
    default: break;
    }
}
