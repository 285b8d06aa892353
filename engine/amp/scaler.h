/*
 * engine/amp/scaler.h - the dynamic loss scaler: host-side API around the scaler state that lives in backend
 * memory (mpt_scaler_state, engine/backend.h) and is updated by the device without a host sync.
 *
 * Why: FP16 has 5 exponent bits; small activation gradients underflow to zero (FP16's smallest subnormal is
 * 2^-24). Multiplying the loss by S shifts every gradient of the backward pass up by S, and dividing the FP32
 * weight gradients by S ("unscale") before the optimizer step restores them (Micikevicius et al. 2018, Mixed
 * Precision Training, arXiv 1710.03740, section 3.2). S is chosen dynamically: as large as possible without
 * overflow.
 *
 * One step (engine/train.c calls the backend ops in this order):
 *   backward seeded with S -> unscale_check: g *= 1/S in FP32 and found_inf = any(!isfinite(g)) over every
 *   weight gradient (PyTorch GradScaler.unscale_ / torch._amp_foreach_non_finite_check_and_unscale_)
 *   -> [sum_squares, clip_coef] -> step_begin: steps_taken += 1 unless found_inf
 *   -> optim_step per parameter: skipped entirely (masters, state, working copies untouched) if found_inf
 *   -> scaler_update.
 *
 * scaler_update, dynamic scaling (torch.amp.GradScaler docs and torch._amp_update_scale_; hysteresis as
 * DeepSpeed's DynamicLossScaler "delayed_shift", deepspeed/runtime/fp16/loss_scaler.py update_scale, with
 * consecutive_hysteresis False, its default; floor and ceiling as Apex's amp LossScaler min/max_loss_scale):
 *   found_inf:  growth_tracker = 0;
 *               if hysteresis_left > 1: hysteresis_left -= 1 (the step is skipped at the same scale)
 *               else: S = S * backoff_factor, clamped to min_scale (floor_hits += 1 when the clamp applied);
 *                     hysteresis_left stays 1, so every further overflow backs off at once
 *               steps_skipped += 1
 *   clean step: growth_tracker += 1; when it reaches growth_interval:
 *                 S = min(S * growth_factor, max_scale) if S * growth_factor is finite (else S unchanged),
 *                 growth_tracker = 0, hysteresis_left = hysteresis (DeepSpeed refills it only when the scale grows)
 *   then:       inv_scale = 1/S; found_inf = 0, sumsq = 0, grad_mul = 1 for the next step.
 * With hysteresis = 1 (the default) every overflow backs off: exactly PyTorch's GradScaler. With hysteresis = h,
 * the first h - 1 overflows since the scale last grew (in a row or not) are skipped at the same scale; from the
 * h-th on, each overflow backs off until the scale grows again. Where this differs from DeepSpeed's
 * DynamicLossScaler: its growth counts "stable_interval = iterations since the last overflow - 1", so its first
 * growth after an overflow (or the start) comes after loss_scale_window + 1 clean steps, here after
 * growth_interval (later growths every window steps in both); and at min_loss_scale DeepSpeed raises an exception
 * on the next overflow ("Current loss scale already at minimum"), where this scaler stays at min_scale, counts the
 * step in floor_hits and warns (mpt_scaler_watch).
 * Static or no scaling (dynamic = 0): S never changes, but overflowing steps are still skipped and counted.
 * --nonfinite apply (apply_nonfinite, static or no scaling only): engine/train.c runs step_begin before
 * unscale_check, so every iteration is a taken step (as torch.optim's step() without a GradScaler, whose
 * step count advances whatever the gradients hold); an overflowing one also counts in steps_nonfinite, never
 * in steps_skipped. In both modes steps_taken + steps_skipped == iteration, the invariant the checkpoint
 * reader checks, and steps_nonfinite <= steps_taken.
 *
 * The floor and the warning: in PyTorch a diverging run drives S towards 0 silently (every step skipped,
 * scale halving each time). Here S never goes below min_scale; each backoff that the floor clamps counts in
 * floor_hits, and mpt_scaler_watch() turns a run of consecutive floor hits into one clear warning.
 *
 * The per-element and per-scalar math is in engine/numerics.h (mpt_elem_unscale, mpt_scaler_step_begin,
 * mpt_scaler_update_fields), shared by the CPU and CUDA backends.
 */
#ifndef MPT_ENGINE_AMP_SCALER_H
#define MPT_ENGINE_AMP_SCALER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"
#include "engine/backend.h"
#include "engine/status.h"

/* Default initial loss scale: 2^16 (torch.amp.GradScaler init_scale=65536.0). */
#define MPT_SCALER_DEFAULT_INIT_SCALE 65536.0f

/* The defaults: growth_factor 2, backoff_factor 0.5, growth_interval 2000 (GradScaler), hysteresis 1
 * (PyTorch behaviour), min_scale 1, max_scale 2^24 (Apex amp's min_loss_scale / max_loss_scale). */
MPT_API mpt_scaler_params mpt_scaler_params_default(void);

/* Validates user-supplied parameters: growth_factor finite and >= 1, backoff_factor in (0, 1],
 * growth_interval >= 1, hysteresis >= 1, 0 < min_scale <= max_scale, both finite.
 * Returns MPT_OK, or MPT_ERR_ARG with a message naming the field, the expected range and the value. */
MPT_API mpt_status mpt_scaler_params_check(const mpt_scaler_params *p);

/* Writes the initial state to st (backend memory, e.g. from be->alloc): scale = init_scale,
 * inv_scale = 1/init_scale, found_inf = 0, grad_mul = 1, sumsq = 0, counters 0,
 * hysteresis_left = p->hysteresis. init_scale is not clamped to [min_scale, max_scale] (a static scale may lie
 * outside them); the first growth or backoff clamps it.
 * Returns MPT_ERR_ARG if init_scale is not finite and > 0, or if p fails mpt_scaler_params_check(). */
MPT_API mpt_status mpt_scaler_init(mpt_backend *be, mpt_scaler_state *st, float init_scale, const mpt_scaler_params *p);

/* Copies the state from backend memory to *out (host). Synchronises. */
MPT_API void mpt_scaler_read(mpt_backend *be, const mpt_scaler_state *st, mpt_scaler_state *out);

/* Host-side monitor for a collapsing scale. */
typedef struct mpt_scaler_watch {
    int32_t limit;            /* consecutive floor hits that trigger the warning (>= 1) */
    int32_t seen_steps_taken; /* steps_taken at the last observation */
    int32_t seen_floor_hits;  /* floor_hits at the last observation */
    int32_t run_start;        /* floor_hits when the current run of floor hits began */
    int warned;               /* the warning was given for the current run */
} mpt_scaler_watch;

/* Starts a watch that warns after `limit` consecutive floor hits (limit >= 1). */
MPT_API void mpt_scaler_watch_init(mpt_scaler_watch *w, int32_t limit);

/* Observes a host copy of the state (mpt_scaler_read). A floor hit is a backoff that min_scale clamped; hits
 * are consecutive while no optimizer step is applied between them. When the current run reaches w->limit,
 * writes a one-line warning to msg (host buffer of len bytes; may be NULL) and returns 1, once per run; else
 * returns 0. A step applied after the run ends it (the next run may warn again). Called every iteration it is
 * exact; called less often it may count late (progress seen in the same interval ends the run), never early. */
MPT_API int mpt_scaler_watch_check(mpt_scaler_watch *w, const mpt_scaler_state *st, const mpt_scaler_params *p,
                                   char *msg, size_t len);

#endif
