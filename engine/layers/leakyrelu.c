/*
 * engine/layers/leakyrelu.c - leaky ReLU: y = x > 0 ? x : a x; backward from the input, dy (x > 0 ? 1 : a).
 * PyTorch: torch.nn.LeakyReLU(negative_slope=a) (default 0.01).
 *
 * Shapes: x, y of any shape, the same float dtype (policy: follows its input). Forward computed in FP32 and rounded
 * once (be->act_forward, MPT_ACT_LEAKYRELU); backward dx += act'(x) dy (be->act_backward). engine/numerics.h has the
 * per-element math; the node: engine/layers/layer_common.h.
 */
#include <math.h>

#include "engine/layers/layer_common.h"

mpt_tensor *mpt_leakyrelu(mpt_graph *g, mpt_tensor *x, float negative_slope, const char *name) {
    MPT_ASSERTF(isfinite(negative_slope), "leakyrelu %s: negative slope %g is not finite", name,
                (double)negative_slope);
    return mpt_layer_activation(g, x, MPT_OP_LEAKYRELU, MPT_ACT_LEAKYRELU, negative_slope, name);
}
