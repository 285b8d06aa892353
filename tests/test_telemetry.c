/*
 * tests/test_telemetry.c - the telemetry instruments (engine/telemetry/) on the CPU backend:
 *  - stored-range counts on hand-built FP16/BF16/FP32 bit patterns;
 *  - the rounding histogram: counts on values placed on known binary exponents (FP16's subnormal band
 *    2^-24..2^-14 and BF16's 2^-133..2^-126 included), hand-derived outcomes at each rounding boundary, and
 *    the loss-scale counterfactuals (S/2, 2S, 1) equal to actually scaling each value and rounding it;
 *  - the lost-update meter equal to a brute-force `w_new == w_old && delta != 0` element by element, on
 *    buffers and on a real optimizer step (the deltas of an identical run collected by the test);
 *  - each rounding probe, rounded to the tensor's dtype, gives the stored tensor bit for bit;
 *  - telemetry (with the FP32 shadow twin) on every step trains bit-identically to telemetry off, and in an
 *    fp32 run the twin agrees exactly with the run (relative error 0, cosine 1);
 *  - the CPU backend's telemetry reductions (engine/backend.h) give the host functions' results bit for bit on
 *    random tensors of every dtype with zeros, subnormals, values at max, inf and NaN (tests/telemetry_data.h), and
 *    the collector writes the same telemetry.csv bytes through them as through its host copies (entries NULL).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "datasets/synthetic.h"
#include "engine/layers/layers.h"
#include "engine/optim/optim.h"
#include "engine/telemetry/lost.h"
#include "engine/telemetry/range.h"
#include "engine/telemetry/telemetry.h"
#include "engine/train.h"
#include "harness.h"
#include "telemetry_data.h"

/* ---- stored range ---------------------------------------------------------------------------------------- */

START_TEST(test_range_f16_bits) {
    /* +0, -0 | smallest and largest subnormal | +-65504 | +inf | NaN | 1.0 */
    const uint16_t v[9] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0xfbff, 0x7c00, 0x7e00, 0x3c00};
    mpt_range r;
    memset(&r, 0, sizeof r);
    mpt_range_count(&r, v, MPT_DTYPE_F16, 9);
    ck_assert_int_eq(r.n, 9);
    ck_assert_int_eq(r.zero, 2);
    ck_assert_int_eq(r.subnormal, 2);
    ck_assert_int_eq(r.at_max, 3); /* 65504, -65504, inf */
    ck_assert_int_eq(r.nonfinite, 2);
}
END_TEST

START_TEST(test_range_bf16_f32_bits) {
    /* BF16: 0 | 2^-133 (smallest subnormal) | 2^-126 (smallest normal) | max 0x7f7f | -inf */
    const uint16_t b[5] = {0x0000, 0x0001, 0x0080, 0x7f7f, 0xff80};
    mpt_range r;
    memset(&r, 0, sizeof r);
    mpt_range_count(&r, b, MPT_DTYPE_BF16, 5);
    ck_assert_int_eq(r.zero, 1);
    ck_assert_int_eq(r.subnormal, 1);
    ck_assert_int_eq(r.at_max, 2);
    ck_assert_int_eq(r.nonfinite, 1);
    /* FP32: FLT_MAX, FLT_TRUE_MIN, FLT_MIN, -0, NaN */
    const float f[5] = {FLT_MAX, FLT_TRUE_MIN, FLT_MIN, -0.0f, NAN};
    memset(&r, 0, sizeof r);
    mpt_range_count(&r, f, MPT_DTYPE_F32, 5);
    ck_assert_int_eq(r.zero, 1);
    ck_assert_int_eq(r.subnormal, 1);
    ck_assert_int_eq(r.at_max, 1);
    ck_assert_int_eq(r.nonfinite, 1);
}
END_TEST

/* ---- rounding histogram ------------------------------------------------------------------------------------- */

START_TEST(test_hist_counts_on_known_exponents) {
    /* 3 values in each of binades -30 (below FP16's band), -24 (smallest subnormal), -20 (inside the band),
     * -15 (top of the band), -14 (smallest normal), 0 and 15; one of each three a power of two. */
    static const int exps[7] = {-30, -24, -20, -15, -14, 0, 15};
    float v[21];
    for (int i = 0; i < 7; i++) {
        v[3 * i] = ldexpf(1.0f, exps[i]);
        v[3 * i + 1] = -ldexpf(1.25f, exps[i]);
        v[3 * i + 2] = ldexpf(1.5f, exps[i]);
    }
    mpt_exp_hist h;
    mpt_exp_hist_init(&h, MPT_DTYPE_F16);
    mpt_exp_hist_add(&h, v, 21);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(h.count[exps[i] - MPT_EXP_HIST_EMIN], 3);
        ck_assert_int_eq(h.pow2[exps[i] - MPT_EXP_HIST_EMIN], 1);
    }
    mpt_round_stats rs;
    mpt_exp_hist_round(&h, 0, &rs);
    ck_assert_int_eq(rs.nonzero, 21);
    ck_assert_int_eq(rs.flushed, 3);      /* binade -30: below 2^-25 */
    ck_assert_int_eq(rs.subnormal, 9);    /* binades -24, -20, -15 */
    ck_assert_int_eq(rs.overflow, 0);     /* 1.5 * 2^15 = 49152 < 65504 */
    double lost = (1.0 + 1.25 + 1.5) * ldexp(1.0, -30), total = 0.0;
    for (int i = 0; i < 21; i++) total += fabs((double)v[i]);
    ck_assert_double_eq_tol(rs.mass_lost, lost / total, 1e-15);
    /* at 2S (k = +1): 1.5 * 2^16 overflows, binade -30 still flushes; at S/2: binade -15 stays subnormal,
     * -14 becomes subnormal, -24 -> -25: its power of two ties to 0, the other two round to 2^-24 */
    mpt_exp_hist_round(&h, 1, &rs);
    ck_assert_int_eq(rs.overflow, 3);
    ck_assert_int_eq(rs.flushed, 3);
    mpt_exp_hist_round(&h, -1, &rs);
    ck_assert_int_eq(rs.flushed, 4);
    ck_assert_int_eq(rs.subnormal, 11);   /* 2 from -24, 3 from -20, 3 from -15, 3 from -14 */
    /* BF16: binades -140 (below), -133 (smallest subnormal), -127 (top of its band), -126 */
    static const int bexps[4] = {-140, -133, -127, -126};
    float w[8];
    for (int i = 0; i < 4; i++) {
        w[2 * i] = ldexpf(1.0f, bexps[i]);
        w[2 * i + 1] = ldexpf(1.5f, bexps[i]);
    }
    mpt_exp_hist_init(&h, MPT_DTYPE_BF16);
    mpt_exp_hist_add(&h, w, 8);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(h.count[bexps[i] - MPT_EXP_HIST_EMIN], 2);
    mpt_exp_hist_round(&h, 0, &rs);
    ck_assert_int_eq(rs.flushed, 2);
    ck_assert_int_eq(rs.subnormal, 4);
}
END_TEST

/* Values at each rounding boundary, with the outcome derived from the format definitions. */
START_TEST(test_hist_boundaries) {
    const float f16_vals[8] = {
        0x1p-25f,                /* half the smallest subnormal: ties to the even 0 -> flushed */
        0x1.000002p-25f,         /* just above: rounds to 2^-24 -> subnormal */
        0x1p-26f,                /* -> flushed */
        0x1p-14f - 0x1p-24f,     /* largest subnormal, exact -> subnormal */
        0x1p-14f - 0x1p-25f,     /* halfway to 2^-14, ties to the even 2^-14 -> normal */
        65504.0f,                /* largest finite -> finite */
        65519.0f,                /* below 65520 -> rounds to 65504 */
        65520.0f,                /* halfway to 2^16: ties to even -> inf */
    };
    mpt_exp_hist h;
    mpt_round_stats rs;
    mpt_exp_hist_init(&h, MPT_DTYPE_F16);
    mpt_exp_hist_add(&h, f16_vals, 8);
    mpt_exp_hist_round(&h, 0, &rs);
    ck_assert_int_eq(rs.flushed, 2);
    ck_assert_int_eq(rs.subnormal, 2);
    ck_assert_int_eq(rs.overflow, 1);
    const float bf16_vals[5] = {
        0x1p-134f,                       /* half BF16's smallest subnormal 2^-133 -> flushed */
        0x1.8p-134f,                     /* -> 2^-133, subnormal */
        0x1p-126f - 0x1p-134f,           /* halfway between the largest subnormal and 2^-126 -> normal */
        0x1.fep127f,                     /* BF16's largest finite (2 - 2^-7) 2^127 */
        0x1.ffp127f,                     /* halfway to 2^128 -> inf */
    };
    mpt_exp_hist_init(&h, MPT_DTYPE_BF16);
    mpt_exp_hist_add(&h, bf16_vals, 5);
    mpt_exp_hist_round(&h, 0, &rs);
    ck_assert_int_eq(rs.flushed, 1);
    ck_assert_int_eq(rs.subnormal, 1);
    ck_assert_int_eq(rs.overflow, 1);
}
END_TEST

/* What rounding v * 2^k into dtype actually gives, counted element by element. */
static void brute_round(const float *v, int n, mpt_dtype dt, int k, mpt_round_stats *out) {
    memset(out, 0, sizeof *out);
    double mass = 0.0, lost = 0.0;
    for (int i = 0; i < n; i++) {
        if (v[i] == 0.0f || !isfinite(v[i])) continue;
        float s = ldexpf(v[i], k);
        ck_assert_msg(isinf(s) || ldexp((double)s, -k) == (double)v[i], "test value %a * 2^%d not exact", v[i], k);
        uint16_t q = dt == MPT_DTYPE_F16 ? mpt_f32_to_f16(s) : mpt_f32_to_bf16(s);
        uint16_t a = q & 0x7fff, emask = dt == MPT_DTYPE_F16 ? 0x7c00 : 0x7f80;
        out->nonzero++;
        mass += fabs((double)v[i]);
        if (a == 0) {
            out->flushed++;
            lost += fabs((double)v[i]);
        } else if ((a & emask) == 0) {
            out->subnormal++;
        } else if ((a & emask) == emask) {
            out->overflow++;
        }
    }
    out->mass_lost = mass > 0 ? lost / mass : 0.0;
}

/* frac_mask: which significand bits the random values may use (BF16's band lies among FP32's subnormals,
 * where fewer bits exist: the values must stay exact when halved). */
static void check_counterfactuals(mpt_dtype dt, int emin, int emax, uint32_t frac_mask, const int *ks, int nk) {
    enum { N = 20000 };
    static float v[N];
    tests_rng rng = {0x1234567ULL + (uint64_t)dt};
    for (int i = 0; i < N; i++) {
        int e = tests_int(&rng, emin, emax);
        uint32_t frac = (uint32_t)(tests_next(&rng) >> 41) & frac_mask;
        switch (i % 8) { /* a share of significands right at the rounding boundaries */
        case 0: frac = 0; break;                                   /* power of two */
        case 1: frac = (0x7ff000u | frac) & frac_mask; break;       /* top 11 bits ones: FP16's overflow carry */
        case 2: frac = (0x7fc000u | frac) & frac_mask; break;       /* top 9 bits ones: FP16's subnormal carry */
        case 3: frac = (0x7f8000u | frac) & frac_mask; break;       /* top 8 bits ones: BF16's overflow carry */
        case 4: frac = (0x7f0000u | frac) & frac_mask; break;       /* top 7 bits ones: BF16's subnormal carry */
        default: break;
        }
        float x = ldexpf(mpt_bits_f32(0x3f800000u | frac), e);
        v[i] = (i & 1) ? -x : x;
    }
    mpt_exp_hist h;
    mpt_exp_hist_init(&h, dt);
    mpt_exp_hist_add(&h, v, N);
    for (int j = 0; j < nk; j++) {
        mpt_round_stats got, want;
        mpt_exp_hist_round(&h, ks[j], &got);
        brute_round(v, N, dt, ks[j], &want);
        ck_assert_int_eq(got.nonzero, want.nonzero);
        ck_assert_msg(got.flushed == want.flushed && got.subnormal == want.subnormal && got.overflow == want.overflow,
                      "%s k=%d: histogram flushed/subnormal/overflow %lld/%lld/%lld, rounding gives %lld/%lld/%lld",
                      mpt_dtype_name(dt), ks[j], (long long)got.flushed, (long long)got.subnormal,
                      (long long)got.overflow, (long long)want.flushed, (long long)want.subnormal,
                      (long long)want.overflow);
        ck_assert_double_eq_tol(got.mass_lost, want.mass_lost, 1e-12);
        ck_assert_msg(want.flushed > 0 && want.subnormal > 0, "the test values must reach the band (k=%d)", ks[j]);
    }
}

START_TEST(test_hist_counterfactuals_f16) {
    /* S = 2^16 (the dynamic scaler's start): actual (k=0), S/2, 2S, and no scaling (k = -16) */
    const int ks[4] = {0, -1, 1, -16};
    check_counterfactuals(MPT_DTYPE_F16, -30, 16, 0x7ffffcu, ks, 4);
}
END_TEST

START_TEST(test_hist_counterfactuals_bf16) {
    const int ks[3] = {0, -1, 1};
    check_counterfactuals(MPT_DTYPE_BF16, -138, -100, 0x7fe000u, ks, 3);
}
END_TEST

START_TEST(test_hist_log2_exact) {
    ck_assert_int_eq(mpt_exp_hist_log2_exact(65536.0f), 16);
    ck_assert_int_eq(mpt_exp_hist_log2_exact(1.0f), 0);
    ck_assert_int_eq(mpt_exp_hist_log2_exact(0.5f), -1);
    ck_assert_int_eq(mpt_exp_hist_log2_exact(3.0f), INT32_MIN);
    ck_assert_int_eq(mpt_exp_hist_log2_exact(-2.0f), INT32_MIN);
    ck_assert_int_eq(mpt_exp_hist_log2_exact(INFINITY), INT32_MIN);
}
END_TEST

/* ---- the rounding error ------------------------------------------------------------------------------------ */

/* The relative L2 error of rounding at shift k against rounding each value through the engine's own conversion
 * (FP32 -> F16/BF16 -> FP32, engine/numerics.h) after an exact FP32 scaling: values chosen so that v 2^k stays an
 * FP32 normal number, where ldexpf is exact and the two computations must agree to FP64's rounding of the sums. */
static void check_round_err(mpt_dtype dt, int emin, int emax, const int *ks, int nk) {
    enum { N = 20000 };
    static float v[N];
    tests_rng rng = {0xabcdefULL + (uint64_t)dt};
    for (int i = 0; i < N; i++) {
        int e = tests_int(&rng, emin, emax);
        uint32_t frac = (uint32_t)(tests_next(&rng) >> 41) & 0x7fffffu;
        if (i % 5 == 0) frac &= 0x7fe000u; /* ties and exact values among them */
        float x = ldexpf(mpt_bits_f32(0x3f800000u | frac), e);
        v[i] = (i & 1) ? -x : x;
    }
    for (int j = 0; j < nk; j++) {
        mpt_round_err got = {0.0, 0.0};
        mpt_round_err_add(&got, v, N, ks[j], dt);
        double err2 = 0.0, ref2 = 0.0;
        for (int i = 0; i < N; i++) {
            float s = ldexpf(v[i], ks[j]);
            float r = dt == MPT_DTYPE_F16 ? mpt_f16_to_f32(mpt_f32_to_f16(s)) : mpt_bf16_to_f32(mpt_f32_to_bf16(s));
            double d = (double)ldexpf(r, -ks[j]) - (double)v[i];
            err2 += d * d;
            ref2 += (double)v[i] * (double)v[i];
        }
        double want = sqrt(err2 / ref2), have = mpt_round_err_rel(&got);
        ck_assert_msg(fabs(have - want) <= 1e-12 * want, "%s k=%d: rel error %.17g, by conversion %.17g",
                      mpt_dtype_name(dt), ks[j], have, want);
        ck_assert_msg(want > 0.0, "the test values must be rounded (k=%d)", ks[j]);
    }
}

START_TEST(test_round_err) {
    /* by hand: 1 is exact in FP16, 2^-26 flushes (below half the smallest subnormal 2^-25): the error is 2^-26 of
     * a norm sqrt(1 + 2^-52); 2^-24 + 2^-26 rounds to 2^-24 (subnormal spacing 2^-24): error 2^-26 again */
    const float a[3] = {1.0f, 0x1p-26f, 0x1p-24f + 0x1p-26f};
    mpt_round_err e = {0.0, 0.0};
    mpt_round_err_add(&e, a, 2, 0, MPT_DTYPE_F16);
    ck_assert_double_eq_tol(mpt_round_err_rel(&e), sqrt(0x1p-52 / (1.0 + 0x1p-52)), 1e-20);
    memset(&e, 0, sizeof e);
    mpt_round_err_add(&e, a + 2, 1, 0, MPT_DTYPE_F16);
    ck_assert_double_eq_tol(mpt_round_err_rel(&e), 0x1p-26 / (0x1p-24 + 0x1p-26), 1e-15);
    /* scaled up by 2^2 the same value is 2^-22 + 2^-24: exact in FP16's subnormals, error 0 */
    memset(&e, 0, sizeof e);
    mpt_round_err_add(&e, a + 2, 1, 2, MPT_DTYPE_F16);
    ck_assert(mpt_round_err_rel(&e) == 0.0);
    /* 65520 rounds to inf in FP16, 65519 to 65504 */
    const float big[2] = {65519.0f, 65520.0f};
    memset(&e, 0, sizeof e);
    mpt_round_err_add(&e, big, 1, 0, MPT_DTYPE_F16);
    ck_assert_double_eq_tol(mpt_round_err_rel(&e), 15.0 / 65519.0, 1e-15);
    mpt_round_err_add(&e, big + 1, 1, 0, MPT_DTYPE_F16);
    ck_assert(isinf(mpt_round_err_rel(&e)));
    /* against the engine's conversions, normal and subnormal bands, at the run's scale and at S = 1 */
    const int kf[3] = {0, -16, 4};
    check_round_err(MPT_DTYPE_F16, -20, 10, kf, 3);
    const int kb[2] = {0, -3};
    check_round_err(MPT_DTYPE_BF16, -120, 30, kb, 2);
}
END_TEST

/* ---- lost updates ------------------------------------------------------------------------------------------- */

static void store(void *p, mpt_dtype dt, int i, float v) { mpt_store_f32(p, dt, i, v); }

START_TEST(test_lost_matches_brute_force) {
    static const mpt_dtype dts[3] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};
    mpt_dtype dt = dts[_i];
    enum { N = 5000 };
    static float delta[N];
    static uint32_t w_old[N], w_new[N]; /* big enough for any dtype */
    tests_rng rng = {77 + (uint64_t)_i};
    for (int i = 0; i < N; i++) {
        float w = (float)tests_uniform(&rng, -0.2, 0.2);
        delta[i] = (i % 10 == 0) ? 0.0f : (float)(tests_uniform(&rng, -1.0, 1.0) * ldexp(1.0, tests_int(&rng, -30, -4)));
        store(w_old, dt, i, w);
        float wo = mpt_load_f32(w_old, dt, i);
        store(w_new, dt, i, wo + delta[i]);
    }
    mpt_lost r;
    memset(&r, 0, sizeof r);
    mpt_lost_count(&r, w_old, w_new, dt, delta, N);
    int64_t nz = 0, lost = 0;
    double mass = 0, mass_lost = 0, applied = 0;
    for (int i = 0; i < N; i++) {
        float a = mpt_load_f32(w_old, dt, i), b = mpt_load_f32(w_new, dt, i);
        if (delta[i] != 0.0f) {
            nz++;
            mass += fabs(delta[i]);
            applied += delta[i] > 0 ? (double)b - a : (double)a - b;
        }
        if (b == a && delta[i] != 0.0f) {
            lost++;
            mass_lost += fabs(delta[i]);
        }
    }
    ck_assert_int_eq(r.n, N);
    ck_assert_int_eq(r.nonzero, nz);
    ck_assert_int_eq(r.lost, lost);
    ck_assert_double_eq_tol(mpt_lost_mass_share(&r), mass_lost / mass, 1e-12);
    ck_assert_double_eq_tol(mpt_lost_applied_share(&r), applied / mass, 1e-12);
    ck_assert_msg(lost > 0 && lost < nz, "%s: the deltas must straddle half an ulp (%lld of %lld lost)",
                  mpt_dtype_name(dt), (long long)lost, (long long)nz);
    if (dt != MPT_DTYPE_F32) { /* the counterfactual on the same 16-bit weights is the same experiment */
        mpt_lost c;
        memset(&c, 0, sizeof c);
        mpt_lost_counterfactual(&c, w_old, dt, delta, N);
        ck_assert_int_eq(c.lost, lost);
        ck_assert_int_eq(c.nonzero, nz);
    }
}
END_TEST

/* Stochastic rounding (engine/numerics.h) of updates far below half an ulp: most single updates round back
 * (lost), yet the applied mass is the whole update mass in expectation. 20000 BF16 weights in [0.5, 1) (ulp
 * 2^-8), each update a fraction p in [0.01, 0.1] of an ulp: the weight moves by one ulp with probability p. The
 * applied mass is sum_i ulp * X_i / sum_i p_i ulp with X_i ~ Bernoulli(p_i): mean 1, sd sqrt(sum p(1-p)) / sum p
 * (about 0.015 here); the test allows 5 sd. Round-to-nearest of the same updates moves nothing. */
START_TEST(test_lost_applied_mass_under_stochastic_rounding) {
    enum { N = 20000 };
    static uint16_t w_old[N], w_sr[N], w_rn[N];
    static float delta[N];
    tests_rng rng = {2024};
    double sum_p = 0.0, var = 0.0;
    for (int i = 0; i < N; i++) {
        float w = (float)tests_uniform(&rng, 0.5, 1.0);
        w_old[i] = mpt_f32_to_bf16(w);
        double p = tests_uniform(&rng, 0.01, 0.1);
        delta[i] = (float)(p * 0x1p-8);
        sum_p += p;
        var += p * (1.0 - p);
        float wo = mpt_bf16_to_f32(w_old[i]);
        uint32_t r = (uint32_t)(tests_next(&rng) >> 32);
        w_sr[i] = mpt_f32_to_bf16_sr(wo + delta[i], r);
        w_rn[i] = mpt_f32_to_bf16(wo + delta[i]);
    }
    mpt_lost sr, rn;
    memset(&sr, 0, sizeof sr);
    memset(&rn, 0, sizeof rn);
    mpt_lost_count(&sr, w_old, w_sr, MPT_DTYPE_BF16, delta, N);
    mpt_lost_count(&rn, w_old, w_rn, MPT_DTYPE_BF16, delta, N);
    double sd = sqrt(var) / sum_p;
    ck_assert_msg(mpt_lost_frac(&sr) > 0.85, "stochastic rounding lost %.3f of the updates", mpt_lost_frac(&sr));
    ck_assert_msg(fabs(mpt_lost_applied_share(&sr) - 1.0) < 5.0 * sd, "applied mass %.4f, expected 1 +- %.4f",
                  mpt_lost_applied_share(&sr), 5.0 * sd);
    ck_assert_double_eq(mpt_lost_frac(&rn), 1.0);
    ck_assert_double_eq(mpt_lost_applied_share(&rn), 0.0);
}
END_TEST

/* ---- the backend's telemetry reductions -------------------------------------------------------------------------- */

/* The CPU backend's entries against the host functions on the same buffers (its pointers are host memory): equal bit
 * for bit, the FP64 sums included (the entries call those functions). Loop index: the stored dtype. */
START_TEST(test_entries_match_host_functions) {
    static const mpt_dtype dts[3] = {MPT_DTYPE_F32, MPT_DTYPE_F16, MPT_DTYPE_BF16};
    const mpt_dtype dt = dts[_i];
    const int64_t n = 10007;
    tests_rng rng = {0x5eed0000u + (uint64_t)_i};
    mpt_backend *be = mpt_backend_cpu_create();
    ck_assert(be->telemetry_range && be->telemetry_rounding && be->telemetry_lost && be->telemetry_lost_counterfactual);
    void *a = be->alloc(be, (size_t)n * 4), *b = be->alloc(be, (size_t)n * 4);
    float *v = be->alloc(be, (size_t)n * 4);
    ck_assert(a && b && v);

    mpt_range rg, rh;
    memset(&rg, 0, sizeof rg);
    memset(&rh, 0, sizeof rh);
    tel_fill_stored(&rng, dt, a, n);
    be->telemetry_range(be, &rg, a, dt, n);
    mpt_range_count(&rh, a, dt, n);
    tel_check_range(&rg, &rh, mpt_dtype_name(dt));
    ck_assert_int_gt(rh.zero, 0);
    ck_assert_int_gt(rh.subnormal, 0);
    ck_assert_int_gt(rh.at_max, 0);
    ck_assert_int_gt(rh.nonfinite, 0);

    static const int shifts[3][2] = {{0, -12}, {3, 0}, {0, 0}};
    static const int n_shifts[3] = {2, 1, 0};
    for (int t = 0; t < 2; t++) {
        const mpt_dtype target = t ? MPT_DTYPE_BF16 : MPT_DTYPE_F16;
        tel_fill_f32(&rng, target, v, n);
        for (int c = 0; c < 3; c++) {
            mpt_exp_hist *hg = malloc(sizeof *hg), *hh = malloc(sizeof *hh);
            ck_assert(hg && hh);
            mpt_exp_hist_init(hg, target);
            mpt_exp_hist_init(hh, target);
            mpt_round_err eg[2], eh[2];
            memset(eg, 0, sizeof eg);
            memset(eh, 0, sizeof eh);
            be->telemetry_rounding(be, hg, eg, shifts[c], n_shifts[c], v, n);
            mpt_exp_hist_add(hh, v, n);
            for (int j = 0; j < n_shifts[c]; j++) mpt_round_err_add(&eh[j], v, n, shifts[c][j], target);
            tel_check_hist(hg, hh, 1, n, mpt_dtype_name(target));
            for (int j = 0; j < 2; j++) tel_check_err(&eg[j], &eh[j], 1, n, mpt_dtype_name(target));
            ck_assert(hh->zero > 0 && hh->nonfinite > 0);
            free(hg);
            free(hh);
        }
    }

    tel_fill_lost(&rng, dt, a, b, v, n);
    mpt_lost lg, lh;
    memset(&lg, 0, sizeof lg);
    memset(&lh, 0, sizeof lh);
    be->telemetry_lost(be, &lg, a, b, dt, v, n);
    mpt_lost_count(&lh, a, b, dt, v, n);
    tel_check_lost(&lg, &lh, 1, 0.0, mpt_dtype_name(dt));
    ck_assert_msg(lh.lost > n / 8 && lh.lost < lh.nonzero - n / 8, "%lld of %lld lost: the data should mix both",
                  (long long)lh.lost, (long long)lh.nonzero);
    if (dt != MPT_DTYPE_F32) {
        memset(&lg, 0, sizeof lg);
        memset(&lh, 0, sizeof lh);
        be->telemetry_lost_counterfactual(be, &lg, a, dt, v, n);
        mpt_lost_counterfactual(&lh, a, dt, v, n);
        tel_check_lost(&lg, &lh, 1, 0.0, mpt_dtype_name(dt));
    }
    be->free(be, a);
    be->free(be, b);
    be->free(be, v);
    mpt_backend_free(&be);
}
END_TEST

/* The entries add to their counters: two calls on the halves of the data give the counts of one call on the whole
 * exactly, and its FP64 sums within the bound of a reassociated sum (tests/telemetry_data.h), which a relative change
 * of 1e-9 exceeds. */
START_TEST(test_entries_accumulate) {
    const int64_t n = 10007, h1 = 4001;
    tests_rng rng = {0xacc0u};
    mpt_backend *be = mpt_backend_cpu_create();
    float *v = be->alloc(be, (size_t)n * 4);
    void *a = be->alloc(be, (size_t)n * 2), *b = be->alloc(be, (size_t)n * 2);
    ck_assert(v && a && b);
    tel_fill_f32(&rng, MPT_DTYPE_F16, v, n);
    mpt_exp_hist *hs = malloc(sizeof *hs), *hw = malloc(sizeof *hw);
    ck_assert(hs && hw);
    mpt_exp_hist_init(hs, MPT_DTYPE_F16);
    mpt_exp_hist_init(hw, MPT_DTYPE_F16);
    const int ks[2] = {-3, -15};
    mpt_round_err es[2], ew[2];
    memset(es, 0, sizeof es);
    memset(ew, 0, sizeof ew);
    be->telemetry_rounding(be, hs, es, ks, 2, v, h1);
    be->telemetry_rounding(be, hs, es, ks, 2, v + h1, n - h1);
    be->telemetry_rounding(be, hw, ew, ks, 2, v, n);
    tel_check_hist(hs, hw, 0, n, "halves");
    for (int j = 0; j < 2; j++) {
        tel_check_err(&es[j], &ew[j], 0, n, "halves");
        ck_assert(isfinite(ew[j].err2) && ew[j].err2 > 0.0);
        ck_assert(!tel_close(ew[j].err2 * (1.0 + 1e-9), ew[j].err2, n, ew[j].err2));
    }
    float *d = be->alloc(be, (size_t)n * 4);
    ck_assert(d != NULL);
    tel_fill_lost(&rng, MPT_DTYPE_BF16, a, b, d, n);
    mpt_lost ls, lw;
    memset(&ls, 0, sizeof ls);
    memset(&lw, 0, sizeof lw);
    be->telemetry_lost(be, &ls, a, b, MPT_DTYPE_BF16, d, h1);
    be->telemetry_lost(be, &ls, (uint16_t *)a + h1, (uint16_t *)b + h1, MPT_DTYPE_BF16, d + h1, n - h1);
    be->telemetry_lost(be, &lw, a, b, MPT_DTYPE_BF16, d, n);
    tel_check_lost(&ls, &lw, 0, tel_applied_terms(a, b, MPT_DTYPE_BF16, d, n), "halves");
    mpt_range rs, rw;
    memset(&rs, 0, sizeof rs);
    memset(&rw, 0, sizeof rw);
    be->telemetry_range(be, &rs, a, MPT_DTYPE_BF16, h1);
    be->telemetry_range(be, &rs, (uint16_t *)a + h1, MPT_DTYPE_BF16, n - h1);
    be->telemetry_range(be, &rw, a, MPT_DTYPE_BF16, n);
    tel_check_range(&rs, &rw, "halves");
    free(hs);
    free(hw);
    be->free(be, v);
    be->free(be, a);
    be->free(be, b);
    be->free(be, d);
    mpt_backend_free(&be);
}
END_TEST

/* tel_csv_agree, which the cuda suite uses on the telemetry.csv of a run with and without the device reductions:
 * count-derived values must match as text, FP64-sum-derived ones within its tolerance, rows in the same order. */
START_TEST(test_csv_comparer) {
    const char *base = "step,tensor,metric,value\n5,fc1.weight,lost_frac,0.25\n5,fc1.weight,lost_mass,0.123456789\n";
    char why[512];
    ck_assert(tel_csv_agree(base, base, why, sizeof why));
    ck_assert_msg(tel_csv_agree(base, "step,tensor,metric,value\n5,fc1.weight,lost_frac,0.25\n"
                                      "5,fc1.weight,lost_mass,0.12345679\n", why, sizeof why),
                  "one unit of the ninth digit of a mass: %s", why);
    ck_assert(!tel_csv_agree(base, "step,tensor,metric,value\n5,fc1.weight,lost_frac,0.250000001\n"
                                   "5,fc1.weight,lost_mass,0.123456789\n", why, sizeof why));
    ck_assert(!tel_csv_agree(base, "step,tensor,metric,value\n5,fc1.weight,lost_frac,0.25\n"
                                   "5,fc1.weight,lost_mass,0.1234568\n", why, sizeof why));
    ck_assert(!tel_csv_agree(base, "step,tensor,metric,value\n5,fc1.weight,lost_frac,0.25\n"
                                   "5,fc1.weight,lost_mass,0.123456789\n5,amp,loss_scale,1\n", why, sizeof why));
    ck_assert(!tel_csv_agree(base, "step,tensor,metric,value\n5,fc1.weight,lost_frac,0.25\n"
                                   "5,fc2.weight,lost_mass,0.123456789\n", why, sizeof why));
}
END_TEST

/* ---- the collector on a graph --------------------------------------------------------------------------------- */

#define B 32

/* A small network with every layer kind that rounds: conv (forward and data gradient), linear, the loss; fc1 has
 * `hidden` outputs (32 in build). */
static mpt_graph *build_hidden(mpt_backend *be, mpt_precision mode, int dropout, int hidden) {
    mpt_policy pol = mpt_policy_make_explicit(mode, mode == MPT_PRECISION_TF32, mode == MPT_PRECISION_TF32);
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    int64_t shape[4] = {B, 1, 8, 8};
    mpt_tensor *x = mpt_input(g, 4, shape);
    x = mpt_relu(g, mpt_conv2d(g, x, 4, 3, 1, 1, "conv1"), "relu1");
    x = mpt_relu(g, mpt_conv2d(g, x, 6, 3, 1, 0, "conv2"), "relu2");
    x = mpt_maxpool2d(g, x, 2, 2, "pool");
    x = mpt_flatten(g, x, "flatten");
    if (dropout) x = mpt_dropout(g, x, 0.25f, "drop");
    x = mpt_relu(g, mpt_linear(g, x, hidden, "fc1"), "relu3");
    x = mpt_linear(g, x, 8, "fc2");
    mpt_softmax_xent(g, x, "loss");
    return g;
}

static mpt_graph *build(mpt_backend *be, mpt_precision mode, int dropout) { return build_hidden(be, mode, dropout, 32); }

typedef struct run {
    mpt_backend *be;
    mpt_trainer *tr;
} run;

static void run_open(run *r, mpt_precision mode, int telemetry_every, int twin, mpt_loss_scaling ls) {
    r->be = mpt_backend_cpu_create();
    mpt_train_config cfg = mpt_train_config_default(mode);
    cfg.seed = 11;
    cfg.loss_scaling = ls;
    cfg.scaler.growth_interval = 5; /* the scale moves during the test */
    ck_assert_int_eq(mpt_trainer_create(&r->tr, build(r->be, mode, 1), &cfg), MPT_OK);
    if (telemetry_every > 0)
        ck_assert_int_eq(mpt_telemetry_create(r->tr, telemetry_every, twin ? build(r->be, MPT_PRECISION_FP32, 1) : NULL),
                         MPT_OK);
}

static void run_close(run *r) {
    mpt_trainer_free(&r->tr);
    mpt_backend_free(&r->be);
}

static void gather(run *r, const mpt_mnist *d, int64_t b) {
    int32_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (int32_t)((b * B + i) % d->n_train);
    mpt_trainer_gather(r->tr, d->train_images, d->train_labels, idx, d->dim, 0.0f, 1.0f);
}

/* Telemetry (every step, with the twin) vs none: the same losses and the same bits in every master, optimizer
 * state and scaler field after each step. */
START_TEST(test_on_off_bit_identical) {
    static const mpt_precision modes[4] = {MPT_PRECISION_FP16, MPT_PRECISION_BF16, MPT_PRECISION_TF32,
                                           MPT_PRECISION_FP32};
    mpt_precision mode = modes[_i];
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 512, 64, 64, 8, 3), MPT_OK);
    mpt_loss_scaling ls = mode == MPT_PRECISION_FP16 ? MPT_LOSS_SCALE_DYNAMIC : MPT_LOSS_SCALE_NONE;
    run off, on;
    run_open(&off, mode, 0, 0, ls);
    run_open(&on, mode, 1, 1, ls);
    for (int64_t s = 0; s < 24; s++) {
        gather(&off, &d, s);
        gather(&on, &d, s);
        mpt_trainer_step(off.tr);
        mpt_trainer_step(on.tr);
        mpt_train_stats a, b;
        mpt_trainer_stats(off.tr, &a);
        mpt_trainer_stats(on.tr, &b);
        ck_assert_msg(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0, "step %lld: loss %a vs %a", (long long)s, a.loss,
                      b.loss);
        ck_assert_msg(memcmp(off.tr->scaler, on.tr->scaler, sizeof(mpt_scaler_state)) == 0, "step %lld: scaler",
                      (long long)s);
    }
    for (int i = 0; i < off.tr->n_params; i++) {
        size_t n = (size_t)mpt_tensor_numel(off.tr->master[i]);
        ck_assert_msg(memcmp(off.tr->master[i]->data, on.tr->master[i]->data, n * 4) == 0, "master %s differs",
                      off.tr->master[i]->name);
        ck_assert(memcmp(off.tr->m[i]->data, on.tr->m[i]->data, n * 4) == 0);
        ck_assert(memcmp(off.tr->v[i]->data, on.tr->v[i]->data, n * 4) == 0);
        ck_assert(memcmp(off.tr->weight[i]->data, on.tr->weight[i]->data, mpt_tensor_nbytes(off.tr->weight[i])) == 0);
    }
    const mpt_telemetry_stat *st;
    int ns = mpt_telemetry_stats(on.tr->telemetry, &st);
    ck_assert_int_gt(ns, 20);
    int seen_twin = 0, seen_flush = 0;
    for (int i = 0; i < ns; i++) {
        ck_assert_int_eq(st[i].last_step, 24);
        if (strcmp(st[i].metric, "twin_rel_l2") == 0) {
            seen_twin++;
            if (mode == MPT_PRECISION_FP32) /* the same computation as its twin */
                ck_assert_msg(st[i].sum == 0.0, "fp32: %s twin error %g", st[i].tensor, st[i].sum);
            else if (!(mode == MPT_PRECISION_TF32 && strcmp(st[i].tensor, "input") == 0)) /* tf32 stores FP32 */
                ck_assert_msg(st[i].last > 0.0, "%s: %s agrees exactly with its FP32 twin", mpt_precision_name(mode),
                              st[i].tensor);
        }
        if (strcmp(st[i].metric, "twin_cos") == 0 && mode == MPT_PRECISION_FP32)
            ck_assert_double_eq_tol(st[i].last, 1.0, 1e-12);
        if (strcmp(st[i].metric, "flush_frac@S=1") == 0) seen_flush++;
    }
    ck_assert_int_gt(seen_twin, 10);
    if (mode == MPT_PRECISION_FP16) ck_assert_int_ge(seen_flush, 4); /* conv1 is never a gradient target */
    run_close(&off);
    run_close(&on);
    mpt_mnist_free(&d);
}
END_TEST

/* Each probe, rounded into its tensor's dtype, gives the stored tensor (CPU: the same kernels and order). */
START_TEST(test_probes_round_to_stored) {
    static const mpt_precision modes[2] = {MPT_PRECISION_FP16, MPT_PRECISION_BF16};
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 5), MPT_OK);
    run r;
    run_open(&r, modes[_i], 0, 0, modes[_i] == MPT_PRECISION_FP16 ? MPT_LOSS_SCALE_DYNAMIC : MPT_LOSS_SCALE_NONE);
    gather(&r, &d, 0);
    mpt_trainer_step(r.tr); /* weights move once */
    gather(&r, &d, 1);
    mpt_graph *g = r.tr->g;
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    mpt_graph_fill_fused(g); /* fc1.out: its relu is fused into fc1's GEMM, which then writes only relu3.out */
    int64_t maxn = 0, maxs = 1;
    for (int i = 0; i < g->n_tensors; i++)
        if (mpt_tensor_numel(g->tensors[i]) > maxn) maxn = mpt_tensor_numel(g->tensors[i]);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->probe_scratch > maxs) maxs = g->nodes[i]->probe_scratch;
    float *dst = malloc((size_t)maxn * 4), *scratch = malloc((size_t)maxs * 4);
    int probes = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node *n = g->nodes[i];
        for (int pass = 0; pass < 2; pass++) {
            mpt_node_probe_fn f = pass ? n->probe_backward : n->probe_forward;
            if (!f) continue;
            const mpt_tensor *x = pass ? n->in[0]->grad : n->out;
            while (x->view_of) x = x->view_of;
            ck_assert_int_ge(mpt_backend_reserve_workspace(r.be, n->probe_workspace), 0);
            f(g, n, dst, scratch);
            int64_t bad = 0, cnt = mpt_tensor_numel(x);
            for (int64_t k = 0; k < cnt; k++) {
                uint16_t q = x->dtype == MPT_DTYPE_F16 ? mpt_f32_to_f16(dst[k]) : mpt_f32_to_bf16(dst[k]);
                if (q != ((const uint16_t *)x->data)[k]) bad++;
            }
            ck_assert_msg(bad == 0, "%s %s probe of %s: %lld of %lld elements round differently", n->name,
                          pass ? "backward" : "forward", x->name, (long long)bad, (long long)cnt);
            probes++;
        }
    }
    ck_assert_int_eq(probes, 4 + 4); /* forward: conv1, conv2, fc1, fc2; backward: conv2, fc1, fc2, loss */
    free(dst);
    free(scratch);
    run_close(&r);
    mpt_mnist_free(&d);
}
END_TEST

static double stat_last(const mpt_telemetry *tel, const char *tensor, const char *metric, int64_t *step) {
    const mpt_telemetry_stat *st;
    int n = mpt_telemetry_stats(tel, &st);
    for (int i = 0; i < n; i++)
        if (strcmp(st[i].tensor, tensor) == 0 && strcmp(st[i].metric, metric) == 0) {
            *step = st[i].last_step;
            return st[i].last;
        }
    ck_abort_msg("no %s %s row", tensor, metric);
    return NAN;
}

/* The collector's lost-update rows on a real step equal a brute-force count on an identical run whose deltas
 * the test collects itself (mpt_trainer.update_out): w_new == w_old && delta != 0, per parameter, on the FP32
 * masters and, for the counterfactual, on RNE(w_work_old + delta) in BF16. SGD at lr 1e-3 makes updates small
 * against BF16's ulp, so both fractions are far from 0 and 1 apart. */
START_TEST(test_lost_updates_in_a_step) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 9), MPT_OK);
    run runs[2];
    for (int k = 0; k < 2; k++) {
        runs[k].be = mpt_backend_cpu_create();
        mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_BF16);
        cfg.optim = mpt_optim_hparams_default(MPT_OPTIM_SGD);
        cfg.optim.lr = 1e-3f;
        cfg.schedule.base_lr = 1e-3f;
        ck_assert_int_eq(mpt_trainer_create(&runs[k].tr, build(runs[k].be, MPT_PRECISION_BF16, 0), &cfg), MPT_OK);
    }
    ck_assert_int_eq(mpt_telemetry_create(runs[1].tr, 3, NULL), MPT_OK);
    mpt_trainer *ref = runs[0].tr;
    int np = ref->n_params;
    float **delta = calloc((size_t)np, sizeof *delta), **old = calloc((size_t)np, sizeof *old);
    uint16_t **work = calloc((size_t)np, sizeof *work);
    for (int i = 0; i < np; i++) {
        int64_t n = mpt_tensor_numel(ref->master[i]);
        delta[i] = malloc((size_t)n * 4);
        old[i] = malloc((size_t)n * 4);
        work[i] = malloc((size_t)n * 2);
    }
    for (int64_t s = 0; s < 3; s++) {
        gather(&runs[0], &d, s);
        gather(&runs[1], &d, s);
        if (s == 2) { /* step 3: the telemetry step */
            for (int i = 0; i < np; i++) {
                memcpy(old[i], ref->master[i]->data, mpt_tensor_nbytes(ref->master[i]));
                memcpy(work[i], ref->weight[i]->data, mpt_tensor_nbytes(ref->weight[i]));
            }
            ref->update_out = delta;
        }
        mpt_trainer_step(ref);
        mpt_trainer_step(runs[1].tr);
    }
    ref->update_out = NULL;
    int64_t all_nz = 0, all_lost = 0, all_lost16 = 0;
    double all_mass = 0.0, all_applied = 0.0;
    for (int i = 0; i < np; i++) {
        int64_t n = mpt_tensor_numel(ref->master[i]), nz = 0, lost = 0, nz16 = 0, lost16 = 0;
        const float *w_new = ref->master[i]->data;
        for (int64_t k = 0; k < n; k++) {
            if (delta[i][k] == 0.0f) continue;
            nz++;
            if (w_new[k] == old[i][k]) lost++;
            all_mass += fabs((double)delta[i][k]);
            all_applied += delta[i][k] > 0.0f ? (double)w_new[k] - old[i][k] : (double)old[i][k] - w_new[k];
            float w16 = mpt_bf16_to_f32(work[i][k]);
            nz16++;
            if (mpt_bf16_to_f32(mpt_f32_to_bf16(w16 + delta[i][k])) == w16) lost16++;
        }
        int64_t step;
        double got = stat_last(runs[1].tr->telemetry, ref->weight[i]->name, "lost_frac", &step);
        ck_assert_int_eq(step, 3);
        ck_assert_msg(got == (nz ? (double)lost / (double)nz : 0.0), "%s lost_frac %g, brute force %lld/%lld",
                      ref->weight[i]->name, got, (long long)lost, (long long)nz);
        double got16 = stat_last(runs[1].tr->telemetry, ref->weight[i]->name, "lost_frac_if_16bit", &step);
        ck_assert_msg(got16 == (nz16 ? (double)lost16 / (double)nz16 : 0.0), "%s lost_frac_if_16bit %g, brute %lld/%lld",
                      ref->weight[i]->name, got16, (long long)lost16, (long long)nz16);
        if (strcmp(ref->weight[i]->name, "fc1.weight") == 0)
            ck_assert_msg(got16 > got, "fc1.weight: BF16 would lose %g, the FP32 master %g", got16, got);
        all_nz += nz;
        all_lost += lost;
        all_lost16 += lost16;
        free(delta[i]);
        free(old[i]);
        free(work[i]);
    }
    /* the pooled rows: every parameter's elements together (each element once) */
    int64_t step;
    ck_assert(stat_last(runs[1].tr->telemetry, MPT_TELEMETRY_ALL_PARAMS, "lost_frac", &step) ==
              (double)all_lost / (double)all_nz);
    ck_assert(stat_last(runs[1].tr->telemetry, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit", &step) ==
              (double)all_lost16 / (double)all_nz);
    const double applied = stat_last(runs[1].tr->telemetry, MPT_TELEMETRY_ALL_PARAMS, "applied_mass", &step);
    ck_assert_msg(all_applied > 0.0 && fabs(applied - all_applied / all_mass) <= 1e-12 * (all_applied / all_mass),
                  "applied_mass %.17g, brute force %.17g", applied, all_applied / all_mass);
    free(delta);
    free(old);
    free(work);
    for (int k = 0; k < 2; k++) run_close(&runs[k]);
    mpt_mnist_free(&d);
}
END_TEST

/* The run's exponent histograms (mpt_telemetry_write_exponents) against the same step's rounding rows: with one
 * telemetry step, a tensor's histogram is that step's values divided by S, so the share flushed at S = 1 lies
 * between the share of exponents <= -26 and of those <= -25 (binade -25 rounds to 0 or to 2^-24), and the share
 * made subnormal at S = 1 between binades -24..-16 and -25..-15 (binade -15 may round up to the smallest normal
 * 2^-14); the pooled rows are the sum of the tensors'. */
START_TEST(test_exponents_match_rounding_rows) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 512, 64, 64, 8, 3), MPT_OK);
    run r;
    run_open(&r, MPT_PRECISION_FP16, 6, 0, MPT_LOSS_SCALE_DYNAMIC);
    for (int64_t s = 0; s < 6; s++) { /* one telemetry step: step 6 */
        gather(&r, &d, s);
        mpt_trainer_step(r.tr);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rows = mpt_telemetry_write_exponents(r.tr->telemetry, f);
    fclose(f);
    ck_assert_int_gt(rows, 10);
    ck_assert(strncmp(buf, "tensor,exponent,count\n", 22) == 0);
    enum { LOW = -181, HIGH = 159 };
    static char names[16][64];
    static int64_t cnt[16][HIGH - LOW + 1];
    memset(cnt, 0, sizeof cnt);
    int nt = 0;
    for (char *line = strchr(buf, '\n') + 1; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        char name[64];
        int e;
        long long c;
        ck_assert_int_eq(sscanf(line, "%63[^,],%d,%lld", name, &e, &c), 3);
        ck_assert(e >= LOW && e <= HIGH && c > 0);
        int t = 0;
        while (t < nt && strcmp(names[t], name) != 0) t++;
        if (t == nt) snprintf(names[nt++], sizeof names[0], "%s", name);
        cnt[t][e - LOW] += c;
    }
    free(buf);
    ck_assert_int_ge(nt, 3);
    ck_assert_str_eq(names[nt - 1], MPT_TELEMETRY_ALL_ACT_GRAD);
    const mpt_telemetry_stat *st;
    int ns = mpt_telemetry_stats(r.tr->telemetry, &st);
    for (int t = 0; t < nt; t++) {
        int64_t total = 0, le26 = 0, le25 = 0, sub_in = 0, sub_out = 0;
        for (int e = LOW; e <= HIGH; e++) {
            int64_t c = cnt[t][e - LOW];
            total += c;
            le26 += e <= -26 ? c : 0;
            le25 += e <= -25 ? c : 0;
            sub_in += e >= -24 && e <= -16 ? c : 0;
            sub_out += e >= -25 && e <= -15 ? c : 0;
        }
        double flush = NAN, sub = NAN;
        for (int i = 0; i < ns; i++) {
            if (strcmp(st[i].tensor, names[t]) != 0) continue;
            if (strcmp(st[i].metric, "flush_frac@S=1") == 0) flush = st[i].last;
            if (strcmp(st[i].metric, "made_subnormal_frac@S=1") == 0) sub = st[i].last;
        }
        ck_assert_msg(isfinite(flush) && isfinite(sub), "%s: no rounding rows", names[t]);
        ck_assert_msg((double)le26 / total <= flush + 1e-12 && flush <= (double)le25 / total + 1e-12,
                      "%s: flushed at S = 1 %g, exponents <= -26: %g, <= -25: %g", names[t], flush,
                      (double)le26 / total, (double)le25 / total);
        ck_assert_msg((double)sub_in / total <= sub + 1e-12 && sub <= (double)sub_out / total + 1e-12,
                      "%s: subnormal at S = 1 %g outside [%g, %g]", names[t], sub, (double)sub_in / total,
                      (double)sub_out / total);
    }
    for (int e = LOW; e <= HIGH; e++) { /* pooled = the sum of the tensors */
        int64_t sum = 0;
        for (int t = 0; t < nt - 1; t++) sum += cnt[t][e - LOW];
        ck_assert_int_eq(sum, cnt[nt - 1][e - LOW]);
    }
    run_close(&r);
    mpt_mnist_free(&d);
}
END_TEST

START_TEST(test_create_rejects) {
    run r;
    run_open(&r, MPT_PRECISION_BF16, 0, 0, MPT_LOSS_SCALE_NONE);
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 0, NULL), MPT_ERR_ARG);
    ck_assert_ptr_null(r.tr->telemetry);
    /* a twin of another model */
    mpt_policy pol = mpt_policy_make(MPT_PRECISION_FP32);
    mpt_graph *tw = mpt_graph_create(r.be, &pol, B);
    int64_t shape[2] = {B, 64};
    mpt_softmax_xent(tw, mpt_linear(tw, mpt_input(tw, 2, shape), 8, "fc"), "loss");
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 5, tw), MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "twin") != NULL, "message: %s", mpt_last_error());
    /* a failed create leaves no collector behind: before, the half-made one (no buffers) stayed attached, a step
     * measured by it wrote through its NULL buffers, and a second create aborted */
    ck_assert_ptr_null(r.tr->telemetry);
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 1, NULL), MPT_OK);
    run_close(&r);
    /* the run's nodes, but a wider fc1 in the twin (40 outputs, the run's 32): its tensors' sizes differ */
    run_open(&r, MPT_PRECISION_BF16, 0, 0, MPT_LOSS_SCALE_NONE);
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 5, build_hidden(r.be, MPT_PRECISION_FP32, 1, 40)), MPT_ERR_ARG);
    ck_assert_msg(strstr(mpt_last_error(), "elements") != NULL, "message: %s", mpt_last_error());
    run_close(&r);
}
END_TEST

/* The bytes of an open file from its start (caller frees). */
static char *slurp(FILE *f, long *len) {
    ck_assert_int_eq(fflush(f), 0);
    *len = ftell(f);
    ck_assert_int_gt(*len, 0);
    char *buf = malloc((size_t)*len);
    ck_assert(buf != NULL);
    rewind(f);
    ck_assert_int_eq((long)fread(buf, 1, (size_t)*len, f), *len);
    return buf;
}

/* The collector through the backend's telemetry reductions and through its host copies (the entries set to NULL, as
 * on a backend without them): the same telemetry.csv bytes, every row (range, rounding, errors, lost updates and
 * their counterfactual) included. Loop index: fp16 (dynamic loss scale: the S = 1 counterfactuals), bf16, and bf16
 * with only the counterfactual's entry missing (the host copy of the deltas is then made for it alone). */
START_TEST(test_collector_paths_agree) {
    const mpt_precision mode = _i ? MPT_PRECISION_BF16 : MPT_PRECISION_FP16;
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 512, 64, 64, 8, 3), MPT_OK);
    const mpt_loss_scaling ls = mode == MPT_PRECISION_FP16 ? MPT_LOSS_SCALE_DYNAMIC : MPT_LOSS_SCALE_NONE;
    run dev, copy;
    run_open(&dev, mode, 2, 0, ls);
    run_open(&copy, mode, 2, 0, ls);
    if (_i < 2) {
        copy.be->telemetry_range = NULL;
        copy.be->telemetry_rounding = NULL;
        copy.be->telemetry_lost = NULL;
    }
    copy.be->telemetry_lost_counterfactual = NULL;
    FILE *fd = tmpfile(), *fc = tmpfile();
    ck_assert(fd && fc);
    mpt_telemetry_set_csv(dev.tr->telemetry, fd);
    mpt_telemetry_set_csv(copy.tr->telemetry, fc);
    for (int64_t s = 0; s < 12; s++) {
        gather(&dev, &d, s);
        gather(&copy, &d, s);
        mpt_trainer_step(dev.tr);
        mpt_trainer_step(copy.tr);
    }
    long ld, lc;
    char *bd = slurp(fd, &ld), *bc = slurp(fc, &lc);
    ck_assert_msg(ld == lc && memcmp(bd, bc, (size_t)ld) == 0, "telemetry.csv differs: %ld bytes through the entries, "
                  "%ld through host copies", ld, lc);
    ck_assert_msg(strstr(bd, "lost_frac_if_16bit") && strstr(bd, "rel_l2_err") && strstr(bd, "zero_frac"),
                  "rows missing from the telemetry");
    if (mode == MPT_PRECISION_FP16) ck_assert(strstr(bd, "rel_l2_err@S=1") != NULL);
    free(bd);
    free(bc);
    fclose(fd);
    fclose(fc);
    run_close(&dev);
    run_close(&copy);
    mpt_mnist_free(&d);
}
END_TEST

/* Every counter from its own definition (range.h), on a buffer where no two counts are equal (the buffers above give
 * zero and subnormal the same count, so a counter that read the other's class passed them): FP16 +-0 four times, the
 * smallest subnormal 2^-24 once, +-65504 and +inf (at the largest magnitude: 3), +inf and NaN (non-finite: 2), 1.0. */
START_TEST(test_range_counts_distinct) {
    const uint16_t v[10] = {0x0000, 0x8000, 0x0000, 0x8000, 0x0001, 0x7bff, 0xfbff, 0x7c00, 0x7e00, 0x3c00};
    mpt_range r;
    memset(&r, 0, sizeof r);
    mpt_range_count(&r, v, MPT_DTYPE_F16, 10);
    ck_assert_int_eq(r.n, 10);
    ck_assert_int_eq(r.zero, 4);
    ck_assert_int_eq(r.subnormal, 1);
    ck_assert_int_eq(r.at_max, 3);
    ck_assert_int_eq(r.nonfinite, 2);
}
END_TEST

/* The rounding fractions are of the nonzero finite values (range.h): zeros and NaN/inf are counted apart and in n, not
 * in the denominators. FP16, k = 0: 0, -0, NaN, inf, 2^-30 (flushed: below 2^-25), 2^-20 (subnormal), 1.0 (normal),
 * 2^16 (overflow: above 65504): n 8, zero 2, nonfinite 2, nonzero 4; each fraction 1/4. */
START_TEST(test_hist_fractions_of_nonzero_finite) {
    const float v[8] = {0.0f, -0.0f, NAN, INFINITY, 0x1p-30f, 0x1p-20f, 1.0f, 0x1p16f};
    mpt_exp_hist h;
    mpt_exp_hist_init(&h, MPT_DTYPE_F16);
    mpt_exp_hist_add(&h, v, 8);
    ck_assert_int_eq(h.n, 8);
    ck_assert_int_eq(h.zero, 2);
    ck_assert_int_eq(h.nonfinite, 2);
    mpt_round_stats rs;
    mpt_exp_hist_round(&h, 0, &rs);
    ck_assert_int_eq(rs.nonzero, 4);
    ck_assert_int_eq(rs.flushed, 1);
    ck_assert_int_eq(rs.subnormal, 1);
    ck_assert_int_eq(rs.overflow, 1);
    ck_assert_double_eq(rs.flushed_frac, 0.25);
    ck_assert_double_eq(rs.subnormal_frac, 0.25);
    ck_assert_double_eq(rs.overflow_frac, 0.25);
}
END_TEST

/* mpt_exp_hist_merge (the collector pools every probed tensor's histogram with it): the histograms of two parts of a
 * buffer merged equal the histogram of the whole, every counter exactly (carry_sub included: the values have carries
 * into the smallest normal) and the masses within a reassociated sum's bound; n is the element count. */
START_TEST(test_hist_merge_is_whole) {
    enum { N = 10007, H1 = 4001 };
    static float v[N];
    tests_rng rng = {0x3e7e6eu};
    tel_fill_f32(&rng, MPT_DTYPE_F16, v, N);
    mpt_exp_hist *a = malloc(sizeof *a), *b = malloc(sizeof *b), *w = malloc(sizeof *w);
    ck_assert(a && b && w);
    mpt_exp_hist_init(a, MPT_DTYPE_F16);
    mpt_exp_hist_init(b, MPT_DTYPE_F16);
    mpt_exp_hist_init(w, MPT_DTYPE_F16);
    mpt_exp_hist_add(a, v, H1);
    mpt_exp_hist_add(b, v + H1, N - H1);
    mpt_exp_hist_add(w, v, N);
    int64_t carry_sub_b = 0;
    double mass_b = 0.0;
    for (int j = 0; j < MPT_EXP_HIST_BINS; j++) {
        carry_sub_b += b->carry_sub[j];
        mass_b += b->mass[j];
    }
    ck_assert_msg(carry_sub_b > 0 && mass_b > 0.0, "the second part must carry into the smallest normal");
    mpt_exp_hist_merge(a, b);
    ck_assert_int_eq(w->n, N);
    tel_check_hist(a, w, 0, N, "merged halves");
    free(a);
    free(b);
    free(w);
}
END_TEST

/* Saturation is |x s| > fmax (range.h 3): the largest finite value itself is kept, the next float above it is not.
 * E4M3 (fmax 448) and E5M2 (fmax 57344) at s = 1, and 224 at s = 2 (v = 448 exactly). */
START_TEST(test_fp8_saturation_boundary) {
    const float x[4] = {448.0f, -448.0f, nextafterf(448.0f, INFINITY), 1.0f};
    mpt_fp8_range r;
    memset(&r, 0, sizeof r);
    mpt_fp8_range_count(&r, x, 4, 1.0f, 0);
    ck_assert_int_eq(r.nonzero, 4);
    ck_assert_int_eq(r.saturated, 1);
    const float y[3] = {57344.0f, -nextafterf(57344.0f, INFINITY), 224.0f};
    memset(&r, 0, sizeof r);
    mpt_fp8_range_count(&r, y, 3, 1.0f, 1);
    ck_assert_int_eq(r.saturated, 1);
    memset(&r, 0, sizeof r);
    mpt_fp8_range_count(&r, y + 2, 1, 2.0f, 0);
    ck_assert_int_eq(r.saturated, 0);
}
END_TEST

/* The collector's stored-range rows of every forward output (zero_frac, subnormal_frac, max_frac, nonfinite_frac)
 * equal a count, here, of the stored 16-bit tensor's bits after the telemetry step (the optimizer step does not
 * touch activations): zero = exponent and significand fields 0, subnormal = exponent 0 and significand not, at max =
 * the largest finite magnitude or inf, non-finite = exponent all ones; each divided by the element count. */
START_TEST(test_range_rows_match_stored) {
    const mpt_precision mode = _i ? MPT_PRECISION_BF16 : MPT_PRECISION_FP16;
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 5), MPT_OK);
    run r;
    run_open(&r, mode, 1, 0, mode == MPT_PRECISION_FP16 ? MPT_LOSS_SCALE_DYNAMIC : MPT_LOSS_SCALE_NONE);
    gather(&r, &d, 0);
    mpt_trainer_step(r.tr);
    const uint16_t emask = mode == MPT_PRECISION_FP16 ? 0x7c00 : 0x7f80, maxf = mode == MPT_PRECISION_FP16 ? 0x7bff : 0x7f7f;
    const mpt_graph *g = r.tr->g;
    int checked = 0, some_zero = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_tensor *y = g->nodes[i]->out;
        if (!y || y->view_of || g->nodes[i]->op == MPT_OP_SOFTMAX_XENT || y->dtype == MPT_DTYPE_F32) continue;
        ck_assert(y->dtype == (mode == MPT_PRECISION_FP16 ? MPT_DTYPE_F16 : MPT_DTYPE_BF16));
        const uint16_t *u = y->data;
        int64_t n = mpt_tensor_numel(y), zero = 0, sub = 0, atmax = 0, nonfin = 0;
        for (int64_t k = 0; k < n; k++) {
            const uint16_t a = u[k] & 0x7fff;
            zero += a == 0;
            sub += a != 0 && (a & emask) == 0;
            atmax += a == maxf || a == emask;
            nonfin += (a & emask) == emask;
        }
        const double want[4] = {(double)zero / n, (double)sub / n, (double)atmax / n, (double)nonfin / n};
        static const char *const metric[4] = {"zero_frac", "subnormal_frac", "max_frac", "nonfinite_frac"};
        for (int m = 0; m < 4; m++) {
            int64_t step;
            const double got = stat_last(r.tr->telemetry, y->name, metric[m], &step);
            ck_assert_msg(step == 1 && got == want[m], "%s %s %.17g, counted %.17g", y->name, metric[m], got, want[m]);
        }
        some_zero |= zero > 0 && zero != sub;
        checked++;
    }
    ck_assert_int_ge(checked, 5);
    ck_assert_msg(some_zero, "no forward output with zeros (relu) to tell the counters apart");
    run_close(&r);
    /* a NaN is non-finite but not at the largest magnitude: one NaN injected into the first weight gradient (FP32,
     * measured before unscale) gives nonfinite_frac 1/n and max_frac 0 (no gradient here comes near FLT_MAX) */
    r.be = mpt_backend_cpu_create();
    mpt_train_config cfg = mpt_train_config_default(mode);
    cfg.seed = 11;
    cfg.loss_scaling = mode == MPT_PRECISION_FP16 ? MPT_LOSS_SCALE_DYNAMIC : MPT_LOSS_SCALE_NONE;
    cfg.inject_nonfinite_step = 0;
    ck_assert_int_eq(mpt_trainer_create(&r.tr, build(r.be, mode, 1), &cfg), MPT_OK);
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 1, NULL), MPT_OK);
    gather(&r, &d, 0);
    mpt_trainer_step(r.tr);
    const mpt_tensor *g0 = r.tr->weight[0]->grad;
    int64_t step;
    ck_assert(stat_last(r.tr->telemetry, g0->name, "nonfinite_frac", &step) == 1.0 / (double)mpt_tensor_numel(g0));
    ck_assert(stat_last(r.tr->telemetry, g0->name, "max_frac", &step) == 0.0);
    run_close(&r);
    mpt_mnist_free(&d);
}
END_TEST

/* What rounding v * 2^k into dt actually does, value by value: c[0] nonzero finite values, c[1] flushed to zero,
 * c[2] made subnormal, c[3] overflowed; err2 += sum (RNE(v 2^k) 2^-k - v)^2 and ref2 += sum v^2 over finite v (FP64).
 * No FP32-exactness requirement: a value that ldexpf rounds lies below 2^-126, where FP16 and BF16 flush it anyway. */
static void brute_rounding(const float *v, int64_t n, mpt_dtype dt, int k, int64_t c[4], double *err2, double *ref2) {
    const uint16_t emask = dt == MPT_DTYPE_F16 ? 0x7c00 : 0x7f80;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        const float s = ldexpf(v[i], k);
        const uint16_t q = dt == MPT_DTYPE_F16 ? mpt_f32_to_f16(s) : mpt_f32_to_bf16(s), a = q & 0x7fff;
        const double back = ldexp((double)(dt == MPT_DTYPE_F16 ? mpt_f16_to_f32(q) : mpt_bf16_to_f32(q)), -k);
        *err2 += (back - (double)v[i]) * (back - (double)v[i]);
        *ref2 += (double)v[i] * (double)v[i];
        if (v[i] == 0.0f) continue;
        c[0]++;
        c[1] += a == 0;
        c[2] += a != 0 && (a & emask) == 0;
        c[3] += (a & emask) == emask;
    }
}

/* The rows of one tensor (or a pool) against the rounding's counts and L2 errors. */
static void check_round_rows(const mpt_telemetry *tel, const char *tensor, const char *suffix, const int64_t c[4],
                             const char *err_metric, double err2, double ref2) {
    static const char *const metric[3] = {"flush_frac", "made_subnormal_frac", "overflow_frac"};
    for (int m = 0; m < 3; m++) {
        char name[48];
        snprintf(name, sizeof name, "%s%s", metric[m], suffix);
        int64_t step;
        const double got = stat_last(tel, tensor, name, &step), want = c[0] ? (double)c[m + 1] / (double)c[0] : 0.0;
        ck_assert_msg(got == want, "%s %s: %.17g, rounding gives %.17g", tensor, name, got, want);
    }
    if (!err_metric) return;
    int64_t step;
    const double got = stat_last(tel, tensor, err_metric, &step), want = ref2 > 0.0 ? sqrt(err2 / ref2) : 0.0;
    ck_assert_msg(fabs(got - want) <= 1e-12 * want, "%s %s: %.17g, rounding gives %.17g", tensor, err_metric, got, want);
}

/* The collector's rounding rows against the rounding itself: after a forward and backward at the loss scale S, the
 * telemetry hook's flush / made-subnormal / overflow fractions and relative L2 errors of each probed tensor (forward
 * outputs at S; gradients at S and the counterfactuals S/2, 2S and S = 1), and of the pools of all activations and all
 * activation gradients, equal what rounding each probe value times 2^k into the tensor's dtype gives, counted here
 * value by value (k = 0, -1, +1, -log2 S). FP16 at a static S = 2^-10. */
START_TEST(test_rounding_rows_match_rounding) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 5), MPT_OK);
    run r;
    /* a static S = 2^-10: the scaled gradients straddle FP16's subnormal band, so S/2, 2S and S = 1 each round
     * differently (at the dynamic scale's 2^16 halving S changes nothing these values show) */
    r.be = mpt_backend_cpu_create();
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP16);
    cfg.seed = 11;
    cfg.loss_scaling = MPT_LOSS_SCALE_STATIC;
    cfg.init_scale = 0x1p-10f;
    /* no dropout: fc1 reads the flatten view, so its input gradient is a view whose rows carry its root's name */
    ck_assert_int_eq(mpt_trainer_create(&r.tr, build(r.be, MPT_PRECISION_FP16, 0), &cfg), MPT_OK);
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 1, NULL), MPT_OK);
    gather(&r, &d, 0);
    mpt_trainer_step(r.tr);
    gather(&r, &d, 1);
    mpt_graph *g = r.tr->g;
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    mpt_telemetry_after_backward(r.tr->telemetry);
    r.tr->update_out = NULL; /* the hook armed the lost-update deltas for a step that does not come */
    int log2s = 0;
    ck_assert(frexpf(r.tr->scaler->scale, &log2s) == 0.5f);
    log2s -= 1;
    int64_t maxn = 0, maxs = 1;
    for (int i = 0; i < g->n_tensors; i++)
        if (mpt_tensor_numel(g->tensors[i]) > maxn) maxn = mpt_tensor_numel(g->tensors[i]);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->probe_scratch > maxs) maxs = g->nodes[i]->probe_scratch;
    float *dst = malloc((size_t)maxn * 4), *scratch = malloc((size_t)maxs * 4);
    static const char *const suffix[4] = {"", "@S/2", "@2S", "@S=1"};
    const int ks[4] = {0, -1, 1, -log2s};
    int64_t pool[2][4][4];                 /* [activations, gradients][k][count] */
    double perr[2][4], pref[2][4];
    memset(pool, 0, sizeof pool);
    memset(perr, 0, sizeof perr);
    memset(pref, 0, sizeof pref);
    int tensors = 0, moved[4] = {0, 0, 0, 0};
    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node *n = g->nodes[i];
        for (int pass = 0; pass < 2; pass++) {
            mpt_node_probe_fn f = pass ? n->probe_backward : n->probe_forward;
            if (!f) continue;
            const mpt_tensor *x = pass ? n->in[0]->grad : n->out;
            while (x->view_of) x = x->view_of;
            ck_assert_int_ge(mpt_backend_reserve_workspace(r.be, n->probe_workspace), 0);
            f(g, n, dst, scratch);
            const int64_t cnt = mpt_tensor_numel(x);
            int64_t c0[4] = {0, 0, 0, 0};
            for (int j = 0; j < (pass ? 4 : 1); j++) {
                int64_t c[4] = {0, 0, 0, 0};
                double err2 = 0.0, ref2 = 0.0;
                brute_rounding(dst, cnt, x->dtype, ks[j], c, &err2, &ref2);
                for (int m = 0; m < 4; m++) pool[pass][j][m] += c[m];
                perr[pass][j] += err2;
                pref[pass][j] += ref2;
                if (j == 0) memcpy(c0, c, sizeof c0);
                moved[j] |= j > 0 && (c[1] != c0[1] || c[2] != c0[2] || c[3] != c0[3]);
                check_round_rows(r.tr->telemetry, x->name, suffix[j], c,
                                 j == 0 ? "rel_l2_err" : j == 3 ? "rel_l2_err@S=1" : NULL, err2, ref2);
            }
            tensors++;
        }
    }
    ck_assert_int_eq(tensors, 4 + 4);
    check_round_rows(r.tr->telemetry, MPT_TELEMETRY_ALL_ACT, "", pool[0][0], "rel_l2_err", perr[0][0], pref[0][0]);
    for (int j = 0; j < 4; j++)
        check_round_rows(r.tr->telemetry, MPT_TELEMETRY_ALL_ACT_GRAD, suffix[j], pool[1][j],
                         j == 0 ? "rel_l2_err" : j == 3 ? "rel_l2_err@S=1" : NULL, perr[1][j], pref[1][j]);
    ck_assert_msg(moved[1] && moved[2] && moved[3], "a counterfactual (S/2 %d, 2S %d, S=1 %d) never differs from the actual "
                  "rounding: the test could not tell it apart", moved[1], moved[2], moved[3]);
    free(dst);
    free(scratch);
    run_close(&r);
    mpt_mnist_free(&d);
}
END_TEST

/* The twin's comparison divides the run's gradients by S (the twin runs at S = 1): in fp32 with a static loss scale
 * S = 2^10 every gradient is exactly S times the twin's (a power-of-two scaling commutes with every FP32 sum and product
 * here: nothing overflows or becomes subnormal), so each gradient's twin_rel_l2 is exactly 0 and twin_cos 1, as with
 * S = 1; a comparison that did not divide by S, or multiplied, would report S - 1 or more. Telemetry every 2 steps: the
 * twin gathers the batch of each measured step (steps 2 and 4), not of the step before, and runs only on a step whose
 * batch it gathered. */
START_TEST(test_twin_divides_by_the_loss_scale) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 5), MPT_OK);
    run r;
    r.be = mpt_backend_cpu_create();
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP32);
    cfg.seed = 11;
    cfg.loss_scaling = MPT_LOSS_SCALE_STATIC;
    cfg.init_scale = 1024.0f;
    ck_assert_int_eq(mpt_trainer_create(&r.tr, build(r.be, MPT_PRECISION_FP32, 1), &cfg), MPT_OK);
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 2, build(r.be, MPT_PRECISION_FP32, 1)), MPT_OK);
    for (int64_t s = 0; s < 4; s++) {
        gather(&r, &d, s);
        mpt_trainer_step(r.tr);
    }
    /* two more steps without a new batch (the run reuses step 4's): step 6 is measured, but the twin has gathered no
     * batch for it and must not run (its rows stay at steps 2 and 4) */
    for (int64_t s = 4; s < 6; s++) mpt_trainer_step(r.tr);
    const mpt_telemetry_stat *st;
    int ns = mpt_telemetry_stats(r.tr->telemetry, &st), grads = 0;
    for (int i = 0; i < ns; i++) {
        if (!strstr(st[i].tensor, "grad")) continue;
        if (strcmp(st[i].metric, "twin_rel_l2") == 0) {
            ck_assert_msg(st[i].count == 2 && st[i].sum == 0.0, "%s: twin_rel_l2 %g over %lld steps", st[i].tensor,
                          st[i].sum, (long long)st[i].count);
            grads++;
        }
        if (strcmp(st[i].metric, "twin_cos") == 0) ck_assert_double_eq_tol(st[i].last, 1.0, 1e-12);
    }
    ck_assert_int_ge(grads, 8);
    run_close(&r);
    mpt_mnist_free(&d);
}
END_TEST

/* twin_cos of each weight gradient is the cosine of the run's gradient / S and the FP32 gradient of the same masters on
 * the same batch (the twin's): here that FP32 gradient comes from a trainer of the test's own (fp32, the same seed and
 * step, so the same dropout masks, S = 1) whose weights are set to the fp16 run's masters before the step; after a
 * step a trainer's weight gradients hold g / S (unscaled in place; S a power of two, exact). Sums in double. */
START_TEST(test_twin_cos_is_the_cosine) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 5), MPT_OK);
    run on, ref;
    run_open(&on, MPT_PRECISION_FP16, 1, 1, MPT_LOSS_SCALE_DYNAMIC);
    run_open(&ref, MPT_PRECISION_FP32, 0, 0, MPT_LOSS_SCALE_NONE);
    for (int i = 0; i < ref.tr->n_params; i++) {
        ck_assert(ref.tr->weight[i]->dtype == MPT_DTYPE_F32 && on.tr->master[i]->dtype == MPT_DTYPE_F32);
        memcpy(ref.tr->master[i]->data, on.tr->master[i]->data, mpt_tensor_nbytes(on.tr->master[i]));
        memcpy(ref.tr->weight[i]->data, on.tr->master[i]->data, mpt_tensor_nbytes(on.tr->master[i]));
    }
    gather(&on, &d, 0);
    gather(&ref, &d, 0);
    mpt_trainer_step(on.tr);
    mpt_trainer_step(ref.tr);
    mpt_train_stats st;
    mpt_trainer_stats(on.tr, &st);
    ck_assert_int_eq(st.steps_skipped, 0);
    for (int i = 0; i < on.tr->n_params; i++) {
        const float *a = on.tr->weight[i]->grad->data, *b = ref.tr->weight[i]->grad->data;
        double ab = 0.0, a2 = 0.0, b2 = 0.0;
        for (int64_t k = 0; k < mpt_tensor_numel(on.tr->weight[i]); k++) {
            ab += (double)a[k] * b[k];
            a2 += (double)a[k] * a[k];
            b2 += (double)b[k] * b[k];
        }
        int64_t step;
        const double got = stat_last(on.tr->telemetry, on.tr->weight[i]->grad->name, "twin_cos", &step);
        const double want = ab / sqrt(a2 * b2);
        ck_assert_msg(fabs(got - want) <= 1e-12 && want < 1.0 - 1e-9, "%s: twin_cos %.17g, cosine %.17g",
                      on.tr->weight[i]->grad->name, got, want);
    }
    /* the input as stored (FP16, each pixel / 255 rounded once: relative error at most u = 2^-11) against the twin's
     * FP32 input: 0 < twin_rel_l2 <= u */
    int64_t step;
    const double e = stat_last(on.tr->telemetry, "input", "twin_rel_l2", &step);
    ck_assert_msg(e > 0.0 && e <= 0x1p-11, "input: twin_rel_l2 %g, FP16 rounding gives at most 2^-11", e);
    run_close(&on);
    run_close(&ref);
    mpt_mnist_free(&d);
}
END_TEST

/* FP8 cast counts of n values from their definitions (range.h 3): v = x s in FP32; saturated |v| > fmax, else flushed
 * when the cast gives 0, subnormal when it gives a zero exponent field. */
static void fp8_brute(const float *x, int64_t n, float s, int e5, int64_t c[4]) {
    memset(c, 0, 4 * sizeof *c);
    for (int64_t i = 0; i < n; i++) {
        if (x[i] == 0.0f || !isfinite(x[i])) continue;
        const float v = x[i] * s;
        c[0]++;
        if (fabsf(v) > (e5 ? 57344.0f : 448.0f)) {
            c[1]++;
            continue;
        }
        const uint8_t q = mpt_f32_to_fp8(v, e5, 1) & 0x7f;
        c[2] += q == 0;
        c[3] += q != 0 && (q >> (e5 ? 2 : 3)) == 0;
    }
}

static void check_fp8_rows(const mpt_telemetry *tel, const char *name, const char *suffix, const int64_t c[4]) {
    static const char *const metric[3] = {"fp8_sat_frac", "fp8_flush_frac", "fp8_subnormal_frac"};
    for (int m = 0; m < 3; m++) {
        char full[48];
        snprintf(full, sizeof full, "%s%s", metric[m], suffix);
        int64_t step;
        const double got = stat_last(tel, name, full, &step), want = (double)c[m + 1] / (double)(c[0] ? c[0] : 1);
        ck_assert_msg(got == want, "%s %s: %.17g, the casts give %.17g", name, full, got, want);
    }
}

/* The collector's FP8 rows of an fp8 run (E4M3 x and W, E5M2 dy, delayed per-tensor scaling) against the casts
 * themselves: after two steps (so that the scales have moved from 1) a forward and backward and the telemetry hook;
 * for x, W and dy of the FP8 layer, the saturated / flushed / subnormal shares at its scale s, at s/2 and at 2s; for dy
 * also in the other format (E4M3) scaled by the same rule for its own largest value, s 448 / 57344; the pooled
 * gradient rows (one FP8 layer: its dy); and the staleness amax / amax_used. */
START_TEST(test_fp8_rows_match_casts) {
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 64, 64, 8, 5), MPT_OK);
    run r;
    r.be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP8, 0, 0);
    mpt_graph *g = mpt_graph_create(r.be, &pol, B);
    int64_t shape[2] = {B, 64};
    mpt_tensor *x = mpt_input(g, 2, shape);
    x = mpt_relu(g, mpt_linear(g, x, 32, "fc1"), "relu1"); /* 32 x 64 -> 32: the FP8 layer */
    mpt_softmax_xent(g, mpt_linear(g, x, 8, "fc2"), "loss");
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP8);
    cfg.seed = 11;
    ck_assert_int_eq(mpt_trainer_create(&r.tr, g, &cfg), MPT_OK);
    ck_assert_int_eq(mpt_telemetry_create(r.tr, 1, NULL), MPT_OK);
    for (int64_t s = 0; s < 2; s++) {
        gather(&r, &d, s);
        mpt_trainer_step(r.tr);
    }
    gather(&r, &d, 2);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    mpt_telemetry_after_backward(r.tr->telemetry);
    r.tr->update_out = NULL;
    int fp8_nodes = 0;
    float *h = malloc(sizeof(float) * 64 * 64);
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_node *n = g->nodes[i];
        if (!n->fp8) continue;
        fp8_nodes++;
        const mpt_fp8_operand *ops[3] = {&n->fp8_x, &n->fp8_w, &n->fp8_dy};
        const mpt_tensor *src[3] = {n->in[0], n->in[1], n->out->grad};
        for (int k = 0; k < 3; k++) {
            const mpt_fp8_meta *m = &g->fp8_meta[ops[k]->meta];
            const char *name = g->fp8[ops[k]->meta].name;
            const int64_t cnt = mpt_tensor_numel(src[k]);
            ck_assert(src[k]->dtype == MPT_DTYPE_BF16 && cnt <= 64 * 64);
            float amax = 0.0f;
            for (int64_t j = 0; j < cnt; j++) {
                h[j] = mpt_bf16_to_f32(((const uint16_t *)src[k]->data)[j]);
                amax = fabsf(h[j]) > amax ? fabsf(h[j]) : amax;
            }
            const int e5 = ops[k]->fmt == MPT_DTYPE_E5M2;
            ck_assert_int_eq(e5, k == 2);
            ck_assert_msg(m->scale != 1.0f && m->amax_used > 0.0f, "%s: the scale has not moved", name);
            int64_t c[4];
            static const char *const suffix[3] = {"@s/2", "", "@2s"};
            for (int j = -1; j <= 1; j++) {
                fp8_brute(h, cnt, ldexpf(m->scale, j), e5, c);
                check_fp8_rows(r.tr->telemetry, name, suffix[j + 1], c);
                if (k == 2 && j == 0) check_fp8_rows(r.tr->telemetry, MPT_TELEMETRY_ALL_FP8_GRAD, "", c);
            }
            int64_t step;
            const double stale = stat_last(r.tr->telemetry, name, "fp8_staleness", &step);
            ck_assert_msg(stale == (double)amax / (double)m->amax_used, "%s: staleness %.17g, amax %g / %g", name, stale,
                          (double)amax, (double)m->amax_used);
            if (k == 2) {
                fp8_brute(h, cnt, m->scale * (448.0f / 57344.0f), 0, c);
                check_fp8_rows(r.tr->telemetry, name, "@other_format", c);
                check_fp8_rows(r.tr->telemetry, MPT_TELEMETRY_ALL_FP8_GRAD, "@other_format", c);
            }
        }
    }
    ck_assert_int_eq(fp8_nodes, 1);
    free(h);
    run_close(&r);
    mpt_mnist_free(&d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("telemetry");
    TCase *tc = tcase_create("instruments");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_range_f16_bits);
    tcase_add_test(tc, test_range_bf16_f32_bits);
    tcase_add_test(tc, test_hist_counts_on_known_exponents);
    tcase_add_test(tc, test_hist_boundaries);
    tcase_add_test(tc, test_hist_counterfactuals_f16);
    tcase_add_test(tc, test_hist_counterfactuals_bf16);
    tcase_add_test(tc, test_hist_log2_exact);
    tcase_add_test(tc, test_round_err);
    tcase_add_test(tc, test_lost_applied_mass_under_stochastic_rounding);
    tcase_add_loop_test(tc, test_lost_matches_brute_force, 0, 3);
    tcase_add_loop_test(tc, test_entries_match_host_functions, 0, 3);
    tcase_add_test(tc, test_entries_accumulate);
    tcase_add_test(tc, test_csv_comparer);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("collector");
    tcase_set_timeout(tg, 240);
    tcase_add_loop_test(tg, test_on_off_bit_identical, 0, 4);
    tcase_add_loop_test(tg, test_probes_round_to_stored, 0, 2);
    tcase_add_test(tg, test_create_rejects);
    tcase_add_test(tg, test_exponents_match_rounding_rows);
    tcase_add_test(tg, test_lost_updates_in_a_step);
    tcase_add_loop_test(tg, test_collector_paths_agree, 0, 3);
    tcase_add_test(tc, test_range_counts_distinct);
    tcase_add_test(tc, test_hist_fractions_of_nonzero_finite);
    tcase_add_test(tc, test_hist_merge_is_whole);
    tcase_add_test(tc, test_fp8_saturation_boundary);
    tcase_add_loop_test(tg, test_range_rows_match_stored, 0, 2);
    tcase_add_test(tg, test_rounding_rows_match_rounding);
    tcase_add_test(tg, test_twin_divides_by_the_loss_scale);
    tcase_add_test(tg, test_twin_cos_is_the_cosine);
    tcase_add_test(tg, test_fp8_rows_match_casts);
    suite_add_tcase(s, tg);
    return mpt_test_run(s);
}
