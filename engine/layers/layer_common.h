/*
 * engine/layers/layer_common.h - helpers shared by the layer files (internal to engine/layers).
 *
 * Every layer does the same three things at build time besides its own math: asks the precision policy
 * for its node's compute dtype and math mode, checks that its activation input already is in that dtype
 * (the design converts the batch once, in mpt_input, so a mismatch is a wiring error), and reserves the
 * kernel scratch its forward/backward calls will need in the backend's single workspace.
 */
#ifndef MPT_ENGINE_LAYERS_COMMON_H
#define MPT_ENGINE_LAYERS_COMMON_H

#include <stdio.h>

#include "engine/layers/layers.h"

/* Sets node->compute_dtype/math from the graph's policy for `op` with input dtype in_dtype, and returns it. */
static inline mpt_op_precision mpt_layer_policy(mpt_graph *g, mpt_node *node, mpt_dtype in_dtype) {
    mpt_op_precision pr = mpt_policy_for(&g->policy, node->op, in_dtype);
    node->compute_dtype = pr.compute_dtype;
    node->math = pr.math;
    return pr;
}

/* Aborts unless x (the activation input of layer `name`) is stored in the compute dtype the policy chose. */
static inline void mpt_layer_check_input_dtype(const mpt_graph *g, const mpt_node *node, const mpt_tensor *x) {
    MPT_ASSERTF(x->dtype == node->compute_dtype,
                "%s %s: input %s is %s but the %s policy computes %s in %s; activations must already be in the "
                "mode's dtype (create the batch with mpt_input, which uses mpt_policy_act_dtype)",
                mpt_op_name(node->op), node->name, x->name, mpt_dtype_name(x->dtype),
                mpt_precision_name(g->policy.mode), mpt_op_name(node->op), mpt_dtype_name(node->compute_dtype));
}

/* Makes sure the backend workspace holds `bytes` for a call of layer `name`; aborts if the host/device is out
 * of memory while the graph is being built (the layer API returns tensors, not statuses). */
static inline void mpt_layer_reserve(mpt_graph *g, const char *name, size_t bytes) {
    mpt_status s = mpt_backend_reserve_workspace(g->be, bytes);
    MPT_ASSERTF(s == MPT_OK, "layer %s: cannot reserve %zu bytes of workspace: %s", name, bytes, mpt_last_error());
}

/* Reserves the workspace of a GEMM that writes a gradient (a's beta is ignored) in both forms the graph may run it
 * in: beta = 1, accumulating, and beta = 0, the first write of a pass that overwrites (mpt_graph_grad_accumulate,
 * engine/graph.h). Which one a step runs is decided then, not at build; a backend may plan the two separately (the
 * CPU's oneDNN primitives bake beta in, kernels/cpu/onednn.h), and gemm_workspace() is where it plans. */
static inline void mpt_layer_reserve_grad_gemm(mpt_graph *g, const char *name, mpt_gemm_args a) {
    a.beta = 1.0f;
    mpt_layer_reserve(g, name, g->be->gemm_workspace(g->be, &a));
    a.beta = 0.0f;
    mpt_layer_reserve(g, name, g->be->gemm_workspace(g->be, &a));
}

/* Tensor name "<layer>.<suffix>" into buf (MPT_NAME_LEN bytes); aborts if it would be truncated. */
static inline const char *mpt_layer_tname(char *buf, const char *layer, const char *suffix) {
    int n = snprintf(buf, MPT_NAME_LEN, "%s.%s", layer, suffix);
    MPT_ASSERTF(n >= 0 && n < MPT_NAME_LEN, "layer name %s too long for tensor %s.%s (max %d characters)", layer,
                layer, suffix, MPT_NAME_LEN - 1);
    return buf;
}

/* ---- the element-wise activations (gelu.c, tanh.c, sigmoid.c, leakyrelu.c) -------------------------------------
 * One node: y = act(x) in FP32 per element, rounded once to the input's dtype (policy: follows its input); backward
 * dx += act'(x) dy from the saved input x and output y (both stay in the activation arena: nothing is overwritten in
 * place). The math of each is in engine/numerics.h (mpt_elem_act, mpt_elem_act_grad). */

static inline void mpt_layer_act_forward(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *x = n->in[0], *y = n->out;
    g->be->act_forward(g->be, (mpt_act)n->attr.act.kind, y->data, x->data, y->dtype, mpt_tensor_numel(y),
                       n->attr.act.alpha);
}

static inline void mpt_layer_act_backward(mpt_graph *g, mpt_node *n) {
    mpt_tensor *x = n->in[0];
    const mpt_tensor *y = n->out;
    g->be->act_backward(g->be, (mpt_act)n->attr.act.kind, x->grad->data, y->grad->data, x->data, y->data, y->dtype,
                        mpt_tensor_numel(y), n->attr.act.alpha, mpt_graph_grad_accumulate(g, x->grad));
}

/* Adds the node of op (MPT_OP_GELU, ...) computing activation `kind` with parameter alpha on x. */
static inline mpt_tensor *mpt_layer_activation(mpt_graph *g, mpt_tensor *x, mpt_op op, mpt_act kind, float alpha,
                                               const char *name) {
    MPT_ASSERTF(mpt_dtype_is_float(x->dtype), "%s %s: input %s has dtype %s, need a float dtype", mpt_op_name(op),
                name, x->name, mpt_dtype_name(x->dtype));
    mpt_node *n = mpt_graph_node(g, op, name);
    mpt_op_precision pr = mpt_layer_policy(g, n, x->dtype);
    mpt_layer_check_input_dtype(g, n, x);
    char tn[MPT_NAME_LEN];
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), pr.compute_dtype, MPT_MEM_ACT, x->ndim,
                                     x->shape);
    n->attr.act.kind = (int)kind;
    n->attr.act.alpha = alpha;
    n->in[0] = x;
    n->out = y;
    n->forward = mpt_layer_act_forward;
    if (x->grad) {
        mpt_graph_grad(g, y);
        n->backward = mpt_layer_act_backward;
    }
    return y;
}

#endif
