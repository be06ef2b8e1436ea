#!/usr/bin/env bash
# Configure, build and run every gpu-labelled test on a GPU machine, from a
# clean tree: the cache on the real driver (tests/gpu) and both hooks (the
# preload hook, and the in-process interception of the merely linked
# library) under a driver-API program, the CUDA runtime and PyTorch
# (tests/gpu_hook).
#
#   tests/gpu/run-on-device.sh --stage   on a machine with cmocka installed:
#                                        copy it into .carry/
#   tests/gpu/run-on-device.sh [BUILD]   on the GPU machine (BUILD defaults
#                                        to build-gpu)
#
# The GPU machine has CUDA, cmake, libibverbs and PyTorch but no cmocka:
# .carry/ (git-ignored) brings it along and is used only where it is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
carry=$root/.carry

if [ "${1:-}" = --stage ]; then
    mkdir -p "$carry/include" "$carry/lib"
    cp /usr/include/cmocka.h "$carry/include/"
    lib=$(readlink -f "$(ldconfig -p | awk '/libcmocka\.so\.0 / {print $NF; exit}')")
    # Plain copies: links may not survive the trip.
    cp "$lib" "$carry/lib/libcmocka.so.0"
    cp "$lib" "$carry/lib/libcmocka.so"
    echo "staged cmocka in $carry"
    exit 0
fi

build=${1:-$root/build-gpu}
args=(-DREGCACHE_BENCH=OFF -DREGCACHE_EXAMPLES=OFF)
if [ ! -e /usr/include/cmocka.h ]; then
    for f in include/cmocka.h lib/libcmocka.so; do
        [ -e "$carry/$f" ] || { echo "missing $carry/$f: run --stage elsewhere and carry .carry" >&2; exit 1; }
    done
    args+=(-DCMOCKA_INCLUDE_DIR="$carry/include" -DCMOCKA_LIBRARY="$carry/lib/libcmocka.so")
    export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

nvidia-smi -L || true
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' || true
cmake -S "$root" -B "$build" "${args[@]}"
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" -L gpu --output-on-failure -V
# The hooks' CPU tests too: on this machine the real libcuda is also around.
ctest --test-dir "$build" -R '^(hook_|intercept)' --output-on-failure
