/*
 * engine/optim/schedule.h - learning-rate schedules, evaluated on the host once per iteration.
 *
 * The iteration counter counts every training iteration, skipped (found_inf) ones included, as PyTorch's
 * LR schedulers do when scheduler.step() is called every iteration.
 *   constant:      lr(t) = base_lr
 *   step:          lr(t) = base_lr * gamma^floor(t / step_size)                (torch.optim.lr_scheduler.StepLR)
 *   cosine:        linear warmup from base_lr/warmup... see mpt_lr_at():
 *                  t <  warmup:  lr = base_lr * (t + 1) / warmup
 *                  t >= warmup:  lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * (t - warmup) / (total - warmup))) / 2
 *                  (CosineAnnealingLR after a LinearLR warmup; t is 0-based)
 */
#ifndef MPT_ENGINE_OPTIM_SCHEDULE_H
#define MPT_ENGINE_OPTIM_SCHEDULE_H

#include <stdint.h>

typedef enum mpt_lr_kind { MPT_LR_CONSTANT = 0, MPT_LR_STEP, MPT_LR_COSINE } mpt_lr_kind;

typedef struct mpt_lr_schedule {
    mpt_lr_kind kind;
    float base_lr;
    float min_lr;          /* cosine: the final LR */
    int64_t warmup_steps;  /* cosine: linear warmup iterations (0 = none) */
    int64_t total_steps;   /* cosine: iterations over which to anneal */
    int64_t step_size;     /* step: iterations between decays */
    float gamma;           /* step: decay factor */
} mpt_lr_schedule;

/* The learning rate for 0-based iteration t. */
float mpt_lr_at(const mpt_lr_schedule *s, int64_t t);
/* "constant", "step", "cosine"; parse returns 0 on success, -1 if unknown. */
const char *mpt_lr_kind_name(mpt_lr_kind k);
int mpt_lr_kind_parse(const char *s, mpt_lr_kind *out);

#endif
