/* Statistics: the public snapshot and the REGCACHE_STATS dump. */
#include <inttypes.h>
#include <stdio.h>

#include "cache.h"

static uint64_t load(const atomic_uint_fast64_t *c)
{
    return atomic_load_explicit((atomic_uint_fast64_t *)c, memory_order_relaxed);
}

int regcache_get_stats(const regcache_t *c, struct regcache_stats *s)
{
    if (!c || !s)
        return REGCACHE_ERR_INVALID;
    const struct rc_counters *k = &c->stats;
    s->hits = load(&k->slow_hits);
    for (int i = 0; i < RC_HIT_COUNTERS; i++)
        s->hits += load(&c->hits[i].n);
    s->misses = load(&k->misses);
    s->registrations = load(&k->registrations);
    s->deregistrations = load(&k->deregistrations);
    s->evictions = load(&k->evictions);
    s->invalidations_tag = load(&k->invalidations_tag);
    s->invalidations_notify = load(&k->invalidations_notify);
    s->invalidations_explicit = load(&k->invalidations_explicit);
    s->reg_failures = load(&k->reg_failures);
    s->peak_bytes = load(&k->peak_bytes);
    s->entries = s->bytes = 0;
    for (int i = 0; i <= RC_MAX_DEVICES; i++) {
        s->entries += atomic_load_explicit(&((struct rc_device *)&c->dev[i])->entries,
                                           memory_order_relaxed);
        s->bytes += atomic_load_explicit(&((struct rc_device *)&c->dev[i])->bytes,
                                         memory_order_relaxed);
    }
    return REGCACHE_OK;
}

void rc_stats_dump(const struct regcache *c)
{
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    fprintf(stderr,
            "regcache %p: hits %" PRIu64 " misses %" PRIu64 " registrations %" PRIu64
            " deregistrations %" PRIu64 " evictions %" PRIu64 " invalidations tag %" PRIu64
            " notify %" PRIu64 " explicit %" PRIu64 " reg_failures %" PRIu64
            " entries %" PRIu64 " bytes %" PRIu64 " peak_bytes %" PRIu64 "\n",
            (const void *)c, s.hits, s.misses, s.registrations, s.deregistrations, s.evictions,
            s.invalidations_tag, s.invalidations_notify, s.invalidations_explicit,
            s.reg_failures, s.entries, s.bytes, s.peak_bytes);
    fprintf(stderr, "regcache %p: validation %s: %s\n", (const void *)c,
            c->validation == REGCACHE_VALIDATE_HOOKS ? "HOOKS" : "TAG_CHECK",
            c->opts.validation_reason);
}
