/*
 * tests/test_loader.c - the batch loader, validation split and standardisation statistics
 * (datasets/loader.h), and the synthetic dataset (datasets/synthetic.h).
 *
 * Loader: every row once per epoch (drop_last and padded), the padding rows and n_valid, shuffles that
 * differ between epochs and seeds and repeat for the same (seed, epoch), a chi-square check that the
 * shuffle is uniform. Split: disjoint, complete, sorted, reproducible. Statistics:
 * against an FP64 two-pass reference written here. Synthetic data: determinism, shapes, balance, the noise
 * level and prototype geometry the header documents, and learnability (a nearest-centroid classifier
 * written here reaches the accuracy the documented Bayes bound allows).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/loader.h"
#include "datasets/synthetic.h"
#include "harness.h"

/* ---- loader ----------------------------------------------------------------------------------- */

/* Runs one epoch, checking the batch protocol; fills seen[row] counts (valid rows only) and order[] with
 * the valid rows in the order served. Returns the number of batches. */
static int64_t run_epoch(mpt_loader *l, int64_t epoch, int *seen, int64_t seen_n, int32_t *order, int64_t *n_order) {
    mpt_loader_start_epoch(l, epoch);
    int32_t *idx = malloc((size_t)l->B * sizeof *idx);
    int64_t batches = 0, k = 0;
    int n_valid = -1;
    while (mpt_loader_next(l, idx, &n_valid)) {
        ck_assert(n_valid >= 1 && n_valid <= l->B);
        for (int b = 0; b < n_valid; b++) {
            ck_assert(idx[b] >= 0 && idx[b] < seen_n);
            seen[idx[b]]++;
            order[k++] = idx[b];
        }
        /* Padding rows are -1 (PAD_IGNORE) or repeat the epoch's first rows in order (PAD_WRAP). */
        for (int b = n_valid; b < l->B; b++) {
            if (l->last == MPT_LOADER_PAD_IGNORE) {
                ck_assert_int_eq(idx[b], -1);
            } else {
                int64_t src = (b - n_valid) % (k > 0 ? k : 1);
                ck_assert_int_eq(idx[b], order[src]);
            }
        }
        batches++;
        if (n_valid < l->B) ck_assert(l->last != MPT_LOADER_DROP_LAST);
    }
    ck_assert_int_eq(batches, mpt_loader_n_batches(l));
    /* Exhausted epochs stay exhausted. */
    ck_assert_int_eq(mpt_loader_next(l, idx, &n_valid), 0);
    free(idx);
    *n_order = k;
    return batches;
}

START_TEST(test_every_row_once) {
    const int64_t n = 1000;
    const int B = 64;
    int *seen = calloc(n, sizeof *seen);
    int32_t *order = malloc(n * sizeof *order);
    int64_t k = 0;
    for (int last = 0; last < 3; last++) {
        mpt_loader l;
        ck_assert_msg(mpt_loader_init(&l, NULL, n, B, (mpt_loader_last)last, 1, 1234) == MPT_OK, "%s", mpt_last_error());
        for (int64_t epoch = 0; epoch < 3; epoch++) {
            memset(seen, 0, n * sizeof *seen);
            int64_t nb = run_epoch(&l, epoch, seen, n, order, &k);
            if (last == MPT_LOADER_DROP_LAST) {
                ck_assert_int_eq(nb, n / B); /* 15 batches, 960 rows, 40 dropped */
                ck_assert_int_eq(k, (n / B) * B);
                int64_t once = 0, never = 0;
                for (int64_t i = 0; i < n; i++) {
                    ck_assert(seen[i] <= 1);
                    once += seen[i] == 1, never += seen[i] == 0;
                }
                ck_assert_int_eq(once, 960);
                ck_assert_int_eq(never, 40);
            } else {
                ck_assert_int_eq(nb, (n + B - 1) / B); /* 16 batches, the last with 40 valid rows, both pads */
                ck_assert_int_eq(k, n);
                for (int64_t i = 0; i < n; i++) ck_assert_msg(seen[i] == 1, "row %lld seen %d times", (long long)i, seen[i]);
            }
        }
        mpt_loader_free(&l);
        ck_assert(l.rows == NULL);
    }
    /* The last batch's n_valid, read directly. */
    mpt_loader l;
    ck_assert(mpt_loader_init(&l, NULL, n, B, MPT_LOADER_PAD_WRAP, 1, 9) == MPT_OK);
    mpt_loader_start_epoch(&l, 0);
    int32_t idx[64];
    int nv = 0, last_nv = 0, count = 0;
    while (mpt_loader_next(&l, idx, &nv)) last_nv = nv, count++;
    ck_assert_int_eq(count, 16);
    ck_assert_int_eq(last_nv, 1000 - 15 * 64);
    mpt_loader_free(&l);
    free(seen), free(order);
}
END_TEST

START_TEST(test_small_and_subset) {
    /* Fewer rows than the batch: padding wraps several times; drop_last refuses. */
    const int32_t rows[3] = {10, 20, 30};
    mpt_loader l;
    ck_assert(mpt_loader_init(&l, rows, 3, 8, MPT_LOADER_PAD_WRAP, 0, 1) == MPT_OK);
    mpt_loader_start_epoch(&l, 0);
    int32_t idx[16];
    int nv = 0;
    ck_assert(mpt_loader_next(&l, idx, &nv) == 1);
    ck_assert_int_eq(nv, 3);
    const int32_t want[8] = {10, 20, 30, 10, 20, 30, 10, 20};
    for (int b = 0; b < 8; b++) ck_assert_int_eq(idx[b], want[b]);
    ck_assert(mpt_loader_next(&l, idx, &nv) == 0);
    mpt_loader_free(&l);
    ck_assert(mpt_loader_init(&l, rows, 3, 8, MPT_LOADER_PAD_IGNORE, 0, 1) == MPT_OK);
    mpt_loader_start_epoch(&l, 0);
    ck_assert(mpt_loader_next(&l, idx, &nv) == 1);
    ck_assert_int_eq(nv, 3);
    const int32_t want_ign[8] = {10, 20, 30, -1, -1, -1, -1, -1};
    for (int b = 0; b < 8; b++) ck_assert_int_eq(idx[b], want_ign[b]);
    ck_assert(mpt_loader_next(&l, idx, &nv) == 0);
    mpt_loader_free(&l);
    ck_assert(mpt_loader_init(&l, rows, 3, 8, MPT_LOADER_DROP_LAST, 0, 1) == MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "batch size 8") != NULL, "%s", mpt_last_error());
    ck_assert(mpt_loader_init(&l, rows, 0, 8, MPT_LOADER_PAD_WRAP, 0, 1) == MPT_ERR_ARG);
    ck_assert(mpt_loader_init(&l, rows, 3, 0, MPT_LOADER_PAD_WRAP, 0, 1) == MPT_ERR_ARG);

    /* Unshuffled: the rows in the given order, every epoch. A subset of rows: only those are served. */
    int32_t sub[50];
    for (int i = 0; i < 50; i++) sub[i] = 1000 + 3 * i;
    ck_assert(mpt_loader_init(&l, sub, 50, 10, MPT_LOADER_DROP_LAST, 0, 5) == MPT_OK);
    for (int epoch = 0; epoch < 2; epoch++) {
        mpt_loader_start_epoch(&l, epoch);
        int k = 0;
        while (mpt_loader_next(&l, idx, &nv))
            for (int b = 0; b < nv; b++) ck_assert_int_eq(idx[b], sub[k++]);
        ck_assert_int_eq(k, 50);
    }
    mpt_loader_free(&l);
    ck_assert(mpt_loader_init(&l, sub, 50, 7, MPT_LOADER_PAD_WRAP, 1, 5) == MPT_OK);
    int *seen = calloc(1200, sizeof *seen);
    int32_t order[50];
    int64_t k = 0;
    run_epoch(&l, 4, seen, 1200, order, &k);
    ck_assert_int_eq(k, 50);
    for (int i = 0; i < 1200; i++) ck_assert_int_eq(seen[i], (i >= 1000 && (i - 1000) % 3 == 0 && i < 1150) ? 1 : 0);
    mpt_loader_free(&l);
    free(seen);
}
END_TEST

static void epoch_order(uint64_t seed, int64_t epoch, int64_t n, int32_t *out) {
    mpt_loader l;
    ck_assert(mpt_loader_init(&l, NULL, n, 1, MPT_LOADER_DROP_LAST, 1, seed) == MPT_OK);
    mpt_loader_start_epoch(&l, epoch);
    int nv;
    for (int64_t i = 0; i < n; i++) ck_assert(mpt_loader_next(&l, &out[i], &nv) == 1);
    mpt_loader_free(&l);
}

START_TEST(test_shuffle_reproducible) {
    const int64_t n = 500;
    int32_t a[500], b[500], c[500], d[500];
    epoch_order(77, 0, n, a);
    epoch_order(77, 0, n, b);
    ck_assert(memcmp(a, b, sizeof a) == 0);          /* same seed, same epoch: same order */
    epoch_order(77, 1, n, c);
    ck_assert(memcmp(a, c, sizeof a) != 0);          /* next epoch: different */
    epoch_order(78, 0, n, d);
    ck_assert(memcmp(a, d, sizeof a) != 0);          /* other seed: different */
    int fixed = 0;
    for (int i = 0; i < n; i++) fixed += a[i] == i;
    ck_assert_msg(fixed < 10, "shuffle left %d of 500 rows in place", fixed); /* expected 1 (Poisson) */
    /* Resuming: a loader that starts directly at epoch 1 serves the same order as one that ran epoch 0. */
    mpt_loader l;
    ck_assert(mpt_loader_init(&l, NULL, n, 1, MPT_LOADER_DROP_LAST, 1, 77) == MPT_OK);
    mpt_loader_start_epoch(&l, 0);
    mpt_loader_start_epoch(&l, 1);
    int nv;
    for (int64_t i = 0; i < n; i++) {
        int32_t x;
        ck_assert(mpt_loader_next(&l, &x, &nv) == 1);
        ck_assert_int_eq(x, c[i]);
    }
    mpt_loader_free(&l);
}
END_TEST

/* Uniformity: over E epochs of n = 1000 rows, count how often a row of decile i lands in a position of
 * decile j. For uniform random permutations every cell expects E * 100 * 100 / 1000 = 10 E; the table's
 * chi-square has (10 - 1)^2 = 81 degrees of freedom (rows and columns sum to fixed totals), and 124.8 is its
 * 0.999 quantile (permutation counts vary slightly less than Poisson, so this is conservative). A shuffle
 * that only moves rows locally, or favours the start, fails by far. (Few epochs: each shuffle is one call of
 * cuRAND's host generator, which costs milliseconds per call.) */
START_TEST(test_shuffle_uniform) {
    const int n = 1000, E = 20;
    mpt_loader l;
    ck_assert(mpt_loader_init(&l, NULL, n, n, MPT_LOADER_DROP_LAST, 1, 2024) == MPT_OK);
    int64_t cell[10][10] = {{0}};
    int32_t *idx = malloc(n * sizeof *idx);
    int nv;
    for (int e = 0; e < E; e++) {
        mpt_loader_start_epoch(&l, e);
        ck_assert(mpt_loader_next(&l, idx, &nv) == 1);
        for (int p = 0; p < n; p++) cell[idx[p] / 100][p / 100]++;
    }
    mpt_loader_free(&l);
    free(idx);
    double chi = 0, expct = 10.0 * E;
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 10; j++) chi += (cell[i][j] - expct) * (cell[i][j] - expct) / expct;
    ck_assert_msg(chi < 124.8, "decile-by-decile chi-square %.1f (81 degrees of freedom)", chi);
}
END_TEST

/* ---- validation split ------------------------------------------------------------------------- */

START_TEST(test_split) {
    const int64_t n = 1000, nv = 150;
    mpt_loader_split s, t, u;
    ck_assert_msg(mpt_loader_split_make(&s, n, nv, 42) == MPT_OK, "%s", mpt_last_error());
    ck_assert_int_eq(s.n_train, n - nv);
    ck_assert_int_eq(s.n_val, nv);
    int *mark = calloc(n, sizeof *mark);
    for (int64_t i = 0; i < s.n_train; i++) {
        if (i) ck_assert(s.train[i] > s.train[i - 1]);
        mark[s.train[i]] += 1;
    }
    for (int64_t i = 0; i < s.n_val; i++) {
        if (i) ck_assert(s.val[i] > s.val[i - 1]);
        mark[s.val[i]] += 2;
    }
    for (int64_t i = 0; i < n; i++) ck_assert_msg(mark[i] == 1 || mark[i] == 2, "row %lld mark %d", (long long)i, mark[i]);
    /* Not simply the first or last rows: held-out rows spread over the range. */
    int low = 0;
    for (int64_t i = 0; i < nv; i++) low += s.val[i] < n / 2;
    ck_assert_msg(low > 45 && low < 105, "%d of 150 held-out rows in the first half", low);
    ck_assert(mpt_loader_split_make(&t, n, nv, 42) == MPT_OK);
    ck_assert(memcmp(s.val, t.val, nv * sizeof *s.val) == 0);
    ck_assert(memcmp(s.train, t.train, (n - nv) * sizeof *s.train) == 0);
    ck_assert(mpt_loader_split_make(&u, n, nv, 43) == MPT_OK);
    ck_assert(memcmp(s.val, u.val, nv * sizeof *s.val) != 0);
    mpt_loader_split_free(&s), mpt_loader_split_free(&t), mpt_loader_split_free(&u);
    ck_assert(s.train == NULL && s.val == NULL);
    /* No validation: everything, in order. */
    ck_assert(mpt_loader_split_make(&s, 10, 0, 1) == MPT_OK);
    ck_assert(s.n_train == 10 && s.n_val == 0 && s.val == NULL);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(s.train[i], i);
    mpt_loader_split_free(&s);
    ck_assert(mpt_loader_split_make(&s, 10, 10, 1) == MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "found 10"), "%s", mpt_last_error());
    ck_assert(mpt_loader_split_make(&s, 10, -1, 1) == MPT_ERR_ARG);
    free(mark);
}
END_TEST

/* ---- standardisation statistics --------------------------------------------------------------- */

START_TEST(test_stats) {
    const int64_t n = 300, D = 97;
    uint8_t *img = malloc(n * D);
    tests_rng r = {99};
    for (int64_t i = 0; i < n * D; i++) img[i] = (uint8_t)(tests_int(&r, 0, 200) + (i % D == 0 ? 55 : 0));
    int32_t rows[100];
    for (int i = 0; i < 100; i++) rows[i] = 3 * i + 1;
    for (int use_rows = 0; use_rows < 2; use_rows++) {
        int64_t m = use_rows ? 100 : n;
        /* FP64 two-pass reference. */
        double s = 0, ss = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < D; p++) s += img[(use_rows ? rows[i] : i) * D + p] / 255.0;
        double mean = s / (double)(m * D);
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < D; p++) {
                double d = img[(use_rows ? rows[i] : i) * D + p] / 255.0 - mean;
                ss += d * d;
            }
        double inv_std = 1.0 / sqrt(ss / (double)(m * D));
        float fm = -1, fis = -1;
        mpt_loader_stats(img, D, use_rows ? rows : NULL, m, &fm, &fis);
        /* Both results are rounded once to FP32 (u = 2^-24); the references carry FP64 summation error
         * of about m * D * 2^-53, negligible here. */
        ck_assert_msg(fabs(fm - mean) <= 2 * 0x1p-24 * mean, "mean %.9g vs %.9g", fm, mean);
        ck_assert_msg(fabs(fis - inv_std) <= 4 * 0x1p-24 * inv_std, "inv_std %.9g vs %.9g", fis, inv_std);
    }
    /* Constant images: no division by zero, inv_std 1. */
    memset(img, 128, n * D);
    float fm, fis;
    mpt_loader_stats(img, D, NULL, n, &fm, &fis);
    ck_assert(fabs(fm - 128.0 / 255.0) < 1e-7);
    ck_assert(fis == 1.0f);
    free(img);
}
END_TEST

/* ---- synthetic data --------------------------------------------------------------------------- */

/* Nearest-centroid accuracy on the test part, centroids fitted on the training part (FP64). */
static double nearest_centroid_accuracy(const mpt_mnist *d) {
    const int K = d->n_classes;
    const int64_t D = d->dim;
    double *cen = calloc((size_t)(K * D), sizeof *cen);
    int64_t *cnt = calloc((size_t)K, sizeof *cnt);
    for (int64_t i = 0; i < d->n_train; i++) {
        int c = d->train_labels[i];
        cnt[c]++;
        for (int64_t p = 0; p < D; p++) cen[c * D + p] += d->train_images[i * D + p];
    }
    for (int c = 0; c < K; c++)
        for (int64_t p = 0; p < D; p++) cen[c * D + p] /= (double)cnt[c];
    int64_t correct = 0;
    for (int64_t i = 0; i < d->n_test; i++) {
        int best = -1;
        double bd = INFINITY;
        for (int c = 0; c < K; c++) {
            double dd = 0;
            for (int64_t p = 0; p < D; p++) {
                double t = d->test_images[i * D + p] - cen[c * D + p];
                dd += t * t;
            }
            if (dd < bd) bd = dd, best = c;
        }
        correct += best == d->test_labels[i];
    }
    free(cen), free(cnt);
    return (double)correct / (double)d->n_test;
}

/* Checks the geometry the header documents on one dataset: centroids (training part) at 0.5 +- CONTRAST, so
 * the codes can be read back, at Hamming distance >= ceil(dim / 4); within-class spread SIGMA (times
 * 0.980, the standard deviation of a unit normal clamped at 2 sigma on one side); nearest-centroid accuracy
 * within the documented Bayes bound. */
static void check_geometry(const mpt_mnist *d) {
    const int K = d->n_classes;
    const int64_t D = d->dim, n = d->n_train;
    double *cen = calloc((size_t)(K * D), sizeof *cen), var = 0;
    int64_t *cnt = calloc((size_t)K, sizeof *cnt);
    uint8_t *code = malloc((size_t)(K * D));
    for (int64_t i = 0; i < n; i++) {
        cnt[d->train_labels[i]]++;
        for (int64_t p = 0; p < D; p++) cen[d->train_labels[i] * D + p] += d->train_images[i * D + p] / 255.0;
    }
    for (int c = 0; c < K; c++)
        for (int64_t p = 0; p < D; p++) cen[c * D + p] /= (double)cnt[c];
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < D; p++) {
            double t = d->train_images[i * D + p] / 255.0 - cen[d->train_labels[i] * D + p];
            var += t * t;
        }
    double sigma = sqrt(var / (double)(n * D));
    ck_assert_msg(fabs(sigma - 0.980 * MPT_SYNTHETIC_SIGMA) < 0.03 * MPT_SYNTHETIC_SIGMA, "within-class sigma %.4f", sigma);
    /* Centroid estimates carry noise SIGMA / sqrt(n / K) per pixel (0.011 for 200 per class); 0.06 is > 5 of
     * those, and the clamping shifts the mean by 0.15 * 0.0085. */
    for (int c = 0; c < K; c++)
        for (int64_t p = 0; p < D; p++) {
            double v = cen[c * D + p];
            code[c * D + p] = v > 0.5;
            double want = v > 0.5 ? 0.5 + MPT_SYNTHETIC_CONTRAST : 0.5 - MPT_SYNTHETIC_CONTRAST;
            ck_assert_msg(fabs(v - want) < 0.06, "class %d pixel %lld: centroid %.3f", c, (long long)p, v);
        }
    for (int a = 0; a < K; a++)
        for (int b = 0; b < a; b++) {
            int64_t h = 0;
            for (int64_t p = 0; p < D; p++) h += code[a * D + p] != code[b * D + p];
            ck_assert_msg(h >= (D + 3) / 4, "classes %d, %d differ in %lld of %lld pixels", a, b, (long long)h,
                          (long long)D);
        }
    /* Bayes bound (K - 1) Phi(-A sqrt(h_min) / sigma), plus 0.02 for the centroid estimates and the finite
     * test set. */
    double bound = (K - 1) * 0.5 * erfc(MPT_SYNTHETIC_CONTRAST * sqrt((double)((D + 3) / 4)) / MPT_SYNTHETIC_SIGMA / sqrt(2.0));
    double acc = nearest_centroid_accuracy(d);
    ck_assert_msg(acc >= 1.0 - bound - 0.02, "dim %lld: nearest-centroid accuracy %.4f, Bayes bound %.4f", (long long)D,
                  acc, 1.0 - bound);
    free(cen), free(cnt), free(code);
}

START_TEST(test_synthetic_properties) {
    mpt_mnist a, b, c;
    ck_assert_msg(mpt_synthetic_blobs(&a, 2000, 1000, 64, 10, 5) == MPT_OK, "%s", mpt_last_error());
    ck_assert(mpt_synthetic_blobs(&b, 2000, 1000, 64, 10, 5) == MPT_OK);
    ck_assert(mpt_synthetic_blobs(&c, 2000, 1000, 64, 10, 6) == MPT_OK);
    ck_assert(a.n_train == 2000 && a.n_test == 1000 && a.dim == 64 && a.rows == 8 && a.cols == 8 && a.n_classes == 10);
    ck_assert(memcmp(a.train_images, b.train_images, 2000 * 64) == 0);
    ck_assert(memcmp(a.test_images, b.test_images, 1000 * 64) == 0);
    ck_assert(memcmp(a.train_images, c.train_images, 2000 * 64) != 0);
    /* Balanced labels i mod K. */
    for (int i = 0; i < 2000; i++) ck_assert_int_eq(a.train_labels[i], i % 10);
    for (int i = 0; i < 1000; i++) ck_assert_int_eq(a.test_labels[i], i % 10);
    check_geometry(&a);
    mpt_mnist_free(&a), mpt_mnist_free(&b), mpt_mnist_free(&c);

    /* Few pixels (the Bayes bound is 3.4% here), image-sized, and not a perfect square. */
    ck_assert(mpt_synthetic_blobs(&a, 2000, 1000, 16, 10, 8) == MPT_OK);
    ck_assert(a.rows == 4 && a.cols == 4);
    check_geometry(&a);
    mpt_mnist_free(&a);
    ck_assert(mpt_synthetic_blobs(&a, 2000, 500, 784, 10, 11) == MPT_OK);
    ck_assert(a.rows == 28 && a.cols == 28);
    check_geometry(&a);
    mpt_mnist_free(&a);
    ck_assert(mpt_synthetic_blobs(&a, 20, 0, 12, 3, 1) == MPT_OK);
    ck_assert(a.rows == 1 && a.cols == 12 && a.n_test == 0);
    mpt_mnist_free(&a);
    /* Argument errors. */
    ck_assert(mpt_synthetic_blobs(&a, 20, 5, 8, 10, 1) == MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "found dim 8"), "%s", mpt_last_error());
    ck_assert(mpt_synthetic_blobs(&a, 0, 5, 64, 10, 1) == MPT_ERR_ARG);
    ck_assert(mpt_synthetic_blobs(&a, 20, 5, 64, 1, 1) == MPT_ERR_ARG);
    ck_assert(a.train_images == NULL);
}
END_TEST

int main(void) {
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_every_row_once);
    tcase_add_test(tc, test_small_and_subset);
    tcase_add_test(tc, test_shuffle_reproducible);
    tcase_add_test(tc, test_shuffle_uniform);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_synthetic_properties);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
