/* regcache_notify_free, which the hook calls on every free: on ranges that
 * hold no entry (most frees) and on ranges holding one, which it drops;
 * with 1k and 100k entries cached. */
#include "bench.h"

#include <stddef.h>

struct inval {
    struct bench_use use; /* counts entries dropped by notify_free */
    uintptr_t base;
    size_t entries, first;
};

/* Ranges past the cached regions: nothing to drop. */
static void none_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct inval *v = ctx;
    uint64_t rng = l->rng;
    for (uint64_t i = 0; i < n; i++)
        regcache_notify_free(bench_pick(v->base + v->entries * BENCH_REGION, v->entries, &rng),
                             BENCH_REGION);
    l->rng = rng;
}

/* Untimed: move to the next batch of regions, cached again. */
static void recache(void *ctx)
{
    struct inval *v = ctx;
    v->first = (v->first + 7919) % (v->entries - BENCH_MISS_BATCH);
    for (size_t i = 0; i < BENCH_MISS_BATCH; i++)
        bench_get_put(&v->use, v->base + (v->first + i) * BENCH_REGION, BENCH_GET);
}

static void drop_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct inval *v = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        regcache_notify_free((void *)(v->base + (v->first + i) * BENCH_REGION), BENCH_GET);
    v->use.expect += n;
}

void bench_invalidation(const struct bench_src *s)
{
    static const size_t counts[] = { 1000, 100000 };
    for (size_t k = 0; k < BENCH_NELEM(counts); k++) {
        struct bench_row r = { .workload = "invalidation",
                               .source = s->name,
                               .impl = "regcache",
                               .what = "none",
                               .asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY),
                               .entries = counts[k] };
        struct inval v = { { .counter = offsetof(struct regcache_stats, invalidations_notify) },
                           s->base,
                           counts[k],
                           0 };
        struct bench_op none = { none_run, NULL, bench_use_check, &v };
        struct bench_op drop = { drop_run, recache, bench_use_check, &v };
        char why[160];
        /* notify_free reaches every cache in the process: this is the only one. */
        v.use.cache = bench_cache(s, NULL, REGCACHE_VALIDATE_NOTIFY, 0, 0, why, sizeof(why));
        if (!v.use.cache || bench_populate(&v.use, s->base, counts[k], why, sizeof(why))) {
            bench_note(&r, "failed: %s", why);
            regcache_destroy(v.use.cache);
            continue;
        }
        r.mode = regcache_validation_mode(v.use.cache);
        bench_interleave(&(struct bench_arm){ .row = &r, .op = &none, .ops = bench.batch }, 1);
        r.what = "drop";
        bench_interleave(&(struct bench_arm){ .row = &r, .op = &drop, .ops = BENCH_MISS_BATCH }, 1);
        regcache_destroy(v.use.cache);
    }
}
