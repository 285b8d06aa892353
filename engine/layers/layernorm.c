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
#include "engine/layers/layer_common.h"

static void layernorm_forward(mpt_graph *g, mpt_node *n) {
    char tag[MPT_LAYER_TAG_LEN];
    mpt_norm_args a = mpt_layer_norm_args(g, n, mpt_layer_tag(tag, n, "fwd"));
    g->be->layernorm_forward(g->be, &a);
}

static void layernorm_backward(mpt_graph *g, mpt_node *n) {
    char tag[MPT_LAYER_TAG_LEN];
    mpt_norm_args a = mpt_layer_norm_args(g, n, mpt_layer_tag(tag, n, "bwd"));
    a.accumulate = n->in[0]->grad ? mpt_graph_grad_accumulate(g, n->in[0]->grad) : 0; /* no gradient: a.dx NULL */
    a.accumulate_params = mpt_layer_param_grads_accumulate(g, n);
    g->be->layernorm_backward(g->be, &a);
}

mpt_tensor *mpt_layernorm(mpt_graph *g, mpt_tensor *x, float eps, const char *name) {
    MPT_ASSERTF(x->ndim >= 2, "layernorm %s: input %s must be [B, ...] with at least 2 dims, has %d", name, x->name,
                x->ndim);
    MPT_ASSERTF(eps > 0.0f, "layernorm %s: eps %g (need > 0)", name, (double)eps);
    mpt_node *n = mpt_layer_node(g, MPT_OP_LAYERNORM, x, name);
    const int64_t B = x->shape[0], M = mpt_tensor_numel(x) / B;
    n->attr.norm.eps = eps;
    n->attr.norm.C = 1;
    n->attr.norm.S = M;

    char tn[MPT_NAME_LEN];
    const mpt_dtype pd = mpt_policy_param_dtype(&g->policy, MPT_OP_LAYERNORM);
    n->in[1] = mpt_graph_param_const(g, mpt_layer_tname(tn, name, "weight"), pd, x->ndim - 1, x->shape + 1,
                                     1.0f); /* gamma */
    n->in[2] = mpt_graph_param_const(g, mpt_layer_tname(tn, name, "bias"), pd, x->ndim - 1, x->shape + 1,
                                     0.0f); /* beta */
    mpt_tensor *y = mpt_layer_norm_outputs(g, n, x, B, "row_mean", "row_rstd", name);
    n->forward = layernorm_forward;
    n->backward = layernorm_backward;
    mpt_layer_reserve(g, name, (size_t)(2 * M) * sizeof(float)); /* the CPU's per-feature sums of dgamma and dbeta */
    return y;
}
