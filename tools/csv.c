/* tools/csv.c - a run's CSV files (tools/csv.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/csv.h"

static mpt_status csv_error(const mpt_csv *c, const char *what) {
    return mpt_errorf(MPT_ERR_IO, "%s: %s failed: %s", c->of.path, what, strerror(errno ? errno : EIO));
}

mpt_status mpt_csv_row(mpt_csv *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int rc = vfprintf(c->of.f, fmt, ap);
    va_end(ap);
    if (rc >= 0) rc = c->run_id ? fprintf(c->of.f, ",%s\n", c->run_id) : fprintf(c->of.f, "\n");
    return rc < 0 || ferror(c->of.f) ? csv_error(c, "write") : MPT_OK;
}

/* Writes the header line: the columns, and run_id when the rows carry it. */
static mpt_status csv_header(mpt_csv *c, const char *header) {
    errno = 0;
    int rc = fprintf(c->of.f, "%s%s\n", header, c->run_id ? ",run_id" : "");
    return rc < 0 || ferror(c->of.f) ? csv_error(c, "write") : MPT_OK;
}

mpt_status mpt_csv_flush(mpt_csv *c) {
    errno = 0;
    return fflush(c->of.f) != 0 || ferror(c->of.f) ? csv_error(c, "write") : MPT_OK;
}

/* The last field of a CSV line (without its newline), in buf. */
static const char *last_field(const char *line, char *buf, size_t cap) {
    const char *comma = strrchr(line, ','), *v = comma ? comma + 1 : line;
    size_t n = strcspn(v, "\r\n");
    if (n >= cap) n = cap - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return buf;
}

/* Resuming: copies into the run's new file the rows of the published dir/name that this run wrote up to its
 * checkpoint (first column <= keep_upto); later rows, written after the checkpoint by a run that was stopped or
 * killed, would otherwise appear twice. A row of another run (another run_id) is refused: the directory holds
 * another run's history, and continuing there would mix the two. */
static mpt_status csv_copy_own_rows(mpt_csv *c, const mpt_outdir *od, const char *header, int64_t keep_upto) {
    int fd = openat(od->fd, c->of.name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT) return mpt_errorf(MPT_ERR_IO, "%s: cannot read it to continue it (%s)", c->of.path, strerror(errno));
        return csv_header(c, header); /* a new directory: the rows start at the checkpoint */
    }
    FILE *in = fdopen(fd, "r");
    if (!in) {
        close(fd);
        return mpt_errorf(MPT_ERR_IO, "%s: cannot read it (%s)", c->of.path, strerror(errno));
    }
    char line[4096], id[64];
    int first = 1;
    mpt_status s = MPT_OK;
    while (s == MPT_OK && fgets(line, sizeof line, in)) {
        if (!strchr(line, '\n') && !feof(in)) {
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: a line longer than %zu bytes: not a CSV that mptrain wrote; move it "
                           "away or use a new --out", c->of.path, sizeof line);
            break;
        }
        if (first) {
            char have[4096];
            snprintf(have, sizeof have, "%s", line);
            have[strcspn(have, "\r\n")] = '\0';
            char want[1024];
            snprintf(want, sizeof want, "%s%s", header, c->run_id ? ",run_id" : "");
            if (strcmp(have, want) != 0) {
                char esc[200];
                mpt_escape(esc, sizeof esc, have);
                s = mpt_errorf(MPT_ERR_FORMAT, "%s: its columns are '%.120s', this mptrain writes '%s': not a CSV of "
                               "this run; move it away or use a new --out", c->of.path, esc, want);
                break;
            }
            s = csv_header(c, header);
            first = 0;
            continue;
        }
        char *end = NULL;
        errno = 0;
        long long v = strtoll(line, &end, 10);
        if (end == line || *end != ',' || errno != 0) {
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: not a CSV that mptrain wrote (a row does not start with an integer); "
                           "move it away or use a new --out", c->of.path);
            break;
        }
        if (c->run_id && strcmp(last_field(line, id, sizeof id), c->run_id) != 0) {
            char esc[80];
            s = mpt_errorf(MPT_ERR_ARG, "--resume: %s holds rows of run %s, the checkpoint is of run %s: continuing "
                           "there would mix two runs' histories; resume in the directory the checkpoint came from, or "
                           "give a new --out", c->of.path, mpt_escape(esc, sizeof esc, id), c->run_id);
            break;
        }
        if (v > keep_upto) continue;
        errno = 0;
        if (fputs(line, c->of.f) == EOF) s = csv_error(c, "write");
    }
    if (s == MPT_OK && ferror(in)) s = mpt_errorf(MPT_ERR_IO, "%s: read failed (%s)", c->of.path, strerror(errno));
    if (s == MPT_OK && first) s = csv_header(c, header); /* an empty file */
    fclose(in);
    return s;
}

mpt_status mpt_csv_open(mpt_csv *c, const mpt_outdir *od, const char *name, const char *header, int64_t keep_upto,
                        const char *run_id) {
    c->run_id = run_id;
    c->devnull = od == NULL;
    if (c->devnull) {
        snprintf(c->of.path, sizeof c->of.path, "/dev/null");
        c->of.dir_fd = -1;
        c->of.f = fopen(c->of.path, "w");
        return c->of.f ? MPT_OK : mpt_errorf(MPT_ERR_IO, "/dev/null: cannot open (%s)", strerror(errno));
    }
    MPT_TRY(mpt_outfile_open(&c->of, od, name));
    if (keep_upto >= 0) MPT_TRY(csv_copy_own_rows(c, od, header, keep_upto));
    else MPT_TRY(csv_header(c, header));
    return mpt_csv_flush(c);
}

mpt_status mpt_csv_stage(mpt_csv *c, int final, mpt_outdir_txn *tx) {
    if (c->devnull || !c->of.f) return MPT_OK;
    MPT_TRY(mpt_csv_flush(c));
    return final ? mpt_outfile_stage(&c->of, tx) : mpt_outfile_stage_copy(&c->of, tx);
}

void mpt_csv_discard(mpt_csv *c) {
    if (c->devnull) {
        if (c->of.f) fclose(c->of.f);
        c->of.f = NULL;
    } else {
        mpt_outfile_discard(&c->of);
    }
}
