/* The statistics that misses, registrations and deregistrations keep
 * beside each device's counters (cache.h): per rail, the registration
 * latency, and the baseline that regcache_reset_stats() leaves.  src/stats
 * reads, publishes and resets them. */
#ifndef RC_STATS_H
#define RC_STATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bounds.h"
#include "clock.h"
#include "regcache.h"

#define RC_LATENCY_BUCKETS REGCACHE_LATENCY_BUCKETS

/* One rail of one device.  Readers take no lock.  A failure is counted
 * where the backend's reg returns, without the cache lock: an atomic add.
 * The rest change with what the miss that registered does under the lock
 * anyway (the entry's rails_ready, the device's counters): plain stores,
 * where atomic adds would cost every miss a locked instruction each. */
struct rc_rail_counters {
    atomic_uint_fast64_t registrations, failures;
    atomic_uint_fast64_t bytes; /* registered now: added at reg, taken at dereg */
    atomic_uint_fast64_t latency[RC_LATENCY_BUCKETS];
};

/* What the counters read at the last reset, per device slot: the
 * statistics subtract it (a reset writes nothing that gets write, so the
 * per-thread hit counters stay their owners' alone). */
struct rc_stats_base {
    struct regcache_stats s;
    uint64_t latency[RC_MAX_RAILS][RC_LATENCY_BUCKETS];
};

struct rc_stats {
    /* [slot * RC_MAX_RAILS + rail]; calloc()ed at create (untouched pages
     * cost nothing). */
    struct rc_rail_counters *rails;
    struct rc_stats_base *base; /* [slot] */
    pthread_mutex_t base_lock;  /* base: reset against readers */
};

struct regcache;
struct regcache_entry;

int rc_stats_init(struct rc_stats *st);
void rc_stats_fini(struct rc_stats *st);

static inline struct rc_rail_counters *rc_rail_counters(const struct rc_stats *st, int slot,
                                                        unsigned rail)
{
    return &st->rails[(size_t)slot * RC_MAX_RAILS + rail];
}

/* Under the lock: a registration of e on `rail` took ns and succeeded. */
void rc_stats_registered(struct regcache *c, const struct regcache_entry *e, unsigned rail,
                         uint64_t ns);

/* A reg call of e on `rail` failed. */
void rc_stats_failed(struct regcache *c, const struct regcache_entry *e, unsigned rail);

/* Under the lock: e's registrations (rails_ready) are about to be
 * deregistered. */
void rc_stats_deregistering(struct regcache *c, const struct regcache_entry *e);

#endif
