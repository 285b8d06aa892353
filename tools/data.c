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

mpt_status mpt_cli_data_load(mpt_cli_data *cd, const char *dir, int64_t limit_train, int64_t limit_test) {
    memset(cd, 0, sizeof *cd);
    snprintf(cd->dir, sizeof cd->dir, "%s", dir);
    struct stat st;
    if (stat(dir, &st) != 0)
        return mpt_errorf(MPT_ERR_IO,
                          "--data %s: %s; expected a directory with the four Fashion-MNIST IDX files "
                          "(Debian: apt-get install dataset-fashion-mnist)", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return mpt_errorf(MPT_ERR_IO,
                          "--data %s: expected a directory with the four Fashion-MNIST IDX files, found %s "
                          "(Debian: apt-get install dataset-fashion-mnist)",
                          dir, S_ISREG(st.st_mode)    ? "a regular file"
                               : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                      : "a special file");
    /* the models take 28 x 28 images: checked on the headers, before any payload is read; only the rows used are
     * read */
    mpt_status s = mpt_mnist_load_limited(dir, 28, 28, limit_train, limit_test, &cd->d);
    if (s == MPT_ERR_SHAPE) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", mpt_last_error());
        return mpt_errorf(s, "--data %s: %s (the models take 28 x 28)", dir, msg);
    }
    if (s != MPT_OK) return s;
    mpt_cli_data_fingerprint(&cd->d, &cd->fp);
    return MPT_OK;
}

void mpt_cli_data_free(mpt_cli_data *cd) { mpt_mnist_free(&cd->d); }

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
