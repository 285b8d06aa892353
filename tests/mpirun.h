/*
 * tests/mpirun.h - running the mptrain program, under `mpirun -np N --oversubscribe` or alone, from a suite-mpi
 * test (test_dist_cli, test_dist_sweep). Include after tmpdir.h: the program's stdout and stderr go to
 * tmpdir/log, which log_contains() searches. MPT_BUILD_ROOT (set by meson test) locates tools/mptrain.
 */
#ifndef MPT_TESTS_MPIRUN_H
#define MPT_TESTS_MPIRUN_H

#include <errno.h>
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

/* Runs argv (NULL-terminated; argv[0] looked up in PATH) with stdout and stderr into tmpdir/log; returns the exit
 * status, or 128 + signal. */
static int run_argv(const char *const *argv) {
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
    int status = 0;
    ck_assert(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = run_argv(argv);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return rc;
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
