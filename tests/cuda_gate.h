/*
 * tests/cuda_gate.h - the start of every cuda-suite program: run, skip (exit 77) or fail, by what the machine has.
 *
 * A machine without a usable GPU skips only for "no driver" / "no device" (MPT_CUDA_NO_DRIVER/NO_DEVICE); any
 * other CUDA error is a failure (MPT_CUDA_BROKEN), and with MPT_REQUIRE_CUDA=1 (set by bench/gpu.sh and the GPU
 * scripts) every reason is a failure, so a broken setup never passes as "skipped". The message names the
 * program and mpt_cuda_probe()'s reason; test_cuda_require checks it for each program it lists.
 */
#ifndef MPT_TESTS_CUDA_GATE_H
#define MPT_TESTS_CUDA_GATE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda_backend.h"

/* -1 when a GPU is usable and the program should run its tests; otherwise the exit status to return:
 * 77 (meson's skip) or 1 (failure), after one line naming `program` and the reason. */
static inline int mpt_test_cuda_gate(const char *program) {
    char why[512];
    mpt_cuda_probe_result probe = mpt_cuda_probe(why, sizeof why);
    if (probe == MPT_CUDA_USABLE) return -1;
    const char *req = getenv("MPT_REQUIRE_CUDA");
    if (req != NULL && strcmp(req, "1") == 0) {
        fprintf(stderr, "%s: FAILED (MPT_REQUIRE_CUDA=1 is set): %s\n", program, why);
        return 1;
    }
    if (probe == MPT_CUDA_BROKEN) {
        fprintf(stderr, "%s: FAILED: %s\n", program, why);
        return 1;
    }
    printf("%s: skipped: %s (set MPT_REQUIRE_CUDA=1 to make this a failure)\n", program, why);
    return 77;
}

#endif
