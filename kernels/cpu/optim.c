/*
 * kernels/cpu/optim.c - the CPU backend's mixed-precision update: unscale + found_inf, sum of squares and clip
 * coefficient (clipping by global L2 norm), the fused optimizer step (on FP32 masters with the working copy
 * rewritten RNE, or on 16-bit weights directly with RNE or stochastic rounding; FP32 or 16-bit state), and
 * the loss-scale update.
 *
 * The math of one element is in engine/numerics.h ("Optimizer and loss-scaler per-element math"), shared
 * with the CUDA kernels; this file only loops. Contracts: engine/backend.h; formulas and their PyTorch
 * sources: engine/optim/optim.h and engine/amp/scaler.h.
 *
 * Speed: the loops run over blocks of MPT_OPTIM_BLOCK elements with a compile-time trip count, the
 * hyper-parameter switches (weight decay, momentum, nesterov, first step) are resolved outside the loops
 * (ALWAYS_INLINE specialisations with constant arguments) and the update loops carry GCC's ivdep (MPT_GCC_IVDEP)
 * (the arrays of one parameter never overlap), so gcc -O2 vectorises them. In the optimizer step each block
 * is updated and then converted to the working dtype (mpt_cpu_narrow) while it is in cache, so every array
 * is read and written once. Measured on this machine (1M elements, 1 thread): SGD with momentum
 * ~0.3-0.6 ns/element, unscale_check ~0.3, sum_squares ~0.1-0.4. Adam/AdamW take ~4-8 ns/element because
 * sqrtf() may set errno, which keeps gcc from vectorising the loop; built with -fno-math-errno (no change
 * in any result) they take ~1.6-2.5.
 */
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "engine/numerics.h"

#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Elements per block: 4 KiB per FP32 array, so all arrays of a block stay in L1/L2. A multiple of 16. */
#define MPT_OPTIM_BLOCK 1024

/* ---- unscale + found_inf, sum of squares, clip coefficient ------------------------------------------ */

ALWAYS_INLINE int unscale_block(float *restrict g, int64_t n, float inv) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= mpt_elem_unscale(&g[i], inv);
    return bad;
}

void mpt_cpu_unscale_check(mpt_backend *be, float *g, int64_t n, mpt_scaler_state *st) {
    (void)be;
    const float inv = st->inv_scale;
    int bad = 0;
    const int64_t full = n / MPT_OPTIM_BLOCK; /* blocks on any threads: each element alone, found_inf an OR */
    MPT_OMP(omp parallel for schedule(static) reduction(| : bad) if (n >= MPT_PAR_MIN))
    for (int64_t b = 0; b < full; b++) bad |= unscale_block(g + b * MPT_OPTIM_BLOCK, MPT_OPTIM_BLOCK, inv);
    bad |= unscale_block(g + full * MPT_OPTIM_BLOCK, n - full * MPT_OPTIM_BLOCK, inv);
    if (bad) st->found_inf = 1.0f;
}

void mpt_cpu_sum_squares(mpt_backend *be, const float *g, int64_t n, mpt_scaler_state *st) {
    (void)be;
    /* FP64 accumulation in 8 independent lanes (vectorisable without reassociation): the sum is exact to
     * about n * 2^-53 relative, far below the FP32 rounding of the result. */
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double x = (double)g[i + j];
            acc[j] += x * x;
        }
    for (; i < n; i++) acc[0] += (double)g[i] * (double)g[i];
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    st->sumsq = (float)((double)st->sumsq + s);
}

void mpt_cpu_clip_coef(mpt_backend *be, mpt_scaler_state *st, float max_norm) {
    (void)be;
    st->grad_mul = mpt_clip_coef(st->sumsq, max_norm);
}

void mpt_cpu_lr_update(mpt_backend *be, mpt_scaler_state *st, const mpt_lr_schedule *sc) {
    (void)be;
    st->lr = mpt_lr_eval((int)sc->kind, sc->base_lr, sc->min_lr, sc->warmup_steps, sc->total_steps, sc->step_size,
                         sc->gamma, st->iteration);
}

void mpt_cpu_step_begin(mpt_backend *be, mpt_scaler_state *st) {
    (void)be;
    mpt_scaler_step_begin(&st->steps_taken, st->found_inf);
}

/* ---- the fused optimizer step ---------------------------------------------------------------------------- */

/* The scalars of one optimizer step, read once (the loops must not re-read them through a pointer that
 * could alias the arrays). */
typedef struct step_scalars {
    float gm;                   /* gradient multiplier (clip coefficient) */
    float lr, momentum, dampening, wd;
    float beta1, beta2, eps, l2, decay, step_size, bc2_sqrt;
    int nesterov;
} step_scalars;

/* The FP32 arrays one block is updated in: straight into the FP32 master and state (the usual case), or
 * into widened copies of 16-bit weights or state (--master-weights none, --optimizer-state bf16|fp16). */
typedef struct block_ptrs {
    float *p, *m, *v;  /* weights, momentum buffer / exp_avg, exp_avg_sq (m, v NULL when unused) */
    const float *g;    /* gradient */
    float *upd;        /* update deltas, or NULL */
} block_ptrs;

/* SGD over n elements; the flags are constants at every call site so each variant is a straight loop. */
ALWAYS_INLINE void sgd_loop(float *restrict p, float *restrict buf, const float *restrict g, int64_t n,
                            const step_scalars *s, int has_momentum, int has_wd, int nesterov, int first) {
    const float gm = s->gm, lr = s->lr, momentum = has_momentum ? s->momentum : 0.0f;
    const float dampening = s->dampening, wd = has_wd ? s->wd : 0.0f;
    if (has_momentum) {
MPT_GCC_IVDEP
        for (int64_t i = 0; i < n; i++)
            mpt_elem_sgd(&p[i], &buf[i], g[i], gm, lr, momentum, dampening, wd, nesterov, first);
    } else {
MPT_GCC_IVDEP
        for (int64_t i = 0; i < n; i++) {
            float unused;
            mpt_elem_sgd(&p[i], &unused, g[i], gm, lr, 0.0f, dampening, wd, 0, first);
        }
    }
}

ALWAYS_INLINE void adam_loop(float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
                             int64_t n, const step_scalars *s, int has_l2, int has_decay) {
    const float gm = s->gm, beta1 = s->beta1, beta2 = s->beta2, eps = s->eps;
    const float l2 = has_l2 ? s->l2 : 0.0f, decay = has_decay ? s->decay : 1.0f;
    const float step_size = s->step_size, bc2_sqrt = s->bc2_sqrt;
MPT_GCC_IVDEP
    for (int64_t i = 0; i < n; i++)
        mpt_elem_adam(&p[i], &m[i], &v[i], g[i], gm, beta1, beta2, eps, l2, decay, step_size, bc2_sqrt);
}

/* The same updates with every flag read at run time, also writing each element's update delta to b->upd: the
 * path of telemetry steps (mpt_optim_args.update_out), where speed does not matter. The per-element
 * functions are the same, so the weights and state are bit-identical to the specialised loops'. */
static void update_block_with_delta(mpt_optim_kind kind, const step_scalars *s, const block_ptrs *b, int64_t n,
                                    int first) {
    if (kind == MPT_OPTIM_SGD) {
        const int has_momentum = s->momentum != 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float unused = 0.0f;
            float *buf = has_momentum ? &b->m[i] : &unused;
            b->upd[i] = mpt_elem_sgd(&b->p[i], buf, b->g[i], s->gm, s->lr, s->momentum, s->dampening, s->wd,
                                     s->nesterov, first);
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            b->upd[i] = mpt_elem_adam(&b->p[i], &b->m[i], &b->v[i], b->g[i], s->gm, s->beta1, s->beta2, s->eps,
                                      s->l2, s->decay, s->step_size, s->bc2_sqrt);
    }
}

/* One block of n elements (n == MPT_OPTIM_BLOCK except for the tail). */
ALWAYS_INLINE void update_block(mpt_optim_kind kind, const step_scalars *s, const block_ptrs *b, int64_t n,
                                int first) {
    float *p = b->p, *buf = b->m;
    const float *g = b->g;
    if (kind == MPT_OPTIM_SGD) {
        int has_wd = s->wd != 0.0f;
        if (s->momentum == 0.0f) {
            if (has_wd) sgd_loop(p, buf, g, n, s, 0, 1, 0, first);
            else sgd_loop(p, buf, g, n, s, 0, 0, 0, first);
        } else if (first) {
            if (has_wd) sgd_loop(p, buf, g, n, s, 1, 1, s->nesterov, 1);
            else sgd_loop(p, buf, g, n, s, 1, 0, s->nesterov, 1);
        } else if (s->nesterov) {
            if (has_wd) sgd_loop(p, buf, g, n, s, 1, 1, 1, 0);
            else sgd_loop(p, buf, g, n, s, 1, 0, 1, 0);
        } else {
            if (has_wd) sgd_loop(p, buf, g, n, s, 1, 1, 0, 0);
            else sgd_loop(p, buf, g, n, s, 1, 0, 0, 0);
        }
    } else {
        if (s->l2 != 0.0f) adam_loop(p, b->m, b->v, g, n, s, 1, 0);
        else if (s->decay != 1.0f) adam_loop(p, b->m, b->v, g, n, s, 0, 1);
        else adam_loop(p, b->m, b->v, g, n, s, 0, 0);
    }
}

/* dst[i] = stochastic rounding of src[i] into t (F16 or BF16; F32: copy) with the bits of element e0 + i:
 * mpt_sr_bits(seed, iteration, e0 + i), one Philox block per four elements. */
static void narrow_stochastic(void *dst, mpt_dtype t, const float *src, int64_t n, uint64_t seed,
                              uint64_t iteration, uint64_t e0) {
    if (t == MPT_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t words[4];
    uint64_t block = UINT64_MAX;
    for (int64_t i = 0; i < n; i++) {
        uint64_t e = e0 + (uint64_t)i, q = e >> 2;
        if (q != block) { /* the documented counter of mpt_sr_bits */
            const uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), (uint32_t)iteration,
                                     (uint32_t)(iteration >> 32)};
            mpt_philox4x32_10(ctr, key, words);
            block = q;
        }
        uint32_t r = words[e & 3];
        d[i] = t == MPT_DTYPE_BF16 ? mpt_f32_to_bf16_sr(src[i], r) : mpt_f32_to_f16_sr(src[i], r);
    }
}

/* Element i0.. of a buffer of dtype t as a byte pointer. */
static inline char *at(void *base, mpt_dtype t, int64_t i0) { return (char *)base + (size_t)i0 * mpt_dtype_size(t); }

/* One block through FP32 scratch copies: 16-bit weights without a master are widened, updated and rounded
 * once (RNE or stochastic); 16-bit state is widened, updated and rounded to nearest even. FP32 arrays are
 * updated in place. */
static void update_block_widened(const mpt_optim_args *a, const step_scalars *s, int64_t i0, int64_t nb,
                                 int first) {
    float pw[MPT_OPTIM_BLOCK], mw[MPT_OPTIM_BLOCK], vw[MPT_OPTIM_BLOCK];
    const int state16 = a->state_dtype != MPT_DTYPE_F32;
    block_ptrs b = {.p = a->master ? a->master + i0 : pw, .g = a->grad + i0,
                    .upd = a->update_out ? a->update_out + i0 : NULL};
    if (!a->master) mpt_cpu_widen(pw, at(a->working, a->working_dtype, i0), a->working_dtype, nb);
    if (a->m) {
        b.m = state16 ? mw : (float *)a->m + i0;
        if (state16) mpt_cpu_widen(mw, at(a->m, a->state_dtype, i0), a->state_dtype, nb);
    }
    if (a->v) {
        b.v = state16 ? vw : (float *)a->v + i0;
        if (state16) mpt_cpu_widen(vw, at(a->v, a->state_dtype, i0), a->state_dtype, nb);
    }
    if (b.upd) update_block_with_delta(a->h.kind, s, &b, nb, first);
    else update_block(a->h.kind, s, &b, nb, first);
    if (state16 && a->m) mpt_cpu_narrow(at(a->m, a->state_dtype, i0), a->state_dtype, mw, nb);
    if (state16 && a->v) mpt_cpu_narrow(at(a->v, a->state_dtype, i0), a->state_dtype, vw, nb);
    if (a->master) {
        if (a->working) mpt_cpu_narrow(at(a->working, a->working_dtype, i0), a->working_dtype, b.p, nb);
    } else if (a->stochastic) {
        narrow_stochastic(at(a->working, a->working_dtype, i0), a->working_dtype, pw, nb, a->sr_seed,
                          a->iteration ? (uint64_t)*a->iteration : a->sr_iteration, a->sr_offset + (uint64_t)i0);
    } else {
        mpt_cpu_narrow(at(a->working, a->working_dtype, i0), a->working_dtype, pw, nb);
    }
}

/* One block updated in place in the FP32 master and FP32 state (the usual case: no copies). */
ALWAYS_INLINE void update_block_fp32(const mpt_optim_args *a, const step_scalars *s, int64_t i0, int64_t nb,
                                     int first) {
    block_ptrs b = {.p = a->master + i0, .m = a->m ? (float *)a->m + i0 : NULL,
                    .v = a->v ? (float *)a->v + i0 : NULL, .g = a->grad + i0,
                    .upd = a->update_out ? a->update_out + i0 : NULL};
    if (b.upd) update_block_with_delta(a->h.kind, s, &b, nb, first);
    else if (nb == MPT_OPTIM_BLOCK) update_block(a->h.kind, s, &b, MPT_OPTIM_BLOCK, first); /* constant trip count */
    else update_block(a->h.kind, s, &b, nb, first);
    /* the working copy of this block, RNE, while the masters are in cache (kernels/cpu/convert.h) */
    if (a->working) mpt_cpu_narrow(at(a->working, a->working_dtype, i0), a->working_dtype, b.p, nb);
}

static void check_args(const mpt_optim_args *a) {
    const mpt_optim_hparams *h = &a->h;
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
    MPT_ASSERTF(a->master != NULL || a->working != NULL, "optim_step: no weights (master and working both NULL)");
    if (a->working)
        MPT_ASSERTF(mpt_dtype_is_float(a->working_dtype), "optim_step: working copy dtype %s is not a float dtype",
                    mpt_dtype_name(a->working_dtype));
    MPT_ASSERTF(mpt_dtype_is_float(a->state_dtype), "optim_step: state dtype %s is not a float dtype",
                mpt_dtype_name(a->state_dtype));
}

void mpt_cpu_optim_step(mpt_backend *be, const mpt_optim_args *a) {
    (void)be;
    check_args(a);
    if (a->found_inf && *a->found_inf != 0.0f) { /* skipped step: weights and state untouched */
        for (int64_t i = 0; a->update_out && i < a->n; i++) a->update_out[i] = 0.0f;
        return;
    }
    const int32_t t = *a->step;
    MPT_ASSERTF(t >= 1, "optim_step: step count %d, expected >= 1 (step_begin runs first)", (int)t);
    const mpt_optim_hparams *h = &a->h;
    const float lr = a->lr ? *a->lr : h->lr;
    step_scalars s = {.gm = a->grad_mul ? *a->grad_mul : 1.0f, .lr = lr, .momentum = h->momentum,
                      .dampening = h->dampening, .wd = h->weight_decay, .beta1 = h->beta1, .beta2 = h->beta2,
                      .eps = h->eps, .l2 = 0.0f, .decay = 1.0f, .step_size = 0.0f, .bc2_sqrt = 1.0f,
                      .nesterov = h->nesterov != 0};
    if (h->kind != MPT_OPTIM_SGD) {
        if (h->kind == MPT_OPTIM_ADAM) s.l2 = h->weight_decay;
        else s.decay = mpt_adamw_decay(lr, h->weight_decay);
        s.step_size = mpt_adam_step_size(lr, h->beta1, t);
        s.bc2_sqrt = mpt_adam_bc2_sqrt(h->beta2, t);
    }
    const int first = t == 1;
    const int in_place = a->master != NULL && a->state_dtype == MPT_DTYPE_F32;
    const int64_t blocks = (a->n + MPT_OPTIM_BLOCK - 1) / MPT_OPTIM_BLOCK; /* each element's update is its own */
    MPT_OMP(omp parallel for schedule(static) if (a->n >= MPT_PAR_MIN))
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t i0 = b * MPT_OPTIM_BLOCK;
        int64_t nb = a->n - i0 < MPT_OPTIM_BLOCK ? a->n - i0 : MPT_OPTIM_BLOCK;
        if (in_place) update_block_fp32(a, &s, i0, nb, first);
        else update_block_widened(a, &s, i0, nb, first);
    }
}

/* ---- multi-tensor entry points: the per-tensor calls, one slot after the other ------------------------------ */

void mpt_cpu_unscale_check_multi(mpt_backend *be, const mpt_param_slot *slots, int count, int64_t numel,
                                 mpt_scaler_state *st) {
    (void)numel;
    MPT_ASSERT(count >= 0 && (count == 0 || slots != NULL));
    for (int i = 0; i < count; i++) mpt_cpu_unscale_check(be, slots[i].grad, slots[i].n, st);
}

void mpt_cpu_optim_step_multi(mpt_backend *be, const mpt_optim_multi_args *a) {
    MPT_ASSERT(a->count >= 0 && (a->count == 0 || a->slots != NULL));
    for (int i = 0; i < a->count; i++) {
        const mpt_param_slot *sl = &a->slots[i];
        const mpt_optim_args one = {.h = a->h, .n = sl->n, .master = sl->master, .grad = sl->grad, .m = sl->m,
                                    .v = sl->v, .state_dtype = a->state_dtype, .working = sl->working,
                                    .working_dtype = sl->working_dtype, .stochastic = a->stochastic,
                                    .sr_seed = a->sr_seed, .sr_iteration = a->sr_iteration,
                                    .sr_offset = sl->sr_offset, .found_inf = a->found_inf, .grad_mul = a->grad_mul,
                                    .step = a->step, .lr = a->lr, .iteration = a->iteration, .update_out = NULL};
        mpt_cpu_optim_step(be, &one);
    }
}

/* ---- loss-scale update ---------------------------------------------------------------------------------- */

void mpt_cpu_scaler_update(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic) {
    (void)be;
    mpt_scaler_update_fields(&st->scale, &st->inv_scale, &st->found_inf, &st->grad_mul, &st->sumsq,
                             &st->growth_tracker, &st->hysteresis_left, &st->steps_skipped, &st->floor_hits,
                             &st->steps_nonfinite, p->growth_factor, p->backoff_factor, p->growth_interval,
                             p->hysteresis, p->min_scale, p->max_scale, p->apply_nonfinite, dynamic);
    st->iteration += 1;
}
