#!/usr/bin/env bash
# Second call: after bench/gpu.sh --stages info,test,graph (the fixed tests). FP8 training with cuBLASLt's error log,
# lenet5 fp16 epoch time with the first call's module (old) and this one (new), alternating, and ncu of lenet5's step.
set -u
cd "$(dirname "$0")/.." || exit 2
P=$PWD/runs/profile3; mkdir -p "$P"
exec > >(tee "$P/profile3.log") 2>&1
W=$(ls -d runs/gpu-*/ | tail -n 1)
MPT=$PWD/${W}bin/mptrain
NEW=$PWD/.gpu-carry/build/kernels/cuda/libmptrain-cuda.so OLD=$PWD/.gpu-prof/old-module.so
export MPT_CUDA_MODULE=$NEW MPT_DATA=$PWD/.gpu-carry/data MPT_REQUIRE_CUDA=1
t0=$SECONDS
tr() { # NAME ARGS...
    local n=$1; shift
    timeout -k 5 40 "$MPT" train "$@" --device cuda --data "$MPT_DATA" --progress off --out "$P/$n" >"$P/$n.txt" 2>&1
    echo "== $n: rc=$? ($((SECONDS - t0)) s): $*"; grep -E "warning|fatal|final test" "$P/$n.txt" | head -n 6
}
for p in fp8 fp8-e4m3; do
  for g in on off; do CUBLASLT_LOG_LEVEL=1 tr "mlp-$p-$g" --model mlp --precision $p --epochs 3 --cuda-graph $g; done
  cmp -s "$P/mlp-$p-on/metrics.csv" "$P/mlp-$p-off/metrics.csv" && echo "$p: graph on/off metrics.csv identical" || echo "$p: graph on/off DIFFER (or missing)"
done
CUBLASLT_LOG_LEVEL=1 tr mlp-fp8-fast --model mlp --precision fp8 --fp8-accum fast --epochs 3
CUBLASLT_LOG_LEVEL=1 tr mlp-fp8-current --model mlp --precision fp8 --fp8-scaling current --epochs 3
tr mlp-mxfp8 --model mlp --precision mxfp8 --epochs 3
tr mlp-bf16 --model mlp --precision bf16 --epochs 3
tr lenet5-fp8 --model lenet5 --precision fp8 --epochs 3
for r in 1 2 3; do
  for m in old new; do
    MPT_CUDA_MODULE=$([ $m = old ] && echo "$OLD" || echo "$NEW") tr "lenet5-fp16-$m-$r" --model lenet5 --precision fp16 --epochs 3
  done
done
python3 - "$P" <<'PY'
import json, statistics, sys, glob, os
for d in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    j = json.load(open(d)); ev = j.get("epoch_gpu_times_s") or []
    m = statistics.median(ev[1:]) if len(ev) > 1 else float("nan")
    print("%-24s gpu epoch median %7.2f ms (epochs %s)  test acc %s  graph %s" % (os.path.basename(os.path.dirname(d)), 1e3*m,
          " ".join("%.2f" % (1e3*e) for e in ev), j.get("final_test_accuracy", j.get("test_accuracy")), j.get("cuda_graph", {}).get("status")))
PY
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout -k 5 60 "$NCU" --clock-control none --target-processes all --launch-skip 4000 --launch-count 40 \
    --metrics gpu__time_duration.sum,launch__grid_size --csv "$MPT" train --model lenet5 --precision fp16 --epochs 1 \
    --device cuda --data "$MPT_DATA" --progress off --cuda-graph off --out "$P/ncu-lenet5" >"$P/ncu-lenet5-fp16.csv" 2>"$P/ncu-lenet5.err"
echo "ncu rc=$? ($((SECONDS - t0)) s)"
timeout -k 5 60 "$NCU" --clock-control none --target-processes all --launch-skip 4000 --launch-count 40 \
    --metrics gpu__time_duration.sum,launch__grid_size --csv "$MPT" train --model mlp --precision fp8 --epochs 1 \
    --device cuda --data "$MPT_DATA" --progress off --cuda-graph off --out "$P/ncu-mlp-fp8" >"$P/ncu-mlp-fp8.csv" 2>"$P/ncu-mlp-fp8.err"
echo "ncu fp8 rc=$? ($((SECONDS - t0)) s)"
tar -C runs --exclude='*.safetensors' -czf "${OUT:-/tmp}/profile3.tgz" profile3
