#!/usr/bin/env python3
"""Judge regcache-bench's JSON against the goals and print the report.

    bench/report.py BENCH.json [--plots DIR]

The harness only measures; the goals, tables and plots are all here, so a
run can be judged again, against changed goals too, without measuring again.
Standard library only; the plots (plots.py) are drawn by matplotlib where it
is installed, else by hand as SVG.

A goal is judged only where the machine can: its scaling goals need a core
per thread, its goals on the cuda source a GPU, and its limits in ns were set
for the GPU host, whose CPU they measure; elsewhere the figure is printed
and the goal is "not judged" with what it needs.  Thread counts beyond the
machine's cores are marked as oversubscribed, with no ratio to one thread,
and left out of the plots.

A goal that compares two rows is judged on pairs of samples: the harness
measured the rows interleaved (each row's samples carry their slots in the
group's rounds), and each sample of one row is paired with the other row's
sample taken beside it.  The figure is the median over the pairs of their ratio
or difference.  A stretch at half speed, which the GPU host has for whole
minutes, slows both samples of a pair alike: the per-pair ratio cancels it
pair by pair, where a ratio of medians would still move with how many
samples of each row fell in the slow stretch (the medians sit in the middle
of a two-humped spread); the median then drops the few pairs that an
interrupt or the stretch's edge split.  A difference scales with the
stretch instead of cancelling, but both of its operands are taken under it.
"""
import bisect
import json
import operator
import os
import sys

import plots

NOISE = 0.10        # "equal within noise": 10% of the reference, 2 ns at least
SCALING_CORES = 16  # a scaling goal needs a core per thread


def label(n):
    """1k, 100k, 1M for counts; 4 KiB, 1 GiB for sizes (multiples of 4096)."""
    units = ((1 << 30, " GiB"), (1 << 20, " MiB"), (1 << 10, " KiB")) \
        if n >= 4096 and n % 4096 == 0 else ((1000000, "M"), (1000, "k"))
    return next(("%d%s" % (n // d, u) for d, u in units if n % d == 0), str(n))


def nearest_rank(values, q):
    """The smallest value with at least q of them at or below it, as the
    harness takes its medians."""
    v = sorted(values)
    return v[max(int(q * len(v) + 0.999999), 1) - 1]


def paired(a, b, f):
    """f(x, y) for each sample x of row a and the sample y of row b taken
    in the nearest slot (the earlier on a tie), as a row of its own
    (so that it can be paired again); None unless they were interleaved."""
    if None in (a, b) or "samples" not in a or a["group"] != b.get("group"):
        return None
    slots, values = zip(*sorted(zip(b["slots"], b["samples"])))
    out = []
    for s, x in zip(a["slots"], a["samples"]):
        i = bisect.bisect(slots, s)
        j = i - 1 if i == len(slots) or (i and s - slots[i - 1] <= slots[i] - s) else i
        out.append(f(x, values[j]))
    return {"group": a["group"], "slots": a["slots"], "samples": out,
            "median": nearest_rank(out, 0.5)}


def scaling(r, one):
    """r against its series' one-thread row, pair by pair ("" unless paired)."""
    p = paired(r, one, operator.truediv)
    return "%.2fx" % p["median"] if p else ""


def relative(a, b):
    """a's difference to b, in parts of b."""
    return (a - b) / b


def series_name(r):
    mode = r["asked"] + ("->" + r["mode"] if r["mode"] not in ("", r["asked"]) else "")
    return " ".join(v for v in (r["source"], r["impl"], r["what"], mode,
                                r["ledger"] and "ledger " + r["ledger"]) if v)


def cell(r):
    """median (p99), to a tenth below 100."""
    if not r or "median" not in r:
        return "note" if r else "-"
    return "%s (%s)" % tuple(("%.1f" if v < 100 else "%.0f") % v for v in (r["median"], r["p99"]))


class Report:
    def __init__(self, data):
        self.rows = [r for r in data["rows"] if "skipped" not in r]
        self.skipped = {r["workload"]: r["skipped"] for r in data["rows"] if "skipped" in r}
        self.machine, self.settings = data["machine"], data["settings"]
        self.cores = self.machine["cores"]
        self.gpu = bool(self.machine["gpu"])
        self.goals = []

    def needs(self, gpu=False, cores=1):
        """What this machine lacks to judge a goal, or None."""
        if gpu and not self.gpu:
            return "needs a GPU"
        if self.cores < cores:
            return "needs %d cores, %d here" % (cores, self.cores)
        return None

    def host_limit(self):
        """Why a limit in ns cannot be judged here, or None."""
        return self.needs(gpu=True) and "needs the GPU host: its ns limit is that CPU's"

    def oversubscribed(self, threads):
        return threads > self.cores

    def find(self, **key):
        """The first row with a figure matching every key, or None."""
        return next((r for r in self.rows if "median" in r and
                     all(r[k] == v for k, v in key.items())), None)

    def median(self, **key):
        r = self.find(**key)
        return r and r["median"]

    def overhead(self, **key):
        """Each miss get+put less the backend's reg+dereg taken beside it."""
        return paired(self.find(what="miss", **key), self.find(what="reg+dereg", **key),
                      operator.sub)

    def goal(self, text, figure, met, why):
        """met True or False, or None and why it was not judged."""
        self.goals.append((text, figure, "met" if met else "MISSED" if met is not None
                           else "not judged", "" if met is not None else "  (%s)" % why))

    def why_missing(self, source):
        return {"cuda": "no GPU", "ucx": "no UCX"}.get(source) if source in self.skipped \
            else "not measured: see the tables' notes"

    def below(self, text, value, limit, beside=""):
        """value <= limit; `beside`: what the figure is printed with."""
        why = self.host_limit() or self.why_missing("null")
        self.goal(text, "-" if value is None else "%.1f ns%s" % (value, beside),
                  None if value is None or self.host_limit() else value <= limit, why)

    def pair(self, text, a, b, how, limit=None, unit="ns", source="null", why=None):
        """Rows a and b pair by pair: the median of a/b >= limit ("ratio") or
        <= limit ("ratio at most"), of a-b <= limit ("diff"), or of (a-b)/b = 0
        ("same") or <= 0 ("not above") within noise.  `why` this machine
        cannot judge it, if so; also any goal on the cuda source without a
        GPU."""
        why = self.needs(gpu=source == "cuda") or why
        if None in (a, b):
            return self.goal(text, "-", None, why or self.why_missing(source))
        p = paired(a, b, {"ratio": operator.truediv, "ratio at most": operator.truediv,
                          "diff": operator.sub, "same": relative, "not above": relative}[how])
        if p is None:
            return self.goal(text, "-", None, "not measured interleaved")
        v = p["median"]
        figure = {"ratio": "%.2fx" % v, "ratio at most": "%.2fx" % v,
                  "diff": "%+.1f %s" % (v, unit)}.get(how, "%+.1f%%" % (100 * v))
        noise = max(NOISE, (2 if unit == "ns" else 0) / b["median"])
        met = v >= limit if how == "ratio" else v <= limit if how in ("diff", "ratio at most") \
            else abs(v) <= noise if how == "same" else v <= noise
        self.goal(text, "%s (%.1f vs %.1f %s)" % (figure, a["median"], b["median"], unit),
                  None if why else met, why)

    def judge(self):
        """The goals, in the order of the README's table."""
        f, m = self.find, self.median
        cores = self.needs(cores=SCALING_CORES)
        for n in (1, 1000, 100000, 1000000):
            self.pair("NOTIFY hit >= 2.5x faster than UCX, %s entries" % label(n),
                      f(workload="ucx", what="hit", entries=n),
                      f(workload="hits", source="null", asked="NOTIFY", entries=n), "ratio", 2.5,
                      source="ucx")
        bare = paired(*(f(workload="threads", impl="tag", threads=t) for t in (16, 1)),
                      operator.truediv)
        machine = " (the machine: %.2fx)" % bare["median"] if bare else ""
        for source, what, want in (("null", "shared", 14), ("cuda", "shared", 14),
                                   ("null", "private", 15)):
            top, one = (f(workload="threads", source=source, what=what, threads=t,
                          impl="regcache") for t in (16, 1))
            self.pair("%s 16 threads, %s set >= %dx one thread%s" % (source, what, want, machine),
                      top, one, "ratio", want, "Mops/s", source, cores)
        hit = f(workload="hits", source="null", asked="NOTIFY", entries=1)
        floor = f(workload="hits", source="null", impl="skeleton", entries=1)
        self.below("null NOTIFY hit, 1 entry <= 10 ns", hit and hit["median"], 10,
                   " (its protocol's skeleton %.1f)" % floor["median"] if floor else "")
        for n in (1, 1000, 100000, 1000000):
            self.pair("null NOTIFY hit <= TAG_CHECK hit within noise, %s entries" % label(n),
                      f(workload="hits", source="null", asked="NOTIFY", entries=n),
                      f(workload="hits", source="null", asked="TAG_CHECK", entries=n), "not above")
        for source in ("null", "cuda"):
            for n, slack in ((1, 10), (1000, 10), (100000, 40)):
                self.pair("%s TAG_CHECK hit <= query + %d ns, %s entries" % (
                    source, slack, label(n)),
                          f(workload="hits", source=source, asked="TAG_CHECK", entries=n),
                          f(workload="hits", source=source, impl="tag", entries=n), "diff", slack,
                          source=source, why=self.host_limit())
        self.below("notify_free dropping one entry, 100k entries <= 500 ns",
                   m(workload="invalidation", what="drop", entries=100000), 500)
        self.below("notify_free with no entry in range, 100k entries <= 25 ns",
                   m(workload="invalidation", what="none", entries=100000), 25)
        for what in ("max_entries", "max_bytes"):
            self.below("evicting get+put (%s budget) <= 200 ns" % what,
                       m(workload="churn", what=what), 200)
        self.pair("evicting get+put beside 512 idle threads <= 2x beside none",
                  *(f(workload="churn", what="beside %d idle" % n) for n in (512, 0)),
                  "ratio at most", 2)
        overhead = self.overhead(workload="misses", source="null", ledger="on")
        self.below("miss overhead beyond the backend <= 150 ns",
                   overhead and overhead["median"], 150)
        for what, threads in (("hit", 0), ("shared", 16)):
            auto, notify = (f(workload="linked", what=what, threads=threads, asked=a)
                           for a in ("AUTO", "NOTIFY"))
            why = "AUTO resolved to %s" % auto["mode"] if auto and auto["mode"] != "HOOKS" else \
                cores if threads else None
            self.pair("cuda linked (AUTO) %s%s = NOTIFY within noise" % (
                what, ", 16 threads" if threads else ""), auto, notify, "same",
                unit="Mops/s" if threads else "ns", source="cuda", why=why)
        for source in ("null", "cuda"):
            self.pair("%s hit with the ledger on = off within noise" % source,
                      *(f(workload="misses", source=source, what="hit", ledger=s)
                        for s in ("on", "off")), "same", source=source)
            self.pair("%s miss overhead with the ledger on <= off + 100 ns" % source,
                      *(self.overhead(workload="misses", source=source, ledger=s)
                        for s in ("on", "off")), "diff", 100, source=source)
        self.pair("null get after a finished prefetch = hit within noise",
                  f(workload="prefetch", source="null", what="hit after prefetch"),
                  f(workload="prefetch", source="null", what="hit"), "same")
        for source in ("null", "cuda"):
            batch = {}  # "register 1000, 4 workers" by worker count
            for r in self.rows:
                if r["workload"] == "prefetch" and r["source"] == source and "median" in r \
                        and r["what"].startswith("register "):
                    batch[int(r["what"].split()[-2])] = r
            for w in (4, 16):
                self.pair("%s background registration, %d workers <= 1 worker within noise"
                          % (source, w), batch.get(w), batch.get(1), "not above", source=source)
        self.below("non-blocking get that misses <= 1000 ns",
                   m(workload="prefetch", source="null", what="nonblocking miss"), 1000)
        mon = dict(workload="host_monitor", source="null")
        self.pair("host munmap+mmap of a 2 MiB range watched through libc <= off + 1000 ns",
                  f(what="munmap+mmap libc", **mon), f(what="munmap+mmap off", **mon),
                  "diff", 1000, source="null")
        for way, name in (("ucm", "UCX's events"), ("libc", "libc")):
            self.pair("host munmap+mmap watched through %s, UCX loaded <= off + 1000 ns" % name,
                      f(what="munmap+mmap %s, UCX" % way, **mon),
                      f(what="munmap+mmap off, UCX", **mon), "diff", 1000,
                      source="ucx")
        self.pair("host hit with the monitor on = off within noise",
                  f(what="hit watched", **mon), f(what="hit unwatched", **mon), "same",
                  source="null")
        self.pair("null hit beside a host cache = beside none within noise",
                  f(workload="host_cache", what="hit beside a host cache"),
                  f(workload="host_cache", what="hit beside no host cache"), "same")
        for source in ("null", "cuda"):
            done = f(workload="eager", source=source, what="first get after registration")
            at_once = f(workload="eager", source=source, what="first get at once")
            why = self.needs(gpu=source == "cuda") or self.why_missing(source)
            self.goal("%s eager registration: first gets after it ended hit 100%%" % source,
                      "-" if not done else "%.1f%% (worst %.1f%%)" % (done["median"],
                                                                       done["p99"]),
                      None if not done or self.needs(gpu=source == "cuda") else
                      done["p99"] >= 100, why)
            self.goal("%s eager registration: first gets at once after the allocation" % source,
                      "-" if not at_once else "%.1f%% (worst %.1f%%)" % (at_once["median"],
                                                                         at_once["p99"]),
                      None, "a figure, no goal: a race with the workers, which the "
                      "allocation only queued" if at_once else why)
        for way in ("ucm", "libc", "uffd"):
            r = f(workload="leave_notice", what=way)
            self.below("host leave notice after an unmap, no further call (%s): p99 <= 1 ms" % way,
                       r and r.get("p99"), 1000000)
        two_mib = dict(workload="host_ranges", size_bytes=2 << 20)
        for what, unit, limit in (("entries", "registrations", 4), ("pinned_peak", "MiB", 36)):
            v = m(what=what, **two_mib)
            self.goal("host sub-ranges of 2 x 16 MiB (2M alignment): %s <= %d" % (unit, limit),
                      "-" if v is None else "%g %s" % (v, unit),
                      None if v is None else v <= limit, self.why_missing("null"))
        merge = dict(workload="host_merge", source="null")
        revoked = m(what="transport revoked_by_merges auto", **merge)
        self.goal("transport buffers, default host_merge: keys revoked by merges = 0",
                  "-" if revoked is None else "%g keys" % revoked,
                  None if revoked is None else revoked == 0, self.why_missing("null"))
        regs = [m(what="transport registrations %s" % p, **merge) for p in ("auto", "all")]
        self.goal("transport buffers, default host_merge: registrations <= 2x all's",
                  "-" if None in regs else "%g vs %g" % tuple(regs),
                  None if None in regs else regs[0] <= 2 * regs[1], self.why_missing("null"))

    def print_all(self, plot_files=None):
        m, s = self.machine, self.settings
        print("regcache %s benchmark, %s run" % (m["regcache_version"], s["run"]))
        print("  CPU: %s, %d CPUs on %s physical cores (threads pinned, a core each first),"
              " load %.2f before it%s\n  GPU: %s %s | UCX: %s%s" % (
            m["cpu"], m["cores"], m.get("physical_cores", "?"), m["load_avg_1min"],
            " (busy: expect noisy figures)" if m["load_avg_1min"] > m["cores"] / 2 else "",
            m["gpu"] or "none", m["driver"], m["ucx_version"] or "none",
            " | LD_PRELOAD=" + m["ld_preload"] if m["ld_preload"] else ""))
        print("  median (p99) after a warm-up: ns per operation over %d samples, or Mops/s"
              "\n  (slowest run) over %d runs of %.2f s per thread count, one thread: as many"
              "\n  beside each other count (1, N, 1, N, ...).  Rows a goal compares were measured"
              "\n  interleaved, in blocks of samples or run by run; the goal's figure (and each"
              "\n  \"x one thread\") is the median over neighbouring pairs of their ratio or"
              "\n  difference, which need not be that of the printed medians." % (
                  s["samples"], s["runs"], s["run_seconds"]))
        for workload, threaded in dict.fromkeys((r["workload"], r["threads"] > 0)
                                                for r in self.rows):
            self.table(workload, threaded)
        if plot_files is not None:
            print("\n== plots ==")
            for f in plot_files:
                print("  " + f)
            if not plots.pyplot:
                print("  (SVG only: PNG plots need python3-matplotlib)")
        print("\n== skipped ==")
        for workload, why in self.skipped.items():
            print("  %s: %s" % (workload, why))
        print("\n== goals ==")
        for text, figure, verdict, why in self.goals:
            print("  %-10s %-58s %s%s" % (verdict, text, figure, why))

    def table(self, workload, threaded):
        """A line per series, a column per table size, range size or thread count."""
        rows = [r for r in self.rows
                if r["workload"] == workload and (r["threads"] > 0) == threaded]
        x = (lambda r: r["threads"]) if threaded else (lambda r: r["entries"] or r["size_bytes"])
        cols = sorted(set(map(x, rows)))
        series = {}
        for r in rows:
            series.setdefault(series_name(r), {})[x(r)] = r
        over = [c for c in cols if threaded and self.oversubscribed(c)]
        units = {r.get("unit", "ns") for r in rows} - {"ns", "Mops/s"}
        by = " by alignment" if any(r["size_bytes"] for r in rows) else " by entries"
        print("\n== %s, %s ==" % (workload, "Mops/s by threads" if threaded else
                                  " and ".join(sorted(units)) + by if units else "ns"))
        print("  %-38s" % "" + "".join("%13s" % (label(c) + "*" * (c in over)) for c in cols))
        for name, cells in series.items():
            print("  %-38s" % name + "".join("%13s" % cell(cells.get(c)) for c in cols))
            if threaded and "median" in cells.get(1, {}):
                print("  %-38s" % "  x one thread" + "".join("%13s" % (
                    "-" if c in over else scaling(cells.get(c), cells[1])) for c in cols))
            for c, r in cells.items():
                if r["note"]:
                    print("  %38s %s: %s" % ("", label(c), r["note"]))
        if over:
            print("  * more threads than the %d cores: oversubscribed, no ratio to one thread"
                  % self.cores)

    def plots(self, out):
        """Write the plots into `out`; the files written."""
        os.makedirs(out, exist_ok=True)
        cores = "%d cores" % self.cores
        files = []
        for name, threaded, title, xtitle, ytitle in (
                ("hit_vs_entries", False, "Hit (get+put of a cached 4 KiB page)",
                 "cached entries (64 KiB regions, log scale)", "ns per get+put (median)"),
                ("thread_scaling", True, "Hits on every thread (up to the %s)" % cores,
                 "threads (log scale)", "Mops/s, all threads (median)")):
            series = {}
            for r in self.rows:
                if r["workload"] in ("hits", "ucx", "threads", "linked") and "median" in r and \
                        (r["threads"] > 0) == threaded and not self.oversubscribed(r["threads"]):
                    series.setdefault(series_name(r), []).append(
                        (r["threads"] or r["entries"], r["median"]))
            files += plots.draw(os.path.join(out, name), title, xtitle, ytitle, series, label)
        return files


def main(argv):
    if len(argv) not in (2, 4) or argv[2:3] not in ([], ["--plots"]):
        sys.exit(__doc__)
    with open(argv[1]) as f:
        report = Report(json.load(f))
    report.judge()
    report.print_all(report.plots(argv[3]) if len(argv) == 4 else None)


if __name__ == "__main__":
    main(sys.argv)
