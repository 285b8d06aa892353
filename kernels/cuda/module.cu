/*
 * kernels/cuda/module.cu - the CUDA backend module's one exported symbol (engine/cuda_module.h): the
 * function table engine/cuda_loader.c calls through, and the library versions `mptrain info` prints.
 *
 * Everything else in this module is compiled with -fvisibility=hidden, so its definitions of the
 * cuda_backend.h functions bind inside the module and never clash with the engine's forwarders of the same
 * names. Versions come from each library's own get-version call (what is loaded at run time) next to the
 * headers' (what the module was built against): cudaRuntimeGetVersion / cudaDriverGetVersion,
 * cublasLtGetVersion, cudnnGetVersion, curandGetVersion, and NCCL's (loaded here if it was not yet: nccl.cu). Each
 * with the file it was loaded from (dladdr of one of its functions, realpath: which of several copies the loader
 * took, e.g. the CUDA toolkit's or a pip wheel's under LD_LIBRARY_PATH). None of them needs a GPU.
 */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "engine/cuda_module.h"
#include "mpt_config.h"

/* CUDA encodes versions as 1000 * major + 10 * minor. */
static void cuda_version_str(int v, char *buf, size_t len) {
    if (v <= 0) snprintf(buf, len, "none");
    else snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* The file holding the function at fn (realpath), or why it is not known; "inside this module" when the library
 * was linked statically. */
static void file_of(const void *fn, char *buf, size_t len) {
    Dl_info info, self;
    if (!dladdr(fn, &info) || !info.dli_fname || !info.dli_fname[0]) {
        snprintf(buf, len, "(file unknown: dladdr found no object)");
        return;
    }
    if (dladdr((const void *)&file_of, &self) && self.dli_fbase == info.dli_fbase) {
        snprintf(buf, len, "(linked statically into %s)", self.dli_fname);
        return;
    }
    char real[PATH_MAX];
    snprintf(buf, len, "%s", realpath(info.dli_fname, real) ? real : info.dli_fname);
}

/* The file of an already loaded library by soname (the driver, which cudart loads itself), or "". */
static void loaded_file(const char *soname, char *buf, size_t len) {
    buf[0] = '\0';
    void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return;
    struct link_map *lm = NULL;
    char real[PATH_MAX];
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        snprintf(buf, len, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
    dlclose(h);
}

static void library_versions(char *buf, size_t len) {
    int rt = 0, drv = 0;
    char rts[32], drvs[32], cts[32];
    cudaError_t e_rt = cudaRuntimeGetVersion(&rt);
    cudaError_t e_drv = cudaDriverGetVersion(&drv);
    cuda_version_str(e_rt == cudaSuccess ? rt : 0, rts, sizeof rts);
    cuda_version_str(e_drv == cudaSuccess ? drv : 0, drvs, sizeof drvs);
    cuda_version_str(CUDART_VERSION, cts, sizeof cts);
    size_t lt = cublasLtGetVersion(), dnn = cudnnGetVersion();
    int cr = 0;
    char crs[32];
    if (curandGetVersion(&cr) == CURAND_STATUS_SUCCESS)
        snprintf(crs, sizeof crs, "%d.%d.%d", cr / 1000, (cr % 1000) / 100, cr % 100);
    else
        snprintf(crs, sizeof crs, "version unavailable");
    char arch[64], archs[256] = "";
    snprintf(arch, sizeof arch, "%s", MPT_CUDA_ARCH);
    char *save = NULL;
    for (char *a = strtok_r(arch, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        size_t used = strlen(archs);
        snprintf(archs + used, sizeof archs - used, " sm_%s", a);
    }
    char f_rt[PATH_MAX + 64], f_drv[PATH_MAX], f_lt[PATH_MAX + 64], f_dnn[PATH_MAX + 64], f_rand[PATH_MAX + 64];
    file_of((const void *)&cudaRuntimeGetVersion, f_rt, sizeof f_rt);
    loaded_file("libcuda.so.1", f_drv, sizeof f_drv);
    file_of((const void *)&cublasLtGetVersion, f_lt, sizeof f_lt);
    file_of((const void *)&cudnnGetVersion, f_dnn, sizeof f_dnn);
    file_of((const void *)&curandGetVersion, f_rand, sizeof f_rand);
    char nccl_v[1200], f_nccl[PATH_MAX];
    mpt_cuda_nccl_describe(nccl_v, sizeof nccl_v, f_nccl, sizeof f_nccl);
    snprintf(buf, len,
             "  CUDA runtime        %s (built against %s)\n"
             "                      %s\n"
             "  CUDA driver         %s%s%s\n"
             "  cuBLASLt            %zu.%zu.%zu\n"
             "                      %s\n"
             "  cuDNN               %zu.%zu.%zu (built against %d.%d.%d)\n"
             "                      %s\n"
             "  cuRAND              %s\n"
             "                      %s\n"
             "  NCCL                %s\n"
             "%s%s%s"
             "  GPU code built for %s + PTX compute_%s for newer GPUs (meson option gpu_arch)\n",
             rts, cts, f_rt, drv > 0 ? drvs : "none installed", f_drv[0] ? ", " : "", f_drv, lt / 10000,
             (lt / 100) % 100, lt % 100, f_lt, dnn / 10000, (dnn / 100) % 100, dnn % 100, CUDNN_MAJOR, CUDNN_MINOR,
             CUDNN_PATCHLEVEL, f_dnn, crs, f_rand, nccl_v, f_nccl[0] ? "                      " : "", f_nccl,
             f_nccl[0] ? "\n" : "", archs, MPT_CUDA_PTX_ARCH);
}

/* engine/cuda_backend.h mpt_cuda_opt_in_calls; the loader has checked k. */
static int64_t opt_in_calls(mpt_backend *be, int k) { return mpt_cuda_ctx_of(be)->opt_in_calls[k]; }

static const mpt_cuda_module_api module_api = {
    MPT_CUDA_MODULE_ABI,
    mpt_cuda_probe,
    mpt_cuda_device_info,
    mpt_backend_cuda_create,
    mpt_cuda_rng_uniform,
    mpt_cuda_gemm_record_count,
    mpt_cuda_gemm_record_get,
    mpt_cuda_print_gemm_records,
    mpt_cuda_conv_record_count,
    mpt_cuda_conv_record_get,
    mpt_cuda_print_conv_records,
    mpt_cuda_fp8_convert_check,
    library_versions,
    mpt_cuda_set_device,
    mpt_cuda_nccl_available,
    mpt_cuda_nccl_unique_id,
    mpt_cuda_nccl_comm_create,
    mpt_cuda_nccl_comm_free,
    mpt_cuda_nccl_comm_abort,
    mpt_cuda_nccl_allreduce,
    mpt_cuda_nccl_poll,
    opt_in_calls,
};

extern "C" __attribute__((visibility("default"))) const mpt_cuda_module_api *mpt_cuda_module_get(int abi) {
    return abi == MPT_CUDA_MODULE_ABI ? &module_api : NULL;
}
