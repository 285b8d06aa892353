/*
 * datasets/synthetic.h - a learnable synthetic classification dataset for tests (no files needed).
 *
 * Gaussian blobs around equidistant class prototypes, quantised to bytes, in the same mpt_mnist struct as
 * real data, so every consumer of a dataset (loader, trainer, command-line tool via mpt_mnist_save) can be
 * tested without Fashion-MNIST.
 *
 * The math (pixel units: value / 255 in [0, 1]):
 *   u_0 .. u_{K-1}: orthonormal vectors in R^dim (Gram-Schmidt on Gaussian vectors; needs dim >= K),
 *   prototype  mu_c = 0.5 + r u_c,  with r = MPT_SYNTHETIC_MARGIN * MPT_SYNTHETIC_SIGMA * sqrt(2),
 *   example    x = mu_c + MPT_SYNTHETIC_SIGMA * z,  z ~ N(0, I_dim),
 *   byte       round(clamp(x, 0, 1) * 255).
 * Every two prototypes are exactly r sqrt(2) apart, so the Bayes classifier between two classes (before
 * clipping and quantisation) errs with probability Phi(-||mu_a - mu_b|| / (2 sigma)) = Phi(-MARGIN)
 * = Phi(-3.5) = 2.3e-4, and a K-class nearest-prototype classifier errs with probability at most
 * (K - 1) Phi(-3.5) (union bound): <= 0.21% for K = 10. The problem is linear (a softmax regression on
 * x is Bayes-optimal), the per-pixel signal is r |u_c[p]| ~ 0.5 / sqrt(dim) against noise 0.1, so it is
 * easy for small dim and needs a few hundred examples per class for dim in the hundreds: an MLP with one
 * hidden layer trained with Adam (lr 1e-3, batch 64) for a few epochs on 2000+ examples reaches > 95% test
 * accuracy. Clipping to [0, 1] affects a small fraction of pixels for dim < 32 (|r u_c[p]| up to ~0.4).
 *
 * Labels are balanced: example i has label i mod K (train and test alike).
 * Randomness: cuRAND host Philox (engine/rng.h) with mpt_rng_stream_seed(seed, MPT_RNG_TEST); Gaussians by
 * Box-Muller from pairs of uniforms. The same arguments give the same bytes on every machine.
 */
#ifndef MPT_DATASETS_SYNTHETIC_H
#define MPT_DATASETS_SYNTHETIC_H

#include <stdint.h>

#include "datasets/idx.h"
#include "engine/status.h"

#define MPT_SYNTHETIC_SIGMA 0.1   /* per-pixel noise standard deviation, pixel units */
#define MPT_SYNTHETIC_MARGIN 3.5  /* half the prototype distance, in units of sigma */

/* Fills *out (zeroed first; free with mpt_mnist_free) with n_train training and n_test test examples of
 * dim U8 features and n_classes classes, as described in the file comment. rows x cols: sqrt(dim) x sqrt(dim)
 * when dim is a perfect square (so image models can use it: dim 784 gives 28 x 28), else 1 x dim.
 * Errors: MPT_ERR_ARG if n_train < 1, n_test < 0, n_classes < 2 or > 256, dim < n_classes,
 * or n * dim > MPT_IDX_MAX_BYTES; MPT_ERR_NOMEM. */
mpt_status mpt_synthetic_blobs(mpt_mnist *out, int64_t n_train, int64_t n_test, int64_t dim, int n_classes,
                               uint64_t seed);

#endif
