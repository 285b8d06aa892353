/* engine/amp/master.c - FP32 masters and their working copies. */
#include "engine/amp/master.h"

#include <stdio.h>

void mpt_master_create(mpt_graph *g, mpt_tensor **masters) {
    for (int i = 0; i < g->n_params; i++) {
        mpt_tensor *w = g->params[i].weight;
        if (w->dtype == MPT_DTYPE_F32) {
            masters[i] = w;
            continue;
        }
        char name[MPT_NAME_LEN + 8];
        snprintf(name, sizeof name, "%s:master", w->name);
        masters[i] = mpt_graph_tensor(g, name, MPT_DTYPE_F32, MPT_MEM_MASTER, w->ndim, w->shape);
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
