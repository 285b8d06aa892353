/*
 * engine/layers/avgpool2d.c - 2-D average pooling (kh x kw windows, no padding) and global average pooling (the window
 * is the whole image), forward and backward.
 *
 * Shapes: x [B, C, H, W], y [B, C, P, Q] with P = (H - kh) / sh + 1, Q = (W - kw) / sw + 1 (global: [B, C, 1, 1]).
 * Forward:   y[n,c,p,q] = (sum_{r < kh, s < kw} x[n, c, p sh + r, q sw + s]) / (kh kw), the sum in FP32 in
 *            row-major window order, rounded once                                  be->avgpool_forward
 * Backward:  dx[n,c,h,w] += (sum of dy over the windows covering (h, w)) / (kh kw)  be->avgpool_backward
 * dtype follows the input (policy). PyTorch: torch.nn.AvgPool2d(kernel_size, stride) (padding 0, so
 * count_include_pad does not matter); global: torch.nn.AdaptiveAvgPool2d(1).
 */
#include "engine/layers/layer_common.h"

static mpt_avgpool_args avgpool_args(const mpt_node *n) {
    const mpt_tensor *x = n->in[0], *y = n->out;
    mpt_avgpool_args a = {0};
    a.N = (int)x->shape[0]; a.C = (int)x->shape[1]; a.H = (int)x->shape[2]; a.W = (int)x->shape[3];
    a.kh = n->attr.avgpool.kh; a.kw = n->attr.avgpool.kw; a.sh = n->attr.avgpool.sh; a.sw = n->attr.avgpool.sw;
    a.P = n->attr.avgpool.P; a.Q = n->attr.avgpool.Q;
    a.dtype = x->dtype;
    a.x = x->data;
    a.y = y->data;
    a.dy = y->grad ? y->grad->data : NULL;
    a.dx = x->grad ? x->grad->data : NULL;
    return a;
}

static void avgpool2d_forward(mpt_graph *g, mpt_node *n) {
    mpt_avgpool_args a = avgpool_args(n);
    g->be->avgpool_forward(g->be, &a);
}

static void avgpool2d_backward(mpt_graph *g, mpt_node *n) {
    mpt_avgpool_args a = avgpool_args(n);
    a.accumulate = mpt_graph_grad_accumulate(g, n->in[0]->grad);
    g->be->avgpool_backward(g->be, &a);
}

mpt_tensor *mpt_avgpool2d(mpt_graph *g, mpt_tensor *x, int kh, int kw, int sh, int sw, const char *name) {
    int64_t yshape[4];
    mpt_layer_pool_shape(x, MPT_OP_AVGPOOL2D, name, kh, kw, sh, sw, yshape);
    mpt_node *n = mpt_layer_node(g, MPT_OP_AVGPOOL2D, x, name);
    n->attr.avgpool.kh = kh;
    n->attr.avgpool.kw = kw;
    n->attr.avgpool.sh = sh;
    n->attr.avgpool.sw = sw;
    n->attr.avgpool.P = (int)yshape[2];
    n->attr.avgpool.Q = (int)yshape[3];
    char tn[MPT_NAME_LEN];
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), n->compute_dtype, MPT_MEM_ACT, 4, yshape);
    mpt_layer_connect(g, n, x, y, avgpool2d_forward, avgpool2d_backward);
    return y;
}
