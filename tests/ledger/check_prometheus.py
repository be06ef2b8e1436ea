#!/usr/bin/env python3
"""A strict reader of the Prometheus text exposition format (version 0.0.4)
for regcache-stat --prometheus: UTF-8 throughout, no control character
but the newline that ends each line, every line a HELP, a TYPE or a sample
of the family its TYPE declared, names and labels well formed, values
numbers, no family declared twice, no sample twice.  Then each cache named
on the command line must have a regcache_entries sample with the given
value, and with WANT_PROCESS set (Python escapes, for unicode_escape) some
sample's process label must decode to it.

    check_prometheus.py FILE NAME=ENTRIES...
Exit 0, or 1 with the offending line."""
import os
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\n]|\\[\\\"n])*)\""
SAMPLE = re.compile(r"^(?P<name>%s)(?:\{(?P<labels>%s(?:,%s)*)?\})? (?P<value>\S+)(?: -?\d+)?$"
                    % (NAME, LABEL, LABEL))
VALUE = re.compile(r"^([+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?Inf|NaN)$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def fail(n, line, why):
    sys.exit("line %d: %s: %r" % (n, why, line))


def unescape(value):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def main():
    try:
        text = open(sys.argv[1], "rb").read().decode("utf-8")
    except UnicodeDecodeError as e:
        sys.exit("the exposition is not UTF-8: %s" % e)
    if not text.endswith("\n"):
        sys.exit("the exposition does not end with a newline")
    helped, typed, seen, entries, processes = set(), {}, set(), {}, set()
    family = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if re.search(r"[\x00-\x1f\x7f-\x9f]", line):
            fail(n, line, "a control character")
        if line.startswith("#"):
            m = re.match(r"^# (HELP|TYPE) (%s) (.+)$" % NAME, line)
            if not m:
                if line.startswith("# HELP") or line.startswith("# TYPE"):
                    fail(n, line, "malformed HELP or TYPE")
                continue  # a comment
            kind, name, rest = m.groups()
            if kind == "HELP":
                if name in helped:
                    fail(n, line, "second HELP")
                helped.add(name)
            else:
                if name in typed or rest not in TYPES:
                    fail(n, line, "second TYPE or unknown type")
                typed[name] = rest
                family = name
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(n, line, "not a sample")
        name = m.group("name")
        if name != family:
            fail(n, line, "sample outside its family's TYPE")
        pairs = re.findall(LABEL, m.group("labels") or "")
        labels = dict(pairs)
        if len(labels) != len(pairs):
            fail(n, line, "a label twice")
        if not VALUE.match(m.group("value")):
            fail(n, line, "value is not a number")
        value = float(m.group("value"))
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            fail(n, line, "sample twice")
        seen.add(key)
        if name == "regcache_entries":
            entries[labels.get("cache")] = value
        if "process" in labels:
            processes.add(unescape(labels["process"]))
    process = os.environ.get("WANT_PROCESS")
    if process is not None:
        process = process.encode().decode("unicode_escape")
        if process not in processes:
            sys.exit("no process label %r among %r" % (process, sorted(processes)))
    for want in sys.argv[2:]:
        cache, value = want.split("=")
        if entries.get(cache) != float(value):
            sys.exit("regcache_entries of %s: %r, expected %s" % (cache, entries.get(cache), value))


main()
