/* kernels/cpu/gemm.c - placeholder until this file's owner lands it; every entry aborts. */
#include "kernels/cpu/cpu.h"
void mpt_cpu_gemm(mpt_backend *be, const mpt_gemm_args *a) { (void)be; (void)a; MPT_ASSERTF(0, "pending: gemm"); }
size_t mpt_cpu_gemm_workspace(mpt_backend *be, const mpt_gemm_args *a) { (void)be; (void)a; return 0; }
