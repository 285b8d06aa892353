/*
 * engine/layers/softmax_xent.c - fused softmax + cross-entropy loss (always FP32), forward and backward.
 *
 * Shapes: logits z [B, C] (any float dtype; widened exactly), labels [B] I32 in [0, C), or -1 for a padding
 * row (g->labels), saved probabilities p [B, C] F32, loss [1] F32 (g->loss), n_correct [1] I32 (g->n_correct).
 * V = the valid rows (labels >= 0), Bv = |V| (padding rows are PyTorch's ignore_index).
 * Forward:   p[i,:] = softmax(z[i,:]) computed stably (exp(z - max z));
 *            loss = (1/Bv) sum_{i in V} (logsumexp(z[i,:]) - z[i, labels[i]])   (0 if Bv = 0);
 *            n_correct += #{i in V : argmax_j z[i,j] == labels[i]}           be->softmax_xent_forward
 * Backward:  dz[i,j] += S * (p[i,j] - [j == labels[i]]) / Bv for i in V (0 for padding rows), rounded to
 *            z's dtype, where S = *g->loss_scale (the loss scale: the seed of the backward pass)
 *                                                                         be->softmax_xent_backward
 * Telemetry probe (16-bit dz only): the same backward into an FP32 buffer (overwritten), i.e. dz before rounding.
 * Policy: FP32 regardless of the mode (autocast runs softmax / cross_entropy in float32).
 * PyTorch: torch.nn.CrossEntropyLoss(reduction='mean', ignore_index=-1) on logits; n_correct as
 * (z.argmax(1) == y).sum() over the valid rows.
 */
#include "engine/layers/layer_common.h"

static void softmax_xent_forward(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *z = n->in[0], *probs = n->saved[0];
    g->be->softmax_xent_forward(g->be, g->loss->data, probs->data, g->n_correct->data, z->data, z->dtype,
                                g->labels->data, (int)z->shape[0], (int)z->shape[1]);
}

static void softmax_xent_backward(mpt_graph *g, mpt_node *n) {
    mpt_tensor *z = n->in[0];
    const mpt_tensor *probs = n->saved[0];
    MPT_ASSERTF(g->loss_scale != NULL,
                "softmax_xent %s: g->loss_scale is not set (point it at a backend float holding the loss scale, "
                "1 without scaling, after mpt_graph_alloc)", n->name);
    g->be->softmax_xent_backward(g->be, z->grad->data, z->grad->dtype, probs->data, g->labels->data,
                                 (int)z->shape[0], (int)z->shape[1], g->loss_scale,
                                 mpt_graph_grad_accumulate(g, z->grad));
}

static void softmax_xent_probe_backward(mpt_graph *g, mpt_node *n, float *dst, float *scratch) {
    (void)scratch;
    const mpt_tensor *z = n->in[0], *probs = n->saved[0];
    g->be->softmax_xent_backward(g->be, dst, MPT_DTYPE_F32, probs->data, g->labels->data, (int)z->shape[0],
                                 (int)z->shape[1], g->loss_scale, 0);
}

mpt_tensor *mpt_softmax_xent(mpt_graph *g, mpt_tensor *logits, const char *name) {
    MPT_ASSERTF(g->loss == NULL, "softmax_xent %s: the graph already has a loss (%s)", name,
                g->loss ? g->loss->name : "");
    MPT_ASSERTF(logits->ndim == 2, "softmax_xent %s: logits %s must be 2-D [B, C], has %d dims", name, logits->name,
                logits->ndim);
    MPT_ASSERTF(mpt_dtype_is_float(logits->dtype), "softmax_xent %s: logits %s have dtype %s, need a float dtype",
                name, logits->name, mpt_dtype_name(logits->dtype));
    mpt_node *n = mpt_graph_node(g, MPT_OP_SOFTMAX_XENT, name);
    mpt_op_precision pr = mpt_layer_policy(g, n, logits->dtype);
    MPT_ASSERTF(pr.compute_dtype == MPT_DTYPE_F32, "softmax_xent %s: the policy must run the loss in f32, gives %s",
                name, mpt_dtype_name(pr.compute_dtype));

    int64_t B = logits->shape[0], C = logits->shape[1];
    int64_t bshape[1] = {B}, one[1] = {1}, pshape[2] = {B, C};
    char tn[MPT_NAME_LEN];
    g->labels = mpt_graph_tensor(g, "labels", MPT_DTYPE_I32, MPT_MEM_ACT, 1, bshape);
    g->loss = mpt_graph_tensor(g, "loss", MPT_DTYPE_F32, MPT_MEM_ACT, 1, one);
    g->n_correct = mpt_graph_tensor(g, "n_correct", MPT_DTYPE_I32, MPT_MEM_ACT, 1, one);
    g->logits = logits;
    mpt_tensor *probs = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "probs"), MPT_DTYPE_F32, MPT_MEM_ACT, 2,
                                         pshape);
    n->in[0] = logits;
    n->out = g->loss;
    n->saved[0] = probs;
    n->forward = softmax_xent_forward;
    if (logits->grad) n->backward = softmax_xent_backward;
    if (logits->grad && (logits->grad->dtype == MPT_DTYPE_F16 || logits->grad->dtype == MPT_DTYPE_BF16))
        n->probe_backward = softmax_xent_probe_backward;
    return g->loss;
}
