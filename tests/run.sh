#!/usr/bin/env bash
# Build regcache and run every test: `tests/run.sh`.
# Extra arguments go to CMake, e.g. `tests/run.sh -DREGCACHE_ASAN=ON`;
# REGCACHE_BUILD names the build directory (default build),
# REGCACHE_SKIP_LABELS leaves out test labels (e.g. "vm").
set -euo pipefail
cd "$(dirname "$0")/.."
cmake/debian-deps.sh
build=${REGCACHE_BUILD:-build}
cmake -S . -B "$build" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
skip=${REGCACHE_SKIP_LABELS:-}
# Without a GPU the gpu-labelled tests could only skip, and ctest's summary
# counts skips among the passes: leave them out and say so instead.
if [ ! -e /dev/nvidiactl ]; then
  echo "regcache: no NVIDIA GPU here: the tests labelled gpu are not run" \
       "(run tests/gpu/run-on-device.sh on a GPU machine)"
  skip=${skip:+$skip|}gpu
fi
ctest --output-on-failure -j"$(nproc)" ${skip:+-LE "^($skip)\$"}
