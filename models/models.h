/*
 * models/models.h - networks: a model is a spec, a comma-separated list of layers, that adds layers to a graph
 * (ARCHITECTURE, models/). The built-in models are named specs.
 *
 * A spec (models/spec.c has the grammar and its errors): layers separated by commas, each `name` or `name(args)`, with
 * positional and key=value arguments in PyTorch's order and with PyTorch's names where a PyTorch layer exists;
 * whitespace is free and `#` starts a comment to the end of the line (for specs read from a file: --model @FILE).
 *   conv(out_channels, kernel, stride=1, pad=0)   torch.nn.Conv2d(in, out_channels, kernel, stride, padding=pad)
 *                                                  (kernel_size and padding are accepted as the keys' names too)
 *   linear(out_features)                          torch.nn.Linear(in, out_features); the last layer may be `linear`
 *                                                  without a width: it takes the data's class count
 *   maxpool(kernel, stride=kernel)                torch.nn.MaxPool2d(kernel, stride)
 *   avgpool(kernel, stride=kernel)                torch.nn.AvgPool2d(kernel, stride)
 *   globalavgpool                                 torch.nn.AdaptiveAvgPool2d(1): [B, C, H, W] -> [B, C, 1, 1]
 *   flatten                                       torch.nn.Flatten(); as the first layer it makes the input itself
 *                                                  [B, C x H x W] (no node: the mlp's input)
 *   dropout(p=0.5)                                torch.nn.Dropout(p)
 *   batchnorm(eps=1e-5, momentum=0.1)             torch.nn.BatchNorm2d(C) after a 4-D tensor, BatchNorm1d(F) after
 *                                                  a 2-D one
 *   layernorm(eps=1e-5)                           torch.nn.LayerNorm(x.shape[1:])
 *   relu, gelu, tanh, sigmoid                     torch.nn.ReLU, GELU(), Tanh, Sigmoid
 *   leakyrelu(negative_slope=0.01)                torch.nn.LeakyReLU
 * Every layer also takes name=NAME (letters, digits, _; at most 31 characters). Without it a layer is named after its
 * kind (conv, fc, pool, avgpool, gap, flatten, dropout, bn, ln, relu, gelu, tanh, sigmoid, leakyrelu) with its number
 * among the layers of that kind when the spec has more than one: conv1, conv2, ..., pool (the built-in models' names).
 * Parameters are "<name>.weight" / "<name>.bias" and batch norm's buffers "<name>.running_mean" / "running_var", so a
 * checkpoint reads like the state_dict of a torch.nn.Sequential of named modules (docs/checkpoints.md).
 *
 * The built-in models:
 *   mlp     flatten,linear(512),relu,linear(512),relu,linear
 *           the PyTorch "Quickstart" network for Fashion-MNIST (pytorch.org/tutorials/beginner/basics/
 *           quickstart_tutorial.html)
 *   lenet5  conv(6,5,pad=2),relu,maxpool(2),conv(16,5),relu,maxpool(2),flatten,linear(120),relu,linear(84),relu,linear
 *           LeCun et al. 1998 (with ReLU and max pooling, as modern re-implementations do)
 *   cnn     conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,linear(128),relu,dropout(0.5),linear
 *           the PyTorch examples MNIST network (github.com/pytorch/examples, mnist/main.py)
 * Their input size and head width come from the data (mpt_model_input); on 28 x 28 single-channel images with 10
 * classes they are the networks they always were, node for node.
 */
#ifndef MPT_MODELS_MODELS_H
#define MPT_MODELS_MODELS_H

#include "engine/api.h"
#include "engine/graph.h"
#include "engine/status.h"

/* Fashion-MNIST's and MNIST's class count and pixels (mpt_model_build's data). */
#define MPT_MODEL_CLASSES 10
#define MPT_MODEL_PIXELS 784

#define MPT_MODEL_SPEC_MAX 4096   /* bytes of a spec's text, its NUL included */
#define MPT_MODEL_MAX_LAYERS 64
#define MPT_MODEL_NAME_MAX 32     /* bytes of a layer's name, its NUL included */

/* What a network is built for: the data's image shape and class count. */
typedef struct mpt_model_input {
    int channels, height, width;
    int classes;
} mpt_model_input;

typedef enum mpt_layer_kind {
    MPT_LAYER_CONV = 0,
    MPT_LAYER_LINEAR,
    MPT_LAYER_MAXPOOL,
    MPT_LAYER_AVGPOOL,
    MPT_LAYER_GLOBALAVGPOOL,
    MPT_LAYER_FLATTEN,
    MPT_LAYER_DROPOUT,
    MPT_LAYER_BATCHNORM,
    MPT_LAYER_LAYERNORM,
    MPT_LAYER_RELU,
    MPT_LAYER_GELU,
    MPT_LAYER_TANH,
    MPT_LAYER_SIGMOID,
    MPT_LAYER_LEAKYRELU,
    MPT_LAYER_COUNT
} mpt_layer_kind;

/* One layer of a spec, and once planned (mpt_model_plan_make) its shapes. */
typedef struct mpt_model_layer {
    mpt_layer_kind kind;
    char name[MPT_MODEL_NAME_MAX]; /* its tensors' prefix ("conv1"), given (name=) or derived */
    int named;                     /* the name was given */
    int pos;                       /* 1-based position in the spec */
    int out;                       /* conv: out_channels; linear: out_features (0 in a spec's last `linear`: planned
                                      as the class count) */
    int kernel, stride, pad;       /* conv, maxpool, avgpool (pools: stride 0 = kernel in a spec; planned: set) */
    float p;                       /* dropout */
    float eps, momentum;           /* batchnorm (both), layernorm (eps) */
    float slope;                   /* leakyrelu */
    /* planned: */
    int in_ndim, out_ndim;         /* 4 ([B, C, H, W]) or 2 ([B, F]) */
    int64_t in_shape[3], out_shape[3]; /* without the batch: [C, H, W] or [F] */
    int folded;                    /* the leading flatten that makes the input itself flat: no node */
} mpt_model_layer;

/* A parsed spec, and once planned the network for one input. */
typedef struct mpt_model_plan {
    int n;
    mpt_model_layer layer[MPT_MODEL_MAX_LAYERS];
    mpt_model_input in;            /* planned: the data */
    int planned;
} mpt_model_plan;

/* "mlp, lenet5, cnn": the built-in models' names, for messages. */
MPT_API const char *mpt_model_names(void);
/* Whether `name` is a built-in model (1) or not (0). */
MPT_API int mpt_model_exists(const char *name);
/* A built-in model's spec text, or NULL for any other string. */
MPT_API const char *mpt_model_spec_of(const char *name);
/* "conv", "linear", ... (the spec's layer names). */
MPT_API const char *mpt_layer_kind_name(mpt_layer_kind k);

/* Parses `model` (a built-in model's name or a spec) into *out (not planned: shapes unset, a last linear's width 0).
 * MPT_ERR_ARG for a spec error with a one-line message naming the character position and layer, the token found and
 * what was expected (e.g. "at character 12 (layer 2), found 'pa': expected an argument of conv (out_channels, kernel,
 * stride, pad) or name"). */
MPT_API mpt_status mpt_model_parse(const char *model, mpt_model_plan *out);
/* The canonical text of `model` into buf (len bytes): a built-in name stays its name; a spec is printed back with its
 * required arguments positional and the others as key=value where they differ from their defaults, without spaces or
 * comments (what a checkpoint records, and what --resume compares). Errors as mpt_model_parse; MPT_ERR_ARG when the
 * text does not fit. */
MPT_API mpt_status mpt_model_canonical(const char *model, char *buf, size_t len);
/* Parses `model` and plans it for input `in` (channels, height, width >= 1; classes >= 2): every layer's input and
 * output shape, the last linear's width, the names. MPT_ERR_ARG, before any graph exists, for a spec error or shapes
 * that do not fit, naming the layer (position, spec text and name) and the shapes: a kernel larger than its padded
 * input, a linear layer on a 4-D tensor ("put flatten before it"), a network that does not end in [B, classes]. */
MPT_API mpt_status mpt_model_plan_make(const char *model, const mpt_model_input *in, mpt_model_plan *out);
/* One layer as spec text ("conv(6,5,pad=2)"; planned: with its resolved width), into buf. Returns buf. */
MPT_API const char *mpt_model_layer_text(const mpt_model_layer *l, char *buf, size_t len);

/* Adds the input and the planned layers to the empty graph g (batch g->batch) and stores the logits [B, classes]
 * (compute dtype) in *logits; the caller adds the loss (mpt_softmax_xent). */
MPT_API mpt_status mpt_model_build_plan(mpt_graph *g, const mpt_model_plan *p, mpt_tensor **logits);
/* mpt_model_plan_make and mpt_model_build_plan: MPT_ERR_ARG (g left untouched) for a bad spec or shapes. */
MPT_API mpt_status mpt_model_build_for(mpt_graph *g, const char *model, const mpt_model_input *in,
                                       mpt_tensor **logits);
/* mpt_model_build_for on Fashion-MNIST's data: 1 x 28 x 28 images, 10 classes. */
MPT_API mpt_status mpt_model_build(mpt_graph *g, const char *model, mpt_tensor **logits);

#endif
