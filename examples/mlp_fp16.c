/*
 * examples/mlp_fp16.c - a network of your own, trained in FP16 with FP32 master weights and the dynamic loss
 * scaler, through libmptrain's public API only (mptrain.h).
 *
 * The network is LeCun et al. 1998's "300-100" MLP with dropout, which is not one of mptrain's built-in
 * models: x [B, 784] -> fc1 300 -> ReLU -> dropout 0.2 -> fc2 100 -> ReLU -> fc3 10 -> softmax cross-entropy.
 * The precision policy puts the GEMMs, weights and activations in FP16 and the loss in FP32; the trainer
 * keeps FP32 master weights and Adam state, and scales the loss dynamically (GradScaler's rules).
 *
 *   build:  cc mlp_fp16.c $(pkg-config --cflags --libs mptrain) -o mlp_fp16
 *   run:    ./mlp_fp16 [DATA_DIR|synthetic] [STEPS]
 * DATA_DIR holds the four Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist directory);
 * "synthetic" trains on generated images instead (datasets/synthetic.h). STEPS defaults to 2000 (about two
 * epochs of batches of 64).
 */
#include <mptrain/mptrain.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 64        /* batch size: the graph's shapes are static */
#define WINDOW 100  /* steps per progress line */

static mpt_tensor *mlp_300_100(mpt_graph *g, int64_t dim, int classes) {
    const int64_t shape[2] = {B, dim};
    mpt_tensor *x = mpt_input(g, 2, shape);                   /* [B, dim] */
    x = mpt_relu(g, mpt_linear(g, x, 300, "fc1"), "relu1");  /* [B, 300] */
    x = mpt_dropout(g, x, 0.2f, "drop1");
    x = mpt_relu(g, mpt_linear(g, x, 100, "fc2"), "relu2");  /* [B, 100] */
    return mpt_linear(g, x, classes, "fc3");                  /* [B, classes] logits */
}

/* Copies n host bytes into new backend memory. */
static void *upload(mpt_backend *be, const void *src, size_t n) {
    void *p = be->alloc(be, n);
    if (p) be->from_host(be, p, src, n);
    return p;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    long steps = argc > 2 ? atol(argv[2]) : 2000;
    mpt_mnist d;
    mpt_status s = strcmp(dir, "synthetic") == 0 ? mpt_synthetic_blobs(&d, 8192, 2048, 784, 10, 1)
                                                 : mpt_mnist_load(dir, &d);
    if (s != MPT_OK || steps < 1) {
        fprintf(stderr, "mlp_fp16: %s\n", s != MPT_OK ? mpt_last_error() : "STEPS must be a number >= 1");
        return 1;
    }
    printf("libmptrain %s, %s: %lld training and %lld test images of %lld pixels\n", mpt_version(), dir,
           (long long)d.n_train, (long long)d.n_test, (long long)d.dim);

    mpt_backend *be = mpt_backend_cpu_create();          /* or mpt_backend_cuda_create() */
    mpt_policy policy = mpt_policy_make(MPT_PRECISION_FP16);
    mpt_graph *g = mpt_graph_create(be, &policy, B);
    mpt_softmax_xent(g, mlp_300_100(g, d.dim, d.n_classes), "loss"); /* the class count the labels give */
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP16); /* Adam 1e-3, dynamic scaling */
    cfg.seed = 1;
    mpt_trainer *t;
    mpt_loader train, test;
    float mean, inv_std; /* torchvision's Normalize, from the training images */
    mpt_loader_stats(d.train_images, d.dim, NULL, d.n_train, &mean, &inv_std);
    uint8_t *train_x = upload(be, d.train_images, (size_t)(d.n_train * d.dim));
    uint8_t *train_y = upload(be, d.train_labels, (size_t)d.n_train);
    uint8_t *test_x = upload(be, d.test_images, (size_t)(d.n_test * d.dim));
    uint8_t *test_y = upload(be, d.test_labels, (size_t)d.n_test);
    int32_t *idx = be->alloc(be, B * sizeof(int32_t)), rows[B];
    if (!train_x || !train_y || !test_x || !test_y || !idx ||
        mpt_trainer_create(&t, g, &cfg) != MPT_OK ||
        mpt_loader_init(&train, NULL, d.n_train, B, MPT_LOADER_DROP_LAST, 1, cfg.seed) != MPT_OK ||
        mpt_loader_init(&test, NULL, d.n_test, B, MPT_LOADER_PAD_IGNORE, 0, cfg.seed) != MPT_OK) {
        fprintf(stderr, "mlp_fp16: %s\n", mpt_last_error()[0] ? mpt_last_error() : "out of backend memory");
        return 1;
    }

    mpt_train_stats st;
    double sum = 0.0, first = 0.0, last = 0.0;
    int n_valid;
    for (long step = 0, epoch = 0; step < steps; step++) {
        if (step == 0 || !mpt_loader_next(&train, rows, &n_valid)) {
            mpt_loader_start_epoch(&train, step == 0 ? 0 : ++epoch);
            mpt_loader_next(&train, rows, &n_valid);
        }
        be->from_host(be, idx, rows, sizeof rows);
        mpt_trainer_gather(t, train_x, train_y, idx, d.dim, mean, inv_std);
        mpt_trainer_step(t);
        mpt_trainer_stats(t, &st); /* synchronises: only to print the loss of every step here */
        sum += st.loss;
        if ((step + 1) % WINDOW == 0 || step + 1 == steps) {
            last = sum / (step % WINDOW + 1);
            if (step < WINDOW) first = last;
            printf("step %5ld  mean loss %.4f  loss scale %g  skipped steps %d\n", step + 1, last, st.scale,
                   st.steps_skipped);
            sum = 0.0;
        }
    }

    mpt_trainer_reset_correct(t);
    mpt_loader_start_epoch(&test, 0);
    while (mpt_loader_next(&test, rows, &n_valid)) { /* padding rows (-1) count in neither loss nor accuracy */
        be->from_host(be, idx, rows, sizeof rows);
        mpt_trainer_gather(t, test_x, test_y, idx, d.dim, mean, inv_std);
        mpt_trainer_eval_batch(t);
    }
    mpt_trainer_stats(t, &st);
    printf("mean loss: first %d steps %.4f, last %d steps %.4f\n", WINDOW, first, WINDOW, last);
    printf("test accuracy %.2f%% (%d of %lld; chance 10%%)\n", 100.0 * st.n_correct / d.n_test, st.n_correct,
           (long long)d.n_test);

    mpt_loader_free(&train);
    mpt_loader_free(&test);
    mpt_trainer_free(&t); /* frees the graph too */
    void *bufs[5] = {train_x, train_y, test_x, test_y, idx};
    for (int i = 0; i < 5; i++) be->free(be, bufs[i]);
    mpt_backend_free(&be);
    mpt_mnist_free(&d);
    return 0;
}
