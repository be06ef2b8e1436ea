#!/usr/bin/env bash
# check-man.sh BUILD_DIR WORK_DIR: install BUILD_DIR (built with pandoc)
# into a prefix and read the man pages from there as a user would, by the
# name of a function with a page of its own and of one listed in a group's
# page.
set -euo pipefail
build=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
export MANPATH=$prefix/share/man
for f in regcache_get regcache_put regcache_entry_mr; do
  man -w "$f" | grep -q "^$prefix/share/man/man3/" || { echo "man -w $f: no page under $prefix"; exit 1; }
  MANWIDTH=80 man "$f" 2>/dev/null | grep -q "$f" || { echo "man $f does not show $f"; exit 1; }
done
echo "man pages installed and found"
