/*
 * tools/lab/lesson_overflow.c - lesson `overflow`: FP16's largest value, 65504, in action.
 *
 * Plan (all fp16, seed 0, batch 16 so that the run has the thousands of steps a growth interval needs, the loss
 * scale read every step):
 *   1. a static loss scale S that is too large (default 2^24: scaled gradients of the first steps reach 65520, half
 *      an ulp above FP16's largest finite 65504, and round to inf), skipping every step that overflows;
 *   2. the dynamic scaler presets of --scaler (tools/opts.c: mptrain, PyTorch GradScaler, Apex, DeepSpeed, Keras
 *      LossScaleOptimizer), each started from its own documented initial scale times S / 2^16 (so from 2^24, and
 *      Keras from 2^23: every one of them starts too high; clamped to [1, 2^24], the range --loss-scale takes),
 *      with the same seed and data order.
 * Every preset doubles after its growth interval and halves on overflow; they differ in the initial scale (Keras
 * 2^15), the growth interval (DeepSpeed 1000 clean steps, the others 2000), the hysteresis (DeepSpeed skips the
 * first overflow since the scale last grew at the same scale), the floor (mptrain and DeepSpeed 1) and the
 * ceiling (mptrain and Apex 2^24). The report lists them, says which of them the run reached, and draws each
 * group of identical trajectories as one line whose key names every preset in it ("pytorch = apex = mptrain").
 * The bound (tools/sentences.h, mpt_text_overflow_bound): with a mean loss over a batch of B the logits' gradient of
 * an example with probability p on its label is S (p - 1) / B in that coordinate, so S < 65520 B / (1 - p) keeps it
 * finite, and 2^floor(log2(65520 B)) is the largest power of two no such gradient can overflow at (2^19 for B = 16);
 * the report checks it against the scale the dynamic runs settled at.
 * tests/test_presets.c checks that the trajectories differ exactly where these parameters differ.
 * Criterion: the effect is observed when the static run skipped steps (found_inf) and every dynamic run ended
 * below where it started (it backed off).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lab/lab.h"
#include "tools/sentences.h"

#define N_PRESETS 5
static const char *const presets[N_PRESETS] = {"pytorch", "apex", "mptrain", "keras", "deepspeed"};

typedef struct run_out {
    char name[32];
    double acc, final_scale, start;
    int skipped;
    int64_t steps;
    mpt_cli_opts cfg;  /* the preset's resolved settings */
    int same_as;       /* index of an earlier run with the same trajectory, or -1 */
} run_out;

/* The numbers of a finished run (frees it). */
static void read_run(mpt_run_result *r, const char *name, run_out *o) {
    snprintf(o->name, sizeof o->name, "%s", name);
    o->acc = 100.0 * r->final_test_acc;
    o->final_scale = r->final_scale;
    o->skipped = r->steps_skipped;
    o->steps = r->iterations;
    mpt_run_result_free(r);
}

/* The loss scale after every step of a run, from its metrics.csv (logged every step): s[0..n). */
static mpt_status read_scales(const mpt_lab_ctx *c, const char *run, double **s, int64_t *n) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%.64s/metrics.csv", c->dir, run);
    FILE *f = fopen(path, "r");
    if (!f) return mpt_errorf(MPT_ERR_IO, "%s: cannot read", path);
    char line[512];
    int64_t cap = 0, cnt = 0;
    double *v = NULL;
    mpt_status st = MPT_OK;
    while (st == MPT_OK && fgets(line, sizeof line, f)) { /* step,epoch,loss,lr,loss_scale,steps_skipped */
        if (line[0] < '0' || line[0] > '9') continue;
        char *save = NULL, *tok = strtok_r(line, ",\n", &save);
        for (int col = 1; tok && col <= 4; col++) tok = strtok_r(NULL, ",\n", &save);
        if (!tok) continue;
        if (cnt == cap) {
            cap = cap ? 2 * cap : 1024;
            double *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) st = mpt_errorf(MPT_ERR_NOMEM, "%s: no memory", path);
            else v = nv;
        }
        if (st == MPT_OK) v[cnt++] = strtod(tok, NULL);
    }
    fclose(f);
    if (st != MPT_OK) {
        free(v);
        return st;
    }
    *s = v;
    *n = cnt;
    return MPT_OK;
}

static const char *scale_text(char *b, size_t n, double v) {
    if (v >= 3.0e38) snprintf(b, n, "none");
    else if (v <= 1.2e-38) snprintf(b, n, "none");
    else if (v == 1.0) snprintf(b, n, "1");
    else if (v > 0 && v == ldexp(1.0, (int)lround(log2(v)))) snprintf(b, n, "2^%ld", lround(log2(v)));
    else snprintf(b, n, "%g", v);
    return b;
}

static mpt_status run(mpt_lab_ctx *c) {
    double S;
    MPT_TRY(mpt_lab_param(c, "scale", 16777216.0, &S));
    if (!(S >= 1.0 && S <= 16777216.0))
        return mpt_errorf(MPT_ERR_ARG, "--param scale: expected a number in [1, 2^24], found %g", S);
    const char *batch;
    MPT_TRY(mpt_lab_param_flag(c, "batch", "16", MPT_OPT_BATCH_SIZE, &batch));
    double bv;
    MPT_TRY(mpt_lab_param(c, "batch", 16.0, &bv));
    if (!(bv >= 1.0 && bv <= 65536.0 && bv == floor(bv)))
        return mpt_errorf(MPT_ERR_ARG, "--param batch: expected an integer in [1, 65536], found %g", bv);
    MPT_LAB_PARAMS_CHECKED(c);
    char st[64], dy[N_PRESETS][64];
    snprintf(st, sizeof st, "static:%.17g", S);
    run_out ro[1 + N_PRESETS];
    memset(ro, 0, sizeof ro);
    ro[0].start = S;
    const char *fs[] = {"--precision", "fp16", "--loss-scale", st, "--log-every", "1", "--batch-size", batch, NULL};
    const char *fd[N_PRESETS][11];
    mpt_lab_run runs[1 + N_PRESETS] = {{"static", fs}};
    static mpt_run_result res[1 + N_PRESETS];
    for (int i = 0; i < N_PRESETS; i++) { /* the static run and the presets are independent: one batch */
        run_out *o = &ro[1 + i];
        mpt_cli_opts_default(&o->cfg);
        MPT_TRY(mpt_cli_apply(&o->cfg, MPT_OPT_PRECISION, "fp16"));
        MPT_TRY(mpt_cli_apply(&o->cfg, MPT_OPT_SCALER, presets[i]));
        o->cfg.given[MPT_OPT_PRECISION - MPT_OPT_FIRST] = o->cfg.given[MPT_OPT_SCALER - MPT_OPT_FIRST] = 1;
        mpt_cli_resolve(&o->cfg);
        o->start = o->cfg.loss_scale_value * (S / 65536.0);
        o->start = o->start < 1.0 ? 1.0 : o->start > 16777216.0 ? 16777216.0 : o->start; /* --loss-scale's range */
        snprintf(dy[i], sizeof dy[i], "dynamic:%.17g", o->start);
        const char *f[] = {"--precision", "fp16", "--loss-scale", dy[i], "--scaler", presets[i], "--log-every", "1",
                           "--batch-size", batch, NULL};
        memcpy(fd[i], f, sizeof f);
        runs[1 + i] = (mpt_lab_run){presets[i], fd[i]};
    }
    MPT_TRY(mpt_lab_train_batch(c, runs, 1 + N_PRESETS, res));
    for (int i = 0; i <= N_PRESETS; i++) read_run(&res[i], runs[i].name, &ro[i]);

    /* the trajectories, and which of them are identical */
    double *traj[1 + N_PRESETS] = {NULL};
    int64_t len[1 + N_PRESETS] = {0};
    mpt_status s = MPT_OK;
    for (int i = 0; i <= N_PRESETS && s == MPT_OK; i++) s = read_scales(c, ro[i].name, &traj[i], &len[i]);
    for (int i = 0; i <= N_PRESETS; i++) {
        ro[i].same_as = -1;
        for (int k = 1; s == MPT_OK && i > 0 && k < i && ro[i].same_as < 0; k++)
            if (ro[k].same_as < 0 && len[k] == len[i] && ro[k].start == ro[i].start &&
                memcmp(traj[k], traj[i], (size_t)len[i] * sizeof **traj) == 0)
                ro[i].same_as = k;
    }
    /* what the dynamic runs reached: the highest and lowest scale of all, for the parameters' table */
    double lo = INFINITY, hi = 0.0;
    for (int i = 1; i <= N_PRESETS; i++)
        for (int64_t k = 0; k < len[i]; k++) {
            lo = fmin(lo, traj[i][k]);
            hi = fmax(hi, traj[i][k]);
        }
    /* where the dynamic runs settled: the scale each held for the most steps (the same for all, or 0); and their
     * backoffs (a step whose scale is below the one before it) from above and from at or below the bound's power of
     * two, 2^floor(log2(65520 B)) */
    double settled = -1.0, p2 = ldexp(1.0, (int)floor(log2(65520.0 * bv)));
    if (p2 == 65520.0 * bv) p2 /= 2.0;
    int back_above = 0, back_below = 0;
    for (int i = 1; i <= N_PRESETS; i++) {
        if (ro[i].same_as > 0) continue; /* an identical trajectory counts once */
        double mode = 0.0;
        int64_t best = 0;
        for (int64_t k = 0; k < len[i];) {
            int64_t j = k;
            while (j < len[i] && traj[i][j] == traj[i][k]) j++;
            int64_t held = 0; /* steps at this scale over the whole run */
            for (int64_t q = 0; q < len[i]; q++) held += traj[i][q] == traj[i][k];
            if (held > best) best = held, mode = traj[i][k];
            k = j;
        }
        settled = settled < 0.0 ? mode : settled == mode ? settled : 0.0;
        for (int64_t k = 0; k < len[i]; k++) {
            const double before = k ? traj[i][k - 1] : ro[i].start;
            if (traj[i][k] < before) *(before > p2 ? &back_above : &back_below) += 1;
        }
    }
    char bound_text[900];
    mpt_text_overflow_bound(bound_text, sizeof bound_text, (int)bv, settled < 0.0 ? 0.0 : settled, back_above,
                            back_below);
    FILE *dat = s == MPT_OK ? mpt_lab_open(c, "overflow.dat") : NULL;
    if (s == MPT_OK && !dat) s = MPT_ERR_IO;
    for (int i = 0; dat && i <= N_PRESETS; i++) { /* one block per run: step 0 = the initial scale, then after each step */
        fprintf(dat, "%s# %s: step loss_scale\n0 %.9g\n", i ? "\n\n" : "", ro[i].name, ro[i].start);
        for (int64_t k = 0; k < len[i]; k++)
            if (k == len[i] - 1 || k == 0 || traj[i][k] != traj[i][k - 1] || traj[i][k] != traj[i][k + 1])
                fprintf(dat, "%lld %.9g\n", (long long)k + 1, traj[i][k]);
        if (len[i] > 0) /* the last level drawn to the right edge of the plot */
            fprintf(dat, "%lld %.9g\n", (long long)(len[i] + len[i] / 50 + 1), traj[i][len[i] - 1]);
    }
    for (int i = 0; i <= N_PRESETS; i++) free(traj[i]);
    if (dat) {
        char path[MPT_CLI_PATH + 64];
        snprintf(path, sizeof path, "%s/overflow.dat", c->dir);
        mpt_status sc = mpt_outdir_close_written(dat, path);
        if (s == MPT_OK) s = sc;
    }
    MPT_TRY(s);

    int backed_off = 1;
    for (int i = 1; i <= N_PRESETS; i++) backed_off &= ro[i].final_scale < ro[i].start;
    c->observed = ro[0].skipped > 0 && backed_off;
    char dyn[1400] = "", b1[32], b2[32];
    size_t k = 0;
    for (int i = 1; i <= N_PRESETS && k < sizeof dyn; i++) {
        if (ro[i].same_as > 0)
            k += (size_t)snprintf(dyn + k, sizeof dyn - k, "; %s identical to %s", ro[i].name, ro[ro[i].same_as].name);
        else
            k += (size_t)snprintf(dyn + k, sizeof dyn - k, "%s%s from %s: %d skipped, %s at the end, %.2f%%",
                                  i > 1 ? "; " : "", ro[i].name, scale_text(b1, sizeof b1, ro[i].start), ro[i].skipped,
                                  scale_text(b2, sizeof b2, ro[i].final_scale), ro[i].acc);
    }
    if (c->observed)
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Observed: with a static loss scale of 2^%.0f scaled FP16 gradients reached 65520 and rounded to inf "
                 "in %d of %lld steps, every one skipped (test accuracy %.2f%%); the dynamic scalers, each started "
                 "from its own initial scale times 2^%.0f, backed off until gradients fit (%s). %s",
                 log2(S), ro[0].skipped, (long long)ro[0].steps, ro[0].acc, log2(S / 65536.0), dyn, bound_text);
    else
        snprintf(c->conclusion, sizeof c->conclusion,
                 "Not observed: with a loss scale of 2^%g the static run skipped %d of %lld steps (test accuracy "
                 "%.2f%%)%s; the dynamic scalers: %s.",
                 log2(S), ro[0].skipped, (long long)ro[0].steps, ro[0].acc,
                 ro[0].skipped == 0 ? ": the scaled gradients stayed below 65520" : ", but not every dynamic scaler backed off",
                 dyn);

    FILE *gp = mpt_lab_open(c, "overflow.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 820, "overflow.png");
    fprintf(gp, "set multiplot layout 2,1 title 'fp16 loss scale after each step (batch %s, same seed and data): static "
                "2^{%.0f}; each dynamic preset from its initial scale x 2^{%.0f}'\n"
                "set xlabel 'step'\nset ylabel 'loss scale'\nset logscale y 2\nset format y '2^{%%L}'\nset grid\n"
                "set key right center box opaque\nset offsets 0, 0, graph 0.05, graph 0.05\n",
            batch, log2(S), log2(S / 65536.0));
    for (int panel = 0; panel < 2; panel++) {
        if (panel == 0) fprintf(gp, "set title 'the whole run'\nplot ");
        else fprintf(gp, "set title 'the first 24 steps (step 0: the initial scale)'\nset xrange [0:24]\nset xtics 2\n"
                         "unset key\nplot ");
        /* a group of identical trajectories is one line, drawn once, whose key names every run in it */
        for (int i = 0, drawn = 0; i <= N_PRESETS; i++) {
            if (ro[i].same_as > 0) continue;
            char title[256];
            if (i == 0) snprintf(title, sizeof title, "title 'static (%d skipped)'", ro[0].skipped);
            else {
                int kt = snprintf(title, sizeof title, "title '%.31s", ro[i].name), members = 1;
                for (int j = i + 1; j <= N_PRESETS && kt > 0 && (size_t)kt < sizeof title; j++)
                    if (ro[j].same_as == i) {
                        kt += snprintf(title + kt, sizeof title - (size_t)kt, " = %.31s", ro[j].name);
                        members++;
                    }
                if (kt > 0 && (size_t)kt < sizeof title)
                    snprintf(title + kt, sizeof title - (size_t)kt, "%s (%d skipped)'",
                             members > 1 ? ": identical trajectories, one line" : "", ro[i].skipped);
            }
            fprintf(gp, "%s'overflow.dat' index %d using 1:2 with steps lw %.1f lt %d %s", drawn++ ? ", \\\n     " : "",
                    i, i == 0 ? 2.0 : 3.0, i + 1, panel ? "notitle" : title);
        }
        fprintf(gp, "\n");
    }
    fprintf(gp, "unset multiplot\n");
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "overflow.gp", plot_buf, sizeof plot_buf);

    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_overflow, &f));
    fprintf(f, "FP16's largest finite value is 65504; rounding to nearest takes everything below 65520 (half an ulp, "
               "16, above it) down to 65504, and 65520 and up to inf (`mptrain formats 65504 65519 65520`). Backward "
               "multiplies the loss by the loss scale S, so every gradient is S times larger; when one of them "
               "reaches 65520 it becomes inf, the unscale pass sets found_inf, and the optimizer step is skipped. A static S never changes: it "
               "overflows again on the next step. A dynamic scaler multiplies S by its backoff factor at an "
               "overflow and grows it again after a number of clean steps (its growth interval).\n\n"
               "| run | loss scale | steps | skipped steps | final scale | final test acc |\n|---|---|---:|---:|---:|---:|\n");
    for (int i = 0; i <= N_PRESETS; i++) {
        char a[32], b[32];
        fprintf(f, "| %s | %s from %s | %lld | %d | %s | %.2f%% |\n", ro[i].name, i ? "dynamic" : "static",
                scale_text(a, sizeof a, ro[i].start), (long long)ro[i].steps, ro[i].skipped,
                scale_text(b, sizeof b, ro[i].final_scale), ro[i].acc);
    }
    fprintf(f, "\n## What differs between the presets\n\nEvery preset doubles S after its growth interval and halves it "
               "at an overflow. They differ in the rest (`mptrain train --help` names each system's source):\n\n"
               "| preset | initial scale | growth interval | hysteresis | floor | ceiling | this run |\n"
               "|---|---:|---:|---:|---:|---:|---|\n");
    for (int i = 1; i <= N_PRESETS; i++) {
        const mpt_cli_opts *o = &ro[i].cfg;
        char a[32], fl[32], ce[32];
        fprintf(f, "| %s | %s | %d | %d | %s | %s | ", ro[i].name, scale_text(a, sizeof a, o->loss_scale_value),
                o->growth_interval, o->hysteresis, scale_text(fl, sizeof fl, o->scale_floor),
                scale_text(ce, sizeof ce, o->scale_ceiling));
        if (ro[i].same_as > 0) fprintf(f, "identical to %s |\n", ro[ro[i].same_as].name);
        else fprintf(f, "%d skipped, ends at %s |\n", ro[i].skipped, scale_text(a, sizeof a, ro[i].final_scale));
    }
    char lo_t[32], hi_t[32];
    fprintf(f, "\nIn this run the dynamic scales stayed between %s and %s, over %lld steps: a floor of 1 or a ceiling of "
               "2^24 changes a trajectory only when the scale reaches it, and a growth interval only once that many "
               "clean steps have passed since the last overflow. Presets that differ only in parameters this run "
               "never reached have identical trajectories; the plot draws each such group as one line, and its key "
               "names every preset in it. DeepSpeed's hysteresis 2 (its `delayed_shift`, "
               "deepspeed/runtime/fp16/loss_scaler.py) skips the first overflow since the scale last grew without "
               "backing off, then backs off at every one until the scale grows again; its first growth after an "
               "overflow comes one clean step later than here (engine/amp/scaler.h). Each preset starts from its own "
               "initial scale times S / 2^16 = 2^%.0f, so that all of them start too high. "
               "tests/test_presets.c drives the presets with scripted overflows and checks that their trajectories "
               "differ exactly where these parameters differ.\n\n"
               "Every run has the same seed, so the same initial weights and batches. Criterion for the effect: the "
               "static run skipped steps and every dynamic run ended below its starting scale.\n\n"
               "## Where the scale settles\n\n%s\n",
            scale_text(lo_t, sizeof lo_t, lo), scale_text(hi_t, sizeof hi_t, hi), (long long)ro[1].steps,
            log2(S / 65536.0), bound_text);
    return mpt_lab_report_close(c, &mpt_lab_overflow, f, plot_error);
}

const mpt_lab_lesson mpt_lab_overflow = {
    "overflow",
    "What does a loss scale that is too large do to FP16 gradients (inf from 65520), what do a static scale and the "
    "dynamic scalers' presets do about it, and where does the scale settle for a batch of B (S < 65520 B)?",
    "scale=S, the static scale in [1, 2^24] (default 16777216 = 2^24; each preset starts from its initial scale "
    "times S / 2^16); batch=B (default 16)",
    run,
    {20000, 10000, 2, 0}, /* full: 2500 steps, past the 2000-step growth interval */
    {20000, 1000, 1, 0}, /* --quick: 1250 steps, past DeepSpeed's 1000 */
    "scale batch",
    "--quick 13 s, full 33 s of CPU time (2-core VM, 2026-11-28)",
};
