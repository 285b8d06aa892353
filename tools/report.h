/*
 * tools/report.h - what `compare` leaves for people and scripts: the table, report.md and compare.json
 * (report.c), their multi-seed forms (compare_seeds.c) and the pictures (plot.c, gnuplot).
 */
#ifndef MPT_TOOLS_REPORT_H
#define MPT_TOOLS_REPORT_H

#include "tools/run.h"

/* ---- reports (report.c) ----------------------------------------------------------------------------------- */

/* The machine the runs shared: its cores and the 1-minute load average when they started and ended (NAN when
 * unknown). Host-clock times on a loaded machine are not the runs' own. */
typedef struct mpt_report_machine {
    int cores;
    double load_start, load_end;
} mpt_report_machine;

/* One row of the compare table. */
typedef struct mpt_report_row {
    mpt_precision precision;
    const mpt_run_result *r;
    double rel_l2;           /* ||w - w_fp32|| / ||w_fp32|| of the final masters; NAN without an fp32 run */
    const char *dir;         /* the run's directory relative to the report's (NULL: the precision's name, as
                                compare lays them out; "." for train's single run; "seed-0/fp16" ...) */
} mpt_report_row;

/* What the report says about the scale of rel_l2: ||w_end - w_init|| / ||w_end|| of the fp32 run (how far
 * training moved the weights), NAN without an fp32 run. */
typedef struct mpt_report_ref {
    double fp32_travel;
    const mpt_report_machine *machine; /* the load while the runs trained, or NULL */
} mpt_report_ref;

/* Writes the comparison table as Markdown (the same text `compare` prints): per run the accuracies and losses,
 * the host-clock time per epoch beside the CPU time per epoch (or, on the GPU, the CUDA-event time), throughput,
 * the model's own memory in its two parts (mpt_report_model_bytes) beside the peak of all categories, skipped steps,
 * the final loss scale and the distance to the fp32 run. */
void mpt_report_write_table(FILE *f, const mpt_report_row *rows, int n);

/* The model's own memory (bytes, sums of category peaks; the data, kernel workspace and telemetry not counted):
 * fp32_state 0: the weights the forward pass reads, activations and activation gradients, which FP16/BF16
 * halve; 1: the update state, FP32 masters, weight gradients and optimizer state, which mixed precision keeps in
 * FP32 (the masters added; --optimizer-state may store the last in 16 bits). */
size_t mpt_report_model_bytes(const mpt_run_result *r, int fp32_state);

void mpt_report_machine_start(mpt_report_machine *m);
void mpt_report_machine_end(mpt_report_machine *m);

/* One line "Machine load: ..." saying whether the machine was busier than its cores (nothing when unknown). */
void mpt_report_write_machine(FILE *f, const mpt_report_machine *m);

/* One line per run whose CPU kernel set was chosen by --cpu-kernels auto: what it measured and kept. Nothing when
 * no run was. */
void mpt_report_write_kernels(FILE *f, const mpt_report_row *rows, int n);

/* One line on the instruments' cost: the telemetry's own time per epoch (host clock and CPU, the range over the
 * runs), which the table's time columns exclude. Nothing when no run had telemetry. */
void mpt_report_write_instruments(FILE *f, const mpt_report_row *rows, int n);

/* The pictures report.md refers to: a file name, or NULL with a message saying why there is none. */
typedef struct mpt_report_plot_info {
    const char *convergence, *convergence_error;
    const char *numerics, *numerics_error; /* both NULL when telemetry was off */
} mpt_report_plot_info;

/* Writes report.md into dir: settings, the table, what each precision does, how to read the plots, and with
 * telemetry a "Numerics" section (per precision: the tensors that underflow most, lost updates per layer, the
 * error against the FP32 twin per layer, each with a sentence filled from the measurements). */
mpt_status mpt_report_write(const char *dir, const mpt_cli_opts *o, const mpt_report_row *rows, int n,
                                const mpt_report_ref *ref, const mpt_report_plot_info *plots);

/* ---- several seeds (compare_seeds.c) ---------------------------------------------------------------------- */

/* The runs of `compare --seeds`: res[s * n_precisions + p] is seed seeds[s] in precision precisions[p], trained
 * into out/seed-<seed>/<precision>/; rel_l2 is indexed the same way (NAN without an fp32 run). */
typedef struct mpt_report_seed_runs {
    const char *out;
    int n_seeds, n_precisions;
    const uint64_t *seeds;
    const mpt_precision *precisions;
    const mpt_run_result *res;
    const double *rel_l2;
    const mpt_report_machine *machine; /* the load while the runs trained, or NULL */
} mpt_report_seed_runs;

/* A Markdown table of runs over seeds (rows) and precisions (columns): res holds n_seeds x n_precisions results,
 * seed-major (res[s * n_precisions + p]); cell writes one cell's text (without the bars). Used by compare --seeds
 * and speedrun. */
void mpt_report_seed_table(FILE *f, const uint64_t *seeds, int n_seeds, const mpt_precision *precisions,
                           int n_precisions, const mpt_run_result *res, void (*cell)(FILE *f, const mpt_run_result *x));

/* The run directory of seed index s, precision index p: out/seed-<seed>/<precision> (buf: MPT_CLI_PATH). */
mpt_status mpt_report_seed_run_dir(char *buf, size_t len, const char *out, uint64_t seed, mpt_precision p);

/* Writes report.md and compare.json into runs->out and prints the summary table with its verdicts: per
 * precision the mean and sd over seeds of the final and best test accuracy and the final test loss; against
 * fp32 the mean paired difference with its 95% confidence interval and the verdict against o->margin
 * (tools/stats.h); the noise of a one-seed comparison (the paired differences' sd) beside fp32's spread over
 * seeds; the machine's load; with telemetry a "Numerics" section: the pooled measurements per precision (mean and
 * sd over seeds) and the per-run detail of the first seed. plots: convergence.png and numerics.png (the first
 * seed's runs), each a file name or NULL with the reason. MPT_ERR_IO when a file cannot be written; MPT_ERR_ARG
 * without GSL. */
mpt_status mpt_report_write_seeds(const mpt_cli_opts *o, const mpt_report_seed_runs *runs,
                                      const mpt_report_plot_info *plots);

/* Writes compare.json for a one-seed comparison (the same keys as the multi-seed one, one seed, no
 * intervals). */
mpt_status mpt_report_write_compare_json(const mpt_cli_opts *o, const mpt_report_row *rows, int n);

/* convergence.png of a multi-seed comparison: per precision the mean training-loss and test-accuracy curves
 * over seeds with a min-max band, from out/curves/<precision>_{steps,epochs}.csv (written here from each
 * run's metrics.csv and epochs.csv), and every seed's fp16 loss scale. Errors as for mpt_report_plot. */
mpt_status mpt_report_plot_seeds(const mpt_report_seed_runs *runs);

/* ---- the plot (plot.c) -------------------------------------------------------------------------------------- */

/* Writes dir/convergence.gp and runs gnuplot on it to make dir/convergence.png from each run's
 * dir/<precision>/metrics.csv and epochs.csv. MPT_ERR_IO with a message when gnuplot is missing or fails
 * (the caller reports it and goes on). */
mpt_status mpt_report_plot(const char *dir, const mpt_precision *precisions, int n);

/* Writes dir/numerics.gp (and numerics_twin.dat, the twin's mean error per activation and precision) and runs
 * gnuplot to make dir/numerics.png from each run's telemetry.csv (in the row's dir): activation gradients
 * flushed to zero per step (fp16/bf16; fp16 also at S = 1), updates lost per step (and if applied to the 16-bit
 * copy), and the twin error per activation when the runs had --shadow. every: the telemetry interval, for the
 * message when no run reached a telemetry step (MPT_ERR_ARG). Errors as mpt_report_plot's. */
mpt_status mpt_report_plot_numerics(const char *dir, const mpt_report_row *rows, int n, int64_t every);

/* Writes the "Numerics" section of a report (the tensors that underflow most, lost updates per layer, the error
 * against the FP32 twin per layer, each with a sentence filled from the measurements) for the runs in rows;
 * plots: the numerics picture (or why there is none). compare's report.md uses it, and compare --seeds' for the
 * runs of its first seed. */
void mpt_report_write_numerics(FILE *f, const mpt_cli_opts *o, const mpt_report_row *rows, int n,
                            const mpt_report_plot_info *plots);

/* The data rows of the CSV at path (its lines after the header); 0 when it cannot be read. */
int mpt_report_csv_rows(const char *path);

/* A convergence picture's panels have data only where a run logged a step (metrics.csv) or completed an epoch
 * (epochs.csv); gnuplot fails on a panel whose every series is empty ("x range is invalid"). has_steps, has_epochs:
 * whether any run has such rows. Writes, for a panel without data, a frame that says why (the panel keeps its place)
 * and returns 0; returns 1 when the panel is to be plotted. */
int mpt_report_panel_has_data(FILE *f, int has_data, const char *why);

/* The error when no panel has anything to draw (MPT_ERR_ARG): the picture is not made, and the message says why. */
mpt_status mpt_report_nothing_to_plot(const char *dir);

/* Writes the PNG terminal lines of a gnuplot script (pngcairo when available, else png) for a width x height
 * picture named png, unless gnuplot is run with mpt_output set (mpt_report_gnuplot: the file to draw into). */
void mpt_report_gnuplot_terminal(FILE *f, int width, int height, const char *png);

/* Runs gnuplot on dir/script (X.gp) with dir as its working directory, drawing into a new file that becomes X.png
 * when gnuplot succeeds (the script takes its output from mpt_output, mpt_report_gnuplot_terminal); its messages go to
 * dir/<script>.log (kept only on failure). At most --plot-timeout seconds (mpt_report_set_plot_timeout; default 60):
 * then gnuplot and its process group are killed. MPT_ERR_IO saying so when gnuplot is missing (naming
 * gnuplot-nox), fails or runs out of time; then no X.png is left, so that no half-drawn or stale PNG passes for
 * the plot; the script and its data stay. */
mpt_status mpt_report_gnuplot(const char *dir, const char *script);

/* The time limit of every gnuplot run, in seconds (--plot-timeout of compare and lab). */
void mpt_report_set_plot_timeout(double seconds);

#endif
