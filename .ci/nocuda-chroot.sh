#!/usr/bin/env bash
# .ci/nocuda-chroot.sh - proves that mptrain builds, trains and passes its tests on a Debian machine without
# CUDA, as a fresh user would: a Debian 12 (bookworm) chroot made by debootstrap has no /usr/local/cuda, no
# nvcc and no CUDA library; a fresh clone of this repository's commit is run there by an unprivileged user
# with sudo, through the README's two commands (`./run demo`, then `./run test`), which install their own
# Debian packages (the Fashion-MNIST data included). It prints each command's result and wall time, the
# lines saying the CUDA backend was not built, `mptrain info`, and the peak RSS of a CPU `mptrain train`
# run in the chroot beside the same run of this repository's CUDA build on the host, if there is one.
#
# Usage, as root, from a clone of the repository:   .ci/nocuda-chroot.sh [COMMIT]   (default HEAD)
# Environment:
#   NOCUDA_CHROOT  the chroot's directory (default: chroot-nocuda beside the repository); made if absent,
#                  kept afterwards (a second run reuses it and its installed packages)
#   NOCUDA_FRESH=1 remove the chroot first, so that ./run demo installs every package itself again
#   DEBIAN_MIRROR  default: the Debian mirror apt uses on this machine, else http://deb.debian.org/debian
#   HOST_BUILD     the host's CUDA build to compare the RSS with (default: build/ of this repository)
#   RSS_REPEATS    runs per side of the RSS comparison, alternating (default 3; the median is printed)
# Not a step of .ci/run: it needs root, mounts, and ~500 MB from a Debian mirror (see docs/development.md,
# "Without CUDA").
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

say() { printf '==> %s\n' "$*"; }
die() { printf 'nocuda-chroot: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"
commit=$(git rev-parse --verify "${1:-HEAD}^{commit}") || die "${1:-HEAD}: not a commit of $repo"
root=${NOCUDA_CHROOT:-$(dirname "$repo")/chroot-nocuda}
host_build=${HOST_BUILD:-$repo/build}
repeats=${RSS_REPEATS:-3}
suite=bookworm
user=learner
home=/home/$user
logs=$root$home/logs
rss_cmd=(train --model mlp --precision fp16 --epochs 1 --device cpu)

# The first Debian (not security) mirror in apt's sources on this machine, deb822 or one-line format.
debian_mirror() {
    local f uri
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}//p' "$f" |
              awk '{print $1}' | grep -E '/debian/?$' | head -n 1 || true)
        [ -n "$uri" ] && { echo "${uri%/}"; return 0; }
    done
    echo http://deb.debian.org/debian
}

make_chroot() {
    local mirror=${DEBIAN_MIRROR:-$(debian_mirror)}
    command -v debootstrap >/dev/null 2>&1 ||
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends debootstrap
    # Never remove a chroot with /dev or /proc still bound into it (a run killed before its unmount).
    ! grep -q " $root/" /proc/mounts || die "something is still mounted under $root (see /proc/mounts): unmount it first"
    say "debootstrap $suite into $root from $mirror"
    rm -rf "$root"
    # sudo: what ./run uses to install packages as a user; time: /usr/bin/time -v for the RSS figure.
    debootstrap --variant=minbase --include=ca-certificates,sudo,time "$suite" "$root" "$mirror"
    chroot "$root" useradd --create-home --shell /bin/bash "$user"
    printf '%s ALL=(ALL) NOPASSWD:ALL\n' "$user" > "$root/etc/sudoers.d/$user"
    chmod 0440 "$root/etc/sudoers.d/$user"
}

mounted=()
unmount_all() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" || true; done
}
bind() { # bind SOURCE TARGET-IN-CHROOT [ro]
    mountpoint -q "$root$2" && return 0
    mount --bind "$1" "$root$2"
    mounted+=("$root$2")
    [ "${3:-}" != ro ] || mount -o remount,bind,ro "$root$2"
}

# in_chroot LOG COMMAND [quiet]: runs the bash command as the user in their clone, niced, with a fresh
# login's environment; its output goes to LOG (and the terminal unless quiet), "<exit status> <seconds>" to
# LOG.status.
in_chroot() {
    local log=$1 cmd=$2 t0 t1 rc
    t0=$(date +%s.%N)
    set +e
    nice -n 10 chroot --userspec="$user:$user" "$root" /usr/bin/env -i HOME="$home" USER="$user" LANG=C.UTF-8 \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin TERM=dumb \
        bash -c "cd $home/mptrain && $cmd" 2>&1 | if [ "${3:-}" = quiet ]; then cat > "$log"; else tee "$log"; fi
    rc=${PIPESTATUS[0]}
    set -e
    t1=$(date +%s.%N)
    awk -v rc="$rc" -v a="$t0" -v b="$t1" 'BEGIN { printf "%d %.0f\n", rc, b - a }' > "$log.status"
}

max_rss_kb() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1" | tail -n 1; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

if [ "${NOCUDA_FRESH:-0}" = 1 ] || [ ! -x "$root/usr/bin/apt-get" ] || [ -d "$root/debootstrap" ] ||
   [ ! -d "$root$home" ]; then
    make_chroot
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# A machine knows its own name (sudo looks it up): the chroot shares this one's.
[ -f "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n' > "$root/etc/hosts"
grep -qw "$(hostname)" "$root/etc/hosts" || printf '127.0.1.1\t%s\n' "$(hostname)" >> "$root/etc/hosts"

# What makes this a machine without CUDA: checked, not assumed.
[ ! -e "$root/usr/local/cuda" ] || die "$root/usr/local/cuda exists: not a machine without CUDA"
if chroot "$root" sh -c 'command -v nvcc || ldconfig -p | grep -E "libcuda|libcudart|libcublas|libcudnn"'; then
    die "the chroot has nvcc or a CUDA library"
fi

trap unmount_all EXIT
bind /proc /proc
bind /dev /dev
bind /dev/pts /dev/pts
bind /sys /sys ro

say "fresh clone of $commit into $root$home/mptrain (and ../shared beside it, if this repository has one)"
rm -rf "$root$home/mptrain" "$root$home/shared" "$logs"
git clone --quiet --no-hardlinks "$repo" "$root$home/mptrain"
git -C "$root$home/mptrain" checkout --quiet --detach "$commit"
[ ! -d "$repo/../shared" ] || cp -a "$repo/../shared" "$root$home/shared"
mkdir -p "$logs"
chroot "$root" chown -R "$user:$user" "$home"

say "as $user in the chroot: ./run demo"
in_chroot "$logs/demo.log" './run demo'
say "as $user in the chroot: ./run test"
in_chroot "$logs/test.log" './run test'
in_chroot "$logs/info.log" 'build/tools/mptrain info' quiet

say "peak RSS of 'mptrain ${rss_cmd[*]}': chroot CPU-only build vs host build $host_build, alternating"
host_has_cuda=0
grep -q '^#define MPT_HAVE_CUDA' "$host_build/mpt_config.h" 2>/dev/null && [ -x "$host_build/tools/mptrain" ] &&
    host_has_cuda=1
chroot_rss=()
host_rss=()
for ((i = 1; i <= repeats; i++)); do
    in_chroot "$logs/rss-$i.log" "/usr/bin/time -v build/tools/mptrain ${rss_cmd[*]} --out /tmp/rss-$i" quiet
    read -r rc _ < "$logs/rss-$i.log.status"
    [ "$rc" -eq 0 ] || die "chroot run of mptrain ${rss_cmd[*]} failed (exit $rc): $logs/rss-$i.log"
    chroot_rss+=("$(max_rss_kb "$logs/rss-$i.log")")
    if [ "$host_has_cuda" = 1 ]; then
        out=$(mktemp -d)
        nice -n 10 /usr/bin/time -v -o "$out/time" "$host_build/tools/mptrain" "${rss_cmd[@]}" --out "$out/run" \
            > /dev/null 2>&1 || die "host run of $host_build/tools/mptrain ${rss_cmd[*]} failed"
        host_rss+=("$(max_rss_kb "$out/time")")
        rm -rf "$out"
    fi
done

printf '\n==== no-CUDA chroot: Debian %s in %s, commit %s\n' "$(cat "$root/etc/debian_version")" "$root" \
    "$(git rev-parse --short "$commit")"
printf '/usr/local/cuda in the chroot: absent; nvcc: absent; CUDA libraries: none\n'
for c in demo test; do
    read -r rc secs < "$logs/$c.log.status"
    printf './run %-5s exit %s, %s s wall; last line: %s\n' "$c" "$rc" "$secs" "$(tail -n 1 "$logs/$c.log")"
done
printf "Meson's line at the first configure (./run demo):\n"
grep '^Message: CUDA backend not built' "$logs/demo.log" || true
printf "./run's note, printed by ./run demo %s time(s) and by ./run test %s time(s); the first:\n" \
    "$(grep -c 'CUDA backend was not built' "$logs/demo.log" || true)" \
    "$(grep -c 'CUDA backend was not built' "$logs/test.log" || true)"
awk '/CUDA backend was not built/ { on = 1 } on { print } on && /A GPU is not needed to build/ { exit }' "$logs/demo.log"
printf 'mptrain info:\n'
sed 's/^/    /' "$logs/info.log"
printf 'peak RSS (Maximum resident set size), median of %s: chroot CPU-only build %s MiB (runs: %s kB)\n' \
    "$repeats" "$(printf '%s\n' "${chroot_rss[@]}" | median | awk '{printf "%.1f", $1 / 1024}')" "${chroot_rss[*]}"
if [ "$host_has_cuda" = 1 ]; then
    printf '                                            host CUDA build     %s MiB (runs: %s kB)\n' \
        "$(printf '%s\n' "${host_rss[@]}" | median | awk '{printf "%.1f", $1 / 1024}')" "${host_rss[*]}"
else
    printf 'no CUDA build in %s to compare with (HOST_BUILD=...)\n' "$host_build"
fi
printf 'logs: %s\n' "$logs"
read -r rc_demo _ < "$logs/demo.log.status"
read -r rc_test _ < "$logs/test.log.status"
[ "$rc_demo" -eq 0 ] && [ "$rc_test" -eq 0 ]
