/*
 * engine/numerics.h - number formats and per-element training math, written once, compiled by gcc (CPU loops) and
 * nvcc (CUDA kernels).
 *
 * Everything here is a pure function of its arguments: number-format conversions with round-to-nearest-even
 * (FP32 <-> FP16, FP32 <-> BF16, FP32 -> TF32, FP32 <-> OCP FP8 E4M3/E5M2 and the MX block scale E8M0, with the
 * FP8 scale rules), and (below) the per-element pieces of the activations and the optimizers. The CPU loops in kernels/cpu and the kernels in kernels/cuda call the same functions, so the two
 * backends cannot drift apart.
 *
 * Formats (IEEE 754-2008 binary16; Google brain float; NVIDIA TensorFloat-32, Ampere whitepaper):
 *   format  sign exp mantissa  unit roundoff u   max finite      smallest normal   smallest subnormal
 *   FP32     1    8    23      2^-24             3.40e38         2^-126            2^-149
 *   TF32     1    8    10      2^-11             3.40e38         2^-126            (as FP32)
 *   FP16     1    5    10      2^-11             65504           2^-14             2^-24
 *   BF16     1    8     7      2^-8              3.39e38         2^-126            2^-133
 *   E4M3     1    4     3      2^-4              448 (no inf)    2^-6              2^-9
 *   E5M2     1    5     2      2^-3              57344           2^-14             2^-16
 *   E8M0     0    8     0      (powers of two 2^-127 .. 2^127 only; no zero, no sign: the MX block scale)
 * FP16 and BF16 values are stored as uint16_t bit patterns; TF32 values are stored as FP32 with the low 13
 * mantissa bits zero. Conversions to the narrower formats round to nearest, ties to even (RNE); values past
 * the largest finite number round to +/-inf (FP16: |x| >= 65520 becomes inf, 65519.99 becomes 65504);
 * NaN stays NaN (quiet); subnormals are produced and consumed exactly. Widening conversions are exact. FP8
 * overflow is a switch (saturating or not: see the FP8 section). FP8 and E8M0 values are uint8_t bit patterns.
 */
#ifndef MPT_ENGINE_NUMERICS_H
#define MPT_ENGINE_NUMERICS_H

#include <stdint.h>
#if !defined(__CUDACC__)
#include <math.h> /* rintf */
#endif

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

/* ---- Stochastic rounding ------------------------------------------------------------------------------ */
/*
 * Stochastic rounding (SR) of an FP32 value x into FP16/BF16: with lo the neighbour toward zero and hi the next
 * value away from zero, x becomes hi with probability frac = (|x| - |lo|) / ulp and lo otherwise, so the
 * expected result is x (unbiased) and the result is always one of the two neighbours. Small updates that
 * round-to-nearest would lose (below half an ulp of the weight) survive in expectation: Gupta et al. 2015,
 * "Deep Learning with Limited Numerical Precision"; Zamirai et al. 2020, "Revisiting BFloat16 Training";
 * llm.c's stochastic_rounding and torchao's _bf16_stochastic_round use the same bit trick for BF16.
 *
 * The random bits: Philox4x32-10 (Salmon et al. 2011, "Parallel Random Numbers: As Easy as 1, 2, 3"; the
 * generator of cuRAND's CURAND_RNG_PSEUDO_PHILOX4_32_10 and of Random123's philox4x32), evaluated per element
 * from a counter, so every element's bits are a pure function of (seed, iteration, element) on any backend
 * and in any order (mpt_sr_bits). NaN and inf round as with RNE.
 */

/* One Philox4x32-10 block: ctr (4 words) encrypted under key (2 words), written to out. The round constants
 * and the Weyl key increments are Random123's (philox.h: PHILOX_M4x32_0/1, PHILOX_W32_0/1); the result equals
 * Random123's philox4x32(ctr, key) (tests/test_dtype.c checks its published known-answer vectors). */
MPT_HD void mpt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The 32 random bits of element `element` at training iteration `iteration` for stream seed `seed`:
 * word (element & 3) of Philox4x32-10 with key = {seed low 32 bits, seed high 32 bits} and
 * counter = {q low, q high, iteration low, iteration high}, q = element >> 2 (one Philox block serves four
 * consecutive elements). The trainer numbers elements across all parameters in creation order, so no two
 * elements of one iteration share bits. */
MPT_HD uint32_t mpt_sr_bits(uint64_t seed, uint64_t iteration, uint64_t element) {
    const uint64_t q = element >> 2;
    const uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), (uint32_t)iteration, (uint32_t)(iteration >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    mpt_philox4x32_10(ctr, key, out);
    return out[element & 3];
}

/* FP32 -> BF16 with stochastic rounding from the random word r: the low 16 bits of r are added to the FP32
 * bit pattern and the result truncated, so x rounds away from zero with probability (low 16 bits of x) / 2^16,
 * exactly frac (every FP32 value lies on the 2^-16-ulp grid of its BF16 binade). A finite x above the largest
 * finite BF16 may round up to inf (its upper neighbour). NaN -> quiet NaN, inf -> inf. */
MPT_HD uint16_t mpt_f32_to_bf16_sr(float f, uint32_t r) {
    uint32_t u = mpt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return mpt_f32_to_bf16(f); /* NaN */
    if ((u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
    return (uint16_t)((u + (r & 0xffffu)) >> 16);
}

/* FP32 -> FP16 rounding toward zero (truncation): the FP16 neighbour of x toward zero. |x| >= 2^16 gives inf;
 * |x| in [65504, 65536) gives 65504 (whose next pattern, 0x7c00, is inf); |x| < 2^-24 gives 0. NaN -> quiet
 * NaN. */
MPT_HD uint16_t mpt_f32_to_f16_rtz(float f) {
    uint32_t u = mpt_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return mpt_f32_to_f16(f);           /* NaN */
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* >= 2^16 (or inf): inf */
    if (a >= 0x38800000u) return (uint16_t)(sign | ((a - 0x38000000u) >> 13)); /* normal: drop 13 bits */
    if (a < 0x33800000u) return sign;                        /* < 2^-24: 0 */
    {
        uint32_t e = a >> 23; /* 103..112: subnormal FP16, value = q * 2^-24 */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        return (uint16_t)(sign | (mant >> (126u - e)));
    }
}

/* FP32 -> FP16 with stochastic rounding from the random word r: lo = mpt_f32_to_f16_rtz(x), frac =
 * (|x| - |lo|) / ulp(lo) (both steps exact in FP32: Sterbenz, and a power-of-two divisor), and x rounds away
 * from zero iff (r >> 8) * 2^-24 < frac. P(away) = frac exactly whenever frac is a multiple of 2^-24, which
 * holds for every |x| >= 2^-25 (FP32 carries at least 24 bits below FP16's ulp there); below that the bias
 * is under 2^-24 ulp. Above the largest finite FP16 the upper neighbour is inf. NaN -> quiet NaN, inf -> inf. */
MPT_HD uint16_t mpt_f32_to_f16_sr(float f, uint32_t r) {
    uint32_t a = mpt_f32_bits(f) & 0x7fffffffu;
    if (a >= 0x7f800000u) return mpt_f32_to_f16(f); /* inf, NaN */
    uint16_t lo = mpt_f32_to_f16_rtz(f);
    uint16_t mag = (uint16_t)(lo & 0x7fffu);
    if (mag == 0x7c00u) return lo; /* |x| >= 2^16: inf */
    uint32_t e = (uint32_t)mag >> 10;
    float ulp = e == 0 ? 5.9604644775390625e-08f : mpt_bits_f32((e + 102u) << 23); /* 2^-24 or 2^(e-25) */
    float frac = (mpt_bits_f32(a) - mpt_f16_to_f32(mag)) / ulp;
    float draw = (float)(r >> 8) * 5.9604644775390625e-08f; /* 24 random bits as [0, 1) */
    return draw < frac ? (uint16_t)(lo + 1u) : lo;
}

/* ---- FP8 (OCP 8-bit floating point, v1.0, 2023; Micikevicius et al. 2022, arXiv 2209.05433) ---------------- */
/* E4M3 ("E4M3FN" in CUDA, PyTorch and ml_dtypes): 4 exponent bits (bias 7), 3 mantissa bits, no infinities;
 * S.1111.111 is NaN, so the largest finite value is S.1111.110 = 1.75 * 2^8 = 448; smallest normal 2^-6,
 * smallest subnormal 2^-9.
 * E5M2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: exponent 11111 is inf (mantissa 0) or NaN;
 * largest finite 1.75 * 2^15 = 57344, smallest normal 2^-14, smallest subnormal 2^-16.
 * FP32 -> FP8 rounds to nearest, ties to even, on the grid with an unbounded exponent (IEEE 754's definition of
 * overflow), subnormals kept. What happens past the largest finite value is a switch, because stacks disagree:
 *   saturating (CUDA __NV_SATFINITE, the cvt.rn.satfinite instruction; what TransformerEngine's casts and
 *     cuBLASLt's FP8 outputs use, and mptrain's training default): a finite value that rounds past the largest
 *     finite one, and +-inf, become +-max (448 / 57344);
 *   non-saturating (CUDA __NV_NOSAT; ml_dtypes' and PyTorch's plain casts): E4M3 overflows to NaN (sign kept:
 *     S.1111.111, it has no inf), from 464 up (464 itself, halfway between 448 and 480, ties to 448, whose
 *     mantissa 110 is even); E5M2 overflows to +-inf from 61440 up (the tie between 57344 and 65536 goes up: the
 *     mantissa of 57344 is odd); inf stays inf in E5M2 and becomes NaN in E4M3.
 * NaN becomes the canonical 0x7f in both formats (sign dropped), as CUDA's conversions return it
 * (cuda_fp8.hpp __nv_cvt_float_to_fp8). tests/test_fp8.c compares both modes with that reference
 * implementation of NVIDIA's (host code of cuda_fp8.hpp) where the toolkit is installed. Decoding is exact. */

#define MPT_E4M3_MAX 448.0f
#define MPT_E5M2_MAX 57344.0f
/* The exponent of the largest power of two an element format holds (floor(log2(max))): OCP MX v1.0's
 * emax_elem, which the block scale rule subtracts (E4M3 8, E5M2 15). */
#define MPT_E4M3_EMAX 8
#define MPT_E5M2_EMAX 15
#define MPT_FP8_NAN 0x7fu

/* |f| rounded to nearest even on the grid of a format with man_bits mantissa bits and smallest normal
 * exponent emin, encoded with bias; max_finite is the largest finite magnitude and max_code its pattern;
 * overflow_code the magnitude bits a non-saturating overflow produces. */
MPT_HD uint8_t mpt_f32_to_fp8_rne(float f, int man_bits, int emin, int bias, float max_finite, uint8_t max_code,
                                  uint8_t overflow_code, int saturate) {
    uint32_t u = mpt_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    float a = mpt_bits_f32(u & 0x7fffffffu);
    if (!(a == a)) return (uint8_t)MPT_FP8_NAN;
    /* the grid's next point past the largest is max + 2^(emax - man_bits); the midpoint to it is where
     * rounding overflows (a tie there goes to whichever of the two has an even mantissa) */
    if (a >= 2.0f * max_finite) return (uint8_t)(sign | (saturate ? max_code : overflow_code)); /* inf too */
    int32_t e = (int32_t)((u >> 23) & 0xffu) - 127; /* FP32 subnormals (e = -127) sit far below emin */
    if (e < emin) e = emin;
    float q = mpt_bits_f32((uint32_t)(e - man_bits + 127) << 23); /* the grid spacing 2^(e - man_bits) */
    float r = rintf(a / q) * q; /* a / q and the product are exact (powers of two); rintf rounds ties to even */
    if (r > max_finite) return (uint8_t)(sign | (saturate ? max_code : overflow_code));
    if (r == 0.0f) return sign;
    uint32_t ru = mpt_f32_bits(r);
    int32_t re = (int32_t)((ru >> 23) & 0xffu) - 127;
    if (re < emin) /* subnormal: r = m * 2^(emin - man_bits) */
        return (uint8_t)(sign | (uint8_t)(r / q));
    uint32_t mant = (ru >> (23 - man_bits)) & ((1u << man_bits) - 1u);
    return (uint8_t)(sign | (uint8_t)((uint32_t)(re + bias) << man_bits) | (uint8_t)mant);
}

/* FP32 -> E4M3 / E5M2, non-saturating (overflow -> NaN / inf). */
MPT_HD uint8_t mpt_f32_to_e4m3(float f) { return mpt_f32_to_fp8_rne(f, 3, -6, 7, 448.0f, 0x7eu, 0x7fu, 0); }
MPT_HD uint8_t mpt_f32_to_e5m2(float f) { return mpt_f32_to_fp8_rne(f, 2, -14, 15, 57344.0f, 0x7bu, 0x7cu, 0); }
/* FP32 -> E4M3 / E5M2, saturating (overflow and inf -> +-max). */
MPT_HD uint8_t mpt_f32_to_e4m3_sat(float f) { return mpt_f32_to_fp8_rne(f, 3, -6, 7, 448.0f, 0x7eu, 0x7fu, 1); }
MPT_HD uint8_t mpt_f32_to_e5m2_sat(float f) { return mpt_f32_to_fp8_rne(f, 2, -14, 15, 57344.0f, 0x7bu, 0x7cu, 1); }
/* Either format (e5m2: 0 for E4M3, 1 for E5M2), either overflow mode. */
MPT_HD uint8_t mpt_f32_to_fp8(float f, int e5m2, int saturate) {
    return e5m2 ? mpt_f32_to_fp8_rne(f, 2, -14, 15, 57344.0f, 0x7bu, 0x7cu, saturate)
                : mpt_f32_to_fp8_rne(f, 3, -6, 7, 448.0f, 0x7eu, 0x7fu, saturate);
}

/* FP8 bits -> FP32, exact. */
MPT_HD float mpt_fp8_to_f32(uint8_t b, int man_bits, int exp_bits, int bias, int has_inf) {
    uint32_t sign = ((uint32_t)b & 0x80u) << 24;
    uint32_t e = ((uint32_t)b >> man_bits) & ((1u << exp_bits) - 1u);
    uint32_t m = (uint32_t)b & ((1u << man_bits) - 1u);
    uint32_t emax_field = (1u << exp_bits) - 1u;
    if (has_inf && e == emax_field) return mpt_bits_f32(sign | 0x7f800000u | (m ? 0x400000u : 0u));
    if (!has_inf && e == emax_field && m == (1u << man_bits) - 1u) return mpt_bits_f32(sign | 0x7fc00000u);
    if (e == 0) { /* subnormal: m * 2^(1 - bias - man_bits) */
        float v = (float)m * mpt_bits_f32((uint32_t)(1 - bias - man_bits + 127) << 23);
        return sign ? -v : v;
    }
    return mpt_bits_f32(sign | ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - man_bits)));
}

MPT_HD float mpt_e4m3_to_f32(uint8_t b) { return mpt_fp8_to_f32(b, 3, 4, 7, 0); }
MPT_HD float mpt_e5m2_to_f32(uint8_t b) { return mpt_fp8_to_f32(b, 2, 5, 15, 1); }
MPT_HD float mpt_fp8_decode(uint8_t b, int e5m2) { return e5m2 ? mpt_e5m2_to_f32(b) : mpt_e4m3_to_f32(b); }

/* ---- E8M0: the MX block scale (OCP Microscaling Formats (MX) v1.0, section 5.4.1) -------------------------- */
/* 8 exponent bits, bias 127, no sign, no mantissa, no zero, no inf: code c is 2^(c - 127) for c in 0..254
 * (2^-127, code 0, is an FP32 subnormal), 0xff is NaN. */
#define MPT_E8M0_NAN 0xffu

/* E8M0 -> FP32, exact. */
MPT_HD float mpt_e8m0_to_f32(uint8_t c) {
    if (c == 0xffu) return mpt_bits_f32(0x7fc00000u);
    if (c == 0u) return mpt_bits_f32(0x00400000u); /* 2^-127 */
    return mpt_bits_f32((uint32_t)c << 23);
}

/* 2^k as FP32 for k in [-127, 127] (exact; 2^-127 is subnormal). */
MPT_HD float mpt_pow2f(int32_t k) {
    return k >= -126 ? mpt_bits_f32((uint32_t)(k + 127) << 23) : mpt_bits_f32(0x00400000u);
}

/* FP32 -> E8M0 rounding to nearest (ties to the even code): what `mptrain formats` shows. x in
 * [2^e, 2^(e+1)) goes up from 1.5 * 2^e, the midpoint. Values below 2^-127 (zero included) and at or above
 * 2^127 * 1.5 have no nearer code than the ends, which they take (0 and 254); negative values, NaN and inf,
 * which E8M0 cannot hold, give NaN. */
MPT_HD uint8_t mpt_f32_to_e8m0(float f) {
    uint32_t u = mpt_f32_bits(f);
    if ((u >> 31) != 0u && (u & 0x7fffffffu) != 0u) return (uint8_t)MPT_E8M0_NAN;
    u &= 0x7fffffffu;
    if (u >= 0x7f800000u) return (uint8_t)MPT_E8M0_NAN;
    if (u <= 0x00400000u) return 0u; /* at or below 2^-127 */
    if (u < 0x00800000u) return u > 0x00600000u ? 1u : 0u; /* between 2^-127 and 2^-126: midpoint 1.5 * 2^-127 */
    uint32_t c = u >> 23, m = u & 0x7fffffu;
    if (m > 0x400000u || (m == 0x400000u && (c & 1u))) c += 1u;
    return (uint8_t)(c > 254u ? 254u : c);
}

/* FP32 -> E8M0 rounding up (toward +inf), saturating at 2^127 (code 254): the smallest power of two >= d, for a
 * finite d > 0; 0 gives code 0. CUDA's cvt.rp.satfinite.ue8m0x2.f32 (cuda_fp8.hpp __nv_cvt_float_to_e8m0 with
 * __NV_SATFINITE and cudaRoundPosInf; tests/test_fp8.c compares the two). */
MPT_HD uint8_t mpt_f32_to_e8m0_ru(float d) {
    uint32_t du = mpt_f32_bits(d) & 0x7fffffffu, field = du >> 23, mant = du & 0x7fffffu;
    uint32_t c = field == 0u ? (mant > 0x400000u ? 1u : 0u) /* FP32 subnormal: code 0 is 2^-127 = 0x00400000 */
                             : field + (mant != 0u ? 1u : 0u);
    return (uint8_t)(c > 254u ? 254u : c);
}

/* How an MX block scale is chosen from the block's amax (torchao ScaleCalculationMode, which documents all three;
 * torchao/prototype/mx_formats/mx_tensor.py to_mx):
 *   FLOOR  the OCP MX v1.0 rule (section 6.3): X = 2^(floor(log2(amax)) - emax_elem). Elements of the block
 *          between max * X and 2 * 2^emax_elem * X (E4M3: 448 and 512, times X) saturate.
 *   CEIL   2^(ceil(log2(amax)) - emax_elem): nothing saturates, one binade of precision may be lost.
 *   RCEIL  2^ceil(log2(amax / max)), amax / max computed as FP32 amax * (1/max) (1/max rounded to FP32): the
 *          smallest power of two that maps amax to at most max; cuBLAS's and TransformerEngine's MXFP8 rule
 *          (the cvt.rp.satfinite.ue8m0x2.f32 instruction on sm_100; cuBLAS documentation "1D block scaling").
 * FLOOR and CEIL read the exponent field of the FP32 amax as torchao does (an FP32-subnormal amax counts as
 * 2^-127); the unbiased exponent is clamped to [-127, 127]. An all-zero block gets code 0 (2^-127, as torchao's
 * clamp gives); a NaN or inf amax gets the NaN code 0xff. */
typedef enum mpt_mx_rounding { MPT_MX_FLOOR = 0, MPT_MX_CEIL, MPT_MX_RCEIL } mpt_mx_rounding;

/* The E8M0 code of the block scale for a block of amax `amax` (>= 0, or NaN/inf) in element format e5m2
 * (0: E4M3, 1: E5M2) by rule `mode`. */
MPT_HD uint8_t mpt_mx_scale_code(float amax, int e5m2, int mode) {
    uint32_t u = mpt_f32_bits(amax) & 0x7fffffffu;
    if (u >= 0x7f800000u) return (uint8_t)MPT_E8M0_NAN;
    if (u == 0u) return 0u;
    int32_t emax = e5m2 ? MPT_E5M2_EMAX : MPT_E4M3_EMAX, k;
    if (mode == MPT_MX_RCEIL) return mpt_f32_to_e8m0_ru(mpt_bits_f32(u) * (e5m2 ? 1.0f / 57344.0f : 1.0f / 448.0f));
    k = (int32_t)(u >> 23) - 127;
    if (mode == MPT_MX_CEIL && (u & 0x7fffffu) != 0u) k += 1;
    k -= emax;
    if (k < -127) k = -127;
    if (k > 127) k = 127;
    return (uint8_t)(k + 127);
}

/* ---- Per-tensor FP8 scaling (TransformerEngine; engine/amp/fp8.h has the recipe) --------------------------- */
/* The scale s of a tensor whose amax is `amax`, for a format whose largest finite value times 2^-margin is
 * `scaled_max` (FP32, exact: a power-of-two factor): s = scaled_max / amax, one FP32 division
 * (TransformerEngine transformer_engine/common/recipe/delayed_scaling.cu: scale = scaled_max / amax, with
 * scaled_max = fp8_max * 2^-margin). A scale that overflows FP32 (a tiny amax) becomes FLT_MAX, and with pow2 the
 * scale is rounded down to a power of two by clearing its mantissa (TE recipe_common.cuh
 * compute_scale_from_amax: value_for_inf, force_pow_2_scales). An amax that is 0, NaN or inf gives `fallback`
 * (delayed scaling: the previous scale, as TE's update keeps it; current scaling: 1, as TE's
 * compute_scale_from_amax returns). */
MPT_HD float mpt_fp8_scale_from_amax(float amax, float scaled_max, int pow2, float fallback) {
    if (!(amax > 0.0f) || (mpt_f32_bits(amax) & 0x7f800000u) == 0x7f800000u) return fallback;
    float s = scaled_max / amax;
    if ((mpt_f32_bits(s) & 0x7f800000u) == 0x7f800000u) s = 3.40282346638528859812e+38f; /* FLT_MAX */
    if (pow2) s = mpt_bits_f32(mpt_f32_bits(s) & 0xff800000u);
    return s;
}

/* ---- Symmetric integer quantization (INT8, INT4) ------------------------------------------------------------ */
/* A signed integer format of b bits holds two's complement codes -2^(b-1) .. 2^(b-1) - 1; symmetric quantization
 * uses -qmax .. qmax with qmax = 2^(b-1) - 1 (INT8 127, INT4 7) and leaves the code -2^(b-1) unused, so that zero is
 * exact and the grid is the same on both sides (PyTorch's torch.qint8 with qscheme per_tensor_symmetric /
 * per_channel_symmetric and quant_min = -127; NVIDIA TensorRT's INT8 "symmetric, [-127, 127]"; Jacob et al. 2018,
 * "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", with zero point 0;
 * Wu et al. 2020, "Integer Quantization for Deep Learning Inference", arXiv 2004.09602, section 3). With a scale
 * s > 0 (FP32), the code of x and what it stands for are
 *     q  = clamp(round_half_even(x / s), -qmax, qmax),       x' = q * s,
 * x / s one IEEE FP32 division (correctly rounded on both compilers: nvcc's default -prec-div=true), rounded to an
 * integer by rintf (ties to even in the default rounding mode). The grid is uniform: step s, no exponent, so the
 * error |x' - x| is at most s / 2 for |x| <= qmax * s (absolute, whatever |x|: relative error is unbounded toward
 * zero, where values below s / 2 become 0), and values past (qmax + 1/2) s clamp to +-qmax * s. The scale from a
 * tensor's (or a row's) largest magnitude, amax, is s = amax / qmax (one FP32 division), which puts amax on the top
 * code and clamps nothing (Wu et al.'s "max" calibration). The quotient x / s is rounded to FP32 before rintf, so a
 * value within an FP32 ulp of a half can become an exact tie: the result is the rounding of the FP32 quotient,
 * which is what both backends compute (PyTorch's fake_quantize multiplies by 1/s instead: a last-bit difference of
 * the quotient is possible there). */
#define MPT_INT8_QMAX 127
#define MPT_INT4_QMAX 7

/* s = amax / qmax for amax > 0 and finite; 1 for an amax that is 0, NaN or inf (an all-zero tensor quantizes to 0
 * with any scale; a non-finite one has no meaningful grid, and its NaN/inf elements stay what mpt_int_quantize
 * makes of them). */
MPT_HD float mpt_int_scale_from_amax(float amax, int qmax) {
    if (!(amax > 0.0f) || (mpt_f32_bits(amax) & 0x7f800000u) == 0x7f800000u) return 1.0f;
    return amax / (float)qmax;
}

/* q = clamp(rint(x / s), -qmax, qmax) for s > 0; NaN gives 0 (integers have no NaN); +-inf clamp to +-qmax. */
MPT_HD int32_t mpt_int_quantize(float x, float s, int qmax) {
    if (!(x == x)) return 0;
    float r = rintf(x / s);
    if (r > (float)qmax) return qmax;
    if (r < -(float)qmax) return -qmax;
    return (int32_t)r;
}

/* x' = q * s (one FP32 product: exact while q * s has at most 24 significant bits, always for INT8 and INT4 codes
 * times a scale whose significand has at most 17 bits; otherwise rounded once, RNE). */
MPT_HD float mpt_int_dequantize(int32_t q, float s) { return (float)q * s; }

/* The value x stands for on the grid of scale s: mpt_int_dequantize(mpt_int_quantize(x, s, qmax), s) ("fake
 * quantization"). */
MPT_HD float mpt_int_fake_quant(float x, float s, int qmax) {
    return mpt_int_dequantize(mpt_int_quantize(x, s, qmax), s);
}

/* What a quantization format rounds to (engine/dtype.h mpt_qformat_desc.kind). */
#define MPT_QKIND_INT 0  /* integer codes -qmax..qmax with a scale */
#define MPT_QKIND_E4M3 1 /* FP8 E4M3 with a scale, saturating at +-448 */
#define MPT_QKIND_BF16 2 /* BF16, round to nearest even, no scale (the 16-bit reference) */

/* The value x stands for when quantized with scale s: to the integer codes -qmax..qmax (MPT_QKIND_INT, x' = q s), to
 * FP8 E4M3 (x' = e4m3_sat(x / s) s, one FP32 division and one product), or to BF16 (x' = RNE(x); s unused): the
 * per-element rule of engine/dtype.h's quantization formats. */
MPT_HD float mpt_quant_fake(float x, float s, int qmax, int kind) {
    if (kind == MPT_QKIND_E4M3) return mpt_e4m3_to_f32(mpt_f32_to_e4m3_sat(x / s)) * s;
    if (kind == MPT_QKIND_BF16) return mpt_bf16_to_f32(mpt_f32_to_bf16(x));
    return mpt_int_fake_quant(x, s, qmax);
}

/* One output of an integer GEMM or convolution: the exact int32 sum of integer products `acc`, converted to FP32
 * (exact while |acc| <= 2^24, else rounded once, RNE), times the combined scale s_x * s_w (one FP32 product the
 * caller forms), plus the bias, with one rounding (fmaf): y = fl(fl(acc) * scale + bias). */
MPT_HD float mpt_int_rescale(int32_t acc, float scale, float bias) { return fmaf((float)acc, scale, bias); }

/* ---- Non-finite test without relying on the compiler's -ffast-math state ------------------------- */
MPT_HD int mpt_is_finite(float f) { return (mpt_f32_bits(f) & 0x7f800000u) != 0x7f800000u; }

/* ---- Activations ------------------------------------------------------------------------------------ */
MPT_HD float mpt_elem_relu(float x) { return x > 0.0f ? x : 0.0f; }
/* Whether the ReLU passes the gradient, from its saved output y: [y > 0] (0 for y = +-0 and NaN). The bit of the
 * fused epilogues' ReLU bitmask (engine/backend.h, MPT_EPILOGUE_RELU_AUX_BIAS) for a stored output y. */
MPT_HD int mpt_elem_relu_mask(float y) { return y > 0.0f; }
/* The ReLU gradient through a mask bit: v if it passes, else +0 (MPT_EPILOGUE_DRELU_BGRAD). */
MPT_HD float mpt_elem_drelu(float v, int pass) { return pass ? v : 0.0f; }
/* ReLU backward from the saved output y: dL/dx = dL/dy * [y > 0]. */
MPT_HD float mpt_elem_relu_grad(float dy, float y) { return mpt_elem_drelu(dy, mpt_elem_relu_mask(y)); }

/* ---- Max pooling's window arithmetic (square window k, stride s, zero padding pad <= k/2; PyTorch's MaxPool2d) ------ */
/* The input rows [*lo, *hi) that output row p's window covers, clipped to the input's H rows (columns alike). */
MPT_HD void mpt_pool_window(int p, int s, int pad, int k, int H, int *lo, int *hi) {
    int a = p * s - pad, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > H ? H : b;
}
/* The output rows [*p0, *p1] (p0 > p1: none) whose windows cover input row h: p * s - pad <= h < p * s - pad + k,
 * clipped to the output's P rows (columns alike). */
MPT_HD void mpt_pool_covering(int h, int s, int pad, int k, int P, int *p0, int *p1) {
    *p0 = h + pad - k + 1 <= 0 ? 0 : (h + pad - k + 1 + s - 1) / s;
    int b = (h + pad) / s;
    *p1 = b > P - 1 ? P - 1 : b;
}

/* ---- Smooth activations and leaky ReLU (forward from x; backward from x or the saved output y) -----------------
 * Each is computed in FP32 on the exactly widened input and rounded once to the output dtype by the caller. The
 * transcendental functions are the C library's on the CPU and CUDA's on the GPU (erff, expf, tanhf: at most 2 ulp
 * from the correctly rounded value in CUDA's programming guide, table "Single-Precision Mathematical Functions"),
 * so the two backends agree within a few FP32 ulps before the output's rounding, not bit for bit.
 *   gelu       y = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (exact form: torch.nn.GELU(approximate='none'));
 *              dy/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) (PyTorch's GeluBackward)
 *   tanh       y = tanh(x); dy/dx = 1 - y^2 from the saved output (torch.tanh's tanh_backward)
 *   sigmoid    y = 1 / (1 + exp(-x)); dy/dx = y (1 - y) from the saved output (torch.sigmoid's sigmoid_backward)
 *   leakyrelu  y = x > 0 ? x : a x; dy/dx = x > 0 ? 1 : a, from the input (torch.nn.LeakyReLU(negative_slope=a),
 *              leaky_relu_backward; NaN stays NaN) */
typedef enum mpt_act { MPT_ACT_GELU = 0, MPT_ACT_TANH, MPT_ACT_SIGMOID, MPT_ACT_LEAKYRELU, MPT_ACT_COUNT } mpt_act;

MPT_HD float mpt_elem_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
MPT_HD float mpt_elem_gelu_grad(float dy, float x) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;
    return dy * fmaf(x, pdf, cdf);
}
MPT_HD float mpt_elem_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
MPT_HD float mpt_elem_leakyrelu(float x, float a) { return x > 0.0f ? x : x * a; }

/* y = act(x) (alpha: the leaky ReLU's negative slope, unused otherwise). */
MPT_HD float mpt_elem_act(int kind, float x, float alpha) {
    switch (kind) {
    case MPT_ACT_GELU: return mpt_elem_gelu(x);
    case MPT_ACT_TANH: return tanhf(x);
    case MPT_ACT_SIGMOID: return mpt_elem_sigmoid(x);
    default: return mpt_elem_leakyrelu(x, alpha);
    }
}
/* dL/dx from dL/dy and the saved input x and output y (each activation reads the one its formula needs). */
MPT_HD float mpt_elem_act_grad(int kind, float dy, float x, float y, float alpha) {
    switch (kind) {
    case MPT_ACT_GELU: return mpt_elem_gelu_grad(dy, x);
    case MPT_ACT_TANH: return dy * fmaf(-y, y, 1.0f);
    case MPT_ACT_SIGMOID: return dy * (y * (1.0f - y));
    default: return x > 0.0f ? dy : dy * alpha;
    }
}

/* ---- Normalisation (batch norm, layer norm): the per-element pieces, in FP32 -----------------------------------
 * x^ = (x - mean) * rstd, rstd = 1 / sqrt(var + eps); y = x^ gamma + beta (one fmaf, so no contraction decides it);
 * backward with k = gamma * rstd for batch norm (mean over the n elements of a channel) or per feature for layer
 * norm: dx = rstd (g - mean(g) - x^ mean(g x^)), g = dy gamma (Ioffe & Szegedy 2015, section 3; the same formula as
 * PyTorch's batch_norm_backward and layer_norm_backward). Sums are the callers'. */
/* One term of the second pass of the variance: acc + (x - mean)^2, the square and the sum in one fmaf. */
MPT_HD float mpt_elem_sq_dev(float acc, float x, float mean) {
    const float d = x - mean;
    return fmaf(d, d, acc);
}
MPT_HD float mpt_elem_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }
MPT_HD float mpt_elem_norm(float x, float mean, float rstd, float gamma, float beta) {
    return fmaf((x - mean) * rstd, gamma, beta);
}
/* dx = scale * (g - mean_g - x^ mean_gx), scale = rstd (layer norm, g = dy gamma) or gamma rstd (batch norm, g =
 * dy). */
MPT_HD float mpt_elem_norm_dx(float g, float xhat, float mean_g, float mean_gx, float scale) {
    return scale * fmaf(-xhat, mean_gx, g - mean_g);
}
/* A running statistic after one batch: (1 - momentum) r + momentum s (torch.nn.BatchNorm2d's update). */
MPT_HD float mpt_elem_running(float r, float s, float momentum) { return fmaf(momentum, s, (1.0f - momentum) * r); }
/* The statistics of an ablation row of --norm-stats (engine/amp/policy.h, mpt_norm_stats): v rounded to nearest even in
 * format fmt and widened back exactly, the value a register of that format holds: fmt takes mpt_dtype's values 0 (F32:
 * v itself), 1 (F16) and 2 (BF16) (kernels/cpu/norm.c asserts the correspondence). */
MPT_HD float mpt_elem_stat_round(float v, int fmt) {
    return fmt == 1 ? mpt_f16_to_f32(mpt_f32_to_f16(v)) : fmt == 2 ? mpt_bf16_to_f32(mpt_f32_to_bf16(v)) : v;
}

/* ==== Optimizer and loss-scaler per-element math ====================================================== */
/*
 * One element (or one scalar) of each FP32 update of the training step, as PyTorch computes it:
 *   unscale + non-finite check   torch._amp_foreach_non_finite_check_and_unscale_ (GradScaler.unscale_)
 *   clip coefficient             torch.nn.utils.clip_grad_norm_
 *   SGD / Adam / AdamW           torch.optim.SGD / Adam / AdamW, single-tensor path (foreach=False, no amsgrad)
 *   loss-scale update            torch._amp_update_scale_, plus hysteresis, floor and ceiling
 * The formulas, their sources and the state they touch are documented in engine/optim/optim.h and
 * engine/amp/scaler.h; the CPU loops (kernels/cpu/optim.c) and the CUDA kernels call these functions.
 *
 * Bit-identical on both compilers: every multiply-add is an explicit fmaf()/fma() and no other product feeds
 * a sum, so the result does not depend on floating-point contraction (gcc -std=c11 does not contract,
 * nvcc -fmad=true does). With IEEE sqrtf and division on the GPU (nvcc's defaults; not --use_fast_math) the
 * CPU and CUDA backends produce the same bits. The per-step scalars (bias corrections, AdamW's decay factor)
 * are computed in FP64, as PyTorch computes them in Python floats, and rounded once to FP32; powers use
 * repeated squaring rather than pow() so that host and device agree.
 */
#include <math.h>

/* x^t for an integer t >= 0, by repeated squaring in FP64 (relative error < 2*log2(t+1)*2^-53). */
MPT_HD double mpt_pow_int(double x, int32_t t) {
    double r = 1.0;
    while (t > 0) {
        if (t & 1) r *= x;
        x *= x;
        t >>= 1;
    }
    return r;
}

/* Gradient unscale for one element: *g *= inv_scale (the scaled value is written even when non-finite, as
 * PyTorch does). Returns 1 when *g was or became inf/NaN, else 0; the caller ORs these into found_inf. */
MPT_HD int mpt_elem_unscale(float *g, float inv_scale) {
    float x = *g;
    float y = x * inv_scale;
    *g = y;
    int bad_x = !mpt_is_finite(x), bad_y = !mpt_is_finite(y);
    return bad_x | bad_y; /* int flags ORed bitwise: both tested, no branch */
}

/* The learning rate at 0-based iteration t of a schedule (engine/optim/schedule.h has the formulas and the
 * checks; kind: 0 constant, 1 step, 2 cosine, as mpt_lr_kind), in FP64 rounded once to FP32. The host
 * (mpt_lr_at) and both backends (lr_update) call this one function; on the GPU pow and cos are CUDA's FP64
 * functions, whose last bit may differ from glibc's, so a GPU run's learning rate can differ from the host's
 * mpt_lr_at by one FP32 unit in the last place in rare cases (never for constant or warmup values). */
MPT_HD float mpt_lr_eval(int kind, float base_lr, float min_lr, int64_t warmup, int64_t total, int64_t step_size,
                         float gamma, int64_t t) {
    const double base = base_lr;
    if (kind == 1) return (float)(base * pow((double)gamma, (double)(t / step_size)));
    if (kind == 2) {
        if (t < warmup) return (float)(base * (double)(t + 1) / (double)warmup);
        if (t >= total) return min_lr;
        const double pi = 3.14159265358979323846;
        double frac = (double)(t - warmup) / (double)(total - warmup);
        return (float)((double)min_lr + (base - (double)min_lr) * (1.0 + cos(pi * frac)) / 2.0);
    }
    return base_lr;
}

/* Clip coefficient from the sum of squares of all (unscaled) gradients:
 * min(1, max_norm / (sqrt(sumsq) + 1e-6)) (torch.nn.utils.clip_grad_norm_ with norm_type 2; the 1e-6 is its
 * epsilon). A NaN sumsq (non-finite gradients: the step is skipped anyway) gives 1. */
MPT_HD float mpt_clip_coef(float sumsq, float max_norm) {
    float c = max_norm / (sqrtf(sumsq) + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

/* Adam/AdamW step size lr / (1 - beta1^t) for the 1-based step t (t >= 1), FP64 rounded once to FP32. */
MPT_HD float mpt_adam_step_size(float lr, float beta1, int32_t t) {
    return (float)((double)lr / (1.0 - mpt_pow_int((double)beta1, t)));
}

/* Adam/AdamW sqrt(1 - beta2^t) for the 1-based step t (t >= 1), FP64 rounded once to FP32. */
MPT_HD float mpt_adam_bc2_sqrt(float beta2, int32_t t) {
    return (float)sqrt(1.0 - mpt_pow_int((double)beta2, t));
}

/* AdamW's decoupled weight-decay factor 1 - lr * weight_decay (the FP32 product is exact in FP64; rounded
 * once to FP32). */
MPT_HD float mpt_adamw_decay(float lr, float weight_decay) {
    return (float)(1.0 - (double)lr * (double)weight_decay);
}

/* One element of torch.optim.SGD. p: weight (FP32 value, updated in place); buf: momentum buffer (not touched
 * when momentum == 0); g: unscaled gradient, multiplied by grad_mul (clip coefficient, 1 without clipping);
 * first: nonzero on the first step (t == 1), where the buffer is initialised to the gradient.
 *   d = g*grad_mul + weight_decay*p
 *   buf = first ? d : momentum*buf + (1 - dampening)*d          (if momentum != 0)
 *   d = nesterov ? d + momentum*buf : buf                        (if momentum != 0)
 *   p = p - lr*d                                                 (one fmaf: the product is not rounded)
 * Returns the update term -lr*d rounded to FP32 (the "update delta" of mpt_optim_args.update_out); callers
 * that ignore it pay nothing (the product is dead code). */
MPT_HD float mpt_elem_sgd(float *p, float *buf, float g, float grad_mul, float lr, float momentum,
                          float dampening, float weight_decay, int nesterov, int first) {
    float pv = *p;
    float d = g * grad_mul;
    if (weight_decay != 0.0f) d = fmaf(weight_decay, pv, d);
    if (momentum != 0.0f) {
        float b = first ? d : fmaf(1.0f - dampening, d, *buf * momentum);
        *buf = b;
        d = nesterov ? fmaf(momentum, b, d) : b;
    }
    *p = fmaf(-lr, d, pv);
    return -lr * d;
}

/* One element of torch.optim.Adam (l2 = weight_decay, decay = 1) or torch.optim.AdamW (l2 = 0,
 * decay = mpt_adamw_decay(lr, weight_decay)). p: weight (FP32 value, updated in place); m: exp_avg;
 * v: exp_avg_sq; g: unscaled gradient, multiplied by grad_mul; step_size and bc2_sqrt from
 * mpt_adam_step_size / mpt_adam_bc2_sqrt.
 *   p = decay*p;  d = g*grad_mul + l2*p
 *   m = beta1*m + (1 - beta1)*d;  v = beta2*v + (1 - beta2)*d*d
 *   p = p - step_size * m / (sqrt(v)/bc2_sqrt + eps)            (one fmaf: the product is not rounded)
 * Returns the update delta in FP32: (decay*p - p) - step_size * m/denom, rounded once (fmaf), where the
 * difference (the decoupled decay, 0 for Adam) is exact for decay in [1/2, 1] (Sterbenz). Callers that ignore
 * it pay nothing. */
MPT_HD float mpt_elem_adam(float *p, float *m, float *v, float g, float grad_mul, float beta1, float beta2,
                           float eps, float l2, float decay, float step_size, float bc2_sqrt) {
    const float p0 = *p;
    float pv = p0;
    if (decay != 1.0f) pv = pv * decay;
    float d = g * grad_mul;
    if (l2 != 0.0f) d = fmaf(l2, pv, d);
    float mv = fmaf(1.0f - beta1, d, *m * beta1);
    float vv = fmaf((1.0f - beta2) * d, d, *v * beta2);
    float denom = sqrtf(vv) / bc2_sqrt + eps;
    float q = mv / denom;
    *m = mv;
    *v = vv;
    *p = fmaf(-step_size, q, pv);
    return fmaf(-step_size, q, pv - p0);
}

/* Before the parameter updates: one more optimizer step is taken unless this one overflowed. */
MPT_HD void mpt_scaler_step_begin(int32_t *steps_taken, float found_inf) {
    if (found_inf == 0.0f) *steps_taken += 1;
}

/* After the parameter updates: the loss-scaler state transition, on the fields of mpt_scaler_state
 * (engine/backend.h) and the values of mpt_scaler_params; semantics in engine/amp/scaler.h.
 * dynamic != 0 (PyTorch's _amp_update_scale_ with hysteresis as DeepSpeed's DynamicLossScaler, floor and ceiling):
 *   found_inf: growth_tracker = 0; if hysteresis_left > 1: hysteresis_left -= 1 (skip at the same scale), else
 *              scale = max(scale*backoff, min_scale) (floor_hits += 1 when the floor clamps), hysteresis_left
 *              staying 1: after the first backoff every overflow backs off until the scale grows again.
 *   clean:     growth_tracker += 1; when it reaches growth_interval: scale = min(scale*growth, max_scale)
 *              if scale*growth is finite (else unchanged), growth_tracker = 0, hysteresis_left = hysteresis.
 * dynamic == 0: scale, growth_tracker and hysteresis_left are left alone.
 * Always: when found_inf, steps_nonfinite += 1 if apply_nonfinite (the step was applied, and step_begin
 * already counted it in steps_taken), else steps_skipped += 1; inv_scale = 1/scale; found_inf = 0, sumsq = 0, grad_mul = 1. */
MPT_HD void mpt_scaler_update_fields(float *scale, float *inv_scale, float *found_inf, float *grad_mul,
                                     float *sumsq, int32_t *growth_tracker, int32_t *hysteresis_left,
                                     int32_t *steps_skipped, int32_t *floor_hits, int32_t *steps_nonfinite,
                                     float growth_factor, float backoff_factor, int32_t growth_interval,
                                     int32_t hysteresis, float min_scale, float max_scale, int apply_nonfinite,
                                     int dynamic) {
    int overflow = *found_inf != 0.0f;
    if (dynamic) {
        if (overflow) {
            *growth_tracker = 0;
            if (*hysteresis_left > 1) {
                *hysteresis_left -= 1;
            } else { /* DeepSpeed: back off, and leave the hysteresis used up until the scale grows */
                float s = *scale * backoff_factor;
                if (s < min_scale) {
                    s = min_scale;
                    *floor_hits += 1;
                }
                *scale = s;
            }
        } else {
            int32_t n = *growth_tracker + 1;
            if (n >= growth_interval) {
                float s = *scale * growth_factor;
                if (mpt_is_finite(s)) *scale = s < max_scale ? s : max_scale;
                *growth_tracker = 0;
                *hysteresis_left = hysteresis;
            } else {
                *growth_tracker = n;
            }
        }
    }
    if (overflow) {
        if (apply_nonfinite) *steps_nonfinite += 1;
        else *steps_skipped += 1;
    }
    *inv_scale = 1.0f / *scale;
    *found_inf = 0.0f;
    *sumsq = 0.0f;
    *grad_mul = 1.0f;
}

/* ---- cuRAND's CURAND_RNG_PSEUDO_PHILOX4_32_10 uniform stream, one element at a time --------------------- */

/* Element j of the uniform (0, 1] stream that cuRAND's Philox4x32-10 generator gives for `seed` (element j is
 * what curandGenerateUniform returns at generator offset j): the key is the seed; the stream is laid out as
 * cuRAND's host and device generators lay it out, 65536 subsequences side by side: j / 4 = r * 65536 + t
 * takes lane j % 4 of the block with counter (r, 0) in the low and t in the high 64 bits; the 32-bit value x
 * becomes x * 2^-32 + 2^-33 in FP32 (curand_uniform; the product is exact, so one rounding). That layout is
 * not documented by cuRAND: tests/test_rng.c checks it against the linked cuRAND host generator, and the cuda
 * suite checks dropout masks made with it against the CPU backend's (cuRAND host) ones. */
MPT_HD float mpt_philox_uniform(uint64_t seed, uint64_t j) {
    const uint64_t q = j >> 2, r = q >> 16, t = q & 0xffffu;
    const uint32_t ctr[4] = {(uint32_t)r, (uint32_t)(r >> 32), (uint32_t)t, 0u};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    mpt_philox4x32_10(ctr, key, out); /* the block function of the stochastic-rounding section above */
    return fmaf((float)out[j & 3u], 0x1p-32f, 0x1p-33f);
}

#endif /* MPT_ENGINE_NUMERICS_H */
