/* engine/status.c - the per-thread error message behind mpt_errorf()/mpt_last_error(), mpt_escape(), and mpt_fatal(). */
#include "engine/status.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char mpt_err_msg[1024];

/* Length of the well-formed UTF-8 sequence at p (at most n bytes available) encoding a code point >= U+00A0,
 * or 0 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_printable_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    if (len == 0 || len > n || c > 0xf4) return 0;
    uint32_t cp = c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0) return 0;
    return len;
}

char *mpt_escape(char *dst, size_t cap, const char *src) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)src;
    size_t n = strlen(src), o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t u = c >= 0x80 ? utf8_printable_len(s + i, n - i) : 0;
        char tmp[4];
        size_t k;
        const char *piece;
        if (u) {
            piece = (const char *)s + i;
            k = u;
        } else if (c >= 0x20 && c < 0x7f && c != '\\') {
            piece = (const char *)s + i;
            k = 1;
        } else if (c == '\\') {
            piece = "\\\\";
            k = 2;
        } else {
            tmp[0] = '\\', tmp[1] = 'x', tmp[2] = hex[c >> 4], tmp[3] = hex[c & 15];
            piece = tmp;
            k = 4;
        }
        if (o + k + 1 > cap) break;
        memcpy(dst + o, piece, k);
        o += k;
        i += u ? u : 1;
    }
    dst[o] = '\0';
    return dst;
}

mpt_status mpt_errorf(mpt_status code, const char *fmt, ...) {
    char raw[sizeof mpt_err_msg]; /* formatted apart: callers may pass mpt_last_error() as an argument */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    mpt_escape(mpt_err_msg, sizeof mpt_err_msg, raw);
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
    case MPT_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown";
}

void mpt_fatal(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    /* abort() flushes no stdio buffer: what the program printed before (a device line, a results table, the
     * TAP lines of earlier tests, all block-buffered when stdout is a pipe or a file) would be lost. stdout first,
     * so that a log merging both streams keeps the order; then every other open stream (fflush(NULL)). */
    fflush(stdout);
    fprintf(stderr, "mptrain: fatal: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s:%d)\n", file, line);
    fflush(NULL);
    abort();
}
