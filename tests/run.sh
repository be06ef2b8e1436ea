#!/usr/bin/env bash
# Build regcache and run every test: `tests/run.sh`.
# Extra arguments go to CMake, e.g. `tests/run.sh -DREGCACHE_ASAN=ON`;
# REGCACHE_BUILD names the build directory (default build),
# REGCACHE_CTEST_ARGS adds ctest arguments (e.g. "-LE vm").
set -euo pipefail
cd "$(dirname "$0")/.."
cmake/debian-deps.sh
build=${REGCACHE_BUILD:-build}
cmake -S . -B "$build" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
# shellcheck disable=SC2086
ctest --output-on-failure -j"$(nproc)" ${REGCACHE_CTEST_ARGS:-}
