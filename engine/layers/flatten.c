/*
 * engine/layers/flatten.c - [B, d1, ..., dn] -> [B, d1 * ... * dn] as a view.
 *
 * Math: y = x reshaped (row-major order unchanged), dx = dy reshaped: the view shares x's data and x's
 * gradient data (mpt_graph_view), so neither pass does any work. A node with NULL forward/backward is added
 * so that the reshape appears in the precision map. PyTorch: torch.nn.Flatten() (start_dim = 1).
 */
#include "engine/layers/layer_common.h"

mpt_tensor *mpt_flatten(mpt_graph *g, mpt_tensor *x, const char *name) {
    MPT_ASSERTF(x->ndim >= 2, "flatten %s: input %s must be [B, ...] with at least 2 dims, has %d", name, x->name,
                x->ndim);
    mpt_node *n = mpt_graph_node(g, MPT_OP_FLATTEN, name);
    mpt_layer_policy(g, n, x->dtype);
    int64_t shape[2] = {x->shape[0], mpt_tensor_numel(x) / x->shape[0]};
    char tn[MPT_NAME_LEN];
    mpt_tensor *y = mpt_graph_view(g, x, mpt_layer_tname(tn, name, "out"), 2, shape);
    n->in[0] = x;
    n->out = y;
    return y;
}
