/*
 * tools/lab/lesson_fp8.c - lesson `fp8`: what training with FP8 GEMMs takes (engine/amp/fp8.h; docs/numerics.md,
 * "FP8 and MX").
 *
 * Plan.
 * 1. Training. The mlp in bf16 and in four FP8 recipes (fp8 with delayed scaling, fp8 with current scaling,
 *    fp8-e4m3, mxfp8) with the same seeds: a paired design, as `compare --seeds`. Per recipe the paired difference of
 *    the final test accuracy to bf16 (mean, sd over seeds) and, with GSL, the verdict of tools/stats.h against the
 *    equivalence margin (--margin, compare's). lenet5 in bf16 and fp8 (seed 0): none of its linear layers has batch,
 *    in and out sizes that are all multiples of 16 (400 -> 120 -> 84 -> 10), so its fp8 run has no FP8 GEMM; the
 *    lesson compares the two runs' final weights bit for bit and says what it found.
 * 2. Gradients in E4M3 and E5M2. The telemetry of the seed-0 fp8 run (E5M2 gradients) and fp8-e4m3 run (E4M3):
 *    `all_fp8_grads` pools every FP8 layer's dy (docs/numerics.md section 6): the shares of nonzero values saturated,
 *    flushed to zero and made subnormal, in the format used and in the other one (same scaling rule).
 * 3. The GEMMs on real operands. The seed-0 fp8 run's trained weights (its FP32 masters, from the checkpoint) and the
 *    first 128 test images (one batch, pixels / 255): forward and backward in FP64 (softmax cross-entropy, mean over
 *    the batch) give the operands of every FP8 GEMM of the mlp: fc1 fprop (K = 784) and wgrad (K = 128), fc2 fprop
 *    (K = 512), dgrad (K = 512) and wgrad (K = 128) (fc1's dgrad is not computed; fc3, with 10 outputs, is BF16).
 *    Each operand is cast as `--precision fp8` casts it (E4M3 x and W, E5M2 dy; one scale per tensor from its amax,
 *    fmax / amax: current scaling) and each GEMM runs through the CPU backend's FP8 GEMM (kernels/cpu/gemm.c) with FP32
 *    accumulation, with the model of Hopper's fast accumulator, and fast with promotion to FP32 every `promote`
 *    elements of K. Errors, normwise in FP64 (||C - R|| / ||R||): quantization = the exact product of the FP8 operands
 *    against the exact product of the unrounded operands; accumulation = each GEMM's output against the exact product
 *    of its FP8 operands.
 * 4. A longer reduction of the same data: fc2's FP8 operands (relu1's activations, fc2's weights) laid end to end
 *    along K, so that each of 16 x 16 outputs sums the dot products of K / 512 activation rows with as many weight
 *    rows (a real fc2 output each), K = 512 .. kmax.
 * Criteria: (a) gradients: E4M3 loses (flushes or makes subnormal) at least twice the share of gradient values E5M2
 * loses, and more than none; (b) the accumulator: at some K of the ladder the fast accumulator's error reaches a
 * tenth of the quantization error (the K where it starts to matter), and promotion every `promote` cuts it there at
 * least 4x. The lesson's effect is observed when both hold. Training is reported with its verdicts and a sentence
 * filled from them, not made a criterion: a few small seeds decide nothing about FP8 against BF16 that the verdict
 * does not already say.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "engine/checkpoint.h"
#include "engine/numerics.h"
#include "engine/telemetry/telemetry.h"
#include "tools/formats.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"
#include "tools/stats.h"

#define NM 6 /* training modes */
static const char *const mode_name[NM] = {"bf16", "fp8", "fp8-current", "fp8-e4m3", "mxfp8", "mxfp8-rceil"};
static const char *const mode_prec[NM] = {"bf16", "fp8", "fp8", "fp8-e4m3", "mxfp8", "mxfp8"};
#define MAX_SEEDS 8
#define BATCH 128     /* the mlp's training batch: the GEMM operands of one step */
#define NG 5          /* FP8 GEMMs of the mlp measured */
#define MAX_LADDER 16
#define LADDER_MN 16  /* outputs per side of the synthetic GEMMs */

/* ---- FP8 operands on the host ------------------------------------------------------------------------------ */

/* An operand of an FP8 GEMM in the TN layout: rows x K, cast with one scale. */
typedef struct operand {
    int64_t rows, K;
    double *x;      /* [rows, K] the unrounded values */
    uint8_t *q;     /* [rows, K] FP8 codes of x * s */
    double *dq;     /* [rows, K] the codes' exact values / s */
    float s_inv;    /* 1 / s, as the GEMM reads it */
    int e5m2;
} operand;

static void operand_free(operand *o) {
    free(o->x);
    free(o->q);
    free(o->dq);
    memset(o, 0, sizeof *o);
}

/* Casts x (rows x K, taken over) with the scale of `--precision fp8` under current scaling: s = fmax / amax
 * (mpt_fp8_scale_from_amax), saturating round-to-nearest-even (engine/numerics.h). */
static mpt_status operand_cast(operand *o, double *x, int64_t rows, int64_t K, int e5m2) {
    memset(o, 0, sizeof *o);
    if (!x) return mpt_errorf(MPT_ERR_NOMEM, "lab fp8: no memory");
    o->rows = rows, o->K = K, o->x = x, o->e5m2 = e5m2;
    o->q = malloc((size_t)(rows * K));
    o->dq = malloc(sizeof(double) * (size_t)(rows * K));
    if (!o->q || !o->dq) return mpt_errorf(MPT_ERR_NOMEM, "lab fp8: no memory");
    float amax = 0.0f;
    for (int64_t i = 0; i < rows * K; i++) amax = fmaxf(amax, fabsf((float)x[i]));
    const float s = mpt_fp8_scale_from_amax(amax, e5m2 ? MPT_E5M2_MAX : MPT_E4M3_MAX, 0, 1.0f);
    o->s_inv = 1.0f / s;
    for (int64_t i = 0; i < rows * K; i++) {
        o->q[i] = mpt_f32_to_fp8((float)x[i] * s, e5m2, 1);
        const float v = e5m2 ? mpt_e5m2_to_f32(o->q[i]) : mpt_e4m3_to_f32(o->q[i]);
        o->dq[i] = (double)v / (double)s;
    }
    return MPT_OK;
}

/* [c, r] of a [r, c] FP64 matrix (malloc'd). */
static double *transpose(const double *a, int64_t r, int64_t c) {
    double *t = malloc(sizeof(double) * (size_t)(r * c));
    if (t)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) t[j * r + i] = a[i * c + j];
    return t;
}

/* C[M, N] = A B^T in FP64 (A [M, K], B [N, K]). */
static void gemm64(const double *A, const double *B, double *C, int64_t M, int64_t N, int64_t K) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0, A, (int)K, B, (int)K, 0.0, C,
                (int)N);
}

/* C[M, N] (FP32) through the CPU backend's FP8 GEMM with accumulator `accum` and promotion interval `promote`. */
static mpt_status gemm8(const operand *a, const operand *b, float *C, mpt_fp8_accum accum, int promote) {
    mpt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_b = 1;
    g.M = a->rows, g.N = b->rows, g.K = a->K;
    g.A = a->q, g.a_dtype = a->e5m2 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3;
    g.B = b->q, g.b_dtype = b->e5m2 ? MPT_DTYPE_E5M2 : MPT_DTYPE_E4M3;
    g.C = C, g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.math = MPT_MATH_FP8;
    g.a_scale_inv = &a->s_inv, g.b_scale_inv = &b->s_inv;
    g.fp8_accum = accum;
    g.fp8_promote = accum == MPT_FP8_ACCUM_FAST ? promote : 0;
    g.tag = "lab.fp8";
    return mpt_lab_gemm(&g);
}

static double rel64(const double *y, const double *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) num += (y[i] - ref[i]) * (y[i] - ref[i]), den += ref[i] * ref[i];
    return den > 0.0 ? sqrt(num / den) : NAN;
}
static double rel32(const float *y, const double *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]), den += ref[i] * ref[i];
    return den > 0.0 ? sqrt(num / den) : NAN;
}

/* One GEMM's errors: quantization, then accumulation with FP32, fast, fast + promote. */
typedef struct gemm_err {
    const char *name, *formats;
    int64_t M, N, K;
    double quant, acc[3];
} gemm_err;

static mpt_status measure_gemm(const operand *a, const operand *b, gemm_err *e, int promote) {
    const int64_t M = a->rows, N = b->rows, K = a->K;
    double *r = malloc(sizeof(double) * (size_t)(M * N)), *rq = malloc(sizeof(double) * (size_t)(M * N));
    float *c = malloc(sizeof(float) * (size_t)(M * N));
    if (!r || !rq || !c) {
        free(r), free(rq), free(c);
        return mpt_errorf(MPT_ERR_NOMEM, "lab fp8: no memory");
    }
    gemm64(a->x, b->x, r, M, N, K);
    gemm64(a->dq, b->dq, rq, M, N, K); /* the FP8 values' products are exact in FP64, their sum nearly so */
    e->M = M, e->N = N, e->K = K;
    e->quant = rel64(rq, r, M * N);
    static const mpt_fp8_accum acc[3] = {MPT_FP8_ACCUM_FP32, MPT_FP8_ACCUM_FAST, MPT_FP8_ACCUM_FAST};
    mpt_status s = MPT_OK;
    for (int k = 0; k < 3 && s == MPT_OK; k++) {
        s = gemm8(a, b, c, acc[k], k == 2 ? promote : 0);
        e->acc[k] = rel32(c, rq, M * N);
    }
    free(r), free(rq), free(c);
    return s;
}

/* ---- the trained mlp, forward and backward in FP64 ---------------------------------------------------------- */

typedef struct mlp64 {
    int64_t B, D, H1, H2, C;
    double *W1, *b1, *W2, *b2, *W3, *b3;   /* [out, in], [out] */
    double *x, *h1, *h2, *dy1, *dy2;      /* [B, D], relu outputs [B, H], gradients of fc1's and fc2's outputs */
} mlp64;

static void mlp_free(mlp64 *m) {
    double **p[] = {&m->W1, &m->b1, &m->W2, &m->b2, &m->W3, &m->b3, &m->x, &m->h1, &m->h2, &m->dy1, &m->dy2};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(*p[i]), *p[i] = NULL;
}

static mpt_status read_param(mpt_checkpoint *ck, const char *name, int64_t rows, int64_t cols, double **out,
                             int64_t *rows_out, int64_t *cols_out) {
    const mpt_checkpoint_tensor *t = mpt_checkpoint_find(ck, name);
    if (!t || t->dtype != MPT_DTYPE_F32 || t->ndim < 1 || t->ndim > 2 || (rows && t->shape[t->ndim - 1] != cols))
        return mpt_errorf(MPT_ERR_FORMAT, "lab fp8: the checkpoint has no FP32 %s of the mlp's shape", name);
    const int64_t r = t->ndim == 2 ? t->shape[0] : 1, c = t->shape[t->ndim - 1], n = r * c;
    (void)rows;
    float *f = malloc(sizeof(float) * (size_t)n);
    *out = malloc(sizeof(double) * (size_t)n);
    if (!f || !*out) {
        free(f);
        return mpt_errorf(MPT_ERR_NOMEM, "lab fp8: no memory");
    }
    mpt_status s = mpt_checkpoint_read(ck, name, f, sizeof(float) * (size_t)n);
    for (int64_t i = 0; s == MPT_OK && i < n; i++) (*out)[i] = f[i];
    free(f);
    if (rows_out) *rows_out = r;
    if (cols_out) *cols_out = c;
    return s;
}

/* Loads the checkpoint's weights and runs the first B test images forward and backward in FP64. */
static mpt_status mlp_run(const mpt_lab_ctx *c, const char *ckpt, mlp64 *m) {
    memset(m, 0, sizeof *m);
    const mpt_mnist *d = &c->cd->d;
    mpt_checkpoint *ck = NULL;
    MPT_TRY(mpt_checkpoint_open(ckpt, NULL, 0, &ck));
    int64_t D = d->dim, H1 = 0, H2 = 0, C = 0, one;
    mpt_status s = read_param(ck, "fc1.weight", 1, D, &m->W1, &H1, NULL);
    if (s == MPT_OK) s = read_param(ck, "fc1.bias", 0, 0, &m->b1, &one, NULL);
    if (s == MPT_OK) s = read_param(ck, "fc2.weight", 1, H1, &m->W2, &H2, NULL);
    if (s == MPT_OK) s = read_param(ck, "fc2.bias", 0, 0, &m->b2, &one, NULL);
    if (s == MPT_OK) s = read_param(ck, "fc3.weight", 1, H2, &m->W3, &C, NULL);
    if (s == MPT_OK) s = read_param(ck, "fc3.bias", 0, 0, &m->b3, &one, NULL);
    mpt_checkpoint_close(&ck);
    if (s != MPT_OK) return s;
    const int64_t B = d->n_test < BATCH ? d->n_test : BATCH;
    m->B = B, m->D = D, m->H1 = H1, m->H2 = H2, m->C = C;
    m->x = malloc(sizeof(double) * (size_t)(B * D));
    m->h1 = malloc(sizeof(double) * (size_t)(B * H1));
    m->h2 = malloc(sizeof(double) * (size_t)(B * H2));
    m->dy1 = malloc(sizeof(double) * (size_t)(B * H1));
    m->dy2 = malloc(sizeof(double) * (size_t)(B * H2));
    double *g3 = malloc(sizeof(double) * (size_t)(B * C)), *g2 = malloc(sizeof(double) * (size_t)(B * H2));
    if (!m->x || !m->h1 || !m->h2 || !m->dy1 || !m->dy2 || !g3 || !g2) {
        free(g3), free(g2);
        return mpt_errorf(MPT_ERR_NOMEM, "lab fp8: no memory");
    }
    for (int64_t i = 0; i < B * D; i++) m->x[i] = (double)d->test_images[i] / 255.0;
    gemm64(m->x, m->W1, m->h1, B, H1, D);
    for (int64_t i = 0; i < B * H1; i++) m->h1[i] = fmax(m->h1[i] + m->b1[i % H1], 0.0);
    gemm64(m->h1, m->W2, m->h2, B, H2, H1);
    for (int64_t i = 0; i < B * H2; i++) m->h2[i] = fmax(m->h2[i] + m->b2[i % H2], 0.0);
    gemm64(m->h2, m->W3, g3, B, C, H2);
    for (int64_t b = 0; b < B; b++) { /* d loss / d logits = (softmax - onehot) / B */
        double *z = g3 + b * C, mx = -INFINITY, sum = 0.0;
        for (int64_t k = 0; k < C; k++) z[k] += m->b3[k], mx = fmax(mx, z[k]);
        for (int64_t k = 0; k < C; k++) z[k] = exp(z[k] - mx), sum += z[k];
        for (int64_t k = 0; k < C; k++) z[k] = (z[k] / sum - (k == d->test_labels[b] ? 1.0 : 0.0)) / (double)B;
    }
    /* dy2 = (g3 W3) * [h2 > 0]; dy1 = (dy2 W2) * [h1 > 0] */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H2, (int)C, 1.0, g3, (int)C, m->W3, (int)H2,
                0.0, g2, (int)H2);
    for (int64_t i = 0; i < B * H2; i++) m->dy2[i] = m->h2[i] > 0.0 ? g2[i] : 0.0;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H1, (int)H2, 1.0, m->dy2, (int)H2, m->W2,
                (int)H1, 0.0, m->dy1, (int)H1);
    for (int64_t i = 0; i < B * H1; i++) m->dy1[i] = m->h1[i] > 0.0 ? m->dy1[i] : 0.0;
    free(g3), free(g2);
    return MPT_OK;
}

static double *dup(const double *a, int64_t n) {
    double *t = malloc(sizeof(double) * (size_t)n);
    if (t) memcpy(t, a, sizeof(double) * (size_t)n);
    return t;
}

/* The five FP8 GEMMs of one step, as --precision fp8 runs them (TN layout: transposed copies where needed). */
static mpt_status measure_layers(const mlp64 *m, gemm_err *E, int promote, operand *h1_out, operand *w2_out) {
    const int64_t B = m->B, D = m->D, H1 = m->H1, H2 = m->H2;
    operand x, w1, dy1t, xt, h1, w2, dy2, w2t, dy2t, h1t;
    operand *all[] = {&x, &w1, &dy1t, &xt, &h1, &w2, &dy2, &w2t, &dy2t, &h1t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) memset(all[i], 0, sizeof *all[i]);
    mpt_status s = operand_cast(&x, dup(m->x, B * D), B, D, 0);
    if (s == MPT_OK) s = operand_cast(&w1, dup(m->W1, H1 * D), H1, D, 0);
    if (s == MPT_OK) s = operand_cast(&dy1t, transpose(m->dy1, B, H1), H1, B, 1);
    if (s == MPT_OK) s = operand_cast(&xt, transpose(m->x, B, D), D, B, 0);
    if (s == MPT_OK) s = operand_cast(&h1, dup(m->h1, B * H1), B, H1, 0);
    if (s == MPT_OK) s = operand_cast(&w2, dup(m->W2, H2 * H1), H2, H1, 0);
    if (s == MPT_OK) s = operand_cast(&dy2, dup(m->dy2, B * H2), B, H2, 1);
    if (s == MPT_OK) s = operand_cast(&w2t, transpose(m->W2, H2, H1), H1, H2, 0);
    if (s == MPT_OK) s = operand_cast(&dy2t, transpose(m->dy2, B, H2), H2, B, 1);
    if (s == MPT_OK) s = operand_cast(&h1t, transpose(m->h1, B, H1), H1, B, 0);
    const struct { const char *name, *formats; const operand *a, *b; } g[NG] = {
        {"fc1 fprop: y = x W^T", "E4M3 x E4M3", &x, &w1},
        {"fc1 wgrad: dW = dy^T x", "E5M2 x E4M3", &dy1t, &xt},
        {"fc2 fprop: y = x W^T", "E4M3 x E4M3", &h1, &w2},
        {"fc2 dgrad: dx = dy W", "E5M2 x E4M3", &dy2, &w2t},
        {"fc2 wgrad: dW = dy^T x", "E5M2 x E4M3", &dy2t, &h1t},
    };
    for (int i = 0; s == MPT_OK && i < NG; i++) {
        E[i].name = g[i].name;
        E[i].formats = g[i].formats;
        s = measure_gemm(g[i].a, g[i].b, &E[i], promote);
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] != &h1 && all[i] != &w2) operand_free(all[i]);
    *h1_out = h1;
    *w2_out = w2;
    return s;
}

/* fc2's FP8 operands laid end to end: A [16, K] row i = activation rows i*7, i*7+1, ... of h1; B [16, K] row j =
 * weight rows j*31, j*31+1, ... of W2 (indices mod their counts); K = r * 512. */
static mpt_status measure_ladder(const operand *h1, const operand *w2, int64_t K, int promote, gemm_err *e) {
    const int64_t L = h1->K, r = K / L, n = LADDER_MN;
    operand a = {n, K, NULL, NULL, NULL, h1->s_inv, 0}, b = {n, K, NULL, NULL, NULL, w2->s_inv, 0};
    a.x = malloc(sizeof(double) * (size_t)(n * K)), b.x = malloc(sizeof(double) * (size_t)(n * K));
    a.dq = malloc(sizeof(double) * (size_t)(n * K)), b.dq = malloc(sizeof(double) * (size_t)(n * K));
    a.q = malloc((size_t)(n * K)), b.q = malloc((size_t)(n * K));
    mpt_status s = MPT_OK;
    if (!a.x || !b.x || !a.dq || !b.dq || !a.q || !b.q) s = mpt_errorf(MPT_ERR_NOMEM, "lab fp8: no memory");
    for (int64_t i = 0; s == MPT_OK && i < n; i++)
        for (int64_t t = 0; t < r; t++) {
            const int64_t ra = (i * 7 + t) % h1->rows, rb = (i * 31 + t) % w2->rows;
            memcpy(a.x + i * K + t * L, h1->x + ra * L, sizeof(double) * (size_t)L);
            memcpy(a.dq + i * K + t * L, h1->dq + ra * L, sizeof(double) * (size_t)L);
            memcpy(a.q + i * K + t * L, h1->q + ra * L, (size_t)L);
            memcpy(b.x + i * K + t * L, w2->x + rb * L, sizeof(double) * (size_t)L);
            memcpy(b.dq + i * K + t * L, w2->dq + rb * L, sizeof(double) * (size_t)L);
            memcpy(b.q + i * K + t * L, w2->q + rb * L, (size_t)L);
        }
    if (s == MPT_OK) s = measure_gemm(&a, &b, e, promote);
    operand_free(&a);
    operand_free(&b);
    return s;
}

/* ---- delayed scaling: warm-up, steady state, staleness (from a run's telemetry.csv) -------------------------- */

/* The FP8 operand tensors of the mlp's FP8 layers, as telemetry names them. */
#define NT 6
static const char *const fp8_tensors[NT] = {"fc1.x", "fc1.weight", "fc1.dy", "fc2.x", "fc2.weight", "fc2.dy"};

/* Gradient losses of one run split at delayed scaling's warm-up: a telemetry step is a warm-up step when every FP8
 * gradient operand (fc1.dy, fc2.dy) was cast with the initial scale 1 (no amax recorded yet); the others are the
 * steady state. Per part: steps, and the mean over them of flushed + subnormal shares of `all_fp8_grads` in the
 * format used ([0]) and in the other ([1]). */
typedef struct warm_split {
    int warm, steady;
    double warm_lost[2], steady_lost[2];
} warm_split;

static mpt_status split_warmup(const mpt_lab_ctx *c, const char *run, warm_split *w) {
    memset(w, 0, sizeof *w);
    mpt_lab_series s1, s2, fl[2], sb[2];
    memset(fl, 0, sizeof fl), memset(sb, 0, sizeof sb);
    mpt_status s = mpt_lab_series_read(c, run, "fc1.dy", "fp8_scale", &s1);
    if (s == MPT_OK) s = mpt_lab_series_read(c, run, "fc2.dy", "fp8_scale", &s2);
    else memset(&s2, 0, sizeof s2);
    static const char *const sfx[2] = {"", "@other_format"};
    for (int k = 0; s == MPT_OK && k < 2; k++) {
        char m[64];
        snprintf(m, sizeof m, "fp8_flush_frac%s", sfx[k]);
        s = mpt_lab_series_read(c, run, MPT_TELEMETRY_ALL_FP8_GRAD, m, &fl[k]);
        snprintf(m, sizeof m, "fp8_subnormal_frac%s", sfx[k]);
        if (s == MPT_OK) s = mpt_lab_series_read(c, run, MPT_TELEMETRY_ALL_FP8_GRAD, m, &sb[k]);
    }
    const int n = s == MPT_OK ? fl[0].n : 0;
    if (s == MPT_OK && (s1.n != n || s2.n != n || fl[1].n != n || sb[0].n != n || sb[1].n != n))
        s = mpt_errorf(MPT_ERR_FORMAT, "%s/%s/telemetry.csv: the FP8 rows do not cover the same steps", c->dir, run);
    for (int i = 0; s == MPT_OK && i < n; i++) {
        const int warm = s1.value[i] == 1.0 && s2.value[i] == 1.0;
        for (int k = 0; k < 2; k++) {
            const double lost = fl[k].value[i] + sb[k].value[i];
            if (warm) w->warm_lost[k] += lost;
            else w->steady_lost[k] += lost;
        }
        if (warm) w->warm++;
        else w->steady++;
    }
    for (int k = 0; k < 2; k++) {
        w->warm_lost[k] = w->warm ? w->warm_lost[k] / w->warm : NAN;
        w->steady_lost[k] = w->steady ? w->steady_lost[k] / w->steady : NAN;
    }
    mpt_lab_series_free(&s1), mpt_lab_series_free(&s2);
    for (int k = 0; k < 2; k++) mpt_lab_series_free(&fl[k]), mpt_lab_series_free(&sb[k]);
    return s;
}

/* One tensor's staleness over the telemetry steps of a delayed-scaling run: the largest ratio of a step's amax to the
 * amax its scale came from, the steps where it exceeded 1 and the mean saturated share on them, and the steps
 * measured (those with a ratio: every step after the first). */
typedef struct stale {
    double max_ratio, sat_stale;
    int stale_steps, steps;
} stale;

static mpt_status staleness_of(const mpt_lab_ctx *c, const char *run, const char *tensor, stale *st) {
    memset(st, 0, sizeof *st);
    mpt_lab_series r, sat;
    MPT_TRY(mpt_lab_series_read(c, run, tensor, "fp8_staleness", &r));
    mpt_status s = mpt_lab_series_read(c, run, tensor, "fp8_sat_frac", &sat);
    for (int i = 0, j = 0; s == MPT_OK && i < r.n; i++) {
        while (j < sat.n && sat.step[j] < r.step[i]) j++;
        if (!isfinite(r.value[i])) continue;
        st->steps++;
        st->max_ratio = fmax(st->max_ratio, r.value[i]);
        if (r.value[i] > 1.0 && j < sat.n && sat.step[j] == r.step[i]) {
            st->stale_steps++;
            st->sat_stale += sat.value[j];
        }
    }
    st->sat_stale = st->stale_steps ? st->sat_stale / st->stale_steps : 0.0;
    mpt_lab_series_free(&r);
    mpt_lab_series_free(&sat);
    return s;
}

/* ---- the lesson ---------------------------------------------------------------------------------------------- */

/* Gradient casts of one run: [0] the format used, [1] the other; sat, flush, subnormal (fractions). */
typedef struct grad_range {
    double sat[2], flush[2], sub[2];
} grad_range;

static grad_range grad_ranges(const mpt_run_result *r) {
    grad_range g;
    static const char *const sfx[2] = {"", "@other_format"};
    for (int k = 0; k < 2; k++) {
        char m[64];
        snprintf(m, sizeof m, "fp8_sat_frac%s", sfx[k]);
        g.sat[k] = mpt_run_stat_mean(r, "all_fp8_grads", m);
        snprintf(m, sizeof m, "fp8_flush_frac%s", sfx[k]);
        g.flush[k] = mpt_run_stat_mean(r, "all_fp8_grads", m);
        snprintf(m, sizeof m, "fp8_subnormal_frac%s", sfx[k]);
        g.sub[k] = mpt_run_stat_mean(r, "all_fp8_grads", m);
    }
    return g;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static mpt_status run(mpt_lab_ctx *c) {
    double seeds_d, kmax_d, promote_d;
    MPT_TRY(mpt_lab_param(c, "seeds", c->n_seeds, &seeds_d));
    MPT_TRY(mpt_lab_param(c, "kmax", 65536, &kmax_d));
    MPT_TRY(mpt_lab_param(c, "promote", 128, &promote_d));
    const int ns = (int)seeds_d, promote = (int)promote_d;
    if (ns < 2 || ns > MAX_SEEDS || ns != seeds_d)
        return mpt_errorf(MPT_ERR_ARG, "--param seeds: expected an integer in [2, %d], found %g", MAX_SEEDS, seeds_d);
    if (kmax_d < 512 || kmax_d > 262144 || kmax_d != floor(kmax_d))
        return mpt_errorf(MPT_ERR_ARG, "--param kmax: expected an integer in [512, 262144], found %g", kmax_d);
    if (promote < 32 || promote % 32 || promote != promote_d || promote > 65536)
        return mpt_errorf(MPT_ERR_ARG, "--param promote: expected a multiple of 32 in [32, 65536], found %g",
                          promote_d);
    MPT_LAB_PARAMS_CHECKED(c);

    /* 1. training: every (mode, seed) of the mlp, lenet5 bf16 and fp8 at seed 0; telemetry on the seed-0 FP8 runs */
    char every[32], seed[MAX_SEEDS][8], name[NM * MAX_SEEDS + 4][40];
    snprintf(every, sizeof every, "%lld", (long long)mpt_lab_telemetry_every(mpt_lab_steps(c, BATCH), 20));
    const char *fl[NM * MAX_SEEDS + 4][16];
    mpt_lab_run runs[NM * MAX_SEEDS + 4];
    static mpt_run_result res[NM * MAX_SEEDS + 4];
    int n = 0;
    for (int k = 0; k < ns; k++) {
        snprintf(seed[k], sizeof seed[k], "%d", k);
        for (int m = 0; m < NM; m++, n++) {
            snprintf(name[n], sizeof name[n], "mlp-%s-seed%d", mode_name[m], k);
            /* telemetry on the seed-0 runs of every FP8 recipe; the scaling flag only where it applies */
            const int tel = k == 0 && m >= 1, per_tensor = m >= 1 && m <= 3;
            const char *f[16] = {"--model", "mlp", "--precision", mode_prec[m], "--seed", seed[k], "--telemetry",
                                 tel ? every : "0", NULL};
            if (per_tensor) f[8] = "--fp8-scaling", f[9] = m == 2 ? "current" : "delayed", f[10] = NULL;
            if (m >= 4) f[8] = "--mx-scale", f[9] = m == 5 ? "rceil" : "floor", f[10] = NULL;
            memcpy(fl[n], f, sizeof f);
            runs[n] = (mpt_lab_run){name[n], fl[n]};
        }
    }
    for (int m = 0; m < 2; m++, n++) {
        snprintf(name[n], sizeof name[n], "lenet5-%s-seed0", mode_name[m]);
        const char *f[16] = {"--model", "lenet5", "--precision", mode_prec[m], "--seed", "0", NULL};
        memcpy(fl[n], f, sizeof f);
        runs[n] = (mpt_lab_run){name[n], fl[n]};
    }
    /* delayed scaling's first step on its own, measured in every size (a run's telemetry every N steps skips it) */
    for (int m = 0; m < 2; m++, n++) {
        snprintf(name[n], sizeof name[n], "warmup-%s", m ? "fp8-e4m3" : "fp8");
        const char *f[16] = {"--model", "mlp", "--precision", m ? "fp8-e4m3" : "fp8", "--seed", "0", "--telemetry",
                             "1", "--max-steps", "1", "--fp8-scaling", "delayed", NULL};
        memcpy(fl[n], f, sizeof f);
        runs[n] = (mpt_lab_run){name[n], fl[n]};
    }
    MPT_TRY(mpt_lab_train_batch(c, runs, n, res));
    double acc[NM][MAX_SEEDS];
    for (int k = 0; k < ns; k++)
        for (int m = 0; m < NM; m++) acc[m][k] = 100.0 * res[k * NM + m].final_test_acc;
    const grad_range g8 = grad_ranges(&res[1]), g43 = grad_ranges(&res[3]), gmx = grad_ranges(&res[4]);
    const grad_range w8 = grad_ranges(&res[NM * ns + 2]), w43 = grad_ranges(&res[NM * ns + 3]);
    /* per operand tensor: saturated and flushed under current scaling, and MX FLOOR against RCEIL */
    double sat_cur[NT], sat_mx[2][NT], flush_mx[2][NT], sat_mx_mean[2] = {0, 0}, flush_mx_mean[2] = {0, 0};
    for (int t = 0; t < NT; t++) {
        sat_cur[t] = mpt_run_stat_mean(&res[2], fp8_tensors[t], "fp8_sat_frac");
        for (int q = 0; q < 2; q++) {
            sat_mx[q][t] = mpt_run_stat_mean(&res[4 + q], fp8_tensors[t], "fp8_sat_frac");
            flush_mx[q][t] = mpt_run_stat_mean(&res[4 + q], fp8_tensors[t], "fp8_flush_frac");
            sat_mx_mean[q] += sat_mx[q][t] / NT;
            flush_mx_mean[q] += flush_mx[q][t] / NT;
        }
    }
    const mpt_run_result *lb = &res[NM * ns], *lf = &res[NM * ns + 1];
    const int lenet_same = lb->n_master == lf->n_master && lb->final_master && lf->final_master &&
                           memcmp(lb->final_master, lf->final_master, sizeof(float) * (size_t)lb->n_master) == 0;
    const double lenet_acc[2] = {100.0 * lb->final_test_acc, 100.0 * lf->final_test_acc};
    int skipped = 0;
    for (int i = 0; i < n; i++) skipped += res[i].steps_skipped;
    for (int i = 0; i < n; i++) mpt_run_result_free(&res[i]);

    mpt_stats_summary sum[NM], dsum[NM];
    mpt_stats_paired pv[NM];
    const int have_ci = mpt_stats_available();
    for (int m = 0; m < NM; m++) {
        mpt_stats_summarize(acc[m], ns, &sum[m]);
        double dd[MAX_SEEDS];
        for (int k = 0; k < ns; k++) dd[k] = acc[m][k] - acc[0][k];
        mpt_stats_summarize(dd, ns, &dsum[m]);
        if (m > 0 && have_ci) MPT_TRY(mpt_stats_compare_paired(acc[m], acc[0], ns, 0.95, c->base->margin, &pv[m]));
    }

    /* 3 and 4: the GEMMs of the seed-0 fp8 run's trained mlp */
    char ckpt[MPT_CLI_PATH + 64];
    snprintf(ckpt, sizeof ckpt, "%s/mlp-fp8-seed0/%s", c->dir, MPT_CLI_CHECKPOINT_FILE);
    mlp64 net;
    mpt_status s = mlp_run(c, ckpt, &net);
    gemm_err E[NG], Lad[MAX_LADDER];
    operand h1, w2;
    memset(&h1, 0, sizeof h1), memset(&w2, 0, sizeof w2);
    if (s == MPT_OK) s = measure_layers(&net, E, promote, &h1, &w2);
    int nl = 0;
    for (int64_t K = h1.K; s == MPT_OK && K <= (int64_t)kmax_d && nl < MAX_LADDER; K *= 4, nl++)
        s = measure_ladder(&h1, &w2, K, promote, &Lad[nl]);
    if (s == MPT_OK && nl > 0 && Lad[nl - 1].K < (int64_t)kmax_d && nl < MAX_LADDER) /* end the ladder at kmax */
        s = measure_ladder(&h1, &w2, (int64_t)kmax_d / h1.K * h1.K, promote, &Lad[nl++]);
    mlp_free(&net);
    operand_free(&h1);
    operand_free(&w2);
    MPT_TRY(s);

    /* delayed scaling's warm-up apart from its steady state (the fp8 run: E5M2 used, E4M3 the other format) */
    warm_split ws8, ws43;
    MPT_TRY(split_warmup(c, "mlp-fp8-seed0", &ws8));
    MPT_TRY(split_warmup(c, "mlp-fp8-e4m3-seed0", &ws43));
    /* criteria: the gradient losses of the steady state, without the warm-up's steps cast with the scale 1 */
    const double e4_lost = ws8.steady_lost[1], e5_lost = ws8.steady_lost[0];
    const double e4_lost_run = ws43.steady_lost[0], e5_lost_run = ws43.steady_lost[1];
    const double e4_all = g8.flush[1] + g8.sub[1], e5_all = g8.flush[0] + g8.sub[0];
    const int grads_ok = isfinite(e4_lost) && isfinite(e5_lost) && e4_lost > 0.0 && e4_lost >= 2.0 * e5_lost;
    int k_matters = -1;
    for (int i = 0; i < nl && k_matters < 0; i++)
        if (Lad[i].acc[1] >= 0.1 * Lad[i].quant) k_matters = i;
    const int promote_ok = k_matters >= 0 && Lad[k_matters].acc[2] * 4.0 <= Lad[k_matters].acc[1];
    int layer_matters = 0;
    for (int i = 0; i < NG; i++) layer_matters |= E[i].acc[1] >= 0.1 * E[i].quant;
    c->observed = grads_ok && promote_ok;
    char warm_text[900];
    /* the warm-up from its own one-step run (every size); the main run's whole-run means contain it only when its
     * telemetry measured step 1 */
    mpt_text_fp8_warmup(warm_text, sizeof warm_text, 1, ws8.steady, w8.flush[1] + w8.sub[1], w8.flush[0] + w8.sub[0],
                        e4_lost, e5_lost, ws8.warm ? e4_all : NAN, ws8.warm ? e5_all : NAN);

    /* training sentence, from the verdicts (or the paired spread without GSL) */
    char train[2400] = "";
    size_t tk = 0;
    for (int m = 1; m < NM && tk < sizeof train; m++) {
        char what[64], one[600];
        snprintf(what, sizeof what, "%s - %s", mode_name[m], m == 5 ? "mxfp8" : "bf16");
        if (m == 5) { /* RCEIL against FLOOR: same recipe, the block scale rule only */
            mpt_stats_paired pr;
            double dr[MAX_SEEDS];
            for (int k = 0; k < ns; k++) dr[k] = acc[5][k] - acc[4][k];
            mpt_stats_summary sr;
            mpt_stats_summarize(dr, ns, &sr);
            int ok = have_ci && mpt_stats_compare_paired(acc[5], acc[4], ns, 0.95, c->base->margin, &pr) == MPT_OK;
            mpt_text_paired(one, sizeof one, what, ok ? &pr : NULL, &sr);
        } else {
            mpt_text_paired(one, sizeof one, what, have_ci ? &pv[m] : NULL, &dsum[m]);
        }
        tk += (size_t)snprintf(train + tk, sizeof train - tk, "%s%s", m > 1 ? "; " : "", one);
    }
    const gemm_err *fc1 = &E[0], *km = k_matters >= 0 ? &Lad[k_matters] : NULL, *kl = &Lad[nl - 1];
    double pmin = INFINITY, pmax = 0.0;
    for (int i = 0; i < nl; i++) pmin = fmin(pmin, Lad[i].acc[2]), pmax = fmax(pmax, Lad[i].acc[2]);
    char prom_text[700];
    mpt_text_promotion(prom_text, sizeof prom_text, promote, Lad[0].K, kl->K, Lad[0].acc[1], kl->acc[1],
                       Lad[0].acc[2], kl->acc[2], pmin, pmax);
    char acc_text[1600];
    if (km)
        snprintf(acc_text, sizeof acc_text,
                 "At the layers' own K (784 and 512 forward, 128 for weight gradients) the fast accumulator %s "
                 "(fc1 forward: accumulation error %.1e fast, %.1e FP32, against %.1e from quantizing the operands); "
                 "laid end to end, the same activations and weights make the fast accumulator's error reach a tenth of "
                 "the quantization error at K = %lld (%.1e against %.1e; FP32 %.1e), and promoting to FP32 every %d "
                 "cut it there to %.1e (%.1fx%s); along the whole ladder, %s",
                 layer_matters ? "already matters" : "does not matter yet", fc1->acc[1], fc1->acc[0], fc1->quant,
                 (long long)km->K, km->acc[1], km->quant, km->acc[0], promote, km->acc[2],
                 km->acc[2] > 0 ? km->acc[1] / km->acc[2] : INFINITY, promote_ok ? "" : ", less than the 4x expected",
                 prom_text);
    else
        snprintf(acc_text, sizeof acc_text,
                 "The fast accumulator's error stayed below a tenth of the quantization error up to K = %lld (there "
                 "%.1e against %.1e; fc1 forward at K = 784: %.1e against %.1e): the accumulator's effect is not "
                 "observed on this data",
                 (long long)kl->K, kl->acc[1], kl->quant, fc1->acc[1], fc1->quant);
    snprintf(c->conclusion, sizeof c->conclusion,
             "%s: past delayed scaling's warm-up, gradients cast to E4M3 lost (flushed or made subnormal) %.3g%% of "
             "their nonzero values where E5M2 lost %.3g%% (seed-0 fp8 run, both formats on the same gradients, %d "
             "telemetry steps)%s; %s. %s. Accuracy over %d seeds: %s.",
             c->observed ? "Observed" : "Not observed", 100.0 * e4_lost, 100.0 * e5_lost, ws8.steady,
             grads_ok ? "" : ": not the 2x the criterion asks", warm_text, acc_text, ns, train);

    /* data and picture */
    FILE *dat = mpt_lab_open(c, "fp8.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# K quantization acc_fp32 acc_fast acc_fast_promote (normwise relative errors)\n");
    for (int i = 0; i < nl; i++)
        fprintf(dat, "%lld %.6e %.6e %.6e %.6e\n", (long long)Lad[i].K, Lad[i].quant, Lad[i].acc[0], Lad[i].acc[1],
                Lad[i].acc[2]);
    fprintf(dat, "\n\n# mode seed accuracy (one block per seed)\n");
    for (int k = 0; k < ns; k++) {
        for (int m = 0; m < NM; m++) fprintf(dat, "%d %d %.4f\n", m, k, acc[m][k]);
        fprintf(dat, "\n");
    }
    char dat_path[MPT_CLI_PATH + 32];
    snprintf(dat_path, sizeof dat_path, "%s/fp8.dat", c->dir);
    MPT_TRY(mpt_outdir_close_written(dat, dat_path));
    FILE *gp = mpt_lab_open(c, "fp8.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 800, "fp8.png");
    fprintf(gp, "set multiplot layout 2,1\nset grid\nset key outside right\n"
                "set title 'fc2 forward laid end to end (trained fp8 mlp): FP8 GEMM error against the exact product'\n"
                "set xlabel 'K'\nset ylabel '||C - R|| / ||R||'\nset logscale x 2\nset logscale y 10\n"
                "set format x '2^{%%L}'\nset format y '10^{%%L}'\n"
                "plot 'fp8.dat' index 0 using 1:2 with linespoints lw 2 pt 7 lt 8 title 'quantization (FP8 operands)', "
                "'' index 0 using 1:3 with linespoints lw 2 pt 5 lt 1 title 'accumulation: FP32', "
                "'' index 0 using 1:4 with linespoints lw 2 pt 9 lt 7 title 'accumulation: fast', "
                "'' index 0 using 1:5 with linespoints lw 2 pt 11 lt 3 title 'accumulation: fast + promote %d'\n"
                "unset logscale\nset format x '%%g'\nset format y '%%g'\nset xtics ('bf16' 0, 'fp8' 1, "
                "'fp8-current' 2, 'fp8-e4m3' 3, 'mxfp8' 4, 'mxfp8-rceil' 5)\nset xrange [-0.5:5.5]\n"
                "set offsets 0, 0, 0.5, 0.5\n"
                "set title 'mlp: final test accuracy, one line per seed (a seed gives every recipe the same start)'\n"
                "set xlabel ''\nset ylabel 'test accuracy (%%)'\n"
                "plot 'fp8.dat' index 1 using 1:3:($2 + 1) with linespoints pt 7 ps 1.5 lw 1.5 lc variable notitle\n"
                "unset multiplot\n",
            promote);
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "fp8.gp", plot_buf, sizeof plot_buf);

    /* report */
    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_fp8, &f));
    fprintf(f, "FP8 keeps 8 bits per value: E4M3 (4 exponent bits, 3 mantissa bits; largest 448, smallest subnormal "
               "2^-9, unit roundoff 2^-4) and E5M2 (largest 57344, smallest subnormal 2^-16, unit roundoff 2^-3). "
               "That range is too narrow for a tensor as it comes, so every tensor gets its own scale s (from its "
               "largest magnitude, amax: s = fmax / amax) or, in MXFP8, every 32 consecutive elements get a power of "
               "two; the GEMM multiplies the FP8 values exactly and divides the scales out. Four things can go "
               "wrong, and this lesson measures each on the mlp: training may suffer; values may be flushed to zero "
               "or saturate in the cast (which is why TransformerEngine's HYBRID recipe, `--precision fp8`, casts "
               "gradients to E5M2); the cast's rounding errs (quantization); and Hopper's FP8 Tensor Cores "
               "accumulate with about 14 significant bits instead of FP32's 24 (DeepSeek-V3, section 3.3.2), which "
               "cuBLASLt's FAST_ACCUM exposes and `--fp8-accum fast` models on the CPU (kernels/cpu/gemm.c).\n\n");
    fprintf(f, "## Training\n\nThe mlp in bf16 and five FP8 recipes with the same seeds (a paired design, as "
               "`mptrain compare --seeds`); the FP8 recipes run fc1 and fc2 (batch, in and out multiples of 16) as "
               "FP8 GEMMs and everything else in BF16. `fp8-current` is fp8 with `--fp8-scaling current`; "
               "`mxfp8-rceil` is mxfp8 with `--mx-scale rceil` (mxfp8 itself: `--mx-scale floor`). Accuracies: "
               "`fp8.dat`, second block, and each run's `summary.json`.\n\n"
               "| seed |");
    for (int m = 0; m < NM; m++) fprintf(f, " %s |", mode_name[m]);
    fprintf(f, "\n|---:|");
    for (int m = 0; m < NM; m++) fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int k = 0; k < ns; k++) {
        fprintf(f, "| %d |", k);
        for (int m = 0; m < NM; m++) fprintf(f, " %.2f%% |", acc[m][k]);
        fprintf(f, "\n");
    }
    fprintf(f, "| mean |");
    for (int m = 0; m < NM; m++) fprintf(f, " %.2f%% |", sum[m].mean);
    if (have_ci)
        fprintf(f, "\n\n| recipe | mean paired difference to bf16 | sd of the differences | 95%% CI | verdict "
                   "(margin ±%.2g pp) |\n|---|---:|---:|---:|---|\n", c->base->margin);
    else
        fprintf(f, "\n\n| recipe | mean paired difference to bf16 | sd of the differences |\n|---|---:|---:|\n");
    for (int m = 1; m < NM; m++) {
        fprintf(f, "| %s | %+.2f pp | %.2f pp |", mode_name[m], dsum[m].mean, dsum[m].sd);
        if (have_ci)
            fprintf(f, " %.2f..%.2f | %s%s |", pv[m].lo, pv[m].hi, mpt_verdict_name(pv[m].verdict),
                    pv[m].verdict == MPT_VERDICT_INCONCLUSIVE && pv[m].seeds_needed > 0 ? " (more seeds needed)" : "");
        fprintf(f, "\n");
    }
    fprintf(f, "\nThe same as sentences (mxfp8-rceil against mxfp8, the one pair that differs only in the block scale "
               "rule): %s.\n", train);
    fprintf(f, "\n%s steps were skipped for a non-finite gradient or amax over all runs.\n\n",
            skipped == 0 ? "No" : "Some");
    if (lenet_same)
        fprintf(f, "lenet5 (seed 0): bf16 %.2f%%, fp8 %.2f%%; the two runs' final weights are identical bit for bit. "
                   "None of its linear layers qualifies for FP8 (400 -> 120, 120 -> 84, 84 -> 10: an output size not "
                   "a multiple of 16) and its convolutions stay BF16, as under TransformerEngine: for lenet5, "
                   "`--precision fp8` is bf16. (TE's own check, transformer_engine/pytorch/utils.py "
                   "check_dim_for_fp8_exec, asks only dim 0 %% 8 and dim 1 %% 16 of each operand, which fc1 would "
                   "pass; mptrain asks all three GEMM sizes %% 16, the rule cuBLASLt documents for FP8.)\n\n",
                lenet_acc[0], lenet_acc[1]);
    else
        fprintf(f, "lenet5 (seed 0): bf16 %.2f%%, fp8 %.2f%%; the final weights differ, which the design does not "
                   "expect (no lenet5 layer qualifies for FP8): see the two runs' precision maps.\n\n",
                lenet_acc[0], lenet_acc[1]);
    fprintf(f, "## Gradients: E4M3 against E5M2\n\nThe shares of the gradient operands' nonzero values (every FP8 "
               "layer's dy, pooled, mean over the telemetry steps; `all_fp8_grads` in telemetry.csv) that the cast "
               "saturated, flushed to zero or made subnormal, in the format each run used and, on the same values, in "
               "the other one with its own scale:\n\n"
               "| run | format | saturated | flushed | subnormal |\n|---|---|---:|---:|---:|\n");
    const struct { const char *run, *fmt; const grad_range *g; int k; } gr[6] = {
        {"fp8", "E5M2 (used)", &g8, 0},   {"fp8", "E4M3", &g8, 1},
        {"fp8-e4m3", "E4M3 (used)", &g43, 0}, {"fp8-e4m3", "E5M2", &g43, 1},
        {"mxfp8", "E4M3 (used), per block", &gmx, 0}, {"mxfp8", "E5M2, per block", &gmx, 1},
    };
    for (int i = 0; i < 6; i++)
        fprintf(f, "| %s | %s | %.3g%% | %.3g%% | %.3g%% |\n", gr[i].run, gr[i].fmt, 100.0 * gr[i].g->sat[gr[i].k],
                100.0 * gr[i].g->flush[gr[i].k], 100.0 * gr[i].g->sub[gr[i].k]);
    char thr[500];
    mpt_text_format fa, fb;
    mpt_text_format_of(MPT_FORMAT_E4M3, "E4M3", &fa);
    mpt_text_format_of(MPT_FORMAT_E5M2, "E5M2", &fb);
    mpt_text_scaled_thresholds(thr, sizeof thr, &fa, &fb);
    fprintf(f, "\nWith one scale per tensor mapping amax to the format's largest value, %s. These are means over "
               "every telemetry step, delayed scaling's warm-up included where the run measured it; below it is "
               "apart.\n\n"
               "## Delayed scaling: the warm-up, the steady state, a stale amax\n\n"
               "Delayed scaling computes each step's scale from the amax of earlier steps; the first step has none "
               "and casts with s = 1. Its gradient values, some 1e-4 of the loss, then sit far below FP8's normal "
               "range. A one-step run of each recipe (`warmup-fp8/`, `warmup-fp8-e4m3/`, telemetry of step 1) "
               "measures the warm-up in every size; the steady state is every telemetry step of the seed-0 run whose "
               "gradient operands were cast with a recorded scale (`mlp-*-seed0/telemetry.csv`, rows "
               "`all_fp8_grads`; a step whose `fc1.dy` and `fc2.dy` `fp8_scale` are both 1 counts as warm-up):\n\n"
               "| run | part | steps | E4M3 lost | E5M2 lost |\n|---|---|---:|---:|---:|\n"
               "| fp8 (E5M2 used) | warm-up (step 1) | 1 | %.3g%% | %.3g%% |\n"
               "| fp8 (E5M2 used) | steady state | %d | %.3g%% | %.3g%% |\n"
               "| fp8-e4m3 (E4M3 used) | warm-up (step 1) | 1 | %.3g%% | %.3g%% |\n"
               "| fp8-e4m3 (E4M3 used) | steady state | %d | %.3g%% | %.3g%% |\n\n"
               "(lost: flushed to zero or made subnormal.) Read as: %s. In the fp8 run's steady state E4M3 would have lost "
               "%.3g%% of the gradient values and E5M2 lost %.3g%%; in the fp8-e4m3 run, which trained with E4M3 "
               "gradients, %.3g%% against %.3g%% in E5M2.\n\n",
            thr, 100.0 * (w8.flush[1] + w8.sub[1]), 100.0 * (w8.flush[0] + w8.sub[0]), ws8.steady, 100.0 * e4_lost,
            100.0 * e5_lost, 100.0 * (w43.flush[0] + w43.sub[0]), 100.0 * (w43.flush[1] + w43.sub[1]), ws43.steady,
            100.0 * e4_lost_run, 100.0 * e5_lost_run, warm_text, 100.0 * e4_lost, 100.0 * e5_lost,
            100.0 * e4_lost_run, 100.0 * e5_lost_run);
    fprintf(f, "A stale amax: the scale of a step comes from the largest amax of the history window (`--amax-history`, "
               "default 1024 steps, longer than these runs), so when a tensor's amax grows past every earlier one, its "
               "values above the old amax saturate on that step (`fp8_staleness` = this step's amax / the amax of "
               "its scale, above 1), and when it shrinks, the scale stays small for the window's length. Per operand "
               "of the seed-0 fp8 run (delayed), against the same seed's fp8-current run (the scale from the step's "
               "own amax):\n\n| tensor | largest amax / amax of the scale | steps above 1 | saturated on those steps "
               "| saturated, current scaling (mean) |\n|---|---:|---:|---:|---:|\n");
    int worst = -1;
    stale stl[NT];
    for (int t = 0; t < NT; t++) {
        MPT_TRY(staleness_of(c, "mlp-fp8-seed0", fp8_tensors[t], &stl[t]));
        fprintf(f, "| `%s` | %.3g | %d of %d | %.3g%% | %.3g%% |\n", fp8_tensors[t], stl[t].max_ratio,
                stl[t].stale_steps, stl[t].steps, 100.0 * stl[t].sat_stale, 100.0 * sat_cur[t]);
        if (worst < 0 || stl[t].max_ratio > stl[worst].max_ratio) worst = t;
    }
    char stale_text[600];
    mpt_text_staleness(stale_text, sizeof stale_text, fp8_tensors[worst], stl[worst].max_ratio,
                       stl[worst].stale_steps, stl[worst].steps, stl[worst].sat_stale, sat_cur[worst]);
    fprintf(f, "\nThe largest: %s.\n\n", stale_text);
    char mx_text[600];
    mpt_text_mx_rounding(mx_text, sizeof mx_text, sat_mx_mean[0], sat_mx_mean[1], flush_mx_mean[0], flush_mx_mean[1]);
    fprintf(f, "## MX block scales: FLOOR against RCEIL\n\nOCP MX v1.0's rule (`--mx-scale floor`) takes X = "
               "2^(floor(log2 amax) - 8) for a block of 32, so amax / X lies in [256, 512): a block whose largest values "
               "lie in [448 X, 512 X) saturates them to 448 X. RCEIL (cuBLAS's and TE's MXFP8 rule) takes the "
               "smallest power of two with amax / X <= 448: nothing saturates, and every value of the block sits up "
               "to one binade lower. Per operand of the seed-0 mxfp8 runs (`mlp-mxfp8-seed0/`, "
               "`mlp-mxfp8-rceil-seed0/`, means over the telemetry steps):\n\n| tensor | saturated, FLOOR | "
               "saturated, RCEIL | flushed, FLOOR | flushed, RCEIL |\n|---|---:|---:|---:|---:|\n");
    for (int t = 0; t < NT; t++)
        fprintf(f, "| `%s` | %.3g%% | %.3g%% | %.3g%% | %.3g%% |\n", fp8_tensors[t], 100.0 * sat_mx[0][t],
                100.0 * sat_mx[1][t], 100.0 * flush_mx[0][t], 100.0 * flush_mx[1][t]);
    fprintf(f, "\nMeans over the six operands: %s. Their cost in the same training (mxfp8-rceil - mxfp8, paired over "
               "the seeds) is the last of the sentences in Training above.\n\n", mx_text);
    fprintf(f, "## The GEMMs on real operands\n\nThe seed-0 fp8 run's trained mlp, one batch of %lld test images, "
               "forward and backward in FP64; each operand cast as `--precision fp8` casts it (current scale); every "
               "GEMM through the CPU backend's FP8 GEMM. Errors are normwise, ||C - R|| / ||R|| in FP64: "
               "*quantization* compares the exact product of the FP8 operands with that of the unrounded ones; "
               "*accumulation* compares each GEMM's output with the exact product of its FP8 operands.\n\n"
               "| GEMM | operands | M x N x K | quantization | FP32 accumulation | fast | fast + promote %d |\n"
               "|---|---|---|---:|---:|---:|---:|\n",
            (long long)BATCH, promote);
    for (int i = 0; i < NG; i++)
        fprintf(f, "| %s | %s | %lld x %lld x %lld | %.2e | %.2e | %.2e | %.2e |\n", E[i].name, E[i].formats,
                (long long)E[i].M, (long long)E[i].N, (long long)E[i].K, E[i].quant, E[i].acc[0], E[i].acc[1],
                E[i].acc[2]);
    fprintf(f, "\nfc2's forward operands laid end to end (%d x %d outputs, each the sum of K / %lld real fc2 "
               "outputs without bias):\n\n| K | quantization | FP32 accumulation | fast | fast + promote %d | fast / "
               "quantization |\n|---:|---:|---:|---:|---:|---:|\n",
            LADDER_MN, LADDER_MN, (long long)Lad[0].K, promote);
    for (int i = 0; i < nl; i++)
        fprintf(f, "| %lld | %.2e | %.2e | %.2e | %.2e | %.3f |\n", (long long)Lad[i].K, Lad[i].quant, Lad[i].acc[0],
                Lad[i].acc[1], Lad[i].acc[2], Lad[i].acc[1] / Lad[i].quant);
    const gemm_err *l0 = &Lad[0];
    fprintf(f, "\nFrom K = %lld to K = %lld the quantization error went from %.1e to %.1e (%s: the operands' "
               "roundings are independent of each other, and the sum grows with them), FP32 accumulation's from %.1e to "
               "%.1e, the fast accumulator's from %.1e to %.1e (%.0fx: it truncates at every block of 32 products, so "
               "its error %s with the number of blocks) and with promotion every %d from %.1e to %.1e. The model of "
               "the fast accumulator (kernels/cpu/gemm.c: Khattak and Mikaitis' H100 model; alignment to 13 fraction "
               "bits below the block's largest exponent, a sum truncated to 14 bits) reproduced cuBLASLt's FP8 GEMMs "
               "bit for bit on the one GPU it was measured on (an H200, cuBLASLt 13.1; random E4M3 GEMMs, K = 16 .. "
               "4096): FAST_ACCUM 1 is this model, FAST_ACCUM 0 (cuBLASLt's default) this model promoted every 128 "
               "(bench/results/gpu-2026-11-26-b.md; tests/test_cuda_fp8.c measures it on any GPU). Another GPU or "
               "cuBLASLt version may differ.%s\n\n",
            (long long)l0->K, (long long)kl->K, l0->quant, kl->quant,
            kl->quant <= 2.0 * l0->quant ? "it does not grow with K" : "it grew, which the lesson does not expect",
            l0->acc[0], kl->acc[0], l0->acc[1], kl->acc[1], kl->acc[1] / l0->acc[1],
            kl->acc[1] > 2.0 * l0->acc[1] ? "grows" : "would grow; here it did not", promote, l0->acc[2], kl->acc[2],
            E[1].K <= promote ? " (The weight-gradient GEMMs, with K = 128, are not promoted before their end: fast "
                                "and fast + promote are the same there.)" : "");
    double med[NG];
    for (int i = 0; i < NG; i++) med[i] = E[i].quant;
    qsort(med, NG, sizeof med[0], cmp_double);
    fprintf(f, "The median quantization error of the five GEMMs is %.1e: the cost of FP8 operands, whatever the "
               "accumulator.\n\n", med[NG / 2]);
    fprintf(f, "Criterion for the effect: (a) E4M3 loses (flushes or makes subnormal) at least twice the share of "
               "gradient values that E5M2 loses, and more than none; (b) along K, the fast accumulator's error reaches "
               "a tenth of the quantization error at some K, and promotion every %d cuts it there at least 4x. "
               "Training is reported with its verdicts, not made a criterion.\n",
            promote);
    return mpt_lab_report_close(c, &mpt_lab_fp8, f, plot_error);
}

const mpt_lab_lesson mpt_lab_fp8 = {
    "fp8",
    "What do FP8 GEMMs with per-tensor or per-block scales cost in accuracy over seeds; which gradient values do E4M3 "
    "and E5M2 lose, past delayed scaling's warm-up and when the amax history goes stale; what do MX's FLOOR and "
    "RCEIL scales saturate; and how does Hopper's narrow FP8 accumulator's error grow with K, with and without "
    "promotion to FP32?",
    "seeds=N (2..8; default: the lesson's size), kmax=K (longest synthetic reduction, default 65536), promote=N "
    "(default 128)",
    run,
    {12000, 10000, 1, 3}, /* full */
    {4000, 2000, 1, 2}, /* --quick */
    "seeds kmax promote",
    "--quick 20 s, full 52 s of CPU time (2-core VM, 2026-11-28)",
};
