/*
 * engine/layers/layer_common.h - helpers shared by the layer files (internal to engine/layers).
 *
 * Every layer does the same three things at build time besides its own math: asks the precision policy
 * for its node's compute dtype and math mode, checks that its activation input already is in that dtype
 * (the design converts the batch once, in mpt_input, so a mismatch is a wiring error): mpt_layer_node; and reserves
 * the kernel scratch its forward/backward calls will need in the backend's single workspace: mpt_layer_reserve.
 * Below them, what several layers of one kind share (the normalisations, the element-wise activations).
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

/* Adds the node of op on activation input x: aborts unless x has a float dtype, sets the node's compute dtype and math
 * from the policy (mpt_layer_policy) and aborts unless x already is in that dtype (mpt_layer_check_input_dtype). */
static inline mpt_node *mpt_layer_node(mpt_graph *g, mpt_op op, const mpt_tensor *x, const char *name) {
    MPT_ASSERTF(mpt_dtype_is_float(x->dtype), "%s %s: input %s has dtype %s, need a float dtype", mpt_op_name(op), name,
                x->name, mpt_dtype_name(x->dtype));
    mpt_node *n = mpt_graph_node(g, op, name);
    mpt_layer_policy(g, n, x->dtype);
    mpt_layer_check_input_dtype(g, n, x);
    return n;
}

/* The tag of one backend call of node n, "<node>.<step>" (step "fwd", "bwd", "dgrad", ...), into buf
 * (MPT_LAYER_TAG_LEN bytes): the name telemetry and the backends' messages give the call. */
#define MPT_LAYER_TAG_LEN (MPT_NAME_LEN + 8)
static inline const char *mpt_layer_tag(char *buf, const mpt_node *n, const char *step) {
    snprintf(buf, MPT_LAYER_TAG_LEN, "%s.%s", n->name, step);
    return buf;
}

/* Whether the one backend call that writes both parameter gradients of node n (weight n->in[1], bias n->in[2])
 * accumulates into them (mpt_graph_grad_accumulate, which also marks them written); aborts if the two are out of
 * step. */
static inline int mpt_layer_param_grads_accumulate(mpt_graph *g, const mpt_node *n) {
    const int accumulate = mpt_graph_grad_accumulate(g, n->in[1]->grad);
    MPT_ASSERTF(mpt_graph_grad_accumulate(g, n->in[2]->grad) == accumulate, "%s %s: %s and %s gradients out of step",
                mpt_op_name(n->op), n->name, n->in[1]->name, n->in[2]->name);
    return accumulate;
}

/* Connects node n of a layer without parameters: input x, output y, its forward; a gradient flows back (y gets one,
 * and the node its backward) only when x has one. */
static inline void mpt_layer_connect(mpt_graph *g, mpt_node *n, mpt_tensor *x, mpt_tensor *y, mpt_node_fn forward,
                                     mpt_node_fn backward) {
    n->in[0] = x;
    n->out = y;
    n->forward = forward;
    if (x->grad) {
        mpt_graph_grad(g, y);
        n->backward = backward;
    }
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

/* ---- the pooling layers (maxpool2d.c, avgpool2d.c) ---------------------------------------------------------------
 * Windows of kh x kw with strides sh, sw and no padding over x [B, C, H, W]: the output is [B, C, P, Q] with
 * P = (H - kh) / sh + 1, Q = (W - kw) / sw + 1 (torch.nn.MaxPool2d / AvgPool2d with padding 0). */

/* Aborts unless x is 4-D and the window (positive sizes and strides) fits in it; sets yshape to [B, C, P, Q]. */
static inline void mpt_layer_pool_shape(const mpt_tensor *x, mpt_op op, const char *name, int kh, int kw, int sh,
                                        int sw, int64_t yshape[4]) {
    const char *opn = mpt_op_name(op);
    MPT_ASSERTF(x->ndim == 4, "%s %s: input %s must be 4-D [B, C, H, W], has %d dims", opn, name, x->name, x->ndim);
    MPT_ASSERTF(kh > 0 && kw > 0 && sh > 0 && sw > 0, "%s %s: window %dx%d, strides %d, %d (need > 0)", opn, name,
                kh, kw, sh, sw);
    const int64_t H = x->shape[2], W = x->shape[3];
    MPT_ASSERTF(H >= kh && W >= kw, "%s %s: window %dx%d larger than the input %lldx%lld", opn, name, kh, kw,
                (long long)H, (long long)W);
    yshape[0] = x->shape[0];
    yshape[1] = x->shape[1];
    yshape[2] = (H - kh) / sh + 1;
    yshape[3] = (W - kw) / sw + 1;
}

/* ---- the normalisation layers (batchnorm.c, layernorm.c) ------------------------------------------------------
 * Both nodes hold x in in[0], gamma and beta (FP32) in in[1] and in[2], the statistics of the forward pass (FP32) in
 * saved[0] (mean) and saved[1] (rstd), and N x C x S in x's first dimension and attr.norm (layer norm: C = 1). */

/* The backend call's arguments (engine/backend.h, mpt_norm_args) common to both, the statistics' arithmetic from
 * the policy's --norm-stats (g->policy.norm_stats); a.dx NULL when x has no gradient (the network's first layer);
 * batch norm adds its running statistics, momentum, training flag and labels. */
static inline mpt_norm_args mpt_layer_norm_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    mpt_norm_args a = {0};
    const mpt_tensor *x = n->in[0], *y = n->out;
    a.N = x->shape[0];
    a.C = n->attr.norm.C;
    a.S = n->attr.norm.S;
    a.dtype = x->dtype;
    a.x = x->data;
    a.y = y->data;
    a.gamma = n->in[1]->data;
    a.beta = n->in[2]->data;
    a.mean = n->saved[0]->data;
    a.rstd = n->saved[1]->data;
    a.eps = n->attr.norm.eps;
    a.dy = y->grad ? y->grad->data : NULL;
    a.dx = x->grad ? x->grad->data : NULL;
    a.dgamma = n->in[1]->grad->data;
    a.dbeta = n->in[2]->grad->data;
    a.tag = tag;
    const mpt_norm_stats_desc *st = mpt_norm_stats_info(g->policy.norm_stats);
    a.stat_dtype = st->dtype;
    a.one_pass = st->one_pass;
    return a;
}

/* Completes normalisation node n (layer `name`) on x once gamma and beta are in n->in[1] and n->in[2]: the saved
 * statistics "<name>.<mean_suffix>" and "<name>.<rstd_suffix>" [stats] (FP32, activation memory) and the output
 * "<name>.out", shaped like x in the compute dtype, with its gradient (the layer has parameters: a gradient always
 * flows into y). Returns the output; the caller sets n->forward and n->backward. */
static inline mpt_tensor *mpt_layer_norm_outputs(mpt_graph *g, mpt_node *n, mpt_tensor *x, int64_t stats,
                                                 const char *mean_suffix, const char *rstd_suffix, const char *name) {
    char tn[MPT_NAME_LEN];
    const int64_t sshape[1] = {stats};
    n->saved[0] = mpt_graph_tensor(g, mpt_layer_tname(tn, name, mean_suffix), MPT_DTYPE_F32, MPT_MEM_ACT, 1, sshape);
    n->saved[1] = mpt_graph_tensor(g, mpt_layer_tname(tn, name, rstd_suffix), MPT_DTYPE_F32, MPT_MEM_ACT, 1, sshape);
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), n->compute_dtype, MPT_MEM_ACT, x->ndim,
                                     x->shape);
    mpt_graph_grad(g, y);
    n->in[0] = x;
    n->out = y;
    return y;
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
    mpt_node *n = mpt_layer_node(g, op, x, name);
    char tn[MPT_NAME_LEN];
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), n->compute_dtype, MPT_MEM_ACT, x->ndim,
                                     x->shape);
    n->attr.act.kind = (int)kind;
    n->attr.act.alpha = alpha;
    mpt_layer_connect(g, n, x, y, mpt_layer_act_forward, mpt_layer_act_backward);
    return y;
}

#endif
