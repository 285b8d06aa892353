/*
 * tools/outdir.h - the one owner of an output directory (--out of train, compare and lab; each run's directory):
 * every file mptrain writes there is created, written and published through these functions (tools/outdir.c).
 *
 * The rules, against a careless user and against another user who shares the directory (docs/checkpoints.md):
 *   - A directory is used by one mptrain at a time: mpt_outdir_open takes an exclusive flock(2) on its lock file
 *     (.mptrain.lock, holding the holder's PID and command) for the life of the run, and a second run on the same
 *     directory is refused at start, naming the PID of the first.
 *   - Every output is created new, with O_CREAT | O_EXCL | O_NOFOLLOW relative to the directory's descriptor,
 *     under a unique temporary name (".<name>.tmp-XXXXXX", engine/checkpoint.h's mpt_checkpoint_create_temp), and
 *     published by renaming it over its name: never written through a symbolic link, never half-written under
 *     its name, never mixed with another run's file. A symbolic link (or anything but a regular file) in place of
 *     an output is refused with a one-line error naming it.
 *   - --out itself may be a symbolic link, except one that the kernel's protected_symlinks rule would not follow:
 *     in a sticky, world-writable directory (/tmp), a link owned by neither the caller nor the directory's owner.
 *     Directories that compare and lab name for their runs (--out/<precision>, lab/<lesson>/<run>) may not be
 *     links at all.
 *   - Temporary files left by a run that was killed are removed by the next run that takes the lock.
 *   - Files that belong together (a run's checkpoint and its CSVs, docs/checkpoints.md "The publish protocol") are
 *     published as one set (mpt_outdir_txn): each is written and fsync'ed under its temporary name, then a journal
 *     (MPT_OUTDIR_JOURNAL) naming every rename and removal is written and renamed into place, then the operations
 *     run in order: the first (the checkpoint's rename) is the commit; the journal is removed last. A process killed
 *     before the commit, or a write that fails, leaves the earlier set as it was (its temporary files and an
 *     uncommitted journal are removed by the next run); one killed after it has its set completed by the next
 *     mptrain that opens the directory (mpt_outdir_open ends the journal before anything else).
 */
#ifndef MPT_TOOLS_OUTDIR_H
#define MPT_TOOLS_OUTDIR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/status.h"

/* The lock file in every output directory. */
#define MPT_OUTDIR_LOCK ".mptrain.lock"

/* The journal of a publish set between its commit and its completion (mpt_outdir_txn_commit). */
#define MPT_OUTDIR_JOURNAL ".mptrain.publish"

/* How mpt_outdir_open treats a symbolic link at the directory's path. */
typedef enum mpt_outdir_links {
    MPT_OUTDIR_USER_LINK = 0, /* a path the user gave (--out): followed unless protected_symlinks would refuse it */
    MPT_OUTDIR_NO_LINK,       /* a directory mptrain named itself (a run of compare or lab): a link is refused */
} mpt_outdir_links;

/* An output directory, open and locked. */
typedef struct mpt_outdir {
    int fd;                  /* the directory (O_DIRECTORY), -1 when closed */
    int lock_fd;             /* MPT_OUTDIR_LOCK, flock(LOCK_EX) held until mpt_outdir_close */
    int created;             /* 1 when mpt_outdir_open made the directory (it did not exist) */
    size_t created_top;      /* then: the length of the prefix of path naming the first directory it made (a parent
                                made for it, or path itself) */
    char path[4096];         /* the path as given, for messages */
} mpt_outdir;

/* Creates the directory and its parents (mode 0755), checks a symbolic link at its path (links), opens it, takes
 * its lock, completes a publish set that a killed process had committed (its journal) and removes temporary files
 * of killed runs. `command` ("train", "compare") is recorded in the lock
 * file beside the PID. Errors (MPT_ERR_IO, naming the path): a path component that is a file, no permission, a
 * read-only file system, a refused link, and a directory locked by another process ("in use by mptrain PID N
 * (...)"). On error *od is closed. */
mpt_status mpt_outdir_open(mpt_outdir *od, const char *path, mpt_outdir_links links, const char *command);

/* Releases the lock and closes the directory. The lock file stays, unless the directory is one that this open
 * created and nothing but the lock file is in it (a run that failed or stopped before it wrote anything): then the
 * lock file and the directory are removed, and the parents the open created for it while they are empty. od NULL
 * or closed: nothing. */
void mpt_outdir_close(mpt_outdir *od);

/* mpt_outdir_close, removing the directory when nothing but its lock file is in it, whoever created it (the run
 * directory of an earlier job, emptied by mpt_run_clear). */
void mpt_outdir_close_remove_empty(mpt_outdir *od);

/* Checks that each of the NULL-terminated names is absent or a regular file: a symbolic link or another kind of
 * file in place of an output is refused (MPT_ERR_IO naming it), before any work is done. */
mpt_status mpt_outdir_check_names(const mpt_outdir *od, const char *const *names);

/* Checks that the directory's file system has `bytes` available (statvfs f_bavail; `what` says what they are
 * for). MPT_ERR_IO naming the directory, what is free and what is needed. */
mpt_status mpt_outdir_check_space(const mpt_outdir *od, uint64_t bytes, const char *what);

/* Removes `name` from the directory if it is there (the result of an earlier job that this one replaces).
 * MPT_ERR_IO naming it. */
mpt_status mpt_outdir_remove(const mpt_outdir *od, const char *name);

/* A file being written into an output directory under a temporary name, then published as `name`. */
typedef struct mpt_outfile {
    FILE *f;                 /* the stream to write; NULL when closed */
    int dir_fd;              /* the directory (not owned) */
    char tmp[300];           /* the temporary name inside the directory */
    char name[256];          /* the name it is published as */
    char path[4400];         /* directory/name, for messages */
} mpt_outfile;

/* Creates a new temporary file for `name` in od (O_CREAT | O_EXCL | O_NOFOLLOW). MPT_ERR_IO naming dir/name. */
mpt_status mpt_outfile_open(mpt_outfile *of, const mpt_outdir *od, const char *name);

/* Flushes, fsyncs and closes the file and renames it over its name (refused when a symbolic link or a non-regular
 * file stands there: the temporary file is removed). MPT_ERR_IO "<path>: cannot write (<reason>)" when a write
 * failed (a full disk) or the rename did; the temporary file is removed on failure. Closed in every case. */
mpt_status mpt_outfile_publish(mpt_outfile *of);

/* Closes the file and removes its temporary name: nothing is published. of NULL or closed: nothing. */
void mpt_outfile_discard(mpt_outfile *of);

/* ---- publish sets: files that must change together ------------------------------------------------------------
 * Usage: mpt_outdir_txn_begin; stage each file (mpt_outfile_stage, _stage_copy, or mpt_outdir_txn_add for a temporary
 * file written otherwise) and name the files to remove (mpt_outdir_txn_remove); then mpt_outdir_txn_commit. A stage
 * that fails leaves the set uncommitted: mpt_outdir_txn_abort removes what was staged. The operations run in the
 * order they were added (a run adds its checkpoint first: a reader of the directory before the set is complete sees
 * the new checkpoint, whose CSVs the next open completes). */

#define MPT_OUTDIR_TXN_MAX 16

typedef struct mpt_outdir_txn {
    const mpt_outdir *od;
    int n;
    struct {
        char tmp[300];       /* the staged temporary file, "" for a removal */
        char name[256];      /* the name it is published as, or the name removed */
    } op[MPT_OUTDIR_TXN_MAX];
} mpt_outdir_txn;

void mpt_outdir_txn_begin(mpt_outdir_txn *tx, const mpt_outdir *od);

/* Flushes, fsyncs and closes the file; its rename joins the set. Errors as mpt_outfile_publish's (the temporary file
 * is then removed and the set is unchanged). */
mpt_status mpt_outfile_stage(mpt_outfile *of, mpt_outdir_txn *tx);

/* A copy of what was written so far, fsync'ed under a new temporary name, joins the set; the file stays open for
 * more (a run's growing CSVs). Errors as mpt_outfile_publish's. */
mpt_status mpt_outfile_stage_copy(mpt_outfile *of, mpt_outdir_txn *tx);

/* The temporary file tmp (in the directory, complete and fsync'ed) is published as name with the set. */
mpt_status mpt_outdir_txn_add(mpt_outdir_txn *tx, const char *tmp, const char *name);

/* name is removed with the set (if it is there; a symbolic link or a non-regular file in its place fails the commit
 * before anything changes). */
mpt_status mpt_outdir_txn_remove(mpt_outdir_txn *tx, const char *name);

/* Publishes the set: checks every name (a symbolic link or another kind of file in place of one is refused, naming
 * it, and nothing changes), writes and fsyncs the journal and renames it into place, then renames and removes in
 * order; the first operation is the commit (a rename; for a set that starts with a removal, the journal's rename):
 * from there on the set is published, by this process or by the next one that opens the directory. Then it fsyncs
 * the directory and removes the journal. Errors before the commit: MPT_ERR_IO naming the file, the staged files
 * removed, the directory as it was. The set is empty afterwards in every case. */
mpt_status mpt_outdir_txn_commit(mpt_outdir_txn *tx);

/* Removes the staged temporary files: nothing is published. */
void mpt_outdir_txn_abort(mpt_outdir_txn *tx);

/* The publish points, for the tests of the protocol (tests/hostile): with MPT_TEST_PUBLISH_KILL=N in the environment,
 * the N-th point this process reaches (1-based; each set has: staged, journal written, journal in place, one after
 * each rename or removal (the first: committed), done) ends it with SIGKILL, as a kill -9 at that instant would. With MPT_TEST_PUBLISH_TRACE=1
 * each point is said on stderr ("publish point N: what"). Not a user's setting: without them nothing happens. */
void mpt_outdir_publish_point(const char *what);

/* ---- by path: the files of compare's and lab's reports --------------------------------------------------------
 * The same rules for files named by path (their directory is opened for each call): created under a unique
 * temporary name beside `path` and published by rename. */

/* Creates the directory and its parents (mkdir -p; a directory mptrain names under an output directory). MPT_ERR_IO
 * naming the path. */
mpt_status mpt_outdir_mkdirs(const char *path);

/* A new file to be published as `path`: NULL with the error set. Publish it with mpt_outdir_close_written (or
 * mpt_outdir_commit_atomic); mpt_outdir_discard abandons it. */
FILE *mpt_outdir_create_file(const char *path);

/* Closes f and says whether every write reached it: MPT_OK, or MPT_ERR_IO "<path>: cannot write (<reason>)" when
 * a write failed (a full disk) or the close did. The buffered rest is flushed first, so that a failure there
 * gives its errno as the reason; when an earlier fprintf failed and stdio has nothing left to write, the reason
 * is said to be unknown (errno has moved on since). A file from mpt_outdir_create_file is then published as its path
 * (fsync'ed and renamed; removed on failure). f is closed in every case. */
mpt_status mpt_outdir_close_written(FILE *f, const char *path);

/* Closes a file from mpt_outdir_create_file without publishing it (its temporary file is removed). */
void mpt_outdir_discard(FILE *f);

/* Removes dir/file if it exists (a result of an earlier job that this one will write again). MPT_ERR_IO. */
mpt_status mpt_outdir_remove_result(const char *dir, const char *file);

/* Atomic writes of a report: mpt_outdir_create_file(path) (tmp receives the temporary file's path, n bytes; NULL with the
 * error set), then commit: flush, fsync, close, rename over path (on failure the temporary file is removed;
 * MPT_ERR_IO). */
FILE *mpt_outdir_open_atomic(const char *path, char *tmp, size_t n);
mpt_status mpt_outdir_commit_atomic(FILE *f, const char *tmp, const char *path);

#endif
