# tests/checks.sh - sourced by the shell tests (tests/gpu/test_results_pages.sh, test_pytorch_reference.sh,
# test_gpu_script.sh, tests/install/test_install.sh): their count of checks and the Check-style summary line ./run
# adds to its total.
#   ok WHAT            a check that passed: one line 'ok:   WHAT'
#   bad WHAT           a check that failed: one line 'FAIL: WHAT'
#   check WHAT CMD...  runs CMD; ok WHAT when it exits 0, else bad WHAT
#   finish             prints 'P%: Checks: N, Failures: F, Errors: 0' and exits, 0 only when no check failed
checks=0
failures=0
ok() { checks=$((checks + 1)); printf 'ok:   %s\n' "$1"; }
bad() { checks=$((checks + 1)); failures=$((failures + 1)); printf 'FAIL: %s\n' "$1"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
finish() {
    printf '%d%%: Checks: %d, Failures: %d, Errors: 0\n' $(((checks - failures) * 100 / (checks ? checks : 1))) \
        "$checks" "$failures"
    [ "$failures" -eq 0 ]
    exit
}
