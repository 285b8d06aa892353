/*
 * tests/test_amp_train.c - the precision split end to end on the CPU backend (issue #3):
 *  - all four modes (fp32, tf32, fp16, bf16) train a small MLP on synthetic data to > 95% test accuracy;
 *  - the purpose of loss scaling: with the loss multiplied by 2^-20, FP16 activation gradients underflow
 *    (they fall below FP16's smallest subnormal, 2^-24) and training stalls without a scaler; the dynamic
 *    scaler (S = 2^16 and growing) lifts them back into range and the same network learns. FP32 with the same
 *    multiplier learns without a scaler (the control: the stall is FP16's underflow, not the multiplier);
 *  - an injected non-finite gradient skips exactly one step: masters and optimizer state stay bit-identical,
 *    the scale backs off, training continues; with --nonfinite apply it is a taken step, counted as non-finite;
 *  - in bf16 the working copies are exactly RNE(master) after every step;
 *  - asking for the update deltas (mpt_trainer.update_out) does not change training;
 *  - a step graph that cannot be recorded is turned off with the reason, and training is unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "datasets/synthetic.h"
#include "engine/amp/master.h"
#include "engine/layers/layers.h"
#include "engine/rng.h"
#include "engine/train.h"
#include "models/models.h"
#include "harness.h"

#define B 64
#define HIDDEN 64

typedef struct run {
    mpt_backend *be;
    mpt_trainer *tr;
    mpt_mnist data;
    int32_t *perm;
    float *scratch;
    float seed_scale; /* backend scalar used as the backward seed when the test overrides it */
} run;

static void run_open(run *r, mpt_precision mode, const mpt_train_config *cfg) {
    memset(r, 0, sizeof *r);
    ck_assert_int_eq(mpt_synthetic_blobs(&r->data, 4096, 1024, 64, 8, 1234), MPT_OK);
    r->be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(mode, mode == MPT_PRECISION_TF32, mode == MPT_PRECISION_TF32);
    mpt_graph *g = mpt_graph_create(r->be, &pol, B);
    int64_t shape[2] = {B, r->data.dim};
    mpt_tensor *x = mpt_input(g, 2, shape);
    x = mpt_relu(g, mpt_linear(g, x, HIDDEN, "fc1"), "relu1");
    x = mpt_linear(g, x, r->data.n_classes, "fc2");
    mpt_softmax_xent(g, x, "loss");
    ck_assert_int_eq(mpt_trainer_create(&r->tr, g, cfg), MPT_OK);
    r->perm = malloc(sizeof(int32_t) * (size_t)r->data.n_train);
    r->scratch = malloc(sizeof(float) * (size_t)r->data.n_train);
}

static void run_close(run *r) {
    mpt_trainer_free(&r->tr);
    mpt_backend_free(&r->be);
    mpt_mnist_free(&r->data);
    free(r->perm);
    free(r->scratch);
}

/* One epoch over the training set in shuffled order (full batches only). If seed_mul != 1, the backward
 * pass is seeded with S * seed_mul instead of S: the loss multiplied by seed_mul. */
static void run_epoch(run *r, int epoch, float seed_mul) {
    int64_t n = r->data.n_train;
    for (int64_t i = 0; i < n; i++) r->perm[i] = (int32_t)i;
    mpt_rng_shuffle(r->perm, (size_t)n, r->scratch, 99, (uint64_t)epoch * (uint64_t)n);
    for (int64_t b = 0; b + B <= n; b += B) {
        mpt_trainer_gather(r->tr, r->data.train_images, r->data.train_labels, r->perm + b, r->data.dim, 0.0f, 1.0f);
        if (seed_mul != 1.0f) {
            /* CPU backend: the scaler state is host memory, so the test can read S directly. */
            r->seed_scale = r->tr->scaler->scale * seed_mul;
            r->tr->g->loss_scale = &r->seed_scale;
        }
        mpt_trainer_step(r->tr);
    }
}

static double run_test_accuracy(run *r) {
    int32_t idx[B];
    int64_t n = r->data.n_test, counted = 0;
    mpt_trainer_reset_correct(r->tr);
    for (int64_t b = 0; b + B <= n; b += B) {
        for (int i = 0; i < B; i++) idx[i] = (int32_t)(b + i);
        mpt_trainer_gather(r->tr, r->data.test_images, r->data.test_labels, idx, r->data.dim, 0.0f, 1.0f);
        mpt_trainer_eval_batch(r->tr);
        counted += B;
    }
    mpt_train_stats st;
    mpt_trainer_stats(r->tr, &st);
    return (double)st.n_correct / (double)counted;
}

/* to_host of the backend under test, counted (mpt_trainer_evaluate must not wait for the device per batch). */
static int to_host_calls;
static void (*real_to_host)(mpt_backend *be, void *dst_host, const void *src, size_t bytes);
static void counting_to_host(mpt_backend *be, void *dst_host, const void *src, size_t bytes) {
    to_host_calls++;
    real_to_host(be, dst_host, src, bytes);
}

/* mpt_trainer_evaluate over 5 full batches and a partial one (3 rows, 61 padding rows): the loss sum is the
 * per-batch loop's (each batch's mean times its valid rows, summed in FP64) bit for bit, the count its count,
 * and the backend's to_host runs a fixed number of times (the losses once, the statistics), not once per batch. */
START_TEST(test_evaluate_reads_once) {
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP32);
    run r;
    run_open(&r, MPT_PRECISION_FP32, &cfg);
    run_epoch(&r, 0, 1.0f);
    enum { NB = 6 };
    const int64_t n = (NB - 1) * B + 3;
    int32_t idx[NB * B];
    for (int64_t i = 0; i < NB * B; i++) idx[i] = i < n ? (int32_t)i : -1;
    double sum = 0.0;
    mpt_trainer_reset_correct(r.tr);
    for (int b = 0; b < NB; b++) {
        mpt_trainer_gather(r.tr, r.data.test_images, r.data.test_labels, idx + b * B, r.data.dim, 0.0f, 1.0f);
        mpt_trainer_eval_batch(r.tr);
        const int64_t valid = n - (int64_t)b * B < B ? n - (int64_t)b * B : B;
        sum += (double)*(const float *)r.tr->g->loss->data * (double)valid; /* CPU backend: host memory */
    }
    const int32_t correct = *(const int32_t *)r.tr->g->n_correct->data;
    real_to_host = r.be->to_host;
    r.be->to_host = counting_to_host;
    to_host_calls = 0;
    double loss_sum = 0.0;
    int32_t n_correct = -1;
    mpt_trainer_evaluate(r.tr, r.data.test_images, r.data.test_labels, idx, n, B, 0, r.data.dim, 0.0f, 1.0f,
                         &loss_sum, &n_correct);
    r.be->to_host = real_to_host;
    ck_assert_msg(loss_sum == sum, "evaluate loss sum %.17g, per-batch loop %.17g", loss_sum, sum);
    ck_assert_msg(n_correct == correct, "evaluate: %d correct, per-batch count %d", (int)n_correct, (int)correct);
    ck_assert_int_gt(correct, 0);
    ck_assert_msg(to_host_calls <= 4, "%d reads from the backend for %d batches (expected the losses once and the "
                                      "statistics)", to_host_calls, NB);
    run_close(&r);
}
END_TEST

static double train_mode(mpt_precision mode, int epochs, double *final_scale) {
    mpt_train_config cfg = mpt_train_config_default(mode);
    cfg.seed = 7;
    run r;
    run_open(&r, mode, &cfg);
    for (int e = 0; e < epochs; e++) run_epoch(&r, e, 1.0f);
    double acc = run_test_accuracy(&r);
    mpt_train_stats st;
    mpt_trainer_stats(r.tr, &st);
    if (final_scale) *final_scale = st.scale;
    printf("mode %s: test accuracy %.4f after %d epochs, loss scale %g, skipped %d\n", mpt_precision_name(mode), acc,
           epochs, st.scale, st.steps_skipped);
    run_close(&r);
    return acc;
}

START_TEST(test_all_modes_learn) {
    static const mpt_precision modes[4] = {MPT_PRECISION_FP32, MPT_PRECISION_TF32, MPT_PRECISION_FP16,
                                           MPT_PRECISION_BF16};
    double scale = 0;
    double acc = train_mode(modes[_i], 8, &scale);
    ck_assert_msg(acc > 0.95, "%s: test accuracy %.4f, expected > 0.95", mpt_precision_name(modes[_i]), acc);
    if (modes[_i] == MPT_PRECISION_FP16) ck_assert_msg(scale >= 1.0 && isfinite(scale), "fp16 scale %g", scale);
    else ck_assert_msg(scale == 1.0, "%s uses no loss scaling by default, scale %g", mpt_precision_name(modes[_i]), scale);
}
END_TEST

/* Trains with the loss multiplied by 2^-20, SGD with lr * 2^20 so that the FP32 update has the usual size
 * whenever the gradient survives. */
static double train_tiny_loss(mpt_precision mode, mpt_loss_scaling scaling, int32_t *skipped, float *scale) {
    const float mul = 0x1p-20f;
    mpt_train_config cfg = mpt_train_config_default(mode);
    cfg.seed = 11;
    cfg.optim.kind = MPT_OPTIM_SGD;
    cfg.optim.momentum = 0.9f;
    cfg.schedule.base_lr = 0.05f / mul;
    cfg.loss_scaling = scaling;
    run r;
    run_open(&r, mode, &cfg);
    for (int e = 0; e < 2; e++) run_epoch(&r, e, mul);
    double acc = run_test_accuracy(&r);
    mpt_train_stats st;
    mpt_trainer_stats(r.tr, &st);
    *skipped = st.steps_skipped;
    *scale = st.scale;
    printf("loss x 2^-20, mode %s, scaling %s: accuracy %.4f, skipped %d, final scale %g\n", mpt_precision_name(mode),
           scaling == MPT_LOSS_SCALE_DYNAMIC ? "dynamic" : "none", acc, st.steps_skipped, st.scale);
    run_close(&r);
    return acc;
}

START_TEST(test_loss_scaling_rescues_fp16_underflow) {
    int32_t skipped;
    float scale;
    double chance = 1.0 / 8.0;
    double acc_none = train_tiny_loss(MPT_PRECISION_FP16, MPT_LOSS_SCALE_NONE, &skipped, &scale);
    ck_assert_msg(acc_none < chance + 0.15, "fp16 without scaling should stall (gradients underflow), got %.4f", acc_none);
    double acc_dyn = train_tiny_loss(MPT_PRECISION_FP16, MPT_LOSS_SCALE_DYNAMIC, &skipped, &scale);
    ck_assert_msg(acc_dyn > 0.9, "fp16 with the dynamic scaler should learn, got %.4f", acc_dyn);
    double acc_fp32 = train_tiny_loss(MPT_PRECISION_FP32, MPT_LOSS_SCALE_NONE, &skipped, &scale);
    ck_assert_msg(acc_fp32 > 0.9, "fp32 (no underflow) should learn without scaling, got %.4f", acc_fp32);
}
END_TEST

static void snapshot(run *r, unsigned char **buf, size_t *len) {
    mpt_graph *g = r->tr->g;
    size_t a = g->arena_bytes[MPT_MEM_WEIGHT], b = g->arena_bytes[MPT_MEM_MASTER], c = g->arena_bytes[MPT_MEM_OPTIM];
    *len = a + b + c;
    *buf = malloc(*len);
    memcpy(*buf, g->arena[MPT_MEM_WEIGHT], a);
    if (b) memcpy(*buf + a, g->arena[MPT_MEM_MASTER], b);
    /* the optimizer arena also holds the scaler state, which legitimately changes, and the multi-tensor
     * parameter table (pointers, different in every run): compare only the state tensors */
    memcpy(*buf + a + b, g->arena[MPT_MEM_OPTIM], c);
    static const char *const not_state[2] = {"amp.scaler_state", "amp.param_table"};
    for (int k = 0; k < 2; k++) {
        mpt_tensor *t = mpt_graph_find(g, not_state[k]);
        size_t off = (size_t)((char *)t->data - (char *)g->arena[MPT_MEM_OPTIM]);
        memset(*buf + a + b + off, 0, mpt_tensor_nbytes(t));
    }
}

START_TEST(test_injected_nonfinite_skips_step) {
    static const mpt_optim_kind kinds[3] = {MPT_OPTIM_SGD, MPT_OPTIM_ADAM, MPT_OPTIM_ADAMW};
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP16);
    cfg.optim.kind = kinds[_i];
    cfg.optim.momentum = 0.9f;
    cfg.optim.weight_decay = 0.01f;
    cfg.schedule.base_lr = kinds[_i] == MPT_OPTIM_SGD ? 0.05f : 1e-3f;
    cfg.inject_nonfinite_step = 3;
    run r;
    run_open(&r, MPT_PRECISION_FP16, &cfg);
    int32_t idx[B];
    unsigned char *before = NULL, *after = NULL;
    size_t len = 0, len2 = 0;
    float scale_before = 0;
    for (int it = 0; it < 6; it++) {
        for (int i = 0; i < B; i++) idx[i] = (int32_t)(it * B + i);
        mpt_trainer_gather(r.tr, r.data.train_images, r.data.train_labels, idx, r.data.dim, 0.0f, 1.0f);
        if (it == 3) {
            snapshot(&r, &before, &len);
            scale_before = r.tr->scaler->scale;
        }
        mpt_trainer_step(r.tr);
        if (it == 3) {
            snapshot(&r, &after, &len2);
            ck_assert_uint_eq(len, len2);
            ck_assert_msg(memcmp(before, after, len) == 0, "a skipped step changed weights, masters or optimizer state");
            ck_assert_int_eq(r.tr->scaler->steps_skipped, 1);
            ck_assert_int_eq(r.tr->scaler->steps_taken, 3);
            ck_assert(r.tr->scaler->scale == scale_before * 0.5f);
        }
    }
    ck_assert_int_eq(r.tr->scaler->steps_taken, 5);
    ck_assert_int_eq(r.tr->scaler->steps_skipped, 1);
    /* what the trainer reports (the run's outputs): 6 steps, the injected one skipped */
    mpt_train_stats ts;
    mpt_trainer_stats(r.tr, &ts);
    ck_assert_int_eq(ts.steps_taken, 5);
    ck_assert_int_eq(ts.steps_skipped, 1);
    ck_assert_int_eq(ts.steps_nonfinite, 0);
    ck_assert(ts.scale == r.tr->scaler->scale);
    free(before);
    free(after);
    run_close(&r);
}
END_TEST

/* --nonfinite apply (static scaling): the injected overflow is applied, so it is a taken step (Adam's step count
 * advances, as torch.optim's step() without a GradScaler) and also counts in steps_nonfinite, never in
 * steps_skipped: steps_taken + steps_skipped == iterations, the invariant a checkpoint of the run must meet. */
START_TEST(test_injected_nonfinite_applied_counts_as_taken) {
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP16);
    cfg.loss_scaling = MPT_LOSS_SCALE_STATIC;
    cfg.init_scale = 1024.0f;
    cfg.nonfinite = MPT_NONFINITE_APPLY;
    cfg.optim.kind = MPT_OPTIM_ADAM;
    cfg.schedule.base_lr = 1e-3f;
    cfg.inject_nonfinite_step = 3;
    run r;
    run_open(&r, MPT_PRECISION_FP16, &cfg);
    int32_t idx[B];
    for (int it = 0; it < 5; it++) {
        for (int i = 0; i < B; i++) idx[i] = (int32_t)(it * B + i);
        mpt_trainer_gather(r.tr, r.data.train_images, r.data.train_labels, idx, r.data.dim, 0.0f, 1.0f);
        mpt_trainer_step(r.tr);
        const mpt_scaler_state *st = r.tr->scaler;
        ck_assert_int_eq((int)st->iteration, it + 1);
        ck_assert_int_eq(st->steps_taken, it + 1);
        ck_assert_int_eq(st->steps_skipped, 0);
        ck_assert_int_eq(st->steps_nonfinite, it >= 3 ? 1 : 0);
        ck_assert(st->scale == 1024.0f);
    }
    run_close(&r);
}
END_TEST

/* The library refuses --nonfinite apply with dynamic loss scaling itself, not only the command line (train.h: apply
 * needs loss scaling none or static; the dynamic scaler must skip the overflowing steps it backs off on). */
START_TEST(test_apply_with_dynamic_scaling_refused) {
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP16, 0, 0);
    mpt_graph *g = mpt_graph_create(be, &pol, B);
    int64_t shape[2] = {B, 16};
    mpt_softmax_xent(g, mpt_linear(g, mpt_input(g, 2, shape), 4, "fc"), "loss");
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP16);
    ck_assert_int_eq(cfg.loss_scaling, MPT_LOSS_SCALE_DYNAMIC);
    cfg.nonfinite = MPT_NONFINITE_APPLY;
    mpt_trainer *tr = NULL;
    ck_assert_int_eq(mpt_trainer_create(&tr, g, &cfg), MPT_ERR_ARG); /* the trainer owns (and frees) g */
    ck_assert_ptr_null(tr);
    ck_assert_ptr_nonnull(strstr(mpt_last_error(), "nonfinite apply"));
    mpt_backend_free(&be);
}
END_TEST

START_TEST(test_bf16_working_copy_is_rne_of_master) {
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_BF16);
    run r;
    run_open(&r, MPT_PRECISION_BF16, &cfg);
    run_epoch(&r, 0, 1.0f);
    int checked = 0;
    for (int p = 0; p < r.tr->n_params; p++) {
        mpt_tensor *w = r.tr->weight[p], *m = r.tr->master[p];
        ck_assert_int_eq(w->dtype, MPT_DTYPE_BF16);
        ck_assert_int_eq(m->dtype, MPT_DTYPE_F32);
        ck_assert_ptr_ne(w->data, m->data);
        const uint16_t *wd = w->data;
        const float *md = m->data;
        for (int64_t i = 0; i < mpt_tensor_numel(w); i++, checked++)
            ck_assert_msg(wd[i] == mpt_f32_to_bf16(md[i]), "%s[%lld]: working 0x%04x, RNE(master %a) 0x%04x", w->name,
                          (long long)i, wd[i], md[i], mpt_f32_to_bf16(md[i]));
    }
    ck_assert_int_gt(checked, 0);
    run_close(&r);
}
END_TEST

/* The trainer's update_out hook (the lost-update meter's input) only reads: bf16 with Adam, deltas requested
 * on every other step, trains bit-identically to the same run without; each parameter's update goes to its
 * FP32 master. */
START_TEST(test_update_out_changes_nothing) {
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_BF16);
    run r[2];
    unsigned char *snap[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        run_open(&r[k], MPT_PRECISION_BF16, &cfg);
        mpt_trainer *tr = r[k].tr;
        float **upd = calloc((size_t)tr->n_params, sizeof *upd);
        for (int p = 0; p < tr->n_params; p++) {
            ck_assert_int_eq(mpt_trainer_update_dtype(tr, p), MPT_DTYPE_F32);
            ck_assert_ptr_eq(mpt_trainer_update_target(tr, p), tr->master[p]);
            upd[p] = malloc(sizeof(float) * (size_t)mpt_tensor_numel(tr->weight[p]));
        }
        int32_t idx[B];
        for (int it = 0; it < 6; it++) {
            for (int i = 0; i < B; i++) idx[i] = (int32_t)(it * B + i);
            mpt_trainer_gather(tr, r[k].data.train_images, r[k].data.train_labels, idx, r[k].data.dim, 0.0f, 1.0f);
            tr->update_out = k == 1 && (it & 1) ? upd : NULL;
            mpt_trainer_step(tr);
            tr->update_out = NULL;
        }
        snapshot(&r[k], &snap[k], &len[k]);
        for (int p = 0; p < tr->n_params; p++) free(upd[p]);
        free(upd);
    }
    ck_assert_uint_eq(len[0], len[1]);
    ck_assert_msg(memcmp(snap[0], snap[1], len[0]) == 0, "a run with update_out set trained differently");
    for (int k = 0; k < 2; k++) {
        free(snap[k]);
        run_close(&r[k]);
    }
}
END_TEST

/* The backend's update_pass (one call for unscale, step count, learning rate, optimizer and scaler; CUDA fuses it
 * into two kernels) is used on exactly the steps where nothing between the optimizer and the scaler needs the calls
 * apart, and trains bit-identically to the separate calls. A counting update_pass (the CPU's own: the calls) on:
 * plain steps (every step), update deltas on odd steps (the even ones), --clip-norm (none), --nonfinite apply (none),
 * FP8 with its scale update between optimizer and scaler (none). Each run's weights, masters and optimizer state
 * against the same run with update_pass NULL: the trainer's separate calls. */
static int update_pass_calls;
static void counting_update_pass(mpt_backend *be, const mpt_update_pass_args *u) {
    update_pass_calls++;
    mpt_update_pass_as_calls(be, u);
}

START_TEST(test_update_pass_where_it_fits) {
    enum { STEPS = 6 };
    static const struct {
        const char *name;
        mpt_precision mode;
        int deltas_odd, clip, apply;
        int expect_calls;
    } cases[] = {
        {"bf16 plain", MPT_PRECISION_BF16, 0, 0, 0, STEPS},
        {"fp16 update deltas on odd steps", MPT_PRECISION_FP16, 1, 0, 0, STEPS / 2},
        {"fp32 clip-norm", MPT_PRECISION_FP32, 0, 1, 0, 0},
        {"fp16 nonfinite apply", MPT_PRECISION_FP16, 0, 0, 1, 0},
        {"fp8 (scale update after the optimizer)", MPT_PRECISION_FP8, 0, 0, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        unsigned char *snap[2] = {NULL, NULL};
        size_t len[2] = {0, 0};
        for (int k = 0; k < 2; k++) { /* k = 0: update_pass NULL (the separate calls); 1: counted */
            mpt_train_config cfg = mpt_train_config_default(cases[c].mode);
            cfg.optim.kind = MPT_OPTIM_ADAM;
            cfg.schedule.base_lr = 1e-3f;
            if (cases[c].clip) cfg.clip_norm = 0.5f;
            if (cases[c].apply) {
                cfg.loss_scaling = MPT_LOSS_SCALE_STATIC;
                cfg.init_scale = 1024.0f;
                cfg.nonfinite = MPT_NONFINITE_APPLY;
            }
            run r;
            run_open(&r, cases[c].mode, &cfg);
            mpt_trainer *tr = r.tr;
            if (cases[c].mode == MPT_PRECISION_FP8) ck_assert_int_gt(tr->g->n_fp8, 0);
            ck_assert_ptr_eq(r.be->update_pass, mpt_update_pass_as_calls); /* the CPU backend's */
            r.be->update_pass = k ? counting_update_pass : NULL;
            update_pass_calls = 0;
            float **upd = calloc((size_t)tr->n_params, sizeof *upd);
            for (int p = 0; p < tr->n_params; p++)
                upd[p] = malloc(sizeof(float) * (size_t)mpt_tensor_numel(mpt_trainer_update_target(tr, p)));
            int32_t idx[B];
            for (int it = 0; it < STEPS; it++) {
                for (int i = 0; i < B; i++) idx[i] = (int32_t)(it * B + i);
                mpt_trainer_gather(tr, r.data.train_images, r.data.train_labels, idx, r.data.dim, 0.0f, 1.0f);
                tr->update_out = cases[c].deltas_odd && (it & 1) ? upd : NULL;
                mpt_trainer_step(tr);
                tr->update_out = NULL;
            }
            if (k)
                ck_assert_msg(update_pass_calls == cases[c].expect_calls,
                              "%s: update_pass called %d times of %d steps, expected %d", cases[c].name,
                              update_pass_calls, STEPS, cases[c].expect_calls);
            ck_assert_int_eq((int)tr->scaler->iteration, STEPS);
            snapshot(&r, &snap[k], &len[k]);
            for (int p = 0; p < tr->n_params; p++) free(upd[p]);
            free(upd);
            run_close(&r);
        }
        ck_assert_uint_eq(len[0], len[1]);
        ck_assert_msg(memcmp(snap[0], snap[1], len[0]) == 0, "%s: update_pass trained differently from the calls",
                      cases[c].name);
        free(snap[0]);
        free(snap[1]);
    }
}
END_TEST

/* Weight gradients beside the data gradients (engine/backend.h mpt_gemm_args.beside and join; CUDA runs them on a
 * second stream with MPT_CUDA_WGRAD_STREAM=1): the graph marks exactly the weight-gradient GEMMs "beside", and joins
 * once per backward pass, after the last of them and before anything reads a gradient (the update pass, or the
 * unscale-and-check that starts the separate calls). A logging backend (the CPU's calls, each logged) trains an mlp
 * in fp32, bf16 and fp8 for 4 steps; the same run without the log trains to the same bits. */
static char beside_log[512];
static int beside_log_len, beside_bad_flag;
static void (*beside_real_gemm)(mpt_backend *, const mpt_gemm_args *);
static void (*beside_real_update_pass)(mpt_backend *, const mpt_update_pass_args *);
static void (*beside_real_unscale)(mpt_backend *, const mpt_param_slot *, int, int64_t, mpt_scaler_state *);
static void beside_put(char c) {
    if (beside_log_len < (int)sizeof beside_log - 1) beside_log[beside_log_len++] = c;
}
static void beside_gemm(mpt_backend *be, const mpt_gemm_args *a) {
    const size_t n = a->tag ? strlen(a->tag) : 0;
    const int wgrad = n >= 6 && strcmp(a->tag + n - 6, ".wgrad") == 0;
    if (a->beside != wgrad) beside_bad_flag = 1;
    beside_put(a->beside ? 'B' : 'g');
    beside_real_gemm(be, a);
}
static void beside_join(mpt_backend *be) {
    (void)be;
    beside_put('J');
}
static void beside_update_pass(mpt_backend *be, const mpt_update_pass_args *u) {
    beside_put('U');
    beside_real_update_pass(be, u);
}
static void beside_unscale(mpt_backend *be, const mpt_param_slot *slots, int count, int64_t numel,
                           mpt_scaler_state *st) {
    beside_put('U');
    beside_real_unscale(be, slots, count, numel, st);
}

START_TEST(test_wgrad_beside_joined_before_update) {
    enum { STEPS = 4 };
    const mpt_precision modes[] = {MPT_PRECISION_FP32, MPT_PRECISION_BF16, MPT_PRECISION_FP8};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        unsigned char *snap[2] = {NULL, NULL};
        size_t len[2] = {0, 0};
        for (int k = 0; k < 2; k++) { /* k = 0: the CPU backend as it is (join NULL); 1: logged */
            mpt_train_config cfg = mpt_train_config_default(modes[m]);
            cfg.optim.kind = MPT_OPTIM_ADAM;
            cfg.schedule.base_lr = 1e-3f;
            run r;
            run_open(&r, modes[m], &cfg);
            mpt_trainer *tr = r.tr;
            ck_assert_ptr_null(r.be->join); /* every CPU call runs in order */
            if (k) {
                beside_real_gemm = r.be->gemm;
                beside_real_update_pass = r.be->update_pass;
                beside_real_unscale = r.be->unscale_check_multi;
                r.be->gemm = beside_gemm;
                r.be->join = beside_join;
                r.be->update_pass = beside_update_pass;
                r.be->unscale_check_multi = beside_unscale;
            }
            int32_t idx[B];
            for (int it = 0; it < STEPS; it++) {
                for (int i = 0; i < B; i++) idx[i] = (int32_t)(it * B + i);
                mpt_trainer_gather(tr, r.data.train_images, r.data.train_labels, idx, r.data.dim, 0.0f, 1.0f);
                beside_log_len = 0;
                beside_bad_flag = 0;
                mpt_trainer_step(tr);
                if (!k) continue;
                beside_log[beside_log_len] = 0;
                const char *log = beside_log;
                ck_assert_msg(!beside_bad_flag, "%s step %d: a GEMM's beside flag is not (tag ends in .wgrad): %s",
                              mpt_precision_name(modes[m]), it, log);
                /* fc2.wgrad, fc1.wgrad beside; one join, after the last beside GEMM and before the first 'U' */
                const char *last_b = strrchr(log, 'B'), *j = strchr(log, 'J'), *u = strchr(log, 'U');
                ck_assert_msg(last_b && j && u && strchr(j + 1, 'J') == NULL && j > last_b && u > j,
                              "%s step %d: expected the beside GEMMs, then one join, then the update: %s",
                              mpt_precision_name(modes[m]), it, log);
                int n_b = 0;
                for (const char *p = log; *p; p++) n_b += *p == 'B';
                ck_assert_msg(n_b == 2, "%s step %d: %d beside GEMMs, expected 2 (fc1.wgrad, fc2.wgrad): %s",
                              mpt_precision_name(modes[m]), it, n_b, log);
            }
            snapshot(&r, &snap[k], &len[k]);
            run_close(&r);
        }
        ck_assert_uint_eq(len[0], len[1]);
        ck_assert_msg(memcmp(snap[0], snap[1], len[0]) == 0, "%s: the logged run trained differently",
                      mpt_precision_name(modes[m]));
        free(snap[0]);
        free(snap[1]);
    }
}
END_TEST

/* A backend whose step capture refuses to start (as CUDA's does under MPT_CUDA_SYNC_DEBUG=1): the trainer must
 * turn the step graph off for the run, say why in full (the reason below is as long as a real one from
 * kernels/cuda/graph.cu, whose end names the capture's final status), and train exactly as without it. */
#define REFUSAL_TAIL "(cudaErrorStreamCaptureInvalidated, 901)"
static mpt_status capture_refused(mpt_backend *be) {
    (void)be;
    return mpt_errorf(MPT_ERR_DEVICE, "test backend: recording refused: cudaStreamSynchronize(mpt_cuda_ctx_of(be)->"
                                      "stream) failed: operation not permitted when stream is capturing "
                                      "(cudaErrorStreamCaptureUnsupported, 900) (kernels/cuda/backend.cu:266); then "
                                      "cudaStreamEndCapture: operation failed due to a previous error during capture "
                                      REFUSAL_TAIL);
}

static mpt_status capture_end_unused(mpt_backend *be, void **out) {
    (void)be;
    (void)out;
    ck_abort_msg("capture_end called after capture_begin failed");
    return MPT_ERR_DEVICE;
}

static void replay_unused(mpt_backend *be, void *graph) {
    (void)be;
    (void)graph;
    ck_abort_msg("replay called without a recording");
}

START_TEST(test_step_graph_fallback) {
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP16);
    cfg.step_graph = 1;
    cfg.inject_nonfinite_step = 3;
    run r[2];
    unsigned char *snap[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        run_open(&r[k], MPT_PRECISION_FP16, &cfg);
        mpt_trainer *tr = r[k].tr;
        if (k == 1) {
            r[k].be->capture_begin = capture_refused;
            r[k].be->capture_end = capture_end_unused;
            r[k].be->replay = replay_unused;
            r[k].be->replay_free = replay_unused;
        }
        int32_t idx[B];
        for (int it = 0; it < 6; it++) {
            for (int i = 0; i < B; i++) idx[i] = (int32_t)(it * B + i);
            mpt_trainer_gather(tr, r[k].data.train_images, r[k].data.train_labels, idx, r[k].data.dim, 0.0f, 1.0f);
            mpt_trainer_step(tr);
        }
        char status[704]; /* as tools/run.h's cuda_graph */
        mpt_trainer_graph_status(tr, status, sizeof status);
        if (k == 0) {
            ck_assert_str_eq(status, "not applicable (cpu backend)");
            ck_assert_int_eq(tr->replay_off, 0);
        } else {
            ck_assert_int_eq(tr->replay_off, 1);
            ck_assert_msg(strstr(tr->replay_note, "test backend: recording refused") != NULL, "note: %s", tr->replay_note);
            ck_assert_msg(strncmp(status, "off: the step could not be recorded", 35) == 0, "status: %s", status);
            const size_t len_status = strlen(status), len_tail = strlen(REFUSAL_TAIL);
            ck_assert_msg(len_status > len_tail && strcmp(status + len_status - len_tail, REFUSAL_TAIL) == 0,
                          "the status must keep the whole reason, to its end: %s", status);
            /* the first step runs directly by design, the second tried to record */
            ck_assert_int_eq((int)tr->direct_steps, 2);
            ck_assert_int_eq((int)tr->captures, 0);
            ck_assert_int_eq((int)tr->replays, 0);
        }
        ck_assert_int_eq((int)tr->scaler->iteration, 6);
        ck_assert_int_eq(tr->scaler->steps_skipped, 1);
        snapshot(&r[k], &snap[k], &len[k]);
    }
    ck_assert_uint_eq(len[0], len[1]);
    ck_assert_msg(memcmp(snap[0], snap[1], len[0]) == 0, "the run whose recording failed trained differently");
    for (int k = 0; k < 2; k++) {
        free(snap[k]);
        run_close(&r[k]);
    }
}
END_TEST

/* A backend that "records" by letting the step's operations run (the CPU backend cannot defer them) and replays by
 * counting: enough to see when the trainer decides to record again. */
static int fake_replays;
static mpt_status fake_capture_begin(mpt_backend *be) {
    (void)be;
    return MPT_OK;
}
static mpt_status fake_capture_end(mpt_backend *be, void **out) {
    (void)be;
    *out = &fake_replays; /* any non-NULL handle */
    return MPT_OK;
}
static void fake_replay(mpt_backend *be, void *graph) {
    (void)be;
    ck_assert_ptr_eq(graph, &fake_replays);
    fake_replays++;
}
static void fake_replay_free(mpt_backend *be, void *graph) {
    (void)be;
    (void)graph;
}

/* A recording bakes in the backend workspace's address (GEMM/conv calls), the graph's loss-scale pointer and its
 * fusion setting: when any of them changes (here: more workspace reserved, as another graph on the same backend
 * does, which frees the old one), the next step must record again instead of replaying a graph that points into
 * freed memory or runs the old variant. */
START_TEST(test_step_graph_records_again) {
    mpt_train_config cfg = mpt_train_config_default(MPT_PRECISION_FP32);
    cfg.step_graph = 1;
    run r;
    run_open(&r, MPT_PRECISION_FP32, &cfg);
    mpt_trainer *tr = r.tr;
    r.be->capture_begin = fake_capture_begin;
    r.be->capture_end = fake_capture_end;
    r.be->replay = fake_replay;
    r.be->replay_free = fake_replay_free;
    fake_replays = 0;
    float other_scale = 1.0f;
    /* per step: the change made before it, and the recordings expected after it */
    static const struct { int change; int captures; } plan[] = {
        {0, 0}, /* the first step runs directly */
        {0, 1}, {0, 1},
        {1, 2}, /* more workspace reserved: the old one is freed */
        {0, 2},
        {2, 3}, /* fusion setting flipped */
        {3, 4}, /* loss scale read from elsewhere */
        {0, 4},
    };
    const int n_steps = (int)(sizeof plan / sizeof plan[0]);
    int32_t idx[B];
    for (int it = 0; it < n_steps; it++) {
        if (plan[it].change == 1)
            ck_assert_int_eq(mpt_backend_reserve_workspace(r.be, r.be->workspace_bytes + ((size_t)1 << 20)), MPT_OK);
        if (plan[it].change == 2) tr->g->fuse_epilogues = !tr->g->fuse_epilogues;
        if (plan[it].change == 3) tr->g->loss_scale = &other_scale;
        for (int i = 0; i < B; i++) idx[i] = (int32_t)(it * B + i);
        mpt_trainer_gather(tr, r.data.train_images, r.data.train_labels, idx, r.data.dim, 0.0f, 1.0f);
        mpt_trainer_step(tr);
        ck_assert_msg(tr->captures == plan[it].captures, "step %d: %lld recordings, expected %d", it,
                      (long long)tr->captures, plan[it].captures);
    }
    ck_assert_int_eq(tr->replay_off, 0);
    ck_assert_int_eq(fake_replays, n_steps - 1);
    run_close(&r);
}
END_TEST

/* Fused epilogues on vs off (engine/graph.h: BGRAD, and the linear -> relu fusions RELU_AUX_BIAS / DRELU_BGRAD) in
 * the trainer: mlp (two fully fused pairs), lenet5 (two) and cnn (forward-only fusion before its dropout), each
 * precision, a few steps with dropout: the same loss at every step and the same bits in every master, working
 * weight, optimizer state and gradient on the CPU, whose fused epilogues run the unfused loops. */
static void fused_run(const char *model, mpt_precision mode, int fuse, const mpt_mnist *d, float *losses, int steps,
                      unsigned char **buf, size_t *len) {
    run r;
    memset(&r, 0, sizeof r);
    r.be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(mode, mode == MPT_PRECISION_TF32, mode == MPT_PRECISION_TF32);
    mpt_graph *g = mpt_graph_create(r.be, &pol, 16);
    mpt_tensor *logits = NULL;
    ck_assert_msg(mpt_model_build(g, model, &logits) == MPT_OK, "%s: %s", model, mpt_last_error());
    mpt_softmax_xent(g, logits, "loss");
    g->fuse_epilogues = fuse;
    mpt_train_config cfg = mpt_train_config_default(mode);
    cfg.seed = 21;
    ck_assert_int_eq(mpt_trainer_create(&r.tr, g, &cfg), MPT_OK);
    int fused = 0;
    for (int i = 0; i < g->n_nodes; i++) fused += g->nodes[i]->fused_relu != NULL;
    ck_assert_int_eq(fused > 0, fuse); /* every model has a linear -> relu pair */
    int32_t idx[16];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 16; i++) idx[i] = (int32_t)((s * 16 + i * 7) % d->n_train);
        mpt_trainer_gather(r.tr, d->train_images, d->train_labels, idx, d->dim, 0.0f, 1.0f);
        mpt_trainer_step(r.tr);
        mpt_train_stats st;
        mpt_trainer_stats(r.tr, &st);
        losses[s] = st.loss;
    }
    unsigned char *snap;
    size_t n;
    snapshot(&r, &snap, &n);
    size_t gb = g->arena_bytes[MPT_MEM_GRAD];
    *buf = realloc(snap, n + gb);
    ck_assert_ptr_nonnull(*buf);
    memcpy(*buf + n, g->arena[MPT_MEM_GRAD], gb);
    *len = n + gb;
    mpt_trainer_free(&r.tr);
    mpt_backend_free(&r.be);
}

START_TEST(test_fused_epilogues_bit_identical) {
    static const char *const models[3] = {"mlp", "lenet5", "cnn"};
    static const mpt_precision modes[4] = {MPT_PRECISION_FP32, MPT_PRECISION_TF32, MPT_PRECISION_FP16,
                                           MPT_PRECISION_BF16};
    const char *model = models[_i / 4];
    mpt_precision mode = modes[_i % 4];
    mpt_mnist d;
    ck_assert_int_eq(mpt_synthetic_blobs(&d, 256, 32, 784, 10, 77), MPT_OK);
    enum { STEPS = 4 };
    float la[STEPS], lb[STEPS];
    unsigned char *a, *b;
    size_t na, nb;
    fused_run(model, mode, 0, &d, la, STEPS, &a, &na);
    fused_run(model, mode, 1, &d, lb, STEPS, &b, &nb);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(memcmp(&la[s], &lb[s], sizeof la[s]) == 0, "%s %s step %d: loss %a unfused, %a fused", model,
                      mpt_precision_name(mode), s, (double)la[s], (double)lb[s]);
    ck_assert_uint_eq(na, nb);
    size_t first = na;
    for (size_t i = 0; i < na && first == na; i++)
        if (a[i] != b[i]) first = i;
    ck_assert_msg(first == na, "%s %s: weights, masters, optimizer state or gradients differ at byte %zu of %zu",
                  model, mpt_precision_name(mode), first, na);
    free(a);
    free(b);
    mpt_mnist_free(&d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("amp_train");
    TCase *tc = tcase_create("amp_train");
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, test_all_modes_learn, 0, 4);
    tcase_add_test(tc, test_loss_scaling_rescues_fp16_underflow);
    tcase_add_loop_test(tc, test_injected_nonfinite_skips_step, 0, 3);
    tcase_add_test(tc, test_injected_nonfinite_applied_counts_as_taken);
    tcase_add_test(tc, test_apply_with_dynamic_scaling_refused);
    tcase_add_test(tc, test_bf16_working_copy_is_rne_of_master);
    tcase_add_test(tc, test_update_out_changes_nothing);
    tcase_add_test(tc, test_update_pass_where_it_fits);
    tcase_add_test(tc, test_wgrad_beside_joined_before_update);
    tcase_add_test(tc, test_evaluate_reads_once);
    tcase_add_test(tc, test_step_graph_fallback);
    tcase_add_test(tc, test_step_graph_records_again);
    tcase_add_loop_test(tc, test_fused_epilogues_bit_identical, 0, 12);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
