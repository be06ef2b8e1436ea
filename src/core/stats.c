/* The statistics that misses, registrations and deregistrations keep
 * (stats.h); src/stats reads them. */
#include "stats.h"

#include <stdlib.h>

#include "cache.h"

static uint64_t load(const atomic_uint_fast64_t *n)
{
    return atomic_load_explicit((atomic_uint_fast64_t *)n, memory_order_relaxed);
}

int rc_stats_init(struct rc_stats *st)
{
    st->rails = calloc((size_t)RC_DEVICE_SLOTS * RC_MAX_RAILS, sizeof *st->rails);
    st->base = calloc(RC_DEVICE_SLOTS, sizeof *st->base);
    pthread_mutex_init(&st->base_lock, NULL);
    return st->rails && st->base ? REGCACHE_OK : REGCACHE_ERR_NO_MEMORY;
}

void rc_stats_fini(struct rc_stats *st)
{
    free(st->rails);
    free(st->base);
    pthread_mutex_destroy(&st->base_lock);
}

static unsigned bucket_of(uint64_t ns)
{
    unsigned b = ns < 2 ? 0 : 63u - (unsigned)__builtin_clzll(ns);
    return b < RC_LATENCY_BUCKETS ? b : RC_LATENCY_BUCKETS - 1;
}

/* A counter that only holders of the cache lock change (rc_add_locked). */
static void add_locked(atomic_uint_fast64_t *n, uint64_t delta)
{
    atomic_store_explicit(n, load(n) + delta, memory_order_relaxed);
}

void rc_stats_registered(struct regcache *c, const struct regcache_entry *e, unsigned rail,
                         uint64_t ns)
{
    struct rc_rail_counters *r = rc_rail_counters(&c->stats, e->device_slot, rail);
    rc_count_locked(&r->registrations);
    rc_count_locked(&r->latency[bucket_of(ns)]);
    add_locked(&r->bytes, rc_entry_len(e));
}

void rc_stats_failed(struct regcache *c, const struct regcache_entry *e, unsigned rail)
{
    rc_count(&rc_rail_counters(&c->stats, e->device_slot, rail)->failures);
}

void rc_stats_deregistering(struct regcache *c, const struct regcache_entry *e)
{
    unsigned rails = atomic_load_explicit(&e->rails_ready, memory_order_relaxed);
    for (unsigned r = 0; rails; r++, rails >>= 1)
        if (rails & 1)
            add_locked(&rc_rail_counters(&c->stats, e->device_slot, r)->bytes, -rc_entry_len(e));
}
