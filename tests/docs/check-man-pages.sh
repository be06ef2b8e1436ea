#!/usr/bin/env bash
# check-man-pages.sh SOURCE_DIR: every REGCACHE_API function of
# include/regcache.h has a man page: docs/man/<function>.3.md, or a page
# whose NAME line lists it.
set -euo pipefail
src=$1
header=$src/include/regcache.h
funcs=$(sed -n 's/^REGCACHE_API[^(]*[ *]\(regcache_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u)
[ -n "$funcs" ] || { echo "no REGCACHE_API function found in $header"; exit 1; }
# The NAME lines: the line after "# NAME", up to " - ".
named=$(for page in "$src"/docs/man/*.3.md; do
  awk '/^# NAME/ { getline; while ($0 == "") getline; sub(/ - .*/, ""); print; exit }' "$page"
done | tr ',' '\n' | tr -d ' ' | sort -u)
missing=$(comm -23 <(echo "$funcs") <(echo "$named"))
if [ -n "$missing" ]; then
  echo "REGCACHE_API functions without a man page (add docs/man/<name>.3.md," \
       "or list them in a page's NAME line):"
  echo "$missing"
  exit 1
fi
echo "$(echo "$funcs" | wc -l) functions, each with a man page"
