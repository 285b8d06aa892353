/*
 * datasets/loader.h - host-side batching: validation split, standardisation statistics, per-epoch
 * shuffles and batches of row indices.
 *
 * The loader never touches pixels in the training step. It hands out batches of int32 row indices into a
 * U8 images array [n_total, D]; the backend's gather_batch (engine/backend.h, via mpt_trainer_gather) reads
 * those rows and computes x = (pixel / 255 - mean) * inv_std in the compute dtype. mean and inv_std are 0 and
 * 1 (plain scaling to [0, 1]) unless standardisation is asked for, in which case they are the mean and
 * 1 / (population standard deviation) of pixel / 255 over the training rows (mpt_loader_stats), as
 * torchvision's transforms.Normalize((0.2860,), (0.3530,)) does for Fashion-MNIST with precomputed values.
 *
 * Randomness (engine/rng.h, cuRAND host Philox, one run seed):
 *  - the validation split is a Fisher-Yates shuffle of 0..n-1 with mpt_rng_stream_seed(seed, MPT_RNG_SPLIT)
 *    at offset 0: its first n_val entries are held out. Both lists are then sorted ascending, so the split
 *    is a fixed subset for a given (seed, n, n_val), independent of anything else in the run;
 *  - epoch e's order is a Fisher-Yates shuffle of the loader's rows with
 *    mpt_rng_stream_seed(seed, MPT_RNG_SHUFFLE) at offset e * n (n uniforms per epoch, disjoint ranges), so
 *    every epoch differs, the same (seed, epoch) gives the same order, and resuming at epoch e needs no state.
 *
 * The graph has a static batch size B, so the last partial batch of an epoch (n % B rows) is dropped
 * (MPT_LOADER_DROP_LAST), padded with index -1 (MPT_LOADER_PAD_IGNORE: gather_batch turns such rows into
 * zeros with label -1, which the loss ignores like PyTorch's ignore_index, so the epoch sees every row once
 * with exactly PyTorch's semantics), or padded by wrapping around to the start of the epoch's order
 * (MPT_LOADER_PAD_WRAP). mpt_loader_next reports how many leading rows of the batch are real (n_valid), so
 * evaluation counts only those.
 *
 * Typical use:
 *     mpt_loader_split split;                       // rows of d.train_images for training / validation
 *     MPT_TRY(mpt_loader_split_make(&split, d.n_train, n_val, seed));
 *     float mean = 0.f, inv_std = 1.f;
 *     if (standardize) mpt_loader_stats(d.train_images, d.dim, split.train, split.n_train, &mean, &inv_std);
 *     mpt_loader ld;
 *     MPT_TRY(mpt_loader_init(&ld, split.train, split.n_train, B, MPT_LOADER_DROP_LAST, 1, seed));
 *     for (int64_t epoch = 0; epoch < epochs; epoch++) {
 *         mpt_loader_start_epoch(&ld, epoch);
 *         int n_valid;
 *         while (mpt_loader_next(&ld, idx_host, &n_valid)) { copy idx_host to the backend; gather; step; }
 *     }
 *     mpt_loader_free(&ld); mpt_loader_split_free(&split);
 */
#ifndef MPT_DATASETS_LOADER_H
#define MPT_DATASETS_LOADER_H

#include <stdint.h>

#include "engine/api.h"
#include "engine/rng.h"
#include "engine/status.h"

/* A training/validation partition of the rows 0..n-1 of a training set. */
typedef struct mpt_loader_split {
    int32_t *train;   /* I32 [n_train] ascending row indices kept for training (malloc'd) */
    int64_t n_train;
    int32_t *val;     /* I32 [n_val] ascending row indices held out for validation (malloc'd; NULL if none) */
    int64_t n_val;
} mpt_loader_split;

/* Splits rows 0..n-1: n_val rows (a seeded random subset, see the file comment) held out, the rest kept.
 * n_val = 0 keeps everything. Errors: MPT_ERR_ARG if n_val < 0 or n_val >= n (nothing left to train on),
 * or n > INT32_MAX; MPT_ERR_NOMEM. */
MPT_API mpt_status mpt_loader_split_make(mpt_loader_split *out, int64_t n, int64_t n_val, uint64_t seed);
/* Frees both lists and zeroes *s. */
MPT_API void mpt_loader_split_free(mpt_loader_split *s);

/* Standardisation statistics of pixel / 255 over the rows rows[0..n) (all rows 0..n-1 if rows is NULL) of
 * images U8 [*, D], accumulated in FP64: *mean = average, *inv_std = 1 / sqrt(population variance);
 * *inv_std = 1 if the variance is below 1e-12 (constant images). n must be > 0. */
MPT_API void mpt_loader_stats(const uint8_t *images, int64_t D, const int32_t *rows, int64_t n, float *mean,
                              float *inv_std);

typedef enum mpt_loader_last {
    MPT_LOADER_DROP_LAST = 0, /* the last n % B rows of each epoch are skipped */
    MPT_LOADER_PAD_WRAP,      /* the last batch is completed with the epoch's first rows; n_valid < B */
    MPT_LOADER_PAD_IGNORE,    /* the last batch is completed with index -1 (padding rows); n_valid < B */
} mpt_loader_last;

/* Hands out batches of B row indices per epoch. Owns copies of its rows and its scratch; allocates only
 * in mpt_loader_init. */
typedef struct mpt_loader {
    int32_t *rows;       /* I32 [n] the rows this loader serves (indices into the images array) */
    int64_t n;
    int B;               /* batch size */
    mpt_loader_last last;
    int shuffle;         /* 0: every epoch in the order of rows (evaluation) */
    uint64_t seed;       /* run seed */
    int32_t *order;      /* I32 [n] this epoch's order: positions into rows */
    float *scratch;      /* [n] uniforms for the shuffle */
    int64_t epoch;       /* current epoch (-1 before the first mpt_loader_start_epoch) */
    int64_t pos;         /* next position in order */
} mpt_loader;

/* rows: the n row indices to serve (copied; NULL means 0..n-1). B >= 1.
 * Errors: MPT_ERR_ARG if n < 1, B < 1, n > INT32_MAX, or drop_last with n < B (an epoch with no batch);
 * MPT_ERR_NOMEM. */
MPT_API mpt_status mpt_loader_init(mpt_loader *l, const int32_t *rows, int64_t n, int B, mpt_loader_last last,
                                   int shuffle, uint64_t seed);
/* Frees the loader's copies and scratch and zeroes *l (safe on a zeroed loader). */
MPT_API void mpt_loader_free(mpt_loader *l);

/* Batches per epoch: n / B with MPT_LOADER_DROP_LAST, ceil(n / B) when padding. */
MPT_API int64_t mpt_loader_n_batches(const mpt_loader *l);

/* Starts epoch `epoch` (>= 0): computes its order (the shuffle, or the identity) and rewinds. */
MPT_API void mpt_loader_start_epoch(mpt_loader *l, int64_t epoch);

/* Writes the next batch's B row indices into idx (I32 [B], host) and the number of real rows into
 * *n_valid (B except for a padded last batch, whose rows n_valid..B-1 are -1 with MPT_LOADER_PAD_IGNORE or
 * repeat the epoch's first rows with MPT_LOADER_PAD_WRAP).
 * Returns 1, or 0 (writing nothing) when the epoch is exhausted. No allocation. */
MPT_API int mpt_loader_next(mpt_loader *l, int32_t *idx, int *n_valid);

#endif
