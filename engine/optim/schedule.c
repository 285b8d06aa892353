/*
 * engine/optim/schedule.c - learning-rate schedules (constant, step, cosine with linear warmup): names, checks,
 * and mpt_lr_at, the host's evaluation of engine/numerics.h's mpt_lr_eval (FP64, rounded once to FP32; the
 * backends evaluate the same function on their iteration counter). Formulas and PyTorch counterparts: schedule.h.
 */
#include "engine/optim/schedule.h"

#include <math.h>
#include <string.h>

#include "engine/numerics.h"

static const char *const lr_kind_names[] = {"constant", "step", "cosine"};
#define N_LR_KINDS ((int)(sizeof lr_kind_names / sizeof lr_kind_names[0]))

const char *mpt_lr_kind_name(mpt_lr_kind k) {
    return (unsigned)k < (unsigned)N_LR_KINDS ? lr_kind_names[k] : "?";
}

int mpt_lr_kind_parse(const char *s, mpt_lr_kind *out) {
    for (int i = 0; i < N_LR_KINDS; i++)
        if (strcmp(s, lr_kind_names[i]) == 0) {
            *out = (mpt_lr_kind)i;
            return 0;
        }
    return -1;
}

mpt_status mpt_lr_schedule_check(const mpt_lr_schedule *s) {
    if ((unsigned)s->kind >= (unsigned)N_LR_KINDS)
        return mpt_errorf(MPT_ERR_ARG, "lr schedule: expected constant, step or cosine, found kind %d", (int)s->kind);
    if (!(isfinite(s->base_lr) && s->base_lr >= 0.0f))
        return mpt_errorf(MPT_ERR_ARG, "learning rate: expected a finite value >= 0, found %g", (double)s->base_lr);
    if (s->kind == MPT_LR_STEP) {
        if (s->step_size < 1)
            return mpt_errorf(MPT_ERR_ARG, "lr schedule step: step_size expected >= 1, found %lld",
                              (long long)s->step_size);
        if (!(isfinite(s->gamma) && s->gamma > 0.0f))
            return mpt_errorf(MPT_ERR_ARG, "lr schedule step: gamma expected finite and > 0, found %g",
                              (double)s->gamma);
    }
    if (s->kind == MPT_LR_COSINE) {
        if (!(isfinite(s->min_lr) && s->min_lr >= 0.0f && s->min_lr <= s->base_lr))
            return mpt_errorf(MPT_ERR_ARG, "lr schedule cosine: min_lr expected in [0, base_lr=%g], found %g",
                              (double)s->base_lr, (double)s->min_lr);
        if (s->warmup_steps < 0)
            return mpt_errorf(MPT_ERR_ARG, "lr schedule cosine: warmup_steps expected >= 0, found %lld",
                              (long long)s->warmup_steps);
        if (s->total_steps <= s->warmup_steps)
            return mpt_errorf(MPT_ERR_ARG,
                              "lr schedule cosine: total_steps expected > warmup_steps (%lld), found %lld",
                              (long long)s->warmup_steps, (long long)s->total_steps);
    }
    return MPT_OK;
}

float mpt_lr_at(const mpt_lr_schedule *s, int64_t t) {
    MPT_ASSERTF(t >= 0, "mpt_lr_at: iteration %lld, expected >= 0", (long long)t);
    switch (s->kind) {
    case MPT_LR_CONSTANT: break;
    case MPT_LR_STEP:
        MPT_ASSERTF(s->step_size >= 1, "mpt_lr_at: step schedule with step_size %lld", (long long)s->step_size);
        break;
    case MPT_LR_COSINE:
        MPT_ASSERTF(s->warmup_steps >= 0 && s->total_steps > s->warmup_steps,
                    "mpt_lr_at: cosine schedule with warmup %lld, total %lld", (long long)s->warmup_steps,
                    (long long)s->total_steps);
        break;
    default: MPT_ASSERTF(0, "mpt_lr_at: unknown schedule kind %d", (int)s->kind);
    }
    return mpt_lr_eval((int)s->kind, s->base_lr, s->min_lr, s->warmup_steps, s->total_steps, s->step_size, s->gamma,
                       t);
}
