/*
 * tests/fuzz/fuzz_checkpoint.c - libFuzzer target for the checkpoint reader: the safetensors container
 * (engine/checkpoint.c, mpt_checkpoint_open with every tensor read back) and mptrain's metadata validation
 * (tools/run_checkpoint.c, mpt_run_checkpoint_read_config). A rejection is fine; a crash, a sanitizer
 * report, a leak or a hang is a bug. Every error message must be one line. Seed corpus: corpus/checkpoint/.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint.h"
#include "fuzz_io.h"
#include "tools/run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_one_line(void) {
    if (strchr(mpt_last_error(), '\n')) abort(); /* a message quoting the input forged a second line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = mpt_fuzz_file("ckpt", data, size);
    mpt_checkpoint *c = NULL;
    if (mpt_checkpoint_open(path, NULL, 0, &c) == MPT_OK) {
        int n = mpt_checkpoint_n_tensors(c);
        for (int k = 0; k < n; k++) {
            const mpt_checkpoint_tensor *e = mpt_checkpoint_tensor_at(c, k);
            size_t b = (size_t)mpt_checkpoint_tensor_nbytes(e);
            void *buf = malloc(b ? b : 1);
            if (!buf) abort();
            if (mpt_checkpoint_read(c, e->name, buf, b) != MPT_OK) check_one_line();
            free(buf);
        }
        mpt_checkpoint_close(&c);
    } else {
        check_one_line();
    }
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    mpt_run_state rs;
    if (mpt_run_checkpoint_read_config(path, &o, &rs) != MPT_OK) check_one_line();
    unlink(path);
    return 0;
}
