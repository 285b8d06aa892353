/*
 * engine/quant.h - quantization of a network's weights and activations to INT8, INT4 or FP8 E4M3 with amax scales:
 * quantization-aware training (`mptrain train --qat`) and post-training quantization (`mptrain eval --quantize`).
 *
 * The formats and their per-element rule are engine/dtype.h's mpt_qformat and engine/numerics.h's (symmetric:
 * s = amax / qmax, q = clamp(rint(x / s), -qmax, qmax), x' = q s); the work is the backend's fake_quant, quantize,
 * gemm_i8 and conv2d_forward_i8 (engine/backend.h, "Quantization"). What is quantized: the weight of every linear and
 * conv2d node (the GEMM's and convolution's weight operand, in[1]); biases stay in the working dtype, as in PyTorch's
 * quantized Linear/Conv2d, whose bias is float (the integer-only recipe of Jacob et al. 2018 stores it as int32 with
 * scale s_x s_w: the difference is the bias's own rounding, far below the weights').
 *
 * Quantization-aware training (QAT; Jacob et al. 2018, section 3; PyTorch's FakeQuantize with the straight-through
 * estimator, Bengio et al. 2013): the forward pass reads weights on the integer grid, the backward pass treats the
 * rounding as the identity, and the update goes to FP32 masters that keep what the grid cannot hold. In mptrain:
 *  - every quantized weight has an FP32 master, also in fp32/tf32 modes where the weight is otherwise its own master
 *    (engine/amp/master.h mpt_master_separate): the optimizer updates the master and no longer writes that working
 *    copy; after the optimizer step, one fake_quant per weight rewrites the working copy from the master, per output
 *    channel (row of W [out, in] or [K, C, R, S]: scale s_row = amax(row) / qmax), rounded once to the working dtype.
 *    The pass needs a reduction (each row's amax) before any element can be written, so it is a backend entry with
 *    its own CPU and CUDA kernels rather than a per-element step of the optimizer.
 *  - the weight gradient is computed at the fake-quantized weights and applied to the master unchanged: the
 *    straight-through estimator. (FakeQuantize also zeroes the gradient of elements outside [-qmax s, qmax s]; with
 *    an amax scale no element is outside, so the two agree.)
 *  - the working copies are a function of the masters alone, so a skipped step (found_inf) rewrites the same values,
 *    a resumed run rebuilds them exactly from the checkpoint's masters, and a CUDA Graph replays the pass.
 *  - in fp16/bf16 modes the grid value q s (up to 31 significant bits) is rounded once more into the 16-bit working
 *    copy (at most 2^-9 relative in BF16): the forward reads the BF16 neighbour of the grid point. fp32 keeps q s in
 *    FP32 (one rounding of the product, 2^-24); tf32 math rounds the operand to TF32 in the GEMM as for any weight.
 *  - not with FP8 modes (their GEMMs quantize the weights themselves) nor with --master-weights none (QAT needs the
 *    FP32 masters).
 *
 * Post-training quantization (PTQ): see mpt_quant_prepare and the functions below it.
 */
#ifndef MPT_ENGINE_QUANT_H
#define MPT_ENGINE_QUANT_H

#include "engine/api.h"
#include "engine/graph.h"

/* Quantization-aware training's weight format (--qat). */
typedef enum mpt_qat {
    MPT_QAT_NONE = 0, /* no QAT (the default) */
    MPT_QAT_INT8,     /* weights fake-quantized to INT8 per output channel in the forward pass */
    MPT_QAT_INT4,     /* ... to INT4 */
    MPT_QAT_COUNT
} mpt_qat;

/* "none", "int8", "int4" ("?" outside the enum); parse: 0 on success, -1 for an unknown name. */
MPT_API const char *mpt_qat_name(mpt_qat q);
MPT_API int mpt_qat_parse(const char *s, mpt_qat *out);
/* The quantization format of a QAT setting (INT8 or INT4; undefined for MPT_QAT_NONE). */
MPT_API mpt_qformat mpt_qat_format(mpt_qat q);

/* The linear or conv2d node whose weight operand (in[1]) is tensor w, or NULL (a bias, or no such node). */
MPT_API mpt_node *mpt_quant_weight_node(const mpt_graph *g, const mpt_tensor *w);

/* Rows of a weight's per-output-channel scales: shape[0] ([out, in] or [K, C, R, S]). */
MPT_API int64_t mpt_quant_channels(const mpt_tensor *w);

/* Rewrites working weight w from its FP32 master (same shape) through be->fake_quant: x' = Q(master / s) s rounded to
 * w's dtype, with one scale per output channel (per_channel) or one for the tensor; the codes into q (I8, w's numel)
 * and the scales into scales (F32, mpt_quant_channels(w) or 1 entries) when those are set (backend memory).
 * Stream-ordered. */
MPT_API void mpt_quant_fake_weight(mpt_graph *g, const mpt_tensor *master, mpt_tensor *w, mpt_qformat fmt,
                                   int per_channel, int8_t *q, float *scales);

#endif
