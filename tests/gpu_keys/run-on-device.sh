#!/usr/bin/env bash
# On a GPU machine: build what the device key tables need (Release) and run
# their GPU tests, the example and the benchmark's rows, each program under
# a time limit and its own watchdog (which names the phase it hung in, and
# prints the table's counters and every thread's stack), every line printed
# as it comes.  The misses through the ring come first, the races last and
# shorter than under ctest (RACE_STEPS churn steps each, default 500).
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

# A watchdog's stack lines name the library's hidden functions (and the
# programs' own) only by offset: name them from the build's symbols.
symbolize() { # LOG
    grep -oE '[^ ]*/(libregcache[^ (]*|gpu_keys|regcache-bench-keys)\(\+0x[0-9a-f]+\)' "$1" |
        sort -u |
        while read -r frame; do
            lib=${frame%%(*}
            off=${frame##*(+}
            off=${off%)}
            echo "  $frame = $(addr2line -f -e "$lib" "$off" 2>/dev/null | head -1)"
        done
}

status=0
log=$(mktemp)
run() { # LIMIT WAY PROGRAM ARGS...
    local limit=$1 way=$2
    shift 2
    stamp "$way $*"
    KB_WATCHDOG=$((limit - 5)) timeout "$limit" "$root/tests/gpu_hook/gpu-test.sh" "$way" "$@" 2>&1 |
        tee "$log"
    local rc=${PIPESTATUS[0]}
    grep -q '^HANG' "$log" && symbolize "$log"
    stamp "exit $rc"
    [ $rc = 0 ] || status=1
}
keys=$build/tests/gpu_keys/gpu_keys
steps=${RACE_STEPS:-500}
run 30 linked-init-first "$keys" ring sync
run 30 linked-init-first "$keys" ring copy
run 30 linked-init-first "$keys" ring free
run 30 linked-init-first "$build/examples/device_keys"
run 130 linked-init-first "$build/bench/regcache-bench-keys"
run 60 linked-init-first "$keys" agree
run 100 linked-init-first "$keys" race tag "$steps"
run 100 "preload:$hook_lib" "$keys" race hooks "$steps"
rm -f "$log"
exit $status
