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

# The project's one package list; the harness itself needs only the build
# tools, and reports what it skipped when UCX or gnuplot are missing.
"$src/cmake/debian-deps.sh" || echo "run.sh: carrying on without the missing packages"

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DREGCACHE_TESTS=OFF -DREGCACHE_EXAMPLES=OFF
cmake --build "$build" -j"$(nproc)" --target regcache-bench
mkdir -p "$out"
# shellcheck disable=SC2086  # $quick is empty or one word
"$build/bench/regcache-bench" $quick --json "$out/bench.json" --plot "$out/plots"
echo "run.sh: report in $out/bench.json, plots in $out/plots"
