/*
 * tests/test_cuda_tc.c - cuBLASLt against the CPU's Tensor Core summation model (issue 39, part D). Suite 'cuda'; one
 * test case, "tc_accum", which bench/gpu.sh runs as its stage `tc` (alone, after the cuda suite) and whose report
 * lands on the results page.
 *
 * A measurement more than a test: nobody has yet seen how far cuBLASLt's results follow the models that reproduce the
 * published single-instruction measurements (kernels/cpu/tc_accum.h), so the shares below are printed, not asserted.
 * What is asserted is what holds whatever the answer: every GPU result is within the FP32 error bound of the model's
 * (both sum the same exact products: |d_gpu - d_model| <= 2 e32, e32 = 2 (K + 4) u32 sum |a b|, the bound of
 * tests/test_cuda.c, which covers a model's truncations too: each costs at most 2^-24 of the block's largest term),
 * the results are finite, every shape ran and the GEMM records exist.
 *
 * The model is the GPU's (compute capability 8.0-8.7: a100, 8.9: ada, 9.x: h100, 10.x and later: b200), or
 * MPT_TC_MODEL=<name>. Two parts:
 *  1. The mlp's GEMM shapes at batch 128 (784-512-512-10: forward x W^T, data gradient dy W, weight gradient dy^T x;
 *     bench/tc_bench's eight) on random operands in [-1, 1) of each format: fp16, bf16, tf32 with operands that are
 *     TF32 values already (so that cuBLASLt's own FP32 -> TF32 conversion cannot differ), and "tf32 raw" (full FP32
 *     operands, as training passes them). Each GEMM once through cuBLASLt (FP32 output, no epilogue: the bare sum)
 *     and once through the CPU backend with the model and with IEEE sums: per shape, the share of outputs bit for bit
 *     equal to each, the largest difference in units in the last place, cuBLASLt's algorithm, tile and split-K (its
 *     GEMM record), and the causes that can be measured here, each as the share it explains:
 *       split-K     when cuBLASLt split K in s parts: the model run on each part from +0, the partial sums added in
 *                   FP32 in order;
 *       TF32 input  (tf32 raw) the model on operands truncated to TF32 instead of rounded to nearest;
 *       epilogue    (the forward shapes with a bias into an FP16/BF16 output, as the linear layers run them) the
 *                   model's sum plus the bias rounded once, against the double rounding measured on the H200
 *                   (engine/backend.h: round(round(acc) + bias)).
 *  2. Training: the mlp in fp16, bf16 and tf32 for 20 steps (batch 32, Adam, seed 11, fused epilogues off on both so
 *     that every tensor is written) from identical weights (initialised on the host: ARCHITECTURE decision 7), on the
 *     GPU and on the CPU with the model, and for contrast on the CPU with IEEE sums: after every step each tensor is
 *     compared bit for bit in the order the step wrote it (activations, then gradients in backward order, then
 *     masters, weights and optimizer state): the first step and tensor where the two part, how many of its elements
 *     differ, and the losses after the last step.
 * With MPT_TC_REPORT=<file> the results are also written there as markdown tables (bench/gpu.sh's results page).
 * With MPT_TC_STANDIN=cpu the whole measurement runs without a GPU, a second CPU backend with IEEE sums standing in
 * for the GPU (no GEMM records): the plumbing rehearsed on every build (meson test test_cuda_tc_standin, suite
 * 'unit'; its figures say nothing about a GPU).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_gate.h"
#include "datasets/synthetic.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "engine/layers/layers.h"
#include "engine/train.h"
#include "harness.h"
#include "kernels/cpu/tc_accum.h"
#include "models/models.h"

#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

static const double U32 = 0x1p-24;

static mpt_backend *dev;     /* the GPU (or, with MPT_TC_STANDIN=cpu, a CPU backend with IEEE sums) */
static int standin;          /* MPT_TC_STANDIN=cpu */
static mpt_accum_model model; /* the GPU's model */
static FILE *report;         /* MPT_TC_REPORT, or NULL */

/* ---- helpers ------------------------------------------------------------------------------------------------- */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) ck_abort_msg("out of host memory (%zu bytes)", n);
    return p;
}

static mpt_backend *cpu_with(mpt_accum_model m) {
    mpt_backend *be = mpt_backend_cpu_create();
    EXPECT(mpt_backend_cpu_set_accum(be, m) == MPT_OK, "%s", mpt_last_error());
    return be;
}

/* The model of the GPU at hand: MPT_TC_MODEL, else by compute capability (the device's description). */
static mpt_accum_model gpu_model(const char *info) {
    const char *env = getenv("MPT_TC_MODEL");
    mpt_accum_model m = MPT_ACCUM_MODEL_H100;
    if (env && env[0]) {
        if (mpt_accum_model_parse(env, &m) != 0) {
            fprintf(stderr, "test_cuda_tc: MPT_TC_MODEL=%s is none of v100, a100, ada, h100, b200\n", env);
            exit(2);
        }
        return m;
    }
    const char *cc = strstr(info, "compute capability ");
    int major = 0, minor = 0;
    if (cc && sscanf(cc, "compute capability %d.%d", &major, &minor) == 2) {
        if (major == 8) m = minor == 9 ? MPT_ACCUM_MODEL_ADA : MPT_ACCUM_MODEL_A100;
        else if (major >= 10) m = MPT_ACCUM_MODEL_B200;
        else if (major == 9) m = MPT_ACCUM_MODEL_H100;
    }
    return m;
}

/* Units in the last place between two finite FP32 values (on the ordered integer line), INT64_MAX if either is not
 * finite. */
static int64_t ulps(float a, float b) {
    if (!isfinite(a) || !isfinite(b)) return INT64_MAX;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    const int64_t x = ia < 0 ? (int64_t)INT32_MIN - ia : ia, y = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return x > y ? x - y : y - x;
}

static int same_bits(const void *a, const void *b, size_t es) { return memcmp(a, b, es) == 0; }

/* ---- part 1: the mlp's GEMM shapes ------------------------------------------------------------------------------ */

typedef struct shape {
    const char *name;
    int trans_a, trans_b;
    int64_t M, N, K;
} shape;

/* bench/tc_bench.c's: one training step of the mlp at batch 128 (linear layers y = x W^T, W [out, in]) */
static const shape SHAPES[] = {
    {"fc1 fwd", 0, 1, 128, 512, 784}, {"fc2 fwd", 0, 1, 128, 512, 512}, {"fc3 fwd", 0, 1, 128, 10, 512},
    {"fc2 dX", 0, 0, 128, 512, 512},  {"fc3 dX", 0, 0, 128, 512, 10},   {"fc1 dW", 1, 0, 512, 784, 128},
    {"fc2 dW", 1, 0, 512, 512, 128},  {"fc3 dW", 1, 0, 10, 512, 128},
};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0] };

typedef enum variant { V_FP16 = 0, V_BF16, V_TF32, V_TF32_RAW, V_COUNT } variant;
static const char *const variant_names[V_COUNT] = {"fp16", "bf16", "tf32", "tf32 raw"};
static mpt_math variant_math(variant v) { return v == V_FP16 ? MPT_MATH_F16 : v == V_BF16 ? MPT_MATH_BF16 : MPT_MATH_TF32; }
static mpt_dtype variant_dtype(variant v) { return v == V_FP16 ? MPT_DTYPE_F16 : v == V_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32; }
static mpt_tc_format variant_format(variant v) {
    return v == V_FP16 ? MPT_TC_FORMAT_FP16 : v == V_BF16 ? MPT_TC_FORMAT_BF16 : MPT_TC_FORMAT_TF32;
}

/* n operand values in [-1, 1) stored in dtype t (TF32 variant: FP32 values with the low 13 bits of the significand
 * zero, i.e. TF32 values, so that any FP32 -> TF32 conversion keeps them). */
static void *operands(tests_rng *r, variant v, int64_t n) {
    const mpt_dtype t = variant_dtype(v);
    void *p = xmalloc((size_t)n * mpt_dtype_size(t));
    for (int64_t i = 0; i < n; i++) {
        float x = (float)tests_uniform(r, -1.0, 1.0);
        if (v == V_TF32) x = mpt_round_tf32(x);
        mpt_store_f32(p, t, i, x);
    }
    return p;
}

/* The FP32 values the model sums for n stored operands: widened (FP16, BF16), rounded to TF32 to nearest even (the
 * CPU's conversion), or, with truncate, cut to TF32 toward zero. */
static float *operand_values(const void *p, variant v, int64_t n, int truncate) {
    float *x = xmalloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) {
        float f = mpt_load_f32(p, variant_dtype(v), i);
        if (variant_math(v) == MPT_MATH_TF32) {
            if (truncate) {
                uint32_t u;
                memcpy(&u, &f, 4);
                u &= ~UINT32_C(0x1fff);
                memcpy(&f, &u, 4);
            } else {
                f = mpt_round_tf32(f);
            }
        }
        x[i] = f;
    }
    return x;
}

/* acc[M, N] = the model's sums of op(A) op(B) over K, K cut into `parts` contiguous ranges each summed from +0 and the
 * partial sums added in FP32 in order (parts = 1: mpt_tc_gemm's sum). */
static void model_split(const mpt_tc_op *op, const shape *s, const float *A, const float *B, int parts, float *acc) {
    if (parts == 1) { /* the GEMM, on the backend's threads */
        const size_t wsb = mpt_tc_gemm_ws_bytes(op, s->M, s->N, s->K);
        void *ws = xmalloc(wsb);
        const mpt_tc_gemm_args g = {.trans_a = s->trans_a, .trans_b = s->trans_b, .M = s->M, .N = s->N, .K = s->K,
                                    .A = A, .B = B, .C0 = NULL, .D = acc};
        mpt_tc_gemm(op, &g, ws, wsb);
        free(ws);
        return;
    }
    const int64_t as_m = s->trans_a ? 1 : s->K, as_k = s->trans_a ? s->M : 1;
    const int64_t bs_k = s->trans_b ? 1 : s->N, bs_n = s->trans_b ? s->K : 1;
    const int64_t len = (s->K + parts - 1) / parts;
    for (int64_t m = 0; m < s->M; m++)
        for (int64_t n = 0; n < s->N; n++) {
            float d = 0.0f;
            for (int64_t k0 = 0; k0 < s->K; k0 += len) {
                const int64_t k = s->K - k0 < len ? s->K - k0 : len;
                const float part = mpt_tc_dot(op, 0.0f, A + m * as_m + k0 * as_k, as_k, B + k0 * bs_k + n * bs_n, bs_k, k);
                d = k0 == 0 ? part : d + part;
            }
            acc[m * s->N + n] = d;
        }
}

/* T[m, n] >= sum_k |op(A)[m, k] op(B)[k, n]| (the error bound's scale): the FP32 GEMM of |A| and |B| on the CPU
 * backend `be` (its IEEE sums, fast), raised by its own error bound, K u32 of itself (all terms are positive). */
static void abs_products(mpt_backend *be, const shape *s, const float *A, const float *B, double *T) {
    const int64_t nA = s->M * s->K, nB = s->K * s->N, nC = s->M * s->N;
    float *a = xmalloc((size_t)nA * 4), *b = xmalloc((size_t)nB * 4), *t = xmalloc((size_t)nC * 4);
    for (int64_t i = 0; i < nA; i++) a[i] = fabsf(A[i]);
    for (int64_t i = 0; i < nB; i++) b[i] = fabsf(B[i]);
    const mpt_gemm_args g = {.trans_a = s->trans_a, .trans_b = s->trans_b, .M = s->M, .N = s->N, .K = s->K, .A = a,
                             .a_dtype = MPT_DTYPE_F32, .B = b, .b_dtype = MPT_DTYPE_F32, .C = t,
                             .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .math = MPT_MATH_FP32, .tag = "tc.abs"};
    EXPECT(mpt_backend_reserve_workspace(be, be->gemm_workspace(be, &g)) == MPT_OK, "%s", mpt_last_error());
    be->gemm(be, &g);
    for (int64_t i = 0; i < nC; i++) T[i] = (double)t[i] * (1.0 + 2.0 * (double)s->K * U32);
    free(a);
    free(b);
    free(t);
}

/* Runs g on backend be with host operands (copied to the device for a GPU), its C into c_out (host, M*N of c_dtype). */
static void run_gemm(mpt_backend *be, const mpt_gemm_args *g, size_t a_bytes, size_t b_bytes, size_t bias_bytes,
                     void *c_out) {
    mpt_gemm_args d = *g;
    const size_t c_bytes = (size_t)(g->M * g->N) * mpt_dtype_size(g->c_dtype);
    void *A = be->alloc(be, a_bytes), *B = be->alloc(be, b_bytes), *C = be->alloc(be, c_bytes);
    void *bias = bias_bytes ? be->alloc(be, bias_bytes) : NULL;
    EXPECT(A && B && C && (!bias_bytes || bias), "%s: cannot allocate the GEMM's operands", be->name);
    be->from_host(be, A, g->A, a_bytes);
    be->from_host(be, B, g->B, b_bytes);
    if (bias) be->from_host(be, bias, g->bias, bias_bytes);
    d.A = A;
    d.B = B;
    d.C = C;
    d.bias = bias;
    EXPECT(mpt_backend_reserve_workspace(be, be->gemm_workspace(be, &d)) == MPT_OK, "%s", mpt_last_error());
    be->gemm(be, &d);
    be->to_host(be, c_out, C, c_bytes);
    be->free(be, A);
    be->free(be, B);
    be->free(be, C);
    if (bias) be->free(be, bias);
}

/* The GPU's record of call site `tag` as "algo A, tile T, split-K S", and its split-K count (1 without a record). */
static int record_of(const char *tag, char *buf, size_t len) {
    snprintf(buf, len, "-");
    if (standin) return 1;
    const int n = mpt_cuda_gemm_record_count(dev);
    for (int i = 0; i < n; i++) {
        mpt_cuda_gemm_record r;
        if (!mpt_cuda_gemm_record_get(dev, i, &r) || strcmp(r.tag, tag) != 0) continue;
        snprintf(buf, len, "algo %d, tile %u, stages %u, split-K %d (reduction %u)", (int)r.algo_id, r.tile_id,
                 r.stages_id, (int)r.splitk, r.reduction_scheme);
        return r.splitk > 1 ? (int)r.splitk : 1;
    }
    EXPECT(0, "no GEMM record for %s on the GPU", tag);
    return 1;
}

static int64_t count_equal(const float *a, const float *b, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += same_bits(&a[i], &b[i], 4);
    return k;
}

static double pct(int64_t k, int64_t n) { return n ? 100.0 * (double)k / (double)n : 0.0; }

/* One shape in one variant: the bare sums (FP32 output), and for the forward shapes of FP16/BF16 the layer's form
 * (a bias into a 16-bit output). */
static void gemm_case(mpt_backend *cpu_m, mpt_backend *cpu_i, variant v, const shape *s, tests_rng *r) {
    const mpt_dtype t = variant_dtype(v);
    const mpt_math math = variant_math(v);
    const int64_t nA = s->M * s->K, nB = s->K * s->N, nC = s->M * s->N;
    void *A = operands(r, v, nA), *B = operands(r, v, nB);
    char tag[64];
    snprintf(tag, sizeof tag, "tc.%s.%s", variant_names[v], s->name);
    mpt_gemm_args g = {.trans_a = s->trans_a, .trans_b = s->trans_b, .M = s->M, .N = s->N, .K = s->K, .A = A,
                       .a_dtype = t, .B = B, .b_dtype = t, .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .math = math,
                       .epilogue = MPT_EPILOGUE_NONE, .tag = tag};
    float *d_gpu = xmalloc((size_t)nC * 4), *d_model = xmalloc((size_t)nC * 4), *d_ieee = xmalloc((size_t)nC * 4);
    run_gemm(dev, &g, mpt_dtype_size(t) * (size_t)nA, mpt_dtype_size(t) * (size_t)nB, 0, d_gpu);
    run_gemm(cpu_m, &g, mpt_dtype_size(t) * (size_t)nA, mpt_dtype_size(t) * (size_t)nB, 0, d_model);
    run_gemm(cpu_i, &g, mpt_dtype_size(t) * (size_t)nA, mpt_dtype_size(t) * (size_t)nB, 0, d_ieee);
    char rec[160];
    const int splitk = record_of(tag, rec, sizeof rec);
    /* the bound, and the largest distance from the model */
    float *Av = operand_values(A, v, nA, 0), *Bv = operand_values(B, v, nB, 0);
    double *T = xmalloc((size_t)nC * sizeof *T);
    abs_products(cpu_i, s, Av, Bv, T);
    int64_t max_ulp = 0;
    for (int64_t i = 0; i < nC; i++) {
        const double op_err = v == V_TF32_RAW ? 2 * 0x1p-10 + 0x1p-20 : 0.0; /* the GPU may truncate to TF32 */
        const double e32 = 2.0 * (double)(s->K + 4) * U32 * T[i] * (1.0 + op_err) + op_err * T[i];
        EXPECT(isfinite(d_gpu[i]) && fabs((double)d_gpu[i] - (double)d_model[i]) <= 2.0 * e32 + 0x1p-140,
               "%s %s [%lld]: GPU %.9g, the %s model %.9g: more apart than the FP32 bound %.3g", variant_names[v],
               s->name, (long long)i, (double)d_gpu[i], mpt_accum_model_name(model), (double)d_model[i], 2.0 * e32);
        const int64_t u = ulps(d_gpu[i], d_model[i]);
        if (u > max_ulp) max_ulp = u;
    }
    const int64_t eq_model = count_equal(d_gpu, d_model, nC), eq_ieee = count_equal(d_gpu, d_ieee, nC);
    /* causes: split-K; the TF32 conversion */
    mpt_tc_op op;
    EXPECT(mpt_tc_op_init(&op, (mpt_tc_model)model, variant_format(v), variant_format(v), MPT_TC_OUT_FP32) == 0,
           "no %s row for %s", mpt_accum_model_name(model), variant_names[v]);
    char causes[160] = "";
    float *alt = xmalloc((size_t)nC * 4);
    size_t used = 0;
    if (splitk > 1) {
        model_split(&op, s, Av, Bv, splitk, alt);
        used += (size_t)snprintf(causes + used, sizeof causes - used, "split-K %d in FP32: %.1f%%", splitk,
                                 pct(count_equal(d_gpu, alt, nC), nC));
    }
    if (v == V_TF32_RAW) {
        float *At = operand_values(A, v, nA, 1), *Bt = operand_values(B, v, nB, 1);
        model_split(&op, s, At, Bt, 1, alt);
        snprintf(causes + used, sizeof causes - used, "%sTF32 by truncation: %.1f%%", used ? "; " : "",
                 pct(count_equal(d_gpu, alt, nC), nC));
        free(At);
        free(Bt);
    }
    printf("test_cuda_tc: gemm %-8s %-8s %4lldx%4lldx%4lld: bit-identical to %s %6.2f%%, to ieee %6.2f%%, max %lld "
           "ulp from %s; %s%s%s\n",
           variant_names[v], s->name, (long long)s->M, (long long)s->N, (long long)s->K, mpt_accum_model_name(model),
           pct(eq_model, nC), pct(eq_ieee, nC), (long long)max_ulp, mpt_accum_model_name(model), rec,
           causes[0] ? "; " : "", causes);
    if (report)
        fprintf(report, "| %s | %s | %lld x %lld x %lld | %s | %.2f%% | %.2f%% | %lld | %s |\n", variant_names[v], s->name,
                (long long)s->M, (long long)s->N, (long long)s->K, rec, pct(eq_model, nC), pct(eq_ieee, nC),
                (long long)max_ulp, causes[0] ? causes : "-");
    free(alt);
    free(Av);
    free(Bv);
    free(T);
    free(d_gpu);
    free(d_model);
    free(d_ieee);
    free(A);
    free(B);
}

/* The forward shapes as the linear layers run them in fp16 / bf16: bias epilogue into the 16-bit output. Share of the
 * GPU's outputs equal to the CPU's (the model's FP32 sum + bias, rounded once) and to the double rounding
 * round(round(acc) + bias). */
static void bias_case(mpt_backend *cpu_m, variant v, const shape *s, tests_rng *r) {
    const mpt_dtype t = variant_dtype(v);
    const int64_t nA = s->M * s->K, nB = s->K * s->N, nC = s->M * s->N;
    void *A = operands(r, v, nA), *B = operands(r, v, nB), *bias = operands(r, v, s->N);
    char tag[64];
    snprintf(tag, sizeof tag, "tc.bias.%s.%s", variant_names[v], s->name);
    mpt_gemm_args g = {.trans_a = s->trans_a, .trans_b = s->trans_b, .M = s->M, .N = s->N, .K = s->K, .A = A,
                       .a_dtype = t, .B = B, .b_dtype = t, .c_dtype = t, .bias = bias, .bias_dtype = t, .alpha = 1.0f,
                       .math = variant_math(v), .epilogue = MPT_EPILOGUE_BIAS, .tag = tag};
    const size_t es = mpt_dtype_size(t);
    void *c_gpu = xmalloc((size_t)nC * es), *c_cpu = xmalloc((size_t)nC * es);
    run_gemm(dev, &g, es * (size_t)nA, es * (size_t)nB, es * (size_t)s->N, c_gpu);
    run_gemm(cpu_m, &g, es * (size_t)nA, es * (size_t)nB, es * (size_t)s->N, c_cpu);
    mpt_tc_op op;
    EXPECT(mpt_tc_op_init(&op, (mpt_tc_model)model, variant_format(v), variant_format(v), MPT_TC_OUT_FP32) == 0, "row");
    float *Av = operand_values(A, v, nA, 0), *Bv = operand_values(B, v, nB, 0), *acc = xmalloc((size_t)nC * 4);
    model_split(&op, s, Av, Bv, 1, acc);
    int64_t eq_once = 0, eq_twice = 0;
    for (int64_t i = 0; i < nC; i++) {
        eq_once += same_bits((char *)c_gpu + i * es, (char *)c_cpu + i * es, es);
        uint16_t twice = 0;
        mpt_store_f32(&twice, t, 0, acc[i]);
        mpt_store_f32(&twice, t, 0, mpt_load_f32(&twice, t, 0) + mpt_load_f32(bias, t, i % s->N));
        eq_twice += same_bits((char *)c_gpu + i * es, &twice, es);
    }
    char rec[160];
    record_of(tag, rec, sizeof rec);
    printf("test_cuda_tc: bias %-8s %-8s -> %s: the CPU's (model sum + bias, one rounding) %6.2f%%, model sum rounded, "
           "+ bias, rounded %6.2f%%; %s\n",
           variant_names[v], s->name, mpt_dtype_name(t), pct(eq_once, nC), pct(eq_twice, nC), rec);
    if (report)
        fprintf(report, "| %s | %s | %s | %.2f%% | %.2f%% | %s |\n", variant_names[v], s->name, mpt_dtype_name(t),
                pct(eq_once, nC), pct(eq_twice, nC), rec);
    free(A);
    free(B);
    free(bias);
    free(c_gpu);
    free(c_cpu);
    free(Av);
    free(Bv);
    free(acc);
}

START_TEST(test_tc_gemm_shapes) {
    mpt_backend *cpu_m = cpu_with(model), *cpu_i = cpu_with(MPT_ACCUM_MODEL_IEEE);
    tests_rng r = {0x39d1};
    if (report)
        fprintf(report, "The mlp's GEMMs at batch 128, random operands in [-1, 1), FP32 output, no epilogue: the share of "
                        "cuBLASLt's outputs bit-identical to the CPU's `%s` model and to its IEEE sums.\n\n"
                        "| format | GEMM | M x N x K | cuBLASLt | = %s | = ieee | max ulp from %s | causes measured |\n"
                        "|---|---|---|---|---:|---:|---:|---|\n",
                mpt_accum_model_name(model), mpt_accum_model_name(model), mpt_accum_model_name(model));
    int ran = 0;
    for (int v = 0; v < V_COUNT; v++) {
        if (!mpt_accum_model_covers(model, variant_math((variant)v))) continue;
        for (int i = 0; i < N_SHAPES; i++, ran++) gemm_case(cpu_m, cpu_i, (variant)v, &SHAPES[i], &r);
    }
    if (report)
        fprintf(report, "\nThe forward GEMMs as the linear layers run them: a bias into the 16-bit output.\n\n"
                        "| format | GEMM | output | = CPU (one rounding) | = round(round(acc) + bias) | cuBLASLt |\n"
                        "|---|---|---|---:|---:|---|\n");
    for (int v = V_FP16; v <= V_BF16; v++) {
        if (!mpt_accum_model_covers(model, variant_math((variant)v))) continue;
        for (int i = 0; i < 3; i++) bias_case(cpu_m, (variant)v, &SHAPES[i], &r);
    }
    EXPECT(ran >= N_SHAPES, "only %d GEMMs ran", ran);
    mpt_backend_free(&cpu_m);
    mpt_backend_free(&cpu_i);
}
END_TEST

/* ---- part 2: 20 training steps from identical weights ------------------------------------------------------------ */

#define TC_STEPS 20
#define TC_BATCH 32

static mpt_trainer *make_trainer(mpt_backend *be, mpt_precision p) {
    mpt_policy pol = mpt_policy_make(p);
    mpt_graph *g = mpt_graph_create(be, &pol, TC_BATCH);
    mpt_tensor *logits = NULL;
    EXPECT(mpt_model_build(g, "mlp", &logits) == MPT_OK, "%s", mpt_last_error());
    mpt_softmax_xent(g, logits, "loss");
    g->fuse_epilogues = 0; /* every node writes its output: each tensor can be compared */
    mpt_train_config cfg = mpt_train_config_default(p);
    cfg.seed = 11;
    mpt_trainer *t = NULL;
    EXPECT(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s on %s: %s", mpt_precision_name(p), be->name,
           mpt_last_error());
    return t;
}

/* The tensors of a step in the order it writes them: node outputs (forward), input gradients of the nodes in reverse
 * order (backward), the parameters' gradients, then the masters, the working weights and the optimizer state. At most
 * cap, into out; returns the count. */
static int step_order(const mpt_trainer *t, const mpt_tensor **out, int cap) {
    const mpt_graph *g = t->g;
    int n = 0;
#define ADD(x)                                                                                                       \
    do {                                                                                                             \
        const mpt_tensor *x_ = (x);                                                                                  \
        int dup_ = 0;                                                                                                \
        for (int j_ = 0; j_ < n; j_++) dup_ |= out[j_] == x_;                                                        \
        if (x_ && x_->data && !dup_ && n < cap) out[n++] = x_;                                                       \
    } while (0)
    for (int i = 0; i < g->n_nodes; i++) ADD(g->nodes[i]->out);
    for (int i = g->n_nodes - 1; i >= 0; i--)
        for (int k = 0; k < MPT_NODE_MAX_IN; k++)
            if (g->nodes[i]->in[k]) ADD(g->nodes[i]->in[k]->grad);
    for (int i = 0; i < t->n_params; i++) ADD(t->weight[i]->grad);
    for (int i = 0; i < t->n_params; i++) ADD(t->master[i]);
    for (int i = 0; i < t->n_params; i++) ADD(t->weight[i]);
    for (int i = 0; i < t->n_params; i++) {
        if (t->m && t->m[i]) ADD(t->m[i]);
        if (t->v && t->v[i]) ADD(t->v[i]);
    }
#undef ADD
    return n;
}

/* Elements of two copies of tensor x whose bits differ (NaN = NaN). */
static int64_t tensor_differ(const mpt_tensor *x, const void *a, const void *b) {
    const int64_t n = mpt_tensor_numel(x);
    const size_t es = mpt_dtype_size(x->dtype);
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *pa = (const char *)a + (size_t)i * es, *pb = (const char *)b + (size_t)i * es;
        if (same_bits(pa, pb, es)) continue;
        if (mpt_dtype_is_float(x->dtype)) {
            const float fa = mpt_load_f32(a, x->dtype, i), fb = mpt_load_f32(b, x->dtype, i);
            if (fa != fa && fb != fb) continue;
        }
        d++;
    }
    return d;
}

typedef struct parting {
    int step;             /* first step where a tensor differs, or -1 */
    char tensor[64];
    int64_t differ, numel;
    float loss_a, loss_b; /* after the last step */
    int differ_last, n_tensors;
} parting;

/* 20 steps of the mlp in precision p on backends a and b from identical weights: where they part. */
static parting train_pair(mpt_backend *a, mpt_backend *b, mpt_precision p, const mpt_mnist *d) {
    parting out = {.step = -1};
    mpt_trainer *ta = make_trainer(a, p), *tb = make_trainer(b, p);
    enum { CAP = 256 };
    const mpt_tensor *la[CAP], *lb[CAP];
    const int n = step_order(ta, la, CAP);
    EXPECT(step_order(tb, lb, CAP) == n, "the two graphs differ");
    out.n_tensors = n;
    const int64_t n_idx = (int64_t)TC_STEPS * TC_BATCH;
    int32_t *idx = xmalloc((size_t)n_idx * sizeof *idx);
    for (int64_t i = 0; i < n_idx; i++) idx[i] = (int32_t)((i * 7919) % d->n_train);
    mpt_backend *be[2] = {a, b};
    mpt_trainer *tr[2] = {ta, tb};
    uint8_t *images[2], *labels[2];
    int32_t *didx[2];
    for (int k = 0; k < 2; k++) {
        images[k] = be[k]->alloc(be[k], (size_t)(d->n_train * d->dim));
        labels[k] = be[k]->alloc(be[k], (size_t)d->n_train);
        didx[k] = be[k]->alloc(be[k], (size_t)n_idx * sizeof(int32_t));
        EXPECT(images[k] && labels[k] && didx[k], "%s: cannot allocate the data", be[k]->name);
        be[k]->from_host(be[k], images[k], d->train_images, (size_t)(d->n_train * d->dim));
        be[k]->from_host(be[k], labels[k], d->train_labels, (size_t)d->n_train);
        be[k]->from_host(be[k], didx[k], idx, (size_t)n_idx * sizeof(int32_t));
        be[k]->synchronize(be[k]);
    }
    for (int s = 0; s < TC_STEPS; s++) {
        mpt_train_stats st[2];
        for (int k = 0; k < 2; k++) {
            mpt_trainer_gather(tr[k], images[k], labels[k], didx[k] + (int64_t)s * TC_BATCH, d->dim, 0.0f, 1.0f);
            mpt_trainer_step(tr[k]);
            mpt_trainer_stats(tr[k], &st[k]);
            EXPECT(isfinite(st[k].loss), "%s on %s, step %d: loss %g", mpt_precision_name(p), be[k]->name, s,
                   (double)st[k].loss);
        }
        out.loss_a = st[0].loss;
        out.loss_b = st[1].loss;
        out.differ_last = 0;
        for (int i = 0; i < n; i++) {
            const size_t bytes = mpt_tensor_nbytes(la[i]);
            void *ha = xmalloc(bytes), *hb = xmalloc(bytes);
            a->to_host(a, ha, la[i]->data, bytes);
            b->to_host(b, hb, lb[i]->data, bytes);
            const int64_t k = tensor_differ(la[i], ha, hb);
            free(ha);
            free(hb);
            if (k == 0) continue;
            out.differ_last++;
            if (out.step < 0) {
                out.step = s;
                snprintf(out.tensor, sizeof out.tensor, "%s", la[i]->name);
                out.differ = k;
                out.numel = mpt_tensor_numel(la[i]);
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        be[k]->free(be[k], images[k]);
        be[k]->free(be[k], labels[k]);
        be[k]->free(be[k], didx[k]);
    }
    free(idx);
    mpt_trainer_free(&ta);
    mpt_trainer_free(&tb);
    return out;
}

static void print_parting(const char *what, mpt_precision p, const parting *q) {
    char where[160];
    if (q->step < 0) snprintf(where, sizeof where, "never: every tensor bit-identical after all %d steps", TC_STEPS);
    else
        snprintf(where, sizeof where, "step %d, tensor %s (%lld of %lld elements)", q->step, q->tensor,
                 (long long)q->differ, (long long)q->numel);
    printf("test_cuda_tc: train mlp %-4s GPU vs %s: part at %s; after step %d: loss %.9g vs %.9g, %d of %d tensors "
           "differ\n",
           mpt_precision_name(p), what, where, TC_STEPS, (double)q->loss_a, (double)q->loss_b, q->differ_last,
           q->n_tensors);
    if (report)
        fprintf(report, "| %s | CPU %s | %s | %.9g | %.9g | %d of %d |\n", mpt_precision_name(p), what, where,
                (double)q->loss_a, (double)q->loss_b, q->differ_last, q->n_tensors);
}

START_TEST(test_tc_training) {
    mpt_mnist d;
    EXPECT(mpt_synthetic_blobs(&d, 480, 0, 784, 10, 5) == MPT_OK, "%s", mpt_last_error());
    if (report)
        fprintf(report, "\nThe mlp trained %d steps (batch %d, Adam, seed 11, fused epilogues off) from identical weights on "
                        "the GPU and on the CPU: the first step and tensor (in the order a step writes them) where they "
                        "part, the losses after the last step (GPU, CPU) and the tensors that differ then.\n\n"
                        "| precision | against | where they part | loss GPU | loss CPU | tensors differing |\n"
                        "|---|---|---|---:|---:|---|\n",
                TC_STEPS, TC_BATCH);
    static const mpt_precision precs[3] = {MPT_PRECISION_FP16, MPT_PRECISION_BF16, MPT_PRECISION_TF32};
    for (int i = 0; i < 3; i++) {
        const mpt_math m = mpt_mode_info(precs[i])->lowp_math == MPT_MATH_FP32 ? MPT_MATH_TF32
                                                                              : mpt_mode_info(precs[i])->lowp_math;
        if (!mpt_accum_model_covers(model, m)) continue;
        const mpt_accum_model against[2] = {model, MPT_ACCUM_MODEL_IEEE};
        for (int k = 0; k < 2; k++) {
            mpt_backend *c = cpu_with(against[k]);
            const parting q = train_pair(dev, c, precs[i], &d);
            print_parting(mpt_accum_model_name(against[k]), precs[i], &q);
            mpt_backend_free(&c);
        }
    }
    mpt_mnist_free(&d);
}
END_TEST

int main(void) {
    const char *si = getenv("MPT_TC_STANDIN");
    standin = si && strcmp(si, "cpu") == 0;
    char info[512] = "a CPU backend with IEEE sums standing in for the GPU (MPT_TC_STANDIN=cpu)";
    setenv("CK_FORK", "no", 1); /* CUDA does not survive fork(); and the report is written by this process */
    if (!standin) {
        const int gate = mpt_test_cuda_gate("test_cuda_tc");
        if (gate >= 0) return gate;
        dev = mpt_backend_cuda_create();
        if (!dev) {
            fprintf(stderr, "test_cuda_tc: FAILED: a GPU is available but the CUDA backend failed: %s\n", mpt_last_error());
            return 1;
        }
        mpt_cuda_device_info(info, sizeof info);
    } else {
        dev = cpu_with(MPT_ACCUM_MODEL_IEEE);
    }
    model = gpu_model(info);
    /* on a GPU machine the CPU sides take every core (the models' results do not depend on it: each element is
     * computed alone); the stand-in keeps the threads the environment gives it (the unit suite runs in parallel) */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    mpt_cpu_set_threads(standin ? 0 : cores > 0 ? (int)cores : 1);
    printf("test_cuda_tc: %s; CPU model %s (%s)\n", info, mpt_accum_model_name(model), mpt_accum_model_gpus(model));
    const char *rp = getenv("MPT_TC_REPORT");
    if (rp && rp[0]) {
        report = fopen(rp, "w");
        if (report) setvbuf(report, NULL, _IOLBF, 0); /* a row at a time: a case killed at its limit keeps its rows */
        if (!report) fprintf(stderr, "test_cuda_tc: cannot write MPT_TC_REPORT=%s\n", rp);
        else
            fprintf(report, "Device: %s. CPU model: `%s` (%s); kernels/cpu/tc_accum.h, tests/test_cuda_tc.c.\n\n", info,
                    mpt_accum_model_name(model), mpt_accum_model_gpus(model));
    }
    Suite *s = suite_create("cuda_tc");
    TCase *tc = tcase_create("tc_accum");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tc_gemm_shapes);
    tcase_add_test(tc, test_tc_training);
    suite_add_tcase(s, tc);
    const int rc = mpt_test_run(s);
    if (report) fclose(report);
    mpt_backend_free(&dev);
    return rc;
}
