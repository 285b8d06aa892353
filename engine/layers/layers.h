/*
 * engine/layers/layers.h - the layers a model is built from. Each call adds one node to the graph
 * (engine/graph.h) and returns its output tensor; each op lives in one file with its forward and backward
 * (engine/layers/<op>.c). The node's compute dtype and math mode come from the graph's precision policy
 * (engine/amp/policy.h); parameters are created in the compute dtype (the working copy) with FP32
 * gradients. Shapes are checked here, when the graph is built, and mismatches abort with the layer's name
 * (they are programmer errors: a model's wiring is code).
 *
 * Shapes: B = the graph's batch size.
 */
#ifndef MPT_ENGINE_LAYERS_H
#define MPT_ENGINE_LAYERS_H

#include "engine/api.h"
#include "engine/graph.h"

/* The batch input: [B, d1, ..., d_{ndim-1}] in the mode's activation dtype (shape[0] must equal B).
 * Becomes g->input. Has no gradient. */
MPT_API mpt_tensor *mpt_input(mpt_graph *g, int ndim, const int64_t *shape);

/* y[B, out] = x[B, in] W^T + b; W "<name>.weight" [out, in], b "<name>.bias" [out]; x must be 2-D.
 * GEMM in the node's math mode; forward uses the bias epilogue. Backward: dx += dy W, dW += dy^T x (FP32),
 * db += sum_rows dy (FP32). PyTorch: torch.nn.Linear. */
MPT_API mpt_tensor *mpt_linear(mpt_graph *g, mpt_tensor *x, int out_features, const char *name);

/* y[B, K, P, Q] = conv2d(x[B, C, H, W], W [K, C, k, k]) + b[K], stride, zero padding `pad`.
 * Params "<name>.weight", "<name>.bias". PyTorch: torch.nn.Conv2d (cross-correlation). */
MPT_API mpt_tensor *mpt_conv2d(mpt_graph *g, mpt_tensor *x, int out_channels, int kernel, int stride, int pad,
                               const char *name);

/* y = max(x, 0), same shape and dtype as x; backward from the saved output. */
MPT_API mpt_tensor *mpt_relu(mpt_graph *g, mpt_tensor *x, const char *name);

/* Max pooling over kernel x kernel windows with `stride`, no padding, on x [B, C, H, W];
 * output [B, C, (H-kernel)/stride+1, (W-kernel)/stride+1]; argmax saved (I32). torch.nn.MaxPool2d. */
MPT_API mpt_tensor *mpt_maxpool2d(mpt_graph *g, mpt_tensor *x, int kernel, int stride, const char *name);

/* [B, ...] -> [B, prod(...)]: a view, no copy, no kernel. */
MPT_API mpt_tensor *mpt_flatten(mpt_graph *g, mpt_tensor *x, const char *name);

/* Inverted dropout with drop probability p in [0, 1): in training, y = x * mask / (1 - p) with
 * mask ~ Bernoulli(1 - p) from the Philox stream MPT_RNG_DROPOUT (offset advances with g->step);
 * in evaluation (g->training == 0), y = x. torch.nn.Dropout. */
MPT_API mpt_tensor *mpt_dropout(mpt_graph *g, mpt_tensor *x, float p, const char *name);

/* Batch normalisation (engine/layers/batchnorm.c): x [B, C, H, W] per channel (BatchNorm2d) or [B, F] per feature
 * (BatchNorm1d); FP32 gamma "<name>.weight" (1) and beta "<name>.bias" (0), FP32 buffers "<name>.running_mean" (0)
 * and "<name>.running_var" (1). Training (g->training): batch statistics of the valid rows, running statistics updated
 * with `momentum` (unbiased variance); evaluation: the running statistics. y like x. PyTorch's defaults: eps 1e-5,
 * momentum 0.1. */
MPT_API mpt_tensor *mpt_batchnorm(mpt_graph *g, mpt_tensor *x, float eps, float momentum, const char *name);

/* Layer normalisation (engine/layers/layernorm.c) of each row of x [B, ...] over all its features, statistics in FP32;
 * FP32 gamma and beta of shape x.shape[1:] (1 and 0). torch.nn.LayerNorm(x.shape[1:], eps) (eps 1e-5). */
MPT_API mpt_tensor *mpt_layernorm(mpt_graph *g, mpt_tensor *x, float eps, const char *name);

/* Average pooling over kh x kw windows with strides sh, sw, no padding, on x [B, C, H, W]; output
 * [B, C, (H-kh)/sh+1, (W-kw)/sw+1]. torch.nn.AvgPool2d; kh = H, kw = W is global average pooling
 * (AdaptiveAvgPool2d(1)). */
MPT_API mpt_tensor *mpt_avgpool2d(mpt_graph *g, mpt_tensor *x, int kh, int kw, int sh, int sw, const char *name);

/* Element-wise activations, same shape and dtype as x (engine/numerics.h has the formulas): GELU (exact erf form,
 * torch.nn.GELU()), tanh (torch.nn.Tanh), sigmoid (torch.nn.Sigmoid), leaky ReLU with the given negative slope
 * (torch.nn.LeakyReLU, default 0.01). */
MPT_API mpt_tensor *mpt_gelu(mpt_graph *g, mpt_tensor *x, const char *name);
MPT_API mpt_tensor *mpt_tanh(mpt_graph *g, mpt_tensor *x, const char *name);
MPT_API mpt_tensor *mpt_sigmoid(mpt_graph *g, mpt_tensor *x, const char *name);
MPT_API mpt_tensor *mpt_leakyrelu(mpt_graph *g, mpt_tensor *x, float negative_slope, const char *name);

/* Fused softmax + cross-entropy on logits [B, C], always FP32; labels g->labels [B] I32 (created here);
 * returns the loss [1] F32 = mean over the valid rows of the batch (g->loss); rows with label -1 are padding
 * and ignored (PyTorch's ignore_index), so a padded last batch behaves like PyTorch's smaller last batch;
 * also counts correct argmax predictions into g->n_correct. Backward seeds dlogits with
 * (*g->loss_scale) * (softmax - onehot) / B_valid.
 * torch.nn.CrossEntropyLoss(reduction='mean'). */
MPT_API mpt_tensor *mpt_softmax_xent(mpt_graph *g, mpt_tensor *logits, const char *name);

#endif
