#!/bin/sh
# Run a GPU test program with the hook preloaded:
#   gpu-test.sh HOOK PROGRAM [ARGS...]
# Exits 77 (skipped) where there is no NVIDIA GPU, so that CPU machines can
# configure and run every label.
hook=$1
shift
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skipped: no NVIDIA GPU or driver (nvidia-smi -L failed)"
    exit 77
fi
LD_PRELOAD=$hook exec "$@"
