#!/bin/sh
# tools/man.sh HELP2MAN MPTRAIN OUTPUT - writes the man page of mptrain (section 1) to OUTPUT with help2man:
# its NAME, SYNOPSIS, DESCRIPTION and EXAMPLES from `mptrain --help`, the version from `mptrain --version`,
# and a section "COMMANDS IN DETAIL" with the --help of every command that `mptrain --help` lists, verbatim.
# Run by the build (tools/meson.build) when help2man is installed.
set -eu
help2man=$1
mptrain=$2
out=$3
inc=$(mktemp)
trap 'rm -f "$inc"' EXIT

# The command names: the lines of `mptrain --help` between "Commands:" and the next blank line that start
# with two spaces and a lowercase word.
commands=$("$mptrain" --help | awk '/^Commands:/ { on = 1; next } on && /^$/ { exit } on && /^  [a-z]/ { print $1 }')
[ -n "$commands" ] || { echo "man.sh: no commands found in '$mptrain --help'" >&2; exit 1; }

# roff: a backslash is written \e, and a line may not start with a control character (. or ')
roff_escape() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

{
    # the examples of `mptrain --help`, one per line (help2man would fill them into one paragraph)
    printf '[=EXAMPLES]\n.nf\n'
    "$mptrain" --help | awk '/^Examples:/ { on = 1; next } on && /^$/ { exit } on { sub(/^ +/, ""); print }' |
        roff_escape
    printf '.fi\n'
    printf '[COMMANDS IN DETAIL]\n'
    for c in $commands; do
        printf '.SS "mptrain %s"\n.nf\n' "$c"
        "$mptrain" "$c" --help | roff_escape
        printf '.fi\n'
    done
    printf '[SEE ALSO]\nREADME.md and docs/ of the mptrain sources; the library: pkg-config --cflags --libs mptrain\n'
} > "$inc"

version=$("$mptrain" --version | awk 'NR == 1 { print $2 }')
"$help2man" --no-info --section=1 --version-string="$version" \
    --name="mixed-precision (FP32/TF32/FP16/BF16/FP8) training of small networks on the CPU or an NVIDIA GPU" \
    --include="$inc" --output="$out" "$mptrain"
