/*
 * tests/fuzz/fuzz_idx.c - libFuzzer target for the IDX reader (datasets/idx.c): each input is read as an
 * images file (ndim 3) and as a labels file (ndim 1), plain or gzip (the reader decides by the magic bytes).
 * A rejection is fine; a crash, a sanitizer report, a leak or a hang is a bug. Seed corpus: corpus/idx/.
 */
#include "datasets/idx.h"
#include "fuzz_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = mpt_fuzz_file("idx", data, size);
    mpt_idx x;
    if (mpt_idx_load(path, 3, &x) == MPT_OK) mpt_idx_free(&x);
    if (mpt_idx_load(path, 1, &x) == MPT_OK) mpt_idx_free(&x);
    if (mpt_idx_read_header(path, 3, &x) == MPT_OK) mpt_idx_free(&x);
    unlink(path);
    return 0;
}
