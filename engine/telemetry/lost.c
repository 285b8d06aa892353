/* engine/telemetry/lost.c - the lost-update meter (definitions in lost.h; the per-element math in elem.h). */
#include "engine/telemetry/lost.h"

#include <math.h>

#include "engine/status.h"

static void merge(mpt_lost *r, const mpt_lost_sums *s, int64_t n) {
    r->n += n;
    r->nonzero += s->nonzero;
    r->lost += s->lost;
    r->mass += s->mass;
    r->mass_lost += s->mass_lost;
    r->mass_applied += s->mass_applied;
}

/* One loop per dtype, so the conversions inline into a branch-light loop (telemetry steps are timed). */
void mpt_lost_count(mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype, const float *delta,
                    int64_t n) {
    mpt_lost_sums s = {0, 0, 0.0, 0.0, 0.0};
    if (dtype == MPT_DTYPE_F32) {
        const float *a = w_old, *b = w_new;
        for (int64_t i = 0; i < n; i++) mpt_lost_add_one(&s, a[i], b[i], delta[i]);
    } else if (dtype == MPT_DTYPE_F16) {
        const uint16_t *a = w_old, *b = w_new;
        for (int64_t i = 0; i < n; i++) mpt_lost_add_one(&s, mpt_f16_to_f32(a[i]), mpt_f16_to_f32(b[i]), delta[i]);
    } else {
        MPT_ASSERTF(dtype == MPT_DTYPE_BF16, "lost count: dtype %s is not a float format", mpt_dtype_name(dtype));
        const uint16_t *a = w_old, *b = w_new;
        for (int64_t i = 0; i < n; i++) mpt_lost_add_one(&s, mpt_bf16_to_f32(a[i]), mpt_bf16_to_f32(b[i]), delta[i]);
    }
    merge(r, &s, n);
}

void mpt_lost_counterfactual(mpt_lost *r, const void *w_old, mpt_dtype target, const float *delta, int64_t n) {
    MPT_ASSERTF(target == MPT_DTYPE_F16 || target == MPT_DTYPE_BF16, "lost counterfactual: target %s",
                mpt_dtype_name(target));
    mpt_lost_sums s = {0, 0, 0.0, 0.0, 0.0};
    const uint16_t *w = w_old;
    if (target == MPT_DTYPE_F16) {
        for (int64_t i = 0; i < n; i++) {
            const float old = mpt_f16_to_f32(w[i]);
            mpt_lost_add_one(&s, old, mpt_lost_counterfactual_new(old, delta[i], 1), delta[i]);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            const float old = mpt_bf16_to_f32(w[i]);
            mpt_lost_add_one(&s, old, mpt_lost_counterfactual_new(old, delta[i], 0), delta[i]);
        }
    }
    merge(r, &s, n);
}

double mpt_lost_frac(const mpt_lost *r) { return r->nonzero > 0 ? (double)r->lost / (double)r->nonzero : 0.0; }

double mpt_lost_mass_share(const mpt_lost *r) { return r->mass > 0.0 ? r->mass_lost / r->mass : 0.0; }

double mpt_lost_applied_share(const mpt_lost *r) { return r->mass > 0.0 ? r->mass_applied / r->mass : 0.0; }
