"""Both hooks under PyTorch: its caching allocator frees with cudaFree only on
torch.cuda.empty_cache(); each such free must reach the cache (through the
preload hook, or through the in-process interception of the linked library)
while the memory is still valid, and entries of memory PyTorch still holds
must stay.  Run by gpu-test.sh in each way:
    python3 test_torch.py LIBREGCACHE GPU_BACKEND_LIB
With GB_CACHE_FIRST set, a cache exists before torch is imported.
"""
import ctypes
import sys

SKIP = 77
HOOKS = 2
SIZE = 8 << 20


def main():
    regcache = ctypes.CDLL(sys.argv[1])
    gb = ctypes.CDLL(sys.argv[2])
    for name in ("gb_regs", "gb_deregs", "gb_deregs_valid", "gb_deregs_stale", "gb_queries"):
        getattr(gb, name).restype = ctypes.c_long
    gb.gb_touch.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    regcache.regcache_validation_mode.argtypes = [ctypes.c_void_p]
    regcache.regcache_validation_reason.argtypes = [ctypes.c_void_p]
    regcache.regcache_validation_reason.restype = ctypes.c_char_p
    if gb.gb_cache_first() != 0:
        return 1
    try:
        import torch
    except ImportError:
        print("skipped: no PyTorch")
        return SKIP
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return SKIP
    torch.cuda.init()
    try:
        active = ctypes.CDLL(None).regcache_hook_active()
    except AttributeError:  # no hook in the process
        active = None

    cache = ctypes.c_void_p()
    assert gb.gb_create(0, 0, ctypes.byref(cache)) == 0
    mode = regcache.regcache_validation_mode(cache)
    failures = []
    if mode != HOOKS:
        reason = regcache.regcache_validation_reason(cache).decode()
        failures.append(f"validation mode {mode}, not HOOKS (hook active={active}): {reason}")

    deregs0, valid0 = gb.gb_deregs(), gb.gb_deregs_valid()
    queries_on_hits = 0
    hits = 0
    for rnd in range(3):
        tensors = [torch.empty(SIZE, dtype=torch.uint8, device="cuda") for _ in range(4)]
        regs = gb.gb_regs()
        for t in tensors:
            assert gb.gb_touch(cache, t.data_ptr(), SIZE) == 0
        if gb.gb_regs() == regs:
            failures.append(f"round {rnd}: no registration (stale hit)")
        q = gb.gb_queries()
        for _ in range(10):
            for t in tensors:
                assert gb.gb_touch(cache, t.data_ptr(), SIZE) == 0
                hits += 1
        queries_on_hits += gb.gb_queries() - q
        before = gb.gb_deregs()
        del tensors, t
        torch.cuda.synchronize()
        # Still PyTorch's memory: nothing may go.
        if gb.gb_deregs() != before:
            failures.append(f"round {rnd}: deregs on del, before empty_cache")
        torch.cuda.empty_cache()
        if gb.gb_deregs() == before:
            failures.append(f"round {rnd}: empty_cache freed nothing the cache saw")

    deregs = gb.gb_deregs() - deregs0
    valid = gb.gb_deregs_valid() - valid0
    regs = gb.gb_regs()
    if deregs != regs:
        failures.append(f"{regs} registrations but {deregs} deregs")
    if valid != deregs:
        failures.append(f"{deregs - valid} of {deregs} deregs saw a stale buffer id")
    if queries_on_hits:
        failures.append(f"{queries_on_hits} queries during {hits} hits")
    print(f"[torch {torch.__version__}] hook_active={active} mode={'HOOKS' if mode == HOOKS else mode} "
          f"regs={regs} deregs={deregs} valid_at_dereg={valid} stale={deregs - valid} "
          f"hits={hits} queries_on_hits={queries_on_hits} "
          f"{'FAIL' if failures else 'ok'}")
    for f in failures:
        print("FAIL", f)
    regcache.regcache_destroy(cache)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
