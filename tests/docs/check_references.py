#!/usr/bin/env python3
"""check_references.py SOURCE_DIR: every reference in the docs and comments
leads somewhere.

  - A markdown link to a file of the tree, with or without a #anchor, names
    a file that exists and a heading of it (anchors as GitHub makes them).
  - A section named by its title - README "Title", docs/design.md "Title",
    design.md ("Title"), bench/README.md, "Title" - is a heading of that
    file, word for word.
  - A comment of a source file that points at README or design.md as a
    whole, "(README)" or "(see README)", says which section instead.
  - A man page reference, regcache_name(3) or **regcache_name**(3), names
    a page of docs/man or a name of a page's NAME line, in that section.
  - No text speaks of issue numbers: docs and comments speak to users.

Scanned: the markdown files of the tree (README.md, docs/, docs/man/,
tests/README.md, bench/README.md, ...) and the C, C++ and CUDA sources
and CMake files of include/, src/, tests/, bench/ and examples/."""
import os
import re
import sys

src = os.path.abspath(sys.argv[1])
SKIP_DIRS = {".git", "build"}
SOURCE_EXT = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh", ".py", ".sh", ".txt", ".cmake")
DOC_FILES = {"README": "README.md", "README.md": "README.md", "design.md": "docs/design.md",
             "docs/design.md": "docs/design.md", "bench/README.md": "bench/README.md",
             "tests/README.md": "tests/README.md"}


def tree_files():
    for root, dirs, files in os.walk(src):
        # Hidden directories hold what tools staged (a device run's copy of
        # the tree), not the project's text.
        dirs[:] = [d for d in dirs
                   if d not in SKIP_DIRS and not d.startswith(("build", "."))]
        for f in files:
            yield os.path.relpath(os.path.join(root, f), src)


def headings(path):
    """The titles of a markdown file's headings, outside code blocks."""
    titles, fenced = [], False
    for line in open(os.path.join(src, path)):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            m = re.match(r"#{1,6} (.*?)\s*$", line)
            if m:
                titles.append(m.group(1))
    return titles


def slug(title):
    """The anchor GitHub gives a heading (duplicates get -1, -2, ...)."""
    s = title.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for t in headings(path):
        a = slug(t)
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


def man_names():
    """'name(section)' for every page and every name of a NAME line."""
    out = set()
    mandir = os.path.join(src, "docs", "man")
    for page in os.listdir(mandir):
        m = re.match(r"(.*)\.(\d)\.md$", page)
        if not m:
            continue
        out.add(f"{m.group(1)}({m.group(2)})")
        lines = open(os.path.join(mandir, page)).read().split("\n")
        for i, line in enumerate(lines):
            if line.strip() == "# NAME":
                j = i + 1
                while not lines[j].strip():
                    j += 1
                for n in lines[j].split(" - ")[0].split(","):
                    out.add(f"{n.strip()}({m.group(2)})")
                break
    return out


def flatten(text, comments):
    """The text with each line break (and a comment's mark after it) made
    a space, so that a reference may run over lines; and the line number
    of each of its characters."""
    parts, line_of = [], []
    for no, line in enumerate(text.split("\n"), 1):
        part = re.sub(r"^\s*(?:\*|#|//)?\s*", "", line) if comments else line
        parts.append(part)
        line_of += [no] * (len(part) + 1)
    return " ".join(parts), line_of


def main():
    files = sorted(tree_files())
    markdown = [f for f in files if f.endswith(".md")]
    sources = [f for f in files if f.endswith(SOURCE_EXT) and f.split("/")[0] in
               ("include", "src", "tests", "bench", "examples", "cmake", ".ci")
               or f == "CMakeLists.txt"]
    # These scripts quote the forms they check.
    own = {"tests/docs/check_references.py", "tests/docs/check_contract_homes.py"}
    pages = man_names()
    failures = []
    for f in [f for f in markdown + sources if f not in own]:
        text = open(os.path.join(src, f), errors="replace").read()
        here = os.path.dirname(f)
        for no, line in enumerate(text.split("\n"), 1):
            where = f"{f}:{no}"
            if re.search(r"\b[Ii]ssue #?\d+", line):
                failures.append(f"{where}: speaks of an issue number")
            if f.endswith(".md"):
                for target in re.findall(r"\]\(([^)\s]+)\)", line):
                    if re.match(r"[a-z]+:", target):
                        continue
                    path, _, anchor = target.partition("#")
                    path = os.path.normpath(os.path.join(here, path)) if path else f
                    if not os.path.exists(os.path.join(src, path)):
                        failures.append(f"{where}: link to {target}: no file {path}")
                    elif anchor and path.endswith(".md") and anchor not in anchors(path):
                        failures.append(f"{where}: link to {target}: {path} has no heading "
                                        f"with the anchor #{anchor}")
            for name, section in re.findall(r"\b(regcache[-_]\w+)\**(\(\d\))", line):
                if name + section not in pages:
                    failures.append(f"{where}: {name}{section}: no such man page or name")
        flat, line_of = flatten(text, f in sources)
        for m in re.finditer(r'((?:docs/|bench/|tests/)?(?:README(?:\.md)?|design\.md))\*?'
                             r'(?:,? \(?|, )"([^"]{1,80})"', flat):
            doc = DOC_FILES.get(m.group(1))
            if doc and m.group(2) not in headings(doc):
                failures.append(f'{f}:{line_of[m.start()]}: {m.group(1)} "{m.group(2)}": '
                                f"{doc} has no such heading")
        if f in sources:
            for m in re.finditer(r"(?:\(|\bsee (?:the )?)(?:README|(?:docs/)?design\.md)"
                                 r"(?![\w.'\"]| \")", flat):
                failures.append(f"{f}:{line_of[m.start()]}: points at a whole document: "
                                'name its section, as README "Title"')
    if failures:
        print("\n".join(failures))
        print(f"{len(failures)} references lead nowhere")
        return 1
    print(f"every reference resolves ({len(markdown)} markdown files, {len(sources)} sources)")
    return 0


sys.exit(main())
