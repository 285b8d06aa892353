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
 * Criterion: the effect is observed when at every K the FP32 accumulator's median error is at least 10x below
 * both 16-bit accumulators', and the 16-bit accumulators' median error relative to the output is at least 10x
 * larger at the largest K than at the smallest.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "engine/numerics.h"
#include "tools/lab/accum.h"
#include "tools/lab/lab.h"

#define N_K 7
static const int64_t Ks[N_K] = {16, 64, 256, 1024, 4096, 16384, 65536};
#define DOTS 128       /* dot products per K */
#define IMAGES 256     /* test images whose rows feed the stream */

typedef struct k_err {
    int64_t K;
    int n;                                  /* dot products with sum |p| > 0 */
    double median[MPT_ACCUM_COUNT], max[MPT_ACCUM_COUNT];
    double median_out[MPT_ACCUM_COUNT];     /* median of |sum - ref| / |ref|: relative to the output itself */
} k_err;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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

static mpt_status measure(const stream *st, k_err *out) {
    int64_t total = st->M * st->N * st->D;
    float *p = malloc((size_t)Ks[N_K - 1] * sizeof *p);
    double *e = malloc((size_t)MPT_ACCUM_COUNT * DOTS * sizeof *e), *o = malloc((size_t)MPT_ACCUM_COUNT * DOTS * sizeof *o);
    if (!p || !e || !o) {
        free(p);
        free(e);
        free(o);
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
            }
            n++;
        }
        out[ki].K = K;
        out[ki].n = n;
        for (int a = 0; a < MPT_ACCUM_COUNT; a++) {
            double *v = e + a * DOTS;
            qsort(v, (size_t)n, sizeof *v, cmp_double);
            out[ki].median[a] = n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
            out[ki].max[a] = n == 0 ? NAN : v[n - 1];
            v = o + a * DOTS;
            qsort(v, (size_t)n, sizeof *v, cmp_double);
            out[ki].median_out[a] = n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        }
    }
    free(p);
    free(e);
    free(o);
    return MPT_OK;
}

/* The trained first layer and the first test images, both rounded to FP16. */
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
    for (int64_t i = 0; i < n * d->dim; i++) wv[i] = mpt_f16_to_f32(mpt_f32_to_f16(wv[i]));
    for (int64_t i = 0; i < m * d->dim; i++) xv[i] = mpt_f16_to_f32(mpt_f32_to_f16((float)d->test_images[i] / 255.0f));
    *x = xv;
    *w = wv;
    *M = m;
    *N = n;
    *D = d->dim;
    return MPT_OK;
}

static mpt_status run(mpt_lab_ctx *c) {
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
    st.x = x;
    st.w = w;
    k_err E[N_K];
    mpt_status s = measure(&st, E);
    free(x);
    free(w);
    MPT_TRY(s);

    double u[MPT_ACCUM_COUNT];
    for (int a = 0; a < MPT_ACCUM_COUNT; a++)
        u[a] = a == MPT_ACCUM_F32 ? 0x1p-24 : a == MPT_ACCUM_F16 ? 0x1p-11 : 0x1p-8;
    int ok = 1;
    for (int k = 0; k < N_K; k++)
        ok &= E[k].n > 0 && E[k].median[MPT_ACCUM_F32] * 10.0 <= E[k].median[MPT_ACCUM_F16] &&
              E[k].median[MPT_ACCUM_F32] * 10.0 <= E[k].median[MPT_ACCUM_BF16];
    for (int a = MPT_ACCUM_F16; a <= MPT_ACCUM_BF16; a++)
        ok &= E[N_K - 1].median_out[a] >= 10.0 * E[0].median_out[a];
    c->observed = ok;
    const k_err *k1 = &E[3], *kl = &E[N_K - 1]; /* K = 1024, about the layer's 784; and the longest */
    double grow[MPT_ACCUM_COUNT];
    for (int a = 0; a < MPT_ACCUM_COUNT; a++) grow[a] = kl->median_out[a] / E[0].median_out[a];
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: the trained mlp's first-layer dot products (FP16 operands, exact products) summed in an "
                 "FP16 accumulator err by %.1e of the output in median at K = %lld and %.1e at K = %lld; in a BF16 "
                 "accumulator by %.1e and %.1e; in FP32 by %.1e and %.1e. From K = %lld to %lld the 16-bit errors "
                 "grew %.0fx (FP16) and %.0fx (BF16). Normwise (error / sum |p|), FP32 accumulation was at least 10x "
                 "more exact than both at every K (at K = %lld: %.1e against %.1e and %.1e), each far below the "
                 "worst-case bound K u (%.1e, %.1e, %.1e): roundings of both signs partly cancel.",
                 k1->median_out[MPT_ACCUM_F16], (long long)k1->K, kl->median_out[MPT_ACCUM_F16], (long long)kl->K,
                 k1->median_out[MPT_ACCUM_BF16], kl->median_out[MPT_ACCUM_BF16], k1->median_out[MPT_ACCUM_F32],
                 kl->median_out[MPT_ACCUM_F32], (long long)E[0].K, (long long)kl->K, grow[MPT_ACCUM_F16],
                 grow[MPT_ACCUM_BF16], (long long)k1->K, k1->median[MPT_ACCUM_F32], k1->median[MPT_ACCUM_F16],
                 k1->median[MPT_ACCUM_BF16], (double)k1->K * u[MPT_ACCUM_F32], (double)k1->K * u[MPT_ACCUM_F16],
                 (double)k1->K * u[MPT_ACCUM_BF16]);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: FP32 accumulation was not 10x more exact than both 16-bit accumulators at every K, or "
                 "their error relative to the output did not grow 10x from K = %lld to %lld (median errors relative "
                 "to the output at K = %lld: FP32 %.1e, FP16 %.1e, BF16 %.1e; at K = %lld: %.1e, %.1e, %.1e).",
                 (long long)E[0].K, (long long)kl->K, (long long)E[0].K, E[0].median_out[MPT_ACCUM_F32],
                 E[0].median_out[MPT_ACCUM_F16], E[0].median_out[MPT_ACCUM_BF16], (long long)kl->K,
                 kl->median_out[MPT_ACCUM_F32], kl->median_out[MPT_ACCUM_F16], kl->median_out[MPT_ACCUM_BF16]);

    FILE *dat = mpt_lab_open(c, "accumulation.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# K median_fp32 max_fp32 median_fp16 max_fp16 median_bf16 max_bf16 (error / sum |p|)\n");
    for (int k = 0; k < N_K; k++) {
        fprintf(dat, "%lld", (long long)E[k].K);
        for (int a = 0; a < MPT_ACCUM_COUNT; a++)
            fprintf(dat, " %.6e %.6e", E[k].median[a] > 0 ? E[k].median[a] : NAN, E[k].max[a] > 0 ? E[k].max[a] : NAN);
        fprintf(dat, "\n");
    }
    char dat_path[MPT_CLI_PATH + 32];
    snprintf(dat_path, sizeof dat_path, "%s/accumulation.dat", c->dir);
    MPT_TRY(mpt_outdir_close_written(dat, dat_path));
    FILE *gp = mpt_lab_open(c, "accumulation.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 600, "accumulation.png");
    fprintf(gp, "set title 'one dot product summed left to right: error / sum |p| against FP64 (%d dot products per K; "
                "trained mlp, fc1)'\nset xlabel 'K (products per dot product)'\nset ylabel 'error / sum |p_i|'\n"
                "set logscale x 2\nset logscale y 10\nset format x '2^{%%L}'\nset format y '10^{%%L}'\nset xrange [12:90000]\n"
                "set yrange [1e-10:10]\nset grid\nset key outside right\nset datafile missing 'nan'\n"
                "set arrow from 784, graph 0 to 784, graph 1 nohead dt 3 lc rgb 'black'\n"
                "set label 'fc1: K = 784' at 784, 3e-10 offset 0.5,0\n"
                "plot 'accumulation.dat' using 1:2 with linespoints lw 2 pt 7 lt 1 title 'FP32: median', "
                "'' using 1:3 with points pt 6 lt 1 title 'FP32: largest', x * 2**-24 with lines dt 2 lt 1 title 'K u, FP32', "
                "'' using 1:4 with linespoints lw 2 pt 7 lt 2 title 'FP16: median', "
                "'' using 1:5 with points pt 6 lt 2 title 'FP16: largest', x * 2**-11 with lines dt 2 lt 2 title 'K u, FP16', "
                "'' using 1:6 with linespoints lw 2 pt 7 lt 3 title 'BF16: median', "
                "'' using 1:7 with points pt 6 lt 3 title 'BF16: largest', x * 2**-8 with lines dt 2 lt 3 title 'K u, BF16'\n",
            DOTS);
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
               "like sqrt(K) u). A term smaller than half an ulp of the running sum is lost entirely (swamping): in "
               "BF16 that happens once the sum is 2^8 times the term, in FP16 2^11 times.\n\n"
               "The products are those of the fp32-trained mlp's first layer (test accuracy %.2f%%): its trained "
               "weights and the pixels of %d test images (/255), both rounded to FP16, so each product is exact in "
               "FP32. The layer's own dot products have K = 784; longer ones continue into the next rows, as a "
               "larger K would. Each is summed left to right (recursive summation; GPUs and OpenBLAS sum in blocks "
               "and trees, which errs less) in each accumulator and exactly (FP64 with compensation), and the error "
               "is taken relative to sum |p_i| (relative to the sum itself it has no bound where terms cancel).\n\n"
               "| K | FP32 median | FP32 largest | K u (FP32) | FP16 median | FP16 largest | K u (FP16) | BF16 median | "
               "BF16 largest | K u (BF16) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            acc, IMAGES);
    for (int k = 0; k < N_K; k++) {
        fprintf(f, "| %lld |", (long long)E[k].K);
        for (int a = 0; a < MPT_ACCUM_COUNT; a++)
            fprintf(f, " %.2e | %.2e | %.1e |", E[k].median[a], E[k].max[a], (double)E[k].K * u[a]);
        fprintf(f, "\n");
    }
    fprintf(f, "\nRelative to the output itself, |sum - exact| / |exact| (median), which a GEMM's user sees:\n\n"
               "| K | FP32 | FP16 | BF16 |\n|---:|---:|---:|---:|\n");
    for (int k = 0; k < N_K; k++)
        fprintf(f, "| %lld | %.2e | %.2e | %.2e |\n", (long long)E[k].K, E[k].median_out[MPT_ACCUM_F32],
                E[k].median_out[MPT_ACCUM_F16], E[k].median_out[MPT_ACCUM_BF16]);
    fprintf(f, "\n(%d dot products per K, those with a nonzero sum; a bound K u above 1 says nothing.)\n\n"
               "Criterion for the effect: at every K the FP32 accumulator's median error (normwise) is at least 10x "
               "below both 16-bit accumulators', and their median error relative to the output grows at least 10x "
               "from K = %lld to K = %lld.\n",
            DOTS, (long long)Ks[0], (long long)Ks[N_K - 1]);
    return mpt_lab_report_close(c, &mpt_lab_accumulation, f, plot_error);
}

const mpt_lab_lesson mpt_lab_accumulation = {
    "accumulation",
    "Summing a GEMM's products in a 16-bit accumulator loses accuracy as K grows, up to whole terms; an FP32 "
    "accumulator keeps it: why GEMMs accumulate in FP32.",
    "none",
    run,
    {20000, 10000, 2, 0}, /* full */
    {2000, 1000, 1, 0}, /* --quick */
    "",
};
