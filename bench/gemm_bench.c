/*
 * bench/gemm_bench.c - throughput of the CPU GEMM (kernels/cpu/gemm.c) in each math mode and kernel set on the
 * MLP's and LeNet-5's shapes, against the plain engines on the same shapes (OpenBLAS cblas_sgemm, oneDNN's f32 and
 * bf16 matmul) and a large square product of each engine (the practical ceiling).
 *
 * Shapes: the 784-512-512-10 MLP at batch 128 (linear layer y = x W^T, W [out, in]):
 *   forward   y[B,out]  = x[B,in] * W^T          M=B,   N=out, K=in   (bias+ReLU epilogue, compute dtype out)
 *   dX        dx[B,in]  = dy[B,out] * W          M=B,   N=in,  K=out  (compute dtype out, beta=1)
 *   dW        dW[out,in] += dy^T * x             M=out, N=in,  K=B    (FP32 out, beta=1)
 * and LeNet-5's per-image convolution GEMMs (kernels/cpu/conv.c: forward w[K,CRS] col[CRS,PQ], backward-data
 * w^T dy_n, backward-filter dy_n col^T) and its 400-120 layer at batch 128.
 * GFLOP/s = 2*M*N*K / time, the median of 11 samples, each sample timing enough calls to last >= 20 ms.
 * Columns: sgemm = cblas_sgemm, dnnl f32 / dnnl bf16 = one oneDNN matmul primitive (f32, or bf16 operands with
 * FP32 accumulation), F32 data and output, no epilogue; then mpt_cpu_gemm (the backend's GEMM, with its operand
 * conversion (TF32 rounding, F16/BF16 widening) and epilogue passes) on the default engine: fp32 tf32 fp16 bf16
 * (the emulation) and bf16n (the native kernel set).
 *
 * Usage: build/bench/gemm_bench [--threads N] [--cpu-time]     (threads: OpenBLAS's and oneDNN's, as mptrain
 * --threads; default OPENBLAS_NUM_THREADS or all cores)
 * --cpu-time times with the calling thread's CPU clock instead of the wall clock: on a machine shared with
 * other jobs it leaves out the time the thread was not running. Meaningful only with one thread (the work of
 * other threads is not counted).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "engine/backend.h"
#include "kernels/cpu/onednn.h"

enum { SAMPLES = 11 };
static const double MIN_SAMPLE_S = 0.02;

static clockid_t bench_clock = CLOCK_MONOTONIC;

typedef void (*bench_fn)(void *ctx);

/* Median seconds per call of fn(ctx). */
static double median_time(bench_fn fn, void *ctx) {
    fn(ctx); /* warm-up: page faults, OpenBLAS thread start */
    int iters = 1;
    for (;;) {
        double t0 = bench_now_s(bench_clock);
        for (int i = 0; i < iters; i++) fn(ctx);
        double t = bench_now_s(bench_clock) - t0;
        if (t >= MIN_SAMPLE_S) break;
        iters = t <= 0 ? iters * 10 : (int)(iters * (MIN_SAMPLE_S * 1.2 / t)) + 1;
    }
    double s[SAMPLES];
    for (int k = 0; k < SAMPLES; k++) {
        double t0 = bench_now_s(bench_clock);
        for (int i = 0; i < iters; i++) fn(ctx);
        s[k] = (bench_now_s(bench_clock) - t0) / iters;
    }
    return bench_median(s, SAMPLES);
}

typedef struct shape {
    const char *name;
    int64_t M, N, K;
    int ta, tb;
    int kind; /* 0 forward, 1 dX, 2 dW */
} shape;

typedef struct sgemm_ctx {
    const shape *s;
    const float *A, *B;
    float *C;
} sgemm_ctx;

static void run_sgemm(void *p) {
    sgemm_ctx *c = p;
    const shape *s = c->s;
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (int)s->M,
                (int)s->N, (int)s->K, 1.0f, c->A, (int)(s->ta ? s->M : s->K), c->B, (int)(s->tb ? s->K : s->N),
                s->kind == 0 ? 0.0f : 1.0f, c->C, (int)s->N);
}

typedef struct dnnl_ctx {
    mpt_onednn_gemm g;
    const void *A, *B;
    float *C;
    void *scratch;
    size_t scratch_bytes;
} dnnl_ctx;

static void run_dnnl(void *p) {
    dnnl_ctx *c = p;
    mpt_onednn_gemm_run(&c->g, c->A, c->B, c->C, c->scratch, c->scratch_bytes);
}

/* GFLOP/s of one oneDNN matmul of dtype t on s (F32 out, beta 0 for forward, 1 otherwise); 0 without oneDNN. */
static double dnnl_gflops(const shape *s, mpt_dtype t);

typedef struct mpt_ctx {
    mpt_backend *be;
    mpt_gemm_args g;
} mpt_ctx;

static void run_mpt(void *p) {
    mpt_ctx *c = p;
    c->be->gemm(c->be, &c->g);
}

static mpt_dtype operand_dtype(mpt_math m) {
    return m == MPT_MATH_F16 ? MPT_DTYPE_F16 : m == MPT_MATH_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}

static void *filled(mpt_dtype t, int64_t n, unsigned seed) {
    void *p = malloc((size_t)n * mpt_dtype_size(t));
    if (!p) {
        fprintf(stderr, "gemm_bench: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        mpt_store_f32(p, t, i, (float)(seed >> 8) * 0x1p-24f - 0.5f);
    }
    return p;
}

static double dnnl_gflops(const shape *s, mpt_dtype t) {
    dnnl_ctx c = {{s->ta, s->tb, s->M, s->N, s->K, t, 1.0f, s->kind == 0 ? 0.0f : 1.0f}, NULL, NULL, NULL, NULL, 0};
    if (!mpt_onednn_gemm_prepare(&c.g, &c.scratch_bytes)) return 0.0;
    c.A = filled(t, s->M * s->K, 11);
    c.B = filled(t, s->K * s->N, 12);
    c.C = filled(MPT_DTYPE_F32, s->M * s->N, 13);
    c.scratch = c.scratch_bytes ? aligned_alloc(64, (c.scratch_bytes + 63) & ~(size_t)63) : NULL;
    double t_s = median_time(run_dnnl, &c);
    free((void *)c.A);
    free((void *)c.B);
    free(c.C);
    free(c.scratch);
    return 2.0 * (double)s->M * (double)s->N * (double)s->K / t_s * 1e-9;
}

int main(int argc, char **argv) {
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("Usage: gemm_bench [--threads N] [--cpu-time]\n"
                   "GFLOP/s of the CPU GEMM in each math mode and kernel set on the MLP's and LeNet-5's shapes, against\n"
                   "cblas_sgemm and oneDNN's f32 and bf16 matmul on the same shapes, median of 11 samples.\n"
                   "--threads: OpenBLAS's and oneDNN's threads (default OPENBLAS_NUM_THREADS or all cores);\n"
                   "--cpu-time: the calling thread's CPU clock (meaningful with one thread).\n");
            return 0;
        }
        if (strcmp(argv[i], "--cpu-time") == 0) {
            bench_clock = CLOCK_THREAD_CPUTIME_ID;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            threads = atoi(argv[++i]);
        } else {
            fprintf(stderr, "gemm_bench: unknown argument '%s' (expected --threads N or --cpu-time)\n", argv[i]);
            return 2;
        }
    }
    threads = mpt_cpu_set_threads(threads);
    static const shape shapes[] = {
        {"fc1 forward", 128, 512, 784, 0, 1, 0}, {"fc2 forward", 128, 512, 512, 0, 1, 0},
        {"fc3 forward", 128, 10, 512, 0, 1, 0},  {"fc3 dX", 128, 512, 10, 0, 0, 1},
        {"fc2 dX", 128, 512, 512, 0, 0, 1},      {"fc3 dW", 10, 512, 128, 1, 0, 2},
        {"fc2 dW", 512, 512, 128, 1, 0, 2},      {"fc1 dW", 512, 784, 128, 1, 0, 2},
        {"c1 forward", 6, 784, 25, 0, 0, 1},     {"c1 dW", 6, 25, 784, 0, 1, 2},
        {"c2 forward", 16, 100, 150, 0, 0, 1},   {"c2 dX", 150, 100, 16, 1, 0, 2},
        {"c2 dW", 16, 150, 100, 0, 1, 2},        {"l1 forward", 128, 120, 400, 0, 1, 0},
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    mpt_backend *be = mpt_backend_cpu_create(), *native = NULL;
    char why[256], engine[256];
    if (mpt_cpu_native_available(why, sizeof why)) {
        native = mpt_backend_cpu_create();
        mpt_backend_cpu_set_kernels(native, MPT_CPU_KERNELS_NATIVE);
    }
    const char *ct = getenv("OPENBLAS_CORETYPE");
    mpt_cpu_engine_describe(engine, sizeof engine);
    printf("OpenBLAS %s, core %s, %d thread(s) (OPENBLAS_CORETYPE=%s)\n", openblas_get_config(),
           openblas_get_corename(), openblas_get_num_threads(), ct ? ct : "unset");
    printf("default engine: %s\n", engine);
    if (!native) printf("native kernel set unavailable: %s\n", why);
    printf("%d thread(s); GFLOP/s (%s), median of %d samples; load average at start %.2f\n\n", threads,
           bench_clock == CLOCK_MONOTONIC ? "wall clock" : "thread CPU time", SAMPLES, bench_load_avg());
    printf("%-12s %5s %5s %5s | %8s %8s %8s | %8s %8s %8s %8s %8s\n", "shape", "M", "N", "K", "sgemm", "dnnl f32",
           "dnnl bf16", "fp32", "tf32", "fp16", "bf16", "bf16n");
    for (int si = 0; si < nshapes; si++) {
        const shape *s = &shapes[si];
        const double flop = 2.0 * (double)s->M * (double)s->N * (double)s->K;
        float *A = filled(MPT_DTYPE_F32, s->M * s->K, 1), *B = filled(MPT_DTYPE_F32, s->K * s->N, 2);
        float *C = filled(MPT_DTYPE_F32, s->M * s->N, 3), *bias = filled(MPT_DTYPE_F32, s->N, 4);
        sgemm_ctx sc = {s, A, B, C};
        double t_sgemm = median_time(run_sgemm, &sc);
        printf("%-12s %5lld %5lld %5lld | %8.1f %8.1f %8.1f |", s->name, (long long)s->M, (long long)s->N,
               (long long)s->K, flop / t_sgemm * 1e-9, dnnl_gflops(s, MPT_DTYPE_F32), dnnl_gflops(s, MPT_DTYPE_BF16));
        /* fp32, tf32, fp16, bf16 (the FP8 modes need FP8 data in the TN layout), then bf16 on the native kernel set */
        for (int m = 0; m <= MPT_MATH_BF16 + 1; m++) {
            const int nat = m == MPT_MATH_BF16 + 1;
            if (nat && !native) {
                printf(" %8s", "-");
                continue;
            }
            mpt_dtype od = operand_dtype(nat ? MPT_MATH_BF16 : (mpt_math)m);
            mpt_ctx mc = {nat ? native : be, {0}};
            mpt_gemm_args *g = &mc.g;
            g->trans_a = s->ta;
            g->trans_b = s->tb;
            g->M = s->M;
            g->N = s->N;
            g->K = s->K;
            g->a_dtype = g->b_dtype = od;
            g->A = filled(od, s->M * s->K, 5);
            g->B = filled(od, s->K * s->N, 6);
            g->c_dtype = s->kind == 2 ? MPT_DTYPE_F32 : od;
            g->C = filled(g->c_dtype, s->M * s->N, 7);
            g->bias = s->kind == 0 ? filled(od, s->N, 8) : NULL;
            g->bias_dtype = od;
            g->epilogue = s->kind == 0 ? MPT_EPILOGUE_RELU_BIAS : MPT_EPILOGUE_NONE;
            g->alpha = 1.0f;
            g->beta = s->kind == 0 ? 0.0f : 1.0f;
            g->math = nat ? MPT_MATH_BF16 : (mpt_math)m;
            g->tag = s->name;
            if (mpt_backend_reserve_workspace(mc.be, mc.be->gemm_workspace(mc.be, g)) != MPT_OK) {
                fprintf(stderr, "gemm_bench: %s\n", mpt_last_error());
                return 1;
            }
            double t = median_time(run_mpt, &mc);
            printf(" %8.1f", flop / t * 1e-9);
            free((void *)g->A);
            free((void *)g->B);
            free(g->C);
            free((void *)g->bias);
        }
        printf("\n");
        fflush(stdout);
        free(A);
        free(B);
        free(C);
        free(bias);
    }
    /* the practical ceilings: a large square product on each engine */
    const int64_t n = 2048;
    shape big = {"square", n, n, n, 0, 0, 1};
    float *A = filled(MPT_DTYPE_F32, n * n, 1), *B = filled(MPT_DTYPE_F32, n * n, 2);
    float *C = filled(MPT_DTYPE_F32, n * n, 3);
    sgemm_ctx sc = {&big, A, B, C};
    double t = median_time(run_sgemm, &sc);
    printf("%-12s %5lld %5lld %5lld | %8.1f %8.1f %8.1f |  (ceilings: each engine on a large square product)\n",
           big.name, (long long)n, (long long)n, (long long)n, 2.0 * (double)n * n * n / t * 1e-9,
           dnnl_gflops(&big, MPT_DTYPE_F32), dnnl_gflops(&big, MPT_DTYPE_BF16));
    printf("load average at end %.2f\n", bench_load_avg());
    free(A);
    free(B);
    free(C);
    mpt_backend_free(&be);
    if (native) mpt_backend_free(&native);
    return 0;
}
