/*
 * kernels/cuda/optim.cu - the CUDA backend's mixed-precision update pass: unscale + found_inf, sum of squares
 * and clip coefficient (clipping by global L2 norm), the fused optimizer step (on the FP32 masters with the
 * working copy rewritten RNE, or on 16-bit weights directly with RNE or stochastic rounding; FP32 or 16-bit
 * optimizer state), and the loss-scale update.
 *
 * The math of one element (and of the per-step scalars) is in engine/numerics.h ("Optimizer and loss-scaler
 * per-element math"), the functions the CPU loops of kernels/cpu/optim.c call; this file only maps them onto
 * threads. Those functions write every multiply-add as an explicit fmaf and compute the per-step scalars in
 * FP64 with IEEE division and square root (nvcc's defaults here: no --use_fast_math), so the optimizer step,
 * unscale and scaler update produce the CPU's bits. The scaler state (scale, found_inf, counters) lives in
 * device memory (mpt_scaler_state) and is read and written only by kernels, so a training step needs no host
 * synchronisation, as in PyTorch's _amp_foreach_non_finite_check_and_unscale_ / _amp_update_scale_.
 *
 * Contracts: engine/backend.h; formulas and their PyTorch sources: engine/optim/optim.h, engine/amp/scaler.h.
 */
#include <assert.h>

#include "kernels/cuda/cuda_internal.cuh"

/* ---- unscale + found_inf -------------------------------------------------------------------------------- */

/* g *= inv_scale in place; found_inf = 1 if any element was or became non-finite (a block that saw one writes
 * 1.0; several blocks writing the same value is the only sharing). */
static __global__ void unscale_check_kernel(float *g, int64_t n, mpt_scaler_state *st) {
    const float inv = st->inv_scale;
    int bad = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        bad |= mpt_elem_unscale(&g[i], inv);
    if (__syncthreads_or(bad) && threadIdx.x == 0) st->found_inf = 1.0f;
}

static void launch_unscale_check(const mpt_cuda_ctx *ctx, float *g, int64_t n, mpt_scaler_state *st) {
    unscale_check_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(g, n, st);
    MPT_CUDA_CHECK_LAUNCH("unscale_check_kernel");
}

void mpt_cuda_unscale_check(mpt_backend *be, float *g, int64_t n, mpt_scaler_state *st) {
    MPT_ASSERT(n >= 0 && st != NULL);
    if (n == 0) return;
    launch_unscale_check(mpt_cuda_ctx_of(be), g, n, st);
}

/* ---- sum of squares (two passes: per-block FP64 partials, then one block; deterministic) ------------------ */

static __global__ void sum_squares_partial_kernel(double *partial, const float *g, int64_t n) {
    __shared__ double red[32];
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double x = (double)g[i];
        acc += x * x; /* exact: a squared FP32 has at most 48 significant bits */
    }
    acc = mpt_block_sum(acc, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* st->sumsq = round_f32(sumsq + sum of the partials), the sum in FP64 as on the CPU. */
static __global__ void sum_squares_finish_kernel(mpt_scaler_state *st, const double *partial, int n_partial) {
    __shared__ double red[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n_partial; i += blockDim.x) acc += partial[i];
    acc = mpt_block_sum(acc, red);
    if (threadIdx.x == 0) st->sumsq = (float)((double)st->sumsq + acc);
}

static void launch_sum_squares(const mpt_cuda_ctx *ctx, double *partial, const float *g, int64_t n,
                               mpt_scaler_state *st) {
    unsigned blocks = mpt_cuda_blocks(ctx, n);
    MPT_ASSERTF((size_t)blocks * sizeof(double) <= MPT_CUDA_SCRATCH_BYTES,
                "sum_squares: %u partial sums exceed the scratch", blocks);
    sum_squares_partial_kernel<<<blocks, MPT_CUDA_THREADS, 0, ctx->stream>>>(partial, g, n);
    MPT_CUDA_CHECK_LAUNCH("sum_squares_partial_kernel");
    sum_squares_finish_kernel<<<1, MPT_CUDA_THREADS, 0, ctx->stream>>>(st, partial, (int)blocks);
    MPT_CUDA_CHECK_LAUNCH("sum_squares_finish_kernel");
}

void mpt_cuda_sum_squares(mpt_backend *be, const float *g, int64_t n, mpt_scaler_state *st) {
    MPT_ASSERT(n >= 0 && st != NULL);
    if (n == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    launch_sum_squares(ctx, (double *)ctx->scratch, g, n, st);
}

/* ---- scalar updates: clip coefficient, step count, loss scale (one thread each) -------------------------- */

static __global__ void clip_coef_kernel(mpt_scaler_state *st, float max_norm) {
    st->grad_mul = mpt_clip_coef(st->sumsq, max_norm);
}

static __global__ void lr_update_kernel(mpt_scaler_state *st, mpt_lr_schedule sc) {
    st->lr = mpt_lr_eval((int)sc.kind, sc.base_lr, sc.min_lr, sc.warmup_steps, sc.total_steps, sc.step_size, sc.gamma,
                         st->iteration);
}

static __global__ void step_begin_kernel(mpt_scaler_state *st) {
    mpt_scaler_step_begin(&st->steps_taken, st->found_inf);
}

/* scaler_update's work (one thread): the scale and counters for the next step, then iteration += 1. */
static __device__ void scaler_advance(mpt_scaler_state *st, const mpt_scaler_params &p, int dynamic) {
    mpt_scaler_update_fields(&st->scale, &st->inv_scale, &st->found_inf, &st->grad_mul, &st->sumsq,
                             &st->growth_tracker, &st->hysteresis_left, &st->steps_skipped, &st->floor_hits,
                             &st->steps_nonfinite, p.growth_factor, p.backoff_factor, p.growth_interval,
                             p.hysteresis, p.min_scale, p.max_scale, p.apply_nonfinite, dynamic);
    st->iteration += 1;
}

static __global__ void scaler_update_kernel(mpt_scaler_state *st, mpt_scaler_params p, int dynamic) {
    scaler_advance(st, p, dynamic);
}

void mpt_cuda_clip_coef(mpt_backend *be, mpt_scaler_state *st, float max_norm) {
    const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    clip_coef_kernel<<<1, 1, 0, ctx->stream>>>(st, max_norm);
    MPT_CUDA_CHECK_LAUNCH("clip_coef_kernel");
}

void mpt_cuda_lr_update(mpt_backend *be, mpt_scaler_state *st, const mpt_lr_schedule *schedule) {
    const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    lr_update_kernel<<<1, 1, 0, ctx->stream>>>(st, *schedule);
    MPT_CUDA_CHECK_LAUNCH("lr_update_kernel");
}

void mpt_cuda_step_begin(mpt_backend *be, mpt_scaler_state *st) {
    const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    step_begin_kernel<<<1, 1, 0, ctx->stream>>>(st);
    MPT_CUDA_CHECK_LAUNCH("step_begin_kernel");
}

void mpt_cuda_scaler_update(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic) {
    const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    scaler_update_kernel<<<1, 1, 0, ctx->stream>>>(st, *p, dynamic);
    MPT_CUDA_CHECK_LAUNCH("scaler_update_kernel");
}

/* ---- the fused optimizer step ------------------------------------------------------------------------------ */

/* The per-step scalars, computed once per block from the device step count (as the CPU computes them once per
 * call). */
typedef struct step_scalars {
    float gm;                 /* gradient multiplier (clip coefficient; 1 without clipping) */
    float lr;                 /* this step's learning rate (*a.lr, or h.lr) */
    uint64_t sr_iteration;    /* stochastic rounding's iteration (*a.iteration, or a.sr_iteration) */
    float l2, decay;          /* Adam's L2 term / AdamW's decoupled decay factor */
    float step_size, bc2_sqrt;/* Adam/AdamW bias corrections */
    int first;                /* t == 1 (SGD momentum initialisation) */
} step_scalars;

/* FP32 -> 16-bit storage with stochastic rounding (F32: unchanged), from the random word r. */
static __device__ __forceinline__ void store_stochastic(void *p, mpt_dtype t, int64_t i, float x, uint32_t r) {
    switch (t) {
    case MPT_DTYPE_F16: ((uint16_t *)p)[i] = mpt_f32_to_f16_sr(x, r); break;
    case MPT_DTYPE_BF16: ((uint16_t *)p)[i] = mpt_f32_to_bf16_sr(x, r); break;
    default: ((float *)p)[i] = x; break;
    }
}

/* The per-step scalars from the device step count, learning rate and iteration (thread 0 of a block; the CPU
 * computes them once per call). lr / iteration: backend scalars, or NULL for the host values h.lr / sr_iteration. */
static __device__ void compute_step_scalars(step_scalars *sc, const mpt_optim_hparams &h, const int32_t *step,
                                            const float *grad_mul, const float *lr, const int64_t *iteration,
                                            uint64_t sr_iteration) {
    const int32_t t = *step;
    assert(t >= 1); /* step_begin runs first */
    sc->gm = grad_mul ? *grad_mul : 1.0f;
    sc->lr = lr ? *lr : h.lr;
    sc->sr_iteration = iteration ? (uint64_t)*iteration : sr_iteration;
    sc->first = t == 1;
    sc->l2 = 0.0f;
    sc->decay = 1.0f;
    sc->step_size = 0.0f;
    sc->bc2_sqrt = 1.0f;
    if (h.kind != MPT_OPTIM_SGD) {
        if (h.kind == MPT_OPTIM_ADAM) sc->l2 = h.weight_decay;
        else sc->decay = mpt_adamw_decay(sc->lr, h.weight_decay);
        sc->step_size = mpt_adam_step_size(sc->lr, h.beta1, t);
        sc->bc2_sqrt = mpt_adam_bc2_sqrt(h.beta2, t);
    }
}

/* Element i of one parameter: its weight (the FP32 master, or the working weight widened when there is no
 * master) and state (widened from state_dtype) are updated in FP32 by the optimizer's per-element function; the
 * state is stored back rounded to nearest even; the weight goes back to the master (and the working copy, RNE)
 * or, without a master, is rounded once into the working dtype (RNE, or stochastically with
 * mpt_sr_bits(sr_seed, s.sr_iteration, sr_offset + i)); the update delta goes to update_out when it is set. The
 * same functions and order as kernels/cpu/optim.c. Shared by the per-tensor and the multi-tensor kernels. */
static __device__ __forceinline__ void update_element(const mpt_optim_args &a, const step_scalars &s, int64_t i) {
    const mpt_optim_hparams &h = a.h;
    float p = a.master ? a.master[i] : mpt_dev_load(a.working, a.working_dtype, i);
    float m = a.m ? mpt_dev_load(a.m, a.state_dtype, i) : 0.0f;
    float v = a.v ? mpt_dev_load(a.v, a.state_dtype, i) : 0.0f;
    float delta;
    if (h.kind == MPT_OPTIM_SGD)
        delta = mpt_elem_sgd(&p, &m, a.grad[i], s.gm, s.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov,
                             s.first);
    else
        delta = mpt_elem_adam(&p, &m, &v, a.grad[i], s.gm, h.beta1, h.beta2, h.eps, s.l2, s.decay, s.step_size,
                              s.bc2_sqrt);
    if (a.m) mpt_dev_store(a.m, a.state_dtype, i, m);
    if (a.v) mpt_dev_store(a.v, a.state_dtype, i, v);
    if (a.update_out) a.update_out[i] = delta;
    if (a.master) {
        a.master[i] = p;
        if (a.working) mpt_dev_store(a.working, a.working_dtype, i, p);
    } else if (a.stochastic) {
        store_stochastic(a.working, a.working_dtype, i, p,
                         mpt_sr_bits(a.sr_seed, s.sr_iteration, a.sr_offset + (uint64_t)i));
    } else {
        mpt_dev_store(a.working, a.working_dtype, i, p);
    }
}

/* Unless *found_inf (found_inf NULL: never skip): update_element over the n elements, grid-stride; on a skipped
 * step nothing is written but zero deltas to update_out when it is set. */
static __global__ void optim_step_kernel(mpt_optim_args a) {
    const int64_t n = a.n;
    if (a.found_inf && *a.found_inf != 0.0f) { /* skipped: nothing is written but zero deltas (uniform) */
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; a.update_out && i < n;
             i += (int64_t)gridDim.x * blockDim.x)
            a.update_out[i] = 0.0f;
        return;
    }
    __shared__ step_scalars sc;
    if (threadIdx.x == 0) compute_step_scalars(&sc, a.h, a.step, a.grad_mul, a.lr, a.iteration, a.sr_iteration);
    __syncthreads();
    const step_scalars s = sc;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        update_element(a, s, i);
}

static void launch_optim_step(const mpt_cuda_ctx *ctx, const mpt_optim_args *a) {
    optim_step_kernel<<<mpt_cuda_blocks(ctx, a->n), MPT_CUDA_THREADS, 0, ctx->stream>>>(*a);
    MPT_CUDA_CHECK_LAUNCH("optim_step_kernel");
}

void mpt_cuda_optim_step(mpt_backend *be, const mpt_optim_args *a) {
    mpt_optim_args_check(a); /* the contract (engine/backend.c) */
    if (a->n == 0) return;
    launch_optim_step(mpt_cuda_ctx_of(be), a);
}

/* ---- multi-tensor launches: one kernel over a table of parameters (mpt_param_slot) ------------------------ */
/*
 * The pattern of PyTorch's multi_tensor_apply and apex's amp_C: the table (pointers and sizes, in device memory)
 * is cut into chunks of MPT_MT_CHUNK elements, ceil(n / MPT_MT_CHUNK) per tensor, numbered tensor by tensor, and
 * block b handles chunk b. Each element goes through the same per-element function as in the per-tensor kernels
 * (update_element, mpt_elem_unscale), so the bits are those of one launch per tensor. The host sizes the grid
 * from the total element count alone (sum ceil(n_i / C) <= numel / C + count), so it never reads the table;
 * blocks past the last chunk return at once. Locating a chunk is a scan of the table by one thread (a network has
 * a few dozen parameters, the table stays in L1).
 */

/* Elements per chunk (16 per thread with MPT_CUDA_THREADS = 256). */
#define MPT_MT_CHUNK 4096

/* Chunk c of the table cut into chunks of `chunk` elements: its slot and first element (returns 1), or 0 when c
 * is past the last chunk. */
static __device__ int locate_chunk(const mpt_param_slot *slots, int count, int64_t c, int *slot, int64_t *start,
                                   int64_t chunk = MPT_MT_CHUNK) {
    for (int i = 0; i < count; i++) {
        const int64_t n_chunks = (slots[i].n + chunk - 1) / chunk;
        if (c < n_chunks) {
            *slot = i;
            *start = c * chunk;
            return 1;
        }
        c -= n_chunks;
    }
    return 0;
}

/* Blocks of a multi-tensor launch: the upper bound on the number of chunks of `chunk` elements. */
static unsigned multi_tensor_blocks(int64_t numel, int count, int64_t chunk = MPT_MT_CHUNK) {
    const int64_t blocks = numel / chunk + count;
    MPT_ASSERTF(blocks >= 1 && blocks <= (int64_t)INT32_MAX, "multi-tensor launch: %lld blocks for %lld elements",
                (long long)blocks, (long long)numel);
    return (unsigned)blocks;
}

/* unscale_check_kernel's work on chunk blockIdx.x of the table. */
static __global__ void unscale_check_multi_kernel(const mpt_param_slot *slots, int count, mpt_scaler_state *st) {
    __shared__ int found;
    __shared__ float *g;
    __shared__ int64_t start, end;
    if (threadIdx.x == 0) {
        int slot = 0;
        int64_t s0 = 0;
        found = locate_chunk(slots, count, blockIdx.x, &slot, &s0);
        if (found) {
            g = slots[slot].grad;
            start = s0;
            end = s0 + MPT_MT_CHUNK < slots[slot].n ? s0 + MPT_MT_CHUNK : slots[slot].n;
        }
    }
    __syncthreads();
    if (!found) return; /* uniform over the block */
    const float inv = st->inv_scale;
    int bad = 0;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) bad |= mpt_elem_unscale(&g[i], inv);
    if (__syncthreads_or(bad) && threadIdx.x == 0) st->found_inf = 1.0f;
}

void mpt_cuda_unscale_check_multi(mpt_backend *be, const mpt_param_slot *slots, int count, int64_t numel,
                                  mpt_scaler_state *st) {
    MPT_ASSERT(count >= 0 && numel >= 0 && st != NULL && (count == 0 || slots != NULL));
    if (count == 0 || numel == 0) return;
    const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    unscale_check_multi_kernel<<<multi_tensor_blocks(numel, count), MPT_CUDA_THREADS, 0, ctx->stream>>>(slots, count,
                                                                                                         st);
    MPT_CUDA_CHECK_LAUNCH("unscale_check_multi_kernel");
}

/* The per-tensor arguments of one slot of a multi-tensor launch (no update_out). */
static __device__ void slot_args(mpt_optim_args *one, const mpt_optim_multi_args &a, const mpt_param_slot &sl) {
    assert(sl.master != NULL || sl.working != NULL);
    assert(a.h.kind == MPT_OPTIM_SGD ? (a.h.momentum == 0.0f || sl.m != NULL) : (sl.m && sl.v));
    one->h = a.h;
    one->n = sl.n;
    one->master = sl.master;
    one->grad = sl.grad;
    one->m = sl.m;
    one->v = sl.v;
    one->state_dtype = a.state_dtype;
    one->working = sl.working;
    one->working_dtype = sl.working_dtype;
    one->stochastic = a.stochastic;
    one->sr_seed = a.sr_seed;
    one->sr_iteration = a.sr_iteration;
    one->sr_offset = sl.sr_offset;
    one->found_inf = a.found_inf;
    one->grad_mul = a.grad_mul;
    one->step = a.step;
    one->lr = a.lr;
    one->iteration = a.iteration;
    one->update_out = NULL;
}

/* optim_step_kernel's work on chunk blockIdx.x of the table: thread 0 turns the chunk's slot into the per-tensor
 * arguments (no update_out), then every thread runs update_element over the chunk. */
static __global__ void optim_step_multi_kernel(mpt_optim_multi_args a) {
    if (a.found_inf && *a.found_inf != 0.0f) return; /* skipped step: nothing is written */
    __shared__ int found;
    __shared__ int64_t start, end;
    __shared__ step_scalars sc;
    __shared__ mpt_optim_args one;
    if (threadIdx.x == 0) {
        int slot = 0;
        int64_t s0 = 0;
        found = locate_chunk(a.slots, a.count, blockIdx.x, &slot, &s0);
        if (found) {
            compute_step_scalars(&sc, a.h, a.step, a.grad_mul, a.lr, a.iteration, a.sr_iteration);
            slot_args(&one, a, a.slots[slot]);
            start = s0;
            end = s0 + MPT_MT_CHUNK < one.n ? s0 + MPT_MT_CHUNK : one.n;
        }
    }
    __syncthreads();
    if (!found) return; /* uniform over the block */
    const step_scalars s = sc;
    const mpt_optim_args args = one;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) update_element(args, s, i);
}

void mpt_cuda_optim_step_multi(mpt_backend *be, const mpt_optim_multi_args *a) {
    MPT_ASSERT(a->count >= 0 && a->numel >= 0 && a->step != NULL && (a->count == 0 || a->slots != NULL));
    MPT_ASSERTF((unsigned)a->h.kind <= (unsigned)MPT_OPTIM_ADAMW, "optim_step_multi: unknown optimizer kind %d",
                (int)a->h.kind);
    mpt_cuda_require_float(a->state_dtype, "optim_step_multi (optimizer state)");
    if (a->count == 0 || a->numel == 0) return;
    const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    optim_step_multi_kernel<<<multi_tensor_blocks(a->numel, a->count), MPT_CUDA_THREADS, 0, ctx->stream>>>(*a);
    MPT_CUDA_CHECK_LAUNCH("optim_step_multi_kernel");
}

/* ---- the update pass in two kernels (update_pass; MPT_CUDA_FUSED_UPDATE=1) ------------------------------ */
/*
 * What five launches do today (unscale_check_multi, then one-thread kernels for step_begin and lr_update, then
 * optim_step_multi, then a one-thread scaler_update), in two:
 *
 * 1. update_check_kernel: unscale + found_inf over the whole table (the multi-tensor chunking above with chunks of
 *    MPT_UPDATE_CHUNK elements, one float4 per thread where the chunk is 16-byte aligned). Every block then counts
 *    itself in plan->arrived (a __threadfence before the atomicAdd makes its found_inf store visible first: the
 *    threadFenceReduction pattern of the CUDA samples); the block that arrives last, when every gradient has been
 *    checked, runs on one thread what the one-thread kernels ran, in their order: step_begin (steps_taken += 1
 *    unless found_inf), lr_update (st->lr from st->iteration), this step's per-step scalars for the optimizer
 *    (compute_step_scalars: the same function optim_step_multi's blocks call, with the same inputs) and found_inf
 *    into the plan, then scaler_update (the scale for the next step, found_inf reset, iteration += 1), and resets
 *    the counter for the next launch or graph replay.
 * 2. update_apply_kernel: unless the plan says skip, update_element over the table (chunks of MPT_UPDATE_CHUNK),
 *    with the plan's scalars.
 * found_inf is known before any weight moves because the stream runs (2) after (1) has finished; a single kernel
 * would need a grid-wide barrier, hence a cooperative launch with every block co-resident, which caps the grid and
 * must survive graph capture. Two kernels keep the ordering where it is today, in the stream.
 *
 * Why the bits are today's: every element goes through the same per-element functions (mpt_elem_unscale,
 * update_element, each element alone, so chunking and vector loads change no value); the scalar functions are the
 * same and see the same inputs (found_inf is the OR over all gradients in both; step_begin, lr_update and the
 * step scalars read steps_taken, iteration and lr as optim_step_multi read them, before scaler_update changes
 * found_inf and iteration); and the scaler's update is the same function of the same state. The trainer uses this
 * path only where nothing runs between the optimizer and scaler_update that reads the scaler state (no FP8 scale
 * update, no update deltas, no clipping, no --nonfinite apply). tests/test_cuda.c test_update_pass_bit_identical
 * checks it against the CPU's five calls, step by step, over overflowing and clean steps. Not yet run on a GPU.
 */

/* Elements per chunk: one float4 per thread with MPT_CUDA_THREADS = 256. Smaller than MPT_MT_CHUNK so the mlp's
 * 0.67 M parameters make ~660 blocks (5 per SM of an H100/H200) instead of ~170. */
#define MPT_UPDATE_CHUNK 1024

/* This step's inputs to the update kernel, written by the check kernel's last block (device memory of the
 * context: ctx->update_plan, zeroed at creation). */
typedef struct update_plan {
    unsigned int arrived; /* blocks of the check kernel that have finished; 0 between launches */
    int skip;             /* found_inf of this step: the update kernel writes nothing */
    step_scalars sc;      /* the optimizer's per-step scalars (valid unless skip) */
} update_plan;
static_assert(sizeof(update_plan) <= MPT_CUDA_UPDATE_PLAN_BYTES, "update_plan exceeds ctx->update_plan");

/* The unscale of elements [0, len) of base; 1 if any was or became non-finite. */
static __device__ __forceinline__ int unscale_span(float *base, int64_t len, float inv) {
    int bad = 0;
    if (((uintptr_t)base & 15) == 0) {
        const int64_t quads = len / 4;
        for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
            float4 v = reinterpret_cast<float4 *>(base)[q];
            bad |= mpt_elem_unscale(&v.x, inv) | mpt_elem_unscale(&v.y, inv) | mpt_elem_unscale(&v.z, inv) |
                   mpt_elem_unscale(&v.w, inv);
            reinterpret_cast<float4 *>(base)[q] = v;
        }
        for (int64_t i = quads * 4 + threadIdx.x; i < len; i += blockDim.x) bad |= mpt_elem_unscale(&base[i], inv);
    } else {
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) bad |= mpt_elem_unscale(&base[i], inv);
    }
    return bad;
}

static __global__ void update_check_kernel(mpt_update_pass_args u, update_plan *plan) {
    __shared__ int found, last;
    __shared__ float *base;
    __shared__ int64_t len;
    mpt_scaler_state *st = u.st;
    if (threadIdx.x == 0) {
        int slot = 0;
        int64_t s0 = 0;
        found = locate_chunk(u.optim.slots, u.optim.count, blockIdx.x, &slot, &s0, MPT_UPDATE_CHUNK);
        if (found) {
            const int64_t n = u.optim.slots[slot].n;
            base = u.optim.slots[slot].grad + s0;
            len = (s0 + MPT_UPDATE_CHUNK < n ? s0 + MPT_UPDATE_CHUNK : n) - s0;
        }
    }
    __syncthreads();
    /* every block, past the last chunk too, takes part in the barrier and the count below */
    const int bad = found ? unscale_span(base, len, st->inv_scale) : 0;
    if (__syncthreads_or(bad) && threadIdx.x == 0) st->found_inf = 1.0f;
    if (threadIdx.x == 0) {
        __threadfence(); /* this block's found_inf store before its arrival */
        last = atomicAdd(&plan->arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x != 0) return;
    /* the last block: every gradient is unscaled and checked */
    __threadfence();
    const float found_inf = *(volatile float *)&st->found_inf;
    mpt_scaler_step_begin(&st->steps_taken, found_inf); /* step_begin_kernel */
    const mpt_lr_schedule &sc = u.schedule;            /* lr_update_kernel */
    st->lr = mpt_lr_eval((int)sc.kind, sc.base_lr, sc.min_lr, sc.warmup_steps, sc.total_steps, sc.step_size, sc.gamma,
                         st->iteration);
    plan->skip = found_inf != 0.0f;
    if (!plan->skip) /* optim_step_multi's blocks compute these only on a step they take (steps_taken >= 1) */
        compute_step_scalars(&plan->sc, u.optim.h, &st->steps_taken, NULL, &st->lr, &st->iteration,
                             u.optim.sr_iteration);
    scaler_advance(st, u.scaler, u.dynamic); /* scaler_update_kernel */
    plan->arrived = 0;
}

static __global__ void update_apply_kernel(mpt_optim_multi_args a, const update_plan *plan) {
    if (plan->skip) return; /* skipped step: nothing is written (uniform) */
    __shared__ int found;
    __shared__ int64_t start, end;
    __shared__ mpt_optim_args one;
    if (threadIdx.x == 0) {
        int slot = 0;
        int64_t s0 = 0;
        found = locate_chunk(a.slots, a.count, blockIdx.x, &slot, &s0, MPT_UPDATE_CHUNK);
        if (found) {
            slot_args(&one, a, a.slots[slot]);
            start = s0;
            end = s0 + MPT_UPDATE_CHUNK < one.n ? s0 + MPT_UPDATE_CHUNK : one.n;
        }
    }
    __syncthreads();
    if (!found) return; /* uniform over the block */
    const step_scalars s = plan->sc;
    const mpt_optim_args args = one;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) update_element(args, s, i);
}

void mpt_cuda_update_pass(mpt_backend *be, const mpt_update_pass_args *u) {
    mpt_update_pass_args_check(u); /* the contract (engine/backend.c) */
    mpt_cuda_opt_in_taken(mpt_cuda_ctx_of(be), MPT_CUDA_OPT_FUSED_UPDATE);
    const mpt_optim_multi_args *a = &u->optim;
    mpt_cuda_require_float(a->state_dtype, "update_pass (optimizer state)");
    if (a->count == 0 || a->numel == 0) { /* nothing to update: the scalar kernels alone */
        mpt_update_pass_as_calls(be, u);
        return;
    }
    const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    update_plan *plan = (update_plan *)ctx->update_plan;
    const unsigned blocks = multi_tensor_blocks(a->numel, a->count, MPT_UPDATE_CHUNK);
    update_check_kernel<<<blocks, MPT_CUDA_THREADS, 0, ctx->stream>>>(*u, plan);
    MPT_CUDA_CHECK_LAUNCH("update_check_kernel");
    update_apply_kernel<<<blocks, MPT_CUDA_THREADS, 0, ctx->stream>>>(*a, plan);
    MPT_CUDA_CHECK_LAUNCH("update_apply_kernel");
}
