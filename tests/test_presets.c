/*
 * tests/test_presets.c - the loss-scaler presets of `--scaler` (tools/opts.c) on the engine's scaler: their scale
 * trajectories differ exactly where their parameters differ (the overflow lesson's plot draws them).
 *
 * Each preset is resolved as `mptrain train --precision fp16 --scaler P` resolves it (mpt_cli_apply, then
 * mpt_cli_resolve and mpt_cli_train_config), and its scaler is driven through the CPU backend's scaler_update by a
 * scripted gradient: a step overflows when S exceeds a threshold T(step). Scenarios, each aimed at one parameter:
 *   interval   T = 2^19 from each preset's own initial scale: growth every 2000 (pytorch, apex, mptrain, keras)
 *              or 1000 clean steps (deepspeed), keras one binade lower; nothing reaches a floor or 2^24;
 *   ceiling    no overflow, from 2^24: pytorch, keras and deepspeed grow past 2^24, apex and mptrain stay;
 *   floor      T = 2^-3, from 2^4: every step overflows until S <= T; mptrain and deepspeed stop at their floor 1,
 *              the others go on halving;
 *   hysteresis T = 2^18 from 2^22 with a clean step between overflows: deepspeed skips its first overflow at the
 *              same scale, then backs off at every one.
 * The test asserts that two presets whose resolved parameters differ have different trajectories in the scenario
 * aimed at a parameter in which they differ, and that two presets that differ only in parameters a scenario never
 * reaches have identical trajectories there (pytorch and apex in "interval": they differ only in the ceiling).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "engine/amp/scaler.h"
#include "engine/backend.h"
#include "harness.h"
#include "tools/cli.h"

#define STEPS 5000

static const char *const presets[] = {"mptrain", "pytorch", "apex", "deepspeed", "keras"};
#define NP ((int)(sizeof presets / sizeof presets[0]))

typedef enum scenario { SC_INTERVAL, SC_CEILING, SC_FLOOR, SC_HYSTERESIS, SC_COUNT } scenario;
static const char *const scenario_names[SC_COUNT] = {"interval", "ceiling", "floor", "hysteresis"};

/* The preset's train configuration, as the command line resolves it. */
static mpt_train_config preset_config(const char *name) {
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    ck_assert_int_eq(mpt_cli_apply(&o, MPT_OPT_PRECISION, "fp16"), MPT_OK);
    ck_assert_int_eq(mpt_cli_apply(&o, MPT_OPT_SCALER, name), MPT_OK);
    o.given[MPT_OPT_PRECISION - MPT_OPT_FIRST] = o.given[MPT_OPT_SCALER - MPT_OPT_FIRST] = 1;
    mpt_cli_resolve(&o);
    return mpt_cli_train_config(&o, 100);
}

/* The scale after each of STEPS steps of scenario sc, into traj. */
static void trajectory(const char *preset, scenario sc, float *traj) {
    mpt_train_config cfg = preset_config(preset);
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_scaler_state *st = be->alloc(be, sizeof *st);
    float init = sc == SC_INTERVAL ? cfg.init_scale : sc == SC_CEILING ? 0x1p24f : sc == SC_FLOOR ? 0x1p4f : 0x1p22f;
    ck_assert_int_eq(mpt_scaler_init(be, st, init, &cfg.scaler), MPT_OK);
    for (int i = 0; i < STEPS; i++) {
        int inf;
        switch (sc) {
        case SC_INTERVAL: inf = st->scale > 0x1p19f; break;
        case SC_CEILING: inf = 0; break;
        case SC_FLOOR: inf = st->scale > 0x1p-3f; break;
        default: inf = st->scale > 0x1p18f && i % 2 == 0; break; /* overflows with a clean step between */
        }
        st->found_inf = inf ? 1.0f : 0.0f;
        be->scaler_update(be, st, &cfg.scaler, 1);
        traj[i] = st->scale;
    }
    be->free(be, st);
    mpt_backend_free(&be);
}

/* Which parameter differs between two resolved presets; each scenario's parameter. */
static int differs_in(const mpt_train_config *a, const mpt_train_config *b, scenario sc) {
    switch (sc) {
    case SC_INTERVAL: return a->init_scale != b->init_scale || a->scaler.growth_interval != b->scaler.growth_interval;
    case SC_CEILING: return a->scaler.max_scale != b->scaler.max_scale && (a->scaler.max_scale <= 0x1p24f ||
                                                                          b->scaler.max_scale <= 0x1p24f);
    case SC_FLOOR: return a->scaler.min_scale != b->scaler.min_scale && (a->scaler.min_scale >= 0.125f ||
                                                                        b->scaler.min_scale >= 0.125f);
    default: return a->scaler.hysteresis != b->scaler.hysteresis;
    }
}

static int any_param_differs(const mpt_train_config *a, const mpt_train_config *b) {
    return a->init_scale != b->init_scale || a->scaler.growth_interval != b->scaler.growth_interval ||
           a->scaler.growth_factor != b->scaler.growth_factor || a->scaler.backoff_factor != b->scaler.backoff_factor ||
           a->scaler.hysteresis != b->scaler.hysteresis || a->scaler.min_scale != b->scaler.min_scale ||
           a->scaler.max_scale != b->scaler.max_scale;
}

static float traj[NP][SC_COUNT][STEPS];

START_TEST(test_trajectories_differ_where_parameters_differ) {
    mpt_train_config cfg[NP];
    for (int p = 0; p < NP; p++) {
        cfg[p] = preset_config(presets[p]);
        for (int sc = 0; sc < SC_COUNT; sc++) trajectory(presets[p], (scenario)sc, traj[p][sc]);
    }
    for (int a = 0; a < NP; a++)
        for (int b = a + 1; b < NP; b++) {
            ck_assert_msg(any_param_differs(&cfg[a], &cfg[b]), "presets %s and %s resolve to the same scaler",
                          presets[a], presets[b]);
            int told = 0; /* some scenario aims at a parameter in which they differ */
            for (int sc = 0; sc < SC_COUNT; sc++) {
                int same = memcmp(traj[a][sc], traj[b][sc], sizeof traj[a][sc]) == 0;
                if (differs_in(&cfg[a], &cfg[b], (scenario)sc)) {
                    ck_assert_msg(!same, "%s and %s differ in the %s parameter, but their trajectories are the same",
                                  presets[a], presets[b], scenario_names[sc]);
                    told = 1;
                }
            }
            ck_assert_msg(told, "no scenario separates %s and %s", presets[a], presets[b]);
        }
    /* parameters a scenario never reaches change nothing: pytorch and apex (ceiling only) agree in "interval" */
    ck_assert(memcmp(traj[1][SC_INTERVAL], traj[2][SC_INTERVAL], sizeof traj[1][SC_INTERVAL]) == 0);
}
END_TEST

/* The documented values (README's preset table, each system's source), so that a changed table is noticed. */
START_TEST(test_preset_values) {
    mpt_train_config ds = preset_config("deepspeed"), pt = preset_config("pytorch"), ke = preset_config("keras");
    mpt_train_config ap = preset_config("apex"), mp = preset_config("mptrain");
    ck_assert_float_eq(ds.init_scale, 65536.0f);
    ck_assert_int_eq(ds.scaler.growth_interval, 1000);
    ck_assert_int_eq(ds.scaler.hysteresis, 2);
    ck_assert_float_eq(ds.scaler.min_scale, 1.0f);
    ck_assert_float_eq(pt.init_scale, 65536.0f);
    ck_assert_int_eq(pt.scaler.growth_interval, 2000);
    ck_assert_float_eq(ke.init_scale, 32768.0f);
    ck_assert_float_eq(ap.scaler.max_scale, 16777216.0f);
    ck_assert_float_eq(mp.scaler.min_scale, 1.0f);
    ck_assert_float_eq(mp.scaler.max_scale, 16777216.0f);
    for (int p = 0; p < NP; p++) {
        mpt_train_config c = preset_config(presets[p]);
        ck_assert_float_eq(c.scaler.growth_factor, 2.0f);  /* every preset doubles ... */
        ck_assert_float_eq(c.scaler.backoff_factor, 0.5f); /* ... and halves */
    }
}
END_TEST

/* DeepSpeed's hysteresis in the "hysteresis" scenario, step by step: the first overflow (step 0) is skipped at
 * 2^22, the next one (step 2) backs off to 2^21, and so on at every overflow down to 2^18, where the threshold
 * stops them; pytorch backs off at step 0 already. */
START_TEST(test_deepspeed_hysteresis_steps) {
    trajectory("deepspeed", SC_HYSTERESIS, traj[0][0]);
    trajectory("pytorch", SC_HYSTERESIS, traj[1][0]);
    ck_assert_float_eq(traj[0][0][0], 0x1p22f);
    ck_assert_float_eq(traj[0][0][2], 0x1p21f);
    ck_assert_float_eq(traj[0][0][4], 0x1p20f);
    ck_assert_float_eq(traj[0][0][6], 0x1p19f);
    ck_assert_float_eq(traj[0][0][8], 0x1p18f);
    ck_assert_float_eq(traj[0][0][10], 0x1p18f);
    ck_assert_float_eq(traj[1][0][0], 0x1p21f);
    ck_assert_float_eq(traj[1][0][6], 0x1p18f);
}
END_TEST

static Suite *presets_suite(void) {
    Suite *s = suite_create("presets");
    TCase *tc = tcase_create("presets");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_preset_values);
    tcase_add_test(tc, test_trajectories_differ_where_parameters_differ);
    tcase_add_test(tc, test_deepspeed_hysteresis_steps);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return mpt_test_run(presets_suite()); }
