#!/bin/sh
# check_ab.sh AB LIB: regcache-ab runs every mode on LIB against itself
# (two namespaces of the same build) without a failed get (which would
# exit 1), printing a positive median for each build; bad arguments fail
# with a message rather than a figure.  No figure is compared: timings
# depend on the machine.
set -u
ab=$1 lib=$2
# Each namespace takes static TLS of its own (bench/ab/run.sh).
export GLIBC_TUNABLES=glibc.rtld.optional_static_tls=65536
status=0
for mode in churn hooks tag; do
    out=$("$ab" "$mode" 64 8 200 "$lib" "$lib") || { echo "FAIL $mode: exit $?"; status=1; continue; }
    positive=$(printf '%s\n' "$out" | awk '$1 == "median" && $2 > 0' | wc -l)
    if [ "$positive" -eq 2 ]; then
        echo "ok $mode"
    else
        echo "FAIL $mode:"; printf '%s\n' "$out"; status=1
    fi
done
for bad in "misses 64 8 200 $lib" "churn 64 8 200 /nonexistent/libregcache.so"; do
    # shellcheck disable=SC2086  # the arguments are words
    if err=$("$ab" $bad 2>&1); then
        echo "FAIL '$bad' succeeded"; status=1
    elif printf '%s\n' "$err" | grep -q '^regcache-ab: '; then
        echo "ok '$bad' refused: $err"
    else
        echo "FAIL '$bad': $err"; status=1
    fi
done
exit $status
