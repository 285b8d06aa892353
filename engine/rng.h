/*
 * engine/rng.h - reproducible randomness from one seed (ARCHITECTURE decision 7).
 *
 * All random numbers are cuRAND's Philox4x32-10 sequence (CURAND_RNG_PSEUDO_PHILOX4_32_10): on the host computed
 * without cuRAND (engine/rng.c: Random123's philox4x32 in cuRAND's output order, so the CPU-only build needs no
 * CUDA library; tests/test_rng.c proves it bit-identical to cuRAND's host generator where cuRAND is present),
 * on the GPU by cuRAND's device generator; the cuRAND documentation states that host and device generators of
 * the same type, seed and offset produce the same sequence. Each use draws from its own stream: stream seed = splitmix64(run seed ^ stream id), and a
 * position in the stream is the generator's offset. Weights are always initialised on the host and copied
 * to the device, so both backends start from identical weights.
 */
#ifndef MPT_ENGINE_RNG_H
#define MPT_ENGINE_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"
#include "engine/status.h"

typedef enum mpt_rng_stream {
    MPT_RNG_INIT = 1,    /* parameter initialisation */
    MPT_RNG_DROPOUT = 2, /* dropout masks */
    MPT_RNG_SHUFFLE = 3, /* epoch shuffles */
    MPT_RNG_SPLIT = 4,   /* validation split */
    MPT_RNG_TEST = 5,    /* test data */
    MPT_RNG_ROUNDING = 6,/* stochastic rounding of weight updates (Philox key; engine/numerics.h mpt_sr_bits) */
} mpt_rng_stream;

typedef struct mpt_rng mpt_rng; /* a host Philox stream handle */

/* Creates a host Philox generator (aborts only if out of memory); free with mpt_rng_free, which sets *r to
 * NULL. It holds no state: every call's numbers are a function of its (seed, offset) alone, so one generator
 * may serve several threads. */
MPT_API mpt_rng *mpt_rng_create(void);
MPT_API void mpt_rng_free(mpt_rng **r);
/* Seed of stream `stream` for run seed `seed`: splitmix64(seed ^ (stream * 0x9e3779b97f4a7c15)). */
MPT_API uint64_t mpt_rng_stream_seed(uint64_t seed, mpt_rng_stream stream);
/* out[0..n) = uniform floats in (0, 1], the cuRAND Philox sequence for (seed, offset). */
MPT_API void mpt_rng_uniform(mpt_rng *r, float *out, size_t n, uint64_t seed, uint64_t offset);
/* Fisher-Yates shuffle of perm[0..n) (which the caller fills, e.g. 0..n-1) with uniforms from (seed, offset);
 * uses `scratch` of n floats. */
MPT_API void mpt_rng_shuffle(mpt_rng *r, int32_t *perm, size_t n, float *scratch, uint64_t seed, uint64_t offset);

#endif
