/*
 * engine/layers/batchnorm.c - batch normalisation (Ioffe & Szegedy 2015, arXiv 1502.03167), forward and backward.
 *
 * Shapes: x [B, C, H, W] (per channel over B, H, W: torch.nn.BatchNorm2d; S = H W) or x [B, F] (per feature over B:
 * torch.nn.BatchNorm1d; C = F, S = 1); y, dy, dx like x, in the activation dtype. Parameters gamma "<name>.weight" and
 * beta "<name>.bias" [C], FP32 in every mode (their own masters), starting at 1 and 0 (PyTorch's reset_parameters).
 * Buffers (not trained: no gradient, no optimizer state, no master; engine/graph.h mpt_graph_buffer)
 * "<name>.running_mean" [C] starting at 0 and "<name>.running_var" [C] starting at 1, FP32, saved in checkpoints.
 * Saved for backward: the batch mean and rstd [C], FP32 (MPT_MEM_ACT).
 * Training forward (g->training = 1), be->batchnorm_forward:
 *   mean, var = the mean and biased variance over the n = S x (valid rows) elements of each channel; rows whose label
 *   is -1 (g->labels: the padding of a last partial batch) take no part, so a padded batch normalises as PyTorch's
 *   smaller last batch does;
 *   y = (x - mean) rstd gamma + beta, rstd = 1 / sqrt(var + eps);
 *   running_mean = (1 - momentum) running_mean + momentum mean, running_var likewise with the unbiased variance
 *   var n / (n - 1) (PyTorch's update).
 * Evaluation forward (g->training = 0): y from running_mean and running_var; nothing is updated; no backward.
 * Backward, be->batchnorm_backward: dbeta += sum dy, dgamma += sum dy x^, and
 *   dx += gamma rstd (dy - sum(dy) / n - x^ sum(dy x^) / n) on valid rows, 0 on padding rows (whose dy is 0: they must
 *   not pass a gradient to the layers before, whose weight gradients sum over every row).
 * Precision (engine/amp/policy.c, RULE_NORM): activations in the mode's dtype; statistics, normalisation, gamma, beta
 * and running statistics in FP32, as cuDNN's batch norm runs half tensors with float scale, bias and statistics.
 * --norm-stats (g->policy.norm_stats, an ablation) computes the batch statistics in 16-bit arithmetic or by the
 * one-pass formula instead (engine/amp/policy.h); the rest stays as above.
 * With data-parallel training each rank normalises with its shard's statistics (torch DistributedDataParallel without
 * SyncBatchNorm) and rank 0's running statistics are broadcast after every step (DDP's broadcast_buffers).
 * PyTorch: torch.nn.BatchNorm2d(C, eps=1e-5, momentum=0.1) / BatchNorm1d(F): the same names in its state_dict
 * (num_batches_tracked is not kept: PyTorch fills it in when it loads a state_dict without it).
 */
#include "engine/layers/layer_common.h"

static mpt_norm_args bn_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    mpt_norm_args a = mpt_layer_norm_args(g, n, tag);
    a.running_mean = n->buffers[0]->data;
    a.running_var = n->buffers[1]->data;
    a.momentum = n->attr.norm.momentum;
    a.training = g->training;
    a.labels = g->labels ? g->labels->data : NULL;
    return a;
}

static void batchnorm_forward(mpt_graph *g, mpt_node *n) {
    char tag[MPT_LAYER_TAG_LEN];
    mpt_norm_args a = bn_args(g, n, mpt_layer_tag(tag, n, "fwd"));
    g->be->batchnorm_forward(g->be, &a);
}

static void batchnorm_backward(mpt_graph *g, mpt_node *n) {
    MPT_ASSERTF(g->training, "batchnorm %s: backward with g->training == 0 (the evaluation forward saved no batch "
                "statistics)", n->name);
    char tag[MPT_LAYER_TAG_LEN];
    mpt_norm_args a = bn_args(g, n, mpt_layer_tag(tag, n, "bwd"));
    mpt_tensor *dx = n->in[0]->grad;
    a.accumulate = dx ? mpt_graph_grad_accumulate(g, dx) : 0; /* no gradient into the input: a.dx NULL */
    a.accumulate_params = mpt_layer_param_grads_accumulate(g, n);
    g->be->batchnorm_backward(g->be, &a);
}

mpt_tensor *mpt_batchnorm(mpt_graph *g, mpt_tensor *x, float eps, float momentum, const char *name) {
    MPT_ASSERTF(x->ndim == 2 || x->ndim == 4, "batchnorm %s: input %s must be [B, F] or [B, C, H, W], has %d dims",
                name, x->name, x->ndim);
    MPT_ASSERTF(eps > 0.0f && momentum >= 0.0f && momentum <= 1.0f,
                "batchnorm %s: eps %g, momentum %g (need eps > 0, momentum in [0, 1])", name, (double)eps,
                (double)momentum);
    mpt_node *n = mpt_layer_node(g, MPT_OP_BATCHNORM, x, name);
    const int64_t C = x->shape[1], S = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
    n->attr.norm.eps = eps;
    n->attr.norm.momentum = momentum;
    n->attr.norm.C = C;
    n->attr.norm.S = S;

    char tn[MPT_NAME_LEN];
    const int64_t cshape[1] = {C};
    const mpt_dtype pd = mpt_policy_param_dtype(&g->policy, MPT_OP_BATCHNORM);
    n->in[1] = mpt_graph_param_const(g, mpt_layer_tname(tn, name, "weight"), pd, 1, cshape, 1.0f); /* gamma */
    n->in[2] = mpt_graph_param_const(g, mpt_layer_tname(tn, name, "bias"), pd, 1, cshape, 0.0f);   /* beta */
    n->buffers[0] = mpt_graph_buffer(g, mpt_layer_tname(tn, name, "running_mean"), 1, cshape, 0.0f);
    n->buffers[1] = mpt_graph_buffer(g, mpt_layer_tname(tn, name, "running_var"), 1, cshape, 1.0f);
    mpt_tensor *y = mpt_layer_norm_outputs(g, n, x, C, "batch_mean", "batch_rstd", name);
    n->forward = batchnorm_forward;
    n->backward = batchnorm_backward;
    return y;
}
