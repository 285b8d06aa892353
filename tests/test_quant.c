/*
 * tests/test_quant.c - quantization on the CPU backend (engine/backend.h "Quantization", kernels/cpu/quant.c).
 *
 *  - the integer GEMM is exact where an FP32 accumulator cannot be: the cnn's fc1 length K = 9216 with codes of 127,
 *    whose exact sum 148628862 lies between FP32 numbers (spacing 16 above 2^27): the int32 sum equals the int64
 *    reference, the backend's own FP32 GEMM of the same codes does not, nor does a plain FP32 loop;
 *  - random shapes (K = 0 included), per-tensor and per-channel scales, with and without a bias, F32 and BF16
 *    outputs: the sums against an int64 reference, the rescale against its definition fmaf((float)acc, s_x s_w, b);
 *  - the integer convolution (padding, stride) against a direct int64 reference;
 *  - fake quantization per row and per tensor against hand-computed codes and values (INT8, INT4, E4M3), the scales;
 *  - an activation's amax (accumulated over calls, NaN kept) and its codes;
 *  - quantization-aware training (engine/quant.h): after creation and after a step the working weights are the
 *    per-row fake quantization of their FP32 masters (recomputed here from engine/numerics.h's rules), biases are not
 *    quantized, and the straight-through estimator: the gradient that reaches the master is, bit for bit, the
 *    gradient of a run without QAT whose weights are those fake-quantized values, applied unchanged (SGD:
 *    master' = fmaf(-lr, g, master)); QAT refuses FP8 modes and --master-weights none;
 *  - post-training quantization with INT8 activations on a graph with a convolution and linear layers: calibration
 *    records each layer's largest |input| (recomputed here from the inputs), and the integer forward of every layer
 *    equals, bit for bit, this test's own computation from the layer's input, the weight codes and scales (the input's
 *    codes at amax / 127, the int64 sum of products, the rescale fmaf((float)acc, s_x s_w, b)).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "datasets/synthetic.h"
#include "engine/backend.h"
#include "engine/layers/layers.h"
#include "engine/numerics.h"
#include "engine/optim/optim.h"
#include "engine/quant.h"
#include "engine/train.h"

static mpt_backend *be;

static void setup(void) { be = mpt_backend_cpu_create(); }
static void teardown(void) { mpt_backend_free(&be); }

START_TEST(test_gemm_i8_exact_where_fp32_rounds) {
    enum { M = 2, N = 3, K = 9216 }; /* the cnn's fc1: K = 64 * 12 * 12 */
    int8_t *A = malloc(M * K), *B = malloc(N * K);
    float *A32 = malloc(sizeof(float) * M * K), *B32 = malloc(sizeof(float) * N * K), C32[M * N];
    int32_t acc[M * N];
    ck_assert(A && B && A32 && B32);
    for (int k = 0; k < K; k++) {
        A[k] = 127;                        /* row 0: every code 127 */
        A[K + k] = (int8_t)(k % 2 ? -127 : 127);
        B[k] = (int8_t)(k == K - 1 ? 1 : 127); /* col 0: 127 ... 127, 1 */
        B[K + k] = 127;
        B[2 * K + k] = (int8_t)(k % 3 == 0 ? -126 : 125);
    }
    for (int i = 0; i < M * K; i++) A32[i] = A[i];
    for (int i = 0; i < N * K; i++) B32[i] = B[i];
    mpt_gemm_i8_args g = {.M = M, .N = N, .K = K, .A = A, .B = B, .acc = acc, .tag = "test"};
    be->gemm_i8(be, &g);
    int64_t exact[M * N];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int64_t s = 0;
            for (int k = 0; k < K; k++) s += (int64_t)A[m * K + k] * B[n * K + k];
            exact[m * N + n] = s;
            ck_assert_msg(acc[m * N + n] == s, "acc[%d, %d] = %d, exact %lld", m, n, acc[m * N + n], (long long)s);
        }
    /* 127 * 127 * 9215 + 127 = 148628862: above 2^27 FP32's spacing is 16, and this is not a multiple of it */
    ck_assert(exact[0] == 148628862LL && exact[0] > (1LL << 24));
    ck_assert((double)(float)exact[0] != (double)exact[0]);
    /* an FP32 emulation cannot give it: the backend's FP32 GEMM of the same codes, and a plain FP32 loop */
    mpt_gemm_args f = {.trans_b = 1, .M = M, .N = N, .K = K, .A = A32, .a_dtype = MPT_DTYPE_F32, .B = B32,
                       .b_dtype = MPT_DTYPE_F32, .C = C32, .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f,
                       .math = MPT_MATH_FP32, .tag = "test.fp32"};
    MPT_ASSERT(mpt_backend_reserve_workspace(be, be->gemm_workspace(be, &f)) == MPT_OK);
    be->gemm(be, &f);
    ck_assert_msg((double)C32[0] != (double)exact[0], "the FP32 GEMM gave the exact %lld", (long long)exact[0]);
    float loop = 0.0f;
    for (int k = 0; k < K; k++) loop += A32[k] * B32[k];
    ck_assert_msg((double)loop != (double)exact[0] && fabs((double)loop - (double)exact[0]) > 8.0,
                  "FP32 loop %.1f, exact %lld", (double)loop, (long long)exact[0]);
    /* the rescale of the exact sum: one conversion (here rounded: the sum is above 2^24), one fmaf */
    float xs = 0.0125f, ws[N] = {0.003f, 0.5f, 0.25f}, bias[N] = {1.0f, -2.0f, 0.5f}, C[M * N];
    g.C = C, g.c_dtype = MPT_DTYPE_F32, g.a_scale = &xs, g.b_scales = ws, g.bias = bias, g.bias_dtype = MPT_DTYPE_F32;
    be->gemm_i8(be, &g);
    for (int i = 0; i < M * N; i++)
        ck_assert(C[i] == fmaf((float)exact[i], xs * ws[i % N], bias[i % N]));
    free(A), free(B), free(A32), free(B32);
}
END_TEST

/* The contract's largest K is the largest whose worst sum, K codes of 127 times 127, fits int32: K * 16129 <= 2^31 - 1,
 * so floor((2^31 - 1) / 16129) = 133144 (133144 * 16129 = 2147479576; one more product passes 2^31). At that K the
 * GEMM is accepted and its sum of K products of 127 * 127 is exact. */
START_TEST(test_gemm_i8_largest_k) {
    const int64_t qq = (int64_t)MPT_INT8_QMAX * MPT_INT8_QMAX, K = (INT64_C(1) << 31) / qq;
    ck_assert_int_eq(qq, 16129);
    ck_assert(K * qq <= INT32_MAX && (K + 1) * qq > INT32_MAX);
    ck_assert_int_eq(MPT_GEMM_I8_MAX_K, K);
    int8_t *A = malloc((size_t)K), *B = malloc((size_t)K);
    ck_assert(A && B);
    memset(A, 127, (size_t)K), memset(B, 127, (size_t)K);
    int32_t acc = 0;
    mpt_gemm_i8_args g = {.M = 1, .N = 1, .K = K, .A = A, .B = B, .acc = &acc, .tag = "test.largest_k"};
    be->gemm_i8(be, &g);
    ck_assert_int_eq(acc, 2147479576);
    free(A), free(B);
}
END_TEST

START_TEST(test_gemm_i8_random) {
    tests_rng r = {77};
    for (int it = 0; it < 40; it++) {
        const int M = tests_int(&r, 1, 9), N = tests_int(&r, 1, 13), K = it == 0 ? 0 : tests_int(&r, 1, 300);
        const int per_tensor = it % 2, with_bias = it % 3 != 0;
        const mpt_dtype ct = it % 4 == 3 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
        int8_t *A = malloc((size_t)(M * K + 1)), *B = malloc((size_t)(N * K + 1));
        int32_t *acc = malloc(sizeof(int32_t) * (size_t)(M * N));
        float *C = malloc(sizeof(float) * (size_t)(M * N)), ws[16], bias[16], xs = (float)tests_uniform(&r, 1e-3, 1.0);
        for (int i = 0; i < M * K; i++) A[i] = (int8_t)tests_int(&r, -127, 127);
        for (int i = 0; i < N * K; i++) B[i] = (int8_t)tests_int(&r, -127, 127);
        for (int i = 0; i < N; i++) ws[i] = (float)tests_uniform(&r, 1e-3, 1.0), bias[i] = (float)tests_uniform(&r, -1, 1);
        mpt_gemm_i8_args g = {.M = M, .N = N, .K = K, .A = A, .B = B, .acc = acc, .C = C, .c_dtype = ct,
                              .a_scale = &xs, .b_scales = ws, .b_per_tensor = per_tensor,
                              .bias = with_bias ? bias : NULL, .bias_dtype = MPT_DTYPE_F32, .tag = "test"};
        be->gemm_i8(be, &g);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                int64_t s = 0;
                for (int k = 0; k < K; k++) s += (int64_t)A[m * K + k] * B[n * K + k];
                ck_assert_int_eq(acc[m * N + n], (int32_t)s);
                const float want = fmaf((float)s, xs * ws[per_tensor ? 0 : n], with_bias ? bias[n] : 0.0f);
                const float got = mpt_load_f32(C, ct, m * N + n);
                float want_c = want;
                if (ct == MPT_DTYPE_BF16) want_c = mpt_bf16_to_f32(mpt_f32_to_bf16(want));
                ck_assert_msg(got == want_c, "it %d (%d, %d): %a, want %a", it, m, n, (double)got, (double)want_c);
            }
        free(A), free(B), free(acc), free(C);
    }
}
END_TEST

START_TEST(test_conv_i8) {
    tests_rng r = {5};
    const struct { int N, C, H, W, K, R, pad, stride; } cs[] = {{2, 3, 7, 6, 4, 3, 1, 1}, {1, 2, 9, 9, 5, 5, 2, 2},
                                                               {3, 1, 5, 5, 2, 5, 0, 1}};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        mpt_conv_shape s = {.N = cs[ci].N, .C = cs[ci].C, .H = cs[ci].H, .W = cs[ci].W, .K = cs[ci].K, .R = cs[ci].R,
                            .S = cs[ci].R, .pad_h = cs[ci].pad, .pad_w = cs[ci].pad, .stride_h = cs[ci].stride,
                            .stride_w = cs[ci].stride};
        s.P = (s.H + 2 * s.pad_h - s.R) / s.stride_h + 1;
        s.Q = (s.W + 2 * s.pad_w - s.S) / s.stride_w + 1;
        const int nx = s.N * s.C * s.H * s.W, nw = s.K * s.C * s.R * s.S, ny = s.N * s.K * s.P * s.Q;
        int8_t *x = malloc((size_t)nx), *w = malloc((size_t)nw);
        float *y = malloc(sizeof(float) * (size_t)ny), ws[8], bias[8], xs = 0.02f;
        for (int i = 0; i < nx; i++) x[i] = (int8_t)tests_int(&r, -127, 127);
        for (int i = 0; i < nw; i++) w[i] = (int8_t)tests_int(&r, -7, 7);
        for (int k = 0; k < s.K; k++) ws[k] = (float)tests_uniform(&r, 0.01, 0.1), bias[k] = (float)tests_uniform(&r, -1, 1);
        MPT_ASSERT(mpt_backend_reserve_workspace(be, mpt_conv_i8_workspace(&s)) == MPT_OK);
        mpt_conv_i8_args a = {.s = s, .x = x, .w = w, .y = y, .y_dtype = MPT_DTYPE_F32, .x_scale = &xs,
                              .w_scales = ws, .bias = bias, .bias_dtype = MPT_DTYPE_F32, .tag = "test"};
        be->conv2d_forward_i8(be, &a);
        for (int n = 0; n < s.N; n++)
            for (int k = 0; k < s.K; k++)
                for (int p = 0; p < s.P; p++)
                    for (int q = 0; q < s.Q; q++) {
                        int64_t acc = 0;
                        for (int c = 0; c < s.C; c++)
                            for (int i = 0; i < s.R; i++)
                                for (int j = 0; j < s.S; j++) {
                                    const int h = p * s.stride_h - s.pad_h + i, ww = q * s.stride_w - s.pad_w + j;
                                    if (h < 0 || h >= s.H || ww < 0 || ww >= s.W) continue;
                                    acc += (int64_t)x[((n * s.C + c) * s.H + h) * s.W + ww] *
                                           w[((k * s.C + c) * s.R + i) * s.S + j];
                                }
                        const float want = fmaf((float)acc, xs * ws[k], bias[k]);
                        ck_assert_msg(y[((n * s.K + k) * s.P + p) * s.Q + q] == want, "case %zu (%d %d %d %d)", ci, n,
                                      k, p, q);
                    }
        free(x), free(w), free(y);
    }
}
END_TEST

START_TEST(test_fake_quant) {
    /* INT8 per row: [254, 5, -3] has s = 2 (ties 2.5 -> 2, -1.5 -> -2); [0, 0, 0] s = 1; [-12.7, 0.1, 0] s = 0.1f */
    const float x[9] = {254.0f, 5.0f, -3.0f, 0.0f, 0.0f, 0.0f, -12.7f, 0.1f, 0.0f};
    float y[9], sc[3];
    int8_t q[9];
    mpt_fake_quant_args a = {.x = x, .rows = 3, .cols = 3, .fmt = MPT_QFORMAT_INT8, .y = y, .y_dtype = MPT_DTYPE_F32,
                             .q = q, .scales = sc, .tag = "test"};
    be->fake_quant(be, &a);
    ck_assert(sc[0] == 2.0f && sc[1] == 1.0f && sc[2] == 12.7f / 127.0f);
    const int8_t q_want[9] = {127, 2, -2, 0, 0, 0, -127, 1, 0};
    for (int i = 0; i < 9; i++) ck_assert_msg(q[i] == q_want[i], "q[%d] = %d, want %d", i, q[i], q_want[i]);
    ck_assert(y[0] == 254.0f && y[1] == 4.0f && y[2] == -4.0f && y[3] == 0.0f);
    ck_assert(y[6] == -127.0f * sc[2] && y[7] == sc[2]);
    /* per tensor (rows = 1): one scale from the whole amax 254: 12.7 / 2 = 6.35 -> 6 */
    a.rows = 1, a.cols = 9;
    be->fake_quant(be, &a);
    ck_assert(sc[0] == 2.0f && q[6] == -6 && y[6] == -12.0f && q[7] == 0 && y[7] == 0.0f);
    /* INT4 per row: [14, 13, -5] s = 2: 6.5 -> 6, -2.5 -> -2 */
    const float x4[3] = {14.0f, 13.0f, -5.0f};
    a = (mpt_fake_quant_args){.x = x4, .rows = 1, .cols = 3, .fmt = MPT_QFORMAT_INT4, .y = y, .y_dtype = MPT_DTYPE_F32,
                              .q = q, .scales = sc, .tag = "test"};
    be->fake_quant(be, &a);
    ck_assert(sc[0] == 2.0f && q[0] == 7 && q[1] == 6 && q[2] == -2 && y[1] == 12.0f && y[2] == -4.0f);
    /* E4M3: amax 896 -> s = 2; 3 / 2 = 1.5 is on the grid; 10.1 / 2 = 5.05 rounds to 5 (grid step 0.5 there) */
    const float x8[3] = {896.0f, 3.0f, 10.1f};
    a = (mpt_fake_quant_args){.x = x8, .rows = 1, .cols = 3, .fmt = MPT_QFORMAT_E4M3, .y = y, .y_dtype = MPT_DTYPE_F32,
                              .scales = sc, .tag = "test"};
    be->fake_quant(be, &a);
    ck_assert(sc[0] == 2.0f && y[0] == 896.0f && y[1] == 3.0f && y[2] == 10.0f);
    /* E4M3 saturates (the format's row, engine/dtype.h): past 464 s (the midpoint of 448 and the next grid point
     * 480) and at +-inf a value stands for +-448 s, never NaN (a non-saturating cast gives NaN: E4M3 has no inf) */
    ck_assert(mpt_quant_fake(1000.0f, 1.0f, 448, MPT_QKIND_E4M3) == 448.0f);
    ck_assert(mpt_quant_fake(-INFINITY, 2.0f, 448, MPT_QKIND_E4M3) == -896.0f);
    ck_assert(mpt_quant_fake(470.0f, 1.0f, 448, MPT_QKIND_E4M3) == 448.0f);
    /* BF16, no scale: RNE of each value (1 + 2^-8 is a tie between 1 and 1 + 2^-7: even, 1), scale 1 */
    const float xbf[3] = {1.0f + 0x1p-8f, 3.14159265f, -1000.0f};
    a = (mpt_fake_quant_args){.x = xbf, .rows = 1, .cols = 3, .fmt = MPT_QFORMAT_BF16, .y = y, .y_dtype = MPT_DTYPE_F32,
                              .scales = sc, .tag = "test"};
    be->fake_quant(be, &a);
    ck_assert(sc[0] == 1.0f && y[0] == 1.0f && y[1] == 3.140625f && y[2] == -1000.0f);
    /* into BF16: q * s rounded once (254 / 127 * 126 = 252 exactly; 0.1f-scaled values round) */
    uint16_t yb[3];
    const float xb[3] = {1.27f, 0.3f, -0.01f};
    a = (mpt_fake_quant_args){.x = xb, .rows = 1, .cols = 3, .fmt = MPT_QFORMAT_INT8, .y = yb, .y_dtype = MPT_DTYPE_BF16,
                              .scales = sc, .tag = "test"};
    be->fake_quant(be, &a);
    for (int i = 0; i < 3; i++)
        ck_assert(yb[i] == mpt_f32_to_bf16((float)mpt_int_quantize(xb[i], sc[0], 127) * sc[0]));
}
END_TEST

START_TEST(test_quantize_activation) {
    float amax = 0.0f, s = 0.5f;
    const float x[4] = {0.2f, -3.0f, 1.25f, 0.75f};
    int8_t q[4];
    mpt_quantize_args a = {.x = x, .x_dtype = MPT_DTYPE_F32, .n = 4, .amax = &amax, .tag = "test"};
    be->quantize(be, &a);
    ck_assert(amax == 3.0f);
    const float x2[2] = {-2.0f, 4.5f};
    a.x = x2, a.n = 2;
    be->quantize(be, &a); /* accumulates: the max over calls */
    ck_assert(amax == 4.5f);
    a.x = x, a.n = 4, a.amax = NULL, a.scale = &s, a.q = q, a.qmax = 127;
    be->quantize(be, &a); /* 0.4 -> 0, -6 -> -6, 2.5 -> 2 (tie, even), 1.5 -> 2 */
    ck_assert(q[0] == 0 && q[1] == -6 && q[2] == 2 && q[3] == 2);
    const float xn[2] = {NAN, 1.0f};
    a.x = xn, a.n = 2, a.amax = &amax, a.q = NULL;
    be->quantize(be, &a);
    ck_assert(isnan(amax));
}
END_TEST

/* ---- quantization-aware training ---------------------------------------------------------------------------------- */

#define QB 32

static mpt_trainer *qat_trainer(mpt_backend *b, mpt_precision mode, mpt_qat qat, mpt_status *status) {
    mpt_policy pol = mpt_policy_make_explicit(mode, 0, 0);
    mpt_graph *g = mpt_graph_create(b, &pol, QB);
    int64_t shape[2] = {QB, 64};
    mpt_tensor *x = mpt_input(g, 2, shape);
    x = mpt_relu(g, mpt_linear(g, x, 32, "fc1"), "relu1");
    x = mpt_linear(g, x, 8, "fc2");
    mpt_softmax_xent(g, x, "loss");
    mpt_train_config cfg = mpt_train_config_default(mode);
    cfg.optim = mpt_optim_hparams_default(MPT_OPTIM_SGD);
    cfg.optim.lr = 0.25f;
    cfg.schedule.base_lr = 0.25f;
    cfg.seed = 3;
    cfg.qat = qat;
    mpt_trainer *t = NULL;
    *status = mpt_trainer_create(&t, g, &cfg);
    return t;
}

/* Parameter i's working copy is the per-row INT4 fake quantization of its master (weights), or the master (biases). */
static void assert_working_is_fake_quant(const mpt_trainer *t) {
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *w = t->weight[i], *m = t->master[i];
        const float *wd = w->data, *md = m->data;
        const int64_t n = mpt_tensor_numel(w);
        if (w->ndim == 1) { /* a bias: its own master, not quantized */
            ck_assert_msg(m == w && !t->qat[i], "%s", w->name);
            continue;
        }
        ck_assert_msg(m != w && t->qat[i], "%s has no FP32 master of its own", w->name);
        const int64_t rows = w->shape[0], cols = n / rows;
        for (int64_t r = 0; r < rows; r++) {
            float amax = 0.0f;
            for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(md[r * cols + c]));
            const float sc = amax / 7.0f;
            for (int64_t c = 0; c < cols; c++) {
                const float v = md[r * cols + c];
                float q = rintf(v / sc);
                q = q > 7.0f ? 7.0f : q < -7.0f ? -7.0f : q;
                ck_assert_msg(wd[r * cols + c] == q * sc, "%s[%lld, %lld]: %a, want %a", w->name, (long long)r,
                              (long long)c, (double)wd[r * cols + c], (double)(q * sc));
            }
        }
    }
}

START_TEST(test_qat_ste) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 1234), MPT_OK);
    mpt_backend *b = mpt_backend_cpu_create(), *b2 = mpt_backend_cpu_create();
    mpt_status s;
    mpt_trainer *a = qat_trainer(b, MPT_PRECISION_FP32, MPT_QAT_INT4, &s);
    ck_assert_msg(s == MPT_OK, "%s", mpt_last_error());
    mpt_trainer *ref = qat_trainer(b2, MPT_PRECISION_FP32, MPT_QAT_NONE, &s);
    ck_assert_msg(s == MPT_OK, "%s", mpt_last_error());
    assert_working_is_fake_quant(a);
    /* the reference's weights: A's fake-quantized working copies (CPU backend: host memory) */
    float *m0[8];
    for (int i = 0; i < a->n_params; i++) {
        const size_t bytes = mpt_tensor_nbytes(a->weight[i]);
        memcpy(ref->weight[i]->data, a->weight[i]->data, bytes);
        m0[i] = malloc(bytes);
        memcpy(m0[i], a->master[i]->data, bytes);
    }
    int32_t idx[QB];
    for (int i = 0; i < QB; i++) idx[i] = i;
    mpt_trainer_gather(a, d.train_images, d.train_labels, idx, d.dim, 0.0f, 1.0f);
    mpt_trainer_step(a);
    mpt_trainer_gather(ref, d.train_images, d.train_labels, idx, d.dim, 0.0f, 1.0f);
    mpt_trainer_step(ref);
    for (int i = 0; i < a->n_params; i++) {
        const int64_t n = mpt_tensor_numel(a->weight[i]);
        const float *ga = a->weight[i]->grad->data, *gr = ref->weight[i]->grad->data, *m1 = a->master[i]->data;
        ck_assert_msg(memcmp(ga, gr, sizeof(float) * (size_t)n) == 0, "%s: the gradient is not the one at the "
                      "fake-quantized weights", a->weight[i]->name);
        for (int64_t k = 0; k < n; k++)
            ck_assert_msg(m1[k] == fmaf(-0.25f, ga[k], m0[i][k]), "%s[%lld]: the master did not take the gradient "
                          "unchanged", a->weight[i]->name, (long long)k);
        free(m0[i]);
    }
    assert_working_is_fake_quant(a);
    /* the precision map says it */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mpt_graph_print_precision_map(a->g, f);
    fclose(f);
    ck_assert_msg(strstr(text, "fake-quantized to INT4 per output channel") && strstr(text, "fc1.weight fc2.weight"),
                  "%s", text);
    free(text);
    mpt_trainer_free(&a);
    mpt_trainer_free(&ref);
    /* refusals: FP8 modes, no masters */
    a = qat_trainer(b, MPT_PRECISION_FP8, MPT_QAT_INT8, &s);
    ck_assert_msg(s == MPT_ERR_ARG && a == NULL && strstr(mpt_last_error(), "fp8"), "%s", mpt_last_error());
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_BF16, 0, 0);
    mpt_graph *g = mpt_graph_create(b, &pol, QB);
    int64_t shape[2] = {QB, 64};
    mpt_softmax_xent(g, mpt_linear(g, mpt_input(g, 2, shape), 8, "fc"), "loss");
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_BF16);
    cfg.qat = MPT_QAT_INT8;
    cfg.master_weights = MPT_MASTER_NONE;
    ck_assert_int_eq(mpt_trainer_create(&a, g, &cfg), MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "master weights fp32") != NULL, "%s", mpt_last_error());
    mpt_backend_free(&b);
    mpt_backend_free(&b2);
    mpt_mnist_free(&d);
}
END_TEST

/* ---- post-training quantization with INT8 activations ---------------------------------------------------------- */

/* The integer output of node n, recomputed on the host from its input (the float input the INT8 mode quantizes), its
 * weight codes and scales and its bias, against what the forward wrote. */
static void assert_int8_node(const mpt_node *n) {
    const mpt_node_quant *q = n->quant;
    const float *x = n->in[0]->data, *bias = n->in[2]->data, *y = n->out->data, *ws = q->w_scales->data;
    const int8_t *qw = q->qw->data;
    const float xs = *(const float *)q->x_scale->data;
    const int64_t nx = mpt_tensor_numel(n->in[0]);
    int8_t *qx = malloc((size_t)nx);
    for (int64_t i = 0; i < nx; i++) {
        float r = rintf(x[i] / xs);
        qx[i] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
    }
    if (n->op == MPT_OP_LINEAR) {
        const int64_t M = n->in[0]->shape[0], N = n->in[1]->shape[0], K = n->in[1]->shape[1];
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; k++) acc += (int64_t)qx[m * K + k] * qw[j * K + k];
                const float want = fmaf((float)acc, xs * ws[q->per_channel ? j : 0], bias[j]);
                ck_assert_msg(y[m * N + j] == want, "%s[%lld, %lld]: %a, want %a", n->name, (long long)m, (long long)j,
                              (double)y[m * N + j], (double)want);
            }
    } else {
        const mpt_conv_shape *s = &n->attr.conv;
        for (int b = 0; b < s->N; b++)
            for (int k = 0; k < s->K; k++)
                for (int p = 0; p < s->P; p++)
                    for (int qq = 0; qq < s->Q; qq++) {
                        int64_t acc = 0;
                        for (int c = 0; c < s->C; c++)
                            for (int i = 0; i < s->R; i++)
                                for (int j = 0; j < s->S; j++) {
                                    const int h = p * s->stride_h - s->pad_h + i, w = qq * s->stride_w - s->pad_w + j;
                                    if (h < 0 || h >= s->H || w < 0 || w >= s->W) continue;
                                    acc += (int64_t)qx[((b * s->C + c) * s->H + h) * s->W + w] *
                                           qw[((k * s->C + c) * s->R + i) * s->S + j];
                                }
                        const float want = fmaf((float)acc, xs * ws[q->per_channel ? k : 0], bias[k]);
                        ck_assert(y[((b * s->K + k) * s->P + p) * s->Q + qq] == want);
                    }
    }
    free(qx);
}

START_TEST(test_ptq_int8_forward) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 99), MPT_OK); /* 64 features: an 8x8 image */
    for (int per_channel = 0; per_channel < 2; per_channel++) {
        mpt_backend *b = mpt_backend_cpu_create();
        mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP32, 0, 0);
        mpt_graph *g = mpt_graph_create(b, &pol, QB);
        int64_t shape[4] = {QB, 1, 8, 8};
        mpt_tensor *x = mpt_input(g, 4, shape);
        x = mpt_relu(g, mpt_conv2d(g, x, 4, 3, 1, 1, "conv1"), "relu1");
        x = mpt_flatten(g, x, "flat");
        x = mpt_relu(g, mpt_linear(g, x, 16, "fc1"), "relu2");
        mpt_softmax_xent(g, mpt_linear(g, x, 8, "fc2"), "loss");
        mpt_quant_prepare(g, per_channel);
        mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP32);
        mpt_trainer *t = NULL;
        ck_assert_msg(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s", mpt_last_error());
        int32_t idx[QB];
        /* calibration over two batches: amax is the max over both of every layer's input */
        float amax_want[4] = {0}; /* conv1, fc1, fc2 in node order */
        mpt_quant_set_mode(g, MPT_QUANT_CALIBRATE);
        mpt_quant_calibration_begin(g);
        for (int batch = 0; batch < 2; batch++) {
            for (int i = 0; i < QB; i++) idx[i] = batch * QB + i;
            mpt_trainer_gather(t, d.train_images, d.train_labels, idx, d.dim, 0.0f, 1.0f);
            mpt_trainer_eval_batch(t);
            int l = 0;
            for (int i = 0; i < g->n_nodes; i++) {
                const mpt_node *n = g->nodes[i];
                if (!n->quant) continue;
                const float *xin = n->in[0]->data;
                for (int64_t k = 0; k < mpt_tensor_numel(n->in[0]); k++) amax_want[l] = fmaxf(amax_want[l], fabsf(xin[k]));
                l++;
            }
        }
        mpt_quant_calibration_end(g);
        int l = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const mpt_node *n = g->nodes[i];
            if (!n->quant) continue;
            ck_assert_msg(*(const float *)n->quant->x_amax->data == amax_want[l], "%s: amax", n->name);
            ck_assert(*(const float *)n->quant->x_scale->data == amax_want[l] / 127.0f);
            l++;
        }
        ck_assert_int_eq(l, 3);
        /* the weights' codes and scales, and an integer forward of a third batch */
        for (int i = 0; i < t->n_params; i++) {
            mpt_node *n = mpt_quant_weight_node(g, t->weight[i]);
            if (!n) continue;
            const size_t bytes = mpt_tensor_nbytes(t->weight[i]);
            float *m = malloc(bytes);
            memcpy(m, t->weight[i]->data, bytes);
            mpt_quant_fake_weight(g, m, t->weight[i], MPT_QFORMAT_INT8, per_channel, n->quant->qw->data,
                                  n->quant->w_scales->data);
            free(m);
        }
        mpt_quant_set_mode(g, MPT_QUANT_INT8);
        for (int i = 0; i < QB; i++) idx[i] = 2 * QB + i;
        mpt_trainer_gather(t, d.train_images, d.train_labels, idx, d.dim, 0.0f, 1.0f);
        mpt_trainer_eval_batch(t);
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i]->quant) assert_int8_node(g->nodes[i]);
        mpt_trainer_free(&t);
        mpt_backend_free(&b);
    }
    mpt_mnist_free(&d);
}
END_TEST

static Suite *quant_suite(void) {
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("kernels");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gemm_i8_exact_where_fp32_rounds);
    tcase_add_test(tc, test_gemm_i8_largest_k);
    tcase_add_test(tc, test_gemm_i8_random);
    tcase_add_test(tc, test_conv_i8);
    tcase_add_test(tc, test_fake_quant);
    tcase_add_test(tc, test_quantize_activation);
    suite_add_tcase(s, tc);
    TCase *tq = tcase_create("qat");
    tcase_set_timeout(tq, 60);
    tcase_add_test(tq, test_qat_ste);
    tcase_add_test(tq, test_ptq_int8_forward);
    suite_add_tcase(s, tq);
    return s;
}

int main(void) { return mpt_test_run(quant_suite()); }
