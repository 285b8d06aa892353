/*
 * engine/cuda_backend.h - what the CUDA backend shows beyond the backend table: the device it runs on
 * and a record of what actually ran for every GEMM and convolution call site.
 *
 * The table itself is created by mpt_backend_cuda_create() (engine/backend.h). This header has no CUDA
 * types (ARCHITECTURE decision 5), so C code (tools, tests) can include it; it links without a GPU and without
 * any CUDA library: every function here is a forwarder (engine/cuda_loader.c) into the CUDA backend module,
 * loaded on first use (engine/cuda_module.h; search order in mpt_cuda_module_status below).
 *
 * GEMM records exist so a run can prove which numerics the hardware used: for each call site (the tag a
 * layer passes in mpt_gemm_args) the cuBLASLt compute type, the A/B/C/D data types, the epilogue and the
 * algorithm cuBLASLt's heuristic chose (cuBLASLt docs, cublasLtMatmulAlgoGetHeuristic and
 * CUBLASLT_ALGO_CONFIG_*). Convolution records give the cuDNN algorithm and math type per pass.
 */
#ifndef MPT_ENGINE_CUDA_BACKEND_H
#define MPT_ENGINE_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/backend.h"

#define MPT_CUDA_TAG_LEN 48

/* One GEMM call site as it ran. Strings are static (library enum names), never NULL. */
typedef struct mpt_cuda_gemm_record {
    char tag[MPT_CUDA_TAG_LEN];  /* mpt_gemm_args.tag ("(untagged)" if NULL), truncated */
    int trans_a, trans_b;        /* as in mpt_gemm_args (row-major view) */
    int64_t M, N, K;
    const char *math;            /* mptrain math mode: "fp32", "tf32", "fp16", "bf16" */
    const char *compute_type;    /* "CUBLAS_COMPUTE_32F" or "CUBLAS_COMPUTE_32F_FAST_TF32" */
    const char *scale_type;      /* "CUDA_R_32F" */
    const char *a_type, *b_type; /* "CUDA_R_32F", "CUDA_R_16F", "CUDA_R_16BF" */
    const char *c_type, *d_type; /* what cuBLASLt wrote (D); equals the caller's C dtype on the direct path */
    const char *bias_type;       /* cuBLASLt bias type, or "-" */
    const char *epilogue;        /* "CUBLASLT_EPILOGUE_DEFAULT", "CUBLASLT_EPILOGUE_BIAS", "..._RELU_BIAS" */
    const char *path;            /* "cublasLt" (one call), or "cublasLt D=F32 + epilogue kernel" when the
                                    caller's C/bias dtypes have no cuBLASLt configuration (see gemm.cu) */
    int32_t algo_id;             /* CUBLASLT_ALGO_CONFIG_ID */
    uint32_t tile_id;            /* CUBLASLT_ALGO_CONFIG_TILE_ID (cublasLtMatmulTile_t) */
    uint32_t stages_id;          /* CUBLASLT_ALGO_CONFIG_STAGES_ID */
    int32_t splitk;              /* CUBLASLT_ALGO_CONFIG_SPLITK_NUM */
    uint32_t reduction_scheme;   /* CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME */
    size_t workspace_bytes;      /* cuBLASLt workspace the algorithm uses */
    int64_t calls;               /* times this call site ran */
    int beside;                  /* 1 once a call ran on the second stream (mpt_gemm_args.beside with
                                    MPT_CUDA_WGRAD_STREAM=1) */
} mpt_cuda_gemm_record;

/* One convolution pass of one call site as it ran. */
typedef struct mpt_cuda_conv_record {
    char tag[MPT_CUDA_TAG_LEN];  /* mpt_conv_args.tag ("(untagged)" if NULL), truncated */
    const char *pass;            /* "forward", "backward_data", "backward_filter" */
    mpt_conv_shape s;
    const char *math;            /* mptrain math mode */
    const char *data_type; /* cuDNN tensor data type the pass ran on: "CUDNN_DATA_FLOAT", ..._HALF, ..._BFLOAT16 */
    const char *math_type; /* cuDNN math type set on the pass: "CUDNN_FMA_MATH", "CUDNN_TENSOR_OP_MATH", ... (TENSOR_OP
                              permits Tensor Cores; it does not require them) */
    const char *listed_math_type; /* the math type cuDNN's heuristic (cudnnGet*Algorithm_v7) listed the chosen
                                     algorithm with: "CUDNN_TENSOR_OP_MATH" when it has Tensor Core kernels for this
                                     configuration; "CUDNN_DEFAULT_MATH"/"CUDNN_FMA_MATH" when it computes with FMAs
                                     (a tf32 pass then computes in FP32) */
    int algo;                    /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t value */
    const char *algo_name;       /* its enum name */
    int deterministic;           /* 1: cuDNN reports the algorithm CUDNN_DETERMINISTIC; 0: it was the only kind
                                    cuDNN offered for this pass (results may change from run to run) */
    size_t workspace_bytes;      /* cuDNN workspace of that algorithm */
    const char *path;            /* "cudnn", or for backward_filter in fp16/bf16: "cudnn on FP32 copies (exact)" */
    int64_t calls;
} mpt_cuda_conv_record;

/* Why a GPU is or is not usable, for callers that must tell "this machine has no GPU" (a skip) from "the GPU
 * setup is broken" (a failure): the cuda test suite, the GPU scripts (MPT_REQUIRE_CUDA=1). */
typedef enum mpt_cuda_probe_result {
    MPT_CUDA_USABLE = 0,    /* device 0 can run this build's code */
    MPT_CUDA_NO_DRIVER,     /* no NVIDIA driver installed (cudaDriverGetVersion reports 0) */
    MPT_CUDA_NO_DEVICE,     /* a driver, but no CUDA device (cudaErrorNoDevice or a device count of 0) */
    MPT_CUDA_UNSUPPORTED,   /* a device older than compute capability 8.0 (no TF32/BF16 Tensor Cores) */
    MPT_CUDA_BROKEN,        /* any other CUDA error: a driver older than the runtime (cudaErrorInsufficientDriver:
                               CUDA 13 needs R580+), a driver/library mismatch, devices unavailable, no code in
                               this build for the GPU, the CUDA backend module present but not loadable (a
                               CUDA library missing), ... */
    MPT_CUDA_NOT_BUILT,     /* this mptrain was built without the CUDA backend (-Dcuda=disabled, or no toolkit
                               found by -Dcuda=auto) and no module was found: a machine-independent "no GPU" */
} mpt_cuda_probe_result;

/* What `mptrain info` says about the CUDA backend module. */
typedef struct mpt_cuda_module_state {
    int built;          /* this build configured the CUDA backend (Meson -Dcuda) */
    int loadable;       /* the module was found and loaded (dlopen + entry point + ABI) */
    char path[4096];    /* the module file loaded, or the last one tried ("" if none was found) */
    char why[4096];     /* if not loadable: the paths searched or the loader's error (dlerror), one line */
} mpt_cuda_module_state;

/* Loads the CUDA backend module once (later calls return the first outcome) and describes it into *out (host).
 * Search order: $MPT_CUDA_MODULE (a file path; if set, the only place tried), then libmptrain-cuda.so in the
 * running program's directory, in the build tree's kernels/cuda (this build's module), in <libdir>/mptrain of
 * the install prefix. Returns out->loadable. Thread-safe. */
int mpt_cuda_module_status(mpt_cuda_module_state *out);

/* The CUDA libraries the module loaded (CUDA runtime, driver, cuBLASLt, cuDNN, cuRAND, and NCCL, which this call
 * loads if nothing did yet), each as an indented line with the version at run time (and at build time), then a
 * line with the file it was loaded from (realpath; NCCL's reason when it cannot be loaded), and the GPU code the
 * module holds, into buf (host, len bytes; 8 KiB is ample). Returns 1, or 0 (buf untouched) without a loadable
 * module. Needs no GPU. */
int mpt_cuda_library_versions(char *buf, size_t len);

/* Probes device 0 as mpt_cuda_available() (engine/backend.h) does, and says which case holds; msg (host, may be
 * NULL, len bytes) receives one line: the device, or the reason with the CUDA error's name and number. */
mpt_cuda_probe_result mpt_cuda_probe(char *msg, size_t len);

/* One line describing CUDA device 0 into buf (host, len bytes): name, compute capability, SM count, global
 * memory, driver and runtime versions, and Tensor Core support per precision (TF32, BF16, FP16 on sm_80 and
 * newer; FP8 on sm_89 and newer). Returns 1 if a device was described, 0 if not (buf then says why). */
int mpt_cuda_device_info(char *buf, size_t len);

/* out[0..n) (device memory of be, FP32) = the uniforms in (0, 1] of cuRAND's Philox4x32-10 sequence for
 * (seed, offset), from the backend's device generator (curandCreateGenerator + curandSetPseudoRandomGeneratorSeed
 * + curandSetGeneratorOffset + curandGenerateUniform on the backend's stream): the numbers mpt_rng_uniform
 * (engine/rng.h) produces on the host, which dropout relies on. Stream-ordered. */
void mpt_cuda_rng_uniform(mpt_backend *be, float *out, size_t n, uint64_t seed, uint64_t offset);

/* The CUDA backend's opt-in paths (docs/cuda.md, "Opt-in paths waiting for a GPU"): each is read from the environment
 * when a CUDA backend is created, "1" turning it on; built without a GPU and off until a GPU session has run its
 * checks. The names, in the order docs/cuda.md's table lists them. */
#define MPT_CUDA_OPT_IN_LIST(X)                                                                                        \
    X(FUSED_UPDATE) X(FUSED_LOSS) X(FUSED_DRELU_BGRAD) X(SPLIT_NARROW_BGRAD) X(BIAS_GRAD_ILP) X(WGRAD_STREAM)          \
    X(CONV_FIND) X(SPLIT_CHANNEL_SUM) X(DEVICE_TELEMETRY)
#define MPT_CUDA_OPT_IN_NAME_(x) "MPT_CUDA_" #x,
#define MPT_CUDA_OPT_IN_ENUM_(x) MPT_CUDA_OPT_##x,
#define MPT_CUDA_OPT_IN_VARS {MPT_CUDA_OPT_IN_LIST(MPT_CUDA_OPT_IN_NAME_)}
/* Their indices in that order (MPT_CUDA_OPT_FUSED_UPDATE = 0 for "MPT_CUDA_FUSED_UPDATE", ...). */
typedef enum mpt_cuda_opt_in { MPT_CUDA_OPT_IN_LIST(MPT_CUDA_OPT_IN_ENUM_) MPT_CUDA_OPT_IN_COUNT } mpt_cuda_opt_in;
/* The opt-in variables set to "1" in this process's environment now: their names, comma-separated, in buf (len
 * bytes, truncated to fit; "" when none), and their count. Host only: works without a GPU or the module. */
int mpt_cuda_opt_in_on(char *buf, size_t len);
/* How many calls of backend be (from mpt_backend_cuda_create) have taken opt-in path k since be was created: counted
 * on the host when a call enqueues the path's work instead of the default's, so a call recorded into a CUDA Graph
 * counts once, when recorded (its replays run the same nodes and do not count). 0 when the path is off, or on but
 * never taken (a beside GEMM in a math mode that stays on one stream, a channel sum too small to split, ...).
 * The tests use it where the path's results are the default's bit for bit by design, so that only this count can
 * tell that the variable was read and the path ran. Returns -1 if k is not an mpt_cuda_opt_in. */
int64_t mpt_cuda_opt_in_calls(mpt_backend *be, int k);

/* GEMM records of a CUDA backend (be from mpt_backend_cuda_create): count, and a copy of record i
 * (0 <= i < count; returns 0 if i is out of range, 1 otherwise). */
int mpt_cuda_gemm_record_count(mpt_backend *be);
int mpt_cuda_gemm_record_get(mpt_backend *be, int i, mpt_cuda_gemm_record *out);
/* Prints every GEMM record, one line each, with a header. */
void mpt_cuda_print_gemm_records(mpt_backend *be, FILE *f);

/* The cuda suite's check of CUDA's FP8 conversions against engine/numerics.h's (kernels/cuda/fp8.cu): for the n
 * FP32 values x (device memory of be), ours[i] and cuda[i] (device, U8) receive, with kind 0, mpt_f32_to_fp8(x[i],
 * e5m2, saturate) and __nv_cvt_float_to_fp8(x[i], saturate ? __NV_SATFINITE : __NV_NOSAT, E5M2 or E4M3); with kind
 * 1, mpt_f32_to_e8m0_ru(x[i]) and __nv_cvt_float_to_e8m0(x[i], __NV_SATFINITE, cudaRoundPosInf). Stream-ordered. */
void mpt_cuda_fp8_convert_check(mpt_backend *be, const float *x, int64_t n, uint8_t *ours, uint8_t *cuda, int kind,
                                int e5m2, int saturate);

/* Convolution records, as for GEMMs. */
int mpt_cuda_conv_record_count(mpt_backend *be);
int mpt_cuda_conv_record_get(mpt_backend *be, int i, mpt_cuda_conv_record *out);
void mpt_cuda_print_conv_records(mpt_backend *be, FILE *f);

/* ---- data-parallel over NCCL (kernels/cuda/nccl.cu; the GPU side of engine/dist) --------------------------- */

/* Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES). */
#define MPT_NCCL_ID_BYTES 128
typedef struct mpt_nccl_comm mpt_nccl_comm; /* one rank's NCCL communicator */

/* The GPU the next mpt_backend_cuda_create uses (default 0): one GPU per data-parallel rank, ordinal = the
 * rank's index on its node. MPT_ERR_DEVICE, naming the GPUs visible, when the ordinal does not exist. */
mpt_status mpt_cuda_set_device(int ordinal);
/* 1 if the module was built with NCCL (Meson feature 'nccl') and NCCL's library could be loaded: the first call
 * dlopen()s it ($MPT_NCCL_LIBRARY, else libnccl.so.2 on the loader's path; the module does not link it, so the
 * CUDA backend runs without it). Otherwise 0, with the reason (not built in, or the loader's error) and how to get
 * it in mpt_last_error(); the functions below then fail with MPT_ERR_DEVICE. 0 without a loadable module. */
int mpt_cuda_nccl_available(void);
/* id (host, MPT_NCCL_ID_BYTES) = a fresh ncclGetUniqueId: rank 0 makes it, every rank receives it. */
mpt_status mpt_cuda_nccl_unique_id(unsigned char id[MPT_NCCL_ID_BYTES]);
/* *out = this rank's communicator (ncclCommInitRank on be's GPU; collective over the nranks ranks) with device
 * scratch for max_elems gradient elements in a 16-bit wire (allocated here, not in the step). MPT_ERR_DEVICE
 * with NCCL's message on failure. Free with mpt_cuda_nccl_comm_free (NULL-safe; after the backend is gone too). */
mpt_status mpt_cuda_nccl_comm_create(mpt_backend *be, mpt_nccl_comm **out, const unsigned char id[MPT_NCCL_ID_BYTES],
                                     int nranks, int rank, int64_t max_elems);
/* The clean release at the end of a job, every rank alike (collective in effect: it flushes this rank's
 * outstanding NCCL work, which needs the peers): ncclCommFinalize, then ncclCommDestroy; a failed finalize falls
 * back to ncclCommAbort. Failures are warnings on stderr naming the call and NCCL's string (nothing is left to
 * recover at exit). NULL-safe; sets *c = NULL. */
void mpt_cuda_nccl_comm_free(mpt_nccl_comm **c);
/* The release of a rank that fails alone (engine/dist's mpt_dist_finish, before MPI_Abort): ncclCommAbort, which
 * stops this rank's outstanding NCCL work and waits for no peer (ncclCommDestroy could wait forever for peers that
 * never reach it). Failure: a warning on stderr. NULL-safe; sets *c = NULL. */
void mpt_cuda_nccl_comm_abort(mpt_nccl_comm **c);
/* In place, for each of the n_bufs device FP32 buffers bufs[i] of counts[i] elements (collective, the same
 * counts on every rank; their sum at most the communicator's max_elems): bufs[i] <- sum over ranks of
 * RNE_wire(weight * bufs[i]), summed in the wire dtype (MPT_DTYPE_F32, BF16 or F16: ncclFloat, ncclBfloat16,
 * ncclHalf, NCCL rounding every partial sum to it), widened back to FP32. Enqueued on be's stream, one NCCL
 * group for all buffers; no host synchronisation. Polls ncclCommGetAsyncError first and stops (mpt_fatal, NCCL's
 * string) when the communicator reports an error: a failed peer or link is named at the next step. */
void mpt_cuda_nccl_allreduce(mpt_backend *be, mpt_nccl_comm *c, float *const *bufs, const int64_t *counts, int n_bufs,
                             mpt_dtype wire, float weight);
/* Whether the work enqueued on be's stream (the all-reduce and what came before it) has completed, without
 * waiting: 1 done, 0 not yet, -1 on NCCL's asynchronous error or a CUDA error (the message set). engine/dist polls
 * it to bound the wait (--comm-timeout). */
int mpt_cuda_nccl_poll(mpt_backend *be, mpt_nccl_comm *c);

#endif
