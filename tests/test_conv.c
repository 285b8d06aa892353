/*
 * tests/test_conv.c - the CPU convolution (kernels/cpu/conv.c) against a naive FP64 convolution.
 *
 * For random shapes (kernel 1/3/5, stride 1/2, pad 0/1/2, 1x1 pointwise included) and each math mode
 * (FP32, TF32, F16, BF16), forward, backward-data and backward-filter are compared element by element with
 * the same formulas evaluated in double on the *stored* operands (cross-correlation, zero padding, as
 * torch.nn.functional.conv2d). Each element's bound follows the standard error analysis of a recursive sum
 * (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1): with L terms summed in
 * FP32, |fl(sum) - sum| <= gamma_L * sum|terms|, gamma_L = L*u32/(1 - L*u32) <= 2*L*u32 here. Then:
 *   operand rounding  TF32 only (F32 data rounded to 10 mantissa bits, both factors):
 *                     |a*b - tf(a)*tf(b)| <= (2*u_tf32 + u_tf32^2)*|a*b|; F16/BF16 data is already stored
 *                     in its format, FP32 is used as is.
 *   output rounding   u_out*|result| + eta_out (half the smallest subnormal of the output dtype) when the
 *                     output is F16/BF16; FP32 outputs (dw, db, and y/dx in the fp32/tf32 modes) have the
 *                     rounding of their last addition inside gamma_L.
 * L is the reduction length plus the accumulated term: forward C*R*S + 1 (bias), backward-data K*R*S + 1
 * (the old dx), backward-filter N*P*Q + 1 (the old dw).
 * test_conv_bits_*: every pass equals, bit for bit, per-image GEMMs of the math mode on the test's own im2col (see
 * there), in each math mode and the native kernel set, and under the h100 and a100 summation models (--accum-model:
 * the per-image GEMMs then sum as those Tensor Cores do, which test_cpu_kernels pins against mpt_tc_gemm; conv.c must
 * not run them as FP32 GEMMs on operands it converted itself, which the engine would sum).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "harness.h"

/* Check's ck_assert* records every passing assertion through a syscall (its "last location" mark), which
 * costs seconds over millions of element checks: these only call into Check when the condition fails. */
#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)
#define EXPECT1(cond) EXPECT(cond, "failed: %s", #cond)
#define EXPECT_EQ_U(a, b)                                                                            \
    do {                                                                                             \
        unsigned long long x_ = (a), y_ = (b);                                                       \
        EXPECT(x_ == y_, "%s == 0x%llx, expected 0x%llx", #a, x_, y_);                               \
    } while (0)

static const double U32 = 0x1p-24;

static mpt_dtype dtype_of(mpt_math m) {
    return m == MPT_MATH_F16 ? MPT_DTYPE_F16 : m == MPT_MATH_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}
/* Unit roundoff and half the smallest subnormal of a storage dtype (0 for FP32 outputs: see above). */
static double u_out(mpt_dtype t) { return t == MPT_DTYPE_F16 ? 0x1p-11 : t == MPT_DTYPE_BF16 ? 0x1p-8 : 0.0; }
static double eta_out(mpt_dtype t) { return t == MPT_DTYPE_F16 ? 0x1p-25 : t == MPT_DTYPE_BF16 ? 0x1p-134 : 0.0; }
/* Relative error of a product of two operands rounded to the math mode's format from stored data. */
static double op_err(mpt_math m) { return m == MPT_MATH_TF32 ? 2 * 0x1p-11 + 0x1p-22 : 0.0; }

/* Stores a uniform value in [-1, 1) in element i of buffer p of dtype t, returns the stored value. */
static double put_random(tests_rng *r, void *p, mpt_dtype t, int64_t i) {
    mpt_store_f32(p, t, i, (float)tests_uniform(r, -1.0, 1.0));
    return mpt_load_f32(p, t, i);
}

static void *fill(tests_rng *r, mpt_dtype t, int64_t n) {
    void *p = malloc((size_t)n * mpt_dtype_size(t) + 1);
    ck_assert_ptr_nonnull(p);
    for (int64_t i = 0; i < n; i++) put_random(r, p, t, i);
    return p;
}

static double ld(const void *p, mpt_dtype t, int64_t i) { return mpt_load_f32(p, t, i); }

/* Checks |got - ref| <= bound for one element, with a message naming it. */
static void check_elem(const char *what, const char *math, int64_t i, double got, double ref, double bound) {
    EXPECT(fabs(got - ref) <= bound, "%s (%s) element %lld: got %.9g, reference %.9g, |diff| %.3g > bound %.3g",
                  what, math, (long long)i, got, ref, fabs(got - ref), bound);
}

/* The arguments of the three passes over these buffers (dtype: the math mode's). */
static mpt_conv_args conv_args(mpt_conv_shape s, mpt_math math, void *x, void *w, void *bias, void *y, void *dy,
                               void *dx, float *dw, float *db, const char *tag, int accumulate) {
    mpt_conv_args a = {0};
    a.s = s;
    a.math = math;
    a.dtype = dtype_of(math);
    a.x = x;
    a.w = w;
    a.bias = bias;
    a.y = y;
    a.dy = dy;
    a.dx = dx;
    a.dw = dw;
    a.db = db;
    a.tag = tag;
    a.accumulate = accumulate;
    return a;
}

/* One random configuration in one math mode: all three passes. */
static void run_case(mpt_backend *be, tests_rng *r, mpt_math math, mpt_conv_shape s, int with_bias) {
    s.P = (s.H + 2 * s.pad_h - s.R) / s.stride_h + 1;
    s.Q = (s.W + 2 * s.pad_w - s.S) / s.stride_w + 1;
    const mpt_dtype t = dtype_of(math);
    const char *mn = mpt_math_name(math);
    const int64_t nx = (int64_t)s.N * s.C * s.H * s.W, nw = (int64_t)s.K * s.C * s.R * s.S;
    const int64_t ny = (int64_t)s.N * s.K * s.P * s.Q;
    void *x = fill(r, t, nx), *w = fill(r, t, nw), *bias = fill(r, t, s.K), *dy = fill(r, t, ny);
    void *dx = fill(r, t, nx), *dx0 = malloc((size_t)nx * mpt_dtype_size(t));
    float *dw = fill(r, MPT_DTYPE_F32, nw), *dw0 = malloc((size_t)nw * sizeof(float));
    float *db = fill(r, MPT_DTYPE_F32, s.K), *db0 = malloc((size_t)s.K * sizeof(float));
    void *y = malloc((size_t)ny * mpt_dtype_size(t));
    memcpy(dx0, dx, (size_t)nx * mpt_dtype_size(t));
    memcpy(dw0, dw, (size_t)nw * sizeof(float));
    memcpy(db0, db, (size_t)s.K * sizeof(float));
    memset(y, 0xff, (size_t)ny * mpt_dtype_size(t)); /* NaN patterns: the forward pass must overwrite y */

    /* the backward passes add to the prefilled dx, dw, db */
    mpt_conv_args a = conv_args(s, math, x, w, with_bias ? bias : NULL, y, dy, dx, dw, db, "test", 1);
    ck_assert_int_eq(mpt_backend_reserve_workspace(be, be->conv2d_workspace(be, &a)), MPT_OK);
    be->conv2d_forward(be, &a);
    be->conv2d_backward_data(be, &a);
    be->conv2d_backward_filter(be, &a);

    const double ue = u_out(t), eta = eta_out(t), oe = op_err(math);
    /* forward */
    for (int n = 0; n < s.N; n++)
        for (int k = 0; k < s.K; k++)
            for (int p = 0; p < s.P; p++)
                for (int q = 0; q < s.Q; q++) {
                    double ref = with_bias ? ld(bias, t, k) : 0.0, mag = fabs(ref), pmag = 0.0;
                    for (int c = 0; c < s.C; c++)
                        for (int rr = 0; rr < s.R; rr++)
                            for (int ss = 0; ss < s.S; ss++) {
                                int h = p * s.stride_h - s.pad_h + rr, ww = q * s.stride_w - s.pad_w + ss;
                                if (h < 0 || h >= s.H || ww < 0 || ww >= s.W) continue;
                                double prod = ld(w, t, ((int64_t)(k * s.C + c) * s.R + rr) * s.S + ss) *
                                              ld(x, t, ((int64_t)(n * s.C + c) * s.H + h) * s.W + ww);
                                ref += prod;
                                pmag += fabs(prod);
                            }
                    mag += pmag;
                    double L = (double)s.C * s.R * s.S + 1;
                    double e_fp32 = 2 * L * U32 * mag + oe * pmag;
                    double bound = e_fp32 + ue * (fabs(ref) + e_fp32) + eta;
                    int64_t i = (((int64_t)n * s.K + k) * s.P + p) * s.Q + q;
                    check_elem("forward y", mn, i, ld(y, t, i), ref, bound);
                }
    /* backward-data: dx = dx0 + sum over the taps that read x[n,c,h,w] of w * dy */
    for (int n = 0; n < s.N; n++)
        for (int c = 0; c < s.C; c++)
            for (int h = 0; h < s.H; h++)
                for (int ww = 0; ww < s.W; ww++) {
                    int64_t i = (((int64_t)n * s.C + c) * s.H + h) * s.W + ww;
                    double ref = ld(dx0, t, i), mag = fabs(ref), pmag = 0.0;
                    for (int k = 0; k < s.K; k++)
                        for (int rr = 0; rr < s.R; rr++)
                            for (int ss = 0; ss < s.S; ss++) {
                                int ph = h + s.pad_h - rr, qw = ww + s.pad_w - ss;
                                if (ph < 0 || qw < 0 || ph % s.stride_h || qw % s.stride_w) continue;
                                int p = ph / s.stride_h, q = qw / s.stride_w;
                                if (p >= s.P || q >= s.Q) continue;
                                double prod = ld(w, t, ((int64_t)(k * s.C + c) * s.R + rr) * s.S + ss) *
                                              ld(dy, t, (((int64_t)n * s.K + k) * s.P + p) * s.Q + q);
                                ref += prod;
                                pmag += fabs(prod);
                            }
                    mag += pmag;
                    double L = (double)s.K * s.R * s.S + 1;
                    double e_fp32 = 2 * L * U32 * mag + oe * pmag;
                    double bound = e_fp32 + ue * (fabs(ref) + e_fp32) + eta;
                    check_elem("backward-data dx", mn, i, ld(dx, t, i), ref, bound);
                }
    /* backward-filter: dw = dw0 + sum_{n,p,q} dy * x (FP32 output); db = db0 + sum dy */
    for (int k = 0; k < s.K; k++) {
        for (int c = 0; c < s.C; c++)
            for (int rr = 0; rr < s.R; rr++)
                for (int ss = 0; ss < s.S; ss++) {
                    int64_t i = ((int64_t)(k * s.C + c) * s.R + rr) * s.S + ss;
                    double ref = dw0[i], mag = fabs(ref), pmag = 0.0;
                    for (int n = 0; n < s.N; n++)
                        for (int p = 0; p < s.P; p++)
                            for (int q = 0; q < s.Q; q++) {
                                int h = p * s.stride_h - s.pad_h + rr, ww = q * s.stride_w - s.pad_w + ss;
                                if (h < 0 || h >= s.H || ww < 0 || ww >= s.W) continue;
                                double prod = ld(dy, t, (((int64_t)n * s.K + k) * s.P + p) * s.Q + q) *
                                              ld(x, t, (((int64_t)n * s.C + c) * s.H + h) * s.W + ww);
                                ref += prod;
                                pmag += fabs(prod);
                            }
                    mag += pmag;
                    double L = (double)s.N * s.P * s.Q + 1;
                    check_elem("backward-filter dw", mn, i, dw[i], ref, 2 * L * U32 * mag + oe * pmag);
                }
        double ref = db0[k], mag = fabs(ref);
        for (int n = 0; n < s.N; n++)
            for (int64_t j = 0; j < (int64_t)s.P * s.Q; j++) {
                double v = ld(dy, t, ((int64_t)n * s.K + k) * s.P * s.Q + j);
                ref += v;
                mag += fabs(v);
            }
        check_elem("backward-filter db", mn, k, db[k], ref, 2 * ((double)s.N * s.P * s.Q + 1) * U32 * mag);
    }
    free(x); free(w); free(bias); free(dy); free(dx); free(dx0); free(dw); free(dw0); free(db); free(db0); free(y);
}

static mpt_conv_shape random_shape(tests_rng *r) {
    static const int ks[3] = {1, 3, 5};
    mpt_conv_shape s = {0};
    s.N = tests_int(r, 1, 3);
    s.C = tests_int(r, 1, 5);
    s.K = tests_int(r, 1, 6);
    s.R = ks[tests_int(r, 0, 2)];
    s.S = tests_int(r, 0, 3) == 0 ? ks[tests_int(r, 0, 2)] : s.R; /* mostly square, sometimes not */
    s.pad_h = tests_int(r, 0, 2);
    s.pad_w = tests_int(r, 0, 3) == 0 ? tests_int(r, 0, 2) : s.pad_h;
    s.stride_h = tests_int(r, 1, 2);
    s.stride_w = tests_int(r, 0, 3) == 0 ? tests_int(r, 1, 2) : s.stride_h;
    s.H = tests_int(r, 5, 13);
    s.W = tests_int(r, 5, 13);
    return s;
}

static void run_math(mpt_math math, uint64_t seed) {
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {seed};
    for (int it = 0; it < 24; it++) run_case(be, &r, math, random_shape(&r), it % 4 != 3);
    /* pointwise (x is its own column matrix), and a LeNet-like layer with K*C*R*S = 150 taps */
    mpt_conv_shape pw = {.N = 2, .C = 3, .H = 7, .W = 6, .K = 4, .R = 1, .S = 1, .stride_h = 1, .stride_w = 1};
    run_case(be, &r, math, pw, 1);
    mpt_conv_shape lenet = {.N = 2, .C = 6, .H = 14, .W = 14, .K = 16, .R = 5, .S = 5, .stride_h = 1, .stride_w = 1};
    run_case(be, &r, math, lenet, 1);
    mpt_conv_shape strided = {.N = 1, .C = 2, .H = 16, .W = 15, .K = 3, .R = 3, .S = 3, .pad_h = 1, .pad_w = 1,
                              .stride_h = 2, .stride_w = 2};
    run_case(be, &r, math, strided, 0);
    mpt_backend_free(&be);
}

/* ---- bit for bit: each pass is per-image GEMMs of the math mode itself (kernels/cpu/conv.c's header) ----
 * The references below lower each image with their own im2col (bits copied, zeros in the padding), call the
 * backend's GEMM of the math mode on it (which converts the operands itself: TF32 rounding, F16/BF16 widening), and
 * combine the per-image results as conv.c's header defines: y_n = GEMM(w, col_n) with beta = 1 on y_n filled with the
 * bias; dx_n = round(dx_n + col2im(GEMM(w^T, dy_n))), terms added in (c, r, s, p, q) order; dw = (((dw + P_0) + P_1)
 * + ...) with P_n = GEMM(dy_n, col_n^T). conv.c converts the operands once per pass and runs FP32 GEMMs on them: these
 * tests fail if that changes a single bit. */

static void ref_im2col(void *col, const void *x, mpt_dtype t, const mpt_conv_shape *s, int n) {
    const int64_t PQ = (int64_t)s->P * s->Q;
    for (int c = 0; c < s->C; c++)
        for (int r = 0; r < s->R; r++)
            for (int u = 0; u < s->S; u++)
                for (int p = 0; p < s->P; p++)
                    for (int q = 0; q < s->Q; q++) {
                        const int h = p * s->stride_h - s->pad_h + r, w = q * s->stride_w - s->pad_w + u;
                        const int64_t row = ((int64_t)c * s->R + r) * s->S + u, i = row * PQ + (int64_t)p * s->Q + q;
                        float v = 0.0f;
                        if (h >= 0 && h < s->H && w >= 0 && w < s->W)
                            v = mpt_load_f32(x, t, (((int64_t)n * s->C + c) * s->H + h) * s->W + w);
                        mpt_store_f32(col, t, i, v); /* exact: v is a value of t */
                    }
}

static void ref_gemm(mpt_backend *be, mpt_math m, mpt_dtype t, int ta, int tb, int64_t M, int64_t N, int64_t K,
                     const void *A, const void *B, void *C, mpt_dtype ct, float beta) {
    mpt_gemm_args g = {0};
    g.trans_a = ta;
    g.trans_b = tb;
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = A;
    g.B = B;
    g.C = C;
    g.a_dtype = g.b_dtype = t;
    g.c_dtype = ct;
    g.alpha = 1.0f;
    g.beta = beta;
    g.math = m;
    g.epilogue = MPT_EPILOGUE_NONE;
    g.tag = "reference";
    ck_assert_int_eq(mpt_backend_reserve_workspace(be, be->gemm_workspace(be, &g)), MPT_OK);
    be->gemm(be, &g);
}

static void expect_same_bits(const char *what, const char *mn, const mpt_conv_shape *s, const void *got,
                             const void *ref, mpt_dtype t, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t a = 0, b = 0;
        memcpy(&a, (const char *)got + (size_t)i * mpt_dtype_size(t), mpt_dtype_size(t));
        memcpy(&b, (const char *)ref + (size_t)i * mpt_dtype_size(t), mpt_dtype_size(t));
        EXPECT(a == b, "%s (%s, N=%d C=%d %dx%d K=%d %dx%d pad %d,%d stride %d,%d) element %lld: 0x%x, per-image "
               "GEMMs give 0x%x (%.9g vs %.9g)", what, mn, s->N, s->C, s->H, s->W, s->K, s->R, s->S, s->pad_h,
               s->pad_w, s->stride_h, s->stride_w, (long long)i, a, b, mpt_load_f32(got, t, i),
               mpt_load_f32(ref, t, i));
    }
}

static void bits_case(mpt_backend *be, tests_rng *r, mpt_math math, mpt_conv_shape s, int with_bias, int accumulate) {
    s.P = (s.H + 2 * s.pad_h - s.R) / s.stride_h + 1;
    s.Q = (s.W + 2 * s.pad_w - s.S) / s.stride_w + 1;
    const mpt_dtype t = dtype_of(math);
    const size_t es = mpt_dtype_size(t);
    const char *mn = mpt_math_name(math);
    const int64_t CHW = (int64_t)s.C * s.H * s.W, CRS = (int64_t)s.C * s.R * s.S, PQ = (int64_t)s.P * s.Q;
    const int64_t nx = s.N * CHW, nw = s.K * CRS, KPQ = s.K * PQ, ny = s.N * KPQ;
    void *x = fill(r, t, nx), *w = fill(r, t, nw), *bias = fill(r, t, s.K), *dy = fill(r, t, ny);
    void *dx = fill(r, t, nx), *dx_ref = malloc((size_t)nx * es + 1);
    float *dw = fill(r, MPT_DTYPE_F32, nw), *dw_ref = malloc((size_t)nw * sizeof(float) + 1);
    float *db = fill(r, MPT_DTYPE_F32, s.K);
    void *y = malloc((size_t)ny * es + 1), *y_ref = malloc((size_t)ny * es + 1);
    void *col = malloc((size_t)(CRS * PQ) * es + 1);
    float *dcol = malloc((size_t)(CRS * PQ) * sizeof(float) + 1), *img = malloc((size_t)CHW * sizeof(float) + 1);
    float *part = malloc((size_t)nw * sizeof(float) + 1);
    memcpy(dx_ref, dx, (size_t)nx * es);
    memcpy(dw_ref, dw, (size_t)nw * sizeof(float));

    /* the references: per-image GEMMs of the math mode */
    for (int n = 0; n < s.N; n++) {
        char *yn = (char *)y_ref + (size_t)(n * KPQ) * es;
        const char *dyn = (const char *)dy + (size_t)(n * KPQ) * es;
        for (int k = 0; k < s.K; k++)
            for (int64_t i = 0; i < PQ; i++) mpt_store_f32(yn, t, k * PQ + i, with_bias ? (float)ld(bias, t, k) : 0.0f);
        ref_im2col(col, x, t, &s, n);
        ref_gemm(be, math, t, 0, 0, s.K, PQ, CRS, w, col, yn, t, with_bias ? 1.0f : 0.0f);
        /* backward-data */
        ref_gemm(be, math, t, 1, 0, CRS, PQ, s.K, w, dyn, dcol, MPT_DTYPE_F32, 0.0f);
        for (int64_t i = 0; i < CHW; i++) img[i] = 0.0f;
        for (int c = 0; c < s.C; c++)
            for (int rr = 0; rr < s.R; rr++)
                for (int u = 0; u < s.S; u++)
                    for (int p = 0; p < s.P; p++)
                        for (int q = 0; q < s.Q; q++) {
                            const int h = p * s.stride_h - s.pad_h + rr, ww = q * s.stride_w - s.pad_w + u;
                            if (h < 0 || h >= s.H || ww < 0 || ww >= s.W) continue;
                            float *e = &img[((int64_t)c * s.H + h) * s.W + ww];
                            *e = *e + dcol[(((int64_t)c * s.R + rr) * s.S + u) * PQ + (int64_t)p * s.Q + q];
                        }
        for (int64_t i = 0; i < CHW; i++) {
            float v = accumulate ? (float)ld(dx_ref, t, n * CHW + i) + img[i] : img[i];
            mpt_store_f32(dx_ref, t, n * CHW + i, v);
        }
        /* backward-filter */
        ref_gemm(be, math, t, 0, 1, s.K, CRS, PQ, dyn, col, part, MPT_DTYPE_F32, 0.0f);
        for (int64_t e = 0; e < nw; e++) dw_ref[e] = n == 0 && !accumulate ? part[e] : dw_ref[e] + part[e];
    }

    mpt_conv_args a = conv_args(s, math, x, w, with_bias ? bias : NULL, y, dy, dx, dw, db, "bits", accumulate);
    ck_assert_int_eq(mpt_backend_reserve_workspace(be, be->conv2d_workspace(be, &a)), MPT_OK);
    be->conv2d_forward(be, &a);
    be->conv2d_backward_data(be, &a);
    be->conv2d_backward_filter(be, &a);
    expect_same_bits("forward y", mn, &s, y, y_ref, t, ny);
    expect_same_bits("backward-data dx", mn, &s, dx, dx_ref, t, nx);
    expect_same_bits("backward-filter dw", mn, &s, dw, dw_ref, MPT_DTYPE_F32, nw);
    free(x); free(w); free(bias); free(dy); free(dx); free(dx_ref); free(dw); free(dw_ref); free(db);
    free(y); free(y_ref); free(col); free(dcol); free(img); free(part);
}

static void run_bits(mpt_math math, uint64_t seed, mpt_cpu_kernels set, mpt_accum_model accum) {
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert_int_eq(mpt_backend_cpu_set_kernels(be, set), MPT_OK);
    ck_assert_int_eq(mpt_backend_cpu_set_accum(be, accum), MPT_OK);
    tests_rng r = {seed};
    for (int it = 0; it < 16; it++) bits_case(be, &r, math, random_shape(&r), it % 4 != 3, it % 2);
    mpt_conv_shape pw = {.N = 3, .C = 3, .H = 7, .W = 6, .K = 4, .R = 1, .S = 1, .stride_h = 1, .stride_w = 1};
    bits_case(be, &r, math, pw, 1, 1);
    /* LeNet-5's two convolutions (c1 with padding 2), 20 images: more than one group of backward-filter partials */
    mpt_conv_shape c1 = {.N = 20, .C = 1, .H = 28, .W = 28, .K = 6, .R = 5, .S = 5, .pad_h = 2, .pad_w = 2,
                         .stride_h = 1, .stride_w = 1};
    bits_case(be, &r, math, c1, 1, 0);
    mpt_conv_shape c2 = {.N = 18, .C = 6, .H = 14, .W = 14, .K = 16, .R = 5, .S = 5, .stride_h = 1, .stride_w = 1};
    bits_case(be, &r, math, c2, 1, 1);
    mpt_backend_free(&be);
}

START_TEST(test_conv_bits_fp32) { run_bits(MPT_MATH_FP32, 21, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_IEEE); }
END_TEST
START_TEST(test_conv_bits_tf32) { run_bits(MPT_MATH_TF32, 22, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_IEEE); }
END_TEST
START_TEST(test_conv_bits_f16) { run_bits(MPT_MATH_F16, 23, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_IEEE); }
END_TEST
START_TEST(test_conv_bits_bf16) { run_bits(MPT_MATH_BF16, 24, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_IEEE); }
END_TEST
START_TEST(test_conv_bits_bf16_native) {
    char why[256];
    if (!mpt_cpu_native_available(why, sizeof why)) {
        printf("test_conv_bits_bf16_native: skipped, the native kernel set is unavailable here: %s\n", why);
        return;
    }
    run_bits(MPT_MATH_BF16, 25, MPT_CPU_KERNELS_NATIVE, MPT_ACCUM_MODEL_IEEE);
}
END_TEST

START_TEST(test_conv_bits_tf32_h100) { run_bits(MPT_MATH_TF32, 26, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_H100); }
END_TEST
START_TEST(test_conv_bits_f16_h100) { run_bits(MPT_MATH_F16, 27, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_H100); }
END_TEST
START_TEST(test_conv_bits_bf16_h100) { run_bits(MPT_MATH_BF16, 28, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_H100); }
END_TEST
START_TEST(test_conv_bits_f16_a100) { run_bits(MPT_MATH_F16, 29, MPT_CPU_KERNELS_EMULATE, MPT_ACCUM_MODEL_A100); }
END_TEST

START_TEST(test_conv_fp32) { run_math(MPT_MATH_FP32, 11); }
END_TEST
START_TEST(test_conv_tf32) { run_math(MPT_MATH_TF32, 12); }
END_TEST
START_TEST(test_conv_f16) { run_math(MPT_MATH_F16, 13); }
END_TEST
START_TEST(test_conv_bf16) { run_math(MPT_MATH_BF16, 14); }
END_TEST

int main(void) {
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_conv_fp32);
    tcase_add_test(tc, test_conv_tf32);
    tcase_add_test(tc, test_conv_f16);
    tcase_add_test(tc, test_conv_bf16);
    tcase_add_test(tc, test_conv_bits_fp32);
    tcase_add_test(tc, test_conv_bits_tf32);
    tcase_add_test(tc, test_conv_bits_f16);
    tcase_add_test(tc, test_conv_bits_bf16);
    tcase_add_test(tc, test_conv_bits_bf16_native);
    tcase_add_test(tc, test_conv_bits_tf32_h100);
    tcase_add_test(tc, test_conv_bits_f16_h100);
    tcase_add_test(tc, test_conv_bits_bf16_h100);
    tcase_add_test(tc, test_conv_bits_f16_a100);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
