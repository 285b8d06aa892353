/*
 * tests/test_cuda_graph.c - the training step as one CUDA Graph (engine/train.c "Step graph", kernels/cuda/graph.cu):
 * a run with the step recorded once and replayed must be BIT-IDENTICAL to the same run with every operation
 * launched on its own. Suite 'cuda'.
 *
 * Skip rule as tests/test_cuda.c: without a GPU (no NVIDIA driver, or no device, or compute capability < 8.0) it
 * prints "test_cuda_graph: skipped: <reason>" and exits 77; any other CUDA error fails (exit 1); with
 * MPT_REQUIRE_CUDA=1 every case without a usable GPU fails. tests/test_cuda_require.c checks this rule here.
 *
 * Each training case runs the same model, data and config twice on the GPU (cfg.step_graph off, then on) and
 * compares after every step the loss (bits), and at the end every FP32 master (or 16-bit weight), every optimizer
 * state tensor (bytes) and the whole loss-scaler state (bytes: scale, counters, iteration, lr). A graph run must
 * also have recorded once and replayed every step but the direct ones (the first, the fault-injection step), so
 * the comparison cannot pass with the graph silently off; and the GEMM/conv records must count the same calls.
 * Cases: mlp fp16 with a dynamic loss scale driven into overflow (growth every 3 steps by 4x up to 2^24, which
 * overflows FP16 gradients: the skips happen inside replays) plus one injected NaN step; lenet5 bf16 with a cosine
 * LR schedule (warmup) and gradient clipping (the LR comes from the device counter); cnn (dropout: the offsets come
 * from the device counter) in tf32 with SGD momentum and a step schedule; mlp bf16 without FP32 masters and with
 * stochastic rounding (its Philox counter is the device iteration). Every case ends with a padded partial batch
 * (rows -1), which keeps the step's shapes static: one recording serves the whole run. The fused-loss case runs the
 * mlp fp16 case on a backend created with MPT_CUDA_FUSED_LOSS=1, direct and replayed, against the four-kernel loss;
 * the second-stream case likewise with MPT_CUDA_WGRAD_STREAM=1 (weight gradients beside the data gradients).
 *
 * The failure cases break a recording midway with a call the capture rules forbid: capture_end must end and discard
 * it naming that call, without aborting, leaving the stream usable; and a training run whose second step's
 * recording fails that way must turn the graph off, say why, and train bit-identically to a run with the graph off.
 *
 * The scaler case records unscale + step_begin + lr_update + scaler_update once and replays it over a scripted
 * found_inf sequence (the host writes a finite or an inf gradient before each replay); after every replay the
 * device state must equal the CPU backend's (the oracle, same calls) bit for bit, and the GradScaler rules
 * written out below (growth after `interval` clean steps, backoff with hysteresis, floor and ceiling, skip counts).
 *
 * The timing cases check the device timer (engine/backend.h event_*: CUDA events, what `mptrain train --device
 * cuda` reports as the epoch's GPU time) against the host clock: marks around a host sleep on an idle stream (the
 * time between them counts idle gaps, in seconds: at least the sleep, at most the host's bracket), around FP32
 * GEMMs run directly and around the same GEMMs replayed from a CUDA Graph (more than 0 and at least the
 * arithmetic's time at a peak no GPU reaches, at most the host's bracket around marks and synchronisation, and
 * at least half of it: the GEMMs dominate the bracket); and a graph run with marks recorded around every step is
 * bit-identical to the same run without (the timer only reads).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "datasets/synthetic.h"
#include "engine/amp/scaler.h"
#include "engine/backend.h"
#include "engine/layers/layers.h"
#include "engine/optim/optim.h"
#include "engine/train.h"
#include "cuda_gate.h"
#include "harness.h"
#include "engine/cuda_backend.h"
#include "models/models.h"

#define EXPECT(cond, ...)                                                                            \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

static mpt_backend *gpu, *cpu;

enum { GR_BATCH = 32, GR_STEPS = 20, GR_MAX_TENSORS = 64 };

/* What one run leaves behind, in host memory. */
typedef struct gr_result {
    uint32_t loss_bits[GR_STEPS];
    int n_tensors;
    char *name[GR_MAX_TENSORS];
    void *bytes[GR_MAX_TENSORS];
    size_t nbytes[GR_MAX_TENSORS];
    mpt_scaler_state scaler;
    int64_t captures, replays, direct;
    int replay_off;
    char note[sizeof ((mpt_trainer *)0)->replay_note];
    int64_t gemm_calls, conv_calls; /* calls the GEMM / conv records counted during the run */
} gr_result;

typedef void (*gr_config_fn)(mpt_train_config *cfg);

/* Nonzero: gr_train records a device timing mark before and after every step (outside the step's recording, as the
 * trainer's epoch marks are) and reads the time between them after the step's synchronising statistics read. */
static int gr_marks;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) ck_abort_msg("out of host memory (%zu bytes)", n);
    return p;
}

static int64_t record_calls(int gemm) {
    int64_t n = 0;
    int count = gemm ? mpt_cuda_gemm_record_count(gpu) : mpt_cuda_conv_record_count(gpu);
    for (int i = 0; i < count; i++) {
        if (gemm) {
            mpt_cuda_gemm_record r;
            EXPECT(mpt_cuda_gemm_record_get(gpu, i, &r), "GEMM record %d", i);
            n += r.calls;
        } else {
            mpt_cuda_conv_record r;
            EXPECT(mpt_cuda_conv_record_get(gpu, i, &r), "conv record %d", i);
            n += r.calls;
        }
    }
    return n;
}

static void keep(gr_result *out, const mpt_tensor *t) {
    if (!t) return;
    EXPECT(out->n_tensors < GR_MAX_TENSORS, "more than %d tensors", GR_MAX_TENSORS);
    int k = out->n_tensors++;
    out->name[k] = strdup(t->name);
    out->nbytes[k] = mpt_tensor_nbytes(t);
    out->bytes[k] = xmalloc(out->nbytes[k]);
    gpu->to_host(gpu, out->bytes[k], t->data, out->nbytes[k]);
}

static void gr_free(gr_result *r) {
    for (int k = 0; k < r->n_tensors; k++) {
        free(r->name[k]);
        free(r->bytes[k]);
    }
    memset(r, 0, sizeof *r);
}

/* GR_STEPS steps of `model` in `prec` on the GPU, the step graph on or off; data: synthetic blobs, batch s =
 * rows idx[s*B, (s+1)*B) of a fixed permutation, the last batch padded with 7 rows of -1. */
static void gr_train(const char *model, mpt_precision prec, gr_config_fn configure, int graph, gr_result *out) {
    memset(out, 0, sizeof *out);
    mpt_mnist d;
    EXPECT(mpt_synthetic_blobs(&d, 16 * GR_BATCH, 0, 784, 10, 3) == MPT_OK, "%s", mpt_last_error());
    mpt_policy policy = mpt_policy_make(prec);
    mpt_graph *g = mpt_graph_create(gpu, &policy, GR_BATCH);
    mpt_tensor *logits = NULL;
    EXPECT(mpt_model_build(g, model, &logits) == MPT_OK, "%s: %s", model, mpt_last_error());
    mpt_softmax_xent(g, logits, "loss");
    mpt_train_config cfg = mpt_train_config_default(prec);
    cfg.seed = 5;
    configure(&cfg);
    cfg.step_graph = graph;
    mpt_trainer *t = NULL;
    EXPECT(mpt_trainer_create(&t, g, &cfg) == MPT_OK, "%s %s: %s", model, mpt_precision_name(prec), mpt_last_error());

    const int64_t n_idx = (int64_t)GR_STEPS * GR_BATCH;
    int32_t *idx = xmalloc((size_t)n_idx * sizeof(int32_t));
    for (int64_t i = 0; i < n_idx; i++) idx[i] = (int32_t)((i * 131) % d.n_train);
    for (int64_t i = n_idx - 7; i < n_idx; i++) idx[i] = -1;
    uint8_t *images = gpu->alloc(gpu, (size_t)(d.n_train * d.dim)), *labels = gpu->alloc(gpu, (size_t)d.n_train);
    int32_t *didx = gpu->alloc(gpu, (size_t)n_idx * sizeof(int32_t));
    EXPECT(images && labels && didx, "cannot allocate the data on the GPU");
    gpu->from_host(gpu, images, d.train_images, (size_t)(d.n_train * d.dim));
    gpu->from_host(gpu, labels, d.train_labels, (size_t)d.n_train);
    gpu->from_host(gpu, didx, idx, (size_t)n_idx * sizeof(int32_t));
    gpu->synchronize(gpu);

    void *mark_start = NULL, *mark_end = NULL;
    if (gr_marks)
        EXPECT(gpu->event_create(gpu, &mark_start) == MPT_OK && gpu->event_create(gpu, &mark_end) == MPT_OK,
               "event_create: %s", mpt_last_error());
    const int64_t gemm0 = record_calls(1), conv0 = record_calls(0);
    for (int s = 0; s < GR_STEPS; s++) {
        if (gr_marks) gpu->event_record(gpu, mark_start);
        mpt_trainer_gather(t, images, labels, didx + (int64_t)s * GR_BATCH, d.dim, 0.0f, 1.0f);
        mpt_trainer_step(t);
        if (gr_marks) gpu->event_record(gpu, mark_end);
        mpt_train_stats st;
        mpt_trainer_stats(t, &st);
        memcpy(&out->loss_bits[s], &st.loss, sizeof st.loss);
        if (gr_marks) {
            double sec = NAN;
            EXPECT(gpu->event_elapsed(gpu, mark_start, mark_end, &sec) == MPT_OK && sec > 0.0,
                   "step %d: event_elapsed %g s: %s", s, sec, mpt_last_error());
        }
    }
    if (gr_marks) {
        gpu->event_destroy(gpu, mark_start);
        gpu->event_destroy(gpu, mark_end);
    }
    out->gemm_calls = record_calls(1) - gemm0;
    out->conv_calls = record_calls(0) - conv0;
    for (int i = 0; i < t->n_params; i++) {
        keep(out, t->master[i]);
        if (t->weight[i] != t->master[i]) keep(out, t->weight[i]);
        keep(out, t->m[i]);
        keep(out, t->v[i]);
    }
    gpu->to_host(gpu, &out->scaler, t->scaler, sizeof out->scaler);
    out->captures = t->captures;
    out->replays = t->replays;
    out->direct = t->direct_steps;
    out->replay_off = t->replay_off;
    snprintf(out->note, sizeof out->note, "%s", t->replay_note);
    gpu->free(gpu, images);
    gpu->free(gpu, labels);
    gpu->free(gpu, didx);
    mpt_trainer_free(&t);
    free(idx);
    mpt_mnist_free(&d);
}

/* Every loss (bits), tensor (bytes), the scaler state and the records' call counts of two runs are equal. */
static void gr_expect_same(const char *model, const char *p, const gr_result *off, const gr_result *on) {
    for (int s = 0; s < GR_STEPS; s++) {
        float a, b;
        memcpy(&a, &off->loss_bits[s], sizeof a);
        memcpy(&b, &on->loss_bits[s], sizeof b);
        EXPECT(off->loss_bits[s] == on->loss_bits[s], "%s %s step %d: loss %.9g with the graph, %.9g without", model,
               p, s, (double)b, (double)a);
    }
    EXPECT(off->n_tensors == on->n_tensors, "tensor counts differ");
    for (int k = 0; k < on->n_tensors; k++)
        EXPECT(on->nbytes[k] == off->nbytes[k] && memcmp(on->bytes[k], off->bytes[k], on->nbytes[k]) == 0,
               "%s %s: %s differs with the graph on", model, p, on->name[k]);
    EXPECT(memcmp(&on->scaler, &off->scaler, sizeof on->scaler) == 0,
           "%s %s: scaler state differs: scale %g/%g, skipped %d/%d, taken %d/%d, iteration %lld/%lld, lr %g/%g", model,
           p, (double)on->scaler.scale, (double)off->scaler.scale, on->scaler.steps_skipped,
           off->scaler.steps_skipped, on->scaler.steps_taken, off->scaler.steps_taken,
           (long long)on->scaler.iteration, (long long)off->scaler.iteration, (double)on->scaler.lr,
           (double)off->scaler.lr);
    EXPECT(on->scaler.iteration == GR_STEPS, "%s %s: device iteration %lld after %d steps", model, p,
           (long long)on->scaler.iteration, GR_STEPS);
    EXPECT(on->gemm_calls == off->gemm_calls && on->conv_calls == off->conv_calls,
           "%s %s: the records counted %lld GEMM and %lld conv calls with the graph, %lld and %lld without", model, p,
           (long long)on->gemm_calls, (long long)on->conv_calls, (long long)off->gemm_calls,
           (long long)off->conv_calls);
}

/* Runs the case both ways and compares everything; `direct_steps`: steps the graph run must run directly. */
static void gr_case(const char *model, mpt_precision prec, gr_config_fn configure, int direct_steps,
                    int min_skipped) {
    gr_result off, on;
    gr_train(model, prec, configure, 0, &off);
    gr_train(model, prec, configure, 1, &on);
    const char *p = mpt_precision_name(prec);
    EXPECT(!on.replay_off, "%s %s: the step graph was turned off: %s", model, p, on.note);
    EXPECT(on.captures == 1 && on.replays == GR_STEPS - direct_steps && on.direct == direct_steps,
           "%s %s: %lld recordings, %lld replays, %lld direct steps; expected 1, %d, %d", model, p,
           (long long)on.captures, (long long)on.replays, (long long)on.direct, GR_STEPS - direct_steps,
           direct_steps);
    EXPECT(off.captures == 0 && off.replays == 0, "%s %s: the run with the graph off replayed", model, p);
    gr_expect_same(model, p, &off, &on);
    EXPECT(on.scaler.steps_skipped >= min_skipped, "%s %s: %d steps skipped, the case needs >= %d", model, p,
           on.scaler.steps_skipped, min_skipped);
    printf("test_cuda_graph: %-6s %-4s %d steps bit-identical with and without the graph (%lld replays, %lld direct; "
           "%d skipped; final scale %g)\n",
           model, p, GR_STEPS, (long long)on.replays, (long long)on.direct, on.scaler.steps_skipped,
           (double)on.scaler.scale);
    gr_free(&off);
    gr_free(&on);
}

/* fp16, dynamic scale from 2^16 growing 4x every 3 clean steps up to 2^24 (FP16 gradients of a mean loss over
 * 32 rows overflow there: the seed S * (p - onehot) / 32 exceeds 65504 once S > 2^21), and NaN injected at step 7. */
static void cfg_overflow(mpt_train_config *c) {
    c->scaler.growth_interval = 3;
    c->scaler.growth_factor = 4.0f;
    c->scaler.max_scale = 16777216.0f;
    c->inject_nonfinite_step = 7;
}

static void cfg_cosine_clip(mpt_train_config *c) {
    c->schedule.kind = MPT_LR_COSINE;
    c->schedule.base_lr = c->optim.lr = 3e-3f;
    c->schedule.min_lr = 1e-4f;
    c->schedule.warmup_steps = 4;
    c->schedule.total_steps = GR_STEPS - 3;
    c->clip_norm = 0.5f;
}

static void cfg_sgd_step(mpt_train_config *c) {
    c->optim = mpt_optim_hparams_default(MPT_OPTIM_SGD);
    c->optim.lr = c->schedule.base_lr = 0.05f;
    c->optim.momentum = 0.9f;
    c->schedule.kind = MPT_LR_STEP;
    c->schedule.step_size = 6;
    c->schedule.gamma = 0.5f;
}

static void cfg_no_master_stochastic(mpt_train_config *c) {
    c->master_weights = MPT_MASTER_NONE;
    c->update_rounding = MPT_ROUNDING_STOCHASTIC;
}

/* The trainer's fallback when a recording fails midway: a scaler update that synchronises after itself (legal in
 * a direct step, refused while the step is recorded) breaks the second step's recording. The run must turn the
 * graph off naming that call, run every step directly, and train bit-identically to the run with the graph off;
 * the records must not count the discarded recording's calls. */
static void (*real_scaler_update)(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic);
static void scaler_update_then_sync(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic) {
    real_scaler_update(be, st, p, dynamic);
    be->synchronize(be);
}

static void cfg_default(mpt_train_config *c) { (void)c; }

START_TEST(test_graph_failed_recording_falls_back) {
    gr_result off, on;
    gr_train("mlp", MPT_PRECISION_FP16, cfg_default, 0, &off);
    real_scaler_update = gpu->scaler_update;
    gpu->scaler_update = scaler_update_then_sync;
    gr_train("mlp", MPT_PRECISION_FP16, cfg_default, 1, &on);
    gpu->scaler_update = real_scaler_update;
    EXPECT(on.replay_off && strstr(on.note, "cudaStreamSynchronize") != NULL,
           "the graph must be off, naming the refused call; replay_off %d, note: %s", on.replay_off, on.note);
    /* the first step by design, the second whose recording failed; later steps do not ask for the graph */
    EXPECT(on.captures == 0 && on.replays == 0 && on.direct == 2,
           "%lld recordings, %lld replays, %lld direct steps; expected 0, 0, 2", (long long)on.captures,
           (long long)on.replays, (long long)on.direct);
    gr_expect_same("mlp", "fp16", &off, &on);
    printf("test_cuda_graph: mlp fp16 with a failed recording: %d steps bit-identical to the graph off (%s)\n",
           GR_STEPS, on.note);
    gr_free(&off);
    gr_free(&on);
}
END_TEST

START_TEST(test_graph_mlp_fp16_overflow) { gr_case("mlp", MPT_PRECISION_FP16, cfg_overflow, 2, 2); }
END_TEST

/* Fusion 3 of docs/cuda.md (softmax + cross-entropy in two kernels, MPT_CUDA_FUSED_LOSS=1, read at backend
 * creation): the mlp fp16 overflow case on a backend created with the variable, once with every operation launched
 * on its own and once with the step replayed, against the same case on the program's four-kernel backend run
 * directly. Every loss, tensor and the scaler state must be bit-identical (the fused kernels' outputs are the four
 * kernels' bits, tests/test_cuda.c test_softmax_xent_fused_bit_identical), through skipped steps and the padded last
 * batch (7 rows of -1: the valid count the forward stores changes there); the replays run the fused forward's block
 * counter across launches that the host never sees. */
static mpt_backend *program_gpu; /* the program's backend, while a test swaps in one of its own */

static void restore_gpu(void) {
    if (program_gpu && gpu != program_gpu) mpt_backend_free(&gpu);
    if (program_gpu) gpu = program_gpu;
    program_gpu = NULL;
}

/* The mlp fp16 overflow case on a backend created with environment variable `var` (opt-in path k) set to 1, run
 * directly and replayed, against the same case on the program's backend run directly: every loss, tensor and the
 * scaler state bit-identical. `what` names the path in messages. Since the bits are the same by design, the
 * comparison alone would pass with the variable never read: the variable's backend must also count at least
 * `min_calls` calls that took the path (engine/cuda_backend.h mpt_cuda_opt_in_calls), and the program's backend
 * none, unless the program's environment turned the path on (bench/gpu.sh's runs with several paths at once). The
 * variable's backend stays swapped in until restore_gpu (the caller may read its records first). */
static void variant_bit_identical(const char *var, const char *extra, mpt_cuda_opt_in k, int64_t min_calls,
                                  const char *what) {
    gr_result plain, direct, replayed;
    const int program_has_it = mpt_test_env_on(var); /* bench/gpu.sh runs the suite with opt-in paths on */
    gr_train("mlp", MPT_PRECISION_FP16, cfg_overflow, 0, &plain);
    EXPECT(program_has_it || mpt_cuda_opt_in_calls(gpu, k) == 0,
           "%s: the program's backend took the path %lld times without %s=1", what,
           (long long)mpt_cuda_opt_in_calls(gpu, k), var);
    setenv(var, "1", 1);
    if (extra) setenv(extra, "1", 1);
    mpt_backend *variant = mpt_backend_cuda_create();
    unsetenv(var);
    if (extra) unsetenv(extra);
    EXPECT(variant != NULL, "a CUDA backend with %s=1%s%s: %s", var, extra ? " and " : "", extra ? extra : "",
           mpt_last_error());
    program_gpu = gpu;
    gpu = variant;
    gr_train("mlp", MPT_PRECISION_FP16, cfg_overflow, 0, &direct);
    gr_train("mlp", MPT_PRECISION_FP16, cfg_overflow, 1, &replayed);
    EXPECT(!replayed.replay_off, "%s: the step graph was turned off: %s", what, replayed.note);
    EXPECT(mpt_cuda_opt_in_calls(gpu, k) >= min_calls, "%s: %lld calls took the path with %s=1, expected >= %lld",
           what, (long long)mpt_cuda_opt_in_calls(gpu, k), var, (long long)min_calls);
    EXPECT(replayed.captures == 1 && replayed.replays == GR_STEPS - 2,
           "%s: %lld recordings, %lld replays; expected 1, %d", what, (long long)replayed.captures,
           (long long)replayed.replays, GR_STEPS - 2);
    char label[160];
    snprintf(label, sizeof label, "fp16 (program's backend direct vs %s direct)", what);
    gr_expect_same("mlp", label, &plain, &direct);
    snprintf(label, sizeof label, "fp16 (program's backend direct vs %s replayed)", what);
    gr_expect_same("mlp", label, &plain, &replayed);
    EXPECT(plain.scaler.steps_skipped >= 2, "%s: %d steps skipped, the case needs >= 2", what,
           plain.scaler.steps_skipped);
    printf("test_cuda_graph: mlp fp16 %d steps bit-identical with %s (direct and %lld replays) and without\n",
           GR_STEPS, what, (long long)replayed.replays);
    gr_free(&plain);
    gr_free(&direct);
    gr_free(&replayed);
}

START_TEST(test_graph_fused_loss) {
    /* a forward and a backward every direct step (the replayed run records them once) */
    variant_bit_identical("MPT_CUDA_FUSED_LOSS", NULL, MPT_CUDA_OPT_FUSED_LOSS, 2 * GR_STEPS, "the fused loss");
    restore_gpu();
}
END_TEST

/* Fusion 5 of docs/cuda.md (MPT_CUDA_WGRAD_STREAM=1: the weight-gradient GEMMs on a second stream, forked and joined
 * by events, graph edges in a recording): the same GEMM plans in their own workspace, so the same bits, direct and
 * replayed, through skipped steps and the padded last batch; and the weight-gradient GEMM records say they ran
 * beside (the comparison cannot pass with the second stream unused), no other GEMM's does. */
static void wgrad_stream_case(const char *extra, const char *what) {
    /* the mlp's three weight gradients every direct step */
    variant_bit_identical("MPT_CUDA_WGRAD_STREAM", extra, MPT_CUDA_OPT_WGRAD_STREAM, 3 * GR_STEPS, what);
    int n_beside = 0;
    for (int i = 0; i < mpt_cuda_gemm_record_count(gpu); i++) {
        mpt_cuda_gemm_record r;
        EXPECT(mpt_cuda_gemm_record_get(gpu, i, &r), "gemm record %d", i);
        const size_t n = strlen(r.tag);
        const int wgrad = n >= 6 && strcmp(r.tag + n - 6, ".wgrad") == 0;
        EXPECT(r.beside == wgrad, "gemm record %s (%lldx%lldx%lld): beside %d", r.tag, (long long)r.M,
               (long long)r.N, (long long)r.K, r.beside);
        n_beside += r.beside;
    }
    EXPECT(n_beside >= 3, "%d weight-gradient GEMM records ran beside, expected the mlp's 3", n_beside);
    restore_gpu();
}

START_TEST(test_graph_wgrad_stream) { wgrad_stream_case(NULL, "weight gradients on a second stream"); }
END_TEST

/* The same with every beside GEMM started 500 us late on its stream (MPT_CUDA_SIDE_DELAY=1, a test switch): on one
 * stream's timing a missing fork or join edge, or an operand overwritten before the join, may never show; with the
 * backend's stream far ahead of the side GEMM, a consumer that does not wait reads a stale weight gradient and an
 * operand rewritten early changes what the GEMM reads, so the bits differ from the one-stream backend's. */
START_TEST(test_graph_wgrad_stream_delayed) {
    wgrad_stream_case("MPT_CUDA_SIDE_DELAY", "weight gradients on a second stream, each started 500 us late");
}
END_TEST

START_TEST(test_graph_lenet5_bf16_cosine_clip) { gr_case("lenet5", MPT_PRECISION_BF16, cfg_cosine_clip, 1, 0); }
END_TEST

START_TEST(test_graph_cnn_dropout_tf32) { gr_case("cnn", MPT_PRECISION_TF32, cfg_sgd_step, 1, 0); }
END_TEST

START_TEST(test_graph_mlp_bf16_stochastic) { gr_case("mlp", MPT_PRECISION_BF16, cfg_no_master_stochastic, 1, 0); }
END_TEST

/* ---- the loss-scale update replayed on a scripted found_inf sequence ------------------------------------------ */

/* The rules of engine/amp/scaler.h written out independently (torch.amp.GradScaler's _amp_update_scale_, plus
 * hysteresis as DeepSpeed's DynamicLossScaler has it: after a backoff every overflow backs off again until the scale
 * grows and refills it; floor and ceiling). */
typedef struct ref_scaler {
    double scale;
    int tracker, hyst_left, skipped, taken, floor_hits;
    int64_t iteration;
} ref_scaler;

static void ref_step(ref_scaler *r, int overflow, const mpt_scaler_params *p) {
    if (overflow) {
        r->skipped++;
        r->tracker = 0;
        if (r->hyst_left > 1) {
            r->hyst_left--; /* skipped at the same scale */
        } else {            /* DeepSpeed: back off; the hysteresis stays used up until the scale grows */
            double s = r->scale * p->backoff_factor;
            if (s < p->min_scale) {
                s = p->min_scale;
                r->floor_hits++;
            }
            r->scale = s;
        }
    } else {
        r->taken++;
        if (++r->tracker >= p->growth_interval) {
            double s = r->scale * p->growth_factor;
            r->scale = s < p->max_scale ? s : p->max_scale;
            r->tracker = 0;
            r->hyst_left = p->hysteresis;
        }
    }
    r->iteration++;
}

START_TEST(test_graph_scaler_scripted) {
    /* overflow pattern: 1 = the step's gradient holds inf */
    static const int script[] = {0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0,
                                 0, 0, 0, 0}; /* growth is clamped at the ceiling by the last three */
    const int n_steps = (int)(sizeof script / sizeof script[0]);
    mpt_scaler_params p = mpt_scaler_params_default();
    p.growth_interval = 3;
    p.hysteresis = 2;
    p.min_scale = 64.0f;
    p.max_scale = 4096.0f;
    const mpt_lr_schedule sched = {.kind = MPT_LR_COSINE, .base_lr = 1e-2f, .min_lr = 1e-4f, .warmup_steps = 5,
                                   .total_steps = 40};
    const int64_t n = 1000;
    mpt_scaler_state *dst = gpu->alloc(gpu, sizeof *dst), cst;
    float *dg = gpu->alloc(gpu, (size_t)n * sizeof(float));
    float *hg = xmalloc((size_t)n * sizeof(float));
    EXPECT(dst && dg, "cannot allocate on the GPU");
    EXPECT(mpt_scaler_init(gpu, dst, 512.0f, &p) == MPT_OK && mpt_scaler_init(cpu, &cst, 512.0f, &p) == MPT_OK, "%s",
           mpt_last_error());
    /* the four operations once on a scratch state first, as the trainer's first step runs directly: their kernels
     * are loaded (CUDA's lazy loading) before the recording, which then holds launches only */
    mpt_scaler_state *warm = gpu->alloc(gpu, sizeof *warm);
    EXPECT(warm && mpt_scaler_init(gpu, warm, 512.0f, &p) == MPT_OK, "warm-up state: %s", mpt_last_error());
    gpu->unscale_check(gpu, dg, n, warm);
    gpu->step_begin(gpu, warm);
    gpu->lr_update(gpu, warm, &sched);
    gpu->scaler_update(gpu, warm, &p, 1);
    gpu->synchronize(gpu);
    gpu->free(gpu, warm);
    /* record the update once */
    EXPECT(gpu->capture_begin && gpu->capture_begin(gpu) == MPT_OK, "capture_begin: %s", mpt_last_error());
    gpu->unscale_check(gpu, dg, n, dst);
    gpu->step_begin(gpu, dst);
    gpu->lr_update(gpu, dst, &sched);
    gpu->scaler_update(gpu, dst, &p, 1);
    void *graph = NULL;
    EXPECT(gpu->capture_end(gpu, &graph) == MPT_OK && graph != NULL, "capture_end: %s", mpt_last_error());
    ref_scaler ref = {.scale = 512.0, .hyst_left = p.hysteresis};
    for (int s = 0; s < n_steps; s++) {
        for (int64_t i = 0; i < n; i++) hg[i] = (float)(i % 7) - 3.0f;
        if (script[s]) hg[(s * 37) % n] = INFINITY;
        gpu->from_host(gpu, dg, hg, (size_t)n * sizeof(float));
        gpu->replay(gpu, graph);
        cpu->unscale_check(cpu, hg, n, &cst);
        cpu->step_begin(cpu, &cst);
        cpu->lr_update(cpu, &cst, &sched);
        const float lr_cpu = cst.lr; /* scaler_update leaves lr alone; read it before, as the replay wrote it */
        cpu->scaler_update(cpu, &cst, &p, 1);
        const int64_t it = ref.iteration;
        ref_step(&ref, script[s], &p);
        mpt_scaler_state g, gz, cz;
        gpu->to_host(gpu, &g, dst, sizeof g);
        /* lr aside: the cosine part calls CUDA's cos, which may differ from glibc's in the last FP64 bit (checked
         * below within one FP32 ulp); every other field is bit-identical */
        memcpy(&gz, &g, sizeof g);
        memcpy(&cz, &cst, sizeof cst);
        gz.lr = cz.lr = 0.0f;
        EXPECT(memcmp(&gz, &cz, sizeof gz) == 0,
               "step %d: device scaler state differs from the CPU backend's: scale %g/%g, tracker %d/%d, skipped %d/%d, "
               "lr %.9g/%.9g",
               s, (double)g.scale, (double)cst.scale, g.growth_tracker, cst.growth_tracker, g.steps_skipped,
               cst.steps_skipped, (double)g.lr, (double)cst.lr);
        EXPECT((double)g.scale == ref.scale && g.inv_scale == 1.0f / g.scale && g.growth_tracker == ref.tracker &&
                   g.hysteresis_left == ref.hyst_left && g.steps_skipped == ref.skipped &&
                   g.steps_taken == ref.taken && g.floor_hits == ref.floor_hits && g.iteration == ref.iteration &&
                   g.found_inf == 0.0f,
               "step %d (overflow %d): device scale %g (rules %g), tracker %d (%d), hysteresis %d (%d), skipped %d "
               "(%d), taken %d (%d), floor hits %d (%d), iteration %lld (%lld)",
               s, script[s], (double)g.scale, ref.scale, g.growth_tracker, ref.tracker, g.hysteresis_left,
               ref.hyst_left, g.steps_skipped, ref.skipped, g.steps_taken, ref.taken, g.floor_hits, ref.floor_hits,
               (long long)g.iteration, (long long)ref.iteration);
        const float host_lr = mpt_lr_at(&sched, it);
        EXPECT(lr_cpu == host_lr, "step %d: CPU backend lr %.9g, host schedule %.9g", s, (double)lr_cpu,
               (double)host_lr);
        EXPECT(fabs((double)g.lr - (double)host_lr) <= ldexp(1.0, ilogb(host_lr) - 23) &&
                   (it >= sched.warmup_steps || g.lr == host_lr),
               "step %d: device lr %.9g, host schedule %.9g (warmup values must be equal, cosine ones within 1 ulp)", s,
               (double)g.lr, (double)host_lr);
    }
    EXPECT(ref.floor_hits > 0 && ref.skipped > 0 && ref.scale == p.max_scale && ref.tracker == 0,
           "the script must reach the floor, skip and end at the ceiling (floor hits %d, skipped %d, scale %g)",
           ref.floor_hits, ref.skipped, ref.scale);
    gpu->replay_free(gpu, graph);
    gpu->free(gpu, dst);
    gpu->free(gpu, dg);
    free(hg);
}
END_TEST

/* ---- a recording that fails midway ------------------------------------------------------------------------- */

/* A call the capture rules forbid in the middle of a recording (cudaStreamSynchronize on the capturing stream:
 * cudaErrorStreamCaptureUnsupported, which invalidates the capture; the calls after it fail too): the process
 * must not abort; capture_end must end the capture, discard it and name that call; nothing recorded may have run;
 * the stream must then run work directly (not left capturing, no error left behind), and a later recording must
 * work. This is the path on which the trainer turns the graph off and runs the step directly. */
START_TEST(test_graph_capture_failure) {
    const int64_t n = 4096;
    const size_t bytes = (size_t)n * sizeof(float);
    float *d = gpu->alloc(gpu, bytes), *h = xmalloc(bytes), *back = xmalloc(bytes);
    EXPECT(d != NULL, "cannot allocate on the GPU");
    for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 201) - 100.0f; /* negatives: ReLU changes them */
    gpu->from_host(gpu, d, h, bytes);
    float *warm = gpu->alloc(gpu, bytes);
    EXPECT(warm != NULL, "cannot allocate on the GPU");
    gpu->relu_forward(gpu, warm, d, MPT_DTYPE_F32, n); /* loads the kernel before the recording */
    gpu->synchronize(gpu);
    gpu->free(gpu, warm);

    EXPECT(gpu->capture_begin(gpu) == MPT_OK, "capture_begin: %s", mpt_last_error());
    gpu->relu_forward(gpu, d, d, MPT_DTYPE_F32, n); /* recorded, never run */
    gpu->synchronize(gpu);                          /* forbidden while capturing */
    gpu->memset_zero(gpu, d, bytes);                /* fails too: the capture is invalidated */
    void *graph = &graph;
    const mpt_status s = gpu->capture_end(gpu, &graph);
    EXPECT(s != MPT_OK && graph == NULL, "capture_end of an invalidated recording: status %d, graph %p", (int)s,
           graph);
    EXPECT(strstr(mpt_last_error(), "cudaStreamSynchronize") != NULL,
           "capture_end must name the first call that failed (cudaStreamSynchronize), said: %s", mpt_last_error());
    printf("test_cuda_graph: a failed recording says: %s\n", mpt_last_error());

    gpu->to_host(gpu, back, d, bytes);
    EXPECT(memcmp(back, h, bytes) == 0, "an operation of the discarded recording ran (the buffer changed)");
    gpu->relu_forward(gpu, d, d, MPT_DTYPE_F32, n); /* the stream runs work directly again */
    gpu->to_host(gpu, back, d, bytes);
    for (int64_t i = 0; i < n; i++)
        EXPECT(back[i] == (h[i] > 0.0f ? h[i] : 0.0f), "element %lld after a direct ReLU: %g (input %g)",
               (long long)i, (double)back[i], (double)h[i]);

    EXPECT(gpu->capture_begin(gpu) == MPT_OK, "capture_begin after a failed recording: %s", mpt_last_error());
    gpu->memset_zero(gpu, d, bytes);
    graph = NULL;
    EXPECT(gpu->capture_end(gpu, &graph) == MPT_OK && graph != NULL, "a recording after a failed one: %s",
           mpt_last_error());
    gpu->replay(gpu, graph);
    gpu->to_host(gpu, back, d, bytes);
    for (int64_t i = 0; i < n; i++) EXPECT(back[i] == 0.0f, "element %lld after the replayed memset: %g", (long long)i,
                                           (double)back[i]);
    gpu->replay_free(gpu, graph);
    gpu->free(gpu, d);
    free(h);
    free(back);
}
END_TEST

/* ---- device timing: marks (CUDA events) against the host clock ------------------------------------------------ */

enum { TM_N = 2048, TM_GEMMS = 16, TM_PER_GRAPH = 4 };
/* Slack of the upper bounds: the host clock and the GPU's timer are different clocks; 1 ms is far above their
 * disagreement over the tens of milliseconds timed here. */
#define TM_SLACK_S 1e-3
/* FP32 FLOP/s no GPU of this decade reaches (an H100's FP32 peak is 67 TFLOP/s; cuBLASLt runs MPT_MATH_FP32 without
 * Tensor Cores): the arithmetic's time at this rate is a lower bound of any honest measurement. */
#define TM_IMPOSSIBLE_FLOPS 1e15

static double host_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct tm_marks {
    void *start, *end;
} tm_marks;

static tm_marks tm_marks_create(void) {
    tm_marks m = {NULL, NULL};
    EXPECT(gpu->event_create && gpu->event_record && gpu->event_elapsed && gpu->event_destroy,
           "the CUDA backend has no device timer (event_* entries NULL)");
    EXPECT(gpu->event_create(gpu, &m.start) == MPT_OK && m.start, "event_create: %s", mpt_last_error());
    EXPECT(gpu->event_create(gpu, &m.end) == MPT_OK && m.end, "event_create: %s", mpt_last_error());
    return m;
}

static double tm_elapsed(tm_marks *m) {
    double s = NAN;
    EXPECT(gpu->event_elapsed(gpu, m->start, m->end, &s) == MPT_OK, "event_elapsed: %s", mpt_last_error());
    EXPECT(isfinite(s), "event_elapsed gave %g", s);
    return s;
}

static void tm_marks_free(tm_marks *m) {
    gpu->event_destroy(gpu, m->start);
    gpu->event_destroy(gpu, m->end);
}

/* A square FP32 GEMM C = A B of TM_N with nonzero operands ("never time on zeros"), its algorithm chosen. */
typedef struct tm_gemm {
    float *A, *B, *C;
    mpt_gemm_args g;
} tm_gemm;

static void tm_gemm_setup(tm_gemm *t) {
    const size_t n = (size_t)TM_N * TM_N;
    float *h = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = 0.5f + (float)(i % 13) / 16.0f;
    t->A = gpu->alloc(gpu, n * sizeof(float));
    t->B = gpu->alloc(gpu, n * sizeof(float));
    t->C = gpu->alloc(gpu, n * sizeof(float));
    EXPECT(t->A && t->B && t->C, "cannot allocate 3 x %zu floats on the GPU", n);
    gpu->from_host(gpu, t->A, h, n * sizeof(float));
    gpu->from_host(gpu, t->B, h, n * sizeof(float));
    mpt_gemm_args g = {.M = TM_N, .N = TM_N, .K = TM_N, .A = t->A, .a_dtype = MPT_DTYPE_F32, .B = t->B,
                       .b_dtype = MPT_DTYPE_F32, .C = t->C, .c_dtype = MPT_DTYPE_F32, .alpha = 1.0f, .beta = 0.0f,
                       .math = MPT_MATH_FP32, .tag = "timing.gemm"};
    t->g = g;
    EXPECT(mpt_backend_reserve_workspace(gpu, gpu->gemm_workspace(gpu, &t->g)) == MPT_OK, "%s", mpt_last_error());
    gpu->gemm(gpu, &t->g); /* warm-up: the algorithm is chosen on first use */
    gpu->synchronize(gpu);
    free(h);
}

static void tm_gemm_free(tm_gemm *t) {
    gpu->free(gpu, t->A);
    gpu->free(gpu, t->B);
    gpu->free(gpu, t->C);
}

/* The bounds every timing of `gemms` GEMMs must keep; `host` is the host clock around marks and synchronisation. */
static void tm_check_gemms(const char *what, double dev, double host, int gemms) {
    const double flops = 2.0 * TM_N * (double)TM_N * TM_N * gemms, floor_s = flops / TM_IMPOSSIBLE_FLOPS;
    printf("test_cuda_graph: timing %s: %d FP32 GEMMs of %d: %.3f ms by CUDA events, %.3f ms host clock "
           "(%.1f TFLOP/s by the events)\n",
           what, gemms, TM_N, 1e3 * dev, 1e3 * host, flops / dev / 1e12);
    EXPECT(dev > 0.0 && dev >= floor_s, "%s: %.6g s by the events for %.3g FLOP: below %.3g s, the time at %.0e FLOP/s",
           what, dev, flops, floor_s, TM_IMPOSSIBLE_FLOPS);
    EXPECT(dev <= host + TM_SLACK_S, "%s: %.6g s by the events, more than the host's %.6g s around them (+%g s)", what,
           dev, host, TM_SLACK_S);
    EXPECT(dev >= 0.5 * host, "%s: %.6g s by the events, less than half the host's %.6g s although the GEMMs fill it",
           what, dev, host);
}

/* The same graph run without and with timing marks around every step: bit-identical (an instrument only reads). */
START_TEST(test_timing_training_unchanged) {
    gr_result plain, marked;
    gr_train("mlp", MPT_PRECISION_FP16, cfg_overflow, 1, &plain);
    gr_marks = 1;
    gr_train("mlp", MPT_PRECISION_FP16, cfg_overflow, 1, &marked);
    gr_marks = 0;
    EXPECT(!marked.replay_off && marked.captures == 1 && marked.replays == plain.replays,
           "with marks: graph %s, %lld recordings, %lld replays (without: %lld)", marked.replay_off ? "off" : "on",
           (long long)marked.captures, (long long)marked.replays, (long long)plain.replays);
    EXPECT(memcmp(plain.loss_bits, marked.loss_bits, sizeof plain.loss_bits) == 0,
           "the losses differ with timing marks around the steps");
    EXPECT(plain.n_tensors == marked.n_tensors, "tensor counts differ");
    for (int k = 0; k < plain.n_tensors; k++)
        EXPECT(plain.nbytes[k] == marked.nbytes[k] && memcmp(plain.bytes[k], marked.bytes[k], plain.nbytes[k]) == 0,
               "%s differs with timing marks around the steps", plain.name[k]);
    EXPECT(memcmp(&plain.scaler, &marked.scaler, sizeof plain.scaler) == 0, "the scaler state differs with marks");
    printf("test_cuda_graph: timing marks around %d graph steps (mlp fp16): bit-identical to the run without\n",
           GR_STEPS);
    gr_free(&plain);
    gr_free(&marked);
}
END_TEST

START_TEST(test_timing_idle_gap) {
    tm_marks m = tm_marks_create();
    gpu->synchronize(gpu);
    const double h0 = host_s();
    gpu->event_record(gpu, m.start);
    const double s0 = host_s();
    const struct timespec nap = {0, 30 * 1000 * 1000}; /* 30 ms */
    nanosleep(&nap, NULL);
    const double s1 = host_s();
    gpu->event_record(gpu, m.end);
    gpu->synchronize(gpu);
    const double host = host_s() - h0, slept = s1 - s0, dev = tm_elapsed(&m);
    printf("test_cuda_graph: timing idle gap: host slept %.3f ms between the marks; %.3f ms by CUDA events, %.3f ms "
           "host clock around them\n", 1e3 * slept, 1e3 * dev, 1e3 * host);
    EXPECT(dev >= slept - TM_SLACK_S && dev <= host + TM_SLACK_S,
           "idle gap: %.6g s by the events, expected between the sleep %.6g s and the host's bracket %.6g s (seconds, "
           "idle time included, +-%g s)", dev, slept, host, TM_SLACK_S);
    tm_marks_free(&m);
}
END_TEST

START_TEST(test_timing_gemm_direct) {
    tm_marks m = tm_marks_create();
    tm_gemm t;
    tm_gemm_setup(&t);
    const double h0 = host_s();
    gpu->event_record(gpu, m.start);
    for (int i = 0; i < TM_GEMMS; i++) gpu->gemm(gpu, &t.g);
    gpu->event_record(gpu, m.end);
    gpu->synchronize(gpu);
    const double host = host_s() - h0;
    tm_check_gemms("direct", tm_elapsed(&m), host, TM_GEMMS);
    tm_gemm_free(&t);
    tm_marks_free(&m);
}
END_TEST

START_TEST(test_timing_gemm_graph_replay) {
    tm_marks m = tm_marks_create();
    tm_gemm t;
    tm_gemm_setup(&t);
    EXPECT(gpu->capture_begin(gpu) == MPT_OK, "capture_begin: %s", mpt_last_error());
    for (int i = 0; i < TM_PER_GRAPH; i++) gpu->gemm(gpu, &t.g);
    void *graph = NULL;
    EXPECT(gpu->capture_end(gpu, &graph) == MPT_OK && graph, "capture_end: %s", mpt_last_error());
    gpu->replay(gpu, graph); /* warm-up: the first launch of an executable graph uploads it */
    gpu->synchronize(gpu);
    const double h0 = host_s();
    gpu->event_record(gpu, m.start);
    for (int i = 0; i < TM_GEMMS / TM_PER_GRAPH; i++) gpu->replay(gpu, graph);
    gpu->event_record(gpu, m.end);
    gpu->synchronize(gpu);
    const double host = host_s() - h0;
    tm_check_gemms("graph replay", tm_elapsed(&m), host, TM_GEMMS);
    /* a second reading of the same marks gives the same time (recorded once, read twice) */
    double a = tm_elapsed(&m), b = tm_elapsed(&m);
    EXPECT(a == b, "graph replay: the same marks read %.9g s, then %.9g s", a, b);
    gpu->replay_free(gpu, graph);
    tm_gemm_free(&t);
    tm_marks_free(&m);
}
END_TEST

static Suite *graph_suite(void) {
    Suite *s = suite_create("cuda_graph");
    TCase *tu = tcase_create("scaler");
    tcase_set_timeout(tu, 120);
    tcase_add_test(tu, test_graph_scaler_scripted);
    tcase_add_test(tu, test_graph_capture_failure);
    suite_add_tcase(s, tu);
    TCase *tm = tcase_create("timing");
    tcase_set_timeout(tm, 120);
    tcase_add_test(tm, test_timing_idle_gap);
    tcase_add_test(tm, test_timing_gemm_direct);
    tcase_add_test(tm, test_timing_gemm_graph_replay);
    tcase_add_test(tm, test_timing_training_unchanged);
    suite_add_tcase(s, tm);
    TCase *tt = tcase_create("training");
    tcase_set_timeout(tt, 600);
    tcase_add_test(tt, test_graph_mlp_fp16_overflow);
    tcase_add_test(tt, test_graph_lenet5_bf16_cosine_clip);
    tcase_add_test(tt, test_graph_cnn_dropout_tf32);
    tcase_add_test(tt, test_graph_mlp_bf16_stochastic);
    tcase_add_test(tt, test_graph_failed_recording_falls_back);
    suite_add_tcase(s, tt);
    TCase *tl = tcase_create("loss_fused"); /* swaps in a backend of its own: the teardown puts `gpu` back */
    tcase_set_timeout(tl, 300);
    tcase_add_checked_fixture(tl, NULL, restore_gpu);
    tcase_add_test(tl, test_graph_fused_loss);
    tcase_add_test(tl, test_graph_wgrad_stream);
    tcase_add_test(tl, test_graph_wgrad_stream_delayed);
    suite_add_tcase(s, tl);
    return s;
}

int main(void) {
    int gate = mpt_test_cuda_gate("test_cuda_graph");
    if (gate >= 0) return gate;
    setenv("CK_FORK", "no", 1); /* CUDA does not survive fork(): run every test in this process */
    gpu = mpt_backend_cuda_create();
    if (!gpu) {
        fprintf(stderr, "test_cuda_graph: FAILED: a GPU is available but the CUDA backend failed: %s\n",
                mpt_last_error());
        return 1;
    }
    cpu = mpt_backend_cpu_create();
    int rc = mpt_test_run(graph_suite());
    mpt_backend_free(&gpu);
    mpt_backend_free(&cpu);
    return rc;
}
