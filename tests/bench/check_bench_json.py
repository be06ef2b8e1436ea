#!/usr/bin/env python3
"""Run regcache-bench --quick, check its JSON, then judge it with report.py.

    check_bench_json.py BENCH OUT.json REPORT.py

Checks what the harness and the report promise, never a timing: the file is
JSON, the machine is described, every row has a figure (median, p99) or a
note saying why not, no timed loop failed its own check ("invalid:" notes),
every workload ran on the CPU, what could not run is listed as skipped with
a reason, and the report ends with every goal and a verdict.
"""
import json
import subprocess
import sys

WORKLOADS = {"hits", "threads", "churn", "invalidation", "misses", "ucx", "linked", "pins",
             "host_ranges"}
CPU_WORKLOADS = WORKLOADS - {"ucx", "linked", "pins"}
THREADS = [1, 2, 4, 8, 16, 24, 32]
GOALS = 26


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check_rows(rows):
    for row in rows:
        name = "%s %s %s" % (row.get("workload"), row.get("source"), row.get("what"))
        if row.get("workload") not in WORKLOADS or row.get("source") not in ("null", "cuda"):
            fail("row %s: unknown workload or source" % name)
        if row["note"].startswith("invalid:"):
            fail("row %s: %s" % (name, row["note"]))
        if "median" not in row:
            if not row["note"]:
                fail("row %s has no figure and no note saying why" % name)
            continue
        med, p99 = row["median"], row["p99"]
        if not all(isinstance(v, (int, float)) and v > 0 for v in (med, p99)):
            fail("row %s: median %r, p99 %r" % (name, med, p99))
        # The tail is above the median for a time, below it for a rate.
        if (p99 < med) if row["unit"] == "ns" else (p99 > med):
            fail("row %s: p99 %s on the wrong side of the median %s" % (name, p99, med))


def main():
    bench, out, report = sys.argv[1:4]
    proc = subprocess.run([bench, "--quick", "--json", out], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=570)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        fail("regcache-bench exited with %d" % proc.returncode)
    with open(out) as f:
        data = json.load(f)  # raises on malformed JSON

    if data["settings"].get("run") != "quick":
        fail("settings.run is %r, not quick" % data["settings"].get("run"))
    machine = data["machine"]
    for key in ("cpu", "cores", "gpu", "driver", "regcache_version", "ucx_version"):
        if key not in machine:
            fail("machine lacks %s" % key)
    rows = [r for r in data["rows"] if "skipped" not in r]
    skipped = {r["workload"]: r["skipped"] for r in data["rows"] if "skipped" in r}
    check_rows(rows)
    seen = {(r["workload"], r["source"]) for r in rows}
    for workload in CPU_WORKLOADS:
        if (workload, "null") not in seen:
            fail("no %s rows on the CPU" % workload)
    for workload, source, skip in (("ucx", "null", "ucx"), ("hits", "cuda", "cuda")):
        if (workload, source) not in seen and skip not in skipped:
            fail("no %s rows on %s and no skip entry saying why" % (workload, source))
    counts = sorted(r["threads"] for r in rows if r["workload"] == "threads"
                    and r["source"] == "null" and r["what"] == "shared")
    if counts != THREADS:
        fail("shared thread rows at %r, not %r" % (counts, THREADS))

    text = subprocess.run([sys.executable, report, out], stdout=subprocess.PIPE,
                          check=True, text=True).stdout
    sys.stdout.write(text)
    goals = text.split("\n== goals ==\n")[-1].splitlines()
    if len(goals) != GOALS or not all(g.split()[0] in ("met", "MISSED", "not") for g in goals):
        fail("the report does not end with %d goals and their verdicts" % GOALS)
    print("bench JSON OK: %d rows, %d skipped parts, %d goals" % (len(rows), len(skipped),
                                                                  len(goals)))


if __name__ == "__main__":
    main()
