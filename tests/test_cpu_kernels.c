/*
 * tests/test_cpu_kernels.c - the CPU backend's GEMM engine and kernel sets (kernels/cpu/gemm.c, kernels/cpu/onednn.h;
 * ARCHITECTURE decision 11).
 *
 * 1. The engine swap keeps the emulation's meaning: on the GEMM shapes of the mlp (784-512-512-10, batch 128: forward,
 *    data gradient, weight gradient) and of lenet5 (its per-image convolution GEMMs and its fully connected layers), in
 *    every 32- and 16-bit math mode (FP8 GEMMs multiply decoded operands with the FP32 engine), the result of the
 *    default engine (oneDNN where the build has it) and of OpenBLAS differ by at most the FP32 summation bound of two
 *    K-term sums, 2*gamma_K*T with T = sum_k |a_k b_k| of the emulated operands (Higham, Accuracy and Stability of
 *    Numerical Algorithms, 2nd ed., sec. 3.1; gamma_K <= 2*K*u32 here), plus the rounding of each result when the
 *    output is 16-bit (compute dtype). With oneDNN in the build, the default engine must be oneDNN (otherwise the
 *    comparison would be OpenBLAS with itself).
 * 2. Determinism: the same GEMM on the same backend gives the same bits, with 1 thread and with 2 (a shape above
 *    oneDNN's one-thread size, so the 2-thread run is parallel).
 *    The graph is built once (ARCHITECTURE decision 4): training steps create no oneDNN primitive, they were all made
 *    at graph build. Each model (mlp, lenet5, cnn) in every precision, on emulate:onednn and, for the BF16 GEMMs, on
 *    native:onednn and native:openblas, fused and unfused, with telemetry every step (probes, fused-output fills, an
 *    FP32 twin) and on 2 threads, through the trainer (whose first gradient writes overwrite, beta 0, and later ones
 *    accumulate): two steps and an evaluation batch, each run in its own process (an empty cache).
 * 3. The native kernel set (bf16 on the CPU's BF16 units; skipped, saying so, where unavailable) against emulate on
 *    the mlp and lenet5 shapes: GEMMs with an F32 output within 2*gamma_K*T (the products are exact in both; only the
 *    order of the FP32 sums differs), with a BF16 output within that plus the BF16 rounding of each result; the
 *    lenet5 convolutions (forward, backward-data, backward-filter) likewise, K being the reduction length.
 * 4. The documented numerics of native that the bound excludes, explicitly: a BF16 subnormal operand is read as zero
 *    (2^-127 * 2^100 = 2^-27 in emulate, 0 in native), and an FP32-denormal result is flushed (2^-70 * 2^-70 = 2^-140
 *    in emulate, 0 in native) (Intel SDM, VDPBF16PS: DAZ on inputs, FTZ on results, MXCSR ignored).
 * 5. Choosing the kernel set: native is refused with a reason where unavailable, and after a graph was built.
 * 6. The element-wise passes split over threads (kernels/cpu/parallel.h) give the same bits on 1 and 2 threads: the
 *    fused optimizer step (Adam on FP32 masters with BF16 working copies; SGD with momentum on BF16 weights with
 *    stochastic rounding), unscale + found_inf, ReLU forward and backward, the batch gather, and an emulated bf16
 *    GEMM's operand conversion and fused epilogues (the GEMM itself on one OpenBLAS thread, so that only the
 *    element-wise parts see the second thread), and lenet5's convolutions (each image's GEMMs and lowering on
 *    one thread, the weight-gradient products summed in image order). Sizes above the one-thread threshold
 *    (MPT_PAR_MIN).
 * 7. Operand copies (engine/layers/linear.c, mpt_gemm_args.a_copy): a linear layer's x, W and dy converted once a
 *    pass into FP32 copies that its other GEMMs read train bit for bit as the backend without them (gemm_copies
 *    cleared): each model in tf32, fp16, bf16 and the FP8 modes (whose non-FP8 layers run in emulated bf16), fused
 *    and unfused, with telemetry every step (its probes and fills convert for themselves), three Adam steps on new
 *    inputs each step (a stale copy of x or W would show), every master weight, working weight and optimizer state
 *    compared byte for byte; and the copies exist.
 * 8. Summation models (--accum-model; kernels/cpu/gemm.c "Summation models"): under every Tensor Core model and in
 *    every math it covers (TF32, FP16, BF16), the backend's GEMM equals mpt_tc_gemm (kernels/cpu/tc_accum.h, checked
 *    against the published hardware measurements by test_tc_accum and bench/tc_validate) on the same FP32 operand
 *    values, followed by the FP32 epilogue alpha * acc + beta * C + bias (ReLU) and one rounding to C's dtype, bit for
 *    bit: plain and transposed operands, K below, at and above the block, F32 outputs written and accumulated, 16-bit
 *    outputs with a bias; and differs from the IEEE sums (else the model did not run). A linear layer under h100 and
 *    a100 (and v100 in fp16): its forward output, data gradient and weight gradient equal mpt_tc_gemm on its operands
 *    bit for bit. The choice's rules (CPU only, not with native, before a graph, V100 without TF32/BF16) and its
 *    names. Training steps under h100 reserve all their scratch at graph build and create no oneDNN primitive.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/backend.h"
#include "engine/graph.h"
#include "engine/layers/layers.h"
#include "engine/optim/optim.h"
#include "engine/telemetry/telemetry.h"
#include "engine/train.h"
#include "harness.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tc_accum.h"
#include "models/models.h"
#include "mpt_config.h"

#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

static const double U32 = 0x1p-24, U_BF16 = 0x1p-8;

static mpt_dtype operand_dtype(mpt_math m) {
    return m == MPT_MATH_F16 ? MPT_DTYPE_F16 : m == MPT_MATH_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}

/* The emulated FP32 value of operand element i (TF32 rounding applied for TF32 math). */
static double emulated(const void *p, mpt_math m, int64_t i) {
    float v = mpt_load_f32(p, operand_dtype(m), i);
    return m == MPT_MATH_TF32 ? (double)mpt_round_tf32(v) : (double)v;
}

static void *fill(tests_rng *r, mpt_dtype t, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * mpt_dtype_size(t));
    ck_assert_ptr_nonnull(p);
    for (int64_t i = 0; i < n; i++) mpt_store_f32(p, t, i, (float)tests_uniform(r, -1.0, 1.0));
    return p;
}

/* A CPU backend with the given kernel set and engine. */
static mpt_backend *backend_with(mpt_cpu_kernels k, mpt_cpu_engine e) {
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert_int_eq(mpt_backend_cpu_set_kernels(be, k), MPT_OK);
    ((mpt_cpu_ctx *)be->ctx)->exec.engine = e;
    return be;
}

static void run_gemm(mpt_backend *be, const mpt_gemm_args *g) {
    ck_assert_int_eq(mpt_backend_reserve_workspace(be, be->gemm_workspace(be, g)), MPT_OK);
    be->gemm(be, g);
}

typedef struct shape {
    const char *what;
    int ta, tb;
    int64_t M, N, K;
} shape;

/* The mlp's GEMMs at batch 128 (y = x W^T: forward trans_b, data gradient plain, weight gradient trans_a) and
 * lenet5's: per-image convolution GEMMs (conv.c: forward w[K,CRS] col[CRS,PQ], backward-data w^T dy, backward-filter
 * dy col^T) and the fully connected layers 400-120-84-10. */
static const shape SHAPES[] = {
    {"mlp fc1 forward", 0, 1, 128, 512, 784},   {"mlp fc2 forward", 0, 1, 128, 512, 512},
    {"mlp fc3 forward", 0, 1, 128, 10, 512},    {"mlp fc3 dgrad", 0, 0, 128, 512, 10},
    {"mlp fc2 dgrad", 0, 0, 128, 512, 512},     {"mlp fc3 wgrad", 1, 0, 10, 512, 128},
    {"mlp fc2 wgrad", 1, 0, 512, 512, 128},     {"mlp fc1 wgrad", 1, 0, 512, 784, 128},
    {"lenet5 conv1 forward", 0, 0, 6, 784, 25}, {"lenet5 conv1 wgrad", 0, 1, 6, 25, 784},
    {"lenet5 conv2 forward", 0, 0, 16, 100, 150}, {"lenet5 conv2 dgrad", 1, 0, 150, 100, 16},
    {"lenet5 conv2 wgrad", 0, 1, 16, 150, 100}, {"lenet5 fc1 forward", 0, 1, 128, 120, 400},
    {"lenet5 fc1 dgrad", 0, 0, 128, 400, 120},  {"lenet5 fc1 wgrad", 1, 0, 120, 400, 128},
};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0] };

static mpt_gemm_args gemm_of(const shape *s, mpt_math m, const void *A, const void *B, void *C, mpt_dtype c_dtype) {
    mpt_gemm_args g = {0};
    g.trans_a = s->ta;
    g.trans_b = s->tb;
    g.M = s->M;
    g.N = s->N;
    g.K = s->K;
    g.A = A;
    g.B = B;
    g.a_dtype = g.b_dtype = operand_dtype(m);
    g.C = C;
    g.c_dtype = c_dtype;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    g.math = m;
    g.tag = s->what;
    return g;
}

/* T[i, j] = sum_k |a_ik b_kj| of the emulated operands. */
static double *abs_products(const shape *s, mpt_math m, const void *A, const void *B) {
    double *T = calloc((size_t)(s->M * s->N), sizeof *T);
    ck_assert_ptr_nonnull(T);
    for (int64_t i = 0; i < s->M; i++)
        for (int64_t k = 0; k < s->K; k++) {
            const double a = fabs(emulated(A, m, s->ta ? k * s->M + i : i * s->K + k));
            for (int64_t j = 0; j < s->N; j++)
                T[i * s->N + j] += a * fabs(emulated(B, m, s->tb ? j * s->K + k : k * s->N + j));
        }
    return T;
}

/* Compares C1 and C2 (dtype t) element by element: |c1 - c2| <= 2*gamma_K*T, plus, for a 16-bit t, the rounding of
 * each to t (u_t*|c1| + u_t*|c2|: two results on either side of a rounding boundary land one ulp apart). */
static void expect_within(const char *what, const shape *s, mpt_dtype t, const void *C1, const void *C2,
                          const double *T, int64_t *n_differ) {
    const double gamma = 2.0 * (double)s->K * U32, uo = t == MPT_DTYPE_BF16 ? U_BF16 : t == MPT_DTYPE_F16 ? 0x1p-11 : 0;
    for (int64_t i = 0; i < s->M * s->N; i++) {
        const double a = mpt_load_f32(C1, t, i), b = mpt_load_f32(C2, t, i);
        const double e32 = 2.0 * gamma * T[i];
        const double bound = e32 * (1.0 + 2.0 * uo) + uo * (fabs(a) + fabs(b));
        EXPECT(fabs(a - b) <= bound, "%s %s (%lldx%lldx%lld, ta %d tb %d): element %lld: %.9g vs %.9g, |diff| %.3g > "
               "bound %.3g", what, s->what, (long long)s->M, (long long)s->N, (long long)s->K, s->ta, s->tb,
               (long long)i, a, b, fabs(a - b), bound);
        *n_differ += a != b;
    }
}

START_TEST(test_default_engine_is_onednn_when_built) {
    mpt_backend *be = mpt_backend_cpu_create();
    const char *k = mpt_backend_kernels_of(be, 0, MPT_MATH_FP32);
#ifdef MPT_HAVE_ONEDNN
    EXPECT(getenv("MPT_CPU_ENGINE") != NULL || strcmp(k, "emulate:onednn") == 0,
           "a build with oneDNN runs its GEMMs on %s", k);
    EXPECT(mpt_onednn_available(), "oneDNN is in the build but could not create its CPU engine");
#else
    EXPECT(strcmp(k, "emulate:openblas") == 0, "a build without oneDNN runs its GEMMs on %s", k);
#endif
    mpt_backend_free(&be);
}
END_TEST

/* 1: the default engine against OpenBLAS, every math mode, the models' shapes, F32 and compute-dtype outputs. */
START_TEST(test_engine_within_fp32_bound_of_openblas) {
    mpt_backend *def = mpt_backend_cpu_create(), *blas = backend_with(MPT_CPU_KERNELS_EMULATE, MPT_CPU_ENGINE_OPENBLAS);
    tests_rng r = {0x2501};
    int64_t differ = 0, total = 0;
    /* the 32- and 16-bit maths: FP8 GEMMs decode their operands into FP32 and multiply them with the same FP32
     * engine (test_fp8 checks them against FP64) */
    for (int m = 0; m <= MPT_MATH_BF16; m++)
        for (int i = 0; i < N_SHAPES; i++) {
            const shape *s = &SHAPES[i];
            const mpt_math math = (mpt_math)m;
            const mpt_dtype od = operand_dtype(math);
            void *A = fill(&r, od, s->M * s->K), *B = fill(&r, od, s->K * s->N);
            double *T = abs_products(s, math, A, B);
            for (int o = 0; o < 2; o++) { /* F32 output (weight gradients), then the compute dtype */
                const mpt_dtype ct = o == 0 ? MPT_DTYPE_F32 : od;
                if (o == 1 && ct == MPT_DTYPE_F32) continue;
                void *C1 = malloc((size_t)(s->M * s->N) * 4), *C2 = malloc((size_t)(s->M * s->N) * 4);
                mpt_gemm_args g = gemm_of(s, math, A, B, C1, ct);
                run_gemm(def, &g);
                g.C = C2;
                run_gemm(blas, &g);
                expect_within("default engine vs OpenBLAS", s, ct, C1, C2, T, &differ);
                total += s->M * s->N;
                free(C1);
                free(C2);
            }
            free(T);
            free(A);
            free(B);
        }
#ifdef MPT_HAVE_ONEDNN
    /* Two engines with their own blockings of K: some elements must differ, or this compared OpenBLAS with itself */
    EXPECT(differ > 0, "oneDNN and OpenBLAS gave identical bits on all %lld elements: is oneDNN running?",
           (long long)total);
#endif
    printf("default engine (%s) vs OpenBLAS: %lld of %lld elements differ, all within the FP32 summation bound\n",
           mpt_backend_kernels_of(def, 0, MPT_MATH_FP32), (long long)differ, (long long)total);
    mpt_backend_free(&def);
    mpt_backend_free(&blas);
}
END_TEST

/* 2: the same call twice gives the same bits, on 1 and on 2 threads (fc1 forward is above the one-thread size). */
START_TEST(test_engine_deterministic_per_thread_count) {
    tests_rng r = {0x2502};
    const shape *s = &SHAPES[0];
    for (int threads = 1; threads <= 2; threads++) {
        ck_assert_int_eq(mpt_cpu_set_threads(threads), threads);
        mpt_backend *be = mpt_backend_cpu_create();
        for (int m = 0; m <= MPT_MATH_BF16; m++) { /* FP8: the FP32 engine on decoded operands */
            const mpt_dtype od = operand_dtype((mpt_math)m);
            void *A = fill(&r, od, s->M * s->K), *B = fill(&r, od, s->K * s->N);
            float *C1 = malloc((size_t)(s->M * s->N) * 4), *C2 = malloc((size_t)(s->M * s->N) * 4);
            mpt_gemm_args g = gemm_of(s, (mpt_math)m, A, B, C1, MPT_DTYPE_F32);
            run_gemm(be, &g);
            for (int rep = 0; rep < 3; rep++) {
                g.C = C2;
                run_gemm(be, &g);
                EXPECT(memcmp(C1, C2, (size_t)(s->M * s->N) * 4) == 0,
                       "math %s, %d thread(s): repeat %d of the same GEMM gave other bits", mpt_math_name((mpt_math)m),
                       threads, rep + 1);
            }
            free(C1);
            free(C2);
            free(A);
            free(B);
        }
        mpt_backend_free(&be);
    }
    mpt_cpu_set_threads(1);
}
END_TEST

/* A model in a precision on be, with random inputs and labels, allocated (primitives created). */
static mpt_graph *model_graph(mpt_backend *be, const char *model, mpt_precision p, int B) {
    mpt_policy policy = mpt_policy_make(p);
    mpt_graph *g = mpt_graph_create(be, &policy, B);
    mpt_tensor *logits = NULL;
    ck_assert_msg(mpt_model_build(g, model, &logits) == MPT_OK, "%s: %s", model, mpt_last_error());
    mpt_softmax_xent(g, logits, "loss");
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    tests_rng r = {0x2503};
    for (int i = 0; i < g->n_tensors; i++) {
        mpt_tensor *t = g->tensors[i];
        if (t->view_of || (t->mem != MPT_MEM_WEIGHT && t != g->input)) continue;
        for (int64_t k = 0; k < mpt_tensor_numel(t); k++)
            mpt_store_f32(t->data, t->dtype, k, (float)tests_uniform(&r, -0.5, 0.5));
    }
    int32_t *labels = g->labels->data;
    for (int i = 0; i < B; i++) labels[i] = tests_int(&r, 0, (int)logits->shape[1] - 1);
    return g;
}

/* One configuration of the training runs whose steps must create no oneDNN primitive. */
typedef struct step_case {
    const char *model;
    mpt_precision precision;
    mpt_cpu_kernels kernels;
    mpt_cpu_engine engine;
    int fuse;      /* g->fuse_epilogues */
    int telemetry; /* a telemetry step every step, with an FP32 twin */
    int threads;   /* OpenMP / OpenBLAS threads for the build and the steps */
    mpt_accum_model accum; /* the summation model (IEEE unless set) */
} step_case;

/* The model of c in its precision on be (built, not allocated). */
static mpt_graph *step_case_graph(mpt_backend *be, const step_case *c, mpt_precision p, int B) {
    mpt_policy policy = mpt_policy_make(p);
    mpt_graph *g = mpt_graph_create(be, &policy, B);
    mpt_tensor *logits = NULL;
    ck_assert_msg(mpt_model_build(g, c->model, &logits) == MPT_OK, "%s: %s", c->model, mpt_last_error());
    mpt_softmax_xent(g, logits, "loss");
    g->fuse_epilogues = c->fuse;
    return g;
}

/* The oneDNN primitives that two training steps and an evaluation batch of c create after the trainer (and its
 * telemetry) was built: what the trainer runs, with the first gradient writes overwriting (beta 0) and the later
 * ones accumulating, the fused epilogues, the optimizer (cycled over SGD, Adam and AdamW by the caller's index). */
static int64_t step_case_run(const step_case *c, int index) {
    static const mpt_optim_kind optims[3] = {MPT_OPTIM_SGD, MPT_OPTIM_ADAM, MPT_OPTIM_ADAMW};
    enum { B = 16 }; /* a multiple of 16: the linear layers' FP8 GEMMs qualify (mpt_policy_fp8_linear) */
    ck_assert_int_eq(mpt_cpu_set_threads(c->threads), c->threads);
    mpt_backend *be = backend_with(c->kernels, c->engine);
    ck_assert_int_eq(mpt_backend_cpu_set_accum(be, c->accum), MPT_OK);
    mpt_graph *g = step_case_graph(be, c, c->precision, B);
    mpt_train_config cfg = mpt_train_config_default(c->precision);
    cfg.optim = mpt_optim_hparams_default(optims[index % 3]);
    mpt_trainer *t = NULL;
    ck_assert_msg(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s: %s", c->model, mpt_last_error());
    if (c->telemetry)
        ck_assert_msg(mpt_telemetry_create(t, 1, step_case_graph(be, c, MPT_PRECISION_FP32, B)) == MPT_OK, "%s",
                      mpt_last_error());
    tests_rng r = {0x2507};
    mpt_tensor *x = t->g->input;
    for (int64_t k = 0; k < mpt_tensor_numel(x); k++) mpt_store_f32(x->data, x->dtype, k, (float)tests_uniform(&r, -1, 1));
    int32_t *labels = t->g->labels->data;
    for (int i = 0; i < B; i++) labels[i] = tests_int(&r, 0, MPT_MODEL_CLASSES - 1);
    const int64_t before = mpt_onednn_primitives_created();
    for (int step = 0; step < 2; step++) mpt_trainer_step(t);
    mpt_trainer_eval_batch(t);
    const int64_t created = mpt_onednn_primitives_created() - before;
    mpt_trainer_free(&t);
    mpt_backend_free(&be);
    return created;
}

/* step_case_run in a child process, which starts with an empty primitive cache (the cache is process-wide: what an
 * earlier run created would hide this run's misses; and libgomp does not survive fork() in a process that ran a
 * parallel region, which this one never does). Returns the count, or -1 when the child did not exit normally (a
 * GEMM that aborts in the step, naming itself on stderr). */
static int64_t step_case_primitives(const step_case *c, int index) {
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(NULL);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        const int64_t n = step_case_run(c, index);
        _exit(write(fd[1], &n, sizeof n) == (ssize_t)sizeof n ? 0 : 1);
    }
    close(fd[1]);
    int64_t n = -1;
    const ssize_t got = read(fd[0], &n, sizeof n);
    close(fd[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return got == (ssize_t)sizeof n && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? n : -1;
}

/* ARCHITECTURE decision 4 (the graph is built once, nothing is created in the step) for the oneDNN primitives: a
 * model's training steps, in every precision, kernel set and engine that uses oneDNN, fused and unfused, with and
 * without telemetry, on 1 and 2 threads, create none; they were all created when the graph was built. */
START_TEST(test_step_creates_no_primitive) {
    static const char *const models[3] = {"mlp", "lenet5", "cnn"};
    static const struct {
        mpt_cpu_kernels kernels;
        mpt_cpu_engine engine;
    } sets[3] = {{MPT_CPU_KERNELS_EMULATE, MPT_CPU_ENGINE_ONEDNN},
                 {MPT_CPU_KERNELS_NATIVE, MPT_CPU_ENGINE_ONEDNN},
                 {MPT_CPU_KERNELS_NATIVE, MPT_CPU_ENGINE_OPENBLAS}}; /* native bf16 runs on oneDNN either way */
    static const struct {
        int fuse, telemetry, threads;
    } variants[4] = {{1, 0, 1}, {0, 0, 1}, {1, 1, 1}, {1, 0, 2}};
    char why[256], failed[2048] = "";
    size_t used = 0;
    int n_cases = 0, n_failed = 0;
    if (!mpt_onednn_available()) {
        printf("test_step_creates_no_primitive: skipped, this build has no oneDNN (every GEMM runs on OpenBLAS)\n");
        return;
    }
    const int native = mpt_cpu_native_available(why, sizeof why);
    if (!native) printf("test_step_creates_no_primitive: the native kernel set is not tested here: %s\n", why);
    for (int si = 0; si < 3; si++) {
        if (sets[si].kernels == MPT_CPU_KERNELS_NATIVE && !native) continue;
        for (int p = 0; p < MPT_PRECISION_COUNT; p++)
            for (int v = 0; v < 4; v++) {
                /* native changes only the BF16 GEMMs: bf16 and the FP8 modes (whose other layers run in bf16) */
                if (sets[si].kernels == MPT_CPU_KERNELS_NATIVE && p < MPT_PRECISION_BF16) continue;
                const step_case c = {models[_i], (mpt_precision)p, sets[si].kernels, sets[si].engine,
                                     variants[v].fuse, variants[v].telemetry, variants[v].threads,
                                     MPT_ACCUM_MODEL_IEEE};
                const int64_t n = step_case_primitives(&c, n_cases++);
                if (n == 0) continue;
                n_failed++;
                if (used < sizeof failed - 1)
                    used += (size_t)snprintf(failed + used, sizeof failed - used,
                                             "\n  %s %s %s:%s fuse %d telemetry %d threads %d: %lld", c.model,
                                             mpt_precision_name(c.precision), mpt_cpu_kernels_name(c.kernels),
                                             c.engine == MPT_CPU_ENGINE_ONEDNN ? "onednn" : "openblas", c.fuse,
                                             c.telemetry, c.threads, (long long)n);
                if (n < 0 && used < sizeof failed - 1)
                    used += (size_t)snprintf(failed + used, sizeof failed - used, " (aborted, see its message above)");
            }
    }
    EXPECT(n_failed == 0, "%s: %d of %d training runs created oneDNN primitives in their steps (after graph build):%s",
           models[_i], n_failed, n_cases, failed);
    printf("test_step_creates_no_primitive: %s: %d training runs, no primitive created after graph build\n", models[_i],
           n_cases);
}
END_TEST

/* Whether copies_run compares t: a master weight, working weight or optimizer state, not the optimizer's table of
 * tensor addresses (which differs between any two runs). */
static int copies_state_tensor(const mpt_tensor *t) {
    return !t->view_of && (t->mem == MPT_MEM_MASTER || t->mem == MPT_MEM_WEIGHT || t->mem == MPT_MEM_OPTIM) &&
           strcmp(t->name, "amp.param_table") != 0;
}

/* The master weights, working weights and optimizer state after three Adam steps of `model` in precision p on the
 * emulate kernel set, with the backend's operand copies (copies != 0) or without (be->gemm_copies cleared); in
 * *n_copies the linear nodes that hold operand copies. Returns the bytes, concatenated (length in *len). */
static unsigned char *copies_run(const char *model, mpt_precision p, int fuse, int telemetry, int copies, size_t *len,
                                 int *n_copies) {
    enum { B = 16, STEPS = 3 };
    ck_assert_int_eq(mpt_cpu_set_threads(1), 1);
    mpt_backend *be = backend_with(MPT_CPU_KERNELS_EMULATE, mpt_cpu_exec_default().engine);
    if (!copies) be->gemm_copies = NULL;
    const step_case c = {model, p, MPT_CPU_KERNELS_EMULATE, mpt_cpu_exec_default().engine, fuse, telemetry, 1,
                         MPT_ACCUM_MODEL_IEEE};
    mpt_graph *g = step_case_graph(be, &c, p, B);
    mpt_train_config cfg = mpt_train_config_default(p);
    cfg.optim = mpt_optim_hparams_default(MPT_OPTIM_ADAM);
    mpt_trainer *t = NULL;
    ck_assert_msg(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s: %s", model, mpt_last_error());
    if (telemetry)
        ck_assert_msg(mpt_telemetry_create(t, 1, step_case_graph(be, &c, MPT_PRECISION_FP32, B)) == MPT_OK, "%s",
                      mpt_last_error());
    *n_copies = 0;
    for (int i = 0; i < t->g->n_nodes; i++) *n_copies += t->g->nodes[i]->copy_x != NULL;
    tests_rng r = {0x2511};
    for (int step = 0; step < STEPS; step++) { /* new inputs every step: a copy of x kept from a step before shows */
        mpt_tensor *x = t->g->input;
        for (int64_t k = 0; k < mpt_tensor_numel(x); k++)
            mpt_store_f32(x->data, x->dtype, k, (float)tests_uniform(&r, -1, 1));
        int32_t *labels = t->g->labels->data;
        for (int i = 0; i < B; i++) labels[i] = tests_int(&r, 0, MPT_MODEL_CLASSES - 1);
        mpt_trainer_step(t);
    }
    size_t total = 0;
    for (int i = 0; i < t->g->n_tensors; i++)
        if (copies_state_tensor(t->g->tensors[i])) total += mpt_tensor_nbytes(t->g->tensors[i]);
    unsigned char *out = malloc(total);
    ck_assert_ptr_nonnull(out);
    size_t off = 0;
    for (int i = 0; i < t->g->n_tensors; i++) {
        const mpt_tensor *x = t->g->tensors[i];
        if (!copies_state_tensor(x)) continue;
        memcpy(out + off, x->data, mpt_tensor_nbytes(x));
        off += mpt_tensor_nbytes(x);
    }
    mpt_trainer_free(&t);
    mpt_backend_free(&be);
    *len = total;
    return out;
}

START_TEST(test_operand_copies_same_bits) {
    static const char *const models[3] = {"mlp", "lenet5", "cnn"};
    /* fp8 and mxfp8: the layers whose shapes do not qualify for FP8 GEMMs run in emulated bf16, with copies */
    static const mpt_precision precs[5] = {MPT_PRECISION_TF32, MPT_PRECISION_FP16, MPT_PRECISION_BF16,
                                           MPT_PRECISION_FP8, MPT_PRECISION_MXFP8};
    static const struct {
        int fuse, telemetry;
    } variants[3] = {{1, 0}, {0, 0}, {1, 1}};
    int runs = 0;
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 5; p++)
            for (int v = 0; v < 3; v++, runs++) {
                size_t la = 0, lb = 0;
                int ca = 0, cb = 0;
                const int fuse = variants[v].fuse, tel = variants[v].telemetry;
                unsigned char *a = copies_run(models[m], precs[p], fuse, tel, 1, &la, &ca);
                unsigned char *b = copies_run(models[m], precs[p], fuse, tel, 0, &lb, &cb);
                EXPECT(ca > 0 && cb == 0, "%s %s: %d linear nodes with operand copies on the CPU backend, %d without "
                       "gemm_copies (expected some, and none)", models[m], mpt_precision_name(precs[p]), ca, cb);
                EXPECT(la == lb && la > 0, "%s: %zu and %zu bytes of state", models[m], la, lb);
                size_t first = 0;
                while (first < la && a[first] == b[first]) first++;
                EXPECT(first == la, "%s %s fuse %d telemetry %d: the state after 3 steps differs with operand copies "
                       "(first at byte %zu of %zu)", models[m], mpt_precision_name(precs[p]), variants[v].fuse,
                       variants[v].telemetry, first, la);
                free(a);
                free(b);
            }
    printf("test_operand_copies_same_bits: %d trainings (mlp, lenet5, cnn x tf32, fp16, bf16, fp8, mxfp8 x fused, "
           "unfused, telemetry) bit-identical with and without operand copies\n", runs);
}
END_TEST

/* The native kernel set, or a note that it cannot be tested here. */
static int native_or_skip(const char *test) {
    char why[256];
    if (mpt_cpu_native_available(why, sizeof why)) return 1;
    printf("%s: skipped, the native kernel set is unavailable here: %s\n", test, why);
    return 0;
}

/* 3: native against emulate on the models' GEMM shapes, F32 and BF16 outputs. */
START_TEST(test_native_within_bound_of_emulate_gemm) {
    if (!native_or_skip("test_native_within_bound_of_emulate_gemm")) return;
    mpt_backend *em = mpt_backend_cpu_create(), *na = backend_with(MPT_CPU_KERNELS_NATIVE, MPT_CPU_ENGINE_ONEDNN);
    ck_assert_str_eq(mpt_backend_kernels_of(na, 0, MPT_MATH_BF16), "native:onednn");
    ck_assert_str_eq(mpt_backend_kernels_of(na, 0, MPT_MATH_F16), "emulate:onednn"); /* no FP16 units: emulated */
    tests_rng r = {0x2504};
    int64_t differ = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        const shape *s = &SHAPES[i];
        void *A = fill(&r, MPT_DTYPE_BF16, s->M * s->K), *B = fill(&r, MPT_DTYPE_BF16, s->K * s->N);
        double *T = abs_products(s, MPT_MATH_BF16, A, B);
        for (int o = 0; o < 2; o++) {
            const mpt_dtype ct = o == 0 ? MPT_DTYPE_F32 : MPT_DTYPE_BF16;
            void *C1 = malloc((size_t)(s->M * s->N) * 4), *C2 = malloc((size_t)(s->M * s->N) * 4);
            mpt_gemm_args g = gemm_of(s, MPT_MATH_BF16, A, B, C1, ct);
            run_gemm(na, &g);
            g.C = C2;
            run_gemm(em, &g);
            expect_within("native vs emulate", s, ct, C1, C2, T, &differ);
            free(C1);
            free(C2);
        }
        free(T);
        free(A);
        free(B);
    }
    printf("native vs emulate, bf16 GEMMs of the mlp and lenet5: %lld elements differ, all within the bound\n",
           (long long)differ);
    mpt_backend_free(&em);
    mpt_backend_free(&na);
}
END_TEST

/* Sum over the reduction of one conv output element of |terms|, for the three passes (naive loops). */
static void conv_abs_sums(const mpt_conv_shape *s, const void *x, const void *w, const void *dy, double *Ty,
                          double *Tdx, double *Tdw) {
    const mpt_dtype t = MPT_DTYPE_BF16;
    memset(Ty, 0, sizeof(double) * (size_t)s->N * s->K * s->P * s->Q);
    memset(Tdx, 0, sizeof(double) * (size_t)s->N * s->C * s->H * s->W);
    memset(Tdw, 0, sizeof(double) * (size_t)s->K * s->C * s->R * s->S);
    for (int n = 0; n < s->N; n++)
        for (int k = 0; k < s->K; k++)
            for (int p = 0; p < s->P; p++)
                for (int q = 0; q < s->Q; q++)
                    for (int c = 0; c < s->C; c++)
                        for (int r = 0; r < s->R; r++)
                            for (int u = 0; u < s->S; u++) {
                                const int h = p * s->stride_h - s->pad_h + r, ww = q * s->stride_w - s->pad_w + u;
                                if (h < 0 || h >= s->H || ww < 0 || ww >= s->W) continue;
                                const int64_t xi = (((int64_t)n * s->C + c) * s->H + h) * s->W + ww;
                                const int64_t wi = (((int64_t)k * s->C + c) * s->R + r) * s->S + u;
                                const int64_t yi = (((int64_t)n * s->K + k) * s->P + p) * s->Q + q;
                                const double xv = fabs(mpt_load_f32(x, t, xi)), wv = fabs(mpt_load_f32(w, t, wi));
                                const double gv = fabs(mpt_load_f32(dy, t, yi));
                                Ty[yi] += xv * wv;
                                Tdx[xi] += gv * wv;
                                Tdw[wi] += gv * xv;
                            }
}

static void expect_conv_within(const char *what, int64_t n, int64_t L, mpt_dtype t, const void *a, const void *b,
                               const double *T, int64_t *differ) {
    const double uo = t == MPT_DTYPE_BF16 ? U_BF16 : 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = mpt_load_f32(a, t, i), y = mpt_load_f32(b, t, i);
        const double e32 = 2.0 * 2.0 * (double)L * U32 * T[i];
        const double bound = e32 * (1.0 + 2.0 * uo) + uo * (fabs(x) + fabs(y));
        EXPECT(fabs(x - y) <= bound, "%s: element %lld: native %.9g, emulate %.9g, |diff| %.3g > bound %.3g", what,
               (long long)i, x, y, fabs(x - y), bound);
        *differ += x != y;
    }
}

/* 3: native against emulate on lenet5's convolutions (batch 8), all three passes. */
START_TEST(test_native_within_bound_of_emulate_conv) {
    if (!native_or_skip("test_native_within_bound_of_emulate_conv")) return;
    /* conv1: 1 -> 6 channels, 5x5, pad 2 on 28x28; conv2: 6 -> 16, 5x5 on 14x14 */
    const mpt_conv_shape shapes[2] = {{8, 1, 28, 28, 6, 5, 5, 2, 2, 1, 1, 28, 28}, {8, 6, 14, 14, 16, 5, 5, 0, 0, 1, 1, 10, 10}};
    mpt_backend *em = mpt_backend_cpu_create(), *na = backend_with(MPT_CPU_KERNELS_NATIVE, MPT_CPU_ENGINE_ONEDNN);
    tests_rng r = {0x2505};
    int64_t differ = 0;
    for (int i = 0; i < 2; i++) {
        const mpt_conv_shape *s = &shapes[i];
        const int64_t nx = (int64_t)s->N * s->C * s->H * s->W, nw = (int64_t)s->K * s->C * s->R * s->S;
        const int64_t ny = (int64_t)s->N * s->K * s->P * s->Q;
        void *x = fill(&r, MPT_DTYPE_BF16, nx), *w = fill(&r, MPT_DTYPE_BF16, nw), *dy = fill(&r, MPT_DTYPE_BF16, ny);
        double *Ty = malloc(sizeof(double) * (size_t)ny), *Tdx = malloc(sizeof(double) * (size_t)nx);
        double *Tdw = malloc(sizeof(double) * (size_t)nw);
        conv_abs_sums(s, x, w, dy, Ty, Tdx, Tdw);
        void *out[2][3];
        mpt_backend *bes[2] = {na, em};
        for (int b = 0; b < 2; b++) {
            mpt_conv_args a = {0};
            a.s = *s;
            a.math = MPT_MATH_BF16;
            a.dtype = MPT_DTYPE_BF16;
            a.x = x;
            a.w = w;
            a.dy = dy;
            a.y = out[b][0] = malloc((size_t)ny * 2);
            a.dx = out[b][1] = malloc((size_t)nx * 2);
            a.dw = out[b][2] = malloc((size_t)nw * 4);
            a.tag = "test";
            ck_assert_int_eq(mpt_backend_reserve_workspace(bes[b], bes[b]->conv2d_workspace(bes[b], &a)), MPT_OK);
            bes[b]->conv2d_forward(bes[b], &a);
            bes[b]->conv2d_backward_data(bes[b], &a);
            bes[b]->conv2d_backward_filter(bes[b], &a);
        }
        char what[64];
        snprintf(what, sizeof what, "conv%d forward", i + 1);
        expect_conv_within(what, ny, (int64_t)s->C * s->R * s->S, MPT_DTYPE_BF16, out[0][0], out[1][0], Ty, &differ);
        snprintf(what, sizeof what, "conv%d backward-data", i + 1);
        expect_conv_within(what, nx, (int64_t)s->K * s->R * s->S, MPT_DTYPE_BF16, out[0][1], out[1][1], Tdx, &differ);
        snprintf(what, sizeof what, "conv%d backward-filter", i + 1);
        expect_conv_within(what, nw, (int64_t)s->N * s->P * s->Q, MPT_DTYPE_F32, out[0][2], out[1][2], Tdw, &differ);
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 3; k++) free(out[b][k]);
        free(x);
        free(w);
        free(dy);
        free(Ty);
        free(Tdx);
        free(Tdw);
    }
    printf("native vs emulate, lenet5 convolutions: %lld elements differ, all within the bound\n", (long long)differ);
    mpt_backend_free(&em);
    mpt_backend_free(&na);
}
END_TEST

/* 4: a 1x2 by 2x1 GEMM (padded to a 16x32 by 32x16 one, zeros elsewhere) on both kernel sets: C = a0*b0 + a1*b1. */
static void dot2(mpt_backend *be, float a0, float b0, float a1, float b1, float *out) {
    enum { M = 16, N = 16, K = 32 };
    uint16_t A[M * K] = {0}, B[K * N] = {0};
    float C[M * N];
    A[0] = mpt_f32_to_bf16(a0);
    A[1] = mpt_f32_to_bf16(a1);
    B[0] = mpt_f32_to_bf16(b0);
    B[N] = mpt_f32_to_bf16(b1);
    EXPECT(mpt_bf16_to_f32(A[0]) == a0 && mpt_bf16_to_f32(A[1]) == a1 && mpt_bf16_to_f32(B[0]) == b0 &&
               mpt_bf16_to_f32(B[N]) == b1, "test values must be exact in BF16");
    mpt_gemm_args g = {0};
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = A;
    g.B = B;
    g.a_dtype = g.b_dtype = MPT_DTYPE_BF16;
    g.C = C;
    g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.math = MPT_MATH_BF16;
    g.tag = "dot2";
    run_gemm(be, &g);
    *out = C[0];
}

START_TEST(test_native_subnormal_numerics) {
    if (!native_or_skip("test_native_subnormal_numerics")) return;
    mpt_backend *em = mpt_backend_cpu_create(), *na = backend_with(MPT_CPU_KERNELS_NATIVE, MPT_CPU_ENGINE_ONEDNN);
    float e, n;
    /* a BF16 subnormal operand (2^-127 < 2^-126, the smallest normal) times 2^100 */
    dot2(em, 0x1p-127f, 0x1p100f, 0.0f, 0.0f, &e);
    dot2(na, 0x1p-127f, 0x1p100f, 0.0f, 0.0f, &n);
    EXPECT(e == 0x1p-27f, "emulate: 2^-127 * 2^100 = %a, expected 2^-27 (BF16 subnormals are kept)", (double)e);
    EXPECT(n == 0.0f, "native: 2^-127 * 2^100 = %a, expected 0 (VDPBF16PS reads denormal inputs as zero)", (double)n);
    /* normal operands whose product is FP32-denormal: 2^-70 * 2^-70 = 2^-140 */
    dot2(em, 0x1p-70f, 0x1p-70f, 0.0f, 0.0f, &e);
    dot2(na, 0x1p-70f, 0x1p-70f, 0.0f, 0.0f, &n);
    EXPECT(e == 0x1p-140f, "emulate: 2^-70 * 2^-70 = %a, expected 2^-140 (an FP32 denormal)", (double)e);
    EXPECT(n == 0.0f, "native: 2^-70 * 2^-70 = %a, expected 0 (VDPBF16PS flushes denormal results)", (double)n);
    /* normal values agree exactly: 1.5 * 3 + 2^-8 * 2 */
    dot2(em, 1.5f, 3.0f, 0x1p-8f, 2.0f, &e);
    dot2(na, 1.5f, 3.0f, 0x1p-8f, 2.0f, &n);
    EXPECT(e == n && e == 4.5f + 0x1p-7f, "exact sums: emulate %a, native %a", (double)e, (double)n);
    mpt_backend_free(&em);
    mpt_backend_free(&na);
}
END_TEST

/* 5: native is refused with a reason where unavailable; no kernel set changes after a graph is built. */
START_TEST(test_set_kernels_rules) {
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert_int_eq(mpt_backend_cpu_kernels(be), MPT_CPU_KERNELS_EMULATE);
    char why[256] = "";
    mpt_status s = mpt_backend_cpu_set_kernels(be, MPT_CPU_KERNELS_NATIVE);
    if (mpt_cpu_native_available(why, sizeof why)) {
        ck_assert_int_eq(s, MPT_OK);
        ck_assert_int_eq(mpt_backend_cpu_kernels(be), MPT_CPU_KERNELS_NATIVE);
    } else {
        ck_assert_int_eq(s, MPT_ERR_DEVICE);
        EXPECT(strstr(mpt_last_error(), why) != NULL, "the refusal '%s' does not give the reason '%s'", mpt_last_error(),
               why);
        ck_assert_int_eq(mpt_backend_cpu_kernels(be), MPT_CPU_KERNELS_EMULATE);
    }
    mpt_graph *g = model_graph(be, "mlp", MPT_PRECISION_BF16, 4);
    const mpt_cpu_kernels now = mpt_backend_cpu_kernels(be);
    const mpt_cpu_kernels other = now == MPT_CPU_KERNELS_NATIVE ? MPT_CPU_KERNELS_EMULATE : MPT_CPU_KERNELS_NATIVE;
    s = mpt_backend_cpu_set_kernels(be, other);
    EXPECT(s != MPT_OK && mpt_backend_cpu_kernels(be) == now, "the kernel set changed after a graph was built");
    ck_assert_int_eq(mpt_backend_cpu_set_kernels(be, now), MPT_OK); /* asking for the current one is fine */
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

/* The outputs of every element-wise pass on `threads` OpenMP threads, concatenated into one buffer (*len bytes). */
static unsigned char *elementwise_outputs(int threads, size_t *len) {
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    openblas_set_num_threads(1);
    mpt_backend *be = backend_with(MPT_CPU_KERNELS_EMULATE, MPT_CPU_ENGINE_OPENBLAS);
    tests_rng r = {0x2506};
    enum { NP = 3, B = 128, D = 784 };
    const int64_t sizes[NP] = {401408, 262144, 5130};
    int64_t total = 0;
    for (int i = 0; i < NP; i++) total += sizes[i];
    /* outputs: masters, m, v (FP32), working (BF16); again for SGD (working BF16, momentum FP32); unscaled grads */
    size_t cap = (size_t)total * (4 * 3 + 2 + 2 + 4 + 4) + (size_t)B * D * 4 * 3 + (1 << 22);
    unsigned char *out = calloc(cap, 1), *o = out;
    ck_assert_ptr_nonnull(out);
#define TAKE(ptr, bytes)                                                                                              \
    do {                                                                                                              \
        ck_assert((size_t)(o - out) + (bytes) <= cap);                                                                \
        memcpy(o, (ptr), (bytes));                                                                                    \
        o += (bytes);                                                                                                 \
    } while (0)
    mpt_param_slot slots[NP];
    float *bufs[NP][4];
    uint16_t *work[NP];
    for (int i = 0; i < NP; i++) {
        for (int k = 0; k < 4; k++) {
            bufs[i][k] = malloc((size_t)sizes[i] * 4);
            for (int64_t e = 0; e < sizes[i]; e++) bufs[i][k][e] = (float)tests_uniform(&r, k == 3 ? 0.0 : -1.0, 1.0);
        }
        work[i] = malloc((size_t)sizes[i] * 2);
        slots[i] = (mpt_param_slot){.master = bufs[i][0], .grad = bufs[i][1], .m = bufs[i][2], .v = bufs[i][3],
                                    .working = work[i], .working_dtype = MPT_DTYPE_BF16, .n = sizes[i]};
    }
    bufs[1][1][777] = INFINITY; /* unscale: found_inf from the middle of a parameter */
    mpt_scaler_state st = {.scale = 256.0f, .inv_scale = 1.0f / 256.0f, .grad_mul = 1.0f};
    be->unscale_check_multi(be, slots, NP, total, &st);
    EXPECT(st.found_inf == 1.0f, "%d thread(s): unscale missed the inf", threads);
    bufs[1][1][777] = 0.5f;
    const float zero = 0.0f, lr = 1e-3f;
    const int32_t step = 3;
    const int64_t iteration = 2;
    mpt_optim_multi_args oa = {.h = {.kind = MPT_OPTIM_ADAM, .lr = lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
                               .slots = slots, .count = NP, .numel = total, .state_dtype = MPT_DTYPE_F32,
                               .found_inf = &zero, .step = &step, .lr = &lr, .iteration = &iteration};
    be->optim_step_multi(be, &oa);
    for (int i = 0; i < NP; i++) {
        for (int k = 0; k < 4; k++) TAKE(bufs[i][k], (size_t)sizes[i] * 4);
        TAKE(work[i], (size_t)sizes[i] * 2);
        slots[i].master = NULL; /* SGD with momentum on the BF16 weights, stochastic rounding */
        slots[i].v = NULL;
    }
    oa.h = (mpt_optim_hparams){.kind = MPT_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f};
    oa.stochastic = 1;
    oa.sr_seed = 11;
    be->optim_step_multi(be, &oa);
    for (int i = 0; i < NP; i++) {
        TAKE(work[i], (size_t)sizes[i] * 2);
        TAKE(bufs[i][2], (size_t)sizes[i] * 4);
    }
    /* ReLU forward and backward, F32 and BF16 */
    const int64_t n = 3 * MPT_PAR_MIN + 5;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *dx = malloc((size_t)n * 4);
    for (int64_t e = 0; e < n; e++) x[e] = (float)tests_uniform(&r, -1.0, 1.0);
    be->relu_forward(be, y, x, MPT_DTYPE_F32, n);
    be->relu_backward(be, dx, x, y, MPT_DTYPE_F32, n, 0);
    TAKE(y, (size_t)n * 4);
    TAKE(dx, (size_t)n * 4);
    be->cast(be, x, MPT_DTYPE_BF16, y, MPT_DTYPE_F32, n);
    be->relu_forward(be, dx, x, MPT_DTYPE_BF16, n);
    be->relu_backward(be, y, x, dx, MPT_DTYPE_BF16, n, 1);
    TAKE(dx, (size_t)n * 2);
    TAKE(y, (size_t)n * 2);
    /* the batch gather */
    uint8_t *images = malloc((size_t)B * D), labels8[B];
    int32_t idx[B], lab[B];
    for (int i = 0; i < B * D; i++) images[i] = (uint8_t)tests_int(&r, 0, 255);
    for (int i = 0; i < B; i++) {
        labels8[i] = (uint8_t)(i % 10);
        idx[i] = i == B - 1 ? -1 : (int32_t)((i * 37) % B);
    }
    be->gather_batch(be, x, MPT_DTYPE_F32, lab, images, labels8, idx, B, D, 0.25f, 2.0f);
    TAKE(x, (size_t)B * D * 4);
    /* an emulated bf16 GEMM with the fused ReLU epilogues: forward with the mask, then the data gradient through it */
    const shape fc = {"fc2", 0, 1, 128, 512, 512};
    uint16_t *A = fill(&r, MPT_DTYPE_BF16, fc.M * fc.K), *W = fill(&r, MPT_DTYPE_BF16, fc.N * fc.K);
    uint16_t *bias = fill(&r, MPT_DTYPE_BF16, fc.N), *C = malloc((size_t)(fc.M * fc.N) * 2);
    uint8_t *aux = calloc(mpt_relu_aux_bytes(fc.M, fc.N), 1);
    float *bg = malloc((size_t)fc.N * 4);
    mpt_gemm_args g = gemm_of(&fc, MPT_MATH_BF16, A, W, C, MPT_DTYPE_BF16);
    g.bias = bias;
    g.bias_dtype = MPT_DTYPE_BF16;
    g.aux = aux;
    g.epilogue = MPT_EPILOGUE_RELU_AUX_BIAS;
    run_gemm(be, &g);
    TAKE(C, (size_t)(fc.M * fc.N) * 2);
    TAKE(aux, mpt_relu_aux_bytes(fc.M, fc.N));
    const shape dg = {"fc3 dgrad", 0, 0, 128, 512, 512};
    g = gemm_of(&dg, MPT_MATH_BF16, A, W, C, MPT_DTYPE_BF16);
    g.aux = aux;
    g.bias_grad = bg;
    g.epilogue = MPT_EPILOGUE_DRELU_BGRAD;
    run_gemm(be, &g);
    TAKE(C, (size_t)(fc.M * fc.N) * 2);
    TAKE(bg, (size_t)fc.N * 4);
    /* lenet5's convolutions, all three passes, images on the threads (kernels/cpu/conv.c), on the default engine */
    mpt_backend *dflt = mpt_backend_cpu_create();
    const mpt_conv_shape cs[2] = {{40, 1, 28, 28, 6, 5, 5, 2, 2, 1, 1, 28, 28}, {40, 6, 14, 14, 16, 5, 5, 0, 0, 1, 1, 10, 10}};
    for (int k = 0; k < 2; k++) {
        const mpt_conv_shape *sh = &cs[k];
        const int64_t nx = (int64_t)sh->N * sh->C * sh->H * sh->W, nw = (int64_t)sh->K * sh->C * sh->R * sh->S;
        const int64_t ny = (int64_t)sh->N * sh->K * sh->P * sh->Q;
        mpt_conv_args ca = {0};
        ca.s = *sh;
        ca.math = MPT_MATH_BF16;
        ca.dtype = MPT_DTYPE_BF16;
        ca.x = fill(&r, MPT_DTYPE_BF16, nx);
        ca.w = fill(&r, MPT_DTYPE_BF16, nw);
        ca.bias = fill(&r, MPT_DTYPE_BF16, sh->K);
        ca.dy = fill(&r, MPT_DTYPE_BF16, ny);
        ca.y = malloc((size_t)ny * 2);
        ca.dx = malloc((size_t)nx * 2);
        ca.dw = malloc((size_t)nw * 4);
        ca.db = malloc((size_t)sh->K * 4);
        ca.tag = "conv";
        ck_assert_int_eq(mpt_backend_reserve_workspace(dflt, dflt->conv2d_workspace(dflt, &ca)), MPT_OK);
        for (int acc = 0; acc < 2; acc++) { /* overwrite, then accumulate into it */
            ca.accumulate = acc;
            dflt->conv2d_forward(dflt, &ca);
            dflt->conv2d_backward_data(dflt, &ca);
            dflt->conv2d_backward_filter(dflt, &ca);
        }
        TAKE(ca.y, (size_t)ny * 2);
        TAKE(ca.dx, (size_t)nx * 2);
        TAKE(ca.dw, (size_t)nw * 4);
        TAKE(ca.db, (size_t)sh->K * 4);
        free((void *)ca.x);
        free((void *)ca.w);
        free((void *)ca.bias);
        free((void *)ca.dy);
        free(ca.y);
        free(ca.dx);
        free(ca.dw);
        free(ca.db);
    }
    mpt_backend_free(&dflt);
#undef TAKE
    for (int i = 0; i < NP; i++) {
        for (int k = 0; k < 4; k++) free(bufs[i][k]);
        free(work[i]);
    }
    free(x);
    free(y);
    free(dx);
    free(images);
    free(A);
    free(W);
    free(bias);
    free(C);
    free(aux);
    free(bg);
    mpt_backend_free(&be);
    *len = (size_t)(o - out);
    return out;
}

START_TEST(test_elementwise_same_bits_any_threads) {
    size_t l1 = 0, l2 = 0;
    unsigned char *one = elementwise_outputs(1, &l1), *two = elementwise_outputs(2, &l2);
    ck_assert_uint_eq(l1, l2);
    size_t first = l1;
    for (size_t i = 0; i < l1 && first == l1; i++)
        if (one[i] != two[i]) first = i;
    EXPECT(first == l1, "the element-wise passes on 2 threads differ from 1 thread at byte %zu of %zu", first, l1);
#ifndef _OPENMP
    printf("test_elementwise_same_bits_any_threads: this build has no OpenMP: every pass runs on one thread\n");
#endif
    free(one);
    free(two);
}
END_TEST

/* ---- 8. summation models --------------------------------------------------------------------------------------- */

static mpt_tc_format tc_format_of(mpt_math m) {
    return m == MPT_MATH_F16 ? MPT_TC_FORMAT_FP16 : m == MPT_MATH_BF16 ? MPT_TC_FORMAT_BF16 : MPT_TC_FORMAT_TF32;
}

/* The FP32 operand values of n stored elements (TF32-rounded for TF32 math, widened exactly otherwise). */
static float *operand_values(const void *p, mpt_math m, int64_t n) {
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)emulated(p, m, i);
    return v;
}

/* What the backend's GEMM g must write into its C under model `model` (C_old: C before the call, of g->c_dtype):
 * acc = mpt_tc_gemm over the FP32 operand values from +0, then v = alpha * acc (+ beta * C_old) (+ bias[n]) (ReLU), each
 * operation in FP32 with round to nearest, and v rounded once to C's dtype. Into want (of g->c_dtype). */
static void modelled_expected(mpt_accum_model model, const mpt_gemm_args *g, const void *C_old, void *want) {
    mpt_tc_op op;
    const mpt_tc_format f = tc_format_of(g->math);
    ck_assert_int_eq(mpt_tc_op_init(&op, (mpt_tc_model)model, f, f, MPT_TC_OUT_FP32), 0);
    float *A = operand_values(g->A, g->math, g->M * g->K), *Bv = operand_values(g->B, g->math, g->K * g->N);
    float *acc = malloc((size_t)(g->M * g->N) * sizeof *acc);
    const size_t wsb = mpt_tc_gemm_ws_bytes(&op, g->M, g->N, g->K);
    void *ws = malloc(wsb > 0 ? wsb : 1);
    ck_assert(acc && ws);
    const mpt_tc_gemm_args t = {.trans_a = g->trans_a, .trans_b = g->trans_b, .M = g->M, .N = g->N, .K = g->K,
                                .A = A, .B = Bv, .C0 = NULL, .D = acc};
    mpt_tc_gemm(&op, &t, ws, wsb);
    for (int64_t m = 0; m < g->M; m++)
        for (int64_t n = 0; n < g->N; n++) {
            const int64_t i = m * g->N + n;
            float v = g->alpha * acc[i];
            if (g->beta != 0.0f) v = v + g->beta * mpt_load_f32(C_old, g->c_dtype, i);
            if (mpt_epilogue_adds_bias(g->epilogue)) v = v + mpt_load_f32(g->bias, g->bias_dtype, n);
            if (g->epilogue == MPT_EPILOGUE_RELU_BIAS) v = v > 0.0f ? v : 0.0f;
            mpt_store_f32(want, g->c_dtype, i, v);
        }
    free(A);
    free(Bv);
    free(acc);
    free(ws);
}

/* Elements whose bits differ between a and b (n elements of dtype t). */
static int64_t bits_differ(const void *a, const void *b, mpt_dtype t, int64_t n) {
    const size_t es = mpt_dtype_size(t);
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp((const char *)a + (size_t)i * es, (const char *)b + (size_t)i * es, es) != 0;
    return d;
}

START_TEST(test_accum_model_gemm) {
    /* K below, at and above the blocks (4, 8, 16), transposes, and two of the models' real shapes */
    static const shape shapes[] = {
        {"7x5x37", 0, 0, 7, 5, 37},   {"9x6x16 trans_a", 1, 0, 9, 6, 16}, {"4x11x3 trans_b", 0, 1, 4, 11, 3},
        {"5x5x130 both", 1, 1, 5, 5, 130}, {"lenet5 conv2 forward", 0, 0, 16, 100, 150},
        {"mlp fc3 forward", 0, 1, 128, 10, 512},
    };
    enum { N_FORMS = 4 };
    tests_rng r = {0x3901};
    int64_t compared = 0, differ_ieee = 0, ieee_total = 0;
    mpt_backend *ieee = mpt_backend_cpu_create();
    for (int model = MPT_ACCUM_MODEL_V100; model < MPT_ACCUM_MODEL_COUNT; model++) {
        mpt_backend *be = mpt_backend_cpu_create();
        ck_assert_int_eq(mpt_backend_cpu_set_accum(be, (mpt_accum_model)model), MPT_OK);
        for (int mi = 0; mi < 3; mi++) {
            const mpt_math math = mi == 0 ? MPT_MATH_TF32 : mi == 1 ? MPT_MATH_F16 : MPT_MATH_BF16;
            if (!mpt_accum_model_covers((mpt_accum_model)model, math)) continue;
            const mpt_dtype od = operand_dtype(math);
            ck_assert_str_eq(mpt_backend_kernels_of(be, 0, math), model == MPT_ACCUM_MODEL_H100 ? "emulate:h100"
                                                                  : model == MPT_ACCUM_MODEL_A100 ? "emulate:a100"
                                                                  : mpt_backend_kernels_of(be, 0, math));
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                const shape *sh = &shapes[si];
                void *A = fill(&r, od, sh->M * sh->K), *B = fill(&r, od, sh->K * sh->N);
                void *bias = fill(&r, od, sh->N);
                for (int form = 0; form < N_FORMS; form++) {
                    /* 0: F32 C written; 1: F32 C accumulated (beta 1); 2: C in the compute dtype (F32 for TF32) with
                     * a bias; 3: F32 C, alpha 0.5, beta 0.25, bias and ReLU */
                    const mpt_dtype ct = form == 2 ? od : MPT_DTYPE_F32;
                    const int64_t nc = sh->M * sh->N;
                    void *C = fill(&r, ct, nc), *C_old = malloc((size_t)nc * 4), *want = malloc((size_t)nc * 4);
                    memcpy(C_old, C, (size_t)nc * mpt_dtype_size(ct));
                    mpt_gemm_args g = gemm_of(sh, math, A, B, C, ct);
                    g.beta = form == 1 ? 1.0f : form == 3 ? 0.25f : 0.0f;
                    g.alpha = form == 3 ? 0.5f : 1.0f;
                    g.epilogue = form == 2 ? MPT_EPILOGUE_BIAS : form == 3 ? MPT_EPILOGUE_RELU_BIAS : MPT_EPILOGUE_NONE;
                    g.bias = form >= 2 ? bias : NULL;
                    g.bias_dtype = od;
                    run_gemm(be, &g);
                    modelled_expected((mpt_accum_model)model, &g, C_old, want);
                    const int64_t d = bits_differ(C, want, ct, nc);
                    EXPECT(d == 0, "%s, %s, %s, form %d: %lld of %lld elements differ from mpt_tc_gemm + epilogue",
                           mpt_accum_model_name((mpt_accum_model)model), mpt_math_name(math), sh->what, form,
                           (long long)d, (long long)nc);
                    compared += nc;
                    if (form == 0 && sh->K >= 130) { /* the same GEMM on IEEE sums: the model must have changed bits */
                        memcpy(C, C_old, (size_t)nc * 4);
                        g.C = C;
                        run_gemm(ieee, &g);
                        differ_ieee += bits_differ(C, want, ct, nc);
                        ieee_total += nc;
                    }
                    free(C);
                    free(C_old);
                    free(want);
                }
                free(A);
                free(B);
                free(bias);
            }
        }
        mpt_backend_free(&be);
    }
    mpt_backend_free(&ieee);
    EXPECT(differ_ieee > 0, "no output of %lld differs from the IEEE sums: the models did not run", (long long)ieee_total);
    printf("test_accum_model_gemm: %lld outputs bit for bit as mpt_tc_gemm + the FP32 epilogue; %lld of %lld long-K "
           "outputs differ from the IEEE sums\n", (long long)compared, (long long)differ_ieee, (long long)ieee_total);
}
END_TEST

/* A linear layer y = x W^T + b under `model` in precision p: forward, then backward with a random output gradient:
 * y, dx and dW bit for bit against mpt_tc_gemm on the stored operands (the bias gradient is a plain FP32 column sum,
 * no GEMM: not compared). */
static void accum_linear_case(mpt_accum_model model, mpt_precision p, int B, int in, int out, tests_rng *r) {
    const mpt_policy pol = mpt_policy_make_explicit(p, p == MPT_PRECISION_TF32, p == MPT_PRECISION_TF32);
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert_int_eq(mpt_backend_cpu_set_accum(be, model), MPT_OK);
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    const mpt_dtype dt = mpt_policy_act_dtype(&pol);
    const int64_t xs[2] = {B, in};
    mpt_tensor *x = mpt_graph_tensor(g, "x", dt, MPT_MEM_ACT, 2, xs);
    mpt_graph_grad(g, x);
    mpt_tensor *y = mpt_linear(g, x, out, "fc");
    const mpt_math math = g->nodes[g->n_nodes - 1]->math;
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    mpt_tensor *w = mpt_graph_find(g, "fc.weight"), *b = mpt_graph_find(g, "fc.bias");
    ck_assert(w && b && y->grad && w->grad && x->grad);
    const mpt_tensor *fill_t[4] = {x, w, b, y->grad};
    for (int k = 0; k < 4; k++)
        for (int64_t i = 0; i < mpt_tensor_numel(fill_t[k]); i++)
            mpt_store_f32(fill_t[k]->data, fill_t[k]->dtype, i, (float)tests_uniform(r, -1, 1));
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    /* the layer's three GEMMs as mpt_gemm_args (what they read and how), their expected results from the model */
    mpt_gemm_args fwd = {.trans_b = 1, .M = B, .N = out, .K = in, .A = x->data, .B = w->data, .a_dtype = dt,
                         .b_dtype = dt, .c_dtype = dt, .bias = b->data, .bias_dtype = dt, .alpha = 1.0f,
                         .math = math, .epilogue = MPT_EPILOGUE_BIAS};
    mpt_gemm_args dgrad = {.M = B, .N = in, .K = out, .A = y->grad->data, .B = w->data, .a_dtype = dt, .b_dtype = dt,
                           .c_dtype = dt, .alpha = 1.0f, .math = math};
    mpt_gemm_args wgrad = {.trans_a = 1, .M = out, .N = in, .K = B, .A = y->grad->data, .B = x->data, .a_dtype = dt,
                           .b_dtype = dt, .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .math = math};
    const struct {
        const char *what;
        const mpt_gemm_args *g;
        const mpt_tensor *got;
    } outs[3] = {{"y", &fwd, y}, {"dx", &dgrad, x->grad}, {"dW", &wgrad, w->grad}};
    for (int k = 0; k < 3; k++) {
        const int64_t n = mpt_tensor_numel(outs[k].got);
        ck_assert_int_eq(n, outs[k].g->M * outs[k].g->N);
        void *want = malloc((size_t)n * 4);
        modelled_expected(model, outs[k].g, NULL, want);
        const int64_t d = bits_differ(outs[k].got->data, want, outs[k].got->dtype, n);
        EXPECT(d == 0, "linear %dx%d, batch %d, %s, --accum-model %s: %s differs from mpt_tc_gemm in %lld of %lld "
               "elements", in, out, B, mpt_precision_name(p), mpt_accum_model_name(model), outs[k].what,
               (long long)d, (long long)n);
        free(want);
    }
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

START_TEST(test_accum_model_linear_layer) {
    tests_rng r = {0x3902};
    static const mpt_precision precs[3] = {MPT_PRECISION_TF32, MPT_PRECISION_FP16, MPT_PRECISION_BF16};
    static const mpt_accum_model models[2] = {MPT_ACCUM_MODEL_H100, MPT_ACCUM_MODEL_A100};
    for (int p = 0; p < 3; p++)
        for (int m = 0; m < 2; m++) {
            accum_linear_case(models[m], precs[p], 5, 37, 9, &r);
            accum_linear_case(models[m], precs[p], 16, 257, 33, &r);
        }
    accum_linear_case(MPT_ACCUM_MODEL_V100, MPT_PRECISION_FP16, 16, 257, 33, &r);
}
END_TEST

START_TEST(test_set_accum_rules) {
    for (int m = 0; m < MPT_ACCUM_MODEL_COUNT; m++) { /* the names are the models' of tc_accum, and parse back */
        mpt_accum_model back = MPT_ACCUM_MODEL_COUNT;
        ck_assert_str_eq(mpt_accum_model_name((mpt_accum_model)m), mpt_tc_model_name((mpt_tc_model)m));
        ck_assert_int_eq(mpt_accum_model_parse(mpt_accum_model_name((mpt_accum_model)m), &back), 0);
        ck_assert_int_eq(back, m);
    }
    mpt_accum_model out = MPT_ACCUM_MODEL_A100;
    ck_assert_int_eq(mpt_accum_model_parse("H100", &out), -1); /* exact names, as every option value */
    ck_assert_int_eq(out, MPT_ACCUM_MODEL_A100);
    ck_assert_str_eq(mpt_accum_model_gpus(MPT_ACCUM_MODEL_H100), "H100, H200");
    /* V100's Tensor Cores take FP16 only; a model leaves FP32 and FP8 GEMMs alone */
    ck_assert(!mpt_accum_model_covers(MPT_ACCUM_MODEL_V100, MPT_MATH_BF16));
    ck_assert(!mpt_accum_model_covers(MPT_ACCUM_MODEL_V100, MPT_MATH_TF32));
    ck_assert(mpt_accum_model_covers(MPT_ACCUM_MODEL_V100, MPT_MATH_F16));
    ck_assert(mpt_accum_model_covers(MPT_ACCUM_MODEL_V100, MPT_MATH_FP32));
    ck_assert(mpt_accum_model_covers(MPT_ACCUM_MODEL_B200, MPT_MATH_TF32));
    /* another backend (a table that says CUDA; nothing of it is called): its hardware sums, no model is taken */
    mpt_backend gpu = {.name = "cuda", .device = MPT_DEVICE_CUDA};
    ck_assert_int_eq(mpt_backend_cpu_set_accum(&gpu, MPT_ACCUM_MODEL_H100), MPT_ERR_ARG);
    EXPECT(strstr(mpt_last_error(), "the GPU's Tensor Cores sum for themselves") != NULL, "%s", mpt_last_error());
    ck_assert_int_eq(mpt_backend_cpu_accum(&gpu), MPT_ACCUM_MODEL_IEEE);
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert_int_eq(mpt_backend_cpu_accum(be), MPT_ACCUM_MODEL_IEEE);
    ck_assert_int_eq(mpt_backend_cpu_set_accum(be, MPT_ACCUM_MODEL_COUNT), MPT_ERR_ARG);
    ck_assert_int_eq(mpt_backend_cpu_set_accum(be, MPT_ACCUM_MODEL_H100), MPT_OK);
    ck_assert_int_eq(mpt_backend_cpu_accum(be), MPT_ACCUM_MODEL_H100);
    ck_assert_str_eq(mpt_backend_kernels_of(be, 1, MPT_MATH_BF16), "emulate:h100");
    EXPECT(strcmp(mpt_backend_kernels_of(be, 0, MPT_MATH_FP32), "emulate:h100") != 0 &&
               strcmp(mpt_backend_kernels_of(be, 0, MPT_MATH_FP8), "emulate:h100") != 0,
           "FP32 and FP8 GEMMs are not summed by the model");
    /* native under a model: refused, whatever the CPU (the model excludes it) */
    ck_assert_int_eq(mpt_backend_cpu_set_kernels(be, MPT_CPU_KERNELS_NATIVE), MPT_ERR_ARG);
    EXPECT(strstr(mpt_last_error(), "--accum-model h100") != NULL, "%s", mpt_last_error());
    ck_assert_int_eq(mpt_backend_cpu_kernels(be), MPT_CPU_KERNELS_EMULATE);
    mpt_graph *g = model_graph(be, "mlp", MPT_PRECISION_BF16, 4);
    ck_assert_int_eq(mpt_backend_cpu_set_accum(be, MPT_ACCUM_MODEL_A100), MPT_ERR_ARG); /* after a graph */
    ck_assert_int_eq(mpt_backend_cpu_accum(be), MPT_ACCUM_MODEL_H100);
    ck_assert_int_eq(mpt_backend_cpu_set_accum(be, MPT_ACCUM_MODEL_H100), MPT_OK); /* the current one is fine */
    mpt_graph_free(&g);
    mpt_backend_free(&be);
    char why[256];
    if (mpt_cpu_native_available(why, sizeof why)) { /* a model on the native kernel set: refused */
        be = backend_with(MPT_CPU_KERNELS_NATIVE, MPT_CPU_ENGINE_ONEDNN);
        ck_assert_int_eq(mpt_backend_cpu_set_accum(be, MPT_ACCUM_MODEL_B200), MPT_ERR_ARG);
        EXPECT(strstr(mpt_last_error(), "--cpu-kernels native") != NULL, "%s", mpt_last_error());
        ck_assert_int_eq(mpt_backend_cpu_set_accum(be, MPT_ACCUM_MODEL_IEEE), MPT_OK);
        mpt_backend_free(&be);
    }
}
END_TEST

/* ARCHITECTURE decision 4 under a summation model: each model's training steps under h100, in the precisions with
 * Tensor Core GEMMs, fused with telemetry and unfused on 2 threads, run without a workspace shortfall (an abort) and
 * create no oneDNN primitive after the graph build. */
START_TEST(test_accum_model_steps_planned) {
    static const char *const models[3] = {"mlp", "lenet5", "cnn"};
    static const mpt_precision precs[4] = {MPT_PRECISION_TF32, MPT_PRECISION_FP16, MPT_PRECISION_BF16,
                                           MPT_PRECISION_FP8};
    static const struct {
        int fuse, telemetry, threads;
    } variants[2] = {{1, 1, 1}, {0, 0, 2}};
    int n_cases = 0;
    for (int p = 0; p < 4; p++)
        for (int v = 0; v < 2; v++) {
            const step_case c = {models[_i], precs[p], MPT_CPU_KERNELS_EMULATE, mpt_cpu_exec_default().engine,
                                 variants[v].fuse, variants[v].telemetry, variants[v].threads, MPT_ACCUM_MODEL_H100};
            const int64_t n = step_case_primitives(&c, n_cases++);
            EXPECT(n == 0, "%s %s --accum-model h100, fuse %d telemetry %d threads %d: %lld primitives created in the "
                   "steps%s", c.model, mpt_precision_name(c.precision), c.fuse, c.telemetry, c.threads, (long long)n,
                   n < 0 ? " (aborted: see its message above)" : "");
        }
}
END_TEST

static Suite *cpu_kernels_suite(void) {
    Suite *s = suite_create("cpu_kernels");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_default_engine_is_onednn_when_built);
    tcase_add_test(tc, test_engine_within_fp32_bound_of_openblas);
    tcase_add_test(tc, test_engine_deterministic_per_thread_count);
    tcase_add_test(tc, test_native_within_bound_of_emulate_gemm);
    tcase_add_test(tc, test_native_within_bound_of_emulate_conv);
    tcase_add_test(tc, test_native_subnormal_numerics);
    tcase_add_test(tc, test_set_kernels_rules);
    tcase_add_test(tc, test_elementwise_same_bits_any_threads);
    suite_add_tcase(s, tc);
    TCase *steps = tcase_create("steps");
    tcase_set_timeout(steps, 300);
    tcase_add_loop_test(steps, test_step_creates_no_primitive, 0, 3); /* mlp, lenet5, cnn */
    suite_add_tcase(s, steps);
    TCase *accum = tcase_create("accum_model");
    tcase_set_timeout(accum, 300);
    tcase_add_test(accum, test_set_accum_rules);
    tcase_add_test(accum, test_accum_model_gemm);
    tcase_add_test(accum, test_accum_model_linear_layer);
    tcase_add_loop_test(accum, test_accum_model_steps_planned, 0, 3); /* mlp, lenet5, cnn */
    suite_add_tcase(s, accum);
    TCase *copies = tcase_create("copies");
    tcase_set_timeout(copies, 300);
    tcase_add_test(copies, test_operand_copies_same_bits);
    suite_add_tcase(s, copies);
    return s;
}

int main(void) { return mpt_test_run(cpu_kernels_suite()); }
