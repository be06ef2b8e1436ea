"""Real GPU allocators under churn, every registration the cache serves checked.

    alloc-test.sh HOOK MODE GPUS python3 alloc_churn.py --variant VARIANT --gpus N \\
        LIBREGCACHE GPU_BACKEND_LIB

One allocator (VARIANTS) allocates random sizes, a few bytes to tens of MiB, on
devices 0..N-1, frees, trims its cache, and regcache gets random sub-ranges of
what is live, each followed by a put.  The registration backend
(tests/gpu_hook/gpu_backend.c) records the memory under every registration;
each get compares the memory its request covers now (the buffer id of every
allocation or VMM mapping in it) with what the served registration was made
for, and the device the registration was attributed to with the device the
framework put the memory on, while a random context is current (another GPU's,
or the framework's own).

alloc-test.sh sets the mode's environment and what to expect of it:
  REGCACHE_ALLOC_MODE         the mode's name in the summary (HOOKS, LINKED, TAG_CHECK)
  REGCACHE_ALLOC_VALIDATION   the validation the cache must resolve AUTO to
  REGCACHE_ALLOC_DEREG_CHECK  1: every dereg must come while the memory is still
                              the registered one
The workload (defaults in brackets):
  REGCACHE_ALLOC_OPS [3000, or 300 with REGCACHE_ALLOC_QUICK=1]
  REGCACHE_ALLOC_MAX_MIB [32]    largest allocation
  REGCACHE_ALLOC_LIVE_MIB [1024] live bytes per device
  REGCACHE_ALLOC_SEED [from the clock; printed, so a failing run can be repeated]

Prints one line `alloc VARIANT MODE gpus=N: gets=... stale=S failures=F ... ok`
and exits 0 when every check held, 1 when one did not (each said on a FAIL
line), 77 (skipped) when the framework cannot be imported or sees fewer than N
devices.
"""
import argparse
import collections
import ctypes
import math
import os
import random
import sys
import time
import traceback

SKIP = 77
MIB = 1 << 20
VALIDATION_NAMES = {1: "TAG_CHECK", 2: "HOOKS"}

# gpu_backend.h
SERVED, STALE, WRONG_DEVICE, REFUSED, FAILED, UNCHECKABLE = range(6)
CURRENT_KEEP = -1
KIND_NAMES = ("none", "cuMemAlloc", "pool", "VMM", "host", "managed")
MALLOC, POOL, VMM = 1, 2, 3

MAX_MESSAGES = 20


class Skip(Exception):
    """The run cannot happen here; the message says why."""


def import_or_skip(module, framework):
    try:
        return __import__(module)
    except (ImportError, OSError) as e:
        raise Skip(f"{framework} is not importable: {e!r}")


def set_env(env):
    """Before the framework's import: allocator settings are read once."""
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class Torch:
    """PyTorch's CUDA caching allocator, configured by PYTORCH_CUDA_ALLOC_CONF."""

    def __init__(self, conf):
        self.conf = conf

    def open(self):
        # Newer releases read PYTORCH_ALLOC_CONF before the older name: set both.
        set_env({"PYTORCH_CUDA_ALLOC_CONF": self.conf, "PYTORCH_ALLOC_CONF": self.conf})
        self.torch = torch = import_or_skip("torch", "PyTorch")
        if not torch.cuda.is_available():
            raise Skip("PyTorch sees no CUDA device")
        return torch.cuda.device_count()

    def describe(self):
        t = self.torch
        return (f"torch {t.__version__} (CUDA {t.version.cuda}), allocator backend "
                f"{t.cuda.get_allocator_backend()}, PYTORCH_CUDA_ALLOC_CONF={self.conf}")

    def alloc(self, device, size):
        t = self.torch.empty(size, dtype=self.torch.uint8, device=f"cuda:{device}")
        self.torch.cuda.synchronize(device)
        return t, t.data_ptr()

    def free(self, obj):
        pass  # the last reference going frees it

    def trim(self, device):
        self.torch.cuda.synchronize(device)
        with self.torch.cuda.device(device):
            self.torch.cuda.empty_cache()
        return True


class CuPy:
    """CuPy's default memory pool (cudaMalloc) or its stream-ordered pool."""

    def __init__(self, async_pool):
        self.async_pool = async_pool

    def open(self):
        self.cupy = cupy = import_or_skip("cupy", "CuPy")
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError as e:
            raise Skip(f"CuPy sees no CUDA device: {e}")
        if self.async_pool:
            self.pool = cupy.cuda.MemoryAsyncPool()
        else:
            self.pool = cupy.get_default_memory_pool()
        cupy.cuda.set_allocator(self.pool.malloc)
        return count

    def describe(self):
        return f"cupy {self.cupy.__version__}, {type(self.pool).__name__}"

    def alloc(self, device, size):
        dev = self.cupy.cuda.Device(device)
        with dev:
            a = self.cupy.empty(size, dtype=self.cupy.uint8)
            dev.synchronize()
        return a, a.data.ptr

    def free(self, obj):
        pass  # back to the pool when the last reference goes

    def trim(self, device):
        dev = self.cupy.cuda.Device(device)
        with dev:
            dev.synchronize()
            self.pool.free_all_blocks()  # the current device's pool
        return True


class Jax:
    """JAX/XLA's allocator, configured by XLA_PYTHON_CLIENT_* variables."""

    def __init__(self, env):
        self.env = env

    def open(self):
        set_env(self.env)
        self.jax = jax = import_or_skip("jax", "JAX")
        self.numpy = import_or_skip("numpy", "NumPy (for JAX)")
        try:
            devices = jax.devices("gpu")
        except RuntimeError as e:
            raise Skip(f"JAX has no GPU backend: {e}")
        # JAX numbers devices its own way; the CUDA ordinal is what the
        # cache reports.
        self.by_ordinal = {}
        for d in devices:
            ordinal = getattr(d, "local_hardware_id", None)
            self.by_ordinal[d.id if ordinal is None else ordinal] = d
        return len(devices)

    def describe(self):
        settings = " ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in sorted(self.env))
        return f"jax {self.jax.__version__} on {self.jax.devices('gpu')[0].device_kind}, {settings}"

    def alloc(self, device, size):
        # device_put of host memory: a jnp constructor would compile once per size.
        x = self.jax.device_put(self.numpy.empty(size, self.numpy.uint8), self.by_ordinal[device])
        x.block_until_ready()
        return x, self.pointer(x)

    @staticmethod
    def pointer(x):
        try:
            return x.unsafe_buffer_pointer()
        except Exception as first:  # an API JAX may drop; the interface stays
            try:
                return x.__cuda_array_interface__["data"][0]
            except Exception as second:
                raise RuntimeError(f"no device pointer from a JAX array: {first!r}; {second!r}")

    def free(self, obj):
        obj.delete()

    def trim(self, device):
        return False  # JAX has no call that gives cached memory back


# name: (allocator, the memory kind it must hand out, or None where the
# framework's internals decide and the run only reports what it saw)
VARIANTS = {
    "torch-default": (lambda: Torch("expandable_segments:False"), MALLOC),
    "torch-expandable": (lambda: Torch("expandable_segments:True"), VMM),
    "torch-async": (lambda: Torch("backend:cudaMallocAsync"), POOL),
    "cupy-default": (lambda: CuPy(async_pool=False), MALLOC),
    "cupy-async": (lambda: CuPy(async_pool=True), POOL),
    # Half of each GPU rather than the default three quarters: other tests
    # run beside this one.
    "jax-prealloc": (lambda: Jax({"XLA_PYTHON_CLIENT_PREALLOCATE": "true",
                                  "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5",
                                  "XLA_PYTHON_CLIENT_ALLOCATOR": None}), None),
    "jax-noprealloc": (lambda: Jax({"XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                                    "XLA_PYTHON_CLIENT_MEM_FRACTION": None,
                                    "XLA_PYTHON_CLIENT_ALLOCATOR": None}), None),
    "jax-platform": (lambda: Jax({"XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                                  "XLA_PYTHON_CLIENT_MEM_FRACTION": None,
                                  "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}), None),
}


def env_int(name, default):
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def load_libraries(libregcache, libbackend):
    rc = ctypes.CDLL(libregcache)
    gb = ctypes.CDLL(libbackend)
    rc.regcache_validation_mode.argtypes = [ctypes.c_void_p]
    rc.regcache_destroy.argtypes = [ctypes.c_void_p]
    rc.regcache_strerror.restype = ctypes.c_char_p
    rc.regcache_last_error.restype = ctypes.c_char_p
    gb.gb_create_driver.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    gb.gb_checked_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                                  ctypes.c_size_t]
    gb.gb_memory_kind.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_ulonglong)]
    gb.gb_stat.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    gb.gb_stat.restype = ctypes.c_longlong
    for name in ("gb_regs", "gb_deregs", "gb_deregs_valid", "gb_regs_on"):
        getattr(gb, name).restype = ctypes.c_long
    gb.gb_regs_on.argtypes = [ctypes.c_int]
    return rc, gb


class Buffer:
    __slots__ = ("obj", "ptr", "size", "device")

    def __init__(self, obj, ptr, size, device):
        self.obj, self.ptr, self.size, self.device = obj, ptr, size, device


class Churn:
    """The workload and its tallies; one cache, one allocator, N devices."""

    def __init__(self, label, fw, expect_kind, gb, cache, devices, rng):
        self.label, self.fw, self.expect_kind = label, fw, expect_kind
        self.gb, self.cache, self.devices, self.rng = gb, cache, devices, rng
        self.max_size = env_int("REGCACHE_ALLOC_MAX_MIB", 32) * MIB
        self.live_cap = env_int("REGCACHE_ALLOC_LIVE_MIB", 1024) * MIB
        self.live = []
        self.count = collections.Counter()
        self.outcomes = collections.Counter()
        self.kinds = collections.Counter()
        self.errors = collections.Counter()
        self.ids = {}  # address -> buffer id of the last allocation there
        self.messages = 0
        self.msg = ctypes.create_string_buffer(2048)
        self.status = ctypes.c_int()

    def say(self, text):
        self.messages += 1
        if self.messages <= MAX_MESSAGES:
            print(f"[{self.label}] {text}", flush=True)

    def log_uniform(self, top):
        return max(1, int(math.exp(self.rng.uniform(0, math.log(top)))))

    def alloc(self, device, size):
        mine = [b for b in self.live if b.device == device]
        while mine and (len(mine) >= 256 or
                        sum(b.size for b in mine) + size > self.live_cap):
            self.free(mine.pop(self.rng.randrange(len(mine))))
        obj, ptr = self.fw.alloc(device, size)
        buf = Buffer(obj, ptr, size, device)
        self.live.append(buf)
        self.count["allocs"] += 1
        bid = ctypes.c_ulonglong()
        kind = self.gb.gb_memory_kind(ptr, ctypes.byref(bid))
        self.kinds[KIND_NAMES[kind]] += 1
        if self.expect_kind is not None and kind != self.expect_kind:
            self.count["wrong_kind"] += 1
            self.say(f"WRONG KIND: {size} bytes at {ptr:#x} are {KIND_NAMES[kind]} memory, "
                     f"not {KIND_NAMES[self.expect_kind]}: the allocator setting did not take")
        # The case a cache must not get wrong: same address, other memory.
        if self.ids.get(ptr, bid.value) != bid.value:
            self.count["readdressed"] += 1
        self.ids[ptr] = bid.value
        return buf

    def free(self, buf):
        self.live.remove(buf)
        self.fw.free(buf.obj)
        buf.obj = None  # a Buffer kept elsewhere must not keep the memory
        self.count["frees"] += 1

    def get(self, buf, offset, length):
        # Another GPU's context current, or the framework's own: the
        # registration must name the memory's device.  (No context at all is
        # test_devices.c's part.)
        current = self.rng.choice([CURRENT_KEEP] + self.devices)
        outcome = self.gb.gb_checked_get(self.cache, buf.ptr + offset, length, buf.device,
                                         current, ctypes.byref(self.status), self.msg,
                                         len(self.msg))
        self.count["gets"] += 1
        self.outcomes[outcome] += 1
        if outcome != SERVED:
            if outcome == FAILED:
                self.errors[self.status.value] += 1
            self.say(self.msg.value.decode(errors="replace"))

    def random_get(self):
        buf = self.rng.choice(self.live)
        if self.rng.random() < 0.2:
            self.get(buf, 0, buf.size)
        else:
            offset = self.rng.randrange(buf.size)
            self.get(buf, offset, self.log_uniform(buf.size - offset))

    def trim(self, device):
        """Half of the device's buffers go, the allocator gives its cache back,
        and as many new ones of the same sizes come: likely at the addresses
        just freed, now other memory."""
        mine = [b for b in self.live if b.device == device]
        gone = self.rng.sample(mine, len(mine) // 2)
        for buf in gone:
            self.free(buf)
        if self.fw.trim(device):
            self.count["trims"] += 1
        for buf in gone:
            self.get(self.alloc(device, buf.size), 0, buf.size)

    def run(self, ops):
        for _ in range(ops):
            r = self.rng.random()
            if not self.live or r < 0.30:
                self.alloc(self.rng.choice(self.devices), self.log_uniform(self.max_size))
            elif r < 0.50:
                self.free(self.rng.choice(self.live))
            elif r < 0.508:
                self.trim(self.rng.choice(self.devices))
            else:
                for _ in range(self.rng.randint(1, 4)):
                    self.random_get()

    def release(self):
        while self.live:
            self.free(self.live[-1])
        for d in self.devices:
            self.fw.trim(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", required=True, choices=sorted(VARIANTS))
    ap.add_argument("--gpus", type=int, required=True, choices=(1, 2))
    ap.add_argument("libregcache")
    ap.add_argument("libbackend")
    args = ap.parse_args()
    try:
        mode = os.environ["REGCACHE_ALLOC_MODE"]
        expect_validation = os.environ["REGCACHE_ALLOC_VALIDATION"]
        dereg_check = os.environ["REGCACHE_ALLOC_DEREG_CHECK"] == "1"
    except KeyError as e:
        print(f"{e} is not set: run this through tests/gpu_alloc/alloc-test.sh", file=sys.stderr)
        return 2
    label = f"alloc {args.variant} {mode} gpus={args.gpus}"
    make, expect_kind = VARIANTS[args.variant]
    fw = make()
    try:
        count = fw.open()
        if count < args.gpus:
            raise Skip(f"gpus={args.gpus} needs {args.gpus} CUDA devices; "
                       f"the framework sees {count}")
    except Skip as e:
        print(f"skipped: {label}: {e}")
        return SKIP

    rc, gb = load_libraries(args.libregcache, args.libbackend)
    gb.gb_report_stale_deregs(int(dereg_check))
    cache = ctypes.c_void_p()
    status = gb.gb_create_driver(0, 0, ctypes.byref(cache))  # AUTO: the mode's environment decides
    if status != 0:
        print(f"FAIL [{label}] regcache_create: {rc.regcache_strerror(status).decode()}: "
              f"{rc.regcache_last_error().decode()}")
        return 1
    validation = VALIDATION_NAMES.get(rc.regcache_validation_mode(cache), "?")
    try:
        hook_active = ctypes.CDLL(None).regcache_hook_active()
    except AttributeError:
        hook_active = "no hook in the process"
    try:
        described = fw.describe()
    except Exception as e:  # a missing version attribute must not stop the run
        described = f"(cannot describe the framework: {e!r})"
    seed = env_int("REGCACHE_ALLOC_SEED", time.time_ns() % 1000000)
    quick = os.environ.get("REGCACHE_ALLOC_QUICK") == "1"
    ops = env_int("REGCACHE_ALLOC_OPS", 300 if quick else 3000)
    print(f"[{label}] {described}; validation {validation}, hook active {hook_active}, "
          f"seed {seed}, {ops} operations", flush=True)

    problems = []
    churn = Churn(label, fw, expect_kind, gb, cache, list(range(args.gpus)), random.Random(seed))
    start = time.monotonic()
    try:
        churn.run(ops)
    except Exception as e:  # still summarise: the tallies so far say how far it got
        traceback.print_exc()
        problems.append(f"the workload raised {e!r}")
    stat = {name: gb.gb_stat(cache, name.encode()) for name in (
        "hits", "misses", "registrations", "evictions", "invalidations_tag",
        "invalidations_notify")}
    # Before the framework lets go of anything: what is still cached is
    # deregistered while its memory lives.
    rc.regcache_destroy(cache)
    seconds = time.monotonic() - start
    regs, deregs, valid = gb.gb_regs(), gb.gb_deregs(), gb.gb_deregs_valid()
    per_device = ",".join(f"{d}:{gb.gb_regs_on(d)}" for d in churn.devices)
    try:
        churn.release()
    except Exception as e:
        traceback.print_exc()
        problems.append(f"freeing what was left raised {e!r}")

    o, c = churn.outcomes, churn.count
    failures = o[FAILED] + o[UNCHECKABLE]
    if validation != expect_validation:
        problems.append(f"the cache validates in {validation} mode, not {expect_validation} "
                        f"(hook active: {hook_active})")
    if o[STALE]:
        problems.append(f"{o[STALE]} gets served by a registration of other memory")
    if failures:
        by_error = ", ".join(f"{rc.regcache_strerror(s).decode()} ({s}) x{n}"
                             for s, n in churn.errors.most_common())
        problems.append(f"{o[FAILED]} failed gets ({by_error}), {o[UNCHECKABLE]} the driver "
                        f"could not check")
    if o[WRONG_DEVICE]:
        problems.append(f"{o[WRONG_DEVICE]} registrations attributed to the wrong device")
    if c["wrong_kind"]:
        problems.append(f"{c['wrong_kind']} allocations of another memory kind than "
                        f"{KIND_NAMES[expect_kind]}")
    if regs != stat["registrations"]:
        problems.append(f"the backend made {regs} registrations, the cache counts "
                        f"{stat['registrations']}")
    if deregs != regs:
        problems.append(f"{regs - deregs} registrations left after regcache_destroy")
    if dereg_check and valid != deregs:
        problems.append(f"{deregs - valid} of {deregs} deregs came after the memory changed")
    if o[SERVED] == 0:
        problems.append("no get was served: the run checked nothing")
    print(f"{label}: gets={c['gets']} hits={stat['hits']} misses={stat['misses']} regs={regs} "
          f"deregs={deregs} valid_at_dereg={valid} stale={o[STALE]} failures={failures} "
          f"wrong_device={o[WRONG_DEVICE]} refused={o[REFUSED]} evictions={stat['evictions']} "
          f"inval_tag={stat['invalidations_tag']} inval_notify={stat['invalidations_notify']} "
          f"allocs={c['allocs']} frees={c['frees']} trims={c['trims']} "
          f"readdressed={c['readdressed']} "
          f"kinds={','.join(f'{k}:{n}' for k, n in sorted(churn.kinds.items()))} "
          f"regs_per_device={per_device} seed={seed} time={seconds:.1f}s "
          f"{'FAIL' if problems else 'ok'}", flush=True)
    for p in problems:
        print(f"FAIL [{label}] {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
