/*
 * engine/layers/sigmoid.c - logistic sigmoid y = 1 / (1 + exp(-x)); backward from the saved output, dy y (1 - y). PyTorch: torch.nn.Sigmoid().
 *
 * Shapes: x, y of any shape, the same float dtype (policy: follows its input). Forward y = act(x) computed in FP32 and
 * rounded once (be->act_forward, MPT_ACT_SIGMOID); backward dx += act'(x) dy (be->act_backward). The formulas and their
 * PyTorch counterparts: engine/numerics.h, "Smooth activations". The node: engine/layers/layer_common.h.
 */
#include "engine/layers/layer_common.h"

mpt_tensor *mpt_sigmoid(mpt_graph *g, mpt_tensor *x, const char *name) {
    return mpt_layer_activation(g, x, MPT_OP_SIGMOID, MPT_ACT_SIGMOID, 0.0f, name);
}
