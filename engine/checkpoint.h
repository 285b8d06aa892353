/*
 * engine/checkpoint.h - checkpoints as safetensors files: named host tensors plus string metadata.
 *
 * Format (huggingface/safetensors README):
 *     8 bytes     N, unsigned 64-bit little-endian: the header length
 *     N bytes     UTF-8 JSON object:
 *                   { "<tensor name>": {"dtype": "F32", "shape": [256, 784], "data_offsets": [begin, end]},
 *                     ...,
 *                     "__metadata__": {"<key>": "<string value>", ...} }
 *                 (padded with spaces so that the data starts at a multiple of 8 bytes)
 *     the rest    the byte buffer; tensor t's bytes are buffer[begin, end), little-endian, row-major.
 * Dtypes written and read: "F32", "F16", "BF16", "I32", "U8" (mpt_dtype F32, F16, BF16, I32, U8).
 * The writer adds "crc32" to __metadata__, as the header's first key (the header starts
 * {"__metadata__":{"crc32":"XXXXXXXX", so its 8 lowercase hex digits are bytes 34..41 of the file): zlib's crc32 of
 * the whole file with those 8 digits read as "00000000". It covers the header's content (every setting of the
 * metadata, every tensor's dtype, shape and data_offsets) as well as the data: a flipped bit anywhere is refused.
 * It detects corruption, not tampering: anybody can compute a CRC.
 *
 * Reading one in Python with the standard library only (numpy: np.frombuffer(buf[b:e], "<f4"); BF16 has no
 * numpy dtype: read it as "<u2" and shift left by 16 into float32 bits):
 *     import json, struct, zlib
 *     raw = open("model.safetensors", "rb").read()
 *     (n,) = struct.unpack("<Q", raw[:8]); header = json.loads(raw[8:8 + n]); buf = raw[8 + n:]
 *     meta = header.pop("__metadata__", {})
 *     assert zlib.crc32(raw[:34] + b"00000000" + raw[42:]) == int(meta["crc32"], 16) == int(raw[34:42], 16)
 *     t = header["fc1.weight"]; b, e = t["data_offsets"]
 *     w = struct.unpack("<%df" % ((e - b) // 4), buf[b:e])   # F32, flat row-major, shape t["shape"]
 * (safetensors.numpy.load_file("model.safetensors") reads the same files.)
 *
 * Writing is atomic: the file is written to a new temporary file in the same directory, named
 * ".<name>.tmp-XXXXXX" (six random characters) and created with O_CREAT|O_EXCL|O_NOFOLLOW relative to the
 * directory's descriptor (mpt_checkpoint_create_temp: never an existing file, never through a symbolic link, and
 * two writers never share one), flushed and fsync'ed, renamed over `name` in the same directory (a symbolic link
 * there is replaced, never followed), and the directory is fsync'ed; a crash at any point leaves either the old
 * file or the new one, never a mix (and, after a crash before the rename, the complete temporary file, which the
 * caller may remove). The two halves are exposed separately (mpt_checkpoint_write_temp, mpt_checkpoint_commit)
 * so a test can stop between them.
 *
 * Reading (mpt_checkpoint_open) reads the whole file and rejects, with MPT_ERR_FORMAT and a message naming
 * the file and what was wrong: a file shorter than 8 bytes; a header length < 2, > 100 MB
 * (MPT_CHECKPOINT_MAX_HEADER) or > file size - 8; invalid JSON or duplicate keys (jansson,
 * JSON_REJECT_DUPLICATES); an entry that is not {dtype, shape, data_offsets}; an unknown dtype; a negative or
 * non-integer dimension, more than MPT_CHECKPOINT_MAX_DIMS of them; a size (product of shape x dtype size)
 * that overflows 64 bits or differs from end - begin; offsets that, sorted, do not tile the buffer
 * contiguously from 0 (gaps, overlaps, begin > end, out of bounds); trailing bytes after the last tensor;
 * metadata values that are not strings; a missing crc32, one that is not the header's first key, or one that does
 * not match the file (a file whose crc32 matches its data alone was written by an earlier mptrain: refused, saying
 * so). When the caller gives the list of
 * expected tensors (the model's), it also rejects, with MPT_ERR_SHAPE, a missing tensor, an unexpected extra
 * one, and a dtype or shape different from the expected one. Unreadable files give MPT_ERR_IO.
 */
#ifndef MPT_ENGINE_CHECKPOINT_H
#define MPT_ENGINE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"
#include "engine/dtype.h"
#include "engine/status.h"

#define MPT_CHECKPOINT_MAX_DIMS 8
#define MPT_CHECKPOINT_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

/* One named tensor: what to save, what is expected when loading, or what a loaded file holds. */
typedef struct mpt_checkpoint_tensor {
    const char *name;                          /* unique, non-empty, not "__metadata__" */
    mpt_dtype dtype;                           /* F32, F16, BF16, I32 or U8 */
    int ndim;                                  /* 0..MPT_CHECKPOINT_MAX_DIMS (0: a scalar, one element) */
    int64_t shape[MPT_CHECKPOINT_MAX_DIMS];    /* first ndim entries used, each >= 0 */
    const void *data;                          /* host data, prod(shape) * dtype size bytes (saving only) */
} mpt_checkpoint_tensor;

/* One metadata entry (both strings UTF-8; the key "crc32" is reserved for the writer). */
typedef struct mpt_checkpoint_meta {
    const char *key;
    const char *value;
} mpt_checkpoint_meta;

/* Bytes of a tensor's data: prod(shape) * dtype size; -1 if that overflows int64 or a dim is negative. */
MPT_API int64_t mpt_checkpoint_tensor_nbytes(const mpt_checkpoint_tensor *t);

/* Writes the n tensors (in that order in the buffer) and the n_meta metadata entries to `path`, atomically
 * (see the file comment). Equivalent to mpt_checkpoint_write_temp then mpt_checkpoint_commit.
 * Errors: MPT_ERR_ARG (empty/duplicate/reserved name, bad dtype, reserved or duplicate metadata key),
 * MPT_ERR_IO (with errno text; the temporary file is removed), MPT_ERR_NOMEM. */
MPT_API mpt_status mpt_checkpoint_save(const char *path, const mpt_checkpoint_tensor *tensors, int n,
                                       const mpt_checkpoint_meta *meta, int n_meta);

/* The same into dir_fd (a directory opened with O_DIRECTORY) as `name` (no '/'): every step relative to the
 * descriptor, so a path that is swapped for a symbolic link meanwhile cannot redirect the write. dir_name names
 * the directory in messages only. Errors as mpt_checkpoint_save's. */
MPT_API mpt_status mpt_checkpoint_save_at(int dir_fd, const char *dir_name, const char *name,
                                          const mpt_checkpoint_tensor *tensors, int n, const mpt_checkpoint_meta *meta,
                                          int n_meta);

/* Creates a new, empty file for writing in dir_fd, named ".<name>.tmp-XXXXXX" (its name, without the directory,
 * is copied to tmp_name, cap bytes), with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC and mode 0644: never an existing
 * file, never through a symbolic link. Returns the descriptor (opened for reading and writing), or -1 with errno set
 * (ENAMETOOLONG when the name does not fit in cap). */
MPT_API int mpt_checkpoint_create_temp(int dir_fd, const char *name, char *tmp_name, size_t cap);

/* First half of mpt_checkpoint_save: writes, flushes and fsyncs the complete file as a new temporary file beside
 * `path` (its path is copied to tmp_path, capacity cap bytes) and leaves `path` untouched. */
MPT_API mpt_status mpt_checkpoint_write_temp(const char *path, const mpt_checkpoint_tensor *tensors, int n,
                                             const mpt_checkpoint_meta *meta, int n_meta, char *tmp_path, size_t cap);

/* The first half relative to a directory's descriptor (as mpt_checkpoint_save_at): the complete file written,
 * flushed and fsync'ed as a new temporary file in dir_fd (its name, without the directory, copied to tmp_name, cap
 * bytes); `name` is untouched. For a caller that publishes the file with others (tools/outdir.h's publish sets).
 * Errors as mpt_checkpoint_save's; on failure no temporary file is left. */
MPT_API mpt_status mpt_checkpoint_write_temp_at(int dir_fd, const char *dir_name, const char *name,
                                                const mpt_checkpoint_tensor *tensors, int n,
                                                const mpt_checkpoint_meta *meta, int n_meta, char *tmp_name,
                                                size_t cap);

/* Second half: renames tmp_path (in the same directory) over path and fsyncs the directory that holds path.
 * MPT_ERR_IO on failure. */
MPT_API mpt_status mpt_checkpoint_commit(const char *tmp_path, const char *path);

/* A checkpoint read into memory and validated. */
typedef struct mpt_checkpoint mpt_checkpoint;

/* Reads and validates `path` (see the file comment). expected[0..n_expected): the tensors the caller needs
 * (name, dtype, ndim, shape; data unused): each must be present with that dtype and shape and no other
 * tensor may be present. expected = NULL accepts any set of tensors (for inspection tools).
 * On success *out owns the file's contents; free with mpt_checkpoint_close. On error *out is NULL. */
MPT_API mpt_status mpt_checkpoint_open(const char *path, const mpt_checkpoint_tensor *expected, int n_expected,
                                       mpt_checkpoint **out);
/* Frees the loaded file and sets *c to NULL (entries and metadata pointers from it become invalid).
 * NULL c or *c: nothing. */
MPT_API void mpt_checkpoint_close(mpt_checkpoint **c);

/* Tensors in the file, in the order of their data offsets. The returned entry's data points at the tensor's
 * bytes in the loaded buffer (not necessarily aligned: copy with memcpy or mpt_checkpoint_read); valid until
 * close. i in [0, mpt_checkpoint_n_tensors). */
MPT_API int mpt_checkpoint_n_tensors(const mpt_checkpoint *c);
MPT_API const mpt_checkpoint_tensor *mpt_checkpoint_tensor_at(const mpt_checkpoint *c, int i);
/* The entry named `name`, or NULL. */
MPT_API const mpt_checkpoint_tensor *mpt_checkpoint_find(const mpt_checkpoint *c, const char *name);

/* Copies tensor `name`'s data into dst (host, dst_bytes bytes). Errors: MPT_ERR_SHAPE naming the file and
 * tensor if it is absent or if dst_bytes differs from its size. */
MPT_API mpt_status mpt_checkpoint_read(const mpt_checkpoint *c, const char *name, void *dst, size_t dst_bytes);

/* Metadata (including "crc32"): the value of `key`, or NULL if absent; valid until close. */
MPT_API const char *mpt_checkpoint_meta_get(const mpt_checkpoint *c, const char *key);
/* Number of metadata entries and entry i (key and value pointers valid until close). */
MPT_API int mpt_checkpoint_n_meta(const mpt_checkpoint *c);
MPT_API mpt_checkpoint_meta mpt_checkpoint_meta_at(const mpt_checkpoint *c, int i);

/* The path the checkpoint was opened from. */
MPT_API const char *mpt_checkpoint_path(const mpt_checkpoint *c);

#endif
