#!/usr/bin/env bash
# check-man.sh BUILD_DIR WORK_DIR: install BUILD_DIR (built with pandoc)
# into a prefix and read the man pages from there as a user would, by the
# name of a function with a page of its own and of one listed in a group's
# page, and the overview for transports in section 7; and that a function
# with a page of its own shows that page, not a link to a group page that
# also names it.
set -euo pipefail
build=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
export MANPATH=$prefix/share/man
for page in 3:regcache_get 3:regcache_put 3:regcache_entry_mr 3:regcache_entry_hold \
            7:regcache_transport; do
  section=${page%%:*} f=${page#*:}
  man -w "$section" "$f" | grep -q "^$prefix/share/man/man$section/" ||
    { echo "man -w $section $f: no page under $prefix"; exit 1; }
  MANWIDTH=80 man "$section" "$f" 2>/dev/null | grep -q "$f" ||
    { echo "man $section $f does not show $f"; exit 1; }
done
# Each page's own words: a .so link written over a page would show another.
for page in 3:regcache_reason_name:REGCACHE_REASON_MERGED 3:regcache_device_lookup:REGCACHE_DEVICE_HIT \
            3:regcache_device_keys_attach:drain_timeout_ns; do
  IFS=: read -r section f words <<<"$page"
  MANWIDTH=80 man "$section" "$f" 2>/dev/null | grep -q "$words" ||
    { echo "man $section $f does not show its own page (no \"$words\")"; exit 1; }
done
echo "man pages installed and found"
