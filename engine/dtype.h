/*
 * engine/dtype.h - storage dtypes and GEMM/conv math modes.
 *
 * Storage is dtype-true on both backends (ARCHITECTURE decision 1): an F16 or BF16 tensor holds 16-bit
 * values (uint16_t bit patterns) on the CPU as well as on the GPU, an FP8 tensor 8-bit ones. The conversions
 * themselves are the per-element functions of engine/numerics.h (RNE, overflow to inf, subnormals, NaN kept;
 * FP8 saturating or not), re-exported here. FP8 tensors are scaled (ARCHITECTURE decision 10): the stored value
 * is x * s rounded, and what it stands for needs the scale (per tensor, or an E8M0 tensor of block scales), which
 * lives beside it (engine/amp/fp8.h); mpt_load_f32 below gives the stored FP8 value itself.
 *
 * The math mode says which number format a GEMM's or convolution's *operands* are rounded to before the
 * multiply (the Tensor Core input format); products and sums are FP32 (FP8 GEMMs may model Hopper's narrower
 * accumulator instead: engine/backend.h mpt_fp8_accum). Where each mode is decided
 * for a node: engine/amp/policy.c; where it is carried out on the CPU: kernels/cpu/gemm.c
 * (mpt_cpu_gemm); on the GPU: kernels/cuda/gemm.cu.
 */
#ifndef MPT_ENGINE_DTYPE_H
#define MPT_ENGINE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/api.h"
#include "engine/numerics.h"

typedef enum mpt_dtype {
    MPT_DTYPE_F32 = 0, /* IEEE binary32 */
    MPT_DTYPE_F16,     /* IEEE binary16, stored as uint16_t */
    MPT_DTYPE_BF16,    /* bfloat16, stored as uint16_t */
    MPT_DTYPE_U8,      /* unsigned bytes: image pixels, dropout masks */
    MPT_DTYPE_I32,     /* int32: labels, argmax indices, counters */
    MPT_DTYPE_E4M3,    /* OCP FP8 E4M3 ("E4M3FN"), stored as uint8_t: the operands of FP8 GEMMs, with a scale */
    MPT_DTYPE_E5M2,    /* OCP FP8 E5M2, stored as uint8_t: gradient operands of FP8 GEMMs, with a scale */
    MPT_DTYPE_E8M0,    /* OCP MX E8M0, stored as uint8_t: block scales (powers of two) of MXFP8 operands */
    MPT_DTYPE_COUNT
} mpt_dtype;

typedef enum mpt_math {
    MPT_MATH_FP32 = 0, /* FP32 operands, FP32 FMA: no Tensor Cores, no TF32 */
    MPT_MATH_TF32,     /* FP32 storage, operands rounded to TF32 (10 mantissa bits), FP32 accumulate */
    MPT_MATH_F16,      /* FP16 operands, FP32 accumulate */
    MPT_MATH_BF16,     /* BF16 operands, FP32 accumulate */
    MPT_MATH_FP8,      /* FP8 operands (E4M3/E5M2, each its own) with a scale per tensor; FP32 accumulate or Hopper's
                          narrower one (mpt_gemm_args.fp8_accum) */
    MPT_MATH_MXFP8,    /* FP8 operands with an E8M0 scale per block of 32 along K (OCP MX), FP32 accumulate */
    MPT_MATH_COUNT
} mpt_math;

/* Bytes per element (F32 4, F16 2, BF16 2, U8 1, I32 4, E4M3/E5M2/E8M0 1). */
MPT_API size_t mpt_dtype_size(mpt_dtype t);
/* "f32", "f16", "bf16", "u8", "i32", "e4m3", "e5m2", "e8m0". */
MPT_API const char *mpt_dtype_name(mpt_dtype t);
/* "fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8". */
MPT_API const char *mpt_math_name(mpt_math m);
/* Unit roundoff of the operand format of a math mode: 2^-24, 2^-11, 2^-11, 2^-8; FP8 and MXFP8: E4M3's, 2^-4
 * (E5M2 operands have 2^-3). */
MPT_API double mpt_math_unit_roundoff(mpt_math m);
/* Whether the dtype is an unscaled floating-point format (F32, F16, BF16): one whose elements are values. */
MPT_API int mpt_dtype_is_float(mpt_dtype t);
/* Whether the dtype is an FP8 element format (E4M3, E5M2), whose elements need a scale. */
MPT_API int mpt_dtype_is_fp8(mpt_dtype t);

/* Loads element i of a float buffer of dtype t (F32, F16 or BF16; E4M3, E5M2 or E8M0: the stored value, without
 * the tensor's scale) as FP32, exactly. */
static inline float mpt_load_f32(const void *p, mpt_dtype t, int64_t i) {
    switch (t) {
    case MPT_DTYPE_F16: return mpt_f16_to_f32(((const uint16_t *)p)[i]);
    case MPT_DTYPE_BF16: return mpt_bf16_to_f32(((const uint16_t *)p)[i]);
    case MPT_DTYPE_E4M3: return mpt_e4m3_to_f32(((const uint8_t *)p)[i]);
    case MPT_DTYPE_E5M2: return mpt_e5m2_to_f32(((const uint8_t *)p)[i]);
    case MPT_DTYPE_E8M0: return mpt_e8m0_to_f32(((const uint8_t *)p)[i]);
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
