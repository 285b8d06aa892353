/*
 * tools/sweep.c - the runs of a plan (compare: precision x seed; lab: a lesson's independent runs) dealt out to
 * the ranks of an MPI job, their results gathered on rank 0 in plan order; without a job, the plan in order
 * (see mpt_sweep_run in tools/sweep.h, docs/distributed.md).
 *
 * The schedule is static round-robin: run i on rank i mod N. Every rank knows the whole plan (the same command
 * line, or a batch broadcast by rank 0), so no rank waits for work during training and none has to answer
 * requests while OpenBLAS uses its cores; each run trains exactly as in one process (same seed, same code
 * path, its own backend), and which rank trained a run is known from the plan alone. The cost: no load
 * balancing, so a rank may idle for up to one run's time at the end when the runs differ in cost.
 *
 * Failure: a run that fails marks its directory (a file FAILED holding the message) and tells the other ranks,
 * who start no further runs; after the runs, the ranks agree on whether any failed (collective), rank 0
 * collects the failures and broadcasts the first (lowest rank) as the job's one-line error. Only when every
 * run succeeded do the results travel to rank 0, in plan order, and the command writes its reports.
 *
 * A result travels as bytes: the mpt_run_result struct (pointers cleared) followed by its arrays. Every rank
 * must run the same mptrain binary (a check on the size rejects a mismatch).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/sweep.h"

enum { TAG_ABORT = 7101, TAG_FAIL, TAG_RESULT };

#define FAIL_MSG 1500

/* One failure: which rank, which run (-1: before its runs), the status and the message. */
typedef struct fail_rec {
    int32_t rank, run, status;
    char label[128];
    char dir[MPT_CLI_PATH];
    char msg[FAIL_MSG];
} fail_rec;

/* ---- a result as bytes ------------------------------------------------------------------------------------- */

#define RESULT_MAGIC 0x5254504dU /* "MPTR" */

typedef struct result_head {
    uint32_t magic, struct_size;
    uint32_t has_final, has_init, has_epochs, has_telemetry, has_gpu_epochs, has_cpu_epochs;
} result_head;

static mpt_status result_pack(const mpt_run_result *r, unsigned char **out, int64_t *n) {
    result_head h = {RESULT_MAGIC, (uint32_t)sizeof *r, r->final_master != NULL, r->init_master != NULL,
                     r->epoch_s != NULL, r->telemetry != NULL, r->epoch_gpu_s != NULL, r->epoch_cpu_s != NULL};
    size_t ne = h.has_epochs ? (size_t)r->epochs_run : 0, nm = (size_t)r->n_master;
    size_t ng = h.has_gpu_epochs ? (size_t)r->epochs_run : 0, nc = h.has_cpu_epochs ? (size_t)r->epochs_run : 0;
    size_t nt = h.has_telemetry ? (size_t)r->n_telemetry : 0;
    size_t bytes = sizeof h + sizeof *r + (ne + ng + nc) * sizeof(double) +
                   (h.has_final + h.has_init) * nm * sizeof(float) + nt * sizeof(mpt_telemetry_stat);
    unsigned char *b = malloc(bytes), *p = b;
    if (!b) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %zu bytes for a run's result", bytes);
    mpt_run_result flat = *r;
    flat.epoch_s = flat.epoch_gpu_s = flat.epoch_cpu_s = NULL;
    flat.final_master = flat.init_master = NULL;
    flat.telemetry = NULL;
    memcpy(p, &h, sizeof h), p += sizeof h;
    memcpy(p, &flat, sizeof flat), p += sizeof flat;
    if (ne) memcpy(p, r->epoch_s, ne * sizeof(double)), p += ne * sizeof(double);
    if (ng) memcpy(p, r->epoch_gpu_s, ng * sizeof(double)), p += ng * sizeof(double);
    if (nc) memcpy(p, r->epoch_cpu_s, nc * sizeof(double)), p += nc * sizeof(double);
    if (h.has_final) memcpy(p, r->final_master, nm * sizeof(float)), p += nm * sizeof(float);
    if (h.has_init) memcpy(p, r->init_master, nm * sizeof(float)), p += nm * sizeof(float);
    if (nt) memcpy(p, r->telemetry, nt * sizeof(mpt_telemetry_stat));
    *out = b;
    *n = (int64_t)bytes;
    return MPT_OK;
}

/* A copy of n bytes at *p (advanced), or NULL when they are not there or cannot be allocated. */
static void *take(const unsigned char **p, const unsigned char *end, size_t n, int *bad) {
    if (n == 0 || *bad) return NULL;
    void *v = (size_t)(end - *p) >= n ? malloc(n) : NULL;
    if (!v) {
        *bad = 1;
        return NULL;
    }
    memcpy(v, *p, n);
    *p += n;
    return v;
}

static mpt_status result_unpack(const unsigned char *b, int64_t n, int from, mpt_run_result *r) {
    memset(r, 0, sizeof *r);
    result_head h;
    if (n < (int64_t)(sizeof h + sizeof *r)) goto malformed;
    memcpy(&h, b, sizeof h);
    if (h.magic != RESULT_MAGIC || h.struct_size != sizeof *r) goto malformed;
    memcpy(r, b + sizeof h, sizeof *r);
    r->epoch_s = r->epoch_gpu_s = r->epoch_cpu_s = NULL;
    r->final_master = r->init_master = NULL;
    r->telemetry = NULL;
    if (r->epochs_run < 0 || r->n_master < 0 || r->n_telemetry < 0) goto malformed;
    const unsigned char *p = b + sizeof h + sizeof *r, *end = b + n;
    int bad = 0;
    size_t nm = (size_t)r->n_master;
    if (h.has_epochs) r->epoch_s = take(&p, end, (size_t)r->epochs_run * sizeof(double), &bad);
    if (h.has_gpu_epochs) r->epoch_gpu_s = take(&p, end, (size_t)r->epochs_run * sizeof(double), &bad);
    if (h.has_cpu_epochs) r->epoch_cpu_s = take(&p, end, (size_t)r->epochs_run * sizeof(double), &bad);
    if (h.has_final) r->final_master = take(&p, end, nm * sizeof(float), &bad);
    if (h.has_init) r->init_master = take(&p, end, nm * sizeof(float), &bad);
    if (h.has_telemetry) r->telemetry = take(&p, end, (size_t)r->n_telemetry * sizeof(mpt_telemetry_stat), &bad);
    if (!bad && p == end) return MPT_OK;
    mpt_run_result_free(r);
malformed:
    memset(r, 0, sizeof *r);
    return mpt_errorf(MPT_ERR_FORMAT, "the result sent by rank %d is malformed (%lld bytes): every rank must run "
                                      "the same mptrain binary", from, (long long)n);
}

/* ---- the plan ------------------------------------------------------------------------------------------------ */

/* Marks a failed run's directory: dir/FAILED holds the message (best effort: the directory may not exist). The
 * error message (msg may be mpt_last_error()) is the same afterwards. */
static void mark_failed(const char *dir, const char *who, const char *msg) {
    char path[MPT_CLI_PATH + 16], saved[1024];
    snprintf(saved, sizeof saved, "%s", msg);
    snprintf(path, sizeof path, "%s/FAILED", dir);
    FILE *f = mpt_outdir_create_file(path);
    if (f) {
        fprintf(f, "%s%s\n", who, saved);
        (void)mpt_outdir_close_written(f, path);
    }
    mpt_errorf(MPT_ERR_IO, "%s", saved);
}

/* Removes a FAILED mark left by an earlier job in the directory a run is about to reuse. */
static mpt_status clear_mark(const char *dir) {
    char path[MPT_CLI_PATH + 16];
    snprintf(path, sizeof path, "%s/FAILED", dir);
    if (unlink(path) != 0 && errno != ENOENT && errno != ENOTDIR) /* ENOTDIR: the run's own error says it */
        return mpt_errorf(MPT_ERR_IO, "%s: cannot remove the mark of an earlier failed run (%s)", path, strerror(errno));
    return MPT_OK;
}

static mpt_status sweep_alone(const mpt_sweep *sw, mpt_status setup) {
    if (setup != MPT_OK) return setup;
    if (sw->start) MPT_TRY(sw->start(sw->ctx));
    for (int i = 0; i < sw->n; i++) {
        char label[128], dir[MPT_CLI_PATH];
        sw->describe(sw->ctx, i, label, sizeof label, dir, sizeof dir);
        MPT_TRY(clear_mark(dir));
        mpt_run_result r;
        memset(&r, 0, sizeof r);
        mpt_status s = sw->train(sw->ctx, i, &r);
        if (s != MPT_OK) {
            mark_failed(dir, "", mpt_last_error());
            mpt_run_result_free(&r);
            return s;
        }
        MPT_TRY(sw->deliver(sw->ctx, i, &r));
    }
    return MPT_OK;
}

/* Rank 0 learns every failure and picks the lowest rank's; every rank receives it. */
static mpt_status agree_on_failure(mpt_dist *d, fail_rec *mine, int failed, int n_failed, fail_rec *out) {
    int rank = mpt_dist_rank(d);
    if (rank != 0 && failed) MPT_TRY(mpt_dist_send(d, 0, TAG_FAIL, mine, sizeof *mine, "rank 0 to take this rank's failure"));
    void *b = NULL;
    int64_t n = 0;
    if (rank == 0) {
        *out = *mine;
        int have = failed;
        for (int k = 0; k < n_failed - failed; k++) {
            MPT_TRY(mpt_dist_recv(d, -1, TAG_FAIL, &b, &n, NULL, "the failures of the other ranks"));
            fail_rec f;
            memset(&f, 0, sizeof f);
            memcpy(&f, b, n < (int64_t)sizeof f ? (size_t)n : sizeof f);
            f.msg[FAIL_MSG - 1] = f.label[sizeof f.label - 1] = f.dir[sizeof f.dir - 1] = 0;
            free(b);
            if (!have || f.rank < out->rank) *out = f;
            have = 1;
        }
        b = out;
        n = sizeof *out;
    }
    MPT_TRY(mpt_dist_bcast(d, 0, &b, &n, "the failure that ends the job (from rank 0)"));
    if (rank != 0) {
        memset(out, 0, sizeof *out);
        memcpy(out, b, n < (int64_t)sizeof *out ? (size_t)n : sizeof *out);
        out->msg[FAIL_MSG - 1] = out->label[sizeof out->label - 1] = out->dir[sizeof out->dir - 1] = 0;
        free(b);
    }
    return MPT_OK;
}

/* Rank 0 receives the results in plan order and delivers them; the others send theirs. */
static mpt_status gather_results(mpt_dist *d, const mpt_sweep *sw, mpt_run_result *mine) {
    int rank = mpt_dist_rank(d), size = mpt_dist_size(d);
    mpt_status first = MPT_OK;
    for (int i = 0; i < sw->n; i++) {
        int owner = i % size;
        mpt_status s = MPT_OK;
        if (rank == 0) {
            mpt_run_result r;
            memset(&r, 0, sizeof r);
            if (owner == 0) {
                r = mine[i];
                memset(&mine[i], 0, sizeof mine[i]);
            } else {
                void *b = NULL;
                int64_t n = 0;
                char what[96];
                snprintf(what, sizeof what, "the result of run %d from rank %d", i + 1, owner);
                s = mpt_dist_recv(d, owner, TAG_RESULT, &b, &n, NULL, what);
                if (s == MPT_OK) s = result_unpack(b, n, owner, &r);
                free(b);
            }
            char label[128], dir[MPT_CLI_PATH], path[MPT_CLI_PATH + 32];
            sw->describe(sw->ctx, i, label, sizeof label, dir, sizeof dir);
            snprintf(path, sizeof path, "%s/summary.json", dir);
            struct stat st;
            if (s == MPT_OK && owner != 0 && stat(path, &st) != 0)
                s = mpt_errorf(MPT_ERR_IO, "run '%s' was trained by rank %d into %s, which rank 0 cannot see (%s): "
                                           "--out must be on a file system that every rank shares",
                               label, owner, dir, strerror(errno));
            if (s == MPT_OK && first == MPT_OK) s = sw->deliver(sw->ctx, i, &r);
            else mpt_run_result_free(&r);
        } else if (owner == rank) {
            unsigned char *b = NULL;
            int64_t n = 0;
            s = result_pack(&mine[i], &b, &n);
            mpt_run_result_free(&mine[i]);
            /* a result that cannot be packed still sends a message, so rank 0 does not wait for it forever */
            char what[96];
            snprintf(what, sizeof what, "rank 0 to take the result of run %d", i + 1);
            if (s == MPT_OK) s = mpt_dist_send(d, 0, TAG_RESULT, b, n, what);
            else (void)mpt_dist_send(d, 0, TAG_RESULT, "", 0, what);
            free(b);
        }
        if (s != MPT_OK && first == MPT_OK) first = s;
    }
    return first;
}

static mpt_status sweep_job(mpt_dist *d, const mpt_sweep *sw, mpt_status setup) {
    int rank = mpt_dist_rank(d), size = mpt_dist_size(d);
    fail_rec *mine = calloc(1, sizeof *mine);
    mpt_run_result *res = calloc((size_t)(sw->n > 0 ? sw->n : 1), sizeof *res);
    int failed = 0, signalled = 0;
    if (!mine || !res) {
        free(mine);
        free(res);
        return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the results of %d runs", sw->n);
    }
    if (setup != MPT_OK) {
        failed = 1;
        *mine = (fail_rec){.rank = rank, .run = -1, .status = setup};
        snprintf(mine->msg, sizeof mine->msg, "%s", mpt_last_error());
    }
    int any = failed;
    mpt_status s = mpt_dist_sum_int(d, &any, "every rank ready to start the plan (its data loaded)");
    /* the ranks run one plan: the same settings, data and run list, or none starts (one line, exit 2) */
    if (s == MPT_OK && any == 0 && sw->n_plan > 0) {
        s = mpt_dist_agree(d, sw->plan, sw->n_plan);
        if (s != MPT_OK) {
            free(mine);
            free(res);
            return s;
        }
    }
    if (s == MPT_OK && any == 0 && sw->start) { /* rank 0 starts the job: every rank is ready and agrees */
        if (rank == 0) {
            mpt_status st = sw->start(sw->ctx);
            if (st != MPT_OK) {
                failed = 1;
                *mine = (fail_rec){.rank = rank, .run = -1, .status = st};
                snprintf(mine->msg, sizeof mine->msg, "%s", mpt_last_error());
            }
        }
        any = failed;
        s = mpt_dist_sum_int(d, &any, "rank 0 to start the job (an earlier job's results removed)");
    }
    for (int i = rank; s == MPT_OK && any == 0 && i < sw->n; i += size) {
        if (mpt_dist_signalled(d, TAG_ABORT)) break; /* another rank failed: start nothing more */
        char label[128], dir[MPT_CLI_PATH];
        sw->describe(sw->ctx, i, label, sizeof label, dir, sizeof dir);
        mpt_status rs = clear_mark(dir);
        if (rs == MPT_OK) rs = sw->train(sw->ctx, i, &res[i]);
        if (rs == MPT_OK) continue;
        failed = 1;
        *mine = (fail_rec){.rank = rank, .run = i, .status = rs};
        snprintf(mine->label, sizeof mine->label, "%s", label);
        snprintf(mine->dir, sizeof mine->dir, "%s", dir);
        snprintf(mine->msg, sizeof mine->msg, "%s", mpt_last_error());
        char who[32];
        snprintf(who, sizeof who, "rank %d: ", rank);
        mark_failed(dir, who, mine->msg);
        mpt_run_result_free(&res[i]);
        s = mpt_dist_signal(d, TAG_ABORT);
        signalled = s == MPT_OK;
        break;
    }
    int n_failed = failed, n_signals = signalled;
    if (s == MPT_OK) s = mpt_dist_sum_int(d, &n_failed, "the end of every rank's runs");
    if (s == MPT_OK) s = mpt_dist_sum_int(d, &n_signals, "the count of failure signals");
    if (s == MPT_OK) s = mpt_dist_signal_drain(d, TAG_ABORT, n_signals - signalled);
    fail_rec *job = mine; /* reused for the agreed failure */
    if (s == MPT_OK && n_failed > 0) {
        fail_rec mine_copy = *mine;
        s = agree_on_failure(d, &mine_copy, failed, n_failed, job);
        if (s == MPT_OK) {
            if (job->run < 0)
                s = mpt_errorf((mpt_status)job->status, "rank %d of %d (before its runs): %s", job->rank, size, job->msg);
            else
                s = mpt_errorf((mpt_status)job->status, "rank %d of %d, run %d of %d '%s' (%s): %s", job->rank, size,
                               job->run + 1, sw->n, job->label, job->dir, job->msg);
        }
    } else if (s == MPT_OK) {
        s = gather_results(d, sw, res);
    }
    for (int i = 0; i < sw->n; i++) mpt_run_result_free(&res[i]);
    free(res);
    free(mine);
    return s;
}

mpt_status mpt_sweep_run(mpt_dist *d, const mpt_sweep *sw, mpt_status setup) {
    return d ? sweep_job(d, sw, setup) : sweep_alone(sw, setup);
}

/* ---- joining the job ------------------------------------------------------------------------------------------- */

mpt_status mpt_sweep_join(mpt_dist **out) {
    *out = NULL;
    int env = mpt_dist_env_size();
    if (env == 0) return MPT_OK;
    if (!mpt_dist_built()) {
        if (env == 1) return MPT_OK;
        return mpt_errorf(MPT_ERR_ARG, "started as one of %d MPI ranks, but this mptrain was built without MPI, so "
                                       "every rank would run the whole plan into the same --out: run it without "
                                       "mpirun, or install libopenmpi-dev openmpi-bin and rebuild (meson setup "
                                       "--reconfigure build -Dmpi=enabled)", env);
    }
    mpt_dist *d = NULL;
    MPT_TRY(mpt_dist_init(&d, MPT_GRAD_COMM_FP32));
    if (mpt_dist_size(d) < 2) {
        mpt_dist_free(&d); /* one rank: the single-process path */
        return MPT_OK;
    }
    *out = d;
    return MPT_OK;
}

int mpt_sweep_threads(const mpt_dist *d, int given, char *why, size_t n) {
    if (given > 0) {
        snprintf(why, n, "--threads %d", given);
        return given;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
    cpu_set_t set;
    CPU_ZERO(&set);
    int bound = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)online;
    if (bound >= 1 && bound < online) {
        snprintf(why, n, "the %d CPU(s) the launcher bound this rank to", bound);
        return bound;
    }
    int local = d ? mpt_dist_local_size(d) : 1;
    int t = (int)online / (local > 0 ? local : 1);
    if (t < 1) t = 1;
    snprintf(why, n, "the node's %ld cores shared by its %d rank(s)", online, local);
    return t;
}

void mpt_sweep_announce(const mpt_dist *d, int n, int threads, const char *why) {
    int rank = mpt_dist_rank(d), size = mpt_dist_size(d), shown = 0;
    printf("rank %d of %d: trains run(s)", rank, size);
    for (int i = rank; i < n && shown < 8; i += size, shown++) printf("%s %d", shown ? "," : "", i + 1);
    if (rank + 8 * size < n) printf(", ...");
    if (shown == 0) printf(" none");
    printf(" of %d (round-robin); %d OpenBLAS thread(s): %s\n", n, threads, why);
    fflush(stdout);
}
