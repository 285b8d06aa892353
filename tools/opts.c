/*
 * tools/opts.c - the options of every mptrain command: one table (name, commands, help), strict value
 * parsing, per-command help and the canonical text of each setting.
 *
 * Parsing is strict: numbers go through strtoll/strtoull/strtod with an end check (the whole argument must
 * be the number: "12abc", "", " 3", "1e3" for an integer are rejected), a range check and, for floats,
 * a finiteness check; names are matched exactly. Every rejection names the flag, what was expected and
 * what was found, and the command exits with status 2. getopt_long does the flag syntax (--flag VALUE and
 * --flag=VALUE, unambiguous prefixes of long names).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/optim/optim.h"
#include "models/models.h"
#include "mpt_config.h"
#include "tools/cli.h"

typedef struct opt_def {
    const char *name;    /* long name without dashes */
    mpt_opt_id id;
    int has_arg;         /* no_argument / required_argument */
    unsigned cmds;       /* mpt_cmd_mask bits */
    const char *metavar; /* what the value looks like, in the help */
    const char *help;
    mpt_opt_scope scope; /* what a checkpoint records and a resumed run keeps (cli.h) */
    size_t field, size;  /* INVOCATION and LENGTH options: the one mpt_cli_opts field holding the value, which a resumed
                            run copies from the command line (offsetof, sizeof) */
    int written_if_set;  /* MATH_OPTIONAL: a checkpoint's config holds it only when it is not the default
                            (mpt_cli_opt_written) */
} opt_def;

/* The field of mpt_cli_opts an INVOCATION or LENGTH option sets. */
#define FIELD(f) .field = offsetof(mpt_cli_opts, f), .size = sizeof(((mpt_cli_opts *)0)->f)

#define TC (MPT_CMD_TRAIN | MPT_CMD_COMPARE)
#define SR MPT_CMD_SPEEDRUN /* speedrun takes the options of its invocation, never the recipe's (tools/cmd_speedrun.c) */
#define ALL (MPT_CMD_TRAIN | MPT_CMD_COMPARE | MPT_CMD_EVAL | MPT_CMD_INFO | MPT_CMD_SPEEDRUN)

/* What --cpu-kernels' sets are, after the default each command names. */
#define CPU_KERNEL_SETS                                                                                                 \
    "emulate is Tensor Core numerics emulated exactly, the GPU's oracle; native: bf16 on the CPU's BF16 units through " \
    "oneDNN, with their numerics: BF16 denormals read as zero, denormal results flushed; fp32/tf32/fp16 stay "        \
    "emulated; needs oneDNN and avx512_bf16 or amx_bf16; auto: where native can run a bf16 run's GEMMs, a few "        \
    "training steps in each set at the start, the faster one kept and recorded as the run's set"

static const opt_def opt_table[] = {
    {"model", MPT_OPT_MODEL, required_argument, TC, "SPEC",
     "the network: mlp | lenet5 | cnn, a spec such as conv(32,3,pad=1),batchnorm,relu,maxpool(2),flatten,linear "
     "(layers: conv, linear, maxpool, avgpool, globalavgpool, flatten, dropout, batchnorm, layernorm, relu, gelu, tanh, "
     "sigmoid, leakyrelu; a last linear without a width takes the class count; models/models.h), or @FILE holding one "
     "(default mlp)",
     .scope = MPT_SCOPE_MATH},
    {"precision", MPT_OPT_PRECISION, required_argument, MPT_CMD_TRAIN, "P",
     "the precision mode: one of the modes listed below (default fp32)",
     .scope = MPT_SCOPE_MATH},
    {"precisions", MPT_OPT_PRECISIONS, required_argument, MPT_CMD_COMPARE | SR, "LIST",
     "comma-separated precision modes to train, from those listed below (default: the ones marked *)",
     .scope = MPT_SCOPE_COMMAND},
    {"seeds", MPT_OPT_SEEDS, required_argument, MPT_CMD_COMPARE | SR, "LIST|N",
     "train every precision with each seed of LIST (0,1,2) or of 0..N-1, and report the mean paired "
     "difference to fp32 with a 95% confidence interval (needs GSL; default: one seed, --seed)",
     .scope = MPT_SCOPE_COMMAND},
    {"margin", MPT_OPT_MARGIN, required_argument, MPT_CMD_COMPARE, "PP",
     "with --seeds: equivalence margin in test-accuracy points, > 0 (default 0.3)",
     .scope = MPT_SCOPE_COMMAND},
    {"plot-timeout", MPT_OPT_PLOT_TIMEOUT, required_argument, MPT_CMD_COMPARE, "S",
     "seconds gnuplot may take to draw a picture before it is stopped (the data and script are kept), > 0 "
     "(default 60)",
     .scope = MPT_SCOPE_COMMAND},
    {"optimizer", MPT_OPT_OPTIMIZER, required_argument, TC, "OPT", "sgd | adam | adamw (default adam)",
     .scope = MPT_SCOPE_MATH},
    {"lr", MPT_OPT_LR, required_argument, TC, "X", "learning rate, > 0 (default 1e-3)",
     .scope = MPT_SCOPE_MATH},
    {"momentum", MPT_OPT_MOMENTUM, required_argument, TC, "X", "SGD momentum in [0, 1) (default 0)",
     .scope = MPT_SCOPE_MATH},
    {"nesterov", MPT_OPT_NESTEROV, no_argument, TC, NULL, "SGD with Nesterov momentum (needs --momentum > 0)",
     .scope = MPT_SCOPE_MATH},
    {"weight-decay", MPT_OPT_WEIGHT_DECAY, required_argument, TC, "X",
     "L2 penalty (sgd, adam) or decoupled decay (adamw), >= 0 (default 0; 0.01 for adamw)",
     .scope = MPT_SCOPE_MATH},
    {"beta1", MPT_OPT_BETA1, required_argument, TC, "X", "Adam beta1 in [0, 1) (default 0.9)",
     .scope = MPT_SCOPE_MATH},
    {"beta2", MPT_OPT_BETA2, required_argument, TC, "X", "Adam beta2 in [0, 1) (default 0.999)",
     .scope = MPT_SCOPE_MATH},
    {"eps", MPT_OPT_EPS, required_argument, TC, "X", "Adam epsilon, > 0 (default 1e-8)",
     .scope = MPT_SCOPE_MATH},
    {"epochs", MPT_OPT_EPOCHS, required_argument, TC, "N", "passes over the training set (default 5)",
     .scope = MPT_SCOPE_LENGTH, FIELD(epochs)},
    {"batch-size", MPT_OPT_BATCH_SIZE, required_argument, TC | MPT_CMD_EVAL, "N",
     "examples per step, 1..65536 (default 128)",
     .scope = MPT_SCOPE_MATH},
    {"seed", MPT_OPT_SEED, required_argument, TC, "N",
     "seed of initialisation, shuffling and dropout, 0..2^64-1 (default 0)",
     .scope = MPT_SCOPE_MATH},
    {"loss-scale", MPT_OPT_LOSS_SCALE, required_argument, TC, "MODE",
     "dynamic[:INIT] | static:S | none (default dynamic:65536 for fp16, none otherwise)",
     .scope = MPT_SCOPE_MATH},
    {"growth-interval", MPT_OPT_GROWTH_INTERVAL, required_argument, TC, "N",
     "dynamic loss scale: clean steps before the scale grows (default: the preset's, 2000 for mptrain)",
     .scope = MPT_SCOPE_MATH},
    {"scaler", MPT_OPT_SCALER, required_argument, TC, "NAME",
     "loss-scaler defaults: mptrain | pytorch | apex | deepspeed | keras (default mptrain; see below)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"growth-factor", MPT_OPT_GROWTH_FACTOR, required_argument, TC, "X",
     "dynamic loss scale: multiplier after --growth-interval clean steps, >= 1 (default: the preset's)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"backoff-factor", MPT_OPT_BACKOFF_FACTOR, required_argument, TC, "X",
     "dynamic loss scale: multiplier on overflow, in (0, 1] (default: the preset's)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"hysteresis", MPT_OPT_HYSTERESIS, required_argument, TC, "N",
     "dynamic loss scale: the first N - 1 overflows since the scale last grew are skipped without backing off, "
     "every later one backs off (DeepSpeed's hysteresis), >= 1 (default: the preset's)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"scale-floor", MPT_OPT_SCALE_FLOOR, required_argument, TC, "X",
     "dynamic loss scale: never below X, > 0 (default: the preset's)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"scale-ceiling", MPT_OPT_SCALE_CEILING, required_argument, TC, "X",
     "dynamic loss scale: never above X, >= --scale-floor (default: the preset's)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"master-weights", MPT_OPT_MASTER_WEIGHTS, required_argument, TC, "M",
     "fp32 | none: keep FP32 master weights (default fp32), or update the fp16/bf16 weights directly",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"update-rounding", MPT_OPT_UPDATE_ROUNDING, required_argument, TC, "R",
     "nearest | stochastic: how updated weights round to fp16/bf16 with --master-weights none (default nearest)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"optimizer-state", MPT_OPT_OPTIMIZER_STATE, required_argument, TC, "D",
     "fp32 | bf16 | fp16: storage of Adam's m, v and SGD's momentum buffer (default fp32; plain SGD, --momentum 0, "
     "keeps none: a note says it changes nothing)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"nonfinite", MPT_OPT_NONFINITE, required_argument, TC, "WHAT",
     "skip | apply: a step with inf/NaN gradients is skipped (default) or applied to the weights",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"tf32-matmul", MPT_OPT_TF32_MATMUL, required_argument, TC, "on|off",
     "TF32 for GEMMs with FP32 operands (torch.backends.cuda.matmul.allow_tf32; default on for tf32, else off)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"tf32-conv", MPT_OPT_TF32_CONV, required_argument, TC, "on|off",
     "TF32 for convolutions with FP32 operands (torch.backends.cudnn.allow_tf32; default on for tf32, else off; a "
     "network without convolutions, such as mlp: changes nothing, and a note says so)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"cpu-kernels", MPT_OPT_CPU_KERNELS, required_argument, TC | MPT_CMD_EVAL | SR, "SET",
     "emulate | native | auto: the CPU backend's GEMM/convolution kernels (default emulate; " CPU_KERNEL_SETS ")",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"fp8-scaling", MPT_OPT_FP8_SCALING, required_argument, TC, "S",
     "fp8 modes: delayed (TransformerEngine's DelayedScaling: s from the amax history) | current (s from the "
     "tensor's amax now) (default delayed)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"amax-history", MPT_OPT_AMAX_HISTORY, required_argument, TC, "N",
     "fp8, delayed scaling: steps of amax history whose maximum sets the scale, 1..65536 (default 1024, TE's)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"fp8-margin", MPT_OPT_FP8_MARGIN, required_argument, TC, "M",
     "fp8: scale s = fmax / amax / 2^M, 0..32 (default 0)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"fp8-pow2-scales", MPT_OPT_FP8_POW2_SCALES, required_argument, TC, "on|off",
     "fp8: round every scale down to a power of two (default off)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"mx-scale", MPT_OPT_MX_SCALE, required_argument, TC, "R",
     "mxfp8: the block scale's exponent from the block's amax: floor (the OCP MX rule) | ceil | rceil (cuBLAS's) "
     "(default floor)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"fp8-accum", MPT_OPT_FP8_ACCUM, required_argument, TC, "A",
     "fp8: the FP8 GEMMs' accumulator: fp32 | fast (Hopper's narrow FP8 Tensor Core accumulator, modelled on the CPU; "
     "cuBLASLt FAST_ACCUM on the GPU) (default fp32)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"fp8-promote", MPT_OPT_FP8_PROMOTE, required_argument, TC, "N",
     "with --fp8-accum fast: add the partial sum into FP32 every N elements of K, a multiple of 32 (DeepSeek-V3: 128; "
     "default 0 = never)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"fp8-saturate", MPT_OPT_FP8_SATURATE, required_argument, TC, "on|off",
     "fp8: casts clamp overflow to +-448 / +-57344 (on, default, as CUDA's satfinite) or make it NaN / inf (off)",
     .scope = MPT_SCOPE_MATH_OPTIONAL},
    {"accum-model", MPT_OPT_ACCUM_MODEL, required_argument, TC, "M",
     "ieee | v100 | a100 | ada | h100 | b200: how the CPU backend's emulated TF32, FP16 and BF16 GEMMs and "
     "convolutions sum their exact products: ieee (default) FP32 additions rounded to nearest; a GPU: as its Tensor "
     "Cores do, in aligned, truncated blocks (bit for bit with the published measurements; tens of times slower; "
     "docs/numerics.md). FP32 and FP8 GEMMs unchanged (--fp8-accum); not with --cpu-kernels native or on a GPU",
     .scope = MPT_SCOPE_MATH_OPTIONAL, .written_if_set = 1},
    {"norm-stats", MPT_OPT_NORM_STATS, required_argument, TC, "S",
     "fp32 | fp32-onepass | bf16 | bf16-onepass | fp16 | fp16-onepass: how batchnorm and layernorm compute their "
     "forward statistics: fp32 (default, the policy) two passes in FP32; an ablation otherwise: every operation "
     "rounded to BF16 or FP16 (a 16-bit accumulator), -onepass the variance as E[x^2] - E[x]^2 clamped at 0 (Flax's "
     "fast variance). Normalisation, running statistics and backward stay FP32 (mptrain lab normalization; "
     "docs/numerics.md). CPU only",
     .scope = MPT_SCOPE_MATH_OPTIONAL, .written_if_set = 1},
    {"qat", MPT_OPT_QAT, required_argument, TC, "F",
     "none | int8 | int4: quantization-aware training, the linear and conv weights fake-quantized per output channel "
     "in the forward pass (s = amax / 127 or / 7 of each row of the FP32 master, rewritten after every step; the "
     "gradient reaches the masters unchanged, the straight-through estimator; not with fp8 modes; default none)",
     .scope = MPT_SCOPE_MATH_OPTIONAL, .written_if_set = 1},
    {"lr-schedule", MPT_OPT_LR_SCHEDULE, required_argument, TC, "S", "constant | step | cosine (default constant)",
     .scope = MPT_SCOPE_MATH},
    {"warmup-steps", MPT_OPT_WARMUP_STEPS, required_argument, TC, "N", "cosine: linear warmup steps (default 0)",
     .scope = MPT_SCOPE_MATH},
    {"min-lr", MPT_OPT_MIN_LR, required_argument, TC, "X", "cosine: final learning rate (default 0)",
     .scope = MPT_SCOPE_MATH},
    {"step-size", MPT_OPT_STEP_SIZE, required_argument, TC, "N",
     "step: steps between decays (default 1000; a note says when the first comes after the run's last step)",
     .scope = MPT_SCOPE_MATH},
    {"gamma", MPT_OPT_GAMMA, required_argument, TC, "X", "step: decay factor in (0, 1] (default 0.1)",
     .scope = MPT_SCOPE_MATH},
    {"clip-norm", MPT_OPT_CLIP_NORM, required_argument, TC, "X",
     "clip the global L2 norm of the unscaled gradients (default 0 = off)",
     .scope = MPT_SCOPE_MATH},
    {"limit-train", MPT_OPT_LIMIT_TRAIN, required_argument, TC | SR, "N",
     "train on the first N training images only (default 0 = all)",
     .scope = MPT_SCOPE_MATH},
    {"limit-test", MPT_OPT_LIMIT_TEST, required_argument, TC | MPT_CMD_EVAL | SR, "N",
     "evaluate on the first N test images only (default 0 = all)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(limit_test)},
    {"val-split", MPT_OPT_VAL_SPLIT, required_argument, TC, "F",
     "hold out this fraction of the training images for validation, [0, 1) (default 0)",
     .scope = MPT_SCOPE_MATH},
    {"standardize", MPT_OPT_STANDARDIZE, no_argument, TC, NULL,
     "standardise pixels with the training set's mean and std (default: scale to [0, 1])",
     .scope = MPT_SCOPE_MATH},
    {"inject-nonfinite", MPT_OPT_INJECT_NONFINITE, required_argument, TC, "STEP",
     "make the gradients of iteration STEP (0-based) NaN, to watch a step being skipped; STEP must be one of the "
     "run's steps (below --epochs x steps per epoch; past --max-steps, a resumed run injects it)",
     .scope = MPT_SCOPE_MATH},
    {"device", MPT_OPT_DEVICE, required_argument, TC | MPT_CMD_EVAL | SR, "D",
     "auto | cpu | cuda (default auto: the GPU when usable, else the CPU)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(device)},
    {"cuda-graph", MPT_OPT_CUDA_GRAPH, required_argument, TC | SR, "on|off",
     "on the CUDA backend, record the training step once as a CUDA Graph and replay it every step (default on; "
     "results are bit-identical either way; the CPU backend ignores it; docs/benchmarks.md)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(cuda_graph)},
    {"data", MPT_OPT_DATA, required_argument, TC | MPT_CMD_EVAL | SR, "DIR",
     "directory with the four MNIST-format IDX files, any image size and channels (default " MPT_DEFAULT_DATA_DIR ")",
     .scope = MPT_SCOPE_INVOCATION, FIELD(data)},
    {"classes", MPT_OPT_CLASSES, required_argument, TC, "K",
     "the class count, 2..256: labels are 0..K-1 (default: the largest training label + 1; a resumed run keeps its "
     "checkpoint's)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(classes)},
    {"data-layout", MPT_OPT_DATA_LAYOUT, required_argument, TC | MPT_CMD_EVAL, "L",
     "rank-4 IDX images: nchw ([N, C, H, W], PyTorch's) | nhwc ([N, H, W, C], channels last; transposed on load) "
     "(default nchw; rank-3 files are [N, H, W] either way: nhwc changes nothing there, and a note says so)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(data_layout)},
    {"out", MPT_OPT_OUT, required_argument, TC | SR, "DIR",
     "output directory (default runs/<model>-<precision>)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(out)},
    {"resume", MPT_OPT_RESUME, required_argument, MPT_CMD_TRAIN, "CKPT",
     "continue the run saved in CKPT exactly (its settings; --epochs/--max-steps extend it)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(resume)},
    {"checkpoint", MPT_OPT_CHECKPOINT, required_argument, MPT_CMD_EVAL, "CKPT", "the checkpoint to evaluate",
     .scope = MPT_SCOPE_COMMAND},
    {"quantize", MPT_OPT_QUANTIZE, required_argument, MPT_CMD_EVAL, "F",
     "int8 | int4 | fp8-e4m3 | bf16: post-training quantization of the linear and conv weights (symmetric, s = amax / "
     "127, 7 or 448 from the FP32 masters; bf16: rounded to nearest, no scale); evaluates the checkpoint unquantized "
     "and quantized on the same images and reports both accuracies, the weights' memory, and per layer the weight and "
     "output errors",
     .scope = MPT_SCOPE_COMMAND},
    {"granularity", MPT_OPT_GRANULARITY, required_argument, MPT_CMD_EVAL, "G",
     "with --quantize int8|int4|fp8-e4m3: channel (one scale per output channel, default) | tensor (one per weight "
     "tensor); bf16 has no scale and refuses it",
     .scope = MPT_SCOPE_COMMAND},
    {"activations", MPT_OPT_ACTIVATIONS, required_argument, MPT_CMD_EVAL, "A",
     "with --quantize int8|int4: none (default: weights only, the checkpoint's GEMMs on them) | int8 (the input of "
     "every linear and conv layer to INT8 with one scale per tensor, s = amax / 127 calibrated on --calibrate training "
     "batches; integer GEMMs and convolutions, exact int32 sums, one rescale)",
     .scope = MPT_SCOPE_COMMAND},
    {"calibrate", MPT_OPT_CALIBRATE, required_argument, MPT_CMD_EVAL, "N",
     "with --activations int8: training batches whose largest |input| per layer sets its scale, 1..10000 (default 16)",
     .scope = MPT_SCOPE_COMMAND},
    {"threads", MPT_OPT_THREADS, required_argument, TC | MPT_CMD_EVAL | SR, "N",
     "threads of the CPU backend's GEMMs (OpenBLAS and oneDNN), 1..256 (default: OpenBLAS's, OPENBLAS_NUM_THREADS "
     "or all cores)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(threads)},
    {"log-every", MPT_OPT_LOG_EVERY, required_argument, TC, "N",
     "read the loss and loss scale every N steps into metrics.csv (default 10)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(log_every)},
    {"save-every", MPT_OPT_SAVE_EVERY, required_argument, TC, "N",
     "also write the checkpoint every N steps (default 0 = at the end only)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(save_every)},
    {"max-steps", MPT_OPT_MAX_STEPS, required_argument, TC, "N",
     "stop (and save) once N steps have run in total (default 0 = no limit)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(max_steps)},
    {"progress", MPT_OPT_PROGRESS, required_argument, TC | SR, "WHEN",
     "auto | on | off: a progress bar (default auto: when stdout is a terminal)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(progress)},
    {"telemetry", MPT_OPT_TELEMETRY, required_argument, TC, "N",
     "every N steps measure underflow, overflow and rounding of every tensor into telemetry.csv (docs/numerics.md; "
     "default 0 = off)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(telemetry)},
    {"shadow", MPT_OPT_SHADOW, no_argument, TC, NULL,
     "on telemetry steps also run an FP32 twin of the network on the same batch with the master weights, and "
     "report each layer's error against it",
     .scope = MPT_SCOPE_INVOCATION, FIELD(shadow)},
    {"data-parallel", MPT_OPT_DATA_PARALLEL, no_argument, MPT_CMD_TRAIN, NULL,
     "run as one rank of `mpirun -np N mptrain train ...`: each rank trains on its shard of every global batch "
     "(--batch-size stays the global batch, divisible by N) and the gradients are all-reduced (docs/distributed.md); "
     "with --telemetry, telemetry.csv adds the all-reduce's error against FP32 (comm_rel_l2)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(data_parallel)},
    {"grad-comm", MPT_OPT_GRAD_COMM, required_argument, MPT_CMD_TRAIN, "D",
     "fp32 | bf16 | fp16: the dtype the data-parallel gradients travel and are summed in (default fp32)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(grad_comm)},
    {"comm-timeout", MPT_OPT_COMM_TIMEOUT, required_argument, MPT_CMD_TRAIN | MPT_CMD_COMPARE, "S",
     "under mpirun: a step's collective not complete after S seconds aborts the job, naming the ranks that did not "
     "arrive; every other wait asks its peers every S seconds and ends the job when one does not answer or all wait, "
     "> 0 (default 600, as PyTorch's NCCL watchdog)",
     .scope = MPT_SCOPE_INVOCATION, FIELD(comm_timeout)},
    {"print-recipe", MPT_OPT_PRINT_RECIPE, no_argument, SR, NULL,
     "print the recipe as the options of mptrain train and compare it is, on one line quoted for the shell "
     "(`mptrain speedrun --print-recipe | xargs mptrain train --precision bf16`), and exit; no other option with it "
     "(none changes the recipe)",
     .scope = MPT_SCOPE_COMMAND},
    {"untimed-warmup", MPT_OPT_UNTIMED_WARMUP, required_argument, SR, "N",
     "before each run's clocks start, N training steps of a throw-away copy of the network on the same device, "
     "0..1000 (default 5; each run trains bit-identically either way)",
     .scope = MPT_SCOPE_COMMAND},
    {"help", MPT_OPT_HELP, no_argument, ALL, NULL, "show this help",
     .scope = MPT_SCOPE_COMMAND},
};
#define N_OPTS ((int)(sizeof opt_table / sizeof opt_table[0]))
_Static_assert(sizeof opt_table / sizeof opt_table[0] == MPT_OPT_COUNT, "one option table row per mpt_opt_id");

/* Where a command's default differs from the row's help (the text the row's other commands show), the line that
 * command's --help shows instead: each command names only its own default. tests/test_cli.c reads them back. */
typedef struct opt_help_for {
    mpt_opt_id id;
    unsigned cmds; /* mpt_cmd_mask bits: the commands that show this text instead of the row's */
    const char *help;
} opt_help_for;

static const opt_help_for help_for_cmd[] = {
    {MPT_OPT_SEEDS, SR,
     "train every precision with each seed of LIST (0,1,2) or of 0..N-1, and report per precision the mean test "
     "accuracy with its 95% confidence interval and the paired differences to fp32 (needs GSL; default 10: seeds 0..9)"},
    {MPT_OPT_BATCH_SIZE, MPT_CMD_EVAL, "examples per evaluation batch, 1..65536 (default: the checkpoint's)"},
    {MPT_OPT_CPU_KERNELS, MPT_CMD_COMPARE | SR,
     "emulate | native | auto: the CPU backend's GEMM/convolution kernels (default auto; " CPU_KERNEL_SETS ")"},
    {MPT_OPT_CPU_KERNELS, MPT_CMD_EVAL,
     "emulate | native | auto: the CPU backend's GEMM/convolution kernels (default, and auto: the set the checkpoint "
     "trained with, emulate where that is unavailable here; emulate: Tensor Core numerics emulated exactly; native: "
     "bf16 on the CPU's BF16 units through oneDNN)"},
    {MPT_OPT_OUT, MPT_CMD_COMPARE, "output directory (default runs/compare-<model>)"},
    {MPT_OPT_OUT, SR, "output directory (default runs/speedrun)"},
    {MPT_OPT_TELEMETRY, MPT_CMD_COMPARE,
     "every N steps measure underflow, overflow and rounding of every tensor into telemetry.csv (docs/numerics.md; "
     "default 50; 0 = off)"},
};

/* The help line of option row d in command cmd's --help. */
static const char *help_text(const opt_def *d, mpt_cmd_mask cmd) {
    for (size_t i = 0; i < sizeof help_for_cmd / sizeof help_for_cmd[0]; i++)
        if (help_for_cmd[i].id == d->id && (help_for_cmd[i].cmds & cmd)) return help_for_cmd[i].help;
    return d->help;
}

/* The --scaler presets: each system's documented dynamic-loss-scaling defaults. "No floor" / "no ceiling" are
 * FLT_MIN (2^-126, keeping the scale a normal FP32 number) and FLT_MAX. Growth that would overflow FP32 never
 * happens in any of them (mpt_scaler_update_fields). */
typedef struct scaler_preset {
    const char *name;
    double init_scale, growth_factor, backoff_factor;
    int growth_interval, hysteresis;
    double floor, ceiling;
    const char *source;
} scaler_preset;

static const scaler_preset scaler_presets[MPT_SCALER_PRESET_COUNT] = {
    [MPT_SCALER_MPTRAIN] = {"mptrain", 65536.0, 2.0, 0.5, 2000, 1, 1.0, 16777216.0,
                            "GradScaler's init 2^16, x2 / x0.5, 2000 steps, with Apex amp's ceiling 2^24 and a floor "
                            "of 1"},
    [MPT_SCALER_PYTORCH] = {"pytorch", 65536.0, 2.0, 0.5, 2000, 1, FLT_MIN, FLT_MAX,
                            "torch.amp.GradScaler(init_scale=2**16, growth_factor=2.0, backoff_factor=0.5, "
                            "growth_interval=2000): no floor, no ceiling"},
    [MPT_SCALER_APEX] = {"apex", 65536.0, 2.0, 0.5, 2000, 1, FLT_MIN, 16777216.0,
                         "apex.amp LossScaler (apex/amp/scaler.py): init_scale=2**16, scale_factor=2, "
                         "scale_window=2000, min_loss_scale=None, max_loss_scale=2**24"},
    [MPT_SCALER_DEEPSPEED] = {"deepspeed", 65536.0, 2.0, 0.5, 1000, 2, 1.0, FLT_MAX,
                              "DeepSpeed fp16 config: initial_scale_power 16, loss_scale_window 1000, hysteresis 2, "
                              "min_loss_scale 1, scale factor 2 (DynamicLossScaler, deepspeed/runtime/fp16/"
                              "loss_scaler.py; its first growth after an overflow comes one clean step later, and it "
                              "raises an error at an overflow at min_loss_scale, where mptrain stays at the floor)"},
    [MPT_SCALER_KERAS] = {"keras", 32768.0, 2.0, 0.5, 2000, 1, FLT_MIN, FLT_MAX,
                          "tf.keras.mixed_precision.LossScaleOptimizer(initial_scale=2**15, "
                          "dynamic_growth_steps=2000): doubles / halves, no floor or ceiling documented"},
};

static int scaler_preset_parse(const char *s, mpt_scaler_preset *out) {
    for (int i = 0; i < MPT_SCALER_PRESET_COUNT; i++)
        if (strcmp(s, scaler_presets[i].name) == 0) {
            *out = (mpt_scaler_preset)i;
            return 0;
        }
    return -1;
}

static int parse_on_off(const char *s, int *out) {
    if (strcmp(s, "on") == 0) *out = 1;
    else if (strcmp(s, "off") == 0) *out = 0;
    else return -1;
    return 0;
}

static int parse_state_dtype(const char *s, mpt_dtype *out) {
    if (strcmp(s, "fp32") == 0) *out = MPT_DTYPE_F32;
    else if (strcmp(s, "bf16") == 0) *out = MPT_DTYPE_BF16;
    else if (strcmp(s, "fp16") == 0) *out = MPT_DTYPE_F16;
    else return -1;
    return 0;
}

static const char *state_dtype_name(mpt_dtype t) {
    return t == MPT_DTYPE_BF16 ? "bf16" : t == MPT_DTYPE_F16 ? "fp16" : "fp32";
}

static const opt_def *opt_find(mpt_opt_id id) {
    for (int i = 0; i < N_OPTS; i++)
        if (opt_table[i].id == id) return &opt_table[i];
    return NULL;
}

const char *mpt_cli_opt_name(mpt_opt_id id) {
    const opt_def *d = opt_find(id);
    return d ? d->name : "?";
}

int mpt_cli_opt_takes_value(mpt_opt_id id) {
    const opt_def *d = opt_find(id);
    return d && d->has_arg == required_argument;
}

mpt_opt_scope mpt_cli_opt_scope(mpt_opt_id id) {
    const opt_def *d = opt_find(id);
    return d ? d->scope : MPT_SCOPE_COMMAND;
}

int mpt_cli_opt_recorded(mpt_opt_id id) {
    mpt_opt_scope sc = mpt_cli_opt_scope(id);
    return sc == MPT_SCOPE_MATH || sc == MPT_SCOPE_MATH_OPTIONAL || sc == MPT_SCOPE_LENGTH;
}

int mpt_cli_opt_written(const mpt_cli_opts *o, mpt_opt_id id) {
    if (!mpt_cli_opt_recorded(id)) return 0;
    const opt_def *d = opt_find(id);
    if (!d || !d->written_if_set) return 1;
    mpt_cli_opts def;
    mpt_cli_opts_default(&def);
    char a[96], b[96];
    return strcmp(mpt_cli_format(o, id, a, sizeof a), mpt_cli_format(&def, id, b, sizeof b)) != 0;
}

void mpt_cli_take_invocation(mpt_cli_opts *out, const mpt_cli_opts *cli) {
    for (int i = 0; i < N_OPTS; i++) {
        const opt_def *d = &opt_table[i];
        const int k = d->id - MPT_OPT_FIRST;
        if (d->scope != MPT_SCOPE_INVOCATION && !(d->scope == MPT_SCOPE_LENGTH && cli->given[k])) continue;
        memcpy((char *)out + d->field, (const char *)cli + d->field, d->size);
        out->given[k] = cli->given[k];
    }
}

int mpt_cli_given(const mpt_cli_opts *o, mpt_opt_id id) {
    return id >= MPT_OPT_FIRST && id < MPT_OPT_END && o->given[id - MPT_OPT_FIRST];
}

void mpt_cli_opts_default(mpt_cli_opts *o) {
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "mlp");
    o->precision = MPT_PRECISION_FP32;
    o->optimizer = MPT_OPTIM_ADAM;
    o->lr = 1e-3;
    o->momentum = 0.0;
    o->weight_decay = 0.0;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->batch = 128;
    o->seed = 0;
    o->loss_scaling = MPT_LOSS_SCALE_NONE;
    o->loss_scale_value = 1.0;
    o->growth_interval = 2000;
    o->master_weights = MPT_MASTER_FP32;
    o->update_rounding = MPT_ROUNDING_NEAREST;
    o->optimizer_state = MPT_DTYPE_F32;
    o->nonfinite = MPT_NONFINITE_SKIP;
    o->scaler = MPT_SCALER_MPTRAIN;
    o->growth_factor = 2.0;
    o->backoff_factor = 0.5;
    o->hysteresis = 1;
    o->scale_floor = 1.0;
    o->scale_ceiling = 16777216.0;
    o->fp8 = mpt_fp8_recipe_default();
    o->accum_model = MPT_ACCUM_MODEL_IEEE;
    o->norm_stats = MPT_NORM_STATS_FP32;
    o->lr_schedule = MPT_LR_CONSTANT;
    o->step_size = 1000;
    o->gamma = 0.1;
    o->inject_nonfinite = -1;
    o->epochs = 5;
    o->device = MPT_DEVICE_CHOICE_AUTO;
    snprintf(o->data, sizeof o->data, "%s", MPT_DEFAULT_DATA_DIR);
    o->log_every = 10;
    o->progress = MPT_PROGRESS_AUTO;
    o->cuda_graph = 1;
    o->n_precisions = 0; /* the modes whose row says compare_default: fp32, tf32, fp16, bf16; FP8 when asked for */
    for (int i = 0; i < MPT_PRECISION_COUNT; i++)
        if (mpt_mode_info((mpt_precision)i)->compare_default) o->precisions[o->n_precisions++] = (mpt_precision)i;
    o->margin = 0.3;
    o->quantize = -1;
    o->per_channel = 1;
    o->calibrate = 16;
    o->comm_timeout = 600.0;
    o->plot_timeout = 60.0;
}

/* ---- strict numbers ------------------------------------------------------------------------------------ */

double mpt_cli_nan_plain(double x) { return isnan(x) ? NAN : x; }

void mpt_cli_shell_word(char *b, size_t cap, const char *text) {
    size_t k = strlen(b);
    int plain = text[0] != '\0';
    for (const char *c = text; *c && plain; c++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:=+-/@%", *c) != NULL;
    if (plain) {
        snprintf(b + k, cap - k, "%s", text);
        return;
    }
    if (k + 1 < cap) b[k++] = '\'', b[k] = '\0';
    for (const char *c = text; *c && k + 5 < cap; c++) {
        if (*c == '\'') k += (size_t)snprintf(b + k, cap - k, "'\\''");
        else b[k++] = *c, b[k] = '\0';
    }
    if (k + 1 < cap) b[k++] = '\'', b[k] = '\0';
}

const char *mpt_cli_echo(char *buf, size_t cap, const char *text) {
    size_t n = strlen(text);
    if (n <= 64) return mpt_escape(buf, cap, text);
    size_t head = 48;
    while (head > 0 && ((unsigned char)text[head] & 0xC0) == 0x80) head--; /* not inside a UTF-8 sequence */
    char part[64];
    memcpy(part, text, head);
    part[head] = '\0';
    char esc[260];
    mpt_escape(esc, sizeof esc, part);
    snprintf(buf, cap, "%s... (%zu bytes)", esc, n);
    return buf;
}

static mpt_status bad_value(const char *flag, const char *expected, const char *found) {
    char esc[256];
    return mpt_errorf(MPT_ERR_ARG, "--%s: expected %s, found '%s'", flag, expected, mpt_cli_echo(esc, sizeof esc, found));
}

static mpt_status parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, const char *expected,
                            int64_t *out) {
    if (!s || !*s || isspace((unsigned char)s[0])) return bad_value(flag, expected, s ? s : "");
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || errno == ERANGE || v < lo || v > hi) return bad_value(flag, expected, s);
    *out = (int64_t)v;
    return MPT_OK;
}

static mpt_status parse_int(const char *flag, const char *s, int lo, int hi, const char *expected, int *out) {
    int64_t v;
    MPT_TRY(parse_i64(flag, s, lo, hi, expected, &v));
    *out = (int)v;
    return MPT_OK;
}

static mpt_status parse_u64(const char *flag, const char *s, const char *expected, uint64_t *out) {
    if (!s || !*s || !isdigit((unsigned char)s[0])) return bad_value(flag, expected, s ? s : "");
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno == ERANGE) return bad_value(flag, expected, s);
    *out = (uint64_t)v;
    return MPT_OK;
}

/* A finite double in [lo, hi] (lo excluded when lo_open). */
static mpt_status parse_double(const char *flag, const char *s, double lo, int lo_open, double hi, int hi_open,
                               const char *expected, double *out) {
    if (!s || !*s || isspace((unsigned char)s[0])) return bad_value(flag, expected, s ? s : "");
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (*end != '\0' || errno == ERANGE || !isfinite(v)) return bad_value(flag, expected, s);
    if (lo_open ? !(v > lo) : !(v >= lo)) return bad_value(flag, expected, s);
    if (hi_open ? !(v < hi) : !(v <= hi)) return bad_value(flag, expected, s);
    *out = v;
    return MPT_OK;
}

/* Values that become FP32 in the engine must be representable as finite floats. */
#define FLT_BIG 3.0e38

static mpt_status parse_loss_scale(const char *flag, const char *s, mpt_cli_opts *o) {
    const char *expected = "dynamic, dynamic:INIT, static:S or none (INIT, S: numbers in [1, 2^24])";
    if (strcmp(s, "none") == 0) {
        o->loss_scaling = MPT_LOSS_SCALE_NONE;
        o->loss_scale_value = 1.0;
        return MPT_OK;
    }
    if (strcmp(s, "dynamic") == 0) {
        o->loss_scaling = MPT_LOSS_SCALE_DYNAMIC;
        o->loss_scale_value = 65536.0;
        return MPT_OK;
    }
    const char *colon = strchr(s, ':');
    if (!colon) return bad_value(flag, expected, s);
    size_t klen = (size_t)(colon - s);
    mpt_loss_scaling kind;
    if (klen == 7 && strncmp(s, "dynamic", 7) == 0)
        kind = MPT_LOSS_SCALE_DYNAMIC;
    else if (klen == 6 && strncmp(s, "static", 6) == 0)
        kind = MPT_LOSS_SCALE_STATIC;
    else
        return bad_value(flag, expected, s);
    double v;
    if (parse_double(flag, colon + 1, 1.0, 0, 16777216.0, 0, expected, &v) != MPT_OK)
        return bad_value(flag, expected, s);
    o->loss_scaling = kind;
    o->loss_scale_value = v;
    return MPT_OK;
}

/* The precision modes' names from their table, joined by sep ("fp32, tf32, ..."). Returns buf. */
static const char *precision_list(const char *sep, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < MPT_PRECISION_COUNT && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? sep : "", mpt_precision_name((mpt_precision)i));
    return buf;
}

static mpt_status parse_precisions(const char *flag, const char *s, mpt_cli_opts *o) {
    char names[256], expected[320];
    snprintf(expected, sizeof expected, "a comma-separated list of distinct precisions from %s",
             precision_list(", ", names, sizeof names));
    char buf[128];
    if (strlen(s) >= sizeof buf || !*s) return bad_value(flag, expected, s);
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        mpt_precision p;
        if (mpt_precision_parse(tok, &p) != 0) return bad_value(flag, expected, s);
        for (int i = 0; i < n; i++)
            if (o->precisions[i] == p) return bad_value(flag, expected, s);
        if (n >= MPT_PRECISION_COUNT) return bad_value(flag, expected, s);
        o->precisions[n++] = p;
    }
    if (n == 0 || s[strlen(s) - 1] == ',' || strstr(s, ",,") || s[0] == ',') return bad_value(flag, expected, s);
    o->n_precisions = n;
    return MPT_OK;
}

/* --seeds N (0..N-1) or a comma-separated list of distinct seeds. */
static mpt_status parse_seeds(const char *flag, const char *s, mpt_cli_opts *o) {
    const char *expected = "a count N in [1, 64] (seeds 0..N-1) or a comma-separated list of up to 64 distinct "
                           "seeds such as 0,1,2";
    if (!strchr(s, ',')) {
        int n;
        if (parse_int(flag, s, 1, MPT_CLI_MAX_SEEDS, expected, &n) != MPT_OK) return bad_value(flag, expected, s);
        for (int i = 0; i < n; i++) o->seeds[i] = (uint64_t)i;
        o->n_seeds = n;
        return MPT_OK;
    }
    char buf[MPT_CLI_MAX_SEEDS * 22];
    if (strlen(s) >= sizeof buf || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        return bad_value(flag, expected, s);
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (n >= MPT_CLI_MAX_SEEDS || parse_u64(flag, tok, expected, &v) != MPT_OK) return bad_value(flag, expected, s);
        for (int i = 0; i < n; i++)
            if (o->seeds[i] == v) return bad_value(flag, expected, s);
        o->seeds[n++] = v;
    }
    o->n_seeds = n;
    return MPT_OK;
}

/* A number in [0, 1) that stays below 1 in FP32, where the optimizer computes (Adam's betas): 0.9999999999 passes
 * as a double but rounds to 1.0f, which would stop the moment estimates from ever moving. */
static mpt_status parse_below_one_fp32(const char *flag, const char *s, double *out) {
    double v;
    MPT_TRY(parse_double(flag, s, 0.0, 0, 1.0, 1, "a number in [0, 1)", &v));
    if ((float)v >= 1.0f) {
        char esc[256];
        return mpt_errorf(MPT_ERR_ARG, "--%s %s: rounds to 1 in FP32, where the optimizer computes; expected a number "
                          "in [0, 1) that stays below 1 in FP32 (at most 0.99999994)", flag,
                          mpt_cli_echo(esc, sizeof esc, s));
    }
    *out = v;
    return MPT_OK;
}

/* A number > 0 that stays above 0 in FP32, where the engine computes (Adam's eps, the scaler's backoff, the step
 * schedule's gamma, the clipping norm): 1e-50 passes as a double but becomes 0.0f, which would make Adam divide 0 by 0
 * (NaN weights), the engine refuse "backoff_factor 0" naming its field rather than the flag, or turn clipping off. */
static mpt_status parse_positive_fp32(const char *flag, const char *s, double lo, int lo_open, double hi,
                                      const char *expected, double *out) {
    double v;
    MPT_TRY(parse_double(flag, s, lo, lo_open, hi, 0, expected, &v));
    if (v > 0.0 && !((float)v > 0.0f)) {
        char esc[256];
        return mpt_errorf(MPT_ERR_ARG, "--%s %s: rounds to 0 in FP32, where the engine computes; expected %s that "
                          "stays above 0 in FP32 (its smallest positive value is 1.4e-45)", flag,
                          mpt_cli_echo(esc, sizeof esc, s), expected);
    }
    *out = v;
    return MPT_OK;
}

static mpt_status copy_path(const char *flag, const char *s, char *dst, size_t cap) {
    if (!*s) return bad_value(flag, "a path", s);
    if (strlen(s) >= cap) return mpt_errorf(MPT_ERR_ARG, "--%s: path longer than %zu bytes", flag, cap - 1);
    snprintf(dst, cap, "%s", s);
    return MPT_OK;
}

/* The text of --model @FILE into buf (cap bytes): a regular file (opened without blocking: a FIFO must not hang),
 * shorter than cap. */
static mpt_status read_spec_file(const char *flag, const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return mpt_errorf(MPT_ERR_ARG, "--%s @%s: cannot open: %s", flag, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return mpt_errorf(MPT_ERR_ARG, "--%s @%s: expected a regular file holding a spec", flag, path);
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            mpt_status s = mpt_errorf(MPT_ERR_ARG, "--%s @%s: read failed: %s", flag, path, strerror(errno));
            close(fd);
            return s;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n == cap - 1) {
            char extra;
            ssize_t more = read(fd, &extra, 1);
            close(fd);
            if (more > 0)
                return mpt_errorf(MPT_ERR_ARG, "--%s @%s: expected a spec of at most %zu bytes", flag, path, cap - 2);
            buf[n] = '\0';
            return MPT_OK;
        }
    }
    close(fd);
    buf[n] = '\0';
    if (memchr(buf, '\0', n)) return mpt_errorf(MPT_ERR_ARG, "--%s @%s: expected text, found a NUL byte", flag, path);
    return MPT_OK;
}

/* --model NAME | SPEC | @FILE: stored as the built-in name or the spec's canonical text (models/models.h). */
static mpt_status apply_model(mpt_cli_opts *o, const char *f, const char *arg) {
    static char text[MPT_MODEL_SPEC_MAX + 1];
    const char *spec = arg, *file = NULL;
    if (arg[0] == '@') {
        file = arg + 1;
        MPT_TRY(read_spec_file(f, file, text, sizeof text));
        spec = text;
    }
    char canon[MPT_MODEL_SPEC_MAX];
    if (mpt_model_canonical(spec, canon, sizeof canon) != MPT_OK) {
        char msg[768], esc[256];
        snprintf(msg, sizeof msg, "%s", mpt_last_error());
        size_t k = strspn(spec, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (!file && k == strlen(spec) && k > 0) /* one word: a misspelt name, most likely */
            return mpt_errorf(MPT_ERR_ARG, "--%s: '%s' is not a built-in model (%s), nor a layer spec: %s", f,
                              mpt_cli_echo(esc, sizeof esc, spec), mpt_model_names(), msg);
        if (file) return mpt_errorf(MPT_ERR_ARG, "--%s @%s: %s", f, file, msg);
        return mpt_errorf(MPT_ERR_ARG, "--%s '%s': %s", f, mpt_cli_echo(esc, sizeof esc, spec), msg);
    }
    snprintf(o->model, sizeof o->model, "%s", canon);
    return MPT_OK;
}

mpt_status mpt_cli_apply(mpt_cli_opts *o, mpt_opt_id id, const char *arg) {
    const char *f = mpt_cli_opt_name(id);
    switch (id) {
    case MPT_OPT_MODEL: return apply_model(o, f, arg);
    case MPT_OPT_PRECISION:
        if (mpt_precision_parse(arg, &o->precision) != 0) {
            char names[256], expected[280];
            snprintf(expected, sizeof expected, "one of %s", precision_list(", ", names, sizeof names));
            return bad_value(f, expected, arg);
        }
        return MPT_OK;
    case MPT_OPT_PRECISIONS: return parse_precisions(f, arg, o);
    case MPT_OPT_SEEDS: return parse_seeds(f, arg, o);
    case MPT_OPT_MARGIN: return parse_double(f, arg, 0.0, 1, 100.0, 0, "a number of points in (0, 100]", &o->margin);
    case MPT_OPT_PLOT_TIMEOUT:
        return parse_double(f, arg, 0.0, 1, 86400.0, 0, "a number of seconds in (0, 86400]", &o->plot_timeout);
    case MPT_OPT_OPTIMIZER:
        if (mpt_optim_kind_parse(arg, &o->optimizer) != 0) return bad_value(f, "one of sgd, adam, adamw", arg);
        return MPT_OK;
    case MPT_OPT_LR: return parse_double(f, arg, 1e-30, 0, FLT_BIG, 0, "a number in [1e-30, 3e38]", &o->lr);
    case MPT_OPT_MOMENTUM: return parse_below_one_fp32(f, arg, &o->momentum);
    case MPT_OPT_NESTEROV: o->nesterov = 1; return MPT_OK;
    case MPT_OPT_WEIGHT_DECAY: return parse_double(f, arg, 0.0, 0, FLT_BIG, 0, "a number >= 0", &o->weight_decay);
    case MPT_OPT_BETA1: return parse_below_one_fp32(f, arg, &o->beta1);
    case MPT_OPT_BETA2: return parse_below_one_fp32(f, arg, &o->beta2);
    case MPT_OPT_EPS: return parse_positive_fp32(f, arg, 0.0, 1, 1.0, "a number in (0, 1]", &o->eps);
    case MPT_OPT_EPOCHS:
        return parse_int(f, arg, 1, MPT_CLI_MAX_EPOCHS, "an integer in [1, 100000]", &o->epochs);
    case MPT_OPT_BATCH_SIZE: return parse_int(f, arg, 1, 65536, "an integer in [1, 65536]", &o->batch);
    case MPT_OPT_SEED: return parse_u64(f, arg, "an integer in [0, 2^64-1]", &o->seed);
    case MPT_OPT_LOSS_SCALE: return parse_loss_scale(f, arg, o);
    case MPT_OPT_GROWTH_INTERVAL:
        return parse_int(f, arg, 1, 1000000000, "an integer in [1, 10^9]", &o->growth_interval);
    case MPT_OPT_MASTER_WEIGHTS:
        if (mpt_master_mode_parse(arg, &o->master_weights) != 0) return bad_value(f, "one of fp32, none", arg);
        return MPT_OK;
    case MPT_OPT_UPDATE_ROUNDING:
        if (mpt_update_rounding_parse(arg, &o->update_rounding) != 0)
            return bad_value(f, "one of nearest, stochastic", arg);
        return MPT_OK;
    case MPT_OPT_OPTIMIZER_STATE:
        if (parse_state_dtype(arg, &o->optimizer_state) != 0) return bad_value(f, "one of fp32, bf16, fp16", arg);
        return MPT_OK;
    case MPT_OPT_NONFINITE:
        if (mpt_nonfinite_mode_parse(arg, &o->nonfinite) != 0) return bad_value(f, "one of skip, apply", arg);
        return MPT_OK;
    case MPT_OPT_TF32_MATMUL:
        if (parse_on_off(arg, &o->tf32_matmul) != 0) return bad_value(f, "on or off", arg);
        return MPT_OK;
    case MPT_OPT_TF32_CONV:
        if (parse_on_off(arg, &o->tf32_conv) != 0) return bad_value(f, "on or off", arg);
        return MPT_OK;
    case MPT_OPT_CPU_KERNELS:
        o->cpu_kernels_auto = strcmp(arg, "auto") == 0;
        if (strcmp(arg, "emulate") == 0 || o->cpu_kernels_auto) o->cpu_kernels = MPT_CPU_KERNELS_EMULATE;
        else if (strcmp(arg, "native") == 0) o->cpu_kernels = MPT_CPU_KERNELS_NATIVE;
        else return bad_value(f, "one of emulate, native, auto", arg);
        return MPT_OK;
    case MPT_OPT_SCALER:
        if (scaler_preset_parse(arg, &o->scaler) != 0)
            return bad_value(f, "one of mptrain, pytorch, apex, deepspeed, keras", arg);
        return MPT_OK;
    case MPT_OPT_GROWTH_FACTOR:
        return parse_double(f, arg, 1.0, 0, FLT_BIG, 0, "a number in [1, 3e38]", &o->growth_factor);
    case MPT_OPT_BACKOFF_FACTOR:
        return parse_positive_fp32(f, arg, 0.0, 1, 1.0, "a number in (0, 1]", &o->backoff_factor);
    case MPT_OPT_HYSTERESIS:
        return parse_int(f, arg, 1, 1000000000, "an integer in [1, 10^9]", &o->hysteresis);
    case MPT_OPT_SCALE_FLOOR:
        return parse_double(f, arg, FLT_MIN, 0, FLT_MAX, 0, "a number in [1.2e-38, 3.4e38]", &o->scale_floor);
    case MPT_OPT_SCALE_CEILING:
        return parse_double(f, arg, FLT_MIN, 0, FLT_MAX, 0, "a number in [1.2e-38, 3.4e38]", &o->scale_ceiling);
    case MPT_OPT_FP8_SCALING:
        if (mpt_fp8_scaling_parse(arg, &o->fp8.scaling) != 0) return bad_value(f, "one of delayed, current", arg);
        return MPT_OK;
    case MPT_OPT_AMAX_HISTORY: return parse_int(f, arg, 1, 65536, "an integer in [1, 65536]", &o->fp8.amax_history);
    case MPT_OPT_FP8_MARGIN: return parse_int(f, arg, 0, 32, "an integer in [0, 32]", &o->fp8.margin);
    case MPT_OPT_FP8_POW2_SCALES:
        if (parse_on_off(arg, &o->fp8.pow2_scales) != 0) return bad_value(f, "on or off", arg);
        return MPT_OK;
    case MPT_OPT_MX_SCALE:
        if (mpt_mx_rounding_parse(arg, &o->fp8.mx_rounding) != 0) return bad_value(f, "one of floor, ceil, rceil", arg);
        return MPT_OK;
    case MPT_OPT_FP8_ACCUM:
        if (mpt_fp8_accum_parse(arg, &o->fp8.accum) != 0) return bad_value(f, "one of fp32, fast", arg);
        return MPT_OK;
    case MPT_OPT_FP8_PROMOTE: {
        int v;
        MPT_TRY(parse_int(f, arg, 0, 1 << 20, "0 or a multiple of 32 up to 2^20", &v));
        if (v % 32 != 0) return bad_value(f, "0 or a multiple of 32 up to 2^20 (whole blocks of 32 products)", arg);
        o->fp8.promote = v;
        return MPT_OK;
    }
    case MPT_OPT_FP8_SATURATE:
        if (parse_on_off(arg, &o->fp8.saturate) != 0) return bad_value(f, "on or off", arg);
        return MPT_OK;
    case MPT_OPT_ACCUM_MODEL:
        if (mpt_accum_model_parse(arg, &o->accum_model) != 0)
            return bad_value(f, "one of ieee, v100, a100, ada, h100, b200", arg);
        return MPT_OK;
    case MPT_OPT_NORM_STATS:
        if (mpt_norm_stats_parse(arg, &o->norm_stats) != 0) {
            char want[192];
            snprintf(want, sizeof want, "one of %s", mpt_norm_stats_names());
            return bad_value(f, want, arg);
        }
        return MPT_OK;
    case MPT_OPT_QAT:
        if (mpt_qat_parse(arg, &o->qat) != 0) return bad_value(f, "one of none, int8, int4", arg);
        return MPT_OK;
    case MPT_OPT_LR_SCHEDULE:
        if (mpt_lr_kind_parse(arg, &o->lr_schedule) != 0) return bad_value(f, "one of constant, step, cosine", arg);
        return MPT_OK;
    case MPT_OPT_WARMUP_STEPS:
        return parse_i64(f, arg, 0, INT64_C(1) << 40, "an integer >= 0", &o->warmup_steps);
    case MPT_OPT_MIN_LR: return parse_double(f, arg, 0.0, 0, FLT_BIG, 0, "a number >= 0", &o->min_lr);
    case MPT_OPT_STEP_SIZE: return parse_i64(f, arg, 1, INT64_C(1) << 40, "an integer >= 1", &o->step_size);
    case MPT_OPT_GAMMA: return parse_positive_fp32(f, arg, 0.0, 1, 1.0, "a number in (0, 1]", &o->gamma);
    case MPT_OPT_CLIP_NORM: return parse_positive_fp32(f, arg, 0.0, 0, FLT_BIG, "a number >= 0", &o->clip_norm);
    case MPT_OPT_LIMIT_TRAIN:
        return parse_i64(f, arg, 0, INT32_MAX, "an integer >= 0 (0 = all)", &o->limit_train);
    case MPT_OPT_LIMIT_TEST:
        return parse_i64(f, arg, 0, INT32_MAX, "an integer >= 0 (0 = all)", &o->limit_test);
    case MPT_OPT_VAL_SPLIT: return parse_double(f, arg, 0.0, 0, 1.0, 1, "a number in [0, 1)", &o->val_split);
    case MPT_OPT_STANDARDIZE: o->standardize = 1; return MPT_OK;
    case MPT_OPT_INJECT_NONFINITE:
        return parse_i64(f, arg, -1, INT64_C(1) << 40, "an iteration number >= 0 (or -1 = off)", &o->inject_nonfinite);
    case MPT_OPT_DEVICE:
        if (strcmp(arg, "auto") == 0) o->device = MPT_DEVICE_CHOICE_AUTO;
        else if (strcmp(arg, "cpu") == 0) o->device = MPT_DEVICE_CHOICE_CPU;
        else if (strcmp(arg, "cuda") == 0) o->device = MPT_DEVICE_CHOICE_CUDA;
        else return bad_value(f, "one of auto, cpu, cuda", arg);
        return MPT_OK;
    case MPT_OPT_DATA: return copy_path(f, arg, o->data, sizeof o->data);
    case MPT_OPT_CLASSES: return parse_int(f, arg, 2, MPT_MNIST_MAX_CLASSES, "an integer in [2, 256]", &o->classes);
    case MPT_OPT_DATA_LAYOUT:
        if (mpt_idx_layout_parse(arg, &o->data_layout) != 0) return bad_value(f, "one of nchw, nhwc", arg);
        return MPT_OK;
    case MPT_OPT_OUT: return copy_path(f, arg, o->out, sizeof o->out);
    case MPT_OPT_RESUME: return copy_path(f, arg, o->resume, sizeof o->resume);
    case MPT_OPT_CHECKPOINT: return copy_path(f, arg, o->checkpoint, sizeof o->checkpoint);
    case MPT_OPT_QUANTIZE: {
        mpt_qformat q;
        if (mpt_qformat_parse(arg, &q) != 0) return bad_value(f, "one of int8, int4, fp8-e4m3, bf16", arg);
        o->quantize = (int)q;
        return MPT_OK;
    }
    case MPT_OPT_GRANULARITY:
        if (strcmp(arg, "channel") == 0) o->per_channel = 1;
        else if (strcmp(arg, "tensor") == 0) o->per_channel = 0;
        else return bad_value(f, "one of channel, tensor", arg);
        return MPT_OK;
    case MPT_OPT_ACTIVATIONS:
        if (strcmp(arg, "none") == 0) o->act_int8 = 0;
        else if (strcmp(arg, "int8") == 0) o->act_int8 = 1;
        else return bad_value(f, "one of none, int8", arg);
        return MPT_OK;
    case MPT_OPT_CALIBRATE: return parse_int(f, arg, 1, 10000, "an integer in [1, 10000]", &o->calibrate);
    case MPT_OPT_THREADS: return parse_int(f, arg, 1, 256, "an integer in [1, 256]", &o->threads);
    case MPT_OPT_LOG_EVERY:
        return parse_i64(f, arg, 1, INT64_C(1) << 40, "an integer >= 1", &o->log_every);
    case MPT_OPT_SAVE_EVERY:
        return parse_i64(f, arg, 0, INT64_C(1) << 40, "an integer >= 0 (0 = at the end only)", &o->save_every);
    case MPT_OPT_MAX_STEPS:
        return parse_i64(f, arg, 0, INT64_C(1) << 40, "an integer >= 0 (0 = no limit)", &o->max_steps);
    case MPT_OPT_CUDA_GRAPH:
        if (strcmp(arg, "on") == 0) o->cuda_graph = 1;
        else if (strcmp(arg, "off") == 0) o->cuda_graph = 0;
        else return bad_value(f, "one of on, off", arg);
        return MPT_OK;
    case MPT_OPT_PROGRESS:
        if (strcmp(arg, "auto") == 0) o->progress = MPT_PROGRESS_AUTO;
        else if (strcmp(arg, "on") == 0) o->progress = MPT_PROGRESS_ON;
        else if (strcmp(arg, "off") == 0) o->progress = MPT_PROGRESS_OFF;
        else return bad_value(f, "one of auto, on, off", arg);
        return MPT_OK;
    case MPT_OPT_TELEMETRY:
        return parse_i64(f, arg, 0, INT64_C(1) << 40, "an integer >= 0 (0 = off)", &o->telemetry);
    case MPT_OPT_SHADOW: o->shadow = 1; return MPT_OK;
    case MPT_OPT_DATA_PARALLEL: o->data_parallel = 1; return MPT_OK;
    case MPT_OPT_GRAD_COMM:
        if (mpt_grad_comm_parse(arg, &o->grad_comm) != 0) return bad_value(f, "one of fp32, bf16, fp16", arg);
        return MPT_OK;
    case MPT_OPT_COMM_TIMEOUT:
        return parse_double(f, arg, 0.0, 1, 1e6, 0, "a number of seconds in (0, 1e6]", &o->comm_timeout);
    case MPT_OPT_PRINT_RECIPE: o->print_recipe = 1; return MPT_OK;
    case MPT_OPT_UNTIMED_WARMUP:
        return parse_i64(f, arg, 0, 1000, "an integer in [0, 1000]", &o->untimed_warmup);
    case MPT_OPT_HELP:
    case MPT_OPT_END: break;
    }
    return mpt_errorf(MPT_ERR_ARG, "option %d is not settable", (int)id);
}

/* The shortest of %.15g, %.16g, %.17g that reads back as exactly v ("0.9", not "0.90000000000000002"). */
static void fmt_double(char *buf, size_t len, double v) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

const char *mpt_cli_format(const mpt_cli_opts *o, mpt_opt_id id, char *buf, size_t len) {
    switch (id) {
    case MPT_OPT_MODEL: snprintf(buf, len, "%s", o->model); break;
    case MPT_OPT_PRECISION: snprintf(buf, len, "%s", mpt_precision_name(o->precision)); break;
    case MPT_OPT_OPTIMIZER: snprintf(buf, len, "%s", mpt_optim_kind_name(o->optimizer)); break;
    case MPT_OPT_LR: fmt_double(buf, len, o->lr); break;
    case MPT_OPT_MOMENTUM: fmt_double(buf, len, o->momentum); break;
    case MPT_OPT_NESTEROV: snprintf(buf, len, "%s", o->nesterov ? "on" : "off"); break;
    case MPT_OPT_WEIGHT_DECAY: fmt_double(buf, len, o->weight_decay); break;
    case MPT_OPT_BETA1: fmt_double(buf, len, o->beta1); break;
    case MPT_OPT_BETA2: fmt_double(buf, len, o->beta2); break;
    case MPT_OPT_EPS: fmt_double(buf, len, o->eps); break;
    case MPT_OPT_BATCH_SIZE: snprintf(buf, len, "%d", o->batch); break;
    case MPT_OPT_SEED: snprintf(buf, len, "%" PRIu64, o->seed); break;
    case MPT_OPT_LOSS_SCALE:
        if (o->loss_scaling == MPT_LOSS_SCALE_NONE) snprintf(buf, len, "none");
        else {
            char v[40];
            fmt_double(v, sizeof v, o->loss_scale_value);
            snprintf(buf, len, "%s:%s", o->loss_scaling == MPT_LOSS_SCALE_DYNAMIC ? "dynamic" : "static", v);
        }
        break;
    case MPT_OPT_GROWTH_INTERVAL: snprintf(buf, len, "%d", o->growth_interval); break;
    case MPT_OPT_LR_SCHEDULE: snprintf(buf, len, "%s", mpt_lr_kind_name(o->lr_schedule)); break;
    case MPT_OPT_WARMUP_STEPS: snprintf(buf, len, "%" PRId64, o->warmup_steps); break;
    case MPT_OPT_MIN_LR: fmt_double(buf, len, o->min_lr); break;
    case MPT_OPT_STEP_SIZE: snprintf(buf, len, "%" PRId64, o->step_size); break;
    case MPT_OPT_GAMMA: fmt_double(buf, len, o->gamma); break;
    case MPT_OPT_CLIP_NORM: fmt_double(buf, len, o->clip_norm); break;
    case MPT_OPT_LIMIT_TRAIN: snprintf(buf, len, "%" PRId64, o->limit_train); break;
    case MPT_OPT_VAL_SPLIT: fmt_double(buf, len, o->val_split); break;
    case MPT_OPT_STANDARDIZE: snprintf(buf, len, "%s", o->standardize ? "on" : "off"); break;
    case MPT_OPT_INJECT_NONFINITE: snprintf(buf, len, "%" PRId64, o->inject_nonfinite); break;
    case MPT_OPT_EPOCHS: snprintf(buf, len, "%d", o->epochs); break;
    case MPT_OPT_MASTER_WEIGHTS: snprintf(buf, len, "%s", mpt_master_mode_name(o->master_weights)); break;
    case MPT_OPT_UPDATE_ROUNDING: snprintf(buf, len, "%s", mpt_update_rounding_name(o->update_rounding)); break;
    case MPT_OPT_OPTIMIZER_STATE: snprintf(buf, len, "%s", state_dtype_name(o->optimizer_state)); break;
    case MPT_OPT_NONFINITE: snprintf(buf, len, "%s", mpt_nonfinite_mode_name(o->nonfinite)); break;
    case MPT_OPT_TF32_MATMUL: snprintf(buf, len, "%s", o->tf32_matmul ? "on" : "off"); break;
    case MPT_OPT_TF32_CONV: snprintf(buf, len, "%s", o->tf32_conv ? "on" : "off"); break;
    case MPT_OPT_CPU_KERNELS: /* auto until a run resolved it (tools/run.c), then the set it chose */
        snprintf(buf, len, "%s", o->cpu_kernels_auto ? "auto" : mpt_cpu_kernels_name(o->cpu_kernels));
        break;
    case MPT_OPT_SCALER: snprintf(buf, len, "%s", scaler_presets[o->scaler].name); break;
    case MPT_OPT_GROWTH_FACTOR: fmt_double(buf, len, o->growth_factor); break;
    case MPT_OPT_BACKOFF_FACTOR: fmt_double(buf, len, o->backoff_factor); break;
    case MPT_OPT_HYSTERESIS: snprintf(buf, len, "%d", o->hysteresis); break;
    case MPT_OPT_SCALE_FLOOR: fmt_double(buf, len, o->scale_floor); break;
    case MPT_OPT_SCALE_CEILING: fmt_double(buf, len, o->scale_ceiling); break;
    case MPT_OPT_FP8_SCALING: snprintf(buf, len, "%s", mpt_fp8_scaling_name(o->fp8.scaling)); break;
    case MPT_OPT_AMAX_HISTORY: snprintf(buf, len, "%d", (int)o->fp8.amax_history); break;
    case MPT_OPT_FP8_MARGIN: snprintf(buf, len, "%d", (int)o->fp8.margin); break;
    case MPT_OPT_FP8_POW2_SCALES: snprintf(buf, len, "%s", o->fp8.pow2_scales ? "on" : "off"); break;
    case MPT_OPT_MX_SCALE: snprintf(buf, len, "%s", mpt_mx_rounding_name(o->fp8.mx_rounding)); break;
    case MPT_OPT_FP8_ACCUM: snprintf(buf, len, "%s", mpt_fp8_accum_name(o->fp8.accum)); break;
    case MPT_OPT_FP8_PROMOTE: snprintf(buf, len, "%d", (int)o->fp8.promote); break;
    case MPT_OPT_FP8_SATURATE: snprintf(buf, len, "%s", o->fp8.saturate ? "on" : "off"); break;
    case MPT_OPT_ACCUM_MODEL: snprintf(buf, len, "%s", mpt_accum_model_name(o->accum_model)); break;
    case MPT_OPT_NORM_STATS: snprintf(buf, len, "%s", mpt_norm_stats_name(o->norm_stats)); break;
    case MPT_OPT_QAT: snprintf(buf, len, "%s", mpt_qat_name(o->qat)); break;
    default: snprintf(buf, len, "?"); break;
    }
    return buf;
}

void mpt_cli_resolve(mpt_cli_opts *o) {
    const scaler_preset *sp = &scaler_presets[o->scaler];
    if (!mpt_cli_given(o, MPT_OPT_GROWTH_FACTOR)) o->growth_factor = sp->growth_factor;
    if (!mpt_cli_given(o, MPT_OPT_BACKOFF_FACTOR)) o->backoff_factor = sp->backoff_factor;
    if (!mpt_cli_given(o, MPT_OPT_GROWTH_INTERVAL)) o->growth_interval = sp->growth_interval;
    if (!mpt_cli_given(o, MPT_OPT_HYSTERESIS)) o->hysteresis = sp->hysteresis;
    if (!mpt_cli_given(o, MPT_OPT_SCALE_FLOOR)) o->scale_floor = sp->floor;
    if (!mpt_cli_given(o, MPT_OPT_SCALE_CEILING)) o->scale_ceiling = sp->ceiling;
    const mpt_mode_desc *mode = mpt_mode_info(o->precision);
    if (!mpt_cli_given(o, MPT_OPT_TF32_MATMUL)) o->tf32_matmul = mode->tf32_default;
    if (!mpt_cli_given(o, MPT_OPT_TF32_CONV)) o->tf32_conv = mode->tf32_default;
    if (!mpt_cli_given(o, MPT_OPT_WEIGHT_DECAY)) o->weight_decay = o->optimizer == MPT_OPTIM_ADAMW ? 0.01 : 0.0;
    if (!mpt_cli_given(o, MPT_OPT_LOSS_SCALE)) {
        if (mode->dynamic_loss_scale && o->nonfinite != MPT_NONFINITE_APPLY) {
            o->loss_scaling = MPT_LOSS_SCALE_DYNAMIC;
            o->loss_scale_value = sp->init_scale;
        } else {
            o->loss_scaling = MPT_LOSS_SCALE_NONE;
            o->loss_scale_value = 1.0;
        }
    }
}

mpt_train_config mpt_cli_train_config(const mpt_cli_opts *o, int64_t batches_per_epoch) {
    mpt_train_config c = mpt_train_config_default(o->precision);
    c.optim.kind = o->optimizer;
    c.optim.lr = (float)o->lr;
    c.optim.momentum = (float)o->momentum;
    c.optim.dampening = 0.0f;
    c.optim.weight_decay = (float)o->weight_decay;
    c.optim.nesterov = o->nesterov;
    c.optim.beta1 = (float)o->beta1;
    c.optim.beta2 = (float)o->beta2;
    c.optim.eps = (float)o->eps;
    c.schedule.kind = o->lr_schedule;
    c.schedule.base_lr = (float)o->lr;
    c.schedule.min_lr = (float)o->min_lr;
    c.schedule.warmup_steps = o->warmup_steps;
    c.schedule.total_steps = (int64_t)o->epochs * batches_per_epoch;
    if (o->max_steps > 0 && o->max_steps < c.schedule.total_steps) c.schedule.total_steps = o->max_steps;
    c.schedule.step_size = o->step_size;
    c.schedule.gamma = (float)o->gamma;
    c.clip_norm = (float)o->clip_norm;
    c.loss_scaling = o->loss_scaling;
    c.init_scale = (float)o->loss_scale_value;
    c.scaler.growth_interval = o->growth_interval;
    c.scaler.growth_factor = (float)o->growth_factor;
    c.scaler.backoff_factor = (float)o->backoff_factor;
    c.scaler.hysteresis = o->hysteresis;
    c.scaler.min_scale = (float)o->scale_floor;
    c.scaler.max_scale = (float)o->scale_ceiling;
    c.master_weights = o->master_weights;
    c.update_rounding = o->update_rounding;
    c.optim_state_dtype = o->optimizer_state;
    c.nonfinite = o->nonfinite;
    c.seed = o->seed;
    c.inject_nonfinite_step = o->inject_nonfinite;
    c.step_graph = o->cuda_graph;
    c.qat = o->qat;
    return c;
}

/* --accum-model against the kernel set and the GEMMs the precision runs: a model replaces the emulate kernel set's
 * sums, so it excludes native; and it must have a row for every Tensor Core format the run's GEMMs take (the mode's
 * 16-bit math, or TF32 when a TF32 switch is on). */
/* How many layers of the run's model are of kind a or kind b; -1 when the model does not parse. */
static int model_layers(const mpt_cli_opts *o, mpt_layer_kind a, mpt_layer_kind b) {
    static mpt_model_plan plan; /* 64 layers: kept off the stack */
    if (mpt_model_parse(o->model, &plan) != MPT_OK) return -1;
    int n = 0;
    for (int i = 0; i < plan.n; i++) n += plan.layer[i].kind == a || plan.layer[i].kind == b;
    return n;
}

int mpt_cli_tf32_reaches(const mpt_cli_opts *o) {
    return o->tf32_matmul || (o->tf32_conv && model_layers(o, MPT_LAYER_CONV, MPT_LAYER_CONV) != 0);
}

static mpt_status check_accum_model(const mpt_cli_opts *o) {
    const mpt_accum_model m = o->accum_model;
    if (m == MPT_ACCUM_MODEL_IEEE) return MPT_OK;
    if (o->cpu_kernels == MPT_CPU_KERNELS_NATIVE)
        return mpt_errorf(MPT_ERR_ARG, "--accum-model %s models Tensor Cores in the emulate kernel set, --cpu-kernels "
                          "native sums bf16 on the CPU's BF16 units: give one of them", mpt_accum_model_name(m));
    const mpt_mode_desc *mode = mpt_mode_info(o->precision);
    mpt_math maths[2] = {mode->lowp_math,
                         mode->fp32_operands && mpt_cli_tf32_reaches(o) ? MPT_MATH_TF32 : MPT_MATH_FP32};
    for (int i = 0; i < 2; i++)
        if (!mpt_accum_model_covers(m, maths[i]))
            return mpt_errorf(MPT_ERR_ARG, "--accum-model %s: the %s Tensor Cores it models take no %s operands, which "
                              "--precision %s gives its GEMMs%s", mpt_accum_model_name(m), mpt_accum_model_gpus(m),
                              mpt_math_name(maths[i]), mode->name,
                              i == 1 && mode->lowp_math == MPT_MATH_FP32 ? " (--tf32-matmul / --tf32-conv)" : "");
    return MPT_OK;
}

mpt_status mpt_cli_check_switches(const mpt_cli_opts *o) {
    if (o->update_rounding == MPT_ROUNDING_STOCHASTIC && o->master_weights != MPT_MASTER_NONE)
        return mpt_errorf(MPT_ERR_ARG, "--update-rounding stochastic needs --master-weights none (with FP32 "
                                       "masters the update is never rounded to 16 bits)");
    if (o->nonfinite == MPT_NONFINITE_APPLY && o->loss_scaling == MPT_LOSS_SCALE_DYNAMIC)
        return mpt_errorf(MPT_ERR_ARG, "--nonfinite apply conflicts with --loss-scale dynamic (the dynamic scaler "
                                       "must skip an overflowing step to back off): add --loss-scale none or "
                                       "static:S");
    if (o->scale_ceiling < o->scale_floor)
        return mpt_errorf(MPT_ERR_ARG, "--scale-ceiling %g is below --scale-floor %g", o->scale_ceiling,
                          o->scale_floor);
    if (o->loss_scaling == MPT_LOSS_SCALE_DYNAMIC &&
        (o->loss_scale_value > o->scale_ceiling || o->loss_scale_value < o->scale_floor))
        /* the scaler does not clamp its start (engine/amp/scaler.h): the scale would begin outside the bounds the
         * help promises it never leaves */
        return mpt_errorf(MPT_ERR_ARG, "the dynamic loss scale would start at %g, outside [--scale-floor %g, "
                          "--scale-ceiling %g]: give a start inside them (--loss-scale dynamic:S) or widen them",
                          o->loss_scale_value, o->scale_floor, o->scale_ceiling);
    const mpt_fp8_kind fp8 = mpt_mode_info(o->precision)->fp8;
    if (fp8 != MPT_FP8_KIND_NONE) MPT_TRY(mpt_fp8_recipe_check(&o->fp8, fp8 == MPT_FP8_KIND_MX));
    if (o->qat != MPT_QAT_NONE && fp8 != MPT_FP8_KIND_NONE)
        return mpt_errorf(MPT_ERR_ARG, "--qat %s conflicts with --precision %s: its FP8 GEMMs quantize the weights "
                                       "themselves (use fp32, tf32, bf16 or fp16)", mpt_qat_name(o->qat),
                          mpt_precision_name(o->precision));
    if (o->qat != MPT_QAT_NONE && o->master_weights != MPT_MASTER_FP32)
        return mpt_errorf(MPT_ERR_ARG, "--qat %s needs --master-weights fp32: the FP32 masters keep what the "
                                       "quantized weights cannot hold", mpt_qat_name(o->qat));
    if (o->fp8.promote != 0 && o->fp8.accum != MPT_FP8_ACCUM_FAST)
        return mpt_errorf(MPT_ERR_ARG, "--fp8-promote %d needs --fp8-accum fast (promotion is part of the fast "
                                       "accumulator; fp32 accumulates in FP32 throughout)", (int)o->fp8.promote);
    return check_accum_model(o);
}

/* The FP8 recipe flags given on the command line, as one phrase ("--fp8-accum, --mx-scale"), or "" when none. */
/* Which of ids[0..n) the user gave, as "--a, --b" in buf (len bytes; "" when none). */
static void flags_given(const mpt_cli_opts *o, const mpt_opt_id *ids, size_t n, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        if (mpt_cli_given(o, ids[i]) && k + 32 < len)
            k += (size_t)snprintf(buf + k, len - k, "%s--%s", k ? ", " : "", mpt_cli_opt_name(ids[i]));
}

static void fp8_flags_given(const mpt_cli_opts *o, char *buf, size_t len) {
    static const mpt_opt_id ids[] = {MPT_OPT_FP8_SCALING, MPT_OPT_AMAX_HISTORY, MPT_OPT_FP8_MARGIN,
                                     MPT_OPT_FP8_POW2_SCALES, MPT_OPT_MX_SCALE, MPT_OPT_FP8_ACCUM,
                                     MPT_OPT_FP8_PROMOTE, MPT_OPT_FP8_SATURATE};
    flags_given(o, ids, sizeof ids / sizeof ids[0], buf, len);
}

/* Flags that only one optimizer, schedule or loss scaling reads, given where another one runs: a note each, so a
 * run that silently ignored them does not pass for a run that used them. */
static void unused_flag_notes(const mpt_cli_opts *o, const char *label, FILE *f) {
    char given[256];
    static const mpt_opt_id sgd_only[] = {MPT_OPT_MOMENTUM, MPT_OPT_NESTEROV};
    static const mpt_opt_id adam_only[] = {MPT_OPT_BETA1, MPT_OPT_BETA2, MPT_OPT_EPS};
    static const mpt_opt_id cosine_only[] = {MPT_OPT_WARMUP_STEPS, MPT_OPT_MIN_LR};
    static const mpt_opt_id step_only[] = {MPT_OPT_STEP_SIZE, MPT_OPT_GAMMA};
    static const mpt_opt_id dynamic_only[] = {MPT_OPT_SCALER,      MPT_OPT_GROWTH_FACTOR, MPT_OPT_BACKOFF_FACTOR,
                                              MPT_OPT_GROWTH_INTERVAL, MPT_OPT_HYSTERESIS, MPT_OPT_SCALE_FLOOR,
                                              MPT_OPT_SCALE_CEILING};
    const char *optim = mpt_cli_format(o, MPT_OPT_OPTIMIZER, (char[32]){0}, 32);
    flags_given(o, sgd_only, 2, given, sizeof given);
    if (given[0] && o->optimizer != MPT_OPTIM_SGD)
        fprintf(f, "%snote: %s change%s nothing with --optimizer %s: SGD's momentum (Adam's moments are --beta1 and "
                   "--beta2)\n", label, given, strchr(given, ',') ? "" : "s", optim);
    flags_given(o, adam_only, 3, given, sizeof given);
    if (given[0] && o->optimizer == MPT_OPTIM_SGD)
        fprintf(f, "%snote: %s change%s nothing with --optimizer sgd: Adam's and AdamW's settings\n", label, given,
                strchr(given, ',') ? "" : "s");
    flags_given(o, cosine_only, 2, given, sizeof given);
    if (given[0] && o->lr_schedule != MPT_LR_COSINE)
        fprintf(f, "%snote: %s change%s nothing without --lr-schedule cosine\n", label, given,
                strchr(given, ',') ? "" : "s");
    flags_given(o, step_only, 2, given, sizeof given);
    if (given[0] && o->lr_schedule != MPT_LR_STEP)
        fprintf(f, "%snote: %s change%s nothing without --lr-schedule step\n", label, given,
                strchr(given, ',') ? "" : "s");
    flags_given(o, dynamic_only, sizeof dynamic_only / sizeof dynamic_only[0], given, sizeof given);
    if (given[0] && o->loss_scaling != MPT_LOSS_SCALE_DYNAMIC)
        fprintf(f, "%snote: %s change%s nothing in %s: dynamic loss scaling's settings, and this run's loss scale is "
                   "%s\n", label,
                given, strchr(given, ',') ? "" : "s", mpt_mode_info(o->precision)->name,
                o->loss_scaling == MPT_LOSS_SCALE_STATIC ? "static (--loss-scale static:S)" : "off (no loss scaling)");
}

/* What --accum-model does in this precision, when it is not ieee: nothing in a mode without Tensor Core GEMMs (fp32,
 * or TF32 disabled), and not the FP8 GEMMs of the FP8 modes (--fp8-accum decides theirs). */
static void accum_model_notes(const mpt_cli_opts *o, int tf32_override, const char *label, FILE *f) {
    const mpt_accum_model m = o->accum_model;
    if (m == MPT_ACCUM_MODEL_IEEE) return;
    const mpt_mode_desc *mode = mpt_mode_info(o->precision);
    const char *name = mpt_accum_model_name(m), *p = mode->name;
    if (mode->fp32_operands && (!mpt_cli_tf32_reaches(o) || tf32_override))
        fprintf(f, "%snote: --accum-model %s changes nothing in %s: its GEMMs and convolutions compute in FP32, which "
                   "Tensor Cores do not%s\n", label, name, p,
                tf32_override ? " (NVIDIA_TF32_OVERRIDE=0)" : " (--tf32-matmul / --tf32-conv on would make them TF32)");
    if (mode->fp8 != MPT_FP8_KIND_NONE)
        fprintf(f, "%snote: --accum-model %s sums %s's BF16 GEMMs and convolutions as %s Tensor Cores do; its FP8 "
                   "GEMMs keep --fp8-accum %s%s\n", label, name, p, mpt_accum_model_gpus(m),
                mpt_fp8_accum_name(o->fp8.accum),
                o->fp8.accum == MPT_FP8_ACCUM_FAST ? " (Hopper's FP8 accumulator)"
                : mode->fp8 == MPT_FP8_KIND_MX     ? " (FP32 sums of the exact products)"
                                                   : " (FP32 sums of the exact products; cuBLASLt's default on an H200 "
                                                     "measured as --fp8-accum fast --fp8-promote 128)");
}

/* What --norm-stats does, when it is not fp32: nothing in a network without batchnorm or layernorm. */
static void norm_stats_notes(const mpt_cli_opts *o, const char *label, FILE *f) {
    if (o->norm_stats == MPT_NORM_STATS_FP32) return;
    int norms = model_layers(o, MPT_LAYER_BATCHNORM, MPT_LAYER_LAYERNORM);
    if (norms < 0) norms = 0;
    const mpt_norm_stats_desc *d = mpt_norm_stats_info(o->norm_stats);
    if (!norms)
        fprintf(f, "%snote: --norm-stats %s changes nothing: the model has no batchnorm or layernorm\n", label,
                d->name);
    else
        fprintf(f, "%s--norm-stats %s: the forward statistics of the model's %d normalisation layer%s in %s (an "
                   "ablation; the policy computes them in FP32 with two passes); normalisation, running statistics "
                   "and backward in FP32\n", label, d->name, norms, norms == 1 ? "" : "s", d->summary);
}

void mpt_cli_switch_notes(const mpt_cli_opts *o, int tf32_override, const char *label, FILE *f) {
    const mpt_mode_desc *mode = mpt_mode_info(o->precision);
    const int fp8 = mode->fp8 != MPT_FP8_KIND_NONE, mx = mode->fp8 == MPT_FP8_KIND_MX;
    const int lowp = mode->act_dtype != MPT_DTYPE_F32; /* 16-bit working weights and activations */
    const char *p = mode->name;
    char given[256];
    fp8_flags_given(o, given, sizeof given);
    if (given[0] && !fp8)
        fprintf(f, "%snote: %s change%s nothing in %s: they set up the FP8 GEMMs of --precision fp8, fp8-e4m3 and "
                   "mxfp8\n",
                label, given, strchr(given, ',') ? "" : "s", p);
    if (mx &&
        (mpt_cli_given(o, MPT_OPT_FP8_SCALING) || mpt_cli_given(o, MPT_OPT_AMAX_HISTORY) ||
         mpt_cli_given(o, MPT_OPT_FP8_MARGIN) || mpt_cli_given(o, MPT_OPT_FP8_POW2_SCALES)))
        fprintf(f, "%snote: --fp8-scaling, --amax-history, --fp8-margin and --fp8-pow2-scales change nothing in mxfp8: "
                   "its scales are per block of 32 (--mx-scale)\n",
                label);
    if (fp8 && !mx && mpt_cli_given(o, MPT_OPT_MX_SCALE))
        fprintf(f, "%snote: --mx-scale changes nothing in %s: it scales per tensor\n", label, p);
    if (fp8 && !mx && o->fp8.scaling == MPT_FP8_SCALING_CURRENT && mpt_cli_given(o, MPT_OPT_AMAX_HISTORY))
        fprintf(f, "%snote: --amax-history changes no scale with --fp8-scaling current (the history is still "
                   "recorded)\n",
                label);
    if (o->master_weights == MPT_MASTER_NONE && !lowp)
        fprintf(f, "%snote: --master-weights none changes nothing in %s: the weights are FP32 and are their own "
                   "master\n", label, p);
    if (o->master_weights == MPT_MASTER_NONE && lowp)
        fprintf(f, "%s--master-weights none: no FP32 masters; each update is computed in FP32 and rounded %s into the "
                   "%s weights (updates below half an ulp of a weight %s)\n",
                label, o->update_rounding == MPT_ROUNDING_STOCHASTIC ? "stochastically" : "to nearest", p,
                o->update_rounding == MPT_ROUNDING_STOCHASTIC ? "survive in expectation" : "are lost");
    if (o->update_rounding == MPT_ROUNDING_STOCHASTIC && !lowp)
        fprintf(f, "%snote: --update-rounding stochastic changes nothing in %s: the weights are FP32\n", label, p);
    if (o->optimizer_state != MPT_DTYPE_F32 && o->optimizer == MPT_OPTIM_SGD && o->momentum == 0.0)
        fprintf(f, "%snote: --optimizer-state %s changes nothing with --optimizer sgd and --momentum 0: plain SGD "
                   "keeps no optimizer state\n", label, state_dtype_name(o->optimizer_state));
    else if (o->optimizer_state != MPT_DTYPE_F32)
        fprintf(f, "%s--optimizer-state %s: optimizer state stored in %s (widened, updated in FP32, rounded to "
                   "nearest on store)\n",
                label, state_dtype_name(o->optimizer_state), state_dtype_name(o->optimizer_state));
    if (o->nonfinite == MPT_NONFINITE_APPLY)
        fprintf(f, "%swarning: --nonfinite apply: steps with inf/NaN gradients are applied, not skipped (plain "
                   "PyTorch without GradScaler); one such step can poison the weights for good\n",
                label);
    int given_tf32 = mpt_cli_given(o, MPT_OPT_TF32_MATMUL) || mpt_cli_given(o, MPT_OPT_TF32_CONV);
    if (given_tf32 && lowp)
        fprintf(f, "%snote: --tf32-matmul/--tf32-conv change nothing in %s: GEMM and conv operands are %s, not "
                   "FP32\n",
                label, p, p);
    /* a note, not an error: PyTorch users set both switches whatever the network, as torch.backends does */
    if (!lowp && mpt_cli_given(o, MPT_OPT_TF32_CONV) && model_layers(o, MPT_LAYER_CONV, MPT_LAYER_CONV) == 0)
        fprintf(f, "%snote: --tf32-conv changes nothing: the model has no convolutions (--tf32-matmul sets its "
                   "GEMMs)\n", label);
    if (o->cpu_kernels == MPT_CPU_KERNELS_NATIVE && mode->lowp_math != MPT_MATH_BF16 && !label[0])
        fprintf(f, "%snote: --cpu-kernels native changes nothing in %s: the CPU has native units for bf16 only, so %s "
                   "stays emulated\n", label, p, p);
    if (o->cpu_kernels == MPT_CPU_KERNELS_NATIVE && mode->lowp_math == MPT_MATH_BF16 && fp8 && !label[0])
        fprintf(f, "%snote: --cpu-kernels native runs %s's BF16 GEMMs and convolutions on the CPU's BF16 units; its FP8 "
                   "GEMMs stay emulated\n", label, p);
    accum_model_notes(o, tf32_override, label, f);
    norm_stats_notes(o, label, f);
    unused_flag_notes(o, label, f);
    if (o->qat != MPT_QAT_NONE) {
        const mpt_qformat_desc *q = mpt_qformat_info(mpt_qat_format(o->qat));
        fprintf(f, "%s--qat %s: the forward pass reads the linear and conv weights fake-quantized to %s per output "
                   "channel (s = amax / %d of each row of the FP32 master, rewritten after every step); their "
                   "gradients reach the masters unchanged (straight-through estimator)%s\n",
                label, mpt_qat_name(o->qat), q->name, q->qmax,
                lowp ? "; the grid values are rounded once more into the 16-bit working copies" : "");
    }
    if (tf32_override && !lowp && (o->tf32_matmul || o->tf32_conv))
        fprintf(f, "%sNVIDIA_TF32_OVERRIDE=0 is set: it wins over --tf32-matmul %s / --tf32-conv %s; every GEMM and "
                   "conv computes in full FP32\n",
                label, o->tf32_matmul ? "on" : "off", o->tf32_conv ? "on" : "off");
}

/* ---- help ------------------------------------------------------------------------------------------------ */

static const char *cmd_name(mpt_cmd_mask cmd) {
    switch (cmd) {
    case MPT_CMD_TRAIN: return "train";
    case MPT_CMD_COMPARE: return "compare";
    case MPT_CMD_EVAL: return "eval";
    case MPT_CMD_INFO: return "info";
    case MPT_CMD_SPEEDRUN: return "speedrun";
    }
    return "?";
}

void mpt_cli_print_help(FILE *f, mpt_cmd_mask cmd) {
    switch (cmd) {
    case MPT_CMD_TRAIN:
        fprintf(f, "Usage: mptrain train [options]\n"
                   "Trains a model on an MNIST-style dataset in one precision and writes metrics.csv, epochs.csv,\n"
                   "summary.json and checkpoint.safetensors into --out.\n"
                   "Epoch times (training steps, evaluation excluded) are host-clock seconds (epochs.csv train_s,\n"
                   "summary.json epoch_times_s); with --device cuda each epoch is also timed by CUDA events on the\n"
                   "GPU (summary.json epoch_gpu_times_s, null on the CPU; docs/outputs.md, \"Which clock\").\n");
        break;
    case MPT_CMD_COMPARE:
        fprintf(f, "Usage: mptrain compare [options]\n"
                   "Trains the same model in each precision from the same seed (same initial weights, same data\n"
                   "order), each into --out/<precision>/, then writes --out/report.md, --out/compare.json and\n"
                   "--out/convergence.png.\n"
                   "With --seeds, every precision is trained with every seed (a paired design: a seed gives every\n"
                   "precision the same start and batch order) into --out/seed-<S>/<precision>/; the report gives the\n"
                   "mean and sd over seeds, and against fp32 the mean paired difference of test accuracy with a 95%%\n"
                   "confidence interval (Student t) and a verdict against --margin: equivalent, better, worse, or\n"
                   "inconclusive with the number of seeds the observed spread suggests.\n");
        break;
    case MPT_CMD_EVAL:
        fprintf(f, "Usage: mptrain eval --checkpoint CKPT [options]\n"
                   "Rebuilds the model recorded in a checkpoint, loads its weights and prints the test loss and\n"
                   "accuracy. With --quantize, post-training quantization (docs/numerics.md, \"Integer formats\"): the\n"
                   "weights of every linear and conv layer become W' = clamp(round_half_even(W / s)) * s (INT8, INT4) or\n"
                   "E4M3(W / s) * s, s = amax / qmax from the FP32 masters per output channel or per tensor; with\n"
                   "--activations int8 every layer's input becomes INT8 too (one scale per tensor, amax / 127, amax the\n"
                   "largest |input| over --calibrate training batches, in file order) and its GEMM or convolution sums the\n"
                   "integer products exactly in int32 (an FP32 sum would round past 2^24), rescaled once. Reports the\n"
                   "accuracy unquantized and quantized on the same test images, the weights' memory, and per layer the\n"
                   "weights' relative L2 error and the layer output's against the unquantized model.\n");
        break;
    case MPT_CMD_SPEEDRUN:
        fprintf(f, "Usage: mptrain speedrun [options]\n"
                   "Trains the speedrun's fixed recipe (printed below: network, optimizer, schedule, batch size,\n"
                   "epochs) on Fashion-MNIST with every seed in every precision, evaluates each run on the 10000\n"
                   "test images after its epoch (the recipe has one), and reports per precision: the mean test\n"
                   "accuracy with its 95%% confidence interval (Student t over the seeds), the share of seeds at or\n"
                   "above the 90.0%% target, and the time to result: from the start of training (data already on the\n"
                   "device, graph built, after an untimed warm-up of --untimed-warmup steps on a throw-away copy of\n"
                   "the network) to the final evaluation's accuracy on the host, by the host clock and in CPU time;\n"
                   "beside it where the rest went (process start, data read and upload, graph build, the epoch, the\n"
                   "evaluation, the outputs) and the whole process's time. Runs go to --out/seed-<S>/<precision>/\n"
                   "(the files of mptrain train), the report to --out/report.md and --out/speedrun.json\n"
                   "(docs/speedrun.md).\n"
                   "Defaults here: --seeds 10, --precisions fp32,tf32,fp16,bf16 (and fp8 on a GPU with FP8 Tensor\n"
                   "Cores), --cpu-kernels auto, --out runs/speedrun. The recipe's own options are not taken: vary it\n"
                   "with mptrain compare and the options --print-recipe prints.\n");
        break;
    case MPT_CMD_INFO:
        fprintf(f, "Usage: mptrain info\n"
                   "Prints each backend (cpu, cuda) as built / loadable / usable and why not, the library versions\n"
                   "(CUDA runtime, cuBLASLt, cuDNN, cuRAND when the CUDA module loads; OpenBLAS), which GPU is usable,\n"
                   "and the state of NVIDIA_TF32_OVERRIDE. The CUDA module is looked for at $MPT_CUDA_MODULE, next to\n"
                   "mptrain, in mptrain/ next to libmptrain.so, in ../<libdir>/mptrain from mptrain's directory (an\n"
                   "installation, wherever it was moved), in the build tree, then in <prefix>/<libdir>/mptrain.\n");
        break;
    }
    fprintf(f, "\nOptions:\n");
    for (int i = 0; i < N_OPTS; i++) {
        const opt_def *d = &opt_table[i];
        if (!(d->cmds & cmd)) continue;
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", d->name, d->metavar ? " " : "", d->metavar ? d->metavar : "");
        fprintf(f, "  %-25s %s\n", left, help_text(d, cmd));
    }
    const int lists = cmd == MPT_CMD_COMPARE || cmd == MPT_CMD_SPEEDRUN; /* --precisions */
    if (cmd == MPT_CMD_TRAIN || lists) {
        fprintf(f, "\nPrecision modes (--precision%s):\n",
                cmd == MPT_CMD_COMPARE ? "s; * = compare's default list" : lists ? "s; * = the default list" : "");
        for (int i = 0; i < MPT_PRECISION_COUNT; i++) {
            const mpt_mode_desc *m = mpt_mode_info((mpt_precision)i);
            fprintf(f, "  %-9s%s %s\n", m->name, lists && m->compare_default ? "*" : " ", m->summary);
        }
    }
    if (cmd == MPT_CMD_TRAIN || cmd == MPT_CMD_COMPARE) {
        fprintf(f, "\nLoss-scaler presets (--scaler; --growth-factor, --backoff-factor, --growth-interval, "
                   "--hysteresis,\n--scale-floor, --scale-ceiling override single values; fp16's default "
                   "--loss-scale uses the preset's\ninitial scale):\n");
        for (int i = 0; i < MPT_SCALER_PRESET_COUNT; i++) {
            const scaler_preset *sp = &scaler_presets[i];
            fprintf(f, "  %-10s init %g, growth x%g every %d clean steps, backoff x%g, hysteresis %d, floor %.9g, "
                       "ceiling %.9g\n             source: %s\n",
                    sp->name, sp->init_scale, sp->growth_factor, sp->growth_interval, sp->backoff_factor,
                    sp->hysteresis, sp->floor, sp->ceiling, sp->source);
        }
        fprintf(f,
                "\nFP8 modes (docs/numerics.md, \"FP8\"): activations, weights and every tensor outside an FP8 GEMM are\n"
                "BF16 with FP32 masters, as under TransformerEngine; a linear layer whose batch, input and output sizes\n"
                "are all multiples of 16 runs its three GEMMs with FP8 operands (the precision map says which):\n"
                "  fp8       E4M3 forward operands (x, W), E5M2 gradient (dy) in dgrad and wgrad; one scale per tensor,\n"
                "            s = 448 or 57344 / amax / 2^margin (TE's HYBRID recipe, DelayedScaling by default)\n"
                "  fp8-e4m3  E4M3 for the gradient too: what E5M2 is for\n"
                "  mxfp8     E4M3 with an E8M0 power-of-two scale per 32 elements along K (OCP MX v1.0)\n"
                "Convolutions and the other linear layers run in BF16. A non-finite amax skips the step. The CPU computes\n"
                "FP8 x FP8 products exactly and sums them in FP32, or with --fp8-accum fast in a model of Hopper's FP8\n"
                "Tensor Core accumulator (kernels/cpu/gemm.c).\n");
    }
}

static int failed_nomem;

int mpt_cli_failed_nomem(void) { return failed_nomem; }

int mpt_cli_fail(const char *command, mpt_status s) {
    fprintf(stderr, "mptrain %s: %s\n", command, mpt_last_error());
    if (s == MPT_ERR_NOMEM) failed_nomem = 1;
    if (s == MPT_ERR_INTERRUPTED) return 128 + (mpt_guard_stop_signal() ? mpt_guard_stop_signal() : 2);
    return s == MPT_ERR_ARG ? MPT_CLI_EXIT_USAGE : MPT_CLI_EXIT_FAIL;
}

/* ---- parsing --------------------------------------------------------------------------------------------- */

/* The keys of the --quantize formats with a scale (need_int 0) or with integer codes (need_int 1), '|'-separated. */
static const char *qformat_keys(char *buf, size_t n, int need_int) {
    buf[0] = '\0';
    for (int i = 0, k = 0; i < MPT_QFORMAT_COUNT && (size_t)k < n; i++) {
        const mpt_qformat_desc *q = mpt_qformat_info((mpt_qformat)i);
        if (need_int ? q->is_int : q->scaled) k += snprintf(buf + k, n - (size_t)k, "%s%s", k ? "|" : "", q->key);
    }
    return buf;
}

int mpt_cli_parse(int argc, char **argv, mpt_cmd_mask cmd, mpt_cli_opts *o) {
    struct option longopts[N_OPTS + 1];
    int n = 0;
    for (int i = 0; i < N_OPTS; i++) {
        if (!(opt_table[i].cmds & cmd)) continue;
        longopts[n].name = opt_table[i].name;
        longopts[n].has_arg = opt_table[i].has_arg;
        longopts[n].flag = NULL;
        longopts[n].val = (int)opt_table[i].id;
        n++;
    }
    memset(&longopts[n], 0, sizeof longopts[n]);
    const char *name = cmd_name(cmd);

    opterr = 0;
    optind = 0; /* glibc: full re-initialisation */
    unsigned char here[MPT_OPT_COUNT] = {0}; /* given in this argv (o->given also holds speedrun's recipe) */
    int c;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (c == 'h' || c == MPT_OPT_HELP) {
            mpt_cli_print_help(stdout, cmd);
            return -1;
        }
        char esc[256]; /* argv text quoted in a message, control bytes escaped (engine/status.h) */
        if (c == '?') {
            const char *bad = mpt_cli_echo(esc, sizeof esc, argv[optind - 1]);
            if (optopt > 0 && optopt < MPT_OPT_FIRST)
                fprintf(stderr, "mptrain %s: unknown option '-%c' (see mptrain %s --help)\n", name, optopt, name);
            else if (optopt >= MPT_OPT_FIRST && strchr(bad, '='))
                fprintf(stderr, "mptrain %s: option '--%s' takes no value, found '%s'\n", name,
                        mpt_cli_opt_name((mpt_opt_id)optopt), bad);
            else
                fprintf(stderr, "mptrain %s: unknown or ambiguous option '%s' (see mptrain %s --help)\n", name, bad,
                        name);
            return MPT_CLI_EXIT_USAGE;
        }
        if (c == ':') {
            const char *flag = optopt >= MPT_OPT_FIRST ? mpt_cli_opt_name((mpt_opt_id)optopt)
                                                       : mpt_cli_echo(esc, sizeof esc, argv[optind - 1]);
            fprintf(stderr, "mptrain %s: option '--%s' needs a value (see mptrain %s --help)\n", name, flag, name);
            return MPT_CLI_EXIT_USAGE;
        }
        mpt_opt_id id = (mpt_opt_id)c;
        const opt_def *d = opt_find(id);
        /* A value that looks like a flag is almost always a forgotten value: "--lr --epochs 3". */
        if (d && d->has_arg == required_argument && optarg && strncmp(optarg, "--", 2) == 0) {
            fprintf(stderr, "mptrain %s: option '--%s' needs a value, found the option '%s'\n", name, d->name,
                    mpt_cli_echo(esc, sizeof esc, optarg));
            return MPT_CLI_EXIT_USAGE;
        }
        mpt_status s = mpt_cli_apply(o, id, optarg);
        if (s != MPT_OK) {
            fprintf(stderr, "mptrain %s: %s\n", name, mpt_last_error());
            return MPT_CLI_EXIT_USAGE;
        }
        o->given[id - MPT_OPT_FIRST] = 1;
        here[id - MPT_OPT_FIRST] = 1;
    }
    if (optind < argc) {
        char esc[256];
        fprintf(stderr, "mptrain %s: unexpected argument '%s' (options start with --; see mptrain %s --help)\n", name,
                mpt_cli_echo(esc, sizeof esc, argv[optind]), name);
        return MPT_CLI_EXIT_USAGE;
    }
    if (o->print_recipe) { /* it prints the fixed recipe and exits: nothing else it was given can act */
        char others[512] = "";
        for (int i = 0, k = 0; i < MPT_OPT_COUNT && k + 32 < (int)sizeof others; i++)
            if (here[i] && i + MPT_OPT_FIRST != MPT_OPT_PRINT_RECIPE)
                k += snprintf(others + k, sizeof others - (size_t)k, "%s--%s", k ? ", " : "",
                              mpt_cli_opt_name((mpt_opt_id)(i + MPT_OPT_FIRST)));
        if (others[0]) {
            fprintf(stderr, "mptrain %s: --print-recipe prints the recipe and exits, so %s would change nothing: "
                            "expected --print-recipe alone (the recipe is the same whatever the runs' options)\n",
                    name, others);
            return MPT_CLI_EXIT_USAGE;
        }
    }
    if (cmd == MPT_CMD_COMPARE && !mpt_cli_given(o, MPT_OPT_TELEMETRY)) o->telemetry = 50;
    /* compare puts precisions side by side for speed too: each bf16 run on the CPU set that measured faster here */
    if ((cmd == MPT_CMD_COMPARE || cmd == MPT_CMD_SPEEDRUN) && !mpt_cli_given(o, MPT_OPT_CPU_KERNELS))
        o->cpu_kernels_auto = 1;
    if (o->shadow && o->telemetry == 0) {
        fprintf(stderr, "mptrain %s: --shadow runs on telemetry steps: give --telemetry N (N >= 1) as well\n", name);
        return MPT_CLI_EXIT_USAGE;
    }
    if (cmd == MPT_CMD_TRAIN && mpt_cli_given(o, MPT_OPT_COMM_TIMEOUT) && !o->data_parallel) {
        fprintf(stderr, "mptrain %s: --comm-timeout bounds the data-parallel collectives: give --data-parallel as well "
                        "(under mpirun -np N)\n", name);
        return MPT_CLI_EXIT_USAGE;
    }
    if (mpt_cli_given(o, MPT_OPT_GRAD_COMM) && !o->data_parallel) {
        fprintf(stderr, "mptrain %s: --grad-comm sets the data-parallel gradients' dtype: give --data-parallel as well "
                        "(under mpirun -np N)\n", name);
        return MPT_CLI_EXIT_USAGE;
    }
    if (o->data_parallel && o->shadow) {
        fprintf(stderr, "mptrain %s: --shadow is not available with --data-parallel (the FP32 twin would run on one "
                        "rank's shard while the gradients it is compared with are all-reduced over every rank); "
                        "--telemetry alone works and adds the communication error\n", name);
        return MPT_CLI_EXIT_USAGE;
    }
    if (mpt_cli_given(o, MPT_OPT_SEEDS) && mpt_cli_given(o, MPT_OPT_SEED)) {
        fprintf(stderr, "mptrain %s: give --seed or --seeds, not both (--seeds 1 runs seed 0; --seeds 5,7 runs seeds "
                        "5 and 7)\n", name);
        return MPT_CLI_EXIT_USAGE;
    }
    /* eval's quantization flags without --quantize, each with the formats that take it (engine/quant.h's rows) */
    static const struct { mpt_opt_id id; int need_int; } qflags[] = {
        {MPT_OPT_GRANULARITY, 0}, {MPT_OPT_ACTIVATIONS, 1}, {MPT_OPT_CALIBRATE, 1}};
    for (size_t f = 0; o->quantize < 0 && f < sizeof qflags / sizeof qflags[0]; f++)
        if (mpt_cli_given(o, qflags[f].id)) {
            char formats[96];
            fprintf(stderr, "mptrain %s: --%s sets up --quantize: give --quantize %s as well\n", name,
                    mpt_cli_opt_name(qflags[f].id), qformat_keys(formats, sizeof formats, qflags[f].need_int));
            return MPT_CLI_EXIT_USAGE;
        }
    if (mpt_cli_given(o, MPT_OPT_GRANULARITY) && o->quantize >= 0 &&
        !mpt_qformat_info((mpt_qformat)o->quantize)->scaled) { /* BF16: rounded to nearest, no scale to place */
        char scaled[96];
        fprintf(stderr, "mptrain %s: --granularity %s: expected --quantize %s (the formats with scales), found "
                        "--quantize %s, which rounds to nearest without a scale: drop --granularity\n", name,
                o->per_channel ? "channel" : "tensor", qformat_keys(scaled, sizeof scaled, 0),
                mpt_qformat_info((mpt_qformat)o->quantize)->key);
        return MPT_CLI_EXIT_USAGE;
    }
    if (o->act_int8 && o->quantize >= 0 && !mpt_qformat_info((mpt_qformat)o->quantize)->is_int) {
        fprintf(stderr, "mptrain %s: --activations int8 runs integer GEMMs and convolutions: it needs --quantize int8 or "
                        "int4, found --quantize %s\n", name, mpt_qformat_info((mpt_qformat)o->quantize)->key);
        return MPT_CLI_EXIT_USAGE;
    }
    if (mpt_cli_given(o, MPT_OPT_CALIBRATE) && !o->act_int8) {
        fprintf(stderr, "mptrain %s: --calibrate sets the INT8 activations' scales: give --activations int8 as well\n",
                name);
        return MPT_CLI_EXIT_USAGE;
    }
    if (mpt_cli_given(o, MPT_OPT_MARGIN) && o->n_seeds < 2) {
        fprintf(stderr, "mptrain %s: --margin needs --seeds with at least 2 seeds (a verdict needs a spread)\n", name);
        return MPT_CLI_EXIT_USAGE;
    }
    if (mpt_cli_check(o) != MPT_OK) {
        fprintf(stderr, "mptrain %s: %s\n", name, mpt_last_error());
        return MPT_CLI_EXIT_USAGE;
    }
    return 0;
}

mpt_status mpt_cli_check(const mpt_cli_opts *o) {
    if (o->nesterov && (o->optimizer != MPT_OPTIM_SGD || o->momentum == 0.0))
        return mpt_errorf(MPT_ERR_ARG, "--nesterov needs --optimizer sgd and --momentum > 0");
    char a[64], b[64];
    if (o->lr_schedule == MPT_LR_COSINE && (float)o->min_lr > (float)o->lr)
        return mpt_errorf(MPT_ERR_ARG, "--min-lr %s: expected at most --lr %s (the cosine schedule decays from --lr down to "
                          "--min-lr)", mpt_cli_format(o, MPT_OPT_MIN_LR, a, sizeof a),
                          mpt_cli_format(o, MPT_OPT_LR, b, sizeof b));
    return MPT_OK;
}

/* The steps this invocation runs (the schedule's length, as mpt_cli_train_config sets it: --epochs x batches per
 * epoch, or --max-steps when fewer), and why, as a phrase in why. */
static int64_t run_steps(const mpt_cli_opts *o, int64_t batches_per_epoch, char *why, size_t n) {
    const int64_t planned = (int64_t)o->epochs * batches_per_epoch;
    if (o->max_steps > 0 && o->max_steps < planned) {
        snprintf(why, n, "--max-steps %lld", (long long)o->max_steps);
        return o->max_steps;
    }
    snprintf(why, n, "--epochs %d x %lld batches per epoch", o->epochs, (long long)batches_per_epoch);
    return planned;
}

mpt_status mpt_cli_check_schedule(const mpt_cli_opts *o, int64_t batches_per_epoch) {
    char why[96];
    const int64_t total = run_steps(o, batches_per_epoch, why, sizeof why);
    if (o->lr_schedule == MPT_LR_COSINE && o->warmup_steps >= total)
        return mpt_errorf(MPT_ERR_ARG, "--warmup-steps %lld: expected fewer than the run's %lld steps (%s): the cosine "
                          "schedule warms up, then decays over the steps left", (long long)o->warmup_steps,
                          (long long)total, why);
    /* Past the epochs' last step the injection never happens. Past --max-steps alone it does, in a run resumed from
     * the checkpoint (mpt_cli_schedule_notes says so). Only when given on this command line: a resumed run's recorded
     * injection may lie behind it. */
    const int64_t planned = (int64_t)o->epochs * batches_per_epoch;
    if (mpt_cli_given(o, MPT_OPT_INJECT_NONFINITE) && o->inject_nonfinite >= planned)
        return mpt_errorf(MPT_ERR_ARG, "--inject-nonfinite %lld: expected an iteration below the run's %lld steps "
                          "(--epochs %d x %lld batches per epoch; iterations count from 0): a later one is never "
                          "reached, so nothing would be injected", (long long)o->inject_nonfinite, (long long)planned,
                          o->epochs, (long long)batches_per_epoch);
    return MPT_OK;
}

void mpt_cli_schedule_notes(const mpt_cli_opts *o, int64_t batches_per_epoch, const char *label, FILE *f) {
    const int64_t planned = (int64_t)o->epochs * batches_per_epoch;
    if (o->lr_schedule == MPT_LR_STEP && o->step_size >= planned) /* lr = lr0 gamma^floor(t / step_size), t 0-based */
        fprintf(f, "%snote: --lr-schedule step changes nothing: its first decay comes at iteration %lld (--step-size), "
                   "past the run's %lld steps (--epochs %d x %lld batches per epoch)\n", label,
                (long long)o->step_size, (long long)planned, o->epochs, (long long)batches_per_epoch);
    char why[96];
    const int64_t end = run_steps(o, batches_per_epoch, why, sizeof why); /* where this invocation stops */
    if (o->save_every > 0 && o->save_every >= end) /* saves after steps save_every, 2 x save_every, ..., the end */
        fprintf(f, "%snote: --save-every %lld changes nothing: the run ends at step %lld (%s), where the checkpoint is "
                   "written anyway\n", label, (long long)o->save_every, (long long)end, why);
    if (mpt_cli_given(o, MPT_OPT_INJECT_NONFINITE) && o->max_steps > 0 && o->inject_nonfinite >= o->max_steps &&
        o->inject_nonfinite < planned)
        fprintf(f, "%snote: --inject-nonfinite %lld injects nothing in this invocation, which stops at --max-steps "
                   "%lld; a run resumed from its checkpoint injects it at iteration %lld\n", label,
                (long long)o->inject_nonfinite, (long long)o->max_steps, (long long)o->inject_nonfinite);
}

/* ---- the settings the ranks of an MPI job share ------------------------------------------------------------------ */

const char *mpt_cli_data_fp_text(const mpt_cli_data_fp *fp, char *buf, size_t len) {
    snprintf(buf, len, "%lld training images crc32 %08x, %lld test images crc32 %08x", (long long)fp->n_train,
             (unsigned)fp->train_crc32, (long long)fp->n_test, (unsigned)fp->test_crc32);
    return buf;
}


void mpt_cli_job_add(mpt_cli_job *j, const char *name, const char *fmt, ...) {
    MPT_ASSERTF(j->n < MPT_CLI_JOB_MAX, "mpt_cli_job_add: more than %d settings", MPT_CLI_JOB_MAX);
    va_list ap;
    va_start(ap, fmt);
    char *value = NULL;
    int k = vasprintf(&value, fmt, ap);
    va_end(ap);
    char *n = strdup(name);
    MPT_ASSERTF(k >= 0 && n, "mpt_cli_job_add: out of memory");
    j->item[j->n++] = (mpt_dist_item){n, value};
}

void mpt_cli_job_settings(const mpt_cli_opts *o, mpt_cmd_mask cmd, const mpt_cli_data_fp *fp, int threads,
                          const char *resumed, mpt_cli_job *j) {
    char buf[128], name[48];
    mpt_cli_job_add(j, "the mptrain version", "%s", MPT_VERSION);
    for (mpt_opt_id id = MPT_OPT_FIRST; id < MPT_OPT_END; id++) {
        if (!mpt_cli_opt_recorded(id) || (cmd == MPT_CMD_COMPARE && (id == MPT_OPT_PRECISION || id == MPT_OPT_SEED)))
            continue; /* compare: each run's precision and seed come from --precisions and --seeds */
        snprintf(name, sizeof name, "--%s", mpt_cli_opt_name(id));
        mpt_cli_job_add(j, name, "%s", mpt_cli_format(o, id, buf, sizeof buf));
    }
    mpt_cli_job_add(j, "--max-steps", "%lld", (long long)o->max_steps);
    mpt_cli_job_add(j, "--log-every", "%lld", (long long)o->log_every);
    mpt_cli_job_add(j, "--telemetry", "%lld", (long long)o->telemetry);
    mpt_cli_job_add(j, "--shadow", "%s", o->shadow ? "on" : "off");
    mpt_cli_job_add(j, "--device", "%s", o->device == MPT_DEVICE_CHOICE_CPU ? "cpu" : o->device == MPT_DEVICE_CHOICE_CUDA
                                                                                       ? "cuda" : "auto");
    mpt_cli_job_add(j, "--limit-test", "%lld", (long long)o->limit_test);
    if (cmd == MPT_CMD_TRAIN) {
        mpt_cli_job_add(j, "--grad-comm", "%s", mpt_grad_comm_name(o->grad_comm));
        mpt_cli_job_add(j, "--threads (the CPU GEMM threads in use)", "%d", threads);
        mpt_cli_job_add(j, "--resume", "%s", resumed && resumed[0] ? resumed : "none");
    } else {
        size_t k = 0;
        buf[0] = '\0';
        for (int i = 0; i < o->n_precisions && k + 16 < sizeof buf; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? "," : "", mpt_precision_name(o->precisions[i]));
        mpt_cli_job_add(j, "--precisions", "%s", buf);
        char seeds[MPT_CLI_MAX_SEEDS * 21 + 1] = "";
        k = 0;
        for (int i = 0; i < o->n_seeds; i++)
            k += (size_t)snprintf(seeds + k, sizeof seeds - k, "%s%" PRIu64, i ? "," : "", o->seeds[i]);
        if (o->n_seeds > 1) mpt_cli_job_add(j, "--seeds", "%s", seeds);
        else mpt_cli_job_add(j, "--seed", "%" PRIu64, o->seed);
        mpt_cli_job_add(j, "--out", "%s", o->out);
    }
    char fpt[160];
    mpt_cli_job_add(j, "--data (the images as loaded)", "%s", mpt_cli_data_fp_text(fp, fpt, sizeof fpt));
}

void mpt_cli_job_free(mpt_cli_job *j) {
    for (int i = 0; i < j->n; i++) {
        free((char *)j->item[i].name);
        free((char *)j->item[i].value);
    }
    j->n = 0;
}
