/*
 * engine/dist/dist.h - data-parallel gradient communication behind a small interface (ARCHITECTURE:
 * engine/dist; MPI on CPUs, NCCL on GPUs). Built with Open MPI when Meson found it (-Dmpi=auto); without MPI,
 * mpt_dist_init fails with MPT_ERR_ARG and says how to build it. The CUDA backend's gradients go over NCCL
 * (kernels/cuda/nccl.cu, in the dlopen'd CUDA module built with Meson's 'nccl' feature), bootstrapped over MPI
 * as llm.c does: rank 0 ncclGetUniqueId, MPI_Bcast of the id, ncclCommInitRank on every rank, one GPU per
 * rank (mpt_dist_select_gpu); the all-reduce is enqueued on the backend's stream with the same weighting, wire
 * dtypes and order as the MPI path, and found_inf needs no extra collective there (kernels/cuda/nccl.cu says
 * why).
 *
 * The model: N ranks (processes), each holding the whole model and the same FP32 master weights. Every rank
 * sees the same seeded order of the global batch and takes its contiguous shard of it (mpt_dist_shard). After
 * backward, mpt_dist_allreduce_grads (called by mpt_trainer_step between backward and unscale) replaces each
 * rank's FP32 weight gradients by the weighted sum over ranks:
 *
 *     g = sum_r  w_r * g_r,    w_r = Bv_r / Bv      (Bv_r: valid rows of rank r's shard, Bv: of the global batch)
 *
 * The loss layer normalises by the rank's own valid rows (g_r is the gradient of the rank's mean loss), so
 * this is exactly the gradient of the mean loss over the global batch, padding rows ignored. With N = 2 and
 * an even batch w_r = 1/2 is a power of two: each rank's dz rows equal the N = 1 rows times 2 exactly, and
 * the only change from N = 1 is the summation order of the weight-gradient GEMM's batch dimension.
 *
 * Wire precision (--grad-comm, mpt_grad_comm): FP32 sums w_r * g_r in FP32 (MPI_SUM). BF16/FP16 round
 * w_r * g_r to the 16-bit dtype (RNE), sum in that dtype (each partial sum rounded, as NCCL does for
 * half/bfloat16 buffers) and widen back to FP32. The gradients are still loss-scaled and already divided by
 * the rank count (w_r), PyTorch's fp16_compress_hook order (divide, then all-reduce): a loss-scaled FP16
 * gradient neither underflows nor silently overflows, because an overflow becomes inf and skips the step.
 * Error per element (N = 2): |g~ - g| <= (2u + u^2)(|w_0 g_0| + |w_1 g_1|), u = 2^-11 (FP16), 2^-8 (BF16).
 *
 * found_inf is agreed: each rank computes whether its own gradient or the reduced one holds inf/NaN, the
 * ranks take the maximum (MPI_Allreduce MAX) and every rank sets found_inf when any did, so one rank's
 * overflow skips the step everywhere and the masters stay bit-identical across ranks.
 *
 * Sources: PyTorch DistributedDataParallel (gradients averaged over ranks), torch.distributed.algorithms.
 * ddp_comm_hooks.default_hooks.fp16_compress_hook / bf16_compress_hook, DeepSpeed communication_data_type.
 */
#ifndef MPT_ENGINE_DIST_DIST_H
#define MPT_ENGINE_DIST_DIST_H

#include <stdint.h>

#include "engine/dtype.h"
#include "engine/status.h"

struct mpt_trainer;

/* The dtype gradients travel in. */
typedef enum mpt_grad_comm {
    MPT_GRAD_COMM_FP32 = 0,
    MPT_GRAD_COMM_BF16,
    MPT_GRAD_COMM_FP16,
} mpt_grad_comm;

/* "fp32"/"bf16"/"fp16"; parse returns 0, or -1 for an unknown name. */
const char *mpt_grad_comm_name(mpt_grad_comm c);
int mpt_grad_comm_parse(const char *s, mpt_grad_comm *out);
/* MPT_DTYPE_F32, MPT_DTYPE_BF16 or MPT_DTYPE_F16. */
mpt_dtype mpt_grad_comm_dtype(mpt_grad_comm c);

typedef struct mpt_dist mpt_dist;

/* 1 if this build has MPI (Meson found Open MPI), else 0. */
int mpt_dist_built(void);

/* The first line of the MPI library's version string as loaded at run time (MPI_Get_library_version, which MPI 3.0
 * allows before MPI_Init: "Open MPI v4.1.4, package: ..."), in a static buffer; NULL in a build without MPI. */
const char *mpt_dist_library_version(void);

/* Joins the job: MPI_Init (unless already initialised) and the world communicator. *out is owned by the
 * caller (mpt_dist_free). Errors: MPT_ERR_ARG without MPI in the build (the message says how to
 * build it), MPT_ERR_ARG for an unknown comm. */
mpt_status mpt_dist_init(mpt_dist **out, mpt_grad_comm comm);
/* Frees the buffers and calls MPI_Finalize if mpt_dist_init called MPI_Init. NULL-safe; sets *d = NULL. For the
 * end of a job whose ranks all got there; a command that may end with one rank failed calls mpt_dist_finish. */
void mpt_dist_free(mpt_dist **d);

/* Seconds a failed rank waits at mpt_dist_finish for its peers before it aborts the job. */
#define MPT_DIST_EXIT_WAIT_S 5

/* The default time limit of a training collective, seconds (PyTorch's NCCL watchdog's default). */
#define MPT_DIST_DEFAULT_TIMEOUT_S 600.0

/* The time limit of every wait of this interface (--comm-timeout; > 0, default MPT_DIST_DEFAULT_TIMEOUT_S; 0 waits
 * without a limit). Every wait names what it waits for. A rank that waits can ask its peers where they are (a
 * communicator of its own): each answers while it waits, and between the steps of a training run (mpt_dist_poll).
 *  - A collective of a training step (the gradient all-reduce over MPI or NCCL, found_inf, the sums of losses and
 *    accuracies, the weights checksum, mpt_dist_any) not complete after `seconds` makes the rank ask its peers which
 *    collective they are in, name on stderr, in one line, the ranks that did not arrive (no answer within the grace
 *    period: stopped, hung or dead) or are in another collective, abort the NCCL communicator and call MPI_Abort,
 *    which ends the job. An MPI error in such a collective ends the job the same way, naming it.
 *  - The other waits (mpt_dist_send, _recv, _bcast, _sum_int, _agree, the signals, mpt_dist_finish), which may last as
 *    long as a peer's training runs: each time `seconds` pass the rank asks its peers; one that does not answer within
 *    the grace period, or every peer waiting as well for longer than `seconds` (ranks waiting for each other), ends
 *    the job with one line naming the ranks and what each waits for; otherwise (peers working) the wait goes on.
 * The grace period: a tenth of the limit, within [10 s, 60 s]. */
void mpt_dist_set_timeout(mpt_dist *d, double seconds);

/* Answers the questions of waiting peers (see mpt_dist_set_timeout): call it between the steps of a run (tools/run.c
 * does), so that a peer waiting for this rank's runs sees it working. Cheap (one MPI_Iprobe); NULL-safe. */
void mpt_dist_poll(mpt_dist *d);

/* One setting of a job, for mpt_dist_agree: its name as the user writes it ("--lr") and its canonical text. */
typedef struct mpt_dist_item {
    const char *name;
    const char *value;
} mpt_dist_item;

/* Whether every rank holds the same settings (collective, bounded as above): rank 0's list is broadcast and each rank
 * compares its own with it. MPT_OK when all agree; otherwise MPT_ERR_ARG on every rank with the same one-line
 * message naming the first setting that differs on the lowest such rank and the two values ("the ranks disagree on
 * --lr: rank 1: 0.1, rank 0: 0.001"; a number is shown in its shortest form that reads back the same). Lists of
 * different names or lengths are refused as different mptrain binaries. MPT_ERR_IO for a failed communication. */
mpt_status mpt_dist_agree(mpt_dist *d, const mpt_dist_item *items, int n);

/* Whether x is nonzero on any rank (collective, within the time limit): the ranks' agreement to stop. */
int mpt_dist_any(mpt_dist *d, int x);

/* The end of a job (collective in effect; every rank calls it once, with its exit code: 0 = success). The ranks
 * agree on the worst exit code (MPI_Iallreduce MAX on a communicator of its own, so it never matches a collective
 * a peer still waits in). A rank that succeeded waits for the others as long as they take. When all ranks get
 * there, mpt_dist_free releases everything cleanly, except that after any rank's failure the NCCL communicator is
 * aborted (ncclCommAbort), not destroyed. A failed rank whose peers have not all arrived within
 * MPT_DIST_EXIT_WAIT_S (they wait for it in a step's collective that it will never join) failed alone: it says so
 * on stderr, aborts its NCCL communicator and calls MPI_Abort(exit_code), which ends every rank of the job, so no
 * peer hangs; it does not return then. With one rank it is mpt_dist_free. NULL-safe; sets *d = NULL. Returns the
 * agreed worst exit code (the same on every rank); exit_code itself with one rank, a NULL *d or no MPI. */
int mpt_dist_finish(mpt_dist **d, int exit_code);

int mpt_dist_rank(const mpt_dist *d);
int mpt_dist_size(const mpt_dist *d);
mpt_grad_comm mpt_dist_comm(const mpt_dist *d);

/* Rank `rank` of `size` takes the contiguous rows [*lo, *hi) of a global batch of B rows:
 * lo = floor(rank * B / size), hi = floor((rank + 1) * B / size). */
void mpt_dist_shard(int B, int rank, int size, int *lo, int *hi);

/* The valid rows of this rank's shard and of the global batch for the next step (host values; the weight
 * w_r = local / global; 0 when the global batch has none). */
void mpt_dist_set_batch(mpt_dist *d, int n_valid_local, int n_valid_global);

/* One GPU per rank: makes the next CUDA backend use GPU `local rank` (the rank's index among the ranks on its
 * node, MPI_COMM_TYPE_SHARED), as llm.c does. Call before creating the backend. MPT_ERR_DEVICE when there is no
 * such GPU or no CUDA module. */
mpt_status mpt_dist_select_gpu(mpt_dist *d);

/* Attaches d to t (t->dist = d: mpt_trainer_step then all-reduces the gradients) after checking that every
 * rank holds bit-identical master weights (mpt_dist_check_identical). A CUDA trainer also gets its NCCL
 * communicator here (collective; once per mpt_dist, sized for t's gradients); MPT_ERR_DEVICE, saying how to get
 * it, when the CUDA module was built without NCCL. */
mpt_status mpt_dist_attach(mpt_dist *d, struct mpt_trainer *t);

/* FNV-1a checksum of every rank's master weights; MPT_ERR_ARG naming `when` and both checksums if the ranks
 * differ, MPT_OK if all agree. Collective: every rank must call it. */
mpt_status mpt_dist_check_identical(mpt_dist *d, const struct mpt_trainer *t, const char *when);

/* The step's hook (collective): g_i <- sum over ranks of w_r g_i in the wire dtype for every weight gradient
 * of t, found_inf agreed (see the header comment). CPU backend: MPI on host memory; CUDA backend: NCCL on the
 * backend's stream (measure must be 0 there: the communication error is measured on the CPU backend only).
 * measure != 0 (a telemetry step; every rank must pass the same value): also all-reduces a copy of the same
 * weighted gradients in FP32 (MPI_SUM) and records, per weight gradient i, the communication error
 *     e_i = ||g~_i - g32_i||_2 / ||g32_i||_2      (g~: the wire's result, g32: the FP32 all-reduce)
 * and the same over all gradients together (mpt_dist_comm_error). The reference changes nothing the step
 * uses: the gradients are the wire's, bit for bit, with or without it, and its time is not counted in
 * mpt_dist_comm_seconds. With --grad-comm fp32 both sums are the same FP32 all-reduce of the same data, so
 * e_i = 0 by construction: the row says the wire added nothing to FP32 summation, not that FP32 summation is
 * exact (its own error, <= (N - 1) 2^-24 sum_r |w_r g_r| per element, is not measured). Error bound of the
 * 16-bit wires (u = 2^-8 BF16, 2^-11 FP16): each rank's term is rounded once and every partial sum once, so
 * an element passes at most N roundings: |g~ - g| <= ((1 + u)^N - 1) sum_r |w_r g_r| (plus 2^-25 per rounding
 * in FP16's subnormal range), with g the exact sum; |g32 - g| <= ((1 + 2^-24)^(N-1) - 1) sum_r |w_r g_r|. */
void mpt_dist_allreduce_grads(mpt_dist *d, struct mpt_trainer *t, int measure);

/* After a step (collective): every rank's graph buffers (batch norm's running statistics, which each rank updates from
 * its own shard) become rank 0's, as torch.nn.parallel.DistributedDataParallel broadcasts its module buffers from rank
 * 0 (broadcast_buffers=True, its default), so every rank evaluates and checkpoints the same network. Host-staged MPI
 * broadcast within the job's collective time limit; nothing when the graph has no buffers. */
void mpt_dist_broadcast_buffers(mpt_dist *d, struct mpt_trainer *t);

/* The communication errors of the last measured step: *rel_l2 points at n_params values (parameter order,
 * NaN when a gradient holds inf/NaN, 0 when both sums are all zero), *all at the error over all gradients
 * together. Returns the step's 1-based number (the trainer's iteration + 1 when it was measured), 0 if no
 * step was measured yet. The arrays are owned by d. */
int64_t mpt_dist_comm_error(const mpt_dist *d, const double **rel_l2, double *all);

/* The communication primitive under the hook, on a host FP32 buffer of n elements (collective):
 * x <- sum over ranks of RNE_wire(weight * x), each partial sum rounded to the wire dtype, widened to FP32.
 * Returns 1 if x (before or after) holds inf/NaN on any rank, else 0. */
int mpt_dist_allreduce_f32(mpt_dist *d, float *x, int64_t n, float weight);

/* Sum over ranks of a host double (collective), for logging: losses, correct counts. */
double mpt_dist_sum_f64(mpt_dist *d, double x);

/* Seconds spent in mpt_dist_allreduce_grads so far on this rank (wall clock, host; on the CUDA backend only the
 * time to enqueue the NCCL work, which runs asynchronously). */
double mpt_dist_comm_seconds(const mpt_dist *d);

/* ---- jobs of independent runs: mptrain compare / lab over MPI (tools/sweep.c) ------------------------------- *
 * The same job (MPI_COMM_WORLD) as the data-parallel hook; a sweep joins it with mpt_dist_init (any wire
 * dtype: a sweep sends no gradients). Results travel as opaque byte strings between ranks of one binary.
 * These calls wait without spinning (they test the request and sleep 50 us to 2 ms between tests): a rank
 * that waits for another's runs leaves its core to the ranks still training (Open MPI's blocking calls poll at
 * full speed). The latency this adds is a few milliseconds per call, nothing against a training run. Their waits are
 * bounded (mpt_dist_set_timeout: peers that stop answering, or ranks that wait for each other, end the job), and
 * `what` names what the call waits for in that message ("the results of run 3"). */

/* The number of ranks a launcher announced in the environment (Open MPI's mpirun: OMPI_COMM_WORLD_SIZE;
 * MPICH's Hydra and Slurm's srun --mpi=pmi2: PMI_SIZE), 1 when only PMIX_RANK says a PMIx launcher (srun
 * --mpi=pmix) started it, or 0 when the process was not started by a launcher. Needs no MPI in the build and calls no MPI function: a command uses it to
 * decide whether to join a job, and a build without MPI to refuse running as one of several ranks. */
int mpt_dist_env_size(void);

/* This process's rank as its launcher announced it (OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK), 0 without a
 * launcher or a readable value. Like mpt_dist_env_size, it needs no MPI: a command that ends before joining the job
 * uses it to have one rank speak for all. */
int mpt_dist_env_rank(void);

/* The sleeps of the waits that do not spin (the sweeps' messages, the agreements): the first MPT_DIST_SLEEP_MIN_NS
 * (50 us), each next one twice the last, up to MPT_DIST_SLEEP_MAX_NS (2 ms) and no more. Returns the sleep after one
 * of ns nanoseconds. Needs no MPI. */
#define MPT_DIST_SLEEP_MIN_NS 50000L
#define MPT_DIST_SLEEP_MAX_NS 2000000L
long mpt_dist_next_sleep_ns(long ns);

/* Ranks of the job on this rank's node (MPI_Comm_split_type MPI_COMM_TYPE_SHARED at mpt_dist_init, which also finds
 * this rank's index among them for mpt_dist_select_gpu). */
int mpt_dist_local_size(const mpt_dist *d);

/* Point-to-point: sends n bytes of buf to rank dest with tag (blocking; n <= INT_MAX). Messages between two
 * ranks with the same tag arrive in the order they were sent (MPI's non-overtaking rule). MPT_ERR_IO naming
 * the MPI error, MPT_ERR_ARG for n > INT_MAX. */
mpt_status mpt_dist_send(mpt_dist *d, int dest, int tag, const void *buf, int64_t n, const char *what);
/* Receives the next message with tag from rank src (src < 0: from any rank; *from receives the sender when
 * from is not NULL) into a malloc'd *buf of *n bytes (the caller frees it). */
mpt_status mpt_dist_recv(mpt_dist *d, int src, int tag, void **buf, int64_t *n, int *from, const char *what);
/* Broadcast from root (collective): on root, *buf and *n are the message (unchanged); on the other ranks they
 * receive a malloc'd copy (the caller frees it). */
mpt_status mpt_dist_bcast(mpt_dist *d, int root, void **buf, int64_t *n, const char *what);
/* *x <- the sum of *x over the ranks (collective). */
mpt_status mpt_dist_sum_int(mpt_dist *d, int *x, const char *what);

/* A signal: one small message with tag to every other rank, sent without blocking (a failed rank tells the
 * others to start no further runs). mpt_dist_signalled reports, without blocking or consuming it, whether a
 * signal with tag has arrived. mpt_dist_signal_drain receives `expected` signals with tag sent to this rank
 * and completes this rank's own signal sends; call it once every rank knows how many were sent. */
mpt_status mpt_dist_signal(mpt_dist *d, int tag);
int mpt_dist_signalled(mpt_dist *d, int tag);
mpt_status mpt_dist_signal_drain(mpt_dist *d, int tag, int expected);

#endif
