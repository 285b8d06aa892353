/*
 * tools/lab/lesson_grad_comm.c - lesson `grad-comm`: data-parallel gradients all-reduced in FP32, BF16 and FP16 (the
 * wire dtypes of `--grad-comm`, engine/dist/dist.h), on simulated ranks in one process.
 *
 * Plan: train the mlp in fp32 (seed 0); from its checkpoint, one global batch of B = 128 training images is split into
 * N contiguous shards (N = 2, 4, 8, 16: mpt_dist_shard's rule), and each simulated rank's weight gradients g_r of its
 * shard's mean loss are computed in FP64 (forward and backward of the mlp on the host). The all-reduce is the one of
 * engine/dist/dist.h, done here on the host exactly as described there: every rank's term w_r g_r (w_r = B_r / B) is
 * multiplied by the loss scale S (1, or `scale` for the FP16 wire as fp16 training sends it), rounded to the wire
 * dtype, and the terms are summed rank after rank with every partial sum rounded to the wire dtype, then widened and
 * divided by S; the FP32 wire sums the FP32 terms in FP32. Errors, normwise over all weight gradients:
 *   against the FP32 all-reduce   ||g~ - g32|| / ||g32||   (the telemetry's comm_rel_l2, docs/numerics.md section 5)
 *   FP32's own                    ||g32 - g|| / ||g||      (g: the exact FP64 sum)
 * beside the bound of N roundings, (1 + u)^N - 1 relative to sum_r |w_r g_r| per element (dist.h), and, for FP16 at
 * S = 1, the share of the ranks' nonzero terms that flush to zero (|w_r g_r| <= 2^-25) or become subnormal.
 * The order of the partial sums is a ring's, rank 0 first; NCCL's trees and rings order them differently, which
 * changes the error's value, not its size. What the error does to training is not measured here: that needs real
 * ranks (`mpirun -np N mptrain train --data-parallel --grad-comm bf16`, docs/distributed.md), whose telemetry
 * reports the same comm_rel_l2 step by step.
 * Criterion: the effect is observed when at every N the BF16 wire's error is at least 4x the FP16 wire's at the
 * loss scale (their unit roundoffs differ 8x) and at most the N-rounding bound, and the BF16 wire's error at the
 * largest N exceeds its error at the smallest.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "engine/checkpoint.h"
#include "engine/dist/dist.h"
#include "tools/lab/accum.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"

#define BATCH 128
#define MAX_LAYERS 8
#define N_N 4
static const int ranks_of[N_N] = {2, 4, 8, 16};
#define N_W 4 /* wires: FP32, BF16, FP16 at S = 1, FP16 at the loss scale */

typedef struct net {
    int L;
    int64_t in[MAX_LAYERS], out[MAX_LAYERS];
    double *W[MAX_LAYERS], *b[MAX_LAYERS]; /* [out, in], [out] */
    int64_t n_grad;                         /* weights and biases of every layer */
} net;

static void net_free(net *n) {
    for (int l = 0; l < n->L; l++) free(n->W[l]), free(n->b[l]);
    memset(n, 0, sizeof *n);
}

static mpt_status net_load(const char *ckpt, int64_t dim, net *n) {
    memset(n, 0, sizeof *n);
    mpt_checkpoint *ck = NULL;
    MPT_TRY(mpt_checkpoint_open(ckpt, NULL, 0, &ck));
    mpt_status s = MPT_OK;
    int64_t K = dim;
    for (int l = 0; s == MPT_OK && l < MAX_LAYERS; l++) {
        float *w = NULL, *bb = NULL;
        int64_t N = 0;
        int last = 0;
        s = mpt_lab_fc_read(ck, ckpt, l + 1, K, &w, &bb, &N, &last);
        if (s != MPT_OK || !w) break;
        n->W[l] = malloc(sizeof(double) * (size_t)(N * K));
        n->b[l] = malloc(sizeof(double) * (size_t)N);
        n->in[l] = K, n->out[l] = N, n->L = l + 1;
        if (!n->W[l] || !n->b[l]) s = mpt_errorf(MPT_ERR_NOMEM, "lab grad-comm: no memory");
        for (int64_t i = 0; s == MPT_OK && i < N * K; i++) n->W[l][i] = w[i];
        for (int64_t i = 0; s == MPT_OK && i < N; i++) n->b[l][i] = bb[i];
        free(w), free(bb);
        n->n_grad += N * K + N;
        K = N;
    }
    mpt_checkpoint_close(&ck);
    if (s == MPT_OK && n->L == 0) s = mpt_errorf(MPT_ERR_FORMAT, "%s: no fc1.weight (the lesson needs the mlp)", ckpt);
    if (s != MPT_OK) net_free(n);
    return s;
}

/* The gradient of the mean cross-entropy over rows x[0..B) (labels y) with respect to every weight and bias, in FP64,
 * into g[n_grad] (layer by layer: W then b). */
static mpt_status net_grad(const net *n, const double *x, const uint8_t *y, int64_t B, double *g) {
    double *a[MAX_LAYERS + 1] = {NULL}, *d = NULL, *dp = NULL;
    mpt_status s = MPT_OK;
    a[0] = (double *)x;
    for (int l = 0; l < n->L && s == MPT_OK; l++) {
        a[l + 1] = malloc(sizeof(double) * (size_t)(B * n->out[l]));
        if (!a[l + 1]) {
            s = mpt_errorf(MPT_ERR_NOMEM, "lab grad-comm: no memory");
            break;
        }
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)n->out[l], (int)n->in[l], 1.0, a[l],
                    (int)n->in[l], n->W[l], (int)n->in[l], 0.0, a[l + 1], (int)n->out[l]);
        for (int64_t i = 0; i < B * n->out[l]; i++) {
            double v = a[l + 1][i] + n->b[l][i % n->out[l]];
            a[l + 1][i] = l == n->L - 1 || v > 0.0 ? v : 0.0;
        }
    }
    const int L = n->L;
    const int64_t C = n->out[L - 1];
    d = s == MPT_OK ? malloc(sizeof(double) * (size_t)(B * C)) : NULL;
    if (s == MPT_OK && !d) s = mpt_errorf(MPT_ERR_NOMEM, "lab grad-comm: no memory");
    for (int64_t i = 0; s == MPT_OK && i < B; i++) { /* dlogits = (softmax - onehot) / B */
        const double *z = a[L] + i * C;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t k = 0; k < C; k++) mx = fmax(mx, z[k]);
        for (int64_t k = 0; k < C; k++) sum += exp(z[k] - mx);
        for (int64_t k = 0; k < C; k++) d[i * C + k] = (exp(z[k] - mx) / sum - (k == y[i] ? 1.0 : 0.0)) / (double)B;
    }
    int64_t off = 0, offs[MAX_LAYERS];
    for (int l = 0; l < L; l++) offs[l] = off, off += n->out[l] * n->in[l] + n->out[l];
    for (int l = L - 1; l >= 0 && s == MPT_OK; l--) {
        const int64_t N = n->out[l], K = n->in[l];
        double *gW = g + offs[l], *gb = gW + N * K;
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)B, 1.0, d, (int)N, a[l], (int)K, 0.0,
                    gW, (int)K);
        for (int64_t j = 0; j < N; j++) {
            double t = 0.0;
            for (int64_t i = 0; i < B; i++) t += d[i * N + j];
            gb[j] = t;
        }
        if (l == 0) break;
        dp = malloc(sizeof(double) * (size_t)(B * K));
        if (!dp) {
            s = mpt_errorf(MPT_ERR_NOMEM, "lab grad-comm: no memory");
            break;
        }
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)K, (int)N, 1.0, d, (int)N, n->W[l], (int)K,
                    0.0, dp, (int)K);
        for (int64_t i = 0; i < B * K; i++) dp[i] = a[l][i] > 0.0 ? dp[i] : 0.0;
        free(d);
        d = dp;
        dp = NULL;
    }
    free(d);
    for (int l = 1; l <= L; l++) free(a[l]);
    return s;
}

/* One wire's all-reduce of the ranks' terms (already weighted by w_r): t_r = RNE(S term_r) in `wire`, summed rank after
 * rank with every partial sum rounded, widened and divided by S. The FP32 wire: FP32 terms summed in FP32. Also
 * counts, for FP16, the ranks' nonzero terms that flush or become subnormal. */
static void allreduce(const double *terms, int N, int64_t n, mpt_dtype wire, double S, double *out, int64_t *nonzero,
                      int64_t *flushed, int64_t *subnormal) {
    for (int64_t i = 0; i < n; i++) {
        double acc = 0.0;
        for (int r = 0; r < N; r++) {
            const double x = terms[(int64_t)r * n + i];
            const double t = mpt_accum_round(mpt_accum_round(x, MPT_DTYPE_F32) * S, wire); /* the FP32 term, scaled */
            if (x != 0.0) {
                (*nonzero)++;
                *flushed += t == 0.0;
                *subnormal += t != 0.0 && wire == MPT_DTYPE_F16 && fabs(t) < 0x1p-14;
            }
            acc = r == 0 ? t : mpt_accum_round(acc + t, wire);
        }
        out[i] = acc / S;
    }
}

static double rel_l2(const double *a, const double *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
    return den > 0.0 ? sqrt(num / den) : 0.0;
}

typedef struct comm_row {
    int N;
    double err[N_W];        /* against the FP32 all-reduce (FP32's own: against the exact sum) */
    double bound[N_W];      /* ((1 + u)^N - 1) ||sum_r |w_r g_r| || / ||g32||, the N-rounding bound, normwise */
    double flush1, sub1;    /* FP16 at S = 1: shares of the ranks' nonzero terms flushed / made subnormal */
    double flushS;          /* FP16 at the loss scale */
} comm_row;

static mpt_status run(mpt_lab_ctx *c) {
    double scale;
    MPT_TRY(mpt_lab_param(c, "scale", 65536.0, &scale));
    if (!(scale >= 1.0 && scale <= 16777216.0 && scale == ldexp(1.0, (int)lround(log2(scale)))))
        return mpt_errorf(MPT_ERR_ARG, "--param scale: expected a power of two in [1, 2^24], found %g", scale);
    MPT_LAB_PARAMS_CHECKED(c);
    const char *f32[] = {"--precision", "fp32", NULL};
    mpt_run_result r;
    MPT_TRY(mpt_lab_train(c, "fp32", f32, &r));
    const double acc = 100.0 * r.final_test_acc;
    mpt_run_result_free(&r);
    char ckpt[MPT_CLI_PATH + 64];
    snprintf(ckpt, sizeof ckpt, "%s/fp32/%s", c->dir, MPT_CLI_CHECKPOINT_FILE);
    const mpt_mnist *d = &c->cd->d;
    net nt;
    MPT_TRY(net_load(ckpt, d->dim, &nt));
    const int64_t B = d->n_train < BATCH ? d->n_train : BATCH, n = nt.n_grad;
    double *x = malloc(sizeof(double) * (size_t)(B * d->dim)), *terms = malloc(sizeof(double) * (size_t)(16 * n));
    double *g = malloc(sizeof(double) * (size_t)n), *g32 = malloc(sizeof(double) * (size_t)n);
    double *gw = malloc(sizeof(double) * (size_t)n), *absum = malloc(sizeof(double) * (size_t)n);
    mpt_status s = x && terms && g && g32 && gw && absum ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "lab grad-comm: no memory");
    for (int64_t i = 0; s == MPT_OK && i < B * d->dim; i++) x[i] = d->train_images[i] / 255.0;
    comm_row R[N_N];
    const mpt_dtype wires[N_W] = {MPT_DTYPE_F32, MPT_DTYPE_BF16, MPT_DTYPE_F16, MPT_DTYPE_F16};
    const double scales[N_W] = {1.0, 1.0, 1.0, scale};
    const double us[N_W] = {0x1p-24, 0x1p-8, 0x1p-11, 0x1p-11};
    for (int ni = 0; s == MPT_OK && ni < N_N; ni++) {
        const int N = ranks_of[ni];
        R[ni].N = N;
        for (int rk = 0; s == MPT_OK && rk < N; rk++) { /* rank rk's shard of the global batch, its weighted gradient */
            int lo, hi;
            mpt_dist_shard((int)B, rk, N, &lo, &hi);
            s = net_grad(&nt, x + (int64_t)lo * d->dim, d->train_labels + lo, hi - lo, terms + (int64_t)rk * n);
            for (int64_t i = 0; s == MPT_OK && i < n; i++) terms[(int64_t)rk * n + i] *= (double)(hi - lo) / (double)B;
        }
        if (s != MPT_OK) break;
        for (int64_t i = 0; i < n; i++) { /* the exact sum and sum_r |w_r g_r| */
            double e = 0.0, a = 0.0;
            for (int rk = 0; rk < N; rk++) e += terms[(int64_t)rk * n + i], a += fabs(terms[(int64_t)rk * n + i]);
            g[i] = e, absum[i] = a;
        }
        int64_t nz = 0, fl = 0, sb = 0;
        allreduce(terms, N, n, MPT_DTYPE_F32, 1.0, g32, &nz, &fl, &sb);
        double norm32 = 0.0, norma = 0.0;
        for (int64_t i = 0; i < n; i++) norm32 += g32[i] * g32[i], norma += absum[i] * absum[i];
        for (int w = 0; w < N_W; w++) {
            nz = fl = sb = 0;
            if (w == 0) R[ni].err[w] = rel_l2(g32, g, n);
            else {
                allreduce(terms, N, n, wires[w], scales[w], gw, &nz, &fl, &sb);
                R[ni].err[w] = rel_l2(gw, g32, n);
            }
            R[ni].bound[w] = (pow(1.0 + us[w], N) - 1.0) * sqrt(norma / norm32);
            if (w == 2) R[ni].flush1 = nz ? (double)fl / nz : 0.0, R[ni].sub1 = nz ? (double)sb / nz : 0.0;
            if (w == 3) R[ni].flushS = nz ? (double)fl / nz : 0.0;
        }
    }
    free(x), free(terms), free(g), free(g32), free(gw), free(absum);
    net_free(&nt);
    MPT_TRY(s);

    int ok = 1;
    for (int ni = 0; ni < N_N; ni++)
        ok &= R[ni].err[1] >= 4.0 * R[ni].err[3] && R[ni].err[1] <= R[ni].bound[1];
    ok &= R[N_N - 1].err[1] > R[0].err[1];
    c->observed = ok;
    const comm_row *r0 = &R[0], *rl = &R[N_N - 1];
    char flush_text[500];
    mpt_text_wire_unscaled(flush_text, sizeof flush_text, rl->N, rl->flush1, rl->sub1, rl->err[2], rl->err[3],
                           log2(scale));
    snprintf(c->conclusion, sizeof c->conclusion,
             "%s: the fp32-trained mlp's gradients of one batch of %lld on N simulated ranks, all-reduced in the wire "
             "dtype with every partial sum rounded, erred against the FP32 all-reduce by %.2g (N = %d) to %.2g "
             "(N = %d) in BF16 and %.2g to %.2g in FP16 at S = 2^%.0f (bounds of N roundings: %.2g, %.2g and %.2g, "
             "%.2g); FP32's own error against the exact sum was %.2g to %.2g. %s%s. What the error does to training "
             "is not measured here: that needs real ranks (mpirun -np N mptrain train --data-parallel --grad-comm "
             "bf16).",
             c->observed ? "Observed" : "Not observed", (long long)B, r0->err[1], r0->N, rl->err[1], rl->N, r0->err[3],
             rl->err[3], log2(scale), r0->bound[1], rl->bound[1], r0->bound[3], rl->bound[3], r0->err[0], rl->err[0],
             flush_text,
             c->observed ? "" : " (the criterion asks the BF16 wire to err at least 4x the scaled FP16 wire and at most "
                                "its bound at every N, and more at the largest N than at the smallest)");

    FILE *dat = mpt_lab_open(c, "grad-comm.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# N err_fp32_vs_exact err_bf16 err_fp16_S1 err_fp16_S bound_fp32 bound_bf16 bound_fp16 bound_fp16 "
                 "flush_fp16_S1 subnormal_fp16_S1 flush_fp16_S (errors against the FP32 all-reduce, normwise)\n");
    for (int ni = 0; ni < N_N; ni++)
        fprintf(dat, "%d %.6e %.6e %.6e %.6e %.6e %.6e %.6e %.6e %.6g %.6g %.6g\n", R[ni].N, R[ni].err[0], R[ni].err[1],
                R[ni].err[2], R[ni].err[3], R[ni].bound[0], R[ni].bound[1], R[ni].bound[2], R[ni].bound[3],
                R[ni].flush1, R[ni].sub1, R[ni].flushS);
    MPT_TRY(mpt_lab_close(c, dat, "grad-comm.dat"));
    FILE *gp = mpt_lab_open(c, "grad-comm.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 560, "grad-comm.png");
    fprintf(gp, "set title 'gradient all-reduce over N simulated ranks: error against the FP32 all-reduce (mlp, one "
                "batch of %lld)'\nset xlabel 'ranks N'\nset ylabel '||g - g_{32}|| / ||g_{32}||'\nset logscale x 2\n"
                "set logscale y 10\nset format y '10^{%%L}'\nset grid\nset key outside right\n"
                "plot 'grad-comm.dat' using 1:3 with linespoints lw 2 pt 7 lt 3 title 'BF16 wire', "
                "'' using 1:7 with lines dt 2 lt 3 title 'bound, BF16', "
                "'' using 1:5 with linespoints lw 2 pt 5 lt 2 title 'FP16 wire, S = 2^{%.0f}', "
                "'' using 1:4 with linespoints lw 2 pt 9 lt 4 title 'FP16 wire, S = 1', "
                "'' using 1:8 with lines dt 2 lt 2 title 'bound, FP16', "
                "'' using 1:2 with linespoints lw 2 pt 11 lt 1 title 'FP32 all-reduce against the exact sum'\n",
            (long long)B, log2(scale));
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "grad-comm.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_grad_comm, &f));
    fprintf(f, "Data-parallel training sums every rank's weight gradients (an all-reduce) before the optimizer step. "
               "`--grad-comm bf16` or `fp16` halves the bytes on the wire: each rank's term w_r g_r (w_r = its share of "
               "the batch; still multiplied by the loss scale S in fp16 training) is rounded to the wire dtype and "
               "every partial sum is rounded again, as NCCL does for 16-bit buffers (engine/dist/dist.h). An element "
               "passes at most N roundings, so its error is at most ((1 + u)^N - 1) sum_r |w_r g_r| (u = 2^-8 in BF16, "
               "2^-11 in FP16).\n\n"
               "Here the ranks are simulated in one process: the fp32-trained mlp (test accuracy %.2f%%), one batch "
               "of the first %lld training images split into N contiguous shards (mpt_dist_shard's rule), each shard's "
               "gradient in FP64, then the all-reduce of dist.h on the host, ranks summed in ring order (rank 0 "
               "first; NCCL orders them otherwise, which changes the error's value, not its size). Errors are "
               "normwise over all the mlp's weights and biases; every number is a column of `grad-comm.dat`.\n\n"
               "| N | FP32 vs exact | BF16 | FP16, S = 1 | FP16, S = 2^%.0f | bound BF16 | bound FP16 | FP16 S = 1: "
               "terms flushed | made subnormal | FP16 S = 2^%.0f: flushed |\n"
               "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            acc, (long long)B, log2(scale), log2(scale));
    for (int ni = 0; ni < N_N; ni++)
        fprintf(f, "| %d | %.2e | %.2e | %.2e | %.2e | %.2e | %.2e | %.3g%% | %.3g%% | %.3g%% |\n", R[ni].N,
                R[ni].err[0], R[ni].err[1], R[ni].err[2], R[ni].err[3], R[ni].bound[1], R[ni].bound[3],
                100.0 * R[ni].flush1, 100.0 * R[ni].sub1, 100.0 * R[ni].flushS);
    fprintf(f, "\n(The 16-bit columns are against the FP32 all-reduce, as the telemetry's `comm_rel_l2`; the first "
               "column is FP32's own error against the exact sum, which that metric does not see.) %s.\n\n"
               "What the error does to training is not measured in this lesson: it needs real ranks, `mpirun -np N "
               "mptrain train --data-parallel --grad-comm bf16` (docs/distributed.md), whose telemetry reports "
               "`comm_rel_l2` every telemetry step.\n\n"
               "Criterion for the effect: at every N the BF16 wire errs at least 4x the FP16 wire at the loss scale "
               "(their unit roundoffs differ 8x) and at most its N-rounding bound, and more at N = %d than at N = %d.\n",
            flush_text, rl->N, r0->N);
    return mpt_lab_report_close(c, &mpt_lab_grad_comm, f, plot_error);
}

const mpt_lab_lesson mpt_lab_grad_comm = {
    "grad-comm",
    "How much error does an all-reduce of data-parallel gradients add when its wire carries BF16 or FP16 instead of "
    "FP32, on 2 to 16 simulated ranks, and what does FP16 lose without the loss scale?",
    "scale=S, the loss scale the FP16 wire sends with (a power of two, default 65536)",
    run,
    {20000, 10000, 2, 0}, /* full */
    {2000, 1000, 1, 0},   /* --quick */
    "scale",
    "--quick 4 s, full 5 s of CPU time (2-core VM, 2026-11-28)",
};
