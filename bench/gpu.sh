#!/usr/bin/env bash
# bench/gpu.sh - everything a GPU machine is needed for, in one command (issue 12, part C):
#
#   1. build    a release build in build-gpu (-Dgpu_arch=80,90, cuDNN from MPT_CUDNN_ROOT)
#   2. test     the cuda suite with MPT_REQUIRE_CUDA=1: no usable GPU is a failure, never a skip
#   3. info     mptrain info (device, driver, libraries)
#   4. compare  mptrain compare --device cuda of mlp and lenet5 on real Fashion-MNIST in fp32, tf32, fp16, bf16
#   5. graph    the step as one CUDA Graph (docs/benchmarks.md, "GPU: the step graph"): mptrain train --model mlp
#               --precision fp16 --batch-size 128 (469 steps an epoch) with --cuda-graph on and off, alternating,
#               --repeats times; median epoch time by CUDA events after the first epoch (which records the graph),
#               the host clock beside it; the two runs' metrics.csv must be identical (bit-identical losses and
#               scales), else the stage fails
#   6. bench    bench/run.sh gpu: mptrain against PyTorch 2.x on the same GPU (fp32 with TF32 off, tf32, fp16 +
#               GradScaler, bf16 autocast; both sides timed with CUDA events, median of the epochs after the first
#               per run, medians over repeats; the host clock beside it)
#   7. results  gpu-<date>.md: the GPU, driver, CUDA/cuDNN/PyTorch versions, the commands, the cuda suite's
#               result with its CPU-vs-GPU agreement lines, the compare tables and the benchmark summary, ready
#               to be committed as bench/results/gpu-<date>.md
#
# Usage (from the project root, on the GPU machine, after ../shared/gpu/prepare.sh filled .gpu/ here):
#   bench/gpu.sh [--quick] [--stages LIST] [--epochs N] [--repeats R] [--limit S] [--out DIR] [--dry-run]
#     --stages LIST  comma-separated subset of build,test,info,compare,graph,bench (default: all; results always run),
#                    run build first, then in the order listed (what matters most first: a --limit cuts the last);
#                    include build in every call: a device machine goes back 30 s after a call, and the next one
#                    starts bare (build-gpu is not carried). bench/README.md gives the two-call recipe
#     --epochs N     epochs of compare and of each benchmark run (default 3)
#     --repeats R    benchmark repeats, mptrain and PyTorch alternating (default 2)
#     --quick        compare and bench with 1 epoch and 1 repeat (a smoke run; bench/README.md gives estimates)
#     --limit S      stop every step S - 30 seconds after the start (timeout(1)), so the results page and the
#                    archive are written before a command limit of S seconds; what a stopped stage finished is
#                    kept (a stopped bench is summarised from its finished runs). Default 570 when $OUT is set (the
#                    device tool, 600 s per command), else 0 (no limit)
#     --out DIR      where everything goes (default $OUT, the device tool's folder, else runs/gpu-<UTC time>)
#     --dry-run      print each selected stage's commands and estimated duration, and the total; run nothing
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
usage() { sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; }

STAGES=build,test,info,compare,graph,bench EPOCHS=3 REPEATS=2 QUICK=0 DEST=${OUT:-} DRY_RUN=0 LIMIT=
RESERVE=30 # seconds kept after --limit's stop for the results page and the archive
need_value() { [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || die "option '$1' needs a value"; }
is_int() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "option '$1': expected a positive integer, found '$2'"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --stages) need_value "$@"; STAGES=$2; shift 2 ;;
        --epochs) need_value "$@"; is_int "$1" "$2"; EPOCHS=$2; shift 2 ;;
        --repeats) need_value "$@"; is_int "$1" "$2"; REPEATS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --limit) need_value "$@"; [[ "$2" =~ ^[0-9]+$ ]] || die "option '$1': expected seconds (0 = no limit), found '$2'"
            LIMIT=$2; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
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
if [ -z "$LIMIT" ]; then LIMIT=0; [ -n "${OUT:-}" ] && LIMIT=570; fi
[ "$LIMIT" = 0 ] || [ "$LIMIT" -gt $((RESERVE + 60)) ] || die "--limit $LIMIT: expected 0 or more than $((RESERVE + 60)) seconds"
GE=$((EPOCHS < 2 ? 2 : EPOCHS)) # epochs of each graph-stage run: the first is left out of its median
# The stages in the order they run: build first, then as --stages lists them.
ORDER=()
want build && ORDER+=(build)
for s in "${STAGE_LIST[@]}"; do
    [ "$s" = build ] && continue
    [[ " ${ORDER[*]} " == *" $s "* ]] || ORDER+=("$s")
done

# Estimated seconds of a stage as "low high", from what it runs (process start-up, epochs, runs); not measured:
# no GPU run has timed these stages yet (the results page's "Stage times" are the measurements to plan with).
#   build    meson setup + ninja with nvcc for sm_80, sm_90 and PTX on the machine's cores (2.5 min here on 2 cores)
#   test     the cuda suite: GEMM/conv checks, 20-step e2e runs of 3 models x 4 precisions on both backends, the
#            graph cases, resume and telemetry
#   compare  2 models, each one process of 4 precisions x EPOCHS epochs (469 steps, then the test set):
#            5-15 s start-up (cuDNN, data), 1-4 s per precision-epoch
#   graph    2 x REPEATS processes of GE mlp epochs: 4-10 s start-up each, up to 1 s per epoch
#   bench    8 x REPEATS mptrain runs (3-8 s start-up + 0.1-1 s per epoch) and as many PyTorch runs (6-12 s for
#            import torch, CUDA and 30 warm-up steps + 0.5-2 s per eager epoch), 10-30 s of machine facts
estimate() {
    local runs=$((8 * REPEATS))
    case "$1" in
        build) echo "60 180" ;;
        test) echo "60 240" ;;
        info) echo "2 10" ;;
        compare) echo "$((2 * (5 + 4 * EPOCHS))) $((2 * (15 + 16 * EPOCHS)))" ;;
        graph) echo "$((2 * REPEATS * 4 + 2 * REPEATS * GE / 10)) $((2 * REPEATS * (10 + GE)))" ;;
        bench) echo "$((10 + runs * 9 + runs * EPOCHS * 6 / 10)) $((30 + runs * (20 + 3 * EPOCHS)))" ;;
    esac
}
stage_command() {
    case "$1" in
        build) echo "meson setup build-gpu --buildtype=release -Dgpu_arch=${GPU_ARCH:-80,90} -Dcuda=enabled; ninja -C build-gpu" ;;
        test) echo "meson test -C build-gpu --suite cuda (MPT_REQUIRE_CUDA=1)" ;;
        info) echo "mptrain info" ;;
        compare) echo "mptrain compare --model mlp|lenet5 --device cuda --epochs $EPOCHS" ;;
        graph) echo "mptrain train --model mlp --precision fp16 --epochs $GE --device cuda --cuda-graph on|off, $REPEATS repeat(s)" ;;
        bench) echo "bench/run.sh gpu --epochs $EPOCHS --repeats $REPEATS --models mlp,lenet5" ;;
    esac
}
if [ "$DRY_RUN" = 1 ]; then
    printf 'bench/gpu.sh --dry-run: stages %s, epochs %s, repeats %s, --limit %s s (0: none); nothing is run.
' \
        "$STAGES" "$EPOCHS" "$REPEATS" "$LIMIT"
    lo_sum=0 hi_sum=0
    for s in "${ORDER[@]}"; do
        read -r lo hi <<<"$(estimate "$s")"
        lo_sum=$((lo_sum + lo)) hi_sum=$((hi_sum + hi))
        printf '  %-8s %4d-%4d s  %s\n' "$s" "$lo" "$hi" "$(stage_command "$s")"
    done
    printf '  %-8s %4d-%4d s  (%d-%d min; estimates from what each stage runs, not measurements)\n' total \
        "$lo_sum" "$hi_sum" $(((lo_sum + 59) / 60)) $(((hi_sum + 59) / 60))
    if [ "$LIMIT" -gt 0 ] && [ "$hi_sum" -gt $((LIMIT - RESERVE)) ]; then
        printf '  the high estimate passes --limit %s s less %s s: a step still running then is stopped, and what\n' \
            "$LIMIT" "$RESERVE"
        printf '  finished is kept; split the stages over two calls (bench/README.md) or lower --epochs/--repeats\n'
    fi
    exit 0
fi

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

# Runs "$@" so that it ends --limit's reserve before the limit (timeout(1) stops it and its children: status
# 124); without a limit, as is. Nothing is started once the time is up (status 124 at once).
limited() {
    [ "$LIMIT" -gt 0 ] || { "$@"; return; }
    local left=$((LIMIT - RESERVE - ($(date +%s) - T0)))
    [ "$left" -gt 0 ] || return 124
    timeout "$left" "$@"
}
# "stopped at --limit" for status 124, else "exited N".
why() { if [ "$1" = 124 ]; then echo "stopped at --limit $LIMIT s"; else echo "exited $1"; fi; }

# ---- 1. build ---------------------------------------------------------------------------------------------------
stage_build() {
    say "build: meson setup $BUILD --buildtype=release ${MESON_ARGS[*]}; ninja"
    local rc=0
    [ -f "$BUILD/build.ninja" ] || limited meson setup "$BUILD" --buildtype=release "${MESON_ARGS[@]}" || rc=$?
    [ "$rc" = 0 ] && { limited ninja -C "$BUILD" -j"$(nproc)" || rc=$?; }
    if [ "$rc" = 0 ]; then say "build: done"; else fail "build: $(why "$rc")"; fi
}

# ---- 2. the cuda suite ------------------------------------------------------------------------------------------
stage_test() {
    say "test: meson test --suite cuda (MPT_REQUIRE_CUDA=1)"
    local rc=0
    limited meson test -C "$BUILD" --suite cuda --print-errorlogs --timeout-multiplier 2 >"$WORK/meson-test.txt" 2>&1 ||
        rc=$?
    if [ "$rc" = 0 ]; then say "test: the cuda suite passed"; else fail "test: the cuda suite failed ($(why "$rc"))"; fi
    tail -n 15 "$WORK/meson-test.txt"
    cp "$BUILD/meson-logs/testlog.txt" "$WORK/test_cuda.log" 2>/dev/null || cp "$WORK/meson-test.txt" "$WORK/test_cuda.log"
    grep -E '^test_cuda(_graph)?: (e2e|timing)|^[0-9]+%: Checks|FAILED|skipped' "$WORK/test_cuda.log" | sed 's/^/    /'
}

# ---- 3. info ----------------------------------------------------------------------------------------------------
stage_info() {
    say "info: mptrain info"
    local rc=0
    limited "$MPTRAIN" info >"$WORK/info.txt" 2>&1 || rc=$?
    [ "$rc" = 0 ] || fail "info: mptrain info $(why "$rc")"
    cat "$WORK/info.txt"
    # the cuda backend's line: "usable: no: <why>" when it cannot train (mptrain info, tools/cmd_info.c)
    if grep -Eq '^ +usable: +no' "$WORK/info.txt"; then
        fail "info: mptrain sees no usable GPU: $(grep -E '^ +usable: +no' "$WORK/info.txt" | head -n 1 | sed -E 's/^ *usable: *no:? *//')"
    fi
}

# ---- 4. compare on Fashion-MNIST --------------------------------------------------------------------------------
stage_compare() {
    [ -d "$DATA" ] || fail "compare: no Fashion-MNIST at $DATA (MPT_DATA)"
    local m rc
    for m in mlp lenet5; do
        say "compare: mptrain compare --model $m --device cuda --epochs $EPOCHS (fp32, tf32, fp16, bf16)"
        rc=0
        limited "$MPTRAIN" compare --model "$m" --device cuda --epochs "$EPOCHS" --data "$DATA" --progress off \
            --out "$WORK/compare-$m" >"$WORK/compare-$m.txt" 2>&1 || rc=$?
        if [ "$rc" = 0 ]; then
            tail -n 12 "$WORK/compare-$m.txt"
        else
            tail -n 20 "$WORK/compare-$m.txt"
            fail "compare: $m $(why "$rc")"
        fi
    done
}

# ---- 5. the step graph: mlp epochs with --cuda-graph on and off ------------------------------------------------
# Epoch times are mptrain's CUDA events (summary.json epoch_gpu_times_s: the device's time from a mark recorded on the
# idle stream at the epoch's start to one recorded after its last step, as PyTorch is timed), median of the epochs
# after the first (algorithm selection, the recording); the host clock of the same epochs (epoch_times_s: to the
# stream drained at the epoch's end) is given beside it. A run without epoch_gpu_times_s fails the stage.
stage_graph() {
    mkdir -p "$WORK/graph"
    say "graph: mptrain train --model mlp --precision fp16 --batch-size 128 --epochs $GE --device cuda, --cuda-graph on and off alternating, $REPEATS repeat(s)"
    local r g d rc
    for r in $(seq 1 "$REPEATS"); do
        for g in on off; do
            d=$WORK/graph/mlp-fp16-$g-$r
            rc=0
            limited "$MPTRAIN" train --model mlp --precision fp16 --batch-size 128 --epochs "$GE" --device cuda \
                --data "$DATA" --progress off --cuda-graph "$g" --out "$d" >"$d.txt" 2>&1 || rc=$?
            [ "$rc" = 0 ] || fail "graph: --cuda-graph $g (repeat $r) $(why "$rc"): see graph/mlp-fp16-$g-$r.txt"
        done
        if [ -f "$WORK/graph/mlp-fp16-on-$r/summary.json" ] && [ -f "$WORK/graph/mlp-fp16-off-$r/summary.json" ]; then
            cmp -s "$WORK/graph/mlp-fp16-on-$r/metrics.csv" "$WORK/graph/mlp-fp16-off-$r/metrics.csv" ||
                fail "graph: metrics.csv differs between --cuda-graph on and off (repeat $r): the graph changed the math"
        fi
    done
    rc=0
    "$PYTHON" - "$WORK/graph" "$REPEATS" >"$WORK/graph.md" <<'PY' || rc=$?
import json, statistics, sys
root, repeats = sys.argv[1], int(sys.argv[2])
rows, missing = {}, []
med = lambda xs: statistics.median(xs) if xs else float("nan")
for g in ("on", "off"):
    dev, host, status = [], [], "?"
    for r in range(1, repeats + 1):
        try:
            j = json.load(open("%s/mlp-fp16-%s-%d/summary.json" % (root, g, r)))
        except (OSError, ValueError):
            continue
        if not j.get("epoch_gpu_times_s"):
            missing.append("mlp-fp16-%s-%d" % (g, r))
            continue
        dev += j["epoch_gpu_times_s"][1:]
        host += j["epoch_times_s"][1:]
        status = j.get("cuda_graph", {}).get("status", "?")
    rows[g] = (med(dev), med(host), len(dev), status)
print("Clock: CUDA events (summary.json epoch_gpu_times_s), median of every epoch after the first over the repeats;")
print("the host clock of the same epochs (epoch_times_s, to the drained stream) beside it.")
print()
print("| --cuda-graph | median epoch, CUDA events (ms) | per step (us, 469 steps) | median epoch, host clock (ms) | "
      "epochs timed | status |")
print("|---|---:|---:|---:|---:|---|")
for g in ("on", "off"):
    m, h, n, st = rows[g]
    print("| %s | %.3f | %.2f | %.3f | %d | %s |" % (g, 1e3 * m, 1e6 * m / 469, 1e3 * h, n, st))
on, off = rows["on"][0], rows["off"][0]
print()
if missing:
    print("No CUDA-event epoch times (epoch_gpu_times_s) in the summary.json of: %s" % ", ".join(missing))
    sys.exit(3)
if not rows["on"][2] or not rows["off"][2]:
    print("No run finished an epoch after its first with the graph %s: no ratio, the goal is not evaluated" %
          " and ".join(g for g in ("on", "off") if not rows[g][2]))
    sys.exit(3)
print("Ratio off / on (CUDA events): %.2fx. Goal (issue 12): an H100 mlp epoch <= 5 ms with the graph: %s." %
      (off / on, "met" if on <= 0.005 else "not met"))
PY
    case "$rc" in
        0) ;;
        3) fail "graph: $(tail -n 1 "$WORK/graph.md")" ;;
        *) fail "graph: summarising the runs exited $rc" ;;
    esac
    cat "$WORK/graph.md"
}

# ---- 6. benchmark against PyTorch -------------------------------------------------------------------------------
# Both sides by CUDA events, the median of each run's epochs after the first (bench/summarize.py). Stopped at
# --limit, the runs that finished (mptrain and PyTorch alternate) are summarised all the same.
stage_bench() {
    say "bench: bench/run.sh gpu --epochs $EPOCHS --repeats $REPEATS --models mlp,lenet5"
    local rc=0
    BUILD_DIR=$BUILD PYTHON=$PYTHON MPT_DATA=$DATA MPT_MESON_ARGS="${MESON_ARGS[*]}" limited \
        bench/run.sh gpu --epochs "$EPOCHS" --repeats "$REPEATS" --models mlp,lenet5 --out "$WORK/bench" --no-docs ||
        rc=$?
    if [ "$rc" = 0 ]; then
        say "bench: done"
        return
    fi
    fail "bench: bench/run.sh gpu $(why "$rc")"
    if [ "$rc" = 124 ] && [ -d "$WORK/bench/runs" ]; then
        say "bench: summarising the $(find "$WORK/bench/runs" -name summary.json -o -name stdout.txt | wc -l) files of the runs that started"
        "$PYTHON" bench/summarize.py "$WORK/bench" gpu >"$WORK/bench/summary.md" 2>>"$WORK/bench/summarize.err" ||
            fail "bench: summarising the finished runs failed"
    fi
}

# ---- the stages in ORDER; each one's duration for the results page ----------------------------------------------
STAGE_TIMES=()
for s in "${ORDER[@]}"; do
    if [ "$s" != build ] && [ ! -x "$MPTRAIN" ]; then
        fail "$s: not run: $MPTRAIN does not exist (no build stage in this call, or the build failed)"
        continue
    fi
    t_stage=$(date +%s)
    "stage_$s"
    read -r lo hi <<<"$(estimate "$s")"
    STAGE_TIMES+=("| $s | $(($(date +%s) - t_stage)) | $lo-$hi |")
done

# ---- 7. results -------------------------------------------------------------------------------------------------
say "results: $DEST/gpu-$DATE.md"
{
    printf '# GPU run of %s (bench/gpu.sh)\n\n' "$DATE"
    printf 'Command: `bench/gpu.sh %s` (stages %s, epochs %s, repeats %s, --limit %s s); MPT_REQUIRE_CUDA=1.\n\n' \
        "$ARGS" "$STAGES" "$EPOCHS" "$REPEATS" "$LIMIT"
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
    if [ ${#STAGE_TIMES[@]} -gt 0 ]; then
        printf '## Stage times\n\nMeasured wall seconds of each stage in this call, beside the estimate `--dry-run` planned with\n'
        printf '(bench/gpu.sh estimate()); plan the next lease from the measurements.\n\n'
        printf '| stage | measured (s) | estimate (s) |\n|---|---:|---:|\n'
        printf '%s\n' "${STAGE_TIMES[@]}"
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
