#!/bin/sh
# Run one test of tests/gpu_alloc in one validation mode:
#   alloc-test.sh HOOK MODE GPUS PROGRAM [ARGS...]
# HOOK is libregcache-hook.so, GPUS the number of GPUs the test needs.  Exits
# 77 (skipped) without an NVIDIA GPU or with fewer than GPUS of them.
#
# A mode sets the environment the program runs in and tells alloc_churn.py
# what to expect (REGCACHE_ALLOC_*).  Another mode (the hook linked instead
# of preloaded, say) is one more case below and one more name in the mode
# list of CMakeLists.txt.
hook=$1 mode=$2 gpus=$3
shift 3

# The library's knobs from the caller's shell would change what the tests
# check; a mode sets what it needs.
for v in REGCACHE_METHOD REGCACHE_VALIDATION REGCACHE_ALIGNMENT REGCACHE_MAX_BYTES \
         REGCACHE_MAX_ENTRIES REGCACHE_WHOLE_ALLOCATION REGCACHE_HOST_MEMORY; do
    eval "value=\${$v-}"
    [ -z "$value" ] || echo "note: ignoring $v=$value from the environment"
    unset "$v"
done
# The 2-GPU machines need NVLink multicast off should a framework start NCCL.
export NCCL_NVLS_ENABLE=0

case $mode in
hooks)
    # AUTO must come out as HOOKS: the hook is preloaded and live, and every
    # free reaches the cache before the memory goes.
    export LD_PRELOAD="$hook" REGCACHE_ALLOC_MODE=HOOKS REGCACHE_ALLOC_VALIDATION=HOOKS \
           REGCACHE_ALLOC_DEREG_CHECK=1 ;;
linked)
    # No preload: the library, loaded after the framework initialised CUDA,
    # patches libcuda in-process; AUTO must still come out as HOOKS, and
    # every free must reach the cache before the memory goes.
    unset LD_PRELOAD
    export REGCACHE_ALLOC_MODE=LINKED REGCACHE_ALLOC_VALIDATION=HOOKS \
           REGCACHE_ALLOC_DEREG_CHECK=1 ;;
tag_check)
    # No hook: every hit re-reads the buffer id.  Entries of freed memory
    # are deregistered only when a get or an eviction meets them, after the
    # free, so deregs are not checked.
    unset LD_PRELOAD
    export REGCACHE_VALIDATION=tag_check REGCACHE_ALLOC_MODE=TAG_CHECK \
           REGCACHE_ALLOC_VALIDATION=TAG_CHECK REGCACHE_ALLOC_DEREG_CHECK=0 ;;
*)
    echo "alloc-test.sh: unknown mode '$mode' (known: hooks, linked, tag_check)" >&2
    exit 2 ;;
esac

if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skipped: no NVIDIA GPU or driver (nvidia-smi -L failed)"
    exit 77
fi
found=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$found" -lt "$gpus" ]; then
    echo "skipped: needs $gpus GPUs, nvidia-smi lists $found"
    exit 77
fi
exec "$@"
