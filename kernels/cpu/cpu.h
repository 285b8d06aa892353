/*
 * kernels/cpu/cpu.h - the CPU backend's operations (internal: reached through the backend table).
 *
 * The CPU backend is the oracle for the GPU one (ARCHITECTURE decisions 1 and 2): storage is dtype-true,
 * GEMM/conv operands are rounded to the math mode's format, products and sums are FP32 (oneDNN's f32 matmul, or
 * OpenBLAS sgemm), and results are rounded once to the output dtype; the native kernel set runs bf16 on the CPU's
 * BF16 units instead (kernels/cpu/gemm.c). Each function documents its contract in
 * engine/backend.h; the grouping into files is:
 *   gemm.c        mpt_cpu_gemm, mpt_cpu_gemm_workspace, mpt_cpu_gemm_copies (where each precision's GEMM numerics live)
 *   onednn.c      oneDNN matmul primitives, the GEMM engine (onednn_none.c in builds without oneDNN)
 *   conv.c        conv2d forward / backward-data / backward-filter through im2col + mpt_cpu_gemm
 *   elementwise.c cast, relu, maxpool, dropout, softmax + cross-entropy, bias gradient, batch gather
 *   activation.c  gelu, tanh, sigmoid, leaky ReLU; average pooling
 *   norm.c        batch norm and layer norm (FP32 statistics)
 *   optim.c       unscale + found_inf, clipping, fused optimizer step, loss-scale update
 *   fp8.c         FP8 casts (per tensor, MX), the scale update, FP8 operand decoding, the fast-accumulator model
 *   quant.c       fake quantization (INT8, INT4, E4M3 with amax scales), activation codes, the exact integer GEMM and
 *                 convolution
 *   telemetry.c   the telemetry reductions: engine/telemetry's host counters on the backend's (host) pointers
 *   backend.c     memory, the table itself, the kernel set and the engine
 */
#ifndef MPT_KERNELS_CPU_H
#define MPT_KERNELS_CPU_H

#include "engine/backend.h"
#include "kernels/cpu/gemm.h"

/* GCC's ivdep, for the update loops whose arrays never overlap (kernels/cpu/optim.c): clang has no such pragma
 * and would warn about it; it vectorises those loops at -O2 on the restrict-qualified pointers alone. (The
 * run-time-length loops elsewhere need GCC's -fvect-cost-model=dynamic, which meson.build passes to GCC.) */
#if defined(__GNUC__) && !defined(__clang__)
#define MPT_GCC_IVDEP _Pragma("GCC ivdep")
#else
#define MPT_GCC_IVDEP
#endif

void mpt_cpu_gemm(mpt_backend *be, const mpt_gemm_args *a);
size_t mpt_cpu_gemm_workspace(mpt_backend *be, const mpt_gemm_args *a);
int mpt_cpu_gemm_copies(mpt_backend *be, mpt_math m); /* mpt_cpu_gemm_converts with the backend's kernel set */

void mpt_cpu_conv2d_forward(mpt_backend *be, const mpt_conv_args *a);
void mpt_cpu_conv2d_backward_data(mpt_backend *be, const mpt_conv_args *a);
void mpt_cpu_conv2d_backward_filter(mpt_backend *be, const mpt_conv_args *a);
size_t mpt_cpu_conv2d_workspace(mpt_backend *be, const mpt_conv_args *a);

void mpt_cpu_cast(mpt_backend *be, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype, int64_t n);
void mpt_cpu_relu_forward(mpt_backend *be, void *y, const void *x, mpt_dtype dtype, int64_t n);
void mpt_cpu_relu_backward(mpt_backend *be, void *dx, const void *dy, const void *y, mpt_dtype dtype, int64_t n,
                           int accumulate);
void mpt_cpu_maxpool_forward(mpt_backend *be, const mpt_pool_args *a);
void mpt_cpu_maxpool_backward(mpt_backend *be, const mpt_pool_args *a);
void mpt_cpu_dropout_forward(mpt_backend *be, void *y, const void *x, uint8_t *mask, mpt_dtype dtype, int64_t n,
                             float p, uint64_t seed, uint64_t offset, const int64_t *iteration, uint64_t stride);
void mpt_cpu_dropout_backward(mpt_backend *be, void *dx, const void *dy, const uint8_t *mask, mpt_dtype dtype,
                              int64_t n, float p, int accumulate);
void mpt_cpu_softmax_xent_forward(mpt_backend *be, float *loss, float *probs, int32_t *n_correct,
                                  const void *logits, mpt_dtype logits_dtype, const int32_t *labels, int N, int C);
void mpt_cpu_softmax_xent_backward(mpt_backend *be, void *dlogits, mpt_dtype dlogits_dtype, const float *probs,
                                   const int32_t *labels, int N, int C, const float *scale, int accumulate);
void mpt_cpu_bias_grad(mpt_backend *be, float *db, const void *dy, mpt_dtype dtype, int64_t rows, int64_t cols,
                       int accumulate);
void mpt_cpu_gather_batch(mpt_backend *be, void *x, mpt_dtype x_dtype, int32_t *labels, const uint8_t *images,
                          const uint8_t *image_labels, const int32_t *idx, int B, int64_t D, float mean,
                          float inv_std);

void mpt_cpu_act_forward(mpt_backend *be, mpt_act kind, void *y, const void *x, mpt_dtype dtype, int64_t n,
                         float alpha);
void mpt_cpu_act_backward(mpt_backend *be, mpt_act kind, void *dx, const void *dy, const void *x, const void *y,
                          mpt_dtype dtype, int64_t n, float alpha, int accumulate);
void mpt_cpu_avgpool_forward(mpt_backend *be, const mpt_avgpool_args *a);
void mpt_cpu_avgpool_backward(mpt_backend *be, const mpt_avgpool_args *a);
void mpt_cpu_batchnorm_forward(mpt_backend *be, const mpt_norm_args *a);
void mpt_cpu_batchnorm_backward(mpt_backend *be, const mpt_norm_args *a);
void mpt_cpu_layernorm_forward(mpt_backend *be, const mpt_norm_args *a);
void mpt_cpu_layernorm_backward(mpt_backend *be, const mpt_norm_args *a);

void mpt_cpu_fp8_cast(mpt_backend *be, const mpt_fp8_cast_args *a);
void mpt_cpu_fp8_update(mpt_backend *be, const mpt_fp8_update_args *a);

void mpt_cpu_fake_quant(mpt_backend *be, const mpt_fake_quant_args *a);
void mpt_cpu_quantize(mpt_backend *be, const mpt_quantize_args *a);
void mpt_cpu_gemm_i8(mpt_backend *be, const mpt_gemm_i8_args *a);
void mpt_cpu_conv2d_forward_i8(mpt_backend *be, const mpt_conv_i8_args *a);

void mpt_cpu_unscale_check(mpt_backend *be, float *g, int64_t n, mpt_scaler_state *st);
void mpt_cpu_sum_squares(mpt_backend *be, const float *g, int64_t n, mpt_scaler_state *st);
void mpt_cpu_clip_coef(mpt_backend *be, mpt_scaler_state *st, float max_norm);
void mpt_cpu_lr_update(mpt_backend *be, mpt_scaler_state *st, const mpt_lr_schedule *schedule);
void mpt_cpu_step_begin(mpt_backend *be, mpt_scaler_state *st);
void mpt_cpu_optim_step(mpt_backend *be, const mpt_optim_args *a);
void mpt_cpu_unscale_check_multi(mpt_backend *be, const mpt_param_slot *slots, int count, int64_t numel,
                                 mpt_scaler_state *st);
void mpt_cpu_optim_step_multi(mpt_backend *be, const mpt_optim_multi_args *a);
void mpt_cpu_scaler_update(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic);

/* telemetry.c */
void mpt_cpu_telemetry_range(mpt_backend *be, mpt_range *r, const void *x, mpt_dtype dtype, int64_t n);
void mpt_cpu_telemetry_rounding(mpt_backend *be, mpt_exp_hist *h, mpt_round_err *err, const int *k, int n_k,
                                const float *v, int64_t n);
void mpt_cpu_telemetry_lost(mpt_backend *be, mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype,
                            const float *delta, int64_t n);
void mpt_cpu_telemetry_lost_counterfactual(mpt_backend *be, mpt_lost *r, const void *w_old, mpt_dtype dtype,
                                           const float *delta, int64_t n);

/* The CPU backend's private state. */
typedef struct mpt_cpu_ctx {
    mpt_cpu_exec exec;   /* kernel set and GEMM engine (mpt_backend_cpu_set_kernels, MPT_CPU_ENGINE) */
} mpt_cpu_ctx;

#endif
