/*
 * tests/test_cuda.c - the CUDA backend (kernels/cuda) against FP64 references and against the CPU backend
 * (the oracle, ARCHITECTURE decisions 1 and 2), per operation and per precision. Suite 'cuda'.
 *
 * On a machine without a GPU (no NVIDIA driver, or a driver that reports no device; also a GPU older than
 * compute capability 8.0) the program prints "test_cuda: skipped: <reason>" and exits 77 (meson's "skipped")
 * before any Check runner exists; any other CUDA error (an old driver: cudaErrorInsufficientDriver, a
 * driver/library mismatch, no code for the GPU in this build) is a failure (exit 1) naming the error. With
 * MPT_REQUIRE_CUDA=1 in the environment (the GPU scripts set it) every case without a usable GPU fails. With one, it runs with CK_FORK=no (CUDA does not survive fork()), creates
 * one CUDA and one CPU backend, and prints the device, then the GEMM and convolution records at the end.
 *
 * GEMM and convolution (every math mode, transposes, output dtypes, epilogues, accumulation): each element is
 * compared with an FP64 reference evaluated from the stored operands. Bound (Higham, Accuracy and Stability of
 * Numerical Algorithms, sec. 3.1: |error of a K-term FP32 dot product| <= gamma_K * sum|a b|):
 *   T     = sum |a b| over the element's terms
 *   op    = TF32 mode: 2*2^-10 + 2^-20 (each FP32 operand enters the Tensor Core as TF32; cuBLAS/cuDNN may
 *           truncate (relative error < 2^-10) or round, so |a b - tf(a) tf(b)| <= op |a b|); else 0
 *   e32   = 2*(K + 4)*u32*(|alpha| T (1 + op) + |beta C_old| + |bias|) + |alpha| op T
 *           (K FP32 sums in any order, split-K included, plus at most 4 epilogue operations)
 *   bound = e32 + u_out*(|ref| + e32) + eta_out      (one rounding to the output dtype; eta_out = half the
 *           smallest subnormal of F16/BF16)
 * and the GPU result must lie within 2*bound of the CPU backend's (both are within bound of the reference).
 * Tensor Core proof: A = 1 + 2^-12 (not a TF32 value under any rounding mode: it rounds to 1), B = 1, K = 512:
 * FP32 math must give exactly 512.125 (no TF32 anywhere in fp32 mode) and TF32 math exactly 512 (the
 * operands were rounded to TF32, so Tensor Core math ran); on random full-mantissa inputs the two modes must
 * differ. Convolution does the same (exact values for the forward pass; tf32 and fp32 must differ on random data in
 * all three passes).
 *
 * Element-wise kernels, dropout, batch gather, the optimizer step, unscale, clip coefficient and the
 * loss-scale update are expected BIT-IDENTICAL to the CPU backend: both call the same per-element functions
 * of engine/numerics.h, with every multiply-add an explicit fmaf, IEEE division and square root on both
 * (nvcc's defaults, no --use_fast_math), the _rn intrinsics in the CUDA kernels where the CPU's expression
 * has separate operations, and FP64 per-step scalars computed by repeated squaring. Dropout masks come from
 * cuRAND's device Philox generator, which must reproduce the host generator (mpt_rng_uniform) bit for bit.
 * NaN results are compared as "both NaN" (the payload of a NaN produced by arithmetic differs between x86
 * and the GPU). Reductions whose summation order differs are bounded instead: the sum of squares within one
 * FP32 ulp (FP64 sums rounded once on both sides), softmax/cross-entropy and the bias gradient within the
 * bounds derived next to their tests. The fused softmax/cross-entropy (MPT_CUDA_FUSED_LOSS=1, on a backend of its
 * own) must be bit-identical to the four-kernel one on the same inputs, and meet the same bounds.
 *
 * Quantization (engine/backend.h "Quantization", engine/quant.h): the integer GEMM on both GPU paths (cuBLASLt's INT8
 * GEMM where its IMMA rules allow the shape, and the own kernel, forced with MPT_CUDA_GEMM_I8_OWN=1), the integer
 * convolution, fake quantization (INT8, INT4, E4M3, BF16; per row and per tensor; F32 and BF16 outputs) and the
 * activation codes and amax are BIT-IDENTICAL to the CPU: integer sums are exact in any order, a max does not depend on
 * it, and the rescale and the rounding rules are engine/numerics.h's; the K = 9216 sums equal an int64 reference.
 * Quantization-aware training on the GPU: after steps, every quantized working weight is the per-row fake quantization
 * of its master, recomputed on the host.
 *
 * Telemetry reductions (engine/backend.h, issue 32; opt-in: a backend created under MPT_CUDA_DEVICE_TELEMETRY=1): the
 * range counts, the rounding histogram and the lost-update counts of device tensors equal the host functions' on the
 * same data exactly; their FP64 sums (histogram mass, rounding errors, lost-update masses) lie within 2 gamma_n
 * sum |terms| of the host's (tests/telemetry_data.h) and are the same bits when run twice (deterministic); calls on
 * parts add up to the call on the whole. A training run gives the same checkpoint and the same telemetry.csv with and
 * without the variable (counts as text, sums within the printed digits).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "datasets/synthetic.h"
#include "engine/amp/master.h"
#include "engine/backend.h"
#include "engine/checkpoint.h"
#include "engine/layers/layers.h"
#include "engine/optim/optim.h"
#include "engine/rng.h"
#include "engine/train.h"
#include "cuda_gate.h"
#include "harness.h"
#include "engine/cuda_backend.h"
#include "models/models.h"
#include "grad_overwrite.h"
#include "telemetry_data.h"
#define TESTS_TMP_PREFIX "mpt_test_cuda"
#include "tmpdir.h"

/* Check's ck_assert* makes a syscall per passing assertion; call Check only on failure. */
#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

static mpt_backend *gpu, *cpu;

static const double U32 = 0x1p-24;

/* ---- buffers ----------------------------------------------------------------------------------------- */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) ck_abort_msg("out of host memory (%zu bytes)", n);
    return p;
}

static size_t nbytes(mpt_dtype t, int64_t n) { return (size_t)n * mpt_dtype_size(t); }

static void *dev_alloc(size_t bytes) {
    void *p = gpu->alloc(gpu, bytes);
    EXPECT(p != NULL, "cudaMalloc of %zu bytes failed", bytes);
    return p;
}

static void *dev_put(const void *host, size_t bytes) {
    void *p = dev_alloc(bytes);
    gpu->from_host(gpu, p, host, bytes);
    return p;
}

static void dev_get(void *host, const void *dev, size_t bytes) { gpu->to_host(gpu, host, dev, bytes); }

static void dev_free(void *p) { gpu->free(gpu, p); }

static void *host_dup(const void *src, size_t bytes) {
    void *p = xmalloc(bytes);
    memcpy(p, src, bytes);
    return p;
}

static void reserve(mpt_backend *be, size_t bytes) {
    EXPECT(mpt_backend_reserve_workspace(be, bytes) == MPT_OK, "%s: cannot reserve %zu bytes of workspace: %s",
           be->name, bytes, mpt_last_error());
}

/* n values of dtype t, uniform in [lo, hi) before rounding to t. */
static void *fill(tests_rng *r, mpt_dtype t, int64_t n, double lo, double hi) {
    void *p = xmalloc(nbytes(t, n));
    for (int64_t i = 0; i < n; i++) mpt_store_f32(p, t, i, (float)tests_uniform(r, lo, hi));
    return p;
}

static double ld(const void *p, mpt_dtype t, int64_t i) { return mpt_load_f32(p, t, i); }

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Element i of two buffers of dtype t holds the same value bit for bit, or NaN in both. */
static int same_bits(const void *a, const void *b, mpt_dtype t, int64_t i) {
    float x = mpt_load_f32(a, t, i), y = mpt_load_f32(b, t, i);
    if (isnan(x) && isnan(y)) return 1;
    if (t == MPT_DTYPE_F32) return bits(x) == bits(y);
    return ((const uint16_t *)a)[i] == ((const uint16_t *)b)[i];
}

/* ---- bounds --------------------------------------------------------------------------------------------- */

static mpt_dtype operand_dtype(mpt_math m) {
    return m == MPT_MATH_F16 ? MPT_DTYPE_F16 : m == MPT_MATH_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}
static double u_out(mpt_dtype t) { return t == MPT_DTYPE_F16 ? 0x1p-11 : t == MPT_DTYPE_BF16 ? 0x1p-8 : 0.0; }
static double eta_out(mpt_dtype t) { return t == MPT_DTYPE_F16 ? 0x1p-25 : t == MPT_DTYPE_BF16 ? 0x1p-134 : 0.0; }
/* The libraries' second rounding of a 16-bit output (measured on an H200, 2026-11-26, cuBLASLt 13.1 / cuDNN 9.19):
 * cuBLASLt's bias epilogues may round alpha*AB + beta*C to the 16-bit output type and add the bias to that, rounding
 * again, D = round16(round16(alpha*AB + beta*C) + bias), and a kernel may likewise round alpha*AB before adding
 * beta*C; which one does depends on the kernel the heuristic picks (the second run's gemm_rounding_model found
 * fp16 + bias rounded once on all three shapes, bf16 + bias twice on 37x23x129 only). cuDNN's beta blend does the
 * same with the prior value
 * (dx = round16(round16(conv) + dx_old); a forward bias goes the same way, conv.cu). Both failing elements of the
 * first run are reproduced exactly by these models from the tests' inputs (docs/cuda.md). The CPU rounds once.
 * The extra error is that of the first rounding: u_out * |first value| plus the subnormal spacing, where `first`
 * is the value rounded before the addition and e32 bounds its own accumulation error. 0 for FP32 outputs. */
static double second_rounding(mpt_dtype t, double first, double e32) {
    return t == MPT_DTYPE_F32 ? 0.0 : u_out(t) * (fabs(first) + e32) + eta_out(t);
}
static double op_err(mpt_math m) { return m == MPT_MATH_TF32 ? 2 * 0x1p-10 + 0x1p-20 : 0.0; }
static const mpt_math all_math[] = {MPT_MATH_FP32, MPT_MATH_TF32, MPT_MATH_F16, MPT_MATH_BF16};

static int tf32_overridden(void) {
    const char *e = getenv("NVIDIA_TF32_OVERRIDE");
    return e != NULL && strcmp(e, "0") == 0;
}

/* ================================ GEMM ================================================================= */

typedef struct gemm_case {
    mpt_math math;
    int ta, tb;
    int64_t M, N, K;
    mpt_dtype c_dtype, bias_dtype;
    mpt_epilogue ep;
    float alpha, beta;
    int misalign; /* offset A, B, C and the bias by one element (2 bytes for F16/BF16, 4 for F32): pointers aligned
                     to their element size only exercise the alignment part of the plan key (cuBLASLt's
                     MIN_ALIGNMENT preferences) and cuBLASLt's unvectorised kernels */
    int plan_unset; /* reserve the workspace gemm_workspace() asks for with every pointer unset, as a graph does at
                       build time (planned as 256-byte aligned), then run with the real pointers */
} gemm_case;

/* Bit (m, n) of a ReLU bitmask as engine/backend.h lays it out (written out here, not taken from the kernels). */
static int aux_bit(const uint8_t *aux, int64_t N, int64_t m, int64_t n) {
    const int64_t ld = (N + 127) / 128 * 128, i = m * ld + n;
    return (aux[i / 8] >> (i % 8)) & 1;
}

/* After a mask disagreed with [C > 0] in our layout: how many bits disagree under other layouts cuBLASLt might use,
 * so the first GPU run names the right one ("ours" = column m of cuBLASLt's C^T at bit m*ld + n, LSB first). */
static void describe_mask_layouts(char *out, size_t len, const uint8_t *aux, const void *C, mpt_dtype t, int64_t M,
                                  int64_t N) {
    const int64_t ldn = (N + 127) / 128 * 128, ldm = (M + 127) / 128 * 128;
    int64_t bad[4] = {0, 0, 0, 0};
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const int y = ld(C, t, m * N + n) > 0.0;
            const int64_t i0 = m * ldn + n, i2 = n * ldm + m, i3 = m * N + n;
            bad[0] += ((aux[i0 / 8] >> (i0 % 8)) & 1) != y;
            bad[1] += ((aux[i0 / 8] >> (7 - i0 % 8)) & 1) != y; /* most significant bit first */
            bad[2] += i2 / 8 < (int64_t)mpt_relu_aux_bytes(M, N) && ((aux[i2 / 8] >> (i2 % 8)) & 1) != y; /* rows */
            bad[3] += ((aux[i3 / 8] >> (i3 % 8)) & 1) != y; /* leading dimension N, unpadded */
        }
    snprintf(out, len,
             "bits differing from [C > 0] of %lld: ours %lld; MSB-first bytes %lld; bit n*ld(M)+m %lld; ld = N %lld",
             (long long)(M * N), (long long)bad[0], (long long)bad[1], (long long)bad[2], (long long)bad[3]);
}

static void run_gemm_case(const gemm_case *gc, uint64_t seed, const char *tag) {
    tests_rng r = {seed};
    const mpt_dtype ab = operand_dtype(gc->math);
    const int64_t M = gc->M, N = gc->N, K = gc->K;
    const int64_t off = gc->misalign ? 1 : 0; /* elements of A and B */
    const int64_t coff = gc->misalign ? 1 : 0, boff = gc->misalign ? 1 : 0;
    void *A = fill(&r, ab, M * K + off, -1, 1), *B = fill(&r, ab, K * N + off, -1, 1);
    void *C0 = fill(&r, gc->c_dtype, M * N + coff, -1, 1);
    if (gc->beta == 0.0f) /* C must not be read when beta == 0: poison it */
        for (int64_t i = 0; i < M * N + coff; i++) mpt_store_f32(C0, gc->c_dtype, i, NAN);
    void *bias_buf = mpt_epilogue_adds_bias(gc->ep) ? fill(&r, gc->bias_dtype, N + boff, -1, 1) : NULL;
    void *bias = bias_buf ? (char *)bias_buf + nbytes(gc->bias_dtype, boff) : NULL;
    /* the ReLU mask: written by RELU_AUX_BIAS (poisoned first), random input of DRELU_BGRAD (padding bits too) */
    const int uses_aux = mpt_epilogue_uses_aux(gc->ep), drelu = gc->ep == MPT_EPILOGUE_DRELU_BGRAD;
    const int bgrad = gc->ep == MPT_EPILOGUE_BGRAD; /* trans_a = 1, alpha 1, C F32: bias gradient = sums of A over K */
    const size_t aux_bytes = uses_aux ? mpt_relu_aux_bytes(M, N) : 0;
    uint8_t *auxh = uses_aux ? xmalloc(aux_bytes) : NULL;
    for (size_t i = 0; i < aux_bytes; i++) auxh[i] = drelu ? (uint8_t)tests_int(&r, 0, 255) : 0x5a;

    mpt_gemm_args g = {.trans_a = gc->ta, .trans_b = gc->tb, .M = M, .N = N, .K = K, .a_dtype = ab, .b_dtype = ab,
                       .c_dtype = gc->c_dtype, .bias_dtype = gc->bias_dtype, .alpha = gc->alpha, .beta = gc->beta,
                       .math = gc->math, .epilogue = gc->ep, .tag = tag};
    /* GPU */
    char *dA = dev_put(A, nbytes(ab, M * K + off)), *dB = dev_put(B, nbytes(ab, K * N + off));
    char *dC = dev_put(C0, nbytes(gc->c_dtype, M * N + coff));
    void *dbias = bias_buf ? dev_put(bias_buf, nbytes(gc->bias_dtype, N + boff)) : NULL;
    mpt_gemm_args gg = g;
    gg.A = dA + nbytes(ab, off);
    gg.B = dB + nbytes(ab, off);
    gg.C = dC + nbytes(gc->c_dtype, coff);
    gg.bias = dbias ? (char *)dbias + nbytes(gc->bias_dtype, boff) : NULL;
    gg.aux = uses_aux ? dev_put(auxh, aux_bytes) : NULL;
    gg.bias_grad = drelu ? dev_alloc((size_t)N * 4) : bgrad ? dev_alloc((size_t)M * 4) : NULL;
    mpt_gemm_args planned = gg;
    if (gc->plan_unset) {
        planned.A = planned.B = planned.bias = NULL;
        planned.C = planned.aux = NULL;
        planned.bias_grad = NULL;
    }
    reserve(gpu, gpu->gemm_workspace(gpu, &planned));
    gpu->gemm(gpu, &gg);
    void *Cg = xmalloc(nbytes(gc->c_dtype, M * N));
    dev_get(Cg, gg.C, nbytes(gc->c_dtype, M * N));
    uint8_t *auxg = uses_aux ? xmalloc(aux_bytes) : NULL;
    const int64_t n_bgrad = drelu ? N : bgrad ? M : 0; /* bias gradient elements */
    float *dbg = n_bgrad ? xmalloc((size_t)n_bgrad * 4) : NULL;
    if (uses_aux) dev_get(auxg, gg.aux, aux_bytes);
    if (n_bgrad) dev_get(dbg, gg.bias_grad, (size_t)n_bgrad * 4);
    /* CPU */
    void *Cc = host_dup((char *)C0 + nbytes(gc->c_dtype, coff), nbytes(gc->c_dtype, M * N));
    mpt_gemm_args gcpu = g;
    gcpu.A = (char *)A + nbytes(ab, off);
    gcpu.B = (char *)B + nbytes(ab, off);
    gcpu.C = Cc;
    gcpu.bias = bias;
    gcpu.aux = uses_aux ? host_dup(auxh, aux_bytes) : NULL;
    gcpu.bias_grad = n_bgrad ? xmalloc((size_t)n_bgrad * 4) : NULL;
    reserve(cpu, cpu->gemm_workspace(cpu, &gcpu));
    cpu->gemm(cpu, &gcpu);
    int64_t mask_bad = 0, mask_zero = 0; /* RELU_AUX_BIAS: bits != [C > 0]; bits set where C rounded to 0 */
    double *db_bound = drelu ? calloc((size_t)N, sizeof(double)) : NULL;

    const double op = op_err(gc->math);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0, T = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = ld(gcpu.A, ab, gc->ta ? k * M + i : i * K + k);
                double b = ld(gcpu.B, ab, gc->tb ? j * K + k : k * N + j);
                acc += a * b;
                T += fabs(a * b);
            }
            double cold = gc->beta != 0.0f ? ld((char *)C0 + nbytes(gc->c_dtype, coff), gc->c_dtype, i * N + j) : 0.0;
            double bv = bias ? ld(bias, gc->bias_dtype, j) : 0.0;
            double ref = gc->alpha * acc + gc->beta * cold + bv;
            if (gc->ep == MPT_EPILOGUE_RELU_BIAS || gc->ep == MPT_EPILOGUE_RELU_AUX_BIAS) ref = ref > 0 ? ref : 0;
            if (drelu && !aux_bit(auxh, N, i, j)) ref = 0.0, T = 0.0;
            double e32 =
                2.0 * (double)(K + 4) * U32 * (fabs(gc->alpha) * T * (1 + op) + fabs(gc->beta * cold) + fabs(bv)) +
                fabs(gc->alpha) * op * T;
            double bound = e32 + u_out(gc->c_dtype) * (fabs(ref) + e32) + eta_out(gc->c_dtype);
            /* The GPU may round a 16-bit output twice (second_rounding): alpha*AB + beta*C before adding the bias,
             * or alpha*AB before adding beta*C (the H200's second run, 2026-11-26: fp16 128x96x256, C F16, no
             * bias, beta 1, was 0.86 ulp off). The larger of the two first values bounds either. */
            if (bias || gc->beta != 0.0f)
                bound += second_rounding(gc->c_dtype, fmax(fabs(gc->alpha * acc + gc->beta * cold),
                                                           fabs(gc->alpha * acc)), e32);
            double vg = ld(Cg, gc->c_dtype, i * N + j), vc = ld(Cc, gc->c_dtype, i * N + j);
            EXPECT(fabs(vg - ref) <= bound,
                   "gemm %s (math %s, ta %d tb %d, %lldx%lldx%lld, C %s, epilogue %d, beta %g): C[%lld,%lld] = %.9g, "
                   "FP64 reference %.9g, bound %.3g",
                   tag, mpt_math_name(gc->math), gc->ta, gc->tb, (long long)M, (long long)N, (long long)K,
                   mpt_dtype_name(gc->c_dtype), (int)gc->ep, (double)gc->beta, (long long)i, (long long)j, vg, ref,
                   bound);
            EXPECT(fabs(vg - vc) <= 2 * bound, "gemm %s: C[%lld,%lld] GPU %.9g vs CPU %.9g, bound %.3g", tag,
                   (long long)i, (long long)j, vg, vc, 2 * bound);
            if (gc->ep == MPT_EPILOGUE_RELU_AUX_BIAS) {
                const int bit = aux_bit(auxg, N, i, j);
                if (bit && vg == 0.0 && ref <= bound) mask_zero++; /* cuBLASLt's [FP32 value > 0], rounded to 0 */
                else if (bit != (vg > 0.0)) mask_bad++;
            }
            if (drelu) db_bound[j] += 2.0 * bound + 2.0 * (double)M * U32 * fabs(vc);
        }
    if (gc->ep == MPT_EPILOGUE_RELU_AUX_BIAS) {
        char why[256] = "";
        if (mask_bad) describe_mask_layouts(why, sizeof why, auxg, Cg, gc->c_dtype, M, N);
        EXPECT(mask_bad == 0, "gemm %s (math %s, %lldx%lldx%lld): %lld ReLU mask bits differ from [C > 0] (%s)", tag,
               mpt_math_name(gc->math), (long long)M, (long long)N, (long long)K, (long long)mask_bad, why);
        EXPECT(mask_zero <= M * N / 100, "gemm %s: %lld mask bits set where C is 0", tag, (long long)mask_zero);
        if (mask_zero)
            fprintf(stderr, "note: gemm %s: %lld mask bits set where the stored C rounded to 0 (cuBLASLt's rule)\n", tag,
                    (long long)mask_zero);
    }
    if (bgrad) /* sums of the stored operand over K in any FP32 order (+ its TF32 rounding in tf32 mode, see
                  test_gemm_bgrad_epilogue), from the bound of test_gemm_bgrad_epilogue */
        for (int64_t i = 0; i < M; i++) {
            double T = 0.0;
            for (int64_t k = 0; k < K; k++) T += fabs(ld(gcpu.A, ab, k * M + i));
            const double bound = 2.0 * (double)K * U32 * T + (gc->math == MPT_MATH_TF32 ? 0x1p-11 : 0.0) * T;
            EXPECT(fabs((double)dbg[i] - (double)gcpu.bias_grad[i]) <= bound,
                   "gemm %s (math %s): BGRAD bias gradient [%lld] GPU %.9g CPU %.9g, bound %.3g", tag,
                   mpt_math_name(gc->math), (long long)i, (double)dbg[i], (double)gcpu.bias_grad[i], bound);
        }
    if (drelu)
        for (int64_t j = 0; j < N; j++) /* each C element's GPU-CPU bound, plus FP32 summation over M in any order */
            EXPECT(fabs((double)dbg[j] - (double)gcpu.bias_grad[j]) <= db_bound[j],
                   "gemm %s (math %s): DRELU_BGRAD bias gradient [%lld] GPU %.9g CPU %.9g, bound %.3g", tag,
                   mpt_math_name(gc->math), (long long)j, (double)dbg[j], (double)gcpu.bias_grad[j], db_bound[j]);
    if (uses_aux) {
        dev_free(gg.aux);
        free(gcpu.aux);
        free(auxh);
        free(auxg);
    }
    if (n_bgrad) {
        dev_free(gg.bias_grad);
        free(gcpu.bias_grad);
        free(dbg);
    }
    free(db_bound);
    dev_free(dA);
    dev_free(dB);
    dev_free(dC);
    if (dbias) dev_free(dbias);
    free(A);
    free(B);
    free(C0);
    free(bias_buf);
    free(Cg);
    free(Cc);
}

START_TEST(test_gemm_all_modes) {
    static const int64_t shapes[][3] = {{37, 23, 129}, {128, 96, 256}, {5, 300, 17}};
    static const int trans[][2] = {{0, 0}, {0, 1}, {1, 0}};
    uint64_t seed = 1000;
    for (size_t mi = 0; mi < 4; mi++) {
        mpt_math m = all_math[mi];
        mpt_dtype ab = operand_dtype(m);
        mpt_dtype outs[2] = {MPT_DTYPE_F32, ab};
        int n_out = ab == MPT_DTYPE_F32 ? 1 : 2;
        for (size_t si = 0; si < 3; si++)
            for (size_t ti = 0; ti < 3; ti++)
                for (int oi = 0; oi < n_out; oi++)
                    for (int e = 0; e < 4; e++) {
                        gemm_case gc = {.math = m, .ta = trans[ti][0], .tb = trans[ti][1], .M = shapes[si][0],
                                        .N = shapes[si][1], .K = shapes[si][2], .c_dtype = outs[oi],
                                        .bias_dtype = outs[oi], .alpha = 1.0f, .beta = 0.0f};
                        if (e == 1) gc.beta = 1.0f; /* accumulate (weight gradients: dW += ...) */
                        if (e == 2) gc.ep = MPT_EPILOGUE_BIAS;
                        if (e == 3) {
                            gc.ep = MPT_EPILOGUE_RELU_BIAS;
                            gc.alpha = 0.75f;
                            gc.beta = 0.5f;
                        }
                        char tag[48];
                        snprintf(tag, sizeof tag, "all.%s.%zu%zu%d%d", mpt_math_name(m), si, ti, oi, e);
                        run_gemm_case(&gc, seed++, tag);
                    }
    }
}
END_TEST

/* Configurations without a direct cuBLASLt path (bias dtype != C dtype, 16-bit C with FP32 operands), an
 * empty K, and pointers aligned to one element only (2 bytes for F16/BF16, 4 for F32), with and without the
 * bias epilogue and with beta = 1. */
START_TEST(test_gemm_two_step_and_alignment) {
    gemm_case c1 = {.math = MPT_MATH_F16, .M = 64, .N = 40, .K = 72, .c_dtype = MPT_DTYPE_F16,
                    .bias_dtype = MPT_DTYPE_F32, .ep = MPT_EPILOGUE_RELU_BIAS, .alpha = 1.0f, .beta = 0.0f};
    run_gemm_case(&c1, 77, "two_step.f16_bias_f32");
    gemm_case c2 = {.math = MPT_MATH_FP32, .tb = 1, .M = 33, .N = 65, .K = 100, .c_dtype = MPT_DTYPE_BF16,
                    .bias_dtype = MPT_DTYPE_BF16, .ep = MPT_EPILOGUE_BIAS, .alpha = 1.0f, .beta = 1.0f};
    run_gemm_case(&c2, 78, "two_step.fp32_c_bf16");
    gemm_case c3 = {.math = MPT_MATH_BF16, .ta = 1, .M = 50, .N = 31, .K = 0, .c_dtype = MPT_DTYPE_F32,
                    .bias_dtype = MPT_DTYPE_F32, .ep = MPT_EPILOGUE_BIAS, .alpha = 1.0f, .beta = 0.5f};
    run_gemm_case(&c3, 79, "empty_k");
    for (size_t mi = 0; mi < 4; mi++) {
        gemm_case c4 = {.math = all_math[mi], .M = 61, .N = 47, .K = 95, .c_dtype = operand_dtype(all_math[mi]),
                        .bias_dtype = operand_dtype(all_math[mi]), .ep = MPT_EPILOGUE_BIAS, .alpha = 1.0f,
                        .beta = 0.0f, .misalign = 1};
        run_gemm_case(&c4, 80 + mi, "misaligned");
        gemm_case c5 = {.math = all_math[mi], .ta = 1, .M = 40, .N = 33, .K = 64, .c_dtype = MPT_DTYPE_F32,
                        .bias_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .beta = 1.0f, .misalign = 1};
        run_gemm_case(&c5, 90 + mi, "misaligned.accumulate");
    }
    int found = 0;
    for (int i = 0; i < mpt_cuda_gemm_record_count(gpu); i++) {
        mpt_cuda_gemm_record rec;
        EXPECT(mpt_cuda_gemm_record_get(gpu, i, &rec), "record %d", i);
        if (strcmp(rec.tag, "two_step.f16_bias_f32") == 0 || strcmp(rec.tag, "two_step.fp32_c_bf16") == 0) {
            EXPECT(strcmp(rec.path, "cublasLt D=F32 + epilogue kernel") == 0, "%s ran as '%s'", rec.tag, rec.path);
            EXPECT(strcmp(rec.d_type, "CUDA_R_32F") == 0, "%s: D is %s", rec.tag, rec.d_type);
            found++;
        }
    }
    EXPECT(found == 2, "expected the two two-step records, found %d", found);
}
END_TEST

/* ---- the second rounding of 16-bit outputs, pinned (second_rounding) ---------------------------------------
 * Operands chosen so that every product and sum is exact in FP32: 1 + p*u with u the output format's spacing at 1
 * and p = (1 + i/4)(1 + j/4)/2 in [0.5, 1.53] (i, j = row, column mod 4), plus an addend -q*u (q = 1/4, 1/2, 3/4)
 * that puts the exact result on another side of a rounding boundary than the once-rounded 1 + p*u for some
 * elements. Each output must be the once-rounded value (what the CPU computes) or the twice-rounded one (the model
 * measured on the H200), never a third value; the counts say which the library did. */
static double round_to(mpt_dtype t, double x) {
    uint32_t h; /* room for any dtype's element (the tests call it with F16 and BF16) */
    mpt_store_f32(&h, t, 0, (float)x);
    return mpt_load_f32(&h, t, 0);
}
static double out_spacing(mpt_dtype t) { return t == MPT_DTYPE_F16 ? 0x1p-10 : 0x1p-7; }
static double model_p(int64_t i, int64_t j) { return 0.5 * (1 + (double)(i % 4) / 4) * (1 + (double)(j % 4) / 4); }
static double model_q(int64_t j) { return 0.25 * (double)(1 + (j / 4) % 3); }

/* Classifies got against the two models; returns 0 for a third value. */
static int rounding_model_tally(mpt_dtype t, double exact_first, double addend, double got, int64_t *once,
                                int64_t *twice, int64_t *either) {
    const double one = round_to(t, exact_first + addend), two = round_to(t, round_to(t, exact_first) + addend);
    if (one == two) {
        (*either)++;
        return got == one;
    }
    if (got == one) (*once)++;
    else if (got == two) (*twice)++;
    else return 0;
    return 1;
}

static void gemm_rounding_model(mpt_math math, int64_t M, int64_t N, int64_t K) {
    const mpt_dtype t = operand_dtype(math);
    const double u = out_spacing(t);
    void *A = xmalloc(nbytes(t, M * K)), *B = xmalloc(nbytes(t, N * K)), *bias = xmalloc(nbytes(t, N));
    for (int64_t i = 0; i < M * K; i++) mpt_store_f32(A, t, i, 0.0f);
    for (int64_t i = 0; i < N * K; i++) mpt_store_f32(B, t, i, 0.0f);
    for (int64_t m = 0; m < M; m++) { /* A [M, K] row-major: row m = (1, u/2 * (1 + i/4), 0, ...) */
        mpt_store_f32(A, t, m * K, 1.0f);
        mpt_store_f32(A, t, m * K + 1, (float)(0.5 * u * (1 + (double)(m % 4) / 4)));
    }
    for (int64_t n = 0; n < N; n++) { /* B stored [N, K] (tb = 1, the forward layer's layout): (1, 1 + j/4, 0, ...) */
        mpt_store_f32(B, t, n * K, 1.0f);
        mpt_store_f32(B, t, n * K + 1, (float)(1 + (double)(n % 4) / 4));
        mpt_store_f32(bias, t, n, (float)(-model_q(n) * u));
    }
    char tag[48];
    snprintf(tag, sizeof tag, "rounding_model.%s", mpt_math_name(math));
    mpt_gemm_args g = {.trans_a = 0, .trans_b = 1, .M = M, .N = N, .K = K, .a_dtype = t, .b_dtype = t, .c_dtype = t,
                       .bias_dtype = t, .alpha = 1.0f, .beta = 0.0f, .math = math, .epilogue = MPT_EPILOGUE_BIAS,
                       .tag = tag};
    g.A = dev_put(A, nbytes(t, M * K));
    g.B = dev_put(B, nbytes(t, N * K));
    g.bias = dev_put(bias, nbytes(t, N));
    g.C = dev_alloc(nbytes(t, M * N));
    reserve(gpu, gpu->gemm_workspace(gpu, &g));
    gpu->gemm(gpu, &g);
    void *C = xmalloc(nbytes(t, M * N));
    dev_get(C, g.C, nbytes(t, M * N));
    int64_t once = 0, twice = 0, either = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const double first = 1 + model_p(m, n) * u, add = -model_q(n) * u, got = ld(C, t, m * N + n);
            EXPECT(rounding_model_tally(t, first, add, got, &once, &twice, &either),
                   "gemm %s %lldx%lldx%lld bias epilogue, C %s: C[%lld,%lld] = %.9g is neither round(%.9g) = %.9g (one "
                   "rounding) nor round(round(%.9g) + %.9g) = %.9g", tag, (long long)M, (long long)N, (long long)K,
                   mpt_dtype_name(t), (long long)m, (long long)n, got, first + add, round_to(t, first + add), first,
                   add, round_to(t, round_to(t, first) + add));
        }
    printf("test_cuda: rounding model: gemm %s %lldx%lldx%lld C %s + bias (cuBLASLt): of %lld elements where one and "
           "two roundings differ, %lld rounded once, %lld twice (%lld agree either way)\n", mpt_math_name(math),
           (long long)M, (long long)N, (long long)K, mpt_dtype_name(t), (long long)(once + twice), (long long)once,
           (long long)twice, (long long)either);
    dev_free((void *)g.A);
    dev_free((void *)g.B);
    dev_free((void *)g.bias);
    dev_free(g.C);
    free(A);
    free(B);
    free(bias);
    free(C);
}

START_TEST(test_gemm_rounding_model) {
    static const int64_t shapes[][3] = {{128, 512, 784}, {128, 84, 120}, {37, 23, 129}};
    for (int mi = 2; mi < 4; mi++)
        for (size_t si = 0; si < 3; si++) gemm_rounding_model(all_math[mi], shapes[si][0], shapes[si][1], shapes[si][2]);
}
END_TEST

/* A direct cuBLASLt call refused at run time falls back to the two-step path, for every epilogue: each case runs on
 * a CUDA backend of its own created with MPT_CUDA_GEMM_REFUSE_DIRECT=1 (every direct call is answered
 * CUBLAS_STATUS_NOT_SUPPORTED before it runs), with the workspace reserved as a graph reserves it at build time
 * (gemm_workspace() with the pointers unset, planned as 256-byte aligned) and operands one element off that
 * alignment, so the call also takes the plan made at run time for the real alignment. The results must meet
 * run_gemm_case's bounds against the FP64 reference and the CPU, and the record must say "(direct refused)" with
 * an FP32 D. Without the fallback a refused call aborted (every epilogue but the ReLU-mask ones), and the
 * two-step path's FP32 D did not fit the workspace reserved for a direct plan. */
static mpt_backend *shared_gpu; /* the program's CUDA backend, while a test swaps in a backend of its own */

static void restore_gpu(void) {
    if (shared_gpu && gpu != shared_gpu) mpt_backend_free(&gpu);
    if (shared_gpu) gpu = shared_gpu;
    shared_gpu = NULL;
}

/* A CUDA backend of the test's own, created with each variable of the space-separated list `vars` set to 1 (the
 * backend reads them at creation; they are unset again at once). */
static mpt_backend *cuda_backend_with(const char *vars) {
    char list[256], *save = NULL;
    snprintf(list, sizeof list, "%s", vars);
    for (char *v = strtok_r(list, " ", &save); v; v = strtok_r(NULL, " ", &save)) setenv(v, "1", 1);
    mpt_backend *be = mpt_backend_cuda_create();
    snprintf(list, sizeof list, "%s", vars);
    for (char *v = strtok_r(list, " ", &save); v; v = strtok_r(NULL, " ", &save)) unsetenv(v);
    EXPECT(be != NULL, "a CUDA backend with %s set to 1: %s", vars, mpt_last_error());
    return be;
}

/* Makes be the backend the helpers (dev_*) and the test use until restore_gpu, which frees it. */
static void swap_in(mpt_backend *be) {
    shared_gpu = gpu;
    gpu = be;
}

/* MPT_CUDA_BIAS_GRAD_ILP=1 (kernels/cuda/elementwise.cu bias_grad_kernel<8>): the column sums with 8 rows' loads in
 * flight per thread, added in the same row order as bias_grad_kernel<1>, must give the same bits: every dtype,
 * accumulate 0 and 1, row counts around the 64-row batch of loads (1, 7, 8, 63, 64, 65, 128, 1000) and ragged column
 * counts; one column holds only -0.0 (the sign of a zero sum: +0.0 in both, the FP32 accumulator starts at +0) and
 * one spans 20 binades (where another order gives other bits). */
START_TEST(test_bias_grad_ilp_bit_identical) {
    static const int64_t rows[] = {1, 7, 8, 63, 64, 65, 128, 1000}, cols[] = {1, 33, 512};
    const mpt_dtype dts[] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};
    mpt_backend *ilp = cuda_backend_with("MPT_CUDA_BIAS_GRAD_ILP");
    tests_rng r = {2900};
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
        for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++)
            for (size_t di = 0; di < 3; di++)
                for (int accumulate = 0; accumulate < 2; accumulate++) {
                    const int64_t R = rows[ri], C = cols[ci], n = R * C;
                    const mpt_dtype t = dts[di];
                    void *dy = xmalloc(nbytes(t, n));
                    for (int64_t i = 0; i < n; i++) {
                        const int64_t c = i % C;
                        const float v = c == 0 && C > 1 ? -0.0f
                                        : c == 1      ? (float)ldexp(tests_uniform(&r, -1, 1), (int)(i / C % 20) - 10)
                                                      : (float)tests_uniform(&r, -1, 1);
                        mpt_store_f32(dy, t, i, v);
                    }
                    float *db0 = fill(&r, MPT_DTYPE_F32, C, -1, 1), *got[2];
                    for (int k = 0; k < 2; k++) {
                        mpt_backend *be = k ? ilp : gpu;
                        void *ddy = be->alloc(be, nbytes(t, n)), *ddb = be->alloc(be, (size_t)C * 4);
                        EXPECT(ddy && ddb, "cudaMalloc failed");
                        be->from_host(be, ddy, dy, nbytes(t, n));
                        be->from_host(be, ddb, db0, (size_t)C * 4);
                        be->bias_grad(be, (float *)ddb, ddy, t, R, C, accumulate);
                        got[k] = xmalloc((size_t)C * 4);
                        be->to_host(be, got[k], ddb, (size_t)C * 4);
                        be->free(be, ddy);
                        be->free(be, ddb);
                    }
                    for (int64_t c = 0; c < C; c++)
                        EXPECT(bits(got[0][c]) == bits(got[1][c]),
                               "bias_grad %lldx%lld %s accumulate %d: column %lld %a (one load at a time) vs %a (8 "
                               "in flight)", (long long)R, (long long)C, mpt_dtype_name(t), accumulate, (long long)c,
                               (double)got[0][c], (double)got[1][c]);
                    free(dy);
                    free(db0);
                    free(got[0]);
                    free(got[1]);
                }
    /* the same bits by design, so only the count tells that the variable was read and bias_grad_kernel<8> ran: every
     * call of the ILP backend, and none of the program's (unless its environment turned the path on) */
    const int64_t n_calls = (int64_t)(sizeof rows / sizeof *rows) * (int64_t)(sizeof cols / sizeof *cols) * 3 * 2;
    EXPECT(mpt_cuda_opt_in_calls(ilp, MPT_CUDA_OPT_BIAS_GRAD_ILP) == n_calls,
           "MPT_CUDA_BIAS_GRAD_ILP=1: %lld of the %lld bias_grad calls took the 8-row path",
           (long long)mpt_cuda_opt_in_calls(ilp, MPT_CUDA_OPT_BIAS_GRAD_ILP), (long long)n_calls);
    EXPECT(mpt_test_env_on("MPT_CUDA_BIAS_GRAD_ILP") || mpt_cuda_opt_in_calls(gpu, MPT_CUDA_OPT_BIAS_GRAD_ILP) == 0,
           "the program's backend took the 8-row path without MPT_CUDA_BIAS_GRAD_ILP=1");
    mpt_backend_free(&ilp);
}
END_TEST

START_TEST(test_gemm_refused_direct_falls_back) {
    static const struct {
        mpt_epilogue ep;
        mpt_math math;
        int ta;
        int64_t M, N, K;
        const char *tag;
    } cases[] = {
        {MPT_EPILOGUE_NONE, MPT_MATH_FP32, 0, 61, 47, 95, "refused.none"},
        {MPT_EPILOGUE_BIAS, MPT_MATH_TF32, 0, 128, 64, 96, "refused.bias"},
        {MPT_EPILOGUE_RELU_BIAS, MPT_MATH_F16, 0, 33, 65, 100, "refused.relu_bias"},
        {MPT_EPILOGUE_BGRAD, MPT_MATH_BF16, 1, 64, 40, 128, "refused.bgrad"},
        {MPT_EPILOGUE_RELU_AUX_BIAS, MPT_MATH_F16, 0, 128, 133, 72, "refused.relu_aux_bias"},
        {MPT_EPILOGUE_DRELU_BGRAD, MPT_MATH_BF16, 0, 128, 64, 96, "refused.drelu_bgrad"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mpt_backend *refusing = cuda_backend_with("MPT_CUDA_GEMM_REFUSE_DIRECT");
        swap_in(refusing);
        const mpt_dtype t = operand_dtype(cases[i].math);
        const int bgrad = cases[i].ep == MPT_EPILOGUE_BGRAD;
        gemm_case c = {.math = cases[i].math, .ta = cases[i].ta, .M = cases[i].M, .N = cases[i].N, .K = cases[i].K,
                       .c_dtype = bgrad ? MPT_DTYPE_F32 : t, .bias_dtype = t, .ep = cases[i].ep, .alpha = 1.0f,
                       .beta = 0.0f, .misalign = 1, .plan_unset = 1};
        run_gemm_case(&c, 300 + i, cases[i].tag);
        int found = 0;
        for (int r = 0; r < mpt_cuda_gemm_record_count(gpu); r++) {
            mpt_cuda_gemm_record rec;
            EXPECT(mpt_cuda_gemm_record_get(gpu, r, &rec), "record %d", r);
            if (strcmp(rec.tag, cases[i].tag) != 0) continue;
            found++;
            /* A configuration whose heuristic offers no direct algorithm is planned two-step before any call
             * (the H200 declined bf16 DRELU_BGRAD so, 2026-11-26): then there is no direct call to refuse, and
             * the record is the planned two-step path, with the same FP32 D. */
            const int planned_two_step = strstr(rec.path, "D=F32 +") != NULL;
            EXPECT((strstr(rec.path, "(direct refused)") != NULL || planned_two_step) &&
                       strcmp(rec.d_type, "CUDA_R_32F") == 0,
                   "%s: the refused call ran as '%s' with D %s", rec.tag, rec.path, rec.d_type);
            if (strstr(rec.path, "(direct refused)") == NULL)
                printf("test_cuda: %s: planned two-step (no direct algorithm offered): '%s'\n", rec.tag, rec.path);
        }
        EXPECT(found == 1, "%s: %d records", cases[i].tag, found);
        restore_gpu();
    }
}
END_TEST

/* ---- telemetry reductions on the device (issue 32) ------------------------------------------------------------ */

/* A CUDA backend with the telemetry reductions (MPT_CUDA_DEVICE_TELEMETRY=1 while it is created), swapped in as
 * `gpu` until restore_gpu. The program's backend, created without the variable, must not have them (opt-in). */
static void swap_in_device_telemetry(void) {
    EXPECT(gpu->telemetry_range == NULL && gpu->telemetry_rounding == NULL && gpu->telemetry_lost == NULL &&
               gpu->telemetry_lost_counterfactual == NULL,
           "the CUDA backend has device telemetry without MPT_CUDA_DEVICE_TELEMETRY=1");
    mpt_backend *be = cuda_backend_with("MPT_CUDA_DEVICE_TELEMETRY");
    EXPECT(be->telemetry_range && be->telemetry_rounding && be->telemetry_lost && be->telemetry_lost_counterfactual,
           "MPT_CUDA_DEVICE_TELEMETRY=1 did not set the telemetry entries");
    swap_in(be);
}

/* One size: every dtype's range and lost counts, both targets' histograms with errors at two shifts, on the device
 * against the host functions; each call twice (the same bits), and split in two calls (the counts of the whole). */
static void telemetry_reductions_case(int64_t n, uint64_t seed) {
    static const mpt_dtype dts[3] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};
    tests_rng rng = {seed};
    const int64_t h1 = n / 3;
    char what[96];
    void *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4);
    float *v = xmalloc((size_t)n * 4);
    for (int t = 0; t < 3; t++) {
        const mpt_dtype dt = dts[t];
        const size_t sz = mpt_dtype_size(dt);
        snprintf(what, sizeof what, "range %s n=%lld", mpt_dtype_name(dt), (long long)n);
        tel_fill_stored(&rng, dt, a, n);
        void *da = dev_put(a, (size_t)n * sz);
        mpt_range rg, r2, rs, rh;
        memset(&rg, 0, sizeof rg), memset(&r2, 0, sizeof r2), memset(&rs, 0, sizeof rs), memset(&rh, 0, sizeof rh);
        gpu->telemetry_range(gpu, &rg, da, dt, n);
        gpu->telemetry_range(gpu, &r2, da, dt, n);
        gpu->telemetry_range(gpu, &rs, da, dt, h1);
        gpu->telemetry_range(gpu, &rs, (char *)da + (size_t)h1 * sz, dt, n - h1);
        mpt_range_count(&rh, a, dt, n);
        tel_check_range(&rg, &rh, what);
        tel_check_range(&r2, &rh, what);
        tel_check_range(&rs, &rh, what);

        snprintf(what, sizeof what, "lost %s n=%lld", mpt_dtype_name(dt), (long long)n);
        tel_fill_lost(&rng, dt, a, b, v, n);
        void *db = dev_put(b, (size_t)n * sz);
        dev_free(da);
        da = dev_put(a, (size_t)n * sz);
        float *dv = dev_put(v, (size_t)n * 4);
        for (int cf = 0; cf < (dt == MPT_DTYPE_F32 ? 1 : 2); cf++) {
            mpt_lost lg, l2, ls, lh;
            memset(&lg, 0, sizeof lg), memset(&l2, 0, sizeof l2), memset(&ls, 0, sizeof ls), memset(&lh, 0, sizeof lh);
            if (cf) {
                gpu->telemetry_lost_counterfactual(gpu, &lg, da, dt, dv, n);
                gpu->telemetry_lost_counterfactual(gpu, &l2, da, dt, dv, n);
                gpu->telemetry_lost_counterfactual(gpu, &ls, da, dt, dv, h1);
                gpu->telemetry_lost_counterfactual(gpu, &ls, (char *)da + (size_t)h1 * sz, dt, dv + h1, n - h1);
                mpt_lost_counterfactual(&lh, a, dt, v, n);
            } else {
                gpu->telemetry_lost(gpu, &lg, da, db, dt, dv, n);
                gpu->telemetry_lost(gpu, &l2, da, db, dt, dv, n);
                gpu->telemetry_lost(gpu, &ls, da, db, dt, dv, h1);
                gpu->telemetry_lost(gpu, &ls, (char *)da + (size_t)h1 * sz, (char *)db + (size_t)h1 * sz, dt, dv + h1,
                                    n - h1);
                mpt_lost_count(&lh, a, b, dt, v, n);
            }
            const double s_applied = tel_applied_terms(a, cf ? NULL : b, dt, v, n);
            snprintf(what, sizeof what, "lost%s %s n=%lld", cf ? " counterfactual" : "", mpt_dtype_name(dt),
                     (long long)n);
            tel_check_lost(&lg, &lh, 0, s_applied, what);
            tel_check_lost(&ls, &lh, 0, s_applied, what);
            EXPECT(memcmp(&lg, &l2, sizeof lg) == 0, "%s: two calls differ (not deterministic)", what);
        }
        dev_free(da), dev_free(db), dev_free(dv);
    }
    static const int ks[2] = {0, -14};
    for (int t = 0; t < 2; t++) {
        const mpt_dtype target = t ? MPT_DTYPE_BF16 : MPT_DTYPE_F16;
        snprintf(what, sizeof what, "rounding into %s n=%lld", mpt_dtype_name(target), (long long)n);
        tel_fill_f32(&rng, target, v, n);
        float *dv = dev_put(v, (size_t)n * 4);
        mpt_exp_hist *hg = xmalloc(sizeof *hg), *h2 = xmalloc(sizeof *h2), *hs = xmalloc(sizeof *hs),
                     *hh = xmalloc(sizeof *hh);
        mpt_exp_hist_init(hg, target), mpt_exp_hist_init(h2, target), mpt_exp_hist_init(hs, target);
        mpt_exp_hist_init(hh, target);
        mpt_round_err eg[2], e2[2], es[2], eh[2];
        memset(eg, 0, sizeof eg), memset(e2, 0, sizeof e2), memset(es, 0, sizeof es), memset(eh, 0, sizeof eh);
        gpu->telemetry_rounding(gpu, hg, eg, ks, 2, dv, n);
        gpu->telemetry_rounding(gpu, h2, e2, ks, 2, dv, n);
        gpu->telemetry_rounding(gpu, hs, es, ks, 2, dv, h1);
        gpu->telemetry_rounding(gpu, hs, es, ks, 2, dv + h1, n - h1);
        mpt_exp_hist_add(hh, v, n);
        for (int j = 0; j < 2; j++) mpt_round_err_add(&eh[j], v, n, ks[j], target);
        tel_check_hist(hg, hh, 0, n, what);
        tel_check_hist(hs, hh, 0, n, what);
        for (int j = 0; j < 2; j++) {
            tel_check_err(&eg[j], &eh[j], 0, n, what);
            tel_check_err(&es[j], &eh[j], 0, n, what);
        }
        EXPECT(memcmp(hg->mass, h2->mass, sizeof hg->mass) == 0 && memcmp(eg, e2, sizeof eg) == 0,
               "%s: two calls differ (not deterministic)", what);
        free(hg), free(h2), free(hs), free(hh);
        dev_free(dv);
    }
    free(a), free(b), free(v);
}

START_TEST(test_telemetry_reductions_match_host) {
    swap_in_device_telemetry();
    /* one element; a partial block; many blocks; more elements than the grid's threads (grid-stride loops) */
    const int64_t sizes[] = {1, 257, 100003, 3000017};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) telemetry_reductions_case(sizes[i], 0x7e1e0000u + i);
    restore_gpu();
}
END_TEST

/* The relu fusions' epilogues (engine/backend.h) against FP64 references and the CPU, at the mlp's and lenet5's
 * shapes and an odd one (N = 133: padded mask columns), every math mode, C in the operand dtype (as the layers use
 * them), through run_gemm_case's bounds. RELU_AUX_BIAS: every mask bit for n < N equals [C > 0] of the stored GPU C
 * in our layout (bit m*ld + n, LSB first), except bits set where C rounded to 0 from a value within the bound of 0
 * (cuBLASLt's mask most likely tests the FP32 value); a mismatch names which other layout would have matched.
 * DRELU_BGRAD (random mask, beta 0): C = mask ? GEMM : 0 within the GEMM bound of the reference; the bias gradient
 * within the sum of the elements' bounds plus FP32 summation error over M. The records say which path ran. */
START_TEST(test_gemm_relu_epilogues) {
    static const int64_t fwd[][3] = {{128, 512, 784}, {128, 84, 120}, {16, 133, 61}};
    static const int64_t bwd[][3] = {{128, 512, 512}, {128, 120, 84}, {16, 133, 61}};
    uint64_t seed = 3000;
    for (size_t mi = 0; mi < 4; mi++) {
        const mpt_dtype t = operand_dtype(all_math[mi]);
        for (size_t si = 0; si < 3; si++) {
            gemm_case f = {.math = all_math[mi], .tb = 1, .M = fwd[si][0], .N = fwd[si][1], .K = fwd[si][2],
                           .c_dtype = t, .bias_dtype = t, .ep = MPT_EPILOGUE_RELU_AUX_BIAS, .alpha = 1.0f};
            run_gemm_case(&f, seed++, "relu_aux_bias.test");
            gemm_case b = {.math = all_math[mi], .M = bwd[si][0], .N = bwd[si][1], .K = bwd[si][2], .c_dtype = t,
                           .bias_dtype = t, .ep = MPT_EPILOGUE_DRELU_BGRAD, .alpha = 1.0f};
            run_gemm_case(&b, seed++, "drelu_bgrad.test");
        }
    }
    int found = 0;
    for (int i = 0; i < mpt_cuda_gemm_record_count(gpu); i++) {
        mpt_cuda_gemm_record rec;
        EXPECT(mpt_cuda_gemm_record_get(gpu, i, &rec), "record %d", i);
        const int fwd_rec = strcmp(rec.tag, "relu_aux_bias.test") == 0, bwd_rec = strcmp(rec.tag, "drelu_bgrad.test") == 0;
        if (!fwd_rec && !bwd_rec) continue;
        found++;
        fprintf(stderr, "note: %s %lldx%lldx%lld %s C %s: %s, %s\n", rec.tag, (long long)rec.M, (long long)rec.N,
                (long long)rec.K, rec.math, rec.d_type, rec.epilogue, rec.path);
        if (fwd_rec)
            EXPECT(strcmp(rec.epilogue, "CUBLASLT_EPILOGUE_RELU_AUX_BIAS") == 0 || strstr(rec.path, "relu_aux kernel"),
                   "RELU_AUX_BIAS record: epilogue %s, path %s", rec.epilogue, rec.path);
        else
            EXPECT(strcmp(rec.epilogue, "CUBLASLT_EPILOGUE_DRELU_BGRAD") == 0 || strstr(rec.path, "DRELU epilogue"),
                   "DRELU_BGRAD record: epilogue %s, path %s", rec.epilogue, rec.path);
    }
    EXPECT(found > 0, "no GEMM record for the relu epilogues");
}
END_TEST

/* Tensor Core proof (see the header comment) and the records of what ran. */
START_TEST(test_gemm_tf32_proof_and_records) {
    const int64_t M = 64, N = 64, K = 512;
    float *A = xmalloc((size_t)(M * K) * sizeof(float)), *B = xmalloc((size_t)(K * N) * sizeof(float));
    for (int64_t i = 0; i < M * K; i++) A[i] = 1.0f + 0x1p-12f;
    for (int64_t i = 0; i < K * N; i++) B[i] = 1.0f;
    float *dA = dev_put(A, (size_t)(M * K) * 4), *dB = dev_put(B, (size_t)(K * N) * 4);
    float *dC = dev_alloc((size_t)(M * N) * 4);
    float *C = xmalloc((size_t)(M * N) * sizeof(float));
    mpt_gemm_args g = {.M = M, .N = N, .K = K, .A = dA, .a_dtype = MPT_DTYPE_F32, .B = dB, .b_dtype = MPT_DTYPE_F32,
                       .C = dC, .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .beta = 0.0f, .math = MPT_MATH_FP32,
                       .tag = "proof.fp32"};
    reserve(gpu, gpu->gemm_workspace(gpu, &g));
    gpu->gemm(gpu, &g);
    dev_get(C, dC, (size_t)(M * N) * 4);
    for (int64_t i = 0; i < M * N; i++)
        EXPECT(C[i] == 512.125f, "fp32 math: C[%lld] = %.9g, expected exactly 512.125 (TF32 would give 512)",
               (long long)i, (double)C[i]);
    g.math = MPT_MATH_TF32;
    g.tag = "proof.tf32";
    reserve(gpu, gpu->gemm_workspace(gpu, &g));
    gpu->gemm(gpu, &g);
    dev_get(C, dC, (size_t)(M * N) * 4);
    if (tf32_overridden()) {
        fprintf(stderr, "test_cuda: NVIDIA_TF32_OVERRIDE=0 is set: TF32 cannot run; TF32 proof skipped\n");
    } else {
        for (int64_t i = 0; i < M * N; i++)
            EXPECT(C[i] == 512.0f, "tf32 math: C[%lld] = %.9g, expected exactly 512 (operands rounded to TF32)",
                   (long long)i, (double)C[i]);
        /* random full-mantissa operands: the two modes must give different results */
        tests_rng r = {4242};
        for (int64_t i = 0; i < M * K; i++) A[i] = (float)tests_uniform(&r, -1, 1);
        for (int64_t i = 0; i < K * N; i++) B[i] = (float)tests_uniform(&r, -1, 1);
        gpu->from_host(gpu, dA, A, (size_t)(M * K) * 4);
        gpu->from_host(gpu, dB, B, (size_t)(K * N) * 4);
        float *C32 = xmalloc((size_t)(M * N) * sizeof(float));
        g.math = MPT_MATH_FP32;
        g.tag = "proof.fp32.random";
        gpu->gemm(gpu, &g);
        dev_get(C32, dC, (size_t)(M * N) * 4);
        g.math = MPT_MATH_TF32;
        g.tag = "proof.tf32.random";
        gpu->gemm(gpu, &g);
        dev_get(C, dC, (size_t)(M * N) * 4);
        int64_t differ = 0;
        for (int64_t i = 0; i < M * N; i++) differ += C[i] != C32[i];
        EXPECT(differ > M * N / 2, "tf32 and fp32 math agree on %lld of %lld random full-mantissa elements",
               (long long)(M * N - differ), (long long)(M * N));
        free(C32);
    }
    /* records: what ran, per mode */
    static const struct {
        mpt_math math;
        mpt_dtype c;
        const char *compute, *ab, *d;
    } want[] = {
        {MPT_MATH_FP32, MPT_DTYPE_F32, "CUBLAS_COMPUTE_32F", "CUDA_R_32F", "CUDA_R_32F"},
        {MPT_MATH_TF32, MPT_DTYPE_F32, "CUBLAS_COMPUTE_32F_FAST_TF32", "CUDA_R_32F", "CUDA_R_32F"},
        {MPT_MATH_F16, MPT_DTYPE_F16, "CUBLAS_COMPUTE_32F", "CUDA_R_16F", "CUDA_R_16F"},
        {MPT_MATH_F16, MPT_DTYPE_F32, "CUBLAS_COMPUTE_32F", "CUDA_R_16F", "CUDA_R_32F"},
        {MPT_MATH_BF16, MPT_DTYPE_BF16, "CUBLAS_COMPUTE_32F", "CUDA_R_16BF", "CUDA_R_16BF"},
        {MPT_MATH_BF16, MPT_DTYPE_F32, "CUBLAS_COMPUTE_32F", "CUDA_R_16BF", "CUDA_R_32F"},
    };
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        char tag[48];
        snprintf(tag, sizeof tag, "record.%zu", w);
        gemm_case gc = {.math = want[w].math, .M = 48, .N = 24, .K = 40, .c_dtype = want[w].c,
                        .bias_dtype = want[w].c, .ep = MPT_EPILOGUE_RELU_BIAS, .alpha = 1.0f};
        run_gemm_case(&gc, 500 + w, tag);
        int seen = 0;
        for (int i = 0; i < mpt_cuda_gemm_record_count(gpu); i++) {
            mpt_cuda_gemm_record rec;
            mpt_cuda_gemm_record_get(gpu, i, &rec);
            if (strcmp(rec.tag, tag) != 0) continue;
            seen = 1;
            EXPECT(strcmp(rec.compute_type, want[w].compute) == 0, "%s: compute type %s, expected %s", tag,
                   rec.compute_type, want[w].compute);
            EXPECT(strcmp(rec.a_type, want[w].ab) == 0 && strcmp(rec.b_type, want[w].ab) == 0,
                   "%s: A/B %s/%s, expected %s", tag, rec.a_type, rec.b_type, want[w].ab);
            EXPECT(strcmp(rec.d_type, want[w].d) == 0, "%s: D %s, expected %s", tag, rec.d_type, want[w].d);
            EXPECT(strcmp(rec.epilogue, "CUBLASLT_EPILOGUE_RELU_BIAS") == 0 && strcmp(rec.bias_type, want[w].d) == 0,
                   "%s: epilogue %s bias %s", tag, rec.epilogue, rec.bias_type);
            EXPECT(strcmp(rec.path, "cublasLt") == 0 && rec.calls == 1, "%s: path %s, %lld calls", tag, rec.path,
                   (long long)rec.calls);
        }
        EXPECT(seen, "no GEMM record for %s", tag);
    }
    dev_free(dA);
    dev_free(dB);
    dev_free(dC);
    free(A);
    free(B);
    free(C);
}
END_TEST

/* ================================ convolution ========================================================== */

static int64_t xi(const mpt_conv_shape *s, int n, int c, int h, int w) {
    return (((int64_t)n * s->C + c) * s->H + h) * s->W + w;
}
static int64_t wi(const mpt_conv_shape *s, int k, int c, int r, int q) {
    return (((int64_t)k * s->C + c) * s->R + r) * s->S + q;
}
static int64_t yi(const mpt_conv_shape *s, int n, int k, int p, int q) {
    return (((int64_t)n * s->K + k) * s->P + p) * s->Q + q;
}

static mpt_conv_shape conv_shape(int N, int C, int H, int W, int K, int R, int pad, int stride) {
    mpt_conv_shape s = {.N = N, .C = C, .H = H, .W = W, .K = K, .R = R, .S = R, .pad_h = pad, .pad_w = pad,
                        .stride_h = stride, .stride_w = stride};
    s.P = (H + 2 * pad - R) / stride + 1;
    s.Q = (W + 2 * pad - R) / stride + 1;
    return s;
}

/* Checks out (dtype t) against ref within bound on both backends' results. first: the convolution's own sum, which
 * cuDNN rounds to a 16-bit output before blending in the prior value or the bias (second_rounding); NAN when
 * nothing is blended in. */
static void conv_expect(const char *what, const char *tag, const void *g, const void *c, mpt_dtype t, int64_t i,
                        double ref, double e32, double first) {
    double bound = e32 + u_out(t) * (fabs(ref) + e32) + eta_out(t);
    if (!isnan(first)) bound += second_rounding(t, first, e32);
    double vg = ld(g, t, i), vc = ld(c, t, i);
    EXPECT(fabs(vg - ref) <= bound, "conv %s %s[%lld] = %.9g, FP64 reference %.9g, bound %.3g", tag, what,
           (long long)i, vg, ref, bound);
    EXPECT(fabs(vg - vc) <= 2 * bound, "conv %s %s[%lld]: GPU %.9g vs CPU %.9g, bound %.3g", tag, what, (long long)i,
           vg, vc, 2 * bound);
}

static void run_conv_case(mpt_math math, mpt_conv_shape s, int with_bias, uint64_t seed, const char *tag) {
    tests_rng r = {seed};
    const mpt_dtype t = operand_dtype(math);
    const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, nw = (int64_t)s.K * s.C * s.R * s.S;
    const int64_t ny = (int64_t)s.N * s.K * s.P * s.Q;
    void *x = fill(&r, t, nx, -1, 1), *w = fill(&r, t, nw, -1, 1), *dy = fill(&r, t, ny, -1, 1);
    void *bias = with_bias ? fill(&r, t, s.K, -1, 1) : NULL;
    void *dx0 = fill(&r, t, nx, -1, 1);
    float *dw0 = fill(&r, MPT_DTYPE_F32, nw, -1, 1), *db0 = fill(&r, MPT_DTYPE_F32, s.K, -1, 1);
    mpt_conv_args a = {.s = s, .math = math, .dtype = t, .tag = tag, .accumulate = 1}; /* into dx0, dw0, db0 */

    /* GPU */
    mpt_conv_args ag = a;
    ag.x = dev_put(x, nbytes(t, nx));
    ag.w = dev_put(w, nbytes(t, nw));
    ag.bias = bias ? dev_put(bias, nbytes(t, s.K)) : NULL;
    ag.y = dev_alloc(nbytes(t, ny));
    ag.dy = dev_put(dy, nbytes(t, ny));
    ag.dx = dev_put(dx0, nbytes(t, nx));
    ag.dw = dev_put(dw0, (size_t)nw * 4);
    ag.db = dev_put(db0, (size_t)s.K * 4);
    reserve(gpu, gpu->conv2d_workspace(gpu, &ag));
    gpu->conv2d_forward(gpu, &ag);
    gpu->conv2d_backward_data(gpu, &ag);
    gpu->conv2d_backward_filter(gpu, &ag);
    void *yg = xmalloc(nbytes(t, ny)), *dxg = xmalloc(nbytes(t, nx));
    float *dwg = xmalloc((size_t)nw * 4), *dbg = xmalloc((size_t)s.K * 4);
    dev_get(yg, ag.y, nbytes(t, ny));
    dev_get(dxg, ag.dx, nbytes(t, nx));
    dev_get(dwg, ag.dw, (size_t)nw * 4);
    dev_get(dbg, ag.db, (size_t)s.K * 4);
    /* CPU */
    mpt_conv_args ac = a;
    void *yc = xmalloc(nbytes(t, ny)), *dxc = host_dup(dx0, nbytes(t, nx));
    float *dwc = host_dup(dw0, (size_t)nw * 4), *dbc = host_dup(db0, (size_t)s.K * 4);
    ac.x = x;
    ac.w = w;
    ac.bias = bias;
    ac.y = yc;
    ac.dy = dy;
    ac.dx = dxc;
    ac.dw = dwc;
    ac.db = dbc;
    reserve(cpu, cpu->conv2d_workspace(cpu, &ac));
    cpu->conv2d_forward(cpu, &ac);
    cpu->conv2d_backward_data(cpu, &ac);
    cpu->conv2d_backward_filter(cpu, &ac);

    const double op = op_err(math);
    /* the backward-filter pass of fp16/bf16 runs on exact FP32 copies (conv.cu): no operand rounding there */
    for (int n = 0; n < s.N; n++)
        for (int k = 0; k < s.K; k++)
            for (int p = 0; p < s.P; p++)
                for (int q = 0; q < s.Q; q++) {
                    double acc = 0, T = 0;
                    for (int c = 0; c < s.C; c++)
                        for (int rr = 0; rr < s.R; rr++)
                            for (int ss = 0; ss < s.S; ss++) {
                                int h = p * s.stride_h - s.pad_h + rr, ww = q * s.stride_w - s.pad_w + ss;
                                if (h < 0 || h >= s.H || ww < 0 || ww >= s.W) continue;
                                double v = ld(x, t, xi(&s, n, c, h, ww)) * ld(w, t, wi(&s, k, c, rr, ss));
                                acc += v;
                                T += fabs(v);
                            }
                    double bv = bias ? ld(bias, t, k) : 0.0;
                    double e32 = 2.0 * (s.C * s.R * s.S + 4) * U32 * (T * (1 + op) + fabs(bv)) + op * T;
                    conv_expect("y", tag, yg, yc, t, yi(&s, n, k, p, q), acc + bv, e32, bias ? acc : NAN);
                }
    for (int n = 0; n < s.N; n++)
        for (int c = 0; c < s.C; c++)
            for (int h = 0; h < s.H; h++)
                for (int ww = 0; ww < s.W; ww++) {
                    double acc = 0, T = 0;
                    for (int k = 0; k < s.K; k++)
                        for (int rr = 0; rr < s.R; rr++)
                            for (int ss = 0; ss < s.S; ss++) {
                                int ph = h + s.pad_h - rr, qw = ww + s.pad_w - ss;
                                if (ph < 0 || qw < 0 || ph % s.stride_h || qw % s.stride_w) continue;
                                int p = ph / s.stride_h, q = qw / s.stride_w;
                                if (p >= s.P || q >= s.Q) continue;
                                double v = ld(dy, t, yi(&s, n, k, p, q)) * ld(w, t, wi(&s, k, c, rr, ss));
                                acc += v;
                                T += fabs(v);
                            }
                    double old = ld(dx0, t, xi(&s, n, c, h, ww));
                    double e32 = 2.0 * (s.K * s.R * s.S + 4) * U32 * (T * (1 + op) + fabs(old)) + op * T;
                    conv_expect("dx", tag, dxg, dxc, t, xi(&s, n, c, h, ww), old + acc, e32, acc);
                }
    const double op_w = t == MPT_DTYPE_F32 ? op : 0.0;
    for (int k = 0; k < s.K; k++)
        for (int c = 0; c < s.C; c++)
            for (int rr = 0; rr < s.R; rr++)
                for (int ss = 0; ss < s.S; ss++) {
                    double acc = 0, T = 0;
                    for (int n = 0; n < s.N; n++)
                        for (int p = 0; p < s.P; p++)
                            for (int q = 0; q < s.Q; q++) {
                                int h = p * s.stride_h - s.pad_h + rr, ww = q * s.stride_w - s.pad_w + ss;
                                if (h < 0 || h >= s.H || ww < 0 || ww >= s.W) continue;
                                double v = ld(dy, t, yi(&s, n, k, p, q)) * ld(x, t, xi(&s, n, c, h, ww));
                                acc += v;
                                T += fabs(v);
                            }
                    int64_t i = wi(&s, k, c, rr, ss);
                    double old = dw0[i];
                    double e32 = 2.0 * (s.N * s.P * s.Q + 4) * U32 * (T * (1 + op_w) + fabs(old)) + op_w * T;
                    conv_expect("dw", tag, dwg, dwc, MPT_DTYPE_F32, i, old + acc, e32, NAN);
                }
    for (int k = 0; k < s.K; k++) {
        double acc = 0, T = 0;
        for (int n = 0; n < s.N; n++)
            for (int j = 0; j < s.P * s.Q; j++) {
                double v = ld(dy, t, ((int64_t)n * s.K + k) * s.P * s.Q + j);
                acc += v;
                T += fabs(v);
            }
        double e32 = 2.0 * (s.N * s.P * s.Q + 4) * U32 * (T + fabs(db0[k]));
        conv_expect("db", tag, dbg, dbc, MPT_DTYPE_F32, k, db0[k] + acc, e32, NAN);
    }
    dev_free((void *)ag.x);
    dev_free((void *)ag.w);
    if (ag.bias) dev_free((void *)ag.bias);
    dev_free(ag.y);
    dev_free((void *)ag.dy);
    dev_free(ag.dx);
    dev_free(ag.dw);
    dev_free(ag.db);
    free(x);
    free(w);
    free(dy);
    free(bias);
    free(dx0);
    free(dw0);
    free(db0);
    free(yg);
    free(dxg);
    free(dwg);
    free(dbg);
    free(yc);
    free(dxc);
    free(dwc);
    free(dbc);
}

START_TEST(test_conv_all_modes) {
    const mpt_conv_shape shapes[] = {conv_shape(4, 3, 12, 12, 8, 3, 1, 1), conv_shape(2, 6, 11, 11, 5, 5, 0, 2),
                                     conv_shape(8, 1, 28, 28, 6, 5, 2, 1), conv_shape(3, 16, 7, 7, 12, 1, 0, 1)};
    uint64_t seed = 2000;
    for (size_t mi = 0; mi < 4; mi++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (int b = 0; b < 2; b++) {
                char tag[48];
                snprintf(tag, sizeof tag, "conv.%s.%zu%d", mpt_math_name(all_math[mi]), si, b);
                run_conv_case(all_math[mi], shapes[si], b, seed++, tag);
            }
}
END_TEST

/* MPT_CUDA_CONV_FIND=1 (kernels/cuda/conv.cu conv_find): convolutions with each pass's algorithm chosen from
 * cudnnFind*'s measured ranking under the same rules, lenet5's second layer at batch 128 among them: every result
 * within the bounds of run_conv_case, and every record of the measured backend says "algorithm measured" and names
 * a deterministic algorithm (cuDNN has deterministic ones for all these shapes: the heuristic's records have no
 * "NO"). */
START_TEST(test_conv_measured_choice) {
    const mpt_conv_shape shapes[] = {conv_shape(4, 3, 12, 12, 8, 3, 1, 1), conv_shape(8, 1, 28, 28, 6, 5, 2, 1),
                                     conv_shape(128, 6, 14, 14, 16, 5, 0, 1)};
    mpt_backend *measured = cuda_backend_with("MPT_CUDA_CONV_FIND");
    swap_in(measured);
    uint64_t seed = 2600;
    for (size_t mi = 0; mi < 4; mi++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            char tag[48];
            snprintf(tag, sizeof tag, "convfind.%s.%zu", mpt_math_name(all_math[mi]), si);
            run_conv_case(all_math[mi], shapes[si], 1, seed++, tag);
        }
    int n = 0;
    for (int i = 0; i < mpt_cuda_conv_record_count(gpu); i++) {
        mpt_cuda_conv_record rec;
        EXPECT(mpt_cuda_conv_record_get(gpu, i, &rec), "conv record %d", i);
        if (strncmp(rec.tag, "convfind.", 9) != 0) continue;
        n++;
        EXPECT(strstr(rec.path, "algorithm measured") != NULL && rec.deterministic,
               "%s %s: path '%s', algorithm %s, deterministic %d", rec.tag, rec.pass, rec.path, rec.algo_name,
               rec.deterministic);
    }
    EXPECT(n > 0, "no conv record on the measured backend");
    restore_gpu();
}
END_TEST

/* db (FP32, s.K values, host) from the current `gpu`'s conv2d_backward_filter for x, dy (host, dtype t, with dy's
 * N*K*P*Q values), starting from db0 when accumulate (else overwritten). The filter gradient is computed and dropped. */
static void channel_sum_on_gpu(mpt_conv_shape s, mpt_math math, mpt_dtype t, const void *x, const void *dy,
                               const float *db0, int accumulate, float *db, const char *tag) {
    const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, nw = (int64_t)s.K * s.C * s.R * s.S;
    const int64_t ny = (int64_t)s.N * s.K * s.P * s.Q;
    mpt_conv_args a = {.s = s, .math = math, .dtype = t, .tag = tag, .accumulate = accumulate};
    a.x = dev_put(x, nbytes(t, nx));
    a.dy = dev_put(dy, nbytes(t, ny));
    a.dw = dev_alloc((size_t)nw * 4);
    a.db = dev_put(db0, (size_t)s.K * 4);
    reserve(gpu, gpu->conv2d_workspace(gpu, &a));
    gpu->conv2d_backward_filter(gpu, &a);
    dev_get(db, a.db, (size_t)s.K * 4);
    dev_free((void *)a.x);
    dev_free((void *)a.dy);
    dev_free(a.dw);
    dev_free(a.db);
}

/* MPT_CUDA_SPLIT_CHANNEL_SUM=1 (kernels/cuda/elementwise.cu channel_partial_kernel + channel_partials_sum_kernel): the
 * convolution bias gradient db[k] (+)= sum over n, p, q of dy[n, k, p, q] over (chunks of 2048 values, K) blocks and
 * a fixed-order second pass.
 * 1. Coverage, exactly: dy holds integers 1..3 (exact in every dtype) and db0 integers, so every sum is exact in FP32
 *    in any order (all partial sums < 2^24): both the one-block kernel and the split one must give db0 + the integer
 *    sum exactly; a value missed or counted twice at a chunk or channel boundary changes it by 1 to 3. Shapes: lenet5's
 *    conv1 at batch 128 (pad 2: 128 x 28 x 28 = 100352 values a channel, 49 whole chunks), its conv2 (128 x 10 x 10 =
 *    12800 values: 7 chunks of 1829, the last shorter), a ragged 1x1 (4107 values: 3 chunks of 1369), 300 channels of 98
 *    values (one chunk each) and 2200 x 1024 values (over 1024 chunks: capped, chunks of 2200), with accumulate 0
 *    and 1. (The one-block fallback, for more than 65535 channels or partials beyond the scratch, is the default
 *    kernel itself, which every case also runs.)
 * 2. Random data in every math mode on lenet5's two convolutions at batch 128: within run_conv_case's bounds.
 * 3. Deterministic: the same random case twice on the split backend, db bit for bit. */
START_TEST(test_channel_sum_split) {
    const mpt_conv_shape shapes[] = {conv_shape(128, 1, 28, 28, 6, 5, 2, 1), conv_shape(128, 6, 14, 14, 16, 5, 0, 1),
                                     conv_shape(3, 1, 37, 37, 5, 1, 0, 1),
                                     conv_shape(2, 1, 7, 7, 300, 1, 0, 1), conv_shape(2200, 1, 32, 32, 1, 1, 0, 1)};
    mpt_backend *split = cuda_backend_with("MPT_CUDA_SPLIT_CHANNEL_SUM");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const mpt_conv_shape s = shapes[si];
        const mpt_dtype t = si % 2 ? MPT_DTYPE_BF16 : MPT_DTYPE_F16;
        const mpt_math math = si % 2 ? MPT_MATH_BF16 : MPT_MATH_F16;
        const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, hw = (int64_t)s.P * s.Q, ny = (int64_t)s.N * s.K * hw;
        void *x = xmalloc(nbytes(t, nx)), *dy = xmalloc(nbytes(t, ny));
        float *db0 = xmalloc((size_t)s.K * 4), *db = xmalloc((size_t)s.K * 4);
        double *want = calloc((size_t)s.K, sizeof *want);
        EXPECT(want != NULL, "out of host memory");
        for (int64_t i = 0; i < nx; i++) mpt_store_f32(x, t, i, 1.0f);
        for (int64_t i = 0; i < ny; i++) {
            const float v = (float)(1 + (int)(((uint64_t)i * 2654435761u >> 7) % 3));
            mpt_store_f32(dy, t, i, v);
            want[(i / hw) % s.K] += v;
        }
        for (int k = 0; k < s.K; k++) db0[k] = (float)(k % 7) - 3.0f;
        for (int accumulate = 0; accumulate < 2; accumulate++)
            for (int which = 0; which < 2; which++) { /* the default backend (one block a channel), then the split */
                char tag[48];
                snprintf(tag, sizeof tag, "chsum.%zu.%d.%d", si, accumulate, which);
                if (which) swap_in(split);
                channel_sum_on_gpu(s, math, t, x, dy, db0, accumulate, db, tag);
                if (which) { /* the program's backend back, `split` kept for the next case */
                    gpu = shared_gpu;
                    shared_gpu = NULL;
                }
                for (int k = 0; k < s.K; k++) {
                    const double exact = want[k] + (accumulate ? db0[k] : 0.0);
                    EXPECT((double)db[k] == exact, "%s: db[%d] = %.9g, expected exactly %.9g (%s kernel, N %d, %lld "
                           "values a channel)", tag, k, (double)db[k], exact, which ? "split" : "one-block", s.N,
                           (long long)(s.N * hw));
                }
            }
        free(x);
        free(dy);
        free(db0);
        free(db);
        free(want);
    }
    swap_in(split); /* from here on restore_gpu frees it */
    const mpt_conv_shape lenet[] = {conv_shape(128, 1, 28, 28, 6, 5, 2, 1), conv_shape(128, 6, 14, 14, 16, 5, 0, 1)};
    uint64_t seed = 2700;
    for (size_t mi = 0; mi < 4; mi++)
        for (size_t si = 0; si < 2; si++) {
            char tag[48];
            snprintf(tag, sizeof tag, "chsplit.%s.%zu", mpt_math_name(all_math[mi]), si);
            run_conv_case(all_math[mi], lenet[si], 1, seed++, tag);
        }
    const mpt_conv_shape s = lenet[0];
    tests_rng r = {2750};
    const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, ny = (int64_t)s.N * s.K * s.P * s.Q;
    void *x = fill(&r, MPT_DTYPE_F16, nx, -1, 1), *dy = fill(&r, MPT_DTYPE_F16, ny, -1, 1);
    float *db0 = fill(&r, MPT_DTYPE_F32, s.K, -1, 1), db1[6], db2[6];
    channel_sum_on_gpu(s, MPT_MATH_F16, MPT_DTYPE_F16, x, dy, db0, 1, db1, "chsplit.det.1");
    channel_sum_on_gpu(s, MPT_MATH_F16, MPT_DTYPE_F16, x, dy, db0, 1, db2, "chsplit.det.2");
    for (int k = 0; k < s.K; k++)
        EXPECT(bits(db1[k]) == bits(db2[k]), "split channel sum not deterministic: db[%d] %a then %a", k,
               (double)db1[k], (double)db2[k]);
    /* and the split kernels did run: the one-block kernel sums the same 100352 random terms a channel in another
     * order, so the same bits in all 6 channels would mean the variable was not taken */
    float db_one[6];
    mpt_backend *split_be = gpu;
    gpu = shared_gpu; /* the program's backend, for one call */
    channel_sum_on_gpu(s, MPT_MATH_F16, MPT_DTYPE_F16, x, dy, db0, 1, db_one, "chsplit.one");
    gpu = split_be;
    int differ = 0;
    for (int k = 0; k < s.K; k++) differ += bits(db_one[k]) != bits(db1[k]);
    EXPECT(differ > 0, "the split channel sum gave the one-block kernel's bits in all %d channels: did it run?", s.K);
    free(x);
    free(dy);
    free(db0);
    restore_gpu();
}
END_TEST

/* The second rounding of cuDNN's 16-bit outputs, pinned like gemm_rounding_model: a 3x3 convolution whose filters
 * are zero except the centre tap (pad 1), so y[n,k,p,q] = sum_c x[n,c,p,q] w[k,c,1,1] and dx[n,c,h,w] = sum_k
 * dy[n,k,h,w] w[k,c,1,1], with the same exact 1 + p*u pattern (channel 0 = 1, channel 1 = u/2 (1 + i/4), weights 1 and
 * 1 + j/4) and an addend -q*u: the bias for y, the prior value for dx (accumulate). Each output is the once- or the
 * twice-rounded value; the counts say which cuDNN did. */
static void conv_rounding_model(mpt_math math) {
    const mpt_dtype t = operand_dtype(math);
    const double u = out_spacing(t);
    const mpt_conv_shape s = conv_shape(4, 16, 6, 6, 16, 3, 1, 1);
    const int64_t hw = (int64_t)s.H * s.W, nx = (int64_t)s.N * s.C * hw, nw = (int64_t)s.K * s.C * 9;
    const int64_t ny = (int64_t)s.N * s.K * hw;
    void *x = xmalloc(nbytes(t, nx)), *w = xmalloc(nbytes(t, nw)), *dy = xmalloc(nbytes(t, ny));
    void *bias = xmalloc(nbytes(t, s.K)), *dx0 = xmalloc(nbytes(t, nx));
    for (int64_t i = 0; i < nx; i++) mpt_store_f32(x, t, i, 0.0f);
    for (int64_t i = 0; i < ny; i++) mpt_store_f32(dy, t, i, 0.0f);
    for (int64_t i = 0; i < nw; i++) mpt_store_f32(w, t, i, 0.0f);
    for (int n = 0; n < s.N; n++)
        for (int64_t j = 0; j < hw; j++) { /* pixel j: i = j mod 4 */
            const float small = (float)(0.5 * u * (1 + (double)(j % 4) / 4));
            mpt_store_f32(x, t, ((int64_t)n * s.C + 0) * hw + j, 1.0f);
            mpt_store_f32(x, t, ((int64_t)n * s.C + 1) * hw + j, small);
            mpt_store_f32(dy, t, ((int64_t)n * s.K + 0) * hw + j, 1.0f);
            mpt_store_f32(dy, t, ((int64_t)n * s.K + 1) * hw + j, small);
        }
    /* centre taps: w[k,0] = 1 and w[k,1] = 1 + (k mod 4)/4 give y[k] = 1 + p(pixel, k) u; w[0,c] = 1 and
     * w[1,c] = 1 + (c mod 4)/4 give dx[c] = 1 + p(pixel, c) u; the two patterns agree where they meet (w[1,1] =
     * 1.25), every other tap is 0 */
    for (int k = 0; k < s.K; k++)
        for (int c = 0; c < s.C; c++) {
            const double v = (c == 0 || k == 0) ? 1.0 : c == 1 ? 1 + (double)(k % 4) / 4 : k == 1 ? 1 + (double)(c % 4) / 4 : 0.0;
            mpt_store_f32(w, t, wi(&s, k, c, 1, 1), (float)v);
        }
    for (int k = 0; k < s.K; k++) mpt_store_f32(bias, t, k, (float)(-model_q(k) * u));
    for (int n = 0; n < s.N; n++)
        for (int c = 0; c < s.C; c++)
            for (int64_t j = 0; j < hw; j++) mpt_store_f32(dx0, t, ((int64_t)n * s.C + c) * hw + j, (float)(-model_q(c) * u));
    char tag[48];
    snprintf(tag, sizeof tag, "rounding_model.%s", mpt_math_name(math));
    mpt_conv_args a = {.s = s, .math = math, .dtype = t, .tag = tag, .accumulate = 1};
    a.x = dev_put(x, nbytes(t, nx));
    a.w = dev_put(w, nbytes(t, nw));
    a.bias = dev_put(bias, nbytes(t, s.K));
    a.y = dev_alloc(nbytes(t, ny));
    a.dy = dev_put(dy, nbytes(t, ny));
    a.dx = dev_put(dx0, nbytes(t, nx));
    reserve(gpu, gpu->conv2d_workspace(gpu, &a));
    gpu->conv2d_forward(gpu, &a);
    gpu->conv2d_backward_data(gpu, &a);
    void *y = xmalloc(nbytes(t, ny)), *dx = xmalloc(nbytes(t, nx));
    dev_get(y, a.y, nbytes(t, ny));
    dev_get(dx, a.dx, nbytes(t, nx));
    for (int pass = 0; pass < 2; pass++) {
        int64_t once = 0, twice = 0, either = 0;
        const int nch = pass == 0 ? s.K : s.C;
        for (int n = 0; n < s.N; n++)
            for (int ch = 0; ch < nch; ch++)
                for (int64_t j = 0; j < hw; j++) {
                    const double first = 1 + model_p(j, ch) * u; /* x0 w[k,0] + x1 w[k,1], or dy0 w[0,c] + dy1 w[1,c] */
                    const double add = -model_q(ch) * u;
                    const double got = ld(pass == 0 ? y : dx, t, ((int64_t)n * nch + ch) * hw + j);
                    EXPECT(rounding_model_tally(t, first, add, got, &once, &twice, &either),
                           "conv %s %s[n %d, ch %d, pixel %lld] = %.9g is neither round(%.9g) = %.9g (one rounding) "
                           "nor round(round(%.9g) + %.9g) = %.9g", tag, pass == 0 ? "y (+ bias)" : "dx (+= prior)", n,
                           ch, (long long)j, got, first + add, round_to(t, first + add), first, add,
                           round_to(t, round_to(t, first) + add));
                }
        printf("test_cuda: rounding model: conv %s %s, %s (cuDNN): of %lld elements where one and two roundings "
               "differ, %lld rounded once, %lld twice (%lld agree either way)\n", mpt_math_name(math),
               pass == 0 ? "forward + bias" : "backward data, accumulate", mpt_dtype_name(t),
               (long long)(once + twice), (long long)once, (long long)twice, (long long)either);
    }
    dev_free((void *)a.x);
    dev_free((void *)a.w);
    dev_free((void *)a.bias);
    dev_free(a.y);
    dev_free((void *)a.dy);
    dev_free(a.dx);
    free(x);
    free(w);
    free(dy);
    free(bias);
    free(dx0);
    free(y);
    free(dx);
}

START_TEST(test_conv_rounding_model) {
    conv_rounding_model(MPT_MATH_F16);
    conv_rounding_model(MPT_MATH_BF16);
}
END_TEST

/* The heuristic's math type of the algorithm the record `tag` ran for `pass` (NULL if there is no such record). */
static const char *conv_listed_math(const char *tag, const char *pass) {
    for (int i = 0; i < mpt_cuda_conv_record_count(gpu); i++) {
        mpt_cuda_conv_record rec;
        mpt_cuda_conv_record_get(gpu, i, &rec);
        if (strcmp(rec.tag, tag) == 0 && strcmp(rec.pass, pass) == 0) return rec.listed_math_type;
    }
    return NULL;
}

/* On random full-mantissa data a tf32 convolution pass whose kernel rounds its operands to TF32 differs from the
 * fp32 one in most elements (TF32 keeps 10 of FP32's 23 significand bits). Reported per pass with the algorithm's
 * listed math type, not bounded: CUDNN_TENSOR_OP_MATH only permits Tensor Cores (cuDNN docs, cudnnMathType_t), and a
 * pass listed with it may still compute in FP32 (test_conv_tf32_proof). The records' math types are checked. */
static void conv_tf32_differs(void) {
    const mpt_conv_shape s = conv_shape(4, 16, 12, 12, 16, 3, 1, 1);
    const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, nw = (int64_t)s.K * s.C * s.R * s.S;
    const int64_t ny = (int64_t)s.N * s.K * s.P * s.Q;
    tests_rng r = {4343};
    float *x = fill(&r, MPT_DTYPE_F32, nx, -1, 1), *w = fill(&r, MPT_DTYPE_F32, nw, -1, 1);
    float *dy = fill(&r, MPT_DTYPE_F32, ny, -1, 1);
    float *out[2][3];
    static const char *const tags[2] = {"proof.conv.fp32.random", "proof.conv.tf32.random"};
    for (int mode = 0; mode < 2; mode++) {
        mpt_conv_args a = {.s = s, .math = mode ? MPT_MATH_TF32 : MPT_MATH_FP32, .dtype = MPT_DTYPE_F32,
                           .tag = tags[mode]};
        a.x = dev_put(x, (size_t)nx * 4);
        a.w = dev_put(w, (size_t)nw * 4);
        a.dy = dev_put(dy, (size_t)ny * 4);
        a.y = dev_alloc((size_t)ny * 4);
        a.dx = dev_alloc((size_t)nx * 4);
        a.dw = dev_alloc((size_t)nw * 4);
        gpu->memset_zero(gpu, a.dx, (size_t)nx * 4);
        gpu->memset_zero(gpu, a.dw, (size_t)nw * 4);
        reserve(gpu, gpu->conv2d_workspace(gpu, &a));
        gpu->conv2d_forward(gpu, &a);
        gpu->conv2d_backward_data(gpu, &a);
        gpu->conv2d_backward_filter(gpu, &a);
        out[mode][0] = xmalloc((size_t)ny * 4);
        out[mode][1] = xmalloc((size_t)nx * 4);
        out[mode][2] = xmalloc((size_t)nw * 4);
        dev_get(out[mode][0], a.y, (size_t)ny * 4);
        dev_get(out[mode][1], a.dx, (size_t)nx * 4);
        dev_get(out[mode][2], a.dw, (size_t)nw * 4);
        dev_free((void *)a.x);
        dev_free((void *)a.w);
        dev_free((void *)a.dy);
        dev_free(a.y);
        dev_free(a.dx);
        dev_free(a.dw);
    }
    static const char *const pass[3] = {"forward", "backward_data", "backward_filter"};
    const int64_t n[3] = {ny, nx, nw};
    for (int k = 0; k < 3; k++) {
        int64_t differ = 0;
        for (int64_t i = 0; i < n[k]; i++) differ += out[0][k][i] != out[1][k][i];
        const char *listed = conv_listed_math(tags[1], pass[k]);
        printf("test_cuda: tf32 conv %s (4x16x12x12, 16 3x3 filters): algorithm listed as %s; differs from fp32 in "
               "%lld of %lld random elements\n", pass[k], listed ? listed : "(no record)", (long long)differ,
               (long long)n[k]);
        /* no bound on `differ`: a pass listed as CUDNN_TENSOR_OP_MATH may still compute in FP32 (test_conv_tf32_proof) */
        free(out[0][k]);
        free(out[1][k]);
    }
    for (int i = 0; i < mpt_cuda_conv_record_count(gpu); i++) {
        mpt_cuda_conv_record rec;
        mpt_cuda_conv_record_get(gpu, i, &rec);
        if (strcmp(rec.tag, tags[1]) == 0)
            EXPECT(strcmp(rec.math_type, "CUDNN_TENSOR_OP_MATH") == 0, "tf32 conv %s ran with %s", rec.pass,
                   rec.math_type);
        if (strcmp(rec.tag, tags[0]) == 0)
            EXPECT(strcmp(rec.math_type, "CUDNN_FMA_MATH") == 0, "fp32 conv %s ran with %s", rec.pass, rec.math_type);
    }
    free(x);
    free(w);
    free(dy);
}

/* fp32 convolution must not use TF32; a tf32 convolution must show TF32 operands on at least one of two shapes.
 * x = 1 + 2^-12, w = 1, no padding: every y = C*R*S*(1 + 2^-12) exactly in FP32 arithmetic in any summation order
 * (each partial sum k(1 + 2^-12), k <= C*R*S <= 256, needs at most 21 significant bits), and y = C*R*S with TF32
 * operands (1 + 2^-12 rounds to 1). So every element of a tf32 pass is one of the two values, and which one says
 * whether cuDNN's kernel rounded its operands to TF32. CUDNN_TENSOR_OP_MATH permits Tensor Cores and does not
 * require them, and the heuristic's "listed as" is no proof either: on the H200 (2026-11-26, cuDNN 9.19) a 2x16x8x8
 * forward with 16 3x3 filters listed as CUDNN_TENSOR_OP_MATH computed in FP32 (y = 144.035156), and the first run's
 * 3-channel conv had no Tensor Core algorithm listed at all. The second shape, a 1x1 convolution with 256 input and
 * output channels (a plain GEMM to cuDNN, no Winograd or FFT), is where Tensor Cores are expected; the test fails
 * only if no shape rounds, or if an element is neither value. */
static int conv_tf32_proof_shape(mpt_conv_shape s, const char *tag32, const char *tag_tf32) {
    const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, nw = (int64_t)s.K * s.C * s.R * s.S;
    const int64_t ny = (int64_t)s.N * s.K * s.P * s.Q;
    float *x = xmalloc((size_t)nx * 4), *w = xmalloc((size_t)nw * 4), *y = xmalloc((size_t)ny * 4);
    for (int64_t i = 0; i < nx; i++) x[i] = 1.0f + 0x1p-12f;
    for (int64_t i = 0; i < nw; i++) w[i] = 1.0f;
    const float crs = (float)(s.C * s.R * s.S), exact = crs * (1.0f + 0x1p-12f);
    mpt_conv_args a = {.s = s, .math = MPT_MATH_FP32, .dtype = MPT_DTYPE_F32, .tag = tag32};
    a.x = dev_put(x, (size_t)nx * 4);
    a.w = dev_put(w, (size_t)nw * 4);
    a.y = dev_alloc((size_t)ny * 4);
    reserve(gpu, gpu->conv2d_workspace(gpu, &a));
    gpu->conv2d_forward(gpu, &a);
    dev_get(y, a.y, (size_t)ny * 4);
    for (int64_t i = 0; i < ny; i++)
        EXPECT(y[i] == exact, "fp32 conv %s: y[%lld] = %.9g, expected exactly %.9g (no TF32)", tag32, (long long)i,
               (double)y[i], (double)exact);
    a.math = MPT_MATH_TF32;
    a.tag = tag_tf32;
    reserve(gpu, gpu->conv2d_workspace(gpu, &a));
    gpu->conv2d_forward(gpu, &a);
    dev_get(y, a.y, (size_t)ny * 4);
    int64_t n_tf32 = 0, n_fp32 = 0;
    for (int64_t i = 0; i < ny; i++) {
        n_tf32 += y[i] == crs;
        n_fp32 += y[i] == exact;
        EXPECT(y[i] == crs || y[i] == exact, "tf32 conv %s: y[%lld] = %.9g, neither %.9g (TF32 operands) nor %.9g "
               "(FP32)", tag_tf32, (long long)i, (double)y[i], (double)crs, (double)exact);
    }
    const char *math_type = "?";
    for (int i = 0; i < mpt_cuda_conv_record_count(gpu); i++) {
        mpt_cuda_conv_record rec;
        mpt_cuda_conv_record_get(gpu, i, &rec);
        if (strcmp(rec.tag, tag_tf32) == 0 && strcmp(rec.pass, "forward") == 0) math_type = rec.math_type;
        if (strcmp(rec.tag, tag32) == 0)
            EXPECT(strcmp(rec.math_type, "CUDNN_FMA_MATH") == 0, "fp32 conv ran with %s", rec.math_type);
    }
    EXPECT(strcmp(math_type, "CUDNN_TENSOR_OP_MATH") == 0, "tf32 conv forward ran with %s", math_type);
    const char *listed = conv_listed_math(tag_tf32, "forward");
    printf("test_cuda: tf32 conv forward %dx%dx%dx%d, %d %dx%d filters: algorithm listed as %s; %lld of %lld outputs "
           "with TF32 operands, %lld in FP32\n", s.N, s.C, s.H, s.W, s.K, s.R, s.S, listed ? listed : "(no record)",
           (long long)n_tf32, (long long)ny, (long long)n_fp32);
    dev_free((void *)a.x);
    dev_free((void *)a.w);
    dev_free(a.y);
    free(x);
    free(w);
    free(y);
    return n_tf32 > 0;
}

START_TEST(test_conv_tf32_proof) {
    if (tf32_overridden()) {
        fprintf(stderr, "test_cuda: NVIDIA_TF32_OVERRIDE=0 is set: TF32 cannot run; conv TF32 proof skipped\n");
        return;
    }
    int rounded = 0;
    rounded += conv_tf32_proof_shape(conv_shape(2, 16, 8, 8, 16, 3, 0, 1), "proof.conv.fp32", "proof.conv.tf32");
    rounded += conv_tf32_proof_shape(conv_shape(8, 256, 16, 16, 256, 1, 0, 1), "proof.conv1x1.fp32",
                                     "proof.conv1x1.tf32");
    EXPECT(rounded > 0, "tf32 convolutions: no shape ran with TF32 operands (every output the FP32 value): tf32 mode "
           "never used Tensor Cores for a convolution here");
    conv_tf32_differs();
}
END_TEST

/* ================================ element-wise ========================================================= */

static const mpt_dtype float_dtypes[] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};

/* Expects n elements of two buffers of dtype t to be bit-identical (NaN: both NaN). */
static void expect_same(const char *what, const void *g, const void *c, mpt_dtype t, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        EXPECT(same_bits(g, c, t, i), "%s (%s): element %lld GPU %.9g vs CPU %.9g", what, mpt_dtype_name(t),
               (long long)i, ld(g, t, i), ld(c, t, i));
}

/* Values spanning the formats: random magnitudes 2^-30..2^20, F16 subnormals and overflow, and specials. */
static float *special_values(tests_rng *r, int64_t n) {
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f,
                                     1e-8f, -3e-7f, 5.96e-8f, 3.0e38f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f, 1e-40f};
    float *v = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double m = tests_uniform(r, 1, 2) * ldexp(1.0, tests_int(r, -30, 20));
        v[i] = (float)(tests_int(r, 0, 1) ? m : -m);
    }
    for (size_t k = 0; k < sizeof specials / sizeof *specials && (int64_t)k < n; k++) v[k * 7 % n] = specials[k];
    return v;
}

START_TEST(test_cast) {
    const int64_t n = 4099;
    tests_rng r = {31};
    float *v = special_values(&r, n);
    uint8_t *u8 = xmalloc((size_t)n);
    for (int64_t i = 0; i < n; i++) u8[i] = (uint8_t)tests_int(&r, 0, 255);
    const mpt_dtype srcs[] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16, MPT_DTYPE_U8};
    for (size_t si = 0; si < 4; si++) {
        mpt_dtype st = srcs[si];
        void *src = xmalloc(nbytes(st, n));
        if (st == MPT_DTYPE_U8) memcpy(src, u8, (size_t)n);
        else
            for (int64_t i = 0; i < n; i++) mpt_store_f32(src, st, i, v[i]);
        void *dsrc = dev_put(src, nbytes(st, n));
        for (size_t di = 0; di < 3; di++) {
            mpt_dtype dt = float_dtypes[di];
            void *ddst = dev_alloc(nbytes(dt, n));
            gpu->cast(gpu, ddst, dt, dsrc, st, n);
            void *g = xmalloc(nbytes(dt, n)), *c = xmalloc(nbytes(dt, n));
            dev_get(g, ddst, nbytes(dt, n));
            cpu->cast(cpu, c, dt, src, st, n);
            char what[64];
            snprintf(what, sizeof what, "cast from %s", mpt_dtype_name(st));
            expect_same(what, g, c, dt, n);
            dev_free(ddst);
            free(g);
            free(c);
        }
        dev_free(dsrc);
        free(src);
    }
    free(v);
    free(u8);
}
END_TEST

START_TEST(test_relu) {
    const int64_t n = 3001;
    tests_rng r = {32};
    for (size_t di = 0; di < 3; di++) {
        mpt_dtype t = float_dtypes[di];
        float *v = special_values(&r, n);
        void *x = xmalloc(nbytes(t, n)), *dy = fill(&r, t, n, -2, 2), *dx0 = fill(&r, t, n, -2, 2);
        for (int64_t i = 0; i < n; i++) mpt_store_f32(x, t, i, v[i]);
        void *dxv = dev_put(x, nbytes(t, n)), *dyv = dev_alloc(nbytes(t, n));
        void *ddy = dev_put(dy, nbytes(t, n)), *ddx = dev_put(dx0, nbytes(t, n));
        gpu->relu_forward(gpu, dyv, dxv, t, n);
        gpu->relu_backward(gpu, ddx, ddy, dyv, t, n, 1);
        void *yg = xmalloc(nbytes(t, n)), *dxg = xmalloc(nbytes(t, n));
        dev_get(yg, dyv, nbytes(t, n));
        dev_get(dxg, ddx, nbytes(t, n));
        void *yc = xmalloc(nbytes(t, n)), *dxc = host_dup(dx0, nbytes(t, n));
        cpu->relu_forward(cpu, yc, x, t, n);
        cpu->relu_backward(cpu, dxc, dy, yc, t, n, 1);
        expect_same("relu forward", yg, yc, t, n);
        expect_same("relu backward", dxg, dxc, t, n);
        dev_free(dxv);
        dev_free(dyv);
        dev_free(ddy);
        dev_free(ddx);
        free(v);
        free(x);
        free(dy);
        free(dx0);
        free(yg);
        free(dxg);
        free(yc);
        free(dxc);
    }
}
END_TEST

START_TEST(test_maxpool) {
    static const int cfg[][7] = {/* N C H W kernel stride pad */
                                 {2, 3, 9, 7, 3, 2, 1},
                                 {4, 6, 24, 24, 2, 2, 0},
                                 {2, 2, 8, 8, 3, 1, 1},
                                 {1, 3, 5, 6, 5, 3, 2}};
    tests_rng r = {33};
    for (size_t ci = 0; ci < sizeof cfg / sizeof *cfg; ci++)
        for (size_t di = 0; di < 3; di++) {
            mpt_dtype t = float_dtypes[di];
            mpt_pool_args a = {.N = cfg[ci][0], .C = cfg[ci][1], .H = cfg[ci][2], .W = cfg[ci][3], .kernel = cfg[ci][4],
                               .stride = cfg[ci][5], .pad = cfg[ci][6], .dtype = t};
            a.P = (a.H + 2 * a.pad - a.kernel) / a.stride + 1;
            a.Q = (a.W + 2 * a.pad - a.kernel) / a.stride + 1;
            const int64_t nx = (int64_t)a.N * a.C * a.H * a.W, ny = (int64_t)a.N * a.C * a.P * a.Q;
            void *x = xmalloc(nbytes(t, nx));
            for (int64_t i = 0; i < nx; i++) mpt_store_f32(x, t, i, 0.25f * (float)tests_int(&r, -8, 8)); /* ties */
            if (ci == 0) mpt_store_f32(x, t, 5, NAN);
            void *dy = fill(&r, t, ny, -1, 1), *dx0 = fill(&r, t, nx, -1, 1);
            mpt_pool_args g = a;
            g.x = dev_put(x, nbytes(t, nx));
            g.y = dev_alloc(nbytes(t, ny));
            g.argmax = dev_alloc((size_t)ny * 4);
            g.dy = dev_put(dy, nbytes(t, ny));
            g.dx = dev_put(dx0, nbytes(t, nx));
            gpu->maxpool_forward(gpu, &g);
            gpu->maxpool_backward(gpu, &g);
            void *yg = xmalloc(nbytes(t, ny)), *dxg = xmalloc(nbytes(t, nx));
            int32_t *amg = xmalloc((size_t)ny * 4);
            dev_get(yg, g.y, nbytes(t, ny));
            dev_get(amg, g.argmax, (size_t)ny * 4);
            dev_get(dxg, g.dx, nbytes(t, nx));
            mpt_pool_args c = a;
            c.x = x;
            c.y = xmalloc(nbytes(t, ny));
            c.argmax = xmalloc((size_t)ny * 4);
            c.dy = dy;
            c.dx = host_dup(dx0, nbytes(t, nx));
            cpu->maxpool_forward(cpu, &c);
            cpu->maxpool_backward(cpu, &c);
            expect_same("maxpool forward", yg, c.y, t, ny);
            for (int64_t i = 0; i < ny; i++)
                EXPECT(amg[i] == c.argmax[i], "maxpool config %zu argmax[%lld]: GPU %d, CPU %d", ci, (long long)i,
                       amg[i], c.argmax[i]);
            expect_same("maxpool backward", dxg, c.dx, t, nx);
            dev_free((void *)g.x);
            dev_free(g.y);
            dev_free(g.argmax);
            dev_free((void *)g.dy);
            dev_free(g.dx);
            free(x);
            free(dy);
            free(dx0);
            free(yg);
            free(dxg);
            free(amg);
            free(c.y);
            free(c.argmax);
            free(c.dx);
        }
}
END_TEST

/* The device Philox generator reproduces the host one bit for bit (odd offsets and lengths included: Philox
 * produces 4 numbers per counter, so an offset that is not a multiple of 4 starts inside a block). */
START_TEST(test_rng_host_device_identical) {
    static const struct {
        uint64_t seed, offset;
        size_t n;
    } cases[] = {{12345, 0, 1000}, {0, 3, 1001}, {99, 1000001, 4096}, {1, 5, 1}, {0xdeadbeefcafef00dull, 7, 77777}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        size_t n = cases[k].n;
        uint64_t seed = k == 1 ? mpt_rng_stream_seed(7, MPT_RNG_DROPOUT) : cases[k].seed;
        float *h = xmalloc(n * 4), *d = xmalloc(n * 4);
        mpt_rng_uniform(h, n, seed, cases[k].offset);
        float *dd = dev_alloc(n * 4);
        mpt_cuda_rng_uniform(gpu, dd, n, seed, cases[k].offset);
        dev_get(d, dd, n * 4);
        for (size_t i = 0; i < n; i++)
            EXPECT(bits(h[i]) == bits(d[i]), "Philox seed %llu offset %llu: u[%zu] host %.9g, device %.9g",
                   (unsigned long long)seed, (unsigned long long)cases[k].offset, i, (double)h[i], (double)d[i]);
        dev_free(dd);
        free(h);
        free(d);
    }
}
END_TEST

START_TEST(test_dropout) {
    const int64_t n = 1001;
    const float p = 0.3f;
    tests_rng r = {34};
    reserve(gpu, (size_t)n * 4);
    reserve(cpu, (size_t)n * 4);
    /* the kernel computes cuRAND's stream in place (mpt_philox_uniform); the CPU draws it from cuRAND's host
     * generator: masks must agree bit for bit, also across the stream's 65536-subsequence rounds (offset near
     * 4 * 65536) and past 2^32 */
    static const uint64_t offsets[] = {3, 4 * 65536 - 500, ((uint64_t)1 << 33) + 1, 1000, 2003};
    for (size_t di = 0; di < 5; di++) {
        mpt_dtype t = float_dtypes[di % 3];
        const uint64_t seed = mpt_rng_stream_seed(42 + di, MPT_RNG_DROPOUT), offset = offsets[di];
        void *x = fill(&r, t, n, -3, 3), *dy = fill(&r, t, n, -3, 3), *dx0 = fill(&r, t, n, -1, 1);
        void *dxx = dev_put(x, nbytes(t, n)), *dyy = dev_alloc(nbytes(t, n)), *ddy = dev_put(dy, nbytes(t, n));
        void *ddx = dev_put(dx0, nbytes(t, n));
        uint8_t *dmask = dev_alloc((size_t)n);
        gpu->dropout_forward(gpu, dyy, dxx, dmask, t, n, p, seed, offset, NULL, 0);
        gpu->dropout_backward(gpu, ddx, ddy, dmask, t, n, p, 1);
        void *yg = xmalloc(nbytes(t, n)), *dxg = xmalloc(nbytes(t, n));
        uint8_t *mg = xmalloc((size_t)n);
        dev_get(yg, dyy, nbytes(t, n));
        dev_get(dxg, ddx, nbytes(t, n));
        dev_get(mg, dmask, (size_t)n);
        void *yc = xmalloc(nbytes(t, n)), *dxc = host_dup(dx0, nbytes(t, n));
        uint8_t *mc = xmalloc((size_t)n);
        cpu->dropout_forward(cpu, yc, x, mc, t, n, p, seed, offset, NULL, 0);
        cpu->dropout_backward(cpu, dxc, dy, mc, t, n, p, 1);
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) {
            EXPECT(mg[i] == mc[i], "dropout mask[%lld]: GPU %d, CPU %d", (long long)i, mg[i], mc[i]);
            kept += mg[i];
        }
        /* Bernoulli(0.7) over 1001 draws: mean 700.7, sd 14.5; 8 sd either side */
        EXPECT(kept > 584 && kept < 817, "dropout kept %lld of %lld with p = 0.3", (long long)kept, (long long)n);
        expect_same("dropout forward", yg, yc, t, n);
        expect_same("dropout backward", dxg, dxc, t, n);
        dev_free(dxx);
        dev_free(dyy);
        dev_free(ddy);
        dev_free(ddx);
        dev_free(dmask);
        free(x);
        free(dy);
        free(dx0);
        free(yg);
        free(dxg);
        free(mg);
        free(yc);
        free(dxc);
        free(mc);
    }
}
END_TEST

/* ---- softmax + cross-entropy ---------------------------------------------------------------------------- */

/* FP64 reference of one row and the bound of the GPU's FP32 evaluation. expf/logf: at most 2 and 1 ulp (CUDA
 * programming guide, mathematical functions); t = z - max is exact or within u32*|t|; so each exp term has a
 * relative error <= (|t| + 4) u32, the sum (C - 1) u32 more, the division one more:
 *   |p - p_ref| <= 2*(range + C + 6) u32 p_ref  (range = max |z - max|, factor 2 for second-order terms);
 *   |loss_i - ref| <= 2*(range + C + 6) u32 + 4 u32 (|max| + |lse| + |z_label|)  (log of the sum, then two
 *   FP32 subtractions/additions). */
typedef struct xent_row_ref {
    double loss, bound_loss, range;
    int arg;
} xent_row_ref;

static xent_row_ref xent_row(const void *logits, mpt_dtype t, int64_t base, int C, int label, double *p_ref) {
    xent_row_ref o = {0};
    double m = ld(logits, t, base);
    o.arg = 0;
    for (int c = 1; c < C; c++)
        if (ld(logits, t, base + c) > m) {
            m = ld(logits, t, base + c);
            o.arg = c;
        }
    double sum = 0;
    for (int c = 0; c < C; c++) {
        double z = ld(logits, t, base + c);
        sum += exp(z - m);
        if (fabs(z - m) > o.range) o.range = fabs(z - m);
    }
    for (int c = 0; c < C; c++) p_ref[c] = exp(ld(logits, t, base + c) - m) / sum;
    double lse = m + log(sum);
    if (label >= 0) {
        double z = ld(logits, t, base + label);
        o.loss = lse - z;
        o.bound_loss = 2 * (o.range + C + 6) * U32 + 4 * U32 * (fabs(m) + fabs(lse) + fabs(z));
    }
    return o;
}

static void run_xent_case(mpt_dtype t, int N, int C, int ignore_every, uint64_t seed, int compare_cpu) {
    tests_rng r = {seed};
    void *logits = fill(&r, t, (int64_t)N * C, -8, 8);
    int32_t *labels = xmalloc((size_t)N * 4);
    for (int i = 0; i < N; i++) labels[i] = ignore_every && i % ignore_every == 0 ? -1 : tests_int(&r, 0, C - 1);
    const int32_t correct0 = 5;
    const float scale = 1024.0f;
    void *dl0 = fill(&r, t, (int64_t)N * C, -1, 1);
    /* GPU */
    void *dlog = dev_put(logits, nbytes(t, (int64_t)N * C));
    int32_t *dlab = dev_put(labels, (size_t)N * 4), *dcor = dev_put(&correct0, 4);
    float *dprobs = dev_alloc((size_t)N * C * 4), *dloss = dev_alloc(4), *dscale = dev_put(&scale, 4);
    void *ddl = dev_put(dl0, nbytes(t, (int64_t)N * C));
    gpu->softmax_xent_forward(gpu, dloss, dprobs, dcor, dlog, t, dlab, N, C);
    gpu->softmax_xent_backward(gpu, ddl, t, dprobs, dlab, N, C, dscale, 1);
    float lossg;
    int32_t corg;
    float *pg = xmalloc((size_t)N * C * 4);
    void *dlg = xmalloc(nbytes(t, (int64_t)N * C));
    dev_get(&lossg, dloss, 4);
    dev_get(&corg, dcor, 4);
    dev_get(pg, dprobs, (size_t)N * C * 4);
    dev_get(dlg, ddl, nbytes(t, (int64_t)N * C));
    /* FP64 reference */
    double *pr = xmalloc((size_t)C * sizeof(double));
    double loss_sum = 0, bound_sum = 0;
    int valid = 0, correct = 0;
    for (int i = 0; i < N; i++) {
        xent_row_ref o = xent_row(logits, t, (int64_t)i * C, C, labels[i], pr);
        for (int c = 0; c < C; c++) {
            double b = 2 * (o.range + C + 6) * U32 * pr[c] + 0x1p-149;
            double v = pg[(int64_t)i * C + c];
            EXPECT(fabs(v - pr[c]) <= b, "softmax (%s) p[%d,%d] = %.9g, FP64 %.9g, bound %.3g", mpt_dtype_name(t), i,
                   c, v, pr[c], b);
        }
        if (labels[i] >= 0) {
            valid++;
            correct += o.arg == labels[i];
            loss_sum += o.loss;
            bound_sum += o.bound_loss;
        }
    }
    double loss_ref = valid ? loss_sum / valid : 0.0, loss_bound = valid ? bound_sum / valid + U32 * loss_ref : 0.0;
    EXPECT(fabs(lossg - loss_ref) <= loss_bound, "cross-entropy (%s, %d valid rows): loss %.9g, FP64 %.9g, bound %.3g",
           mpt_dtype_name(t), valid, (double)lossg, loss_ref, loss_bound);
    if (valid == 0) EXPECT(lossg == 0.0f, "no valid row: loss %.9g, expected 0", (double)lossg);
    EXPECT(corg == correct0 + correct, "n_correct %d, expected %d + %d", corg, correct0, correct);
    /* backward from the GPU's probabilities: the contract's FP32 expression, rounded once (bit-identical) */
    void *dlr = host_dup(dl0, nbytes(t, (int64_t)N * C));
    const float fN = (float)valid;
    for (int i = 0; i < N; i++) {
        if (labels[i] < 0) continue;
        for (int c = 0; c < C; c++) {
            int64_t e = (int64_t)i * C + c;
            float g = scale * (pg[e] - (c == labels[i] ? 1.0f : 0.0f)) / fN;
            mpt_store_f32(dlr, t, e, mpt_load_f32(dlr, t, e) + g);
        }
    }
    expect_same("softmax_xent backward vs the contract's expression", dlg, dlr, t, (int64_t)N * C);
    if (compare_cpu) { /* all rows valid: the CPU backend as the oracle, fed the same probabilities */
        float lossc;
        int32_t corc = correct0;
        float *pc = xmalloc((size_t)N * C * 4);
        cpu->softmax_xent_forward(cpu, &lossc, pc, &corc, logits, t, labels, N, C);
        EXPECT(fabs((double)lossc - lossg) <= 2 * loss_bound, "loss GPU %.9g vs CPU %.9g", (double)lossg,
               (double)lossc);
        EXPECT(corc == corg, "n_correct GPU %d vs CPU %d", corg, corc);
        void *dlc = host_dup(dl0, nbytes(t, (int64_t)N * C));
        cpu->softmax_xent_backward(cpu, dlc, t, pg, labels, N, C, &scale, 1);
        expect_same("softmax_xent backward vs CPU", dlg, dlc, t, (int64_t)N * C);
        free(pc);
        free(dlc);
    }
    dev_free(dlog);
    dev_free(dlab);
    dev_free(dcor);
    dev_free(dprobs);
    dev_free(dloss);
    dev_free(dscale);
    dev_free(ddl);
    free(logits);
    free(labels);
    free(dl0);
    free(pg);
    free(dlg);
    free(pr);
    free(dlr);
}

START_TEST(test_softmax_xent) {
    for (size_t di = 0; di < 3; di++) {
        run_xent_case(float_dtypes[di], 64, 10, 0, 40 + di, 1);
        run_xent_case(float_dtypes[di], 37, 300, 0, 50 + di, 1); /* several warps per row */
        run_xent_case(float_dtypes[di], 64, 10, 5, 60 + di, 0);  /* padding rows (label -1) ignored */
        run_xent_case(float_dtypes[di], 8, 10, 1, 70 + di, 0);   /* every row ignored: loss 0 */
    }
}
END_TEST

/* The argmax that n_correct counts follows the CPU's rule when a row holds NaN (a sequential scan from element
 * 0 taking v > max: a NaN at element 0 is never replaced, later NaNs are never taken) and for ties (the first
 * maximum): each row's label is that argmax, so every row must count, on both backends. */
START_TEST(test_softmax_xent_argmax_nan) {
    enum { N = 6, C = 37 }; /* 64 threads per row: two warps, so the block reduction decides */
    tests_rng r = {41};
    for (size_t di = 0; di < 3; di++) {
        mpt_dtype t = float_dtypes[di];
        void *logits = fill(&r, t, (int64_t)N * C, -4, 4);
        mpt_store_f32(logits, t, 0 * C + 0, NAN);  /* NaN first: argmax 0 */
        mpt_store_f32(logits, t, 1 * C + 5, NAN);  /* NaN early, the maximum later */
        mpt_store_f32(logits, t, 1 * C + 20, 9.0f);
        mpt_store_f32(logits, t, 2 * C + 3, 9.0f); /* the maximum early, NaN in the second warp */
        mpt_store_f32(logits, t, 2 * C + 33, NAN);
        for (int c = 0; c < C; c++) mpt_store_f32(logits, t, 3 * C + c, NAN);       /* all NaN: 0 */
        for (int c = 0; c < C; c++) mpt_store_f32(logits, t, 4 * C + c, -INFINITY); /* all -inf: 0 */
        mpt_store_f32(logits, t, 5 * C + 10, 9.0f); /* a tie across warps: the first */
        mpt_store_f32(logits, t, 5 * C + 36, 9.0f);
        int32_t labels[N];
        const int32_t want[N] = {0, 20, 3, 0, 0, 10};
        for (int i = 0; i < N; i++) {
            int arg = 0;
            double m = ld(logits, t, (int64_t)i * C);
            for (int c = 1; c < C; c++)
                if (ld(logits, t, (int64_t)i * C + c) > m) {
                    m = ld(logits, t, (int64_t)i * C + c);
                    arg = c;
                }
            EXPECT(arg == want[i], "row %d: the rule gives %d, the test expects %d", i, arg, want[i]);
            labels[i] = arg;
        }
        const int32_t zero = 0;
        void *dlog = dev_put(logits, nbytes(t, (int64_t)N * C));
        int32_t *dlab = dev_put(labels, sizeof labels), *dcor = dev_put(&zero, 4);
        float *dprobs = dev_alloc((size_t)N * C * 4), *dloss = dev_alloc(4);
        gpu->softmax_xent_forward(gpu, dloss, dprobs, dcor, dlog, t, dlab, N, C);
        int32_t corg = 0, corc = 0;
        float lossg, lossc;
        dev_get(&corg, dcor, 4);
        dev_get(&lossg, dloss, 4);
        float *pc = xmalloc((size_t)N * C * 4), *pg = xmalloc((size_t)N * C * 4);
        dev_get(pg, dprobs, (size_t)N * C * 4);
        cpu->softmax_xent_forward(cpu, &lossc, pc, &corc, logits, t, labels, N, C);
        EXPECT(corc == N, "CPU (%s): %d of %d rows counted correct", mpt_dtype_name(t), corc, N);
        EXPECT(corg == N, "GPU (%s): %d of %d rows counted correct (argmax with NaN or ties differs from the CPU's)",
               mpt_dtype_name(t), corg, N);
        EXPECT(isnan(lossg) && isnan(lossc), "loss of a batch with NaN logits: GPU %g, CPU %g", (double)lossg,
               (double)lossc);
        for (int64_t e = 0; e < (int64_t)N * C; e++)
            EXPECT(isnan(pg[e]) == isnan(pc[e]), "probs[%lld]: GPU %g, CPU %g", (long long)e, (double)pg[e],
                   (double)pc[e]);
        dev_free(dlog);
        dev_free(dlab);
        dev_free(dcor);
        dev_free(dprobs);
        dev_free(dloss);
        free(logits);
        free(pc);
        free(pg);
    }
}
END_TEST

/* Fusion 3 of docs/cuda.md (MPT_CUDA_FUSED_LOSS=1, read at backend creation): the forward in one kernel (the last
 * row block takes the mean and stores the valid count), the backward in one (it reads that count). Every output must
 * be BIT-IDENTICAL to the four-kernel path on the same inputs: the rows are the same code at the same block size,
 * and the mean repeats the mean kernel's FP64 additions in its order (kernels/cuda/elementwise.cu,
 * softmax_xent_finish). Shapes N = 1, 7, 128, 1000 (one to four turns of the mean's 256 threads, and blocks far
 * smaller than 256: 32 threads for C = 10) by C = 10, 33, 300 (one, two and eight warps per row), all three logit
 * dtypes, padding rows (label -1; every row in some cases: loss 0), and in half the cases NaN, +inf, all -inf rows
 * and ties. Each forward runs twice with the loss poisoned before each, so a block counter not reset after a
 * launch (the second launch's finish would never run) or a finish that does not write shows; the label pattern
 * cycles through N, 2N/3, 0 and 3N/4 valid rows, so a backward reading a stale count shows. The fused backend also runs
 * run_xent_case (the FP64 reference bounds, the contract's backward expression, the CPU backend) on finite
 * inputs, and on the special ones n_correct, the loss's NaN and the probabilities' NaNs must match the CPU's. */
typedef struct xent_out {
    uint32_t loss_bits[2]; /* the loss of the two forwards */
    int32_t n_correct;     /* after both forwards, from correct0 */
    float *probs;          /* [N, C] */
    void *dlogits;         /* [N, C] of t */
} xent_out;

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void xent_on(mpt_backend *be, xent_out *o, const void *logits, mpt_dtype t, const int32_t *labels, int N,
                    int C, const void *dl0, float scale, int accumulate) {
    const size_t nl = nbytes(t, (int64_t)N * C), np = (size_t)N * C * sizeof(float);
    const float poison = -12345.0f;
    const int32_t correct0 = 5;
    void *dlog = be->alloc(be, nl), *ddl = be->alloc(be, nl);
    int32_t *dlab = be->alloc(be, (size_t)N * 4), *dcor = be->alloc(be, 4);
    float *dprobs = be->alloc(be, np), *dloss = be->alloc(be, 4), *dscale = be->alloc(be, 4);
    EXPECT(dlog && ddl && dlab && dcor && dprobs && dloss && dscale, "cannot allocate on %s", be->name);
    be->from_host(be, dlog, logits, nl);
    be->from_host(be, ddl, dl0, nl);
    be->from_host(be, dlab, labels, (size_t)N * 4);
    be->from_host(be, dcor, &correct0, 4);
    be->from_host(be, dscale, &scale, 4);
    for (int rep = 0; rep < 2; rep++) {
        be->from_host(be, dloss, &poison, 4);
        be->softmax_xent_forward(be, dloss, dprobs, dcor, dlog, t, dlab, N, C);
        float loss;
        be->to_host(be, &loss, dloss, 4);
        o->loss_bits[rep] = f32_bits(loss);
    }
    be->softmax_xent_backward(be, ddl, t, dprobs, dlab, N, C, dscale, accumulate);
    o->probs = xmalloc(np);
    o->dlogits = xmalloc(nl);
    be->to_host(be, &o->n_correct, dcor, 4);
    be->to_host(be, o->probs, dprobs, np);
    be->to_host(be, o->dlogits, ddl, nl);
    be->free(be, dlog);
    be->free(be, ddl);
    be->free(be, dlab);
    be->free(be, dcor);
    be->free(be, dprobs);
    be->free(be, dloss);
    be->free(be, dscale);
}

/* NaN, +inf, a row of -inf and a tie across the row's first and last element, in different rows. */
static void xent_specials(void *logits, mpt_dtype t, int N, int C) {
    for (int i = 0; i < N; i++) {
        const int64_t b = (int64_t)i * C;
        if (i % 5 == 2) mpt_store_f32(logits, t, b + (i * 7) % C, NAN);
        if (i % 5 == 4) mpt_store_f32(logits, t, b + (i * 3) % C, INFINITY);
        if (i % 9 == 7)
            for (int c = 0; c < C; c++) mpt_store_f32(logits, t, b + c, -INFINITY);
        if (i % 11 == 8) {
            mpt_store_f32(logits, t, b, 9.0f);
            mpt_store_f32(logits, t, b + C - 1, 9.0f);
        }
    }
}

static void xent_fused_case(mpt_backend *plain, mpt_backend *fused, mpt_dtype t, int N, int C, int ignore_every,
                            int specials, int accumulate, uint64_t seed) {
    tests_rng r = {seed};
    void *logits = fill(&r, t, (int64_t)N * C, -8, 8);
    if (specials) xent_specials(logits, t, N, C);
    int32_t *labels = xmalloc((size_t)N * 4);
    for (int i = 0; i < N; i++) labels[i] = ignore_every && i % ignore_every == 0 ? -1 : tests_int(&r, 0, C - 1);
    void *dl0 = fill(&r, t, (int64_t)N * C, -1, 1);
    const float scale = 1024.0f;
    xent_out a = {0}, b = {0};
    xent_on(plain, &a, logits, t, labels, N, C, dl0, scale, accumulate);
    xent_on(fused, &b, logits, t, labels, N, C, dl0, scale, accumulate);
    const char *dn = mpt_dtype_name(t);
    for (int rep = 0; rep < 2; rep++)
        EXPECT(a.loss_bits[rep] == b.loss_bits[rep],
               "fused loss (%s, N %d, C %d, forward %d): bits %08x (%.9g), four kernels %08x", dn, N, C, rep + 1,
               (unsigned)b.loss_bits[rep], (double)mpt_load_f32(&b.loss_bits[rep], MPT_DTYPE_F32, 0),
               (unsigned)a.loss_bits[rep]);
    EXPECT(a.n_correct == b.n_correct, "fused n_correct (%s, N %d, C %d): %d, four kernels %d", dn, N, C,
           b.n_correct, a.n_correct);
    for (int64_t e = 0; e < (int64_t)N * C; e++)
        EXPECT(f32_bits(a.probs[e]) == f32_bits(b.probs[e]),
               "fused probs[%lld] (%s, N %d, C %d): %.9g, four kernels %.9g", (long long)e, dn, N, C,
               (double)b.probs[e], (double)a.probs[e]);
    EXPECT(memcmp(a.dlogits, b.dlogits, nbytes(t, (int64_t)N * C)) == 0,
           "fused dlogits (%s, N %d, C %d, accumulate %d) differ from the four kernels'", dn, N, C, accumulate);
    if (specials) { /* the CPU backend as the oracle where the FP64 bounds do not apply */
        float lossc;
        int32_t corc = 5;
        float *pc = xmalloc((size_t)N * C * 4);
        for (int rep = 0; rep < 2; rep++) /* as xent_on: two forwards, each adding its count */
            cpu->softmax_xent_forward(cpu, &lossc, pc, &corc, logits, t, labels, N, C);
        float lossg;
        memcpy(&lossg, &b.loss_bits[1], sizeof lossg);
        EXPECT(corc == b.n_correct, "fused n_correct (%s, N %d, C %d): %d, CPU %d", dn, N, C, b.n_correct, corc);
        EXPECT(isnan(lossg) == isnan(lossc), "fused loss (%s, N %d, C %d): %g, CPU %g", dn, N, C, (double)lossg,
               (double)lossc);
        for (int64_t e = 0; e < (int64_t)N * C; e++)
            EXPECT(isnan(b.probs[e]) == isnan(pc[e]), "fused probs[%lld] (%s): %g, CPU %g", (long long)e, dn,
                   (double)b.probs[e], (double)pc[e]);
        free(pc);
    }
    free(logits);
    free(labels);
    free(dl0);
    free(a.probs);
    free(a.dlogits);
    free(b.probs);
    free(b.dlogits);
}

START_TEST(test_softmax_xent_fused_bit_identical) {
    static const int Ns[] = {1, 7, 128, 1000}, Cs[] = {10, 33, 300}, ignore[] = {0, 3, 1, 4};
    mpt_backend *fused = cuda_backend_with("MPT_CUDA_FUSED_LOSS");
    swap_in(fused); /* the fixture's restore_gpu puts the four-kernel backend back and frees `fused` */
    uint64_t seed = 900;
    int k = 0;
    for (size_t ni = 0; ni < 4; ni++)
        for (size_t ci = 0; ci < 3; ci++)
            for (size_t di = 0; di < 3; di++, k++) /* padding, specials and accumulate cycle with k */
                xent_fused_case(shared_gpu, fused, float_dtypes[di], Ns[ni], Cs[ci], ignore[k % 4], k % 2,
                                (k / 2) % 2, seed++);
    /* the same bits by design: the count tells that the variable was read and the fused kernels ran (a forward
     * and a backward at least per case) */
    EXPECT(mpt_cuda_opt_in_calls(fused, MPT_CUDA_OPT_FUSED_LOSS) >= 2 * k,
           "MPT_CUDA_FUSED_LOSS=1: %lld calls took the fused loss in %d cases",
           (long long)mpt_cuda_opt_in_calls(fused, MPT_CUDA_OPT_FUSED_LOSS), k);
    EXPECT(mpt_test_env_on("MPT_CUDA_FUSED_LOSS") || mpt_cuda_opt_in_calls(shared_gpu, MPT_CUDA_OPT_FUSED_LOSS) == 0,
           "the program's backend took the fused loss without MPT_CUDA_FUSED_LOSS=1");
    /* the fused backend against the FP64 reference and the CPU (run_xent_case runs on `gpu`) */
    for (size_t ni = 0; ni < 4; ni++)
        for (size_t ci = 0; ci < 3; ci++) {
            const int ig = ignore[(ni + ci) % 4];
            run_xent_case(float_dtypes[(ni + ci) % 3], Ns[ni], Cs[ci], ig, seed++, ig == 0);
        }
    restore_gpu();
}
END_TEST

START_TEST(test_bias_grad) {
    static const int64_t shapes[][2] = {{300, 70}, {1, 33}, {128, 10}};
    tests_rng r = {35};
    for (size_t si = 0; si < 3; si++)
        for (size_t di = 0; di < 3; di++) {
            mpt_dtype t = float_dtypes[di];
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            void *dy = fill(&r, t, rows * cols, -1, 1);
            float *db0 = fill(&r, MPT_DTYPE_F32, cols, -1, 1);
            void *ddy = dev_put(dy, nbytes(t, rows * cols));
            float *ddb = dev_put(db0, (size_t)cols * 4);
            gpu->bias_grad(gpu, ddb, ddy, t, rows, cols, 1);
            float *dbg = xmalloc((size_t)cols * 4), *dbc = host_dup(db0, (size_t)cols * 4);
            dev_get(dbg, ddb, (size_t)cols * 4);
            cpu->bias_grad(cpu, dbc, dy, t, rows, cols, 1);
            for (int64_t c = 0; c < cols; c++) {
                double acc = db0[c], T = fabs(db0[c]);
                for (int64_t i = 0; i < rows; i++) {
                    acc += ld(dy, t, i * cols + c);
                    T += fabs(ld(dy, t, i * cols + c));
                }
                double bound = 2.0 * (rows + 2) * U32 * T;
                EXPECT(fabs(dbg[c] - acc) <= bound, "bias_grad (%s, %lldx%lld) db[%lld] = %.9g, FP64 %.9g, bound %.3g",
                       mpt_dtype_name(t), (long long)rows, (long long)cols, (long long)c, (double)dbg[c], acc, bound);
                EXPECT(fabs(dbg[c] - dbc[c]) <= 2 * bound, "bias_grad db[%lld]: GPU %.9g vs CPU %.9g", (long long)c,
                       (double)dbg[c], (double)dbc[c]);
            }
            dev_free(ddy);
            dev_free(ddb);
            free(dy);
            free(db0);
            free(dbg);
            free(dbc);
        }
}
END_TEST

START_TEST(test_gather_batch) {
    const int n_total = 40, B = 12;
    const int64_t D = 784;
    const float mean = 0.2860f, inv_std = 1.0f / 0.3530f;
    tests_rng r = {36};
    uint8_t *images = xmalloc((size_t)n_total * D), *image_labels = xmalloc((size_t)n_total);
    for (int64_t i = 0; i < n_total * D; i++) images[i] = (uint8_t)tests_int(&r, 0, 255);
    for (int i = 0; i < n_total; i++) image_labels[i] = (uint8_t)tests_int(&r, 0, 9);
    int32_t idx[12];
    for (int b = 0; b < B; b++) idx[b] = tests_int(&r, 0, n_total - 1);
    uint8_t *dimg = dev_put(images, (size_t)n_total * D), *dil = dev_put(image_labels, (size_t)n_total);
    for (int padded = 0; padded < 2; padded++) {
        if (padded) idx[B - 1] = idx[3] = -1; /* padding rows of a last partial batch */
        int32_t *didx = dev_put(idx, sizeof idx), *dlab = dev_alloc(sizeof idx);
        for (size_t di = 0; di < 3; di++) {
            mpt_dtype t = float_dtypes[di];
            void *dx = dev_alloc(nbytes(t, B * D));
            gpu->gather_batch(gpu, dx, t, dlab, dimg, dil, didx, B, D, mean, inv_std);
            void *xg = xmalloc(nbytes(t, B * D)), *xr = xmalloc(nbytes(t, B * D));
            int32_t lg[12];
            dev_get(xg, dx, nbytes(t, B * D));
            dev_get(lg, dlab, sizeof lg);
            for (int b = 0; b < B; b++) {
                for (int64_t d = 0; d < D; d++) {
                    float v = idx[b] < 0 ? 0.0f : ((float)images[(int64_t)idx[b] * D + d] / 255.0f - mean) * inv_std;
                    mpt_store_f32(xr, t, b * D + d, v);
                }
                int32_t want = idx[b] < 0 ? -1 : image_labels[idx[b]];
                EXPECT(lg[b] == want, "gather_batch labels[%d] = %d, expected %d", b, lg[b], want);
            }
            expect_same("gather_batch vs the contract's FP32 expression", xg, xr, t, B * D);
            if (!padded) {
                void *xc = xmalloc(nbytes(t, B * D));
                int32_t lc[12];
                cpu->gather_batch(cpu, xc, t, lc, images, image_labels, idx, B, D, mean, inv_std);
                expect_same("gather_batch vs CPU", xg, xc, t, B * D);
                for (int b = 0; b < B; b++) EXPECT(lc[b] == lg[b], "labels[%d]: GPU %d, CPU %d", b, lg[b], lc[b]);
                free(xc);
            }
            dev_free(dx);
            free(xg);
            free(xr);
        }
        dev_free(didx);
        dev_free(dlab);
    }
    dev_free(dimg);
    dev_free(dil);
    free(images);
    free(image_labels);
}
END_TEST

/* MPT_EPILOGUE_BGRAD (cuBLASLt CUBLASLT_EPILOGUE_BGRADB) on the GPU against the CPU's unfused bits, for a linear
 * layer's weight-gradient shapes (dW[M=out, N=in] = dy^T x over K = batch rows) in every math mode, beta 0 and 1:
 * C within the GEMM bound of the other GEMM tests (gemm_bound); the bias gradient, column sums of dy in an order of
 * cuBLASLt's choosing, within twice the FP32 summation bound K u32 sum_k |dy[k, m]| of the CPU's, plus the TF32
 * rounding of the operand in tf32 mode (cuBLASLt may reduce the rounded operand: not documented), u_tf32 sum|dy|.
 * C: each backend within ((K + 4) u32 + op_err) sum|terms| of the exact value (K FP32 sums in any order, the
 * epilogue; op_err the TF32 operand rounding), so within twice that of each other. The GEMM record names the
 * epilogue (or the two-step path when the heuristic declines it). The same calls again on a backend with
 * MPT_CUDA_SPLIT_NARROW_BGRAD=1: the 10-output shape runs as a plain GEMM plus the bias_grad kernel (its record says
 * so), the others as before, all within the same bounds. */
/* The BGRAD calls of test_gemm_bgrad_epilogue on the backend `gpu`, records tagged `tag`. */
static void bgrad_cases(const char *tag) {
    static const int64_t shapes[][3] = {{64, 784, 128}, {10, 64, 128}, {33, 17, 5}};
    tests_rng r = {4545};
    for (size_t si = 0; si < 3; si++)
        for (int mi = 0; mi < 4; mi++)
            for (int beta = 0; beta < 2; beta++) {
                const mpt_math math = all_math[mi];
                const mpt_dtype t = operand_dtype(math);
                const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                void *dy = fill(&r, t, K * M, -1, 1), *x = fill(&r, t, K * N, -1, 1);
                float *c0 = fill(&r, MPT_DTYPE_F32, M * N, -1, 1);
                mpt_gemm_args a = {.trans_a = 1, .M = M, .N = N, .K = K, .a_dtype = t, .b_dtype = t,
                                   .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .beta = (float)beta, .math = math,
                                   .epilogue = MPT_EPILOGUE_BGRAD, .tag = tag};
                mpt_gemm_args ag = a, ac = a;
                ag.A = dev_put(dy, nbytes(t, K * M));
                ag.B = dev_put(x, nbytes(t, K * N));
                ag.C = dev_put(c0, (size_t)(M * N) * 4);
                ag.bias_grad = dev_alloc((size_t)M * 4);
                reserve(gpu, gpu->gemm_workspace(gpu, &ag));
                gpu->gemm(gpu, &ag);
                float *cg = xmalloc((size_t)(M * N) * 4), *bg = xmalloc((size_t)M * 4);
                dev_get(cg, ag.C, (size_t)(M * N) * 4);
                dev_get(bg, ag.bias_grad, (size_t)M * 4);
                float *cc = host_dup(c0, (size_t)(M * N) * 4), *bc = xmalloc((size_t)M * 4);
                ac.A = dy;
                ac.B = x;
                ac.C = cc;
                ac.bias_grad = bc;
                reserve(cpu, cpu->gemm_workspace(cpu, &ac));
                cpu->gemm(cpu, &ac);
                const double tf32 = math == MPT_MATH_TF32 ? 0x1p-11 : 0.0;
                for (int64_t m = 0; m < M; m++) {
                    double T = 0.0;
                    for (int64_t k = 0; k < K; k++) T += fabs(ld(dy, t, k * M + m));
                    const double bound = 2.0 * (double)K * U32 * T + tf32 * T;
                    EXPECT(fabs((double)bg[m] - (double)bc[m]) <= bound,
                           "BGRAD %s %lldx%lldx%lld beta %d: bias gradient [%lld] GPU %.9g CPU %.9g, bound %.3g",
                           mpt_math_name(math), (long long)M, (long long)N, (long long)K, beta, (long long)m,
                           (double)bg[m], (double)bc[m], bound);
                    for (int64_t n = 0; n < N; n++) {
                        double S = beta ? fabs((double)c0[m * N + n]) : 0.0;
                        for (int64_t k = 0; k < K; k++) S += fabs(ld(dy, t, k * M + m) * ld(x, t, k * N + n));
                        const double cb = 2.0 * (((double)K + 4.0) * U32 + op_err(math)) * S;
                        EXPECT(fabs((double)cg[m * N + n] - (double)cc[m * N + n]) <= cb,
                               "BGRAD %s beta %d: C[%lld,%lld] GPU %.9g CPU %.9g, bound %.3g", mpt_math_name(math),
                               beta, (long long)m, (long long)n, (double)cg[m * N + n], (double)cc[m * N + n], cb);
                    }
                }
                dev_free((void *)ag.A);
                dev_free((void *)ag.B);
                dev_free(ag.C);
                dev_free(ag.bias_grad);
                free(dy);
                free(x);
                free(c0);
                free(cg);
                free(bg);
                free(cc);
                free(bc);
            }
    int found = 0;
    for (int i = 0; i < mpt_cuda_gemm_record_count(gpu); i++) {
        mpt_cuda_gemm_record rec;
        EXPECT(mpt_cuda_gemm_record_get(gpu, i, &rec), "record %d", i);
        if (strcmp(rec.tag, tag) != 0) continue;
        found++;
        EXPECT(strcmp(rec.epilogue, "CUBLASLT_EPILOGUE_BGRADB") == 0 || strstr(rec.path, "bias_grad kernel") != NULL,
               "BGRAD record: epilogue %s, path %s", rec.epilogue, rec.path);
    }
    EXPECT(found > 0, "no GEMM record for the BGRAD calls");
}

START_TEST(test_gemm_bgrad_epilogue) {
    bgrad_cases("bgrad.test");
    /* MPT_CUDA_SPLIT_NARROW_BGRAD=1 (gemm.cu): the 10-output shape as a plain GEMM plus the bias_grad kernel, within
     * the same bounds; the wider shapes keep cuBLASLt's BGRADB (or the two-step path) */
    mpt_backend *split = cuda_backend_with("MPT_CUDA_SPLIT_NARROW_BGRAD");
    swap_in(split);
    bgrad_cases("bgrad.split");
    int narrow = 0;
    for (int i = 0; i < mpt_cuda_gemm_record_count(gpu); i++) {
        mpt_cuda_gemm_record rec;
        EXPECT(mpt_cuda_gemm_record_get(gpu, i, &rec), "record %d", i);
        if (strcmp(rec.tag, "bgrad.split") != 0) continue;
        const int is_split = strstr(rec.path, "narrow BGRADB split") != NULL;
        EXPECT(is_split == (rec.M < 16), "split backend, BGRAD %lldx%lldx%lld: path '%s' (split expected: %s)",
               (long long)rec.M, (long long)rec.N, (long long)rec.K, rec.path, rec.M < 16 ? "yes" : "no");
        narrow += is_split;
    }
    EXPECT(narrow > 0, "no BGRAD call ran split on the split backend");
    restore_gpu();
}
END_TEST

/* One DRELU_BGRAD GEMM on backend be (C and the bias gradient come back in c_out, db_out): A [M, K], B [K, N] and
 * C [M, N] row-major of dtype t, the mask aux of mpt_relu_aux_bytes(M, N) bytes. */
static void drelu_bgrad_on(mpt_backend *be, mpt_math math, mpt_dtype t, int64_t M, int64_t N, int64_t K, float beta,
                           const void *A, const void *B, const void *C0, const uint8_t *aux, void *c_out,
                           float *db_out) {
    const size_t a_bytes = nbytes(t, M * K), b_bytes = nbytes(t, K * N), c_bytes = nbytes(t, M * N);
    const size_t aux_bytes = mpt_relu_aux_bytes(M, N);
    mpt_gemm_args g = {.M = M, .N = N, .K = K, .a_dtype = t, .b_dtype = t, .c_dtype = t, .bias_dtype = t,
                       .alpha = 1.0f, .beta = beta, .math = math, .epilogue = MPT_EPILOGUE_DRELU_BGRAD,
                       .tag = "drelu_bgrad.fused"};
    void *dA = be->alloc(be, a_bytes), *dB = be->alloc(be, b_bytes), *dC = be->alloc(be, c_bytes);
    void *dAux = be->alloc(be, aux_bytes);
    float *dDb = be->alloc(be, (size_t)N * 4);
    EXPECT(dA && dB && dC && dAux && dDb, "%s: device allocations", be->name);
    be->from_host(be, dA, A, a_bytes);
    be->from_host(be, dB, B, b_bytes);
    be->from_host(be, dC, C0, c_bytes);
    be->from_host(be, dAux, aux, aux_bytes);
    g.A = dA;
    g.B = dB;
    g.C = dC;
    g.aux = dAux;
    g.bias_grad = dDb;
    reserve(be, be->gemm_workspace(be, &g));
    be->gemm(be, &g);
    be->to_host(be, c_out, dC, c_bytes);
    be->to_host(be, db_out, dDb, (size_t)N * 4);
    void *devs[5] = {dA, dB, dC, dAux, dDb};
    for (int i = 0; i < 5; i++) be->free(be, devs[i]);
}

/* MPT_CUDA_FUSED_DRELU_BGRAD=1 (kernels/cuda/gemm.cu drelu_bgrad_kernel: the two-step DRELU_BGRAD epilogue and
 * bias gradient in one kernel) against the two kernels it replaces (gemm_epilogue_kernel, then bias_grad over the
 * stored C), bit for bit: C and the bias gradient, every math mode with C in the operand dtype, beta 0 (the only
 * beta the contract allows DRELU_BGRAD: mpt_gemm_args_check aborts on any other, engine/backend.h; C starts as
 * random values it must not read), the mlp's and lenet5's data-gradient shapes, odd ones (N = 133 and 33: partial
 * column tiles and mask padding; M = 1 and 37: fewer rows than the 8 row groups, and a ragged last group). Both
 * backends refuse every direct cuBLASLt call (MPT_CUDA_GEMM_REFUSE_DIRECT=1), so both run the two-step path and its
 * cuBLASLt FP32 D is the same call; the fused backend's records name drelu_bgrad_kernel. */
START_TEST(test_drelu_bgrad_fused_bit_identical) {
    static const int64_t shapes[][3] = {{128, 512, 512}, {128, 120, 84}, {16, 133, 61}, {1, 33, 7}, {37, 33, 70}};
    mpt_backend *ref = cuda_backend_with("MPT_CUDA_GEMM_REFUSE_DIRECT");
    mpt_backend *fused = cuda_backend_with("MPT_CUDA_GEMM_REFUSE_DIRECT MPT_CUDA_FUSED_DRELU_BGRAD");
    tests_rng r = {7171};
    for (size_t mi = 0; mi < 4; mi++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int beta = 0; /* DRELU_BGRAD writes C: any other beta aborts in the argument check */
            const mpt_math math = all_math[mi];
            const mpt_dtype t = operand_dtype(math);
            const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            void *A = fill(&r, t, M * K, -1, 1), *B = fill(&r, t, K * N, -1, 1), *C0 = fill(&r, t, M * N, -1, 1);
            const size_t aux_bytes = mpt_relu_aux_bytes(M, N);
            uint8_t *aux = xmalloc(aux_bytes);
            for (size_t i = 0; i < aux_bytes; i++) aux[i] = (uint8_t)tests_int(&r, 0, 255);
            void *c_ref = xmalloc(nbytes(t, M * N)), *c_fused = xmalloc(nbytes(t, M * N));
            float *db_ref = xmalloc((size_t)N * 4), *db_fused = xmalloc((size_t)N * 4);
            drelu_bgrad_on(ref, math, t, M, N, K, (float)beta, A, B, C0, aux, c_ref, db_ref);
            drelu_bgrad_on(fused, math, t, M, N, K, (float)beta, A, B, C0, aux, c_fused, db_fused);
            char what[160];
            snprintf(what, sizeof what, "fused DRELU_BGRAD %s %lldx%lldx%lld beta %d: C ('GPU' fused, 'CPU' two kernels)", mpt_math_name(math),
                     (long long)M, (long long)N, (long long)K, beta);
            expect_same(what, c_fused, c_ref, t, M * N);
            snprintf(what, sizeof what, "fused DRELU_BGRAD %s %lldx%lldx%lld beta %d: bias gradient ('GPU' fused, 'CPU' two kernels)",
                     mpt_math_name(math), (long long)M, (long long)N, (long long)K, beta);
            expect_same(what, db_fused, db_ref, MPT_DTYPE_F32, N);
            free(A);
            free(B);
            free(C0);
            free(aux);
            free(c_ref);
            free(c_fused);
            free(db_ref);
            free(db_fused);
        }
    int found = 0;
    for (int i = 0; i < mpt_cuda_gemm_record_count(fused); i++) {
        mpt_cuda_gemm_record rec;
        EXPECT(mpt_cuda_gemm_record_get(fused, i, &rec), "record %d", i);
        if (strcmp(rec.tag, "drelu_bgrad.fused") != 0) continue;
        found++;
        EXPECT(strstr(rec.path, "drelu_bgrad kernel") != NULL, "fused backend's DRELU_BGRAD path: %s", rec.path);
    }
    EXPECT(found > 0, "no DRELU_BGRAD record on the fused backend");
    mpt_backend_free(&ref);
    mpt_backend_free(&fused);
}
END_TEST

/* g->grad_overwrite on the GPU: first writes overwrite (GEMM and cuDNN beta 0, the kernels' accumulate = 0), no
 * gradient-arena memsets; the gradients of zeroed arenas bit for bit, with the arenas poisoned
 * (tests/grad_overwrite.h), for the three models in fp32 and fp16 (unfused); with fused epilogues (BGRADB, and the
 * relu fusions RELU_AUX_BIAS / DRELU_BGRAD, whose GEMMs may run other algorithms) every gradient within the bound
 * of grad_fuse_close. */
START_TEST(test_grad_overwrite_bit_identical) {
    static const char *const models[3] = {"mlp", "lenet5", "cnn"};
    static const mpt_precision precs[2] = {MPT_PRECISION_FP32, MPT_PRECISION_FP16};
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 2; p++) {
            grad_overwrite_check(gpu, models[m], precs[p]);
            grad_fuse_close(gpu, models[m], precs[p]);
        }
}
END_TEST

/* ================================ mixed-precision update =============================================== */

static mpt_scaler_state scaler_init(float scale) {
    mpt_scaler_state s;
    memset(&s, 0, sizeof s);
    s.scale = scale;
    s.inv_scale = 1.0f / scale;
    s.grad_mul = 1.0f;
    s.hysteresis_left = 1;
    return s;
}

static void expect_float_bits(const char *what, const float *g, const float *c, int64_t n) {
    expect_same(what, g, c, MPT_DTYPE_F32, n);
}

typedef struct optim_case {
    const char *name;
    mpt_optim_hparams h;
} optim_case;

/* Three steps of each optimizer on both backends from the same state: master, state and working copy
 * bit-identical after every step; then a found_inf step that must change nothing. */
START_TEST(test_optim_step_bit_identical) {
    static const optim_case cases[] = {
        {"sgd", {.kind = MPT_OPTIM_SGD, .lr = 0.05f}},
        {"sgd+wd", {.kind = MPT_OPTIM_SGD, .lr = 0.05f, .weight_decay = 1e-3f}},
        {"sgd+momentum",
         {.kind = MPT_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-4f}},
        {"sgd+nesterov", {.kind = MPT_OPTIM_SGD, .lr = 0.02f, .momentum = 0.9f, .nesterov = 1, .weight_decay = 5e-4f}},
        {"adam", {.kind = MPT_OPTIM_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}},
        {"adam+l2",
         {.kind = MPT_OPTIM_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f}},
        {"adamw",
         {.kind = MPT_OPTIM_ADAMW, .lr = 3e-3f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 1e-2f}},
    };
    const int64_t n = 5003;
    const mpt_dtype working[] = {MPT_DTYPE_F16, MPT_DTYPE_BF16, MPT_DTYPE_F32};
    tests_rng r = {37};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (size_t wi2 = 0; wi2 < 3; wi2++)
            for (int clip = 0; clip < 2; clip++) {
                const mpt_optim_hparams h = cases[ci].h;
                const mpt_dtype wt = working[wi2];
                const int has_working = wt != MPT_DTYPE_F32;
                float *master = fill(&r, MPT_DTYPE_F32, n, -1, 1);
                float *m = xmalloc((size_t)n * 4), *v = xmalloc((size_t)n * 4);
                memset(m, 0, (size_t)n * 4);
                memset(v, 0, (size_t)n * 4);
                mpt_scaler_state st = scaler_init(1.0f);
                st.grad_mul = clip ? 0.75f : 1.0f;
                /* GPU state */
                float *gmaster = dev_put(master, (size_t)n * 4), *gm = dev_put(m, (size_t)n * 4);
                float *gv = dev_put(v, (size_t)n * 4), *ggrad = dev_alloc((size_t)n * 4);
                void *gwork = has_working ? dev_alloc(nbytes(wt, n)) : NULL;
                mpt_scaler_state *gst = dev_put(&st, sizeof st);
                /* CPU state */
                float *cmaster = host_dup(master, (size_t)n * 4), *cm = host_dup(m, (size_t)n * 4);
                float *cv = host_dup(v, (size_t)n * 4);
                void *cwork = has_working ? xmalloc(nbytes(wt, n)) : NULL;
                mpt_scaler_state cst = st;
                float *hm = xmalloc((size_t)n * 4), *hv = xmalloc((size_t)n * 4);
                float *hmaster = xmalloc((size_t)n * 4);
                void *hwork = has_working ? xmalloc(nbytes(wt, n)) : NULL;
                /* update deltas (mpt_optim_args.update_out) on the odd steps: 1 (applied) and 3 (skipped) */
                float *gupd = dev_alloc((size_t)n * 4), *cupd = xmalloc((size_t)n * 4), *hupd = xmalloc((size_t)n * 4);
                for (int step = 0; step < 4; step++) {
                    const int skip = step == 3;
                    float *grad = fill(&r, MPT_DTYPE_F32, n, -2, 2);
                    gpu->from_host(gpu, ggrad, grad, (size_t)n * 4);
                    if (skip) {
                        const float one = 1.0f;
                        gpu->from_host(gpu, &gst->found_inf, &one, 4);
                        cst.found_inf = 1.0f;
                    }
                    mpt_optim_args ag = {.h = h, .n = n, .master = gmaster, .grad = ggrad, .m = gm, .v = gv,
                                         .working = gwork, .working_dtype = wt, .found_inf = &gst->found_inf,
                                         .grad_mul = clip ? &gst->grad_mul : NULL, .step = &gst->steps_taken,
                                         .update_out = step & 1 ? gupd : NULL};
                    mpt_optim_args ac = {.h = h, .n = n, .master = cmaster, .grad = grad, .m = cm, .v = cv,
                                         .working = cwork, .working_dtype = wt, .found_inf = &cst.found_inf,
                                         .grad_mul = clip ? &cst.grad_mul : NULL, .step = &cst.steps_taken,
                                         .update_out = step & 1 ? cupd : NULL};
                    gpu->step_begin(gpu, gst);
                    gpu->optim_step(gpu, &ag);
                    cpu->step_begin(cpu, &cst);
                    cpu->optim_step(cpu, &ac);
                    mpt_scaler_state sg;
                    dev_get(&sg, gst, sizeof sg);
                    dev_get(hmaster, gmaster, (size_t)n * 4);
                    dev_get(hm, gm, (size_t)n * 4);
                    dev_get(hv, gv, (size_t)n * 4);
                    if (has_working) dev_get(hwork, gwork, nbytes(wt, n));
                    char what[96];
                    snprintf(what, sizeof what, "%s step %d (working %s, clip %d): master", cases[ci].name, step,
                             mpt_dtype_name(wt), clip);
                    EXPECT(sg.steps_taken == cst.steps_taken && sg.steps_taken == (skip ? 3 : step + 1),
                           "%s: steps_taken GPU %d CPU %d", what, sg.steps_taken, cst.steps_taken);
                    expect_float_bits(what, hmaster, cmaster, n);
                    expect_float_bits("exp_avg / momentum buffer", hm, cm, n);
                    expect_float_bits("exp_avg_sq", hv, cv, n);
                    if (has_working) expect_same("working copy", hwork, cwork, wt, n);
                    if (step & 1) {
                        dev_get(hupd, gupd, (size_t)n * 4);
                        expect_float_bits("update delta (update_out)", hupd, cupd, n);
                    }
                    free(grad);
                }
                dev_free(gupd);
                free(cupd);
                free(hupd);
                dev_free(gmaster);
                dev_free(gm);
                dev_free(gv);
                dev_free(ggrad);
                if (gwork) dev_free(gwork);
                dev_free(gst);
                free(master);
                free(m);
                free(v);
                free(cmaster);
                free(cm);
                free(cv);
                free(cwork);
                free(hm);
                free(hv);
                free(hmaster);
                free(hwork);
            }
}
END_TEST

/* The issue #10 switches on both backends from the same state: 16-bit weights without masters (round to
 * nearest, and stochastic rounding: the GPU must draw the same Philox bits from the documented
 * (seed, iteration, element) counter and round the same way), 16-bit optimizer state, and no found_inf
 * (--nonfinite apply, with a NaN gradient element). Weights, state and update deltas bit-identical after
 * each of three steps. */
START_TEST(test_optim_step_16bit_storage_bit_identical) {
    static const optim_case cases[] = {
        {"sgd+momentum", {.kind = MPT_OPTIM_SGD, .lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f}},
        {"adam", {.kind = MPT_OPTIM_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}},
        {"adamw",
         {.kind = MPT_OPTIM_ADAMW, .lr = 3e-3f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 1e-2f}},
    };
    const int64_t n = 4099;
    const mpt_dtype wts[2] = {MPT_DTYPE_BF16, MPT_DTYPE_F16};
    const mpt_dtype sts[3] = {MPT_DTYPE_F32, MPT_DTYPE_BF16, MPT_DTYPE_F16};
    tests_rng r = {1010};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int wi = 0; wi < 2; wi++)
            for (int si = 0; si < 3; si++)
                for (int mode = 0; mode < 3; mode++) { /* 0 nearest, 1 stochastic, 2 nearest + apply (no found_inf) */
                    const mpt_dtype wt = wts[wi], sd = sts[si];
                    void *w = fill(&r, wt, n, -1, 1);
                    void *m = fill(&r, sd, n, 0, 0), *v = fill(&r, sd, n, 0, 0);
                    mpt_scaler_state st = scaler_init(1.0f);
                    void *gw = dev_put(w, nbytes(wt, n)), *gm = dev_put(m, nbytes(sd, n)), *gv = dev_put(v, nbytes(sd, n));
                    float *ggrad = dev_alloc((size_t)n * 4), *gupd = dev_alloc((size_t)n * 4);
                    mpt_scaler_state *gst = dev_put(&st, sizeof st);
                    float *cupd = xmalloc((size_t)n * 4), *hupd = xmalloc((size_t)n * 4);
                    void *hw = xmalloc(nbytes(wt, n)), *hm = xmalloc(nbytes(sd, n)), *hv = xmalloc(nbytes(sd, n));
                    for (int step = 0; step < 3; step++) {
                        float *grad = fill(&r, MPT_DTYPE_F32, n, -1e-2, 1e-2);
                        if (mode == 2 && step == 1) grad[77] = NAN; /* applied, not skipped */
                        gpu->from_host(gpu, ggrad, grad, (size_t)n * 4);
                        mpt_optim_args base = {.h = cases[ci].h, .n = n, .state_dtype = sd, .working_dtype = wt,
                                               .stochastic = mode == 1, .sr_seed = 0xfeedULL + ci,
                                               .sr_iteration = (uint64_t)step, .sr_offset = 1000};
                        mpt_optim_args ag = base, ac = base;
                        ag.grad = ggrad, ag.working = gw, ag.m = gm, ag.v = gv, ag.update_out = gupd;
                        ag.found_inf = mode == 2 ? NULL : &gst->found_inf, ag.step = &gst->steps_taken;
                        ac.grad = grad, ac.working = w, ac.m = m, ac.v = v, ac.update_out = cupd;
                        ac.found_inf = mode == 2 ? NULL : &st.found_inf, ac.step = &st.steps_taken;
                        gpu->step_begin(gpu, gst);
                        gpu->optim_step(gpu, &ag);
                        cpu->step_begin(cpu, &st);
                        cpu->optim_step(cpu, &ac);
                        dev_get(hw, gw, nbytes(wt, n));
                        dev_get(hm, gm, nbytes(sd, n));
                        dev_get(hv, gv, nbytes(sd, n));
                        dev_get(hupd, gupd, (size_t)n * 4);
                        char what[128];
                        snprintf(what, sizeof what, "%s, weights %s, state %s, mode %d, step %d: weights",
                                 cases[ci].name, mpt_dtype_name(wt), mpt_dtype_name(sd), mode, step);
                        expect_same(what, hw, w, wt, n);
                        expect_same("momentum buffer / exp_avg", hm, m, sd, n);
                        expect_same("exp_avg_sq", hv, v, sd, n);
                        expect_float_bits("update delta", hupd, cupd, n);
                        free(grad);
                    }
                    dev_free(gw);
                    dev_free(gm);
                    dev_free(gv);
                    dev_free(ggrad);
                    dev_free(gupd);
                    dev_free(gst);
                    free(w);
                    free(m);
                    free(v);
                    free(cupd);
                    free(hupd);
                    free(hw);
                    free(hm);
                    free(hv);
                }
}
END_TEST

/* ---- multi-tensor passes (one launch over a table of parameters) ---------------------------------------- */

/* Sizes of the multi-tensor tests' parameters: empty tensors, single elements, exactly one chunk (4096), one
 * element either side of a chunk boundary, several chunks with a short tail. */
static const int64_t mt_sizes[] = {4097, 0, 1, 4096, 333, 12289, 0, 8191, 5, 4095};
#define MT_N ((int)(sizeof mt_sizes / sizeof *mt_sizes))

/* One parameter of the multi-tensor test on both backends: CPU buffers (the per-tensor oracle) and device
 * buffers (NULL where the storage variant has none). */
typedef struct mt_param {
    int64_t n;
    float *cmaster, *cgrad; void *cm, *cv, *cwork;  /* CPU */
    float *gmaster, *ggrad; void *gm, *gv, *gwork;  /* GPU */
} mt_param;

/* How the parameters are stored in one case of the multi-tensor test. */
typedef struct mt_storage {
    const char *name;
    int master;         /* FP32 masters */
    mpt_dtype working;  /* F32: no working copy (with a master) / F16, BF16 */
    mpt_dtype state;
    int stochastic;     /* without masters */
    int apply;          /* --nonfinite apply: found_inf NULL */
    int clip;           /* grad_mul 0.75 */
} mt_storage;

/* A device copy of a host buffer; an empty one still gets a (small) allocation, as a zero-size tensor would. */
static void *mt_dev_copy(const void *host, size_t bytes) { return bytes ? dev_put(host, bytes) : dev_alloc(16); }

static void mt_compare(const char *what, const mt_param *p, const mt_storage *sg) {
    const int64_t n = p->n;
    if (n == 0) return;
    float *h = xmalloc((size_t)n * 4);
    void *hx = xmalloc(nbytes(MPT_DTYPE_F32, n)); /* large enough for any dtype */
    char msg[288];
    dev_get(h, p->ggrad, (size_t)n * 4);
    snprintf(msg, sizeof msg, "%s: unscaled gradient", what);
    expect_float_bits(msg, h, p->cgrad, n);
    if (p->cmaster) {
        dev_get(h, p->gmaster, (size_t)n * 4);
        snprintf(msg, sizeof msg, "%s: master", what);
        expect_float_bits(msg, h, p->cmaster, n);
    }
    if (p->cwork) {
        dev_get(hx, p->gwork, nbytes(sg->working, n));
        snprintf(msg, sizeof msg, "%s: weights (%s)", what, mpt_dtype_name(sg->working));
        expect_same(msg, hx, p->cwork, sg->working, n);
    }
    void *const cs[2] = {p->cm, p->cv}, *const gs[2] = {p->gm, p->gv};
    for (int k = 0; k < 2; k++) {
        if (!cs[k]) continue;
        dev_get(hx, gs[k], nbytes(sg->state, n));
        snprintf(msg, sizeof msg, "%s: optimizer state %d", what, k);
        expect_same(msg, hx, cs[k], sg->state, n);
    }
    free(h);
    free(hx);
}

/* The parameters of a multi-tensor test, on both backends: sizes mt_sizes; FP32 masters, working weights and optimizer
 * state as the storage sg and optimizer h need them (random weights, zero state), the device copies equal to the
 * host's; gradients left for each step to fill (one element allocated for an empty tensor). slots: the device
 * table. Returns the total element count. */
static int64_t mt_setup(tests_rng *r, const mt_storage *sg, const mpt_optim_hparams *h, mt_param p[MT_N],
                        mpt_param_slot slots[MT_N]) {
    const int has_m = mpt_optim_n_state(h) >= 1, has_v = mpt_optim_n_state(h) >= 2;
    const int has_work = !sg->master || sg->working != MPT_DTYPE_F32;
    int64_t numel = 0;
    for (int i = 0; i < MT_N; i++) {
        const int64_t n = mt_sizes[i];
        memset(&p[i], 0, sizeof p[i]);
        p[i].n = n;
        p[i].cgrad = xmalloc((size_t)(n ? n : 1) * 4);
        p[i].ggrad = dev_alloc((size_t)(n ? n : 1) * 4);
        if (sg->master) {
            p[i].cmaster = fill(r, MPT_DTYPE_F32, n, -1, 1);
            p[i].gmaster = mt_dev_copy(p[i].cmaster, (size_t)n * 4);
        }
        if (has_work) {
            p[i].cwork = sg->master ? xmalloc(nbytes(sg->working, n ? n : 1)) : fill(r, sg->working, n, -1, 1);
            if (sg->master)
                for (int64_t k = 0; k < n; k++) mpt_store_f32(p[i].cwork, sg->working, k, p[i].cmaster[k]);
            p[i].gwork = mt_dev_copy(p[i].cwork, nbytes(sg->working, n));
        }
        if (has_m) {
            p[i].cm = fill(r, sg->state, n, 0, 0);
            p[i].gm = mt_dev_copy(p[i].cm, nbytes(sg->state, n));
        }
        if (has_v) {
            p[i].cv = fill(r, sg->state, n, 0, 0);
            p[i].gv = mt_dev_copy(p[i].cv, nbytes(sg->state, n));
        }
        slots[i] = (mpt_param_slot){.master = p[i].gmaster, .grad = p[i].ggrad, .m = p[i].gm, .v = p[i].gv,
                                    .working = p[i].gwork, .working_dtype = sg->working, .n = n,
                                    .sr_offset = (uint64_t)numel};
        numel += n;
    }
    return numel;
}

/* Frees what mt_setup allocated. */
static void mt_free(mt_param p[MT_N]) {
    for (int i = 0; i < MT_N; i++) {
        void *devs[5] = {p[i].gmaster, p[i].ggrad, p[i].gm, p[i].gv, p[i].gwork};
        for (int k = 0; k < 5; k++)
            if (devs[k]) dev_free(devs[k]);
        free(p[i].cmaster);
        free(p[i].cgrad);
        free(p[i].cm);
        free(p[i].cv);
        free(p[i].cwork);
    }
}

/* unscale_check_multi and optim_step_multi on the GPU (one launch each over a table of ten parameters of odd sizes,
 * zero-size ones included) against unscale_check and optim_step called per tensor on the CPU (the oracle): found_inf,
 * step count, gradients, masters, weights and state bit-identical after each of four steps, for SGD (plain,
 * momentum, nesterov), Adam (L2) and AdamW, in every storage variant: FP32 masters with and without a 16-bit
 * working copy, 16-bit weights without masters (nearest and stochastic rounding, whose bits depend on each
 * element's number across all parameters), 16-bit state, --nonfinite apply and a clip coefficient. Step 2 has a
 * NaN in the last element of the 12289-element parameter (a chunk tail): skipped, or applied. */
START_TEST(test_multi_tensor_bit_identical) {
    static const optim_case cases[] = {
        {"sgd", {.kind = MPT_OPTIM_SGD, .lr = 0.05f}},
        {"sgd+momentum",
         {.kind = MPT_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-4f}},
        {"sgd+nesterov", {.kind = MPT_OPTIM_SGD, .lr = 0.02f, .momentum = 0.9f, .nesterov = 1, .weight_decay = 5e-4f}},
        {"adam+l2",
         {.kind = MPT_OPTIM_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f}},
        {"adamw",
         {.kind = MPT_OPTIM_ADAMW, .lr = 3e-3f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 1e-2f}},
    };
    static const mt_storage storages[] = {
        {"fp32 masters + fp16 copy", 1, MPT_DTYPE_F16, MPT_DTYPE_F32, 0, 0, 0},
        {"fp32 masters, no copy, clip", 1, MPT_DTYPE_F32, MPT_DTYPE_F32, 0, 0, 1},
        {"bf16 weights, no masters, bf16 state", 0, MPT_DTYPE_BF16, MPT_DTYPE_BF16, 0, 0, 0},
        {"fp16 weights, no masters, stochastic, fp16 state", 0, MPT_DTYPE_F16, MPT_DTYPE_F16, 1, 0, 0},
        {"bf16 weights, no masters, stochastic, apply", 0, MPT_DTYPE_BF16, MPT_DTYPE_F32, 1, 1, 0},
        {"fp32 masters + bf16 copy, apply, clip", 1, MPT_DTYPE_BF16, MPT_DTYPE_F32, 0, 1, 1},
    };
    const float S = 1024.0f;
    tests_rng r = {4242};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (size_t si = 0; si < sizeof storages / sizeof *storages; si++) {
            const mpt_optim_hparams h = cases[ci].h;
            const mt_storage *sg = &storages[si];
            mt_param p[MT_N];
            mpt_param_slot slots[MT_N];
            const int64_t numel = mt_setup(&r, sg, &h, p, slots);
            mpt_param_slot *dslots = dev_put(slots, sizeof slots);
            mpt_scaler_state st = scaler_init(S);
            st.grad_mul = sg->clip ? 0.75f : 1.0f;
            mpt_scaler_state *gst = dev_put(&st, sizeof st);
            for (int step = 0; step < 4; step++) {
                for (int i = 0; i < MT_N; i++) {
                    for (int64_t k = 0; k < p[i].n; k++) p[i].cgrad[k] = (float)tests_uniform(&r, -2, 2) * S;
                    if (step == 2 && p[i].n == 12289) p[i].cgrad[12288] = NAN;
                    if (p[i].n) gpu->from_host(gpu, p[i].ggrad, p[i].cgrad, (size_t)p[i].n * 4);
                }
                if (sg->apply) {
                    gpu->step_begin(gpu, gst);
                    cpu->step_begin(cpu, &st);
                }
                gpu->unscale_check_multi(gpu, dslots, MT_N, numel, gst);
                for (int i = 0; i < MT_N; i++) cpu->unscale_check(cpu, p[i].cgrad, p[i].n, &st);
                if (!sg->apply) {
                    gpu->step_begin(gpu, gst);
                    cpu->step_begin(cpu, &st);
                }
                const uint64_t seed = 0xabcdef0123ULL + ci;
                mpt_optim_multi_args am = {.h = h, .slots = dslots, .count = MT_N, .numel = numel,
                                           .state_dtype = sg->state, .stochastic = sg->stochastic, .sr_seed = seed,
                                           .sr_iteration = (uint64_t)step,
                                           .found_inf = sg->apply ? NULL : &gst->found_inf,
                                           .grad_mul = sg->clip ? &gst->grad_mul : NULL, .step = &gst->steps_taken};
                gpu->optim_step_multi(gpu, &am);
                for (int i = 0; i < MT_N; i++) {
                    mpt_optim_args a = {.h = h, .n = p[i].n, .master = p[i].cmaster, .grad = p[i].cgrad,
                                        .m = p[i].cm, .v = p[i].cv, .state_dtype = sg->state, .working = p[i].cwork,
                                        .working_dtype = sg->working, .stochastic = sg->stochastic, .sr_seed = seed,
                                        .sr_iteration = (uint64_t)step, .sr_offset = slots[i].sr_offset,
                                        .found_inf = sg->apply ? NULL : &st.found_inf,
                                        .grad_mul = sg->clip ? &st.grad_mul : NULL, .step = &st.steps_taken};
                    cpu->optim_step(cpu, &a);
                }
                mpt_scaler_state hs;
                dev_get(&hs, gst, sizeof hs);
                char what[192];
                snprintf(what, sizeof what, "multi-tensor %s, %s, step %d", cases[ci].name, sg->name, step);
                EXPECT(hs.found_inf == st.found_inf && hs.found_inf == (step == 2 ? 1.0f : 0.0f),
                       "%s: found_inf GPU %g, CPU %g", what, (double)hs.found_inf, (double)st.found_inf);
                EXPECT(hs.steps_taken == st.steps_taken, "%s: steps_taken GPU %d, CPU %d", what, hs.steps_taken,
                       st.steps_taken);
                for (int i = 0; i < MT_N; i++) {
                    char w2[224];
                    snprintf(w2, sizeof w2, "%s, parameter %d (%lld elements)", what, i, (long long)p[i].n);
                    mt_compare(w2, &p[i], sg);
                }
                /* the next step starts clean, as after scaler_update */
                const float zero = 0.0f;
                gpu->from_host(gpu, &gst->found_inf, &zero, sizeof zero);
                st.found_inf = 0.0f;
            }
            dev_free(gst);
            dev_free(dslots);
            mt_free(p);
        }
}
END_TEST

/* update_pass with MPT_CUDA_FUSED_UPDATE=1 (kernels/cuda/optim.cu: a check kernel whose last block runs the step's
 * scalar updates, then the update kernel) against the CPU's five calls (mpt_update_pass_as_calls): after each of
 * 12 steps the whole scaler state (memcmp: scale, found_inf, growth tracker, hysteresis, step and skip counters, lr,
 * iteration), the unscaled gradients, masters, weights and optimizer state bit-identical, for SGD with momentum,
 * Adam and AdamW in the storages the trainer gives the pass (no --nonfinite apply, no clipping): FP32 masters with
 * a 16-bit copy, 16-bit weights without masters (stochastic rounding: bits from each element's number and the
 * iteration), 16-bit state. Steps 0, 3, 4 and 9 overflow (a NaN or inf at a chunk's first element, at a tensor's
 * last, in a single-element tensor): step 0 is skipped with steps_taken 0 (no step scalars may be computed then),
 * hysteresis 2 skips step 3 without backing off and backs off at step 4; the scale grows after every 2 clean
 * steps; a cosine schedule with warmup changes the learning rate every step. Then a table of empty tensors: the
 * scalar updates alone. The parameter sizes (mt_sizes) cross the pass's 1024-element chunks and its float4 rows. */
START_TEST(test_update_pass_bit_identical) {
    static const optim_case cases[] = {
        {"sgd+momentum", {.kind = MPT_OPTIM_SGD, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-4f}},
        {"adam+l2", {.kind = MPT_OPTIM_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f}},
        {"adamw", {.kind = MPT_OPTIM_ADAMW, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 1e-2f}},
    };
    static const mt_storage storages[] = {
        {"fp32 masters + fp16 copy", 1, MPT_DTYPE_F16, MPT_DTYPE_F32, 0, 0, 0},
        {"fp32 masters + bf16 copy, bf16 state", 1, MPT_DTYPE_BF16, MPT_DTYPE_BF16, 0, 0, 0},
        {"bf16 weights, no masters, stochastic", 0, MPT_DTYPE_BF16, MPT_DTYPE_F32, 1, 0, 0},
        {"fp16 weights, no masters, fp16 state", 0, MPT_DTYPE_F16, MPT_DTYPE_F16, 0, 0, 0},
    };
    /* (step, parameter of mt_sizes, element) of each overflow */
    static const struct { int step, param, elem; float value; } bad[] = {
        {0, 0, 1024, NAN}, {3, 5, 12288, INFINITY}, {4, 2, 0, -INFINITY}, {9, 7, 4096, NAN}};
    const mpt_lr_schedule sched = {.kind = MPT_LR_COSINE, .base_lr = 3e-3f, .min_lr = 1e-4f, .warmup_steps = 3,
                                   .total_steps = 12};
    const mpt_scaler_params sp = {.growth_factor = 2.0f, .backoff_factor = 0.5f, .growth_interval = 2,
                                  .hysteresis = 2, .min_scale = 1.0f, .max_scale = 65536.0f};
    mpt_backend *fused = cuda_backend_with("MPT_CUDA_FUSED_UPDATE");
    EXPECT(fused->update_pass != NULL && fused->update_pass != mpt_update_pass_as_calls,
           "MPT_CUDA_FUSED_UPDATE=1 sets the CUDA backend's own update_pass");
    swap_in(fused); /* dev_* allocate and copy on the fused backend: one stream orders everything */
    tests_rng r = {9191};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (size_t si = 0; si < sizeof storages / sizeof *storages; si++) {
            mpt_optim_hparams h = cases[ci].h;
            h.lr = sched.base_lr;
            const mt_storage *sg = &storages[si];
            mt_param p[MT_N];
            mpt_param_slot slots[MT_N];
            const int64_t numel = mt_setup(&r, sg, &h, p, slots);
            mpt_param_slot *dslots = dev_put(slots, sizeof slots);
            mpt_scaler_state st = scaler_init(1024.0f);
            st.hysteresis_left = sp.hysteresis;
            mpt_scaler_state *gst = dev_put(&st, sizeof st);
            /* the CPU backend's slot table holds the host buffers */
            mpt_param_slot cslots[MT_N];
            for (int i = 0; i < MT_N; i++)
                cslots[i] = (mpt_param_slot){.master = p[i].cmaster, .grad = p[i].cgrad, .m = p[i].cm, .v = p[i].cv,
                                             .working = p[i].cwork, .working_dtype = sg->working, .n = p[i].n,
                                             .sr_offset = slots[i].sr_offset};
            const uint64_t seed = 0x5eed0000ULL + 16 * ci + si;
            for (int step = 0; step < 12; step++) {
                for (int i = 0; i < MT_N; i++) {
                    for (int64_t k = 0; k < p[i].n; k++) p[i].cgrad[k] = (float)tests_uniform(&r, -2, 2) * st.scale;
                    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++)
                        if (bad[b].step == step && bad[b].param == i) p[i].cgrad[bad[b].elem] = bad[b].value;
                    if (p[i].n) gpu->from_host(gpu, p[i].ggrad, p[i].cgrad, (size_t)p[i].n * 4);
                }
                mpt_update_pass_args ug = {
                    .optim = {.h = h, .slots = dslots, .count = MT_N, .numel = numel, .state_dtype = sg->state,
                              .stochastic = sg->stochastic, .sr_seed = seed, .found_inf = &gst->found_inf,
                              .step = &gst->steps_taken, .lr = &gst->lr, .iteration = &gst->iteration},
                    .st = gst, .schedule = sched, .scaler = sp, .dynamic = 1};
                mpt_update_pass_args uc = ug;
                uc.optim.slots = cslots;
                uc.optim.found_inf = &st.found_inf;
                uc.optim.step = &st.steps_taken;
                uc.optim.lr = &st.lr;
                uc.optim.iteration = &st.iteration;
                uc.st = &st;
                gpu->update_pass(gpu, &ug);
                mpt_update_pass_as_calls(cpu, &uc);
                mpt_scaler_state hs;
                dev_get(&hs, gst, sizeof hs);
                char what[192];
                snprintf(what, sizeof what, "update pass %s, %s, step %d", cases[ci].name, sg->name, step);
                EXPECT(memcmp(&hs, &st, sizeof hs) == 0,
                       "%s: scaler state GPU scale %g found_inf %g tracker %d hyst %d taken %d skipped %d lr %.9g "
                       "iteration %lld; CPU scale %g found_inf %g tracker %d hyst %d taken %d skipped %d lr %.9g "
                       "iteration %lld",
                       what, (double)hs.scale, (double)hs.found_inf, hs.growth_tracker, hs.hysteresis_left,
                       hs.steps_taken, hs.steps_skipped, (double)hs.lr, (long long)hs.iteration, (double)st.scale,
                       (double)st.found_inf, st.growth_tracker, st.hysteresis_left, st.steps_taken, st.steps_skipped,
                       (double)st.lr, (long long)st.iteration);
                for (int i = 0; i < MT_N; i++) {
                    char w2[224];
                    snprintf(w2, sizeof w2, "%s, parameter %d (%lld elements)", what, i, (long long)p[i].n);
                    mt_compare(w2, &p[i], sg);
                }
            }
            /* the sequence did what the comment says: four skips, the others taken */
            EXPECT(st.steps_skipped == 4 && st.steps_taken == 8 && st.iteration == 12,
                   "%s, %s: %d skipped, %d taken after 12 steps (expected 4 and 8)", cases[ci].name, sg->name,
                   st.steps_skipped, st.steps_taken);
            /* a table of empty tensors: no update kernel has work, the scalars still advance */
            mpt_param_slot empty[2] = {slots[1], slots[6]};
            mpt_param_slot *dempty = dev_put(empty, sizeof empty);
            mpt_update_pass_args ue = {
                .optim = {.h = h, .slots = dempty, .count = 2, .numel = 0, .state_dtype = sg->state,
                          .found_inf = &gst->found_inf, .step = &gst->steps_taken, .lr = &gst->lr,
                          .iteration = &gst->iteration},
                .st = gst, .schedule = sched, .scaler = sp, .dynamic = 1};
            gpu->update_pass(gpu, &ue);
            mpt_param_slot cempty[2] = {cslots[1], cslots[6]};
            ue.optim.slots = cempty;
            ue.optim.found_inf = &st.found_inf;
            ue.optim.step = &st.steps_taken;
            ue.optim.lr = &st.lr;
            ue.optim.iteration = &st.iteration;
            ue.st = &st;
            mpt_update_pass_as_calls(cpu, &ue);
            mpt_scaler_state hs;
            dev_get(&hs, gst, sizeof hs);
            EXPECT(memcmp(&hs, &st, sizeof hs) == 0 && hs.iteration == 13,
                   "update pass on empty tensors (%s, %s): GPU scale %g taken %d iteration %lld; CPU scale %g taken "
                   "%d iteration %lld",
                   cases[ci].name, sg->name, (double)hs.scale, hs.steps_taken, (long long)hs.iteration,
                   (double)st.scale, st.steps_taken, (long long)st.iteration);
            dev_free(dempty);
            dev_free(gst);
            dev_free(dslots);
            mt_free(p);
        }
    restore_gpu();
}
END_TEST

/* Unscale with injected non-finite values: found_inf set by NaN, by inf, and by a finite value that overflows
 * when unscaled; values bit-identical to the CPU's; a clean buffer leaves found_inf alone. */
START_TEST(test_unscale_found_inf) {
    const int64_t n = 3001;
    tests_rng r = {38};
    for (int kind = 0; kind < 4; kind++) {
        float *g = fill(&r, MPT_DTYPE_F32, n, -1000, 1000);
        mpt_scaler_state st = scaler_init(1024.0f);
        if (kind == 1) g[17] = NAN;
        if (kind == 2) g[2000] = -INFINITY;
        if (kind == 3) { /* inv_scale 2^20 (a scale below 1): 1e38 * 2^20 overflows to inf */
            st.scale = 0x1p-20f;
            st.inv_scale = 0x1p20f;
            g[n - 1] = 1e38f;
        }
        float *dg = dev_put(g, (size_t)n * 4);
        mpt_scaler_state *dst = dev_put(&st, sizeof st);
        gpu->unscale_check(gpu, dg, n, dst);
        float *gg = xmalloc((size_t)n * 4);
        mpt_scaler_state sg;
        dev_get(gg, dg, (size_t)n * 4);
        dev_get(&sg, dst, sizeof sg);
        float *gc = host_dup(g, (size_t)n * 4);
        mpt_scaler_state sc = st;
        cpu->unscale_check(cpu, gc, n, &sc);
        EXPECT(sg.found_inf == (kind ? 1.0f : 0.0f), "unscale case %d: found_inf %g", kind, (double)sg.found_inf);
        EXPECT(sc.found_inf == sg.found_inf, "unscale case %d: found_inf GPU %g, CPU %g", kind, (double)sg.found_inf,
               (double)sc.found_inf);
        expect_float_bits("unscaled gradient", gg, gc, n);
        /* a second, clean buffer does not clear found_inf (it is reset by scaler_update only) */
        float *clean = fill(&r, MPT_DTYPE_F32, n, -1, 1);
        gpu->from_host(gpu, dg, clean, (size_t)n * 4);
        gpu->unscale_check(gpu, dg, n, dst);
        dev_get(&sg, dst, sizeof sg);
        EXPECT(sg.found_inf == (kind ? 1.0f : 0.0f), "unscale case %d: found_inf %g after a clean buffer", kind,
               (double)sg.found_inf);
        dev_free(dg);
        dev_free(dst);
        free(g);
        free(gg);
        free(gc);
        free(clean);
    }
}
END_TEST

/* Sum of squares (two calls accumulate) within one FP32 ulp of the CPU's and of the FP64 reference; the clip
 * coefficient from a given sum bit-identical. */
START_TEST(test_sum_squares_clip) {
    const int64_t n1 = 100003, n2 = 777;
    tests_rng r = {39};
    float *g1 = fill(&r, MPT_DTYPE_F32, n1, -3, 3), *g2 = fill(&r, MPT_DTYPE_F32, n2, -3, 3);
    mpt_scaler_state st = scaler_init(1.0f);
    st.sumsq = 0.25f;
    float *d1 = dev_put(g1, (size_t)n1 * 4), *d2 = dev_put(g2, (size_t)n2 * 4);
    mpt_scaler_state *dst = dev_put(&st, sizeof st);
    gpu->sum_squares(gpu, d1, n1, dst);
    gpu->sum_squares(gpu, d2, n2, dst);
    gpu->clip_coef(gpu, dst, 5.0f);
    mpt_scaler_state sg, sc = st;
    dev_get(&sg, dst, sizeof sg);
    cpu->sum_squares(cpu, g1, n1, &sc);
    cpu->sum_squares(cpu, g2, n2, &sc);
    double ref1 = 0.25, ref2;
    for (int64_t i = 0; i < n1; i++) ref1 += (double)g1[i] * g1[i];
    ref1 = (float)ref1; /* the first call rounds to FP32 */
    ref2 = ref1;
    for (int64_t i = 0; i < n2; i++) ref2 += (double)g2[i] * g2[i];
    float ulp = nextafterf(sc.sumsq, INFINITY) - sc.sumsq;
    EXPECT(fabsf(sg.sumsq - sc.sumsq) <= ulp, "sumsq GPU %.9g vs CPU %.9g (1 ulp = %.3g)", (double)sg.sumsq,
           (double)sc.sumsq, (double)ulp);
    EXPECT(fabs(sg.sumsq - ref2) <= 2.0 * ulp, "sumsq GPU %.9g vs FP64 %.9g", (double)sg.sumsq, ref2);
    mpt_scaler_state sc2 = sg; /* the CPU's clip coefficient from the GPU's sum */
    cpu->clip_coef(cpu, &sc2, 5.0f);
    EXPECT(bits(sc2.grad_mul) == bits(sg.grad_mul) && sg.grad_mul < 1.0f, "clip coefficient GPU %.9g vs CPU %.9g",
           (double)sg.grad_mul, (double)sc2.grad_mul);
    dev_free(d1);
    dev_free(d2);
    dev_free(dst);
    free(g1);
    free(g2);
}
END_TEST

/* The loss-scale update over a sequence of clean and overflowing steps that grows to the ceiling, backs off
 * with hysteresis, and hits the floor: the whole state bit-identical to the CPU's after every step. */
START_TEST(test_scaler_update_bit_identical) {
    const mpt_scaler_params p = {.growth_factor = 2.0f, .backoff_factor = 0.5f, .growth_interval = 3,
                                 .hysteresis = 2, .min_scale = 1.0f, .max_scale = 64.0f};
    for (int dynamic = 0; dynamic < 2; dynamic++) {
        mpt_scaler_state st = scaler_init(4.0f);
        st.hysteresis_left = p.hysteresis;
        mpt_scaler_state *dst = dev_put(&st, sizeof st);
        mpt_scaler_state sc = st, sg;
        for (int step = 0; step < 60; step++) {
            /* clean for 20 steps (grows to the ceiling), then mostly overflowing (backs off to the floor) */
            int overflow = step >= 20 && step % 7 != 0;
            if (overflow) {
                const float one = 1.0f;
                gpu->from_host(gpu, &dst->found_inf, &one, 4);
                sc.found_inf = 1.0f;
            }
            gpu->step_begin(gpu, dst);
            gpu->scaler_update(gpu, dst, &p, dynamic);
            cpu->step_begin(cpu, &sc);
            cpu->scaler_update(cpu, &sc, &p, dynamic);
            dev_get(&sg, dst, sizeof sg);
            EXPECT(memcmp(&sg, &sc, sizeof sg) == 0,
                   "scaler (dynamic %d) step %d: GPU scale %g tracker %d hyst %d taken %d skipped %d floor %d; CPU "
                   "scale %g tracker %d hyst %d taken %d skipped %d floor %d",
                   dynamic, step, (double)sg.scale, sg.growth_tracker, sg.hysteresis_left, sg.steps_taken,
                   sg.steps_skipped, sg.floor_hits, (double)sc.scale, sc.growth_tracker, sc.hysteresis_left,
                   sc.steps_taken, sc.steps_skipped, sc.floor_hits);
        }
        if (dynamic) EXPECT(sg.floor_hits > 0 && sg.scale == 1.0f, "the sequence should end at the floor");
        dev_free(dst);
    }
}
END_TEST

/* ================================ end to end: training on both backends ================================= */

/* E2E_STEPS steps of a model in one precision on the CPU and on the GPU backend, from the same initial
 * weights (initialised on the host from the seed, decision 7) on the same batches (a synthetic 28x28 dataset,
 * the same index order; the last batch has padding rows), with the same dropout masks (Philox, same seed and
 * offsets). The two trajectories differ only by summation order (cuBLASLt/cuDNN vs the CPU's loops), by which
 * neighbour a 16-bit rounding of a nearly equal FP32 value lands on, and in tf32 mode by the hardware's TF32
 * rounding of FP32 operands (truncation or round-to-nearest). How far training carries such differences has no
 * closed form, so the bound is measured on the oracle: a third run, on the CPU, multiplies every FP32 master by
 * (1 + EPS s), s = +-1 at random, before EVERY step. A relative change of EPS in the weights changes every dot
 * product sum_k a_k w_k by at most EPS sum_k |a_k w_k|: the form of the bound on a K-term sum evaluated in
 * another order, gamma_K sum_k |a_k w_k| (Higham, Accuracy and Stability of Numerical Algorithms, sec. 3.1),
 * whose typical size is ~sqrt(K) u32 sum_k |a_k w_k| (sec. 2.8: rounding errors behave like a random walk).
 * EPS per mode: fp32 2^-17 >= sqrt(9216) u32 (K = 9216 is the longest reduction of these models); tf32 2^-10,
 * one TF32 ulp, the largest difference between truncating and rounding an operand; fp16 2^-11 and bf16 2^-8,
 * the unit roundoff of the stored activations (the GPU flips a rounding only where its FP32 value differs,
 * rarely; the perturbation moves every element). So the perturbed run's divergence d_pert from the plain CPU
 * run is an upper estimate of what the GPU's noise can do, and the GPU's divergence must stay within 2 d_pert
 * (2: two such processes with independent directions can add up). Compared: the largest difference of the
 * per-step losses, and the relative L2 difference of the FP32 masters' total updates (what the optimizer
 * added; the perturbation itself is subtracted). The optimizer is SGD with momentum, whose update is linear in
 * the gradient: Adam's early updates are about lr * sign(g), so noise flips whole lr-sized updates of
 * near-zero gradients and the bound would be as large as the updates (the optimizer step is tested bit for
 * bit above). Skipped-step counts (fp16's loss scaler) must be equal. A wrong kernel changes the losses and
 * updates by O(1) and fails. */

#define E2E_STEPS 20
#define E2E_BATCH 32

typedef struct e2e_result {
    float loss[E2E_STEPS];
    float *update; /* final minus initial FP32 masters, concatenated in parameter order (host, malloc'd) */
    int64_t n_master;
    int32_t skipped;
} e2e_result;

static double e2e_eps(mpt_precision p) {
    switch (p) {
    case MPT_PRECISION_FP32: return 0x1p-17;
    case MPT_PRECISION_TF32: return 0x1p-10;
    case MPT_PRECISION_FP16: return 0x1p-11;
    default: return 0x1p-8;
    }
}

/* Multiplies every master by (1 + eps * s), s = +-1 from r, rewrites the working copies, and adds what it
 * changed to moved[] (the masters concatenated in parameter order). */
static void e2e_perturb(mpt_trainer *t, double eps, tests_rng *r, double *moved) {
    int64_t off = 0;
    for (int i = 0; i < t->n_params; i++) {
        int64_t n = mpt_tensor_numel(t->master[i]);
        float *w = xmalloc((size_t)n * sizeof(float));
        t->be->to_host(t->be, w, t->master[i]->data, (size_t)n * sizeof(float));
        for (int64_t k = 0; k < n; k++) {
            float p = (float)((double)w[k] * (1.0 + (tests_int(r, 0, 1) ? eps : -eps)));
            moved[off + k] += (double)p - (double)w[k];
            w[k] = p;
        }
        t->be->from_host(t->be, t->master[i]->data, w, (size_t)n * sizeof(float));
        t->be->synchronize(t->be);
        free(w);
        off += n;
    }
    mpt_master_refresh_working(t->g, t->master);
}

/* All FP32 masters, concatenated in parameter order, into a new host array of *n floats. */
static float *e2e_masters(mpt_trainer *t, int64_t *n) {
    *n = 0;
    for (int i = 0; i < t->n_params; i++) *n += mpt_tensor_numel(t->master[i]);
    float *w = xmalloc((size_t)*n * sizeof(float));
    int64_t off = 0;
    for (int i = 0; i < t->n_params; i++) {
        int64_t k = mpt_tensor_numel(t->master[i]);
        t->be->to_host(t->be, w + off, t->master[i]->data, (size_t)k * sizeof(float));
        off += k;
    }
    return w;
}

static void e2e_train(mpt_backend *be, const char *model, mpt_precision prec, const mpt_mnist *d, double eps,
                      e2e_result *out) {
    const int B = E2E_BATCH;
    mpt_policy policy = mpt_policy_make(prec);
    mpt_graph *g = mpt_graph_create(be, &policy, B);
    mpt_tensor *logits = NULL;
    EXPECT(mpt_model_build(g, model, &logits) == MPT_OK, "%s: %s", model, mpt_last_error());
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_train_config_default(prec);
    cfg.optim = mpt_optim_hparams_default(MPT_OPTIM_SGD); /* smooth in the gradient, unlike Adam (see above) */
    cfg.optim.lr = cfg.schedule.base_lr = 0.02f;
    cfg.optim.momentum = 0.9f;
    cfg.seed = 11;
    mpt_trainer *t = NULL;
    EXPECT(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s %s on %s: %s", model, mpt_precision_name(prec), be->name,
           mpt_last_error());
    float *init = e2e_masters(t, &out->n_master);
    double *moved = calloc((size_t)out->n_master, sizeof(double));
    EXPECT(moved != NULL, "out of host memory");
    tests_rng pr = {99};
    /* data in backend memory; batch s holds rows idx[s*B .. s*B + B), the last one ends with 5 padding rows */
    const int64_t n_idx = (int64_t)E2E_STEPS * B;
    int32_t *idx = xmalloc((size_t)n_idx * sizeof(int32_t));
    for (int64_t i = 0; i < n_idx; i++) idx[i] = (int32_t)((i * 7919) % d->n_train);
    for (int64_t i = n_idx - 5; i < n_idx; i++) idx[i] = -1;
    uint8_t *images = be->alloc(be, (size_t)(d->n_train * d->dim)), *labels = be->alloc(be, (size_t)d->n_train);
    int32_t *didx = be->alloc(be, (size_t)n_idx * sizeof(int32_t));
    EXPECT(images && labels && didx, "%s: cannot allocate the data", be->name);
    be->from_host(be, images, d->train_images, (size_t)(d->n_train * d->dim));
    be->from_host(be, labels, d->train_labels, (size_t)d->n_train);
    be->from_host(be, didx, idx, (size_t)n_idx * sizeof(int32_t));
    be->synchronize(be);
    for (int s = 0; s < E2E_STEPS; s++) {
        if (eps > 0) e2e_perturb(t, eps, &pr, moved);
        mpt_trainer_gather(t, images, labels, didx + (int64_t)s * B, d->dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
        mpt_train_stats st;
        mpt_trainer_stats(t, &st);
        out->loss[s] = st.loss;
        out->skipped = st.steps_skipped;
    }
    out->update = e2e_masters(t, &out->n_master);
    for (int64_t i = 0; i < out->n_master; i++)
        out->update[i] = (float)((double)out->update[i] - (double)init[i] - moved[i]);
    free(init);
    free(moved);
    be->free(be, images);
    be->free(be, labels);
    be->free(be, didx);
    mpt_trainer_free(&t);
    free(idx);
}

/* max_s |a.loss[s] - b.loss[s]| and ||a.update - b.update|| / ||b.update||. */
static void e2e_diff(const e2e_result *a, const e2e_result *b, double *dloss, double *dmaster) {
    *dloss = 0;
    for (int s = 0; s < E2E_STEPS; s++) {
        double dl = fabs((double)a->loss[s] - (double)b->loss[s]);
        if (!(dl <= *dloss)) *dloss = dl; /* NaN propagates */
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < b->n_master; i++) {
        double x = (double)a->update[i] - (double)b->update[i];
        num += x * x;
        den += (double)b->update[i] * b->update[i];
    }
    *dmaster = sqrt(num / den);
}

static void e2e_case(const char *model, const mpt_mnist *d) {
    for (int p = 0; p < MPT_PRECISION_COUNT; p++) { /* the FP8 modes: tests/test_cuda_fp8.c */
        const mpt_precision prec = (mpt_precision)p;
        if (mpt_mode_info(prec)->fp8 != MPT_FP8_KIND_NONE) continue;
        e2e_result c = {0}, g = {0}, q = {0};
        e2e_train(cpu, model, prec, d, 0.0, &c);
        e2e_train(gpu, model, prec, d, 0.0, &g);
        e2e_train(cpu, model, prec, d, e2e_eps(prec), &q);
        EXPECT(g.n_master == c.n_master && q.n_master == c.n_master, "parameter counts differ");
        for (int s = 0; s < E2E_STEPS; s++)
            EXPECT(isfinite(c.loss[s]) && isfinite(g.loss[s]), "%s %s step %d: loss CPU %g, GPU %g", model,
                   mpt_precision_name(prec), s, (double)c.loss[s], (double)g.loss[s]);
        double dl_gpu, dw_gpu, dl_pert, dw_pert;
        e2e_diff(&g, &c, &dl_gpu, &dw_gpu);
        e2e_diff(&q, &c, &dl_pert, &dw_pert);
        const double k = 2.0;
        printf("test_cuda: e2e %-6s %-4s %d steps: loss %.6f -> %.6f (CPU); max |loss GPU - CPU| %.3g (bound %.3g), "
               "updates rel L2 GPU vs CPU %.3g (bound %.3g); CPU perturbed by %.3g per step: %.3g, %.3g; skipped %d/%d\n",
               model, mpt_precision_name(prec), E2E_STEPS, (double)c.loss[0], (double)c.loss[E2E_STEPS - 1], dl_gpu,
               k * dl_pert, dw_gpu, k * dw_pert, e2e_eps(prec), dl_pert, dw_pert, g.skipped, c.skipped);
        EXPECT(g.skipped == c.skipped, "%s %s: GPU skipped %d steps, CPU %d", model, mpt_precision_name(prec),
               g.skipped, c.skipped);
        EXPECT(dl_pert > 0 && dw_pert > 0, "%s %s: the perturbed CPU run did not move (eps %g)", model,
               mpt_precision_name(prec), e2e_eps(prec));
        EXPECT(dl_gpu <= k * dl_pert, "%s %s: losses differ by up to %.3g between GPU and CPU, bound %.3g", model,
               mpt_precision_name(prec), dl_gpu, k * dl_pert);
        EXPECT(dw_gpu <= k * dw_pert, "%s %s: the masters' total updates differ by %.3g (relative L2) between GPU and CPU, bound %.3g",
               model, mpt_precision_name(prec), dw_gpu, k * dw_pert);
        free(c.update);
        free(g.update);
        free(q.update);
    }
}

static mpt_mnist e2e_data(void) {
    mpt_mnist d;
    EXPECT(mpt_synthetic_blobs(&d, 480, 0, 784, 10, 5) == MPT_OK, "%s", mpt_last_error());
    return d;
}

START_TEST(test_e2e_mlp) {
    mpt_mnist d = e2e_data();
    e2e_case("mlp", &d);
    mpt_mnist_free(&d);
}
END_TEST

START_TEST(test_e2e_lenet5) {
    mpt_mnist d = e2e_data();
    e2e_case("lenet5", &d);
    mpt_mnist_free(&d);
}
END_TEST

START_TEST(test_e2e_cnn) {
    mpt_mnist d = e2e_data();
    e2e_case("cnn", &d);
    mpt_mnist_free(&d);
}
END_TEST

/* ================================ mptrain train --device cuda: resume is bit-exact ====================== */

/* Runs $MPT_BUILD_ROOT/tools/mptrain with the NULL-terminated arguments (args[0] is the program name);
 * stdout and stderr together go to the file `log`. Returns the exit status, or 128 + signal. */
static int run_mptrain(char *const *args, const char *log) {
    char path[1024];
    const char *root = getenv("MPT_BUILD_ROOT");
    snprintf(path, sizeof path, "%s/tools/mptrain", root ? root : "..");
    fflush(NULL);
    pid_t pid = fork(); /* the child execs at once: CUDA state is not used in it */
    EXPECT(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        execv(path, args);
        _exit(127);
    }
    int status = 0;
    EXPECT(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* Every tensor of two checkpoints byte for byte, and the loss scaler's state. */
static void expect_same_checkpoints(const char *a_path, const char *b_path) {
    mpt_checkpoint *a = NULL, *b = NULL;
    EXPECT(mpt_checkpoint_open(a_path, NULL, 0, &a) == MPT_OK, "%s", mpt_last_error());
    EXPECT(mpt_checkpoint_open(b_path, NULL, 0, &b) == MPT_OK, "%s", mpt_last_error());
    EXPECT(mpt_checkpoint_n_tensors(a) == mpt_checkpoint_n_tensors(b), "tensor counts differ");
    for (int i = 0; i < mpt_checkpoint_n_tensors(a); i++) {
        const mpt_checkpoint_tensor *ta = mpt_checkpoint_tensor_at(a, i);
        const mpt_checkpoint_tensor *tb = mpt_checkpoint_find(b, ta->name);
        EXPECT(tb != NULL, "%s lacks %s", b_path, ta->name);
        int64_t na = mpt_checkpoint_tensor_nbytes(ta);
        EXPECT(na == mpt_checkpoint_tensor_nbytes(tb), "tensor %s sizes differ", ta->name);
        EXPECT(memcmp(ta->data, tb->data, (size_t)na) == 0, "tensor %s differs between the straight and the resumed "
               "GPU run", ta->name);
    }
    EXPECT(strcmp(mpt_checkpoint_meta_get(a, "scaler"), mpt_checkpoint_meta_get(b, "scaler")) == 0,
           "scaler state differs: %s vs %s", mpt_checkpoint_meta_get(a, "scaler"), mpt_checkpoint_meta_get(b, "scaler"));
    mpt_checkpoint_close(&a);
    mpt_checkpoint_close(&b);
}

/* A CSV's text with the last column of every line cut off in place: the run_id, which differs between two runs
 * (tools/run.c). Returns text. */
static char *without_run_id(char *text) {
    char *o = text;
    for (char *line = text, *next; *line; line = next) {
        next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        char *comma = NULL;
        for (char *c = line; c < next; c++)
            if (*c == ',') comma = c;
        size_t keep = comma ? (size_t)(comma - line) : (size_t)(next - line);
        memmove(o, line, keep);
        o += keep;
        if (next[-1] == '\n') *o++ = '\n';
    }
    *o = '\0';
    return text;
}

/* N steps straight and N/2 + save + resume + N/2 on the GPU: the same checkpoint bytes and the same logged
 * losses after the resume point. extra: further flags (NULL-terminated). */
static void resume_case(const char *model, const char *precision, const char *const *extra, int total, int half) {
    make_tmpdir();
    const char *data = tmp_path("data");
    EXPECT(mkdir(data, 0755) == 0, "mkdir %s: %s", data, strerror(errno));
    mpt_mnist d;
    EXPECT(mpt_synthetic_blobs(&d, 600, 300, 784, 10, 42) == MPT_OK, "%s", mpt_last_error());
    EXPECT(mpt_mnist_save(data, &d, 1) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&d);
    char total_s[16], half_s[16];
    snprintf(total_s, sizeof total_s, "%d", total);
    snprintf(half_s, sizeof half_s, "%d", half);
    const char *dirs[2] = {tmp_path("straight"), tmp_path("first")};
    const char *steps[2] = {total_s, half_s};
    const char *log = tmp_path("log.txt");
    for (int r = 0; r < 2; r++) {
        const char *args[64] = {"mptrain", "train", "--data", data, "--device", "cuda", "--model", model,
                                "--precision", precision, "--batch-size", "32", "--epochs", "3", "--log-every", "1",
                                "--limit-test", "64", "--progress", "off", "--max-steps", steps[r], "--out", dirs[r]};
        int n = 24;
        for (int k = 0; extra[k]; k++) args[n++] = extra[k];
        args[n] = NULL;
        int rc = run_mptrain((char *const *)args, log);
        EXPECT(rc == 0, "mptrain train --device cuda (%s steps) failed (%d): %s", steps[r], rc,
               mpt_test_read_text(log));
    }
    char ck_first[600], ck_straight[600], ck_resumed[600], metrics[2][600];
    snprintf(ck_first, sizeof ck_first, "%s/checkpoint.safetensors", dirs[1]);
    snprintf(ck_straight, sizeof ck_straight, "%s/checkpoint.safetensors", dirs[0]);
    const char *resumed = tmp_path("resumed");
    snprintf(ck_resumed, sizeof ck_resumed, "%s/checkpoint.safetensors", resumed);
    const char *args[] = {"mptrain", "train", "--resume", ck_first, "--data", data, "--device", "cuda", "--log-every",
                          "1", "--limit-test", "64", "--progress", "off", "--max-steps", total_s, "--out", resumed,
                          NULL};
    int rc = run_mptrain((char *const *)args, log);
    EXPECT(rc == 0, "mptrain train --resume --device cuda failed (%d): %s", rc, mpt_test_read_text(log));
    EXPECT(strstr(mpt_test_read_text(log), "resuming") != NULL, "the resumed run does not say so: %s",
           mpt_test_read_text(log));
    expect_same_checkpoints(ck_straight, ck_resumed);
    /* metrics.csv: the straight run's rows half+1..total equal the resumed run's rows */
    snprintf(metrics[0], sizeof metrics[0], "%s/metrics.csv", dirs[0]);
    snprintf(metrics[1], sizeof metrics[1], "%s/metrics.csv", resumed);
    char *straight = without_run_id(strdup(mpt_test_read_text(metrics[0])));
    const char *tail = straight;
    for (int line = 0; line < half + 1 && tail; line++) { /* header + the first `half` rows */
        tail = strchr(tail, '\n');
        if (tail) tail++;
    }
    char *resumed_rows = without_run_id(strdup(mpt_test_read_text(metrics[1])));
    const char *res = strchr(resumed_rows, '\n'); /* after the header */
    EXPECT(tail != NULL && res != NULL && strcmp(tail, res + 1) == 0,
           "logged losses after the resume point differ:\nstraight:\n%s\nresumed:\n%s", tail ? tail : "(none)",
           res ? res + 1 : "(none)");
    free(straight);
    free(resumed_rows);
    rm_tmpdir();
}

START_TEST(test_resume_cuda_fp16_mlp) {
    /* 600 / 32 = 19 steps per epoch: 30 steps cross an epoch boundary and the padded batch; the fault injected at
     * iteration 20 (after the checkpoint at 13) is skipped and halves the loss scale. */
    const char *extra[] = {"--inject-nonfinite", "20", "--growth-interval", "7", NULL};
    resume_case("mlp", "fp16", extra, 30, 13);
}
END_TEST

START_TEST(test_resume_cuda_bf16_cnn_dropout) {
    const char *extra[] = {"--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05", "--limit-train", "256", NULL};
    resume_case("cnn", "bf16", extra, 10, 4);
}
END_TEST

/* Telemetry only reads on the GPU too: the same run with telemetry and the FP32 twin every third step (rounding
 * probes through cuBLASLt/cuDNN, the twin, the lost-update deltas) ends with the same checkpoint bytes and logs
 * the same losses as with it off. */
static void telemetry_case(const char *model, const char *precision) {
    make_tmpdir();
    const char *data = tmp_path("data");
    EXPECT(mkdir(data, 0755) == 0, "mkdir %s: %s", data, strerror(errno));
    mpt_mnist d;
    EXPECT(mpt_synthetic_blobs(&d, 384, 64, 784, 10, 42) == MPT_OK, "%s", mpt_last_error());
    EXPECT(mpt_mnist_save(data, &d, 1) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&d);
    const char *dirs[2] = {tmp_path("off"), tmp_path("on")};
    const char *log = tmp_path("log.txt");
    for (int r = 0; r < 2; r++) {
        const char *args[32] = {"mptrain", "train", "--data", data, "--device", "cuda", "--model", model,
                                "--precision", precision, "--batch-size", "32", "--epochs", "1", "--log-every", "1",
                                "--limit-test", "64", "--progress", "off", "--out", dirs[r]};
        int n = 22;
        if (r == 1) {
            args[n++] = "--telemetry";
            args[n++] = "3";
            args[n++] = "--shadow";
        }
        args[n] = NULL;
        int rc = run_mptrain((char *const *)args, log);
        EXPECT(rc == 0, "mptrain train --device cuda (telemetry %s) failed (%d): %s", r ? "on" : "off", rc,
               mpt_test_read_text(log));
    }
    char ck[2][600], metrics[2][600];
    for (int r = 0; r < 2; r++) {
        snprintf(ck[r], sizeof ck[r], "%s/checkpoint.safetensors", dirs[r]);
        snprintf(metrics[r], sizeof metrics[r], "%s/metrics.csv", dirs[r]);
    }
    expect_same_checkpoints(ck[0], ck[1]);
    char *off = without_run_id(strdup(mpt_test_read_text(metrics[0])));
    char *on = without_run_id(strdup(mpt_test_read_text(metrics[1])));
    EXPECT(strcmp(off, on) == 0, "logged losses differ with telemetry on:\n%s\nvs\n%s", off, on);
    free(off);
    free(on);
    char tel[600];
    snprintf(tel, sizeof tel, "%s/telemetry.csv", dirs[1]);
    EXPECT(strstr(mpt_test_read_text(tel), "twin_rel_l2") != NULL, "no twin rows in %s", tel);
    rm_tmpdir();
}

/* The whole of a file (caller frees). */
static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    EXPECT(f != NULL, "%s: %s", path, strerror(errno));
    EXPECT(fseek(f, 0, SEEK_END) == 0, "%s: %s", path, strerror(errno));
    const long len = ftell(f);
    rewind(f);
    char *buf = xmalloc((size_t)len + 1);
    EXPECT(fread(buf, 1, (size_t)len, f) == (size_t)len, "%s: short read", path);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

/* The device reductions change no number a run reports: the same run with telemetry every second step, through host
 * copies and under MPT_CUDA_DEVICE_TELEMETRY=1, ends with the same checkpoint, and its telemetry.csv rows agree
 * (tel_csv_agree: counts as text, FP64 sums within the printed digits). */
static void telemetry_device_case(const char *model, const char *precision) {
    make_tmpdir();
    const char *data = tmp_path("data");
    EXPECT(mkdir(data, 0755) == 0, "mkdir %s: %s", data, strerror(errno));
    mpt_mnist d;
    EXPECT(mpt_synthetic_blobs(&d, 384, 64, 784, 10, 43) == MPT_OK, "%s", mpt_last_error());
    EXPECT(mpt_mnist_save(data, &d, 1) == MPT_OK, "%s", mpt_last_error());
    mpt_mnist_free(&d);
    const char *dirs[2] = {tmp_path("copies"), tmp_path("device")};
    const char *log = tmp_path("log.txt");
    for (int r = 0; r < 2; r++) {
        const char *args[] = {"mptrain", "train", "--data", data, "--device", "cuda", "--model", model, "--precision",
                              precision, "--batch-size", "32", "--epochs", "1", "--telemetry", "2", "--limit-test",
                              "64", "--progress", "off", "--out", dirs[r], NULL};
        if (r == 1) setenv("MPT_CUDA_DEVICE_TELEMETRY", "1", 1);
        int rc = run_mptrain((char *const *)args, log);
        unsetenv("MPT_CUDA_DEVICE_TELEMETRY");
        EXPECT(rc == 0, "mptrain train --device cuda (device telemetry %s) failed (%d): %s", r ? "on" : "off", rc,
               mpt_test_read_text(log));
    }
    char ck[2][600], tel[2][600];
    for (int r = 0; r < 2; r++) {
        snprintf(ck[r], sizeof ck[r], "%s/checkpoint.safetensors", dirs[r]);
        snprintf(tel[r], sizeof tel[r], "%s/telemetry.csv", dirs[r]);
    }
    expect_same_checkpoints(ck[0], ck[1]);
    char *a = read_all(tel[0]), *b = read_all(tel[1]), why[512];
    EXPECT(strstr(a, "lost_frac") && strstr(a, "rel_l2_err") && strstr(a, "zero_frac"), "rows missing from %s", tel[0]);
    EXPECT(tel_csv_agree(a, b, why, sizeof why), "telemetry.csv through host copies against device reductions: %s",
           why);
    free(a), free(b);
    if (strcmp(precision, "fp16") == 0) { /* the gradients' exponent histograms: counts only, the same bytes */
        char ex[2][600];
        for (int r = 0; r < 2; r++) snprintf(ex[r], sizeof ex[r], "%s/exponents.csv", dirs[r]);
        a = read_all(ex[0]), b = read_all(ex[1]);
        EXPECT(strcmp(a, b) == 0 && strchr(a, '\n') != strrchr(a, '\n'), "exponents.csv differs (or is empty):\n%s\nvs\n%s",
               a, b);
        free(a), free(b);
    }
    rm_tmpdir();
}

START_TEST(test_telemetry_device_csv_fp16_mlp) { telemetry_device_case("mlp", "fp16"); }
END_TEST

START_TEST(test_telemetry_device_csv_bf16_lenet5) { telemetry_device_case("lenet5", "bf16"); }
END_TEST

START_TEST(test_telemetry_cuda_fp16_lenet5) { telemetry_case("lenet5", "fp16"); }
END_TEST

START_TEST(test_telemetry_cuda_bf16_cnn_dropout) { telemetry_case("cnn", "bf16"); }
END_TEST

/* ---- average pooling, activations, batch norm, layer norm (issue 33) ------------------------------------------
 * Average pooling sums in the CPU's order with IEEE additions and division: bit-identical. Leaky ReLU is one product:
 * bit-identical. GELU, tanh and sigmoid call CUDA's erff/expf/tanhf (within 2 ulp), the CPU's C library's: both within
 * a few FP32 ulps of the exact value, plus the cancellation of 1 + erf(x / sqrt 2) for gelu at negative x (an absolute
 * error of a few 2^-24): |GPU - CPU| <= 16 u32 (1 + |x| + |y|) before the output's rounding, plus one unit of the
 * output dtype. The normalisations' statistics are FP32 sums in another order (a block tree against the CPU's blocked
 * sums): each within (S + N + 8) u32 of the exact value (engine/backend.h mpt_norm_args), so GPU and CPU within twice
 * that, carried through the per-element formulas as in tests/test_layers.c; from equal statistics (the evaluation
 * pass) the per-element functions give the same bits. */

static void avgpool_cfg_case(const int *cfg, tests_rng *r) {
    for (size_t di = 0; di < 3; di++) {
        mpt_dtype t = float_dtypes[di];
        mpt_avgpool_args a = {.N = cfg[0], .C = cfg[1], .H = cfg[2], .W = cfg[3], .kh = cfg[4], .kw = cfg[5],
                              .sh = cfg[6], .sw = cfg[7], .dtype = t, .accumulate = 1};
        a.P = (a.H - a.kh) / a.sh + 1;
        a.Q = (a.W - a.kw) / a.sw + 1;
        const int64_t nx = (int64_t)a.N * a.C * a.H * a.W, ny = (int64_t)a.N * a.C * a.P * a.Q;
        void *x = fill(r, t, nx, -1, 1), *dy = fill(r, t, ny, -1, 1), *dx0 = fill(r, t, nx, -1, 1);
        mpt_avgpool_args g = a, c = a;
        g.x = dev_put(x, nbytes(t, nx));
        g.y = dev_alloc(nbytes(t, ny));
        g.dy = dev_put(dy, nbytes(t, ny));
        g.dx = dev_put(dx0, nbytes(t, nx));
        gpu->avgpool_forward(gpu, &g);
        gpu->avgpool_backward(gpu, &g);
        void *yg = xmalloc(nbytes(t, ny)), *dxg = xmalloc(nbytes(t, nx));
        dev_get(yg, g.y, nbytes(t, ny));
        dev_get(dxg, g.dx, nbytes(t, nx));
        c.x = x;
        c.y = xmalloc(nbytes(t, ny));
        c.dy = dy;
        c.dx = host_dup(dx0, nbytes(t, nx));
        cpu->avgpool_forward(cpu, &c);
        cpu->avgpool_backward(cpu, &c);
        expect_same("avgpool forward", yg, c.y, t, ny);
        expect_same("avgpool backward", dxg, c.dx, t, nx);
        dev_free((void *)g.x); dev_free(g.y); dev_free((void *)g.dy); dev_free(g.dx);
        free(x); free(dy); free(dx0); free(yg); free(dxg); free(c.y); free(c.dx);
    }
}

START_TEST(test_avgpool) {
    static const int cfg[][8] = {/* N C H W kh kw sh sw */
                                 {4, 6, 24, 24, 2, 2, 2, 2},
                                 {2, 3, 9, 7, 3, 2, 2, 1},
                                 {3, 5, 7, 7, 7, 7, 1, 1}, /* global */
                                 {2, 2, 8, 8, 2, 2, 3, 3}};
    tests_rng r = {0x33a};
    for (size_t ci = 0; ci < sizeof cfg / sizeof *cfg; ci++) avgpool_cfg_case(cfg[ci], &r);
}
END_TEST

START_TEST(test_activations) {
    tests_rng r = {0x33b};
    const int64_t n = 40000;
    for (int k = 0; k < MPT_ACT_COUNT; k++)
        for (size_t di = 0; di < 3; di++) {
            mpt_dtype t = float_dtypes[di];
            const float alpha = k == MPT_ACT_LEAKYRELU ? 0.125f : 0.0f;
            void *x = fill(&r, t, n, -8, 8), *dy = fill(&r, t, n, -1, 1), *dx0 = fill(&r, t, n, -1, 1);
            void *yc = xmalloc(nbytes(t, n)), *dxc = host_dup(dx0, nbytes(t, n));
            cpu->act_forward(cpu, (mpt_act)k, yc, x, t, n, alpha);
            cpu->act_backward(cpu, (mpt_act)k, dxc, dy, x, yc, t, n, alpha, 1);
            void *xd = dev_put(x, nbytes(t, n)), *yd = dev_alloc(nbytes(t, n)), *dyd = dev_put(dy, nbytes(t, n));
            void *dxd = dev_put(dx0, nbytes(t, n)), *yg = xmalloc(nbytes(t, n)), *dxg = xmalloc(nbytes(t, n));
            gpu->act_forward(gpu, (mpt_act)k, yd, xd, t, n, alpha);
            dev_get(yg, yd, nbytes(t, n));
            /* the backward on the GPU reads the CPU's y, so that it is tested on equal inputs */
            gpu->from_host(gpu, yd, yc, nbytes(t, n));
            gpu->act_backward(gpu, (mpt_act)k, dxd, dyd, xd, yd, t, n, alpha, 1);
            dev_get(dxg, dxd, nbytes(t, n));
            if (k == MPT_ACT_LEAKYRELU) {
                expect_same("leakyrelu forward", yg, yc, t, n);
                expect_same("leakyrelu backward", dxg, dxc, t, n);
            } else {
                const double uo = t == MPT_DTYPE_F16 ? 0x1p-11 : t == MPT_DTYPE_BF16 ? 0x1p-8 : U32;
                for (int64_t i = 0; i < n; i++) {
                    const double xv = ld(x, t, i), c = ld(yc, t, i), gv = ld(yg, t, i);
                    const double b = 16 * U32 * (1 + fabs(xv) + fabs(c)) + uo * fabs(c) + 1e-30;
                    EXPECT(fabs(gv - c) <= b, "activation %d (%s) y[%lld] at x %.9g: GPU %.9g, CPU %.9g", k,
                           mpt_dtype_name(t), (long long)i, xv, gv, c);
                    const double dc = ld(dxc, t, i), dg = ld(dxg, t, i);
                    const double db = 16 * U32 * (1 + fabs(xv)) * fabs(ld(dy, t, i)) + uo * (fabs(dc) + 1) * 2 * U32 +
                                      uo * fabs(dc) + 1e-30;
                    EXPECT(fabs(dg - dc) <= db, "activation %d (%s) dx[%lld] at x %.9g: GPU %.9g, CPU %.9g", k,
                           mpt_dtype_name(t), (long long)i, xv, dg, dc);
                }
            }
            dev_free(xd); dev_free(yd); dev_free(dyd); dev_free(dxd);
            free(x); free(dy); free(dx0); free(yc); free(dxc); free(yg); free(dxg);
        }
}
END_TEST

/* Batch norm or layer norm (ln) on [N, C, S] with `pad` padding rows at the end (batch norm), GPU against CPU. */
static void norm_case(int ln, int64_t N, int64_t C, int64_t S, int pad, mpt_dtype t, tests_rng *r) {
    const int64_t n = N * C * S, P = ln ? S : C, R = ln ? N : C; /* parameters per feature / channel; statistics */
    void *x = xmalloc(nbytes(t, n));
    for (int64_t i = 0; i < n; i++) mpt_store_f32(x, t, i, (float)(tests_uniform(r, -1, 1) + (double)((i / S) % 5)));
    void *dy = fill(r, t, n, -1, 1), *dx0 = fill(r, t, n, -1, 1);
    float *gamma = fill(r, MPT_DTYPE_F32, P, 0.5, 1.5), *beta = fill(r, MPT_DTYPE_F32, P, -0.5, 0.5);
    float *dg0 = fill(r, MPT_DTYPE_F32, P, -1, 1), *db0 = fill(r, MPT_DTYPE_F32, P, -1, 1);
    float *rm0 = fill(r, MPT_DTYPE_F32, C, -1, 1), *rv0 = fill(r, MPT_DTYPE_F32, C, 0.5, 2);
    int32_t *lab = xmalloc((size_t)N * 4);
    for (int64_t i = 0; i < N; i++) lab[i] = i >= N - pad ? -1 : (int32_t)(i % 7);
    for (int64_t i = 0; i < n; i++) /* dy is 0 on padding rows, as the loss leaves it */
        if (!ln && lab[i / (C * S)] < 0) mpt_store_f32(dy, t, i, 0.0f);
    mpt_norm_args c = {.N = N, .C = ln ? 1 : C, .S = ln ? C * S : S, .dtype = t, .momentum = 0.1f, .eps = 1e-5f,
                       .training = 1, .accumulate = 1, .accumulate_params = 1};
    mpt_norm_args g = c;
    const int64_t stats = ln ? N : C, feats = ln ? C * S : C;
    (void)R;
    c.x = x; c.y = xmalloc(nbytes(t, n)); c.gamma = gamma; c.beta = beta;
    c.mean = xmalloc((size_t)stats * 4); c.rstd = xmalloc((size_t)stats * 4);
    c.running_mean = host_dup(rm0, (size_t)C * 4); c.running_var = host_dup(rv0, (size_t)C * 4);
    c.labels = ln ? NULL : lab; c.dy = dy; c.dx = host_dup(dx0, nbytes(t, n));
    c.dgamma = host_dup(dg0, (size_t)feats * 4); c.dbeta = host_dup(db0, (size_t)feats * 4);
    g.x = dev_put(x, nbytes(t, n)); g.y = dev_alloc(nbytes(t, n));
    g.gamma = dev_put(gamma, (size_t)feats * 4); g.beta = dev_put(beta, (size_t)feats * 4);
    g.mean = dev_alloc((size_t)stats * 4); g.rstd = dev_alloc((size_t)stats * 4);
    g.running_mean = dev_put(rm0, (size_t)C * 4); g.running_var = dev_put(rv0, (size_t)C * 4);
    g.labels = ln ? NULL : dev_put(lab, (size_t)N * 4); g.dy = dev_put(dy, nbytes(t, n));
    g.dx = dev_put(dx0, nbytes(t, n)); g.dgamma = dev_put(dg0, (size_t)feats * 4);
    g.dbeta = dev_put(db0, (size_t)feats * 4);
    if (ln) {
        reserve(cpu, (size_t)(2 * feats) * 4);
        cpu->layernorm_forward(cpu, &c);
        cpu->layernorm_backward(cpu, &c);
        gpu->layernorm_forward(gpu, &g);
        gpu->layernorm_backward(gpu, &g);
    } else {
        cpu->batchnorm_forward(cpu, &c);
        cpu->batchnorm_backward(cpu, &c);
        gpu->batchnorm_forward(gpu, &g);
        gpu->batchnorm_backward(gpu, &g);
    }
    const char *what = ln ? "layernorm" : "batchnorm";
    const double uo = t == MPT_DTYPE_F16 ? 0x1p-11 : t == MPT_DTYPE_BF16 ? 0x1p-8 : U32;
    const double K = 2.0 * (double)((ln ? C * S : S) + N + 8) * U32; /* two FP32 statistics, each within (S+N+8)u */
    float *mg = xmalloc((size_t)stats * 4), *rg = xmalloc((size_t)stats * 4);
    dev_get(mg, g.mean, (size_t)stats * 4);
    dev_get(rg, g.rstd, (size_t)stats * 4);
    for (int64_t s = 0; s < stats; s++) {
        EXPECT(fabs((double)mg[s] - c.mean[s]) <= K * 6.0, "%s mean[%lld]: GPU %.9g, CPU %.9g", what, (long long)s,
               mg[s], c.mean[s]);
        EXPECT(fabs((double)rg[s] - c.rstd[s]) <= K * 6.0 * c.rstd[s], "%s rstd[%lld]: GPU %.9g, CPU %.9g", what,
               (long long)s, rg[s], c.rstd[s]);
    }
    void *yg = xmalloc(nbytes(t, n)), *dxg = xmalloc(nbytes(t, n));
    dev_get(yg, g.y, nbytes(t, n));
    dev_get(dxg, g.dx, nbytes(t, n));
    for (int64_t i = 0; i < n; i++) { /* |x| <= 5: |x - mean| + |mean| <= 10, rstd from the CPU */
        const int64_t s = ln ? i / (C * S) : (i / S) % C, f = ln ? i % (C * S) : s;
        const double rs = c.rstd[s], bound = K * 12.0 * fabs(gamma[f]) * rs + 2 * uo * fabs(ld(c.y, t, i)) + 1e-30;
        EXPECT(fabs(ld(yg, t, i) - ld(c.y, t, i)) <= bound, "%s y[%lld] (%s): GPU %.9g, CPU %.9g", what,
               (long long)i, mpt_dtype_name(t), ld(yg, t, i), ld(c.y, t, i));
        const double dbound = K * 40.0 * fabs(gamma[f]) * rs + 2 * uo * fabs(ld(c.dx, t, i)) + 1e-30;
        EXPECT(fabs(ld(dxg, t, i) - ld(c.dx, t, i)) <= dbound, "%s dx[%lld] (%s): GPU %.9g, CPU %.9g", what,
               (long long)i, mpt_dtype_name(t), ld(dxg, t, i), ld(c.dx, t, i));
    }
    float *dgg = xmalloc((size_t)feats * 4), *dbg = xmalloc((size_t)feats * 4);
    dev_get(dgg, g.dgamma, (size_t)feats * 4);
    dev_get(dbg, g.dbeta, (size_t)feats * 4);
    const double terms = ln ? (double)N : (double)((N - pad) * S);
    for (int64_t f = 0; f < feats; f++) { /* sums of |dy| <= 1 terms, |x^| <= 10 rstd */
        EXPECT(fabs((double)dbg[f] - c.dbeta[f]) <= K * terms + 2 * (terms + 2) * U32 * (terms + 1),
               "%s dbeta[%lld]: GPU %.9g, CPU %.9g", what, (long long)f, dbg[f], c.dbeta[f]);
        EXPECT(fabs((double)dgg[f] - c.dgamma[f]) <= 40 * K * terms * 10 + 2 * (terms + 2) * U32 * (10 * terms + 1),
               "%s dgamma[%lld]: GPU %.9g, CPU %.9g", what, (long long)f, dgg[f], c.dgamma[f]);
    }
    if (!ln) {
        float *rmg = xmalloc((size_t)C * 4), *rvg = xmalloc((size_t)C * 4);
        dev_get(rmg, g.running_mean, (size_t)C * 4);
        dev_get(rvg, g.running_var, (size_t)C * 4);
        for (int64_t k = 0; k < C; k++) {
            EXPECT(fabs((double)rmg[k] - c.running_mean[k]) <= K * 6.0, "running_mean[%lld]: GPU %.9g, CPU %.9g",
                   (long long)k, rmg[k], c.running_mean[k]);
            EXPECT(fabs((double)rvg[k] - c.running_var[k]) <= K * 6.0 * (1 + c.running_var[k]),
                   "running_var[%lld]: GPU %.9g, CPU %.9g", (long long)k, rvg[k], c.running_var[k]);
        }
        /* evaluation from equal running statistics: the same bits */
        gpu->from_host(gpu, g.running_mean, c.running_mean, (size_t)C * 4);
        gpu->from_host(gpu, g.running_var, c.running_var, (size_t)C * 4);
        c.training = g.training = 0;
        cpu->batchnorm_forward(cpu, &c);
        gpu->batchnorm_forward(gpu, &g);
        dev_get(yg, g.y, nbytes(t, n));
        expect_same("batchnorm evaluation", yg, c.y, t, n);
        free(rmg); free(rvg);
    }
    dev_free((void *)g.x); dev_free(g.y); dev_free((void *)g.gamma); dev_free((void *)g.beta); dev_free(g.mean);
    dev_free(g.rstd); dev_free(g.running_mean); dev_free(g.running_var); dev_free((void *)g.dy); dev_free(g.dx);
    dev_free(g.dgamma); dev_free(g.dbeta);
    if (g.labels) dev_free((void *)g.labels);
    free(x); free(dy); free(dx0); free(gamma); free(beta); free(dg0); free(db0); free(rm0); free(rv0); free(lab);
    free(c.y); free(c.mean); free(c.rstd); free(c.running_mean); free(c.running_var); free(c.dx); free(c.dgamma);
    free(c.dbeta); free(mg); free(rg); free(yg); free(dxg); free(dgg); free(dbg);
}

START_TEST(test_batchnorm) {
    tests_rng r = {0x33c};
    for (size_t di = 0; di < 3; di++) {
        norm_case(0, 32, 8, 196, 5, float_dtypes[di], &r); /* after a convolution, a padded batch */
        norm_case(0, 64, 40, 1, 0, float_dtypes[di], &r);  /* after a linear layer */
    }
}
END_TEST

START_TEST(test_layernorm) {
    tests_rng r = {0x33d};
    for (size_t di = 0; di < 3; di++) {
        norm_case(1, 16, 1, 300, 0, float_dtypes[di], &r);
        norm_case(1, 8, 6, 49, 0, float_dtypes[di], &r);
    }
}
END_TEST

/* ---- quantization ---------------------------------------------------------------------------------------------- */

/* One integer GEMM on both backends with the same codes, scales and bias: acc and C bit for bit. */
static void gemm_i8_case(tests_rng *r, int64_t M, int64_t N, int64_t K, int per_tensor, mpt_dtype ct, int saturated) {
    int8_t *A = xmalloc((size_t)(M * K)), *B = xmalloc((size_t)(N * K));
    for (int64_t i = 0; i < M * K; i++) A[i] = (int8_t)(saturated ? 127 : tests_int(r, -127, 127));
    for (int64_t i = 0; i < N * K; i++) B[i] = (int8_t)(saturated ? (i % K == K - 1 ? 1 : 127) : tests_int(r, -127, 127));
    float *ws = xmalloc(sizeof(float) * (size_t)N), *bias = xmalloc(sizeof(float) * (size_t)N), xs = 0.0123f;
    for (int64_t i = 0; i < N; i++) ws[i] = (float)tests_uniform(r, 1e-4, 1e-2), bias[i] = (float)tests_uniform(r, -1, 1);
    int32_t *acc_c = xmalloc(sizeof(int32_t) * (size_t)(M * N)), *acc_g = xmalloc(sizeof(int32_t) * (size_t)(M * N));
    void *c_c = xmalloc(nbytes(ct, M * N)), *c_g = xmalloc(nbytes(ct, M * N));
    mpt_gemm_i8_args a = {.M = M, .N = N, .K = K, .A = A, .B = B, .acc = acc_c, .C = c_c, .c_dtype = ct, .a_scale = &xs,
                          .b_scales = ws, .b_per_tensor = per_tensor, .bias = bias, .bias_dtype = MPT_DTYPE_F32,
                          .tag = "test.i8"};
    cpu->gemm_i8(cpu, &a);
    mpt_gemm_i8_args d = a;
    d.A = dev_put(A, (size_t)(M * K));
    d.B = dev_put(B, (size_t)(N * K));
    d.acc = dev_alloc(sizeof(int32_t) * (size_t)(M * N));
    d.C = dev_alloc(nbytes(ct, M * N));
    d.a_scale = dev_put(&xs, sizeof xs);
    d.b_scales = dev_put(ws, sizeof(float) * (size_t)N);
    d.bias = dev_put(bias, sizeof(float) * (size_t)N);
    for (int own = 0; own < 2; own++) {
        setenv("MPT_CUDA_GEMM_I8_OWN", own ? "1" : "0", 1);
        gpu->gemm_i8(gpu, &d);
        dev_get(acc_g, d.acc, sizeof(int32_t) * (size_t)(M * N));
        dev_get(c_g, d.C, nbytes(ct, M * N));
        for (int64_t i = 0; i < M * N; i++)
            EXPECT(acc_g[i] == acc_c[i], "gemm_i8 %lldx%lldx%lld (%s path): acc[%lld] GPU %d, CPU %d", (long long)M,
                   (long long)N, (long long)K, own ? "own" : "cuBLASLt where it applies", (long long)i, acc_g[i], acc_c[i]);
        expect_same("gemm_i8 rescale", c_g, c_c, ct, M * N);
    }
    unsetenv("MPT_CUDA_GEMM_I8_OWN");
    if (saturated) /* 127 * 127 * (K - 1) + 127: not an FP32 number for K = 9216, exact here */
        EXPECT(acc_c[0] == 16129 * (K - 1) + 127, "acc[0] = %d, exact %lld", acc_c[0], (long long)(16129 * (K - 1) + 127));
    dev_free((void *)d.A), dev_free((void *)d.B), dev_free(d.acc), dev_free(d.C), dev_free((void *)d.a_scale);
    dev_free((void *)d.b_scales), dev_free((void *)d.bias);
    free(A), free(B), free(ws), free(bias), free(acc_c), free(acc_g), free(c_c), free(c_g);
}

START_TEST(test_quant_gemm_i8_bit_identical) {
    tests_rng r = {38};
    gemm_i8_case(&r, 128, 512, 784, 0, MPT_DTYPE_F32, 0); /* the mlp's fc1: N, K multiples of 4 (cuBLASLt) */
    gemm_i8_case(&r, 128, 10, 512, 0, MPT_DTYPE_F32, 0);  /* fc3: N = 10, the own kernel */
    gemm_i8_case(&r, 128, 128, 9216, 0, MPT_DTYPE_BF16, 0); /* the cnn's fc1, a BF16 output */
    gemm_i8_case(&r, 64, 84, 120, 1, MPT_DTYPE_F32, 0);   /* lenet5's fc2, one scale per tensor */
    gemm_i8_case(&r, 4, 8, 9216, 0, MPT_DTYPE_F32, 1);    /* the exact sum beyond 2^24 */
    gemm_i8_case(&r, 3, 5, 7, 0, MPT_DTYPE_F32, 0);       /* odd sizes */
}
END_TEST

START_TEST(test_quant_conv_i8_bit_identical) {
    tests_rng r = {39};
    const struct { int N, C, H, K, R, pad, stride; } cs[] = {{32, 1, 28, 6, 5, 2, 1}, {32, 6, 14, 16, 5, 0, 1},
                                                             {16, 32, 26, 64, 3, 0, 1}, {8, 3, 9, 4, 3, 1, 2}};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        mpt_conv_shape sh = {.N = cs[ci].N, .C = cs[ci].C, .H = cs[ci].H, .W = cs[ci].H, .K = cs[ci].K, .R = cs[ci].R,
                             .S = cs[ci].R, .pad_h = cs[ci].pad, .pad_w = cs[ci].pad, .stride_h = cs[ci].stride,
                             .stride_w = cs[ci].stride};
        sh.P = (sh.H + 2 * sh.pad_h - sh.R) / sh.stride_h + 1;
        sh.Q = (sh.W + 2 * sh.pad_w - sh.S) / sh.stride_w + 1;
        const int64_t nx = (int64_t)sh.N * sh.C * sh.H * sh.W, nw = (int64_t)sh.K * sh.C * sh.R * sh.S;
        const int64_t ny = (int64_t)sh.N * sh.K * sh.P * sh.Q;
        int8_t *x = xmalloc((size_t)nx), *w = xmalloc((size_t)nw);
        for (int64_t i = 0; i < nx; i++) x[i] = (int8_t)tests_int(&r, -127, 127);
        for (int64_t i = 0; i < nw; i++) w[i] = (int8_t)tests_int(&r, -127, 127);
        float ws[64], bias[64], xs = 0.02f;
        for (int k = 0; k < sh.K; k++) ws[k] = (float)tests_uniform(&r, 1e-4, 1e-2), bias[k] = (float)tests_uniform(&r, -1, 1);
        for (size_t di = 0; di < 3; di++) {
            const mpt_dtype t = float_dtypes[di];
            void *yc = xmalloc(nbytes(t, ny)), *yg = xmalloc(nbytes(t, ny));
            reserve(cpu, mpt_conv_i8_workspace(&sh));
            mpt_conv_i8_args a = {.s = sh, .x = x, .w = w, .y = yc, .y_dtype = t, .x_scale = &xs, .w_scales = ws,
                                  .w_per_tensor = (int)(ci % 2), .bias = bias, .bias_dtype = MPT_DTYPE_F32, .tag = "test"};
            cpu->conv2d_forward_i8(cpu, &a);
            mpt_conv_i8_args d = a;
            d.x = dev_put(x, (size_t)nx), d.w = dev_put(w, (size_t)nw), d.y = dev_alloc(nbytes(t, ny));
            d.x_scale = dev_put(&xs, sizeof xs), d.w_scales = dev_put(ws, sizeof ws), d.bias = dev_put(bias, sizeof bias);
            gpu->conv2d_forward_i8(gpu, &d);
            dev_get(yg, d.y, nbytes(t, ny));
            expect_same("conv2d_forward_i8", yg, yc, t, ny);
            dev_free((void *)d.x), dev_free((void *)d.w), dev_free(d.y), dev_free((void *)d.x_scale);
            dev_free((void *)d.w_scales), dev_free((void *)d.bias);
            free(yc), free(yg);
        }
        free(x), free(w);
    }
}
END_TEST

START_TEST(test_quant_fake_quant_and_codes_bit_identical) {
    tests_rng r = {40};
    const int64_t shapes[][2] = {{512, 784}, {10, 512}, {1, 401408}, {6, 25}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        float *x = xmalloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) x[i] = (float)(tests_uniform(&r, -1, 1) * ldexp(1.0, tests_int(&r, -12, 0)));
        float *dx = dev_put(x, sizeof(float) * (size_t)n);
        for (int f = 0; f < MPT_QFORMAT_COUNT; f++)
            for (size_t di = 0; di < 3; di += 2) { /* F32 and BF16 working copies */
                const mpt_dtype t = float_dtypes[di];
                const int codes = mpt_qformat_info((mpt_qformat)f)->is_int;
                void *yc = xmalloc(nbytes(t, n)), *yg = xmalloc(nbytes(t, n));
                int8_t *qc = xmalloc((size_t)n), *qg = xmalloc((size_t)n);
                float *sc = xmalloc(sizeof(float) * (size_t)rows), *sg = xmalloc(sizeof(float) * (size_t)rows);
                mpt_fake_quant_args a = {.x = x, .rows = rows, .cols = cols, .fmt = (mpt_qformat)f, .y = yc, .y_dtype = t,
                                         .q = codes ? qc : NULL, .scales = sc, .tag = "test"};
                cpu->fake_quant(cpu, &a);
                mpt_fake_quant_args d = a;
                d.x = dx, d.y = dev_alloc(nbytes(t, n)), d.q = codes ? dev_alloc((size_t)n) : NULL;
                d.scales = dev_alloc(sizeof(float) * (size_t)rows);
                gpu->fake_quant(gpu, &d);
                dev_get(yg, d.y, nbytes(t, n));
                dev_get(sg, d.scales, sizeof(float) * (size_t)rows);
                expect_same("fake_quant", yg, yc, t, n);
                expect_same("fake_quant scales", sg, sc, MPT_DTYPE_F32, rows);
                if (codes) {
                    dev_get(qg, d.q, (size_t)n);
                    EXPECT(memcmp(qg, qc, (size_t)n) == 0, "fake_quant codes differ (%s)", mpt_qformat_info((mpt_qformat)f)->key);
                    dev_free(d.q);
                }
                dev_free(d.y), dev_free(d.scales);
                free(yc), free(yg), free(qc), free(qg), free(sc), free(sg);
            }
        /* an activation's amax over two calls and its codes */
        float amax_c = 0.0f, amax_g, s = 0.0037f, zero = 0.0f;
        float *damax = dev_put(&zero, sizeof zero), *ds = dev_put(&s, sizeof s);
        int8_t *qc = xmalloc((size_t)n), *qg = xmalloc((size_t)n), *dq = dev_alloc((size_t)n);
        for (int call = 0; call < 2; call++) {
            const int64_t part = call ? n - n / 2 : n / 2;
            mpt_quantize_args a = {.x = x + (call ? n / 2 : 0), .x_dtype = MPT_DTYPE_F32, .n = part, .amax = &amax_c,
                                   .tag = "test"};
            cpu->quantize(cpu, &a);
            a.x = dx + (call ? n / 2 : 0), a.amax = damax;
            gpu->quantize(gpu, &a);
        }
        dev_get(&amax_g, damax, sizeof amax_g);
        EXPECT(bits(amax_g) == bits(amax_c), "quantize amax: GPU %.9g, CPU %.9g", (double)amax_g, (double)amax_c);
        mpt_quantize_args a = {.x = x, .x_dtype = MPT_DTYPE_F32, .n = n, .scale = &s, .q = qc, .qmax = 127, .tag = "test"};
        cpu->quantize(cpu, &a);
        a.x = dx, a.scale = ds, a.q = dq;
        gpu->quantize(gpu, &a);
        dev_get(qg, dq, (size_t)n);
        EXPECT(memcmp(qg, qc, (size_t)n) == 0, "quantize codes differ");
        dev_free(damax), dev_free(ds), dev_free(dq), dev_free(dx);
        free(qc), free(qg), free(x);
    }
}
END_TEST

/* QAT on the GPU: after a few steps every quantized working weight is the per-row INT4 fake quantization of its master
 * (recomputed on the host with engine/numerics.h's rules). */
START_TEST(test_qat_working_weights_cuda) {
    mpt_mnist d;
    EXPECT(mpt_synthetic_blobs(&d, 512, 128, 784, 10, 7) == MPT_OK, "synthetic data");
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_BF16, 0, 0);
    mpt_graph *g = mpt_graph_create(gpu, &pol, 64);
    mpt_tensor *logits = NULL;
    EXPECT(mpt_model_build(g, "mlp", &logits) == MPT_OK, "model");
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_BF16);
    cfg.qat = MPT_QAT_INT4;
    mpt_trainer *t = NULL;
    EXPECT(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s", mpt_last_error());
    uint8_t *img = dev_put(d.train_images, (size_t)(d.n_train * d.dim)), *lab = dev_put(d.train_labels, (size_t)d.n_train);
    int32_t idx[64];
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 64; i++) idx[i] = step * 64 + i;
        int32_t *didx = dev_put(idx, sizeof idx);
        mpt_trainer_gather(t, img, lab, didx, d.dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
        gpu->synchronize(gpu);
        dev_free(didx);
    }
    for (int i = 0; i < t->n_params; i++) {
        if (!t->qat[i]) continue;
        const int64_t n = mpt_tensor_numel(t->weight[i]), rows = t->weight[i]->shape[0], cols = n / rows;
        float *m = xmalloc(sizeof(float) * (size_t)n);
        uint16_t *w = xmalloc(sizeof(uint16_t) * (size_t)n);
        dev_get(m, t->master[i]->data, sizeof(float) * (size_t)n);
        dev_get(w, t->weight[i]->data, sizeof(uint16_t) * (size_t)n);
        for (int64_t rr = 0; rr < rows; rr++) {
            float amax = 0.0f;
            for (int64_t k = 0; k < cols; k++) amax = fmaxf(amax, fabsf(m[rr * cols + k]));
            const float s = mpt_int_scale_from_amax(amax, 7);
            for (int64_t k = 0; k < cols; k++)
                EXPECT(w[rr * cols + k] == mpt_f32_to_bf16(mpt_int_fake_quant(m[rr * cols + k], s, 7)),
                       "%s[%lld]: not the fake quantization of its master", t->weight[i]->name, (long long)(rr * cols + k));
        }
        free(m), free(w);
    }
    dev_free(img), dev_free(lab);
    mpt_trainer_free(&t);
    mpt_mnist_free(&d);
}
END_TEST

static Suite *cuda_suite(void) {
    Suite *s = suite_create("cuda");
    TCase *tg = tcase_create("gemm");
    tcase_set_timeout(tg, 300);
    tcase_add_checked_fixture(tg, NULL, restore_gpu); /* test_gemm_bgrad_epilogue swaps in a backend */
    tcase_add_test(tg, test_gemm_all_modes);
    tcase_add_test(tg, test_gemm_two_step_and_alignment);
    tcase_add_test(tg, test_gemm_tf32_proof_and_records);
    tcase_add_test(tg, test_gemm_bgrad_epilogue);
    tcase_add_test(tg, test_gemm_relu_epilogues);
    tcase_add_test(tg, test_gemm_rounding_model);
    suite_add_tcase(s, tg);
    TCase *tf = tcase_create("gemm_fallback"); /* swaps in backends of its own: the teardown puts `gpu` back */
    tcase_set_timeout(tf, 120);
    tcase_add_checked_fixture(tf, NULL, restore_gpu);
    tcase_add_test(tf, test_gemm_refused_direct_falls_back);
    tcase_add_test(tf, test_drelu_bgrad_fused_bit_identical);
    tcase_add_test(tf, test_bias_grad_ilp_bit_identical);
    tcase_add_test(tf, test_telemetry_reductions_match_host);
    suite_add_tcase(s, tf);
    TCase *tl = tcase_create("loss_fused"); /* swaps in a backend of its own, as gemm_fallback */
    tcase_set_timeout(tl, 120);
    tcase_add_checked_fixture(tl, NULL, restore_gpu);
    tcase_add_test(tl, test_softmax_xent_fused_bit_identical);
    suite_add_tcase(s, tl);
    TCase *tm = tcase_create("conv_measured"); /* swaps in a backend of its own: the teardown puts `gpu` back */
    tcase_set_timeout(tm, 120);
    tcase_add_checked_fixture(tm, NULL, restore_gpu);
    tcase_add_test(tm, test_conv_measured_choice);
    tcase_add_test(tm, test_channel_sum_split);
    suite_add_tcase(s, tm);
    TCase *tc = tcase_create("conv");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_conv_all_modes);
    tcase_add_test(tc, test_conv_tf32_proof);
    tcase_add_test(tc, test_conv_rounding_model);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("elementwise");
    tcase_set_timeout(te, 120);
    tcase_add_test(te, test_cast);
    tcase_add_test(te, test_relu);
    tcase_add_test(te, test_maxpool);
    tcase_add_test(te, test_rng_host_device_identical);
    tcase_add_test(te, test_dropout);
    tcase_add_test(te, test_softmax_xent);
    tcase_add_test(te, test_softmax_xent_argmax_nan);
    tcase_add_test(te, test_bias_grad);
    tcase_add_test(te, test_gather_batch);
    tcase_add_test(te, test_grad_overwrite_bit_identical);
    tcase_add_test(te, test_avgpool);
    tcase_add_test(te, test_activations);
    tcase_add_test(te, test_batchnorm);
    tcase_add_test(te, test_layernorm);
    suite_add_tcase(s, te);
    TCase *to = tcase_create("update");
    tcase_set_timeout(to, 120);
    tcase_add_checked_fixture(to, NULL, restore_gpu); /* test_update_pass_bit_identical swaps in a backend */
    tcase_add_test(to, test_optim_step_bit_identical);
    tcase_add_test(to, test_optim_step_16bit_storage_bit_identical);
    tcase_add_test(to, test_unscale_found_inf);
    tcase_add_test(to, test_multi_tensor_bit_identical);
    tcase_add_test(to, test_update_pass_bit_identical);
    tcase_add_test(to, test_sum_squares_clip);
    tcase_add_test(to, test_scaler_update_bit_identical);
    suite_add_tcase(s, to);
    TCase *tq = tcase_create("quant");
    tcase_set_timeout(tq, 300);
    tcase_add_test(tq, test_quant_gemm_i8_bit_identical);
    tcase_add_test(tq, test_quant_conv_i8_bit_identical);
    tcase_add_test(tq, test_quant_fake_quant_and_codes_bit_identical);
    tcase_add_test(tq, test_qat_working_weights_cuda);
    suite_add_tcase(s, tq);
    TCase *tt = tcase_create("training");
    tcase_set_timeout(tt, 600);
    tcase_add_test(tt, test_e2e_mlp);
    tcase_add_test(tt, test_e2e_lenet5);
    tcase_add_test(tt, test_e2e_cnn);
    tcase_add_test(tt, test_resume_cuda_fp16_mlp);
    tcase_add_test(tt, test_resume_cuda_bf16_cnn_dropout);
    tcase_add_test(tt, test_telemetry_cuda_fp16_lenet5);
    tcase_add_test(tt, test_telemetry_cuda_bf16_cnn_dropout);
    tcase_add_test(tt, test_telemetry_device_csv_fp16_mlp);
    tcase_add_test(tt, test_telemetry_device_csv_bf16_lenet5);
    suite_add_tcase(s, tt);
    return s;
}

int main(void) {
    int gate = mpt_test_cuda_gate("test_cuda");
    if (gate >= 0) return gate;
    setenv("CK_FORK", "no", 1); /* CUDA does not survive fork(): run every test in this process */
    gpu = mpt_backend_cuda_create();
    if (!gpu) {
        fprintf(stderr, "test_cuda: FAILED: a GPU is available but the CUDA backend failed: %s\n", mpt_last_error());
        return 1;
    }
    cpu = mpt_backend_cpu_create();
    char info[512];
    mpt_cuda_device_info(info, sizeof info);
    printf("test_cuda: %s\n", info);
    int rc = mpt_test_run(cuda_suite());
    mpt_cuda_print_gemm_records(gpu, stdout);
    mpt_cuda_print_conv_records(gpu, stdout);
    mpt_backend_free(&gpu);
    mpt_backend_free(&cpu);
    return rc;
}
