#!/usr/bin/env bash
# tests/gpu/test_gpu_script.sh SOURCE_ROOT FAKE_DEVICE - suite 'unit': bench/gpu.sh rehearsed without a GPU.
#
# A GPU machine is lent for minutes; a run of bench/gpu.sh that dies there reports nothing unless its plumbing
# works. This rehearses the plumbing here, with tests/gpu/fake_device.c in place of the device (a program that acts
# as mptrain and as the cuda suite's programs: see its header), stand-ins for nvidia-smi and cuda-gdb, and a Python
# whose `torch` is a stub (bench/pytorch_reference.py answers with a fake JSON line); everything else is the real
# script: the prebuilt carry's layout, bench/run.sh, bench/summarize.py, the test cases read from tests/*.c.
#   Run A (FAKE_HANG=test_cuda/conv, --tcase-timeout 4): the hanging test case is diagnosed (its threads' wait
#     channels, the debugger's stacks) and killed at its limit, the TAP line it printed before hanging survives (stdio
#     block-buffered, made line-buffered by the runner), every other case runs, `timing` alone after the others, and
#     every later stage still runs (tc: tests/test_cuda_tc alone, its report on the results page); the output folder
#     holds exactly the six files a device call returns, the results
#     page has every stage, the library path has every nvidia/*/lib folder of the Python's wheels; a loss that moves
#     with --cuda-graph on (FAKE_GRAPH_CHANGES_MATH) fails the graph stage, and so does one that moves with a fused path
#     of issue 31 A (FAKE_FUSED_CHANGES_MATH: MPT_CUDA_FUSED_UPDATE=1); the graph table has a row per run.
#   Run B (FAKE_HANG="mptrain compare lenet5"): bench/gpu.sh is killed with SIGKILL from outside, as a device call
#     past its time limit is, while a stage hangs; what the earlier stages produced, and what the hanging stage had
#     printed, are already in the output folder.
#   Run C (--stages bench,compile,sweep,dp,memcheck; issue 31): PyTorch's modes (eager, fused, graph; compile in its own
#     stage, here unavailable as on a machine that cannot compile, and hanging after its eager line in one
#     configuration: the finished modes survive), the comparison against each mode and the best; bench/mlp_sweep's
#     table; data-parallel through the carried Open MPI's mpirun, relocated into the carry (OPAL_PREFIX ...); memcheck
#     of every test case but timing under compute-sanitizer, one of them with a memory error that fails the stage.
#   Run D (--stages speedrun, not in the default list): mptrain speedrun and bench/speedrun_pytorch.py (a stand-in that
#     records its arguments) run, and both reports reach the results page.
# Prints a Check-style summary line (Checks: N, Failures: F, Errors: 0), which ./run adds to its total.
set -uo pipefail
src=$1
fake=$2
tmp=$(mktemp -d)
gpid=
cleanup() {
    local p
    [ -n "$gpid" ] && kill -KILL -- "-$gpid" 2>/dev/null
    # the stand-ins gpu.sh started in groups of their own (a device call's machine would go away with them)
    for p in $(pgrep -f "$tmp/" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" # ok, bad, check, finish
real_python=$(command -v python3) || { bad "python3 exists (bench/run.sh and summarize.py need it)"; finish; }

# ---- a tree with what gpu.sh reads, and a prebuilt carry of stand-ins ------------------------------------------
tree=$tmp/tree
mkdir -p "$tree/tests"
cp -r "$src/bench" "$tree/"
cp "$src/tests/meson.build" "$tree/tests/"
programs=$(sed -n "s/^ *\['\(test_[a-z_]*\)', *'cuda', *[0-9]*\],.*/\1/p" "$src/tests/meson.build")
c=$tree/.gpu-carry
mkdir -p "$c/build/tools" "$c/build/tests" "$c/build/kernels/cuda" "$c/data" "$tmp/libs"
cp "$fake" "$c/build/tools/mptrain"
for p in $programs; do
    cp "$src/tests/$p.c" "$tree/tests/"
    cp "$fake" "$c/build/tests/$p"
done
: >"$c/build/kernels/cuda/libmptrain-cuda.so"
echo fake >"$tmp/libs/libfake.so.1"
tar -C "$tmp/libs" -cJf "$c/runtime-libs.tar.xz" .
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    : >"$c/data/$f.gz"
done
printf 'commit: fake000000000000\nnvcc: release 13.0, V13.0.88\n' >"$c/MANIFEST"
cp "$fake" "$c/build/bench/mlp_sweep" 2>/dev/null || { mkdir -p "$c/build/bench" && cp "$fake" "$c/build/bench/mlp_sweep"; }
# an Open MPI runtime as bench/gpu.sh --prebuild packs it: an orterun stand-in that records how it was started (its
# relocation variables) and runs the program as one rank
mkdir -p "$tmp/ompi/usr/bin" "$tmp/ompi/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix" "$tmp/ompi/etc/openmpi"
cat >"$tmp/ompi/usr/bin/orterun" <<'EOF'
#!/bin/sh
echo "orterun stand-in: OPAL_PREFIX=$OPAL_PREFIX OPAL_SYSCONFDIR=$OPAL_SYSCONFDIR PMIX_PREFIX=$PMIX_PREFIX args: $*" >>"${FAKE_LOG:-/dev/null}"
[ -d "$OPAL_PREFIX/bin" ] || { echo "orterun stand-in: OPAL_PREFIX '$OPAL_PREFIX' is not the runtime's prefix" >&2; exit 7; }
while [ $# -gt 0 ]; do case "$1" in -np | -x) shift 2 ;; --mca) shift 3 ;; *) break ;; esac; done
OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_RANK=0 exec "$@"
EOF
chmod +x "$tmp/ompi/usr/bin/orterun"
tar -C "$tmp/ompi" -cJf "$c/ompi-runtime.tar.xz" .

# ---- the machine's stand-ins: nvidia-smi, cuda-gdb, a Python with a stub torch and pip wheels' nvidia/*/lib ----
bin=$tmp/bin site=$tmp/site
mkdir -p "$bin" "$site/torch" "$site/nvidia/cu13/lib" "$site/nvidia/cudnn/lib"
cat >"$bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
    *query-gpu*) echo "Fake H200, 580.00, 143771 MiB, 1980 MHz, 9.0" ;;
    -L) echo "GPU 0: Fake H200 (UUID: GPU-fake)" ;;
    *) echo "nvidia-smi stand-in: no processes" ;;
esac
EOF
cat >"$bin/compute-sanitizer" <<'EOF'
#!/bin/sh
# compute-sanitizer stand-in: runs the program after its options; FAKE_MEMERR=<program>/<case> reports a memory error
echo "compute-sanitizer stand-in: $*" >>"${FAKE_LOG:-/dev/null}"
while [ $# -gt 0 ]; do case "$1" in --tool | --error-exitcode | --target-processes) shift 2 ;; *) break ;; esac; done
"$@"; rc=$?
if [ -n "${FAKE_MEMERR:-}" ] && [ "$(basename "$1")/$CK_RUN_CASE" = "$FAKE_MEMERR" ]; then
    echo "========= Invalid __global__ read of size 4 bytes (fake)"; echo "========= ERROR SUMMARY: 1 error"; exit 99
fi
echo "========= ERROR SUMMARY: 0 errors"; exit $rc
EOF
cat >"$bin/cuda-gdb" <<'EOF'
#!/bin/sh
echo "Thread 1 (LWP fake): #0 clock_nanosleep () (cuda-gdb stand-in, called with: $*)"
EOF
cat >"$site/torch/__init__.py" <<'EOF'
__version__ = "2.11.0+fake"
class _Cuda:
    @staticmethod
    def is_available(): return True
    @staticmethod
    def get_device_name(i=0): return "Fake H200"
cuda = _Cuda()
class version: cuda = "13.0"
class _Cudnn:
    @staticmethod
    def version(): return 91900
class backends: cudnn = _Cudnn()
def get_num_threads(): return 1
EOF
"$real_python" -c 'import numpy' 2>/dev/null || { mkdir -p "$site/numpy" && echo '__version__ = "0+fake"' >"$site/numpy/__init__.py"; }
cat >"$tmp/fake_reference.py" <<'EOF'
import json, os, sys, time
a = sys.argv[1:]
arg = lambda k, d: a[a.index(k) + 1] if k in a else d
e = int(arg("--epochs", "1"))
speed = {"eager": 0.9, "fused": 0.5, "graph": 0.06, "compile": 0.05}  # s/epoch: graph and compile beat mptrain's 0.39
with open(os.environ.get("FAKE_LOG", "/dev/null"), "a") as f:
    f.write(" ".join(a) + "\n")
for mode in arg("--mode", "eager").split(","):
    key = "pytorch %s %s %s" % (arg("--model", "?"), arg("--precision", "?"), mode)
    if os.environ.get("FAKE_HANG") and os.environ["FAKE_HANG"] in key:
        print("fake reference: %s hangs now" % key, flush=True)
        time.sleep(float(os.environ.get("FAKE_HANG_S", "60")))
        sys.exit(3)  # as a process killed at its limit: the modes printed before stay
    if mode in os.environ.get("FAKE_TORCH_UNAVAILABLE", "").split(","):
        print(json.dumps({"impl": "pytorch", "mode": mode, "status": "unavailable",
                          "reason": "torch.compile(mode='max-autotune') failed on this machine: fake: no Triton"}), flush=True)
        continue
    print(json.dumps({"mode": mode, "status": "ok", "epoch_times_s": [speed[mode] - 0.01 * i for i in range(e)],
                      "epoch_host_times_s": [1.0] * e, "final_test_accuracy": 0.84, "final_test_loss": 0.45,
                      "n_train": 60000, "final_loss_scale": None, "cuda_max_memory_allocated": 2 ** 20}), flush=True)
EOF
cat >"$tmp/fake_speedrun.py" <<EOF
import sys
open("$tmp/speedrun_pytorch.args", "w").write(" ".join(sys.argv[1:]) + "\\n")
print("| precision | mode | mean test acc (%) [95% CI] | seeds >= 90% | time to result, host (s) | CPU (s) |")
print("|---|---|---:|---:|---:|---:|")
print("| bf16 | graph | 90.40 [90.10, 90.70] | 5 of 5 | 1.234 | 1.100 |")
print('process: {"whole_s": 12.0}')
EOF
cat >"$bin/python3" <<EOF
#!/bin/sh
case "\${1:-}" in *pytorch_reference.py) shift; exec "$real_python" "$tmp/fake_reference.py" "\$@" ;; esac
case "\${1:-}" in *speedrun_pytorch.py) shift; exec "$real_python" "$tmp/fake_speedrun.py" "\$@" ;; esac
PYTHONPATH="$site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$real_python" "\$@"
EOF
chmod +x "$bin"/*
export PATH=$bin:$PATH PYTHON=$bin/python3
unset OUT MPT_DATA

files_of() { (cd "$1" && ls -A | sort | tr '\n' ' '); }
in_archive() { # OUTDIR PATTERN: the archive's matching member, on stdout
    tar -xzOf "$1/gpu-runs.tar.gz" --wildcards "$2" 2>/dev/null
}
# OUTDIR: the results page gpu.sh wrote there. Its name has the UTC date at gpu.sh's start, so a run that crosses
# midnight names the page by the day it began; the test finds the page rather than guessing the date.
page_in() { local p=("$1"/gpu-????-??-??.md); printf '%s\n' "${p[0]}"; }

# ---- run A: a hanging test case ---------------------------------------------------------------------------------
outA=$tmp/outA
t0=$SECONDS
FAKE_HANG=test_cuda/conv FAKE_GRAPH_CHANGES_MATH=1 FAKE_FUSED_CHANGES_MATH=1 "$tree/bench/gpu.sh" --stages info,test,tc,graph,compare,bench --budget 300 \
    --tcase-timeout 4 --epochs 2 --out "$outA" >"$tmp/A.log" 2>&1
rcA=$?
took=$((SECONDS - t0))
sed 's/^/    A| /' "$tmp/A.log" | tail -n 60
pageA=$(page_in "$outA")
check "run A exits 1 (a failed stage), not $rcA" [ "$rcA" = 1 ]
check "run A ends within its budget (${took}s of 300)" [ "$took" -lt 300 ]
check "run A's output folder holds exactly gpu.log, summary.txt, machine.txt, info.txt, the results page and the archive (has: $(files_of "$outA"))" \
    [ "$(files_of "$outA")" = "${pageA##*/} gpu-runs.tar.gz gpu.log info.txt machine.txt summary.txt " ]
check "the hanging case is reported as a timeout, with the TAP line it printed before" \
    grep -Eq '^  test_cuda/conv +[0-9]+s +TIMEOUT.* 1 ok, 0 not ok' "$outA/summary.txt"
check "the other cases ran to their end" grep -Eq '^  test_cuda/gemm +[0-9]+s +ok +2 ok, 0 not ok' "$outA/summary.txt"
check "the timing case ran alone, after all the others of the suite" \
    bash -c "grep -E '^  test_' '$outA/summary.txt' | grep -v '^  test_cuda_tc/' | tail -n 1 | grep -q '^  test_cuda_graph/timing '"
check "the stage tc ran tests/test_cuda_tc once, after the suite, with its report on the results page" \
    bash -c "[ \$(grep -c '^  test_cuda_tc/tc_accum ' '$outA/summary.txt') = 1 ] && grep -E '^  test_' '$outA/summary.txt' | tail -n 1 | grep -Eq '^  test_cuda_tc/tc_accum +[0-9]+s +ok' && grep -q '^## Tensor Core summation: cuBLASLt' '$pageA' && grep -q '^| fp16 | fc1 fwd (fake) |' '$pageA'"
ncase=$(grep -cE '^  test_' "$outA/summary.txt")
ntc=$(for p in $programs; do cat "$src/tests/$p.c"; done | grep -c 'tcase_create(')
check "one process per test case: $ncase summary lines for the $ntc tcase_create calls in tests/" [ "$ncase" = "$ntc" ]
conv_log=$(in_archive "$outA" '*/test/test_cuda-conv.log')
check "the hanging case's log survived its kill: its TAP line and the line before the hang (stdio made line-buffered)" \
    bash -c "grep -q '^ok 1 - tests/test_cuda.c:conv:first_test' <<<\"\$1\" && grep -q 'hangs now' <<<\"\$1\"" _ "$conv_log"
stacks=$(in_archive "$outA" '*/test/test_cuda-conv.log.stacks')
check "before the kill, the stuck process was diagnosed: threads' wait channels, shared objects, the debugger's stacks" \
    bash -c "grep -q 'threads: tid comm state wchan' <<<\"\$1\" && grep -q 'shared objects' <<<\"\$1\" && grep -q 'cuda-gdb stand-in, called with: -batch -p [0-9]* -ex thread apply all bt' <<<\"\$1\"" _ "$stacks"
libs=$(in_archive "$outA" '*/libraries.txt')
check "the library path has the carried libraries and every nvidia/*/lib folder of the Python's wheels" \
    bash -c "grep -q '^LD_LIBRARY_PATH for mptrain and the tests: $c/lib:.*$site/nvidia/cu13/lib:$site/nvidia/cudnn/lib' <<<\"\$1\"" _ "$libs"
page=$pageA
for s in machine setup info test tc graph compare bench; do
    check "the results page times stage $s" grep -q "^| $s | [0-9]* |" "$page"
done
check "the results page has the graph table, the compare reports and the PyTorch comparison" \
    bash -c "grep -q '^## The step as one CUDA Graph' '$page' && grep -q '^## mptrain compare --model lenet5' '$page' && grep -q '^## Benchmark against PyTorch' '$page'"
check "the PyTorch comparison has all 16 runs (8 mptrain, 8 PyTorch; 1 repeat)" \
    [ "$(in_archive "$outA" '*/bench/runs/*/run.json' | grep -o '"rc": 0' | wc -l)" = 16 ]
check "the failed stage is named" grep -q 'STAGE FAILED: test: the cuda suite failed' "$outA/gpu.log"
check "a loss that differs with the step graph on fails the graph stage" \
    grep -q 'STAGE FAILED: graph: metrics.csv differs between --cuda-graph on and off' "$outA/gpu.log"
check "a loss that differs with a fused path of issue 31 A fails the graph stage, naming its variable" \
    grep -q 'STAGE FAILED: graph: metrics.csv differs with MPT_CUDA_FUSED_UPDATE=1 from the on run' "$outA/gpu.log"
check "the graph table has a row per run: on, off, the fused update, the second stream, the bias gradient's loads in flight, the split bias gradient, telemetry on the host and the device, on again, lenet5's measured convolutions and split channel sums" \
    bash -c "grep -q '^| mlp | on | - | - | on |' '$page' && grep -q '^| mlp | off | - | - | off |' '$page' && grep -q '^| mlp | update | MPT_CUDA_FUSED_UPDATE=1 | - | on |' '$page' && grep -q '^| mlp | wgrad | MPT_CUDA_WGRAD_STREAM=1 | - | on | the on run' '$page' && grep -q '^| mlp | bgilp | MPT_CUDA_BIAS_GRAD_ILP=1 | - | on | the on run' '$page' && grep -q '^| mlp | bgrad | MPT_CUDA_SPLIT_NARROW_BGRAD=1 | - | on | may differ' '$page' && grep -q '^| mlp | tele-dev | MPT_CUDA_DEVICE_TELEMETRY=1 | --telemetry 50 | on |' '$page' && grep -q '^| mlp | on-2 | - | - | on |' '$page' && grep -q '^| lenet5 | find | MPT_CUDA_CONV_FIND=1 | - | on | may differ' '$page' && grep -q '^| lenet5 | chsum | MPT_CUDA_SPLIT_CHANNEL_SUM=1 | - | on | may differ' '$page'"
check "OPENBLAS_CORETYPE is recorded" grep -q 'OPENBLAS_CORETYPE=' "$outA/machine.txt"

# ---- run B: killed from outside while a stage hangs -------------------------------------------------------------
outB=$tmp/outB
FAKE_HANG="mptrain compare lenet5" MPT_GPU_PUBLISH_EVERY=1 setsid "$tree/bench/gpu.sh" --budget 400 --stages test,graph,compare,bench \
    --out "$outB" >"$tmp/B.log" 2>&1 </dev/null &
gpid=$!
seen=0
for _ in $(seq 1 240); do # until the archive holds what the hanging stage printed (published while it waits)
    # grep reads all of it (not -q, whose early exit can SIGPIPE the reader: a failed pipeline under pipefail)
    if in_archive "$outB" '*/compare-lenet5.txt' 2>/dev/null | grep 'hangs now' >/dev/null; then seen=1; break; fi
    kill -0 "$gpid" 2>/dev/null || break
    sleep 0.5
done
kill -KILL -- "-$gpid" 2>/dev/null # what a device call past its time limit gets
wait "$gpid" 2>/dev/null
gpid=
sed 's/^/    B| /' "$tmp/B.log" | tail -n 30
check "run B: the hanging stage's output reached the output folder while it hung" [ "$seen" = 1 ]
check "run B: after the kill, the log has the stage that was running" grep -q 'compare: mptrain compare --model lenet5' "$outB/gpu.log"
check "run B: after the kill, the summary has the earlier stages (graph ok: the runs' metrics.csv differ in run_id alone)" \
    bash -c "grep -Eq '^test +[0-9]+s +ok' '$outB/summary.txt' && grep -Eq '^graph +[0-9]+s +ok' '$outB/summary.txt'"
check "run B: after the kill, the archive has the earlier stages' runs" \
    bash -c "tar -tzf '$outB/gpu-runs.tar.gz' | grep -q 'graph/mlp-fp16-off/summary.json' && tar -tzf '$outB/gpu-runs.tar.gz' | grep -q 'compare-mlp/report.md'"
check "run B: after the kill, the results page has the earlier stages" grep -q '^## The step as one CUDA Graph' "$(page_in "$outB")"

# ---- run C: PyTorch's modes, compile, the sweep, data-parallel through mpirun, memcheck -----------------------------
outC=$tmp/outC
: >"$tmp/C.calls"
FAKE_LOG=$tmp/C.calls FAKE_TORCH_UNAVAILABLE=compile FAKE_HANG="pytorch lenet5 bf16 graph" FAKE_HANG_S=2 \
    FAKE_MEMERR=test_cuda/update "$tree/bench/gpu.sh" --stages bench,compile,sweep,dp,memcheck --budget 400 --epochs 2 \
    --out "$outC" >"$tmp/C.log" 2>&1
rcC=$?
sed 's/^/    C| /' "$tmp/C.log" | tail -n 40
grep -E -A12 "^#+ mptrain against each PyTorch mode" "$(page_in "$outC")" | sed "s/^/    C-page| /"
pageC=$(page_in "$outC")
check "run C exits 1 (a PyTorch process stopped; memcheck found a memory error), not $rcC" [ "$rcC" = 1 ]
for s in bench compile sweep dp memcheck; do
    check "run C's results page times stage $s" grep -q "^| $s | [0-9]* |" "$pageC"
done
check "the bench stage asked PyTorch for eager, fused and graph in one process per configuration" \
    bash -c "[ \$(grep -c -- '--mode eager,fused,graph' '$tmp/C.calls') = 8 ]"
check "the compile stage asked for compile alone" bash -c "[ \$(grep -c -- '--mode compile\$' '$tmp/C.calls') = 8 ]"
check "the page compares mptrain with each PyTorch mode and the best (graph: the fake's fastest mode)" \
    bash -c "grep -Eq '^#+ mptrain against each PyTorch mode, and against the best' '$pageC' && grep -Eq '^\| mlp \| fp16 \| 390\.0 \| 890\.0 \| 490\.0 \| 50\.0 \| n/a \| graph \| 7\.800 \| 0\.13x \|' '$pageC'"
check "a machine that cannot compile: the compile rows say so, with the reason" \
    grep -q '| PyTorch compile | fp16 | unavailable: torch.compile(mode=.max-autotune.) failed on this machine: fake: no Triton' "$pageC"
check "a PyTorch process stopped in a later mode keeps the modes it finished (lenet5 bf16: eager and fused, no graph)" \
    grep -Eq '^\| lenet5 \| bf16 \| 390\.0 \| 890\.0 \| 490\.0 \| n/a \| n/a \| fused \|' "$pageC"
check "the stopped process is reported as a failed run" grep -q 'STAGE FAILED: bench: bench/run.sh gpu exit' "$outC/gpu.log"
check "the sweep's table is on the page" grep -Eq '^\| 512 \| 128 \| fp32 \|' "$pageC"
check "mpirun ran from the carried runtime, relocated into the carry" \
    grep -q "orterun stand-in: OPAL_PREFIX=$c/ompi/usr OPAL_SYSCONFDIR=$c/ompi/etc/openmpi PMIX_PREFIX=$c/ompi/usr/lib/x86_64-linux-gnu/pmix2 args: -np 1" "$tmp/C.calls"
check "the data-parallel run and the run without it were compared" grep -q '^dp: metrics.csv of mpirun -np 1 --data-parallel and of the same training without it (graph off): identical' "$outC/summary.txt"
check "memcheck ran every test case but timing under compute-sanitizer --tool memcheck" \
    bash -c "[ \$(grep -c 'compute-sanitizer stand-in: --tool memcheck' '$tmp/C.calls') = $((ntc - 1)) ]"
check "the memory error fails the stage, naming the test case" grep -q 'STAGE FAILED: memcheck: test_cuda/update: compute-sanitizer found memory errors' "$outC/gpu.log"
check "the other test cases report 0 errors" grep -Eq '^  test_cuda/gemm +ok +ERROR SUMMARY: 0 error' "$outC/summary.txt"

# ---- run D: the speedrun stage ------------------------------------------------------------------------------------
outD=$tmp/outD
"$tree/bench/gpu.sh" --budget 200 --stages speedrun --speedrun-seeds 3 --out "$outD" >"$tmp/D.log" 2>&1
rcD=$?
sed 's/^/    D| /' "$tmp/D.log" | tail -n 20
check "run D (--stages speedrun) exits 0, not $rcD" [ "$rcD" = 0 ]
check "run D: the stage is timed and ok" grep -Eq '^speedrun +[0-9]+s +ok' "$outD/summary.txt"
pageD=$(page_in "$outD")
check "run D: the results page has mptrain's speedrun report and PyTorch's table" \
    bash -c "grep -q '^## Speedrun: mptrain speedrun --device cuda --seeds 10' '$pageD' && grep -q '^### mptrain speedrun (fake)' '$pageD' && grep -q '^## Speedrun in PyTorch' '$pageD' && grep -q '^| bf16 | graph | 90.40' '$pageD'"
check "run D: PyTorch trained mptrain's recipe on the GPU in its four modes with --speedrun-seeds" \
    grep -Eq -- "--mptrain .*/mptrain --device cuda --precisions bf16,fp16 --modes eager,fused,graph,compile --seeds 3 " "$tmp/speedrun_pytorch.args"
check "run D: the archive has the speedrun's report" bash -c "tar -tzf '$outD/gpu-runs.tar.gz' | grep -q 'speedrun/report.md'"

# ---- the plan -----------------------------------------------------------------------------------------------------
plan=$("$tree/bench/gpu.sh" --dry-run 2>&1)
printf '%s\n' "$plan" | sed 's/^/    plan| /'
check "--dry-run shows the prebuilt plan" grep -q 'prebuilt mode' <<<"$plan"
check "--dry-run's default plan (info, test, graph, bench, sweep, dp, memcheck) is expected to fit the 420 s budget" \
    bash -c "grep -Eq '^  total +420 s +([0-9]{1,3}) s  expected with the 15 s for the results: fits the budget' <<<\"\$1\" &&
             for s in info test graph bench sweep dp memcheck; do grep -Eq \"^  \$s \" <<<\"\$1\" || exit 1; done" _ "$plan"
plan2=$("$tree/bench/gpu.sh" --dry-run --stages compile --budget 240 2>&1)
check "--dry-run of the second call names it: --stages compile --budget 240, timeout_s 300" \
    grep -q 'timeout_s 300, command: bench/gpu.sh --stages compile --budget 240' <<<"$plan2"

# ---- bench/run.sh --write-docs twice: two new results files beside the earlier ones (any day: a run may cross midnight) --
results=$tree/bench/results
before=$(cd "$results" && ls gpu-*.md 2>/dev/null | sort | xargs -r sha256sum)
for k in 1 2; do
    MPT_DATA=$c/data "$tree/bench/run.sh" gpu --mptrain "$c/build/tools/mptrain" --epochs 1 --repeats 1 --models mlp \
        --write-docs --out "$tmp/docs$k" >"$tmp/docs$k.log" 2>&1
    rc=$?
    check "bench/run.sh --write-docs, run $k, exits 0 (status $rc; its log ends: $(tail -n 1 "$tmp/docs$k.log"))" [ "$rc" = 0 ]
done
after=$(cd "$results" && ls gpu-*.md 2>/dev/null | sort)
check "the two runs wrote two new results files beside the earlier ones (before: $(wc -l <<<"$before") with content, after: $(wc -w <<<"$after"))" \
    [ "$(wc -w <<<"$after")" = $(($([ -n "$before" ] && wc -l <<<"$before" || echo 0) + 2)) ]
check "the earlier results files are unchanged" bash -c "[ -z \"\$1\" ] || (cd '$results' && sha256sum -c --quiet <<<\"\$1\")" _ "$before"
last=$(sed -n 's/^Every run.s numbers: \[\(bench\/results\/[^]]*\)\].*/\1/p' "$tree/docs/benchmarks.md")
newest=$(cd "$results" && ls -t gpu-*.md | head -n 1)
check "docs/benchmarks.md names the second run's file (names '$last', newest bench/results/$newest)" \
    [ "$last" = "bench/results/$newest" ]
finish
