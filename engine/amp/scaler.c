/*
 * engine/amp/scaler.c - host side of the dynamic loss scaler: defaults, parameter checks, initial state,
 * reading the state back, and the floor-collapse warning. The step-time logic runs in the backends
 * (kernels/cpu/optim.c, kernels/cuda) on the shared per-scalar functions of engine/numerics.h; the semantics
 * and references are in scaler.h.
 */
#include "engine/amp/scaler.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

mpt_scaler_params mpt_scaler_params_default(void) {
    mpt_scaler_params p = {
        .growth_factor = 2.0f,
        .backoff_factor = 0.5f,
        .growth_interval = 2000,
        .hysteresis = 1,
        .min_scale = 1.0f,
        .max_scale = 16777216.0f, /* 2^24 */
    };
    return p;
}

mpt_status mpt_scaler_params_check(const mpt_scaler_params *p) {
    if (!(isfinite(p->growth_factor) && p->growth_factor >= 1.0f))
        return mpt_errorf(MPT_ERR_ARG, "loss scaler growth_factor: expected a finite value >= 1, found %g",
                          (double)p->growth_factor);
    if (!(p->backoff_factor > 0.0f && p->backoff_factor <= 1.0f))
        return mpt_errorf(MPT_ERR_ARG, "loss scaler backoff_factor: expected a value in (0, 1], found %g",
                          (double)p->backoff_factor);
    if (p->growth_interval < 1)
        return mpt_errorf(MPT_ERR_ARG, "loss scaler growth_interval: expected an integer >= 1, found %d",
                          (int)p->growth_interval);
    if (p->hysteresis < 1)
        return mpt_errorf(MPT_ERR_ARG, "loss scaler hysteresis: expected an integer >= 1, found %d",
                          (int)p->hysteresis);
    if (!(isfinite(p->min_scale) && p->min_scale > 0.0f))
        return mpt_errorf(MPT_ERR_ARG, "loss scaler min_scale: expected a finite value > 0, found %g",
                          (double)p->min_scale);
    if (!(isfinite(p->max_scale) && p->max_scale >= p->min_scale))
        return mpt_errorf(MPT_ERR_ARG, "loss scaler max_scale: expected a finite value >= min_scale (%g), found %g",
                          (double)p->min_scale, (double)p->max_scale);
    return MPT_OK;
}

mpt_status mpt_scaler_init(mpt_backend *be, mpt_scaler_state *st, float init_scale, const mpt_scaler_params *p) {
    if (!(isfinite(init_scale) && init_scale > 0.0f))
        return mpt_errorf(MPT_ERR_ARG, "initial loss scale: expected a finite value > 0, found %g", (double)init_scale);
    MPT_TRY(mpt_scaler_params_check(p));
    mpt_scaler_state h;
    memset(&h, 0, sizeof h);
    h.scale = init_scale;
    h.inv_scale = 1.0f / init_scale;
    h.found_inf = 0.0f;
    h.grad_mul = 1.0f;
    h.sumsq = 0.0f;
    h.hysteresis_left = p->hysteresis;
    be->from_host(be, st, &h, sizeof h);
    return MPT_OK;
}

void mpt_scaler_read(mpt_backend *be, const mpt_scaler_state *st, mpt_scaler_state *out) {
    be->to_host(be, out, st, sizeof *out);
}

void mpt_scaler_watch_init(mpt_scaler_watch *w, int32_t limit) {
    MPT_ASSERTF(limit >= 1, "mpt_scaler_watch_init: limit %d, expected >= 1", (int)limit);
    memset(w, 0, sizeof *w);
    w->limit = limit;
}

int mpt_scaler_watch_check(mpt_scaler_watch *w, const mpt_scaler_state *st, const mpt_scaler_params *p, char *msg,
                           size_t len) {
    if (st->steps_taken != w->seen_steps_taken) {
        /* A step was applied since the last look: the run of floor hits (if any) is over. Hits seen now are
         * counted as before that step, so a sparse caller warns late rather than early. */
        w->run_start = st->floor_hits;
        w->warned = 0;
    }
    w->seen_steps_taken = st->steps_taken;
    w->seen_floor_hits = st->floor_hits;
    int32_t run = st->floor_hits - w->run_start;
    if (run < w->limit || w->warned) return 0;
    w->warned = 1;
    if (msg && len > 0)
        snprintf(msg, len,
                 "loss scale collapsed: %d consecutive overflowing steps backed off to the floor min_scale=%g "
                 "with no optimizer step in between (%d steps skipped in all, %d taken): the gradients are "
                 "inf/NaN even at the smallest allowed loss scale, so the model is diverging or the data holds "
                 "non-finite values; lower the learning rate, enable gradient clipping, check the input data, or "
                 "train in bf16/fp32",
                 (int)run, (double)p->min_scale, (int)st->steps_skipped, (int)st->steps_taken);
    return 1;
}
