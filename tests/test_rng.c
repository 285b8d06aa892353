/*
 * tests/test_rng.c - the Philox stream wrapper (engine/rng.c).
 * A continued draw (the generator left positioned after the previous call) must equal a fresh draw at the
 * same (seed, offset), for odd and large sizes: the wrapper skips cuRAND's re-initialisation when it can, and
 * this proves that shortcut changes no value. Also: streams differ, uniforms lie in (0, 1], and shuffles are
 * permutations that repeat for the same (seed, offset). And kernels/elemwise.h's mpt_philox_uniform (what the
 * CUDA dropout kernel computes in place) gives cuRAND's stream bit for bit, across its 65536-subsequence
 * layout's boundaries and at offsets past 2^32.
 */
#include <string.h>

#include "engine/rng.h"
#include "harness.h"
#include "kernels/elemwise.h"

START_TEST(test_continued_equals_fresh) {
    static const size_t sizes[][2] = {{7, 13}, {1, 1}, {4096, 5}, {128 * 9216, 128 * 128 + 6}, {3, 100003}};
    mpt_rng *a = mpt_rng_create(), *b = mpt_rng_create();
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n1 = sizes[k][0], n2 = sizes[k][1];
        float *x = malloc((n1 + n2) * sizeof *x), *y = malloc(n2 * sizeof *y);
        uint64_t seed = 1000 + k, off = 17 * k;
        mpt_rng_uniform(a, x, n1, seed, off);
        mpt_rng_uniform(a, x + n1, n2, seed, off + n1); /* continued */
        mpt_rng_uniform(b, y, 3, seed + 1, 0);          /* move b elsewhere first */
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

START_TEST(test_philox_element_equals_curand) {
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
                ck_abort_msg("seed %llu offset %llu: element %zu is %.9g from cuRAND, %.9g from mpt_philox_uniform",
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
    tcase_add_test(tc, test_philox_element_equals_curand);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
