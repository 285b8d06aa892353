#!/usr/bin/env bash
# bench/gpu.sh - everything a GPU machine is needed for, in one command that fits a short lease (issues 12, 20).
#
# Two halves:
#   bench/gpu.sh --prebuild   HERE, on a development machine with the GPU machine's nvcc (13.0): builds what a GPU run
#                             executes (release, -Dgpu_arch=80,90, MPI on, no oneDNN/GSL/man: tools/mptrain, the cuda
#                             suite's programs, bench/mlp_sweep, the CUDA module) in build-gpu-pre/ and packs
#                             .gpu-carry/ (ignored by git): those files, runtime-libs.tar.xz (the libraries they load
#                             that a bare GPU image lacks: OpenBLAS, libgfortran, libquadmath, jansson, subunit, libgomp,
#                             Open MPI's libraries, found by ldd), ompi-runtime.tar.xz (Open MPI's launcher, plugins and
#                             help files and PMIx, from Debian's packages, for the dp stage), Fashion-MNIST's four
#                             files, fallback-sysroot.tar.xz (the build dependencies unpacked from Debian's packages,
#                             only for a fallback build there) and MANIFEST. oneDNN stays out: it only speeds up CPU GEMMs (the CPU oracle of the cuda
#                             suite runs the emulate kernel set on OpenBLAS there, the same numerics), and its library
#                             was most of the carry. Prints the bytes that travel (tracked files + .gpu-carry; a device
#                             call takes 64 MiB) and the device calls to make.
#   bench/gpu.sh [options]    THERE, from the project root. Prebuilt mode (a .gpu-carry/ with its MANIFEST): nothing is
#                             compiled unless the prebuilt CUDA module cannot load; then only the module is built (or,
#                             if the prebuilt mptrain cannot start, what the run executes), with -Dgpu_arch=90, from
#                             the carried dev packages. Build mode (no carry, or --build: a GPU machine of your own
#                             with mptrain's build dependencies): a release build in build-gpu first.
#
# Stages, in this order, each under its own limit inside one total budget (default 420 s: a 15-minute device lease
# holds one such call plus a start and a short rerun; device tool: timeout_s = budget + 60):
#   machine  GPU, driver, CUDA, cuDNN, PyTorch, CPU, OpenBLAS core (machine.txt)
#   setup    unpack runtime-libs.tar.xz; the library path of mptrain and the tests: the carried libraries, the CUDA
#            toolkit's lib64, then every nvidia/*/lib folder of the Python's pip wheels (cuDNN, NCCL, cuBLAS, ...)
#   build    build mode only: meson + ninja in build-gpu (-Dgpu_arch=${GPU_ARCH:-80,90})
#   info     mptrain info: the device, and each CUDA library's version with the file it came from; the fallback
#            build when the prebuilt module does not load
#   test     the cuda suite, one process per Check test case (CK_RUN_CASE; test cases and their timeouts read from
#            tests/*.c), each under its own limit (its tcase_set_timeout, at most --tcase-timeout), TAP lines
#            line-buffered into one log per case (a killed case keeps what it printed); every case at once except
#            `timing`, which runs alone after the others (it times the GPU), and tests/test_cuda_tc.c's, which the
#            stage tc runs when it is on the list
#   tc       tests/test_cuda_tc (issue 39 D), alone: the mlp's GEMM shapes in fp16, bf16 and tf32 through cuBLASLt
#            against the CPU's Tensor Core summation model of this GPU (share of bit-identical outputs per shape,
#            cuBLASLt's algorithm and split-K, the causes measured), then 20 training steps of the mlp from identical
#            weights on both: the first step and tensor where they part; its tables (tc.md) on the results page
#   graph    mptrain train --model mlp --precision fp16 --batch-size 128 with --cuda-graph on and off, then on with
#            each opt-in path of issue 31 A (MPT_CUDA_FUSED_UPDATE=1, MPT_CUDA_FUSED_LOSS=1,
#            MPT_CUDA_FUSED_DRELU_BGRAD=1, MPT_CUDA_WGRAD_STREAM=1, MPT_CUDA_BIAS_GRAD_ILP=1, the five together,
#            MPT_CUDA_SPLIT_NARROW_BGRAD=1),
#            with --telemetry 50 on the host and on the device (MPT_CUDA_DEVICE_TELEMETRY=1, issue 32) and on again, then
#            lenet5 fp16 on, with MPT_CUDA_CONV_FIND=1 and with MPT_CUDA_SPLIT_CHANNEL_SUM=1: metrics.csv identical
#            to the model's on run but for its run_id column (off and the fused paths: the same arithmetic; the
#            measured convolution algorithms, the split bias gradient and the split channel sums sum in another
#            order: their loss and accuracy are shown); median epoch time by CUDA events after the first epoch
#   compare  mptrain compare --device cuda of mlp and lenet5 on Fashion-MNIST (fp32, tf32, fp16, bf16)
#   speedrun not in the default list (--stages info,speedrun): mptrain speedrun --device cuda --seeds 10 (every default
#            precision, fp8 where the GPU has it; issue 34), then bench/speedrun_pytorch.py, the same recipe in PyTorch
#            (bf16 and fp16 in its eager, fused, graph and compile modes, --speedrun-seeds seeds), same call; both
#            reports on the results page (docs/speedrun.md says what the GPU session must record)
#   bench    bench/run.sh gpu: mptrain against PyTorch in the --torch-modes (default eager, fused, graph: one PyTorch
#            process per model and precision runs them one after the other), 1 repeat by default
#   compile  bench/run.sh gpu --torch-modes compile: mptrain against torch.compile(mode="max-autotune"), mlp first;
#            compilation takes most of it (unmeasured on these GPUs), so it is a call of its own by default (below)
#   sweep    bench/mlp_sweep: the mlp 784-H-H-10 at H 512/2048/8192 and B 128/1024/4096 in fp32, tf32, bf16, fp16,
#            fp8: us per step and achieved GEMM TFLOP/s against the GPU's dense peak (smallest work first, stops
#            starting configurations when its time is spent)
#   dp       data-parallel training with one NCCL rank through mpirun (the carried Open MPI, relocated with
#            OPAL_PREFIX): mlp bf16 2 epochs with --data-parallel --device cuda, and the same without; their
#            metrics.csv compared (one rank: the all-reduce is the identity, so they should agree bit for bit)
#   memcheck compute-sanitizer --tool memcheck over the cuda suite's test cases but timing (whose clock assertions the
#            sanitizer's slowdown would break), all at once, each under the stage's limit (a case that does not finish
#            in time is reported as such): memory errors fail the stage
# A process that runs past its limit is diagnosed before it is killed: the stacks of all its threads (cuda-gdb or
# gdb when the machine has one), each thread's /proc wchan, its shared objects, nvidia-smi (<log>.stacks); then TERM,
# and KILL 5 s later. After every stage the output folder gets summary.txt, the results page gpu-<date>.md and
# gpu-runs.tar.gz (every log and run directory, checkpoints left out) rewritten; gpu.log is written as it goes. So a
# run killed from outside still returns all that finished. Files there: gpu.log, summary.txt, machine.txt, info.txt,
# gpu-<date>.md, gpu-runs.tar.gz (a device call returns at most 8 files).
#
# Usage: bench/gpu.sh --prebuild | [--stages LIST] [--budget S] [--epochs N] [--repeats R] [--tcase-timeout S]
#                                  [--torch-modes LIST] [--quick] [--carry DIR] [--build] [--out DIR] [--dry-run]
#                                  [--speedrun-seeds N]
#   --prebuild         build and pack .gpu-carry here (nothing else; see above)
#   --stages LIST      comma-separated subset of info,test,tc,graph,compare,speedrun,bench,compile,sweep,dp,memcheck
#                      (default info,test,tc,graph,bench,sweep,dp,memcheck: about 6 minutes on an H200; compile is the
#                      second call, `--stages compile --budget 240`; speedrun a call of its own, `--stages
#                      info,speedrun`); always in that order; machine and setup always run, build in build mode
#   --budget S         total seconds (default 420; 0: no limit). Stage limits: machine 20, setup 30, build 240,
#                      info 30 (+ 240 for a fallback build), test 90, tc 45, graph 150, compare 75, speedrun 300,
#                      bench 240, sweep 100, dp 45, memcheck 60, compile what is left; each stage gets at most its limit
#                      and what is left; 15 s are kept for the results. A stage never starts a process it has no time for
#   --torch-modes LIST PyTorch's modes in the bench stage (default eager,fused,graph; bench/pytorch_reference.py)
#   --speedrun-seeds N seeds of PyTorch's runs in the speedrun stage, per precision and mode (default 5; mptrain's: 10)
#   --epochs N         epochs of compare and of each benchmark run (default 3; the graph stage: at least 2)
#   --repeats R        benchmark repeats, mptrain and PyTorch alternating (default 1)
#   --tcase-timeout S  cap of each test case's limit (default 110: the H200 ran the whole suite in 33 s)
#   --quick            compare and bench with 1 epoch (graph 2)
#   --carry DIR        the carried folder (default .gpu-carry); --build ignores it
#   --out DIR          where results go (default $OUT, the device tool's folder, else runs/gpu-<UTC time>)
#   --dry-run          print the plan (mode, stages, limits, expected seconds, commands) and run nothing
# Environment: PYTHON (python3 on PATH: a Python whose PyTorch has CUDA), CUDA_HOME (/usr/local/cuda), MPT_DATA,
# OPENBLAS_CORETYPE (unset: set here from /proc/cpuinfo's flags, SkylakeX or Haswell, because OpenBLAS 0.3.21's
# DYNAMIC_ARCH took a VM's masked CPUID for "Prescott", its slowest kernels; set it empty to let OpenBLAS choose).
# Exit status: 0 when every stage passed, 1 naming the failed stages, 2 for a usage error.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
T0=$SECONDS
ARGS="$*"

say() { printf '==> [%4ds] %s\n' "$((SECONDS - T0))" "$*"; }
die() { printf 'bench/gpu.sh: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

ALL_STAGES=info,test,tc,graph,compare,speedrun,bench,compile,sweep,dp,memcheck
STAGES=info,test,tc,graph,bench,sweep,dp,memcheck EPOCHS=3 REPEATS=1 QUICK=0 DEST=${OUT:-} DRY_RUN=0 BUDGET=420
TCASE_CAP=110 CARRY=.gpu-carry FORCE_BUILD=0 PREBUILD=0 TORCH_MODES=eager,fused,graph SR_PT_SEEDS=5
need_value() { [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || die "option '$1' needs a value"; }
is_int() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "option '$1': expected a positive integer, found '$2'"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --prebuild) PREBUILD=1; shift ;;
        --stages) need_value "$@"; STAGES=$2; shift 2 ;;
        --budget | --limit) need_value "$@"
            [[ "$2" =~ ^[0-9]+$ ]] || die "option '$1': expected seconds (0 = no limit), found '$2'"
            BUDGET=$2; shift 2 ;;
        --epochs) need_value "$@"; is_int "$1" "$2"; EPOCHS=$2; shift 2 ;;
        --repeats) need_value "$@"; is_int "$1" "$2"; REPEATS=$2; shift 2 ;;
        --tcase-timeout) need_value "$@"; is_int "$1" "$2"; TCASE_CAP=$2; shift 2 ;;
        --torch-modes) need_value "$@"; TORCH_MODES=$2; shift 2 ;;
        --speedrun-seeds) need_value "$@"; is_int "$1" "$2"; SR_PT_SEEDS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --carry) need_value "$@"; CARRY=$2; shift 2 ;;
        --build) FORCE_BUILD=1; shift ;;
        --out) need_value "$@"; DEST=$2; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
done
IFS=, read -r -a STAGE_LIST <<<"$STAGES"
for s in "${STAGE_LIST[@]}"; do
    case ",$ALL_STAGES," in *",$s,"*) ;; *) die "--stages: expected names from $ALL_STAGES, found '$s'" ;; esac
done
IFS=, read -r -a TORCH_MODE_LIST <<<"$TORCH_MODES"
for s in "${TORCH_MODE_LIST[@]}"; do
    case "$s" in eager | fused | graph | compile) ;; *) die "--torch-modes: expected names from eager,fused,graph,compile, found '$s'" ;; esac
done
[ ${#TORCH_MODE_LIST[@]} -gt 0 ] || die "--torch-modes: expected names from eager,fused,graph,compile, found '$TORCH_MODES'"
want() { [[ ",$STAGES," == *",$1,"* ]]; }
[ "$QUICK" = 1 ] && EPOCHS=1
[ "$BUDGET" = 0 ] || [ "$BUDGET" -ge 120 ] || die "--budget $BUDGET: expected 0 (no limit) or at least 120 seconds"
GE=$((EPOCHS < 2 ? 2 : EPOCHS)) # epochs of each graph run: the first is left out of its median
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
case "$CARRY" in /*) ;; *) CARRY=$ROOT/$CARRY ;; esac
# The cuda suite's programs: the 'cuda' entries of tests/meson.build.
CUDA_PROGRAMS=$(sed -n "s/^ *\['\(test_[a-z0-9_]*\)', *'cuda', *[0-9]*\],.*/\1/p" tests/meson.build | tr '\n' ' ')
PRE_TARGETS=(tools/mptrain kernels/cuda/libmptrain-cuda.so bench/mlp_sweep)
TC_PROGRAM=test_cuda_tc # the stage tc's program (its one test case: tc_accum)
for p in $CUDA_PROGRAMS; do PRE_TARGETS+=("tests/$p"); done

# ================================ --prebuild: here =================================================================
if [ "$PREBUILD" = 1 ]; then
    command -v meson >/dev/null && command -v ninja >/dev/null || die "--prebuild needs meson and ninja (./run build installs them)"
    [ -x "$CUDA_HOME/bin/nvcc" ] || die "--prebuild needs nvcc ($CUDA_HOME/bin/nvcc): the GPU machine runs what is compiled here"
    PRE=build-gpu-pre
    # MPI on (the dp stage: data-parallel through mpirun); oneDNN off (CPU GEMM speed only; libdnnl.so.2 was most of
    # the carry): the cuda suite's CPU oracle then runs the emulate kernel set on OpenBLAS (kernels/cpu/gemm.c).
    opts=(--buildtype=release -Dgpu_arch="${GPU_ARCH:-80,90}" -Dcuda=enabled -Dgsl=disabled -Dmpi=enabled -Donednn=disabled
          -Dman=disabled)
    say "prebuild: meson setup $PRE ${opts[*]}"
    if [ -f "$PRE/build.ninja" ]; then meson setup --reconfigure "$PRE" "${opts[@]}" >/dev/null || die "meson setup --reconfigure $PRE failed"
    else meson setup "$PRE" "${opts[@]}" >/dev/null || die "meson setup $PRE failed"; fi
    say "prebuild: ninja -C $PRE ${PRE_TARGETS[*]}"
    ninja -C "$PRE" "${PRE_TARGETS[@]}" || die "ninja failed"
    NEW=$CARRY.new
    rm -rf "$NEW"
    mkdir -p "$NEW/build/tools" "$NEW/build/tests" "$NEW/build/kernels/cuda" "$NEW/build/bench" "$NEW/data" "$NEW/debs" "$NEW/libs" ||
        die "cannot create $NEW"
    for t in "${PRE_TARGETS[@]}"; do cp "$PRE/$t" "$NEW/build/$t" || die "cannot copy $PRE/$t"; done
    # The libraries the binaries load, minus what every GPU image has (glibc, libgcc_s, libstdc++, zlib) and the CUDA
    # libraries (the GPU machine's own: toolkit or pip wheels).
    ldd "$NEW"/build/tools/mptrain "$NEW"/build/tests/* "$NEW"/build/kernels/cuda/*.so | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
        while read -r soname path; do
            case "$soname" in
                ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libgcc_s.so* | libstdc++.so* | libz.so*) continue ;;
                libcuda* | libcublas* | libcurand* | libcudnn* | libnccl* | libnv*) continue ;;
            esac
            case "$path" in "$CUDA_HOME"/* | /usr/local/cuda*) continue ;; esac
            cp -L "$path" "$NEW/libs/$soname" || exit 1
        done || die "cannot copy the runtime libraries"
    # a CPU-only library must not travel (the GPU runs need none): oneDNN, whatever the build found
    if ls "$NEW"/libs/libdnnl* >/dev/null 2>&1; then die "prebuild: oneDNN got into the carry (the build links it): $(ls "$NEW"/libs/libdnnl*)"; fi
    # xz: OpenBLAS alone is 36 MB; the carry must stay under 64 MiB with the data
    tar -C "$NEW/libs" -cJf "$NEW/runtime-libs.tar.xz" . && rm -rf "$NEW/libs" || die "cannot pack the runtime libraries"
    # Open MPI's launcher, plugins, help files and configuration, and PMIx, from Debian's packages (the dp stage runs
    # them relocated: OPAL_PREFIX, OPAL_SYSCONFDIR, PMIX_PREFIX); its libraries are in runtime-libs already.
    ompi=$NEW/ompi.tmp
    mkdir -p "$ompi/debs" "$ompi/root" || die "cannot create $ompi"
    if (cd "$ompi/debs" && apt-get download libopenmpi3 openmpi-bin openmpi-common libpmix2 >/dev/null 2>&1); then
        for d in "$ompi"/debs/*.deb; do dpkg -x "$d" "$ompi/root" || die "dpkg -x $d failed"; done
        (cd "$ompi/root" && rm -rf usr/share/man usr/share/doc usr/lib/x86_64-linux-gnu/libmpi_java* usr/lib/x86_64-linux-gnu/liboshmem* \
            usr/lib/x86_64-linux-gnu/libmpi_mpifh* usr/lib/x86_64-linux-gnu/libmpi_use* usr/lib/x86_64-linux-gnu/libmpi_cxx* \
            usr/lib/x86_64-linux-gnu/openmpi/lib/*.jar usr/bin/mpi[cfjC]* usr/bin/oshcc usr/bin/oshfort usr/bin/shmem*cc)
        tar -C "$ompi/root" -cJf "$NEW/ompi-runtime.tar.xz" . || die "cannot pack Open MPI's runtime"
    else
        say "prebuild: apt-get download of Open MPI failed: no ompi-runtime.tar.xz, the dp stage will say so there"
    fi
    rm -rf "$ompi"
    data=${MPT_DATA:-/usr/share/datasets/fashion-mnist}
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        if [ -f "$data/$f.gz" ]; then cp "$data/$f.gz" "$NEW/data/"; elif [ -f "$data/$f" ]; then gzip -c "$data/$f" >"$NEW/data/$f.gz"
        else die "no $data/$f(.gz): apt-get install dataset-fashion-mnist, or set MPT_DATA"; fi
    done
    # For a fallback build there (the prebuilt module does not load): the build dependencies, unpacked from Debian's
    # packages into a sysroot and packed as fallback-sysroot.tar.xz without what no build needs (static libraries,
    # documentation) and without a second copy of the runtime libraries: a shared object whose SONAME runtime-libs
    # carries becomes a relative link to lib/<soname> (where setup unpacks runtime-libs, beside sysroot/).
    debs="check libsubunit0 libsubunit-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5
          libquadmath0 zlib1g-dev libjansson4 libjansson-dev pkgconf-bin libpkgconf3"
    fb=$NEW/fallback.tmp
    mkdir -p "$fb/root" || die "cannot create $fb"
    # shellcheck disable=SC2086
    if (cd "$NEW/debs" && apt-get download $debs >/dev/null 2>&1); then
        for d in "$NEW"/debs/*.deb; do dpkg -x "$d" "$fb/root" || die "dpkg -x $d failed"; done
        rm -rf "$fb/root/usr/share/doc" "$fb/root/usr/share/man"
        find "$fb/root" -name '*.a' -delete
        carried=" $(tar -tJf "$NEW/runtime-libs.tar.xz" | sed 's|^\./||' | tr '\n' ' ') "
        find "$fb/root" -type f -name '*.so*' | while read -r f; do
            so=$(objdump -p "$f" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
            [ -n "$so" ] && [[ "$carried" == *" $so "* ]] || continue
            rel=${f#"$fb/root/"}
            up=$(sed 's|[^/]*/|../|g; s|[^/]*$||' <<<"$rel") # one ../ per folder below the sysroot
            ln -sf "../$up""lib/$so" "$f" || exit 1
        done || die "cannot link the sysroot's runtime libraries to lib/"
        tar -C "$fb/root" -cJf "$NEW/fallback-sysroot.tar.xz" . || die "cannot pack the fallback sysroot"
        fb_list=$(cd "$NEW/debs" && ls ./*.deb | sed 's|^\./||' | tr '\n' ' ')
    else
        say "prebuild: apt-get download failed: the carry has nothing for a fallback build there"
        fb_list="none (apt-get download failed)"
    fi
    rm -rf "$NEW/debs" "$fb"
    {
        printf 'commit: %s%s\n' "$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
            "$([ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' + uncommitted changes')"
        printf 'built: %s on %s (%s)\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(hostname)" "$(. /etc/os-release && echo "$PRETTY_NAME")"
        printf 'nvcc: %s\n' "$("$CUDA_HOME/bin/nvcc" --version | grep -o 'release [0-9.]*, V[0-9.]*')"
        printf 'meson options: %s\n' "${opts[*]}"
        printf 'needs glibc: %s\n' "$(objdump -T "$NEW"/build/tools/mptrain "$NEW"/build/tests/* "$NEW"/build/kernels/cuda/*.so 2>/dev/null |
            grep -oE 'GLIBC_[0-9.]+' | sort -Vu | tail -n 1)"
        printf 'programs: %s\n' "$CUDA_PROGRAMS"
        printf 'runtime libraries: %s\n' "$(tar -tJf "$NEW/runtime-libs.tar.xz" | grep -v '/$' | sed 's|^\./||' | tr '\n' ' ')"
        printf 'fallback sysroot (fallback-sysroot.tar.xz) from: %s\n' "$fb_list"
        (cd "$NEW" && find . -type f ! -name MANIFEST -print0 | sort -z | xargs -0 sha256sum)
    } >"$NEW/MANIFEST"
    rm -rf "$CARRY" && mv "$NEW" "$CARRY" || die "cannot replace $CARRY"
    tracked=$(git ls-files -z | xargs -0 cat 2>/dev/null | wc -c)
    carried=$(du -sb "$CARRY" | cut -f1)
    say "prebuild: $CARRY: $(sed -n 's/^commit: //p' "$CARRY/MANIFEST"), $carried bytes"
    printf 'travel: %d bytes (tracked %d + %s %d) of 67108864\n' $((tracked + carried)) "$tracked" "${CARRY#"$ROOT"/}" "$carried"
    [ $((tracked + carried)) -le 67108864 ] || die "the carry passes the device tool's 64 MiB"
    printf 'device call: carry ["%s"], timeout_s %d, command: bench/gpu.sh\n' "${CARRY#"$ROOT"/}" $((BUDGET + 60))
    printf 'second call (torch.compile, if >= 5 minutes are left): carry ["%s"], timeout_s 300, command: bench/gpu.sh --stages compile --budget 240\n' \
        "${CARRY#"$ROOT"/}"
    exit 0
fi

# ================================ the plan =========================================================================
MODE=build
if [ "$FORCE_BUILD" = 0 ] && [ -f "$CARRY/MANIFEST" ]; then MODE=prebuilt; fi
RESERVE=15    # seconds kept at the end for the results page and the archive
TIMING_CAP=40 # the timing test case's limit (it runs alone, after the others, within the test stage's)
declare -A CAP=([machine]=20 [setup]=30 [build]=240 [info]=30 [fallback]=240 [test]=90 [tc]=45 [graph]=150 [compare]=75
                [speedrun]=300 [bench]=240 [compile]=0 [sweep]=100 [dp]=45 [memcheck]=60)
# Expected seconds. Measured on an H200 by bench/gpu.sh (2026-11-26, sessions b and c: bench/results/gpu-2026-11-26-b
# and -c, callN-summary.txt): test 21-24 s, graph 2-3 s, compare 10-11 s at 3 epochs, bench (PyTorch eager only) 115 s
# a repeat at 3 epochs. Estimates, never measured: tc (31 s of CPU time on this project's 2-vCPU EPYC with a CPU backend
# standing in for the GPU, MPT_TC_STANDIN=cpu; the GPU machine's 16 cores share its models), bench's fused and graph
# modes (+35 s a repeat at 3 epochs: they run inside the same PyTorch processes), compile (about 60 s of torch.compile
# max-autotune per model and precision), sweep, dp, memcheck, setup with the Open MPI runtime; the first run of each
# replaces its estimate. speedrun: an estimate (mptrain's 50 runs of one epoch, then PyTorch's 4 modes x 2
# precisions x --speedrun-seeds runs and their compilation).
n_torch=${#TORCH_MODE_LIST[@]}
declare -A EXPECT=([machine]=5 [setup]=5 [build]=150 [info]=3 [test]=24 [tc]=15 [graph]=$((10 * GE + 8))
                   [compare]=$((1 + 3 * EPOCHS)) [speedrun]=$((60 + 20 * SR_PT_SEEDS))
                   [bench]=$((1 + (32 + 6 * n_torch) * REPEATS * EPOCHS))
                   [compile]=$((8 * (60 + 6 * EPOCHS))) [sweep]=80 [dp]=20 [memcheck]=55)
ORDER=(machine setup)
[ "$MODE" = build ] && ORDER+=(build)
for s in info test tc graph compare speedrun bench compile sweep dp memcheck; do want "$s" && ORDER+=("$s"); done

# The test cases of the cuda suite: "program tcase seconds" per line, from tests/<program>.c (TCase *v =
# tcase_create("name") and tcase_set_timeout(v, N); a case without one gets 60 s), each capped at TCASE_CAP; without
# the program of the stage tc when that stage runs (it runs it alone).
tcases() {
    local p
    for p in $CUDA_PROGRAMS; do
        [ "$p" = "$TC_PROGRAM" ] && want tc && continue
        [ -f "tests/$p.c" ] || continue
        awk -v prog="$p" -v cap="$TCASE_CAP" '
            match($0, /TCase \*[A-Za-z_0-9]+ *= *tcase_create\("[^"]*"\)/) {
                s = substr($0, RSTART, RLENGTH); v = s; sub(/^TCase \*/, "", v); sub(/ *=.*/, "", v)
                n = s; sub(/^[^"]*"/, "", n); sub(/".*/, "", n); name[v] = n; order[++k] = v; t[v] = 60 }
            match($0, /tcase_set_timeout\([A-Za-z_0-9]+, *[0-9]+\)/) {
                s = substr($0, RSTART, RLENGTH); v = s; sub(/^tcase_set_timeout\(/, "", v); sub(/,.*/, "", v)
                x = s; sub(/.*, */, "", x); sub(/\).*/, "", x); t[v] = x + 0 }
            END { for (i = 1; i <= k; i++) { v = order[i]; printf "%s\t%s\t%d\n", prog, name[v], (t[v] < cap ? t[v] : cap) } }
        ' "tests/$p.c"
    done
}

if [ "$DRY_RUN" = 1 ]; then
    if [ "$MODE" = prebuilt ]; then
        printf 'bench/gpu.sh --dry-run: prebuilt mode: %s (%s, %s, %s bytes); nothing is compiled unless its CUDA module cannot load.\n' \
            "${CARRY#"$ROOT"/}" "$(sed -n 's/^commit: //p' "$CARRY/MANIFEST" | cut -c1-12)" "$(sed -n 's/^nvcc: //p' "$CARRY/MANIFEST")" \
            "$(du -sb "$CARRY" | cut -f1)"
    else
        printf 'bench/gpu.sh --dry-run: build mode (%s): meson + ninja in build-gpu first (bench/gpu.sh --prebuild here makes a carry that skips it).\n' \
            "$([ "$FORCE_BUILD" = 1 ] && echo '--build' || echo "no ${CARRY#"$ROOT"/}/MANIFEST")"
    fi
    printf 'Budget %s s (0: none), epochs %s, repeats %s; nothing is run.\n' "$BUDGET" "$EPOCHS" "$REPEATS"
    printf '  %-8s %7s %9s  %s\n' stage limit expected 'what runs'
    sum_cap=0 sum_exp=0
    for s in "${ORDER[@]}"; do
        cap=${CAP[$s]} what=
        case "$s" in
            machine) what="nvidia-smi, nvcc, PyTorch and CPU facts (machine.txt)" ;;
            setup) what="$([ "$MODE" = prebuilt ] && echo 'unpack runtime-libs.tar.xz and ompi-runtime.tar.xz; ')library path: carried libs, $CUDA_HOME/lib64, every nvidia/*/lib wheel folder" ;;
            build) what="meson setup build-gpu --buildtype=release -Dgpu_arch=${GPU_ARCH:-80,90} -Dcuda=enabled; ninja ${PRE_TARGETS[*]}" ;;
            info) what="mptrain info (a fallback build, limit ${CAP[fallback]} s, only if the module cannot load: meson -Dgpu_arch=90, ninja the module)" ;;
            tc) what="tests/$TC_PROGRAM alone (MPT_TC_REPORT): the mlp's GEMMs, cuBLASLt against the CPU's Tensor Core model; 20 steps" ;;
            test) what="$(tcases | awk -F'\t' -v cap=$((CAP[test] - TIMING_CAP)) '$2 != "timing" {
                              printf "%s%s/%s %ds", sep, $1, $2, ($3 < cap ? $3 : cap); sep = ", "; n++ }
                          END { printf " (%d test cases at once)", n }'), then alone: $(tcases | awk -F'\t' -v cap="$TIMING_CAP" '
                          $2 == "timing" { printf "%s%s/%s %ds", sep, $1, $2, ($3 < cap ? $3 : cap); sep = ", " }')" ;;
            graph) what="mptrain train --model mlp --precision fp16 --batch-size 128 --epochs $GE --device cuda: --cuda-graph on, off, on with MPT_CUDA_FUSED_UPDATE=1, MPT_CUDA_FUSED_LOSS=1, MPT_CUDA_FUSED_DRELU_BGRAD=1, MPT_CUDA_WGRAD_STREAM=1, MPT_CUDA_BIAS_GRAD_ILP=1 (one each, then together), MPT_CUDA_SPLIT_NARROW_BGRAD=1, --telemetry 50 without and with MPT_CUDA_DEVICE_TELEMETRY=1, on again; lenet5 on, with MPT_CUDA_CONV_FIND=1 and with MPT_CUDA_SPLIT_CHANNEL_SUM=1" ;;
            compare) what="mptrain compare --model mlp|lenet5 --device cuda --epochs $EPOCHS" ;;
            speedrun) what="mptrain speedrun --device cuda --seeds 10 (limit $((CAP[speedrun] * 2 / 5)) s); bench/speedrun_pytorch.py --device cuda --precisions bf16,fp16 --modes eager,fused,graph,compile --seeds $SR_PT_SEEDS (limit $((CAP[speedrun] * 3 / 5)) s)" ;;
            bench) what="bench/run.sh gpu --epochs $EPOCHS --repeats $REPEATS --models mlp,lenet5 --torch-modes $TORCH_MODES ($((16 * REPEATS)) runs, each under a limit)" ;;
            compile) what="bench/run.sh gpu --torch-modes compile --epochs $EPOCHS --models mlp,lenet5 (torch.compile max-autotune; each PyTorch run at most 150 s; what does not fit is listed as not run)" ;;
            sweep) what="bench/mlp_sweep --device cuda --hidden 512,2048,8192 --batch 128,1024,4096 --precisions fp32,tf32,bf16,fp16,fp8 --steps 10 --rounds 3 (stops starting configurations in time)" ;;
            dp) what="$([ -f "$CARRY/ompi-runtime.tar.xz" ] || [ "$MODE" = build ] && echo "mpirun -np 1" || echo "NO ompi-runtime.tar.xz in the carry: reported, not run;") mptrain train --data-parallel --device cuda --model mlp --precision bf16 --epochs 2, and the same without; metrics.csv compared" ;;
            memcheck) what="compute-sanitizer --tool memcheck over $(tcases | awk -F'\t' '$2 != "timing"' | wc -l) test cases at once, all but timing (each within the stage's limit)" ;;
        esac
        if [ "$cap" = 0 ]; then capt="rest"; else capt="$cap s"; fi
        sum_exp=$((sum_exp + ${EXPECT[$s]}))
        printf '  %-8s %7s %7d s  %s\n' "$s" "$capt" "${EXPECT[$s]}" "$what"
    done
    printf '  %-8s %7s %9s  %s\n' results "$RESERVE s" "" "gpu-<date>.md, gpu-runs.tar.gz (rewritten after every stage too)"
    if [ "$BUDGET" -gt 0 ]; then
        printf '  %-8s %7s %7d s  expected with the %d s for the results: %s\n' total "$BUDGET s" $((sum_exp + RESERVE)) "$RESERVE" \
            "$([ $((sum_exp + RESERVE)) -le "$BUDGET" ] && echo "fits the budget" || echo "PASSES the budget: the stages that run last get what is left, or are listed as not run (lower --epochs or --repeats, or fewer --stages)")"
        printf 'Each stage gets at most its limit and what is left of the budget; the limits are bounds for a stage that\n'
        printf 'hangs, not plans: the expected seconds are the plan.\n'
    else
        printf '  %-8s %7s %7d s  expected (no budget: --budget 0)\n' total - "$sum_exp"
    fi
    printf 'Expected seconds: test, graph, compare and bench (eager) measured by bench/gpu.sh on an H200 (2026-11-26: suite\n'
    printf '21-24 s, graph 2-3 s, compare 10-11 s, PyTorch eager pairs 115 s a repeat at 3 epochs), scaled by epochs and\n'
    printf 'repeats; the rest are estimates (bench'"'"'s fused and graph modes, compile, speedrun, sweep, dp, memcheck never ran on a GPU).\n'
    printf 'Device tool: carry ["%s"], timeout_s %d, command: bench/gpu.sh%s\n' \
        "${CARRY#"$ROOT"/}" $((BUDGET > 0 ? BUDGET + 60 : 600)) "$([ -n "$ARGS" ] && printf ' %s' "${ARGS/--dry-run/}" | sed 's/  */ /g; s/ $//')"
    exit 0
fi

# ================================ the run: there ===================================================================
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
DATE=$(date -u +%Y-%m-%d)
WORK=$ROOT/runs/gpu-$STAMP
DEST=${DEST:-$WORK}
case "$DEST" in /*) ;; *) DEST=$ROOT/$DEST ;; esac
mkdir -p "$WORK/test" "$DEST" || die "cannot create $WORK or $DEST"
SUMMARY=$DEST/summary.txt
: >"$SUMMARY"
exec > >(tee -a "$DEST/gpu.log") 2>&1
ulimit -c 0

PYTHON=${PYTHON:-$(command -v python3 || true)}
export PATH=$CUDA_HOME/bin:$PATH MPT_REQUIRE_CUDA=1 MPT_NO_APT=1
STDBUF=()
command -v stdbuf >/dev/null 2>&1 && STDBUF=(stdbuf -oL -eL)
FAILED=()
STAGE_TIMES=()
fail() { FAILED+=("$1"); printf 'bench/gpu.sh: STAGE FAILED: %s\n' "$1"; }
note() { printf '%s\n' "$*" >>"$SUMMARY"; }
left() { if [ "$BUDGET" = 0 ]; then echo 999999; else echo $((BUDGET - RESERVE - (SECONDS - T0))); fi; }
# limit_for STAGE [SECONDS]: the seconds a process of STAGE may take: its cap (or SECONDS), within the budget left.
limit_for() {
    local c=${2:-${CAP[$1]}} l
    l=$(left)
    [ "$c" -gt 0 ] && [ "$c" -lt "$l" ] && l=$c
    echo "$l"
}

# diagnose PID: where a stuck process is, before it is killed: its group's processes, each thread's kernel wait
# channel, its shared objects, the stacks of all threads (cuda-gdb or gdb, bounded), the GPU's processes.
diagnose() {
    local pid=$1 p t dbg
    printf '== %s: pid %s ran past its limit: %s\n' "$(date -u +%T)" "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | head -c 400)"
    ps -o pid,ppid,stat,etime,time,wchan:30,args -p "$(pgrep -d, -g "$pid" 2>/dev/null || echo "$pid")" 2>/dev/null | cut -c1-240
    for p in $(pgrep -g "$pid" 2>/dev/null || echo "$pid"); do
        case "$(cat "/proc/$p/comm" 2>/dev/null)" in bash | sh | sleep | timeout | time | tee) continue ;; esac
        printf -- '-- pid %s (%s) threads: tid comm state wchan\n' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"
        for t in /proc/"$p"/task/*; do
            printf '   %s %s %s %s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)" "$(awk '/^State:/{print $2}' "$t/status" 2>/dev/null)" \
                "$(cat "$t/wchan" 2>/dev/null)"
        done
        printf -- '-- pid %s shared objects:\n' "$p"
        awk '$6 ~ /\.so/ {print "   " $6}' "/proc/$p/maps" 2>/dev/null | sort -u
        dbg=$(command -v cuda-gdb || command -v gdb || true)
        if [ -n "$dbg" ]; then
            printf -- '-- %s -batch -p %s -ex "thread apply all bt"\n' "$dbg" "$p"
            timeout -k 5 45 "$dbg" -batch -p "$p" -ex 'thread apply all bt' </dev/null 2>&1 | grep -v '^\[New Thread' | tail -n 400
        else
            printf -- '-- no cuda-gdb or gdb here: no stacks (the wait channels above say where each thread sleeps)\n'
        fi
    done
    timeout 10 nvidia-smi 2>&1 | tail -n 25
}

# runlim SECONDS LOG CMD...: CMD in a process group of its own, stdout and stderr appended to LOG line by line (stdbuf);
# returns its status, or 124 when it ran past SECONDS: diagnose() writes LOG.stacks first, then the group gets TERM
# and, 5 s later, KILL. Nothing is started without at least 3 seconds (status 125). Called from the main shell
# (PUBLISHING=1), it publishes every PUBLISH_EVERY seconds while it waits, so a long stage killed from outside still
# returned what it had printed.
PUBLISHING=1 PUBLISH_EVERY=${MPT_GPU_PUBLISH_EVERY:-20}
runlim() {
    local t=$1 log=$2 pid end next
    shift 2
    if [ "$t" -lt 3 ]; then printf 'not started: the budget is spent (%s)\n' "$*" >>"$log"; return 125; fi
    setsid "${STDBUF[@]}" "$@" >>"$log" 2>&1 </dev/null &
    pid=$!
    end=$((SECONDS + t))
    next=$((SECONDS + PUBLISH_EVERY))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$PUBLISHING" = 1 ] && [ "$SECONDS" -ge "$next" ]; then publish; next=$((SECONDS + PUBLISH_EVERY)); fi
        if [ "$SECONDS" -ge "$end" ]; then
            # RUNLIM_DIAGNOSE=0: a stage whose processes are expected to run out of time (memcheck) skips the stacks
            [ "${RUNLIM_DIAGNOSE:-1}" = 1 ] && diagnose "$pid" >"$log.stacks" 2>&1
            kill -TERM -- "-$pid" 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            kill -KILL -- "-$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            printf '\nbench/gpu.sh: stopped after %s s (limit); stacks before the kill: %s\n' "$t" "${log#"$WORK"/}.stacks" >>"$log"
            return 124
        fi
        sleep 0.5
    done
    wait "$pid"
}
why() { case "$1" in 0) echo ok ;; 124) echo "TIMEOUT (stacks in the .stacks file)" ;; 125) echo "not started (budget spent)" ;; *) echo "exit $1" ;; esac; }

# publish: the output folder gets the results page and the archive of every log so far (written aside, then renamed,
# so a kill leaves the previous complete copy).
publish() {
    results_page >"$DEST/.gpu-page.tmp" 2>/dev/null; mv -f "$DEST/.gpu-page.tmp" "$DEST/gpu-$DATE.md"
    for f in machine.txt info.txt; do [ -f "$WORK/$f" ] && [ "$WORK" != "$DEST" ] && cp -f "$WORK/$f" "$DEST/"; done
    if [ "$WORK" != "$DEST" ]; then
        tar -C "$ROOT/runs" --exclude='*.safetensors' -czf "$DEST/.gpu-runs.tmp" "gpu-$STAMP" 2>/dev/null &&
            mv -f "$DEST/.gpu-runs.tmp" "$DEST/gpu-runs.tar.gz"
    fi
}
stage_end() { # STAGE START RESULT
    STAGE_TIMES+=("| $1 | $((SECONDS - $2)) | ${CAP[$1]:-rest} | $3 |")
    note "$(printf '%-9s %4ds  %s' "$1" "$((SECONDS - $2))" "$3")"
    publish
}

# ---- machine ------------------------------------------------------------------------------------------------------
stage_machine() {
    say "machine"
    if [ -z "${OPENBLAS_CORETYPE+set}" ]; then
        if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
            export OPENBLAS_CORETYPE=SkylakeX
        elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
            export OPENBLAS_CORETYPE=Haswell
        fi
        CORETYPE_WHY="set by bench/gpu.sh from /proc/cpuinfo's flags (OpenBLAS's own detection can fall to Prescott on a VM)"
    else
        CORETYPE_WHY="from the environment"
    fi
    local l
    l=$(limit_for machine)
    {
        printf 'date: %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
        printf 'mode: %s%s\n' "$MODE" "$([ "$MODE" = prebuilt ] && printf ' (%s, built from %s)' "${CARRY#"$ROOT"/}" "$(sed -n 's/^commit: //p' "$CARRY/MANIFEST")")"
        printf 'commit here: %s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
        timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv,noheader 2>&1 | sed 's/^/GPU: /'
        printf 'nvcc: %s\n' "$(timeout 10 nvcc --version 2>&1 | grep -o 'release [0-9.]*, V[0-9.]*' || echo missing)"
        printf 'OS: %s, %s, %s\n' "$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")" "$(ldd --version 2>&1 | head -n 1)" "$(uname -r)"
        printf 'CPU: %s, %s cores; OPENBLAS_CORETYPE=%s (%s)\n' "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')" "$(nproc)" \
            "${OPENBLAS_CORETYPE:-unset}" "$CORETYPE_WHY"
        printf 'python: %s\n' "${PYTHON:-none}"
        timeout "$l" "${PYTHON:-false}" -c 'import torch; print("PyTorch %s, CUDA %s, cuDNN %s, GPU visible: %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available()))' 2>&1 | tail -n 1 | sed 's/^/python: /'
        printf 'debugger: %s\n' "$(command -v cuda-gdb || command -v gdb || echo 'none (a stuck process is reported by its wait channels only)')"
    } >"$WORK/machine.txt" 2>&1
    cat "$WORK/machine.txt"
    timeout 10 nvidia-smi -L >/dev/null 2>&1 || fail "machine: nvidia-smi is missing or lists no GPU"
}

# ---- setup: runtime libraries and library paths --------------------------------------------------------------------
BIN= # the folder with tools/, tests/, kernels/cuda/
MPT_LD=
stage_setup() {
    say "setup"
    local libs="" wheels
    if [ "$MODE" = prebuilt ]; then
        BIN=$CARRY/build
        chmod +x "$BIN"/tools/* "$BIN"/tests/* 2>/dev/null # in case the transfer dropped the mode bits
        mkdir -p "$CARRY/lib"
        if ! tar -C "$CARRY/lib" -xJf "$CARRY/runtime-libs.tar.xz" 2>/dev/null; then # no xz here: Python's lzma
            "${PYTHON:-python3}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                "$CARRY/runtime-libs.tar.xz" "$CARRY/lib" || fail "setup: cannot unpack $CARRY/runtime-libs.tar.xz"
        fi
        libs=$CARRY/lib
        [ -d "$CARRY/data" ] && export MPT_DATA=${MPT_DATA:-$CARRY/data}
        if [ -f "$CARRY/ompi-runtime.tar.xz" ]; then # Open MPI for the dp stage, run from where it is unpacked
            mkdir -p "$CARRY/ompi"
            if ! tar -C "$CARRY/ompi" -xJf "$CARRY/ompi-runtime.tar.xz" 2>/dev/null; then
                "${PYTHON:-python3}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                    "$CARRY/ompi-runtime.tar.xz" "$CARRY/ompi" || note "setup: cannot unpack ompi-runtime.tar.xz (dp stage)"
            fi
        fi
    else
        BIN=$ROOT/build-gpu
    fi
    wheels=$(timeout 20 "${PYTHON:-false}" -c '
import glob, os, sys
seen = []
for p in sys.path:
    for d in sorted(glob.glob(os.path.join(p or ".", "nvidia", "*", "lib"))):
        if os.path.isdir(d) and d not in seen:
            seen.append(d)
print(":".join(seen))' 2>/dev/null)
    MPT_LD=$libs
    for d in "$CUDA_HOME/lib64" $(tr ':' ' ' <<<"$wheels"); do [ -d "$d" ] && MPT_LD=${MPT_LD:+$MPT_LD:}$d; done
    MPT_LD=$MPT_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export MPT_CUDA_MODULE=$BIN/kernels/cuda/libmptrain-cuda.so MPT_BUILD_ROOT=$BIN MPT_SOURCE_ROOT=$ROOT
    export MPT_DATA=${MPT_DATA:-/usr/share/datasets/fashion-mnist}
    # mptrain and the tests get the library path through this wrapper; PyTorch keeps the machine's own environment
    mkdir -p "$WORK/bin"
    printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$MPT_LD" "$BIN/tools/mptrain" >"$WORK/bin/mptrain"
    chmod +x "$WORK/bin/mptrain"
    {
        printf 'LD_LIBRARY_PATH for mptrain and the tests: %s\n' "$MPT_LD"
        printf 'pip wheel library folders: %s\n' "${wheels:-none found}"
        printf 'MPT_CUDA_MODULE=%s\nMPT_DATA=%s\n' "$MPT_CUDA_MODULE" "$MPT_DATA"
        if [ -d "$BIN" ]; then
            for f in "$BIN"/tools/mptrain "$BIN"/tests/* "$BIN"/kernels/cuda/*.so; do
                [ -f "$f" ] && { printf '== ldd %s\n' "${f#"$BIN"/}"; LD_LIBRARY_PATH=$MPT_LD ldd "$f" 2>&1; }
            done
        fi
    } >"$WORK/libraries.txt" 2>&1
    grep -E '^(LD_LIBRARY_PATH|pip wheel)' "$WORK/libraries.txt"
    local missing
    missing=$(grep 'not found' "$WORK/libraries.txt" | sort -u | tr -s ' \t' ' ' | tr '\n' ';')
    if [ -n "$missing" ]; then note "setup: ldd: not found: $missing"; say "setup: ldd: not found: $missing"; fi
    [ -d "$MPT_DATA" ] || fail "setup: no Fashion-MNIST at $MPT_DATA (MPT_DATA)"
}

# ---- build (build mode), and the fallback build (prebuilt mode, module not loadable) --------------------------------
meson_build() { # DIR ARCH LIMIT TARGET...
    local dir=$1 arch=$2 lim=$3 rc=0 t0=$SECONDS
    shift 3
    local args=(--buildtype=release -Dgpu_arch="$arch" -Dcuda=enabled -Dgsl=disabled -Dmpi=auto -Donednn=disabled -Dman=disabled)
    [ -n "${MPT_CUDNN_ROOT:-}" ] && args+=(-Dcudnn_root="$MPT_CUDNN_ROOT")
    local meson=(meson)
    command -v meson >/dev/null 2>&1 || meson=("${PYTHON:-python3}" -m mesonbuild.mesonmain)
    if [ ! -f "$dir/build.ninja" ]; then
        runlim "$lim" "$WORK/build.log" "${meson[@]}" setup "$dir" "${args[@]}" || rc=$?
    fi
    [ "$rc" = 0 ] && { runlim $((lim - (SECONDS - t0))) "$WORK/build.log" ninja -C "$dir" -j"$(nproc)" "$@" || rc=$?; }
    tail -n 20 "$WORK/build.log"
    return "$rc"
}
stage_build() {
    say "build: meson setup build-gpu -Dgpu_arch=${GPU_ARCH:-80,90}; ninja ${PRE_TARGETS[*]}"
    local rc=0
    meson_build build-gpu "${GPU_ARCH:-80,90}" "$(limit_for build)" "${PRE_TARGETS[@]}" || rc=$?
    [ "$rc" = 0 ] || fail "build: $(why "$rc") (build.log)"
}
# Prebuilt mode: when the carried module does not load, build what this run needs here, -Dgpu_arch=90, with the
# carried Debian packages (unpacked under the carry, pkg-config pointed at them, cuDNN from the pip wheel).
fallback_build() {
    local targets=(kernels/cuda/libmptrain-cuda.so) d l root w so b
    LD_LIBRARY_PATH=$MPT_LD "$BIN/tools/mptrain" --version >/dev/null 2>&1 || targets=("${PRE_TARGETS[@]}")
    say "fallback build (-Dgpu_arch=90): ${targets[*]}"
    [ -f "$CARRY/fallback-sysroot.tar.xz" ] || { fail "info: the module does not load, and the carry has no fallback-sysroot.tar.xz to build one"; return 1; }
    root=$CARRY/sysroot # beside lib/ (runtime-libs): the sysroot's runtime libraries are links to ../(..)/lib/<soname>
    mkdir -p "$root"
    if ! tar -C "$root" -xJf "$CARRY/fallback-sysroot.tar.xz" 2>/dev/null; then
        "${PYTHON:-python3}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$CARRY/fallback-sysroot.tar.xz" "$root" || { fail "info: cannot unpack fallback-sysroot.tar.xz"; return 1; }
    fi
    l=$root/usr/lib/x86_64-linux-gnu
    ln -sf /lib/x86_64-linux-gnu/libz.so.1 "$l/libz.so" # zlib1g-dev's link is absolute, into Debian's /lib
    export PKG_CONFIG_PATH=$l/pkgconfig:$l/openblas-pthread/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
    if ! command -v pkg-config >/dev/null 2>&1 && [ -x "$root/usr/bin/pkgconf" ]; then # Meson finds packages with it
        mkdir -p "$CARRY/bin"
        printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$l" "$root/usr/bin/pkgconf" >"$CARRY/bin/pkg-config"
        chmod +x "$CARRY/bin/pkg-config"
        export PATH=$CARRY/bin:$PATH
    fi
    if [ ! -e "$CUDA_HOME/include/cudnn.h" ] && [ -z "${MPT_CUDNN_ROOT:-}" ]; then
        w=$("${PYTHON:-false}" -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
        if [ -n "$w" ] && [ -e "$w/include/cudnn.h" ]; then
            mkdir -p "$CARRY/cudnn/lib"
            for so in "$w"/lib/libcudnn*.so.*; do b=$(basename "$so"); ln -sf "$so" "$CARRY/cudnn/lib/$b"; ln -sf "$so" "$CARRY/cudnn/lib/${b%%.so.*}.so"; done
            ln -sfn "$w/include" "$CARRY/cudnn/include"
            export MPT_CUDNN_ROOT=$CARRY/cudnn
        fi
    fi
    local out=$ROOT/build-gpu-fallback rc=0
    LIBRARY_PATH=$l:$l/openblas-pthread meson_build "$out" 90 "$(limit_for fallback)" "${targets[@]}" || rc=$?
    if [ "$rc" != 0 ]; then fail "info: fallback build $(why "$rc") (build.log)"; return 1; fi
    for t in "${targets[@]}"; do cp -f "$out/$t" "$BIN/$t"; done
    MPT_LD=$l:$l/openblas-pthread${MPT_CUDNN_ROOT:+:$MPT_CUDNN_ROOT/lib}:$MPT_LD
    printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$MPT_LD" "$BIN/tools/mptrain" >"$WORK/bin/mptrain"
    note "fallback build: ${targets[*]} rebuilt here (-Dgpu_arch=90)"
}

# ---- info ---------------------------------------------------------------------------------------------------------
stage_info() {
    say "info: mptrain info"
    local rc=0
    : >"$WORK/info.txt"
    runlim "$(limit_for info)" "$WORK/info.txt" "$WORK/bin/mptrain" info || rc=$?
    if [ "$MODE" = prebuilt ] && { [ "$rc" -gt 1 ] || grep -Eq 'loadable: +no' "$WORK/info.txt"; }; then
        note "info: the prebuilt module does not load (rc $rc): $(grep -E 'loadable: +no' "$WORK/info.txt" | head -n 1 | cut -c1-300)"
        if fallback_build; then
            rc=0
            : >"$WORK/info.txt"
            runlim "$(limit_for info)" "$WORK/info.txt" "$WORK/bin/mptrain" info || rc=$?
        fi
    fi
    cat "$WORK/info.txt"
    [ "$rc" = 0 ] || fail "info: mptrain info $(why "$rc")"
    if grep -Eq '^ +usable: +no' "$WORK/info.txt"; then
        fail "info: mptrain sees no usable GPU: $(grep -E '^ +usable: +no' "$WORK/info.txt" | head -n 1 | sed -E 's/^ *usable: *no:? *//')"
    fi
}

# ---- test: one process per Check test case -----------------------------------------------------------------------
run_case() { # PROGRAM TCASE SECONDS
    local log="$WORK/test/$1-${2// /_}.log" t0=$SECONDS rc=0 ok bad
    printf '%s / %s (limit %s s)\n' "$1" "$2" "$3" >"$log"
    (cd "$BIN/tests" && PUBLISHING=0 CK_RUN_CASE="$2" CK_TAP_LOG_FILE_NAME=- OPENBLAS_NUM_THREADS=1 \
        LD_LIBRARY_PATH=$MPT_LD runlim "$3" "$log" "./$1") || rc=$?
    ok=$(grep -c '^ok ' "$log") bad=$(grep -c '^not ok ' "$log")
    note "$(printf '  %-34s %4ds  %-20s %3d ok, %d not ok' "$1/$2" "$((SECONDS - t0))" "$(why "$rc")" "$ok" "$bad")"
    return "$rc"
}
stage_test() {
    local list p tc t pids=() rc=0 stage_lim timing_lim par_lim
    list=$(tcases)
    [ -n "$list" ] || { fail "test: no test cases found in tests/ for programs '$CUDA_PROGRAMS'"; return; }
    stage_lim=$(limit_for test)
    timing_lim=$(awk -F'\t' '$2 == "timing" {print $3}' <<<"$list" | sort -n | tail -n 1)
    timing_lim=${timing_lim:-0}
    [ "$timing_lim" -gt "$TIMING_CAP" ] && timing_lim=$TIMING_CAP
    par_lim=$((stage_lim - timing_lim))
    say "test: $(awk -F'\t' '$2 != "timing"' <<<"$list" | wc -l) test cases at once (each <= $par_lim s), then timing alone"
    note "cuda suite (one process per test case; logs test/<program>-<case>.log):"
    while IFS=$'\t' read -r p tc t; do
        [ "$tc" = timing ] && continue
        [ -x "$BIN/tests/$p" ] || { note "  $p: not built"; fail "test: $p is missing"; continue; }
        run_case "$p" "$tc" $((t < par_lim ? t : par_lim)) &
        pids+=($!)
    done <<<"$list"
    local next=$((SECONDS + PUBLISH_EVERY)) running=1
    while [ "$running" = 1 ]; do # publish while the cases run
        running=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
        [ "$running" = 1 ] || break
        if [ "$SECONDS" -ge "$next" ]; then publish; next=$((SECONDS + PUBLISH_EVERY)); fi
        sleep 0.5
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done # never a bare wait: it would wait for the tee too
    while IFS=$'\t' read -r p tc t; do
        [ "$tc" = timing ] || continue
        [ -x "$BIN/tests/$p" ] || continue
        run_case "$p" "$tc" "$(limit_for test "$timing_lim")" || rc=1
    done <<<"$list"
    # the agreement lines the programs print (test_cuda: e2e ...) and every failure
    grep -h -E '^test_cuda[a-z0-9_]*: |^not ok|FAILED|fatal|stopped after' "$WORK"/test/*.log 2>/dev/null | head -n 80 >"$WORK/test-digest.txt"
    cat "$WORK/test-digest.txt"
    [ "$rc" = 0 ] || fail "test: the cuda suite failed (summary.txt: the test cases; test/*.log)"
}

# ---- tc: cuBLASLt against the CPU's Tensor Core summation model (tests/test_cuda_tc.c) ----------------------------
stage_tc() {
    local rc=0 log=$WORK/test/$TC_PROGRAM-tc_accum.log
    [ -x "$BIN/tests/$TC_PROGRAM" ] || { fail "tc: $TC_PROGRAM is missing"; return; }
    say "tc: $TC_PROGRAM: the mlp's GEMMs through cuBLASLt against the CPU's Tensor Core model; 20 training steps"
    note "tc (tc.md; the log: test/$TC_PROGRAM-tc_accum.log):"
    export MPT_TC_REPORT=$WORK/tc.md
    run_case "$TC_PROGRAM" tc_accum "$(limit_for tc)" || rc=$?
    unset MPT_TC_REPORT
    grep -h "^$TC_PROGRAM: " "$log" 2>/dev/null | head -n 80
    [ "$rc" = 0 ] || fail "tc: $TC_PROGRAM $(why "$rc") ($log)"
    [ -s "$WORK/tc.md" ] || fail "tc: $TC_PROGRAM wrote no report (tc.md)"
}

# metrics_values FILE: the CSV without its run_id column (found by the header's name; the file as it is without one).
metrics_values() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "run_id") drop = i }
             { out = ""; for (i = 1; i <= NF; i++) if (i != drop) out = out (out == "" ? "" : ",") $i; print out }' "$1"
}

# ---- graph --------------------------------------------------------------------------------------------------------
stage_graph() {
    local v d rc name env graph same model args base
    mkdir -p "$WORK/graph"
    # The variants, alternating: the step graph on and off (must agree bit for bit), then issue 31 A's new paths,
    # each opt-in by its environment variable until a GPU run has checked it (docs/cuda.md), and on again. Fields:
    # name|environment|--cuda-graph|= (must give the model's on run's metrics.csv, run_id aside: the same
    # arithmetic in fewer kernels) or ~ (may differ in the last bits: another summation order or another
    # algorithm; its loss and accuracy are reported)|model (default mlp)|more train options. Runs go to
    # graph/<model>-fp16-<name>. The telemetry rows: the instruments only read (the on run's metrics.csv), their
    # cost is reported apart from the epoch times (summary.json telemetry_time_s), on the host or on the device.
    local -a variants=("on||on|=" "off||off|=" "update|MPT_CUDA_FUSED_UPDATE=1|on|=" "loss|MPT_CUDA_FUSED_LOSS=1|on|="
        "drelu|MPT_CUDA_FUSED_DRELU_BGRAD=1|on|="
        "wgrad|MPT_CUDA_WGRAD_STREAM=1|on|=" "bgilp|MPT_CUDA_BIAS_GRAD_ILP=1|on|="
        "fused|MPT_CUDA_FUSED_UPDATE=1 MPT_CUDA_FUSED_LOSS=1 MPT_CUDA_FUSED_DRELU_BGRAD=1 MPT_CUDA_WGRAD_STREAM=1 MPT_CUDA_BIAS_GRAD_ILP=1|on|="
        "bgrad|MPT_CUDA_SPLIT_NARROW_BGRAD=1|on|~" "tele||on|=|mlp|--telemetry 50"
        "tele-dev|MPT_CUDA_DEVICE_TELEMETRY=1|on|=|mlp|--telemetry 50" "on-2||on|=" "on||on|=|lenet5"
        "find|MPT_CUDA_CONV_FIND=1|on|~|lenet5" "chsum|MPT_CUDA_SPLIT_CHANNEL_SUM=1|on|~|lenet5")
    say "graph: mptrain train --precision fp16 --batch-size 128 --epochs $GE --device cuda: ${#variants[@]} runs ($(printf '%s ' "${variants[@]%%|*}"))"
    for v in "${variants[@]}"; do
        IFS='|' read -r name env graph same model args <<<"$v"
        model=${model:-mlp}
        d=$WORK/graph/$model-fp16-$name
        rc=0
        runlim "$(limit_for graph $((CAP[graph] / ${#variants[@]})))" "$d.txt" env $env "$WORK/bin/mptrain" train \
            --model "$model" --precision fp16 --batch-size 128 --epochs "$GE" --device cuda --data "$MPT_DATA" \
            --progress off --cuda-graph "$graph" $args --out "$d" || rc=$?
        [ "$rc" = 0 ] || fail "graph: $model ${env:-(no variable)} --cuda-graph $graph $(why "$rc"): graph/$model-fp16-$name.txt"
    done
    base=$WORK/graph/mlp-fp16-on/metrics.csv
    if [ -f "$base" ] && [ -f "$WORK/graph/mlp-fp16-off/metrics.csv" ]; then
        # every column but run_id (each run's own id, tools/run.c: the two runs must differ there)
        cmp -s <(metrics_values "$base") <(metrics_values "$WORK/graph/mlp-fp16-off/metrics.csv") ||
            fail "graph: metrics.csv differs between --cuda-graph on and off (run_id aside): the graph changed the math"
    fi
    for v in "${variants[@]:2}"; do
        IFS='|' read -r name env graph same model args <<<"$v"
        model=${model:-mlp}
        base=$WORK/graph/$model-fp16-on/metrics.csv
        d=$WORK/graph/$model-fp16-$name/metrics.csv
        [ "$same" = "=" ] && [ "$d" != "$base" ] && [ -f "$base" ] && [ -f "$d" ] || continue
        cmp -s <(metrics_values "$base") <(metrics_values "$d") ||
            fail "graph: metrics.csv differs with ${env:-no variable} from the on run (run_id aside): the fused path changed the math"
    done
    "${PYTHON:-python3}" - "$WORK/graph" "${variants[@]}" >"$WORK/graph.md" 2>&1 <<'PY'
import json, statistics, sys
root = sys.argv[1]
print("| model | run | environment | options | --cuda-graph | metrics.csv | median epoch after the first, CUDA events (ms) | per step (us, 469 steps) | host clock (ms) | instruments (s, whole run) | final test loss | final test accuracy | status | opt-in calls (summary.json cuda_opt_in_calls) |")
print("|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|")
for v in sys.argv[2:]:
    name, env, g, same, *rest = v.split("|")
    model = rest[0] if rest and rest[0] else "mlp"
    opts = rest[1] if len(rest) > 1 and rest[1] else "-"
    rule = "the on run's" if same == "=" else "may differ (other summation order or algorithm)"
    try:
        j = json.load(open("%s/%s-fp16-%s/summary.json" % (root, model, name)))
        ev, host = j.get("epoch_gpu_times_s") or [], j.get("epoch_times_s") or []
        m = statistics.median(ev[1:]) if len(ev) > 1 else float("nan")
        h = statistics.median(host[1:]) if len(host) > 1 else float("nan")
        loss, acc = j.get("final_test_loss", float("nan")), j.get("final_test_accuracy", float("nan"))
        tel = j.get("telemetry_time_s")
        calls = j.get("cuda_opt_in_calls") or {}
        # a variable set to 1 whose path no call took: the variable was not read, or the path does not apply here
        unused = [e.split("=")[0] for e in env.split() if e.endswith("=1") and not calls.get(e.split("=")[0])]
        taken = ", ".join("%s %d" % (k.replace("MPT_CUDA_", ""), n) for k, n in sorted(calls.items())) or "-"
        if unused:
            taken += " **NOT TAKEN: %s**" % ", ".join(unused)
        print("| %s | %s | %s | %s | %s | %s | %.3f | %.2f | %.3f | %s | %.6g | %.4f | %s | %s |" % (model, name, env or "-",
              opts, g, rule, 1e3 * m, 1e6 * m / 469, 1e3 * h, "%.3f" % tel if isinstance(tel, (int, float)) else "-",
              loss, acc, j.get("cuda_graph", {}).get("status", "?"), taken))
    except (OSError, ValueError, TypeError) as e:
        print("| %s | %s | %s | %s | %s | %s | no summary.json (%s) | | | | | | | |" % (model, name, env or "-", opts, g,
              rule, e.__class__.__name__))
PY
    cat "$WORK/graph.md"
}

# ---- compare ------------------------------------------------------------------------------------------------------
stage_compare() {
    local m rc
    for m in mlp lenet5; do
        say "compare: mptrain compare --model $m --device cuda --epochs $EPOCHS"
        rc=0
        runlim "$(limit_for compare $((CAP[compare] * 2 / 5)))" "$WORK/compare-$m.txt" "$WORK/bin/mptrain" compare --model "$m" \
            --device cuda --epochs "$EPOCHS" --data "$MPT_DATA" --progress off --out "$WORK/compare-$m" || rc=$?
        tail -n 12 "$WORK/compare-$m.txt"
        [ "$rc" = 0 ] || fail "compare: $m $(why "$rc")"
    done
}

# ---- speedrun: the recipe's clock (issue 34), beside PyTorch's, same call ------------------------------------------
stage_speedrun() {
    local rc=0
    say "speedrun: mptrain speedrun --device cuda --seeds 10"
    runlim "$(limit_for speedrun $((CAP[speedrun] * 2 / 5)))" "$WORK/speedrun.txt" "$WORK/bin/mptrain" speedrun --device cuda \
        --seeds 10 --data "$MPT_DATA" --progress off --out "$WORK/speedrun" || rc=$?
    grep -A 40 '^mptrain speedrun:' "$WORK/speedrun.txt" | head -n 40
    [ "$rc" = 0 ] || fail "speedrun: mptrain speedrun $(why "$rc") (speedrun.txt)"
    if [ -z "$PYTHON" ]; then fail "speedrun: no python3 to run bench/speedrun_pytorch.py"; return; fi
    rc=0
    say "speedrun: bench/speedrun_pytorch.py --device cuda --precisions bf16,fp16 --modes eager,fused,graph,compile --seeds $SR_PT_SEEDS"
    runlim "$(limit_for speedrun $((CAP[speedrun] * 3 / 5)))" "$WORK/speedrun-pytorch.txt" "$PYTHON" bench/speedrun_pytorch.py \
        --mptrain "$WORK/bin/mptrain" --device cuda --precisions bf16,fp16 --modes eager,fused,graph,compile \
        --seeds "$SR_PT_SEEDS" --data "$MPT_DATA" --json "$WORK/speedrun-pytorch.json" || rc=$?
    grep -A 12 '^| precision | mode' "$WORK/speedrun-pytorch.txt"
    [ "$rc" = 0 ] || fail "speedrun: bench/speedrun_pytorch.py $(why "$rc") (speedrun-pytorch.txt)"
}

# ---- bench: against PyTorch ---------------------------------------------------------------------------------------
stage_bench() {
    local rc=0 l
    l=$(limit_for bench)
    say "bench: bench/run.sh gpu --epochs $EPOCHS --repeats $REPEATS --torch-modes $TORCH_MODES (limit $l s; each run at most 90 s)"
    PYTHON=$PYTHON MPT_DATA=$MPT_DATA runlim "$l" "$WORK/bench.txt" bench/run.sh gpu --mptrain "$WORK/bin/mptrain" \
        --run-timeout 90 --epochs "$EPOCHS" --repeats "$REPEATS" --models mlp,lenet5 --torch-modes "$TORCH_MODES" \
        --out "$WORK/bench" --no-docs || rc=$?
    tail -n 30 "$WORK/bench.txt"
    [ "$rc" = 0 ] || fail "bench: bench/run.sh gpu $(why "$rc") (bench.txt)"
    summarize_bench # also when run.sh was stopped: the runs that finished
}

# ---- compile: against torch.compile -------------------------------------------------------------------------------
stage_compile() {
    local rc=0 l
    l=$(limit_for compile)
    say "compile: bench/run.sh gpu --torch-modes compile --epochs $EPOCHS (limit $l s; each run at most 150 s)"
    PYTHON=$PYTHON MPT_DATA=$MPT_DATA runlim "$l" "$WORK/compile.txt" bench/run.sh gpu --mptrain "$WORK/bin/mptrain" \
        --run-timeout 150 --epochs "$EPOCHS" --repeats 1 --models mlp,lenet5 --torch-modes compile --out "$WORK/bench-compile" \
        --no-docs || rc=$?
    tail -n 30 "$WORK/compile.txt"
    [ "$rc" = 0 ] || fail "compile: bench/run.sh gpu --torch-modes compile $(why "$rc") (compile.txt)"
    summarize_bench
}

# summarize_bench: bench/summary.md over the bench stage's runs and the compile stage's (whichever ran), so the results
# page has mptrain against every PyTorch mode measured in this call and against the best of them.
summarize_bench() {
    local main=$WORK/bench also=()
    [ -d "$WORK/bench/runs" ] || main=$WORK/bench-compile
    [ "$main" = "$WORK/bench" ] && [ -d "$WORK/bench-compile/runs" ] && also=(--also "$WORK/bench-compile")
    [ -d "$main/runs" ] || return 0
    "${PYTHON:-python3}" bench/summarize.py "$main" gpu "${also[@]}" >"$WORK/bench-summary.md.tmp" 2>>"$WORK/summarize.err" &&
        mv -f "$WORK/bench-summary.md.tmp" "$WORK/bench-summary.md" || fail "summarising the benchmark runs failed (summarize.err)"
}

# ---- sweep: the mlp's step across widths and batches ---------------------------------------------------------------
stage_sweep() {
    local rc=0 l
    l=$(limit_for sweep)
    [ -x "$BIN/bench/mlp_sweep" ] || { fail "sweep: $BIN/bench/mlp_sweep is missing (bench/gpu.sh --prebuild builds it)"; return; }
    say "sweep: bench/mlp_sweep --device cuda (limit $l s)"
    LD_LIBRARY_PATH=$MPT_LD runlim "$l" "$WORK/sweep.md" "$BIN/bench/mlp_sweep" --device cuda --hidden 512,2048,8192 \
        --batch 128,1024,4096 --precisions fp32,tf32,bf16,fp16,fp8 --steps 10 --rounds 3 --warmup 2 \
        --budget $((l > 30 ? l - 20 : 10)) || rc=$?
    tail -n 50 "$WORK/sweep.md"
    [ "$rc" = 0 ] || fail "sweep: bench/mlp_sweep $(why "$rc") (sweep.md)"
}

# ---- dp: data-parallel with one NCCL rank through mpirun -------------------------------------------------------------
stage_dp() {
    local rc=0 l run=() o=$WORK/dp ompi=$CARRY/ompi ld
    l=$(limit_for dp)
    mkdir -p "$o"
    if [ "$MODE" = prebuilt ]; then
        if [ ! -x "$ompi/usr/bin/orterun" ]; then
            fail "dp: no Open MPI in the carry ($CARRY/ompi-runtime.tar.xz: bench/gpu.sh --prebuild packs it)"; return
        fi
        ld=$ompi/usr/lib/x86_64-linux-gnu
        # relocated: OPAL_PREFIX for Open MPI's own files, OPAL_SYSCONFDIR for its /etc, PMIx's plugins by path
        run=(env OPAL_PREFIX="$ompi/usr" OPAL_SYSCONFDIR="$ompi/etc/openmpi" PMIX_PREFIX="$ld/pmix2"
             PMIX_MCA_mca_base_component_path="$ld/pmix2/lib/pmix" LD_LIBRARY_PATH="$ld:$MPT_LD" "$ompi/usr/bin/orterun")
    elif command -v mpirun >/dev/null 2>&1; then
        run=(env LD_LIBRARY_PATH="$MPT_LD" mpirun)
    else
        fail "dp: no mpirun on this machine"; return
    fi
    # one rank on this machine: it inherits this environment (MPT_CUDA_MODULE, MPT_REQUIRE_CUDA, the library path)
    run+=(-np 1 --mca btl self,vader --mca pml ob1 --mca mca_base_component_show_load_errors 0)
    say "dp: mpirun -np 1 mptrain train --data-parallel --device cuda --model mlp --precision bf16 --epochs 2 (limit $l s)"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 runlim $((l / 2)) "$o/dp.txt" "${run[@]}" "$BIN/tools/mptrain" train \
        --data-parallel --device cuda --model mlp --precision bf16 --epochs 2 --data "$MPT_DATA" --progress off --out "$o/dp" || rc=$?
    tail -n 12 "$o/dp.txt"
    [ "$rc" = 0 ] || { fail "dp: mpirun -np 1 mptrain train --data-parallel $(why "$rc") (dp/dp.txt)"; return; }
    rc=0
    runlim "$(limit_for dp $((l / 2)))" "$o/single.txt" "$WORK/bin/mptrain" train --device cuda --cuda-graph off --model mlp \
        --precision bf16 --epochs 2 --data "$MPT_DATA" --progress off --out "$o/single" || rc=$?
    [ "$rc" = 0 ] || { fail "dp: the same training without --data-parallel $(why "$rc") (dp/single.txt)"; return; }
    if cmp -s <(metrics_values "$o/dp/metrics.csv") <(metrics_values "$o/single/metrics.csv"); then
        note "dp: metrics.csv of mpirun -np 1 --data-parallel and of the same training without it (graph off): identical"
    else
        note "dp: metrics.csv of mpirun -np 1 --data-parallel and of the same training without it DIFFER (one rank: expected identical; dp/*/metrics.csv)"
    fi
    grep -h 'data-parallel:' "$o/dp.txt" | head -n 3 >>"$SUMMARY"
}

# ---- memcheck: the cuda suite under compute-sanitizer ---------------------------------------------------------------
stage_memcheck() {
    local l san p tc t pids=() rc=0 ok log
    l=$(limit_for memcheck)
    san=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer 2>/dev/null | head -n 1)
    [ -n "$san" ] || { fail "memcheck: no compute-sanitizer (in PATH or $CUDA_HOME/bin)"; return; }
    mkdir -p "$WORK/memcheck"
    say "memcheck: $san --tool memcheck over the cuda suite, every test case at once (each at most $((l - 5)) s)"
    note "memcheck (compute-sanitizer --tool memcheck; logs memcheck/<program>-<case>.log):"
    while IFS=$'\t' read -r p tc t; do
        [ -x "$BIN/tests/$p" ] && [ "$tc" != timing ] || continue # timing: the sanitizer's slowdown breaks its clocks
        log="$WORK/memcheck/$p-${tc// /_}.log"
        (cd "$BIN/tests" && PUBLISHING=0 RUNLIM_DIAGNOSE=0 CK_RUN_CASE="$tc" CK_TAP_LOG_FILE_NAME=- CK_FORK=no OPENBLAS_NUM_THREADS=1 \
            LD_LIBRARY_PATH=$MPT_LD runlim $((l - 5)) "$log" "$san" --tool memcheck --error-exitcode 99 \
            --target-processes all "./$p") &
        pids+=("$!:$p/$tc:$log")
    done <<<"$(tcases)"
    for t in "${pids[@]}"; do
        p=${t%%:*} rc=0
        wait "$p" || rc=$?
        tc=${t#*:}; log=${tc#*:}; tc=${tc%%:*}
        ok=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -n 1)
        note "$(printf '  %-34s %-28s %s' "$tc" "$(why "$rc")" "${ok:-no ERROR SUMMARY line}")"
        case "$rc" in
            0) ;;
            99) fail "memcheck: $tc: compute-sanitizer found memory errors (memcheck/$(basename "$log"))" ;;
            124 | 125) ;; # did not finish under memcheck in the stage's time: reported above, not an error found
            *) fail "memcheck: $tc $(why "$rc") under compute-sanitizer (memcheck/$(basename "$log"))" ;;
        esac
    done
}

# ---- the results page (rewritten after every stage) --------------------------------------------------------------
results_page() {
    printf '# GPU run of %s (bench/gpu.sh)\n\n' "$DATE"
    printf 'Command: `bench/gpu.sh %s` (%s mode, stages %s, epochs %s, repeats %s, budget %s s); MPT_REQUIRE_CUDA=1.\n\n' \
        "$ARGS" "$MODE" "$STAGES" "$EPOCHS" "$REPEATS" "$BUDGET"
    if [ -f "$WORK/machine.txt" ]; then printf '## Machine\n\n```\n'; cat "$WORK/machine.txt"; printf '```\n\n'; fi
    if [ -f "$WORK/info.txt" ]; then printf '## mptrain info\n\n```\n'; cat "$WORK/info.txt"; printf '```\n\n'; fi
    if [ -n "$(ls "$WORK"/test/*.log 2>/dev/null)" ]; then
        printf '## cuda suite (one process per test case)\n\n```\n'
        grep -A200 '^cuda suite' "$SUMMARY" | grep '^  '
        printf '\n'
        cat "$WORK/test-digest.txt" 2>/dev/null
        printf '```\n\n'
    fi
    if [ -s "$WORK/tc.md" ]; then
        printf '## Tensor Core summation: cuBLASLt against the CPU'"'"'s model (tests/test_cuda_tc.c)\n\n'
        cat "$WORK/tc.md"; printf '\n'
    fi
    if [ -f "$WORK/graph.md" ]; then
        printf '## The step as one CUDA Graph: mlp fp16, batch 128, %s epochs (--cuda-graph on / off)\n\n' "$GE"
        cat "$WORK/graph.md"; printf '\n'
    fi
    local m
    for m in mlp lenet5; do
        if [ -f "$WORK/compare-$m/report.md" ]; then
            printf '## mptrain compare --model %s --device cuda --epochs %s\n\n' "$m" "$EPOCHS"
            sed 's/^#/###/' "$WORK/compare-$m/report.md"; printf '\n'
        fi
    done
    if [ -f "$WORK/speedrun/report.md" ]; then
        printf '## Speedrun: mptrain speedrun --device cuda --seeds 10\n\n'
        sed 's/^#/###/' "$WORK/speedrun/report.md"; printf '\n'
    fi
    if grep -q '^| precision | mode' "$WORK/speedrun-pytorch.txt" 2>/dev/null; then
        printf '## Speedrun in PyTorch (bench/speedrun_pytorch.py, the same recipe, same call)\n\n'
        grep -A 12 '^| precision | mode' "$WORK/speedrun-pytorch.txt"; printf '\n'
        grep '^process:' "$WORK/speedrun-pytorch.txt"; printf '\n'
    fi
    if [ -s "$WORK/bench-summary.md" ]; then
        printf '## Benchmark against PyTorch (bench/run.sh gpu%s)\n\n' "$([ -d "$WORK/bench-compile/runs" ] && echo '; the compile stage'"'"'s runs included')"
        sed 's/^#/###/' "$WORK/bench-summary.md"; printf '\n'
    fi
    if [ -s "$WORK/sweep.md" ]; then
        printf '## The mlp step across widths and batches (bench/mlp_sweep)\n\n'
        sed 's/^# /    /' "$WORK/sweep.md"; printf '\n'
    fi
    if [ -f "$WORK/dp/dp.txt" ]; then
        printf '## Data-parallel through mpirun, one NCCL rank (mlp bf16, 2 epochs)\n\n```\n'
        grep -E '^dp:|data-parallel:' "$SUMMARY" 2>/dev/null
        tail -n 8 "$WORK/dp/dp.txt"
        printf '```\n\n'
    fi
    if [ -d "$WORK/memcheck" ]; then
        printf '## compute-sanitizer memcheck of the cuda suite\n\n```\n'
        sed -n '/^memcheck (compute-sanitizer/,/^[a-z]/p' "$SUMMARY" | grep '^  '
        printf '```\n\n'
    fi
    if [ ${#STAGE_TIMES[@]} -gt 0 ]; then
        printf '## Stage times\n\nWall seconds of each stage in this call, beside its limit.\n\n'
        printf '| stage | measured (s) | limit (s) | result |\n|---|---:|---:|---|\n'
        printf '%s\n' "${STAGE_TIMES[@]}"; printf '\n'
    fi
    if [ ${#FAILED[@]} -gt 0 ]; then printf '## Failed stages\n\n'; printf -- '- %s\n' "${FAILED[@]}"; fi
}

# ---- the stages ---------------------------------------------------------------------------------------------------
say "bench/gpu.sh $ARGS: $MODE mode, budget $BUDGET s, output in $DEST"
# page in PyTorch (GBs of libraries) for the bench stage, in the background, off the GPU
[ -n "$PYTHON" ] && { want bench || want compile; } && (setsid timeout 120 "$PYTHON" -c 'import torch' >/dev/null 2>&1 </dev/null &)
for s in "${ORDER[@]}"; do
    t_stage=$SECONDS
    n_failed=${#FAILED[@]}
    if [ "$s" != machine ] && [ "$s" != setup ] && [ "$s" != build ] && [ ! -x "$BIN/tools/mptrain" ]; then
        fail "$s: not run: $BIN/tools/mptrain does not exist"
    elif [ "$(left)" -lt 5 ]; then
        fail "$s: not run: the budget is spent"
    else
        "stage_$s"
    fi
    result=ok
    [ ${#FAILED[@]} -gt "$n_failed" ] && result="FAILED: ${FAILED[*]:$n_failed}"
    stage_end "$s" "$t_stage" "$result"
done
say "done in $((SECONDS - T0)) s: $DEST/gpu-$DATE.md (commit it as bench/results/gpu-$DATE.md)"
cat "$SUMMARY"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'bench/gpu.sh: %d failure(s):\n' "${#FAILED[@]}"
    printf '  - %s\n' "${FAILED[@]}"
    exit 1
fi
exit 0
