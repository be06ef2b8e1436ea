/* A cached registration and the reference-count protocol that lets the hit
 * path hold it without any lock.
 *
 * Entries are type-stable: their memory comes from the cache's entry pool
 * and returns there, never to malloc, until the cache is destroyed.  A hit
 * may therefore reach an entry that was just recycled for another range;
 * the reference it takes is then harmless (the page index's validation
 * notices and gives it back), where on freed memory it would be a write
 * into someone else's allocation. */
#ifndef RC_ENTRY_H
#define RC_ENTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "interval_tree.h"

struct regcache;

/* The top bit of refs marks an entry that has left the cache (invalidated,
 * evicted, or being destroyed): it can no longer gain holders, and whoever
 * drops the count to zero with the bit set deregisters it.  Keeping both in
 * one word makes "hold unless detached" and "detach unless held" single
 * atomic steps. */
#define RC_DETACHED 0x80000000u
#define RC_COUNT_MASK 0x7fffffffu

enum rc_entry_state {
    RC_PENDING, /* registration in flight; concurrent misses wait for it */
    RC_READY
};

#define RC_INLINE_PAGES 2

struct regcache_entry {
    /* First cache line: everything a hit and its put touch. */
    atomic_uint refs;
    int device_slot;
    /* Requests inside [match_start, match_end) are served by this entry:
     * the registered range clipped to the allocation, so two allocations
     * packed into one page never serve each other.  Atomic because the
     * lock-free hit path may read them while a recycled entry is being
     * set up (it then fails validation and retries). */
    _Atomic uintptr_t match_start, match_end;
    uint64_t buffer_id; /* 0: host memory, never tag-checked */
    void *handle;       /* backend handle (struct ibv_mr * when built-in) */
    struct regcache *cache;
    /* Written by every put without the lock; read by the evictor. */
    atomic_uint_fast64_t last_use;

    /* The rest is touched under the cache lock only. */
    struct rc_itree_node node; /* registered range, in cache->tree */
    enum rc_entry_state state;
    bool registered; /* the backend holds a registration for it */
    bool zombie;     /* on the cache's zombie list */
    /* Owned by the LRU heap. */
    uint64_t heap_key;
    size_t heap_idx;
    /* Pages under which the page index lists this entry. */
    uintptr_t *pages;
    uint32_t npages, pages_cap;
    uintptr_t pages_inline[RC_INLINE_PAGES];
    /* A detached entry that still has holders sits on the cache's zombie
     * list so destroy can reclaim it; a victim sits on a caller's local list
     * between detach and deregistration. */
    struct regcache_entry *link_next, *link_prev;
} __attribute__((aligned(64)));

/* Take a reference unless the entry has left the cache. */
static inline bool rc_entry_try_hold(struct regcache_entry *e)
{
    unsigned old = atomic_load_explicit(&e->refs, memory_order_relaxed);
    do {
        if (old & RC_DETACHED)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&e->refs, &old, old + 1,
                                                    memory_order_acquire,
                                                    memory_order_relaxed));
    return true;
}

/* Claim an unused entry for eviction: succeeds only if nobody holds it, and
 * from then on nobody can. */
static inline bool rc_entry_claim_unused(struct regcache_entry *e)
{
    unsigned expected = 0;
    return atomic_compare_exchange_strong_explicit(&e->refs, &expected, RC_DETACHED,
                                                   memory_order_acq_rel,
                                                   memory_order_relaxed);
}

/* Mark the entry detached; true when nobody held it, so the caller must
 * deregister it (otherwise the last put will). */
static inline bool rc_entry_detach(struct regcache_entry *e)
{
    unsigned old = atomic_fetch_or_explicit(&e->refs, RC_DETACHED, memory_order_acq_rel);
    return (old & RC_COUNT_MASK) == 0;
}

static inline bool rc_entry_is_detached(const struct regcache_entry *e)
{
    return atomic_load_explicit(&((struct regcache_entry *)e)->refs, memory_order_acquire) &
           RC_DETACHED;
}

static inline bool rc_entry_covers(const struct regcache_entry *e, uintptr_t start, uintptr_t end)
{
    struct regcache_entry *m = (struct regcache_entry *)e;
    return start >= atomic_load_explicit(&m->match_start, memory_order_acquire) &&
           end <= atomic_load_explicit(&m->match_end, memory_order_acquire);
}

#endif
