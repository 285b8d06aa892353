/*
 * kernels/elemwise.h - per-element math, written once, compiled by gcc (CPU loops) and nvcc (CUDA kernels).
 *
 * Everything here is a pure function of its arguments: number-format conversions with round-to-nearest-even
 * (FP32 <-> FP16, FP32 <-> BF16, FP32 -> TF32; FP32 <-> OCP FP8 E4M3/E5M2 for `mptrain formats` only), and (below) the per-element pieces of the activations and the
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

/* ---- FP8 (OCP 8-bit floating point, v1.0, 2023): E4M3 and E5M2 -------------------------------------------- */
/* E4M3: 4 exponent bits (bias 7), 3 mantissa bits, no infinities; S.1111.111 is NaN, so the largest finite
 * value is S.1111.110 = 1.75 * 2^8 = 448; smallest normal 2^-6, smallest subnormal 2^-9.
 * E5M2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: exponent 11111 is inf (mantissa 0) or NaN;
 * largest finite 1.75 * 2^15 = 57344, smallest normal 2^-14, smallest subnormal 2^-16.
 * FP32 -> FP8 rounds to nearest even on the grid with an unbounded exponent (as IEEE 754 defines overflow);
 * a value that rounds past the largest finite one gives inf in E5M2 (from 61440 = max + half an ulp up) and
 * NaN in E4M3 (above 464: the tie at 464 goes to 448, whose mantissa is even), which has no inf (OCP's non-saturating conversion; the saturating mode, which
 * clamps to 448 / 57344, is not modelled). NaN stays NaN. Decoding is exact. mptrain does not train in FP8;
 * these are here so `mptrain formats` can show the formats next to the ones it trains in. */

/* |f| rounded to nearest even on the grid of a format with man_bits mantissa bits and smallest normal
 * exponent emin, then encoded with bias; max_finite is the largest finite magnitude, overflow_code the
 * magnitude bits an overflow produces. */
MPT_HD uint8_t mpt_f32_to_fp8_rne(float f, int man_bits, int emin, int bias, float max_finite,
                                  uint8_t overflow_code, uint8_t nan_code) {
    uint32_t u = mpt_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    float a = mpt_bits_f32(u & 0x7fffffffu);
    if (!(a == a)) return (uint8_t)(sign | nan_code);
    if (a >= 2.0f * max_finite) return (uint8_t)(sign | overflow_code); /* inf too; keeps a / q finite */
    int32_t e = (int32_t)((u >> 23) & 0xffu) - 127; /* FP32 subnormals (e = -127) sit far below emin */
    if (e < emin) e = emin;
    float q = mpt_bits_f32((uint32_t)(e - man_bits + 127) << 23); /* the grid spacing 2^(e - man_bits) */
    float r = rintf(a / q) * q; /* a / q and the product are exact (powers of two); rintf rounds ties to even */
    if (r > max_finite) return (uint8_t)(sign | overflow_code);
    if (r == 0.0f) return sign;
    uint32_t ru = mpt_f32_bits(r);
    int32_t re = (int32_t)((ru >> 23) & 0xffu) - 127;
    if (re < emin) /* subnormal: r = m * 2^(emin - man_bits) */
        return (uint8_t)(sign | (uint8_t)(r / q));
    uint32_t mant = (ru >> (23 - man_bits)) & ((1u << man_bits) - 1u);
    return (uint8_t)(sign | (uint8_t)((uint32_t)(re + bias) << man_bits) | (uint8_t)mant);
}

MPT_HD uint8_t mpt_f32_to_e4m3(float f) { return mpt_f32_to_fp8_rne(f, 3, -6, 7, 448.0f, 0x7fu, 0x7fu); }
MPT_HD uint8_t mpt_f32_to_e5m2(float f) { return mpt_f32_to_fp8_rne(f, 2, -14, 15, 57344.0f, 0x7cu, 0x7eu); }

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
 * dynamic != 0 (PyTorch's _amp_update_scale_ with hysteresis, floor and ceiling):
 *   found_inf: growth_tracker = 0; hysteresis_left -= 1; when it reaches 0: scale = max(scale*backoff,
 *              min_scale) (floor_hits += 1 when the floor clamps), hysteresis_left = hysteresis.
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
            *hysteresis_left -= 1;
            if (*hysteresis_left <= 0) {
                float s = *scale * backoff_factor;
                if (s < min_scale) {
                    s = min_scale;
                    *floor_hits += 1;
                }
                *scale = s;
                *hysteresis_left = hysteresis;
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

#endif /* MPT_KERNELS_ELEMWISE_H */
