/*
 * tests/test_layers.c - every layer of engine/layers, forward and backward, on the CPU backend.
 *
 * For each layer, on random shapes and values (fixed seeds), the engine's forward output and gradients are
 * compared with a naive FP64 reference written here, and the reference's gradients are themselves checked
 * against central finite differences of the reference forward (so a wrong reference cannot hide a wrong
 * layer). Inputs are stored in the tensor's dtype first and the reference runs on the stored values, so the
 * only error left is the kernel's arithmetic:
 *   GEMM/conv element = sum of K terms t_k (+ bias):   |got - ref| <= e + u_out (|ref| + e) + tiny_out,
 *   e = (2 u_op + (K + 2) 2^-24) * sum |t_k|,
 * with u_op the operand rounding of the math mode (2^-11 for TF32; 0 when the operands are already stored in
 * the operand format: FP32, F16, BF16), (K + 2) 2^-24 the FP32 summation bound (gamma_K, Higham 2002 3.1,
 * plus the epilogue add), u_out the unit roundoff of the output dtype (2^-24 F32, 2^-11 F16, 2^-8 BF16) and
 * tiny_out its smallest subnormal. Elementwise layers (relu, maxpool forward) must be exact.
 *
 * The loss seed: mpt_softmax_xent backward scales by *g->loss_scale, set here to a backend float S.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layers/layers.h"
#include "engine/numerics.h"
#include "engine/rng.h"
#include "tests/harness.h"

/* ck_assert_msg without Check's per-call bookkeeping (a pipe write per assertion in fork mode): used in
 * element loops. */
#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

#define U32 0x1p-24

/* ---- helpers ------------------------------------------------------------------------------------------- */

static double u_store(mpt_dtype t) {
    return t == MPT_DTYPE_F16 ? 0x1p-11 : t == MPT_DTYPE_BF16 ? 0x1p-8 : U32;
}
static double tiny_store(mpt_dtype t) {
    return t == MPT_DTYPE_F16 ? 0x1p-24 : t == MPT_DTYPE_BF16 ? 0x1p-133 : 0x1p-149;
}

static double *dalloc(int64_t n) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
    ck_assert(p != NULL);
    return p;
}

/* Stores vals (RNE) into t's data (CPU: direct pointer) and replaces vals by the values actually stored. */
static void store(mpt_tensor *t, double *vals) {
    int64_t n = mpt_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        mpt_store_f32(t->data, t->dtype, i, (float)vals[i]);
        vals[i] = mpt_load_f32(t->data, t->dtype, i);
    }
}

/* Random values in [lo, hi) stored in t; returns the stored values (caller frees). */
static double *rand_stored(mpt_tensor *t, tests_rng *r, double lo, double hi) {
    int64_t n = mpt_tensor_numel(t);
    double *v = dalloc(n);
    for (int64_t i = 0; i < n; i++) v[i] = tests_uniform(r, lo, hi);
    store(t, v);
    return v;
}

/* The bound of the header comment for each element of t: ref and abssum from the FP64 reference, kred the
 * longest reduction (terms per output element), u_op the operand rounding of the math mode. */
static void expect_close(const char *what, const mpt_tensor *t, const double *ref, const double *abssum,
                         double kred, double u_op) {
    int64_t n = mpt_tensor_numel(t);
    double uo = u_store(t->dtype), tiny = tiny_store(t->dtype);
    for (int64_t i = 0; i < n; i++) {
        double got = mpt_load_f32(t->data, t->dtype, i);
        double e = (2.0 * u_op + (kred + 2.0) * U32) * abssum[i];
        double bound = e + uo * (fabs(ref[i]) + e) + tiny;
        if (!(fabs(got - ref[i]) <= bound))
            ck_abort_msg("%s[%lld] (%s): got %.9g, FP64 reference %.9g, |diff| %.3g > bound %.3g", what, (long long)i,
                         mpt_dtype_name(t->dtype), got, ref[i], fabs(got - ref[i]), bound);
    }
}

/* Exact equality of t with ref (elementwise layers whose result is representable). */
static void expect_exact(const char *what, const mpt_tensor *t, const double *ref) {
    int64_t n = mpt_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double got = mpt_load_f32(t->data, t->dtype, i);
        if (!(got == ref[i]))
            ck_abort_msg("%s[%lld] (%s): got %.9g, expected exactly %.9g", what, (long long)i,
                         mpt_dtype_name(t->dtype), got, ref[i]);
    }
}

/* Central finite differences of a scalar FP64 function f(ctx) with respect to theta[0..n), against the
 * reference gradient grad. h = 1e-6 (1 + |theta|): truncation O(h^2 f''') ~ 1e-12 for the smooth layers,
 * cancellation ~ 2^-52 |L| / h ~ 1e-10 |L|; 1e-6 (1 + |g|) leaves four orders of margin yet catches any
 * wrong index, sign or factor. Entries listed in skip (non-differentiable points) are not checked. */
static void fd_check(const char *what, double *theta, int64_t n, const double *grad, double (*f)(void *),
                     void *ctx, const unsigned char *skip) {
    for (int64_t i = 0; i < n; i++) {
        if (skip && skip[i]) continue;
        double save = theta[i], h = 1e-6 * (1.0 + fabs(save));
        theta[i] = save + h;
        double lp = f(ctx);
        theta[i] = save - h;
        double lm = f(ctx);
        theta[i] = save;
        double fd = (lp - lm) / (2.0 * h);
        if (!(fabs(fd - grad[i]) <= 1e-6 * (1.0 + fabs(grad[i]))))
            ck_abort_msg("finite differences of the FP64 reference, %s[%lld]: analytic %.12g, central difference "
                         "%.12g", what, (long long)i, grad[i], fd);
    }
}

/* Gradients accumulate (+=): pre-fills gradient tensor t with random stored values g0 and folds them into the
 * reference (ref += g0, abssum += |g0|), so a kernel that overwrites instead of accumulating fails. */
static void prefill_grad(mpt_tensor *t, tests_rng *r, double **g0) {
    *g0 = rand_stored(t, r, -0.5, 0.5);
}
static void fold_prefill(const double *g0, double *ref, double *abssum, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        ref[i] += g0[i];
        abssum[i] += fabs(g0[i]);
    }
}

static mpt_policy policy_for_mode(mpt_precision mode) {
    int tf32 = mode == MPT_PRECISION_TF32;
    return mpt_policy_make_explicit(mode, tf32, tf32);
}

static mpt_math expected_math(mpt_precision mode) {
    switch (mode) {
    case MPT_PRECISION_TF32: return MPT_MATH_TF32;
    case MPT_PRECISION_FP16: return MPT_MATH_F16;
    case MPT_PRECISION_BF16: return MPT_MATH_BF16;
    default: return MPT_MATH_FP32;
    }
}

/* An activation tensor that carries a gradient (as if produced by an earlier layer), so dx is computed. */
static mpt_tensor *act_with_grad(mpt_graph *g, const char *name, mpt_dtype dt, int ndim, const int64_t *shape) {
    mpt_tensor *x = mpt_graph_tensor(g, name, dt, MPT_MEM_ACT, ndim, shape);
    mpt_graph_grad(g, x);
    return x;
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- linear ---------------------------------------------------------------------------------------------- */

/* y[B,out] = x W^T + b; abs sums for the bounds (yabs may be NULL). */
static void ref_linear_fwd(int B, int in, int out, const double *x, const double *w, const double *b, double *y,
                           double *yabs) {
    for (int i = 0; i < B; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o], a = fabs(b[o]);
            for (int k = 0; k < in; k++) {
                s += x[i * in + k] * w[o * in + k];
                a += fabs(x[i * in + k] * w[o * in + k]);
            }
            y[i * out + o] = s;
            if (yabs) yabs[i * out + o] = a;
        }
}

/* dx = dy W, dW = dy^T x, db = sum_rows dy, with abs sums. */
static void ref_linear_bwd(int B, int in, int out, const double *x, const double *w, const double *dy, double *dx,
                           double *dxa, double *dw, double *dwa, double *db, double *dba) {
    for (int i = 0; i < B; i++)
        for (int k = 0; k < in; k++) {
            double s = 0, a = 0;
            for (int o = 0; o < out; o++) {
                s += dy[i * out + o] * w[o * in + k];
                a += fabs(dy[i * out + o] * w[o * in + k]);
            }
            dx[i * in + k] = s;
            dxa[i * in + k] = a;
        }
    for (int o = 0; o < out; o++) {
        for (int k = 0; k < in; k++) {
            double s = 0, a = 0;
            for (int i = 0; i < B; i++) {
                s += dy[i * out + o] * x[i * in + k];
                a += fabs(dy[i * out + o] * x[i * in + k]);
            }
            dw[o * in + k] = s;
            dwa[o * in + k] = a;
        }
        double s = 0, a = 0;
        for (int i = 0; i < B; i++) {
            s += dy[i * out + o];
            a += fabs(dy[i * out + o]);
        }
        db[o] = s;
        dba[o] = a;
    }
}

typedef struct {
    int B, in, out;
    double *x, *w, *b;
    const double *R; /* dL/dy: L = sum R .* y */
} linear_ctx;

static double linear_loss(void *c) {
    linear_ctx *L = c;
    double *y = dalloc((int64_t)L->B * L->out);
    ref_linear_fwd(L->B, L->in, L->out, L->x, L->w, L->b, y, NULL);
    double s = dot(L->R, y, (int64_t)L->B * L->out);
    free(y);
    return s;
}

static void linear_case(mpt_precision mode, int B, int in, int out, int with_dx, int fd, tests_rng *r) {
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    int64_t xs[2] = {B, in};
    mpt_tensor *x = with_dx ? act_with_grad(g, "x", dt, 2, xs) : mpt_input(g, 2, xs);
    mpt_tensor *y = mpt_linear(g, x, out, "fc");
    mpt_node *nd = g->nodes[g->n_nodes - 1];
    ck_assert_int_eq(nd->op, MPT_OP_LINEAR);
    ck_assert_int_eq(nd->math, expected_math(mode));
    ck_assert_int_eq(nd->compute_dtype, dt);
    ck_assert(y->ndim == 2 && y->shape[0] == B && y->shape[1] == out && y->dtype == dt && y->mem == MPT_MEM_ACT);
    ck_assert_int_eq(g->n_params, 2);
    ck_assert_int_eq(g->params[0].fan_in, in);
    ck_assert_int_eq(g->params[1].fan_in, in);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    mpt_tensor *w = mpt_graph_find(g, "fc.weight"), *b = mpt_graph_find(g, "fc.bias");
    ck_assert(w && b && w == g->params[0].weight && b == g->params[1].weight);
    ck_assert(w->dtype == dt && w->shape[0] == out && w->shape[1] == in && b->dtype == dt);
    ck_assert(w->grad->dtype == MPT_DTYPE_F32 && w->grad->mem == MPT_MEM_GRAD && b->grad->dtype == MPT_DTYPE_F32);
    ck_assert(with_dx ? x->grad != NULL : x->grad == NULL);

    double u_op = mode == MPT_PRECISION_TF32 ? 0x1p-11 : 0.0;
    double *xv = rand_stored(x, r, -1, 1), *wv = rand_stored(w, r, -1, 1), *bv = rand_stored(b, r, -1, 1);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_forward(g); /* y is overwritten, not accumulated */
    int64_t ny = (int64_t)B * out, nx = (int64_t)B * in, nw = (int64_t)out * in;
    double *yr = dalloc(ny), *ya = dalloc(ny);
    ref_linear_fwd(B, in, out, xv, wv, bv, yr, ya);
    expect_close("linear y", y, yr, ya, in + 1, u_op);

    double *R = rand_stored(y->grad, r, -1, 1), *gw0, *gb0, *gx0 = NULL;
    prefill_grad(w->grad, r, &gw0);
    prefill_grad(b->grad, r, &gb0);
    if (with_dx) prefill_grad(x->grad, r, &gx0);
    mpt_graph_backward(g);
    double *dx = dalloc(nx), *dxa = dalloc(nx), *dw = dalloc(nw), *dwa = dalloc(nw), *db = dalloc(out),
           *dba = dalloc(out);
    ref_linear_bwd(B, in, out, xv, wv, R, dx, dxa, dw, dwa, db, dba);
    double *dwt = dalloc(nw), *dwta = dalloc(nw), *dbt = dalloc(out), *dbta = dalloc(out), *dxt = dalloc(nx),
           *dxta = dalloc(nx);
    memcpy(dwt, dw, nw * sizeof *dw); memcpy(dwta, dwa, nw * sizeof *dw);
    memcpy(dbt, db, out * sizeof *db); memcpy(dbta, dba, out * sizeof *db);
    memcpy(dxt, dx, nx * sizeof *dx); memcpy(dxta, dxa, nx * sizeof *dx);
    fold_prefill(gw0, dwt, dwta, nw);
    fold_prefill(gb0, dbt, dbta, out);
    if (with_dx) fold_prefill(gx0, dxt, dxta, nx);
    expect_close("linear dW", w->grad, dwt, dwta, B + 1, u_op);
    expect_close("linear db", b->grad, dbt, dbta, B + 1, 0.0);
    if (with_dx) expect_close("linear dx", x->grad, dxt, dxta, out + 1, u_op);
    free(gw0); free(gb0); free(gx0); free(dwt); free(dwta); free(dbt); free(dbta); free(dxt); free(dxta);

    if (fd) {
        linear_ctx c = {B, in, out, xv, wv, bv, R};
        fd_check("linear dx", xv, nx, dx, linear_loss, &c, NULL);
        fd_check("linear dW", wv, nw, dw, linear_loss, &c, NULL);
        fd_check("linear db", bv, out, db, linear_loss, &c, NULL);
    }
    free(xv); free(wv); free(bv); free(yr); free(ya); free(R);
    free(dx); free(dxa); free(dw); free(dwa); free(db); free(dba);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

static void linear_mode(mpt_precision mode, uint64_t seed, int fd) {
    tests_rng r = {seed};
    for (int t = 0; t < 4; t++)
        linear_case(mode, tests_int(&r, 1, 8), tests_int(&r, 1, 64), tests_int(&r, 1, 24), t % 2 == 0, fd, &r);
    linear_case(mode, 16, 257, 33, 1, 0, &r); /* a long reduction: the bound grows with K */
}

START_TEST(test_linear_fp32) { linear_mode(MPT_PRECISION_FP32, 0x11, 1); }
END_TEST
START_TEST(test_linear_tf32) { linear_mode(MPT_PRECISION_TF32, 0x12, 0); }
END_TEST
START_TEST(test_linear_fp16) { linear_mode(MPT_PRECISION_FP16, 0x13, 0); }
END_TEST
START_TEST(test_linear_bf16) { linear_mode(MPT_PRECISION_BF16, 0x14, 0); }
END_TEST

/* ---- conv2d ---------------------------------------------------------------------------------------------- */

typedef struct { int N, C, H, W, K, k, stride, pad, P, Q; } cshape;

static void ref_conv_fwd(const cshape *s, const double *x, const double *w, const double *b, double *y,
                         double *ya) {
    for (int n = 0; n < s->N; n++)
        for (int o = 0; o < s->K; o++)
            for (int p = 0; p < s->P; p++)
                for (int q = 0; q < s->Q; q++) {
                    double acc = b[o], a = fabs(b[o]);
                    for (int c = 0; c < s->C; c++)
                        for (int rr = 0; rr < s->k; rr++)
                            for (int ss = 0; ss < s->k; ss++) {
                                int h = p * s->stride - s->pad + rr, ww = q * s->stride - s->pad + ss;
                                if (h < 0 || h >= s->H || ww < 0 || ww >= s->W) continue;
                                double t = x[((n * s->C + c) * s->H + h) * s->W + ww] *
                                           w[((o * s->C + c) * s->k + rr) * s->k + ss];
                                acc += t;
                                a += fabs(t);
                            }
                    int64_t i = ((n * s->K + o) * s->P + p) * s->Q + q;
                    y[i] = acc;
                    if (ya) ya[i] = a;
                }
}

/* dx, dW, db by scattering every product of the forward (arrays must be zeroed by the caller). */
static void ref_conv_bwd(const cshape *s, const double *x, const double *w, const double *dy, double *dx,
                         double *dxa, double *dw, double *dwa, double *db, double *dba) {
    for (int n = 0; n < s->N; n++)
        for (int o = 0; o < s->K; o++)
            for (int p = 0; p < s->P; p++)
                for (int q = 0; q < s->Q; q++) {
                    double g = dy[((n * s->K + o) * s->P + p) * s->Q + q];
                    db[o] += g;
                    dba[o] += fabs(g);
                    for (int c = 0; c < s->C; c++)
                        for (int rr = 0; rr < s->k; rr++)
                            for (int ss = 0; ss < s->k; ss++) {
                                int h = p * s->stride - s->pad + rr, ww = q * s->stride - s->pad + ss;
                                if (h < 0 || h >= s->H || ww < 0 || ww >= s->W) continue;
                                int64_t ix = ((n * s->C + c) * s->H + h) * s->W + ww;
                                int64_t iw = ((o * s->C + c) * s->k + rr) * s->k + ss;
                                dx[ix] += g * w[iw];
                                dxa[ix] += fabs(g * w[iw]);
                                dw[iw] += g * x[ix];
                                dwa[iw] += fabs(g * x[ix]);
                            }
                }
}

typedef struct {
    cshape s;
    double *x, *w, *b;
    const double *R;
} conv_ctx;

static double conv_loss(void *c) {
    conv_ctx *C = c;
    int64_t ny = (int64_t)C->s.N * C->s.K * C->s.P * C->s.Q;
    double *y = dalloc(ny);
    ref_conv_fwd(&C->s, C->x, C->w, C->b, y, NULL);
    double v = dot(C->R, y, ny);
    free(y);
    return v;
}

static void conv_case(mpt_precision mode, cshape s, int with_dx, int fd, tests_rng *r) {
    s.P = (s.H + 2 * s.pad - s.k) / s.stride + 1;
    s.Q = (s.W + 2 * s.pad - s.k) / s.stride + 1;
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, s.N);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    int64_t xs[4] = {s.N, s.C, s.H, s.W};
    mpt_tensor *x = with_dx ? act_with_grad(g, "x", dt, 4, xs) : mpt_input(g, 4, xs);
    mpt_tensor *y = mpt_conv2d(g, x, s.K, s.k, s.stride, s.pad, "conv");
    mpt_node *nd = g->nodes[g->n_nodes - 1];
    ck_assert_int_eq(nd->op, MPT_OP_CONV2D);
    ck_assert_int_eq(nd->math, expected_math(mode));
    ck_assert_int_eq(nd->compute_dtype, dt);
    ck_assert(y->ndim == 4 && y->shape[0] == s.N && y->shape[1] == s.K && y->shape[2] == s.P &&
              y->shape[3] == s.Q && y->dtype == dt);
    ck_assert_int_eq(g->n_params, 2);
    ck_assert_int_eq(g->params[0].fan_in, s.C * s.k * s.k);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    mpt_tensor *w = mpt_graph_find(g, "conv.weight"), *b = mpt_graph_find(g, "conv.bias");
    ck_assert(w && b && w->ndim == 4 && w->shape[0] == s.K && w->shape[1] == s.C && w->shape[2] == s.k);
    ck_assert(w->grad->dtype == MPT_DTYPE_F32 && b->grad->dtype == MPT_DTYPE_F32);

    double u_op = mode == MPT_PRECISION_TF32 ? 0x1p-11 : 0.0;
    double *xv = rand_stored(x, r, -1, 1), *wv = rand_stored(w, r, -1, 1), *bv = rand_stored(b, r, -1, 1);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_forward(g); /* y is overwritten, not accumulated */
    int64_t ny = mpt_tensor_numel(y), nx = mpt_tensor_numel(x), nw = mpt_tensor_numel(w);
    double *yr = dalloc(ny), *ya = dalloc(ny);
    ref_conv_fwd(&s, xv, wv, bv, yr, ya);
    expect_close("conv y", y, yr, ya, s.C * s.k * s.k + 1, u_op);

    double *R = rand_stored(y->grad, r, -1, 1), *gw0, *gb0, *gx0 = NULL;
    prefill_grad(w->grad, r, &gw0);
    prefill_grad(b->grad, r, &gb0);
    if (with_dx) prefill_grad(x->grad, r, &gx0);
    mpt_graph_backward(g);
    double *dx = dalloc(nx), *dxa = dalloc(nx), *dw = dalloc(nw), *dwa = dalloc(nw), *db = dalloc(s.K),
           *dba = dalloc(s.K);
    ref_conv_bwd(&s, xv, wv, R, dx, dxa, dw, dwa, db, dba);
    /* the references as computed (for the finite differences below), and with the pre-filled values added */
    double *dwt = dalloc(nw), *dwta = dalloc(nw), *dbt = dalloc(s.K), *dbta = dalloc(s.K), *dxt = dalloc(nx),
           *dxta = dalloc(nx);
    memcpy(dwt, dw, nw * sizeof *dw); memcpy(dwta, dwa, nw * sizeof *dw);
    memcpy(dbt, db, s.K * sizeof *db); memcpy(dbta, dba, s.K * sizeof *db);
    memcpy(dxt, dx, nx * sizeof *dx); memcpy(dxta, dxa, nx * sizeof *dx);
    fold_prefill(gw0, dwt, dwta, nw);
    fold_prefill(gb0, dbt, dbta, s.K);
    if (with_dx) fold_prefill(gx0, dxt, dxta, nx);
    expect_close("conv dW", w->grad, dwt, dwta, (double)s.N * s.P * s.Q + 1, u_op);
    expect_close("conv db", b->grad, dbt, dbta, (double)s.N * s.P * s.Q + 1, 0.0);
    if (with_dx) expect_close("conv dx", x->grad, dxt, dxta, (double)s.K * s.k * s.k + 1, u_op);
    free(gw0); free(gb0); free(gx0); free(dwt); free(dwta); free(dbt); free(dbta); free(dxt); free(dxta);

    if (fd) {
        conv_ctx c = {s, xv, wv, bv, R};
        fd_check("conv dx", xv, nx, dx, conv_loss, &c, NULL);
        fd_check("conv dW", wv, nw, dw, conv_loss, &c, NULL);
        fd_check("conv db", bv, s.K, db, conv_loss, &c, NULL);
    }
    free(xv); free(wv); free(bv); free(yr); free(ya); free(R);
    free(dx); free(dxa); free(dw); free(dwa); free(db); free(dba);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

static cshape random_cshape(tests_rng *r) {
    cshape s = {0};
    s.N = tests_int(r, 1, 3);
    s.C = tests_int(r, 1, 4);
    s.K = tests_int(r, 1, 5);
    s.k = tests_int(r, 1, 5);
    s.pad = tests_int(r, 0, s.k / 2);
    s.stride = tests_int(r, 1, 2);
    int lo = s.k - 2 * s.pad > 1 ? s.k - 2 * s.pad : 1;
    s.H = tests_int(r, lo, 10);
    s.W = tests_int(r, lo, 10);
    return s;
}

static void conv_mode(mpt_precision mode, uint64_t seed, int fd) {
    tests_rng r = {seed};
    for (int t = 0; t < 5; t++) conv_case(mode, random_cshape(&r), t % 2 == 0, fd, &r);
    cshape big = {.N = 2, .C = 6, .H = 14, .W = 14, .K = 16, .k = 5, .stride = 1, .pad = 2};
    conv_case(mode, big, 1, 0, &r); /* LeNet-like: reductions of 150 (fwd), 400 (dx), 392 (dW) terms */
}

START_TEST(test_conv_fp32) { conv_mode(MPT_PRECISION_FP32, 0x21, 1); }
END_TEST
START_TEST(test_conv_tf32) { conv_mode(MPT_PRECISION_TF32, 0x22, 0); }
END_TEST
START_TEST(test_conv_fp16) { conv_mode(MPT_PRECISION_FP16, 0x23, 0); }
END_TEST
START_TEST(test_conv_bf16) { conv_mode(MPT_PRECISION_BF16, 0x24, 0); }
END_TEST

/* ---- relu ------------------------------------------------------------------------------------------------ */

typedef struct { int64_t n; double *x; const double *R; } relu_ctx;

static double relu_loss(void *c) {
    relu_ctx *L = c;
    double s = 0;
    for (int64_t i = 0; i < L->n; i++) s += L->R[i] * (L->x[i] > 0 ? L->x[i] : 0.0);
    return s;
}

static void relu_mode(mpt_precision mode, uint64_t seed) {
    tests_rng r = {seed};
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    int B = tests_int(&r, 1, 6);
    int64_t xs[3] = {B, tests_int(&r, 1, 7), tests_int(&r, 1, 9)};
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    mpt_tensor *x = act_with_grad(g, "x", dt, 3, xs);
    mpt_tensor *y = mpt_relu(g, x, "relu");
    ck_assert_int_eq(g->nodes[g->n_nodes - 1]->compute_dtype, dt);
    ck_assert(y->dtype == dt && y->ndim == 3 && y->shape[1] == xs[1] && y->shape[2] == xs[2] && y->grad);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    int64_t n = mpt_tensor_numel(x);
    double *xv = dalloc(n);
    unsigned char *kink = calloc((size_t)n, 1);
    for (int64_t i = 0; i < n; i++) {
        xv[i] = tests_uniform(&r, -1, 1);
        if (i % 7 == 3) xv[i] = 0.0;         /* the kink: PyTorch's gradient there is 0 */
        if (i % 11 == 5) xv[i] = -0.0;
    }
    store(x, xv);
    for (int64_t i = 0; i < n; i++) kink[i] = xv[i] == 0.0;
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    double *yr = dalloc(n), *dxr = dalloc(n);
    for (int64_t i = 0; i < n; i++) yr[i] = xv[i] > 0 ? xv[i] : 0.0;
    expect_exact("relu y", y, yr);
    double *R = rand_stored(y->grad, &r, -1, 1);
    mpt_graph_backward(g);
    for (int64_t i = 0; i < n; i++) dxr[i] = xv[i] > 0 ? R[i] : 0.0;
    expect_exact("relu dx", x->grad, dxr);
    relu_ctx c = {n, xv, R};
    fd_check("relu dx", xv, n, dxr, relu_loss, &c, kink);
    free(xv); free(kink); free(yr); free(dxr); free(R);
    mpt_graph_free(&g);

    /* on the graph input (no gradient): no output gradient, no backward */
    g = mpt_graph_create(be, &pol, B);
    y = mpt_relu(g, mpt_input(g, 3, xs), "relu");
    ck_assert(y->grad == NULL && g->nodes[g->n_nodes - 1]->backward == NULL);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

START_TEST(test_relu) {
    relu_mode(MPT_PRECISION_FP32, 0x31);
    relu_mode(MPT_PRECISION_FP16, 0x32);
    relu_mode(MPT_PRECISION_BF16, 0x33);
}
END_TEST

/* ---- maxpool2d ------------------------------------------------------------------------------------------- */

typedef struct { int N, C, H, W, k, stride, P, Q; } pshape;

/* y = window max, argmax = first maximum in row-major window order (PyTorch's rule: a later equal value does
 * not replace it), dx = dy scattered to the argmax, with abs sums. */
static void ref_pool(const pshape *s, const double *x, double *y, int32_t *am, const double *dy, double *dx,
                     double *dxa) {
    for (int nc = 0; nc < s->N * s->C; nc++)
        for (int p = 0; p < s->P; p++)
            for (int q = 0; q < s->Q; q++) {
                const double *plane = x + (int64_t)nc * s->H * s->W;
                int best = (p * s->stride) * s->W + q * s->stride;
                for (int rr = 0; rr < s->k; rr++)
                    for (int ss = 0; ss < s->k; ss++) {
                        int idx = (p * s->stride + rr) * s->W + q * s->stride + ss;
                        if (plane[idx] > plane[best]) best = idx;
                    }
                int64_t o = ((int64_t)nc * s->P + p) * s->Q + q;
                y[o] = plane[best];
                am[o] = best;
                if (dy) {
                    dx[(int64_t)nc * s->H * s->W + best] += dy[o];
                    dxa[(int64_t)nc * s->H * s->W + best] += fabs(dy[o]);
                }
            }
}

typedef struct { pshape s; double *x; const double *R; } pool_ctx;

static double pool_loss(void *c) {
    pool_ctx *L = c;
    int64_t ny = (int64_t)L->s.N * L->s.C * L->s.P * L->s.Q;
    double *y = dalloc(ny);
    int32_t *am = calloc((size_t)ny, sizeof *am);
    ref_pool(&L->s, L->x, y, am, NULL, NULL, NULL);
    double v = dot(L->R, y, ny);
    free(y); free(am);
    return v;
}

/* quantized != 0: values from {0, 1, 2} (exact in every dtype) so windows tie, gradients of +-1/4 steps. */
static void pool_case(mpt_precision mode, pshape s, int quantized, int fd, tests_rng *r) {
    s.P = (s.H - s.k) / s.stride + 1;
    s.Q = (s.W - s.k) / s.stride + 1;
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, s.N);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    int64_t xs[4] = {s.N, s.C, s.H, s.W};
    mpt_tensor *x = act_with_grad(g, "x", dt, 4, xs);
    mpt_tensor *y = mpt_maxpool2d(g, x, s.k, s.stride, "pool");
    mpt_node *nd = g->nodes[g->n_nodes - 1];
    ck_assert(nd->op == MPT_OP_MAXPOOL2D && nd->compute_dtype == dt && nd->saved[0] != NULL);
    ck_assert(nd->saved[0]->dtype == MPT_DTYPE_I32 && nd->saved[0]->mem == MPT_MEM_ACT);
    ck_assert(y->shape[0] == s.N && y->shape[1] == s.C && y->shape[2] == s.P && y->shape[3] == s.Q);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    int64_t nx = mpt_tensor_numel(x), ny = mpt_tensor_numel(y);
    double *xv = dalloc(nx);
    for (int64_t i = 0; i < nx; i++) xv[i] = quantized ? (double)tests_int(r, 0, 2) : tests_uniform(r, -1, 1);
    store(x, xv);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    double *yr = dalloc(ny), *dxr = dalloc(nx), *dxa = dalloc(nx), *R = dalloc(ny);
    int32_t *am = calloc((size_t)ny, sizeof *am);
    for (int64_t i = 0; i < ny; i++) R[i] = quantized ? tests_int(r, -4, 4) * 0.25 : tests_uniform(r, -1, 1);
    store(y->grad, R);
    ref_pool(&s, xv, yr, am, R, dxr, dxa);
    expect_exact("maxpool y", y, yr);
    const int32_t *got_am = nd->saved[0]->data;
    for (int64_t i = 0; i < ny; i++)
        EXPECT(got_am[i] == am[i], "maxpool argmax[%lld] = %d, expected %d (first maximum of the window)",
                      (long long)i, got_am[i], am[i]);
    mpt_graph_backward(g);
    int per = ((s.k + s.stride - 1) / s.stride) * ((s.k + s.stride - 1) / s.stride); /* windows per input */
    if (quantized) expect_exact("maxpool dx", x->grad, dxr); /* quarter steps: every partial sum is exact */
    else expect_close("maxpool dx", x->grad, dxr, dxa, per, 0.0);
    if (fd) {
        pool_ctx c = {s, xv, R};
        fd_check("maxpool dx", xv, nx, dxr, pool_loss, &c, NULL);
    }
    free(xv); free(yr); free(dxr); free(dxa); free(R); free(am);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

START_TEST(test_maxpool) {
    tests_rng r = {0x41};
    const mpt_precision modes[3] = {MPT_PRECISION_FP32, MPT_PRECISION_FP16, MPT_PRECISION_BF16};
    for (int m = 0; m < 3; m++)
        for (int t = 0; t < 4; t++) {
            pshape s = {0};
            s.N = tests_int(&r, 1, 3);
            s.C = tests_int(&r, 1, 3);
            s.k = tests_int(&r, 2, 3);
            s.stride = tests_int(&r, 1, 3);
            s.H = tests_int(&r, s.k, 10);
            s.W = tests_int(&r, s.k, 10);
            pool_case(modes[m], s, 0, modes[m] == MPT_PRECISION_FP32, &r);
        }
}
END_TEST

START_TEST(test_maxpool_ties) {
    tests_rng r = {0x42};
    const mpt_precision modes[3] = {MPT_PRECISION_FP32, MPT_PRECISION_BF16, MPT_PRECISION_FP16};
    for (int m = 0; m < 3; m++) {
        pshape overlap = {.N = 2, .C = 2, .H = 7, .W = 6, .k = 3, .stride = 1};
        pool_case(modes[m], overlap, 1, 0, &r); /* overlapping windows: an input collects several gradients */
        /* stride == kernel: the CPU backend's tiled path, with rows and columns left over at the edges */
        pshape tiled = {.N = 1, .C = 3, .H = 8, .W = 8, .k = 2, .stride = 2};
        pool_case(modes[m], tiled, 1, 0, &r);
        pshape tiled_odd = {.N = 2, .C = 2, .H = 7, .W = 9, .k = 2, .stride = 2};
        pool_case(modes[m], tiled_odd, 1, 0, &r);
        pshape tiled_wide = {.N = 2, .C = 2, .H = 5, .W = 37, .k = 2, .stride = 2}; /* 8-wide vector path + tail */
        pool_case(modes[m], tiled_wide, 1, 0, &r);
        pool_case(modes[m], tiled_wide, 0, 0, &r);
        pshape tiled3 = {.N = 1, .C = 2, .H = 10, .W = 11, .k = 3, .stride = 3};
        pool_case(modes[m], tiled3, 1, 0, &r);
        pshape gapped = {.N = 1, .C = 2, .H = 9, .W = 9, .k = 2, .stride = 3}; /* stride > kernel */
        pool_case(modes[m], gapped, 1, 0, &r);
    }
}
END_TEST

/* NaN propagates (PyTorch's CPU rule `val > max || isnan(val)`): a window holding a NaN outputs NaN and its
 * gradient goes to the NaN, in the tiled (2x2/2, its 8-wide vector part) and the general (3x3/1) path and in
 * every float dtype; a window of -inf outputs -inf with its first element as the argmax (both paths). */
START_TEST(test_maxpool_nan) {
    mpt_backend *be = mpt_backend_cpu_create();
    const mpt_dtype dts[3] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};
    const int ks[2][2] = {{2, 2}, {3, 1}};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 2; c++) {
            const int H = 6, W = 20, k = ks[c][0], st = ks[c][1];
            const int P = (H - k) / st + 1, Q = (W - k) / st + 1;
            const size_t es = mpt_dtype_size(dts[d]);
            void *x = calloc(H * W, es), *y = calloc(P * Q, es), *dy = calloc(P * Q, es), *dx = calloc(H * W, es);
            int32_t *am = calloc(P * Q, sizeof *am);
            for (int i = 0; i < H * W; i++) mpt_store_f32(x, dts[d], i, (float)(i % 7));
            const int nan_h = 1, nan_w = 9, nan_at = nan_h * W + nan_w; /* 2x2/2: output (0, 4), vector path */
            mpt_store_f32(x, dts[d], nan_at, NAN);
            /* a 2x2/2 window of -inf, output (2, 7): y = -inf, argmax its first element */
            for (int h = 4; h < 6; h++)
                for (int w = 14; w < 16; w++) mpt_store_f32(x, dts[d], h * W + w, -INFINITY);
            /* and a 3x3 block of -inf, rows 3-5, columns 2-4: the general path's window (3, 2) (E23 in
             * tests/hostile/mutation-kernels.md: its argmax from element 0 instead of the window's first survived) */
            for (int h = 3; h < 6; h++)
                for (int w = 2; w < 5; w++) mpt_store_f32(x, dts[d], h * W + w, -INFINITY);
            for (int i = 0; i < P * Q; i++) mpt_store_f32(dy, dts[d], i, 1.0f);
            for (int i = 0; i < H * W; i++) mpt_store_f32(dx, dts[d], i, 0.5f); /* backward accumulates */
            mpt_pool_args a = {.N = 1, .C = 1, .H = H, .W = W, .kernel = k, .stride = st, .pad = 0, .P = P, .Q = Q,
                               .dtype = dts[d], .x = x, .y = y, .argmax = am, .dy = dy, .dx = dx};
            be->maxpool_forward(be, &a);
            be->maxpool_backward(be, &a);
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++) {
                    int holds = p * st <= nan_h && nan_h < p * st + k && q * st <= nan_w && nan_w < q * st + k;
                    float v = mpt_load_f32(y, dts[d], p * Q + q);
                    EXPECT(holds == (int)isnan(v), "%s k=%d s=%d: y[%d,%d] = %g, window %s the NaN",
                           mpt_dtype_name(dts[d]), k, st, p, q, (double)v, holds ? "holds" : "does not hold");
                    if (holds)
                        EXPECT(am[p * Q + q] == nan_at, "%s k=%d s=%d: argmax[%d,%d] = %d, expected the NaN at %d",
                               mpt_dtype_name(dts[d]), k, st, p, q, am[p * Q + q], nan_at);
                }
            /* dy = 1 everywhere: the NaN's gradient is 0.5 + the windows that hold it */
            int windows = 0;
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++)
                    windows += p * st <= nan_h && nan_h < p * st + k && q * st <= nan_w && nan_w < q * st + k;
            if (k == 2) {
                float v = mpt_load_f32(y, dts[d], 2 * Q + 7);
                EXPECT(v == -INFINITY && am[2 * Q + 7] == 4 * W + 14, "%s 2x2/2: all -inf window gives %g at %d, "
                       "expected -inf at %d", mpt_dtype_name(dts[d]), (double)v, am[2 * Q + 7], 4 * W + 14);
            } else {
                float v = mpt_load_f32(y, dts[d], 3 * Q + 2);
                EXPECT(v == -INFINITY && am[3 * Q + 2] == 3 * W + 2, "%s 3x3/1: all -inf window gives %g at %d, "
                       "expected -inf at %d", mpt_dtype_name(dts[d]), (double)v, am[3 * Q + 2], 3 * W + 2);
            }
            EXPECT(mpt_load_f32(dx, dts[d], nan_at) == 0.5f + (float)windows,
                   "%s k=%d s=%d: dx at the NaN = %g, expected 0.5 + %d", mpt_dtype_name(dts[d]), k, st,
                   (double)mpt_load_f32(dx, dts[d], nan_at), windows);
            free(x); free(y); free(dy); free(dx); free(am);
        }
    mpt_backend_free(&be);
}
END_TEST

/* ---- flatten, input -------------------------------------------------------------------------------------- */

START_TEST(test_flatten) {
    tests_rng r = {0x51};
    mpt_policy pol = policy_for_mode(MPT_PRECISION_FP32);
    mpt_backend *be = mpt_backend_cpu_create();
    int B = 3;
    int64_t xs[4] = {B, 2, 3, 4};
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    mpt_tensor *x = act_with_grad(g, "x", MPT_DTYPE_F32, 4, xs);
    mpt_tensor *f = mpt_flatten(g, x, "flat");
    mpt_node *nd = g->nodes[g->n_nodes - 1];
    ck_assert(nd->op == MPT_OP_FLATTEN && nd->forward == NULL && nd->backward == NULL && nd->in[0] == x &&
              nd->out == f);
    ck_assert(f->ndim == 2 && f->shape[0] == B && f->shape[1] == 24 && f->view_of == x && f->grad);
    mpt_tensor *y = mpt_linear(g, f, 5, "fc");
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    ck_assert(f->data == x->data && f->grad->data == x->grad->data);
    /* gradients flow through the view into the 4-D tensor */
    mpt_tensor *w = mpt_graph_find(g, "fc.weight"), *b = mpt_graph_find(g, "fc.bias");
    double *xv = rand_stored(x, &r, -1, 1), *wv = rand_stored(w, &r, -1, 1), *bv = rand_stored(b, &r, -1, 1);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    double *yr = dalloc(B * 5), *ya = dalloc(B * 5);
    ref_linear_fwd(B, 24, 5, xv, wv, bv, yr, ya);
    expect_close("flatten+linear y", y, yr, ya, 25, 0.0);
    double *R = rand_stored(y->grad, &r, -1, 1);
    mpt_graph_backward(g);
    double *dx = dalloc(B * 24), *dxa = dalloc(B * 24), *dw = dalloc(120), *dwa = dalloc(120), *db = dalloc(5),
           *dba = dalloc(5);
    ref_linear_bwd(B, 24, 5, xv, wv, R, dx, dxa, dw, dwa, db, dba);
    expect_close("flatten dx (4-D)", x->grad, dx, dxa, 5, 0.0);
    free(xv); free(wv); free(bv); free(yr); free(ya); free(R);
    free(dx); free(dxa); free(dw); free(dwa); free(db); free(dba);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

START_TEST(test_input) {
    const mpt_dtype want[MPT_PRECISION_COUNT] = {MPT_DTYPE_F32,  MPT_DTYPE_F32,  MPT_DTYPE_F16, MPT_DTYPE_BF16,
                                                 MPT_DTYPE_BF16, MPT_DTYPE_BF16, MPT_DTYPE_BF16}; /* fp8 modes: BF16 */
    mpt_backend *be = mpt_backend_cpu_create();
    for (int m = 0; m < MPT_PRECISION_COUNT; m++) {
        mpt_policy pol = policy_for_mode((mpt_precision)m);
        mpt_graph *g = mpt_graph_create(be, &pol, 5);
        int64_t xs[4] = {5, 1, 28, 28};
        mpt_tensor *x = mpt_input(g, 4, xs);
        ck_assert(g->input == x && x->dtype == want[m] && x->grad == NULL && x->mem == MPT_MEM_ACT);
        ck_assert(x->ndim == 4 && x->shape[0] == 5 && x->shape[3] == 28);
        ck_assert_int_eq(g->n_nodes, 1);
        mpt_node *nd = g->nodes[0];
        ck_assert(nd->op == MPT_OP_INPUT && nd->out == x && nd->forward == NULL && nd->backward == NULL);
        ck_assert(nd->compute_dtype == want[m] && nd->math == MPT_MATH_FP32);
        mpt_graph_free(&g);
    }
    mpt_backend_free(&be);
}
END_TEST

/* The design converts the batch once: feeding an F32 tensor to an F16 linear is a wiring error. */
START_TEST(test_dtype_mismatch_aborts) {
    mpt_policy pol = policy_for_mode(MPT_PRECISION_FP16);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, 2);
    int64_t xs[2] = {2, 3};
    mpt_tensor *x = act_with_grad(g, "x32", MPT_DTYPE_F32, 2, xs);
    mpt_linear(g, x, 4, "fc");
}
END_TEST

START_TEST(test_shape_mismatch_aborts) {
    mpt_policy pol = policy_for_mode(MPT_PRECISION_FP32);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, 2);
    int64_t xs[4] = {2, 1, 4, 4};
    mpt_linear(g, mpt_input(g, 4, xs), 4, "fc"); /* linear needs [B, in]: flatten first */
}
END_TEST

/* ---- dropout --------------------------------------------------------------------------------------------- */

/* Expected mask of a dropout node from the documented seed scheme, with the engine's own RNG wrapper. */
static unsigned char *expected_mask(uint64_t run_seed, uint64_t offset, int64_t n, float p) {
    float *u = malloc((size_t)n * sizeof *u);
    unsigned char *m = malloc((size_t)n);
    ck_assert(u && m);
    mpt_rng_uniform(u, (size_t)n, mpt_rng_stream_seed(run_seed, MPT_RNG_DROPOUT), offset);
    for (int64_t i = 0; i < n; i++) m[i] = u[i] > p;
    free(u);
    return m;
}

static void check_dropout_output(const char *what, const mpt_tensor *x, const mpt_tensor *y,
                                 const unsigned char *mask, float p) {
    int64_t n = mpt_tensor_numel(y);
    /* kept: y = round(x / (1-p)) or round(x * (1/(1-p))): within 2 u of the dtype (+ FP32 scale rounding) */
    double uo = u_store(y->dtype);
    for (int64_t i = 0; i < n; i++) {
        double xv = mpt_load_f32(x->data, x->dtype, i), yv = mpt_load_f32(y->data, y->dtype, i);
        if (!mask[i]) {
            EXPECT(yv == 0.0, "%s[%lld]: dropped element is %g, not 0", what, (long long)i, yv);
        } else {
            double want = xv / (1.0 - (double)p);
            EXPECT(fabs(yv - want) <= (uo + 2 * U32) * fabs(want) + tiny_store(y->dtype),
                          "%s[%lld]: kept element %.9g, expected x/(1-p) = %.9g", what, (long long)i, yv, want);
        }
    }
}

typedef struct { int64_t n; double *x; const double *R; const unsigned char *mask; double p; } dropout_ctx;

static double dropout_loss(void *c) {
    dropout_ctx *L = c;
    double s = 0;
    for (int64_t i = 0; i < L->n; i++) s += L->R[i] * (L->mask[i] ? L->x[i] / (1 - L->p) : 0.0);
    return s;
}

static void dropout_mode(mpt_precision mode, uint64_t seed) {
    tests_rng r = {seed};
    const float p1 = 0.3f, p2 = 0.5f;
    const int B = 16;
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    int64_t xs[2] = {B, 1000};
    mpt_tensor *x = act_with_grad(g, "x", dt, 2, xs);
    mpt_tensor *y1 = mpt_dropout(g, x, p1, "drop1");
    mpt_node *n1 = g->nodes[g->n_nodes - 1];
    mpt_tensor *y2 = mpt_dropout(g, y1, p2, "drop2");
    mpt_node *n2 = g->nodes[g->n_nodes - 1];
    int64_t n = mpt_tensor_numel(x);
    ck_assert(g->dropout_elems == (uint64_t)(2 * n));
    ck_assert(n1->saved[0]->dtype == MPT_DTYPE_U8 && n1->compute_dtype == dt && y1->dtype == dt);
    ck_assert(be->workspace_bytes >= (size_t)n * sizeof(float));
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    double *xv = dalloc(n);
    for (int64_t i = 0; i < n; i++) xv[i] = tests_uniform(&r, 0.5, 2.0) * (i % 2 ? 1 : -1); /* never 0 */
    store(x, xv);

    g->seed = 1234;
    g->step = 5;
    g->training = 1;
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    const uint8_t *m1 = n1->saved[0]->data, *m2 = n2->saved[0]->data;
    /* masks follow the documented scheme: offset = step * dropout_elems + the node's base */
    unsigned char *e1 = expected_mask(1234, 5 * 2 * (uint64_t)n, n, p1);
    unsigned char *e2 = expected_mask(1234, 5 * 2 * (uint64_t)n + (uint64_t)n, n, p2);
    int64_t kept1 = 0, kept2 = 0;
    for (int64_t i = 0; i < n; i++) {
        EXPECT(m1[i] == e1[i] && m2[i] == e2[i], "dropout mask[%lld] = %d/%d, Philox says %d/%d",
                      (long long)i, m1[i], m2[i], e1[i], e2[i]);
        kept1 += m1[i];
        kept2 += m2[i];
    }
    /* kept fraction ~ Binomial(n, 1-p)/n: within 5 standard deviations */
    double f1 = (double)kept1 / n, f2 = (double)kept2 / n;
    EXPECT(fabs(f1 - (1 - p1)) <= 5 * sqrt(p1 * (1 - p1) / n), "kept fraction %.4f, p = %.2f", f1, p1);
    EXPECT(fabs(f2 - (1 - p2)) <= 5 * sqrt(p2 * (1 - p2) / n), "kept fraction %.4f, p = %.2f", f2, p2);
    check_dropout_output("drop1 y", x, y1, m1, p1);
    check_dropout_output("drop2 y", y1, y2, m2, p2);

    /* backward: dx = mask ? dy/(1-p) : 0, through both nodes */
    double *R = rand_stored(y2->grad, &r, -1, 1);
    mpt_graph_backward(g);
    check_dropout_output("drop2 dx", y2->grad, y1->grad, m2, p2);
    check_dropout_output("drop1 dx", y1->grad, x->grad, m1, p1);

    /* same (seed, step): same mask; another step: another mask (disagreement ~ 2p(1-p) of the elements) */
    unsigned char *keep = malloc((size_t)n);
    memcpy(keep, m1, (size_t)n);
    mpt_graph_forward(g);
    ck_assert(memcmp(keep, m1, (size_t)n) == 0);
    g->step = 6;
    mpt_graph_forward(g);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += keep[i] != m1[i];
    EXPECT(fabs((double)differ / n - 2 * p1 * (1 - p1)) < 0.05, "step 6 vs 5: %lld of %lld mask bits differ",
                  (long long)differ, (long long)n);
    g->seed = 99;
    g->step = 5;
    mpt_graph_forward(g);
    differ = 0;
    for (int64_t i = 0; i < n; i++) differ += keep[i] != m1[i];
    EXPECT(differ > n / 10, "another seed gives nearly the same mask (%lld differ)", (long long)differ);

    /* evaluation: y = x exactly */
    g->training = 0;
    mpt_graph_forward(g);
    ck_assert(memcmp(y1->data, x->data, mpt_tensor_nbytes(x)) == 0);
    ck_assert(memcmp(y2->data, x->data, mpt_tensor_nbytes(x)) == 0);

    /* the FP64 reference of the backward, dx = mask R / (1-p), against finite differences (mask fixed) */
    {
        int64_t nn = 64;
        double *x64 = dalloc(nn), *gr = dalloc(nn);
        for (int64_t i = 0; i < nn; i++) {
            x64[i] = tests_uniform(&r, -1, 1);
            gr[i] = keep[i] ? R[i] / (1 - (double)p1) : 0.0;
        }
        dropout_ctx c = {nn, x64, R, keep, p1};
        fd_check("dropout dx", x64, nn, gr, dropout_loss, &c, NULL);
        free(x64); free(gr);
    }
    free(xv); free(e1); free(e2); free(R); free(keep);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

START_TEST(test_dropout) {
    dropout_mode(MPT_PRECISION_FP32, 0x61);
    dropout_mode(MPT_PRECISION_FP16, 0x62);
    dropout_mode(MPT_PRECISION_BF16, 0x63);
}
END_TEST

/* ---- softmax + cross-entropy ----------------------------------------------------------------------------- */

/* loss = mean over valid rows of logsumexp - z[label]; probs; dz = (p - onehot)/Bv (times S outside);
 * returns the number of valid rows Bv; correct = valid rows whose (first) argmax is the label; rowmax = the
 * largest per-row loss; zrange = the largest max(z) - min(z) of a row. Output pointers may be NULL. */
static int ref_xent(int B, int C, const double *z, const int32_t *lab, double *loss, double *probs, double *dz,
                    int *correct, double *rowmax, double *zrange) {
    int valid = 0, cor = 0;
    for (int i = 0; i < B; i++) valid += lab[i] >= 0;
    double sum = 0, rmax = 0, zr = 0;
    for (int i = 0; i < B; i++) {
        const double *zi = z + (int64_t)i * C;
        double m = zi[0], lo = zi[0];
        int am = 0;
        for (int j = 1; j < C; j++) {
            if (zi[j] > m) { m = zi[j]; am = j; }
            if (zi[j] < lo) lo = zi[j];
        }
        if (m - lo > zr) zr = m - lo;
        double s = 0;
        for (int j = 0; j < C; j++) s += exp(zi[j] - m);
        for (int j = 0; j < C; j++) {
            double pj = exp(zi[j] - m) / s;
            if (probs) probs[(int64_t)i * C + j] = pj;
            if (dz) dz[(int64_t)i * C + j] = lab[i] < 0 ? 0.0 : (pj - (j == lab[i])) / valid;
        }
        if (lab[i] >= 0) {
            double li = (m - zi[lab[i]]) + log(s); /* logsumexp - z[label] */
            sum += li;
            if (li > rmax) rmax = li;
            cor += am == lab[i];
        }
    }
    *loss = valid ? sum / valid : 0.0;
    if (correct) *correct = cor;
    if (rowmax) *rowmax = rmax;
    if (zrange) *zrange = zr;
    return valid;
}

typedef struct { int B, C; double *z; const int32_t *lab; } xent_ctx;

static double xent_loss(void *c) {
    xent_ctx *L = c;
    double loss;
    ref_xent(L->B, L->C, L->z, L->lab, &loss, NULL, NULL, NULL, NULL, NULL);
    return loss;
}

/* Builds logits (with a gradient) -> softmax_xent, with a backend float S as the loss scale. */
typedef struct { mpt_backend *be; mpt_graph *g; mpt_tensor *z, *scale; } xent_graph;

static xent_graph xent_build(mpt_precision mode, int B, int C) {
    xent_graph X;
    mpt_policy pol = policy_for_mode(mode);
    X.be = mpt_backend_cpu_create();
    X.g = mpt_graph_create(X.be, &pol, B);
    int64_t zs[2] = {B, C}, one[1] = {1};
    X.z = act_with_grad(X.g, "logits", mpt_policy_act_dtype(&pol), 2, zs);
    mpt_tensor *loss = mpt_softmax_xent(X.g, X.z, "xent");
    X.scale = mpt_graph_tensor(X.g, "scale", MPT_DTYPE_F32, MPT_MEM_ACT, 1, one);
    mpt_node *nd = X.g->nodes[X.g->n_nodes - 1];
    ck_assert(nd->op == MPT_OP_SOFTMAX_XENT && nd->compute_dtype == MPT_DTYPE_F32 && nd->math == MPT_MATH_FP32);
    ck_assert(loss == X.g->loss && X.g->logits == X.z && loss->dtype == MPT_DTYPE_F32 && loss->grad == NULL);
    ck_assert(X.g->labels->dtype == MPT_DTYPE_I32 && X.g->labels->shape[0] == B);
    ck_assert(X.g->n_correct->dtype == MPT_DTYPE_I32 && nd->saved[0]->dtype == MPT_DTYPE_F32);
    ck_assert(nd->saved[0]->shape[0] == B && nd->saved[0]->shape[1] == C);
    ck_assert_int_eq(mpt_graph_alloc(X.g), MPT_OK);
    X.g->loss_scale = X.scale->data;
    return X;
}

static void xent_free(xent_graph *X) {
    mpt_graph_free(&X->g);
    mpt_backend_free(&X->be);
}

/* Runs forward + backward with loss scale S on the stored logits zv and labels, and checks the loss, the
 * probabilities, n_correct and dlogits against ref_xent. zmax bounds |z|. */
static void xent_run_check(xent_graph *X, const double *zv, const int32_t *lab, double S, double zmax) {
    mpt_graph *g = X->g;
    int B = (int)X->z->shape[0], C = (int)X->z->shape[1];
    memcpy(g->labels->data, lab, (size_t)B * sizeof *lab);
    *(float *)X->scale->data = (float)S;
    *(int32_t *)g->n_correct->data = 0;
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    int64_t n = (int64_t)B * C;
    double loss, rowmax, zr, *pr = dalloc(n), *dz = dalloc(n);
    int cor;
    int valid = ref_xent(B, C, zv, lab, &loss, pr, dz, &cor, &rowmax, &zr);
    /* FP32 loss per row: C exps (2 u each, relative to the sum s >= 1), the sum (C u), log (u), the
     * subtractions z - m and (m + log s) - z[label] (u |z| each), then the mean over the valid rows
     * ((B + 2) u of the largest row loss). */
    double got = *(float *)g->loss->data;
    double lb = U32 * ((3.0 * C + 8.0) * (1.0 + log((double)C)) + 4.0 * zmax + (B + 4.0) * rowmax);
    EXPECT(isfinite(got) && fabs(got - loss) <= lb, "loss %.9g, FP64 reference %.9g (bound %.3g)", got, loss,
                  lb);
    ck_assert_int_eq(*(int32_t *)g->n_correct->data, cor);
    /* p = exp(z - m) / s: the argument z - m carries u |z - m| <= u zrange, exp 2 u, sum and divide (C + 2) u.
     * dz = round(S (p - onehot) / Bv): that error times S / Bv, FP32 subtract/scale (3 u), one rounding to
     * the dtype of z. */
    const float *pg = g->nodes[g->n_nodes - 1]->saved[0]->data;
    const mpt_tensor *dzt = X->z->grad;
    double uo = u_store(dzt->dtype), tiny = tiny_store(dzt->dtype);
    for (int64_t i = 0; i < n; i++) {
        double pb = U32 * (3.0 * C + 8.0 + zr) * pr[i] + 0x1p-126;
        EXPECT(fabs(pg[i] - pr[i]) <= pb, "probs[%lld] = %.9g, reference %.9g", (long long)i, pg[i], pr[i]);
        double want = S * dz[i];
        double e = (lab[i / C] < 0) ? 0.0 : S / valid * (pb + 3.0 * U32 * (pr[i] + 1.0));
        double gotd = mpt_load_f32(dzt->data, dzt->dtype, i);
        double bound = e + uo * (fabs(want) + e) + tiny;
        if (lab[i / C] < 0) bound = 0.0;
        EXPECT(fabs(gotd - want) <= bound, "dlogits[%lld] (%s, S = %g): got %.9g, reference %.9g", (long long)i,
                      mpt_dtype_name(dzt->dtype), S, gotd, want);
    }
    free(pr); free(dz);
}

/* The value v rounded to dtype t (RNE), as the tensor would store it. */
static double round_to(mpt_dtype t, double v) {
    float f;
    uint16_t h;
    void *p = t == MPT_DTYPE_F32 ? (void *)&f : (void *)&h;
    mpt_store_f32(p, t, 0, (float)v);
    return mpt_load_f32(p, t, 0);
}

/* Random logits center + U(-spread, spread), stored in z; each row redrawn until its maximum is unique
 * (argmax ties would make n_correct depend on tie-breaking); every label_argmax_every-th row is labelled with
 * its argmax (a correct prediction), the others at random. */
static double *xent_logits(mpt_tensor *z, tests_rng *r, double center, double spread, int32_t *lab,
                           int label_argmax_every) {
    int B = (int)z->shape[0], C = (int)z->shape[1];
    double *zv = dalloc((int64_t)B * C);
    for (int i = 0; i < B; i++) {
        double *row = zv + (int64_t)i * C;
        int am, ties;
        do {
            for (int j = 0; j < C; j++) row[j] = round_to(z->dtype, center + tests_uniform(r, -spread, spread));
            am = 0;
            for (int j = 1; j < C; j++)
                if (row[j] > row[am]) am = j;
            ties = 0;
            for (int j = 0; j < C; j++) ties += row[j] == row[am];
        } while (ties != 1);
        lab[i] = (label_argmax_every && i % label_argmax_every == 0) ? am : tests_int(r, 0, C - 1);
    }
    store(z, zv);
    return zv;
}

START_TEST(test_softmax_xent) {
    tests_rng r = {0x71};
    const mpt_precision modes[3] = {MPT_PRECISION_FP32, MPT_PRECISION_FP16, MPT_PRECISION_BF16};
    for (int m = 0; m < 3; m++)
        for (int t = 0; t < 3; t++) {
            int B = tests_int(&r, 1, 12), C = tests_int(&r, 2, 12);
            xent_graph X = xent_build(modes[m], B, C);
            int32_t *lab = calloc((size_t)B, sizeof *lab);
            double *zv = xent_logits(X.z, &r, 0.0, 5.0, lab, 2);
            xent_run_check(&X, zv, lab, 1.0, 5.0);
            if (m == 0) { /* the FP64 reference against finite differences */
                double loss, *dz = dalloc((int64_t)B * C);
                ref_xent(B, C, zv, lab, &loss, NULL, dz, NULL, NULL, NULL);
                xent_ctx c = {B, C, zv, lab};
                fd_check("softmax_xent dlogits", zv, (int64_t)B * C, dz, xent_loss, &c, NULL);
                free(dz);
            }
            /* n_correct accumulates over forward passes until the caller resets it */
            mpt_graph_forward(X.g);
            int cor;
            double loss;
            ref_xent(B, C, zv, lab, &loss, NULL, NULL, &cor, NULL, NULL);
            ck_assert_int_eq(*(int32_t *)X.g->n_correct->data, 2 * cor);
            free(zv); free(lab);
            xent_free(&X);
        }
}
END_TEST

/* Logits near +-1e4 in FP32 and +-6e4 in FP16 (exp overflows without the max subtraction). */
START_TEST(test_softmax_xent_stability) {
    tests_rng r = {0x72};
    for (int m = 0; m < 2; m++) {
        mpt_precision mode = m ? MPT_PRECISION_FP16 : MPT_PRECISION_FP32;
        double c = m ? 6.0e4 : 1.0e4, spread = m ? 200.0 : 20.0, step = m ? 64.0 : 2.0; /* FP16 ulp(6e4) = 32 */
        int B = 6, C = 7;
        xent_graph X = xent_build(mode, B, C);
        int32_t *lab = calloc((size_t)B, sizeof *lab);
        double *zv = xent_logits(X.z, &r, c, spread, lab, 3);
        for (int j = 0; j < C; j++) zv[3 * C + j] = -c + step * j; /* a row around -c */
        store(X.z, zv);
        lab[3] = 2;
        xent_run_check(&X, zv, lab, 1.0, c + spread);
        free(zv); free(lab);
        xent_free(&X);
    }
}
END_TEST

/* The loss scale seeds backward: dlogits = S (p - onehot) / B, checked for S = 1, 1024, 65536 in FP16. */
START_TEST(test_softmax_xent_scale) {
    tests_rng r = {0x73};
    int B = 8, C = 10;
    xent_graph X = xent_build(MPT_PRECISION_FP16, B, C);
    int32_t *lab = calloc((size_t)B, sizeof *lab);
    double *zv = xent_logits(X.z, &r, 0.0, 3.0, lab, 2);
    xent_run_check(&X, zv, lab, 1.0, 3.0);
    xent_run_check(&X, zv, lab, 1024.0, 3.0);
    xent_run_check(&X, zv, lab, 65536.0, 3.0);
    free(zv); free(lab);
    xent_free(&X);
}
END_TEST

/* Padding rows (label -1, PyTorch's ignore_index): no loss, no count, no gradient; mean over valid rows. */
START_TEST(test_softmax_xent_ignore) {
    tests_rng r = {0x74};
    int B = 9, C = 5;
    xent_graph X = xent_build(MPT_PRECISION_FP32, B, C);
    int32_t *lab = calloc((size_t)B, sizeof *lab);
    double *zv = xent_logits(X.z, &r, 0.0, 4.0, lab, 2);
    lab[1] = lab[4] = lab[8] = -1;
    xent_run_check(&X, zv, lab, 1.0, 4.0); /* dlogits of padding rows must be exactly 0 (bound 0) */
    for (int i = 0; i < B; i++) lab[i] = -1;
    xent_run_check(&X, zv, lab, 1.0, 4.0);
    ck_assert(*(float *)X.g->loss->data == 0.0f && *(int32_t *)X.g->n_correct->data == 0);
    free(zv); free(lab);
    xent_free(&X);
}
END_TEST

START_TEST(test_softmax_xent_needs_scale) {
    xent_graph X = xent_build(MPT_PRECISION_FP32, 2, 3);
    X.g->loss_scale = NULL;
    mpt_graph_forward(X.g);
    mpt_graph_backward(X.g); /* aborts: the seed of the backward pass was never set */
}
END_TEST

/* ---- batch norm ------------------------------------------------------------------------------------------- */

/* The FP64 reference of batch norm over [N, C, S] with valid rows (training: batch statistics of the valid rows). */
typedef struct {
    int N, C, S;
    const unsigned char *valid; /* [N] */
    double *x, *gamma, *beta;   /* x [N, C, S], gamma, beta [C] */
    const double *R;            /* dL/dy (0 on padding rows) */
    double eps;
} bn_ctx;

/* Batch statistics per channel: mean, biased var, n. */
static int bn_stats(const bn_ctx *b, int c, double *mean, double *var) {
    double s = 0;
    int n = 0;
    for (int r = 0; r < b->N; r++)
        if (b->valid[r])
            for (int k = 0; k < b->S; k++) {
                s += b->x[((int64_t)r * b->C + c) * b->S + k];
                n++;
            }
    *mean = n ? s / n : 0.0;
    double q = 0;
    for (int r = 0; r < b->N; r++)
        if (b->valid[r])
            for (int k = 0; k < b->S; k++) {
                double d = b->x[((int64_t)r * b->C + c) * b->S + k] - *mean;
                q += d * d;
            }
    *var = n ? q / n : 0.0;
    return n;
}

static void ref_bn_fwd(const bn_ctx *b, double *y) {
    for (int c = 0; c < b->C; c++) {
        double mean, var;
        bn_stats(b, c, &mean, &var);
        double rstd = 1.0 / sqrt(var + b->eps);
        for (int r = 0; r < b->N; r++)
            for (int k = 0; k < b->S; k++) {
                int64_t i = ((int64_t)r * b->C + c) * b->S + k;
                y[i] = (b->x[i] - mean) * rstd * b->gamma[c] + b->beta[c];
            }
    }
}

static double bn_loss(void *c) {
    bn_ctx *b = c;
    int64_t n = (int64_t)b->N * b->C * b->S;
    double *y = dalloc(n);
    ref_bn_fwd(b, y);
    double s = dot(b->R, y, n);
    free(y);
    return s;
}

/* dx (0 on padding rows), dgamma, dbeta of the reference. */
static void ref_bn_bwd(const bn_ctx *b, double *dx, double *dgamma, double *dbeta) {
    for (int c = 0; c < b->C; c++) {
        double mean, var;
        int n = bn_stats(b, c, &mean, &var);
        double rstd = 1.0 / sqrt(var + b->eps), sdy = 0, sdyx = 0;
        for (int r = 0; r < b->N; r++)
            if (b->valid[r])
                for (int k = 0; k < b->S; k++) {
                    int64_t i = ((int64_t)r * b->C + c) * b->S + k;
                    sdy += b->R[i];
                    sdyx += b->R[i] * (b->x[i] - mean) * rstd;
                }
        dgamma[c] = sdyx;
        dbeta[c] = sdy;
        for (int r = 0; r < b->N; r++)
            for (int k = 0; k < b->S; k++) {
                int64_t i = ((int64_t)r * b->C + c) * b->S + k;
                double xhat = (b->x[i] - mean) * rstd;
                dx[i] = b->valid[r] ? b->gamma[c] * rstd * (b->R[i] - sdy / n - xhat * sdyx / n) : 0.0;
            }
    }
}

/* One case: x [N, C, H, W] (ndim 4) or [N, C] (ndim 2), some rows padding (label -1) when pad. Training forward and
 * backward against the reference (and its finite differences when fd), the running statistics after one and two
 * steps, then an evaluation forward from them. */
static void bn_case(mpt_precision mode, int ndim, int N, int C, int H, int W, int pad, int fd, tests_rng *r) {
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, N);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    const int S = ndim == 4 ? H * W : 1;
    int64_t xs[4] = {N, C, H, W}, ls[1] = {N};
    mpt_tensor *x = act_with_grad(g, "x", dt, ndim, xs);
    mpt_tensor *y = mpt_batchnorm(g, x, 1e-5f, 0.1f, "bn1");
    mpt_node *nd = g->nodes[g->n_nodes - 1];
    ck_assert_int_eq(nd->op, MPT_OP_BATCHNORM);
    ck_assert(nd->compute_dtype == dt && y->dtype == dt && y->ndim == ndim);
    g->labels = mpt_graph_tensor(g, "labels", MPT_DTYPE_I32, MPT_MEM_ACT, 1, ls);
    ck_assert_int_eq(g->n_params, 2);
    ck_assert_int_eq(g->n_buffers, 2);
    ck_assert(g->params[0].init == MPT_INIT_CONST && g->params[0].value == 1.0f);
    ck_assert(g->params[1].init == MPT_INIT_CONST && g->params[1].value == 0.0f);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    mpt_tensor *gm = mpt_graph_find(g, "bn1.weight"), *bt = mpt_graph_find(g, "bn1.bias");
    mpt_tensor *rm = mpt_graph_find(g, "bn1.running_mean"), *rv = mpt_graph_find(g, "bn1.running_var");
    ck_assert(gm && bt && rm && rv && gm->dtype == MPT_DTYPE_F32 && bt->dtype == MPT_DTYPE_F32);
    ck_assert(rm->dtype == MPT_DTYPE_F32 && rm->grad == NULL && rv->grad == NULL && rm->shape[0] == C);
    for (int c = 0; c < C; c++) /* the buffers start at PyTorch's values */
        ck_assert(((float *)rm->data)[c] == 0.0f && ((float *)rv->data)[c] == 1.0f);

    unsigned char *valid = calloc((size_t)N, 1);
    int32_t *lab = g->labels->data;
    for (int i = 0; i < N; i++) {
        valid[i] = !(pad && i >= N - pad); /* padding at the end of the batch, as the loader puts it */
        lab[i] = valid[i] ? i % 3 : -1;
    }
    const int64_t n = (int64_t)N * C * S;
    /* an offset per channel, so the mean matters (and a two-pass variance is needed) */
    double *xv = dalloc(n);
    for (int64_t i = 0; i < n; i++) xv[i] = tests_uniform(r, -1, 1) + (double)((i / S) % C) - 1.0;
    store(x, xv);
    double *gv = rand_stored(gm, r, 0.5, 1.5), *bv = rand_stored(bt, r, -0.5, 0.5);
    g->training = 1;
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    bn_ctx b = {N, C, S, valid, xv, gv, bv, NULL, 1e-5};
    double *yr = dalloc(n), *ya = dalloc(n);
    ref_bn_fwd(&b, yr);
    const int K = S + N + 8; /* the blocked FP32 sums of the statistics (engine/backend.h mpt_norm_args) */
    double *mean = dalloc(C), *var = dalloc(C), *absx = dalloc(C);
    int nv = 0;
    for (int c = 0; c < C; c++) {
        nv = bn_stats(&b, c, &mean[c], &var[c]);
        for (int rr = 0; rr < N; rr++)
            if (valid[rr])
                for (int k = 0; k < S; k++) absx[c] += fabs(xv[((int64_t)rr * C + c) * S + k]) / nv;
    }
    for (int64_t i = 0; i < n; i++) { /* |y - ref| <= K u |gamma| rstd (|x - mean| + mean |x|) + u |y| */
        const int c = (int)((i / S) % C);
        const double rstd = 1.0 / sqrt(var[c] + 1e-5);
        ya[i] = (fabs(gv[c]) * rstd * (fabs(xv[i] - mean[c]) + absx[c]) * K + fabs(yr[i]) * 2) / (K + 2);
    }
    expect_close("batchnorm y", y, yr, ya, K, 0.0);
    for (int c = 0; c < C; c++) { /* the running statistics after one step: 0.9 * 0 + 0.1 mean, 0.9 * 1 + 0.1 var_u */
        const double um = 0.1 * mean[c], uv = 0.9 + 0.1 * var[c] * nv / (nv > 1 ? nv - 1 : 1);
        const double got_m = ((float *)rm->data)[c], got_v = ((float *)rv->data)[c];
        EXPECT(fabs(got_m - um) <= K * U32 * (absx[c] + fabs(um)) + 1e-30, "running_mean[%d] %.9g, expected %.9g", c,
               got_m, um);
        EXPECT(fabs(got_v - uv) <= 2 * K * U32 * (uv + absx[c] * absx[c]), "running_var[%d] %.9g, expected %.9g", c,
               got_v, uv);
    }

    /* backward: dy zero on padding rows (the loss gives them none), gradients prefilled to check accumulation */
    double *R = dalloc(n);
    for (int64_t i = 0; i < n; i++) R[i] = valid[i / ((int64_t)C * S)] ? tests_uniform(r, -1, 1) : 0.0;
    store(y->grad, R);
    b.R = R;
    double *gx0, *gg0, *gb0;
    prefill_grad(x->grad, r, &gx0);
    prefill_grad(gm->grad, r, &gg0);
    prefill_grad(bt->grad, r, &gb0);
    mpt_graph_backward(g);
    double *dx = dalloc(n), *dxa = dalloc(n), *dg = dalloc(C), *dga = dalloc(C), *db = dalloc(C), *dba = dalloc(C);
    ref_bn_bwd(&b, dx, dg, db);
    double *mdy = dalloc(C), *mdyx = dalloc(C);
    for (int64_t i = 0; i < n; i++) {
        const int c = (int)((i / S) % C);
        if (!valid[i / ((int64_t)C * S)]) continue;
        const double rstd = 1.0 / sqrt(var[c] + 1e-5), xh = fabs(xv[i] - mean[c]) * rstd + absx[c] * rstd;
        mdy[c] += fabs(R[i]) / nv;
        mdyx[c] += fabs(R[i]) * xh / nv;
        dba[c] += fabs(R[i]);
        dga[c] += fabs(R[i]) * xh;
    }
    for (int64_t i = 0; i < n; i++) {
        const int c = (int)((i / S) % C);
        const double rstd = 1.0 / sqrt(var[c] + 1e-5), xh = fabs(xv[i] - mean[c]) * rstd + absx[c] * rstd;
        dxa[i] = valid[i / ((int64_t)C * S)]
                     ? fabs(gv[c]) * rstd * (fabs(R[i]) + mdy[c] + xh * (mdyx[c] + mdy[c]) + mdyx[c]) : 0.0;
    }
    double *dxt = dalloc(n), *dxta = dalloc(n);
    for (int64_t i = 0; i < n; i++) {
        dxt[i] = dx[i];
        dxta[i] = 4.0 * dxa[i];
    }
    fold_prefill(gx0, dxt, dxta, n);
    for (int c = 0; c < C; c++) dga[c] *= 2.0;
    double *dgt = dalloc(C), *dbt = dalloc(C);
    memcpy(dgt, dg, (size_t)C * sizeof *dg);
    memcpy(dbt, db, (size_t)C * sizeof *db);
    fold_prefill(gg0, dgt, dga, C);
    fold_prefill(gb0, dbt, dba, C);
    expect_close("batchnorm dx", x->grad, dxt, dxta, K, 0.0);
    expect_close("batchnorm dgamma", gm->grad, dgt, dga, K, 0.0);
    expect_close("batchnorm dbeta", bt->grad, dbt, dba, K, 0.0);
    for (int64_t i = 0; i < n; i++) /* a padding row passes nothing back: its dx is the prefill, unchanged */
        if (!valid[i / ((int64_t)C * S)])
            EXPECT(mpt_load_f32(x->grad->data, x->grad->dtype, i) == (float)gx0[i], "batchnorm dx[%lld] of a padding "
                   "row changed", (long long)i);
    if (fd) {
        fd_check("batchnorm dx", xv, n, dx, bn_loss, &b, NULL);
        fd_check("batchnorm dgamma", gv, C, dg, bn_loss, &b, NULL);
        fd_check("batchnorm dbeta", bv, C, db, bn_loss, &b, NULL);
    }

    /* evaluation: the running statistics, nothing updated */
    float *rm_before = malloc((size_t)C * sizeof(float)), *rv_before = malloc((size_t)C * sizeof(float));
    memcpy(rm_before, rm->data, (size_t)C * sizeof(float));
    memcpy(rv_before, rv->data, (size_t)C * sizeof(float));
    g->training = 0;
    mpt_graph_forward(g);
    for (int64_t i = 0; i < n; i++) {
        const int c = (int)((i / S) % C);
        const double rs = 1.0 / sqrt((double)rv_before[c] + 1e-5);
        yr[i] = (xv[i] - rm_before[c]) * rs * gv[c] + bv[c];
        ya[i] = fabs(gv[c]) * rs * (fabs(xv[i]) + fabs(rm_before[c])) + fabs(bv[c]);
    }
    expect_close("batchnorm eval y", y, yr, ya, 4, 0.0);
    ck_assert(memcmp(rm_before, rm->data, (size_t)C * sizeof(float)) == 0);
    ck_assert(memcmp(rv_before, rv->data, (size_t)C * sizeof(float)) == 0);

    free(rm_before); free(rv_before); free(dgt); free(dbt); free(dxt); free(dxta); free(mdy); free(mdyx);
    free(dx); free(dxa); free(dg); free(dga); free(db); free(dba); free(gx0); free(gg0); free(gb0); free(R);
    free(mean); free(var); free(absx); free(yr); free(ya); free(xv); free(gv); free(bv); free(valid);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

static void bn_mode(mpt_precision mode, uint64_t seed, int fd) {
    tests_rng r = {seed};
    bn_case(mode, 4, 4, 3, 5, 4, 0, fd, &r);
    bn_case(mode, 4, 5, 2, 3, 3, 2, fd, &r); /* a padded last batch */
    bn_case(mode, 2, 6, 7, 1, 1, 0, fd, &r); /* after a linear layer: per feature */
    bn_case(mode, 2, 7, 5, 1, 1, 3, fd, &r);
    bn_case(mode, 4, 16, 4, 24, 24, 3, 0, &r); /* long reductions: S + N terms per channel */
}

START_TEST(test_batchnorm_fp32) { bn_mode(MPT_PRECISION_FP32, 0x61, 1); }
END_TEST
START_TEST(test_batchnorm_fp16) { bn_mode(MPT_PRECISION_FP16, 0x62, 0); }
END_TEST
START_TEST(test_batchnorm_bf16) { bn_mode(MPT_PRECISION_BF16, 0x63, 0); }
END_TEST

/* ---- layer norm ------------------------------------------------------------------------------------------- */

typedef struct {
    int N, M;
    double *x, *gamma, *beta; /* x [N, M], gamma, beta [M] */
    const double *R;
    double eps;
} ln_ctx;

static void ln_row(const ln_ctx *L, int r, double *mean, double *rstd) {
    double s = 0, q = 0;
    for (int j = 0; j < L->M; j++) s += L->x[(int64_t)r * L->M + j];
    *mean = s / L->M;
    for (int j = 0; j < L->M; j++) {
        double d = L->x[(int64_t)r * L->M + j] - *mean;
        q += d * d;
    }
    *rstd = 1.0 / sqrt(q / L->M + L->eps);
}

static void ref_ln_fwd(const ln_ctx *L, double *y) {
    for (int r = 0; r < L->N; r++) {
        double mean, rstd;
        ln_row(L, r, &mean, &rstd);
        for (int j = 0; j < L->M; j++) {
            int64_t i = (int64_t)r * L->M + j;
            y[i] = (L->x[i] - mean) * rstd * L->gamma[j] + L->beta[j];
        }
    }
}

static double ln_loss(void *c) {
    ln_ctx *L = c;
    int64_t n = (int64_t)L->N * L->M;
    double *y = dalloc(n);
    ref_ln_fwd(L, y);
    double s = dot(L->R, y, n);
    free(y);
    return s;
}

static void ref_ln_bwd(const ln_ctx *L, double *dx, double *dgamma, double *dbeta) {
    for (int j = 0; j < L->M; j++) dgamma[j] = dbeta[j] = 0.0;
    for (int r = 0; r < L->N; r++) {
        double mean, rstd, sg = 0, sgx = 0;
        ln_row(L, r, &mean, &rstd);
        for (int j = 0; j < L->M; j++) {
            int64_t i = (int64_t)r * L->M + j;
            double xh = (L->x[i] - mean) * rstd, gg = L->R[i] * L->gamma[j];
            sg += gg;
            sgx += gg * xh;
            dgamma[j] += L->R[i] * xh;
            dbeta[j] += L->R[i];
        }
        for (int j = 0; j < L->M; j++) {
            int64_t i = (int64_t)r * L->M + j;
            double xh = (L->x[i] - mean) * rstd;
            dx[i] = rstd * (L->R[i] * L->gamma[j] - sg / L->M - xh * sgx / L->M);
        }
    }
}

static void ln_case(mpt_precision mode, int ndim, int N, int d1, int d2, int d3, int fd, tests_rng *r) {
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, N);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    int64_t xs[4] = {N, d1, d2, d3};
    mpt_tensor *x = act_with_grad(g, "x", dt, ndim, xs);
    mpt_tensor *y = mpt_layernorm(g, x, 1e-5f, "ln1");
    ck_assert(y->dtype == dt && g->nodes[g->n_nodes - 1]->op == MPT_OP_LAYERNORM);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    mpt_tensor *gm = mpt_graph_find(g, "ln1.weight"), *bt = mpt_graph_find(g, "ln1.bias");
    ck_assert(gm && bt && gm->dtype == MPT_DTYPE_F32 && gm->ndim == ndim - 1 && gm->shape[0] == d1);
    const int M = (int)(mpt_tensor_numel(x) / N);
    const int64_t n = (int64_t)N * M;
    double *xv = dalloc(n);
    for (int64_t i = 0; i < n; i++) xv[i] = tests_uniform(r, -1, 1) + 2.0 * (double)(i / M); /* a mean per row */
    store(x, xv);
    double *gv = rand_stored(gm, r, 0.5, 1.5), *bv = rand_stored(bt, r, -0.5, 0.5);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    ln_ctx L = {N, M, xv, gv, bv, NULL, 1e-5};
    double *yr = dalloc(n), *ya = dalloc(n);
    ref_ln_fwd(&L, yr);
    const int K = M + 8;
    double *rstd = dalloc(N), *absx = dalloc(N);
    for (int rr = 0; rr < N; rr++) {
        double mean;
        ln_row(&L, rr, &mean, &rstd[rr]);
        for (int j = 0; j < M; j++) absx[rr] += fabs(xv[(int64_t)rr * M + j]) / M;
        for (int j = 0; j < M; j++) {
            int64_t i = (int64_t)rr * M + j;
            ya[i] = (fabs(gv[j]) * rstd[rr] * (fabs(xv[i] - mean) + absx[rr]) * K + 2 * fabs(yr[i])) / (K + 2);
        }
    }
    expect_close("layernorm y", y, yr, ya, K, 0.0);
    double *R = rand_stored(y->grad, r, -1, 1), *gx0, *gg0, *gb0;
    L.R = R;
    prefill_grad(x->grad, r, &gx0);
    prefill_grad(gm->grad, r, &gg0);
    prefill_grad(bt->grad, r, &gb0);
    mpt_graph_backward(g);
    double *dx = dalloc(n), *dxa = dalloc(n), *dg = dalloc(M), *dga = dalloc(M), *db = dalloc(M), *dba = dalloc(M);
    ref_ln_bwd(&L, dx, dg, db);
    for (int rr = 0; rr < N; rr++) {
        double mg = 0, mgx = 0;
        for (int j = 0; j < M; j++) {
            int64_t i = (int64_t)rr * M + j;
            const double xh = (fabs(xv[i]) + absx[rr]) * rstd[rr];
            mg += fabs(R[i] * gv[j]) / M;
            mgx += fabs(R[i] * gv[j]) * xh / M;
            dga[j] += 2.0 * fabs(R[i]) * xh;
            dba[j] += fabs(R[i]);
        }
        for (int j = 0; j < M; j++) {
            int64_t i = (int64_t)rr * M + j;
            const double xh = (fabs(xv[i]) + absx[rr]) * rstd[rr];
            dx[i] += gx0[i];
            dxa[i] = 4.0 * rstd[rr] * (fabs(R[i] * gv[j]) + mg + xh * (mgx + mg) + mgx) + fabs(gx0[i]);
        }
    }
    fold_prefill(gg0, dg, dga, M);
    fold_prefill(gb0, db, dba, M);
    expect_close("layernorm dx", x->grad, dx, dxa, K, 0.0);
    expect_close("layernorm dgamma", gm->grad, dg, dga, N + 2 * K, 0.0);
    expect_close("layernorm dbeta", bt->grad, db, dba, N + 2, 0.0);
    if (fd) {
        double *fdx = dalloc(n), *fdg = dalloc(M), *fdb = dalloc(M);
        ref_ln_bwd(&L, fdx, fdg, fdb);
        fd_check("layernorm dx", xv, n, fdx, ln_loss, &L, NULL);
        fd_check("layernorm dgamma", gv, M, fdg, ln_loss, &L, NULL);
        fd_check("layernorm dbeta", bv, M, fdb, ln_loss, &L, NULL);
        free(fdx); free(fdg); free(fdb);
    }
    free(dx); free(dxa); free(dg); free(dga); free(db); free(dba); free(gx0); free(gg0); free(gb0); free(R);
    free(rstd); free(absx); free(yr); free(ya); free(xv); free(gv); free(bv);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

static void ln_mode(mpt_precision mode, uint64_t seed, int fd) {
    tests_rng r = {seed};
    ln_case(mode, 2, 4, 9, 1, 1, fd, &r);
    ln_case(mode, 4, 3, 2, 3, 4, fd, &r); /* over [C, H, W]: LayerNorm([C, H, W]) */
    ln_case(mode, 2, 5, 1100, 1, 1, 0, &r); /* longer than a chunk of the CPU's sums */
}

START_TEST(test_layernorm_fp32) { ln_mode(MPT_PRECISION_FP32, 0x71, 1); }
END_TEST
START_TEST(test_layernorm_fp16) { ln_mode(MPT_PRECISION_FP16, 0x72, 0); }
END_TEST
START_TEST(test_layernorm_bf16) { ln_mode(MPT_PRECISION_BF16, 0x73, 0); }
END_TEST

/* ---- average pooling -------------------------------------------------------------------------------------- */

typedef struct { int N, C, H, W, kh, kw, sh, sw, P, Q; double *x; const double *R; } ap_ctx;

static void ref_avgpool(const ap_ctx *a, double *y, double *ya) {
    for (int pl = 0; pl < a->N * a->C; pl++)
        for (int p = 0; p < a->P; p++)
            for (int q = 0; q < a->Q; q++) {
                double s = 0, t = 0;
                for (int rr = 0; rr < a->kh; rr++)
                    for (int ss = 0; ss < a->kw; ss++) {
                        double v = a->x[((int64_t)pl * a->H + p * a->sh + rr) * a->W + q * a->sw + ss];
                        s += v;
                        t += fabs(v);
                    }
                y[((int64_t)pl * a->P + p) * a->Q + q] = s / (a->kh * a->kw);
                if (ya) ya[((int64_t)pl * a->P + p) * a->Q + q] = t / (a->kh * a->kw);
            }
}

static double ap_loss(void *c) {
    ap_ctx *a = c;
    int64_t n = (int64_t)a->N * a->C * a->P * a->Q;
    double *y = dalloc(n);
    ref_avgpool(a, y, NULL);
    double s = dot(a->R, y, n);
    free(y);
    return s;
}

static void ap_case(mpt_precision mode, int N, int C, int H, int W, int kh, int kw, int sh, int sw, int fd,
                    tests_rng *r) {
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mpt_graph_create(be, &pol, N);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    int64_t xs[4] = {N, C, H, W};
    mpt_tensor *x = act_with_grad(g, "x", dt, 4, xs);
    mpt_tensor *y = mpt_avgpool2d(g, x, kh, kw, sh, sw, "avgpool");
    const int P = (H - kh) / sh + 1, Q = (W - kw) / sw + 1;
    ck_assert(y->dtype == dt && y->shape[2] == P && y->shape[3] == Q && y->grad != NULL);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    const int64_t nx = (int64_t)N * C * H * W, ny = (int64_t)N * C * P * Q;
    double *xv = rand_stored(x, r, -1, 1), *yr = dalloc(ny), *ya = dalloc(ny);
    mpt_graph_forward(g);
    ap_ctx a = {N, C, H, W, kh, kw, sh, sw, P, Q, xv, NULL};
    ref_avgpool(&a, yr, ya);
    expect_close("avgpool y", y, yr, ya, kh * kw + 1, 0.0);
    double *R = rand_stored(y->grad, r, -1, 1), *gx0;
    prefill_grad(x->grad, r, &gx0);
    mpt_graph_backward(g);
    double *dx = dalloc(nx), *dxa = dalloc(nx);
    for (int pl = 0; pl < N * C; pl++) /* the reference scatters: dx += dy / (kh kw) over each window */
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int rr = 0; rr < kh; rr++)
                    for (int ss = 0; ss < kw; ss++) {
                        int64_t i = ((int64_t)pl * H + p * sh + rr) * W + q * sw + ss;
                        double v = R[((int64_t)pl * P + p) * Q + q] / (kh * kw);
                        dx[i] += v;
                        dxa[i] += fabs(v);
                    }
    double *dxt = dalloc(nx), *dxta = dalloc(nx);
    memcpy(dxt, dx, (size_t)nx * sizeof *dx);
    memcpy(dxta, dxa, (size_t)nx * sizeof *dx);
    fold_prefill(gx0, dxt, dxta, nx);
    expect_close("avgpool dx", x->grad, dxt, dxta, (kh / sh + 1) * (kw / sw + 1) + 2, 0.0);
    if (fd) {
        a.R = R;
        fd_check("avgpool dx", xv, nx, dx, ap_loss, &a, NULL);
    }
    free(xv); free(yr); free(ya); free(R); free(gx0); free(dx); free(dxa); free(dxt); free(dxta);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

START_TEST(test_avgpool) {
    for (int m = 0; m < 3; m++) {
        const mpt_precision mode = m == 0 ? MPT_PRECISION_FP32 : m == 1 ? MPT_PRECISION_FP16 : MPT_PRECISION_BF16;
        tests_rng r = {0x81 + (uint64_t)m};
        ap_case(mode, 2, 3, 6, 6, 2, 2, 2, 2, m == 0, &r);  /* tiled 2x2/2 */
        ap_case(mode, 2, 2, 7, 5, 3, 2, 2, 1, m == 0, &r);  /* overlapping windows, a tail left out */
        ap_case(mode, 3, 4, 5, 7, 5, 7, 1, 1, m == 0, &r);  /* global: the window is the image */
        ap_case(mode, 1, 2, 8, 8, 2, 2, 3, 3, m == 0, &r);  /* gaps between windows: some dx stay 0 + prefill */
    }
}
END_TEST

/* ---- gelu, tanh, sigmoid, leaky ReLU ---------------------------------------------------------------------- */

static double ref_act(mpt_act kind, double x, double a) {
    switch (kind) {
    case MPT_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case MPT_ACT_TANH: return tanh(x);
    case MPT_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: return x > 0 ? x : a * x;
    }
}

/* dy/dx from x (the exact derivative; the kernels' tanh and sigmoid use the stored output instead, see below). */
static double ref_act_grad(mpt_act kind, double x, double a) {
    switch (kind) {
    case MPT_ACT_GELU: return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
    case MPT_ACT_TANH: return 1.0 - tanh(x) * tanh(x);
    case MPT_ACT_SIGMOID: return exp(-x) / ((1.0 + exp(-x)) * (1.0 + exp(-x)));
    default: return x > 0 ? 1.0 : a;
    }
}

typedef struct { int64_t n; mpt_act kind; double a; double *x; const double *R; } act_ctx;

static double act_loss(void *c) {
    act_ctx *A = c;
    double s = 0;
    for (int64_t i = 0; i < A->n; i++) s += A->R[i] * ref_act(A->kind, A->x[i], A->a);
    return s;
}

static void act_case(mpt_precision mode, mpt_act kind, tests_rng *r) {
    mpt_policy pol = policy_for_mode(mode);
    mpt_backend *be = mpt_backend_cpu_create();
    const int B = tests_int(r, 1, 5);
    int64_t xs[3] = {B, tests_int(r, 1, 9), tests_int(r, 1, 40)};
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    mpt_dtype dt = mpt_policy_act_dtype(&pol);
    mpt_tensor *x = act_with_grad(g, "x", dt, 3, xs);
    const double slope = 0.01 + 0.2 * tests_uniform(r, 0, 1);
    mpt_tensor *y = kind == MPT_ACT_GELU    ? mpt_gelu(g, x, "act")
                    : kind == MPT_ACT_TANH    ? mpt_tanh(g, x, "act")
                    : kind == MPT_ACT_SIGMOID ? mpt_sigmoid(g, x, "act")
                                              : mpt_leakyrelu(g, x, (float)slope, "act");
    const double a = kind == MPT_ACT_LEAKYRELU ? (double)(float)slope : 0.0;
    ck_assert(y->dtype == dt && y->grad != NULL && g->nodes[g->n_nodes - 1]->compute_dtype == dt);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    const int64_t n = mpt_tensor_numel(x);
    double *xv = dalloc(n);
    unsigned char *kink = calloc((size_t)n, 1);
    for (int64_t i = 0; i < n; i++) xv[i] = tests_uniform(r, -5, 5);
    store(x, xv);
    for (int64_t i = 0; i < n; i++) kink[i] = kind == MPT_ACT_LEAKYRELU && fabs(xv[i]) < 1e-3;
    mpt_graph_forward(g);
    double *yr = dalloc(n), *ya = dalloc(n);
    /* FP32 evaluation with the C library's erff/expf/tanhf (a few ulps) and, for gelu near -5, the cancellation in
     * 1 + erf: 8 units of 2^-24 of (1 + |x| + |y|) */
    for (int64_t i = 0; i < n; i++) {
        yr[i] = ref_act(kind, xv[i], a);
        ya[i] = 1.0 + fabs(xv[i]) + fabs(yr[i]);
    }
    expect_close("activation y", y, yr, ya, 6, 0.0);
    double *R = rand_stored(y->grad, r, -1, 1), *gx0;
    prefill_grad(x->grad, r, &gx0);
    mpt_graph_backward(g);
    double *dxr = dalloc(n), *dxa = dalloc(n), *fdg = dalloc(n);
    for (int64_t i = 0; i < n; i++) {
        const double ys = mpt_load_f32(y->data, y->dtype, i); /* tanh and sigmoid differentiate from the stored y */
        const double d = kind == MPT_ACT_TANH ? 1.0 - ys * ys : kind == MPT_ACT_SIGMOID ? ys * (1.0 - ys)
                                                                                         : ref_act_grad(kind, xv[i], a);
        fdg[i] = R[i] * ref_act_grad(kind, xv[i], a);
        dxr[i] = R[i] * d + gx0[i];
        dxa[i] = fabs(R[i]) * (1.0 + fabs(xv[i])) + fabs(gx0[i]);
    }
    expect_close("activation dx", x->grad, dxr, dxa, 6, 0.0);
    if (mode == MPT_PRECISION_FP32) {
        act_ctx c = {n, kind, a, xv, R};
        fd_check("activation dx", xv, n, fdg, act_loss, &c, kink);
        /* the stored-output derivative agrees with the exact one in FP32 */
        for (int64_t i = 0; i < n; i++)
            EXPECT(fabs((dxr[i] - gx0[i]) - fdg[i]) <= 1e-6 * (1.0 + fabs(fdg[i])), "activation %d: derivative from "
                   "the stored output %.9g, exact %.9g", (int)kind, dxr[i] - gx0[i], fdg[i]);
    }
    free(xv); free(kink); free(yr); free(ya); free(R); free(gx0); free(dxr); free(dxa); free(fdg);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}

START_TEST(test_activations) {
    for (int m = 0; m < 3; m++) {
        const mpt_precision mode = m == 0 ? MPT_PRECISION_FP32 : m == 1 ? MPT_PRECISION_FP16 : MPT_PRECISION_BF16;
        tests_rng r = {0x91 + (uint64_t)m};
        for (int k = 0; k < MPT_ACT_COUNT; k++)
            for (int t = 0; t < 3; t++) act_case(mode, (mpt_act)k, &r);
    }
}
END_TEST

/* ---- --norm-stats: the ablation rows' statistics (engine/backend.h, mpt_norm_args.stat_dtype and one_pass) ------
 * The CPU kernels against this file's own reading of the contract: over the same elements in the same order (batch
 * norm: each valid row's part of a channel, then the rows; layer norm: chunks of 512 features, then the chunks), every
 * operation computed in FP32 and its result rounded to the statistics' format; mean = R(s1 / n); var = R(sq / n) (two
 * passes, d = R(x - mean), terms R(d d)) or max(0, R(R(s2 / n) - R(mean mean))) (one pass, terms R(x x)); rstd =
 * R(1 / sqrt(var + eps)). Bit for bit: the order is the contract's. */
static float r16(float v, mpt_dtype t) {
    return t == MPT_DTYPE_F16 ? mpt_f16_to_f32(mpt_f32_to_f16(v)) : t == MPT_DTYPE_BF16 ? mpt_bf16_to_f32(mpt_f32_to_bf16(v)) : v;
}

/* The blocked sum over `rows` rows of S elements (row r at x + r * rs; blocks of blk within a row) of term(x): 0 x,
 * 1 R(x x), 2 R(R(x - mean)^2), every addition rounded. */
static float ns_sum(const float *x, int rows, int64_t rs, int64_t S, int64_t blk, mpt_dtype t, int term, float mean) {
    float total = 0.0f;
    for (int r = 0; r < rows; r++) {
        float part = 0.0f;
        for (int64_t k = 0; k < S; k++) {
            float v = x[r * rs + k];
            if (term == 1) v = r16(v * v, t);
            if (term == 2) {
                const float d = r16(v - mean, t);
                v = r16(d * d, t);
            }
            part = r16(part + v, t);
            if ((k + 1) % blk == 0 || k + 1 == S) total = r16(total + part, t), part = 0.0f;
        }
    }
    return total;
}

static void ns_ref(const float *x, int rows, int64_t rs, int64_t S, int64_t blk, mpt_dtype t, int one_pass, float eps,
                   float *mean, float *var, float *rstd) {
    const float n = (float)(rows * S);
    const float m = r16(ns_sum(x, rows, rs, S, blk, t, 0, 0.0f) / n, t);
    float v;
    if (one_pass) {
        v = r16(r16(ns_sum(x, rows, rs, S, blk, t, 1, 0.0f) / n, t) - r16(m * m, t), t);
        v = v < 0.0f ? 0.0f : v;
    } else {
        v = r16(ns_sum(x, rows, rs, S, blk, t, 2, m) / n, t);
    }
    *mean = m, *var = v, *rstd = r16(1.0f / sqrtf(v + eps), t);
}

/* A network that starts with a normalisation: its input (the data) has no gradient, so the backward pass computes no
 * dx (mpt_norm_args.dx NULL) and still gamma's and beta's gradients, bit for bit those of the same layer whose input
 * has one, with and without the trainer's grad_overwrite. It used to dereference the missing gradient (a segfault in
 * training "batchnorm,flatten,linear"). */
static void norm_without_dx(int layernorm, mpt_precision mode) {
    float dg[4][16], db[4][16];
    int M = 0;
    for (int k = 0; k < 4; k++) {
        const int with_dx = k & 1;
        mpt_policy pol = policy_for_mode(mode);
        mpt_backend *be = mpt_backend_cpu_create();
        mpt_graph *g = mpt_graph_create(be, &pol, 4);
        g->grad_overwrite = k >> 1;
        const mpt_dtype dt = mpt_policy_act_dtype(&pol);
        const int64_t xs[4] = {4, 3, 2, 2}, ls[1] = {4};
        mpt_tensor *x = with_dx ? act_with_grad(g, "x", dt, 4, xs) : mpt_graph_tensor(g, "x", dt, MPT_MEM_ACT, 4, xs);
        mpt_tensor *y = layernorm ? mpt_layernorm(g, x, 1e-5f, "n") : mpt_batchnorm(g, x, 1e-5f, 0.1f, "n");
        g->labels = mpt_graph_tensor(g, "labels", MPT_DTYPE_I32, MPT_MEM_ACT, 1, ls);
        ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
        for (int i = 0; i < 4; i++) ((int32_t *)g->labels->data)[i] = i;
        tests_rng r = {0x77};
        free(rand_stored(x, &r, -1.0, 3.0));
        double *gv = rand_stored(mpt_graph_find(g, "n.weight"), &r, 0.5, 1.5);
        g->training = 1;
        mpt_graph_zero_grad(g);
        mpt_graph_forward(g);
        double *R = rand_stored(y->grad, &r, -1.0, 1.0);
        mpt_graph_grad_accumulate(g, y->grad); /* written, as by the loss: not zeroed as unwritten */
        mpt_graph_backward(g);
        mpt_tensor *gm = mpt_graph_find(g, "n.weight"), *bt = mpt_graph_find(g, "n.bias");
        M = (int)mpt_tensor_numel(gm);
        ck_assert(M <= 16 && (x->grad == NULL) == !with_dx);
        memcpy(dg[k], gm->grad->data, (size_t)M * sizeof(float));
        memcpy(db[k], bt->grad->data, (size_t)M * sizeof(float));
        free(gv);
        free(R);
        mpt_graph_free(&g);
        mpt_backend_free(&be);
    }
    double sum = 0.0;
    for (int i = 0; i < M; i++) sum += fabs(db[1][i]);
    ck_assert_msg(sum > 0.0, "%s: dbeta is all zero", layernorm ? "layernorm" : "batchnorm");
    for (int k = 0; k < 4; k += 2)
        ck_assert_msg(memcmp(dg[k], dg[1], (size_t)M * sizeof(float)) == 0 &&
                          memcmp(db[k], db[1], (size_t)M * sizeof(float)) == 0,
                      "%s without dx (grad_overwrite %d): dgamma or dbeta differ from the layer's with dx",
                      layernorm ? "layernorm" : "batchnorm", k >> 1);
}

START_TEST(test_norm_input_without_grad) {
    for (int l = 0; l < 2; l++) {
        norm_without_dx(l, MPT_PRECISION_FP32);
        norm_without_dx(l, MPT_PRECISION_BF16);
    }
}
END_TEST

START_TEST(test_norm_stats) {
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng rg = {0x5157};
    enum { N = 5, C = 3, S = 700, LN = 4, LS = 1100 }; /* S, LS > 512: a row's part crosses the kernel's chunks */
    static float x[N * C * S], y[N * C * S], lx[LN * LS], ly[LN * LS];
    float gamma[LS], beta[LS], mean[C > LN ? C : LN], rstd[C > LN ? C : LN], rm[C], rv[C];
    for (int i = 0; i < LS; i++) gamma[i] = (float)tests_uniform(&rg, 0.5, 1.5), beta[i] = (float)tests_uniform(&rg, -0.5, 0.5);
    const int32_t labels[N] = {1, 0, -1, 2, 3}; /* row 2 pads a last partial batch: no part in the statistics */
    for (int dt = 0; dt < 2; dt++) { /* activations in FP32, then in BF16 storage (values rounded; dtype F32 buffer) */
        for (int c = 0; c < C; c++) /* channel c: mean 4^c, sd 0.3 (channel 2: |mean| / sd = 53) */
            for (int r = 0; r < N; r++)
                for (int k = 0; k < S; k++) {
                    float v = (float)(pow(4.0, c) + tests_uniform(&rg, -0.52, 0.52));
                    x[(r * C + c) * S + k] = dt ? r16(v, MPT_DTYPE_BF16) : v;
                }
        for (int i = 0; i < LN * LS; i++) lx[i] = (float)(2.0 + tests_uniform(&rg, -1.0, 1.0));
        for (int row = 0; row < MPT_NORM_STATS_COUNT; row++) {
            const mpt_norm_stats_desc *d = mpt_norm_stats_info((mpt_norm_stats)row);
            for (int c = 0; c < C; c++) rm[c] = 0.25f, rv[c] = 2.0f;
            mpt_norm_args a = {.N = N, .C = C, .S = S, .dtype = MPT_DTYPE_F32, .x = x, .y = y, .gamma = gamma,
                               .beta = beta, .mean = mean, .rstd = rstd, .running_mean = rm, .running_var = rv,
                               .momentum = 0.1f, .eps = 1e-5f, .training = 1, .labels = labels, .tag = "test",
                               .stat_dtype = d->dtype, .one_pass = d->one_pass};
            be->batchnorm_forward(be, &a);
            static float xv[(N - 1) * S]; /* the valid rows of one channel, contiguous */
            for (int c = 0; c < C; c++) {
                float em, ev, er;
                if (row == MPT_NORM_STATS_FP32) { /* the policy: FP32 two passes, checked by test_batchnorm_*; here only
                                                     that the default fields keep it */
                    continue;
                }
                int v = 0;
                for (int r = 0; r < N; r++)
                    if (labels[r] >= 0) memcpy(xv + (int64_t)v++ * S, x + (r * C + c) * S, sizeof(float) * S);
                ns_ref(xv, v, S, S, S, d->dtype, d->one_pass, a.eps, &em, &ev, &er);
                EXPECT(memcmp(&em, &mean[c], 4) == 0 && memcmp(&er, &rstd[c], 4) == 0,
                       "batchnorm --norm-stats %s, activations %s, channel %d: mean %.9g rstd %.9g, want %.9g %.9g",
                       d->name, dt ? "bf16" : "f32", c, (double)mean[c], (double)rstd[c], (double)em, (double)er);
                const float n = (float)(v * S), unb = ev * (n / (n - 1.0f));
                EXPECT(rm[c] == fmaf(0.1f, em, 0.9f * 0.25f) && rv[c] == fmaf(0.1f, unb, 0.9f * 2.0f),
                       "batchnorm --norm-stats %s, channel %d: running %.9g %.9g", d->name, c, (double)rm[c],
                       (double)rv[c]);
                for (int k = 0; k < S; k++) { /* y from the rounded statistics, in FP32 */
                    const float want = fmaf((x[c * S + k] - em) * er, gamma[c], beta[c]);
                    EXPECT(memcmp(&want, &y[c * S + k], 4) == 0 || (isnan(want) && isnan(y[c * S + k])),
                           "batchnorm --norm-stats %s y[%d, %d]: %.9g, want %.9g", d->name, c, k, (double)y[c * S + k],
                           (double)want);
                }
            }
            if (row == MPT_NORM_STATS_FP32_ONEPASS) { /* not the policy's value: the one-pass formula ran */
                float pm[C], pr[C];
                mpt_norm_args p = a;
                p.mean = pm, p.rstd = pr, p.stat_dtype = MPT_DTYPE_F32, p.one_pass = 0;
                be->batchnorm_forward(be, &p);
                EXPECT(pr[2] != rstd[2], "fp32-onepass gave the two-pass rstd %.9g on channel 2", (double)pr[2]);
            }
            /* layer norm: rows of 1100 features, chunks of 512 */
            mpt_norm_args l = {.N = LN, .C = 1, .S = LS, .dtype = MPT_DTYPE_F32, .x = lx, .y = ly, .gamma = gamma,
                               .beta = beta, .mean = mean, .rstd = rstd, .eps = 1e-5f, .tag = "test",
                               .stat_dtype = d->dtype, .one_pass = d->one_pass};
            be->layernorm_forward(be, &l);
            for (int r = 0; row != MPT_NORM_STATS_FP32 && r < LN; r++) {
                float em, ev, er;
                ns_ref(lx + r * LS, 1, LS, LS, 512, d->dtype, d->one_pass, l.eps, &em, &ev, &er);
                EXPECT(memcmp(&em, &mean[r], 4) == 0 && memcmp(&er, &rstd[r], 4) == 0,
                       "layernorm --norm-stats %s, row %d: mean %.9g rstd %.9g, want %.9g %.9g", d->name, r,
                       (double)mean[r], (double)rstd[r], (double)em, (double)er);
                const float want = fmaf((lx[r * LS + 7] - em) * er, gamma[7], beta[7]);
                EXPECT(memcmp(&want, &ly[r * LS + 7], 4) == 0, "layernorm --norm-stats %s y", d->name);
            }
        }
    }
    /* what the rows do, on inputs chosen for it: (a) 16 values 63.88 to 63.92: in BF16 the mean rounds to 64 and the
     * squares to 4080, so E[x^2] - E[x]^2 = -16 < 0 is clamped (rstd = 1/sqrt(eps), rounded), where FP32's two passes
     * see sd ~0.014; (b) 256 values near 300: FP16's sum passes 65504, the mean is inf, y NaN */
    float xa[16], ya[16], xb[256], yb[256], one = 1.0f, zero = 0.0f, m1, r1, rm1 = 0.0f, rv1 = 1.0f;
    /* (a) also at 1/8 the scale: a power of two scales every BF16 rounding exactly, so the unclamped variance is
     * -16/64 = -0.25, a negative value above -1 (the mutation audit's N10, a clamp of v < -1 only, survived (a)) */
    for (int sc = 0; sc < 2; sc++) {
    const float scale = sc ? 0.125f : 1.0f;
    for (int i = 0; i < 16; i++) xa[i] = (63.9f + 0.01f * (float)(i % 5) - 0.02f) * scale;
    {
        float s1 = 0.0f, s2 = 0.0f, p1 = 0.0f, p2 = 0.0f; /* the unclamped variance, rows of 8 */
        for (int i = 0; i < 16; i++) {
            p1 = r16(p1 + xa[i], MPT_DTYPE_BF16), p2 = r16(p2 + r16(xa[i] * xa[i], MPT_DTYPE_BF16), MPT_DTYPE_BF16);
            if (i % 8 == 7) s1 = r16(s1 + p1, MPT_DTYPE_BF16), s2 = r16(s2 + p2, MPT_DTYPE_BF16), p1 = p2 = 0.0f;
        }
        const float m = r16(s1 / 16.0f, MPT_DTYPE_BF16);
        const float v = r16(r16(s2 / 16.0f, MPT_DTYPE_BF16) - r16(m * m, MPT_DTYPE_BF16), MPT_DTYPE_BF16);
        ck_assert_msg(v < 0.0f && (sc == 0 || v > -1.0f), "the case does not make the one-pass variance negative"
                      "%s: %g", sc ? " and above -1" : "", (double)v);
    }
    for (int i = 0; i < 256; i++) xb[i] = (float)(300.0 + tests_uniform(&rg, -1.0, 1.0));
    mpt_norm_args a = {.N = 2, .C = 1, .S = 8, .dtype = MPT_DTYPE_F32, .x = xa, .y = ya, .gamma = &one, .beta = &zero,
                       .mean = &m1, .rstd = &r1, .running_mean = &rm1, .running_var = &rv1, .momentum = 0.1f,
                       .eps = 1e-5f, .training = 1, .tag = "test", .stat_dtype = MPT_DTYPE_BF16, .one_pass = 1};
    be->batchnorm_forward(be, &a);
    EXPECT(r1 == r16(1.0f / sqrtf(1e-5f), MPT_DTYPE_BF16), "bf16-onepass on 63.88 to 63.92 times %g: rstd %.9g, "
           "want the clamped variance's", (double)scale, (double)r1);
    a.stat_dtype = MPT_DTYPE_F32, a.one_pass = 0;
    be->batchnorm_forward(be, &a);
    EXPECT(r1 > 30.0f / scale && r1 < 100.0f / scale, "fp32 two passes on 63.88 to 63.92 times %g: rstd %.9g",
           (double)scale, (double)r1);
    }
    for (int op = 0; op < 2; op++) {
        mpt_norm_args b = {.N = 1, .C = 1, .S = 256, .dtype = MPT_DTYPE_F32, .x = xb, .y = yb, .gamma = &one,
                           .beta = &zero, .mean = &m1, .rstd = &r1, .running_mean = &rm1, .running_var = &rv1,
                           .momentum = 0.1f, .eps = 1e-5f, .training = 1, .tag = "test",
                           .stat_dtype = MPT_DTYPE_F16, .one_pass = op};
        be->batchnorm_forward(be, &b);
        EXPECT(isinf(m1) && isnan(yb[0]), "fp16%s on 256 values near 300: mean %g, y %g", op ? "-onepass" : "",
               (double)m1, (double)yb[0]);
    }
    mpt_backend_free(&be);
}
END_TEST

/* ---- backend kernels at the edges the layer tests above do not reach (tests/hostile/mutation-kernels.md) ---------
 * Expected values from the contracts of engine/backend.h, not from the kernels. */

/* dropout_forward: mask[i] = u[i] > p, strictly. p is set to element 5's own uniform (mpt_philox_uniform, the stream
 * the contract names), so u[5] == p exactly and element 5 must be dropped; the others follow u > p. And with an
 * iteration, u comes from offset + stride * iteration. */
START_TEST(test_dropout_threshold_is_strict) {
    enum { n = 64 };
    const uint64_t seed = 0x5eedULL, offset = 4096;
    const float p = mpt_philox_uniform(seed, offset + 5);
    ck_assert_msg(p > 0.0f && p < 1.0f, "u[5] = %g: pick another seed", (double)p);
    mpt_backend *be = mpt_backend_cpu_create();
    float *ws = malloc(n * sizeof(float)), x[n], y[n];
    uint8_t mask[n];
    void *saved = be->workspace;
    const size_t saved_bytes = be->workspace_bytes;
    be->workspace = ws;
    be->workspace_bytes = n * sizeof(float);
    for (int i = 0; i < n; i++) x[i] = 1.0f + (float)i;
    be->dropout_forward(be, y, x, mask, MPT_DTYPE_F32, n, p, seed, offset, NULL, 0);
    be->workspace = saved;
    be->workspace_bytes = saved_bytes;
    /* a replayed step draws its own iteration's numbers: u from offset + stride * iteration (E25: iteration ignored) */
    const int64_t iteration = 3;
    const uint64_t stride = 1000;
    uint8_t mask3[n];
    float y3[n];
    be->workspace = ws;
    be->workspace_bytes = n * sizeof(float);
    be->dropout_forward(be, y3, x, mask3, MPT_DTYPE_F32, n, 0.5f, seed, offset, &iteration, stride);
    be->workspace = saved;
    be->workspace_bytes = saved_bytes;
    for (int i = 0; i < n; i++) {
        const int keep = mpt_philox_uniform(seed, offset + stride * 3 + (uint64_t)i) > 0.5f;
        EXPECT(mask3[i] == keep, "dropout at iteration 3: mask[%d] = %d, want %d", i, mask3[i], keep);
    }
    for (int i = 0; i < n; i++) {
        const int keep = mpt_philox_uniform(seed, offset + (uint64_t)i) > p;
        EXPECT(mask[i] == keep, "dropout mask[%d] = %d, want u > p = %d (u %.9g, p %.9g)", i, mask[i], keep,
               (double)mpt_philox_uniform(seed, offset + (uint64_t)i), (double)p);
        const float want = keep ? x[i] / (1.0f - p) : 0.0f;
        EXPECT(memcmp(&y[i], &want, 4) == 0, "dropout y[%d] = %.9g, want %.9g", i, (double)y[i], (double)want);
    }
    free(ws);
    mpt_backend_free(&be);
}
END_TEST

/* softmax_xent: n_correct counts the first index of the largest logit (the CPU's and the CUDA kernel's documented
 * rule; torch.argmax returns the first maximal index); backward with accumulate = 0 writes +0 into an ignored row. */
START_TEST(test_softmax_xent_edges) {
    mpt_backend *be = mpt_backend_cpu_create();
    enum { N = 3, C = 4 };
    const float logits[N * C] = {2.0f, 2.0f, 0.0f, -1.0f,  /* tie of 0 and 1: argmax 0, label 0: correct */
                                 1.0f, 3.0f, 3.0f, 0.0f,   /* tie of 1 and 2: argmax 1, label 1: correct */
                                 0.5f, 0.25f, 0.0f, 0.0f}; /* ignored row */
    const int32_t labels[N] = {0, 1, -1};
    float probs[N * C], loss, dl[N * C], one = 1.0f;
    int32_t correct = 0;
    be->softmax_xent_forward(be, &loss, probs, &correct, logits, MPT_DTYPE_F32, labels, N, C);
    EXPECT(correct == 2, "n_correct %d on tied logits, want 2 (the first maximal index)", correct);
    memset(dl, 0xff, sizeof dl); /* NaN: an ignored row must be overwritten with +0 */
    be->softmax_xent_backward(be, dl, MPT_DTYPE_F32, probs, labels, N, C, &one, 0);
    for (int c = 0; c < C; c++) {
        uint32_t bits;
        memcpy(&bits, &dl[2 * C + c], 4);
        EXPECT(bits == 0u, "dlogits[2, %d] = %g (bits 0x%08x) for an ignored row, want +0", c, (double)dl[2 * C + c],
               bits);
    }
    uint16_t dh[N * C];
    memset(dh, 0xff, sizeof dh);
    be->softmax_xent_backward(be, dh, MPT_DTYPE_BF16, probs, labels, N, C, &one, 0);
    for (int c = 0; c < C; c++) EXPECT(dh[2 * C + c] == 0, "bf16 dlogits[2, %d] = 0x%04x, want +0", c, dh[2 * C + c]);
    mpt_backend_free(&be);
}
END_TEST

/* gather_batch: idx < 0 is a padding row: x[b, :] = 0 and labels[b] = -1 (the loss ignores it), in every dtype. */
START_TEST(test_gather_batch_padding_row) {
    mpt_backend *be = mpt_backend_cpu_create();
    enum { D = 5 };
    const uint8_t images[2 * D] = {0, 51, 102, 204, 255, 255, 0, 0, 0, 0}, image_labels[2] = {7, 3};
    const int32_t idx[3] = {1, -1, 0};
    for (int t = 0; t < 3; t++) {
        const mpt_dtype dt = (mpt_dtype[]){MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16}[t];
        float x[3 * D];
        int32_t lab[3] = {99, 99, 99};
        memset(x, 0x7f, sizeof x);
        be->gather_batch(be, x, dt, lab, images, image_labels, idx, 3, D, 0.5f, 2.0f);
        EXPECT(lab[0] == 3 && lab[1] == -1 && lab[2] == 7, "%s labels %d %d %d, want 3 -1 7", mpt_dtype_name(dt),
               lab[0], lab[1], lab[2]);
        for (int d = 0; d < D; d++) {
            EXPECT(mpt_load_f32(x, dt, D + d) == 0.0f, "%s padding row x[1, %d] = %g", mpt_dtype_name(dt), d,
                   (double)mpt_load_f32(x, dt, D + d));
            /* (v / 255 - 0.5) * 2: pixel 255 -> 1, pixel 0 -> -1, exact in every dtype */
            EXPECT(mpt_load_f32(x, dt, d) == (d == 0 ? 1.0f : -1.0f), "%s x[0, %d] = %g", mpt_dtype_name(dt), d,
                   (double)mpt_load_f32(x, dt, d));
        }
    }
    mpt_backend_free(&be);
}
END_TEST

/* bias_grad over more columns than one 512-column chunk of the kernel: db[c] = sum_r dy[r, c] (FP64 reference,
 * FP32 sums of `rows` terms: |err| <= rows 2^-24 sum |dy|), written and accumulated. */
START_TEST(test_bias_grad_wide) {
    mpt_backend *be = mpt_backend_cpu_create();
    tests_rng r = {0xb1a5};
    enum { R = 7, CC = 1100 };
    static float dy[R * CC], db[CC];
    uint16_t *dh = malloc(sizeof(uint16_t) * R * CC);
    for (int t = 0; t < 2; t++) {
        const mpt_dtype dt = t ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
        const void *src = t ? (const void *)dh : (const void *)dy;
        for (int i = 0; i < R * CC; i++) {
            dy[i] = (float)tests_uniform(&r, -1.0, 1.0);
            dh[i] = mpt_f32_to_bf16(dy[i]);
        }
        for (int acc = 0; acc < 2; acc++) {
            for (int c = 0; c < CC; c++) db[c] = acc ? 0.25f * (float)(c % 3) : NAN;
            be->bias_grad(be, db, src, dt, R, CC, acc);
            for (int c = 0; c < CC; c++) {
                double ref = acc ? 0.25 * (c % 3) : 0.0, mag = fabs(ref);
                for (int k = 0; k < R; k++) {
                    const double v = mpt_load_f32(src, dt, (int64_t)k * CC + c);
                    ref += v, mag += fabs(v);
                }
                EXPECT(fabs(db[c] - ref) <= (R + 1) * 0x1p-24 * mag, "bias_grad %s acc %d db[%d] = %.9g, reference %.9g",
                       mpt_dtype_name(dt), acc, c, (double)db[c], ref);
            }
        }
    }
    free(dh);
    mpt_backend_free(&be);
}
END_TEST

/* relu_forward on every 16-bit pattern: y = x if x > 0, else +0 (negative, zero and NaN inputs: +0), by the
 * definition on the widened value; the kernel decides on the bit patterns, so each NaN pattern is checked. */
START_TEST(test_relu_every_16bit_pattern) {
    mpt_backend *be = mpt_backend_cpu_create();
    uint16_t *x = malloc(65536 * sizeof(uint16_t)), *y = malloc(65536 * sizeof(uint16_t));
    for (uint32_t i = 0; i < 65536; i++) x[i] = (uint16_t)i;
    for (int t = 0; t < 2; t++) {
        const mpt_dtype dt = t ? MPT_DTYPE_BF16 : MPT_DTYPE_F16;
        memset(y, 0xa5, 65536 * sizeof(uint16_t));
        be->relu_forward(be, y, x, dt, 65536);
        for (uint32_t i = 0; i < 65536; i++) {
            const float v = mpt_load_f32(x, dt, i);
            const uint16_t want = v > 0.0f ? (uint16_t)i : 0;
            EXPECT(y[i] == want, "relu_forward %s 0x%04x (%g): 0x%04x, want 0x%04x", mpt_dtype_name(dt), i, (double)v,
                   y[i], want);
        }
    }
    free(x);
    free(y);
    mpt_backend_free(&be);
}
END_TEST

Suite *layers_suite(void);
Suite *layers_suite(void) {
    Suite *s = suite_create("layers");
    TCase *tc = tcase_create("layers");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_linear_fp32);
    tcase_add_test(tc, test_linear_tf32);
    tcase_add_test(tc, test_linear_fp16);
    tcase_add_test(tc, test_linear_bf16);
    tcase_add_test(tc, test_conv_fp32);
    tcase_add_test(tc, test_conv_tf32);
    tcase_add_test(tc, test_conv_fp16);
    tcase_add_test(tc, test_conv_bf16);
    tcase_add_test(tc, test_relu);
    tcase_add_test(tc, test_maxpool);
    tcase_add_test(tc, test_maxpool_ties);
    tcase_add_test(tc, test_maxpool_nan);
    tcase_add_test(tc, test_flatten);
    tcase_add_test(tc, test_input);
    tcase_add_test(tc, test_dropout);
    tcase_add_test(tc, test_softmax_xent);
    tcase_add_test(tc, test_softmax_xent_stability);
    tcase_add_test(tc, test_softmax_xent_scale);
    tcase_add_test(tc, test_softmax_xent_ignore);
    tcase_add_test(tc, test_batchnorm_fp32);
    tcase_add_test(tc, test_batchnorm_fp16);
    tcase_add_test(tc, test_batchnorm_bf16);
    tcase_add_test(tc, test_layernorm_fp32);
    tcase_add_test(tc, test_layernorm_fp16);
    tcase_add_test(tc, test_layernorm_bf16);
    tcase_add_test(tc, test_avgpool);
    tcase_add_test(tc, test_activations);
    tcase_add_test(tc, test_norm_stats);
    tcase_add_test(tc, test_dropout_threshold_is_strict);
    tcase_add_test(tc, test_softmax_xent_edges);
    tcase_add_test(tc, test_gather_batch_padding_row);
    tcase_add_test(tc, test_bias_grad_wide);
    tcase_add_test(tc, test_relu_every_16bit_pattern);
    tcase_add_test(tc, test_norm_input_without_grad);
    tcase_add_test_raise_signal(tc, test_dtype_mismatch_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_shape_mismatch_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_softmax_xent_needs_scale, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(layers_suite()); }
