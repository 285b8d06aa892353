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
 * Metadata (string values; the JSON ones are JSON text):
 *   "format"        "mptrain-run-1"
 *   "mptrain"       the version that wrote it
 *   "model", "precision"   for a quick look
 *   "config"        JSON object: every recorded setting as its canonical text (tools/opts.c), e.g.
 *                   {"model": "mlp", "lr": "0.001", "loss-scale": "dynamic:65536", ...}, plus "epochs"
 *   "state"         JSON object: iteration, epoch, batch (position inside the epoch), mean, inv_std,
 *                   n_train, n_val, best_test_acc, best_epoch, ranks and grad_comm (data-parallel: the
 *                   number of MPI ranks and their wire dtype; absent in older checkpoints: 1 and fp32)
 *   "scaler"        JSON object: the loss scaler (mpt_scaler_state): scale, growth_tracker, hysteresis_left,
 *                   steps_taken, steps_skipped, floor_hits, ...
 *   "rng"           JSON object: the generator and the seed of each stream with its position, so a reader can
 *                   see where shuffling and dropout continue (decimal strings: seeds are 64-bit)
 *   "precision_map" JSON array: each node's dtypes and math mode
 * Floats in the JSON are written with 17 significant digits, which gives back the same float exactly.
 *
 * Resuming is exact because everything a step depends on is here or is derived from it: masters and
 * optimizer state (bytes), the scaler (exact floats), the iteration (LR schedule, dropout offsets, fault
 * injection), the epoch and the position in it (the loader recomputes epoch e's shuffle from (seed, e)).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/amp/master.h"
#include "engine/checkpoint.h"
#include "engine/rng.h"
#include "mpt_config.h"
#include "tools/cli.h"

#define FORMAT_TAG "mptrain-run-1"

/* The recorded settings, in the order they are written. */
static const mpt_opt_id recorded[] = {
    MPT_OPT_MODEL,        MPT_OPT_PRECISION,   MPT_OPT_OPTIMIZER,       MPT_OPT_LR,        MPT_OPT_MOMENTUM,
    MPT_OPT_NESTEROV,     MPT_OPT_WEIGHT_DECAY, MPT_OPT_BETA1,          MPT_OPT_BETA2,     MPT_OPT_EPS,
    MPT_OPT_BATCH_SIZE,   MPT_OPT_SEED,        MPT_OPT_LOSS_SCALE,      MPT_OPT_GROWTH_INTERVAL,
    MPT_OPT_LR_SCHEDULE,  MPT_OPT_WARMUP_STEPS, MPT_OPT_MIN_LR,         MPT_OPT_STEP_SIZE, MPT_OPT_GAMMA,
    MPT_OPT_CLIP_NORM,    MPT_OPT_LIMIT_TRAIN, MPT_OPT_VAL_SPLIT,       MPT_OPT_STANDARDIZE,
    MPT_OPT_INJECT_NONFINITE, MPT_OPT_EPOCHS,
    /* issue #10's switches: a checkpoint written before them lacks these keys and reads as their defaults */
    MPT_OPT_MASTER_WEIGHTS, MPT_OPT_UPDATE_ROUNDING, MPT_OPT_OPTIMIZER_STATE, MPT_OPT_NONFINITE,
    MPT_OPT_TF32_MATMUL,  MPT_OPT_TF32_CONV,  MPT_OPT_SCALER,          MPT_OPT_GROWTH_FACTOR,
    MPT_OPT_BACKOFF_FACTOR, MPT_OPT_HYSTERESIS, MPT_OPT_SCALE_FLOOR,  MPT_OPT_SCALE_CEILING,
};
#define FIRST_OPTIONAL 25 /* index in recorded[] of MPT_OPT_MASTER_WEIGHTS */
#define N_RECORDED ((int)(sizeof recorded / sizeof recorded[0]))

/* The tensors of a trainer as checkpoint entries (data pointers unset). Returns the count; *names holds
 * the strings (free both with free()). */
static int trainer_entries(const mpt_trainer *t, mpt_checkpoint_tensor **out, char **names) {
    int cap = 3 * t->n_params;
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
    *out = e;
    *names = nm;
    return n;
}

/* The backend tensor holding entry k's FP32 data: the master for parameters, else the state tensor. */
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
    return NULL;
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

static json_t *rng_json(const mpt_trainer *t, const mpt_cli_opts *o, const mpt_cli_run_state *rs) {
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
    json_object_set_new(drop, "elements_per_step", u64_json(t->g->dropout_elems));
    json_object_set_new(drop, "offset", u64_json((uint64_t)t->iteration * t->g->dropout_elems));
    json_object_set_new(r, "dropout", drop);
    json_t *split = json_object();
    json_object_set_new(split, "stream_seed", u64_json(mpt_rng_stream_seed(o->seed, MPT_RNG_SPLIT)));
    json_object_set_new(r, "validation_split", split);
    return r;
}

static char *dump(json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(j);
    MPT_ASSERT(s != NULL);
    return s;
}

mpt_status mpt_cli_checkpoint_save(const char *path, mpt_trainer *t, const mpt_cli_opts *o,
                                   const mpt_cli_run_state *rs) {
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
    for (int k = 0; k < n; k++) {
        size_t b = (size_t)mpt_checkpoint_tensor_nbytes(&e[k]);
        be->to_host(be, host + off, entry_tensor(t, k)->data, b);
        e[k].data = host + off;
        off += b;
    }
    mpt_scaler_state st;
    be->to_host(be, &st, t->scaler, sizeof st);

    json_t *cfg = json_object();
    char buf[96];
    for (int i = 0; i < N_RECORDED; i++)
        json_object_set_new(cfg, mpt_cli_opt_name(recorded[i]), json_string(mpt_cli_format(o, recorded[i], buf, sizeof buf)));
    json_t *state = json_pack("{s:I, s:I, s:I, s:f, s:f, s:I, s:I, s:f, s:i, s:i, s:s}", "iteration", (json_int_t)rs->iteration,
                              "epoch", (json_int_t)rs->epoch, "batch", (json_int_t)rs->batch, "mean",
                              (double)rs->mean, "inv_std", (double)rs->inv_std, "n_train", (json_int_t)rs->n_train,
                              "n_val", (json_int_t)rs->n_val, "best_test_acc", rs->best_test_acc, "best_epoch",
                              rs->best_epoch, "ranks", rs->ranks < 1 ? 1 : rs->ranks, "grad_comm",
                              mpt_grad_comm_name(rs->grad_comm));
    char *s_cfg = dump(cfg);
    char *s_state = dump(state);
    char *s_scaler = dump(scaler_json(&st));
    char *s_rng = dump(rng_json(t, o, rs));
    char *s_map = dump((json_t *)mpt_cli_precision_map_json(t->g));
    mpt_checkpoint_meta meta[] = {
        {"format", FORMAT_TAG},
        {"mptrain", MPT_VERSION},
        {"model", o->model},
        {"precision", mpt_precision_name(o->precision)},
        {"config", s_cfg},
        {"state", s_state},
        {"scaler", s_scaler},
        {"rng", s_rng},
        {"precision_map", s_map},
    };
    mpt_status s = mpt_checkpoint_save(path, e, n, meta, (int)(sizeof meta / sizeof meta[0]));
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

static mpt_status get_num(const mpt_checkpoint *c, json_t *obj, const char *what, const char *key, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_number(v))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\" has no number \"%s\"", mpt_checkpoint_path(c), what, key);
    *out = json_number_value(v);
    return MPT_OK;
}

static mpt_status get_int(const mpt_checkpoint *c, json_t *obj, const char *what, const char *key, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_integer(v))
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"%s\" has no integer \"%s\"", mpt_checkpoint_path(c), what,
                          key);
    *out = (int64_t)json_integer_value(v);
    return MPT_OK;
}

static mpt_status read_config(const mpt_checkpoint *c, mpt_cli_opts *o, mpt_cli_run_state *rs) {
    const char *fmt = mpt_checkpoint_meta_get(c, "format");
    if (!fmt || strcmp(fmt, FORMAT_TAG) != 0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"format\" is '%s', expected '%s' (a checkpoint of mptrain train)",
                          mpt_checkpoint_path(c), fmt ? fmt : "(absent)", FORMAT_TAG);
    json_t *cfg = NULL, *state = NULL;
    MPT_ASSERTF(recorded[FIRST_OPTIONAL] == MPT_OPT_MASTER_WEIGHTS, "recorded[]: FIRST_OPTIONAL is out of date");
    MPT_TRY(meta_json(c, "config", &cfg));
    mpt_status s = MPT_OK;
    for (int i = 0; i < N_RECORDED && s == MPT_OK; i++) {
        const char *name = mpt_cli_opt_name(recorded[i]);
        json_t *v = json_object_get(cfg, name);
        if (!v && i >= FIRST_OPTIONAL) { /* older checkpoint: the default, which is what it trained with */
            if (recorded[i] == MPT_OPT_TF32_MATMUL) o->tf32_matmul = o->precision == MPT_PRECISION_TF32;
            if (recorded[i] == MPT_OPT_TF32_CONV) o->tf32_conv = o->precision == MPT_PRECISION_TF32;
            o->given[recorded[i] - MPT_OPT_FIRST] = 1;
            continue;
        }
        if (!v || !json_is_string(v)) {
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"config\" has no string \"%s\"", mpt_checkpoint_path(c), name);
            break;
        }
        const char *text = json_string_value(v);
        if (recorded[i] == MPT_OPT_NESTEROV || recorded[i] == MPT_OPT_STANDARDIZE) { /* flags without a value */
            if (strcmp(text, "on") == 0) s = mpt_cli_apply(o, recorded[i], NULL);
            else if (strcmp(text, "off") != 0) s = mpt_errorf(MPT_ERR_ARG, "--%s: expected on or off, found '%s'", name, text);
        } else {
            s = mpt_cli_apply(o, recorded[i], text);
        }
        if (s != MPT_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", mpt_last_error());
            s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"config\": %s", mpt_checkpoint_path(c), msg);
        }
        /* Recorded values are final: they override the defaults that mpt_cli_resolve would fill in. */
        if (recorded[i] != MPT_OPT_EPOCHS) o->given[recorded[i] - MPT_OPT_FIRST] = 1;
    }
    json_decref(cfg);
    if (s != MPT_OK) return s;
    MPT_TRY(meta_json(c, "state", &state));
    double mean = 0, inv_std = 1, best = 0;
    int64_t best_epoch = 0;
    if (s == MPT_OK) s = get_int(c, state, "state", "iteration", &rs->iteration);
    if (s == MPT_OK) s = get_int(c, state, "state", "epoch", &rs->epoch);
    if (s == MPT_OK) s = get_int(c, state, "state", "batch", &rs->batch);
    if (s == MPT_OK) s = get_num(c, state, "state", "mean", &mean);
    if (s == MPT_OK) s = get_num(c, state, "state", "inv_std", &inv_std);
    if (s == MPT_OK) s = get_int(c, state, "state", "n_train", &rs->n_train);
    if (s == MPT_OK) s = get_int(c, state, "state", "n_val", &rs->n_val);
    if (s == MPT_OK) s = get_num(c, state, "state", "best_test_acc", &best);
    if (s == MPT_OK) s = get_int(c, state, "state", "best_epoch", &best_epoch);
    json_t *ranks = json_object_get(state, "ranks"); /* absent before data-parallel training: one process */
    rs->ranks = ranks && json_is_integer(ranks) ? (int)json_integer_value(ranks) : 1;
    json_t *wire = json_object_get(state, "grad_comm");
    rs->grad_comm = MPT_GRAD_COMM_FP32;
    if (wire && (!json_is_string(wire) || mpt_grad_comm_parse(json_string_value(wire), &rs->grad_comm) != 0))
        s = mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"state\": grad_comm is not fp32, bf16 or fp16",
                       mpt_checkpoint_path(c));
    json_decref(state);
    if (s != MPT_OK) return s;
    if (rs->iteration < 0 || rs->epoch < 0 || rs->batch < 0)
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"state\" has a negative position", mpt_checkpoint_path(c));
    rs->mean = (float)mean;
    rs->inv_std = (float)inv_std;
    rs->best_test_acc = best;
    rs->best_epoch = (int)best_epoch;
    return MPT_OK;
}

mpt_status mpt_cli_checkpoint_read_config(const char *path, mpt_cli_opts *o, mpt_cli_run_state *rs) {
    mpt_checkpoint *c = NULL;
    MPT_TRY(mpt_checkpoint_open(path, NULL, 0, &c));
    memset(rs, 0, sizeof *rs);
    mpt_status s = read_config(c, o, rs);
    mpt_checkpoint_close(&c);
    return s;
}

static mpt_status read_scaler(const mpt_checkpoint *c, mpt_scaler_state *st) {
    json_t *j = NULL;
    MPT_TRY(meta_json(c, "scaler", &j));
    double f[5];
    int64_t i[5];
    const char *fk[5] = {"scale", "inv_scale", "found_inf", "grad_mul", "sumsq"};
    const char *ik[5] = {"growth_tracker", "hysteresis_left", "steps_taken", "steps_skipped", "floor_hits"};
    mpt_status s = MPT_OK;
    for (int k = 0; k < 5 && s == MPT_OK; k++) s = get_num(c, j, "scaler", fk[k], &f[k]);
    for (int k = 0; k < 5 && s == MPT_OK; k++) s = get_int(c, j, "scaler", ik[k], &i[k]);
    if (s != MPT_OK) {
        json_decref(j);
        return s;
    }
    if (!(f[0] > 0.0 && isfinite(f[0]))) {
        json_decref(j);
        return mpt_errorf(MPT_ERR_FORMAT, "%s: metadata \"scaler\": scale %g is not a positive finite number",
                          mpt_checkpoint_path(c), f[0]);
    }
    memset(st, 0, sizeof *st);
    st->scale = (float)f[0];
    st->inv_scale = (float)f[1];
    st->found_inf = (float)f[2];
    st->grad_mul = (float)f[3];
    st->sumsq = (float)f[4];
    st->growth_tracker = (int32_t)i[0];
    st->hysteresis_left = (int32_t)i[1];
    st->steps_taken = (int32_t)i[2];
    st->steps_skipped = (int32_t)i[3];
    st->floor_hits = (int32_t)i[4];
    json_t *nf = json_object_get(j, "steps_nonfinite"); /* absent before --nonfinite existed */
    st->steps_nonfinite = nf && json_is_integer(nf) ? (int32_t)json_integer_value(nf) : 0;
    json_decref(j);
    return MPT_OK;
}

mpt_status mpt_cli_checkpoint_load(const char *path, mpt_trainer *t) {
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
    for (int k = 0; k < n && s == MPT_OK; k++) {
        size_t b = (size_t)mpt_checkpoint_tensor_nbytes(&e[k]);
        s = mpt_checkpoint_read(c, e[k].name, host, b);
        if (s != MPT_OK) break;
        int64_t count = b / mpt_dtype_size(e[k].dtype);
        for (int64_t q = 0; q < count; q++)
            if (!isfinite(mpt_load_f32(host, e[k].dtype, q))) {
                s = mpt_errorf(MPT_ERR_NONFINITE, "%s: tensor %s holds a non-finite value at element %lld", path,
                               e[k].name, (long long)q);
                break;
            }
        if (s != MPT_OK) break;
        be->from_host(be, entry_tensor(t, k)->data, host, b);
        be->synchronize(be); /* host is reused for the next tensor */
    }
    mpt_scaler_state st;
    mpt_cli_run_state rs;
    if (s == MPT_OK) s = read_scaler(c, &st);
    if (s == MPT_OK) {
        mpt_cli_opts scratch;
        mpt_cli_opts_default(&scratch);
        s = read_config(c, &scratch, &rs);
    }
    if (s == MPT_OK) {
        be->from_host(be, t->scaler, &st, sizeof st);
        mpt_master_refresh_working(t->g, t->master);
        t->iteration = rs.iteration;
        be->synchronize(be);
    }
    free(host);
    mpt_checkpoint_close(&c);
    free(e);
    free(names);
    return s;
}
