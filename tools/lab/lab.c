/*
 * tools/lab/lab.c - the `mptrain lab` command: which lessons to run, the data they share, the helpers they use
 * (one training run, parameters, the report frame), and lab/index.md. The lessons are tools/lab/lesson_*.c.
 *
 * Under mpirun (docs/distributed.md) rank 0 runs the lessons; the runs a lesson hands to mpt_lab_train_batch are
 * broadcast to the other ranks, dealt out round-robin (tools/sweep.c) and their results gathered on rank 0, which
 * alone writes the reports; the other ranks serve batches until rank 0 says the lab is over. A run a lesson
 * trains on its own (it depends on earlier results: loss-scaling's large-batch run) stays on rank 0.
 *
 * Sizes: each lesson has its own (lab.h, mpt_lab_size): the data is loaded once, as many rows as the largest
 * lesson asks for, and each lesson sees its first rows.
 *
 * index.md lists every lesson that has run into --out, not only those of this invocation: each lesson leaves
 * <lesson>/lesson.json (its conclusion, whether --quick, its wall and CPU time, when it ran), and the index is
 * rebuilt from those files after every lab run.
 */
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "mpt_config.h"
#include "tools/lab/lab.h"

static const mpt_lab_lesson *const lessons[] = {&mpt_lab_tf32,           &mpt_lab_accumulation, &mpt_lab_softmax,
                                                 &mpt_lab_loss_scaling,   &mpt_lab_master_weights,
                                                 &mpt_lab_optimizer_state, &mpt_lab_overflow,    &mpt_lab_noise,
                                                 &mpt_lab_fp8,            &mpt_lab_grad_comm,
                                                 &mpt_lab_quantization,   &mpt_lab_normalization,
                                                 &mpt_lab_scale};
#define N_LESSONS ((int)(sizeof lessons / sizeof lessons[0]))

void mpt_lab_append(char *b, size_t n, const char *fmt, ...) {
    const size_t k = strlen(b);
    if (k + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + k, n - k, fmt, ap);
    va_end(ap);
}

mpt_status mpt_lab_param(const mpt_lab_ctx *c, const char *key, double def, double *out) {
    const char *t = mpt_lab_param_text(c, key, NULL);
    if (!t) {
        *out = def;
        return MPT_OK;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(t, &end);
    if (!*t || *end || errno == ERANGE || !isfinite(v))
    {
        char esc[256];
        return mpt_errorf(MPT_ERR_ARG, "--param %s: expected a number, found '%s'", key, mpt_cli_echo(esc, sizeof esc, t));
    }
    *out = v;
    return MPT_OK;
}

static int has_key(const mpt_lab_lesson *l, const char *p);

const char *mpt_lab_param_text(const mpt_lab_ctx *c, const char *key, const char *def) {
    /* a key the lesson reads but does not list would be refused on the command line: the list is kept true here */
    MPT_ASSERTF(!c->lesson || has_key(c->lesson, key), "lesson %s reads --param %s, which its param_keys (\"%s\") "
                "do not list", c->lesson->name, key, c->lesson->param_keys ? c->lesson->param_keys : "");
    size_t n = strlen(key);
    for (int i = c->n_params - 1; i >= 0; i--) /* the last one given wins, as for every other option */
        if (strncmp(c->params[i], key, n) == 0 && c->params[i][n] == '=') return c->params[i] + n + 1;
    return def;
}

mpt_status mpt_lab_param_flag(const mpt_lab_ctx *c, const char *key, const char *def, mpt_opt_id id,
                              const char **out) {
    const char *t = mpt_lab_param_text(c, key, def);
    static mpt_cli_opts scratch; /* large (paths, the model spec): off the stack */
    mpt_cli_opts_default(&scratch);
    if (mpt_cli_apply(&scratch, id, t) != MPT_OK) {
        char msg[1024], esc[256];
        snprintf(msg, sizeof msg, "%s", mpt_last_error());
        return mpt_errorf(MPT_ERR_ARG, "--param %s=%s: %s", key, mpt_cli_echo(esc, sizeof esc, t), msg);
    }
    *out = t;
    return MPT_OK;
}

int64_t mpt_lab_steps(const mpt_lab_ctx *c, int batch) {
    return (c->cd->d.n_train + batch - 1) / batch * c->base->epochs;
}

mpt_status mpt_lab_gemm(const mpt_gemm_args *a) { return mpt_lab_gemm_accum(a, MPT_ACCUM_MODEL_IEEE); }

mpt_status mpt_lab_gemm_accum(const mpt_gemm_args *a, mpt_accum_model m) {
    if (!mpt_accum_model_covers(m, a->math))
        return mpt_errorf(MPT_ERR_ARG, "the %s summation model has no Tensor Core row for %s GEMMs",
                          mpt_accum_model_name(m) ? mpt_accum_model_name(m) : "?", mpt_math_name(a->math));
    mpt_backend *be = mpt_backend_cpu_create();
    mpt_status s = mpt_backend_cpu_set_accum(be, m);
    if (s == MPT_OK) s = mpt_backend_reserve_workspace(be, be->gemm_workspace ? be->gemm_workspace(be, a) : 0);
    if (s == MPT_OK) be->gemm(be, a);
    mpt_backend_free(&be);
    return s;
}

mpt_status mpt_lab_fc_read(mpt_checkpoint *ck, const char *ckpt, int l, int64_t K, float **W, float **b, int64_t *N,
                           int *last) {
    char wn[32], bn[32], nn[32];
    snprintf(wn, sizeof wn, "fc%d.weight", l);
    snprintf(bn, sizeof bn, "fc%d.bias", l);
    snprintf(nn, sizeof nn, "fc%d.weight", l + 1);
    *W = *b = NULL, *N = 0, *last = 1;
    const mpt_checkpoint_tensor *t = mpt_checkpoint_find(ck, wn);
    if (!t) return MPT_OK;
    if (t->ndim != 2 || t->shape[1] != K || t->dtype != MPT_DTYPE_F32)
        return mpt_errorf(MPT_ERR_SHAPE, "%s: %s is not an FP32 [N, %lld]", ckpt, wn, (long long)K);
    const int64_t n = t->shape[0];
    float *w = malloc(sizeof(float) * (size_t)(n * K)), *bb = malloc(sizeof(float) * (size_t)n);
    mpt_status s = w && bb ? MPT_OK : mpt_errorf(MPT_ERR_NOMEM, "%s: no memory for %s", ckpt, wn);
    if (s == MPT_OK) s = mpt_checkpoint_read(ck, wn, w, sizeof(float) * (size_t)(n * K));
    if (s == MPT_OK) s = mpt_checkpoint_read(ck, bn, bb, sizeof(float) * (size_t)n);
    if (s != MPT_OK) {
        free(w), free(bb);
        return s;
    }
    *W = w, *b = bb, *N = n, *last = mpt_checkpoint_find(ck, nn) == NULL;
    return MPT_OK;
}

int64_t mpt_lab_telemetry_every(int64_t steps, int points) {
    int64_t every = points > 0 ? steps / points : steps;
    return every < 1 ? 1 : every;
}

const char *mpt_lab_every_text(char *buf, size_t len, const char *every) {
    const long long n = atoll(every);
    if (n == 1) {
        snprintf(buf, len, "every step");
        return buf;
    }
    const char *suffix = n % 100 >= 11 && n % 100 <= 13 ? "th"
                         : n % 10 == 1                   ? "st"
                         : n % 10 == 2                   ? "nd"
                         : n % 10 == 3                   ? "rd"
                                                         : "th";
    snprintf(buf, len, "every %lld%s step", n, suffix);
    return buf;
}

mpt_status mpt_lab_series_read(const mpt_lab_ctx *c, const char *run, const char *tensor, const char *metric,
                               mpt_lab_series *out) {
    memset(out, 0, sizeof *out);
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s/telemetry.csv", c->dir, run);
    FILE *f = fopen(path, "r");
    if (!f) return mpt_errorf(MPT_ERR_IO, "%s: cannot read (%s)", path, strerror(errno));
    char line[512];
    int cap = 0;
    mpt_status s = MPT_OK;
    while (s == MPT_OK && fgets(line, sizeof line, f)) { /* step,tensor,metric,value */
        char *save = NULL, *st = strtok_r(line, ",\n", &save), *te = strtok_r(NULL, ",\n", &save);
        char *me = strtok_r(NULL, ",\n", &save), *va = strtok_r(NULL, ",\n", &save);
        if (!st || !te || !me || !va || strcmp(te, tensor) != 0 || strcmp(me, metric) != 0) continue;
        if (out->n == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *ns = realloc(out->step, (size_t)cap * sizeof *ns);
            if (ns) out->step = ns;
            double *nv = realloc(out->value, (size_t)cap * sizeof *nv);
            if (nv) out->value = nv;
            if (!ns || !nv) s = mpt_errorf(MPT_ERR_NOMEM, "%s: no memory for %d rows", path, cap);
        }
        if (s == MPT_OK) {
            out->step[out->n] = atoll(st);
            out->value[out->n++] = strtod(va, NULL);
        }
    }
    fclose(f);
    if (s != MPT_OK) mpt_lab_series_free(out);
    return s;
}

void mpt_lab_series_free(mpt_lab_series *s) {
    free(s->step);
    free(s->value);
    memset(s, 0, sizeof *s);
}

static int opt_id_of(const char *flag) {
    for (int id = MPT_OPT_FIRST; id < MPT_OPT_END; id++)
        if (strcmp(mpt_cli_opt_name((mpt_opt_id)id), flag + 2) == 0) return id;
    return -1;
}

mpt_status mpt_lab_train(mpt_lab_ctx *c, const char *name, const char *const *flags, mpt_run_result *res) {
    mpt_cli_opts o = *c->base;
    for (int i = 0; flags && flags[i]; i += 2) {
        int id = opt_id_of(flags[i]);
        if (id < 0) return mpt_errorf(MPT_ERR_ARG, "lab: unknown flag %s", flags[i]);
        MPT_TRY(mpt_cli_apply(&o, (mpt_opt_id)id, flags[i + 1]));
        o.given[id - MPT_OPT_FIRST] = 1;
    }
    mpt_cli_resolve(&o);
    MPT_TRY(mpt_cli_check_switches(&o));
    int len = snprintf(o.out, sizeof o.out, "%s/%s", c->dir, name);
    if (len < 0 || (size_t)len >= sizeof o.out) return mpt_errorf(MPT_ERR_ARG, "--out %s: path too long", c->dir);
    char label[128];
    if (c->dist) snprintf(label, sizeof label, "  [rank %d: %s] ", mpt_dist_rank(c->dist), name);
    else snprintf(label, sizeof label, "  [%s] ", name);
    memset(res, 0, sizeof *res);
    MPT_TRY(mpt_run_train(&o, c->cd, label, res));
    if (res->interrupted) /* the run saved its state; the lesson stops, its report would compare partial runs */
        return mpt_errorf(MPT_ERR_INTERRUPTED, "interrupted by %s at step %lld of run %s: its checkpoint is in %s; "
                          "the lesson has no report", mpt_guard_signal_name(res->interrupted),
                          (long long)res->iterations, name, o.out);
    return MPT_OK;
}

/* ---- batches of runs, over the ranks of an MPI job ------------------------------------------------------------ */

typedef struct lab_plan {
    mpt_lab_ctx *c;
    const mpt_lab_run *runs;
    mpt_run_result *res;
} lab_plan;

static void plan_describe(void *ctx, int i, char *label, size_t ln, char *dir, size_t dn) {
    const lab_plan *pl = ctx;
    snprintf(label, ln, "%s/%s", strrchr(pl->c->dir, '/') ? strrchr(pl->c->dir, '/') + 1 : pl->c->dir,
             pl->runs[i].name);
    snprintf(dir, dn, "%s/%s", pl->c->dir, pl->runs[i].name);
}

static mpt_status plan_train(void *ctx, int i, mpt_run_result *res) {
    const lab_plan *pl = ctx;
    return mpt_lab_train(pl->c, pl->runs[i].name, pl->runs[i].flags, res);
}

static mpt_status plan_deliver(void *ctx, int i, mpt_run_result *r) {
    lab_plan *pl = ctx;
    pl->res[i] = *r;
    return MPT_OK;
}

static mpt_status run_batch(mpt_lab_ctx *c, const mpt_lab_run *runs, int n, mpt_run_result *res) {
    lab_plan pl = {c, runs, res};
    mpt_sweep sw = {n, &pl, plan_train, plan_describe, plan_deliver, NULL, 0, NULL}; /* agreed at the start (lab_with) */
    return mpt_sweep_run(c->dist, &sw, MPT_OK);
}

/* The batch message rank 0 broadcasts: NUL-terminated strings "batch", the lesson directory, the lesson's size
 * (training images, test images, epochs), the run count, then per run its name, its flag count and the flags;
 * or "end" and the lab's exit code. */
static mpt_status put(char *buf, size_t cap, size_t *k, const char *str) {
    size_t n = strlen(str) + 1;
    if (*k + n > cap) return mpt_errorf(MPT_ERR_ARG, "lab: a batch of runs does not fit in %zu bytes", cap);
    memcpy(buf + *k, str, n);
    *k += n;
    return MPT_OK;
}

#define BATCH_BYTES 65536

static mpt_status send_batch(mpt_lab_ctx *c, const mpt_lab_run *runs, int n) {
    static char buf[BATCH_BYTES];
    size_t k = 0;
    char num[16];
    snprintf(num, sizeof num, "%d", n);
    MPT_TRY(put(buf, sizeof buf, &k, "batch"));
    MPT_TRY(put(buf, sizeof buf, &k, c->dir));
    char size[3][24];
    snprintf(size[0], sizeof size[0], "%lld", (long long)c->cd->d.n_train);
    snprintf(size[1], sizeof size[1], "%lld", (long long)c->cd->d.n_test);
    snprintf(size[2], sizeof size[2], "%d", c->base->epochs);
    for (int i = 0; i < 3; i++) MPT_TRY(put(buf, sizeof buf, &k, size[i]));
    MPT_TRY(put(buf, sizeof buf, &k, num));
    for (int i = 0; i < n; i++) {
        int nf = 0;
        while (runs[i].flags && runs[i].flags[nf]) nf++;
        if (nf > MPT_LAB_MAX_FLAGS) return mpt_errorf(MPT_ERR_ARG, "lab: run %s has %d flags, at most %d", runs[i].name, nf,
                                                      MPT_LAB_MAX_FLAGS);
        snprintf(num, sizeof num, "%d", nf);
        MPT_TRY(put(buf, sizeof buf, &k, runs[i].name));
        MPT_TRY(put(buf, sizeof buf, &k, num));
        for (int f = 0; f < nf; f++) MPT_TRY(put(buf, sizeof buf, &k, runs[i].flags[f]));
    }
    void *b = buf;
    int64_t len = (int64_t)k;
    return mpt_dist_bcast(c->dist, 0, &b, &len, "the other ranks to take the lesson's runs");
}

mpt_status mpt_lab_train_batch(mpt_lab_ctx *c, const mpt_lab_run *runs, int n, mpt_run_result *res) {
    if (n < 0 || n > MPT_LAB_MAX_BATCH) return mpt_errorf(MPT_ERR_ARG, "lab: a batch of %d runs (at most %d)", n,
                                                          MPT_LAB_MAX_BATCH);
    memset(res, 0, (size_t)n * sizeof *res);
    if (c->dist) MPT_TRY(send_batch(c, runs, n));
    mpt_status s = run_batch(c, runs, n, res);
    if (s != MPT_OK)
        for (int i = 0; i < n; i++) mpt_run_result_free(&res[i]);
    return s;
}

/* ---- accuracy over seeds ------------------------------------------------------------------------------------ */

mpt_status mpt_lab_seeds(const mpt_lab_ctx *c, int max, int *ns) {
    double v;
    MPT_TRY(mpt_lab_param(c, "seeds", c->n_seeds, &v));
    if (!(v >= 2.0 && v <= (double)max && v == floor(v)))
        return mpt_errorf(MPT_ERR_ARG, "--param seeds: expected an integer in [2, %d], found %g", max, v);
    *ns = (int)v;
    return MPT_OK;
}

mpt_lab_run mpt_lab_seed_run_make(mpt_lab_seed_run *b, const char *arm, int seed, const char *const *flags) {
    int nf = 0;
    while (flags && flags[nf]) nf++;
    MPT_ASSERTF(nf + 2 <= MPT_LAB_MAX_FLAGS, "lab: arm %s has %d flags, at most %d besides --seed", arm, nf,
                MPT_LAB_MAX_FLAGS - 2);
    snprintf(b->name, sizeof b->name, "%s-seed%d", arm, seed);
    snprintf(b->seed, sizeof b->seed, "%d", seed);
    for (int i = 0; i < nf; i++) b->flags[i] = flags[i];
    b->flags[nf] = "--seed";
    b->flags[nf + 1] = b->seed;
    b->flags[nf + 2] = NULL;
    return (mpt_lab_run){b->name, b->flags};
}

mpt_status mpt_lab_compare_paired(const mpt_lab_ctx *c, const double *a, const double *b, int n, mpt_lab_paired *p) {
    memset(p, 0, sizeof *p);
    double *d = malloc(sizeof *d * (size_t)(n > 0 ? n : 1));
    if (!d) return mpt_errorf(MPT_ERR_NOMEM, "lab: no memory for %d paired differences", n);
    for (int i = 0; i < n; i++) d[i] = a[i] - b[i];
    mpt_stats_summarize(d, n, &p->diff);
    free(d);
    p->have_ci = mpt_stats_available();
    if (p->have_ci) MPT_TRY(mpt_stats_compare_paired(a, b, n, 0.95, c->base->margin, &p->d));
    return MPT_OK;
}

const mpt_stats_paired *mpt_lab_paired_ci(const mpt_lab_paired *p) { return p->have_ci ? &p->d : NULL; }

int mpt_lab_paired_is(const mpt_lab_paired *p, mpt_verdict v) { return p->have_ci && p->d.verdict == v; }

void mpt_lab_seed_table(FILE *f, int n, int arms, const char *const *names, const double *const *acc) {
    fprintf(f, "| seed |");
    for (int j = 0; j < arms; j++) fprintf(f, " %s |", names[j]);
    for (int j = 1; j < arms; j++) fprintf(f, " %s - %s (pp) |", names[j], names[0]);
    fprintf(f, "\n|---:|");
    for (int j = 1; j < 2 * arms; j++) fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int k = 0; k < n; k++) {
        fprintf(f, "| %d |", k);
        for (int j = 0; j < arms; j++) fprintf(f, " %.2f%% |", acc[j][k]);
        for (int j = 1; j < arms; j++) fprintf(f, " %+.2f |", acc[j][k] - acc[0][k]);
        fprintf(f, "\n");
    }
}

/* Rank 0: the lab is over; every rank exits with rc. */
static void send_end(mpt_dist *d, int rc) {
    char buf[32];
    int k = snprintf(buf, sizeof buf, "end%c%d", 0, rc);
    void *b = buf;
    int64_t len = k + 1;
    if (mpt_dist_bcast(d, 0, &b, &len, "the other ranks to take the end of the lab") != MPT_OK)
        fprintf(stderr, "mptrain lab: rank 0 could not tell the other ranks to stop: %s\n", mpt_last_error());
}

/* The next string of a batch message at *k, or NULL past its end. */
static const char *next(const char *buf, int64_t len, int64_t *k) {
    if (*k >= len) return NULL;
    const char *s = buf + *k;
    const char *z = memchr(s, 0, (size_t)(len - *k));
    if (!z) return NULL;
    *k += z - s + 1;
    return s;
}

/* Points c->cd and c->base at c's own view of the loaded data (its first n_train / n_test rows) and a copy of the
 * command's settings with the lesson's epochs. */
static void lesson_view(mpt_lab_ctx *c, const mpt_cli_data *all, const mpt_cli_opts *base, int64_t n_train,
                        int64_t n_test, int epochs) {
    c->view = *all;
    if (n_train > 0 && n_train < c->view.d.n_train) c->view.d.n_train = n_train;
    if (n_test > 0 && n_test < c->view.d.n_test) c->view.d.n_test = n_test;
    c->opts = *base;
    c->opts.epochs = epochs;
    c->opts.limit_train = c->view.d.n_train;
    c->opts.limit_test = c->view.d.n_test;
    c->cd = &c->view;
    c->base = &c->opts;
}

/* A rank other than 0: trains its share of each batch rank 0 broadcasts, until "end"; returns its exit code.
 * all: the data as loaded; base: the command's settings. */
static int serve_batches(const mpt_lab_ctx *proto, const mpt_cli_data *all, const mpt_cli_opts *base) {
    for (;;) {
        void *b = NULL;
        int64_t len = 0, k = 0;
        if (mpt_dist_bcast(proto->dist, 0, &b, &len, "rank 0's next batch of runs (rank 0 runs the lessons)") != MPT_OK) {
            fprintf(stderr, "mptrain lab: rank %d: %s\n", mpt_dist_rank(proto->dist), mpt_last_error());
            return MPT_CLI_EXIT_FAIL;
        }
        const char *kind = next(b, len, &k), *dir = next(b, len, &k);
        if (kind && strcmp(kind, "end") == 0) {
            int rc = dir ? atoi(dir) : MPT_CLI_EXIT_FAIL;
            free(b);
            return rc;
        }
        const char *n_train = next(b, len, &k), *n_test = next(b, len, &k), *epochs = next(b, len, &k);
        const char *count = next(b, len, &k);
        static mpt_lab_run runs[MPT_LAB_MAX_BATCH];
        static const char *flags[MPT_LAB_MAX_BATCH][MPT_LAB_MAX_FLAGS + 1];
        int n = count ? atoi(count) : -1, ok = kind && strcmp(kind, "batch") == 0 && dir && n_train && n_test &&
                                               epochs && n >= 0 && n <= MPT_LAB_MAX_BATCH;
        for (int i = 0; ok && i < n; i++) {
            const char *name = next(b, len, &k), *nf_s = next(b, len, &k);
            int nf = nf_s ? atoi(nf_s) : -1;
            ok = name && nf >= 0 && nf <= MPT_LAB_MAX_FLAGS;
            for (int f = 0; ok && f < nf; f++) ok = (flags[i][f] = next(b, len, &k)) != NULL;
            if (ok) flags[i][nf] = NULL;
            runs[i] = (mpt_lab_run){name, flags[i]};
        }
        if (!ok) { /* cannot happen between ranks of one binary; stop rather than train something else */
            fprintf(stderr, "mptrain lab: rank %d: a malformed batch from rank 0 (%lld bytes)\n",
                    mpt_dist_rank(proto->dist), (long long)len);
            free(b);
            return MPT_CLI_EXIT_FAIL;
        }
        static mpt_lab_ctx c;
        c = *proto;
        lesson_view(&c, all, base, atoll(n_train), atoll(n_test), atoi(epochs));
        snprintf(c.dir, sizeof c.dir, "%s", dir);
        static mpt_run_result res[MPT_LAB_MAX_BATCH];
        memset(res, 0, sizeof res);
        (void)run_batch(&c, runs, n, res); /* a failure is rank 0's to report; it ends the lab */
        for (int i = 0; i < n; i++) mpt_run_result_free(&res[i]);
        free(b);
    }
}

FILE *mpt_lab_open(mpt_lab_ctx *c, const char *file) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    return mpt_outdir_create_file(path);
}

mpt_status mpt_lab_close(mpt_lab_ctx *c, FILE *f, const char *file) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    return mpt_outdir_close_written(f, path);
}

const char *mpt_lab_plot(mpt_lab_ctx *c, FILE *gp, const char *script, char *err, size_t n) {
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/%s", c->dir, script);
    mpt_status s = mpt_outdir_close_written(gp, path);
    if (s == MPT_OK) s = mpt_report_gnuplot(c->dir, script);
    if (s == MPT_OK) return NULL;
    snprintf(err, n, "%s", mpt_last_error());
    return err;
}

static void size_text(char *b, size_t n, const mpt_lab_size *z);

mpt_status mpt_lab_report_open(mpt_lab_ctx *c, const mpt_lab_lesson *l, FILE **f) {
    *f = mpt_lab_open(c, "report.md");
    if (!*f) return MPT_ERR_IO;
    const mpt_cli_opts *b = c->base;
    fprintf(*f, "# Lesson `%s`\n\n**Question.** %s\n\n", l->name, l->claim);
    fprintf(*f, "Data: Fashion-MNIST (`%s`), the first %lld training images, %lld test images; model `%s`, %d "
                "epoch(s) per run%s. Every number below was measured in this run of `mptrain lab%s %s`.\n\n",
            b->data, (long long)c->cd->d.n_train, (long long)c->cd->d.n_test, b->model, b->epochs,
            c->quick ? " (--quick)" : "", c->quick ? " --quick" : "", l->name);
    if (c->n_params > 0) {
        fprintf(*f, "Parameters changed with --param:");
        for (int i = 0; i < c->n_params; i++) fprintf(*f, " `%s`", c->params[i]);
        fprintf(*f, ".\n\n");
    }
    return MPT_OK;
}

/* A --quick run that did not show its effect says that it was the smallest version, why that may be the reason,
 * and the full command (with this run's --param's and NVIDIA_TF32_OVERRIDE) and its size: appended to the
 * conclusion, so the report, the printed line and index.md all carry it. */
static void append_quick_note(mpt_lab_ctx *c, const mpt_lab_lesson *l) {
    char cmd[1024], full[128], quick[128];
    const char *tf32 = getenv("NVIDIA_TF32_OVERRIDE");
    int k = snprintf(cmd, sizeof cmd, "%s%.16s%smptrain lab %s", tf32 ? "NVIDIA_TF32_OVERRIDE=" : "", tf32 ? tf32 : "",
                     tf32 ? " " : "", l->name);
    for (int i = 0; i < c->n_params && k > 0 && (size_t)k < sizeof cmd; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " --param %s", c->params[i]);
    mpt_lab_size fz = l->full, qz = l->quick;
    if (fz.seeds > 0 || qz.seeds > 0) /* --param seeds=N sets both versions' seeds: say the run's, not the size's */
        for (int i = 0; i < c->n_params; i++)
            if (strncmp(c->params[i], "seeds=", 6) == 0) /* checked by the lesson; the last one counts */
                fz.seeds = qz.seeds = atoi(c->params[i] + 6);
    size_text(full, sizeof full, &fz);
    size_text(quick, sizeof quick, &qz);
    size_t n = strlen(c->conclusion);
    snprintf(c->conclusion + n, sizeof c->conclusion - n,
             "%sThis was the --quick version (%s), the lesson's smallest: an effect that builds up over training can "
             "stay below the criterion in so few steps. Run the full version, `%s` (%s), before concluding that it "
             "is absent.", n > 0 && c->conclusion[n - 1] != ' ' ? " " : "", quick, cmd, full);
}

mpt_status mpt_lab_report_close(mpt_lab_ctx *c, const mpt_lab_lesson *l, FILE *f, const char *plot_error) {
    if (c->quick && !c->observed) append_quick_note(c, l);
    fprintf(f, "\n## Conclusion\n\n%s\n\n", c->conclusion);
    if (plot_error) fprintf(f, "(No picture: %s.)\n", plot_error);
    else fprintf(f, "![%s](%s.png)\n", l->name, l->name);
    fprintf(f, "\nParameters of this lesson (`mptrain lab %s --param KEY=VALUE`): %s.\n", l->name, l->params_help);
    char path[MPT_CLI_PATH + 128];
    snprintf(path, sizeof path, "%s/report.md", c->dir);
    return mpt_outdir_close_written(f, path); /* a failed fprintf above is caught too, not only a failed fclose */
}

/* ---- the command --------------------------------------------------------------------------------------------- */

enum { LAB_LIST = 1, LAB_OUT, LAB_QUICK, LAB_DATA, LAB_DEVICE, LAB_THREADS, LAB_PARAM, LAB_PLOT_TIMEOUT, LAB_HELP,
       LAB_MODEL };

static void print_help(FILE *f) {
    fprintf(f, "Usage: mptrain lab [options] [LESSON...]\n"
               "Runs the lessons of mixed-precision training as small experiments on Fashion-MNIST (all of them by\n"
               "default): each writes <out>/<lesson>/report.md and <lesson>.png and prints a conclusion whose every\n"
               "number was measured in this run; <out>/index.md links every lesson run into <out> so far. The full\n"
               "lessons take about 11.2 minutes of CPU time together on a shared 2-vCPU AMD EPYC (2026-11-28, the\n"
               "sum of measurements apart: the first ten 3.7 minutes, and 81 s more since master-weights and\n"
               "optimizer-state pair seeds; quantization, normalization and scale 148 s, 119 s and 104 s);\n"
               "--quick runs each lesson's smallest version that still shows its effect (120 s of CPU time, all\n"
               "thirteen in one run at a load average of 3.5; --list gives each lesson's). A --quick lesson that\n"
               "misses its effect names the full command.\n\n"
               "Options:\n"
               "  --list                    list the lessons, their sizes and parameters, and exit\n"
               "  --out DIR                 output directory (default lab)\n"
               "  --quick                   each lesson's smallest version that shows its effect\n"
               "  --param KEY=VALUE         change a lesson's configuration (see --list); repeatable\n"
               "  --data DIR                directory with the four IDX files (default " MPT_DEFAULT_DATA_DIR ")\n"
               "  --model SPEC              the network of the lessons that train the command's model (all but fp8\n"
               "                            and quantization, which compare mlp and lenet5): mlp, lenet5, cnn or a\n"
               "                            spec as for mptrain train (default mlp); normalization trains it when\n"
               "                            it has a batchnorm or layernorm (else its own CNN), scale takes it as\n"
               "                            the deeper network to set against the mlp\n"
               "  --device D                auto | cpu | cuda (default auto)\n"
               "  --threads N               threads of the CPU backend's GEMMs (OpenBLAS and oneDNN)\n"
               "  --plot-timeout S          seconds gnuplot may take per picture before it is stopped (default 60)\n"
               "  --help                    show this help\n");
}

static void size_text(char *b, size_t n, const mpt_lab_size *z) {
    int k = snprintf(b, n, "%lld training / %lld test images, %d epoch%s", (long long)z->n_train,
                     (long long)z->n_test, z->epochs, z->epochs == 1 ? "" : "s");
    if (z->seeds > 0 && k > 0 && (size_t)k < n) snprintf(b + k, n - (size_t)k, ", %d seeds", z->seeds);
}

static void print_list(void) {
    int w = 0;
    for (int i = 0; i < N_LESSONS; i++)
        if ((int)strlen(lessons[i]->name) > w) w = (int)strlen(lessons[i]->name);
    for (int i = 0; i < N_LESSONS; i++) {
        char full[128], quick[128];
        size_text(full, sizeof full, &lessons[i]->full);
        size_text(quick, sizeof quick, &lessons[i]->quick);
        printf("%-*s  %s\n%-*s  parameters: %s\n%-*s  full: %s; --quick: %s\n%-*s  measured: %s\n", w,
               lessons[i]->name, lessons[i]->claim, w, "", lessons[i]->params_help, w, "", full, quick, w, "",
               lessons[i]->measured ? lessons[i]->measured : "not yet");
    }
}

static const mpt_lab_lesson *find_lesson(const char *name) {
    for (int i = 0; i < N_LESSONS; i++)
        if (strcmp(lessons[i]->name, name) == 0) return lessons[i];
    return NULL;
}

/* Whether lesson l reads the --param key of "KEY=VALUE" p. */
static int has_key(const mpt_lab_lesson *l, const char *p) {
    size_t n = strcspn(p, "=");
    for (const char *k = l->param_keys ? l->param_keys : ""; *k;) {
        size_t m = strcspn(k, " ");
        if (m == n && strncmp(k, p, n) == 0) return 1;
        k += m;
        while (*k == ' ') k++;
    }
    return 0;
}

/* MPT_ERR_ARG naming the keys of the lessons to run when none of them reads the key of --param p. */
static mpt_status check_param_key(const char *p, const mpt_lab_lesson *const *run, int n) {
    for (int i = 0; i < n; i++)
        if (has_key(run[i], p)) return MPT_OK;
    char keys[1024] = "", esc[256], key[256], key_esc[256];
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof keys; i++)
        len += (size_t)snprintf(keys + len, sizeof keys - len, "%s%s: %s", i ? "; " : "", run[i]->name,
                                run[i]->param_keys && run[i]->param_keys[0] ? run[i]->param_keys : "none");
    snprintf(key, sizeof key, "%.*s", (int)strcspn(p, "="), p);
    return mpt_errorf(MPT_ERR_ARG, "--param %s: no lesson run here reads the key '%s' (their keys: %s; mptrain lab "
                      "--list)", mpt_cli_echo(esc, sizeof esc, p), mpt_cli_echo(key_esc, sizeof key_esc, key), keys);
}

/* ---- lesson.json and index.md --------------------------------------------------------------------------------- */

/* What a finished lesson leaves for the index: <dir>/lesson.json. */
static mpt_status write_lesson_json(const mpt_lab_ctx *c, const mpt_lab_lesson *l, double wall_s, double cpu_s) {
    json_t *j = json_object();
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
    json_object_set_new(j, "lesson", json_string(l->name));
    json_object_set_new(j, "conclusion", json_string(c->conclusion));
    json_object_set_new(j, "observed", json_boolean(c->observed));
    json_object_set_new(j, "quick", json_boolean(c->quick));
    json_object_set_new(j, "train_images", json_integer((json_int_t)c->cd->d.n_train));
    json_object_set_new(j, "test_images", json_integer((json_int_t)c->cd->d.n_test));
    json_object_set_new(j, "epochs", json_integer(c->base->epochs));
    json_object_set_new(j, "wall_time_s", json_real(wall_s));
    json_object_set_new(j, "cpu_time_s", json_real(cpu_s));
    json_object_set_new(j, "finished", json_string(when));
    char path[MPT_CLI_PATH + 32], tmp[MPT_CLI_PATH + 48];
    snprintf(path, sizeof path, "%s/lesson.json", c->dir);
    FILE *f = mpt_outdir_open_atomic(path, tmp, sizeof tmp);
    if (!f) {
        json_decref(j);
        return MPT_ERR_IO;
    }
    int rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    json_decref(j);
    if (rc != 0) {
        mpt_status s = mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
        mpt_outdir_discard(f); /* its temporary file is removed */
        return s;
    }
    return mpt_outdir_commit_atomic(f, tmp, path);
}

/* index.md: every lesson of the table whose <out>/<lesson>/lesson.json exists (run now or by an earlier lab into
 * the same --out), in the table's order. A lesson.json that cannot be read is listed as such, not skipped. */
static mpt_status write_index(const char *out) {
    char path[MPT_CLI_PATH + 32], tmp[MPT_CLI_PATH + 48];
    snprintf(path, sizeof path, "%s/index.md", out);
    FILE *f = mpt_outdir_open_atomic(path, tmp, sizeof tmp);
    if (!f) return MPT_ERR_IO;
    fprintf(f, "# mptrain lab\n\nEach lesson is a small experiment on Fashion-MNIST; its report has the measurements, "
               "the picture and how to read them. Every lesson run into this directory so far is listed, with the "
               "conclusion filled from the measurements of its last run.\n\n"
               "| lesson | version | conclusion | wall time | CPU time | finished (local time) |\n|---|---|---|---:|---:|---|\n");
    for (int i = 0; i < N_LESSONS; i++) {
        char lj[MPT_CLI_PATH + 64];
        snprintf(lj, sizeof lj, "%s/%s/lesson.json", out, lessons[i]->name);
        if (access(lj, F_OK) != 0) continue;
        json_error_t err;
        json_t *j = json_load_file(lj, JSON_REJECT_DUPLICATES, &err);
        const char *concl = j ? json_string_value(json_object_get(j, "conclusion")) : NULL;
        if (!concl) {
            fprintf(f, "| [%s](%s/report.md) | ? | (%s/lesson.json unreadable: %s) | | | |\n", lessons[i]->name,
                    lessons[i]->name, lessons[i]->name, j ? "no conclusion" : err.text);
            json_decref(j);
            continue;
        }
        fprintf(f, "| [%s](%s/report.md) | %s | %s | %.0f s | %.0f s | %s |\n", lessons[i]->name, lessons[i]->name,
                json_is_true(json_object_get(j, "quick")) ? "--quick" : "full", concl,
                json_number_value(json_object_get(j, "wall_time_s")),
                json_number_value(json_object_get(j, "cpu_time_s")),
                json_string_value(json_object_get(j, "finished")) ? json_string_value(json_object_get(j, "finished"))
                                                                  : "?");
        json_decref(j);
    }
    return mpt_outdir_commit_atomic(f, tmp, path);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of this process so far, all threads (OpenBLAS's included), user + system, in seconds. */
static double cpu_s(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return NAN;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static int lab_with(mpt_cli_opts *base, const char *out, const mpt_lab_lesson *const *run, int n, int quick,
                    const char *const *params, int n_params, mpt_dist *dist);

int mpt_cmd_lab(int argc, char **argv) {
    static const struct option longopts[] = {
        {"list", no_argument, NULL, LAB_LIST},       {"out", required_argument, NULL, LAB_OUT},
        {"quick", no_argument, NULL, LAB_QUICK},     {"data", required_argument, NULL, LAB_DATA},
        {"device", required_argument, NULL, LAB_DEVICE}, {"threads", required_argument, NULL, LAB_THREADS},
        {"param", required_argument, NULL, LAB_PARAM}, {"help", no_argument, NULL, LAB_HELP},
        {"plot-timeout", required_argument, NULL, LAB_PLOT_TIMEOUT}, {"model", required_argument, NULL, LAB_MODEL},
        {NULL, 0, NULL, 0}};
    mpt_cli_opts base;
    mpt_cli_opts_default(&base);
    base.progress = MPT_PROGRESS_OFF;
    char out[MPT_CLI_PATH] = "lab";
    int quick = 0;
    const char *params[MPT_LAB_MAX_PARAMS];
    int n_params = 0;
    opterr = 0;
    optind = 0;
    int ch;
    char esc[256]; /* command-line text quoted in a message: escaped and cut (mpt_cli_echo) */
    while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        mpt_status s = MPT_OK;
        switch (ch) {
        case LAB_LIST: print_list(); return 0;
        case 'h':
        case LAB_HELP: print_help(stdout); return 0;
        case LAB_OUT:
            if (!*optarg || strlen(optarg) >= sizeof out - 64)
                s = mpt_errorf(MPT_ERR_ARG, "--out: expected a path, found '%s'", mpt_cli_echo(esc, sizeof esc, optarg));
            else snprintf(out, sizeof out, "%s", optarg);
            break;
        case LAB_QUICK: quick = 1; break;
        case LAB_DATA: s = mpt_cli_apply(&base, MPT_OPT_DATA, optarg); break;
        case LAB_DEVICE: s = mpt_cli_apply(&base, MPT_OPT_DEVICE, optarg); break;
        case LAB_THREADS: s = mpt_cli_apply(&base, MPT_OPT_THREADS, optarg); break;
        case LAB_MODEL: s = mpt_cli_apply(&base, MPT_OPT_MODEL, optarg); break;
        case LAB_PLOT_TIMEOUT:
            s = mpt_cli_apply(&base, MPT_OPT_PLOT_TIMEOUT, optarg);
            if (s == MPT_OK) mpt_report_set_plot_timeout(base.plot_timeout);
            break;
        case LAB_PARAM:
            if (!strchr(optarg, '=') || optarg[0] == '=')
                s = mpt_errorf(MPT_ERR_ARG, "--param: expected KEY=VALUE, found '%s'", mpt_cli_echo(esc, sizeof esc, optarg));
            else if (n_params == MPT_LAB_MAX_PARAMS) s = mpt_errorf(MPT_ERR_ARG, "--param: at most %d", MPT_LAB_MAX_PARAMS);
            else params[n_params++] = optarg;
            break;
        case ':':
            fprintf(stderr, "mptrain lab: option '%s' needs a value (see mptrain lab --help)\n",
                    mpt_cli_echo(esc, sizeof esc, argv[optind - 1]));
            return MPT_CLI_EXIT_USAGE;
        default:
            fprintf(stderr, "mptrain lab: unknown option '%s' (see mptrain lab --help)\n",
                    mpt_cli_echo(esc, sizeof esc, argv[optind - 1]));
            return MPT_CLI_EXIT_USAGE;
        }
        if (s != MPT_OK) return mpt_cli_fail("lab", s);
    }
    const mpt_lab_lesson *run[N_LESSONS];
    int n = 0;
    for (int i = optind; i < argc; i++) {
        const mpt_lab_lesson *l = find_lesson(argv[i]);
        if (!l) {
            fprintf(stderr, "mptrain lab: unknown lesson '%s' (expected one of:", mpt_cli_echo(esc, sizeof esc, argv[i]));
            for (int k = 0; k < N_LESSONS; k++) fprintf(stderr, " %s", lessons[k]->name);
            fprintf(stderr, "; see mptrain lab --list)\n");
            return MPT_CLI_EXIT_USAGE;
        }
        for (int k = 0; k < n; k++)
            if (run[k] == l) l = NULL;
        if (l) run[n++] = l;
    }
    if (n == 0)
        for (; n < N_LESSONS; n++) run[n] = lessons[n];
    for (int k = 0; k < n_params; k++) { /* a key that no lesson of this lab reads would change nothing */
        mpt_status s = check_param_key(params[k], run, n);
        if (s != MPT_OK) return mpt_cli_fail("lab", s);
    }

    /* the data is loaded once, as much as the largest chosen lesson needs */
    base.limit_train = base.limit_test = 1;
    for (int i = 0; i < n; i++) {
        const mpt_lab_size *z = quick ? &run[i]->quick : &run[i]->full;
        if (z->n_train > base.limit_train) base.limit_train = z->n_train;
        if (z->n_test > base.limit_test) base.limit_test = z->n_test;
    }
    mpt_dist *dist = NULL;
    mpt_status s = mpt_sweep_join(&dist);
    if (s != MPT_OK) return mpt_cli_fail("lab", s);
    mpt_run_answer(dist);
    int rc = lab_with(&base, out, run, n, quick, params, n_params, dist);
    mpt_run_answer(NULL);
    if (dist) mpt_guard_stop_done();
    mpt_dist_free(&dist);
    return rc;
}

/* c set up for lesson l at its size (quick or full) on the data loaded once, with the command's --param values. */
static void lesson_ctx(mpt_lab_ctx *c, const mpt_cli_data *cd, const mpt_cli_opts *base, const mpt_lab_lesson *l,
                       int quick, const char *const *params, int n_params, mpt_dist *dist) {
    const mpt_lab_size *z = quick ? &l->quick : &l->full;
    memset(c, 0, sizeof *c);
    lesson_view(c, cd, base, z->n_train, z->n_test, z->epochs);
    c->dist = dist;
    c->quick = quick;
    c->lesson = l;
    c->n_seeds = z->seeds;
    memcpy(c->params, params, (size_t)n_params * sizeof *params);
    c->n_params = n_params;
}

/* The rest of the lab once the lessons are chosen (and, under mpirun, the job joined). */
static int lab_with(mpt_cli_opts *base, const char *out, const mpt_lab_lesson *const *run, int n, int quick,
                    const char *const *params, int n_params, mpt_dist *dist) {
    int rank = dist ? mpt_dist_rank(dist) : 0;
    if (dist) {
        char why[128];
        base->threads = mpt_sweep_threads(dist, base->threads, why, sizeof why);
        printf("rank %d of %d: %d OpenBLAS thread(s) (%s)%s\n", rank, mpt_dist_size(dist), base->threads, why,
               rank == 0 ? "; rank 0 runs the lessons and deals their runs out round-robin" : "");
        fflush(stdout);
    }
    mpt_cpu_set_threads(base->threads);
    /* rank 0 holds --out (its lock) for the whole lab; the other ranks write only the runs dealt to them */
    mpt_outdir od = {.fd = -1, .lock_fd = -1};
    mpt_status s = rank == 0 ? mpt_outdir_open(&od, out, MPT_OUTDIR_USER_LINK, "lab") : MPT_OK;
    mpt_cli_data cd;
    memset(&cd, 0, sizeof cd);
    if (s == MPT_OK) s = mpt_guard_blas_ready();
    if (s == MPT_OK)
        s = mpt_cli_data_load(&cd, base->data, base->limit_train, base->limit_test, base->classes, base->data_layout);
    int bad = s != MPT_OK;
    if (bad && dist) fprintf(stderr, "mptrain lab: rank %d: %s\n", rank, mpt_last_error());
    else if (bad) {
        mpt_outdir_close(&od);
        return mpt_cli_fail("lab", s);
    }
    if (dist && mpt_dist_sum_int(dist, &bad, "every rank's data loaded") == MPT_OK && bad) { /* every rank must hold
                                                                                                the data, or none trains */
        mpt_cli_data_free(&cd);
        mpt_outdir_close(&od);
        return MPT_CLI_EXIT_FAIL;
    }
    if (dist) { /* one lab: the same lessons, sizes, parameters, device, --out and data on every rank */
        mpt_cli_job job = {0};
        char list[512] = "";
        size_t k = 0;
        for (int i = 0; i < n && k + 40 < sizeof list; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? " " : "", run[i]->name);
        mpt_cli_job_add(&job, "the mptrain version", "%s", MPT_VERSION);
        mpt_cli_job_add(&job, "the lessons", "%s", list);
        mpt_cli_job_add(&job, "--quick", "%s", quick ? "on" : "off");
        k = 0;
        list[0] = '\0';
        for (int i = 0; i < n_params && k + 40 < sizeof list; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%.*s", i ? " " : "", (int)(sizeof list - k - 2), params[i]);
        mpt_cli_job_add(&job, "--param", "%s", list);
        mpt_cli_job_add(&job, "--device", "%s", base->device == MPT_DEVICE_CHOICE_CPU ? "cpu"
                                                : base->device == MPT_DEVICE_CHOICE_CUDA ? "cuda" : "auto");
        mpt_cli_job_add(&job, "--out", "%s", out);
        char fpt[160];
        mpt_cli_job_add(&job, "--data (the images as loaded)", "%s", mpt_cli_data_fp_text(&cd.fp, fpt, sizeof fpt));
        s = mpt_dist_agree(dist, job.item, job.n);
        mpt_cli_job_free(&job);
        if (s != MPT_OK) {
            mpt_cli_data_free(&cd);
            mpt_outdir_close(&od);
            return rank == 0 ? mpt_cli_fail("lab", s) : MPT_CLI_EXIT_USAGE;
        }
    }
    if (rank != 0) {
        static mpt_lab_ctx proto;
        memset(&proto, 0, sizeof proto);
        proto.dist = dist;
        proto.quick = quick;
        int rc = serve_batches(&proto, &cd, base);
        mpt_cli_data_free(&cd);
        return rc;
    }

    static mpt_lab_ctx ctx;
    /* every lesson's --param values first, read and checked as the lesson reads them: a bad value of the last lesson
     * is refused before the first one trains */
    for (int i = 0; i < n && s == MPT_OK; i++) {
        lesson_ctx(&ctx, &cd, base, run[i], quick, params, n_params, NULL);
        ctx.check_only = 1;
        s = run[i]->run(&ctx);
    }
    if (s != MPT_OK) { /* nothing trained, nothing written */
        mpt_cli_data_free(&cd);
        const int rc = mpt_cli_fail("lab", s);
        mpt_outdir_close(&od);
        if (dist) send_end(dist, rc);
        return rc;
    }
    for (int i = 0; i < n && s == MPT_OK; i++) {
        mpt_lab_ctx *c = &ctx;
        lesson_ctx(c, &cd, base, run[i], quick, params, n_params, dist);
        snprintf(c->dir, sizeof c->dir, "%s/%s", out, run[i]->name);
        s = mpt_outdir_mkdirs(c->dir);
        if (s == MPT_OK) s = mpt_outdir_remove_result(c->dir, "lesson.json"); /* a failed lesson is not listed as done */
        if (s != MPT_OK) break;
        printf("==== lesson %s%s: %s\n", run[i]->name, quick ? " (--quick)" : "", run[i]->claim);
        fflush(stdout);
        double t0 = now_s(), c0 = cpu_s();
        double load0[1] = {NAN}, load1[1] = {NAN};
        getloadavg(load0, 1);
        s = run[i]->run(c);
        double wall = now_s() - t0, cpu = cpu_s() - c0;
        getloadavg(load1, 1);
        if (s != MPT_OK) {
            rmdir(c->dir); /* a lesson refused before writing anything leaves no empty directory (a non-empty one
                              stays: it holds what the lesson wrote before failing) */
            break;
        }
        s = write_lesson_json(c, run[i], wall, cpu);
        if (s != MPT_OK) break;
        printf("\n%s: %s\n(%s/report.md; %.0f s wall, %.0f s CPU; load average %.1f at the start, %.1f at the end)\n\n",
               run[i]->name, c->conclusion, c->dir, wall, cpu, load0[0], load1[0]);
    }
    mpt_cli_data_free(&cd);
    mpt_status si = write_index(out); /* also after a failure: the lessons done so far, and earlier ones */
    if (s == MPT_OK) s = si;
    int rc = s == MPT_OK ? 0 : mpt_cli_fail("lab", s);
    mpt_outdir_close(&od);
    if (dist) send_end(dist, rc);
    if (rc != 0) return rc;
    printf("index: %s/index.md\n", out);
    return 0;
}
