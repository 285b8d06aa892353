/*
 * tests/fuzz/fuzz_outdir.c - libFuzzer target for what mptrain reads back from an output directory that a killed run
 * or someone else left there: the publish journal (.mptrain.publish, completed or refused by mpt_outdir_open,
 * tools/outdir.c) and a CSV that --resume continues (tools/csv.c, mpt_csv_open with keep_upto and a run_id).
 *
 * The input's first byte chooses which (even: the journal, odd: metrics.csv); the rest is the file. Every input runs
 * in an emptied <scratch>/out that also holds the two temporary files the seed journals name; beside out/,
 * <scratch>/sentinel must survive every input unchanged and no other entry may appear (a journal naming
 * "../sentinel" or "/etc/passwd" must be refused, never applied). A rejection is fine; a crash, a sanitizer report, a
 * leak, a hang, an error message of more than one line, or a file outside out/ touched is a bug. Seed corpus:
 * corpus/outdir/ (tests/fuzz/make_corpus.py).
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/csv.h"
#include "tools/outdir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char scratch[512], out[600], sentinel[600];
static const char sentinel_text[] = "outside the output directory\n";

static void check_one_line(void) {
    if (strchr(mpt_last_error(), '\n')) abort(); /* a message quoting the input forged a second line */
}

static void put(const char *dir, const char *name, const void *b, size_t n) {
    char p[800];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || (n && write(fd, b, n) != (ssize_t)n) || close(fd) != 0) {
        perror(p);
        abort(); /* a fault of the fuzzing machine, not of the input */
    }
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag;
    return ftw->level == 0 ? 0 : remove(p);
}

/* The invariants outside out/: the sentinel whole, and nothing but out/ and the sentinel in the scratch folder. */
static void check_outside(void) {
    char b[sizeof sentinel_text + 8];
    FILE *f = fopen(sentinel, "rb");
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    if (n != sizeof sentinel_text - 1 || memcmp(b, sentinel_text, n) != 0) abort(); /* a journal reached outside */
    DIR *d = opendir(scratch);
    if (!d) abort();
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "out") &&
            strcmp(e->d_name, "sentinel"))
            abort(); /* a file appeared beside out/ */
    closedir(d);
}

static int rm_any(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* At a normal exit the scratch folder goes; after a crash it stays, for the report. */
static void remove_scratch(void) { nftw(scratch, rm_any, 16, FTW_DEPTH | FTW_PHYS); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!scratch[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/mpt-fuzz-outdir-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(scratch)) abort();
        snprintf(out, sizeof out, "%s/out", scratch);
        snprintf(sentinel, sizeof sentinel, "%s/sentinel", scratch);
        put(scratch, "sentinel", sentinel_text, sizeof sentinel_text - 1);
        if (mkdir(out, 0755) != 0) abort();
        atexit(remove_scratch);
    }
    nftw(out, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* out/ emptied, even of what the last input made */
    if (size == 0) return 0;
    const int csv = data[0] & 1;
    put(out, ".metrics.csv.tmp-AAAAAA", "step,loss\n1,0.5\n", 16);
    put(out, ".summary.json.tmp-BBBBBB", "{}\n", 3);
    put(out, csv ? "metrics.csv" : MPT_OUTDIR_JOURNAL, data + 1, size - 1);
    mpt_outdir od;
    if (mpt_outdir_open(&od, out, MPT_OUTDIR_NO_LINK, "fuzz") != MPT_OK) {
        check_one_line();
    } else {
        if (csv) {
            mpt_csv c;
            memset(&c, 0, sizeof c);
            if (mpt_csv_open(&c, &od, "metrics.csv", "step,loss", 5, "0123abcd") != MPT_OK) check_one_line();
            mpt_csv_discard(&c); /* as a failed run does (tools/run.c): the temporary file goes */
        }
        mpt_outdir_close(&od);
    }
    check_outside();
    return 0;
}
