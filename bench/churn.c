/* Eviction churn: a working set twice the budget walked in a cycle, so that
 * under LRU every get misses and evicts; under an entry budget and under a
 * byte budget. */
#include "bench.h"

#include <stddef.h>

#define BUDGET 1000

struct cycle {
    struct bench_use use; /* counts misses: every get */
    uintptr_t base;
    size_t next;
};

static void cycle_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct cycle *c = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++) {
        bench_get_put(&c->use, c->base + c->next * BENCH_REGION, BENCH_GET);
        c->next = (c->next + 1) % (2 * BUDGET);
    }
    c->use.expect += n;
}

void bench_churn(const struct bench_src *s)
{
    for (int by_bytes = 0; by_bytes < 2; by_bytes++) {
        struct bench_row r = { .workload = "churn",
                               .source = s->name,
                               .impl = "regcache",
                               .what = by_bytes ? "max_bytes" : "max_entries",
                               .asked = bench_mode_name(REGCACHE_VALIDATE_HOOKS),
                               .entries = BUDGET };
        char why[160];
        struct cycle c = { .use.counter = offsetof(struct regcache_stats, misses),
                           .base = s->base };
        c.use.cache = bench_cache(s, NULL, REGCACHE_VALIDATE_HOOKS, by_bytes ? 0 : BUDGET,
                                  by_bytes ? BUDGET * BENCH_REGION : 0, why, sizeof(why));
        struct bench_op op = { cycle_run, NULL, bench_use_check, &c };
        if (!c.use.cache) {
            bench_note(&r, "failed: %s", why);
            continue;
        }
        /* Fill the cache first, so that every timed get evicts. */
        cycle_run(&c, NULL, 2 * BUDGET);
        c.use.expect = bench_counter(&c.use);
        r.mode = regcache_validation_mode(c.use.cache);
        bench_interleave(&(struct bench_arm){ .row = &r, .op = &op, .ops = bench.batch }, 1);
        regcache_destroy(c.use.cache);
    }
}
