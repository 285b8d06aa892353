/*
 * tools/csv.h - a run's CSV files (metrics.csv, epochs.csv, telemetry.csv): written under a temporary name in the
 * output directory (tools/outdir.h), published with the run's checkpoint as one set at each save, each
 * row ending with the run's id where the file has that column (docs/outputs.md). Resuming copies this run's own rows
 * up to its checkpoint from the published file and refuses a file holding another run's rows.
 */
#ifndef MPT_TOOLS_CSV_H
#define MPT_TOOLS_CSV_H

#include <stdint.h>

#include "engine/status.h"
#include "tools/outdir.h"

typedef struct mpt_csv {
    mpt_outfile of;         /* the temporary file (or /dev/null) */
    const char *run_id;     /* written as the last column of each row, or NULL (telemetry.csv has no such column) */
    int devnull;            /* a data-parallel rank that does not write: rows go to /dev/null, nothing is published */
} mpt_csv;

/* Opens the CSV `name` in od with its header (and ",run_id" when run_id is given): a new temporary file, or,
 * resuming (keep_upto >= 0), this run's rows up to keep_upto (first column) copied from the published file; a
 * published file with other columns, a row that is not mptrain's or a row of another run (another run_id) is refused
 * naming the file. od NULL: rows go to /dev/null. MPT_ERR_IO / MPT_ERR_FORMAT / MPT_ERR_ARG naming the file. */
mpt_status mpt_csv_open(mpt_csv *c, const mpt_outdir *od, const char *name, const char *header, int64_t keep_upto,
                        const char *run_id);

/* Appends one printf-style row and, when the file has the column (c->run_id), the run's id and the newline;
 * MPT_ERR_IO naming the file when the write fails (a full disk). */
mpt_status mpt_csv_row(mpt_csv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Pushes buffered rows to the (temporary) file, so that a full disk is reported when it happens. */
mpt_status mpt_csv_flush(mpt_csv *c);

/* Stages what the CSV holds so far into the publish set tx (a run's files are published together with its
 * checkpoint, tools/outdir.h); final: the file itself, closed, else a copy and the file stays open. Nothing for a CSV
 * never opened or on /dev/null. */
mpt_status mpt_csv_stage(mpt_csv *c, int final, mpt_outdir_txn *tx);

/* Closes the CSV without publishing (a failed run): its temporary file is removed. */
void mpt_csv_discard(mpt_csv *c);

#endif
