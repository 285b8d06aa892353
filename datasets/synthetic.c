/*
 * datasets/synthetic.c - Gaussian blobs around random bright/dark prototypes, quantised to bytes.
 * The math and how hard the problem is: datasets/synthetic.h.
 *
 * Random numbers: one Philox stream (mpt_rng_stream_seed(seed, MPT_RNG_TEST)), drawn in a few large calls
 * (each call of cuRAND's host generator at a new offset costs milliseconds). Uniforms [0, C * dim) decide the
 * C = SYN_CANDIDATES(K) candidate prototype codes; after that, standard normals come in Box-Muller pairs
 * from pairs of uniforms in (0, 1], example v (training examples first, then test examples) using the
 * uniforms at base + [v * dim2, (v + 1) * dim2), with dim2 = dim rounded up to even and base = C * dim
 * rounded up to even; so each example's noise is fixed by its index.
 */
#include "datasets/synthetic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"

#define SYN_CHUNK_FLOATS ((int64_t)1 << 21) /* uniforms generated per cuRAND call */
#define SYN_CANDIDATES(K) (8 * (int64_t)(K) + 64)

/* Standard normals for examples [v0, v0 + nv) into z (nv * dim2 doubles; uniforms in u, same count). */
static void syn_normals(uint64_t sseed, uint64_t base, int64_t v0, int64_t nv, int64_t dim2, float *u, double *z) {
    mpt_rng_uniform(u, (size_t)(nv * dim2), sseed, base + (uint64_t)(v0 * dim2));
    for (int64_t k = 0; k < nv * dim2; k += 2) {
        double r = sqrt(-2.0 * log((double)u[k]));
        double a = 2.0 * M_PI * (double)u[k + 1];
        z[k] = r * cos(a);
        z[k + 1] = r * sin(a);
    }
}

static uint8_t syn_quantise(double x) {
    if (!(x > 0.0)) return 0;
    if (x >= 1.0) return 255;
    return (uint8_t)floor(x * 255.0 + 0.5);
}

/* Picks K codes (bytes 0/1, K x dim) from the candidates: greedily, in order, each at Hamming distance
 * >= min_dist from those already taken. Returns the number taken (K on success). */
static int syn_pick_codes(const float *u, int64_t n_cand, int64_t dim, int K, int64_t min_dist, uint8_t *codes) {
    int taken = 0;
    for (int64_t c = 0; c < n_cand && taken < K; c++) {
        uint8_t *cand = codes + (int64_t)taken * dim;
        for (int64_t p = 0; p < dim; p++) cand[p] = u[c * dim + p] <= 0.5f;
        int ok = 1;
        for (int j = 0; j < taken && ok; j++) {
            int64_t h = 0;
            for (int64_t p = 0; p < dim; p++) h += cand[p] != codes[(int64_t)j * dim + p];
            ok = h >= min_dist;
        }
        taken += ok;
    }
    return taken;
}

mpt_status mpt_synthetic_blobs(mpt_mnist *out, int64_t n_train, int64_t n_test, int64_t dim, int n_classes,
                               uint64_t seed) {
    MPT_ASSERT(out != NULL);
    memset(out, 0, sizeof *out);
    if (n_train < 1 || n_test < 0)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: expected n_train >= 1 and n_test >= 0, found %lld and %lld",
                          (long long)n_train, (long long)n_test);
    if (n_classes < 2 || n_classes > 256)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: expected 2 to 256 classes, found %d", n_classes);
    if (dim < 4 || dim < n_classes || dim > INT32_MAX)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: expected dim >= max(4, n_classes = %d) and < 2^31, found dim %lld",
                          n_classes, (long long)dim);
    if (n_train > MPT_IDX_MAX_BYTES / dim || n_test > MPT_IDX_MAX_BYTES / dim)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: %lld + %lld examples of %lld bytes exceed the %lld-byte limit",
                          (long long)n_train, (long long)n_test, (long long)dim, (long long)MPT_IDX_MAX_BYTES);

    const int K = n_classes;
    const int64_t dim2 = dim + (dim & 1);
    const int64_t n_cand = SYN_CANDIDATES(K);
    const uint64_t base = (uint64_t)((n_cand * dim + 1) / 2 * 2);
    int64_t chunk = SYN_CHUNK_FLOATS / dim2;
    if (chunk < 1) chunk = 1;
    int64_t ufloats = chunk * dim2 > n_cand * dim ? chunk * dim2 : n_cand * dim;
    uint8_t *codes = malloc((size_t)(K * dim));
    float *u = malloc((size_t)ufloats * sizeof *u);
    double *z = malloc((size_t)(chunk * dim2) * sizeof *z);
    out->train_images = malloc((size_t)(n_train * dim));
    out->train_labels = malloc((size_t)n_train);
    out->test_images = malloc((size_t)(n_test * dim > 0 ? n_test * dim : 1));
    out->test_labels = malloc((size_t)(n_test > 0 ? n_test : 1));
    if (!codes || !u || !z || !out->train_images || !out->train_labels || !out->test_images || !out->test_labels) {
        free(codes), free(u), free(z);
        mpt_mnist_free(out);
        return mpt_errorf(MPT_ERR_NOMEM, "synthetic blobs: cannot allocate %lld x %lld bytes", (long long)(n_train + n_test),
                          (long long)dim);
    }

    const uint64_t sseed = mpt_rng_stream_seed(seed, MPT_RNG_TEST);

    /* Prototype codes: pixel p of class c is bright (1) or dark (0) by a fair coin; every two classes differ
     * in at least ceil(dim / 4) pixels. */
    mpt_rng_uniform(u, (size_t)(n_cand * dim), sseed, 0);
    int taken = syn_pick_codes(u, n_cand, dim, K, (dim + 3) / 4, codes);
    if (taken < K) {
        free(codes), free(u), free(z);
        mpt_mnist_free(out);
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: found only %d of %d prototypes %lld pixels apart among %lld "
                          "candidates; use a larger dim than %lld", taken, K, (long long)((dim + 3) / 4),
                          (long long)n_cand, (long long)dim);
    }

    /* Examples: x = 0.5 +- CONTRAST + SIGMA z, label i mod K. */
    for (int part = 0; part < 2; part++) {
        int64_t n = part == 0 ? n_train : n_test;
        int64_t v_base = part == 0 ? 0 : n_train;
        uint8_t *img = part == 0 ? out->train_images : out->test_images;
        uint8_t *lab = part == 0 ? out->train_labels : out->test_labels;
        for (int64_t i0 = 0; i0 < n; i0 += chunk) {
            int64_t m = n - i0 < chunk ? n - i0 : chunk;
            syn_normals(sseed, base, v_base + i0, m, dim2, u, z);
            for (int64_t k = 0; k < m; k++) {
                int64_t i = i0 + k;
                int c = (int)(i % K);
                const uint8_t *code = codes + (int64_t)c * dim;
                const double *zk = z + k * dim2;
                uint8_t *x = img + i * dim;
                for (int64_t p = 0; p < dim; p++) {
                    double mu = code[p] ? 0.5 + MPT_SYNTHETIC_CONTRAST : 0.5 - MPT_SYNTHETIC_CONTRAST;
                    x[p] = syn_quantise(mu + MPT_SYNTHETIC_SIGMA * zk[p]);
                }
                lab[i] = (uint8_t)c;
            }
        }
    }
    free(codes);
    free(u);
    free(z);

    out->n_train = n_train;
    out->n_test = n_test;
    out->dim = dim;
    int64_t s = (int64_t)floor(sqrt((double)dim) + 0.5);
    if (s * s == dim) {
        out->rows = (int)s;
        out->cols = (int)s;
    } else {
        out->rows = 1;
        out->cols = (int)dim;
    }
    out->channels = 1;
    out->n_classes = K;
    return MPT_OK;
}
