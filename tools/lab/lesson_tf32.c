/*
 * tools/lab/lesson_tf32.c - lesson `tf32`: what TF32 does to the model's real GEMMs, and to accuracy.
 *
 * Plan: train the mlp in fp32 (seed 0); take its trained weights (checkpoint) and the first 256 test images;
 * run the forward pass in FP64 to get every layer's real input activations; then compute each layer's GEMM
 * Y = X W^T (M = 256 images, K = the layer's inputs, N = its outputs) on FP32 operands three ways: in FP64 (the
 * reference), with the engine's CPU GEMM in FP32 math, and with the math the tf32 policy picks (TF32: operands
 * rounded to 10 mantissa bits, FP32 accumulation; FP32 again when NVIDIA_TF32_OVERRIDE=0 is set). Measure
 * the relative Frobenius error ||Y - Y64|| / ||Y64|| per layer. Then train fp32 and tf32 with each seed and
 * compare final test accuracy pairwise (tools/stats.h).
 * PyTorch's figure for TF32 (CUDA semantics, "TensorFloat-32 (TF32) on Ampere (and later) devices": 0.0022 with
 * TF32, 3.9e-5 without, on an A100) is another metric on another GEMM: max |Y - Y64| / mean |Y64| of a
 * 10240 x 10240 x 10240 product of standard normal operands. To put like beside like, the lesson computes that
 * metric on the same kind of GEMM: standard normal operands (drawn in FP64, rounded to FP32 as torch.randn(...,
 * dtype=double).float() does), K = 10240, M = N = 512 (1024 in the full lesson: the FP64 reference is a CPU
 * dgemm), through the same engine GEMMs. The max over fewer outputs is a little smaller (for Gaussian-like errors
 * it grows like sqrt(2 ln n)), and a max over 2.6e5 outputs moves from one operand sample to the next (13% between
 * two): the lesson draws `samples` operand samples (default 4), reports their range and spread, and compares
 * PyTorch's figure, scaled to our output count, with that range (tools/sentences.h, mpt_text_vs_published).
 * Criterion: the effect (TF32 rounds GEMM operands, FP32 does not) is observed when the TF32 error exceeds
 * the FP32 error by at least 10x in every layer. The GEMMs run through the CPU backend's Tensor Core
 * emulation (kernels/cpu/gemm.c); a GPU sums in another order, which changes the FP32 error, not TF32's scale.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "engine/amp/policy.h"
#include "engine/checkpoint.h"
#include "engine/rng.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"
#include "tools/stats.h"

#define BATCH 256
#define MAX_LAYERS 8
#define MAX_SAMPLES 16

typedef struct layer_err {
    char name[32];
    int64_t K, N;
    double err32, errtf;
} layer_err;

/* ||Y - ref|| / ||ref|| over n values. */
static double rel_err(const float *y, const double *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static mpt_status engine_gemm(const float *X, const float *W, float *Y, int64_t M, int64_t N, int64_t K, mpt_math math) {
    mpt_gemm_args a;
    memset(&a, 0, sizeof a);
    a.trans_b = 1;
    a.M = M;
    a.N = N;
    a.K = K;
    a.A = X;
    a.a_dtype = MPT_DTYPE_F32;
    a.B = W;
    a.b_dtype = MPT_DTYPE_F32;
    a.C = Y;
    a.c_dtype = MPT_DTYPE_F32;
    a.alpha = 1.0f;
    a.math = math;
    a.tag = "lab.tf32";
    return mpt_lab_gemm(&a);
}

/* PyTorch's TF32 metric on its kind of GEMM: X [M, K] and W [N, K] standard normal, drawn in FP64 from a fixed
 * seed and rounded to FP32; Y = X W^T in FP64 (dgemm) and through the engine's GEMM in FP32 math and in tf_math;
 * each error is max |Y - Y64| / mean |Y64|. */
typedef struct pytorch_metric {
    int64_t M, N, K;
    double err32, errtf;
} pytorch_metric;

/* Standard normal doubles by Box-Muller from a SplitMix64 stream (any fixed generator does: the operands only
 * need to be Gaussian, as torch.randn's are). */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_normal(float *x, int64_t n, uint64_t *state) {
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix(state) >> 11) + 1.0) * 0x1p-53, u2 = (double)(splitmix(state) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2.0 * M_PI * u2));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
    }
}

static double max_over_mean(const float *y, const double *ref, int64_t n) {
    double mx = 0.0, mean = 0.0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)y[i] - ref[i]));
        mean += fabs(ref[i]);
    }
    return mx / (mean / (double)n);
}

static mpt_status measure_pytorch_metric(int64_t MN, mpt_math tf_math, uint64_t seed, pytorch_metric *pm) {
    const int64_t M = MN, N = MN, K = 10240;
    float *X = malloc((size_t)(M * K) * sizeof *X), *W = malloc((size_t)(N * K) * sizeof *W);
    float *Y32 = malloc((size_t)(M * N) * sizeof *Y32), *Ytf = malloc((size_t)(M * N) * sizeof *Ytf);
    double *Xd = malloc((size_t)(M * K) * sizeof *Xd), *Wd = malloc((size_t)(N * K) * sizeof *Wd);
    double *Y64 = malloc((size_t)(M * N) * sizeof *Y64);
    mpt_status s = X && W && Y32 && Ytf && Xd && Wd && Y64 ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "lab tf32: no memory");
    if (s == MPT_OK) {
        uint64_t state = seed;
        fill_normal(X, M * K, &state);
        fill_normal(W, N * K, &state);
        for (int64_t i = 0; i < M * K; i++) Xd[i] = X[i];
        for (int64_t i = 0; i < N * K; i++) Wd[i] = W[i];
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0, Xd, (int)K, Wd, (int)K, 0.0,
                    Y64, (int)N);
        s = engine_gemm(X, W, Y32, M, N, K, MPT_MATH_FP32);
        if (s == MPT_OK) s = engine_gemm(X, W, Ytf, M, N, K, tf_math);
    }
    if (s == MPT_OK) {
        pm->M = M;
        pm->N = N;
        pm->K = K;
        pm->err32 = max_over_mean(Y32, Y64, M * N);
        pm->errtf = max_over_mean(Ytf, Y64, M * N);
    }
    free(X);
    free(W);
    free(Y32);
    free(Ytf);
    free(Xd);
    free(Wd);
    free(Y64);
    return s;
}

/* Per-layer GEMM errors of the mlp in ckpt on the first BATCH test images. */
static mpt_status measure_layers(const mpt_lab_ctx *c, const char *ckpt, mpt_math tf_math, layer_err *L, int *n_layers) {
    mpt_checkpoint *ck = NULL;
    MPT_TRY(mpt_checkpoint_open(ckpt, NULL, 0, &ck));
    const mpt_mnist *d = &c->cd->d;
    int64_t M = d->n_test < BATCH ? d->n_test : BATCH, K = d->dim;
    double *x = malloc((size_t)(M * K) * sizeof *x);
    mpt_status s = x ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "lab tf32: no memory");
    for (int64_t i = 0; x && i < M * K; i++) x[i] = d->test_images[i] / 255.0;
    int n = 0;
    for (int l = 1; s == MPT_OK && l <= MAX_LAYERS; l++) {
        float *W = NULL, *b = NULL;
        int64_t N = 0;
        int last = 0;
        s = mpt_lab_fc_read(ck, ckpt, l, K, &W, &b, &N, &last);
        if (s != MPT_OK || !W) break;
        float *X = malloc((size_t)(M * K) * sizeof *X), *Y32 = malloc((size_t)(M * N) * sizeof *Y32);
        float *Ytf = malloc((size_t)(M * N) * sizeof *Ytf);
        double *Y64 = malloc((size_t)(M * N) * sizeof *Y64), *next = malloc((size_t)(M * N) * sizeof *next);
        if (!X || !Y32 || !Ytf || !Y64 || !next) s = mpt_errorf(MPT_ERR_NOMEM, "lab tf32: no memory");
        if (s == MPT_OK) {
            for (int64_t i = 0; i < M * K; i++) X[i] = (float)x[i];
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0.0;
                    for (int64_t k = 0; k < K; k++) acc += (double)X[i * K + k] * (double)W[j * K + k];
                    Y64[i * N + j] = acc;
                }
            s = engine_gemm(X, W, Y32, M, N, K, MPT_MATH_FP32);
            if (s == MPT_OK) s = engine_gemm(X, W, Ytf, M, N, K, tf_math);
        }
        if (s == MPT_OK) {
            layer_err *e = &L[n++];
            snprintf(e->name, sizeof e->name, "fc%d", l);
            e->K = K;
            e->N = N;
            e->err32 = rel_err(Y32, Y64, M * N);
            e->errtf = rel_err(Ytf, Y64, M * N);
            for (int64_t i = 0; i < M; i++) /* the next layer's input: FP64 bias + ReLU (none after the last) */
                for (int64_t j = 0; j < N; j++) {
                    double z = Y64[i * N + j] + b[j];
                    next[i * N + j] = last || z > 0.0 ? z : 0.0;
                }
            free(x);
            x = next;
            next = NULL;
            K = N;
        }
        free(W);
        free(b);
        free(X);
        free(Y32);
        free(Ytf);
        free(Y64);
        free(next);
    }
    free(x);
    mpt_checkpoint_close(&ck);
    if (s == MPT_OK && n == 0) s = mpt_errorf(MPT_ERR_FORMAT, "%s: no fc1.weight (the tf32 lesson needs the mlp)", ckpt);
    *n_layers = n;
    return s;
}

static mpt_status run(mpt_lab_ctx *c) {
    int ns = c->n_seeds;
    double acc32[MPT_CLI_MAX_SEEDS], acctf[MPT_CLI_MAX_SEEDS];
    if (ns > MPT_LAB_MAX_BATCH / 2) return mpt_errorf(MPT_ERR_ARG, "tf32: %d seeds, at most %d", ns, MPT_LAB_MAX_BATCH / 2);
    double samples_d;
    MPT_TRY(mpt_lab_param(c, "samples", 4, &samples_d));
    const int nsamp = (int)samples_d;
    if (nsamp < 1 || nsamp > MAX_SAMPLES || nsamp != samples_d)
        return mpt_errorf(MPT_ERR_ARG, "--param samples: expected an integer in [1, %d], found %g", MAX_SAMPLES,
                          samples_d);
    MPT_LAB_PARAMS_CHECKED(c);
    /* fp32 and tf32 for every seed: independent runs, one batch */
    char seed[MPT_LAB_MAX_BATCH / 2][16], name[MPT_LAB_MAX_BATCH][32];
    const char *fl[MPT_LAB_MAX_BATCH][5];
    mpt_lab_run runs[MPT_LAB_MAX_BATCH] = {{NULL, NULL}};
    static mpt_run_result res[MPT_LAB_MAX_BATCH];
    for (int k = 0; k < ns; k++) {
        snprintf(seed[k], sizeof seed[k], "%d", k);
        for (int p = 0; p < 2; p++) {
            int i = 2 * k + p;
            const char *prec = p == 0 ? "fp32" : "tf32";
            snprintf(name[i], sizeof name[i], "%s-seed%d", prec, k);
            const char *f[] = {"--precision", prec, "--seed", seed[k], NULL};
            memcpy(fl[i], f, sizeof f);
            runs[i] = (mpt_lab_run){name[i], fl[i]};
        }
    }
    MPT_TRY(mpt_lab_train_batch(c, runs, 2 * ns, res));
    for (int k = 0; k < ns; k++) {
        acc32[k] = 100.0 * res[2 * k].final_test_acc;
        acctf[k] = 100.0 * res[2 * k + 1].final_test_acc;
        mpt_run_result_free(&res[2 * k]);
        mpt_run_result_free(&res[2 * k + 1]);
    }

    mpt_policy pol = mpt_policy_make(MPT_PRECISION_TF32);
    mpt_math tf_math = mpt_policy_for(&pol, MPT_OP_LINEAR, MPT_DTYPE_F32).math;
    char ckpt[MPT_CLI_PATH + 64];
    snprintf(ckpt, sizeof ckpt, "%s/fp32-seed0/%s", c->dir, MPT_CLI_CHECKPOINT_FILE);
    layer_err L[MAX_LAYERS];
    int n = 0;
    MPT_TRY(measure_layers(c, ckpt, tf_math, L, &n));
    pytorch_metric pm, pms[MAX_SAMPLES];
    double tf_s[MAX_SAMPLES], f32_s[MAX_SAMPLES];
    for (int k = 0; k < nsamp; k++) { /* independent operand samples: the first is the one the lesson always drew */
        MPT_TRY(measure_pytorch_metric(c->quick ? 512 : 1024, tf_math, 20210101u + 7919u * (uint64_t)k, &pms[k]));
        tf_s[k] = pms[k].errtf;
        f32_s[k] = pms[k].err32;
    }
    pm = pms[0];
    mpt_stats_summary tf_sum, f32_sum;
    mpt_stats_summarize(tf_s, nsamp, &tf_sum);
    mpt_stats_summarize(f32_s, nsamp, &f32_sum);
    pm.errtf = tf_sum.mean, pm.err32 = f32_sum.mean; /* the sentences below speak of the mean over the samples */
    char vs_tf[700];
    mpt_text_vs_published(vs_tf, sizeof vs_tf, "PyTorch's TF32 figure", 2.2e-3, 1.0e8, (double)(pm.M * pm.N), tf_s,
                          nsamp);

    double lo_ratio = INFINITY, hi_ratio = 0.0, min32 = INFINITY, max32 = 0.0, mintf = INFINITY, maxtf = 0.0;
    for (int i = 0; i < n; i++) {
        double r = L[i].errtf / L[i].err32;
        lo_ratio = fmin(lo_ratio, r);
        hi_ratio = fmax(hi_ratio, r);
        min32 = fmin(min32, L[i].err32);
        max32 = fmax(max32, L[i].err32);
        mintf = fmin(mintf, L[i].errtf);
        maxtf = fmax(maxtf, L[i].errtf);
    }
    c->observed = lo_ratio >= 10.0;

    mpt_stats_paired d;
    int have_ci = mpt_stats_available() && ns >= 2 &&
                  mpt_stats_compare_paired(acctf, acc32, ns, 0.95, c->base->margin, &d) == MPT_OK;
    double dd[MPT_CLI_MAX_SEEDS];
    for (int k = 0; k < ns; k++) dd[k] = acctf[k] - acc32[k];
    mpt_stats_summary dsum;
    mpt_stats_summarize(dd, ns, &dsum);
    char acc_text[1000], pv[600], rd[300];
    mpt_text_paired(pv, sizeof pv, "final test accuracy tf32 - fp32", have_ci ? &d : NULL, &dsum);
    mpt_text_verdict_reading(rd, sizeof rd, "with TF32 GEMMs", have_ci ? &d : NULL);
    snprintf(acc_text, sizeof acc_text, "%s: %s", pv, rd);
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: the trained mlp's GEMMs err against FP64 by %.1e..%.1e in TF32 and %.1e..%.1e in FP32 "
                 "(relative Frobenius error; %.0f-%.0fx more in TF32: one operand's rounding errs by up to TF32's unit "
                 "roundoff 4.9e-4, and the errors of many products partly cancel). PyTorch's metric (max |error| / "
                 "mean |Y|) on PyTorch's kind of GEMM (normal operands, K = %lld, %lldx%lld outputs, mean of %d "
                 "operand samples): %.2e in TF32, %.2e in FP32; %s. Accuracy: %s.",
                 mintf, maxtf, min32, max32, lo_ratio, hi_ratio, (long long)pm.K, (long long)pm.M, (long long)pm.N,
                 nsamp, pm.errtf, pm.err32, vs_tf, acc_text);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: the tf32 GEMMs erred no more than 10x the FP32 ones in every layer (ratio %.2g..%.2g; "
                 "TF32 %.1e..%.1e, FP32 %.1e..%.1e)%s. Accuracy: %s.",
                 lo_ratio, hi_ratio, mintf, maxtf, min32, max32,
                 tf_math == MPT_MATH_FP32 ? ": the tf32 policy chose FP32 math, because NVIDIA_TF32_OVERRIDE=0 is set" : "",
                 acc_text);

    FILE *dat = mpt_lab_open(c, "tf32.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# layer fp32 tf32 (relative Frobenius error of each layer's GEMM against FP64)\n");
    for (int i = 0; i < n; i++) fprintf(dat, "%s %.6e %.6e\n", L[i].name, L[i].err32, L[i].errtf);
    fprintf(dat, "\n\n# sample fp32 tf32 (PyTorch's metric, max |Y - Y64| / mean |Y64|, %lldx%lldx%lld normal operands)\n",
            (long long)pm.M, (long long)pm.N, (long long)pm.K);
    for (int k = 0; k < nsamp; k++) fprintf(dat, "%d %.6e %.6e\n", k, f32_s[k], tf_s[k]);
    MPT_TRY(mpt_lab_close(c, dat, "tf32.dat"));
    FILE *gp = mpt_lab_open(c, "tf32.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 900, 500, "tf32.png");
    fprintf(gp, "set title 'GEMM relative error against FP64, per layer (trained mlp, %d real test images)'\n"
                "set ylabel '||Y - Y_{FP64}|| / ||Y_{FP64}||'\nset logscale y\nset format y '10^{%%L}'\nset grid ytics\n"
                "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
                "set key top left\nset yrange [1e-9:1e-1]\n"
                "plot 'tf32.dat' index 0 using 2:xtic(1) title 'FP32 math' lt 1, '' index 0 using 3 title '%s math' lt 2, "
                "4.8828125e-4 with lines dt 2 lt 3 title 'TF32 unit roundoff 2^{-11}', "
                "5.9604645e-8 with lines dt 2 lt 4 title 'FP32 unit roundoff 2^{-24}'\n",
            BATCH, tf_math == MPT_MATH_TF32 ? "TF32" : "tf32 policy (FP32)");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "tf32.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_tf32, &f));
    fprintf(f, "## GEMM error per layer\n\nThe fp32 run of seed 0 was trained, then its weights and the FP64 forward "
               "activations of the first %d test images fed each layer's GEMM Y = X W^T (M = %d). Relative error of the "
               "whole output against the FP64 product of the same FP32 operands:\n\n"
               "| layer | K (inputs) | N (outputs) | FP32 math | %s math | ratio |\n|---|---:|---:|---:|---:|---:|\n",
            BATCH, BATCH, tf_math == MPT_MATH_TF32 ? "TF32" : "tf32 policy (FP32)");
    for (int i = 0; i < n; i++)
        fprintf(f, "| %s | %lld | %lld | %.3e | %.3e | %.0f |\n", L[i].name, (long long)L[i].K, (long long)L[i].N,
                L[i].err32, L[i].errtf, L[i].errtf / L[i].err32);
    fprintf(f, "\nTF32 keeps FP32's 8-bit exponent but only 10 mantissa bits: each operand is rounded with a relative "
               "error up to 2^-11 = 4.9e-4, and products are summed in FP32. FP32 math rounds only the sums (2^-24 = "
               "6.0e-8 per addition).\n\n"
               "## Beside PyTorch's figure, like for like\n\n"
               "PyTorch's documentation (CUDA semantics, TF32 on Ampere and later) reports for a 10240 x 10240 x "
               "10240 matmul of standard normal operands on an A100 an error of 0.0022 with TF32 against 3.9e-5 "
               "without. Its metric is not the one above: it is max |Y - Y_FP64| / mean |Y_FP64|, the largest error "
               "of any output against the mean size of an output. The same metric on the same kind of GEMM here "
               "(operands drawn from a standard normal in FP64 and rounded to FP32, K = %lld, M = N = %lld, the "
               "engine's GEMMs, FP64 reference by dgemm):\n\n"
               "| | max \\|Y - Y64\\| / mean \\|Y64\\| here: mean of %d samples (range) | PyTorch, A100 |\n"
               "|---|---:|---:|\n"
               "| %s math | %.3e (%.3e..%.3e) | 2.2e-3 |\n| FP32 math | %.3e (%.3e..%.3e) | 3.9e-5 |\n\n"
               "Each sample draws new operands (`tf32.dat`, second block, has every sample's two figures). The TF32 "
               "row is dominated by the rounding of the operands, which does not depend on the order of the sums, "
               "so it is the one to hold against PyTorch's. %s. (PyTorch's own figure is one maximum over %lld "
               "outputs, printed to two digits.) The FP32 row is %.1fx %s PyTorch's: FP32 math rounds only the sums, so its "
               "error is the summation order's, which differs (OpenBLAS sums K in blocks of a few hundred products "
               "and adds the blocks' results; a longer running sum errs more, lesson accumulation), and the two FP32 "
               "figures measure two orders, not FP32 as such.\n\n"
               "These GEMMs ran through the CPU backend's emulation of the Tensor Core input formats: operands rounded "
               "to TF32 as the hardware rounds them (here round-to-nearest-even; A100 paths may round TF32 operands to "
               "nearest with ties away from zero), products exact, FP32 accumulation, but in OpenBLAS's order and "
               "with IEEE rounding of every sum, where Tensor Cores align and truncate within a block of products "
               "(Fasi et al. 2021, \"Numerical behavior of NVIDIA tensor cores\", PeerJ Computer Science; Khattak and Mikaitis 2025, \"Accurate Models of NVIDIA Tensor Cores\", arXiv:2512.07004). So the "
               "TF32 figures here are the operands' share of the error, and the FP32 ones this order's.\n\n",
            (long long)pm.K, (long long)pm.M, nsamp, tf_math == MPT_MATH_TF32 ? "TF32" : "tf32 policy (FP32)",
            pm.errtf, tf_sum.min, tf_sum.max, pm.err32, f32_sum.min, f32_sum.max, vs_tf, 10240LL * 10240LL,
            pm.err32 < 3.9e-5 ? 3.9e-5 / pm.err32 : pm.err32 / 3.9e-5, pm.err32 < 3.9e-5 ? "below" : "above");
    fprintf(f, "`NVIDIA_TF32_OVERRIDE=0` in the environment turns TF32 off, as for cuBLAS and cuDNN: the tf32 policy "
               "then picks FP32 math. In this run it is %s, and the policy picked **%s** math for the GEMMs.\n\n",
            pol.tf32_override ? "set" : "not set", mpt_math_name(tf_math));
    fprintf(f, "## Accuracy (same seeds, paired)\n\n| seed | fp32 | tf32 | difference (pp) |\n|---:|---:|---:|---:|\n");
    for (int k = 0; k < ns; k++)
        fprintf(f, "| %d | %.2f%% | %.2f%% | %+.2f |\n", k, acc32[k], acctf[k], acctf[k] - acc32[k]);
    fprintf(f, "\n%s. Criterion for the effect: TF32 error at least 10x the FP32 error in every layer.\n",
            acc_text);
    return mpt_lab_report_close(c, &mpt_lab_tf32, f, plot_error);
}

const mpt_lab_lesson mpt_lab_tf32 = {
    "tf32",
    "How much less exact are TF32 GEMMs (10 mantissa bits) than FP32 ones on the mlp's real data and on PyTorch's "
    "own test GEMM, and what do seeds say about accuracy?",
    "samples=N, operand samples of PyTorch's kind of GEMM (1..16, default 4); set NVIDIA_TF32_OVERRIDE=0 to watch "
    "TF32 being turned off",
    run,
    {20000, 10000, 2, 3}, /* full */
    {2000, 1000, 1, 2}, /* --quick */
    "samples",
    "--quick 3 s, full 20 s of CPU time (2-core VM, 2026-11-28)",
};
