#!/usr/bin/env bash
# Install the Debian packages regcache builds, tests and benchmarks with,
# and any named as arguments (bench/run.sh: python3-matplotlib, for PNG plots,
# and valgrind, whose callgrind counts instructions where the CPU cannot).
# Does nothing when they are all present; needs root otherwise.
set -euo pipefail
pkgs=(cmake make gcc clang pkg-config libibverbs-dev ibverbs-providers ibverbs-utils
      rdma-core libcmocka-dev libucx-dev uthash-dev pandoc python3 libjemalloc2 libfabric1 libfabric-dev
      qemu-system-x86 kmod iproute2 xz-utils util-linux clang-format-14 "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "regcache: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
  exit 1
fi
apt-get -o Acquire::Retries=3 update -qq
DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
