/* Each device's budget: how many bytes and entries it may keep unused, and
 * the largest allocation it registers whole. */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>

#include "bar1_budget.h"
#include "cache.h"
#include "gpu_key.h"
#include "last_error.h"
#include "ledger.h"
#include "threads.h"

static size_t or_unlimited(size_t n)
{
    return n ? n : SIZE_MAX;
}

/* A GPU's cache joins the GPU's ledger: with max_bytes 0 the ledger's share
 * is its budget, else it is only counted there (and shown by regcache-stat).
 * Not having one is no error: the cache keeps the budget it has. */
static void join_ledger(struct regcache *c, int slot, struct rc_device *d, size_t own)
{
    char key[RC_GPU_KEY_LEN];
    const char *why = key;
    bool shared = !c->opts.params.max_bytes;
    if (rc_gpu_key(slot, key, sizeof key) == REGCACHE_OK &&
        rc_ledger_attach(key, shared ? own : 0, d->budget_source, &d->ledger) == REGCACHE_OK) {
        d->ledger_limits = shared;
        if (shared)
            atomic_fetch_or_explicit(&c->put_flags, RC_PUT_LEDGER, memory_order_relaxed);
        return;
    }
    why = regcache_last_error();
    rc_lock(&c->lock);
    snprintf(c->ledger_note, sizeof c->ledger_note, "device %d: %s", slot, why);
    rc_unlock(&c->lock);
}

/* params.max_bytes, else what BAR1 can hold for a GPU (shared through the
 * ledger), else (host memory, a GPU whose size nothing tells) no limit. */
static void set_budget(struct regcache *c, int slot, struct rc_device *d)
{
    const struct regcache_params *p = &c->opts.params;
    size_t bytes = p->max_bytes;
    d->budget_source = bytes ? RC_BUDGET_MAX_BYTES : RC_BUDGET_NONE;
    if (!bytes && slot != RC_HOST_SLOT) {
        bytes = rc_bar1_budget(slot);
        d->budget_source = (uint8_t)rc_bar1_budget_source(slot);
    }
    if (slot != RC_HOST_SLOT)
        join_ledger(c, slot, d, bytes);
    bytes = or_unlimited(bytes);
    /* A quarter of the budget: an allocation larger than that, registered
     * whole for a small request, would crowd out everything else, and under
     * a budget smaller than itself it would be evicted at every put. */
    size_t whole = p->whole_allocation_max ? p->whole_allocation_max
                   : bytes == SIZE_MAX     ? SIZE_MAX
                                           : bytes / 4;
    d->whole_max = whole;
    atomic_store_explicit(&d->max_entries, or_unlimited(p->max_entries), memory_order_relaxed);
    atomic_store_explicit(&d->max_bytes, bytes, memory_order_relaxed);
}

struct rc_device *rc_device_set(struct regcache *c, int slot)
{
    struct rc_device *d = &c->dev[slot];
    int state = atomic_load_explicit(&d->budget_state, memory_order_acquire);
    /* One thread reads the budget (NVML may take milliseconds); others wait
     * for it, without holding the cache lock. */
    if (state == 0 &&
        atomic_compare_exchange_strong_explicit(&d->budget_state, &state, 1, memory_order_acquire,
                                                memory_order_acquire)) {
        set_budget(c, slot, d);
        atomic_store_explicit(&d->budget_state, 2, memory_order_release);
        return d;
    }
    while (atomic_load_explicit(&d->budget_state, memory_order_acquire) != 2)
        sched_yield();
    return d;
}

/* Apart from rc_budget_note_locked(), which runs at every miss and
 * eviction: its frame for the statistics would cost every call. */
static __attribute__((noinline)) void publish_counts(struct regcache *c, struct rc_device *d)
{
    struct regcache_stats s;
    regcache_get_device_stats(c, (int)(d - c->dev), &s);
    rc_ledger_publish(d->ledger, &(struct rc_ledger_counts){ .hits = s.hits,
                                                             .misses = s.misses,
                                                             .evictions = s.evictions,
                                                             .inval_tag = s.invalidations_tag,
                                                             .inval_notify = s.invalidations_notify,
                                                             .reg_failures = s.reg_failures });
}

static void note_usage(struct rc_device *d)
{
    rc_ledger_usage(d->ledger, atomic_load_explicit(&d->bytes, memory_order_relaxed) + d->pending,
                    atomic_load_explicit(&d->entries, memory_order_relaxed));
}

/* A note that may publish: the counters go out 100 ms apart at most
 * (regcache-stat's refresh; the per-thread hit sums are the costly part).
 * Out of line too: the clock's frame would cost the notes that skip it. */
static __attribute__((noinline)) void note_and_publish(struct regcache *c, struct rc_device *d,
                                                       uint64_t now)
{
    note_usage(d);
    if (!now)
        now = rc_clock_now_coarse();
    if (!rc_clock_100ms_since(d->ledger_published, now))
        return;
    d->ledger_published = now;
    publish_counts(c, d);
}

void rc_budget_note_locked(struct regcache *c, struct rc_device *d, uint64_t now)
{
    /* A fork child that destroys an inherited cache drains it: the record
     * it would write is the parent's, which still holds those entries. */
    if (!d->ledger || rc_forked(c))
        return;
    /* The miss that evicts notes again, under the lock, once its
     * registration ends: the counters may wait for that note's look at the
     * clock, a registration's time past their 100 ms at most. */
    if (d->making_room)
        note_usage(d);
    else
        note_and_publish(c, d, now);
}

void rc_budget_fini(struct regcache *c)
{
    for (int i = 0; i < RC_MAX_DEVICES; i++) {
        rc_ledger_detach(c->dev[i].ledger);
        c->dev[i].ledger = NULL;
    }
}
