/*
 * kernels/cuda/telemetry.cu - the telemetry reductions on the GPU (engine/backend.h, "telemetry reductions";
 * issue 32): the stored-range counts, the rounding histogram with its rounding errors, and the lost-update counts of
 * a tensor in device memory, reduced on the device into a small result that is copied to the host, instead of the
 * whole tensor. The per-element decisions are engine/telemetry/elem.h's, the functions range.c and lost.c call on the
 * host, so the two cannot drift.
 *
 * Determinism (no floating-point atomics): every FP64 sum is two-pass with a fixed shape, as sum_squares in optim.cu:
 * each thread of a grid fixed by the GPU and n sums its grid-stride elements in order, a block sums its threads in a
 * fixed tree (mpt_block_sum), and one block sums the per-block partials in block order. Integer counts are added with
 * integer atomics where convenient (exact in any order). The histogram's mass per binade is exact: the values of a
 * binade e are sig * 2^(e-23) with a 24-bit integer significand sig, so the binade's sum is an integer sum of
 * significands (uint64, exact below 2^40 elements) scaled once, on the host, by 2^(e-23).
 *
 * Scratch: the context's reduction scratch (MPT_CUDA_SCRATCH_BYTES, stream-ordered with its other users) holds the
 * result (tel_result) at its start and the per-block partials after it.
 */
#include <stddef.h>

#include "kernels/cuda/cuda_internal.cuh"

extern "C" {
#include "engine/telemetry/elem.h"
#include "engine/telemetry/lost.h"
#include "engine/telemetry/range.h"
}

/* What a reduction leaves in device memory for the host: finished sums, finished counts, and the histogram. */
#define TEL_SLOTS 8
typedef struct tel_result {
    double d[TEL_SLOTS];             /* FP64 sums (range: none; rounding: err2, ref2 per shift; lost: 3 masses) */
    unsigned long long i[TEL_SLOTS]; /* counts (range: zero, subnormal, at_max, nonfinite; lost: nonzero, lost) */
    unsigned long long zero, nonfinite;                    /* the histogram's unbinned values */
    unsigned long long count[MPT_EXP_HIST_BINS], pow2[MPT_EXP_HIST_BINS], carry[MPT_EXP_HIST_BINS],
        carry_sub[MPT_EXP_HIST_BINS];
    unsigned long long sig[MPT_EXP_HIST_BINS];             /* sum of the 24-bit significands per binade */
} tel_result;

/* Bytes of the head (sums and counts) that range and lost copy back. */
#define TEL_HEAD_BYTES offsetof(tel_result, zero)

typedef struct tel_scratch {
    tel_result *res;      /* device */
    double *part_d;       /* [TEL_SLOTS][blocks] device */
    unsigned long long *part_i; /* [TEL_SLOTS][blocks] device */
    unsigned blocks;
} tel_scratch;

static tel_scratch scratch_of(const mpt_cuda_ctx *ctx, int64_t n, const char *what) {
    tel_scratch s;
    s.blocks = mpt_cuda_blocks(ctx, n);
    const size_t head = mpt_cuda_align256(sizeof(tel_result));
    const size_t part = (size_t)TEL_SLOTS * s.blocks * sizeof(double);
    MPT_ASSERTF(head + 2 * part <= MPT_CUDA_SCRATCH_BYTES, "%s: %u blocks' partial sums exceed the scratch", what,
                s.blocks);
    s.res = (tel_result *)ctx->scratch;
    s.part_d = (double *)((char *)ctx->scratch + head);
    s.part_i = (unsigned long long *)((char *)ctx->scratch + head + part);
    return s;
}

/* ---- the second pass: one block sums each slot's partials in block order ---------------------------------------- */

static __global__ void finish_kernel(tel_result *res, const double *part_d, int nd, const unsigned long long *part_i,
                                     int ni, unsigned blocks) {
    __shared__ double red_d[32];
    __shared__ unsigned long long red_i[32];
    for (int s = 0; s < nd; s++) {
        double acc = 0.0;
        for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) acc += part_d[(size_t)s * blocks + b];
        acc = mpt_block_sum(acc, red_d);
        if (threadIdx.x == 0) res->d[s] = acc;
    }
    for (int s = 0; s < ni; s++) {
        unsigned long long acc = 0;
        for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) acc += part_i[(size_t)s * blocks + b];
        acc = mpt_block_sum(acc, red_i);
        if (threadIdx.x == 0) res->i[s] = acc;
    }
}

static void launch_finish(const mpt_cuda_ctx *ctx, const tel_scratch *s, int nd, int ni) {
    finish_kernel<<<1, MPT_CUDA_THREADS, 0, ctx->stream>>>(s->res, s->part_d, nd, s->part_i, ni, s->blocks);
    MPT_CUDA_CHECK_LAUNCH("telemetry finish_kernel");
}

/* ---- stored range ------------------------------------------------------------------------------------------------ */

static __global__ void range_kernel(unsigned long long *part_i, const void *x, int wide, int64_t n, mpt_range_fmt f) {
    __shared__ unsigned long long red[32];
    unsigned long long c[4] = {0, 0, 0, 0};
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t a = wide ? ((const uint32_t *)x)[i] & 0x7fffffffu : ((const uint16_t *)x)[i] & 0x7fffu;
        const unsigned k = mpt_range_classify(a, f);
        c[0] += (k & MPT_RANGE_ZERO) != 0;
        c[1] += (k & MPT_RANGE_SUBNORMAL) != 0;
        c[2] += (k & MPT_RANGE_AT_MAX) != 0;
        c[3] += (k & MPT_RANGE_NONFINITE) != 0;
    }
    for (int s = 0; s < 4; s++) {
        const unsigned long long v = mpt_block_sum(c[s], red);
        if (threadIdx.x == 0) part_i[(size_t)s * gridDim.x + blockIdx.x] = v;
    }
}

void mpt_cuda_telemetry_range(mpt_backend *be, mpt_range *r, const void *x, mpt_dtype dtype, int64_t n) {
    mpt_cuda_opt_in_taken(mpt_cuda_ctx_of(be), MPT_CUDA_OPT_DEVICE_TELEMETRY);
    mpt_cuda_require_float(dtype, "telemetry_range");
    MPT_ASSERT(r != NULL && n >= 0 && (n == 0 || x != NULL));
    if (n > 0) {
        const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
        const mpt_format_desc *d = mpt_format_info((mpt_format)mpt_dtype_info(dtype)->format);
        const mpt_range_fmt f = mpt_range_fmt_of(d->exp_bits, d->man_bits, d->max_bits);
        const tel_scratch s = scratch_of(ctx, n, "telemetry_range");
        range_kernel<<<s.blocks, MPT_CUDA_THREADS, 0, ctx->stream>>>(s.part_i, x, mpt_dtype_size(dtype) == 4, n, f);
        MPT_CUDA_CHECK_LAUNCH("range_kernel");
        launch_finish(ctx, &s, 0, 4);
        tel_result h;
        be->to_host(be, &h, s.res, TEL_HEAD_BYTES);
        r->zero += (int64_t)h.i[0];
        r->subnormal += (int64_t)h.i[1];
        r->at_max += (int64_t)h.i[2];
        r->nonfinite += (int64_t)h.i[3];
    }
    r->n += n;
}

/* ---- the rounding histogram and the rounding errors -------------------------------------------------------------- */

typedef struct shifts {
    int k[MPT_TELEMETRY_MAX_SHIFTS];
    int n_k;
} shifts;

/* Block histogram in shared memory (integer atomics: exact), flushed into res with integer atomics; the zero and
 * non-finite counts likewise; per-thread FP64 error sums, block-summed into part_d: slot 2j err2, 2j+1 ref2. */
static __global__ void rounding_kernel(tel_result *res, double *part_d, const float *v, int64_t n, mpt_round_fmt f,
                                       shifts sh) {
    __shared__ unsigned long long cnt[MPT_EXP_HIST_BINS], p2[MPT_EXP_HIST_BINS], car[MPT_EXP_HIST_BINS],
        car_sub[MPT_EXP_HIST_BINS], sig[MPT_EXP_HIST_BINS];
    __shared__ double red[32];
    __shared__ unsigned long long red_i[32];
    for (int j = threadIdx.x; j < MPT_EXP_HIST_BINS; j += blockDim.x) cnt[j] = p2[j] = car[j] = car_sub[j] = sig[j] = 0;
    __syncthreads();
    unsigned long long zero = 0, nonfinite = 0;
    double err2[MPT_TELEMETRY_MAX_SHIFTS] = {0.0, 0.0}, ref2[MPT_TELEMETRY_MAX_SHIFTS] = {0.0, 0.0};
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = v[i];
        mpt_exp_class c;
        const int k = mpt_exp_classify(x, f.b, &c);
        if (k == MPT_EXP_ZERO) {
            zero++;
        } else if (k == MPT_EXP_NONFINITE) {
            nonfinite++;
            continue; /* the errors skip inf and NaN, as mpt_round_err_add does */
        } else {
            atomicAdd(&cnt[c.idx], 1ull);
            if (c.pow2) atomicAdd(&p2[c.idx], 1ull);
            if (c.carry) atomicAdd(&car[c.idx], 1ull);
            if (c.carry_sub) atomicAdd(&car_sub[c.idx], 1ull);
            atomicAdd(&sig[c.idx], (unsigned long long)c.sig);
        }
        const double xd = (double)x;
        for (int j = 0; j < sh.n_k; j++) {
            const double d = mpt_round_err_one(x, sh.k[j], f);
            err2[j] += d * d;
            ref2[j] += xd * xd;
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < MPT_EXP_HIST_BINS; j += blockDim.x) {
        if (!cnt[j]) continue;
        atomicAdd(&res->count[j], cnt[j]);
        atomicAdd(&res->pow2[j], p2[j]);
        atomicAdd(&res->carry[j], car[j]);
        atomicAdd(&res->carry_sub[j], car_sub[j]);
        atomicAdd(&res->sig[j], sig[j]);
    }
    zero = mpt_block_sum(zero, red_i);
    nonfinite = mpt_block_sum(nonfinite, red_i);
    if (threadIdx.x == 0) {
        atomicAdd(&res->zero, zero);
        atomicAdd(&res->nonfinite, nonfinite);
    }
    for (int j = 0; j < sh.n_k; j++) {
        const double e = mpt_block_sum(err2[j], red), r = mpt_block_sum(ref2[j], red);
        if (threadIdx.x == 0) {
            part_d[(size_t)(2 * j) * gridDim.x + blockIdx.x] = e;
            part_d[(size_t)(2 * j + 1) * gridDim.x + blockIdx.x] = r;
        }
    }
}

void mpt_cuda_telemetry_rounding(mpt_backend *be, mpt_exp_hist *h, mpt_round_err *err, const int *k, int n_k,
                                 const float *v, int64_t n) {
    mpt_cuda_opt_in_taken(mpt_cuda_ctx_of(be), MPT_CUDA_OPT_DEVICE_TELEMETRY);
    MPT_ASSERT(h != NULL && n >= 0 && (n == 0 || v != NULL));
    MPT_ASSERTF(h->target == MPT_DTYPE_F16 || h->target == MPT_DTYPE_BF16, "telemetry_rounding: target %s",
                mpt_dtype_name(h->target));
    MPT_ASSERTF(n_k >= 0 && n_k <= MPT_TELEMETRY_MAX_SHIFTS && (n_k == 0 || (k != NULL && err != NULL)),
                "telemetry_rounding: %d shifts (at most %d, with k and err)", n_k, MPT_TELEMETRY_MAX_SHIFTS);
    if (n > 0) {
        const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
        const mpt_format_desc *d = mpt_format_info((mpt_format)mpt_dtype_info(h->target)->format);
        const mpt_round_fmt f = mpt_round_fmt_of(d->emin, d->emax, d->man_bits);
        shifts sh;
        sh.n_k = n_k;
        for (int j = 0; j < MPT_TELEMETRY_MAX_SHIFTS; j++) sh.k[j] = j < n_k ? k[j] : 0;
        const tel_scratch s = scratch_of(ctx, n, "telemetry_rounding");
        MPT_CUDA_CHECK(cudaMemsetAsync(s.res, 0, sizeof(tel_result), ctx->stream));
        rounding_kernel<<<s.blocks, MPT_CUDA_THREADS, 0, ctx->stream>>>(s.res, s.part_d, v, n, f, sh);
        MPT_CUDA_CHECK_LAUNCH("rounding_kernel");
        launch_finish(ctx, &s, 2 * n_k, 0);
        tel_result hres; /* ~11 KB on the stack: a telemetry step allocates nothing */
        const tel_result *hr = &hres;
        be->to_host(be, &hres, s.res, sizeof hres);
        h->zero += (int64_t)hr->zero;
        h->nonfinite += (int64_t)hr->nonfinite;
        for (int j = 0; j < MPT_EXP_HIST_BINS; j++) {
            if (!hr->count[j]) continue;
            h->count[j] += (int64_t)hr->count[j];
            h->pow2[j] += (int64_t)hr->pow2[j];
            h->carry[j] += (int64_t)hr->carry[j];
            h->carry_sub[j] += (int64_t)hr->carry_sub[j];
            h->mass[j] += ldexp((double)hr->sig[j], j + MPT_EXP_HIST_EMIN - 23);
        }
        for (int j = 0; j < n_k; j++) {
            err[j].err2 += hr->d[2 * j];
            err[j].ref2 += hr->d[2 * j + 1];
        }
    }
    h->n += n;
}

/* ---- lost updates ---------------------------------------------------------------------------------------------- */

/* counterfactual (cf): w_new is RNE(w_old + delta) in dtype (F16 or BF16) instead of a buffer. Slots: part_d 0 mass,
 * 1 mass_lost, 2 mass_applied; part_i 0 nonzero, 1 lost. */
static __global__ void lost_kernel(double *part_d, unsigned long long *part_i, const void *w_old, const void *w_new,
                                   mpt_dtype dtype, const float *delta, int64_t n, int cf) {
    __shared__ double red[32];
    __shared__ unsigned long long red_i[32];
    mpt_lost_sums s = {0, 0, 0.0, 0.0, 0.0};
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float old = mpt_dev_load(w_old, dtype, i), d = delta[i];
        const float neu = cf ? mpt_lost_counterfactual_new(old, d, dtype == MPT_DTYPE_F16) : mpt_dev_load(w_new, dtype, i);
        mpt_lost_add_one(&s, old, neu, d);
    }
    const double sums[3] = {s.mass, s.mass_lost, s.mass_applied};
    for (int j = 0; j < 3; j++) {
        const double v = mpt_block_sum(sums[j], red);
        if (threadIdx.x == 0) part_d[(size_t)j * gridDim.x + blockIdx.x] = v;
    }
    const unsigned long long counts[2] = {(unsigned long long)s.nonzero, (unsigned long long)s.lost};
    for (int j = 0; j < 2; j++) {
        const unsigned long long v = mpt_block_sum(counts[j], red_i);
        if (threadIdx.x == 0) part_i[(size_t)j * gridDim.x + blockIdx.x] = v;
    }
}

static void lost_run(mpt_backend *be, mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype,
                     const float *delta, int64_t n, int cf) {
    MPT_ASSERT(r != NULL && n >= 0 && (n == 0 || (w_old != NULL && delta != NULL && (cf || w_new != NULL))));
    if (n > 0) {
        const mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
        const tel_scratch s = scratch_of(ctx, n, "telemetry_lost");
        lost_kernel<<<s.blocks, MPT_CUDA_THREADS, 0, ctx->stream>>>(s.part_d, s.part_i, w_old, w_new, dtype, delta, n,
                                                                     cf);
        MPT_CUDA_CHECK_LAUNCH("lost_kernel");
        launch_finish(ctx, &s, 3, 2);
        tel_result h;
        be->to_host(be, &h, s.res, TEL_HEAD_BYTES);
        r->mass += h.d[0];
        r->mass_lost += h.d[1];
        r->mass_applied += h.d[2];
        r->nonzero += (int64_t)h.i[0];
        r->lost += (int64_t)h.i[1];
    }
    r->n += n;
}

void mpt_cuda_telemetry_lost(mpt_backend *be, mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype,
                             const float *delta, int64_t n) {
    mpt_cuda_opt_in_taken(mpt_cuda_ctx_of(be), MPT_CUDA_OPT_DEVICE_TELEMETRY);
    mpt_cuda_require_float(dtype, "telemetry_lost");
    lost_run(be, r, w_old, w_new, dtype, delta, n, 0);
}

void mpt_cuda_telemetry_lost_counterfactual(mpt_backend *be, mpt_lost *r, const void *w_old, mpt_dtype dtype,
                                            const float *delta, int64_t n) {
    mpt_cuda_opt_in_taken(mpt_cuda_ctx_of(be), MPT_CUDA_OPT_DEVICE_TELEMETRY);
    MPT_ASSERTF(dtype == MPT_DTYPE_F16 || dtype == MPT_DTYPE_BF16, "telemetry_lost_counterfactual: target %s",
                mpt_dtype_name(dtype));
    lost_run(be, r, w_old, NULL, dtype, delta, n, 1);
}
