#!/usr/bin/env bash
# tests/gpu/test_pytorch_reference.sh SOURCE_ROOT DATA_DIR - suite 'unit': bench/pytorch_reference.py's modes (issue 31 B)
# without a GPU.
#
# With Debian's CPU-only PyTorch (/usr/bin/python3 with python3-torch, 1.13): eager trains on the CPU and prints one
# JSON line; fused and compile, which that torch cannot run, print "unavailable" lines naming the reason while the
# other modes still run (exit 0); --device cuda stops with a message naming torch.cuda.is_available(); graph on the
# CPU is a usage error; the padded batches of graph and compile mode (labels of padding rows set to ignore_index)
# give the same loss and gradients as the real rows alone; --blas-info and each JSON line name the OpenBLAS core that
# ran (OPENBLAS_CORETYPE set to two cores: each is reported). Without that torch, a stub `torch` package stands in and
# only the argument handling is checked (every usage error is found before torch is used).
# Prints a Check-style summary line (Checks: N, Failures: F, Errors: 0), which ./run adds to its total.
set -uo pipefail
src=$1
data=${2:-/usr/share/datasets/fashion-mnist}
ref=$src/bench/pytorch_reference.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" # ok, bad, check, finish

py=/usr/bin/python3
real=0
if "$py" -c 'import torch, numpy' 2>/dev/null; then
    real=1
else # a stub torch: enough for the module to import and parse its arguments
    py=$(command -v python3 || echo /usr/bin/python3)
    mkdir -p "$tmp/site/torch/nn" "$tmp/site/numpy"
    printf '__version__ = "0.0+stub"\ndef no_grad():\n    return lambda f: f\n' >"$tmp/site/torch/__init__.py"
    printf 'class Module: pass\n' >"$tmp/site/torch/nn/__init__.py"
    : >"$tmp/site/torch/nn/functional.py"
    "$py" -c 'import numpy' 2>/dev/null || printf '__version__ = "0+stub"\n' >"$tmp/site/numpy/__init__.py"
    export PYTHONPATH=$tmp/site${PYTHONPATH:+:$PYTHONPATH}
    printf 'note: no torch for %s: the argument checks run against a stub torch\n' /usr/bin/python3
fi

# ---- argument handling (any torch) ------------------------------------------------------------------------------
usage_error() { # WHAT EXPECTED-TEXT ARGS...
    local what=$1 want=$2 out rc
    shift 2
    out=$("$py" "$ref" "$@" 2>&1)
    rc=$?
    check "$what: exit 2 and the message says '$want' (exit $rc)" bash -c '[ "$1" = 2 ] && grep -qF -- "$2" <<<"$3"' _ "$rc" "$want" "$out"
}
usage_error "an unknown mode" "expected a comma-separated list of eager, fused, graph, compile, found 'eager,fast'" --mode eager,fast
usage_error "a mode named twice" "'graph,graph' names a mode twice" --mode graph,graph --device cuda
usage_error "graph on the CPU" "--mode graph needs --device cuda" --mode eager,graph
usage_error "an empty mode list" "expected a comma-separated list" --mode ,
usage_error "a negative --limit-train" "must be >= 0" --limit-train -5
out=$("$py" "$ref" --help 2>&1)
check "--help names the modes and the graph scope (exit $?)" bash -c 'grep -q -- "--mode" <<<"$1" && grep -q -- "--graph-scope" <<<"$1"' _ "$out"

if [ "$real" = 1 ] && [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    # ---- eager on the CPU, and the modes this torch cannot run ---------------------------------------------------
    "$py" "$ref" --model mlp --precision fp32 --epochs 1 --limit-train 512 --limit-test 100 --threads 1 \
        --data "$data" --mode eager,fused,compile >"$tmp/out.txt" 2>"$tmp/err.txt"
    rc=$?
    sed 's/^/    | /' "$tmp/err.txt" | tail -n 5
    check "eager,fused,compile on a CPU-only torch exits 0 (exit $rc)" [ "$rc" = 0 ]
    check "one JSON line per mode, in the order asked" \
        "$py" -c 'import json, sys; m = [json.loads(l)["mode"] for l in open(sys.argv[1]) if l.startswith("{")]; sys.exit(m != ["eager", "fused", "compile"])' "$tmp/out.txt"
    check "eager trained: status ok, 4 steps, a finite epoch time and an accuracy above chance" \
        "$py" -c 'import json, math, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
sys.exit(not (j["status"] == "ok" and j["steps_per_epoch"] == 4 and math.isfinite(j["epoch_times_s"][0]) and j["epoch_times_s"][0] > 0 and j["final_test_accuracy"] > 0.2))' "$tmp/out.txt"
    if "$py" -c 'import torch, sys; sys.exit(hasattr(torch, "compile"))'; then
        check "compile on a torch without torch.compile: an unavailable line that says so" \
            "$py" -c 'import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][2]
sys.exit(not (j["status"] == "unavailable" and "has no torch.compile" in j["reason"]))' "$tmp/out.txt"
    fi
    if ! "$py" -c 'import torch; torch.optim.Adam([torch.zeros(1, requires_grad=True)], fused=True)' 2>/dev/null; then
        check "fused on a torch whose fused Adam needs CUDA: an unavailable line naming what Adam raised" \
            "$py" -c 'import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][1]
sys.exit(not (j["status"] == "unavailable" and "fused=True" in j["reason"] and "raised" in j["reason"]))' "$tmp/out.txt"
    fi
    out=$("$py" "$ref" --device cuda --mode graph --epochs 1 --data "$data" 2>&1)
    rc=$?
    if "$py" -c 'import torch, sys; sys.exit(torch.cuda.is_available())'; then
        check "--device cuda without a usable GPU stops naming torch.cuda.is_available() (exit $rc)" \
            bash -c '[ "$1" = 1 ] && grep -q "torch.cuda.is_available() is False" <<<"$2"' _ "$rc" "$out"
    fi
    # ---- which libraries run PyTorch's CPU GEMMs (issue 32 D): read from the process, never assumed ----------------
    if "$py" -c 'import torch, sys; sys.exit("BLAS_INFO=generic" not in torch.__config__.show())' 2>/dev/null &&
        ldconfig -p | grep 'openblas' >/dev/null; then # not grep -q: under pipefail its early exit can SIGPIPE ldconfig
        for core in Haswell Sandybridge; do
            out=$(OPENBLAS_CORETYPE=$core "$py" "$ref" --blas-info 2>&1)
            check "--blas-info under OPENBLAS_CORETYPE=$core names OpenBLAS's core $core ($out)" "$py" -c '
import json, sys
j = json.loads(sys.argv[1].splitlines()[-1])
sys.exit(not (j["openblas_core"] == sys.argv[2] and j["OPENBLAS_CORETYPE"] == sys.argv[2] and sys.argv[2] in j["openblas_config"]))' "$out" "$core"
        done
        check "eager's JSON line records the GEMM libraries (blas: OpenBLAS's core and config)" "$py" -c '
import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
sys.exit(not (j["blas"]["openblas_core"] and j["blas"]["openblas_config"].startswith("OpenBLAS")))' "$tmp/out.txt"
    fi
    # ---- the padded batches of graph and compile mode ------------------------------------------------------------
    check "padded batches: loss and gradients of B rows with ignored padding equal those of the real rows alone" \
        "$py" - "$src/bench" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
import torch.nn.functional as F
import pytorch_reference as ref
torch.manual_seed(0)
n, B = 300, 128                      # 3 batches: 128, 128, 44 real rows + 84 padding
x = torch.randn(n, 20)
y = torch.randint(0, 10, (n,))
perm = torch.randperm(n)
idx, mask = ref.padded_batches(perm, 3, B, torch.device("cpu"))
assert idx.shape == (3 * B,) and int(mask.sum()) == n and bool(mask[:n].all()) and not bool(mask[n:].any())
w = torch.randn(20, 10, requires_grad=True)
for b in range(3):
    i, m = idx[b * B:(b + 1) * B], mask[b * B:(b + 1) * B]
    padded = F.cross_entropy(x[i] @ w, torch.where(m, y[i], torch.full_like(i, -100)))
    gp, = torch.autograd.grad(padded, w)
    real = perm[b * B:min((b + 1) * B, n)]
    plain = F.cross_entropy(x[real] @ w, y[real])
    gr, = torch.autograd.grad(plain, w)
    rel = float((padded - plain).abs() / plain.abs())
    # both are a mean over the same real rows; only the summation order of the reduction may differ
    assert rel <= 2e-6, (b, float(padded), float(plain))
    assert torch.allclose(gp, gr, rtol=1e-5, atol=1e-7), b
PY
else
    printf 'note: no torch with data here: only the argument checks ran\n'
fi

finish
