/*
 * tools/compare_seeds.c - what `mptrain compare --seeds` reports: the statistics over seeds (tools/stats.h),
 * the printed table with its verdicts, report.md, compare.json (also for one seed) and the mean-and-band
 * convergence.png.
 *
 * Accuracies are handled in percent, so differences are in percentage points ("pp"), the unit of --margin.
 * A precision is compared with fp32 seed by seed (run s of precision p against run s of fp32: same initial
 * weights and batch order), which removes the seed-to-seed variation both share. The noise a one-seed
 * difference must be read against is therefore the spread of those paired differences (per precision), not
 * fp32's own spread across seeds, which is also shown, as the spread of a single run (tools/stats.h,
 * mpt_stats_noise).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "mpt_config.h"
#include "tools/report.h"
#include "tools/sentences.h"
#include "tools/stats.h"
#include "tools/stats_json.h"

#define LEVEL 0.95

mpt_status mpt_report_seed_run_dir(char *buf, size_t len, const char *out, uint64_t seed, mpt_precision p) {
    int n = snprintf(buf, len, "%s/seed-%" PRIu64 "/%s", out, seed, mpt_precision_name(p));
    if (n < 0 || (size_t)n >= len) return mpt_errorf(MPT_ERR_ARG, "--out %s: path too long", out);
    return MPT_OK;
}

/* ---- the statistics ------------------------------------------------------------------------------------------ */

typedef struct prec_stats {
    mpt_precision precision;
    mpt_stats_summary final_acc, best_acc, test_loss, epoch_s, epoch_cpu_s, skipped, rel_l2; /* accuracies in % */
    int paired;                           /* compared with fp32 (not fp32 itself, and an fp32 run exists) */
    mpt_stats_paired d_final, d_best, d_loss;
    mpt_stats_noise noise;                /* final test accuracy: fp32's between-seed sd, the paired sd */
} prec_stats;

static const mpt_run_result *run_at(const mpt_report_seed_runs *r, int s, int p) {
    return &r->res[s * r->n_precisions + p];
}

static int fp32_index(const mpt_report_seed_runs *r) {
    for (int p = 0; p < r->n_precisions; p++)
        if (mpt_mode_info(r->precisions[p])->reference) return p;
    return -1;
}

typedef enum metric {
    METRIC_FINAL_ACC,
    METRIC_BEST_ACC,
    METRIC_TEST_LOSS,
    METRIC_EPOCH_S,
    METRIC_EPOCH_CPU_S,
    METRIC_SKIPPED
} metric;

static double metric_of(const mpt_run_result *r, metric m) {
    switch (m) {
    case METRIC_FINAL_ACC: return 100.0 * r->final_test_acc;
    case METRIC_BEST_ACC: return 100.0 * r->best_test_acc;
    case METRIC_TEST_LOSS: return r->final_test_loss;
    case METRIC_EPOCH_S: return r->mean_epoch_s;
    case METRIC_EPOCH_CPU_S: return r->mean_epoch_cpu_s;
    case METRIC_SKIPPED: return (double)r->steps_skipped;
    }
    return NAN;
}

static void column(const mpt_report_seed_runs *r, int p, metric m, double *x) {
    for (int s = 0; s < r->n_seeds; s++) x[s] = metric_of(run_at(r, s, p), m);
}

static mpt_status compute_stats(const mpt_report_seed_runs *r, double margin, prec_stats *st) {
    int ref = fp32_index(r);
    double x[MPT_CLI_MAX_SEEDS], y[MPT_CLI_MAX_SEEDS];
    for (int p = 0; p < r->n_precisions; p++) {
        prec_stats *q = &st[p];
        memset(q, 0, sizeof *q);
        q->precision = r->precisions[p];
        column(r, p, METRIC_FINAL_ACC, x);
        mpt_stats_summarize(x, r->n_seeds, &q->final_acc);
        column(r, p, METRIC_BEST_ACC, x);
        mpt_stats_summarize(x, r->n_seeds, &q->best_acc);
        column(r, p, METRIC_TEST_LOSS, x);
        mpt_stats_summarize(x, r->n_seeds, &q->test_loss);
        column(r, p, METRIC_EPOCH_S, x);
        mpt_stats_summarize(x, r->n_seeds, &q->epoch_s);
        column(r, p, METRIC_EPOCH_CPU_S, x);
        mpt_stats_summarize(x, r->n_seeds, &q->epoch_cpu_s);
        column(r, p, METRIC_SKIPPED, x);
        mpt_stats_summarize(x, r->n_seeds, &q->skipped);
        for (int s = 0; s < r->n_seeds; s++) x[s] = r->rel_l2[s * r->n_precisions + p];
        mpt_stats_summarize(x, r->n_seeds, &q->rel_l2);
        q->paired = ref >= 0 && p != ref && r->n_seeds >= 2;
        if (!q->paired) continue;
        column(r, p, METRIC_FINAL_ACC, x);
        column(r, ref, METRIC_FINAL_ACC, y);
        mpt_stats_noise_of(x, y, r->n_seeds, &q->noise);
        const metric ms[3] = {METRIC_FINAL_ACC, METRIC_BEST_ACC, METRIC_TEST_LOSS};
        mpt_stats_paired *outs[3] = {&q->d_final, &q->d_best, &q->d_loss};
        for (int k = 0; k < 3; k++) {
            column(r, p, ms[k], x);
            column(r, ref, ms[k], y);
            /* the margin is in accuracy points; for the loss only the interval is reported */
            MPT_TRY(mpt_stats_compare_paired(x, y, r->n_seeds, LEVEL, margin, outs[k]));
        }
    }
    return MPT_OK;
}

/* ---- text ------------------------------------------------------------------------------------------------------- */

static void verdict_text(char *b, size_t n, const mpt_stats_paired *d) {
    if (d->verdict != MPT_VERDICT_INCONCLUSIVE) {
        snprintf(b, n, "%s", mpt_verdict_name(d->verdict));
        return;
    }
    if (d->no_spread)
        snprintf(b, n, "inconclusive: no spread measured (every pair differs by the same amount); more seeds");
    else if (d->seeds_needed > 0)
        snprintf(b, n, "inconclusive: more seeds needed (about %d for this spread)", d->seeds_needed);
    else if (fabs(fabs(d->mean) - d->margin) < 1e-12)
        snprintf(b, n, "inconclusive: the mean difference sits on the margin");
    else
        snprintf(b, n, "inconclusive: more seeds needed (over %d for this spread)", MPT_STATS_MAX_SEEDS_SUGGESTED);
}

static void mean_sd(char *b, size_t n, const mpt_stats_summary *s, const char *fmt_mean, const char *unit) {
    char m[32], d[32];
    snprintf(m, sizeof m, fmt_mean, s->mean);
    snprintf(d, sizeof d, fmt_mean, s->sd);
    snprintf(b, n, "%s%s ± %s", m, unit, d);
}

static void diff_ci(char *b, size_t n, const mpt_stats_paired *d, const char *fmt) {
    char m[32], lo[32], hi[32];
    snprintf(m, sizeof m, fmt, d->mean);
    snprintf(lo, sizeof lo, fmt, d->lo);
    snprintf(hi, sizeof hi, fmt, d->hi);
    snprintf(b, n, "%s%s [%s, %s]", d->mean >= 0 ? "+" : "", m, lo, hi);
}

/* The summary table (printed and in report.md). */
static void write_seed_table(FILE *f, const prec_stats *st, int n, double margin) {
    fprintf(f, "| precision | final test acc (%%) | best test acc (%%) | final test loss | "
               "Δ final acc vs fp32, pp [95%% CI] | verdict (margin ±%.2g pp) | s/epoch (host clock) | "
               "CPU s/epoch (all threads) | skipped steps |\n",
            margin);
    fprintf(f, "|---|---:|---:|---:|---:|---|---:|---:|---:|\n");
    for (int p = 0; p < n; p++) {
        const prec_stats *q = &st[p];
        char fa[128], ba[128], tl[128], d[160], v[128];
        mean_sd(fa, sizeof fa, &q->final_acc, "%.2f", "");
        mean_sd(ba, sizeof ba, &q->best_acc, "%.2f", "");
        mean_sd(tl, sizeof tl, &q->test_loss, "%.4f", "");
        if (q->paired) {
            diff_ci(d, sizeof d, &q->d_final, "%.2f");
            verdict_text(v, sizeof v, &q->d_final);
        } else {
            snprintf(d, sizeof d, mpt_mode_info(q->precision)->reference ? "(reference)" : "n/a (no fp32 run)");
            snprintf(v, sizeof v, "%s", mpt_mode_info(q->precision)->reference ? "—" : "n/a");
        }
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.1f |\n", mpt_precision_name(q->precision), fa, ba,
                tl, d, v, q->epoch_s.mean, q->epoch_cpu_s.mean, q->skipped.mean);
    }
}

/* The seed noise: the spread a one-seed comparison must be read against (the paired differences' sd, per
 * precision), and fp32's own spread across seeds, each said for what it is. */
static void write_noise_floor(FILE *f, const prec_stats *st, int n, int n_seeds) {
    int ref = -1;
    for (int p = 0; p < n; p++)
        if (mpt_mode_info(st[p].precision)->reference) ref = p;
    if (ref < 0) {
        fprintf(f, "Noise: no fp32 run in --precisions, so no paired differences and no fp32 spread.\n");
        return;
    }
    const mpt_stats_summary *a = &st[ref].final_acc;
    fprintf(f, "Noise: a one-seed comparison with fp32 moves from seed to seed by the sd of the paired differences "
               "(same seed, over %d seeds):", n_seeds);
    int any = 0;
    for (int p = 0; p < n; p++) {
        if (!st[p].paired) continue;
        fprintf(f, "%s %s %.2f pp", any ? ";" : "", mpt_precision_name(st[p].precision), st[p].noise.sd_paired);
        any = 1;
    }
    if (!any) fprintf(f, " (no other precision)");
    fprintf(f, ". A one-seed difference smaller than about twice that says nothing about the precision. fp32 alone "
               "ends at %.2f%% ± %.2f (sd over seeds; range %.2f to %.2f%%): that is how far one run's accuracy moves "
               "from seed to seed, the spread of one run, not of a comparison.",
            a->mean, a->sd, a->min, a->max);
    /* how the two spreads compare is measured, per precision: the pairing may cancel much, little or nothing */
    for (int p = 0; p < n; p++) {
        if (!st[p].paired) continue;
        char t[400];
        mpt_text_pairing(t, sizeof t, mpt_precision_name(st[p].precision), st[p].noise.sd_between,
                         st[p].noise.sd_paired);
        fprintf(f, " %s.", t); /* precision names are lower case, as elsewhere */
    }
    fprintf(f, "\n");
}

void mpt_report_seed_table(FILE *f, const uint64_t *seeds, int n_seeds, const mpt_precision *precisions,
                           int n_precisions, const mpt_run_result *res, void (*cell)(FILE *f, const mpt_run_result *x)) {
    fprintf(f, "| seed |");
    for (int p = 0; p < n_precisions; p++) fprintf(f, " %s |", mpt_precision_name(precisions[p]));
    fprintf(f, "\n|---:|");
    for (int p = 0; p < n_precisions; p++) fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int s = 0; s < n_seeds; s++) {
        fprintf(f, "| %" PRIu64 " |", seeds[s]);
        for (int p = 0; p < n_precisions; p++) {
            fprintf(f, " ");
            cell(f, &res[s * n_precisions + p]);
            fprintf(f, " |");
        }
        fprintf(f, "\n");
    }
}

static void per_seed_cell(FILE *f, const mpt_run_result *x) {
    fprintf(f, "%.2f%% (loss %.4f)", 100.0 * x->final_test_acc, x->final_test_loss);
}

/* ---- compare.json ------------------------------------------------------------------------------------------------ */


static json_t *paired_json(const mpt_stats_paired *d, int with_verdict) {
    json_t *j = mpt_stats_json_interval(d->mean, d->sd, d->level, d->lo, d->hi, d->t_crit);
    if (with_verdict) {
        json_object_set_new(j, "margin", mpt_stats_json_num(d->margin));
        json_object_set_new(j, "p_not_worse", mpt_stats_json_num(d->p_lower));
        json_object_set_new(j, "p_not_better", mpt_stats_json_num(d->p_upper));
        json_object_set_new(j, "verdict", json_string(mpt_verdict_name(d->verdict)));
        json_object_set_new(j, "seeds_needed", d->seeds_needed != 0 ? json_integer(d->seeds_needed) : json_null());
        json_object_set_new(j, "no_spread", json_boolean(d->no_spread));
    }
    return j;
}

/* A seed as a JSON number. jansson holds integers as int64 (json_int_t), and a seed of 2^63 or more cast to it was
 * written negative: such a seed becomes a marker string ("\u0001mpt-u64:<digits>" once dumped) that dump_json
 * turns into the bare number (JSON numbers have no range; Python, Go and Rust's serde read it exactly). No path can
 * forge the marker: json_text escapes the control byte in any string it is given. */
#define U64_MARK "\x01mpt-u64:"
static json_t *seed_json(uint64_t seed) {
    if (seed <= (uint64_t)INT64_MAX) return json_integer((json_int_t)seed);
    char b[48];
    snprintf(b, sizeof b, U64_MARK "%" PRIu64, seed);
    return json_string(b);
}

/* A path (or any text from outside) as a JSON string: as it is when it is valid UTF-8 without control bytes, else
 * escaped as the messages are (mpt_escape: \xNN for each byte outside well-formed UTF-8 or a control byte, \\ for
 * a backslash). json_string refuses bytes that are not UTF-8, and "dir" was then left out of compare.json. */
static json_t *json_text(const char *text) {
    json_t *j = json_string(text);
    int plain = j != NULL;
    for (const char *c = text; plain && *c; c++) plain = (unsigned char)*c >= 0x20 && *c != 0x7f && *c != '\\';
    if (plain) return j;
    json_decref(j);
    static char esc[4 * MPT_CLI_PATH + 16];
    return json_string(mpt_escape(esc, sizeof esc, text));
}

static json_t *run_json(const mpt_run_result *x, uint64_t seed, double rel_l2) {
    json_t *j = json_object();
    json_object_set_new(j, "seed", seed_json(seed));
    json_object_set_new(j, "dir", json_text(x->out_dir));
    json_object_set_new(j, "final_test_accuracy", mpt_stats_json_num(x->final_test_acc));
    json_object_set_new(j, "best_test_accuracy", mpt_stats_json_num(x->best_test_acc));
    json_object_set_new(j, "best_epoch", json_integer(x->best_epoch));
    json_object_set_new(j, "final_test_loss", mpt_stats_json_num(x->final_test_loss));
    json_object_set_new(j, "final_train_loss", mpt_stats_json_num(x->final_train_loss));
    json_object_set_new(j, "time_per_epoch_s", mpt_stats_json_num(x->mean_epoch_s));
    json_object_set_new(j, "time_per_epoch_cpu_s", mpt_stats_json_num(x->mean_epoch_cpu_s));
    json_object_set_new(j, "samples_per_s", mpt_stats_json_num(x->samples_per_s));
    json_object_set_new(j, "peak_memory_bytes", json_integer((json_int_t)x->mem_peak_total));
    json_object_set_new(j, "steps_skipped", json_integer(x->steps_skipped));
    json_object_set_new(j, "final_loss_scale", mpt_stats_json_num((double)x->final_scale));
    json_object_set_new(j, "rel_l2_to_fp32", mpt_stats_json_num(rel_l2));
    return j;
}

static json_t *header_json(const mpt_cli_opts *o, int n_seeds, const uint64_t *seeds) {
    json_t *j = json_object();
    static char buf[MPT_MODEL_SPEC_MAX + 64]; /* a spec's canonical text is the longest setting */
    json_object_set_new(j, "mptrain", json_string(MPT_VERSION));
    json_object_set_new(j, "model", json_string(o->model));
    json_t *cfg = json_object();
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++) {
        if (!mpt_cli_opt_recorded(id) || id == MPT_OPT_EPOCHS) continue;
        if (id == MPT_OPT_PRECISION || id == MPT_OPT_SEED) continue; /* per run */
        json_object_set_new(cfg, mpt_cli_opt_name(id), json_string(mpt_cli_format(o, id, buf, sizeof buf)));
    }
    json_object_set_new(cfg, "epochs", json_integer(o->epochs));
    json_object_set_new(j, "config", cfg);
    json_t *sa = json_array();
    for (int s = 0; s < n_seeds; s++) json_array_append_new(sa, seed_json(seeds[s]));
    json_object_set_new(j, "seeds", sa);
    return j;
}

static mpt_status dump_json(const char *dir, json_t *j) {
    char path[MPT_CLI_PATH + 64], tmp[MPT_CLI_PATH + 80];
    snprintf(path, sizeof path, "%s/compare.json", dir);
    FILE *f = mpt_outdir_open_atomic(path, tmp, sizeof tmp);
    if (!f) {
        json_decref(j);
        return MPT_ERR_IO;
    }
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(j);
    int rc = text ? 0 : -1;
    if (text) { /* the seeds above INT64_MAX: their marker strings become the numbers (seed_json) */
        static const char mark[] = "\"\\u0001mpt-u64:";
        const char *from = text, *m;
        while (rc == 0 && (m = strstr(from, mark)) != NULL) {
            const char *digits = m + strlen(mark);
            size_t nd = strspn(digits, "0123456789");
            if (fwrite(from, 1, (size_t)(m - from), f) != (size_t)(m - from) || fwrite(digits, 1, nd, f) != nd) rc = -1;
            from = digits + nd + 1; /* past the closing quote */
        }
        if (rc == 0 && fputs(from, f) == EOF) rc = -1;
        free(text);
    }
    if (rc != 0) {
        mpt_status s = mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
        mpt_outdir_discard(f);
        return s;
    }
    return mpt_outdir_commit_atomic(f, tmp, path);
}

static mpt_status write_seeds_json(const mpt_cli_opts *o, const mpt_report_seed_runs *r, const prec_stats *st) {
    json_t *j = header_json(o, r->n_seeds, r->seeds);
    json_object_set_new(j, "margin_pp", mpt_stats_json_num(o->margin));
    json_object_set_new(j, "ci_level", mpt_stats_json_num(LEVEL));
    json_object_set_new(j, "accuracy_unit", json_string("percent (differences in percentage points)"));
    json_t *precs = json_array();
    for (int p = 0; p < r->n_precisions; p++) {
        const prec_stats *q = &st[p];
        json_t *e = json_object();
        json_object_set_new(e, "precision", json_string(mpt_precision_name(q->precision)));
        json_object_set_new(e, "final_test_accuracy", mpt_stats_json_summary(&q->final_acc));
        json_object_set_new(e, "best_test_accuracy", mpt_stats_json_summary(&q->best_acc));
        json_object_set_new(e, "final_test_loss", mpt_stats_json_summary(&q->test_loss));
        json_object_set_new(e, "time_per_epoch_s", mpt_stats_json_summary(&q->epoch_s));
        json_object_set_new(e, "time_per_epoch_cpu_s", mpt_stats_json_summary(&q->epoch_cpu_s));
        json_object_set_new(e, "steps_skipped", mpt_stats_json_summary(&q->skipped));
        json_object_set_new(e, "rel_l2_to_fp32", mpt_stats_json_summary(&q->rel_l2));
        if (q->paired) {
            json_t *vs = json_object();
            json_object_set_new(vs, "final_test_accuracy_pp", paired_json(&q->d_final, 1));
            json_object_set_new(vs, "best_test_accuracy_pp", paired_json(&q->d_best, 1));
            json_object_set_new(vs, "final_test_loss", paired_json(&q->d_loss, 0));
            json_object_set_new(e, "vs_fp32", vs);
        } else {
            json_object_set_new(e, "vs_fp32", json_null());
        }
        json_t *runs = json_array();
        for (int s = 0; s < r->n_seeds; s++)
            json_array_append_new(runs, run_json(run_at(r, s, p), r->seeds[s], r->rel_l2[s * r->n_precisions + p]));
        json_object_set_new(e, "runs", runs);
        json_array_append_new(precs, e);
    }
    json_object_set_new(j, "precisions", precs);
    int ref = fp32_index(r);
    /* the noise of a one-seed comparison: per precision, the sd of its paired differences to fp32 */
    json_t *paired_sd = json_object();
    for (int p = 0; ref >= 0 && p < r->n_precisions; p++)
        if (st[p].paired)
            json_object_set_new(paired_sd, mpt_precision_name(st[p].precision),
                                mpt_stats_json_num(st[p].noise.sd_paired));
    json_object_set_new(j, "noise_paired_sd_final_accuracy_pp", ref >= 0 ? paired_sd : json_null());
    if (ref < 0) json_decref(paired_sd);
    /* fp32's own spread across seeds: the spread of one run, not the noise of a paired comparison */
    if (ref >= 0)
        json_object_set_new(j, "fp32_between_seeds_final_accuracy", mpt_stats_json_summary(&st[ref].final_acc));
    else json_object_set_new(j, "fp32_between_seeds_final_accuracy", json_null());
    return dump_json(r->out, j);
}

mpt_status mpt_report_write_compare_json(const mpt_cli_opts *o, const mpt_report_row *rows, int n) {
    json_t *j = header_json(o, 1, &o->seed);
    json_t *precs = json_array();
    for (int p = 0; p < n; p++) {
        json_t *e = json_object();
        json_object_set_new(e, "precision", json_string(mpt_precision_name(rows[p].precision)));
        json_t *runs = json_array();
        json_array_append_new(runs, run_json(rows[p].r, o->seed, rows[p].rel_l2));
        json_object_set_new(e, "runs", runs);
        json_array_append_new(precs, e);
    }
    json_object_set_new(j, "precisions", precs);
    return dump_json(o->out, j);
}

/* ---- report.md ------------------------------------------------------------------------------------------------- */

/* "mean ± sd %" over seeds of a run statistic (fractions shown in %), "n/a" when no seed has it. */
static void seeds_cell(char *b, size_t n, const mpt_report_seed_runs *r, int p, const char *tensor, const char *name) {
    double v[MPT_CLI_MAX_SEEDS];
    int k = 0;
    for (int s = 0; s < r->n_seeds; s++) {
        double x = mpt_run_stat_mean(run_at(r, s, p), tensor, name);
        if (isfinite(x)) v[k++] = 100.0 * x;
    }
    if (k == 0) {
        snprintf(b, n, "n/a");
        return;
    }
    mpt_stats_summary sm;
    mpt_stats_summarize(v, k, &sm);
    if (k > 1) snprintf(b, n, "%.3f%% ± %.3f", sm.mean, sm.sd);
    else snprintf(b, n, "%.3f%%", sm.mean);
}

/* The Numerics section of a multi-seed report: the pooled measurements per precision over seeds, then the
 * first seed's runs in detail (tools/report.c). */
static void write_seeds_numerics(FILE *f, const mpt_cli_opts *o, const mpt_report_seed_runs *r,
                                 const mpt_report_plot_info *plots) {
    fprintf(f, "\n## Numerics\n\nPooled over all layers, mean over each run's telemetry steps, then mean ± sd over "
               "the %d seeds (n/a: not measured in that precision):\n\n"
               "| precision | activation gradients flushed to zero | had S been 1 | made subnormal | updates lost | "
               "lost had they gone to the 16-bit copy | update mass applied |\n|---|---:|---:|---:|---:|---:|---:|\n",
            r->n_seeds);
    for (int p = 0; p < r->n_precisions; p++) {
        char a[64], b[64], c[64], d[64], e[64], g[64];
        seeds_cell(a, sizeof a, r, p, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac");
        seeds_cell(b, sizeof b, r, p, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac@S=1");
        seeds_cell(c, sizeof c, r, p, MPT_TELEMETRY_ALL_ACT_GRAD, "made_subnormal_frac");
        seeds_cell(d, sizeof d, r, p, MPT_TELEMETRY_ALL_PARAMS, "lost_frac");
        seeds_cell(e, sizeof e, r, p, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit");
        seeds_cell(g, sizeof g, r, p, MPT_TELEMETRY_ALL_PARAMS, "applied_mass");
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %s |\n", mpt_precision_name(r->precisions[p]), a, b, c, d, e, g);
    }
    fprintf(f, "\n### The runs of seed %llu in detail\n\n", (unsigned long long)r->seeds[0]);
    mpt_report_row rows[MPT_PRECISION_COUNT];
    char dirs[MPT_PRECISION_COUNT][64];
    for (int p = 0; p < r->n_precisions; p++) {
        snprintf(dirs[p], sizeof dirs[p], "seed-%llu/%s", (unsigned long long)r->seeds[0],
                 mpt_precision_name(r->precisions[p]));
        rows[p] = (mpt_report_row){r->precisions[p], run_at(r, 0, p), r->rel_l2[p], dirs[p]};
    }
    mpt_report_write_numerics(f, o, rows, r->n_precisions, plots);
}

static mpt_status write_report(const mpt_cli_opts *o, const mpt_report_seed_runs *r, const prec_stats *st,
                               const mpt_report_plot_info *plots) {
    const char *plot_file = plots->convergence, *plot_error = plots->convergence_error;
    char path[MPT_CLI_PATH + 64], tmp[MPT_CLI_PATH + 80];
    snprintf(path, sizeof path, "%s/report.md", r->out);
    FILE *f = mpt_outdir_open_atomic(path, tmp, sizeof tmp);
    if (!f) return MPT_ERR_IO;
    char buf[96], lr[64];
    fprintf(f, "# mptrain compare: %s, %d seeds\n\n", o->model, r->n_seeds);
    fprintf(f, "Every precision was trained with each of the seeds");
    for (int s = 0; s < r->n_seeds; s++) fprintf(f, "%s%" PRIu64, s ? ", " : " ", r->seeds[s]);
    fprintf(f, ". A seed fixes the FP32 initial weights, the batch order and the dropout masks, and gives them to "
               "every precision (a paired design), so the difference between a precision and fp32 *for the same "
               "seed* is the effect of the number format; the mean of those differences over seeds, with its "
               "confidence interval, separates that effect from seed-to-seed noise.\n\n");
    fprintf(f, "Settings: model `%s`, optimizer `%s`, lr %s, batch %d, %d epoch(s), data `%s`", o->model,
            mpt_cli_format(o, MPT_OPT_OPTIMIZER, buf, sizeof buf), mpt_cli_format(o, MPT_OPT_LR, lr, sizeof lr),
            o->batch, o->epochs, o->data);
    if (o->limit_train > 0) fprintf(f, ", first %lld training images", (long long)o->limit_train);
    if (o->limit_test > 0) fprintf(f, ", first %lld test images", (long long)o->limit_test);
    fprintf(f, ", device `%s`.\n\n", run_at(r, 0, 0)->device);

    fprintf(f, "## Results (mean ± sd over %d seeds)\n\n", r->n_seeds);
    write_seed_table(f, st, r->n_precisions, o->margin);
    fprintf(f, "\n");
    write_noise_floor(f, st, r->n_precisions, r->n_seeds);
    if (r->machine) {
        fprintf(f, "\n");
        mpt_report_write_machine(f, r->machine);
    }
    fprintf(f, "\n### How to read the verdict\n\n"
               "Δ is the mean over seeds of (this precision's final test accuracy − fp32's, same seed), in "
               "percentage points, with its %.0f%% confidence interval from Student's t distribution on the "
               "per-seed differences (t quantile with n − 1 = %d degrees of freedom, from GSL). The verdict "
               "tests equivalence within ±%.2g pp by two one-sided tests, each at the %.1f%% level, so it can "
               "be read off the interval:\n\n"
               "- **equivalent**: the whole interval lies inside (−%.2g, +%.2g);\n"
               "- **better** / **worse**: the whole interval lies above +%.2g / below −%.2g;\n"
               "- **inconclusive**: the interval crosses a margin. The number of seeds given is the smallest "
               "count at which an interval of the same centre and the observed spread of the differences would "
               "decide; it is an estimate, as the spread itself is measured on few seeds.\n\n",
            100.0 * LEVEL, r->n_seeds - 1, o->margin, 100.0 * (1.0 - LEVEL) / 2.0, o->margin, o->margin, o->margin,
            o->margin);

    fprintf(f, "## Other differences to fp32 (mean over seeds [95%% CI])\n\n"
               "| precision | Δ best test acc (pp) | verdict | Δ final test loss |\n|---|---:|---|---:|\n");
    for (int p = 0; p < r->n_precisions; p++) {
        if (!st[p].paired) continue;
        char b[160], v[128], l[160];
        diff_ci(b, sizeof b, &st[p].d_best, "%.2f");
        verdict_text(v, sizeof v, &st[p].d_best);
        diff_ci(l, sizeof l, &st[p].d_loss, "%.4f");
        fprintf(f, "| %s | %s | %s | %s |\n", mpt_precision_name(st[p].precision), b, v, l);
    }
    fprintf(f, "\nPer run: final test accuracy (test loss).\n\n");
    mpt_report_seed_table(f, r->seeds, r->n_seeds, r->precisions, r->n_precisions, r->res, per_seed_cell);
    fprintf(f, "\nRelative L2 distance of the final %s to the same seed's fp32 run, mean over seeds:",
            o->master_weights == MPT_MASTER_NONE ? "weights (the 16-bit runs' own, widened: --master-weights none)"
                                                 : "FP32 master weights");
    for (int p = 0; p < r->n_precisions; p++)
        if (isfinite(st[p].rel_l2.mean))
            fprintf(f, " %s %.3e;", mpt_precision_name(st[p].precision), st[p].rel_l2.mean);
    fprintf(f, "\n\n## The plot\n\n");
    if (plot_file) fprintf(f, "![convergence](%s)\n\n", plot_file);
    else fprintf(f, "(No plot: %s. The data is in `curves/` and `seed-*/<precision>/*.csv`.)\n\n",
                 plot_error ? plot_error : "not drawn");
    fprintf(f, "Top: training loss per logged step, the mean over seeds as a line and the band from the lowest "
               "to the highest seed. Middle: test accuracy per epoch, the same way. Where the bands of two "
               "precisions overlap, the seeds disagree more than the precisions do. Bottom (with fp16): the "
               "dynamic loss scale of each seed's fp16 run. The curves are in `curves/<precision>_steps.csv` "
               "and `curves/<precision>_epochs.csv`; every run's own files are in "
               "`seed-<S>/<precision>/`.\n");
    if (o->telemetry > 0) write_seeds_numerics(f, o, r, plots);
    return mpt_outdir_commit_atomic(f, tmp, path);
}

mpt_status mpt_report_write_seeds(const mpt_cli_opts *o, const mpt_report_seed_runs *runs,
                                      const mpt_report_plot_info *plots) {
    prec_stats st[MPT_PRECISION_COUNT];
    MPT_TRY(compute_stats(runs, o->margin, st));
    printf("\nMean ± sd over %d seeds; Δ = mean paired difference to fp32 with its 95%% confidence interval:\n\n",
           runs->n_seeds);
    write_seed_table(stdout, st, runs->n_precisions, o->margin);
    printf("\n");
    write_noise_floor(stdout, st, runs->n_precisions, runs->n_seeds);
    if (runs->machine) mpt_report_write_machine(stdout, runs->machine);
    MPT_TRY(write_report(o, runs, st, plots));
    return write_seeds_json(o, runs, st);
}

/* ---- curves over seeds, and their plot --------------------------------------------------------------------- */

/* Reads column `name` of a CSV file with a header line into a malloc'd array; "nan" reads as NAN. */
static mpt_status read_csv_column(const char *path, const char *name, double **out, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return mpt_errorf(MPT_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    char line[4096];
    int col = -1;
    if (fgets(line, sizeof line, f)) {
        int c = 0;
        for (char *save = NULL, *tok = strtok_r(line, ",\n", &save); tok; tok = strtok_r(NULL, ",\n", &save), c++)
            if (strcmp(tok, name) == 0) col = c;
    }
    if (col < 0) {
        fclose(f);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: no column '%s' in the header", path, name);
    }
    double *v = NULL;
    int cnt = 0, cap = 0;
    while (fgets(line, sizeof line, f)) {
        char *save = NULL, *tok = strtok_r(line, ",\n", &save);
        for (int c = 0; tok && c < col; c++) tok = strtok_r(NULL, ",\n", &save);
        if (!tok) continue;
        if (cnt == cap) {
            cap = cap ? 2 * cap : 256;
            double *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(v);
                fclose(f);
                return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate %d values", path, cap);
            }
            v = nv;
        }
        v[cnt++] = strtod(tok, NULL);
    }
    fclose(f);
    *out = v;
    *n = cnt;
    return MPT_OK;
}

/* out/curves/<precision>_<kind>.csv: x, mean, min, max over seeds of column y of each run's file. */
/* Writes curves/<precision>_<kind>.csv; *rows receives its data rows. */
static mpt_status write_curve(const mpt_report_seed_runs *r, int p, const char *file, const char *xcol,
                              const char *ycol, double yscale, const char *kind, int *rows) {
    double *x = NULL, *y[MPT_CLI_MAX_SEEDS] = {0};
    int nx = 0, n = 0;
    mpt_status s = MPT_OK;
    char path[MPT_CLI_PATH + 64];
    for (int k = 0; k < r->n_seeds && s == MPT_OK; k++) {
        char dir[MPT_CLI_PATH];
        s = mpt_report_seed_run_dir(dir, sizeof dir, r->out, r->seeds[k], r->precisions[p]);
        if (s != MPT_OK) break;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        int ny = 0;
        s = read_csv_column(path, ycol, &y[k], &ny);
        if (s == MPT_OK && k == 0) s = read_csv_column(path, xcol, &x, &nx);
        if (s == MPT_OK) n = k == 0 ? ny : (ny < n ? ny : n); /* the rows every seed has */
    }
    FILE *f = NULL;
    if (s == MPT_OK) {
        snprintf(path, sizeof path, "%s/curves/%s_%s.csv", r->out, mpt_precision_name(r->precisions[p]), kind);
        f = mpt_outdir_create_file(path);
        if (!f) s = MPT_ERR_IO;
    }
    if (f) {
        fprintf(f, "%s,mean,min,max\n", xcol);
        for (int i = 0; i < n && i < nx; i++) {
            double v[MPT_CLI_MAX_SEEDS];
            for (int k = 0; k < r->n_seeds; k++) v[k] = yscale * y[k][i];
            mpt_stats_summary sm;
            mpt_stats_summarize(v, r->n_seeds, &sm);
            int finite = 1;
            for (int k = 0; k < r->n_seeds; k++) finite &= isfinite(v[k]);
            if (finite) fprintf(f, "%.9g,%.9g,%.9g,%.9g\n", x[i], sm.mean, sm.min, sm.max);
            else fprintf(f, "%.9g,nan,nan,nan\n", x[i]);
            ++*rows;
        }
        s = mpt_outdir_close_written(f, path);
    }
    free(x);
    for (int k = 0; k < r->n_seeds; k++) free(y[k]);
    return s;
}

static mpt_status write_seeds_script(const mpt_report_seed_runs *r, const int has_data[2]) {
    char path[MPT_CLI_PATH + 64];
    snprintf(path, sizeof path, "%s/convergence.gp", r->out);
    FILE *f = mpt_outdir_create_file(path);
    if (!f) return MPT_ERR_IO;
    int fp16 = -1; /* the mode that scales the loss dynamically by default: its loss-scale panel */
    for (int p = 0; p < r->n_precisions; p++)
        if (mpt_mode_info(r->precisions[p])->dynamic_loss_scale) fp16 = p;
    int panels = fp16 >= 0 ? 3 : 2;
    fprintf(f, "# convergence.gp - written by mptrain compare --seeds; run `gnuplot convergence.gp` here.\n");
    mpt_report_gnuplot_terminal(f, 1000, panels * 380, "convergence.png");
    fprintf(f, "set datafile separator ','\nset datafile missing 'nan'\nset grid\nset key top right\n"
               "set style fill transparent solid 0.18 noborder\nset multiplot layout %d,1\n", panels);
    const char *titles[2] = {"training loss per step: mean over seeds, band = min..max",
                             "test accuracy per epoch: mean over seeds, band = min..max"};
    const char *kinds[2] = {"steps", "epochs"}, *xs[2] = {"step", "epoch"};
    const char *ylabels[2] = {"cross-entropy", "accuracy (%)"};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n%s", titles[k], xs[k], ylabels[k],
                k == 1 ? "set xtics 1\nset key bottom right\n" : "");
        if (!mpt_report_panel_has_data(f, has_data[k], k == 0 ? "nothing to draw: no run logged a step (--log-every)"
                                                              : "nothing to draw: no run completed an epoch (--max-steps)"))
            continue;
        fprintf(f, "plot ");
        for (int p = 0; p < r->n_precisions; p++) {
            const char *name = mpt_precision_name(r->precisions[p]);
            int lt = (int)r->precisions[p] + 1;
            fprintf(f, "%s'curves/%s_%s.csv' using '%s':'min':'max' with filledcurves lt %d notitle, \\\n"
                       "     '' using '%s':'mean' with lines lw 1.5 lt %d title '%s (%d seeds)'",
                    p ? ", \\\n     " : "", name, kinds[k], xs[k], lt, xs[k], lt, name, r->n_seeds);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "set xtics autofreq\n");
    if (fp16 >= 0) fprintf(f, "set title 'fp16 dynamic loss scale, one line per seed'\nset xlabel 'step'\n");
    if (fp16 >= 0 && mpt_report_panel_has_data(f, has_data[0], "nothing to draw: no run logged a step")) {
        fprintf(f, "set ylabel 'loss scale'\n"
                   "set logscale y 2\nset format y '2^{%%L}'\nset ytics 2\n"
                   "set offsets 0, 0, graph 0.1, graph 0.1\nset key bottom left\nplot ");
        for (int s = 0; s < r->n_seeds; s++)
            fprintf(f, "%s'seed-%" PRIu64 "/fp16/metrics.csv' using 'step':'loss_scale' with steps lw 1.2 "
                       "title 'seed %" PRIu64 "'",
                    s ? ", \\\n     " : "", r->seeds[s], r->seeds[s]);
        fprintf(f, "\nunset logscale y\n");
    }
    fprintf(f, "unset multiplot\n");
    MPT_TRY(mpt_outdir_close_written(f, path));
    return MPT_OK;
}

mpt_status mpt_report_plot_seeds(const mpt_report_seed_runs *r) {
    char dir[MPT_CLI_PATH + 16];
    snprintf(dir, sizeof dir, "%s/curves", r->out);
    MPT_TRY(mpt_outdir_mkdirs(dir));
    int rows[2] = {0, 0};
    for (int p = 0; p < r->n_precisions; p++) {
        MPT_TRY(write_curve(r, p, "metrics.csv", "step", "loss", 1.0, "steps", &rows[0]));
        MPT_TRY(write_curve(r, p, "epochs.csv", "epoch", "test_acc", 100.0, "epochs", &rows[1]));
    }
    if (rows[0] == 0 && rows[1] == 0) return mpt_report_nothing_to_plot(r->out);
    const int has_data[2] = {rows[0] > 0, rows[1] > 0};
    MPT_TRY(write_seeds_script(r, has_data));
    return mpt_report_gnuplot(r->out, "convergence.gp");
}
