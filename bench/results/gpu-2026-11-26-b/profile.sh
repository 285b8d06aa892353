#!/usr/bin/env bash
# After bench/gpu.sh (same device call): per-kernel device times by Nsight Compute for one direct (--cuda-graph off)
# training step of mlp fp16 and lenet5 fp16, and the FP8 modes' epoch times on the GPU. Output: $OUT/profile.tgz.
set -u
cd "$(dirname "$0")/.." || exit 2
P=$PWD/runs/profile; mkdir -p "$P"
exec > >(tee "$P/profile.log") 2>&1
W=$(ls -d runs/gpu-*/ | tail -n 1)
MPT=$PWD/${W}bin/mptrain
export MPT_CUDA_MODULE=$PWD/.gpu-carry/build/kernels/cuda/libmptrain-cuda.so MPT_DATA=$PWD/.gpu-carry/data MPT_REQUIRE_CUDA=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "wrapper: $MPT; ncu: ${NCU:-none}; $("$NCU" --version 2>&1 | tail -n 1)"
t0=$SECONDS
prof() { # NAME SKIP COUNT ARGS...
    local n=$1 s=$2 c=$3; shift 3
    echo "== ncu $n: skip $s, count $c: $*"
    timeout -k 5 100 "$NCU" --clock-control none --target-processes all --launch-skip "$s" --launch-count "$c" \
        --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
        --csv "$MPT" train "$@" --epochs 1 --device cuda --data "$MPT_DATA" --progress off --cuda-graph off --out "$P/run-$n" \
        >"$P/ncu-$n.csv" 2>"$P/ncu-$n.err"
    echo "rc=$? $((SECONDS - t0)) s; $(grep -c gpu__time_duration "$P/ncu-$n.csv") rows"; tail -n 3 "$P/ncu-$n.err"
}
prof mlp-fp16 4000 100 --model mlp --precision fp16 --batch-size 128
prof lenet5-fp16 4000 160 --model lenet5 --precision fp16 --batch-size 128
for p in bf16 fp8 fp8-e4m3 mxfp8; do
  for g in on off; do
    echo "== train mlp $p graph $g"
    timeout -k 5 40 "$MPT" train --model mlp --precision $p --epochs 3 --device cuda --data "$MPT_DATA" --progress off \
        --cuda-graph $g --out "$P/fp8-$p-$g" >"$P/fp8-$p-$g.txt" 2>&1; echo "rc=$? $((SECONDS - t0)) s"; tail -n 4 "$P/fp8-$p-$g.txt"
  done
  cmp -s "$P/fp8-$p-on/metrics.csv" "$P/fp8-$p-off/metrics.csv" && echo "$p: graph on/off metrics.csv identical" || echo "$p: graph on/off DIFFER"
done
echo "== train mlp fp8 --fp8-accum fast"
timeout -k 5 40 "$MPT" train --model mlp --precision fp8 --fp8-accum fast --epochs 3 --device cuda --data "$MPT_DATA" --progress off \
    --out "$P/fp8-fast" >"$P/fp8-fast.txt" 2>&1; echo "rc=$?"; tail -n 4 "$P/fp8-fast.txt"
python3 - "$P" <<'PY'
import json, statistics, sys, glob, os
for d in sorted(glob.glob(sys.argv[1] + "/fp8-*/summary.json")):
    j = json.load(open(d)); ev = j.get("epoch_gpu_times_s") or []
    m = statistics.median(ev[1:]) if len(ev) > 1 else float("nan")
    print("%-28s gpu epoch median %.2f ms  test acc %s  graph %s" % (os.path.basename(os.path.dirname(d)), 1e3*m,
          j.get("final_test_accuracy", j.get("test_accuracy")), j.get("cuda_graph", {}).get("status")))
PY
tar -C runs --exclude='*.safetensors' -czf "${OUT:-/tmp}/profile.tgz" profile
