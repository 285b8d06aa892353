/*
 * tests/hostile/syscall_trace.c - an LD_PRELOAD library for test_hostile: mptrain's fsync and rename calls, passed
 * through to the kernel and appended, in order, to the file that MPT_TEST_SYSCALL_LOG names ("fsync PATH" with the path
 * /proc/self/fd gives for the descriptor, "rename OLD NEW" as the caller named them), so that a test can check the
 * order the durability of a publish depends on (POSIX: data reaches the disk at fsync; a rename is durable once its
 * directory is fsync'ed). Without MPT_TEST_SYSCALL_LOG it only passes the calls through.
 *
 * MPT_TEST_FSYNC_FAIL=TEXT injects a fault: an fsync of a file whose path contains TEXT fails with EIO (logged as
 * "fsync-failed PATH") instead of reaching the kernel, as a disk error at publish would. stdio's own writes do not
 * pass through the PLT, so this is the one point of a publish where a test can aim a failure at one file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void trace(const char *a, const char *b, const char *c) {
    const char *log = getenv("MPT_TEST_SYSCALL_LOG");
    if (!log) return;
    char line[2200];
    int n = snprintf(line, sizeof line, "%s %s%s%s\n", a, b, c ? " " : "", c ? c : "");
    if (n <= 0) return;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (syscall(SYS_write, fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) { /* best effort */ }
    syscall(SYS_close, fd);
}

int fsync(int fd) {
    char link[64], path[1024] = "?";
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n >= 0) path[n] = '\0';
    const char *fail = getenv("MPT_TEST_FSYNC_FAIL");
    if (n >= 0 && fail && fail[0] && strstr(path, fail)) {
        trace("fsync-failed", path, NULL);
        errno = EIO;
        return -1;
    }
    trace("fsync", path, NULL);
    return (int)syscall(SYS_fsync, fd);
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    trace("rename", oldpath, newpath);
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, 0);
}

int rename(const char *oldpath, const char *newpath) {
    trace("rename", oldpath, newpath);
    return (int)syscall(SYS_renameat2, AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}
