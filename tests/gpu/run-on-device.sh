#!/usr/bin/env bash
# Configure, build and run the gpu-labelled tests on a GPU machine, from a
# clean tree.
#
#   tests/gpu/run-on-device.sh --stage   on a machine with cmocka and uthash
#                                        installed: copy them into .carry/
#   tests/gpu/run-on-device.sh [BUILD]   on the GPU machine (BUILD defaults
#                                        to build-gpu)
#
# The GPU machine has CUDA, cmake and libibverbs but neither cmocka nor
# uthash: .carry/ (git-ignored) brings them along, and is used only for what
# the machine lacks.  TARGETS (space separated) limits what is built; by
# default everything is, so that every gpu-labelled test can run.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
carry=$root/.carry

if [ "${1:-}" = --stage ]; then
    mkdir -p "$carry/include" "$carry/lib"
    cp /usr/include/cmocka.h /usr/include/uthash.h "$carry/include/"
    lib=$(readlink -f "$(ldconfig -p | awk '/libcmocka\.so\.0 / {print $NF; exit}')")
    # Plain copies: links may not survive the trip.
    cp "$lib" "$carry/lib/libcmocka.so.0"
    cp "$lib" "$carry/lib/libcmocka.so"
    echo "staged cmocka and uthash in $carry"
    exit 0
fi

need() {
    [ -e "$1" ] || { echo "missing $1: run --stage elsewhere and carry .carry" >&2; exit 1; }
}

build=${1:-$root/build-gpu}
args=(-DREGCACHE_BENCH=OFF -DREGCACHE_EXAMPLES=OFF)
if [ ! -e /usr/include/cmocka.h ]; then
    need "$carry/include/cmocka.h"
    need "$carry/lib/libcmocka.so"
    args+=(-DCMOCKA_INCLUDE_DIR="$carry/include" -DCMOCKA_LIBRARY="$carry/lib/libcmocka.so")
    export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ ! -e /usr/include/uthash.h ]; then
    need "$carry/include/uthash.h"
    args+=(-DUTHASH_DIR="$carry/include")
fi

nvidia-smi -L || true
cmake -S "$root" -B "$build" "${args[@]}"
if [ -n "${TARGETS:-}" ]; then
    # shellcheck disable=SC2086
    cmake --build "$build" -j"$(nproc)" --target $TARGETS
else
    cmake --build "$build" -j"$(nproc)"
fi
ctest --test-dir "$build" -L gpu --output-on-failure
