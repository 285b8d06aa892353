/*
 * tests/grad_overwrite.h - shared by test_graph.c (CPU) and test_cuda.c (GPU): a graph's gradients with
 * g->grad_overwrite on (first writes overwrite, no arena memsets: engine/graph.h) against the same graph with it off
 * (arenas zeroed, every write adds), on one backend; and with g->fuse_epilogues on against off.
 *
 * The gradient and activation-gradient arenas are filled with 0xff bytes (NaN in every dtype) before each run, so a
 * layer that reads a gradient it should have overwritten, or a gradient nobody zeroed, shows up as NaN or as a
 * different value. Each run is zero_grad + forward + backward (dropout on), then a second forward + backward
 * without zero_grad (micro-batch accumulation: the parameter gradients must add up the same way in both modes).
 * Every parameter gradient and every activation gradient must be bit-identical between the modes (after
 * mpt_graph_fill_fused, which writes the relu output gradients a fused pass leaves unwritten). The batch ends
 * with two padding rows (label -1), whose logit gradients must come out 0 when they are overwritten.
 */
#ifndef MPT_TESTS_GRAD_OVERWRITE_H
#define MPT_TESTS_GRAD_OVERWRITE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/graph.h"
#include "engine/layers/layers.h"
#include "tests/harness.h"
#include "models/models.h"

#define GRAD_DUMP_MAX 64

/* Which tensors a dump holds, in order (for comparisons within a bound). */
typedef struct grad_dump_layout {
    int n;
    char name[GRAD_DUMP_MAX][MPT_NAME_LEN];
    mpt_dtype dtype[GRAD_DUMP_MAX];
    int64_t numel[GRAD_DUMP_MAX];
} grad_dump_layout;

/* Host copies of the gradients of g after the runs described above, concatenated (bytes in *len): every
 * activation gradient, and the parameter gradients too when params is nonzero; layout (may be NULL) says which. */
static unsigned char *grad_overwrite_run(mpt_backend *be, const char *model, mpt_precision prec, int overwrite,
                                         int fuse, int params, int passes, size_t *len, grad_dump_layout *layout) {
    const int B = 16;
    mpt_policy policy = mpt_policy_make(prec);
    mpt_graph *g = mpt_graph_create(be, &policy, B);
    mpt_tensor *logits = NULL;
    ck_assert_msg(mpt_model_build(g, model, &logits) == MPT_OK, "%s: %s", model, mpt_last_error());
    mpt_softmax_xent(g, logits, "loss");
    g->grad_overwrite = overwrite;
    g->fuse_epilogues = fuse;
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    float *scale = be->alloc(be, sizeof(float));
    const float s = 256.0f;
    be->from_host(be, scale, &s, sizeof s);
    g->loss_scale = scale;
    g->seed = 5;
    g->step = 3;
    g->training = 1;
    tests_rng r = {777};
    /* weights and input: uniform values rounded to each tensor's dtype; labels in [0, C), two padding rows */
    for (int i = 0; i < g->n_tensors; i++) {
        mpt_tensor *t = g->tensors[i];
        if (t->view_of || (t->mem != MPT_MEM_WEIGHT && t != g->input)) continue;
        int64_t n = mpt_tensor_numel(t);
        void *h = malloc((size_t)n * mpt_dtype_size(t->dtype));
        ck_assert_ptr_nonnull(h);
        for (int64_t k = 0; k < n; k++) mpt_store_f32(h, t->dtype, k, (float)tests_uniform(&r, -0.5, 0.5));
        be->from_host(be, t->data, h, (size_t)n * mpt_dtype_size(t->dtype));
        be->synchronize(be);
        free(h);
    }
    const int C = (int)logits->shape[1];
    int32_t labels[16];
    for (int i = 0; i < B; i++) labels[i] = i >= B - 2 ? -1 : tests_int(&r, 0, C - 1);
    be->from_host(be, g->labels->data, labels, sizeof labels);
    const mpt_mem poisoned[2] = {MPT_MEM_GRAD, MPT_MEM_ACT_GRAD};
    for (int k = 0; k < 2; k++) {
        size_t bytes = g->arena_bytes[poisoned[k]];
        if (!bytes) continue;
        void *h = malloc(bytes);
        ck_assert_ptr_nonnull(h);
        memset(h, 0xff, bytes);
        be->from_host(be, g->arena[poisoned[k]], h, bytes);
        be->synchronize(be);
        free(h);
    }
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    if (passes == 2) { /* a second micro-batch: parameter gradients add up (and a fused relu backward cannot) */
        mpt_graph_forward(g);
        mpt_graph_backward(g);
    }
    /* the relu output gradients that a fused backward pass leaves unwritten, as the unfused GEMM computes them */
    mpt_graph_fill_fused(g);
    const mpt_mem dumped = params ? MPT_MEM_GRAD : MPT_MEM_ACT_GRAD;
    size_t total = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const mpt_tensor *t = g->tensors[i];
        if (!t->view_of && (t->mem == dumped || t->mem == MPT_MEM_ACT_GRAD)) total += mpt_tensor_nbytes(t);
    }
    unsigned char *out = malloc(total ? total : 1);
    ck_assert_ptr_nonnull(out);
    size_t off = 0;
    if (layout) layout->n = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const mpt_tensor *t = g->tensors[i];
        if (t->view_of || (t->mem != dumped && t->mem != MPT_MEM_ACT_GRAD)) continue;
        if (layout) {
            ck_assert_int_lt(layout->n, GRAD_DUMP_MAX);
            snprintf(layout->name[layout->n], MPT_NAME_LEN, "%s", t->name);
            layout->dtype[layout->n] = t->dtype;
            layout->numel[layout->n] = mpt_tensor_numel(t);
            layout->n++;
        }
        be->to_host(be, out + off, t->data, mpt_tensor_nbytes(t));
        off += mpt_tensor_nbytes(t);
    }
    be->free(be, scale);
    mpt_graph_free(&g);
    *len = total;
    return out;
}

/* Runs (overwrite_a, fuse_a) and (overwrite_b, fuse_b) and requires the same gradient bytes. */
static void grad_runs_equal(mpt_backend *be, const char *model, mpt_precision prec, int overwrite_a, int fuse_a,
                            int overwrite_b, int fuse_b, int params, int passes, const char *what) {
    size_t la = 0, lb = 0;
    unsigned char *a = grad_overwrite_run(be, model, prec, overwrite_a, fuse_a, params, passes, &la, NULL);
    unsigned char *b = grad_overwrite_run(be, model, prec, overwrite_b, fuse_b, params, passes, &lb, NULL);
    ck_assert_uint_eq(la, lb);
    ck_assert_uint_gt(la, 0);
    size_t first = la;
    for (size_t i = 0; i < la && first == la; i++)
        if (a[i] != b[i]) first = i;
    ck_assert_msg(first == la, "%s %s on %s, %d pass(es): %s differ at byte %zu of %zu", model,
                  mpt_precision_name(prec), be->name, passes, what, first, la);
    free(a);
    free(b);
}

/* Both modes on `be` (unfused): the gradients must be the same bytes (a poisoned byte read in overwrite mode would
 * differ). */
static void grad_overwrite_check(mpt_backend *be, const char *model, mpt_precision prec) {
    grad_runs_equal(be, model, prec, 0, 0, 1, 0, 1, 2, "gradients with grad_overwrite and with zeroed arenas");
}

/* Fused epilogues off and on (grad_overwrite on, so the first bias-gradient write fuses, and in one pass the relu
 * backward too: engine/graph.h), with one pass and with two (the second pass runs the relu backward unfused): all
 * gradients bit for bit (params = 1: the CPU, whose fused epilogues run the unfused loops), or the activation
 * gradients only (params = 0). The GPU uses grad_fuse_close instead. */
static inline void grad_fuse_check(mpt_backend *be, const char *model, mpt_precision prec, int params) {
    for (int passes = 1; passes <= 2; passes++)
        grad_runs_equal(be, model, prec, 1, 0, 1, 1, params, passes, "gradients with fused and unfused epilogues");
}

/* Fused epilogues off and on within a bound (the GPU: the fused GEMMs may run other cuBLASLt algorithms, so other
 * summation orders, and cuBLASLt's mask and bias-gradient rules differ from ours at the margins: engine/backend.h).
 * Every gradient tensor, parameters included, one pass and two: relative L2 distance <= 8 u(dtype) + 4 K 2^-24 with
 * K = 1024 (above every reduction length of the models at batch 16): one storage rounding flipped per element, plus
 * FP32 summation-order noise, with a factor for propagation through the later layers. An all-zero tensor must stay
 * all zero; NaN (a poisoned byte read) fails. */
static inline void grad_fuse_close(mpt_backend *be, const char *model, mpt_precision prec) {
    for (int passes = 1; passes <= 2; passes++) {
        size_t la = 0, lb = 0;
        grad_dump_layout lay;
        unsigned char *a = grad_overwrite_run(be, model, prec, 1, 1, 1, passes, &la, &lay);
        unsigned char *b = grad_overwrite_run(be, model, prec, 1, 0, 1, passes, &lb, NULL);
        ck_assert_uint_eq(la, lb);
        size_t off = 0;
        for (int k = 0; k < lay.n; k++) {
            const mpt_dtype t = lay.dtype[k];
            const double u = t == MPT_DTYPE_F16 ? 0x1p-11 : t == MPT_DTYPE_BF16 ? 0x1p-8 : 0x1p-24;
            const double bound = 8.0 * u + 4.0 * 1024.0 * 0x1p-24;
            double d2 = 0.0, b2 = 0.0;
            for (int64_t i = 0; i < lay.numel[k]; i++) {
                const double x = mpt_load_f32(a + off, t, i), y = mpt_load_f32(b + off, t, i);
                d2 += (x - y) * (x - y);
                b2 += y * y;
            }
            const double rel = b2 > 0.0 ? sqrt(d2 / b2) : (d2 > 0.0 ? INFINITY : 0.0);
            ck_assert_msg(rel <= bound, "%s %s on %s, %d pass(es): %s fused vs unfused relative L2 %.3g > bound %.3g",
                          model, mpt_precision_name(prec), be->name, passes, lay.name[k], rel, bound);
            off += (size_t)lay.numel[k] * mpt_dtype_size(t);
        }
        free(a);
        free(b);
    }
}

#endif
