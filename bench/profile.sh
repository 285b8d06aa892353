#!/usr/bin/env bash
# bench/profile.sh - where the time of a training step goes, by `perf record` sampling of one run.
#
#   bench/profile.sh [--impl mptrain|pytorch] [--model mlp|lenet5|cnn] [--precision fp32|tf32|bf16|fp16]
#                    [--threads N] [--epochs N] [--limit-train N] [--out DIR]
#
# Runs 2 epochs (default: mptrain, mlp, fp32, 1 thread, all 60000 images) under `perf record`, starting the
# sampling after a delay that skips process start-up and data loading (mptrain 1.5 s, PyTorch 4 s: the
# import of torch), with a 128-image test set so evaluation is negligible. Prints the epoch's line, the top
# symbols, and the samples grouped by what they do: OpenBLAS sgemm kernels and their operand packing, the
# operand conversions of the emulated math modes, optimizer, maxpool, im2col/col2im, other mptrain kernels,
# memset/memcpy, oneDNN JIT code, libtorch and the Python interpreter. One thread by default, so that every
# sample is work, not a thread spinning. The shares are of the sampled window (training plus the short
# evaluation), wall-clock proportional only with one thread.
#
# Needs perf (Debian: linux-perf) and permission to use it (root, or kernel.perf_event_paranoid <= 1).
# Environment: BUILD_DIR (default build-bench; build it with bench/run.sh first), PYTHON (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build-bench}
PYTHON=${PYTHON:-/usr/bin/python3}
DATA=${MPT_DATA:-/usr/share/datasets/fashion-mnist}

die() { printf 'bench/profile.sh: %s\n' "$*" >&2; exit 1; }
IMPL=mptrain MODEL=mlp PREC=fp32 THREADS=1 EPOCHS=2 LIMIT=0 OUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --impl | --model | --precision | --threads | --epochs | --limit-train | --out)
            [ $# -ge 2 ] && [ -n "$2" ] || die "option '$1' needs a value" ;;&
        --impl) IMPL=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --precision) PREC=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --epochs) EPOCHS=$2; shift 2 ;;
        --limit-train) LIMIT=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (see bench/profile.sh --help)" ;;
    esac
done
case "$IMPL" in mptrain | pytorch) ;; *) die "--impl: expected mptrain or pytorch, found '$IMPL'" ;; esac
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads: expected a positive integer, found '$THREADS'"
[[ "$EPOCHS" =~ ^[1-9][0-9]*$ ]] || die "--epochs: expected a positive integer, found '$EPOCHS'"
[[ "$LIMIT" =~ ^[0-9]+$ ]] || die "--limit-train: expected an integer >= 0, found '$LIMIT'"
command -v perf >/dev/null 2>&1 || die "perf is missing (apt-get install linux-perf)"
OUT=${OUT:-runs/profile/$IMPL-$MODEL-$PREC-t$THREADS}
mkdir -p "$OUT"

limit_args=()
[ "$LIMIT" != 0 ] && limit_args=(--limit-train "$LIMIT")
if [ "$IMPL" = mptrain ]; then
    MPTRAIN=$ROOT/$BUILD_DIR/tools/mptrain
    [ -x "$MPTRAIN" ] || die "$MPTRAIN is missing: build it first (bench/run.sh cpu --quick, or ninja -C $BUILD_DIR)"
    delay=1500
    cmd=("$MPTRAIN" train --model "$MODEL" --precision "$PREC" --epochs "$EPOCHS" --device cpu --progress off
         --threads "$THREADS" --limit-test 128 --data "$DATA" --out "$OUT/run" "${limit_args[@]}")
else
    delay=4000
    cmd=(env OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
         "$PYTHON" "$ROOT/bench/pytorch_reference.py" --model "$MODEL" --precision "$PREC" --epochs "$EPOCHS"
         --threads "$THREADS" --limit-test 128 --data "$DATA" "${limit_args[@]}")
fi
perf record -q -D "$delay" -o "$OUT/perf.data" "${cmd[@]}" >"$OUT/stdout.txt" 2>"$OUT/stderr.txt" ||
    die "the profiled run failed (or perf is not permitted: see $OUT/stderr.txt)"
[ -s "$OUT/perf.data" ] || die "no samples: the run ended within the ${delay} ms delay; give it more --epochs or images"
grep -h '^epoch' "$OUT/stdout.txt" "$OUT/stderr.txt" || true
perf report -i "$OUT/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null >"$OUT/report.txt"
"$PYTHON" - "$OUT/report.txt" <<'EOF'
import re, sys
rules = [  # first match wins
    ("OpenBLAS sgemm kernels", r"sgemm_(small_)?kernel"),
    ("OpenBLAS operand packing", r"sgemm_\w*copy|sgemm_beta"),
    ("OpenBLAS other", r"libopenblas"),
    ("mptrain operand conversion (widen/narrow/round)", r"mpt_cpu_(widen|narrow|round|cast)|round_tf32"),
    ("mptrain optimizer + unscale", r"optim_step|unscale|scaler"),
    ("mptrain maxpool", r"maxpool"),
    ("mptrain im2col/col2im/conv", r"im2col|col2im|conv_accumulate|conv2d|conv_"),
    ("mptrain other kernels (relu, bias, softmax, gather, epilogue)", r"^mptrain\s"),
    ("memset/memcpy", r"mem(set|move|cpy)"),
    ("oneDNN JIT code", r"\[JIT\]"),
    ("oneDNN library", r"libdnnl"),
    ("libtorch/c10", r"libtorch|libc10"),
    ("Python interpreter", r"python3"),
    ("kernel", r"\[kernel"),
]
groups, top = {}, []
for line in open(sys.argv[1]):
    m = re.match(r"\s+([\d.]+)%\s+(.+?)\s+\[[.k]\]\s+(\S+)", line)
    if not m:
        continue
    pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
    top.append((pct, dso, sym))
    text = f"{dso} {sym}"
    name = next((n for n, rx in rules if re.search(rx, text)), "other")
    groups[name] = groups.get(name, 0.0) + pct
print("\ntop symbols:")
for pct, dso, sym in top[:15]:
    print(f"  {pct:6.2f}%  {sym}  ({dso})")
print("\nby group (share of the sampled window):")
for name, pct in sorted(groups.items(), key=lambda kv: -kv[1]):
    print(f"  {pct:6.1f}%  {name}")
EOF
echo "(perf data: $OUT/perf.data; full report: $OUT/report.txt)"
