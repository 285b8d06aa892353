/*
 * engine/layers/gelu.c - GELU, the exact (erf) form: y = x Phi(x). PyTorch: torch.nn.GELU(approximate='none').
 *
 * Shapes: x, y of any shape, the same float dtype (policy: follows its input). Forward y = act(x) computed in FP32 and
 * rounded once (be->act_forward, MPT_ACT_GELU); backward dx += act'(x) dy (be->act_backward). The formulas and their
 * PyTorch counterparts: engine/numerics.h, "Smooth activations". The node: engine/layers/layer_common.h.
 */
#include "engine/layers/layer_common.h"

mpt_tensor *mpt_gelu(mpt_graph *g, mpt_tensor *x, const char *name) {
    return mpt_layer_activation(g, x, MPT_OP_GELU, MPT_ACT_GELU, 0.0f, name);
}
