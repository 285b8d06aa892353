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
    MPT_DTYPE_I8,      /* int8_t, two's complement: the codes of INT8 / INT4 quantized tensors (with a scale; INT4 codes
                          -7..7 held one per byte), the operands of the integer GEMM and convolution (engine/backend.h) */
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

/* ---- number formats: one row each (cpfloat's format struct; STYLE.md rule 9) ----------------------------------
 * A floating-point format is data: its field widths, bias, how it encodes inf and NaN, its range and unit roundoff.
 * The conversions that round into each format are engine/numerics.h's (per element, gcc and nvcc); this table is what
 * every other reader of a format's properties asks: the dtype table below, the telemetry's range counters
 * (engine/telemetry/range.c), `mptrain formats` (tools/formats.c) and the math modes' unit roundoff. tests/test_formats.c
 * checks every row against the decoders of engine/numerics.h. Sources: IEEE 754-2008 (binary32, binary16); Google's
 * bfloat16; NVIDIA TensorFloat-32 (Ampere whitepaper); OCP 8-bit Floating Point v1.0 (E4M3, E5M2); OCP Microscaling
 * Formats v1.0 (E8M0). */
typedef enum mpt_format {
    MPT_FORMAT_FP32 = 0,
    MPT_FORMAT_TF32, /* FP32 with 10 explicit mantissa bits: held in FP32 storage with the low 13 bits zero */
    MPT_FORMAT_BF16,
    MPT_FORMAT_FP16,
    MPT_FORMAT_E4M3, /* OCP FP8 E4M3 ("E4M3FN": no inf, one NaN pattern per sign) */
    MPT_FORMAT_E5M2, /* OCP FP8 E5M2 (IEEE-like) */
    MPT_FORMAT_E8M0, /* OCP MX block scale: unsigned powers of two 2^-127 .. 2^127, no zero, 0xff NaN */
    MPT_FORMAT_COUNT
} mpt_format;

/* How a format spends its top exponent field. */
typedef enum mpt_format_special {
    MPT_SPECIAL_IEEE = 0, /* all-ones exponent: inf (mantissa 0) or NaN (FP32, TF32, BF16, FP16, E5M2) */
    MPT_SPECIAL_FN,       /* no inf: only the all-ones pattern S.1111.111 is NaN, the rest of that binade is finite
                             (E4M3, "finite and NaN") */
    MPT_SPECIAL_E8M0,     /* 0xff is NaN; no inf, no sign, no zero */
} mpt_format_special;

typedef struct mpt_format_desc {
    const char *name;          /* "FP32", "TF32", "BF16", "FP16", "FP8 E4M3", "FP8 E5M2", "E8M0" */
    const char *short_name;    /* the same without "FP8 ": "E4M3", "E5M2" (in sentences) */
    int sign_bits;             /* 1, or 0 for E8M0 */
    int exp_bits, man_bits;    /* field widths; man_bits are the explicit mantissa bits (precision p = man_bits + 1) */
    int bias;                  /* exponent bias: value = 2^(field - bias) x 1.m for a normal number */
    mpt_format_special special;
    int has_subnormals;        /* 0 for E8M0 */
    int emin, emax;            /* binary exponents of the smallest normal and of the largest finite binade */
    uint32_t max_bits, min_normal_bits, min_subnormal_bits; /* the constants' bit patterns, right-aligned (TF32:
                                  its 19 bits, the top of an FP32; E8M0: min_subnormal = min_normal = 2^-127) */
    double max_finite, min_normal, min_subnormal; /* their values, exactly */
    double unit_roundoff;      /* 2^-p, the largest relative error of rounding to nearest in the normal range */
    int saturates;             /* overflow saturates to +-max_finite in training's casts by default (the FP8 formats:
                                  CUDA's __NV_SATFINITE, TransformerEngine; --fp8-saturate off makes it NaN / inf) */
} mpt_format_desc;

/* The row of a format (NULL for a value outside the enum). */
MPT_API const mpt_format_desc *mpt_format_info(mpt_format f);

/* ---- integer formats: a small table of their own ------------------------------------------------------------------
 * INT8 and INT4 are not rows of formats[]: every field there describes a floating-point grid (an exponent field and
 * its bias, emin/emax, subnormals, a unit roundoff that bounds the *relative* error of rounding), and its readers
 * (the telemetry's range counters, `mptrain formats`' table, tests/test_formats.c's decoder check) would all read
 * them as such. An integer grid has none of it: one step s everywhere (the scale), an absolute error of at most s / 2
 * and a relative error that grows without bound toward zero. Forcing the rows in would make the float rows' columns
 * lie or need an exception in each reader. The per-element conversions are engine/numerics.h's (mpt_int_quantize,
 * mpt_int_dequantize: symmetric, q = clamp(rint(x / s), -qmax, qmax), x' = q s). Sources: PyTorch's qint8 with
 * quant_min -127 (symmetric), TensorRT's INT8 range [-127, 127]; INT4 as in Wu et al. 2020 (arXiv 2004.09602). */
typedef enum mpt_int_format {
    MPT_INT_FORMAT_INT8 = 0,
    MPT_INT_FORMAT_INT4,
    MPT_INT_FORMAT_COUNT
} mpt_int_format;

typedef struct mpt_int_format_desc {
    const char *name;   /* "INT8", "INT4" */
    const char *key;    /* "int8", "int4": the name on the command line (--quantize, --qat) */
    int bits;           /* 8, 4: storage per element (INT4 packed two per byte in memory figures) */
    int qmax;           /* 127, 7: symmetric quantization uses the codes -qmax .. qmax */
    int code_min;       /* -128, -8: two's complement's lowest code, which symmetric quantization leaves unused */
} mpt_int_format_desc;

/* The row of an integer format (NULL outside the enum). */
MPT_API const mpt_int_format_desc *mpt_int_format_info(mpt_int_format f);

/* ---- quantization formats: what a tensor is quantized to (eval --quantize, train --qat) --------------------------
 * One row each: the two integer formats, FP8 E4M3 with a scale of the same rule, and BF16 as the 16-bit reference. The
 * scaled ones use s = amax / qmax (per tensor, or per row: per output channel) and x' = Q(x / s) s (engine/numerics.h
 * mpt_quant_fake): Q rounds to the integer codes -qmax..qmax (mpt_int_quantize), or to E4M3, saturating at 448
 * (mpt_f32_to_e4m3_sat). The FP8 training recipe writes the same scale the other way round (s' = 448 / amax, q =
 * round(x s'): engine/amp/fp8.h); dividing here keeps one rule for the three. BF16 needs no scale (its range is
 * FP32's): x' = RNE(x). */
typedef enum mpt_qformat {
    MPT_QFORMAT_INT8 = 0,
    MPT_QFORMAT_INT4,
    MPT_QFORMAT_E4M3,
    MPT_QFORMAT_BF16,
    MPT_QFORMAT_COUNT
} mpt_qformat;

typedef struct mpt_qformat_desc {
    const char *key;     /* "int8", "int4", "fp8-e4m3", "bf16": the name on the command line */
    const char *name;    /* "INT8", "INT4", "FP8 E4M3", "BF16" */
    int bits;            /* storage per element: 8, 4, 8, 16 */
    int qmax;            /* the largest magnitude a scaled element holds: 127, 7, 448; 0 for BF16 (no scale) */
    int kind;            /* MPT_QKIND_INT, MPT_QKIND_E4M3, MPT_QKIND_BF16 (engine/numerics.h) */
    int is_int;          /* integer codes (INT8, INT4): what the integer GEMM and convolution read */
    int scaled;          /* it has a scale (all but BF16) */
    int int_format;      /* its mpt_int_format, or -1 */
    int format;          /* its mpt_format (E4M3, BF16), or -1 */
} mpt_qformat_desc;

/* The row of a quantization format (NULL outside the enum). */
MPT_API const mpt_qformat_desc *mpt_qformat_info(mpt_qformat f);
/* The format whose key is s: 0 on success, -1 for an unknown name. */
MPT_API int mpt_qformat_parse(const char *s, mpt_qformat *out);

/* ---- storage dtypes: one row each -------------------------------------------------------------------------- */
typedef struct mpt_dtype_desc {
    const char *name;   /* "f32", "f16", "bf16", "u8", "i32", "e4m3", "e5m2", "e8m0", "i8" */
    size_t size;        /* bytes per element */
    int format;         /* the mpt_format its elements are in, or -1 (U8, I32, I8: integers) */
    int is_float;       /* an unscaled floating-point format: elements are values (F32, F16, BF16) */
    int is_fp8;         /* an FP8 element format: elements need a scale (E4M3, E5M2) */
} mpt_dtype_desc;

/* The row of a dtype (NULL outside the enum). */
MPT_API const mpt_dtype_desc *mpt_dtype_info(mpt_dtype t);

/* Bytes per element (F32 4, F16 2, BF16 2, U8 1, I32 4, E4M3/E5M2/E8M0 1, I8 1; 0 outside the enum). */
MPT_API size_t mpt_dtype_size(mpt_dtype t);
/* "f32", "f16", "bf16", "u8", "i32", "e4m3", "e5m2", "e8m0", "i8" ("?" outside the enum). */
MPT_API const char *mpt_dtype_name(mpt_dtype t);
/* Whether the dtype is an unscaled floating-point format (F32, F16, BF16): one whose elements are values. */
MPT_API int mpt_dtype_is_float(mpt_dtype t);
/* Whether the dtype is an FP8 element format (E4M3, E5M2), whose elements need a scale. */
MPT_API int mpt_dtype_is_fp8(mpt_dtype t);

/* ---- GEMM/convolution math modes: one row each ---------------------------------------------------------------- */
typedef struct mpt_math_desc {
    const char *name;         /* "fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8" */
    mpt_format operand;       /* the format operands are rounded to before the multiply (FP8 modes: E4M3, the
                                 forward operands'; their gradients may be E5M2) */
    int tensor_cores;         /* runs on Tensor Cores on the GPU (all but FP32) */
} mpt_math_desc;

/* The row of a math mode (NULL outside the enum). */
MPT_API const mpt_math_desc *mpt_math_info(mpt_math m);
/* "fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8" ("?" outside the enum). */
MPT_API const char *mpt_math_name(mpt_math m);
/* Unit roundoff of the operand format of a math mode: 2^-24, 2^-11, 2^-11, 2^-8; FP8 and MXFP8: E4M3's, 2^-4
 * (E5M2 operands have 2^-3); 1 outside the enum. */
MPT_API double mpt_math_unit_roundoff(mpt_math m);

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
