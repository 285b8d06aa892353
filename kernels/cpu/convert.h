/*
 * kernels/cpu/convert.h - vectorised dtype conversions over contiguous buffers, for the CPU kernels.
 *
 * The per-element definitions are the functions of engine/numerics.h (round to nearest even, overflow to
 * inf, subnormals kept, NaN kept quiet); these loops produce the same bits, 8 elements at a time with AVX2
 * and F16C (the build targets x86-64-v3), and call the elemwise.h functions for the tail. tests/test_dtype.c
 * checks the equality bit for bit over every FP16/BF16 pattern and a million FP32 values.
 *
 *   widen:  F16 -> F32 with F16C's vcvtph2ps (exact for finite values, subnormals included), element by element
 *           in a block of 8 that holds an inf or NaN (vcvtph2ps quiets a signalling NaN; mpt_f16_to_f32 keeps its
 *           payload as it is), BF16 -> F32 by a 16-bit shift, U8 -> F32 exactly, F32 -> F32 copy.
 *   narrow: F32 -> F16 with vcvtps2ph in round-to-nearest-even mode (its NaN result, sign|0x7e00|payload,
 *           is the one mpt_f32_to_f16 returns); F32 -> BF16 with the integer RNE of mpt_f32_to_bf16.
 *   tf32:   F32 -> TF32 (FP32 with the low 13 mantissa bits cleared), the integer RNE of mpt_round_tf32.
 * The loops are defined in kernels/cpu/elementwise.c.
 */
#ifndef MPT_KERNELS_CPU_CONVERT_H
#define MPT_KERNELS_CPU_CONVERT_H

#include <stdint.h>

#include "engine/dtype.h"
#include "engine/status.h"

/* dst[i] = src[i] as FP32, exactly; src is F32, F16, BF16 or U8. n elements, buffers must not overlap. */
void mpt_cpu_widen(float *dst, const void *src, mpt_dtype t, int64_t n);

/* dst[i] = src[i] rounded to nearest even in dtype t (F32: copy, F16, BF16). n elements, no overlap. */
void mpt_cpu_narrow(void *dst, mpt_dtype t, const float *src, int64_t n);

/* dst[i] = mpt_round_tf32(src[i]) (RNE to 10 mantissa bits; inf/NaN unchanged). dst may equal src. */
void mpt_cpu_round_tf32_n(float *dst, const float *src, int64_t n);

#endif
