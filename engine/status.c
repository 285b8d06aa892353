/* engine/status.c - the per-thread error message behind mpt_errorf()/mpt_last_error(). */
#include "engine/status.h"

#include <stdarg.h>
#include <stdlib.h>

static _Thread_local char mpt_err_msg[1024];

mpt_status mpt_errorf(mpt_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mpt_err_msg, sizeof mpt_err_msg, fmt, ap);
    va_end(ap);
    return code;
}

const char *mpt_last_error(void) { return mpt_err_msg; }

const char *mpt_status_name(mpt_status s) {
    switch (s) {
    case MPT_OK: return "ok";
    case MPT_ERR_IO: return "io";
    case MPT_ERR_FORMAT: return "format";
    case MPT_ERR_ARG: return "argument";
    case MPT_ERR_SHAPE: return "shape";
    case MPT_ERR_NOMEM: return "out of memory";
    case MPT_ERR_NONFINITE: return "non-finite";
    case MPT_ERR_DEVICE: return "device";
    }
    return "unknown";
}

void mpt_fatal(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "mptrain: fatal: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s:%d)\n", file, line);
    fflush(stderr);
    abort();
}
