/*
 * tools/plot.c - convergence.png and numerics.png for `mptrain compare`, drawn by gnuplot from the runs' CSV files.
 *
 * The script is kept next to the picture (convergence.gp) so a reader can change it and run `gnuplot
 * convergence.gp` in the same directory. Panels: training loss per logged step, test accuracy per epoch,
 * and the fp16 loss scale (log axis) when an fp16 run is part of the comparison. The terminal is pngcairo
 * when this gnuplot has it (antialiased), else the libgd png terminal. gnuplot runs with the output
 * directory as its working directory and draws into a new file mptrain created there (its descriptor, passed as
 * mpt_output = '/dev/fd/3'; tools/outdir.h), renamed to the picture's name when gnuplot succeeded; its messages
 * go to convergence.gp.log, kept only when it failed. It runs under a time limit (--plot-timeout, default 60 s):
 * a gnuplot that does not return is killed, with anything it started, and the picture is said to be missing and
 * why. Each precision keeps one colour (gnuplot line type 1 + its mpt_precision value) in every panel.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/checkpoint.h"

#include "tools/report.h"

int mpt_report_csv_rows(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int lines = 0, c, last = '\n';
    while ((c = getc(f)) != EOF) {
        lines += c == '\n';
        last = c;
    }
    fclose(f);
    lines += last != '\n'; /* a last line without its newline */
    return lines > 1 ? lines - 1 : 0;
}

int mpt_report_panel_has_data(FILE *f, int has_data, const char *why) {
    if (has_data) return 1;
    fprintf(f, "set label 2 \"%s\" at graph 0.5, graph 0.5 center\nplot [0:1] [0:1] -1 notitle\nunset label\n", why);
    return 0;
}

mpt_status mpt_report_nothing_to_plot(const char *dir) {
    return mpt_errorf(MPT_ERR_ARG, "nothing to draw in %s: no run logged a training loss (no step reached --log-every) "
                      "or completed an epoch (--max-steps stopped them inside the first)", dir);
}

/* Whether any run's <dir>/<precision>/<file> has a data row. */
static int any_rows(const char *dir, const mpt_precision *p, int n, const char *file) {
    char path[MPT_CLI_PATH + 64];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s/%s", dir, mpt_precision_name(p[i]), file);
        if (mpt_report_csv_rows(path) > 0) return 1;
    }
    return 0;
}

static mpt_status write_script(const char *path, const char *dir, const mpt_precision *p, int n) {
    const int has_steps = any_rows(dir, p, n, "metrics.csv"), has_epochs = any_rows(dir, p, n, "epochs.csv");
    if (!has_steps && !has_epochs) return mpt_report_nothing_to_plot(dir);
    FILE *f = mpt_outdir_create_file(path);
    if (!f) return MPT_ERR_IO;
    int scaled = -1; /* the run whose mode scales the loss dynamically by default (fp16): its loss-scale panel */
    for (int i = 0; i < n; i++)
        if (mpt_mode_info(p[i])->dynamic_loss_scale) scaled = i;
    int panels = scaled >= 0 ? 3 : 2;
    fprintf(f, "# convergence.gp - written by mptrain compare; run `gnuplot convergence.gp` in this directory.\n");
    mpt_report_gnuplot_terminal(f, 1000, panels * 380, "convergence.png");
    fprintf(f, "set datafile separator ','\n"
               "set datafile missing 'nan'\n"
               "set grid\n"
               "set key top right\n"
               "set multiplot layout %d,1\n",
            panels);
    fprintf(f, "set title 'training loss per step'\nset xlabel 'step'\nset ylabel 'cross-entropy'\n");
    if (mpt_report_panel_has_data(f, has_steps, "nothing to draw: no run logged a step (--log-every)")) {
        fprintf(f, "plot ");
        for (int i = 0; i < n; i++) {
            const char *name = mpt_precision_name(p[i]);
            fprintf(f, "%s'%s/metrics.csv' using 'step':'loss' with lines lw 1.5 lt %d title '%s'",
                    i ? ", \\\n     " : "", name, (int)p[i] + 1, name);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "set title 'test accuracy per epoch'\nset xlabel 'epoch'\nset ylabel 'accuracy (%%)'\n"
               "set xtics 1\nset key bottom right\n");
    if (mpt_report_panel_has_data(f, has_epochs, "nothing to draw: no run completed an epoch (--max-steps)")) {
        fprintf(f, "plot ");
        for (int i = 0; i < n; i++) {
            const char *name = mpt_precision_name(p[i]);
            fprintf(f, "%s'%s/epochs.csv' using 'epoch':(100*column('test_acc')) with linespoints lw 1.5 lt %d pt 7 "
                       "title '%s'",
                    i ? ", \\\n     " : "", name, (int)p[i] + 1, name);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "set xtics autofreq\n");
    const char *sname = scaled >= 0 ? mpt_precision_name(p[scaled]) : "";
    if (scaled >= 0)
        fprintf(f, "set title '%s loss scale (its rule: report.md, The plot)'\n"
                   "set xlabel 'step'\n", sname);
    if (scaled >= 0 && mpt_report_panel_has_data(f, has_steps, "nothing to draw: no run logged a step")) {
        const char *name = sname;
        fprintf(f, "set ylabel 'loss scale'\nset logscale y 2\nset format y '2^{%%L}'\n"
                   "set ytics 2\nset offsets 0, 0, graph 0.1, graph 0.1\n" /* a flat scale off the frame */
                   "set key bottom left\n"
                   "plot '%s/metrics.csv' using 'step':'loss_scale' with steps lw 1.5 lt %d title '%s'\n"
                   "unset logscale y\n",
                name, (int)p[scaled] + 1, name);
    }
    fprintf(f, "unset multiplot\n");
    MPT_TRY(mpt_outdir_close_written(f, path));
    return MPT_OK;
}

void mpt_report_gnuplot_terminal(FILE *f, int width, int height, const char *png) {
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
               "  set terminal pngcairo size %d,%d font \",10\"\n"
               "} else {\n"
               "  set terminal png size %d,%d\n"
               "}\n"
               "# mptrain passes the file to draw into as mpt_output (gnuplot -e): a new file it created\n"
               "if (!exists(\"mpt_output\")) mpt_output = '%s'\n"
               "set output mpt_output\n",
            width, height, width, height, png);
}

static double plot_timeout_s = 60.0;

void mpt_report_set_plot_timeout(double seconds) { plot_timeout_s = seconds; }

/* Removes dir/<stem>.png, the picture of dir/<stem>.gp, so that no stale PNG of an earlier job passes for the
 * plot that failed. Best effort: absent is fine. */
static void remove_picture(int dir_fd, const char *script) {
    size_t stem = strlen(script);
    if (stem < 3 || strcmp(script + stem - 3, ".gp") != 0) return;
    char name[300];
    snprintf(name, sizeof name, "%.*s.png", (int)(stem - 3), script);
    struct stat st;
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) unlinkat(dir_fd, name, 0);
}

/* Waits for gnuplot (its own process group) at most plot_timeout_s; kills the group when the time is up.
 * Returns 1 with *status when it ended, 0 when it was killed. */
static int wait_bounded(pid_t pid, int *status) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid) return 1;
        if (w < 0 && errno != EINTR) {
            *status = 0;
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (el >= plot_timeout_s) break;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
    }
    return 0;
}

mpt_status mpt_report_gnuplot(const char *dir, const char *script) {
    size_t sl = strlen(script);
    if (sl < 4 || strcmp(script + sl - 3, ".gp") != 0 || strchr(script, '/') || strchr(script, '\''))
        return mpt_errorf(MPT_ERR_ARG, "%s/%s: expected a gnuplot script named <stem>.gp", dir, script);
    char png[300], log[300], tmp_png[320], tmp_log[320];
    snprintf(png, sizeof png, "%.*s.png", (int)(sl - 3), script);
    snprintf(log, sizeof log, "%s.log", script);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return mpt_errorf(MPT_ERR_IO, "%s: cannot open it to plot (%s)", dir, strerror(errno));
    /* The picture and the log are new files created here (never through a link, tools/outdir.h), published by
     * rename: gnuplot draws into the picture's descriptor (as /dev/fd/3), never into a path it opens itself. */
    int fd_png = mpt_checkpoint_create_temp(dfd, png, tmp_png, sizeof tmp_png);
    int fd_log = fd_png >= 0 ? mpt_checkpoint_create_temp(dfd, log, tmp_log, sizeof tmp_log) : -1;
    if (fd_png < 0 || fd_log < 0) {
        mpt_status s = mpt_errorf(MPT_ERR_IO, "%s/%s: cannot create a temporary file beside it (%s)", dir, png,
                                  strerror(errno));
        if (fd_png >= 0) close(fd_png), unlinkat(dfd, tmp_png, 0);
        close(dfd);
        return s;
    }
    fflush(NULL);
    /* posix_spawn, not fork: glibc's posix_spawn runs no atfork handlers, and OpenBLAS's (blas_thread_shutdown_)
     * joins its worker threads, one of which loops for good in blas_memory_alloc under a memory limit (compare under
     * ulimit -v 192 MiB with 2 OpenBLAS threads hung in fork). gnuplot gets a process group of its own (the time
     * limit kills it and anything it started; a Ctrl-C at the terminal, sent to mptrain's foreground group, stops
     * the run, not the picture), its log as stdout and stderr, the picture as descriptor 3, and dir as its
     * working directory. */
    extern char **environ;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    pid_t pid = -1;
    int err = posix_spawn_file_actions_init(&fa);
    if (!err) {
        err = posix_spawnattr_init(&attr);
        if (!err) {
            err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
            if (!err) err = posix_spawnattr_setpgroup(&attr, 0);
            /* the working directory first: the actions run in order, and dfd may itself be descriptor 3 (it is
             * in `train`, whose output directory holds 3), which the picture's dup2 then replaces */
            if (!err) err = posix_spawn_file_actions_addfchdir_np(&fa, dfd);
            if (!err) err = posix_spawn_file_actions_adddup2(&fa, fd_log, STDOUT_FILENO);
            if (!err) err = posix_spawn_file_actions_adddup2(&fa, fd_log, STDERR_FILENO);
            if (!err) err = posix_spawn_file_actions_adddup2(&fa, fd_png, 3);
            char *argv[] = {"gnuplot", "-e", "mpt_output = '/dev/fd/3'", (char *)script, NULL};
            if (!err) err = posix_spawnp(&pid, "gnuplot", &fa, &attr, argv, environ);
            posix_spawnattr_destroy(&attr);
        }
        posix_spawn_file_actions_destroy(&fa);
    }
    if (err) {
        mpt_status s = err == ENOENT
                           ? mpt_errorf(MPT_ERR_IO, "gnuplot not found on PATH (Debian: apt-get install gnuplot-nox); "
                                        "the plot script is %s/%s", dir, script)
                           : mpt_errorf(MPT_ERR_IO, "cannot start gnuplot (%s)", strerror(err));
        close(fd_png), close(fd_log);
        unlinkat(dfd, tmp_png, 0), unlinkat(dfd, tmp_log, 0);
        remove_picture(dfd, script);
        close(dfd);
        return s;
    }
    close(fd_png);
    close(fd_log);
    int status = 0;
    int ended = wait_bounded(pid, &status);
    mpt_status s = MPT_OK;
    if (!ended) {
        s = mpt_errorf(MPT_ERR_IO, "gnuplot did not finish within --plot-timeout %g s and was stopped: no %s; the data "
                       "and the script are kept (run `gnuplot %s` in %s)", plot_timeout_s, png, script, dir);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        s = mpt_errorf(MPT_ERR_IO, "gnuplot not found on PATH (Debian: apt-get install gnuplot-nox); the plot script "
                       "is %s/%s", dir, script);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        s = mpt_errorf(MPT_ERR_IO, "gnuplot failed on %s/%s (see %s/%s)", dir, script, dir, log);
    }
    if (s == MPT_OK) {
        unlinkat(dfd, tmp_log, 0);
        struct stat st;
        if (fstatat(dfd, log, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) unlinkat(dfd, log, 0);
        if (renameat(dfd, tmp_png, dfd, png) != 0) {
            s = mpt_errorf(MPT_ERR_IO, "%s/%s: cannot write (rename: %s)", dir, png, strerror(errno));
            unlinkat(dfd, tmp_png, 0);
        }
    } else {
        unlinkat(dfd, tmp_png, 0);
        remove_picture(dfd, script);
        int keep_log = ended && !(WIFEXITED(status) && WEXITSTATUS(status) == 127);
        if (!keep_log || renameat(dfd, tmp_log, dfd, log) != 0) unlinkat(dfd, tmp_log, 0);
    }
    close(dfd);
    return s;
}

mpt_status mpt_report_plot(const char *dir, const mpt_precision *precisions, int n) {
    char script[MPT_CLI_PATH + 64];
    snprintf(script, sizeof script, "%s/convergence.gp", dir);
    MPT_TRY(write_script(script, dir, precisions, n));
    return mpt_report_gnuplot(dir, "convergence.gp");
}

/* ---- numerics.png --------------------------------------------------------------------------------------------
 * A series is drawn only when its run produced at least one finite value for it (mpt_telemetry_stat.count, the
 * same rows as telemetry.csv): gnuplot refuses a plot whose every series is empty ("Skipping data file with no
 * valid points", then "x range is invalid") and the whole picture is lost. A series without points is named in
 * a note beside its panel with the reason; a panel without any keeps its place (the report's caption says
 * top/middle/bottom) and says so; with no telemetry step in any run there is no picture, and the error says why. */

/* Whether a run's telemetry has at least one finite value of (tensor, metric). */
static int has_points(const mpt_run_result *r, const char *tensor, const char *metric) {
    const mpt_telemetry_stat *x = mpt_run_stat(r, tensor, metric);
    return x && x->count > 0;
}

/* Why a run has no point for a metric, in a few words. */
static const char *why_no_points(const mpt_run_result *r, const char *metric) {
    const mpt_telemetry_stat *steps = mpt_run_stat(r, "amp", "loss_scale"); /* one row per telemetry step */
    if (!steps || steps->count == 0) return "no telemetry step ran";
    const mpt_telemetry_stat *skipped = mpt_run_stat(r, "amp", "step_skipped");
    if (strncmp(metric, "lost_", 5) == 0 && skipped && skipped->count == steps->count)
        return "every telemetry step was skipped\\n  (inf/NaN gradients): no update";
    return "no finite value";
}

/* One panel being written: the plot clauses of the series that have points, and the note naming those that
 * have none. */
typedef struct panel {
    char plot[8192];
    size_t plot_len;
    char note[1024];
    size_t note_len;
} panel;

static void vappend(char *buf, size_t cap, size_t *len, const char *fmt, va_list ap) {
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    MPT_ASSERTF(k >= 0 && (size_t)k < cap - *len, "numerics.gp: a panel's text is longer than %zu bytes", cap);
    *len += (size_t)k;
}

static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vappend(buf, cap, len, fmt, ap);
    va_end(ap);
}

/* Adds one plot clause to the panel. */
static void panel_clause(panel *pn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void panel_clause(panel *pn, const char *fmt, ...) {
    if (pn->plot_len) append(pn->plot, sizeof pn->plot, &pn->plot_len, ", \\\n     ");
    va_list ap;
    va_start(ap, fmt);
    vappend(pn->plot, sizeof pn->plot, &pn->plot_len, fmt, ap);
    va_end(ap);
}

/* Names a series the panel does not draw, with the reason (one line of the note). */
static void panel_missing(panel *pn, const char *title, const char *why) {
    append(pn->note, sizeof pn->note, &pn->note_len, "%s%s:\\n  %s", pn->note_len ? "\\n" : "not drawn (no point):\\n",
           title, why);
}

/* A series of one (tensor, metric) over steps from <run dir>/telemetry.csv, scaled by 100 (percent), or a line
 * of the note when the run has no value of it. */
static void series(panel *pn, const mpt_run_result *r, const char *prec, int lt, const char *tensor,
                   const char *metric, int dash, const char *title) {
    if (!has_points(r, tensor, metric)) {
        panel_missing(pn, title, why_no_points(r, metric));
        return;
    }
    panel_clause(pn, "'%s/telemetry.csv' using 1:((strcol(2) eq '%s' && strcol(3) eq '%s') ? 100*$4 : NaN) "
                     "with linespoints lw 1.5 lt %d dt %d pt 7 ps 0.5 title '%s'",
                 prec, tensor, metric, lt, dash, title);
}

/* Writes the panel's plot command (after its title and axis settings): the series, the note below the key, or,
 * when no series has a point, an empty frame that says so. */
static void panel_write(FILE *f, const panel *pn) {
    if (pn->note_len)
        fprintf(f, "set label 1 \"%s\" at graph 1.03, graph 0.35 left font \",9\"\n", pn->note);
    if (pn->plot_len) {
        fprintf(f, "plot %s\n", pn->plot);
    } else {
        fprintf(f, "set label 2 \"nothing to draw in this panel\" at graph 0.5, graph 0.5 center\n"
                   "plot [0:1] [0:1] -1 notitle\n");
    }
    fprintf(f, "unset label\n");
}

/* numerics_twin.dat: one line per activation (".out" tensors, forward order of the first run that has them),
 * the mean relative L2 error against the FP32 twin per precision ("nan" where a run has none). Returns the
 * number of lines written (0: no run had a twin); points[i] receives the number of values > 0 of run i (the
 * points its series has on the log axis). */
static int write_twin_data(const char *path, const mpt_report_row *rows, int n, int *points, mpt_status *s) {
    *s = MPT_OK;
    for (int i = 0; i < n; i++) points[i] = 0;
    FILE *f = mpt_outdir_create_file(path);
    if (!f) {
        *s = MPT_ERR_IO;
        return 0;
    }
    fprintf(f, "tensor");
    for (int i = 0; i < n; i++) fprintf(f, " %s", mpt_precision_name(rows[i].precision));
    fprintf(f, "\n");
    int lines = 0;
    const mpt_run_result *first = NULL;
    for (int i = 0; i < n && !first; i++)
        if (mpt_run_stat(rows[i].r, "input", "twin_rel_l2")) first = rows[i].r;
    for (int k = 0; first && k < first->n_telemetry; k++) {
        const mpt_telemetry_stat *st = &first->telemetry[k];
        size_t len = strlen(st->tensor);
        if (strcmp(st->metric, "twin_rel_l2") != 0 || len < 4 || strcmp(st->tensor + len - 4, ".out") != 0) continue;
        fprintf(f, "%s", st->tensor);
        for (int i = 0; i < n; i++) {
            const mpt_telemetry_stat *x = mpt_run_stat(rows[i].r, st->tensor, "twin_rel_l2");
            double mean = x && x->count > 0 ? x->sum / (double)x->count : 0.0;
            if (mean > 0.0) {
                fprintf(f, " %.6g", mean);
                points[i]++;
            } else {
                fprintf(f, " nan"); /* none, or exactly 0 (fp32 against its twin): no point on a log axis */
            }
        }
        fprintf(f, "\n");
        lines++;
    }
    mpt_status closed = mpt_outdir_close_written(f, path);
    if (closed != MPT_OK) *s = closed;
    return lines;
}

/* Why run r has no point in the twin panel. */
static const char *why_no_twin_points(const mpt_run_result *r) {
    if (has_points(r, "input", "twin_rel_l2")) return "equal to the FP32 twin (error 0)";
    return why_no_points(r, "twin_rel_l2");
}

/* Writes numerics.gp (with numerics_twin.dat): the panels' settings and their series. */
static mpt_status write_numerics_script(const char *dir, const mpt_report_row *rows, int n) {
    char path[MPT_CLI_PATH + 64];
    snprintf(path, sizeof path, "%s/numerics_twin.dat", dir);
    mpt_status s;
    int twin_points[MPT_PRECISION_COUNT];
    MPT_ASSERTF(n <= MPT_PRECISION_COUNT, "numerics plot: %d runs, at most %d", n, MPT_PRECISION_COUNT);
    int twin_lines = write_twin_data(path, rows, n, twin_points, &s);
    MPT_TRY(s);
    int has16 = 0;
    for (int i = 0; i < n; i++)
        has16 |= mpt_mode_info(rows[i].precision)->act_dtype != MPT_DTYPE_F32;
    int has_fp8 = 0;
    for (int i = 0; i < n; i++) has_fp8 |= mpt_run_stat(rows[i].r, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac") != NULL;
    int panels = 1 + (has16 ? 1 : 0) + (twin_lines > 0 ? 1 : 0) + (has_fp8 ? 1 : 0);
    snprintf(path, sizeof path, "%s/numerics.gp", dir);
    FILE *f = mpt_outdir_create_file(path);
    if (!f) return MPT_ERR_IO;
    fprintf(f, "# numerics.gp - written by mptrain; run `gnuplot numerics.gp` in this directory.\n"
               "# Data: each run's telemetry.csv (step,tensor,metric,value) and numerics_twin.dat.\n");
    mpt_report_gnuplot_terminal(f, 1000, panels * 380, "numerics.png");
    fprintf(f, "set datafile separator ','\nset datafile missing NaN\nset grid\n"
               "set multiplot layout %d,1\nset key outside right top\n"
               "set lmargin at screen 0.08\nset rmargin at screen 0.80\n", panels); /* panels aligned, short keys */
    static panel pn; /* 9 KiB: not on the stack */
    char title[64];
    if (has16) {
        memset(&pn, 0, sizeof pn);
        for (int i = 0; i < n; i++) {
            mpt_precision p = rows[i].precision;
            const mpt_mode_desc *mode = mpt_mode_info(p);
            if (mode->act_dtype == MPT_DTYPE_F32) continue; /* FP8 modes: their BF16 */
            const char *name = mpt_precision_name(p), *rd = rows[i].dir ? rows[i].dir : name;
            /* only fp16 has a loss scale: bf16's (and the FP8 modes' BF16) line is the rounding as it is */
            snprintf(title, sizeof title, mode->dynamic_loss_scale ? "%s, at its S" : "%s (no scaling)", name);
            series(&pn, rows[i].r, rd, (int)p + 1, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac", 1, title);
            if (mode->dynamic_loss_scale && mpt_run_stat(rows[i].r, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac@S=1")) {
                snprintf(title, sizeof title, "%s, had S been 1", name);
                series(&pn, rows[i].r, rd, (int)p + 1, MPT_TELEMETRY_ALL_ACT_GRAD, "flush_frac@S=1", 2, title);
            }
        }
        fprintf(f, "set title 'activation gradients flushed to zero when rounded to fp16/bf16 (all layers pooled)'\n"
                   "set xlabel 'step'\nset ylabel '%% of nonzero values'\n");
        panel_write(f, &pn);
    }
    memset(&pn, 0, sizeof pn);
    for (int i = 0; i < n; i++) {
        mpt_precision p = rows[i].precision;
        const char *name = mpt_precision_name(p), *rd = rows[i].dir ? rows[i].dir : name;
        snprintf(title, sizeof title, "%s", name);
        series(&pn, rows[i].r, rd, (int)p + 1, MPT_TELEMETRY_ALL_PARAMS, "lost_frac", 1, title);
        if (mpt_run_stat(rows[i].r, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit")) {
            const mpt_mode_desc *mode = mpt_mode_info(p);
            if (mode->fp8 != MPT_FP8_KIND_NONE) snprintf(title, sizeof title, "%s, on its %s copy", name, mode->act_name);
            else snprintf(title, sizeof title, "%s, on its 16-bit copy", name);
            series(&pn, rows[i].r, rd, (int)p + 1, MPT_TELEMETRY_ALL_PARAMS, "lost_frac_if_16bit", 2, title);
        }
    }
    fprintf(f, "set title 'optimizer updates lost (non-zero, left the stored weight unchanged; all parameters)'\n"
               "set xlabel 'step'\nset ylabel '%% of non-zero updates'\n");
    panel_write(f, &pn);
    if (has_fp8) { /* FP8 runs: their gradient casts, flushed (solid) and saturated (dashed) */
        memset(&pn, 0, sizeof pn);
        for (int i = 0; i < n; i++) {
            if (!mpt_run_stat(rows[i].r, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac")) continue;
            mpt_precision p = rows[i].precision;
            const char *name = mpt_precision_name(p), *rd = rows[i].dir ? rows[i].dir : name;
            snprintf(title, sizeof title, "%s flushed", name);
            series(&pn, rows[i].r, rd, (int)p + 1, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_flush_frac", 1, title);
            snprintf(title, sizeof title, "%s saturated", name);
            series(&pn, rows[i].r, rd, (int)p + 1, MPT_TELEMETRY_ALL_FP8_GRAD, "fp8_sat_frac", 2, title);
        }
        fprintf(f, "set title 'FP8 gradient operands (dy of every FP8 layer): flushed to zero and saturated by "
                   "the cast'\nset xlabel 'step'\nset ylabel '%% of nonzero values'\n");
        panel_write(f, &pn);
    }
    if (twin_lines > 0) {
        memset(&pn, 0, sizeof pn);
        for (int i = 0; i < n; i++) {
            mpt_precision p = rows[i].precision;
            if (twin_points[i] > 0)
                panel_clause(&pn, "'numerics_twin.dat' using 0:%d:xtic(1) with linespoints lw 1.5 lt %d pt 7 "
                                  "title '%s'", i + 2, (int)p + 1, mpt_precision_name(p));
            else
                panel_missing(&pn, mpt_precision_name(p), why_no_twin_points(rows[i].r));
        }
        fprintf(f, "set title 'relative L2 error of each activation against the FP32 twin (mean over telemetry steps)'\n"
                   "set datafile separator whitespace\nset xlabel ''\nset ylabel '||a - a_{fp32}|| / ||a_{fp32}||'\n"
                   "set logscale y 2\nset format y '2^{%%L}'\nset xtics rotate by -30\nset datafile missing 'nan'\n");
        if (!pn.plot_len) fprintf(f, "unset logscale y\nset format y '%%g'\n"); /* the empty frame's [0:1] */
        panel_write(f, &pn);
    }
    fprintf(f, "unset multiplot\n");
    return mpt_outdir_close_written(f, path);
}

mpt_status mpt_report_plot_numerics(const char *dir, const mpt_report_row *rows, int n, int64_t every) {
    int any = 0;
    for (int i = 0; i < n; i++) any |= has_points(rows[i].r, "amp", "loss_scale");
    if (!any)
        return mpt_errorf(MPT_ERR_ARG, "no run reached a telemetry step: telemetry measures every %lld-th step and "
                                       "every run had fewer steps, so there is nothing to plot", (long long)every);
    MPT_TRY(write_numerics_script(dir, rows, n));
    return mpt_report_gnuplot(dir, "numerics.gp");
}
