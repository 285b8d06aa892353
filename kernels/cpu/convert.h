/*
 * kernels/cpu/convert.h - vectorised dtype conversions over contiguous buffers, for the CPU kernels.
 *
 * The per-element definitions are the functions of kernels/elemwise.h (round to nearest even, overflow to
 * inf, subnormals kept, NaN kept quiet); these loops produce the same bits, 8 elements at a time with AVX2
 * and F16C (the build targets x86-64-v3), and call the elemwise.h functions for the tail. tests/test_dtype.c
 * checks the equality bit for bit over every FP16/BF16 pattern and a million FP32 values.
 *
 *   widen:  F16 -> F32 by integer rebiasing (exact; NaN payloads kept as mpt_f16_to_f32 keeps them, which
 *           the F16C instruction vcvtph2ps would not do for signalling NaNs), BF16 -> F32 by a 16-bit shift,
 *           U8 -> F32 exactly, F32 -> F32 copy.
 *   narrow: F32 -> F16 with vcvtps2ph in round-to-nearest-even mode (its NaN result, sign|0x7e00|payload,
 *           is the one mpt_f32_to_f16 returns); F32 -> BF16 with the integer RNE of mpt_f32_to_bf16.
 *   tf32:   F32 -> TF32 (FP32 with the low 13 mantissa bits cleared), the integer RNE of mpt_round_tf32.
 */
#ifndef MPT_KERNELS_CPU_CONVERT_H
#define MPT_KERNELS_CPU_CONVERT_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "engine/dtype.h"
#include "engine/status.h"

/* dst[i] = src[i] as FP32, exactly; src is F32, F16, BF16 or U8. n elements, buffers must not overlap. */
static inline void mpt_cpu_widen(float *dst, const void *src, mpt_dtype t, int64_t n) {
    int64_t i = 0;
    switch (t) {
    case MPT_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case MPT_DTYPE_F16: {
        const uint16_t *s = src;
        const __m256i m_sign = _mm256_set1_epi32(0x8000), m_abs = _mm256_set1_epi32(0x7fff);
        const __m256i m_exp = _mm256_set1_epi32(0x0f800000), rebias = _mm256_set1_epi32(0x38000000);
        const __m256i one_exp = _mm256_set1_epi32(0x00800000), zero = _mm256_setzero_si256();
        const __m256 two_m14 = _mm256_set1_ps(0x1p-14f);
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
            __m256i sign = _mm256_slli_epi32(_mm256_and_si256(w, m_sign), 16);
            __m256i bits = _mm256_slli_epi32(_mm256_and_si256(w, m_abs), 13); /* exp+mantissa in place */
            __m256i exp = _mm256_and_si256(bits, m_exp);
            __m256i o = _mm256_add_epi32(bits, rebias);                       /* exponent 15 -> 127 bias */
            __m256i infnan = _mm256_cmpeq_epi32(exp, m_exp);
            o = _mm256_add_epi32(o, _mm256_and_si256(infnan, rebias));        /* exponent 31 -> 255 */
            /* zero/subnormal: m*2^-24 = (1 + m*2^-10)*2^-14 - 2^-14, both steps exact in FP32 */
            __m256i sub = _mm256_castps_si256(
                _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(o, one_exp)), two_m14));
            o = _mm256_blendv_epi8(o, sub, _mm256_cmpeq_epi32(exp, zero));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_or_si256(o, sign)));
        }
        for (; i < n; i++) dst[i] = mpt_f16_to_f32(s[i]);
        return;
    }
    case MPT_DTYPE_BF16: {
        const uint16_t *s = src;
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
        }
        for (; i < n; i++) dst[i] = mpt_bf16_to_f32(s[i]);
        return;
    }
    case MPT_DTYPE_U8: {
        const uint8_t *s = src;
        for (; i + 8 <= n; i += 8) {
            __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + i)));
            _mm256_storeu_ps(dst + i, _mm256_cvtepi32_ps(w));
        }
        for (; i < n; i++) dst[i] = (float)s[i];
        return;
    }
    default:
        MPT_ASSERTF(0, "mpt_cpu_widen: dtype %s is not F32, F16, BF16 or U8", mpt_dtype_name(t));
    }
}

/* 8 FP32 -> 8 BF16 (RNE, NaN quiet), as mpt_f32_to_bf16. */
static inline __m128i mpt_cpu_bf16x8(__m256i u) {
    const __m256i m_abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, m_abs), inf);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(hi, one)), 16);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* dst[i] = src[i] rounded to nearest even in dtype t (F32: copy, F16, BF16). n elements. */
static inline void mpt_cpu_narrow(void *dst, mpt_dtype t, const float *src, int64_t n) {
    int64_t i = 0;
    switch (t) {
    case MPT_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case MPT_DTYPE_F16: {
        uint16_t *d = dst;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
        for (; i < n; i++) d[i] = mpt_f32_to_f16(src[i]);
        return;
    }
    case MPT_DTYPE_BF16: {
        uint16_t *d = dst;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(d + i), mpt_cpu_bf16x8(_mm256_loadu_si256((const __m256i *)(src + i))));
        for (; i < n; i++) d[i] = mpt_f32_to_bf16(src[i]);
        return;
    }
    default:
        MPT_ASSERTF(0, "mpt_cpu_narrow: dtype %s is not F32, F16 or BF16", mpt_dtype_name(t));
    }
}

/* dst[i] = mpt_round_tf32(src[i]) (RNE to 10 mantissa bits; inf/NaN unchanged). dst may equal src. */
static inline void mpt_cpu_round_tf32_n(float *dst, const float *src, int64_t n) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0xfff);
    const __m256i keep = _mm256_set1_epi32((int)0xffffe000u), m_exp = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 13), one);
        __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, half), lsb), keep);
        __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(u, m_exp), m_exp);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_blendv_epi8(r, u, special));
    }
    for (; i < n; i++) dst[i] = mpt_round_tf32(src[i]);
}

#endif
