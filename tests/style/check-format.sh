#!/usr/bin/env bash
# check-format.sh CLANG_FORMAT SOURCE_DIR: every C, C++ and CUDA source of
# src/, include/, tests/, bench/ and examples/ is as the repo's
# .clang-format (clang-format 14) writes it.  Names the files that are not,
# with the first lines clang-format would change.
set -euo pipefail
clang_format=$1 src=$2
cd "$src"
mapfile -t files < <(find src include tests bench examples -type f \
  \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) |
  sort)
[ ${#files[@]} -gt 0 ] || { echo "no sources found under $src"; exit 1; }
# One run over them all; the files it names are looked at one by one.
mapfile -t bad < <("$clang_format" --style=file --dry-run --Werror "${files[@]}" 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
for f in "${bad[@]}"; do
  echo "not formatted: $f"
  "$clang_format" --style=file "$f" | diff "$f" - | head -6 || true
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "${#bad[@]} of ${#files[@]} files are not formatted: run $clang_format -i on them"
  exit 1
fi
echo "${#files[@]} files formatted as .clang-format says"
