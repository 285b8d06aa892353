/* kernels/cpu/backend.c - the CPU backend: host memory and the table of CPU operations. */
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "kernels/cpu/cpu.h"

static void *cpu_alloc(mpt_backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (posix_memalign(&p, 256, (bytes + 255) & ~(size_t)255) != 0) return NULL;
    return p;
}
static void cpu_free(mpt_backend *be, void *p) { (void)be; free(p); }
static void cpu_memset_zero(mpt_backend *be, void *p, size_t n) { (void)be; memset(p, 0, n); }
static void cpu_copy(mpt_backend *be, void *dst, const void *src, size_t n) { (void)be; memmove(dst, src, n); }
static void cpu_synchronize(mpt_backend *be) { (void)be; }

static void cpu_destroy(mpt_backend *be) {
    mpt_cpu_ctx *ctx = be->ctx;
    if (ctx) mpt_rng_free(&ctx->rng);
    free(ctx);
    free(be);
}

mpt_backend *mpt_backend_cpu_create(void) {
    mpt_backend *be = calloc(1, sizeof *be);
    mpt_cpu_ctx *ctx = calloc(1, sizeof *ctx);
    MPT_ASSERT(be != NULL && ctx != NULL);
    ctx->rng = mpt_rng_create();
    be->name = "cpu";
    be->device = MPT_DEVICE_CPU;
    be->ctx = ctx;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->memset_zero = cpu_memset_zero;
    be->to_host = cpu_copy;
    be->from_host = cpu_copy;
    be->copy = cpu_copy;
    be->synchronize = cpu_synchronize;
    be->destroy = cpu_destroy;

    be->gemm = mpt_cpu_gemm;
    be->gemm_workspace = mpt_cpu_gemm_workspace;
    be->conv2d_forward = mpt_cpu_conv2d_forward;
    be->conv2d_backward_data = mpt_cpu_conv2d_backward_data;
    be->conv2d_backward_filter = mpt_cpu_conv2d_backward_filter;
    be->conv2d_workspace = mpt_cpu_conv2d_workspace;
    be->cast = mpt_cpu_cast;
    be->relu_forward = mpt_cpu_relu_forward;
    be->relu_backward = mpt_cpu_relu_backward;
    be->maxpool_forward = mpt_cpu_maxpool_forward;
    be->maxpool_backward = mpt_cpu_maxpool_backward;
    be->dropout_forward = mpt_cpu_dropout_forward;
    be->dropout_backward = mpt_cpu_dropout_backward;
    be->softmax_xent_forward = mpt_cpu_softmax_xent_forward;
    be->softmax_xent_backward = mpt_cpu_softmax_xent_backward;
    be->bias_grad = mpt_cpu_bias_grad;
    be->gather_batch = mpt_cpu_gather_batch;

    be->unscale_check = mpt_cpu_unscale_check;
    be->unscale_check_multi = mpt_cpu_unscale_check_multi;
    be->sum_squares = mpt_cpu_sum_squares;
    be->clip_coef = mpt_cpu_clip_coef;
    be->lr_update = mpt_cpu_lr_update;
    be->step_begin = mpt_cpu_step_begin;
    be->optim_step = mpt_cpu_optim_step;
    be->optim_step_multi = mpt_cpu_optim_step_multi;
    be->scaler_update = mpt_cpu_scaler_update;
    return be;
}
