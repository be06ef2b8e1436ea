#!/usr/bin/env bash
# check-installed-preload.sh BUILD_DIR WORK_DIR IDLE_PROGRAM [RUNTIME]:
# install BUILD_DIR into a prefix the loader does not search, then preload
# the installed hook, named by its path alone as users export it, into
# programs that never touch CUDA: /bin/true, python3 and IDLE_PROGRAM, which
# checks that the hook loaded nothing of CUDA, started no thread and opened
# nothing in /dev/shm.  RUNTIME is a sanitizer runtime that must be preloaded
# ahead of a sanitized hook.
set -euo pipefail
build=$1 work=$2 idle=$3 runtime=${4:-}
rm -rf "$work"; mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
hooks=("$prefix"/lib*/libregcache-hook.so)
hook=${hooks[0]}

# Nothing but the hook's own run path may lead the loader to the prefix.
unset LD_LIBRARY_PATH
# The sanitizer would report the leaks of the programs themselves.
export ASAN_OPTIONS=detect_leaks=0
preload=${runtime:+$runtime:}$hook

run() {
  if ! LD_PRELOAD=$preload "$@"; then
    echo "LD_PRELOAD=$preload $* failed"
    exit 1
  fi
}
run /bin/true
run python3 -c pass
echo "/bin/true and python3 start with the installed hook preloaded"

# A namespace of its own: a ledger the hook made would appear under it.
ns=idle$$
threads=$(LD_PRELOAD=$runtime "$idle" count)
REGCACHE_LEDGER_NAMESPACE=$ns run "$idle" "$threads"
shopt -s nullglob
made=(/dev/shm/regcache-"$(id -u)"."$ns"-*)
if [ ${#made[@]} -gt 0 ]; then
  echo "the hook created ${made[*]}"
  rm -f "${made[@]}"
  exit 1
fi
echo "the preloaded hook left a program without CUDA alone"
