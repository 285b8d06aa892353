/* kernels/cuda/backend.cu - CUDA backend entry points (device discovery). The full backend is issue #5. */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "engine/backend.h"
}

extern "C" int mpt_cuda_available(char *msg, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (msg) snprintf(msg, len, "no usable GPU (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        cudaGetLastError();
        return 0;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        if (msg) snprintf(msg, len, "no usable GPU (cudaGetDeviceProperties failed)");
        return 0;
    }
    if (p.major < 8) {
        if (msg) snprintf(msg, len, "GPU %s has compute capability %d.%d; mptrain needs 8.0 (Ampere) or newer", p.name, p.major, p.minor);
        return 0;
    }
    if (msg) snprintf(msg, len, "%s (compute capability %d.%d, %d SMs)", p.name, p.major, p.minor, p.multiProcessorCount);
    return 1;
}

extern "C" mpt_backend *mpt_backend_cuda_create(void) {
    char msg[256];
    if (!mpt_cuda_available(msg, sizeof msg)) {
        mpt_errorf(MPT_ERR_DEVICE, "cuda backend: %s", msg);
        return NULL;
    }
    mpt_errorf(MPT_ERR_DEVICE, "cuda backend: not built yet (issue #5)");
    return NULL;
}
