/* engine/quant.c - quantization of a graph's weights and activations (engine/quant.h). */
#include "engine/quant.h"

#include <string.h>

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

void mpt_quant_fake_weight(mpt_graph *g, const mpt_tensor *master, mpt_tensor *w, mpt_qformat fmt, int per_channel,
                           int8_t *q, float *scales) {
    MPT_ASSERTF(master->dtype == MPT_DTYPE_F32 && mpt_tensor_numel(master) == mpt_tensor_numel(w),
                "mpt_quant_fake_weight %s: the master must be FP32 with the weight's elements", w->name);
    const int64_t n = mpt_tensor_numel(w), rows = per_channel ? mpt_quant_channels(w) : 1;
    mpt_fake_quant_args a = {.x = master->data, .rows = rows, .cols = rows ? n / rows : 0, .fmt = fmt, .y = w->data,
                             .y_dtype = w->dtype, .q = q, .scales = scales, .tag = w->name};
    g->be->fake_quant(g->be, &a);
}
