/*
 * tools/run_summary.c - what one training run leaves for scripts beside its CSVs and checkpoint: summary.json
 * (jansson), and the precision map (every node's dtypes and math mode) that summary.json and the checkpoint
 * carry.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/cuda_backend.h"
#include "mpt_config.h"
#include "tools/run.h"

void *mpt_run_precision_map_json(const mpt_graph *g) {
    json_t *a = json_array();
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_node *n = g->nodes[i];
        int gemm_like = n->op == MPT_OP_LINEAR || n->op == MPT_OP_CONV2D;
        json_t *o = json_object();
        json_object_set_new(o, "node", json_string(n->name));
        json_object_set_new(o, "op", json_string(mpt_op_name(n->op)));
        json_object_set_new(o, "input", n->in[0] ? json_string(mpt_dtype_name(n->in[0]->dtype)) : json_null());
        json_object_set_new(o, "weight", n->in[1] ? json_string(mpt_dtype_name(n->in[1]->dtype)) : json_null());
        json_object_set_new(o, "output", n->out ? json_string(mpt_dtype_name(n->out->dtype)) : json_null());
        json_object_set_new(o, "math", gemm_like ? json_string(mpt_math_name(n->math))
                                                 : mpt_policy_op_fp32_math(n->op) ? json_string("fp32") : json_null());
        /* how the GEMM or convolution ran: "emulate:onednn", "native:onednn", "emulate:openblas", "cublaslt", ... */
        json_object_set_new(o, "kernels", gemm_like ? json_string(mpt_backend_kernels_of(g->be, n->op == MPT_OP_CONV2D,
                                                                                         n->math))
                                                    : json_null());
        if (n->fp8) { /* the operand formats of its FP8 GEMMs (engine/amp/fp8.h) */
            json_t *fp = json_object();
            static const char *what[3] = {"fprop", "dgrad", "wgrad"};
            for (int k = 0; k < 3; k++) {
                char t[128];
                mpt_graph_fp8_gemm_text(g, n, k, t, sizeof t);
                json_object_set_new(fp, what[k], strcmp(t, "-") == 0 ? json_null() : json_string(t));
            }
            json_object_set_new(o, "fp8", fp);
        }
        if (n->qat) /* quantization-aware training (engine/quant.h): only on such nodes, so other maps keep their bytes */
            json_object_set_new(o, "qat", json_pack("{s:s, s:s}", "weight", mpt_qformat_info((mpt_qformat)(n->qat - 1))->key,
                                                    "scales", "per output channel"));
        if (n->fused_relu && g->fuse_epilogues) { /* engine/graph.h "Fused epilogues" */
            json_t *fu = json_object();
            json_object_set_new(fu, "relu", json_string(n->fused_relu->name));
            json_object_set_new(fu, "forward", json_string(n->fused_next ? "RELU_AUX_BIAS" : "RELU_BIAS"));
            json_object_set_new(fu, "backward_in", n->fused_next ? json_string(n->fused_next->name) : json_null());
            json_object_set_new(o, "fused", fu);
        }
        json_array_append_new(a, o);
    }
    return a;
}

/* What summed the products of a GEMM-like node's GEMMs: "ieee" (FP32 additions, rounded to nearest: the FP32 GEMMs,
 * FP8 GEMMs with --fp8-accum fp32, and TF32/FP16/BF16 GEMMs without a model), a Tensor Core model ("h100":
 * --accum-model, mpt_backend_cpu_set_accum), "fp8-fast" (FP8 GEMMs with --fp8-accum fast: the h100 FP8 row,
 * kernels/cpu/gemm.c), "native" (the CPU's BF16 units) or "gpu" (the CUDA backend's own hardware). */
static const char *node_accum(const mpt_graph *g, const mpt_node *n) {
    const mpt_backend *be = g->be;
    if (be->device != MPT_DEVICE_CPU) return "gpu";
    if (n->fp8) return g->policy.fp8.accum == MPT_FP8_ACCUM_FAST ? "fp8-fast" : "ieee";
    if (!mpt_math_info(n->math)->tensor_cores) return "ieee";
    if (mpt_backend_cpu_kernels(be) == MPT_CPU_KERNELS_NATIVE && n->math == MPT_MATH_BF16) return "native";
    return mpt_accum_model_name(mpt_backend_cpu_accum(be));
}

/* summary.json's precision map: the checkpoint's (mpt_run_precision_map_json), for each GEMM-like node what summed
 * its products ("accum": node_accum), and for each normalisation how its forward statistics were computed ("stats":
 * the --norm-stats row, "fp32" being the policy's). */
static json_t *summary_precision_map(const mpt_graph *g) {
    json_t *a = (json_t *)mpt_run_precision_map_json(g);
    for (int i = 0; i < g->n_nodes; i++) {
        const mpt_node *n = g->nodes[i];
        const int gemm_like = n->op == MPT_OP_LINEAR || n->op == MPT_OP_CONV2D;
        json_object_set_new(json_array_get(a, (size_t)i), "accum",
                            gemm_like ? json_string(node_accum(g, n)) : json_null());
        if (n->op == MPT_OP_BATCHNORM || n->op == MPT_OP_LAYERNORM) /* how its forward statistics ran (--norm-stats) */
            json_object_set_new(json_array_get(a, (size_t)i), "stats",
                                json_string(mpt_norm_stats_name(g->policy.norm_stats)));
    }
    return a;
}

/* NAN becomes null (JSON has no NaN). */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* Writes j (consumed) as od/file, through a temporary file published by rename. */
static mpt_status write_json(const mpt_outdir *od, const char *file, json_t *j) {
    mpt_outfile of;
    mpt_status s = mpt_outfile_open(&of, od, file);
    if (s == MPT_OK && json_dumpf(j, of.f, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0) {
        s = mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", of.path, strerror(errno ? errno : EIO));
        mpt_outfile_discard(&of);
    }
    json_decref(j);
    if (s == MPT_OK) s = mpt_outfile_publish(&of);
    return s;
}

/* {"every": N, "shadow": b, "metrics": {tensor: {metric: {"last", "mean", "steps"}}}}, or null when off. */
static json_t *telemetry_json(const mpt_cli_opts *o, const mpt_run_result *r) {
    if (o->telemetry <= 0) return json_null();
    json_t *t = json_object(), *metrics = json_object();
    json_object_set_new(t, "every", json_integer((json_int_t)o->telemetry));
    json_object_set_new(t, "shadow", json_boolean(o->shadow));
    for (int i = 0; i < r->n_telemetry; i++) {
        const mpt_telemetry_stat *s = &r->telemetry[i];
        json_t *per = json_object_get(metrics, s->tensor);
        if (!per) {
            per = json_object();
            json_object_set_new(metrics, s->tensor, per);
        }
        json_t *m = json_object();
        json_object_set_new(m, "last", num(s->last));
        json_object_set_new(m, "mean", num(s->count ? s->sum / (double)s->count : NAN));
        json_object_set_new(m, "steps", json_integer((json_int_t)s->count));
        json_object_set_new(per, s->metric, m);
    }
    json_object_set_new(t, "metrics", metrics);
    return t;
}

/* A float as the shortest decimal that reads back as it ("1e-05", not 9.9999997473787516e-06): what a Python reader
 * passes to torch.nn. */
static json_t *short_real(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return json_real(strtod(buf, NULL));
}

void *mpt_run_model_json(const char *model, const mpt_model_input *in) {
    mpt_model_plan *p = malloc(sizeof *p);
    if (!p) return NULL;
    if (mpt_model_plan_make(model, in, p) != MPT_OK) {
        free(p);
        return NULL;
    }
    json_t *a = json_array();
    for (int i = 0; i < p->n; i++) {
        const mpt_model_layer *l = &p->layer[i];
        json_t *o = json_pack("{s:s, s:s}", "name", l->name, "type", mpt_layer_kind_name(l->kind));
        switch (l->kind) {
        case MPT_LAYER_CONV:
            json_object_update_new(o, json_pack("{s:I, s:i, s:i, s:i, s:i}", "in_channels", (json_int_t)l->in_shape[0],
                                                "out_channels", l->out, "kernel", l->kernel, "stride", l->stride, "pad",
                                                l->pad));
            break;
        case MPT_LAYER_LINEAR:
            json_object_update_new(o, json_pack("{s:I, s:i}", "in_features", (json_int_t)l->in_shape[0],
                                                "out_features", l->out));
            break;
        case MPT_LAYER_MAXPOOL:
        case MPT_LAYER_AVGPOOL:
            json_object_update_new(o, json_pack("{s:i, s:i}", "kernel", l->kernel, "stride", l->stride));
            break;
        case MPT_LAYER_DROPOUT: json_object_set_new(o, "p", short_real(l->p)); break;
        case MPT_LAYER_BATCHNORM:
            json_object_update_new(o, json_pack("{s:I, s:i, s:o, s:o}", "num_features", (json_int_t)l->in_shape[0],
                                                "input_dims", l->in_ndim, "eps", short_real(l->eps), "momentum",
                                                short_real(l->momentum)));
            break;
        case MPT_LAYER_LAYERNORM: {
            json_t *shape = json_array();
            for (int d = 0; d < (l->in_ndim == 4 ? 3 : 1); d++) json_array_append_new(shape, json_integer(l->in_shape[d]));
            json_object_set_new(o, "normalized_shape", shape);
            json_object_set_new(o, "eps", short_real(l->eps));
            break;
        }
        case MPT_LAYER_LEAKYRELU: json_object_set_new(o, "negative_slope", short_real(l->slope)); break;
        default: break;
        }
        json_array_append_new(a, o);
    }
    free(p);
    return a;
}

void *mpt_run_data_json(const mpt_model_input *in) {
    return json_pack("{s:i, s:i, s:i, s:i}", "channels", in->channels, "height", in->height, "width", in->width,
                     "classes", in->classes);
}

mpt_status mpt_run_write_summary(const mpt_outdir *od, const mpt_cli_opts *o, const mpt_run_result *r,
                                 const mpt_graph *g, const mpt_policy *policy, const mpt_model_input *data) {
    json_t *j = json_object();
    static char buf[MPT_MODEL_SPEC_MAX + 64];
    json_object_set_new(j, "mptrain", json_string(MPT_VERSION));
    json_object_set_new(j, "run_id", json_string(r->run_id));
    json_t *stop = json_null(); /* a run stopped by a signal (tools/guards.h) after `steps` steps, its state saved */
    if (r->interrupted)
        stop = json_pack("{s:s, s:I}", "signal", mpt_guard_signal_name(r->interrupted), "step", (json_int_t)r->iterations);
    json_object_set_new(j, "interrupted", stop);
    json_object_set_new(j, "model", json_string(o->model));
    /* the network as built: its layers with their shapes (a built-in model's spec expanded), and the data it was
     * built for */
    json_t *layers = (json_t *)mpt_run_model_json(o->model, data);
    json_object_set_new(j, "model_layers", layers ? layers : json_null());
    json_object_set_new(j, "data", (json_t *)mpt_run_data_json(data));
    json_object_set_new(j, "precision", json_string(mpt_precision_name(o->precision)));
    json_object_set_new(j, "device", json_string(r->device));
    json_object_set_new(j, "tf32_disabled_by_env", json_boolean(policy->tf32_override));
    json_t *cfg = json_object();
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++)
        if (mpt_cli_opt_recorded(id) && id != MPT_OPT_EPOCHS)
            json_object_set_new(cfg, mpt_cli_opt_name(id), json_string(mpt_cli_format(o, id, buf, sizeof buf)));
    json_object_set_new(cfg, "epochs", json_integer(o->epochs)); /* a number here, as before */
    json_object_set_new(j, "config", cfg);
    json_object_set_new(j, "epochs_run", json_integer(r->epochs_run));
    json_object_set_new(j, "steps", json_integer(r->iterations));
    json_object_set_new(j, "final_test_accuracy", num(r->final_test_acc));
    json_object_set_new(j, "best_test_accuracy", num(r->best_test_acc));
    json_object_set_new(j, "best_epoch", json_integer(r->best_epoch));
    json_object_set_new(j, "final_test_loss", num(r->final_test_loss));
    json_object_set_new(j, "final_train_loss", num(r->final_train_loss));
    json_object_set_new(j, "final_val_accuracy", num(r->final_val_acc));
    json_object_set_new(j, "final_val_loss", num(r->final_val_loss));
    json_object_set_new(j, "time_per_epoch_s", num(r->mean_epoch_s));
    json_t *ep = json_array();
    for (int i = 0; i < r->epochs_run; i++) json_array_append_new(ep, num(r->epoch_s[i]));
    json_object_set_new(j, "epoch_times_s", ep);
    /* the same epochs' CPU time of the process (all threads): comparable on a busy machine, where the host clock
     * is not */
    json_object_set_new(j, "time_per_epoch_cpu_s", num(r->mean_epoch_cpu_s));
    json_t *cp = json_array();
    for (int i = 0; r->epoch_cpu_s && i < r->epochs_run; i++) json_array_append_new(cp, num(r->epoch_cpu_s[i]));
    json_object_set_new(j, "epoch_cpu_times_s", cp);
    /* the same epochs timed by the device (CUDA events); null where the backend has none (CPU) */
    json_t *gp = json_null();
    if (r->epoch_gpu_s) {
        gp = json_array();
        for (int i = 0; i < r->epochs_run; i++) json_array_append_new(gp, num(r->epoch_gpu_s[i]));
    }
    json_object_set_new(j, "epoch_gpu_times_s", gp);
    /* the instruments' own time in these epochs, which every time above excludes: they measure training */
    json_object_set_new(j, "telemetry_time_s", num(r->telemetry_s));
    json_object_set_new(j, "telemetry_cpu_time_s", num(r->telemetry_cpu_s));
    json_object_set_new(j, "samples_per_s", num(r->samples_per_s));
    json_t *mem = json_object();
    for (int m = 0; m < MPT_MEM_COUNT; m++) {
        if (m == MPT_MEM_MASTER && o->master_weights == MPT_MASTER_NONE) continue; /* there are none */
        json_object_set_new(mem, mpt_mem_name((mpt_mem)m), json_integer((json_int_t)r->mem_peak[m]));
    }
    json_object_set_new(mem, "total", json_integer((json_int_t)r->mem_peak_total));
    json_object_set_new(j, "peak_memory_bytes", mem);
    json_object_set_new(j, "steps_skipped", json_integer(r->steps_skipped));
    json_object_set_new(j, "scale_floor_hits", json_integer(r->floor_hits));
    json_object_set_new(j, "steps_nonfinite_applied", json_integer(r->steps_nonfinite));
    json_object_set_new(j, "weights_nonfinite", json_boolean(r->weights_nonfinite));
    /* why the final checkpoint was not written (non-finite weights, optimizer state or scaler values), else null */
    json_object_set_new(j, "checkpoint_refused",
                        r->checkpoint_refused ? json_string(r->checkpoint_refused_why) : json_null());
    json_object_set_new(j, "final_loss_scale", json_real((double)r->final_scale));
    json_t *cg = json_object(); /* --cuda-graph: what was asked and what ran */
    json_object_set_new(cg, "requested", json_string(o->cuda_graph ? "on" : "off"));
    json_object_set_new(cg, "status", json_string(r->cuda_graph[0] ? r->cuda_graph : "not run"));
    json_object_set_new(j, "cuda_graph", cg);
    if (strcmp(r->device, "cuda") == 0) { /* the opt-in paths this run's backend was created with */
        char on[512], *save = NULL;
        json_t *list = json_array();
        mpt_cuda_opt_in_on(on, sizeof on);
        for (char *v = strtok_r(on, ", ", &save); v; v = strtok_r(NULL, ", ", &save))
            json_array_append_new(list, json_string(v));
        json_object_set_new(j, "cuda_opt_in", list);
        /* and the calls of this run's backend that took each path (none listed: none taken), so a variable that was
         * set but whose path never ran shows (engine/cuda_backend.h mpt_cuda_opt_in_calls) */
        static const char *const vars[] = MPT_CUDA_OPT_IN_VARS;
        json_t *calls = json_object();
        for (int k = 0; k < MPT_CUDA_OPT_IN_COUNT; k++) {
            const int64_t n = g->be->device == MPT_DEVICE_CUDA ? mpt_cuda_opt_in_calls(g->be, k) : 0;
            if (n > 0) json_object_set_new(calls, vars[k], json_integer((json_int_t)n));
        }
        json_object_set_new(j, "cuda_opt_in_calls", calls);
    }
    json_object_set_new(j, "precision_map", summary_precision_map(g));
    json_t *ck = json_null(); /* the CPU backend's kernel set and engine (the precision map says which node used what) */
    if (g->be->device == MPT_DEVICE_CPU) {
        char engine[256];
        mpt_cpu_engine_describe(engine, sizeof engine);
        ck = json_object();
        json_object_set_new(ck, "set", json_string(mpt_cpu_kernels_name(mpt_backend_cpu_kernels(g->be))));
        json_object_set_new(ck, "engine", json_string(engine));
        json_t *au = json_null(); /* --cpu-kernels auto: what was measured and chosen (tools/run.c) */
        if (r->kernels_auto[0]) {
            au = json_object();
            json_object_set_new(au, "said", json_string(r->kernels_auto));
            json_object_set_new(au, "emulate_step_s", num(r->kernels_auto_s[0]));
            json_object_set_new(au, "native_step_s", num(r->kernels_auto_s[1]));
        }
        json_object_set_new(ck, "auto", au);
    }
    json_object_set_new(j, "cpu_kernels", ck);
    /* --accum-model: the model the backend's emulated TF32/FP16/BF16 GEMMs summed with (the precision map's "accum"
     * says per node); null on the GPU, whose hardware sums */
    json_t *am = json_null();
    if (g->be->device == MPT_DEVICE_CPU) {
        const mpt_accum_model m = mpt_backend_cpu_accum(g->be);
        am = json_pack("{s:s, s:s}", "model", mpt_accum_model_name(m), "gpus", mpt_accum_model_gpus(m));
    }
    json_object_set_new(j, "accum_model", am);
    json_object_set_new(j, "telemetry", telemetry_json(o, r));
    return write_json(od, "summary.json", j);
}
