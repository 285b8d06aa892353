/*
 * tools/run_summary.c - what one training run leaves for scripts beside its CSVs and checkpoint: summary.json
 * (jansson), and the precision map (every node's dtypes and math mode) that summary.json and the checkpoint
 * carry.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <jansson.h>

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
                                                 : n->op == MPT_OP_SOFTMAX_XENT ? json_string("fp32") : json_null());
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

mpt_status mpt_run_write_summary(const mpt_outdir *od, const mpt_cli_opts *o, const mpt_run_result *r,
                                 const mpt_graph *g, const mpt_policy *policy) {
    json_t *j = json_object();
    char buf[96];
    json_object_set_new(j, "mptrain", json_string(MPT_VERSION));
    json_object_set_new(j, "run_id", json_string(r->run_id));
    json_t *stop = json_null(); /* a run stopped by SIGINT / SIGTERM after `steps` steps, its state saved */
    if (r->interrupted)
        stop = json_pack("{s:s, s:I}", "signal", mpt_guard_signal_name(r->interrupted), "step", (json_int_t)r->iterations);
    json_object_set_new(j, "interrupted", stop);
    json_object_set_new(j, "model", json_string(o->model));
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
    json_object_set_new(j, "final_loss_scale", json_real((double)r->final_scale));
    json_t *cg = json_object(); /* --cuda-graph: what was asked and what ran */
    json_object_set_new(cg, "requested", json_string(o->cuda_graph ? "on" : "off"));
    json_object_set_new(cg, "status", json_string(r->cuda_graph[0] ? r->cuda_graph : "not run"));
    json_object_set_new(j, "cuda_graph", cg);
    json_object_set_new(j, "precision_map", (json_t *)mpt_run_precision_map_json(g));
    json_t *ck = json_null(); /* the CPU backend's kernel set and engine (the precision map says which node used what) */
    if (g->be->device == MPT_DEVICE_CPU) {
        char engine[256];
        mpt_cpu_engine_describe(engine, sizeof engine);
        ck = json_object();
        json_object_set_new(ck, "set", json_string(mpt_cpu_kernels_name(mpt_backend_cpu_kernels(g->be))));
        json_object_set_new(ck, "engine", json_string(engine));
    }
    json_object_set_new(j, "cpu_kernels", ck);
    json_object_set_new(j, "telemetry", telemetry_json(o, r));
    return write_json(od, "summary.json", j);
}
