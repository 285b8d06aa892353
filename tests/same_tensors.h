/*
 * tests/same_tensors.h - two checkpoints hold the same tensors, byte for byte (header-only, for the test programs
 * that compare runs: test_cli's resumes and repeats, test_speedrun's recipe reproduced by train).
 */
#ifndef MPT_TESTS_SAME_TENSORS_H
#define MPT_TESTS_SAME_TENSORS_H

#include <string.h>

#include <check.h>

#include "engine/checkpoint.h"
#include "engine/status.h"

/* Every tensor of a_path is in b_path with the same bytes, and both have as many; with same_scaler, the loss
 * scaler's recorded state ("scaler" metadata) is the same too. */
static void assert_same_tensors(const char *a_path, const char *b_path, int same_scaler) {
    mpt_checkpoint *a = NULL, *b = NULL;
    ck_assert_msg(mpt_checkpoint_open(a_path, NULL, 0, &a) == MPT_OK, "%s", mpt_last_error());
    ck_assert_msg(mpt_checkpoint_open(b_path, NULL, 0, &b) == MPT_OK, "%s", mpt_last_error());
    ck_assert_int_eq(mpt_checkpoint_n_tensors(a), mpt_checkpoint_n_tensors(b));
    for (int i = 0; i < mpt_checkpoint_n_tensors(a); i++) {
        const mpt_checkpoint_tensor *ta = mpt_checkpoint_tensor_at(a, i);
        const mpt_checkpoint_tensor *tb = mpt_checkpoint_find(b, ta->name);
        ck_assert_msg(tb != NULL, "%s lacks %s", b_path, ta->name);
        int64_t na = mpt_checkpoint_tensor_nbytes(ta);
        ck_assert_int_eq(na, mpt_checkpoint_tensor_nbytes(tb));
        ck_assert_msg(memcmp(ta->data, tb->data, (size_t)na) == 0, "tensor %s differs between %s and %s", ta->name,
                      a_path, b_path);
    }
    if (same_scaler) ck_assert_str_eq(mpt_checkpoint_meta_get(a, "scaler"), mpt_checkpoint_meta_get(b, "scaler"));
    mpt_checkpoint_close(&a);
    mpt_checkpoint_close(&b);
}

#endif
