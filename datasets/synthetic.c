/*
 * datasets/synthetic.c - Gaussian blobs around equidistant prototypes, quantised to bytes.
 * The math and how hard the problem is: datasets/synthetic.h.
 *
 * Random numbers: one Philox stream (mpt_rng_stream_seed(seed, MPT_RNG_TEST)). Standard normals come in
 * Box-Muller pairs from pairs of uniforms in (0, 1]; "vector" v (v = 0..K-1 the prototypes' raw Gaussian
 * vectors, then the training examples, then the test examples) uses the uniforms at offsets
 * [v * dim2, (v + 1) * dim2) with dim2 = dim rounded up to even, so each vector's noise is fixed by its index.
 */
#include "datasets/synthetic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"

#define SYN_CHUNK_FLOATS ((int64_t)1 << 20) /* uniforms generated per cuRAND call */

/* Standard normals for vectors [v0, v0 + nv) into z (nv * dim2 floats; uniforms in u, same size). */
static void syn_normals(mpt_rng *rng, uint64_t sseed, int64_t v0, int64_t nv, int64_t dim2, float *u, double *z) {
    mpt_rng_uniform(rng, u, (size_t)(nv * dim2), sseed, (uint64_t)(v0 * dim2));
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

mpt_status mpt_synthetic_blobs(mpt_mnist *out, int64_t n_train, int64_t n_test, int64_t dim, int n_classes,
                               uint64_t seed) {
    MPT_ASSERT(out != NULL);
    memset(out, 0, sizeof *out);
    if (n_train < 1 || n_test < 0)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: expected n_train >= 1 and n_test >= 0, found %lld and %lld",
                          (long long)n_train, (long long)n_test);
    if (n_classes < 2 || n_classes > 256)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: expected 2 to 256 classes, found %d", n_classes);
    if (dim < n_classes)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: expected dim >= n_classes (%d) for orthogonal prototypes, "
                          "found dim %lld", n_classes, (long long)dim);
    if (dim > INT32_MAX || n_train > MPT_IDX_MAX_BYTES / dim || n_test > MPT_IDX_MAX_BYTES / dim)
        return mpt_errorf(MPT_ERR_ARG, "synthetic blobs: %lld + %lld examples of %lld bytes exceed the %lld-byte limit",
                          (long long)n_train, (long long)n_test, (long long)dim, (long long)MPT_IDX_MAX_BYTES);

    const int K = n_classes;
    const int64_t dim2 = dim + (dim & 1);
    int64_t chunk = SYN_CHUNK_FLOATS / dim2;
    if (chunk < K) chunk = K;
    double *proto = malloc((size_t)(K * dim2) * sizeof *proto);
    float *u = malloc((size_t)(chunk * dim2) * sizeof *u);
    double *z = malloc((size_t)(chunk * dim2) * sizeof *z);
    out->train_images = malloc((size_t)(n_train * dim));
    out->train_labels = malloc((size_t)n_train);
    out->test_images = malloc((size_t)(n_test * dim > 0 ? n_test * dim : 1));
    out->test_labels = malloc((size_t)(n_test > 0 ? n_test : 1));
    if (!proto || !u || !z || !out->train_images || !out->train_labels || !out->test_images || !out->test_labels) {
        free(proto), free(u), free(z);
        mpt_mnist_free(out);
        return mpt_errorf(MPT_ERR_NOMEM, "synthetic blobs: cannot allocate %lld x %lld bytes", (long long)(n_train + n_test),
                          (long long)dim);
    }

    mpt_rng *rng = mpt_rng_create();
    const uint64_t sseed = mpt_rng_stream_seed(seed, MPT_RNG_TEST);

    /* Prototypes: modified Gram-Schmidt on K Gaussian vectors, then mu_c = 0.5 + r u_c. */
    syn_normals(rng, sseed, 0, K, dim2, u, proto);
    for (int c = 0; c < K; c++) {
        double *pc = proto + c * dim2;
        for (int j = 0; j < c; j++) {
            const double *pj = proto + j * dim2;
            double d = 0.0;
            for (int64_t p = 0; p < dim; p++) d += pc[p] * pj[p];
            for (int64_t p = 0; p < dim; p++) pc[p] -= d * pj[p];
        }
        double nrm = 0.0;
        for (int64_t p = 0; p < dim; p++) nrm += pc[p] * pc[p];
        nrm = sqrt(nrm);
        MPT_ASSERTF(nrm > 1e-6, "synthetic blobs: degenerate prototype %d", c);
        for (int64_t p = 0; p < dim; p++) pc[p] /= nrm;
    }
    const double r = MPT_SYNTHETIC_MARGIN * MPT_SYNTHETIC_SIGMA * sqrt(2.0);
    for (int64_t k = 0; k < K * dim2; k++) proto[k] = 0.5 + r * proto[k];

    /* Examples: x = mu_c + sigma z, label i mod K. */
    for (int part = 0; part < 2; part++) {
        int64_t n = part == 0 ? n_train : n_test;
        int64_t v_base = part == 0 ? K : K + n_train;
        uint8_t *img = part == 0 ? out->train_images : out->test_images;
        uint8_t *lab = part == 0 ? out->train_labels : out->test_labels;
        for (int64_t i0 = 0; i0 < n; i0 += chunk) {
            int64_t m = n - i0 < chunk ? n - i0 : chunk;
            syn_normals(rng, sseed, v_base + i0, m, dim2, u, z);
            for (int64_t k = 0; k < m; k++) {
                int64_t i = i0 + k;
                int c = (int)(i % K);
                const double *mu = proto + c * dim2;
                const double *zk = z + k * dim2;
                uint8_t *x = img + i * dim;
                for (int64_t p = 0; p < dim; p++) x[p] = syn_quantise(mu[p] + MPT_SYNTHETIC_SIGMA * zk[p]);
                lab[i] = (uint8_t)c;
            }
        }
    }
    mpt_rng_free(&rng);
    free(proto);
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
    out->n_classes = K;
    return MPT_OK;
}
