#!/usr/bin/env python3
"""check_contract_homes.py SOURCE_DIR: every public name has one home.

The man pages (docs/man/*.md) are the home of the API's contract.  Every
public name of include/regcache.h and include/regcache_device.h, every
callback member of their structs and every REGCACHE_* environment variable
of the options table (src/common/options.c) is documented in exactly one
page, and no page documents a name that another page owns or that the
headers do not have.  "Documented in" means:

  function         listed in the page's NAME line (the names before " - ");
                   a prototype in a page's SYNOPSIS must be one of its own
                   NAME line's names.
  type             declared in the page's SYNOPSIS: `struct NAME {`,
                   `struct NAME;`, `enum NAME {` or `typedef ... NAME;`.
  enum value,      the bold term of a definition-list entry (a line that
  macro,           starts with **NAME**, whose next non-blank line starts
  variable         with ":"), outside the ERRORS and RETURN VALUE sections;
                   a macro may instead be a `#define NAME` of the SYNOPSIS.
  callback member  the italic term of a definition-list entry (*NAME*), or
                   a "## NAME" heading.

The comment above each function's declaration in the headers names the page
that documents it, as "regcache_get(3)": the header keeps a summary, the
page the contract.  A struct or enum that a page's SYNOPSIS shows whole
has the members the header declares, in its order.

Public names exclude the headers' own machinery: include guards, macros the
header #undefs, names ending in "_" (helpers of the inline functions), and
REGCACHE_API and REGCACHE_DEVICE_FN, which decorate declarations."""
import os
import re
import sys

src = sys.argv[1]
headers = [os.path.join(src, "include", h) for h in ("regcache.h", "regcache_device.h")]
MACHINERY = {"REGCACHE_API", "REGCACHE_DEVICE_FN"}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def public_names():
    """name -> kind, for every public name of the headers."""
    names = {}
    for path in headers:
        raw = open(path).read()
        text = strip_comments(raw)
        undefined = set(re.findall(r"^#undef\s+(\w+)", text, re.M))
        guards = set(re.findall(r"^#ifndef\s+(\w+_H)\s*$", text, re.M))
        for m in re.finditer(r"^#define\s+(REGCACHE_\w+)", text, re.M):
            n = m.group(1)
            if n not in undefined and n not in guards and n not in MACHINERY:
                names[n] = "macro"
        for m in re.finditer(r"^REGCACHE_API\b[^(;]*?\b(regcache_\w+)\s*\(", text, re.M):
            names[m.group(1)] = "function"
        for m in re.finditer(r"^REGCACHE_DEVICE_FN\b[^(;]*?\b(regcache_\w+)\s*\(", text, re.M):
            if not m.group(1).endswith("_"):
                names[m.group(1)] = "function"
        for m in re.finditer(r"\b(struct|enum)\s+(regcache_\w+)\s*\{", text):
            names[m.group(2)] = "type"
        for m in re.finditer(r"^typedef\b[^;]*?\b(regcache_\w+)\s*;", text, re.M):
            names[m.group(1)] = "type"
        # Enum values: those of enum bodies, and the status table's X(NAME, ...).
        for body in re.findall(r"\benum\s+\w*\s*\{(.*?)\}", text, re.S):
            for n in re.findall(r"\b(REGCACHE_\w+)\s*(?:=[^,]*)?(?:,|$)", body.strip()):
                if names.get(n) != "macro":
                    names[n] = "enum value"
        table = re.search(r"#define REGCACHE_STATUS_TABLE\(X\)(.*?)\n\s*\n", text, re.S)
        if table:
            for n in re.findall(r"\bX\((\w+),", table.group(1)):
                names["REGCACHE_" + n] = "enum value"
        # Callback members: function pointers inside struct bodies.
        for body in re.findall(r"\bstruct\s+regcache_\w+\s*\{(.*?)\n\};", text, re.S):
            for n in re.findall(r"\(\s*\*\s*(\w+)\s*\)\s*\(", body):
                names[n] = "callback member"
    options = open(os.path.join(src, "src", "common", "options.c")).read()
    for n in re.findall(r'^\s*(?:\[\w+\]\s*=\s*)?\{\s*"(REGCACHE_\w+)"', options, re.M):
        names[n] = "variable"
    return names


def members(body):
    """The member names of a struct body, or the value names of an enum
    body, in order."""
    out = []
    body = strip_comments(body)
    if "=" in body or not ";" in body:  # an enum
        return re.findall(r"\b([A-Z][A-Z0-9_]+)\b(?:\s*=[^,}]*)?\s*(?:,|$)", body.strip())
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", decl)
        if m:
            out.append(m.group(1))
            continue
        for part in decl.split(","):
            m = re.search(r"(\w+)\s*(?:\[[^]]*\])?\s*$", part)
            if m:
                out.append(m.group(1))
    return out


def header_bodies():
    """struct or enum name -> its members, as the headers declare them."""
    out = {}
    for path in headers:
        text = strip_comments(open(path).read())
        for m in re.finditer(r"\b(?:struct|enum)\s+(regcache_\w+)\s*\{(.*?)\}\s*;", text, re.S):
            out[m.group(1)] = members(m.group(2))
    return out


def synopsis_bodies(path):
    """struct or enum name -> its members, as a page's SYNOPSIS shows them
    whole (a body with "..." shows a part, and is left alone)."""
    text, out, inside = [], {}, False
    for line in open(path).read().split("\n"):
        if line.startswith("# "):
            inside = line.strip() == "# SYNOPSIS"
        elif inside and line.startswith("    "):
            text.append(line)
    code = strip_comments("\n".join(text))
    for m in re.finditer(r"\b(?:struct|enum)\s+(regcache_\w+)\s*\{(.*?)\}\s*;", code, re.S):
        if "..." not in m.group(2):
            out[m.group(1)] = members(m.group(2))
    return out


def sections(lines):
    """(section title, line) for each line of a page, by its "# " headings."""
    title = ""
    for line in lines:
        if line.startswith("# "):
            title = line[2:].strip()
        yield title, line


def page_homes(path):
    """What a page documents: name -> how, and the problems seen in it."""
    lines = open(path).read().split("\n")
    homes, problems = {}, []
    named = []
    for i, line in enumerate(lines):
        if line.strip() == "# NAME":
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            named = [n.strip() for n in lines[j].split(" - ")[0].split(",")]
            break
    for n in named:
        homes[n] = "NAME line"
    nexts = {}
    for i in range(len(lines)):
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        nexts[i] = lines[j] if j < len(lines) else ""
    for i, (section, line) in enumerate(sections(lines)):
        if section == "SYNOPSIS" and line.startswith("    "):
            code = line.strip()
            m = re.match(r"(?:struct|enum)\s+(regcache_\w+)\s*[{;]", code)
            if m:
                homes.setdefault(m.group(1), "SYNOPSIS")
            m = re.match(r"typedef\b.*?\b(regcache_\w+)\s*;", code)
            if m:
                homes.setdefault(m.group(1), "SYNOPSIS")
            m = re.match(r"#define\s+(REGCACHE_\w+)", code)
            if m:
                homes.setdefault(m.group(1), "SYNOPSIS")
            m = re.match(r"(?:__device__\s+)?[\w ]+?[ *](regcache_\w+)\s*\(", code)
            if m and not code.startswith(("struct", "enum")) and m.group(1) not in named:
                problems.append(f"its SYNOPSIS declares {m.group(1)}(), which its NAME line "
                                "does not list (a function's prototype belongs to its page)")
        if section in ("ERRORS", "RETURN VALUE"):
            continue
        if line.startswith("## "):
            homes.setdefault(line[3:].strip(), "heading")
            continue
        if not nexts[i].startswith(":") or line.startswith((":", " ")):
            continue
        for n in re.findall(r"\*\*(REGCACHE_\w+)\*\*", line):
            homes.setdefault(n, "definition")
        m = re.match(r"\*([a-z_]+)\*", line)
        if m:
            homes.setdefault(m.group(1), "definition")
    return homes, problems


def main():
    names = public_names()
    pages = sorted(p for p in os.listdir(os.path.join(src, "docs", "man")) if p.endswith(".md"))
    where = {}
    failures = []
    for page in pages:
        homes, problems = page_homes(os.path.join(src, "docs", "man", page))
        failures += [f"{page}: {p}" for p in problems]
        stem = page.rsplit(".", 2)[0]
        for n, how in homes.items():
            if n == stem and how == "NAME line" and n not in names:
                continue  # a group page's own title, as regcache_callbacks
            if n in names:
                where.setdefault(n, []).append(f"{page} ({how})")
            elif how in ("NAME line", "definition") and n.startswith(("regcache_", "REGCACHE_")):
                failures.append(f"{page}: documents {n} ({how}), which the headers and the "
                                "options table do not have")
    # The summary above each function's declaration names its page.
    for path in headers:
        raw = open(path).read()
        for m in re.finditer(r"(/\*(?:(?!\*/).)*\*/)\s*\n(?:REGCACHE_API|REGCACHE_DEVICE_FN)\b"
                             r"[^(;]*?\b(regcache_\w+)\s*\(", raw, re.S):
            n = m.group(2)
            homes = [h.split(" ")[0] for h in where.get(n, []) if h.endswith("(NAME line)")]
            if len(homes) == 1:
                page = homes[0].rsplit(".", 2)[0] + "(" + homes[0].rsplit(".", 2)[1] + ")"
                if page not in m.group(1):
                    failures.append(f"{os.path.basename(path)}: the comment above {n}() does "
                                    f"not name its page, {page}")
    declared = header_bodies()
    for page in pages:
        for n, shown in synopsis_bodies(os.path.join(src, "docs", "man", page)).items():
            if n in declared and shown != declared[n]:
                failures.append(f"{page}: its SYNOPSIS shows {n} with {', '.join(shown)}; the "
                                f"header declares {', '.join(declared[n])}")
    for n, kind in sorted(names.items()):
        homes = where.get(n, [])
        if not homes:
            failures.append(f"{kind} {n} has no page (see tests/README.md, man pages)")
        elif len(homes) > 1:
            failures.append(f"{kind} {n} is documented in more than one page: "
                            + ", ".join(homes))
    if failures:
        print("\n".join(failures))
        print(f"{len(failures)} problems")
        return 1
    kinds = {}
    for kind in names.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    print(", ".join(f"{v} {k}s" for k, v in sorted(kinds.items())) +
          f": each documented in one of {len(pages)} pages")
    return 0


sys.exit(main())
