"""Eager registration under PyTorch: a training-shaped loop (a model's
parameters, forward activations, gradients, the optimizer's state, and
empty_cache() now and then so that the allocator maps new memory, and a
new pinned host staging buffer each step, which PyTorch's host allocator
takes from cudaHostAlloc) on every GPU, with the PyTorch caching allocator
as it comes and with expandable segments (cuMemCreate + cuMemMap), eager
registration on and off; the cache takes host memory.  Each
tensor's first get is timed (regcache_get + regcache_put through ctypes) and
counted a hit when the cache's miss count did not move; a second get checks
the registration against the memory there now (gpu_backend.h).  Run by
gpu-test.sh under the preload hook:
    python3 test_torch_eager.py LIBREGCACHE GPU_BACKEND_LIB
The parent runs one child per allocator setting and eager setting and asks,
with eager registration on: at least 99% of first gets are hits, of pinned
buffers' too, no stale registration, no failure.  It prints first-get
latency median and p99 with eager registration on and off.
"""
import ctypes
import json
import os
import subprocess
import sys
import time

SKIP = 77
HOOKS = 2
STEPS = 24
EMPTY_EVERY = 6  # steps between empty_cache(): new memory for the allocator
WIDTH = 2048
LAYERS = 4
BATCH = 512
MIN_HIT_RATE = 0.99
PINNED_FLOATS = 1 << 18  # 1 MiB: a block of its own in the host allocator


def child(lib, gb_lib):
    regcache = ctypes.CDLL(lib)
    gb = ctypes.CDLL(gb_lib)
    gb.gb_stat.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    gb.gb_stat.restype = ctypes.c_longlong
    gb.gb_touch.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    regcache.regcache_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.POINTER(ctypes.c_void_p)]
    regcache.regcache_put.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    regcache.regcache_validation_mode.argtypes = [ctypes.c_void_p]
    regcache.regcache_strerror.restype = ctypes.c_char_p
    try:
        import torch
    except ImportError:
        print(json.dumps({"skip": "no PyTorch"}))
        return SKIP
    if not torch.cuda.is_available():
        print(json.dumps({"skip": "PyTorch sees no CUDA device"}))
        return SKIP
    torch.cuda.init()
    cache = ctypes.c_void_p()
    if gb.gb_create_driver(0, 0, ctypes.byref(cache)) != 0:
        print(json.dumps({"fail": "gb_create_driver failed"}))
        return 1
    mode = regcache.regcache_validation_mode(cache)
    gb.gb_report_stale_deregs(1)
    latencies, hits, firsts, stale, failures = [], 0, 0, 0, []
    pinned_firsts, pinned_hits = 0, 0
    entry = ctypes.c_void_p()

    def first_get(t):
        """Whether the first get of t was a hit."""
        nonlocal hits, firsts, stale
        if t is None or t.numel() == 0:
            return False
        ptr, size = t.data_ptr(), t.numel() * t.element_size()
        misses = gb.gb_stat(cache, b"misses")
        t0 = time.perf_counter_ns()
        rc = regcache.regcache_get(cache, ptr, size, ctypes.byref(entry))
        if rc == 0:
            regcache.regcache_put(cache, entry)
        latencies.append(time.perf_counter_ns() - t0)
        firsts += 1
        if rc != 0:
            failures.append("get of %#x+%d: %s" % (ptr, size, regcache.regcache_strerror(rc)))
            return False
        hit = gb.gb_stat(cache, b"misses") == misses
        hits += hit
        outcome = gb.gb_touch(cache, ptr, size)
        if outcome == 1:
            stale += 1
        elif outcome != 0:
            failures.append("checked get of %#x+%d: %d" % (ptr, size, outcome))
        return hit

    for dev in range(torch.cuda.device_count()):
        torch.cuda.set_device(dev)
        model = torch.nn.Sequential(*[m for _ in range(LAYERS) for m in
                                      (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())]).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        torch.cuda.synchronize()
        for p in model.parameters():
            first_get(p)
        staged = []  # kept, so that every step's buffer is a new allocation
        for step in range(STEPS):
            x = torch.randn(BATCH, WIDTH, device="cuda")
            staged.append(torch.empty(PINNED_FLOATS, pin_memory=True))
            y = model(x)
            loss = y.square().mean()
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            # What a data-parallel step sends: every gradient, and the
            # activations of pipeline stages.
            for t in [x, y] + [p.grad for p in model.parameters()]:
                first_get(t)
            pinned_firsts += 1
            pinned_hits += first_get(staged[-1])
            if step == 0:
                for state in opt.state.values():
                    for v in state.values():
                        if torch.is_tensor(v) and v.is_cuda:
                            first_get(v)
            opt.zero_grad(set_to_none=True)
            del x, y, loss
            if (step + 1) % EMPTY_EVERY == 0:
                torch.cuda.empty_cache()
        del model, opt, staged
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    stats = {name: gb.gb_stat(cache, name.encode()) for name in
             ("hits", "misses", "registrations", "prefetches", "prefetch_failures",
              "prefetch_dropped")}
    regcache.regcache_destroy(cache)
    latencies.sort()
    print(json.dumps({
        "torch": torch.__version__, "gpus": torch.cuda.device_count(),
        "mode": "HOOKS" if mode == HOOKS else mode, "firsts": firsts, "hits": hits,
        "pinned_firsts": pinned_firsts, "pinned_hits": pinned_hits,
        "stale": stale, "failures": failures[:5], "nfailures": len(failures),
        "median_us": latencies[len(latencies) // 2] / 1e3 if latencies else None,
        "p99_us": latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)] / 1e3
        if latencies else None,
        "stats": stats}))
    return 0


def parent(lib, gb_lib):
    status = 0
    for alloc_conf in ("", "expandable_segments:True"):
        results = {}
        for eager in (True, False):
            env = dict(os.environ, REGCACHE_TORCH_EAGER_CHILD="1", REGCACHE_HOST_MEMORY="1")
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if alloc_conf:
                env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
            env.pop("REGCACHE_EAGER_MIN_BYTES", None)
            if eager:
                env["REGCACHE_EAGER_MIN_BYTES"] = "64K"
            proc = subprocess.run([sys.executable, __file__, lib, gb_lib], env=env,
                                  stdout=subprocess.PIPE, text=True, timeout=500)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
            sys.stdout.write("".join(l + "\n" for l in proc.stdout.splitlines()
                                     if not l.startswith("{")))
            if proc.returncode == SKIP:
                print("skipped:", lines[-1] if lines else "")
                return SKIP
            if proc.returncode != 0 or not lines:
                print("FAIL child exited with %d" % proc.returncode)
                status = 1
                continue
            results[eager] = r = json.loads(lines[-1])
            name = "%s, eager %s" % (alloc_conf or "default allocator", "on" if eager else "off")
            rate = r["hits"] / r["firsts"] if r["firsts"] else 0
            pinned_rate = r["pinned_hits"] / r["pinned_firsts"] if r["pinned_firsts"] else 0
            print("[torch %s, %d GPUs, %s] %s: first gets %d, hits %d (%.2f%%), of pinned "
                  "buffers %d, hits %d, stale %d, failures %d, first-get latency median "
                  "%.1f us p99 %.1f us; stats %s" % (
                      r["torch"], r["gpus"], r["mode"], name, r["firsts"], r["hits"],
                      100 * rate, r["pinned_firsts"], r["pinned_hits"], r["stale"],
                      r["nfailures"], r["median_us"], r["p99_us"], r["stats"]))
            for f in r["failures"]:
                print("FAIL", name, f)
            if r["stale"] or r["nfailures"] or (eager and (rate < MIN_HIT_RATE or
                                                           pinned_rate < MIN_HIT_RATE)):
                print("FAIL", name)
                status = 1
        if len(results) == 2:
            print("first-get latency, %s: eager on median %.1f us p99 %.1f us; "
                  "off median %.1f us p99 %.1f us" % (
                      alloc_conf or "default allocator", results[True]["median_us"],
                      results[True]["p99_us"], results[False]["median_us"],
                      results[False]["p99_us"]))
    return status


if __name__ == "__main__":
    if os.environ.get("REGCACHE_TORCH_EAGER_CHILD"):
        sys.exit(child(sys.argv[1], sys.argv[2]))
    sys.exit(parent(sys.argv[1], sys.argv[2]))
