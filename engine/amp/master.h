/*
 * engine/amp/master.h - the FP32 master-weight store (Micikevicius et al. 2018, "Mixed Precision Training",
 * section 3.1: "FP32 master copy of weights").
 *
 * In fp16/bf16 modes every parameter has two tensors: the FP32 master (MPT_MEM_MASTER), which the optimizer
 * updates, and the working copy in the compute dtype (MPT_MEM_WEIGHT), which forward and backward read and
 * which is rewritten from the master (round-to-nearest-even) after each optimizer step, inside the fused
 * update pass. Small updates that are below half an FP16/BF16 ulp of a weight are therefore not lost: they
 * accumulate in the master until they change the rounded working value. In fp32/tf32 modes the weight is
 * already FP32 and is its own master: no second copy. With --master-weights none (MPT_MASTER_NONE) the F16/BF16
 * weight is its own "master" too: updates below half an ulp of a weight are then lost (or, with stochastic
 * rounding, kept in expectation).
 */
#ifndef MPT_ENGINE_AMP_MASTER_H
#define MPT_ENGINE_AMP_MASTER_H

#include "engine/api.h"
#include "engine/graph.h"

/* Whether a run keeps FP32 master weights (--master-weights). */
typedef enum mpt_master_mode {
    MPT_MASTER_FP32 = 0, /* FP32 masters for F16/BF16 weights (the default; Micikevicius et al. 2018) */
    MPT_MASTER_NONE,     /* no masters: the optimizer updates the F16/BF16 weights directly, rounding each updated
                            value once into their dtype (what model.half() with a plain optimizer does) */
} mpt_master_mode;

/* "fp32", "none"; parse returns 0 on success, -1 for an unknown name. */
MPT_API const char *mpt_master_mode_name(mpt_master_mode m);
MPT_API int mpt_master_mode_parse(const char *s, mpt_master_mode *out);

/* For each of the graph's parameters, returns in masters[i] the tensor the optimizer updates: with
 * MPT_MASTER_FP32, a new FP32 tensor named "<weight name>:master" in MPT_MEM_MASTER when the weight is
 * F16/BF16, or the weight itself when it is F32; with MPT_MASTER_NONE, always the weight itself (so
 * masters[i]->dtype may be F16/BF16, and no MPT_MEM_MASTER memory exists). Call before mpt_graph_alloc.
 * masters has g->n_params entries. */
MPT_API void mpt_master_create(mpt_graph *g, mpt_tensor **masters, mpt_master_mode mode);

/* A new FP32 master for weight w: the tensor "<weight name>:master" in MPT_MEM_MASTER, of w's shape. What
 * mpt_master_create adds for an F16/BF16 weight; quantization-aware training (engine/quant.h) adds one for an F32
 * weight too, whose working copy then holds the fake-quantized values. Call before mpt_graph_alloc. */
MPT_API mpt_tensor *mpt_master_separate(mpt_graph *g, const mpt_tensor *w);

/* Whether parameter i keeps a separate working copy (its weight dtype is not F32). */
MPT_API int mpt_master_has_working_copy(const mpt_tensor *master, const mpt_tensor *weight);

/* Writes every working copy from its master (RNE); a no-op for parameters that are their own master. */
MPT_API void mpt_master_refresh_working(mpt_graph *g, mpt_tensor **masters);

#endif
