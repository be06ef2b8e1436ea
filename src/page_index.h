/* The hit path's index: a sharded hash from an aligned page number to the
 * entries that served requests starting in that page.  The interval tree
 * answers overlap queries under the cache lock; this index answers "which
 * entry serves a request starting here" with one probe under a per-shard
 * spinlock, so hits on different pages never contend.
 *
 * Each shard is an open-addressing table of 16-byte slots (page, entry)
 * rather than uthash: a lookup touches one slot line and then the entry,
 * where uthash walks bucket, handle and key in separate allocations.  At
 * 100k entries that is the difference between fitting the last-level cache
 * and missing it on every hit. */
#ifndef RC_PAGE_INDEX_H
#define RC_PAGE_INDEX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "spinlock.h"

struct regcache_entry;

#define RC_SHARDS 64

struct rc_slot {
    uintptr_t page;
    struct regcache_entry *entry; /* NULL: empty */
};

struct rc_shard {
    rc_spinlock_t lock;
    uint32_t mask; /* slots - 1; slots is a power of two */
    uint32_t used;
    struct rc_slot *slots;
    /* Hits counted under the shard lock: a per-shard counter costs a plain
     * increment where a cache-wide one would be a contended atomic. */
    atomic_uint_fast64_t hits;
} __attribute__((aligned(64)));

struct rc_page_index {
    unsigned shift; /* log2 of the page size */
    struct rc_shard shards[RC_SHARDS];
};

/* REGCACHE_ERR_NO_MEMORY if the first tables cannot be allocated. */
int rc_page_index_init(struct rc_page_index *idx, unsigned shift);
void rc_page_index_fini(struct rc_page_index *idx);

/* The hit path: find an entry covering [start, end) indexed under start's
 * page and take a reference on it.  NULL if none. */
struct regcache_entry *rc_page_index_hold(struct rc_page_index *idx, uintptr_t start,
                                          uintptr_t end);

/* Under the cache lock: let requests starting in start's page find e.
 * REGCACHE_ERR_NO_MEMORY if the table cannot grow (the entry stays valid;
 * only the fast path misses it). */
int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start);

/* Under the cache lock: forget every page of e.  Once this returns no
 * hit-path lookup can reach e. */
void rc_page_index_remove_entry(struct rc_page_index *idx, struct regcache_entry *e);

uint64_t rc_page_index_hits(const struct rc_page_index *idx);

#endif
