#!/usr/bin/env bash
# bench/run.sh - mptrain against PyTorch on the same models, data and settings (issue #6).
#
#   bench/run.sh cpu [options]   CPU: mptrain fp32/tf32/bf16/fp16 (emulated Tensor Core numerics) and bf16n (bf16
#                                with --cpu-kernels native, where the CPU has BF16 units) against Debian's
#                                PyTorch 1.13 in fp32 and with torch.autocast('cpu', bfloat16)
#   bench/run.sh gpu [options]   GPU: mptrain --device cuda against PyTorch 2.x with CUDA in fp32, tf32,
#                                bf16 autocast and fp16 autocast + GradScaler (needs an NVIDIA GPU)
#
# Options:
#   --epochs N          epochs per run (default 5)
#   --repeats R         runs of each configuration, mptrain and PyTorch alternating (default 3)
#   --models LIST       comma-separated, from mlp, lenet5, cnn (default mlp,lenet5)
#   --limit-train N     train on the first N images only (default all 60000)
#   --quick             a smoke run: 1 epoch on 6400 images, 1 repeat, one calibration round on 2560 images
#                       (a full run calibrates in two rounds on 7680 images, the order reversed in the second)
#   --threads-mptrain N skip mptrain's thread calibration: always --threads N
#   --threads-torch T/B skip PyTorch's: torch.set_num_threads(T), OMP_NUM_THREADS=T, OPENBLAS_NUM_THREADS=B
#                       (T/Bp: and OMP_WAIT_POLICY=passive)
#   --openblas-coretype X  export OPENBLAS_CORETYPE=X to both (both use OpenBLAS for FP32 GEMMs). Default: the core
#                       mptrain's rule picks where OpenBLAS misdetects this CPU (`MPT_CPU_ENGINE=openblas mptrain info`:
#                       "chosen by mptrain"), for both, so PyTorch's FP32 GEMMs get the best kernels OpenBLAS has here;
#                       none where OpenBLAS's own choice is already the best (or OPENBLAS_CORETYPE is set).
#                       `detected`: OpenBLAS's own choice, whatever it is
#   --mptrain PATH      run this mptrain (a program or a wrapper script); configure and build nothing (bench/gpu.sh's
#                       prebuilt binaries), so no gemm_bench in cpu mode
#   --torch-modes LIST  PyTorch's execution modes, run in one process per configuration, one after the other
#                       (bench/pytorch_reference.py --mode): eager, fused, graph, compile (gpu default: all four;
#                       cpu default: eager); the report gives mptrain against each and against the fastest
#   --run-timeout S     stop each run after S seconds (timeout(1), KILL 5 s after TERM): it counts as failed (exit
#                       124) and the next run starts
#   --out DIR           where runs and the report go (default runs/bench/<mode>-<UTC time>)
#   --write-docs / --no-docs  update docs/benchmarks.md and write bench/results/<mode>-<date>.md, or -b.md, -c.md, ...
#                       when the day has one (default: only for full runs, i.e. not with --quick or --limit-train)
#
# Each run is one process under /usr/bin/time -v (its peak RSS); per run, time per epoch is the median of its
# epochs' training times (mptrain: summary.json; PyTorch: bench/pytorch_reference.py's JSON line; gpu: CUDA events
# on both sides, the epochs after the first, the host clock beside them); the report
# gives medians over repeats and mptrain/PyTorch ratios (bench/summarize.py). CPU runs first calibrate the
# thread settings of each side on a short run and use the fastest (the table is in the report).
#
# Environment: BUILD_DIR (default build-bench, configured --buildtype=release), CUDA_HOME (default
# /usr/local/cuda), PYTHON (default /usr/bin/python3: Debian's python3-torch; for gpu, a Python whose torch
# has CUDA), MPT_DATA (default /usr/share/datasets/fashion-mnist), NINJA_JOBS (default 2), MPT_MESON_ARGS
# (extra meson setup options), MPT_NO_APT=1 (install nothing: bench/gpu.sh brings the dependencies). Without
# GNU time (/usr/bin/time) the peak RSS and CPU times come from getrusage through $PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BUILD_DIR=${BUILD_DIR:-build-bench}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PYTHON=${PYTHON:-/usr/bin/python3}
DATA=${MPT_DATA:-/usr/share/datasets/fashion-mnist}
NINJA_JOBS=${NINJA_JOBS:-2}
PACKAGES=(meson ninja-build pkg-config gcc check libsubunit-dev libopenblas-pthread-dev libopenblas-dev zlib1g-dev
          libjansson-dev libdnnl-dev dataset-fashion-mnist python3-numpy time)

say() { printf '==> %s\n' "$*"; }
die() { printf 'bench/run.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ---- arguments ------------------------------------------------------------------------------------------
[ $# -ge 1 ] || { usage; exit 2; }
MODE=$1
shift
case "$MODE" in
    cpu | gpu) ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "first argument: expected cpu or gpu, found '$MODE'" ;;
esac
COMMAND_LINE="bench/run.sh $MODE $*"
EPOCHS=5 REPEATS=3 MODELS=mlp,lenet5 LIMIT_TRAIN=0 QUICK=0 OUT= WRITE_DOCS=auto
THREADS_MPT= THREADS_TORCH= CORETYPE= CAL_ROUNDS=2 CAL_LIMIT=7680 MPTRAIN= RUN_TIMEOUT= TORCH_MODES=
need_value() { [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || die "option '$1' needs a value"; }
is_int() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "option '$1': expected a positive integer, found '$2'"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --epochs) need_value "$@"; is_int "$1" "$2"; EPOCHS=$2; shift 2 ;;
        --repeats) need_value "$@"; is_int "$1" "$2"; REPEATS=$2; shift 2 ;;
        --models) need_value "$@"; MODELS=$2; shift 2 ;;
        --limit-train) need_value "$@"; is_int "$1" "$2"; LIMIT_TRAIN=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --threads-mptrain) need_value "$@"; is_int "$1" "$2"; THREADS_MPT=$2; shift 2 ;;
        --threads-torch)
            need_value "$@"
            [[ "$2" =~ ^[1-9][0-9]*/[1-9][0-9]*p?$ ]] || die "option '$1': expected T/B or T/Bp (e.g. 1/2, 2/2p), found '$2'"
            THREADS_TORCH=$2; shift 2 ;;
        --openblas-coretype) need_value "$@"; CORETYPE=$2; shift 2 ;;
        --mptrain) need_value "$@"; MPTRAIN=$2; shift 2 ;;
        --run-timeout) need_value "$@"; is_int "$1" "$2"; RUN_TIMEOUT=$2; shift 2 ;;
        --torch-modes) need_value "$@"; TORCH_MODES=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        --write-docs) WRITE_DOCS=1; shift ;;
        --no-docs) WRITE_DOCS=0; shift ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown option '$1' (see bench/run.sh --help)" ;;
    esac
done
IFS=, read -r -a MODEL_LIST <<<"$MODELS"
for m in "${MODEL_LIST[@]}"; do
    case "$m" in mlp | lenet5 | cnn) ;; *) die "--models: expected names from mlp, lenet5, cnn, found '$m'" ;; esac
done
if [ -z "$TORCH_MODES" ]; then
    if [ "$MODE" = gpu ]; then TORCH_MODES=eager,fused,graph,compile; else TORCH_MODES=eager; fi
fi
IFS=, read -r -a TORCH_MODE_LIST <<<"$TORCH_MODES"
[ ${#TORCH_MODE_LIST[@]} -gt 0 ] || die "--torch-modes: expected names from eager, fused, graph, compile, found '$TORCH_MODES'"
for m in "${TORCH_MODE_LIST[@]}"; do
    case "$m" in eager | fused | compile) ;;
        graph) [ "$MODE" = gpu ] || die "--torch-modes: graph captures GPU work: it needs 'bench/run.sh gpu'" ;;
        *) die "--torch-modes: expected names from eager, fused, graph, compile, found '$m'" ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    EPOCHS=1 REPEATS=1 CAL_LIMIT=2560 CAL_ROUNDS=1
    [ "$LIMIT_TRAIN" = 0 ] && LIMIT_TRAIN=6400
fi
if [ "$WRITE_DOCS" = auto ]; then
    if [ "$QUICK" = 0 ] && [ "$LIMIT_TRAIN" = 0 ]; then WRITE_DOCS=1; else WRITE_DOCS=0; fi
fi
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
DATE=$(date -u +%Y-%m-%d)
OUT=${OUT:-runs/bench/$MODE-$STAMP}
case "$OUT" in /*) ;; *) OUT=$ROOT/$OUT ;; esac

# ---- packages, GPU check, build -----------------------------------------------------------------------
install_missing() {
    local missing=() p
    if [ "${MPT_NO_APT:-0}" = 1 ]; then # bench/gpu.sh: the dependencies come unpacked from .gpu/ (no apt, no network)
        return 0
    fi
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing missing Debian packages: ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${missing[*]} yourself"
        sudo=(sudo)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

if [ "$MODE" = cpu ]; then
    # Debian's PyTorch is for /usr/bin/python3 only; another PYTHON must bring its own torch.
    if [ "$PYTHON" = /usr/bin/python3 ]; then
        install_missing "${PACKAGES[@]}" python3-torch
    else
        install_missing "${PACKAGES[@]}"
    fi
else
    install_missing "${PACKAGES[@]}"
fi
[ -d "$DATA" ] || die "no dataset directory $DATA (apt-get install dataset-fashion-mnist, or set MPT_DATA)"
"$PYTHON" -c 'import torch, numpy' 2>/dev/null ||
    die "$PYTHON cannot import torch and numpy (cpu: apt-get install python3-torch python3-numpy; gpu: set PYTHON to a Python with a CUDA build of PyTorch 2.x)"

if [ "$MODE" = gpu ]; then
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 ||
        die "gpu: no NVIDIA GPU here (nvidia-smi is missing or lists no device). Run 'bench/run.sh cpu' instead, or run this on a machine with an NVIDIA GPU and driver."
    TORCH_CHECK=$("$PYTHON" -c '
import torch
major = int(torch.__version__.split(".")[0])
if not torch.cuda.is_available():
    print("torch %s (CUDA build: %s) sees no usable GPU" % (torch.__version__, torch.version.cuda))
elif major < 2:
    print("torch %s is older than 2.0" % torch.__version__)
' 2>&1) || TORCH_CHECK="$PYTHON failed to import torch: $TORCH_CHECK"
    [ -z "$TORCH_CHECK" ] ||
        die "gpu: $TORCH_CHECK. Set PYTHON to a Python with a CUDA build of PyTorch >= 2 (e.g. a venv with 'pip install torch')."
fi

if [ -n "$MPTRAIN" ]; then
    case "$MPTRAIN" in /*) ;; *) MPTRAIN=$ROOT/$MPTRAIN ;; esac
    [ -x "$MPTRAIN" ] || die "--mptrain $MPTRAIN: no such program"
    say "using $MPTRAIN (--mptrain: nothing is built)"
    GEMM_BENCH=
elif [ ! -x "$CUDA_HOME/bin/nvcc" ] && ! command -v nvcc >/dev/null 2>&1; then
    die "the CUDA toolkit is missing (no nvcc in $CUDA_HOME/bin or on PATH): mptrain needs it to build, not to run on the CPU. See ./run."
fi
if [ -n "$MPTRAIN" ]; then
    :
elif [ ! -f "$BUILD_DIR/build.ninja" ]; then
    say "configuring $BUILD_DIR (release)"
    # shellcheck disable=SC2086 # MPT_MESON_ARGS: extra options, word-split on purpose (bench/gpu.sh: -Dcudnn_root=...)
    meson setup "$BUILD_DIR" --buildtype=release -Dcudatoolkit="$CUDA_HOME" ${MPT_MESON_ARGS:-}
elif ! meson introspect "$BUILD_DIR" --buildoptions 2>/dev/null |
        "$PYTHON" -c 'import json,sys; sys.exit(0 if any(o["name"]=="buildtype" and o["value"]=="release" for o in json.load(sys.stdin)) else 1)'; then
    say "reconfiguring $BUILD_DIR as a release build"
    meson configure "$BUILD_DIR" -Dbuildtype=release
fi
if [ -z "$MPTRAIN" ]; then
    say "building mptrain and gemm_bench in $BUILD_DIR"
    ninja -C "$BUILD_DIR" -j"$NINJA_JOBS" tools/mptrain bench/gemm_bench
    MPTRAIN=$ROOT/$BUILD_DIR/tools/mptrain
    GEMM_BENCH=$ROOT/$BUILD_DIR/bench/gemm_bench
    [ -x "$MPTRAIN" ] || die "$MPTRAIN was not built"
fi
if [ "$MODE" = gpu ] && "$MPTRAIN" info | grep -Eq '^ +usable: +no'; then
    die "gpu: mptrain sees no usable GPU: $("$MPTRAIN" info | grep -E '^ +usable: +no' | head -n 1 | sed -E 's/^ *usable: *no:? *//')"
fi

# ---- running one configuration --------------------------------------------------------------------------
mkdir -p "$OUT/runs" "$OUT/calib" "$OUT/info" "$OUT/gemm"
# OpenBLAS's core: the user's, or where OpenBLAS misdetects this CPU the one mptrain's rule (tools/main.c) picks, for
# both programs alike (PyTorch's FP32 GEMMs run on OpenBLAS; mptrain's too in a build without oneDNN)
CORETYPE_WHY=
if [ "$CORETYPE" = detected ]; then
    CORETYPE= CORETYPE_WHY="OpenBLAS's own choice (--openblas-coretype detected)"
elif [ -n "$CORETYPE" ]; then
    CORETYPE_WHY="--openblas-coretype"
elif [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    CORETYPE_WHY="set in the environment"
elif [ "$MODE" = gpu ]; then
    CORETYPE_WHY="OpenBLAS's own choice (gpu mode: the GEMMs run on the GPU)"
else
    chosen=$(MPT_CPU_ENGINE=openblas "$MPTRAIN" info 2>/dev/null | grep -o 'OPENBLAS_CORETYPE=[A-Za-z0-9]* (chosen by mptrain: [^)]*)' | head -n 1)
    if [ -n "$chosen" ]; then
        CORETYPE=${chosen#OPENBLAS_CORETYPE=} CORETYPE_WHY=${chosen#* (chosen by mptrain: }
        CORETYPE=${CORETYPE%% *} CORETYPE_WHY="mptrain's rule: ${CORETYPE_WHY%)}"
        say "OPENBLAS_CORETYPE=$CORETYPE for mptrain and PyTorch ($CORETYPE_WHY)"
    else
        CORETYPE_WHY="OpenBLAS's own choice (the best it has for this CPU's instructions, by mptrain's rule)"
    fi
fi
if [ -n "$CORETYPE" ]; then export OPENBLAS_CORETYPE=$CORETYPE; fi
DEVICE=$MODE
[ "$MODE" = gpu ] && DEVICE=cuda
FAILED=0
SEQ=0

loadavg() { cut -d' ' -f1 /proc/loadavg; }
# CPU time all processes have used since boot, in clock ticks (user, nice, system, irq, softirq, steal):
# the difference over a run minus the run's own user + system time is what others took meanwhile.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }

# Environment and arguments of a thread setting. mptrain: "N" -> --threads N (its GEMMs' OpenBLAS and oneDNN
# threads; unless told otherwise mptrain runs libgomp with GOMP_SPINCOUNT=3000 when the cores are free at its start
# and OMP_WAIT_POLICY=passive when they are not, tools/main.c). PyTorch: "T/B" ->
# torch.set_num_threads(T), OMP_NUM_THREADS=MKL_NUM_THREADS=T, OPENBLAS_NUM_THREADS=B, libgomp's default wait
# policy; "T/Bp": the same with OMP_WAIT_POLICY=passive. GPU: "-".
setting_env() {
    local impl=$1 s=$2
    if [ "$s" = - ]; then return; fi
    if [ "$impl" = mptrain ]; then
        echo "OPENBLAS_NUM_THREADS=$s"
    else
        local p=${s%p}
        echo "OMP_NUM_THREADS=${p%/*} MKL_NUM_THREADS=${p%/*} OPENBLAS_NUM_THREADS=${p#*/}$([ "$p" != "$s" ] && echo ' OMP_WAIT_POLICY=passive')"
    fi
}
setting_args() {
    local impl=$1 s=$2
    if [ "$s" = - ]; then return; fi
    if [ "$impl" = mptrain ]; then echo "--threads $s"; else local p=${s%p}; echo "--threads ${p%/*}"; fi
}
setting_text() {
    local impl=$1 s=$2
    if [ "$s" = - ]; then echo "device $DEVICE"; return; fi
    if [ "$impl" = mptrain ]; then
        echo "--threads $s (OpenBLAS and oneDNN threads)"
    else
        local p=${s%p}
        echo "torch.set_num_threads(${p%/*}), OMP_NUM_THREADS=${p%/*}, OPENBLAS_NUM_THREADS=${p#*/}$([ "$p" != "$s" ] && echo ', OMP_WAIT_POLICY=passive')"
    fi
}

# run_one DIR IMPL MODEL PRECISION SETTING SEED EPOCHS LIMIT_TRAIN LIMIT_TEST REPEAT
# Runs one training under /usr/bin/time -v into DIR; writes DIR/run.json. Returns 0 even when the run
# fails (its exit status is recorded and reported).
run_one() {
    local dir=$1 impl=$2 model=$3 prec=$4 setting=$5 seed=$6 epochs=$7 limit=$8 limit_test=$9 rep=${10}
    rm -rf "$dir"
    mkdir -p "$dir"
    local env_args args cmd=()
    read -r -a env_args <<<"$(setting_env "$impl" "$setting")"
    read -r -a args <<<"$(setting_args "$impl" "$setting")"
    if [ "$impl" = mptrain ]; then
        local kernels=()
        if [ "$prec" = bf16n ]; then prec=bf16 kernels=(--cpu-kernels native); fi # bf16 on the CPU's BF16 units
        cmd=("$MPTRAIN" train --model "$model" --precision "$prec" --epochs "$epochs" --device "$DEVICE"
             --seed "$seed" --data "$DATA" --out "$dir" --progress off "${kernels[@]}" "${args[@]}")
        [ "${kernels[*]}" ] && prec=bf16n
        if [ "$limit" != 0 ]; then cmd+=(--limit-train "$limit"); fi
        if [ "$limit_test" != 0 ]; then cmd+=(--limit-test "$limit_test"); fi
    else
        cmd=("$PYTHON" "$ROOT/bench/pytorch_reference.py" --model "$model" --precision "$prec" --epochs "$epochs"
             --device "$DEVICE" --seed "$seed" --data "$DATA" --mode "$TORCH_MODES" "${args[@]}")
        if [ "$limit" != 0 ]; then cmd+=(--limit-train "$limit"); fi
        if [ "$limit_test" != 0 ]; then cmd+=(--limit-test "$limit_test"); fi
    fi
    if [ -n "$RUN_TIMEOUT" ]; then # --foreground: the run stays in this script's process group (bench/gpu.sh kills it)
        cmd=(timeout --foreground -k 5 "$RUN_TIMEOUT" "${cmd[@]}")
    fi
    local l0 l1 b0 b1 rc=0
    l0=$(loadavg)
    b0=$(busy_ticks)
    if [ -x /usr/bin/time ]; then
        env "${env_args[@]}" /usr/bin/time -v -o "$dir/time.txt" "${cmd[@]}" >"$dir/stdout.txt" 2>"$dir/stderr.txt" || rc=$?
    else # no GNU time (a bare GPU machine): the same three figures from getrusage, in time -v's wording
        env "${env_args[@]}" "$PYTHON" -c '
import resource, subprocess, sys, time
t0 = time.time()
rc = subprocess.call(sys.argv[2:])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    f.write("Maximum resident set size (kbytes): %d\nUser time (seconds): %.2f\nSystem time (seconds): %.2f\n"
            "Elapsed (wall clock) time (h:mm:ss or m:ss): %.2f\n" % (ru.ru_maxrss, ru.ru_utime, ru.ru_stime, time.time() - t0))
sys.exit(rc)' "$dir/time.txt" "${cmd[@]}" >"$dir/stdout.txt" 2>"$dir/stderr.txt" || rc=$?
    fi
    b1=$(busy_ticks)
    l1=$(loadavg)
    SEQ=$((SEQ + 1))
    if [ "$rc" -ne 0 ]; then
        printf 'bench/run.sh: %s %s %s failed (exit %d); last lines of %s/stderr.txt:\n' "$impl" "$model" "$prec" \
            "$rc" "$dir" >&2
        tail -n 5 "$dir/stderr.txt" >&2 || true
        FAILED=$((FAILED + 1))
    fi
    "$PYTHON" - "$dir/run.json" "$impl" "$model" "$prec" "$rep" "$seed" "$(setting_text "$impl" "$setting")" \
        "$rc" "$l0" "$l1" "${env_args[*]} ${cmd[*]}" "$SEQ" "$(( (b1 - b0) ))" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
f, impl, model, prec, rep, seed, settings, rc, l0, l1, cmd, seq, ticks, hz = sys.argv[1:]
json.dump({"impl": impl, "model": model, "precision": prec, "repeat": int(rep), "seed": int(seed),
           "settings": settings, "rc": int(rc), "load_before": l0, "load_after": l1, "command": cmd,
           "order": int(seq), "machine_busy_s": int(ticks) / int(hz)},
          open(f, "w"))
EOF
}

# Smallest per-epoch training time of a finished run (calibration score), or "inf".
best_epoch_s() {
    "$PYTHON" - "$1" <<'EOF'
import json, sys
d = sys.argv[1]
try:
    meta = json.load(open(d + "/run.json"))
    if meta["rc"] != 0:
        raise ValueError
    if meta["impl"] == "mptrain":
        t = json.load(open(d + "/summary.json"))["epoch_times_s"]
    else:
        lines = [json.loads(l) for l in open(d + "/stdout.txt") if l.startswith("{")]
        t = [j for j in lines if j.get("mode", "eager") == "eager" and j.get("status", "ok") == "ok"][-1]["epoch_times_s"]
    print("%.4f" % min(t))
except Exception:
    print("inf")
EOF
}

# The configurations of this mode, in the order one repeat runs them (mptrain and PyTorch alternating). bf16n:
# mptrain bf16 with --cpu-kernels native, where this CPU and build have it (mptrain info says).
NATIVE=0
if [ "$MODE" = cpu ] && "$MPTRAIN" info | grep -Eq '^  native +available'; then NATIVE=1; fi
CONFIGS=()
for m in "${MODEL_LIST[@]}"; do
    if [ "$MODE" = cpu ]; then
        CONFIGS+=("mptrain $m fp32" "pytorch $m fp32" "mptrain $m bf16" "pytorch $m bf16" "mptrain $m tf32"
                  "mptrain $m fp16")
        [ "$NATIVE" = 1 ] && CONFIGS+=("mptrain $m bf16n")
    else
        CONFIGS+=("mptrain $m fp32" "pytorch $m fp32" "mptrain $m tf32" "pytorch $m tf32" "mptrain $m bf16"
                  "pytorch $m bf16" "mptrain $m fp16" "pytorch $m fp16")
    fi
done

# ---- facts about the machine -----------------------------------------------------------------------------
say "results in $OUT"
{
    printf 'host: %s, kernel %s, %s\n' "$(hostname)" "$(uname -r)" "$(. /etc/os-release && echo "$PRETTY_NAME")"
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|CPU max MHz|L2 cache|L3 cache|Hypervisor vendor):' || true
    printf 'CPU flags of note: %s\n' "$(grep -o -w -E 'avx2|fma|f16c|avx512f|avx512_bf16|avx512_fp16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    printf 'nproc: %s\n' "$(nproc)"
    free -h | sed -n '1,2p'
    printf 'gcc: %s\n' "$(gcc --version | head -n 1)"
    printf 'OpenBLAS: %s\n' "$(dpkg-query -W -f='${Package} ${Version}' libopenblas0-pthread 2>/dev/null || echo '?'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
    printf 'oneDNN: %s\n' "$(dpkg-query -W -f='${Package} ${Version}' libdnnl2 2>/dev/null || echo '?')"
    "$MPTRAIN" info | sed -n '/^CPU kernels/,/^  native/p' | sed 's/^/mptrain info: /' 
    "$PYTHON" -c 'import sys, torch, numpy; print("python %s, torch %s, numpy %s, torch default threads %d" % (sys.version.split()[0], torch.__version__, numpy.__version__, torch.get_num_threads()))'
    if [ "$MODE" = cpu ]; then
        printf "PyTorch's CPU GEMM libraries (bench/pytorch_reference.py --blas-info): %s\n" "$("$PYTHON" "$ROOT/bench/pytorch_reference.py" --blas-info 2>&1 | tail -n 1)"
    fi
    if [ -n "$GEMM_BENCH" ]; then
        printf 'mptrain: %s, %s build\n' "$("$MPTRAIN" --version)" "$(meson introspect "$BUILD_DIR" --buildoptions | "$PYTHON" -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"][0])')"
    else
        printf 'mptrain: %s, %s (--mptrain)\n' "$("$MPTRAIN" --version)" "$MPTRAIN"
    fi
    if [ "$MODE" = gpu ]; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | sed 's/^/GPU: /'
        "$PYTHON" -c 'import torch; print("torch CUDA %s, cuDNN %s" % (torch.version.cuda, torch.backends.cudnn.version()))'
    fi
    printf 'load average at start: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/info/machine.txt" 2>&1
date -u '+%Y-%m-%d %H:%M UTC' >"$OUT/info/date.txt"
echo "$COMMAND_LINE" >"$OUT/info/command.txt"
{
    commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    dirty=$({ git -C "$ROOT" status --porcelain --untracked-files=no -- engine kernels models datasets tools 2>/dev/null ||
        true; } | wc -l) # a copy of the tree without .git (a device machine's) is "unknown", not an error
    if [ "$dirty" -gt 0 ]; then echo "$commit + uncommitted changes in $dirty source file(s)"; else echo "$commit"; fi
} >"$OUT/info/commit.txt"
cat "$OUT/info/machine.txt"

# ---- GEMM micro-benchmark (CPU GEMM only) ------------------------------------------------------------------
if [ "$MODE" = cpu ] && [ -n "$GEMM_BENCH" ]; then
    gemm_threads=(1 2)
    [ "$QUICK" = 1 ] && gemm_threads=(1)
    for t in "${gemm_threads[@]}"; do
        say "gemm_bench --threads $t"
        "$GEMM_BENCH" --threads "$t" >"$OUT/gemm/threads=$t.txt" 2>&1 ||
            { echo "gemm_bench failed" >&2; FAILED=$((FAILED + 1)); }
    done
fi

# ---- thread calibration (CPU) --------------------------------------------------------------------------------
declare -A CHOSEN
: >"$OUT/calibration.tsv"
for c in "${CONFIGS[@]}"; do
    read -r impl model prec <<<"$c"
    if [ "$MODE" = gpu ]; then
        CHOSEN[$c]=-
    elif [ "$impl" = mptrain ] && [ -n "$THREADS_MPT" ]; then
        CHOSEN[$c]=$THREADS_MPT
    elif [ "$impl" = pytorch ] && [ -n "$THREADS_TORCH" ]; then
        CHOSEN[$c]=$THREADS_TORCH
    fi
done
declare -A SCORE
for round in $(seq 1 "$CAL_ROUNDS"); do
    for c in "${CONFIGS[@]}"; do
        [ -n "${CHOSEN[$c]:-}" ] && continue
        read -r impl model prec <<<"$c"
        if [ "$impl" = mptrain ]; then cands=(1 2); else cands=(1/1 1/2 2/2 2/2p); fi
        [ $((round % 2)) = 0 ] && cands=($(printf '%s\n' "${cands[@]}" | tac))
        for s in "${cands[@]}"; do
            say "calibration $round/$CAL_ROUNDS: $impl $model $prec, $(setting_text "$impl" "$s")"
            d="$OUT/calib/$impl-$model-$prec-${s//\//-}-r$round"
            run_one "$d" "$impl" "$model" "$prec" "$s" 0 2 "$CAL_LIMIT" 1000 "$round"
            sc=$(best_epoch_s "$d")
            prev=${SCORE["$c|$s"]:-inf}
            SCORE["$c|$s"]=$("$PYTHON" -c "print(min(float('$prev'), float('$sc')))")
        done
    done
done
for c in "${CONFIGS[@]}"; do
    [ -n "${CHOSEN[$c]:-}" ] && continue
    read -r impl model prec <<<"$c"
    if [ "$impl" = mptrain ]; then cands=(1 2); else cands=(1/1 1/2 2/2 2/2p); fi
    best= bs=inf
    for s in "${cands[@]}"; do
        sc=${SCORE["$c|$s"]}
        if "$PYTHON" -c "import sys; sys.exit(0 if float('$sc') < float('$bs') else 1)"; then best=$s bs=$sc; fi
    done
    [ -n "$best" ] || die "calibration: every $impl $model $prec run failed; see $OUT/calib/*/stderr.txt"
    CHOSEN[$c]=$best
    for s in "${cands[@]}"; do
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$impl" "$model" "$prec" "$(setting_text "$impl" "$s")" \
            "${SCORE["$c|$s"]}" "$([ "$s" = "$best" ] && echo 1 || echo 0)" >>"$OUT/calibration.tsv"
    done
done

{
    printf -- '- Every run: batch 128, Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8), %s epoch(s), ' "$EPOCHS"
    if [ "$LIMIT_TRAIN" = 0 ]; then printf 'all 60000 training images'; else printf 'the first %s training images' "$LIMIT_TRAIN"; fi
    printf ', test on all 10000; seed = repeat - 1 (0, 1, ...) for both; %s repeat(s), mptrain and PyTorch alternating, the order reversed on even repeats.\n' "$REPEATS"
    printf -- '- mptrain: `%s train --model M --precision P --epochs %s --device %s --seed S --progress off` (+ the thread flag below).\n' "$BUILD_DIR/tools/mptrain" "$EPOCHS" "$DEVICE"
    printf -- '- PyTorch: `%s bench/pytorch_reference.py --model M --precision P --epochs %s --device %s --seed S --mode %s` (fp32; bf16 = torch.autocast bfloat16%s); data preloaded as tensors, no DataLoader; the modes run one after the other in one process, each from the same seed.\n' "$PYTHON" "$EPOCHS" "$DEVICE" "$TORCH_MODES" "$([ "$MODE" = gpu ] && echo '; fp16 = torch.autocast float16 + GradScaler; tf32 = allow_tf32; timed with CUDA events after 30 warm-up steps on a throw-away model; fused = Adam(fused=True); graph = the whole step as one CUDA Graph (fused capturable Adam, the GradScaler inside); compile = torch.compile(mode="max-autotune") of the model, fused Adam')"
    if [ "$MODE" = gpu ]; then
        printf -- '- Timing: training steps of each epoch only (no evaluation), by CUDA events on both sides (mptrain summary.json epoch_gpu_times_s, PyTorch torch.cuda.Event); per run the median of the epochs after the first (all when there is one); the host clock of the same epochs beside it.\n'
    else
        printf -- '- Timing: training steps of each epoch only (no evaluation), host clock; per run the median over its epochs.\n'
    fi
    printf -- '- Thread settings used:\n'
    for c in "${CONFIGS[@]}"; do
        read -r impl model prec <<<"$c"
        printf '  - %s %s %s: %s\n' "$impl" "$model" "$prec" "$(setting_text "$impl" "${CHOSEN[$c]}")"
    done
    printf -- "- OpenBLAS's core for both: %s (%s).\n" "${OPENBLAS_CORETYPE:-as detected}" "$CORETYPE_WHY"
} >"$OUT/info/settings.txt"

# ---- the measured runs ------------------------------------------------------------------------------------------
for rep in $(seq 1 "$REPEATS"); do
    order=("${CONFIGS[@]}")
    if [ $((rep % 2)) = 0 ]; then
        order=()
        for ((i = ${#CONFIGS[@]} - 1; i >= 0; i--)); do order+=("${CONFIGS[$i]}"); done
    fi
    for c in "${order[@]}"; do
        read -r impl model prec <<<"$c"
        say "repeat $rep/$REPEATS: $impl $model $prec ($(setting_text "$impl" "${CHOSEN[$c]}"))"
        run_one "$OUT/runs/$impl-$model-$prec-r$rep" "$impl" "$model" "$prec" "${CHOSEN[$c]}" $((rep - 1)) \
            "$EPOCHS" "$LIMIT_TRAIN" 0 "$rep"
    done
done
printf 'load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/info/machine.txt"

# ---- report ------------------------------------------------------------------------------------------------------
"$PYTHON" "$ROOT/bench/summarize.py" "$OUT" "$MODE" --raw >"$OUT/report.md"
"$PYTHON" "$ROOT/bench/summarize.py" "$OUT" "$MODE" >"$OUT/summary.md"
cat "$OUT/summary.md"
if [ "$WRITE_DOCS" = 1 ]; then
    mkdir -p "$ROOT/bench/results" "$ROOT/docs"
    # a results file of the same day is kept: this run's goes to the first free name of <mode>-<date>.md, -b.md, ...
    name=$MODE-$DATE.md
    for suffix in b c d e f g h i j k l m n o p q r s t u v w x y z; do
        [ -e "$ROOT/bench/results/$name" ] || break
        name=$MODE-$DATE-$suffix.md
    done
    [ -e "$ROOT/bench/results/$name" ] && die "bench/results holds $MODE-$DATE.md to $name already: move some away"
    res="$ROOT/bench/results/$name"
    { printf '# bench/run.sh %s, %s (raw results)\n\n' "$MODE" "$DATE"; cat "$OUT/report.md"; } >"$res"
    "$PYTHON" - "$ROOT/docs/benchmarks.md" "$MODE" "$OUT/summary.md" "bench/results/$name" <<'EOF'
import os, sys
doc, mode, summary, raw = sys.argv[1:]
begin, end = f"<!-- BEGIN bench/run.sh {mode} -->", f"<!-- END bench/run.sh {mode} -->"
body = open(summary).read().rstrip() + f"\n\nEvery run's numbers: [{raw}](../{raw}).\n"
text = open(doc).read() if os.path.exists(doc) else (
    "# Benchmarks: mptrain against PyTorch\n\nMeasured with `bench/run.sh` (see bench/README.md).\n\n"
    "## CPU\n\n<!-- BEGIN bench/run.sh cpu -->\n<!-- END bench/run.sh cpu -->\n\n"
    "## GPU\n\n<!-- BEGIN bench/run.sh gpu -->\n<!-- END bench/run.sh gpu -->\n")
if begin not in text or end not in text:
    text = text.rstrip() + f"\n\n## {mode.upper()}\n\n{begin}\n{end}\n"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc, "w").write(head + begin + "\n" + body + end + tail)
EOF
    say "wrote $res and the $MODE section of docs/benchmarks.md"
fi
say "report: $OUT/report.md"
[ "$FAILED" -eq 0 ] || die "$FAILED run(s) failed; see the 'exit' column of $OUT/report.md"
