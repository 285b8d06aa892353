#!/usr/bin/env bash
# first-run.sh - the first contact of mptrain with a GPU, in one command that compiles nothing there.
#
# Carry: .gpu (runtime + dev .debs, Fashion-MNIST .deb) and .gpu-pre (prebuilt tools/mptrain, tests/test_cuda*,
# tests/test_nccl, kernels/cuda/libmptrain-cuda.so and libmptrain-cuda-nonccl.so, built on Debian 12 with
# nvcc 13.0, -Dgpu_arch=80,90 -Dgsl=disabled -Dmpi=disabled). Run from the repo root:
#     cp ../shared/gpu/first-run.sh .gpu/ (on the development machine, after prebuild.sh), then on the GPU
#     machine: BUDGET=420 bash .gpu/first-run.sh          (device tool: timeout_s = BUDGET + 60)
# Never builds unless the prebuilt module cannot be loaded; never calls meson/ninja otherwise. Every stage runs
# under its own timeout, inside one global budget; every log lands in $OUT as it is produced (run.log, tee'd)
# and in $OUT/logs.tgz (rewritten after every stage, so a kill from outside still returns the last one).
# Files in $OUT (<= 8): run.log, machine.txt, info.txt, summary.txt, logs.tgz.
set -u
T0=$(date +%s)
O=${OUT:-$PWD/out-first-run}
W=${WORK:-/tmp/mpt-first}
BUDGET=${BUDGET:-420}
mkdir -p "$O" "$W"
exec > >(tee -a "$O/run.log") 2>&1
ulimit -c 0
say() { printf '==> [%4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# lim SECONDS CMD...: CMD under min(SECONDS, budget left), status 124 on timeout; nothing started without time
lim() {
    local t=$1 l
    shift
    l=$(left)
    [ "$l" -lt "$t" ] && t=$l
    if [ "$t" -lt 5 ]; then echo "SKIPPED (budget spent): $*"; return 124; fi
    timeout -k 5 "$t" "$@"
}
note() { printf '%s\n' "$*" >>"$O/summary.txt"; }
# checkpoints excluded: 18 runs x ~2.6 MB of weights would pass the 16 MiB a returned file may have
pack() { tar -C "$W" --exclude='*.safetensors' -czf "$O/logs.tgz.tmp" . 2>/dev/null && mv "$O/logs.tgz.tmp" "$O/logs.tgz"; }
stage_end() { note "$(printf '%-28s %4ds  %s' "$1" "$(($(date +%s) - $2))" "$3")"; pack; }

# ---- 0. the machine, before anything can fail ---------------------------------------------------------------------
say "machine facts"
{
    date -u; uname -a; head -n 2 /etc/os-release; ldd --version | head -n 1; nproc; free -g | head -n 2
    nvidia-smi || echo "nvidia-smi failed"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv 2>&1
    command -v nvcc && nvcc --version | tail -n 2
    ls -la /usr/local/cuda /usr/local/cuda/lib64/ 2>&1 | grep -E 'cuda ->|cudart|cublasLt|curand|cudnn|nccl|nvrtc' || true
    ldconfig -p | grep -E 'libcudnn\.so|libnccl|libgfortran|libz\.so|libcublasLt|libcudart' || true
    python3 - <<'PY'
import os, sys
print("python", sys.version.split()[0], sys.executable)
try:
    import nvidia
    for p in nvidia.__path__:
        for d in sorted(os.listdir(p)):
            lib = os.path.join(p, d, "lib")
            if os.path.isdir(lib):
                print("wheel lib:", lib, " ".join(sorted(f for f in os.listdir(lib) if ".so" in f))[:300])
except Exception as e:
    print("no nvidia wheels:", e)
PY
} >"$O/machine.txt" 2>&1
# warm the page cache for the PyTorch runs later (libtorch is GBs), in the background, off the GPU
(python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.backends.cudnn.version())' \
    >"$W/torch-import.txt" 2>&1 &)

# ---- 1. runtime libraries: carried Debian libs + the machine's CUDA wheels -------------------------------------------
t=$(date +%s)
R=${MPT_DEPS:-/opt/mptdeps}
ORIG_LD=${LD_LIBRARY_PATH:-}
mkdir -p "$R"
for f in .gpu/*.deb; do dpkg -x "$f" "$R"; done
L=$R/usr/lib/x86_64-linux-gnu
NV=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, "lib"))))' 2>/dev/null)
export LD_LIBRARY_PATH=$L:$L/openblas-pthread${NV:+:$NV}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MPT_DATA=$R/usr/share/datasets/fashion-mnist MPT_REQUIRE_CUDA=1 OPENBLAS_NUM_THREADS=1 NCCL_DEBUG=WARN
B=$PWD/.gpu-pre
chmod +x "$B"/tools/* "$B"/tests/* 2>/dev/null # in case the transfer dropped the mode bits
export MPT_BUILD_ROOT=$B MPT_SOURCE_ROOT=$PWD MPT_CUDA_MODULE=$B/kernels/cuda/libmptrain-cuda.so
{ echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; for f in "$B"/tools/mptrain "$B"/tests/test_cuda "$B"/kernels/cuda/*.so; do
    echo "== ldd $f"; ldd "$f"; done; } >"$W/ldd.txt" 2>&1
if grep -A30 'libmptrain-cuda.so$' "$W/ldd.txt" | grep -q 'libnccl.so.2 => not found'; then
    export MPT_CUDA_MODULE=$B/kernels/cuda/libmptrain-cuda-nonccl.so
    note "libnccl.so.2 not found: using the module built without NCCL (test_nccl will skip)"
fi
missing=$(grep 'not found' "$W/ldd.txt" | sort -u | tr -s ' \t' ' ')
[ -n "$missing" ] && note "ldd: not found: $missing"
stage_end "libraries" "$t" "${missing:+MISSING $missing}"

# ---- 2. mptrain info (fallback: build here if the prebuilt cannot load its module) --------------------------------
t=$(date +%s)
say "mptrain info"
lim 60 "$B/tools/mptrain" info >"$O/info.txt" 2>&1
rc=$?
if [ -n "${FORCE_BUILD:-}" ] || grep -Eq 'loadable: +no|cannot load|error while loading' "$O/info.txt" || [ "$rc" -gt 1 ]; then
    note "prebuilt not usable (info rc $rc): building on this machine (-Dgpu_arch=90)"
    say "fallback build"
    # device-env.sh (prepare.sh's): pkg-config paths, sysroot, cuDNN from the wheel (MPT_CUDNN_ROOT)
    [ -f .gpu/device-env.sh ] && source .gpu/device-env.sh >>"$W/build.log" 2>&1
    # zlib1g-dev's libz.so is an absolute link to Debian's /lib/x86_64-linux-gnu/libz.so.1.2.13: repoint it
    [ -e "$L/libz.so" ] || ln -sf /lib/x86_64-linux-gnu/libz.so.1 "$L/libz.so"
    export LD_LIBRARY_PATH=$L:$L/openblas-pthread${NV:+:$NV}:${LD_LIBRARY_PATH:-}
    MESON=meson; command -v meson >/dev/null || MESON="python3 -m mesonbuild.mesonmain"
    lim 180 $MESON setup "$W/build" --buildtype=release -Dgpu_arch=90 -Dcuda=enabled -Dgsl=disabled -Dmpi=disabled \
        -Dman=disabled ${MPT_CUDNN_ROOT:+-Dcudnn_root=$MPT_CUDNN_ROOT} >"$W/build.log" 2>&1 &&
        lim 240 ninja -C "$W/build" -j"$(nproc)" tools/mptrain tests/test_cuda tests/test_cuda_graph tests/test_nccl \
            kernels/cuda/libmptrain-cuda.so >>"$W/build.log" 2>&1
    rc=$?
    tail -n 30 "$W/build.log"
    if [ "$rc" = 0 ]; then
        B=$W/build MPT_BUILD_ROOT=$W/build MPT_CUDA_MODULE=$W/build/kernels/cuda/libmptrain-cuda.so
        lim 60 "$B/tools/mptrain" info >"$O/info.txt" 2>&1
    fi
    stage_end "fallback build" "$t" "rc $rc"
else
    stage_end "info" "$t" "rc $rc"
fi
cat "$O/info.txt"

# ---- 3. the cuda suite: one process per Check tcase, so an abort() loses one tcase, not the suite ----------------
# (CK_FORK=no: an mpt_fatal in one test ends its program; CK_RUN_CASE isolates tcases; TAP lines on stdout,
# line-buffered by stdbuf, survive a kill.) All but the timing tcase run at once (one GPU, 16 cores).
run_case() { # program tcase seconds
    local log="$W/$1-${2// /_}.log" s=$(date +%s) rc
    (cd "$B/tests" && CK_RUN_CASE="$2" CK_TAP_LOG_FILE_NAME=- lim "$3" stdbuf -oL -eL "./$1") >"$log" 2>&1
    rc=$?
    note "$(printf '%-28s %4ds  rc %s  %s' "$1/$2" "$(($(date +%s) - s))" "$rc" \
        "$(grep -c '^ok ' "$log") ok, $(grep -c '^not ok ' "$log") not ok")"
    { [ "$rc" != 0 ] || grep -q '^not ok ' "$log"; } && echo "$1|$2" >>"$W/failed.txt"
    return 0
}
t=$(date +%s)
say "cuda suite (parallel tcases)"
pids=()
run_case test_cuda gemm 110 & pids+=($!)
run_case test_cuda conv 110 & pids+=($!)
run_case test_cuda elementwise 80 & pids+=($!)
run_case test_cuda update 80 & pids+=($!)
run_case test_cuda training 130 & pids+=($!)
run_case test_cuda_graph scaler 80 & pids+=($!)
run_case test_cuda_graph training 130 & pids+=($!)
run_case test_nccl "one rank" 60 & pids+=($!)
wait "${pids[@]}" # never a bare wait: bash 5.1+ would also wait for the tee of the process substitution
run_case test_cuda_graph timing 40 # alone: it times the GPU
grep -h -E '^not ok|fatal|FAILED|^test_cuda(_graph)?: (e2e|timing)' "$W"/test_*.log | head -n 60
stage_end "cuda suite" "$t" ""

# ---- 3b. diagnostics (session addition): up to two failed tcases once more with synchronous error checks
t=$(date +%s)
if [ -s "$W/failed.txt" ]; then
    head -n 2 "$W/failed.txt" | while IFS='|' read -r p c; do
        [ "$(left)" -gt 120 ] || { note "diag: skipped $p/$c (time)"; continue; }
        log="$W/diag-$p-${c// /_}.log"
        (cd "$B/tests" && MPT_CUDA_SYNC_DEBUG=1 CK_RUN_CASE="$c" CK_TAP_LOG_FILE_NAME=- lim 40 stdbuf -oL -eL "./$p") >"$log" 2>&1
        note "$(printf 'diag SYNC_DEBUG %-28s rc %s  %s ok, %s not ok' "$p/$c" "$?" "$(grep -c '^ok ' "$log")" "$(grep -c '^not ok ' "$log")")"
    done
fi
stage_end "diagnostics" "$t" ""

# ---- 4. the step graph: mlp fp16, --cuda-graph on/off, bit-identical metrics --------------------------------------
t=$(date +%s)
say "graph on/off"
for g in on off; do
    lim 30 "$B/tools/mptrain" train --model mlp --precision fp16 --batch-size 128 --epochs 3 --device cuda \
        --data "$MPT_DATA" --progress off --cuda-graph "$g" --out "$W/graph-$g" >"$W/graph-$g.txt" 2>&1
    note "graph $g: rc $? $(grep -h -o '"cuda_graph"[^}]*}' "$W/graph-$g/summary.json" 2>/dev/null | head -c 200)"
done
cmp -s "$W/graph-on/metrics.csv" "$W/graph-off/metrics.csv" && note "graph: metrics.csv identical" ||
    note "graph: metrics.csv DIFFER (or missing)"
python3 - "$W" <<'PY' >>"$O/summary.txt" 2>&1
import json, statistics, sys
for g in ("on", "off"):
    try:
        j = json.load(open("%s/graph-%s/summary.json" % (sys.argv[1], g)))
        ev = j.get("epoch_gpu_times_s") or []
        print("graph %s: epoch_gpu_times_s %s (median after the first: %s ms); host %s" % (
            g, ev, round(1e3 * statistics.median(ev[1:]), 3) if len(ev) > 1 else "-", j.get("epoch_times_s")))
    except Exception as e:
        print("graph %s: no summary (%s)" % (g, e))
PY
stage_end "graph" "$t" ""

# ---- 5. compare on Fashion-MNIST ------------------------------------------------------------------------------------
t=$(date +%s)
for m in mlp lenet5; do
    say "compare $m"
    lim 45 "$B/tools/mptrain" compare --model "$m" --device cuda --epochs 2 --data "$MPT_DATA" --progress off \
        --out "$W/compare-$m" >"$W/compare-$m.txt" 2>&1
    note "compare $m: rc $?"
    tail -n 12 "$W/compare-$m.txt"
done
stage_end "compare" "$t" ""

# ---- 6. against PyTorch: one repeat, what time is left ----------------------------------------------------------
t=$(date +%s)
cat "$W/torch-import.txt" 2>/dev/null
for m in mlp lenet5; do
    for p in fp32 tf32 fp16 bf16; do
        [ "$(left)" -gt 25 ] || { note "bench: budget spent before $m $p"; break 2; }
        lim 40 "$B/tools/mptrain" train --model "$m" --precision "$p" --epochs 3 --device cuda --data "$MPT_DATA" \
            --progress off --out "$W/bench/mptrain-$m-$p" >"$W/bench-mptrain-$m-$p.txt" 2>&1
        lim 60 env LD_LIBRARY_PATH="$ORIG_LD" python3 bench/pytorch_reference.py --model "$m" --precision "$p" --epochs 3 --device cuda \
            --data "$MPT_DATA" >"$W/bench-pytorch-$m-$p.json" 2>"$W/bench-pytorch-$m-$p.err"
        note "bench $m $p: pytorch rc $?"
    done
done
stage_end "bench (1 repeat)" "$t" ""
say "done in $(($(date +%s) - T0)) s"
cat "$O/summary.txt"
pack
