/*
 * tests/test_status.c - engine/status.c: what mpt_fatal() leaves behind when it aborts.
 *
 * abort() flushes no stdio buffer. When stdout is a pipe or a file (a test log, `mptrain ... > out.txt`, a GPU
 * script's tee) it is block-buffered, so a program that printed its device line or a results table and then
 * died in a failed CUDA call used to lose all of it. Each test runs the abort in a child process whose stdout
 * (and stderr) is a pipe, and reads what came out.
 *
 * And a message longer than mpt_errorf's buffer (issue 36: a 4090-byte --out was cut at 1024 bytes, inside the path,
 * and lost its reason): it keeps its words and its end, the middle of its longest word becomes "[...N bytes...]",
 * and a cut never splits a UTF-8 sequence.
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

START_TEST(test_long_message_keeps_its_reason) {
    char path[5001];
    for (int i = 0; i < 5000; i++) path[i] = (char)(i % 64 == 63 ? '/' : 'a' + i % 26);
    path[5000] = '\0';
    mpt_errorf(MPT_ERR_IO, "--out %s: cannot create %s (Not a directory)", path, "/tmp/x/a");
    const char *m = mpt_last_error();
    size_t n = strlen(m);
    ck_assert_msg(n < 1024, "%zu bytes", n);
    ck_assert_msg(strncmp(m, "--out aaaa", 6) == 0, "the start is gone: %.80s", m);
    const char *tail = ": cannot create /tmp/x/a (Not a directory)";
    ck_assert_msg(n > strlen(tail) && strcmp(m + n - strlen(tail), tail) == 0, "the reason is gone: %s", m + n - 80);
    ck_assert_msg(strstr(m, "[...") && strstr(m, " bytes...]"), "no marker of what was left out: %.200s", m);
    /* the same with multi-byte characters (U+00E9, 2 bytes): no broken sequence is left */
    static char wide[8001];
    for (int i = 0; i < 4000; i++) wide[2 * i] = (char)0xc3, wide[2 * i + 1] = (char)0xa9;
    mpt_errorf(MPT_ERR_IO, "%s: no room", wide);
    m = mpt_last_error();
    n = strlen(m);
    ck_assert(n < 1024 && strcmp(m + n - 9, ": no room") == 0);
    ck_assert_msg(strstr(m, "\\x") == NULL, "a split sequence escaped: %.120s", m);
    for (const char *p = m; *p; p++) /* every 0xc3 is followed by its continuation byte */
        if ((unsigned char)*p == 0xc3) ck_assert((unsigned char)p[1] == 0xa9);
    size_t lead = 0;
    while ((unsigned char)m[lead] == 0xc3) lead += 2;
    ck_assert_msg(m[lead] == '[', "the cut does not start on a character boundary: byte 0x%02x", (unsigned char)m[lead]);
    /* short messages are untouched */
    mpt_errorf(MPT_ERR_IO, "%s", "a short one");
    ck_assert_str_eq(mpt_last_error(), "a short one");
}
END_TEST

int main(void) {
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("fatal");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_fatal_keeps_buffered_stdout);
    tcase_add_test(tc, test_fatal_flushes_every_open_stream);
    tcase_add_test(tc, test_long_message_keeps_its_reason);
    suite_add_tcase(s, tc);
    return mpt_test_run(s);
}
