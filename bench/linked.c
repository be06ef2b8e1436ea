/* The library merely linked, as most programs use it: validation AUTO, no
 * LD_PRELOAD.  In-process interception is meant to resolve AUTO to HOOKS
 * here; the rows record the mode the cache really used, and the report
 * compares them with the HOOKS rows only when it is HOOKS. */
#include "bench.h"

void bench_linked(const struct bench_src *s)
{
    struct bench_row hit = { .workload = "linked", .source = s->name, .what = "hit" };
    struct bench_row shared = { .workload = "linked", .source = s->name, .what = "shared" };
    bench_hit_rows(&hit, s, REGCACHE_VALIDATE_AUTO, BENCH_SET, 0, 0);
    bench_hit_rows(&shared, s, REGCACHE_VALIDATE_AUTO, BENCH_SET, 0, 1);
}
