/*
 * tools/outdir.h - the one owner of a run's output directory (--out): every file mptrain writes there is created,
 * written and published through these functions (tools/outdir.c).
 */
#ifndef MPT_TOOLS_OUTDIR_H
#define MPT_TOOLS_OUTDIR_H

#include <stddef.h>
#include <stdio.h>

#include "engine/status.h"

/* Creates the output directory and its parents (mkdir -p). MPT_ERR_IO naming the path. */
mpt_status mpt_cli_mkdirs(const char *path);

/* Closes f, a file being written at path, and says whether every write reached it: MPT_OK, or MPT_ERR_IO
 * "<path>: cannot write (<reason>)" when a write failed (a full disk) or the close did. The buffered rest is
 * flushed first, so that a failure there gives its errno as the reason; when an earlier fprintf failed and
 * stdio has nothing left to write, the reason is said to be unknown (errno has moved on since). f is closed
 * in every case. */
mpt_status mpt_cli_close_written(FILE *f, const char *path);

/* Removes dir/file if it exists (a result of an earlier job that this one will write again). MPT_ERR_IO. */
mpt_status mpt_cli_remove_result(const char *dir, const char *file);

/* Atomic writes of a report: open path.tmp (tmp receives its name, n bytes; NULL with the error set), then
 * commit: flush, fsync, close, rename over path (on failure the temporary file is removed; MPT_ERR_IO). */
FILE *mpt_cli_open_atomic(const char *path, char *tmp, size_t n);
mpt_status mpt_cli_commit_atomic(FILE *f, const char *tmp, const char *path);

#endif
