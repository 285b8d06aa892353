/*
 * kernels/cpu/telemetry.c - the CPU backend's telemetry reductions (engine/backend.h, "telemetry reductions"): the
 * host functions of engine/telemetry/range.c and lost.c called on the backend's pointers, which are host memory, so
 * the collector copies nothing on the CPU and the results are those functions' bits.
 */
#include "engine/telemetry/lost.h"
#include "engine/telemetry/range.h"
#include "kernels/cpu/cpu.h"

void mpt_cpu_telemetry_range(mpt_backend *be, mpt_range *r, const void *x, mpt_dtype dtype, int64_t n) {
    (void)be;
    mpt_range_count(r, x, dtype, n);
}

void mpt_cpu_telemetry_rounding(mpt_backend *be, mpt_exp_hist *h, mpt_round_err *err, const int *k, int n_k,
                                const float *v, int64_t n) {
    (void)be;
    MPT_ASSERTF(n_k >= 0 && n_k <= MPT_TELEMETRY_MAX_SHIFTS, "telemetry_rounding: %d shifts (at most %d)", n_k,
                MPT_TELEMETRY_MAX_SHIFTS);
    mpt_exp_hist_add(h, v, n);
    for (int j = 0; j < n_k; j++) mpt_round_err_add(&err[j], v, n, k[j], h->target);
}

void mpt_cpu_telemetry_lost(mpt_backend *be, mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype,
                            const float *delta, int64_t n) {
    (void)be;
    mpt_lost_count(r, w_old, w_new, dtype, delta, n);
}

void mpt_cpu_telemetry_lost_counterfactual(mpt_backend *be, mpt_lost *r, const void *w_old, mpt_dtype dtype,
                                           const float *delta, int64_t n) {
    (void)be;
    mpt_lost_counterfactual(r, w_old, dtype, delta, n);
}
