#!/usr/bin/env bash
# Configure, build and run every gpu-labelled test on a GPU machine, from a
# clean tree: the cache on the real driver (tests/gpu), both hooks (the
# preload hook, and the in-process interception of the merely linked
# library) under a driver-API program, the CUDA runtime and PyTorch
# (tests/gpu_hook), and real allocators under churn plus the cache across
# devices (tests/gpu_alloc).
#
#   tests/gpu/run-on-device.sh --stage   on a machine with cmocka and uthash installed:
#                                        copy them into .carry/
#   tests/gpu/run-on-device.sh [--quick] [BUILD]
#                                        on the GPU machine (BUILD defaults
#                                        to build-gpu; --quick: a tenth of the
#                                        allocator churn)
#
# The GPU machine has CUDA, cmake, libibverbs, PyTorch, CuPy and JAX but no
# cmocka: .carry/ (git-ignored) brings it along and is used only where it is
# missing.  REGCACHE_GPU_JOBS (default 8) allocator tests run at once;
# REGCACHE_ALLOC_* (see tests/gpu_alloc/alloc_churn.py) size their churn.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
carry=$root/.carry

if [ "${1:-}" = --stage ]; then
    mkdir -p "$carry/include" "$carry/lib"
    cp /usr/include/cmocka.h /usr/include/utlist.h "$carry/include/"
    lib=$(readlink -f "$(ldconfig -p | awk '/libcmocka\.so\.0 / {print $NF; exit}')")
    # Plain copies: links may not survive the trip.
    cp "$lib" "$carry/lib/libcmocka.so.0"
    cp "$lib" "$carry/lib/libcmocka.so"
    echo "staged cmocka and utlist.h in $carry"
    exit 0
fi
if [ "${1:-}" = --quick ]; then
    export REGCACHE_ALLOC_QUICK=1
    shift
fi

build=${1:-$root/build-gpu}
# The Python that has the frameworks, not whichever CMake finds first.
args=(-DREGCACHE_BENCH=OFF -DREGCACHE_EXAMPLES=OFF -DPython3_EXECUTABLE="$(command -v python3)")
if [ ! -e /usr/include/cmocka.h ]; then
    for f in include/cmocka.h lib/libcmocka.so; do
        [ -e "$carry/$f" ] || { echo "missing $carry/$f: run --stage elsewhere and carry .carry" >&2; exit 1; }
    done
    args+=(-DCMOCKA_INCLUDE_DIR="$carry/include" -DCMOCKA_LIBRARY="$carry/lib/libcmocka.so")
    export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# uthash's header, which GPU machines may lack: find_path() reads this too.
if [ ! -e /usr/include/utlist.h ]; then
    [ -e "$carry/include/utlist.h" ] || { echo "missing $carry/include/utlist.h: run --stage elsewhere and carry .carry" >&2; exit 1; }
    export CMAKE_INCLUDE_PATH="$carry/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}"
fi
# The 2-GPU machines need NVLink multicast off.
export NCCL_NVLS_ENABLE=0

nvidia-smi -L || true
# What gpu_alloc_devices' BAR1 budgets derive from (free less the reserve).
nvidia-smi -q -d MEMORY 2>/dev/null | grep -A3 'BAR1' || true
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' || true
python3 -c 'import cupy; print("cupy", cupy.__version__)' || true
python3 -c 'import jax; print("jax", jax.__version__)' || true
cmake -S "$root" -B "$build" "${args[@]}"
cmake --build "$build" -j"$(nproc)"

status=0
ctest --test-dir "$build" -L gpu -LE gpu_alloc --output-on-failure -V || status=1
# Each allocator test starts its own CUDA contexts and takes a few GiB; the
# JAX preallocation tests lock each other out (see tests/gpu_alloc).
ctest --test-dir "$build" -L gpu_alloc -j"${REGCACHE_GPU_JOBS:-8}" --output-on-failure || status=1
echo "== tests/gpu_alloc, what each test printed of its result" \
     "(all output: $build/Testing/Temporary/LastTest.log)"
awk '/^[0-9]+\/[0-9]+ Testing: / { name = $3 }
     /^(alloc |devices |device [0-9]|budget |exhaustion |attribution: |skipped: |FAIL)/ {
         print name ": " $0 }' "$build/Testing/Temporary/LastTest.log"
# The hooks' CPU tests too: on this machine the real libcuda is also around.
ctest --test-dir "$build" -R '^(hook_|intercept)' --output-on-failure || status=1
exit $status
