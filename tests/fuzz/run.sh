#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD_DIR [SECONDS] - runs each libFuzzer target of tests/fuzz/ (built with -Dfuzz=true in
# BUILD_DIR) for SECONDS (default 60) from its committed seed corpus (tests/fuzz/corpus/<name>/, copied into a
# scratch corpus so the committed one does not grow). Prints per target the executions and whether it
# crashed; a crash leaves its input as BUILD_DIR/fuzz-artifacts/<target>-crash-* (reproduce: the target with
# that file as its argument). Last line: "N passed, N failed" (one check per target); exit 1 if any failed.
set -uo pipefail
build=${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]}
secs=${2:-60}
src=$(cd "$(dirname "$0")" && pwd)
art="$build/fuzz-artifacts"
ninja -C "$build" tests/fuzz/fuzz_idx tests/fuzz/fuzz_checkpoint tests/fuzz/fuzz_flags tests/fuzz/fuzz_spec \
    tests/fuzz/fuzz_outdir >/dev/null ||
    echo "tests/fuzz/run.sh: building the fuzz targets in $build failed"
mkdir -p "$art"
passed=0 failed=0
for t in idx checkpoint flags spec outdir; do
    exe="$build/tests/fuzz/fuzz_$t"
    if [ ! -x "$exe" ]; then
        echo "fuzz_$t: not built ($exe missing: configure with CC=clang -Dfuzz=true)"
        failed=$((failed + 1))
        continue
    fi
    work=$(mktemp -d)
    cp "$src/corpus/$t"/* "$work/"
    log="$art/fuzz_$t.log"
    quiet=()
    [ "$t" = flags ] && quiet=(-close_fd_mask=3) # the parser's usage messages; libFuzzer's own output stays
    [ "$t" = outdir ] && quiet=(-close_fd_mask=1) # the journal's "completed the publish" notes on stdout
    rc=0
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 \
        "$exe" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
        "${quiet[@]}" -artifact_prefix="$art/fuzz_$t-" "$work" > "$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rm -rf "$work"
    if [ "$rc" -eq 0 ]; then
        echo "fuzz_$t: ${execs:-?} executions in ${secs} s, no crash"
        passed=$((passed + 1))
    else
        echo "fuzz_$t: FAILED (exit $rc) after ${execs:-?} executions; log $log, input in $art/"
        grep -m3 -E "ERROR|runtime error|SUMMARY" "$log" || tail -5 "$log"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
