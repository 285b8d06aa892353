/*
 * engine/dtype.h - storage dtypes and GEMM/conv math modes.
 *
 * Storage is dtype-true on both backends (ARCHITECTURE decision 1): an F16 or BF16 tensor holds 16-bit
 * values (uint16_t bit patterns) on the CPU as well as on the GPU. The conversions themselves are the
 * per-element functions of kernels/elemwise.h (RNE, overflow to inf, subnormals, NaN kept), re-exported here.
 *
 * The math mode says which number format a GEMM's or convolution's *operands* are rounded to before the
 * multiply (the Tensor Core input format); products and sums are always FP32. Where each mode is decided
 * for a node: engine/amp/policy.c; where it is carried out on the CPU: kernels/cpu/gemm.c
 * (mpt_cpu_gemm); on the GPU: kernels/cuda/gemm.cu.
 */
#ifndef MPT_ENGINE_DTYPE_H
#define MPT_ENGINE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"
#include "kernels/elemwise.h"

typedef enum mpt_dtype {
    MPT_DTYPE_F32 = 0, /* IEEE binary32 */
    MPT_DTYPE_F16,     /* IEEE binary16, stored as uint16_t */
    MPT_DTYPE_BF16,    /* bfloat16, stored as uint16_t */
    MPT_DTYPE_U8,      /* unsigned bytes: image pixels, dropout masks */
    MPT_DTYPE_I32,     /* int32: labels, argmax indices, counters */
    MPT_DTYPE_COUNT
} mpt_dtype;

typedef enum mpt_math {
    MPT_MATH_FP32 = 0, /* FP32 operands, FP32 FMA: no Tensor Cores, no TF32 */
    MPT_MATH_TF32,     /* FP32 storage, operands rounded to TF32 (10 mantissa bits), FP32 accumulate */
    MPT_MATH_F16,      /* FP16 operands, FP32 accumulate */
    MPT_MATH_BF16,     /* BF16 operands, FP32 accumulate */
    MPT_MATH_COUNT
} mpt_math;

/* Bytes per element (F32 4, F16 2, BF16 2, U8 1, I32 4). */
MPT_API size_t mpt_dtype_size(mpt_dtype t);
/* "f32", "f16", "bf16", "u8", "i32". */
MPT_API const char *mpt_dtype_name(mpt_dtype t);
/* "fp32", "tf32", "fp16", "bf16". */
MPT_API const char *mpt_math_name(mpt_math m);
/* Unit roundoff of the operand format of a math mode: 2^-24, 2^-11, 2^-11, 2^-8. */
MPT_API double mpt_math_unit_roundoff(mpt_math m);
/* Whether the dtype is a floating-point format (F32, F16, BF16). */
MPT_API int mpt_dtype_is_float(mpt_dtype t);

/* Loads element i of a float buffer of dtype t (F32, F16 or BF16) as FP32, exactly. */
static inline float mpt_load_f32(const void *p, mpt_dtype t, int64_t i) {
    switch (t) {
    case MPT_DTYPE_F16: return mpt_f16_to_f32(((const uint16_t *)p)[i]);
    case MPT_DTYPE_BF16: return mpt_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Stores v into element i of a float buffer of dtype t, rounding to nearest even. */
static inline void mpt_store_f32(void *p, mpt_dtype t, int64_t i, float v) {
    switch (t) {
    case MPT_DTYPE_F16: ((uint16_t *)p)[i] = mpt_f32_to_f16(v); break;
    case MPT_DTYPE_BF16: ((uint16_t *)p)[i] = mpt_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#endif
