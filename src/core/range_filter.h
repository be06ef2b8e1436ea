/* A lock-free, conservative answer to "might an entry of this cache overlap
 * [start, end)?", for regcache_notify_free(): most frees are of memory the
 * cache never registered, and they should cost a few loads, not the cache
 * lock and a tree walk.
 *
 * Entries are counted per address chunk at two granularities, 2 MiB and
 * 1 GiB, in hashed tables: an entry adds to the fine chunks it touches when
 * they are few, else to the coarse ones, else to `huge`.  A query looks at
 * its own fine and coarse chunks; it answers "no" only when all of them, and
 * `huge`, are zero, so collisions cost a slow path, never a missed entry.
 * Writers hold the cache lock; readers take none (registry.c says why what
 * they read is current). */
#ifndef RC_RANGE_FILTER_H
#define RC_RANGE_FILTER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define RC_FILTER_SLOTS 4096

struct rc_range_filter {
    atomic_uint fine[RC_FILTER_SLOTS];
    atomic_uint coarse[RC_FILTER_SLOTS];
    atomic_uint huge;
};

void rc_filter_add(struct rc_range_filter *f, uintptr_t start, uintptr_t end);
void rc_filter_remove(struct rc_range_filter *f, uintptr_t start, uintptr_t end);
bool rc_filter_may_overlap(const struct rc_range_filter *f, uintptr_t start, uintptr_t end);

#endif
