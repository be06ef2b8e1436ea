/* A cached registration, and the protocol that lets the hit path hold it
 * without any lock and without writing a line other threads read.
 *
 * Entries are type-stable: their memory comes from the cache's entry pool
 * and returns there, never to malloc, until the cache is destroyed.  A hit
 * may therefore look at an entry that was just recycled for another range;
 * it then fails validation and looks again, where on freed memory the look
 * would be a read of someone else's allocation.
 *
 * Two kinds of hold keep an entry registered:
 *  - a slot hold: the entry's address in a hold slot of the getting thread's
 *    record (threads.h), a hazard pointer.  Hits take these: the only write
 *    is to the thread's own line.
 *  - a counted hold: one unit of `refs`, taken under the cache lock only.
 *    Gets of a thread whose slots are all in use, one-shot registrations
 *    and registrations of one more rail take these.
 *
 * The top bit of refs marks an entry that has left the cache (invalidated,
 * evicted, or being destroyed): it gains no new counted holds, and whoever
 * finds it unheld deregisters it.  Whether an entry is held is decided the
 * way hazard pointers are, with the page index as the thing published:
 * the getter publishes its slot, then (after a seq_cst fence) checks that
 * the index shard it found the entry in did not change; whoever takes the
 * entry out of the cache takes it out of the index first, then (after a
 * seq_cst fence) scans the slots.  At least one of them sees the other.
 * So a hit reads no line of the entry (page_index.h). */
#ifndef RC_ENTRY_H
#define RC_ENTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "bounds.h"
#include "compiler.h"
#include "interval_tree.h"

struct regcache;
struct rc_page_index;

#define RC_DETACHED 0x80000000u
#define RC_COUNT_MASK 0x7fffffffu

/* A slot holds (entry | rail): entries are 64-byte aligned. */
#define RC_HOLD_RAIL_MASK ((uintptr_t)63)

#define RC_INLINE_PAGES 2

/* What a get asks for: its rail, and the IBV_ACCESS_* set it needs, or
 * RC_ACCESS_DEFAULT for the cache's params.access.  Eight bytes: passed
 * in one register through the hit path. */
struct rc_req {
    unsigned rail;
    unsigned want;
};

/* In an entry's access: it covers params.access, so that gets with the
 * cache's access compare one bit (no IBV_ACCESS_* flag is this high). */
#define RC_ACCESS_DEFAULT 0x80000000u

/* Does an entry's access (with its RC_ACCESS_DEFAULT bit) serve want? */
static inline bool rc_access_covers(unsigned have, unsigned want)
{
    return (have & want) == want;
}

enum rc_entry_state {
    RC_PENDING, /* first registration in flight; concurrent misses wait */
    RC_READY,   /* in the cache: tree, page index, LRU, budget */
    RC_ZOMBIE,  /* left the cache but still held; released unheld */
    RC_FREE     /* in the pool */
};

/* One more VMM mapping that an entry spans, beside the first (whose id is
 * the entry's buffer_id): tag checks and staleness compare each. */
struct rc_mapping {
    uintptr_t base;
    uint64_t buffer_id;
};

/* A callback of regcache_entry_invalidate(), due once the entry is
 * deregistered (entry_token.c, release.c). */
struct rc_completion {
    void (*cb)(void *arg);
    void *arg;
    struct rc_completion *next;
};

struct regcache_entry {
    /* First line: what slow hits, counted puts and TAG_CHECK hits of
     * several mappings read (a hit reads its index slot's copies). */
    /* Requests inside [match_start, match_end) are served by this entry:
     * the registered range clipped to the allocation, so two allocations
     * packed into one page never serve each other.  Atomic because a hit
     * reads them before it knows the entry is still this one. */
    _Atomic uintptr_t match_start, match_end;
    atomic_uint refs;
    atomic_uint rails_ready; /* bit r: registered on rail r */
    uint64_t buffer_id;      /* 0: pageable host memory, never tag-checked */
    struct regcache *cache;
    const struct rc_mapping *more; /* further mappings, or NULL */
    uint32_t nmore;
    int device_slot;
    /* The LRU epoch of the last use (lru.h). */
    atomic_uint_fast64_t last_use;

    /* The rest is touched under the cache lock only (handles also by the
     * holder, once ready). */
    void *handles[RC_MAX_RAILS];
    struct rc_itree_node node; /* registered range, in cache->tree */
    enum rc_entry_state state;
    bool heavy_scan;        /* its cache's hits do not fence (cache.h) */
    unsigned rails_pending; /* rails being registered now, each by one thread */
    /* The thread registering each pending rail (for REENTRANT). */
    const void *registrants[RC_MAX_RAILS];
    int device; /* the backend's device argument */
    /* The IBV_ACCESS_* set registered (the union of the gets it was made
     * for), with RC_ACCESS_DEFAULT when that covers params.access.  Set
     * before the first registration, never changed after. */
    unsigned access;
    /* params.on_leave was called for it (under the lock, or by the one
     * thread that owns the notice). */
    bool noticed;
    /* The list of entries whose notice is due (release.c). */
    struct regcache_entry *notice_next;
    /* Why it left the cache (enum regcache_reason), set when it leaves. */
    uint8_t reason;
    uint64_t born; /* when its first registration ended, a clock reading (the dump's age) */
    /* Its place in the LRU (lru.h): a heap index, RC_LRU_QUEUED or
     * RC_LRU_NONE; in the queue, its neighbours and its key. */
    size_t heap_idx;
    struct regcache_entry *lru_prev, *lru_next;
    uint64_t queued_key;
    /* Pages under which the page index lists this entry. */
    uintptr_t *pages;
    uint32_t npages, pages_cap;
    uintptr_t pages_inline[RC_INLINE_PAGES];
    /* Pageable host memory: the mark of the listener that watches such
     * memory (its before_register's, listeners.h), from before the first
     * registration until after the deregistration; NULL else. */
    void *mark;
    /* Zombie list, or a caller's list of victims to deregister. */
    struct regcache_entry *link_next, *link_prev;
    /* Callbacks of regcache_entry_invalidate() due after its
     * deregistration (entry_token.c); NULL in the pool. */
    struct rc_completion *completions;
} __attribute__((aligned(64)));

/* Its private data (params.priv_size bytes), right after it in the pool. */
static inline void *rc_entry_priv(const struct regcache_entry *e)
{
    return (char *)(uintptr_t)e + sizeof(*e);
}

/* The entry whose tree node n is. */
static inline struct regcache_entry *rc_entry_of_node(struct rc_itree_node *n)
{
    return rc_container_of(n, struct regcache_entry, node);
}

/* Take a counted hold unless the entry has left the cache.  Returns
 * REGCACHE_OK, or ERR_HOLD_LIMIT when the count is full, or 1 when the
 * entry is detached. */
static inline int rc_entry_try_hold(struct regcache_entry *e)
{
    unsigned old = atomic_load_explicit(&e->refs, memory_order_relaxed);
    do {
        if (old & RC_DETACHED)
            return 1;
        if ((old & RC_COUNT_MASK) == RC_COUNT_MASK)
            return REGCACHE_ERR_HOLD_LIMIT;
    } while (!atomic_compare_exchange_weak_explicit(&e->refs, &old, old + 1, memory_order_seq_cst,
                                                    memory_order_relaxed));
    return REGCACHE_OK;
}

/* The handle of a counted hold of e on `rail` (hold.h): the entry's
 * address, the rail in bits 1-5. */
static inline regcache_entry_t *rc_counted_handle(struct regcache_entry *e, unsigned rail)
{
    return (regcache_entry_t *)((uintptr_t)e | ((uintptr_t)rail << 1));
}

static inline bool rc_entry_is_detached(const struct regcache_entry *e)
{
    return atomic_load_explicit(&((struct regcache_entry *)e)->refs, memory_order_relaxed) &
           RC_DETACHED;
}

static inline bool rc_entry_covers(const struct regcache_entry *e, uintptr_t start, uintptr_t end)
{
    struct regcache_entry *m = (struct regcache_entry *)e;
    return start >= atomic_load_explicit(&m->match_start, memory_order_relaxed) &&
           end <= atomic_load_explicit(&m->match_end, memory_order_relaxed);
}

/* Pageable host memory: what the host memory monitor watches. */
static inline bool rc_entry_pageable(const struct regcache_entry *e)
{
    return e->device_slot == RC_HOST_SLOT && !e->buffer_id;
}

static inline bool rc_entry_overlaps(const struct regcache_entry *e, uintptr_t start, uintptr_t end)
{
    struct regcache_entry *m = (struct regcache_entry *)e;
    return start < atomic_load_explicit(&m->match_end, memory_order_relaxed) &&
           atomic_load_explicit(&m->match_start, memory_order_relaxed) < end;
}

/* Claim an unused entry for eviction: nobody holds it, and from now on
 * nobody can; it has left `index` as well.  Under the cache lock. */
bool rc_entry_claim_unused(struct regcache_entry *e, struct rc_page_index *index);

/* Mark the entry as gone from the cache; true when nobody holds it, so the
 * caller must deregister it (else its last holder will).  Under the cache
 * lock. */
bool rc_entry_detach(struct regcache_entry *e);

/* Is e held, counted or in a slot?  After the caller's seq_cst change. */
bool rc_entry_held(const struct regcache_entry *e);

#endif
