/*
 * tools/cmd_info.c - `mptrain info`: what this build runs on.
 *
 * Library versions come from each library's own get-version call (so they say what is loaded at run time,
 * next to what the build compiled against): cudaRuntimeGetVersion / cudaDriverGetVersion,
 * cublasLtGetVersion, cudnnGetVersion, curandGetVersion, and OpenBLAS's openblas_get_config /
 * openblas_get_corename / openblas_get_num_threads. None of them needs a GPU. Then whether a GPU is usable
 * (engine/backend.h mpt_cuda_available) with its details (kernels/cuda/cuda_backend.h mpt_cuda_device_info:
 * compute capability, SMs, memory, Tensor Core precisions) and the state of NVIDIA_TF32_OVERRIDE, which turns TF32 off in
 * cuBLAS/cuDNN and, in mptrain, in the CPU emulation too (engine/amp/policy.h).
 */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <curand.h>

#include "kernels/cuda/cuda_backend.h"
#include "mpt_config.h"
#include "tools/cli.h"

/* CUDA encodes versions as 1000 * major + 10 * minor. */
static void cuda_version_str(int v, char *buf, size_t len) {
    if (v <= 0) snprintf(buf, len, "none");
    else snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

int mpt_cmd_info(int argc, char **argv) {
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    int rc = mpt_cli_parse(argc, argv, MPT_CMD_INFO, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;

    printf("mptrain %s\n", MPT_VERSION);
    printf("build:\n");
    int rt = 0, drv = 0;
    char rts[32], drvs[32], cts[32];
    cudaError_t e_rt = cudaRuntimeGetVersion(&rt);
    cudaError_t e_drv = cudaDriverGetVersion(&drv);
    cuda_version_str(e_rt == cudaSuccess ? rt : 0, rts, sizeof rts);
    cuda_version_str(e_drv == cudaSuccess ? drv : 0, drvs, sizeof drvs);
    cuda_version_str(CUDART_VERSION, cts, sizeof cts);
    printf("  CUDA runtime        %s (built against %s); CUDA driver: %s\n", rts, cts,
           drv > 0 ? drvs : "none installed");
    size_t lt = cublasLtGetVersion();
    printf("  cuBLASLt            %zu.%zu.%zu\n", lt / 10000, (lt / 100) % 100, lt % 100);
    size_t dnn = cudnnGetVersion();
    printf("  cuDNN               %zu.%zu.%zu (built against %d.%d.%d)\n", dnn / 10000, (dnn / 100) % 100, dnn % 100,
           CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    int cr = 0;
    if (curandGetVersion(&cr) == CURAND_STATUS_SUCCESS)
        printf("  cuRAND              %d.%d.%d\n", cr / 1000, (cr % 1000) / 100, cr % 100);
    else
        printf("  cuRAND              version unavailable\n");
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("  OpenBLAS            %s\n", openblas_get_config());
    printf("                      core %s, %d thread(s) (OPENBLAS_NUM_THREADS or --threads to change)\n",
           openblas_get_corename(), openblas_get_num_threads());
    if (coretype) printf("                      OPENBLAS_CORETYPE=%s\n", coretype);
    printf("  GPU code built for ");
    char arch[64];
    snprintf(arch, sizeof arch, "%s", MPT_CUDA_ARCH);
    char *save = NULL;
    for (char *a = strtok_r(arch, ",", &save); a; a = strtok_r(NULL, ",", &save)) printf(" sm_%s", a);
    printf(" + PTX compute_%s for newer GPUs (meson option gpu_arch)\n", MPT_CUDA_PTX_ARCH);

    char msg[512], details[1024];
    int gpu = mpt_cuda_available(msg, sizeof msg);
    if (gpu && mpt_cuda_device_info(details, sizeof details))
        printf("GPU: %s\n     --device auto will train on it.\n", details);
    else if (gpu)
        printf("GPU: %s\n     --device auto will train on it.\n", msg);
    else
        printf("GPU: none usable: %s\n     --device auto will train on the CPU backend (Tensor Core numerics emulated).\n",
               msg);

    const char *ov = getenv("NVIDIA_TF32_OVERRIDE");
    if (!ov)
        printf("NVIDIA_TF32_OVERRIDE: unset (--precision tf32 uses TF32 for GEMMs and convolutions)\n");
    else if (strcmp(ov, "0") == 0)
        printf("NVIDIA_TF32_OVERRIDE=0: TF32 disabled everywhere (--precision tf32 runs in full FP32)\n");
    else
        printf("NVIDIA_TF32_OVERRIDE=%s: no effect (only 0 disables TF32)\n", ov);
    return 0;
}
