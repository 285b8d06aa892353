#!/usr/bin/env bash
# bench/telemetry.sh - what --telemetry costs: the training time per epoch of the same run with telemetry off,
# every 50 steps, and every 50 steps with the FP32 shadow twin, run alternately (off, on, on+twin, off, ...)
# so that the machine's drift hits every variant alike; medians and ratios to "off". With BASE_MPTRAIN (an
# mptrain built from a commit before telemetry existed) it also runs that binary in the rotation: the
# "off vs base" ratio is what the telemetry hooks cost when switched off.
#
#   bench/telemetry.sh [--model mlp] [--precisions fp16,bf16] [--epochs 1] [--repeats 5] [--every 50]
#   BASE_MPTRAIN=/path/to/old/mptrain bench/telemetry.sh ...
#
# Time per epoch is epochs.csv's train_s (training only, evaluation excluded), summed over the epochs.
# Output: runs/bench/telemetry-<time>/{<variant>-<precision>-<repeat>/, summary.md}. Needs the build in
# BUILD_DIR (default build) and Fashion-MNIST (MPT_DATA or the Debian package's directory).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=mlp PRECISIONS=fp16,bf16 EPOCHS=1 REPEATS=5 EVERY=50 THREADS=1
while [ $# -gt 0 ]; do
    case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --precisions) PRECISIONS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "bench/telemetry.sh: unknown argument '$1' (see the header of this file)" >&2; exit 2 ;;
    esac
done
BIN=${BUILD_DIR:-build}/tools/mptrain
[ -x "$BIN" ] || { echo "bench/telemetry.sh: $BIN missing: run ./run build first" >&2; exit 1; }
DATA_ARGS=()
[ -n "${MPT_DATA:-}" ] && DATA_ARGS=(--data "$MPT_DATA")
OUT=runs/bench/telemetry-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT"

variants=(off on twin)
[ -n "${BASE_MPTRAIN:-}" ] && variants=(base "${variants[@]}")

run_one() { # variant precision repeat
    local v=$1 p=$2 r=$3 bin=$BIN extra=()
    case "$v" in
    base) bin=$BASE_MPTRAIN ;;
    on) extra=(--telemetry "$EVERY") ;;
    twin) extra=(--telemetry "$EVERY" --shadow) ;;
    esac
    local dir=$OUT/$v-$p-$r
    "$bin" train --model "$MODEL" --precision "$p" --epochs "$EPOCHS" --device cpu --threads "$THREADS" \
        --progress off --out "$dir" "${DATA_ARGS[@]}" "${extra[@]}" >"$OUT/$v-$p-$r.log" 2>&1
    awk -F, 'NR > 1 { s += $8 } END { printf "%.6f\n", s }' "$dir/epochs.csv"
}

IFS=, read -r -a precs <<<"$PRECISIONS"
for r in $(seq 1 "$REPEATS"); do
    for p in "${precs[@]}"; do
        for v in "${variants[@]}"; do
            t=$(run_one "$v" "$p" "$r")
            echo "$v $p $r $t" | tee -a "$OUT/times.txt"
        done
    done
done

python3 - "$OUT" "$MODEL" "$EPOCHS" "$REPEATS" "$EVERY" "$THREADS" "${variants[*]}" <<'EOF' | tee "$OUT/summary.md"
import statistics, sys
out, model, epochs, repeats, every, threads, variants = sys.argv[1:8]
variants = variants.split()
rows = [l.split() for l in open(f"{out}/times.txt")]
t = {}
for v, p, r, s in rows:
    t.setdefault((v, p), {})[int(r)] = float(s)
print(f"model {model}, {epochs} epoch(s), {repeats} alternating repeats, telemetry every {every} steps, "
      f"{threads} OpenBLAS thread(s); train seconds per run (medians), ratio = median over repeats of "
      f"(variant / off of the same repeat)\n")
print("| precision | " + " | ".join(f"{v} s" for v in variants) + " | " +
      " | ".join(f"{v}/off" for v in variants if v != "off") + " |")
print("|---|" + "---:|" * (2 * len(variants) - 1))
for p in sorted({p for _, p in t}):
    med = [statistics.median(t[(v, p)].values()) for v in variants]
    ratios = []
    for v in variants:
        if v == "off":
            continue
        rs = [t[(v, p)][r] / t[("off", p)][r] for r in t[("off", p)] if r in t[(v, p)]]
        ratios.append(f"{statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})")
    print(f"| {p} | " + " | ".join(f"{m:.2f}" for m in med) + " | " + " | ".join(ratios) + " |")
EOF
echo "results: $OUT/summary.md"
