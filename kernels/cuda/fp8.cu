/*
 * kernels/cuda/fp8.cu - the CUDA backend's FP8 operations (contracts: engine/backend.h; the recipe:
 * engine/amp/fp8.h): the scaled casts of an FP8 operand (per tensor, with the transposing copy the TN layout needs;
 * MX per block of 32), the per-step scale update, the exact decoding of MXFP8 operands for the device emulation of
 * MX GEMMs, which GPUs run which mode, and a check of CUDA's conversion intrinsics against ours for the cuda suite.
 *
 * Every per-element rule is engine/numerics.h's (mpt_f32_to_fp8, mpt_mx_scale_code, mpt_fp8_scale_from_amax), the
 * functions the CPU backend calls, so both backends cast to the same bits; with nvcc's defaults (IEEE division,
 * no --use_fast_math) 1/s and fmax/amax round as on the CPU. A per-tensor cast is four launches on the stream
 * (zero the amax, reduce it, the scale, the cast), reading and writing the scale state in device memory only: no
 * host synchronisation, so it is recorded into the step's CUDA Graph like every other operation.
 *
 * NOT YET RUN ON A GPU: compiled here (nvcc 13, sm_80/sm_90); tests/test_cuda_fp8.c checks it against the CPU
 * backend bit for bit when a GPU is lent.
 */
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_internal.cuh"

/* ---- amax ------------------------------------------------------------------------------------------------ */

static __global__ void fp8_amax_zero_kernel(mpt_fp8_meta *m) { m->amax = 0.0f; }

/* m->amax = max |x| by atomicMax on the bit patterns of |x|: non-negative floats order like their bits, and a NaN's
 * bits (0x7fc00000 and up, sign cleared) exceed inf's, so a NaN wins as on the CPU. Order-independent: the result is
 * the same on every run. */
static __global__ void fp8_amax_kernel(const void *x, mpt_dtype t, int64_t n, mpt_fp8_meta *m) {
    unsigned int best = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const unsigned int b = __float_as_uint(fabsf(mpt_dev_load(x, t, i)));
        best = b > best ? b : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned int other = __shfl_down_sync(0xffffffffu, best, o);
        best = other > best ? other : best;
    }
    if ((threadIdx.x & 31) == 0 && best) atomicMax((unsigned int *)&m->amax, best);
}

/* One thread: a non-finite amax flags the step; current scaling sets the scale from the amax (engine/backend.h). */
static __global__ void fp8_scale_kernel(mpt_fp8_meta *m, int current, float scaled_max, int pow2, float *found_inf) {
    const float amax = m->amax;
    const int finite = amax == amax && amax != INFINITY;
    if (!finite && found_inf) *found_inf = 1.0f;
    if (!current) return;
    const float s = mpt_fp8_scale_from_amax(amax, scaled_max, pow2, 1.0f);
    m->scale = s;
    m->scale_inv = 1.0f / s;
    if (finite && amax > 0.0f) m->amax_used = amax;
}

/* ---- casts ----------------------------------------------------------------------------------------------- */

/* q[r, c] = qt[c, r] = fp8(x[r, c] * scale) over the [R, C] source. */
static __global__ void fp8_cast_kernel(const void *x, mpt_dtype t, int64_t R, int64_t C, const mpt_fp8_meta *m, int e5,
                                       int sat, uint8_t *q, uint8_t *qt) {
    const float s = m->scale;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < R * C; i += (int64_t)gridDim.x * blockDim.x) {
        const uint8_t v = mpt_f32_to_fp8(mpt_dev_load(x, t, i) * s, e5, sat);
        if (q) q[i] = v;
        if (qt) qt[(i % C) * R + i / C] = v;
    }
}

/* One MX block per thread: n elements x[at + k * stride] (k < n), its scale code into *code, the elements into
 * q[k] (contiguous). The block rule is mpt_mx_scale_code's. */
static __device__ void mx_block(const void *x, mpt_dtype t, int64_t at, int64_t stride, int n, int e5, int sat,
                                int rounding, uint8_t *q, uint8_t *code) {
    float m = 0.0f;
    int nan = 0;
    for (int k = 0; k < n; k++) {
        const float a = fabsf(mpt_dev_load(x, t, at + (int64_t)k * stride));
        nan |= a != a;
        m = a > m ? a : m;
    }
    const uint8_t c = mpt_mx_scale_code(nan ? mpt_bits_f32(0x7fc00000u) : m, e5, rounding);
    const float f = c == MPT_E8M0_NAN ? mpt_bits_f32(0x7fc00000u) : mpt_pow2f(127 - (int32_t)c);
    for (int k = 0; k < n; k++) q[k] = mpt_f32_to_fp8(mpt_dev_load(x, t, at + (int64_t)k * stride) * f, e5, sat);
    *code = c;
}

/* Blocks of 32 along each row of the [R, C] source: q [R, C], scales [R, ceil(C / 32)]. */
static __global__ void mx_rows_kernel(const void *x, mpt_dtype t, int64_t R, int64_t C, int e5, int sat, int rounding,
                                      uint8_t *q, uint8_t *scales) {
    const int64_t nb = mpt_mx_blocks(C);
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < R * nb; b += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = b / nb, c0 = (b % nb) * MPT_MX_BLOCK;
        const int n = (int)(C - c0 < MPT_MX_BLOCK ? C - c0 : MPT_MX_BLOCK);
        mx_block(x, t, r * C + c0, 1, n, e5, sat, rounding, q + r * C + c0, scales + b);
    }
}

/* Blocks of 32 along each column of the [R, C] source, written transposed: qt [C, R], scales [C, ceil(R / 32)]. */
static __global__ void mx_cols_kernel(const void *x, mpt_dtype t, int64_t R, int64_t C, int e5, int sat, int rounding,
                                      uint8_t *qt, uint8_t *scales) {
    const int64_t nb = mpt_mx_blocks(R);
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < C * nb; b += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = b / nb, r0 = (b % nb) * MPT_MX_BLOCK;
        const int n = (int)(R - r0 < MPT_MX_BLOCK ? R - r0 : MPT_MX_BLOCK);
        mx_block(x, t, r0 * C + c, C, n, e5, sat, rounding, qt + c * R + r0, scales + b);
    }
}

void mpt_cuda_fp8_cast(mpt_backend *be, const mpt_fp8_cast_args *a) {
    const char *tag = a->tag ? a->tag : "?";
    mpt_cuda_require_float(a->x_dtype, "fp8 cast source");
    MPT_ASSERTF(mpt_dtype_is_fp8(a->fmt) && a->meta != NULL && a->rows >= 0 && a->cols >= 0,
                "fp8 cast %s: bad format, state or sizes", tag);
    MPT_ASSERTF(!a->mx || ((a->q == NULL) == (a->q_scales == NULL) && (a->qt == NULL) == (a->qt_scales == NULL)),
                "fp8 cast %s: an MX output needs its block scales", tag);
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    const int64_t R = a->rows, C = a->cols, n = R * C;
    const int e5 = a->fmt == MPT_DTYPE_E5M2;
    fp8_amax_zero_kernel<<<1, 1, 0, ctx->stream>>>(a->meta);
    MPT_CUDA_CHECK_LAUNCH("fp8_amax_zero_kernel");
    if (n > 0) {
        fp8_amax_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(a->x, a->x_dtype, n, a->meta);
        MPT_CUDA_CHECK_LAUNCH("fp8_amax_kernel");
    }
    fp8_scale_kernel<<<1, 1, 0, ctx->stream>>>(a->meta, !a->mx && a->current, a->scaled_max, a->pow2, a->found_inf);
    MPT_CUDA_CHECK_LAUNCH("fp8_scale_kernel");
    if (n == 0) return;
    if (!a->mx) {
        fp8_cast_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(a->x, a->x_dtype, R, C, a->meta, e5,
                                                                                      a->saturate, a->q, a->qt);
        MPT_CUDA_CHECK_LAUNCH("fp8_cast_kernel");
        return;
    }
    if (a->q) {
        mx_rows_kernel<<<mpt_cuda_blocks(ctx, R * mpt_mx_blocks(C)), MPT_CUDA_THREADS, 0, ctx->stream>>>(
            a->x, a->x_dtype, R, C, e5, a->saturate, a->mx_rounding, a->q, a->q_scales);
        MPT_CUDA_CHECK_LAUNCH("mx_rows_kernel");
    }
    if (a->qt) {
        mx_cols_kernel<<<mpt_cuda_blocks(ctx, C * mpt_mx_blocks(R)), MPT_CUDA_THREADS, 0, ctx->stream>>>(
            a->x, a->x_dtype, R, C, e5, a->saturate, a->mx_rounding, a->qt, a->qt_scales);
        MPT_CUDA_CHECK_LAUNCH("mx_cols_kernel");
    }
}

/* ---- the per-step update ------------------------------------------------------------------------------------ */

/* One thread per tensor: the history slot of this iteration, and with delayed scaling the scale from the window's
 * maximum (the CPU backend's loop, kernels/cpu/fp8.c). */
static __global__ void fp8_update_kernel(mpt_fp8_meta *meta, float *history, int n, int len, const int64_t *iteration,
                                         int delayed, float margin_factor, int pow2) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    mpt_fp8_meta *m = &meta[i];
    float *h = history + (int64_t)i * len;
    const float amax = m->amax;
    h[*iteration % len] = amax == amax && amax != INFINITY ? amax : 0.0f;
    if (!delayed) return;
    float w = 0.0f;
    for (int j = 0; j < len; j++) w = h[j] > w ? h[j] : w;
    if (!(w > 0.0f)) return;
    const float s = mpt_fp8_scale_from_amax(w, m->fmax * margin_factor, pow2, m->scale);
    m->scale = s;
    m->scale_inv = 1.0f / s;
    m->amax_used = w;
}

void mpt_cuda_fp8_update(mpt_backend *be, const mpt_fp8_update_args *a) {
    MPT_ASSERTF(a->n >= 0 && a->len >= 1 && a->iteration != NULL, "fp8 update: bad arguments");
    if (a->n == 0) return;
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    fp8_update_kernel<<<(a->n + 63) / 64, 64, 0, ctx->stream>>>(a->meta, a->history, a->n, a->len, a->iteration,
                                                               a->delayed, a->margin_factor, a->pow2);
    MPT_CUDA_CHECK_LAUNCH("fp8_update_kernel");
}

/* ---- MXFP8 operands for the device emulation (gemm.cu) ------------------------------------------------------- */

/* dst [rows, K] FP32 = src [rows, K] (E4M3/E5M2) x 2^(block scale - 127), exact. */
static __global__ void fp8_decode_kernel(float *dst, const uint8_t *src, int e5, int64_t rows, int64_t K,
                                         const uint8_t *scales) {
    const int64_t nb = mpt_mx_blocks(K);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * K; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / K, k = i % K;
        float v = mpt_fp8_decode(src[i], e5);
        if (scales) v *= mpt_e8m0_to_f32(scales[r * nb + k / MPT_MX_BLOCK]);
        dst[i] = v;
    }
}

void mpt_cuda_fp8_decode(mpt_cuda_ctx *ctx, float *dst, const uint8_t *src, mpt_dtype fmt, int64_t rows, int64_t K,
                         const uint8_t *block_scales) {
    if (rows * K == 0) return;
    fp8_decode_kernel<<<mpt_cuda_blocks(ctx, rows * K), MPT_CUDA_THREADS, 0, ctx->stream>>>(
        dst, src, fmt == MPT_DTYPE_E5M2, rows, K, block_scales);
    MPT_CUDA_CHECK_LAUNCH("fp8_decode_kernel");
}

/* ---- which GPUs run which mode ------------------------------------------------------------------------------- */

int mpt_cuda_fp8_support(mpt_backend *be, int mx, mpt_fp8_accum accum, int promote, char *msg, size_t len) {
    const cudaDeviceProp *p = &mpt_cuda_ctx_of(be)->prop;
    const int cc = p->major * 10 + p->minor;
    if (mx) {
        snprintf(msg, len, "mxfp8 on %s (sm_%d): the GEMMs run in the exact emulation on the device (FP8 elements and "
                           "their E8M0 block scales decoded to FP32, then an FP32 cuBLASLt GEMM with TF32 off), not on MX "
                           "Tensor Cores (Blackwell's; not used by this build)", p->name, cc);
        return 1;
    }
    if (cc < 89) {
        snprintf(msg, len, "FP8 GEMMs need FP8 Tensor Cores (compute capability 8.9, Ada, or 9.0, Hopper, and newer); "
                           "%s is sm_%d: use --device cpu (the exact emulation), bf16, or mxfp8 (emulated on the GPU)",
                 p->name, cc);
        return 0;
    }
    if (accum == MPT_FP8_ACCUM_FAST && promote != 0 && promote != 128) {
        /* cuBLASLt's FP8 GEMM: FAST_ACCUM 1 is the narrow accumulator throughout, FAST_ACCUM 0 the same promoted into
         * FP32 every 128 elements of K (both measured bit for bit against the CPU's model on an H200) */
        snprintf(msg, len, "--fp8-promote %d: on the GPU cuBLASLt accumulates FP8 products either in its narrow "
                           "accumulator throughout (--fp8-promote 0) or promoted into FP32 every 128 elements of K "
                           "(--fp8-promote 128); other intervals are modelled on the CPU only (--device cpu)", promote);
        return 0;
    }
    if (msg && len) msg[0] = '\0';
    return 1;
}

/* ---- the cuda suite's check of CUDA's conversions against ours ------------------------------------------------ */

/* kind 0: FP32 -> E4M3/E5M2 (e5m2, saturate): ours[i] = mpt_f32_to_fp8, cuda[i] = __nv_cvt_float_to_fp8 (on sm_89+
 * the saturating form is the cvt.rn.satfinite instruction); kind 1: the E8M0 round-up of RCEIL: ours =
 * mpt_f32_to_e8m0_ru, cuda = __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf). */
static __global__ void fp8_convert_check_kernel(const float *x, int64_t n, uint8_t *ours, uint8_t *cuda, int kind,
                                                int e5, int sat) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (kind == 0) {
            ours[i] = mpt_f32_to_fp8(v, e5, sat);
            cuda[i] = (uint8_t)__nv_cvt_float_to_fp8(v, sat ? __NV_SATFINITE : __NV_NOSAT, e5 ? __NV_E5M2 : __NV_E4M3);
        } else {
            ours[i] = mpt_f32_to_e8m0_ru(v);
            cuda[i] = (uint8_t)__nv_cvt_float_to_e8m0(v, __NV_SATFINITE, cudaRoundPosInf);
        }
    }
}

extern "C" void mpt_cuda_fp8_convert_check(mpt_backend *be, const float *x, int64_t n, uint8_t *ours, uint8_t *cuda,
                                           int kind, int e5m2, int saturate) {
    mpt_cuda_ctx *ctx = mpt_cuda_ctx_of(be);
    if (n <= 0) return;
    fp8_convert_check_kernel<<<mpt_cuda_blocks(ctx, n), MPT_CUDA_THREADS, 0, ctx->stream>>>(x, n, ours, cuda, kind,
                                                                                           e5m2, saturate);
    MPT_CUDA_CHECK_LAUNCH("fp8_convert_check_kernel");
}
