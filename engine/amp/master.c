/* engine/amp/master.c - FP32 masters and their working copies. */
#include "engine/amp/master.h"

#include <stdio.h>
#include <string.h>

const char *mpt_master_mode_name(mpt_master_mode m) {
    switch (m) {
    case MPT_MASTER_FP32: return "fp32";
    case MPT_MASTER_NONE: return "none";
    }
    return "?";
}

int mpt_master_mode_parse(const char *s, mpt_master_mode *out) {
    if (strcmp(s, "fp32") == 0) *out = MPT_MASTER_FP32;
    else if (strcmp(s, "none") == 0) *out = MPT_MASTER_NONE;
    else return -1;
    return 0;
}

mpt_tensor *mpt_master_separate(mpt_graph *g, const mpt_tensor *w) {
    char name[MPT_NAME_LEN + 8];
    snprintf(name, sizeof name, "%s:master", w->name);
    return mpt_graph_tensor(g, name, MPT_DTYPE_F32, MPT_MEM_MASTER, w->ndim, w->shape);
}

void mpt_master_create(mpt_graph *g, mpt_tensor **masters, mpt_master_mode mode) {
    for (int i = 0; i < g->n_params; i++) {
        mpt_tensor *w = g->params[i].weight;
        if (w->dtype == MPT_DTYPE_F32 || mode == MPT_MASTER_NONE) {
            masters[i] = w;
            continue;
        }
        masters[i] = mpt_master_separate(g, w);
    }
}

int mpt_master_has_working_copy(const mpt_tensor *master, const mpt_tensor *weight) { return master != weight; }

void mpt_master_refresh_working(mpt_graph *g, mpt_tensor **masters) {
    for (int i = 0; i < g->n_params; i++) {
        mpt_tensor *w = g->params[i].weight;
        if (masters[i] == w) continue;
        g->be->cast(g->be, w->data, w->dtype, masters[i]->data, MPT_DTYPE_F32, mpt_tensor_numel(w));
    }
}
