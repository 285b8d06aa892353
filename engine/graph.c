/* engine/graph.c - graph building, arena allocation, forward/backward replay, precision map. */
#include "engine/graph.h"

#include <stdlib.h>
#include <string.h>

#define MPT_ARENA_ALIGN 256

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n);
    MPT_ASSERTF(q != NULL, "out of host memory (%zu bytes) while building the graph", n);
    return q;
}

mpt_graph *mpt_graph_create(mpt_backend *be, const mpt_policy *policy, int batch) {
    MPT_ASSERT(be != NULL && policy != NULL && batch > 0);
    mpt_graph *g = calloc(1, sizeof *g);
    MPT_ASSERT(g != NULL);
    g->be = be;
    g->policy = *policy;
    g->batch = batch;
    g->batch_row0 = 0;
    g->batch_global = batch;
    for (int m = 0; m < MPT_MEM_COUNT; m++) g->grad_epoch[m] = 1;
    const char *fuse = getenv("MPT_FUSED_EPILOGUES");
    g->fuse_epilogues = !(fuse && strcmp(fuse, "0") == 0);
    return g;
}

void mpt_graph_set_shard(mpt_graph *g, int row0, int global) {
    MPT_ASSERTF(row0 >= 0 && global >= g->batch && row0 <= global - g->batch,
                "mpt_graph_set_shard: rows [%d, %d) are not inside a global batch of %d", row0, row0 + g->batch,
                global);
    g->batch_row0 = row0;
    g->batch_global = global;
}

uint64_t mpt_graph_dropout_stride(const mpt_graph *g) {
    return g->dropout_elems / (uint64_t)g->batch * (uint64_t)g->batch_global;
}

void mpt_graph_free(mpt_graph **pg) {
    mpt_graph *g = *pg;
    if (!g) return;
    for (int m = 0; m < MPT_MEM_COUNT; m++)
        if (g->arena[m]) {
            g->be->free(g->be, g->arena[m]);
            mpt_backend_account(g->be, g->twin ? MPT_MEM_TWIN : (mpt_mem)m, -(int64_t)g->arena_bytes[m]);
        }
    for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i]);
    for (int i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i]->quant); /* engine/quant.h's state, when mpt_quant_prepare made one */
        free(g->nodes[i]);
    }
    free(g->tensors);
    free(g->nodes);
    free(g->params);
    free(g->buffers);
    free(g->fp8);
    free(g);
    *pg = NULL;
}

mpt_tensor *mpt_graph_tensor(mpt_graph *g, const char *name, mpt_dtype dtype, mpt_mem mem, int ndim,
                             const int64_t *shape) {
    MPT_ASSERTF(!g->allocated, "tensor %s added after mpt_graph_alloc", name);
    if (g->n_tensors == g->cap_tensors) {
        g->cap_tensors = g->cap_tensors ? 2 * g->cap_tensors : 64;
        g->tensors = xrealloc(g->tensors, (size_t)g->cap_tensors * sizeof *g->tensors);
    }
    mpt_tensor *t = calloc(1, sizeof *t);
    MPT_ASSERT(t != NULL);
    mpt_tensor_set(t, name, dtype, g->be->device, mem, ndim, shape);
    g->tensors[g->n_tensors++] = t;
    return t;
}

mpt_tensor *mpt_graph_grad(mpt_graph *g, mpt_tensor *t) {
    if (t->grad) return t->grad;
    char name[MPT_NAME_LEN + 8];
    snprintf(name, sizeof name, "%s.grad", t->name);
    int is_param = t->mem == MPT_MEM_WEIGHT || t->mem == MPT_MEM_MASTER;
    if (t->view_of) {
        /* a view's gradient is a view of its source's gradient */
        mpt_tensor *src_grad = mpt_graph_grad(g, t->view_of);
        mpt_tensor *gv = mpt_graph_tensor(g, name, src_grad->dtype, src_grad->mem, t->ndim, t->shape);
        gv->view_of = src_grad;
        t->grad = gv;
        return gv;
    }
    t->grad = mpt_graph_tensor(g, name, is_param ? MPT_DTYPE_F32 : t->dtype,
                               is_param ? MPT_MEM_GRAD : MPT_MEM_ACT_GRAD, t->ndim, t->shape);
    return t->grad;
}

mpt_tensor *mpt_graph_param(mpt_graph *g, const char *name, mpt_dtype dtype, int ndim, const int64_t *shape,
                            int fan_in) {
    mpt_tensor *w = mpt_graph_tensor(g, name, dtype, MPT_MEM_WEIGHT, ndim, shape);
    mpt_graph_grad(g, w);
    if (g->n_params == g->cap_params) {
        g->cap_params = g->cap_params ? 2 * g->cap_params : 16;
        g->params = xrealloc(g->params, (size_t)g->cap_params * sizeof *g->params);
    }
    g->params[g->n_params].weight = w;
    g->params[g->n_params].fan_in = fan_in;
    g->params[g->n_params].init = MPT_INIT_UNIFORM_FAN_IN;
    g->params[g->n_params].value = 0.0f;
    g->n_params++;
    return w;
}

mpt_tensor *mpt_graph_param_const(mpt_graph *g, const char *name, mpt_dtype dtype, int ndim, const int64_t *shape,
                                  float value) {
    mpt_tensor *w = mpt_graph_param(g, name, dtype, ndim, shape, 1);
    g->params[g->n_params - 1].init = MPT_INIT_CONST;
    g->params[g->n_params - 1].value = value;
    return w;
}

mpt_tensor *mpt_graph_buffer(mpt_graph *g, const char *name, int ndim, const int64_t *shape, float init) {
    mpt_tensor *t = mpt_graph_tensor(g, name, MPT_DTYPE_F32, MPT_MEM_WEIGHT, ndim, shape);
    if (g->n_buffers == g->cap_buffers) {
        g->cap_buffers = g->cap_buffers ? 2 * g->cap_buffers : 8;
        g->buffers = xrealloc(g->buffers, (size_t)g->cap_buffers * sizeof *g->buffers);
    }
    g->buffers[g->n_buffers].t = t;
    g->buffers[g->n_buffers].init = init;
    g->n_buffers++;
    return t;
}

void mpt_graph_reset_buffers(mpt_graph *g) {
    MPT_ASSERT(g->allocated);
    for (int i = 0; i < g->n_buffers; i++) {
        mpt_tensor *t = g->buffers[i].t;
        const int64_t n = mpt_tensor_numel(t);
        float *h = malloc((size_t)n * sizeof *h);
        MPT_ASSERT(h != NULL);
        for (int64_t k = 0; k < n; k++) h[k] = g->buffers[i].init;
        g->be->from_host(g->be, t->data, h, (size_t)n * sizeof *h);
        g->be->synchronize(g->be); /* h is freed next */
        free(h);
    }
}

mpt_tensor *mpt_graph_view(mpt_graph *g, mpt_tensor *src, const char *name, int ndim, const int64_t *shape) {
    mpt_tensor *v = mpt_graph_tensor(g, name, src->dtype, src->mem, ndim, shape);
    MPT_ASSERTF(mpt_tensor_numel(v) == mpt_tensor_numel(src), "view %s: %lld elements, source %s has %lld",
                name, (long long)mpt_tensor_numel(v), src->name, (long long)mpt_tensor_numel(src));
    while (src->view_of) src = src->view_of;
    v->view_of = src;
    if (src->grad) mpt_graph_grad(g, v);
    return v;
}

mpt_node *mpt_graph_node(mpt_graph *g, mpt_op op, const char *name) {
    MPT_ASSERTF(!g->allocated, "node %s added after mpt_graph_alloc", name);
    if (g->n_nodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 32;
        g->nodes = xrealloc(g->nodes, (size_t)g->cap_nodes * sizeof *g->nodes);
    }
    mpt_node *n = calloc(1, sizeof *n);
    MPT_ASSERT(n != NULL);
    n->op = op;
    snprintf(n->name, sizeof n->name, "%s", name);
    n->compute_dtype = MPT_DTYPE_F32;
    n->math = MPT_MATH_FP32;
    g->nodes[g->n_nodes++] = n;
    return n;
}

static size_t align_up(size_t n) { return (n + MPT_ARENA_ALIGN - 1) / MPT_ARENA_ALIGN * MPT_ARENA_ALIGN; }

size_t mpt_graph_bytes(const mpt_graph *g, mpt_mem mem) {
    if (g->allocated) return g->arena_bytes[mem];
    size_t total = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const mpt_tensor *t = g->tensors[i];
        if (t->mem == mem && !t->view_of) total += align_up(mpt_tensor_nbytes(t));
    }
    return total;
}

mpt_node *mpt_graph_sole_reader(const mpt_graph *g, const mpt_tensor *t) {
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->view_of == t) return NULL;
    mpt_node *reader = NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node *n = g->nodes[i];
        for (int k = 0; k < MPT_NODE_MAX_IN; k++) {
            if (n->in[k] != t) continue;
            if (reader) return NULL;
            reader = n;
        }
    }
    return reader;
}

/* Lets each layer decide its epilogue fusions (engine/graph.h), now that every node exists. */
static void plan_fusions(mpt_graph *g) {
    if (!g->fuse_epilogues || g->twin) return;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->plan_fusion) g->nodes[i]->plan_fusion(g, g->nodes[i]);
}

void mpt_graph_fill_fused(mpt_graph *g) {
    MPT_ASSERT(g->allocated);
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->fill_fused) g->nodes[i]->fill_fused(g, g->nodes[i]);
}

/* FP8 state (engine/amp/fp8.h): before the arenas are sized, the state tensors of the registered FP8 operands
 * (MPT_MEM_OPTIM); after, the pointers and the initial state (scale 1, scale_inv 1, amax 0, histories 0). */
static void fp8_state_plan(mpt_graph *g) {
    if (g->n_fp8 == 0 || g->fp8_meta_t) return;
    int64_t ms[1] = {(int64_t)((size_t)g->n_fp8 * sizeof(mpt_fp8_meta))};
    g->fp8_meta_t = mpt_graph_tensor(g, "amp.fp8_state", MPT_DTYPE_U8, MPT_MEM_OPTIM, 1, ms);
    int64_t hs[2] = {g->n_fp8, mpt_fp8_history_len(g)};
    g->fp8_hist_t = mpt_graph_tensor(g, "amp.fp8_amax_history", MPT_DTYPE_F32, MPT_MEM_OPTIM, 2, hs);
}

static mpt_status fp8_state_init(mpt_graph *g) {
    if (g->n_fp8 == 0) return MPT_OK;
    g->fp8_meta = (mpt_fp8_meta *)g->fp8_meta_t->data;
    g->fp8_history = (float *)g->fp8_hist_t->data; /* zero-filled with its arena */
    mpt_fp8_meta *h = calloc((size_t)g->n_fp8, sizeof *h);
    if (!h) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the initial FP8 state of %d tensors", g->n_fp8);
    for (int i = 0; i < g->n_fp8; i++) {
        const int e5 = g->fp8[i].fmt == MPT_DTYPE_E5M2;
        h[i].scale = 1.0f;
        h[i].scale_inv = 1.0f;
        h[i].fmax = e5 ? MPT_E5M2_MAX : MPT_E4M3_MAX;
        h[i].e5m2 = e5;
    }
    g->be->from_host(g->be, g->fp8_meta, h, (size_t)g->n_fp8 * sizeof *h);
    g->be->synchronize(g->be); /* h is freed next */
    free(h);
    return MPT_OK;
}

mpt_status mpt_graph_alloc(mpt_graph *g) {
    MPT_ASSERT(!g->allocated);
    mpt_backend *be = g->be;
    plan_fusions(g);
    fp8_state_plan(g);
    for (int m = 0; m < MPT_MEM_COUNT; m++) {
        size_t bytes = mpt_graph_bytes(g, (mpt_mem)m);
        if (bytes == 0) continue;
        g->arena[m] = be->alloc(be, bytes);
        if (!g->arena[m])
            return mpt_errorf(MPT_ERR_NOMEM, "%s backend: cannot allocate %zu bytes for the %s arena", be->name,
                              bytes, mpt_mem_name((mpt_mem)m));
        g->arena_bytes[m] = bytes;
        mpt_backend_account(be, g->twin ? MPT_MEM_TWIN : (mpt_mem)m, (int64_t)bytes);
        be->memset_zero(be, g->arena[m], bytes);
    }
    size_t off[MPT_MEM_COUNT] = {0};
    for (int i = 0; i < g->n_tensors; i++) {
        mpt_tensor *t = g->tensors[i];
        if (t->view_of) continue;
        t->data = (char *)g->arena[t->mem] + off[t->mem];
        off[t->mem] += align_up(mpt_tensor_nbytes(t));
    }
    for (int i = 0; i < g->n_tensors; i++) {
        mpt_tensor *t = g->tensors[i];
        if (t->view_of) t->data = t->view_of->data;
    }
    g->allocated = 1;
    mpt_graph_reset_buffers(g);
    return fp8_state_init(g);
}

/* Discards the gradients of one arena: zeroes it, or with grad_overwrite marks its tensors unwritten (a new
 * epoch: grad_epoch in engine/graph.h). */
static void discard_grads(mpt_graph *g, mpt_mem mem) {
    if (!g->arena[mem]) return;
    if (!g->grad_overwrite) {
        g->be->memset_zero(g->be, g->arena[mem], g->arena_bytes[mem]);
        return;
    }
    g->grad_epoch[mem]++;
}

static mpt_tensor *storage_of(mpt_tensor *t) {
    while (t->view_of) t = t->view_of;
    return t;
}

/* Whether storage tensor s was written since its arena was last discarded. */
static int grad_written(const mpt_graph *g, const mpt_tensor *s) { return s->grad_epoch == g->grad_epoch[s->mem]; }

static void mark_written(const mpt_graph *g, mpt_tensor *s) { s->grad_epoch = g->grad_epoch[s->mem]; }

int mpt_graph_grad_accumulate(mpt_graph *g, mpt_tensor *t) {
    if (!g->grad_overwrite) return 1;
    mpt_tensor *s = storage_of(t);
    int written = grad_written(g, s);
    mark_written(g, s);
    return written;
}

int mpt_graph_grad_first_write(const mpt_graph *g, const mpt_tensor *t) {
    if (!g->grad_overwrite) return 0;
    while (t->view_of) t = t->view_of;
    return !grad_written(g, t);
}

/* With grad_overwrite: zeroes gradient t if nothing wrote it since it was discarded (it is about to be read). */
static void zero_if_unwritten(mpt_graph *g, mpt_tensor *t) {
    if (!g->grad_overwrite || !t) return;
    mpt_tensor *s = storage_of(t);
    if (grad_written(g, s)) return;
    g->be->memset_zero(g->be, s->data, mpt_tensor_nbytes(s));
    mark_written(g, s);
}

void mpt_graph_forward(mpt_graph *g) {
    MPT_ASSERT(g->allocated);
    discard_grads(g, MPT_MEM_ACT_GRAD); /* activation gradients belong to one forward/backward pass */
    for (int i = 0; i < g->n_nodes; i++) {
        mpt_node *n = g->nodes[i];
        n->bwd_done = 0;
        if (n->forward) n->forward(g, n);
    }
}

void mpt_graph_zero_grad(mpt_graph *g) {
    MPT_ASSERT(g->allocated);
    discard_grads(g, MPT_MEM_GRAD);
}

void mpt_graph_backward(mpt_graph *g) {
    MPT_ASSERT(g->allocated);
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        mpt_node *n = g->nodes[i];
        if (!n->backward || n->bwd_done) continue; /* bwd_done: run by another node's epilogue */
        if (n->out) zero_if_unwritten(g, n->out->grad); /* an output no later node consumed */
        n->backward(g, n);
    }
    for (int i = 0; i < g->n_params; i++) zero_if_unwritten(g, g->params[i].weight->grad);
    if (g->be->join) g->be->join(g->be); /* the weight gradients run beside the data gradients (linear.c) */
}

mpt_tensor *mpt_graph_find(const mpt_graph *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i]->name, name) == 0) return g->tensors[i];
    return NULL;
}

void mpt_graph_fp8_gemm_text(const mpt_graph *g, const mpt_node *n, int which, char *buf, size_t len) {
    const mpt_fp8_operand *a = which == 0 ? &n->fp8_x : &n->fp8_dy, *b = which == 2 ? &n->fp8_x : &n->fp8_w;
    const mpt_tensor *c = which == 0 ? n->out : which == 1 ? n->in[0]->grad : n->in[1]->grad;
    const char *scales = n->math == MPT_MATH_MXFP8 ? "block scales" : "tensor scales";
    if (!n->fp8 || (which == 1 && !n->in[0]->grad)) {
        snprintf(buf, len, "-");
        return;
    }
    (void)g;
    snprintf(buf, len, "%s x %s%s, %s -> %s", mpt_dtype_name(a->fmt), mpt_dtype_name(b->fmt),
             which == 0 ? "" : which == 1 ? " (W transposed copy)" : " (dy, x transposed copies)", scales,
             mpt_dtype_name(c->dtype));
}

void mpt_graph_print_fp8_gemms(const mpt_graph *g, FILE *f) {
    if (!mpt_policy_is_fp8(&g->policy)) return;
    const mpt_fp8_recipe *r = &g->policy.fp8;
    if (mpt_policy_fp8_mx(&g->policy))
        fprintf(f, "FP8 GEMMs (E8M0 scale per 32 elements along K, --mx-scale %s%s; FP32 accumulation):\n",
                mpt_mx_rounding_name(r->mx_rounding), r->saturate ? "" : ", casts not saturating");
    else {
        char hist[48] = "", prom[64] = "";
        if (r->scaling == MPT_FP8_SCALING_DELAYED) snprintf(hist, sizeof hist, " over %d steps of amax", (int)r->amax_history);
        if (r->accum == MPT_FP8_ACCUM_FAST && r->promote)
            snprintf(prom, sizeof prom, ", promoted into FP32 every %d of K", (int)r->promote);
        fprintf(f, "FP8 GEMMs (%s scaling%s, margin %d%s%s; accumulator %s%s):\n", mpt_fp8_scaling_name(r->scaling),
                hist, (int)r->margin, r->pow2_scales ? ", power-of-two scales" : "",
                r->saturate ? "" : ", casts not saturating", mpt_fp8_accum_name(r->accum), prom);
    }
    int any = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_node *n = g->nodes[i];
        if (n->op != MPT_OP_LINEAR) continue;
        if (!n->fp8) {
            fprintf(f, "  %-5s BF16: batch %lld, in %lld, out %lld are not all multiples of 16\n", n->name,
                    (long long)n->in[0]->shape[0], (long long)n->in[0]->shape[1], (long long)n->in[1]->shape[0]);
            continue;
        }
        any = 1;
        static const char *what[3] = {"fprop", "dgrad", "wgrad"};
        for (int k = 0; k < 3; k++) {
            char t[128];
            mpt_graph_fp8_gemm_text(g, n, k, t, sizeof t);
            fprintf(f, "  %-5s %s %s\n", k == 0 ? n->name : "", what[k], t);
        }
    }
    if (!any)
        fprintf(f, "  no GEMM of this model qualifies: the run is a bf16 run (convolutions run in BF16 in every FP8 "
                   "mode)\n");
}

void mpt_graph_print_precision_map(const mpt_graph *g, FILE *f) {
    fprintf(f, "precision map (mode %s%s", mpt_precision_name(g->policy.mode),
            g->policy.tf32_override ? ", TF32 disabled by NVIDIA_TF32_OVERRIDE=0" : "");
    if (g->be->device == MPT_DEVICE_CPU) /* the kernel set and the engine, as the kernels column says per node */
        fprintf(f, "; CPU kernels %s", mpt_cpu_kernels_name(mpt_backend_cpu_kernels(g->be)));
    const mpt_accum_model am = mpt_backend_cpu_accum(g->be);
    if (am != MPT_ACCUM_MODEL_IEEE) /* the kernels column says emulate:<model> where it sums */
        fprintf(f, "; TF32/FP16/BF16 products summed as %s Tensor Cores do (--accum-model %s)",
                mpt_accum_model_gpus(am), mpt_accum_model_name(am));
    if (g->policy.norm_stats != MPT_NORM_STATS_FP32) /* an ablation of the normalisations' statistics */
        fprintf(f, "; batchnorm and layernorm statistics in %s (--norm-stats %s)",
                mpt_norm_stats_info(g->policy.norm_stats)->summary, mpt_norm_stats_name(g->policy.norm_stats));
    fprintf(f, "):\n");
    fprintf(f, "  %-12s %-13s %-6s %-6s %-6s %-6s %12s  %s\n", "node", "op", "in", "weight", "out", "math",
            "act bytes", "kernels");
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_node *n = g->nodes[i];
        const char *in = n->in[0] ? mpt_dtype_name(n->in[0]->dtype) : "-";
        const char *w = n->in[1] ? mpt_dtype_name(n->in[1]->dtype) : "-";
        const char *out = n->out ? mpt_dtype_name(n->out->dtype) : "-";
        size_t bytes = n->out && !n->out->view_of ? mpt_tensor_nbytes(n->out) : 0;
        for (int s = 0; s < MPT_NODE_MAX_SAVED; s++)
            if (n->saved[s]) bytes += mpt_tensor_nbytes(n->saved[s]);
        int gemm_like = n->op == MPT_OP_LINEAR || n->op == MPT_OP_CONV2D;
        fprintf(f, "  %-12s %-13s %-6s %-6s %-6s %-6s %12zu  %s\n", n->name, mpt_op_name(n->op), in, w, out,
                gemm_like ? mpt_math_name(n->math) : (mpt_policy_op_fp32_math(n->op) ? "fp32" : "-"), bytes,
                gemm_like ? mpt_backend_kernels_of(g->be, n->op == MPT_OP_CONV2D, n->math) : "-");
    }
    int seen[MPT_OP_COUNT] = {0};
    fprintf(f, "why each op runs in its precision (engine/amp/policy.c):\n");
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_op op = g->nodes[i]->op;
        if (op == MPT_OP_INPUT || seen[op]++) continue;
        fprintf(f, "  %-13s %s\n", mpt_op_name(op), mpt_policy_op_reason(op));
    }
    mpt_graph_print_fp8_gemms(g, f);
    int qat = 0;
    for (int i = 0; i < g->n_nodes; i++) qat = qat ? qat : g->nodes[i]->qat;
    if (qat) {
        const mpt_qformat_desc *q = mpt_qformat_info((mpt_qformat)(qat - 1));
        fprintf(f, "quantization-aware training: the forward pass reads these weights fake-quantized to %s per output "
                   "channel (s = amax / %d of each row of the FP32 master; straight-through gradient):",
                q->name, q->qmax);
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i]->qat) fprintf(f, " %s", g->nodes[i]->in[1]->name);
        fprintf(f, "\n");
    }
    int fused = 0;
    for (int i = 0; i < g->n_nodes; i++) fused += g->nodes[i]->fused_relu != NULL;
    if (!fused || !g->fuse_epilogues) return;
    fprintf(f, "fused epilogues (MPT_FUSED_EPILOGUES=0 turns them off):\n");
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_node *n = g->nodes[i], *r = n->fused_relu, *c = n->fused_next;
        if (!r) continue;
        if (c)
            fprintf(f, "  %s.fwd: RELU_AUX_BIAS (%s fused, %s.out not written); %s.dgrad: DRELU_BGRAD (%s backward "
                       "and %s bias gradient, on first writes)\n",
                    n->name, r->name, n->name, c->name, r->name, n->name);
        else fprintf(f, "  %s.fwd: RELU_BIAS (%s fused, %s.out not written)\n", n->name, r->name, n->name);
    }
}
