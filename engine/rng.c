/*
 * engine/rng.c - the host Philox4x32-10 stream, computed without cuRAND.
 *
 * cuRAND's host generator CURAND_RNG_PSEUDO_PHILOX4_32_10 (default ordering) emulates 65536 device threads:
 * thread t encrypts counters {b low, b high, t low, t high} (b = 0, 1, ...) under key {seed low, seed high}, and
 * the output interleaves them four words at a time. Position p of the stream (p = offset + i) is therefore
 * word p % 4 of the block with q = p / 4, t = q % 65536, b = q / 65536. Each 32-bit word x becomes the uniform
 * x * 2^-32 + 2^-33 in float arithmetic (cuRAND's _curand_uniform, curand_uniform.h), in (0, 1].
 * tests/test_rng.c checks the result bit for bit against cuRAND's host generator where cuRAND is present.
 * The block cipher is Random123's philox4x32 (Debian librandom123-dev) when the build found it; else each
 * element is engine/numerics.h's mpt_philox_uniform (the same layout, what the CUDA dropout kernel computes;
 * tests/test_rng.c checks the two agree).
 */
#include "engine/rng.h"

#include <stdlib.h>

#include "mpt_config.h"
#ifdef MPT_HAVE_RANDOM123
#include <Random123/philox.h>
#else
#include "engine/numerics.h"
#endif

#define MPT_RNG_THREADS 65536u /* cuRAND's host Philox generator: the device threads it emulates */

struct mpt_rng {
    int unused; /* the stream is a pure function of (seed, offset); the handle keeps the API's shape */
};

mpt_rng *mpt_rng_create(void) {
    mpt_rng *r = calloc(1, sizeof *r);
    MPT_ASSERT(r != NULL);
    return r;
}

void mpt_rng_free(mpt_rng **pr) {
    if (!*pr) return;
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

#ifdef MPT_HAVE_RANDOM123
/* The four words of block q (the q-th group of four stream positions) for key = seed. */
static void philox_block(uint64_t seed, uint64_t q, uint32_t out[4]) {
    uint64_t t = q % MPT_RNG_THREADS, b = q / MPT_RNG_THREADS;
    philox4x32_ctr_t ctr = {{(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)t, (uint32_t)(t >> 32)}};
    philox4x32_key_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    philox4x32_ctr_t r = philox4x32(ctr, key);
    for (int w = 0; w < 4; w++) out[w] = r.v[w];
}

/* cuRAND's _curand_uniform: x * CURAND_2POW32_INV + CURAND_2POW32_INV / 2, two float roundings (C11 mode does
 * not contract them into an FMA; the product is exact anyway). */
static float uniform_of(uint32_t x) {
    const float inv = 2.3283064e-10f;
    float scaled = (float)x * inv;
    return scaled + inv / 2.0f;
}

void mpt_rng_uniform(mpt_rng *r, float *out, size_t n, uint64_t seed, uint64_t offset) {
    (void)r;
    uint32_t words[4];
    uint64_t block = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        uint64_t p = offset + i;
        if (p / 4 != block) {
            block = p / 4;
            philox_block(seed, block, words);
        }
        out[i] = uniform_of(words[p % 4]);
    }
}
#else
void mpt_rng_uniform(mpt_rng *r, float *out, size_t n, uint64_t seed, uint64_t offset) {
    (void)r;
    for (size_t i = 0; i < n; i++) out[i] = mpt_philox_uniform(seed, offset + i);
}
#endif

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
