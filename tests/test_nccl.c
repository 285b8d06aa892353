/*
 * tests/test_nccl.c - the NCCL gradient all-reduce of the CUDA module (kernels/cuda/nccl.cu) with one rank,
 * as the issue asks (suite 'cuda'): NCCL with one rank needs no MPI (a local ncclGetUniqueId, then
 * ncclCommInitRank with nranks = 1). Skipped (exit 77) like test_cuda without a usable GPU (MPT_REQUIRE_CUDA=1
 * makes that a failure), and when libnccl.so.2 cannot be loaded (the module loads it at run time; the reason is
 * printed); a failure when the build found NCCL (MPT_HAVE_NCCL) but the module says it was built without it.
 * With one rank the all-reduce returns each rank's own term, so every wire must give, element by element:
 *   fp32: weight * x (one FP32 product; weight 0.5 is exact);
 *   bf16/fp16: the round-to-nearest-even of weight * x to the wire dtype, widened (engine/numerics.h's
 *   conversions, themselves checked bit for bit against the format definitions in test_dtype);
 * over values spanning 40 binades (FP16's subnormals and overflow included: 1e5 * 0.5 becomes inf in FP16, so
 * found_inf would skip the step), with a NaN that must stay NaN, across three tensors in one NCCL group.
 * The failed-rank release (mpt_cuda_nccl_comm_abort: ncclCommAbort) after an all-reduce returns, clears the
 * pointer, is NULL-safe, and leaves the GPU usable: a fresh communicator made afterwards all-reduces exactly.
 * (That an abort does not wait for a failed peer needs two GPUs; with one rank there is no peer.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gate.h"
#include "harness.h"
#include "kernels/cuda/cuda_backend.h"
#include "engine/numerics.h"
#include "mpt_config.h"

static mpt_backend *gpu;
static mpt_nccl_comm *comm;

static float wire_of(float v, mpt_dtype wire) {
    if (wire == MPT_DTYPE_BF16) return mpt_bf16_to_f32(mpt_f32_to_bf16(v));
    if (wire == MPT_DTYPE_F16) return mpt_f16_to_f32(mpt_f32_to_f16(v));
    return v;
}

START_TEST(one_rank_allreduce_is_the_weighted_term_in_the_wire_dtype) {
    static const mpt_dtype wires[3] = {MPT_DTYPE_F32, MPT_DTYPE_BF16, MPT_DTYPE_F16};
    mpt_dtype wire = wires[_i];
    enum { T = 3 };
    const int64_t counts[T] = {1000, 1, 4097};
    float *host[T], *dev[T];
    tests_rng g = {42u + (uint64_t)_i};
    for (int t = 0; t < T; t++) {
        host[t] = malloc((size_t)counts[t] * sizeof(float));
        for (int64_t i = 0; i < counts[t]; i++)
            host[t][i] = (float)((tests_next(&g) & 1 ? -1.0 : 1.0) * ldexp(tests_uniform(&g, 1.0, 2.0),
                                                                           tests_int(&g, -30, 10)));
        dev[t] = gpu->alloc(gpu, (size_t)counts[t] * sizeof(float));
        ck_assert(dev[t] != NULL);
    }
    host[0][0] = NAN;
    host[0][1] = 1e5f; /* 0.5 x = 5e4: still finite in FP16 (65504) */
    host[2][7] = 2e5f; /* 0.5 x = 1e5: inf in FP16, as an overflowing wire would give (found_inf) */
    for (int t = 0; t < T; t++) gpu->from_host(gpu, dev[t], host[t], (size_t)counts[t] * sizeof(float));
    mpt_cuda_nccl_allreduce(gpu, comm, dev, counts, T, wire, 0.5f);
    int ok = 1;
    for (int t = 0; t < T; t++) {
        float *got = malloc((size_t)counts[t] * sizeof(float));
        gpu->to_host(gpu, got, dev[t], (size_t)counts[t] * sizeof(float));
        for (int64_t i = 0; i < counts[t]; i++) {
            float want = wire_of(0.5f * host[t][i], wire);
            int same = isnan(want) ? isnan(got[i]) : memcmp(&want, &got[i], sizeof want) == 0;
            if (!same && ok) fprintf(stderr, "tensor %d element %lld: %a, expected %a\n", t, (long long)i, got[i], want);
            ok &= same;
        }
        free(got);
        gpu->free(gpu, dev[t]);
        free(host[t]);
    }
    ck_assert_msg(ok, "%s wire: an element differs from RNE(0.5 x)", mpt_dtype_name(wire));
    if (wire == MPT_DTYPE_F16) ck_assert(isinf(wire_of(0.5f * 2e5f, wire))); /* the overflow case is present */
}
END_TEST

/* An FP32 all-reduce of n values x_i = i + 1 with weight 0.5 on communicator c: 1 if every element is exactly
 * 0.5 x_i (one rank: the sum is the rank's own term). */
static int halves_exactly(mpt_nccl_comm *c, int64_t n) {
    float *host = malloc((size_t)n * sizeof(float)), *dev = gpu->alloc(gpu, (size_t)n * sizeof(float));
    ck_assert(host != NULL && dev != NULL);
    for (int64_t i = 0; i < n; i++) host[i] = (float)(i + 1);
    gpu->from_host(gpu, dev, host, (size_t)n * sizeof(float));
    mpt_cuda_nccl_allreduce(gpu, c, &dev, &n, 1, MPT_DTYPE_F32, 0.5f);
    gpu->to_host(gpu, host, dev, (size_t)n * sizeof(float));
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= host[i] == 0.5f * (float)(i + 1);
    gpu->free(gpu, dev);
    free(host);
    return ok;
}

/* A communicator of one rank on a fresh id, with scratch for n elements. */
static mpt_nccl_comm *one_rank_comm(int64_t n) {
    unsigned char id[MPT_NCCL_ID_BYTES];
    mpt_nccl_comm *c = NULL;
    ck_assert_msg(mpt_cuda_nccl_unique_id(id) == MPT_OK, "%s", mpt_last_error());
    ck_assert_msg(mpt_cuda_nccl_comm_create(gpu, &c, id, 1, 0, n) == MPT_OK, "%s", mpt_last_error());
    ck_assert(c != NULL);
    return c;
}

START_TEST(abort_releases_the_communicator_and_the_gpu_stays_usable) {
    mpt_nccl_comm *c = one_rank_comm(1024);
    ck_assert_msg(halves_exactly(c, 1024), "all-reduce on the communicator to be aborted");
    mpt_cuda_nccl_comm_abort(&c);
    ck_assert(c == NULL);
    mpt_cuda_nccl_comm_abort(&c); /* NULL-safe */
    mpt_nccl_comm *again = one_rank_comm(1024);
    ck_assert_msg(halves_exactly(again, 1024), "all-reduce on a communicator made after an abort");
    mpt_cuda_nccl_comm_free(&again);
    ck_assert(again == NULL);
}
END_TEST

int main(void) {
    int gate = mpt_test_cuda_gate("test_nccl");
    if (gate >= 0) return gate;
    if (!mpt_cuda_nccl_available()) {
#ifdef MPT_HAVE_NCCL
        if (strstr(mpt_last_error(), "built without NCCL") != NULL) {
            fprintf(stderr, "test_nccl: FAILED: the build found NCCL but the CUDA module has no NCCL path\n");
            return 1;
        }
        /* NCCL is loaded at run time: a machine without it runs the CUDA backend, and skips this program */
        printf("test_nccl: skipped: %s\n", mpt_last_error());
#else
        printf("test_nccl: skipped: this build has no NCCL (Meson feature 'nccl')\n");
#endif
        return 77;
    }
    setenv("CK_FORK", "no", 1); /* CUDA does not survive fork() */
    gpu = mpt_backend_cuda_create();
    unsigned char id[MPT_NCCL_ID_BYTES];
    if (!gpu || mpt_cuda_nccl_unique_id(id) != MPT_OK || mpt_cuda_nccl_comm_create(gpu, &comm, id, 1, 0, 8192) != MPT_OK) {
        fprintf(stderr, "test_nccl: FAILED: %s\n", mpt_last_error());
        return 1;
    }
    Suite *s = suite_create("nccl");
    TCase *tc = tcase_create("one rank");
    tcase_add_loop_test(tc, one_rank_allreduce_is_the_weighted_term_in_the_wire_dtype, 0, 3);
    tcase_add_test(tc, abort_releases_the_communicator_and_the_gpu_stays_usable);
    suite_add_tcase(s, tc);
    int rc = mpt_test_run(s);
    mpt_cuda_nccl_comm_free(&comm);
    mpt_backend_free(&gpu);
    return rc;
}
