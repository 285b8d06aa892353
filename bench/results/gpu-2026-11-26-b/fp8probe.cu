// Which FP8 cublasLtMatmul configurations cuBLASLt 13 runs on this GPU: scale pointer alignment x heuristic query
// with or without the scale pointers set. E4M3 x E4M3, TN, M=80 (our M = cuBLASLt n), N=96, K=1120, D = F32 or BF16.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
static const char *st(cublasStatus_t s) { return s == 0 ? "OK" : s == 15 ? "NOT_SUPPORTED" : s == 7 ? "INVALID_VALUE" : "other"; }
int main() {
    cublasLtHandle_t lt; cublasLtCreate(&lt);
    const int m = 96, n = 80, k = 1120;
    void *A, *B, *D, *S, *ws; cudaMalloc(&A, m * k); cudaMalloc(&B, n * k); cudaMalloc(&D, m * n * 4);
    cudaMalloc(&S, 1024); cudaMalloc(&ws, 32 << 20);
    cudaMemset(A, 0x38, m * k); cudaMemset(B, 0x38, n * k);
    float ones[64]; for (int i = 0; i < 64; i++) ones[i] = 1.0f; cudaMemcpy(S, ones, sizeof ones, cudaMemcpyHostToDevice);
    for (int dt = 0; dt < 2; dt++)
    for (int off = 0; off < 4; off++) {          // scale pointer byte offsets 0, 4, 8, 16 (alignment 256, 4, 8, 16)
    for (int pre = 0; pre < 3; pre++) {          // heuristic: 0 without scale pointers, 1 with the real ones, 2 with (void*)16
    for (int wsz = 0; wsz < 2; wsz++) {
        const int offs[4] = {0, 4, 8, 16};
        const float *sa = (const float *)((char *)S + 64 + offs[off]), *sb = (const float *)((char *)S + 128 + offs[off]);
        cudaDataType_t dty = dt ? CUDA_R_16BF : CUDA_R_32F;
        cublasLtMatmulDesc_t desc; cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N);
        const void *ph = (const void *)(uintptr_t)16;
        if (pre == 1) { cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
                        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb); }
        if (pre == 2) { cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ph, sizeof ph);
                        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ph, sizeof ph); }
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k);
        cublasLtMatrixLayoutCreate(&ld, dty, m, n, m);
        cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
        uint64_t wb = wsz ? (32u << 20) : 0;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wb, sizeof wb);
        cublasLtMatmulHeuristicResult_t r[8]; int cnt = 0;
        cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 8, r, &cnt);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
        float alpha = 1, beta = 0;
        cublasStatus_t s1 = (cublasStatus_t)-1, s2 = (cublasStatus_t)-1;
        if (h == 0 && cnt > 0) s1 = cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &r[0].algo, ws, r[0].workspaceSize, 0);
        s2 = cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, NULL, ws, wb, 0); // cuBLASLt's own choice
        cudaError_t e = cudaDeviceSynchronize();
        printf("D %s scale align %3d heuristic %-12s ws %2u MiB: heuristic %s (%d algos, ws %zu), matmul(algo) %s, matmul(NULL algo) %s, cuda %s\n",
               dt ? "bf16" : "f32 ", off ? offs[off] : 256, pre == 0 ? "no scales" : pre == 1 ? "real scales" : "placeholder",
               (unsigned)(wb >> 20), st(h), cnt, cnt ? r[0].workspaceSize : 0, (int)s1 == -1 ? "-" : st(s1), st(s2), cudaGetErrorString(e));
        cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld); cublasLtMatmulDescDestroy(desc);
    }}}
    float h0[4]; cudaMemcpy(h0, D, 16, cudaMemcpyDeviceToHost);
    printf("D[0] = %g (expected %g for 0x38 = E4M3 1.0 everywhere)\n", h0[0], 1120.0);
    return 0;
}
