/*
 * tests/mpirun.h - running the mptrain program, under `mpirun -np N --oversubscribe` or alone, from a suite-mpi
 * test (test_dist_cli, test_dist_sweep), finding and stopping one rank of a running job, and checking a job that must
 * stop at once with one line. Include after tmpdir.h: the program's stdout and stderr go to tmpdir/log, which
 * log_contains() searches. MPT_BUILD_ROOT (set by meson test) locates tools/mptrain.
 */
#ifndef MPT_TESTS_MPIRUN_H
#define MPT_TESTS_MPIRUN_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mpt_config.h"

/* The mptrain program of this build (MPT_BUILD_ROOT/tools/mptrain) into exe (len bytes). */
static void mptrain_path(char *exe, size_t len) {
    const char *root = getenv("MPT_BUILD_ROOT");
    snprintf(exe, len, "%s/tools/mptrain", root ? root : ".");
}

/* Starts argv (NULL-terminated; argv[0] looked up in PATH) with stdout and stderr into tmpdir/log; returns its PID. */
static pid_t start_argv(const char *const *argv) {
    char log[600];
    snprintf(log, sizeof log, "%s/log", tmpdir);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(126);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

/* A wait status as a shell gives it: the exit status, or 128 + signal. */
static int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

/* Seconds from t0 to now (CLOCK_MONOTONIC). */
static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* Runs argv (NULL-terminated; argv[0] looked up in PATH) with stdout and stderr into tmpdir/log; returns the exit
 * status, or 128 + signal. */
static int run_argv(const char *const *argv) {
    pid_t pid = start_argv(argv);
    int status = 0;
    ck_assert(waitpid(pid, &status, 0) == pid);
    return exit_code(status);
}

/* Runs `[mpirun -np ranks --oversubscribe] mptrain <args...>` (args NULL-terminated, at most 56) with stdout
 * and stderr into tmpdir/log; returns the exit status, or 128 + signal. ranks 0: without mpirun. */
static int run_mptrain(int ranks, const char *const *args) {
    char exe[1024], np[8];
    mptrain_path(exe, sizeof exe);
    snprintf(np, sizeof np, "%d", ranks);
    const char *argv[64];
    int n = 0;
    if (ranks > 0) {
        argv[n++] = "mpirun";
        argv[n++] = "-np";
        argv[n++] = np;
        argv[n++] = "--oversubscribe";
    }
    argv[n++] = exe;
    for (int i = 0; args[i]; i++) {
        ck_assert(n < 63);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return run_argv(argv);
}

/* Runs `timeout <limit> mpirun --oversubscribe -np 1 mptrain <args0...> : -np 1 mptrain <args1...>` (rank 0 and rank 1
 * with their own command lines; each NULL-terminated, at most 40) with stdout and stderr into tmpdir/log; returns the
 * exit status (124: still running after `limit` seconds, a hang) and the seconds it took in *secs. */
static int run_two_commands(const char *const *args0, const char *const *args1, int limit, double *secs) {
    char exe[1024], lim[16];
    mptrain_path(exe, sizeof exe);
    snprintf(lim, sizeof lim, "%d", limit);
    const char *argv[100] = {"timeout", lim, "mpirun", "--oversubscribe"};
    int n = 4;
    for (int r = 0; r < 2; r++) {
        const char *const *a = r == 0 ? args0 : args1;
        if (r == 1) argv[n++] = ":";
        argv[n++] = "-np";
        argv[n++] = "1";
        argv[n++] = exe;
        for (int i = 0; a[i]; i++) {
            ck_assert(n < 98);
            argv[n++] = a[i];
        }
    }
    argv[n] = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = run_argv(argv);
    *secs = seconds_since(&t0);
    return rc;
}

/* The PID of the process that is MPI rank `rank` (its environment says OMPI_COMM_WORLD_RANK) of a job whose command
 * line names `out`, or 0. */
static pid_t rank_pid(int rank, const char *out) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    pid_t found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        char path[300], buf[1 << 15];
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        int names_out = 0;
        for (size_t i = 0; i < n; i += strlen(buf + i) + 1) names_out |= strcmp(buf + i, out) == 0;
        if (!names_out) continue;
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        if (!(f = fopen(path, "rb"))) continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
            if (strcmp(buf + i, want) == 0) found = (pid_t)atol(e->d_name);
    }
    closedir(d);
    return found;
}

/* Starts argv (a job under `timeout LIMIT mpirun`, whose command line names out) with stdout and stderr into
 * tmpdir/log; once the file `ready` exists and rank 1 of the job is found (polled every 10 ms for up to 60 s; the
 * test fails if the job ends first), waits pause_ms and stops rank 1 (SIGSTOP); then waits for the job and kills the
 * stopped rank if it is still there. Returns the job's exit status (or 128 + signal) and the seconds from its start
 * to its end in *secs. */
static int run_stopping_rank_1(const char *const *argv, const char *ready, const char *out, int pause_ms,
                               double *secs) {
    char log[600];
    snprintf(log, sizeof log, "%s/log", tmpdir);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t job = start_argv(argv);
    pid_t r1 = 0;
    for (int i = 0; i < 6000 && !r1; i++) {
        if (access(ready, F_OK) == 0) r1 = rank_pid(1, out);
        ck_assert_msg(waitpid(job, NULL, WNOHANG) == 0, "the job ended before %s existed and rank 1 was found (see %s)",
                      ready, log);
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    ck_assert_msg(r1 > 0, "rank 1 of the job not found (see %s)", log);
    struct timespec pause = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
    ck_assert(kill(r1, SIGSTOP) == 0);
    int status = 0;
    ck_assert(waitpid(job, &status, 0) == job);
    *secs = seconds_since(&t0);
    if (kill(r1, 0) == 0) kill(r1, SIGKILL); /* the job is over either way */
    return exit_code(status);
}

/* The whole file, NUL-terminated (malloc'd); NULL when it cannot be read. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (size_t k; b && (k = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (n + 1 == cap) b = realloc(b, cap *= 2);
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* Whether the last run's output (tmpdir/log) contains `needle`. */
static int log_contains(const char *needle) {
    char *b = slurp(tmp_path("log"));
    ck_assert(b != NULL);
    int yes = strstr(b, needle) != NULL;
    free(b);
    return yes;
}

/* The number of lines of the last run's output (tmpdir/log) that start with `prefix` (mptrain's own lines start with
 * "mptrain"; mpirun adds banners of its own). */
static int log_lines_starting(const char *prefix) {
    char *b = slurp(tmp_path("log"));
    ck_assert(b != NULL);
    int n = 0;
    size_t k = strlen(prefix);
    for (char *line = b; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        n += strncmp(line, prefix, k) == 0;
    free(b);
    return n;
}

/* Why a job that should stop at once, before training, on the disagreement named by `want` did not (exit status rc,
 * secs seconds, its output in tmpdir/log): exit status 2 within 60 s and `want` as the only line of mptrain's; NULL
 * when it did. */
static const char *one_line_stop_problem(int rc, double secs, const char *want) {
    return rc != 2                                ? "exit status not 2"
           : secs > 60.0                          ? "took more than 60 s"
           : !log_contains(want)                  ? "no line naming the setting and both values"
           : log_lines_starting("mptrain") != 1   ? "more than one line of mptrain's"
                                                  : NULL;
}

/* Appends "\n  [label] why (exit rc, secs s): <the first 300 bytes of tmpdir/log>" to failures (cap bytes, *len
 * used so far; cut at cap). */
static void note_failure(char *failures, size_t cap, size_t *len, const char *label, const char *why, int rc,
                         double secs) {
    char *log = slurp(tmp_path("log"));
    *len += (size_t)snprintf(failures + *len, cap - *len, "\n  [%s] %s (exit %d, %.0f s): %.300s", label, why, rc, secs,
                             log ? log : "");
    free(log);
    if (*len >= cap) *len = cap - 1;
}

/* 77 (meson's skip, after one line naming `program`) when Fashion-MNIST is not installed, else 0. */
static int skip_without_fashion_mnist(const char *program) {
    char probe[512];
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", MPT_DEFAULT_DATA_DIR);
    if (access(probe, R_OK) == 0) return 0;
    printf("%s: skipped: Fashion-MNIST is not in %s (apt-get install dataset-fashion-mnist)\n", program,
           MPT_DEFAULT_DATA_DIR);
    return 77;
}

#endif
