/*
 * kernels/cpu/gemm.h - the CPU GEMM with its scratch and its kernel set passed explicitly (internal to kernels/cpu).
 *
 * mpt_cpu_gemm (cpu.h, the backend-table entry) runs this on be->workspace with the backend's mpt_cpu_exec. conv.c
 * calls it directly with the part of be->workspace that its im2col buffers leave free, so convolutions get exactly
 * the GEMM numerics of gemm.c. Contract of the arguments: mpt_gemm_args in engine/backend.h; what each kernel set
 * and engine computes: the header of kernels/cpu/gemm.c.
 */
#ifndef MPT_KERNELS_CPU_GEMM_H
#define MPT_KERNELS_CPU_GEMM_H

#include <stddef.h>

#include "engine/backend.h"

/* The library that runs the FP32 (and native BF16) products. */
typedef enum mpt_cpu_engine {
    MPT_CPU_ENGINE_OPENBLAS = 0, /* cblas_sgemm */
    MPT_CPU_ENGINE_ONEDNN,       /* oneDNN matmul primitives (kernels/cpu/onednn.h) */
} mpt_cpu_engine;

/* How a CPU backend runs its GEMMs: the kernel set, the engine and the summation model. */
typedef struct mpt_cpu_exec {
    mpt_cpu_kernels kernels; /* EMULATE or NATIVE (engine/backend.h) */
    mpt_cpu_engine engine;   /* the FP32 GEMM's engine (native BF16 always runs on oneDNN) */
    mpt_accum_model accum;   /* how emulated TF32/F16/BF16 GEMMs sum: IEEE (the engine's FP32 sums) or a Tensor Core
                                model (kernels/cpu/tc_accum.h; never with NATIVE) */
} mpt_cpu_exec;

/* emulate, IEEE sums, and oneDNN when the build has it and MPT_CPU_ENGINE is not "openblas" (read once per process;
 * any other value than "openblas", "onednn" or unset aborts naming it). */
mpt_cpu_exec mpt_cpu_exec_default(void);
/* The backend's (a CPU backend's ctx). */
const mpt_cpu_exec *mpt_cpu_exec_of(const mpt_backend *be);

/* Graph build: bytes of scratch mpt_cpu_gemm_ws_on needs for these arguments (0 when the operands go to the FP32 GEMM
 * as they are and oneDNN needs no scratchpad), and creates the oneDNN primitive the GEMM will run on. Call it at
 * build time for every form of a GEMM a step will run: the primitive depends on M, N, K, the transposes, the math
 * mode and kernel set (operand dtype), and on whatever decides the engine's own alpha and beta (C's dtype, the
 * epilogue, beta, FP8: kernels/cpu/gemm.c's header); the pointers do not matter. */
size_t mpt_cpu_gemm_ws_bytes_on(const mpt_cpu_exec *x, const mpt_gemm_args *a);

/* The same bytes from within a step: creates nothing, and aborts naming the GEMM if its oneDNN primitive was not
 * created by mpt_cpu_gemm_ws_bytes_on at build (conv.c sizes its per-thread scratch with it in each call). */
size_t mpt_cpu_gemm_step_ws_bytes_on(const mpt_cpu_exec *x, const mpt_gemm_args *a);

/* Runs the GEMM of `a` using `ws` (ws_bytes >= mpt_cpu_gemm_ws_bytes_on(x, a), 64-byte aligned) as scratch. Creates
 * no oneDNN primitive: mpt_cpu_gemm_ws_bytes_on(x, a) must have been called (at graph build) with arguments of the
 * same form. Aborts (MPT_ASSERTF) on invalid arguments, too little scratch, or a GEMM that was not prepared. */
void mpt_cpu_gemm_ws_on(const mpt_cpu_exec *x, const mpt_gemm_args *a, void *ws, size_t ws_bytes);

/* mpt_cpu_gemm_ws_bytes_on and mpt_cpu_gemm_ws_on with mpt_cpu_exec_default() (the emulation): for callers without
 * a backend (ask for the bytes first: that prepares the GEMM). */
size_t mpt_cpu_gemm_ws_bytes(const mpt_gemm_args *a);
void mpt_cpu_gemm_ws(const mpt_gemm_args *a, void *ws, size_t ws_bytes);

/* Whether the GEMM of math mode m runs its engine's FP32 product on FP32 copies of its operands (the emulated TF32,
 * F16 and BF16 modes; not native BF16, FP32 or FP8). A caller that holds such copies already (conv.c: the weights once
 * per pass, im2col writing the converted image) may run the GEMM with math FP32 on them: the same engine call on the
 * same FP32 values, so the same bits. */
int mpt_cpu_gemm_converts(const mpt_cpu_exec *x, mpt_math m);

/* Whether the GEMMs of math mode m sum their products in a Tensor Core model (x->accum not IEEE, and m an emulated
 * TF32, F16 or BF16 mode): then the engine's FP32 GEMM does not run, and mpt_tc_gemm sums the FP32 operand values
 * (kernels/cpu/gemm.c, "Summation models"). A caller that would run such a GEMM as math FP32 on operands it converted
 * itself (conv.c) must not: math FP32 is summed by the engine. */
int mpt_cpu_gemm_modelled(const mpt_cpu_exec *x, mpt_math m);

/* The summation models' operand format (mpt_tc_format, kernels/cpu/tc_accum.h) of math mode m: FP16, BF16 or TF32 for
 * F16, BF16, TF32; -1 for the maths no summation model takes (FP32, FP8, MXFP8). */
int mpt_cpu_tc_format_of(mpt_math m);

/* dst[0..n) = the FP32 operand values the emulated GEMM of math m (TF32, F16 or BF16) gives its engine for src (F32,
 * F16 or BF16 elements respectively): each element rounded to TF32 (RNE) or widened exactly. One thread. */
void mpt_cpu_gemm_convert(float *dst, const void *src, mpt_math m, int64_t n);

/* FP8 operands (kernels/cpu/fp8.c): dst [rows, K] = the exact FP32 values of src [rows, K] in format fmt, times
 * 2^(c - 127) for the E8M0 block scale c of each 32 elements when block_scales ([rows, mpt_mx_blocks(K)]) is given. */
void mpt_cpu_fp8_decode(float *dst, const uint8_t *src, mpt_dtype fmt, int64_t rows, int64_t K,
                        const uint8_t *block_scales);

/* tile [M, N] (FP32) = the unscaled sums over K of A[m, k] * B[n, k] (FP8, TN layout) through the model of Hopper's
 * fast FP8 accumulator with g->fp8_promote (kernels/cpu/gemm.c's header has the model). */
void mpt_cpu_fp8_fast_tile(float *tile, const mpt_gemm_args *g);

#endif
