/* engine/amp/fp8.c - the FP8 recipe, the GEMM rule and the scale state of a graph (engine/amp/fp8.h). */
#include "engine/amp/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/graph.h"

mpt_fp8_recipe mpt_fp8_recipe_default(void) {
    mpt_fp8_recipe r;
    memset(&r, 0, sizeof r);
    r.scaling = MPT_FP8_SCALING_DELAYED;
    r.amax_history = 1024;
    r.margin = 0;
    r.pow2_scales = 0;
    r.mx_rounding = MPT_MX_FLOOR;
    r.accum = MPT_FP8_ACCUM_FP32;
    r.promote = 0;
    r.saturate = 1;
    return r;
}

mpt_status mpt_fp8_recipe_check(const mpt_fp8_recipe *r, int mx) {
    if (r->scaling != MPT_FP8_SCALING_DELAYED && r->scaling != MPT_FP8_SCALING_CURRENT)
        return mpt_errorf(MPT_ERR_ARG, "--fp8-scaling: expected delayed or current, found %d", (int)r->scaling);
    if (r->amax_history < 1 || r->amax_history > 65536)
        return mpt_errorf(MPT_ERR_ARG, "--amax-history: expected 1..65536 steps, found %d", (int)r->amax_history);
    if (r->margin < 0 || r->margin > 32)
        return mpt_errorf(MPT_ERR_ARG, "--fp8-margin: expected 0..32, found %d", (int)r->margin);
    if (r->mx_rounding < MPT_MX_FLOOR || r->mx_rounding > MPT_MX_RCEIL)
        return mpt_errorf(MPT_ERR_ARG, "--mx-scale: expected floor, ceil or rceil, found %d", (int)r->mx_rounding);
    if (r->accum != MPT_FP8_ACCUM_FP32 && r->accum != MPT_FP8_ACCUM_FAST)
        return mpt_errorf(MPT_ERR_ARG, "--fp8-accum: expected fp32 or fast, found %d", (int)r->accum);
    if (r->promote < 0 || r->promote % MPT_MX_BLOCK != 0 || r->promote > (1 << 20))
        return mpt_errorf(MPT_ERR_ARG, "--fp8-promote: expected 0 (never) or a multiple of 32 up to 2^20, found %d",
                          (int)r->promote);
    if (r->promote != 0 && r->accum != MPT_FP8_ACCUM_FAST)
        return mpt_errorf(MPT_ERR_ARG, "--fp8-promote %d: promotion is part of the fast accumulator; it needs "
                                       "--fp8-accum fast (fp32 accumulates in FP32 throughout)", (int)r->promote);
    if (mx && r->accum != MPT_FP8_ACCUM_FP32)
        return mpt_errorf(MPT_ERR_ARG, "--fp8-accum fast: the fast accumulator models Hopper's FP8 Tensor Cores, which "
                                       "have no MX formats; mxfp8 accumulates in FP32 (no model of B200's block-scaled "
                                       "accumulator here)");
    return MPT_OK;
}

const char *mpt_fp8_scaling_name(mpt_fp8_scaling s) {
    return s == MPT_FP8_SCALING_DELAYED ? "delayed" : s == MPT_FP8_SCALING_CURRENT ? "current" : "?";
}

int mpt_fp8_scaling_parse(const char *s, mpt_fp8_scaling *out) {
    if (strcmp(s, "delayed") == 0) *out = MPT_FP8_SCALING_DELAYED;
    else if (strcmp(s, "current") == 0) *out = MPT_FP8_SCALING_CURRENT;
    else return -1;
    return 0;
}

const char *mpt_fp8_accum_name(mpt_fp8_accum a) {
    return a == MPT_FP8_ACCUM_FP32 ? "fp32" : a == MPT_FP8_ACCUM_FAST ? "fast" : "?";
}

int mpt_fp8_accum_parse(const char *s, mpt_fp8_accum *out) {
    if (strcmp(s, "fp32") == 0) *out = MPT_FP8_ACCUM_FP32;
    else if (strcmp(s, "fast") == 0) *out = MPT_FP8_ACCUM_FAST;
    else return -1;
    return 0;
}

const char *mpt_mx_rounding_name(int r) {
    return r == MPT_MX_FLOOR ? "floor" : r == MPT_MX_CEIL ? "ceil" : r == MPT_MX_RCEIL ? "rceil" : "?";
}

int mpt_mx_rounding_parse(const char *s, int *out) {
    if (strcmp(s, "floor") == 0) *out = MPT_MX_FLOOR;
    else if (strcmp(s, "ceil") == 0) *out = MPT_MX_CEIL;
    else if (strcmp(s, "rceil") == 0) *out = MPT_MX_RCEIL;
    else return -1;
    return 0;
}

int mpt_fp8_gemm_ok(int64_t M, int64_t N, int64_t K) {
    return M > 0 && N > 0 && K > 0 && M % 16 == 0 && N % 16 == 0 && K % 16 == 0;
}

int mpt_fp8_register(mpt_graph *g, const char *name, mpt_dtype fmt) {
    MPT_ASSERTF(!g->allocated, "FP8 tensor %s registered after mpt_graph_alloc", name);
    MPT_ASSERTF(mpt_dtype_is_fp8(fmt), "FP8 tensor %s: format %s is not E4M3 or E5M2", name, mpt_dtype_name(fmt));
    if (g->n_fp8 == g->cap_fp8) {
        g->cap_fp8 = g->cap_fp8 ? 2 * g->cap_fp8 : 8;
        mpt_fp8_tensor *p = realloc(g->fp8, (size_t)g->cap_fp8 * sizeof *p);
        MPT_ASSERTF(p != NULL, "out of host memory registering FP8 tensor %s", name);
        g->fp8 = p;
    }
    mpt_fp8_tensor *t = &g->fp8[g->n_fp8];
    memset(t, 0, sizeof *t);
    int n = snprintf(t->name, sizeof t->name, "%s", name);
    MPT_ASSERTF(n >= 0 && n < (int)sizeof t->name, "FP8 tensor name %s too long", name);
    t->fmt = fmt;
    return g->n_fp8++;
}

int mpt_fp8_history_len(const mpt_graph *g) {
    return g->policy.fp8.amax_history > 0 ? g->policy.fp8.amax_history : 1;
}

void mpt_fp8_state_to_host(mpt_graph *g, float *state, float *history) {
    if (g->n_fp8 == 0) return;
    mpt_fp8_meta *h = malloc((size_t)g->n_fp8 * sizeof *h);
    MPT_ASSERTF(h != NULL, "out of host memory reading the FP8 state");
    g->be->to_host(g->be, h, g->fp8_meta, (size_t)g->n_fp8 * sizeof *h);
    g->be->to_host(g->be, history, g->fp8_history, (size_t)g->n_fp8 * (size_t)mpt_fp8_history_len(g) * sizeof(float));
    for (int i = 0; i < g->n_fp8; i++) {
        state[3 * i + 0] = h[i].scale;
        state[3 * i + 1] = h[i].scale_inv;
        state[3 * i + 2] = h[i].amax_used;
    }
    free(h);
}

mpt_status mpt_fp8_state_from_host(mpt_graph *g, const float *state, const float *history, const char *what) {
    if (g->n_fp8 == 0) return MPT_OK;
    const int len = mpt_fp8_history_len(g);
    for (int i = 0; i < g->n_fp8; i++) {
        const float s = state[3 * i], si = state[3 * i + 1], au = state[3 * i + 2];
        if (!(isfinite(s) && s > 0.0f) || si != 1.0f / s || !(isfinite(au) && au >= 0.0f))
            return mpt_errorf(MPT_ERR_FORMAT,
                              "%s: FP8 state of %s: expected a finite scale > 0, its FP32 inverse and a finite amax >= 0; "
                              "found scale %g, scale_inv %g, amax_used %g",
                              what, g->fp8[i].name, (double)s, (double)si, (double)au);
        for (int j = 0; j < len; j++) {
            const float a = history[(size_t)i * (size_t)len + (size_t)j];
            if (!(isfinite(a) && a >= 0.0f))
                return mpt_errorf(MPT_ERR_FORMAT, "%s: amax history of %s, entry %d: expected a finite value >= 0, found %g",
                                  what, g->fp8[i].name, j, (double)a);
        }
    }
    mpt_fp8_meta *h = malloc((size_t)g->n_fp8 * sizeof *h);
    if (!h) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the FP8 state of %d tensors", g->n_fp8);
    g->be->to_host(g->be, h, g->fp8_meta, (size_t)g->n_fp8 * sizeof *h);
    for (int i = 0; i < g->n_fp8; i++) {
        h[i].scale = state[3 * i];
        h[i].scale_inv = state[3 * i + 1];
        h[i].amax_used = state[3 * i + 2];
        h[i].amax = 0.0f;
    }
    g->be->from_host(g->be, g->fp8_meta, h, (size_t)g->n_fp8 * sizeof *h);
    g->be->from_host(g->be, g->fp8_history, history, (size_t)g->n_fp8 * (size_t)len * sizeof(float));
    g->be->synchronize(g->be);
    free(h);
    return MPT_OK;
}
