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

/* A small network with every layer kind that rounds: conv (forward and data gradient), linear, the loss. */
static mpt_graph *build(mpt_backend *be, mpt_precision mode, int dropout) {
    mpt_policy pol = mpt_policy_make_explicit(mode, mode == MPT_PRECISION_TF32, mode == MPT_PRECISION_TF32);
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    int64_t shape[4] = {B, 1, 8, 8};
    mpt_tensor *x = mpt_input(g, 4, shape);
    x = mpt_relu(g, mpt_conv2d(g, x, 4, 3, 1, 1, "conv1"), "relu1");
    x = mpt_relu(g, mpt_conv2d(g, x, 6, 3, 1, 0, "conv2"), "relu2");
    x = mpt_maxpool2d(g, x, 2, 2, "pool");
    x = mpt_flatten(g, x, "flatten");
    if (dropout) x = mpt_dropout(g, x, 0.25f, "drop");
    x = mpt_relu(g, mpt_linear(g, x, 32, "fc1"), "relu3");
    x = mpt_linear(g, x, 8, "fc2");
    mpt_softmax_xent(g, x, "loss");
    return g;
}

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
    for (int i = 0; i < np; i++) {
        int64_t n = mpt_tensor_numel(ref->master[i]), nz = 0, lost = 0, nz16 = 0, lost16 = 0;
        const float *w_new = ref->master[i]->data;
        for (int64_t k = 0; k < n; k++) {
            if (delta[i][k] == 0.0f) continue;
            nz++;
            if (w_new[k] == old[i][k]) lost++;
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
        free(delta[i]);
        free(old[i]);
        free(work[i]);
    }
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
 * their counterfactual) included. Loop index: fp16 (dynamic loss scale: the S = 1 counterfactuals) and bf16. */
START_TEST(test_collector_paths_agree) {
    const mpt_precision mode = _i ? MPT_PRECISION_BF16 : MPT_PRECISION_FP16;
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 512, 64, 64, 8, 3), MPT_OK);
    const mpt_loss_scaling ls = mode == MPT_PRECISION_FP16 ? MPT_LOSS_SCALE_DYNAMIC : MPT_LOSS_SCALE_NONE;
    run dev, copy;
    run_open(&dev, mode, 2, 0, ls);
    run_open(&copy, mode, 2, 0, ls);
    copy.be->telemetry_range = NULL;
    copy.be->telemetry_rounding = NULL;
    copy.be->telemetry_lost = NULL;
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
    tcase_add_loop_test(tg, test_collector_paths_agree, 0, 2);
    suite_add_tcase(s, tg);
    return mpt_test_run(s);
}
