/*
 * tests/test_rng.c - the host Philox stream (engine/rng.c) and engine/numerics.h's mpt_philox_uniform (what
 * the CUDA dropout kernel computes in place).
 * Where cuRAND is present (builds with the CUDA backend; this test links cuRAND itself, the engine does not):
 * both equal cuRAND's host generator CURAND_RNG_PSEUDO_PHILOX4_32_10 bit for bit, for seeds with high bits
 * set, offsets not multiple of 4, across its 65536-subsequence layout's boundaries and past 2^32, sizes from 1
 * to beyond 2^20. So the CPU-only build (no cuRAND) draws the same initial weights, shuffles and dropout masks.
 * Where Random123 is installed (librandom123-dev, a build dependency of ./run): the stream equals Random123's
 * philox4x32 in cuRAND's layout, an implementation independent of engine/numerics.h's cipher (tests/test_dtype.c
 * checks that cipher against Random123's published known-answer vectors).
 * Everywhere: a continued draw equals a fresh draw at the same (seed, offset), streams differ, uniforms lie in
 * (0, 1], and shuffles are permutations that repeat for the same (seed, offset).
 */
#include <string.h>

#include "engine/rng.h"
#include "harness.h"
#include "engine/numerics.h"
#ifdef MPT_TEST_HAVE_CURAND
#include <curand.h>
#endif
#ifdef MPT_TEST_HAVE_RANDOM123
#include <Random123/philox.h>
#endif

#ifdef MPT_TEST_HAVE_CURAND
START_TEST(test_equals_curand_host) {
    static const uint64_t seeds[] = {0, 42, 0x0123456789abcdefull, UINT64_MAX};
    static const uint64_t offsets[] = {0, 3, 5, 123457, 4ull * 65536 * 3 + 9, 1ull << 33, (5ull << 48) + 262143};
    static const size_t sizes[] = {1, 7, 1000, (1u << 20) + 3};
    curandGenerator_t g;
    ck_assert_int_eq(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10), CURAND_STATUS_SUCCESS);
    float *want = malloc(((1u << 20) + 3) * sizeof *want), *got = malloc(((1u << 20) + 3) * sizeof *got);
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++)
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                ck_assert_int_eq(curandSetPseudoRandomGeneratorSeed(g, seeds[s]), CURAND_STATUS_SUCCESS);
                ck_assert_int_eq(curandSetGeneratorOffset(g, offsets[o]), CURAND_STATUS_SUCCESS);
                ck_assert_int_eq(curandGenerateUniform(g, want, sizes[k]), CURAND_STATUS_SUCCESS);
                mpt_rng_uniform(got, sizes[k], seeds[s], offsets[o]);
                for (size_t i = 0; i < sizes[k]; i++) {
                    float e = mpt_philox_uniform(seeds[s], offsets[o] + i);
                    if (memcmp(&want[i], &got[i], sizeof want[i]) != 0 || memcmp(&want[i], &e, sizeof e) != 0)
                        ck_abort_msg("seed %llu offset %llu n %zu: element %zu is %a (engine/rng.c), %a "
                                     "(mpt_philox_uniform); cuRAND's host generator gives %a",
                                     (unsigned long long)seeds[s], (unsigned long long)offsets[o], sizes[k], i,
                                     (double)got[i], (double)e, (double)want[i]);
                }
            }
    free(want);
    free(got);
    curandDestroyGenerator(g);
}
END_TEST
#endif

START_TEST(test_continued_equals_fresh) {
    static const size_t sizes[][2] = {{7, 13}, {1, 1}, {4096, 5}, {128 * 9216, 128 * 128 + 6}, {3, 100003}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n1 = sizes[k][0], n2 = sizes[k][1];
        float *x = malloc((n1 + n2) * sizeof *x), *y = malloc(n2 * sizeof *y);
        uint64_t seed = 1000 + k, off = 17 * k;
        mpt_rng_uniform(x, n1, seed, off);
        mpt_rng_uniform(x + n1, n2, seed, off + n1); /* continued */
        float elsewhere[3];
        mpt_rng_uniform(elsewhere, 3, seed + 1, 0);  /* another stream in between */
        mpt_rng_uniform(y, n2, seed, off + n1);      /* fresh */
        ck_assert_msg(memcmp(x + n1, y, n2 * sizeof *y) == 0, "sizes %zu, %zu: continued draw differs from a fresh one",
                      n1, n2);
        for (size_t i = 0; i < n1 + n2; i++) ck_assert(x[i] > 0.0f && x[i] <= 1.0f);
        free(x);
        free(y);
    }
}
END_TEST

START_TEST(test_streams_and_shuffle) {
    ck_assert(mpt_rng_stream_seed(0, MPT_RNG_INIT) != mpt_rng_stream_seed(0, MPT_RNG_DROPOUT));
    ck_assert(mpt_rng_stream_seed(0, MPT_RNG_INIT) != mpt_rng_stream_seed(1, MPT_RNG_INIT));
    enum { N = 1000 };
    int32_t p1[N], p2[N];
    float scratch[N];
    for (int i = 0; i < N; i++) p1[i] = p2[i] = i;
    mpt_rng_shuffle(p1, N, scratch, 5, 0);
    mpt_rng_shuffle(p2, N, scratch, 5, 0);
    ck_assert(memcmp(p1, p2, sizeof p1) == 0);
    int seen[N] = {0}, moved = 0;
    for (int i = 0; i < N; i++) {
        ck_assert(p1[i] >= 0 && p1[i] < N);
        seen[p1[i]]++;
        moved += p1[i] != i;
    }
    for (int i = 0; i < N; i++) ck_assert_int_eq(seen[i], 1);
    ck_assert_int_gt(moved, N / 2);
}
END_TEST

#ifdef MPT_TEST_HAVE_RANDOM123
/* The stream computed independently of engine/numerics.h: Random123's philox4x32 (Debian librandom123-dev) in
 * cuRAND's host-generator layout (engine/rng.c's header): position p is word p % 4 of the block with counter
 * {b low, b high, t low, t high}, q = p / 4, t = q % 65536, b = q / 65536, key {seed low, seed high}; the uniform is
 * x * 2^-32 + 2^-33 in float arithmetic (cuRAND's _curand_uniform: two roundings, the product exact). */
static float random123_uniform(uint64_t seed, uint64_t p) {
    const uint64_t q = p / 4, t = q % 65536u, b = q / 65536u;
    philox4x32_ctr_t ctr = {{(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)t, (uint32_t)(t >> 32)}};
    philox4x32_key_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    philox4x32_ctr_t r = philox4x32(ctr, key);
    const float inv = 2.3283064e-10f;
    float scaled = (float)r.v[p % 4] * inv;
    return scaled + inv / 2.0f;
}

START_TEST(test_rng_equals_random123) {
    static const struct {
        uint64_t seed, offset;
        size_t n;
    } cases[] = {{0, 0, 5000},
                 {12345, 3, 1001},
                 {0xdeadbeefcafef00dull, 262144 - 517, 2000},      /* crosses the first round of 65536 blocks */
                 {7, 3 * 262144 + 1, 262144 + 9},                  /* a whole round, odd start */
                 {99, ((uint64_t)1 << 34) + 6, 777},               /* round number past 2^16 */
                 {1, ((uint64_t)5 << 48) + 262143, 3}};            /* round number's high word in use */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint64_t seed = k == 1 ? mpt_rng_stream_seed(cases[k].seed, MPT_RNG_DROPOUT) : cases[k].seed;
        size_t n = cases[k].n;
        float *x = malloc(n * sizeof *x);
        mpt_rng_uniform(x, n, seed, cases[k].offset);
        for (size_t i = 0; i < n; i++) {
            float y = random123_uniform(seed, cases[k].offset + i);
            if (memcmp(&x[i], &y, sizeof y) != 0)
                ck_abort_msg("seed %llu offset %llu: element %zu is %.9g from engine/rng.c, %.9g from Random123",
                             (unsigned long long)seed, (unsigned long long)cases[k].offset, i, (double)x[i], (double)y);
        }
        free(x);
    }
}
END_TEST
#endif

int main(void) {
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("rng");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_continued_equals_fresh);
    tcase_add_test(tc, test_streams_and_shuffle);
#ifdef MPT_TEST_HAVE_RANDOM123
    tcase_add_test(tc, test_rng_equals_random123);
#endif
#ifdef MPT_TEST_HAVE_CURAND
    tcase_add_test(tc, test_equals_curand_host);
#endif
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
