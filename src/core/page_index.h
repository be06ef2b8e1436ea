/* The hit path's index: a sharded hash from an aligned page number to the
 * entries that served requests starting in that page.  The interval tree
 * answers overlap queries under the cache lock; this index answers "which
 * entry serves a request starting here" without taking any lock.
 *
 * Each shard is an open-addressing table of 16-byte slots (page, entry)
 * guarded by a sequence counter: writers (serialised by the cache lock) make
 * it odd while they change slots, readers probe without writing anything
 * shared and check afterwards that the counter did not move.  A hit thus
 * writes only the entry's own reference count: threads hitting different
 * entries never share a written cache line.  Readers may look at a slot
 * table that a writer has just replaced, or at an entry that was just
 * recycled: tables are kept until the index is destroyed and entries are
 * type-stable (entry.h), so such a reader only fails validation. */
#ifndef RC_PAGE_INDEX_H
#define RC_PAGE_INDEX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sched.h>
#include <stdint.h>

#include "entry.h"
#include "cpu_relax.h"

struct regcache_entry;

#define RC_SHARDS 64

struct rc_slot {
    _Atomic uintptr_t page;
    _Atomic(struct regcache_entry *) entry; /* NULL: empty */
};

struct rc_slot_table {
    uint32_t mask; /* slots - 1; a power of two */
    struct rc_slot_table *retired_next;
    struct rc_slot slots[];
};

struct rc_shard {
    atomic_uint_fast64_t seq; /* odd while a writer changes the shard */
    _Atomic(struct rc_slot_table *) table;
    uint32_t used; /* writers only */
} __attribute__((aligned(64)));

struct rc_page_index {
    unsigned shift; /* log2 of the page size */
    struct rc_slot_table *retired; /* replaced tables, freed at fini */
    struct rc_shard shards[RC_SHARDS];
};

/* REGCACHE_ERR_NO_MEMORY if the first tables cannot be allocated. */
int rc_page_index_init(struct rc_page_index *idx, unsigned shift);
/* Free every table; no reader may be inside the index. */
void rc_page_index_fini(struct rc_page_index *idx);

/* Under the cache lock: let requests starting in start's page find e.
 * REGCACHE_ERR_NO_MEMORY if the table cannot grow (the entry stays valid;
 * only the fast path misses it). */
int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start);

/* Under the cache lock: forget every page of e.  Once this returns no new
 * lookup can reach e. */
void rc_page_index_remove_entry(struct rc_page_index *idx, struct regcache_entry *e);

/* Page numbers are dense and aligned: a multiplicative mix spreads them;
 * the top bits pick the shard, the low bits the slot. */
static inline uint64_t rc_page_hash(uintptr_t page)
{
    uint64_t h = (uint64_t)page * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static inline struct rc_shard *rc_shard_of(struct rc_page_index *idx, uint64_t h)
{
    return &idx->shards[h >> 58];
}

/* A writer is inside the shard (it holds the cache lock and is moving a few
 * slots).  Spin briefly; if it was preempted, let it run. */
static inline void rc_wait_for_writer(unsigned *spins)
{
    if (++*spins < 128)
        rc_cpu_relax();
    else
        sched_yield();
}

/* The hit path: find an entry covering [start, end) indexed under start's
 * page and take a reference on it; NULL if none.  A reference taken on an
 * entry that turns out to have been replaced meanwhile is handed to
 * `release` and the probe starts over.  Inline: it is most of a hit. */
static inline struct regcache_entry *rc_page_index_hold(struct rc_page_index *idx, uintptr_t start,
                                          uintptr_t end,
                                          void (*release)(struct regcache_entry *e))
{
    uintptr_t page = start >> idx->shift;
    uint64_t h = rc_page_hash(page);
    struct rc_shard *s = rc_shard_of(idx, h);
    unsigned spins = 0;

    for (;;) {
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (seq & 1) {
            rc_wait_for_writer(&spins);
            continue;
        }
        struct rc_slot_table *t = atomic_load_explicit(&s->table, memory_order_acquire);
        struct regcache_entry *e, *found = NULL;
        /* Acquire loads (plain loads on x86) keep the second look at seq
         * after everything the probe read. */
        for (uint32_t i = (uint32_t)h & t->mask;
             (e = atomic_load_explicit(&t->slots[i].entry, memory_order_acquire)) != NULL;
             i = (i + 1) & t->mask) {
            if (atomic_load_explicit(&t->slots[i].page, memory_order_acquire) == page &&
                rc_entry_covers(e, start, end) && rc_entry_try_hold(e)) {
                found = e;
                break;
            }
        }
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) == seq)
            return found;
        if (found)
            release(found);
        rc_wait_for_writer(&spins);
    }
}

#endif
