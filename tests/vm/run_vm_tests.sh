#!/bin/bash
# run_vm_tests.sh BUILD_DIR RESULTS NAME:root|user:PROGRAM...
#
# Boot the soft-RoCE VM once (rxevm.sh, beside this script) and run every
# PROGRAM inside it.  The VM has eight devices, rxe0 to rxe7, each on its own
# netdev: single-device tests use the first (rxe0), multi-rail tests two or
# all eight.
# Each program's output and exit status land in RESULTS/NAME.log and
# RESULTS/NAME.rc, which the vm_NAME ctest entries report
# (show_vm_result.sh).  `user` programs run as nobody under a 2 MiB
# RLIMIT_MEMLOCK, where pinning more fails for real.
#
# Exit 0 when every program ran (pass or fail: their entries tell), 1 when
# the VM broke down, 77 (skip) when the VM cannot be had on this machine.
set -uo pipefail
rxevm=$(dirname "$0")/rxevm.sh
build=$1 results=$2
shift 2
export RXE_DEVICES=8

rm -rf "$results"
mkdir -p "$results"

# Missing packages or no kernel to download are this machine's limits, not
# test failures: skip, and say why (rxevm.sh's reason, on stderr).
"$rxevm" --prepare 2>"$results/prepare.log"
case $? in
    0) ;;
    77) echo "SKIP: $(cat "$results/prepare.log")" | tee "$results/skipped"
        exit 77 ;;
    *) cat "$results/prepare.log"
       exit 1 ;;
esac

# The guest runs the programs from the build directory, shared read-write
# (so that results come back, and so that a build under /tmp, which is a
# fresh tmpfs in the guest, stays visible).  `user` programs are copied to
# the guest's /tmp first, so that nobody can run them wherever the build is.
cmd='chmod 666 /dev/infiniband/*; mkdir -p /tmp/vmuser; '
names=()
for spec in "$@"; do
    [ -n "$spec" ] || continue
    IFS=: read -r name as prog <<<"$spec"
    names+=("$name")
    out="$results/$name"
    if [ "$as" = user ]; then
        cmd+="cp '$prog' /tmp/vmuser/ && chmod 755 /tmp/vmuser/* && (cd /tmp &&"
        cmd+=" prlimit --memlock=2097152:2097152 setpriv --reuid=65534"
        cmd+=" --regid=65534 --clear-groups /tmp/vmuser/$(basename "$prog"))"
    else
        cmd+="'$prog'"
    fi
    cmd+=" >'$out.log' 2>&1; echo \$? >'$out.rc'; "
done

RWDIR=$build "$rxevm" "$cmd"
echo "[vm] rxevm.sh exited with $?"

broken=0
for name in "${names[@]}"; do
    if [ ! -f "$results/$name.rc" ]; then
        echo "[vm] $name: NO RESULT"
        broken=1
        continue
    fi
    case $(cat "$results/$name.rc") in
        0) echo "[vm] $name: passed" ;;
        77) echo "[vm] $name: skipped: $(grep -m1 SKIP "$results/$name.log")" ;;
        *) echo "[vm] $name: FAILED (exit $(cat "$results/$name.rc"))" ;;
    esac
done
exit $broken
