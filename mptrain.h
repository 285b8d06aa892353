/*
 * mptrain.h - libmptrain's public API in one include: #include <mptrain/mptrain.h>, build with
 * `cc prog.c $(pkg-config --cflags --libs mptrain)` (README.md, "The library"; a complete program:
 * examples/mlp_fp16.c).
 *
 * What a program does with it, and where each piece is documented:
 *   engine/backend.h      create a backend (mpt_backend_cpu_create, mpt_backend_cuda_create); its memory
 *   engine/amp/policy.h   a precision mode (fp32, tf32, fp16, bf16, fp8, fp8-e4m3, mxfp8) and the per-op rules
 *                         it implies
 *   engine/amp/fp8.h      the FP8 recipe (scaling, accumulator), which GEMMs run in FP8, the scale state
 *   engine/graph.h        the graph a network is built into (static shapes, one arena per memory category)
 *   engine/layers/layers.h  the layers: input, linear, conv2d, relu, maxpool2d, flatten, dropout, softmax_xent
 *   models/models.h       the built-in networks (mlp, lenet5, cnn), if a program wants one of those
 *   engine/train.h        the mixed-precision step: FP32 master weights, loss scaler, optimizer
 *   engine/quant.h        INT8 / INT4 quantization: quantization-aware training (mpt_train_config.qat), the
 *                         post-training integer path (mpt_quant_prepare)
 *   engine/amp/scaler.h, engine/amp/master.h, engine/optim/optim.h, engine/optim/schedule.h  their settings
 *   datasets/idx.h, datasets/loader.h, datasets/synthetic.h  Fashion-MNIST (IDX files), batches, test data
 *   engine/checkpoint.h   safetensors checkpoints
 *   engine/rng.h          the Philox streams behind every random number
 *   engine/tensor.h, engine/dtype.h, engine/numerics.h  tensors, dtypes and the FP16/BF16/TF32 conversions
 *   engine/status.h       errors: an mpt_status return and mpt_last_error()'s one-line message
 *   engine/api.h          MPT_API, the version macros and mpt_version()
 * Functions not declared in these headers are internal to the library and not exported from libmptrain.so.
 *
 * Conventions of every header:
 *  - Errors: a function that can fail on outside input (files, flags, settings, memory, the device) returns
 *    an mpt_status and records a one-line message naming what was expected and what was found
 *    (mpt_last_error(), per thread). Wiring errors (mismatched layer shapes, a dtype a kernel does not take)
 *    are programmer errors: they abort with the condition, file and line.
 *  - Memory: pointers documented as "backend memory" come from be->alloc (host memory on the CPU backend,
 *    device memory on CUDA); "host" ones are ordinary memory. A _create/_init function's result is owned by
 *    the caller and released by the matching _free/_close, which takes its address and sets it to NULL (or
 *    zeroes the struct); a graph handed to mpt_trainer_create belongs to the trainer.
 *  - Order: backend operations and training steps are stream-ordered (they may return before the device
 *    finishes); functions that return values to the host (mpt_trainer_stats, be->to_host) wait.
 *  - Threads: a backend, graph, trainer or loader is used by one thread at a time.
 *  - Shapes are row-major, batch first (images NCHW, linear weights [out, in]); F16/BF16 values are uint16_t
 *    bit patterns; pixels are U8 0..255; sizes are in bytes unless a name says elements.
 */
#ifndef MPT_MPTRAIN_H
#define MPT_MPTRAIN_H

#include "engine/api.h"
#include "engine/status.h"
#include "engine/dtype.h"
#include "engine/tensor.h"
#include "engine/backend.h"
#include "engine/rng.h"
#include "engine/amp/fp8.h"
#include "engine/amp/policy.h"
#include "engine/amp/scaler.h"
#include "engine/amp/master.h"
#include "engine/optim/optim.h"
#include "engine/optim/schedule.h"
#include "engine/graph.h"
#include "engine/layers/layers.h"
#include "engine/quant.h"
#include "engine/train.h"
#include "engine/checkpoint.h"
#include "models/models.h"
#include "datasets/idx.h"
#include "datasets/loader.h"
#include "datasets/synthetic.h"

#endif
