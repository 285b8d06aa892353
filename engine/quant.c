/* engine/quant.c - quantization of a graph's weights and activations (engine/quant.h). */
#include "engine/quant.h"

#include <stdlib.h>
#include <string.h>

#include "engine/numerics.h"

static const char *const qat_names[] = {[MPT_QAT_NONE] = "none", [MPT_QAT_INT8] = "int8", [MPT_QAT_INT4] = "int4"};
_Static_assert(sizeof qat_names / sizeof qat_names[0] == MPT_QAT_COUNT, "one name per mpt_qat");

const char *mpt_qat_name(mpt_qat q) { return (unsigned)q < MPT_QAT_COUNT ? qat_names[q] : "?"; }

int mpt_qat_parse(const char *s, mpt_qat *out) {
    for (int i = 0; i < MPT_QAT_COUNT; i++)
        if (strcmp(s, qat_names[i]) == 0) {
            *out = (mpt_qat)i;
            return 0;
        }
    return -1;
}

mpt_qformat mpt_qat_format(mpt_qat q) { return q == MPT_QAT_INT4 ? MPT_QFORMAT_INT4 : MPT_QFORMAT_INT8; }

mpt_node *mpt_quant_weight_node(const mpt_graph *g, const mpt_tensor *w) {
    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node *n = g->nodes[i];
        if ((n->op == MPT_OP_LINEAR || n->op == MPT_OP_CONV2D) && n->in[1] == w) return n;
    }
    return NULL;
}

int64_t mpt_quant_channels(const mpt_tensor *w) { return w->ndim > 0 ? w->shape[0] : 1; }

void mpt_quant_fake_weight(mpt_graph *g, const float *master, mpt_tensor *w, mpt_qformat fmt, int per_channel,
                           int8_t *q, float *scales) {
    MPT_ASSERTF(master != w->data, "mpt_quant_fake_weight %s: the master values must not be the weight's own", w->name);
    const int64_t n = mpt_tensor_numel(w), rows = per_channel ? mpt_quant_channels(w) : 1;
    mpt_fake_quant_args a = {.x = master, .rows = rows, .cols = rows ? n / rows : 0, .fmt = fmt, .y = w->data,
                             .y_dtype = w->dtype, .q = q, .scales = scales, .tag = w->name};
    g->be->fake_quant(g->be, &a);
}

/* ---- post-training quantization with INT8 activations ---------------------------------------------------------- */

static int quantizable(const mpt_node *n) { return n->op == MPT_OP_LINEAR || n->op == MPT_OP_CONV2D; }

void mpt_quant_prepare(mpt_graph *g, int per_channel) {
    MPT_ASSERTF(!g->allocated, "mpt_quant_prepare: the graph is allocated already");
    g->fuse_epilogues = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node *n = g->nodes[i];
        if (!quantizable(n) || n->quant) continue;
        mpt_node_quant *q = calloc(1, sizeof *q);
        MPT_ASSERT(q != NULL);
        const mpt_tensor *x = n->in[0], *w = n->in[1], *y = n->out;
        char name[MPT_NAME_LEN + 16];
        const int64_t one[1] = {1}, ch[1] = {per_channel ? mpt_quant_channels(w) : 1};
        snprintf(name, sizeof name, "%s.x.i8", n->name);
        q->qx = mpt_graph_tensor(g, name, MPT_DTYPE_I8, MPT_MEM_ACT, x->ndim, x->shape);
        snprintf(name, sizeof name, "%s.weight.i8", n->name);
        q->qw = mpt_graph_tensor(g, name, MPT_DTYPE_I8, MPT_MEM_WEIGHT, w->ndim, w->shape);
        snprintf(name, sizeof name, "%s.weight.scales", n->name);
        q->w_scales = mpt_graph_tensor(g, name, MPT_DTYPE_F32, MPT_MEM_WEIGHT, 1, ch);
        snprintf(name, sizeof name, "%s.x.amax", n->name);
        q->x_amax = mpt_graph_tensor(g, name, MPT_DTYPE_F32, MPT_MEM_ACT, 1, one);
        snprintf(name, sizeof name, "%s.x.scale", n->name);
        q->x_scale = mpt_graph_tensor(g, name, MPT_DTYPE_F32, MPT_MEM_ACT, 1, one);
        if (n->op == MPT_OP_LINEAR) {
            snprintf(name, sizeof name, "%s.acc.i32", n->name);
            q->acc = mpt_graph_tensor(g, name, MPT_DTYPE_I32, MPT_MEM_ACT, y->ndim, y->shape);
        } else {
            mpt_status s = mpt_backend_reserve_workspace(g->be, mpt_conv_i8_workspace(&n->attr.conv));
            MPT_ASSERTF(s == MPT_OK, "%s: cannot reserve the integer convolution's workspace: %s", n->name,
                        mpt_last_error());
        }
        q->per_channel = per_channel;
        n->quant = q;
    }
}

void mpt_quant_set_mode(mpt_graph *g, mpt_quant_mode m) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->quant) g->nodes[i]->quant->mode = m;
}

void mpt_quant_calibration_begin(mpt_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->quant) g->be->memset_zero(g->be, g->nodes[i]->quant->x_amax->data, sizeof(float));
}

void mpt_quant_calibration_end(mpt_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node_quant *q = g->nodes[i]->quant;
        if (!q) continue;
        float amax, s;
        g->be->to_host(g->be, &amax, q->x_amax->data, sizeof amax);
        s = mpt_int_scale_from_amax(amax, MPT_INT8_QMAX);
        g->be->from_host(g->be, q->x_scale->data, &s, sizeof s);
    }
    g->be->synchronize(g->be);
}

void mpt_quant_observe(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *x = n->in[0];
    mpt_quantize_args a = {.x = x->data, .x_dtype = x->dtype, .n = mpt_tensor_numel(x),
                           .amax = n->quant->x_amax->data, .tag = n->name};
    g->be->quantize(g->be, &a);
}
