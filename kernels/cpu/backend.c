/*
 * kernels/cpu/backend.c - the CPU backend: host memory, the table of CPU operations, and the choice of kernel set,
 * GEMM engine and summation model (mpt_cpu_exec: kernels/cpu/gemm.h; the models: kernels/cpu/tc_accum.h).
 */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tc_accum.h"
#ifdef _OPENMP
#include <omp.h>
#endif

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
    free(be->ctx);
    free(be);
}

/* ---- kernel set and engine ---------------------------------------------------------------------------------- */

static mpt_cpu_engine default_engine;

static void default_engine_once(void) {
    const char *e = getenv("MPT_CPU_ENGINE");
    if (e && strcmp(e, "openblas") == 0) {
        default_engine = MPT_CPU_ENGINE_OPENBLAS;
        return;
    }
    MPT_ASSERTF(!e || !e[0] || strcmp(e, "onednn") == 0,
                "MPT_CPU_ENGINE=%s: expected openblas or onednn (or unset: oneDNN where the build has it)", e);
    default_engine = mpt_onednn_available() ? MPT_CPU_ENGINE_ONEDNN : MPT_CPU_ENGINE_OPENBLAS;
}

mpt_cpu_exec mpt_cpu_exec_default(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, default_engine_once);
    mpt_cpu_exec x = {.kernels = MPT_CPU_KERNELS_EMULATE, .engine = default_engine, .accum = MPT_ACCUM_MODEL_IEEE};
    return x;
}

const mpt_cpu_exec *mpt_cpu_exec_of(const mpt_backend *be) {
    MPT_ASSERTF(be->device == MPT_DEVICE_CPU, "mpt_cpu_exec_of: backend %s is not the CPU backend", be->name);
    return &((const mpt_cpu_ctx *)be->ctx)->exec;
}

const char *mpt_cpu_kernels_name(mpt_cpu_kernels k) { return k == MPT_CPU_KERNELS_NATIVE ? "native" : "emulate"; }

mpt_status mpt_backend_cpu_set_kernels(mpt_backend *be, mpt_cpu_kernels k) {
    if (be->device != MPT_DEVICE_CPU)
        return mpt_errorf(MPT_ERR_ARG, "the %s backend has no CPU kernel sets (--cpu-kernels is for the CPU backend)",
                          be->name);
    if (k != MPT_CPU_KERNELS_EMULATE && k != MPT_CPU_KERNELS_NATIVE)
        return mpt_errorf(MPT_ERR_ARG, "CPU kernel set %d is neither emulate nor native", (int)k);
    mpt_cpu_ctx *ctx = be->ctx;
    if (ctx->exec.kernels == k) return MPT_OK;
    if (k == MPT_CPU_KERNELS_NATIVE && ctx->exec.accum != MPT_ACCUM_MODEL_IEEE)
        return mpt_errorf(MPT_ERR_ARG, "--cpu-kernels native sums bf16 on the CPU's BF16 units, --accum-model %s "
                          "models Tensor Cores in the emulate kernel set: give one of them",
                          mpt_accum_model_name(ctx->exec.accum));
    if (be->workspace_bytes > 0)
        return mpt_errorf(MPT_ERR_ARG, "the CPU kernel set must be chosen before a graph is built on the backend");
    char why[256];
    if (k == MPT_CPU_KERNELS_NATIVE && !mpt_onednn_native_bf16(why, sizeof why))
        return mpt_errorf(MPT_ERR_DEVICE, "--cpu-kernels native is unavailable: %s", why);
    ctx->exec.kernels = k;
    return MPT_OK;
}

mpt_cpu_kernels mpt_backend_cpu_kernels(const mpt_backend *be) {
    return be->device == MPT_DEVICE_CPU ? ((const mpt_cpu_ctx *)be->ctx)->exec.kernels : MPT_CPU_KERNELS_EMULATE;
}

/* ---- summation model ---------------------------------------------------------------------------------------- */

/* engine/backend.h's mpt_accum_model is tc_accum.h's mpt_tc_model, value for value */
_Static_assert((int)MPT_ACCUM_MODEL_IEEE == (int)MPT_TC_MODEL_IEEE &&
                   (int)MPT_ACCUM_MODEL_V100 == (int)MPT_TC_MODEL_V100 &&
                   (int)MPT_ACCUM_MODEL_A100 == (int)MPT_TC_MODEL_A100 &&
                   (int)MPT_ACCUM_MODEL_ADA == (int)MPT_TC_MODEL_ADA &&
                   (int)MPT_ACCUM_MODEL_H100 == (int)MPT_TC_MODEL_H100 &&
                   (int)MPT_ACCUM_MODEL_B200 == (int)MPT_TC_MODEL_B200 &&
                   (int)MPT_ACCUM_MODEL_COUNT == (int)MPT_TC_MODEL_COUNT,
               "mpt_accum_model and mpt_tc_model name the same models in the same order");

/* The kernels word of a modelled GEMM (mpt_backend_kernels_of). */
static const char *const model_kernels[] = {
    [MPT_ACCUM_MODEL_IEEE] = "emulate:ieee", [MPT_ACCUM_MODEL_V100] = "emulate:v100",
    [MPT_ACCUM_MODEL_A100] = "emulate:a100", [MPT_ACCUM_MODEL_ADA] = "emulate:ada",
    [MPT_ACCUM_MODEL_H100] = "emulate:h100", [MPT_ACCUM_MODEL_B200] = "emulate:b200",
};
_Static_assert(sizeof model_kernels / sizeof model_kernels[0] == MPT_ACCUM_MODEL_COUNT, "a kernels word per model");

const char *mpt_accum_model_name(mpt_accum_model m) { return mpt_tc_model_name((mpt_tc_model)m); }

const char *mpt_accum_model_gpus(mpt_accum_model m) {
    if ((unsigned)m >= MPT_ACCUM_MODEL_COUNT) return NULL;
    if (m == MPT_ACCUM_MODEL_IEEE) return "none";
    const mpt_tc_params *p = mpt_tc_find((mpt_tc_model)m, MPT_TC_FAMILY_FP16, MPT_TC_OUT_FP32); /* every GPU has FP16 */
    return p ? p->gpus : NULL;
}

int mpt_accum_model_parse(const char *s, mpt_accum_model *out) {
    for (int m = 0; s && m < MPT_ACCUM_MODEL_COUNT; m++)
        if (strcmp(s, mpt_accum_model_name((mpt_accum_model)m)) == 0) {
            *out = (mpt_accum_model)m;
            return 0;
        }
    return -1;
}

int mpt_accum_model_covers(mpt_accum_model m, mpt_math math) {
    const int fmt = mpt_cpu_tc_format_of(math);
    if ((unsigned)m >= MPT_ACCUM_MODEL_COUNT) return 0;
    if (m == MPT_ACCUM_MODEL_IEEE || fmt < 0) return 1; /* FP32, FP8, MXFP8: not summed by a model */
    mpt_tc_op op;
    return mpt_tc_op_init(&op, (mpt_tc_model)m, (mpt_tc_format)fmt, (mpt_tc_format)fmt, MPT_TC_OUT_FP32) == 0;
}

mpt_status mpt_backend_cpu_set_accum(mpt_backend *be, mpt_accum_model m) {
    if (be->device != MPT_DEVICE_CPU)
        return mpt_errorf(MPT_ERR_ARG, "--accum-model models Tensor Core summation in the CPU backend's emulate kernel "
                          "set; on the %s backend the GPU's Tensor Cores sum for themselves (train on --device cpu to "
                          "model them, or leave --accum-model out)", be->name);
    if ((unsigned)m >= MPT_ACCUM_MODEL_COUNT)
        return mpt_errorf(MPT_ERR_ARG, "summation model %d is none of ieee, v100, a100, ada, h100, b200", (int)m);
    mpt_cpu_ctx *ctx = be->ctx;
    if (ctx->exec.accum == m) return MPT_OK;
    if (m != MPT_ACCUM_MODEL_IEEE && ctx->exec.kernels == MPT_CPU_KERNELS_NATIVE)
        return mpt_errorf(MPT_ERR_ARG, "--accum-model %s models Tensor Cores in the emulate kernel set, --cpu-kernels "
                          "native sums bf16 on the CPU's BF16 units: give one of them", mpt_accum_model_name(m));
    if (be->workspace_bytes > 0)
        return mpt_errorf(MPT_ERR_ARG, "the summation model must be chosen before a graph is built on the backend");
    ctx->exec.accum = m;
    return MPT_OK;
}

mpt_accum_model mpt_backend_cpu_accum(const mpt_backend *be) {
    return be->device == MPT_DEVICE_CPU ? ((const mpt_cpu_ctx *)be->ctx)->exec.accum : MPT_ACCUM_MODEL_IEEE;
}

const char *mpt_backend_kernels_of(const mpt_backend *be, int conv, mpt_math m) {
    if (be->device != MPT_DEVICE_CPU) return conv ? "cudnn" : "cublaslt";
    const mpt_cpu_exec *x = mpt_cpu_exec_of(be);
    if (x->kernels == MPT_CPU_KERNELS_NATIVE && m == MPT_MATH_BF16) return "native:onednn";
    if (mpt_cpu_gemm_modelled(x, m)) return model_kernels[x->accum];
    return x->engine == MPT_CPU_ENGINE_ONEDNN ? "emulate:onednn" : "emulate:openblas";
}

int mpt_cpu_gemm_on_openblas(void) { return mpt_cpu_exec_default().engine == MPT_CPU_ENGINE_OPENBLAS; }

int mpt_cpu_native_available(char *why, size_t len) { return mpt_onednn_native_bf16(why, len); }

int mpt_cpu_set_threads(int n) {
    if (n > 0) openblas_set_num_threads(n);
    const int t = openblas_get_num_threads();
    mpt_onednn_set_threads(t); /* one count for both engines: it is what a checkpoint records */
#ifdef _OPENMP
    omp_set_num_threads(t); /* the element-wise passes (kernels/cpu/parallel.h) */
#endif
    return t;
}

void mpt_cpu_engine_describe(char *buf, size_t len) {
    const mpt_cpu_exec x = mpt_cpu_exec_default();
    if (x.engine == MPT_CPU_ENGINE_ONEDNN)
        snprintf(buf, len, "oneDNN %s f32/bf16 matmul (ISA %s, %d OpenMP thread(s))", mpt_onednn_version(),
                 mpt_onednn_isa(), mpt_onednn_threads());
    else
        snprintf(buf, len, "OpenBLAS sgemm (%d thread(s))%s", openblas_get_num_threads(),
                 mpt_onednn_available() ? "; oneDNN available but MPT_CPU_ENGINE=openblas"
                                        : "; this build has no oneDNN");
}

mpt_backend *mpt_backend_cpu_create(void) {
    mpt_backend *be = calloc(1, sizeof *be);
    mpt_cpu_ctx *ctx = calloc(1, sizeof *ctx);
    MPT_ASSERT(be != NULL && ctx != NULL);
    ctx->exec = mpt_cpu_exec_default();
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
    be->gemm_copies = mpt_cpu_gemm_copies;
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
    be->avgpool_forward = mpt_cpu_avgpool_forward;
    be->avgpool_backward = mpt_cpu_avgpool_backward;
    be->act_forward = mpt_cpu_act_forward;
    be->act_backward = mpt_cpu_act_backward;
    be->batchnorm_forward = mpt_cpu_batchnorm_forward;
    be->batchnorm_backward = mpt_cpu_batchnorm_backward;
    be->layernorm_forward = mpt_cpu_layernorm_forward;
    be->layernorm_backward = mpt_cpu_layernorm_backward;

    be->fp8_cast = mpt_cpu_fp8_cast;
    be->fp8_update = mpt_cpu_fp8_update;
    be->fake_quant = mpt_cpu_fake_quant;
    be->quantize = mpt_cpu_quantize;
    be->gemm_i8 = mpt_cpu_gemm_i8;
    be->conv2d_forward_i8 = mpt_cpu_conv2d_forward_i8;
    be->unscale_check = mpt_cpu_unscale_check;
    be->unscale_check_multi = mpt_cpu_unscale_check_multi;
    be->sum_squares = mpt_cpu_sum_squares;
    be->clip_coef = mpt_cpu_clip_coef;
    be->lr_update = mpt_cpu_lr_update;
    be->step_begin = mpt_cpu_step_begin;
    be->optim_step = mpt_cpu_optim_step;
    be->optim_step_multi = mpt_cpu_optim_step_multi;
    be->scaler_update = mpt_cpu_scaler_update;
    be->update_pass = mpt_update_pass_as_calls; /* no launches to save: the calls themselves */

    be->telemetry_range = mpt_cpu_telemetry_range;
    be->telemetry_rounding = mpt_cpu_telemetry_rounding;
    be->telemetry_lost = mpt_cpu_telemetry_lost;
    be->telemetry_lost_counterfactual = mpt_cpu_telemetry_lost_counterfactual;
    return be;
}
