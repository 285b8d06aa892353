/*
 * engine/dist/dist_common.c - the parts of engine/dist that need no MPI: wire-dtype names and the shard
 * arithmetic, the launcher's announced job size, the waits' sleeps (see engine/dist/dist.h).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/dist/dist.h"

const char *mpt_grad_comm_name(mpt_grad_comm c) {
    return c == MPT_GRAD_COMM_FP32 ? "fp32" : c == MPT_GRAD_COMM_BF16 ? "bf16" : c == MPT_GRAD_COMM_FP16 ? "fp16" : "?";
}

int mpt_grad_comm_parse(const char *s, mpt_grad_comm *out) {
    if (strcmp(s, "fp32") == 0) *out = MPT_GRAD_COMM_FP32;
    else if (strcmp(s, "bf16") == 0) *out = MPT_GRAD_COMM_BF16;
    else if (strcmp(s, "fp16") == 0) *out = MPT_GRAD_COMM_FP16;
    else return -1;
    return 0;
}

mpt_dtype mpt_grad_comm_dtype(mpt_grad_comm c) {
    return c == MPT_GRAD_COMM_BF16 ? MPT_DTYPE_BF16 : c == MPT_GRAD_COMM_FP16 ? MPT_DTYPE_F16 : MPT_DTYPE_F32;
}

void mpt_dist_shard(int B, int rank, int size, int *lo, int *hi) {
    *lo = (int)((int64_t)rank * B / size);
    *hi = (int)((int64_t)(rank + 1) * B / size);
}

long mpt_dist_next_sleep_ns(long ns) {
    return ns >= MPT_DIST_SLEEP_MAX_NS / 2 ? MPT_DIST_SLEEP_MAX_NS : 2 * ns;
}

/* A positive integer from the environment variable name, else 0. */
static int env_count(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return *end == 0 && n > 0 && n < 1000000 ? (int)n : 0;
}

int mpt_dist_env_rank(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (!v || !*v) continue;
        char *end = NULL;
        long r = strtol(v, &end, 10);
        if (*end == 0 && r >= 0 && r < 1000000) return (int)r;
    }
    return 0;
}

int mpt_dist_env_size(void) {
    int n = env_count("OMPI_COMM_WORLD_SIZE");
    if (n == 0) n = env_count("PMI_SIZE");
    if (n == 0 && getenv("PMIX_RANK")) n = 1; /* a PMIx launcher (srun --mpi=pmix) that does not say the size */
    return n;
}
