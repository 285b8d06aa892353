/* engine/telemetry/lost.c - the lost-update meter (definitions in lost.h). */
#include "engine/telemetry/lost.h"

#include <math.h>

#include "engine/status.h"

static void add_one(mpt_lost *r, float old, float neu, float d) {
    if (d == 0.0f) return;
    double ad = fabs((double)d);
    r->nonzero++;
    r->mass += ad;
    if (neu == old) {
        r->lost++;
        r->mass_lost += ad;
    }
}

void mpt_lost_count(mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype, const float *delta,
                    int64_t n) {
    for (int64_t i = 0; i < n; i++)
        add_one(r, mpt_load_f32(w_old, dtype, i), mpt_load_f32(w_new, dtype, i), delta[i]);
    r->n += n;
}

void mpt_lost_counterfactual(mpt_lost *r, const void *w_old, mpt_dtype target, const float *delta, int64_t n) {
    MPT_ASSERTF(target == MPT_DTYPE_F16 || target == MPT_DTYPE_BF16, "lost counterfactual: target %s",
                mpt_dtype_name(target));
    for (int64_t i = 0; i < n; i++) {
        float old = mpt_load_f32(w_old, target, i);
        uint16_t q = target == MPT_DTYPE_F16 ? mpt_f32_to_f16(old + delta[i]) : mpt_f32_to_bf16(old + delta[i]);
        float neu = target == MPT_DTYPE_F16 ? mpt_f16_to_f32(q) : mpt_bf16_to_f32(q);
        add_one(r, old, neu, delta[i]);
    }
    r->n += n;
}

double mpt_lost_frac(const mpt_lost *r) { return r->nonzero > 0 ? (double)r->lost / (double)r->nonzero : 0.0; }

double mpt_lost_mass_share(const mpt_lost *r) { return r->mass > 0.0 ? r->mass_lost / r->mass : 0.0; }
