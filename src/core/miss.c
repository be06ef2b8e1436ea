/* The slow path of a get: the memory is described, the cache is searched
 * under its lock, and what is missing is registered without it - a new
 * entry, or an existing entry's registration on another rail.
 *
 * One registration is in flight per rail of an entry at a time (its first,
 * or one more rail): concurrent gets that need the same rail of the same
 * entry wait for it instead of registering the memory again, except the
 * registering thread itself (a backend callback asking for its own range),
 * which is told so.  A get on another rail never waits: it registers its
 * rail beside the one in flight, on a pending entry too, holding it.
 *
 * A background registration (prefetch.h) comes this way without an entry
 * to hand out (out == NULL): it waits for nothing, holds nothing when done,
 * and its entry is speculative - stamped with no use, evicting none that
 * was used. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "compiler.h"
#include "hold.h"
#include "host_seam.h"
#include "last_error.h"
#include "threads.h"

__thread struct rc_get_arg rc_get_arg __attribute__((tls_model("initial-exec")));
__thread bool rc_get_nonblocking __attribute__((tls_model("initial-exec")));

/* The thread a registration belongs to: the address of a thread-local is
 * unique among live threads and needs no record. */
static const void *self_token(void)
{
    return &rc_thread_current;
}

/* Under the lock: wait for a registration in flight to end. */
static void wait_for_registration(struct regcache *c)
{
    c->registration_waiters++;
    rc_cond_wait(&c->registered, &c->lock);
    c->registration_waiters--;
}

/* A miss's last locked step: it leaves (invalidate.c), and unlocks. */
static void unlock_leaving(struct regcache *c)
{
    rc_miss_leave_locked(c);
    rc_unlock(&c->lock);
}

/* Under the lock: a registration ended.  Nearly always nobody waits, and
 * then the broadcast, a system call, is skipped. */
static void registration_ended(struct regcache *c)
{
    if (c->registration_waiters)
        rc_cond_broadcast(&c->registered);
}

/* The buffer id at addr by a list of mappings (base0, id0, more...). */
static uint64_t id_at(uintptr_t base0, uint64_t id0, const struct rc_mapping *more, uint32_t nmore,
                      uintptr_t addr)
{
    uint64_t id = id0;
    (void)base0;
    for (uint32_t i = 0; i < nmore && more[i].base <= addr; i++)
        id = more[i].buffer_id;
    return id;
}

static uint64_t entry_id_at(const struct regcache_entry *e, uintptr_t addr)
{
    return id_at(e->match_start, e->buffer_id, e->more, e->nmore, addr);
}

static uint64_t want_id_at(const struct rc_want *w, uintptr_t addr)
{
    return id_at(w->match_start, w->buffer_id, w->more, w->nmore, addr);
}

/* Do e and w say different buffer ids anywhere both describe?  Then e is a
 * registration of memory that was freed and reallocated at the same
 * address: it must go, whatever the validation mode. */
static bool stale(const struct regcache_entry *e, const struct rc_want *w)
{
    uintptr_t lo = e->match_start > w->match_start ? e->match_start : w->match_start;
    uintptr_t hi = e->match_end < w->match_end ? e->match_end : w->match_end;
    if (lo >= hi)
        return false;
    /* Ids change only at mapping bases: check where either list starts one. */
    uintptr_t points[1 + 2 * 8];
    unsigned n = 0;
    points[n++] = lo;
    for (uint32_t i = 0; i < e->nmore && n < 9; i++)
        if (e->more[i].base > lo && e->more[i].base < hi)
            points[n++] = e->more[i].base;
    for (uint32_t i = 0; i < w->nmore && n < 17; i++)
        if (w->more[i].base > lo && w->more[i].base < hi)
            points[n++] = w->more[i].base;
    for (unsigned i = 0; i < n; i++) {
        uint64_t a = entry_id_at(e, points[i]), b = want_id_at(w, points[i]);
        if (a && b && a != b)
            return true;
    }
    return false;
}

/* Do e and w say the same buffer id at addr? */
static bool same_at(const struct regcache_entry *e, const struct rc_want *w, uintptr_t addr)
{
    return entry_id_at(e, addr) == want_id_at(w, addr);
}

/* Does e serve w: it covers the request, and over the request it holds the
 * memory w describes (the same id wherever either of them starts a
 * mapping)?  An entry that spans several VMM mappings so serves requests
 * inside any one of them, which describe that mapping alone. */
static bool serves(const struct regcache_entry *e, const struct rc_want *w)
{
    if (!rc_entry_covers(e, w->start, w->end) || !same_at(e, w, w->start))
        return false;
    for (uint32_t i = 0; i < e->nmore; i++)
        if (e->more[i].base > w->start && e->more[i].base < w->end &&
            !same_at(e, w, e->more[i].base))
            return false;
    for (uint32_t i = 0; i < w->nmore; i++)
        if (w->more[i].base < w->end && !same_at(e, w, w->more[i].base))
            return false;
    return true;
}

struct lookup {
    const struct rc_want *want;
    unsigned rail;
    unsigned narrower; /* access of entries that serve w but for its access */
    struct regcache_entry *found, *busy, *stale;
};

static int lookup_visit(struct rc_itree_node *n, void *arg)
{
    struct lookup *l = arg;
    struct regcache_entry *e = rc_entry_of_node(n);
    if (stale(e, l->want)) {
        rc_list_push(&l->stale, e);
        return 0;
    }
    if (!serves(e, l->want))
        return 0;
    if (!rc_access_covers(e->access, l->want->access)) {
        l->narrower |= e->access & ~RC_ACCESS_DEFAULT;
        return 0;
    }
    if (e->rails_pending >> l->rail & 1) {
        l->busy = e;
        return 0;
    }
    l->found = e;
    return 1;
}

/* Under the lock: an entry serving w on whose `rail` no registration is in
 * flight (ready, or pending with another rail in flight), or NULL with
 * *busy set to an entry whose registration of that rail will serve it.
 * Stale entries met on the way leave the cache.  Entries that would serve
 * w but for its access add theirs to w's: a registration for w then
 * replaces them (rc_retire_covered_locked). */
static struct regcache_entry *lookup_locked(struct regcache *c, struct rc_want *w, unsigned rail,
                                            struct regcache_entry **busy,
                                            struct regcache_entry **victims)
{
    struct lookup l = { .want = w, .rail = rail };
    rc_itree_visit_overlaps(&c->tree, w->start, w->end, lookup_visit, &l);
    while (l.stale) {
        struct regcache_entry *e = l.stale;
        l.stale = e->link_next;
        rc_detach_locked(c, e, victims, REGCACHE_REASON_FREED_TAG);
    }
    if (l.narrower)
        w->access = rc_access_of(c, (w->access & ~RC_ACCESS_DEFAULT) | l.narrower);
    *busy = l.found ? NULL : l.busy;
    return l.found;
}

static COLD int reentrant(const struct rc_want *w)
{
    return rc_fail(REGCACHE_ERR_REENTRANT,
                   "get of [%p, %p) from the backend callback that is registering it",
                   (void *)w->start, (void *)w->end);
}

/* Under the lock: a new pending entry for w, held by this thread, in the
 * tree so that concurrent misses of `rail` wait for it. */
static struct regcache_entry *new_pending_locked(struct regcache *c, struct rc_want *w,
                                                 unsigned rail)
{
    struct regcache_entry *e = rc_entry_new_locked(c);
    if (!e)
        return NULL;
    atomic_store_explicit(&e->match_start, w->match_start, memory_order_relaxed);
    atomic_store_explicit(&e->match_end, w->match_end, memory_order_relaxed);
    atomic_store_explicit(&e->rails_ready, 0, memory_order_relaxed);
    e->buffer_id = w->buffer_id;
    e->cache = c;
    e->heavy_scan = atomic_load_explicit(&c->fenceless, memory_order_relaxed);
    e->more = w->more;
    e->nmore = w->nmore;
    w->more = NULL; /* the entry owns the list now */
    w->nmore = 0;
    e->device_slot = w->slot;
    e->device = w->device;
    e->access = w->access;
    e->noticed = false;
    /* Why a registration handed out once leaves, unless an invalidation
     * says otherwise: the LRU could not take it. */
    e->reason = REGCACHE_REASON_EVICT_EXHAUSTED;
    if (c->pool.priv_size)
        memset(rc_entry_priv(e), 0, c->pool.priv_size);
    atomic_store_explicit(&e->last_use, 0, memory_order_relaxed);
    /* Its handles need no clearing: one is read only for a rail in
     * rails_ready, after that rail's registration wrote it.  The tree's
     * insert sets the rest of its node. */
    e->node.start = w->reg_start;
    e->node.end = w->reg_end;
    e->state = RC_PENDING;
    e->rails_pending = 1u << rail;
    e->registrants[rail] = self_token();
    e->heap_idx = RC_LRU_NONE;
    e->pages = e->pages_inline;
    e->npages = 0;
    e->pages_cap = RC_INLINE_PAGES;
    e->link_next = e->link_prev = NULL;
    /* In the pool refs read detached, so no stale reader raised them: a
     * plain store is safe, and from here on they change only atomically. */
    atomic_store_explicit(&e->refs, 1, memory_order_release);
    rc_itree_insert(&c->tree, &e->node);
    return e;
}

static void refill(struct rc_itree_node *n, void *table)
{
    struct regcache_entry *e = rc_entry_of_node(n);
    if (e->state == RC_READY)
        rc_filter_refill(table, e->match_start, e->match_end);
}

/* Under the lock: the filter's fine table is crowded, and frees of memory
 * the cache never saw would take the lock.  The ready entries in the tree
 * are exactly those counted in the filter; one pass over them each time
 * the table quadruples. */
static void grow_filter_locked(struct regcache *c)
{
    struct rc_filter_table *t = rc_filter_grow_begin(&c->filter);
    if (!t)
        return; /* it stays crowded: correct, and slower */
    rc_itree_visit_all(&c->tree, refill, t);
    rc_filter_grow_end(&c->filter, t);
}

/* Under the lock, like every change of the byte counts it follows. */
static void raise_peak(atomic_uint_fast64_t *peak, uint64_t now)
{
    if (now > atomic_load_explicit(peak, memory_order_relaxed))
        atomic_store_explicit(peak, now, memory_order_relaxed);
}

/* Under the lock: a registered entry joins the cache, and the host entries
 * it covers leave it first (their bytes never count twice); `now` is the
 * clock reading that ended its registration.  Fails only when the LRU heap
 * cannot grow. */
static int publish_locked(struct regcache *c, struct regcache_entry *e, uintptr_t start,
                          bool speculative, uint64_t now, struct regcache_entry **victims)
{
    struct rc_device *d = &c->dev[e->device_slot];
    rc_retire_covered_locked(c, e, victims);
    /* The registration opens an epoch, and the entry is stamped as used in
     * it: its caller holds it and puts it next, and that put then finds the
     * stamp current and writes nothing, nor does the evictor have a stale
     * key to refresh (lru.h).  A speculative entry keeps the stamp 0 of no
     * use, older than any, which its first get replaces. */
    if (!speculative) {
        rc_count_locked(&c->epoch);
        atomic_store_explicit(&e->last_use, atomic_load_explicit(&c->epoch, memory_order_relaxed),
                              memory_order_relaxed);
    }
    if (rc_lru_push(&d->lru, e) != REGCACHE_OK)
        return REGCACHE_ERR_NO_MEMORY;
    e->state = RC_READY;
    if (rc_filter_add(&c->filter, e->match_start, e->match_end))
        grow_filter_locked(c);
    size_t len = rc_entry_len(e);
    rc_add_locked(&d->entries, 1);
    d->odd_access += rc_odd_access(c, e);
    rc_add_locked(&d->bytes, len);
    rc_add_locked(&c->total_bytes, len);
    raise_peak(&d->n.peak_bytes, atomic_load_explicit(&d->bytes, memory_order_relaxed));
    raise_peak(&c->peak_bytes, atomic_load_explicit(&c->total_bytes, memory_order_relaxed));
    rc_recheck_budget_locked(c, d);
    rc_budget_note_locked(c, d, now);
    /* The hit path finds it from now on (a failure only costs hits). */
    rc_page_index_add(&c->index, e, start);
    rc_listeners_registered_locked(c, e);
    return REGCACHE_OK;
}

/* Under the lock: `rail` of e is registered. */
static void rail_ready_locked(struct regcache_entry *e, unsigned rail)
{
    unsigned ready = atomic_load_explicit(&e->rails_ready, memory_order_relaxed) | 1u << rail;
    atomic_store_explicit(&e->rails_ready, ready, memory_order_release);
}

/* Under the lock: e's first registration failed and e is out of the tree.
 * Gets registering other rails of it hold it still: the last of them
 * releases it, with what they registered. */
static void drop_failed_locked(struct regcache *c, struct regcache_entry *e,
                               struct regcache_entry **victims)
{
    atomic_fetch_or_explicit(&e->refs, RC_DETACHED, memory_order_seq_cst);
    e->noticed = true; /* it never served a get: nothing to revoke */
    unsigned old = atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel);
    if ((old & RC_COUNT_MASK) == 1)
        rc_victim_push(c, victims, e);
    else
        rc_zombie_locked(c, e);
}

/* Register a new entry for w and decide its fate: it joins the cache, or -
 * when an invalidation overlapped it after this miss's query - it is handed
 * out once. */
static int register_new(struct regcache *c, struct rc_want *w, uint64_t seq, unsigned rail,
                        regcache_entry_t **out, struct regcache_entry **victims)
{
    struct regcache_entry *e = new_pending_locked(c, w, rail);
    if (!e) {
        unlock_leaving(c);
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory allocating a cache entry");
    }
    struct rc_device *d = &c->dev[w->slot];
    bool speculative = !out;
    if (!speculative)
        rc_count_locked(&d->n.misses);
    /* Counted before the evictions that make room for it tell the ledger
     * what the device holds. */
    d->pending += rc_entry_len(e);
    bool room = rc_make_room_locked(c, d, rc_entry_len(e), speculative, victims);
    rc_unlock(&c->lock);
    rc_deregister_victims(c, *victims);
    /* Watched before it is registered: an unmap in between is seen. */
    e->mark = rc_listeners_before_register(c, e, w);

    struct rc_reg_time t;
    int rc = room || !speculative ? rc_register_rail(c, e, rail, speculative, w->get_arg, &t)
                                  : RC_NO_ROOM;

    rc_lock(&c->lock);
    rc_pool_return_locked(c, *victims);
    *victims = NULL;
    d->pending -= rc_entry_len(e);
    e->rails_pending &= ~(1u << rail);
    bool detached = rc_entry_is_detached(e);
    if (rc == REGCACHE_OK) {
        rail_ready_locked(e, rail);
        rc_count_locked(&d->n.registrations);
        rc_stats_registered(c, e, rail, rc_clock_ns_between(t.begun, t.ended));
        e->born = w->clock = t.ended;
    }
    enum regcache_reason why = e->reason; /* the detacher's, if any */
    if (rc == REGCACHE_OK && !detached &&
        !rc_invalidated_since_locked(c, seq, e->match_start, e->match_end, rc_entry_pageable(e),
                                     &why) &&
        !rc_listeners_unsettled_locked(c, e, &why) &&
        publish_locked(c, e, w->start, speculative, t.ended, victims) == REGCACHE_OK) {
        /* Its count was this thread's and those of gets registering other
         * rails meanwhile; in the cache now, the entry may be held by a
         * slot instead (a count below the full one never fills).  Mostly
         * the count is this thread's alone: then no other thread can change
         * it (a count is taken under the lock, which this thread holds, and
         * let go of only by its holder), and a plain store saves the miss a
         * locked instruction. */
        if (atomic_load_explicit(&e->refs, memory_order_relaxed) == 1)
            atomic_store_explicit(&e->refs, 0, memory_order_relaxed);
        else
            atomic_fetch_sub_explicit(&e->refs, 1, memory_order_relaxed);
        if (!speculative)
            (void)rc_hold_locked(c, e, rail, out);
    } else {
        if (!detached)
            rc_itree_remove(&c->tree, &e->node);
        if (rc == REGCACHE_OK && !speculative) {
            /* Registered memory that may be gone already: the caller uses
             * it once; its put deregisters it. */
            atomic_fetch_or_explicit(&e->refs, RC_DETACHED, memory_order_seq_cst);
            rc_zombie_locked(c, e);
            rc_count_locked(&d->n.one_shots);
            e->reason = (uint8_t)why;
            rc_notice_due_locked(c, e);
            *out = rc_counted_handle(e, rail);
        } else {
            drop_failed_locked(c, e, victims);
        }
        /* The ledger counted this registration while it was in flight. */
        rc_budget_note_locked(c, d, 0);
    }
    registration_ended(c);
    rc_check_locked(c);
    unlock_leaving(c);
    return rc;
}

/* An entry, ready or pending, lacks `rail` and no registration of it is in
 * flight: register it there, holding the entry.  If the entry's first
 * registration fails or is handed out once meanwhile, this one goes with
 * the entry at its last put. */
static int register_rail(struct regcache *c, struct regcache_entry *e, unsigned rail, void *get_arg,
                         regcache_entry_t **out)
{
    int rc = rc_entry_try_hold(e);
    if (rc != REGCACHE_OK) {
        unlock_leaving(c);
        return rc_hold_limit(e);
    }
    e->rails_pending |= 1u << rail;
    e->registrants[rail] = self_token();
    rc_unlock(&c->lock);

    struct rc_reg_time t;
    rc = rc_register_rail(c, e, rail, !out, get_arg, &t);

    rc_lock(&c->lock);
    e->rails_pending &= ~(1u << rail);
    if (rc == REGCACHE_OK) {
        rail_ready_locked(e, rail);
        /* A pending entry enters the index with every rail ready then. */
        if (e->state == RC_READY) {
            rc_page_index_refresh(&c->index, e);
            rc_listeners_registered_locked(c, e);
        }
        if (out)
            rc_count_locked(&c->dev[e->device_slot].n.misses);
        rc_count_locked(&c->dev[e->device_slot].n.registrations);
        rc_stats_registered(c, e, rail, rc_clock_ns_between(t.begun, t.ended));
    }
    registration_ended(c);
    unlock_leaving(c);
    if (rc == REGCACHE_OK && out)
        *out = rc_counted_handle(e, rail);
    else
        rc_put_counted(c, e, rc_counted_handle(e, rail));
    return rc;
}

/* A non-blocking get never registers on its own thread: its miss is the
 * listeners' (before_miss), the one that registers in the background ends
 * it. */
static int nonblocking_miss(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq)
{
    int rc = rc_listened(c, RC_ON_BEFORE_MISS) ? rc_listeners_call_before_miss(c, start, end, rq)
                                               : REGCACHE_OK;
    return rc != REGCACHE_OK ? rc
                             : rc_fail(REGCACHE_ERR_AGAIN, "[%#jx, %#jx) is not registered",
                                       (uintmax_t)start, (uintmax_t)end);
}

int rc_add_rail(struct regcache *c, struct regcache_entry *e, struct rc_req rq,
                regcache_entry_t **out)
{
    unsigned rail = rq.rail;
    /* Set before the entry's first registration: the slot holds it. */
    if (!rc_access_covers(e->access, rq.want) || __builtin_expect(rc_get_lookup, 0))
        return RC_NOT_HIT;
    if (__builtin_expect(rc_get_nonblocking, 0))
        return nonblocking_miss(c, e->match_start, e->match_end, rq);
    /* Entered like a miss, though the entry is in the cache already: the
     * registration it shares with misses leaves in its last locked step. */
    rc_miss_enter(c);
    rc_lock(&c->lock);
    for (;;) {
        if (e->state != RC_READY) {
            unlock_leaving(c);
            return RC_NOT_HIT;
        }
        if (!(e->rails_pending >> rail & 1))
            break;
        if (e->registrants[rail] == self_token()) {
            unlock_leaving(c);
            return rc_fail(REGCACHE_ERR_REENTRANT,
                           "get on rail %u of [%#jx, %#jx) from the backend callback that is "
                           "registering it",
                           rail, (uintmax_t)e->match_start, (uintmax_t)e->match_end);
        }
        wait_for_registration(c);
    }
    if (atomic_load_explicit(&e->rails_ready, memory_order_relaxed) >> rail & 1) {
        /* Registered by the thread this one waited for. */
        int rc = rc_hold_locked(c, e, rail, out);
        unlock_leaving(c);
        return rc == REGCACHE_OK ? rc : rc_hold_limit(e);
    }
    return register_rail(c, e, rail, rc_take_get_arg(out), out);
}

/* With the memory described: serve w from the cache, waiting for a
 * registration in flight, or register. */
static int serve(struct regcache *c, struct rc_want *w, uint64_t seq, unsigned rail,
                 regcache_entry_t **out)
{
    struct regcache_entry *victims = NULL, *e, *busy;
    int rc;
    rc_lock(&c->lock);
    for (;;) {
        e = lookup_locked(c, w, rail, &busy, &victims);
        if (e || !busy)
            break;
        if (busy->registrants[rail] == self_token() || !out) {
            unlock_leaving(c);
            rc_release_victims(c, victims);
            /* A background registration leaves it to the one in flight. */
            return out ? reentrant(w) : REGCACHE_OK;
        }
        wait_for_registration(c);
    }
    if (!e) {
        rc_host_merge_locked(c, w);
        rc = register_new(c, w, seq, rail, out, &victims);
    } else if (!(atomic_load_explicit(&e->rails_ready, memory_order_relaxed) >> rail & 1)) {
        rc = register_rail(c, e, rail, w->get_arg, out);
    } else if (!out) {
        /* Registered already: a background registration only lists it
         * under this request's page, as a get would. */
        if (e->state == RC_READY)
            rc_page_index_add(&c->index, e, w->start);
        unlock_leaving(c);
        rc = REGCACHE_OK;
    } else if (e->state == RC_PENDING) {
        /* Registered on this rail beside the entry's first registration,
         * still in flight: a counted hold, as that of the thread that
         * registered it, is good whatever the entry's fate. */
        rc = rc_entry_try_hold(e);
        if (rc == REGCACHE_OK) {
            *out = rc_counted_handle(e, rail);
            rc_count_locked(&c->dev[e->device_slot].n.slow_hits);
        }
        unlock_leaving(c);
        if (rc != REGCACHE_OK)
            rc = rc_hold_limit(e);
    } else {
        /* Registered by a thread this one waited for, or not yet indexed
         * under this request's page. */
        rc = rc_hold_locked(c, e, rail, out);
        if (rc == REGCACHE_OK) {
            rc_page_index_add(&c->index, e, w->start);
            rc_count_locked(&c->dev[e->device_slot].n.slow_hits);
        }
        unlock_leaving(c);
        if (rc != REGCACHE_OK)
            rc = rc_hold_limit(e);
    }
    rc_release_victims(c, victims);
    return rc;
}

/* Before the memory is looked at: a non-blocking get's miss is the
 * listeners', and a blocking one lets them end it first (a failure kept
 * for the range). */
static int before_miss(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq)
{
    if (__builtin_expect(rc_get_nonblocking, 0))
        return nonblocking_miss(c, start, end, rq);
    return rc_listeners_before_miss(c, start, end, rq);
}

/* The miss begins (its sequence number, for the invalidations that land
 * inside it) once the cache is as current as the monitor and the patches
 * can make it: an unmap the monitor read but did not yet handle leaves
 * entries of its memory in the cache, not to be served, nor merged. */
static uint64_t enter(struct regcache *c)
{
    if (rc_host_monitor_behind())
        rc_host_catch_up();
    if (c->patches_intact)
        rc_validation_recheck(c);
    return rc_miss_enter(c);
}

/* Memory the cache cannot register: only lock holders count a miss as
 * ended. */
static int refused(struct regcache *c, int rc)
{
    rc_lock(&c->lock);
    unlock_leaving(c);
    return rc;
}

/* The miss ended with rc: the listeners hear of it, dated by the reading
 * that ended the registration where there was one (the histogram's, which
 * also dates the entry and paced the ledger's counters). */
static int ended(struct regcache *c, struct rc_want *w, int rc, regcache_entry_t **out)
{
    rc_want_fini(w);
    if (rc != REGCACHE_OK && out)
        *out = NULL;
    if (rc_listened(c, RC_ON_AFTER_MISS))
        rc_listeners_call_after_miss(c, w->clock ? w->clock : rc_clock_now_coarse());
    return rc;
}

int rc_slow_get(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq,
                regcache_entry_t **out)
{
    if (__builtin_expect(rc_get_lookup, 0))
        return rc_lookup_cached(c, start, end, rq, out);
    int rc = out ? before_miss(c, start, end, rq) : REGCACHE_OK;
    if (rc != REGCACHE_OK) {
        *out = NULL;
        return rc;
    }
    struct rc_want w = { .start = start,
                         .end = end,
                         .access = rc_access_of(c, rq.want),
                         .get_arg = rc_take_get_arg(out) };
    uint64_t seq = enter(c);
    rc = rc_classify(c, &w);
    rc = rc == REGCACHE_OK ? serve(c, &w, seq, rq.rail, out) : refused(c, rc);
    return ended(c, &w, rc, out);
}
