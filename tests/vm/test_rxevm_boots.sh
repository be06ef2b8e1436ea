#!/usr/bin/env bash
# test_rxevm_boots.sh: rxevm.sh boots again only when the guest kernel
# oopsed before the command began, never once the command has started.
#
# qemu is replaced by a stand-in on PATH that plays the guest: per boot,
# as the list in $fake/plan says, it oopses while booting (oops), dies
# without an oops (panic: init failed), oopses after stage 2 began
# (late_oops), or runs the command as rxevm-guest.sh would (ok).  Everything
# else is rxevm.sh's own, so the guest kernel must be at hand (--prepare);
# without it the test skips (77).
set -uo pipefail
rxevm=$(cd "$(dirname "$0")" && pwd)/rxevm.sh
"$rxevm" --prepare 2>/dev/null || exit 77

fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
cat >"$fake/qemu-system-x86_64" <<'EOF'
#!/usr/bin/env bash
fake=$(dirname "$0")
for a in "$@"; do
    case $a in
        file:*) console=${a#file:} ;;
        *rxevm.run=*) run=${a#*rxevm.run=}; run=${run%% *} ;;
    esac
done
echo boot >>"$fake/boots"
what=$(sed -n "$(wc -l <"$fake/boots")p" "$fake/plan")
case $what in
    oops) echo '[    3.1] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI' >"$console" ;;
    panic) echo '[    3.1] Kernel panic - not syncing: Attempted to kill init!' >"$console" ;;
    late_oops)
        echo 1.0 >"$run/t_shell"
        echo '[    9.1] Oops: general protection fault' >"$console" ;;
    ok)
        : >"$console"
        echo 1.0 >"$run/t_shell"
        echo 0 >"$run/setup.rc"
        bash "$run/cmd" >"$run/out" 2>&1
        echo $? >"$run/rc" ;;
esac
EOF
chmod +x "$fake/qemu-system-x86_64"

failed=0
# expect NAME PLAN RC BOOTS STDERR_REGEX: run a command under PLAN (one
# word per boot) and check rxevm.sh's status, the boots it made and a line
# of what it said.
expect() {
    local name=$1 plan=$2 want_rc=$3 want_boots=$4 want_err=$5 rc boots
    tr ' ' '\n' <<<"$plan" >"$fake/plan"
    rm -f "$fake/boots"
    PATH=$fake:$PATH BOOTS= "$rxevm" 'echo the command ran; exit 3' >"$fake/out" 2>"$fake/err"
    rc=$?
    boots=$(wc -l <"$fake/boots")
    if [ "$rc" = "$want_rc" ] && [ "$boots" = "$want_boots" ] &&
        grep -Eq "$want_err" "$fake/err"; then
        echo "ok: $name (status $rc, $boots boot(s))"
    else
        echo "FAILED: $name: status $rc (want $want_rc), $boots boot(s)" \
             "(want $want_boots), stderr /$want_err/ expected; stderr was:"
        cat "$fake/err"
        failed=1
    fi
    # Runs that broke down keep their directory; these are ours alone.
    sed -n 's/^rxevm: run directory kept: //p' "$fake/err" | xargs -r rm -rf
}

expect "an oops while booting boots again" "oops ok" 3 2 \
    '^rxevm: the guest kernel broke down while booting \(boot 1 of 3, Oops: int3'
grep -qx 'the command ran' "$fake/out" ||
    { echo "FAILED: the second boot's command output is missing"; failed=1; }
expect "three oopses give up, naming the oops" "oops oops oops ok" 255 3 \
    '^\[ +3\.1\] Oops: int3'
expect "a boot that dies without an oops is not retried" "panic ok" 255 1 \
    'Attempted to kill init'
expect "an oops after the command began is not retried" "late_oops ok" 255 1 \
    'Oops: general protection fault'
exit $failed
