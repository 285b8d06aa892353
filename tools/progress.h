/*
 * tools/progress.h - the progress bar of a training run: one line redrawn in place on stdout (--progress; a terminal
 * by default), epoch, bar, batch, loss, loss scale and skipped steps.
 */
#ifndef MPT_TOOLS_PROGRESS_H
#define MPT_TOOLS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/* The terminal's width in columns: $COLUMNS, else the TIOCGWINSZ ioctl on stdout, else 80. */
int mpt_progress_columns(void);

/* One progress line into out (cap bytes) for batch b (0-based) of nb in epoch `epoch` (0-based) of `epochs`: never
 * wider than columns - 1 (a line that fills the last column makes some terminals wrap, and each redraw would then
 * start a new line). The bar shrinks first, then the statistics are cut. label: "" or "[fp16] ". */
void mpt_progress_line(char *out, size_t cap, int columns, const char *label, int64_t epoch, int epochs, int64_t b,
                       int64_t nb, float loss, float scale, int skipped);

/* Redraws the line in place ("\r", erase to the end of the line) at the terminal's width, and flushes stdout. */
void mpt_progress_draw(const char *label, int64_t epoch, int epochs, int64_t b, int64_t nb, float loss, float scale,
                       int skipped);

#endif
