/*
 * bench/tc_bench.c - what summing like a Tensor Core costs on the CPU (issue 39, part C's measurement): the mlp's GEMMs
 * of one training step, 784-512-512-10 at batch 128 (models/models.c; linear layers y = x W^T, W [out, in]),
 *   forward   y[B,out]  = x[B,in] W^T     fc1 128x512x784, fc2 128x512x512, fc3 128x10x512      (trans_b)
 *   dX        dx[B,in]  = dy[B,out] W     fc2 128x512x512, fc3 128x512x10 (fc1's dx is not needed)
 *   dW        dW[out,in] = dy^T x         fc1 512x784x128, fc2 512x512x128, fc3 10x512x128      (trans_a)
 * (M x N x K), each run
 *   emulate   the emulate kernel set's GEMM as training runs it today (kernels/cpu/gemm.c: operands converted to
 *             FP32, one FP32 engine GEMM: oneDNN, else OpenBLAS), F32 output, no epilogue;
 *   ieee      kernels/cpu/tc_accum.h's IEEE model: one FP32 FMA per product in order, a scalar loop (the arithmetic
 *             the emulate path does, without its engine's blocking and vector units);
 *   a100, ada, h100, b200, v100   the Tensor Core models (mpt_tc_gemm, scratch reserved once, outside the timing),
 * on operands of the chosen format (random values rounded to it, fixed seed). Every variant runs on --threads
 * threads (default 1; mpt_cpu_set_threads: the engine's and the models' OpenMP threads), timed with the process's CPU
 * clock (all its threads: with more than one thread, the CPU time spent, not the wall time); a round times each
 * GEMM once per variant, variants alternating, and the figure per variant is the median over rounds of the sum over
 * the step's GEMMs. Prints per shape and per step the median milliseconds and the ratio to emulate and to ieee.
 *
 * Usage: build/bench/tc_bench [--format fp16|bf16|tf32] [--rounds N] [--models LIST] [--threads N] [--wall]
 *        (--wall: the wall clock instead of CPU time, for --threads above 1)
 *        (LIST: comma-separated models, default h100,a100; ieee and emulate always run)
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "engine/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/tc_accum.h"
#include "engine/numerics.h"

enum { N_SHAPES = 8, MAX_VARIANTS = 8, MAX_ROUNDS = 101 };

typedef struct shape {
    const char *name;
    int trans_a, trans_b;
    int64_t M, N, K;
} shape;

static const shape shapes[N_SHAPES] = {
    {"fc1 fwd", 0, 1, 128, 512, 784}, {"fc2 fwd", 0, 1, 128, 512, 512}, {"fc3 fwd", 0, 1, 128, 10, 512},
    {"fc2 dX", 0, 0, 128, 512, 512},  {"fc3 dX", 0, 0, 128, 512, 10},   {"fc1 dW", 1, 0, 512, 784, 128},
    {"fc2 dW", 1, 0, 512, 512, 128},  {"fc3 dW", 1, 0, 10, 512, 128},
};

/* One shape's operands: FP32 values of the format (A, B), and the stored form the emulate GEMM takes (sa, sb:
 * F16 / BF16 elements, or the FP32 values themselves for TF32). */
typedef struct operands {
    float *A, *B, *D;
    void *sa, *sb;
    void *ws;
    size_t ws_bytes;
    mpt_gemm_args g;
} operands;

static void usage(FILE *f) {
    fprintf(f, "Usage: tc_bench [--format fp16|bf16|tf32] [--rounds N] [--models LIST] [--threads N] [--wall]\n"
               "Times the mlp's step GEMMs (batch 128) through the Tensor Core summation models against the emulate\n"
               "kernel set's GEMM and the IEEE model's loop, one thread, CPU time, median over rounds.\n"
               "  --format F     operand format (default bf16)\n"
               "  --rounds N     rounds (default 5, at most 101)\n"
               "  --models LIST  Tensor Core models, comma-separated (default h100,a100; of v100 a100 ada h100 b200)\n"
               "  --threads N    threads of the engine and the models (default 1)\n"
               "  --wall         time with the wall clock (default: the process's CPU time)\n");
}

static clockid_t bench_clock = CLOCK_PROCESS_CPUTIME_ID;
static double now_s(void) { return bench_now_s(bench_clock); }

int main(int argc, char **argv) {
    const char *fmt_name = "bf16", *models = "h100,a100";
    int rounds = 5, threads = 1;
    static const struct option longopts[] = {{"format", required_argument, NULL, 'f'},
                                             {"rounds", required_argument, NULL, 'r'},
                                             {"models", required_argument, NULL, 'm'},
                                             {"threads", required_argument, NULL, 't'},
                                             {"wall", no_argument, NULL, 'w'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'f': fmt_name = optarg; break;
        case 'r': {
            char *end;
            const long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > MAX_ROUNDS) {
                fprintf(stderr, "tc_bench: --rounds '%s': expected 1 to %d\n", optarg, MAX_ROUNDS);
                return 2;
            }
            rounds = (int)v;
            break;
        }
        case 'm': models = optarg; break;
        case 't': {
            char *end;
            const long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > 256) {
                fprintf(stderr, "tc_bench: --threads '%s': expected 1 to 256\n", optarg);
                return 2;
            }
            threads = (int)v;
            break;
        }
        case 'w': bench_clock = CLOCK_MONOTONIC; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const int fmt = mpt_tc_format_parse(fmt_name);
    if (fmt != MPT_TC_FORMAT_FP16 && fmt != MPT_TC_FORMAT_BF16 && fmt != MPT_TC_FORMAT_TF32) {
        fprintf(stderr, "tc_bench: --format '%s': expected fp16, bf16 or tf32\n", fmt_name);
        return 2;
    }
    /* variants: 0 emulate, 1 ieee, then the models */
    const char *vname[MAX_VARIANTS] = {"emulate", "ieee"};
    mpt_tc_op vop[MAX_VARIANTS];
    int nv = 2;
    if (mpt_tc_op_init(&vop[1], MPT_TC_MODEL_IEEE, (mpt_tc_format)fmt, (mpt_tc_format)fmt, MPT_TC_OUT_FP32) != 0) return 2;
    char list[256];
    snprintf(list, sizeof list, "%s", models);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const int m = mpt_tc_model_parse(tok);
        if (m <= MPT_TC_MODEL_IEEE || nv == MAX_VARIANTS ||
            mpt_tc_op_init(&vop[nv], (mpt_tc_model)m, (mpt_tc_format)fmt, (mpt_tc_format)fmt, MPT_TC_OUT_FP32) != 0) {
            fprintf(stderr, "tc_bench: --models: '%s' is not a Tensor Core model with a %s row (v100 a100 ada h100 "
                            "b200; at most %d)\n", tok, fmt_name, MAX_VARIANTS - 2);
            return 2;
        }
        vname[nv++] = mpt_tc_model_name((mpt_tc_model)m);
    }
    threads = mpt_cpu_set_threads(threads);
    const mpt_math math = fmt == MPT_TC_FORMAT_FP16 ? MPT_MATH_F16 : fmt == MPT_TC_FORMAT_BF16 ? MPT_MATH_BF16
                                                                                               : MPT_MATH_TF32;
    const mpt_dtype sdt = fmt == MPT_TC_FORMAT_FP16 ? MPT_DTYPE_F16 : fmt == MPT_TC_FORMAT_BF16 ? MPT_DTYPE_BF16
                                                                                                : MPT_DTYPE_F32;
    operands op[N_SHAPES];
    uint64_t rng = 0x7c3a5;
    size_t tc_ws_bytes = 0;
    for (int s = 0; s < N_SHAPES; s++) {
        const shape *sh = &shapes[s];
        const int64_t na = sh->M * sh->K, nb = sh->K * sh->N;
        operands *o = &op[s];
        o->A = malloc(sizeof(float) * (size_t)na);
        o->B = malloc(sizeof(float) * (size_t)nb);
        o->D = malloc(sizeof(float) * (size_t)(sh->M * sh->N));
        o->sa = malloc(sizeof(float) * (size_t)na);
        o->sb = malloc(sizeof(float) * (size_t)nb);
        if (!o->A || !o->B || !o->D || !o->sa || !o->sb) {
            fprintf(stderr, "tc_bench: out of memory\n");
            return 1;
        }
        for (int64_t i = 0; i < na + nb; i++) { /* uniform in (-1, 1), rounded to the format */
            rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
            const float x = (float)((double)((rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-52 - 1.0);
            float v;
            uint16_t h = 0;
            switch (fmt) {
            case MPT_TC_FORMAT_FP16: h = mpt_f32_to_f16(x), v = mpt_f16_to_f32(h); break;
            case MPT_TC_FORMAT_BF16: h = mpt_f32_to_bf16(x), v = mpt_bf16_to_f32(h); break;
            default: v = mpt_round_tf32(x); break;
            }
            float *dst = i < na ? o->A + i : o->B + (i - na);
            *dst = v;
            void *store = i < na ? o->sa : o->sb;
            const int64_t j = i < na ? i : i - na;
            if (sdt == MPT_DTYPE_F32) ((float *)store)[j] = v;
            else ((uint16_t *)store)[j] = h;
        }
        mpt_gemm_args g = {0};
        g.trans_a = sh->trans_a, g.trans_b = sh->trans_b;
        g.M = sh->M, g.N = sh->N, g.K = sh->K;
        g.A = o->sa, g.a_dtype = sdt, g.B = o->sb, g.b_dtype = sdt;
        g.C = o->D, g.c_dtype = MPT_DTYPE_F32;
        g.alpha = 1.0f, g.beta = 0.0f;
        g.math = math;
        g.tag = sh->name;
        o->g = g;
        o->ws_bytes = mpt_cpu_gemm_ws_bytes(&o->g); /* prepares the oneDNN primitive (graph build) */
        o->ws = o->ws_bytes ? aligned_alloc(64, (o->ws_bytes + 63) / 64 * 64) : NULL;
        for (int v = 1; v < nv; v++) {
            const size_t b = mpt_tc_gemm_ws_bytes(&vop[v], sh->M, sh->N, sh->K);
            tc_ws_bytes = b > tc_ws_bytes ? b : tc_ws_bytes;
        }
    }
    void *tc_ws = malloc(tc_ws_bytes + 8);
    static double t[MAX_VARIANTS][N_SHAPES][MAX_ROUNDS];
    for (int r = -1; r < rounds; r++) /* round -1: warm-up, not recorded */
        for (int s = 0; s < N_SHAPES; s++)
            for (int v = 0; v < nv; v++) {
                operands *o = &op[s];
                const double t0 = now_s();
                if (v == 0) {
                    mpt_cpu_gemm_ws(&o->g, o->ws, o->ws_bytes);
                } else {
                    const mpt_tc_gemm_args g = {.trans_a = o->g.trans_a, .trans_b = o->g.trans_b, .M = o->g.M,
                                                .N = o->g.N, .K = o->g.K, .A = o->A, .B = o->B, .D = o->D};
                    mpt_tc_gemm(&vop[v], &g, tc_ws, tc_ws_bytes);
                }
                if (r >= 0) t[v][s][r] = now_s() - t0;
            }
    char host[256] = "?";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (ci) {
        char line[256];
        while (fgets(line, sizeof line, ci))
            if (strncmp(line, "model name", 10) == 0) {
                const char *p = strchr(line, ':');
                snprintf(host, sizeof host, "%s", p ? p + 2 : line);
                host[strcspn(host, "\n")] = '\0';
                break;
            }
        fclose(ci);
    }
    char engine[256];
    mpt_cpu_engine_describe(engine, sizeof engine);
    printf("tc_bench: mlp step GEMMs, %s operands, FP32 output, %d rounds, %d thread(s), %s; CPU %s; load %.2f\n"
           "emulate engine: %s\n",
           fmt_name, rounds, threads, bench_clock == CLOCK_MONOTONIC ? "wall time" : "CPU time", host, bench_load_avg(),
           engine);
    printf("%-9s %-15s", "GEMM", "M x N x K");
    for (int v = 0; v < nv; v++) printf(" %9s", vname[v]);
    printf("   (median ms)\n");
    double step[MAX_VARIANTS][MAX_ROUNDS] = {{0}};
    for (int s = 0; s < N_SHAPES; s++) {
        char dims[32];
        snprintf(dims, sizeof dims, "%lldx%lldx%lld", (long long)shapes[s].M, (long long)shapes[s].N,
                 (long long)shapes[s].K);
        printf("%-9s %-15s", shapes[s].name, dims);
        for (int v = 0; v < nv; v++) {
            double tmp[MAX_ROUNDS];
            for (int r = 0; r < rounds; r++) tmp[r] = t[v][s][r], step[v][r] += t[v][s][r];
            printf(" %9.3f", 1e3 * bench_median(tmp, rounds));
        }
        printf("\n");
    }
    double med[MAX_VARIANTS];
    printf("%-25s", "step (8 GEMMs)");
    for (int v = 0; v < nv; v++) {
        double tmp[MAX_ROUNDS];
        memcpy(tmp, step[v], sizeof(double) * (size_t)rounds);
        med[v] = bench_median(tmp, rounds);
        printf(" %9.3f", 1e3 * med[v]);
    }
    printf("\n%-25s", "  / emulate");
    for (int v = 0; v < nv; v++) printf(" %9.1f", med[v] / med[0]);
    printf("\n%-25s", "  / ieee");
    for (int v = 0; v < nv; v++) printf(" %9.2f", med[v] / med[1]);
    printf("\n");
    for (int s = 0; s < N_SHAPES; s++) free(op[s].A), free(op[s].B), free(op[s].D), free(op[s].sa), free(op[s].sb),
                                       free(op[s].ws);
    free(tc_ws);
    return 0;
}
