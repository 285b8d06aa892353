/* engine/rng.c - cuRAND host Philox generator wrapper. */
#include "engine/rng.h"

#include <curand.h>
#include <stdlib.h>

struct mpt_rng {
    curandGenerator_t gen;
    int positioned;    /* the generator's next value is (seed, offset) below */
    uint64_t seed;
    uint64_t offset;
};

#define MPT_CURAND_CHECK(call)                                                                       \
    do {                                                                                             \
        curandStatus_t st_ = (call);                                                                 \
        if (st_ != CURAND_STATUS_SUCCESS) mpt_fatal(__FILE__, __LINE__, "%s failed: curandStatus %d", #call, (int)st_); \
    } while (0)

mpt_rng *mpt_rng_create(void) {
    mpt_rng *r = calloc(1, sizeof *r);
    MPT_ASSERT(r != NULL);
    MPT_CURAND_CHECK(curandCreateGeneratorHost(&r->gen, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    return r;
}

void mpt_rng_free(mpt_rng **pr) {
    if (!*pr) return;
    curandDestroyGenerator((*pr)->gen);
    free(*pr);
    *pr = NULL;
}

uint64_t mpt_rng_stream_seed(uint64_t seed, mpt_rng_stream stream) {
    uint64_t z = seed ^ ((uint64_t)stream * 0x9e3779b97f4a7c15ull);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Setting the seed or offset makes cuRAND's host generator re-initialise on the next call (several ms);
 * consecutive draws (dropout nodes in order, step after step) continue where the last one ended instead.
 * A continued draw returns exactly the values of a fresh (seed, offset) draw: test_rng checks it. */
void mpt_rng_uniform(mpt_rng *r, float *out, size_t n, uint64_t seed, uint64_t offset) {
    if (n == 0) return;
    if (!r->positioned || r->seed != seed || r->offset != offset) {
        MPT_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(r->gen, seed));
        MPT_CURAND_CHECK(curandSetGeneratorOffset(r->gen, offset));
    }
    MPT_CURAND_CHECK(curandGenerateUniform(r->gen, out, n));
    r->positioned = 1;
    r->seed = seed;
    r->offset = offset + n;
}

void mpt_rng_shuffle(mpt_rng *r, int32_t *perm, size_t n, float *scratch, uint64_t seed, uint64_t offset) {
    if (n < 2) return;
    mpt_rng_uniform(r, scratch, n, seed, offset);
    for (size_t i = n - 1; i > 0; i--) {
        /* u in (0,1] -> j in [0, i] */
        size_t j = (size_t)((double)scratch[i] * (double)(i + 1));
        if (j > i) j = i;
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
