/*
 * engine/layers/conv2d.c - 2-D convolution (cross-correlation, NCHW / KCRS), forward and backward.
 *
 * Shapes: x [B, C, H, W], W [K, C, k, k], b [K], y [B, K, P, Q] with
 *   P = (H + 2 pad - k) / stride + 1, Q = (W + 2 pad - k) / stride + 1.
 * Forward:   y[n,o,p,q] = b[o] + sum_{c,r,s} x[n, c, p*stride - pad + r, q*stride - pad + s] W[o,c,r,s]
 *            (x is zero outside the image)                                     be->conv2d_forward
 * Backward:  dx[n,c,h,w] += sum_{o,r,s : h = p*stride - pad + r, w = q*stride - pad + s} dy[n,o,p,q] W[o,c,r,s]
 *            (only if x->grad; compute dtype)                                 be->conv2d_backward_data
 *            dW[o,c,r,s] += sum_{n,p,q} dy[n,o,p,q] x[n, c, p*stride - pad + r, q*stride - pad + s]   (FP32)
 *            db[o] += sum_{n,p,q} dy[n,o,p,q]                     (FP32)      be->conv2d_backward_filter
 * Operands in the node's compute dtype and math mode, FP32 products and sums (engine/backend.h).
 * Telemetry probes (16-bit y / dx only): x, W, b (forward) or dy, W (backward data) widened exactly to FP32
 * in scratch, then the same convolution in FP32 math. The widened 16-bit operands' products are exact in
 * FP32, so this is the pre-rounding value up to summation order (bit for bit on the CPU, whose F16/BF16
 * convolution widens its operands the same way).
 * PyTorch: torch.nn.Conv2d(C, K, k, stride, padding); init U(-1/sqrt(C k k), 1/sqrt(C k k)) (fan_in = C k k).
 * Post-training quantization (engine/quant.h, n->quant): in MPT_QUANT_INT8 mode the forward quantizes x to INT8 codes
 * and runs the exact integer convolution with the weight's codes (be->conv2d_forward_i8); in MPT_QUANT_CALIBRATE it
 * records x's amax and runs the float forward. Evaluation only.
 */
#include <stdio.h>

#include "engine/layers/layer_common.h"
#include "engine/quant.h"

static mpt_conv_args conv_args(const mpt_node *n, const char *tag) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out;
    mpt_conv_args a = {0};
    a.s = n->attr.conv;
    a.math = n->math;
    a.dtype = n->compute_dtype;
    a.x = x->data;
    a.w = w->data;
    a.bias = b->data;
    a.y = y->data;
    a.dy = y->grad ? y->grad->data : NULL;
    a.dx = x->grad ? x->grad->data : NULL;
    a.dw = w->grad->data;
    a.db = b->grad->data;
    a.tag = tag;
    return a;
}

/* Post-training quantization's integer forward: x -> INT8 codes, the exact integer convolution, rescaled with the bias. */
static void conv2d_forward_int8(mpt_graph *g, mpt_node *n) {
    const mpt_node_quant *q = n->quant;
    const mpt_tensor *x = n->in[0], *b = n->in[2], *y = n->out;
    mpt_quantize_args qa = {.x = x->data, .x_dtype = x->dtype, .n = mpt_tensor_numel(x), .scale = q->x_scale->data,
                            .q = q->qx->data, .qmax = MPT_INT8_QMAX, .tag = n->name};
    g->be->quantize(g->be, &qa);
    mpt_conv_i8_args a = {.s = n->attr.conv, .x = q->qx->data, .w = q->qw->data, .y = y->data, .y_dtype = y->dtype,
                          .x_scale = q->x_scale->data, .w_scales = q->w_scales->data, .w_per_tensor = !q->per_channel,
                          .bias = b->data, .bias_dtype = b->dtype, .tag = n->name};
    g->be->conv2d_forward_i8(g->be, &a);
}

static void conv2d_forward(mpt_graph *g, mpt_node *n) {
    if (n->quant && n->quant->mode == MPT_QUANT_INT8) {
        conv2d_forward_int8(g, n);
        return;
    }
    if (n->quant && n->quant->mode == MPT_QUANT_CALIBRATE) mpt_quant_observe(g, n);
    char tag[MPT_LAYER_TAG_LEN];
    mpt_conv_args a = conv_args(n, mpt_layer_tag(tag, n, "fwd"));
    g->be->conv2d_forward(g->be, &a);
}

static void conv2d_backward(mpt_graph *g, mpt_node *n) {
    char tag[MPT_LAYER_TAG_LEN];
    mpt_conv_args a;
    if (n->in[0]->grad) {
        a = conv_args(n, mpt_layer_tag(tag, n, "dgrad"));
        a.accumulate = mpt_graph_grad_accumulate(g, n->in[0]->grad);
        g->be->conv2d_backward_data(g->be, &a);
    }
    a = conv_args(n, mpt_layer_tag(tag, n, "wgrad"));
    a.accumulate = mpt_layer_param_grads_accumulate(g, n);
    g->be->conv2d_backward_filter(g->be, &a);
}

static int is_16bit(mpt_dtype t) { return t == MPT_DTYPE_F16 || t == MPT_DTYPE_BF16; }

/* FP32 conv args over widened copies in scratch: [x (forward) or dy (backward)][w][bias]; scratch NULL gives
 * the same shapes with NULL pointers (the workspace query at build time). */
static mpt_conv_args conv_probe_args(const mpt_node *n, float *scratch, int backward) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *y = n->out;
    mpt_conv_args a = {0};
    a.s = n->attr.conv;
    a.math = MPT_MATH_FP32;
    a.dtype = MPT_DTYPE_F32;
    a.tag = backward ? "probe.dgrad" : "probe.fwd";
    int64_t first = backward ? mpt_tensor_numel(y) : mpt_tensor_numel(x);
    float *w32 = scratch ? scratch + first : NULL;
    float *b32 = scratch ? w32 + mpt_tensor_numel(w) : NULL;
    if (backward) a.dy = scratch;
    else a.x = scratch;
    a.w = w32;
    if (!backward) a.bias = b32;
    return a;
}

static void conv2d_probe_forward(mpt_graph *g, mpt_node *n, float *dst, float *scratch) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    mpt_conv_args a = conv_probe_args(n, scratch, 0);
    g->be->cast(g->be, (void *)a.x, MPT_DTYPE_F32, x->data, x->dtype, mpt_tensor_numel(x));
    g->be->cast(g->be, (void *)a.w, MPT_DTYPE_F32, w->data, w->dtype, mpt_tensor_numel(w));
    g->be->cast(g->be, (void *)a.bias, MPT_DTYPE_F32, b->data, b->dtype, mpt_tensor_numel(b));
    a.y = dst;
    g->be->conv2d_forward(g->be, &a);
}

static void conv2d_probe_backward(mpt_graph *g, mpt_node *n, float *dst, float *scratch) {
    const mpt_tensor *w = n->in[1], *y = n->out;
    mpt_conv_args a = conv_probe_args(n, scratch, 1);
    g->be->cast(g->be, (void *)a.dy, MPT_DTYPE_F32, y->grad->data, y->grad->dtype, mpt_tensor_numel(y));
    g->be->cast(g->be, (void *)a.w, MPT_DTYPE_F32, w->data, w->dtype, mpt_tensor_numel(w));
    a.dx = dst; /* overwritten (a.accumulate = 0) */
    g->be->conv2d_backward_data(g->be, &a);
}

static void conv2d_set_probes(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out;
    if (is_16bit(y->dtype)) n->probe_forward = conv2d_probe_forward;
    if (x->grad && is_16bit(x->grad->dtype)) n->probe_backward = conv2d_probe_backward;
    if (!n->probe_forward && !n->probe_backward) return;
    int64_t big = mpt_tensor_numel(x) > mpt_tensor_numel(y) ? mpt_tensor_numel(x) : mpt_tensor_numel(y);
    n->probe_scratch = big + mpt_tensor_numel(w) + mpt_tensor_numel(b);
    mpt_conv_args a = conv_probe_args(n, NULL, 0);
    n->probe_workspace = g->be->conv2d_workspace(g->be, &a);
}

mpt_tensor *mpt_conv2d(mpt_graph *g, mpt_tensor *x, int out_channels, int kernel, int stride, int pad,
                       const char *name) {
    MPT_ASSERTF(x->ndim == 4, "conv2d %s: input %s must be 4-D [B, C, H, W], has %d dims", name, x->name, x->ndim);
    MPT_ASSERTF(out_channels > 0 && kernel > 0 && stride > 0 && pad >= 0,
                "conv2d %s: out_channels %d, kernel %d, stride %d, pad %d (need > 0, > 0, > 0, >= 0)", name,
                out_channels, kernel, stride, pad);
    int64_t B = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    MPT_ASSERTF(H + 2 * pad >= kernel && W + 2 * pad >= kernel,
                "conv2d %s: kernel %d larger than the padded input %lldx%lld (pad %d)", name, kernel,
                (long long)H, (long long)W, pad);
    mpt_node *n = mpt_graph_node(g, MPT_OP_CONV2D, name);
    mpt_op_precision pr = mpt_layer_policy(g, n, x->dtype);
    mpt_layer_check_input_dtype(g, n, x);

    mpt_conv_shape s = {0};
    s.N = (int)B; s.C = (int)C; s.H = (int)H; s.W = (int)W;
    s.K = out_channels; s.R = kernel; s.S = kernel;
    s.pad_h = pad; s.pad_w = pad;
    s.stride_h = stride; s.stride_w = stride;
    s.P = (int)((H + 2 * pad - kernel) / stride + 1);
    s.Q = (int)((W + 2 * pad - kernel) / stride + 1);
    n->attr.conv = s;

    char tn[MPT_NAME_LEN];
    int fan_in = (int)C * kernel * kernel;
    int64_t wshape[4] = {out_channels, C, kernel, kernel}, bshape[1] = {out_channels};
    int64_t yshape[4] = {B, out_channels, s.P, s.Q};
    mpt_tensor *w = mpt_graph_param(g, mpt_layer_tname(tn, name, "weight"), pr.compute_dtype, 4, wshape, fan_in);
    mpt_tensor *b = mpt_graph_param(g, mpt_layer_tname(tn, name, "bias"), pr.compute_dtype, 1, bshape, fan_in);
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), pr.compute_dtype, MPT_MEM_ACT, 4, yshape);
    mpt_graph_grad(g, y); /* the layer has parameters: a gradient always flows into y */

    n->in[0] = x; n->in[1] = w; n->in[2] = b;
    n->out = y;
    n->forward = conv2d_forward;
    n->backward = conv2d_backward;

    mpt_conv_args a = conv_args(n, name);
    mpt_layer_reserve(g, name, g->be->conv2d_workspace(g->be, &a));
    conv2d_set_probes(g, n);
    return y;
}
