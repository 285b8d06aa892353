/*
 * models/models.c - the built-in models as named specs, and the builder that turns a planned spec into layers
 * (models/models.h; the parser and the plan: models/spec.c).
 *
 * The builder only calls the layer functions of engine/layers/layers.h, in the spec's order; precision is not chosen
 * here: every layer asks the graph's policy (engine/amp/policy.h) for its dtype and math mode. A built-in model is its
 * spec: on Fashion-MNIST's data (1 x 28 x 28, 10 classes) it adds the nodes, parameters and names the hand-written
 * builders added before specs existed, in the same order, so its weights, losses and checkpoints are those bits
 * (tests/test_models.c).
 */
#include "models/models.h"

#include <stdlib.h>
#include <string.h>

#include "engine/layers/layers.h"

static const struct {
    const char *name, *spec;
} builtins[] = {
    {"mlp", "flatten,linear(512),relu,linear(512),relu,linear"},
    {"lenet5", "conv(6,5,pad=2),relu,maxpool(2),conv(16,5),relu,maxpool(2),flatten,linear(120),relu,linear(84),relu,"
               "linear"},
    {"cnn", "conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,linear(128),relu,dropout(0.5),linear"},
};
#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

const char *mpt_model_names(void) { return "mlp, lenet5, cnn"; }

const char *mpt_model_spec_of(const char *name) {
    for (int i = 0; name && i < N_BUILTINS; i++)
        if (strcmp(builtins[i].name, name) == 0) return builtins[i].spec;
    return NULL;
}

int mpt_model_exists(const char *name) { return mpt_model_spec_of(name) != NULL; }

mpt_status mpt_model_build_plan(mpt_graph *g, const mpt_model_plan *p, mpt_tensor **logits) {
    MPT_ASSERT(g != NULL && g->n_nodes == 0 && p->planned && p->n >= 1);
    const mpt_model_input *in = &p->in;
    mpt_tensor *x;
    if (p->layer[0].folded) { /* a leading flatten: the batch itself is [B, C x H x W] */
        const int64_t shape[2] = {g->batch, (int64_t)in->channels * in->height * in->width};
        x = mpt_input(g, 2, shape);
    } else {
        const int64_t shape[4] = {g->batch, in->channels, in->height, in->width};
        x = mpt_input(g, 4, shape);
    }
    for (int i = 0; i < p->n; i++) {
        const mpt_model_layer *l = &p->layer[i];
        switch (l->kind) {
        case MPT_LAYER_CONV: x = mpt_conv2d(g, x, l->out, l->kernel, l->stride, l->pad, l->name); break;
        case MPT_LAYER_LINEAR: x = mpt_linear(g, x, l->out, l->name); break;
        case MPT_LAYER_MAXPOOL: x = mpt_maxpool2d(g, x, l->kernel, l->stride, l->name); break;
        case MPT_LAYER_AVGPOOL: x = mpt_avgpool2d(g, x, l->kernel, l->kernel, l->stride, l->stride, l->name); break;
        case MPT_LAYER_GLOBALAVGPOOL:
            x = mpt_avgpool2d(g, x, (int)x->shape[2], (int)x->shape[3], 1, 1, l->name);
            break;
        case MPT_LAYER_FLATTEN:
            if (!l->folded) x = mpt_flatten(g, x, l->name);
            break;
        case MPT_LAYER_DROPOUT: x = mpt_dropout(g, x, l->p, l->name); break;
        case MPT_LAYER_BATCHNORM: x = mpt_batchnorm(g, x, l->eps, l->momentum, l->name); break;
        case MPT_LAYER_LAYERNORM: x = mpt_layernorm(g, x, l->eps, l->name); break;
        case MPT_LAYER_RELU: x = mpt_relu(g, x, l->name); break;
        case MPT_LAYER_GELU: x = mpt_gelu(g, x, l->name); break;
        case MPT_LAYER_TANH: x = mpt_tanh(g, x, l->name); break;
        case MPT_LAYER_SIGMOID: x = mpt_sigmoid(g, x, l->name); break;
        case MPT_LAYER_LEAKYRELU: x = mpt_leakyrelu(g, x, l->slope, l->name); break;
        case MPT_LAYER_COUNT: MPT_ASSERT(0);
        }
    }
    MPT_ASSERTF(x->ndim == 2 && x->shape[1] == in->classes, "model: logits must be [B, %d]", in->classes);
    *logits = x;
    return MPT_OK;
}

mpt_status mpt_model_build_for(mpt_graph *g, const char *model, const mpt_model_input *in, mpt_tensor **logits) {
    mpt_model_plan *p = malloc(sizeof *p);
    if (!p) return mpt_errorf(MPT_ERR_NOMEM, "out of memory");
    mpt_status s = mpt_model_plan_make(model, in, p);
    if (s == MPT_OK) s = mpt_model_build_plan(g, p, logits);
    free(p);
    return s;
}

mpt_status mpt_model_build(mpt_graph *g, const char *model, mpt_tensor **logits) {
    const mpt_model_input fmnist = {.channels = 1, .height = 28, .width = 28, .classes = MPT_MODEL_CLASSES};
    return mpt_model_build_for(g, model, &fmnist, logits);
}
