/*
 * tests/test_scaler.c - the loss scaler and the step skipping (engine/amp/scaler.h, the backend's unscale_check,
 * step_begin, optim_step skip and scaler_update), through the CPU backend's table.
 *
 * Mirrors PyTorch's own GradScaler tests (test/test_cuda.py: test_grad_scaling_update_scale,
 * test_grad_scaling_unscale) and adds what mptrain does beyond them: hysteresis, floor and ceiling, static
 * scaling, bit-identical skipped steps, the collapse warning. A state-machine model written here (plain C,
 * independent of engine/numerics.h) replays random sequences of clean and overflowing steps.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "engine/amp/scaler.h"
#include "engine/backend.h"
#include "engine/optim/schedule.h"
#include "harness.h"

static mpt_backend *be;
static mpt_scaler_state *st; /* backend memory (host memory for the CPU backend) */

static void setup(void) {
    be = mpt_backend_cpu_create();
    ck_assert_ptr_nonnull(be);
    st = be->alloc(be, sizeof *st);
    ck_assert_ptr_nonnull(st);
}

static void teardown(void) {
    be->free(be, st);
    mpt_backend_free(&be);
}

static mpt_scaler_params params(float growth, float backoff, int32_t interval, int32_t hysteresis, float lo, float hi) {
    mpt_scaler_params p = {growth, backoff, interval, hysteresis, lo, hi, 0};
    return p;
}

/* One scaler_update after a step that did (inf = 1) or did not overflow. */
static void update(const mpt_scaler_params *p, int inf, int dynamic) {
    st->found_inf = inf ? 1.0f : 0.0f;
    be->scaler_update(be, st, p, dynamic);
}

/* ---- PyTorch's update test ------------------------------------------------------------------------------ */

START_TEST(test_update_scale_pytorch) {
    /* test_grad_scaling_update_scale: growth 2, backoff 0.25, interval 2, from scale 4 */
    mpt_scaler_params p = params(2.0f, 0.25f, 2, 1, 1.0f, 16777216.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 4.0f, &p), MPT_OK);
    ck_assert_float_eq(st->scale, 4.0f);
    ck_assert_float_eq(st->inv_scale, 0.25f);
    ck_assert_float_eq(st->grad_mul, 1.0f);

    const int infs[3] = {0, 0, 1};
    const float scales[3] = {4.0f, 8.0f, 2.0f};
    const int32_t trackers[3] = {1, 0, 0};
    for (int i = 0; i < 3; i++) {
        st->sumsq = 123.0f;
        st->grad_mul = 0.5f;
        update(&p, infs[i], 1);
        ck_assert_msg(st->scale == scales[i], "step %d: scale %g, expected %g", i, st->scale, scales[i]);
        ck_assert_int_eq(st->growth_tracker, trackers[i]);
        ck_assert_float_eq(st->inv_scale, 1.0f / scales[i]);
        /* reset for the next step */
        ck_assert_float_eq(st->found_inf, 0.0f);
        ck_assert_float_eq(st->sumsq, 0.0f);
        ck_assert_float_eq(st->grad_mul, 1.0f);
    }
    ck_assert_int_eq(st->steps_skipped, 1);
    ck_assert_int_eq(st->floor_hits, 0);
}
END_TEST

/* ---- unscale and found_inf ------------------------------------------------------------------------------- */

/* Three gradient tensors of awkward sizes (vector tails, and more than one 1024-element block). */
#define NT 3
static const int64_t tsize[NT] = {7, 1031, 4099};

static void fill(float **g, float value) {
    for (int t = 0; t < NT; t++)
        for (int64_t i = 0; i < tsize[t]; i++) g[t][i] = value;
}

static void unscale_all(float **g) {
    for (int t = 0; t < NT; t++) be->unscale_check(be, g[t], tsize[t], st);
}

START_TEST(test_unscale_and_found_inf) {
    mpt_scaler_params p = mpt_scaler_params_default();
    ck_assert_int_eq(mpt_scaler_init(be, st, 4.0f, &p), MPT_OK);
    float *g[NT];
    for (int t = 0; t < NT; t++) g[t] = be->alloc(be, (size_t)tsize[t] * sizeof(float));

    /* test_grad_scaling_unscale: 4.0 * 0.25 is exactly 1.0, nothing found */
    fill(g, 4.0f);
    unscale_all(g);
    for (int t = 0; t < NT; t++)
        for (int64_t i = 0; i < tsize[t]; i++) ck_assert_msg(g[t][i] == 1.0f, "g[%d][%lld] = %a", t, (long long)i, g[t][i]);
    ck_assert_float_eq(st->found_inf, 0.0f);

    /* one non-finite value anywhere in any tensor: first, middle, last element; inf, -inf, NaN */
    const float bad[3] = {INFINITY, -INFINITY, NAN};
    for (int t = 0; t < NT; t++)
        for (int where = 0; where < 3; where++)
            for (int b = 0; b < 3; b++) {
                int64_t idx = where == 0 ? 0 : where == 1 ? tsize[t] / 2 : tsize[t] - 1;
                fill(g, 4.0f);
                g[t][idx] = bad[b];
                st->found_inf = 0.0f;
                unscale_all(g);
                ck_assert_msg(st->found_inf == 1.0f, "tensor %d element %lld = %g not caught", t, (long long)idx,
                              (double)bad[b]);
                ck_assert(!isfinite(g[t][idx]));       /* the scaled value is still written */
                ck_assert_float_eq(g[(t + 1) % NT][0], 1.0f); /* other elements unscaled as usual */
            }

    /* found_inf is sticky across tensors: a later clean tensor does not clear it */
    fill(g, 4.0f);
    st->found_inf = 0.0f;
    g[0][3] = NAN;
    unscale_all(g);
    ck_assert_float_eq(st->found_inf, 1.0f);

    /* FP16 overflow: 64000 + 64000 rounded to FP16 is inf, and is caught */
    float sum = 64000.0f + 64000.0f;
    float h = mpt_f16_to_f32(mpt_f32_to_f16(sum));
    ck_assert(isinf(h));
    fill(g, 4.0f);
    g[1][500] = h;
    st->found_inf = 0.0f;
    unscale_all(g);
    ck_assert_float_eq(st->found_inf, 1.0f);
    /* ... while FP16's largest finite value is not a false alarm */
    fill(g, mpt_f16_to_f32(0x7bffu)); /* 65504 */
    st->found_inf = 0.0f;
    unscale_all(g);
    ck_assert_float_eq(st->found_inf, 0.0f);
    ck_assert_float_eq(g[2][4098], 65504.0f * 0.25f);

    /* a finite value that overflows when unscaled (inv_scale > 1: scale below 1) is caught too */
    ck_assert_int_eq(mpt_scaler_init(be, st, 0.5f, &p), MPT_OK);
    fill(g, 1.0f);
    g[2][17] = 3e38f;
    unscale_all(g);
    ck_assert_float_eq(st->found_inf, 1.0f);

    for (int t = 0; t < NT; t++) be->free(be, g[t]);
}
END_TEST

/* ---- growth, backoff, hysteresis, floor, ceiling ---------------------------------------------------------- */

START_TEST(test_growth_stays_finite) {
    /* scale 1e38 with growth 16 would be inf: unchanged (PyTorch keeps the old scale), tracker reset */
    mpt_scaler_params p = params(16.0f, 0.5f, 1, 1, 1.0f, FLT_MAX);
    ck_assert_int_eq(mpt_scaler_init(be, st, 1e38f, &p), MPT_OK);
    update(&p, 0, 1);
    ck_assert(isfinite(st->scale));
    ck_assert_float_eq(st->scale, 1e38f);
    ck_assert_int_eq(st->growth_tracker, 0);
    ck_assert_float_eq(st->inv_scale, 1.0f / 1e38f);
    /* with a smaller scale the same growth applies */
    ck_assert_int_eq(mpt_scaler_init(be, st, 1e30f, &p), MPT_OK);
    update(&p, 0, 1);
    ck_assert_float_eq(st->scale, 1e30f * 16.0f);
}
END_TEST

START_TEST(test_hysteresis) {
    /* hysteresis 2 (DeepSpeed's delayed_shift, deepspeed/runtime/fp16/loss_scaler.py): the first overflow is
     * skipped at the same scale; from the second on, every overflow backs off, until the scale grows again */
    mpt_scaler_params p = params(2.0f, 0.5f, 3, 2, 1.0f, 16777216.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 1024.0f, &p), MPT_OK);
    ck_assert_int_eq(st->hysteresis_left, 2);
    update(&p, 1, 1);
    ck_assert_float_eq(st->scale, 1024.0f);
    ck_assert_int_eq(st->hysteresis_left, 1);
    ck_assert_int_eq(st->steps_skipped, 1);
    update(&p, 1, 1);
    ck_assert_float_eq(st->scale, 512.0f);
    ck_assert_int_eq(st->hysteresis_left, 1); /* not refilled by a backoff */
    ck_assert_int_eq(st->steps_skipped, 2);
    update(&p, 1, 1); /* backs off at once: the hysteresis is used up */
    ck_assert_float_eq(st->scale, 256.0f);
    ck_assert_int_eq(st->hysteresis_left, 1);
    update(&p, 0, 1); /* a clean step between overflows refills nothing either (consecutive_hysteresis False) */
    update(&p, 1, 1);
    ck_assert_float_eq(st->scale, 128.0f);
    /* clean steps grow after the interval and refill the hysteresis budget */
    update(&p, 0, 1);
    update(&p, 0, 1);
    ck_assert_float_eq(st->scale, 128.0f);
    ck_assert_int_eq(st->hysteresis_left, 1);
    update(&p, 0, 1);
    ck_assert_float_eq(st->scale, 256.0f);
    ck_assert_int_eq(st->hysteresis_left, 2);
    ck_assert_int_eq(st->growth_tracker, 0);
    update(&p, 1, 1); /* tolerated again */
    ck_assert_float_eq(st->scale, 256.0f);
    ck_assert_int_eq(st->hysteresis_left, 1);

    /* hysteresis 1 is PyTorch: every overflow backs off */
    mpt_scaler_params q = params(2.0f, 0.5f, 3, 1, 1.0f, 16777216.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 1024.0f, &q), MPT_OK);
    update(&q, 1, 1);
    ck_assert_float_eq(st->scale, 512.0f);
    update(&q, 1, 1);
    ck_assert_float_eq(st->scale, 256.0f);
}
END_TEST

START_TEST(test_floor_and_ceiling) {
    mpt_scaler_params p = params(2.0f, 0.5f, 1, 1, 1.0f, 16777216.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 2.0f, &p), MPT_OK);
    update(&p, 1, 1); /* 2 -> 1: reaches the floor without clamping */
    ck_assert_float_eq(st->scale, 1.0f);
    ck_assert_int_eq(st->floor_hits, 0);
    update(&p, 1, 1); /* 0.5 clamped to 1 */
    ck_assert_float_eq(st->scale, 1.0f);
    ck_assert_int_eq(st->floor_hits, 1);
    update(&p, 1, 1);
    ck_assert_float_eq(st->scale, 1.0f);
    ck_assert_int_eq(st->floor_hits, 2);
    ck_assert_int_eq(st->steps_skipped, 3);
    ck_assert_float_eq(st->inv_scale, 1.0f);

    /* ceiling: 2^23 -> 2^24 -> stays 2^24; growth 3 from 2^23 clamps to 2^24 */
    ck_assert_int_eq(mpt_scaler_init(be, st, 8388608.0f, &p), MPT_OK);
    update(&p, 0, 1);
    ck_assert_float_eq(st->scale, 16777216.0f);
    update(&p, 0, 1);
    ck_assert_float_eq(st->scale, 16777216.0f);
    mpt_scaler_params q = params(3.0f, 0.5f, 1, 1, 1.0f, 16777216.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 8388608.0f, &q), MPT_OK);
    update(&q, 0, 1);
    ck_assert_float_eq(st->scale, 16777216.0f);
    ck_assert_float_eq(st->inv_scale, 1.0f / 16777216.0f);

    /* a fractional floor works the same way */
    mpt_scaler_params r = params(2.0f, 0.25f, 1, 1, 0.125f, 1024.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 1.0f, &r), MPT_OK);
    update(&r, 1, 1);
    ck_assert_float_eq(st->scale, 0.25f);
    update(&r, 1, 1);
    ck_assert_float_eq(st->scale, 0.125f);
    ck_assert_int_eq(st->floor_hits, 1);
    ck_assert_float_eq(st->inv_scale, 8.0f);
}
END_TEST

START_TEST(test_static_scaling) {
    /* dynamic = 0: S fixed, but skipped steps are counted and the per-step fields reset */
    mpt_scaler_params p = params(2.0f, 0.5f, 1, 1, 1.0f, 16777216.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 128.0f, &p), MPT_OK);
    for (int i = 0; i < 5; i++) {
        st->grad_mul = 0.25f;
        st->sumsq = 7.0f;
        update(&p, i % 2, 0);
        ck_assert_float_eq(st->scale, 128.0f);
        ck_assert_float_eq(st->inv_scale, 1.0f / 128.0f);
        ck_assert_float_eq(st->found_inf, 0.0f);
        ck_assert_float_eq(st->grad_mul, 1.0f);
        ck_assert_float_eq(st->sumsq, 0.0f);
    }
    ck_assert_int_eq(st->steps_skipped, 2);
    ck_assert_int_eq(st->growth_tracker, 0);
    ck_assert_int_eq(st->floor_hits, 0);
}
END_TEST

START_TEST(test_step_begin) {
    mpt_scaler_params p = mpt_scaler_params_default();
    ck_assert_int_eq(mpt_scaler_init(be, st, 65536.0f, &p), MPT_OK);
    be->step_begin(be, st);
    ck_assert_int_eq(st->steps_taken, 1);
    st->found_inf = 1.0f;
    be->step_begin(be, st);
    ck_assert_int_eq(st->steps_taken, 1);
    st->found_inf = 0.0f;
    be->step_begin(be, st);
    ck_assert_int_eq(st->steps_taken, 2);
}
END_TEST

/* The per-step values a replayed step reads from backend memory: scaler_update advances the iteration (skipped
 * steps too), lr_update writes the schedule's value at it (the same bits as the host's mpt_lr_at), and dropout
 * with the iteration pointer draws the numbers of offset + iteration * stride. */
START_TEST(test_iteration_lr_and_dropout_offset) {
    mpt_scaler_params p = mpt_scaler_params_default();
    ck_assert_int_eq(mpt_scaler_init(be, st, 1024.0f, &p), MPT_OK);
    ck_assert_int_eq((int)st->iteration, 0);
    const mpt_lr_schedule sched[] = {
        {.kind = MPT_LR_CONSTANT, .base_lr = 3e-3f},
        {.kind = MPT_LR_STEP, .base_lr = 0.1f, .step_size = 4, .gamma = 0.3f},
        {.kind = MPT_LR_COSINE, .base_lr = 1e-2f, .min_lr = 1e-4f, .warmup_steps = 3, .total_steps = 17},
    };
    for (int k = 0; k < 25; k++) {
        for (size_t s = 0; s < sizeof sched / sizeof sched[0]; s++) {
            be->lr_update(be, st, &sched[s]);
            ck_assert_msg(st->lr == mpt_lr_at(&sched[s], k), "schedule %zu iteration %d: lr %.9g, host %.9g", s, k,
                          (double)st->lr, (double)mpt_lr_at(&sched[s], k));
        }
        st->found_inf = k % 5 == 2 ? 1.0f : 0.0f; /* skipped steps count as iterations */
        be->step_begin(be, st);
        update(&p, st->found_inf != 0.0f, 1);
        ck_assert_int_eq((int)st->iteration, k + 1);
    }
    ck_assert_int_eq(st->steps_skipped, 5);

    enum { N = 1000 };
    const uint64_t seed = 77, base = 123, stride = 4567;
    ck_assert_int_eq(mpt_backend_reserve_workspace(be, N * sizeof(float)), MPT_OK);
    static float x[N], y_dev[N], y_host[N];
    static uint8_t m_dev[N], m_host[N];
    for (int i = 0; i < N; i++) x[i] = (float)i - 500.0f;
    for (int64_t it = 0; it < 4; it++) {
        be->dropout_forward(be, y_dev, x, m_dev, MPT_DTYPE_F32, N, 0.3f, seed, base, &it, stride);
        be->dropout_forward(be, y_host, x, m_host, MPT_DTYPE_F32, N, 0.3f, seed, base + (uint64_t)it * stride, NULL,
                            0);
        ck_assert_msg(memcmp(m_dev, m_host, N) == 0 && memcmp(y_dev, y_host, sizeof y_dev) == 0,
                      "iteration %lld: dropout through the iteration pointer differs from the host offset",
                      (long long)it);
    }
    int64_t zero = 0, one = 1;
    be->dropout_forward(be, y_dev, x, m_dev, MPT_DTYPE_F32, N, 0.3f, seed, base, &zero, stride);
    be->dropout_forward(be, y_host, x, m_host, MPT_DTYPE_F32, N, 0.3f, seed, base, &one, stride);
    ck_assert_msg(memcmp(m_dev, m_host, N) != 0, "iterations 0 and 1 drew the same dropout mask");
}
END_TEST

/* Independent model of the state machine, in double: PyTorch's _amp_update_scale_ for growth and backoff, with
 * the hysteresis transcribed from DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/
 * loss_scaler.py, consecutive_hysteresis False):
 *     if overflow: if delayed_shift == 1 or cur_hysteresis == 1: back off    else: cur_hysteresis -= 1
 *     on growth:   cur_hysteresis = delayed_shift
 * plus mptrain's floor (with its counter) and ceiling. */
typedef struct model {
    double scale;
    int tracker, hyst, skipped, floor_hits;
} model;

static void model_update(model *m, const mpt_scaler_params *p, int inf) {
    if (inf) {
        m->skipped++;
        m->tracker = 0;
        if (p->hysteresis == 1 || m->hyst == 1) {
            double s = m->scale * p->backoff_factor;
            if (s < p->min_scale) {
                s = p->min_scale;
                m->floor_hits++;
            }
            m->scale = s;
        } else {
            m->hyst -= 1;
        }
    } else if (++m->tracker == p->growth_interval) {
        double s = m->scale * p->growth_factor;
        if (s <= FLT_MAX) m->scale = s < p->max_scale ? s : p->max_scale;
        m->tracker = 0;
        m->hyst = p->hysteresis;
    }
}

START_TEST(test_random_sequences_match_model) {
    tests_rng r = {0x5ca1e5ca1eull};
    const mpt_scaler_params ps[4] = {
        params(2.0f, 0.5f, 3, 1, 1.0f, 16777216.0f),
        params(2.0f, 0.25f, 2, 2, 1.0f, 4096.0f),
        params(4.0f, 0.5f, 5, 3, 0.5f, 1e6f),
        params(1.5f, 0.75f, 1, 1, 2.0f, 100.0f),
    };
    for (int c = 0; c < 4; c++) {
        const mpt_scaler_params *p = &ps[c];
        ck_assert_int_eq(mpt_scaler_init(be, st, 64.0f, p), MPT_OK);
        model m = {64.0, 0, p->hysteresis, 0, 0};
        int taken = 0;
        for (int i = 0; i < 400; i++) {
            int inf = tests_uniform(&r, 0, 1) < (i < 200 ? 0.3 : 0.8);
            st->found_inf = inf ? 1.0f : 0.0f;
            be->step_begin(be, st);
            taken += !inf;
            be->scaler_update(be, st, p, 1);
            model_update(&m, p, inf);
            /* every operation here is exact in FP32 except growth by 1.5 and backoff by 0.75: one FP32 rounding
             * (<= 2^-24 relative) per step, since the model restarts from the FP32 scale each step */
            double tol = fabs(m.scale) * 0x1p-24;
            ck_assert_msg(fabs((double)st->scale - m.scale) <= tol, "case %d step %d: scale %.9g, model %.9g", c, i,
                          (double)st->scale, m.scale);
            m.scale = st->scale; /* keep the model on the FP32 trajectory */
            ck_assert_int_eq(st->growth_tracker, m.tracker);
            ck_assert_int_eq(st->hysteresis_left, m.hyst);
            ck_assert_int_eq(st->steps_skipped, m.skipped);
            ck_assert_int_eq(st->floor_hits, m.floor_hits);
            ck_assert_int_eq(st->steps_taken, taken);
            ck_assert(st->scale >= p->min_scale && st->scale <= p->max_scale);
        }
    }
}
END_TEST

/* ---- skipped steps leave everything bit-identical ---------------------------------------------------------- */

START_TEST(test_skipped_step_bit_identical) {
    const int64_t n = 2500;
    tests_rng r = {42};
    float *master = be->alloc(be, n * sizeof(float)), *grad = be->alloc(be, n * sizeof(float));
    float *m = be->alloc(be, n * sizeof(float)), *v = be->alloc(be, n * sizeof(float));
    uint16_t *work = be->alloc(be, n * sizeof(uint16_t));
    float *copy = malloc(4 * n * sizeof(float));
    const mpt_optim_kind kinds[3] = {MPT_OPTIM_SGD, MPT_OPTIM_ADAM, MPT_OPTIM_ADAMW};
    const mpt_dtype wdt[2] = {MPT_DTYPE_F16, MPT_DTYPE_BF16};
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 2; d++) {
            for (int64_t i = 0; i < n; i++) {
                master[i] = (float)tests_uniform(&r, -1, 1);
                grad[i] = (float)tests_uniform(&r, -1, 1);
                m[i] = (float)tests_uniform(&r, -0.1, 0.1);
                v[i] = (float)tests_uniform(&r, 0, 0.01);
                mpt_store_f32(work, wdt[d], i, master[i]);
            }
            memcpy(copy, master, n * sizeof(float));
            memcpy(copy + n, m, n * sizeof(float));
            memcpy(copy + 2 * n, v, n * sizeof(float));
            memcpy(copy + 3 * n, work, n * sizeof(uint16_t));

            mpt_scaler_params p = mpt_scaler_params_default();
            ck_assert_int_eq(mpt_scaler_init(be, st, 65536.0f, &p), MPT_OK);
            st->steps_taken = 4; /* not the first step: SGD's buffer update path */
            st->found_inf = 1.0f;
            st->grad_mul = 0.5f;
            be->step_begin(be, st);
            ck_assert_int_eq(st->steps_taken, 4);
            mpt_optim_args a = {
                .h = {.kind = kinds[k], .lr = 0.1f, .momentum = 0.9f, .dampening = 0.0f, .weight_decay = 0.01f,
                      .nesterov = 1, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
                .n = n, .master = master, .grad = grad, .m = m, .v = kinds[k] == MPT_OPTIM_SGD ? NULL : v,
                .working = work, .working_dtype = wdt[d], .found_inf = &st->found_inf, .grad_mul = &st->grad_mul,
                .step = &st->steps_taken,
            };
            be->optim_step(be, &a);
            ck_assert_msg(memcmp(copy, master, n * sizeof(float)) == 0, "%d/%d: master changed", k, d);
            ck_assert_msg(memcmp(copy + n, m, n * sizeof(float)) == 0, "%d/%d: m changed", k, d);
            ck_assert_msg(memcmp(copy + 2 * n, v, n * sizeof(float)) == 0, "%d/%d: v changed", k, d);
            ck_assert_msg(memcmp(copy + 3 * n, work, n * sizeof(uint16_t)) == 0, "%d/%d: working copy changed", k, d);
            be->scaler_update(be, st, &p, 1);
            ck_assert_int_eq(st->steps_skipped, 1);
            ck_assert_float_eq(st->scale, 32768.0f);

            /* the same call without found_inf does change them (the test can fail) */
            be->step_begin(be, st);
            ck_assert_int_eq(st->steps_taken, 5);
            be->optim_step(be, &a);
            ck_assert(memcmp(copy, master, n * sizeof(float)) != 0);
            ck_assert(memcmp(copy + n, m, n * sizeof(float)) != 0);
            ck_assert(memcmp(copy + 3 * n, work, n * sizeof(uint16_t)) != 0);
        }
    free(copy);
    be->free(be, master);
    be->free(be, grad);
    be->free(be, m);
    be->free(be, v);
    be->free(be, work);
}
END_TEST

/* ---- host API: defaults, checks, init, read, warning ------------------------------------------------------- */

START_TEST(test_defaults_and_init) {
    mpt_scaler_params p = mpt_scaler_params_default();
    ck_assert_float_eq(p.growth_factor, 2.0f);
    ck_assert_float_eq(p.backoff_factor, 0.5f);
    ck_assert_int_eq(p.growth_interval, 2000);
    ck_assert_int_eq(p.hysteresis, 1);
    ck_assert_float_eq(p.min_scale, 1.0f);
    ck_assert_float_eq(p.max_scale, 16777216.0f);
    ck_assert_float_eq(MPT_SCALER_DEFAULT_INIT_SCALE, 65536.0f);
    ck_assert_int_eq(mpt_scaler_params_check(&p), MPT_OK);

    ck_assert_int_eq(mpt_scaler_init(be, st, MPT_SCALER_DEFAULT_INIT_SCALE, &p), MPT_OK);
    mpt_scaler_state h;
    mpt_scaler_read(be, st, &h);
    ck_assert_float_eq(h.scale, 65536.0f);
    ck_assert_float_eq(h.inv_scale, 1.0f / 65536.0f);
    ck_assert_float_eq(h.found_inf, 0.0f);
    ck_assert_float_eq(h.grad_mul, 1.0f);
    ck_assert_float_eq(h.sumsq, 0.0f);
    ck_assert_int_eq(h.growth_tracker, 0);
    ck_assert_int_eq(h.hysteresis_left, 1);
    ck_assert_int_eq(h.steps_taken, 0);
    ck_assert_int_eq(h.steps_skipped, 0);
    ck_assert_int_eq(h.floor_hits, 0);

    const float bad_init[4] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(mpt_scaler_init(be, st, bad_init[i], &p), MPT_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(mpt_last_error(), "initial loss scale"));
    }
    struct { mpt_scaler_params p; const char *field; } bad[] = {
        {params(0.5f, 0.5f, 10, 1, 1, 2), "growth_factor"},
        {params(INFINITY, 0.5f, 10, 1, 1, 2), "growth_factor"},
        {params(2, 0.0f, 10, 1, 1, 2), "backoff_factor"},
        {params(2, 1.5f, 10, 1, 1, 2), "backoff_factor"},
        {params(2, 0.5f, 0, 1, 1, 2), "growth_interval"},
        {params(2, 0.5f, 10, 0, 1, 2), "hysteresis"},
        {params(2, 0.5f, 10, 1, 0, 2), "min_scale"},
        {params(2, 0.5f, 10, 1, 4, 2), "max_scale"},
        {params(2, 0.5f, 10, 1, 1, INFINITY), "max_scale"},
    };
    /* the closed ends of the documented ranges (scaler.h) are accepted: growth_factor 1, backoff_factor 1,
     * min_scale == max_scale; a scaler with both factors 1 keeps its scale through overflows and growth */
    const mpt_scaler_params edge[] = {params(1.0f, 0.5f, 10, 1, 1, 2), params(2, 1.0f, 10, 1, 1, 2),
                                      params(2, 0.5f, 10, 1, 4, 4), params(1.0f, 1.0f, 1, 1, 1, 1024)};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        ck_assert_msg(mpt_scaler_params_check(&edge[i]) == MPT_OK, "edge case %zu refused: %s", i, mpt_last_error());
        ck_assert_int_eq(mpt_scaler_init(be, st, 4.0f, &edge[i]), MPT_OK);
    }
    for (int i = 0; i < 6; i++) {
        update(&edge[3], i % 2, 1);
        ck_assert_float_eq(st->scale, 4.0f);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(mpt_scaler_params_check(&bad[i].p), MPT_ERR_ARG);
        ck_assert_msg(strstr(mpt_last_error(), bad[i].field) != NULL, "case %zu: '%s' does not name %s", i,
                      mpt_last_error(), bad[i].field);
        ck_assert_int_eq(mpt_scaler_init(be, st, 1.0f, &bad[i].p), MPT_ERR_ARG);
    }
}
END_TEST

START_TEST(test_collapse_warning) {
    /* every step overflows: the scale walks down 8 -> 4 -> 2 -> 1, then each backoff hits the floor */
    mpt_scaler_params p = params(2.0f, 0.5f, 100, 1, 1.0f, 16777216.0f);
    ck_assert_int_eq(mpt_scaler_init(be, st, 8.0f, &p), MPT_OK);
    mpt_scaler_watch w;
    mpt_scaler_watch_init(&w, 5);
    char msg[512];
    mpt_scaler_state h;
    int warned_at = -1, warnings = 0;
    for (int i = 0; i < 20; i++) {
        st->found_inf = 1.0f;
        be->step_begin(be, st);
        be->scaler_update(be, st, &p, 1);
        mpt_scaler_read(be, st, &h);
        msg[0] = 0;
        if (mpt_scaler_watch_check(&w, &h, &p, msg, sizeof msg)) {
            warnings++;
            if (warned_at < 0) warned_at = i;
            ck_assert_ptr_nonnull(strstr(msg, "loss scale collapsed"));
            ck_assert_ptr_nonnull(strstr(msg, "min_scale=1"));
        }
    }
    /* floor hits start at step 3 (0-based: 8->4, 4->2, 2->1 are not clamped); the 5th is step 7 */
    ck_assert_int_eq(warned_at, 7);
    ck_assert_int_eq(warnings, 1);
    ck_assert_int_eq(h.floor_hits, 17);

    /* one applied step ends the run; a new run of 5 warns again */
    st->found_inf = 0.0f;
    be->step_begin(be, st);
    be->scaler_update(be, st, &p, 1);
    mpt_scaler_read(be, st, &h);
    ck_assert_int_eq(mpt_scaler_watch_check(&w, &h, &p, msg, sizeof msg), 0);
    for (int i = 0; i < 5; i++) {
        st->found_inf = 1.0f;
        be->step_begin(be, st);
        be->scaler_update(be, st, &p, 1);
        mpt_scaler_read(be, st, &h);
        ck_assert_int_eq(mpt_scaler_watch_check(&w, &h, &p, NULL, 0), i == 4);
    }

    /* overflows that the floor does not clamp never warn */
    ck_assert_int_eq(mpt_scaler_init(be, st, 1e30f, &p), MPT_OK);
    mpt_scaler_watch_init(&w, 1);
    for (int i = 0; i < 50; i++) {
        st->found_inf = 1.0f;
        be->step_begin(be, st);
        be->scaler_update(be, st, &p, 1);
        mpt_scaler_read(be, st, &h);
        ck_assert_int_eq(mpt_scaler_watch_check(&w, &h, &p, msg, sizeof msg), 0);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("scaler");
    TCase *tc = tcase_create("scaler");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_update_scale_pytorch);
    tcase_add_test(tc, test_unscale_and_found_inf);
    tcase_add_test(tc, test_growth_stays_finite);
    tcase_add_test(tc, test_hysteresis);
    tcase_add_test(tc, test_floor_and_ceiling);
    tcase_add_test(tc, test_static_scaling);
    tcase_add_test(tc, test_step_begin);
    tcase_add_test(tc, test_iteration_lr_and_dropout_offset);
    tcase_add_test(tc, test_random_sequences_match_model);
    tcase_add_test(tc, test_skipped_step_bit_identical);
    tcase_add_test(tc, test_defaults_and_init);
    tcase_add_test(tc, test_collapse_warning);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
