/*
 * engine/layers/relu.c - rectified linear unit, forward and backward.
 *
 * Shapes: x and y of any shape, same dtype (policy: relu follows its input's dtype).
 * Forward:   y = max(x, 0)                                        be->relu_forward
 * Backward:  dx += dy * [y > 0]   (from the saved output y, so x need not be kept; at x = 0 the gradient is 0,
 *            as in PyTorch's threshold_backward)                  be->relu_backward, only if x->grad
 * Fused (engine/graph.h "Fused epilogues"): when the linear layer before it (node->fused_prev) runs this forward in
 * its GEMM epilogue, relu_forward does nothing; when the linear layer after it also ran this backward in its
 * data-gradient epilogue, mpt_graph_backward skips the node.
 * PyTorch: torch.nn.ReLU().
 */
#include "engine/layers/layer_common.h"

static void relu_forward(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *x = n->in[0], *y = n->out;
    if (n->fused_prev && g->fuse_epilogues) return; /* the linear layer's epilogue wrote y */
    g->be->relu_forward(g->be, y->data, x->data, y->dtype, mpt_tensor_numel(y));
}

static void relu_backward(mpt_graph *g, mpt_node *n) {
    mpt_tensor *x = n->in[0];
    const mpt_tensor *y = n->out;
    g->be->relu_backward(g->be, x->grad->data, y->grad->data, y->data, y->dtype, mpt_tensor_numel(y),
                         mpt_graph_grad_accumulate(g, x->grad));
}

mpt_tensor *mpt_relu(mpt_graph *g, mpt_tensor *x, const char *name) {
    MPT_ASSERTF(mpt_dtype_is_float(x->dtype), "relu %s: input %s has dtype %s, need a float dtype", name, x->name,
                mpt_dtype_name(x->dtype));
    mpt_node *n = mpt_graph_node(g, MPT_OP_RELU, name);
    mpt_op_precision pr = mpt_layer_policy(g, n, x->dtype);
    mpt_layer_check_input_dtype(g, n, x);
    char tn[MPT_NAME_LEN];
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), pr.compute_dtype, MPT_MEM_ACT, x->ndim,
                                     x->shape);
    n->in[0] = x;
    n->out = y;
    n->forward = relu_forward;
    if (x->grad) {
        mpt_graph_grad(g, y);
        n->backward = relu_backward;
    }
    return y;
}
