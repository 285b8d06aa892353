/*
 * kernels/cpu/norm.c - the CPU backend's normalisation kernels: batch norm and layer norm, forward and backward.
 *
 * Contracts (shapes, FP32 statistics and parameters, padding rows, += accumulation): engine/backend.h,
 * mpt_norm_args. Activations are widened exactly to FP32 in chunks on the stack; every statistic, the normalisation
 * and the affine transform are FP32 with the per-element functions of engine/numerics.h (mpt_elem_norm,
 * mpt_elem_norm_dx, mpt_elem_sq_dev, mpt_elem_rstd, mpt_elem_running), and each output is rounded once to its dtype.
 *
 * Sums (FP32, fixed order on one thread): batch norm sums each row's part of a channel (S elements, sequentially)
 * and then adds the rows' parts in row order; layer norm sums a row's features in chunks of EW_CHUNK and adds the
 * chunks' parts in order. The error of such a blocked sum of n = a b terms is at most (a + b) u sum |terms| (Higham
 * 2002, section 4.2), against n u for one running sum. Channels (batch norm) and rows (layer norm) are independent,
 * so they are split over the OpenMP threads without changing a bit (kernels/cpu/parallel.h); layer norm's parameter
 * gradients (sums over the rows) stay on one thread.
 * Variance: two passes (the mean, then the sum of squared deviations, each square through fmaf), as cuDNN and PyTorch
 * compute it, never E[x^2] - E[x]^2 (Chan, Golub & LeVeque 1983: catastrophic cancellation when |mean| >> sd).
 * The ablations of --norm-stats (mpt_norm_args.stat_dtype, one_pass: 16-bit arithmetic, the one-pass formula) take
 * the same elements in the same order with every result rounded to the row's format (ablation_stats below); they are
 * what `mptrain lab normalization` trains against the policy's FP32 statistics.
 */
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

enum { NORM_CHUNK = 512 };

static const void *norm_at(const void *p, mpt_dtype t, int64_t i) {
    return (const char *)p + (size_t)i * mpt_dtype_size(t);
}

static int row_valid(const int32_t *labels, int64_t r) { return !labels || labels[r] >= 0; }

/* ---- the ablation rows of --norm-stats (engine/backend.h, mpt_norm_args.stat_dtype and one_pass) --------------- */

_Static_assert(MPT_DTYPE_F32 == 0 && MPT_DTYPE_F16 == 1 && MPT_DTYPE_BF16 == 2,
               "mpt_elem_stat_round takes mpt_dtype's values");

static int is_ablation(const mpt_norm_args *a) { return a->stat_dtype != MPT_DTYPE_F32 || a->one_pass; }

enum { TERM_X, TERM_X2, TERM_DEV2 }; /* the terms of s1, s2 (one pass) and sq (two passes) */

static float stat_term(float x, int term, float mean, int fmt) {
    if (term == TERM_X) return x;
    const float d = term == TERM_DEV2 ? mpt_elem_stat_round(x - mean, fmt) : x;
    return mpt_elem_stat_round(d * d, fmt);
}

/* Batch norm, channel c: the sum of the terms over the valid rows, each row's part first, every addition rounded. */
static float bn_channel_sum_in(const mpt_norm_args *a, int64_t c, int term, float mean) {
    const int fmt = (int)a->stat_dtype;
    float total = 0.0f, buf[NORM_CHUNK];
    for (int64_t r = 0; r < a->N; r++) {
        if (!row_valid(a->labels, r)) continue;
        float part = 0.0f;
        const int64_t base = (r * a->C + c) * a->S;
        for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
            const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
            mpt_cpu_widen(buf, norm_at(a->x, a->dtype, base + s0), a->dtype, m);
            for (int64_t k = 0; k < m; k++) part = mpt_elem_stat_round(part + stat_term(buf[k], term, mean, fmt), fmt);
        }
        total = mpt_elem_stat_round(total + part, fmt);
    }
    return total;
}

/* Layer norm, row r: the sum of the terms over its features, chunk by chunk, every addition rounded. */
static float ln_row_sum_in(const mpt_norm_args *a, int64_t r, int term, float mean) {
    const int fmt = (int)a->stat_dtype;
    float total = 0.0f, buf[NORM_CHUNK];
    for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
        const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
        mpt_cpu_widen(buf, norm_at(a->x, a->dtype, r * a->S + s0), a->dtype, m);
        float part = 0.0f;
        for (int64_t k = 0; k < m; k++) part = mpt_elem_stat_round(part + stat_term(buf[k], term, mean, fmt), fmt);
        total = mpt_elem_stat_round(total + part, fmt);
    }
    return total;
}

/* Mean and (biased) variance of channel or row i over n elements by the ablation's rule. */
static void ablation_stats(const mpt_norm_args *a, float (*sum)(const mpt_norm_args *, int64_t, int, float), int64_t i,
                           float n, float *mean, float *var) {
    const int fmt = (int)a->stat_dtype;
    const float m = mpt_elem_stat_round(sum(a, i, TERM_X, 0.0f) / n, fmt);
    float v;
    if (a->one_pass) {
        const float ex2 = mpt_elem_stat_round(sum(a, i, TERM_X2, 0.0f) / n, fmt);
        v = mpt_elem_stat_round(ex2 - mpt_elem_stat_round(m * m, fmt), fmt);
        if (v < 0.0f) v = 0.0f; /* the clamp of the one-pass formula; a NaN stays NaN */
    } else {
        v = mpt_elem_stat_round(sum(a, i, TERM_DEV2, m) / n, fmt);
    }
    *mean = m;
    *var = v;
}

/* part plus, in order, f(x) over the m elements of x from element i, where f is x (square = 0) or (x - mean)^2
 * (square = 1, one fmaf each: mpt_elem_sq_dev); m <= NORM_CHUNK. */
static float norm_chunk_sum(const mpt_norm_args *a, int64_t i, int64_t m, int square, float mean, float part) {
    float buf[NORM_CHUNK];
    mpt_cpu_widen(buf, norm_at(a->x, a->dtype, i), a->dtype, m);
    if (square)
        for (int64_t k = 0; k < m; k++) part = mpt_elem_sq_dev(part, buf[k], mean);
    else
        for (int64_t k = 0; k < m; k++) part += buf[k];
    return part;
}

/* ---- batch norm ------------------------------------------------------------------------------------------- */

/* Sum over the valid rows of channel c of f(x) where f is x (square = 0) or (x - mean)^2 (square = 1). */
static float bn_channel_sum(const mpt_norm_args *a, int64_t c, int square, float mean) {
    float total = 0.0f;
    for (int64_t r = 0; r < a->N; r++) {
        if (!row_valid(a->labels, r)) continue;
        float part = 0.0f; /* one running sum over the row's S elements */
        const int64_t base = (r * a->C + c) * a->S;
        for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
            const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
            part = norm_chunk_sum(a, base + s0, m, square, mean, part);
        }
        total += part;
    }
    return total;
}

void mpt_cpu_batchnorm_forward(mpt_backend *be, const mpt_norm_args *a) {
    (void)be;
    mpt_norm_args_check(a, "batchnorm_forward", 0);
    int64_t valid = 0;
    for (int64_t r = 0; r < a->N; r++) valid += row_valid(a->labels, r);
    const int64_t n = valid * a->S;
    MPT_OMP(omp parallel for schedule(static) if (a->N * a->C * a->S >= MPT_PAR_MIN))
    for (int64_t c = 0; c < a->C; c++) {
        float mean, rstd;
        if (a->training && is_ablation(a)) {
            float var = 0.0f;
            mean = 0.0f;
            if (n > 0) ablation_stats(a, bn_channel_sum_in, c, (float)n, &mean, &var);
            rstd = mpt_elem_stat_round(mpt_elem_rstd(var, a->eps), (int)a->stat_dtype);
            a->mean[c] = mean;
            a->rstd[c] = rstd;
            if (n > 0) {
                const float unbiased = n > 1 ? var * ((float)n / (float)(n - 1)) : var;
                a->running_mean[c] = mpt_elem_running(a->running_mean[c], mean, a->momentum);
                a->running_var[c] = mpt_elem_running(a->running_var[c], unbiased, a->momentum);
            }
        } else if (a->training) {
            mean = n > 0 ? bn_channel_sum(a, c, 0, 0.0f) / (float)n : 0.0f;
            const float sq = n > 0 ? bn_channel_sum(a, c, 1, mean) : 0.0f;
            const float var = n > 0 ? sq / (float)n : 0.0f;
            rstd = mpt_elem_rstd(var, a->eps);
            a->mean[c] = mean;
            a->rstd[c] = rstd;
            if (n > 0) { /* the running variance takes the unbiased estimate (n = 1: the biased one, 0) */
                const float unbiased = n > 1 ? sq / (float)(n - 1) : var;
                a->running_mean[c] = mpt_elem_running(a->running_mean[c], mean, a->momentum);
                a->running_var[c] = mpt_elem_running(a->running_var[c], unbiased, a->momentum);
            }
        } else {
            mean = a->running_mean[c];
            rstd = mpt_elem_rstd(a->running_var[c], a->eps);
        }
        const float gm = a->gamma[c], bt = a->beta[c];
        float buf[NORM_CHUNK];
        for (int64_t r = 0; r < a->N; r++) {
            const int64_t base = (r * a->C + c) * a->S;
            for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
                const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
                mpt_cpu_widen(buf, norm_at(a->x, a->dtype, base + s0), a->dtype, m);
                for (int64_t k = 0; k < m; k++) buf[k] = mpt_elem_norm(buf[k], mean, rstd, gm, bt);
                mpt_cpu_narrow((void *)norm_at(a->y, a->dtype, base + s0), a->dtype, buf, m);
            }
        }
    }
}

void mpt_cpu_batchnorm_backward(mpt_backend *be, const mpt_norm_args *a) {
    (void)be;
    mpt_norm_args_check(a, "batchnorm_backward", 1);
    MPT_ASSERTF(a->training, "batchnorm_backward: defined for training passes only (%s)", a->tag ? a->tag : "");
    int64_t valid = 0;
    for (int64_t r = 0; r < a->N; r++) valid += row_valid(a->labels, r);
    const float fn = (float)(valid * a->S);
    MPT_OMP(omp parallel for schedule(static) if (a->N * a->C * a->S >= MPT_PAR_MIN))
    for (int64_t c = 0; c < a->C; c++) {
        const float mean = a->mean[c], rstd = a->rstd[c];
        float sum_dy = 0.0f, sum_dyx = 0.0f, xb[NORM_CHUNK], gb[NORM_CHUNK];
        for (int64_t r = 0; r < a->N; r++) {
            if (!row_valid(a->labels, r)) continue;
            float p_dy = 0.0f, p_dyx = 0.0f;
            const int64_t base = (r * a->C + c) * a->S;
            for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
                const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
                mpt_cpu_widen(xb, norm_at(a->x, a->dtype, base + s0), a->dtype, m);
                mpt_cpu_widen(gb, norm_at(a->dy, a->dtype, base + s0), a->dtype, m);
                for (int64_t k = 0; k < m; k++) {
                    p_dy += gb[k];
                    p_dyx = fmaf(gb[k], (xb[k] - mean) * rstd, p_dyx);
                }
            }
            sum_dy += p_dy;
            sum_dyx += p_dyx;
        }
        a->dbeta[c] = a->accumulate_params ? a->dbeta[c] + sum_dy : sum_dy;
        a->dgamma[c] = a->accumulate_params ? a->dgamma[c] + sum_dyx : sum_dyx;
        const float mean_dy = fn > 0.0f ? sum_dy / fn : 0.0f, mean_dyx = fn > 0.0f ? sum_dyx / fn : 0.0f;
        const float scale = a->gamma[c] * rstd;
        for (int64_t r = 0; a->dx && r < a->N; r++) { /* dx NULL: the input has no gradient */
            const int64_t base = (r * a->C + c) * a->S;
            const int ok = row_valid(a->labels, r);
            for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
                const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
                if (ok) {
                    mpt_cpu_widen(xb, norm_at(a->x, a->dtype, base + s0), a->dtype, m);
                    mpt_cpu_widen(gb, norm_at(a->dy, a->dtype, base + s0), a->dtype, m);
                    for (int64_t k = 0; k < m; k++)
                        gb[k] = mpt_elem_norm_dx(gb[k], (xb[k] - mean) * rstd, mean_dy, mean_dyx, scale);
                } else {
                    for (int64_t k = 0; k < m; k++) gb[k] = 0.0f; /* a padding row passes no gradient */
                }
                mpt_cpu_accumulate((void *)norm_at(a->dx, a->dtype, base + s0), a->dtype, gb, m, a->accumulate);
            }
        }
    }
}

/* ---- layer norm ------------------------------------------------------------------------------------------- */

/* Blocked FP32 sum over row r's S features of x (square = 0) or of (x - mean)^2 (square = 1). */
static float ln_row_sum(const mpt_norm_args *a, int64_t r, int square, float mean) {
    float total = 0.0f;
    for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
        const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
        total += norm_chunk_sum(a, r * a->S + s0, m, square, mean, 0.0f); /* a sum per chunk, then the chunks' */
    }
    return total;
}

void mpt_cpu_layernorm_forward(mpt_backend *be, const mpt_norm_args *a) {
    (void)be;
    mpt_norm_args_check(a, "layernorm_forward", 0);
    const float fs = (float)a->S;
    MPT_OMP(omp parallel for schedule(static) if (a->N * a->S >= MPT_PAR_MIN))
    for (int64_t r = 0; r < a->N; r++) {
        float mean, rstd;
        if (is_ablation(a)) {
            float var;
            ablation_stats(a, ln_row_sum_in, r, fs, &mean, &var);
            rstd = mpt_elem_stat_round(mpt_elem_rstd(var, a->eps), (int)a->stat_dtype);
        } else {
            mean = ln_row_sum(a, r, 0, 0.0f) / fs;
            rstd = mpt_elem_rstd(ln_row_sum(a, r, 1, mean) / fs, a->eps);
        }
        a->mean[r] = mean;
        a->rstd[r] = rstd;
        float buf[NORM_CHUNK];
        for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
            const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
            mpt_cpu_widen(buf, norm_at(a->x, a->dtype, r * a->S + s0), a->dtype, m);
            for (int64_t k = 0; k < m; k++)
                buf[k] = mpt_elem_norm(buf[k], mean, rstd, a->gamma[s0 + k], a->beta[s0 + k]);
            mpt_cpu_narrow((void *)norm_at(a->y, a->dtype, r * a->S + s0), a->dtype, buf, m);
        }
    }
}

void mpt_cpu_layernorm_backward(mpt_backend *be, const mpt_norm_args *a) {
    mpt_norm_args_check(a, "layernorm_backward", 1);
    const float fs = (float)a->S;
    /* dx, row by row (none when dx is NULL: the input has no gradient) */
    MPT_OMP(omp parallel for schedule(static) if (a->dx && a->N * a->S >= MPT_PAR_MIN))
    for (int64_t r = 0; r < (a->dx ? a->N : 0); r++) {
        const float mean = a->mean[r], rstd = a->rstd[r];
        float xb[NORM_CHUNK], gb[NORM_CHUNK], sum_g = 0.0f, sum_gx = 0.0f;
        for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
            const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
            mpt_cpu_widen(xb, norm_at(a->x, a->dtype, r * a->S + s0), a->dtype, m);
            mpt_cpu_widen(gb, norm_at(a->dy, a->dtype, r * a->S + s0), a->dtype, m);
            float p_g = 0.0f, p_gx = 0.0f;
            for (int64_t k = 0; k < m; k++) {
                const float gk = gb[k] * a->gamma[s0 + k];
                p_g += gk;
                p_gx = fmaf(gk, (xb[k] - mean) * rstd, p_gx);
            }
            sum_g += p_g;
            sum_gx += p_gx;
        }
        const float mean_g = sum_g / fs, mean_gx = sum_gx / fs;
        for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
            const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
            mpt_cpu_widen(xb, norm_at(a->x, a->dtype, r * a->S + s0), a->dtype, m);
            mpt_cpu_widen(gb, norm_at(a->dy, a->dtype, r * a->S + s0), a->dtype, m);
            for (int64_t k = 0; k < m; k++)
                gb[k] = mpt_elem_norm_dx(gb[k] * a->gamma[s0 + k], (xb[k] - mean) * rstd, mean_g, mean_gx, rstd);
            mpt_cpu_accumulate((void *)norm_at(a->dx, a->dtype, r * a->S + s0), a->dtype, gb, m, a->accumulate);
        }
    }
    /* dgamma, dbeta: per feature, the rows in order (one thread; the batch sums go to the workspace, then one
     * addition into the gradients: old + sum rounded once, as every accumulating write) */
    MPT_ASSERTF(be->workspace_bytes >= (size_t)(2 * a->S) * sizeof(float),
                "layernorm_backward: needs %zu bytes of workspace, has %zu", (size_t)(2 * a->S) * sizeof(float),
                be->workspace_bytes);
    float *sg = be->workspace, *sb = sg + a->S;
    memset(sg, 0, (size_t)(2 * a->S) * sizeof(float));
    float xb[NORM_CHUNK], gb[NORM_CHUNK];
    for (int64_t r = 0; r < a->N; r++) {
        const float mean = a->mean[r], rstd = a->rstd[r];
        for (int64_t s0 = 0; s0 < a->S; s0 += NORM_CHUNK) {
            const int64_t m = a->S - s0 < NORM_CHUNK ? a->S - s0 : NORM_CHUNK;
            mpt_cpu_widen(xb, norm_at(a->x, a->dtype, r * a->S + s0), a->dtype, m);
            mpt_cpu_widen(gb, norm_at(a->dy, a->dtype, r * a->S + s0), a->dtype, m);
            for (int64_t k = 0; k < m; k++) {
                sb[s0 + k] += gb[k];
                sg[s0 + k] = fmaf(gb[k], (xb[k] - mean) * rstd, sg[s0 + k]);
            }
        }
    }
    for (int64_t j = 0; j < a->S; j++) {
        a->dgamma[j] = a->accumulate_params ? a->dgamma[j] + sg[j] : sg[j];
        a->dbeta[j] = a->accumulate_params ? a->dbeta[j] + sb[j] : sb[j];
    }
}
