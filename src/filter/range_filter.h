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
 *
 * The fine table grows with the chunks in use: a fixed one saturates at a
 * few thousand chunks (100k entries of 64 KiB fill 3200), and then half of
 * the frees of unrelated memory took the slow path.  The cache refills a
 * larger table from its entries and only then publishes it; replaced tables
 * stay until the filter is finished, so a reader may still look at one.
 * Writers hold the cache lock; readers take none (invalidate.c says why what
 * they read is current, and why a table replaced meanwhile still is). */
#ifndef RC_RANGE_FILTER_H
#define RC_RANGE_FILTER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RC_FILTER_COARSE_SLOTS 4096

struct rc_filter_table {
    struct rc_filter_table *retired_next;
    unsigned bits;   /* log2 of the slots */
    size_t occupied; /* slots above zero; writers only */
    /* Past this many occupied slots the table asks to grow: a bound worked
     * out once, not a product on every add; never, at the largest size. */
    size_t crowded_above;
    atomic_uint n[];
};

struct rc_range_filter {
    _Atomic(struct rc_filter_table *) fine;
    struct rc_filter_table *retired;
    atomic_uint coarse[RC_FILTER_COARSE_SLOTS];
    atomic_uint huge;
};

/* REGCACHE_ERR_NO_MEMORY when the first fine table cannot be allocated. */
int rc_filter_init(struct rc_range_filter *f);
/* Free every table; no reader may be inside the filter. */
void rc_filter_fini(struct rc_range_filter *f);

/* Count [start, end), never empty, in.  True when the fine table is
 * crowded: the caller should grow it (below) once it can list every range
 * counted. */
bool rc_filter_add(struct rc_range_filter *f, uintptr_t start, uintptr_t end);
void rc_filter_remove(struct rc_range_filter *f, uintptr_t start, uintptr_t end);
bool rc_filter_may_overlap(const struct rc_range_filter *f, uintptr_t start, uintptr_t end);

/* Growing the fine table, once rc_filter_add() asked for it: an empty
 * larger table (NULL when there is no memory: the filter stays as it is,
 * correct and slower), then every range counted in the filter refilled into
 * it, then the table published. */
struct rc_filter_table *rc_filter_grow_begin(const struct rc_range_filter *f);
/* Whether t, made by rc_filter_grow_begin() without the writers' lock, is
 * still the next size (no other writer grew the table meanwhile). */
bool rc_filter_grows_into(const struct rc_range_filter *f, const struct rc_filter_table *t);
void rc_filter_refill(struct rc_filter_table *t, uintptr_t start, uintptr_t end);
void rc_filter_grow_end(struct rc_range_filter *f, struct rc_filter_table *t);

/* Forget every range counted (a fork child's copy of a filter whose ranges
 * are its parent's); writers only. */
void rc_filter_clear(struct rc_range_filter *f);

#endif
