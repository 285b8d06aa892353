/*
 * engine/train.c - the mixed-precision training step (see engine/train.h for the sequence and the
 * references). Every call in mpt_trainer_step() is a backend operation on backend memory: nothing here
 * reads a device value back or allocates, so on the GPU a step is one stream of launches.
 */
#include "engine/train.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/amp/master.h"
#include "engine/amp/scaler.h"
#include "engine/dist/dist.h"
#include "engine/optim/optim.h"
#include "engine/rng.h"
#include "engine/telemetry/telemetry.h"

mpt_train_config mpt_train_config_default(mpt_precision precision) {
    mpt_train_config c;
    memset(&c, 0, sizeof c);
    c.optim = mpt_optim_hparams_default(MPT_OPTIM_ADAM);
    c.schedule.kind = MPT_LR_CONSTANT;
    c.schedule.base_lr = c.optim.lr;
    c.schedule.gamma = 0.1f;
    const mpt_mode_desc *mode = mpt_mode_info(precision);
    c.loss_scaling = mode && mode->dynamic_loss_scale ? MPT_LOSS_SCALE_DYNAMIC : MPT_LOSS_SCALE_NONE;
    c.init_scale = MPT_SCALER_DEFAULT_INIT_SCALE;
    c.scaler = mpt_scaler_params_default();
    c.seed = 0;
    c.inject_nonfinite_step = -1;
    c.master_weights = MPT_MASTER_FP32;
    c.update_rounding = MPT_ROUNDING_NEAREST;
    c.optim_state_dtype = MPT_DTYPE_F32;
    c.nonfinite = MPT_NONFINITE_SKIP;
    return c;
}

const char *mpt_update_rounding_name(mpt_update_rounding r) {
    return r == MPT_ROUNDING_STOCHASTIC ? "stochastic" : r == MPT_ROUNDING_NEAREST ? "nearest" : "?";
}

int mpt_update_rounding_parse(const char *s, mpt_update_rounding *out) {
    if (strcmp(s, "nearest") == 0) *out = MPT_ROUNDING_NEAREST;
    else if (strcmp(s, "stochastic") == 0) *out = MPT_ROUNDING_STOCHASTIC;
    else return -1;
    return 0;
}

const char *mpt_nonfinite_mode_name(mpt_nonfinite_mode m) {
    return m == MPT_NONFINITE_APPLY ? "apply" : m == MPT_NONFINITE_SKIP ? "skip" : "?";
}

int mpt_nonfinite_mode_parse(const char *s, mpt_nonfinite_mode *out) {
    if (strcmp(s, "skip") == 0) *out = MPT_NONFINITE_SKIP;
    else if (strcmp(s, "apply") == 0) *out = MPT_NONFINITE_APPLY;
    else return -1;
    return 0;
}

static mpt_tensor *state_tensor(mpt_graph *g, const mpt_tensor *w, const char *what, mpt_dtype dtype) {
    char name[MPT_NAME_LEN + 16];
    snprintf(name, sizeof name, "%s:%s", w->name, what);
    return mpt_graph_tensor(g, name, dtype, MPT_MEM_OPTIM, w->ndim, w->shape);
}

/* Each parameter as its layer declared (mpt_param_info.init): PyTorch's default init for Linear and Conv2d,
 * kaiming_uniform_(a=sqrt(5)) for the weight, which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for
 * the bias; or a constant (the norms' gamma 1 and beta 0, as torch.nn.BatchNorm2d / LayerNorm start). Uniforms come
 * from cuRAND's host Philox generator, stream MPT_RNG_INIT, consecutive offsets over the drawn parameters in
 * creation order (a constant draws nothing, so a normalisation layer leaves the other layers' draws as they were). */
static mpt_status init_params(mpt_trainer *t) {
    mpt_graph *g = t->g;
    size_t max_n = 0;
    for (int i = 0; i < g->n_params; i++) {
        size_t n = (size_t)mpt_tensor_numel(g->params[i].weight);
        if (n > max_n) max_n = n;
    }
    float *buf = malloc(max_n * sizeof *buf);
    uint16_t *narrow = malloc(max_n * sizeof *narrow); /* 16-bit weights without masters */
    if (!buf || !narrow) {
        free(buf);
        free(narrow);
        return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %zu bytes to initialise weights", max_n * 6);
    }
    uint64_t seed = mpt_rng_stream_seed(t->cfg.seed, MPT_RNG_INIT);
    uint64_t offset = 0;
    for (int i = 0; i < g->n_params; i++) {
        size_t n = (size_t)mpt_tensor_numel(g->params[i].weight);
        if (g->params[i].init == MPT_INIT_CONST) {
            for (size_t k = 0; k < n; k++) buf[k] = g->params[i].value;
        } else {
            float bound = 1.0f / sqrtf((float)g->params[i].fan_in);
            mpt_rng_uniform(buf, n, seed, offset);
            for (size_t k = 0; k < n; k++) buf[k] = (2.0f * buf[k] - 1.0f) * bound;
            offset += n;
        }
        mpt_tensor *dst = t->master[i];
        if (dst->dtype == MPT_DTYPE_F32) {
            t->be->from_host(t->be, dst->data, buf, n * sizeof *buf);
        } else { /* no FP32 master: the same values rounded to nearest even, as a working copy would be */
            for (size_t k = 0; k < n; k++) mpt_store_f32(narrow, dst->dtype, (int64_t)k, buf[k]);
            t->be->from_host(t->be, dst->data, narrow, n * sizeof *narrow);
        }
        t->be->synchronize(t->be); /* the buffers are reused and freed: the copies must have completed */
    }
    free(buf);
    free(narrow);
    mpt_trainer_refresh_working(t);
    return MPT_OK;
}

/* Quantization-aware training: the quantized weights' working copies from their masters, per output channel. */
static void qat_rewrite(mpt_trainer *t) {
    if (t->cfg.qat == MPT_QAT_NONE) return;
    for (int i = 0; i < t->n_params; i++)
        if (t->qat[i])
            mpt_quant_fake_weight(t->g, t->master[i]->data, t->weight[i], mpt_qat_format(t->cfg.qat), 1, NULL, NULL);
}

void mpt_trainer_refresh_working(mpt_trainer *t) {
    mpt_master_refresh_working(t->g, t->master);
    qat_rewrite(t);
}

/* The per-tensor optimizer arguments of parameter i that do not change from step to step. */
static void param_pointers(const mpt_trainer *t, int i, mpt_optim_args *a) {
    const int fp32 = t->master[i]->dtype == MPT_DTYPE_F32;
    a->n = mpt_tensor_numel(t->weight[i]);
    a->master = fp32 ? t->master[i]->data : NULL; /* NULL: update the 16-bit weights themselves */
    a->grad = t->weight[i]->grad->data;
    a->m = t->m[i] ? t->m[i]->data : NULL;
    a->v = t->v[i] ? t->v[i]->data : NULL;
    const int copy = mpt_master_has_working_copy(t->master[i], t->weight[i]);
    a->working = (copy || !fp32) && !t->qat[i] ? t->weight[i]->data : NULL; /* QAT: qat_rewrite writes it */
    a->working_dtype = t->weight[i]->dtype;
}

/* Writes the multi-tensor table t->slots from the allocated tensors (elements numbered across all parameters, in
 * creation order, for stochastic rounding), and t->numel. */
static mpt_status write_param_table(mpt_trainer *t) {
    t->numel = 0;
    if (t->n_params == 0) return MPT_OK;
    mpt_param_slot *h = calloc((size_t)t->n_params, sizeof *h);
    if (!h) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the parameter table (%d entries)", t->n_params);
    for (int i = 0; i < t->n_params; i++) {
        mpt_optim_args a;
        memset(&a, 0, sizeof a);
        param_pointers(t, i, &a);
        h[i] = (mpt_param_slot){.master = a.master, .grad = (float *)a.grad, .m = a.m, .v = a.v,
                                .working = a.working, .working_dtype = a.working_dtype, .n = a.n,
                                .sr_offset = (uint64_t)t->numel};
        t->numel += a.n;
    }
    t->be->from_host(t->be, t->slots, h, (size_t)t->n_params * sizeof *h);
    t->be->synchronize(t->be); /* h is freed next */
    free(h);
    return MPT_OK;
}

static mpt_status check_config(const mpt_train_config *cfg) {
    MPT_TRY(mpt_optim_hparams_check(&cfg->optim));
    MPT_TRY(mpt_lr_schedule_check(&cfg->schedule));
    MPT_TRY(mpt_scaler_params_check(&cfg->scaler));
    if (cfg->loss_scaling != MPT_LOSS_SCALE_NONE && !(cfg->init_scale > 0.0f && isfinite(cfg->init_scale)))
        return mpt_errorf(MPT_ERR_ARG, "loss scale: expected a positive finite value, found %g", cfg->init_scale);
    if (cfg->clip_norm < 0.0f || !isfinite(cfg->clip_norm))
        return mpt_errorf(MPT_ERR_ARG, "clip norm: expected a finite value >= 0 (0 = off), found %g", cfg->clip_norm);
    if (cfg->master_weights != MPT_MASTER_FP32 && cfg->master_weights != MPT_MASTER_NONE)
        return mpt_errorf(MPT_ERR_ARG, "master weights: expected fp32 or none, found mode %d", (int)cfg->master_weights);
    if (cfg->update_rounding == MPT_ROUNDING_STOCHASTIC && cfg->master_weights != MPT_MASTER_NONE)
        return mpt_errorf(MPT_ERR_ARG, "update rounding stochastic: needs master weights none (with FP32 masters "
                                       "the update is not rounded to 16 bits), found master weights fp32");
    if (cfg->update_rounding != MPT_ROUNDING_NEAREST && cfg->update_rounding != MPT_ROUNDING_STOCHASTIC)
        return mpt_errorf(MPT_ERR_ARG, "update rounding: expected nearest or stochastic, found %d",
                          (int)cfg->update_rounding);
    if (!mpt_dtype_is_float(cfg->optim_state_dtype))
        return mpt_errorf(MPT_ERR_ARG, "optimizer state: expected fp32, bf16 or fp16, found %s",
                          mpt_dtype_name(cfg->optim_state_dtype));
    if (cfg->nonfinite == MPT_NONFINITE_APPLY && cfg->loss_scaling == MPT_LOSS_SCALE_DYNAMIC)
        return mpt_errorf(MPT_ERR_ARG, "nonfinite apply: the dynamic loss scaler must skip overflowing steps to "
                                       "back off; use loss scaling none or static");
    if (cfg->nonfinite != MPT_NONFINITE_SKIP && cfg->nonfinite != MPT_NONFINITE_APPLY)
        return mpt_errorf(MPT_ERR_ARG, "nonfinite: expected skip or apply, found %d", (int)cfg->nonfinite);
    if ((unsigned)cfg->qat >= MPT_QAT_COUNT)
        return mpt_errorf(MPT_ERR_ARG, "qat: expected none, int8 or int4, found %d", (int)cfg->qat);
    if (cfg->qat != MPT_QAT_NONE && cfg->master_weights != MPT_MASTER_FP32)
        return mpt_errorf(MPT_ERR_ARG, "qat %s: quantization-aware training keeps FP32 masters beside the "
                                       "fake-quantized weights; it needs master weights fp32, found none",
                          mpt_qat_name(cfg->qat));
    return MPT_OK;
}

mpt_status mpt_trainer_create(mpt_trainer **out, mpt_graph *g, const mpt_train_config *cfg) {
    *out = NULL;
    MPT_ASSERTF(g->loss != NULL, "mpt_trainer_create: the graph has no loss (add mpt_softmax_xent)");
    MPT_ASSERTF(!g->allocated, "mpt_trainer_create: the graph must not be allocated yet");
    mpt_status s = check_config(cfg);
    if (s == MPT_OK && mpt_policy_is_fp8(&g->policy))
        s = mpt_fp8_recipe_check(&g->policy.fp8, mpt_policy_fp8_mx(&g->policy));
    if (s == MPT_OK && cfg->qat != MPT_QAT_NONE && mpt_policy_is_fp8(&g->policy))
        s = mpt_errorf(MPT_ERR_ARG, "qat %s: not with precision %s, whose FP8 GEMMs quantize the weights themselves "
                                    "(use fp32, tf32, bf16 or fp16)", mpt_qat_name(cfg->qat),
                       mpt_precision_name(g->policy.mode));
    if (s != MPT_OK) {
        mpt_graph_free(&g); /* the trainer owns g, also when it fails */
        return s;
    }
    mpt_trainer *t = calloc(1, sizeof *t);
    MPT_ASSERT(t != NULL);
    t->g = g;
    t->be = g->be;
    t->cfg = *cfg;
    t->n_params = g->n_params;
    t->weight = calloc((size_t)g->n_params, sizeof *t->weight);
    t->master = calloc((size_t)g->n_params, sizeof *t->master);
    t->m = calloc((size_t)g->n_params, sizeof *t->m);
    t->v = calloc((size_t)g->n_params, sizeof *t->v);
    t->qat = calloc((size_t)g->n_params + 1, sizeof *t->qat);
    MPT_ASSERT(t->weight && t->master && t->m && t->v && t->qat);
    for (int i = 0; i < g->n_params; i++) t->weight[i] = g->params[i].weight;
    mpt_master_create(g, t->master, cfg->master_weights);
    for (int i = 0; cfg->qat != MPT_QAT_NONE && i < g->n_params; i++) { /* the GEMM and conv weights, with FP32 masters */
        mpt_node *n = mpt_quant_weight_node(g, t->weight[i]);
        if (!n) continue;
        t->qat[i] = 1;
        n->qat = 1 + (int)mpt_qat_format(cfg->qat);
        if (t->master[i] == t->weight[i]) t->master[i] = mpt_master_separate(g, t->weight[i]);
    }
    int ns = mpt_optim_n_state(&cfg->optim);
    mpt_dtype sd = cfg->optim_state_dtype;
    for (int i = 0; i < g->n_params; i++) {
        if (ns >= 1) t->m[i] = state_tensor(g, t->weight[i], mpt_optim_state_name(&cfg->optim, 0), sd);
        if (ns >= 2) t->v[i] = state_tensor(g, t->weight[i], mpt_optim_state_name(&cfg->optim, 1), sd);
    }
    /* The scaler state lives in the optimizer arena, as raw bytes (host reads it only when logging). */
    int64_t sshape[1] = {(int64_t)sizeof(mpt_scaler_state)};
    mpt_tensor *st = mpt_graph_tensor(g, "amp.scaler_state", MPT_DTYPE_U8, MPT_MEM_OPTIM, 1, sshape);
    /* So does the multi-tensor table (engine/backend.h mpt_param_slot), filled once the arenas exist. */
    int64_t tshape[1] = {(int64_t)((size_t)g->n_params * sizeof(mpt_param_slot))};
    mpt_tensor *table = mpt_graph_tensor(g, "amp.param_table", MPT_DTYPE_U8, MPT_MEM_OPTIM, 1, tshape);
    g->grad_overwrite = 1; /* first gradient writes overwrite: no arena memsets per step (engine/graph.h) */
    int64_t bshape[1] = {g->batch};
    t->batch_idx = mpt_graph_tensor(g, "data.batch_idx", MPT_DTYPE_I32, MPT_MEM_DATA, 1, bshape);

    s = mpt_graph_alloc(g);
    if (s != MPT_OK) {
        mpt_trainer_free(&t);
        return s;
    }
    t->scaler = (mpt_scaler_state *)st->data;
    t->slots = (mpt_param_slot *)table->data;
    s = write_param_table(t);
    if (s != MPT_OK) {
        mpt_trainer_free(&t);
        return s;
    }
    t->cfg.scaler.apply_nonfinite = cfg->nonfinite == MPT_NONFINITE_APPLY;
    s = mpt_scaler_init(t->be, t->scaler, cfg->loss_scaling == MPT_LOSS_SCALE_NONE ? 1.0f : cfg->init_scale,
                        &t->cfg.scaler);
    if (s != MPT_OK) {
        mpt_trainer_free(&t);
        return s;
    }
    g->loss_scale = &t->scaler->scale;
    g->iteration = &t->scaler->iteration;
    g->found_inf = &t->scaler->found_inf; /* FP8 casts flag a non-finite amax here */
    g->seed = cfg->seed;
    s = init_params(t);
    if (s != MPT_OK) {
        mpt_trainer_free(&t);
        return s;
    }
    t->be->synchronize(t->be);
    *out = t;
    return MPT_OK;
}

void mpt_trainer_free(mpt_trainer **pt) {
    mpt_trainer *t = *pt;
    if (!t) return;
    mpt_telemetry_free(&t->telemetry);
    if (t->replay) t->be->replay_free(t->be, t->replay);
    mpt_graph_free(&t->g);
    free(t->weight);
    free(t->master);
    free(t->m);
    free(t->v);
    free(t->qat);
    free(t);
    *pt = NULL;
}

/* Fault injection for tests and teaching: make one gradient element NaN, as an FP16 overflow would. */
static void inject_nonfinite(mpt_trainer *t) {
    static const float nan_value = NAN;
    mpt_tensor *gr = t->weight[0]->grad;
    t->be->from_host(t->be, gr->data, &nan_value, sizeof nan_value);
}

/* The optimizer step one parameter at a time, recording each element's update delta into t->update_out (the
 * instruments' steps): the same per-element math as the multi-tensor pass, so the same weights and state. */
static void optim_per_tensor(mpt_trainer *t, int apply, const float *grad_mul) {
    mpt_scaler_state *st = t->scaler;
    mpt_optim_args a;
    memset(&a, 0, sizeof a);
    a.h = t->cfg.optim;
    a.lr = &st->lr;
    a.iteration = &st->iteration;
    a.found_inf = apply ? NULL : &st->found_inf;
    a.grad_mul = grad_mul;
    a.step = &st->steps_taken;
    a.state_dtype = t->cfg.optim_state_dtype;
    a.stochastic = t->cfg.update_rounding == MPT_ROUNDING_STOCHASTIC;
    a.sr_seed = mpt_rng_stream_seed(t->cfg.seed, MPT_RNG_ROUNDING);
    uint64_t element = 0; /* elements numbered across all parameters, in creation order */
    for (int i = 0; i < t->n_params; i++) {
        param_pointers(t, i, &a);
        a.sr_offset = element;
        a.update_out = t->update_out[i];
        t->be->optim_step(t->be, &a);
        element += (uint64_t)a.n;
    }
}

/* Gathers the batch staged by mpt_trainer_gather into the graph's input and labels (if one is staged). */
static void gather_staged(mpt_trainer *t) {
    if (!t->gather_pending) return;
    mpt_graph *g = t->g;
    const struct mpt_batch_source *src = &t->batch_src;
    t->be->gather_batch(t->be, g->input->data, g->input->dtype, g->labels->data, src->images, src->labels,
                        t->batch_idx->data, g->batch, src->D, src->mean, src->inv_std);
    t->gather_pending = 0;
}

/* The multi-tensor optimizer step's arguments: every parameter, the step's values read from the scaler state. */
static mpt_optim_multi_args multi_args(const mpt_trainer *t, int apply, const float *grad_mul) {
    mpt_scaler_state *st = t->scaler;
    return (mpt_optim_multi_args){.h = t->cfg.optim, .slots = t->slots, .count = t->n_params, .numel = t->numel,
                                  .state_dtype = t->cfg.optim_state_dtype,
                                  .stochastic = t->cfg.update_rounding == MPT_ROUNDING_STOCHASTIC,
                                  .sr_seed = mpt_rng_stream_seed(t->cfg.seed, MPT_RNG_ROUNDING),
                                  .found_inf = apply ? NULL : &st->found_inf, .grad_mul = grad_mul,
                                  .step = &st->steps_taken, .lr = &st->lr, .iteration = &st->iteration};
}

/* Whether this step's update pass can be the backend's update_pass: the backend has one, and nothing between
 * the optimizer and scaler_update reads the scaler state or needs the calls apart (FP8's scale update reads the
 * iteration scaler_update advances; clipping adds its own calls; update deltas go through optim_step per tensor;
 * --nonfinite apply moves step_begin first). */
static int update_pass_fits(const mpt_trainer *t, int apply) {
    return t->be->update_pass != NULL && !apply && t->cfg.clip_norm <= 0.0f && !t->update_out && t->g->n_fp8 == 0;
}

/* The update pass as separate calls: unscale and found_inf, clipping, the step count, the learning rate, the
 * optimizer, QAT's rewrite, FP8's scale update and the loss scaler's update. apply: --nonfinite apply (every step
 * counts, found_inf is still 0 here, reset by the last scaler_update, and the optimizer gets no found_inf, so
 * inf/NaN reach the weights; scaler_update counts them). */
static void update_calls(mpt_trainer *t, int apply) {
    mpt_graph *g = t->g;
    mpt_backend *be = t->be;
    mpt_scaler_state *st = t->scaler;
    if (apply) be->step_begin(be, st);
    /* Unscale and found_inf in one pass over all FP32 weight gradients. */
    be->unscale_check_multi(be, t->slots, t->n_params, t->numel, st);
    const float *grad_mul = NULL;
    if (t->cfg.clip_norm > 0.0f) {
        for (int i = 0; i < t->n_params; i++)
            be->sum_squares(be, t->weight[i]->grad->data, mpt_tensor_numel(t->weight[i]), st);
        be->clip_coef(be, st, t->cfg.clip_norm);
        grad_mul = &st->grad_mul;
    }
    if (!apply) be->step_begin(be, st);
    be->lr_update(be, st, &t->cfg.schedule); /* st->lr = schedule(st->iteration) */
    if (t->update_out) {
        optim_per_tensor(t, apply, grad_mul);
    } else { /* one launch over all parameters */
        mpt_optim_multi_args a = multi_args(t, apply, grad_mul);
        be->optim_step_multi(be, &a);
    }
    /* QAT: the forward pass of the next step reads the masters' fake-quantized values */
    qat_rewrite(t);
    /* FP8: this step's amaxes into the histories, and (delayed scaling) the scales for the next step */
    if (g->n_fp8) {
        const mpt_fp8_recipe *r = &g->policy.fp8;
        mpt_fp8_update_args u = {.meta = g->fp8_meta, .history = g->fp8_history, .n = g->n_fp8,
                                 .len = mpt_fp8_history_len(g), .iteration = &st->iteration,
                                 .delayed = r->scaling == MPT_FP8_SCALING_DELAYED,
                                 .margin_factor = ldexpf(1.0f, -r->margin), .pow2 = r->pow2_scales};
        be->fp8_update(be, &u);
    }
    /* the scale for the next step, the skip counters, and st->iteration += 1 */
    be->scaler_update(be, st, &t->cfg.scaler, t->cfg.loss_scaling == MPT_LOSS_SCALE_DYNAMIC);
}

/* The operations of one step after the gather, in order. `measured`: a telemetry step (the instruments read, and
 * may synchronise, between backward and the update). Every value that changes from step to step is read by the
 * operations from backend memory (mpt_scaler_state: scale, found_inf, iteration, lr), so the same calls can be
 * recorded once and replayed. */
static void step_ops(mpt_trainer *t, int measured) {
    mpt_graph *g = t->g;
    mpt_backend *be = t->be;
    mpt_scaler_state *st = t->scaler;

    gather_staged(t);
    mpt_graph_zero_grad(g);
    mpt_graph_forward(g);
    mpt_graph_backward(g); /* seeded with S = st->scale */
    if (t->iteration == t->cfg.inject_nonfinite_step) inject_nonfinite(t);
    /* data-parallel: the global batch's gradient (and, on telemetry steps, the wire's error against FP32) */
    if (t->dist) mpt_dist_allreduce_grads(t->dist, t, measured);
    /* Telemetry reads (and may synchronise) only on its own steps; it writes nothing this step uses. */
    if (measured) mpt_telemetry_after_backward(t->telemetry);

    const int apply = t->cfg.nonfinite == MPT_NONFINITE_APPLY;
    if (update_pass_fits(t, apply)) { /* update_calls' calls as one (the same bits; backend.h update_pass) */
        mpt_update_pass_args u = {.optim = multi_args(t, apply, NULL), .st = st, .schedule = t->cfg.schedule,
                                  .scaler = t->cfg.scaler,
                                  .dynamic = t->cfg.loss_scaling == MPT_LOSS_SCALE_DYNAMIC};
        be->update_pass(be, &u);
        qat_rewrite(t); /* reads the masters only */
    } else {
        update_calls(t, apply);
    }
    /* data-parallel: rank 0's running statistics on every rank (DDP's broadcast_buffers) */
    if (t->dist && g->n_buffers) mpt_dist_broadcast_buffers(t->dist, t);
    if (measured) mpt_telemetry_after_step(t->telemetry);
}

/* ---- Step graph ------------------------------------------------------------------------------------------
 * With cfg.step_graph on a backend that can record (CUDA), step_ops() is recorded once and replayed. Steps that
 * need the host in the middle run step_ops() directly on the same backend state, which keeps the results
 * bit-identical: both ways run the same operations with the same arguments on the same memory. */

/* Turns the graph off for the rest of the run, with the reason (one line). */
static void graph_turn_off(mpt_trainer *t, const char *why) {
    t->replay_off = 1;
    snprintf(t->replay_note, sizeof t->replay_note, "%s", why);
    if (t->replay) {
        t->be->replay_free(t->be, t->replay);
        t->replay = NULL;
    }
}

/* Whether this step may run as a replay; steps that may not run directly (and count in direct_steps). */
static int graph_wanted(mpt_trainer *t, int measured) {
    if (!t->cfg.step_graph || !t->be->capture_begin || t->replay_off) return 0;
    if (t->dist) {
        graph_turn_off(t, "data-parallel training: the gradient all-reduce (engine/dist) goes through the host");
        return 0;
    }
    /* the first step selects and caches the GEMM/conv algorithms (host work and synchronisation that a
     * recording cannot hold); the others need the host between backward and the update */
    int direct = t->captures == 0 && t->direct_steps == 0 ? 1
                 : measured || t->update_out || t->iteration == t->cfg.inject_nonfinite_step;
    if (direct) t->direct_steps++;
    return !direct;
}

/* The key of what a recording bakes in: the gather's source, the config, the backend workspace (a later
 * mpt_backend_reserve_workspace, e.g. for another graph on the same backend, frees the one a recording points
 * into) and the graph's loss-scale pointer and fusion setting. */
static struct mpt_capture_key graph_key_of(const mpt_trainer *t) {
    struct mpt_capture_key k;
    memset(&k, 0, sizeof k);
    k.with_gather = t->gather_pending;
    /* byte copies (padding included), so that memcmp compares only what the trainer holds */
    if (k.with_gather) memcpy(&k.src, &t->batch_src, sizeof k.src);
    memcpy(&k.cfg, &t->cfg, sizeof k.cfg);
    k.workspace = t->be->workspace;
    k.workspace_bytes = t->be->workspace_bytes;
    k.loss_scale = t->g->loss_scale;
    k.fuse_epilogues = t->g->fuse_epilogues;
    return k;
}

/* Records step_ops() into t->replay (replacing an older recording). 0 on success; on failure the graph is off
 * and the recorded operations have not run. */
static int graph_record(mpt_trainer *t) {
    mpt_backend *be = t->be;
    if (t->replay) {
        be->replay_free(be, t->replay);
        t->replay = NULL;
    }
    struct mpt_capture_key key = graph_key_of(t);
    const int pending = t->gather_pending;
    mpt_status s = be->capture_begin(be);
    if (s == MPT_OK) {
        step_ops(t, 0);
        s = be->capture_end(be, &t->replay);
    }
    if (s != MPT_OK) {
        char why[sizeof t->replay_note];
        snprintf(why, sizeof why, "the step could not be recorded: %s", mpt_last_error());
        graph_turn_off(t, why);
        t->gather_pending = pending; /* the recorded gather has not run: the direct step does it */
        return -1;
    }
    t->gather_pending = pending; /* replay() gathers */
    t->capture_key = key;
    t->captures++;
    return 0;
}

void mpt_trainer_step(mpt_trainer *t) {
    mpt_graph *g = t->g;
    g->training = 1;
    g->step = (uint64_t)t->iteration;
    int measured = t->telemetry && mpt_telemetry_due(t->telemetry, t->iteration + 1);
    int replay = graph_wanted(t, measured);
    if (replay) {
        struct mpt_capture_key key = graph_key_of(t);
        if (!t->replay || memcmp(&key, &t->capture_key, sizeof key) != 0) replay = graph_record(t) == 0;
        if (!replay) t->direct_steps++;
    }
    if (replay) {
        t->be->replay(t->be, t->replay);
        t->gather_pending = 0;
        t->replays++;
    } else {
        step_ops(t, measured);
    }
    t->iteration++;
}

void mpt_trainer_graph_status(const mpt_trainer *t, char *buf, size_t len) {
    if (!t->be->capture_begin) snprintf(buf, len, "not applicable (%s backend)", t->be->name);
    else if (!t->cfg.step_graph) snprintf(buf, len, "off (asked)");
    else if (t->replay_off) snprintf(buf, len, "off: %s", t->replay_note);
    else
        snprintf(buf, len, "on (%lld recording%s, %lld replays, %lld steps run directly)", (long long)t->captures,
                 t->captures == 1 ? "" : "s", (long long)t->replays, (long long)t->direct_steps);
}

void mpt_trainer_eval_batch(mpt_trainer *t) {
    t->g->training = 0;
    gather_staged(t);
    mpt_graph_forward(t->g);
}

void mpt_trainer_gather(mpt_trainer *t, const uint8_t *images, const uint8_t *labels, const int32_t *idx,
                        int64_t D, float mean, float inv_std) {
    mpt_graph *g = t->g;
    MPT_ASSERTF(mpt_tensor_numel(g->input) == (int64_t)g->batch * D,
                "mpt_trainer_gather: the model's input has %lld elements, batch %d x %lld given",
                (long long)mpt_tensor_numel(g->input), g->batch, (long long)D);
    t->be->copy(t->be, t->batch_idx->data, idx, (size_t)g->batch * sizeof(int32_t));
    t->batch_src.images = images;
    t->batch_src.labels = labels;
    t->batch_src.D = D;
    t->batch_src.mean = mean;
    t->batch_src.inv_std = inv_std;
    t->gather_pending = 1;
    if (t->telemetry) mpt_telemetry_gather(t->telemetry, images, labels, idx, D, mean, inv_std);
}

void mpt_trainer_stats(mpt_trainer *t, mpt_train_stats *out) {
    mpt_scaler_state st;
    float loss;
    int32_t correct = 0;
    t->be->to_host(t->be, &st, t->scaler, sizeof st);
    t->be->to_host(t->be, &loss, t->g->loss->data, sizeof loss);
    if (t->g->n_correct) t->be->to_host(t->be, &correct, t->g->n_correct->data, sizeof correct);
    out->loss = loss;
    out->scale = st.scale;
    out->steps_taken = st.steps_taken;
    out->steps_skipped = st.steps_skipped;
    out->steps_nonfinite = st.steps_nonfinite;
    out->floor_hits = st.floor_hits;
    out->n_correct = correct;
}

mpt_dtype mpt_trainer_update_dtype(const mpt_trainer *t, int i) { return mpt_trainer_update_target(t, i)->dtype; }

mpt_tensor *mpt_trainer_update_target(const mpt_trainer *t, int i) {
    MPT_ASSERTF(i >= 0 && i < t->n_params, "mpt_trainer_update_target: parameter %d of %d", i, t->n_params);
    return t->master[i];
}

void mpt_trainer_reset_correct(mpt_trainer *t) {
    if (t->g->n_correct) t->be->memset_zero(t->be, t->g->n_correct->data, sizeof(int32_t));
}

/* Rows of evaluation batch b that are data (see mpt_trainer_evaluate). */
static int64_t eval_valid_rows(int64_t n, int64_t stride, int64_t lo, int64_t b, int B) {
    int64_t valid = n - b * stride - lo;
    return valid < 0 ? 0 : valid > B ? B : valid;
}

void mpt_trainer_evaluate(mpt_trainer *t, const uint8_t *images, const uint8_t *labels, const int32_t *idx_dev,
                          int64_t n, int64_t stride, int64_t lo, int64_t dim, float mean, float inv_std,
                          double *loss_sum, int32_t *correct) {
    const int B = t->g->batch;
    MPT_ASSERTF(n >= 0 && stride >= B && lo >= 0 && lo + B <= stride,
                "mpt_trainer_evaluate: n %lld, stride %lld, lo %lld, batch %d", (long long)n, (long long)stride,
                (long long)lo, B);
    mpt_backend *be = t->be;
    const int64_t nb = (n + stride - 1) / stride, slots = nb > 0 ? nb : 1;
    float *dev_losses = be->alloc(be, (size_t)slots * sizeof(float));
    float *losses = malloc((size_t)slots * sizeof(float));
    MPT_ASSERTF(losses != NULL, "out of host memory for %lld evaluation losses", (long long)nb);
    mpt_trainer_reset_correct(t);
    for (int64_t b = 0; b < nb; b++) {
        if (eval_valid_rows(n, stride, lo, b, B) == 0) continue; /* padding only (the last batch's tail) */
        mpt_trainer_gather(t, images, labels, idx_dev + b * stride + lo, dim, mean, inv_std);
        mpt_trainer_eval_batch(t);
        if (dev_losses) be->copy(be, dev_losses + b, t->g->loss->data, sizeof(float));
        else be->to_host(be, &losses[b], t->g->loss->data, sizeof(float));
    }
    if (dev_losses) {
        be->to_host(be, losses, dev_losses, (size_t)slots * sizeof(float));
        be->free(be, dev_losses);
    }
    double sum = 0.0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t valid = eval_valid_rows(n, stride, lo, b, B);
        if (valid > 0) sum += (double)losses[b] * (double)valid; /* losses[b]: the mean over the valid rows */
    }
    free(losses);
    mpt_train_stats st;
    mpt_trainer_stats(t, &st);
    *loss_sum = sum;
    *correct = st.n_correct;
}
