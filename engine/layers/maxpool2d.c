/*
 * engine/layers/maxpool2d.c - 2-D max pooling (square window, no padding), forward and backward.
 *
 * Shapes: x [B, C, H, W], y [B, C, P, Q] with P = (H - k) / stride + 1, Q = (W - k) / stride + 1;
 * saved argmax [B, C, P, Q] I32 (index h*W + w of the maximum within its input plane).
 * Forward:   y[n,c,p,q] = max_{r,s < k} x[n, c, p*stride + r, q*stride + s], argmax recorded
 *                                                                   be->maxpool_forward
 * Backward:  dx[n, c, argmax[n,c,p,q]] += dy[n,c,p,q]   (overlapping windows accumulate; only if x->grad)
 *                                                                   be->maxpool_backward
 * dtype follows the input (policy). PyTorch: torch.nn.MaxPool2d(kernel, stride).
 */
#include "engine/layers/layer_common.h"

static mpt_pool_args pool_args(const mpt_node *n) {
    const mpt_tensor *x = n->in[0], *y = n->out, *am = n->saved[0];
    mpt_pool_args a = {0};
    a.N = (int)x->shape[0]; a.C = (int)x->shape[1]; a.H = (int)x->shape[2]; a.W = (int)x->shape[3];
    a.kernel = n->attr.pool.kernel; a.stride = n->attr.pool.stride; a.pad = n->attr.pool.pad;
    a.P = n->attr.pool.P; a.Q = n->attr.pool.Q;
    a.dtype = x->dtype;
    a.x = x->data;
    a.y = y->data;
    a.argmax = am->data;
    a.dy = y->grad ? y->grad->data : NULL;
    a.dx = x->grad ? x->grad->data : NULL;
    return a;
}

static void maxpool2d_forward(mpt_graph *g, mpt_node *n) {
    mpt_pool_args a = pool_args(n);
    g->be->maxpool_forward(g->be, &a);
}

static void maxpool2d_backward(mpt_graph *g, mpt_node *n) {
    mpt_pool_args a = pool_args(n);
    mpt_tensor *dx = n->in[0]->grad;
    /* the backward pass scatters into the argmax positions only: a first write needs the rest zeroed */
    if (!mpt_graph_grad_accumulate(g, dx)) g->be->memset_zero(g->be, dx->data, mpt_tensor_nbytes(dx));
    g->be->maxpool_backward(g->be, &a);
}

mpt_tensor *mpt_maxpool2d(mpt_graph *g, mpt_tensor *x, int kernel, int stride, const char *name) {
    int64_t yshape[4];
    mpt_layer_pool_shape(x, MPT_OP_MAXPOOL2D, name, kernel, kernel, stride, stride, yshape);
    mpt_node *n = mpt_layer_node(g, MPT_OP_MAXPOOL2D, x, name);
    n->attr.pool.kernel = kernel;
    n->attr.pool.stride = stride;
    n->attr.pool.pad = 0;
    n->attr.pool.P = (int)yshape[2];
    n->attr.pool.Q = (int)yshape[3];

    char tn[MPT_NAME_LEN];
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), n->compute_dtype, MPT_MEM_ACT, 4, yshape);
    n->saved[0] = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "argmax"), MPT_DTYPE_I32, MPT_MEM_ACT, 4, yshape);
    mpt_layer_connect(g, n, x, y, maxpool2d_forward, maxpool2d_backward);
    return y;
}
