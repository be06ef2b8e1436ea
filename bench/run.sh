#!/bin/sh
# Build regcache (Release), run the benchmark harness, print the report:
#
#   bench/run.sh [--quick] [OUTDIR]
#
# OUTDIR (default $BUILD_DIR/report, BUILD_DIR default build-bench) gets
# bench.json, report.txt and the plots (SVG, and PNG with python3-matplotlib).
# valgrind counts instructions per get+put where the CPU's counter cannot.
# Missing Debian packages are installed when running as root; the report says
# what it had to skip.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build-bench}
quick=
if [ "${1:-}" = "--quick" ]; then
    quick=--quick
    shift
fi
out=${1:-$build/report}

"$src/cmake/debian-deps.sh" python3-matplotlib valgrind ||
    echo "run.sh: carrying on without the missing packages"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DREGCACHE_TESTS=OFF \
    -DREGCACHE_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target regcache-bench >/dev/null
mkdir -p "$out"
# shellcheck disable=SC2086  # $quick is empty or one word
"$build/bench/regcache-bench" $quick --json "$out/bench.json"
python3 "$src/bench/report.py" "$out/bench.json" --plots "$out" | tee "$out/report.txt"
echo "run.sh: $out holds bench.json, report.txt and the plots"
