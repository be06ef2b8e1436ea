/* The hit path's index: a sharded hash from an aligned page number to the
 * entries that served requests starting in that page.  The interval tree
 * answers overlap queries under the cache lock; this index answers "which
 * entry serves a request starting here" with one hash probe under a
 * per-shard spinlock, so hits on different pages never contend. */
#ifndef RC_PAGE_INDEX_H
#define RC_PAGE_INDEX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "spinlock.h"

struct regcache_entry;
struct rc_page_node;

#define RC_SHARDS 64

struct rc_shard {
    rc_spinlock_t lock;
    struct rc_page_node *table; /* uthash head */
    /* Hits counted under the shard lock: a per-shard counter costs a plain
     * increment where a cache-wide one would be a contended atomic. */
    atomic_uint_fast64_t hits;
} __attribute__((aligned(64)));

struct rc_page_index {
    unsigned shift; /* log2 of the page size */
    struct rc_shard shards[RC_SHARDS];
};

void rc_page_index_init(struct rc_page_index *idx, unsigned shift);
/* Free every node (entries are not touched). */
void rc_page_index_fini(struct rc_page_index *idx);

/* The hit path: find an entry covering [start, end) whose page is indexed
 * and take a reference on it.  NULL if none. */
struct regcache_entry *rc_page_index_hold(struct rc_page_index *idx, uintptr_t start,
                                          uintptr_t end);

/* Under the cache lock: let requests starting in start's page find e.
 * REGCACHE_ERR_NO_MEMORY if a node cannot be allocated (the entry is still
 * valid; only the fast path misses it). */
int rc_page_index_add(struct rc_page_index *idx, struct regcache_entry *e, uintptr_t start);

/* Under the cache lock: forget every node of e.  Once this returns no
 * hit-path lookup can reach e. */
void rc_page_index_remove_entry(struct rc_page_index *idx, struct regcache_entry *e);

uint64_t rc_page_index_hits(const struct rc_page_index *idx);

#endif
