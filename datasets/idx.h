/*
 * datasets/idx.h - the IDX file format (MNIST, Fashion-MNIST) and the four-file MNIST-style dataset.
 *
 * Format (Yann LeCun's MNIST page, "FILE FORMATS FOR THE MNIST DATABASE"):
 *     bytes 0-1  0x00 0x00
 *     byte  2    type: 0x08 = unsigned byte (the only type accepted here)
 *     byte  3    ndim: 3 for images [N, rows, cols], 1 for labels [N]
 *     then ndim big-endian uint32 sizes, then the data: prod(sizes) bytes, row-major (last index fastest),
 *     and nothing after it.
 * So an images file starts 00 00 08 03 (0x00000803) and a labels file 00 00 08 01 (0x00000801).
 *
 * Files are read raw or gzip-compressed, told apart by the gzip magic 1f 8b (the distributed files are .gz;
 * decompression with zlib's inflate, which checks the gzip CRC32 and length). Every malformed file is rejected with MPT_ERR_FORMAT and a one-line mpt_errorf message that names the
 * file, what was expected and what was found: wrong magic, a type other than 0x08, ndim 0 or > 3, the wrong
 * ndim for the role (images where labels are expected and the reverse), sizes whose product overflows or
 * exceeds MPT_IDX_MAX_BYTES (checked in 64 bits before anything is allocated), a payload shorter or longer
 * than the sizes say (trailing bytes are an error), a truncated or corrupt .gz, an empty file. A file that
 * cannot be opened gives MPT_ERR_IO with the errno text; so does anything but a regular file (a directory, a
 * FIFO, a device: opened without blocking and named as what it is) and a symbolic link loop.
 *
 * The dataset: train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
 * t10k-labels-idx1-ubyte in one directory, each either plain or with a .gz suffix (the plain name is tried
 * first). The default directory is MPT_DEFAULT_DATA_DIR (mpt_config.h: the Debian package
 * dataset-fashion-mnist, /usr/share/datasets/fashion-mnist).
 */
#ifndef MPT_DATASETS_IDX_H
#define MPT_DATASETS_IDX_H

#include <stdint.h>

#include "engine/api.h"
#include "engine/status.h"

/* Largest payload accepted (4 GiB): anything larger is a corrupt header, not a dataset. */
#define MPT_IDX_MAX_BYTES ((int64_t)1 << 32)
#define MPT_IDX_MAX_DIMS 3

/* One IDX file in memory. */
typedef struct mpt_idx {
    int ndim;                        /* 1..3 */
    int64_t dims[MPT_IDX_MAX_DIMS];  /* sizes from the header; unused trailing dims are 1 */
    int64_t nbytes;                  /* prod(dims) = bytes in data */
    uint8_t *data;                   /* malloc'd, row-major U8 [dims[0], dims[1], dims[2]] */
} mpt_idx;

/* Loads the IDX file `path` (raw or gzip) into *out (zeroed first; on error it holds nothing to free).
 * expect_ndim: 3 for images, 1 for labels, 0 to accept any ndim in 1..3.
 * Returns MPT_OK, MPT_ERR_IO (cannot open/read), MPT_ERR_FORMAT (malformed, see the file comment) or
 * MPT_ERR_NOMEM. */
MPT_API mpt_status mpt_idx_load(const char *path, int expect_ndim, mpt_idx *out);

/* mpt_idx_load of only the first `items` items (all when items < 0 or beyond the header's count): out->dims[0] and
 * nbytes are those read; the rest of the file is neither read nor checked (its bytes, a truncation or trailing
 * bytes there, the gzip CRC). */
MPT_API mpt_status mpt_idx_load_first(const char *path, int expect_ndim, int64_t items, mpt_idx *out);

/* Reads and validates only the header of `path` (as mpt_idx_load does): out->ndim, dims and nbytes, with
 * out->data NULL; at most the header's bytes are decompressed. Same errors as mpt_idx_load. */
MPT_API mpt_status mpt_idx_read_header(const char *path, int expect_ndim, mpt_idx *out);

/* Frees x->data and zeroes *x. Safe on a zeroed struct. */
MPT_API void mpt_idx_free(mpt_idx *x);

/* Writes x as an IDX file of type 0x08 (gzip-compressed when gzip != 0). Returns MPT_ERR_IO on failure. */
MPT_API mpt_status mpt_idx_save(const char *path, const mpt_idx *x, int gzip);

/* An MNIST-style classification dataset: U8 images and U8 labels, train and test parts.
 * Real data and mpt_synthetic_blobs() fill the same struct. */
typedef struct mpt_mnist {
    uint8_t *train_images;  /* U8 [n_train, dim], row-major; pixel p of image i at [i * dim + p] */
    uint8_t *train_labels;  /* U8 [n_train], each in [0, n_classes) */
    uint8_t *test_images;   /* U8 [n_test, dim] */
    uint8_t *test_labels;   /* U8 [n_test] */
    int64_t n_train;
    int64_t n_test;
    int rows, cols;         /* image height and width; dim = rows * cols */
    int64_t dim;            /* features per example */
    int n_classes;          /* 10 for MNIST / Fashion-MNIST */
} mpt_mnist;

#define MPT_MNIST_N_CLASSES 10

/* Loads the four standard files from `dir` (see the file comment) into *out (zeroed first; on error it
 * holds nothing to free). The four headers are read and checked against each other before any payload:
 * images files have ndim 3, labels files ndim 1; train and test images have the same rows x cols; each images
 * file has as many items as its labels file; then every label is in [0, 10).
 * Errors: MPT_ERR_IO naming the directory and every missing file (a directory, FIFO or symbolic link loop
 * where a file should be is named as such), MPT_ERR_FORMAT for malformed contents. */
MPT_API mpt_status mpt_mnist_load(const char *dir, mpt_mnist *out);

/* mpt_mnist_load, also requiring rows x cols images (MPT_ERR_SHAPE otherwise, before any payload is read);
 * rows = cols = 0 accepts any size. */
MPT_API mpt_status mpt_mnist_load_shape(const char *dir, int rows, int cols, mpt_mnist *out);

/* mpt_mnist_load_shape keeping only the first limit_train training and limit_test test items (0: all): only those are
 * read (the rest of each file is not: a 4 MB .gz declaring 5,000,000 images costs what the used rows cost). Before
 * any payload is allocated, the bytes the used items need are checked against what the process can allocate
 * (MemAvailable in /proc/meminfo, ulimit -v / -d): MPT_ERR_NOMEM naming the directory, the sizes and --limit-train
 * when they cannot fit. Other errors as mpt_mnist_load_shape's. */
MPT_API mpt_status mpt_mnist_load_limited(const char *dir, int rows, int cols, int64_t limit_train,
                                          int64_t limit_test, mpt_mnist *out);

/* Writes d as the four standard files into the existing directory `dir` (names with ".gz" and compressed
 * when gzip != 0), e.g. to put a synthetic dataset where the command-line tool can read it.
 * Returns MPT_ERR_IO on failure. */
MPT_API mpt_status mpt_mnist_save(const char *dir, const mpt_mnist *d, int gzip);

/* Frees the four arrays and zeroes *d. Safe on a zeroed struct. */
MPT_API void mpt_mnist_free(mpt_mnist *d);

#endif
