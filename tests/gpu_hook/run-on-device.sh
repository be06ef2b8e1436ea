#!/usr/bin/env bash
# Build the preload hook and its tests from a clean tree on the GPU machine
# and run them: the CPU tests over the libcuda double, then the gpu ones
# against the real driver, the CUDA runtime and PyTorch.
#
#   tests/gpu_hook/run-on-device.sh [BUILD]     (BUILD defaults to build-gpu-hook)
#
# cmocka and uthash come from .carry/ where the machine lacks them (see
# tests/gpu/run-on-device.sh --stage).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
carry=$root/.carry
build=${1:-$root/build-gpu-hook}

args=(-DREGCACHE_BENCH=OFF -DREGCACHE_EXAMPLES=OFF)
if [ ! -e /usr/include/cmocka.h ]; then
    args+=(-DCMOCKA_INCLUDE_DIR="$carry/include" -DCMOCKA_LIBRARY="$carry/lib/libcmocka.so")
    export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -e /usr/include/uthash.h ] || args+=(-DUTHASH_DIR="$carry/include")

nvidia-smi -L || true
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' || true
cmake -S "$root" -B "$build" "${args[@]}"
cmake --build "$build" -j"$(nproc)" --target regcache-hook hook_paths hook_active \
    gpu_hook_driver gpu_hook_backend \
    $(cmake --build "$build" --target help | awk '/gpu_hook_runtime_/ {print $2}')
ctest --test-dir "$build" -R '^(hook_|gpu_hook_)' --output-on-failure -V
