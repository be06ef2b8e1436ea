/* The library merely linked, as most programs use it: validation AUTO, no
 * LD_PRELOAD.  In-process interception is meant to resolve AUTO to HOOKS
 * here; the rows record the mode the cache really used, and the report
 * compares them with NOTIFY rows (the same hits, trusting the bench's own
 * notices, nothing patched) measured interleaved with them (the hit at
 * 1k entries in blocks of samples, the shared set in one series), when it is
 * HOOKS. */
#include "bench.h"

void bench_linked(const struct bench_src *s)
{
    static const int modes[2] = { REGCACHE_VALIDATE_NOTIFY, REGCACHE_VALIDATE_AUTO };
    struct bench_target t[2];
    struct bench_row hit[2], shared[2];
    struct bench_arm arms[2];
    struct bench_op ops[2];
    size_t n = 0;
    for (size_t i = 0; i < 2; i++) {
        hit[n] = (struct bench_row){ .workload = "linked", .source = s->name, .what = "hit" };
        if (bench_target_open(&t[i], &hit[n], s, modes[i], BENCH_SET, 0) != 0)
            continue;
        shared[n] = hit[n];
        shared[n].what = "shared";
        ops[n] = t[i].op;
        arms[n] = (struct bench_arm){ .row = &hit[n], .op = &ops[n], .ops = bench.batch };
        n++;
    }
    bench_interleave(arms, n);
    bench_series(shared, ops, n);
    bench_target_close(&t[0]);
    bench_target_close(&t[1]);
}
