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
 *    copy (at most 2^-8 relative in BF16): the forward reads the BF16 neighbour of the grid point. fp32 keeps q s in
 *    FP32 (one rounding of the product, 2^-24); tf32 math rounds the operand to TF32 in the GEMM as for any weight.
 *  - not with FP8 modes (their GEMMs quantize the weights themselves) nor with --master-weights none (QAT needs the
 *    FP32 masters).
 *
 * Post-training quantization (PTQ; Wu et al. 2020, arXiv 2004.09602; Nagel et al. 2021, "A White Paper on Neural
 * Network Quantization", arXiv 2106.08295): a trained network's weights become W' = Q(W / s) s with s = amax / qmax per
 * tensor or per output channel (mpt_quant_fake_weight, from the FP32 masters). With weights only, the forward pass is
 * the checkpoint's own (its precision's GEMMs) on W'. With INT8 activations too, every linear and conv2d node runs
 * integer arithmetic: its input x becomes INT8 codes with one scale per tensor, s_x = amax_x / 127, where amax_x is the
 * largest |x| the node saw over N calibration batches (the "max" calibrator: Wu et al. section 4.1, PyTorch's
 * MinMaxObserver with a symmetric qscheme, TensorRT's legacy max calibration), inputs past 127.5 s_x clamping at
 * evaluation; the GEMM or convolution sums the integer products exactly in int32 and rescales once, y = fl(fl(acc)
 * s_x s_w + b) (engine/backend.h gemm_i8, conv2d_forward_i8). The node's state is struct mpt_node_quant, made before
 * the graph is allocated (mpt_quant_prepare), and a mode (mpt_quant_set_mode) switches the graph between the float
 * path, calibration (the float path, observing every node's input amax) and the integer path.
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

/* Rewrites working weight w from FP32 master values (backend memory, w's elements in w's layout; not w's own data)
 * through be->fake_quant: x' = Q(master / s) s rounded to w's dtype, with one scale per output channel (per_channel)
 * or one for the tensor; the codes into q (I8, w's numel) and the scales into scales (F32, mpt_quant_channels(w) or 1
 * entries) when those are set (backend memory). Stream-ordered. */
MPT_API void mpt_quant_fake_weight(mpt_graph *g, const float *master, mpt_tensor *w, mpt_qformat fmt, int per_channel,
                                   int8_t *q, float *scales);

/* ---- post-training quantization with INT8 activations ---------------------------------------------------------- */

/* What a linear or conv2d node's forward does. */
typedef enum mpt_quant_mode {
    MPT_QUANT_OFF = 0,   /* the float path (the working weights, whatever they hold) */
    MPT_QUANT_CALIBRATE, /* the float path, and x_amax = max(x_amax, max |input|) */
    MPT_QUANT_INT8,      /* input to INT8 codes at x_scale, the integer GEMM / convolution with the weight's codes */
} mpt_quant_mode;

/* A node's post-training quantization state (engine/graph.h mpt_node.quant): tensors of the graph. */
typedef struct mpt_node_quant {
    mpt_tensor *qx;        /* I8, the input's shape, MPT_MEM_ACT: the input's codes */
    mpt_tensor *qw;        /* I8, the weight's shape, MPT_MEM_WEIGHT: the weight's codes (mpt_quant_fake_weight) */
    mpt_tensor *w_scales;  /* F32 [channels], or [1] per tensor, MPT_MEM_WEIGHT */
    mpt_tensor *x_amax;    /* F32 [1]: the calibration's running max of |input| */
    mpt_tensor *x_scale;   /* F32 [1]: s_x = amax_x / 127 (mpt_quant_calibration_end) */
    mpt_tensor *acc;       /* I32 [B, out], MPT_MEM_ACT: a linear node's exact sums; NULL for conv2d */
    int per_channel;       /* the weight scales: one per output channel (1) or one per tensor (0) */
    mpt_quant_mode mode;
} mpt_node_quant;

/* Before mpt_graph_alloc (so, before mpt_trainer_create): gives every linear and conv2d node of g its state above (mode
 * OFF) and reserves the integer convolution's workspace; turns the fused epilogues off (an integer node writes its
 * own output, and instruments compare every node's output). per_channel: the weight scales' granularity. */
MPT_API void mpt_quant_prepare(mpt_graph *g, int per_channel);
/* Sets the mode of every prepared node. */
MPT_API void mpt_quant_set_mode(mpt_graph *g, mpt_quant_mode m);
/* Zeroes every prepared node's x_amax (before a calibration). Stream-ordered. */
MPT_API void mpt_quant_calibration_begin(mpt_graph *g);
/* Sets every prepared node's x_scale = mpt_int_scale_from_amax(x_amax, 127) (a host round trip: waits for the
 * backend). */
MPT_API void mpt_quant_calibration_end(mpt_graph *g);
/* The calibrate mode's observation for node n (called by the layers' forward): x_amax = max(x_amax, max |in[0]|). */
MPT_API void mpt_quant_observe(mpt_graph *g, mpt_node *n);

#endif
