/*
 * tools/lab/lesson_softmax.c - lesson `softmax`: FP16 and BF16 logits through exp and log-sum-exp, with and without
 * the max subtracted, and why autocast keeps softmax and the loss in FP32.
 *
 * Plan: train the mlp in fp32 (seed 0) and compute, in FP64 from its checkpoint, the logits z of the first test images
 * (the real outputs of fc3). Multiply them by a logit scale t = 1, 2, 4, ... (a sharper or less calibrated network,
 * or a larger model's logits, has larger ones) and store each in FP16, BF16 and FP32 (round to nearest even). Then
 * compute the cross-entropy loss of each image three ways, every operation rounded into the same format (exp and
 * log evaluated in FP64 and rounded once; sums recursive, tools/lab/accum.h):
 *   softmax-then-log         p_y = exp(z_y) / sum_j exp(z_j), loss = -log p_y      (no max subtracted)
 *   log-sum-exp              loss = log(sum_j exp(z_j)) - z_y                     (no max subtracted)
 *   max, softmax-then-log    m = max_j z_j, p_y = exp(z_y - m) / sum_j exp(z_j - m), loss = -log p_y
 *   stable                   loss = log(sum_j exp(z_j - m)) - (z_y - m)           (log-sum-exp, max subtracted)
 * against the exact loss of the same stored logits (FP64, stable). Where each breaks follows from the formats'
 * constants: exp(z) rounds to inf once exp(z) >= the format's overflow threshold (FP16 65520: z >= ln 65520 =
 * 11.09; BF16 and FP32 z >= 88.7), and rounds to 0 once exp(z) <= half the smallest subnormal (FP16 z <= -17.3,
 * BF16 -92.9, FP32 -104.0); p_y flushes the same way, and -log 0 = inf. The lesson reports, per format, method and
 * scale, the share of images whose loss is not finite, the median relative error of the finite ones, and the largest
 * and smallest logit (the columns of softmax.dat).
 * Why autocast keeps these ops in FP32 (PyTorch's CUDA autocast list "ops that autocast to float32": softmax,
 * log_softmax, nll_loss, cross_entropy...): the exponential maps the logits' range onto exp's, which leaves FP16's
 * at |z| of 11 to 17; subtracting the max removes the overflow but not the rounding of the 16-bit sum and log.
 * Criterion: the effect is observed when, at some scale of the ladder, FP16's log-sum-exp without the max loses at
 * least one image's loss (inf or NaN) while FP16's stable form loses none, and at every scale FP32's stable loss
 * errs at least 10x less than FP16's (medians).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "tools/lab/accum.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"

#define IMAGES 1000  /* test images whose logits are used (fewer when the test set is smaller) */
#define MAX_LAYERS 8
#define MAX_T 11     /* logit scales 1, 2, 4, ..., up to 2^10 (--param tmax, default 32) */
#define N_F 3        /* formats */
#define N_M 4        /* methods */
static const mpt_dtype fmts[N_F] = {MPT_DTYPE_F16, MPT_DTYPE_BF16, MPT_DTYPE_F32};
static const char *const fmt_names[N_F] = {"FP16", "BF16", "FP32"};
static const char *const method_names[N_M] = {"softmax-then-log", "log-sum-exp", "max, softmax-then-log",
                                               "stable"};
#define M_STABLE 3

/* The logits [n, C] of the first test images: the trained mlp (fc1..fcL, ReLU between) in FP64. */
static mpt_status logits_of(const mpt_lab_ctx *c, const char *ckpt, double **out, int64_t *n_out, int64_t *c_out) {
    mpt_checkpoint *ck = NULL;
    MPT_TRY(mpt_checkpoint_open(ckpt, NULL, 0, &ck));
    const mpt_mnist *d = &c->cd->d;
    int64_t M = d->n_test < IMAGES ? d->n_test : IMAGES, K = d->dim;
    double *x = malloc(sizeof(double) * (size_t)(M * K));
    mpt_status s = x ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "lab softmax: no memory");
    for (int64_t i = 0; x && i < M * K; i++) x[i] = d->test_images[i] / 255.0;
    int layers = 0;
    for (int l = 1; s == MPT_OK && l <= MAX_LAYERS; l++) {
        float *W = NULL, *b = NULL;
        int64_t N = 0;
        int last = 0;
        s = mpt_lab_fc_read(ck, ckpt, l, K, &W, &b, &N, &last);
        if (s != MPT_OK || !W) break;
        double *y = malloc(sizeof(double) * (size_t)(M * N));
        if (!y) s = mpt_errorf(MPT_ERR_NOMEM, "lab softmax: no memory");
        for (int64_t i = 0; s == MPT_OK && i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = b[j];
                for (int64_t k = 0; k < K; k++) acc += x[i * K + k] * (double)W[j * K + k];
                y[i * N + j] = last || acc > 0.0 ? acc : 0.0;
            }
        free(W);
        free(b);
        if (s == MPT_OK) {
            free(x);
            x = y;
            K = N;
            layers++;
        } else {
            free(y);
        }
    }
    mpt_checkpoint_close(&ck);
    if (s == MPT_OK && layers == 0) s = mpt_errorf(MPT_ERR_FORMAT, "%s: no fc1.weight (the lesson needs the mlp)", ckpt);
    if (s != MPT_OK) {
        free(x);
        return s;
    }
    *out = x, *n_out = M, *c_out = K;
    return MPT_OK;
}

/* The exact loss of the stored logits z[C] (FP64, max subtracted). */
static double loss_exact(const double *z, int64_t C, int y) {
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < C; j++) m = fmax(m, z[j]);
    for (int64_t j = 0; j < C; j++) s += exp(z[j] - m);
    return log(s) - (z[y] - m);
}

/* The loss of z[C] (values of format f) by method `m`, every operation rounded into f; *py_zero: the softmax forms'
 * p_y rounded to 0 while their sum was finite (an underflow, not an overflow). */
static double loss_in(const double *z, int64_t C, int y, mpt_dtype f, int m, int *py_zero) {
    const int with_max = m >= 2;
    double mx = 0.0, s = 0.0;
    if (with_max) {
        mx = -INFINITY;
        for (int64_t j = 0; j < C; j++) mx = fmax(mx, z[j]);
    }
    for (int64_t j = 0; j < C; j++) s = mpt_accum_round(s + mpt_accum_round(exp(mpt_accum_round(z[j] - mx, f)), f), f);
    const double zy = mpt_accum_round(z[y] - mx, f);
    *py_zero = 0;
    if (m == 0 || m == 2) { /* p_y, then -log p_y */
        const double py = mpt_accum_round(mpt_accum_round(exp(zy), f) / s, f);
        *py_zero = py == 0.0 && isfinite(s);
        return -mpt_accum_round(log(py), f);
    }
    return mpt_accum_round(mpt_accum_round(log(s), f) - zy, f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct cell {
    double nonfinite;  /* share of images whose loss is inf or NaN */
    double py_zero;    /* of them, the share lost to p_y rounding to 0 (softmax forms) */
    double median_err; /* median |loss - exact| / exact over the finite ones (NAN when none) */
} cell;

static mpt_status run(mpt_lab_ctx *c) {
    double tmax;
    MPT_TRY(mpt_lab_param(c, "tmax", 32, &tmax));
    if (!(tmax >= 1 && tmax <= 1024 && tmax == ldexp(1.0, (int)lround(log2(tmax)))))
        return mpt_errorf(MPT_ERR_ARG, "--param tmax: expected a power of two in [1, 1024], found %g", tmax);
    MPT_LAB_PARAMS_CHECKED(c);
    const int N_T = (int)lround(log2(tmax)) + 1;
    const char *f32[] = {"--precision", "fp32", NULL};
    mpt_run_result r;
    MPT_TRY(mpt_lab_train(c, "fp32", f32, &r));
    const double acc = 100.0 * r.final_test_acc;
    mpt_run_result_free(&r);
    char ckpt[MPT_CLI_PATH + 64];
    snprintf(ckpt, sizeof ckpt, "%s/fp32/%s", c->dir, MPT_CLI_CHECKPOINT_FILE);
    double *z = NULL;
    int64_t M = 0, C = 0;
    MPT_TRY(logits_of(c, ckpt, &z, &M, &C));
    const uint8_t *labels = c->cd->d.test_labels;

    static cell T[MAX_T][N_F][N_M];
    double zmax[MAX_T], zmin[MAX_T], scale[MAX_T];
    double *zs = malloc(sizeof(double) * (size_t)C), *errs = malloc(sizeof(double) * (size_t)M);
    if (!zs || !errs) {
        free(z), free(zs), free(errs);
        return mpt_errorf(MPT_ERR_NOMEM, "lab softmax: no memory");
    }
    for (int ti = 0; ti < N_T; ti++) {
        scale[ti] = ldexp(1.0, ti);
        zmax[ti] = -INFINITY, zmin[ti] = INFINITY;
        for (int64_t i = 0; i < M * C; i++) zmax[ti] = fmax(zmax[ti], scale[ti] * z[i]), zmin[ti] = fmin(zmin[ti], scale[ti] * z[i]);
        for (int fi = 0; fi < N_F; fi++)
            for (int m = 0; m < N_M; m++) {
                int bad = 0, ne = 0, under = 0;
                for (int64_t i = 0; i < M; i++) {
                    for (int64_t j = 0; j < C; j++) zs[j] = mpt_accum_round(scale[ti] * z[i * C + j], fmts[fi]);
                    int pz = 0;
                    const double ref = loss_exact(zs, C, labels[i]), got = loss_in(zs, C, labels[i], fmts[fi], m, &pz);
                    if (!isfinite(got)) bad++, under += pz;
                    else if (ref > 0) errs[ne++] = fabs(got - ref) / ref;
                }
                qsort(errs, (size_t)ne, sizeof *errs, cmp_double);
                T[ti][fi][m].nonfinite = (double)bad / (double)M;
                T[ti][fi][m].py_zero = (double)under / (double)M;
                T[ti][fi][m].median_err = ne == 0 ? NAN : ne % 2 ? errs[ne / 2] : 0.5 * (errs[ne / 2 - 1] + errs[ne / 2]);
            }
    }
    free(z), free(zs), free(errs);

    /* where each breaks, from the formats' constants: exp(z) = inf from z >= ln(overflow threshold), 0 from
     * z <= ln(half the smallest subnormal) */
    double z_over[N_F], z_under[N_F];
    for (int fi = 0; fi < N_F; fi++) {
        const double emax = fmts[fi] == MPT_DTYPE_F16 ? 15 : 127, p = fmts[fi] == MPT_DTYPE_F16 ? 11 : fmts[fi] == MPT_DTYPE_BF16 ? 8 : 24;
        const double esub = fmts[fi] == MPT_DTYPE_F16 ? -24 : fmts[fi] == MPT_DTYPE_BF16 ? -133 : -149;
        z_over[fi] = log(ldexp(2.0 - ldexp(1.0, -p), (int)emax)); /* (2 - 2^-p) 2^emax: the first value rounding to inf */
        z_under[fi] = (esub - 1) * log(2.0);
    }
    int lse16_breaks = -1, stable16_ok = 1, f32_better = 1, lseb_breaks = -1, under16 = -1;
    for (int ti = 0; ti < N_T; ti++) {
        if (lse16_breaks < 0 && T[ti][0][1].nonfinite > 0) lse16_breaks = ti;
        if (lseb_breaks < 0 && T[ti][1][1].nonfinite > 0) lseb_breaks = ti;
        if (under16 < 0 && T[ti][0][2].py_zero > 0) under16 = ti;
        stable16_ok &= T[ti][0][M_STABLE].nonfinite == 0;
        f32_better &= T[ti][2][M_STABLE].median_err * 10.0 <= T[ti][0][M_STABLE].median_err;
    }
    c->observed = lse16_breaks >= 0 && stable16_ok && f32_better;
    int sm16 = -1; /* the first scale where softmax-then-log in FP16 loses an image */
    for (int ti = 0; ti < N_T && sm16 < 0; ti++)
        if (T[ti][0][0].nonfinite > 0) sm16 = ti;
    char where[900];
    char sm_text[300];
    if (sm16 >= 0)
        snprintf(sm_text, sizeof sm_text, "softmax-then-log in FP16 lost images from scale %.0f on (%.1f%% there, "
                 "%.1f%% of them to a p_y that rounds to 0 below e^%.1f, the rest to an overflowing sum)", scale[sm16],
                 100.0 * T[sm16][0][0].nonfinite, 100.0 * T[sm16][0][0].py_zero, z_under[0]);
    else
        snprintf(sm_text, sizeof sm_text, "softmax-then-log in FP16 lost none on this ladder");
    if (lse16_breaks >= 0)
        snprintf(where, sizeof where, "FP16's log-sum-exp without the max first lost images at logit scale %.0f, "
                 "where the largest logit was %.1f (exp overflows FP16 from z = %.2f): %.1f%% of the %lld images; %s",
                 scale[lse16_breaks], zmax[lse16_breaks], z_over[0], 100.0 * T[lse16_breaks][0][1].nonfinite,
                 (long long)M, sm_text);
    else
        snprintf(where, sizeof where, "FP16's log-sum-exp without the max lost no image on this ladder (largest logit "
                 "%.1f at scale %.0f, below the overflow point z = %.2f); %s", zmax[N_T - 1], scale[N_T - 1],
                 z_over[0], sm_text);
    char under_text[400];
    if (under16 >= 0)
        snprintf(under_text, sizeof under_text, "with the max subtracted, softmax-then-log in FP16 still lost %.1f%% of "
                 "the images at scale %.0f to a p_y that rounds to 0 (once z_y - max <= %.1f: a confidently wrong "
                 "image), which log-sum-exp never computes", 100.0 * T[under16][0][2].py_zero, scale[under16],
                 z_under[0]);
    else
        snprintf(under_text, sizeof under_text, "with the max subtracted, no p_y of softmax-then-log rounded to 0 in "
                 "FP16 on this ladder (that needs z_y - max <= %.1f)", z_under[0]);
    char bf_text[300];
    if (lseb_breaks >= 0)
        snprintf(bf_text, sizeof bf_text, "BF16 (FP32's exponent range) lost images without the max only from scale "
                 "%.0f on, where the largest logit %.1f passed its overflow point %.1f", scale[lseb_breaks],
                 zmax[lseb_breaks], z_over[1]);
    else
        snprintf(bf_text, sizeof bf_text, "BF16 (FP32's exponent range) lost no image without the max up to scale %.0f "
                 "(largest logit %.1f, overflow from %.1f)", scale[N_T - 1], zmax[N_T - 1], z_over[1]);
    char errs_text[600];
    snprintf(errs_text, sizeof errs_text, "with the max subtracted, FP16's log-sum-exp lost %s image at any scale, but "
             "its loss erred by %.1e (median, scale 1) against FP32's %.1e and BF16's %.1e%s",
             stable16_ok ? "no" : "some", T[0][0][M_STABLE].median_err, T[0][2][M_STABLE].median_err,
             T[0][1][M_STABLE].median_err,
             f32_better ? ": FP32 was at least 10x more exact at every scale" : ": FP32 was not 10x more exact at every "
                                                                                "scale");
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: on the fp32-trained mlp's logits (%lld test images, largest logit %.1f), %s; %s; %s. %s. "
                 "Hence autocast's rule: softmax and the loss in FP32, where the range is FP32's and the rounding "
                 "2^-24.", (long long)M, zmax[0], where, under_text, errs_text, bf_text);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: %s; %s; %s (the criterion asks for FP16's log-sum-exp without the max to lose an "
                 "image at some scale while the stable form loses none, and FP32's stable loss to err 10x less than "
                 "FP16's at every scale). %s.", where, under_text, errs_text, bf_text);

    FILE *dat = mpt_lab_open(c, "softmax.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# scale zmax zmin, then per format (FP16 BF16 FP32) and method (softmax-then-log, log-sum-exp, max + "
                 "softmax-then-log, stable log-sum-exp): nonfinite_share median_rel_err py_zero_share\n");
    for (int ti = 0; ti < N_T; ti++) {
        fprintf(dat, "%.0f %.6g %.6g", scale[ti], zmax[ti], zmin[ti]);
        for (int fi = 0; fi < N_F; fi++)
            for (int m = 0; m < N_M; m++)
                fprintf(dat, " %.6g %.6e %.6g", T[ti][fi][m].nonfinite, T[ti][fi][m].median_err, T[ti][fi][m].py_zero);
        fprintf(dat, "\n");
    }
    MPT_TRY(mpt_lab_close(c, dat, "softmax.dat"));
    FILE *gp = mpt_lab_open(c, "softmax.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 900, "softmax.png");
    fprintf(gp, "set multiplot layout 2,1\nset grid\nset key outside right\nset logscale x 2\nset xlabel 'logit scale t "
                "(logits multiplied by t)'\nset datafile missing 'nan'\n"
                "set title 'images whose cross-entropy is inf or NaN (trained mlp, %lld test images)'\n"
                "set ylabel 'share of images (%%)'\nset yrange [-5:105]\nplot ", (long long)M);
    static const int dts[N_M] = {2, 4, 3, 1};
    for (int fi = 0; fi < N_F; fi++)
        for (int m = 0; m < N_M; m++)
            fprintf(gp, "%s'softmax.dat' using 1:(100 * $%d) with linespoints lw 2 dt %d lt %d title '%s, %s'",
                    fi || m ? ", \\\n     " : "", 4 + 3 * (fi * N_M + m), dts[m], fi + 1, fmt_names[fi], method_names[m]);
    fprintf(gp, "\nset title 'median relative error of the finite losses against the exact loss of the same logits'\n"
                "set ylabel '|loss - exact| / exact'\nset logscale y 10\nset format y '10^{%%L}'\nset yrange [*:*]\nplot ");
    for (int fi = 0; fi < N_F; fi++)
        for (int m = 0; m < N_M; m++)
            fprintf(gp, "%s'softmax.dat' using 1:(($%d) > 0 ? $%d : NaN) with linespoints lw 2 dt %d lt %d title '%s, %s'",
                    fi || m ? ", \\\n     " : "", 5 + 3 * (fi * N_M + m), 5 + 3 * (fi * N_M + m), dts[m], fi + 1,
                    fmt_names[fi], method_names[m]);
    fprintf(gp, "\nunset multiplot\n");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "softmax.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_softmax, &f));
    fprintf(f, "The cross-entropy of an image with logits z and label y is log(sum_j exp(z_j)) - z_y. The exponential "
               "maps z onto a range as wide as e^z: it overflows a format once e^z rounds to inf and flushes once it "
               "rounds to 0. From the formats' constants:\n\n| format | e^z = inf from z = | e^z = 0 for z <= |\n"
               "|---|---:|---:|\n");
    for (int fi = 0; fi < N_F; fi++) fprintf(f, "| %s | %.2f | %.2f |\n", fmt_names[fi], z_over[fi], z_under[fi]);
    fprintf(f, "\nThe logits are the fp32-trained mlp's (test accuracy %.2f%%) on the first %lld test images, computed "
               "in FP64 from its checkpoint, multiplied by a logit scale t (a sharper network has larger logits) and "
               "stored in each format. Each loss is computed three ways with every operation rounded into the same "
               "format (exp and log in FP64, rounded once; sums left to right): *softmax-then-log* -log(e^z_y / sum "
               "e^z_j) and *log-sum-exp* log(sum e^z_j) - z_y, both without subtracting the max, and the same two with "
               "m = max z subtracted first (*max, softmax-then-log*; *stable*). The error is against the exact loss of the same stored logits, so it is the "
               "computation's, not the logits' rounding. Every number below is a column of `softmax.dat`.\n\n",
            acc, (long long)M);
    fprintf(f, "Share of images whose loss is inf or NaN:\n\n| t | largest z | smallest z |");
    for (int fi = 0; fi < N_F; fi++)
        for (int m = 0; m < N_M; m++) fprintf(f, " %s %s |", fmt_names[fi], method_names[m]);
    fprintf(f, "\n|---:|---:|---:|");
    for (int k = 0; k < N_F * N_M; k++) fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int ti = 0; ti < N_T; ti++) {
        fprintf(f, "| %.0f | %.1f | %.1f |", scale[ti], zmax[ti], zmin[ti]);
        for (int fi = 0; fi < N_F; fi++)
            for (int m = 0; m < N_M; m++) fprintf(f, " %.1f%% |", 100.0 * T[ti][fi][m].nonfinite);
        fprintf(f, "\n");
    }
    fprintf(f, "\nMedian relative error of the finite losses (- where every loss was lost):\n\n| t |");
    for (int fi = 0; fi < N_F; fi++)
        for (int m = 0; m < N_M; m++) fprintf(f, " %s %s |", fmt_names[fi], method_names[m]);
    fprintf(f, "\n|---:|");
    for (int k = 0; k < N_F * N_M; k++) fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int ti = 0; ti < N_T; ti++) {
        fprintf(f, "| %.0f |", scale[ti]);
        for (int fi = 0; fi < N_F; fi++)
            for (int m = 0; m < N_M; m++)
                if (isfinite(T[ti][fi][m].median_err)) fprintf(f, " %.2e |", T[ti][fi][m].median_err);
                else fprintf(f, " - |");
        fprintf(f, "\n");
    }
    fprintf(f, "\n%s; %s; %s. %s.\n\nPyTorch's autocast keeps `softmax`, `log_softmax`, `nll_loss` and `cross_entropy` in "
               "FP32 on CUDA (its list of ops that autocast to float32), and mptrain's policy does the same in every "
               "mode (the loss node of the precision map is FP32): the range problem is removed by subtracting the "
               "max, the rounding problem only by a wider format.\n\n"
               "Criterion for the effect: at some scale FP16's log-sum-exp without the max loses an image while its "
               "stable form loses none, and at every scale FP32's stable loss errs at least 10x less than FP16's "
               "(medians).\n", where, under_text, errs_text, bf_text);
    return mpt_lab_report_close(c, &mpt_lab_softmax, f, plot_error);
}

const mpt_lab_lesson mpt_lab_softmax = {
    "softmax",
    "Where do FP16 and BF16 logits overflow or underflow in exp and log-sum-exp without the max subtracted and "
    "without FP32, what does subtracting the max fix and what not, and why does autocast keep softmax and the loss "
    "in FP32?",
    "tmax=T, the largest logit scale of the ladder 1, 2, 4, ..., T (a power of two up to 1024, default 32)",
    run,
    {20000, 10000, 2, 0}, /* full */
    {2000, 1000, 1, 0},   /* --quick */
    "tmax",
    "--quick 1 s, full 3 s of CPU time (2-core VM, 2026-11-28)",
};
