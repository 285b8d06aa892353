/*
 * tests/harness.h - shared helpers for the Check test programs.
 *
 * Every test program builds one Suite and ends with `return mpt_test_run(suite);`, which runs it (forking
 * per test unless CK_FORK=no), prints Check's summary line ("N%: Checks: N, Failures: N, Errors: N", which
 * ./run test adds up) and returns 0 only if every test passed. Random inputs come from a fixed-seed
 * generator inside the test (tests_rand_*), never from files.
 */
#ifndef MPT_TESTS_HARNESS_H
#define MPT_TESTS_HARNESS_H

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Check's default limit on an assertion's message is 4 KiB: a longer one (a test printing a command's whole output)
 * aborts the test process with "Message string too long", reported as "Early exit with return value 2" instead of
 * the failure. Check allocates the limit for every message it passes, each assertion's location included (test_dtype:
 * 2.7 s at 4 KiB, 63 s at 1 MiB), so mpt_test_run keeps the default and the programs whose failures print a command's
 * output run with mpt_test_run_msg(s, the size of their output buffer + MPT_TEST_MSG_MARGIN). */
#define MPT_TEST_MSG_MARGIN 4096

static inline int mpt_test_run_msg(Suite *s, size_t max_msg) {
    if (max_msg > 0) check_set_max_msg_size(max_msg);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static inline int mpt_test_run(Suite *s) { return mpt_test_run_msg(s, 0); }

/* xorshift64* test generator: reproducible, independent of the engine's RNG. */
typedef struct { uint64_t s; } tests_rng;
static inline uint64_t tests_next(tests_rng *r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}
/* Uniform double in [lo, hi). */
static inline double tests_uniform(tests_rng *r, double lo, double hi) {
    return lo + (hi - lo) * (double)(tests_next(r) >> 11) * 0x1p-53;
}
/* Uniform int in [lo, hi]. */
static inline int tests_int(tests_rng *r, int lo, int hi) {
    return lo + (int)(tests_next(r) % (uint64_t)(hi - lo + 1));
}

/* Whether this process's environment sets variable `var` to "1" (the rule of the MPT_CUDA_* switches). */
static inline int mpt_test_env_on(const char *var) {
    const char *v = getenv(var);
    return v != NULL && strcmp(v, "1") == 0;
}

/* The whole text of file `path`, in a buffer of this test program's that the next call overwrites. Fails the test,
 * naming the file, when it cannot be read or does not fit (MPT_TEST_TEXT_MAX bytes): a truncated text would let a
 * check that something is absent pass on a file that holds it. */
enum { MPT_TEST_TEXT_MAX = 1 << 20 };
static inline char *mpt_test_read_text(const char *path) {
    static char buf[MPT_TEST_TEXT_MAX + 1];
    FILE *f = fopen(path, "rb");
    if (!f) ck_abort_msg("%s: %s", path, strerror(errno));
    const size_t n = fread(buf, 1, MPT_TEST_TEXT_MAX, f);
    const int more = fgetc(f) != EOF, failed = ferror(f);
    fclose(f);
    if (failed) ck_abort_msg("%s: read error", path);
    if (more) ck_abort_msg("%s: longer than the %d bytes the tests read", path, (int)MPT_TEST_TEXT_MAX);
    buf[n] = '\0';
    return buf;
}

/* mpt_test_read_text into dst (cap bytes), failing the test when the text does not fit. */
static inline void mpt_test_read_text_into(const char *path, char *dst, size_t cap) {
    const char *t = mpt_test_read_text(path);
    const size_t n = strlen(t);
    if (n >= cap) ck_abort_msg("%s: %zu bytes, more than the test's %zu-byte copy", path, n, cap - 1);
    memcpy(dst, t, n + 1);
}

#endif
