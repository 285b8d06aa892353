/* engine/backend.c - backend-independent helpers: the contract's argument checks (engine/backend.h), memory
 * accounting and the workspace. */
#include "engine/backend.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The operand dtype of a math mode that is not FP8: its row's operand format held in its storage dtype (TF32 in F32). */
static mpt_dtype operand_dtype(mpt_math m) {
    switch (mpt_math_info(m)->operand) {
    case MPT_FORMAT_FP16: return MPT_DTYPE_F16;
    case MPT_FORMAT_BF16: return MPT_DTYPE_BF16;
    default: return MPT_DTYPE_F32;
    }
}

void mpt_gemm_args_check(const mpt_gemm_args *a, int running) {
    const char *tag = a->tag ? a->tag : "(untagged)";
    MPT_ASSERTF(a->M >= 0 && a->N >= 0 && a->K >= 0, "gemm %s: bad shape M=%lld N=%lld K=%lld", tag,
                (long long)a->M, (long long)a->N, (long long)a->K);
    MPT_ASSERTF(a->M <= INT32_MAX && a->N <= INT32_MAX && a->K <= INT32_MAX,
                "gemm %s: sizes exceed the BLAS integer range", tag);
    MPT_ASSERTF((unsigned)a->math < MPT_MATH_COUNT, "gemm %s: unknown math mode %d", tag, (int)a->math);
    MPT_ASSERTF(a->epilogue >= MPT_EPILOGUE_NONE && a->epilogue <= MPT_EPILOGUE_DRELU_BGRAD,
                "gemm %s: unknown epilogue %d", tag, (int)a->epilogue);
    MPT_ASSERTF(mpt_dtype_is_float(a->c_dtype), "gemm %s: C dtype %s is not F32, F16 or BF16", tag,
                mpt_dtype_name(a->c_dtype));
    const int fp8 = a->math == MPT_MATH_FP8 || a->math == MPT_MATH_MXFP8;
    const int empty = a->M == 0 || a->N == 0;
    if (fp8) {
        MPT_ASSERTF(mpt_dtype_is_fp8(a->a_dtype) && mpt_dtype_is_fp8(a->b_dtype),
                    "gemm %s: math %s needs E4M3 or E5M2 A and B, got A %s, B %s", tag, mpt_math_name(a->math),
                    mpt_dtype_name(a->a_dtype), mpt_dtype_name(a->b_dtype));
        MPT_ASSERTF(!a->trans_a && a->trans_b, "gemm %s: FP8 operands must be in the TN layout (trans_a 0, trans_b 1; "
                    "got %d, %d)", tag, a->trans_a, a->trans_b);
        MPT_ASSERTF(a->epilogue != MPT_EPILOGUE_BGRAD, "gemm %s: no BGRAD epilogue on FP8 operands", tag);
        if (running && a->math == MPT_MATH_FP8)
            MPT_ASSERTF(a->a_scale_inv && a->b_scale_inv, "gemm %s: FP8 needs both operands' scale_inv", tag);
        if (running && a->math == MPT_MATH_MXFP8 && !empty && a->K > 0)
            MPT_ASSERTF(a->a_block_scales && a->b_block_scales, "gemm %s: MXFP8 needs both operands' block scales",
                        tag);
        MPT_ASSERTF(a->math == MPT_MATH_FP8 || a->fp8_accum == MPT_FP8_ACCUM_FP32,
                    "gemm %s: MXFP8 accumulates in FP32 (no fast accumulator model)", tag);
        MPT_ASSERTF(a->fp8_promote >= 0 && a->fp8_promote % MPT_MX_BLOCK == 0,
                    "gemm %s: fp8_promote %d is not a multiple of %d", tag, (int)a->fp8_promote, MPT_MX_BLOCK);
    } else {
        const mpt_dtype op = operand_dtype(a->math);
        MPT_ASSERTF(a->a_dtype == op && a->b_dtype == op, "gemm %s: math %s needs %s A and B, got A %s, B %s", tag,
                    mpt_math_name(a->math), mpt_dtype_name(op), mpt_dtype_name(a->a_dtype),
                    mpt_dtype_name(a->b_dtype));
    }
    if (mpt_epilogue_adds_bias(a->epilogue)) {
        MPT_ASSERTF(mpt_dtype_is_float(a->bias_dtype), "gemm %s: the bias epilogue needs a float bias vector (%s)",
                    tag, mpt_dtype_name(a->bias_dtype));
        MPT_ASSERTF(a->bias != NULL || !running || empty, "gemm %s: bias epilogue without a bias pointer", tag);
    }
    if (a->epilogue == MPT_EPILOGUE_BGRAD) {
        MPT_ASSERTF(a->trans_a && a->alpha == 1.0f && a->c_dtype == MPT_DTYPE_F32,
                    "gemm %s: the BGRAD epilogue needs trans_a = 1, alpha = 1 and an F32 C (trans_a %d, alpha %g, "
                    "C %s)", tag, a->trans_a, (double)a->alpha, mpt_dtype_name(a->c_dtype));
        MPT_ASSERTF(a->bias_grad != NULL || !running || a->M == 0, "gemm %s: BGRAD epilogue without bias_grad", tag);
    }
    if (mpt_epilogue_uses_aux(a->epilogue) && running && !empty)
        MPT_ASSERTF(a->aux != NULL && ((uintptr_t)a->aux & 15) == 0,
                    "gemm %s: a ReLU-mask epilogue needs a 16-byte aligned aux (have %p)", tag, a->aux);
    if (a->epilogue == MPT_EPILOGUE_DRELU_BGRAD) {
        MPT_ASSERTF(a->beta == 0.0f, "gemm %s: the DRELU_BGRAD epilogue writes C, beta must be 0 (is %g)", tag,
                    (double)a->beta);
        MPT_ASSERTF(a->bias_grad != NULL || !running || a->N == 0, "gemm %s: DRELU_BGRAD epilogue without bias_grad",
                    tag);
    }
    if (running && !empty)
        MPT_ASSERTF(a->C != NULL && (a->K == 0 || (a->A != NULL && a->B != NULL)),
                    "gemm %s: NULL operand (A %p, B %p, C %p)", tag, a->A, a->B, a->C);
}

void mpt_pool_args_check(const mpt_pool_args *a, const char *op) {
    MPT_ASSERTF(mpt_dtype_is_float(a->dtype), "%s: dtype %s is not F32, F16 or BF16", op, mpt_dtype_name(a->dtype));
    MPT_ASSERTF(a->N >= 1 && a->C >= 1 && a->H >= 1 && a->W >= 1, "%s: bad input shape %dx%dx%dx%d", op, a->N, a->C,
                a->H, a->W);
    MPT_ASSERTF(a->kernel >= 1 && a->stride >= 1 && a->pad >= 0 && 2 * a->pad <= a->kernel,
                "%s: kernel %d, stride %d, pad %d (need pad <= kernel/2)", op, a->kernel, a->stride, a->pad);
    MPT_ASSERTF(a->P == (a->H + 2 * a->pad - a->kernel) / a->stride + 1 &&
                    a->Q == (a->W + 2 * a->pad - a->kernel) / a->stride + 1 && a->P >= 1 && a->Q >= 1,
                "%s: output %dx%d does not match input %dx%d, kernel %d, stride %d, pad %d", op, a->P, a->Q, a->H,
                a->W, a->kernel, a->stride, a->pad);
}

void mpt_avgpool_args_check(const mpt_avgpool_args *a, const char *op) {
    MPT_ASSERTF(mpt_dtype_is_float(a->dtype), "%s: dtype %s is not F32, F16 or BF16", op, mpt_dtype_name(a->dtype));
    MPT_ASSERTF(a->N >= 1 && a->C >= 1 && a->H >= 1 && a->W >= 1, "%s: bad input shape %dx%dx%dx%d", op, a->N, a->C,
                a->H, a->W);
    MPT_ASSERTF(a->kh >= 1 && a->kw >= 1 && a->kh <= a->H && a->kw <= a->W && a->sh >= 1 && a->sw >= 1,
                "%s: window %dx%d, strides %d, %d on a %dx%d input", op, a->kh, a->kw, a->sh, a->sw, a->H, a->W);
    MPT_ASSERTF(a->P == (a->H - a->kh) / a->sh + 1 && a->Q == (a->W - a->kw) / a->sw + 1,
                "%s: output %dx%d does not match input %dx%d, window %dx%d, strides %d, %d", op, a->P, a->Q, a->H,
                a->W, a->kh, a->kw, a->sh, a->sw);
}

void mpt_norm_args_check(const mpt_norm_args *a, const char *op, int backward) {
    MPT_ASSERTF(mpt_dtype_is_float(a->dtype), "%s: dtype %s is not F32, F16 or BF16", op, mpt_dtype_name(a->dtype));
    MPT_ASSERTF(a->N >= 1 && a->C >= 1 && a->S >= 1, "%s: N %lld, C %lld, S %lld (need >= 1)", op, (long long)a->N,
                (long long)a->C, (long long)a->S);
    MPT_ASSERTF(a->eps > 0.0f && a->eps < 1e30f && a->momentum >= 0.0f && a->momentum <= 1.0f,
                "%s: eps %g, momentum %g (need eps > 0, momentum in [0, 1])", op, (double)a->eps, (double)a->momentum);
    MPT_ASSERTF(a->x && a->gamma && a->mean && a->rstd, "%s: x, gamma and the saved statistics must be set", op);
    MPT_ASSERTF(mpt_dtype_is_float(a->stat_dtype) && (a->one_pass == 0 || a->one_pass == 1),
                "%s: statistics dtype %s, one_pass %d (need F32, F16 or BF16 and 0 or 1)", op,
                mpt_dtype_name(a->stat_dtype), a->one_pass);
    if (!backward) MPT_ASSERTF(a->y && a->beta, "%s: y and beta must be set", op);
    if (!backward && strncmp(op, "batchnorm", 9) == 0)
        MPT_ASSERTF(a->running_mean && a->running_var, "%s: the running statistics must be set", op);
    if (backward) /* (a layer norm's forward pass reads no gradient: it used to be asked for them here; dx is NULL
                   * when the input has no gradient) */
        MPT_ASSERTF(a->dy && a->dgamma && a->dbeta, "%s: dy, dgamma and dbeta must be set", op);
}

/* ---- quantization ---- */

void mpt_fake_quant_args_check(const mpt_fake_quant_args *a) {
    const char *tag = a->tag ? a->tag : "(untagged)";
    MPT_ASSERTF(a->rows >= 0 && a->cols >= 0, "fake_quant %s: bad shape %lld x %lld", tag, (long long)a->rows,
                (long long)a->cols);
    const mpt_qformat_desc *f = mpt_qformat_info(a->fmt);
    MPT_ASSERTF(f != NULL, "fake_quant %s: unknown quantization format %d", tag, (int)a->fmt);
    MPT_ASSERTF(a->q == NULL || f->is_int, "fake_quant %s: integer codes asked of %s", tag, f->name);
    if (a->y) MPT_ASSERTF(mpt_dtype_is_float(a->y_dtype), "fake_quant %s: y dtype %s is not F32, F16 or BF16", tag,
                          mpt_dtype_name(a->y_dtype));
    MPT_ASSERTF(a->x != NULL || a->rows * a->cols == 0, "fake_quant %s: no input", tag);
}

void mpt_quantize_args_check(const mpt_quantize_args *a) {
    const char *tag = a->tag ? a->tag : "(untagged)";
    MPT_ASSERTF(a->n >= 0 && (a->x != NULL || a->n == 0), "quantize %s: n %lld, x %p", tag, (long long)a->n, a->x);
    MPT_ASSERTF(mpt_dtype_is_float(a->x_dtype), "quantize %s: x dtype %s is not F32, F16 or BF16", tag,
                mpt_dtype_name(a->x_dtype));
    MPT_ASSERTF(a->q == NULL || (a->scale != NULL && (a->qmax == MPT_INT8_QMAX || a->qmax == MPT_INT4_QMAX)),
                "quantize %s: codes need a scale and qmax 127 or 7 (qmax %d)", tag, a->qmax);
}

void mpt_gemm_i8_args_check(const mpt_gemm_i8_args *a) {
    const char *tag = a->tag ? a->tag : "(untagged)";
    MPT_ASSERTF(a->M >= 0 && a->N >= 0 && a->K >= 0 && a->M <= INT32_MAX && a->N <= INT32_MAX,
                "gemm_i8 %s: bad shape M=%lld N=%lld K=%lld", tag, (long long)a->M, (long long)a->N, (long long)a->K);
    MPT_ASSERTF(a->K <= MPT_GEMM_I8_MAX_K, "gemm_i8 %s: K = %lld can overflow the int32 sum (at most %d)", tag,
                (long long)a->K, MPT_GEMM_I8_MAX_K);
    const int empty = a->M == 0 || a->N == 0;
    MPT_ASSERTF(empty || (a->acc != NULL && ((a->A && a->B) || a->K == 0)), "gemm_i8 %s: A, B and acc must be set",
                tag);
    if (a->C) {
        MPT_ASSERTF(mpt_dtype_is_float(a->c_dtype), "gemm_i8 %s: C dtype %s is not F32, F16 or BF16", tag,
                    mpt_dtype_name(a->c_dtype));
        MPT_ASSERTF(a->a_scale && a->b_scales, "gemm_i8 %s: the rescale needs a_scale and b_scales", tag);
        MPT_ASSERTF(!a->bias || mpt_dtype_is_float(a->bias_dtype), "gemm_i8 %s: bias dtype %s is not a float dtype",
                    tag, mpt_dtype_name(a->bias_dtype));
    }
}

void mpt_conv_i8_args_check(const mpt_conv_i8_args *a) {
    const char *tag = a->tag ? a->tag : "(untagged)";
    const mpt_conv_shape *s = &a->s;
    MPT_ASSERTF(s->N >= 0 && s->C > 0 && s->H > 0 && s->W > 0 && s->K > 0 && s->R > 0 && s->S > 0 && s->pad_h >= 0 &&
                    s->pad_w >= 0 && s->stride_h > 0 && s->stride_w > 0,
                "conv2d_forward_i8 %s: bad shape", tag);
    MPT_ASSERTF(s->P == (s->H + 2 * s->pad_h - s->R) / s->stride_h + 1 && s->Q == (s->W + 2 * s->pad_w - s->S) / s->stride_w + 1 &&
                    s->P > 0 && s->Q > 0,
                "conv2d_forward_i8 %s: output %dx%d does not follow from the input, kernel, stride and padding", tag,
                s->P, s->Q);
    MPT_ASSERTF((int64_t)s->C * s->R * s->S <= MPT_GEMM_I8_MAX_K,
                "conv2d_forward_i8 %s: C R S = %lld can overflow the int32 sum", tag, (long long)s->C * s->R * s->S);
    MPT_ASSERTF(s->N == 0 || (a->x && a->w && a->y && a->x_scale && a->w_scales),
                "conv2d_forward_i8 %s: x, w, y and the scales must be set", tag);
    MPT_ASSERTF(mpt_dtype_is_float(a->y_dtype), "conv2d_forward_i8 %s: y dtype %s is not F32, F16 or BF16", tag,
                mpt_dtype_name(a->y_dtype));
    MPT_ASSERTF(!a->bias || mpt_dtype_is_float(a->bias_dtype), "conv2d_forward_i8 %s: bias dtype %s", tag,
                mpt_dtype_name(a->bias_dtype));
}

void mpt_optim_args_check(const mpt_optim_args *a) {
    const mpt_optim_hparams *h = &a->h;
    MPT_ASSERTF(a->n >= 0 && a->grad != NULL && a->step != NULL,
                "optim_step: n %lld, grad %p, step %p (need n >= 0 and both set)", (long long)a->n,
                (const void *)a->grad, (const void *)a->step);
    MPT_ASSERTF(a->master != NULL || a->working != NULL, "optim_step: no weights (master and working both NULL)");
    switch (h->kind) {
    case MPT_OPTIM_SGD:
        MPT_ASSERTF(h->momentum == 0.0f || a->m != NULL, "optim_step: SGD with momentum needs a buffer");
        break;
    case MPT_OPTIM_ADAM:
    case MPT_OPTIM_ADAMW:
        MPT_ASSERTF(a->m != NULL && a->v != NULL, "optim_step: Adam/AdamW need exp_avg and exp_avg_sq");
        break;
    default: MPT_ASSERTF(0, "optim_step: unknown optimizer kind %d", (int)h->kind);
    }
    if (a->working)
        MPT_ASSERTF(mpt_dtype_is_float(a->working_dtype), "optim_step: working copy dtype %s is not a float dtype",
                    mpt_dtype_name(a->working_dtype));
    MPT_ASSERTF(mpt_dtype_is_float(a->state_dtype), "optim_step: state dtype %s is not a float dtype",
                mpt_dtype_name(a->state_dtype));
}

void mpt_update_pass_args_check(const mpt_update_pass_args *u) {
    const mpt_optim_multi_args *a = &u->optim;
    const mpt_scaler_state *st = u->st;
    MPT_ASSERTF(st != NULL && a->count >= 0 && a->numel >= 0 && (a->count == 0 || a->slots != NULL),
                "update_pass: st %p, %d slots at %p, %lld elements", (const void *)st, a->count,
                (const void *)a->slots, (long long)a->numel);
    MPT_ASSERTF(a->found_inf == &st->found_inf && a->step == &st->steps_taken && a->lr == &st->lr &&
                    a->iteration == &st->iteration && a->grad_mul == NULL,
                "update_pass: found_inf, step, lr and iteration must point into st, grad_mul must be NULL");
    MPT_ASSERTF(!u->scaler.apply_nonfinite, "update_pass: --nonfinite apply keeps the separate calls");
    MPT_ASSERTF((unsigned)a->h.kind <= (unsigned)MPT_OPTIM_ADAMW, "update_pass: unknown optimizer kind %d",
                (int)a->h.kind);
    MPT_ASSERTF(mpt_dtype_is_float(a->state_dtype), "update_pass: state dtype %s is not a float dtype",
                mpt_dtype_name(a->state_dtype));
}

void mpt_update_pass_as_calls(mpt_backend *be, const mpt_update_pass_args *u) {
    mpt_update_pass_args_check(u);
    be->unscale_check_multi(be, u->optim.slots, u->optim.count, u->optim.numel, u->st);
    be->step_begin(be, u->st);
    be->lr_update(be, u->st, &u->schedule);
    be->optim_step_multi(be, &u->optim);
    be->scaler_update(be, u->st, &u->scaler, u->dynamic);
}

void mpt_backend_account(mpt_backend *be, mpt_mem mem, int64_t delta_bytes) {
    be->mem_current[mem] = (size_t)((int64_t)be->mem_current[mem] + delta_bytes);
    if (be->mem_current[mem] > be->mem_peak[mem]) be->mem_peak[mem] = be->mem_current[mem];
    size_t total = 0;
    for (int m = 0; m < MPT_MEM_COUNT; m++) total += be->mem_current[m];
    if (total > be->mem_peak_total) be->mem_peak_total = total;
}

mpt_status mpt_backend_reserve_workspace(mpt_backend *be, size_t bytes) {
    if (bytes <= be->workspace_bytes) return MPT_OK;
    bytes = (bytes + 4095) & ~(size_t)4095;
    void *p = be->alloc(be, bytes);
    if (!p) return mpt_errorf(MPT_ERR_NOMEM, "%s backend: cannot allocate %zu bytes of workspace", be->name, bytes);
    if (be->workspace) {
        be->free(be, be->workspace);
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)be->workspace_bytes);
    }
    be->workspace = p;
    be->workspace_bytes = bytes;
    mpt_backend_account(be, MPT_MEM_WORKSPACE, (int64_t)bytes);
    return MPT_OK;
}

void mpt_backend_free(mpt_backend **pbe) {
    mpt_backend *be = *pbe;
    if (!be) return;
    if (be->workspace) {
        be->free(be, be->workspace);
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)be->workspace_bytes);
        be->workspace = NULL;
        be->workspace_bytes = 0;
    }
    be->destroy(be);
    *pbe = NULL;
}
