#!/usr/bin/env bash
# On a GPU machine: build what the device key tables need (Release) and run
# their GPU tests, the example and the benchmark's rows.
#
#   tests/gpu_keys/run-on-device.sh [BUILD]     BUILD defaults to build-keys
#
# Like tests/gpu/run-on-device.sh it takes cmocka and utlist.h from .carry/
# where the machine lacks them (the test tree's CMake asks for them).  Each
# test is stopped after 120 s, the benchmark after 180 s: a hang is reported,
# not waited out.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
carry=$root/.carry
build=${1:-$root/build-keys}
args=(-DCMAKE_BUILD_TYPE=Release -DREGCACHE_BENCH=ON -DREGCACHE_EXAMPLES=ON)
if [ ! -e /usr/include/cmocka.h ]; then
    args+=(-DCMOCKA_INCLUDE_DIR="$carry/include" -DCMOCKA_LIBRARY="$carry/lib/libcmocka.so")
    export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -e /usr/include/utlist.h ] ||
    export CMAKE_INCLUDE_PATH="$carry/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "cores: $(nproc)"
cmake -S "$root" -B "$build" "${args[@]}" >/dev/null || exit 1
cmake --build "$build" -j"$(nproc)" --target regcache regcache-hook gpu_keys \
    regcache-bench-keys device_keys >/dev/null || exit 1

status=0
ctest --test-dir "$build" -R '^(gpu_keys_|example_device_keys$)' --timeout 120 \
    --output-on-failure -V | grep -v '^[0-9]*: Test command\|^[0-9]*: Environment\|^$' || status=1
echo "== benchmark rows"
timeout 180 "$build/bench/regcache-bench-keys" || status=1
exit $status
