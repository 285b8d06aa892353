/*
 * engine/rng.c - the host Philox4x32-10 stream, computed without cuRAND (engine/rng.h).
 *
 * cuRAND's host generator CURAND_RNG_PSEUDO_PHILOX4_32_10 (default ordering) emulates 65536 device threads:
 * thread t encrypts counters {b low, b high, t low, t high} (b = 0, 1, ...) under key {seed low, seed high}, and
 * the output interleaves them four words at a time. Position p of the stream is word p % 4 of the block with
 * q = p / 4, t = q % 65536, b = q / 65536, and each 32-bit word x becomes the uniform x * 2^-32 + 2^-33 in (0, 1]
 * (cuRAND's _curand_uniform). engine/numerics.h's mpt_philox_uniform computes exactly that for one position, and
 * the CUDA dropout kernel calls the same function. tests/test_rng.c checks the stream bit for bit against cuRAND's
 * host generator (where cuRAND is present) and against Random123's philox4x32 (where it is installed).
 */
#include "engine/rng.h"

#include "engine/numerics.h"

uint64_t mpt_rng_stream_seed(uint64_t seed, mpt_rng_stream stream) {
    uint64_t z = seed ^ ((uint64_t)stream * 0x9e3779b97f4a7c15ull);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mpt_rng_uniform(float *out, size_t n, uint64_t seed, uint64_t offset) {
    for (size_t i = 0; i < n; i++) out[i] = mpt_philox_uniform(seed, offset + i);
}

void mpt_rng_shuffle(int32_t *perm, size_t n, float *scratch, uint64_t seed, uint64_t offset) {
    if (n < 2) return;
    mpt_rng_uniform(scratch, n, seed, offset);
    for (size_t i = n - 1; i > 0; i--) {
        /* u in (0,1] -> j in [0, i] */
        size_t j = (size_t)((double)scratch[i] * (double)(i + 1));
        if (j > i) j = i;
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
