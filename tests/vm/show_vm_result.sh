#!/bin/bash
# show_vm_result.sh RESULTS NAME [REGEX...]
# Report what VM test program NAME did in vm_boot's run (run_vm_tests.sh):
# its output, and its exit status (77 = skipped, with its reason).  Each
# REGEX must also match a line of the output.
set -u
results=$1 name=$2
shift 2
if [ -f "$results/skipped" ]; then
    cat "$results/skipped"
    exit 77
fi
if [ ! -f "$results/$name.rc" ]; then
    echo "FAIL: no result for $name: the VM run (test vm_boot) did not reach it"
    exit 1
fi
cat "$results/$name.log"
rc=$(cat "$results/$name.rc")
[ "$rc" = 0 ] || exit "$rc"
for re in "$@"; do
    grep -Eq -- "$re" "$results/$name.log" ||
        { echo "FAIL: no line matches: $re"; exit 1; }
done
