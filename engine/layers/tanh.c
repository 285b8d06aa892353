/*
 * engine/layers/tanh.c - hyperbolic tangent; backward from the saved output, dy (1 - y^2). PyTorch: torch.nn.Tanh().
 *
 * Shapes: x, y of any shape, the same float dtype (policy: follows its input). Forward y = act(x) computed in FP32 and
 * rounded once (be->act_forward, MPT_ACT_TANH); backward dx += act'(x) dy (be->act_backward). The formulas and their
 * PyTorch counterparts: engine/numerics.h, "Smooth activations". The node: engine/layers/layer_common.h.
 */
#include "engine/layers/layer_common.h"

mpt_tensor *mpt_tanh(mpt_graph *g, mpt_tensor *x, const char *name) {
    return mpt_layer_activation(g, x, MPT_OP_TANH, MPT_ACT_TANH, 0.0f, name);
}
