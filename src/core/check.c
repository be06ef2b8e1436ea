/* Debug builds (-DREGCACHE_DEBUG=ON): the cache's invariants, checked under
 * its lock after each change of its structure.  A failure aborts with what
 * broke: a cache that went wrong must not go on serving registrations. */
#include "cache.h"

#ifdef RC_DEBUG
#include <stdio.h>
#include <stdlib.h>

static void broken(const struct regcache *c, const char *what, const void *e)
{
    fprintf(stderr, "regcache %p: invariant broken: %s (entry %p)\n", (const void *)c, what, e);
    abort();
}

struct census {
    struct regcache *c;
    size_t entries[RC_DEVICE_SLOTS], bytes[RC_DEVICE_SLOTS], odd[RC_DEVICE_SLOTS];
};

static int check_entry(struct rc_itree_node *n, void *arg)
{
    struct census *k = arg;
    struct regcache_entry *e = rc_entry_of_node(n);
    if (e->cache != k->c)
        broken(k->c, "entry of another cache in the tree", e);
    if (e->state == RC_PENDING)
        return 0;
    if (e->state != RC_READY)
        broken(k->c, "a zombie or free entry in the tree", e);
    if (rc_entry_is_detached(e))
        broken(k->c, "a detached entry in the tree", e);
    if (!atomic_load_explicit(&e->rails_ready, memory_order_relaxed))
        broken(k->c, "a ready entry registered on no rail", e);
    if (e->match_start < e->node.start || e->match_end > e->node.end ||
        e->match_start >= e->match_end)
        broken(k->c, "match range outside the registered range", e);
    struct rc_device *d = &k->c->dev[e->device_slot];
    if (!rc_lru_lists(&d->lru, e))
        broken(k->c, "a ready entry missing from its device's LRU", e);
    rc_page_index_check_entry(&k->c->index, e);
    k->entries[e->device_slot]++;
    k->bytes[e->device_slot] += rc_entry_len(e);
    k->odd[e->device_slot] += rc_odd_access(k->c, e);
    return 0;
}

void rc_check_locked(struct regcache *c)
{
    /* A full check costs a walk of every entry: after each change while the
     * cache is small, else once per as many changes as it has entries, so
     * that debug builds stay linear in the work they check. */
    if (c->tree.count > 1024 && ++c->changes < c->tree.count)
        return;
    c->changes = 0;
    const char *why = rc_itree_check(&c->tree);
    if (why)
        broken(c, why, NULL);
    struct census k = { .c = c };
    rc_itree_visit_overlaps(&c->tree, 0, UINTPTR_MAX, check_entry, &k);
    for (int i = 0; i < RC_DEVICE_SLOTS; i++) {
        struct rc_device *d = &c->dev[i];
        rc_lru_check(&d->lru);
        if (k.entries[i] != atomic_load_explicit(&d->entries, memory_order_relaxed) ||
            k.bytes[i] != atomic_load_explicit(&d->bytes, memory_order_relaxed) ||
            k.odd[i] != d->odd_access || k.entries[i] != d->lru.count)
            broken(c, "a device's counts disagree with its entries", NULL);
    }
    for (struct regcache_entry *e = c->zombies; e; e = e->link_next)
        if (e->state != RC_ZOMBIE || !rc_entry_is_detached(e))
            broken(c, "a zombie that is not detached", e);
    rc_page_index_check(&c->index);
}
#else
void rc_check_locked(struct regcache *c)
{
    (void)c;
}
#endif
