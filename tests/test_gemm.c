/*
 * tests/test_gemm.c - the CPU GEMM (kernels/cpu/gemm.c) against an FP64 reference, and proof that the
 * Tensor Core emulation is switched on.
 *
 * Every math mode (FP32, TF32, F16, BF16; and BF16 on the native kernel set) x trans_a x trans_b x output dtype (F32, F16, BF16) x epilogue
 * (NONE, BIAS, RELU_BIAS) x beta (0, nonzero), on random shapes with K up to 1000, is compared element by
 * element with C_ref = epi(alpha * sum_k a_ik b_kj + beta * C_old + bias_j), evaluated in double from the
 * *stored* operands (the F32 data for FP32/TF32, the F16/BF16 data for those modes).
 *
 * Bound per element (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1: a dot
 * product of length K in floating point has |error| <= gamma_K * sum|a b|, gamma_K = K*u/(1-K*u)):
 *   T       = sum_k |a_ik b_kj|                            (stored operands)
 *   op      = (2*u_tf32 + u_tf32^2) for TF32, else 0:      each F32 operand is rounded to TF32 (relative
 *             error <= u_tf32 = 2^-11), so |a*b - tf(a)*tf(b)| <= op*|a*b|; F16/BF16 operands are already
 *             stored in their format and FP32 uses them as they are
 *   e32     = 2*(K + 4)*u32 * (|alpha|*T*(1 + op) + |beta*C_old| + |bias|) + |alpha|*op*T
 *             (K terms summed in FP32 plus at most 4 epilogue operations: alpha*, beta*, +, +bias; the 2
 *             covers 1/(1 - K*u) and OpenBLAS's blocked partial sums; ReLU is 1-Lipschitz)
 *   bound   = e32 + u_out*(|C_ref| + e32) + eta_out       (one rounding to C's dtype: u_out = 2^-11 for F16,
 *             2^-8 for BF16, 0 for F32; eta_out = half the smallest subnormal of F16/BF16)
 *
 * Emulation check: on F32 inputs with full 24-bit mantissas, FP32 math must stay within the FP32 bound
 * (2*K*u32*T) while TF32 math and BF16/F16 math (F32 data rounded to BF16/F16 by the cast) must exceed it
 * on most elements: if the CPU backend silently ran plain FP32 for those modes, this test fails.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "harness.h"

/* Check's ck_assert* records every passing assertion through a syscall; call Check only on failure. */
#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

static const double U32 = 0x1p-24;

static mpt_dtype operand_dtype(mpt_math m) {
    return m == MPT_MATH_F16 ? MPT_DTYPE_F16 : m == MPT_MATH_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}
static double u_out(mpt_dtype t) { return t == MPT_DTYPE_F16 ? 0x1p-11 : t == MPT_DTYPE_BF16 ? 0x1p-8 : 0.0; }
static double eta_out(mpt_dtype t) { return t == MPT_DTYPE_F16 ? 0x1p-25 : t == MPT_DTYPE_BF16 ? 0x1p-134 : 0.0; }
static double op_err(mpt_math m) { return m == MPT_MATH_TF32 ? 2 * 0x1p-11 + 0x1p-22 : 0.0; }

static double ld(const void *p, mpt_dtype t, int64_t i) { return mpt_load_f32(p, t, i); }

static void *alloc_fill(tests_rng *r, mpt_dtype t, int64_t n, double lo, double hi) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * mpt_dtype_size(t));
    if (!p) ck_abort_msg("out of memory");
    for (int64_t i = 0; i < n; i++) mpt_store_f32(p, t, i, (float)tests_uniform(r, lo, hi));
    return p;
}

/* Runs the GEMM on a workspace of exactly mpt_cpu_gemm_workspace bytes followed by a guard zone that must
 * stay untouched (the size query is exact and the GEMM stays inside it). */
static void gemm_exact_ws(mpt_backend *be, const mpt_gemm_args *g) {
    enum { GUARD = 4096 };
    size_t need = be->gemm_workspace(be, g);
    unsigned char *buf = aligned_alloc(256, (need + GUARD + 255) & ~(size_t)255);
    if (!buf) ck_abort_msg("out of memory");
    memset(buf + need, 0xa5, GUARD);
    void *saved = be->workspace;
    size_t saved_bytes = be->workspace_bytes;
    be->workspace = buf;
    be->workspace_bytes = need;
    be->gemm(be, g);
    be->workspace = saved;
    be->workspace_bytes = saved_bytes;
    for (size_t i = 0; i < GUARD; i++) EXPECT(buf[need + i] == 0xa5, "gemm wrote past its workspace (byte %zu)", i);
    free(buf);
}

typedef struct gemm_case {
    mpt_math math;
    int ta, tb;
    mpt_dtype c_dtype, bias_dtype;
    mpt_epilogue ep;
    int64_t M, N, K;
    float alpha, beta;
} gemm_case;

static void run_case(mpt_backend *be, tests_rng *r, const gemm_case *c) {
    const mpt_dtype od = operand_dtype(c->math);
    const int64_t M = c->M, N = c->N, K = c->K;
    void *A = alloc_fill(r, od, M * K, -1.0, 1.0), *B = alloc_fill(r, od, K * N, -1.0, 1.0);
    void *C = alloc_fill(r, c->c_dtype, M * N, -2.0, 2.0);
    void *bias = alloc_fill(r, c->bias_dtype, N, -1.0, 1.0);
    void *C0 = malloc((size_t)(M * N) * mpt_dtype_size(c->c_dtype) + 1);
    if (c->beta == 0.0f) memset(C, 0xff, (size_t)(M * N) * mpt_dtype_size(c->c_dtype)); /* NaN: must not be read */
    memcpy(C0, C, (size_t)(M * N) * mpt_dtype_size(c->c_dtype));

    mpt_gemm_args g = {0};
    g.trans_a = c->ta;
    g.trans_b = c->tb;
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = A;
    g.a_dtype = od;
    g.B = B;
    g.b_dtype = od;
    g.C = C;
    g.c_dtype = c->c_dtype;
    g.bias = c->ep == MPT_EPILOGUE_NONE ? NULL : bias;
    g.bias_dtype = c->bias_dtype;
    g.alpha = c->alpha;
    g.beta = c->beta;
    g.math = c->math;
    g.epilogue = c->ep;
    g.tag = "test";
    gemm_exact_ws(be, &g);

    const double oe = op_err(c->math), uo = u_out(c->c_dtype), eta = eta_out(c->c_dtype);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0, T = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = ld(A, od, c->ta ? k * M + i : i * K + k);
                double b = ld(B, od, c->tb ? j * K + k : k * N + j);
                s += a * b;
                T += fabs(a * b);
            }
            double ref = (double)c->alpha * s, extra = 0.0;
            if (c->beta != 0.0f) {
                ref += (double)c->beta * ld(C0, c->c_dtype, i * N + j);
                extra += fabs((double)c->beta * ld(C0, c->c_dtype, i * N + j));
            }
            if (c->ep != MPT_EPILOGUE_NONE) {
                ref += ld(bias, c->bias_dtype, j);
                extra += fabs(ld(bias, c->bias_dtype, j));
            }
            if (c->ep == MPT_EPILOGUE_RELU_BIAS && ref < 0.0) ref = 0.0;
            double aa = fabs((double)c->alpha);
            double e32 = 2.0 * (double)(K + 4) * U32 * (aa * T * (1 + oe) + extra) + aa * oe * T;
            double bound = e32 + uo * (fabs(ref) + e32) + eta;
            double got = ld(C, c->c_dtype, i * N + j);
            EXPECT(fabs(got - ref) <= bound,
                   "math %s ta=%d tb=%d C %s bias %s epilogue %d alpha %g beta %g M=%lld N=%lld K=%lld: C[%lld,%lld] = "
                   "%.9g, reference %.9g, |diff| %.3g > bound %.3g",
                   mpt_math_name(c->math), c->ta, c->tb, mpt_dtype_name(c->c_dtype), mpt_dtype_name(c->bias_dtype),
                   (int)c->ep, (double)c->alpha, (double)c->beta, (long long)M, (long long)N, (long long)K,
                   (long long)i, (long long)j, got, ref, fabs(got - ref), bound);
        }
    free(A);
    free(B);
    free(C);
    free(C0);
    free(bias);
}

/* All combinations for one math mode, each on its own random shape, on a CPU backend with the given kernel set. */
static void run_math_on(mpt_math math, uint64_t seed, mpt_cpu_kernels kernels) {
    static const mpt_dtype outs[3] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};
    static const int64_t ks[] = {1, 2, 3, 17, 64, 129, 300, 1000};
    static const float alphas[] = {1.0f, 0.5f, -1.25f};
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert_int_eq(mpt_backend_cpu_set_kernels(be, kernels), MPT_OK);
    tests_rng r = {seed};
    int n = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int o = 0; o < 3; o++)
                for (int ep = 0; ep < 3; ep++)
                    for (int nb = 0; nb < 2; nb++, n++) {
                        gemm_case c = {0};
                        c.math = math;
                        c.ta = ta;
                        c.tb = tb;
                        c.c_dtype = outs[o];
                        c.bias_dtype = tests_int(&r, 0, 1) ? MPT_DTYPE_F32 : operand_dtype(math);
                        c.ep = (mpt_epilogue)ep;
                        c.K = ks[n % 8];
                        c.M = tests_int(&r, 1, c.K >= 300 ? 24 : 48);
                        c.N = tests_int(&r, 1, c.K >= 300 ? 24 : 48);
                        c.alpha = alphas[tests_int(&r, 0, 2)];
                        c.beta = nb ? (tests_int(&r, 0, 1) ? 1.0f : 0.75f) : 0.0f;
                        run_case(be, &r, &c);
                    }
    /* the MLP's shapes (batch 128): forward fc1, backward dX of fc2, weight gradient of fc3 */
    gemm_case mlp[3] = {
        {math, 0, 1, operand_dtype(math), operand_dtype(math), MPT_EPILOGUE_RELU_BIAS, 128, 512, 784, 1.0f, 0.0f},
        {math, 0, 0, operand_dtype(math), MPT_DTYPE_F32, MPT_EPILOGUE_NONE, 128, 512, 512, 1.0f, 1.0f},
        {math, 1, 0, MPT_DTYPE_F32, MPT_DTYPE_F32, MPT_EPILOGUE_NONE, 10, 512, 128, 1.0f, 1.0f},
    };
    for (int i = 0; i < 3; i++) run_case(be, &r, &mlp[i]);
    /* rows wider than the epilogue's chunk of 512 columns (kernels/cpu/gemm.c GEMM_CHUNK): the old C and the bias of
     * the second and third chunks must be read at their own columns, for an F32 C and bias read in place and for
     * 16-bit ones widened chunk by chunk (the mutation audit's K08: C's in-place pointer not advanced survived) */
    gemm_case wide[2] = {
        {math, 0, 1, MPT_DTYPE_F32, MPT_DTYPE_F32, MPT_EPILOGUE_RELU_BIAS, 6, 1100, 33, 1.0f, 0.75f},
        {math, 1, 0, operand_dtype(math), operand_dtype(math), MPT_EPILOGUE_BIAS, 5, 1030, 17, 0.5f, 1.0f},
    };
    for (int i = 0; i < 2; i++) run_case(be, &r, &wide[i]);
    /* degenerate sizes: K = 0 gives beta*C (+ bias); M or N = 0 does nothing */
    gemm_case k0 = {math, 0, 0, MPT_DTYPE_F32, MPT_DTYPE_F32, MPT_EPILOGUE_BIAS, 5, 7, 0, 1.0f, 0.5f};
    run_case(be, &r, &k0);
    gemm_case m0 = {math, 1, 1, MPT_DTYPE_F16, MPT_DTYPE_F32, MPT_EPILOGUE_NONE, 0, 7, 9, 1.0f, 0.0f};
    run_case(be, &r, &m0);
    mpt_backend_free(&be);
}

static void run_math(mpt_math math, uint64_t seed) { run_math_on(math, seed, MPT_CPU_KERNELS_EMULATE); }

START_TEST(test_gemm_fp32) { run_math(MPT_MATH_FP32, 101); }
END_TEST
START_TEST(test_gemm_tf32) { run_math(MPT_MATH_TF32, 102); }
END_TEST
/* The native kernel set's bf16 (the CPU's BF16 units) meets the same FP64 bound: its products are exact and its sums
 * FP32, in another order; the random operands here have no BF16 subnormals, the one documented exception
 * (tests/test_cpu_kernels.c checks that case). Skipped, saying so, where native is unavailable. */
START_TEST(test_gemm_bf16_native) {
    char why[256];
    if (!mpt_cpu_native_available(why, sizeof why)) {
        printf("test_gemm_bf16_native: skipped, the native kernel set is unavailable here: %s\n", why);
        return;
    }
    run_math_on(MPT_MATH_BF16, 105, MPT_CPU_KERNELS_NATIVE);
}
END_TEST
START_TEST(test_gemm_f16) { run_math(MPT_MATH_F16, 103); }
END_TEST
START_TEST(test_gemm_bf16) { run_math(MPT_MATH_BF16, 104); }
END_TEST

/* MPT_EPILOGUE_BGRAD on the CPU: the weight-gradient GEMM of a linear layer (dW = dy^T x, FP32 C, beta 0 and 1)
 * with the bias gradient fused gives exactly the unfused bits: the same C, and bias_grad[m] = be->bias_grad's column
 * sums of dy stored [K, M] (overwritten: the buffer starts as NaN). Every math mode. */
START_TEST(test_gemm_bgrad_epilogue_unfused_bits) {
    enum { M = 37, N = 29, K = 131 };
    static const mpt_math maths[4] = {MPT_MATH_FP32, MPT_MATH_TF32, MPT_MATH_F16, MPT_MATH_BF16};
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {106};
    for (int mi = 0; mi < 4; mi++)
        for (int beta = 0; beta < 2; beta++) {
            const mpt_dtype t = operand_dtype(maths[mi]);
            void *dy = alloc_fill(&r, t, (int64_t)K * M, -1, 1), *x = alloc_fill(&r, t, (int64_t)K * N, -1, 1);
            float *c0 = alloc_fill(&r, MPT_DTYPE_F32, (int64_t)M * N, -1, 1);
            float *cf = malloc(sizeof(float) * M * N), *cu = malloc(sizeof(float) * M * N);
            float *bf = malloc(sizeof(float) * M), *bu = malloc(sizeof(float) * M);
            memcpy(cf, c0, sizeof(float) * M * N);
            memcpy(cu, c0, sizeof(float) * M * N);
            memset(bf, 0xff, sizeof(float) * M);
            mpt_gemm_args g = {.trans_a = 1, .M = M, .N = N, .K = K, .A = dy, .a_dtype = t, .B = x, .b_dtype = t,
                               .C = cu, .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .beta = (float)beta,
                               .math = maths[mi], .tag = "bgrad.unfused"};
            gemm_exact_ws(be, &g);
            be->bias_grad(be, bu, dy, t, K, M, 0);
            g.C = cf;
            g.epilogue = MPT_EPILOGUE_BGRAD;
            g.bias_grad = bf;
            g.tag = "bgrad.fused";
            gemm_exact_ws(be, &g);
            EXPECT(memcmp(cf, cu, sizeof(float) * M * N) == 0, "math %s beta %d: C differs with the BGRAD epilogue",
                   mpt_math_name(maths[mi]), beta);
            EXPECT(memcmp(bf, bu, sizeof(float) * M) == 0, "math %s beta %d: the fused bias gradient differs from "
                   "bias_grad's", mpt_math_name(maths[mi]), beta);
            free(dy);
            free(x);
            free(c0);
            free(cf);
            free(cu);
            free(bf);
            free(bu);
        }
    mpt_backend_free(&be);
}
END_TEST

/* Bit (m, n) of a ReLU bitmask, addressed as engine/backend.h describes it (written out here, not shared with the
 * kernels, so a layout slip in either shows up). */
static int aux_bit(const uint8_t *aux, int64_t N, int64_t m, int64_t n) {
    const int64_t ld = (N + 127) / 128 * 128, i = m * ld + n;
    return (aux[i / 8] >> (i % 8)) & 1;
}

/* MPT_EPILOGUE_RELU_AUX_BIAS on the CPU against plain loops: C = relu of the BIAS epilogue's stored C (the unfused
 * linear + relu), and every bit of the mask, padding included (N = 645: ld 768), equal to [C > 0] of the stored C
 * (0 past N); the mask buffer starts as 0xa5 bytes. Beta 0 and 1, every math mode, C in the operand dtype. N is past
 * the kernel's 512-column chunk, so a 16-bit C is widened at the second chunk's own columns (the mutation audit's K31,
 * the chunk offset dropped, survived N = 133). */
START_TEST(test_gemm_relu_aux_bias_plain_loop) {
    enum { M = 37, N = 645, K = 61 };
    static const mpt_math maths[4] = {MPT_MATH_FP32, MPT_MATH_TF32, MPT_MATH_F16, MPT_MATH_BF16};
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {107};
    const size_t aux_bytes = mpt_relu_aux_bytes(M, N);
    ck_assert_uint_eq(aux_bytes, (size_t)M * 768 / 8);
    for (int mi = 0; mi < 4; mi++)
        for (int beta = 0; beta < 2; beta++) {
            const mpt_dtype t = operand_dtype(maths[mi]);
            const size_t es = mpt_dtype_size(t);
            void *x = alloc_fill(&r, t, (int64_t)M * K, -1, 1), *w = alloc_fill(&r, t, (int64_t)N * K, -1, 1);
            void *bias = alloc_fill(&r, t, N, -1, 1), *c0 = alloc_fill(&r, t, (int64_t)M * N, -1, 1);
            void *cb = malloc(es * M * N), *cr = malloc(es * M * N);
            uint8_t *aux = malloc(aux_bytes);
            memcpy(cb, c0, es * M * N);
            memcpy(cr, c0, es * M * N);
            memset(aux, 0xa5, aux_bytes);
            mpt_gemm_args g = {.trans_b = 1, .M = M, .N = N, .K = K, .A = x, .a_dtype = t, .B = w, .b_dtype = t,
                               .C = cb, .c_dtype = t, .bias = bias, .bias_dtype = t, .alpha = 1.0f,
                               .beta = (float)beta, .math = maths[mi], .epilogue = MPT_EPILOGUE_BIAS, .tag = "bias"};
            gemm_exact_ws(be, &g);
            g.C = cr;
            g.epilogue = MPT_EPILOGUE_RELU_AUX_BIAS;
            g.aux = aux;
            g.tag = "relu_aux_bias";
            gemm_exact_ws(be, &g);
            int64_t bad_c = 0, bad_bits = 0, zeros = 0;
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < 768; n++) {
                    if (n >= N) {
                        bad_bits += aux_bit(aux, N, m, n) != 0;
                        continue;
                    }
                    const float pre = mpt_load_f32(cb, t, m * N + n), y = mpt_load_f32(cr, t, m * N + n);
                    const float want = pre > 0.0f ? pre : 0.0f;
                    bad_c += memcmp(&y, &want, sizeof y) != 0;
                    bad_bits += aux_bit(aux, N, m, n) != (y > 0.0f);
                    zeros += y == 0.0f;
                }
            EXPECT(bad_c == 0, "math %s beta %d: %lld elements of C differ from relu(the BIAS epilogue's C)",
                   mpt_math_name(maths[mi]), beta, (long long)bad_c);
            EXPECT(bad_bits == 0, "math %s beta %d: %lld mask bits differ from [C > 0] (padding 0)",
                   mpt_math_name(maths[mi]), beta, (long long)bad_bits);
            EXPECT(zeros > M * N / 4 && zeros < 3 * M * N / 4, "math %s: %lld of %d outputs clipped to 0",
                   mpt_math_name(maths[mi]), (long long)zeros, M * N);
            free(x);
            free(w);
            free(bias);
            free(c0);
            free(cb);
            free(cr);
            free(aux);
        }
    mpt_backend_free(&be);
}
END_TEST

/* MPT_EPILOGUE_DRELU_BGRAD on the CPU against plain loops: C = (the plain GEMM's stored C where the mask bit is set,
 * else +0), bias_grad[n] = the FP32 sum over m = 0, 1, ... of that C (bias_grad's order); random mask bytes
 * (padding bits set too: they must be ignored), C and bias_grad start as NaN. Beta 0 (the epilogue writes C; beta
 * 1 is refused by contract), every math mode, C in the operand dtype. */
START_TEST(test_gemm_drelu_bgrad_plain_loop) {
    enum { M = 37, N = 133, K = 61 };
    static const mpt_math maths[4] = {MPT_MATH_FP32, MPT_MATH_TF32, MPT_MATH_F16, MPT_MATH_BF16};
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {108};
    const size_t aux_bytes = mpt_relu_aux_bytes(M, N);
    for (int mi = 0; mi < 4; mi++) {
        const mpt_dtype t = operand_dtype(maths[mi]);
        const size_t es = mpt_dtype_size(t);
        void *dy = alloc_fill(&r, t, (int64_t)M * K, -1, 1), *w = alloc_fill(&r, t, (int64_t)K * N, -1, 1);
        void *cp = malloc(es * M * N), *cd = malloc(es * M * N);
        float *db = malloc(sizeof(float) * N);
        uint8_t *aux = malloc(aux_bytes);
        for (size_t i = 0; i < aux_bytes; i++) aux[i] = (uint8_t)tests_int(&r, 0, 255);
        memset(cd, 0xff, es * M * N);
        memset(db, 0xff, sizeof(float) * N);
        mpt_gemm_args g = {.M = M, .N = N, .K = K, .A = dy, .a_dtype = t, .B = w, .b_dtype = t, .C = cp, .c_dtype = t,
                           .alpha = 1.0f, .beta = 0.0f, .math = maths[mi], .tag = "dgrad"};
        gemm_exact_ws(be, &g);
        g.C = cd;
        g.epilogue = MPT_EPILOGUE_DRELU_BGRAD;
        g.aux = aux;
        g.bias_grad = db;
        g.tag = "drelu_bgrad";
        gemm_exact_ws(be, &g);
        int64_t bad_c = 0, bad_db = 0, kept = 0;
        for (int64_t n = 0; n < N; n++) {
            float sum = 0.0f;
            for (int64_t m = 0; m < M; m++) {
                const int bit = aux_bit(aux, N, m, n);
                const float want = bit ? mpt_load_f32(cp, t, m * N + n) : 0.0f, got = mpt_load_f32(cd, t, m * N + n);
                bad_c += memcmp(&got, &want, sizeof got) != 0;
                kept += bit;
                sum = sum + want;
            }
            bad_db += memcmp(&db[n], &sum, sizeof sum) != 0;
        }
        EXPECT(bad_c == 0, "math %s: %lld elements of C differ from mask ? GEMM : +0", mpt_math_name(maths[mi]),
               (long long)bad_c);
        EXPECT(bad_db == 0, "math %s: %lld bias-gradient elements differ from the column sums",
               mpt_math_name(maths[mi]), (long long)bad_db);
        EXPECT(kept > M * N / 4 && kept < 3 * M * N / 4, "math %s: %lld of %d mask bits set", mpt_math_name(maths[mi]),
               (long long)kept, M * N);
        free(dy);
        free(w);
        free(cp);
        free(cd);
        free(db);
        free(aux);
    }
    mpt_backend_free(&be);
}
END_TEST

/* Emulation is on: reduced-precision modes must lose accuracy that FP32 math keeps. Inputs are positive
 * with random 24-bit mantissas, K = 32, so FP32's worst-case bound 2*K*u32*T = 2^-18 T is far below the
 * expected operand-rounding error of the reduced formats (about sqrt(K)*u_fmt/2 * T/K, i.e. 2^-14 T for
 * TF32/F16 and 2^-11 T for BF16). */
START_TEST(test_gemm_emulation_is_on) {
    enum { M = 32, N = 32, K = 32 };
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {105};
    float *A = malloc(M * K * sizeof(float)), *B = malloc(K * N * sizeof(float)), *C = malloc(M * N * sizeof(float));
    uint16_t *A16 = malloc(M * K * 2), *B16 = malloc(K * N * 2);
    for (int i = 0; i < M * K; i++) A[i] = (float)tests_uniform(&r, 1.0, 2.0);
    for (int i = 0; i < K * N; i++) B[i] = (float)tests_uniform(&r, 0.5, 1.0);
    double ref[M * N], T[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
            ref[i * N + j] = s;
            T[i * N + j] = s; /* all terms positive */
        }
    static const mpt_math modes[4] = {MPT_MATH_FP32, MPT_MATH_TF32, MPT_MATH_BF16, MPT_MATH_F16};
    for (int mi = 0; mi < 4; mi++) {
        mpt_math m = modes[mi];
        mpt_gemm_args g = {0};
        g.M = M;
        g.N = N;
        g.K = K;
        g.a_dtype = g.b_dtype = operand_dtype(m);
        if (m == MPT_MATH_FP32 || m == MPT_MATH_TF32) {
            g.A = A;
            g.B = B;
        } else { /* F32 data rounded to the operand format by the backend's cast (RNE) */
            be->cast(be, A16, operand_dtype(m), A, MPT_DTYPE_F32, M * K);
            be->cast(be, B16, operand_dtype(m), B, MPT_DTYPE_F32, K * N);
            g.A = A16;
            g.B = B16;
        }
        g.C = C;
        g.c_dtype = MPT_DTYPE_F32;
        g.alpha = 1.0f;
        g.math = m;
        g.tag = "emulation";
        gemm_exact_ws(be, &g);
        int beyond = 0;
        for (int i = 0; i < M * N; i++) {
            double fp32_bound = 2.0 * K * U32 * T[i];
            double err = fabs(C[i] - ref[i]);
            if (m == MPT_MATH_FP32)
                EXPECT(err <= fp32_bound, "fp32 math: element %d error %.3g above the FP32 bound %.3g", i, err,
                       fp32_bound);
            else
                beyond += err > fp32_bound;
        }
        if (m != MPT_MATH_FP32)
            EXPECT(beyond >= M * N * 9 / 10, "%s math: only %d of %d elements differ from FP32 by more than FP32's "
                   "bound: are operands still rounded to the format?", mpt_math_name(m), beyond, M * N);
    }
    /* one hand-made case: 1 + 2^-12 + 2^-20 is 1 in TF32 (below half a TF32 ulp above 1) */
    float a1 = 1.0f + 0x1p-12f + 0x1p-20f, b1 = 1.0f, c1 = 0.0f;
    mpt_gemm_args g = {0};
    g.M = g.N = g.K = 1;
    g.A = &a1;
    g.B = &b1;
    g.C = &c1;
    g.a_dtype = g.b_dtype = g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.math = MPT_MATH_TF32;
    gemm_exact_ws(be, &g);
    EXPECT(c1 == 1.0f, "tf32: 1 + 2^-12 + 2^-20 times 1 gave %a, expected 1", (double)c1);
    g.math = MPT_MATH_FP32;
    gemm_exact_ws(be, &g);
    EXPECT(c1 == a1, "fp32: got %a, expected %a", (double)c1, (double)a1);
    free(A);
    free(B);
    free(C);
    free(A16);
    free(B16);
    mpt_backend_free(&be);
}
END_TEST

/* Programmer errors abort (MPT_ASSERTF -> abort()). */
START_TEST(test_gemm_rejects_mixed_dtypes) {
    mpt_backend *be = mpt_backend_cpu_create();
    uint16_t a = 0, b = 0;
    float c = 0;
    mpt_gemm_args g = {0};
    g.M = g.N = g.K = 1;
    g.A = &a;
    g.B = &b;
    g.C = &c;
    g.a_dtype = g.b_dtype = MPT_DTYPE_F16;
    g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.math = MPT_MATH_TF32; /* TF32 needs F32 operands */
    be->gemm(be, &g);
}
END_TEST

/* The contract's checks (engine/backend.c, shared by both backends): an FP8 GEMM with the BGRAD epilogue, an MXFP8 one
 * without block scales and a DRELU_BGRAD one with beta 1 are refused by the CPU oracle as by the GPU; what only
 * cuBLASLt cannot run (E5M2 x E5M2) is the CUDA backend's gemm_supports, and the CPU, which runs everything the
 * contract allows, has none. Each refused call is a child that must abort. */
static mpt_gemm_args fp8_args(uint8_t *a, uint8_t *b, float *c, float *s) {
    mpt_gemm_args g = {0};
    g.M = g.N = 1;
    g.K = 32;
    g.trans_b = 1;
    g.A = a, g.a_dtype = MPT_DTYPE_E4M3;
    g.B = b, g.b_dtype = MPT_DTYPE_E4M3;
    g.C = c, g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.math = MPT_MATH_FP8;
    g.a_scale_inv = g.b_scale_inv = s;
    g.tag = "test.fp8";
    return g;
}

START_TEST(test_contract_fp8_bgrad) {
    uint8_t a[32] = {0}, b[32] = {0};
    float c = 0, s = 1, db = 0;
    mpt_gemm_args g = fp8_args(a, b, &c, &s);
    mpt_gemm_args_check(&g, 1); /* accepted as it stands */
    g.epilogue = MPT_EPILOGUE_BGRAD;
    g.bias_grad = &db;
    mpt_backend *be = mpt_backend_cpu_create();
    be->gemm(be, &g);
}
END_TEST

START_TEST(test_contract_mxfp8_scales) {
    uint8_t a[32] = {0}, b[32] = {0};
    float c = 0, s = 1;
    mpt_gemm_args g = fp8_args(a, b, &c, &s);
    g.math = MPT_MATH_MXFP8;
    g.a_scale_inv = g.b_scale_inv = NULL;
    mpt_gemm_args_check(&g, 0); /* at graph build the block scales need not exist yet */
    mpt_backend *be = mpt_backend_cpu_create();
    be->gemm(be, &g); /* running: they must */
}
END_TEST

START_TEST(test_contract_drelu_beta) {
    float a = 1, b = 1, c = 0, db = 0;
    uint8_t aux[16] __attribute__((aligned(16))) = {0};
    mpt_gemm_args g = {0};
    g.M = g.N = g.K = 1;
    g.A = &a, g.B = &b, g.C = &c;
    g.a_dtype = g.b_dtype = g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.epilogue = MPT_EPILOGUE_DRELU_BGRAD;
    g.aux = aux;
    g.bias_grad = &db;
    mpt_gemm_args_check(&g, 1);
    g.beta = 1.0f; /* DRELU_BGRAD writes C: beta must be 0 */
    mpt_backend *be = mpt_backend_cpu_create();
    be->gemm(be, &g);
}
END_TEST

START_TEST(test_contract_capabilities) {
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert_msg(be->gemm_supports == NULL, "the CPU runs every call the contract allows");
    uint8_t a[32] = {0}, b[32] = {0};
    float c = 0, s = 1;
    mpt_gemm_args g = fp8_args(a, b, &c, &s);
    g.a_dtype = g.b_dtype = MPT_DTYPE_E5M2; /* cuBLASLt has no such configuration; the contract and the CPU do */
    mpt_gemm_args_check(&g, 1);
    mpt_backend_reserve_workspace(be, be->gemm_workspace(be, &g));
    be->gemm(be, &g);
    ck_assert(c == 0.0f);
    mpt_backend_free(&be);
}
END_TEST

START_TEST(test_gemm_rejects_small_workspace) {
    mpt_backend *be = mpt_backend_cpu_create();
    float a = 1, b = 1;
    uint16_t c = 0;
    mpt_gemm_args g = {0};
    g.M = g.N = g.K = 1;
    g.A = &a;
    g.B = &b;
    g.C = &c;
    g.a_dtype = g.b_dtype = MPT_DTYPE_F32;
    g.c_dtype = MPT_DTYPE_F16; /* needs an FP32 tile, and none was reserved */
    g.alpha = 1.0f;
    g.math = MPT_MATH_FP32;
    be->gemm(be, &g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gemm_fp32);
    tcase_add_test(tc, test_gemm_tf32);
    tcase_add_test(tc, test_gemm_f16);
    tcase_add_test(tc, test_gemm_bf16);
    tcase_add_test(tc, test_gemm_bf16_native);
    tcase_add_test(tc, test_gemm_emulation_is_on);
    tcase_add_test(tc, test_gemm_bgrad_epilogue_unfused_bits);
    tcase_add_test(tc, test_gemm_relu_aux_bias_plain_loop);
    tcase_add_test(tc, test_gemm_drelu_bgrad_plain_loop);
    tcase_add_test_raise_signal(tc, test_gemm_rejects_mixed_dtypes, SIGABRT);
    tcase_add_test_raise_signal(tc, test_gemm_rejects_small_workspace, SIGABRT);
    tcase_add_test_raise_signal(tc, test_contract_fp8_bgrad, SIGABRT);
    tcase_add_test_raise_signal(tc, test_contract_mxfp8_scales, SIGABRT);
    tcase_add_test_raise_signal(tc, test_contract_drelu_beta, SIGABRT);
    tcase_add_test(tc, test_contract_capabilities);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
