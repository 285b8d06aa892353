#!/usr/bin/env bash
# tests/gpu/test_results_pages.sh SOURCE_ROOT - suite 'unit': the GPU results pages agree with their raw files.
#
# bench/results/gpu-<date>.md pages mark each table that has a raw source (<!-- results_page.py: KIND SOURCE... -->);
# bench/results_page.py recomputes them (issue 31 E: an audit found figures retyped wrong). This checks:
#   - every committed page (bench/results/gpu-*.md, docs/benchmarks.md) passes `results_page.py check`;
#   - check can fail: a figure changed in a generated table (the first session's "41 of 45", retyped as the old
#     page had it, "43 of 47") fails it, naming the page, the line and both figures; a raw archive that is missing
#     fails it naming the source; a marker without its end line fails it;
#   - update restores the changed figure and leaves the prose around the tables as it was.
# Prints a Check-style summary line (Checks: N, Failures: F, Errors: 0), which ./run adds to its total.
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" # ok, bad, check, finish
py=$(command -v python3) || { bad "python3 exists"; finish; }
rp=$src/bench/results_page.py

pages=("$src"/bench/results/gpu-*.md "$src/docs/benchmarks.md")
out=$("$py" "$rp" check "${pages[@]}" 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/    | /'
check "every committed results page agrees with its raw files (results_page.py check: exit $rc)" [ "$rc" = 0 ]
n=$(sed -n 's/^results_page.py check: \([0-9]*\) table.*/\1/p' <<<"$out")
check "the pages hold generated tables (found ${n:-none})" [ "${n:-0}" -ge 20 ]

# a copy of the first session's page and raw folder, to break on purpose
mkdir -p "$tmp/results" "$tmp/docs"
cp -r "$src/bench/results/gpu-2026-11-26" "$tmp/results/"
cp "$src/bench/results/gpu-2026-11-26.md" "$tmp/results/page.md"
check "the copy passes check" "$py" "$rp" check "$tmp/results/page.md"

# the old page's retyped count in the generated suite table
sed 's/^| all (9 test cases) | | | 41 of 45 | 4 |$/| all (9 test cases) | | | 43 of 47 | 4 |/' "$tmp/results/page.md" >"$tmp/results/wrong.md"
check "the mutation took (the copy now says 43 of 47)" grep -q '| 43 of 47 |' "$tmp/results/wrong.md"
out=$("$py" "$rp" check "$tmp/results/wrong.md" 2>&1)
rc=$?
check "a retyped figure fails check (exit $rc)" [ "$rc" = 1 ]
check "the failure names the page and line and shows both figures" \
    bash -c 'grep -q "wrong.md:[0-9]*: the table of .suite-cases" <<<"$1" && grep -q "page: .*43 of 47" <<<"$1" && grep -q "recomputed: .*41 of 45" <<<"$1"' _ "$out"

cp "$tmp/results/wrong.md" "$tmp/results/fixed.md"
"$py" "$rp" update "$tmp/results/fixed.md" >/dev/null 2>&1
check "update puts the raw files' figure back" cmp -s "$tmp/results/fixed.md" "$tmp/results/page.md"

# prose is not touched: a changed sentence outside the tables survives update and passes check
sed 's/What ran, what it measured, what failed and why\./What ran (edited prose)./' "$tmp/results/page.md" >"$tmp/results/prose.md"
"$py" "$rp" update "$tmp/results/prose.md" >/dev/null 2>&1
check "update leaves the prose around the tables alone" grep -q 'What ran (edited prose).' "$tmp/results/prose.md"

# a missing raw source, and a marker without its end
mv "$tmp/results/gpu-2026-11-26/run3-logs.tgz" "$tmp/results/gpu-2026-11-26/moved.tgz"
out=$("$py" "$rp" check "$tmp/results/page.md" 2>&1)
rc=$?
check "a missing raw archive fails check, naming it (exit $rc)" \
    bash -c '[ "$1" = 1 ] && grep -q "run3-logs.tgz" <<<"$2"' _ "$rc" "$out"
mv "$tmp/results/gpu-2026-11-26/moved.tgz" "$tmp/results/gpu-2026-11-26/run3-logs.tgz"
awk 'done == 0 && /^<!-- end results_page.py -->$/ { done = 1; next } { print }' "$tmp/results/page.md" >"$tmp/results/open.md"
out=$("$py" "$rp" check "$tmp/results/open.md" 2>&1)
rc=$?
check "a marker without its end line fails check (exit $rc)" \
    bash -c '[ "$1" = 1 ] && grep -q "has no .<!-- end results_page.py -->. line" <<<"$2"' _ "$rc" "$out"

finish
