/*
 * tools/report.c - what a run leaves behind for people and scripts: summary.json (jansson), and for
 * `compare` the Markdown table and report.md. The per-step and per-epoch CSV files are written by the
 * training loop itself (tools/cmd_train.c) as it goes.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mpt_config.h"
#include "tools/cli.h"

void *mpt_cli_precision_map_json(const mpt_graph *g) {
    json_t *a = json_array();
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_node *n = g->nodes[i];
        int gemm_like = n->op == MPT_OP_LINEAR || n->op == MPT_OP_CONV2D;
        json_t *o = json_object();
        json_object_set_new(o, "node", json_string(n->name));
        json_object_set_new(o, "op", json_string(mpt_op_name(n->op)));
        json_object_set_new(o, "input", n->in[0] ? json_string(mpt_dtype_name(n->in[0]->dtype)) : json_null());
        json_object_set_new(o, "weight", n->in[1] ? json_string(mpt_dtype_name(n->in[1]->dtype)) : json_null());
        json_object_set_new(o, "output", n->out ? json_string(mpt_dtype_name(n->out->dtype)) : json_null());
        json_object_set_new(o, "math", gemm_like ? json_string(mpt_math_name(n->math))
                                                 : n->op == MPT_OP_SOFTMAX_XENT ? json_string("fp32") : json_null());
        json_array_append_new(a, o);
    }
    return a;
}

/* NAN becomes null (JSON has no NaN). */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static mpt_status write_json(const char *dir, const char *file, json_t *j) {
    char path[MPT_CLI_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(j);
    if (rc != 0) return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
    return MPT_OK;
}

/* {"every": N, "shadow": b, "metrics": {tensor: {metric: {"last", "mean", "steps"}}}}, or null when off. */
static json_t *telemetry_json(const mpt_cli_opts *o, const mpt_cli_result *r) {
    if (o->telemetry <= 0) return json_null();
    json_t *t = json_object(), *metrics = json_object();
    json_object_set_new(t, "every", json_integer((json_int_t)o->telemetry));
    json_object_set_new(t, "shadow", json_boolean(o->shadow));
    for (int i = 0; i < r->n_telemetry; i++) {
        const mpt_telemetry_stat *s = &r->telemetry[i];
        json_t *per = json_object_get(metrics, s->tensor);
        if (!per) {
            per = json_object();
            json_object_set_new(metrics, s->tensor, per);
        }
        json_t *m = json_object();
        json_object_set_new(m, "last", num(s->last));
        json_object_set_new(m, "mean", num(s->count ? s->sum / (double)s->count : NAN));
        json_object_set_new(m, "steps", json_integer((json_int_t)s->count));
        json_object_set_new(per, s->metric, m);
    }
    json_object_set_new(t, "metrics", metrics);
    return t;
}

mpt_status mpt_cli_write_summary(const char *dir, const mpt_cli_opts *o, const mpt_cli_result *r,
                                 const mpt_graph *g, const mpt_policy *policy) {
    json_t *j = json_object();
    char buf[96];
    json_object_set_new(j, "mptrain", json_string(MPT_VERSION));
    json_object_set_new(j, "model", json_string(o->model));
    json_object_set_new(j, "precision", json_string(mpt_precision_name(o->precision)));
    json_object_set_new(j, "device", json_string(r->device));
    json_object_set_new(j, "tf32_disabled_by_env", json_boolean(policy->tf32_override));
    json_t *cfg = json_object();
    for (mpt_opt_id id = MPT_OPT_FIRST; id <= MPT_OPT_LAST_RECORDED; id++)
        json_object_set_new(cfg, mpt_cli_opt_name(id), json_string(mpt_cli_format(o, id, buf, sizeof buf)));
    json_object_set_new(cfg, "epochs", json_integer(o->epochs));
    json_object_set_new(j, "config", cfg);
    json_object_set_new(j, "epochs_run", json_integer(r->epochs_run));
    json_object_set_new(j, "steps", json_integer(r->iterations));
    json_object_set_new(j, "final_test_accuracy", num(r->final_test_acc));
    json_object_set_new(j, "best_test_accuracy", num(r->best_test_acc));
    json_object_set_new(j, "best_epoch", json_integer(r->best_epoch));
    json_object_set_new(j, "final_test_loss", num(r->final_test_loss));
    json_object_set_new(j, "final_train_loss", num(r->final_train_loss));
    json_object_set_new(j, "final_val_accuracy", num(r->final_val_acc));
    json_object_set_new(j, "final_val_loss", num(r->final_val_loss));
    json_object_set_new(j, "time_per_epoch_s", num(r->mean_epoch_s));
    json_t *ep = json_array();
    for (int i = 0; i < r->epochs_run; i++) json_array_append_new(ep, num(r->epoch_s[i]));
    json_object_set_new(j, "epoch_times_s", ep);
    json_object_set_new(j, "samples_per_s", num(r->samples_per_s));
    json_t *mem = json_object();
    for (int m = 0; m < MPT_MEM_COUNT; m++)
        json_object_set_new(mem, mpt_mem_name((mpt_mem)m), json_integer((json_int_t)r->mem_peak[m]));
    json_object_set_new(mem, "total", json_integer((json_int_t)r->mem_peak_total));
    json_object_set_new(j, "peak_memory_bytes", mem);
    json_object_set_new(j, "steps_skipped", json_integer(r->steps_skipped));
    json_object_set_new(j, "scale_floor_hits", json_integer(r->floor_hits));
    json_object_set_new(j, "final_loss_scale", json_real((double)r->final_scale));
    json_object_set_new(j, "precision_map", (json_t *)mpt_cli_precision_map_json(g));
    json_object_set_new(j, "telemetry", telemetry_json(o, r));
    return write_json(dir, "summary.json", j);
}

/* ---- the comparison ----------------------------------------------------------------------------------------- */

static void pct(char *b, size_t n, double v) {
    if (isfinite(v)) snprintf(b, n, "%.2f%%", 100.0 * v);
    else snprintf(b, n, "n/a");
}

void mpt_cli_write_table(FILE *f, const mpt_cli_compare_row *rows, int n) {
    fprintf(f, "| precision | final test acc | best test acc (epoch) | final train loss | final test loss | "
               "s/epoch | samples/s | peak memory | skipped steps | final loss scale | rel. L2 to fp32 |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const mpt_cli_result *r = rows[i].r;
        char a[32], b[32], l2[32];
        pct(a, sizeof a, r->final_test_acc);
        pct(b, sizeof b, r->best_test_acc);
        if (isfinite(rows[i].rel_l2)) snprintf(l2, sizeof l2, "%.3e", rows[i].rel_l2);
        else snprintf(l2, sizeof l2, "n/a");
        fprintf(f, "| %s | %s | %s (%d) | %.4f | %.4f | %.2f | %.0f | %.1f MiB | %d | %g | %s |\n",
                mpt_precision_name(rows[i].precision), a, b, r->best_epoch, r->final_train_loss, r->final_test_loss,
                r->mean_epoch_s, r->samples_per_s, (double)r->mem_peak_total / (1024.0 * 1024.0), (int)r->steps_skipped,
                (double)r->final_scale, l2);
    }
}

static void write_memory_table(FILE *f, const mpt_cli_compare_row *rows, int n) {
    fprintf(f, "| precision |");
    for (int m = 0; m < MPT_MEM_COUNT; m++) fprintf(f, " %s |", mpt_mem_name((mpt_mem)m));
    fprintf(f, " total |\n|---|");
    for (int m = 0; m <= MPT_MEM_COUNT; m++) fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "| %s |", mpt_precision_name(rows[i].precision));
        for (int m = 0; m < MPT_MEM_COUNT; m++) fprintf(f, " %.2f |", (double)rows[i].r->mem_peak[m] / 1048576.0);
        fprintf(f, " %.2f |\n", (double)rows[i].r->mem_peak_total / 1048576.0);
    }
}

static const char *precision_explained(mpt_precision p) {
    switch (p) {
    case MPT_PRECISION_FP32:
        return "**fp32**: weights, activations and gradients in IEEE binary32 (24-bit significand, unit roundoff "
               "2^-24); GEMMs and convolutions multiply FP32 operands with FP32 FMAs, TF32 off. The reference the "
               "others are measured against (last column).";
    case MPT_PRECISION_TF32:
        return "**tf32**: storage stays FP32, but GEMM and convolution operands are rounded to TF32 (FP32's 8-bit "
               "exponent, 10 explicit significand bits, unit roundoff 2^-11) before the Tensor Core multiply; "
               "products and sums are FP32. Same memory as fp32; on Ampere and newer GPUs the GEMMs run several "
               "times faster. What PyTorch does with `torch.backends.cuda.matmul.allow_tf32 = True`.";
    case MPT_PRECISION_FP16:
        return "**fp16**: weights (a working copy), activations and activation gradients in IEEE binary16 (5-bit "
               "exponent: largest value 65504, smallest normal 2^-14, unit roundoff 2^-11); GEMM operands FP16 with "
               "FP32 accumulation. FP32 master weights take the optimizer step, and the loss is multiplied by a "
               "dynamic loss scale S before backward so small gradients do not underflow to zero; gradients are "
               "divided by S in FP32 and a step whose gradients overflowed (inf/NaN) is skipped and S halved "
               "(`torch.amp.GradScaler`). Skipped steps and the final S are in the table.";
    case MPT_PRECISION_BF16:
        return "**bf16**: like fp16 but in bfloat16 (FP32's 8-bit exponent, so the same range as FP32, but only 7 "
               "explicit significand bits: unit roundoff 2^-8). No loss scaling is needed; the price is coarser "
               "rounding of weights and activations, which FP32 master weights and FP32 accumulation contain.";
    default: return "";
    }
}

mpt_status mpt_cli_write_report(const char *dir, const mpt_cli_opts *o, const mpt_cli_compare_row *rows, int n,
                                const mpt_cli_compare_ref *ref, const char *plot_file, const char *plot_error) {
    char path[MPT_CLI_PATH + 64];
    snprintf(path, sizeof path, "%s/report.md", dir);
    FILE *f = fopen(path, "w");
    if (!f) return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
    char buf[96];
    fprintf(f, "# mptrain compare: %s\n\n", o->model);
    fprintf(f, "Each precision was trained from the same seed (%s), so every run starts from the same FP32 "
               "weights and sees the same batches in the same order; only the number formats differ.\n\n",
            mpt_cli_format(o, MPT_OPT_SEED, buf, sizeof buf));
    char lr[64];
    fprintf(f, "Settings: model `%s`, optimizer `%s`, lr %s, batch %d, %d epoch(s), data `%s`", o->model,
            mpt_cli_format(o, MPT_OPT_OPTIMIZER, buf, sizeof buf), mpt_cli_format(o, MPT_OPT_LR, lr, sizeof lr),
            o->batch, o->epochs, o->data);
    if (o->limit_train > 0) fprintf(f, ", first %lld training images", (long long)o->limit_train);
    if (o->limit_test > 0) fprintf(f, ", first %lld test images", (long long)o->limit_test);
    fprintf(f, ", device `%s`.\n\n", n > 0 ? rows[0].r->device : "?");

    fprintf(f, "## Results\n\n");
    mpt_cli_write_table(f, rows, n);
    fprintf(f, "\nColumns: test accuracy after the last epoch and the best over epochs; the last epoch's mean "
               "training loss (over the logged steps) and test loss; training time per epoch (evaluation "
               "excluded) and training throughput; the peak of the training process's memory on the device, all "
               "categories together; optimizer steps skipped because a gradient was inf/NaN; the loss scale at the "
               "end (1 = no scaling); and the relative L2 distance ||w - w_fp32|| / ||w_fp32|| between this run's "
               "final FP32 master weights and the fp32 run's, over all parameters. It measures how far rounding "
               "moved training's trajectory, not how good the result is: compare it with the accuracy columns.\n\n");
    if (ref && isfinite(ref->fp32_travel))
        fprintf(f, "For scale: training moved the fp32 run's weights by ||w_end - w_init|| / ||w_end|| = %.3e from "
                   "their initialisation. A distance between precisions of the same order means the runs took "
                   "different paths (rounding differences are amplified step after step, as any perturbation of "
                   "SGD is) and arrived at different, equally good weights; a much smaller one means they stayed "
                   "together.\n\n",
                ref->fp32_travel);
    fprintf(f, "Peak memory by category (MiB):\n\n");
    write_memory_table(f, rows, n);
    fprintf(f, "\n`master` is the FP32 copy of the weights that only fp16/bf16 runs need (in fp32/tf32 the weights "
               "are their own masters); `weight` the weights the forward pass reads; `act` and `act_grad` the "
               "activations kept for backward and their gradients, which halve in fp16/bf16; `optim` the optimizer "
               "state (FP32 in every mode); `workspace` kernel scratch (on the CPU backend it includes the copies of "
               "GEMM operands rounded to TF32/FP16/BF16 that emulate the Tensor Core input formats, which a GPU does "
               "not need); `data` the dataset, copied to the device once.\n\n");

    fprintf(f, "## What each precision does\n\n");
    for (int i = 0; i < n; i++) fprintf(f, "- %s\n", precision_explained(rows[i].precision));
    fprintf(f, "\nIn every mode softmax and cross-entropy run in FP32, weight gradients are produced and "
               "accumulated in FP32, and the optimizer updates FP32 master weights: low precision is used where it "
               "is cheap and safe (the multiplies), FP32 where errors would accumulate (sums over steps).\n\n");

    fprintf(f, "## The plot\n\n");
    if (plot_file)
        fprintf(f, "![convergence](%s)\n\n", plot_file);
    else
        fprintf(f, "(No plot: %s. The data is in `<precision>/metrics.csv` and `<precision>/epochs.csv`.)\n\n",
                plot_error ? plot_error : "not drawn");
    fprintf(f, "Top: training loss per step (as logged every %lld steps), one line per precision; lines that lie "
               "on top of each other mean the precision changed nothing visible. Middle: test accuracy after each "
               "epoch. Bottom: the fp16 loss scale on a log axis: it starts at 2^16, halves at every overflow "
               "(a skipped step) and doubles after %d clean steps; a scale that keeps falling means gradients "
               "overflow FP16's range.\n\n",
            (long long)o->log_every, o->growth_interval);
    fprintf(f, "Per-run files: `<precision>/metrics.csv` (per logged step: step, epoch, loss, lr, loss_scale, "
               "steps_skipped), `<precision>/epochs.csv` (per epoch: losses, accuracies, times), "
               "`<precision>/summary.json`, `<precision>/checkpoint.safetensors`.\n");
    int rc = fclose(f);
    if (rc != 0) return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
    return MPT_OK;
}
