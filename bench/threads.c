/* Aggregate hit throughput at 1 to 32 threads (NOTIFY mode): all threads on
 * one shared set of entries, whose lines every core reads; and each thread
 * on a set of its own, as a transport with buffers per queue pair uses the
 * cache.  Beside them, what the machine itself allows: the bare null tag
 * source (a call per operation, nothing shared) through the same runner,
 * whose scaling is bounded only by the cores (their clock falls as more of
 * them run); and UCX on the shared set.  All are one interleaved series, so
 * that the machine's own ratio is taken under the conditions of the
 * regcache ratios it is printed beside. */
#include "bench.h"

void bench_threads(const struct bench_src *s)
{
    unsigned most = bench_thread_counts[BENCH_NELEM(bench_thread_counts) - 1];
    struct bench_src span = *s;
    struct bench_row shared = { .workload = "threads", .source = s->name, .what = "shared" };
    struct bench_row own = { .workload = "threads", .source = s->name, .what = "private" };
    struct bench_row ucx = { .workload = "ucx", .source = s->name, .what = "shared" };
    struct bench_row protos[4];
    struct bench_op ops[4];
    struct bench_target t[2];
    struct bench_ucx *u = NULL;
    size_t n = 0;
    span.regions = BENCH_SET;
    if (!s->driver) {
        protos[n] = (struct bench_row){
            .workload = "threads", .source = s->name, .impl = "tag", .what = "query"
        };
        ops[n] = s->tag;
        ops[n++].ctx = &span;
    }
    if (bench_target_open(&t[0], &shared, s, REGCACHE_VALIDATE_NOTIFY, BENCH_SET, 0) == 0) {
        protos[n] = shared;
        ops[n++] = t[0].op;
    }
    if (bench_target_open(&t[1], &own, s, REGCACHE_VALIDATE_NOTIFY, (size_t)most * BENCH_SET,
                          BENCH_SET) == 0) {
        protos[n] = own;
        ops[n++] = t[1].op;
    }
    if (!s->driver && (u = bench_ucx_open(&ucx, s, BENCH_SET, &ops[n])))
        protos[n++] = ucx;
    bench_series(protos, ops, n);
    bench_ucx_close(u);
    bench_target_close(&t[0]);
    bench_target_close(&t[1]);
}
