/*
 * engine/optim/optim.c - host-side optimizer pieces: names, PyTorch defaults, hyper-parameter checks and the
 * number of state tensors. The update math is in engine/numerics.h and the formulas in optim.h.
 */
#include "engine/optim/optim.h"

#include <math.h>
#include <string.h>

static const char *const kind_names[] = {"sgd", "adam", "adamw"};
#define N_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

const char *mpt_optim_kind_name(mpt_optim_kind k) {
    return (unsigned)k < (unsigned)N_KINDS ? kind_names[k] : "?";
}

int mpt_optim_kind_parse(const char *s, mpt_optim_kind *out) {
    for (int i = 0; i < N_KINDS; i++)
        if (strcmp(s, kind_names[i]) == 0) {
            *out = (mpt_optim_kind)i;
            return 0;
        }
    return -1;
}

mpt_optim_hparams mpt_optim_hparams_default(mpt_optim_kind k) {
    mpt_optim_hparams h = {
        .kind = k,
        .lr = 1e-3f,
        .momentum = 0.0f,
        .dampening = 0.0f,
        .weight_decay = k == MPT_OPTIM_ADAMW ? 1e-2f : 0.0f,
        .nesterov = 0,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
    };
    return h;
}

/* MPT_ERR_ARG unless lo <= x (< or <=) hi and x is finite. */
static mpt_status check_range(const char *what, float x, float lo, float hi, int hi_open) {
    int ok = isfinite(x) && x >= lo && (hi_open ? x < hi : x <= hi);
    if (ok) return MPT_OK;
    return mpt_errorf(MPT_ERR_ARG, "optimizer %s: expected a value in [%g, %g%c, found %g", what, (double)lo,
                      (double)hi, hi_open ? ')' : ']', (double)x);
}

mpt_status mpt_optim_hparams_check(const mpt_optim_hparams *h) {
    if ((unsigned)h->kind >= (unsigned)N_KINDS)
        return mpt_errorf(MPT_ERR_ARG, "optimizer: expected sgd, adam or adamw, found kind %d", (int)h->kind);
    MPT_TRY(check_range("learning rate", h->lr, 0.0f, INFINITY, 1));
    MPT_TRY(check_range("weight_decay", h->weight_decay, 0.0f, INFINITY, 1));
    if (h->kind == MPT_OPTIM_SGD) {
        MPT_TRY(check_range("momentum", h->momentum, 0.0f, INFINITY, 1));
        MPT_TRY(check_range("dampening", h->dampening, 0.0f, 1.0f, 0));
        if (h->nesterov && (h->momentum <= 0.0f || h->dampening != 0.0f))
            return mpt_errorf(MPT_ERR_ARG,
                              "optimizer nesterov: requires momentum > 0 and dampening 0, found momentum %g, "
                              "dampening %g",
                              (double)h->momentum, (double)h->dampening);
    } else {
        MPT_TRY(check_range("beta1", h->beta1, 0.0f, 1.0f, 1));
        MPT_TRY(check_range("beta2", h->beta2, 0.0f, 1.0f, 1));
        MPT_TRY(check_range("eps", h->eps, 0.0f, INFINITY, 1));
    }
    return MPT_OK;
}

int mpt_optim_n_state(const mpt_optim_hparams *h) {
    switch (h->kind) {
    case MPT_OPTIM_SGD: return h->momentum != 0.0f ? 1 : 0;
    case MPT_OPTIM_ADAM:
    case MPT_OPTIM_ADAMW: return 2;
    default: MPT_ASSERTF(0, "mpt_optim_n_state: unknown optimizer kind %d", (int)h->kind);
    }
    return 0;
}

const char *mpt_optim_state_name(const mpt_optim_hparams *h, int index) {
    if (index < 0 || index >= mpt_optim_n_state(h)) return NULL;
    if (h->kind == MPT_OPTIM_SGD) return "momentum_buffer";
    return index == 0 ? "exp_avg" : "exp_avg_sq";
}
