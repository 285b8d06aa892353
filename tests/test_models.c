/*
 * tests/test_models.c - models/: the spec parser (its canonical text and its one-line errors), the plan (shapes from
 * the data, refused shapes named with the layer), and the built-in models as named specs.
 *
 * The built-in models were hand-written builders before specs (git history of models/models.c); their code is kept
 * here, verbatim in what it calls, as the reference: each built-in spec must add the same nodes (op, name, inputs and
 * output shapes and dtypes), the same parameters in the same order with the same fan-in, and train to the same bits:
 * initial masters, the loss of every step and the final masters, optimizer state and gradients, in every precision
 * with dropout (cnn). Then the specs on other data: 3 x 32 x 32 images and 47 classes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/synthetic.h"
#include "engine/layers/layers.h"
#include "engine/train.h"
#include "models/models.h"
#include "harness.h"

/* ---- the hand-written builders the built-in specs replaced ------------------------------------------------- */

static mpt_tensor *old_mlp(mpt_graph *g) {
    const int64_t shape[2] = {g->batch, 784};
    mpt_tensor *x = mpt_input(g, 2, shape);
    x = mpt_relu(g, mpt_linear(g, x, 512, "fc1"), "relu1");
    x = mpt_relu(g, mpt_linear(g, x, 512, "fc2"), "relu2");
    return mpt_linear(g, x, 10, "fc3");
}

static mpt_tensor *old_lenet5(mpt_graph *g) {
    const int64_t shape[4] = {g->batch, 1, 28, 28};
    mpt_tensor *x = mpt_input(g, 4, shape);
    x = mpt_relu(g, mpt_conv2d(g, x, 6, 5, 1, 2, "conv1"), "relu1");
    x = mpt_maxpool2d(g, x, 2, 2, "pool1");
    x = mpt_relu(g, mpt_conv2d(g, x, 16, 5, 1, 0, "conv2"), "relu2");
    x = mpt_maxpool2d(g, x, 2, 2, "pool2");
    x = mpt_flatten(g, x, "flatten");
    x = mpt_relu(g, mpt_linear(g, x, 120, "fc1"), "relu3");
    x = mpt_relu(g, mpt_linear(g, x, 84, "fc2"), "relu4");
    return mpt_linear(g, x, 10, "fc3");
}

static mpt_tensor *old_cnn(mpt_graph *g) {
    const int64_t shape[4] = {g->batch, 1, 28, 28};
    mpt_tensor *x = mpt_input(g, 4, shape);
    x = mpt_relu(g, mpt_conv2d(g, x, 32, 3, 1, 0, "conv1"), "relu1");
    x = mpt_relu(g, mpt_conv2d(g, x, 64, 3, 1, 0, "conv2"), "relu2");
    x = mpt_maxpool2d(g, x, 2, 2, "pool");
    x = mpt_dropout(g, x, 0.25f, "dropout1");
    x = mpt_flatten(g, x, "flatten");
    x = mpt_relu(g, mpt_linear(g, x, 128, "fc1"), "relu3");
    x = mpt_dropout(g, x, 0.5f, "dropout2");
    return mpt_linear(g, x, 10, "fc2");
}

/* ---- the same graph --------------------------------------------------------------------------------------- */

static void expect_same_tensor(const mpt_tensor *a, const mpt_tensor *b, const char *what) {
    ck_assert_msg((a == NULL) == (b == NULL), "%s: one is missing", what);
    if (!a) return;
    ck_assert_msg(strcmp(a->name, b->name) == 0, "%s: %s vs %s", what, a->name, b->name);
    ck_assert_msg(a->ndim == b->ndim && a->dtype == b->dtype && a->mem == b->mem, "%s %s: ndim/dtype/mem", what,
                  a->name);
    for (int d = 0; d < a->ndim; d++) ck_assert_msg(a->shape[d] == b->shape[d], "%s %s: dim %d", what, a->name, d);
}

static void expect_same_graph(const mpt_graph *a, const mpt_graph *b, const char *model) {
    ck_assert_msg(a->n_nodes == b->n_nodes, "%s: %d nodes vs %d", model, a->n_nodes, b->n_nodes);
    for (int i = 0; i < a->n_nodes; i++) {
        const mpt_node *x = a->nodes[i], *y = b->nodes[i];
        ck_assert_msg(x->op == y->op && strcmp(x->name, y->name) == 0, "%s node %d: %s %s vs %s %s", model, i,
                      mpt_op_name(x->op), x->name, mpt_op_name(y->op), y->name);
        ck_assert(x->compute_dtype == y->compute_dtype && x->math == y->math);
        for (int k = 0; k < MPT_NODE_MAX_IN; k++) expect_same_tensor(x->in[k], y->in[k], model);
        expect_same_tensor(x->out, y->out, model);
        for (int k = 0; k < MPT_NODE_MAX_SAVED; k++) expect_same_tensor(x->saved[k], y->saved[k], model);
    }
    ck_assert_int_eq(a->n_params, b->n_params);
    for (int i = 0; i < a->n_params; i++) {
        expect_same_tensor(a->params[i].weight, b->params[i].weight, model);
        ck_assert(a->params[i].fan_in == b->params[i].fan_in && a->params[i].init == b->params[i].init);
    }
    ck_assert_int_eq(a->n_tensors, b->n_tensors);
    for (int i = 0; i < a->n_tensors; i++) expect_same_tensor(a->tensors[i], b->tensors[i], model);
}

/* The bytes of every master, weight, optimizer-state and gradient tensor (not the parameter table, which holds
 * pointers), appended to out at *k (NULL out: only counts). */
static void snapshot(const mpt_graph *g, unsigned char *out, size_t *k) {
    for (int i = 0; i < g->n_tensors; i++) {
        const mpt_tensor *t = g->tensors[i];
        const int kept = t->mem == MPT_MEM_MASTER || t->mem == MPT_MEM_WEIGHT || t->mem == MPT_MEM_OPTIM ||
                         t->mem == MPT_MEM_GRAD;
        if (!kept || t->view_of || strcmp(t->name, "amp.param_table") == 0) continue;
        if (out) memcpy(out + *k, t->data, mpt_tensor_nbytes(t));
        *k += mpt_tensor_nbytes(t);
    }
}

/* Trains `steps` steps of batch 16 on d, recording the loss of each, and returns the snapshot before and after. */
static unsigned char *train_bytes(mpt_graph *g, const mpt_mnist *d, float *losses, int steps, size_t *len) {
    mpt_softmax_xent(g, g->nodes[g->n_nodes - 1]->out, "loss");
    mpt_train_config cfg = mpt_train_config_default(g->policy.mode);
    cfg.seed = 7;
    mpt_trainer *t = NULL;
    ck_assert_msg(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s", mpt_last_error());
    size_t n = 0, k = 0;
    snapshot(g, NULL, &n);
    unsigned char *out = malloc(2 * n + 1);
    ck_assert_ptr_nonnull(out);
    snapshot(g, out, &k); /* the initial state: the init stream's weights */
    int32_t idx[16];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 16; i++) idx[i] = (int32_t)((s * 16 + i * 5) % d->n_train);
        mpt_trainer_gather(t, d->train_images, d->train_labels, idx, d->dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
        mpt_train_stats st;
        mpt_trainer_stats(t, &st);
        losses[s] = st.loss;
    }
    snapshot(g, out, &k);
    *len = k;
    mpt_trainer_free(&t);
    return out;
}

START_TEST(test_builtins_are_the_old_builders) {
    static const char *const names[3] = {"mlp", "lenet5", "cnn"};
    mpt_tensor *(*const old[3])(mpt_graph *) = {old_mlp, old_lenet5, old_cnn};
    static const mpt_precision modes[4] = {MPT_PRECISION_FP32, MPT_PRECISION_TF32, MPT_PRECISION_FP16,
                                           MPT_PRECISION_BF16};
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 16, 784, 10, 99), MPT_OK);
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 4; p++) {
            mpt_policy pol = mpt_policy_make_explicit(modes[p], p == 1, p == 1);
            mpt_backend *be = mpt_backend_cpu_create();
            mpt_graph *ga = mpt_graph_create(be, &pol, 16), *gb = mpt_graph_create(be, &pol, 16);
            mpt_tensor *la = old[m](ga), *lb = NULL;
            ck_assert_msg(mpt_model_build(gb, names[m], &lb) == MPT_OK, "%s", mpt_last_error());
            ck_assert(la->ndim == 2 && lb->ndim == 2 && la->shape[1] == 10 && lb->shape[1] == 10);
            expect_same_graph(ga, gb, names[m]);
            enum { STEPS = 4 };
            float loss_a[STEPS], loss_b[STEPS];
            size_t na, nb;
            unsigned char *a = train_bytes(ga, &d, loss_a, STEPS, &na), *b = train_bytes(gb, &d, loss_b, STEPS, &nb);
            ck_assert(na == nb);
            ck_assert_msg(memcmp(a, b, na) == 0, "%s %s: the spec's weights, state or gradients differ from the old "
                          "builder's", names[m], mpt_precision_name(modes[p]));
            ck_assert_msg(memcmp(loss_a, loss_b, sizeof loss_a) == 0, "%s %s: losses differ", names[m],
                          mpt_precision_name(modes[p]));
            free(a);
            free(b);
            mpt_backend_free(&be);
        }
    mpt_mnist_free(&d);
}
END_TEST

/* ---- parsing ------------------------------------------------------------------------------------------------ */

static void expect_canonical(const char *in, const char *want) {
    char buf[MPT_MODEL_SPEC_MAX];
    ck_assert_msg(mpt_model_canonical(in, buf, sizeof buf) == MPT_OK, "%s: %s", in, mpt_last_error());
    ck_assert_msg(strcmp(buf, want) == 0, "canonical of '%s': '%s', expected '%s'", in, buf, want);
    char again[MPT_MODEL_SPEC_MAX]; /* the canonical text is its own canonical text */
    ck_assert_msg(mpt_model_canonical(buf, again, sizeof again) == MPT_OK && strcmp(again, buf) == 0, "%s", buf);
}

START_TEST(test_parse_and_canonical) {
    expect_canonical("mlp", "mlp");
    expect_canonical("lenet5", "lenet5");
    expect_canonical(" conv( 6 , 5, pad = 2 ) ,relu , maxpool(2), flatten , linear ",
                     "conv(6,5,pad=2),relu,maxpool(2),flatten,linear");
    expect_canonical("conv(out_channels=8, kernel_size=3, stride=1, padding=1)", "conv(8,3,pad=1)");
    expect_canonical("conv2d(8,3,2),maxpool2d(2,stride=2),avgpool(3,1),flatten,linear",
                     "conv(8,3,stride=2),maxpool(2),avgpool(3,stride=1),flatten,linear");
    expect_canonical("batchnorm,batchnorm(1e-3),batchnorm(momentum=0.01),layernorm(eps=1e-6),linear",
                     "batchnorm,batchnorm(eps=0.001),batchnorm(momentum=0.01),layernorm(eps=1e-06),linear");
    expect_canonical("dropout(0.25),dropout(p=0.5),leakyrelu(0.2),leakyrelu,gelu,tanh,sigmoid,globalavgpool,linear",
                     "dropout(0.25),dropout,leakyrelu(0.2),leakyrelu,gelu,tanh,sigmoid,globalavgpool,linear");
    expect_canonical("# a file\nconv(4,3, name=stem),   # the stem\n relu,\nflatten,\nlinear(10),\n",
                     "conv(4,3,name=stem),relu,flatten,linear(10)");
    mpt_model_plan p;
    ck_assert_int_eq(mpt_model_parse("conv(4,3),relu,conv(8,3),batchnorm,relu,maxpool(2),flatten,linear", &p), MPT_OK);
    static const char *const want[] = {"conv1", "relu1", "conv2", "bn", "relu2", "pool", "flatten", "fc"};
    ck_assert_int_eq(p.n, 8);
    for (int i = 0; i < 8; i++) ck_assert_msg(strcmp(p.layer[i].name, want[i]) == 0, "%s", p.layer[i].name);
    ck_assert_int_eq(p.layer[7].out, 0); /* the class count, once planned */
}
END_TEST

static void expect_parse_error(const char *spec, const char *frag1, const char *frag2) {
    mpt_model_plan p;
    mpt_status s = mpt_model_parse(spec, &p);
    const char *msg = mpt_last_error();
    ck_assert_msg(s == MPT_ERR_ARG, "'%s' parsed: expected an error", spec);
    ck_assert_msg(strchr(msg, '\n') == NULL, "not one line: %s", msg);
    ck_assert_msg(strstr(msg, frag1) != NULL, "'%s': message lacks \"%s\": %s", spec, frag1, msg);
    if (frag2) ck_assert_msg(strstr(msg, frag2) != NULL, "'%s': message lacks \"%s\": %s", spec, frag2, msg);
}

START_TEST(test_parse_errors) {
    expect_parse_error("", "at character 1 (layer 1), found the end of the spec", "expected a layer");
    expect_parse_error("resnet", "found 'resnet': expected a layer (conv, linear", NULL);
    expect_parse_error("conv(6,5,pa=2)", "at character 10 (layer 1), found 'pa'",
                       "expected an argument of conv (out_channels, kernel, stride, pad, name)");
    expect_parse_error("relu,conv(6)", "at character 12 (layer 2), found ')'", "conv's argument kernel");
    expect_parse_error("conv", "at character 5 (layer 1), found the end", "'(' and conv's arguments");
    expect_parse_error("conv(6,5,1,0,3)", "found '3'", "conv takes 4 arguments");
    expect_parse_error("conv(6,5,stride=1,0)", "found '0'", "positional arguments come first");
    expect_parse_error("conv(6,2.5)", "found '2.5'", "an integer in [1, 1024] for conv's kernel");
    expect_parse_error("conv(0,5)", "found '0'", "conv's out_channels");
    /* an integer bound printed whole (it was %g: "[1, 1.04858e+06]", a bound that is not the limit) */
    expect_parse_error("flatten,linear(1048577),linear", "found '1048577'",
                       "an integer in [1, 1048576] for linear's out_features");
    expect_parse_error("dropout(1)", "found '1'", "a number in [0, 1) for dropout's p");
    expect_parse_error("conv(6,5,kernel=3)", "kernel given twice", NULL);
    expect_parse_error("relu relu", "at character 6 (layer 1), found 'relu'", "',' between layers");
    expect_parse_error("relu,,relu", "at character 6 (layer 2), found ','", "expected a layer");
    expect_parse_error("linear,relu,linear", "layer 1 (linear): expected its width", "only the last layer");
    expect_parse_error("relu(name=loss),linear", "found 'loss'", "a layer name");
    expect_parse_error("conv(4,3,name=a),conv(4,3,name=a),flatten,linear", "layer 2 (conv): the name 'a' is layer 1's",
                       NULL);
    expect_parse_error("linear(10", "found the end of the spec", "',' or ')'");
}
END_TEST

/* ---- planning ----------------------------------------------------------------------------------------------- */

static void expect_plan_error(const char *spec, const mpt_model_input *in, const char *frag1, const char *frag2) {
    mpt_model_plan p;
    mpt_status s = mpt_model_plan_make(spec, in, &p);
    const char *msg = mpt_last_error();
    ck_assert_msg(s == MPT_ERR_ARG, "'%s' planned: expected an error", spec);
    ck_assert_msg(strstr(msg, frag1) != NULL, "'%s': message lacks \"%s\": %s", spec, frag1, msg);
    if (frag2) ck_assert_msg(strstr(msg, frag2) != NULL, "'%s': message lacks \"%s\": %s", spec, frag2, msg);
}

START_TEST(test_plan) {
    const mpt_model_input fm = {1, 28, 28, 10}, rgb = {3, 32, 32, 47}, tiny = {1, 4, 4, 3};
    mpt_model_plan p;
    ck_assert_int_eq(mpt_model_plan_make("lenet5", &rgb, &p), MPT_OK); /* LeNet-5 on 3 x 32 x 32, 47 classes */
    ck_assert(p.layer[0].in_shape[0] == 3 && p.layer[0].out_shape[0] == 6 && p.layer[0].out_shape[1] == 32);
    ck_assert_int_eq(p.layer[6].out_shape[0], 16 * 6 * 6); /* flatten */
    ck_assert_int_eq(p.layer[11].out, 47);
    ck_assert_int_eq(mpt_model_plan_make("mlp", &rgb, &p), MPT_OK);
    ck_assert(p.layer[0].folded && p.layer[0].out_shape[0] == 3072);
    ck_assert_int_eq(mpt_model_plan_make("conv(8,3,pad=1),batchnorm,relu,globalavgpool,flatten,linear", &fm, &p),
                     MPT_OK);
    ck_assert(p.layer[3].out_shape[0] == 8 && p.layer[3].out_shape[1] == 1 && p.layer[5].out == 10);
    expect_plan_error("conv(6,5),relu,linear", &fm, "layer 3 linear (fc): its input is [B, 6, 24, 24]",
                      "put flatten before it");
    expect_plan_error("conv(6,5),flatten,linear", &tiny, "layer 1 conv(6,5) (conv): its input is [B, 1, 4, 4]",
                      "kernel 5 is larger than the padded input 4 x 4");
    expect_plan_error("maxpool(5),flatten,linear", &tiny, "layer 1 maxpool(5) (pool)", "larger than the input's 4 x 4");
    expect_plan_error("flatten,linear(20)", &fm, "the network ends in [B, 20], the data has 10 classes",
                      "linear(10)");
    expect_plan_error("conv(4,3)", &fm, "ends in [B, 4, 26, 26]", NULL);
    expect_plan_error("flatten,conv(4,3),linear", &fm, "layer 2 conv(4,3) (conv): its input is [B, 784]",
                      "conv takes [B, C, H, W]");
}
END_TEST

/* A spec with every layer kind builds and trains on 3 x 32 x 32 images with 47 classes. */
START_TEST(test_every_layer_trains) {
    const char *spec = "conv(8,3,pad=1),batchnorm,gelu,maxpool(2),conv(8,3,pad=1),layernorm,tanh,avgpool(2),"
                       "conv(8,3),sigmoid,globalavgpool,flatten,dropout(0.1),linear(32),batchnorm,leakyrelu(0.1),"
                       "relu,linear";
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 128, 16, 3 * 32 * 32, 47, 5), MPT_OK);
    const mpt_model_input in = {3, 32, 32, 47};
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_BF16, 0, 0);
    mpt_graph *g = mpt_graph_create(be, &pol, 16);
    mpt_tensor *logits;
    ck_assert_msg(mpt_model_build_for(g, spec, &in, &logits) == MPT_OK, "%s", mpt_last_error());
    ck_assert(logits->shape[1] == 47);
    ck_assert_ptr_nonnull(mpt_graph_find(g, "bn1.running_var"));
    ck_assert_ptr_nonnull(mpt_graph_find(g, "bn2.weight"));
    ck_assert_ptr_nonnull(mpt_graph_find(g, "ln.bias"));
    float losses[6];
    size_t n;
    unsigned char *b = train_bytes(g, &d, losses, 6, &n);
    for (int i = 0; i < 6; i++) ck_assert_msg(isfinite(losses[i]) && losses[i] > 0.0f, "loss %d: %g", i, losses[i]);
    free(b);
    mpt_backend_free(&be);
    mpt_mnist_free(&d);
}
END_TEST

static Suite *models_suite(void) {
    Suite *s = suite_create("models");
    TCase *tc = tcase_create("models");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_builtins_are_the_old_builders);
    tcase_add_test(tc, test_parse_and_canonical);
    tcase_add_test(tc, test_parse_errors);
    tcase_add_test(tc, test_plan);
    tcase_add_test(tc, test_every_layer_trains);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(models_suite()); }
