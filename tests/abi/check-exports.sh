#!/usr/bin/env bash
# check-exports.sh LIB HEADER: LIB exports every function that HEADER
# declares REGCACHE_API, each with a REGCACHE_x.y default version, and
# nothing else but older versions of those functions.  Its first version
# node is REGCACHE_0.2, the one the loader gives programs linked against the
# unversioned 0.2 library.
set -euo pipefail
lib=$1 header=$2

# A declaration may put its name on the line after its return type.
declared=$(grep -v '^#' "$header" | tr '\n' ' ' | grep -o 'REGCACHE_API [^(;]*(' |
           sed 's/.*[ *]\([A-Za-z_0-9]*\)($/\1/' | sort)
[ -n "$declared" ] || { echo "no REGCACHE_API function found in $header"; exit 1; }
# Defined symbols as name@VERSION (older) or name@@VERSION (default); the
# version nodes themselves are absolute symbols.
exports=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '$2 != "A" {print $3}')

fail=0
while read -r sym; do
  name=${sym%%@*}
  if ! [[ $sym =~ ^[A-Za-z_0-9]+@@?REGCACHE_[0-9]+\.[0-9]+$ ]]; then
    echo "exported without a REGCACHE version: $sym"; fail=1
  elif ! grep -qx "$name" <<<"$declared"; then
    echo "exported but not declared REGCACHE_API in the header: $sym"; fail=1
  fi
done <<<"$exports"
defaults=$(grep '@@' <<<"$exports" | sed 's/@@.*//' | sort)
missing=$(comm -23 <(echo "$declared") <(echo "$defaults"))
if [ -n "$missing" ]; then
  echo "declared but not exported with a default version (src/regcache.map):" $missing; fail=1
fi
first=$(readelf -V "$lib" | sed -n 's/.*Index: 2 .*Name: \([^ ]*\).*/\1/p')
if [ "$first" != REGCACHE_0.2 ]; then
  echo "first version node is '$first', not REGCACHE_0.2"; fail=1
fi
[ $fail = 0 ] || exit 1
echo "exports: $(wc -l <<<"$defaults") functions, all versioned, first node $first"
