/*
 * engine/layers/linear.c - fully connected layer, forward and backward.
 *
 * Shapes: x [B, in], W [out, in] (PyTorch's layout), b [out], y [B, out].
 * Forward:   y = x W^T + b                    one GEMM (trans_b), bias epilogue, beta = 0
 * Backward:  dx += dy W                       [B, out] x [out, in], compute dtype, beta = 1 (only if x->grad)
 *            dW += dy^T x                     [out, B] x [B, in], FP32 output (decision 9), beta = 1
 *            db += sum_rows dy                FP32 (be->bias_grad)
 *            (beta = 0 / overwrite instead of += for a gradient's first write: mpt_graph_grad_accumulate; the
 *            build plans both forms, mpt_layer_reserve_grad_gemm, since which one a pass runs is decided then)
 * Fused epilogues (g->fuse_epilogues; engine/graph.h "Fused epilogues"):
 *  - db comes out of the dW GEMM's epilogue when db is first written (MPT_EPILOGUE_BGRAD: cuBLASLt
 *    CUBLASLT_EPILOGUE_BGRADB), one call instead of two.
 *  - a relu R reading only y: the forward GEMM writes R's output r = relu(x W^T + b) (MPT_EPILOGUE_RELU_BIAS) and
 *    y is not written; when a linear layer C is the only reader of r, the GEMM also writes the ReLU bitmask
 *    (MPT_EPILOGUE_RELU_AUX_BIAS; saved[0] of this node).
 *  - as C after such an L -> R: on a pass where L's dy and db are first writes, C's data-gradient GEMM writes
 *    L's dy = (dr W_C) * mask and L's db = sum_rows L's dy (MPT_EPILOGUE_DRELU_BGRAD) instead of dr; R's backward
 *    and L's db pass do nothing, and L's dW GEMM runs without BGRAD.
 *  Telemetry (mpt_graph_fill_fused) rewrites y and dr with the unfused GEMMs on the steps it measures.
 * GEMM operands are in the node's compute dtype and math mode (policy: linear runs in the mode's
 * low-precision format; TF32 in tf32 mode); products and sums are FP32 (engine/backend.h).
 * PyTorch: torch.nn.Linear(in, out); init U(-1/sqrt(in), 1/sqrt(in)) for W and b (fan_in = in).
 * Operand copies (n->copy_x, copy_w, copy_dy; engine/graph.h): on a backend whose GEMMs convert their operands (the
 * CPU's emulated TF32/F16/BF16, which widens or rounds every operand into FP32 scratch), x, W and dy are each read by
 * two GEMMs of a step. The forward GEMM converts x and W into the node's copies, the data-gradient GEMM dy, and the
 * later GEMMs read the copies: three conversions a step instead of six, the same values, the same bits. The probes
 * and fill_fused do not use them (they run outside the pass's order, and convert for themselves).
 * Telemetry probes (16-bit y / dx only): the forward and data-gradient GEMMs again with an FP32 C, which is
 * what the epilogue held before rounding (same operands, math mode and epilogue; beta = 0 for dx, whose
 * accumulation starts from the zeroed gradient).
 * Post-training quantization (engine/quant.h, n->quant): in MPT_QUANT_INT8 mode the forward quantizes x to INT8 codes
 * at the calibrated scale and runs the exact integer GEMM y = fl(fl(sum_k qx qw) s_x s_w + b) (be->gemm_i8) with the
 * weight's codes; in MPT_QUANT_CALIBRATE it records x's amax and runs the float forward. Evaluation only.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/layers/layer_common.h"
#include "engine/quant.h"

/* ---- FP8 GEMMs (engine/amp/fp8.h) ----------------------------------------------------------------------------
 * A layer whose three GEMMs qualify (mpt_policy_fp8_linear) keeps FP8 copies of its operands in the TN layouts
 * (A [M, K], B [N, K], both K-contiguous):
 *   fprop  y[B, out]  = x8 [B, in]   . w8 [out, in]^T     x8: cast of x, w8: cast of W (forward formats)
 *   dgrad  dx[B, in]  = dy8[B, out]  . w8t[in, out]^T     dy8: cast of dy; w8t: W cast transposed
 *   wgrad  dW[out, in]= dy8t[out, B] . x8t[in, B]^T       the transposed casts of dy and x
 * Each cast records its tensor's amax; per-tensor scaling multiplies by the tensor's scale (delayed: from the amax
 * history; current: from its amax now), MXFP8 by a scale per 32 elements along the GEMM's K (q blocks along a row,
 * qt along a column of the source). W is cast from its BF16 working copy, as TransformerEngine casts a BF16 weight
 * (FP32 master -> BF16 -> FP8: two roundings). The bias gradient comes from the BF16 dy (as TE's dbias), never from
 * an FP8 operand, so the wgrad GEMM runs without the BGRAD epilogue. */

static void fp8_operand(mpt_graph *g, mpt_fp8_operand *op, const char *layer, const char *what, mpt_dtype fmt,
                        mpt_mem mem, int64_t rows, int64_t cols, int want_q, int want_qt, int mx) {
    char tn[MPT_NAME_LEN], suffix[32];
    op->fmt = fmt;
    op->meta = mpt_fp8_register(g, mpt_layer_tname(tn, layer, what), fmt); /* "fc1.x", "fc1.weight", "fc1.dy" */
    if (want_q) {
        const int64_t shape[2] = {rows, cols}, sshape[2] = {rows, mpt_mx_blocks(cols)};
        snprintf(suffix, sizeof suffix, "%s.fp8", what);
        op->q = mpt_graph_tensor(g, mpt_layer_tname(tn, layer, suffix), fmt, mem, 2, shape);
        if (mx) {
            snprintf(suffix, sizeof suffix, "%s.fp8_scales", what);
            op->q_scales = mpt_graph_tensor(g, mpt_layer_tname(tn, layer, suffix), MPT_DTYPE_E8M0, mem, 2, sshape);
        }
    }
    if (want_qt) {
        const int64_t shape[2] = {cols, rows}, sshape[2] = {cols, mpt_mx_blocks(rows)};
        snprintf(suffix, sizeof suffix, "%s.fp8t", what);
        op->qt = mpt_graph_tensor(g, mpt_layer_tname(tn, layer, suffix), fmt, mem, 2, shape);
        if (mx) {
            snprintf(suffix, sizeof suffix, "%s.fp8t_scales", what);
            op->qt_scales = mpt_graph_tensor(g, mpt_layer_tname(tn, layer, suffix), MPT_DTYPE_E8M0, mem, 2, sshape);
        }
    }
}

/* Sets up n's FP8 GEMMs: registers x, W and dy with the graph's FP8 state and adds their FP8 copies. */
static void linear_fp8_setup(mpt_graph *g, mpt_node *n, mpt_math math, const mpt_dtype fmt[3]) {
    const mpt_tensor *x = n->in[0], *w = n->in[1];
    const int64_t B = x->shape[0], in = x->shape[1], out = w->shape[0];
    const int mx = math == MPT_MATH_MXFP8, dgrad = x->grad != NULL;
    n->fp8 = 1;
    n->math = math;
    fp8_operand(g, &n->fp8_x, n->name, "x", fmt[0], MPT_MEM_ACT, B, in, 1, 1, mx);
    fp8_operand(g, &n->fp8_w, n->name, "weight", fmt[1], MPT_MEM_WEIGHT, out, in, 1, dgrad, mx);
    fp8_operand(g, &n->fp8_dy, n->name, "dy", fmt[2], MPT_MEM_ACT_GRAD, B, out, dgrad, 1, mx);
}

/* The scales an FP8 GEMM operand contributes: its tensor's 1/s, or its block scales (q or qt). */
static void fp8_gemm_operand(const mpt_graph *g, const mpt_fp8_operand *op, int transposed, const void **data,
                             mpt_dtype *dtype, const float **scale_inv, const uint8_t **block_scales) {
    const mpt_tensor *q = transposed ? op->qt : op->q, *s = transposed ? op->qt_scales : op->q_scales;
    *data = q ? q->data : NULL;
    *dtype = op->fmt;
    *scale_inv = g->fp8_meta ? &g->fp8_meta[op->meta].scale_inv : NULL;
    *block_scales = s ? s->data : NULL;
}

/* Casts source tensor src ([rows, cols], BF16) into op's FP8 copies: q and, when with_qt, qt. */
static void fp8_cast(mpt_graph *g, const mpt_fp8_operand *op, const mpt_tensor *src, int with_qt, const char *tag) {
    const mpt_fp8_recipe *r = &g->policy.fp8;
    const mpt_fp8_meta *m = &g->fp8_meta[op->meta];
    mpt_fp8_cast_args a;
    memset(&a, 0, sizeof a);
    a.x = src->data;
    a.x_dtype = src->dtype;
    a.rows = src->shape[0];
    a.cols = mpt_tensor_numel(src) / src->shape[0];
    a.fmt = op->fmt;
    a.q = op->q ? op->q->data : NULL;
    a.qt = with_qt && op->qt ? op->qt->data : NULL;
    a.saturate = r->saturate;
    a.meta = (mpt_fp8_meta *)m;
    a.current = r->scaling == MPT_FP8_SCALING_CURRENT;
    a.scaled_max = ldexpf(op->fmt == MPT_DTYPE_E5M2 ? MPT_E5M2_MAX : MPT_E4M3_MAX, -r->margin);
    a.pow2 = r->pow2_scales;
    a.mx = mpt_policy_fp8_mx(&g->policy);
    a.mx_rounding = r->mx_rounding;
    a.q_scales = op->q_scales ? op->q_scales->data : NULL;
    a.qt_scales = a.qt && op->qt_scales ? op->qt_scales->data : NULL;
    a.found_inf = g->training ? g->found_inf : NULL;
    a.tag = tag;
    g->be->fp8_cast(g->be, &a);
}

/* The FP8 fields of one of n's GEMMs: A from op_a (transposed copy or not), B likewise. */
static void fp8_gemm_fields(const mpt_graph *g, const mpt_node *n, mpt_gemm_args *a, const mpt_fp8_operand *op_a,
                            int ta, const mpt_fp8_operand *op_b, int tb) {
    const mpt_fp8_recipe *r = &g->policy.fp8;
    a->trans_a = 0;
    a->trans_b = 1;
    fp8_gemm_operand(g, op_a, ta, &a->A, &a->a_dtype, &a->a_scale_inv, &a->a_block_scales);
    fp8_gemm_operand(g, op_b, tb, &a->B, &a->b_dtype, &a->b_scale_inv, &a->b_block_scales);
    a->math = n->math;
    a->fp8_accum = n->math == MPT_MATH_FP8 ? r->accum : MPT_FP8_ACCUM_FP32;
    a->fp8_promote = n->math == MPT_MATH_FP8 && r->accum == MPT_FP8_ACCUM_FAST ? r->promote : 0;
}

/* The three GEMMs of the layer, with NULL data pointers when called at build time (workspace queries). */
static mpt_gemm_args linear_fwd_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out;
    mpt_gemm_args a = {0};
    a.trans_a = 0; a.trans_b = 1;
    a.M = x->shape[0]; a.N = w->shape[0]; a.K = w->shape[1];
    a.A = x->data; a.a_dtype = x->dtype;        /* [B, in] */
    a.B = w->data; a.b_dtype = w->dtype;        /* [out, in], read transposed */
    a.C = y->data; a.c_dtype = y->dtype;        /* [B, out] */
    a.bias = b->data; a.bias_dtype = b->dtype;  /* [out] */
    a.alpha = 1.0f; a.beta = 0.0f;
    a.math = n->math;
    a.epilogue = MPT_EPILOGUE_BIAS;
    a.tag = tag;
    if (n->fp8) fp8_gemm_fields(g, n, &a, &n->fp8_x, 0, &n->fp8_w, 0); /* x8 [B, in], w8 [out, in] */
    return a;
}

static mpt_gemm_args linear_dgrad_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *y = n->out;
    mpt_gemm_args a = {0};
    a.trans_a = 0; a.trans_b = 0;
    a.M = x->shape[0]; a.N = w->shape[1]; a.K = w->shape[0];
    a.A = y->grad->data; a.a_dtype = y->grad->dtype;  /* dy [B, out] */
    a.B = w->data; a.b_dtype = w->dtype;              /* W [out, in] */
    a.C = x->grad->data; a.c_dtype = x->grad->dtype;  /* dx [B, in], += */
    a.alpha = 1.0f; a.beta = 1.0f;
    a.math = n->math;
    a.epilogue = MPT_EPILOGUE_NONE;
    a.tag = tag;
    if (n->fp8) fp8_gemm_fields(g, n, &a, &n->fp8_dy, 0, &n->fp8_w, 1); /* dy8 [B, out], w8t [in, out] */
    return a;
}

static mpt_gemm_args linear_wgrad_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *y = n->out;
    mpt_gemm_args a = {0};
    a.trans_a = 1; a.trans_b = 0;
    a.M = w->shape[0]; a.N = w->shape[1]; a.K = x->shape[0];
    a.A = y->grad->data; a.a_dtype = y->grad->dtype;  /* dy [B, out], read transposed */
    a.B = x->data; a.b_dtype = x->dtype;              /* x [B, in] */
    a.C = w->grad->data; a.c_dtype = w->grad->dtype;  /* dW [out, in] FP32, += */
    a.alpha = 1.0f; a.beta = 1.0f;
    a.math = n->math;
    a.epilogue = MPT_EPILOGUE_NONE;
    a.beside = 1; /* dW (and db with BGRAD) are read after the backward pass only: mpt_graph_backward joins */
    a.tag = tag;
    if (n->fp8) fp8_gemm_fields(g, n, &a, &n->fp8_dy, 1, &n->fp8_x, 1); /* dy8t [out, B], x8t [in, B] */
    return a;
}

/* The forward GEMM with the relu after it fused in: writes the relu's output (and the mask) instead of y. */
static mpt_gemm_args linear_fused_fwd_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    mpt_gemm_args a = linear_fwd_args(g, n, tag);
    const mpt_tensor *r = n->fused_relu->out, *aux = n->saved[0];
    a.C = r->data;
    a.c_dtype = r->dtype;
    a.epilogue = aux ? MPT_EPILOGUE_RELU_AUX_BIAS : MPT_EPILOGUE_RELU_BIAS;
    a.aux = aux ? aux->data : NULL;
    return a;
}

/* The data-gradient GEMM of n (= C) with the relu before it and its linear layer L fused in: writes L's output
 * gradient through L's mask, and L's bias gradient. */
static mpt_gemm_args linear_fused_dgrad_args(const mpt_graph *g, const mpt_node *n, const char *tag) {
    const mpt_node *l = n->fused_prev;
    mpt_gemm_args a = linear_dgrad_args(g, n, tag);
    a.C = l->out->grad->data;
    a.c_dtype = l->out->grad->dtype;
    a.beta = 0.0f;
    a.epilogue = MPT_EPILOGUE_DRELU_BGRAD;
    a.aux = l->saved[0]->data;
    a.bias_grad = l->in[2]->grad->data;
    return a;
}

/* The pass's operand copies (n->copy_*; NULL fields where n has none): the forward GEMM writes x's and W's, the
 * data-gradient GEMM writes dy's and reads W's, the weight-gradient GEMM reads dy's and x's. */
static float *copy_data(const mpt_tensor *t) { return t ? (float *)t->data : NULL; }

static void use_copies_fwd(const mpt_node *n, mpt_gemm_args *a) {
    a->a_copy = copy_data(n->copy_x);
    a->a_copy_write = 1;
    a->b_copy = copy_data(n->copy_w);
    a->b_copy_write = 1;
}

static void use_copies_dgrad(const mpt_node *n, mpt_gemm_args *a) {
    a->a_copy = copy_data(n->copy_dy);
    a->a_copy_write = 1;
    a->b_copy = copy_data(n->copy_w);
    a->b_copy_write = 0;
}

static void use_copies_wgrad(const mpt_node *n, mpt_gemm_args *a) {
    a->a_copy = copy_data(n->copy_dy); /* exists only with a data gradient, whose GEMM ran first */
    a->a_copy_write = 0;
    a->b_copy = copy_data(n->copy_x);
    a->b_copy_write = 0;
}

/* Adds n's operand copies when the backend's GEMMs of n's math convert operands: x's always (forward and weight
 * gradient), W's and dy's with a data gradient (each then read by two GEMMs). */
static void linear_copies_setup(mpt_graph *g, mpt_node *n) {
    if (n->fp8 || !g->be->gemm_copies || !g->be->gemm_copies(g->be, n->math)) return;
    const mpt_tensor *x = n->in[0], *w = n->in[1], *y = n->out;
    char tn[MPT_NAME_LEN];
    n->copy_x = mpt_graph_tensor(g, mpt_layer_tname(tn, n->name, "x.gemm_f32"), MPT_DTYPE_F32, MPT_MEM_WORKSPACE,
                                 x->ndim, x->shape);
    if (!x->grad) return;
    n->copy_w = mpt_graph_tensor(g, mpt_layer_tname(tn, n->name, "weight.gemm_f32"), MPT_DTYPE_F32,
                                 MPT_MEM_WORKSPACE, w->ndim, w->shape);
    n->copy_dy = mpt_graph_tensor(g, mpt_layer_tname(tn, n->name, "dy.gemm_f32"), MPT_DTYPE_F32, MPT_MEM_WORKSPACE,
                                  y->ndim, y->shape);
}

/* Whether this pass runs with the relu after n fused into n's forward GEMM. */
static int relu_fused(const mpt_graph *g, const mpt_node *n) { return g->fuse_epilogues && n->fused_relu; }

/* Post-training quantization's integer forward: x -> INT8 codes (s_x), the exact integer GEMM with the weight's codes
 * into the node's int32 sums, rescaled with the bias into y. */
static void linear_forward_int8(mpt_graph *g, mpt_node *n) {
    const mpt_node_quant *q = n->quant;
    const mpt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out;
    mpt_quantize_args qa = {.x = x->data, .x_dtype = x->dtype, .n = mpt_tensor_numel(x), .scale = q->x_scale->data,
                            .q = q->qx->data, .qmax = MPT_INT8_QMAX, .tag = n->name};
    g->be->quantize(g->be, &qa);
    mpt_gemm_i8_args a = {.M = x->shape[0], .N = w->shape[0], .K = w->shape[1], .A = q->qx->data, .B = q->qw->data,
                          .acc = q->acc->data, .C = y->data, .c_dtype = y->dtype, .a_scale = q->x_scale->data,
                          .b_scales = q->w_scales->data, .b_per_tensor = !q->per_channel, .bias = b->data,
                          .bias_dtype = b->dtype, .tag = n->name};
    g->be->gemm_i8(g->be, &a);
}

static void linear_forward(mpt_graph *g, mpt_node *n) {
    char tag[MPT_NAME_LEN + 8];
    if (n->quant && n->quant->mode == MPT_QUANT_INT8) {
        linear_forward_int8(g, n);
        return;
    }
    if (n->quant && n->quant->mode == MPT_QUANT_CALIBRATE) mpt_quant_observe(g, n);
    if (n->fp8) { /* the backward GEMMs' transposed copies only when a backward pass follows */
        snprintf(tag, sizeof tag, "%s.x", n->name);
        fp8_cast(g, &n->fp8_x, n->in[0], g->training, tag);
        snprintf(tag, sizeof tag, "%s.weight", n->name);
        fp8_cast(g, &n->fp8_w, n->in[1], g->training, tag);
    }
    snprintf(tag, sizeof tag, "%s.fwd", n->name);
    mpt_gemm_args a = relu_fused(g, n) ? linear_fused_fwd_args(g, n, tag) : linear_fwd_args(g, n, tag);
    use_copies_fwd(n, &a);
    g->be->gemm(g->be, &a);
}

/* n's data gradient: fused with the relu before n and its linear layer L when both of L's gradients it would
 * write are first writes (the epilogue overwrites them), else the plain GEMM into dx. */
static void linear_backward_data(mpt_graph *g, mpt_node *n, char *tag, size_t tag_len) {
    const mpt_tensor *x = n->in[0];
    mpt_node *l = n->fused_prev;
    snprintf(tag, tag_len, "%s.dgrad", n->name);
    if (l && relu_fused(g, l) && mpt_graph_grad_first_write(g, l->out->grad) &&
        mpt_graph_grad_first_write(g, l->in[2]->grad)) {
        mpt_graph_grad_accumulate(g, l->out->grad); /* marks both written */
        mpt_graph_grad_accumulate(g, l->in[2]->grad);
        mpt_gemm_args a = linear_fused_dgrad_args(g, n, tag);
        use_copies_dgrad(n, &a);
        g->be->gemm(g->be, &a);
        l->fused_relu->bwd_done = 1;
        return;
    }
    mpt_gemm_args a = linear_dgrad_args(g, n, tag);
    a.beta = mpt_graph_grad_accumulate(g, x->grad) ? 1.0f : 0.0f;
    use_copies_dgrad(n, &a);
    g->be->gemm(g->be, &a);
}

static void linear_backward(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out;
    char tag[MPT_NAME_LEN + 8];
    if (n->fp8) {
        snprintf(tag, sizeof tag, "%s.dy", n->name);
        fp8_cast(g, &n->fp8_dy, y->grad, 1, tag);
    }
    if (x->grad) linear_backward_data(g, n, tag, sizeof tag);
    snprintf(tag, sizeof tag, "%s.wgrad", n->name);
    mpt_gemm_args a = linear_wgrad_args(g, n, tag);
    a.beta = mpt_graph_grad_accumulate(g, w->grad) ? 1.0f : 0.0f;
    use_copies_wgrad(n, &a);
    if (n->fused_relu && n->fused_relu->bwd_done) { /* db was written by the next layer's data-gradient epilogue */
        g->be->gemm(g->be, &a);
        return;
    }
    const int accumulate_b = mpt_graph_grad_accumulate(g, b->grad);
    if (g->fuse_epilogues && !accumulate_b && !n->fp8) { /* the epilogue writes db, it cannot add to it */
        a.epilogue = MPT_EPILOGUE_BGRAD;
        a.bias_grad = b->grad->data;
        g->be->gemm(g->be, &a);
        return;
    }
    g->be->gemm(g->be, &a);
    g->be->bias_grad(g->be, b->grad->data, y->grad->data, y->grad->dtype, y->shape[0], y->shape[1], accumulate_b);
}

static int is_16bit(mpt_dtype t) { return t == MPT_DTYPE_F16 || t == MPT_DTYPE_BF16; }

static void linear_probe_forward(mpt_graph *g, mpt_node *n, float *dst, float *scratch) {
    (void)scratch;
    mpt_gemm_args a = linear_fwd_args(g, n, "probe.fwd");
    a.C = dst;
    a.c_dtype = MPT_DTYPE_F32;
    g->be->gemm(g->be, &a);
}

static void linear_probe_backward(mpt_graph *g, mpt_node *n, float *dst, float *scratch) {
    (void)scratch;
    mpt_gemm_args a = linear_dgrad_args(g, n, "probe.dgrad");
    a.C = dst;
    a.c_dtype = MPT_DTYPE_F32;
    a.beta = 0.0f;
    g->be->gemm(g->be, &a);
}

/* mpt_graph_fill_fused: y (not written by a fused forward) by the unfused forward GEMM, and the relu's output
 * gradient (not written by a fused backward) by C's unfused data-gradient GEMM, a first write (beta 0). */
static void linear_fill_fused(mpt_graph *g, mpt_node *n) {
    if (!relu_fused(g, n)) return;
    char tag[MPT_NAME_LEN + 16];
    snprintf(tag, sizeof tag, "%s.fwd.fill", n->name);
    mpt_gemm_args a = linear_fwd_args(g, n, tag);
    g->be->gemm(g->be, &a);
    if (!n->fused_relu->bwd_done) return;
    snprintf(tag, sizeof tag, "%s.dgrad.fill", n->fused_next->name);
    a = linear_dgrad_args(g, n->fused_next, tag);
    a.beta = 0.0f;
    g->be->gemm(g->be, &a);
}

/* plan_fusion (engine/graph.h): fuses the relu R that alone reads y into the forward GEMM, and R's backward into
 * the data-gradient GEMM of the linear layer C that alone reads R's output; reserves the fused GEMMs' workspace. */
static void linear_plan_fusion(mpt_graph *g, mpt_node *n) {
    mpt_node *r = mpt_graph_sole_reader(g, n->out);
    if (!r || r->op != MPT_OP_RELU || r->in[0] != n->out || r->out->dtype != n->out->dtype || !r->out->grad) return;
    n->fused_relu = r;
    r->fused_prev = n;
    mpt_node *c = mpt_graph_sole_reader(g, r->out);
    if (c && c->op == MPT_OP_LINEAR && c->in[0] == r->out && !c->fused_prev) {
        char tn[MPT_NAME_LEN];
        int64_t shape[2] = {n->out->shape[0], (int64_t)mpt_relu_aux_bytes(1, n->out->shape[1])};
        n->saved[0] = mpt_graph_tensor(g, mpt_layer_tname(tn, n->name, "relu_mask"), MPT_DTYPE_U8, MPT_MEM_ACT, 2,
                                       shape);
        n->fused_next = c;
        c->fused_prev = n;
        mpt_gemm_args a = linear_fused_dgrad_args(g, c, c->name);
        mpt_layer_reserve(g, c->name, g->be->gemm_workspace(g->be, &a));
    }
    mpt_gemm_args a = linear_fused_fwd_args(g, n, n->name);
    mpt_layer_reserve(g, n->name, g->be->gemm_workspace(g->be, &a));
}

/* Sets the probes for the passes that round into a 16-bit tensor, with their workspace needs. */
static void linear_set_probes(mpt_graph *g, mpt_node *n) {
    const mpt_tensor *x = n->in[0], *y = n->out;
    mpt_gemm_args a;
    if (is_16bit(y->dtype)) {
        n->probe_forward = linear_probe_forward;
        a = linear_fwd_args(g, n, "probe");
        a.c_dtype = MPT_DTYPE_F32;
        size_t ws = g->be->gemm_workspace(g->be, &a);
        if (ws > n->probe_workspace) n->probe_workspace = ws;
    }
    if (x->grad && is_16bit(x->grad->dtype)) {
        n->probe_backward = linear_probe_backward;
        a = linear_dgrad_args(g, n, "probe");
        a.c_dtype = MPT_DTYPE_F32;
        a.beta = 0.0f;
        size_t ws = g->be->gemm_workspace(g->be, &a);
        if (ws > n->probe_workspace) n->probe_workspace = ws;
    }
}

mpt_tensor *mpt_linear(mpt_graph *g, mpt_tensor *x, int out_features, const char *name) {
    MPT_ASSERTF(x->ndim == 2, "linear %s: input %s must be 2-D [B, in], has %d dims (use mpt_flatten)", name,
                x->name, x->ndim);
    MPT_ASSERTF(out_features > 0, "linear %s: out_features = %d", name, out_features);
    mpt_node *n = mpt_graph_node(g, MPT_OP_LINEAR, name);
    mpt_op_precision pr = mpt_layer_policy(g, n, x->dtype);
    mpt_layer_check_input_dtype(g, n, x);

    int64_t rows = x->shape[0], in = x->shape[1];
    char tn[MPT_NAME_LEN];
    int64_t wshape[2] = {out_features, in}, bshape[1] = {out_features}, yshape[2] = {rows, out_features};
    mpt_tensor *w = mpt_graph_param(g, mpt_layer_tname(tn, name, "weight"), pr.compute_dtype, 2, wshape, (int)in);
    mpt_tensor *b = mpt_graph_param(g, mpt_layer_tname(tn, name, "bias"), pr.compute_dtype, 1, bshape, (int)in);
    mpt_tensor *y = mpt_graph_tensor(g, mpt_layer_tname(tn, name, "out"), pr.compute_dtype, MPT_MEM_ACT, 2, yshape);
    mpt_graph_grad(g, y); /* the layer has parameters: a gradient always flows into y */

    n->in[0] = x; n->in[1] = w; n->in[2] = b;
    n->out = y;
    n->forward = linear_forward;
    n->backward = linear_backward;
    n->plan_fusion = linear_plan_fusion;
    n->fill_fused = linear_fill_fused;
    mpt_math fp8_math;
    mpt_dtype fp8_fmt[3];
    if (mpt_policy_fp8_linear(&g->policy, rows, in, out_features, &fp8_math, fp8_fmt)) {
        MPT_ASSERTF(g->be->fp8_cast != NULL, "linear %s: the %s backend has no FP8 casts", name, g->be->name);
        linear_fp8_setup(g, n, fp8_math, fp8_fmt);
    }
    linear_copies_setup(g, n);

    /* every GEMM a step may run, in every form: the gradient GEMMs accumulate or overwrite as the pass decides */
    mpt_gemm_args a = linear_fwd_args(g, n, name);
    mpt_layer_reserve(g, name, g->be->gemm_workspace(g->be, &a));
    if (x->grad) mpt_layer_reserve_grad_gemm(g, name, linear_dgrad_args(g, n, name));
    a = linear_wgrad_args(g, n, name);
    mpt_layer_reserve_grad_gemm(g, name, a);
    if (!n->fp8) { /* the fused variant (g->fuse_epilogues may change before a step); FP8 wgrad never fuses it */
        a.epilogue = MPT_EPILOGUE_BGRAD;
        mpt_layer_reserve_grad_gemm(g, name, a);
    }
    linear_set_probes(g, n);
    return y;
}
