#!/bin/sh
# Run a GPU test program in one of the ways a process learns of CUDA frees:
#   gpu-test.sh preload:HOOK PROGRAM [ARGS...]    libregcache-hook.so (HOOK)
#                                                 in LD_PRELOAD
#   gpu-test.sh linked-init-first PROGRAM [...]   no preload: the library is
#   gpu-test.sh linked-cache-first PROGRAM [...]  only linked and patches
#                                                 libcuda in-process, its first
#                                                 cache created after CUDA is
#                                                 initialised, or before
#                                                 (GB_CACHE_FIRST=1, see
#                                                 gpu_backend.h)
# Exits 77 (skipped) where there is no NVIDIA GPU, so that CPU machines can
# configure and run every label.
mode=$1
shift
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skipped: no NVIDIA GPU or driver (nvidia-smi -L failed)"
    exit 77
fi
case $mode in
preload:*)
    LD_PRELOAD=${mode#preload:} exec "$@" ;;
linked-init-first)
    unset LD_PRELOAD GB_CACHE_FIRST
    exec "$@" ;;
linked-cache-first)
    unset LD_PRELOAD
    GB_CACHE_FIRST=1 exec "$@" ;;
*)
    echo "gpu-test.sh: unknown mode $mode" >&2
    exit 2 ;;
esac
