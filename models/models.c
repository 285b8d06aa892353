/*
 * models/models.c - the model builders (mlp, lenet5, cnn); architectures and sources in models/models.h.
 *
 * Each builder only calls the layer functions of engine/layers/layers.h; precision is not chosen here:
 * every layer asks the graph's policy (engine/amp/policy.h) for its dtype and math mode.
 */
#include "models/models.h"

#include <string.h>

#include "engine/layers/layers.h"

typedef mpt_tensor *(*mpt_model_fn)(mpt_graph *g);

/* mlp: x [B, 784] -> fc1 512 -> relu -> fc2 512 -> relu -> fc3 10. */
static mpt_tensor *model_mlp(mpt_graph *g) {
    const int64_t shape[2] = {g->batch, MPT_MODEL_PIXELS};
    mpt_tensor *x = mpt_input(g, 2, shape);              /* [B, 784] */
    x = mpt_relu(g, mpt_linear(g, x, 512, "fc1"), "relu1"); /* [B, 512] */
    x = mpt_relu(g, mpt_linear(g, x, 512, "fc2"), "relu2"); /* [B, 512] */
    return mpt_linear(g, x, MPT_MODEL_CLASSES, "fc3");    /* [B, 10] */
}

/* lenet5: x [B,1,28,28] -> conv1 6@5x5 pad 2 [B,6,28,28] -> pool [B,6,14,14] -> conv2 16@5x5 [B,16,10,10]
 * -> pool [B,16,5,5] -> flatten [B,400] -> fc1 120 -> fc2 84 -> fc3 10. */
static mpt_tensor *model_lenet5(mpt_graph *g) {
    const int64_t shape[4] = {g->batch, 1, 28, 28};
    mpt_tensor *x = mpt_input(g, 4, shape);
    x = mpt_relu(g, mpt_conv2d(g, x, 6, 5, 1, 2, "conv1"), "relu1");
    x = mpt_maxpool2d(g, x, 2, 2, "pool1");
    x = mpt_relu(g, mpt_conv2d(g, x, 16, 5, 1, 0, "conv2"), "relu2");
    x = mpt_maxpool2d(g, x, 2, 2, "pool2");
    x = mpt_flatten(g, x, "flatten");
    x = mpt_relu(g, mpt_linear(g, x, 120, "fc1"), "relu3");
    x = mpt_relu(g, mpt_linear(g, x, 84, "fc2"), "relu4");
    return mpt_linear(g, x, MPT_MODEL_CLASSES, "fc3");
}

/* cnn: x [B,1,28,28] -> conv1 32@3x3 [B,32,26,26] -> conv2 64@3x3 [B,64,24,24] -> pool [B,64,12,12]
 * -> dropout 0.25 -> flatten [B,9216] -> fc1 128 -> dropout 0.5 -> fc2 10. */
static mpt_tensor *model_cnn(mpt_graph *g) {
    const int64_t shape[4] = {g->batch, 1, 28, 28};
    mpt_tensor *x = mpt_input(g, 4, shape);
    x = mpt_relu(g, mpt_conv2d(g, x, 32, 3, 1, 0, "conv1"), "relu1");
    x = mpt_relu(g, mpt_conv2d(g, x, 64, 3, 1, 0, "conv2"), "relu2");
    x = mpt_maxpool2d(g, x, 2, 2, "pool");
    x = mpt_dropout(g, x, 0.25f, "dropout1");
    x = mpt_flatten(g, x, "flatten");
    x = mpt_relu(g, mpt_linear(g, x, 128, "fc1"), "relu3");
    x = mpt_dropout(g, x, 0.5f, "dropout2");
    return mpt_linear(g, x, MPT_MODEL_CLASSES, "fc2");
}

static const struct {
    const char *name;
    mpt_model_fn build;
} mpt_models[] = {
    {"mlp", model_mlp},
    {"lenet5", model_lenet5},
    {"cnn", model_cnn},
};
#define MPT_N_MODELS ((int)(sizeof mpt_models / sizeof mpt_models[0]))

const char *mpt_model_names(void) { return "mlp, lenet5, cnn"; }

static int model_index(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < MPT_N_MODELS; i++)
        if (strcmp(mpt_models[i].name, name) == 0) return i;
    return -1;
}

int mpt_model_exists(const char *name) { return model_index(name) >= 0; }

mpt_status mpt_model_build(mpt_graph *g, const char *name, mpt_tensor **logits) {
    int i = model_index(name);
    if (i < 0)
        return mpt_errorf(MPT_ERR_ARG, "--model: unknown model '%s' (expected one of: %s)", name ? name : "(null)",
                          mpt_model_names());
    MPT_ASSERT(g != NULL && g->n_nodes == 0);
    mpt_tensor *y = mpt_models[i].build(g);
    MPT_ASSERTF(y->ndim == 2 && y->shape[1] == MPT_MODEL_CLASSES, "model %s: logits must be [B, %d]", name,
                MPT_MODEL_CLASSES);
    *logits = y;
    return MPT_OK;
}
