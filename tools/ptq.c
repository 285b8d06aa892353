/*
 * tools/ptq.c - post-training quantization of a checkpoint (tools/ptq.h): `mptrain eval --quantize`.
 *
 * One pass over the test set evaluates both models on the same batch: the reference weights (the working copies as a
 * checkpoint load writes them) with the float path, then the quantized weights with the float path (weights only) or
 * the integer path (INT8 activations), each batch's layer outputs compared in FP64 on the host. The two sets of
 * weights live in backend buffers and are copied into the working copies before each forward (a few MB; evaluation
 * only). Calibration, before that pass, runs the reference model over the first `calibrate` training batches in file
 * order and keeps each layer's largest |input| (engine/quant.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layers/layers.h"
#include "models/models.h"
#include "tools/ptq.h"
#include "tools/run.h"

/* The state of one evaluation: the trainer and the buffers of both models. */
typedef struct ptq_run {
    mpt_backend *be;
    mpt_trainer *t;
    mpt_cli_device_data dd;
    int uploaded;
    void **ref_w, **q_w;   /* [n_params] backend copies of the working weights: reference, quantized (NULL: not a
                              quantized weight) */
    mpt_node *nodes[MPT_PTQ_MAX_LAYERS];
    int32_t *idx;          /* backend: batch indices */
    size_t idx_bytes;
} ptq_run;

static void ptq_release(ptq_run *p) {
    if (p->t) {
        for (int i = 0; i < p->t->n_params; i++) {
            if (p->ref_w && p->ref_w[i]) p->be->free(p->be, p->ref_w[i]);
            if (p->q_w && p->q_w[i]) p->be->free(p->be, p->q_w[i]);
        }
    }
    free(p->ref_w);
    free(p->q_w);
    if (p->idx) p->be->free(p->be, p->idx);
    mpt_trainer_free(&p->t);
    if (p->uploaded) mpt_cli_data_release(&p->dd);
    mpt_backend_free(&p->be);
}

/* A backend buffer holding a copy of tensor t's data. */
static void *snapshot(mpt_backend *be, const mpt_tensor *t) {
    void *p = be->alloc(be, mpt_tensor_nbytes(t));
    if (p) be->copy(be, p, t->data, mpt_tensor_nbytes(t));
    return p;
}

/* Copies the chosen model's weights (0 reference, 1 quantized) into the working copies and sets the nodes' mode. */
static void use_model(ptq_run *p, int quantized, int act_int8) {
    for (int i = 0; i < p->t->n_params; i++)
        if (p->q_w[i])
            p->be->copy(p->be, p->t->weight[i]->data, quantized ? p->q_w[i] : p->ref_w[i],
                        mpt_tensor_nbytes(p->t->weight[i]));
    mpt_quant_set_mode(p->t->g, quantized && act_int8 ? MPT_QUANT_INT8 : MPT_QUANT_OFF);
}

/* A backend buffer of n FP32 values: `data` (backend memory) stored in dtype dt, widened exactly. The reference values
 * of the quantization: the FP32 masters, or a checkpoint's 16-bit weights when it trained without masters
 * (--master-weights none), which must not be read as FP32 bytes. NULL when out of backend memory. */
static float *f32_buffer(mpt_backend *be, const void *data, mpt_dtype dt, int64_t n) {
    float *d = be->alloc(be, sizeof(float) * (size_t)(n ? n : 1));
    if (!d || dt == MPT_DTYPE_F32) {
        if (d) be->copy(be, d, data, sizeof(float) * (size_t)n);
        return d;
    }
    const size_t bytes = (size_t)n * mpt_dtype_size(dt);
    void *raw = malloc(bytes ? bytes : 1);
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    MPT_ASSERT(raw && h);
    be->to_host(be, raw, data, bytes);
    for (int64_t i = 0; i < n; i++) h[i] = mpt_load_f32(raw, dt, i);
    be->from_host(be, d, h, sizeof(float) * (size_t)n);
    free(raw);
    free(h);
    return d;
}

/* Host FP64 copy of a float tensor (any float dtype). */
static double *host_values(mpt_backend *be, const mpt_tensor *t, int64_t n) {
    const size_t bytes = (size_t)n * mpt_dtype_size(t->dtype);
    void *raw = malloc(bytes ? bytes : 1);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    MPT_ASSERT(raw && v);
    be->to_host(be, raw, t->data, bytes);
    for (int64_t i = 0; i < n; i++) v[i] = mpt_load_f32(raw, t->dtype, i);
    free(raw);
    return v;
}

/* Stages rows idx (host, B entries, -1 = padding) as the next batch. */
static void stage(ptq_run *p, const uint8_t *images, const uint8_t *labels, const int32_t *rows, int64_t dim,
                  float mean, float inv_std) {
    p->be->from_host(p->be, p->idx, rows, (size_t)p->t->g->batch * sizeof(int32_t));
    mpt_trainer_gather(p->t, images, labels, p->idx, dim, mean, inv_std);
}

/* One forward of the staged batch (or, staged = 0, of the batch already in the input); adds its loss times `valid`
 * and its correct count. */
static void forward(ptq_run *p, int staged, int64_t valid, double *loss_sum, int64_t *correct) {
    mpt_trainer_reset_correct(p->t);
    if (staged) mpt_trainer_eval_batch(p->t);
    else {
        p->t->g->training = 0;
        mpt_graph_forward(p->t->g);
    }
    mpt_train_stats st;
    mpt_trainer_stats(p->t, &st);
    *loss_sum += (double)st.loss * (double)valid;
    *correct += st.n_correct;
}

/* Rebuilds the checkpoint's model on the invocation's device as `eval` does (tools/cmd_eval.c), with the quantization
 * state of engine/quant.h when per_channel >= 0 (0 or 1: the weight scales' granularity), and loads the checkpoint;
 * *o and *rs receive its settings and state, device (len bytes) the device line. On failure everything is released. */
static mpt_status ptq_open(ptq_run *p, const char *path, const mpt_cli_opts *inv, const mpt_cli_data *cd,
                           int per_channel, FILE *log, mpt_cli_opts *o, mpt_run_state *rs, char *device, size_t len) {
    memset(p, 0, sizeof *p);
    mpt_cli_opts_default(o);
    MPT_TRY(mpt_run_checkpoint_read_config(path, o, rs));
    if (mpt_cli_given(inv, MPT_OPT_BATCH_SIZE)) o->batch = inv->batch;
    char why[640];
    mpt_status s = mpt_run_backend_create(inv->device, &p->be, why, sizeof why);
    if (s != MPT_OK) return s;
    snprintf(device, len, "%.255s", why);
    if (log) fprintf(log, "device: %s\n", why);
    if (p->be->device == MPT_DEVICE_CPU) { /* the kernel set: --cpu-kernels, else the checkpoint's (as eval) */
        const int given = mpt_cli_given(inv, MPT_OPT_CPU_KERNELS);
        const mpt_cpu_kernels k = given ? inv->cpu_kernels : o->cpu_kernels;
        s = mpt_backend_cpu_set_kernels(p->be, k);
        if (s != MPT_OK && !given) s = MPT_OK; /* unavailable here: emulate, as eval does */
    }
    if (s == MPT_OK) s = mpt_cli_data_upload(&p->dd, p->be, &cd->d);
    p->uploaded = s == MPT_OK;
    mpt_policy policy = mpt_policy_make_switches(o->precision, o->tf32_matmul, o->tf32_conv);
    policy.fp8 = o->fp8;
    /* --norm-stats: on the CPU, the layer norms' statistics as the run computed them (as eval; batch norm reads its
     * running ones); the GPU runs FP32 statistics only, and eval says so */
    if (p->be->device == MPT_DEVICE_CPU) policy.norm_stats = o->norm_stats;
    if (s == MPT_OK && mpt_policy_is_fp8(&policy)) s = mpt_run_fp8_device_check(p->be, o->precision, &policy.fp8, "");
    if (s == MPT_OK) {
        mpt_graph *g = mpt_graph_create(p->be, &policy, o->batch);
        mpt_tensor *logits = NULL;
        s = mpt_model_build_for(g, o->model, &rs->data, &logits);
        if (s == MPT_OK) {
            mpt_softmax_xent(g, logits, "loss");
            if (per_channel >= 0) mpt_quant_prepare(g, per_channel); /* the integer state, no fused epilogues */
            mpt_cli_opts oc = *o;
            oc.lr_schedule = MPT_LR_CONSTANT; /* eval does not train: as cmd_eval.c */
            mpt_train_config cfg = mpt_cli_train_config(&oc, 1);
            s = mpt_trainer_create(&p->t, g, &cfg);
        } else {
            mpt_graph_free(&g);
        }
    }
    if (s == MPT_OK) s = mpt_run_checkpoint_load(path, p->t);
    if (s != MPT_OK) {
        ptq_release(p);
        return s;
    }
    if (log)
        fprintf(log, "checkpoint %s: model %s, precision %s, step %lld%s%s\n", path, o->model,
                mpt_precision_name(o->precision), (long long)rs->iteration, o->qat ? ", trained with --qat " : "",
                o->qat ? mpt_qat_name(o->qat) : "");
    return MPT_OK;
}

mpt_status mpt_ptq_run(const char *path, const mpt_cli_opts *inv, const mpt_cli_data *cd, const mpt_ptq_config *q,
                       FILE *log, mpt_ptq_result *r) {
    memset(r, 0, sizeof *r);
    r->ref_name = "FP32 master";
    const mpt_qformat_desc *fd = mpt_qformat_info(q->fmt);
    if (!fd) return mpt_errorf(MPT_ERR_ARG, "--quantize: unknown format %d", (int)q->fmt);
    if (q->act_int8 && !fd->is_int)
        return mpt_errorf(MPT_ERR_ARG, "--activations int8 needs --quantize int8 or int4, found %s", fd->key);
    if (q->act_int8 && q->calibrate < 1)
        return mpt_errorf(MPT_ERR_ARG, "--calibrate: expected at least 1 batch, found %d", q->calibrate);
    mpt_cli_opts o;
    mpt_run_state rs;
    ptq_run p;
    mpt_status s = ptq_open(&p, path, inv, cd, q->per_channel, log, &o, &rs, r->device, sizeof r->device);
    if (s != MPT_OK) return s;
    mpt_cli_model_short(o.model, r->model, sizeof r->model); /* a spec: "spec-" and its hash */
    r->precision = o.precision;
    r->qat = o.qat;
    mpt_trainer *t = p.t;
    mpt_graph *g = t->g;
    mpt_backend *be = p.be;
    const int B = g->batch;

    /* the quantized layers, in graph order */
    for (int i = 0; i < g->n_nodes && s == MPT_OK; i++) {
        mpt_node *n = g->nodes[i];
        if (!n->quant) continue;
        if (r->n_layers == MPT_PTQ_MAX_LAYERS)
            s = mpt_errorf(MPT_ERR_ARG, "model %s has more than %d linear and conv layers", o.model, MPT_PTQ_MAX_LAYERS);
        else p.nodes[r->n_layers++] = n;
    }
    p.ref_w = calloc((size_t)t->n_params, sizeof *p.ref_w);
    p.q_w = calloc((size_t)t->n_params, sizeof *p.q_w);
    p.idx_bytes = (size_t)B * sizeof(int32_t);
    p.idx = be->alloc(be, p.idx_bytes);
    int32_t *rows = malloc(p.idx_bytes);
    if (s == MPT_OK && (!p.ref_w || !p.q_w || !p.idx || !rows))
        s = mpt_errorf(MPT_ERR_NOMEM, "out of memory for the evaluation's buffers");

    /* the reference weights, and the biases' bytes */
    for (int i = 0; i < t->n_params && s == MPT_OK; i++) {
        if (!mpt_quant_weight_node(g, t->weight[i])) {
            r->bytes_bias += mpt_tensor_numel(t->weight[i]) * 4;
            continue;
        }
        p.ref_w[i] = snapshot(be, t->weight[i]);
        if (!p.ref_w[i]) s = mpt_errorf(MPT_ERR_NOMEM, "out of backend memory for %s", t->weight[i]->name);
    }

    /* calibration: the reference model over the first `calibrate` training batches */
    if (s == MPT_OK && q->act_int8) {
        const int64_t n_train = cd->d.n_train;
        const int nb = (int)((n_train + B - 1) / B < q->calibrate ? (n_train + B - 1) / B : q->calibrate);
        use_model(&p, 0, 0);
        mpt_quant_set_mode(g, MPT_QUANT_CALIBRATE);
        mpt_quant_calibration_begin(g);
        for (int b = 0; b < nb; b++) {
            for (int k = 0; k < B; k++) rows[k] = (int64_t)b * B + k < n_train ? (int32_t)((int64_t)b * B + k) : -1;
            stage(&p, p.dd.train_images, p.dd.train_labels, rows, cd->d.dim, rs.mean, rs.inv_std);
            mpt_trainer_eval_batch(t);
            r->calib_images += (int64_t)b * B + B <= n_train ? B : n_train - (int64_t)b * B;
        }
        mpt_quant_calibration_end(g);
        for (int l = 0; l < r->n_layers; l++) {
            be->to_host(be, &r->layer[l].x_amax, p.nodes[l]->quant->x_amax->data, sizeof(float));
            be->to_host(be, &r->layer[l].x_scale, p.nodes[l]->quant->x_scale->data, sizeof(float));
        }
        mpt_quant_set_mode(g, MPT_QUANT_OFF);
    }

    /* the quantized weights (codes and scales for the integer path), their errors and memory */
    for (int i = 0; i < t->n_params && s == MPT_OK; i++) {
        if (!p.ref_w[i]) continue;
        mpt_tensor *w = t->weight[i];
        mpt_node *n = mpt_quant_weight_node(g, w);
        int l = 0;
        while (p.nodes[l] != n) l++;
        mpt_ptq_layer *L = &r->layer[l];
        /* the reference values in FP32: the master, or (where the weight is its own master: fp32/tf32 without --qat,
         * or any run with --master-weights none) the reference snapshot of the weight, which the rewrite must not read
         * from the tensor it writes, widened from its dtype */
        const int own = t->master[i] == w;
        const int64_t ne = mpt_tensor_numel(w);
        float *master = f32_buffer(be, own ? p.ref_w[i] : t->master[i]->data, t->master[i]->dtype, ne);
        if (t->master[i]->dtype != MPT_DTYPE_F32)
            r->ref_name = t->master[i]->dtype == MPT_DTYPE_F16 ? "FP16 weight" : "BF16 weight";
        if (master)
            mpt_quant_fake_weight(g, master, w, q->fmt, q->per_channel, fd->is_int ? n->quant->qw->data : NULL,
                                  fd->is_int ? n->quant->w_scales->data : NULL);
        p.q_w[i] = master ? snapshot(be, w) : NULL;
        if (!p.q_w[i]) {
            if (master) be->free(be, master);
            s = mpt_errorf(MPT_ERR_NOMEM, "out of backend memory for %s", w->name);
            break;
        }
        double *wq = host_values(be, w, ne), num = 0.0, den = 0.0;
        float *mh = malloc(sizeof(float) * (size_t)(ne ? ne : 1));
        MPT_ASSERT(mh != NULL);
        be->to_host(be, mh, master, sizeof(float) * (size_t)ne);
        float amax = 0.0f;
        for (int64_t k = 0; k < ne; k++) {
            const double m = mh[k];
            num += (wq[k] - m) * (wq[k] - m);
            den += m * m;
            amax = fmaxf(amax, fabsf(mh[k]));
        }
        free(wq);
        free(mh);
        be->free(be, master);
        snprintf(L->name, sizeof L->name, "%s", n->name);
        L->conv = n->op == MPT_OP_CONV2D;
        L->weights = ne;
        L->channels = mpt_quant_channels(w);
        L->w_amax = amax;
        L->weight_rel_l2 = den > 0.0 ? sqrt(num / den) : 0.0;
        r->bytes_fp32 += ne * 4;
        r->bytes_q += (ne * fd->bits + 7) / 8;
        r->bytes_scales += fd->scaled ? (q->per_channel ? L->channels : 1) * 4 : 0;
    }

    /* the test set, both models on each batch */
    double *ref_out[MPT_PTQ_MAX_LAYERS] = {0}, num[MPT_PTQ_MAX_LAYERS] = {0}, den[MPT_PTQ_MAX_LAYERS] = {0};
    int64_t correct[2] = {0, 0};
    double loss[2] = {0.0, 0.0};
    const int64_t n_test = cd->d.n_test;
    for (int64_t b = 0; s == MPT_OK && b * B < n_test; b++) {
        const int64_t valid = n_test - b * B < B ? n_test - b * B : B;
        for (int k = 0; k < B; k++) rows[k] = k < valid ? (int32_t)(b * B + k) : -1;
        stage(&p, p.dd.test_images, p.dd.test_labels, rows, cd->d.dim, rs.mean, rs.inv_std);
        use_model(&p, 0, q->act_int8);
        forward(&p, 1, valid, &loss[0], &correct[0]);
        for (int l = 0; l < r->n_layers; l++) {
            const mpt_tensor *y = p.nodes[l]->out;
            free(ref_out[l]);
            ref_out[l] = host_values(be, y, mpt_tensor_numel(y) / B * valid); /* the valid rows lead */
        }
        use_model(&p, 1, q->act_int8);
        forward(&p, 0, valid, &loss[1], &correct[1]);
        for (int l = 0; l < r->n_layers; l++) {
            const mpt_tensor *y = p.nodes[l]->out;
            const int64_t ne = mpt_tensor_numel(y) / B * valid;
            double *yq = host_values(be, y, ne);
            for (int64_t k = 0; k < ne; k++) {
                num[l] += (yq[k] - ref_out[l][k]) * (yq[k] - ref_out[l][k]);
                den[l] += ref_out[l][k] * ref_out[l][k];
            }
            free(yq);
        }
    }
    for (int l = 0; l < r->n_layers; l++) {
        free(ref_out[l]);
        r->layer[l].out_rel_l2 = den[l] > 0.0 ? sqrt(num[l] / den[l]) : 0.0;
    }
    r->n_test = n_test;
    if (n_test > 0) {
        r->base_acc = (double)correct[0] / (double)n_test;
        r->q_acc = (double)correct[1] / (double)n_test;
        r->base_loss = loss[0] / (double)n_test;
        r->q_loss = loss[1] / (double)n_test;
    }
    free(rows);
    ptq_release(&p);
    return s;
}

/* A size for people: "12 B", "4.0 KiB", "2.55 MiB". */
static const char *size_text(int64_t bytes, char *buf, size_t len) {
    if (bytes < 1024) snprintf(buf, len, "%lld B", (long long)bytes);
    else if (bytes < 1024 * 1024) snprintf(buf, len, "%.1f KiB", (double)bytes / 1024.0);
    else snprintf(buf, len, "%.2f MiB", (double)bytes / (1024.0 * 1024.0));
    return buf;
}

void mpt_ptq_print(const mpt_ptq_config *q, const mpt_ptq_result *r, FILE *f) {
    const mpt_qformat_desc *fd = mpt_qformat_info(q->fmt);
    if (fd->scaled)
        fprintf(f, "post-training quantization: weights %s, %s (s = amax / %d of the %s%s; x' = %s); ",
                fd->name, q->per_channel ? "one scale per output channel" : "one scale per tensor", fd->qmax,
                r->ref_name, q->per_channel ? "'s row" : "", fd->is_int ? "clamp(round_half_even(x / s)) * s" : "E4M3(x / s) * s");
    else
        fprintf(f, "post-training quantization: weights %s, no scale (x' = the %s rounded to nearest even); ",
                fd->name, r->ref_name);
    if (q->act_int8)
        fprintf(f, "activations INT8, one scale per layer input, s = amax / 127 with amax the largest |input| over %lld "
                   "training images (%d batches, file order); integer GEMMs and convolutions, exact int32 sums, one "
                   "rescale\n", (long long)r->calib_images, q->calibrate);
    else
        fprintf(f, "activations unquantized: the %s GEMMs and convolutions of the checkpoint on the quantized "
                   "weights\n", mpt_precision_name(r->precision));
    if (strcmp(r->ref_name, "FP32 master") != 0)
        fprintf(f, "note: the checkpoint trained with --master-weights none: it holds no FP32 masters, so its %ss, "
                   "widened exactly to FP32, are what is quantized and what the errors are measured against\n",
                r->ref_name);
    if (r->qat != MPT_QAT_NONE)
        fprintf(f, "note: the checkpoint trained with --qat %s: its reference model, as `mptrain eval` evaluates it, "
                   "already reads its weights fake-quantized to %s per output channel\n", mpt_qat_name(r->qat),
                mpt_qformat_info(mpt_qat_format(r->qat))->name);
    fprintf(f, "\n| layer | weights | amax | weight error (rel. L2) |%s output error (rel. L2) |\n|---|---:|---:|---:|%s---:|\n",
            q->act_int8 ? " input amax | input scale |" : "", q->act_int8 ? "---:|---:|" : "");
    for (int l = 0; l < r->n_layers; l++) {
        const mpt_ptq_layer *L = &r->layer[l];
        fprintf(f, "| %s | %lld | %.4g | %.3e |", L->name, (long long)L->weights, (double)L->w_amax, L->weight_rel_l2);
        if (q->act_int8) fprintf(f, " %.4g | %.4g |", (double)L->x_amax, (double)L->x_scale);
        fprintf(f, " %.3e |\n", L->out_rel_l2);
    }
    fprintf(f, "\nweight error: ||W' - W|| / ||W|| against the %ss; output error: ||y' - y|| / ||y|| of each "
               "layer's output against the unquantized model's, on the same %lld test images (earlier layers' errors "
               "included)\n", r->ref_name, (long long)r->n_test);
    char b1[32], b2[32], b3[32], b4[32];
    fprintf(f, "weights' memory: %s in FP32 -> %s in %s%s, + %s of FP32 scales (%.1f%% of FP32 with them); biases %s in "
               "FP32, not quantized\n",
            size_text(r->bytes_fp32, b1, sizeof b1), size_text(r->bytes_q, b2, sizeof b2), fd->name,
            fd->bits < 8 ? " (two per byte, as stored; the emulation holds one per byte)" : "",
            size_text(r->bytes_scales, b3, sizeof b3),
            100.0 * (double)(r->bytes_q + r->bytes_scales) / (double)r->bytes_fp32, size_text(r->bytes_bias, b4, sizeof b4));
    fprintf(f, "test accuracy: unquantized %.2f%%, quantized %.2f%% (%+.2f pp); test loss %.4f -> %.4f (%lld images)\n",
            100.0 * r->base_acc, 100.0 * r->q_acc, 100.0 * (r->q_acc - r->base_acc), mpt_cli_nan_plain(r->base_loss),
            mpt_cli_nan_plain(r->q_loss), (long long)r->n_test);
}

int mpt_ptq_command(const mpt_cli_opts *cli) {
    mpt_cpu_set_threads(cli->threads);
    mpt_status s = mpt_guard_blas_ready();
    if (s != MPT_OK) return mpt_cli_fail("eval", s);
    const mpt_ptq_config q = {.fmt = (mpt_qformat)cli->quantize, .per_channel = cli->per_channel,
                              .act_int8 = cli->act_int8, .calibrate = cli->calibrate};
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    mpt_run_state rs;
    s = mpt_run_checkpoint_read_config(cli->checkpoint, &o, &rs);
    if (s != MPT_OK) return mpt_cli_fail("eval", s);
    mpt_cli_data cd;
    /* the training images only for calibration (else the first one, which nothing reads); the test images as
     * --limit-test says; the shape the network was built for */
    s = mpt_run_checkpoint_data_load(&cd, cli->checkpoint, &rs, cli->data, q.act_int8 ? 0 : 1, cli->limit_test,
                                     cli->data_layout);
    if (s != MPT_OK) return mpt_cli_fail("eval", s);
    mpt_ptq_result r;
    s = mpt_ptq_run(cli->checkpoint, cli, &cd, &q, stdout, &r);
    mpt_cli_data_free(&cd);
    if (s != MPT_OK) return mpt_cli_fail("eval", s);
    mpt_ptq_print(&q, &r, stdout);
    return 0;
}

void mpt_ptq_tensors_free(mpt_ptq_tensors *t) {
    for (int l = 0; l < t->n; l++) {
        free(t->weight[l]);
        free(t->grad[l]);
    }
    memset(t, 0, sizeof *t);
}

mpt_status mpt_ptq_gradients(const char *path, const mpt_cli_opts *inv, const mpt_cli_data *cd, int64_t first,
                             mpt_ptq_tensors *out) {
    memset(out, 0, sizeof *out);
    mpt_cli_opts o;
    mpt_run_state rs;
    ptq_run p;
    char device[256];
    MPT_TRY(ptq_open(&p, path, inv, cd, -1, NULL, &o, &rs, device, sizeof device));
    mpt_trainer *t = p.t;
    mpt_backend *be = p.be;
    const int B = t->g->batch;
    mpt_status s = MPT_OK;
    if (first < 0 || first + B > cd->d.n_train)
        s = mpt_errorf(MPT_ERR_ARG, "training rows %lld..%lld: the data has %lld", (long long)first,
                       (long long)(first + B - 1), (long long)cd->d.n_train);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)B);
    p.idx = be->alloc(be, sizeof(int32_t) * (size_t)B);
    if (s == MPT_OK && (!rows || !p.idx)) s = mpt_errorf(MPT_ERR_NOMEM, "out of memory for a batch");
    for (int i = 0; s == MPT_OK && i < t->n_params; i++) {
        const mpt_node *n = mpt_quant_weight_node(t->g, t->weight[i]);
        if (!n) continue;
        if (out->n == MPT_PTQ_MAX_LAYERS) {
            s = mpt_errorf(MPT_ERR_ARG, "more than %d linear and conv layers", MPT_PTQ_MAX_LAYERS);
            break;
        }
        const int64_t ne = mpt_tensor_numel(t->weight[i]);
        snprintf(out->name[out->n], sizeof out->name[out->n], "%s", n->name);
        out->numel[out->n] = ne;
        out->channels[out->n] = mpt_quant_channels(t->weight[i]);
        out->weight[out->n] = malloc(sizeof(float) * (size_t)ne);
        out->grad[out->n] = malloc(sizeof(float) * (size_t)ne);
        if (!out->weight[out->n] || !out->grad[out->n]) s = mpt_errorf(MPT_ERR_NOMEM, "out of memory for %s", n->name);
        else {
            float *m = f32_buffer(be, t->master[i]->data, t->master[i]->dtype, ne); /* without masters: the weights */
            if (!m) s = mpt_errorf(MPT_ERR_NOMEM, "out of backend memory for %s", n->name);
            else be->to_host(be, out->weight[out->n], m, sizeof(float) * (size_t)ne), be->free(be, m);
        }
        out->n++;
    }
    if (s == MPT_OK) {
        for (int k = 0; k < B; k++) rows[k] = (int32_t)(first + k);
        stage(&p, p.dd.train_images, p.dd.train_labels, rows, cd->d.dim, rs.mean, rs.inv_std);
        mpt_trainer_step(t); /* forward, backward (loss scale: the checkpoint's), unscale, the update */
        int l = 0;
        for (int i = 0; i < t->n_params; i++)
            if (mpt_quant_weight_node(t->g, t->weight[i]))
                be->to_host(be, out->grad[l], t->weight[i]->grad->data, sizeof(float) * (size_t)out->numel[l]), l++;
    }
    free(rows);
    ptq_release(&p);
    if (s != MPT_OK) mpt_ptq_tensors_free(out);
    return s;
}
