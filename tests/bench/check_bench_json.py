#!/usr/bin/env python3
"""Run regcache-bench --quick --json FILE and check the report's shape.

Checks what the harness promises about itself, never a timing: the file is
JSON, the machine is described, every row has its figures or says why not,
no hit loop saw a miss ("invalid:" notes come from the harness's own
checks), every goal carries a verdict, and each part that produced no rows
is listed as skipped with a reason.
"""
import json
import subprocess
import sys

VERDICTS = {"met", "MISSED", "not judged"}
SECTIONS = {"pin", "entries", "threads", "churn", "notify"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def number_or_null(row, key):
    v = row.get(key, "missing")
    if v is not None and not isinstance(v, (int, float)):
        fail("row %r: %s is %r" % (row.get("name"), key, v))
    return v


def main():
    bench, out = sys.argv[1], sys.argv[2]
    proc = subprocess.run([bench, "--quick", "--json", out],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=570)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        fail("regcache-bench exited with %d" % proc.returncode)
    with open(out) as f:
        report = json.load(f)  # raises on malformed JSON

    if report.get("run") != "quick":
        fail("run is %r, not quick" % report.get("run"))
    machine = report.get("machine", {})
    for key in ("cpu", "cores", "gpu", "driver", "regcache_version"):
        if key not in machine:
            fail("machine lacks %s" % key)
    if not isinstance(machine["cores"], int) or machine["cores"] < 1:
        fail("machine cores is %r" % machine["cores"])

    rows = report.get("results")
    if not isinstance(rows, list) or not rows:
        fail("no results")
    seen = set()
    for row in rows:
        if row.get("section") not in SECTIONS:
            fail("row %r has section %r" % (row.get("name"), row.get("section")))
        seen.add((row["section"], row.get("impl")))
        med = number_or_null(row, "median_ns")
        mops = number_or_null(row, "mops")
        for key in ("p99_ns", "mops_low", "derived"):
            number_or_null(row, key)
        note = row.get("note", "")
        if med is None and mops is None and not note:
            fail("row %r has no figure and no note saying why" % row["name"])
        if note.startswith("invalid:"):
            fail("row %r: %s" % (row["name"], note))
        if med is not None and row["p99_ns"] is not None and row["p99_ns"] < med:
            fail("row %r: p99 %s below median %s" % (row["name"], row["p99_ns"], med))
        for goal in row.get("goals", []):
            if goal.get("verdict") not in VERDICTS or not goal.get("goal"):
                fail("row %r: goal %r" % (row["name"], goal))

    skipped = report.get("skipped")
    if not isinstance(skipped, list):
        fail("no skipped list")
    for s in skipped:
        if not s.get("what") or not s.get("why"):
            fail("skip entry without what/why: %r" % s)
    skipped_text = " ".join(s["what"] + " " + s["why"] for s in skipped)
    # Every workload ran on regcache; the optional parts are either
    # present or explained.
    for section in SECTIONS:
        if (section, "regcache") not in seen:
            fail("no regcache rows in section %s" % section)
    if ("entries", "ucx") not in seen and "UCX" not in skipped_text:
        fail("no UCX rows and no skip entry saying why")
    if not machine["gpu"] and "CUDA" not in skipped_text:
        fail("no GPU and no skip entry saying why")
    print("bench JSON OK: %d rows, %d skipped parts" % (len(rows), len(skipped)))


if __name__ == "__main__":
    main()
