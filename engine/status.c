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

/* Copies the escaped message e (len bytes) into the message buffer, which holds cap - 1. One that does not fit keeps
 * its words and its end (the reason comes last: "--out PATH: not a directory"): the middle of its longest word, most
 * often a path the user gave, becomes "[...N bytes...]"; only when no word is long enough is the message's own middle
 * cut. A cut never splits a UTF-8 sequence. */
static void store_fitted(char *dst, size_t cap, const char *e, size_t len) {
    if (len < cap) {
        memcpy(dst, e, len + 1);
        return;
    }
    size_t best = 0, best_len = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && e[j] != ' ') j++;
        if (j - i > best_len) best = i, best_len = j - i;
        i = j + 1;
    }
    char marker[48];
    size_t excess = len - (cap - 1) + 40; /* 40 >= the marker's length */
    size_t from, to;                      /* e[from, to) is left out */
    if (best_len >= excess + 80) {        /* 40 bytes of the word kept on each side at least */
        from = best + (best_len - excess) / 2;
    } else {
        from = (len - excess) / 2;
        if (from > cap / 2) from = cap / 2;
    }
    to = from + excess;
    while (from > 0 && ((unsigned char)e[from] & 0xc0) == 0x80) from--; /* not inside a UTF-8 sequence */
    while (to < len && ((unsigned char)e[to] & 0xc0) == 0x80) to++;
    int m = snprintf(marker, sizeof marker, "[...%zu bytes...]", to - from);
    size_t tail = len - to;
    if (from + (size_t)m + tail >= cap) tail = cap - 1 - from - (size_t)m; /* cannot happen: excess covers it */
    memcpy(dst, e, from);
    memcpy(dst + from, marker, (size_t)m);
    memcpy(dst + from + m, e + len - tail, tail);
    dst[from + (size_t)m + tail] = '\0';
}

mpt_status mpt_errorf(mpt_status code, const char *fmt, ...) {
    /* formatted apart: callers may pass mpt_last_error() as an argument; whole, however long (a path of 4 KiB), then
     * escaped and fitted */
    char small[sizeof mpt_err_msg];
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    char *raw = small, *esc = NULL;
    if (n >= (int)sizeof small && (raw = malloc((size_t)n + 1)) != NULL) vsnprintf(raw, (size_t)n + 1, fmt, ap2);
    else raw = small; /* fits, or no memory for more: the first bytes */
    va_end(ap2);
    size_t rl = strlen(raw), cap = 4 * rl + 1;
    esc = rl >= sizeof small ? malloc(cap) : NULL;
    if (esc) {
        mpt_escape(esc, cap, raw);
        store_fitted(mpt_err_msg, sizeof mpt_err_msg, esc, strlen(esc));
    } else {
        mpt_escape(mpt_err_msg, sizeof mpt_err_msg, raw);
    }
    free(esc);
    if (raw != small) free(raw);
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
