/*
 * engine/cuda_module.h - the interface between the mptrain engine and the dynamically loaded CUDA backend
 * (libmptrain-cuda.so, built from kernels/cuda when Meson's -Dcuda is on).
 *
 * The engine never links CUDA libraries: engine/cuda_loader.c dlopen()s the module when the CUDA backend is
 * asked for (--device cuda|auto, mptrain info, the cuda tests), looks up the one exported symbol
 * MPT_CUDA_MODULE_ENTRY and calls it with MPT_CUDA_MODULE_ABI; the module returns its function table (static,
 * owned by the module, valid until the process exits), or NULL if it was built for another ABI. A CPU-only run
 * therefore maps neither the module nor cuBLASLt/cuDNN/cuRAND/cudart. The module resolves the engine
 * functions it uses (mpt_errorf, mpt_backend_account, mpt_dtype_*) from the program that loads it, which exports
 * them (-Wl,--export-dynamic). No CUDA types here: C code includes this header.
 * The pattern is ggml's dynamically loaded backends (ggml-backend-reg.cpp, ggml_backend_load).
 */
#ifndef MPT_ENGINE_CUDA_MODULE_H
#define MPT_ENGINE_CUDA_MODULE_H

#include <stddef.h>
#include <stdio.h>

#include "engine/cuda_backend.h"

/* Bumped whenever mpt_cuda_module_api, mpt_backend or an argument struct of engine/backend.h changes. */
#define MPT_CUDA_MODULE_ABI 15 /* 6: nccl_poll (issue #22); 7: FP8 (issue #23): mpt_backend's fp8_* entries, mpt_gemm_args' FP8 fields; 8: fp8_support takes the accumulator; 9: mpt_backend.gemm_supports; 10: avgpool, activation and norm entries (issue #33); 11: quantization entries (issue #38: fake_quant, quantize, gemm_i8, conv2d_forward_i8), MPT_DTYPE_I8; 12: mpt_norm_args.stat_dtype, one_pass (--norm-stats, issue 37); 13: mpt_backend.update_pass (issue 31) and the telemetry_* reductions (issue 32); 14: mpt_gemm_args.beside, mpt_backend.join, mpt_cuda_gemm_record.beside (issue 31); 15: opt_in_calls */
#define MPT_CUDA_MODULE_ENTRY "mpt_cuda_module_get"

/* Each member has the meaning of the function of the same name in engine/backend.h or
 * engine/cuda_backend.h. */
typedef struct mpt_cuda_module_api {
    int abi;                                   /* MPT_CUDA_MODULE_ABI */
    mpt_cuda_probe_result (*probe)(char *msg, size_t len);
    int (*device_info)(char *buf, size_t len);
    mpt_backend *(*backend_create)(void);
    void (*rng_uniform)(mpt_backend *be, float *out, size_t n, uint64_t seed, uint64_t offset);
    int (*gemm_record_count)(mpt_backend *be);
    int (*gemm_record_get)(mpt_backend *be, int i, mpt_cuda_gemm_record *out);
    void (*print_gemm_records)(mpt_backend *be, FILE *f);
    int (*conv_record_count)(mpt_backend *be);
    int (*conv_record_get)(mpt_backend *be, int i, mpt_cuda_conv_record *out);
    void (*print_conv_records)(mpt_backend *be, FILE *f);
    void (*fp8_convert_check)(mpt_backend *be, const float *x, int64_t n, uint8_t *ours, uint8_t *cuda, int kind,
                              int e5m2, int saturate);
    /* Writes one line per CUDA library into buf (len bytes): the version loaded at run time and the one the
     * module was built against (CUDA runtime and driver, cuBLASLt, cuDNN, cuRAND), and the GPU code it holds.
     * Needs no GPU. */
    void (*library_versions)(char *buf, size_t len);
    /* Data-parallel over NCCL (kernels/cuda/nccl.cu). */
    mpt_status (*set_device)(int ordinal);
    int (*nccl_available)(void);
    mpt_status (*nccl_unique_id)(unsigned char id[MPT_NCCL_ID_BYTES]);
    mpt_status (*nccl_comm_create)(mpt_backend *be, mpt_nccl_comm **out, const unsigned char id[MPT_NCCL_ID_BYTES],
                                   int nranks, int rank, int64_t max_elems);
    void (*nccl_comm_free)(mpt_nccl_comm **c);
    void (*nccl_comm_abort)(mpt_nccl_comm **c);
    void (*nccl_allreduce)(mpt_backend *be, mpt_nccl_comm *c, float *const *bufs, const int64_t *counts, int n_bufs,
                           mpt_dtype wire, float weight);
    int (*nccl_poll)(mpt_backend *be, mpt_nccl_comm *c);
    int64_t (*opt_in_calls)(mpt_backend *be, int k);
} mpt_cuda_module_api;

typedef const mpt_cuda_module_api *(*mpt_cuda_module_entry_fn)(int abi);

#endif
