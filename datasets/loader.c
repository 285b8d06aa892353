/*
 * datasets/loader.c - validation split, standardisation statistics, per-epoch shuffles and batches of row
 * indices. Semantics and seeds: datasets/loader.h.
 */
#include "datasets/loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

mpt_status mpt_loader_split_make(mpt_loader_split *out, int64_t n, int64_t n_val, uint64_t seed) {
    MPT_ASSERT(out != NULL);
    memset(out, 0, sizeof *out);
    if (n < 1 || n > INT32_MAX)
        return mpt_errorf(MPT_ERR_ARG, "validation split: expected 1 to %d training examples, found %lld", INT32_MAX,
                          (long long)n);
    if (n_val < 0 || n_val >= n)
        return mpt_errorf(MPT_ERR_ARG, "validation split: expected 0 <= validation size < %lld (the training set), "
                          "found %lld", (long long)n, (long long)n_val);
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    float *scratch = n_val > 0 ? malloc((size_t)n * sizeof *scratch) : NULL;
    int32_t *train = malloc((size_t)(n - n_val) * sizeof *train);
    int32_t *val = n_val > 0 ? malloc((size_t)n_val * sizeof *val) : NULL;
    if (!perm || !train || (n_val > 0 && (!scratch || !val))) {
        free(perm), free(scratch), free(train), free(val);
        return mpt_errorf(MPT_ERR_NOMEM, "validation split: cannot allocate index lists for %lld examples",
                          (long long)n);
    }
    for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
    if (n_val > 0) {
        mpt_rng_shuffle(perm, (size_t)n, scratch, mpt_rng_stream_seed(seed, MPT_RNG_SPLIT), 0);
        memcpy(val, perm, (size_t)n_val * sizeof *val);
        qsort(val, (size_t)n_val, sizeof *val, cmp_i32);
        memcpy(train, perm + n_val, (size_t)(n - n_val) * sizeof *train);
        qsort(train, (size_t)(n - n_val), sizeof *train, cmp_i32);
    } else {
        memcpy(train, perm, (size_t)n * sizeof *train);
    }
    free(perm);
    free(scratch);
    out->train = train;
    out->n_train = n - n_val;
    out->val = val;
    out->n_val = n_val;
    return MPT_OK;
}

void mpt_loader_split_free(mpt_loader_split *s) {
    if (!s) return;
    free(s->train);
    free(s->val);
    memset(s, 0, sizeof *s);
}

void mpt_loader_stats(const uint8_t *images, int64_t D, const int32_t *rows, int64_t n, float *mean,
                      float *inv_std) {
    MPT_ASSERT(images && D > 0 && n > 0 && mean && inv_std);
    /* Exact integer sums of bytes and squared bytes (n * D * 255^2 < 2^63 for any realistic dataset), so the
     * only rounding is in the final FP64 division: the statistics do not depend on the row order. */
    uint64_t s1 = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *x = images + (int64_t)(rows ? rows[i] : i) * D;
        uint64_t r1 = 0, r2 = 0;
        for (int64_t p = 0; p < D; p++) {
            r1 += x[p];
            r2 += (uint32_t)x[p] * x[p];
        }
        s1 += r1;
        s2 += r2;
    }
    double cnt = (double)n * (double)D;
    double m = (double)s1 / cnt / 255.0;
    double var = (double)s2 / cnt / (255.0 * 255.0) - m * m;
    *mean = (float)m;
    *inv_std = var < 1e-12 ? 1.0f : (float)(1.0 / sqrt(var));
}

mpt_status mpt_loader_init(mpt_loader *l, const int32_t *rows, int64_t n, int B, mpt_loader_last last,
                           int shuffle, uint64_t seed) {
    MPT_ASSERT(l != NULL);
    MPT_ASSERT(last == MPT_LOADER_DROP_LAST || last == MPT_LOADER_PAD_WRAP || last == MPT_LOADER_PAD_IGNORE);
    memset(l, 0, sizeof *l);
    if (n < 1 || n > INT32_MAX)
        return mpt_errorf(MPT_ERR_ARG, "loader: expected 1 to %d examples, found %lld", INT32_MAX, (long long)n);
    if (B < 1) return mpt_errorf(MPT_ERR_ARG, "loader: expected a batch size >= 1, found %d", B);
    if (last == MPT_LOADER_DROP_LAST && n < B)
        return mpt_errorf(MPT_ERR_ARG,
                          "loader: batch size %d is larger than the %lld examples and the last partial batch is "
                          "dropped, so an epoch would have no batch; expected a batch size <= %lld",
                          B, (long long)n, (long long)n);
    l->rows = malloc((size_t)n * sizeof *l->rows);
    l->order = malloc((size_t)n * sizeof *l->order);
    l->scratch = shuffle ? malloc((size_t)n * sizeof *l->scratch) : NULL;
    if (!l->rows || !l->order || (shuffle && !l->scratch)) {
        mpt_loader_free(l);
        return mpt_errorf(MPT_ERR_NOMEM, "loader: cannot allocate index lists for %lld examples", (long long)n);
    }
    for (int64_t i = 0; i < n; i++) l->rows[i] = rows ? rows[i] : (int32_t)i;
    l->n = n;
    l->B = B;
    l->last = last;
    l->shuffle = shuffle;
    l->seed = seed;
    l->epoch = -1;
    l->pos = n; /* exhausted until an epoch starts */
    return MPT_OK;
}

void mpt_loader_free(mpt_loader *l) {
    if (!l) return;
    free(l->rows);
    free(l->order);
    free(l->scratch);
    memset(l, 0, sizeof *l);
}

int64_t mpt_loader_n_batches(const mpt_loader *l) {
    return l->last == MPT_LOADER_DROP_LAST ? l->n / l->B : (l->n + l->B - 1) / l->B;
}

void mpt_loader_start_epoch(mpt_loader *l, int64_t epoch) {
    MPT_ASSERT(l->rows != NULL && epoch >= 0);
    for (int64_t i = 0; i < l->n; i++) l->order[i] = (int32_t)i;
    if (l->shuffle)
        mpt_rng_shuffle(l->order, (size_t)l->n, l->scratch, mpt_rng_stream_seed(l->seed, MPT_RNG_SHUFFLE),
                        (uint64_t)epoch * (uint64_t)l->n);
    l->epoch = epoch;
    l->pos = 0;
}

int mpt_loader_next(mpt_loader *l, int32_t *idx, int *n_valid) {
    int64_t left = l->n - l->pos;
    if (left <= 0 || (l->last == MPT_LOADER_DROP_LAST && left < l->B)) return 0;
    int valid = left < l->B ? (int)left : l->B;
    for (int b = 0; b < valid; b++) idx[b] = l->rows[l->order[l->pos + b]];
    for (int b = valid; b < l->B; b++)
        idx[b] = l->last == MPT_LOADER_PAD_IGNORE ? -1 : l->rows[l->order[(l->pos + b) % l->n]];
    l->pos += valid;
    if (n_valid) *n_valid = valid;
    return 1;
}
