/*
 * tools/outdir.c - the output directory of a run, a comparison or a lab (tools/outdir.h): creating it, writing
 * its files so that a failed write is reported, and publishing reports atomically (a temporary file renamed over
 * the old one).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/outdir.h"

mpt_status mpt_cli_close_written(FILE *f, const char *path) {
    int bad = ferror(f);
    errno = 0;
    int why = fflush(f) != 0 ? errno : 0; /* after a failed write, fflush writes the rest again, failing alike */
    if (fclose(f) != 0 && !why) why = errno;
    if (!bad && !why) return MPT_OK;
    return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path,
                      why ? strerror(why) : "a write to it failed; stdio kept no reason");
}

mpt_status mpt_cli_mkdirs(const char *path) {
    char buf[MPT_CLI_PATH];
    if (strlen(path) >= sizeof buf) return mpt_errorf(MPT_ERR_ARG, "--out: path longer than %zu bytes", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return mpt_errorf(MPT_ERR_IO, "--out %s: cannot create %s (%s)", path, buf, strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return mpt_errorf(MPT_ERR_IO, "--out %s: not a directory", path);
    return MPT_OK;
}

mpt_status mpt_cli_remove_result(const char *dir, const char *file) {
    char path[MPT_CLI_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (unlink(path) != 0 && errno != ENOENT)
        return mpt_errorf(MPT_ERR_IO, "%s: cannot remove the result of an earlier job (%s)", path, strerror(errno));
    return MPT_OK;
}

FILE *mpt_cli_open_atomic(const char *path, char *tmp, size_t n) {
    int len = snprintf(tmp, n, "%s.tmp", path);
    if (len < 0 || (size_t)len >= n) {
        mpt_errorf(MPT_ERR_ARG, "%s: path too long", path);
        return NULL;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", tmp, strerror(errno));
    return f;
}

mpt_status mpt_cli_commit_atomic(FILE *f, const char *tmp, const char *path) {
    int bad = ferror(f), err = 0; /* ferror keeps no errno: the reason is the first failure seen here */
    if (fflush(f) != 0) bad = 1, err = errno; /* after a failed write, fflush writes the rest again */
    if (!bad && fsync(fileno(f)) != 0) bad = 1, err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (!bad && rename(tmp, path) != 0) bad = 1, err = errno;
    if (!bad) return MPT_OK;
    unlink(tmp);
    return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path,
                      err ? strerror(err) : "a write to it failed; stdio kept no reason");
}
