/* Pageable host entries merge: a miss that overlaps cached entries of the
 * same mappings registers their union once (of ranges and of access), and
 * the entries it covers leave the cache.  Any entry leaves the same way
 * when a get that needs more access registers its memory again.  Gets over
 * random sub-ranges of one mapping so converge to one registration instead
 * of pinning the same pages under many, each rounded on its own.  Pinned
 * memory (cuMemAllocHost, with a buffer id) and GPU memory never merge:
 * their entries are clipped to an allocation.
 *
 * Each merge revokes the keys a transport gave out for the entries it
 * replaces, and neighbouring buffers of one mapping, rounded to the
 * alignment, overlap: a transport's buffers churn each other's keys.  So
 * params.host_merge limits merging to entries of the same access, or
 * turns it off, and by default (AUTO) it is off for a cache that tells a
 * transport of its registrations (bench/README.md, "Merging and a
 * transport's keys", has the figures). */
#include "cache.h"

void rc_host_merge_setup(struct regcache *c)
{
    const struct regcache_params *p = &c->opts.params;
    c->host_merge = p->host_merge != REGCACHE_HOST_MERGE_AUTO ? p->host_merge
                    : p->on_register || p->on_leave           ? REGCACHE_HOST_MERGE_OFF
                                                              : REGCACHE_HOST_MERGE_ALL;
}

static bool pageable(const struct regcache_entry *e)
{
    return e->device_slot == RC_HOST_SLOT && !e->buffer_id && !e->nmore;
}

static bool mergeable(const struct regcache_entry *e)
{
    return e->state == RC_READY && pageable(e);
}

static unsigned bare_access(unsigned access)
{
    return access & ~RC_ACCESS_DEFAULT;
}

struct grow {
    struct rc_want *w;
    bool same_access;
    bool grew;
};

static int grow_visit(struct rc_itree_node *n, void *arg)
{
    struct grow *g = arg;
    struct regcache_entry *e = rc_entry_of_node(n);
    struct rc_want *w = g->w;
    /* Entries that reach beyond the request's mappings stay apart: their
     * other part may be memory this miss knows nothing of.  Entries that
     * only touch stay apart too: each may be a buffer of its own, pinned
     * under a limit sized for it (RLIMIT_MEMLOCK). */
    if (!mergeable(e) || n->start < w->span_start || n->end > w->span_end ||
        (g->same_access && bare_access(e->access) != bare_access(w->access)))
        return 0;
    if (n->start < w->reg_start) {
        w->reg_start = n->start;
        g->grew = true;
    }
    if (n->end > w->reg_end) {
        w->reg_end = n->end;
        g->grew = true;
    }
    /* The union serves every get the merged entries served. */
    w->access |= bare_access(e->access);
    return 0;
}

void rc_host_merge_locked(struct regcache *c, struct rc_want *w)
{
    if (w->slot != RC_HOST_SLOT || w->buffer_id || !w->span_end ||
        c->host_merge == REGCACHE_HOST_MERGE_OFF)
        return;
    struct grow g = { .w = w, .same_access = c->host_merge == REGCACHE_HOST_MERGE_SAME_ACCESS };
    /* A grown range may overlap more entries, until it meets no new one. */
    do {
        g.grew = false;
        rc_itree_visit_overlaps(&c->tree, w->reg_start, w->reg_end, grow_visit, &g);
    } while (g.grew);
    w->match_start = w->reg_start;
    w->match_end = w->reg_end;
    w->access = rc_access_of(c, bare_access(w->access));
}

struct covered {
    const struct regcache *c;
    const struct regcache_entry *by;
    struct regcache_entry *list;
};

static bool same_range(const struct regcache_entry *a, const struct regcache_entry *b)
{
    return a->node.start == b->node.start && a->node.end == b->node.end;
}

/* Does by, whose range holds e's and whose access covers e's, replace e?
 * Pageable entries of the same mappings: by an access upgrade of the same
 * range, or by a merge as host_merge allows one.  Other memory is replaced
 * only by an access upgrade (two entries of one allocation with the same
 * access are left as they always were): an entry of the same allocation,
 * as by was registered after the memory was described again, and an entry
 * of memory freed since would carry another buffer id. */
static bool replaces(const struct regcache *c, const struct regcache_entry *by,
                     const struct regcache_entry *e)
{
    bool wider = bare_access(e->access) != bare_access(by->access);
    if (pageable(by))
        return mergeable(e) &&
               ((wider && same_range(e, by)) || c->host_merge == REGCACHE_HOST_MERGE_ALL ||
                (c->host_merge == REGCACHE_HOST_MERGE_SAME_ACCESS && !wider));
    return e->state == RC_READY && e->buffer_id == by->buffer_id && !e->nmore && !by->nmore &&
           e->device_slot == by->device_slot && wider;
}

static int covered_visit(struct rc_itree_node *n, void *arg)
{
    struct covered *cv = arg;
    struct regcache_entry *e = rc_entry_of_node(n);
    if (e != cv->by && n->start >= cv->by->node.start && n->end <= cv->by->node.end &&
        rc_access_covers(cv->by->access, bare_access(e->access)) && replaces(cv->c, cv->by, e))
        rc_list_push(&cv->list, e);
    return 0;
}

void rc_retire_covered_locked(struct regcache *c, struct regcache_entry *e,
                              struct regcache_entry **victims)
{
    /* Other memory is replaced only by a wider access: with none but
     * params.access on the device, there is nothing to look for. */
    if (!pageable(e) &&
        (!e->buffer_id || e->nmore || (!rc_odd_access(c, e) && !c->dev[e->device_slot].odd_access)))
        return;
    struct covered cv = { .c = c, .by = e };
    rc_itree_visit_overlaps(&c->tree, e->node.start, e->node.end, covered_visit, &cv);
    while (cv.list) {
        struct regcache_entry *old = cv.list;
        cv.list = old->link_next;
        /* A pageable entry of a narrower range was merged; one of the same
         * range, and any other memory's, was upgraded. */
        rc_detach_locked(c, old, victims,
                         pageable(e) && !same_range(old, e) ? REGCACHE_REASON_MERGED
                                                            : REGCACHE_REASON_REPLACED);
    }
}
