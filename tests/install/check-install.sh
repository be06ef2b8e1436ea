#!/usr/bin/env bash
# check-install.sh BUILD_DIR SOURCE_DIR WORK_DIR [CFLAGS]: install BUILD_DIR
# into a prefix, then build and run consumer.c against it twice: with
# pkg-config and with find_package(regcache).  Also checks that the library
# exports the header's functions, versioned, and nothing else
# (tests/abi/check-exports.sh), and that regcache-stat is installed and
# runs.  CFLAGS (a ;-list from CMake) are the sanitizer flags of a
# sanitized build.
set -euo pipefail
build=$1 src=$2 work=$3 cflags=${4:-}
cflags=${cflags//;/ }
rm -rf "$work"; mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(ls "$prefix"/lib*/libregcache.so | head -n1)
libdir=$(dirname "$lib")

"$src/../abi/check-exports.sh" "$lib" "$prefix/include/regcache.h"
readelf -d "$lib" | grep -q 'SONAME.*libregcache.so.0' || { echo "no SONAME"; exit 1; }

# An empty namespace of its own: the tool must run and find nothing there.
REGCACHE_LEDGER_NAMESPACE=install$$ "$prefix/bin/regcache-stat" | grep -q '^no regcache ledger' ||
  { echo "regcache-stat is not installed or does not run"; exit 1; }

export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046
# shellcheck disable=SC2086
cc -Wall -Wextra -Werror $cflags "$src/consumer.c" -o "$work/consumer-pc" $(pkg-config --cflags --libs regcache)
LD_LIBRARY_PATH=$libdir "$work/consumer-pc"

mkdir -p "$work/cmake-src"
cp "$src/consumer.c" "$work/cmake-src/"
cp "$src/CMakeLists.consumer.txt" "$work/cmake-src/CMakeLists.txt"
cmake -S "$work/cmake-src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$cflags" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/cmake-build/consumer"
echo "install check passed"
