/* The hold protocol's slow side (entry.h, hold.h): what evictors and
 * invalidators do, under the cache lock. */
#include "entry.h"

#include "asym_fence.h"
#include "page_index.h"
#include "threads.h"

/* The fence between this side's changes (the mark; the entry out of the
 * page index) and its scan of the slots: a seq_cst fence where hits fence
 * too, a heavy fence where they do not (cache.h, fenceless). */
static void fence_before_scan(const struct regcache_entry *e)
{
    if (e->heavy_scan)
        rc_fence_heavy();
    else
        atomic_thread_fence(memory_order_seq_cst);
}

bool rc_entry_held(const struct regcache_entry *e)
{
    return (atomic_load_explicit(&((struct regcache_entry *)e)->refs, memory_order_acquire) &
            RC_COUNT_MASK) ||
           rc_thread_holds(e);
}

bool rc_entry_claim_unused(struct regcache_entry *e, struct rc_page_index *index)
{
    /* Counted holds are taken only under the cache lock, which the caller
     * holds: with none now there can be none until it unlocks, and a plain
     * store marks the entry.  Acquire: the put of the last one is done. */
    if (atomic_load_explicit(&e->refs, memory_order_acquire) != 0)
        return false;
    atomic_store_explicit(&e->refs, RC_DETACHED, memory_order_relaxed);
    rc_page_index_unlist(index, e);
    fence_before_scan(e);
    if (!rc_thread_holds(e)) {
        rc_page_index_forget(e);
        return true;
    }
    /* A hit published its slot before the entry left the index: it holds
     * the entry, which stays.  Hits that found the index changed meanwhile
     * just look again. */
    rc_page_index_relist(index, e);
    atomic_fetch_and_explicit(&e->refs, ~RC_DETACHED, memory_order_seq_cst);
    return false;
}

bool rc_entry_detach(struct regcache_entry *e)
{
    unsigned old = atomic_fetch_or_explicit(&e->refs, RC_DETACHED, memory_order_seq_cst);
    fence_before_scan(e);
    return (old & RC_COUNT_MASK) == 0 && !rc_thread_holds(e);
}
