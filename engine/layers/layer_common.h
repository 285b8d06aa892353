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

#endif
