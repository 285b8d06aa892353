/*
 * kernels/cpu/onednn.h - oneDNN (the oneAPI Deep Neural Network Library, Debian's libdnnl) as the CPU backend's
 * GEMM engine (internal to kernels/cpu; ARCHITECTURE decision 11).
 *
 * What runs here is a plain matrix product on operands that gemm.c has already prepared, through oneDNN matmul
 * primitives (https://oneapi-src.github.io/oneDNN/dev_guide_matmul.html), with FP32 accumulation:
 *
 *   C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C      row-major, dense, C F32
 *
 *   A/B dtype  used by               what the CPU computes
 *   F32        every emulated mode    FP32 FMA on FP32 operands (the primitive's fpmath mode is strict: oneDNN
 *                                     may not down-convert them to BF16/TF32 even on AMX hardware). The
 *                                     emulation's operands are already TF32-rounded / widened from FP16/BF16,
 *                                     so each product is exact and this is the emulation of gemm.c.
 *   BF16       bf16 in the native     the CPU's BF16 dot-product instruction (AVX512-BF16 VDPBF16PS; AMX
 *              kernel set             TDPBF16PS where present). Its numerics (Intel SDM, VDPBF16PS): each BF16
 *                                     input that is denormal is read as zero (DAZ), products are exact, each
 *                                     step of a pair adds to the FP32 accumulator rounding to nearest even and
 *                                     flushing a denormal result to zero (FTZ), whatever MXCSR says; the odd
 *                                     element of each pair is added first. So native differs from the
 *                                     emulation by summation order (within K * 2^-24 * sum |a*b|) and, where
 *                                     an operand is a BF16 subnormal or a partial sum is FP32-denormal, by the
 *                                     flushed values.
 *
 * Why oneDNN: on this project's machine (AMD EPYC with avx512_bf16, 2 vCPUs) its BF16 kernels run the MLP's GEMM
 * shapes at about twice any FP32 GEMM, which OpenBLAS 0.3.21 cannot give (cblas_sbgemm declared, not exported).
 * Its FP32 brgemm kernels are about twice OpenBLAS's sgemm when OpenBLAS runs its AVX2 (Haswell) kernels, as fast
 * as its AVX-512 (Cooperlake) kernels on the MLP's shapes, and slower on LeNet-5's small convolution GEMMs
 * (bench/gemm_bench, docs/benchmarks.md). PyTorch's CPU autocast calls the same library.
 *
 * Primitives are created once per (shape, transposes, dtype, alpha, beta, thread count) when a graph is built, by
 * mpt_onednn_gemm_prepare (gemm.c's workspace query, which the layers make for every GEMM form their passes run),
 * and cached for the life of the process. A training step only looks them up (mpt_onednn_gemm_lookup,
 * mpt_onednn_gemm_run) and creates none (ARCHITECTURE decision 4): a GEMM whose primitive was not prepared aborts,
 * naming itself, instead of being created on the fly (mpt_onednn_primitives_created counts creations, for the
 * tests). Changing the thread count after a graph was built changes the primitives its GEMMs need (the key has
 * it), so set it before building. The scratchpad is the caller's (oneDNN's user scratchpad mode), so the step
 * allocates no buffer of its own; oneDNN's execute still builds its small argument map on the heap.
 * Results are deterministic for a given thread count: oneDNN's CPU matmul partitions M and N among threads
 * and never splits K at these sizes, so the same call gives the same bits (tests/test_gemm.c checks it).
 *
 * Threads: Debian's oneDNN uses OpenMP (libgomp). mpt_onednn_set_threads sets OpenMP's thread count for the
 * calling thread. libgomp does not survive fork(): a child of a process that has run a parallel GEMM must
 * exec (as mptrain's children do), never train.
 */
#ifndef MPT_KERNELS_CPU_ONEDNN_H
#define MPT_KERNELS_CPU_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/dtype.h"

typedef struct mpt_onednn_gemm {
    int trans_a, trans_b; /* op(A) = A stored [M,K] (0) or [K,M] (1); op(B) = B stored [K,N] (0) or [N,K] (1) */
    int64_t M, N, K;      /* all >= 1 */
    mpt_dtype ab_dtype;   /* F32 or BF16 (A and B); C is always F32 */
    float alpha, beta;    /* beta 0: C is not read */
} mpt_onednn_gemm;

/* Whether this build has oneDNN (Meson feature 'onednn') and it created its CPU engine. */
int mpt_onednn_available(void);

/* Whether BF16 matmuls run on the CPU's BF16 units: oneDNN available and its ISA is avx512_core_bf16 or
 * avx512_core_amx (or newer). If not, `why` (may be NULL) receives the reason, one line. */
int mpt_onednn_native_bf16(char *why, size_t n);

/* oneDNN's version ("2.6.3"), or "none" without oneDNN. Static string. */
const char *mpt_onednn_version(void);

/* The instruction set oneDNN dispatches to on this CPU (dnnl_get_effective_cpu_isa: "avx512_core_bf16", ...), or
 * "none" without oneDNN. Static string. */
const char *mpt_onednn_isa(void);

/* OpenMP threads for oneDNN's primitives from now on (calling thread); n >= 1. No-op without oneDNN. */
void mpt_onednn_set_threads(int n);
/* The OpenMP threads oneDNN's primitives use (1 without oneDNN). */
int mpt_onednn_threads(void);

/* Graph build: creates (once) the primitive for g with the current thread count and keeps it for the life of the
 * process; *scratch_bytes = the scratchpad it needs. Returns 1, or 0 when oneDNN is not available or has no
 * implementation for it (remembered: the caller uses OpenBLAS, at build and in the step). */
int mpt_onednn_gemm_prepare(const mpt_onednn_gemm *g, size_t *scratch_bytes);

/* What the cache holds for a GEMM (mpt_onednn_gemm_lookup). */
typedef enum mpt_onednn_state {
    MPT_ONEDNN_UNPREPARED = -1, /* never prepared with this thread count: a step must not run it */
    MPT_ONEDNN_REFUSED = 0,     /* no oneDNN, or oneDNN has no implementation for it: it runs on OpenBLAS */
    MPT_ONEDNN_READY = 1,       /* prepared: mpt_onednn_gemm_run may run it */
} mpt_onednn_state;

/* A training step's question: whether g was prepared (with the current thread count), creating nothing; with
 * MPT_ONEDNN_READY, *scratch_bytes = what mpt_onednn_gemm_prepare said (else 0). */
mpt_onednn_state mpt_onednn_gemm_lookup(const mpt_onednn_gemm *g, size_t *scratch_bytes);

/* Runs g: A, B as described by g (dense), C [M, N] F32 row-major. scratch: 64-byte aligned, scratch_bytes >= what
 * mpt_onednn_gemm_prepare said. Only after mpt_onednn_gemm_prepare of the same g returned 1: it creates no
 * primitive, and aborts naming g if there is none. Aborts (with the failing oneDNN call) if oneDNN fails. */
void mpt_onednn_gemm_run(const mpt_onednn_gemm *g, const void *A, const void *B, float *C, void *scratch,
                         size_t scratch_bytes);

/* One line for messages: g's shape, transposes, operand dtype, alpha, beta and the thread count its primitive is
 * made for ("512x784x16 matmul (M x N x K), op(A) A^T, op(B) B, f32 operands, alpha 1, beta 0, 1 thread"). */
void mpt_onednn_gemm_describe(const mpt_onednn_gemm *g, char *buf, size_t n);

/* Primitives created so far in this process (tests: a training step after graph build creates none). */
int64_t mpt_onednn_primitives_created(void);

/* The implementation oneDNN chose for g ("brg:avx512_core", ...), after prepare; "none" otherwise. */
const char *mpt_onednn_gemm_impl(const mpt_onednn_gemm *g);

#endif
