/*
 * tools/lab/lesson_accumulation.c - lesson `accumulation`: why GEMMs accumulate in FP32.
 *
 * Plan: train the mlp in fp32 (seed 0); take its trained first-layer weights (checkpoint) and the first test
 * images (pixels / 255, the layer's real inputs), both rounded to FP16 as mptrain's fp16 mode feeds its GEMMs, so
 * that every product is exact in FP32 (as Tensor Cores form it). The layer's dot products, one image row times one
 * weight row (K = 784), are laid end to end into one long stream of products; dot products of length K = 16, 64,
 * ..., 65536 are cut from it (longer than 784: several rows in a row, as a GEMM with a larger K would sum). Each is
 * summed left to right in FP64 with compensation (the reference), and in FP32, FP16 and BF16 accumulators
 * rounding after every addition (tools/lab/accum.h). The error of each sum relative to sum |p_i| (the measure
 * Higham's bound uses; relative to the sum itself it is unbounded where terms cancel), median and largest over
 * the dot products of each K, beside the bound K u of each accumulator and the typical sqrt(K) u.
 * FP16 accumulation is a real option: cuBLAS's CUBLAS_COMPUTE_16F (HGEMM) accumulates in FP16 on Tensor Cores;
 * no GEMM accumulates in BF16, which is shown for its 8 significant bits.
 * Also the error relative to the output itself, |sum - exact| / |exact| (median), which is what a GEMM's user
 * sees and which grows with K where the normwise measure hides it (sum |p| grows with K too).
 * Then Tensor Cores (issue 39 E): the same layer's products in GEMMs of FP16, BF16 and TF32 operands, summed by the
 * v100, a100, h100 and b200 models of their block FMAs (kernels/cpu/tc_accum.h, reached through the CPU backend:
 * mpt_lab_gemm_accum) beside IEEE recursive FP32 summation of the same exact products: the median error against FP64
 * per K, and the sign of the errors: truncation toward zero shrinks magnitudes, so the share of errors
 * sign(exact) (sum - exact) < 0 over every dot product, with the sign test's p-value (accum.h), against round to
 * nearest's (tensor-cores.dat).
 * Criterion: the effect is observed when at every K the FP32 accumulator's median error is at least 10x below
 * both 16-bit accumulators', and the 16-bit accumulators' median error relative to the output is at least 10x
 * larger at the largest K than at the smallest. The Tensor Core sentences have their own (tools/sentences.h): a sign
 * is resolved at p < 0.01.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "engine/numerics.h"
#include "tools/lab/accum.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"

#define N_K 7
static const int64_t Ks[N_K] = {16, 64, 256, 1024, 4096, 16384, 65536};
#define DOTS 128       /* dot products per K */
#define IMAGES 256     /* test images whose rows feed the stream */

typedef struct k_err {
    int64_t K;
    int n;                                  /* dot products with sum |p| > 0 */
    double median[MPT_ACCUM_COUNT], max[MPT_ACCUM_COUNT]; /* recursive summation, error / sum |p| */
    double median_out[MPT_ACCUM_COUNT];     /* median of |sum - ref| / |ref|: relative to the output itself */
    double out_m[MPT_ACCUM_COUNT][MPT_ACCUM_METHOD_COUNT]; /* the same for every method */
} k_err;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The stream of products: position t is row t / D, column t % D; row r multiplies image (r / N) mod M with weight
 * row r mod N. x: [M, D] FP16-rounded inputs, w: [N, D] FP16-rounded weights (as floats). */
typedef struct stream {
    const float *x, *w;
    int64_t M, N, D;
} stream;

static float product_at(const stream *s, int64_t t) {
    int64_t r = t / s->D, c = t % s->D;
    int64_t img = (r / s->N) % s->M, row = r % s->N;
    return s->x[img * s->D + c] * s->w[row * s->D + c]; /* exact: two 11-bit significands */
}

static mpt_status measure(const stream *st, int64_t block, k_err *out) {
    int64_t total = st->M * st->N * st->D;
    float *p = malloc((size_t)Ks[N_K - 1] * sizeof *p);
    double *scratch = malloc((size_t)Ks[N_K - 1] * sizeof *scratch);
    double *e = malloc((size_t)MPT_ACCUM_COUNT * DOTS * sizeof *e), *o = malloc((size_t)MPT_ACCUM_COUNT * DOTS * sizeof *o);
    double *om = malloc((size_t)MPT_ACCUM_COUNT * MPT_ACCUM_METHOD_COUNT * DOTS * sizeof *om);
    if (!p || !scratch || !e || !o || !om) {
        free(p), free(scratch), free(e), free(o), free(om);
        return mpt_errorf(MPT_ERR_NOMEM, "lab accumulation: no memory");
    }
    for (int ki = 0; ki < N_K; ki++) {
        int64_t K = Ks[ki];
        int n = 0;
        for (int d = 0; d < DOTS; d++) {
            /* spread the starts over the stream: different images, rows and columns */
            int64_t t0 = ((int64_t)d * 7919 * st->D + (int64_t)d * 389) % total;
            for (int64_t i = 0; i < K; i++) p[i] = product_at(st, (t0 + i) % total);
            double ref, abs_sum, sum[MPT_ACCUM_COUNT];
            mpt_accum_dot(p, K, &ref, &abs_sum, sum);
            if (!(abs_sum > 0.0) || ref == 0.0) continue;
            for (int a = 0; a < MPT_ACCUM_COUNT; a++) {
                e[a * DOTS + n] = fabs(sum[a] - ref) / abs_sum;
                o[a * DOTS + n] = fabs(sum[a] - ref) / fabs(ref);
                for (int m = 0; m < MPT_ACCUM_METHOD_COUNT; m++) {
                    double v = m == MPT_ACCUM_RECURSIVE
                                   ? sum[a]
                                   : mpt_accum_sum(p, K, mpt_accum_dtype((mpt_accum_kind)a), (mpt_accum_method)m,
                                                   block, scratch);
                    om[(a * MPT_ACCUM_METHOD_COUNT + m) * DOTS + n] = fabs(v - ref) / fabs(ref);
                }
            }
            n++;
        }
        out[ki].K = K;
        out[ki].n = n;
        for (int a = 0; a < MPT_ACCUM_COUNT; a++) {
            out[ki].median[a] = median_of(e + a * DOTS, n);
            out[ki].max[a] = n == 0 ? NAN : e[a * DOTS + n - 1];
            out[ki].median_out[a] = median_of(o + a * DOTS, n);
            for (int m = 0; m < MPT_ACCUM_METHOD_COUNT; m++)
                out[ki].out_m[a][m] = median_of(om + (a * MPT_ACCUM_METHOD_COUNT + m) * DOTS, n);
        }
    }
    free(p), free(scratch), free(e), free(o), free(om);
    return MPT_OK;
}

/* The trained first layer (FP32) and the first test images (pixels / 255, FP32). */
static mpt_status load_operands(const mpt_lab_ctx *c, const char *ckpt, float **x, float **w, int64_t *M, int64_t *N,
                                int64_t *D) {
    mpt_checkpoint *ck = NULL;
    MPT_TRY(mpt_checkpoint_open(ckpt, NULL, 0, &ck));
    const mpt_checkpoint_tensor *t = mpt_checkpoint_find(ck, "fc1.weight");
    const mpt_mnist *d = &c->cd->d;
    mpt_status s = MPT_OK;
    if (!t || t->ndim != 2 || t->shape[1] != d->dim || t->dtype != MPT_DTYPE_F32)
        s = mpt_errorf(MPT_ERR_FORMAT, "%s: no FP32 fc1.weight of shape [N, %lld] (the lesson needs the mlp)", ckpt,
                       (long long)d->dim);
    int64_t n = s == MPT_OK ? t->shape[0] : 0, m = d->n_test < IMAGES ? d->n_test : IMAGES;
    float *wv = s == MPT_OK ? malloc((size_t)(n * d->dim) * sizeof *wv) : NULL;
    float *xv = s == MPT_OK ? malloc((size_t)(m * d->dim) * sizeof *xv) : NULL;
    if (s == MPT_OK && (!wv || !xv)) s = mpt_errorf(MPT_ERR_NOMEM, "lab accumulation: no memory");
    if (s == MPT_OK) s = mpt_checkpoint_read(ck, "fc1.weight", wv, (size_t)(n * d->dim) * sizeof *wv);
    mpt_checkpoint_close(&ck);
    if (s != MPT_OK) {
        free(wv);
        free(xv);
        return s;
    }
    for (int64_t i = 0; i < m * d->dim; i++) xv[i] = (float)d->test_images[i] / 255.0f;
    *x = xv;
    *w = wv;
    *M = m;
    *N = n;
    *D = d->dim;
    return MPT_OK;
}

/* ---- Tensor Core summation models ------------------------------------------------------------------------------
 * The same layer's real products, now as a GEMM feeds Tensor Cores: operands rounded to FP16, BF16 or TF32 (RNE from
 * the FP32 weights and pixels), A = TC_IMAGES images' rows, B = TC_ROWS weight rows, each output one dot product of
 * length K, cut in segments of the layer's 784 columns. Segment g (counted over every K of the ladder, so that dot
 * products of different K share no product) of output (i, j) pairs image (i + TC_IMAGES floor(g / (N / TC_ROWS))) mod
 * M with weight row (j + TC_ROWS g) mod N: every product is one the layer computes, and no (image, weight row) pair
 * repeats while g < (M / TC_IMAGES) (N / TC_ROWS) (1024 for 256 images and fc1's 512 rows; the ladder uses 116). For K
 * below 784 the dot products take the middle K columns of one segment (where the pixels are not zero). Summed by IEEE
 * recursive FP32 here (accum.c: what the `ieee` row of the models computes, one FMA per product in order; the CPU
 * backend's own ieee is its FP32 engine's blocked order, not this) and by the v100, a100, h100 and b200 models through
 * the CPU backend (mpt_lab_gemm_accum). */
enum { TC_FP16 = 0, TC_BF16, TC_TF32, TC_FORMATS };
enum { TC_IEEE = 0, TC_V100, TC_A100, TC_H100, TC_B200, TC_SUMS };
static const mpt_math tc_math[TC_FORMATS] = {[TC_FP16] = MPT_MATH_F16, [TC_BF16] = MPT_MATH_BF16,
                                             [TC_TF32] = MPT_MATH_TF32};
static const char *const tc_format_name[TC_FORMATS] = {[TC_FP16] = "FP16", [TC_BF16] = "BF16", [TC_TF32] = "TF32"};
/* the backend's model of each summation ([TC_IEEE] unused: summed in accum.c) */
static const mpt_accum_model tc_model[TC_SUMS] = {[TC_IEEE] = MPT_ACCUM_MODEL_IEEE, [TC_V100] = MPT_ACCUM_MODEL_V100,
                                                  [TC_A100] = MPT_ACCUM_MODEL_A100, [TC_H100] = MPT_ACCUM_MODEL_H100,
                                                  [TC_B200] = MPT_ACCUM_MODEL_B200};
static const char *const tc_sum_name[TC_SUMS] = {[TC_IEEE] = "IEEE recursive", [TC_V100] = "v100", [TC_A100] = "a100",
                                                 [TC_H100] = "h100", [TC_B200] = "b200"};
_Static_assert(sizeof tc_sum_name / sizeof tc_sum_name[0] == TC_SUMS, "a name per summation");
_Static_assert(sizeof tc_format_name / sizeof tc_format_name[0] == TC_FORMATS, "a name per format");
#define TC_IMAGES 16
#define TC_ROWS 8
#define TC_DOTS (TC_IMAGES * TC_ROWS)

typedef struct tc_result {
    int n[N_K][TC_FORMATS];                         /* dot products with a nonzero exact sum */
    int has[TC_FORMATS][TC_SUMS];                   /* the summation exists for the format (v100: FP16 only) */
    double out[N_K][TC_FORMATS][TC_SUMS];           /* median |sum - exact| / |exact| */
    double norm[N_K][TC_FORMATS][TC_SUMS];          /* median |sum - exact| / sum |p| */
    double toward[N_K][TC_FORMATS][TC_SUMS];        /* share of the nonzero errors that shrink the magnitude */
    double err[TC_FORMATS][TC_SUMS][N_K * TC_DOTS]; /* sign(exact) (sum - exact) / sum |p|, every K */
    int64_t n_err[TC_FORMATS];
    mpt_accum_bias bias[TC_FORMATS][TC_SUMS];       /* of err, pooled over K */
    int64_t b200_differs[TC_FORMATS];               /* dot products whose b200 sum's bits are not h100's */
} tc_result;

/* v rounded to format f (RNE), as a float; the 16-bit formats' bits into *bits. */
static float tc_round(float v, int f, uint16_t *bits) {
    if (f == TC_FP16) return mpt_f16_to_f32(*bits = mpt_f32_to_f16(v));
    if (f == TC_BF16) return mpt_bf16_to_f32(*bits = mpt_f32_to_bf16(v));
    return mpt_round_tf32(v);
}

/* D[TC_IMAGES, TC_ROWS] = A B^T summed by model m: A [TC_IMAGES, K] and B [TC_ROWS, K] in format f (TF32: FP32
 * values already rounded, which the backend's rounding keeps). */
static mpt_status tc_gemm(int f, mpt_accum_model m, int64_t K, const float *a, const uint16_t *a16, const float *b,
                          const uint16_t *b16, float *d) {
    const mpt_dtype dt = f == TC_FP16 ? MPT_DTYPE_F16 : f == TC_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
    const mpt_gemm_args g = {.trans_b = 1, .M = TC_IMAGES, .N = TC_ROWS, .K = K,
                             .A = f == TC_TF32 ? (const void *)a : a16, .a_dtype = dt,
                             .B = f == TC_TF32 ? (const void *)b : b16, .b_dtype = dt,
                             .C = d, .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .math = tc_math[f],
                             .tag = "lab.accumulation.tc"};
    return mpt_lab_gemm_accum(&g, m);
}

/* x [M, D] pixels / 255 and w [N, D] fc1's weights, both FP32. */
static mpt_status measure_tc(const float *x, const float *w, int64_t M, int64_t N, int64_t D, tc_result *T) {
    memset(T, 0, sizeof *T);
    const int64_t kmax = Ks[N_K - 1], per = N / TC_ROWS > 0 ? N / TC_ROWS : 1;
    float *a = malloc((size_t)(TC_IMAGES * kmax) * sizeof *a), *b = malloc((size_t)(TC_ROWS * kmax) * sizeof *b);
    uint16_t *a16 = malloc((size_t)(TC_IMAGES * kmax) * sizeof *a16), *b16 = malloc((size_t)(TC_ROWS * kmax) * sizeof *b16);
    float *p = malloc((size_t)kmax * sizeof *p);
    double *v = malloc((size_t)2 * TC_SUMS * TC_DOTS * sizeof *v); /* per summation: |e| / |exact|, |e| / sum |p| */
    mpt_status s = a && b && a16 && b16 && p && v ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "lab accumulation: no memory");
    for (int f = 0; f < TC_FORMATS; f++)
        for (int m = 0; m < TC_SUMS; m++) T->has[f][m] = m == TC_IEEE || mpt_accum_model_covers(tc_model[m], tc_math[f]);
    int64_t g0 = 0; /* the first segment of this K */
    for (int ki = 0; ki < N_K && s == MPT_OK; ki++) {
        const int64_t K = Ks[ki], c0 = K < D ? (D - K) / 2 : 0;
        for (int f = 0; f < TC_FORMATS && s == MPT_OK; f++) {
            for (int64_t k = 0; k < K; k++) {
                const int64_t t = c0 + k, g = g0 + t / D, col = t % D;
                for (int i = 0; i < TC_IMAGES; i++)
                    a[i * K + k] = tc_round(x[((i + TC_IMAGES * (g / per)) % M) * D + col], f, &a16[i * K + k]);
                for (int j = 0; j < TC_ROWS; j++)
                    b[j * K + k] = tc_round(w[((j + TC_ROWS * g) % N) * D + col], f, &b16[j * K + k]);
            }
            float d[TC_SUMS][TC_DOTS];
            for (int m = 1; m < TC_SUMS && s == MPT_OK; m++)
                if (T->has[f][m]) s = tc_gemm(f, tc_model[m], K, a, a16, b, b16, d[m]);
            int n = 0;
            for (int i = 0; i < TC_IMAGES && s == MPT_OK; i++)
                for (int j = 0; j < TC_ROWS; j++) {
                    for (int64_t k = 0; k < K; k++) p[k] = a[i * K + k] * b[j * K + k]; /* exact in FP32 */
                    double abs_sum;
                    const double ref = mpt_accum_exact(p, K, &abs_sum, &d[TC_IEEE][i * TC_ROWS + j]);
                    if (ref == 0.0 || !(abs_sum > 0.0)) continue;
                    for (int m = 0; m < TC_SUMS; m++) {
                        if (!T->has[f][m]) continue;
                        const double e = (double)d[m][i * TC_ROWS + j] - ref;
                        v[(2 * m) * TC_DOTS + n] = fabs(e) / fabs(ref);
                        v[(2 * m + 1) * TC_DOTS + n] = fabs(e) / abs_sum;
                        T->err[f][m][T->n_err[f] + n] = (ref > 0 ? e : -e) / abs_sum;
                    }
                    T->b200_differs[f] += memcmp(&d[TC_H100][i * TC_ROWS + j], &d[TC_B200][i * TC_ROWS + j],
                                                 sizeof(float)) != 0;
                    n++;
                }
            T->n[ki][f] = n;
            for (int m = 0; m < TC_SUMS; m++) {
                if (!T->has[f][m]) {
                    T->out[ki][f][m] = T->norm[ki][f][m] = T->toward[ki][f][m] = NAN;
                    continue;
                }
                T->out[ki][f][m] = median_of(v + (2 * m) * TC_DOTS, n);
                T->norm[ki][f][m] = median_of(v + (2 * m + 1) * TC_DOTS, n);
                mpt_accum_bias kb;
                mpt_accum_bias_of(T->err[f][m] + T->n_err[f], n, &kb);
                T->toward[ki][f][m] = kb.share_toward;
            }
            T->n_err[f] += n;
        }
        g0 += (c0 + K + D - 1) / D;
    }
    for (int f = 0; f < TC_FORMATS; f++)
        for (int m = 0; m < TC_SUMS; m++) mpt_accum_bias_of(T->err[f][m], T->has[f][m] ? T->n_err[f] : 0, &T->bias[f][m]);
    free(a), free(b), free(a16), free(b16), free(p), free(v);
    return s;
}

/* <lesson dir>/tensor-cores.dat: the Tensor Core section's numbers, five blocks (gnuplot indexes 0-4). */
static mpt_status write_tc_dat(mpt_lab_ctx *c, const tc_result *T) {
    FILE *dat = mpt_lab_open(c, "tensor-cores.dat");
    if (!dat) return MPT_ERR_IO;
    static const char *const what[3] = {
        "the median |sum - exact| / |exact| (relative to the output)",
        "the median |sum - exact| / sum |p_i| (normwise)",
        "the share of the nonzero errors sign(exact) (sum - exact) that are negative (the sum smaller in magnitude)"};
    for (int blk = 0; blk < 3; blk++) {
        fprintf(dat, "%s# K, then for FP16, BF16 and TF32 operands in turn: the dot products with a nonzero exact sum, "
                     "and %s of IEEE recursive FP32, v100, a100, h100, b200 (nan: no such row)\n",
                blk ? "\n\n" : "", what[blk]);
        for (int k = 0; k < N_K; k++) {
            fprintf(dat, "%lld", (long long)Ks[k]);
            for (int f = 0; f < TC_FORMATS; f++) {
                fprintf(dat, " %d", T->n[k][f]);
                for (int m = 0; m < TC_SUMS; m++) {
                    const double x = blk == 0 ? T->out[k][f][m] : blk == 1 ? T->norm[k][f][m] : T->toward[k][f][m];
                    fprintf(dat, " %.6e", blk < 2 && !(x > 0) ? NAN : x);
                }
            }
            fprintf(dat, "\n");
        }
    }
    fprintf(dat, "\n\n# pooled over every K: format, summation, errors, negative (toward zero), positive, zero, share "
                 "negative among the nonzero, the sign test's two-sided p-value, mean error / mean |error| (errors "
                 "sign(exact) (sum - exact) / sum |p_i|)\n");
    for (int f = 0; f < TC_FORMATS; f++)
        for (int m = 0; m < TC_SUMS; m++) {
            if (!T->has[f][m]) continue;
            const mpt_accum_bias *b = &T->bias[f][m];
            fprintf(dat, "%s %s %lld %lld %lld %lld %.6f %.6e %.6f\n", tc_format_name[f],
                    m == TC_IEEE ? "ieee-recursive" : tc_sum_name[m], (long long)b->n, (long long)b->toward_zero,
                    (long long)b->away, (long long)b->exact, b->share_toward, b->p_sign, b->mean_ratio);
        }
    fprintf(dat, "\n\n# format, dot products, those whose b200 sum differs in any bit from the h100 one\n");
    for (int f = 0; f < TC_FORMATS; f++)
        fprintf(dat, "%s %lld %lld\n", tc_format_name[f], (long long)T->n_err[f], (long long)T->b200_differs[f]);
    return mpt_lab_close(c, dat, "tensor-cores.dat");
}

static mpt_status run(mpt_lab_ctx *c) {
    double block_d;
    MPT_TRY(mpt_lab_param(c, "block", 256, &block_d));
    if (!(block_d >= 2 && block_d <= 65536 && block_d == floor(block_d)))
        return mpt_errorf(MPT_ERR_ARG, "--param block: expected an integer in [2, 65536], found %g", block_d);
    MPT_LAB_PARAMS_CHECKED(c);
    const int64_t block = (int64_t)block_d;
    const char *f32[] = {"--precision", "fp32", NULL};
    mpt_run_result r;
    MPT_TRY(mpt_lab_train(c, "fp32", f32, &r));
    double acc = 100.0 * r.final_test_acc;
    mpt_run_result_free(&r);
    char ckpt[MPT_CLI_PATH + 64];
    snprintf(ckpt, sizeof ckpt, "%s/fp32/%s", c->dir, MPT_CLI_CHECKPOINT_FILE);
    stream st;
    float *x = NULL, *w = NULL;
    MPT_TRY(load_operands(c, ckpt, &x, &w, &st.M, &st.N, &st.D));
    /* the stream's operands rounded to FP16, as the fp16 mode feeds its GEMMs */
    float *x16 = malloc((size_t)(st.M * st.D) * sizeof *x16), *w16 = malloc((size_t)(st.N * st.D) * sizeof *w16);
    k_err E[N_K];
    static tc_result T; /* large: the pooled errors of every format and summation */
    mpt_status s = x16 && w16 ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "lab accumulation: no memory");
    if (s == MPT_OK) {
        for (int64_t i = 0; i < st.M * st.D; i++) x16[i] = mpt_f16_to_f32(mpt_f32_to_f16(x[i]));
        for (int64_t i = 0; i < st.N * st.D; i++) w16[i] = mpt_f16_to_f32(mpt_f32_to_f16(w[i]));
        st.x = x16;
        st.w = w16;
        s = measure(&st, block, E);
    }
    if (s == MPT_OK) s = measure_tc(x, w, st.M, st.N, st.D, &T);
    free(x16);
    free(w16);
    free(x);
    free(w);
    MPT_TRY(s);

    double u[MPT_ACCUM_COUNT];
    int sig[MPT_ACCUM_COUNT]; /* significant bits */
    for (int a = 0; a < MPT_ACCUM_COUNT; a++) {
        sig[a] = a == MPT_ACCUM_F32 ? 24 : a == MPT_ACCUM_F16 ? 11 : 8;
        u[a] = ldexp(1.0, -sig[a]);
    }
    int ok = 1;
    for (int k = 0; k < N_K; k++)
        ok &= E[k].n > 0 && E[k].median[MPT_ACCUM_F32] * 10.0 <= E[k].median[MPT_ACCUM_F16] &&
              E[k].median[MPT_ACCUM_F32] * 10.0 <= E[k].median[MPT_ACCUM_BF16];
    for (int a = MPT_ACCUM_F16; a <= MPT_ACCUM_BF16; a++)
        ok &= E[N_K - 1].median_out[a] >= 10.0 * E[0].median_out[a];
    c->observed = ok;
    const k_err *k0 = &E[0], *k1 = &E[3], *kl = &E[N_K - 1]; /* K = 16; 1024, about the layer's 784; the longest */
    double grow[MPT_ACCUM_COUNT][MPT_ACCUM_METHOD_COUNT];
    for (int a = 0; a < MPT_ACCUM_COUNT; a++)
        for (int m = 0; m < MPT_ACCUM_METHOD_COUNT; m++)
            grow[a][m] = k0->out_m[a][m] > 0 ? kl->out_m[a][m] / k0->out_m[a][m] : NAN;
    /* FP32's own growth beside FP16's, said as measured (recursive sums) */
    char growth[700];
    mpt_text_accum_growth(growth, sizeof growth, "FP16", grow[MPT_ACCUM_F16][MPT_ACCUM_RECURSIVE],
                          grow[MPT_ACCUM_F32][MPT_ACCUM_RECURSIVE],
                          k0->out_m[MPT_ACCUM_F16][MPT_ACCUM_RECURSIVE] / k0->out_m[MPT_ACCUM_F32][MPT_ACCUM_RECURSIVE],
                          k0->K, kl->K);
    /* the other methods against the recursive sum at the longest K, in each accumulator */
    char gains[MPT_ACCUM_COUNT][3][300];
    for (int a = 0; a < MPT_ACCUM_COUNT; a++)
        for (int m = 1; m < MPT_ACCUM_METHOD_COUNT; m++) {
            char meth[64];
            if (m == MPT_ACCUM_BLOCKED) snprintf(meth, sizeof meth, "blocked summation (blocks of %lld)", (long long)block);
            else snprintf(meth, sizeof meth, "%s summation", mpt_accum_method_name((mpt_accum_method)m));
            mpt_text_method_gain(gains[a][m - 1], sizeof gains[a][m - 1], meth, mpt_accum_name((mpt_accum_kind)a),
                                 kl->out_m[a][MPT_ACCUM_RECURSIVE], kl->out_m[a][m], kl->K);
        }
    const double blocked_gain32 = kl->out_m[MPT_ACCUM_F32][MPT_ACCUM_RECURSIVE] / kl->out_m[MPT_ACCUM_F32][MPT_ACCUM_BLOCKED];
    char why_blocked[600];
    if (blocked_gain32 >= 2.0)
        snprintf(why_blocked, sizeof why_blocked, "This is why a blocked FP32 GEMM errs less than a left-to-right sum: "
                 "each partial sum runs over %lld products and the %lld partial sums are added once, so a product "
                 "meets at most about %lld + %lld roundings instead of %lld (the bound (b + K / b) u against K u)",
                 (long long)block, (long long)((kl->K + block - 1) / block), (long long)block,
                 (long long)((kl->K + block - 1) / block), (long long)kl->K);
    else
        snprintf(why_blocked, sizeof why_blocked, "Blocking did not reduce FP32's error here (%.2gx at K = %lld), "
                 "though its bound, (b + K / b) u against K u, is smaller", blocked_gain32, (long long)kl->K);
    char swamp16[200], swampb[200];
    mpt_text_swamping(swamp16, sizeof swamp16, "FP16", sig[MPT_ACCUM_F16]);
    mpt_text_swamping(swampb, sizeof swampb, "BF16", sig[MPT_ACCUM_BF16]);
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: the trained mlp's first-layer dot products (FP16 operands, exact products) summed left to "
                 "right in an FP16 accumulator err by %.1e of the output in median at K = %lld and %.1e at K = %lld; "
                 "in a BF16 accumulator by %.1e and %.1e; in FP32 by %.1e and %.1e. %s. Normwise (error / sum |p|), "
                 "FP32 accumulation was at least 10x more exact than both 16-bit ones at every K (at K = %lld: %.1e "
                 "against %.1e and %.1e), each far below the worst-case bound K u (%.1e, %.1e, %.1e). Other orders "
                 "(K = %lld): %s; %s; %s. %s.",
                 k1->median_out[MPT_ACCUM_F16], (long long)k1->K, kl->median_out[MPT_ACCUM_F16], (long long)kl->K,
                 k1->median_out[MPT_ACCUM_BF16], kl->median_out[MPT_ACCUM_BF16], k1->median_out[MPT_ACCUM_F32],
                 kl->median_out[MPT_ACCUM_F32], growth, (long long)k1->K, k1->median[MPT_ACCUM_F32],
                 k1->median[MPT_ACCUM_F16], k1->median[MPT_ACCUM_BF16], (double)k1->K * u[MPT_ACCUM_F32],
                 (double)k1->K * u[MPT_ACCUM_F16], (double)k1->K * u[MPT_ACCUM_BF16], (long long)kl->K,
                 gains[MPT_ACCUM_F32][MPT_ACCUM_BLOCKED - 1], gains[MPT_ACCUM_F16][MPT_ACCUM_PAIRWISE - 1],
                 gains[MPT_ACCUM_F16][MPT_ACCUM_KAHAN - 1], why_blocked);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: FP32 accumulation was not 10x more exact than both 16-bit accumulators at every K, or "
                 "their error relative to the output did not grow 10x from K = %lld to %lld (median errors relative "
                 "to the output at K = %lld: FP32 %.1e, FP16 %.1e, BF16 %.1e; at K = %lld: %.1e, %.1e, %.1e). %s.",
                 (long long)E[0].K, (long long)kl->K, (long long)E[0].K, E[0].median_out[MPT_ACCUM_F32],
                 E[0].median_out[MPT_ACCUM_F16], E[0].median_out[MPT_ACCUM_BF16], (long long)kl->K,
                 kl->median_out[MPT_ACCUM_F32], kl->median_out[MPT_ACCUM_F16], kl->median_out[MPT_ACCUM_BF16], growth);
    /* Tensor Cores: the h100 model on FP16 operands in the conclusion, every model and format in the report */
    char tc_vs[TC_FORMATS][TC_SUMS][700], tc_bias[TC_FORMATS][TC_SUMS][900], same_bits[300];
    int64_t b200_differs = 0, tc_total = 0;
    for (int f = 0; f < TC_FORMATS; f++) {
        b200_differs += T.b200_differs[f];
        tc_total += T.n_err[f];
        for (int m = 1; m < TC_SUMS; m++) {
            if (!T.has[f][m]) continue;
            mpt_text_tc_vs_ieee(tc_vs[f][m], sizeof tc_vs[f][m], tc_sum_name[m], tc_format_name[f], Ks[0], Ks[N_K - 1],
                                T.out[0][f][m], T.out[N_K - 1][f][m], T.out[0][f][TC_IEEE], T.out[N_K - 1][f][TC_IEEE]);
            const mpt_accum_bias *bt = &T.bias[f][m], *br = &T.bias[f][TC_IEEE];
            const mpt_text_signs sg_t = {bt->toward_zero, bt->away, bt->p_sign, bt->mean_ratio},
                                 sg_r = {br->toward_zero, br->away, br->p_sign, br->mean_ratio};
            mpt_text_truncation_bias(tc_bias[f][m], sizeof tc_bias[f][m], tc_sum_name[m], tc_format_name[f], &sg_t, &sg_r);
        }
    }
    mpt_text_same_bits(same_bits, sizeof same_bits, tc_sum_name[TC_H100], tc_sum_name[TC_B200], b200_differs, tc_total);
    {
        size_t used = strlen(c->conclusion);
        snprintf(c->conclusion + used, sizeof c->conclusion - used,
                 " Tensor Cores, modelled (their block FMAs through the CPU backend; K = %lld to %lld): %s. %s. Over "
                 "FP16, BF16 and TF32 operands %s.",
                 (long long)Ks[0], (long long)Ks[N_K - 1], tc_vs[TC_FP16][TC_H100], tc_bias[TC_FP16][TC_H100],
                 same_bits);
    }

    MPT_TRY(write_tc_dat(c, &T));
    FILE *dat = mpt_lab_open(c, "accumulation.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# K median_fp32 max_fp32 median_fp16 max_fp16 median_bf16 max_bf16 (recursive sums, error / sum |p|)\n");
    for (int k = 0; k < N_K; k++) {
        fprintf(dat, "%lld", (long long)E[k].K);
        for (int a = 0; a < MPT_ACCUM_COUNT; a++)
            fprintf(dat, " %.6e %.6e", E[k].median[a] > 0 ? E[k].median[a] : NAN, E[k].max[a] > 0 ? E[k].max[a] : NAN);
        fprintf(dat, "\n");
    }
    fprintf(dat, "\n\n# K, then the median |sum - exact| / |exact| for FP32, FP16, BF16, each: recursive pairwise "
                 "blocked(%lld) Kahan\n", (long long)block);
    for (int k = 0; k < N_K; k++) {
        fprintf(dat, "%lld", (long long)E[k].K);
        for (int a = 0; a < MPT_ACCUM_COUNT; a++)
            for (int m = 0; m < MPT_ACCUM_METHOD_COUNT; m++)
                fprintf(dat, " %.6e", E[k].out_m[a][m] > 0 ? E[k].out_m[a][m] : NAN);
        fprintf(dat, "\n");
    }
    char dat_path[MPT_CLI_PATH + 32];
    snprintf(dat_path, sizeof dat_path, "%s/accumulation.dat", c->dir);
    MPT_TRY(mpt_outdir_close_written(dat, dat_path));
    FILE *gp = mpt_lab_open(c, "accumulation.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 2100, "accumulation.png");
    fprintf(gp, "set multiplot layout 4,1\n"
                "set title 'one dot product summed left to right: error / sum |p| against FP64 (%d dot products per K; "
                "trained mlp, fc1)'\nset xlabel 'K (products per dot product)'\nset ylabel 'error / sum |p_i|'\n"
                "set logscale x 2\nset logscale y 10\nset format x '2^{%%L}'\nset format y '10^{%%L}'\nset xrange [12:90000]\n"
                "set yrange [1e-10:10]\nset grid\nset key outside right\nset datafile missing 'nan'\n"
                "set arrow from 784, graph 0 to 784, graph 1 nohead dt 3 lc rgb 'black'\n"
                "set label 'fc1: K = 784' at 784, 3e-10 offset 0.5,0\n"
                "plot 'accumulation.dat' index 0 using 1:2 with linespoints lw 2 pt 7 lt 1 title 'FP32: median', "
                "'' index 0 using 1:3 with points pt 6 lt 1 title 'FP32: largest', x * 2**-24 with lines dt 2 lt 1 title 'K u, FP32', "
                "'' index 0 using 1:4 with linespoints lw 2 pt 7 lt 2 title 'FP16: median', "
                "'' index 0 using 1:5 with points pt 6 lt 2 title 'FP16: largest', x * 2**-11 with lines dt 2 lt 2 title 'K u, FP16', "
                "'' index 0 using 1:6 with linespoints lw 2 pt 7 lt 3 title 'BF16: median', "
                "'' index 0 using 1:7 with points pt 6 lt 3 title 'BF16: largest', x * 2**-8 with lines dt 2 lt 3 title 'K u, BF16'\n"
                "set title 'median error relative to the output, by summation method (blocks of %lld)'\n"
                "set ylabel '|sum - exact| / |exact|'\nset yrange [*:*]\nunset label\nplot ",
            DOTS, (long long)block);
    static const int dts[MPT_ACCUM_METHOD_COUNT] = {1, 2, 4, 3}, pts[MPT_ACCUM_METHOD_COUNT] = {7, 5, 9, 11};
    for (int a = 0; a < MPT_ACCUM_COUNT; a++)
        for (int m = 0; m < MPT_ACCUM_METHOD_COUNT; m++)
            fprintf(gp, "%s'accumulation.dat' index 1 using 1:%d with linespoints lw 1.5 dt %d pt %d lt %d title '%s, %s'",
                    a || m ? ", \\\n     " : "", 2 + a * MPT_ACCUM_METHOD_COUNT + m, dts[m], pts[m], a + 1,
                    mpt_accum_name((mpt_accum_kind)a), mpt_accum_method_name((mpt_accum_method)m));
    /* Tensor Cores: colour by summation, dash and point by operand format; b200 as points over h100's line */
    static const char *const tc_colour[TC_SUMS] = {"black", "#9467bd", "#2ca02c", "#d62728", "#ff7f0e"};
    static const int tc_dt[TC_FORMATS] = {1, 2, 4}, tc_pt[TC_FORMATS] = {7, 5, 9};
    for (int panel = 0; panel < 2; panel++) {
        if (panel == 0)
            fprintf(gp, "\nset title 'Tensor Cores, modelled: median error relative to the output (%d dot products per "
                        "K, FP16 / BF16 / TF32 operands)'\nset ylabel '|sum - exact| / |exact|'\nset yrange [*:*]\nplot ",
                    TC_DOTS);
        else
            fprintf(gp, "\nset title 'the sign of the error: share of the nonzero errors that shrink the sum (0.5: either "
                        "sign alike)'\nset ylabel 'share toward zero'\nunset logscale y\nset format y '%%.1f'\n"
                        "set yrange [0:1.05]\nplot 0.5 with lines dt 3 lc rgb 'black' notitle, ");
        int first = 1;
        for (int fm = 0; fm < TC_FORMATS; fm++)
            for (int m = 0; m < TC_SUMS; m++) {
                if (!T.has[fm][m]) continue;
                fprintf(gp, "%s'tensor-cores.dat' index %d using 1:%d with %s lw 1.5 dt %d pt %d lc rgb '%s' title '%s, %s'",
                        first ? "" : ", \\\n     ", panel ? 2 : 0, 3 + fm * (TC_SUMS + 1) + m,
                        m == TC_B200 ? "points" : "linespoints", tc_dt[fm], m == TC_B200 ? 6 : tc_pt[fm],
                        tc_colour[m], tc_format_name[fm], tc_sum_name[m]);
                first = 0;
            }
    }
    fprintf(gp, "\nunset multiplot\n");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "accumulation.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_accumulation, &f));
    fprintf(f, "A GEMM sums K products for every output. On Tensor Cores the products of FP16/BF16 operands are exact "
               "and the sums are carried in FP32 (mptrain does the same on the CPU, decision 2 of "
               "ARCHITECTURE.md); cuBLAS also offers an FP16 accumulator (CUBLAS_COMPUTE_16F). Every addition rounds "
               "the running sum to the accumulator's precision: an error up to u |s| per addition (u = 2^-24 in FP32, "
               "2^-11 in FP16, 2^-8 in BF16), so the error of K additions is bounded by about K u sum |p| (Higham, "
               "*Accuracy and Stability of Numerical Algorithms*, section 4.2). That bound is the worst case: "
               "rounding errors of varying sign partly cancel (Higham and Mary 2019 give probabilistic bounds growing "
               "like sqrt(K) u). A term smaller than half an ulp of the running sum is lost entirely (swamping): %s, "
               "%s.\n\n"
               "The products are those of the fp32-trained mlp's first layer (test accuracy %.2f%%): its trained "
               "weights and the pixels of %d test images (/255), both rounded to FP16, so each product is exact in "
               "FP32. The layer's own dot products have K = 784; longer ones continue into the next rows, as a "
               "larger K would. Each is summed left to right (recursive summation) in each accumulator and exactly "
               "(FP64 with compensation), and the error is taken relative to sum |p_i| (relative to the sum itself "
               "it has no bound where terms cancel). The table's numbers are the first block of "
               "`accumulation.dat`.\n\n"
               "| K | FP32 median | FP32 largest | K u (FP32) | FP16 median | FP16 largest | K u (FP16) | BF16 median | "
               "BF16 largest | K u (BF16) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            swampb, swamp16, acc, IMAGES);
    for (int k = 0; k < N_K; k++) {
        fprintf(f, "| %lld |", (long long)E[k].K);
        for (int a = 0; a < MPT_ACCUM_COUNT; a++)
            fprintf(f, " %.2e | %.2e | %.1e |", E[k].median[a], E[k].max[a], (double)E[k].K * u[a]);
        fprintf(f, "\n");
    }
    fprintf(f, "\n(%d dot products per K, those with a nonzero sum; a bound K u above 1 says nothing.)\n\n"
               "## Relative to the output, by summation method\n\n"
               "What a GEMM's user sees is |sum - exact| / |exact| (median over the same dot products), which grows "
               "with K where the normwise measure hides it (sum |p| grows with K too). Beside the recursive sum, "
               "three other orders and algorithms in the same accumulator (tools/lab/accum.h): pairwise (a balanced "
               "tree; bound about log2(K) u), blocked (blocks of %lld summed left to right, then the block sums: a "
               "blocked GEMM's order along K; bound about (b + K / b) u), and Kahan's compensated summation (bound "
               "about 2u, to first order independent of K), each with every operation rounded in the accumulator. "
               "The last row is each column's growth from K = %lld to %lld. Numbers: the second block of "
               "`accumulation.dat`.\n\n", DOTS, (long long)block, (long long)k0->K, (long long)kl->K);
    for (int a = 0; a < MPT_ACCUM_COUNT; a++) {
        fprintf(f, "| K | %s recursive | %s pairwise | %s blocked | %s Kahan |\n|---:|---:|---:|---:|---:|\n",
                mpt_accum_name((mpt_accum_kind)a), mpt_accum_name((mpt_accum_kind)a),
                mpt_accum_name((mpt_accum_kind)a), mpt_accum_name((mpt_accum_kind)a));
        for (int k = 0; k < N_K; k++) {
            fprintf(f, "| %lld |", (long long)E[k].K);
            for (int m = 0; m < MPT_ACCUM_METHOD_COUNT; m++) fprintf(f, " %.2e |", E[k].out_m[a][m]);
            fprintf(f, "\n");
        }
        fprintf(f, "| growth %lld -> %lld |", (long long)k0->K, (long long)kl->K);
        for (int m = 0; m < MPT_ACCUM_METHOD_COUNT; m++)
            if (isfinite(grow[a][m])) fprintf(f, " %.3gx |", grow[a][m]);
            else fprintf(f, " - (exact at K = %lld) |", (long long)k0->K);
        fprintf(f, "\n\n");
    }
    fprintf(f, "%s.\n\nOther orders (K = %lld): %s; %s; %s; %s; %s; %s; %s; %s; %s. %s.\n\n",
            growth, (long long)kl->K, gains[0][0], gains[0][1], gains[0][2], gains[1][0], gains[1][1], gains[1][2],
            gains[2][0], gains[2][1], gains[2][2], why_blocked);
    fprintf(f, "## Tensor Cores: block sums and truncation\n\n"
               "A Tensor Core does not add one product at a time: one instruction (a block FMA) takes a block of "
               "products and the accumulator, aligns them to the largest exponent among them, drops the bits below a "
               "fixed width (each term's magnitude truncated, toward zero), adds what is left exactly and rounds the "
               "sum once, toward zero into FP32 (Khattak and Mikaitis 2025, \"Accurate Models of NVIDIA Tensor "
               "Cores\", arXiv 2512.07004; mptrain's models reproduce their published measurements on the GPUs bit for "
               "bit: docs/numerics.md). Here the same layer's products are summed as a GEMM with FP16, BF16 and TF32 "
               "operands (the trained FP32 weights and the pixels / 255 rounded to each, to nearest even) through the "
               "CPU backend with each model (`--accum-model`; blocks of 4 products for v100, FP16 only; 8 for a100, 4 "
               "in TF32; 16 for h100 and b200, 8 in TF32), beside IEEE recursive FP32 summation of the same exact "
               "products (one rounding to nearest per addition: the models' `ieee` row). Each K has %d outputs (%d "
               "images x %d weight rows; below K = 784 the middle K pixels, above it the next images and weight rows, "
               "as a larger GEMM would sum; no two dot products share a product), those with a nonzero exact sum "
               "counted. A dot product longer than one "
               "block is the model's chain of block FMAs over K, each result the next block's accumulator (a GEMM "
               "without split-K): the published measurements exercise single blocks, so the chain is the model's "
               "rule, not a measurement. Numbers: `tensor-cores.dat` (its first block is these tables).\n\n",
            TC_DOTS, TC_IMAGES, TC_ROWS);
    for (int fm = 0; fm < TC_FORMATS; fm++) {
        fprintf(f, "| K (%s operands) | dots |", tc_format_name[fm]);
        for (int m = 0; m < TC_SUMS; m++)
            if (T.has[fm][m]) fprintf(f, " %s |", tc_sum_name[m]);
        fprintf(f, "\n|---:|---:|");
        for (int m = 0; m < TC_SUMS; m++)
            if (T.has[fm][m]) fprintf(f, "---:|");
        fprintf(f, "\n");
        for (int k = 0; k < N_K; k++) {
            fprintf(f, "| %lld | %d |", (long long)Ks[k], T.n[k][fm]);
            for (int m = 0; m < TC_SUMS; m++)
                if (T.has[fm][m]) fprintf(f, " %.2e |", T.out[k][fm][m]);
            fprintf(f, "\n");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "(median |sum - exact| / |exact|; the normwise error and the per-K share of errors toward zero are the "
               "second and third blocks of `tensor-cores.dat`.)\n\n");
    for (int fm = 0; fm < TC_FORMATS; fm++)
        for (int m = 1; m < TC_SUMS; m++)
            if (T.has[fm][m] && m != TC_B200) fprintf(f, "- %s.\n", tc_vs[fm][m]);
    fprintf(f, "\n**The sign of the error.** Rounding to nearest errs up and down alike; truncation only ever shrinks a "
               "magnitude. Over every dot product of every K, the error e = sign(exact) (sum - exact) / sum |p|: how "
               "many shrank the sum (e < 0) and how many grew it, the sign test's two-sided p-value (how likely so "
               "uneven a split is if either sign were equally likely; zero errors set aside), and mean e / mean |e| "
               "(-1: every error toward zero; about 0: either sign alike). Numbers: the fourth block of "
               "`tensor-cores.dat`.\n\n"
               "| operands | summation | errors | toward zero | away from zero | exact | share toward zero | sign test "
               "p | mean e / mean \\|e\\| |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int fm = 0; fm < TC_FORMATS; fm++)
        for (int m = 0; m < TC_SUMS; m++) {
            if (!T.has[fm][m]) continue;
            const mpt_accum_bias *bb = &T.bias[fm][m];
            fprintf(f, "| %s | %s | %lld | %lld | %lld | %lld | %.1f%% | %.2g | %+.3f |\n", tc_format_name[fm],
                    tc_sum_name[m], (long long)bb->n, (long long)bb->toward_zero, (long long)bb->away,
                    (long long)bb->exact, 100.0 * bb->share_toward, bb->p_sign, bb->mean_ratio);
        }
    fprintf(f, "\n");
    for (int fm = 0; fm < TC_FORMATS; fm++)
        for (int m = 1; m < TC_SUMS; m++)
            if (T.has[fm][m] && m != TC_B200) fprintf(f, "- %s.\n", tc_bias[fm][m]);
    fprintf(f, "\nB200's block FMAs for these formats have H100's parameters (docs/numerics.md); measured: %s (the fifth "
               "block of `tensor-cores.dat`). A bias is resolved when the sign test's p is below 0.01.\n\n",
            same_bits);
    fprintf(f, "Criterion for the effect: at every K the FP32 accumulator's median error (normwise) is at least 10x "
               "below both 16-bit accumulators', and their median error relative to the output grows at least 10x "
               "from K = %lld to K = %lld.\n",
            (long long)Ks[0], (long long)Ks[N_K - 1]);
    return mpt_lab_report_close(c, &mpt_lab_accumulation, f, plot_error);
}

const mpt_lab_lesson mpt_lab_accumulation = {
    "accumulation",
    "How does a dot product's error grow with K when it is summed in FP16, BF16 or FP32, left to right, pairwise, in "
    "blocks or compensated (Kahan), or as V100, A100, H100 and B200 Tensor Cores sum it (modelled), does their "
    "truncation bias the error's sign, and why do GEMMs accumulate in FP32 and in blocks?",
    "block=B, the block length of blocked summation (default 256)",
    run,
    {20000, 10000, 2, 0}, /* full */
    {2000, 1000, 1, 0}, /* --quick */
    "block",
    "--quick 6 s, full 8 s of CPU time (2-core VM, load average 7-8, 2026-11-28)",
};
