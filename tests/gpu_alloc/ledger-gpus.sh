#!/bin/sh
# Four processes on each of two GPUs sharing each GPU's BAR1 budget through
# the ledger, on the real driver and NVML (ledger_gpus.py says what is
# checked):
#   ledger-gpus.sh WORKER REGCACHE_STAT [PYTHON]
# WORKER is ledger_gpu_worker.  Through alloc-test.sh in TAG_CHECK mode (no
# hook is needed): it clears the library's knobs from the caller's shell,
# keeps NCCL_NVLS_ENABLE=0, and skips (77) without an NVIDIA GPU or with
# fewer than two.
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/alloc-test.sh" "" tag_check 2 "${3:-python3}" "$here/ledger_gpus.py" "$1" "$2" 2 4
