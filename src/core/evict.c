/* Eviction: least-recently-used unused entries of one device leave when its
 * budget or the backend's resources run out. */
#include "cache.h"
#include "ledger.h"

static void prefetch_entry(const struct regcache_entry *e)
{
    for (size_t at = 0; at < sizeof(*e); at += 64)
        __builtin_prefetch((const char *)e + at, 1);
}

/* What the device's next evictions read has mostly left the processor's
 * caches since those victims were last used: the entries, the index slots
 * they are listed in, their tree neighbours.  Fetched now, it arrives
 * while this miss registers and returns instead of stalling the misses
 * that evict them.  Two stages, so that no address waits for a line not
 * yet here: the next victim's slot and neighbours, found through its
 * lines (fetched by the eviction before this one), and the lines of the
 * victim after it.  The victims are the LRU's likely ones, a hint. */
static void prefetch_next_victims(struct regcache *c, struct rc_device *d)
{
    const struct regcache_entry *next = rc_lru_least(&d->lru);
    if (!next)
        return;
    const struct regcache_entry *after = rc_lru_after(next);
    if (after)
        prefetch_entry(after);
    prefetch_entry(next);
    rc_page_index_prefetch_unlist(&c->index, next);
    rc_itree_prefetch_remove(&next->node);
}

size_t rc_evict_locked(struct regcache *c, struct rc_device *d, size_t max_bytes,
                       size_t max_entries, bool speculative_only, enum regcache_reason why,
                       struct regcache_entry **victims)
{
    size_t n = 0;
    uint64_t now = atomic_load_explicit(&c->epoch, memory_order_relaxed);
    while (atomic_load_explicit(&d->bytes, memory_order_relaxed) > max_bytes ||
           atomic_load_explicit(&d->entries, memory_order_relaxed) > max_entries) {
        struct regcache_entry *e =
            rc_lru_pop_unused(&d->lru, now, speculative_only ? 0 : UINT64_MAX);
        if (!e)
            break;
        rc_leave_locked(c, e, why);
        rc_unlink_locked(c, e);
        rc_victim_push(c, victims, e);
        n++;
    }
    if (n)
        prefetch_next_victims(c, d);
    return n;
}

/* Under the lock: the ledger's share for this cache, before it registers
 * `want` more bytes (0: a put that saw another cache ask for room), becomes
 * the device's byte budget. */
static inline void follow_ledger_locked(struct regcache *c, struct rc_device *d, size_t want)
{
    size_t keep = rc_ledger_limit(d->ledger, want);
    size_t max = keep > SIZE_MAX - want ? SIZE_MAX : keep + want;
    /* `over` already holds for the budget as it is: every change of the
     * counts rechecks it. */
    if (max == atomic_load_explicit(&d->max_bytes, memory_order_relaxed))
        return;
    atomic_store_explicit(&d->max_bytes, max, memory_order_relaxed);
    rc_recheck_budget_locked(c, d);
}

bool rc_make_room_locked(struct regcache *c, struct rc_device *d, size_t len, bool speculative,
                         struct regcache_entry **victims)
{
    if (d->ledger_limits)
        follow_ledger_locked(c, d, len);
    size_t max_bytes = atomic_load_explicit(&d->max_bytes, memory_order_relaxed);
    size_t max_entries = atomic_load_explicit(&d->max_entries, memory_order_relaxed);
    /* The notes of these evictions leave the clock to the note that ends
     * the miss (rc_budget_note_locked). */
    d->making_room = true;
    size_t keep_bytes = max_bytes > len ? max_bytes - len : 0;
    rc_evict_locked(c, d, keep_bytes, max_entries - 1, speculative, REGCACHE_REASON_EVICT_BUDGET,
                    victims);
    d->making_room = false;
    return atomic_load_explicit(&d->bytes, memory_order_relaxed) <= keep_bytes &&
           max_bytes >= len &&
           atomic_load_explicit(&d->entries, memory_order_relaxed) < max_entries;
}

void rc_trim(struct regcache *c, struct rc_device *d)
{
    struct regcache_entry *victims = NULL;
    if (rc_forked(c))
        return; /* a fork child's registrations are the parent's */
    if (!rc_over_budget(d) && !(d->ledger_limits && rc_ledger_pressed(d->ledger)))
        return;
    rc_lock(&c->lock);
    if (d->ledger_limits)
        follow_ledger_locked(c, d, 0);
    rc_evict_locked(c, d, atomic_load_explicit(&d->max_bytes, memory_order_relaxed),
                    atomic_load_explicit(&d->max_entries, memory_order_relaxed), false,
                    REGCACHE_REASON_EVICT_BUDGET, &victims);
    rc_check_locked(c);
    rc_unlock(&c->lock);
    rc_release_victims(c, victims);
}
