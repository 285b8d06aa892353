#!/usr/bin/env bash
# tests/bench/test_summarize.sh SOURCE_ROOT - suite 'unit': bench/summarize.py's CPU page can be recomputed from
# its own "Every run" table.
#
# docs/benchmarks.md judges issue 25's targets by CPU time per epoch as well as by the host clock; an audit found
# that the raw page beside it (bench/results/cpu-*.md, `summarize.py DIR cpu --raw`) listed each run's host-clock
# epochs but not its CPU time, so no CPU-time figure could be recomputed. This builds a run.sh output folder by hand
# (two mptrain runs, fp32 and bf16 with --cpu-kernels native, one epoch time each chosen here) and checks:
#   - the Every run table lists each run's CPU seconds per epoch and its process CPU seconds (from time -v);
#   - the CPU-time ratio bf16n / fp32 the page prints is the one computed here from those inputs:
#     fp32 epochs 2.0 and 4.0 s of CPU (median 3.0), bf16n 1.5 and 0.9 (median 1.2): 1.2 / 3.0 = 0.400.
# Prints a Check-style summary line (Checks: N, Failures: F, Errors: 0), which ./run adds to its total.
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" # ok, bad, check, finish
py=$(command -v python3) || { bad "python3 exists"; finish; }

# run NAME PREC ORDER HOST_EPOCHS CPU_EPOCHS USER_S SYS_S: one mptrain run folder as bench/run.sh writes it
run() {
    local d=$tmp/out/runs/$1
    mkdir -p "$d"
    printf '{"impl": "mptrain", "model": "mlp", "precision": "%s", "repeat": 1, "seed": 0, "settings": "--threads 1",
 "rc": 0, "load_before": "0.10", "load_after": "0.20", "command": "x", "order": %s, "machine_busy_s": 100}\n' \
        "$2" "$3" >"$d/run.json"
    printf '{"epoch_times_s": [%s], "epoch_cpu_times_s": [%s], "final_test_accuracy": 0.8, "final_test_loss": 0.5,
 "peak_memory_bytes": {"total": 1048576}, "final_loss_scale": 1, "steps_skipped": 0}\n' "$4" "$5" >"$d/summary.json"
    printf 'data: 12800 training images (0 held out for validation)\n' >"$d/stdout.txt"
    printf '\tUser time (seconds): %s\n\tSystem time (seconds): %s\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 0:09.50\n\tMaximum resident set size (kbytes): 73728\n' \
        "$6" "$7" >"$d/time.txt"
}
run mptrain-mlp-fp32-r1 fp32 1 "2.5, 4.5" "2.0, 4.0" 7.3 0.5
run mptrain-mlp-bf16n-r1 bf16n 2 "1.0, 2.0" "1.5, 0.9" 3.0 0.2
mkdir -p "$tmp/out/info"

page=$("$py" "$src/bench/summarize.py" "$tmp/out" cpu --raw 2>&1)
rc=$?
check "summarize.py cpu --raw on the folder exits 0 (exit $rc)" [ "$rc" = 0 ]
printf '%s\n' "$page" | sed -n '/^### Every run/,$p' | sed 's/^/    | /'
check "the Every run table has a CPU s/epoch column" grep -q '| CPU s/epoch (each epoch) |' <<<"$page"
check "fp32's row lists its CPU seconds of each epoch (2.000, 4.000) and of the process (7.3 + 0.5 = 7.8)" \
    grep -q '^| mptrain-mlp-fp32-r1 | .* | 2.500, 4.500 | 2.000, 4.000 | .* | 7.8 | ' <<<"$page"
check "bf16n's row lists its CPU seconds of each epoch (1.500, 0.900) and of the process (3.0 + 0.2 = 3.2)" \
    grep -q '^| mptrain-mlp-bf16n-r1 | .* | 1.000, 2.000 | 1.500, 0.900 | .* | 3.2 | ' <<<"$page"
check "the CPU time/epoch ratio bf16n / fp32 is 1.2 / 3.0 = 0.400 (host clock 1.5 / 3.5 = 0.429)" \
    grep -q '^| mlp | bf16n | 0.429 | 0.400 |$' <<<"$page"
finish
