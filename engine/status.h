/*
 * engine/status.h - recoverable errors and programmer-error checks.
 *
 * Recoverable conditions (a bad file, a bad flag, a corrupt checkpoint, non-finite data) are reported by
 * returning an mpt_status other than MPT_OK; the function that detects the problem also records a one-line
 * message that names the file or flag, what was expected and what was found: mpt_errorf() stores it and
 * returns the status, so the idiom is
 *     if (magic != 0x0803) return mpt_errorf(MPT_ERR_FORMAT, "%s: expected IDX magic 0x00000803, found 0x%08x", path, magic);
 * and the caller prints mpt_last_error(). The message is per thread, and always one line of printable text:
 * mpt_errorf() escapes (mpt_escape) every control byte and every byte that is not part of valid UTF-8, so a
 * file name or a string read from a file (a tensor name holding terminal escape sequences or a newline)
 * cannot forge output lines.
 *
 * Programmer errors (a shape mismatch between layers, a dtype a kernel does not take) abort through
 * MPT_ASSERT, which prints the condition as text with file and line. Library calls are checked with the
 * per-library macros (MPT_CUDA_CHECK and friends in kernels/cuda), built on mpt_fatal().
 */
#ifndef MPT_ENGINE_STATUS_H
#define MPT_ENGINE_STATUS_H

#include <stddef.h>
#include <stdio.h>

#include "engine/api.h"

typedef enum mpt_status {
    MPT_OK = 0,
    MPT_ERR_IO,        /* open/read/write/rename/fsync failed (errno text in the message) */
    MPT_ERR_FORMAT,    /* a file's contents are not what its format requires */
    MPT_ERR_ARG,       /* a bad flag, option or argument value */
    MPT_ERR_SHAPE,     /* tensors or files whose shapes do not match the model */
    MPT_ERR_NOMEM,     /* an allocation (host or device) failed */
    MPT_ERR_NONFINITE, /* non-finite values where finite ones are required (weights, loss) */
    MPT_ERR_DEVICE,    /* no usable GPU, or a device-side failure that the caller can report */
    MPT_ERR_INTERRUPTED, /* a stop was asked for (SIGINT, SIGTERM): the work was saved and then stopped */
} mpt_status;

/* Records a printf-style message for the current thread and returns `code`. */
MPT_API mpt_status mpt_errorf(mpt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies src into dst (capacity cap >= 1, always NUL-terminated, truncated to fit) with every byte that a
 * terminal could act on written as \xNN: C0 controls (0x00-0x1f, newline and escape included), DEL (0x7f),
 * C1 controls (U+0080-U+009F) and bytes that are not part of well-formed UTF-8; a backslash itself is
 * written as \\. Printable ASCII and well-formed UTF-8 pass through. Returns dst. */
MPT_API char *mpt_escape(char *dst, size_t cap, const char *src);

/* The last message recorded by mpt_errorf() on this thread ("" if none). Valid until the next call. */
MPT_API const char *mpt_last_error(void);

/* Short name of a status ("ok", "io", "format", ...). */
MPT_API const char *mpt_status_name(mpt_status s);

/* Flushes stdout, prints "mptrain: fatal: <message> (file:line)" to stderr, flushes every open output stream
 * (fflush(NULL): abort() flushes none, and a block-buffered stdout would lose what the program printed before)
 * and aborts. For programmer errors and failed library calls only. */
MPT_API __attribute__((noreturn, format(printf, 3, 4))) void mpt_fatal(const char *file, int line, const char *fmt,
                                                                      ...);

#define MPT_ASSERT(cond)                                                                             \
    do {                                                                                             \
        if (!(cond)) mpt_fatal(__FILE__, __LINE__, "assertion failed: %s", #cond);                  \
    } while (0)

#define MPT_ASSERTF(cond, ...)                                                                       \
    do {                                                                                             \
        if (!(cond)) mpt_fatal(__FILE__, __LINE__, __VA_ARGS__);                                    \
    } while (0)

/* Propagates a non-OK status to the caller. */
#define MPT_TRY(expr)                                                                                \
    do {                                                                                             \
        mpt_status mpt_try_s_ = (expr);                                                              \
        if (mpt_try_s_ != MPT_OK) return mpt_try_s_;                                                 \
    } while (0)

#endif
