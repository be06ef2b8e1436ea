#!/usr/bin/env bash
# On a GPU machine: build what the device key tables need (Release) and run
# their GPU tests, the example and the benchmark's rows, each program under
# a time limit and its own watchdog (which names the phase it hung in),
# every line printed as it comes.
#
#   tests/gpu_keys/run-on-device.sh [BUILD]     BUILD defaults to build-keys
#
# The build's output goes to BUILD/build.log (its tail is shown if it
# fails).  Like tests/gpu/run-on-device.sh it takes cmocka and utlist.h from
# .carry/ where the machine lacks them (the test tree's CMake asks for them).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
carry=$root/.carry
build=${1:-$root/build-keys}
hook_lib=$build/src/hook/libregcache-hook.so
args=(-DCMAKE_BUILD_TYPE=Release -DREGCACHE_BENCH=ON -DREGCACHE_EXAMPLES=ON)
if [ ! -e /usr/include/cmocka.h ]; then
    args+=(-DCMOCKA_INCLUDE_DIR="$carry/include" -DCMOCKA_LIBRARY="$carry/lib/libcmocka.so")
    export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -e /usr/include/utlist.h ] ||
    export CMAKE_INCLUDE_PATH="$carry/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}"
stamp() { echo "== $(date +%T) $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
stamp "configure and build ($(nproc) cores)"
mkdir -p "$build"
if ! { cmake -S "$root" -B "$build" "${args[@]}" &&
       cmake --build "$build" -j"$(nproc)" --target regcache regcache-hook gpu_keys \
           regcache-bench-keys device_keys; } >"$build/build.log" 2>&1; then
    tail -30 "$build/build.log"
    exit 1
fi
hook_lib=$(find "$build" -name 'libregcache-hook.so' | head -1)

status=0
run() { # LIMIT WAY PROGRAM ARGS...
    local limit=$1 way=$2
    shift 2
    stamp "$way $*"
    timeout "$limit" "$root/tests/gpu_hook/gpu-test.sh" "$way" "$@"
    local rc=$?
    stamp "exit $rc"
    [ $rc = 0 ] || status=1
}
keys=$build/tests/gpu_keys/gpu_keys
run 100 "preload:$hook_lib" "$keys" race hooks
run 100 linked-init-first "$keys" race tag
run 100 linked-init-first "$keys" agree
run 100 linked-init-first "$keys" ring
run 60 linked-init-first "$build/examples/device_keys"
run 180 linked-init-first "$build/bench/regcache-bench-keys"
exit $status
