#!/bin/busybox sh
# shellcheck shell=sh
# /init of the soft-RoCE VM's initramfs (rxevm.sh builds it): mount the
# host's root file system over 9p and hand over to rxevm-guest.sh inside it.
# Only busybox exists until then.  Any failure ends init, which panics the
# kernel; panic=-1 and qemu's -no-reboot make that qemu's exit, and
# rxevm.sh reports the console.
set -e
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
# 9p and its transport, dependencies first (rxevm.sh listed them so).
while read -r m; do insmod "/m/$m"; done </mods

# rxevm.sh passes the run and work directories and the optional read-write
# directory on the kernel command line.
run='' work='' rw=''
read -r cmdline </proc/cmdline
for arg in $cmdline; do
    case $arg in
        rxevm.run=*) run=${arg#*=} ;;
        rxevm.work=*) work=${arg#*=} ;;
        rxevm.rw=*) rw=${arg#*=} ;;
    esac
done

# msize: messages of 256 KiB, more than the default, for fewer round trips
# when programs and libraries load.  cache=loose on the read-only root: nothing
# changes it during a run, so the guest may cache its pages and metadata.
opt=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$opt,ro,cache=loose" hostroot /r
for d in proc sys dev; do mount --move "/$d" "/r/$d"; done
mkdir -p /r/dev/pts /r/dev/shm
mount -t devpts devpts /r/dev/pts
mount -t tmpfs shm /r/dev/shm
for d in /tmp /run /var/tmp; do mount -t tmpfs tmpfs "/r$d"; done
# The host directories the guest writes, over the fresh /tmp when they lie
# under it; never cached, so that what the guest writes is on the host
# when it powers off.
mkdir -p "/r$work"
mount -t 9p -o "$opt" work "/r$work"
[ -z "$rw" ] || { mkdir -p "/r$rw" && mount -t 9p -o "$opt" rwdir "/r$rw"; }
# chroot, not switch_root: PID 1 shares its root with the kernel's threads
# (it was started with CLONE_FS), so its chroot also moves the kernel's
# usermode helpers, modprobe for module autoloading among them, into the
# host's root.
exec chroot /r /bin/bash "$run/rxevm-guest.sh" "$run"
