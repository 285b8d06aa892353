#!/usr/bin/env bash
# session diagnostic for the hang seen in the first GPU run (every cuda test and every --device cuda run)
set -u
O=${OUT:-/tmp/diag-out}; mkdir -p "$O"
exec > >(tee -a "$O/diag.log") 2>&1
T0=$(date +%s); say() { printf '==> [%4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
R=/opt/mptdeps; mkdir -p $R; for f in .gpu/*.deb; do dpkg -x "$f" $R; done
L=$R/usr/lib/x86_64-linux-gnu
NV=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, "lib"))))' 2>/dev/null)
ORIG=${LD_LIBRARY_PATH:-}
FULL=$L:$L/openblas-pthread${NV:+:$NV}${ORIG:+:$ORIG}
SYS=$L:$L/openblas-pthread:/usr/local/cuda/lib64${ORIG:+:$ORIG}
B=$PWD/.gpu-pre; chmod +x $B/tools/* $B/tests/* .gpu-diag/probe
export MPT_DATA=$R/usr/share/datasets/fashion-mnist MPT_REQUIRE_CUDA=1 OPENBLAS_NUM_THREADS=1
export MPT_BUILD_ROOT=$B MPT_SOURCE_ROOT=$PWD MPT_CUDA_MODULE=$B/kernels/cuda/libmptrain-cuda.so
say "probe, wheel libraries first"; LD_LIBRARY_PATH=$FULL timeout -k 2 25 .gpu-diag/probe; echo "rc $?"
say "probe, system libraries"; LD_LIBRARY_PATH=$SYS timeout -k 2 25 .gpu-diag/probe; echo "rc $?"
dump() { # pid label
    local p=$1
    say "dump $2 (pid $p)"
    [ -d /proc/$p ] || { echo "gone"; return; }
    for t in /proc/$p/task/*; do echo "$(basename $t) $(cut -d' ' -f3 $t/stat) wchan=$(cat $t/wchan 2>/dev/null) $(cat $t/comm)"; done
    grep -oE '/[^ ]+\.so[^ ]*' /proc/$p/maps | sort -u | sed 's/^/  map /' | grep -vE 'libc\.so|libm\.so|ld-linux' | head -40
    command -v cuda-gdb >/dev/null && timeout -k 2 45 cuda-gdb -q -batch -p "$p" -ex 'set pagination off' -ex 'thread apply all bt 25' 2>&1 | grep -vE '^\[New LWP|^warning:' | head -150
}
say "test_cuda elementwise + mptrain train, both in the background, sampled at 15 s and 35 s"
export LD_LIBRARY_PATH=$FULL
(cd $B/tests && exec env CK_RUN_CASE=elementwise CK_TAP_LOG_FILE_NAME=- CUBLASLT_LOG_LEVEL=2 CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr stdbuf -oL -eL ./test_cuda) >/tmp/tc.log 2>&1 &
p1=$!
stdbuf -oL -eL $B/tools/mptrain train --model mlp --precision fp32 --epochs 1 --device cuda --data $MPT_DATA --progress on --cuda-graph off --out /tmp/tr >/tmp/tr.log 2>&1 &
p2=$!
sleep 15; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv; nvidia-smi --query-compute-apps=pid,used_memory --format=csv
dump $p1 test_cuda; echo "--- test_cuda output so far:"; tail -n 20 /tmp/tc.log
dump $p2 train; echo "--- train output so far:"; tail -n 20 /tmp/tr.log
sleep 10; say "second sample"; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
for p in $p1 $p2; do [ -d /proc/$p ] && for t in /proc/$p/task/*; do echo "$p $(basename $t) $(cut -d' ' -f3,14,15 $t/stat) $(cat $t/wchan 2>/dev/null)"; done; done
echo "--- test_cuda output:"; tail -n 30 /tmp/tc.log; echo "--- train output:"; tail -n 30 /tmp/tr.log
kill -9 $p1 $p2 2>/dev/null
cp /tmp/tc.log /tmp/tr.log "$O/" 2>/dev/null
say "done"
