/* Least-recently-used order of one device's entries, for eviction. */
#ifndef RC_LRU_H
#define RC_LRU_H

#include <stddef.h>
#include <stdint.h>

struct regcache_entry;

/* heap_idx of an entry that is not in any heap. */
#define RC_LRU_NONE ((size_t)-1)

/* A binary min-heap keyed by each entry's last use.  put() only stamps the
 * entry (no lock, no list surgery on the hit path); the heap catches up
 * lazily when the evictor looks at the top: a stale key is refreshed and
 * sifted down, so the order is exact at eviction time and the cost of
 * keeping it is paid only when eviction happens. */
struct rc_lru {
    struct regcache_entry **heap;
    size_t count, capacity;
};

void rc_lru_init(struct rc_lru *lru);
void rc_lru_fini(struct rc_lru *lru);
/* Add an entry; REGCACHE_ERR_NO_MEMORY when the heap cannot grow. */
int rc_lru_push(struct rc_lru *lru, struct regcache_entry *e);
void rc_lru_remove(struct rc_lru *lru, struct regcache_entry *e);
/* Remove and return the least recently used entry nobody holds, claimed for
 * eviction (see rc_entry_claim_unused); NULL when every entry is held.
 * `now` is the current LRU clock, later than every stamp. */
struct regcache_entry *rc_lru_pop_unused(struct rc_lru *lru, uint64_t now);

#endif
