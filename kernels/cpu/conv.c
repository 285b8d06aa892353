/*
 * kernels/cpu/conv.c - 2-D convolution on the CPU: im2col + the CPU GEMM, per image.
 *
 * Layouts (engine/backend.h, mpt_conv_args): x [N,C,H,W], w [K,C,R,S], y/dy [N,K,P,Q], cross-correlation
 * with zero padding as torch.nn.functional.conv2d computes it:
 *     y[n,k,p,q] = bias[k] + sum_{c,r,s} w[k,c,r,s] * x[n, c, p*sh - ph + r, q*sw - pw + s]
 * The column matrix of image n is col[(c*R + r)*S + s, p*Q + q] = x[n, c, p*sh-ph+r, q*sw-pw+s] (0 in the
 * padding), [C*R*S, P*Q], in the compute dtype (gathering is exact) or, in the emulated TF32/F16/BF16 modes, in the
 * FP32 values the GEMM would convert it to ("Conversions" below). Then, per image, with the GEMM of
 * kernels/cpu/gemm.c and the backend's kernel set and engine (so convolutions have exactly the GEMM numerics:
 * emulated, operands in the math mode's format, FP32 products and sums, one rounding of the output; native bf16,
 * the BF16 units' numerics):
 *   forward          y_n[K, PQ]   = w[K, CRS] * col[CRS, PQ] + bias   (FP32 y: y_n is first filled with bias[k]
 *                                   and the GEMM runs with beta = 1; 16-bit y: the FP32 product, + bias[k] in
 *                                   FP32, then rounded to y's dtype: acc + bias rounded as gemm.c's epilogue does)
 *   backward-data    dcol[CRS, PQ] = w^T * dy_n (FP32 output); col2im sums dcol into an FP32 image
 *                                   buffer; then dx_n = round(dx_n + buffer), one rounding per element
 *   backward-filter  P_n[K, CRS]  = dy_n[K, PQ] * col^T (FP32 output); dw = (((dw + P_0) + P_1) + ...) in
 *                                   image order, each element in FP32 (P_0 alone when not accumulating)
 *                    db[k]       += sum_{n,p,q} dy[n,k,p,q] (FP32)
 * A 1x1 convolution with stride 1 and no padding uses x_n itself as its column matrix.
 *
 * Conversions: an emulated math mode (TF32, F16, BF16 with the emulate kernel set: mpt_cpu_gemm_converts) runs its
 * FP32 GEMM on FP32 copies of the operands (TF32-rounded or exactly widened, element by element). Done inside each
 * per-image GEMM, that converts the weights once per image and the column matrix once per tap (R*S times per input
 * element, after writing it). conv.c converts instead: the weights once per pass, each image once (into the padded
 * copy im2col reads, so the column matrix is gathered in FP32) and each dy_n once, and runs the GEMM with math FP32
 * on them: the same engine call on the same FP32 values, hence the same bits (tests/test_conv.c checks every pass
 * against per-image GEMMs of the math mode itself, bit for bit). Not under a summation model (--accum-model,
 * mpt_cpu_gemm_modelled): a GEMM of math FP32 is summed by the engine, so the per-image GEMMs then run in the math mode
 * itself on the stored operands and convert them, each summed by the model; the weight gradient still adds the images'
 * FP32 products in image order (a GPU's cuDNN sums over the images in an order of its own).
 *
 * Scratch comes from be->workspace (conv_plan; mpt_cpu_conv2d_workspace returns the maximum over the three passes):
 * once, the FP32 weights (emulated modes, forward and backward-data) or backward-filter's per-image products of a
 * group of images; per thread, the column matrix (elements of dtype, or FP32), the zero-padded image im2col reads
 * (likewise; none without padding and conversion), backward-data's dcol and padded FP32 image, dy_n in FP32
 * (emulated), and the GEMM's scratch. Each part is padded to 64 bytes. The workspace query, at graph build, also
 * creates the oneDNN primitives of the per-image GEMMs (kernels/cpu/gemm.h), the forward's with and without a bias
 * (the pointers are not known then); the passes only find them. Reference: Chellapilla et al. 2006, "High
 * performance convolutional neural networks for document processing" (the im2col lowering); cuDNN documents the
 * same three passes.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* CONV_GROUP: images whose weight-gradient products are held at once before they are summed (backward-filter). */
enum { CONV_ALIGN = 64, CONV_CHUNK = 512, CONV_LANES = 16, CONV_GROUP = 16 };

static size_t conv_pad(size_t bytes) { return (bytes + CONV_ALIGN - 1) & ~(size_t)(CONV_ALIGN - 1); }

static mpt_dtype conv_operand_dtype(mpt_math m) {
    return m == MPT_MATH_F16 ? MPT_DTYPE_F16 : m == MPT_MATH_BF16 ? MPT_DTYPE_BF16 : MPT_DTYPE_F32;
}

static void conv_check(const mpt_conv_args *a, const char *op) {
    const mpt_conv_shape *s = &a->s;
    const char *tag = a->tag ? a->tag : "?";
    MPT_ASSERTF(s->N >= 1 && s->C >= 1 && s->H >= 1 && s->W >= 1 && s->K >= 1 && s->R >= 1 && s->S >= 1 &&
                    s->pad_h >= 0 && s->pad_w >= 0 && s->stride_h >= 1 && s->stride_w >= 1,
                "%s %s: bad shape N=%d C=%d H=%d W=%d K=%d R=%d S=%d pad=%d,%d stride=%d,%d", op, tag, s->N, s->C,
                s->H, s->W, s->K, s->R, s->S, s->pad_h, s->pad_w, s->stride_h, s->stride_w);
    MPT_ASSERTF(s->H + 2 * s->pad_h >= s->R && s->W + 2 * s->pad_w >= s->S &&
                    s->P == (s->H + 2 * s->pad_h - s->R) / s->stride_h + 1 &&
                    s->Q == (s->W + 2 * s->pad_w - s->S) / s->stride_w + 1,
                "%s %s: output %dx%d does not match input %dx%d, kernel %dx%d, pad %d,%d, stride %d,%d", op, tag,
                s->P, s->Q, s->H, s->W, s->R, s->S, s->pad_h, s->pad_w, s->stride_h, s->stride_w);
    MPT_ASSERTF((unsigned)a->math < MPT_MATH_COUNT && a->dtype == conv_operand_dtype(a->math),
                "%s %s: math %s needs dtype %s, got %s", op, tag, mpt_math_name(a->math),
                mpt_dtype_name(conv_operand_dtype(a->math)), mpt_dtype_name(a->dtype));
}

/* Whether x_n can serve as its own column matrix (1x1 kernel, stride 1, no padding). */
static int conv_is_pointwise(const mpt_conv_shape *s) {
    return s->R == 1 && s->S == 1 && s->stride_h == 1 && s->stride_w == 1 && s->pad_h == 0 && s->pad_w == 0;
}

/* memcpy for the short rows of im2col (LeNet: 20-112 bytes), inlined: a call to the library's memcpy costs as
 * much as the copy. Overlapping unaligned vector moves, as the library does for small sizes. */
static inline __attribute__((always_inline)) void conv_copy_row(char *dst, const char *src, size_t n) {
    if (n >= 32) {
        size_t i = 0;
        for (; i + 32 <= n; i += 32) _mm256_storeu_si256((__m256i *)(dst + i), _mm256_loadu_si256((const __m256i *)(src + i)));
        if (i < n) _mm256_storeu_si256((__m256i *)(dst + n - 32), _mm256_loadu_si256((const __m256i *)(src + n - 32)));
    } else if (n >= 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)src), b = _mm_loadu_si128((const __m128i *)(src + n - 16));
        _mm_storeu_si128((__m128i *)dst, a);
        _mm_storeu_si128((__m128i *)(dst + n - 16), b);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = src[i];
    }
}

/* Elements of one zero-padded image [C, H + 2ph, W + 2pw] (col2im's FP32 accumulator). */
static int64_t conv_padded_image_elems(const mpt_conv_shape *s) {
    return (int64_t)s->C * (s->H + 2 * s->pad_h) * (s->W + 2 * s->pad_w);
}

/* The image im2col reads, [C, H + 2ph, W + 2pw]: x_n itself when there is no padding and no conversion, else xp
 * (conv_source_bytes), whose borders are zeroed once per thread (zero_borders: only interiors are rewritten per
 * image) and whose interior is a copy of x_n's bits or, for an emulated math mode (cvt), x_n's FP32 operand values
 * (mpt_cpu_gemm_convert: TF32 rounding or exact widening), so that the column matrix is converted once per element of
 * the image instead of once per tap. */
static const void *conv_source(void *xp, const void *x, const mpt_conv_args *a, int cvt, int zero_borders) {
    const mpt_conv_shape *s = &a->s;
    const int Hp = s->H + 2 * s->pad_h, Wp = s->W + 2 * s->pad_w;
    if (!cvt && s->pad_h == 0 && s->pad_w == 0) return x;
    const size_t es = mpt_dtype_size(a->dtype), os = cvt ? sizeof(float) : es;
    char *d = xp;
    const char *xs = x;
    if (zero_borders && (s->pad_h || s->pad_w)) memset(d, 0, (size_t)conv_padded_image_elems(s) * os);
    if (cvt && s->pad_h == 0 && s->pad_w == 0) { /* one contiguous conversion */
        mpt_cpu_gemm_convert(xp, x, a->math, (int64_t)s->C * s->H * s->W);
        return xp;
    }
    for (int c = 0; c < s->C; c++)
        for (int h = 0; h < s->H; h++) {
            char *row = d + ((size_t)(c * Hp + h + s->pad_h) * Wp + s->pad_w) * os;
            const char *in = xs + (size_t)(c * s->H + h) * s->W * es;
            if (cvt) mpt_cpu_gemm_convert((float *)row, in, a->math, s->W);
            else memcpy(row, in, (size_t)s->W * es);
        }
    return xp;
}

/* Bytes of conv_source's buffer (0 when x_n is read as it is). */
static size_t conv_source_bytes(const mpt_conv_args *a, int cvt) {
    const mpt_conv_shape *s = &a->s;
    if (!cvt && s->pad_h == 0 && s->pad_w == 0) return 0;
    return conv_pad((size_t)conv_padded_image_elems(s) * (cvt ? sizeof(float) : mpt_dtype_size(a->dtype)));
}

/* col[(c*R + r)*S + t, p*Q + q] = src[c, p*sh + r, q*sw + t] for the padded image src of conv_source (elements of es
 * bytes, copied as bits), so that every row of col is one unconditional copy: Q contiguous elements for stride 1
 * (conv_copy_row), a strided gather otherwise. LeNet's rows are 10-28 elements long; the bounds tests of lowering
 * without the padded copy cost more than the copies. */
static void conv_im2col(void *col, const void *src, const mpt_conv_shape *s, size_t es) {
    const int Hp = s->H + 2 * s->pad_h, Wp = s->W + 2 * s->pad_w, P = s->P, Q = s->Q;
    const int sh = s->stride_h, sw = s->stride_w;
    char *out = col;
    const size_t row_bytes = (size_t)Q * es;
    for (int c = 0; c < s->C; c++)
        for (int r = 0; r < s->R; r++)
            for (int t = 0; t < s->S; t++)
                for (int p = 0; p < P; p++, out += row_bytes) {
                    const char *in = (const char *)src + ((size_t)(c * Hp + p * sh + r) * Wp + t) * es;
                    if (sw == 1) {
                        conv_copy_row(out, in, row_bytes);
                    } else if (es == 2) {
                        for (int q = 0; q < Q; q++) ((uint16_t *)out)[q] = ((const uint16_t *)in)[q * sw];
                    } else {
                        for (int q = 0; q < Q; q++) ((uint32_t *)out)[q] = ((const uint32_t *)in)[q * sw];
                    }
                }
}

/* imgp[c, h + ph, w + pw] += dcol[(c*R + r)*S + t, p*Q + q] over the taps that read (h, w), FP32, into the
 * zero-initialised padded image imgp [C, H+2ph, W+2pw] (the caller crops it): like conv_im2col, every row is
 * an unconditional loop; the terms of each element are added in the same (c, r, t, p) order as before. */
static void conv_col2im(float *imgp, const float *dcol, const mpt_conv_shape *s) {
    const int Hp = s->H + 2 * s->pad_h, Wp = s->W + 2 * s->pad_w, P = s->P, Q = s->Q;
    const int sh = s->stride_h, sw = s->stride_w;
    const float *in = dcol;
    for (int c = 0; c < s->C; c++)
        for (int r = 0; r < s->R; r++)
            for (int t = 0; t < s->S; t++)
                for (int p = 0; p < P; p++, in += Q) {
                    float *out = imgp + ((int64_t)(c * Hp + p * sh + r)) * Wp + t;
                    if (sw == 1)
                        for (int q = 0; q < Q; q++) out[q] = out[q] + in[q];
                    else
                        for (int q = 0; q < Q; q++) out[q * sw] = out[q * sw] + in[q];
                }
}

/* GEMM arguments of each pass for one image (pointers filled by the caller). With cvt (conv_plan) the GEMM runs with
 * math FP32 on the FP32 operand values conv.c has converted itself. */
static mpt_gemm_args conv_gemm_forward(const mpt_conv_args *a, int cvt, int with_bias) {
    const mpt_conv_shape *s = &a->s;
    mpt_gemm_args g = {0};
    g.M = s->K;
    g.N = (int64_t)s->P * s->Q;
    g.K = (int64_t)s->C * s->R * s->S;
    g.a_dtype = g.b_dtype = cvt ? MPT_DTYPE_F32 : a->dtype;
    /* an F32 y_n is filled with the bias and the GEMM adds the product to it (beta 1: one FP32 rounding); a 16-bit
     * y_n takes the FP32 product in a buffer, and conv_bias_round adds the bias and rounds (conv_plan.ybuf_off) */
    g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.beta = with_bias && a->dtype == MPT_DTYPE_F32 ? 1.0f : 0.0f; /* an F32 y_n holds the bias */
    g.math = cvt ? MPT_MATH_FP32 : a->math;
    g.epilogue = MPT_EPILOGUE_NONE;
    g.tag = a->tag;
    return g;
}

static mpt_gemm_args conv_gemm_backward_data(const mpt_conv_args *a, int cvt) {
    const mpt_conv_shape *s = &a->s;
    mpt_gemm_args g = {0};
    g.trans_a = 1;
    g.M = (int64_t)s->C * s->R * s->S;
    g.N = (int64_t)s->P * s->Q;
    g.K = s->K;
    g.a_dtype = g.b_dtype = cvt ? MPT_DTYPE_F32 : a->dtype;
    g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    g.math = cvt ? MPT_MATH_FP32 : a->math;
    g.epilogue = MPT_EPILOGUE_NONE;
    g.tag = a->tag;
    return g;
}

static mpt_gemm_args conv_gemm_backward_filter(const mpt_conv_args *a, int cvt) {
    const mpt_conv_shape *s = &a->s;
    mpt_gemm_args g = {0};
    g.trans_b = 1;
    g.M = s->K;
    g.N = (int64_t)s->C * s->R * s->S;
    g.K = (int64_t)s->P * s->Q;
    g.a_dtype = g.b_dtype = cvt ? MPT_DTYPE_F32 : a->dtype;
    g.c_dtype = MPT_DTYPE_F32;
    g.alpha = 1.0f;
    g.beta = 0.0f; /* each image's product into its own partial, summed in image order afterwards */
    g.math = cvt ? MPT_MATH_FP32 : a->math;
    g.epilogue = MPT_EPILOGUE_NONE;
    g.tag = a->tag;
    return g;
}

/* The three passes. */
typedef enum conv_pass { CONV_FORWARD = 0, CONV_BACKWARD_DATA, CONV_BACKWARD_FILTER } conv_pass;

/* What a pass runs and where its scratch lives (byte offsets, each part padded to 64 bytes). Shared (once, at the
 * start of be->workspace): the FP32 weights (cvt, forward and backward-data) or backward-filter's partial products of
 * one group of images. Per thread, after it: its lowering or col2im buffers, dy_n's FP32 values (cvt, backward), then
 * the GEMM's scratch. */
typedef struct conv_plan {
    int cvt;          /* emulated TF32/F16/BF16 (mpt_cpu_gemm_converts) without a summation model: operands converted
                         here, the GEMM in FP32 */
    mpt_gemm_args g;  /* the per-image GEMM, pointers unset */
    size_t shared;    /* bytes before the threads' parts */
    size_t col_off, src_off, dcol_off, img_off, dy_off, ybuf_off, gemm_off, per_thread;
} conv_plan;

/* The plan of a pass. At graph build (`build`: the workspace query) it creates the oneDNN primitives of its GEMM
 * (mpt_cpu_gemm_ws_bytes_on), for the forward both forms, with a bias and without, since the pointers (a->bias
 * among them) are not known then; in a step it only finds the one it runs (mpt_cpu_gemm_step_ws_bytes_on, which
 * aborts naming the GEMM if the build did not make it: ARCHITECTURE decision 4). */
static conv_plan conv_plan_of(const mpt_cpu_exec *x, const mpt_conv_args *a, conv_pass pass, int build) {
    const mpt_conv_shape *s = &a->s;
    conv_plan p = {0};
    p.cvt = mpt_cpu_gemm_converts(x, a->math) && !mpt_cpu_gemm_modelled(x, a->math);
    const size_t os = p.cvt ? sizeof(float) : mpt_dtype_size(a->dtype); /* the lowered operands' element size */
    const size_t CRS = (size_t)s->C * s->R * s->S, PQ = (size_t)s->P * s->Q;
    const size_t col = conv_is_pointwise(s) ? 0 : conv_pad(CRS * PQ * os);
    const size_t dyc = p.cvt ? conv_pad((size_t)s->K * PQ * sizeof(float)) : 0;
    size_t off = 0;
    switch (pass) {
    case CONV_FORWARD:
    case CONV_BACKWARD_FILTER:
        p.g = pass == CONV_FORWARD ? conv_gemm_forward(a, p.cvt, a->bias != NULL) : conv_gemm_backward_filter(a, p.cvt);
        p.col_off = off;
        off += col;
        p.src_off = off;
        off += conv_source_bytes(a, p.cvt);
        if (pass == CONV_FORWARD && a->dtype != MPT_DTYPE_F32) { /* the FP32 product of a 16-bit y_n */
            p.ybuf_off = off;
            off += conv_pad((size_t)s->K * PQ * sizeof(float));
        }
        if (pass == CONV_BACKWARD_FILTER) {
            p.dy_off = off;
            off += dyc;
            const int group = s->N < CONV_GROUP ? s->N : CONV_GROUP;
            p.shared = conv_pad((size_t)group * (size_t)s->K * CRS * sizeof(float));
        }
        break;
    default:
        p.g = conv_gemm_backward_data(a, p.cvt);
        p.dcol_off = off;
        off += conv_pad(CRS * PQ * sizeof(float));
        p.img_off = off;
        off += conv_pad((size_t)conv_padded_image_elems(s) * sizeof(float));
        p.dy_off = off;
        off += dyc;
        break;
    }
    if (pass != CONV_BACKWARD_FILTER && p.cvt) p.shared = conv_pad((size_t)s->K * CRS * sizeof(float));
    p.gemm_off = off;
    size_t gemm = 0;
    if (!build) {
        gemm = mpt_cpu_gemm_step_ws_bytes_on(x, &p.g);
    } else if (pass == CONV_FORWARD) { /* both forms; the larger scratch */
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const mpt_gemm_args g = conv_gemm_forward(a, p.cvt, with_bias);
            const size_t b = mpt_cpu_gemm_ws_bytes_on(x, &g);
            if (b > gemm) gemm = b;
        }
    } else {
        gemm = mpt_cpu_gemm_ws_bytes_on(x, &p.g);
    }
    p.per_thread = off + gemm;
    return p;
}

/* Threads the build sizes the workspace for (the GEMMs' thread count, mpt_cpu_set_threads). */
static int conv_build_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

size_t mpt_cpu_conv2d_workspace(mpt_backend *be, const mpt_conv_args *a) {
    conv_check(a, "conv2d_workspace");
    const mpt_cpu_exec *x = mpt_cpu_exec_of(be);
    const size_t t = (size_t)conv_build_threads();
    size_t m = 0;
    for (int p = 0; p < 3; p++) {
        const conv_plan pl = conv_plan_of(x, a, (conv_pass)p, 1);
        size_t need = pl.shared + t * pl.per_thread;
        if (need > m) m = need;
    }
    return m;
}

/* Threads a pass runs its images on: OpenMP's count, fewer if the workspace (sized at graph build for the thread
 * count then) holds fewer threads' buffers, and no more than there are images; aborts if not even one fits. The
 * result never depends on it: each image is computed alone. */
static int conv_threads(mpt_backend *be, const mpt_conv_args *a, const conv_plan *pl, const char *op) {
    const size_t need = pl->shared + pl->per_thread;
    MPT_ASSERTF(be->workspace_bytes >= need && (need == 0 || be->workspace != NULL),
                "%s %s: needs %zu bytes of workspace, has %zu (reserve conv2d_workspace() at build time)", op,
                a->tag ? a->tag : "?", need, be->workspace_bytes);
    int t = conv_build_threads();
    if (pl->per_thread > 0 && (size_t)t > (be->workspace_bytes - pl->shared) / pl->per_thread)
        t = (int)((be->workspace_bytes - pl->shared) / pl->per_thread);
    if (t > a->s.N) t = a->s.N;
    return t < 1 ? 1 : t;
}

#ifdef _OPENMP
static int conv_thread_num(void) { return omp_get_thread_num(); }
#else
static int conv_thread_num(void) { return 0; }
#endif

/* The weights as the GEMM takes them: w itself, or (cvt) their FP32 operand values, converted once per pass into the
 * shared part of the workspace (instead of once per image inside the GEMM). */
static const void *conv_weights(mpt_backend *be, const mpt_conv_args *a, const conv_plan *pl) {
    if (!pl->cvt) return a->w;
    const mpt_conv_shape *s = &a->s;
    mpt_cpu_gemm_convert(be->workspace, a->w, a->math, (int64_t)s->K * s->C * s->R * s->S);
    return be->workspace;
}

/* B (forward) or B^T (backward-filter) of image n's GEMM: x_n's column matrix, lowered (and converted, cvt) into this
 * thread's buffers, or x_n (or its FP32 values) itself for a pointwise convolution. */
static const void *conv_lower(char *ws, const conv_plan *pl, const mpt_conv_args *a, int n, int *zeroed) {
    const mpt_conv_shape *s = &a->s;
    const size_t es = mpt_dtype_size(a->dtype);
    const char *xn = (const char *)a->x + (size_t)((int64_t)n * s->C * s->H * s->W) * es;
    const void *src = conv_source(ws + pl->src_off, xn, a, pl->cvt, !*zeroed);
    *zeroed = 1;
    if (conv_is_pointwise(s)) return src;
    conv_im2col(ws + pl->col_off, src, s, pl->cvt ? sizeof(float) : es);
    return ws + pl->col_off;
}

/* dy_n as the GEMM takes it: itself, or (cvt) its FP32 operand values in this thread's buffer. */
static const void *conv_dy(char *ws, const conv_plan *pl, const mpt_conv_args *a, int n) {
    const mpt_conv_shape *s = &a->s;
    const int64_t KPQ = (int64_t)s->K * s->P * s->Q;
    const char *dyn = (const char *)a->dy + (size_t)(n * KPQ) * mpt_dtype_size(a->dtype);
    if (!pl->cvt) return dyn;
    mpt_cpu_gemm_convert((float *)(ws + pl->dy_off), dyn, a->math, KPQ);
    return ws + pl->dy_off;
}

/* y_n[k, :] = round(yb[k, :] + bias[k]) in y's 16-bit dtype (bias widened exactly; + 0 without a bias): the FP32
 * sum rounded once to FP32 and then to the dtype, the bits of gemm.c's epilogue for alpha 1 and beta 1 on a y_n
 * filled with the bias (tests/test_conv.c test_conv_bits_*). */
static void conv_bias_round(char *yn, float *yb, const mpt_conv_args *a, int64_t PQ) {
    const mpt_conv_shape *s = &a->s;
    const size_t es = mpt_dtype_size(a->dtype);
    for (int k = 0; k < s->K; k++) {
        float *row = yb + (size_t)k * (size_t)PQ;
        if (a->bias) {
            const float b = mpt_load_f32(a->bias, a->dtype, k);
            for (int64_t i = 0; i < PQ; i++) row[i] = row[i] + b;
        }
        mpt_cpu_narrow(yn + (size_t)(k * PQ) * es, a->dtype, row, PQ);
    }
}

void mpt_cpu_conv2d_forward(mpt_backend *be, const mpt_conv_args *a) {
    conv_check(a, "conv2d_forward");
    const conv_plan pl = conv_plan_of(mpt_cpu_exec_of(be), a, CONV_FORWARD, 0);
    const int T = conv_threads(be, a, &pl, "conv2d_forward");
    (void)T; /* used by the OpenMP pragmas only */
    const mpt_conv_shape *s = &a->s;
    const size_t es = mpt_dtype_size(a->dtype);
    const int64_t PQ = (int64_t)s->P * s->Q, KPQ = (int64_t)s->K * PQ;
    const mpt_cpu_exec *x = mpt_cpu_exec_of(be);
    const void *wgt = conv_weights(be, a, &pl);
    MPT_OMP(omp parallel num_threads(T) if (T > 1))
    {
        char *ws = (char *)be->workspace + pl.shared + (size_t)conv_thread_num() * pl.per_thread;
        int zeroed = 0; /* this thread's padded image: borders zeroed once, interiors rewritten per image */
        mpt_gemm_args g = pl.g;
        g.A = wgt;
        MPT_OMP(omp for schedule(static))
        for (int n = 0; n < s->N; n++) {
            char *yn = (char *)a->y + (size_t)(n * KPQ) * es;
            g.B = conv_lower(ws, &pl, a, n, &zeroed);
            if (a->dtype == MPT_DTYPE_F32) {
                if (a->bias) /* y_n[k, :] = bias[k], then y_n += product (beta 1) */
                    for (int k = 0; k < s->K; k++) {
                        const float v = ((const float *)a->bias)[k];
                        for (int64_t i = 0; i < PQ; i++) ((float *)yn)[k * PQ + i] = v;
                    }
                g.C = yn;
                mpt_cpu_gemm_ws_on(x, &g, ws + pl.gemm_off, pl.per_thread - pl.gemm_off);
            } else {
                float *yb = (float *)(ws + pl.ybuf_off);
                g.C = yb;
                mpt_cpu_gemm_ws_on(x, &g, ws + pl.gemm_off, pl.per_thread - pl.gemm_off);
                conv_bias_round(yn, yb, a, PQ);
            }
        }
    }
}

void mpt_cpu_conv2d_backward_data(mpt_backend *be, const mpt_conv_args *a) {
    conv_check(a, "conv2d_backward_data");
    const conv_plan pl = conv_plan_of(mpt_cpu_exec_of(be), a, CONV_BACKWARD_DATA, 0);
    const int T = conv_threads(be, a, &pl, "conv2d_backward_data");
    (void)T; /* used by the OpenMP pragmas only */
    const mpt_conv_shape *s = &a->s;
    const size_t es = mpt_dtype_size(a->dtype);
    const int64_t CHW = (int64_t)s->C * s->H * s->W;
    const int pointwise = conv_is_pointwise(s);
    const int Hp = s->H + 2 * s->pad_h, Wp = s->W + 2 * s->pad_w;
    const int64_t CHWp = conv_padded_image_elems(s);
    const mpt_cpu_exec *x = mpt_cpu_exec_of(be);
    const void *wgt = conv_weights(be, a, &pl);
    MPT_OMP(omp parallel num_threads(T) if (T > 1))
    {
        char *ws = (char *)be->workspace + pl.shared + (size_t)conv_thread_num() * pl.per_thread;
        float *dcol = (float *)(ws + pl.dcol_off), *img = (float *)(ws + pl.img_off);
        mpt_gemm_args g = pl.g;
        g.A = wgt;
        g.C = dcol;
        MPT_OMP(omp for schedule(static))
        for (int n = 0; n < s->N; n++) {
            g.B = conv_dy(ws, &pl, a, n);
            mpt_cpu_gemm_ws_on(x, &g, ws + pl.gemm_off, pl.per_thread - pl.gemm_off);
            char *dxn = (char *)a->dx + (size_t)(n * CHW) * es;
            if (pointwise) { /* dcol [C, HW] is already the image gradient */
                mpt_cpu_accumulate(dxn, a->dtype, dcol, CHW, a->accumulate);
                continue;
            }
            memset(img, 0, (size_t)CHWp * sizeof(float));
            conv_col2im(img, dcol, s);
            if (s->pad_h == 0 && s->pad_w == 0) {
                mpt_cpu_accumulate(dxn, a->dtype, img, CHW, a->accumulate);
            } else { /* crop the padding: row by row */
                for (int c = 0; c < s->C; c++)
                    for (int h = 0; h < s->H; h++)
                        mpt_cpu_accumulate(dxn + (size_t)((int64_t)(c * s->H + h) * s->W) * es, a->dtype,
                                        img + ((int64_t)(c * Hp + h + s->pad_h)) * Wp + s->pad_w, s->W,
                                        a->accumulate);
            }
        }
    }
}

void mpt_cpu_conv2d_backward_filter(mpt_backend *be, const mpt_conv_args *a) {
    conv_check(a, "conv2d_backward_filter");
    const conv_plan pl = conv_plan_of(mpt_cpu_exec_of(be), a, CONV_BACKWARD_FILTER, 0);
    const int T = conv_threads(be, a, &pl, "conv2d_backward_filter");
    (void)T; /* used by the OpenMP pragmas only */
    const mpt_conv_shape *s = &a->s;
    const size_t es = mpt_dtype_size(a->dtype);
    const int64_t PQ = (int64_t)s->P * s->Q, KPQ = (int64_t)s->K * PQ;
    const int64_t KCRS = (int64_t)s->K * s->C * s->R * s->S;
    const mpt_cpu_exec *x = mpt_cpu_exec_of(be);
    float *part = be->workspace; /* [CONV_GROUP][K*C*R*S]: the products of one group of images */
    for (int n0 = 0; n0 < s->N; n0 += CONV_GROUP) {
        const int ng = s->N - n0 < CONV_GROUP ? s->N - n0 : CONV_GROUP;
        MPT_OMP(omp parallel num_threads(T) if (T > 1))
        {
            char *ws = (char *)be->workspace + pl.shared + (size_t)conv_thread_num() * pl.per_thread;
            int zeroed = 0;
            mpt_gemm_args g = pl.g;
            MPT_OMP(omp for schedule(static))
            for (int i = 0; i < ng; i++) {
                const int n = n0 + i;
                g.B = conv_lower(ws, &pl, a, n, &zeroed);
                g.A = conv_dy(ws, &pl, a, n);
                g.C = part + (size_t)i * (size_t)KCRS;
                mpt_cpu_gemm_ws_on(x, &g, ws + pl.gemm_off, pl.per_thread - pl.gemm_off);
            }
        }
        /* dw = (((dw + P_0) + P_1) + ...) in image order, each element alone (the first image overwrites dw unless
         * accumulating): the bits of accumulating GEMMs (beta = 1, one rounding per image) on any thread count */
        const int first = n0 == 0 && !a->accumulate;
        float *dw = a->dw;
        MPT_OMP(omp parallel for schedule(static) num_threads(T) if (T > 1 && KCRS * ng >= MPT_PAR_MIN))
        for (int64_t e = 0; e < KCRS; e++) {
            float v = first ? part[e] : dw[e] + part[e];
            for (int i = 1; i < ng; i++) v = v + part[(size_t)i * (size_t)KCRS + (size_t)e];
            dw[e] = v;
        }
    }
    if (!a->db) return;
    /* db[k] += sum over n, p, q of dy[n, k, p, q]: summed in FP32 in CONV_LANES interleaved partial sums
     * (a fixed order the compiler can vectorise), then added once; each k alone, on any thread */
    MPT_OMP(omp parallel for schedule(static) num_threads(T) if (T > 1 && (int64_t)s->N * KPQ >= MPT_PAR_MIN))
    for (int k = 0; k < s->K; k++) {
        float buf[CONV_CHUNK];
        float lanes[CONV_LANES] = {0};
        for (int n = 0; n < s->N; n++) {
            const char *row = (const char *)a->dy + (size_t)(n * KPQ + k * PQ) * es;
            for (int64_t i0 = 0; i0 < PQ; i0 += CONV_CHUNK) {
                int64_t m = PQ - i0 < CONV_CHUNK ? PQ - i0 : CONV_CHUNK;
                mpt_cpu_widen(buf, row + (size_t)i0 * es, a->dtype, m);
                int64_t i = 0;
                for (; i + CONV_LANES <= m; i += CONV_LANES)
                    for (int l = 0; l < CONV_LANES; l++) lanes[l] += buf[i + l];
                for (int l = 0; i < m; i++, l++) lanes[l] += buf[i];
            }
        }
        float acc = 0.0f;
        for (int l = 0; l < CONV_LANES; l++) acc += lanes[l];
        a->db[k] = a->accumulate ? a->db[k] + acc : acc;
    }
}
