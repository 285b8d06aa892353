/*
 * engine/checkpoint.c - safetensors writer (atomic: a new temporary file created exclusively beside the
 * checkpoint, fsync, rename, fsync of the directory) and validating reader (jansson with JSON_REJECT_DUPLICATES,
 * exact 64-bit integers; zlib crc32 over the whole file but its own 8 digits).
 * Format and the list of checks: engine/checkpoint.h; format source: huggingface/safetensors README.
 */
#include "engine/checkpoint.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes host bytes as safetensors' little-endian data: port the byte order first"
#endif

#define CKPT_META_KEY "__metadata__"
#define CKPT_CRC_KEY "crc32"
#define CKPT_ALIGN 8
/* The header always starts with the checksum: its 8 hex digits are at byte CKPT_CRC_AT of the file. */
#define CKPT_CRC_PREFIX "{\"" CKPT_META_KEY "\":{\"" CKPT_CRC_KEY "\":\""
#define CKPT_CRC_AT (8 + sizeof CKPT_CRC_PREFIX - 1)

struct mpt_checkpoint {
    char *path;
    uint8_t *file;                /* the whole file */
    size_t file_size;
    const uint8_t *buf;           /* the data buffer: file + 8 + header length */
    size_t buf_size;
    int n;
    mpt_checkpoint_tensor *t;     /* [n] sorted by data offset; names and data point into owned memory */
    int64_t *begin;               /* [n] each tensor's offset in buf */
    int n_meta;
    char **keys, **values;        /* [n_meta] */
};

/* ---- dtypes ----------------------------------------------------------------------------------- */

static const char *ckpt_dtype_str(mpt_dtype d) {
    switch (d) {
    case MPT_DTYPE_F32: return "F32";
    case MPT_DTYPE_F16: return "F16";
    case MPT_DTYPE_BF16: return "BF16";
    case MPT_DTYPE_I32: return "I32";
    case MPT_DTYPE_U8: return "U8";
    default: return NULL;
    }
}

static int ckpt_dtype_parse(const char *s, mpt_dtype *d) {
    for (int i = 0; i < MPT_DTYPE_COUNT; i++) {
        const char *n = ckpt_dtype_str((mpt_dtype)i);
        if (n && strcmp(n, s) == 0) {
            *d = (mpt_dtype)i;
            return 1;
        }
    }
    return 0;
}

int64_t mpt_checkpoint_tensor_nbytes(const mpt_checkpoint_tensor *t) {
    if (!ckpt_dtype_str(t->dtype) || t->ndim < 0 || t->ndim > MPT_CHECKPOINT_MAX_DIMS) return -1;
    int64_t n = (int64_t)mpt_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n)) return -1;
    }
    return n;
}

/* "[256, 784]" */
static const char *ckpt_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
    return buf;
}

static uint32_t ckpt_crc(uint32_t crc, const uint8_t *p, size_t n) {
    while (n > 0) {
        uInt len = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, len);
        p += len;
        n -= len;
    }
    return crc;
}

/* ---- writer ----------------------------------------------------------------------------------- */

/* Validates the arguments and builds the header JSON (padded), with "crc32" the first key of "__metadata__" (the
 * first key of the header) holding 00000000 until mpt_checkpoint's writer knows the file's checksum. */
static mpt_status ckpt_build_header(const char *path, const mpt_checkpoint_tensor *t, int n,
                                    const mpt_checkpoint_meta *meta, int n_meta, char **hdr_out, size_t *hdr_len) {
    if (n < 0 || n_meta < 0 || (n > 0 && !t) || (n_meta > 0 && !meta))
        return mpt_errorf(MPT_ERR_ARG, "%s: bad tensor/metadata list (n %d, n_meta %d)", path, n, n_meta);
    int64_t off = 0;
    json_t *root = json_object(), *jm = json_object();
    if (!root || !jm) {
        json_decref(root), json_decref(jm);
        return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot build the checkpoint header", path);
    }
    mpt_status st = MPT_OK;
    if (json_object_set_new(jm, CKPT_CRC_KEY, json_string("00000000")) != 0)
        st = mpt_errorf(MPT_ERR_NOMEM, "%s: cannot build the checkpoint header", path);
    for (int i = 0; i < n_meta && st == MPT_OK; i++) {
        const char *k = meta[i].key, *v = meta[i].value;
        if (!k || !v || !*k)
            st = mpt_errorf(MPT_ERR_ARG, "%s: metadata entry %d: expected a non-empty key and a value", path, i);
        else if (strcmp(k, CKPT_CRC_KEY) == 0)
            st = mpt_errorf(MPT_ERR_ARG, "%s: metadata key \"%s\" is reserved for the writer's checksum", path, k);
        else if (json_object_get(jm, k))
            st = mpt_errorf(MPT_ERR_ARG, "%s: duplicate metadata key \"%s\"", path, k);
        else if (json_object_set_new(jm, k, json_string(v)) != 0)
            st = mpt_errorf(MPT_ERR_ARG, "%s: metadata \"%s\": key and value must be valid UTF-8", path, k);
    }
    if (st == MPT_OK && json_object_set(root, CKPT_META_KEY, jm) != 0)
        st = mpt_errorf(MPT_ERR_NOMEM, "%s: cannot build the checkpoint header", path);
    for (int i = 0; i < n && st == MPT_OK; i++) {
        const mpt_checkpoint_tensor *ti = &t[i];
        int64_t nb = mpt_checkpoint_tensor_nbytes(ti);
        if (!ti->name || !*ti->name || strcmp(ti->name, CKPT_META_KEY) == 0) {
            st = mpt_errorf(MPT_ERR_ARG, "%s: tensor %d: expected a non-empty name other than \"%s\"", path, i,
                            CKPT_META_KEY);
            break;
        }
        if (json_object_get(root, ti->name)) {
            st = mpt_errorf(MPT_ERR_ARG, "%s: duplicate tensor name \"%s\"", path, ti->name);
            break;
        }
        if (!ckpt_dtype_str(ti->dtype)) {
            st = mpt_errorf(MPT_ERR_ARG, "%s: tensor \"%s\": dtype %d cannot be saved (expected F32, F16, BF16, I32, U8)",
                            path, ti->name, (int)ti->dtype);
            break;
        }
        if (nb < 0 || (nb > 0 && !ti->data) || __builtin_add_overflow(off, nb, &(int64_t){0})) {
            st = mpt_errorf(MPT_ERR_ARG, "%s: tensor \"%s\": bad shape (ndim %d, negative or overflowing sizes) or no data",
                            path, ti->name, ti->ndim);
            break;
        }
        json_t *shape = json_array(), *offs = json_array(), *e = json_object();
        int bad = !shape || !offs || !e;
        for (int d = 0; d < ti->ndim && !bad; d++) bad = json_array_append_new(shape, json_integer(ti->shape[d])) != 0;
        bad = bad || json_array_append_new(offs, json_integer(off)) != 0 ||
              json_array_append_new(offs, json_integer(off + nb)) != 0 ||
              json_object_set_new(e, "dtype", json_string(ckpt_dtype_str(ti->dtype))) != 0 ||
              json_object_set(e, "shape", shape) != 0 || json_object_set(e, "data_offsets", offs) != 0;
        json_decref(shape);
        json_decref(offs);
        if (bad || json_object_set_new(root, ti->name, e) != 0) {
            if (bad) json_decref(e);
            st = mpt_errorf(MPT_ERR_ARG, "%s: tensor \"%s\": cannot add to the header (name not valid UTF-8?)", path,
                            ti->name);
            break;
        }
        off += nb;
    }
    char *js = st == MPT_OK ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(jm);
    json_decref(root);
    if (st != MPT_OK) return st;
    if (!js) return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot serialise the checkpoint header", path);
    size_t len = strlen(js);
    size_t padded = (8 + len + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN - 8;
    char *hdr = realloc(js, padded + 1);
    if (!hdr) {
        free(js);
        return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate the checkpoint header", path);
    }
    memset(hdr + len, ' ', padded - len);
    hdr[padded] = '\0';
    MPT_ASSERTF(strncmp(hdr, CKPT_CRC_PREFIX, sizeof CKPT_CRC_PREFIX - 1) == 0, "%s: header starts %.40s", path, hdr);
    *hdr_out = hdr;
    *hdr_len = padded;
    return MPT_OK;
}

static mpt_status ckpt_io_error(const char *what, const char *file) {
    return mpt_errorf(MPT_ERR_IO, "%s: %s failed: %s", file, what, strerror(errno));
}

/* A failed write names the checkpoint the user asked for, not its temporary file (which is removed), in the words of
 * the other outputs: "PATH: cannot write (fsync: Input/output error)". */
static mpt_status ckpt_write_error(const char *what, const char *file) {
    return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s: %s)", file, what, strerror(errno));
}

int mpt_checkpoint_create_temp(int dir_fd, const char *name, char *tmp_name, size_t cap) {
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char r[6];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { /* no entropy source: time and address */
            uint64_t x = (uint64_t)time(NULL) * 6364136223846793005ull ^ (uint64_t)(uintptr_t)&r ^ (uint64_t)attempt;
            for (int i = 0; i < 6; i++) r[i] = (unsigned char)(x >> (8 * i));
        }
        char sfx[7];
        for (int i = 0; i < 6; i++) sfx[i] = digits[r[i] % (sizeof digits - 1)];
        sfx[6] = '\0';
        int len = snprintf(tmp_name, cap, ".%s.tmp-%s", name, sfx);
        if (len < 0 || (size_t)len >= cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = openat(dir_fd, tmp_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

/* The file's checksum: zlib's crc32 of the 8 length bytes, the header with its own 8 digits read as "00000000",
 * and the data. */
static uint32_t ckpt_file_crc(const uint8_t *le, const char *hdr, size_t hlen, const mpt_checkpoint_tensor *t,
                              int n) {
    static const uint8_t zeros[8] = {'0', '0', '0', '0', '0', '0', '0', '0'};
    size_t at = CKPT_CRC_AT - 8;
    uint32_t crc = ckpt_crc((uint32_t)crc32(0L, Z_NULL, 0), le, 8);
    crc = ckpt_crc(crc, (const uint8_t *)hdr, at);
    crc = ckpt_crc(crc, zeros, 8);
    crc = ckpt_crc(crc, (const uint8_t *)hdr + at + 8, hlen - at - 8);
    for (int i = 0; i < n; i++) crc = ckpt_crc(crc, t[i].data, (size_t)mpt_checkpoint_tensor_nbytes(&t[i]));
    return crc;
}

/* path: dir_name/name, for messages. */
static mpt_status ckpt_write_temp_at(int dir_fd, const char *dir_name, const char *name,
                                     const mpt_checkpoint_tensor *tensors, int n, const mpt_checkpoint_meta *meta,
                                     int n_meta, char *tmp_name, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir_name, name);
    char *hdr = NULL;
    size_t hlen = 0;
    MPT_TRY(ckpt_build_header(path, tensors, n, meta, n_meta, &hdr, &hlen));
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", ckpt_file_crc(le, hdr, hlen, tensors, n));
    memcpy(hdr + CKPT_CRC_AT - 8, hex, 8);

    int fd = mpt_checkpoint_create_temp(dir_fd, name, tmp_name, cap);
    if (fd < 0) {
        mpt_status st = errno == ENAMETOOLONG
                            ? mpt_errorf(MPT_ERR_ARG, "%s: name too long for the temporary file (capacity %zu)", path, cap)
                            : mpt_errorf(MPT_ERR_IO, "%s: cannot create a temporary file beside it (%s)", path,
                                         strerror(errno));
        free(hdr);
        return st;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        mpt_status st = ckpt_write_error("fdopen", path);
        close(fd);
        unlinkat(dir_fd, tmp_name, 0);
        free(hdr);
        return st;
    }
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    free(hdr);
    for (int i = 0; i < n && ok; i++) {
        size_t nb = (size_t)mpt_checkpoint_tensor_nbytes(&tensors[i]);
        ok = nb == 0 || fwrite(tensors[i].data, 1, nb, f) == nb;
    }
    const char *what = "write";
    if (ok && fflush(f) != 0) ok = 0, what = "flush";
    if (ok && fsync(fileno(f)) != 0) ok = 0, what = "fsync";
    mpt_status st = ok ? MPT_OK : ckpt_write_error(what, path);
    if (fclose(f) != 0 && st == MPT_OK) st = ckpt_write_error("close", path);
    if (st != MPT_OK) unlinkat(dir_fd, tmp_name, 0);
    return st;
}

/* Renames dir_fd/tmp_name over dir_fd/name (never through a symbolic link: rename replaces a link itself) and
 * fsyncs the directory. */
static mpt_status ckpt_commit_at(int dir_fd, const char *dir_name, const char *tmp_name, const char *name) {
    if (renameat(dir_fd, tmp_name, dir_fd, name) != 0) {
        mpt_status st = mpt_errorf(MPT_ERR_IO, "%s/%s: rename from %s failed: %s", dir_name, name, tmp_name,
                                   strerror(errno));
        unlinkat(dir_fd, tmp_name, 0);
        return st;
    }
    if (fsync(dir_fd) != 0)
        return mpt_errorf(MPT_ERR_IO, "%s/%s: fsync of the directory failed: %s", dir_name, name, strerror(errno));
    return MPT_OK;
}

/* Splits path into its directory (opened: *dir_fd) and its last component (*name, pointing into path). */
static mpt_status ckpt_open_dir(const char *path, int *dir_fd, char *dir_name, size_t cap, const char **name) {
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    if (!**name) return mpt_errorf(MPT_ERR_ARG, "%s: expected a file name, found a directory path", path);
    if (!slash) snprintf(dir_name, cap, ".");
    else if (slash == path) snprintf(dir_name, cap, "/");
    else if ((size_t)(slash - path) >= cap) return mpt_errorf(MPT_ERR_ARG, "%s: path too long", path);
    else snprintf(dir_name, cap, "%.*s", (int)(slash - path), path);
    *dir_fd = open(dir_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*dir_fd < 0)
        return mpt_errorf(MPT_ERR_IO, "%s: cannot open its directory %s: %s", path, dir_name, strerror(errno));
    return MPT_OK;
}

mpt_status mpt_checkpoint_write_temp_at(int dir_fd, const char *dir_name, const char *name,
                                        const mpt_checkpoint_tensor *tensors, int n, const mpt_checkpoint_meta *meta,
                                        int n_meta, char *tmp_name, size_t cap) {
    MPT_ASSERT(dir_name && name && tmp_name);
    if (!*name || strchr(name, '/'))
        return mpt_errorf(MPT_ERR_ARG, "%s/%s: expected a file name without '/'", dir_name, name);
    return ckpt_write_temp_at(dir_fd, dir_name, name, tensors, n, meta, n_meta, tmp_name, cap);
}

mpt_status mpt_checkpoint_write_temp(const char *path, const mpt_checkpoint_tensor *tensors, int n,
                                     const mpt_checkpoint_meta *meta, int n_meta, char *tmp_path, size_t cap) {
    MPT_ASSERT(path && tmp_path);
    char dir_name[4096], tmp_name[512];
    const char *name;
    int dfd;
    MPT_TRY(ckpt_open_dir(path, &dfd, dir_name, sizeof dir_name, &name));
    mpt_status st = ckpt_write_temp_at(dfd, dir_name, name, tensors, n, meta, n_meta, tmp_name, sizeof tmp_name);
    close(dfd);
    if (st != MPT_OK) return st;
    size_t dl = strlen(dir_name);
    int len = strcmp(dir_name, "/") == 0 ? snprintf(tmp_path, cap, "/%s", tmp_name)
                                         : snprintf(tmp_path, cap, "%.*s/%s", (int)dl, dir_name, tmp_name);
    if (len < 0 || (size_t)len >= cap) {
        MPT_TRY(ckpt_open_dir(path, &dfd, dir_name, sizeof dir_name, &name));
        unlinkat(dfd, tmp_name, 0);
        close(dfd);
        return mpt_errorf(MPT_ERR_ARG, "%s: path too long for the temporary file name (capacity %zu)", path, cap);
    }
    return MPT_OK;
}

mpt_status mpt_checkpoint_commit(const char *tmp_path, const char *path) {
    char dir_name[4096];
    const char *name;
    int dfd;
    MPT_TRY(ckpt_open_dir(path, &dfd, dir_name, sizeof dir_name, &name));
    const char *slash = strrchr(tmp_path, '/');
    mpt_status st = ckpt_commit_at(dfd, dir_name, slash ? slash + 1 : tmp_path, name);
    close(dfd);
    return st;
}

mpt_status mpt_checkpoint_save(const char *path, const mpt_checkpoint_tensor *tensors, int n,
                               const mpt_checkpoint_meta *meta, int n_meta) {
    char dir_name[4096];
    const char *name;
    int dfd;
    MPT_TRY(ckpt_open_dir(path, &dfd, dir_name, sizeof dir_name, &name));
    mpt_status st = mpt_checkpoint_save_at(dfd, dir_name, name, tensors, n, meta, n_meta);
    close(dfd);
    return st;
}

mpt_status mpt_checkpoint_save_at(int dir_fd, const char *dir_name, const char *name,
                                  const mpt_checkpoint_tensor *tensors, int n, const mpt_checkpoint_meta *meta,
                                  int n_meta) {
    MPT_ASSERT(dir_name && name);
    if (!*name || strchr(name, '/'))
        return mpt_errorf(MPT_ERR_ARG, "%s/%s: expected a file name without '/'", dir_name, name);
    char tmp_name[512];
    MPT_TRY(ckpt_write_temp_at(dir_fd, dir_name, name, tensors, n, meta, n_meta, tmp_name, sizeof tmp_name));
    return ckpt_commit_at(dir_fd, dir_name, tmp_name, name);
}

/* ---- reader ----------------------------------------------------------------------------------- */

static void ckpt_free(mpt_checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free((char *)c->t[i].name);
    for (int i = 0; i < c->n_meta; i++) free(c->keys[i]), free(c->values[i]);
    free(c->t);
    free(c->begin);
    free(c->keys);
    free(c->values);
    free(c->file);
    free(c->path);
    free(c);
}

void mpt_checkpoint_close(mpt_checkpoint **c) {
    if (!c) return;
    ckpt_free(*c);
    *c = NULL;
}

/* Reads exactly n bytes at the current offset of fd into dst. */
static mpt_status ckpt_read_exact(int fd, const char *path, uint8_t *dst, size_t n, size_t at, size_t size) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, dst + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ckpt_io_error("read", path);
        if (r == 0)
            return mpt_errorf(MPT_ERR_IO, "%s: file shrank while reading (%zu of %zu bytes)", path, at + got, size);
        got += (size_t)r;
    }
    return MPT_OK;
}

/* Opens path without blocking (a FIFO or a device must not hang the open) and accepts a regular file only;
 * *size = its size. */
static mpt_status ckpt_open_regular(const char *path, int *fd_out, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return mpt_errorf(MPT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        mpt_status st = ckpt_io_error("stat", path);
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        const char *what = S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO" :
                           S_ISSOCK(sb.st_mode) ? "a socket" : S_ISCHR(sb.st_mode) ? "a character device" :
                           S_ISBLK(sb.st_mode) ? "a block device" : "not a regular file";
        return mpt_errorf(MPT_ERR_IO, "%s: expected a regular file, found %s", path, what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        mpt_status st = ckpt_io_error("fcntl", path);
        close(fd);
        return st;
    }
    *fd_out = fd;
    *size = (size_t)sb.st_size;
    return MPT_OK;
}

static mpt_status ckpt_parse_header(mpt_checkpoint *c, size_t hlen);
static mpt_status ckpt_check_data(mpt_checkpoint *c);

/* Reads the file in two steps, so that nothing beyond what the header promises is read: the 8-byte length
 * and the JSON header first, validated against the file size (the tensors must tile exactly the bytes after
 * the header), then the data. */
static mpt_status ckpt_read_file(mpt_checkpoint *c) {
    const char *path = c->path;
    int fd = -1;
    size_t size = 0;
    MPT_TRY(ckpt_open_regular(path, &fd, &size));
    mpt_status st = MPT_OK;
    uint8_t le[8];
    uint64_t hlen = 0;
    if (size < 8)
        st = mpt_errorf(MPT_ERR_FORMAT, "%s: file of %zu bytes is too short for the 8-byte safetensors header length",
                        path, size);
    if (st == MPT_OK) st = ckpt_read_exact(fd, path, le, 8, 0, size);
    if (st == MPT_OK) {
        for (int i = 0; i < 8; i++) hlen |= (uint64_t)le[i] << (8 * i);
        if (hlen < 2)
            st = mpt_errorf(MPT_ERR_FORMAT, "%s: header length %llu is too small (expected at least 2 bytes of JSON)",
                            path, (unsigned long long)hlen);
        else if (hlen > MPT_CHECKPOINT_MAX_HEADER)
            st = mpt_errorf(MPT_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit (not a safetensors "
                            "file?)", path, (unsigned long long)hlen, (unsigned long long)MPT_CHECKPOINT_MAX_HEADER);
        else if (hlen > size - 8)
            st = mpt_errorf(MPT_ERR_FORMAT, "%s: header length %llu exceeds the %zu bytes after the length field "
                            "(truncated file?)", path, (unsigned long long)hlen, size - 8);
    }
    if (st == MPT_OK && !(c->file = malloc(8 + (size_t)hlen)))
        st = mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate %llu bytes for the header", path,
                        (unsigned long long)hlen);
    if (st == MPT_OK) {
        memcpy(c->file, le, 8);
        st = ckpt_read_exact(fd, path, c->file + 8, (size_t)hlen, 8, size);
    }
    if (st == MPT_OK) {
        c->file_size = size;
        c->buf_size = size - 8 - (size_t)hlen;
        st = ckpt_parse_header(c, (size_t)hlen);
    }
    if (st == MPT_OK && c->buf_size > 0) {
        uint8_t *all = realloc(c->file, size);
        if (!all)
            st = mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate %zu bytes for the tensors' data", path, c->buf_size);
        else
            c->file = all;
        if (st == MPT_OK) st = ckpt_read_exact(fd, path, c->file + 8 + hlen, c->buf_size, 8 + (size_t)hlen, size);
    }
    close(fd);
    if (st != MPT_OK) return st;
    c->buf = c->file + 8 + hlen;
    for (int i = 0; i < c->n; i++) c->t[i].data = c->buf + c->begin[i];
    return ckpt_check_data(c);
}

typedef struct ckpt_entry {
    int64_t begin, end;
    int index; /* position in c->t before sorting */
} ckpt_entry;

static int ckpt_entry_cmp(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parses one tensor entry `e` named `name` into *t (name not set) and its offsets. */
static mpt_status ckpt_parse_entry(const char *path, const char *name, json_t *e, size_t buf_size,
                                   mpt_checkpoint_tensor *t, int64_t *begin, int64_t *end) {
    if (!json_is_object(e))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": expected an object {dtype, shape, data_offsets}", path,
                          name);
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": unexpected field \"%s\" (expected dtype, shape, "
                              "data_offsets)", path, name, k);
    }
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"), *jo = json_object_get(e, "data_offsets");
    if (!jd || !js || !jo)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": missing field \"%s\"", path, name,
                          !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": dtype must be a string", path, name);
    if (!ckpt_dtype_parse(json_string_value(jd), &t->dtype))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": unsupported dtype \"%s\" (expected F32, F16, BF16, I32 "
                          "or U8)", path, name, json_string_value(jd));
    if (!json_is_array(js) || json_array_size(js) > MPT_CHECKPOINT_MAX_DIMS)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": shape must be an array of at most %d integers", path,
                          name, MPT_CHECKPOINT_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    for (int d = 0; d < t->ndim; d++) {
        json_t *x = json_array_get(js, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": shape[%d] must be a non-negative integer", path,
                              name, d);
        t->shape[d] = json_integer_value(x);
    }
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets must be [begin, end] integers", path, name);
    *begin = json_integer_value(json_array_get(jo, 0));
    *end = json_integer_value(json_array_get(jo, 1));
    if (*begin < 0 || *end < *begin)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] must satisfy 0 <= begin <= end",
                          path, name, (long long)*begin, (long long)*end);
    if ((uint64_t)*end > buf_size)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] are beyond the end of the "
                          "%zu-byte data buffer", path, name, (long long)*begin, (long long)*end, buf_size);
    int64_t nb = mpt_checkpoint_tensor_nbytes(t);
    char sh[160];
    if (nb < 0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": shape %s overflows 64-bit sizes", path, name,
                          ckpt_shape_str(t->ndim, t->shape, sh, sizeof sh));
    if (nb != *end - *begin)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": %s %s needs %lld bytes but data_offsets [%lld, %lld] "
                          "span %lld", path, name, json_string_value(jd), ckpt_shape_str(t->ndim, t->shape, sh, sizeof sh),
                          (long long)nb, (long long)*begin, (long long)*end, (long long)(*end - *begin));
    return MPT_OK;
}

/* Parses and validates the JSON header (c->file + 8, hlen bytes) against the data size c->buf_size: the
 * tensors' entries (sorted by offset into c->t, their offsets into c->begin) and the metadata. */
static mpt_status ckpt_parse_header(mpt_checkpoint *c, size_t hlen) {
    const char *path = c->path;
    json_error_t jerr;
    json_t *root = json_loadb((const char *)c->file + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: invalid JSON header: %s (line %d, column %d)", path, jerr.text,
                          jerr.line, jerr.column);
    mpt_status st = MPT_OK;
    if (!json_is_object(root)) {
        json_decref(root);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: expected a JSON object as the header, found another JSON value", path);
    }
    size_t n_keys = json_object_size(root);
    json_t *jm = json_object_get(root, CKPT_META_KEY);
    size_t n_t = n_keys - (jm ? 1 : 0);
    size_t n_m = jm && json_is_object(jm) ? json_object_size(jm) : 0;
    c->t = calloc(n_t ? n_t : 1, sizeof *c->t);
    c->begin = calloc(n_t ? n_t : 1, sizeof *c->begin);
    ckpt_entry *ent = calloc(n_t ? n_t : 1, sizeof *ent);
    c->keys = calloc(n_m ? n_m : 1, sizeof *c->keys);
    c->values = calloc(n_m ? n_m : 1, sizeof *c->values);
    if (!c->t || !c->begin || !ent || !c->keys || !c->values) {
        free(ent);
        json_decref(root);
        return mpt_errorf(MPT_ERR_NOMEM, "%s: out of memory for %zu tensors", path, n_t);
    }
    if (jm && !json_is_object(jm))
        st = mpt_errorf(MPT_ERR_FORMAT, "%s: \"%s\" must be an object of strings", path, CKPT_META_KEY);
    const char *k;
    json_t *v;
    if (st == MPT_OK && jm) {
        json_object_foreach(jm, k, v) {
            if (!json_is_string(v)) {
                st = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\": expected a string value", path, k);
                break;
            }
            c->keys[c->n_meta] = strdup(k);
            c->values[c->n_meta] = strdup(json_string_value(v));
            c->n_meta++;
            if (!c->keys[c->n_meta - 1] || !c->values[c->n_meta - 1]) {
                st = mpt_errorf(MPT_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
        }
    }
    if (st == MPT_OK) {
        json_object_foreach(root, k, v) {
            if (strcmp(k, CKPT_META_KEY) == 0) continue;
            mpt_checkpoint_tensor *t = &c->t[c->n];
            st = ckpt_parse_entry(path, k, v, c->buf_size, t, &ent[c->n].begin, &ent[c->n].end);
            if (st != MPT_OK) break;
            t->name = strdup(k);
            ent[c->n].index = c->n;
            c->n++;
            if (!t->name) {
                st = mpt_errorf(MPT_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
        }
    }
    json_decref(root);
    if (st != MPT_OK) {
        free(ent);
        return st;
    }

    /* Offsets, sorted, must tile [0, buf_size) exactly. */
    qsort(ent, (size_t)c->n, sizeof *ent, ckpt_entry_cmp);
    int64_t at = 0;
    for (int i = 0; i < c->n && st == MPT_OK; i++) {
        const char *name = c->t[ent[i].index].name;
        if (ent[i].begin > at)
            st = mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets begin at %lld, leaving a gap after byte %lld "
                            "(expected contiguous offsets from 0)", path, name, (long long)ent[i].begin, (long long)at);
        else if (ent[i].begin < at)
            st = mpt_errorf(MPT_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] overlap the previous tensor, "
                            "which ends at byte %lld", path, name, (long long)ent[i].begin, (long long)ent[i].end,
                            (long long)at);
        at = ent[i].end;
    }
    if (st == MPT_OK && (uint64_t)at != c->buf_size)
        st = mpt_errorf(MPT_ERR_FORMAT, "%s: %zu trailing bytes after the tensors' data (the tensors cover %lld of the "
                        "%zu data bytes)", path, c->buf_size - (size_t)at, (long long)at, c->buf_size);
    if (st == MPT_OK) {
        mpt_checkpoint_tensor *sorted = malloc((c->n ? (size_t)c->n : 1) * sizeof *sorted);
        if (!sorted) {
            st = mpt_errorf(MPT_ERR_NOMEM, "%s: out of memory", path);
        } else {
            for (int i = 0; i < c->n; i++) {
                sorted[i] = c->t[ent[i].index];
                c->begin[i] = ent[i].begin;
            }
            free(c->t);
            c->t = sorted;
        }
    }
    free(ent);
    return st;
}

/* The checksum of the whole file against the header's crc32: every byte but the checksum's own 8 digits, so a
 * corrupted setting, offset or shape is refused like corrupted weights. A file whose crc32 matches its data
 * alone was written before the header was covered: refused too, saying so. */
static mpt_status ckpt_check_data(mpt_checkpoint *c) {
    const char *path = c->path;
    const char *crc_s = mpt_checkpoint_meta_get(c, CKPT_CRC_KEY);
    if (!crc_s)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: no \"%s\" in %s (expected the checksum mptrain writes)", path, CKPT_CRC_KEY,
                          CKPT_META_KEY);
    int hex_ok = strlen(crc_s) == 8;
    for (int i = 0; hex_ok && i < 8; i++) hex_ok = isxdigit((unsigned char)crc_s[i]) != 0;
    unsigned long want = hex_ok ? strtoul(crc_s, NULL, 16) : 0;
    if (!hex_ok)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata crc32 \"%s\": expected 8 hexadecimal digits", path, crc_s);
    size_t hlen = c->file_size - 8 - c->buf_size;
    if (hlen < CKPT_CRC_AT - 8 + 8 || memcmp(c->file + 8, CKPT_CRC_PREFIX, sizeof CKPT_CRC_PREFIX - 1) != 0 ||
        memcmp(c->file + CKPT_CRC_AT, crc_s, 8) != 0) {
        uint32_t data = ckpt_crc((uint32_t)crc32(0L, Z_NULL, 0), c->buf, c->buf_size);
        if (data == (uint32_t)want)
            return mpt_errorf(MPT_ERR_FORMAT, "%s: its crc32 covers the tensor data only (written by an earlier mptrain, "
                              "before the header was checksummed): its settings and layout cannot be verified", path);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: the header does not start with its crc32 (expected %s...): not a "
                          "checkpoint mptrain wrote, or a corrupt one", path, CKPT_CRC_PREFIX);
    }
    uint8_t saved[8];
    memcpy(saved, c->file + CKPT_CRC_AT, 8);
    memset(c->file + CKPT_CRC_AT, '0', 8);
    uint32_t have = ckpt_crc((uint32_t)crc32(0L, Z_NULL, 0), c->file, c->file_size);
    memcpy(c->file + CKPT_CRC_AT, saved, 8);
    if (have != (uint32_t)want) {
        uint32_t data = ckpt_crc((uint32_t)crc32(0L, Z_NULL, 0), c->buf, c->buf_size);
        if (data == (uint32_t)want)
            return mpt_errorf(MPT_ERR_FORMAT, "%s: its crc32 covers the tensor data only (written by an earlier mptrain, "
                              "before the header was checksummed): its settings and layout cannot be verified", path);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: CRC32 mismatch: the header says %08lx, the file's %zu bytes give %08x "
                          "(corrupt file: its settings, layout or tensors changed)", path, want, c->file_size, have);
    }
    return MPT_OK;
}

static mpt_status ckpt_check_expected(const mpt_checkpoint *c, const mpt_checkpoint_tensor *exp, int n_exp) {
    const char *path = c->path;
    char list[768];
    size_t len = 0;
    int count = 0;
    for (int i = 0; i < n_exp; i++) {
        if (mpt_checkpoint_find(c, exp[i].name)) continue;
        if (len < sizeof list) len += (size_t)snprintf(list + len, sizeof list - len, "%s\"%s\"", count ? ", " : "", exp[i].name);
        count++;
    }
    if (count)
        return mpt_errorf(MPT_ERR_SHAPE, "%s: missing %d tensor%s the model needs: %s", path, count, count > 1 ? "s" : "",
                          list);
    for (int i = 0; i < c->n; i++) {
        int found = 0;
        for (int j = 0; j < n_exp && !found; j++) found = strcmp(exp[j].name, c->t[i].name) == 0;
        if (found) continue;
        if (len < sizeof list) len += (size_t)snprintf(list + len, sizeof list - len, "%s\"%s\"", count ? ", " : "", c->t[i].name);
        count++;
    }
    if (count)
        return mpt_errorf(MPT_ERR_SHAPE, "%s: %d unexpected tensor%s the model does not have: %s", path, count,
                          count > 1 ? "s" : "", list);
    for (int i = 0; i < n_exp; i++) {
        const mpt_checkpoint_tensor *t = mpt_checkpoint_find(c, exp[i].name);
        int same = t->dtype == exp[i].dtype && t->ndim == exp[i].ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == exp[i].shape[d];
        if (!same) {
            char a[160], b[160];
            const char *ed = ckpt_dtype_str(exp[i].dtype);
            return mpt_errorf(MPT_ERR_SHAPE, "%s: tensor \"%s\": expected %s %s, found %s %s", path, t->name,
                              ed ? ed : "?", ckpt_shape_str(exp[i].ndim, exp[i].shape, a, sizeof a),
                              ckpt_dtype_str(t->dtype), ckpt_shape_str(t->ndim, t->shape, b, sizeof b));
        }
    }
    return MPT_OK;
}

mpt_status mpt_checkpoint_open(const char *path, const mpt_checkpoint_tensor *expected, int n_expected,
                               mpt_checkpoint **out) {
    MPT_ASSERT(path && out && n_expected >= 0);
    *out = NULL;
    mpt_checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return mpt_errorf(MPT_ERR_NOMEM, "%s: out of memory", path);
    }
    mpt_status st = ckpt_read_file(c);
    if (st == MPT_OK && expected) st = ckpt_check_expected(c, expected, n_expected);
    if (st != MPT_OK) {
        ckpt_free(c);
        return st;
    }
    *out = c;
    return MPT_OK;
}

int mpt_checkpoint_n_tensors(const mpt_checkpoint *c) { return c->n; }

const mpt_checkpoint_tensor *mpt_checkpoint_tensor_at(const mpt_checkpoint *c, int i) {
    MPT_ASSERT(i >= 0 && i < c->n);
    return &c->t[i];
}

const mpt_checkpoint_tensor *mpt_checkpoint_find(const mpt_checkpoint *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
    return NULL;
}

mpt_status mpt_checkpoint_read(const mpt_checkpoint *c, const char *name, void *dst, size_t dst_bytes) {
    const mpt_checkpoint_tensor *t = mpt_checkpoint_find(c, name);
    if (!t) return mpt_errorf(MPT_ERR_SHAPE, "%s: no tensor \"%s\"", c->path, name);
    size_t nb = (size_t)mpt_checkpoint_tensor_nbytes(t);
    if (nb != dst_bytes)
        return mpt_errorf(MPT_ERR_SHAPE, "%s: tensor \"%s\" has %zu bytes, the destination %zu", c->path, name, nb,
                          dst_bytes);
    if (nb) memcpy(dst, t->data, nb);
    return MPT_OK;
}

const char *mpt_checkpoint_meta_get(const mpt_checkpoint *c, const char *key) {
    for (int i = 0; i < c->n_meta; i++)
        if (strcmp(c->keys[i], key) == 0) return c->values[i];
    return NULL;
}

int mpt_checkpoint_n_meta(const mpt_checkpoint *c) { return c->n_meta; }

mpt_checkpoint_meta mpt_checkpoint_meta_at(const mpt_checkpoint *c, int i) {
    MPT_ASSERT(i >= 0 && i < c->n_meta);
    return (mpt_checkpoint_meta){c->keys[i], c->values[i]};
}

const char *mpt_checkpoint_path(const mpt_checkpoint *c) { return c->path; }
