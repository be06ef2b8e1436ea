#!/usr/bin/env bash
# rxevm.sh 'COMMAND'    run COMMAND (bash) inside a soft-RoCE VM
# rxevm.sh --prepare    only fetch and unpack what the VM needs
#
# No machine we test on has an RDMA NIC, and the kernel we run on is not
# ours to load rdma_rxe into, so the tests that need a real verbs provider
# boot their own kernel: Debian's (fetched with `apt-get download`, never installed) under
# qemu, with the host's root file system as the guest's, read-only over 9p.
# The guest loads rdma_rxe, creates soft-RoCE devices rxe0..rxeN-1, each on
# its own dummy netdev (dummy0..), runs COMMAND from the caller's directory,
# and powers off; COMMAND's output is printed here and its exit status is
# this script's.  In the guest /tmp, /run, /var/tmp and /dev/shm are fresh
# tmpfs; only RWDIR and the work directory are writable host directories.
#
# Environment:
#   RXE_DEVICES  soft-RoCE devices to create (default 1)
#   RWDIR        a host directory the guest may write, at the same path
#                (e.g. a build directory, for results to come back)
#   KPKG         the Debian kernel package (default linux-image-6.12-amd64:
#                it boots faster than the 6.1 default and has /dev/udmabuf)
#   RXEVM_DIR    work directory (default /tmp/regcache-rxevm): the unpacked
#                kernel and busybox, kept for later runs (about 125 MB)
#   TIMEOUT      seconds before the VM is killed (default 420)
#   MEM, SMP     guest memory in MiB (default 2048) and CPUs (default 2)
#   BOOTS        boots to try when the guest kernel oopses before COMMAND
#                starts (default 3)
#   RXEVM_KEEP   set to keep a successful run's directory (console, dmesg)
#
# Exit status: COMMAND's; 255 when the VM broke down before COMMAND ended
# (its run directory is kept and named); 77 when the VM cannot be had on
# this machine (packages missing, kernel not downloadable), with the reason
# on stderr.  --prepare exits 0 or 77, so that a caller can tell "skip" from
# COMMAND's own status.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work=${RXEVM_DIR:-/tmp/regcache-rxevm}
kpkg=${KPKG:-linux-image-6.12-amd64}
devices=${RXE_DEVICES:-1}
rwdir=${RWDIR:-}
timeout=${TIMEOUT:-420}

usage() {
    echo "usage: $0 'COMMAND' | --prepare (see the comment at its top)" >&2
    exit 2
}
[ $# -eq 1 ] || usage
[[ $devices =~ ^[1-9]$ ]] || { echo "rxevm: RXE_DEVICES must be 1 to 9" >&2; exit 2; }

cannot() {
    echo "rxevm: no VM on this machine: $*" >&2
    exit 77
}

# Fetch and unpack the guest kernel and busybox under $work once; later runs
# only check that they are there.  Sets kver and kroot.
prepare() {
    # What the host needs: qemu; kmod and xz to pick the initramfs's modules;
    # and, for the guest (which runs the host's userland), iproute2's `rdma`
    # and the rxe verbs provider.  A test must not install packages: the
    # project's cmake/debian-deps.sh does.
    local p missing=()
    for p in qemu-system-x86 kmod xz-utils iproute2 ibverbs-providers; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] ||
        cannot "packages missing: apt-get install --no-install-recommends ${missing[*]}"

    mkdir -p "$work"
    # Runs sharing the work directory (two builds' tests at once) unpack
    # into it one at a time.
    exec 9>"$work/lock"
    flock 9

    # Debris of a run killed while unpacking (we hold the lock: nobody else
    # is unpacking now).
    rm -rf "$work"/unpack.*

    # KPKG is a meta package; the kernel is in the image package it depends
    # on, linux-image-KVER, whose version names the cache entry.
    local image
    image=$(apt-cache depends "$kpkg" 2>/dev/null |
            awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
    [ -n "$image" ] || cannot "apt does not know $kpkg (run apt-get update)"
    kver=${image#linux-image-}
    kroot=$work/k-$kver
    # modules.dep, which modprobe in the guest resolves dependencies from,
    # is written last: its presence says the tree is complete.
    if [ ! -f "$kroot/lib/modules/$kver/modules.dep" ]; then
        unpack "$image" "$kroot"
        depmod -b "$kroot" "$kver"
    fi

    # The initramfs needs a shell and mount before the host's root is there:
    # a static busybox.
    [ -x "$work/busybox/bin/busybox" ] || unpack busybox-static "$work/busybox"
    flock -u 9
}

# unpack PACKAGE DIR: download PACKAGE's .deb and extract it to DIR.  The
# .deb is deleted afterwards (the kernel's is 107 MB: the unpacked tree is
# the cache); DIR appears only once complete.
unpack() {
    local tmp
    tmp=$(mktemp -d "$work/unpack.XXXXXX")
    (cd "$tmp" && apt-get -o Acquire::Retries=3 download -qq "$1" >download.log 2>&1) ||
        { cat "$tmp/download.log" >&2; rm -rf "$tmp"; cannot "cannot download $1"; }
    dpkg-deb -x "$tmp"/*.deb "$tmp/root"
    rm -rf "$2"
    mv "$tmp/root" "$2"
    rm -rf "$tmp"
}

prepare
[ "$1" != --prepare ] || exit 0

# Per-run directory, shared read-write with the guest: the initramfs, the
# guest's script and parameters, and what comes back (output, status, logs).
run=$(mktemp -d "$work/run.XXXXXX")

# The initramfs: busybox, the modules that mount 9p (dependencies first, as
# modprobe lists them; decompressed, for busybox's insmod reads only plain
# .ko files), and rxevm-init.sh as /init.
initrd=$run/initrd
mkdir -p "$initrd/bin" "$initrd/m" "$initrd/proc" "$initrd/sys" "$initrd/dev" "$initrd/r"
cp "$work/busybox/bin/busybox" "$initrd/bin/"
cp "$here/rxevm-init.sh" "$initrd/init"
modprobe -d "$kroot" -S "$kver" --show-depends -a 9pnet_virtio 9p |
    awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++' |
    while read -r ko; do
        base=$(basename "$ko" .xz)
        case $ko in
            *.xz) xz -dc "$ko" >"$initrd/m/$base" ;;
            *) cp "$ko" "$initrd/m/$base" ;;
        esac
        echo "$base" >>"$initrd/mods"
    done
(cd "$initrd" && find . | "$work/busybox/bin/busybox" cpio -o -H newc 2>/dev/null) >"$run/initrd.cpio"
rm -rf "$initrd"

# Stage 2 runs inside the host's root; the guest cannot see this checkout if
# it lies under /tmp, so its script and parameters travel in the run
# directory.
cp "$here/rxevm-guest.sh" "$run/"
printf '%s\n' "$1" >"$run/cmd"
printf '%s\n' "$kroot" "$devices" "$PWD" >"$run/params"

# Hardware KVM where there is one; TCG otherwise, and also under PVM
# (kvm_pvm), whose /dev/kvm does not boot a stock kernel.
if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then accel=kvm; else accel=tcg; fi
rwopt=()
[ -z "$rwdir" ] ||
    rwopt=(-virtfs "local,path=$rwdir,mount_tag=rwdir,security_model=none,multidevs=remap")

# Under TCG a guest kernel has been seen to oops while booting (CI: an int3
# left by the kernel's live text patching, met by the other vCPU through
# code qemu had translated before the patch).  Until stage 2 writes
# t_shell, nothing of COMMAND has run, so booting again hides nothing of the
# code under test; each such boot's console is kept as console.bootN.log.
# A boot that ran into TIMEOUT is not tried again: three would outlast CI.
boots=${BOOTS:-3}
for ((boot = 1; ; boot++)); do
    # No disk and no NIC: everything comes over 9p.  -no-reboot turns the
    # guest's final reboot into qemu's exit.  The guest runs the host's
    # binaries, so it gets every CPU feature the accelerator can offer (`max`),
    # not qemu64's baseline: code that picks its path by CPUID takes the
    # same one as on the host.
    start=$(date +%s.%N)
    timeout "$timeout" qemu-system-x86_64 -machine "q35,accel=$accel" \
        -cpu max -m "${MEM:-2048}" -smp "${SMP:-2}" \
        -nodefaults -no-user-config -display none -no-reboot -nic none \
        -serial "file:$run/console.log" \
        -kernel "$kroot/boot/vmlinuz-$kver" -initrd "$run/initrd.cpio" \
        -append "console=ttyS0 quiet loglevel=3 panic=-1 rxevm.run=$run rxevm.work=$work${rwdir:+ rxevm.rw=$rwdir}" \
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
        -virtfs "local,path=$work,mount_tag=work,security_model=none,multidevs=remap" \
        "${rwopt[@]}" 2>"$run/qemu.err" && status=0 || status=$?
    end=$(date +%s.%N)
    [ ! -f "$run/t_shell" ] && [ "$status" != 124 ] && [ "$boot" -lt "$boots" ] &&
        grep -q 'Oops:' "$run/console.log" || break
    mv "$run/console.log" "$run/console.boot$boot.log"
    echo "rxevm: the guest kernel broke down while booting (boot $boot of $boots," \
         "$(grep -m1 'Oops:' "$run/console.boot$boot.log" | sed 's/^\[[ .0-9]*\] //'));" \
         "booting again" >&2
done
rm "$run/initrd.cpio"
case $status in
    0) ;;
    124) echo "rxevm: the VM ran past TIMEOUT=$timeout s and was killed" >&2 ;;
    *) echo "rxevm: qemu exited with status $status" >&2 ;;
esac

cat "$run/out" 2>/dev/null || true
rc=255
if [ -f "$run/rc" ]; then
    rc=$(cat "$run/rc")
    awk -v k="$kver" -v a="$accel" -v n="$devices" -v boot="$(cat "$run/t_shell")" \
        -v start="$start" -v end="$end" 'BEGIN {
        printf "rxevm: kernel %s, %s, %d rxe device(s): boot %.1f s, all %.1f s\n",
               k, a, n, boot, end - start }' >&2
elif [ -f "$run/setup.rc" ] && [ "$(cat "$run/setup.rc")" != 0 ]; then
    echo "rxevm: creating the rxe devices failed:" >&2
    cat "$run/setup.log" >&2
else
    echo "rxevm: the VM broke down; console and qemu's errors:" >&2
    # The oops's first line names the fault; the tail may have lost it.
    grep -m1 -E 'Oops:|BUG:|Kernel panic' "$run/console.log" >&2 || true
    tail -n 30 "$run/console.log" "$run/qemu.err" >&2 || true
fi
if [ "$rc" = 0 ] && [ -z "${RXEVM_KEEP:-}" ]; then
    rm -rf "$run"
else
    echo "rxevm: run directory kept: $run" >&2
fi
exit "$rc"
