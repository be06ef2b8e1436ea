#!/usr/bin/env python3
"""Run regcache-bench --quick, check its JSON, then judge it with report.py.

    check_bench_json.py BENCH OUT.json REPORT.py

Checks what the harness and the report promise, never a timing: the file is
JSON, the machine is described, every row has a figure (median, p99) or a
note saying why not, no timed loop failed its own check ("invalid:" notes),
every workload ran on the CPU, what could not run is listed as skipped with
a reason, and the report ends with every goal and a verdict.  A goal this
machine cannot judge is never met or MISSED but "not judged" with what it
needs: without a GPU the goals on the cuda source and those whose limit is
in ns (set for the GPU host), below 16 cores the 16-thread goals.  Thread
counts beyond the cores are marked oversubscribed, with no ratio to one
thread.  The plots have titles, axis titles and a legend, and a PNG beside
each SVG where matplotlib is installed.
"""
import glob
import json
import os
import re
import subprocess
import sys
import xml.dom.minidom

WORKLOADS = {"hits", "threads", "churn", "invalidation", "misses", "ucx", "linked", "pins",
             "host_ranges", "prefetch", "host_monitor", "host_merge", "eager", "host_cache",
             "instructions", "leave_notice"}
CPU_WORKLOADS = WORKLOADS - {"ucx", "linked", "pins"}
THREADS = [1, 2, 4, 8, 16, 24, 32]
GOALS = 52


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
        # A time or a rate is positive; a count may be 0 (keys revoked).
        count = row["unit"] not in ("ns", "Mops/s")
        if not all(isinstance(v, (int, float)) and (v > 0 or count and v == 0)
                   for v in (med, p99)):
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

    plots = os.path.join(os.path.dirname(os.path.abspath(out)), "plots")
    for old in glob.glob(os.path.join(plots, "*")):
        os.unlink(old)
    text = subprocess.run([sys.executable, report, out, "--plots", plots],
                          stdout=subprocess.PIPE, check=True, text=True).stdout
    sys.stdout.write(text)
    goals = text.split("\n== goals ==\n")[-1].splitlines()
    if len(goals) != GOALS or not all(g.split()[0] in ("met", "MISSED", "not") for g in goals):
        fail("the report does not end with %d goals and their verdicts" % GOALS)
    check_judged(goals, bool(machine["gpu"]), machine["cores"])
    check_oversubscribed(text, machine["cores"])
    check_plots(plots)
    print("bench JSON OK: %d rows, %d skipped parts, %d goals" % (len(rows), len(skipped),
                                                                  len(goals)))


def check_judged(goals, gpu, cores):
    """What this machine lacks, each goal that needs it must say."""
    for line in (g.strip() for g in goals):
        text = line.split("not judged" if line.startswith("not judged") else None, 1)[1].strip()
        needs = []
        if not gpu and (text.startswith("cuda ") or re.search(r"<= (query \+ )?\d+ ns", text)):
            needs.append("(needs a GPU)" if text.startswith("cuda ") else "(needs the GPU host")
        if cores < 16 and "16 threads" in text and not text.startswith("cuda "):
            needs.append("(needs 16 cores, %d here)" % cores)
        if needs and not (line.startswith("not judged") and any(n in line for n in needs)):
            fail("judged, or not saying what it needs (%s): %s" % (" or ".join(needs), line))
        if line.startswith("not judged") and not line.endswith(")"):
            fail("not judged without saying why: " + line)


def check_oversubscribed(text, cores):
    """The threads table marks the counts above the cores and gives them no
    ratio to one thread."""
    table = text.split("\n== threads, Mops/s by threads ==\n")[1].split("\n\n")[0]
    lines = table.splitlines()
    counts = lines[0].split()
    over = [i for i, c in enumerate(counts) if int(c.rstrip("*")) > cores]
    if [i for i, c in enumerate(counts) if c.endswith("*")] != over:
        fail("thread counts above the %d cores not marked exactly: %s" % (cores, lines[0]))
    for line in lines:
        if line.strip().startswith("x one thread"):
            ratios = line.split()[3:]
            if any(ratios[i] != "-" for i in over):
                fail("a ratio to one thread at an oversubscribed count: " + line)
    if over and "oversubscribed" not in lines[-1]:
        fail("no note on the oversubscribed counts: " + lines[-1])


def check_plots(plots):
    try:
        import matplotlib  # noqa: F401
        png = True
    except ImportError:
        png = False
    for name in ("hit_vs_entries", "thread_scaling"):
        svg = os.path.join(plots, name + ".svg")
        texts = [t.firstChild.data for t in
                 xml.dom.minidom.parse(svg).getElementsByTagName("text") if t.firstChild]
        for want in ("log scale", "(median)", "null regcache"):
            if not any(want in t for t in texts):
                fail("%s: no text with %r (axis titles, legend): %s" % (svg, want, texts))
        if os.path.exists(os.path.join(plots, name + ".png")) != png:
            fail("%s.png %s, matplotlib %s" % (name, "written" if not png else "missing",
                                                "installed" if png else "missing"))


if __name__ == "__main__":
    main()
