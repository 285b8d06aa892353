/*
 * tools/lab/lesson_scale.c - lesson `scale`: the effects the other lessons count on the 3-layer mlp (values that
 * underflow, updates that are lost, rounding error), on a deeper network, and whether they start to cost accuracy.
 *
 * Networks: the mlp (flatten, linear(512), relu, linear(512), relu, linear) and a deeper one: --model when it is not
 * the mlp, else a plain stack of `depth` linear layers of `width` features with ReLU between (default 16 x 128),
 * PyTorch's default initialisation, no normalisation, no skip connections: its gradients shrink layer by layer on the
 * way back (each layer multiplies their scale by about sqrt(fan_in Var(w) / 2) = sqrt(1/6) at init), which is what
 * makes the small values of the other lessons smaller.
 *
 * Plan, for each network and each of `seeds` seeds (paired: one seed, same initial weights and batches):
 *   fp32                      the reference of bf16
 *   fp16 (dynamic scaling)    the reference of fp16 without scaling
 *   fp16 --loss-scale none    underflow: activation gradients that round to zero at S = 1
 *   bf16 (FP32 masters)       the reference of bf16 without masters; against fp32: the rounding error
 *   bf16 --master-weights none lost updates: updates below half an ulp of a 16-bit weight
 * Seed 0's runs without scaling, without masters and bf16 carry telemetry (about 8 telemetry steps: the instruments
 * cost more than the training here; engine/telemetry), bf16's also the FP32 shadow twin. What is
 * counted, per network (each from the seed-0 run's summary.json, telemetry means over its telemetry steps):
 *   underflow   the fp16-none run's all_activation_grads flush_frac and mass_lost (the flushed values' share of sum |g|)
 *   lost        the bf16-none run's all_parameters lost_frac and lost_mass; beside them the same counts in the bf16 run,
 *               whose updates go to FP32 masters (the FP32 lost updates docs/numerics.md describes)
 *   rounding    the bf16 run's twin_rel_l2 of the logits and of the first layer's weight gradient against the FP32
 *               twin: the rounding error accumulated through the network's depth, forward and backward
 * and the accuracy cost of each: the paired difference of final test accuracy (fp16-none - fp16, bf16-none - bf16,
 * bf16 - fp32) over the seeds with its interval and verdict (tools/stats.h; margin: the lab's, 0.3 pp).
 * Underflow is also followed over the run (telemetry.csv): a deep plain stack's gradients start small and grow as it
 * trains, the mlp's shrink as it grows confident, so a mean over the run hides where the two differ; the counts are given
 * early (the first quarter of the telemetry steps), late (the last quarter) and over the run.
 * Criterion: the effect (of scale) is observed when the deeper network's underflow mass early in training is at least
 * 10x the mlp's; which effects cost accuracy on which network is said as measured, a cost being a verdict of worse
 * beyond the margin.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/telemetry/telemetry.h"
#include "tools/lab/lab.h"
#include "tools/sentences.h"
#include "tools/stats.h"

#define MAX_SEEDS 8
#define N_NET 2
#define N_CFG 5
enum { C_FP32, C_FP16, C_FP16_NONE, C_BF16, C_BF16_NONE };
static const char *const cfg_names[N_CFG] = {"fp32", "fp16", "fp16-none", "bf16", "bf16-none"};

/* What seed 0's runs of one network counted. */
typedef struct counts {
    double flush, mass;                 /* fp16-none: all_activation_grads, means over the run */
    double flush_early, mass_early;     /* ... over the first quarter of its telemetry steps (at least one) */
    double flush_late, mass_late;       /* ... over the last quarter */
    int64_t early_to, late_from;        /* the last early step and the first late one */
    double lost, lost_mass;             /* bf16-none: all_parameters */
    double lost32, lost_mass32;         /* bf16 (FP32 masters): all_parameters */
    double twin_logits, twin_grad;      /* bf16: twin_rel_l2 of the logits and of fc1.weight.grad */
    int tel_steps;
} counts;

/* How the conclusion names the deeper network. */
static const char *i_deep_short(int own, int depth) {
    static char b[48];
    if (own) snprintf(b, sizeof b, "the %d-layer stack", depth);
    else snprintf(b, sizeof b, "--model");
    return b;
}

/* The number of linear layers of a spec (the logits are fc<n>.out when the spec names nothing itself). */
static int linears(const char *model) {
    static mpt_model_plan p;
    if (mpt_model_parse(model, &p) != MPT_OK) return 0;
    int n = 0;
    for (int i = 0; i < p.n; i++) n += p.layer[i].kind == MPT_LAYER_LINEAR;
    return n;
}

/* The name of the node that outputs the logits: the spec's last layer. */
static void logits_name(const char *model, char *buf, size_t n) {
    static mpt_model_plan p;
    buf[0] = '\0';
    if (mpt_model_parse(model, &p) != MPT_OK || p.n == 0) return;
    const mpt_model_layer *l = &p.layer[p.n - 1];
    if (l->named) snprintf(buf, n, "%s.out", l->name);
    else {
        const int k = linears(model);
        snprintf(buf, n, k > 1 ? "fc%d.out" : "fc.out", k);
    }
}

static mpt_status run(mpt_lab_ctx *c) {
    double depth_d, width_d, seeds_d;
    MPT_TRY(mpt_lab_param(c, "depth", 16, &depth_d));
    MPT_TRY(mpt_lab_param(c, "width", 128, &width_d));
    MPT_TRY(mpt_lab_param(c, "seeds", c->n_seeds, &seeds_d));
    if (!(depth_d >= 2 && depth_d <= 48 && depth_d == floor(depth_d)))
        return mpt_errorf(MPT_ERR_ARG, "--param depth: expected an integer in [2, 48], found %g", depth_d);
    if (!(width_d >= 8 && width_d <= 4096 && width_d == floor(width_d)))
        return mpt_errorf(MPT_ERR_ARG, "--param width: expected an integer in [8, 4096], found %g", width_d);
    const int ns = (int)seeds_d;
    if (ns < 2 || ns > MAX_SEEDS || ns != seeds_d)
        return mpt_errorf(MPT_ERR_ARG, "--param seeds: expected an integer in [2, %d], found %g", MAX_SEEDS, seeds_d);
    MPT_LAB_PARAMS_CHECKED(c);
    static char deep[MPT_MODEL_SPEC_MAX];
    const int own = strcmp(c->base->model, "mlp") == 0;
    if (own) {
        int k = snprintf(deep, sizeof deep, "flatten");
        for (int i = 0; i + 1 < (int)depth_d && k > 0 && (size_t)k < sizeof deep; i++)
            k += snprintf(deep + k, sizeof deep - (size_t)k, ",linear(%d),relu", (int)width_d);
        if (k > 0 && (size_t)k < sizeof deep) snprintf(deep + k, sizeof deep - (size_t)k, ",linear");
    } else {
        snprintf(deep, sizeof deep, "%s", c->base->model);
    }
    const char *models[N_NET] = {"mlp", deep};
    char net_name[N_NET][64];
    snprintf(net_name[0], sizeof net_name[0], "the mlp (3 linear layers)");
    if (own) snprintf(net_name[1], sizeof net_name[1], "the %d-layer network", (int)depth_d);
    else snprintf(net_name[1], sizeof net_name[1], "--model (%d linear layers)", linears(deep));

    char every[32];
    snprintf(every, sizeof every, "%lld", (long long)mpt_lab_telemetry_every(mpt_lab_steps(c, c->base->batch), 8));
    enum { MAXR = N_NET * N_CFG * MAX_SEEDS };
    static mpt_lab_run runs[MAXR];
    static const char *fl[MAXR][20];
    static char names[MAXR][48], seed[MAX_SEEDS][8];
    int nr = 0;
    for (int i = 0; i < N_NET; i++)
        for (int k = 0; k < ns; k++)
            for (int q = 0; q < N_CFG; q++, nr++) {
                snprintf(seed[k], sizeof seed[k], "%d", k);
                snprintf(names[nr], sizeof names[nr], "%s-%s-seed%d", i ? "deep" : "mlp", cfg_names[q], k);
                int f = 0;
                const char *prec = q == C_FP32 ? "fp32" : q == C_FP16 || q == C_FP16_NONE ? "fp16" : "bf16";
                fl[nr][f++] = "--model", fl[nr][f++] = models[i], fl[nr][f++] = "--precision", fl[nr][f++] = prec;
                fl[nr][f++] = "--seed", fl[nr][f++] = seed[k];
                if (q == C_FP16_NONE) fl[nr][f++] = "--loss-scale", fl[nr][f++] = "none";
                if (q == C_BF16_NONE) fl[nr][f++] = "--master-weights", fl[nr][f++] = "none";
                if (k == 0 && q != C_FP32 && q != C_FP16) fl[nr][f++] = "--telemetry", fl[nr][f++] = every;
                if (k == 0 && q == C_BF16) fl[nr][f++] = "--shadow", fl[nr][f++] = "on";
                fl[nr][f] = NULL;
                runs[nr] = (mpt_lab_run){names[nr], fl[nr]};
            }
    static mpt_run_result res[MAXR];
    MPT_TRY(mpt_lab_train_batch(c, runs, nr, res));
    static double acc[N_NET][N_CFG][MAX_SEEDS];
    counts cn[N_NET];
    for (int i = 0; i < N_NET; i++) {
        const mpt_run_result *r0 = &res[i * ns * N_CFG];
        for (int k = 0; k < ns; k++)
            for (int q = 0; q < N_CFG; q++) acc[i][q][k] = 100.0 * res[(i * ns + k) * N_CFG + q].final_test_acc;
        char lg[80];
        logits_name(models[i], lg, sizeof lg);
        cn[i] = (counts){
            .flush = mpt_run_stat_mean(&r0[C_FP16_NONE], MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac"),
            .mass = mpt_run_stat_mean(&r0[C_FP16_NONE], MPT_TELEMETRY_ALL_ACT_GRAD, "mass_lost"),
            .lost = mpt_run_stat_mean(&r0[C_BF16_NONE], MPT_TELEMETRY_ALL_PARAMS, "lost_frac"),
            .lost_mass = mpt_run_stat_mean(&r0[C_BF16_NONE], MPT_TELEMETRY_ALL_PARAMS, "lost_mass"),
            .lost32 = mpt_run_stat_mean(&r0[C_BF16], MPT_TELEMETRY_ALL_PARAMS, "lost_frac"),
            .lost_mass32 = mpt_run_stat_mean(&r0[C_BF16], MPT_TELEMETRY_ALL_PARAMS, "lost_mass"),
            .twin_logits = mpt_run_stat_mean(&r0[C_BF16], lg, "twin_rel_l2"),
            .twin_grad = mpt_run_stat_mean(&r0[C_BF16], "fc1.weight.grad", "twin_rel_l2"),
        };
        const mpt_telemetry_stat *ls = mpt_run_stat(&r0[C_FP16_NONE], "amp", "loss_scale");
        cn[i].tel_steps = ls ? ls->count : 0;
    }
    for (int i = 0; i < nr; i++) mpt_run_result_free(&res[i]);
    /* underflow over the run: the gradients of a deep plain stack start small and grow as it trains, the mlp's shrink
     * as it grows confident, so the counts are compared early and late (telemetry.csv of the fp16-none seed-0 runs) */
    static mpt_lab_series mass_s[N_NET];
    for (int i = 0; i < N_NET; i++) {
        mpt_lab_series fs;
        char run0[48];
        snprintf(run0, sizeof run0, "%s-fp16-none-seed0", i ? "deep" : "mlp");
        MPT_TRY(mpt_lab_series_read(c, run0, MPT_TELEMETRY_ALL_ACT_GRAD, "mass_lost", &mass_s[i]));
        mpt_status s = mpt_lab_series_read(c, run0, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac", &fs);
        if (s == MPT_OK && (mass_s[i].n == 0 || fs.n != mass_s[i].n))
            s = mpt_errorf(MPT_ERR_FORMAT, "%s/%s/telemetry.csv: %d mass_lost and %d flush_frac rows of %s", c->dir,
                           run0, mass_s[i].n, fs.n, MPT_TELEMETRY_ALL_ACT_GRAD);
        if (s != MPT_OK) {
            for (int j = 0; j <= i; j++) mpt_lab_series_free(&mass_s[j]);
            mpt_lab_series_free(&fs);
            return s;
        }
        const int n = mass_s[i].n, q = (n + 3) / 4;
        double fe = 0, me = 0, fla = 0, ml = 0;
        for (int k = 0; k < q; k++) fe += fs.value[k], me += mass_s[i].value[k];
        for (int k = n - q; k < n; k++) fla += fs.value[k], ml += mass_s[i].value[k];
        cn[i].flush_early = fe / q, cn[i].mass_early = me / q, cn[i].flush_late = fla / q, cn[i].mass_late = ml / q;
        cn[i].early_to = mass_s[i].step[q - 1], cn[i].late_from = mass_s[i].step[n - q];
        mpt_lab_series_free(&fs);
    }

    /* the paired accuracy differences: underflow, lost updates, rounding */
    static const int pairs[3][2] = {{C_FP16_NONE, C_FP16}, {C_BF16_NONE, C_BF16}, {C_BF16, C_FP32}};
    static const char *const pair_what[3] = {"final test accuracy, no scaling - dynamic:",
                                             "final test accuracy, no masters - FP32 masters:",
                                             "final test accuracy, bf16 - fp32:"};
    mpt_stats_paired pd[3][N_NET];
    mpt_stats_summary sd[3][N_NET];
    double dd[3][N_NET][MAX_SEEDS];
    const int have_ci = mpt_stats_available();
    for (int e = 0; e < 3; e++)
        for (int i = 0; i < N_NET; i++) {
            for (int k = 0; k < ns; k++) dd[e][i][k] = acc[i][pairs[e][0]][k] - acc[i][pairs[e][1]][k];
            mpt_stats_summarize(dd[e][i], ns, &sd[e][i]);
            if (have_ci)
                MPT_TRY(mpt_stats_compare_paired(acc[i][pairs[e][0]], acc[i][pairs[e][1]], ns, 0.95, c->base->margin,
                                                 &pd[e][i]));
        }
    static char meas[3][N_NET][400];
    for (int i = 0; i < N_NET; i++) {
        snprintf(meas[0][i], sizeof meas[0][i], "without loss scaling %.3g%% of the activation gradients' nonzero "
                 "values flushed to zero in FP16 early in training (telemetry steps to step %lld), carrying %.2g of "
                 "their mass (sum |g|), and %.3g%% carrying %.2g late (from step %lld; %.3g%% and %.2g over the run)",
                 100.0 * cn[i].flush_early, (long long)cn[i].early_to, cn[i].mass_early, 100.0 * cn[i].flush_late,
                 cn[i].mass_late, (long long)cn[i].late_from, 100.0 * cn[i].flush, cn[i].mass);
        snprintf(meas[1][i], sizeof meas[1][i], "without masters %.3g%% of the updates were lost in BF16, %.2g of the "
                 "update mass (with FP32 masters %.3g%%, %.2g of the mass)", 100.0 * cn[i].lost, cn[i].lost_mass,
                 100.0 * cn[i].lost32, cn[i].lost_mass32);
        snprintf(meas[2][i], sizeof meas[2][i], "bf16's logits erred %.2g against the FP32 twin and its first layer's "
                 "weight gradient %.2g (relative L2)", cn[i].twin_logits, cn[i].twin_grad);
    }
    static const char *const effect_name[3] = {"Underflow (fp16 without loss scaling)",
                                               "Lost updates (bf16 without FP32 master weights)",
                                               "Rounding error accumulated through the network (bf16 against fp32)"};
    const double grow[3] = {cn[0].mass_early > 0 || cn[1].mass_early > 0 ? cn[1].mass_early / cn[0].mass_early : NAN,
                            cn[0].lost_mass > 0 || cn[1].lost_mass > 0 ? cn[1].lost_mass / cn[0].lost_mass : NAN,
                            cn[1].twin_logits / cn[0].twin_logits};
    static char brief_meas[3][N_NET][160];
    for (int i = 0; i < N_NET; i++) {
        snprintf(brief_meas[0][i], sizeof brief_meas[0][i], "%.3g%% flushed early (mass %.2g), %.3g%% late (mass %.2g)",
                 100.0 * cn[i].flush_early, cn[i].mass_early, 100.0 * cn[i].flush_late, cn[i].mass_late);
        snprintf(brief_meas[1][i], sizeof brief_meas[1][i], "%.3g%% lost (mass %.2g)", 100.0 * cn[i].lost,
                 cn[i].lost_mass);
        snprintf(brief_meas[2][i], sizeof brief_meas[2][i], "logits %.2g, fc1 gradient %.2g", cn[i].twin_logits,
                 cn[i].twin_grad);
    }
    static const char *const brief_name[3] = {"Underflow without loss scaling", "Lost updates without masters",
                                              "Rounding error of bf16 against the FP32 twin"};
    static const char *const brief_what[3] = {"accuracy, no scaling - dynamic", "accuracy, no masters - masters",
                                              "accuracy, bf16 - fp32"};
    static char eff[3][2400], brief[3][900];
    for (int e = 0; e < 3; e++) {
        mpt_text_scale ts = {effect_name[e], {net_name[0], net_name[1]}, {meas[e][0], meas[e][1]}, grow[e],
                             pair_what[e], {have_ci ? &pd[e][0] : NULL, have_ci ? &pd[e][1] : NULL},
                             {&sd[e][0], &sd[e][1]}};
        mpt_text_scale_effect(eff[e], sizeof eff[e], &ts);
        ts.effect = brief_name[e], ts.net[0] = "the mlp", ts.net[1] = i_deep_short(own, (int)depth_d);
        ts.measured[0] = brief_meas[e][0], ts.measured[1] = brief_meas[e][1], ts.diff_what = brief_what[e];
        mpt_text_scale_brief(brief[e], sizeof brief[e], &ts);
    }
    c->observed = cn[1].mass_early >= 10.0 * cn[0].mass_early && cn[1].mass_early > 0.0;
    c->conclusion[0] = '\0';
    mpt_lab_append(c->conclusion, sizeof c->conclusion, "%s: the mlp against %s, %d seeds each. ",
           c->observed ? "Observed" : "Not observed", net_name[1], ns);
    for (int e = 0; e < 3; e++) mpt_lab_append(c->conclusion, sizeof c->conclusion, "%s. ", brief[e]);
    if (!c->observed)
        mpt_lab_append(c->conclusion, sizeof c->conclusion, "(The criterion asks the deeper network's underflow mass early in "
               "training to be at least 10x the mlp's.)");

    /* scale.dat: one row per network and seed: the accuracies; then the counts of seed 0 */
    FILE *dat = mpt_lab_open(c, "scale.dat");
    if (!dat) return MPT_ERR_IO;
    fprintf(dat, "# network (0 mlp, 1 deeper) seed, then final test accuracy (%%) of fp32 fp16 fp16-none bf16 bf16-none "
                 "(each run's summary.json)\n");
    for (int i = 0; i < N_NET; i++)
        for (int k = 0; k < ns; k++)
            fprintf(dat, "%d %d %.4f %.4f %.4f %.4f %.4f\n", i, k, acc[i][0][k], acc[i][1][k], acc[i][2][k],
                    acc[i][3][k], acc[i][4][k]);
    fprintf(dat, "\n\n# network, then seed 0's counts: flush_frac mass_lost (fp16-none, all_activation_grads) lost_frac "
                 "lost_mass (bf16-none, all_parameters) lost_frac lost_mass (bf16, FP32 masters) twin_rel_l2 of the "
                 "logits and of fc1.weight.grad (bf16)\n");
    for (int i = 0; i < N_NET; i++)
        fprintf(dat, "%d %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g\n", i, cn[i].flush, cn[i].mass, cn[i].lost,
                cn[i].lost_mass, cn[i].lost32, cn[i].lost_mass32, cn[i].twin_logits, cn[i].twin_grad);
    fprintf(dat, "\n\n# network, step, then the fp16-none seed-0 run's all_activation_grads mass_lost at that telemetry "
                 "step (its telemetry.csv)\n");
    for (int i = 0; i < N_NET; i++) {
        for (int k = 0; k < mass_s[i].n; k++)
            fprintf(dat, "%d %lld %.6g\n", i, (long long)mass_s[i].step[k], mass_s[i].value[k]);
        fprintf(dat, "\n\n");
    }
    for (int i = 0; i < N_NET; i++) mpt_lab_series_free(&mass_s[i]);
    MPT_TRY(mpt_lab_close(c, dat, "scale.dat"));
    /* the picture: per effect, each network's paired differences (points) and their mean with the interval */
    FILE *gp = mpt_lab_open(c, "scale.gp");
    if (!gp) return MPT_ERR_IO;
    mpt_report_gnuplot_terminal(gp, 1000, 1000, "scale.png");
    fprintf(gp, "set multiplot layout 2,1\nset grid\nset key outside right\n"
                "set title 'fp16 without loss scaling: the flushed activation gradients'' share of the gradient mass "
                "(seed 0)'\nset xlabel 'step'\nset ylabel 'mass lost'\nset logscale y 10\nset format y '10^{%%L}'\n"
                "plot 'scale.dat' index 2 using 2:(($3) > 0 ? $3 : 1e-12) with linespoints lw 2 pt 7 lt 1 title "
                "'mlp', '' index 3 using 2:(($3) > 0 ? $3 : 1e-12) with linespoints lw 2 pt 5 lt 2 title 'deeper'\n"
                "unset logscale y\nset format y '%%g'\nunset xlabel\n");
    fprintf(gp, "set title 'accuracy cost of each effect, per network (one point per seed; %d seeds)'\nset ylabel "
                "'paired difference of final test accuracy (pp)'\nset xrange [-0.5:5.5]"
                "\nset xtics ('underflow, mlp' 0, 'underflow, deeper' 1, 'lost updates, mlp' 2, 'lost updates, "
                "deeper' 3, 'rounding, mlp' 4, 'rounding, deeper' 5) rotate by -20\n"
                "plot 'scale.dat' index 0 using ($1 + 0):($5 - $4) with points pt 7 lt 1 title 'fp16 no scaling - "
                "dynamic', '' index 0 using ($1 + 2):($7 - $6) with points pt 5 lt 2 title 'bf16 no masters - masters', "
                "'' index 0 using ($1 + 4):($6 - $3) with points pt 9 lt 3 title 'bf16 - fp32', 0 with lines lt 0 "
                "notitle\nunset multiplot\n", ns);
    char plot_buf[600];
    const char *plot_error = mpt_lab_plot(c, gp, "scale.gp", plot_buf, sizeof plot_buf);

    snprintf(c->opts.model, sizeof c->opts.model, "mlp and %s", own ? "a deeper stack (below)" : "--model");
    FILE *f;
    MPT_TRY(mpt_lab_report_open(c, &mpt_lab_scale, &f));
    fprintf(f, "The other lessons count small things on the 3-layer mlp: gradients that underflow FP16 without a loss "
               "scale (many values, a tiny share of the mass), updates lost to rounding, the rounding error of 16-bit "
               "arithmetic. Here the same counts are taken on a deeper network, and each is tried against accuracy on "
               "both.\n\nThe deeper network: `%s`%s. Every network, precision and switch below was trained with the same "
               "%d seeds (`<network>-<config>-seed<k>/`, network mlp or deep); seed 0's runs without scaling, without "
               "masters and in bf16 carry telemetry (%d telemetry steps in the fp16 run without scaling), bf16's also the FP32 shadow twin (`--shadow`). "
               "Counts: means over the telemetry steps of seed 0's summary.json (`all_activation_grads` flush_frac and "
               "mass_lost of `*-fp16-none-seed0`; `all_parameters` lost_frac and lost_mass of `*-bf16-none-seed0` and "
               "`*-bf16-seed0`; twin_rel_l2 of the logits and of fc1.weight.grad in `*-bf16-seed0`); they are also in "
               "`scale.dat`'s second block; the early and late underflow counts are the means over the first and the last "
               "quarter of the telemetry steps in `*-fp16-none-seed0/telemetry.csv` (the mass per step: `scale.dat`'s "
               "third and fourth blocks). Accuracies: each run's summary.json, `scale.dat`'s first block.\n\n",
            deep, own ? " (a plain stack: no normalisation, no skip connections; --param depth and width)" : " (--model)",
            ns, cn[0].tel_steps);
    fprintf(f, "| network | seed | fp32 | fp16 | fp16, no scaling | bf16 | bf16, no masters |\n"
               "|---|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < N_NET; i++)
        for (int k = 0; k < ns; k++)
            fprintf(f, "| %s | %d | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %.2f%% |\n", i ? "deeper" : "mlp", k,
                    acc[i][0][k], acc[i][1][k], acc[i][2][k], acc[i][3][k], acc[i][4][k]);
    fprintf(f, "\n| seed 0's counts | mlp | deeper |\n|---|---:|---:|\n"
               "| activation gradients flushed, fp16 without scaling, early (to step %lld / %lld) | %.3g%% | %.3g%% |\n"
               "| ... their share of the gradient mass | %.2g | %.2g |\n"
               "| ... flushed late (from step %lld / %lld) | %.3g%% | %.3g%% |\n"
               "| ... their share of the gradient mass | %.2g | %.2g |\n"
               "| activation gradients flushed, fp16 without scaling, over the run | %.3g%% | %.3g%% |\n"
               "| ... their share of the gradient mass | %.2g | %.2g |\n"
               "| updates lost, bf16 without masters | %.3g%% | %.3g%% |\n"
               "| ... their share of the update mass | %.2g | %.2g |\n"
               "| updates lost in the FP32 masters (bf16) | %.3g%% | %.3g%% |\n"
               "| ... their share of the update mass | %.2g | %.2g |\n"
               "| bf16 logits against the FP32 twin (relative L2) | %.2g | %.2g |\n"
               "| bf16 fc1.weight.grad against the FP32 twin | %.2g | %.2g |\n\n",
            (long long)cn[0].early_to, (long long)cn[1].early_to, 100.0 * cn[0].flush_early, 100.0 * cn[1].flush_early,
            cn[0].mass_early, cn[1].mass_early, (long long)cn[0].late_from, (long long)cn[1].late_from,
            100.0 * cn[0].flush_late, 100.0 * cn[1].flush_late, cn[0].mass_late, cn[1].mass_late,
            100.0 * cn[0].flush, 100.0 * cn[1].flush, cn[0].mass, cn[1].mass, 100.0 * cn[0].lost, 100.0 * cn[1].lost,
            cn[0].lost_mass, cn[1].lost_mass, 100.0 * cn[0].lost32, 100.0 * cn[1].lost32, cn[0].lost_mass32,
            cn[1].lost_mass32, cn[0].twin_logits, cn[1].twin_logits, cn[0].twin_grad, cn[1].twin_grad);
    for (int e = 0; e < 3; e++) fprintf(f, "%s.\n\n", eff[e]);
    double lo[N_NET], hi[N_NET], apart[N_NET];
    for (int i = 0; i < N_NET; i++) {
        lo[i] = INFINITY, hi[i] = -INFINITY, apart[i] = 0.0;
        for (int k = 0; k < ns; k++) {
            lo[i] = fmin(lo[i], acc[i][C_FP32][k]), hi[i] = fmax(hi[i], acc[i][C_FP32][k]);
            apart[i] = fmax(apart[i], fabs(acc[i][C_BF16][k] - acc[i][C_FP32][k]));
        }
    }
    fprintf(f, "A cost is a verdict of worse beyond the ±%.2g pp margin; an inconclusive interval is not a cost, and not "
               "its absence either: more seeds (`--param seeds=N`) or the full version decide more. The deeper network "
               "trains more slowly than the mlp in any precision (its fp32 column): its accuracy here is low because "
               "it is deep and plain, not because of the precision.\n\n"
               "The spread of each network over seeds: fp32 runs from %.2f%% to %.2f%% (the deeper network) and %.2f%% "
               "to %.2f%% (the mlp); two runs of one seed that differ only in rounding (bf16 against fp32) ended up to "
               "%.2f and %.2f points apart. The wider these are, the wider the intervals above.\n\n"
               "Criterion for the effect: the deeper network's underflow mass (fp16 without scaling) early in training "
               "(the first quarter of the telemetry steps) is at least 10x the mlp's.\n", c->base->margin, lo[1], hi[1],
            lo[0], hi[0], apart[1], apart[0]);
    return mpt_lab_report_close(c, &mpt_lab_scale, f, plot_error);
}

const mpt_lab_lesson mpt_lab_scale = {
    "scale",
    "Do the counts that cost the 3-layer mlp nothing (gradients that underflow, lost updates, rounding error) grow on a "
    "deeper network, and do they start to cost accuracy there?",
    "depth=L, width=W: the deeper network, L linear layers of W features (default 16 x 128; --model replaces it); "
    "seeds=N (2..8; default: the lesson's size)",
    run,
    {20000, 10000, 2, 5}, /* full */
    {4000, 2000, 1, 3},   /* --quick */
    "depth width seeds",
    "--quick 10 s, full 104 s of CPU time (2-core VM, 2026-11-28)",
};
