/*
 * tests/tmpdir.h - a per-test temporary directory for tests that write files.
 * Define TESTS_TMP_PREFIX (e.g. "mpt_test_idx") before including. make_tmpdir() creates
 * /tmp/<prefix>_XXXXXX, tmp_path(name) names a file in it (a ring of 64 buffers: each pointer stays
 * valid for the next 63 calls), rm_tmpdir() removes the directory and everything in it.
 */
#ifndef MPT_TESTS_TMPDIR_H
#define MPT_TESTS_TMPDIR_H

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>

#ifndef TESTS_TMP_PREFIX
#error "define TESTS_TMP_PREFIX before including tmpdir.h"
#endif

static char tmpdir[256];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/" TESTS_TMP_PREFIX "_XXXXXX");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void rm_tmpdir(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static const char *tmp_path(const char *name) {
    static char p[64][512];
    static int k;
    k = (k + 1) % 64;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

#endif
