/*
 * engine/graph.h - the autograd graph: built once, replayed every step (ARCHITECTURE decision 4).
 *
 * A model is a function that adds layers to a graph (models/). Each layer call (engine/layers/layers.h)
 * creates its parameters and output tensors and appends one node. A node can only consume tensors that
 * already exist, so the node array is a topological order by construction: forward walks it front to back,
 * backward back to front (micrograd's scheme, with tensors instead of scalars). Gradients accumulate with
 * += into tensors that mpt_graph_zero_grad() clears once per step.
 *
 * Gradient writes (g->grad_overwrite, set by the trainer): instead of zeroing the gradient arenas (two memsets
 * of the whole gradient and activation-gradient arenas per step), the first write into a gradient after its
 * reset overwrites it (GEMM beta = 0, the backend ops' accumulate = 0) and later writes add to it; the layers
 * ask mpt_graph_grad_accumulate() before each write. Bits are those of accumulating into zeros (except that a
 * -0 result stays -0). Memsets remain only where a write cannot overwrite: max pooling's input gradient (the
 * backward pass scatters into the argmax positions only, so it is zeroed before its first write), and a
 * gradient nobody wrote in a backward pass (an output no later node consumed, a parameter with no path to the
 * loss), zeroed before it is read. Without grad_overwrite (the default) zero_grad and forward zero the arenas
 * and every write adds, as before.
 *
 * Memory: tensors are created without data. mpt_graph_alloc() sums the bytes of every tensor per category
 * (mpt_mem), allocates one backend buffer per category and points each tensor into it. After that,
 * nothing in forward/backward allocates; kernel scratch is the backend's workspace, reserved at build time.
 *
 * Fused epilogues (g->fuse_epilogues): work a GEMM's epilogue can do instead of a separate pass.
 *  - A linear layer's bias gradient comes out of its weight-gradient GEMM (MPT_EPILOGUE_BGRAD) when it is the
 *    bias gradient's first write.
 *  - linear L -> relu R, where R is the only reader of L's output: L's forward GEMM writes R's output directly
 *    (MPT_EPILOGUE_RELU_BIAS) and R's forward does nothing; L's own output (the pre-activation) is not written.
 *  - ... -> linear C, where C is also the only reader of R's output: L's forward also writes the ReLU bitmask
 *    (MPT_EPILOGUE_RELU_AUX_BIAS, a saved tensor of L), and in a backward pass where L's output gradient and L's
 *    bias gradient are both first writes (grad_overwrite), C's data-gradient GEMM writes L's output gradient
 *    through the mask and L's bias gradient (MPT_EPILOGUE_DRELU_BGRAD): R's backward and L's bias-gradient pass
 *    do nothing, and R's output gradient is not written. Otherwise (accumulation) the pass runs unfused.
 *  mpt_graph_alloc decides the pairs once (not in the FP32 shadow twin of telemetry, which runs unfused);
 *  mpt_graph_print_precision_map lists them. On the CPU every fusion gives the unfused bits. The tensors a fused
 *  pass leaves unwritten are read by nothing in the step; instruments that read them call mpt_graph_fill_fused.
 *
 * Precision: every node records the compute dtype and math mode that the policy (engine/amp/policy.h) gave
 * it when it was added; mpt_graph_print_precision_map() prints them.
 */
#ifndef MPT_ENGINE_GRAPH_H
#define MPT_ENGINE_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "engine/api.h"
#include "engine/amp/policy.h"
#include "engine/backend.h"
#include "engine/tensor.h"

#define MPT_NODE_MAX_IN 3
#define MPT_NODE_MAX_SAVED 2

typedef struct mpt_graph mpt_graph;
typedef struct mpt_node mpt_node;

/* An FP8 operand of a node's GEMMs: the source tensor's FP8 copy as the GEMMs read it. */
typedef struct mpt_fp8_operand {
    mpt_tensor *q;         /* [rows, cols] in fmt: the source's layout (or NULL when no GEMM reads it) */
    mpt_tensor *qt;        /* [cols, rows]: transposed, for a GEMM whose K is the source's rows (or NULL) */
    mpt_tensor *q_scales;  /* MXFP8: E8M0 [rows, mpt_mx_blocks(cols)] of q, else NULL */
    mpt_tensor *qt_scales; /* MXFP8: E8M0 [cols, mpt_mx_blocks(rows)] of qt, else NULL */
    mpt_dtype fmt;         /* E4M3 or E5M2 */
    int meta;              /* its index in the graph's FP8 state (g->fp8_meta) */
} mpt_fp8_operand;
typedef void (*mpt_node_fn)(mpt_graph *g, mpt_node *node);
/* Telemetry probe (engine/telemetry/): writes into dst (backend memory, FP32) the values a pass of the node
 * held in FP32 just before rounding them into a 16-bit tensor; scratch: node->probe_scratch floats of backend
 * memory for widened operands. Runs only on telemetry steps and writes nothing the step reads. */
typedef void (*mpt_node_probe_fn)(mpt_graph *g, mpt_node *node, float *dst, float *scratch);

struct mpt_node {
    mpt_op op;
    char name[MPT_NAME_LEN];
    mpt_tensor *in[MPT_NODE_MAX_IN];       /* in[0] = activation input; then weight, bias (NULL if absent) */
    mpt_tensor *out;                       /* output activation (its grad, if any, is out->grad) */
    mpt_tensor *saved[MPT_NODE_MAX_SAVED]; /* saved for backward: argmax, dropout mask, probabilities */
    mpt_tensor *buffers[2];                /* the graph buffers it reads and updates (batch norm: running mean and
                                              variance), or NULL */
    mpt_dtype compute_dtype;               /* from the policy */
    mpt_math math;                         /* from the policy */
    mpt_node_fn forward, backward;         /* backward may be NULL (nothing to propagate) */
    /* Rounding probes (NULL when the pass rounds nothing from FP32): probe_forward recomputes out before its
     * rounding, probe_backward this node's contribution to in[0]->grad before its rounding (the stored
     * gradient itself when in[0] has one consumer, as in every model of models/). */
    mpt_node_probe_fn probe_forward, probe_backward;
    int64_t probe_scratch;                 /* FP32 scratch elements the probes need */
    size_t probe_workspace;                /* backend workspace bytes the probes' kernels need */
    /* Fused epilogues (g->fuse_epilogues; see "Fused epilogues" above), decided by mpt_graph_alloc. The layer sets
     * plan_fusion; mpt_graph_alloc calls it before allocating, and it may set the links below, add saved tensors
     * and reserve workspace. fill_fused writes what the pass's fusions left unwritten (mpt_graph_fill_fused). */
    mpt_node_fn plan_fusion, fill_fused;
    mpt_node *fused_relu;                  /* on a linear node L: the relu R whose forward L's GEMM epilogue does */
    mpt_node *fused_next;                  /* on L: the linear node C reading R's output, whose data-gradient GEMM
                                              may do R's backward and L's bias gradient (DRELU_BGRAD); or NULL */
    mpt_node *fused_prev;                  /* on C: that L; on R: the L whose epilogue runs R's forward */
    int bwd_done;                          /* per pass (reset by forward): another node's GEMM epilogue ran this
                                              node's backward (on R: C's DRELU_BGRAD, which also wrote L's bias
                                              gradient); mpt_graph_backward skips the node */
    /* FP8 GEMMs (a linear node whose policy and shapes chose them: engine/amp/fp8.h): the FP8 copies of its operands
     * in the TN layouts the GEMMs read, and their scales. fp8 == 0: none (the GEMMs run in `math`). */
    int fp8;
    mpt_fp8_operand fp8_x, fp8_w, fp8_dy;  /* input x [B, in], weight W [out, in], output gradient dy [B, out] */
    /* Operand copies (a linear node on a backend whose GEMMs convert their operands: be->gemm_copies, the CPU
     * emulation of TF32/F16/BF16): F32 tensors in MPT_MEM_WORKSPACE holding x, W and dy as the GEMMs convert them,
     * written by the first GEMM of a pass that reads the operand and read by the second (mpt_gemm_args.a_copy); NULL
     * where the operand has one GEMM a pass (W and dy without an input gradient) or the backend converts nothing. */
    mpt_tensor *copy_x, *copy_w, *copy_dy;
    /* Quantization (engine/quant.h): qat is 1 + the mpt_qformat that quantization-aware training fake-quantizes this
     * node's weight to (per output channel, rewritten from its FP32 master after every step), 0 without (set by the
     * trainer; the precision map says it). quant is the post-training state of `mptrain eval --quantize
     * --activations int8` (engine/quant.h mpt_quant_prepare), NULL otherwise. */
    int qat;
    struct mpt_node_quant *quant;
    union {                                /* op attributes */
        mpt_conv_shape conv;
        struct { int kernel, stride, pad, P, Q; } pool;
        struct { float p; uint64_t stream; } dropout; /* stream: this node's index in the seed scheme */
        struct { int kh, kw, sh, sw, P, Q; } avgpool;
        struct { int kind; float alpha; } act;       /* kind: mpt_act (engine/numerics.h); alpha: leaky slope */
        struct { float eps, momentum; int64_t C, S; } norm; /* C, S: mpt_norm_args' channels and per-row size */
    } attr;
};

/* How a parameter starts: the layer that creates it decides (mpt_graph_param, mpt_graph_param_const); the trainer
 * applies it (engine/train.c, init_params). */
typedef enum mpt_param_init {
    MPT_INIT_UNIFORM_FAN_IN = 0, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear and Conv2d
                                    (kaiming_uniform_(a=sqrt(5)) for the weight, the same bound for the bias), drawn
                                    from the init stream */
    MPT_INIT_CONST,              /* every element `value`, nothing drawn (the norms' gamma = 1, beta = 0) */
} mpt_param_init;

typedef struct mpt_param_info {
    mpt_tensor *weight;  /* the parameter as the forward pass reads it (compute dtype) */
    int fan_in;          /* for PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    mpt_param_init init; /* how it starts */
    float value;         /* MPT_INIT_CONST: the value */
} mpt_param_info;

/* A buffer: FP32 state the forward pass keeps that is not trained (no gradient, no master, no optimizer state), as
 * PyTorch's module buffers: batch norm's running mean and variance. Set to `init` when the graph is allocated
 * (mpt_graph_alloc), saved in checkpoints next to the parameters. */
typedef struct mpt_buffer_info {
    mpt_tensor *t;       /* F32, MPT_MEM_WEIGHT */
    float init;
} mpt_buffer_info;

struct mpt_graph {
    mpt_backend *be;
    mpt_policy policy;
    int batch;                    /* static batch size B */
    int batch_row0, batch_global; /* these B rows are rows [batch_row0, batch_row0 + B) of a global batch of
                                     batch_global rows (data-parallel shards; 0 and B alone): dropout draws
                                     by the global row, so N ranks draw the masks of one process */

    mpt_tensor **tensors; int n_tensors, cap_tensors;  /* every tensor, owned by the graph */
    mpt_node **nodes; int n_nodes, cap_nodes;          /* topological order */
    mpt_param_info *params; int n_params, cap_params;  /* trainable parameters, in creation order */
    mpt_buffer_info *buffers; int n_buffers, cap_buffers; /* FP32 buffers (running statistics), in creation order */

    mpt_tensor *input;            /* [B, ...] batch in the mode's activation dtype (set by mpt_input) */
    mpt_tensor *labels;           /* [B] I32 (set by mpt_softmax_xent) */
    mpt_tensor *loss;             /* [1] F32: mean cross-entropy of the batch */
    mpt_tensor *logits;           /* the input of the loss node */
    mpt_tensor *n_correct;        /* [1] I32: correct predictions, accumulated until reset by the caller */

    void *arena[MPT_MEM_COUNT];   /* one backend buffer per category */
    size_t arena_bytes[MPT_MEM_COUNT];
    int allocated;

    /* Per-step state read by nodes. */
    int training;                 /* dropout active */
    uint64_t seed;                /* run seed: init, dropout and shuffling derive from it */
    uint64_t step;                /* dropout offsets advance with it (host value) */
    const int64_t *iteration;     /* backend scalar or NULL: when set (the trainer points it at its
                                     mpt_scaler_state.iteration), dropout reads the step from it on the backend
                                     instead of `step`, so a captured step replays with the right offsets */
    uint64_t dropout_elems;       /* mask elements of this graph's B rows over all dropout nodes */
    const float *loss_scale;      /* backend scalar seeding backward (S); must be set before backward
                                     (the trainer points it at its loss-scaler state) */
    int twin;                     /* an FP32 shadow twin (engine/telemetry): its arenas are accounted as
                                     MPT_MEM_TWIN; set before mpt_graph_alloc */
    int grad_overwrite;           /* first writes overwrite gradients instead of zeroing the arenas (see the
                                     header comment); set by mpt_trainer_create, 0 by default */
    uint64_t grad_epoch[MPT_MEM_COUNT]; /* with grad_overwrite: a discard of a gradient arena increments its
                                     epoch (O(1), no pass over the tensors); a tensor is written since then when
                                     its grad_epoch equals this (starts at 1; tensors start at 0, unwritten) */
    /* FP8 (engine/amp/fp8.h): the operand tensors the layers registered, and their state in backend memory */
    int n_fp8, cap_fp8;
    mpt_fp8_tensor *fp8;          /* [n_fp8] host: names and formats */
    mpt_tensor *fp8_meta_t;       /* U8 [n_fp8 * sizeof(mpt_fp8_meta)], MPT_MEM_OPTIM (when n_fp8 > 0) */
    mpt_tensor *fp8_hist_t;       /* F32 [n_fp8, history length], MPT_MEM_OPTIM */
    mpt_fp8_meta *fp8_meta;       /* backend: [n_fp8], = fp8_meta_t->data after mpt_graph_alloc */
    float *fp8_history;           /* backend: [n_fp8, history length] */
    float *found_inf;             /* backend scalar or NULL: what an FP8 cast sets when an amax is not finite, in
                                     training passes (the trainer points it at its mpt_scaler_state.found_inf) */
    int fuse_epilogues;           /* layers may fuse work into GEMM epilogues ("Fused epilogues" above). 1 unless
                                     MPT_FUSED_EPILOGUES=0 is in the environment at mpt_graph_create; tests set it
                                     to compare (the relu fusions are planned only if it is set at mpt_graph_alloc;
                                     clearing it later turns them off). Bit-identical either way on the CPU; on the
                                     GPU cuBLASLt sums fused bias gradients in its own order (engine/backend.h) */
};

/* Creates an empty graph for batch size `batch` (>= 1: every tensor's first dim) on `be` with `policy`
 * (copied). Never NULL (aborts on OOM). The graph uses be but does not own it; the caller owns the graph
 * (mpt_graph_free) until it hands it to mpt_trainer_create, which takes ownership. Every tensor and node the
 * layers add belongs to the graph and lives until it is freed. */
MPT_API mpt_graph *mpt_graph_create(mpt_backend *be, const mpt_policy *policy, int batch);
/* Declares the graph's B rows a shard: rows [row0, row0 + B) of a global batch of `global` rows
 * (0 <= row0, row0 + B <= global). Dropout masks then depend on the global row, so a data-parallel job draws
 * the masks a single process with batch `global` would. Call before the first forward. */
MPT_API void mpt_graph_set_shard(mpt_graph *g, int row0, int global);
/* Mask elements drawn per step over all dropout nodes for the global batch (the stride of the dropout
 * stream's offset): g->dropout_elems / B * batch_global. */
MPT_API uint64_t mpt_graph_dropout_stride(const mpt_graph *g);
/* Frees the graph, its tensors and arenas; sets *g to NULL. */
MPT_API void mpt_graph_free(mpt_graph **g);

/* Adds a tensor without data, on the graph's device. */
MPT_API mpt_tensor *mpt_graph_tensor(mpt_graph *g, const char *name, mpt_dtype dtype, mpt_mem mem, int ndim,
                                     const int64_t *shape);
/* Adds a gradient tensor for t (same shape; dtype F32 in MPT_MEM_GRAD for parameters, t's dtype in
 * MPT_MEM_ACT_GRAD for activations) and returns it; returns t->grad if it exists. */
MPT_API mpt_tensor *mpt_graph_grad(mpt_graph *g, mpt_tensor *t);
/* Adds a trainable parameter: a weight in the compute dtype `dtype` (MPT_MEM_WEIGHT) with an FP32 gradient. */
MPT_API mpt_tensor *mpt_graph_param(mpt_graph *g, const char *name, mpt_dtype dtype, int ndim, const int64_t *shape,
                                    int fan_in);
/* Adds a trainable parameter that starts at `value` everywhere (MPT_INIT_CONST): gamma = 1 and beta = 0 of the
 * normalisation layers. Otherwise as mpt_graph_param. */
MPT_API mpt_tensor *mpt_graph_param_const(mpt_graph *g, const char *name, mpt_dtype dtype, int ndim,
                                          const int64_t *shape, float value);
/* Adds an FP32 buffer (mpt_buffer_info) in MPT_MEM_WEIGHT, set to `init` by mpt_graph_alloc. */
MPT_API mpt_tensor *mpt_graph_buffer(mpt_graph *g, const char *name, int ndim, const int64_t *shape, float init);
/* Sets every buffer to its initial value again (after mpt_graph_alloc). */
MPT_API void mpt_graph_reset_buffers(mpt_graph *g);
/* Adds a view of `src` with a new shape (same numel and dtype); its data and grad share src's. */
MPT_API mpt_tensor *mpt_graph_view(mpt_graph *g, mpt_tensor *src, const char *name, int ndim, const int64_t *shape);
/* Appends a node (fields zeroed, op and name set); the caller fills in inputs, outputs and functions. */
MPT_API mpt_node *mpt_graph_node(mpt_graph *g, mpt_op op, const char *name);

/* Allocates every tensor (one buffer per category, zero-filled; the buffers then hold their initial values). The workspace was reserved on the backend
 * by the layers while they were added. MPT_ERR_NOMEM if an allocation fails. */
MPT_API mpt_status mpt_graph_alloc(mpt_graph *g);

/* Discards the activation gradients (they belong to one forward/backward pass: zeroed, or with grad_overwrite
 * marked for overwriting), then runs forward over all nodes (g->training selects dropout). */
MPT_API void mpt_graph_forward(mpt_graph *g);
/* Discards the parameter gradients: one memset of the gradient arena, or with grad_overwrite no work (the next
 * backward pass overwrites them). Call once per optimizer step; between calls, backward passes accumulate into
 * the parameter gradients (micro-batches). */
MPT_API void mpt_graph_zero_grad(mpt_graph *g);
/* For a layer about to write gradient t (a parameter's or an activation's, or a view of one): 1 if the write
 * must add to t (+=), 0 if it may overwrite t (the first write since t was discarded, with grad_overwrite);
 * marks t written. Always 1 without grad_overwrite. */
MPT_API int mpt_graph_grad_accumulate(mpt_graph *g, mpt_tensor *t);
/* Whether a write into gradient t now would be its first since it was discarded (what
 * mpt_graph_grad_accumulate would return 0 for), without marking it written. Always 0 without grad_overwrite. */
MPT_API int mpt_graph_grad_first_write(const mpt_graph *g, const mpt_tensor *t);
/* Runs backward over all nodes in reverse order; the loss node seeds with *g->loss_scale. Parameter
 * gradients accumulate (+=) across passes until mpt_graph_zero_grad(). A relu whose backward a fused epilogue did
 * in this pass is skipped (its output gradient stays unwritten: nothing reads it). */
MPT_API void mpt_graph_backward(mpt_graph *g);
/* The node that reads tensor t as an input, when exactly one node does and t has no views; else NULL. */
MPT_API mpt_node *mpt_graph_sole_reader(const mpt_graph *g, const mpt_tensor *t);
/* For instruments (telemetry), after a backward pass: writes the tensors that the pass's fused epilogues left
 * unwritten (a fused linear layer's pre-activation output, and a fused relu's output gradient) with the unfused
 * GEMMs, so they hold what an unfused pass would have stored. Writes nothing the step reads: a step with it
 * trains bit-identically. Uses the backend's workspace; stream-ordered. */
MPT_API void mpt_graph_fill_fused(mpt_graph *g);

/* Bytes of all tensors of one category (after alloc: the arena's size). */
MPT_API size_t mpt_graph_bytes(const mpt_graph *g, mpt_mem mem);
/* Finds a tensor by name, or NULL. */
MPT_API mpt_tensor *mpt_graph_find(const mpt_graph *g, const char *name);

/* Prints the precision map: each node with input/output dtypes, math mode, activation bytes and, for GEMMs and
 * convolutions, how they run (mpt_backend_kernels_of: "emulate:onednn", "native:onednn", "emulate:openblas" on the
 * CPU; the header line names the CPU kernel set); in FP8 modes the operand formats of every linear layer's GEMMs
 * (mpt_graph_print_fp8_gemms); the fused epilogues. */
MPT_API void mpt_graph_print_precision_map(const mpt_graph *g, FILE *f);
/* In FP8 modes: per linear layer, its fprop, dgrad and wgrad GEMMs' operand formats, scales and output dtype, or
 * why it runs in BF16; nothing in other modes. */
MPT_API void mpt_graph_print_fp8_gemms(const mpt_graph *g, FILE *f);
/* One line for GEMM `which` (0 fprop, 1 dgrad, 2 wgrad) of linear node n: "e5m2 x e4m3 (W transposed copy), tensor
 * scales -> bf16", or "-" when it does not run in FP8 (buf: len bytes). */
MPT_API void mpt_graph_fp8_gemm_text(const mpt_graph *g, const mpt_node *n, int which, char *buf, size_t len);

#endif
