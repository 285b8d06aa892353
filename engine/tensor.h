/*
 * engine/tensor.h - tensors: a shape, a dtype, a device and a pointer into an arena.
 *
 * A tensor owns no memory. Its data pointer is a view into one of the graph's arenas (one buffer per memory
 * category, allocated once by mpt_graph_alloc; ARCHITECTURE decision 4), or into a buffer the caller owns.
 * Layout is dense row-major: images NCHW [batch, channels, height, width], matrices [rows, cols],
 * linear weights [out_features, in_features] (PyTorch's layout), conv weights KCRS
 * [out_channels, in_channels, kernel_h, kernel_w].
 */
#ifndef MPT_ENGINE_TENSOR_H
#define MPT_ENGINE_TENSOR_H

#include <stdint.h>

#include "engine/api.h"
#include "engine/dtype.h"

#define MPT_MAX_DIMS 4
#define MPT_NAME_LEN 48

typedef enum mpt_device { MPT_DEVICE_CPU = 0, MPT_DEVICE_CUDA } mpt_device;

/* What a buffer holds; the memory report has one line per category. */
typedef enum mpt_mem {
    MPT_MEM_MASTER = 0, /* FP32 master weights (fp16/bf16 modes; in fp32/tf32 the weights are the masters) */
    MPT_MEM_WEIGHT,     /* weights in the compute dtype (the working copy, or the FP32 weights themselves), and the
                           graph's FP32 buffers (batch norm's running statistics: engine/graph.h mpt_graph_buffer) */
    MPT_MEM_GRAD,       /* weight gradients, FP32 */
    MPT_MEM_OPTIM,      /* optimizer state (momentum, exp_avg, exp_avg_sq), FP32 */
    MPT_MEM_ACT,        /* activations and saved tensors (masks, argmax, probabilities) */
    MPT_MEM_ACT_GRAD,   /* activation gradients */
    MPT_MEM_WORKSPACE,  /* kernel scratch (im2col, operand conversion, GEMM/conv workspace) */
    MPT_MEM_DATA,       /* datasets and batches resident on the device */
    MPT_MEM_TWIN,       /* the FP32 shadow twin of telemetry (--shadow): its whole graph */
    MPT_MEM_TELEMETRY,  /* telemetry's own buffers: rounding-probe outputs, weight snapshots, update deltas */
    MPT_MEM_COUNT
} mpt_mem;

typedef struct mpt_tensor {
    char name[MPT_NAME_LEN];       /* e.g. "fc1.weight"; names checkpoint entries */
    int ndim;                      /* 1..4 */
    int64_t shape[MPT_MAX_DIMS];   /* unused trailing dims are 1 */
    mpt_dtype dtype;
    mpt_device device;
    mpt_mem mem;                   /* arena category */
    void *data;                    /* view into an arena; NULL until allocated */
    struct mpt_tensor *grad;       /* gradient tensor (same shape), or NULL when no gradient flows */
    struct mpt_tensor *view_of;    /* non-NULL for a view (flatten): shares view_of's data and grad data */
    uint64_t grad_epoch;           /* gradient tensors in a graph with grad_overwrite: written since the last
                                      reset when equal to the graph's grad_epoch[mem] (engine/graph.c
                                      mpt_graph_grad_accumulate); otherwise unused */
} mpt_tensor;

/* Number of elements (product of the shape). */
MPT_API int64_t mpt_tensor_numel(const mpt_tensor *t);
/* Size of the data in bytes (numel * dtype size). */
MPT_API size_t mpt_tensor_nbytes(const mpt_tensor *t);
/* Sets name, shape (ndim values), dtype, device and category; data, grad and view_of become NULL. */
MPT_API void mpt_tensor_set(mpt_tensor *t, const char *name, mpt_dtype dtype, mpt_device device, mpt_mem mem,
                            int ndim, const int64_t *shape);
/* Name of a memory category ("master", "weight", "grad", "optim", "act", "act_grad", "workspace", "data",
 * "twin", "telemetry"). */
MPT_API const char *mpt_mem_name(mpt_mem m);

#endif
