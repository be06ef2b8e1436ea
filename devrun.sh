#!/bin/sh
set -u
uptime
cmake -S . -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DREGCACHE_TESTS=OFF -DREGCACHE_EXAMPLES=OFF -DUCX_RCACHE_INCLUDE_DIR=$PWD/.carry/ucx/include -DUCX_UCS_LIBRARY=$PWD/.carry/ucx/lib/libucs.so.0 -DBENCH_UCX_VERSION=1.13.1 >/dev/null
LD_LIBRARY_PATH=$PWD/.carry/ucx/lib BUILD_DIR=/tmp/bb bench/run.sh $OUT/bench > $OUT/bench.log 2>&1
grep -A8 "== hits" $OUT/bench/report.txt; grep -A40 "== goals" $OUT/bench/report.txt
