/*
 * tools/run_checkpoint.c - a training run's state as one safetensors file (engine/checkpoint.h).
 *
 * Tensors (FP32 unless a switch says otherwise; host byte order = little-endian):
 *   "<param>"                  the FP32 master weights, named like the parameters ("fc1.weight", "conv1.bias"),
 *                              so the file reads like a PyTorch state_dict; in fp16/bf16 runs the working copy
 *                              is not stored: it is round-to-nearest-even of the master, rebuilt on load.
 *                              With --master-weights none there is no master: the F16/BF16 weights themselves
 *   "<param>:exp_avg", ...     in --optimizer-state's dtype (F32, BF16 or F16)
 *   "<param>:exp_avg", "<param>:exp_avg_sq"   Adam/AdamW state (torch.optim.Adam's names)
 *   "<param>:momentum_buffer"                 SGD momentum (when momentum > 0)
 *   "<bn>.running_mean", "<bn>.running_var"   batch norm's running statistics, FP32 (the graph's buffers: not
 *                              parameters, so no optimizer state and no master; PyTorch's state_dict names)
 * Metadata (string values; the JSON ones are JSON text):
 *   "format"        "mptrain-run-1"
 *   "mptrain"       the version that wrote it
 *   "model", "precision"   for a quick look
 *   "config"        JSON object: every recorded setting as its canonical text (tools/opts.c), e.g.
 *                   {"model": "mlp", "lr": "0.001", "loss-scale": "dynamic:65536", ...}, plus "epochs"; an option
 *                   written only when set (mpt_cli_opt_written: "accum-model") is absent at its default
 *   "state"         JSON object: iteration, epoch, batch (position inside the epoch), mean, inv_std,
 *                   n_train, n_val, best_test_acc, best_epoch, epoch_loss_sum and epoch_loss_n (the logged
 *                   losses of the unfinished epoch, so a resumed epoch's train_loss is the straight run's),
 *                   threads (the CPU backend's GEMM threads, OpenBLAS's and oneDNN's, which decide its summation
 *                   order; 0 on a GPU),
 *                   ranks and grad_comm (data-parallel: the number of MPI ranks and their wire dtype; absent in
 *                   older checkpoints: 1 and fp32)
 *   "scaler"        JSON object: the loss scaler (mpt_scaler_state): scale, growth_tracker, hysteresis_left,
 *                   steps_taken, steps_skipped, floor_hits, ...
 *   "rng"           JSON object: the generator and the seed of each stream with its position, so a reader can
 *                   see where shuffling and dropout continue (decimal strings: seeds are 64-bit)
 *   "data_fingerprint" JSON object: the fingerprint of the data the run trains on (tools/cli.h mpt_cli_data_fp):
 *                   {"train_images": N, "train_crc32": "8 hex digits", "test_images": N, "test_crc32": "..."};
 *                   absent from older checkpoints
 *   "precision_map" JSON array: each node's dtypes and math mode
 *   "data"          JSON object: the data the network was built for: channels, height, width, classes (absent in
 *                   checkpoints before issue 33: 1 x 28 x 28, 10 classes)
 *   "model_layers"  JSON array: the network layer by layer, named, with its shapes resolved (mpt_run_model_json):
 *                   what a PyTorch module needs to rebuild it and load the tensors (docs/checkpoints.md)
 *   "fp8"           (FP8 modes) JSON array: each FP8 operand tensor and its format, in the order of the rows of
 *                   "amp.fp8_state" (F32 [n, 3]: scale, scale_inv, amax_used) and "amp.fp8_amax_history"
 *                   (F32 [n, --amax-history]), the scaling state a resumed run continues from (engine/amp/fp8.h)
 * Floats in the JSON are written with 17 significant digits, which gives back the same float exactly.
 *
 * The writer refuses (MPT_ERR_NONFINITE, naming the tensor and element; nothing is written, so the previous
 * checkpoint stays) to save a non-finite master weight or optimizer state, or a non-finite scaler or state value.
 *
 * The reader trusts nothing: every number is checked in the type the run keeps it in and against its real
 * range (FP32 values exactly representable and finite, counters within int32 or their bound), and the
 * state is cross-checked: the scaler as it stands between two steps (inv_scale == 1/scale in FP32,
 * found_inf 0, grad_mul 1, sumsq 0, steps_taken + steps_skipped == iteration, steps_nonfinite <= steps_taken
 * (with --nonfinite apply; 0 with skip, and steps_skipped 0 with apply), growth_tracker below the
 * growth interval, floor_hits <= steps_skipped, a static scale equal to the configured one), Adam's
 * exp_avg_sq >= 0, "model" and "precision" equal to the config's, the seeds of "rng" those of the config's
 * seed, the config valid by the command line's own checks (mpt_cli_apply, mpt_cli_check), and the position
 * within the data (run.c checks batch < batches per epoch and iteration == epoch * batches + batch once
 * the data is loaded).
 *
 * Resuming is exact because everything a step depends on is here or is derived from it: masters and
 * optimizer state (bytes), the scaler (exact floats), the iteration (LR schedule, dropout offsets, fault
 * injection), the epoch and the position in it (the loader recomputes epoch e's shuffle from (seed, e)).
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/amp/fp8.h"
#include "engine/amp/master.h"
#include "engine/checkpoint.h"
#include "engine/rng.h"
#include "mpt_config.h"
#include "tools/run.h"

#define FORMAT_TAG "mptrain-run-1"
#define FP8_STATE_NAME "amp.fp8_state"
#define FP8_HISTORY_NAME "amp.fp8_amax_history"

/* The recorded settings, in the order they are written. */

/* The tensors of a trainer as checkpoint entries (data pointers unset). Returns the count; *names holds
 * the strings (free both with free()). */
static int trainer_entries(const mpt_trainer *t, mpt_checkpoint_tensor **out, char **names) {
    int cap = 3 * t->n_params + t->g->n_buffers + 2;
    mpt_checkpoint_tensor *e = calloc((size_t)cap, sizeof *e);
    char *nm = calloc((size_t)cap, MPT_NAME_LEN + 32);
    MPT_ASSERT(e != NULL && nm != NULL);
    int n = 0;
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *list[3] = {t->weight[i], t->m[i], t->v[i]};
        const mpt_tensor *data[3] = {t->master[i], t->m[i], t->v[i]};
        for (int k = 0; k < 3; k++) {
            const mpt_tensor *src = list[k];
            if (!src) continue;
            char *name = nm + (size_t)n * (MPT_NAME_LEN + 32);
            snprintf(name, MPT_NAME_LEN + 32, "%s", src->name);
            e[n].name = name;
            e[n].dtype = data[k]->dtype; /* F32, or F16/BF16 without masters / with 16-bit optimizer state */
            e[n].ndim = src->ndim;
            for (int d = 0; d < src->ndim; d++) e[n].shape[d] = src->shape[d];
            n++;
        }
    }
    const mpt_graph *g = t->g;
    for (int i = 0; i < g->n_buffers; i++) { /* batch norm's running statistics: FP32, under their own names */
        const mpt_tensor *b = g->buffers[i].t;
        e[n].name = b->name;
        e[n].dtype = MPT_DTYPE_F32;
        e[n].ndim = b->ndim;
        for (int d = 0; d < b->ndim; d++) e[n].shape[d] = b->shape[d];
        n++;
    }
    if (g->n_fp8) { /* FP8 scaling state (engine/amp/fp8.h): per tensor scale, scale_inv, amax_used; the histories */
        e[n].name = FP8_STATE_NAME;
        e[n].dtype = MPT_DTYPE_F32;
        e[n].ndim = 2;
        e[n].shape[0] = g->n_fp8;
        e[n].shape[1] = 3;
        n++;
        e[n].name = FP8_HISTORY_NAME;
        e[n].dtype = MPT_DTYPE_F32;
        e[n].ndim = 2;
        e[n].shape[0] = g->n_fp8;
        e[n].shape[1] = mpt_fp8_history_len(g);
        n++;
    }
    *out = e;
    *names = nm;
    return n;
}

/* The FP8 entries (last two of trainer_entries) have no backend tensor of their own: they are staged through
 * mpt_fp8_state_to_host / _from_host. */
static int is_fp8_entry(const mpt_checkpoint_tensor *e) {
    return strcmp(e->name, FP8_STATE_NAME) == 0 || strcmp(e->name, FP8_HISTORY_NAME) == 0;
}

/* "fp8" metadata: [{"tensor": "fc1.x", "format": "e4m3"}, ...] in the order of the state's rows. */
static json_t *fp8_json(const mpt_graph *g) {
    json_t *a = json_array();
    for (int i = 0; i < g->n_fp8; i++)
        json_array_append_new(a, json_pack("{s:s, s:s}", "tensor", g->fp8[i].name, "format",
                                           mpt_dtype_name(g->fp8[i].fmt)));
    return a;
}

/* The backend tensor holding entry k's data: the master for parameters, the state tensor, or a buffer (the entries'
 * order of trainer_entries). */
static mpt_tensor *entry_tensor(const mpt_trainer *t, int k) {
    int n = 0;
    for (int i = 0; i < t->n_params; i++) {
        mpt_tensor *list[3] = {t->master[i], t->m[i], t->v[i]};
        for (int j = 0; j < 3; j++) {
            if (!list[j]) continue;
            if (n == k) return list[j];
            n++;
        }
    }
    return k - n < t->g->n_buffers ? t->g->buffers[k - n].t : NULL;
}

static json_t *scaler_json(const mpt_scaler_state *s) {
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:i, s:i, s:i, s:i}", "scale", (double)s->scale,
                     "inv_scale", (double)s->inv_scale, "found_inf", (double)s->found_inf, "grad_mul",
                     (double)s->grad_mul, "sumsq", (double)s->sumsq, "growth_tracker", (int)s->growth_tracker,
                     "hysteresis_left", (int)s->hysteresis_left, "steps_taken", (int)s->steps_taken, "steps_skipped",
                     (int)s->steps_skipped, "floor_hits", (int)s->floor_hits, "steps_nonfinite",
                     (int)s->steps_nonfinite);
}

static json_t *u64_json(uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    return json_string(b);
}

static json_t *rng_json(const mpt_trainer *t, const mpt_cli_opts *o, const mpt_run_state *rs) {
    json_t *r = json_object();
    json_object_set_new(r, "generator", json_string("cuRAND CURAND_RNG_PSEUDO_PHILOX4_32_10"));
    json_object_set_new(r, "seed", u64_json(o->seed));
    json_t *init = json_object();
    json_object_set_new(init, "stream_seed", u64_json(mpt_rng_stream_seed(o->seed, MPT_RNG_INIT)));
    json_object_set_new(r, "init", init);
    json_t *shuf = json_object();
    json_object_set_new(shuf, "stream_seed", u64_json(mpt_rng_stream_seed(o->seed, MPT_RNG_SHUFFLE)));
    json_object_set_new(shuf, "epoch", json_integer(rs->epoch));
    json_object_set_new(shuf, "offset", u64_json((uint64_t)rs->epoch * (uint64_t)rs->n_train));
    json_object_set_new(shuf, "batches_done_in_epoch", json_integer(rs->batch));
    json_object_set_new(r, "shuffle", shuf);
    json_t *drop = json_object();
    json_object_set_new(drop, "stream_seed", u64_json(mpt_rng_stream_seed(o->seed, MPT_RNG_DROPOUT)));
    json_object_set_new(drop, "elements_per_step", u64_json(mpt_graph_dropout_stride(t->g)));
    json_object_set_new(drop, "offset", u64_json((uint64_t)t->iteration * mpt_graph_dropout_stride(t->g)));
    json_object_set_new(r, "dropout", drop);
    json_t *split = json_object();
    json_object_set_new(split, "stream_seed", u64_json(mpt_rng_stream_seed(o->seed, MPT_RNG_SPLIT)));
    json_object_set_new(r, "validation_split", split);
    return r;
}

/* The JSON text of j (consumed), or NULL when j is NULL or cannot be serialised. */
static char *dump(json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(j);
    return s;
}

/* MPT_ERR_NONFINITE naming the first non-finite element of a tensor about to be saved (any stored dtype). */
static mpt_status check_finite_tensor(const char *path, const mpt_checkpoint_tensor *e) {
    int64_t n = mpt_checkpoint_tensor_nbytes(e) / (int64_t)mpt_dtype_size(e->dtype);
    for (int64_t q = 0; q < n; q++) {
        float w = mpt_load_f32(e->data, e->dtype, q);
        if (!isfinite(w))
            return mpt_errorf(MPT_ERR_NONFINITE, "%s: not saved: tensor %s holds %s at element %lld (a checkpoint "
                              "must hold finite values; the previous checkpoint, if any, is kept)",
                              path, e->name, isnan(w) ? "NaN" : w > 0 ? "+inf" : "-inf", (long long)q);
    }
    return MPT_OK;
}

/* MPT_ERR_NONFINITE when a scaler or run-state value that the checkpoint records is not finite. */
static mpt_status check_finite_state(const char *path, const mpt_scaler_state *st, const mpt_run_state *rs) {
    const struct { const char *name; double v; } f[] = {
        {"scaler scale", st->scale},         {"scaler inv_scale", st->inv_scale}, {"scaler found_inf", st->found_inf},
        {"scaler grad_mul", st->grad_mul},   {"scaler sumsq", st->sumsq},         {"state mean", rs->mean},
        {"state inv_std", rs->inv_std},      {"state best_test_acc", rs->best_test_acc},
        {"state epoch_loss_sum", rs->epoch_loss_sum},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!isfinite(f[i].v))
            return mpt_errorf(MPT_ERR_NONFINITE, "%s: not saved: %s is %g (a checkpoint must hold finite values; the "
                              "previous checkpoint, if any, is kept)", path, f[i].name, f[i].v);
    return MPT_OK;
}

uint64_t mpt_run_checkpoint_bytes(const mpt_trainer *t) {
    mpt_checkpoint_tensor *e;
    char *names;
    int n = trainer_entries(t, &e, &names);
    uint64_t total = 1 << 20; /* the header: configuration, state, precision map (tens of KiB), generously */
    for (int k = 0; k < n; k++) total += (uint64_t)mpt_checkpoint_tensor_nbytes(&e[k]);
    free(e);
    free(names);
    return total;
}

mpt_status mpt_run_checkpoint_stage(mpt_outdir_txn *tx, mpt_trainer *t, const mpt_cli_opts *o,
                                    const mpt_run_state *rs) {
    const mpt_outdir *od = tx->od;
    char path[sizeof od->path + 64];
    snprintf(path, sizeof path, "%s/%s", od->path, MPT_CLI_CHECKPOINT_FILE);
    mpt_backend *be = t->be;
    mpt_checkpoint_tensor *e;
    char *names;
    int n = trainer_entries(t, &e, &names);
    size_t total = 0;
    for (int k = 0; k < n; k++) total += (size_t)mpt_checkpoint_tensor_nbytes(&e[k]);
    char *host = malloc(total ? total : 1);
    if (!host) {
        free(e);
        free(names);
        return mpt_errorf(MPT_ERR_NOMEM, "%s: cannot allocate %zu bytes to stage the checkpoint", path, total);
    }
    size_t off = 0;
    float *fp8_state = NULL, *fp8_hist = NULL;
    for (int k = 0; k < n; k++) {
        size_t b = (size_t)mpt_checkpoint_tensor_nbytes(&e[k]);
        if (is_fp8_entry(&e[k])) *(strcmp(e[k].name, FP8_STATE_NAME) == 0 ? &fp8_state : &fp8_hist) = (float *)(host + off);
        else be->to_host(be, host + off, entry_tensor(t, k)->data, b);
        e[k].data = host + off;
        off += b;
    }
    if (fp8_state) mpt_fp8_state_to_host(t->g, fp8_state, fp8_hist);
    mpt_scaler_state st;
    be->to_host(be, &st, t->scaler, sizeof st);
    mpt_status fin = check_finite_state(path, &st, rs);
    for (int k = 0; k < n && fin == MPT_OK; k++) fin = check_finite_tensor(path, &e[k]);
    if (fin != MPT_OK) {
        free(host);
        free(e);
        free(names);
        return fin;
    }

    json_t *cfg = json_object();
    static char buf[MPT_MODEL_SPEC_MAX + 64];
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++) /* the recorded settings (the option table's scope) */
        if (mpt_cli_opt_written(o, id))
            json_object_set_new(cfg, mpt_cli_opt_name(id), json_string(mpt_cli_format(o, id, buf, sizeof buf)));
    json_t *state = json_pack("{s:I, s:I, s:I, s:f, s:f, s:I, s:I, s:f, s:i, s:f, s:I, s:i, s:i, s:s, s:s}", "iteration",
                              (json_int_t)rs->iteration, "epoch", (json_int_t)rs->epoch, "batch", (json_int_t)rs->batch,
                              "mean", (double)rs->mean, "inv_std", (double)rs->inv_std, "n_train",
                              (json_int_t)rs->n_train, "n_val", (json_int_t)rs->n_val, "best_test_acc",
                              rs->best_test_acc, "best_epoch", rs->best_epoch, "epoch_loss_sum", rs->epoch_loss_sum,
                              "epoch_loss_n", (json_int_t)rs->epoch_loss_n, "threads", rs->threads, "ranks",
                              rs->ranks < 1 ? 1 : rs->ranks, "grad_comm", mpt_grad_comm_name(rs->grad_comm),
                              "run_id", rs->run_id);
    char *s_cfg = dump(cfg);
    char *s_state = dump(state);
    char *s_scaler = dump(scaler_json(&st));
    char *s_rng = dump(rng_json(t, o, rs));
    char *s_map = dump((json_t *)mpt_run_precision_map_json(t->g));
    char crc[2][9];
    snprintf(crc[0], sizeof crc[0], "%08x", (unsigned)rs->fp.train_crc32);
    snprintf(crc[1], sizeof crc[1], "%08x", (unsigned)rs->fp.test_crc32);
    char *s_fingerprint = dump(json_pack("{s:I, s:s, s:I, s:s}", "train_images", (json_int_t)rs->fp.n_train,
                                         "train_crc32", crc[0], "test_images", (json_int_t)rs->fp.n_test, "test_crc32",
                                         crc[1]));
    char *s_fp8 = dump(fp8_json(t->g));
    char *s_data = dump((json_t *)mpt_run_data_json(&rs->data));
    json_t *layers = (json_t *)mpt_run_model_json(o->model, &rs->data);
    char *s_layers = dump(layers ? layers : json_array());
    mpt_checkpoint_meta meta[] = {
        {"format", FORMAT_TAG},
        {"mptrain", MPT_VERSION},
        {"model", o->model},
        {"precision", mpt_precision_name(o->precision)},
        {"config", s_cfg},
        {"state", s_state},
        {"scaler", s_scaler},
        {"rng", s_rng},
        {"data_fingerprint", s_fingerprint},
        {"precision_map", s_map},
        {"data", s_data},            /* the data shape the network was built for */
        {"model_layers", s_layers},  /* the network, layer by layer with its shapes: a PyTorch module rebuilds it
                                        (docs/checkpoints.md) */
        {"fp8", s_fp8}, /* last: left out when the run has no FP8 tensors */
    };
    const int n_meta = (int)(sizeof meta / sizeof meta[0]) - (t->g->n_fp8 ? 0 : 1);
    char tmp[300];
    mpt_status s = s_cfg && s_state && s_scaler && s_rng && s_map && s_fp8 && s_data && s_layers && s_fingerprint
                       ? mpt_checkpoint_write_temp_at(od->fd, od->path, MPT_CLI_CHECKPOINT_FILE, e, n, meta, n_meta, tmp,
                                                      sizeof tmp)
                       : mpt_errorf(MPT_ERR_NOMEM, "%s: cannot build the checkpoint's metadata", path);
    if (s == MPT_OK) s = mpt_outdir_txn_add(tx, tmp, MPT_CLI_CHECKPOINT_FILE);
    free(s_fp8);
    free(s_data);
    free(s_layers);
    free(s_fingerprint);
    free(s_cfg);
    free(s_state);
    free(s_scaler);
    free(s_rng);
    free(s_map);
    free(host);
    free(e);
    free(names);
    return s;
}

/* ---- reading ----------------------------------------------------------------------------------------------- */

static mpt_status meta_json(const mpt_checkpoint *c, const char *key, json_t **out) {
    const char *v = mpt_checkpoint_meta_get(c, key);
    if (!v)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata has no \"%s\" (not a checkpoint written by mptrain train)",
                          mpt_checkpoint_path(c), key);
    json_error_t err;
    *out = json_loads(v, JSON_REJECT_DUPLICATES, &err);
    if (!*out || !json_is_object(*out)) {
        if (*out) json_decref(*out);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\" is not a JSON object (%s)", mpt_checkpoint_path(c), key,
                          err.text);
    }
    return MPT_OK;
}

/* An FP32 value in [lo, hi]: a JSON number that a float holds exactly (the writer prints floats with 17
 * digits, which reads back as the same float), so 1e39 or 0.1 are rejected rather than rounded. */
static mpt_status get_f32(const mpt_checkpoint *c, json_t *obj, const char *what, const char *key, double lo,
                          double hi, float *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_number(v))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\" has no number \"%s\"", mpt_checkpoint_path(c), what, key);
    double d = json_number_value(v);
    float f = (float)d;
    if (!isfinite(f) || (double)f != d)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\": %s %.17g is not a finite FP32 value (as the run "
                          "keeps it)", mpt_checkpoint_path(c), what, key, d);
    if (!(d >= lo && d <= hi))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\": %s %.9g is outside [%g, %g]", mpt_checkpoint_path(c),
                          what, key, d, lo, hi);
    *out = f;
    return MPT_OK;
}

/* A double in [lo, hi] (finite). */
static mpt_status get_f64(const mpt_checkpoint *c, json_t *obj, const char *what, const char *key, double lo,
                          double hi, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_number(v))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\" has no number \"%s\"", mpt_checkpoint_path(c), what, key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\": %s %.17g is outside [%g, %g]", mpt_checkpoint_path(c),
                          what, key, d, lo, hi);
    *out = d;
    return MPT_OK;
}

/* An integer in [lo, hi]. */
static mpt_status get_int(const mpt_checkpoint *c, json_t *obj, const char *what, const char *key, int64_t lo,
                          int64_t hi, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_integer(v))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\" has no integer \"%s\"", mpt_checkpoint_path(c), what,
                          key);
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\": %s %lld is outside [%lld, %lld]",
                          mpt_checkpoint_path(c), what, key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return MPT_OK;
}

/* Largest iteration a checkpoint may record: the scaler counts steps in int32. */
#define MAX_ITERATION ((int64_t)INT32_MAX - 1)
/* Largest row count: the loader indexes rows with int32. */
#define MAX_ROWS ((int64_t)INT32_MAX)

/* "model" and "precision" (the quick-look copies) must say what the config says. */
static mpt_status check_summary_meta(const mpt_checkpoint *c, const mpt_cli_opts *o) {
    const char *m = mpt_checkpoint_meta_get(c, "model"), *p = mpt_checkpoint_meta_get(c, "precision");
    const char *pn = mpt_precision_name(o->precision);
    if (!m || strcmp(m, o->model) != 0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"model\" is '%s' but the config says '%s'",
                          mpt_checkpoint_path(c), m ? m : "(absent)", o->model);
    if (!p || strcmp(p, pn) != 0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"precision\" is '%s' but the config says '%s'",
                          mpt_checkpoint_path(c), p ? p : "(absent)", pn);
    return MPT_OK;
}

/* One seed of "rng", v (a decimal string; path names it in the message), must equal want. */
static mpt_status check_seed_text(const mpt_checkpoint *c, json_t *v, const char *path, uint64_t want) {
    char w[32];
    snprintf(w, sizeof w, "%llu", (unsigned long long)want);
    if (v && json_is_string(v) && strcmp(json_string_value(v), w) == 0) return MPT_OK;
    return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"rng\": %s is %s%s%s, but the config's seed gives %s",
                      mpt_checkpoint_path(c), path, v && json_is_string(v) ? "'" : "",
                      v ? (json_is_string(v) ? json_string_value(v) : "not a string") : "absent",
                      v && json_is_string(v) ? "'" : "", w);
}

/* "rng" shows a reader the generators, which the run derives from the config's seed (the positions follow
 * from the state): its seeds must be those, or the file was edited or corrupted. */
static mpt_status check_rng(const mpt_checkpoint *c, const mpt_cli_opts *o) {
    json_t *rng = NULL;
    MPT_TRY(meta_json(c, "rng", &rng));
    static const struct {
        const char *key, *path;
        mpt_rng_stream stream;
    } streams[] = {{"init", "init.stream_seed", MPT_RNG_INIT},
                   {"shuffle", "shuffle.stream_seed", MPT_RNG_SHUFFLE},
                   {"dropout", "dropout.stream_seed", MPT_RNG_DROPOUT},
                   {"validation_split", "validation_split.stream_seed", MPT_RNG_SPLIT}};
    mpt_status s = check_seed_text(c, json_object_get(rng, "seed"), "seed", o->seed);
    for (size_t i = 0; i < sizeof streams / sizeof streams[0] && s == MPT_OK; i++) /* json_object_get(NULL) is NULL */
        s = check_seed_text(c, json_object_get(json_object_get(rng, streams[i].key), "stream_seed"), streams[i].path,
                            mpt_rng_stream_seed(o->seed, streams[i].stream));
    json_decref(rng);
    return s;
}

/* A CRC-32 written as 8 lowercase hex digits, into *out. */
static int parse_crc(json_t *v, uint32_t *out) {
    const char *t = json_is_string(v) ? json_string_value(v) : "";
    if (strlen(t) != 8 || strspn(t, "0123456789abcdef") != 8) return 0;
    *out = (uint32_t)strtoul(t, NULL, 16);
    return 1;
}

/* The data fingerprint ("data_fingerprint"; absent from older checkpoints: rs->fp_known 0). */
static mpt_status read_fingerprint(const mpt_checkpoint *c, mpt_run_state *rs) {
    rs->fp_known = 0;
    if (!mpt_checkpoint_meta_get(c, "data_fingerprint")) return MPT_OK;
    json_t *j = NULL;
    MPT_TRY(meta_json(c, "data_fingerprint", &j));
    int64_t n_train = 0, n_test = 0;
    mpt_status s = get_int(c, j, "data_fingerprint", "train_images", 1, MAX_ROWS, &n_train);
    if (s == MPT_OK) s = get_int(c, j, "data_fingerprint", "test_images", 1, MAX_ROWS, &n_test);
    if (s == MPT_OK && (!parse_crc(json_object_get(j, "train_crc32"), &rs->fp.train_crc32) ||
                        !parse_crc(json_object_get(j, "test_crc32"), &rs->fp.test_crc32)))
        s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"data_fingerprint\": train_crc32 and test_crc32 must be 8 lowercase "
                       "hex digits", mpt_checkpoint_path(c));
    json_decref(j);
    if (s != MPT_OK) return s;
    if (n_train < rs->n_train + rs->n_val)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"data_fingerprint\": train_images %lld, fewer than the %lld the "
                          "state trained on and held out", mpt_checkpoint_path(c), (long long)n_train,
                          (long long)(rs->n_train + rs->n_val));
    rs->fp.n_train = n_train;
    rs->fp.n_test = n_test;
    rs->fp_known = 1;
    return MPT_OK;
}

static mpt_status read_state(const mpt_checkpoint *c, const mpt_cli_opts *o, mpt_run_state *rs) {
    json_t *state = NULL;
    MPT_TRY(meta_json(c, "state", &state));
    int64_t best_epoch = 0, threads = 0, ranks = 1;
    mpt_status s = get_int(c, state, "state", "iteration", 0, MAX_ITERATION, &rs->iteration);
    if (s == MPT_OK) s = get_int(c, state, "state", "epoch", 0, MPT_CLI_MAX_EPOCHS, &rs->epoch);
    if (s == MPT_OK) s = get_int(c, state, "state", "batch", 0, MAX_ROWS, &rs->batch);
    if (s == MPT_OK) s = get_f32(c, state, "state", "mean", 0.0, 1.0, &rs->mean);
    if (s == MPT_OK) s = get_f32(c, state, "state", "inv_std", FLT_MIN, FLT_MAX, &rs->inv_std);
    if (s == MPT_OK) s = get_int(c, state, "state", "n_train", 1, MAX_ROWS, &rs->n_train);
    if (s == MPT_OK) s = get_int(c, state, "state", "n_val", 0, rs->n_train - 1, &rs->n_val); /* some to train on */
    if (s == MPT_OK) s = get_f64(c, state, "state", "best_test_acc", 0.0, 1.0, &rs->best_test_acc);
    if (s == MPT_OK) s = get_int(c, state, "state", "best_epoch", 0, rs->epoch + 1, &best_epoch);
    /* written since the resume fixes of issue 13; absent from older checkpoints */
    if (s == MPT_OK && json_object_get(state, "epoch_loss_n"))
        s = get_int(c, state, "state", "epoch_loss_n", 0, rs->batch, &rs->epoch_loss_n);
    if (s == MPT_OK && json_object_get(state, "epoch_loss_sum"))
        s = get_f64(c, state, "state", "epoch_loss_sum", 0.0, DBL_MAX, &rs->epoch_loss_sum);
    if (s == MPT_OK && json_object_get(state, "threads"))
        s = get_int(c, state, "state", "threads", 0, 4096, &threads);
    /* absent before data-parallel training: one process, FP32 */
    if (s == MPT_OK && json_object_get(state, "ranks")) s = get_int(c, state, "state", "ranks", 1, 1 << 20, &ranks);
    /* the run's id (tools/run.c): absent before runs had one; the resumed run then draws a new one */
    json_t *id = json_object_get(state, "run_id");
    rs->run_id[0] = '\0';
    if (s == MPT_OK && id) {
        const char *v = json_is_string(id) ? json_string_value(id) : "";
        int ok = strlen(v) == 16;
        for (int i = 0; ok && i < 16; i++) ok = (v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f');
        if (ok) snprintf(rs->run_id, sizeof rs->run_id, "%s", v);
        else s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"state\": run_id is not 16 lowercase hex digits",
                            mpt_checkpoint_path(c));
    }
    json_t *wire = json_object_get(state, "grad_comm");
    rs->grad_comm = MPT_GRAD_COMM_FP32;
    if (s == MPT_OK && wire && (!json_is_string(wire) || mpt_grad_comm_parse(json_string_value(wire), &rs->grad_comm) != 0))
        s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"state\": grad_comm is not fp32, bf16 or fp16",
                       mpt_checkpoint_path(c));
    json_decref(state);
    if (s == MPT_OK) s = read_fingerprint(c, rs);
    if (s != MPT_OK) return s;
    rs->best_epoch = (int)best_epoch;
    rs->threads = (int)threads;
    rs->ranks = (int)ranks;
    if (!o->standardize && (rs->mean != 0.0f || rs->inv_std != 1.0f))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"state\": mean %g and inv_std %g, but a run without "
                          "--standardize uses 0 and 1", mpt_checkpoint_path(c), (double)rs->mean, (double)rs->inv_std);
    if (rs->epoch_loss_n == 0 && rs->epoch_loss_sum != 0.0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"state\": epoch_loss_sum %g with epoch_loss_n 0",
                          mpt_checkpoint_path(c), rs->epoch_loss_sum);
    return MPT_OK;
}

/* "data": the shape the network was built for (absent before issue 33: Fashion-MNIST's, has_data 0). The model must
 * plan on it: a checkpoint whose spec does not fit its own data was not written by mptrain train. */
static mpt_status read_data(const mpt_checkpoint *c, const mpt_cli_opts *o, mpt_run_state *rs) {
    rs->has_data = 0;
    rs->data = (mpt_model_input){1, 28, 28, MPT_MNIST_N_CLASSES};
    if (!mpt_checkpoint_meta_get(c, "data")) return MPT_OK;
    json_t *j = NULL;
    MPT_TRY(meta_json(c, "data", &j));
    int64_t ch = 0, h = 0, w = 0, k = 0;
    mpt_status s = get_int(c, j, "data", "channels", 1, 1 << 16, &ch);
    if (s == MPT_OK) s = get_int(c, j, "data", "height", 1, 1 << 20, &h);
    if (s == MPT_OK) s = get_int(c, j, "data", "width", 1, 1 << 20, &w);
    if (s == MPT_OK) s = get_int(c, j, "data", "classes", 2, MPT_MNIST_MAX_CLASSES, &k);
    json_decref(j);
    if (s != MPT_OK) return s;
    rs->data = (mpt_model_input){(int)ch, (int)h, (int)w, (int)k};
    rs->has_data = 1;
    mpt_model_plan *p = malloc(sizeof *p);
    if (!p) return mpt_errorf(MPT_ERR_NOMEM, "out of memory");
    s = mpt_model_plan_make(o->model, &rs->data, p);
    free(p);
    if (s != MPT_OK) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", mpt_last_error());
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"config\" model does not fit its \"data\": %s",
                          mpt_checkpoint_path(c), msg);
    }
    return MPT_OK;
}

static mpt_status read_config(const mpt_checkpoint *c, mpt_cli_opts *o, mpt_run_state *rs) {
    const char *fmt = mpt_checkpoint_meta_get(c, "format");
    if (!fmt || strcmp(fmt, FORMAT_TAG) != 0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"format\" is '%s', expected '%s' (a checkpoint of mptrain train)",
                          mpt_checkpoint_path(c), fmt ? fmt : "(absent)", FORMAT_TAG);
    json_t *cfg = NULL;
    MPT_TRY(meta_json(c, "config", &cfg));
    mpt_status s = MPT_OK;
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END && s == MPT_OK; id++) {
        if (!mpt_cli_opt_recorded(id)) continue;
        const char *name = mpt_cli_opt_name(id);
        json_t *v = json_object_get(cfg, name);
        if (!v && mpt_cli_opt_scope(id) == MPT_SCOPE_MATH_OPTIONAL) { /* older checkpoint: the default, which is what
                                                                          it trained with */
            if (id == MPT_OPT_TF32_MATMUL) o->tf32_matmul = mpt_mode_info(o->precision)->tf32_default;
            if (id == MPT_OPT_TF32_CONV) o->tf32_conv = mpt_mode_info(o->precision)->tf32_default;
            o->given[id - MPT_OPT_FIRST] = 1;
            continue;
        }
        if (!v || !json_is_string(v)) {
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"config\" has no string \"%s\"", mpt_checkpoint_path(c), name);
            break;
        }
        const char *text = json_string_value(v);
        if (mpt_cli_opt_takes_value(id)) {
            s = mpt_cli_apply(o, id, text);
        } else { /* flags without a value are recorded on / off */
            if (strcmp(text, "on") == 0) s = mpt_cli_apply(o, id, NULL);
            else if (strcmp(text, "off") != 0) s = mpt_errorf(MPT_ERR_ARG, "--%s: expected on or off, found '%s'", name, text);
        }
        if (s != MPT_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", mpt_last_error());
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"config\": %s", mpt_checkpoint_path(c), msg);
        }
        /* Recorded math is final: it overrides the defaults that mpt_cli_resolve would fill in (the run's length
         * may still change: --epochs on the command line) */
        if (mpt_cli_opt_scope(id) != MPT_SCOPE_LENGTH) o->given[id - MPT_OPT_FIRST] = 1;
    }
    json_decref(cfg);
    if (s != MPT_OK) return s;
    if (mpt_cli_check(o) != MPT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mpt_last_error());
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"config\": %s", mpt_checkpoint_path(c), msg);
    }
    MPT_TRY(check_summary_meta(c, o));
    MPT_TRY(check_rng(c, o));
    MPT_TRY(read_state(c, o, rs));
    return read_data(c, o, rs);
}

mpt_status mpt_run_checkpoint_read_config(const char *path, mpt_cli_opts *o, mpt_run_state *rs) {
    mpt_checkpoint *c = NULL;
    MPT_TRY(mpt_checkpoint_open(path, NULL, 0, &c));
    memset(rs, 0, sizeof *rs);
    mpt_status s = read_config(c, o, rs);
    mpt_checkpoint_close(&c);
    return s;
}

mpt_status mpt_run_checkpoint_data_load(mpt_cli_data *cd, const char *checkpoint, const mpt_run_state *rs,
                                        const char *dir, int64_t limit_train, int64_t limit_test,
                                        mpt_idx_layout layout) {
    mpt_status ls = mpt_cli_data_load(cd, dir, limit_train, limit_test, rs->data.classes, layout);
    if (ls == MPT_ERR_FORMAT) { /* a label beyond the checkpoint's classes: most likely another dataset */
        char why[1024];
        snprintf(why, sizeof why, "%s", mpt_last_error());
        return mpt_errorf(ls, "--checkpoint %s: its network has %d classes, and --data %s does not fit it (is it the "
                          "data the checkpoint was trained on?): %s", checkpoint, rs->data.classes, dir, why);
    }
    MPT_TRY(ls);
    const mpt_model_input in = mpt_cli_data_input(&cd->d);
    if (memcmp(&in, &rs->data, sizeof in) == 0) return MPT_OK;
    char classes[64] = ""; /* the data's class count is the checkpoint's unless a label is beyond it */
    if (in.classes != rs->data.classes) snprintf(classes, sizeof classes, " and %d classes", in.classes);
    mpt_status s = mpt_errorf(MPT_ERR_ARG, "--checkpoint %s: its network was built for %d x %d images with %d "
                              "channel(s) and %d classes, --data %s holds %d x %d images with %d channel(s)%s", checkpoint,
                              rs->data.height, rs->data.width, rs->data.channels, rs->data.classes, dir, in.height,
                              in.width, in.channels, classes);
    mpt_cli_data_free(cd);
    return s;
}

int mpt_run_checkpoint_run_id(const char *path, char id[17]) {
    id[0] = '\0';
    mpt_checkpoint *c = NULL;
    if (mpt_checkpoint_open(path, NULL, 0, &c) != MPT_OK) return 0;
    const char *state = mpt_checkpoint_meta_get(c, "state");
    json_t *j = state ? json_loads(state, 0, NULL) : NULL;
    json_t *v = j ? json_object_get(j, "run_id") : NULL;
    if (json_is_string(v) && strlen(json_string_value(v)) == 16) snprintf(id, 17, "%s", json_string_value(v));
    json_decref(j);
    mpt_checkpoint_close(&c);
    return id[0] != '\0';
}

/* The loss scaler as it stands between two steps (mpt_scaler_update_fields has just run), checked against
 * the trainer's settings and the iteration. */
static mpt_status read_scaler(const mpt_checkpoint *c, const mpt_train_config *cfg, int64_t iteration,
                              mpt_scaler_state *st) {
    json_t *j = NULL;
    MPT_TRY(meta_json(c, "scaler", &j));
    memset(st, 0, sizeof *st);
    int64_t gt = 0, hl = 0, taken = 0, skipped = 0, floor_hits = 0, nonfinite = 0;
    const mpt_scaler_params *p = &cfg->scaler;
    int dynamic = cfg->loss_scaling == MPT_LOSS_SCALE_DYNAMIC;
    mpt_status s = get_f32(c, j, "scaler", "scale", FLT_MIN, FLT_MAX, &st->scale);
    if (s == MPT_OK) s = get_f32(c, j, "scaler", "inv_scale", 0.0, FLT_MAX, &st->inv_scale);
    if (s == MPT_OK) s = get_f32(c, j, "scaler", "found_inf", 0.0, 0.0, &st->found_inf);
    if (s == MPT_OK) s = get_f32(c, j, "scaler", "grad_mul", 1.0, 1.0, &st->grad_mul);
    if (s == MPT_OK) s = get_f32(c, j, "scaler", "sumsq", 0.0, 0.0, &st->sumsq);
    if (s == MPT_OK) s = get_int(c, j, "scaler", "growth_tracker", 0, dynamic ? p->growth_interval - 1 : 0, &gt);
    if (s == MPT_OK) s = get_int(c, j, "scaler", "hysteresis_left", 1, p->hysteresis, &hl);
    if (s == MPT_OK) s = get_int(c, j, "scaler", "steps_taken", 0, iteration, &taken);
    if (s == MPT_OK) s = get_int(c, j, "scaler", "steps_skipped", 0, iteration, &skipped);
    if (s == MPT_OK) s = get_int(c, j, "scaler", "floor_hits", 0, skipped, &floor_hits);
    if (s == MPT_OK && json_object_get(j, "steps_nonfinite")) /* absent before --nonfinite existed */
        s = get_int(c, j, "scaler", "steps_nonfinite", 0, iteration, &nonfinite);
    json_decref(j);
    if (s != MPT_OK) return s;
    const char *path = mpt_checkpoint_path(c);
    volatile float one = 1.0f; /* the division in FP32, as mpt_scaler_update_fields does it */
    if (st->inv_scale != one / st->scale)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"scaler\": inv_scale %.9g is not 1/scale in FP32 (scale %.9g "
                          "gives %.9g)", path, (double)st->inv_scale, (double)st->scale, (double)(one / st->scale));
    /* Every iteration is either taken or skipped; a step applied with non-finite gradients (--nonfinite apply)
     * is a taken step (the optimizer ran, as torch.optim's step() without a GradScaler), counted again in
     * steps_nonfinite; only the skip mode skips (mpt_scaler_update_fields). */
    if (taken + skipped != iteration)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"scaler\": steps_taken %lld + steps_skipped %lld should "
                          "equal the iteration %lld", path, (long long)taken, (long long)skipped,
                          (long long)iteration);
    const int apply = cfg->nonfinite == MPT_NONFINITE_APPLY;
    if (apply ? skipped != 0 : nonfinite != 0) /* so steps_nonfinite <= iteration == steps_taken with apply */
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"scaler\": %s %lld, but the config's --nonfinite %s never "
                          "%s a step", path, apply ? "steps_skipped" : "steps_nonfinite",
                          (long long)(apply ? skipped : nonfinite), mpt_nonfinite_mode_name(cfg->nonfinite),
                          apply ? "skips" : "applies non-finite gradients to");
    if (!dynamic && st->scale != cfg->init_scale)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"scaler\": scale %.9g, but the config's fixed loss scale is "
                          "%.9g", path, (double)st->scale, (double)cfg->init_scale);
    st->growth_tracker = (int32_t)gt;
    st->hysteresis_left = (int32_t)hl;
    st->steps_taken = (int32_t)taken;
    st->steps_skipped = (int32_t)skipped;
    st->floor_hits = (int32_t)floor_hits;
    st->steps_nonfinite = (int32_t)nonfinite;
    return MPT_OK;
}

/* "fp8" must list the graph's FP8 tensors, in order, with their formats (the rows of the state tensors). */
static mpt_status check_fp8_meta(const mpt_checkpoint *c, const mpt_graph *g) {
    const char *v = mpt_checkpoint_meta_get(c, "fp8");
    json_error_t err;
    json_t *a = v ? json_loads(v, JSON_REJECT_DUPLICATES, &err) : NULL;
    mpt_status s = MPT_OK;
    if (!a || !json_is_array(a) || (int)json_array_size(a) != g->n_fp8)
        s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"fp8\" is %s; expected a list of the run's %d FP8 tensors",
                       mpt_checkpoint_path(c), !v ? "absent" : !a ? "not JSON" : "of another length", g->n_fp8);
    for (int i = 0; s == MPT_OK && i < g->n_fp8; i++) {
        json_t *o = json_array_get(a, (size_t)i);
        const char *tn = json_string_value(json_object_get(o, "tensor")), *fm = json_string_value(json_object_get(o, "format"));
        if (!tn || !fm || strcmp(tn, g->fp8[i].name) != 0 || strcmp(fm, mpt_dtype_name(g->fp8[i].fmt)) != 0)
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"fp8\" entry %d is %s %s; the run's is %s %s",
                           mpt_checkpoint_path(c), i, tn ? tn : "(no tensor)", fm ? fm : "(no format)", g->fp8[i].name,
                           mpt_dtype_name(g->fp8[i].fmt));
    }
    json_decref(a);
    return s;
}

mpt_status mpt_run_checkpoint_load(const char *path, mpt_trainer *t) {
    mpt_checkpoint_tensor *e;
    char *names;
    int n = trainer_entries(t, &e, &names);
    mpt_checkpoint *c = NULL;
    mpt_status s = mpt_checkpoint_open(path, e, n, &c);
    if (s != MPT_OK) {
        free(e);
        free(names);
        return s;
    }
    mpt_backend *be = t->be;
    size_t max_b = 0;
    for (int k = 0; k < n; k++) {
        size_t b = (size_t)mpt_checkpoint_tensor_nbytes(&e[k]);
        if (b > max_b) max_b = b;
    }
    void *host = malloc(max_b ? max_b : 1);
    MPT_ASSERT(host != NULL);
    float *fp8_state = NULL, *fp8_hist = NULL;
    if (t->g->n_fp8) s = check_fp8_meta(c, t->g);
    for (int k = 0; k < n && s == MPT_OK; k++) {
        size_t b = (size_t)mpt_checkpoint_tensor_nbytes(&e[k]);
        if (is_fp8_entry(&e[k])) { /* checked and written by mpt_fp8_state_from_host below */
            float **dst = strcmp(e[k].name, FP8_STATE_NAME) == 0 ? &fp8_state : &fp8_hist;
            *dst = malloc(b);
            MPT_ASSERT(*dst != NULL);
            s = mpt_checkpoint_read(c, e[k].name, *dst, b);
            continue;
        }
        s = mpt_checkpoint_read(c, e[k].name, host, b);
        if (s != MPT_OK) break;
        int64_t count = b / mpt_dtype_size(e[k].dtype);
        size_t len = strlen(e[k].name);
        int second_moment = len > 11 && strcmp(e[k].name + len - 11, ":exp_avg_sq") == 0;
        /* a running variance (batch norm's buffer) is a mean of variances: never negative either */
        second_moment |= len > 12 && strcmp(e[k].name + len - 12, ".running_var") == 0;
        for (int64_t q = 0; q < count; q++) {
            float w = mpt_load_f32(host, e[k].dtype, q);
            if (!isfinite(w)) {
                s = mpt_errorf(MPT_ERR_NONFINITE, "%s: tensor %s holds a non-finite value at element %lld", path,
                               e[k].name, (long long)q);
                break;
            }
            if (second_moment && w < 0.0f) {
                s = mpt_errorf(MPT_ERR_FORMAT, "%s: tensor %s holds %g at element %lld; a running mean of squares "
                               "(Adam's second moment, a running variance) is never negative", path, e[k].name,
                               (double)w, (long long)q);
                break;
            }
        }
        if (s != MPT_OK) break;
        be->from_host(be, entry_tensor(t, k)->data, host, b);
        be->synchronize(be); /* host is reused for the next tensor */
    }
    mpt_scaler_state st;
    mpt_run_state rs;
    if (s == MPT_OK) {
        mpt_cli_opts scratch;
        mpt_cli_opts_default(&scratch);
        s = read_config(c, &scratch, &rs);
    }
    if (s == MPT_OK) s = read_scaler(c, &t->cfg, rs.iteration, &st);
    if (s == MPT_OK && fp8_state) s = mpt_fp8_state_from_host(t->g, fp8_state, fp8_hist, path);
    free(fp8_state);
    free(fp8_hist);
    if (s == MPT_OK) {
        st.iteration = rs.iteration; /* the backend's counter (LR, dropout, stochastic rounding) */
        be->from_host(be, t->scaler, &st, sizeof st);
        mpt_trainer_refresh_working(t); /* RNE copies, and QAT's fake-quantized weights */
        t->iteration = rs.iteration;
        be->synchronize(be);
    }
    free(host);
    mpt_checkpoint_close(&c);
    free(e);
    free(names);
    return s;
}
