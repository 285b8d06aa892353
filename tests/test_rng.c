/*
 * tests/test_rng.c - the host Philox stream (engine/rng.c) and engine/numerics.h's mpt_philox_uniform (what
 * the CUDA dropout kernel computes in place).
 * Where cuRAND is present (builds with the CUDA backend; this test links cuRAND itself, the engine does not):
 * both equal cuRAND's host generator CURAND_RNG_PSEUDO_PHILOX4_32_10 bit for bit, for seeds with high bits
 * set, offsets not multiple of 4, across its 65536-subsequence layout's boundaries and past 2^32, sizes from 1
 * to beyond 2^20. So the CPU-only build (no cuRAND) draws the same initial weights, shuffles and dropout masks.
 * Everywhere: the two agree with each other (engine/rng.c uses Random123's cipher when the build found it),
 * a continued draw equals a fresh draw at the same (seed, offset), streams differ, uniforms lie in (0, 1],
 * and shuffles are permutations that repeat for the same (seed, offset).
 */
#include <string.h>

#include "engine/rng.h"
#include "harness.h"
#include "engine/numerics.h"
#ifdef MPT_TEST_HAVE_CURAND
#include <curand.h>
#endif

#ifdef MPT_TEST_HAVE_CURAND
START_TEST(test_equals_curand_host) {
    static const uint64_t seeds[] = {0, 42, 0x0123456789abcdefull, UINT64_MAX};
    static const uint64_t offsets[] = {0, 3, 5, 123457, 4ull * 65536 * 3 + 9, 1ull << 33, (5ull << 48) + 262143};
    static const size_t sizes[] = {1, 7, 1000, (1u << 20) + 3};
    curandGenerator_t g;
    ck_assert_int_eq(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10), CURAND_STATUS_SUCCESS);
    float *want = malloc(((1u << 20) + 3) * sizeof *want), *got = malloc(((1u << 20) + 3) * sizeof *got);
    mpt_rng *r = mpt_rng_create();
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++)
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                ck_assert_int_eq(curandSetPseudoRandomGeneratorSeed(g, seeds[s]), CURAND_STATUS_SUCCESS);
                ck_assert_int_eq(curandSetGeneratorOffset(g, offsets[o]), CURAND_STATUS_SUCCESS);
                ck_assert_int_eq(curandGenerateUniform(g, want, sizes[k]), CURAND_STATUS_SUCCESS);
                mpt_rng_uniform(r, got, sizes[k], seeds[s], offsets[o]);
                for (size_t i = 0; i < sizes[k]; i++) {
                    float e = mpt_philox_uniform(seeds[s], offsets[o] + i);
                    if (memcmp(&want[i], &got[i], sizeof want[i]) != 0 || memcmp(&want[i], &e, sizeof e) != 0)
                        ck_abort_msg("seed %llu offset %llu n %zu: element %zu is %a (engine/rng.c), %a "
                                     "(mpt_philox_uniform); cuRAND's host generator gives %a",
                                     (unsigned long long)seeds[s], (unsigned long long)offsets[o], sizes[k], i,
                                     (double)got[i], (double)e, (double)want[i]);
                }
            }
    mpt_rng_free(&r);
    free(want);
    free(got);
    curandDestroyGenerator(g);
}
END_TEST
#endif

START_TEST(test_continued_equals_fresh) {
    static const size_t sizes[][2] = {{7, 13}, {1, 1}, {4096, 5}, {128 * 9216, 128 * 128 + 6}, {3, 100003}};
    mpt_rng *a = mpt_rng_create(), *b = mpt_rng_create();
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n1 = sizes[k][0], n2 = sizes[k][1];
        float *x = malloc((n1 + n2) * sizeof *x), *y = malloc(n2 * sizeof *y);
        uint64_t seed = 1000 + k, off = 17 * k;
        mpt_rng_uniform(a, x, n1, seed, off);
        mpt_rng_uniform(a, x + n1, n2, seed, off + n1); /* continued */
        float elsewhere[3];
        mpt_rng_uniform(b, elsewhere, 3, seed + 1, 0);  /* move b elsewhere first */
        mpt_rng_uniform(b, y, n2, seed, off + n1);      /* fresh */
        ck_assert_msg(memcmp(x + n1, y, n2 * sizeof *y) == 0, "sizes %zu, %zu: continued draw differs from a fresh one",
                      n1, n2);
        for (size_t i = 0; i < n1 + n2; i++) ck_assert(x[i] > 0.0f && x[i] <= 1.0f);
        free(x);
        free(y);
    }
    mpt_rng_free(&a);
    mpt_rng_free(&b);
    ck_assert_ptr_null(a);
}
END_TEST

START_TEST(test_streams_and_shuffle) {
    ck_assert(mpt_rng_stream_seed(0, MPT_RNG_INIT) != mpt_rng_stream_seed(0, MPT_RNG_DROPOUT));
    ck_assert(mpt_rng_stream_seed(0, MPT_RNG_INIT) != mpt_rng_stream_seed(1, MPT_RNG_INIT));
    mpt_rng *r = mpt_rng_create();
    enum { N = 1000 };
    int32_t p1[N], p2[N];
    float scratch[N];
    for (int i = 0; i < N; i++) p1[i] = p2[i] = i;
    mpt_rng_shuffle(r, p1, N, scratch, 5, 0);
    mpt_rng_shuffle(r, p2, N, scratch, 5, 0);
    ck_assert(memcmp(p1, p2, sizeof p1) == 0);
    int seen[N] = {0}, moved = 0;
    for (int i = 0; i < N; i++) {
        ck_assert(p1[i] >= 0 && p1[i] < N);
        seen[p1[i]]++;
        moved += p1[i] != i;
    }
    for (int i = 0; i < N; i++) ck_assert_int_eq(seen[i], 1);
    ck_assert_int_gt(moved, N / 2);
    mpt_rng_free(&r);
}
END_TEST

START_TEST(test_rng_equals_philox_element) {
    static const struct {
        uint64_t seed, offset;
        size_t n;
    } cases[] = {{0, 0, 5000},
                 {12345, 3, 1001},
                 {0xdeadbeefcafef00dull, 262144 - 517, 2000},      /* crosses the first round of 65536 blocks */
                 {7, 3 * 262144 + 1, 262144 + 9},                  /* a whole round, odd start */
                 {99, ((uint64_t)1 << 34) + 6, 777},               /* round number past 2^16 */
                 {1, ((uint64_t)5 << 48) + 262143, 3}};            /* round number's high word in use */
    mpt_rng *r = mpt_rng_create();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint64_t seed = k == 1 ? mpt_rng_stream_seed(cases[k].seed, MPT_RNG_DROPOUT) : cases[k].seed;
        size_t n = cases[k].n;
        float *x = malloc(n * sizeof *x);
        mpt_rng_uniform(r, x, n, seed, cases[k].offset);
        for (size_t i = 0; i < n; i++) {
            float y = mpt_philox_uniform(seed, cases[k].offset + i);
            if (memcmp(&x[i], &y, sizeof y) != 0)
                ck_abort_msg("seed %llu offset %llu: element %zu is %.9g from engine/rng.c, %.9g from mpt_philox_uniform",
                             (unsigned long long)seed, (unsigned long long)cases[k].offset, i, (double)x[i], (double)y);
        }
        free(x);
    }
    mpt_rng_free(&r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("rng");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_continued_equals_fresh);
    tcase_add_test(tc, test_streams_and_shuffle);
    tcase_add_test(tc, test_rng_equals_philox_element);
#ifdef MPT_TEST_HAVE_CURAND
    tcase_add_test(tc, test_equals_curand_host);
#endif
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
