/* A cache in use: get+put with every failure counted, the one check of what
 * a timed loop did to the cache, and random hits on a populated cache (what
 * the hits, threads and linked workloads time). */
#include "bench.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

void bench_failed(struct bench_use *u, int status)
{
    if (atomic_fetch_add(&u->failures, 1) == 0)
        u->error = status;
}

void bench_get_put(struct bench_use *u, uintptr_t addr, size_t len)
{
    regcache_entry_t *e;
    int st = regcache_get(u->cache, (void *)addr, len, &e);
    if (st == REGCACHE_OK)
        regcache_put(u->cache, e);
    else
        bench_failed(u, st);
}

uint64_t bench_counter(const struct bench_use *u)
{
    struct regcache_stats st;
    regcache_get_stats(u->cache, &st);
    return *(const uint64_t *)((const char *)&st + u->counter);
}

/* A loop that failed, or that moved the counter otherwise than expected
 * (a hit loop that missed, say), measured something else. */
int bench_use_check(void *use, char *why, size_t len)
{
    struct bench_use *u = use;
    uint64_t failures = atomic_load(&u->failures), now = bench_counter(u);
    snprintf(why, len, "%llu calls failed (%s), counter at %llu where %llu was expected",
             (unsigned long long)failures, failures ? regcache_strerror(u->error) : "-",
             (unsigned long long)now, (unsigned long long)u->expect);
    return failures || now != u->expect ? -1 : 0;
}

int bench_populate(struct bench_use *u, uintptr_t base, size_t regions, char *why, size_t len)
{
    struct regcache_stats st;
    for (size_t i = 0; i < regions; i++)
        bench_get_put(u, base + i * BENCH_REGION, BENCH_GET);
    regcache_get_stats(u->cache, &st);
    u->expect = bench_counter(u);
    snprintf(why, len, "populating: %llu entries cached for %zu regions (%s)",
             (unsigned long long)st.entries, regions, regcache_last_error());
    return u->failures || st.entries != regions ? -1 : 0;
}

static void hit_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct bench_target *t = ctx;
    uintptr_t base = t->base;
    size_t regions = t->set ? t->set : t->regions;
    if (t->set)
        base += l->index % (t->regions / t->set) * t->set * BENCH_REGION;
    uint64_t rng = l->rng;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&t->use, (uintptr_t)bench_pick(base, regions, &rng), BENCH_GET);
    l->rng = rng;
}

int bench_target_open(struct bench_target *t, struct bench_row *r, const struct bench_src *s,
                      int validation, size_t regions, size_t set)
{
    char why[160];
    *t = (struct bench_target){ { .counter = offsetof(struct regcache_stats, misses) },
                                s->base,
                                regions,
                                set,
                                { hit_run, NULL, bench_use_check, t } };
    r->impl = "regcache";
    r->asked = bench_mode_name(validation);
    r->entries = regions;
    if (regions > s->regions) {
        bench_note(r, "the %s source has room for %zu regions only", s->name, s->regions);
        return -1;
    }
    t->use.cache = bench_cache(s, NULL, validation, 0, 0, why, sizeof(why));
    if (!t->use.cache || bench_populate(&t->use, t->base, regions, why, sizeof(why)) != 0) {
        bench_note(r, "failed: %s", why);
        bench_target_close(t);
        return -1;
    }
    r->mode = regcache_validation_mode(t->use.cache);
    return 0;
}

void bench_target_close(struct bench_target *t)
{
    regcache_destroy(t->use.cache);
    t->use.cache = NULL;
}
