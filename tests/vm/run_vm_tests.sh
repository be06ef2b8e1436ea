#!/bin/bash
# run_vm_tests.sh RXEVM BUILD_DIR RESULTS NAME:root|user:PROGRAM...
#
# Boot the soft-RoCE VM once (rxevm.sh, Debian's 6.12 kernel, which has
# /dev/udmabuf) and run every PROGRAM inside it, against rxe0.  Each one's
# output and exit status land in RESULTS/NAME.log and RESULTS/NAME.rc, which
# the vm_NAME ctest entries report (show_vm_result.sh).  `user` programs run
# as nobody under a 2 MiB RLIMIT_MEMLOCK, where pinning more fails for real.
#
# Exit 0 when every program ran (pass or fail: their entries tell), 1 when
# the VM broke down, 77 (skip) when the VM cannot be had on this machine.
set -u
rxevm=$1 build=$2 results=$3
shift 3
export KPKG=linux-image-6.12-amd64 TIMEOUT=${TIMEOUT:-420}
work=${RXEVM_DIR:-/tmp/rxevm}

rm -rf "$results"
mkdir -p "$results"
skip() {
    echo "SKIP: $*" | tee "$results/skipped"
    exit 77
}

# rxevm.sh would apt-get install what is missing; a test must not.
[ -x "$rxevm" ] || skip "no rxevm.sh at $rxevm (clone shared/ beside the checkout)"
missing=""
for p in qemu-system-x86 ibverbs-utils ibverbs-providers libibverbs-dev kmod \
         iproute2 xz-utils; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] || skip "packages missing: apt-get install --no-install-recommends$missing"

# The guest kernel is downloaded once (107 MB) and unpacked under $work by
# rxevm.sh; fetch it here so that an unreachable mirror is a skip.
image=$(apt-cache depends "$KPKG" 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if ! ls -d "$work"/k-"${image:-$KPKG}"/lib/modules >/dev/null 2>&1 &&
   ! ls "$work"/debs/"${image:-none}"_*.deb >/dev/null 2>&1; then
    [ -n "$image" ] || skip "apt does not know $KPKG (apt-get update first)"
    mkdir -p "$work/debs"
    (cd "$work/debs" && apt-get download -qq "$image") ||
        skip "cannot download $image"
fi

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
