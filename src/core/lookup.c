/* A get that only looks (REGCACHE_GET_LOOKUP): a transport choosing
 * between zero-copy and a bounce buffer asks whether a registration is
 * cached, and must not make one by asking.  The hit path serves it as any
 * hit; what that path leaves - an entry not yet indexed under the
 * request's page, a thread whose hold slots are all in use, an entry
 * lacking the rail or the access - comes here instead of the miss path:
 * one walk of the tree under the lock, no memory query (but the tag check
 * a TAG_CHECK hit makes), no registration, no queued job, no wait for a
 * registration in flight. */
#include "cache.h"
#include "hold.h"
#include "host_seam.h"
#include "last_error.h"

__thread bool rc_get_lookup __attribute__((tls_model("initial-exec")));

struct find {
    uintptr_t start, end;
    unsigned access, rail;
    struct regcache_entry *found;
};

static int find_visit(struct rc_itree_node *n, void *arg)
{
    struct find *f = arg;
    struct regcache_entry *e = rc_entry_of_node(n);
    if (e->state != RC_READY || !rc_entry_covers(e, f->start, f->end) ||
        !rc_access_covers(e->access, f->access) ||
        !(atomic_load_explicit(&e->rails_ready, memory_order_relaxed) >> f->rail & 1))
        return 0;
    f->found = e;
    return 1;
}

/* A TAG_CHECK cache's entry whose memory was replaced behind its back, as
 * a hit would find it: the hit is taken back, the entry leaves, and the
 * lookup's hold is let go. */
static int stale(struct regcache *c, struct regcache_entry *e, regcache_entry_t **out)
{
    struct regcache_entry *victims = NULL;
    rc_lock(&c->lock);
    atomic_uint_fast64_t *hits = &c->dev[e->device_slot].n.slow_hits;
    atomic_store_explicit(hits, atomic_load_explicit(hits, memory_order_relaxed) - 1,
                          memory_order_relaxed);
    if (e->state == RC_READY)
        rc_detach_locked(c, e, &victims, REGCACHE_REASON_FREED_TAG);
    rc_unlock(&c->lock);
    rc_release_victims(c, victims);
    rc_hold_drop(c, e, *out);
    *out = NULL;
    return RC_NOT_HIT;
}

int rc_lookup_cached(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq,
                     regcache_entry_t **out)
{
    /* A get that a callback makes from here on is a get of its own. */
    rc_get_lookup = false;
    *out = NULL;
    /* An unmap the monitor read but did not yet handle leaves entries of
     * its memory in the cache: not to be served. */
    if (rc_host_monitor_behind())
        rc_host_catch_up();
    struct find f = {
        .start = start, .end = end, .access = rc_access_of(c, rq.want), .rail = rq.rail
    };
    int rc = RC_NOT_HIT;
    rc_lock(&c->lock);
    rc_itree_visit_overlaps(&c->tree, start, end, find_visit, &f);
    if (f.found) {
        rc = rc_hold_locked(c, f.found, rq.rail, out);
        if (rc == REGCACHE_OK) {
            /* Its next lookups of this page are hits. */
            rc_page_index_add(&c->index, f.found, start);
            rc_count_locked(&c->dev[f.found->device_slot].n.slow_hits);
        }
    }
    rc_unlock(&c->lock);
    if (rc == REGCACHE_OK && rc_tag_checking(c) && f.found->buffer_id &&
        !rc_entry_memory_current(c, f.found))
        rc = stale(c, f.found, out);
    if (rc == REGCACHE_ERR_HOLD_LIMIT)
        return rc_hold_limit(f.found);
    if (rc == RC_NOT_HIT)
        return rc_fail(REGCACHE_ERR_NOT_CACHED,
                       "no cached registration covers [%#jx, %#jx) on rail %u with access %#x",
                       (uintmax_t)start, (uintmax_t)end, rq.rail,
                       rq.want == RC_ACCESS_DEFAULT ? c->access : rq.want);
    return rc;
}
