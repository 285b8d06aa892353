/*
 * tools/speedrun_report.c - what `mptrain speedrun` reports (tools/speedrun.h): the accuracy claim per precision with its
 * interval, the time to result and where the rest of the time went, the paired differences to fp32, every run; printed,
 * in report.md and in speedrun.json (docs/speedrun.md describes both).
 *
 * Accuracies are in percent, so differences are in percentage points (pp). A precision is compared with fp32 seed by
 * seed (same initial weights and batch order, tools/compare_seeds.c's paired design): the interval of a difference is
 * the t interval of the per-seed differences, not of the two means. Times are seconds.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mpt_config.h"
#include "tools/sentences.h"
#include "tools/speedrun.h"
#include "tools/stats.h"
#include "tools/stats_json.h"

#define TARGET MPT_SPEEDRUN_TARGET_PCT
#define LEVEL MPT_SPEEDRUN_LEVEL

static const mpt_run_result *run_at(const mpt_speedrun_runs *r, int s, int p) {
    return &r->res[s * r->n_precisions + p];
}

/* ---- the statistics ---------------------------------------------------------------------------------------------- */

/* The setup and breakdown quantities of a run, in the order of the "where the time went" table. */
typedef enum part {
    PART_BACKEND,
    PART_UPLOAD,
    PART_KERNELS,
    PART_WARMUP,
    PART_BUILD,
    PART_ORDER,
    PART_EVAL,
    PART_RESULT,
    PART_RESULT_CPU,
    PART_OUTPUTS,
    PART_TOTAL,
    PART_COUNT
} part;

static double part_of(const mpt_run_result *x, part k) {
    const mpt_run_timing *t = &x->timing;
    switch (k) {
    case PART_BACKEND: return t->backend_s;
    case PART_UPLOAD: return t->upload_s;
    case PART_KERNELS: return t->kernels_s;
    case PART_WARMUP: return t->warmup_s;
    case PART_BUILD: return t->build_s;
    case PART_ORDER: return t->order_s;
    case PART_EVAL: return t->eval_s;
    case PART_RESULT: return t->result_s;
    case PART_RESULT_CPU: return t->result_cpu_s;
    case PART_OUTPUTS: return t->outputs_s;
    case PART_TOTAL: return t->total_s;
    case PART_COUNT: break;
    }
    return NAN;
}

typedef struct prec_stats {
    mpt_precision precision;
    mpt_stats_summary acc;          /* final test accuracy, % */
    int has_ci;                     /* n >= 2 */
    mpt_stats_interval acc_ci;
    int at_target;                  /* seeds whose accuracy is >= TARGET */
    mpt_stats_summary result, result_cpu; /* time to result, s */
    double part_mean[PART_COUNT];   /* mean over seeds */
    int epochs;                     /* epochs of every run (the first seed's count) */
    double *epoch_s, *epoch_cpu_s, *epoch_gpu_s; /* [epochs] mean over seeds; epoch_gpu_s NULL without device timing */
    int paired;                     /* compared with fp32 (not fp32 itself, an fp32 run exists, n >= 2) */
    mpt_stats_interval d_acc, d_result, d_result_cpu; /* this - fp32, per seed */
} prec_stats;

static int fp32_index(const mpt_speedrun_runs *r) {
    for (int p = 0; p < r->n_precisions; p++)
        if (mpt_mode_info(r->precisions[p])->reference) return p;
    return -1;
}

static void free_stats(prec_stats *st, int n) {
    for (int p = 0; p < n; p++) {
        free(st[p].epoch_s);
        free(st[p].epoch_cpu_s);
        free(st[p].epoch_gpu_s);
    }
}

static mpt_status compute_stats(const mpt_speedrun_runs *r, prec_stats *st) {
    const int n = r->n_seeds, ref = fp32_index(r);
    double x[MPT_CLI_MAX_SEEDS], y[MPT_CLI_MAX_SEEDS];
    for (int p = 0; p < r->n_precisions; p++) {
        prec_stats *q = &st[p];
        q->precision = r->precisions[p];
        q->at_target = 0;
        for (int s = 0; s < n; s++) {
            x[s] = 100.0 * run_at(r, s, p)->final_test_acc;
            q->at_target += x[s] >= TARGET;
        }
        mpt_stats_summarize(x, n, &q->acc);
        q->has_ci = n >= 2;
        if (q->has_ci) MPT_TRY(mpt_stats_mean_interval(x, n, LEVEL, &q->acc_ci));
        for (int s = 0; s < n; s++) x[s] = run_at(r, s, p)->timing.result_s;
        mpt_stats_summarize(x, n, &q->result);
        for (int s = 0; s < n; s++) x[s] = run_at(r, s, p)->timing.result_cpu_s;
        mpt_stats_summarize(x, n, &q->result_cpu);
        for (int k = 0; k < PART_COUNT; k++) {
            for (int s = 0; s < n; s++) x[s] = part_of(run_at(r, s, p), (part)k);
            mpt_stats_summary sm;
            mpt_stats_summarize(x, n, &sm);
            q->part_mean[k] = sm.mean;
        }
        const mpt_run_result *first = run_at(r, 0, p);
        q->epochs = first->epochs_run;
        for (int s = 1; s < n; s++)
            if (run_at(r, s, p)->epochs_run < q->epochs) q->epochs = run_at(r, s, p)->epochs_run;
        const int ne = q->epochs > 0 ? q->epochs : 1;
        q->epoch_s = calloc((size_t)ne, sizeof *q->epoch_s);
        q->epoch_cpu_s = calloc((size_t)ne, sizeof *q->epoch_cpu_s);
        int gpu = 1;
        for (int s = 0; s < n; s++) gpu &= run_at(r, s, p)->epoch_gpu_s != NULL;
        q->epoch_gpu_s = gpu ? calloc((size_t)ne, sizeof *q->epoch_gpu_s) : NULL;
        if (!q->epoch_s || !q->epoch_cpu_s || (gpu && !q->epoch_gpu_s))
            return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the epoch times of %d epochs", ne);
        for (int e = 0; e < q->epochs; e++)
            for (int s = 0; s < n; s++) {
                const mpt_run_result *x1 = run_at(r, s, p);
                q->epoch_s[e] += x1->epoch_s[e] / n;
                q->epoch_cpu_s[e] += x1->epoch_cpu_s[e] / n;
                if (q->epoch_gpu_s) q->epoch_gpu_s[e] += x1->epoch_gpu_s[e] / n;
            }
        q->paired = ref >= 0 && p != ref && n >= 2;
        if (!q->paired) continue;
        for (int s = 0; s < n; s++) {
            x[s] = 100.0 * run_at(r, s, p)->final_test_acc;
            y[s] = 100.0 * run_at(r, s, ref)->final_test_acc;
            x[s] -= y[s];
        }
        MPT_TRY(mpt_stats_mean_interval(x, n, LEVEL, &q->d_acc));
        for (int s = 0; s < n; s++) x[s] = run_at(r, s, p)->timing.result_s - run_at(r, s, ref)->timing.result_s;
        MPT_TRY(mpt_stats_mean_interval(x, n, LEVEL, &q->d_result));
        for (int s = 0; s < n; s++)
            x[s] = run_at(r, s, p)->timing.result_cpu_s - run_at(r, s, ref)->timing.result_cpu_s;
        MPT_TRY(mpt_stats_mean_interval(x, n, LEVEL, &q->d_result_cpu));
    }
    return MPT_OK;
}

/* ---- text ---------------------------------------------------------------------------------------------------------- */

/* Whether and how the precision reached the target (tools/sentences.h). */
static void verdict_text(char *b, size_t len, const prec_stats *q, int n_seeds) {
    mpt_text_target_verdict(b, len, mpt_precision_name(q->precision), TARGET, n_seeds, q->has_ci ? &q->acc_ci : NULL,
                            q->acc.mean, q->at_target);
}

static const char *reached_word(const prec_stats *q) {
    return mpt_text_target_reached(TARGET, q->has_ci ? &q->acc_ci : NULL, q->acc.mean);
}

static void ci_text(char *b, size_t len, const mpt_stats_interval *c, const char *fmt, int sign) {
    char m[32], lo[32], hi[32];
    snprintf(m, sizeof m, fmt, c->mean);
    snprintf(lo, sizeof lo, fmt, c->lo);
    snprintf(hi, sizeof hi, fmt, c->hi);
    snprintf(b, len, "%s%s [%s, %s]", sign && c->mean >= 0 ? "+" : "", m, lo, hi);
}

/* "mean ± sd (min–max)" of a time, with a precision fit for seconds or milliseconds. */
static void time_text(char *b, size_t len, const mpt_stats_summary *s) {
    const char *fmt = s->mean < 10.0 ? "%.3f" : "%.1f";
    char m[32], d[32], lo[32], hi[32];
    snprintf(m, sizeof m, fmt, s->mean);
    snprintf(lo, sizeof lo, fmt, s->min);
    snprintf(hi, sizeof hi, fmt, s->max);
    if (s->n >= 2) {
        snprintf(d, sizeof d, fmt, s->sd);
        snprintf(b, len, "%s ± %s (%s–%s)", m, d, lo, hi);
    } else {
        snprintf(b, len, "%s", m);
    }
}

static void write_accuracy_table(FILE *f, const mpt_speedrun_runs *r, const prec_stats *st) {
    fprintf(f, "| precision | mean test acc (%%) [95%% CI] | sd | min – max | seeds ≥ %.1f%% | reaches %.1f%% | time to "
               "result, host clock (s) | time to result, CPU (s) |\n|---|---:|---:|---:|---:|---|---:|---:|\n",
            TARGET, TARGET);
    for (int p = 0; p < r->n_precisions; p++) {
        const prec_stats *q = &st[p];
        char acc[160], sd[32], host[160], cpu[160];
        if (q->has_ci) ci_text(acc, sizeof acc, &q->acc_ci, "%.2f", 0);
        else snprintf(acc, sizeof acc, "%.2f (one seed)", q->acc.mean);
        if (q->has_ci) snprintf(sd, sizeof sd, "%.2f", q->acc.sd);
        else snprintf(sd, sizeof sd, "n/a");
        time_text(host, sizeof host, &q->result);
        time_text(cpu, sizeof cpu, &q->result_cpu);
        fprintf(f, "| %s | %s | %s | %.2f – %.2f | %d of %d | %s | %s | %s |\n", mpt_precision_name(q->precision), acc,
                sd, q->acc.min, q->acc.max, q->at_target, r->n_seeds, reached_word(q), host, cpu);
    }
}

static void write_paired_table(FILE *f, const mpt_speedrun_runs *r, const prec_stats *st) {
    int any = 0;
    for (int p = 0; p < r->n_precisions; p++) any |= st[p].paired;
    if (!any) {
        fprintf(f, "(No paired comparison: it needs an fp32 run in --precisions and at least 2 seeds.)\n");
        return;
    }
    const int ref = fp32_index(r);
    fprintf(f, "| precision | Δ test acc vs fp32 (pp) [95%% CI] | Δ time to result, host clock (s) [95%% CI] | Δ time "
               "to result, CPU (s) [95%% CI] | CPU time to result / fp32's |\n|---|---:|---:|---:|---:|\n");
    for (int p = 0; p < r->n_precisions; p++) {
        const prec_stats *q = &st[p];
        if (!q->paired) continue;
        char a[128], h[128], c[128];
        ci_text(a, sizeof a, &q->d_acc, "%.2f", 1);
        ci_text(h, sizeof h, &q->d_result, q->result.mean < 10.0 ? "%.3f" : "%.2f", 1);
        ci_text(c, sizeof c, &q->d_result_cpu, q->result_cpu.mean < 10.0 ? "%.3f" : "%.2f", 1);
        fprintf(f, "| %s | %s | %s | %s | %.3f |\n", mpt_precision_name(q->precision), a, h, c,
                q->result_cpu.mean / st[ref].result_cpu.mean);
    }
}

/* One row of the breakdown table: a label and each precision's mean of part k. */
static void breakdown_row(FILE *f, const char *label, const prec_stats *st, int np, part k) {
    fprintf(f, "| %s |", label);
    for (int p = 0; p < np; p++) fprintf(f, " %.3f |", st[p].part_mean[k]);
    fprintf(f, "\n");
}

static void write_breakdown(FILE *f, const mpt_speedrun_runs *r, const prec_stats *st) {
    const int np = r->n_precisions;
    const mpt_speedrun_process *pr = r->process;
    fprintf(f, "Once per process: ");
    if (isfinite(pr->start_s))
        fprintf(f, "%.3f s from the process's start (exec, the libraries loaded, mptrain's re-execution for the OpenMP "
                   "wait policy; the kernel's start time, 10 ms resolution) to the command's first line; ",
                pr->start_s);
    fprintf(f, "%.3f s reading the data from its files into host memory. Per run, seconds by the host clock unless said "
               "otherwise, the mean over the %d seeds:\n\n| |", pr->data_read_s, r->n_seeds);
    for (int p = 0; p < np; p++) fprintf(f, " %s |", mpt_precision_name(st[p].precision));
    fprintf(f, "\n|---|");
    for (int p = 0; p < np; p++) fprintf(f, "---:|");
    fprintf(f, "\n");
    breakdown_row(f, "backend created", st, np, PART_BACKEND);
    breakdown_row(f, "data uploaded to the device", st, np, PART_UPLOAD);
    breakdown_row(f, "CPU kernel set measured (--cpu-kernels auto)", st, np, PART_KERNELS);
    char w[96];
    snprintf(w, sizeof w, "untimed warm-up (%lld steps, throw-away network)", (long long)r->o->untimed_warmup);
    breakdown_row(f, w, st, np, PART_WARMUP);
    breakdown_row(f, "graph built (plans, arenas, weights initialised)", st, np, PART_BUILD);
    int max_epochs = 0, gpu = 0;
    for (int p = 0; p < np; p++) {
        if (st[p].epochs > max_epochs) max_epochs = st[p].epochs;
        gpu |= st[p].epoch_gpu_s != NULL;
    }
    for (int e = 0; e < max_epochs; e++) {
        fprintf(f, "| → epoch %d, training steps (CPU time%s) |", e + 1, gpu ? "; GPU time by CUDA events" : "");
        for (int p = 0; p < np; p++) {
            if (e >= st[p].epochs) {
                fprintf(f, " n/a |");
                continue;
            }
            fprintf(f, " %.3f (%.3f", st[p].epoch_s[e], st[p].epoch_cpu_s[e]);
            if (st[p].epoch_gpu_s) fprintf(f, "; %.4f", st[p].epoch_gpu_s[e]);
            fprintf(f, ") |");
        }
        fprintf(f, "\n");
    }
    breakdown_row(f, "→ batch orders drawn and uploaded", st, np, PART_ORDER);
    char eval_row[96];
    snprintf(eval_row, sizeof eval_row, "→ final evaluation (%lld test images)", (long long)r->n_test);
    breakdown_row(f, eval_row, st, np, PART_EVAL);
    breakdown_row(f, "**time to result** (→: inside it)", st, np, PART_RESULT);
    breakdown_row(f, "time to result, CPU time", st, np, PART_RESULT_CPU);
    breakdown_row(f, "outputs written (checkpoint, CSVs, summary.json)", st, np, PART_OUTPUTS);
    breakdown_row(f, "whole run (setup to outputs)", st, np, PART_TOTAL);
    fprintf(f, "\nThe rows marked → are inside the time to result; what it holds besides them is the step statistics "
               "read every --log-every steps, the epochs' CSV rows and lines, and the clocks' own reads. The whole "
               "process took %.2f s from its start to this report (%.2f s of CPU time, all threads), for %d runs",
            pr->whole_s, pr->whole_cpu_s, r->n_seeds * r->n_precisions);
    if (isfinite(pr->start_s)) fprintf(f, "; %.3f s of it before the command began (process start)", pr->start_s);
    fprintf(f, ". A single run's process costs its start, the data read, one run and its exit: `time mptrain "
               "speedrun --seeds 1 --precisions P` measures it from outside.\n");
}

static void run_cell(FILE *f, const mpt_run_result *x) {
    fprintf(f, "%.2f%% in %.3f s (%.3f s CPU)", 100.0 * x->final_test_acc, x->timing.result_s, x->timing.result_cpu_s);
}

/* The CPU's model name (/proc/cpuinfo), "" when unknown. */
static void cpu_model(char *b, size_t len) {
    b[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c) snprintf(b, len, "%s", c + 2);
            b[strcspn(b, "\n")] = '\0';
            break;
        }
    fclose(f);
}

static void write_setup(FILE *f, const mpt_speedrun_runs *r) {
    const mpt_cli_opts *o = r->o;
    const mpt_run_result *x = run_at(r, 0, 0);
    fprintf(f, "Device: `%s`", x->device);
    if (r->threads > 0 && strncmp(x->device, "cpu", 3) == 0) {
        char model[256];
        cpu_model(model, sizeof model);
        fprintf(f, " (%s%s%d thread(s))", model, model[0] ? ", " : "", r->threads);
    }
    fprintf(f, ". Seeds:");
    for (int s = 0; s < r->n_seeds; s++) fprintf(f, "%s%" PRIu64, s ? ", " : " ", r->seeds[s]);
    fprintf(f, ". Data: `%s`", o->data);
    if (o->limit_train > 0) fprintf(f, ", the first %lld training images", (long long)o->limit_train);
    if (o->limit_test > 0) fprintf(f, ", the first %lld test images", (long long)o->limit_test);
    fprintf(f, ". mptrain %s.\n", MPT_VERSION);
    for (int p = 0; p < r->n_precisions; p++) {
        const mpt_run_result *y = run_at(r, 0, p);
        if (y->kernels_auto[0]) fprintf(f, "\nCPU kernels of %s: %s.", mpt_precision_name(r->precisions[p]), y->kernels_auto);
    }
    if (r->machine) {
        fprintf(f, "\n\n");
        mpt_report_write_machine(f, r->machine);
    }
    if (!r->record_data)
        fprintf(f, "\n**Not a record:** these runs did not train and test on all of Fashion-MNIST at its default place "
                   "(--data, --limit-train or --limit-test), so the accuracy is not the recipe's.\n");
}

static mpt_status write_report(const mpt_speedrun_runs *r, const prec_stats *st) {
    const mpt_cli_opts *o = r->o;
    char path[MPT_CLI_PATH + 64], tmp[MPT_CLI_PATH + 80];
    snprintf(path, sizeof path, "%s/report.md", o->out);
    FILE *f = mpt_outdir_open_atomic(path, tmp, sizeof tmp);
    if (!f) return MPT_ERR_IO;
    fprintf(f, "# mptrain speedrun: Fashion-MNIST to %.1f%% test accuracy\n\n", TARGET);
    fprintf(f, "The recipe, as the options of `mptrain train` and `compare` it is (`mptrain speedrun --print-recipe`):"
               "\n\n```\n");
    mpt_speedrun_recipe_print(f);
    fprintf(f, "```\n\nEvery other setting is mptrain's default (all of them are listed under \"Settings\"). Each run "
               "trains %d epoch(s), each followed by an evaluation on the test images (the last one's accuracy is the "
               "result); before its clocks "
               "start it has the data on the device, its graph built and an untimed warm-up of %lld training steps "
               "on a throw-away copy of the network (which leaves the run's own training bit-identical).\n\n",
            o->epochs, (long long)o->untimed_warmup);
    write_setup(f, r);
    fprintf(f, "\n## Accuracy and time to result\n\n");
    write_accuracy_table(f, r, st);
    fprintf(f, "\n");
    for (int p = 0; p < r->n_precisions; p++) {
        char v[512];
        verdict_text(v, sizeof v, &st[p], r->n_seeds);
        fprintf(f, "- %s.\n", v);
    }
    fprintf(f, "\nThe interval is the 95%% Student t interval of the mean over the seeds, mean ± t(0.975, n − 1) · "
               "sd / √n (tools/stats.h): how well these %d seeds pin down the recipe's mean accuracy. Time to result "
               "is from the start of training to the final evaluation's accuracy on the host: every epoch's steps, "
               "batch orders and logged statistics and the evaluation, with the data already on the device and the "
               "graph built (mean ± sd over the seeds, min–max). The CPU time is this process's, all threads: on a "
               "machine shared with other work it is the fair clock, as the host clock grows with the load.\n",
            r->n_seeds);
    fprintf(f, "\n## Against fp32, seed by seed\n\n");
    write_paired_table(f, r, st);
    fprintf(f, "\nEach precision's run of a seed starts from the same FP32 initial weights and sees the same batches "
               "as fp32's run of that seed, so the per-seed difference removes what the seed does to both; the "
               "interval is the t interval of those differences.\n");
    fprintf(f, "\n## Where the time goes\n\n");
    write_breakdown(f, r, st);
    fprintf(f, "\n## Every run\n\nFinal test accuracy and time to result (host clock, CPU time); each run's files "
               "(epochs.csv, metrics.csv, summary.json, checkpoint.safetensors) are in `seed-<S>/<precision>/`.\n\n");
    mpt_report_seed_table(f, r->seeds, r->n_seeds, r->precisions, r->n_precisions, r->res, run_cell);
    fprintf(f, "\n## Settings\n\nEvery recorded setting of the runs (the recipe and mptrain's defaults; the precision "
               "and seed are each run's; fp16's loss scale and tf32's TF32 switches follow each precision's defaults, "
               "as its runs' summary.json records them):\n\n");
    char buf[MPT_MODEL_SPEC_MAX + 64];
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++) {
        if (!mpt_cli_opt_recorded(id) || id == MPT_OPT_PRECISION || id == MPT_OPT_SEED) continue;
        fprintf(f, "- `--%s %s`\n", mpt_cli_opt_name(id), mpt_cli_format(o, id, buf, sizeof buf));
    }
    return mpt_outdir_commit_atomic(f, tmp, path);
}

/* ---- speedrun.json ---------------------------------------------------------------------------------------------- */


static json_t *interval_json(const mpt_stats_interval *c) {
    return mpt_stats_json_interval(c->mean, c->sd, c->level, c->lo, c->hi, c->t_crit);
}

static json_t *array_json(const double *v, int n) {
    if (!v) return json_null();
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, mpt_stats_json_num(v[i]));
    return a;
}

static json_t *timing_json(const mpt_run_timing *t) {
    json_t *j = json_object();
    json_object_set_new(j, "backend_s", mpt_stats_json_num(t->backend_s));
    json_object_set_new(j, "upload_s", mpt_stats_json_num(t->upload_s));
    json_object_set_new(j, "cpu_kernels_auto_s", mpt_stats_json_num(t->kernels_s));
    json_object_set_new(j, "untimed_warmup_s", mpt_stats_json_num(t->warmup_s));
    json_object_set_new(j, "untimed_warmup_steps", json_integer(t->warmup_steps));
    json_object_set_new(j, "graph_build_s", mpt_stats_json_num(t->build_s));
    json_object_set_new(j, "time_to_result_s", mpt_stats_json_num(t->result_s));
    json_object_set_new(j, "time_to_result_cpu_s", mpt_stats_json_num(t->result_cpu_s));
    json_object_set_new(j, "batch_orders_s", mpt_stats_json_num(t->order_s));
    json_object_set_new(j, "final_eval_s", mpt_stats_json_num(t->eval_s));
    json_object_set_new(j, "final_eval_cpu_s", mpt_stats_json_num(t->eval_cpu_s));
    json_object_set_new(j, "outputs_s", mpt_stats_json_num(t->outputs_s));
    json_object_set_new(j, "run_s", mpt_stats_json_num(t->total_s));
    return j;
}

static json_t *run_json(const mpt_run_result *x, uint64_t seed) {
    json_t *j = json_object();
    json_object_set_new(j, "seed", json_integer((json_int_t)seed));
    json_object_set_new(j, "dir", json_string(x->out_dir));
    json_object_set_new(j, "final_test_accuracy", mpt_stats_json_num(x->final_test_acc));
    json_object_set_new(j, "final_test_loss", mpt_stats_json_num(x->final_test_loss));
    json_object_set_new(j, "final_train_loss", mpt_stats_json_num(x->final_train_loss));
    json_object_set_new(j, "steps", json_integer(x->iterations));
    json_object_set_new(j, "steps_skipped", json_integer(x->steps_skipped));
    json_object_set_new(j, "epoch_times_s", array_json(x->epoch_s, x->epochs_run));
    json_object_set_new(j, "epoch_cpu_times_s", array_json(x->epoch_cpu_s, x->epochs_run));
    json_object_set_new(j, "epoch_gpu_times_s", array_json(x->epoch_gpu_s, x->epochs_run));
    json_object_set_new(j, "cpu_kernels", x->kernels_auto[0] ? json_string(x->kernels_auto) : json_null());
    json_object_set_new(j, "timing", timing_json(&x->timing));
    return j;
}

static mpt_status write_json(const mpt_speedrun_runs *r, const prec_stats *st) {
    const mpt_cli_opts *o = r->o;
    json_t *j = json_object();
    json_object_set_new(j, "mptrain", json_string(MPT_VERSION));
    json_object_set_new(j, "target_test_accuracy_pct", mpt_stats_json_num(TARGET));
    json_object_set_new(j, "record_data", json_boolean(r->record_data));
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem) {
        mpt_speedrun_recipe_print(mem);
        fclose(mem);
        if (text && len && text[len - 1] == '\n') text[len - 1] = '\0';
    }
    json_object_set_new(j, "recipe", text ? json_string(text) : json_null());
    free(text);
    json_t *cfg = json_object();
    static char buf[MPT_MODEL_SPEC_MAX + 64];
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++)
        if (mpt_cli_opt_recorded(id) && id != MPT_OPT_PRECISION && id != MPT_OPT_SEED)
            json_object_set_new(cfg, mpt_cli_opt_name(id), json_string(mpt_cli_format(o, id, buf, sizeof buf)));
    json_object_set_new(j, "config", cfg);
    json_object_set_new(j, "untimed_warmup_steps", json_integer(o->untimed_warmup));
    json_object_set_new(j, "device", json_string(run_at(r, 0, 0)->device));
    json_object_set_new(j, "threads", r->threads > 0 ? json_integer(r->threads) : json_null());
    json_t *m = json_object();
    char model[256];
    cpu_model(model, sizeof model);
    json_object_set_new(m, "cpu_model", model[0] ? json_string(model) : json_null());
    json_object_set_new(m, "cores", r->machine ? json_integer(r->machine->cores) : json_null());
    json_object_set_new(m, "load_average_start", mpt_stats_json_num(r->machine ? r->machine->load_start : NAN));
    json_object_set_new(m, "load_average_end", mpt_stats_json_num(r->machine ? r->machine->load_end : NAN));
    json_object_set_new(j, "machine", m);
    json_t *pr = json_object();
    json_object_set_new(pr, "process_start_s", mpt_stats_json_num(r->process->start_s));
    json_object_set_new(pr, "data_read_s", mpt_stats_json_num(r->process->data_read_s));
    json_object_set_new(pr, "whole_s", mpt_stats_json_num(r->process->whole_s));
    json_object_set_new(pr, "whole_cpu_s", mpt_stats_json_num(r->process->whole_cpu_s));
    json_object_set_new(j, "process", pr);
    json_t *sa = json_array();
    for (int s = 0; s < r->n_seeds; s++) json_array_append_new(sa, json_integer((json_int_t)r->seeds[s]));
    json_object_set_new(j, "seeds", sa);
    json_t *precs = json_array();
    for (int p = 0; p < r->n_precisions; p++) {
        const prec_stats *q = &st[p];
        json_t *e = json_object();
        json_object_set_new(e, "precision", json_string(mpt_precision_name(q->precision)));
        json_object_set_new(e, "test_accuracy_pct", mpt_stats_json_summary(&q->acc));
        json_object_set_new(e, "test_accuracy_interval", q->has_ci ? interval_json(&q->acc_ci) : json_null());
        json_object_set_new(e, "seeds_at_target", json_integer(q->at_target));
        json_object_set_new(e, "share_at_target", mpt_stats_json_num((double)q->at_target / r->n_seeds));
        json_object_set_new(e, "reaches_target_mean", json_boolean(q->acc.mean >= TARGET));
        json_object_set_new(e, "reaches_target_interval", q->has_ci ? json_boolean(q->acc_ci.lo >= TARGET) : json_null());
        json_object_set_new(e, "time_to_result_s", mpt_stats_json_summary(&q->result));
        json_object_set_new(e, "time_to_result_cpu_s", mpt_stats_json_summary(&q->result_cpu));
        json_t *parts = json_object();
        static const char *const part_names[PART_COUNT] = {
            [PART_BACKEND] = "backend_s",   [PART_UPLOAD] = "upload_s",       [PART_KERNELS] = "cpu_kernels_auto_s",
            [PART_WARMUP] = "untimed_warmup_s", [PART_BUILD] = "graph_build_s", [PART_ORDER] = "batch_orders_s",
            [PART_EVAL] = "final_eval_s",   [PART_RESULT] = "time_to_result_s",
            [PART_RESULT_CPU] = "time_to_result_cpu_s", [PART_OUTPUTS] = "outputs_s", [PART_TOTAL] = "run_s"};
        _Static_assert(sizeof part_names / sizeof part_names[0] == PART_COUNT, "one name per part");
        for (int k = 0; k < PART_COUNT; k++)
            json_object_set_new(parts, part_names[k], mpt_stats_json_num(q->part_mean[k]));
        json_object_set_new(parts, "epoch_times_s", array_json(q->epoch_s, q->epochs));
        json_object_set_new(parts, "epoch_cpu_times_s", array_json(q->epoch_cpu_s, q->epochs));
        json_object_set_new(parts, "epoch_gpu_times_s", array_json(q->epoch_gpu_s, q->epochs));
        json_object_set_new(e, "mean_breakdown", parts);
        if (q->paired) {
            json_t *vs = json_object();
            json_object_set_new(vs, "test_accuracy_pp", interval_json(&q->d_acc));
            json_object_set_new(vs, "time_to_result_s", interval_json(&q->d_result));
            json_object_set_new(vs, "time_to_result_cpu_s", interval_json(&q->d_result_cpu));
            json_object_set_new(e, "vs_fp32", vs);
        } else {
            json_object_set_new(e, "vs_fp32", json_null());
        }
        json_t *runs = json_array();
        for (int s = 0; s < r->n_seeds; s++) json_array_append_new(runs, run_json(run_at(r, s, p), r->seeds[s]));
        json_object_set_new(e, "runs", runs);
        json_array_append_new(precs, e);
    }
    json_object_set_new(j, "precisions", precs);
    char path[MPT_CLI_PATH + 64], tmp[MPT_CLI_PATH + 80];
    snprintf(path, sizeof path, "%s/speedrun.json", o->out);
    FILE *f = mpt_outdir_open_atomic(path, tmp, sizeof tmp);
    if (!f) {
        json_decref(j);
        return MPT_ERR_IO;
    }
    int rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(j);
    if (rc != 0) {
        mpt_status s = mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
        mpt_outdir_discard(f);
        return s;
    }
    return mpt_outdir_commit_atomic(f, tmp, path);
}

mpt_status mpt_speedrun_report(const mpt_speedrun_runs *r) {
    prec_stats st[MPT_PRECISION_COUNT];
    memset(st, 0, sizeof st);
    mpt_status s = compute_stats(r, st);
    if (s == MPT_OK) {
        printf("\nmptrain speedrun: %d seed(s) per precision, target %.1f%% test accuracy\n\n", r->n_seeds, TARGET);
        write_accuracy_table(stdout, r, st);
        printf("\n");
        for (int p = 0; p < r->n_precisions; p++) {
            char v[512];
            verdict_text(v, sizeof v, &st[p], r->n_seeds);
            printf("%s.\n", v);
        }
        if (!r->record_data)
            printf("Not a record: these runs did not train and test on all of Fashion-MNIST at its default place "
                   "(--data, --limit-train or --limit-test), so the accuracy is not the recipe's.\n");
        printf("\n");
        write_paired_table(stdout, r, st);
        if (r->machine) mpt_report_write_machine(stdout, r->machine);
        s = write_report(r, st);
    }
    if (s == MPT_OK) s = write_json(r, st);
    free_stats(st, r->n_precisions);
    return s;
}
