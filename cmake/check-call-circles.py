#!/usr/bin/env python3
"""Fail when source files of src/ call each other in a circle.

Layers call only down: a file may use what files below it define, never
what a file using it defines.  Each object file is a node; it points at
every object file that defines a symbol it leaves undefined (nm), looked
up as the linker would: in its own target first, then in the rest of its
program, then in what the program links.  A source built into two
targets, such as the wrappers the hook shares, is one node per target.
Every strongly connected component of more than one file is a circle:
printed with one cycle through it and the symbols each step uses, and the
check fails.

usage: check-call-circles.py BUILD_DIR PROGRAM...
  PROGRAM is --program OBJECT... [--links OBJECT...]: the objects linked
  into one library or executable, and those of the libraries it links.
  A node is named by its source's path below BUILD_DIR's mirror of the
  source tree (src/core/miss.c for .../src/CMakeFiles/x.dir/core/miss.c.o).
  NM (environment) names the nm to run, nm by default.
"""
import collections
import os
import subprocess
import sys

DEFINED = set("TDBRVWGSi")


def source_of(build_dir, obj):
    """(source path, target) of an object file CMake built."""
    head, sep, rest = obj.partition("/CMakeFiles/")
    if not sep:
        return os.path.relpath(obj, build_dir), ""
    target, _, inside = rest.partition(".dir/")
    inside = inside[: -len(".o")] if inside.endswith(".o") else inside
    # Sources outside the target's folder are spelled with "__" for "..".
    inside = "/".join(".." if p == "__" else p for p in inside.split("/"))
    where = os.path.relpath(head, build_dir)
    return os.path.normpath(os.path.join(where, inside)), target


def symbols(obj):
    nm = os.environ.get("NM", "nm")
    out = subprocess.run([nm, "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in DEFINED:
            defined.add(name)
    return defined, undefined


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iterative: lists of nodes, one per component."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                found.append(sorted(comp))
    return found


def one_cycle(start, comp, edges):
    """A shortest cycle through start inside comp (breadth first)."""
    inside = set(comp)
    back = {}
    queue = collections.deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges[node]):
            if nxt not in inside:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(back[path[-1]])
                return list(reversed(path)) + [start]
            if nxt not in back:
                back[nxt] = node
                queue.append(nxt)
    return [start]


def programs(args):
    """[(own objects, linked objects)] from the command line."""
    found, where = [], None
    for arg in args:
        if arg == "--program":
            found.append(([], []))
            where = found[-1][0]
        elif arg == "--links" and found:
            where = found[-1][1]
        elif where is None:
            raise SystemExit("check-call-circles: %s before --program" % arg)
        else:
            where.append(os.path.abspath(arg))
    return found


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    build_dir = os.path.abspath(argv[1])
    progs = programs(argv[2:])
    every = sorted({o for own, links in progs for o in own + links})
    named = {o: source_of(build_dir, o) for o in every}
    by_source = collections.Counter(src for src, _ in named.values())
    node_of, target_of, defs, uses = {}, {}, {}, {}
    for obj in every:
        src, target = named[obj]
        node = src if by_source[src] == 1 else "%s (%s)" % (src, target)
        node_of[obj] = node
        target_of[node] = target
        defs[node], uses[node] = symbols(obj)
    nodes = sorted(defs)

    edges = {n: set() for n in nodes}
    why = collections.defaultdict(set)
    for own, links in progs:
        own_nodes = [node_of[o] for o in own]
        link_nodes = [node_of[o] for o in links]
        for node in own_nodes:
            for sym in uses[node]:
                for scope in (
                    [n for n in own_nodes if target_of[n] == target_of[node]],
                    own_nodes,
                    link_nodes,
                ):
                    found = [d for d in scope if sym in defs[d] and d != node]
                    if found:
                        break
                for d in found:
                    edges[node].add(d)
                    why[(node, d)].add(sym)

    circles = [c for c in strongly_connected(nodes, edges) if len(c) > 1]
    if not circles:
        print("no call circle among %d object files" % len(nodes))
        return 0
    for comp in circles:
        print("call circle among %d files: %s" % (len(comp), " ".join(comp)))
        cycle = one_cycle(comp[0], comp, edges)
        print("  for instance:")
        for a, b in zip(cycle, cycle[1:]):
            syms = sorted(why[(a, b)])
            more = " ..." if len(syms) > 3 else ""
            print("    %s -> %s (%s%s)" % (a, b, ", ".join(syms[:3]), more))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
