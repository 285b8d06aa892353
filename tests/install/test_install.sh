#!/usr/bin/env bash
# tests/install/test_install.sh BUILD_ROOT VERSION - suite 'install': what `meson install` puts on a
# machine, used the way a program outside the project uses it.
#
# Installs the build into a temporary directory (meson install --destdir; mptrain.pc is relocatable, so
# pkg-config finds the staged tree from PKG_CONFIG_PATH alone), then checks: the files of the installation;
# pkg-config's version; every installed header compiling on its own with nothing but `pkg-config --cflags
# mptrain`; libmptrain.so exporting exactly the functions its headers declare MPT_API; the CUDA module (when
# built) resolving its engine symbols from libmptrain.so and being found by the installed mptrain; and the
# example examples/mlp_fp16.c, as installed, built with pkg-config only against the shared library (trained
# for a few hundred steps on Fashion-MNIST, or synthetic data without the dataset: the mean loss must fall
# and the test accuracy end far above chance) and against the static library.
# Prints a Check-style summary line (Checks: N, Failures: F, Errors: 0), which ./run adds to its total.
set -uo pipefail
build=$1
version=$2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" # ok, bad, check, finish

if ! meson install -C "$build" --no-rebuild --destdir "$stage" --quiet > "$stage/install.log" 2>&1; then
    cat "$stage/install.log"
    bad "meson install --destdir"
    finish
fi
ok "meson install --destdir"
pc=$(find "$stage" -name mptrain.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || { bad "mptrain.pc installed"; finish; }
export PKG_CONFIG_PATH=${pc%/mptrain.pc}
unset PKG_CONFIG_SYSROOT_DIR
libdir=$(pkg-config --variable=libdir mptrain)
incdir=$(pkg-config --variable=includedir mptrain)
prefix=$(pkg-config --variable=prefix mptrain)
# A build directory configured before mptrain.pc became relocatable writes an absolute prefix: pkg-config's
# sysroot then points it into the staged tree.
case $(readlink -f "$libdir") in
    "$stage"/*) ok "mptrain.pc is relocatable: libdir $(readlink -f "$libdir")" ;;
    *)
        printf 'mptrain.pc has an absolute prefix (the build directory predates -Dpkgconfig.relocatable=true): '
        printf 'PKG_CONFIG_SYSROOT_DIR=%s\n' "$stage"
        export PKG_CONFIG_SYSROOT_DIR=$stage
        libdir=$stage$libdir incdir=$stage$incdir prefix=$stage$prefix
        ;;
esac
libdir=$(readlink -f "$libdir") incdir=$(readlink -f "$incdir") prefix=$(readlink -f "$prefix")

check "pkg-config --modversion mptrain is $version" [ "$(pkg-config --modversion mptrain)" = "$version" ]
for f in "$libdir/libmptrain.so.$version" "$libdir/libmptrain.a" "$incdir/mptrain/mptrain.h" \
         "$incdir/mptrain/engine/api.h" "$prefix/bin/mptrain" "$prefix/share/doc/mptrain/examples/mlp_fp16.c"; do
    check "installed: ${f#"$stage"}" [ -f "$f" ]
done
if [ -f "$build/tools/mptrain.1" ]; then
    check "installed: the man page" [ -f "$prefix/share/man/man1/mptrain.1" ]
fi

# Every public header compiles alone, warning-free, with only pkg-config's flags.
cflags=$(pkg-config --cflags mptrain)
n_headers=0
while IFS= read -r h; do
    n_headers=$((n_headers + 1))
    printf '#include <%s>\nint main(void) { return 0; }\n' "${h#"$incdir"/}" > "$stage/h.c"
    # shellcheck disable=SC2086
    if ! cc -std=c11 -Wall -Wextra -Werror -c "$stage/h.c" -o "$stage/h.o" $cflags; then
        bad "header ${h#"$incdir"/} compiles alone with pkg-config --cflags mptrain"
    fi
done < <(find "$incdir/mptrain" -name '*.h' | sort)
ok "the $n_headers installed headers compile alone with pkg-config --cflags mptrain"

# Every function a public header declares is part of the API: it carries MPT_API (a declaration at the start
# of a line that does not is one a user could call but not link; MPT_HD ones are static inline).
unmarked=$(find "$incdir/mptrain" -name '*.h' -exec perl -0777 -ne \
    'print "$2 " while /^(?!MPT_API|MPT_HD|static|typedef|#)([A-Za-z_][\w *]*?)\b(mpt_\w+)\s*\(/mg' {} +)
check "every function declared in the installed headers carries MPT_API${unmarked:+ (not: $unmarked)}" \
    [ -z "$unmarked" ]

# The exports are the MPT_API declarations, no more and no less.
find "$incdir/mptrain" -name '*.h' -exec perl -0777 -ne 'print "$2\n" while /^MPT_API\b([^;{]*?)\b(mpt_\w+)\s*\(/mg' {} + |
    sort -u > "$stage/declared"
nm -D --defined-only "$libdir/libmptrain.so" | awk '$2 == "T" { print $3 }' | sort -u > "$stage/exported"
if diff "$stage/declared" "$stage/exported" > "$stage/exports.diff"; then
    ok "libmptrain.so exports exactly the $(wc -l < "$stage/exported") functions declared MPT_API"
else
    sed 's/^</declared MPT_API, not exported:/; s/^>/exported, not declared MPT_API:/' "$stage/exports.diff" | grep :
    bad "libmptrain.so exports exactly the functions declared MPT_API"
fi

module=$libdir/mptrain/libmptrain-cuda.so
if [ -f "$module" ]; then
    missing=$(nm -D --undefined-only "$module" | awk '$2 ~ /^mpt_/ { print $2 }' | sort -u | comm -23 - "$stage/exported")
    check "the CUDA module's engine symbols are all exported by libmptrain.so${missing:+ (missing: $missing)}" \
        [ -z "$missing" ]
    # a program that dlopen()s libmptrain.so with RTLD_LOCAL, as Python's ctypes does, loads the module too
    # (the probe then says whether a GPU is usable; "CUDA backend module ...: cannot load it" if it did not load)
    probe=$(python3 -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1]); buf = ctypes.create_string_buffer(8192)
lib.mpt_cuda_available(buf, ctypes.c_size_t(8192)); print(buf.value.decode())' "$libdir/libmptrain.so" 2>&1)
    check "libmptrain.so opened RTLD_LOCAL (Python ctypes) loads the CUDA module: ${probe:0:160}" \
        bash -c "! grep -q '^CUDA backend module\|Traceback\|Error' <<< \"\$1\"" _ "$probe"
    info=$("$prefix/bin/mptrain" info 2>&1)
    check "the installed mptrain loads the installed CUDA module" grep -qF "loadable: yes, $module" <<< "$info"
fi

# The example, as a user builds it.
example=$prefix/share/doc/mptrain/examples/mlp_fp16.c
data=/usr/share/datasets/fashion-mnist
steps=300
min_acc=60
if ! [ -f "$data/train-images-idx3-ubyte.gz" ] && ! [ -f "$data/train-images-idx3-ubyte" ]; then
    data=synthetic
    min_acc=90
fi
run_example() { # NAME BINARY ARGS...: runs it, checks its version line, falling loss and accuracy
    local name=$1 exe=$2 out
    shift 2
    out=$(OPENBLAS_NUM_THREADS=1 LD_LIBRARY_PATH="$libdir" "$exe" "$@" 2>&1)
    local rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'
    check "$name: exits 0" [ "$rc" -eq 0 ]
    check "$name: reports libmptrain $version" grep -q "^libmptrain $version," <<< "$out"
    local first last acc
    read -r first last < <(sed -n 's/^mean loss: first [0-9]* steps \([0-9.]*\), last [0-9]* steps \([0-9.]*\)$/\1 \2/p' <<< "$out")
    acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' <<< "$out")
    check "$name: the mean loss falls (first ${first:-?}, last ${last:-?})" \
        awk -v a="${first:-nan}" -v b="${last:-nan}" 'BEGIN { exit !(a + 0 > b + 0 && b != "nan") }'
    check "$name: test accuracy ${acc:-?}% > $min_acc% (chance: 10%)" \
        awk -v a="${acc:-0}" -v m="$min_acc" 'BEGIN { exit !(a + 0 > m + 0) }'
}
# shellcheck disable=SC2046
if cc -std=c11 -Wall -Wextra -Werror -O2 "$example" $(pkg-config --cflags --libs mptrain) -o "$stage/mlp_fp16"; then
    ok "the example builds with cc example.c \$(pkg-config --cflags --libs mptrain)"
    check "the example links libmptrain.so" grep -q 'libmptrain\.so' <<< "$(ldd "$stage/mlp_fp16")"
    run_example "shared" "$stage/mlp_fp16" "$data" "$steps"
else
    bad "the example builds with cc example.c \$(pkg-config --cflags --libs mptrain)"
fi
static_libs=$(pkg-config --static --libs mptrain | sed 's/-lmptrain\( \|$\)/-l:libmptrain.a /')
# shellcheck disable=SC2046,SC2086
if cc -std=c11 -O2 "$example" $(pkg-config --cflags mptrain) $static_libs -o "$stage/mlp_fp16_static"; then
    ok "the example links the static library (pkg-config --static, -l:libmptrain.a)"
    check "the static example does not need libmptrain.so" \
        bash -c "! ldd '$stage/mlp_fp16_static' | grep -q libmptrain"
    run_example "static" "$stage/mlp_fp16_static" "$data" "$steps"
else
    bad "the example links the static library (pkg-config --static, -l:libmptrain.a)"
fi
finish
