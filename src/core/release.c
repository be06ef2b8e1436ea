/* Entries leaving the cache: unlinking, detaching, zombies (held after they
 * left), and the deregistration that ends them.  Deregistration always runs
 * without the cache lock, so a slow ibv_dereg_mr never stalls other threads
 * and a backend that calls back into regcache cannot deadlock.
 *
 * The leave notice (params.on_leave) follows the same rule.  An unused
 * entry is noticed just before its deregistration.  A held one whose memory
 * is gone is noticed at once, so that a transport revokes its keys while
 * the holder still has it: the detacher claims the notice under the lock,
 * takes a counted hold that keeps the registration (and the private data)
 * alive, and leaves it on c->notices for the next thread that releases
 * entries without the lock - itself, right after - which gives the notice
 * and lets go of the hold like a put. */
#include <stdio.h>
#include <stdlib.h>
#include <utlist.h>

#include "asym_fence.h"
#include "cache.h"
#include "hold.h"

void rc_unlink_locked(struct regcache *c, struct regcache_entry *e)
{
    struct rc_device *d = &c->dev[e->device_slot];
    rc_itree_remove(&c->tree, &e->node);
    rc_page_index_remove_entry(&c->index, e);
    if (e->heap_idx != RC_LRU_NONE)
        rc_lru_remove(&d->lru, e);
    rc_filter_remove(&c->filter, e->match_start, e->match_end);
    rc_add_locked(&d->bytes, -rc_entry_len(e));
    rc_add_locked(&c->total_bytes, -rc_entry_len(e));
    rc_add_locked(&d->entries, (size_t)-1);
    d->odd_access -= rc_odd_access(c, e);
    rc_recheck_budget_locked(c, d);
    rc_budget_note_locked(c, d, 0);
}

/* Under the lock: put_flags' zombie bit set or cleared, its fence bit
 * kept (a demotion may set it meanwhile: cache.h). */
static void mark_zombies(struct regcache *c, bool any, memory_order order)
{
    if (any)
        atomic_fetch_or_explicit(&c->put_flags, RC_PUT_ZOMBIES, order);
    else
        atomic_fetch_and_explicit(&c->put_flags, (unsigned char)~RC_PUT_ZOMBIES, order);
}

static void zombie_push(struct regcache *c, struct regcache_entry *e)
{
    /* Set before the fence and the look at the holds that follow the push
     * of a detached entry (rc_detach_locked): a slot holder that the look
     * finds gone cleared its slot before the look, and one that it finds
     * reads the flag after it, set.  A one-shot has counted holds only,
     * whose puts read the mark itself. */
    mark_zombies(c, true, memory_order_seq_cst);
    e->state = RC_ZOMBIE;
    DL_PREPEND2(c->zombies, e, link_prev, link_next);
}

static void zombie_unlink(struct regcache *c, struct regcache_entry *e)
{
    DL_DELETE2(c->zombies, e, link_prev, link_next);
    if (!c->zombies)
        mark_zombies(c, false, memory_order_relaxed);
}

void rc_leave_locked(struct regcache *c, struct regcache_entry *e, enum regcache_reason why)
{
    struct rc_counters *n = &c->dev[e->device_slot].n;
    rc_listeners_leave_locked(c, e, why);
    e->reason = (uint8_t)why;
    rc_count_locked(&n->leaves[why]);
    switch (why) {
    case REGCACHE_REASON_EVICT_BUDGET:
    case REGCACHE_REASON_EVICT_EXHAUSTED:
        rc_count_locked(&n->evictions);
        break;
    case REGCACHE_REASON_FREED_TAG:
        rc_count_locked(&n->invalidations[RC_BY_TAG]);
        break;
    case REGCACHE_REASON_FREED_HOOK:
        rc_count_locked(&n->invalidations[RC_BY_NOTIFY]);
        break;
    case REGCACHE_REASON_FREED_MONITOR:
        rc_count_locked(&n->invalidations[RC_BY_MONITOR]);
        break;
    case REGCACHE_REASON_INVALIDATE:
        rc_count_locked(&n->invalidations[RC_BY_EXPLICIT]);
        break;
    default:
        break;
    }
}

/* Is a notice due for e, registered and not yet noticed? */
static bool notice_due(const struct regcache *c, const struct regcache_entry *e)
{
    return c->opts.params.on_leave && !e->noticed &&
           atomic_load_explicit(&e->rails_ready, memory_order_relaxed);
}

void rc_notice_due_locked(struct regcache *c, struct regcache_entry *e)
{
    if (!notice_due(c, e))
        return;
    e->noticed = true;
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    struct regcache_entry *head = atomic_load_explicit(&c->notices, memory_order_relaxed);
    do {
        e->notice_next = head;
    } while (!atomic_compare_exchange_weak_explicit(&c->notices, &head, e, memory_order_release,
                                                    memory_order_relaxed));
}

/* The reason as the caller's header knows it: MERGED came in 0.4. */
static int reason_told(const struct regcache *c, const struct regcache_entry *e)
{
    return e->reason == REGCACHE_REASON_MERGED && c->opts.header_minor < 4
               ? REGCACHE_REASON_REPLACED
               : e->reason;
}

static void notify(struct regcache *c, struct regcache_entry *e, bool held)
{
    struct regcache_leave l = {
        .reason = reason_told(c, e),
        .start = e->node.start,
        .len = rc_entry_len(e),
        .rails = atomic_load_explicit(&e->rails_ready, memory_order_relaxed),
        .handles = e->handles,
        .priv = c->pool.priv_size ? rc_entry_priv(e) : NULL,
        .access = (int)(e->access & ~RC_ACCESS_DEFAULT),
        .held = held,
    };
    c->opts.params.on_leave(c->opts.params.callback_arg, &l);
}

void rc_give_notices(struct regcache *c)
{
    if (!atomic_load_explicit(&c->notices, memory_order_relaxed))
        return;
    struct regcache_entry *e = atomic_exchange_explicit(&c->notices, NULL, memory_order_acquire);
    while (e) {
        struct regcache_entry *next = e->notice_next;
        notify(c, e, true);
        unsigned old = atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel);
        if ((old & RC_COUNT_MASK) == 1)
            rc_release_if_unheld(c, e);
        e = next;
    }
}

void rc_detach_locked(struct regcache *c, struct regcache_entry *e, struct regcache_entry **victims,
                      enum regcache_reason why)
{
    rc_leave_locked(c, e, why);
    if (e->state == RC_PENDING) {
        /* Its registering thread sees the mark and hands the registration
         * out once instead of caching it. */
        rc_itree_remove(&c->tree, &e->node);
        atomic_fetch_or_explicit(&e->refs, RC_DETACHED, memory_order_seq_cst);
        return;
    }
    rc_unlink_locked(c, e);
    if (rc_entry_detach(e)) {
        rc_victim_push(c, victims, e);
        return;
    }
    zombie_push(c, e);
    /* A holder's put may have emptied its slot after the look above and
     * read put_flags before the push (puts pay only a compiler barrier):
     * make every thread's stores visible and look once more.  A put that
     * this look misses reads the mark after the fence, and releases the
     * entry itself: nothing else does (regcache_put(): its last put
     * deregisters it, on the putter's thread). */
    rc_fence_heavy();
    if (!rc_entry_held(e)) {
        zombie_unlink(c, e);
        rc_victim_push(c, victims, e);
    } else if (rc_memory_gone(why)) {
        rc_notice_due_locked(c, e);
    }
}

/* The callbacks regcache_entry_invalidate() left on e (entry_token.c) run,
 * each once, and are freed: e is deregistered (in a fork child, whose
 * registrations were the parent's, they are only freed). */
static void complete(struct regcache *c, struct regcache_entry *e)
{
    struct rc_completion *d = e->completions;
    if (__builtin_expect(!d, 1))
        return;
    e->completions = NULL;
    bool child = rc_forked(c);
    while (d) {
        struct rc_completion *next = d->next;
        if (!child)
            d->cb(d->arg);
        free(d);
        d = next;
    }
}

static void deregister(struct regcache *c, struct regcache_entry *e)
{
#ifdef RC_DEBUG
    if (rc_entry_held(e) && !c->destroying) {
        fprintf(stderr, "regcache %p: invariant broken: entry %p deregistered while held\n",
                (void *)c, (void *)e);
        abort();
    }
#endif
    unsigned rails = atomic_load_explicit(&e->rails_ready, memory_order_relaxed);
    bool child = rc_forked(c); /* the registrations are the parent's */
    const struct regcache_params *p = &c->opts.params;
    if (!child && notice_due(c, e))
        notify(c, e, false);
    if (!child)
        rc_listeners_deregistering(c, e);
    for (unsigned r = 0; rails; r++, rails >>= 1) {
        if (!(rails & 1))
            continue;
        if (!child && p->on_deregister)
            p->on_deregister(p->callback_arg, rc_counted_handle(e, r), r, e->handles[r],
                             c->pool.priv_size ? rc_entry_priv(e) : NULL);
        if (!child)
            c->backend.dereg(c->backend.arg, e->handles[r]);
        e->handles[r] = NULL;
    }
    atomic_store_explicit(&e->rails_ready, 0, memory_order_relaxed);
    rc_listeners_unmark(c, e);
    free((void *)e->more);
    e->more = NULL;
    e->nmore = 0;
    complete(c, e);
}

void rc_victim_push(struct regcache *c, struct regcache_entry **victims, struct regcache_entry *e)
{
    /* A rail at a time: there are few, and __builtin_popcount is a call into
     * libgcc where the target has no popcount instruction. */
    unsigned rails = 0;
    for (unsigned r = atomic_load_explicit(&e->rails_ready, memory_order_relaxed); r; r &= r - 1)
        rails++;
    rc_stats_deregistering(c, e);
    atomic_uint_fast64_t *n = &c->dev[e->device_slot].n.deregistrations;
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + rails,
                          memory_order_relaxed);
    e->state = RC_FREE;
    rc_list_push(victims, e);
}

void rc_deregister_victims(struct regcache *c, struct regcache_entry *list)
{
    rc_give_notices(c);
    for (struct regcache_entry *e = list; e; e = e->link_next)
        deregister(c, e);
}

void rc_pool_return_locked(struct regcache *c, struct regcache_entry *list)
{
    while (list) {
        struct regcache_entry *next = list->link_next;
        rc_entry_pool_put(&c->pool, list);
        list = next;
    }
}

void rc_release_victims(struct regcache *c, struct regcache_entry *list)
{
    rc_give_notices(c);
    while (list) {
        struct regcache_entry *e = list;
        list = e->link_next;
        deregister(c, e);
        /* Back to the pool without taking the lock a second time: the next
         * locked allocation collects it. */
        struct regcache_entry *head = atomic_load_explicit(&c->returned, memory_order_relaxed);
        do {
            e->link_next = head;
        } while (!atomic_compare_exchange_weak_explicit(
            &c->returned, &head, e, memory_order_release, memory_order_relaxed));
    }
}

void rc_defer_victims(struct regcache *c, struct regcache_entry *list)
{
    if (!list)
        return;
    struct regcache_entry *last = list;
    while (last->link_next)
        last = last->link_next;
    struct regcache_entry *head = atomic_load_explicit(&c->deferred, memory_order_relaxed);
    do {
        last->link_next = head;
    } while (!atomic_compare_exchange_weak_explicit(&c->deferred, &head, list, memory_order_release,
                                                    memory_order_relaxed));
}

void rc_release_deferred(struct regcache *c)
{
    if (atomic_load_explicit(&c->deferred, memory_order_relaxed))
        rc_release_victims(c, atomic_exchange_explicit(&c->deferred, NULL, memory_order_acquire));
    else
        rc_give_notices(c);
    /* What an invalidation tells the listeners before it returns, for the
     * invalidations whose entries were deferred (the range is not kept). */
    rc_listeners_invalidated(c, 0, UINTPTR_MAX);
}

void rc_release_if_unheld(struct regcache *c, struct regcache_entry *e)
{
    struct regcache_entry *victims = NULL;
    rc_lock(&c->lock);
    /* e may have been released and reused meanwhile: only a zombie that
     * nobody holds goes, whichever life of the entry it is. */
    if (e->state == RC_ZOMBIE && !rc_entry_held(e)) {
        zombie_unlink(c, e);
        rc_victim_push(c, &victims, e);
    }
    rc_unlock(&c->lock);
    rc_release_victims(c, victims);
}

/* Under the lock: one more zombie (a one-shot registration, held by the
 * caller). */
void rc_zombie_locked(struct regcache *c, struct regcache_entry *e)
{
    zombie_push(c, e);
}

struct regcache_entry *rc_entry_new_locked(struct regcache *c)
{
    /* Looked at before it is taken: mostly nothing was returned, and the
     * exchange would be a locked instruction on every miss. */
    if (atomic_load_explicit(&c->returned, memory_order_relaxed))
        rc_pool_return_locked(c,
                              atomic_exchange_explicit(&c->returned, NULL, memory_order_acquire));
    return rc_entry_pool_get(&c->pool);
}

/* Zombies left the cache before: they keep the reason they left for. */
void rc_drain_entries_locked(struct regcache *c, struct regcache_entry **victims)
{
    while (c->zombies) {
        struct regcache_entry *e = c->zombies;
        zombie_unlink(c, e);
        rc_victim_push(c, victims, e);
    }
}
