/*
 * tools/run.c - one training run: what `mptrain train` runs once, and `compare` and `lab` once per plan entry.
 *
 * One run:
 *   1. the backend (--device), the dataset copied into its memory once (MPT_MEM_DATA);
 *   2. the graph: model (models/) + softmax cross-entropy, in the run's precision policy; the trainer adds
 *      FP32 masters, optimizer and scaler state and initialises the weights from the seed;
 *   3. per epoch: the loader's shuffled order for (seed, epoch) becomes one I32 index array, copied to the
 *      backend once; each step gathers its batch from the resident dataset (mpt_trainer_gather) and runs
 *      mpt_trainer_step. The last partial batch is padded with index -1 rows, which the loss ignores, so an
 *      epoch is exactly PyTorch's DataLoader(drop_last=False) epoch;
 *   4. every --log-every steps (and at the end of each epoch) one read of the step statistics (the only
 *      host synchronisation in the loop): a metrics.csv row and the progress bar;
 *   5. after each epoch: test (and validation) loss and accuracy, an epochs.csv row and one printed line;
 *   6. at the end (and every --save-every steps, and at --max-steps): checkpoint.safetensors; summary.json;
 *      on the GPU also gpu_kernels.txt: the cuBLASLt/cuDNN configuration each GEMM and convolution ran with.
 *
 * Resuming (--resume CKPT) restores the run's settings from the checkpoint (flags that would change the math
 * are rejected when they differ), then its weights, optimizer and scaler state and iteration, and continues
 * at the recorded epoch and batch: the epoch's order is recomputed from (seed, epoch), dropout offsets derive
 * from the iteration, so N straight steps and N/2 + resume + N/2 give the same bits on the same backend.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "datasets/loader.h"
#include "engine/amp/scaler.h"
#include "engine/optim/optim.h"
#include "engine/cuda_backend.h"
#include "engine/layers/layers.h"
#include "models/models.h"
#include "tools/csv.h"
#include "tools/progress.h"
#include "tools/run.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of this process, all threads, user + system (seconds). */
static double cpu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mpt_status mpt_run_fp8_device_check(mpt_backend *be, mpt_precision p, const mpt_fp8_recipe *r, const char *label) {
    char msg[512] = "";
    const int mx = mpt_mode_info(p)->fp8 == MPT_FP8_KIND_MX;
    if (!be->fp8_cast || !be->fp8_update)
        return mpt_errorf(MPT_ERR_DEVICE, "--precision %s: the %s backend has no FP8 casts (use --device cpu: the CPU "
                                          "emulates FP8 exactly)", mpt_precision_name(p), be->name);
    if (be->fp8_support && !be->fp8_support(be, mx, r->accum, r->promote, msg, sizeof msg))
        return mpt_errorf(MPT_ERR_DEVICE, "--precision %s: %s", mpt_precision_name(p), msg);
    if (msg[0]) printf("%snote: %s\n", label, msg);
    return MPT_OK;
}

mpt_status mpt_run_backend_create(mpt_device_choice choice, mpt_backend **out, char *why, size_t len) {
    char msg[512];
    *out = NULL;
    if (choice == MPT_DEVICE_CHOICE_CPU) {
        *out = mpt_backend_cpu_create();
        snprintf(why, len, "cpu (--device cpu)");
        return MPT_OK;
    }
    if (choice == MPT_DEVICE_CHOICE_CUDA) {
        if (!mpt_cuda_available(msg, sizeof msg))
            return mpt_errorf(MPT_ERR_DEVICE, "--device cuda: %s (--device cpu or auto trains on the CPU)", msg);
        *out = mpt_backend_cuda_create();
        if (!*out) return mpt_errorf(MPT_ERR_DEVICE, "--device cuda: %s", mpt_last_error());
        mpt_cuda_available(msg, sizeof msg);
        snprintf(why, len, "cuda: %s", msg);
        return MPT_OK;
    }
    if (mpt_cuda_available(msg, sizeof msg)) {
        *out = mpt_backend_cuda_create();
        if (*out) {
            snprintf(why, len, "cuda: %s (--device auto)", msg);
            return MPT_OK;
        }
        snprintf(msg, sizeof msg, "%s", mpt_last_error());
    }
    *out = mpt_backend_cpu_create();
    snprintf(why, len, "cpu (--device auto: %s)", msg);
    return MPT_OK;
}

const mpt_telemetry_stat *mpt_run_stat(const mpt_run_result *r, const char *tensor, const char *metric) {
    for (int i = 0; i < r->n_telemetry; i++)
        if (strcmp(r->telemetry[i].tensor, tensor) == 0 && strcmp(r->telemetry[i].metric, metric) == 0)
            return &r->telemetry[i];
    return NULL;
}

double mpt_run_stat_mean(const mpt_run_result *r, const char *tensor, const char *metric) {
    const mpt_telemetry_stat *s = mpt_run_stat(r, tensor, metric);
    return s && s->count > 0 ? s->sum / (double)s->count : NAN;
}

void mpt_run_result_free(mpt_run_result *r) {
    free(r->epoch_s);
    free(r->epoch_gpu_s);
    free(r->epoch_cpu_s);
    free(r->final_master);
    free(r->init_master);
    free(r->telemetry);
    r->telemetry = NULL;
    r->n_telemetry = 0;
    r->epoch_s = NULL;
    r->epoch_gpu_s = NULL;
    r->epoch_cpu_s = NULL;
    r->final_master = NULL;
    r->init_master = NULL;
}

void mpt_run_evaluate(mpt_trainer *t, const uint8_t *images, const uint8_t *labels, const int32_t *idx_dev,
                      int64_t n, int64_t dim, float mean, float inv_std, double *loss, double *acc) {
    double sum = 0.0;
    int32_t correct = 0;
    mpt_trainer_evaluate(t, images, labels, idx_dev, n, t->g->batch, 0, dim, mean, inv_std, &sum, &correct);
    *loss = sum / (double)n;
    *acc = (double)correct / (double)n;
}

/* ---- one run ---------------------------------------------------------------------------------------------- */

/* The MPI job this process is one rank of (mptrain train --data-parallel), else NULL. */
static mpt_dist *train_dist;

void mpt_run_join(mpt_dist *d) { train_dist = d; }

/* The job of a sweep, whose peers' questions the runs answer between steps (mpt_run_answer), else NULL. */
static mpt_dist *answer_dist;

void mpt_run_answer(mpt_dist *d) { answer_dist = d; }

/* mpt_run_evaluate split over the ranks of a data-parallel job: the evaluation batches are those of one process
 * with the global batch Bg = B * ranks (idx_dev padded to a multiple of Bg), and rank r evaluates rows
 * [r B, (r + 1) B) of each, skipping a shard that holds only padding. The correct counts are integers, summed
 * over the ranks exactly. The loss: each batch's mean is summed in double and rounded once to FP32 by the loss
 * layer, then weighted by its valid rows and summed in double. One process rounds one mean per global batch,
 * the ranks one per shard, so with the same per-row losses l_i >= 0 the two totals differ by at most
 * 2^-24 (sum over the global batch + sum over the shards) = 2^-23 sum l_i, plus double roundings (< 2^-40
 * relative): the test loss agrees with one process to 2^-23 relative (tests/test_dist_cli.c); the per-row
 * losses themselves agree where the GEMMs give each row the same sums (docs/distributed.md). */
static void evaluate_sharded(mpt_trainer *t, const uint8_t *images, const uint8_t *labels, const int32_t *idx_dev,
                             int64_t n, int64_t dim, float mean, float inv_std, double *loss, double *acc) {
    if (!train_dist) {
        mpt_run_evaluate(t, images, labels, idx_dev, n, dim, mean, inv_std, loss, acc);
        return;
    }
    int B = t->g->batch, ranks = mpt_dist_size(train_dist);
    int64_t Bg = (int64_t)B * ranks, lo = (int64_t)mpt_dist_rank(train_dist) * B;
    double sum = 0.0;
    int32_t n_correct = 0;
    mpt_trainer_evaluate(t, images, labels, idx_dev, n, Bg, lo, dim, mean, inv_std, &sum, &n_correct);
    double correct = mpt_dist_sum_f64(train_dist, (double)n_correct);
    sum = mpt_dist_sum_f64(train_dist, sum);
    *loss = sum / (double)n;
    *acc = correct / (double)n;
}
typedef struct run {
    mpt_cli_opts o;
    int writer;              /* writes outputs: 1 unless a data-parallel rank other than 0 */
    int shard_lo, shard_b;   /* data-parallel: this rank's rows [lo, lo + b) of every global batch (0, B alone) */
    const mpt_mnist *d;
    mpt_cli_data_fp fp;      /* d's fingerprint */
    const char *label;       /* "" or "[fp16] " */
    mpt_backend *be;
    mpt_cli_device_data dd;
    mpt_policy policy;
    mpt_trainer *t;
    mpt_loader_split split;
    mpt_loader ld;
    int ld_ready;
    int64_t nb;              /* batches per epoch */
    int32_t *idx_host;       /* [nb * B] this epoch's rows (-1 = padding) */
    int *n_valid;            /* [nb] real rows per batch */
    int32_t *idx_epoch;      /* backend [nb * B] */
    int32_t *idx_test;       /* backend [ceil(n_test / B) * B] */
    int32_t *idx_val;        /* backend [ceil(n_val / B) * B] or NULL */
    size_t idx_bytes;        /* bytes of the three above (MPT_MEM_DATA) */
    mpt_csv steps_csv, epochs_csv, telemetry_csv;
    int64_t skip_seen_it, skip_seen_skipped; /* the skipped-steps warning: where its window starts */
    int skip_warned;
    mpt_run_state rs;
    int progress;            /* draw a progress bar */
    int interrupted;         /* the signal that stopped the run (tools/guards.h), 0 when it was not stopped */
    int warned_nonfinite_ckpt; /* said once that non-finite weights are not checkpointed */
    int ckpt_refused;        /* the latest save was refused for non-finite weights, state or scaler values */
    char ckpt_refused_why[320]; /* its message */
    int graph_noted;         /* said once that the step graph was turned off */
    void *mark_start, *mark_end; /* the epoch's device timing marks (CUDA events, engine/backend.h event_*), or NULL
                                    on a backend without device timing (CPU) */
    mpt_outdir od;           /* the output directory, open and locked (writer only) */
    int published;           /* this run's files have replaced an earlier run's in od */
    mpt_model_plan *plan;    /* the network planned on the data (setup) */
    int keep_telemetry;      /* resumed in its own directory without --telemetry: the earlier part's telemetry.csv,
                                exponents.csv and numerics plots stay (open_outdir) */
} run;

static int32_t *idx_alloc(run *r, size_t count) {
    size_t bytes = count * sizeof(int32_t);
    int32_t *p = r->be->alloc(r->be, bytes);
    if (p) {
        mpt_backend_account(r->be, MPT_MEM_DATA, (int64_t)bytes);
        r->idx_bytes += bytes;
    }
    return p;
}

/* Uploads rows[0..n) padded with -1 to a multiple of B. */
static mpt_status idx_upload_fixed(run *r, int32_t **dst, const int32_t *rows, int64_t n) {
    int B = r->o.batch;
    int64_t cnt = (n + B - 1) / B * B;
    *dst = idx_alloc(r, (size_t)cnt);
    int32_t *h = malloc((size_t)cnt * sizeof *h);
    if (!*dst || !h) {
        free(h);
        return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %lld index entries", (long long)cnt);
    }
    for (int64_t i = 0; i < cnt; i++) h[i] = i < n ? (rows ? rows[i] : (int32_t)i) : -1;
    r->be->from_host(r->be, *dst, h, (size_t)cnt * sizeof *h);
    r->be->synchronize(r->be);
    free(h);
    return MPT_OK;
}

/* Opens the run's CSV `name` (tools/csv.h): in the output directory, or /dev/null on a data-parallel rank that does
 * not write (writer 0); resuming (keep_upto >= 0), with this run's rows up to the checkpoint. */
static mpt_status open_csv(mpt_csv *c, run *r, const char *name, const char *header, int64_t keep_upto,
                           const char *run_id) {
    return mpt_csv_open(c, r->writer ? &r->od : NULL, name, header, keep_upto, run_id);
}

static void run_free(run *r) {
    free(r->plan);
    r->plan = NULL;
    mpt_csv *csvs[3] = {&r->steps_csv, &r->epochs_csv, &r->telemetry_csv};
    for (int i = 0; i < 3; i++) mpt_csv_discard(csvs[i]); /* a failed run: nothing more is published */
    mpt_outdir_close(&r->od);
    if (r->ld_ready) mpt_loader_free(&r->ld);
    mpt_loader_split_free(&r->split);
    mpt_trainer_free(&r->t);
    if (r->be) {
        if (r->mark_start) r->be->event_destroy(r->be, r->mark_start);
        if (r->mark_end) r->be->event_destroy(r->be, r->mark_end);
        int32_t *bufs[3] = {r->idx_epoch, r->idx_test, r->idx_val};
        for (int i = 0; i < 3; i++)
            if (bufs[i]) r->be->free(r->be, bufs[i]);
        mpt_backend_account(r->be, MPT_MEM_DATA, -(int64_t)r->idx_bytes);
        mpt_cli_data_release(&r->dd);
        mpt_backend_free(&r->be);
    }
    free(r->idx_host);
    free(r->n_valid);
}

static void progress_draw(const run *r, int64_t epoch, int64_t b, const mpt_train_stats *st) {
    mpt_progress_draw(r->label, epoch, r->o.epochs, b, r->nb, st->loss, st->scale, (int)st->steps_skipped);
}

/* Whether any weight the optimizer updates (masters, or the 16-bit weights without masters) holds inf/NaN:
 * possible only with --nonfinite apply. Synchronises. */
static int weights_nonfinite(run *r) {
    mpt_trainer *t = r->t;
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *w = t->master[i];
        int64_t n = mpt_tensor_numel(w);
        size_t esz = mpt_dtype_size(w->dtype);
        char *h = malloc((size_t)n * esz);
        if (!h) return 1; /* cannot look: count the weights as poisoned, so that no checkpoint is written of them */
        r->be->to_host(r->be, h, w->data, (size_t)n * esz);
        int bad = 0;
        for (int64_t k = 0; k < n && !bad; k++) bad = !isfinite(mpt_load_f32(h, w->dtype, k));
        free(h);
        if (bad) return 1;
    }
    return 0;
}

/* Warns once when most of the steps of the window were skipped for non-finite gradients: the weights are then
 * not training. Said as soon as the skipped steps are the majority and at least 3 (a dynamic scaler's first
 * backoff alone is no reason), and at the end of the run (final) whenever they are the majority; the window
 * starts again every 20 steps, so a run that recovers is not warned about later. */
static void warn_if_skipping(run *r, int64_t it, int32_t skipped, int final) {
    int64_t steps = it - r->skip_seen_it, sk = (int64_t)skipped - r->skip_seen_skipped;
    int majority = steps > 0 && 2 * sk > steps && (sk >= 3 || final);
    if (steps >= 20) {
        r->skip_seen_it = it;
        r->skip_seen_skipped = skipped;
    }
    if (r->skip_warned || !majority) return;
    r->skip_warned = 1;
    char ls[64];
    const mpt_cli_opts *o = &r->o;
    if (r->progress) printf("\r\033[K");
    printf("%swarning: %lld of the last %lld steps were skipped (non-finite gradients), so the weights are barely "
           "training", r->label, (long long)sk, (long long)steps);
    if (o->loss_scaling == MPT_LOSS_SCALE_STATIC)
        printf(": the fixed loss scale %s makes the scaled gradients overflow; use a smaller --loss-scale static:S "
               "or dynamic\n", mpt_cli_format(o, MPT_OPT_LOSS_SCALE, ls, sizeof ls));
    else
        printf("; look for inf/NaN in the loss or lower --lr\n");
}

/* What `train` draws from telemetry.csv (tools/report.c, mpt_report_plot_numerics): a run's files, so that they
 * leave with the telemetry they describe. */
#define TELEMETRY_PLOT_FILES "numerics.png", "numerics.gp", "numerics_twin.dat"

/* The earlier part's telemetry, which a run resumed in its own directory without --telemetry keeps. */
static int telemetry_file(const char *f) {
    static const char *const names[] = {"telemetry.csv", "exponents.csv", TELEMETRY_PLOT_FILES};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(f, names[i]) == 0) return 1;
    return 0;
}

/* The files of a run, the checkpoint first: the order in which a set that removes them runs (the checkpoint is what
 * commits a run's CSVs: without it, what is left is no run's state). Those of an earlier run that this run replaces
 * but may not write itself are removed with its first publish set (a directory never shows one run's checkpoint
 * beside another run's summary). */
static const char *const run_files[] = {MPT_CLI_CHECKPOINT_FILE, "metrics.csv",  "epochs.csv",      "telemetry.csv",
                                        "exponents.csv",         "summary.json", "gpu_kernels.txt", "FAILED",
                                        TELEMETRY_PLOT_FILES,    NULL};

mpt_status mpt_run_clear(const char *dir) {
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return MPT_OK; /* nothing of a run: the run will say why */
    mpt_outdir od;
    MPT_TRY(mpt_outdir_open(&od, dir, MPT_OUTDIR_NO_LINK, "compare (removing an earlier job's run)"));
    mpt_outdir_txn tx; /* one set: a stop midway leaves the run whole or gone */
    mpt_outdir_txn_begin(&tx, &od);
    mpt_status s = MPT_OK;
    for (int i = 0; run_files[i] && s == MPT_OK; i++) /* regular files only: anything else, the run refuses */
        if (fstatat(od.fd, run_files[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            s = mpt_outdir_txn_remove(&tx, run_files[i]);
    s = s == MPT_OK && tx.n > 0 ? mpt_outdir_txn_commit(&tx) : s;
    if (s == MPT_OK) mpt_outdir_close_remove_empty(&od);
    else mpt_outdir_close(&od);
    return s;
}

mpt_status mpt_run_clear_seeds(const char *out) {
    DIR *d = opendir(out);
    if (!d) return mpt_errorf(MPT_ERR_IO, "--out %s: cannot list it (%s)", out, strerror(errno));
    mpt_status s = MPT_OK;
    char dir[MPT_CLI_PATH + 320];
    for (struct dirent *e; s == MPT_OK && (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, "seed-", 5) != 0 || !n[5] || strspn(n + 5, "0123456789") != strlen(n + 5)) continue;
        for (int p = 0; p < MPT_PRECISION_COUNT && s == MPT_OK; p++) {
            snprintf(dir, sizeof dir, "%s/%s/%s", out, n, mpt_precision_name((mpt_precision)p));
            s = mpt_run_clear(dir);
        }
        snprintf(dir, sizeof dir, "%s/%s", out, n);
        if (s == MPT_OK) (void)rmdir(dir); /* only when empty: anything else in it stays */
    }
    closedir(d);
    return s;
}

/* Publishes the run's files as one set (tools/outdir.h, docs/checkpoints.md "The publish protocol"): the checkpoint,
 * the CSVs as they are now (this run's rows up to it), and, the first time, the removal of the files of an earlier
 * run in the directory that this run has not written yet (summary.json, ...; a new run's set also removes an earlier
 * run's checkpoint when it writes none). A kill at any instant, or a write that fails, leaves either the directory's
 * earlier set or this one. With --nonfinite apply the weights may have become inf/NaN; such a checkpoint could not be
 * resumed (and the writer may refuse it): the run then says so once and publishes its CSVs without one, keeping its
 * earlier checkpoint. */
static mpt_status save_checkpoint(run *r, int final) {
    if (!r->writer) return MPT_OK; /* rank 0 writes it; every rank holds the same masters */
    mpt_outdir_txn tx;
    mpt_outdir_txn_begin(&tx, &r->od);
    mpt_status s = MPT_OK;
    int staged = 0;
    if (r->o.nonfinite == MPT_NONFINITE_APPLY && weights_nonfinite(r)) {
        if (!r->warned_nonfinite_ckpt)
            printf("%swarning: the weights hold inf/NaN (--nonfinite apply let a non-finite step through): no "
                   "checkpoint is written from here on\n",
                   r->label);
        r->warned_nonfinite_ckpt = 1;
        r->ckpt_refused = 1;
        snprintf(r->ckpt_refused_why, sizeof r->ckpt_refused_why, "the weights hold inf/NaN (--nonfinite apply)");
    } else {
        s = mpt_run_checkpoint_stage(&tx, r->t, &r->o, &r->rs);
        r->ckpt_refused = s == MPT_ERR_NONFINITE;
        r->ckpt_refused_why[0] = '\0';
        if (s == MPT_ERR_NONFINITE) { /* diverged weights or state (e.g. the lab's FP16 optimizer state): the run goes
                                       * on and reports its numbers, but never overwrites a good checkpoint with them */
            snprintf(r->ckpt_refused_why, sizeof r->ckpt_refused_why, "%s", mpt_last_error());
            printf("%swarning: checkpoint not written: %s\n", r->label, mpt_last_error());
            s = MPT_OK;
        }
        staged = s == MPT_OK && !r->ckpt_refused;
    }
    if (s == MPT_OK) s = mpt_csv_stage(&r->steps_csv, final, &tx);
    if (s == MPT_OK) s = mpt_csv_stage(&r->epochs_csv, final, &tx);
    if (s == MPT_OK) s = mpt_csv_stage(&r->telemetry_csv, final, &tx);
    for (int i = 0; s == MPT_OK && !r->published && run_files[i]; i++) {
        const char *f = run_files[i];
        int ours = strcmp(f, "metrics.csv") == 0 || strcmp(f, "epochs.csv") == 0 ||
                   (r->t->telemetry && strcmp(f, "telemetry.csv") == 0) ||
                   (strcmp(f, MPT_CLI_CHECKPOINT_FILE) == 0 && (staged || r->o.resume[0])) ||
                   (r->keep_telemetry && telemetry_file(f));
        struct stat st;
        if (!ours && fstatat(r->od.fd, f, &st, AT_SYMLINK_NOFOLLOW) == 0) s = mpt_outdir_txn_remove(&tx, f);
    }
    if (s != MPT_OK) {
        mpt_outdir_txn_abort(&tx);
        return s;
    }
    MPT_TRY(mpt_outdir_txn_commit(&tx));
    r->published = 1;
    return MPT_OK;
}

/* Builds epoch e's index array (host and backend). */
static void load_epoch(run *r, int64_t e) {
    int B = r->o.batch;
    mpt_loader_start_epoch(&r->ld, e);
    for (int64_t b = 0; b < r->nb; b++) {
        int32_t *row = r->idx_host + b * B;
        int ok = mpt_loader_next(&r->ld, row, &r->n_valid[b]);
        MPT_ASSERT(ok);
        for (int k = r->n_valid[b]; k < B; k++) row[k] = -1;
    }
    r->be->from_host(r->be, r->idx_epoch, r->idx_host, (size_t)(r->nb * B) * sizeof(int32_t));
    r->be->synchronize(r->be);
}

/* --telemetry N [--shadow]: the collector, with an FP32 twin of the model when asked for. */
static mpt_status telemetry_setup(run *r) {
    mpt_graph *twin = NULL;
    if (r->o.shadow) {
        mpt_policy fp32 = mpt_policy_make(MPT_PRECISION_FP32);
        twin = mpt_graph_create(r->be, &fp32, r->o.batch);
        mpt_tensor *logits = NULL;
        mpt_status s = mpt_model_build_for(twin, r->o.model, &r->rs.data, &logits);
        if (s != MPT_OK) {
            mpt_graph_free(&twin);
            return s;
        }
        mpt_softmax_xent(twin, logits, "loss");
    }
    return mpt_telemetry_create(r->t, r->o.telemetry, twin);
}

/* The run's output directory, before the device is set up (rank 0 of a data-parallel job only): created, locked
 * for the run's life (a second run on it is refused, naming this one's PID), and no symbolic link or other odd file
 * in place of an output. */
static mpt_status open_outdir(run *r) {
    const mpt_cli_opts *o = &r->o;
    /* compare's and lab's runs (a label) write into directories they named: no link is followed there */
    MPT_TRY(mpt_outdir_open(&r->od, o->out, r->label[0] ? MPT_OUTDIR_NO_LINK : MPT_OUTDIR_USER_LINK,
                            r->label[0] ? "run of compare or lab" : "train"));
    return mpt_outdir_check_names(&r->od, run_files);
}

/* The output directory once the network is built and a resumed checkpoint loaded (open_outdir holds it since before
 * the device): no other run's checkpoint that a resume would replace, a resume's earlier telemetry kept, and room for
 * the run's files, so that a full disk is found now rather than after training. */
static mpt_status ready_outdir(run *r) {
    const mpt_cli_opts *o = &r->o;
    /* resuming into a directory that holds another run's checkpoint would replace it with this run's */
    char here[sizeof r->od.path + 64], theirs[17];
    snprintf(here, sizeof here, "%s/%s", o->out, MPT_CLI_CHECKPOINT_FILE);
    if (o->resume[0] && mpt_run_checkpoint_run_id(here, theirs) && strcmp(theirs, r->rs.run_id) != 0)
        return mpt_errorf(MPT_ERR_ARG, "--resume: %s is run %s's checkpoint, the one resumed is of run %s: continuing "
                          "there would replace the other run's; resume in the directory the checkpoint came from, or "
                          "give a new --out", here, theirs, r->rs.run_id);
    struct stat st;
    if (o->resume[0] && o->telemetry == 0 && mpt_run_checkpoint_run_id(here, theirs) &&
        strcmp(theirs, r->rs.run_id) == 0 && fstatat(r->od.fd, "telemetry.csv", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        /* its own earlier telemetry: kept as the record of the steps it measured (it was removed, and the plots drawn
         * from it stayed) */
        r->keep_telemetry = 1;
        printf("%snote: this resumed run measures no telemetry (no --telemetry): telemetry.csv, exponents.csv and "
               "the numerics plots in %s keep the earlier part's, up to step %lld (--telemetry N continues them)\n",
               r->label, o->out, (long long)r->rs.iteration);
    }
    int64_t steps = (int64_t)o->epochs * r->nb;
    if (o->max_steps > 0 && o->max_steps < steps) steps = o->max_steps;
    uint64_t ckpt = mpt_run_checkpoint_bytes(r->t);
    /* rows: metrics.csv ~ 100 bytes per logged step, epochs.csv ~ 200 per epoch, telemetry.csv ~ 60 bytes per
     * (tensor, metric) per telemetry step; each CSV exists twice while a copy is published */
    uint64_t rows = (uint64_t)(steps / o->log_every + 1) * 100 + (uint64_t)o->epochs * 200;
    if (o->telemetry > 0) rows += (uint64_t)(steps / o->telemetry + 1) * (uint64_t)r->t->n_params * 16 * 60;
    uint64_t need = ckpt + 2 * rows + (256 << 10);
    char what[160];
    snprintf(what, sizeof what, "a checkpoint of %.2f MiB while the previous one is kept, %.2f MiB of CSVs and the "
             "summary", (double)ckpt / 1048576.0, (double)rows / 1048576.0);
    return mpt_outdir_check_space(&r->od, need, what);
}

/* A new run's id: 16 hex digits from the kernel's random source (getrandom; the clock and PID without one). */
static void new_run_id(char id[17]) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
        x = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)clock();
    snprintf(id, 17, "%016llx", (unsigned long long)x);
}

/* ---- --cpu-kernels auto ----------------------------------------------------------------------------------------
 * Which CPU kernel set trains a bf16 run faster depends on the CPU (ARCHITECTURE decision 11: AMD Zen 4 runs BF16
 * dot products at twice FP32's rate, Intel cores without AMX do not): measured, like cudnn.benchmark, never assumed.
 * Where native can run the run's BF16 GEMMs (the mode's low-precision math is BF16, oneDNN and BF16 units are there,
 * --accum-model ieee, not data-parallel: the ranks must agree on their numerics), the same network is built twice on
 * scratch CPU backends, one per set, and trained AUTO_STEPS steps each on the run's first training rows, the two
 * trainers taking turns step by step; after a warm-up step each, the median step time (host clock) decides: native
 * only where it measured faster. The choice is the run's for all its layers (a layer's GEMMs share operand copies,
 * and one set per run keeps its numerics one documented thing), recorded as its --cpu-kernels in the checkpoint and
 * summary.json, with the two times. The scratch trainers touch nothing of the run (their own backends, weights and
 * state; the run's data is host memory, which every CPU backend reads). One process measures a (model, precision,
 * batch) once: compare's seeds and lab's runs reuse it, so the runs of a paired comparison share their set. */
enum { AUTO_STEPS = 5 };

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One scratch trainer of the run's network on a CPU backend with kernel set k, its batch staged from the first B
 * training rows. */
typedef struct auto_trainer {
    mpt_backend *be;
    mpt_trainer *t;
    int32_t *idx;
} auto_trainer;

static void auto_free(auto_trainer *a) {
    mpt_trainer_free(&a->t);
    if (a->be && a->idx) a->be->free(a->be, a->idx);
    mpt_backend_free(&a->be);
}

static mpt_status auto_make(run *r, mpt_cpu_kernels k, auto_trainer *a) {
    const mpt_cli_opts *o = &r->o;
    a->be = mpt_backend_cpu_create();
    MPT_TRY(mpt_backend_cpu_set_kernels(a->be, k));
    mpt_graph *g = mpt_graph_create(a->be, &r->policy, o->batch);
    mpt_tensor *logits = NULL;
    mpt_status s = mpt_model_build(g, o->model, &logits);
    if (s != MPT_OK) {
        mpt_graph_free(&g);
        return s;
    }
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_cli_train_config(o, 1000000);
    MPT_TRY(mpt_trainer_create(&a->t, g, &cfg));
    const size_t bytes = (size_t)o->batch * sizeof(int32_t);
    a->idx = a->be->alloc(a->be, bytes);
    if (!a->idx) return mpt_errorf(MPT_ERR_NOMEM, "--cpu-kernels auto: cannot allocate %zu bytes", bytes);
    for (int i = 0; i < o->batch; i++) a->idx[i] = i < r->d->n_train ? i : -1; /* CPU backend: host memory */
    return MPT_OK;
}

/* Resolves --cpu-kernels auto into r->o.cpu_kernels (and says so). */
static mpt_status resolve_auto_kernels(run *r, mpt_run_result *res) {
    mpt_cli_opts *o = &r->o;
    o->cpu_kernels_auto = 0;
    o->cpu_kernels = MPT_CPU_KERNELS_EMULATE;
    res->kernels_auto_s[0] = res->kernels_auto_s[1] = NAN;
    char why[256];
    const char *skip = NULL;
    if (mpt_mode_info(o->precision)->lowp_math != MPT_MATH_BF16) skip = "no bf16 GEMM in this precision";
    else if (!mpt_cpu_native_available(why, sizeof why)) skip = why;
    else if (o->accum_model != MPT_ACCUM_MODEL_IEEE) skip = "--accum-model models the emulate set's sums";
    else if (train_dist) skip = "data-parallel ranks keep one set (emulate)";
    if (skip) {
        snprintf(res->kernels_auto, sizeof res->kernels_auto, "auto: emulate (%s)", skip);
        return MPT_OK;
    }
    static struct {
        char model[sizeof ((mpt_cli_opts *)0)->model]; /* the spec */
        mpt_precision p;
        int batch;
        mpt_cpu_kernels k;
        double s[2];
    } seen[32];
    static int n_seen;
    for (int i = 0; i < n_seen; i++)
        if (strcmp(seen[i].model, o->model) == 0 && seen[i].p == o->precision && seen[i].batch == o->batch) {
            o->cpu_kernels = seen[i].k;
            res->kernels_auto_s[0] = seen[i].s[0], res->kernels_auto_s[1] = seen[i].s[1];
            snprintf(res->kernels_auto, sizeof res->kernels_auto, "auto: %s (as measured before in this process: a "
                     "step %.2f ms emulated, %.2f ms native)", mpt_cpu_kernels_name(seen[i].k), 1e3 * seen[i].s[0],
                     1e3 * seen[i].s[1]);
            return MPT_OK;
        }
    auto_trainer a[2] = {{0}, {0}};
    mpt_status s = auto_make(r, MPT_CPU_KERNELS_EMULATE, &a[0]);
    if (s == MPT_OK) s = auto_make(r, MPT_CPU_KERNELS_NATIVE, &a[1]);
    double t[2][AUTO_STEPS];
    for (int step = 0; s == MPT_OK && step <= AUTO_STEPS; step++)
        for (int k = 0; k < 2; k++) { /* turns: a drift of the machine's load falls on both */
            mpt_trainer_gather(a[k].t, r->dd.train_images, r->dd.train_labels, a[k].idx, r->d->dim, 0.0f, 1.0f);
            const double t0 = mono_s();
            mpt_trainer_step(a[k].t);
            a[k].be->synchronize(a[k].be);
            if (step > 0) t[k][step - 1] = mono_s() - t0; /* step 0: the warm-up */
        }
    auto_free(&a[0]);
    auto_free(&a[1]);
    MPT_TRY(s);
    for (int k = 0; k < 2; k++) {
        qsort(t[k], AUTO_STEPS, sizeof t[k][0], cmp_double);
        res->kernels_auto_s[k] = t[k][AUTO_STEPS / 2];
    }
    o->cpu_kernels = res->kernels_auto_s[1] < res->kernels_auto_s[0] ? MPT_CPU_KERNELS_NATIVE : MPT_CPU_KERNELS_EMULATE;
    snprintf(res->kernels_auto, sizeof res->kernels_auto, "auto: %s (a training step measured %.2f ms emulated, %.2f "
             "ms native: median of %d after a warm-up)", mpt_cpu_kernels_name(o->cpu_kernels),
             1e3 * res->kernels_auto_s[0], 1e3 * res->kernels_auto_s[1], AUTO_STEPS);
    if (n_seen < (int)(sizeof seen / sizeof seen[0])) {
        snprintf(seen[n_seen].model, sizeof seen[n_seen].model, "%s", o->model);
        seen[n_seen].p = o->precision, seen[n_seen].batch = o->batch, seen[n_seen].k = o->cpu_kernels;
        seen[n_seen].s[0] = res->kernels_auto_s[0], seen[n_seen].s[1] = res->kernels_auto_s[1];
        n_seen++;
    }
    return MPT_OK;
}

/* The untimed warm-up (o->untimed_warmup steps, before the run's graph is built): a throw-away trainer of the run's
 * network on the run's backend, trained on the first B training rows, then freed. What it warms is the backend's and
 * the process's, not the run's: on the GPU the CUDA context's lazily loaded kernels, the libraries' handles and their
 * caches, the memory pool; on the CPU the GEMM engine's threads and primitive caches. The run's own trainer is built
 * afterwards from its seed as always, so the run trains bit-identically with or without it (on the CPU: tests; on the
 * GPU as far as the libraries choose the same algorithms again); its own first step, which on the GPU chooses the
 * GEMM/convolution algorithms, and its second, which records the step graph, stay inside the timed region.
 * bench/pytorch_reference.py warms PyTorch up the same way, on a throw-away model. */
static mpt_status untimed_warmup(run *r) {
    const mpt_cli_opts *o = &r->o;
    mpt_graph *g = mpt_graph_create(r->be, &r->policy, r->shard_b);
    mpt_tensor *logits = NULL;
    mpt_status s = mpt_model_build_plan(g, r->plan, &logits);
    if (s != MPT_OK) {
        mpt_graph_free(&g);
        return s;
    }
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_cli_train_config(o, 1000000); /* any horizon: its schedule is thrown away */
    mpt_trainer *t = NULL;
    MPT_TRY(mpt_trainer_create(&t, g, &cfg));
    const int B = r->shard_b;
    int32_t *h = malloc((size_t)B * sizeof *h), *idx = r->be->alloc(r->be, (size_t)B * sizeof *idx);
    if (!h || !idx) {
        free(h);
        if (idx) r->be->free(r->be, idx);
        mpt_trainer_free(&t);
        return mpt_errorf(MPT_ERR_NOMEM, "--untimed-warmup: cannot allocate a batch of %d rows", B);
    }
    for (int i = 0; i < B; i++) h[i] = i < r->d->n_train ? i : -1;
    r->be->from_host(r->be, idx, h, (size_t)B * sizeof *h);
    for (int64_t k = 0; k < o->untimed_warmup; k++) {
        mpt_trainer_gather(t, r->dd.train_images, r->dd.train_labels, idx, r->d->dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
    }
    r->be->synchronize(r->be);
    mpt_trainer_free(&t);
    r->be->free(r->be, idx);
    free(h);
    return MPT_OK;
}

static mpt_status setup(run *r, mpt_run_result *res) {
    mpt_cli_opts *o = &r->o;
    char why[640];
    /* the network for this data: its shapes are checked (and a spec error named) before the device is set up */
    const mpt_model_input in = mpt_cli_data_input(r->d);
    if (o->resume[0]) {
        const mpt_model_input ck = r->rs.has_data ? r->rs.data : (mpt_model_input){1, 28, 28, MPT_MNIST_N_CLASSES};
        if (memcmp(&ck, &in, sizeof in) != 0)
            return mpt_errorf(MPT_ERR_ARG, "--resume %s: the checkpoint's network was built for %d x %d images with %d "
                              "channel(s) and %d classes, --data %s gives %d x %d images with %d channel(s) and %d "
                              "classes%s", o->resume, ck.height, ck.width, ck.channels, ck.classes, o->data, in.height,
                              in.width, in.channels, in.classes,
                              mpt_cli_given(o, MPT_OPT_CLASSES) ? " (--classes)" : "");
    }
    r->rs.data = in;
    r->rs.has_data = 1;
    mpt_model_plan *plan = r->plan = malloc(sizeof *plan);
    if (!plan) return mpt_errorf(MPT_ERR_NOMEM, "out of memory");
    mpt_status ps = mpt_model_plan_make(o->model, &in, plan);
    if (ps != MPT_OK) {
        char msg[1024], shortname[32];
        snprintf(msg, sizeof msg, "%s", mpt_last_error());
        return mpt_errorf(ps, "--model %s on --data %s (%d x %d images, %d channel(s), %d classes): %s",
                          mpt_cli_model_short(o->model, shortname, sizeof shortname), o->data, in.height, in.width,
                          in.channels, in.classes, msg);
    }

    /* the training split, the loader and the checks on them (a resume's data and position, the step-counting flags):
     * before the device, so that a flag or data error is said before anything is set up */
    int64_t n_val = (int64_t)llround(o->val_split * (double)r->d->n_train);
    if (o->val_split > 0.0 && n_val < 1) n_val = 1;
    mpt_status s = mpt_loader_split_make(&r->split, r->d->n_train, n_val, o->seed);
    if (s != MPT_OK) return mpt_errorf(s, "--val-split %g: %s", o->val_split, mpt_last_error());
    if (o->resume[0]) {
        if (r->rs.n_train != r->split.n_train || r->rs.n_val != r->split.n_val) {
            return mpt_errorf(MPT_ERR_ARG,
                              "--resume %s: the checkpoint trained on %lld images (%lld held out), this data gives "
                              "%lld (%lld): use the same --data",
                              o->resume, (long long)r->rs.n_train, (long long)r->rs.n_val, (long long)r->split.n_train,
                              (long long)r->split.n_val);
        }
        if (r->rs.fp_known && (r->rs.fp.n_train != r->fp.n_train || r->rs.fp.train_crc32 != r->fp.train_crc32)) {
            return mpt_errorf(MPT_ERR_ARG,
                              "--resume %s: the checkpoint trained on other images (%lld training images crc32 %08x) "
                              "than this --data %s gives (%lld, crc32 %08x): a run continues on the data it started "
                              "with; use the same --data and --limit-train, or start a new run", o->resume,
                              (long long)r->rs.fp.n_train, (unsigned)r->rs.fp.train_crc32, o->data,
                              (long long)r->fp.n_train, (unsigned)r->fp.train_crc32);
        }
        if (r->rs.fp_known && (r->rs.fp.n_test != r->fp.n_test || r->rs.fp.test_crc32 != r->fp.test_crc32))
            printf("%snote: the test set differs from the one the checkpoint's run evaluated on (%lld images crc32 %08x, "
                   "now %lld images crc32 %08x): from here on epochs.csv's test columns measure this one\n", r->label,
                   (long long)r->rs.fp.n_test, (unsigned)r->rs.fp.test_crc32, (long long)r->fp.n_test,
                   (unsigned)r->fp.test_crc32);
        int ranks = train_dist ? mpt_dist_size(train_dist) : 1;
        mpt_grad_comm wire = train_dist ? mpt_dist_comm(train_dist) : MPT_GRAD_COMM_FP32;
        if (r->rs.ranks != ranks || r->rs.grad_comm != wire) {
            return mpt_errorf(MPT_ERR_ARG,
                              "--resume %s: the checkpoint was trained by %d rank(s) with --grad-comm %s, this job has "
                              "%d with %s: resume with the same mpirun -np and --grad-comm (the shards and the "
                              "summation order depend on them)",
                              o->resume, r->rs.ranks, mpt_grad_comm_name(r->rs.grad_comm), ranks,
                              mpt_grad_comm_name(wire));
        }
    } else {
        r->rs.mean = 0.0f;
        r->rs.inv_std = 1.0f;
        if (o->standardize)
            mpt_loader_stats(r->d->train_images, r->d->dim, r->split.train, r->split.n_train, &r->rs.mean,
                             &r->rs.inv_std);
        r->rs.n_train = r->split.n_train;
        r->rs.n_val = r->split.n_val;
        r->rs.run_id[0] = '\0';
        r->rs.ranks = train_dist ? mpt_dist_size(train_dist) : 1;
        r->rs.grad_comm = train_dist ? mpt_dist_comm(train_dist) : MPT_GRAD_COMM_FP32;
    }
    MPT_TRY(mpt_loader_init(&r->ld, r->split.train, r->split.n_train, o->batch, MPT_LOADER_PAD_WRAP, 1, o->seed));
    r->ld_ready = 1;
    r->nb = mpt_loader_n_batches(&r->ld);
    if (o->resume[0] && (r->rs.batch >= r->nb || r->rs.iteration != r->rs.epoch * r->nb + r->rs.batch)) {
        return mpt_errorf(MPT_ERR_FORMAT,
                          "--resume %s: the checkpoint's position (epoch %lld, batch %lld, iteration %lld) is not "
                          "within this data's %lld batches per epoch (expected batch < %lld and iteration = epoch x "
                          "%lld + batch)",
                          o->resume, (long long)r->rs.epoch, (long long)r->rs.batch, (long long)r->rs.iteration,
                          (long long)r->nb, (long long)r->nb, (long long)r->nb);
    }
    r->rs.fp = r->fp; /* what this invocation trains and evaluates on, recorded from its first save */
    r->rs.fp_known = 1;
    if (!r->rs.run_id[0]) new_run_id(r->rs.run_id);
    snprintf(res->run_id, sizeof res->run_id, "%s", r->rs.run_id);

    MPT_TRY(mpt_cli_check_schedule(o, r->nb)); /* in the flags' terms, before the engine's own check */
    mpt_cli_schedule_notes(o, r->nb, r->label, stdout);

    if (r->writer) MPT_TRY(open_outdir(r)); /* a --out in use or not a directory: said before the device lines */

    /* one GPU per data-parallel rank: the rank's index on its node (llm.c's local_device_idx) */
    if (train_dist && o->device != MPT_DEVICE_CHOICE_CPU && mpt_cuda_available(NULL, 0))
        MPT_TRY(mpt_dist_select_gpu(train_dist));
    double tb = now_s();
    MPT_TRY(mpt_run_backend_create(o->device, &r->be, why, sizeof why));
    res->timing.backend_s = now_s() - tb;
    snprintf(res->device, sizeof res->device, "%s", r->be->name);
    if (train_dist && o->telemetry > 0 && r->be->device == MPT_DEVICE_CUDA)
        return mpt_errorf(MPT_ERR_ARG, "--telemetry with --data-parallel: the communication error is measured on the "
                                       "CPU backend only (--device cpu); on the GPU drop --telemetry");
    /* compare's runs (a label) share one device choice: its reason is said in full once, then "as above" */
    static char said_why[sizeof why];
    if (r->label[0] && strcmp(why, said_why) == 0)
        printf("%sdevice: %s (the same choice as above)\n", r->label, r->be->name);
    else
        printf("%sdevice: %s\n", r->label, why);
    snprintf(said_why, sizeof said_why, "%s", why);
    if (r->be->device == MPT_DEVICE_CPU || o->accum_model != MPT_ACCUM_MODEL_IEEE) /* refused on the GPU: says why */
        MPT_TRY(mpt_backend_cpu_set_accum(r->be, o->accum_model));
    tb = now_s();
    MPT_TRY(mpt_cli_data_upload(&r->dd, r->be, r->d));
    r->be->synchronize(r->be);
    res->timing.upload_s = now_s() - tb;
    r->policy = mpt_policy_make_switches(o->precision, o->tf32_matmul, o->tf32_conv);
    r->policy.fp8 = o->fp8;
    r->policy.norm_stats = o->norm_stats;
    if (o->norm_stats != MPT_NORM_STATS_FP32 && r->be->device != MPT_DEVICE_CPU)
        return mpt_errorf(MPT_ERR_DEVICE, "--norm-stats %s: the %s backend computes the normalisations' statistics in "
                          "FP32 with two passes only (the ablations run on the CPU backend): add --device cpu",
                          mpt_norm_stats_name(o->norm_stats), r->be->name);
    if (o->cpu_kernels_auto && r->be->device != MPT_DEVICE_CPU) o->cpu_kernels_auto = 0; /* the GPU's own kernels */
    if (o->cpu_kernels_auto) {
        tb = now_s();
        MPT_TRY(resolve_auto_kernels(r, res));
        res->timing.kernels_s = now_s() - tb;
        printf("%sCPU kernels %s\n", r->label, res->kernels_auto);
    }
    if (r->be->device == MPT_DEVICE_CPU) {
        MPT_TRY(mpt_backend_cpu_set_kernels(r->be, o->cpu_kernels));
        char engine[256];
        const int threads = mpt_cpu_set_threads(0);
        mpt_cpu_engine_describe(engine, sizeof engine);
        const mpt_mode_desc *mode = mpt_mode_info(o->precision);
        const int native = o->cpu_kernels == MPT_CPU_KERNELS_NATIVE && mode->lowp_math == MPT_MATH_BF16;
        char capped[128] = ""; /* OpenBLAS runs at most its MAX_THREADS: said, and recorded as what ran */
        if (o->threads > threads)
            snprintf(capped, sizeof capped, " %d: the most this OpenBLAS runs (its MAX_THREADS)", o->threads);
        printf("%sCPU backend: %d thread(s) (--threads%s); GEMMs and convolutions on %s; kernels %s (%s%s)\n", r->label,
               threads, capped, engine, mpt_cpu_kernels_name(o->cpu_kernels),
               native ? "bf16 on the CPU's BF16 units: round to nearest even, BF16 denormals read as zero, denormal "
                        "results flushed"
                      : "Tensor Core numerics emulated",
               native && mode->fp8 != MPT_FP8_KIND_NONE ? "; FP8 GEMMs emulated" : "");
        if (o->accum_model != MPT_ACCUM_MODEL_IEEE && !(mode->fp32_operands && !mpt_cli_tf32_reaches(o)))
            printf("%s--accum-model %s: the TF32, FP16 and BF16 GEMMs and convolutions sum their products as %s Tensor "
                   "Cores do (FP32 accumulator; a 16-bit output is that sum rounded once)\n", r->label,
                   mpt_accum_model_name(o->accum_model), mpt_accum_model_gpus(o->accum_model));
    } else if (o->cpu_kernels == MPT_CPU_KERNELS_NATIVE) {
        printf("%snote: --cpu-kernels native changes nothing on the %s backend\n", r->label, r->be->name);
    }
    if (mpt_policy_is_fp8(&r->policy)) MPT_TRY(mpt_run_fp8_device_check(r->be, o->precision, &r->policy.fp8, r->label));
    const int tf32_mode = mpt_mode_info(o->precision)->tf32_default;
    if (r->policy.tf32_override && tf32_mode)
        printf("%sNVIDIA_TF32_OVERRIDE=0 is set: TF32 is disabled, this tf32 run computes in full FP32\n", r->label);
    mpt_cli_switch_notes(o, r->policy.tf32_override && !tf32_mode, r->label, stdout);
    if (o->untimed_warmup > 0) {
        tb = now_s();
        MPT_TRY(untimed_warmup(r));
        res->timing.warmup_s = now_s() - tb;
        res->timing.warmup_steps = o->untimed_warmup;
    }
    const double build0 = now_s();
    mpt_graph *g = mpt_graph_create(r->be, &r->policy, r->shard_b);
    mpt_graph_set_shard(g, r->shard_lo, o->batch); /* dropout masks by the global row: those of N = 1 */
    mpt_tensor *logits = NULL;
    s = mpt_model_build_plan(g, plan, &logits);
    if (s != MPT_OK) {
        mpt_graph_free(&g);
        return s;
    }
    mpt_softmax_xent(g, logits, "loss");

    if (!o->resume[0] || r->rs.threads == 0)
        r->rs.threads = r->be->device == MPT_DEVICE_CPU ? mpt_cpu_set_threads(0) : 0;
    mpt_train_config cfg = mpt_cli_train_config(o, r->nb);
    /* checks the optimizer, schedule and scaler settings; owns g from here on, also on failure */
    MPT_TRY(mpt_trainer_create(&r->t, g, &cfg));
    if (r->be->capture_begin)
        printf("%sCUDA Graph: %s\n", r->label,
               o->cuda_graph ? "on: each step after the first is one replay of the recorded step (--cuda-graph off "
                               "runs every operation)"
                             : "off (--cuda-graph off): every operation of the step is launched on its own");
    else if (mpt_cli_given(o, MPT_OPT_CUDA_GRAPH))
        printf("%s--cuda-graph is ignored by the %s backend (it runs each operation as it is called)\n", r->label,
               r->be->name);
    char opt_in[512];
    if (r->be->device == MPT_DEVICE_CUDA && mpt_cuda_opt_in_on(opt_in, sizeof opt_in) > 0)
        printf("%sCUDA opt-in paths on: %s (built without a GPU and not yet checked on one: docs/cuda.md)\n", r->label,
               opt_in);
    if (o->resume[0]) MPT_TRY(mpt_run_checkpoint_load(o->resume, r->t));
    if (train_dist) MPT_TRY(mpt_dist_attach(train_dist, r->t)); /* refuses ranks whose masters differ */
    if (o->telemetry > 0) {
        MPT_TRY(telemetry_setup(r));
        printf("%stelemetry: on one step in %lld, the range and rounding of every tensor (what flushes to zero, becomes "
               "subnormal or overflows, also at other loss scales), lost weight updates%s%s -> telemetry.csv, "
               "exponents.csv (docs/numerics.md); the training itself is bit-identical\n",
               r->label, (long long)o->telemetry, o->shadow ? ", each tensor against an FP32 twin" : "",
               r->t->g->n_fp8 > 0 ? ", what the FP8 casts saturate and flush (also at s/2, 2s and, for gradients, in "
                                    "the other FP8 format)" : "");
    }

    r->idx_host = malloc((size_t)(r->nb * o->batch) * sizeof *r->idx_host);
    r->n_valid = malloc((size_t)r->nb * sizeof *r->n_valid);
    r->idx_epoch = idx_alloc(r, (size_t)(r->nb * o->batch));
    if (!r->idx_host || !r->n_valid || !r->idx_epoch)
        return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the index arrays of %lld batches", (long long)r->nb);
    MPT_TRY(idx_upload_fixed(r, &r->idx_test, NULL, r->d->n_test));
    if (r->split.n_val > 0) MPT_TRY(idx_upload_fixed(r, &r->idx_val, r->split.val, r->split.n_val));
    if (r->be->event_create) { /* the epoch's GPU time: two marks, made once, recorded around every epoch */
        MPT_TRY(r->be->event_create(r->be, &r->mark_start));
        MPT_TRY(r->be->event_create(r->be, &r->mark_end));
    }
    r->be->synchronize(r->be);
    res->timing.build_s = now_s() - build0;

    if (r->writer) MPT_TRY(ready_outdir(r));
    /* resuming: metrics.csv keeps this run's rows up to the checkpoint's step, epochs.csv its completed epochs */
    int resuming = o->resume[0] != 0;
    MPT_TRY(open_csv(&r->steps_csv, r, "metrics.csv", "step,epoch,loss,lr,loss_scale,steps_skipped",
                     resuming ? r->rs.iteration : -1, r->rs.run_id));
    MPT_TRY(open_csv(&r->epochs_csv, r, "epochs.csv",
                     "epoch,step,train_loss,test_loss,test_acc,val_loss,val_acc,train_s,eval_s,samples_per_s,"
                     "loss_scale,steps_skipped",
                     resuming ? r->rs.epoch : -1, r->rs.run_id));
    if (r->t->telemetry) {
        MPT_TRY(open_csv(&r->telemetry_csv, r, "telemetry.csv", MPT_TELEMETRY_CSV_HEADER,
                         resuming ? r->rs.iteration : -1, NULL));
        mpt_telemetry_set_csv(r->t->telemetry, r->telemetry_csv.of.f);
    }
    return MPT_OK;
}

static void print_header(const run *r) {
    const mpt_cli_opts *o = &r->o;
    char lr[64], ls[64];
    printf("%smodel %s, precision %s, optimizer %s, lr %s, batch %d, loss scale %s, seed %llu\n", r->label, o->model,
           mpt_precision_name(o->precision), mpt_optim_kind_name(o->optimizer), mpt_cli_format(o, MPT_OPT_LR, lr, sizeof lr), o->batch, mpt_cli_format(o, MPT_OPT_LOSS_SCALE, ls, sizeof ls),
           (unsigned long long)o->seed);
    printf("%sdata: %lld training images (%lld held out for validation), %lld test images, %lld steps per epoch; "
           "%d x %d images, %d channel(s), %d classes\n",
           r->label, (long long)r->split.n_train, (long long)r->split.n_val, (long long)r->d->n_test, (long long)r->nb,
           r->d->rows, r->d->cols, r->rs.data.channels, r->d->n_classes);
    if (train_dist)
        printf("%sdata-parallel: %d rank%s, each trains on %d of the %d rows of every batch; gradients all-reduced in "
               "%s\n", r->label, mpt_dist_size(train_dist), mpt_dist_size(train_dist) == 1 ? "" : "s", r->shard_b,
               o->batch, mpt_grad_comm_name(mpt_dist_comm(train_dist)));
    if (o->resume[0])
        printf("%sresuming %s at step %lld (epoch %lld, batch %lld)\n", r->label, o->resume, (long long)r->rs.iteration,
               (long long)r->rs.epoch + 1, (long long)r->rs.batch);
    fflush(stdout);
}

/* The data-parallel telemetry's communication error, measured in this run (mean over its telemetry steps):
 * over all gradients, and the tensor where it was largest. */
static void print_comm_error(const run *r) {
    const mpt_telemetry_stat *st;
    int n = mpt_telemetry_stats(r->t->telemetry, &st);
    const mpt_telemetry_stat *all = NULL, *worst = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(st[i].metric, "comm_rel_l2") != 0 || st[i].count == 0) continue;
        if (strcmp(st[i].tensor, MPT_TELEMETRY_ALL_PARAMS) == 0) all = &st[i];
        else if (!worst || st[i].sum / (double)st[i].count > worst->sum / (double)worst->count) worst = &st[i];
    }
    if (!all) {
        printf("%sdata-parallel: no telemetry step measured the communication error (fewer steps than --telemetry "
               "%lld)\n", r->label, (long long)r->o.telemetry);
        return;
    }
    mpt_grad_comm w = mpt_dist_comm(train_dist);
    printf("%sdata-parallel: the %s all-reduce's relative L2 error against an FP32 all-reduce of the same gradients "
           "(mean over %lld telemetry steps): %.3g over all gradients, largest in %s (%.3g)%s\n",
           r->label, mpt_grad_comm_name(w), (long long)all->count, all->sum / (double)all->count,
           worst ? worst->tensor : "-", worst ? worst->sum / (double)worst->count : 0.0,
           w == MPT_GRAD_COMM_FP32 ? " -- zero by construction: the wire is that FP32 all-reduce" : "");
}

/* Whether a stop was asked for (a stop signal, tools/guards.h): the run then stops before its next step. In a
 * data-parallel job the ranks agree (a sum over the ranks every step), so that all stop after the same step
 * even when only some of them got the signal. */
static int stop_asked(run *r) {
    int sig = mpt_guard_stop_signal(), any = train_dist ? mpt_dist_any(train_dist, sig != 0) : sig != 0;
    if (any && !r->interrupted) r->interrupted = sig ? sig : SIGTERM; /* a peer's signal */
    return any;
}

static mpt_status train_loop(run *r, mpt_run_result *res) {
    mpt_cli_opts *o = &r->o;
    mpt_trainer *t = r->t;
    mpt_backend *be = r->be;
    const mpt_mnist *d = r->d;
    int B = o->batch;
    res->epoch_s = calloc((size_t)o->epochs + 1, sizeof *res->epoch_s);
    res->epoch_cpu_s = calloc((size_t)o->epochs + 1, sizeof *res->epoch_cpu_s);
    if (r->mark_start) res->epoch_gpu_s = calloc((size_t)o->epochs + 1, sizeof *res->epoch_gpu_s);
    if (!res->epoch_s || !res->epoch_cpu_s || (r->mark_start && !res->epoch_gpu_s))
        return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the epoch times of %d epochs", o->epochs);
    double train_time = 0.0;
    int64_t samples = 0;
    int evaluated_last = 0;
    int stopped = 0;
    mpt_train_stats st;
    mpt_trainer_stats(t, &st);
    mpt_scaler_watch watch; /* warns once when the loss scale is stuck at its floor */
    mpt_scaler_watch_init(&watch, 10);
    res->best_test_acc = r->rs.best_epoch > 0 ? r->rs.best_test_acc : NAN;
    res->best_epoch = r->rs.best_epoch;
    if (o->max_steps > 0 && t->iteration >= o->max_steps) stopped = 1; /* a resumed run that is already there */
    r->skip_seen_it = t->iteration;
    r->skip_seen_skipped = st.steps_skipped;
    /* the time to result (mpt_run_timing): from here to the final evaluation's accuracy on the host */
    const double result0 = now_s(), result_cpu0 = cpu_now_s();
    res->timing.result_s = res->timing.result_cpu_s = NAN;

    for (int64_t e = r->rs.epoch; e < o->epochs && !stopped; e++) {
        const double order0 = now_s();
        load_epoch(r, e);
        res->timing.order_s += now_s() - order0;
        int64_t b0 = e == r->rs.epoch ? r->rs.batch : 0;
        /* a resumed epoch continues the mean of the losses logged before the checkpoint */
        double loss_sum = b0 > 0 ? r->rs.epoch_loss_sum : 0.0;
        int64_t loss_n = b0 > 0 ? r->rs.epoch_loss_n : 0, epoch_samples = 0;
        int pending_save = 0;
        /* The epoch's two clocks start on an idle stream (load_epoch synchronised): the host clock, and the
         * mark that takes the GPU's time stamp when the device reaches it (asynchronous, outside any recording). */
        double t0 = now_s(), c0 = cpu_now_s(), tel_h0, tel_c0;
        mpt_telemetry_time(t->telemetry, &tel_h0, &tel_c0);
        if (r->mark_start) be->event_record(be, r->mark_start);
        int64_t b;
        for (b = b0; b < r->nb; b++) {
            mpt_dist_poll(answer_dist ? answer_dist : train_dist); /* a peer waiting for this rank sees it working */
            if (stop_asked(r)) { /* a stop signal: the step before this one was the last */
                stopped = 1;
                break;
            }
            if (mpt_guard_save_asked() && r->writer) { /* SIGUSR1: a checkpoint here, with the rows up to it */
                r->rs.iteration = t->iteration;
                r->rs.epoch = e;
                r->rs.batch = b;
                r->rs.epoch_loss_sum = loss_sum;
                r->rs.epoch_loss_n = loss_n;
                MPT_TRY(save_checkpoint(r, 0));
                if (r->progress) printf("\r\033[K");
                printf("%sSIGUSR1: %s at step %lld in %s/%s; training goes on\n", r->label,
                       r->ckpt_refused ? "no checkpoint written (non-finite weights)" : "checkpoint written",
                       (long long)t->iteration, o->out, MPT_CLI_CHECKPOINT_FILE);
                fflush(stdout);
            }
            mpt_trainer_gather(t, r->dd.train_images, r->dd.train_labels, r->idx_epoch + b * B + r->shard_lo, d->dim,
                               r->rs.mean, r->rs.inv_std);
            /* valid rows come first in a batch (padding at its end): this shard's share of them */
            int local_valid = r->n_valid[b] - r->shard_lo;
            local_valid = local_valid < 0 ? 0 : local_valid > r->shard_b ? r->shard_b : local_valid;
            if (train_dist) mpt_dist_set_batch(train_dist, local_valid, r->n_valid[b]);
            mpt_trainer_step(t);
            if (t->replay_off && !r->graph_noted) { /* the step could not be recorded: say so once */
                if (r->progress) printf("\r\033[K");
                printf("%snote: CUDA Graph off for this run, every operation is launched on its own: %s\n", r->label,
                       t->replay_note);
                r->graph_noted = 1;
            }
            epoch_samples += r->n_valid[b];
            int64_t it = t->iteration;
            int last = b == r->nb - 1;
            int hit_max = o->max_steps > 0 && it >= o->max_steps;
            /* not at --max-steps: a stopped and resumed run logs exactly the straight run's rows */
            if (it % o->log_every == 0 || last) {
                mpt_trainer_stats(t, &st);
                if (train_dist) /* the global batch's mean loss, from each shard's mean over its valid rows */
                    st.loss = r->n_valid[b] > 0 ? (float)(mpt_dist_sum_f64(train_dist, (double)st.loss * local_valid) /
                                                          (double)r->n_valid[b])
                                                : 0.0f;
                MPT_TRY(mpt_csv_row(&r->steps_csv, "%lld,%lld,%.9g,%.9g,%.9g,%d", (long long)it, (long long)e + 1,
                                mpt_cli_nan_plain((double)st.loss), (double)mpt_lr_at(&t->cfg.schedule, it - 1), (double)st.scale,
                                (int)st.steps_skipped));
                if (isfinite(st.loss)) {
                    loss_sum += st.loss;
                    loss_n++;
                }
                if (r->progress) progress_draw(r, e, b, &st);
                warn_if_skipping(r, it, st.steps_skipped, 0);
                if (o->loss_scaling == MPT_LOSS_SCALE_DYNAMIC) {
                    mpt_scaler_state ss;
                    char msg[512];
                    mpt_scaler_read(be, t->scaler, &ss);
                    if (mpt_scaler_watch_check(&watch, &ss, &t->cfg.scaler, msg, sizeof msg)) {
                        if (r->progress) printf("\r\033[K");
                        printf("%swarning: %s\n", r->label, msg);
                    }
                }
            }
            if (o->save_every > 0 && it % o->save_every == 0) {
                if (last) {
                    pending_save = 1; /* after this epoch's evaluation, so a resume does not lose it */
                } else {
                    r->rs.iteration = it;
                    r->rs.epoch = e;
                    r->rs.batch = b + 1;
                    r->rs.epoch_loss_sum = loss_sum;
                    r->rs.epoch_loss_n = loss_n;
                    MPT_TRY(save_checkpoint(r, 0)); /* with the rows up to it */
                }
            }
            if (hit_max) {
                stopped = 1;
                b++;
                break;
            }
        }
        if (r->mark_end) be->event_record(be, r->mark_end);
        be->synchronize(be);
        double train_s = now_s() - t0, cpu_s = cpu_now_s() - c0;
        double gpu_s = NAN; /* the device's time between the marks, read after the synchronisation: no wait */
        if (r->mark_start) MPT_TRY(be->event_elapsed(be, r->mark_start, r->mark_end, &gpu_s));
        /* Training time without the instruments' own (mpt_telemetry_time): their host time is subtracted from the
         * host clock and from the device's time (the device is idle while they work: each hook starts from a
         * drained stream and drains its own work), their CPU time from the CPU time. */
        double tel_h1, tel_c1;
        mpt_telemetry_time(t->telemetry, &tel_h1, &tel_c1);
        const double tel_s = tel_h1 - tel_h0, tel_cpu_s = tel_c1 - tel_c0;
        train_s = train_s > tel_s ? train_s - tel_s : 0.0;
        cpu_s = cpu_s > tel_cpu_s ? cpu_s - tel_cpu_s : 0.0;
        if (isfinite(gpu_s)) gpu_s = gpu_s > tel_s ? gpu_s - tel_s : 0.0;
        res->telemetry_s += tel_s;
        res->telemetry_cpu_s += tel_cpu_s;
        train_time += train_s;
        samples += epoch_samples;
        MPT_TRY(mpt_csv_flush(&r->steps_csv));
        if (r->progress) {
            printf("\r\033[K");
            fflush(stdout);
        }
        r->rs.iteration = t->iteration;
        if (b < r->nb) { /* stopped inside the epoch: no evaluation row */
            r->rs.epoch = e;
            r->rs.batch = b;
            r->rs.epoch_loss_sum = loss_sum;
            r->rs.epoch_loss_n = loss_n;
            evaluated_last = 0;
            break;
        }
        r->rs.epoch = e + 1;
        r->rs.batch = 0;
        r->rs.epoch_loss_sum = 0.0;
        r->rs.epoch_loss_n = 0;
        double te0 = now_s(), tce0 = cpu_now_s();
        double test_loss, test_acc, val_loss = NAN, val_acc = NAN;
        evaluate_sharded(t, r->dd.test_images, r->dd.test_labels, r->idx_test, d->n_test, d->dim, r->rs.mean,
                         r->rs.inv_std, &test_loss, &test_acc);
        if (r->idx_val)
            evaluate_sharded(t, r->dd.train_images, r->dd.train_labels, r->idx_val, r->split.n_val, d->dim, r->rs.mean,
                             r->rs.inv_std, &val_loss, &val_acc);
        double eval_s = now_s() - te0;
        /* the latest result: the final one once the loop ends */
        res->timing.result_s = now_s() - result0;
        res->timing.result_cpu_s = cpu_now_s() - result_cpu0;
        res->timing.eval_s = eval_s;
        res->timing.eval_cpu_s = cpu_now_s() - tce0;
        mpt_trainer_stats(t, &st);
        double train_loss = loss_n ? loss_sum / (double)loss_n : NAN;
        test_loss = mpt_cli_nan_plain(test_loss); /* a non-finite loss is printed "nan", never "-nan" */
        val_loss = mpt_cli_nan_plain(val_loss);
        double sps = train_s > 0 ? (double)epoch_samples / train_s : 0.0;
        MPT_TRY(mpt_csv_row(&r->epochs_csv, "%lld,%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.6f,%.6f,%.2f,%.9g,%d",
                        (long long)e + 1, (long long)t->iteration, train_loss, test_loss, test_acc, val_loss, val_acc,
                        train_s, eval_s, sps, (double)st.scale, (int)st.steps_skipped));
        MPT_TRY(mpt_csv_flush(&r->epochs_csv));
        printf("%sepoch %lld/%d  train loss %.4f  test loss %.4f  test acc %.2f%%", r->label, (long long)e + 1,
               o->epochs, train_loss, test_loss, 100.0 * test_acc);
        if (r->idx_val) printf("  val acc %.2f%%", 100.0 * val_acc);
        if (res->epoch_gpu_s)
            printf("  %.0f samples/s  %.4f s host clock, %.4f s GPU (CUDA events)", sps, train_s, gpu_s);
        else
            printf("  %.0f samples/s  %.1f s host clock, %.1f s CPU", sps, train_s, cpu_s);
        if (t->telemetry) printf("  (telemetry %.2f s more, not counted)", tel_s);
        printf("  loss scale %g  skipped %d\n", (double)st.scale, (int)st.steps_skipped);
        fflush(stdout);
        if (res->epoch_gpu_s) res->epoch_gpu_s[res->epochs_run] = gpu_s;
        res->epoch_cpu_s[res->epochs_run] = cpu_s;
        res->epoch_s[res->epochs_run++] = train_s;
        res->final_test_loss = test_loss;
        res->final_test_acc = test_acc;
        res->final_train_loss = train_loss;
        res->final_val_loss = val_loss;
        res->final_val_acc = val_acc;
        if (!(res->best_test_acc >= test_acc)) { /* also when best is NAN */
            res->best_test_acc = test_acc;
            res->best_epoch = (int)e + 1;
        }
        r->rs.best_test_acc = res->best_test_acc;
        r->rs.best_epoch = res->best_epoch;
        evaluated_last = 1;
        if (pending_save) MPT_TRY(save_checkpoint(r, 0));
    }
    if (!evaluated_last && !r->interrupted) { /* stopped mid-epoch, or nothing left to train: evaluate the final weights */
        const double te0 = now_s(), tce0 = cpu_now_s();
        evaluate_sharded(t, r->dd.test_images, r->dd.test_labels, r->idx_test, d->n_test, d->dim, r->rs.mean,
                         r->rs.inv_std, &res->final_test_loss, &res->final_test_acc);
        res->timing.result_s = now_s() - result0;
        res->timing.result_cpu_s = cpu_now_s() - result_cpu0;
        res->timing.eval_s = now_s() - te0;
        res->timing.eval_cpu_s = cpu_now_s() - tce0;
        res->final_test_loss = mpt_cli_nan_plain(res->final_test_loss);
        printf("%sstopped at step %lld: test loss %.4f  test acc %.2f%%\n", r->label, (long long)t->iteration,
               res->final_test_loss, 100.0 * res->final_test_acc);
        if (!(res->best_test_acc >= res->final_test_acc)) {
            res->best_test_acc = res->final_test_acc;
            res->best_epoch = (int)r->rs.epoch + 1;
        }
    }
    if (r->telemetry_csv.of.f) mpt_telemetry_set_csv(t->telemetry, NULL);
    mpt_trainer_stats(t, &st);
    warn_if_skipping(r, t->iteration, st.steps_skipped, 1);
    const double save0 = now_s();
    MPT_TRY(save_checkpoint(r, 1));
    res->timing.outputs_s = now_s() - save0; /* mpt_run_train adds summary.json's */
    res->checkpoint_refused = r->ckpt_refused;
    snprintf(res->checkpoint_refused_why, sizeof res->checkpoint_refused_why, "%s",
             r->ckpt_refused ? r->ckpt_refused_why : "");
    res->iterations = t->iteration;
    res->interrupted = r->interrupted;
    /* undefined values are null in summary.json (docs/outputs.md): the per-epoch means without a completed epoch
     * (a stop inside the first), on every clock alike; the rate without a step */
    res->samples_per_s = samples > 0 && train_time > 0 ? (double)samples / train_time : NAN;
    double sum = 0.0;
    for (int i = 0; i < res->epochs_run; i++) sum += res->epoch_s[i];
    res->mean_epoch_s = res->epochs_run ? sum / res->epochs_run : NAN;
    sum = 0.0;
    for (int i = 0; i < res->epochs_run; i++) sum += res->epoch_cpu_s[i];
    res->mean_epoch_cpu_s = res->epochs_run ? sum / res->epochs_run : NAN;
    mpt_trainer_stats(t, &st);
    res->steps_skipped = st.steps_skipped;
    res->steps_nonfinite = st.steps_nonfinite;
    if (train_dist && train_time > 0.0) {
        double c = mpt_dist_comm_seconds(train_dist);
        printf("%sdata-parallel: %.3g s of the %.3g s of training went to the gradient all-reduce (%.1f%%; rank 0's "
               "wall clock, waiting for the slower rank included)\n",
               r->label, c, train_time, 100.0 * c / train_time);
    }
    if (train_dist && t->telemetry) print_comm_error(r);
    res->floor_hits = st.floor_hits;
    res->final_scale = st.scale;
    mpt_trainer_graph_status(t, res->cuda_graph, sizeof res->cuda_graph);
    if (o->nonfinite == MPT_NONFINITE_APPLY) {
        res->weights_nonfinite = weights_nonfinite(r);
        printf("%s--nonfinite apply: %d step(s) with inf/NaN gradients were applied; the weights are %s\n", r->label,
               (int)st.steps_nonfinite, res->weights_nonfinite ? "non-finite (the run is poisoned)" : "finite");
    }
    return MPT_OK;
}

/* On the GPU: what actually ran for every GEMM and convolution call site (cuBLASLt compute type, operand
 * types, algorithm; cuDNN algorithm and math type) into gpu_kernels.txt, and on stdout for `train`. */
static mpt_status write_gpu_records(run *r) {
    if (!r->writer) return MPT_OK;
    mpt_outfile of;
    MPT_TRY(mpt_outfile_open(&of, &r->od, "gpu_kernels.txt"));
    char graph[704];
    mpt_trainer_graph_status(r->t, graph, sizeof graph);
    fprintf(of.f, "CUDA Graph of the training step (--cuda-graph): %s\n", graph);
    mpt_cuda_print_gemm_records(r->be, of.f);
    mpt_cuda_print_conv_records(r->be, of.f);
    MPT_TRY(mpt_outfile_publish(&of));
    if (!r->label[0]) {
        mpt_cuda_print_gemm_records(r->be, stdout);
        mpt_cuda_print_conv_records(r->be, stdout);
    }
    printf("%sGPU kernels that ran: %s\n", r->label, of.path);
    return MPT_OK;
}

/* All FP32 masters, concatenated in parameter order, into a new host array; NULL with MPT_ERR_NOMEM's message when
 * it cannot be allocated. */
static float *collect_masters(run *r, int64_t *count) {
    mpt_trainer *t = r->t;
    int64_t n = 0;
    for (int i = 0; i < t->n_params; i++) n += mpt_tensor_numel(t->master[i]);
    float *w = malloc((size_t)n * sizeof(float));
    if (!w) {
        mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %lld bytes for a copy of the master weights",
                   (long long)n * (long long)sizeof(float));
        return NULL;
    }
    int64_t off = 0;
    for (int i = 0; i < t->n_params; i++) { /* 16-bit without masters (--master-weights none): widened */
        const mpt_tensor *m = t->master[i];
        int64_t k = mpt_tensor_numel(m);
        size_t esz = mpt_dtype_size(m->dtype);
        r->be->to_host(r->be, w + off, m->data, (size_t)k * esz);
        if (m->dtype != MPT_DTYPE_F32) /* widen in place, from the end: element j's bytes lie below float j */
            for (int64_t j = k - 1; j >= 0; j--) w[off + j] = mpt_load_f32(w + off, m->dtype, j);
        off += k;
    }
    *count = n;
    return w;
}

/* With --telemetry: exponents.csv, the run's exponent histograms of the activation gradients, unscaled
 * (engine/telemetry/telemetry.h, mpt_telemetry_write_exponents). */
static mpt_status write_exponents(run *r) {
    mpt_outfile of;
    MPT_TRY(mpt_outfile_open(&of, &r->od, "exponents.csv"));
    if (mpt_telemetry_write_exponents(r->t->telemetry, of.f) < 0) {
        mpt_status s = mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", of.path, strerror(errno ? errno : EIO));
        mpt_outfile_discard(&of);
        return s;
    }
    return mpt_outfile_publish(&of);
}

/* The command that continues a stopped run: the checkpoint carries its math and length, the command line this
 * invocation's own settings that the continuation needs to train and measure the same way (the data, its test set,
 * --max-steps, the logging and saving periods, the instruments: compare's default --telemetry 50 included, whose
 * telemetry.csv a resume without it would stop). */
static void resume_command(const mpt_cli_opts *o, char *b, size_t n) {
    mpt_cli_opts def;
    mpt_cli_opts_default(&def);
    size_t k = 0;
    b[0] = '\0';
    if (train_dist) /* the same ranks and wire (setup refuses others) */
        k = (size_t)snprintf(b, n, "mpirun -np %d ", mpt_dist_size(train_dist));
    snprintf(b + k, n - k, "mptrain train --resume ");
    char ck[MPT_CLI_PATH + 64];
    snprintf(ck, sizeof ck, "%s/%s", o->out, MPT_CLI_CHECKPOINT_FILE);
    mpt_cli_shell_word(b, n, ck);
    k = strlen(b);
    snprintf(b + k, n - k, " --out ");
    mpt_cli_shell_word(b, n, o->out);
    if (strcmp(o->data, def.data) != 0) {
        k = strlen(b);
        snprintf(b + k, n - k, " --data ");
        mpt_cli_shell_word(b, n, o->data);
    }
    k = strlen(b);
    if (o->limit_test > 0) k += (size_t)snprintf(b + k, n - k, " --limit-test %lld", (long long)o->limit_test);
    if (o->max_steps > 0) k += (size_t)snprintf(b + k, n - k, " --max-steps %lld", (long long)o->max_steps);
    if (o->log_every != def.log_every)
        k += (size_t)snprintf(b + k, n - k, " --log-every %lld", (long long)o->log_every);
    if (o->save_every > 0) k += (size_t)snprintf(b + k, n - k, " --save-every %lld", (long long)o->save_every);
    if (o->telemetry > 0) k += (size_t)snprintf(b + k, n - k, " --telemetry %lld", (long long)o->telemetry);
    if (o->telemetry > 0 && o->shadow) k += (size_t)snprintf(b + k, n - k, " --shadow");
    if (train_dist)
        snprintf(b + k, n - k, " --data-parallel --grad-comm %s", mpt_grad_comm_name(mpt_dist_comm(train_dist)));
}

mpt_status mpt_run_train(const mpt_cli_opts *o, const mpt_cli_data *cd, const char *label,
                             mpt_run_result *res) {
    memset(res, 0, sizeof *res);
    const double total0 = now_s();
    res->timing.result_s = res->timing.result_cpu_s = res->timing.eval_s = res->timing.eval_cpu_s = NAN;
    res->final_test_acc = res->best_test_acc = res->final_test_loss = res->final_train_loss = NAN;
    res->final_val_acc = res->final_val_loss = NAN;
    snprintf(res->out_dir, sizeof res->out_dir, "%s", o->out);
    run r;
    memset(&r, 0, sizeof r);
    r.od.fd = r.od.lock_fd = -1;
    r.o = *o;
    r.d = &cd->d;
    if (cd->fp.n_train == cd->d.n_train && cd->fp.n_test == cd->d.n_test) r.fp = cd->fp;
    else mpt_cli_data_fingerprint(&cd->d, &r.fp); /* a view of fewer rows (the lab's) */
    r.label = label;
    r.writer = !train_dist || mpt_dist_rank(train_dist) == 0;
    r.shard_b = train_dist ? o->batch / mpt_dist_size(train_dist) : o->batch;
    r.shard_lo = train_dist ? mpt_dist_rank(train_dist) * r.shard_b : 0;
    r.progress = r.writer && (o->progress == MPT_PROGRESS_ON || (o->progress == MPT_PROGRESS_AUTO && isatty(STDOUT_FILENO)));
    mpt_status s = MPT_OK;
    if (o->resume[0]) {
        mpt_cli_opts scratch;
        mpt_cli_opts_default(&scratch);
        s = mpt_run_checkpoint_read_config(o->resume, &scratch, &r.rs);
    }
    if (s == MPT_OK) s = setup(&r, res);
    if (s == MPT_OK) {
        if (!label[0]) mpt_graph_print_precision_map(r.t->g, stdout);
        print_header(&r);
        res->init_master = collect_masters(&r, &res->n_master);
        s = res->init_master ? train_loop(&r, res) : MPT_ERR_NOMEM;
    }
    const double outputs0 = now_s();
    if (s == MPT_OK && r.be->device == MPT_DEVICE_CUDA) s = write_gpu_records(&r);
    if (s == MPT_OK) {
        res->final_master = collect_masters(&r, &res->n_master);
        if (!res->final_master) s = MPT_ERR_NOMEM;
        for (int m = 0; m < MPT_MEM_COUNT; m++) res->mem_peak[m] = r.be->mem_peak[m];
        res->mem_peak_total = r.be->mem_peak_total;
        if (r.t->telemetry) {
            const mpt_telemetry_stat *st;
            res->n_telemetry = mpt_telemetry_stats(r.t->telemetry, &st);
            res->telemetry = malloc((size_t)res->n_telemetry * sizeof *st + 1);
            if (!res->telemetry) {
                s = mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the telemetry summary of %d values", res->n_telemetry);
                res->n_telemetry = 0;
            } else if (res->n_telemetry > 0) {
                memcpy(res->telemetry, st, (size_t)res->n_telemetry * sizeof *st);
            }
        }
        if (s == MPT_OK && r.writer) s = mpt_run_write_summary(&r.od, &r.o, res, r.t->g, &r.policy, &r.rs.data);
        if (s == MPT_OK && r.writer && r.t->telemetry) s = write_exponents(&r);
    }
    res->timing.outputs_s += now_s() - outputs0;
    if (s == MPT_OK && res->interrupted) {
        char cmd[3 * MPT_CLI_PATH + 512];
        resume_command(o, cmd, sizeof cmd);
        printf("%sinterrupted by %s at step %lld: the checkpoint, the CSVs and summary.json (marked interrupted) are "
               "saved in %s; continue with: %s\n", label, mpt_guard_signal_name(res->interrupted),
               (long long)res->iterations, o->out, cmd);
    }
    run_free(&r);
    res->timing.total_s = now_s() - total0;
    return s;
}

