#!/usr/bin/env bash
# bench/gpu.sh - everything a GPU machine is needed for, in one command (issue 12, part C):
#
#   1. build    a release build in build-gpu (-Dgpu_arch=80,90, cuDNN from MPT_CUDNN_ROOT)
#   2. test     the cuda suite with MPT_REQUIRE_CUDA=1: no usable GPU is a failure, never a skip
#   3. info     mptrain info (device, driver, libraries)
#   4. compare  mptrain compare --device cuda of mlp and lenet5 on real Fashion-MNIST in fp32, tf32, fp16, bf16
#   5. graph    the step as one CUDA Graph (docs/benchmarks.md, "GPU: the step graph"): mptrain train --model mlp
#               --precision fp16 --batch-size 128 (469 steps an epoch) with --cuda-graph on and off, alternating,
#               --repeats times; median epoch time after the first epoch (which records the graph); the two runs'
#               metrics.csv must be identical (bit-identical losses and scales), else the stage fails
#   6. bench    bench/run.sh gpu: mptrain against PyTorch 2.x on the same GPU (fp32 with TF32 off, tf32, fp16 +
#               GradScaler, bf16 autocast; PyTorch timed with CUDA events after warm-up; medians over repeats)
#   7. results  gpu-<date>.md: the GPU, driver, CUDA/cuDNN/PyTorch versions, the commands, the cuda suite's
#               result with its CPU-vs-GPU agreement lines, the compare tables and the benchmark summary, ready
#               to be committed as bench/results/gpu-<date>.md
#
# Usage (from the project root, on the GPU machine, after ../shared/gpu/prepare.sh filled .gpu/ here):
#   bench/gpu.sh [--quick] [--stages LIST] [--epochs N] [--repeats R] [--out DIR]
#     --stages LIST  comma-separated subset of build,test,info,compare,graph,bench (default: all; results always run);
#                    a later call on the same warm machine can continue where a command's 10-minute limit hit
#     --epochs N     epochs of compare and of each benchmark run (default 3)
#     --repeats R    benchmark repeats, mptrain and PyTorch alternating (default 2)
#     --quick        compare and bench with 1 epoch and 1 repeat (a smoke run, about 3 minutes)
#     --out DIR      where everything goes (default $OUT, the device tool's folder, else runs/gpu-<UTC time>)
# What comes back from a device machine is at most 8 files, two folders deep: DIR receives gpu.log (all output),
# test_cuda.log, info.txt, gpu-<date>.md and gpu-runs.tar.gz (every run directory without its checkpoints); all
# of it stays in runs/gpu-<UTC time>/ too.
#
# Environment: PYTHON (default: python3 on PATH, which must import torch with CUDA), MPT_DATA and
# MPT_CUDNN_ROOT (set by .gpu/device-env.sh, sourced here when present), GPU_ARCH (default 80,90).
# Every stage prints its start and elapsed time; a failing stage is reported and the next ones still run (a GPU
# lease is short: collect everything), and the script exits 1 at the end naming the stages that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T0=$(date +%s)
ARGS="$*"

say() { printf '==> [%4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
die() { printf 'bench/gpu.sh: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; }

STAGES=build,test,info,compare,graph,bench EPOCHS=3 REPEATS=2 QUICK=0 DEST=${OUT:-}
need_value() { [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || die "option '$1' needs a value"; }
is_int() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "option '$1': expected a positive integer, found '$2'"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --stages) need_value "$@"; STAGES=$2; shift 2 ;;
        --epochs) need_value "$@"; is_int "$1" "$2"; EPOCHS=$2; shift 2 ;;
        --repeats) need_value "$@"; is_int "$1" "$2"; REPEATS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --out) need_value "$@"; DEST=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
done
IFS=, read -r -a STAGE_LIST <<<"$STAGES"
for s in "${STAGE_LIST[@]}"; do
    case "$s" in build | test | info | compare | graph | bench) ;; *) die "--stages: expected names from build,test,info,compare,graph,bench, found '$s'" ;; esac
done
want() { [[ ",$STAGES," == *",$1,"* ]]; }
[ "$QUICK" = 1 ] && EPOCHS=1 REPEATS=1

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
DATE=$(date -u +%Y-%m-%d)
WORK=$ROOT/runs/gpu-$STAMP
DEST=${DEST:-$WORK}
mkdir -p "$WORK" "$DEST" || die "cannot create $WORK or $DEST"
exec > >(tee -a "$DEST/gpu.log") 2>&1

export MPT_REQUIRE_CUDA=1
if [ -f .gpu/device-env.sh ]; then
    say "sourcing .gpu/device-env.sh (Check, OpenBLAS, jansson, Fashion-MNIST unpacked under /opt/mptdeps)"
    # shellcheck disable=SC1091
    source .gpu/device-env.sh || die ".gpu/device-env.sh failed"
    export MPT_NO_APT=1
else
    say "no .gpu/device-env.sh: using the packages installed on this machine (run ../shared/gpu/prepare.sh on a development machine to carry them)"
fi
PYTHON=${PYTHON:-$(command -v python3 || true)}
DATA=${MPT_DATA:-/usr/share/datasets/fashion-mnist}
BUILD=build-gpu
MPTRAIN=$ROOT/$BUILD/tools/mptrain
GPU_ARCH=${GPU_ARCH:-80,90}
MESON_ARGS=(-Dgpu_arch="$GPU_ARCH" -Dcuda=enabled) # a GPU machine without the toolkit fails here, never builds CPU-only
[ -n "${MPT_CUDNN_ROOT:-}" ] && MESON_ARGS+=(-Dcudnn_root="$MPT_CUDNN_ROOT")
FAILED=()
fail() { FAILED+=("$1"); printf 'bench/gpu.sh: STAGE FAILED: %s\n' "$1" >&2; }

# ---- the machine ----------------------------------------------------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 ||
    fail "machine: nvidia-smi is missing or lists no GPU"
cudnn_header=${MPT_CUDNN_ROOT:-/usr/local/cuda}/include/cudnn_version.h
{
    printf 'date: %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
    printf 'commit: %s%s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
        "$([ -n "$(git status --porcelain --untracked-files=no -- engine kernels models datasets tools 2>/dev/null)" ] && echo ' + uncommitted changes')"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv,noheader 2>&1 | sed 's/^/GPU: /'
    printf 'nvcc: %s\n' "$(nvcc --version 2>&1 | grep -o 'release [0-9.]*, V[0-9.]*' || echo missing)"
    if [ -f "$cudnn_header" ]; then
        printf 'cuDNN (headers): %s\n' "$(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{printf "%s%s", sep, $3; sep="."}' "$cudnn_header")"
    else
        printf 'cuDNN (headers): not found at %s\n' "$cudnn_header"
    fi
    "$PYTHON" -c 'import torch; print("PyTorch %s, CUDA %s, cuDNN %s, GPU visible: %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available()))' 2>&1 | sed 's/^/python: /'
    printf 'CPU: %s, %s cores\n' "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')" "$(nproc)"
} >"$WORK/machine.txt" 2>&1
cat "$WORK/machine.txt"

# ---- 1. build ---------------------------------------------------------------------------------------------------
if want build; then
    say "build: meson setup $BUILD --buildtype=release ${MESON_ARGS[*]}; ninja"
    if { [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release "${MESON_ARGS[@]}"; } &&
        ninja -C "$BUILD" -j"$(nproc)"; then
        say "build: done"
    else
        fail "build"
    fi
fi
[ -x "$MPTRAIN" ] || { fail "build: $MPTRAIN does not exist"; }

# ---- 2. the cuda suite ------------------------------------------------------------------------------------------
if want test && [ -x "$MPTRAIN" ]; then
    say "test: meson test --suite cuda (MPT_REQUIRE_CUDA=1)"
    if meson test -C "$BUILD" --suite cuda --print-errorlogs --timeout-multiplier 2 >"$WORK/meson-test.txt" 2>&1; then
        say "test: the cuda suite passed"
    else
        fail "test: the cuda suite failed"
    fi
    tail -n 15 "$WORK/meson-test.txt"
    cp "$BUILD/meson-logs/testlog.txt" "$WORK/test_cuda.log" 2>/dev/null || cp "$WORK/meson-test.txt" "$WORK/test_cuda.log"
    grep -E '^test_cuda: e2e|^[0-9]+%: Checks|FAILED|skipped' "$WORK/test_cuda.log" | sed 's/^/    /'
fi

# ---- 3. info ----------------------------------------------------------------------------------------------------
if want info && [ -x "$MPTRAIN" ]; then
    say "info: mptrain info"
    "$MPTRAIN" info >"$WORK/info.txt" 2>&1 || fail "info: mptrain info exited $?"
    cat "$WORK/info.txt"
    grep -q '^GPU: none usable' "$WORK/info.txt" && fail "info: mptrain sees no usable GPU"
fi

# ---- 4. compare on Fashion-MNIST --------------------------------------------------------------------------------
if want compare && [ -x "$MPTRAIN" ]; then
    [ -d "$DATA" ] || fail "compare: no Fashion-MNIST at $DATA (MPT_DATA)"
    for m in mlp lenet5; do
        say "compare: mptrain compare --model $m --device cuda --epochs $EPOCHS (fp32, tf32, fp16, bf16)"
        if "$MPTRAIN" compare --model "$m" --device cuda --epochs "$EPOCHS" --data "$DATA" --progress off \
            --out "$WORK/compare-$m" >"$WORK/compare-$m.txt" 2>&1; then
            tail -n 12 "$WORK/compare-$m.txt"
        else
            tail -n 20 "$WORK/compare-$m.txt"
            fail "compare: $m"
        fi
    done
fi

# ---- 5. the step graph: mlp epochs with --cuda-graph on and off ------------------------------------------------
# Epoch times are mptrain's (summary.json epoch_times_s): host clock from an empty stream (the epoch's index upload
# synchronises) to the stream drained at the epoch's end (cudaStreamSynchronize), so they are the GPU's time to
# finish the epoch's work, launch latency included; the first epoch (algorithm selection, the recording) is left out.
if want graph && [ -x "$MPTRAIN" ]; then
    GE=$((EPOCHS < 2 ? 2 : EPOCHS))
    mkdir -p "$WORK/graph"
    say "graph: mptrain train --model mlp --precision fp16 --batch-size 128 --epochs $GE --device cuda, --cuda-graph on and off alternating, $REPEATS repeat(s)"
    for r in $(seq 1 "$REPEATS"); do
        for g in on off; do
            d=$WORK/graph/mlp-fp16-$g-$r
            "$MPTRAIN" train --model mlp --precision fp16 --batch-size 128 --epochs "$GE" --device cuda --data "$DATA" \
                --progress off --cuda-graph "$g" --out "$d" >"$d.txt" 2>&1 || fail "graph: --cuda-graph $g (repeat $r) exited $?"
        done
        cmp -s "$WORK/graph/mlp-fp16-on-$r/metrics.csv" "$WORK/graph/mlp-fp16-off-$r/metrics.csv" ||
            fail "graph: metrics.csv differs between --cuda-graph on and off (repeat $r): the graph changed the math"
    done
    "$PYTHON" - "$WORK/graph" "$REPEATS" >"$WORK/graph.md" <<'PY' || fail "graph: summarising the runs"
import json, statistics, sys
root, repeats = sys.argv[1], int(sys.argv[2])
rows = {}
for g in ("on", "off"):
    times, status = [], "?"
    for r in range(1, repeats + 1):
        try:
            j = json.load(open("%s/mlp-fp16-%s-%d/summary.json" % (root, g, r)))
        except (OSError, ValueError):
            continue
        times += j["epoch_times_s"][1:]
        status = j.get("cuda_graph", {}).get("status", "?")
    rows[g] = (statistics.median(times) if times else float("nan"), len(times), status)
print("| --cuda-graph | median epoch (ms) | per step (us, 469 steps) | epochs timed | status |")
print("|---|---|---|---|---|")
for g in ("on", "off"):
    m, n, st = rows[g]
    print("| %s | %.2f | %.1f | %d | %s |" % (g, 1e3 * m, 1e6 * m / 469, n, st))
on, off = rows["on"][0], rows["off"][0]
print()
print("Ratio off / on: %.2fx. Goal (issue 12): an H100 mlp epoch <= 5 ms with the graph: %s." %
      (off / on, "met" if on <= 0.005 else "not met"))
PY
    cat "$WORK/graph.md"
fi

# ---- 6. benchmark against PyTorch -------------------------------------------------------------------------------
if want bench && [ -x "$MPTRAIN" ]; then
    say "bench: bench/run.sh gpu --epochs $EPOCHS --repeats $REPEATS --models mlp,lenet5"
    if BUILD_DIR=$BUILD PYTHON=$PYTHON MPT_DATA=$DATA MPT_MESON_ARGS="${MESON_ARGS[*]}" \
        bench/run.sh gpu --epochs "$EPOCHS" --repeats "$REPEATS" --models mlp,lenet5 --out "$WORK/bench" --no-docs; then
        say "bench: done"
    else
        fail "bench: bench/run.sh gpu failed"
    fi
fi

# ---- 7. results -------------------------------------------------------------------------------------------------
say "results: $DEST/gpu-$DATE.md"
{
    printf '# GPU run of %s (bench/gpu.sh)\n\n' "$DATE"
    printf 'Command: `bench/gpu.sh %s` (stages %s, epochs %s, repeats %s); MPT_REQUIRE_CUDA=1.\n\n' \
        "$ARGS" "$STAGES" "$EPOCHS" "$REPEATS"
    printf '## Machine\n\n```\n'; cat "$WORK/machine.txt"; printf '```\n\n'
    if [ -f "$WORK/info.txt" ]; then printf '## mptrain info\n\n```\n'; cat "$WORK/info.txt"; printf '```\n\n'; fi
    if [ -f "$WORK/test_cuda.log" ]; then
        printf '## cuda suite\n\n```\n'
        grep -E '^test_cuda: |^[0-9]+%: Checks|FAILED|^[^ ]*:[0-9]+:[EF]:' "$WORK/test_cuda.log" | head -n 80
        printf '```\n\n'
    fi
    for m in mlp lenet5; do
        if [ -f "$WORK/compare-$m/report.md" ]; then
            printf '## mptrain compare --model %s --device cuda --epochs %s\n\n' "$m" "$EPOCHS"
            sed 's/^#/###/' "$WORK/compare-$m/report.md"
            printf '\n'
        fi
    done
    if [ -f "$WORK/graph.md" ]; then
        printf '## The step as one CUDA Graph: mlp fp16, batch 128 (--cuda-graph on / off)\n\n'
        cat "$WORK/graph.md"
        printf '\n'
    fi
    if [ -f "$WORK/bench/summary.md" ]; then
        printf '## Benchmark against PyTorch (bench/run.sh gpu)\n\n'
        sed 's/^#/###/' "$WORK/bench/summary.md"
        printf '\n'
    fi
    if [ ${#FAILED[@]} -gt 0 ]; then
        printf '## Failed stages\n\n'
        printf -- '- %s\n' "${FAILED[@]}"
    fi
} >"$DEST/gpu-$DATE.md"
for f in test_cuda.log info.txt; do [ -f "$WORK/$f" ] && [ "$WORK" != "$DEST" ] && cp "$WORK/$f" "$DEST/"; done
if [ "$WORK" != "$DEST" ]; then
    tar -C "$ROOT/runs" --exclude='*.safetensors' -czf "$DEST/gpu-runs.tar.gz" "gpu-$STAMP" 2>/dev/null || fail "results: tar"
fi
say "done: $DEST/gpu-$DATE.md; commit it as bench/results/gpu-$DATE.md"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'bench/gpu.sh: %d stage(s) failed:\n' "${#FAILED[@]}" >&2
    printf '  - %s\n' "${FAILED[@]}" >&2
    exit 1
fi
exit 0
