/*
 * tools/plot.c - convergence.png for `mptrain compare`, drawn by gnuplot from the runs' CSV files.
 *
 * The script is kept next to the picture (convergence.gp) so a reader can change it and run `gnuplot
 * convergence.gp` in the same directory. Panels: training loss per logged step, test accuracy per epoch,
 * and the fp16 loss scale (log axis) when an fp16 run is part of the comparison. The terminal is pngcairo
 * when this gnuplot has it (antialiased), else the libgd png terminal. gnuplot runs with the output
 * directory as its working directory; its messages go to convergence.log. Each precision keeps one colour
 * (gnuplot line type 1 + its mpt_precision value) in every panel.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/cli.h"

static mpt_status write_script(const char *path, const mpt_precision *p, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
    int has_fp16 = 0;
    for (int i = 0; i < n; i++) has_fp16 |= p[i] == MPT_PRECISION_FP16;
    int panels = has_fp16 ? 3 : 2;
    fprintf(f, "# convergence.gp - written by mptrain compare; run `gnuplot convergence.gp` in this directory.\n");
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
               "  set terminal pngcairo size 1000,%d font \",10\"\n"
               "} else {\n"
               "  set terminal png size 1000,%d\n"
               "}\n",
            panels * 380, panels * 380);
    fprintf(f, "set output 'convergence.png'\n"
               "set datafile separator ','\n"
               "set datafile missing 'nan'\n"
               "set grid\n"
               "set key top right\n"
               "set multiplot layout %d,1\n",
            panels);
    fprintf(f, "set title 'training loss per step'\nset xlabel 'step'\nset ylabel 'cross-entropy'\nplot ");
    for (int i = 0; i < n; i++) {
        const char *name = mpt_precision_name(p[i]);
        fprintf(f, "%s'%s/metrics.csv' using 'step':'loss' with lines lw 1.5 lt %d title '%s'",
                i ? ", \\\n     " : "", name, (int)p[i] + 1, name);
    }
    fprintf(f, "\nset title 'test accuracy per epoch'\nset xlabel 'epoch'\nset ylabel 'accuracy (%%)'\n"
               "set xtics 1\nset key bottom right\nplot ");
    for (int i = 0; i < n; i++) {
        const char *name = mpt_precision_name(p[i]);
        fprintf(f, "%s'%s/epochs.csv' using 'epoch':(100*column('test_acc')) with linespoints lw 1.5 lt %d pt 7 "
                   "title '%s'",
                i ? ", \\\n     " : "", name, (int)p[i] + 1, name);
    }
    fprintf(f, "\nset xtics autofreq\n");
    if (has_fp16)
        fprintf(f, "set title 'fp16 dynamic loss scale (halves on overflow, doubles after clean intervals)'\n"
                   "set xlabel 'step'\nset ylabel 'loss scale'\nset logscale y 2\nset format y '2^{%%L}'\n"
                   "set ytics 2\nset offsets 0, 0, graph 0.1, graph 0.1\n" /* a flat scale off the frame */
                   "set key bottom left\n"
                   "plot 'fp16/metrics.csv' using 'step':'loss_scale' with steps lw 1.5 lt %d title 'fp16'\n"
                   "unset logscale y\n",
                (int)MPT_PRECISION_FP16 + 1);
    fprintf(f, "unset multiplot\n");
    if (fclose(f) != 0) return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
    return MPT_OK;
}

mpt_status mpt_cli_plot(const char *dir, const mpt_precision *precisions, int n) {
    char script[MPT_CLI_PATH + 64];
    snprintf(script, sizeof script, "%s/convergence.gp", dir);
    MPT_TRY(write_script(script, precisions, n));
    char log[MPT_CLI_PATH + 64];
    snprintf(log, sizeof log, "%s/convergence.log", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return mpt_errorf(MPT_ERR_IO, "cannot start gnuplot: fork failed (%s)", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        if (chdir(dir) != 0) _exit(126);
        execlp("gnuplot", "gnuplot", "convergence.gp", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return mpt_errorf(MPT_ERR_IO, "gnuplot: waitpid failed (%s)", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        unlink(log);
        return mpt_errorf(MPT_ERR_IO, "gnuplot not found on PATH (Debian: apt-get install gnuplot-nox); "
                                      "the plot script is %s", script);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return mpt_errorf(MPT_ERR_IO, "gnuplot failed on %s (see %s)", script, log);
    unlink(log);
    return MPT_OK;
}
