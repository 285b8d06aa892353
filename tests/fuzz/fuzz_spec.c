/*
 * tests/fuzz/fuzz_spec.c - libFuzzer target for the network spec parser and planner (models/spec.c): the input is the
 * text of --model SPEC (or of the file of --model @FILE). A spec error is fine (MPT_ERR_ARG, one line); a crash, a
 * sanitizer report, a message with a line break, or a canonical text that does not read back as itself is a bug (the
 * canonical text is what a checkpoint records and --resume compares). Each spec that parses is also planned on two
 * inputs (Fashion-MNIST's 1 x 28 x 28 with 10 classes, and 3 x 7 x 5 with 47). Seed corpus: corpus/spec/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= MPT_MODEL_SPEC_MAX) return 0;
    char *text = malloc(size + 1);
    static char canon[MPT_MODEL_SPEC_MAX], again[MPT_MODEL_SPEC_MAX];
    static mpt_model_plan plan;
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    if (mpt_model_canonical(text, canon, sizeof canon) != MPT_OK) {
        if (strchr(mpt_last_error(), '\n')) abort(); /* errors are one line */
        free(text);
        return 0;
    }
    if (mpt_model_canonical(canon, again, sizeof again) != MPT_OK || strcmp(canon, again) != 0) abort();
    const mpt_model_input in[2] = {{1, 28, 28, 10}, {3, 7, 5, 47}};
    for (int k = 0; k < 2; k++)
        if (mpt_model_plan_make(text, &in[k], &plan) != MPT_OK && strchr(mpt_last_error(), '\n')) abort();
    free(text);
    return 0;
}
