/*
 * engine/optim/schedule.h - learning-rate schedules, evaluated once per iteration.
 *
 * The iteration counter counts every training iteration, skipped (found_inf) ones included, as PyTorch's
 * LR schedulers do when scheduler.step() is called every iteration.
 *   constant:      lr(t) = base_lr
 *   step:          lr(t) = base_lr * gamma^floor(t / step_size)                (torch.optim.lr_scheduler.StepLR)
 *   cosine:        linear warmup, then cosine annealing from base_lr to min_lr (t is 0-based):
 *                  t <  warmup:          lr = base_lr * (t + 1) / warmup
 *                  warmup <= t < total:  lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * (t - warmup) / (total - warmup))) / 2
 *                  t >= total:           lr = min_lr (held, where CosineAnnealingLR would rise again)
 *                  (torch.optim.lr_scheduler.CosineAnnealingLR with T_max = total - warmup and eta_min = min_lr,
 *                  after a linear warmup whose first iteration already uses base_lr / warmup, not 0)
 * Evaluated in FP64 and rounded once to FP32, by engine/numerics.h's mpt_lr_eval: the host (mpt_lr_at) and both
 * backends (be->lr_update, on the backend's own iteration counter) run that one function.
 */
#ifndef MPT_ENGINE_OPTIM_SCHEDULE_H
#define MPT_ENGINE_OPTIM_SCHEDULE_H

#include <stdint.h>

#include "engine/api.h"
#include "engine/backend.h"
#include "engine/status.h"

/* mpt_lr_kind and mpt_lr_schedule are defined in engine/backend.h (the backends evaluate the schedule). */

/* The learning rate for 0-based iteration t (t >= 0) of a schedule that passes mpt_lr_schedule_check(). */
MPT_API float mpt_lr_at(const mpt_lr_schedule *s, int64_t t);
/* Checks user-supplied schedule values: base_lr finite and >= 0; step: step_size >= 1, gamma finite and > 0;
 * cosine: 0 <= min_lr <= base_lr, warmup_steps >= 0, total_steps > warmup_steps. Returns MPT_OK or MPT_ERR_ARG
 * with a message naming the field, the expected range and the value found. */
MPT_API mpt_status mpt_lr_schedule_check(const mpt_lr_schedule *s);
/* "constant", "step", "cosine"; parse returns 0 on success, -1 if unknown. */
MPT_API const char *mpt_lr_kind_name(mpt_lr_kind k);
MPT_API int mpt_lr_kind_parse(const char *s, mpt_lr_kind *out);

#endif
