/*
 * engine/dist/dist_mpi.c - engine/dist over MPI (Open MPI): the gradient all-reduce in FP32/BF16/FP16, the
 * agreed found_inf and the identical-start checksum (see engine/dist/dist.h for the math and the sources).
 * Host memory only: the CPU backend's tensors are host buffers.
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/dist/dist.h"
#include "engine/cuda_backend.h"
#include "engine/train.h"
#include "engine/numerics.h"

struct mpt_dist {
    MPI_Comm comm;
    MPI_Comm exit_comm;    /* a duplicate of comm for the exit agreement only (mpt_dist_finish), or MPI_COMM_NULL */
    MPI_Comm diag_comm;    /* a duplicate for the questions of a timed-out collective (who has arrived?) */
    double timeout_s;      /* the limit of every wait (--comm-timeout): see "bounded waits" */
    int64_t seq;           /* training collectives begun on this rank: the same count on every rank */
    const char *wait_what; /* what this rank waits for now (said to a peer that asks), NULL while it works */
    double wait_since;     /* since when (wall_s) */
    int64_t probes;        /* questions this rank has asked its peers */
    int rank, size;
    int local_size;        /* ranks on this node */
    int local_rank;        /* this rank's index among them */
    MPI_Request *signals;  /* [size] this rank's pending signal sends (mpt_dist_signal) */
    int n_signals;
    int owns_mpi;          /* this mpt_dist called MPI_Init */
    mpt_grad_comm wire;
    MPI_Op sum16;          /* user op: sum of two BF16 or FP16 vectors, rounded to the dtype */
    float weight;          /* w_r of the next step */
    float *flat;           /* [cap] every gradient, packed (FP32 wire) */
    uint16_t *flat16;      /* [cap] the same in the 16-bit wire dtype */
    int64_t cap;
    double comm_s;
    /* communication error (telemetry steps): the FP32 reference and its results */
    float *ref;            /* [ref_cap] the weighted gradients, all-reduced in FP32 */
    int64_t ref_cap;
    double *err;           /* [n_err] per gradient tensor */
    int n_err;
    double err_all;
    int64_t err_step;      /* 1-based step of the last measurement, 0 = none */
    /* the CUDA backend's path: NCCL (kernels/cuda/nccl.cu) */
    mpt_nccl_comm *nccl;   /* this rank's communicator, or NULL */
    int64_t nccl_elems;    /* the gradient elements it was made for */
    float **bufs;          /* [n_bufs] the gradients' device buffers of the attached trainer */
    int64_t *counts;       /* [n_bufs] their elements */
    int n_bufs;
};

/* MPI user ops: inout <- RNE(in + inout) in the wire dtype (NCCL's half / bfloat16 sum). */
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = mpt_f32_to_bf16(mpt_bf16_to_f32(a[i]) + mpt_bf16_to_f32(b[i]));
}

static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = mpt_f32_to_f16(mpt_f16_to_f32(a[i]) + mpt_f16_to_f32(b[i]));
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static mpt_status mpi_error(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return mpt_errorf(MPT_ERR_IO, "%s failed: %s", what, msg);
}

/* ---- bounded waits ------------------------------------------------------------------------------------------
 * Every wait of this file is bounded by the job's time limit (--comm-timeout, timeout_s; PyTorch's NCCL watchdog:
 * 600 s by default), and says what it waited for when the limit is hit. A rank that was stopped (SIGSTOP), hung or
 * killed, or ranks that wait for each other in different calls, would otherwise leave their peers waiting forever.
 *
 * Questions: a waiting rank can ask every peer, on a communicator of its own (diag_comm), where it is: its count of
 * training collectives begun (seq) and what it waits for and how long (nothing: it is working). A rank answers
 * while it waits (every wait here polls) and, between the steps of a training run, when the run calls mpt_dist_poll.
 *
 * Two kinds of wait:
 *  - A training collective (coll_wait) completes within the limit or the job is aborted: every rank runs the same
 *    steps, so a collective that takes longer than the limit means a peer that is stopped, hung or dead. The wait
 *    spins on MPI_Test for the first second (a step's collectives take microseconds to milliseconds), then answers
 *    questions and sleeps 200 us between tests. At the limit the rank asks its peers, names in one line on stderr the
 *    ranks that did not answer or are in another collective, and aborts the job (ncclCommAbort, then MPI_Abort).
 *  - The other waits (a sweep's messages and agreements, the settings agreement, the exit agreement) may last as
 *    long as a peer's training runs, which no limit can know. Each time the limit passes, the rank asks its peers:
 *    one that does not answer within a grace period (stopped, hung or dead), or every peer waiting too, each for
 *    longer than the limit (the ranks wait for each other: they will never move), ends the job with one line naming
 *    the ranks and what each waits for; peers that are working (training) or have waited less extend the wait by
 *    another period. These waits do not spin: they test the request and sleep 50 us to 2 ms between tests (Open
 *    MPI's blocking calls poll at full speed and would take a core from the ranks still training). */

enum { TAG_WHERE = 7201, TAG_HERE }; /* on diag_comm */

/* A question and its answer (bytes between ranks of one binary). */
typedef struct where_msg {
    int64_t probe;       /* the asker's question number, echoed: a late answer to an earlier question is discarded */
    int64_t seq;         /* training collectives begun */
    double waited;       /* seconds in the current wait, -1 while working */
    char what[112];      /* what it waits for, "" while working */
} where_msg;

static void sleep_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Answers every question that has arrived: where this rank is. */
static void answer_questions(mpt_dist *d) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_WHERE, d->diag_comm, &flag, &st) != MPI_SUCCESS || !flag) return;
        where_msg q, a;
        if (MPI_Recv(&q, (int)sizeof q, MPI_BYTE, st.MPI_SOURCE, TAG_WHERE, d->diag_comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return;
        memset(&a, 0, sizeof a);
        a.probe = q.probe;
        a.seq = d->seq;
        a.waited = d->wait_what ? wall_s() - d->wait_since : -1.0;
        snprintf(a.what, sizeof a.what, "%s", d->wait_what ? d->wait_what : "");
        MPI_Send(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_HERE, d->diag_comm); /* small: sent eagerly */
    }
}

void mpt_dist_poll(mpt_dist *d) {
    if (d && d->size > 1) answer_questions(d);
}

/* Seconds a rank gives its peers to answer: they answer between two steps or two tests of a wait. */
static double grace_s(const mpt_dist *d) {
    double g = d->timeout_s / 10.0;
    return g < 10.0 ? 10.0 : g > 60.0 ? 60.0 : g;
}

/* Asks every peer where it is and collects the answers for up to grace_s (answering questions meanwhile): heard[r],
 * where[r]. With req (the request this rank waits for), stops early and returns 1 when it completes. */
static int ask_peers(mpt_dist *d, MPI_Request *req, char *heard, where_msg *where) {
    int n = d->size;
    MPI_Request *q = calloc((size_t)n, sizeof *q);
    where_msg ask;
    memset(&ask, 0, sizeof ask);
    ask.probe = ++d->probes;
    ask.seq = d->seq;
    for (int r = 0; r < n; r++) {
        heard[r] = r == d->rank;
        if (q) q[r] = MPI_REQUEST_NULL;
        if (q && r != d->rank && MPI_Isend(&ask, (int)sizeof ask, MPI_BYTE, r, TAG_WHERE, d->diag_comm, &q[r]) != MPI_SUCCESS)
            q[r] = MPI_REQUEST_NULL;
    }
    double end = wall_s() + grace_s(d);
    int missing = n - 1, completed = 0;
    while (missing > 0 && wall_s() < end && !completed) {
        answer_questions(d);
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_HERE, d->diag_comm, &flag, &st) == MPI_SUCCESS && flag) {
            where_msg a;
            if (MPI_Recv(&a, (int)sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_HERE, d->diag_comm, MPI_STATUS_IGNORE) ==
                    MPI_SUCCESS && a.probe == ask.probe && !heard[st.MPI_SOURCE]) {
                a.what[sizeof a.what - 1] = '\0';
                heard[st.MPI_SOURCE] = 1;
                where[st.MPI_SOURCE] = a;
                missing--;
            }
            continue;
        }
        if (req && MPI_Test(req, &completed, MPI_STATUS_IGNORE) != MPI_SUCCESS) completed = 0;
        if (!completed) sleep_us(1000);
    }
    for (int r = 0; q && r < n; r++) /* a question never received (a peer gone) completes in the background */
        if (q[r] != MPI_REQUEST_NULL) {
            int done = 0;
            if (MPI_Test(&q[r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) MPI_Request_free(&q[r]);
        }
    free(q);
    return completed;
}

/* Ends the job after the line on stderr was written: the NCCL communicator aborted, MPI_Abort. Does not return. */
static void abort_job(mpt_dist *d) {
    fflush(NULL); /* MPI_Abort and _Exit flush no stdio buffer: keep what this rank printed */
    /* the launcher answers MPI_Abort with SIGTERM to every rank, this one included: nothing here can stop gracefully
     * any more (a handler of the command would announce a stop that cannot happen) */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    mpt_cuda_nccl_comm_abort(&d->nccl);
    MPI_Abort(d->comm, 1);
    _Exit(1); /* MPI_Abort does not return; if it did, the job must still end */
}

/* The ranks that did not answer, as "rank 1" / "ranks 1, 3", into buf; their count. */
static int list_absent(const mpt_dist *d, const char *heard, char *buf, size_t cap) {
    size_t k = 0;
    int count = 0;
    buf[0] = '\0';
    for (int r = 0; r < d->size; r++)
        if (!heard[r] && k + 16 < cap) k += (size_t)snprintf(buf + k, cap - k, "%s%d", count++ ? ", " : "", r);
    return count;
}

/* The training collective `what` (number d->seq) did not complete in time: find out which ranks have not arrived, say
 * so in one line and abort the job. Does not return. */
static void timed_out(mpt_dist *d, const char *what, double waited) {
    int64_t mine = d->seq;
    int n = d->size;
    where_msg *where = calloc((size_t)n, sizeof *where);
    char *heard = calloc((size_t)n, 1);
    if (where && heard) {
        ask_peers(d, NULL, heard, where);
        char absent[600], elsewhere[600] = "";
        size_t le = 0;
        int n_absent = list_absent(d, heard, absent, sizeof absent);
        for (int r = 0; r < n; r++)
            if (r != d->rank && heard[r] && where[r].seq != mine && le < sizeof elsewhere)
                le += (size_t)snprintf(elsewhere + le, sizeof elsewhere - le, "; rank %d is in collective #%lld", r,
                                       (long long)where[r].seq);
        fprintf(stderr, "mptrain: rank %d of %d: %s (collective #%lld) did not complete within --comm-timeout %g s "
                        "(waited %.0f s): %s%s%s%s; aborting the job\n",
                d->rank, n, what, (long long)mine, d->timeout_s, waited,
                n_absent ? (n_absent > 1 ? "ranks " : "rank ") : "",
                n_absent ? absent : "every rank answered, but the collective did not complete",
                n_absent ? " did not arrive (no answer: stopped, hung or dead)" : "", elsewhere);
    } else {
        fprintf(stderr, "mptrain: rank %d of %d: %s (collective #%lld) did not complete within --comm-timeout %g s; "
                        "aborting the job\n", d->rank, n, what, (long long)mine, d->timeout_s);
    }
    abort_job(d);
}

/* An MPI call of a collective or a wait failed (a peer gone, or calls that do not match): one line, and the job
 * ends (a step cannot return an error, and a peer may wait in the collective for good). Does not return. */
static void failed_in(mpt_dist *d, const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    fprintf(stderr, "mptrain: rank %d of %d: %s (collective #%lld) failed: %s; aborting the job\n", d->rank, d->size,
            what, (long long)d->seq, msg);
    abort_job(d);
}

/* Waits for the training collective req (`what`, number d->seq) within timeout_s; on an MPI error or the time limit
 * it ends the job (failed_in, timed_out). */
static void coll_wait(mpt_dist *d, MPI_Request *req, const char *what) {
    double t0 = wall_s();
    d->wait_what = what;
    d->wait_since = t0;
    for (long spins = 1;; spins++) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) failed_in(d, what, rc);
        if (done) break;
        if (spins % 256) continue; /* the clock every 256 tests */
        double waited = wall_s() - t0;
        if (waited < 1.0) continue;
        answer_questions(d);
        if (d->timeout_s > 0.0 && waited > d->timeout_s) timed_out(d, what, waited);
        sleep_us(200);
    }
    d->wait_what = NULL;
}

/* MPI_Allreduce (in place) of n elements within the time limit. */
static void allreduce_timed(mpt_dist *d, void *x, int n, MPI_Datatype type, MPI_Op op, const char *what) {
    MPI_Request req;
    d->seq++;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, x, n, type, op, d->comm, &req);
    if (rc != MPI_SUCCESS) failed_in(d, what, rc);
    coll_wait(d, &req, what);
}

/* The waits that may last as long as a peer's runs: see the section's comment. Each time the limit passes the peers
 * are asked; one that does not answer, or all of them waiting for longer than the limit too, end the job. Returns 1
 * when req completed meanwhile, 0 to wait on. */
static int check_peers(mpt_dist *d, MPI_Request *req, const char *what, double waited) {
    int n = d->size;
    where_msg *where = calloc((size_t)n, sizeof *where);
    char *heard = calloc((size_t)n, 1);
    if (!where || !heard) { /* cannot ask: wait on (the limit passes again) */
        free(where);
        free(heard);
        return 0;
    }
    int completed = ask_peers(d, req, heard, where);
    char absent[600], others[1200] = "";
    int n_absent = list_absent(d, heard, absent, sizeof absent), stuck = 1;
    size_t k = 0;
    for (int r = 0; r < n && !completed; r++) {
        if (r == d->rank || !heard[r]) continue;
        if (where[r].waited < d->timeout_s) stuck = 0; /* working, or waiting for less than the limit */
        if (where[r].waited >= 0.0 && k + 200 < sizeof others)
            k += (size_t)snprintf(others + k, sizeof others - k, "; rank %d waits for %s (%.0f s)", r, where[r].what,
                                  where[r].waited);
    }
    free(where);
    free(heard);
    if (completed) return 1;
    if (n_absent) {
        fprintf(stderr, "mptrain: rank %d of %d: waiting for %s (%.0f s, --comm-timeout %g s): %s %s did not answer "
                        "within %.0f s (stopped, hung or dead)%s; aborting the job\n",
                d->rank, n, what, waited, d->timeout_s, n_absent > 1 ? "ranks" : "rank", absent, grace_s(d), others);
        abort_job(d);
    }
    if (stuck) {
        fprintf(stderr, "mptrain: rank %d of %d: waiting for %s (%.0f s, --comm-timeout %g s)%s: the ranks wait for each "
                        "other and none can move (ranks started with different settings, or a fault); aborting the "
                        "job\n", d->rank, n, what, waited, d->timeout_s, others);
        abort_job(d);
    }
    return 0;
}

/* Waits for req (`what` names what for) without spinning, bounded as above. MPT_ERR_IO naming the MPI error. */
static mpt_status wait_peers(mpt_dist *d, MPI_Request *req, const char *what) {
    double t0 = wall_s(), check_at = t0 + d->timeout_s;
    d->wait_what = what;
    d->wait_since = t0;
    mpt_status s = MPT_OK;
    for (long ns = MPT_DIST_SLEEP_MIN_NS;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            s = mpi_error(rc, what);
            break;
        }
        if (done) break;
        answer_questions(d);
        double now = wall_s();
        if (d->timeout_s > 0.0 && now >= check_at) {
            if (check_peers(d, req, what, now - t0)) break;
            check_at = wall_s() + d->timeout_s;
        }
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        ns = mpt_dist_next_sleep_ns(ns);
    }
    d->wait_what = NULL;
    return s;
}

void mpt_dist_set_timeout(mpt_dist *d, double seconds) { d->timeout_s = seconds; }

int mpt_dist_any(mpt_dist *d, int x) {
    int v = x != 0;
    allreduce_timed(d, &v, 1, MPI_INT, MPI_MAX, "the agreement to stop (SIGINT / SIGTERM)");
    return v;
}

int mpt_dist_built(void) { return 1; }

const char *mpt_dist_library_version(void) {
    static char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return "(MPI_Get_library_version failed)";
    v[len > 0 && len < (int)sizeof v ? len : (int)sizeof v - 1] = '\0';
    v[strcspn(v, "\r\n")] = '\0';
    return v;
}

mpt_status mpt_dist_init(mpt_dist **out, mpt_grad_comm comm) {
    *out = NULL;
    if (comm != MPT_GRAD_COMM_FP32 && comm != MPT_GRAD_COMM_BF16 && comm != MPT_GRAD_COMM_FP16)
        return mpt_errorf(MPT_ERR_ARG, "--grad-comm: expected fp32, bf16 or fp16, found %d", (int)comm);
    int inited = 0, rc;
    if ((rc = MPI_Initialized(&inited)) != MPI_SUCCESS) return mpi_error(rc, "MPI_Initialized");
    mpt_dist *d = calloc(1, sizeof *d);
    if (!d) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the MPI state");
    if (!inited) {
        if ((rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) {
            free(d);
            return mpi_error(rc, "MPI_Init");
        }
        d->owns_mpi = 1;
    }
    d->comm = MPI_COMM_WORLD;
    d->exit_comm = MPI_COMM_NULL;
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    MPI_Comm node;
    d->local_size = 1;
    if (MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &d->local_size);
        MPI_Comm_rank(node, &d->local_rank);
        MPI_Comm_free(&node);
    }
    d->wire = comm;
    d->weight = 1.0f / (float)d->size;
    d->sum16 = MPI_OP_NULL;
    d->diag_comm = MPI_COMM_NULL;
    d->timeout_s = MPT_DIST_DEFAULT_TIMEOUT_S;
    if ((rc = MPI_Comm_dup(d->comm, &d->diag_comm)) != MPI_SUCCESS) {
        d->diag_comm = MPI_COMM_NULL;
        mpt_dist_free(&d);
        return mpi_error(rc, "MPI_Comm_dup (timeout diagnosis)");
    }
    /* Its own communicator: the exit agreement of a rank that failed must never match a collective its peers
     * are still waiting in on comm. */
    if ((rc = MPI_Comm_dup(d->comm, &d->exit_comm)) != MPI_SUCCESS) {
        d->exit_comm = MPI_COMM_NULL;
        mpt_dist_free(&d);
        return mpi_error(rc, "MPI_Comm_dup (exit agreement)");
    }
    if (comm != MPT_GRAD_COMM_FP32 && (rc = MPI_Op_create(comm == MPT_GRAD_COMM_BF16 ? sum_bf16 : sum_f16, 1,
                                                          &d->sum16)) != MPI_SUCCESS) {
        mpt_dist_free(&d);
        return mpi_error(rc, "MPI_Op_create");
    }
    *out = d;
    return MPT_OK;
}

void mpt_dist_free(mpt_dist **pd) {
    mpt_dist *d = *pd;
    if (!d) return;
    if (d->sum16 != MPI_OP_NULL) MPI_Op_free(&d->sum16);
    if (d->exit_comm != MPI_COMM_NULL) MPI_Comm_free(&d->exit_comm);
    if (d->diag_comm != MPI_COMM_NULL) MPI_Comm_free(&d->diag_comm);
    free(d->flat);
    free(d->flat16);
    free(d->ref);
    free(d->err);
    free(d->signals);
    mpt_cuda_nccl_comm_free(&d->nccl);
    free(d->bufs);
    free(d->counts);
    if (d->owns_mpi) MPI_Finalize();
    free(d);
    *pd = NULL;
}

/* Waits up to `seconds` for req (MPI_Test, sleeping 1 ms between tests); 1 if it completed, 0 on timeout or error. */
static int wait_until(MPI_Request *req, double seconds) {
    double end = wall_s() + seconds;
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (done) return 1;
        if (wall_s() > end) return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

int mpt_dist_finish(mpt_dist **pd, int exit_code) {
    mpt_dist *d = *pd;
    if (!d) return exit_code;
    if (d->size == 1) { /* no peers to wait for, none to leave waiting */
        mpt_dist_free(pd);
        return exit_code;
    }
    int worst = exit_code, rc;
    MPI_Request req;
    int agreed = (rc = MPI_Iallreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, d->exit_comm, &req)) == MPI_SUCCESS;
    /* A rank that succeeded waits for the others as long as they take (they either finish or fail, and a failed
     * one aborts the job); a failed rank waits MPT_DIST_EXIT_WAIT_S for peers that may be blocked for good in a
     * collective it will never join. */
    if (agreed && exit_code == 0) agreed = wait_peers(d, &req, "the end of the job on every rank") == MPT_OK;
    else if (agreed) agreed = wait_until(&req, MPT_DIST_EXIT_WAIT_S);
    if (agreed) {
        /* Every rank got here: nobody waits in a collective. After any failure a peer's NCCL work may not have
         * completed, so the communicator is aborted rather than destroyed; MPI finalises cleanly. */
        if (worst != 0) mpt_cuda_nccl_comm_abort(&d->nccl);
        mpt_dist_free(pd);
        return worst;
    }
    if (rc != MPI_SUCCESS) mpi_error(rc, "MPI_Iallreduce (exit agreement)");
    fprintf(stderr, "mptrain: rank %d of %d failed (exit %d) while its peers did not reach the end of the job "
                    "within %d s: aborting the job (MPI_Abort) so that they do not wait for it forever\n",
            d->rank, d->size, exit_code, MPT_DIST_EXIT_WAIT_S);
    fflush(NULL); /* MPI_Abort and _Exit flush no stdio buffer: keep what this rank printed */
    mpt_cuda_nccl_comm_abort(&d->nccl);
    MPI_Abort(d->comm, exit_code != 0 ? exit_code : 1);
    _Exit(exit_code != 0 ? exit_code : 1); /* MPI_Abort does not return; if it did, the job must still end */
}

int mpt_dist_rank(const mpt_dist *d) { return d->rank; }
int mpt_dist_size(const mpt_dist *d) { return d->size; }
mpt_grad_comm mpt_dist_comm(const mpt_dist *d) { return d->wire; }
double mpt_dist_comm_seconds(const mpt_dist *d) { return d->comm_s; }

void mpt_dist_set_batch(mpt_dist *d, int n_valid_local, int n_valid_global) {
    MPT_ASSERTF(n_valid_local >= 0 && n_valid_local <= n_valid_global,
                "mpt_dist_set_batch: %d valid rows of %d", n_valid_local, n_valid_global);
    d->weight = n_valid_global > 0 ? (float)n_valid_local / (float)n_valid_global : 0.0f;
}

static int any_nonfinite(const float *x, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    return bad;
}

static mpt_status reserve(mpt_dist *d, int64_t n) {
    if (n <= d->cap) return MPT_OK;
    float *f = realloc(d->flat, (size_t)n * sizeof *f);
    if (f) d->flat = f;
    uint16_t *h = realloc(d->flat16, (size_t)n * sizeof *h);
    if (h) d->flat16 = h;
    if (!f || !h) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %lld gradient elements for the all-reduce",
                                    (long long)n);
    d->cap = n;
    return MPT_OK;
}

/* MPI counts are int: large buffers go in chunks. */
#define MPT_DIST_CHUNK ((int64_t)1 << 28)

int mpt_dist_allreduce_f32(mpt_dist *d, float *x, int64_t n, float weight) {
    int bad = any_nonfinite(x, n);
    if (d->wire == MPT_GRAD_COMM_FP32) {
        for (int64_t i = 0; i < n; i++) x[i] *= weight;
        for (int64_t i = 0; i < n; i += MPT_DIST_CHUNK) {
            int c = (int)(n - i < MPT_DIST_CHUNK ? n - i : MPT_DIST_CHUNK);
            allreduce_timed(d, x + i, c, MPI_FLOAT, MPI_SUM, "the gradient all-reduce");
        }
    } else {
        MPT_ASSERTF(reserve(d, n) == MPT_OK, "%s", mpt_last_error());
        mpt_dtype dt = mpt_grad_comm_dtype(d->wire);
        for (int64_t i = 0; i < n; i++) mpt_store_f32(d->flat16, dt, i, x[i] * weight);
        for (int64_t i = 0; i < n; i += MPT_DIST_CHUNK) {
            int c = (int)(n - i < MPT_DIST_CHUNK ? n - i : MPT_DIST_CHUNK);
            allreduce_timed(d, d->flat16 + i, c, MPI_UINT16_T, d->sum16, "the gradient all-reduce");
        }
        for (int64_t i = 0; i < n; i++) x[i] = mpt_load_f32(d->flat16, dt, i);
    }
    bad |= any_nonfinite(x, n);
    allreduce_timed(d, &bad, 1, MPI_INT, MPI_MAX, "the agreement on found_inf");
    return bad;
}

/* ||x - y||^2 and ||y||^2 over n elements, in double. */
static void sq_dist(const float *x, const float *y, int64_t n, double *num, double *den) {
    double a = 0.0, b = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)x[i] - (double)y[i];
        a += e * e;
        b += (double)y[i] * (double)y[i];
    }
    *num = a;
    *den = b;
}

static double rel_of(double num, double den) { return num == 0.0 ? (isnan(den) ? NAN : 0.0) : sqrt(num / den); }

/* The FP32 reference of the communication error: d->ref holds this rank's packed gradients; all-reduce them
 * weighted in FP32 and compare with the wire's result in d->flat, tensor by tensor (see dist.h). */
static void measure_comm_error(mpt_dist *d, const mpt_trainer *t, int64_t n) {
    for (int64_t i = 0; i < n; i++) d->ref[i] *= d->weight;
    for (int64_t i = 0; i < n; i += MPT_DIST_CHUNK) {
        int c = (int)(n - i < MPT_DIST_CHUNK ? n - i : MPT_DIST_CHUNK);
        allreduce_timed(d, d->ref + i, c, MPI_FLOAT, MPI_SUM, "the FP32 reference all-reduce (telemetry)");
    }
    double num_all = 0.0, den_all = 0.0;
    int64_t off = 0;
    for (int i = 0; i < t->n_params; i++) {
        int64_t k = mpt_tensor_numel(t->weight[i]);
        double num, den;
        sq_dist(d->flat + off, d->ref + off, k, &num, &den);
        d->err[i] = rel_of(num, den);
        num_all += num;
        den_all += den;
        off += k;
    }
    d->err_all = rel_of(num_all, den_all);
    d->err_step = t->iteration + 1;
}

static mpt_status reserve_ref(mpt_dist *d, int64_t n, int n_params) {
    if (n > d->ref_cap) {
        float *f = realloc(d->ref, (size_t)n * sizeof *f);
        if (!f) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %lld elements for the communication error",
                                  (long long)n);
        d->ref = f;
        d->ref_cap = n;
    }
    if (n_params > d->n_err) {
        double *e = realloc(d->err, (size_t)n_params * sizeof *e);
        if (!e) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %d communication errors", n_params);
        d->err = e;
        d->n_err = n_params;
    }
    return MPT_OK;
}

int64_t mpt_dist_comm_error(const mpt_dist *d, const double **rel_l2, double *all) {
    *rel_l2 = d->err;
    *all = d->err_all;
    return d->err_step;
}

/* The CUDA backend: one NCCL group on the backend's stream; no host synchronisation, no found_inf collective
 * (the reduced gradient is non-finite on every rank exactly when a term was, kernels/cuda/nccl.cu). */
/* The NCCL all-reduce is enqueued on the backend's stream; with a time limit the host then waits for the stream
 * (mpt_cuda_nccl_poll, answering the questions of a timed-out peer meanwhile) at most timeout_s, and on the limit
 * aborts the communicator and the job as coll_wait does. */
static void allreduce_nccl(mpt_dist *d, mpt_trainer *t) {
    double t0 = wall_s();
    for (int i = 0; i < t->n_params; i++) d->bufs[i] = t->weight[i]->grad->data;
    mpt_cuda_nccl_allreduce(t->be, d->nccl, d->bufs, d->counts, t->n_params, mpt_grad_comm_dtype(d->wire), d->weight);
    d->seq++;
    for (long spins = 1; d->timeout_s > 0.0; spins++) {
        int state = mpt_cuda_nccl_poll(t->be, d->nccl);
        MPT_ASSERTF(state >= 0, "%s", mpt_last_error()); /* NCCL's asynchronous error: fatal, as in the enqueue */
        if (state == 1) break;
        if (spins % 64) continue;
        double waited = wall_s() - t0;
        if (waited < 1.0) continue;
        answer_questions(d);
        if (waited > d->timeout_s) timed_out(d, "the NCCL gradient all-reduce", waited);
        sleep_us(200);
    }
    d->comm_s += wall_s() - t0;
}

void mpt_dist_allreduce_grads(mpt_dist *d, mpt_trainer *t, int measure) {
    if (t->be->device == MPT_DEVICE_CUDA) {
        MPT_ASSERTF(!measure, "data-parallel: the communication error is measured on the CPU backend only");
        allreduce_nccl(d, t);
        return;
    }
    double t0 = wall_s();
    int64_t n = 0;
    for (int i = 0; i < t->n_params; i++) n += mpt_tensor_numel(t->weight[i]);
    MPT_ASSERTF(reserve(d, n) == MPT_OK, "%s", mpt_last_error());
    int64_t off = 0; /* one all-reduce for all gradients: one latency per step, not one per tensor */
    for (int i = 0; i < t->n_params; i++) {
        int64_t k = mpt_tensor_numel(t->weight[i]);
        memcpy(d->flat + off, t->weight[i]->grad->data, (size_t)k * sizeof(float));
        off += k;
    }
    double t_ref = 0.0; /* the reference's copy: telemetry's time, not the step's */
    if (measure) {
        double r0 = wall_s();
        MPT_ASSERTF(reserve_ref(d, n, t->n_params) == MPT_OK, "%s", mpt_last_error());
        memcpy(d->ref, d->flat, (size_t)n * sizeof(float));
        t_ref = wall_s() - r0;
    }
    int bad = mpt_dist_allreduce_f32(d, d->flat, n, d->weight);
    off = 0;
    for (int i = 0; i < t->n_params; i++) {
        int64_t k = mpt_tensor_numel(t->weight[i]);
        memcpy(t->weight[i]->grad->data, d->flat + off, (size_t)k * sizeof(float));
        off += k;
    }
    /* Skip mode: any rank's inf/NaN sets found_inf on every rank before unscale_check (which only ever sets
     * it). Apply mode counts non-finite steps from the reduced gradients themselves, identical on all ranks. */
    if (bad && t->cfg.nonfinite == MPT_NONFINITE_SKIP) t->scaler->found_inf = 1.0f;
    d->comm_s += wall_s() - t0 - t_ref;
    if (measure) measure_comm_error(d, t, n);
}

void mpt_dist_broadcast_buffers(mpt_dist *d, mpt_trainer *t) {
    const mpt_graph *g = t->g;
    if (g->n_buffers == 0) return;
    int64_t n = 0;
    for (int i = 0; i < g->n_buffers; i++) n += mpt_tensor_numel(g->buffers[i].t);
    MPT_ASSERTF(n <= INT_MAX && reserve(d, n) == MPT_OK, "data-parallel: %lld buffer elements: %s", (long long)n,
                mpt_last_error());
    int64_t off = 0;
    for (int i = 0; i < g->n_buffers; i++) { /* the step's work ends here on the host (to_host waits) */
        const mpt_tensor *b = g->buffers[i].t;
        t->be->to_host(t->be, d->flat + off, b->data, mpt_tensor_nbytes(b));
        off += mpt_tensor_numel(b);
    }
    MPI_Request req;
    d->seq++;
    int rc = MPI_Ibcast(d->flat, (int)n, MPI_FLOAT, 0, d->comm, &req);
    if (rc != MPI_SUCCESS) {
        mpi_error(rc, "MPI_Ibcast (running statistics)");
        MPT_ASSERTF(0, "%s", mpt_last_error());
    }
    coll_wait(d, &req, "MPI_Ibcast (running statistics)");
    off = 0;
    for (int i = 0; i < g->n_buffers; i++) {
        const mpt_tensor *b = g->buffers[i].t;
        t->be->from_host(t->be, b->data, d->flat + off, mpt_tensor_nbytes(b));
        off += mpt_tensor_numel(b);
    }
    t->be->synchronize(t->be); /* d->flat is reused by the next step's all-reduce */
}

/* FNV-1a over the bytes of every master (what the optimizer updates), copied to the host (device masters on
 * the CUDA backend). */
static mpt_status masters_checksum(const mpt_trainer *t, uint64_t *out) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < t->n_params; i++) {
        const mpt_tensor *m = t->master[i];
        size_t bytes = (size_t)mpt_tensor_numel(m) * mpt_dtype_size(m->dtype);
        unsigned char *p = malloc(bytes ? bytes : 1);
        if (!p) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %zu bytes to checksum the masters", bytes);
        t->be->to_host(t->be, p, m->data, bytes);
        for (size_t k = 0; k < bytes; k++) h = (h ^ p[k]) * 1099511628211ull;
        free(p);
    }
    *out = h;
    return MPT_OK;
}

mpt_status mpt_dist_check_identical(mpt_dist *d, const mpt_trainer *t, const char *when) {
    uint64_t h = 0;
    int ok = masters_checksum(t, &h) == MPT_OK;
    allreduce_timed(d, &ok, 1, MPI_INT, MPI_MIN, "the weights checksum");
    if (!ok) return mpt_errorf(MPT_ERR_NOMEM, "data-parallel: a rank could not checksum its master weights %s", when);
    uint64_t lo = h, hi = h;
    allreduce_timed(d, &lo, 1, MPI_UINT64_T, MPI_MIN, "the weights checksum");
    allreduce_timed(d, &hi, 1, MPI_UINT64_T, MPI_MAX, "the weights checksum");
    if (lo != hi)
        return mpt_errorf(MPT_ERR_ARG, "data-parallel: the ranks' master weights differ %s (checksums %016llx .. "
                                       "%016llx, this rank %d: %016llx): every rank must start from the same "
                                       "seed and checkpoint", when, (unsigned long long)lo, (unsigned long long)hi,
                          d->rank, (unsigned long long)h);
    return MPT_OK;
}

mpt_status mpt_dist_select_gpu(mpt_dist *d) {
    mpt_status s = mpt_cuda_set_device(d->local_rank); /* the rank's index on its node, found at mpt_dist_init */
    if (s != MPT_OK) return mpt_errorf(s, "data-parallel rank %d: %s", d->rank, mpt_last_error());
    return MPT_OK;
}

/* llm.c's bootstrap: rank 0 makes the NCCL id, MPI_Bcast hands it out, every rank joins with ncclCommInitRank.
 * First every rank loads NCCL (the module loads it lazily) and the ranks agree that all could, then rank 0's
 * failure to make the id is broadcast: no rank waits in ncclCommInitRank for a rank that will never join. */
static mpt_status nccl_bootstrap(mpt_dist *d, mpt_trainer *t, int64_t n) {
    int loaded = mpt_cuda_nccl_available(), all_loaded = loaded, rc;
    char why[1024];
    snprintf(why, sizeof why, "%s", loaded ? "" : mpt_last_error());
    allreduce_timed(d, &all_loaded, 1, MPI_INT, MPI_MIN, "the agreement that every rank loaded NCCL");
    if (!loaded)
        return mpt_errorf(MPT_ERR_DEVICE, "data-parallel on the CUDA backend needs NCCL (or use --device cpu): %s", why);
    if (!all_loaded)
        return mpt_errorf(MPT_ERR_DEVICE, "data-parallel: another rank could not load NCCL (its error names why)");
    unsigned char id[MPT_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    int ok = d->rank != 0 || mpt_cuda_nccl_unique_id(id) == MPT_OK;
    MPI_Request req;
    d->seq++;
    if ((rc = MPI_Ibcast(&ok, 1, MPI_INT, 0, d->comm, &req)) != MPI_SUCCESS) return mpi_error(rc, "MPI_Ibcast (NCCL status)");
    coll_wait(d, &req, "rank 0's NCCL id status");
    if (!ok)
        return d->rank == 0 ? mpt_errorf(MPT_ERR_DEVICE, "data-parallel: %s", mpt_last_error())
                            : mpt_errorf(MPT_ERR_DEVICE, "data-parallel: rank 0 could not create the NCCL id");
    d->seq++;
    if ((rc = MPI_Ibcast(id, MPT_NCCL_ID_BYTES, MPI_BYTE, 0, d->comm, &req)) != MPI_SUCCESS)
        return mpi_error(rc, "MPI_Ibcast (NCCL id)");
    coll_wait(d, &req, "rank 0's NCCL id");
    MPT_TRY(mpt_cuda_nccl_comm_create(t->be, &d->nccl, id, d->size, d->rank, n));
    d->nccl_elems = n;
    return MPT_OK;
}

/* The CUDA trainer's side of attach: the communicator (once) and the gradient table. */
static mpt_status attach_nccl(mpt_dist *d, mpt_trainer *t, int64_t n) {
    if (d->nccl && n > d->nccl_elems)
        return mpt_errorf(MPT_ERR_ARG, "data-parallel: this job's NCCL communicator was made for %lld gradient "
                                       "elements, the model has %lld", (long long)d->nccl_elems, (long long)n);
    if (!d->nccl) MPT_TRY(nccl_bootstrap(d, t, n));
    float **b = realloc(d->bufs, (size_t)t->n_params * sizeof *b);
    if (b) d->bufs = b;
    int64_t *c = realloc(d->counts, (size_t)t->n_params * sizeof *c);
    if (c) d->counts = c;
    if (!b || !c) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate the gradient table of %d tensors", t->n_params);
    for (int i = 0; i < t->n_params; i++) d->counts[i] = mpt_tensor_numel(t->weight[i]);
    d->n_bufs = t->n_params;
    return MPT_OK;
}

mpt_status mpt_dist_attach(mpt_dist *d, mpt_trainer *t) {
    if (t->g->n_fp8) /* each rank's casts would scale with its own shard's amax (TE all-reduces it: reduce_amax) */
        return mpt_errorf(MPT_ERR_ARG, "--data-parallel with --precision %s: FP8 scaling would need the amax "
                                       "all-reduced over the ranks, which mptrain does not do yet",
                          mpt_precision_name(t->g->policy.mode));
    int64_t n = 0;
    for (int i = 0; i < t->n_params; i++) n += mpt_tensor_numel(t->weight[i]);
    if (t->be->device == MPT_DEVICE_CUDA) MPT_TRY(attach_nccl(d, t, n));
    else MPT_TRY(reserve(d, n));
    MPT_TRY(mpt_dist_check_identical(d, t, "at the start"));
    t->dist = d;
    return MPT_OK;
}

double mpt_dist_sum_f64(mpt_dist *d, double x) {
    allreduce_timed(d, &x, 1, MPI_DOUBLE, MPI_SUM, "a sum over the ranks (loss, accuracy)");
    return x;
}

/* ---- jobs of independent runs (see engine/dist/dist.h) ------------------------------------------------------- */

int mpt_dist_local_size(const mpt_dist *d) { return d->local_size; }

mpt_status mpt_dist_send(mpt_dist *d, int dest, int tag, const void *buf, int64_t n, const char *what) {
    if (n < 0 || n > INT_MAX)
        return mpt_errorf(MPT_ERR_ARG, "MPI message of %lld bytes to rank %d: at most %d", (long long)n, dest, INT_MAX);
    MPI_Request req; /* the receiver may be busy: a bounded wait that does not spin (wait_peers) */
    int rc = MPI_Isend(buf, (int)n, MPI_BYTE, dest, tag, d->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Isend");
    return wait_peers(d, &req, what);
}

mpt_status mpt_dist_recv(mpt_dist *d, int src, int tag, void **buf, int64_t *n, int *from, const char *what) {
    *buf = NULL;
    *n = 0;
    MPI_Status st;
    int rc, count = 0, found = 0;
    /* MPI_Improbe's message handle, then a non-blocking receive: a bounded wait for the message to arrive */
    MPI_Message msg;
    MPI_Request req;
    double t0 = wall_s(), check_at = t0 + d->timeout_s;
    d->wait_what = what;
    d->wait_since = t0;
    for (long ns = MPT_DIST_SLEEP_MIN_NS; !found;) {
        if ((rc = MPI_Improbe(src < 0 ? MPI_ANY_SOURCE : src, tag, d->comm, &found, &msg, &st)) != MPI_SUCCESS) {
            d->wait_what = NULL;
            return mpi_error(rc, "MPI_Improbe");
        }
        if (found) break;
        answer_questions(d);
        double now = wall_s();
        if (d->timeout_s > 0.0 && now >= check_at) {
            check_peers(d, NULL, what, now - t0);
            check_at = wall_s() + d->timeout_s;
        }
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        ns = mpt_dist_next_sleep_ns(ns);
    }
    d->wait_what = NULL;
    if ((rc = MPI_Get_count(&st, MPI_BYTE, &count)) != MPI_SUCCESS) return mpi_error(rc, "MPI_Get_count");
    void *b = malloc(count > 0 ? (size_t)count : 1);
    if (!b) {
        mpt_status e = mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %d bytes for a message from rank %d", count,
                                  st.MPI_SOURCE);
        char sink;
        MPI_Mrecv(&sink, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE); /* the handle must be received: truncated */
        return e;
    }
    if ((rc = MPI_Imrecv(b, count, MPI_BYTE, &msg, &req)) != MPI_SUCCESS) {
        free(b);
        return mpi_error(rc, "MPI_Imrecv");
    }
    mpt_status s = wait_peers(d, &req, what);
    if (s != MPT_OK) {
        free(b);
        return s;
    }
    if (from) *from = st.MPI_SOURCE;
    *buf = b;
    *n = count;
    return MPT_OK;
}

mpt_status mpt_dist_bcast(mpt_dist *d, int root, void **buf, int64_t *n, const char *what) {
    int64_t len = d->rank == root ? *n : 0;
    int rc;
    MPI_Request req;
    if ((rc = MPI_Ibcast(&len, 1, MPI_INT64_T, root, d->comm, &req)) != MPI_SUCCESS) return mpi_error(rc, "MPI_Ibcast");
    MPT_TRY(wait_peers(d, &req, what));
    if (len < 0 || len > INT_MAX)
        return mpt_errorf(MPT_ERR_ARG, "MPI broadcast of %lld bytes: at most %d", (long long)len, INT_MAX);
    void *b = *buf;
    if (d->rank != root) {
        b = malloc(len > 0 ? (size_t)len : 1);
        if (!b) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %lld bytes for a broadcast", (long long)len);
    }
    mpt_status s = MPT_OK;
    if ((rc = MPI_Ibcast(b, (int)len, MPI_BYTE, root, d->comm, &req)) != MPI_SUCCESS) s = mpi_error(rc, "MPI_Ibcast");
    if (s == MPT_OK) s = wait_peers(d, &req, what);
    if (s != MPT_OK) {
        if (d->rank != root) free(b);
        return s;
    }
    *buf = b;
    *n = len;
    return MPT_OK;
}

mpt_status mpt_dist_sum_int(mpt_dist *d, int *x, const char *what) {
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, x, 1, MPI_INT, MPI_SUM, d->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Iallreduce");
    return wait_peers(d, &req, what);
}

/* ---- the agreement on a job's settings ------------------------------------------------------------------------ */

/* value as a message shows it: a decimal number in its shortest form that reads back as the same double (the
 * canonical text has 17 significant digits: 0.10000000000000001), anything else as it is, cut to 160 bytes. */
static const char *shown(const char *value, char *buf, size_t cap) {
    char *end = NULL;
    double x = value[0] ? strtod(value, &end) : 0.0;
    if (end && *end == '\0' && strpbrk(value, ".eE") && isfinite(x)) {
        for (int p = 1; p <= 17; p++) {
            snprintf(buf, cap, "%.*g", p, x);
            if (strtod(buf, NULL) == x) return buf;
        }
    }
    size_t n = strlen(value);
    if (n <= 160) snprintf(buf, cap, "%s", value);
    else snprintf(buf, cap, "%.120s... (%zu bytes)", value, n);
    return buf;
}

/* The n-th NUL-terminated string of the list buf[0..len), or NULL. */
static const char *nth_string(const char *buf, int64_t len, int n) {
    int64_t k = 0;
    for (int i = 0; k < len; i++) {
        const char *z = memchr(buf + k, 0, (size_t)(len - k));
        if (!z) return NULL;
        if (i == n) return buf + k;
        k = z - buf + 1;
    }
    return NULL;
}

mpt_status mpt_dist_agree(mpt_dist *d, const mpt_dist_item *items, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++) len += strlen(items[i].name) + strlen(items[i].value) + 2;
    char *mine = malloc(len + 1), *p = mine;
    if (!mine) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %zu bytes for the job's settings", len);
    for (int i = 0; i < n; i++) {
        size_t a = strlen(items[i].name) + 1, b = strlen(items[i].value) + 1;
        memcpy(p, items[i].name, a), p += a;
        memcpy(p, items[i].value, b), p += b;
    }
    void *theirs = mine;
    int64_t tlen = (int64_t)len;
    mpt_status s = mpt_dist_bcast(d, 0, &theirs, &tlen, "rank 0's settings (every rank compares its own with them)");
    if (s != MPT_OK) {
        free(mine);
        return s;
    }
    /* the first item that differs from rank 0's (a name too: another binary) */
    int k = -1;
    for (int i = 0; k < 0 && i <= n; i++) {
        const char *name0 = nth_string(theirs, tlen, 2 * i), *value0 = nth_string(theirs, tlen, 2 * i + 1);
        if (i == n) {
            if (name0) k = i; /* rank 0 has more */
        } else if (!name0 || !value0 || strcmp(name0, items[i].name) != 0 || strcmp(value0, items[i].value) != 0) {
            k = i;
        }
    }
    int lowest = k >= 0 ? d->rank : d->size;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, d->comm, &req);
    s = rc == MPI_SUCCESS ? wait_peers(d, &req, "the other ranks' comparison of their settings")
                          : mpi_error(rc, "MPI_Iallreduce (the settings' agreement)");
    if (s != MPT_OK || lowest == d->size) {
        if (theirs != mine) free(theirs);
        free(mine);
        return s;
    }
    /* the lowest rank that differs says how, and every rank gets its line */
    char line[1024] = "";
    if (d->rank == lowest) {
        const char *name0 = nth_string(theirs, tlen, 2 * k), *value0 = nth_string(theirs, tlen, 2 * k + 1);
        char a[200], b[200];
        if (k < n && name0 && value0 && strcmp(name0, items[k].name) == 0)
            snprintf(line, sizeof line, "the ranks disagree on %s: rank %d: %s, rank 0: %s (every rank of the job must "
                     "be started with the same settings and data)", items[k].name, d->rank,
                     shown(items[k].value, a, sizeof a), shown(value0, b, sizeof b));
        else
            snprintf(line, sizeof line, "the ranks disagree on what their settings are (rank %d's setting %d is '%s', "
                     "rank 0's '%s'): every rank must run the same mptrain binary", d->rank, k + 1,
                     k < n ? items[k].name : "(none)", name0 ? name0 : "(none)");
    }
    void *lb = line;
    int64_t ll = (int64_t)strlen(line) + 1;
    s = mpt_dist_bcast(d, lowest, &lb, &ll, "the line naming the settings that differ");
    if (s == MPT_OK) {
        ((char *)lb)[ll > 0 ? ll - 1 : 0] = '\0';
        s = mpt_errorf(MPT_ERR_ARG, "%s", (const char *)lb);
        if (lb != line) free(lb);
    }
    if (theirs != mine) free(theirs);
    free(mine);
    return s;
}

mpt_status mpt_dist_signal(mpt_dist *d, int tag) {
    static const int one = 1; /* the payload is never read; a static buffer outlives the sends */
    if (!d->signals) {
        d->signals = calloc((size_t)d->size, sizeof *d->signals);
        if (!d->signals) return mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %d MPI requests", d->size);
    }
    for (int r = 0; r < d->size; r++) {
        if (r == d->rank || d->n_signals >= d->size) continue;
        int rc = MPI_Isend(&one, 1, MPI_INT, r, tag, d->comm, &d->signals[d->n_signals]);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Isend (signal)");
        d->n_signals++;
    }
    return MPT_OK;
}

int mpt_dist_signalled(mpt_dist *d, int tag) {
    int flag = 0;
    if (MPI_Iprobe(MPI_ANY_SOURCE, tag, d->comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
    return flag;
}

mpt_status mpt_dist_signal_drain(mpt_dist *d, int tag, int expected) {
    int rc;
    for (int k = 0; k < expected; k++) {
        int x;
        MPI_Request req;
        if ((rc = MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, tag, d->comm, &req)) != MPI_SUCCESS)
            return mpi_error(rc, "MPI_Irecv (signal)");
        MPT_TRY(wait_peers(d, &req, "a peer's failure signal"));
    }
    for (int i = 0; i < d->n_signals; i++) MPT_TRY(wait_peers(d, &d->signals[i], "the delivery of this rank's failure signal"));
    d->n_signals = 0;
    return MPT_OK;
}
