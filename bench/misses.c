/* The miss path: the backend's reg+dereg alone, the cache's get+put of
 * ranges it does not hold, and then its hit on one of them, all in one run
 * so that the report can take the backend's share out of the miss; with
 * the shared BAR1 ledger on and off. */
#include "bench.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

struct miss {
    struct bench_use use; /* counts misses: one per miss get+put */
    const struct bench_pinner *p;
    uintptr_t base;
    size_t size;
    unsigned ops;
};

static void raw_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct miss *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        if (bench_backend_pin(m->p, (void *)(m->base + i * m->size), m->size) != 0)
            bench_failed(&m->use, REGCACHE_ERR_BACKEND);
}

static void miss_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct miss *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&m->use, m->base + i * m->size, m->size);
    m->use.expect += n;
}

static void hit_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct miss *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&m->use, m->base, m->size);
}

/* Untimed: every sample's ranges start out uncached. */
static void uncache(void *ctx)
{
    struct miss *m = ctx;
    regcache_invalidate(m->use.cache, (void *)m->base, m->ops * m->size);
}

void bench_miss_rows(struct bench_row *r, const struct bench_src *s, const struct bench_pinner *p,
                     size_t size, unsigned ops)
{
    char why[160];
    struct miss m = { { .cache = bench_cache(s, p, REGCACHE_VALIDATE_HOOKS, 0, 0, why, sizeof(why)),
                        .counter = offsetof(struct regcache_stats, misses) },
                      p,
                      s->base,
                      size,
                      ops };
    struct bench_op raw = { raw_run, NULL, bench_use_check, &m };
    struct bench_op miss = { miss_run, uncache, bench_use_check, &m };
    struct bench_op hit = { hit_run, NULL, bench_use_check, &m };
    r->impl = "backend";
    r->what = "reg+dereg";
    r->size = size;
    if (!m.use.cache) {
        bench_note(r, "failed: %s", why);
        return;
    }
    bench_measure(r, &raw, ops);
    r->impl = "regcache";
    r->asked = bench_mode_name(REGCACHE_VALIDATE_HOOKS);
    r->mode = regcache_validation_mode(m.use.cache);
    r->what = "miss";
    bench_measure(r, &miss, ops);
    r->what = "hit";
    bench_measure(r, &hit, bench.batch);
    regcache_destroy(m.use.cache);
}

/* The ledger is on unless REGCACHE_LEDGER=off, which regcache_create()
 * reads: the variable is set before each cache is made, then restored. */
void bench_misses(const struct bench_src *s)
{
    const char *env = getenv("REGCACHE_LEDGER");
    char was[64];
    snprintf(was, sizeof(was), "%s", env ? env : "");
    for (int off = 0; off < 2; off++) {
        struct bench_row r = { .workload = "misses",
                               .source = s->name,
                               .ledger = off ? "off" : "on" };
        if (off)
            setenv("REGCACHE_LEDGER", "off", 1);
        else
            unsetenv("REGCACHE_LEDGER");
        bench_miss_rows(&r, s, NULL, BENCH_REGION, BENCH_MISS_BATCH);
    }
    if (env)
        setenv("REGCACHE_LEDGER", was, 1);
    else
        unsetenv("REGCACHE_LEDGER");
}
