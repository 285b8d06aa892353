/*
 * kernels/elemwise.h - per-element math, written once, compiled by gcc (CPU loops) and nvcc (CUDA kernels).
 *
 * Everything here is a pure function of its arguments: number-format conversions with round-to-nearest-even
 * (FP32 <-> FP16, FP32 <-> BF16, FP32 -> TF32), and (below) the per-element pieces of the activations and the
 * optimizers. The CPU loops in kernels/cpu and the kernels in kernels/cuda call the same functions, so the two
 * backends cannot drift apart.
 *
 * Formats (IEEE 754-2008 binary16; Google brain float; NVIDIA TensorFloat-32, Ampere whitepaper):
 *   format  sign exp mantissa  unit roundoff u   max finite      smallest normal   smallest subnormal
 *   FP32     1    8    23      2^-24             3.40e38         2^-126            2^-149
 *   TF32     1    8    10      2^-11             3.40e38         2^-126            (as FP32)
 *   FP16     1    5    10      2^-11             65504           2^-14             2^-24
 *   BF16     1    8     7      2^-8              3.39e38         2^-126            2^-133
 * FP16 and BF16 values are stored as uint16_t bit patterns; TF32 values are stored as FP32 with the low 13
 * mantissa bits zero. Conversions to the narrower formats round to nearest, ties to even (RNE); values past
 * the largest finite number round to +/-inf (FP16: |x| >= 65520 becomes inf, 65519.99 becomes 65504);
 * NaN stays NaN (quiet); subnormals are produced and consumed exactly. Widening conversions are exact.
 */
#ifndef MPT_KERNELS_ELEMWISE_H
#define MPT_KERNELS_ELEMWISE_H

#include <stdint.h>

#if defined(__CUDACC__)
#define MPT_HD static __host__ __device__ __forceinline__
#else
#define MPT_HD static inline
#endif

/* Bit casts between float and uint32_t (memcpy-free so both compilers keep them in registers). */
MPT_HD uint32_t mpt_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    union { float f; uint32_t u; } v; v.f = f; return v.u;
#endif
}
MPT_HD float mpt_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    union { float f; uint32_t u; } v; v.u = u; return v.f;
#endif
}

/* ---- BF16: the top 16 bits of an FP32 ------------------------------------------------------------- */

/* FP32 -> BF16, round to nearest even. NaN -> quiet NaN with the same sign; overflow rounds to inf
 * naturally because the exponent field is the same width as FP32's. */
MPT_HD uint16_t mpt_f32_to_bf16(float f) {
    uint32_t u = mpt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep it quiet */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb; /* RNE: add half-ulp-minus-one, plus one more when the kept lsb is odd */
    return (uint16_t)(u >> 16);
}

/* BF16 -> FP32, exact. */
MPT_HD float mpt_bf16_to_f32(uint16_t h) { return mpt_bits_f32((uint32_t)h << 16); }

/* ---- TF32: FP32 with 10 explicit mantissa bits ----------------------------------------------------- */

/* FP32 -> TF32 (returned as FP32 with the low 13 mantissa bits cleared), round to nearest even.
 * Values whose rounding carries past FLT_MAX become inf, as in any RNE narrowing. Note: NVIDIA's tensor
 * cores are documented to take TF32 operands; cuBLAS/cuDNN convert FP32 inputs with round-to-nearest
 * (cvt.rna: ties away from zero) on some paths and truncation on others. RNE is the reference here;
 * ties are rare on real data, so the two differ only in the last TF32 bit on exact halfway inputs. */
MPT_HD float mpt_round_tf32(float f) {
    uint32_t u = mpt_f32_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return f; /* inf and NaN pass through */
    uint32_t lsb = (u >> 13) & 1u;
    u += 0xfffu + lsb;
    u &= 0xffffe000u;
    return mpt_bits_f32(u);
}

/* ---- FP16: IEEE binary16 --------------------------------------------------------------------------- */

/* FP32 -> FP16, round to nearest even, with subnormals, overflow to inf, NaN kept NaN (quiet). */
MPT_HD uint16_t mpt_f32_to_f16(float f) {
    uint32_t u = mpt_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (or inf): inf */
    if (a >= 0x38800000u) {                                  /* >= 2^-14: normal FP16 */
        /* rebias exponent 127 -> 15 and round the 13 dropped mantissa bits to nearest even */
        uint32_t lsb = (a >> 13) & 1u;
        a += 0xfffu + lsb;
        return (uint16_t)(sign | ((a - 0x38000000u) >> 13));
    }
    if (a < 0x33000000u) return sign; /* < 2^-25 (half the smallest subnormal, tie included): +-0 */
    /* subnormal FP16: value = m * 2^-24 with m in [1, 1023]; shift the implicit-1 mantissa right. */
    {
        uint32_t e = a >> 23;                    /* FP32 biased exponent, 102..112 */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;               /* 14..24: bits dropped from the 24-bit significand */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q += 1u; /* may carry into the smallest normal: fine */
        return (uint16_t)(sign | q);
    }
}

/* FP16 -> FP32, exact (subnormals, inf and NaN included). */
MPT_HD float mpt_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t m = (uint32_t)h & 0x3ffu;
    if (e == 0x1fu) return mpt_bits_f32(sign | 0x7f800000u | (m << 13)); /* inf / NaN */
    if (e != 0) return mpt_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return mpt_bits_f32(sign);
    /* subnormal: m * 2^-24, exactly representable in FP32 */
    {
        float v = (float)m * 5.9604644775390625e-08f; /* 2^-24 */
        return sign ? -v : v;
    }
}

/* ---- Non-finite test without relying on the compiler's -ffast-math state ------------------------- */
MPT_HD int mpt_is_finite(float f) { return (mpt_f32_bits(f) & 0x7f800000u) != 0x7f800000u; }

/* ---- Activations ------------------------------------------------------------------------------------ */
MPT_HD float mpt_elem_relu(float x) { return x > 0.0f ? x : 0.0f; }
/* ReLU backward from the saved output y: dL/dx = dL/dy * [y > 0]. */
MPT_HD float mpt_elem_relu_grad(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

#endif /* MPT_KERNELS_ELEMWISE_H */
