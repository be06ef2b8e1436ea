#!/bin/sh
# Compare builds of the library in one process, samples interleaved (ab.c
# says how and why):
#
#   bench/ab/run.sh churn|hooks|tag|access N REV_OR_DIR...
#   e.g. bench/ab/run.sh churn 1000 HEAD~1 HEAD
#
# or, one build per process, PROCS processes each (default 6) taking
# turns: on the GPU machine, TAG_CHECK hits less the driver's tag query
# (driver_tag.c), then each build's median over its processes; anywhere,
# the hits beside a skeleton of their protocol, the floor this machine
# allows them (floor.c):
#
#   bench/ab/run.sh driver-tag|floor N REV_OR_DIR...
#
# or, on any machine with valgrind, instructions per get+put counted by
# callgrind (one build at a time, the difference of two runs of 4 and 24
# rounds, so that set-up and warm-up cancel): the same on every run.
#
#   bench/ab/run.sh instructions churn|hooks|tag|access N REV_OR_DIR...
#
# Each argument is a git revision, or a source directory (a working tree
# with changes not yet committed).  Builds (Release) go under $AB_DIR
# (default /tmp/regcache-ab); a revision's build is reused, a directory's
# rebuilt.  ROUNDS samples per build (default 3000) of OPS get+put each
# (default 2000 for churn, 20000 for hits), pinned to CPU (default the
# last one).
set -eu

src=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 3 ] || { sed -n '2,21p' "$0"; exit 2; }
count=
if [ "$1" = instructions ]; then
    count=1
    shift
fi
mode=$1 n=$2
shift 2
dir=${AB_DIR:-/tmp/regcache-ab}
mkdir -p "$dir"

build() { # SOURCE BUILD_DIR
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DREGCACHE_TESTS=OFF \
        -DREGCACHE_EXAMPLES=OFF -DREGCACHE_BENCH=OFF >/dev/null
    cmake --build "$2" -j"$(nproc)" --target regcache >/dev/null
}

libs=
for arg in "$@"; do
    if [ -d "$arg" ]; then
        # One build per source directory: CMake refuses a build tree made
        # from another source.
        path=$(cd "$arg" && pwd)
        out=$dir/build-dir-$(printf '%s' "$path" | cksum | cut -d' ' -f1)
        build "$path" "$out"
    else
        sha=$(git -C "$src" rev-parse --short "$arg")
        out=$dir/build-$sha
        if [ ! -e "$out/src/libregcache.so" ]; then
            rm -rf "$dir/src-$sha"
            mkdir -p "$dir/src-$sha"
            git -C "$src" archive "$sha" | tar -x -C "$dir/src-$sha"
            build "$dir/src-$sha" "$out"
        fi
    fi
    libs="$libs $out/src/libregcache.so"
done

cpu=${CPU:-$(($(nproc) - 1))}
case $mode in driver-tag | floor)
    first=${libs# }
    first=${first%% *}
    if [ "$mode" = driver-tag ]; then
        cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$dir/regcache-$mode" \
            "$src/bench/ab/driver_tag.c" "$src/bench/cuda_api.c" -I"$src/include" \
            -I"$src/bench" -I"${CUDA_HOME:-/usr/local/cuda}/include" -L"$(dirname "$first")" \
            -lregcache -ldl
    else
        cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$dir/regcache-$mode" \
            "$src/bench/ab/floor.c" "$src/bench/skeleton.c" -I"$src/include" -I"$src/bench" \
            -L"$(dirname "$first")" -lregcache
    fi
    for _ in $(seq "${PROCS:-6}"); do
        for lib in $libs; do
            printf '%s  ' "$lib"
            LD_LIBRARY_PATH=$(dirname "$lib") taskset -c "$cpu" "$dir/regcache-$mode" "$n" \
                "${ROUNDS:-150}"
        done
    done | tee "$dir/$mode.txt"
    [ "$mode" = floor ] && exit 0
    echo "median over the processes of hit - query, ns:"
    for lib in $libs; do
        printf '  %s  %s\n' "$(grep -F "$lib " "$dir/driver-tag.txt" | awk '{print $(NF-1)}' |
            sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')" "$lib"
    done
    exit 0
    ;;
esac

cc -std=c11 -O2 -Wall -Wextra -Werror -o "$dir/regcache-ab" "$src/bench/ab/ab.c" \
    -I"$src/include" -I"$src/bench" -ldl -lpthread
ops=20000
[ "$mode" = churn ] && ops=2000
if [ -n "$count" ]; then
    ops=${OPS:-1000}
    ir() { # LIB ROUNDS: instructions callgrind counted in the whole run
        GLIBC_TUNABLES=glibc.rtld.optional_static_tls=65536 valgrind --tool=callgrind \
            --callgrind-out-file=/dev/null "$dir/regcache-ab" "$mode" "$n" "$2" "$ops" "$1" \
            2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
    }
    echo "$mode $n, instructions per get+put (callgrind; the loop's own included):"
    for lib in $libs; do
        a=$(ir "$lib" 4) b=$(ir "$lib" 24)
        printf '  %8s  %s\n' "$(((b - a) / (20 * ops)))" "$lib"
    done
    exit 0
fi
# Each namespace needs static TLS of its own (the library's thread record
# pointer is initial-exec); glibc's reserve holds about one more library.
# shellcheck disable=SC2086  # $libs is a list of paths without spaces
GLIBC_TUNABLES=glibc.rtld.optional_static_tls=65536 taskset -c "$cpu" \
    "$dir/regcache-ab" "$mode" "$n" "${ROUNDS:-3000}" "${OPS:-$ops}" $libs
