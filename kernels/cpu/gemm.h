/*
 * kernels/cpu/gemm.h - the CPU GEMM with its scratch passed explicitly (internal to kernels/cpu).
 *
 * mpt_cpu_gemm (cpu.h, the backend-table entry) runs this on be->workspace. conv.c calls it directly with
 * the part of be->workspace that its im2col buffers leave free, so convolutions get exactly the GEMM
 * numerics of gemm.c. Contract of the arguments: mpt_gemm_args in engine/backend.h.
 */
#ifndef MPT_KERNELS_CPU_GEMM_H
#define MPT_KERNELS_CPU_GEMM_H

#include <stddef.h>

#include "engine/backend.h"

/* Bytes of scratch mpt_cpu_gemm_ws needs for these arguments (0 when the operands go to sgemm as they are). */
size_t mpt_cpu_gemm_ws_bytes(const mpt_gemm_args *a);

/* Runs the GEMM of `a` using `ws` (ws_bytes >= mpt_cpu_gemm_ws_bytes(a), 64-byte aligned) as scratch.
 * Aborts (MPT_ASSERTF) on invalid arguments or too little scratch. */
void mpt_cpu_gemm_ws(const mpt_gemm_args *a, void *ws, size_t ws_bytes);

#endif
