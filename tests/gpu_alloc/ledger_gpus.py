#!/usr/bin/env python3
"""Several processes per GPU sharing each GPU's BAR1 budget through the
ledger, on the real driver with a real NVML reading (run by ledger-gpus.sh,
which sets the namespace and skips without enough GPUs).

    ledger_gpus.py WORKER REGCACHE_STAT GPUS PROCS

PROCS ledger_gpu_worker processes on each of GPUS GPUs.  The first on each
GPU starts alone, so that its NVML reading becomes the GPU's budget; then
the others.  Each fills about 110 % of a fair share (budget / PROCS), one
process after another, so that the last ones on a GPU find it full and
raise pressure; then every process puts once (answering that pressure).
regcache-stat --json must then show, per GPU: PROCS live caches, those
processes; the budget the first process read, which is NVML's free BAR1
less the reserve (nvidia-smi's reading, printed beside it); every cache's
bytes, entries and budget as the process says them, its bytes within its
budget plus what it holds; the GPU's bytes within the budget plus what is
held; and pressure raised.  Prints one line per GPU and exits 0 when all
held, 1 otherwise, 77 when NVML gave no reading.
"""
import glob
import json
import os
import re
import subprocess
import sys

MIB = 1 << 20


class Worker:
    def __init__(self, program, gpu, procs):
        self.gpu = gpu
        self.proc = subprocess.Popen([program, str(gpu), str(procs)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        ready = self.answer("ready")
        self.pid, self.key, self.reading = ready["pid"], ready["key"], ready["reading"]
        self.stats = None

    def answer(self, expect):
        """The next line that starts with `expect`, as a dict; what the
        checking backend prints on the way (notes) is passed on."""
        while True:
            line = self.proc.stdout.readline()
            words = line.split()
            if words and words[0] == expect:
                return {k: (v if k == "key" else int(v))
                        for k, v in (w.split("=", 1) for w in words[1:])}
            if not words or words[0] == "error":
                raise SystemExit("FAIL worker on GPU %d: %r" % (self.gpu, line))
            print("  worker on GPU %d: %s" % (self.gpu, line.rstrip()))

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.stats = self.answer("stats")
        return self.stats

    def stop(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it is gone already: its status says how
        for line in self.proc.stdout:
            print("  worker on GPU %d: %s" % (self.gpu, line.rstrip()))
        return self.proc.wait()


def nvml_bar1(uuid):
    """BAR1 (total, free) in MiB as nvidia-smi reads them from NVML, or None.
    By UUID: nvidia-smi numbers GPUs in PCI order, CUDA fastest first."""
    try:
        out = subprocess.run(["nvidia-smi", "-q", "-d", "MEMORY", "-i", uuid],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    m = re.search(r"BAR1 Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB\s*\n"
                  r"(?:.*\n)*?\s*Free\s*:\s*(\d+) MiB", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def shared_budget_environment():
    """A namespace of this run's own, and a budget that is NVML's."""
    for v in ("REGCACHE_BAR1_BYTES", "REGCACHE_LEDGER", "REGCACHE_MAX_BYTES"):
        if os.environ.pop(v, None) is not None:
            print("note: ignoring %s from the environment" % v)
    os.environ.setdefault("REGCACHE_LEDGER_NAMESPACE", "gpus%d" % os.getpid())
    return "/dev/shm/regcache-%d.%s-*" % (os.geteuid(), os.environ["REGCACHE_LEDGER_NAMESPACE"])


def main():
    program, stat, gpus, procs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    segments = shared_budget_environment()
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("FAIL " + what)

    workers = {g: [] for g in range(gpus)}
    try:
        # The first process on each GPU alone: its reading is the GPU's budget.
        for g in range(gpus):
            workers[g].append(Worker(program, g, procs))
        expected = {}
        for g in range(gpus):
            first = workers[g][0]
            if first.reading == 0:
                print("skipped: no BAR1 reading from NVML on GPU %d (libnvidia-ml.so.1)" % g)
                return 77
            bar1 = nvml_bar1(first.key)
            if bar1:
                total, free = bar1
                reserve = max(total // 10, 32)
                expected[g] = free - reserve
                print("GPU %d %s: nvidia-smi BAR1 total %d MiB, free %d MiB, reserve %d MiB -> "
                      "%d MiB; the first process read %d MiB"
                      % (g, first.key, total, free, reserve, free - reserve, first.reading // MIB))
        for g in range(gpus):
            for _ in range(1, procs):
                workers[g].append(Worker(program, g, procs))
        for i in range(procs):
            for g in range(gpus):
                workers[g][i].ask("fill")
        for g in range(gpus):
            for w in workers[g]:
                w.ask("put")

        run = subprocess.run([stat, "--json"], capture_output=True, text=True)
        check(run.returncode == 0, "regcache-stat --json exited %d: %s"
              % (run.returncode, run.stderr))
        doc = json.loads(run.stdout)
        by_key = {gpu.get("gpu"): gpu for gpu in doc["gpus"]}
        check(len(doc["gpus"]) == gpus, "%d ledgers in the namespace, %d GPUs used"
              % (len(doc["gpus"]), gpus))
        for g in range(gpus):
            ws = workers[g]
            key = ws[0].key
            failed_before = len(failures)
            check(all(w.key == key for w in ws), "GPU %d named differently by its processes" % g)
            gpu = by_key.get(key)
            check(gpu is not None, "no ledger for GPU %d (%s)" % (g, key))
            if gpu is None:
                continue
            budget = gpu["budget"]
            caches = {c["pid"]: c for c in gpu["caches"]}
            check(len(gpu["caches"]) == procs and set(caches) == {w.pid for w in ws},
                  "GPU %s: caches of pids %s, processes %s"
                  % (key, sorted(caches), sorted(w.pid for w in ws)))
            check(budget == ws[0].reading, "GPU %s: budget %d, the first process read %d"
                  % (key, budget, ws[0].reading))
            if g in expected:
                check(abs(budget // MIB - expected[g]) <= 64,
                      "GPU %s: budget %d MiB, NVML's free BAR1 less the reserve %d MiB"
                      % (key, budget // MIB, expected[g]))
            share = budget // procs
            held = sum(w.stats["held"] for w in ws)
            total = 0
            for w in ws:
                c, s = caches.get(w.pid), w.stats
                if c is None:
                    continue
                total += c["bytes"]
                print("  pid %d: %d MiB in %d entries, budget %d MiB (share %d MiB), "
                      "%d evictions" % (w.pid, c["bytes"] // MIB, c["entries"],
                                        c["budget"] // MIB, share // MIB, s["evictions"]))
                check(c["state"] == "live", "pid %d: state %s" % (w.pid, c["state"]))
                for field in ("bytes", "entries", "budget"):
                    check(c[field] == s[field], "pid %d: regcache-stat %s %d, the process %d"
                          % (w.pid, field, c[field], s[field]))
                check(c["bytes"] <= c["budget"] + s["held"],
                      "pid %d: %d bytes over its budget %d" % (w.pid, c["bytes"], c["budget"]))
                check(c["budget"] >= share, "pid %d: budget %d below an even split %d"
                      % (w.pid, c["budget"], share))
                # Evicted to its share in entries of at most 2 GiB.
                check(c["bytes"] > share - 2 * 2048 * MIB, "pid %d: %d MiB, far below its share"
                      % (w.pid, c["bytes"] // MIB))
            check(gpu["in_use"] == total, "GPU %s: in use %d, the caches' sum %d"
                  % (key, gpu["in_use"], total))
            check(total <= budget + held, "GPU %s: %d MiB registered, budget %d MiB + held %d MiB"
                  % (key, total // MIB, budget // MIB, held // MIB))
            check(gpu["pressure"] > 0 and sum(w.stats["evictions"] for w in ws) > 0,
                  "GPU %s: no pressure (%d) or no eviction, although the processes asked for "
                  "110 %% of the budget" % (key, gpu["pressure"]))
            print("ledger %s: %d processes, budget %d MiB, held %d MiB, sum %d MiB, pressure "
                  "raised %d times %s" % (key, len(gpu["caches"]), budget // MIB, held // MIB,
                                          total // MIB, gpu["pressure"],
                                          "ok" if len(failures) == failed_before else "FAIL"))
    finally:
        for g in workers:
            for w in workers[g]:
                check(w.stop() == 0, "worker pid %d on GPU %d did not exit 0" % (w.pid, g))
        for path in glob.glob(segments):
            os.unlink(path)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
