/* engine/dtype.c - dtype and math-mode tables. */
#include "engine/dtype.h"

size_t mpt_dtype_size(mpt_dtype t) {
    static const size_t sizes[MPT_DTYPE_COUNT] = {4, 2, 2, 1, 4, 1, 1, 1};
    return (unsigned)t < MPT_DTYPE_COUNT ? sizes[t] : 0;
}

const char *mpt_dtype_name(mpt_dtype t) {
    static const char *names[MPT_DTYPE_COUNT] = {"f32", "f16", "bf16", "u8", "i32", "e4m3", "e5m2", "e8m0"};
    return (unsigned)t < MPT_DTYPE_COUNT ? names[t] : "?";
}

const char *mpt_math_name(mpt_math m) {
    static const char *names[MPT_MATH_COUNT] = {"fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8"};
    return (unsigned)m < MPT_MATH_COUNT ? names[m] : "?";
}

double mpt_math_unit_roundoff(mpt_math m) {
    switch (m) {
    case MPT_MATH_FP32: return 0x1p-24;
    case MPT_MATH_TF32: return 0x1p-11;
    case MPT_MATH_F16: return 0x1p-11;
    case MPT_MATH_BF16: return 0x1p-8;
    case MPT_MATH_FP8:
    case MPT_MATH_MXFP8: return 0x1p-4;
    default: return 1.0;
    }
}

int mpt_dtype_is_float(mpt_dtype t) {
    return t == MPT_DTYPE_F32 || t == MPT_DTYPE_F16 || t == MPT_DTYPE_BF16;
}

int mpt_dtype_is_fp8(mpt_dtype t) { return t == MPT_DTYPE_E4M3 || t == MPT_DTYPE_E5M2; }
