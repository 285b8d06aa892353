/*
 * tests/test_status.c - engine/status.c: what mpt_fatal() leaves behind when it aborts.
 *
 * abort() flushes no stdio buffer. When stdout is a pipe or a file (a test log, `mptrain ... > out.txt`, a GPU
 * script's tee) it is block-buffered, so a program that printed its device line or a results table and then
 * died in a failed CUDA call used to lose all of it. Each test runs the abort in a child process whose stdout
 * (and stderr) is a pipe, and reads what came out.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/status.h"
#include "harness.h"

typedef struct {
    char text[8192]; /* everything the child wrote to the pipe */
    int status;      /* waitpid's */
} child_result;

/* Runs body() in a child whose stdout and stderr are one pipe (stdout block-buffered, as for any pipe), and
 * collects what it wrote and how it ended. */
static child_result run_child(void (*body)(void)) {
    child_result r;
    memset(&r, 0, sizeof r);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        close(fds[0]);
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[1]);
        setvbuf(stdout, NULL, _IOFBF, BUFSIZ); /* what stdout is on a pipe, whatever it was in the parent */
        body();
        _exit(0);
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t n;
    while (used + 1 < sizeof r.text && (n = read(fds[0], r.text + used, sizeof r.text - 1 - used)) > 0)
        used += (size_t)n;
    close(fds[0]);
    ck_assert_int_eq(waitpid(pid, &r.status, 0), pid);
    return r;
}

static void print_then_fatal(void) {
    printf("device: a line printed before the failure\n");
    printf("table row without a newline yet");
    mpt_fatal("somefile.cu", 42, "cublasLtMatmul failed: %s", "CUBLAS_STATUS_EXECUTION_FAILED");
}

START_TEST(test_fatal_keeps_buffered_stdout) {
    child_result r = run_child(print_then_fatal);
    ck_assert_msg(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "the child did not abort (status 0x%x)",
                  r.status);
    ck_assert_msg(strstr(r.text, "device: a line printed before the failure\n") != NULL,
                  "stdout printed before mpt_fatal was lost; the pipe got: '%s'", r.text);
    ck_assert_msg(strstr(r.text, "table row without a newline yet") != NULL, "the unterminated line was lost: '%s'",
                  r.text);
    const char *fatal = strstr(r.text, "mptrain: fatal: cublasLtMatmul failed: CUBLAS_STATUS_EXECUTION_FAILED "
                                       "(somefile.cu:42)\n");
    ck_assert_msg(fatal != NULL, "no fatal line: '%s'", r.text);
    /* stdout is flushed before the message, so a log of both streams keeps the order they were written in */
    ck_assert_msg(strstr(r.text, "device: a line") < fatal, "the fatal line came before the earlier stdout: '%s'",
                  r.text);
}
END_TEST

static char stream_path[256];

/* A results file written through its own block-buffered stream, then a fatal error. */
static void write_file_then_fatal(void) {
    FILE *f = fopen(stream_path, "w");
    if (!f) _exit(3);
    setvbuf(f, NULL, _IOFBF, 1 << 16);
    fprintf(f, "epoch,loss\n1,0.5\n");
    MPT_ASSERTF(1 + 1 == 3, "a programmer error after %d rows", 1);
}

START_TEST(test_fatal_flushes_every_open_stream) {
    snprintf(stream_path, sizeof stream_path, "%s/mpt-test-status-%ld.csv", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    child_result r = run_child(write_file_then_fatal);
    ck_assert_msg(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "the child did not abort (status 0x%x)",
                  r.status);
    ck_assert_msg(strstr(r.text, "mptrain: fatal: a programmer error after 1 rows (") != NULL, "no fatal line: '%s'",
                  r.text);
    FILE *f = fopen(stream_path, "r");
    ck_assert_msg(f != NULL, "%s was not created", stream_path);
    char buf[256] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    unlink(stream_path);
    buf[n] = '\0';
    ck_assert_msg(strcmp(buf, "epoch,loss\n1,0.5\n") == 0, "the stream's buffered rows were lost: '%s'", buf);
}
END_TEST

int main(void) {
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("fatal");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_fatal_keeps_buffered_stdout);
    tcase_add_test(tc, test_fatal_flushes_every_open_stream);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
