/* kernels/cpu/elementwise.c - placeholder until this file's owner lands it; every entry aborts. */
#include "kernels/cpu/cpu.h"
void mpt_cpu_cast(mpt_backend *be, void *dst, mpt_dtype dst_dtype, const void *src, mpt_dtype src_dtype, int64_t n) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_relu_forward(mpt_backend *be, void *y, const void *x, mpt_dtype dtype, int64_t n) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_relu_backward(mpt_backend *be, void *dx, const void *dy, const void *y, mpt_dtype dtype, int64_t n) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_maxpool_forward(mpt_backend *be, const mpt_pool_args *a) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_maxpool_backward(mpt_backend *be, const mpt_pool_args *a) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_dropout_forward(mpt_backend *be, void *y, const void *x, uint8_t *mask, mpt_dtype dtype, int64_t n, float p, uint64_t seed, uint64_t offset) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_dropout_backward(mpt_backend *be, void *dx, const void *dy, const uint8_t *mask, mpt_dtype dtype, int64_t n, float p) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_softmax_xent_forward(mpt_backend *be, float *loss, float *probs, int32_t *n_correct, const void *logits, mpt_dtype logits_dtype, const int32_t *labels, int N, int C) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_softmax_xent_backward(mpt_backend *be, void *dlogits, mpt_dtype dlogits_dtype, const float *probs, const int32_t *labels, int N, int C, const float *scale) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_bias_grad(mpt_backend *be, float *db, const void *dy, mpt_dtype dtype, int64_t rows, int64_t cols) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_gather_batch(mpt_backend *be, void *x, mpt_dtype x_dtype, int32_t *labels, const uint8_t *images, const uint8_t *image_labels, const int32_t *idx, int B, int64_t D, float mean, float inv_std) { MPT_ASSERTF(0, "pending"); }
