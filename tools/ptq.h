/*
 * tools/ptq.h - post-training quantization of a checkpoint (`mptrain eval --quantize`, and the lesson `quantization`):
 * the model rebuilt from the checkpoint as `eval` rebuilds it, evaluated on the same test images twice, as trained and
 * with its linear and conv weights quantized (engine/quant.h: INT8, INT4 or FP8 E4M3 with amax scales per output
 * channel or per tensor) and, optionally, INT8 activations with the exact integer GEMMs and convolutions.
 *
 * What is measured (every number from the run):
 *  - test accuracy and loss of both models on the same images (the reference is the checkpoint as `mptrain eval`
 *    evaluates it: for a checkpoint trained with --qat, its weights already fake-quantized);
 *  - the weights' memory: FP32 as stored in the checkpoint, against the codes at the format's width (INT4 counted two
 *    per byte, as it would be stored; the emulation holds one per byte), the FP32 scales, and the biases (FP32, not
 *    quantized);
 *  - per layer: the weights' relative L2 error ||W' - W|| / ||W|| against the FP32 masters, and the layer output's
 *    relative L2 error ||y' - y|| / ||y|| against the reference model's output for the same input images (errors of
 *    earlier layers included: what the next layer receives), over the valid rows of every test batch, in FP64;
 *  - with INT8 activations: each layer's calibrated input amax and scale.
 * The graph runs without fused epilogues (engine/quant.h mpt_quant_prepare), so that every layer writes its output.
 */
#ifndef MPT_TOOLS_PTQ_H
#define MPT_TOOLS_PTQ_H

#include <stdio.h>

#include "engine/quant.h"
#include "tools/cli.h"

typedef struct mpt_ptq_config {
    mpt_qformat fmt;  /* the weights' format */
    int per_channel;  /* one scale per output channel (1) or per tensor (0) */
    int act_int8;     /* INT8 activations and integer GEMMs / convolutions (fmt INT8 or INT4 only) */
    int calibrate;    /* act_int8: training batches (file order) whose amax sets each layer's input scale */
} mpt_ptq_config;

#define MPT_PTQ_MAX_LAYERS 16

typedef struct mpt_ptq_layer {
    char name[MPT_NAME_LEN];  /* the node: "fc1", "conv2" */
    int conv;                 /* a conv2d node (else linear) */
    int64_t weights;          /* weight elements */
    int64_t channels;         /* output channels */
    float w_amax;             /* max |W| of the FP32 master */
    double weight_rel_l2;     /* ||W' - W|| / ||W||, W the FP32 master, W' the quantized weights as the forward reads
                                 them (in the checkpoint's working dtype) */
    double out_rel_l2;        /* ||y' - y|| / ||y|| over the test images */
    float x_amax, x_scale;    /* act_int8: the calibrated input amax and scale s_x = amax / 127 */
} mpt_ptq_layer;

typedef struct mpt_ptq_result {
    char model[16];                /* the model's short name (mpt_cli_model_short: a spec's is "spec-" + hash) */
    mpt_precision precision;  /* the checkpoint's */
    mpt_qat qat;              /* the checkpoint's --qat */
    char device[256];
    int64_t n_test, calib_images;
    double base_acc, base_loss, q_acc, q_loss; /* fractions, mean cross-entropy */
    int64_t bytes_fp32;       /* quantized weights in FP32 */
    int64_t bytes_q;          /* their codes at the format's width (INT4: ceil(n / 2) bytes per tensor) */
    int64_t bytes_scales;     /* their FP32 scales */
    int64_t bytes_bias;       /* the biases, FP32, not quantized */
    const char *ref_name;     /* what was quantized: "FP32 master" (the checkpoint's masters, or fp32/tf32 weights),
                                 or, for a checkpoint trained with --master-weights none, its 16-bit weights widened
                                 exactly to FP32 ("BF16 weight", "FP16 weight") */
    int n_layers;
    mpt_ptq_layer layer[MPT_PTQ_MAX_LAYERS];
} mpt_ptq_result;

/* Quantizes the checkpoint at path with q and evaluates it (see the header comment) on data cd (the test images and,
 * for calibration, the training images, already loaded); inv gives the invocation's settings: device, CPU kernel set
 * (when given), threads, batch size (when given). Fills *r. MPT_ERR_ARG for a q the checkpoint cannot take (INT8
 * activations with fp8-e4m3 weights, more than MPT_PTQ_MAX_LAYERS layers); the checkpoint's and the device's errors
 * as `eval` has them. Prints the device and checkpoint lines to log when it is not NULL. */
mpt_status mpt_ptq_run(const char *path, const mpt_cli_opts *inv, const mpt_cli_data *cd, const mpt_ptq_config *q,
                       FILE *log, mpt_ptq_result *r);

/* Each quantized layer's FP32 master weights and their unscaled gradient of one training step (the lesson
 * `quantization`: the range of gradients against that of weights). */
typedef struct mpt_ptq_tensors {
    int n;
    char name[MPT_PTQ_MAX_LAYERS][MPT_NAME_LEN];
    int64_t numel[MPT_PTQ_MAX_LAYERS], channels[MPT_PTQ_MAX_LAYERS];
    float *weight[MPT_PTQ_MAX_LAYERS]; /* [numel] the masters before the step, W's layout (malloc'd) */
    float *grad[MPT_PTQ_MAX_LAYERS];   /* [numel] dL/dW of the batch, unscaled FP32 (malloc'd) */
} mpt_ptq_tensors;

/* Loads the checkpoint at path as mpt_ptq_run does and takes one training step on training rows [first, first + B)
 * (B the checkpoint's batch): fills *out with every linear and conv layer's masters and weight gradients.
 * MPT_ERR_ARG when the rows are not in the data. Free with mpt_ptq_tensors_free. */
mpt_status mpt_ptq_gradients(const char *path, const mpt_cli_opts *inv, const mpt_cli_data *cd, int64_t first,
                             mpt_ptq_tensors *out);
void mpt_ptq_tensors_free(mpt_ptq_tensors *t);

/* Writes what `eval --quantize` prints: the setting, the per-layer table, the memory, the accuracies. */
void mpt_ptq_print(const mpt_ptq_config *q, const mpt_ptq_result *r, FILE *f);

/* `mptrain eval --quantize ...` with parsed options (cli.quantize >= 0): loads the data, runs, prints; the exit code. */
int mpt_ptq_command(const mpt_cli_opts *cli);

#endif
