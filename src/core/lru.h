/* Least-recently-used order of one device's entries, for eviction.
 *
 * Time is an epoch counter of the cache that advances at every
 * registration.  An entry is stamped with the epoch of its last use: by the
 * first hit of each epoch (which the index slot's copy of the stamp tells,
 * page_index.h), and by a put whose hold spanned a registration; so
 * entries in steady use are never written (many threads can share them
 * without moving their lines between cores), and the evictor sees exactly
 * which entries were used before which registration.  Among
 * entries last used in the same epoch, the threads' use logs (threads.h)
 * give the order: exact among one thread's last RC_USE_LOG puts, by rank
 * within each thread's log across threads; entries in no log count as the
 * least recent of the epoch, and so do those only in the log of a thread
 * whose record is parked for idleness (threads.h), which is not read.
 *
 * The order lives in two structures, and the least key of either is next:
 *  - a queue of the entries whose key is still the stamp they were pushed
 *    with, in the order pushed.  A registration pushes its entry stamped
 *    with the epoch it opened, later than any key before, so the queue's
 *    keys rise by construction, and an evicting miss (which pops one entry
 *    and pushes one) touches besides them only the next in line;
 *  - a 4-ary min-heap keyed by stamp for every entry whose key changed
 *    (found used since, or held) or that was pushed out of order.
 * Keys are brought up to date lazily: the evictor refreshes a stale key at
 * the front and moves the entry into the heap (or behind the queue when
 * its key is the latest), so keeping the order costs nothing until
 * eviction happens.  Heap keys sit in an array of their own, index for
 * index beside the entries', so that sifting compares within it (siblings'
 * keys are adjacent words) instead of visiting an entry per level. */
#ifndef RC_LRU_H
#define RC_LRU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct regcache_entry;
struct rc_page_index;

/* heap_idx of an entry that is not in the LRU, and of one in its queue. */
#define RC_LRU_NONE ((size_t)-1)
#define RC_LRU_QUEUED ((size_t)-2)

/* A slot of the heap; its key is the same index of the keys' array. */
struct rc_lru_node {
    struct regcache_entry *e;
};

struct rc_lru {
    /* The queue, oldest first, linked through the entries. */
    struct regcache_entry *head; /* utlist: head->lru_prev is the tail */
    struct rc_lru_node *heap;
    /* keys[i]: heap[i]'s stamp when last looked at. */
    uint64_t *keys;
    /* Entries in the heap; in the heap and the queue; room in the heap's
     * arrays, at least count, so that an entry can always move from the
     * queue into the heap. */
    size_t heaped, count, capacity;
    /* Where the entries are listed for hits: a claim takes its entry out
     * before it decides that nobody holds it (entry.h). */
    struct rc_page_index *index;
};

void rc_lru_init(struct rc_lru *lru, struct rc_page_index *index);
void rc_lru_fini(struct rc_lru *lru);
/* Add an entry; REGCACHE_ERR_NO_MEMORY when the heap cannot grow. */
int rc_lru_push(struct rc_lru *lru, struct regcache_entry *e);
void rc_lru_remove(struct rc_lru *lru, struct regcache_entry *e);
/* Remove and return the least recently used entry nobody holds, claimed for
 * eviction (rc_entry_claim_unused); NULL when every entry is held, or every
 * unheld one was used after epoch `newest`.  `now` is the cache's current
 * epoch.  Entries never used (stamped 0, speculative) come first. */
struct regcache_entry *rc_lru_pop_unused(struct rc_lru *lru, uint64_t now, uint64_t newest);
/* The entry a pop would look at first, or NULL: the likely next victim
 * (it may turn out held, or used since), for a prefetch. */
struct regcache_entry *rc_lru_least(const struct rc_lru *lru);
/* The entry queued after e, or NULL (e is last, or in the heap): the likely
 * victim after it, for a prefetch one eviction further ahead. */
struct regcache_entry *rc_lru_after(const struct regcache_entry *e);
/* How many of its entries are held (a slow walk, for error messages). */
size_t rc_lru_held(const struct rc_lru *lru);
/* Is e in the LRU where its heap_idx says? */
bool rc_lru_lists(const struct rc_lru *lru, const struct regcache_entry *e);
/* Abort unless the queue's keys rise, the heap property holds and every
 * heap_idx is right. */
void rc_lru_check(const struct rc_lru *lru);

/* The queue's last entry (utlist keeps it as the head's prev), or NULL. */
struct regcache_entry *rc_lru_tail(const struct rc_lru *lru);

#endif
