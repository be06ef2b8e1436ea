/* Invalidation: entries leave when their memory goes away (invalidate,
 * notify_free) or when asked to (flush, destroy).
 *
 * A miss is invisible to invalidation between its memory query and the
 * moment its entry joins the cache: an invalidation in that window would be
 * lost, and the miss would cache a registration of memory that is gone.  So
 * every miss announces itself (rc_miss_enter) before it queries, every
 * invalidation that may concern a miss is logged with a sequence number,
 * and the miss, before it publishes, asks whether anything overlapping its
 * range was logged since it began; if so its registration is handed out
 * once and never cached. */
#include "cache.h"
#include "last_error.h"

uint64_t rc_miss_enter(struct regcache *c)
{
    /* The increment comes first: an invalidation that does not see it (and
     * so takes its fast path) finished before this miss's query began. */
    atomic_fetch_add_explicit(&c->misses_begun, 1, memory_order_seq_cst);
    return atomic_load_explicit(&c->inval_seq, memory_order_seq_cst);
}

/* Only lock holders write the count of ended misses: a plain store, where
 * a locked decrement of one shared count would cost every miss a second
 * locked instruction. */
void rc_miss_leave_locked(struct regcache *c)
{
    atomic_store_explicit(&c->misses_ended,
                          atomic_load_explicit(&c->misses_ended, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* Is a miss between its rc_miss_enter() and its rc_miss_leave_locked()?
 * Ended first: every miss counted there began before it ended, so the
 * begun count read next is at least as high, and equal only when each
 * miss that began by then had ended when the first load read. */
static bool misses_in_flight(struct regcache *c)
{
    unsigned ended = atomic_load_explicit(&c->misses_ended, memory_order_acquire);
    return atomic_load_explicit(&c->misses_begun, memory_order_seq_cst) != ended;
}

/* The host memory monitor's unmaps concern pageable host memory only:
 * the CUDA driver maps and unmaps device and pinned memory through libc
 * too, and those have the hooks and their buffer ids. */
static bool concerns(enum regcache_reason why, bool pageable)
{
    return pageable || why != REGCACHE_REASON_FREED_MONITOR;
}

bool rc_invalidated_since_locked(struct regcache *c, uint64_t seq, uintptr_t start, uintptr_t end,
                                 bool pageable, enum regcache_reason *why)
{
    uint64_t now = atomic_load_explicit(&c->inval_seq, memory_order_relaxed);
    if (now - seq > RC_INVAL_LOG) {
        /* The log has wrapped: assume the worst, that the memory was
         * freed. */
        *why = REGCACHE_REASON_FREED_HOOK;
        return true;
    }
    for (uint64_t s = seq + 1; s <= now; s++)
        if (c->inval_log[s % RC_INVAL_LOG].start < end &&
            start < c->inval_log[s % RC_INVAL_LOG].end &&
            concerns(c->inval_log[s % RC_INVAL_LOG].why, pageable)) {
            *why = c->inval_log[s % RC_INVAL_LOG].why;
            return true;
        }
    return false;
}

static void log_locked(struct regcache *c, uintptr_t start, uintptr_t end, enum regcache_reason why)
{
    uint64_t seq = atomic_load_explicit(&c->inval_seq, memory_order_relaxed) + 1;
    c->inval_log[seq % RC_INVAL_LOG].start = start;
    c->inval_log[seq % RC_INVAL_LOG].end = end;
    c->inval_log[seq % RC_INVAL_LOG].why = why;
    atomic_store_explicit(&c->inval_seq, seq, memory_order_seq_cst);
}

static int collect(struct rc_itree_node *n, void *list)
{
    rc_list_push(list, rc_entry_of_node(n));
    return 0;
}

/* Under the lock: zombies (entries held after they left the cache) whose
 * memory is now gone, though they left while it was there (replaced by a
 * merge, say): their holders hear of it now, for this reason, as holders of
 * entries still in the cache do. */
static void zombies_gone_locked(struct regcache *c, uintptr_t start, uintptr_t end,
                                enum regcache_reason why)
{
    if (!rc_memory_gone(why))
        return;
    for (struct regcache_entry *e = c->zombies; e; e = e->link_next)
        if (!rc_memory_gone(e->reason) && rc_entry_overlaps(e, start, end) &&
            concerns(why, rc_entry_pageable(e))) {
            e->reason = (uint8_t)why;
            rc_notice_due_locked(c, e);
        }
}

/* The entries of [start, end) leave the cache for `why`: the unused ones
 * are returned, to be deregistered without the lock. */
static struct regcache_entry *take_out(struct regcache *c, uintptr_t start, uintptr_t end,
                                       enum regcache_reason why)
{
    struct regcache_entry *victims = NULL, *found = NULL;
    rc_lock(&c->lock);
    log_locked(c, start, end, why);
    rc_itree_visit_overlaps(&c->tree, start, end, collect, &found);
    while (found) {
        struct regcache_entry *e = found;
        found = e->link_next;
        /* The tree holds registered ranges; an entry goes only when its own
         * allocation overlaps, so freeing one allocation packed into a page
         * spares its neighbours. */
        if (rc_entry_overlaps(e, start, end) && concerns(why, rc_entry_pageable(e)))
            rc_detach_locked(c, e, &victims, why);
    }
    zombies_gone_locked(c, start, end, why);
    rc_check_locked(c);
    rc_unlock(&c->lock);
    return victims;
}

void rc_cache_invalidate(struct regcache *c, uintptr_t start, uintptr_t end,
                         enum regcache_reason why)
{
    rc_release_victims(c, take_out(c, start, end, why));
    rc_listeners_invalidated(c, start, end);
}

/* Why reading the filter without the lock is enough: an entry is added to
 * the filter under the lock before its miss leaves (a release store of the
 * ended count, which this thread's acquire load synchronises with, and
 * through the lock every earlier leave), and a miss still in flight sends
 * this call to the slow path, where it is logged.  The filter's table is
 * loaded after that: a replacement before the add is seen, and one made
 * later was filled with every entry counted before it, this one included.
 * Zombies are in no filter: while there are any, the slow path looks. */
static bool may_concern(struct regcache *c, uintptr_t start, uintptr_t end)
{
    return misses_in_flight(c) || rc_filter_may_overlap(&c->filter, start, end) ||
           atomic_load_explicit(&c->put_flags, memory_order_relaxed) & RC_PUT_ZOMBIES;
}

void rc_cache_notify(struct regcache *c, uintptr_t start, uintptr_t end, enum regcache_reason why)
{
    if (!may_concern(c, start, end)) {
        /* An entry that left before this notice looked may still be on its
         * way out through a listener, or a listener keep what the memory's
         * going makes stale (rc_listener_pending). */
        atomic_thread_fence(memory_order_acquire);
        rc_listeners_invalidated(c, start, end);
        return;
    }
    rc_cache_invalidate(c, start, end, why);
}

bool rc_cache_notify_later(struct regcache *c, uintptr_t start, uintptr_t end,
                           enum regcache_reason why)
{
    if (may_concern(c, start, end))
        rc_defer_victims(c, take_out(c, start, end, why));
    /* An entry on its way out through a listener, whether it left now or
     * before (the fence as above): the releasing thread tells the
     * listeners, as an invalidation does before it returns. */
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&c->deferred, memory_order_relaxed) ||
           atomic_load_explicit(&c->notices, memory_order_relaxed) ||
           atomic_load_explicit(&c->listeners_pending, memory_order_relaxed);
}

int regcache_invalidate(regcache_t *c, const void *addr, size_t len)
{
    uintptr_t start = (uintptr_t)addr;
    if (!c)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_invalidate: cache is NULL");
    if (len == 0 || len > UINTPTR_MAX - start)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_invalidate: %p + %zu is %s", addr, len,
                       len ? "wrapping the address space" : "empty");
    if (rc_forked(c))
        return rc_fail(REGCACHE_ERR_FORKED, "regcache_invalidate: the cache was created before "
                                            "fork()");
    rc_cache_invalidate(c, start, start + len, REGCACHE_REASON_INVALIDATE);
    return REGCACHE_OK;
}

int regcache_flush(regcache_t *c)
{
    if (!c)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_flush: cache is NULL");
    if (rc_forked(c))
        return rc_fail(REGCACHE_ERR_FORKED, "regcache_flush: the cache was created before fork()");
    struct regcache_entry *victims = NULL;
    rc_lock(&c->lock);
    for (int i = 0; i < RC_DEVICE_SLOTS; i++)
        rc_evict_locked(c, &c->dev[i], 0, 0, false, REGCACHE_REASON_FLUSH, &victims);
    rc_check_locked(c);
    rc_unlock(&c->lock);
    rc_release_victims(c, victims);
    return REGCACHE_OK;
}

static void drain_visit(struct rc_itree_node *n, void *list)
{
    rc_list_push(list, rc_entry_of_node(n));
}

void rc_cache_drain(struct regcache *c)
{
    struct regcache_entry *victims = NULL, *all = NULL;
    bool child = rc_forked(c);
    /* In a fork child another thread may have held the lock at fork time;
     * the child must not wait for it. */
    if (!child)
        rc_lock(&c->lock);
    rc_itree_visit_all(&c->tree, drain_visit, &all);
    /* Left the cache, not yet deregistered: nobody else will now. */
    struct regcache_entry *late =
        atomic_exchange_explicit(&c->deferred, NULL, memory_order_acquire);
    while (all) {
        struct regcache_entry *e = all;
        all = e->link_next;
        rc_leave_locked(c, e, REGCACHE_REASON_DESTROY);
        rc_unlink_locked(c, e);
        rc_victim_push(c, &victims, e);
    }
    rc_drain_entries_locked(c, &victims);
    if (!child)
        rc_unlock(&c->lock);
    rc_release_victims(c, late);
    rc_release_victims(c, victims);
}
