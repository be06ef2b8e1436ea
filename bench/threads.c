/* Aggregate hit throughput at 1 to 32 threads (HOOKS mode): all threads on
 * one shared set of entries, whose lines every core reads; and each thread
 * on a set of its own, as a transport with buffers per queue pair uses the
 * cache.  Beside them, what
 * the machine itself allows: the bare null tag source (a call per
 * operation, nothing shared) through the same runner, whose scaling is
 * bounded only by the cores (their clock falls as more of them run). */
#include "bench.h"

void bench_threads(const struct bench_src *s)
{
    if (!s->driver) {
        struct bench_row bare = {
            .workload = "threads", .source = s->name, .impl = "tag", .what = "query"
        };
        struct bench_src span = *s;
        struct bench_op tag = s->tag;
        span.regions = BENCH_SET;
        tag.ctx = &span;
        bench_series(&bare, &tag);
    }
    unsigned most = bench_thread_counts[BENCH_NELEM(bench_thread_counts) - 1];
    struct bench_row shared = { .workload = "threads", .source = s->name, .what = "shared" };
    struct bench_row own = { .workload = "threads", .source = s->name, .what = "private" };
    bench_hit_rows(&shared, s, REGCACHE_VALIDATE_HOOKS, BENCH_SET, 0, 1);
    bench_hit_rows(&own, s, REGCACHE_VALIDATE_HOOKS, (size_t)most * BENCH_SET, BENCH_SET, 1);
}
