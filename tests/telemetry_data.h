/*
 * tests/telemetry_data.h - inputs and comparisons for the tests of the telemetry reductions (engine/backend.h,
 * "telemetry reductions"), shared by tests/test_telemetry.c (the CPU backend's entries) and tests/test_cuda.c (the
 * CUDA backend's, under MPT_CUDA_DEVICE_TELEMETRY=1).
 *
 * Inputs, generated from a fixed seed: stored tensors of F32, F16 and BF16 from random bit patterns (every class:
 * normal, subnormal, inf, NaN) with zeros and the format's largest finite value mixed in; FP32 values to be rounded
 * into F16 or BF16 spread over the binades around the target's subnormal, normal and overflow boundaries, with zeros,
 * inf, NaN, FP32 subnormals, powers of two and all-ones significands (the carries); lost-update triples (w_old, w_new,
 * delta) with deltas around half an ulp of the weight, so that about half of the updates are lost.
 *
 * Comparisons: counts exactly; the FP64 sums within the documented bound (engine/backend.h) 2 gamma_n sum |terms|,
 * gamma_n = n u / (1 - n u), u = 2^-53 (Higham 2002, sections 3.1 and 4.2), n the elements of the call.
 */
#ifndef MPT_TESTS_TELEMETRY_DATA_H
#define MPT_TESTS_TELEMETRY_DATA_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/numerics.h"
#include "engine/telemetry/lost.h"
#include "engine/telemetry/range.h"
#include "harness.h"

/* Stored values of dtype (F32, F16, BF16) into dst (n elements): random bit patterns, with every 16th element +-0,
 * every 16th (offset 8) +-the largest finite value. */
static inline void tel_fill_stored(tests_rng *rng, mpt_dtype dtype, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)(tests_next(rng) >> 32), sign = bits & 1u;
        if (dtype == MPT_DTYPE_F32) {
            uint32_t u = bits;
            if (i % 16 == 0) u = sign << 31;
            else if (i % 16 == 8) u = (sign << 31) | 0x7f7fffffu;
            ((uint32_t *)dst)[i] = u;
        } else {
            uint16_t u = (uint16_t)bits;
            if (i % 16 == 0) u = (uint16_t)(sign << 15);
            else if (i % 16 == 8) u = (uint16_t)((sign << 15) | (dtype == MPT_DTYPE_F16 ? 0x7bffu : 0x7f7fu));
            ((uint16_t *)dst)[i] = u;
        }
    }
}

/* n FP32 values to be rounded into target (F16 or BF16): binades from below the target's smallest subnormal to past
 * its largest finite value, random significands, and the special cases above. */
static inline void tel_fill_f32(tests_rng *rng, mpt_dtype target, float *dst, int64_t n) {
    const int elo = target == MPT_DTYPE_F16 ? -27 : -136, ehi = target == MPT_DTYPE_F16 ? 16 : 127;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t sign = (uint32_t)(tests_next(rng) & 1u) << 31;
        uint32_t frac = (uint32_t)(tests_next(rng) >> 41); /* 23 bits */
        const int kind = tests_int(rng, 0, 15);
        uint32_t u;
        if (kind == 0) u = 0u;                                            /* +-0 */
        else if (kind == 1) u = 0x7f800000u;                              /* inf */
        else if (kind == 2) u = 0x7fc00000u | frac;                       /* NaN */
        else if (kind == 3) u = frac ? frac : 1u;                         /* FP32 subnormal */
        else {
            if (kind == 4) frac = 0u;                                     /* power of two */
            if (kind == 5) frac = 0x7fffffu;                              /* all ones: carries */
            if (kind == 6) frac |= 0x7ff000u;                             /* top bits ones: carries at b, b - 1 */
            const int e = tests_int(rng, elo, ehi);
            u = ((uint32_t)(e + 127) << 23) | frac;
        }
        dst[i] = mpt_bits_f32(sign | u);
    }
}

static inline float tel_load(const void *p, mpt_dtype dtype, int64_t i) {
    if (dtype == MPT_DTYPE_F16) return mpt_f16_to_f32(((const uint16_t *)p)[i]);
    if (dtype == MPT_DTYPE_BF16) return mpt_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static inline void tel_store(void *p, mpt_dtype dtype, int64_t i, float v) {
    if (dtype == MPT_DTYPE_F16) ((uint16_t *)p)[i] = mpt_f32_to_f16(v);
    else if (dtype == MPT_DTYPE_BF16) ((uint16_t *)p)[i] = mpt_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* Lost-update data: w_old finite weights of dtype (some 0, some subnormal), delta FP32 around +-half an ulp of the
 * weight (some 0), w_new = RNE(w_old + delta) in dtype. */
static inline void tel_fill_lost(tests_rng *rng, mpt_dtype dtype, void *w_old, void *w_new, float *delta, int64_t n) {
    const int p = dtype == MPT_DTYPE_F32 ? 24 : dtype == MPT_DTYPE_F16 ? 11 : 8; /* precision */
    for (int64_t i = 0; i < n; i++) {
        const int kind = tests_int(rng, 0, 15);
        float w = (float)tests_uniform(rng, -2.0, 2.0);
        if (kind == 0) w = 0.0f;
        if (kind == 1) w = (dtype == MPT_DTYPE_F16 ? 0x1p-20f : 0x1p-130f) * (float)tests_uniform(rng, -1.0, 1.0);
        tel_store(w_old, dtype, i, w);
        w = tel_load(w_old, dtype, i);
        const double ulp = ldexp(1.0, (w == 0.0f ? -20 : ilogbf(w)) - (p - 1));
        float d = (float)(ulp * tests_uniform(rng, -1.2, 1.2));
        if (kind == 2) d = 0.0f;
        delta[i] = d;
        tel_store(w_new, dtype, i, w + d);
    }
}

/* Whether |a - b| <= 2 gamma_n s (s: the sum of the terms' magnitudes), or a and b are the same bits when s < 0. */
static inline int tel_close(double a, double b, int64_t n, double s) {
    if (s < 0.0) return memcmp(&a, &b, sizeof a) == 0;
    if (isinf(a) || isinf(b)) return a == b;
    const double m = (double)n * 0x1p-53, gamma = m / (1.0 - m);
    return fabs(a - b) <= 2.0 * gamma * s;
}

static inline void tel_check_range(const mpt_range *got, const mpt_range *want, const char *what) {
    ck_assert_msg(got->n == want->n && got->zero == want->zero && got->subnormal == want->subnormal &&
                      got->at_max == want->at_max && got->nonfinite == want->nonfinite,
                  "%s: range n %lld zero %lld sub %lld max %lld nonfinite %lld, host %lld %lld %lld %lld %lld", what,
                  (long long)got->n, (long long)got->zero, (long long)got->subnormal, (long long)got->at_max,
                  (long long)got->nonfinite, (long long)want->n, (long long)want->zero, (long long)want->subnormal,
                  (long long)want->at_max, (long long)want->nonfinite);
}

/* exact: the FP64 sums bit for bit (CPU), else within the bound over n elements. */
static inline void tel_check_hist(const mpt_exp_hist *got, const mpt_exp_hist *want, int exact, int64_t n,
                                  const char *what) {
    ck_assert_msg(got->target == want->target && got->n == want->n && got->zero == want->zero &&
                      got->nonfinite == want->nonfinite,
                  "%s: n %lld zero %lld nonfinite %lld, host %lld %lld %lld", what, (long long)got->n,
                  (long long)got->zero, (long long)got->nonfinite, (long long)want->n, (long long)want->zero,
                  (long long)want->nonfinite);
    for (int j = 0; j < MPT_EXP_HIST_BINS; j++) {
        ck_assert_msg(got->count[j] == want->count[j] && got->pow2[j] == want->pow2[j] &&
                          got->carry[j] == want->carry[j] && got->carry_sub[j] == want->carry_sub[j],
                      "%s: binade %d: count %lld pow2 %lld carry %lld carry_sub %lld, host %lld %lld %lld %lld", what,
                      j + MPT_EXP_HIST_EMIN, (long long)got->count[j], (long long)got->pow2[j],
                      (long long)got->carry[j], (long long)got->carry_sub[j], (long long)want->count[j],
                      (long long)want->pow2[j], (long long)want->carry[j], (long long)want->carry_sub[j]);
        ck_assert_msg(tel_close(got->mass[j], want->mass[j], n, exact ? -1.0 : want->mass[j]),
                      "%s: binade %d: mass %.17g, host %.17g", what, j + MPT_EXP_HIST_EMIN, got->mass[j],
                      want->mass[j]);
    }
}

static inline void tel_check_err(const mpt_round_err *got, const mpt_round_err *want, int exact, int64_t n,
                                 const char *what) {
    ck_assert_msg(tel_close(got->err2, want->err2, n, exact ? -1.0 : want->err2) &&
                      tel_close(got->ref2, want->ref2, n, exact ? -1.0 : want->ref2),
                  "%s: err2 %.17g ref2 %.17g, host %.17g %.17g", what, got->err2, got->ref2, want->err2, want->ref2);
}

/* s_applied: sum |w_new - w_old| (the magnitudes of mass_applied's terms). */
static inline void tel_check_lost(const mpt_lost *got, const mpt_lost *want, int exact, double s_applied,
                                  const char *what) {
    const int64_t n = want->n;
    ck_assert_msg(got->n == want->n && got->nonzero == want->nonzero && got->lost == want->lost,
                  "%s: n %lld nonzero %lld lost %lld, host %lld %lld %lld", what, (long long)got->n,
                  (long long)got->nonzero, (long long)got->lost, (long long)want->n, (long long)want->nonzero,
                  (long long)want->lost);
    ck_assert_msg(tel_close(got->mass, want->mass, n, exact ? -1.0 : want->mass) &&
                      tel_close(got->mass_lost, want->mass_lost, n, exact ? -1.0 : want->mass_lost) &&
                      tel_close(got->mass_applied, want->mass_applied, n, exact ? -1.0 : s_applied),
                  "%s: mass %.17g lost %.17g applied %.17g, host %.17g %.17g %.17g", what, got->mass, got->mass_lost,
                  got->mass_applied, want->mass, want->mass_lost, want->mass_applied);
}

/* sum |w_new - w_old| over the elements (counterfactual: w_new = mpt_lost_counterfactual_new). */
static inline double tel_applied_terms(const void *w_old, const void *w_new, mpt_dtype dtype, const float *delta,
                                       int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float old = tel_load(w_old, dtype, i);
        const float neu = w_new ? tel_load(w_new, dtype, i)
                                : mpt_lost_counterfactual_new(old, delta[i], dtype == MPT_DTYPE_F16);
        s += fabs((double)neu - (double)old);
    }
    return s;
}

/* ---- two telemetry.csv files: device reductions against host copies ------------------------------------------ */

/* Whether a telemetry metric comes from FP64 sums (masses, L2 errors) rather than integer counts. */
static inline int tel_metric_is_sum(const char *metric) {
    return strstr(metric, "mass") != NULL || strstr(metric, "rel_l2_err") != NULL;
}

/* Compares two telemetry.csv texts (step,tensor,metric,value rows, a header first): the same rows in the same order;
 * count-derived values as the same text; FP64-sum-derived ones (tel_metric_is_sum) within 2e-8 max(|a|, |b|) + 1e-9:
 * the printed 9 significant digits (one unit of the ninth digit is at most 1e-8 relative, and two values within the
 * FP64 bound may round to neighbouring ninth digits) plus the sums' bound, at most 6 gamma_n < 1e-9 absolute for a
 * share (n < 10^6 elements per tensor; applied_mass's terms are at most twice mass's under round-to-nearest). 1 when
 * they agree, else 0 with the first difference in why (len bytes). */
static inline int tel_csv_agree(const char *a, const char *b, char *why, size_t len) {
    int line = 0;
    while (*a || *b) {
        line++;
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        const size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        char ra[256], rb[256];
        snprintf(ra, sizeof ra, "%.*s", (int)(la < 255 ? la : 255), a);
        snprintf(rb, sizeof rb, "%.*s", (int)(lb < 255 ? lb : 255), b);
        if (strcmp(ra, rb) != 0) {
            const char *ca = strrchr(ra, ','), *cb = strrchr(rb, ',');
            int ok = ca && cb && ca - ra == cb - rb && strncmp(ra, rb, (size_t)(ca - ra)) == 0;
            if (ok) {
                char metric[128];
                const char *m0 = ra;
                for (int k = 0; k < 2 && m0; k++) m0 = strchr(m0, ',') ? strchr(m0, ',') + 1 : NULL;
                snprintf(metric, sizeof metric, "%.*s", m0 ? (int)(ca - m0) : 0, m0 ? m0 : "");
                const double x = strtod(ca + 1, NULL), y = strtod(cb + 1, NULL);
                const double m = fabs(x) > fabs(y) ? fabs(x) : fabs(y);
                ok = tel_metric_is_sum(metric) && isfinite(x) && isfinite(y) && fabs(x - y) <= 2e-8 * m + 1e-9;
            }
            if (!ok) {
                snprintf(why, len, "line %d: '%.200s' against '%.200s'", line, ra, rb);
                return 0;
            }
        }
        a += la + (ea != NULL);
        b += lb + (eb != NULL);
    }
    return 1;
}

#endif
