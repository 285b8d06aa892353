/*
 * datasets/idx.h - the IDX file format (MNIST, Fashion-MNIST) and the four-file MNIST-style dataset.
 *
 * Format (Yann LeCun's MNIST page, "FILE FORMATS FOR THE MNIST DATABASE"):
 *     bytes 0-1  0x00 0x00
 *     byte  2    type: 0x08 = unsigned byte (the only type accepted here)
 *     byte  3    ndim: 3 for images [N, rows, cols], 4 for images with channels, 1 for labels [N]
 *     then ndim big-endian uint32 sizes, then the data: prod(sizes) bytes, row-major (last index fastest),
 *     and nothing after it.
 * So an images file starts 00 00 08 03 (0x00000803) and a labels file 00 00 08 01 (0x00000801). LeCun's page defines
 * the format for any number of dimensions; MNIST uses 1 and 3. Images with channels (colour) are rank 4, in one of two
 * layouts the file cannot tell apart: [N, C, H, W] (PyTorch's and this engine's NCHW; the default) or [N, H, W, C]
 * (channels last: numpy's and PIL's image arrays), which the loader is told (mpt_mnist_opts.layout) and transposes to
 * NCHW once, on load.
 *
 * Files are read raw or gzip-compressed, told apart by the gzip magic 1f 8b (the distributed files are .gz;
 * decompression with zlib's inflate, which checks the gzip CRC32 and length). Every malformed file is rejected with MPT_ERR_FORMAT and a one-line mpt_errorf message that names the
 * file, what was expected and what was found: wrong magic, a type other than 0x08, ndim 0 or > 4, the wrong
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
#define MPT_IDX_MAX_DIMS 4

/* One IDX file in memory. */
typedef struct mpt_idx {
    int ndim;                        /* 1..4 */
    int64_t dims[MPT_IDX_MAX_DIMS];  /* sizes from the header; unused trailing dims are 1 */
    int64_t nbytes;                  /* prod(dims) = bytes in data */
    uint8_t *data;                   /* malloc'd, row-major U8 [dims[0], ..., dims[ndim - 1]] */
} mpt_idx;

/* Loads the IDX file `path` (raw or gzip) into *out (zeroed first; on error it holds nothing to free).
 * expect_ndim: 3 for images (ndim 3, or 4 with channels), 1 for labels, 0 to accept any ndim in 1..4.
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
    uint8_t *train_images;  /* U8 [n_train, dim], row-major; an image is [channels, rows, cols] (NCHW) */
    uint8_t *train_labels;  /* U8 [n_train], each in [0, n_classes) */
    uint8_t *test_images;   /* U8 [n_test, dim] */
    uint8_t *test_labels;   /* U8 [n_test] */
    int64_t n_train;
    int64_t n_test;
    int rows, cols;         /* image height and width */
    int channels;           /* 1 for rank-3 image files */
    int64_t dim;            /* features per example: channels x rows x cols */
    int n_classes;          /* the class count: the largest training label + 1, or as given (mpt_mnist_opts) */
    int image_ndim;         /* the image files' rank: 3 ([N, H, W]) or 4 ([N, C, H, W] or [N, H, W, C], as
                               mpt_mnist_opts.layout said); 0 for data not read from IDX files (last: the fields
                               before it keep their offsets) */
} mpt_mnist;

/* MNIST's and Fashion-MNIST's class count. */
#define MPT_MNIST_N_CLASSES 10
/* Labels are bytes: at most 256 classes. */
#define MPT_MNIST_MAX_CLASSES 256

/* How rank-4 image files are laid out (rank-3 files are [N, H, W] with one channel either way). */
typedef enum mpt_idx_layout {
    MPT_IDX_LAYOUT_NCHW = 0, /* [N, C, H, W]: channels first (PyTorch's tensors) */
    MPT_IDX_LAYOUT_NHWC,     /* [N, H, W, C]: channels last (numpy / PIL image arrays), transposed on load */
} mpt_idx_layout;

/* What the loader is told about the data. Zeroed: any image size, NCHW, the class count from the labels. */
typedef struct mpt_mnist_opts {
    int rows, cols;          /* required image size (MPT_ERR_SHAPE otherwise, before any payload), 0 = any */
    mpt_idx_layout layout;   /* rank-4 image files */
    int n_classes;           /* 0: the largest training label + 1 (at least 2); else 2..256, every label below it */
    int64_t limit_train, limit_test; /* keep only the first N items (0: all): only those are read, and the bytes they
                                        need are checked against what the process can allocate before any payload */
} mpt_mnist_opts;

/* "nchw" / "nhwc"; parse returns 0 on success, -1 for an unknown name. */
MPT_API const char *mpt_idx_layout_name(mpt_idx_layout l);
MPT_API int mpt_idx_layout_parse(const char *s, mpt_idx_layout *out);

/* Loads the four standard files from `dir` (see the file comment) into *out (zeroed first; on error it holds nothing
 * to free). The four headers are read and checked against each other before any payload: images files have ndim 3 or
 * 4, labels files ndim 1; train and test images have the same channels x rows x cols (a message names both files);
 * each images file has as many items as its labels file. Then the class count: opts->n_classes, or the largest
 * training label + 1; every training label must be below it, and every test label (a test label outside the training
 * labels' range names both files: the test set has a class the training set lacks). Rank-4 NHWC images are transposed
 * to NCHW. With limits, only the first limit_train / limit_test items are read (the rest of each file is not: a 4 MB
 * .gz declaring 5,000,000 images costs what the used rows cost), the class count is the largest label of the training
 * items read, and the bytes the used items need are checked, before any payload is allocated, against what the
 * process can allocate (MemAvailable in /proc/meminfo, ulimit -v / -d): MPT_ERR_NOMEM naming the directory, the sizes
 * and --limit-train when they cannot fit. opts NULL: the zeroed defaults.
 * Errors: MPT_ERR_IO naming the directory and every missing file (a directory, FIFO or symbolic link loop where a file
 * should be is named as such), MPT_ERR_FORMAT for malformed contents and labels outside the class count, MPT_ERR_SHAPE
 * for a size other than opts' rows x cols. */
MPT_API mpt_status mpt_mnist_load_opts(const char *dir, const mpt_mnist_opts *opts, mpt_mnist *out);

/* mpt_mnist_load_opts with the defaults (any size, NCHW, the class count from the training labels). */
MPT_API mpt_status mpt_mnist_load(const char *dir, mpt_mnist *out);

/* mpt_mnist_load, also requiring rows x cols images (MPT_ERR_SHAPE otherwise, before any payload is read);
 * rows = cols = 0 accepts any size. */
MPT_API mpt_status mpt_mnist_load_shape(const char *dir, int rows, int cols, mpt_mnist *out);

/* mpt_mnist_load_shape keeping only the first limit_train training and limit_test test items (0: all): the limits of
 * mpt_mnist_opts. */
MPT_API mpt_status mpt_mnist_load_limited(const char *dir, int rows, int cols, int64_t limit_train,
                                          int64_t limit_test, mpt_mnist *out);

/* Writes d as the four standard files into the existing directory `dir` (names with ".gz" and compressed
 * when gzip != 0), e.g. to put a synthetic dataset where the command-line tool can read it. Images with one channel
 * are rank 3, with several rank 4 in `layout` (d holds NCHW).
 * Returns MPT_ERR_IO on failure. */
MPT_API mpt_status mpt_mnist_save(const char *dir, const mpt_mnist *d, int gzip);
/* The same with rank-4 images written in `layout`. */
MPT_API mpt_status mpt_mnist_save_layout(const char *dir, const mpt_mnist *d, int gzip, mpt_idx_layout layout);

/* Frees the four arrays and zeroes *d. Safe on a zeroed struct. */
MPT_API void mpt_mnist_free(mpt_mnist *d);

#endif
