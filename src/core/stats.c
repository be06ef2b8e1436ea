/* Statistics: the public snapshots and the REGCACHE_STATS dump. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "budget_source.h"
#include "cache.h"
#include "last_error.h"
#include "ledger.h"
#include "symver.h"
#include "threads.h"

static uint64_t load(const atomic_uint_fast64_t *n)
{
    return atomic_load_explicit((atomic_uint_fast64_t *)n, memory_order_relaxed);
}

static uint64_t fds_held(const struct regcache *c)
{
    return c->backend.fds_held ? c->backend.fds_held(c->backend.arg) : 0;
}

/* Add slot's counters to *s. */
static void add_device(const struct regcache *c, int slot, struct regcache_stats *s)
{
    struct rc_device *d = (struct rc_device *)&c->dev[slot];
    const struct rc_counters *n = &d->n;
    s->hits += load(&n->slow_hits) + load(&n->shared_hits);
    if (c->hit_id >= 0)
        s->hits += rc_thread_sum_hits(c->hit_id, slot);
    s->misses += load(&n->misses);
    s->registrations += load(&n->registrations);
    s->deregistrations += load(&n->deregistrations);
    s->evictions += load(&n->evictions);
    s->invalidations_tag += load(&n->invalidations[RC_BY_TAG]);
    s->invalidations_notify += load(&n->invalidations[RC_BY_NOTIFY]);
    s->invalidations_explicit += load(&n->invalidations[RC_BY_EXPLICIT]);
    s->reg_failures += load(&n->reg_failures);
    s->one_shots += load(&n->one_shots);
    s->mrs += load(&n->registrations) - load(&n->deregistrations);
    s->entries += atomic_load_explicit(&d->entries, memory_order_relaxed);
    s->bytes += atomic_load_explicit(&d->bytes, memory_order_relaxed);
    size_t budget = atomic_load_explicit(&d->max_bytes, memory_order_relaxed);
    if (atomic_load_explicit(&d->budget_state, memory_order_acquire) == 2 && budget != SIZE_MAX)
        s->budget += budget;
}

static void add_prefetches(const struct regcache *c, struct regcache_stats *s)
{
    s->prefetches = load(&c->pf.queued);
    s->prefetch_failures = load(&c->pf.failures);
    s->prefetch_dropped = load(&c->pf.dropped);
}

/* A program built against 0.2 passes the struct as it ended then, at
 * budget: its entry points copy that much, the current ones all of it. */
#define STATS_0_2 offsetof(struct regcache_stats, fds)

static int get_stats(const regcache_t *c, struct regcache_stats *out, size_t size)
{
    if (!c || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get_stats: %s is NULL",
                       !c ? "cache" : "stats");
    struct regcache_stats s = { 0 };
    for (int i = 0; i < RC_DEVICE_SLOTS; i++)
        add_device(c, i, &s);
    s.peak_bytes = load(&c->peak_bytes);
    s.fds = fds_held(c);
    add_prefetches(c, &s);
    memcpy(out, &s, size);
    return REGCACHE_OK;
}

static int get_device_stats(const regcache_t *c, int device, struct regcache_stats *out,
                            size_t size)
{
    if (!c || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get_device_stats: %s is NULL",
                       !c ? "cache" : "stats");
    if (device != REGCACHE_DEVICE_HOST && (device < 0 || device >= RC_MAX_DEVICES))
        return rc_fail(REGCACHE_ERR_INVALID,
                       "regcache_get_device_stats: device %d is neither 0..%d nor "
                       "REGCACHE_DEVICE_HOST",
                       device, RC_MAX_DEVICES - 1);
    struct regcache_stats s = { 0 };
    int slot = device == REGCACHE_DEVICE_HOST ? RC_HOST_SLOT : device;
    add_device(c, slot, &s);
    s.peak_bytes = load(&c->dev[slot].n.peak_bytes);
    s.fds = fds_held(c);
    add_prefetches(c, &s);
    memcpy(out, &s, size);
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
    return get_device_stats(c, device, s, sizeof(*s));
}

RC_SYMVER(rc_get_device_stats_0_2, regcache_get_device_stats, "@REGCACHE_0.2");
int rc_get_device_stats_0_2(const regcache_t *c, int device, struct regcache_stats *s)
{
    return get_device_stats(c, device, s, STATS_0_2);
}

/* The budget the device got, and from where: never unlimited unsaid. */
static void dump_budget(const struct regcache *c, int slot)
{
    const struct rc_device *d = &c->dev[slot];
    size_t bytes = atomic_load_explicit(&d->max_bytes, memory_order_relaxed);
    if (d->budget_source == RC_BUDGET_NONE)
        fprintf(stderr,
                "regcache %p: device %d: budget unlimited: neither NVML nor the CUDA driver "
                "told this GPU's BAR1 or memory size\n",
                (const void *)c, slot);
    else
        fprintf(stderr, "regcache %p: device %d: budget %zu bytes from %s\n", (const void *)c, slot,
                bytes, rc_budget_source_name(d->budget_source));
}

void rc_stats_dump(const struct regcache *c)
{
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    fprintf(stderr,
            "regcache %p: hits %" PRIu64 " misses %" PRIu64 " registrations %" PRIu64
            " deregistrations %" PRIu64 " evictions %" PRIu64 " invalidations tag %" PRIu64
            " notify %" PRIu64 " explicit %" PRIu64 " reg_failures %" PRIu64 " one_shots %" PRIu64
            " entries %" PRIu64 " bytes %" PRIu64 " peak_bytes %" PRIu64 " fds %" PRIu64
            " mrs %" PRIu64 "\n",
            (const void *)c, s.hits, s.misses, s.registrations, s.deregistrations, s.evictions,
            s.invalidations_tag, s.invalidations_notify, s.invalidations_explicit, s.reg_failures,
            s.one_shots, s.entries, s.bytes, s.peak_bytes, s.fds, s.mrs);
    fprintf(stderr, "regcache %p: validation %s: %s\n", (const void *)c,
            regcache_validation_mode(c) == REGCACHE_VALIDATE_HOOKS ? "HOOKS" : "TAG_CHECK",
            regcache_validation_reason(c));
    if (c->backend.describe) {
        char how[2048];
        c->backend.describe(c->backend.arg, how, sizeof how);
        for (char *line = how, *next; line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            fprintf(stderr, "regcache %p: %s\n", (const void *)c, line);
        }
    }
    if (c->ledger_note[0])
        fprintf(stderr, "regcache %p: %s\n", (const void *)c, c->ledger_note);
    for (int i = 0; i < RC_MAX_DEVICES; i++) {
        if (atomic_load_explicit(&c->dev[i].budget_state, memory_order_acquire) == 2)
            dump_budget(c, i);
        const char *why = c->dev[i].ledger ? rc_ledger_failure(c->dev[i].ledger) : NULL;
        if (why)
            fprintf(stderr, "regcache %p: device %d: %s\n", (const void *)c, i, why);
    }
}
