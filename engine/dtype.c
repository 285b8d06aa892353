/* engine/dtype.c - the tables of number formats, integer formats, storage dtypes and math modes (engine/dtype.h). */
#include "engine/dtype.h"

#include <string.h>

/* One row per format. The constants are written out (exact binary fractions); tests/test_formats.c decodes each row's
 * bit patterns with engine/numerics.h and requires the same values, and derives emin, emax and the unit roundoff
 * from the field widths. */
static const mpt_format_desc formats[] = {
    [MPT_FORMAT_FP32] = {.name = "FP32", .short_name = "FP32", .sign_bits = 1, .exp_bits = 8, .man_bits = 23, .bias = 127,
                         .special = MPT_SPECIAL_IEEE, .has_subnormals = 1, .emin = -126, .emax = 127,
                         .max_bits = 0x7f7fffffu, .min_normal_bits = 0x00800000u, .min_subnormal_bits = 0x00000001u,
                         .max_finite = 0x1.fffffep127, .min_normal = 0x1p-126, .min_subnormal = 0x1p-149,
                         .unit_roundoff = 0x1p-24},
    [MPT_FORMAT_TF32] = {.name = "TF32", .short_name = "TF32", .sign_bits = 1, .exp_bits = 8, .man_bits = 10, .bias = 127,
                         .special = MPT_SPECIAL_IEEE, .has_subnormals = 1, .emin = -126, .emax = 127,
                         .max_bits = 0x3fbffu, .min_normal_bits = 0x00400u, .min_subnormal_bits = 0x00001u,
                         .max_finite = 0x1.ffcp127, .min_normal = 0x1p-126, .min_subnormal = 0x1p-136,
                         .unit_roundoff = 0x1p-11},
    [MPT_FORMAT_BF16] = {.name = "BF16", .short_name = "BF16", .sign_bits = 1, .exp_bits = 8, .man_bits = 7, .bias = 127,
                         .special = MPT_SPECIAL_IEEE, .has_subnormals = 1, .emin = -126, .emax = 127,
                         .max_bits = 0x7f7fu, .min_normal_bits = 0x0080u, .min_subnormal_bits = 0x0001u,
                         .max_finite = 0x1.fep127, .min_normal = 0x1p-126, .min_subnormal = 0x1p-133,
                         .unit_roundoff = 0x1p-8},
    [MPT_FORMAT_FP16] = {.name = "FP16", .short_name = "FP16", .sign_bits = 1, .exp_bits = 5, .man_bits = 10, .bias = 15,
                         .special = MPT_SPECIAL_IEEE, .has_subnormals = 1, .emin = -14, .emax = 15,
                         .max_bits = 0x7bffu, .min_normal_bits = 0x0400u, .min_subnormal_bits = 0x0001u,
                         .max_finite = 65504.0, .min_normal = 0x1p-14, .min_subnormal = 0x1p-24,
                         .unit_roundoff = 0x1p-11},
    [MPT_FORMAT_E4M3] = {.name = "FP8 E4M3", .short_name = "E4M3", .sign_bits = 1, .exp_bits = 4, .man_bits = 3, .bias = 7,
                         .special = MPT_SPECIAL_FN, .has_subnormals = 1, .emin = -6, .emax = MPT_E4M3_EMAX,
                         .max_bits = 0x7eu, .min_normal_bits = 0x08u, .min_subnormal_bits = 0x01u,
                         .max_finite = MPT_E4M3_MAX, .min_normal = 0x1p-6, .min_subnormal = 0x1p-9,
                         .unit_roundoff = 0x1p-4, .saturates = 1},
    [MPT_FORMAT_E5M2] = {.name = "FP8 E5M2", .short_name = "E5M2", .sign_bits = 1, .exp_bits = 5, .man_bits = 2, .bias = 15,
                         .special = MPT_SPECIAL_IEEE, .has_subnormals = 1, .emin = -14, .emax = MPT_E5M2_EMAX,
                         .max_bits = 0x7bu, .min_normal_bits = 0x04u, .min_subnormal_bits = 0x01u,
                         .max_finite = MPT_E5M2_MAX, .min_normal = 0x1p-14, .min_subnormal = 0x1p-16,
                         .unit_roundoff = 0x1p-3, .saturates = 1},
    [MPT_FORMAT_E8M0] = {.name = "E8M0", .short_name = "E8M0", .sign_bits = 0, .exp_bits = 8, .man_bits = 0, .bias = 127,
                         .special = MPT_SPECIAL_E8M0, .has_subnormals = 0, .emin = -127, .emax = 127,
                         .max_bits = 0xfeu, .min_normal_bits = 0x00u, .min_subnormal_bits = 0x00u,
                         .max_finite = 0x1p127, .min_normal = 0x1p-127, .min_subnormal = 0x1p-127,
                         .unit_roundoff = 0.5},
};
_Static_assert(sizeof formats / sizeof formats[0] == MPT_FORMAT_COUNT, "one row per mpt_format");

/* One row per integer format; tests/test_formats.c derives qmax and code_min from the width. */
static const mpt_int_format_desc int_formats[] = {
    [MPT_INT_FORMAT_INT8] = {.name = "INT8", .key = "int8", .bits = 8, .qmax = MPT_INT8_QMAX, .code_min = -128},
    [MPT_INT_FORMAT_INT4] = {.name = "INT4", .key = "int4", .bits = 4, .qmax = MPT_INT4_QMAX, .code_min = -8},
};
_Static_assert(sizeof int_formats / sizeof int_formats[0] == MPT_INT_FORMAT_COUNT, "one row per mpt_int_format");

static const mpt_qformat_desc qformats[] = {
    [MPT_QFORMAT_INT8] = {.key = "int8", .name = "INT8", .bits = 8, .qmax = MPT_INT8_QMAX, .kind = MPT_QKIND_INT,
                          .is_int = 1, .scaled = 1, .int_format = MPT_INT_FORMAT_INT8, .format = -1},
    [MPT_QFORMAT_INT4] = {.key = "int4", .name = "INT4", .bits = 4, .qmax = MPT_INT4_QMAX, .kind = MPT_QKIND_INT,
                          .is_int = 1, .scaled = 1, .int_format = MPT_INT_FORMAT_INT4, .format = -1},
    [MPT_QFORMAT_E4M3] = {.key = "fp8-e4m3", .name = "FP8 E4M3", .bits = 8, .qmax = (int)MPT_E4M3_MAX,
                          .kind = MPT_QKIND_E4M3, .scaled = 1, .int_format = -1, .format = MPT_FORMAT_E4M3},
    [MPT_QFORMAT_BF16] = {.key = "bf16", .name = "BF16", .bits = 16, .qmax = 0, .kind = MPT_QKIND_BF16, .scaled = 0,
                          .int_format = -1, .format = MPT_FORMAT_BF16},
};
_Static_assert(sizeof qformats / sizeof qformats[0] == MPT_QFORMAT_COUNT, "one row per mpt_qformat");

static const mpt_dtype_desc dtypes[] = {
    [MPT_DTYPE_F32] = {.name = "f32", .size = 4, .format = MPT_FORMAT_FP32, .is_float = 1},
    [MPT_DTYPE_F16] = {.name = "f16", .size = 2, .format = MPT_FORMAT_FP16, .is_float = 1},
    [MPT_DTYPE_BF16] = {.name = "bf16", .size = 2, .format = MPT_FORMAT_BF16, .is_float = 1},
    [MPT_DTYPE_U8] = {.name = "u8", .size = 1, .format = -1},
    [MPT_DTYPE_I32] = {.name = "i32", .size = 4, .format = -1},
    [MPT_DTYPE_E4M3] = {.name = "e4m3", .size = 1, .format = MPT_FORMAT_E4M3, .is_fp8 = 1},
    [MPT_DTYPE_E5M2] = {.name = "e5m2", .size = 1, .format = MPT_FORMAT_E5M2, .is_fp8 = 1},
    [MPT_DTYPE_E8M0] = {.name = "e8m0", .size = 1, .format = MPT_FORMAT_E8M0},
    [MPT_DTYPE_I8] = {.name = "i8", .size = 1, .format = -1},
};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == MPT_DTYPE_COUNT, "one row per mpt_dtype");

static const mpt_math_desc maths[] = {
    [MPT_MATH_FP32] = {.name = "fp32", .operand = MPT_FORMAT_FP32, .tensor_cores = 0},
    [MPT_MATH_TF32] = {.name = "tf32", .operand = MPT_FORMAT_TF32, .tensor_cores = 1},
    [MPT_MATH_F16] = {.name = "fp16", .operand = MPT_FORMAT_FP16, .tensor_cores = 1},
    [MPT_MATH_BF16] = {.name = "bf16", .operand = MPT_FORMAT_BF16, .tensor_cores = 1},
    [MPT_MATH_FP8] = {.name = "fp8", .operand = MPT_FORMAT_E4M3, .tensor_cores = 1},
    [MPT_MATH_MXFP8] = {.name = "mxfp8", .operand = MPT_FORMAT_E4M3, .tensor_cores = 1},
};
_Static_assert(sizeof maths / sizeof maths[0] == MPT_MATH_COUNT, "one row per mpt_math");

const mpt_format_desc *mpt_format_info(mpt_format f) { return (unsigned)f < MPT_FORMAT_COUNT ? &formats[f] : NULL; }
const mpt_int_format_desc *mpt_int_format_info(mpt_int_format f) {
    return (unsigned)f < MPT_INT_FORMAT_COUNT ? &int_formats[f] : NULL;
}
const mpt_qformat_desc *mpt_qformat_info(mpt_qformat f) {
    return (unsigned)f < MPT_QFORMAT_COUNT ? &qformats[f] : NULL;
}
int mpt_qformat_parse(const char *s, mpt_qformat *out) {
    for (int i = 0; i < MPT_QFORMAT_COUNT; i++)
        if (strcmp(s, qformats[i].key) == 0) {
            *out = (mpt_qformat)i;
            return 0;
        }
    return -1;
}
const mpt_dtype_desc *mpt_dtype_info(mpt_dtype t) { return (unsigned)t < MPT_DTYPE_COUNT ? &dtypes[t] : NULL; }
const mpt_math_desc *mpt_math_info(mpt_math m) { return (unsigned)m < MPT_MATH_COUNT ? &maths[m] : NULL; }

size_t mpt_dtype_size(mpt_dtype t) { return (unsigned)t < MPT_DTYPE_COUNT ? dtypes[t].size : 0; }
const char *mpt_dtype_name(mpt_dtype t) { return (unsigned)t < MPT_DTYPE_COUNT ? dtypes[t].name : "?"; }
int mpt_dtype_is_float(mpt_dtype t) { return (unsigned)t < MPT_DTYPE_COUNT && dtypes[t].is_float; }
int mpt_dtype_is_fp8(mpt_dtype t) { return (unsigned)t < MPT_DTYPE_COUNT && dtypes[t].is_fp8; }

const char *mpt_math_name(mpt_math m) { return (unsigned)m < MPT_MATH_COUNT ? maths[m].name : "?"; }
double mpt_math_unit_roundoff(mpt_math m) {
    return (unsigned)m < MPT_MATH_COUNT ? formats[maths[m].operand].unit_roundoff : 1.0;
}
