// session diagnostic: each step of mpt_backend_cuda_create with a timestamp, to find where a run hangs
#include <cstdio>
#include <ctime>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cudnn.h>
#include <curand.h>
static double t0;
static double now() { timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
#define STEP(name, call) do { fprintf(stderr, "[%7.3f] %s ...\n", now() - t0, name); fflush(stderr); \
    int _r = (int)(call); fprintf(stderr, "[%7.3f] %s -> %d\n", now() - t0, name, _r); fflush(stderr); } while (0)
__global__ void k(float *p) { p[threadIdx.x] = threadIdx.x; }
int main() {
    t0 = now();
    int n = 0;
    STEP("cudaGetDeviceCount", cudaGetDeviceCount(&n));
    STEP("cudaSetDevice", cudaSetDevice(0));
    cudaDeviceProp prop;
    STEP("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    STEP("cudaStreamCreate", cudaStreamCreate(&s));
    cublasLtHandle_t lt;
    STEP("cublasLtCreate", cublasLtCreate(&lt));
    fprintf(stderr, "cublasLt version %zu cudnn version %zu\n", cublasLtGetVersion(), cudnnGetVersion());
    cudnnHandle_t dnn;
    STEP("cudnnCreate", cudnnCreate(&dnn));
    STEP("cudnnSetStream", cudnnSetStream(dnn, s));
    curandGenerator_t g;
    STEP("curandCreateGenerator", curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    STEP("curandSetStream", curandSetStream(g, s));
    float *p;
    STEP("cudaMalloc", cudaMalloc(&p, 1 << 20));
    k<<<1, 32, 0, s>>>(p);
    STEP("launch", cudaGetLastError());
    STEP("cudaStreamSynchronize", cudaStreamSynchronize(s));
    STEP("curandGenerate", curandGenerate(g, (unsigned *)p, 1024));
    STEP("cudaStreamSynchronize", cudaStreamSynchronize(s));
    cudaGraph_t gr;
    STEP("cudaStreamBeginCapture", cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    k<<<1, 32, 0, s>>>(p);
    STEP("cudaStreamEndCapture", cudaStreamEndCapture(s, &gr));
    fprintf(stderr, "[%7.3f] done\n", now() - t0);
    return 0;
}
