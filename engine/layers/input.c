/*
 * engine/layers/input.c - the batch input of a graph.
 *
 * Math: none; the tensor is filled by the caller (mpt_trainer_gather: x = (pixels/255 - mean) * inv_std,
 * rounded once to the mode's activation dtype). Shape [B, d1, ..., d_{ndim-1}], dtype mpt_policy_act_dtype
 * (F32 in fp32/tf32, F16 in fp16, BF16 in bf16), MPT_MEM_ACT, no gradient. PyTorch equivalent: the input
 * batch after `x.to(dtype)` under autocast.
 *
 * A node with no forward/backward is added so that the input appears in the precision map.
 */
#include "engine/layers/layer_common.h"

mpt_tensor *mpt_input(mpt_graph *g, int ndim, const int64_t *shape) {
    MPT_ASSERTF(g->input == NULL, "input: the graph already has an input (%s)", g->input ? g->input->name : "");
    MPT_ASSERTF(ndim >= 1 && ndim <= MPT_MAX_DIMS, "input: ndim %d outside [1, %d]", ndim, MPT_MAX_DIMS);
    MPT_ASSERTF(shape[0] == g->batch, "input: shape[0] = %lld but the graph's batch size is %d",
                (long long)shape[0], g->batch);
    mpt_node *node = mpt_graph_node(g, MPT_OP_INPUT, "input");
    mpt_dtype dt = mpt_policy_act_dtype(&g->policy);
    mpt_layer_policy(g, node, dt);
    g->input = mpt_graph_tensor(g, "input", dt, MPT_MEM_ACT, ndim, shape);
    node->out = g->input;
    return g->input;
}
