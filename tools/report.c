/*
 * tools/report.c - what `compare` leaves behind for people: the Markdown table and report.md. A run's own files
 * (CSVs, summary.json, checkpoint) are written by the training run (tools/run.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpt_config.h"
#include "tools/formats.h"
#include "tools/report.h"
#include "tools/sentences.h"

/* ---- the comparison ----------------------------------------------------------------------------------------- */

static void pct(char *b, size_t n, double v) {
    if (isfinite(v)) snprintf(b, n, "%.2f%%", 100.0 * v);
    else snprintf(b, n, "n/a");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The run's GPU time per epoch by CUDA events: the median of its epochs after the first (the first chooses the
 * GEMM/convolution algorithms and records the step graph), or of the only one; NAN without device timing (CPU). */
static double gpu_epoch_median(const mpt_run_result *r) {
    if (!r->epoch_gpu_s || r->epochs_run < 1) return NAN;
    int first = r->epochs_run > 1 ? 1 : 0, n = r->epochs_run - first;
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return NAN;
    memcpy(v, r->epoch_gpu_s + first, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
    return m;
}

size_t mpt_report_model_bytes(const mpt_run_result *r, int fp32_state) {
    static const mpt_mem working[] = {MPT_MEM_WEIGHT, MPT_MEM_ACT, MPT_MEM_ACT_GRAD};
    static const mpt_mem state[] = {MPT_MEM_MASTER, MPT_MEM_GRAD, MPT_MEM_OPTIM};
    size_t b = 0;
    for (int i = 0; i < 3; i++) b += r->mem_peak[fp32_state ? state[i] : working[i]];
    return b;
}

void mpt_report_write_table(FILE *f, const mpt_report_row *rows, int n) {
    int gpu = 0; /* a column of CUDA-event times when any run had them; else one of CPU time */
    for (int i = 0; i < n; i++) gpu |= rows[i].r->epoch_gpu_s != NULL;
    fprintf(f, "| precision | final test acc | best test acc (epoch) | final train loss | final test loss | "
               "s/epoch (host clock) |%s samples/s | weights + activations | update state (masters, grads, "
               "optimizer) | peak memory (all) | skipped steps | final loss scale | rel. L2 to fp32 |\n",
            gpu ? " GPU s/epoch (CUDA events, median after the first) |" : " CPU s/epoch (all threads) |");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const mpt_run_result *r = rows[i].r;
        char a[32], b[32], l2[32], host[32], dev[48] = "";
        pct(a, sizeof a, r->final_test_acc);
        pct(b, sizeof b, r->best_test_acc);
        if (isfinite(rows[i].rel_l2)) snprintf(l2, sizeof l2, "%.3e", rows[i].rel_l2);
        else snprintf(l2, sizeof l2, "n/a");
        if (isfinite(r->mean_epoch_s)) /* NAN when no epoch completed (a --max-steps stop inside the first) */
            snprintf(host, sizeof host, gpu ? "%.4f" : "%.2f", r->mean_epoch_s); /* GPU epochs last milliseconds */
        else snprintf(host, sizeof host, "n/a");
        double g = gpu ? gpu_epoch_median(r) : r->mean_epoch_cpu_s;
        if (isfinite(g)) snprintf(dev, sizeof dev, gpu ? " %.4f |" : " %.2f |", g);
        else snprintf(dev, sizeof dev, " n/a |");
        char tl[32] = "n/a", vl[32] = "n/a"; /* the last epoch's mean training loss: NAN when no epoch completed */
        if (isfinite(r->final_train_loss)) snprintf(tl, sizeof tl, "%.4f", r->final_train_loss);
        if (isfinite(r->final_test_loss)) snprintf(vl, sizeof vl, "%.4f", r->final_test_loss);
        fprintf(f, "| %s | %s | %s (%d) | %s | %s | %s |%s %.0f | %.2f MiB | %.2f MiB | %.1f MiB | %d | %g | %s |\n",
                mpt_precision_name(rows[i].precision), a, b, r->best_epoch, tl, vl,
                host, dev, r->samples_per_s, (double)mpt_report_model_bytes(r, 0) / 1048576.0,
                (double)mpt_report_model_bytes(r, 1) / 1048576.0, (double)r->mem_peak_total / 1048576.0,
                (int)r->steps_skipped, (double)r->final_scale, l2);
    }
}

void mpt_report_machine_start(mpt_report_machine *m) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    m->cores = c > 0 ? (int)c : 0;
    m->load_start = m->load_end = NAN;
    double l[1];
    if (getloadavg(l, 1) == 1) m->load_start = l[0];
}

void mpt_report_machine_end(mpt_report_machine *m) {
    double l[1];
    if (getloadavg(l, 1) == 1) m->load_end = l[0];
}

void mpt_report_write_machine(FILE *f, const mpt_report_machine *m) {
    if (!m || !isfinite(m->load_start) || !isfinite(m->load_end)) return;
    double hi = fmax(m->load_start, m->load_end);
    fprintf(f, "Machine load: %d CPU cores, 1-minute load average %.2f when the runs started and %.2f when they "
               "ended. %s\n",
            m->cores, m->load_start, m->load_end,
            hi > (double)m->cores
                ? "The machine was busier than its cores: other work shared the CPUs, which inflates the host-clock "
                  "times (s/epoch, samples/s) and can reorder the precisions; compare the CPU times, which count only "
                  "this process's work."
                : "The machine was not oversubscribed, so the host-clock times are the runs' own.");
}

void mpt_report_write_kernels(FILE *f, const mpt_report_row *rows, int n) {
    for (int i = 0; i < n; i++)
        if (rows[i].r->kernels_auto[0] && isfinite(rows[i].r->kernels_auto_s[0]))
            fprintf(f, "CPU kernels of %s, %s (the time columns are this set's).\n",
                    mpt_precision_name(rows[i].precision), rows[i].r->kernels_auto);
}

void mpt_report_write_instruments(FILE *f, const mpt_report_row *rows, int n) {
    double lo = INFINITY, hi = -INFINITY, clo = INFINITY, chi = -INFINITY, total = 0.0, train = 0.0;
    int any = 0;
    for (int i = 0; i < n; i++) {
        const mpt_run_result *r = rows[i].r;
        if (!(r->telemetry_s > 0.0) || r->epochs_run < 1) continue;
        const double h = r->telemetry_s / r->epochs_run, c = r->telemetry_cpu_s / r->epochs_run;
        lo = fmin(lo, h), hi = fmax(hi, h), clo = fmin(clo, c), chi = fmax(chi, c);
        total += r->telemetry_s;
        train += r->mean_epoch_s * r->epochs_run;
        any = 1;
    }
    if (!any) return;
    fprintf(f, "Instruments: the telemetry's own work took %.3g-%.3g s an epoch on the host clock (%.3g-%.3g s of CPU "
               "time), %.0f%% on top of the training time over all runs; the time columns exclude it and measure "
               "training (a telemetry step's own step, run without the CUDA Graph and with a per-tensor optimizer, "
               "stays inside them; docs/outputs.md).\n",
            lo, hi, clo, chi, train > 0.0 ? 100.0 * total / train : 0.0);
}

static void write_memory_table(FILE *f, const mpt_report_row *rows, int n) {
    fprintf(f, "| precision |");
    for (int m = 0; m < MPT_MEM_COUNT; m++) fprintf(f, " %s |", mpt_mem_name((mpt_mem)m));
    fprintf(f, " total |\n|---|");
    for (int m = 0; m <= MPT_MEM_COUNT; m++) fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "| %s |", mpt_precision_name(rows[i].precision));
        for (int m = 0; m < MPT_MEM_COUNT; m++) {
            if (m == MPT_MEM_MASTER && rows[i].r->mem_peak[m] == 0) fprintf(f, " none |");
            else fprintf(f, " %.2f |", (double)rows[i].r->mem_peak[m] / 1048576.0);
        }
        fprintf(f, " %.2f |\n", (double)rows[i].r->mem_peak_total / 1048576.0);
    }
}

/* tf32_off: NVIDIA_TF32_OVERRIDE=0 was in effect (engine/amp/policy.h), so the tf32 run computed in FP32. */
static const char *precision_explained(mpt_precision p, int tf32_off) {
    if (mpt_mode_info(p)->tf32_default && tf32_off)
        return "**tf32**: NVIDIA_TF32_OVERRIDE=0 was set for this run. It turns TF32 off in cuBLAS and cuDNN, and "
               "mptrain honours it in its CPU emulation too, so this tf32 run computed in full FP32: its row "
               "should match fp32's. Unset the variable to see TF32's rounding (operands cut to 10 explicit "
               "significand bits, unit roundoff 2^-11). In PyTorch TF32 is governed by "
               "`torch.backends.cuda.matmul.allow_tf32` (matmuls, False by default), "
               "`torch.backends.cudnn.allow_tf32` (convolutions, True by default) and "
               "`torch.set_float32_matmul_precision(\"high\")`; the same environment variable overrides all of "
               "them.";
    const mpt_mode_desc *m = mpt_mode_info(p);
    return m ? m->explained : "";
}

/* ---- the Numerics section ----------------------------------------------------------------------------------- */

static int is_pooled(const char *tensor) { return strncmp(tensor, "all_", 4) == 0 || strcmp(tensor, "amp") == 0; }

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The name of the 16-bit format a precision stores activations, gradients and working weights in: its own name,
 * except in the FP8 modes, which keep everything outside their FP8 GEMMs in BF16. */
static const char *working_name(mpt_precision p) { return mpt_mode_info(p)->act_name; }

/* The rounded tensors (rows with flush_frac), the three with the largest mean flushed fraction first. */
static void numerics_underflow(FILE *f, const mpt_report_row *row) {
    const mpt_run_result *r = row->r;
    const char *name = working_name(row->precision);
    int idx[3] = {-1, -1, -1};
    for (int i = 0; i < r->n_telemetry; i++) {
        const mpt_telemetry_stat *s = &r->telemetry[i];
        if (strcmp(s->metric, "flush_frac") != 0 || !ends_with(s->tensor, ".grad") || s->count == 0) continue;
        double v = s->sum / (double)s->count;
        for (int k = 0; k < 3; k++) {
            double w = idx[k] < 0 ? -1.0 : r->telemetry[idx[k]].sum / (double)r->telemetry[idx[k]].count;
            if (v > w) {
                for (int j = 2; j > k; j--) idx[j] = idx[j - 1];
                idx[k] = i;
                break;
            }
        }
    }
    if (idx[0] < 0) {
        fprintf(f, "**Underflow.** Nothing in %s is rounded from FP32 into a 16-bit format: activations and gradients "
                   "are stored in FP32, so no value was flushed by such a rounding (the stored-range fractions are in "
                   "`%s/telemetry.csv`).\n\n", name, name);
        return;
    }
    fprintf(f, "**Underflow.** The activation gradients whose rounding into %s flushed the largest share of their "
               "nonzero values to zero (mean over telemetry steps; *mass lost* = sum |v| of the flushed values / "
               "sum |v|; *rel. L2 error* = ||rounded - v|| / ||v||, what the rounding cost the whole gradient; the "
               "S/2, 2S and S = 1 columns: the same values rounded at another loss scale):\n\n", name);
    fprintf(f, "| tensor | flushed | made subnormal | mass lost | rel. L2 error | flushed at S/2 | at 2S | at S = 1 | "
               "mass lost at S = 1 | rel. L2 error at S = 1 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < 3 && idx[k] >= 0; k++) {
        const char *t = r->telemetry[idx[k]].tensor;
        char a[32], b[32], c[32], d[32], e[32], g[32], h[32], l[32] = "n/a", m[32] = "n/a";
        mpt_text_pct(a, sizeof a, mpt_run_stat_mean(r, t, "flush_frac"));
        mpt_text_pct(b, sizeof b, mpt_run_stat_mean(r, t, "made_subnormal_frac"));
        mpt_text_pct(c, sizeof c, mpt_run_stat_mean(r, t, "mass_lost"));
        mpt_text_pct(d, sizeof d, mpt_run_stat_mean(r, t, "flush_frac@S/2"));
        mpt_text_pct(e, sizeof e, mpt_run_stat_mean(r, t, "flush_frac@2S"));
        mpt_text_pct(g, sizeof g, mpt_run_stat_mean(r, t, "flush_frac@S=1"));
        mpt_text_pct(h, sizeof h, mpt_run_stat_mean(r, t, "mass_lost@S=1"));
        const double rel = mpt_run_stat_mean(r, t, "rel_l2_err"), rel1 = mpt_run_stat_mean(r, t, "rel_l2_err@S=1");
        if (isfinite(rel)) snprintf(l, sizeof l, "%.3e", rel);
        if (isfinite(rel1)) snprintf(m, sizeof m, "%.3e", rel1);
        fprintf(f, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t, a, b, c, l, d, e, g, h, m);
    }
    double all = mpt_run_stat_mean(r, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac");
    double all1 = mpt_run_stat_mean(r, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac@S=1");
    double scale = mpt_run_stat_mean(r, "amp", "loss_scale");
    char a[32];
    mpt_text_pct(a, sizeof a, mpt_run_stat_mean(r, MPT_TELEMETRY_ALL_ACT, "flush_frac"));
    fprintf(f, "\nActivations (the forward pass): %s of the nonzero values flushed to zero when rounded to %s.\n\n", a,
            name);
    const int f16 = mpt_mode_info(row->precision)->act_dtype == MPT_DTYPE_F16;
    const char *g = MPT_TELEMETRY_ALL_ACT_GRAD;
    mpt_text_underflow u = {g, all1, mpt_run_stat_mean(r, g, "mass_lost@S=1"), mpt_run_stat_mean(r, g, "rel_l2_err@S=1"),
                            all, mpt_run_stat_mean(r, g, "mass_lost"), mpt_run_stat_mean(r, g, "rel_l2_err"),
                            isfinite(scale) ? log2(scale) : 0.0};
    char text[1400];
    mpt_text_grad_underflow(text, sizeof text, name, f16, scale, &u);
    fprintf(f, "%s\n\n", text);
}

static void numerics_lost(FILE *f, const mpt_cli_opts *o, const mpt_report_row *row) {
    const mpt_run_result *r = row->r;
    int no_masters = o->master_weights == MPT_MASTER_NONE &&
                     mpt_mode_info(row->precision)->act_dtype != MPT_DTYPE_F32 &&
                     mpt_mode_info(row->precision)->fp8 == MPT_FP8_KIND_NONE;
    const char *name = working_name(row->precision);
    if (!mpt_run_stat(r, MPT_TELEMETRY_ALL_PARAMS, "lost_frac")) {
        fprintf(f, "**Lost updates.** Not measured (no telemetry step completed an optimizer step).\n\n");
        return;
    }
    int cf = mpt_run_stat(r, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit") != NULL;
    fprintf(f, "**Lost updates.** Per parameter tensor, the non-zero optimizer updates that left the stored weight "
               "unchanged (mean over telemetry steps):\n\n| parameter | lost | share of update mass lost |%s\n"
               "|---|---:|---:|%s\n",
            cf ? " lost if applied to the 16-bit copy | mass lost so |" : "", cf ? "---:|---:|" : "");
    for (int i = 0; i < r->n_telemetry; i++) {
        const mpt_telemetry_stat *s = &r->telemetry[i];
        if (strcmp(s->metric, "lost_frac") != 0 || is_pooled(s->tensor)) continue;
        char a[32], b[32], c[32], d[32];
        mpt_text_pct(a, sizeof a, mpt_run_stat_mean(r, s->tensor, "lost_frac"));
        mpt_text_pct(b, sizeof b, mpt_run_stat_mean(r, s->tensor, "lost_mass"));
        fprintf(f, "| `%s` | %s | %s |", s->tensor, a, b);
        if (cf) {
            mpt_text_pct(c, sizeof c, mpt_run_stat_mean(r, s->tensor, "lost_frac_if_16bit"));
            mpt_text_pct(d, sizeof d, mpt_run_stat_mean(r, s->tensor, "lost_mass_if_16bit"));
            fprintf(f, " %s | %s |", c, d);
        }
        fprintf(f, "\n");
    }
    double lost = mpt_run_stat_mean(r, MPT_TELEMETRY_ALL_PARAMS, "lost_frac");
    char a[32], b[32], m[32];
    mpt_text_pct(a, sizeof a, lost);
    mpt_text_pct(m, sizeof m, mpt_run_stat_mean(r, MPT_TELEMETRY_ALL_PARAMS, "lost_mass"));
    if (cf) {
        double lost16 = mpt_run_stat_mean(r, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit");
        mpt_text_pct(b, sizeof b, lost16);
        if (lost16 > lost)
            fprintf(f, "\nThe FP32 master weights lost %s of the non-zero updates (%s of the update mass); added to the "
                       "%s working copy, the same updates would have lost %s (those smaller than half an ulp of the "
                       "weight in %s): that difference is what the FP32 masters keep.\n\n", a, m, name, b, name);
        else
            fprintf(f, "\nThe FP32 master weights lost %s of the non-zero updates and the %s working copy would have "
                       "lost %s: the expected advantage of FP32 masters is absent in this run.\n\n", a, name, b);
    } else if (no_masters) {
        int sr = o->update_rounding == MPT_ROUNDING_STOCHASTIC;
        fprintf(f, "\nWithout FP32 master weights (`--master-weights none`%s) the updates go straight into the %s "
                   "weights: %s of the non-zero updates were lost, carrying %s of the update mass%s.\n\n",
                sr ? ", stochastic rounding" : "", name, a, m,
                sr ? ". With stochastic rounding an update is lost when it rounds back to the old weight, which a "
                     "small update does most of the time; but the weight's expected value still moves by the full "
                     "update, which is what lets training proceed"
                   : " (updates below half an ulp of the weight in that format vanish under round-to-nearest)");
    } else {
        char t[400];
        mpt_text_fp32_lost(t, sizeof t, lost, mpt_run_stat_mean(r, MPT_TELEMETRY_ALL_PARAMS, "lost_mass"));
        fprintf(f, "\nOver all parameters, %s.\n\n", t);
    }
}

static void numerics_twin(FILE *f, const mpt_report_row *row) {
    const mpt_run_result *r = row->r;
    const char *name = mpt_precision_name(row->precision);
    if (!mpt_run_stat(r, "input", "twin_rel_l2")) return;
    fprintf(f, "**Against the FP32 twin.** Relative L2 error ||x - x_fp32|| / ||x_fp32|| of each layer's output, its "
               "gradient (unscaled), and its weight gradient, and the weight gradient's cosine (means over "
               "telemetry steps):\n\n| layer output | activation | activation gradient | weight gradient | "
               "cosine |\n|---|---:|---:|---:|---:|\n");
    double worst = -1.0;
    const char *worst_t = "";
    for (int i = 0; i < r->n_telemetry; i++) {
        const mpt_telemetry_stat *s = &r->telemetry[i];
        if (strcmp(s->metric, "twin_rel_l2") != 0 || !ends_with(s->tensor, ".out")) continue;
        char layer[MPT_NAME_LEN + 16], gname[MPT_NAME_LEN + 24], wname[MPT_NAME_LEN + 32];
        snprintf(layer, sizeof layer, "%.*s", (int)(strlen(s->tensor) - 4), s->tensor);
        snprintf(gname, sizeof gname, "%s.grad", s->tensor);
        snprintf(wname, sizeof wname, "%s.weight.grad", layer);
        double act = mpt_run_stat_mean(r, s->tensor, "twin_rel_l2"), gr = mpt_run_stat_mean(r, gname, "twin_rel_l2");
        double wg = mpt_run_stat_mean(r, wname, "twin_rel_l2"), cs = mpt_run_stat_mean(r, wname, "twin_cos");
        char a[32] = "n/a", b[32] = "n/a", c[32] = "n/a", d[32] = "";
        if (isfinite(act)) snprintf(a, sizeof a, "%.3e", act);
        if (isfinite(gr)) snprintf(b, sizeof b, "%.3e", gr);
        if (isfinite(wg)) snprintf(c, sizeof c, "%.3e", wg);
        if (isfinite(cs)) snprintf(d, sizeof d, "%.9f", cs);
        fprintf(f, "| `%s` | %s | %s | %s | %s |\n", s->tensor, a, b, c, d);
        if (isfinite(act) && act > worst) {
            worst = act;
            worst_t = s->tensor;
        }
    }
    const mpt_mode_desc *mode = mpt_mode_info(row->precision);
    double u = mpt_math_unit_roundoff(mode->math); /* the FP8 modes: E4M3's 2^-4 */
    if (mode->reference)
        fprintf(f, "\n%s\n\n", worst == 0.0 ? "fp32 runs the twin's own arithmetic: every error is exactly 0, as it must be."
                                           : "fp32 should match its twin exactly, but it does not: something other than "
                                             "the number format differs between the run and its twin.");
    else if (worst > 0.0)
        fprintf(f, "\nThe largest activation error in %s is at `%s`: %.3e, about 2^%.1f, against the unit roundoff "
                   "u = 2^%.0f of its operand format (%.1f u): every rounding adds up to u per value, and the errors of "
                   "earlier layers travel forward.\n\n",
                name, worst_t, worst, log2(worst), log2(u), worst / u);
    else
        fprintf(f, "\n%s matched the FP32 twin exactly in every layer: the expected rounding error (about u = 2^%.0f) "
                   "is absent in this run.\n\n", name, log2(u));
}

/* FP8 runs: per FP8 operand tensor the mean over telemetry steps of its saturated, flushed and subnormal fractions
 * (at the scale used, at s/2 and 2s), and the last scale; then the gradient operands pooled, in the format the mode
 * casts them to and in the other FP8 format (E4M3 <-> E5M2, scaled by the same rule): why fp8 uses E5M2 for them. */
static void numerics_fp8(FILE *f, const mpt_report_row *row) {
    const mpt_run_result *r = row->r;
    if (!mpt_run_stat(r, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac")) return;
    fprintf(f, "**FP8 casts.** Per operand of an FP8 GEMM (mean over telemetry steps; the fractions are of the nonzero "
               "values; s/2 and 2s: had the scale been half or twice what it was; the last column, with delayed "
               "scaling: this step's amax over the amax its scale came from, above 1 when the scale was stale and too "
               "large):\n\n"
               "| tensor | amax | scale (last) | saturated | flushed | subnormal | flushed @s/2 | saturated @2s | "
               "amax now / amax of the scale |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    const char *worst = NULL;
    double worst_flush = -1.0;
    for (int i = 0; i < r->n_telemetry; i++) {
        const mpt_telemetry_stat *s = &r->telemetry[i];
        if (strcmp(s->metric, "fp8_flush_frac") != 0 || is_pooled(s->tensor)) continue;
        const char *t = s->tensor;
        const mpt_telemetry_stat *sc = mpt_run_stat(r, t, "fp8_scale");
        char scale[32] = "per block", stale[32] = "-", c[6][32];
        if (sc) snprintf(scale, sizeof scale, "%.4g", sc->last);
        if (isfinite(mpt_run_stat_mean(r, t, "fp8_staleness"))) snprintf(stale, sizeof stale, "%.3f", mpt_run_stat_mean(r, t, "fp8_staleness"));
        const double fl = mpt_run_stat_mean(r, t, "fp8_flush_frac");
        mpt_text_pct(c[0], sizeof c[0], mpt_run_stat_mean(r, t, "fp8_sat_frac"));
        mpt_text_pct(c[1], sizeof c[1], fl);
        mpt_text_pct(c[2], sizeof c[2], mpt_run_stat_mean(r, t, "fp8_subnormal_frac"));
        mpt_text_pct(c[3], sizeof c[3], mpt_run_stat_mean(r, t, "fp8_flush_frac@s/2"));
        mpt_text_pct(c[4], sizeof c[4], mpt_run_stat_mean(r, t, "fp8_sat_frac@2s"));
        fprintf(f, "| `%s` | %.4g | %s | %s | %s | %s | %s | %s | %s |\n", t, mpt_run_stat_mean(r, t, "fp8_amax"), scale, c[0],
                c[1], c[2], c[3], c[4], stale);
        if (fl > worst_flush) {
            worst_flush = fl;
            worst = t;
        }
    }
    if (worst && worst_flush > 0.0)
        fprintf(f, "\nThe FP8 cast that flushed the largest share of its nonzero values to zero is `%s`'s: %.3g%% on "
                   "average.\n", worst, 100.0 * worst_flush);
    else if (worst)
        fprintf(f, "\nNo FP8 cast flushed a nonzero value to zero at the scale it used (flushing not observed).\n");
    /* the gradients in both formats */
    const mpt_mode_desc *mode = mpt_mode_info(row->precision);
    const int e5 = mode->fp8_fmt[2] == MPT_DTYPE_E5M2, mx = mode->fp8 == MPT_FP8_KIND_MX;
    const char *fmt = e5 ? "E5M2" : "E4M3", *other = e5 ? "E4M3" : "E5M2";
    const char *g = MPT_TELEMETRY_ALL_FP8_GRAD;
    const double sat = mpt_run_stat_mean(r, g, "fp8_sat_frac"), fl = mpt_run_stat_mean(r, g, "fp8_flush_frac");
    const double sub = mpt_run_stat_mean(r, g, "fp8_subnormal_frac");
    const double sat_o = mpt_run_stat_mean(r, g, "fp8_sat_frac@other_format"), fl_o = mpt_run_stat_mean(r, g, "fp8_flush_frac@other_format");
    const double sub_o = mpt_run_stat_mean(r, g, "fp8_subnormal_frac@other_format");
    char c[6][32];
    mpt_text_pct(c[0], sizeof c[0], sat);
    mpt_text_pct(c[1], sizeof c[1], fl);
    mpt_text_pct(c[2], sizeof c[2], sub);
    mpt_text_pct(c[3], sizeof c[3], sat_o);
    mpt_text_pct(c[4], sizeof c[4], fl_o);
    mpt_text_pct(c[5], sizeof c[5], sub_o);
    fprintf(f, "\nThe gradient operands (dy of every FP8 layer, pooled, mean over telemetry steps), as cast in %s and "
               "as they would have been in %s with its own scale by the same rule (`all_fp8_grads`, "
               "`@other_format`):\n\n| format | saturated | flushed to zero | subnormal |\n|---|---:|---:|---:|\n"
               "| %s (used) | %s | %s | %s |\n| %s | %s | %s | %s |\n\n",
            fmt, other, fmt, c[0], c[1], c[2], other, c[3], c[4], c[5]);
    const double e4_lost = e5 ? fl_o + sub_o : fl + sub, e5_lost = e5 ? fl + sub : fl_o + sub_o;
    char text[700];
    mpt_text_fp8_grad_formats(text, sizeof text, e4_lost, e5_lost, mx);
    fprintf(f, "%s\n\n", text);
}

void mpt_report_write_numerics(FILE *f, const mpt_cli_opts *o, const mpt_report_row *rows, int n,
                            const mpt_report_plot_info *plots) {
    fprintf(f, "Measured every %lld steps (`--telemetry`%s); definitions in docs/numerics.md, every value per step in "
               "each run's `telemetry.csv`, last and mean values in its `summary.json`, the gradients' exponent "
               "histograms in its `exponents.csv`. The sentences below are filled in from those measurements.\n\n",
            (long long)o->telemetry, o->shadow ? ", with the FP32 shadow twin of `--shadow`" : "");
    int has_fp8 = 0;
    for (int i = 0; i < n; i++) has_fp8 |= mpt_run_stat(rows[i].r, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac") != NULL;
    if (plots->numerics)
        fprintf(f, "![numerics](%s)\n\nTop: the share of nonzero activation-gradient values that rounding into "
                   "FP16/BF16 flushed to zero, per telemetry step (fp16 dashed: the same values had the loss scale "
                   "been 1). Middle: the share of non-zero optimizer updates that left the stored weight unchanged "
                   "(dashed: had they been applied to the 16-bit working copy). %s%s\n\n",
                plots->numerics,
                has_fp8 ? "Below them, for the FP8 runs: the share of nonzero values of their gradient operands (dy of "
                          "every FP8 layer) that the FP8 cast flushed to zero (solid) and saturated (dashed). " : "",
                o->shadow ? "Bottom: each activation's relative error against the FP32 twin (log axis; fp32 "
                            "matches exactly and has no point)." : "");
    else if (plots->numerics_error)
        fprintf(f, "(No numerics plot: %s.)\n\n", plots->numerics_error);
    for (int i = 0; i < n; i++) {
        const mpt_run_result *r = rows[i].r;
        fprintf(f, "### %s\n\n", mpt_precision_name(rows[i].precision));
        if (r->n_telemetry == 0 || !mpt_run_stat(r, "amp", "loss_scale")) {
            fprintf(f, "No telemetry step ran: telemetry measures every %lld-th step%s, and this run had %lld steps.\n\n",
                    (long long)o->telemetry,
                    mpt_cli_given(o, MPT_OPT_TELEMETRY) ? " (--telemetry)" : " (compare's default; --telemetry N changes it)",
                    (long long)r->iterations);
            continue;
        }
        numerics_underflow(f, &rows[i]);
        numerics_lost(f, o, &rows[i]);
        numerics_twin(f, &rows[i]);
        numerics_fp8(f, &rows[i]);
    }
}

/* What the loss scale of precision p's run did, from the settings that run resolved (its --scaler preset and the
 * flags that override it): the plot's bottom panel, said from the run's rule rather than from one preset's. */
static void loss_scale_rule(char *b, size_t len, const mpt_cli_opts *o, mpt_precision p) {
    mpt_cli_opts op = *o;
    op.precision = p;
    mpt_cli_resolve(&op); /* as compare resolves each precision's run */
    if (op.loss_scaling == MPT_LOSS_SCALE_NONE) {
        snprintf(b, len, "no loss scaling (--loss-scale none), so it stays at 1");
        return;
    }
    if (op.loss_scaling == MPT_LOSS_SCALE_STATIC) {
        snprintf(b, len, "a static scale (--loss-scale static), so it stays at %g (2^%.4g)", op.loss_scale_value,
                 log2(op.loss_scale_value));
        return;
    }
    char lo[32], hi[32]; /* a bound that is a large power of two as 2^k (2^24, not 1.67772e+07) */
    const double bounds[2] = {op.scale_floor, op.scale_ceiling};
    char *bt[2] = {lo, hi};
    for (int k = 0; k < 2; k++) {
        const double v = bounds[k];
        if (v > 0 && isfinite(v) && v == ldexp(1.0, ilogb(v)) && abs(ilogb(v)) >= 10)
            snprintf(bt[k], sizeof lo, "2^%d", ilogb(v));
        else snprintf(bt[k], sizeof lo, "%g", v);
    }
    char overflow[96];
    if (op.hysteresis > 1)
        snprintf(overflow, sizeof overflow, "at every overflow from the %d%s since it last grew (hysteresis)",
                 op.hysteresis, op.hysteresis == 2 ? "nd" : op.hysteresis == 3 ? "rd" : "th");
    else snprintf(overflow, sizeof overflow, "at every overflow");
    snprintf(b, len, "it starts at 2^%.4g (--scaler %s%s), is multiplied by %g %s (every overflow is a skipped step) "
             "and by %g after %d clean steps, within [%s, %s]; a scale that keeps falling means gradients overflow "
             "FP16's range", log2(op.loss_scale_value), mpt_cli_format(&op, MPT_OPT_SCALER, (char[32]){0}, 32),
             mpt_cli_given(&op, MPT_OPT_LOSS_SCALE) ? ", --loss-scale" : "", op.backoff_factor, overflow,
             op.growth_factor, op.growth_interval, lo, hi);
}

mpt_status mpt_report_write(const char *dir, const mpt_cli_opts *o, const mpt_report_row *rows, int n,
                                const mpt_report_ref *ref, const mpt_report_plot_info *plots) {
    const char *plot_file = plots->convergence, *plot_error = plots->convergence_error;
    char path[MPT_CLI_PATH + 64], tmp[MPT_CLI_PATH + 80];
    snprintf(path, sizeof path, "%s/report.md", dir);
    FILE *f = mpt_outdir_open_atomic(path, tmp, sizeof tmp);
    if (!f) return MPT_ERR_IO;
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
    mpt_report_write_table(f, rows, n);
    fprintf(f, "\nColumns: test accuracy after the last epoch and the best over epochs; the last epoch's mean "
               "training loss (over the logged steps) and test loss; training time per epoch (evaluation "
               "excluded) on the host clock and, beside it, the process's CPU time per epoch over all its threads "
               "(on a GPU, the epoch's time by CUDA events), and training throughput; the model's own memory in two "
               "parts: the weights the forward pass reads with the activations and their gradients (what FP16/BF16 "
               "halve), and the update state (masters, weight gradients, optimizer state: what mixed precision keeps in "
               "FP32, the masters added), and the peak of all the process's memory on the device (the dataset, "
               "kernel workspace and telemetry included); optimizer steps skipped because a gradient was inf/NaN; the loss scale at the "
               "end (1 = no scaling); and the relative L2 distance ||w - w_fp32|| / ||w_fp32|| between this run's "
               "final %s and the fp32 run's, over all parameters. It measures how far rounding "
               "moved training's trajectory, not how good the result is: compare it with the accuracy columns.\n\n",
            o->master_weights == MPT_MASTER_NONE ? "weights (with --master-weights none the 16-bit runs have no FP32 "
                                                   "masters: their own 16-bit weights, widened exactly)"
                                                 : "FP32 master weights");
    if (ref && isfinite(ref->fp32_travel))
        fprintf(f, "For scale: training moved the fp32 run's weights by ||w_end - w_init|| / ||w_end|| = %.3e from "
                   "their initialisation. A distance between precisions of the same order means the runs took "
                   "different paths (rounding differences are amplified step after step, as any perturbation of "
                   "SGD is) and arrived at different, equally good weights; a much smaller one means they stayed "
                   "together.\n\n",
                ref->fp32_travel);
    if (ref && ref->machine) {
        mpt_report_write_machine(f, ref->machine);
        fprintf(f, "\n");
    }
    mpt_report_write_kernels(f, rows, n);
    mpt_report_write_instruments(f, rows, n);
    fprintf(f, "\n");
    fprintf(f, "Peak memory by category (MiB):\n\n");
    write_memory_table(f, rows, n);
    const char *state = mpt_format_info(mpt_dtype_info(o->optimizer_state)->format)->name;
    fprintf(f, "\n`master` is the FP32 copy of the weights that only fp16/bf16 runs need (in fp32/tf32 the weights "
               "are their own masters%s); `weight` the weights the forward pass reads; `act` and `act_grad` the "
               "activations kept for backward and their gradients, which halve in fp16/bf16; `optim` the optimizer "
               "state (%s%s in every mode%s); `workspace` kernel scratch (on the CPU backend it includes the copies of "
               "GEMM operands rounded to TF32/FP16/BF16 that emulate the Tensor Core input formats, which a GPU does "
               "not need); `data` the dataset, copied to the device once.\n\n",
            o->master_weights == MPT_MASTER_NONE ? "; here --master-weights none gave the 16-bit runs none either" : "",
            o->optimizer_state == MPT_DTYPE_F32 ? "" : "stored in ", state,
            o->optimizer_state == MPT_DTYPE_F32 ? "" : " by --optimizer-state, widened to FP32 for each update");

    fprintf(f, "## What each precision does\n\n");
    int tf32_off = mpt_policy_make(MPT_PRECISION_TF32).tf32_override;
    for (int i = 0; i < n; i++) fprintf(f, "- %s\n", precision_explained(rows[i].precision, tf32_off));
    if (o->master_weights == MPT_MASTER_FP32 && o->optimizer_state == MPT_DTYPE_F32)
        fprintf(f, "\nIn every mode softmax and cross-entropy run in FP32, weight gradients are produced and "
                   "accumulated in FP32, and the optimizer updates FP32 master weights: low precision is used where it "
                   "is cheap and safe (the multiplies), FP32 where errors would accumulate (sums over steps).\n\n");
    else
        fprintf(f, "\nIn every mode softmax and cross-entropy run in FP32 and weight gradients are produced and "
                   "accumulated in FP32. By default the optimizer also keeps its state in FP32 and updates FP32 master "
                   "weights (FP32 where errors would accumulate: sums over steps); this comparison ran without that: "
                   "%s%s%s. What it cost is measured under Numerics (lost updates) when --telemetry is "
                   "on, and in the accuracy columns.\n\n",
                o->master_weights == MPT_MASTER_NONE ? "--master-weights none (the fp16/bf16 runs' updates go straight "
                                                       "into their 16-bit weights)" : "",
                o->master_weights == MPT_MASTER_NONE && o->optimizer_state != MPT_DTYPE_F32 ? " and " : "",
                o->optimizer_state != MPT_DTYPE_F32 ? "--optimizer-state (the moments stored in a 16-bit format)" : "");

    fprintf(f, "## The plot\n\n");
    if (plot_file)
        fprintf(f, "![convergence](%s)\n\n", plot_file);
    else
        fprintf(f, "(No plot: %s. The data is in `<precision>/metrics.csv` and `<precision>/epochs.csv`.)\n\n",
                plot_error ? plot_error : "not drawn");
    int scaled = -1; /* the precision whose loss-scale panel the plot draws (tools/plot.c: dynamic by default) */
    for (int i = 0; i < n; i++)
        if (mpt_mode_info(rows[i].precision)->dynamic_loss_scale) scaled = i;
    fprintf(f, "Top: training loss per step (as logged every %lld steps), one line per precision; lines that lie "
               "on top of each other mean the precision changed nothing visible. Middle: test accuracy after each "
               "epoch.", (long long)o->log_every);
    if (scaled >= 0) {
        char rule[400];
        loss_scale_rule(rule, sizeof rule, o, rows[scaled].precision);
        fprintf(f, " Bottom: the %s loss scale on a log axis: %s.", mpt_precision_name(rows[scaled].precision), rule);
    }
    fprintf(f, "\n\n");
    fprintf(f, "Per-run files: `<precision>/metrics.csv` (per logged step: step, epoch, loss, lr, loss_scale, "
               "steps_skipped), `<precision>/epochs.csv` (per epoch: losses, accuracies, times), "
               "`<precision>/summary.json`, `<precision>/checkpoint.safetensors`.\n");
    if (o->telemetry > 0) {
        fprintf(f, "\n## Numerics\n\n");
        mpt_report_write_numerics(f, o, rows, n, plots);
    }
    return mpt_outdir_commit_atomic(f, tmp, path); /* checks ferror: a failed fprintf is not always seen by fclose */
}
