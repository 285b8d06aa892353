/*
 * kernels/cuda/nccl.cu - data-parallel gradient all-reduce over NCCL for the CUDA backend (issue #15; the GPU
 * side of engine/dist, see engine/dist/dist.h for the math). Compiled with NCCL when Meson's 'nccl' feature found
 * nccl.h; without it every entry point says how to get it.
 *
 * NCCL is loaded lazily: the module does not link libnccl.so.2 (NCCL alone is about 200 MB, and a machine without
 * it must still run the CUDA backend); the first data-parallel use (mpt_cuda_nccl_available, called by
 * engine/dist before any rank waits in a collective) dlopen()s it: $MPT_NCCL_LIBRARY if set (a file path), else
 * "libnccl.so.2" through the loader's search (LD_LIBRARY_PATH, this module's RUNPATH = the CUDA toolkit's library
 * directories, ldconfig's cache), and resolves the NCCL functions used here by name. A library that lacks one
 * (NCCL older than 2.14, which added ncclCommFinalize) is refused, naming it. `mptrain info` reports the version
 * found and the file it came from (mpt_cuda_nccl_describe).
 *
 * Bootstrap as llm.c does it (train_gpt2.cu, multi_gpu_config_init): rank 0 calls ncclGetUniqueId
 * (mpt_cuda_nccl_unique_id), the id travels to every rank over MPI_Bcast (engine/dist/dist_mpi.c), and each
 * rank calls ncclCommInitRank on its own GPU (mpt_cuda_nccl_comm_create; one GPU per rank, the device chosen
 * by mpt_cuda_set_device before the backend was created). With one rank no MPI is needed: a local id.
 *
 * The all-reduce (mpt_cuda_nccl_allreduce) is enqueued on the backend's stream and adds no host
 * synchronisation to the step: a kernel multiplies each gradient by the rank's weight w_r (the division by N
 * before the sum, PyTorch's fp16_compress_hook order) and rounds it to the wire dtype (RNE, engine/numerics.h),
 * ncclAllReduce sums in that dtype (ncclFloat / ncclBfloat16 / ncclHalf: NCCL rounds every partial sum to
 * it), and the backend's cast kernel (elementwise.cu) widens the result back into the FP32 gradient. All
 * tensors go in one ncclGroupStart/End, so NCCL fuses them. found_inf needs no extra collective here: IEEE
 * sums propagate inf and NaN (inf + x = inf, NaN + x = NaN, inf - inf = NaN) and an FP16 overflow of the sum
 * is inf, so the reduced gradient, identical on every rank, is non-finite exactly when some rank's term was or
 * the sum overflowed, and the step's unscale_check on it sets found_inf on every rank alike.
 */
#include "kernels/cuda/cuda_internal.cuh"
#include "mpt_config.h"

#ifdef MPT_HAVE_NCCL
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#endif

#include <stdio.h>
#include <string.h>

struct mpt_nccl_comm {
#ifdef MPT_HAVE_NCCL
    ncclComm_t comm;
#endif
    int nranks, rank;
    int device;          /* the GPU the communicator and the scratch live on */
    uint16_t *scratch16; /* device [max_elems]: the 16-bit wire's terms, packed */
    int64_t max_elems;
};

#ifndef MPT_HAVE_NCCL
static const char *no_nccl =
    "this libmptrain-cuda.so was built without NCCL (-Dnccl=disabled, or Meson feature 'nccl' found no nccl.h in "
    "the CUDA toolkit): install NCCL's header (NVIDIA's Debian repository: libnccl-dev, or the toolkit's own copy), "
    "then 'meson setup --reconfigure build -Dnccl=enabled' and rebuild";
#endif


#ifdef MPT_HAVE_NCCL
/* ---- the library, loaded at the first data-parallel use ------------------------------------------------------ */

/* NCCL's functions used here, resolved from the loaded library (their declarations: nccl.h). */
static struct nccl_lib {
    ncclResult_t (*GetVersion)(int *version);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *id);
    ncclResult_t (*CommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    ncclResult_t (*CommFinalize)(ncclComm_t comm);
    ncclResult_t (*CommDestroy)(ncclComm_t comm);
    ncclResult_t (*CommAbort)(ncclComm_t comm);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t comm, ncclResult_t *async_error);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
    ncclResult_t (*AllReduce)(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
    const char *(*GetErrorString)(ncclResult_t result);
    const char *(*GetLastError)(ncclComm_t comm);
} nccl;

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static int nccl_loaded;             /* every function above resolved */
static int nccl_version;            /* ncclGetVersion's code (NCCL_VERSION: major*10000 + minor*100 + patch) */
static char nccl_file[PATH_MAX];    /* the file the loader found */
static char nccl_why[1024];         /* why it is not loaded */

static void nccl_load(void) {
    const char *env = getenv("MPT_NCCL_LIBRARY");
    const char *name = env && env[0] ? env : "libnccl.so.2";
    /* dlopen from this module: its RUNPATH (the CUDA toolkit's library directories) is searched too */
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(nccl_why, sizeof nccl_why, "%s%s", e ? e : name, env && env[0] ? " (MPT_NCCL_LIBRARY)" : "");
        return;
    }
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) {
        if (!realpath(lm->l_name, nccl_file)) snprintf(nccl_file, sizeof nccl_file, "%s", lm->l_name);
    } else {
        snprintf(nccl_file, sizeof nccl_file, "%s", name);
    }
    static const struct { const char *sym; void **slot; } syms[] = {
        {"ncclGetVersion", (void **)&nccl.GetVersion},
        {"ncclGetUniqueId", (void **)&nccl.GetUniqueId},
        {"ncclCommInitRank", (void **)&nccl.CommInitRank},
        {"ncclCommFinalize", (void **)&nccl.CommFinalize},
        {"ncclCommDestroy", (void **)&nccl.CommDestroy},
        {"ncclCommAbort", (void **)&nccl.CommAbort},
        {"ncclCommGetAsyncError", (void **)&nccl.CommGetAsyncError},
        {"ncclGroupStart", (void **)&nccl.GroupStart},
        {"ncclGroupEnd", (void **)&nccl.GroupEnd},
        {"ncclAllReduce", (void **)&nccl.AllReduce},
        {"ncclGetErrorString", (void **)&nccl.GetErrorString},
        {"ncclGetLastError", (void **)&nccl.GetLastError},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(h, syms[i].sym);
        if (!*syms[i].slot) {
            snprintf(nccl_why, sizeof nccl_why, "%s has no %s (NCCL 2.14 or newer is needed)", nccl_file,
                     syms[i].sym);
            dlclose(h);
            memset(&nccl, 0, sizeof nccl);
            return;
        }
    }
    if (nccl.GetVersion(&nccl_version) != ncclSuccess) nccl_version = 0;
    nccl_loaded = 1; /* the handle stays open until the process exits */
}

/* "2.28.9" from a version code (NCCL_VERSION: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z after). */
static void nccl_version_str(int v, char *buf, size_t len) {
    if (v <= 0) snprintf(buf, len, "version unavailable");
    else if (v < 20900) snprintf(buf, len, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
    else snprintf(buf, len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
}

static const char *nccl_how =
    "install NCCL (NVIDIA's libnccl2, or the pip wheel nvidia-nccl-cu13) and put libnccl.so.2 on the loader's path "
    "(LD_LIBRARY_PATH, or ldconfig), or name the file with MPT_NCCL_LIBRARY";

static mpt_status nccl_error(ncclResult_t r, const char *what) {
    return mpt_errorf(MPT_ERR_DEVICE, "%s failed: %s (%s)", what, nccl.GetErrorString(r), nccl.GetLastError(NULL));
}

static int mpt_nccl_ok(ncclResult_t r) { return r == ncclSuccess; }
static const char *mpt_nccl_describe(ncclResult_t r) { return nccl.GetErrorString(r); }
#define MPT_NCCL_CHECK(call) MPT_GPU_CHECK_TEXT(ncclResult_t, call, #call, mpt_nccl_ok, mpt_nccl_describe)

static ncclDataType_t nccl_type(mpt_dtype wire) {
    return wire == MPT_DTYPE_BF16 ? ncclBfloat16 : wire == MPT_DTYPE_F16 ? ncclHalf : ncclFloat;
}
#endif

extern "C" int mpt_cuda_nccl_available(void) {
#ifdef MPT_HAVE_NCCL
    pthread_once(&nccl_once, nccl_load);
    if (nccl_loaded) return 1;
    mpt_errorf(MPT_ERR_DEVICE, "NCCL could not be loaded: %s; %s", nccl_why, nccl_how);
    return 0;
#else
    mpt_errorf(MPT_ERR_DEVICE, "%s", no_nccl);
    return 0;
#endif
}

void mpt_cuda_nccl_describe(char *version, size_t vlen, char *file, size_t flen) {
    file[0] = '\0';
#ifdef MPT_HAVE_NCCL
    pthread_once(&nccl_once, nccl_load);
    char v[32], hv[32];
    nccl_version_str(NCCL_VERSION_CODE, hv, sizeof hv);
    if (nccl_loaded) {
        nccl_version_str(nccl_version, v, sizeof v);
        snprintf(version, vlen, "%s (built against %s)", v, hv);
        snprintf(file, flen, "%s", nccl_file);
    } else {
        snprintf(version, vlen, "not loadable (only --data-parallel --device cuda needs it): %s", nccl_why);
    }
#else
    (void)flen;
    snprintf(version, vlen, "not built in (-Dnccl=disabled or no nccl.h; only --data-parallel --device cuda needs it)");
#endif
}

extern "C" mpt_status mpt_cuda_nccl_unique_id(unsigned char id[MPT_NCCL_ID_BYTES]) {
#ifdef MPT_HAVE_NCCL
    static_assert(sizeof(ncclUniqueId) == MPT_NCCL_ID_BYTES, "ncclUniqueId is NCCL_UNIQUE_ID_BYTES (128)");
    if (!mpt_cuda_nccl_available()) return MPT_ERR_DEVICE;
    ncclUniqueId u;
    ncclResult_t r = nccl.GetUniqueId(&u);
    if (r != ncclSuccess) return nccl_error(r, "ncclGetUniqueId");
    memcpy(id, &u, sizeof u);
    return MPT_OK;
#else
    (void)id;
    return mpt_errorf(MPT_ERR_DEVICE, "%s", no_nccl);
#endif
}

extern "C" mpt_status mpt_cuda_nccl_comm_create(mpt_backend *be, mpt_nccl_comm **out,
                                                const unsigned char id[MPT_NCCL_ID_BYTES], int nranks, int rank,
                                                int64_t max_elems) {
    *out = NULL;
#ifdef MPT_HAVE_NCCL
    MPT_ASSERTF(nranks >= 1 && rank >= 0 && rank < nranks, "mpt_cuda_nccl_comm_create: rank %d of %d", rank, nranks);
    if (!mpt_cuda_nccl_available()) return MPT_ERR_DEVICE;
    cudaError_t e = cudaSetDevice(mpt_cuda_ctx_of(be)->device);
    if (e != cudaSuccess) return mpt_errorf(MPT_ERR_DEVICE, "cudaSetDevice failed: %s", mpt_cuda_describe(e));
    mpt_nccl_comm *c = (mpt_nccl_comm *)calloc(1, sizeof *c);
    if (!c) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the NCCL communicator state");
    c->device = mpt_cuda_ctx_of(be)->device;
    c->max_elems = max_elems;
    if (max_elems > 0 && (e = cudaMalloc((void **)&c->scratch16, (size_t)max_elems * sizeof(uint16_t))) != cudaSuccess) {
        free(c);
        return mpt_errorf(MPT_ERR_NOMEM, "cudaMalloc of %lld bytes for the 16-bit gradient wire failed: %s",
                          (long long)max_elems * 2, mpt_cuda_describe(e));
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t r = nccl.CommInitRank(&c->comm, nranks, u, rank);
    if (r != ncclSuccess) {
        cudaFree(c->scratch16);
        free(c);
        return nccl_error(r, "ncclCommInitRank");
    }
    c->nranks = nranks;
    c->rank = rank;
    *out = c;
    return MPT_OK;
#else
    (void)be;
    (void)id;
    (void)nranks;
    (void)rank;
    (void)max_elems;
    return mpt_errorf(MPT_ERR_DEVICE, "%s", no_nccl);
#endif
}

#ifdef MPT_HAVE_NCCL
/* At exit nothing is left to recover: a failed release is reported on stderr with NCCL's string and the process
 * goes on exiting. */
static void nccl_warn(ncclResult_t r, const char *what) {
    fprintf(stderr, "mptrain: warning: %s failed: %s (%s)\n", what, nccl.GetErrorString(r), nccl.GetLastError(NULL));
}

/* The scratch, on the communicator's GPU (the backend, its stream, may already be gone). */
static void nccl_free_scratch(mpt_nccl_comm *c) {
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaFree(c->scratch16);
    if (e != cudaSuccess)
        fprintf(stderr, "mptrain: warning: freeing the NCCL wire scratch failed: %s\n", mpt_cuda_describe(e));
}
#endif

extern "C" void mpt_cuda_nccl_comm_free(mpt_nccl_comm **pc) {
    mpt_nccl_comm *c = *pc;
    if (!c) return;
#ifdef MPT_HAVE_NCCL
    /* The clean release, every rank alike: ncclCommFinalize flushes this rank's outstanding operations (a
     * blocking communicator: it returns when they completed), then ncclCommDestroy frees it locally. A failed
     * finalize (a peer gone, a network error) falls back to ncclCommAbort, which waits for nobody. */
    ncclResult_t r = nccl.CommFinalize(c->comm);
    if (r != ncclSuccess) {
        nccl_warn(r, "ncclCommFinalize");
        if ((r = nccl.CommAbort(c->comm)) != ncclSuccess) nccl_warn(r, "ncclCommAbort");
    } else if ((r = nccl.CommDestroy(c->comm)) != ncclSuccess) {
        nccl_warn(r, "ncclCommDestroy");
    }
    nccl_free_scratch(c);
#endif
    free(c);
    *pc = NULL;
}

extern "C" void mpt_cuda_nccl_comm_abort(mpt_nccl_comm **pc) {
    mpt_nccl_comm *c = *pc;
    if (!c) return;
#ifdef MPT_HAVE_NCCL
    /* A rank that fails alone: ncclCommDestroy (and ncclCommFinalize) may wait for peers that will never reach
     * the same point; ncclCommAbort stops this rank's outstanding NCCL work and frees the communicator at once. */
    ncclResult_t r = nccl.CommAbort(c->comm);
    if (r != ncclSuccess) nccl_warn(r, "ncclCommAbort");
    nccl_free_scratch(c);
#endif
    free(c);
    *pc = NULL;
}

#ifdef MPT_HAVE_NCCL
/* x[i] *= w (FP32 wire: the term each rank contributes). */
static __global__ void scale_kernel(float *x, int64_t n, float w) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = x[i] * w;
}

/* h[i] = RNE_wire(x[i] * w) (16-bit wire). */
static __global__ void to_wire_kernel(uint16_t *h, const float *x, int64_t n, float w, int bf16) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        h[i] = bf16 ? mpt_f32_to_bf16(x[i] * w) : mpt_f32_to_f16(x[i] * w);
}
#endif

extern "C" int mpt_cuda_nccl_poll(mpt_backend *be, mpt_nccl_comm *c) {
#ifdef MPT_HAVE_NCCL
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = nccl.CommGetAsyncError(c->comm, &async);
    if (r != ncclSuccess) {
        nccl_error(r, "ncclCommGetAsyncError");
        return -1;
    }
    if (async != ncclSuccess && async != ncclInProgress) {
        mpt_errorf(MPT_ERR_DEVICE, "NCCL communicator (rank %d of %d) reports an asynchronous error: %s (%s)", c->rank,
                   c->nranks, nccl.GetErrorString(async), nccl.GetLastError(c->comm));
        return -1;
    }
    cudaError_t e = cudaStreamQuery(ctx->stream);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    mpt_errorf(MPT_ERR_DEVICE, "cudaStreamQuery while waiting for the NCCL all-reduce: %s", cudaGetErrorString(e));
    return -1;
#else
    (void)be;
    (void)c;
    mpt_errorf(MPT_ERR_DEVICE, "mpt_cuda_nccl_poll: this module was built without NCCL");
    return -1;
#endif
}

extern "C" void mpt_cuda_nccl_allreduce(mpt_backend *be, mpt_nccl_comm *c, float *const *bufs, const int64_t *counts,
                                        int n_bufs, mpt_dtype wire, float weight) {
#ifdef MPT_HAVE_NCCL
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    const int wide = wire == MPT_DTYPE_F32, bf16 = wire == MPT_DTYPE_BF16;
    MPT_ASSERTF(wide || bf16 || wire == MPT_DTYPE_F16, "mpt_cuda_nccl_allreduce: wire dtype %s",
                mpt_dtype_name(wire));
    /* A peer's failure or a network error shows up here as the communicator's asynchronous error: stop with
     * NCCL's string before enqueueing work that would wait for the failed peer. */
    ncclResult_t async = ncclSuccess;
    MPT_NCCL_CHECK(nccl.CommGetAsyncError(c->comm, &async));
    MPT_ASSERTF(async == ncclSuccess || async == ncclInProgress, "NCCL communicator (rank %d of %d) reports an "
                "asynchronous error: %s (%s)", c->rank, c->nranks, nccl.GetErrorString(async), nccl.GetLastError(c->comm));
    uint16_t *scratch16 = c->scratch16;
    int64_t total = 0;
    for (int i = 0; i < n_bufs; i++) total += counts[i];
    MPT_ASSERTF(wide || total <= c->max_elems, "mpt_cuda_nccl_allreduce: %lld elements, the communicator was made for "
                "%lld", (long long)total, (long long)c->max_elems);
    int64_t off = 0;
    for (int i = 0; i < n_bufs; i++) { /* the weighted terms, in the wire dtype */
        if (counts[i] == 0) continue;
        if (wide) scale_kernel<<<mpt_cuda_blocks(ctx, counts[i]), MPT_CUDA_THREADS, 0, ctx->stream>>>(bufs[i], counts[i], weight);
        else to_wire_kernel<<<mpt_cuda_blocks(ctx, counts[i]), MPT_CUDA_THREADS, 0, ctx->stream>>>(scratch16 + off, bufs[i], counts[i], weight, bf16);
        MPT_CUDA_CHECK_LAUNCH("nccl wire conversion");
        off += counts[i];
    }
    MPT_NCCL_CHECK(nccl.GroupStart());
    off = 0;
    for (int i = 0; i < n_bufs; i++) {
        if (counts[i] == 0) continue;
        void *p = wide ? (void *)bufs[i] : (void *)(scratch16 + off);
        MPT_NCCL_CHECK(nccl.AllReduce(p, p, (size_t)counts[i], nccl_type(wire), ncclSum, c->comm, ctx->stream));
        off += counts[i];
    }
    MPT_NCCL_CHECK(nccl.GroupEnd());
    if (wide) return;
    off = 0;
    for (int i = 0; i < n_bufs; i++) {
        if (counts[i] == 0) continue;
        mpt_cuda_cast_raw(ctx, bufs[i], MPT_DTYPE_F32, scratch16 + off, wire, counts[i]); /* exact widening */
        off += counts[i];
    }
#else
    (void)be; (void)c; (void)bufs; (void)counts; (void)n_bufs; (void)wire; (void)weight;
    MPT_ASSERTF(0, "%s", no_nccl);
#endif
}
