/*
 * models/models.h - the model zoo: a model is a function that adds layers to a graph (ARCHITECTURE, models/).
 *
 * mpt_model_build() adds the input node and the model's layers to an empty graph and returns the logits
 * [B, 10]; the caller then adds the loss (mpt_softmax_xent) and hands the graph to the trainer. Parameter
 * names ("fc1.weight", "conv2.bias", ...) follow PyTorch's module names in the reference implementations,
 * so a checkpoint reads like a PyTorch state_dict.
 *
 *   mlp     784-512-512-10 with ReLU: the PyTorch "Quickstart" network for Fashion-MNIST
 *           (pytorch.org/tutorials/beginner/basics/quickstart_tutorial.html). Input [B, 784].
 *   lenet5  LeCun et al. 1998 (with ReLU and max pooling, as modern re-implementations do):
 *           conv 6@5x5 pad 2, relu, maxpool 2, conv 16@5x5, relu, maxpool 2, flatten,
 *           120, relu, 84, relu, 10. Input [B, 1, 28, 28].
 *   cnn     the PyTorch examples MNIST network (github.com/pytorch/examples, mnist/main.py):
 *           conv 32@3x3, relu, conv 64@3x3, relu, maxpool 2, dropout 0.25, flatten, 128, relu,
 *           dropout 0.5, 10. Input [B, 1, 28, 28].
 */
#ifndef MPT_MODELS_MODELS_H
#define MPT_MODELS_MODELS_H

#include "engine/api.h"
#include "engine/graph.h"
#include "engine/status.h"

/* Number of classes every model predicts (Fashion-MNIST, MNIST). */
#define MPT_MODEL_CLASSES 10
/* Pixels of one 28x28 image. */
#define MPT_MODEL_PIXELS 784

/* "mlp, lenet5, cnn": the valid names, for messages. */
MPT_API const char *mpt_model_names(void);

/* Whether `name` is a known model (1) or not (0). */
MPT_API int mpt_model_exists(const char *name);

/* Adds the input and the layers of model `name` to the empty graph g (batch g->batch) and stores the
 * logits tensor [B, 10] (compute dtype) in *logits. Unknown name: MPT_ERR_ARG with a message listing the
 * valid names; g is left untouched. */
MPT_API mpt_status mpt_model_build(mpt_graph *g, const char *name, mpt_tensor **logits);

#endif
