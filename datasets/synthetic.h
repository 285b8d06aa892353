/*
 * datasets/synthetic.h - a learnable synthetic classification dataset for tests (no files needed).
 *
 * Gaussian blobs around random bright/dark prototypes, quantised to bytes, in the same mpt_mnist struct as
 * real data, so every consumer of a dataset (loader, trainer, command-line tool via mpt_mnist_save) can be
 * tested without Fashion-MNIST.
 *
 * The math (pixel units: value / 255 in [0, 1]; A = MPT_SYNTHETIC_CONTRAST = 0.2, sigma =
 * MPT_SYNTHETIC_SIGMA = 0.15):
 *   code       b_c in {0, 1}^dim for each class c: fair coins, redrawn until every two classes differ in at
 *              least h_min = ceil(dim / 4) pixels (typically about dim / 2),
 *   prototype  mu_c[p] = 0.5 + A (2 b_c[p] - 1), i.e. 0.7 (bright) or 0.3 (dark),
 *   example    x = mu_c + sigma z,  z ~ N(0, I_dim),
 *   byte       round(clamp(x, 0, 1) * 255)  (clamping touches the 2.3% of pixels beyond 2 sigma).
 * Two classes that differ in h pixels have prototypes 2 A sqrt(h) apart, so the Bayes classifier between
 * them (before clamping and quantisation) errs with probability Phi(-A sqrt(h) / sigma), and a K-class
 * nearest-prototype classifier errs with probability at most (K - 1) Phi(-A sqrt(h_min) / sigma) (union
 * bound): for K = 10, <= 3.4% at dim 16, <= 4e-7 at dim 64, nil at dim 784. So the classes are separable
 * (linearly: a softmax regression on x is Bayes-optimal) and what limits a learner is the number of steps:
 * the per-pixel class signal is 0.4, spread over about dim / 2 pixels per pair of classes.
 * Measured (CPU backend, FP32, MLP dim-H-K with ReLU, PyTorch default init, Adam lr 1e-3, batch 64, 2048
 * test examples, K = 10): dim 784, H 128, 1000 training examples: 100% test accuracy after 1 epoch;
 * dim 64, H 64, 2000 examples: 95.3% after 1 epoch, 99.95% after 2; dim 16, H 32, 4000 examples: 44%, 76%,
 * 92%, 97% after epochs 1 to 4 (few pixels carry little signal per step).
 *
 * Labels are balanced: example i has label i mod K (train and test alike).
 * Randomness: cuRAND host Philox (engine/rng.h) with mpt_rng_stream_seed(seed, MPT_RNG_TEST); Gaussians by
 * Box-Muller from pairs of uniforms. The same arguments give the same bytes on every machine.
 */
#ifndef MPT_DATASETS_SYNTHETIC_H
#define MPT_DATASETS_SYNTHETIC_H

#include <stdint.h>

#include "engine/api.h"
#include "datasets/idx.h"
#include "engine/status.h"

#define MPT_SYNTHETIC_CONTRAST 0.2 /* prototype pixels are 0.5 + CONTRAST (bright) or 0.5 - CONTRAST (dark) */
#define MPT_SYNTHETIC_SIGMA 0.15   /* per-pixel noise standard deviation, pixel units */

/* Fills *out (zeroed first; free with mpt_mnist_free) with n_train training and n_test test examples of
 * dim U8 features and n_classes classes, as described in the file comment. rows x cols: sqrt(dim) x sqrt(dim)
 * when dim is a perfect square (so image models can use it: dim 784 gives 28 x 28), else 1 x dim.
 * Errors: MPT_ERR_ARG if n_train < 1, n_test < 0, n_classes < 2 or > 256, dim < max(4, n_classes),
 * or n * dim > MPT_IDX_MAX_BYTES; MPT_ERR_NOMEM. */
MPT_API mpt_status mpt_synthetic_blobs(mpt_mnist *out, int64_t n_train, int64_t n_test, int64_t dim, int n_classes,
                                       uint64_t seed);

#endif
