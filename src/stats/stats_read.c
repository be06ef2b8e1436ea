/* Statistics: the public snapshots, the devices seen, the latency
 * histograms and the reset, from the counters the core keeps (stats.h). */
#include "stats_read.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "last_error.h"
#include "host_watch.h"
#include "prefetch.h"
#include "symver.h"
#include "threads.h"

static uint64_t load(const atomic_uint_fast64_t *n)
{
    return atomic_load_explicit((atomic_uint_fast64_t *)n, memory_order_relaxed);
}

bool rc_stats_seen(const struct regcache *c, int slot)
{
    return atomic_load_explicit(&c->dev[slot].budget_state, memory_order_acquire) == 2;
}

_Static_assert(REGCACHE_REASON_COUNT <= sizeof(((struct regcache_stats *)0)->leaves) / 8,
               "regcache_stats.leaves has a column for every reason");

/* The fields that count events (a reset restarts them), and those that
 * describe the cache now and add up over devices. */
#define F(f)                                                                            \
    {                                                                                   \
        offsetof(struct regcache_stats, f), sizeof(((struct regcache_stats *)0)->f) / 8 \
    }
static const struct field {
    size_t offset, n;
} counters[] = { F(hits),
                 F(misses),
                 F(registrations),
                 F(deregistrations),
                 F(evictions),
                 F(invalidations_tag),
                 F(invalidations_notify),
                 F(invalidations_explicit),
                 F(invalidations_monitor),
                 F(reg_failures),
                 F(one_shots),
                 F(rail_registrations),
                 F(rail_reg_failures),
                 F(leaves) },
  gauges[] = { F(entries), F(bytes), F(budget), F(mrs), F(rail_bytes) };
#undef F

static uint64_t *at(struct regcache_stats *s, const struct field *f, size_t i)
{
    return (uint64_t *)((char *)s + f->offset) + i;
}

/* The slot's counters as they stand, before any reset's baseline. */
static void raw_slot(const struct regcache *c, int slot, struct regcache_stats *s)
{
    const struct rc_device *d = &c->dev[slot];
    const struct rc_counters *n = &d->n;
    memset(s, 0, sizeof *s);
    s->hits = load(&n->slow_hits) + load(&n->shared_hits);
    if (c->hit_id >= 0)
        s->hits += rc_thread_sum_hits(c->hit_id, slot);
    s->misses = load(&n->misses);
    s->registrations = load(&n->registrations);
    s->deregistrations = load(&n->deregistrations);
    s->evictions = load(&n->evictions);
    s->invalidations_tag = load(&n->invalidations[RC_BY_TAG]);
    s->invalidations_notify = load(&n->invalidations[RC_BY_NOTIFY]);
    s->invalidations_explicit = load(&n->invalidations[RC_BY_EXPLICIT]);
    s->invalidations_monitor = load(&n->invalidations[RC_BY_MONITOR]);
    s->reg_failures = load(&n->reg_failures);
    s->one_shots = load(&n->one_shots);
    for (int r = 0; r < REGCACHE_REASON_COUNT; r++)
        s->leaves[r] = load(&n->leaves[r]);
    s->mrs = s->registrations - s->deregistrations;
    s->entries = atomic_load_explicit(&d->entries, memory_order_relaxed);
    s->bytes = atomic_load_explicit(&d->bytes, memory_order_relaxed);
    size_t budget = atomic_load_explicit(&d->max_bytes, memory_order_relaxed);
    if (rc_stats_seen(c, slot) && budget != SIZE_MAX)
        s->budget = budget;
    for (unsigned r = 0; r < RC_MAX_RAILS; r++) {
        const struct rc_rail_counters *rc = rc_rail_counters(&c->stats, slot, r);
        s->rail_registrations[r] = load(&rc->registrations);
        s->rail_reg_failures[r] = load(&rc->failures);
        s->rail_bytes[r] = load(&rc->bytes);
    }
}

static uint64_t since(uint64_t now, uint64_t base)
{
    return now > base ? now - base : 0; /* a hit taken back may dip below */
}

/* Add the slot's figures since the last reset to *s. */
static void add_slot(const struct regcache *c, int slot, struct regcache_stats *s)
{
    struct regcache_stats t;
    raw_slot(c, slot, &t);
    const struct regcache_stats *base = &c->stats.base[slot].s;
    for (size_t f = 0; f < sizeof counters / sizeof counters[0]; f++)
        for (size_t i = 0; i < counters[f].n; i++)
            *at(s, &counters[f], i) += since(*at(&t, &counters[f], i),
                                             *at((struct regcache_stats *)base, &counters[f], i));
    for (size_t f = 0; f < sizeof gauges / sizeof gauges[0]; f++)
        for (size_t i = 0; i < gauges[f].n; i++)
            *at(s, &gauges[f], i) += *at(&t, &gauges[f], i);
}

static uint64_t percentile(const struct regcache_latency *l, unsigned percent)
{
    uint64_t rank = (l->count * percent + 99) / 100, seen = 0;
    for (unsigned b = 0; b < RC_LATENCY_BUCKETS && rank; b++)
        if ((seen += l->bucket[b]) >= rank)
            return (uint64_t)2 << b;
    return 0;
}

/* Under base_lock. */
static void latency_locked(const struct regcache *c, int slot, int rail, struct regcache_latency *l)
{
    memset(l, 0, sizeof *l);
    for (int s = slot < 0 ? 0 : slot; s <= (slot < 0 ? RC_DEVICE_SLOTS - 1 : slot); s++)
        for (unsigned r = rail < 0 ? 0 : (unsigned)rail;
             r <= (rail < 0 ? c->rails - 1 : (unsigned)rail); r++) {
            const struct rc_rail_counters *rc = rc_rail_counters(&c->stats, s, r);
            for (unsigned b = 0; b < RC_LATENCY_BUCKETS; b++)
                l->bucket[b] += since(load(&rc->latency[b]), c->stats.base[s].latency[r][b]);
        }
    for (unsigned b = 0; b < RC_LATENCY_BUCKETS; b++)
        l->count += l->bucket[b];
    l->p50_ns = percentile(l, 50);
    l->p99_ns = percentile(l, 99);
}

/* The lock of the figures a reset subtracts.  In a fork's child, a parent
 * thread that held it at the fork never lets it go: the child reads
 * without it (a figure being reset then may read half done).  Returns
 * whether to unlock. */
static bool lock_base(const struct regcache *c)
{
    pthread_mutex_t *m = (pthread_mutex_t *)&c->stats.base_lock;
    if (rc_forked(c))
        return pthread_mutex_trylock(m) == 0;
    pthread_mutex_lock(m);
    return true;
}

static void unlock_base(const struct regcache *c, bool locked)
{
    if (locked)
        pthread_mutex_unlock((pthread_mutex_t *)&c->stats.base_lock);
}

void rc_stats_latency(const struct regcache *c, int slot, int rail, struct regcache_latency *l)
{
    bool locked = lock_base(c);
    latency_locked(c, slot, rail, l);
    unlock_base(c, locked);
}

/* The GPU whose mapping choice the cache's statistics report: the lowest
 * one seen, or -1 (one not seen yet). */
static int mapping_gpu(const struct regcache *c)
{
    for (int g = 0; g < RC_MAX_DEVICES; g++)
        if (rc_stats_seen(c, g))
            return g;
    return -1;
}

/* Slot `slot`'s figures (RC_DEVICE_SLOTS: every slot's) into *out, `size`
 * bytes of it. */
static void fill(const struct regcache *c, int slot, struct regcache_stats *out, size_t size)
{
    struct regcache_stats s = { 0 };
    bool all = slot == RC_DEVICE_SLOTS;
    struct regcache_latency l;
    bool locked = lock_base(c);
    for (int i = all ? 0 : slot; i <= (all ? RC_DEVICE_SLOTS - 1 : slot); i++)
        add_slot(c, i, &s);
    latency_locked(c, all ? -1 : slot, -1, &l);
    unlock_base(c, locked);
    s.peak_bytes = load(all ? &c->peak_bytes : &c->dev[slot].n.peak_bytes);
    s.fds = c->backend.fds_held ? c->backend.fds_held(c->backend.arg) : 0;
    s.reg_latency_p50_ns = l.p50_ns;
    s.reg_latency_p99_ns = l.p99_ns;
    s.rails = c->rails;
    int gpu = all ? mapping_gpu(c) : slot;
    for (unsigned r = 0; r < c->rails && c->backend.rail_choice && slot != RC_HOST_SLOT; r++)
        c->backend.rail_choice(c->backend.arg, gpu, r, &s.dmabuf_mapping[r], &s.data_direct[r]);
    /* Background registrations: the whole cache's, in device stats too. */
    rc_prefetch_counts(c, &s.prefetches, &s.prefetch_failures, &s.prefetch_dropped);
    if (all || slot == RC_HOST_SLOT)
        s.host_unmonitored = rc_host_watch_unwatched(c);
    memcpy(out, &s, size);
}

/* A program built against 0.2 passes the struct as it ended then, at
 * budget: its entry points copy that much, the current ones all of it. */
#define STATS_0_2 offsetof(struct regcache_stats, fds)

static int get_stats(const regcache_t *c, struct regcache_stats *out, size_t size)
{
    if (!c || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get_stats: %s is NULL",
                       !c ? "cache" : "stats");
    fill(c, RC_DEVICE_SLOTS, out, size);
    return REGCACHE_OK;
}

/* The slot of a device the caller may ask about, or -1 with the error set.
 * `unseen_ok`: 0.2's answer (every figure 0) for a device never seen. */
static int device_slot(const regcache_t *c, int device, bool unseen_ok, const char *fn)
{
    if (device != REGCACHE_DEVICE_HOST && (device < 0 || device >= RC_MAX_DEVICES)) {
        rc_fail(REGCACHE_ERR_INVALID, "%s: device %d is neither 0..%d nor REGCACHE_DEVICE_HOST", fn,
                device, RC_MAX_DEVICES - 1);
        return -1;
    }
    int slot = device == REGCACHE_DEVICE_HOST ? RC_HOST_SLOT : device;
    if (!unseen_ok && !rc_stats_seen(c, slot)) {
        rc_fail(REGCACHE_ERR_INVALID,
                "%s: cache \"%s\" has seen no memory of device %d (regcache_get_devices lists "
                "those it has)",
                fn, c->opts.name, device);
        return -1;
    }
    return slot;
}

static int get_device_stats(const regcache_t *c, int device, struct regcache_stats *out,
                            size_t size, bool unseen_ok)
{
    if (!c || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get_device_stats: %s is NULL",
                       !c ? "cache" : "stats");
    int slot = device_slot(c, device, unseen_ok, "regcache_get_device_stats");
    if (slot < 0)
        return REGCACHE_ERR_INVALID;
    fill(c, slot, out, size);
    return REGCACHE_OK;
}

RC_SYMVER(rc_get_stats, regcache_get_stats, "@@REGCACHE_0.3");
int rc_get_stats(const regcache_t *c, struct regcache_stats *s)
{
    return get_stats(c, s, sizeof(*s));
}

RC_SYMVER(rc_get_stats_0_2, regcache_get_stats, "@REGCACHE_0.2");
int rc_get_stats_0_2(const regcache_t *c, struct regcache_stats *s)
{
    return get_stats(c, s, STATS_0_2);
}

RC_SYMVER(rc_get_device_stats, regcache_get_device_stats, "@@REGCACHE_0.3");
int rc_get_device_stats(const regcache_t *c, int device, struct regcache_stats *s)
{
    return get_device_stats(c, device, s, sizeof(*s), false);
}

RC_SYMVER(rc_get_device_stats_0_2, regcache_get_device_stats, "@REGCACHE_0.2");
int rc_get_device_stats_0_2(const regcache_t *c, int device, struct regcache_stats *s)
{
    return get_device_stats(c, device, s, STATS_0_2, true);
}

int regcache_get_devices(const regcache_t *c, int *devices, size_t max, size_t *count)
{
    if (!c || !count || (!devices && max))
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get_devices: %s is NULL",
                       !c       ? "cache"
                       : !count ? "count"
                                : "devices");
    size_t n = 0;
    /* The host first: REGCACHE_DEVICE_HOST sorts before every ordinal. */
    for (int i = 0; i < RC_DEVICE_SLOTS; i++) {
        int slot = i == 0 ? RC_HOST_SLOT : i - 1;
        if (!rc_stats_seen(c, slot))
            continue;
        if (n < max)
            devices[n] = slot == RC_HOST_SLOT ? REGCACHE_DEVICE_HOST : slot;
        n++;
    }
    *count = n;
    return REGCACHE_OK;
}

int regcache_get_latency(const regcache_t *c, int device, int rail, struct regcache_latency *out)
{
    if (!c || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get_latency: %s is NULL",
                       !c ? "cache" : "latency");
    int slot = -1;
    if (device != REGCACHE_DEVICE_ALL &&
        (slot = device_slot(c, device, false, "regcache_get_latency")) < 0)
        return REGCACHE_ERR_INVALID;
    if (rail != REGCACHE_RAIL_ALL && (rail < 0 || (unsigned)rail >= c->rails))
        return rc_fail(REGCACHE_ERR_INVALID,
                       "regcache_get_latency: rail %d is neither 0..%u nor REGCACHE_RAIL_ALL", rail,
                       c->rails - 1);
    rc_stats_latency(c, slot, rail, out);
    return REGCACHE_OK;
}

void rc_stats_rebase(struct regcache *c)
{
    pthread_mutex_lock(&c->stats.base_lock);
    for (int slot = 0; slot < RC_DEVICE_SLOTS; slot++) {
        struct rc_stats_base *b = &c->stats.base[slot];
        raw_slot(c, slot, &b->s);
        for (unsigned r = 0; r < RC_MAX_RAILS; r++)
            for (unsigned k = 0; k < RC_LATENCY_BUCKETS; k++)
                b->latency[r][k] = load(&rc_rail_counters(&c->stats, slot, r)->latency[k]);
    }
    pthread_mutex_unlock(&c->stats.base_lock);
    /* The peaks are raised under the cache lock. */
    rc_lock(&c->lock);
    for (int slot = 0; slot < RC_DEVICE_SLOTS; slot++)
        atomic_store_explicit(&c->dev[slot].n.peak_bytes,
                              atomic_load_explicit(&c->dev[slot].bytes, memory_order_relaxed),
                              memory_order_relaxed);
    atomic_store_explicit(&c->peak_bytes,
                          atomic_load_explicit(&c->total_bytes, memory_order_relaxed),
                          memory_order_relaxed);
    rc_unlock(&c->lock);
}
