/*
 * engine/layers/dropout.c - inverted dropout, forward and backward.
 *
 * Shapes: x, y of any shape and the same float dtype (policy: follows the input); saved mask of the same
 * shape, U8 (1 = kept).
 * Training forward:  u = Philox uniform in (0, 1] (cuRAND PHILOX4_32_10) from seed = mpt_rng_stream_seed(
 *                    g->seed, MPT_RNG_DROPOUT) at offset = step * stride + base + row0 * per_row (step: read
 *                    on the backend from *g->iteration when the graph has it, so a replayed CUDA Graph step
 *                    draws its own numbers; else g->step, the same value), where
 *                    per_row = numel / B is the node's elements per batch row, base = this node's offset
 *                    among all dropout nodes (their elements per row, in build order, times the global batch
 *                    g->batch_global), stride = their total (mpt_graph_dropout_stride), and row0 =
 *                    g->batch_row0; so every (step, node, global row, element) draws its own number, and a
 *                    data-parallel rank holding rows [row0, row0 + B) of the global batch draws exactly the
 *                    mask elements a single process with the whole batch draws for those rows. Alone
 *                    (row0 = 0, global = B) this is offset = step * dropout_elems + the node's element base.
 *                    mask = u > p;  y = mask ? x / (1 - p) : 0                   be->dropout_forward
 * Backward:          dx += mask ? dy / (1 - p) : 0   (only if x->grad)          be->dropout_backward
 * Evaluation (g->training == 0): y = x (a copy); backward is not defined there and aborts.
 * PyTorch: torch.nn.Dropout(p) (same semantics, different random stream).
 */
#include "engine/layers/layer_common.h"
#include "engine/rng.h"

static void dropout_forward(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *x = n->in[0], *y = n->out, *mask = n->saved[0];
    if (!g->training) {
        g->be->copy(g->be, y->data, x->data, mpt_tensor_nbytes(y));
        return;
    }
    uint64_t seed = mpt_rng_stream_seed(g->seed, MPT_RNG_DROPOUT);
    uint64_t per_row = (uint64_t)mpt_tensor_numel(y) / (uint64_t)g->batch;
    uint64_t base = n->attr.dropout.stream / (uint64_t)g->batch * (uint64_t)g->batch_global;
    uint64_t stride = mpt_graph_dropout_stride(g);
    uint64_t fixed = base + (uint64_t)g->batch_row0 * per_row; /* this node's and this rank's part */
    uint64_t offset = g->iteration ? fixed : g->step * stride + fixed;
    g->be->dropout_forward(g->be, y->data, x->data, mask->data, y->dtype, mpt_tensor_numel(y), n->attr.dropout.p,
                           seed, offset, g->iteration, g->iteration ? stride : 0);
}

static void dropout_backward(mpt_graph *g, mpt_node *n) {
    mpt_tensor *x = n->in[0];
    const mpt_tensor *y = n->out, *mask = n->saved[0];
    MPT_ASSERTF(g->training, "dropout %s: backward with g->training == 0 (evaluation forward saved no mask)",
                n->name);
    g->be->dropout_backward(g->be, x->grad->data, y->grad->data, mask->data, y->dtype, mpt_tensor_numel(y),
                            n->attr.dropout.p, mpt_graph_grad_accumulate(g, x->grad));
}

mpt_tensor *mpt_dropout(mpt_graph *g, mpt_tensor *x, float p, const char *name) {
    MPT_ASSERTF(p >= 0.0f && p < 1.0f, "dropout %s: p = %g, need 0 <= p < 1", name, (double)p);
    MPT_ASSERTF(mpt_dtype_is_float(x->dtype), "dropout %s: input %s has dtype %s, need a float dtype", name,
                x->name, mpt_dtype_name(x->dtype));
    mpt_node *n = mpt_graph_node(g, MPT_OP_DROPOUT, name);
    mpt_op_precision pr = mpt_layer_policy(g, n, x->dtype);
    mpt_layer_check_input_dtype(g, n, x);
    MPT_ASSERTF(x->ndim >= 1 && x->shape[0] == g->batch, "dropout %s: input %s must be [B = %d, ...] (masks are "
                "drawn per batch row), has first dim %lld", name, x->name, g->batch, (long long)x->shape[0]);
    int64_t numel = mpt_tensor_numel(x);
    n->attr.dropout.p = p;
    n->attr.dropout.stream = g->dropout_elems; /* base offset of this node's mask in each step's draw */
    g->dropout_elems += (uint64_t)numel;

    char tn[MPT_NAME_LEN];
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), pr.compute_dtype, MPT_MEM_ACT, x->ndim,
                                     x->shape);
    mpt_tensor *mask = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "mask"), MPT_DTYPE_U8, MPT_MEM_ACT, x->ndim,
                                        x->shape);
    n->in[0] = x;
    n->out = y;
    n->saved[0] = mask;
    n->forward = dropout_forward;
    if (x->grad) {
        mpt_graph_grad(g, y);
        n->backward = dropout_backward;
    }
    mpt_layer_reserve(g, name, (size_t)numel * sizeof(float)); /* the uniforms of one forward */
    return y;
}
