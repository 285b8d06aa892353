/*
 * tests/test_dist.c - data-parallel training over MPI (engine/dist, issue #15 part B). Runs under
 * `mpirun -np 2` (meson suite 'mpi'); rank 0 prints Check's summary, rank 1 runs silently, and every
 * verdict is agreed over the ranks before it is asserted so that no rank waits in a collective for one that
 * failed.
 *  - N = 2 vs N = 1 over 50 steps, same global batch, seed and order, in fp32/tf32/fp16/bf16: each rank
 *    also trains the N = 1 reference itself on the whole global batch; losses and masters agree within a
 *    bound derived from the changed summation order (see order_bound); the same with dropout, whose masks
 *    follow the global row (mpt_graph_set_shard);
 *  - --grad-comm bf16/fp16: the all-reduced value lies within (2u + u^2)(|w a| + |w b|) of the exact sum
 *    (one rounding of each rank's term to the wire dtype, one of their sum), and is not exact everywhere;
 *  - an injected non-finite gradient on rank 1 only skips the step on both ranks; masters stay bit-identical
 *    across ranks, and equal those of a run that never saw the step's gradient;
 *  - telemetry's communication error (comm_rel_l2) per tensor within the bound derived from the ranks' own
 *    gradients, nonzero for bf16/fp16 and exactly 0 for fp32; telemetry on trains bit-identically to off;
 *  - a finite FP16 sum that overflows on the wire is found_inf on every rank; the agreement to stop is an "any";
 *    the shard rule on a batch the ranks do not divide; the launcher sizes read from the environment;
 *  - the job-level paths: the settings agreement (a difference in the first item, lists of other lengths), the exit
 *    agreement's worst code, a peer answering from a wait shorter than the limit (not a deadlock), a rank that cannot
 *    allocate the checksum buffer, the failure signal reaching the other rank only.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "datasets/synthetic.h"
#include "engine/dist/dist.h"
#include "engine/layers/layers.h"
#include "engine/optim/optim.h"
#include "engine/rng.h"
#include "engine/telemetry/telemetry.h"
#include "engine/train.h"
#include "harness.h"

#define GB 64       /* global batch */
#define HIDDEN 64
#define STEPS 50
#define LR 0.05f

/* check_identical_agrees_that_a_rank_cannot_checksum makes one rank's malloc fail: under AddressSanitizer, which by
 * default ends the program on an allocation it cannot serve, malloc must return NULL as the C library's does. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static mpt_dist *dist; /* one per process; the wire dtype is switched per test by re-creating it */

static int agree_all(int ok) {
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok;
}

static double max_all(double x) {
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return x;
}

static void use_wire(mpt_grad_comm c) {
    mpt_dist_free(&dist); /* MPI stays initialised: main() called MPI_Init */
    ck_assert_int_eq(mpt_dist_init(&dist, c), MPT_OK);
}

typedef struct model {
    mpt_backend *be;
    mpt_trainer *tr;
} model;

/* MLP dim-64-classes on rows [row0, row0 + batch) of a global batch of GB rows, with dropout p after the
 * ReLU when p > 0. */
static void model_open(model *m, const mpt_mnist *data, mpt_precision mode, int row0, int batch, float p,
                       const mpt_train_config *cfg) {
    m->be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(mode, mode == MPT_PRECISION_TF32, mode == MPT_PRECISION_TF32);
    mpt_graph *g = mpt_graph_create(m->be, &pol, batch);
    mpt_graph_set_shard(g, row0, GB);
    int64_t shape[2] = {batch, data->dim};
    mpt_tensor *x = mpt_input(g, 2, shape);
    x = mpt_relu(g, mpt_linear(g, x, HIDDEN, "fc1"), "relu1");
    if (p > 0.0f) x = mpt_dropout(g, x, p, "drop1");
    x = mpt_linear(g, x, data->n_classes, "fc2");
    mpt_softmax_xent(g, x, "loss");
    ck_assert_int_eq(mpt_trainer_create(&m->tr, g, cfg), MPT_OK);
}

static void model_close(model *m) {
    mpt_trainer_free(&m->tr);
    mpt_backend_free(&m->be);
}

static mpt_train_config sgd_config(mpt_precision mode) {
    mpt_train_config cfg = mpt_train_config_default(mode);
    cfg.optim = mpt_optim_hparams_default(MPT_OPTIM_SGD);
    cfg.schedule.base_lr = LR;
    cfg.seed = 7;
    return cfg;
}

/* The same seeded order on every rank: a permutation of the training rows. */
static void make_order(int32_t *perm, int64_t n) {
    float *scratch = malloc((size_t)n * sizeof *scratch);
    for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
    mpt_rng_shuffle(perm, (size_t)n, scratch, 99, 0);
    free(scratch);
}

/* Max |a - b| over all masters of two trainers, and max |a| (both FP32 masters). */
static void masters_diff(const mpt_trainer *a, const mpt_trainer *b, double *diff, double *amax) {
    *diff = 0.0;
    *amax = 0.0;
    for (int i = 0; i < a->n_params; i++) {
        const mpt_tensor *ma = a->master[i], *mb = b->master[i];
        for (int64_t k = 0; k < mpt_tensor_numel(ma); k++) {
            double x = mpt_load_f32(ma->data, ma->dtype, k), y = mpt_load_f32(mb->data, mb->dtype, k);
            *diff = fmax(*diff, fabs(x - y));
            *amax = fmax(*amax, fabs(x));
        }
    }
}

/* Unit roundoff of the dtype a mode's GEMM inputs are rounded to (0: FP32 inputs are not rounded). */
static double compute_u(mpt_precision mode) {
    switch (mode) {
    case MPT_PRECISION_FP32: return 0.0;
    case MPT_PRECISION_TF32: return 0x1p-11;
    case MPT_PRECISION_FP16: return 0x1p-11;
    default: return 0x1p-8; /* bf16 */
    }
}

/* dropout_p > 0: a dropout layer after the ReLU; the masks depend on the global row (mpt_graph_set_shard), so
 * both runs drop the same units of every row and the bound is the one without dropout, with the kept hidden
 * activations scaled by 1 / (1 - p). */
static void check_n2_matches_n1(mpt_precision mode, float dropout_p) {
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 4096, 0, 64, 8, 1234), MPT_OK);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)data.n_train);
    make_order(perm, data.n_train);
    int rank = mpt_dist_rank(dist), size = mpt_dist_size(dist), lo, hi;
    mpt_dist_shard(GB, rank, size, &lo, &hi);
    mpt_train_config cfg = sgd_config(mode);
    model ref, dp;
    model_open(&ref, &data, mode, 0, GB, dropout_p, &cfg);
    model_open(&dp, &data, mode, lo, hi - lo, dropout_p, &cfg);
    ck_assert_int_eq(mpt_dist_attach(dist, dp.tr), MPT_OK);
    double loss_diff = 0.0, loss_max = 0.0, w1_diff = 0.0, w_max;
    for (int s = 0; s < STEPS; s++) {
        const int32_t *rows = perm + (int64_t)s * GB;
        mpt_trainer_gather(ref.tr, data.train_images, data.train_labels, rows, data.dim, 0.0f, 1.0f);
        mpt_trainer_step(ref.tr);
        mpt_dist_set_batch(dist, hi - lo, GB);
        mpt_trainer_gather(dp.tr, data.train_images, data.train_labels, rows + lo, data.dim, 0.0f, 1.0f);
        mpt_trainer_step(dp.tr);
        mpt_train_stats a, b;
        mpt_trainer_stats(ref.tr, &a);
        mpt_trainer_stats(dp.tr, &b);
        double global = mpt_dist_sum_f64(dist, (double)b.loss * (hi - lo)) / GB; /* mean over the global batch */
        loss_diff = fmax(loss_diff, fabs(global - a.loss));
        loss_max = fmax(loss_max, fabs(a.loss));
        if (s == 0) masters_diff(ref.tr, dp.tr, &w1_diff, &w_max);
    }
    double w_diff;
    masters_diff(ref.tr, dp.tr, &w_diff, &w_max);
    int identical = mpt_dist_check_identical(dist, dp.tr, "after 50 steps") == MPT_OK;
    w1_diff = max_all(w1_diff);
    w_diff = max_all(w_diff);
    loss_diff = max_all(loss_diff);
    /* Step 1. Both runs start from the same masters; N = 2 divides by B/2 instead of B (a power of two) and
     * w_r = 1/2 is exact. What changes:
     * (a) the weight-gradient GEMM's sum over the batch: N = 1 sums B = 64 products in FP32, N = 2 two sums of
     *     32, added. Each sum is within gamma_B * sum|x dz| of the exact one (Higham, Accuracy and Stability,
     *     3.1; gamma_B = B u / (1 - B u), u = 2^-24), so they differ by at most 2 gamma_B * sum|x dz| <=
     *     2 gamma_B * max|x| (sum |dz| <= 1 per column: |p - y| <= 1 over B rows, divided by B; the loss scale
     *     cancels in unscale). Inputs are pixels in [0, 1]; hidden activations at init are at most
     *     64 * (1/8) * 1 + 1/8 = 8.125 (PyTorch init: |W| <= 1/sqrt(fan_in)); biases see x = 1. SGD turns that
     *     into lr * 2 gamma_B * 8.125 on the masters: the step-1 bound.
     * (b) the forward and input-gradient GEMMs run on 32 rows instead of 64, and OpenBLAS's sgemm does not give
     *     a row the same sum for every M (measured with the step below: 732 of 4096 fc1 outputs differ, by at
     *     most one FP32 ulp, between M = 64 and M = 32 calls on the same rows), so activations and dz differ by
     *     FP32 roundings too; in fp32 that moves the gradient by the order of (a).
     * (c) TF32 only, in effect: such a one-ulp difference can put an FP32 value on the other side of a TF32
     *     rounding boundary when it becomes the next GEMM's operand; the operand then moves by one TF32 ulp
     *     (2^-10 relative, 8192 FP32 ulps) and later layers pass that on (measured on this step: 2 flipped TF32
     *     operands in relu1.out, 3 in fc2.out, 1 in dz, 21 in relu1.out.grad). FP16/BF16 round accumulators to
     *     16 bits as well, but products of 16-bit values are exact and their sums mostly too, so their rows
     *     rarely differ (1 of 4096 fc1 outputs in fp16, none in bf16) and flips are rarer still. That is why
     *     TF32's step-1 difference is ~45 times the other modes' (3.4e-7 against 7.5e-9, one master ulp): it is
     *     expected, not a defect of the all-reduce. It still meets the step-1 bound, by a factor 9 measured
     *     rather than proven: if every TF32 operand of the weight-gradient GEMM flipped, the bound would be
     *     lr * (2 gamma_B + 4 * 2^-11) * 8.125 = 8e-4 (docs/distributed.md).
     * Step 50: T steps of that, plus, in TF32/16-bit modes, a master difference can move a rounded working
     * copy or activation across a rounding boundary of the compute dtype (unit roundoff rho), which perturbs
     * a later gradient relatively by up to 2 rho; the factor 8 allows for the feedback of earlier differences
     * through later gradients. Loose (the printed figures show how loose), but a wrong weighting (w_r = 1
     * instead of 1/2, or a missing reduction) moves the first step's masters by lr * |g| ~ 1e-3 and fails the
     * step-1 bound by two orders of magnitude in every mode. */
    double gamma = GB * 0x1p-24 / (1.0 - GB * 0x1p-24), rho = compute_u(mode);
    double hmax = 8.125 / (1.0 - dropout_p); /* inverted dropout scales the kept activations */
    double w1_bound = LR * 2.0 * gamma * hmax;
    double w_bound = 8.0 * STEPS * LR * 2.0 * (gamma + rho) * hmax;
    double l_bound = 8.0 * STEPS * 2.0 * (gamma + rho) * (loss_max + 1.0); /* the loss follows the weights */
    if (rank == 0)
        printf("N=2 vs N=1 %s%s: step 1 max |dW| %.3g (bound %.3g); step 50 max |dW| %.3g (bound %.3g), "
               "max |dloss| %.3g (bound %.3g)\n", mpt_precision_name(mode), dropout_p > 0 ? " + dropout" : "", w1_diff, w1_bound, w_diff, w_bound,
               loss_diff, l_bound);
    model_close(&ref);
    model_close(&dp);
    free(perm);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(identical), "the ranks' masters differ after training");
    ck_assert_msg(w1_diff <= w1_bound, "%s: step 1 masters differ from N = 1 by %g > %g", mpt_precision_name(mode),
                  w1_diff, w1_bound);
    ck_assert_msg(w_diff <= w_bound, "%s: masters differ from N = 1 by %g > %g", mpt_precision_name(mode), w_diff,
                  w_bound);
    ck_assert_msg(loss_diff <= l_bound, "%s: losses differ from N = 1 by %g > %g", mpt_precision_name(mode),
                  loss_diff, l_bound);
}

START_TEST(n2_matches_n1) {
    static const mpt_precision modes[4] = {MPT_PRECISION_FP32, MPT_PRECISION_TF32, MPT_PRECISION_FP16,
                                           MPT_PRECISION_BF16};
    use_wire(MPT_GRAD_COMM_FP32);
    check_n2_matches_n1(modes[_i], 0.0f);
}
END_TEST

/* With dropout (p = 0.5): before the masks depended on the global row, rank 1 drew the masks of rows 0..31
 * for its rows 32..63, and step 1's masters differed from N = 1 by ~1e-3, far outside the bound. */
START_TEST(n2_matches_n1_with_dropout) {
    static const mpt_precision modes[2] = {MPT_PRECISION_FP32, MPT_PRECISION_BF16};
    use_wire(MPT_GRAD_COMM_FP32);
    check_n2_matches_n1(modes[_i], 0.5f);
}
END_TEST

/* The wire's error against the exact sum, element by element. Rank r holds a_r = values from seed 100 + r
 * spanning six binades (and every rank regenerates both to know the exact sum in double). */
START_TEST(wire_error_within_unit_roundoff) {
    static const mpt_grad_comm wires[2] = {MPT_GRAD_COMM_BF16, MPT_GRAD_COMM_FP16};
    mpt_grad_comm c = wires[_i];
    use_wire(c);
    const double u = c == MPT_GRAD_COMM_BF16 ? 0x1p-8 : 0x1p-11;
    enum { N = 10000 };
    int rank = mpt_dist_rank(dist), size = mpt_dist_size(dist);
    ck_assert_int_eq(size, 2);
    static float x[N], v[2][N];
    for (int r = 0; r < 2; r++) {
        tests_rng g = {100u + (uint64_t)r};
        for (int i = 0; i < N; i++)
            v[r][i] = (float)((tests_next(&g) & 1 ? -1.0 : 1.0) * ldexp(tests_uniform(&g, 1.0, 2.0), tests_int(&g, -8, -3)));
    }
    memcpy(x, v[rank], sizeof x);
    int bad = mpt_dist_allreduce_f32(dist, x, N, 0.5f);
    int ok = !bad, inexact = 0;
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double a = 0.5 * v[0][i], b = 0.5 * v[1][i], exact = a + b;
        double bound = (2.0 * u + u * u) * (fabs(a) + fabs(b));
        double err = fabs((double)x[i] - exact);
        ok &= err <= bound;
        inexact |= err > 0.0;
        if (fabs(a) + fabs(b) > 0.0) worst = fmax(worst, err / (fabs(a) + fabs(b)));
    }
    if (rank == 0) printf("grad-comm %s: max |err| / (|a| + |b|) = %.3g, bound 2u + u^2 = %.3g\n",
                          mpt_grad_comm_name(c), worst, 2.0 * u + u * u);
    ck_assert_msg(agree_all(ok), "%s wire: an element outside (2u + u^2)(|a| + |b|)", mpt_grad_comm_name(c));
    ck_assert_msg(agree_all(inexact), "%s wire: every element exact: the values did not travel in 16 bits",
                  mpt_grad_comm_name(c));
}
END_TEST

/* Rank 1 alone makes step 3's gradient NaN (an FP16 overflow would): both ranks skip it, back off the scale,
 * and end bit-identical. */
START_TEST(nonfinite_on_one_rank_skips_everywhere) {
    static const mpt_grad_comm wires[3] = {MPT_GRAD_COMM_FP32, MPT_GRAD_COMM_BF16, MPT_GRAD_COMM_FP16};
    use_wire(wires[_i]);
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 1024, 0, 64, 8, 1234), MPT_OK);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)data.n_train);
    make_order(perm, data.n_train);
    int rank = mpt_dist_rank(dist), lo, hi;
    mpt_dist_shard(GB, rank, mpt_dist_size(dist), &lo, &hi);
    mpt_train_config cfg = sgd_config(MPT_PRECISION_FP16);
    if (rank == 1) cfg.inject_nonfinite_step = 3;
    model dp;
    model_open(&dp, &data, MPT_PRECISION_FP16, lo, hi - lo, 0.0f, &cfg);
    ck_assert_int_eq(mpt_dist_attach(dist, dp.tr), MPT_OK);
    unsigned char *before = NULL;
    size_t bytes = 0;
    int unchanged = 1;
    for (int s = 0; s < 6; s++) {
        if (s == 3) { /* snapshot the masters: step 3 must leave them as they are */
            for (int i = 0; i < dp.tr->n_params; i++) bytes += (size_t)mpt_tensor_numel(dp.tr->master[i]) * 4;
            before = malloc(bytes);
            size_t off = 0;
            for (int i = 0; i < dp.tr->n_params; i++) {
                size_t k = (size_t)mpt_tensor_numel(dp.tr->master[i]) * 4;
                memcpy(before + off, dp.tr->master[i]->data, k);
                off += k;
            }
        }
        mpt_dist_set_batch(dist, hi - lo, GB);
        mpt_trainer_gather(dp.tr, data.train_images, data.train_labels, perm + (int64_t)s * GB + lo, data.dim, 0.0f, 1.0f);
        mpt_trainer_step(dp.tr);
        if (s == 3) {
            size_t off = 0;
            for (int i = 0; i < dp.tr->n_params; i++) {
                size_t k = (size_t)mpt_tensor_numel(dp.tr->master[i]) * 4;
                unchanged &= memcmp(before + off, dp.tr->master[i]->data, k) == 0;
                off += k;
            }
        }
    }
    mpt_train_stats st;
    mpt_trainer_stats(dp.tr, &st);
    int identical = mpt_dist_check_identical(dist, dp.tr, "after the skipped step") == MPT_OK;
    int skipped_once = st.steps_skipped == 1 && st.steps_taken == 5;
    int backed_off = st.scale == 32768.0f; /* 2^16 halved once */
    model_close(&dp);
    free(before);
    free(perm);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(skipped_once), "rank %d: %d skipped, %d taken (expected 1 and 5 on every rank)", rank,
                  st.steps_skipped, st.steps_taken);
    ck_assert_msg(agree_all(unchanged), "rank %d: the skipped step changed the masters", rank);
    ck_assert_msg(agree_all(backed_off), "rank %d: loss scale %g after one overflow (expected 32768)", rank,
                  (double)st.scale);
    ck_assert_msg(agree_all(identical), "the ranks' masters differ after the skipped step");
}
END_TEST

/* All weight gradients of m, packed in parameter order, into out (FP32). */
static int64_t pack_grads(const model *m, float *out) {
    int64_t off = 0;
    for (int i = 0; i < m->tr->n_params; i++) {
        int64_t k = mpt_tensor_numel(m->tr->weight[i]);
        if (out) memcpy(out + off, m->tr->weight[i]->grad->data, (size_t)k * sizeof(float));
        off += k;
    }
    return off;
}

static double telemetry_value(const mpt_trainer *t, const char *tensor, const char *metric) {
    const mpt_telemetry_stat *st;
    int n = mpt_telemetry_stats(t->telemetry, &st);
    for (int i = 0; i < n; i++)
        if (strcmp(st[i].tensor, tensor) == 0 && strcmp(st[i].metric, metric) == 0) return st[i].last;
    return -1.0; /* not measured */
}

/* Telemetry's communication error on a data-parallel step (fp16 training, dynamic loss scale 2^16: the
 * gradients are loss-scaled, as they travel). Every rank recomputes step 1's per-rank gradients g_r with a
 * trainer of its own (same seed, same rows, a step without communication), gathers both ranks' and
 * derives, per tensor, the bound of the error telemetry reports, ||g~ - g32|| / ||g32||:
 *   a = w_0 g_0, b = w_1 g_1 (w_r = 1/2, exact); the wire rounds a, b and their sum once each:
 *   |g~ - (a + b)| <= (2u + u^2)(|a| + |b|) + 3 eta   (eta: half the subnormal spacing, 2^-25 FP16, 2^-134 BF16)
 *   |g32 - (a + b)| <= 2^-24 |a + b|                  (one FP32 rounding of the sum)
 * so ||g~ - g32|| <= || (2u + u^2)(|a| + |b|) + 3 eta + 2^-24 |a + b| || (triangle inequality, element-wise).
 * The measured error must lie within it, be nonzero for the 16-bit wires in at least one tensor (the values
 * did travel in 16 bits), and be exactly 0 for --grad-comm fp32, where the reference IS the wire's sum; and it must
 * equal, to FP64's rounding of the sums, the error of the wire simulated here element by element (for two ranks the
 * order of the 16-bit sum does not matter). Before, the probe ran a bare backward, which does not load the gathered
 * rows: its g_r came from an empty input (fc1.weight's bound was infinite, the others loose). */
START_TEST(telemetry_comm_error_within_bound) {
    static const mpt_grad_comm wires[3] = {MPT_GRAD_COMM_FP32, MPT_GRAD_COMM_BF16, MPT_GRAD_COMM_FP16};
    mpt_grad_comm c = wires[_i];
    use_wire(c);
    const double u = c == MPT_GRAD_COMM_BF16 ? 0x1p-8 : c == MPT_GRAD_COMM_FP16 ? 0x1p-11 : 0.0;
    const double eta = c == MPT_GRAD_COMM_BF16 ? 0x1p-134 : c == MPT_GRAD_COMM_FP16 ? 0x1p-25 : 0.0;
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 1024, 0, 64, 8, 1234), MPT_OK);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)data.n_train);
    make_order(perm, data.n_train);
    int rank = mpt_dist_rank(dist), lo, hi;
    mpt_dist_shard(GB, rank, mpt_dist_size(dist), &lo, &hi);
    mpt_train_config cfg = sgd_config(MPT_PRECISION_FP16);
    model dp, probe;
    model_open(&dp, &data, MPT_PRECISION_FP16, lo, hi - lo, 0.0f, &cfg);
    model_open(&probe, &data, MPT_PRECISION_FP16, lo, hi - lo, 0.0f, &cfg);
    ck_assert_int_eq(mpt_dist_attach(dist, dp.tr), MPT_OK);
    ck_assert_int_eq(mpt_telemetry_create(dp.tr, 1, NULL), MPT_OK);
    /* this rank's g_r: a step of the probe (no communication) on the same rows from the same masters and loss scale S
     * leaves g_r / S in its gradients (unscaled in place; S = 2^16 a power of two: times S is exact). (A bare
     * forward and backward would not do: the step is what loads the gathered rows into the input.) */
    mpt_trainer_gather(probe.tr, data.train_images, data.train_labels, perm + lo, data.dim, 0.0f, 1.0f);
    mpt_train_stats pst;
    mpt_trainer_stats(probe.tr, &pst);
    const float S = pst.scale;
    mpt_trainer_step(probe.tr);
    mpt_trainer_stats(probe.tr, &pst);
    ck_assert_int_eq(pst.steps_skipped, 0);
    int64_t n = pack_grads(&probe, NULL);
    float *both = malloc(2 * (size_t)n * sizeof(float)), *mine = malloc((size_t)n * sizeof(float));
    pack_grads(&probe, mine);
    for (int64_t j = 0; j < n; j++) mine[j] *= S;
    MPI_Allgather(mine, (int)n, MPI_FLOAT, both, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
    mpt_dist_set_batch(dist, hi - lo, GB);
    mpt_trainer_gather(dp.tr, data.train_images, data.train_labels, perm + lo, data.dim, 0.0f, 1.0f);
    mpt_trainer_step(dp.tr);
    int ok = 1, some_nonzero = 0;
    int64_t off = 0;
    for (int i = 0; i < dp.tr->n_params; i++) {
        int64_t k = mpt_tensor_numel(dp.tr->weight[i]);
        double bound_sq = 0.0, ref_sq = 0.0, wire_sq = 0.0;
        for (int64_t j = off; j < off + k; j++) {
            double a = 0.5 * both[j], b = 0.5 * both[n + j];
            double e = (2.0 * u + u * u) * (fabs(a) + fabs(b)) + 3.0 * eta + 0x1p-24 * fabs(a + b);
            float g32 = (float)(a + b); /* one FP32 rounding of the exact sum (a, b: FP32 halves, exact) */
            bound_sq += e * e;
            ref_sq += (double)g32 * (double)g32;
            /* the wire as dist.h defines it: each term rounded to the 16-bit dtype (RNE), their FP32 sum rounded again */
            float w = g32;
            if (c == MPT_GRAD_COMM_BF16)
                w = mpt_bf16_to_f32(mpt_f32_to_bf16(mpt_bf16_to_f32(mpt_f32_to_bf16((float)a)) +
                                                    mpt_bf16_to_f32(mpt_f32_to_bf16((float)b))));
            if (c == MPT_GRAD_COMM_FP16)
                w = mpt_f16_to_f32(mpt_f32_to_f16(mpt_f16_to_f32(mpt_f32_to_f16((float)a)) +
                                                  mpt_f16_to_f32(mpt_f32_to_f16((float)b))));
            wire_sq += ((double)w - g32) * ((double)w - g32);
        }
        double bound = sqrt(bound_sq / ref_sq), wire = sqrt(wire_sq / ref_sq);
        double got = telemetry_value(dp.tr, dp.tr->weight[i]->grad->name, "comm_rel_l2");
        if (c == MPT_GRAD_COMM_FP32) ok &= got == 0.0;
        else ok &= got >= 0.0 && got <= bound && fabs(got - wire) <= 1e-12 * wire;
        some_nonzero |= got > 0.0;
        if (rank == 0)
            printf("grad-comm %s, %s: comm_rel_l2 %.3g (the wire's rounding %.3g, bound %.3g)\n", mpt_grad_comm_name(c),
                   dp.tr->weight[i]->grad->name, got, wire, c == MPT_GRAD_COMM_FP32 ? 0.0 : bound);
        off += k;
    }
    double all = telemetry_value(dp.tr, MPT_TELEMETRY_ALL_PARAMS, "comm_rel_l2");
    ok &= c == MPT_GRAD_COMM_FP32 ? all == 0.0 : all > 0.0;
    free(both);
    free(mine);
    model_close(&dp);
    model_close(&probe);
    free(perm);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(ok), "%s wire: a communication error outside its bound (or nonzero for fp32)",
                  mpt_grad_comm_name(c));
    if (c != MPT_GRAD_COMM_FP32)
        ck_assert_msg(agree_all(some_nonzero), "%s wire: zero error everywhere: the values did not travel in 16 bits",
                      mpt_grad_comm_name(c));
}
END_TEST

/* Instruments only read: 8 data-parallel steps with telemetry every 2 steps (communication error included)
 * end with the masters of the same run without telemetry, bit for bit, on every rank. */
START_TEST(telemetry_trains_bit_identically) {
    static const mpt_grad_comm wires[2] = {MPT_GRAD_COMM_BF16, MPT_GRAD_COMM_FP16};
    use_wire(wires[_i]);
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 1024, 0, 64, 8, 1234), MPT_OK);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)data.n_train);
    make_order(perm, data.n_train);
    int rank = mpt_dist_rank(dist), lo, hi;
    mpt_dist_shard(GB, rank, mpt_dist_size(dist), &lo, &hi);
    mpt_train_config cfg = sgd_config(MPT_PRECISION_FP16);
    model run[2];
    for (int k = 0; k < 2; k++) {
        model_open(&run[k], &data, MPT_PRECISION_FP16, lo, hi - lo, 0.0f, &cfg);
        ck_assert_int_eq(mpt_dist_attach(dist, run[k].tr), MPT_OK);
    }
    ck_assert_int_eq(mpt_telemetry_create(run[1].tr, 2, NULL), MPT_OK);
    for (int s = 0; s < 8; s++)
        for (int k = 0; k < 2; k++) {
            mpt_dist_set_batch(dist, hi - lo, GB);
            mpt_trainer_gather(run[k].tr, data.train_images, data.train_labels, perm + (int64_t)s * GB + lo, data.dim,
                               0.0f, 1.0f);
            mpt_trainer_step(run[k].tr);
        }
    int same = 1;
    for (int i = 0; i < run[0].tr->n_params; i++)
        same &= memcmp(run[0].tr->master[i]->data, run[1].tr->master[i]->data,
                       (size_t)mpt_tensor_numel(run[0].tr->master[i]) * sizeof(float)) == 0;
    int measured = telemetry_value(run[1].tr, MPT_TELEMETRY_ALL_PARAMS, "comm_rel_l2") > 0.0;
    for (int k = 0; k < 2; k++) model_close(&run[k]);
    free(perm);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(measured), "telemetry measured no communication error");
    ck_assert_msg(agree_all(same), "rank %d: the masters with telemetry differ from those without", rank);
}
END_TEST

/* The weights of the gradient all-reduce (dist.h): g = sum_r w_r g_r with w_r = Bv_r / Bv, the valid rows of rank r's
 * shard over those of the global batch; before any mpt_dist_set_batch every row is valid and the shards equal, w_r =
 * 1/N. Every gradient element of rank 0 is 1, of rank 1 is 3: a fresh communicator gives 1/2 + 3/2 = 2; rank 0 with
 * all 32 valid rows and rank 1 with none (a last batch of padding) gives 1 * 1 + 0 * 3 = 1 (exact in FP32). */
START_TEST(weights_from_valid_rows) {
    use_wire(MPT_GRAD_COMM_FP32);
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 256, 0, 64, 8, 1234), MPT_OK);
    int rank = mpt_dist_rank(dist), ok = 1;
    mpt_train_config cfg = sgd_config(MPT_PRECISION_FP32);
    model m;
    model_open(&m, &data, MPT_PRECISION_FP32, rank * 32, 32, 0.0f, &cfg);
    ck_assert_int_eq(mpt_dist_attach(dist, m.tr), MPT_OK);
    for (int c = 0; c < 2; c++) {
        if (c == 1) mpt_dist_set_batch(dist, rank == 0 ? 32 : 0, 32);
        for (int i = 0; i < m.tr->n_params; i++) {
            float *gr = m.tr->weight[i]->grad->data;
            for (int64_t k = 0; k < mpt_tensor_numel(m.tr->weight[i]); k++) gr[k] = rank == 0 ? 1.0f : 3.0f;
        }
        mpt_dist_allreduce_grads(dist, m.tr, 0);
        const float want = c == 0 ? 2.0f : 1.0f;
        for (int i = 0; i < m.tr->n_params; i++) {
            const float *gr = m.tr->weight[i]->grad->data;
            for (int64_t k = 0; k < mpt_tensor_numel(m.tr->weight[i]); k++) ok &= gr[k] == want;
        }
    }
    model_close(&m);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(ok), "rank %d: reduced gradients are not sum_r w_r g_r (2 without set_batch, then 1)", rank);
}
END_TEST

/* MLP with a batch norm (running statistics: the graph's buffers) on rows [row0, row0 + batch) of a global batch. */
static void bn_open(model *m, const mpt_mnist *data, int row0, int batch, const mpt_train_config *cfg) {
    m->be = mpt_backend_cpu_create();
    mpt_policy pol = mpt_policy_make_explicit(MPT_PRECISION_FP32, 0, 0);
    mpt_graph *g = mpt_graph_create(m->be, &pol, batch);
    mpt_graph_set_shard(g, row0, GB);
    int64_t shape[2] = {batch, data->dim};
    mpt_tensor *x = mpt_linear(g, mpt_input(g, 2, shape), HIDDEN, "fc1");
    x = mpt_relu(g, mpt_batchnorm(g, x, 1e-5f, 0.1f, "bn1"), "relu1");
    mpt_softmax_xent(g, mpt_linear(g, x, data->n_classes, "fc2"), "loss");
    ck_assert_int_eq(mpt_trainer_create(&m->tr, g, cfg), MPT_OK);
}

/* After a step every rank's running statistics are rank 0's (dist.h: DistributedDataParallel's broadcast_buffers from
 * rank 0): bit for bit those of a process of the test's own that trains on rank 0's rows alone (same seed, masters and
 * rows; the statistics of a batch norm are per row set). Rank 1's own rows give other statistics. */
START_TEST(running_statistics_are_rank0s) {
    use_wire(MPT_GRAD_COMM_FP32);
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 1024, 0, 64, 8, 1234), MPT_OK);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)data.n_train);
    make_order(perm, data.n_train);
    int rank = mpt_dist_rank(dist), lo, hi, lo0, hi0;
    mpt_dist_shard(GB, rank, mpt_dist_size(dist), &lo, &hi);
    mpt_dist_shard(GB, 0, mpt_dist_size(dist), &lo0, &hi0);
    mpt_train_config cfg = sgd_config(MPT_PRECISION_FP32);
    model dp, solo;
    bn_open(&dp, &data, lo, hi - lo, &cfg);
    bn_open(&solo, &data, lo0, hi0 - lo0, &cfg);
    ck_assert_int_eq(mpt_dist_attach(dist, dp.tr), MPT_OK);
    mpt_dist_set_batch(dist, hi - lo, GB);
    mpt_trainer_gather(dp.tr, data.train_images, data.train_labels, perm + lo, data.dim, 0.0f, 1.0f);
    mpt_trainer_step(dp.tr);
    mpt_trainer_gather(solo.tr, data.train_images, data.train_labels, perm + lo0, data.dim, 0.0f, 1.0f);
    mpt_trainer_step(solo.tr);
    const mpt_graph *a = dp.tr->g, *b = solo.tr->g;
    int same = a->n_buffers == 2 && b->n_buffers == 2;
    for (int i = 0; same && i < a->n_buffers; i++)
        same &= memcmp(a->buffers[i].t->data, b->buffers[i].t->data, mpt_tensor_nbytes(a->buffers[i].t)) == 0;
    model_close(&dp);
    model_close(&solo);
    free(perm);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(same), "rank %d: the running statistics are not those of rank 0's rows", rank);
}
END_TEST

/* mpt_dist_check_identical (dist.h): identical masters pass; masters that differ in one bit of the last byte of the
 * last tensor on rank 1 only are refused on every rank, naming the checksums. */
START_TEST(check_identical_sees_one_bit) {
    use_wire(MPT_GRAD_COMM_FP32);
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 256, 0, 64, 8, 1234), MPT_OK);
    int rank = mpt_dist_rank(dist);
    mpt_train_config cfg = sgd_config(MPT_PRECISION_FP32);
    model m;
    model_open(&m, &data, MPT_PRECISION_FP32, rank * 32, 32, 0.0f, &cfg);
    ck_assert_int_eq(mpt_dist_attach(dist, m.tr), MPT_OK);
    int same_ok = mpt_dist_check_identical(dist, m.tr, "(same)") == MPT_OK;
    const mpt_tensor *last = m.tr->master[m.tr->n_params - 1];
    if (rank == 1) ((unsigned char *)last->data)[mpt_tensor_nbytes(last) - 1] ^= 0x01;
    mpt_status s = mpt_dist_check_identical(dist, m.tr, "(one bit)");
    int refused = s == MPT_ERR_ARG && strstr(mpt_last_error(), "differ") != NULL;
    model_close(&m);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(same_ok), "rank %d: identical masters refused", rank);
    ck_assert_msg(agree_all(refused), "rank %d: masters differing in one bit were not refused", rank);
}
END_TEST

/* --grad-comm's names (dist.h): "fp32", "bf16", "fp16" parse to their wire, print back, and travel as F32, BF16,
 * F16; anything else is refused. Local: no collective. */
START_TEST(grad_comm_names_round_trip) {
    static const char *const names[3] = {"fp32", "bf16", "fp16"};
    static const mpt_grad_comm wires[3] = {MPT_GRAD_COMM_FP32, MPT_GRAD_COMM_BF16, MPT_GRAD_COMM_FP16};
    static const mpt_dtype dtypes[3] = {MPT_DTYPE_F32, MPT_DTYPE_BF16, MPT_DTYPE_F16};
    for (int i = 0; i < 3; i++) {
        mpt_grad_comm c = MPT_GRAD_COMM_FP32;
        ck_assert_int_eq(mpt_grad_comm_parse(names[i], &c), 0);
        ck_assert_int_eq(c, wires[i]);
        ck_assert_str_eq(mpt_grad_comm_name(wires[i]), names[i]);
        ck_assert_int_eq(mpt_grad_comm_dtype(wires[i]), dtypes[i]);
    }
    mpt_grad_comm c;
    ck_assert_int_eq(mpt_grad_comm_parse("FP16", &c), -1);
}
END_TEST

/* mpt_dist_shard's rule from dist.h, lo = floor(r B / N), hi = floor((r + 1) B / N), on a batch the ranks do not divide
 * (the tests above use B = 64 on 2 ranks, where rounding never shows): B = 10 on 4 ranks gives [0,2) [2,5) [5,7)
 * [7,10), every row once. Local: no collective. */
START_TEST(shard_rule_on_uneven_batches) {
    static const int want[5] = {0, 2, 5, 7, 10};
    for (int r = 0; r < 4; r++) {
        int lo = -1, hi = -1;
        mpt_dist_shard(10, r, 4, &lo, &hi);
        ck_assert_msg(lo == want[r] && hi == want[r + 1], "rank %d of 4, B = 10: [%d, %d)", r, lo, hi);
    }
}
END_TEST

/* mpt_dist_env_size's launchers (dist.h): Open MPI's OMPI_COMM_WORLD_SIZE first, else PMI_SIZE (MPICH's Hydra,
 * srun --mpi=pmi2), else 1 when only PMIX_RANK is set, else 0; a value that is not a positive decimal integer is not a
 * size. The variables of this mpirun are put back afterwards. Local: no collective. */
START_TEST(env_size_reads_each_launcher) {
    static const char *const vars[3] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    int none = mpt_dist_env_size();
    setenv("PMIX_RANK", "0", 1);
    int pmix = mpt_dist_env_size();
    setenv("PMI_SIZE", "3", 1);
    int pmi = mpt_dist_env_size();
    setenv("OMPI_COMM_WORLD_SIZE", "5", 1);
    int ompi = mpt_dist_env_size();
    setenv("OMPI_COMM_WORLD_SIZE", "5x", 1);
    int trailing = mpt_dist_env_size(); /* not a size: PMI_SIZE is next */
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        else unsetenv(vars[i]);
        free(saved[i]);
    }
    ck_assert_msg(none == 0 && pmix == 1 && pmi == 3 && ompi == 5 && trailing == 3,
                  "none %d, PMIX_RANK %d, PMI_SIZE %d, OMPI_COMM_WORLD_SIZE %d, '5x' %d", none, pmix, pmi, ompi, trailing);
}
END_TEST

/* The waits that do not spin sleep 50 us, then twice as long each time, never more than 2 ms (dist.h): 50, 100, 200,
 * 400, 800, 1600 us, then 2000 us for good. Local: no collective. */
START_TEST(waits_sleep_at_most_2_ms) {
    static const long want[8] = {50000, 100000, 200000, 400000, 800000, 1600000, 2000000, 2000000};
    long ns = MPT_DIST_SLEEP_MIN_NS;
    for (int i = 0; i < 8; i++, ns = mpt_dist_next_sleep_ns(ns))
        ck_assert_msg(ns == want[i], "sleep %d: %ld ns, expected %ld", i, ns, want[i]);
    for (int i = 0; i < 100; i++, ns = mpt_dist_next_sleep_ns(ns)) ck_assert_int_eq(ns, 2000000);
}
END_TEST

/* The agreement to stop (mpt_dist_any, dist.h: "whether x is nonzero on any rank"): rank 1 alone asks, both stop; none
 * asks, none stops. */
START_TEST(any_is_true_when_one_rank_says_so) {
    use_wire(MPT_GRAD_COMM_FP32);
    int rank = mpt_dist_rank(dist);
    int one = mpt_dist_any(dist, rank == 1 ? 7 : 0);
    int none = mpt_dist_any(dist, 0);
    ck_assert_msg(agree_all(one == 1 && none == 0), "rank %d: any(rank 1 only) = %d, any(none) = %d", rank, one, none);
}
END_TEST

/* found_inf from the wire itself: finite terms whose sum overflows the 16-bit wire. Each rank sends 60000 (exact in
 * FP16: 1875 * 32) with weight 1; the FP16 sum 120000 lies above 65520 (half an ulp past FP16's largest 65504) and
 * rounds to inf, so mpt_dist_allreduce_f32 must say non-finite on every rank though no rank's input was (dist.h:
 * "1 if x (before or after) holds inf/NaN on any rank"). BF16 holds 120000 (FP32's range): finite, 0. */
START_TEST(wire_overflow_is_found_inf) {
    static const mpt_grad_comm wires[2] = {MPT_GRAD_COMM_FP16, MPT_GRAD_COMM_BF16};
    use_wire(wires[_i]);
    float x[4] = {60000.0f, 1.0f, -60000.0f, 0.5f};
    int bad = mpt_dist_allreduce_f32(dist, x, 4, 1.0f);
    int ok = _i == 0 ? bad == 1 && isinf(x[0]) && x[0] > 0 && isinf(x[2]) && x[1] == 2.0f
                     : bad == 0 && isfinite(x[0]) && x[1] == 2.0f;
    ck_assert_msg(agree_all(ok), "%s wire: found_inf %d, sums %g %g %g %g", mpt_grad_comm_name(wires[_i]), bad,
                  (double)x[0], (double)x[1], (double)x[2], (double)x[3]);
}
END_TEST

/* The agreement on a job's settings (mpt_dist_agree, dist.h): identical lists agree; a value that differs on rank 1
 * in the first item is named with both values on every rank ("the ranks disagree on NAME: rank 1: V1, rank 0: V0"),
 * which rank 1 says and broadcasts; lists of different lengths (rank 0's longer or rank 1's) are refused on every
 * rank as different mptrain binaries. */
START_TEST(agree_names_the_first_difference) {
    use_wire(MPT_GRAD_COMM_FP32);
    mpt_dist_set_timeout(dist, 10.0); /* a wait gone wrong ends the job within seconds, not 600 s */
    int rank = mpt_dist_rank(dist);
    const mpt_dist_item same[3] = {{"--alpha", "1"}, {"--beta", "0.5"}, {"--gamma", "x"}};
    const mpt_dist_item first[3] = {{"--alpha", "2"}, {"--beta", "0.5"}, {"--gamma", "x"}};
    mpt_status s_same = mpt_dist_agree(dist, same, 3);
    mpt_status s_first = mpt_dist_agree(dist, rank == 1 ? first : same, 3);
    char first_msg[1024];
    snprintf(first_msg, sizeof first_msg, "%s", s_first == MPT_OK ? "" : mpt_last_error());
    mpt_status s_longer0 = mpt_dist_agree(dist, same, rank == 0 ? 3 : 2);
    char longer0_msg[1024];
    snprintf(longer0_msg, sizeof longer0_msg, "%s", s_longer0 == MPT_OK ? "" : mpt_last_error());
    mpt_status s_longer1 = mpt_dist_agree(dist, same, rank == 1 ? 3 : 2);
    mpt_dist_set_timeout(dist, MPT_DIST_DEFAULT_TIMEOUT_S);
    ck_assert_msg(agree_all(s_same == MPT_OK), "rank %d: identical settings refused", rank);
    ck_assert_msg(agree_all(s_first == MPT_ERR_ARG &&
                            strstr(first_msg, "the ranks disagree on --alpha: rank 1: 2, rank 0: 1") != NULL),
                  "rank %d: a difference in the first setting: status %d, '%s'", rank, (int)s_first, first_msg);
    ck_assert_msg(agree_all(s_longer0 == MPT_ERR_ARG && strstr(longer0_msg, "mptrain binary") != NULL),
                  "rank %d: rank 0 with one setting more: status %d, '%s'", rank, (int)s_longer0, longer0_msg);
    ck_assert_msg(agree_all(s_longer1 == MPT_ERR_ARG), "rank %d: rank 1 with one setting more: status %d", rank,
                  (int)s_longer1);
}
END_TEST

/* The exit agreement (mpt_dist_finish, dist.h): "the ranks agree on the worst exit code", the same on every rank:
 * rank 0 ends with 0 and rank 1 with 3, both get 3 (both arrive at once: rank 1's 5 s wait is not reached). */
START_TEST(finish_agrees_on_the_worst_exit_code) {
    use_wire(MPT_GRAD_COMM_FP32);
    int rank = mpt_dist_rank(dist);
    int worst = mpt_dist_finish(&dist, rank == 1 ? 3 : 0);
    ck_assert_msg(agree_all(worst == 3 && dist == NULL), "rank %d: agreed exit code %d, expected the worst, 3", rank,
                  worst);
}
END_TEST

/* The bounded waits (dist.h, mpt_dist_set_timeout): when the limit passes, a peer that answers and is waiting for less
 * than the limit is not a deadlock, and the wait goes on. Rank 0 waits (limit 1 s) for a message that rank 1 sends
 * after 2 s; rank 1 answers rank 0's question from inside its send (8 MiB: it completes only when rank 0 receives
 * it), having waited for less than a millisecond. The message must arrive whole; ending the job instead (MPI_Abort)
 * fails the whole program. */
START_TEST(a_peer_waiting_less_than_the_limit_is_not_stuck) {
    use_wire(MPT_GRAD_COMM_FP32);
    int rank = mpt_dist_rank(dist);
    enum { TAG = 4242, BYTES = 8 << 20 };
    MPI_Barrier(MPI_COMM_WORLD);
    mpt_dist_set_timeout(dist, 1.0);
    int ok = 0;
    if (rank == 0) {
        void *buf = NULL;
        int64_t n = 0;
        int from = -1;
        mpt_status s = mpt_dist_recv(dist, 1, TAG, &buf, &n, &from, "the test's message from rank 1");
        ok = s == MPT_OK && n == BYTES && from == 1 && ((unsigned char *)buf)[BYTES - 1] == 0x5a;
        free(buf);
    } else {
        unsigned char *big = malloc(BYTES);
        ck_assert(big != NULL);
        memset(big, 0x5a, BYTES);
        struct timespec two = {2, 0};
        nanosleep(&two, NULL); /* rank 0's question (after 1 s) waits for the answer from inside the send */
        ok = mpt_dist_send(dist, 0, TAG, big, BYTES, "the test's message to rank 0") == MPT_OK;
        free(big);
    }
    mpt_dist_set_timeout(dist, MPT_DIST_DEFAULT_TIMEOUT_S);
    ck_assert_msg(agree_all(ok), "rank %d: the message did not arrive whole", rank);
}
END_TEST

/* The identical-start check when a rank cannot checksum its masters (dist.h: MPT_ERR_NOMEM, agreed): rank 1's last
 * master claims 2^50 elements, whose buffer cannot be allocated; every rank returns MPT_ERR_NOMEM naming the checksum,
 * none reports masters that differ (rank 1 has no checksum to compare). */
START_TEST(check_identical_agrees_that_a_rank_cannot_checksum) {
    use_wire(MPT_GRAD_COMM_FP32);
    mpt_mnist data;
    ck_assert_int_eq(mpt_synthetic_blobs(&data, 256, 0, 64, 8, 1234), MPT_OK);
    int rank = mpt_dist_rank(dist);
    mpt_train_config cfg = sgd_config(MPT_PRECISION_FP32);
    model m;
    model_open(&m, &data, MPT_PRECISION_FP32, rank * 32, 32, 0.0f, &cfg);
    ck_assert_int_eq(mpt_dist_attach(dist, m.tr), MPT_OK);
    mpt_tensor *last = m.tr->master[m.tr->n_params - 1];
    int64_t dim0 = last->shape[0];
    if (rank == 1) last->shape[0] = (int64_t)1 << 50;
    mpt_status s = mpt_dist_check_identical(dist, m.tr, "(no memory)");
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", s == MPT_OK ? "" : mpt_last_error());
    last->shape[0] = dim0;
    model_close(&m);
    mpt_mnist_free(&data);
    ck_assert_msg(agree_all(s == MPT_ERR_NOMEM && strstr(msg, "could not checksum") != NULL),
                  "rank %d: status %d, '%s'", rank, (int)s, msg);
}
END_TEST

/* The failure signal (mpt_dist_signal, dist.h: "one small message with tag to every other rank"): rank 1 signals;
 * rank 0 sees it (polled for up to 5 s), rank 1 does not see a signal of its own, and the drain (rank 0 expecting
 * one, rank 1 none) completes on both, after which rank 0 holds no signal any more. */
START_TEST(a_signal_reaches_every_other_rank) {
    use_wire(MPT_GRAD_COMM_FP32);
    mpt_dist_set_timeout(dist, 10.0);
    int rank = mpt_dist_rank(dist);
    enum { TAG = 4243 };
    int sent = rank != 1 || mpt_dist_signal(dist, TAG) == MPT_OK;
    MPI_Barrier(MPI_COMM_WORLD);
    int seen = 0;
    for (int ms = 0; rank == 0 && ms < 5000 && !seen; ms++) {
        seen = mpt_dist_signalled(dist, TAG);
        struct timespec one = {0, 1000000};
        if (!seen) nanosleep(&one, NULL);
    }
    if (rank == 1) seen = mpt_dist_signalled(dist, TAG);
    int ok = agree_all(sent && seen == (rank == 0));
    int drained = 0;
    if (ok) /* with a signal gone astray the drain would wait for it until the time limit */
        drained = mpt_dist_signal_drain(dist, TAG, rank == 0 ? 1 : 0) == MPT_OK && !mpt_dist_signalled(dist, TAG);
    mpt_dist_set_timeout(dist, MPT_DIST_DEFAULT_TIMEOUT_S);
    ck_assert_msg(ok, "rank %d: signal sent %d, seen %d (rank 0 must see rank 1's, rank 1 none)", rank, sent, seen);
    ck_assert_msg(agree_all(drained), "rank %d: the drain did not complete", rank);
}
END_TEST

int main(void) {
    MPI_Init(NULL, NULL);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("data-parallel");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, n2_matches_n1, 0, 4);
    tcase_add_loop_test(tc, n2_matches_n1_with_dropout, 0, 2);
    tcase_add_loop_test(tc, wire_error_within_unit_roundoff, 0, 2);
    tcase_add_loop_test(tc, nonfinite_on_one_rank_skips_everywhere, 0, 3);
    tcase_add_loop_test(tc, telemetry_comm_error_within_bound, 0, 3);
    tcase_add_loop_test(tc, telemetry_trains_bit_identically, 0, 2);
    tcase_add_test(tc, weights_from_valid_rows);
    tcase_add_test(tc, check_identical_sees_one_bit);
    tcase_add_test(tc, running_statistics_are_rank0s);
    tcase_add_test(tc, shard_rule_on_uneven_batches);
    tcase_add_test(tc, grad_comm_names_round_trip);
    tcase_add_test(tc, env_size_reads_each_launcher);
    tcase_add_test(tc, waits_sleep_at_most_2_ms);
    tcase_add_test(tc, any_is_true_when_one_rank_says_so);
    tcase_add_loop_test(tc, wire_overflow_is_found_inf, 0, 2);
    tcase_add_test(tc, agree_names_the_first_difference);
    tcase_add_test(tc, finish_agrees_on_the_worst_exit_code);
    tcase_add_test(tc, a_peer_waiting_less_than_the_limit_is_not_stuck);
    tcase_add_test(tc, check_identical_agrees_that_a_rank_cannot_checksum);
    tcase_add_test(tc, a_signal_reaches_every_other_rank);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* fork() under MPI is unsafe; the ranks must stay in step */
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    mpt_dist_free(&dist);
    MPI_Finalize();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
