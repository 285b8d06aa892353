/*
 * tests/test_graph.c - the autograd graph (engine/graph.c) with real layers on the CPU backend.
 *
 * Checks: one arena per memory category whose size is the sum of the 256-byte-aligned tensor sizes, every
 * tensor a non-overlapping aligned view into its arena and the backend's accounting (current and peak) in
 * step with it; views share data and gradients; zero_grad clears every gradient; forward runs the nodes in
 * order and backward in reverse, gradients of a small MLP match an FP64 reference and accumulate (+=) over
 * two backward passes; a linear -> relu -> linear chain fuses (and runs unfused when fusion is turned off), the
 * telemetry twin and a linear output with a second reader do not fuse, and a tensor read by two layers gets the sum
 * of their gradients; a training step allocates nothing; the precision map has one line per node with the
 * dtypes and math mode the policy gave it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layers/layers.h"
#include "tests/harness.h"
#include "tests/grad_overwrite.h"

/* ck_assert_msg without Check's per-call bookkeeping (a pipe write per assertion in fork mode): used in
 * element loops. */
#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

#define U32 0x1p-24
#define ALIGN 256

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* A LeNet-like graph touching every layer: input [B,1,12,12] -> conv 4@3x3 pad 1 -> relu -> maxpool 2
 * -> dropout -> flatten -> linear 10 -> softmax_xent. */
static mpt_graph *build_small_cnn(mpt_backend *be, mpt_precision mode, int B) {
    int tf32 = mode == MPT_PRECISION_TF32;
    mpt_policy pol = mpt_policy_make_explicit(mode, tf32, tf32);
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    int64_t xs[4] = {B, 1, 12, 12};
    mpt_tensor *x = mpt_input(g, 4, xs);
    x = mpt_relu(g, mpt_conv2d(g, x, 4, 3, 1, 1, "conv1"), "relu1");
    x = mpt_maxpool2d(g, x, 2, 2, "pool1");
    x = mpt_dropout(g, x, 0.25f, "drop1");
    x = mpt_flatten(g, x, "flatten");
    x = mpt_linear(g, x, 10, "fc1");
    mpt_softmax_xent(g, x, "loss");
    return g;
}

START_TEST(test_arenas) {
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = build_small_cnn(be, MPT_PRECISION_FP16, 3);
    size_t want[MPT_MEM_COUNT] = {0};
    for (int i = 0; i < g->n_tensors; i++) {
        const mpt_tensor *t = g->tensors[i];
        if (!t->view_of) want[t->mem] += align_up(mpt_tensor_nbytes(t));
    }
    for (int m = 0; m < MPT_MEM_COUNT; m++) ck_assert_uint_eq(mpt_graph_bytes(g, (mpt_mem)m), want[m]);
    ck_assert(want[MPT_MEM_WEIGHT] > 0 && want[MPT_MEM_GRAD] > 0 && want[MPT_MEM_ACT] > 0 &&
              want[MPT_MEM_ACT_GRAD] > 0);
    /* parameters: weights in the compute dtype (F16 here), FP32 gradients */
    ck_assert_int_eq(g->n_params, 4);
    for (int i = 0; i < g->n_params; i++) {
        ck_assert(g->params[i].weight->dtype == MPT_DTYPE_F16 && g->params[i].weight->mem == MPT_MEM_WEIGHT);
        ck_assert(g->params[i].weight->grad->dtype == MPT_DTYPE_F32 && g->params[i].weight->grad->mem == MPT_MEM_GRAD);
    }
    ck_assert_int_eq(g->params[0].fan_in, 1 * 3 * 3);
    ck_assert_int_eq(g->params[2].fan_in, 4 * 6 * 6);
    size_t ws = be->workspace_bytes;
    ck_assert(ws > 0 && be->mem_current[MPT_MEM_WORKSPACE] == ws);

    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    for (int m = 0; m < MPT_MEM_COUNT; m++) {
        if (m == MPT_MEM_WORKSPACE) continue;
        ck_assert_uint_eq(g->arena_bytes[m], want[m]);
        ck_assert_uint_eq(mpt_graph_bytes(g, (mpt_mem)m), want[m]);
        ck_assert_uint_eq(be->mem_current[m], want[m]);
        ck_assert(be->mem_peak[m] >= want[m]);
        ck_assert((want[m] == 0) == (g->arena[m] == NULL));
    }
    size_t total = 0;
    for (int m = 0; m < MPT_MEM_COUNT; m++) total += be->mem_current[m];
    ck_assert_uint_eq(be->mem_peak_total, total);
    /* each tensor: inside its arena, aligned, not overlapping the next one; views point at their source */
    for (int i = 0; i < g->n_tensors; i++) {
        const mpt_tensor *t = g->tensors[i];
        ck_assert(t->data != NULL);
        if (t->view_of) {
            ck_assert(t->data == t->view_of->data);
            continue;
        }
        const char *base = g->arena[t->mem];
        size_t off = (size_t)((const char *)t->data - base);
        EXPECT(off % ALIGN == 0 && off + mpt_tensor_nbytes(t) <= g->arena_bytes[t->mem],
                      "tensor %s at offset %zu (%zu bytes) in a %zu-byte arena", t->name, off, mpt_tensor_nbytes(t),
                      g->arena_bytes[t->mem]);
        for (int j = 0; j < g->n_tensors; j++) {
            const mpt_tensor *u = g->tensors[j];
            if (j == i || u->view_of || u->mem != t->mem) continue;
            const char *a0 = t->data, *a1 = a0 + mpt_tensor_nbytes(t), *b0 = u->data, *b1 = b0 + mpt_tensor_nbytes(u);
            EXPECT(a1 <= b0 || b1 <= a0, "tensors %s and %s overlap", t->name, u->name);
        }
    }
    /* freeing the graph returns its arenas; the peaks stay */
    size_t peak_act = be->mem_peak[MPT_MEM_ACT];
    mpt_graph_free(&g);
    ck_assert(g == NULL);
    for (int m = 0; m < MPT_MEM_COUNT; m++)
        if (m != MPT_MEM_WORKSPACE) ck_assert_uint_eq(be->mem_current[m], 0);
    ck_assert_uint_eq(be->mem_peak[MPT_MEM_ACT], peak_act);
    mpt_backend_free(&be);
}
END_TEST

START_TEST(test_views_share) {
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = build_small_cnn(be, MPT_PRECISION_FP32, 2);
    mpt_tensor *flat = mpt_graph_find(g, "flatten.out"), *src = mpt_graph_find(g, "drop1.out");
    ck_assert(flat && src && flat->view_of == src && flat->grad && flat->grad->view_of == src->grad);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    ck_assert(flat->data == src->data && flat->grad->data == src->grad->data);
    ck_assert_uint_eq(mpt_tensor_nbytes(flat), mpt_tensor_nbytes(src));
    ((float *)src->data)[5] = 42.0f;
    ck_assert(((float *)flat->data)[5] == 42.0f);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

START_TEST(test_zero_grad) {
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = build_small_cnn(be, MPT_PRECISION_BF16, 2);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    for (int i = 0; i < g->n_tensors; i++) {
        mpt_tensor *t = g->tensors[i];
        if (t->grad && !t->grad->view_of) memset(t->grad->data, 0x5a, mpt_tensor_nbytes(t->grad));
    }
    /* zero_grad clears the parameter gradients and leaves activation gradients to backward */
    mpt_graph_zero_grad(g);
    int checked = 0, act_dirty = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        mpt_tensor *t = g->tensors[i];
        if (!t->grad) continue;
        const unsigned char *p = t->grad->data;
        if (t->grad->mem == MPT_MEM_ACT_GRAD) {
            act_dirty += p[0] == 0x5a;
            continue;
        }
        for (size_t k = 0; k < mpt_tensor_nbytes(t->grad); k++)
            EXPECT(p[k] == 0, "%s byte %zu not cleared", t->grad->name, k);
        checked++;
    }
    ck_assert(checked >= 4);
    ck_assert(act_dirty >= 1);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

/* ---- order of replay: custom nodes log their calls --------------------------------------------------- */

static int order_log[16], order_n;
static void log_forward(mpt_graph *g, mpt_node *n) { (void)g; order_log[order_n++] = 1 + n->attr.pool.kernel; }
static void log_backward(mpt_graph *g, mpt_node *n) { (void)g; order_log[order_n++] = -(1 + n->attr.pool.kernel); }

START_TEST(test_replay_order) {
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP32, 0, 0);
    mpt_graph *g = mpt_graph_create(be, &pol, 1);
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "n%d", i);
        mpt_node *n = mpt_graph_node(g, MPT_OP_RELU, name);
        n->attr.pool.kernel = i; /* the node's index, read back by the logging functions */
        n->forward = log_forward;
        n->backward = i == 2 ? NULL : log_backward; /* a node without backward is skipped */
    }
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    order_n = 0;
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    const int want[7] = {1, 2, 3, 4, -4, -2, -1};
    ck_assert_int_eq(order_n, 7);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(order_log[i], want[i]);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

/* ---- an MLP against an FP64 reference; accumulation over two backward passes ------------------------- */

enum { MB = 4, MIN = 6, MH = 5, MC = 3 };

/* x [MB,MIN] -> fc1 (W1 [MH,MIN], b1) -> relu -> fc2 (W2 [MC,MH], b2) -> softmax_xent(labels); gradients by
 * hand (chain rule) in FP64. */
static double ref_mlp(const double *x, const double *w1, const double *b1, const double *w2, const double *b2,
                      const int32_t *lab, double *dw1, double *db1, double *dw2, double *db2) {
    double h[MB][MH], a[MB][MH], z[MB][MC], dz[MB][MC], da[MB][MH], loss = 0;
    for (int i = 0; i < MB; i++) {
        for (int j = 0; j < MH; j++) {
            h[i][j] = b1[j];
            for (int k = 0; k < MIN; k++) h[i][j] += x[i * MIN + k] * w1[j * MIN + k];
            a[i][j] = h[i][j] > 0 ? h[i][j] : 0;
        }
        double m = -INFINITY, s = 0;
        for (int c = 0; c < MC; c++) {
            z[i][c] = b2[c];
            for (int j = 0; j < MH; j++) z[i][c] += a[i][j] * w2[c * MH + j];
            m = fmax(m, z[i][c]);
        }
        for (int c = 0; c < MC; c++) s += exp(z[i][c] - m);
        loss += (m + log(s) - z[i][lab[i]]) / MB;
        for (int c = 0; c < MC; c++) dz[i][c] = (exp(z[i][c] - m) / s - (c == lab[i])) / MB;
    }
    memset(dw1, 0, sizeof(double) * MH * MIN);
    memset(db1, 0, sizeof(double) * MH);
    memset(dw2, 0, sizeof(double) * MC * MH);
    memset(db2, 0, sizeof(double) * MC);
    for (int i = 0; i < MB; i++) {
        for (int c = 0; c < MC; c++) {
            db2[c] += dz[i][c];
            for (int j = 0; j < MH; j++) dw2[c * MH + j] += dz[i][c] * a[i][j];
        }
        for (int j = 0; j < MH; j++) {
            da[i][j] = 0;
            for (int c = 0; c < MC; c++) da[i][j] += dz[i][c] * w2[c * MH + j];
            double dh = h[i][j] > 0 ? da[i][j] : 0;
            db1[j] += dh;
            for (int k = 0; k < MIN; k++) dw1[j * MIN + k] += dh * x[i * MIN + k];
        }
    }
    return loss;
}

static void fill_f32(mpt_tensor *t, tests_rng *r, double *out) {
    for (int64_t i = 0; i < mpt_tensor_numel(t); i++) {
        float v = (float)tests_uniform(r, -1, 1);
        ((float *)t->data)[i] = v;
        out[i] = v;
    }
}

/* Values of order 1 through two layers of at most 6-term FP32 sums, an exp/log and a mean: every computed
 * gradient carries a relative error of a few tens of u; 256 u (1.5e-5) of the largest gradient is the bound. */
static void expect_grad(const char *what, const mpt_tensor *gt, const double *ref, int64_t n, double mult) {
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double got = ((const float *)gt->data)[i];
        EXPECT(fabs(got - mult * ref[i]) <= 256 * U32 * mult * (scale + 1e-3),
                      "%s[%lld]: got %.9g, expected %g x %.9g", what, (long long)i, got, mult, ref[i]);
    }
}

/* The MLP of ref_mlp built in a graph: its inputs, parameters and labels, their FP64 copies and reference gradients. */
typedef struct mlp_case {
    mpt_tensor *w1, *b1, *w2, *b2;
    double x[MB * MIN], vw1[MH * MIN], vb1[MH], vw2[MC * MH], vb2[MC];
    double dw1[MH * MIN], db1[MH], dw2[MC * MH], db2[MC];
    double loss;
} mlp_case;

/* Fills graph g's input and fc1/fc2 parameters from r, sets the labels lab, and computes ref_mlp's loss and
 * gradients into m. */
static void mlp_fill(mpt_graph *g, tests_rng *r, const int32_t lab[MB], mlp_case *m) {
    m->w1 = mpt_graph_find(g, "fc1.weight"), m->b1 = mpt_graph_find(g, "fc1.bias");
    m->w2 = mpt_graph_find(g, "fc2.weight"), m->b2 = mpt_graph_find(g, "fc2.bias");
    fill_f32(g->input, r, m->x);
    fill_f32(m->w1, r, m->vw1);
    fill_f32(m->b1, r, m->vb1);
    fill_f32(m->w2, r, m->vw2);
    fill_f32(m->b2, r, m->vb2);
    memcpy(g->labels->data, lab, sizeof(int32_t) * MB);
    m->loss = ref_mlp(m->x, m->vw1, m->vb1, m->vw2, m->vb2, lab, m->dw1, m->db1, m->dw2, m->db2);
}

/* The four parameter gradients against mult x ref_mlp's; `when` ends each name in messages. */
static void mlp_expect_grads(const mlp_case *m, const char *when, double mult) {
    char tn[96];
    snprintf(tn, sizeof tn, "fc1.weight.grad%s", when);
    expect_grad(tn, m->w1->grad, m->dw1, MH * MIN, mult);
    snprintf(tn, sizeof tn, "fc1.bias.grad%s", when);
    expect_grad(tn, m->b1->grad, m->db1, MH, mult);
    snprintf(tn, sizeof tn, "fc2.weight.grad%s", when);
    expect_grad(tn, m->w2->grad, m->dw2, MC * MH, mult);
    snprintf(tn, sizeof tn, "fc2.bias.grad%s", when);
    expect_grad(tn, m->b2->grad, m->db2, MC, mult);
}

/* ref_mlp's network as an FP32 graph on backend be (fc1 -> relu1 -> fc2 -> loss), with the given fusion,
 * first-write and twin flags set before it is built (they decide the plan), allocated, loss scale 1. */
static mpt_graph *mlp_graph(mpt_backend *be, int fuse, int overwrite, int twin) {
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP32, 0, 0);
    mpt_graph *g = mpt_graph_create(be, &pol, MB);
    g->fuse_epilogues = fuse;
    g->grad_overwrite = overwrite;
    g->twin = twin;
    int64_t xs[2] = {MB, MIN}, one[1] = {1};
    mpt_tensor *h = mpt_relu(g, mpt_linear(g, mpt_input(g, 2, xs), MH, "fc1"), "relu1");
    mpt_softmax_xent(g, mpt_linear(g, h, MC, "fc2"), "loss");
    mpt_tensor *scale = mpt_graph_tensor(g, "scale", MPT_DTYPE_F32, MPT_MEM_ACT, 1, one);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    *(float *)scale->data = 1.0f;
    g->loss_scale = scale->data;
    return g;
}

/* fc1's output element (i, j) in FP64 from the inputs and parameters that fill_f32 stored; *mag = 1 + sum |x w|
 * (FP32 sums of products in [-1, 1] plus the bias are within 16 u of it). */
static double fc1_ref(const double *x, const double *vw1, const double *vb1, int i, int j, double *mag) {
    double h = vb1[j];
    *mag = 1.0;
    for (int k = 0; k < MIN; k++) {
        h += x[i * MIN + k] * vw1[j * MIN + k];
        *mag += fabs(x[i * MIN + k] * vw1[j * MIN + k]);
    }
    return h;
}

/* g->grad_overwrite (first writes overwrite, no arena memsets) gives the gradients of zeroed arenas bit for bit:
 * every layer of the three models (linear, conv, maxpool, relu, dropout, flatten, loss) in each precision, with
 * the gradient arenas poisoned (tests/grad_overwrite.h); and g->fuse_epilogues (a linear layer's bias gradient
 * from its weight-gradient GEMM) changes no bit on the CPU. */
START_TEST(test_grad_overwrite_bit_identical) {
    static const char *const models[3] = {"mlp", "lenet5", "cnn"};
    static const mpt_precision precs[4] = {MPT_PRECISION_FP32, MPT_PRECISION_TF32, MPT_PRECISION_FP16,
                                           MPT_PRECISION_BF16};
    mpt_backend *be = mpt_backend_cpu_create();
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 4; p++) {
            grad_overwrite_check(be, models[m], precs[p]);
            grad_fuse_check(be, models[m], precs[p], 1);
        }
    mpt_backend_free(&be);
}
END_TEST

START_TEST(test_mlp_backward_accumulates) {
    tests_rng r = {0x91};
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mlp_graph(be, 0, 0, 0);
    const int32_t lab[MB] = {0, 2, 1, 2};
    mlp_case m;
    mlp_fill(g, &r, lab, &m);

    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    ck_assert(fabs(*(float *)g->loss->data - m.loss) <= 64 * U32 * (fabs(m.loss) + 1));
    mpt_graph_backward(g);
    /* reverse order: fc1's gradients need fc2's and relu's backward to have run first */
    mlp_expect_grads(&m, "", 1);

    /* A second forward + backward without zero_grad adds the same parameter gradients again (+=), as
     * PyTorch's micro-batch accumulation does: forward clears the activation gradients of the previous pass
     * (poison them to prove it). */
    memset(g->arena[MPT_MEM_ACT_GRAD], 0x7f, g->arena_bytes[MPT_MEM_ACT_GRAD]);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    mlp_expect_grads(&m, " (2 passes)", 2);

    /* zero_grad then one pass: back to 1x */
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g);
    mlp_expect_grads(&m, " (after zero_grad)", 1);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

/* ---- fused epilogues: which linear -> relu pairs fuse (engine/graph.h "Fused epilogues", linear.c) ------------- */

static mpt_node *node_named(const mpt_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i]->name, name) == 0) return g->nodes[i];
    ck_abort_msg("no node %s", name);
    return NULL;
}

/* fc1 -> relu1 -> fc2 with grad_overwrite and fusion on, one pass from zero_grad: fc1's forward GEMM writes relu1's
 * output, and fc2's data-gradient GEMM writes fc1's output gradient through the relu mask and fc1's bias gradient (both
 * first writes), which does relu1's backward (its node marked bwd_done, so mpt_graph_backward skips it). The design
 * says so (engine/graph.h, linear.c's header); the gradients must still be those of the FP64 reference ref_mlp.
 * Then the same with fusion turned off after the plan: the unfused path, the same loss and gradients. */
START_TEST(test_fusion_taken) {
    tests_rng r = {0x93};
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mlp_graph(be, 1, 1, 0);
    mpt_node *fc1 = node_named(g, "fc1"), *relu1 = node_named(g, "relu1"), *fc2 = node_named(g, "fc2");
    ck_assert_msg(fc1->fused_relu == relu1 && relu1->fused_prev == fc1 && fc1->fused_next == fc2,
                  "fc1 -> relu1 -> fc2 was not planned as a fused pair");
    const int32_t lab[MB] = {1, 0, 2, 2};
    mlp_case m;
    mlp_fill(g, &r, lab, &m);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    ck_assert(fabs(*(float *)g->loss->data - m.loss) <= 64 * U32 * (fabs(m.loss) + 1));
    mpt_graph_backward(g);
    ck_assert_msg(relu1->bwd_done == 1, "relu1's backward was not done by fc2's data-gradient epilogue");
    mlp_expect_grads(&m, " (fused)", 1);
    /* fusion turned off after the plan (g->fuse_epilogues may change between steps: bench/fusion_bench.c, the step
     * graph's capture key): fc1 writes its output and relu1 must compute its own again (its output poisoned first) */
    g->fuse_epilogues = 0;
    memset(relu1->out->data, 0xff, mpt_tensor_nbytes(relu1->out));
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    ck_assert(fabs(*(float *)g->loss->data - m.loss) <= 64 * U32 * (fabs(m.loss) + 1));
    mpt_graph_backward(g);
    ck_assert_msg(relu1->bwd_done == 0, "relu1's backward was skipped with fusion off");
    mlp_expect_grads(&m, " (unfused)", 1);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

/* The FP32 shadow twin of telemetry (g->twin) runs unfused (engine/graph.h): no pair is planned, and a forward writes
 * fc1.out itself (checked against the FP64 forward, 16 u of 1 + sum |x w|), as the collector compares it with the
 * run's fc1.out. */
START_TEST(test_twin_unfused) {
    tests_rng r = {0x97};
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = mlp_graph(be, 1, 0, 1);
    ck_assert_msg(node_named(g, "fc1")->fused_relu == NULL, "the twin planned a fused epilogue");
    const mpt_tensor *y = node_named(g, "fc1")->out;
    const int32_t lab[MB] = {2, 1, 0, 0};
    mlp_case m;
    mlp_fill(g, &r, lab, &m);
    mpt_graph_forward(g);
    for (int e = 0; e < MB * MH; e++) {
        double mag;
        const double h = fc1_ref(m.x, m.vw1, m.vb1, e / MH, e % MH, &mag);
        EXPECT(fabs(((float *)y->data)[e] - h) <= 16 * U32 * mag, "twin: fc1.out[%d] %.9g, expected %.9g", e,
               (double)((float *)y->data)[e], h);
    }
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

/* A linear output y read twice: by a dead-end layer D (nothing consumes D's output; built first, so its backward runs
 * last and must add to y's gradient) and by relu1 -> fc2 -> loss. D is, by variant: a relu on y, a relu on a view of y
 * made with mpt_graph_view (the public API, no flatten node in between), dropout, gelu, tanh, sigmoid, leaky relu,
 * layer norm, batch norm, a linear layer.
 * Forward with fusion on: relu1 must not be fused into fc1's GEMM (y has a second reader that needs y = x W^T + b):
 * fc1.out and relu1's output (and a relu D's) against the FP64 forward (6-term FP32 sums of products in [-1, 1] plus
 * the bias: within 16 u of 1 + sum |x w|; relu exact on top).
 * Backward with grad_overwrite and the gradient arenas poisoned (0xff: NaN): relu1 writes y's gradient first, then D
 * adds its contribution, 0 (D's output gradient nobody wrote must be read as 0: engine/graph.h); so the parameter
 * gradients of fc1 and fc2 are those of ref_mlp. A D that overwrote y's gradient, or read its poisoned output
 * gradient, fails. */
START_TEST(test_tensor_read_twice) {
    static const char *const what[10] = {"relu", "relu on a view", "dropout", "gelu", "tanh", "sigmoid",
                                         "leakyrelu", "layernorm", "batchnorm", "linear"};
    for (int variant = 0; variant < 10; variant++) {
        tests_rng r = {0x95u + (unsigned)variant};
        mpt_backend *be = mpt_backend_cpu_create();
        mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP32, 0, 0);
        mpt_graph *g = mpt_graph_create(be, &pol, MB);
        g->fuse_epilogues = 1;
        g->grad_overwrite = 1;
        g->training = 1; /* dropout and batch norm */
        int64_t xs[2] = {MB, MIN}, hs[2] = {MB, MH}, one[1] = {1};
        mpt_tensor *y = mpt_linear(g, mpt_input(g, 2, xs), MH, "fc1");
        mpt_tensor *r2 = NULL;
        switch (variant) {
        case 0: r2 = mpt_relu(g, y, "dead"); break;
        case 1: r2 = mpt_relu(g, mpt_graph_view(g, y, "fc1.view", 2, hs), "dead"); break;
        case 2: mpt_dropout(g, y, 0.5f, "dead"); break;
        case 3: mpt_gelu(g, y, "dead"); break;
        case 4: mpt_tanh(g, y, "dead"); break;
        case 5: mpt_sigmoid(g, y, "dead"); break;
        case 6: mpt_leakyrelu(g, y, 0.1f, "dead"); break;
        case 7: mpt_layernorm(g, y, 1e-5f, "dead"); break;
        case 8: mpt_batchnorm(g, y, 1e-5f, 0.1f, "dead"); break;
        default: mpt_linear(g, y, 2, "dead"); break;
        }
        mpt_tensor *r1 = mpt_relu(g, y, "relu1");
        mpt_softmax_xent(g, mpt_linear(g, r1, MC, "fc2"), "loss");
        mpt_tensor *scale = mpt_graph_tensor(g, "scale", MPT_DTYPE_F32, MPT_MEM_ACT, 1, one);
        ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
        *(float *)scale->data = 1.0f;
        g->loss_scale = scale->data;
        const int32_t lab[MB] = {0, 1, 2, 0};
        mlp_case m;
        mlp_fill(g, &r, lab, &m);
        memset(g->arena[MPT_MEM_ACT_GRAD], 0xff, g->arena_bytes[MPT_MEM_ACT_GRAD]);
        memset(g->arena[MPT_MEM_GRAD], 0xff, g->arena_bytes[MPT_MEM_GRAD]);
        mpt_graph_zero_grad(g);
        mpt_graph_forward(g);
        for (int i = 0; i < MB; i++)
            for (int j = 0; j < MH; j++) {
                double mag;
                const double h = fc1_ref(m.x, m.vw1, m.vb1, i, j, &mag);
                const double rh = h > 0 ? h : 0, bound = 16 * U32 * mag;
                const int e = i * MH + j;
                EXPECT(fabs(((float *)y->data)[e] - h) <= bound, "%s: fc1.out[%d] %.9g, expected %.9g", what[variant],
                       e, (double)((float *)y->data)[e], h);
                EXPECT(fabs(((float *)r1->data)[e] - rh) <= bound, "%s: relu1.out[%d] %.9g, expected %.9g",
                       what[variant], e, (double)((float *)r1->data)[e], rh);
                EXPECT(!r2 || fabs(((float *)r2->data)[e] - rh) <= bound, "%s: dead.out[%d] %.9g, expected %.9g",
                       what[variant], e, r2 ? (double)((float *)r2->data)[e] : 0.0, rh);
            }
        mpt_graph_backward(g);
        char when[64];
        snprintf(when, sizeof when, " (dead-end %s)", what[variant]);
        mlp_expect_grads(&m, when, 1);
        mpt_graph_free(&g);
        mpt_backend_free(&be);
    }
}
END_TEST

/* ---- no allocation in a step ------------------------------------------------------------------------- */

static int alloc_calls;
static void *(*real_alloc)(mpt_backend *be, size_t bytes);
static void *counting_alloc(mpt_backend *be, size_t bytes) {
    alloc_calls++;
    return real_alloc(be, bytes);
}

START_TEST(test_no_alloc_in_step) {
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = build_small_cnn(be, MPT_PRECISION_FP16, 4);
    int64_t one[1] = {1};
    mpt_tensor *scale = mpt_graph_tensor(g, "scale", MPT_DTYPE_F32, MPT_MEM_ACT, 1, one);
    ck_assert_int_eq(mpt_graph_alloc(g), MPT_OK);
    *(float *)scale->data = 1.0f;
    g->loss_scale = scale->data;
    tests_rng r = {0x92};
    for (int i = 0; i < g->n_tensors; i++) { /* inputs and weights: small random F16 values */
        mpt_tensor *t = g->tensors[i];
        if (t->view_of || (t->mem != MPT_MEM_WEIGHT && t != g->input)) continue;
        for (int64_t k = 0; k < mpt_tensor_numel(t); k++)
            ((uint16_t *)t->data)[k] = mpt_f32_to_f16((float)tests_uniform(&r, -0.5, 0.5));
    }
    for (int b = 0; b < 4; b++) ((int32_t *)g->labels->data)[b] = b % 10;
    size_t peak = be->mem_peak_total, cur[MPT_MEM_COUNT], ws = be->workspace_bytes;
    memcpy(cur, be->mem_current, sizeof cur);
    real_alloc = be->alloc;
    be->alloc = counting_alloc;
    alloc_calls = 0;
    g->training = 1;
    g->seed = 7;
    for (int step = 0; step < 3; step++) {
        g->step = (uint64_t)step;
        mpt_graph_zero_grad(g);
        mpt_graph_forward(g);
        mpt_graph_backward(g);
    }
    g->training = 0;
    mpt_graph_forward(g);
    ck_assert_int_eq(alloc_calls, 0);
    ck_assert_uint_eq(be->mem_peak_total, peak);
    ck_assert_uint_eq(be->workspace_bytes, ws);
    ck_assert(memcmp(cur, be->mem_current, sizeof cur) == 0);
    ck_assert(isfinite(*(float *)g->loss->data));
    be->alloc = real_alloc;
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

/* ---- precision map ---------------------------------------------------------------------------------- */

/* The line of node `name` in the map text (a copy, caller frees), or NULL. */
static char *map_line(const char *text, const char *name) {
    const char *p = text;
    while (p && *p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char first[64] = "";
        sscanf(p, "%63s", first);
        if (strcmp(first, name) == 0) {
            char *l = malloc(len + 1);
            memcpy(l, p, len);
            l[len] = 0;
            return l;
        }
        p = e ? e + 1 : NULL;
    }
    return NULL;
}

/* Splits a map line into its whitespace-separated fields: name op in weight out math bytes. */
static int map_fields(const char *line, char f[7][32]) {
    return sscanf(line, "%31s %31s %31s %31s %31s %31s %31s", f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
}

START_TEST(test_precision_map) {
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_graph *g = build_small_cnn(be, MPT_PRECISION_FP16, 2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert(f != NULL);
    mpt_graph_print_precision_map(g, f);
    fclose(f);
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    /* the table (a header line, a column line, one line per node), then the reasons: a title and one line per op
     * kind other than the input (conv2d, relu, maxpool2d, dropout, flatten, linear, softmax_xent) */
    EXPECT(lines == 2 + g->n_nodes + 1 + 7, "%d lines for %d nodes:\n%s", lines, g->n_nodes, text);
    EXPECT(strstr(text, mpt_policy_op_reason(MPT_OP_SOFTMAX_XENT)) != NULL &&
               strstr(text, mpt_policy_op_reason(MPT_OP_CONV2D)) != NULL,
           "the map does not give the policy's reasons:\n%s", text);
    ck_assert(strstr(text, "fp16") != NULL);
    EXPECT(strstr(text, "CPU kernels emulate") != NULL, "the header does not name the kernel set:\n%s", text);
    /* expected: name, op, in, weight, out, math */
    const char *want[][6] = {
        {"input", "input", "-", "-", "f16", "-"},
        {"conv1", "conv2d", "f16", "f16", "f16", "fp16"},
        {"relu1", "relu", "f16", "-", "f16", "-"},
        {"pool1", "maxpool2d", "f16", "-", "f16", "-"},
        {"drop1", "dropout", "f16", "-", "f16", "-"},
        {"flatten", "flatten", "f16", "-", "f16", "-"},
        {"fc1", "linear", "f16", "f16", "f16", "fp16"},
        {"loss", "softmax_xent", "f16", "-", "f32", "fp32"},
    };
    ck_assert_int_eq(g->n_nodes, 8);
    for (int i = 0; i < 8; i++) {
        char *l = map_line(text, want[i][0]);
        EXPECT(l != NULL, "no line for node %s in:\n%s", want[i][0], text);
        char fl[7][32];
        ck_assert_int_eq(map_fields(l, fl), 7);
        for (int k = 1; k < 6; k++)
            EXPECT(strcmp(fl[k], want[i][k]) == 0, "node %s field %d: '%s', expected '%s' (line: %s)",
                          want[i][0], k, fl[k], want[i][k], l);
        free(l);
    }
    /* activation bytes: conv1 out [2,4,12,12] F16; pool1 out [2,4,6,6] F16 + argmax I32 */
    char *l = map_line(text, "conv1");
    char fl[7][32];
    map_fields(l, fl);
    ck_assert_str_eq(fl[6], "2304");
    /* the kernels column: how the backend runs the convolution (the last field) */
    EXPECT(strstr(l, mpt_backend_kernels_of(be, 1, MPT_MATH_F16)) != NULL && strstr(l, "emulate:") != NULL,
           "conv1 does not say how it runs: %s", l);
    free(l);
    l = map_line(text, "pool1");
    map_fields(l, fl);
    ck_assert_str_eq(fl[6], "1728");
    free(l);
    free(text);
    mpt_graph_free(&g);

    /* tf32 mode: FP32 storage, tf32 math for conv and linear */
    g = build_small_cnn(be, MPT_PRECISION_TF32, 2);
    f = open_memstream(&text, &len);
    mpt_graph_print_precision_map(g, f);
    fclose(f);
    l = map_line(text, "fc1");
    map_fields(l, fl);
    ck_assert_str_eq(fl[2], "f32");
    ck_assert_str_eq(fl[5], "tf32");
    free(l);
    free(text);
    mpt_graph_free(&g);
    mpt_backend_free(&be);
}
END_TEST

static Suite *graph_suite(void) {
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("graph");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_arenas);
    tcase_add_test(tc, test_views_share);
    tcase_add_test(tc, test_zero_grad);
    tcase_add_test(tc, test_replay_order);
    tcase_add_test(tc, test_mlp_backward_accumulates);
    tcase_add_test(tc, test_fusion_taken);
    tcase_add_test(tc, test_tensor_read_twice);
    tcase_add_test(tc, test_twin_unfused);
    tcase_add_test(tc, test_no_alloc_in_step);
    tcase_add_test(tc, test_precision_map);
    suite_add_tcase(s, tc);
    /* 3 models x 4 precisions, forward and backward twice each: the longest test here; under the sanitizers on a
     * machine busy with other builds it took over 30 s (CI's sanitizer step, 2026-11-26) */
    TCase *to = tcase_create("grad_overwrite");
    tcase_set_timeout(to, 180);
    tcase_add_test(to, test_grad_overwrite_bit_identical);
    suite_add_tcase(s, to);
    return s;
}

int main(void) { return mpt_test_run(graph_suite()); }
