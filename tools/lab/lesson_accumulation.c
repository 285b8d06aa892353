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
    double block_d;
    MPT_TRY(mpt_lab_param(c, "block", 256, &block_d));
    if (!(block_d >= 2 && block_d <= 65536 && block_d == floor(block_d)))
        return mpt_errorf(MPT_ERR_ARG, "--param block: expected an integer in [2, 65536], found %g", block_d);
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
    st.x = x;
    st.w = w;
    k_err E[N_K];
    mpt_status s = measure(&st, block, E);
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
    mpt_report_gnuplot_terminal(gp, 1000, 1100, "accumulation.png");
    fprintf(gp, "set multiplot layout 2,1\n"
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
    fprintf(f, "Criterion for the effect: at every K the FP32 accumulator's median error (normwise) is at least 10x "
               "below both 16-bit accumulators', and their median error relative to the output grows at least 10x "
               "from K = %lld to K = %lld.\n",
            (long long)Ks[0], (long long)Ks[N_K - 1]);
    return mpt_lab_report_close(c, &mpt_lab_accumulation, f, plot_error);
}

const mpt_lab_lesson mpt_lab_accumulation = {
    "accumulation",
    "How does a dot product's error grow with K when it is summed in FP16, BF16 or FP32, left to right, pairwise, in "
    "blocks or compensated (Kahan), and why do GEMMs accumulate in FP32 and in blocks?",
    "block=B, the block length of blocked summation (default 256)",
    run,
    {20000, 10000, 2, 0}, /* full */
    {2000, 1000, 1, 0}, /* --quick */
    "block",
    "--quick 5 s, full 7 s of CPU time (2-core VM, 2026-11-28)",
};
