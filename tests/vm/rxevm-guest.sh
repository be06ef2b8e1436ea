#!/bin/bash
# rxevm-guest.sh RUN: stage 2 of the soft-RoCE VM (rxevm.sh), PID 1 inside
# the host's root file system.  Creates the soft-RoCE devices, runs the
# command from RUN/cmd, and leaves everything the host reads in RUN:
#   setup.log, setup.rc  creating the devices (the command runs only if 0)
#   out, rc              the command's output and exit status
#   t_shell              guest uptime when this script began (boot time)
#   dmesg.log            the kernel log
# Not -e: whatever fails, the VM must still power off, or the host waits
# for its timeout.
set -uo pipefail
run=$1
# One line each, from rxevm.sh: the unpacked kernel, how many rxe devices,
# the caller's directory.
{ read -r kroot; read -r devices; read -r cwd; } <"$run/params"
cut -d' ' -f1 /proc/uptime >"$run/t_shell"
export PATH=$run/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb

# The host's root has no modules for this kernel; they are in the unpacked
# tree.  Both our modprobe calls and the kernel's own (rdma_rxe pulls in
# crc32 through the crypto API) go through this wrapper.
mkdir -p "$run/bin"
printf '#!/bin/sh\nexec /usr/sbin/modprobe -d %s "$@"\n' "$kroot" >"$run/bin/modprobe"
chmod +x "$run/bin/modprobe"
echo "$run/bin/modprobe" >/proc/sys/kernel/modprobe

# rxeI on dummyI: a dummy netdev is up at once and sends nothing anywhere;
# rxe delivers traffic between QPs of one device itself (loopback), which is
# all the tests use.  Each device must be ACTIVE before the command starts,
# so that a test never fails for the VM's reasons.
setup() {
    set -ex
    modprobe -a rdma_rxe ib_uverbs dummy
    ip link set lo up
    for ((i = 0; i < devices; i++)); do
        ip link add "dummy$i" type dummy
        ip link set "dummy$i" up
        rdma link add "rxe$i" type rxe netdev "dummy$i"
        rdma link show "rxe$i/1" | grep -q "state ACTIVE"
    done
    rdma link show
}
(setup) >"$run/setup.log" 2>&1
echo $? >"$run/setup.rc"

if [ "$(cat "$run/setup.rc")" = 0 ]; then
    (cd "$cwd" 2>/dev/null || cd /; exec bash "$run/cmd") >"$run/out" 2>&1 </dev/null
    echo $? >"$run/rc"
fi
dmesg >"$run/dmesg.log"
# Reboot at once, without an orderly shutdown: the writable 9p mounts are
# uncached, so everything written is on the host already.  qemu's
# -no-reboot makes the reboot its exit.
echo b >/proc/sysrq-trigger
