/*
 * engine/optim/optim.h - the FP32 optimizers: SGD (momentum, dampening, nesterov, weight decay), Adam (L2
 * weight decay) and AdamW (decoupled weight decay), applied to FP32 master weights with FP32 state (by
 * default; the switches below store weights or state in 16 bits, the math stays FP32).
 *
 * The update itself runs in the backend (be->optim_step_multi, one fused pass over all parameters, or
 * be->optim_step for one parameter: engine/backend.h),
 * element by element through engine/numerics.h (mpt_elem_sgd, mpt_elem_adam), on both CPU and CUDA. This
 * header holds the host-side pieces (names, defaults, checks, state counts) and the formulas.
 *
 * Notation: p master weight, g gradient after unscaling, c = *grad_mul (clip coefficient, 1 without
 * clipping), t = 1-based step (steps_taken, incremented by step_begin before the updates; skipped steps
 * do not count), lr this step's learning rate (after the schedule).
 *
 * SGD, as torch.optim.SGD (https://pytorch.org/docs/stable/generated/torch.optim.SGD.html):
 *   d = c*g + weight_decay * p
 *   if momentum != 0:
 *       b = d                                        if t == 1   (buffer initialised to the gradient)
 *       b = momentum * b + (1 - dampening) * d       otherwise
 *       d = d + momentum * b   if nesterov,   else   d = b
 *   p = p - lr * d
 *
 * Adam, as torch.optim.Adam without amsgrad (https://pytorch.org/docs/stable/generated/torch.optim.Adam.html;
 * Kingma & Ba 2015, arXiv 1412.6980), in PyTorch's non-fused formulation:
 *   d = c*g + weight_decay * p                       (L2 penalty added to the gradient)
 *   m = beta1 * m + (1 - beta1) * d                  (exp_avg)
 *   v = beta2 * v + (1 - beta2) * d^2                (exp_avg_sq)
 *   bias_correction1 = 1 - beta1^t,  bias_correction2 = 1 - beta2^t         (FP64, like Python floats)
 *   denom = sqrt(v) / sqrt(bias_correction2) + eps
 *   p = p - (lr / bias_correction1) * m / denom
 *
 * AdamW, as torch.optim.AdamW (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html;
 * Loshchilov & Hutter 2019, arXiv 1711.05101): decoupled weight decay, applied first:
 *   p = p * (1 - lr * weight_decay);   then Adam's update with d = c*g (no L2 term).
 *
 * A step with found_inf != 0 changes nothing: masters, m, v and the working copy stay bit-identical (PyTorch's
 * GradScaler.step skips optimizer.step). When a working copy exists (fp16/bf16 modes) it is rewritten from the
 * updated master with round-to-nearest-even in the same pass.
 *
 * The safeguards can be switched off to show what they prevent (issue #10; mpt_optim_args in engine/backend.h):
 * without FP32 masters the formulas run on the widened 16-bit weight and the new value is rounded once into
 * the weight's dtype (RNE, or stochastic rounding); with 16-bit state, m and v (or the momentum buffer) are
 * widened, updated as above in FP32 (the weight update uses these FP32 values) and rounded to nearest on store;
 * with found_inf = NULL (--nonfinite apply) no step is skipped.
 *
 * Precision: every hyper-parameter is an FP32 value; per-step scalars (lr / bias_correction1,
 * sqrt(bias_correction2), 1 - lr*weight_decay) are computed in FP64 and rounded once, as PyTorch does when
 * its Python-float scalars meet an FP32 tensor. Given FP32-representable hyper-parameters the results match
 * PyTorch's CPU implementation to within a few FP32 roundings (tests/test_optim.c,
 * tests/reference/optim_reference.py).
 */
#ifndef MPT_ENGINE_OPTIM_OPTIM_H
#define MPT_ENGINE_OPTIM_OPTIM_H

#include "engine/api.h"
#include "engine/backend.h"
#include "engine/status.h"

/* "sgd", "adam", "adamw". */
MPT_API const char *mpt_optim_kind_name(mpt_optim_kind k);
/* Parses "sgd", "adam" or "adamw" into *out; 0 on success, -1 for an unknown name (*out unchanged). */
MPT_API int mpt_optim_kind_parse(const char *s, mpt_optim_kind *out);

/* PyTorch's defaults for a kind:
 *   SGD:   lr 1e-3, momentum 0, dampening 0, weight_decay 0, nesterov off
 *   Adam:  lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0
 *   AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2
 * Fields a kind does not use are zero, except that beta1/beta2/eps are filled for every kind. */
MPT_API mpt_optim_hparams mpt_optim_hparams_default(mpt_optim_kind k);

/* Checks user-supplied hyper-parameters as PyTorch's constructors do: lr >= 0, weight_decay >= 0,
 * momentum >= 0, dampening in [0, 1], nesterov only with momentum > 0 and dampening 0, beta1 and beta2 in
 * [0, 1), eps >= 0, all finite. Returns MPT_OK or MPT_ERR_ARG with a message naming the hyper-parameter, the
 * expected range and the value found. */
MPT_API mpt_status mpt_optim_hparams_check(const mpt_optim_hparams *h);

/* Number of state tensors per parameter (FP32, or --optimizer-state's dtype), each the parameter's shape: SGD without momentum 0, SGD with
 * momentum 1 (momentum buffer, in mpt_optim_args.m), Adam/AdamW 2 (exp_avg in .m, exp_avg_sq in .v). */
MPT_API int mpt_optim_n_state(const mpt_optim_hparams *h);

/* Names of the state tensors, for checkpoints and reports: index 0 -> "momentum_buffer" (SGD) or "exp_avg",
 * index 1 -> "exp_avg_sq" (PyTorch's optimizer state keys); NULL past mpt_optim_n_state(). */
MPT_API const char *mpt_optim_state_name(const mpt_optim_hparams *h, int index);

#endif
