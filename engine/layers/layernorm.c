/*
 * engine/layers/layernorm.c - layer normalisation (Ba, Kiros & Hinton 2016, arXiv 1607.06450), forward and backward.
 *
 * Shapes: x [B, d1, ...] normalised per row over its M = d1 x ... features (torch.nn.LayerNorm(x.shape[1:])); y, dy,
 * dx like x, in the activation dtype. Parameters gamma "<name>.weight" and beta "<name>.bias" of shape [d1, ...], FP32
 * in every mode, starting at 1 and 0. Saved for backward: each row's mean and rstd [B], FP32.
 * Forward, be->layernorm_forward: mean, var = the row's mean and biased variance (FP32), rstd = 1 / sqrt(var + eps),
 *   y = (x - mean) rstd gamma + beta per feature.
 * Backward, be->layernorm_backward: g = dy gamma, dx += rstd (g - mean(g) - x^ mean(g x^)), dgamma += sum over rows of
 *   dy x^, dbeta += sum of dy. A padding row of a last partial batch has dy = 0, hence dx = 0 and adds nothing.
 * Precision (engine/amp/policy.c, RULE_NORM): PyTorch's autocast runs layer_norm in float32 (its "CUDA Ops that can
 * autocast to float32" list: layer_norm); here the statistics, the normalisation and gamma, beta are FP32 and the output
 * is rounded once to the activation dtype, which is what autocast's FP32 output becomes at the next lowered op's cast.
 * --norm-stats (g->policy.norm_stats, an ablation) computes each row's mean and variance in 16-bit arithmetic or by the
 * one-pass formula instead (engine/amp/policy.h).
 * PyTorch: torch.nn.LayerNorm(normalized_shape = x.shape[1:], eps=1e-5).
 */
#include <stdio.h>

#include "engine/layers/layer_common.h"

static mpt_norm_args ln_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    mpt_norm_args a = {0};
    const mpt_tensor *x = n->in[0], *y = n->out;
    a.N = x->shape[0];
    a.C = 1;
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

static void layernorm_forward(mpt_graph *g, mpt_node *n) {
    char tag[MPT_NAME_LEN + 8];
    snprintf(tag, sizeof tag, "%s.fwd", n->name);
    mpt_norm_args a = ln_args(g, n, tag);
    g->be->layernorm_forward(g->be, &a);
}

static void layernorm_backward(mpt_graph *g, mpt_node *n) {
    char tag[MPT_NAME_LEN + 8];
    snprintf(tag, sizeof tag, "%s.bwd", n->name);
    mpt_norm_args a = ln_args(g, n, tag);
    a.accumulate = n->in[0]->grad ? mpt_graph_grad_accumulate(g, n->in[0]->grad) : 0; /* no gradient: a.dx NULL */
    a.accumulate_params = mpt_graph_grad_accumulate(g, n->in[1]->grad);
    MPT_ASSERTF(mpt_graph_grad_accumulate(g, n->in[2]->grad) == a.accumulate_params,
                "layernorm %s: gamma and beta gradients out of step", n->name);
    g->be->layernorm_backward(g->be, &a);
}

mpt_tensor *mpt_layernorm(mpt_graph *g, mpt_tensor *x, float eps, const char *name) {
    MPT_ASSERTF(x->ndim >= 2, "layernorm %s: input %s must be [B, ...] with at least 2 dims, has %d", name, x->name,
                x->ndim);
    MPT_ASSERTF(eps > 0.0f, "layernorm %s: eps %g (need > 0)", name, (double)eps);
    MPT_ASSERTF(mpt_dtype_is_float(x->dtype), "layernorm %s: input %s has dtype %s, need a float dtype", name,
                x->name, mpt_dtype_name(x->dtype));
    mpt_node *n = mpt_graph_node(g, MPT_OP_LAYERNORM, name);
    mpt_op_precision pr = mpt_layer_policy(g, n, x->dtype);
    mpt_layer_check_input_dtype(g, n, x);
    const int64_t B = x->shape[0], M = mpt_tensor_numel(x) / B;
    n->attr.norm.eps = eps;
    n->attr.norm.C = 1;
    n->attr.norm.S = M;

    char tn[MPT_NAME_LEN];
    const int64_t bshape[1] = {B};
    const mpt_dtype pd = mpt_policy_param_dtype(&g->policy, MPT_OP_LAYERNORM);
    mpt_tensor *gamma = mpt_graph_param_const(g, mpt_layer_tname(tn, name, "weight"), pd, x->ndim - 1, x->shape + 1,
                                              1.0f);
    mpt_tensor *beta = mpt_graph_param_const(g, mpt_layer_tname(tn, name, "bias"), pd, x->ndim - 1, x->shape + 1,
                                             0.0f);
    n->saved[0] = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "row_mean"), MPT_DTYPE_F32, MPT_MEM_ACT, 1, bshape);
    n->saved[1] = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "row_rstd"), MPT_DTYPE_F32, MPT_MEM_ACT, 1, bshape);
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), pr.compute_dtype, MPT_MEM_ACT, x->ndim,
                                     x->shape);
    mpt_graph_grad(g, y);
    n->in[0] = x;
    n->in[1] = gamma;
    n->in[2] = beta;
    n->out = y;
    n->forward = layernorm_forward;
    n->backward = layernorm_backward;
    mpt_layer_reserve(g, name, (size_t)(2 * M) * sizeof(float)); /* the CPU's per-feature sums of dgamma and dbeta */
    return y;
}
