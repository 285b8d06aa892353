/*
 * tools/data.c - the dataset for a command: loaded once on the host (datasets/idx.h), only its first N rows when
 * limited, fingerprinted (a CRC-32 per part), and copied once per run into the backend's memory (MPT_MEM_DATA), where the
 * training step's gather (mpt_trainer_gather) reads it. Nothing in the step copies pixels from the host.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "tools/cli.h"

void mpt_cli_data_fingerprint(const mpt_mnist *d, mpt_cli_data_fp *fp) {
    /* zlib's crc32 takes at most UINT_MAX bytes a call */
    const uint8_t *bufs[4] = {d->train_images, d->train_labels, d->test_images, d->test_labels};
    const int64_t bytes[4] = {d->n_train * d->dim, d->n_train, d->n_test * d->dim, d->n_test};
    uLong crc[2] = {crc32(0L, Z_NULL, 0), crc32(0L, Z_NULL, 0)};
    for (int i = 0; i < 4; i++)
        for (int64_t at = 0; at < bytes[i];) {
            uInt k = (uInt)(bytes[i] - at < (int64_t)1 << 30 ? bytes[i] - at : (int64_t)1 << 30);
            crc[i / 2] = crc32(crc[i / 2], bufs[i] + at, k);
            at += k;
        }
    fp->n_train = d->n_train;
    fp->n_test = d->n_test;
    fp->train_crc32 = (uint32_t)crc[0];
    fp->test_crc32 = (uint32_t)crc[1];
}

mpt_status mpt_cli_data_load(mpt_cli_data *cd, const char *dir, int64_t limit_train, int64_t limit_test, int classes,
                             mpt_idx_layout layout) {
    memset(cd, 0, sizeof *cd);
    snprintf(cd->dir, sizeof cd->dir, "%s", dir);
    struct stat st;
    if (stat(dir, &st) != 0)
        return mpt_errorf(MPT_ERR_IO,
                          "--data %s: %s; expected a directory with the four MNIST-format IDX files "
                          "(Fashion-MNIST on Debian: apt-get install dataset-fashion-mnist)", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return mpt_errorf(MPT_ERR_IO,
                          "--data %s: expected a directory with the four MNIST-format IDX files, found %s "
                          "(Fashion-MNIST on Debian: apt-get install dataset-fashion-mnist)",
                          dir, S_ISREG(st.st_mode)    ? "a regular file"
                               : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                      : "a special file");
    /* any image size and channel count: the network's input and head come from the data (mpt_cli_data_input); only
     * the rows used are read */
    const mpt_mnist_opts mo = {.layout = layout, .n_classes = classes, .limit_train = limit_train,
                               .limit_test = limit_test};
    mpt_status s = mpt_mnist_load_opts(dir, &mo, &cd->d);
    if (s != MPT_OK) return s;
    /* A note, not an error: a rank-3 file is [N, H, W], channels last with one channel as much as channels first, so
     * a script that says nhwc for all its datasets, grey ones included, says nothing false. */
    if (layout == MPT_IDX_LAYOUT_NHWC && cd->d.image_ndim == 3)
        printf("note: --data-layout nhwc changes nothing: the images in %s are rank 3 ([N, H, W], one channel), with "
               "no channel dimension to move; it orders rank-4 files\n", dir);
    mpt_cli_data_fingerprint(&cd->d, &cd->fp);
    return MPT_OK;
}

void mpt_cli_data_free(mpt_cli_data *cd) { mpt_mnist_free(&cd->d); }

mpt_model_input mpt_cli_data_input(const mpt_mnist *d) {
    mpt_model_input in = {.channels = d->channels > 0 ? d->channels : 1, .height = d->rows, .width = d->cols,
                          .classes = d->n_classes};
    return in;
}

const char *mpt_cli_model_short(const char *model, char *buf, size_t len) {
    if (mpt_model_exists(model)) {
        snprintf(buf, len, "%s", model);
        return buf;
    }
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)model; *p; p++) h = (h ^ *p) * 16777619u;
    snprintf(buf, len, "spec-%08x", h);
    return buf;
}

static mpt_status upload(mpt_cli_device_data *dd, uint8_t **dst, const uint8_t *src, size_t bytes) {
    mpt_backend *be = dd->be;
    *dst = be->alloc(be, bytes);
    if (!*dst)
        return mpt_errorf(MPT_ERR_NOMEM, "%s backend: cannot allocate %zu bytes for the dataset", be->name, bytes);
    mpt_backend_account(be, MPT_MEM_DATA, (int64_t)bytes);
    dd->bytes += bytes;
    be->from_host(be, *dst, src, bytes);
    return MPT_OK;
}

mpt_status mpt_cli_data_upload(mpt_cli_device_data *dd, mpt_backend *be, const mpt_mnist *d) {
    memset(dd, 0, sizeof *dd);
    dd->be = be;
    mpt_status s = upload(dd, &dd->train_images, d->train_images, (size_t)(d->n_train * d->dim));
    if (s == MPT_OK) s = upload(dd, &dd->train_labels, d->train_labels, (size_t)d->n_train);
    if (s == MPT_OK) s = upload(dd, &dd->test_images, d->test_images, (size_t)(d->n_test * d->dim));
    if (s == MPT_OK) s = upload(dd, &dd->test_labels, d->test_labels, (size_t)d->n_test);
    be->synchronize(be);
    if (s != MPT_OK) mpt_cli_data_release(dd);
    return s;
}

void mpt_cli_data_release(mpt_cli_device_data *dd) {
    mpt_backend *be = dd->be;
    if (!be) return;
    uint8_t **bufs[4] = {&dd->train_images, &dd->train_labels, &dd->test_images, &dd->test_labels};
    for (int i = 0; i < 4; i++)
        if (*bufs[i]) {
            be->free(be, *bufs[i]);
            *bufs[i] = NULL;
        }
    mpt_backend_account(be, MPT_MEM_DATA, -(int64_t)dd->bytes);
    dd->bytes = 0;
    dd->be = NULL;
}
