/*
 * tests/run_capture.h - running a program as a child process with its output captured, for the tests that drive the
 * mptrain binary (test_cli, test_speedrun) or another test program (test_cuda_require).
 *
 * Define TESTS_OUT_BUF (bytes, default 1 << 16) before including to size out_buf. run_capture() runs a program with
 * stdout and stderr together in out_buf (NUL-terminated; what does not fit is read and dropped, so the child never
 * blocks on a full pipe); run_argv() and run() run the build's tools/mptrain ($MPT_BUILD_ROOT/tools/mptrain, the
 * working directory's without it). Each returns the exit status, or 128 + the signal that ended the child.
 */
#ifndef MPT_TESTS_RUN_CAPTURE_H
#define MPT_TESTS_RUN_CAPTURE_H

#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TESTS_OUT_BUF
#define TESTS_OUT_BUF (1 << 16)
#endif
#define TESTS_MAX_ARGS 96

static char out_buf[TESTS_OUT_BUF];

/* Runs the program at `path` with args (args[0] its name, NULL-terminated); with env_name set, the child's
 * environment variable env_name is env_value (NULL: unset). Descriptors above 2 are closed in the child, as a shell
 * starts it (the test's own would shift the ones the program opens). */
static int run_capture(const char *path, char *const *args, const char *env_name, const char *env_value) {
    int fd[2];
    ck_assert(pipe(fd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        dup2(fd[1], STDERR_FILENO);
        closefrom(3);
        if (env_name && env_value) setenv(env_name, env_value, 1);
        else if (env_name) unsetenv(env_name);
        execv(path, args);
        fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(fd[0], out_buf + n, sizeof out_buf - 1 - n)) > 0) n += (size_t)k;
    out_buf[n] = '\0';
    char sink[4096];
    while (read(fd[0], sink, sizeof sink) > 0) {
    }
    close(fd[0]);
    int status = 0;
    ck_assert(waitpid(pid, &status, 0) == pid);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* The build's mptrain. */
static inline const char *mptrain_path(void) {
    static char p[1024];
    const char *root = getenv("MPT_BUILD_ROOT");
    snprintf(p, sizeof p, "%s/tools/mptrain", root ? root : ".");
    return p;
}

/* mptrain with the NULL-terminated arguments (args[0] is the program's name). */
static inline int run_argv(char *const *args) { return run_capture(mptrain_path(), args, NULL, NULL); }

/* mptrain with the arguments first, ..., NULL (at most TESTS_MAX_ARGS - 2). */
static inline int run(const char *first, ...) {
    char *args[TESTS_MAX_ARGS];
    int n = 0;
    args[n++] = (char *)"mptrain";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *)) {
        ck_assert(n < TESTS_MAX_ARGS - 1);
        args[n++] = (char *)a;
    }
    va_end(ap);
    args[n] = NULL;
    return run_argv(args);
}

#endif
