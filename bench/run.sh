#!/bin/sh
# Build regcache (Release) and run the benchmark harness: the table goes to
# stdout, the JSON report and the PNG plots to OUTDIR.
#
#   bench/run.sh [--quick] [OUTDIR]      (OUTDIR defaults to $BUILD_DIR/report)
#
# BUILD_DIR (default build-bench under the source tree) is the build folder.
# Missing Debian packages are installed when running as root; otherwise the
# script says which are missing and carries on (UCX and gnuplot are
# optional: the harness reports what it skipped).
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build-bench}
quick=
if [ "${1:-}" = "--quick" ]; then
    quick=--quick
    shift
fi
out=${1:-$build/report}

# Build: cmake gcc make pkg-config libibverbs-dev uthash-dev;
# measured against: libucx-dev; plots: gnuplot-nox.
packages="cmake gcc make pkg-config libibverbs-dev uthash-dev libucx-dev gnuplot-nox"
if command -v dpkg-query >/dev/null 2>&1; then
    missing=
    for p in $packages; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
            missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "run.sh: installing$missing"
            # shellcheck disable=SC2086  # one word per package
            { apt-get update && DEBIAN_FRONTEND=noninteractive \
                apt-get install -y --no-install-recommends $missing; } ||
                echo "run.sh: could not install$missing; carrying on"
        else
            echo "run.sh: missing Debian packages:$missing (run as root to install)"
        fi
    fi
fi

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DREGCACHE_TESTS=OFF -DREGCACHE_EXAMPLES=OFF
cmake --build "$build" -j"$(nproc)" --target regcache-bench
mkdir -p "$out"
# shellcheck disable=SC2086  # $quick is empty or one word
"$build/bench/regcache-bench" $quick --json "$out/bench.json" --plot "$out/plots"
echo "run.sh: report in $out/bench.json, plots in $out/plots"
