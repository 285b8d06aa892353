/*
 * datasets/idx.c - IDX reader/writer (raw or gzip) and the four-file MNIST loader.
 * Format and checks: datasets/idx.h (from LeCun's MNIST page).
 *
 * Reading: the file is read with stdio; if it starts with the gzip magic 1f 8b it is decompressed with
 * zlib's inflate (windowBits 15 + 16: gzip wrapper, whose CRC32 and length trailer inflate verifies), else
 * read as is. zlib's gzread is not used for reading: it returns 0, not -1, at a truncated .gz, and when the
 * caller asks for exactly the bytes that remain it does not notice a missing gzip trailer at all (the next
 * gzread just reports end of file). Here the end of data is clean only when inflate has returned
 * Z_STREAM_END for every member and the file has no bytes left; anything else is "truncated gzip file" or
 * "corrupt gzip data". Concatenated gzip members (gzip's multi-member format) are read in sequence.
 *
 * The payload buffer grows as bytes actually arrive (doubling, capped at the header's size), so a header
 * that claims gigabytes on a small file costs no more memory than the file holds.
 */
#include "datasets/idx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_TYPE_U8 0x08
#define IDX_CHUNK ((int64_t)1 << 20)     /* initial payload buffer and largest single read */
#define IDX_IN_BUF (1 << 16)             /* compressed input buffer */
#define IDX_TRAILING_COUNT_CAP ((int64_t)1 << 20)

static const char *idx_role(int ndim) {
    return ndim == 3 || ndim == 4 ? "images" : ndim == 1 ? "labels" : "matrix";
}

static const char *idx_type_name(int t) {
    switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    case 0x0E: return "double";
    default: return "unknown";
    }
}

/* A byte source: a plain file or a gzip stream over it. */
typedef struct idx_src {
    const char *path;
    FILE *f;
    int gz;              /* gzip-compressed */
    int zinit;           /* inflate initialised */
    int member_end;      /* inflate returned Z_STREAM_END for the current member */
    int file_eof;        /* fread returned 0 */
    int64_t out_total;   /* decompressed bytes delivered so far */
    z_stream zs;
    uint8_t in[IDX_IN_BUF];
    size_t in_len, in_pos; /* raw mode: buffered bytes in[in_pos, in_len) */
} idx_src;

/* Refills the input buffer (gzip mode: zs.next_in/avail_in). Returns MPT_OK; sets file_eof at end of file. */
static mpt_status src_fill(idx_src *s) {
    size_t r = fread(s->in, 1, sizeof s->in, s->f);
    if (r == 0) {
        if (ferror(s->f)) return mpt_errorf(MPT_ERR_IO, "%s: read failed: %s", s->path, strerror(errno));
        s->file_eof = 1;
    }
    if (s->gz) {
        s->zs.next_in = s->in;
        s->zs.avail_in = (uInt)r;
    } else {
        s->in_pos = 0;
        s->in_len = r;
    }
    return MPT_OK;
}

/* What a file that is not a regular file is, for the error message. */
static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" :
           S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* Opens path for reading without blocking (a FIFO must not hang the open) and accepts a regular file only. */
static mpt_status open_regular(const char *path, FILE **out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ELOOP) return mpt_errorf(MPT_ERR_IO, "%s: cannot open: a symbolic link loop", path);
        return mpt_errorf(MPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    int fl = -1;
    const char *fail = fstat(fd, &sb) != 0 ? "stat" : NULL;
    if (!fail && !S_ISREG(sb.st_mode)) {
        close(fd);
        return mpt_errorf(MPT_ERR_IO, "%s: expected an IDX file, found %s", path, file_kind(sb.st_mode));
    }
    if (!fail && ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) fail = "fcntl";
    if (!fail && !(*out = fdopen(fd, "rb"))) fail = "fdopen";
    if (fail) {
        mpt_status st = mpt_errorf(MPT_ERR_IO, "%s: %s failed: %s", path, fail, strerror(errno));
        close(fd);
        return st;
    }
    return MPT_OK;
}

static mpt_status src_open(idx_src *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    MPT_TRY(open_regular(path, &s->f));
    MPT_TRY(src_fill(s));
    if (s->in_len >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b) {
        s->gz = 1;
        s->zs.next_in = s->in;
        s->zs.avail_in = (uInt)s->in_len;
        if (inflateInit2(&s->zs, 15 + 16) != Z_OK)
            return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot initialise zlib inflate", path);
        s->zinit = 1;
    }
    return MPT_OK;
}

static void src_close(idx_src *s) {
    if (s->zinit) inflateEnd(&s->zs);
    if (s->f) fclose(s->f);
    s->f = NULL;
    s->zinit = 0;
}

/* Reads up to n bytes into dst; *got = bytes read. Returns MPT_OK, with *got < n only at a clean end of the
 * data; errors: MPT_ERR_IO (read failure), MPT_ERR_FORMAT (corrupt or truncated gzip data). */
static mpt_status idx_read(idx_src *s, uint8_t *dst, int64_t n, int64_t *got) {
    *got = 0;
    if (!s->gz) {
        while (*got < n) {
            if (s->in_pos == s->in_len) {
                if (s->file_eof) break;
                MPT_TRY(src_fill(s));
                continue;
            }
            size_t k = s->in_len - s->in_pos;
            if ((int64_t)k > n - *got) k = (size_t)(n - *got);
            memcpy(dst + *got, s->in + s->in_pos, k);
            s->in_pos += k;
            *got += (int64_t)k;
        }
        return MPT_OK;
    }
    while (*got < n) {
        if (s->member_end) {
            /* After a member: the end of the file, or another gzip member. */
            if (s->zs.avail_in == 0 && !s->file_eof) MPT_TRY(src_fill(s));
            if (s->zs.avail_in == 0) break;
            if (s->zs.next_in[0] != 0x1f)
                return mpt_errorf(MPT_ERR_FORMAT, "%s: corrupt gzip data: %u unexpected bytes after the end of the "
                                  "gzip stream", s->path, s->zs.avail_in);
            if (inflateReset(&s->zs) != Z_OK)
                return mpt_errorf(MPT_ERR_FORMAT, "%s: corrupt gzip data (inflateReset failed)", s->path);
            s->member_end = 0;
        }
        if (s->zs.avail_in == 0) {
            if (!s->file_eof) MPT_TRY(src_fill(s));
            if (s->zs.avail_in == 0)
                return mpt_errorf(MPT_ERR_FORMAT, "%s: truncated gzip file: the compressed data ends before the gzip "
                                  "stream does (after %lld decompressed bytes)", s->path,
                                  (long long)(s->out_total + *got));
        }
        int64_t want = n - *got;
        if (want > IDX_CHUNK) want = IDX_CHUNK;
        s->zs.next_out = dst + *got;
        s->zs.avail_out = (uInt)want;
        int ret = inflate(&s->zs, Z_NO_FLUSH);
        *got += want - (int64_t)s->zs.avail_out;
        if (ret == Z_STREAM_END) {
            s->member_end = 1;
        } else if (ret == Z_BUF_ERROR) {
            /* No progress possible: needs more input (handled above on the next turn). */
            if (s->zs.avail_in != 0 && s->zs.avail_out != 0)
                return mpt_errorf(MPT_ERR_FORMAT, "%s: corrupt gzip data (inflate made no progress)", s->path);
        } else if (ret != Z_OK) {
            const char *msg = s->zs.msg ? s->zs.msg : ret == Z_MEM_ERROR ? "out of memory" : "zlib error";
            return mpt_errorf(ret == Z_MEM_ERROR ? MPT_ERR_NOMEM : MPT_ERR_FORMAT,
                              "%s: corrupt gzip data (%s) after %lld decompressed bytes", s->path, msg,
                              (long long)(s->out_total + *got));
        }
    }
    s->out_total += *got;
    return MPT_OK;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Reads and validates the header: out->ndim, dims (unused ones 1) and nbytes; no data. */
static mpt_status idx_read_header(idx_src *gz, const char *path, int expect_ndim, mpt_idx *out) {
    uint8_t hdr[4 + 4 * MPT_IDX_MAX_DIMS];
    int64_t got = 0;
    MPT_TRY(idx_read(gz, hdr, 4, &got));
    if (got == 0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: empty file, expected an IDX header (magic 00 00 08 0N)", path);
    if (got < 4)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: file of %lld bytes is too short for the 4-byte IDX magic", path,
                          (long long)got);
    if (hdr[0] != 0 || hdr[1] != 0)
        return mpt_errorf(MPT_ERR_FORMAT,
                          "%s: bad IDX magic: expected 00 00 08 0%d, found %02x %02x %02x %02x (not an IDX file)",
                          path, expect_ndim ? expect_ndim : 1, hdr[0], hdr[1], hdr[2], hdr[3]);
    if (hdr[2] != IDX_TYPE_U8)
        return mpt_errorf(MPT_ERR_FORMAT,
                          "%s: unsupported IDX element type: expected 0x08 (unsigned byte), found 0x%02x (%s)", path,
                          hdr[2], idx_type_name(hdr[2]));
    int ndim = hdr[3];
    if (ndim < 1 || ndim > MPT_IDX_MAX_DIMS)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: bad IDX dimension count: expected 1 to %d, found %d", path,
                          MPT_IDX_MAX_DIMS, ndim);
    if (expect_ndim == 3 && ndim != 3 && ndim != 4) /* images: [N, H, W], or rank 4 with channels */
        return mpt_errorf(MPT_ERR_FORMAT,
                          "%s: expected an IDX images file (ndim 3 or 4, magic 0x00000803 or 0x00000804), found an "
                          "IDX %s file (ndim %d, magic 0x0000080%d)", path, idx_role(ndim), ndim, ndim);
    if (expect_ndim && expect_ndim != 3 && ndim != expect_ndim)
        return mpt_errorf(MPT_ERR_FORMAT,
                          "%s: expected an IDX %s file (ndim %d, magic 0x0000080%d), found an IDX %s file "
                          "(ndim %d, magic 0x0000080%d)",
                          path, idx_role(expect_ndim), expect_ndim, expect_ndim, idx_role(ndim), ndim, ndim);
    MPT_TRY(idx_read(gz, hdr + 4, 4 * (int64_t)ndim, &got));
    if (got < 4 * ndim)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: header truncated: expected %d dimension sizes (%d bytes), found %lld bytes",
                          path, ndim, 4 * ndim, (long long)got);

    int64_t dims[MPT_IDX_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t total = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        total *= (uint64_t)dims[i]; /* total <= 2^32 before, dims < 2^32: no wraparound */
        if (total > (uint64_t)MPT_IDX_MAX_BYTES) {
            char shape[96];
            int len = 0;
            for (int k = 0; k < ndim; k++)
                len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%u", k ? " x " : "", be32(hdr + 4 + 4 * k));
            return mpt_errorf(MPT_ERR_FORMAT, "%s: IDX sizes %s exceed the %lld-byte limit (corrupt header?)", path,
                              shape, (long long)MPT_IDX_MAX_BYTES);
        }
    }
    out->ndim = ndim;
    memcpy(out->dims, dims, sizeof dims);
    out->nbytes = (int64_t)total;
    return MPT_OK;
}

/* Reads the payload of out->nbytes bytes (the header has been read) and checks that nothing follows; with items >= 0
 * and fewer than the header's, only the first `items` items (out's dims[0] and nbytes become theirs) and nothing
 * after them is read. */
static mpt_status idx_read_payload(idx_src *gz, const char *path, int64_t items, mpt_idx *out) {
    int whole = items < 0 || items >= out->dims[0];
    if (!whole) {
        out->nbytes = out->nbytes / out->dims[0] * items;
        out->dims[0] = items;
    }
    int64_t nbytes = out->nbytes, got = 0;
    /* Payload: grow the buffer as bytes arrive. */
    int64_t cap = nbytes < IDX_CHUNK ? nbytes : IDX_CHUNK;
    uint8_t *buf = malloc(cap > 0 ? (size_t)cap : 1);
    if (!buf) return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate %lld bytes", path, (long long)cap);
    int64_t have = 0;
    for (;;) {
        mpt_status st = idx_read(gz, buf + have, cap - have, &got);
        if (st != MPT_OK) {
            free(buf);
            return st;
        }
        have += got;
        if (have < cap || have == nbytes) break;
        int64_t ncap = cap * 2 > nbytes ? nbytes : cap * 2;
        uint8_t *nb = realloc(buf, (size_t)ncap);
        if (!nb) {
            free(buf);
            return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate %lld bytes", path, (long long)ncap);
        }
        buf = nb;
        cap = ncap;
    }
    if (have < nbytes) {
        free(buf);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: payload too short: the header's sizes need %lld data bytes, found %lld",
                          path, (long long)nbytes, (long long)have);
    }
    if (!whole) { /* the items used are in; the rest of the file is not read */
        out->data = buf;
        return MPT_OK;
    }
    /* Nothing may follow the payload. */
    uint8_t tail[4096];
    int64_t extra = 0;
    for (;;) {
        mpt_status st = idx_read(gz, tail, sizeof tail, &got);
        if (st != MPT_OK) {
            free(buf);
            return st;
        }
        extra += got;
        if (got < (int64_t)sizeof tail || extra > IDX_TRAILING_COUNT_CAP) break;
    }
    if (extra > 0) {
        free(buf);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: %s%lld trailing bytes after the %lld data bytes the header's sizes give",
                          path, extra > IDX_TRAILING_COUNT_CAP ? "more than " : "",
                          (long long)(extra > IDX_TRAILING_COUNT_CAP ? IDX_TRAILING_COUNT_CAP : extra),
                          (long long)nbytes);
    }
    out->data = buf;
    return MPT_OK;
}

/* Opens path, reads and checks its header and, with payload, its data (its first `items` items, all when < 0); on
 * failure out is left zeroed. */
static mpt_status idx_read_file(const char *path, int expect_ndim, int payload, int64_t items, mpt_idx *out) {
    MPT_ASSERT(out != NULL && path != NULL);
    MPT_ASSERT(expect_ndim >= 0 && expect_ndim <= MPT_IDX_MAX_DIMS);
    memset(out, 0, sizeof *out);
    idx_src *src = malloc(sizeof *src);
    if (!src) return mpt_errorf(MPT_ERR_NOMEM, "%s: out of memory", path);
    mpt_status st = src_open(src, path);
    if (st == MPT_OK) st = idx_read_header(src, path, expect_ndim, out);
    if (st == MPT_OK && payload) st = idx_read_payload(src, path, items, out);
    src_close(src);
    free(src);
    if (st != MPT_OK) memset(out, 0, sizeof *out);
    return st;
}

mpt_status mpt_idx_load(const char *path, int expect_ndim, mpt_idx *out) {
    return idx_read_file(path, expect_ndim, 1, -1, out);
}

mpt_status mpt_idx_load_first(const char *path, int expect_ndim, int64_t items, mpt_idx *out) {
    return idx_read_file(path, expect_ndim, 1, items, out);
}

mpt_status mpt_idx_read_header(const char *path, int expect_ndim, mpt_idx *out) {
    return idx_read_file(path, expect_ndim, 0, -1, out);
}

void mpt_idx_free(mpt_idx *x) {
    if (!x) return;
    free(x->data);
    memset(x, 0, sizeof *x);
}

mpt_status mpt_idx_save(const char *path, const mpt_idx *x, int gzip) {
    MPT_ASSERT(x && x->ndim >= 1 && x->ndim <= MPT_IDX_MAX_DIMS);
    int64_t n = 1;
    uint8_t hdr[4 + 4 * MPT_IDX_MAX_DIMS] = {0, 0, IDX_TYPE_U8, (uint8_t)x->ndim};
    for (int i = 0; i < x->ndim; i++) {
        MPT_ASSERT(x->dims[i] >= 0 && x->dims[i] <= UINT32_MAX);
        uint32_t d = (uint32_t)x->dims[i];
        hdr[4 + 4 * i] = (uint8_t)(d >> 24);
        hdr[5 + 4 * i] = (uint8_t)(d >> 16);
        hdr[6 + 4 * i] = (uint8_t)(d >> 8);
        hdr[7 + 4 * i] = (uint8_t)d;
        n *= x->dims[i];
    }
    MPT_ASSERT(n == x->nbytes);
    errno = 0;
    gzFile gz = gzopen(path, gzip ? "wb6" : "wbT");
    if (!gz) return mpt_errorf(MPT_ERR_IO, "%s: cannot create: %s", path, errno ? strerror(errno) : "zlib error");
    int ok = gzwrite(gz, hdr, (unsigned)(4 + 4 * x->ndim)) == 4 + 4 * x->ndim;
    for (int64_t off = 0; ok && off < n; off += IDX_CHUNK) {
        unsigned len = (unsigned)(n - off < IDX_CHUNK ? n - off : IDX_CHUNK);
        ok = gzwrite(gz, x->data + off, len) == (int)len;
    }
    int zerr = Z_OK;
    const char *msg = ok ? NULL : gzerror(gz, &zerr);
    int saved_errno = errno;
    int close_rc = gzclose(gz);
    if (!ok || close_rc != Z_OK) {
        const char *why = (zerr == Z_ERRNO || close_rc == Z_ERRNO) ? strerror(saved_errno ? saved_errno : errno)
                          : msg                                    ? msg
                                                                   : "zlib error on close";
        return mpt_errorf(MPT_ERR_IO, "%s: write failed: %s", path, why);
    }
    return MPT_OK;
}

/* ---- the four-file dataset ---------------------------------------------------------------------- */

static const char *const mnist_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

/* Whether p names something (0 only for ENOENT/ENOTDIR: the name is free to try with .gz); anything else
 * there, readable or not, is what the loader opens and reports on. */
static int name_taken(const char *p) {
    struct stat sb;
    if (lstat(p, &sb) != 0) return errno != ENOENT && errno != ENOTDIR;
    return 1;
}

const char *mpt_idx_layout_name(mpt_idx_layout l) { return l == MPT_IDX_LAYOUT_NHWC ? "nhwc" : "nchw"; }

int mpt_idx_layout_parse(const char *s, mpt_idx_layout *out) {
    if (strcmp(s, "nchw") == 0) *out = MPT_IDX_LAYOUT_NCHW;
    else if (strcmp(s, "nhwc") == 0) *out = MPT_IDX_LAYOUT_NHWC;
    else return -1;
    return 0;
}

/* An images file's header as channels, rows, cols (rank 3: one channel; rank 4 in the given layout). */
static void image_shape(const mpt_idx *h, mpt_idx_layout layout, int64_t *c, int64_t *r, int64_t *w) {
    if (h->ndim == 3) {
        *c = 1, *r = h->dims[1], *w = h->dims[2];
    } else if (layout == MPT_IDX_LAYOUT_NHWC) {
        *r = h->dims[1], *w = h->dims[2], *c = h->dims[3];
    } else {
        *c = h->dims[1], *r = h->dims[2], *w = h->dims[3];
    }
}

/* "28 x 28" or "32 x 32 x 3 (channels C, layout)" for messages. */
static const char *shape_text(char *buf, size_t len, int64_t c, int64_t r, int64_t w) {
    if (c == 1) snprintf(buf, len, "%lld x %lld", (long long)r, (long long)w);
    else snprintf(buf, len, "%lld x %lld with %lld channels", (long long)r, (long long)w, (long long)c);
    return buf;
}

/* Checks the four headers against each other before any payload is read: each images file has as many
 * items as its labels file, at least one, of at least 1 x 1 pixels (rows x cols when given) and one channel, at most
 * INT32_MAX of each (the network's shapes are int), the same size in train and test. A header claiming gigabytes is
 * thus rejected before a byte of its payload is inflated. */
static mpt_status mnist_check_headers(char paths[4][4096], const mpt_idx *h, const mpt_mnist_opts *o) {
    int64_t shp[2][3];
    char a[96], b[96];
    for (int part = 0; part < 2; part++) {
        const mpt_idx *im = &h[2 * part], *lb = &h[2 * part + 1];
        const char *ip = paths[2 * part], *lp = paths[2 * part + 1];
        if (im->dims[0] != lb->dims[0])
            return mpt_errorf(MPT_ERR_FORMAT, "%s has %lld images but %s has %lld labels; expected equal counts", ip,
                              (long long)im->dims[0], lp, (long long)lb->dims[0]);
        if (im->dims[0] == 0) return mpt_errorf(MPT_ERR_FORMAT, "%s: expected at least one image, found 0", ip);
        int64_t *s = shp[part];
        image_shape(im, o->layout, &s[0], &s[1], &s[2]);
        if (s[0] == 0 || s[1] == 0 || s[2] == 0)
            return mpt_errorf(MPT_ERR_FORMAT, "%s: expected images of at least 1 x 1 pixels and 1 channel, found %s%s",
                              ip, shape_text(a, sizeof a, s[0], s[1], s[2]),
                              s[0] == 0 ? " (0 channels)" : "");
        if (s[0] > INT32_MAX || s[1] > INT32_MAX || s[2] > INT32_MAX)
            return mpt_errorf(MPT_ERR_FORMAT, "%s: images of %s are too large (at most %d pixels a side and %d channels)",
                              ip, shape_text(a, sizeof a, s[0], s[1], s[2]), INT32_MAX, INT32_MAX);
        if (o->rows > 0 && (s[1] != o->rows || s[2] != o->cols))
            return mpt_errorf(MPT_ERR_SHAPE, "%s: images are %lld x %lld, expected %d x %d", ip, (long long)s[1],
                              (long long)s[2], o->rows, o->cols);
    }
    if (shp[0][0] != shp[1][0] || shp[0][1] != shp[1][1] || shp[0][2] != shp[1][2])
        return mpt_errorf(MPT_ERR_FORMAT, "%s has %s images but %s has %s; expected the same size", paths[0],
                          shape_text(a, sizeof a, shp[0][0], shp[0][1], shp[0][2]), paths[2],
                          shape_text(b, sizeof b, shp[1][0], shp[1][1], shp[1][2]));
    return MPT_OK;
}

/* The class count and the labels' check: K = opts' count or the largest training label + 1 (at least 2); every
 * label of both files below K. A test label at or above a K taken from the training labels names both files. */
static mpt_status mnist_check_labels(char paths[4][4096], const mpt_idx *f, int given, int *K) {
    const mpt_idx *tr = &f[1], *te = &f[3];
    int max_train = 0;
    for (int64_t i = 0; i < tr->nbytes; i++)
        if (tr->data[i] > max_train) max_train = tr->data[i];
    if (given) {
        *K = given;
        for (int part = 0; part < 2; part++) {
            const mpt_idx *lab = &f[2 * part + 1];
            for (int64_t i = 0; i < lab->nbytes; i++)
                if (lab->data[i] >= given)
                    return mpt_errorf(MPT_ERR_FORMAT, "%s: label %d at item %lld is outside [0, %d), the class count "
                                      "asked for", paths[2 * part + 1], lab->data[i], (long long)i, given);
        }
        return MPT_OK;
    }
    *K = max_train + 1;
    if (*K < 2)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: every label is 0, expected at least 2 classes (labels 0..K-1; or give "
                          "the class count: mptrain --classes K)", paths[1]);
    for (int64_t i = 0; i < te->nbytes; i++)
        if (te->data[i] >= *K)
            return mpt_errorf(MPT_ERR_FORMAT, "%s: label %d at item %lld is outside [0, %d), the classes of %s (its "
                              "largest label is %d); if the training set lacks a class, give the class count (mptrain "
                              "--classes %d)", paths[3], te->data[i], (long long)i, *K, paths[1], max_train,
                              te->data[i] + 1);
    return MPT_OK;
}

/* Rewrites n images of [H, W, C] as [C, H, W] in place (tmp: H W C bytes). */
static void nhwc_to_nchw(uint8_t *data, int64_t n, int64_t C, int64_t H, int64_t W, uint8_t *tmp) {
    const int64_t per = C * H * W;
    for (int64_t i = 0; i < n; i++) {
        uint8_t *img = data + i * per;
        memcpy(tmp, img, (size_t)per);
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < H * W; p++) img[c * H * W + p] = tmp[p * C + c];
    }
}

/* Bytes this process can still allocate: the smaller of MemAvailable (/proc/meminfo: free memory plus the
 * reclaimable cache, what a new allocation can get without swapping) and the room under an address-space or
 * data-segment limit; -1 when neither is known. */
static int64_t memory_available(void) {
    int64_t avail = -1;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) avail = (int64_t)kb * 1024;
        fclose(f);
    }
    struct rlimit rl;
    int res[2] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++)
        if (getrlimit(res[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (avail < 0 || (int64_t)rl.rlim_cur < avail))
            avail = (int64_t)rl.rlim_cur; /* the process's own use under the limit is small beside a dataset's */
    return avail;
}

mpt_status mpt_mnist_load_opts(const char *dir, const mpt_mnist_opts *opts, mpt_mnist *out) {
    static const mpt_mnist_opts defaults = {0};
    const mpt_mnist_opts *o = opts ? opts : &defaults;
    MPT_ASSERT(dir && out && o->rows >= 0 && o->cols >= 0 && (o->rows > 0) == (o->cols > 0));
    MPT_ASSERT(o->n_classes == 0 || (o->n_classes >= 2 && o->n_classes <= MPT_MNIST_MAX_CLASSES));
    MPT_ASSERT(o->limit_train >= 0 && o->limit_test >= 0);
    memset(out, 0, sizeof *out);
    struct stat sb;
    int stat_rc = stat(dir, &sb);
    if (stat_rc != 0 || !S_ISDIR(sb.st_mode))
        return mpt_errorf(MPT_ERR_IO, "%s: dataset directory not found (%s); expected a directory with %s, %s, %s, %s "
                          "(each optionally .gz)", dir, stat_rc != 0 ? strerror(errno) : "not a directory",
                          mnist_names[0], mnist_names[1], mnist_names[2], mnist_names[3]);
    char paths[4][4096];
    char missing[1024] = "";
    size_t mlen = 0;
    int n_missing = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s", dir, mnist_names[i]);
        if (name_taken(paths[i])) continue;
        snprintf(paths[i], sizeof paths[i], "%s/%s.gz", dir, mnist_names[i]);
        if (name_taken(paths[i])) continue;
        mlen += (size_t)snprintf(missing + mlen, sizeof missing - mlen, "%s%s[.gz]", n_missing ? ", " : "",
                                 mnist_names[i]);
        n_missing++;
    }
    if (n_missing)
        return mpt_errorf(MPT_ERR_IO, "%s: missing dataset file%s %s (expected the four MNIST-format IDX files)", dir,
                          n_missing > 1 ? "s" : "", missing);

    mpt_idx f[4] = {{0}};
    mpt_status st = MPT_OK;
    for (int i = 0; i < 4 && st == MPT_OK; i++) st = mpt_idx_read_header(paths[i], (i % 2 == 0) ? 3 : 1, &f[i]);
    if (st == MPT_OK) st = mnist_check_headers(paths, f, o);
    /* only the items used are read; what they need must fit in memory, checked before anything is allocated */
    int64_t use[4], need = 0;
    for (int i = 0; i < 4; i++) {
        int64_t limit = i < 2 ? o->limit_train : o->limit_test;
        use[i] = limit > 0 && limit < f[i].dims[0] ? limit : f[i].dims[0];
        need += st == MPT_OK && f[i].dims[0] > 0 ? f[i].nbytes / f[i].dims[0] * use[i] : 0;
    }
    int64_t avail = st == MPT_OK ? memory_available() : -1;
    if (st == MPT_OK && avail >= 0 && need > avail)
        st = mpt_errorf(MPT_ERR_NOMEM, "%s: the dataset needs %.2f GiB in memory (%lld training and %lld test images of "
                        "%lld bytes, as %s declares), more than the %.2f GiB this process can allocate (MemAvailable, "
                        "ulimit -v / -d): use --limit-train / --limit-test to load fewer", dir,
                        (double)need / 1073741824.0, (long long)use[0], (long long)use[2],
                        (long long)(f[0].dims[0] > 0 ? f[0].nbytes / f[0].dims[0] : 0), paths[0],
                        (double)avail / 1073741824.0);
    for (int i = 0; i < 4 && st == MPT_OK; i++) {
        int64_t claimed[MPT_IDX_MAX_DIMS];
        memcpy(claimed, f[i].dims, sizeof claimed);
        st = mpt_idx_load_first(paths[i], (i % 2 == 0) ? 3 : 1, use[i], &f[i]);
        claimed[0] = use[i];
        if (st == MPT_OK && memcmp(claimed, f[i].dims, sizeof claimed) != 0)
            st = mpt_errorf(MPT_ERR_IO, "%s: the file changed while the dataset was loading", paths[i]);
    }
    int K = 0;
    if (st == MPT_OK) st = mnist_check_labels(paths, f, o->n_classes, &K);
    int64_t C = 1, H = 1, W = 1;
    if (st == MPT_OK) image_shape(&f[0], o->layout, &C, &H, &W);
    if (st == MPT_OK && f[0].ndim == 4 && o->layout == MPT_IDX_LAYOUT_NHWC && C > 1) {
        uint8_t *tmp = malloc((size_t)(C * H * W));
        if (!tmp) st = mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate %lld bytes", dir, (long long)(C * H * W));
        for (int part = 0; part < 2 && st == MPT_OK; part++) nhwc_to_nchw(f[2 * part].data, f[2 * part].dims[0], C, H, W, tmp);
        free(tmp);
    }
    if (st != MPT_OK) {
        for (int i = 0; i < 4; i++) mpt_idx_free(&f[i]);
        return st;
    }
    out->train_images = f[0].data;
    out->train_labels = f[1].data;
    out->test_images = f[2].data;
    out->test_labels = f[3].data;
    out->n_train = f[0].dims[0];
    out->n_test = f[2].dims[0];
    out->channels = (int)C;
    out->image_ndim = f[0].ndim;
    out->rows = (int)H;
    out->cols = (int)W;
    out->dim = C * H * W;
    out->n_classes = K;
    return MPT_OK;
}

mpt_status mpt_mnist_load_shape(const char *dir, int rows, int cols, mpt_mnist *out) {
    mpt_mnist_opts o = {.rows = rows, .cols = cols};
    return mpt_mnist_load_opts(dir, &o, out);
}

mpt_status mpt_mnist_load(const char *dir, mpt_mnist *out) { return mpt_mnist_load_opts(dir, NULL, out); }

mpt_status mpt_mnist_load_limited(const char *dir, int rows, int cols, int64_t limit_train, int64_t limit_test,
                                  mpt_mnist *out) {
    MPT_ASSERT(limit_train >= 0 && limit_test >= 0);
    mpt_mnist_opts o = {.rows = rows, .cols = cols, .limit_train = limit_train, .limit_test = limit_test};
    return mpt_mnist_load_opts(dir, &o, out);
}

mpt_status mpt_mnist_save_layout(const char *dir, const mpt_mnist *d, int gzip, mpt_idx_layout layout) {
    const int C = d->channels > 0 ? d->channels : 1;
    MPT_ASSERT(dir && d && d->dim == (int64_t)C * d->rows * d->cols);
    const uint8_t *data[4] = {d->train_images, d->train_labels, d->test_images, d->test_labels};
    for (int i = 0; i < 4; i++) {
        int64_t n = i < 2 ? d->n_train : d->n_test;
        mpt_idx x = {.ndim = (i % 2 == 0) ? (C > 1 ? 4 : 3) : 1, .dims = {n, 1, 1, 1}, .data = (uint8_t *)data[i]};
        uint8_t *hwc = NULL;
        if (x.ndim == 3) {
            x.dims[1] = d->rows;
            x.dims[2] = d->cols;
        } else if (x.ndim == 4 && layout == MPT_IDX_LAYOUT_NCHW) {
            x.dims[1] = C, x.dims[2] = d->rows, x.dims[3] = d->cols;
        } else if (x.ndim == 4) { /* channels last: a transposed copy */
            x.dims[1] = d->rows, x.dims[2] = d->cols, x.dims[3] = C;
            const int64_t hw = (int64_t)d->rows * d->cols;
            hwc = malloc((size_t)(n * d->dim));
            if (!hwc) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %lld bytes", (long long)(n * d->dim));
            for (int64_t k = 0; k < n; k++)
                for (int64_t c = 0; c < C; c++)
                    for (int64_t p = 0; p < hw; p++) hwc[k * d->dim + p * C + c] = data[i][k * d->dim + c * hw + p];
            x.data = hwc;
        }
        x.nbytes = x.dims[0] * x.dims[1] * x.dims[2] * x.dims[3];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s%s", dir, mnist_names[i], gzip ? ".gz" : "");
        mpt_status s = mpt_idx_save(path, &x, gzip);
        free(hwc);
        MPT_TRY(s);
    }
    return MPT_OK;
}

mpt_status mpt_mnist_save(const char *dir, const mpt_mnist *d, int gzip) {
    return mpt_mnist_save_layout(dir, d, gzip, MPT_IDX_LAYOUT_NCHW);
}

void mpt_mnist_free(mpt_mnist *d) {
    if (!d) return;
    free(d->train_images);
    free(d->train_labels);
    free(d->test_images);
    free(d->test_labels);
    memset(d, 0, sizeof *d);
}
