/*
 * tools/lab/lesson_quantization.c - lesson `quantization`: integers for inference, floating point for training
 * (engine/quant.h, tools/ptq.h; docs/numerics.md, "Integer formats").
 *
 * Plan.
 * 1. Training. The mlp and lenet5, each in fp32 and with `--qat int4` (weights fake-quantized to INT4 per output
 *    channel in the forward pass, FP32 masters), with the same seeds: a paired design, as `compare --seeds`.
 * 2. Post-training quantization of every fp32 checkpoint (tools/ptq.h, what `eval --quantize` runs), each on the same
 *    test images as the unquantized model: the weights to BF16 (no scale), FP8 E4M3 per tensor, INT8 per tensor, INT8
 *    per channel and INT4 per channel, and INT8 per channel with INT8 activations (W8A8: the exact integer GEMMs and
 *    convolutions, scales calibrated on `calibrate` training batches). The QAT checkpoints are evaluated on their own
 *    INT4 grid (INT4 per channel: the model they trained as). Per model and format the paired difference of test
 *    accuracy to the unquantized fp32 model of the same seed, its sd, 95% interval and verdict against compare's
 *    --margin (tools/stats.h); QAT INT4 against post-training INT4 the same way.
 * 3. Errors per layer (seed 0): the weights' relative L2 error against the FP32 masters and each layer output's against
 *    the unquantized model's, per format.
 * 4. Gradients against weights: the seed-0 fp32 mlp's masters and the weight gradients of one training step (the first
 *    training batch): per layer, how many binades the nonzero magnitudes span (1st to 99th percentile) and the share of
 *    nonzero values each format's grid makes 0 with a per-tensor amax scale (INT8, or the integer grid of `grad_bits`
 *    bits: |x| below half a grid step, s / 2 = amax / 254 for INT8; FP8 E4M3: below half its smallest subnormal times
 *    s; BF16: below 2^-134).
 * 5. The picture: the grid of each format over the histogram of the mlp's fc2 weights, and the log2 histograms of fc2's
 *    weights and gradients with each one's INT8 zero threshold.
 * Criteria: (a) inference tolerates integers: INT8 per channel and W8A8 are equivalent to fp32 within the margin (the
 * verdict of the paired interval; without GSL, a mean paired difference within the margin) on both models; (b) training
 * does not: on every layer of the mlp, the INT8 grid zeroes at least 5% of the nonzero weight gradients (a twentieth of
 * them lost) and at least five times the share of weights it zeroes (the gradients' spread, not the grid alone). The effect is observed when both hold. INT4 and QAT are reported with their
 * verdicts and a sentence chosen by them, not made a criterion: a few seeds of short runs decide what their intervals
 * say and no more.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/numerics.h"
#include "tools/lab/lab.h"
#include "tools/ptq.h"
#include "tools/stats.h"

#define NM 2 /* models */
static const char *const model_name[NM] = {"mlp", "lenet5"};
#define NF 6 /* post-training formats */
static const struct {
    const char *label, *key;
    mpt_qformat fmt;
    int per_channel, act_int8;
} ptq[NF] = {
    {"BF16", "bf16", MPT_QFORMAT_BF16, 0, 0},
    {"FP8 E4M3 per tensor", "e4m3-t", MPT_QFORMAT_E4M3, 0, 0},
    {"INT8 per tensor", "int8-t", MPT_QFORMAT_INT8, 0, 0},
    {"INT8 per channel", "int8-c", MPT_QFORMAT_INT8, 1, 0},
    {"INT4 per channel", "int4-c", MPT_QFORMAT_INT4, 1, 0},
    {"W8A8 (INT8 per channel, INT8 activations)", "w8a8", MPT_QFORMAT_INT8, 1, 1},
};
enum { F_BF16 = 0, F_E4M3, F_INT8T, F_INT8C, F_INT4C, F_W8A8 };
#define NC (NF + 2) /* accuracy columns: fp32, the post-training formats, QAT INT4 */
#define C_QAT (NF + 1)
#define MAX_SEEDS 8

/* ---- gradients against weights ------------------------------------------------------------------------------------ */

/* The range of a tensor's nonzero magnitudes and what each grid makes 0 (shares of the nonzero values). */
typedef struct range_stats {
    int64_t nonzero;
    double lo, hi;                       /* log2 of the 1st and 99th percentile of |x| */
    double zero_int, zero_e4m3, zero_bf16;
    float amax;
} range_stats;

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* ... with the integer grid of qmax (2^(bits - 1) - 1) for zero_int. */
static mpt_status range_of(const float *x, int64_t n, int qmax, range_stats *r) {
    memset(r, 0, sizeof *r);
    float *m = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!m) return mpt_errorf(MPT_ERR_NOMEM, "lab quantization: no memory");
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        r->amax = a > r->amax ? a : r->amax;
        if (a > 0.0f) m[r->nonzero++] = a;
    }
    const float s8 = mpt_int_scale_from_amax(r->amax, qmax), se = mpt_int_scale_from_amax(r->amax, 448);
    int64_t z8 = 0, ze = 0, zb = 0;
    for (int64_t i = 0; i < r->nonzero; i++) {
        z8 += mpt_int_quantize(m[i], s8, qmax) == 0;
        ze += mpt_quant_fake(m[i], se, 448, MPT_QKIND_E4M3) == 0.0f;
        zb += mpt_quant_fake(m[i], 1.0f, 0, MPT_QKIND_BF16) == 0.0f;
    }
    if (r->nonzero > 0) {
        qsort(m, (size_t)r->nonzero, sizeof *m, cmp_float);
        r->lo = log2((double)m[(int64_t)(0.01 * (double)(r->nonzero - 1))]);
        r->hi = log2((double)m[(int64_t)(0.99 * (double)(r->nonzero - 1))]);
        r->zero_int = (double)z8 / (double)r->nonzero;
        r->zero_e4m3 = (double)ze / (double)r->nonzero;
        r->zero_bf16 = (double)zb / (double)r->nonzero;
    }
    free(m);
    return MPT_OK;
}

/* ---- the picture's data -------------------------------------------------------------------------------------------- */

/* fc2's weights: histogram (block 0), then the grid points of BF16, E4M3, INT8 per tensor (blocks 1..3) and of INT4 for
 * the rows with the smallest and the largest amax (blocks 4, 5), then log2 |w| and log2 |g| histograms (6, 7). Grid
 * points below amax / 256 are left out (they merge into 0 at the picture's scale; their number is written). */
static mpt_status write_picture_data(mpt_lab_ctx *c, const float *w, const float *g, int64_t n, int64_t rows, int qmax,
                                     float *amax_out, int64_t *hmax, float s_rows[2], double thr[2]) {
    FILE *f = mpt_lab_open(c, "quantization.dat");
    if (!f) return MPT_ERR_IO;
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(w[i]));
    *amax_out = amax;
    enum { BINS = 101 };
    int64_t h[BINS] = {0};
    const double width = 2.0 * amax / BINS;
    for (int64_t i = 0; i < n; i++) {
        int b = (int)floor(((double)w[i] + amax) / width);
        h[b < 0 ? 0 : b >= BINS ? BINS - 1 : b]++;
    }
    *hmax = 0;
    for (int b = 0; b < BINS; b++) *hmax = h[b] > *hmax ? h[b] : *hmax;
    fprintf(f, "# fc2 weights: bin centre, count\n");
    for (int b = 0; b < BINS; b++) fprintf(f, "%.8g %lld\n", -amax + (b + 0.5) * width, (long long)h[b]);
    const float floor_v = amax / 256.0f;
    /* BF16: every positive BF16 value from amax / 256 up to amax, and its negative */
    fprintf(f, "\n\n# BF16 grid (|v| >= amax / 256)\n");
    for (uint32_t code = mpt_f32_to_bf16(floor_v); mpt_bf16_to_f32((uint16_t)code) <= amax; code++)
        fprintf(f, "%.8g\n%.8g\n", (double)mpt_bf16_to_f32((uint16_t)code), -(double)mpt_bf16_to_f32((uint16_t)code));
    const float se = mpt_int_scale_from_amax(amax, 448), s8 = mpt_int_scale_from_amax(amax, MPT_INT8_QMAX);
    fprintf(f, "\n\n# FP8 E4M3 grid at s = amax / 448 (|v| >= amax / 256)\n");
    for (unsigned code = 1; code <= 0x7e; code++) {
        const double v = (double)mpt_e4m3_to_f32((uint8_t)code) * se;
        if (v >= floor_v) fprintf(f, "%.8g\n%.8g\n", v, -v);
    }
    fprintf(f, "\n\n# INT8 grid per tensor, s = amax / 127\n");
    for (int q = -127; q <= 127; q++) fprintf(f, "%.8g\n", (double)mpt_int_dequantize(q, s8));
    /* INT4 per channel: the rows with the smallest and the largest amax */
    const int64_t cols = n / rows;
    float rmin = INFINITY, rmax = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        float a = 0.0f;
        for (int64_t k = 0; k < cols; k++) a = fmaxf(a, fabsf(w[r * cols + k]));
        rmin = fminf(rmin, a), rmax = fmaxf(rmax, a);
    }
    s_rows[0] = mpt_int_scale_from_amax(rmin, MPT_INT4_QMAX), s_rows[1] = mpt_int_scale_from_amax(rmax, MPT_INT4_QMAX);
    for (int k = 0; k < 2; k++) {
        fprintf(f, "\n\n# INT4 grid of the row with the %s amax, s = %.6g\n", k ? "largest" : "smallest", (double)s_rows[k]);
        for (int q = -7; q <= 7; q++) fprintf(f, "%.8g\n", (double)mpt_int_dequantize(q, s_rows[k]));
    }
    /* log2 magnitudes, one bin per half binade, of the weights and the gradients */
    const float *src[2] = {w, g};
    for (int k = 0; k < 2; k++) {
        enum { LB = 160 };
        int64_t lh[LB] = {0}; /* bins of half a binade from 2^-60 up */
        float am = 0.0f;
        for (int64_t i = 0; i < n; i++) am = fmaxf(am, fabsf(src[k][i]));
        for (int64_t i = 0; i < n; i++) {
            const float a = fabsf(src[k][i]);
            if (a == 0.0f) continue;
            int b = (int)floor((log2((double)a) + 60.0) * 2.0);
            lh[b < 0 ? 0 : b >= LB ? LB - 1 : b]++;
        }
        thr[k] = log2((double)mpt_int_scale_from_amax(am, qmax) / 2.0);
        fprintf(f, "\n\n# log2 |%s| of fc2 (nonzero), half-binade bins: left edge, share in %%\n", k ? "gradient" : "weight");
        for (int b = 0; b < LB; b++)
            if (lh[b]) fprintf(f, "%.2f %.6g\n", b / 2.0 - 60.0, 100.0 * (double)lh[b] / (double)n);
    }
    char path[MPT_CLI_PATH + 32];
    snprintf(path, sizeof path, "%s/quantization.dat", c->dir);
    return mpt_outdir_close_written(f, path);
}

/* ---- the lesson ---------------------------------------------------------------------------------------------------- */

/* The paired comparison of column `col` with fp32 (or of `a` with `b`): summary of the differences, and with GSL the
 * interval and verdict. */
typedef struct pair {
    mpt_stats_summary d;
    mpt_stats_paired p;
    int have_p;
} pair;

static mpt_status pair_of(const double *a, const double *b, int n, double margin, pair *out) {
    double d[MAX_SEEDS];
    for (int k = 0; k < n; k++) d[k] = a[k] - b[k];
    mpt_stats_summarize(d, n, &out->d);
    out->have_p = mpt_stats_available();
    if (out->have_p) MPT_TRY(mpt_stats_compare_paired(a, b, n, 0.95, margin, &out->p));
    return MPT_OK;
}

/* Within the margin: the verdict "equivalent", or without GSL a mean paired difference inside +-margin. */
static int pair_equivalent(const pair *p, double margin) {
    return p->have_p ? p->p.verdict == MPT_VERDICT_EQUIVALENT : fabs(p->d.mean) < margin;
}

static const char *pair_text(const pair *p, char *buf, size_t len) {
    if (p->have_p)
        snprintf(buf, len, "%+.2f pp (95%% CI %+.2f..%+.2f: %s)", p->p.mean, p->p.lo, p->p.hi,
                 mpt_verdict_name(p->p.verdict));
    else snprintf(buf, len, "%+.2f pp (sd %.2f)", p->d.mean, p->d.sd);
    return buf;
}

/* The interval without the mean: "95% CI -0.56..+0.24, inconclusive against +-0.3 pp" (or the sd without GSL). */
static const char *ci_text(const pair *p, char *buf, size_t len) {
    if (p->have_p)
        snprintf(buf, len, "95%% CI %+.2f..%+.2f, %s against ±%.2g pp", p->p.lo, p->p.hi, mpt_verdict_name(p->p.verdict),
                 p->p.margin);
    else snprintf(buf, len, "sd %.2f pp over the seeds", p->d.sd);
    return buf;
}

static const char *checkpoint(const mpt_lab_ctx *c, const char *run, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s/%s", c->dir, run, MPT_CLI_CHECKPOINT_FILE);
    return buf;
}

static mpt_status run(mpt_lab_ctx *c) {
    double seeds_d, calib_d, bits_d;
    MPT_TRY(mpt_lab_param(c, "seeds", c->n_seeds, &seeds_d));
    MPT_TRY(mpt_lab_param(c, "calibrate", 4, &calib_d));
    MPT_TRY(mpt_lab_param(c, "grad_bits", 8, &bits_d));
    if (bits_d < 2 || bits_d > 16 || bits_d != floor(bits_d))
        return mpt_errorf(MPT_ERR_ARG, "--param grad_bits: expected an integer in [2, 16], found %g", bits_d);
    const int bits = (int)bits_d, qmax = (1 << (bits - 1)) - 1; /* the grid of step 4 */
    const int ns = (int)seeds_d, calibrate = (int)calib_d;
    if (ns < 2 || ns > MAX_SEEDS || ns != seeds_d)
        return mpt_errorf(MPT_ERR_ARG, "--param seeds: expected an integer in [2, %d], found %g", MAX_SEEDS, seeds_d);
    if (calibrate < 1 || calibrate > 1000 || calibrate != calib_d)
        return mpt_errorf(MPT_ERR_ARG, "--param calibrate: expected an integer in [1, 1000], found %g", calib_d);
    MPT_LAB_PARAMS_CHECKED(c);
    const double margin = c->base->margin;

    /* 1. training: every (model, seed) in fp32 and with --qat int4 */
    char seed[MAX_SEEDS][8], name[NM * MAX_SEEDS * 2][40];
    const char *fl[NM * MAX_SEEDS * 2][12];
    mpt_lab_run runs[NM * MAX_SEEDS * 2];
    static mpt_run_result res[NM * MAX_SEEDS * 2];
    int n = 0;
    for (int m = 0; m < NM; m++)
        for (int k = 0; k < ns; k++)
            for (int q = 0; q < 2; q++, n++) {
                snprintf(seed[k], sizeof seed[k], "%d", k);
                snprintf(name[n], sizeof name[n], "%s-%s-seed%d", model_name[m], q ? "qat4" : "fp32", k);
                const char *f[12] = {"--model", model_name[m], "--seed", seed[k], "--qat", q ? "int4" : "none", NULL};
                memcpy(fl[n], f, sizeof f);
                runs[n] = (mpt_lab_run){name[n], fl[n]};
            }
    MPT_TRY(mpt_lab_train_batch(c, runs, n, res));
    for (int i = 0; i < n; i++) mpt_run_result_free(&res[i]);

    /* 2, 3. post-training quantization of every fp32 checkpoint; the QAT checkpoints on their INT4 grid */
    double acc[NM][NC][MAX_SEEDS];
    static mpt_ptq_result seed0[NM][NF + 1]; /* seed 0's results: the layers' errors, the memory */
    char path[MPT_CLI_PATH + 96], run_name[48];
    for (int m = 0; m < NM; m++)
        for (int k = 0; k < ns; k++) {
            for (int f = 0; f <= NF; f++) {
                const int qat = f == NF;
                const mpt_ptq_config q = {.fmt = qat ? MPT_QFORMAT_INT4 : ptq[f].fmt,
                                          .per_channel = qat ? 1 : ptq[f].per_channel,
                                          .act_int8 = qat ? 0 : ptq[f].act_int8, .calibrate = calibrate};
                snprintf(run_name, sizeof run_name, "%s-%s-seed%d", model_name[m], qat ? "qat4" : "fp32", k);
                mpt_ptq_result r;
                MPT_TRY(mpt_ptq_run(checkpoint(c, run_name, path, sizeof path), c->base, c->cd, &q, NULL, &r));
                if (!qat) acc[m][0][k] = 100.0 * r.base_acc; /* the same model and images for every format */
                acc[m][qat ? C_QAT : 1 + f][k] = 100.0 * r.q_acc;
                if (k == 0) seed0[m][f] = r;
            }
        }
    pair pv[NM][NC], qat_vs_ptq[NM];
    mpt_stats_summary sum[NM][NC];
    for (int m = 0; m < NM; m++) {
        for (int col = 0; col < NC; col++) {
            mpt_stats_summarize(acc[m][col], ns, &sum[m][col]);
            if (col > 0) MPT_TRY(pair_of(acc[m][col], acc[m][0], ns, margin, &pv[m][col]));
        }
        MPT_TRY(pair_of(acc[m][C_QAT], acc[m][1 + F_INT4C], ns, margin, &qat_vs_ptq[m]));
    }

    /* 4. gradients against weights: the seed-0 fp32 mlp, one training step on the first batch */
    mpt_ptq_tensors gt;
    MPT_TRY(mpt_ptq_gradients(checkpoint(c, "mlp-fp32-seed0", path, sizeof path), c->base, c->cd, 0, &gt));
    range_stats rw[MPT_PTQ_MAX_LAYERS], rg[MPT_PTQ_MAX_LAYERS];
    mpt_status s = MPT_OK;
    for (int l = 0; l < gt.n && s == MPT_OK; l++) {
        s = range_of(gt.weight[l], gt.numel[l], qmax, &rw[l]);
        if (s == MPT_OK) s = range_of(gt.grad[l], gt.numel[l], qmax, &rg[l]);
    }
    float amax2 = 0.0f, s_rows[2] = {0, 0};
    int64_t hmax = 1;
    double thr[2] = {0, 0};
    const int l2 = gt.n > 1 ? 1 : 0; /* fc2 */
    if (s == MPT_OK) s = write_picture_data(c, gt.weight[l2], gt.grad[l2], gt.numel[l2], gt.channels[l2], qmax, &amax2, &hmax, s_rows, thr);
    const int nl = gt.n;
    char lname[MPT_PTQ_MAX_LAYERS][MPT_NAME_LEN];
    for (int l = 0; l < nl; l++) snprintf(lname[l], sizeof lname[l], "%s", gt.name[l]);
    mpt_ptq_tensors_free(&gt);
    MPT_TRY(s);

    /* criteria */
    int infer_ok = 1, grads_ok = nl > 0;
    for (int m = 0; m < NM; m++)
        infer_ok &= pair_equivalent(&pv[m][1 + F_INT8C], margin) && pair_equivalent(&pv[m][1 + F_W8A8], margin);
    for (int l = 0; l < nl; l++) grads_ok &= rg[l].zero_int >= 0.05 && rg[l].zero_int >= 5.0 * rw[l].zero_int;
    c->observed = infer_ok && grads_ok;

    /* sentences chosen by the numbers */
    char t1[160], t2[160], t3[160], t4[160];
    char infer[1200];
    snprintf(infer, sizeof infer,
             "INT8 weights per channel against fp32 over %d seeds: mlp %s, lenet5 %s; with INT8 activations and exact "
             "integer GEMMs and convolutions too (W8A8): mlp %s, lenet5 %s%s",
             ns, pair_text(&pv[0][1 + F_INT8C], t1, sizeof t1), pair_text(&pv[1][1 + F_INT8C], t2, sizeof t2),
             pair_text(&pv[0][1 + F_W8A8], t3, sizeof t3), pair_text(&pv[1][1 + F_W8A8], t4, sizeof t4),
             infer_ok ? ": within the margin, as inference tolerates integers"
                      : ": not all within the margin, which the lesson does not expect (see the tables)");
    /* QAT against post-training INT4, per model: what the means say, and whether the paired interval decides it */
    char qat_text[2000] = "";
    size_t qk = 0;
    for (int m = 0; m < NM; m++) {
        const pair *lp = &pv[m][1 + F_INT4C], *qp = &qat_vs_ptq[m];
        const double lost = -lp->d.mean, gained = qp->d.mean;
        char a[160], b[160], what[700];
        ci_text(lp, a, sizeof a);
        ci_text(qp, b, sizeof b);
        if (lost <= 0.0)
            snprintf(what, sizeof what, "post-training INT4 lost nothing on average (%+.2f pp; %s), so there was no loss for "
                     "QAT to recover; QAT INT4 against post-training INT4: %+.2f pp (%s)", -lost, a, gained, b);
        else if (gained > 0.0 && qp->have_p && qp->p.lo > 0.0)
            snprintf(what, sizeof what, "post-training INT4 lost %.2f pp (%s); QAT INT4 won %.2f pp of it back (%.0f%%), and "
                     "the paired interval of QAT against post-training INT4 lies above 0 (%s): training on the grid "
                     "recovered accuracy", lost, a, gained, 100.0 * gained / lost, b);
        else if (gained > 0.0)
            snprintf(what, sizeof what, "post-training INT4 lost %.2f pp (%s); QAT INT4 was %.2f pp above it on average (%.0f%% "
                     "of the loss), but the paired interval of QAT against post-training INT4 does not exclude 0 (%s): "
                     "these seeds do not show that QAT recovered anything", lost, a, gained, 100.0 * gained / lost, b);
        else
            snprintf(what, sizeof what, "post-training INT4 lost %.2f pp (%s), and QAT INT4 did not recover it (%+.2f pp "
                     "against post-training INT4; %s): trained on the INT4 grid from the start, it ended no better than "
                     "the fp32 model rounded to it afterwards", lost, a, gained, b);
        qk += (size_t)snprintf(qat_text + qk, sizeof qat_text - qk, "%s%s: %s", m ? "; " : "", model_name[m], what);
    }
    /* the same, short, for the conclusion */
    char qat_short[700];
    {
        char a[2][160], b[2][160];
        snprintf(qat_short, sizeof qat_short, "post-training INT4 per channel against fp32: mlp %s, lenet5 %s; QAT INT4 "
                 "against post-training INT4: mlp %s, lenet5 %s",
                 pair_text(&pv[0][1 + F_INT4C], a[0], sizeof a[0]), pair_text(&pv[1][1 + F_INT4C], a[1], sizeof a[1]),
                 pair_text(&qat_vs_ptq[0], b[0], sizeof b[0]), pair_text(&qat_vs_ptq[1], b[1], sizeof b[1]));
    }
    /* gradients: the layer where the two differ least */
    int lw = 0;
    for (int l = 1; l < nl; l++)
        if (rg[l].zero_int / fmax(rw[l].zero_int, 1e-12) < rg[lw].zero_int / fmax(rw[lw].zero_int, 1e-12)) lw = l;
    char grad_text[900], grad_short[400];
    snprintf(grad_short, sizeof grad_short, "INT%d with the amax scale zeroed %.3g%% of mlp %s's nonzero weight "
             "gradients and %.3g%% of its weights (gradients span %.1f binades, weights %.1f)%s",
             bits, 100.0 * rg[lw].zero_int, lname[lw], 100.0 * rw[lw].zero_int, rg[lw].hi - rg[lw].lo, rw[lw].hi - rw[lw].lo,
             grads_ok ? ": training keeps floating point" : ": not the gap the lesson expects");
    snprintf(grad_text, sizeof grad_text,
             "An INT%d grid with the amax scale made %.3g%% of the nonzero weight gradients of the mlp's %s 0 but "
             "%.3g%% of its weights (the layer where the two were closest); the gradients' middle 98%% spans %.1f "
             "binades, the weights' %.1f, and a uniform grid of %d steps holds about %.0f binades above its zero band. "
             "%s.",
             bits, 100.0 * rg[lw].zero_int, lname[lw], 100.0 * rw[lw].zero_int, rg[lw].hi - rg[lw].lo,
             rw[lw].hi - rw[lw].lo, 2 * qmax + 1, log2(2.0 * qmax),
             grads_ok ? "So training keeps floating point: its gradients need the binades an exponent gives"
                      : "Here the grid did not zero a twentieth of some layer's gradients, or not five times the share "
                        "of its weights: with enough bits (or gradients this narrow) a uniform grid would hold them, which "
                        "the lesson does not expect of INT8");
    snprintf(c->conclusion, sizeof c->conclusion, "%s: %.700s. INT4: %.600s. Gradients: %.390s.",
             c->observed ? "Observed" : "Not observed", infer, qat_short, grad_short);

    /* the picture: the accuracy changes, appended to the data file as block 8 */
    {
        char dpath[MPT_CLI_PATH + 32];
        snprintf(dpath, sizeof dpath, "%s/quantization.dat", c->dir);
        FILE *df = fopen(dpath, "a");
        if (!df) return mpt_errorf(MPT_ERR_IO, "%s: cannot append", dpath);
        fprintf(df, "\n\n# column, then per model: mean paired difference to fp32 (pp), 95%% CI low, high (the mean "
                    "without GSL)\n");
        for (int col = 1; col < NC; col++) {
            fprintf(df, "%d", col);
            for (int m = 0; m < NM; m++) {
                const pair *p = &pv[m][col];
                fprintf(df, " %.4f %.4f %.4f", p->d.mean, p->have_p ? p->p.lo : p->d.mean, p->have_p ? p->p.hi : p->d.mean);
            }
            fprintf(df, "\n");
        }
        MPT_TRY(mpt_outdir_close_written(df, dpath));
    }
    FILE *gp = mpt_lab_open(c, "quantization.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1200, 1200, "quantization.png");
    fprintf(gp, "set multiplot layout 3,2 title \"seed-0 mlp, fc2: its weights (bars) and each grid (lines); the weights' "
                "and gradients' magnitudes; accuracy against fp32\"\nset grid\nset key top right\n"
                "set style fill transparent solid 0.6 noborder\nset xlabel 'weight value'\nset ylabel 'weights per bin'\n"
                "set xrange [%g:%g]\nset yrange [0:%lld]\n",
            -1.05 * amax2, 1.05 * amax2, (long long)(hmax + hmax / 8 + 1));
    static const struct { const char *title; int block; } panel[4] = {
        {"BF16, no scale (256 values per binade: a band)", 1},
        {"FP8 E4M3, s = amax / 448 per tensor", 2},
        {"INT8, s = amax / 127 per tensor", 3},
        {"INT4 per channel: smallest-amax row (red), largest (green)", 4},
    };
    for (int i = 0; i < 4; i++) {
        const long long top = (long long)(hmax + hmax / 8);
        fprintf(gp, "set title '%s'\nplot 'quantization.dat' index %d using 1:(0):(0):(%lld) with vectors nohead "
                    "lc rgb '#90cc3311' notitle", panel[i].title, panel[i].block, top);
        if (i == 3) fprintf(gp, ", '' index 5 using 1:(0):(0):(%lld) with vectors nohead lc rgb '#60117733' notitle", top);
        fprintf(gp, ", '' index 0 using 1:2 with boxes lc rgb '#4477aa' title 'fc2 weights'\n");
    }
    fprintf(gp, "set xrange [*:*]\nset yrange [*:*]\nset xlabel 'log2 |x|'\nset ylabel 'share of the tensor (%%)'\n"
                "set title 'log2 magnitudes; dashed: INT%d zeroes what lies left'\n"
                "set arrow 1 from %g, graph 0 to %g, graph 1 nohead lc rgb '#4477aa' dt 2\n"
                "set arrow 2 from %g, graph 0 to %g, graph 1 nohead lc rgb '#cc3311' dt 2\n"
                "plot 'quantization.dat' index 6 using ($1 + 0.25):2 with histeps lw 2 lc rgb '#4477aa' title 'weights', "
                "'' index 7 using ($1 + 0.25):2 with histeps lw 2 lc rgb '#cc3311' title 'gradients (one step)'\n"
                "unset arrow\nset title 'test accuracy against fp32, mean paired difference and 95%% CI'\n"
                "set xlabel ''\nset ylabel 'pp'\nset xrange [0.5:%d.5]\nset xtics rotate by -30 ("
                "'BF16' 1, 'E4M3/t' 2, 'INT8/t' 3, 'INT8/c' 4, 'INT4/c' 5, 'W8A8' 6, 'QAT INT4' 7)\n"
                "plot 'quantization.dat' index 8 using ($1 - 0.1):2:3:4 with yerrorbars pt 7 lc rgb '#4477aa' title 'mlp', "
                "'' index 8 using ($1 + 0.1):5:6:7 with yerrorbars pt 5 lc rgb '#cc3311' title 'lenet5', 0 lc rgb 'black' "
                "notitle\nunset multiplot\n",
            bits, thr[0], thr[0], thr[1], thr[1], NC - 1);
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "quantization.gp", plot_buf, sizeof plot_buf);

    /* the report */
    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_quantization, &f));
    fprintf(f, "INT8 and INT4 have no exponent: one scale s sets a uniform grid, q = clamp(round_half_even(x / s), -qmax, "
               "qmax) stands for q s (qmax 127 or 7; `mptrain formats` shows any value). With s = amax / qmax from the "
               "tensor's (or one output channel's) largest magnitude nothing clamps, every value moves by at most s / 2, "
               "and values below s / 2 become 0. FP8 E4M3 with a scale is here for comparison, and BF16, which needs no "
               "scale. Inference reads weights that no longer change and activations whose range a few batches show; "
               "training must also represent gradients. This lesson quantizes trained networks after training "
               "(`mptrain eval --quantize`), trains them on the INT4 grid (`mptrain train --qat int4`), and measures "
               "how far gradients and weights spread.\n\n");
    static const char *const col_name[NC] = {"fp32", "BF16", "E4M3/t", "INT8/t", "INT8/c", "INT4/c", "W8A8", "QAT INT4"};
    for (int m = 0; m < NM; m++) {
        fprintf(f, "## %s: test accuracy (%%)\n\n| seed |", model_name[m]);
        for (int col = 0; col < NC; col++) fprintf(f, " %s |", col_name[col]);
        fprintf(f, "\n|---:|");
        for (int col = 0; col < NC; col++) fprintf(f, "---:|");
        fprintf(f, "\n");
        for (int k = 0; k < ns; k++) {
            fprintf(f, "| %d |", k);
            for (int col = 0; col < NC; col++) fprintf(f, " %.2f |", acc[m][col][k]);
            fprintf(f, "\n");
        }
        fprintf(f, "| mean |");
        for (int col = 0; col < NC; col++) fprintf(f, " %.2f |", sum[m][col].mean);
        fprintf(f, "\n\n| against fp32 (same seed) | mean paired difference | sd of the differences | 95%% CI | verdict "
                   "(margin ±%.2g pp) |\n|---|---:|---:|---:|---|\n", margin);
        for (int col = 1; col < NC; col++) {
            const pair *p = &pv[m][col];
            const char *label = col == C_QAT ? "QAT INT4 (trained on the grid)" : ptq[col - 1].label;
            if (p->have_p)
                fprintf(f, "| %s | %+.2f pp | %.2f pp | %+.2f..%+.2f | %s |\n", label, p->p.mean, p->d.sd, p->p.lo,
                        p->p.hi, mpt_verdict_name(p->p.verdict));
            else fprintf(f, "| %s | %+.2f pp | %.2f pp | - | (needs GSL) |\n", label, p->d.mean, p->d.sd);
        }
        const pair *qp = &qat_vs_ptq[m];
        if (qp->have_p)
            fprintf(f, "| QAT INT4 against post-training INT4 | %+.2f pp | %.2f pp | %+.2f..%+.2f | %s |\n", qp->p.mean,
                    qp->d.sd, qp->p.lo, qp->p.hi, mpt_verdict_name(qp->p.verdict));
        else fprintf(f, "| QAT INT4 against post-training INT4 | %+.2f pp | %.2f pp | - | (needs GSL) |\n", qp->d.mean, qp->d.sd);
        const mpt_ptq_result *r4 = &seed0[m][F_INT4C], *r8 = &seed0[m][F_INT8C];
        fprintf(f, "\nWeights' memory (%s's linear and conv weights): %.1f KiB in FP32, %.1f KiB in INT8 and %.1f KiB in "
                   "INT4 (two codes per byte, as stored), plus %.1f KiB of FP32 scales per channel; the biases (%.1f KiB) "
                   "stay FP32.\n\n",
                model_name[m], r8->bytes_fp32 / 1024.0, r8->bytes_q / 1024.0, r4->bytes_q / 1024.0,
                r8->bytes_scales / 1024.0, r8->bytes_bias / 1024.0);
        fprintf(f, "Errors per layer, seed 0: the weights' relative L2 error against the FP32 masters / each layer "
                   "output's against the unquantized model on the same %lld test images (earlier layers' errors "
                   "included).\n\n| layer |", (long long)seed0[m][0].n_test);
        for (int q = 0; q <= NF; q++) fprintf(f, " %s |", q == NF ? "QAT INT4" : col_name[1 + q]);
        fprintf(f, "\n|---|");
        for (int q = 0; q <= NF; q++) fprintf(f, "---:|");
        fprintf(f, "\n");
        for (int l = 0; l < seed0[m][0].n_layers; l++) {
            fprintf(f, "| %s |", seed0[m][0].layer[l].name);
            for (int q = 0; q <= NF; q++)
                fprintf(f, " %.1e / %.1e |", seed0[m][q].layer[l].weight_rel_l2, seed0[m][q].layer[l].out_rel_l2);
            fprintf(f, "\n");
        }
        fprintf(f, "\n(For QAT INT4 the weight error is the trained masters' against their own INT4 grid, and the "
                   "output error 0: the reference model of a QAT checkpoint already reads that grid.)\n\n");
    }
    fprintf(f, "## INT4 and quantization-aware training\n\n%s.\n\n", qat_text);
    fprintf(f, "## Why training keeps floating point\n\nThe seed-0 fp32 mlp, one training step on the first batch: per "
               "layer, the binades between the 1st and 99th percentile of the nonzero magnitudes, and the share of the "
               "nonzero values each format makes 0 with one scale per tensor from the tensor's own amax.\n\n"
               "| layer | tensor | amax | binades (p1..p99) | INT%d zeroes | E4M3 zeroes | BF16 zeroes |\n"
               "|---|---|---:|---:|---:|---:|---:|\n", bits);
    for (int l = 0; l < nl; l++) {
        const range_stats *r[2] = {&rw[l], &rg[l]};
        for (int k = 0; k < 2; k++)
            fprintf(f, "| %s | %s | %.3g | %.1f (2^%.1f..2^%.1f) | %.3g%% | %.3g%% | %.3g%% |\n", lname[l],
                    k ? "gradient" : "weights", (double)r[k]->amax, r[k]->hi - r[k]->lo, r[k]->lo, r[k]->hi,
                    100.0 * r[k]->zero_int, 100.0 * r[k]->zero_e4m3, 100.0 * r[k]->zero_bf16);
    }
    double wmin = INFINITY, wmax = 0.0, gmin = INFINITY, gmax = 0.0; /* the spans over the layers */
    for (int l = 0; l < nl; l++) {
        wmin = fmin(wmin, rw[l].hi - rw[l].lo), wmax = fmax(wmax, rw[l].hi - rw[l].lo);
        gmin = fmin(gmin, rg[l].hi - rg[l].lo), gmax = fmax(gmax, rg[l].hi - rg[l].lo);
    }
    const double grid = log2(2.0 * qmax);
    fprintf(f, "\nA uniform grid of step s = amax / %d holds magnitudes from s / 2 to amax, log2(%d) = %.1f binades; "
               "E4M3's scaled grid reaches 2^17 below amax, and BF16 needs no scale (its range is FP32's, 2^-133 to "
               "2^128). The middle 98%% of the weights' magnitudes spans %.1f to %.1f binades per layer, %s the grid's "
               "%.1f; one step's gradients span %.1f to %.1f, %s. %s\n\n",
            qmax, 2 * qmax, grid, wmin, wmax, wmax <= grid + 0.5 ? "about as many as or fewer than" : "more than", grid,
            gmin, gmax, gmin > grid + 2.0 ? "far more: each of them multiplies an output's error by an input's activation, "
                                           "and both spread" : "not far more here", grad_text);
    fprintf(f, "The picture: fc2's weights (seed-0 mlp) with each format's grid under them (INT4 for the channels with "
               "the smallest and the largest amax, s = %.3g and %.3g; grid points below amax / 256 left out), and the "
               "log2 magnitudes of fc2's weights and gradients with each one's INT8 zero line (s / 2).\n\n",
            (double)s_rows[0], (double)s_rows[1]);
    fprintf(f, "Criterion for the effect: (a) INT8 per channel and W8A8 equivalent to fp32 within ±%.2g pp (the paired "
               "interval's verdict; without GSL the mean paired difference) on both models; (b) on every mlp layer the "
               "INT%d grid (`--param grad_bits`) zeroes at least 5%% of the nonzero weight gradients (a twentieth of "
               "them lost) and at least five times the share of weights it zeroes (the gradients' spread, not the grid "
               "alone). INT4 and QAT are reported with their verdicts, not made a criterion.\n",
            margin, bits);
    return mpt_lab_report_close(c, &mpt_lab_quantization, f, plot_error);
}

const mpt_lab_lesson mpt_lab_quantization = {
    "quantization",
    "Do trained networks keep their accuracy with INT8 weights and activations (exact integer GEMMs); what does INT4 "
    "cost, and does quantization-aware training win it back; and what would an INT8 grid do to the gradients, "
    "whose binades training needs?",
    "seeds=N (2..8; default: the lesson's size), calibrate=N (training batches for the INT8 activations' scales, "
    "default 4), grad_bits=B (the integer grid the gradients are measured against, 2..16, default 8)",
    run,
    {60000, 10000, 2, 3}, /* full */
    {12000, 5000, 1, 3},  /* --quick */
    "seeds calibrate grad_bits",
    "full 148 s of CPU time (4 min 48 s wall at a load average of 7.1 to 8.9), --quick 28 s (70 s wall); 2-core VM, "
    "2026-11-28",
};
