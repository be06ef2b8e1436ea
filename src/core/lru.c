#include <stdlib.h>

#include "entry.h"
#include "lru.h"
#include "regcache.h"

void rc_lru_init(struct rc_lru *lru)
{
    lru->heap = NULL;
    lru->count = lru->capacity = 0;
}

void rc_lru_fini(struct rc_lru *lru)
{
    free(lru->heap);
    rc_lru_init(lru);
}

static void place(struct rc_lru *lru, size_t i, struct regcache_entry *e)
{
    lru->heap[i] = e;
    e->heap_idx = i;
}

static void sift_up(struct rc_lru *lru, size_t i)
{
    struct regcache_entry *e = lru->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (lru->heap[parent]->heap_key <= e->heap_key)
            break;
        place(lru, i, lru->heap[parent]);
        i = parent;
    }
    place(lru, i, e);
}

static void sift_down(struct rc_lru *lru, size_t i)
{
    struct regcache_entry *e = lru->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= lru->count)
            break;
        if (child + 1 < lru->count && lru->heap[child + 1]->heap_key < lru->heap[child]->heap_key)
            child++;
        if (lru->heap[child]->heap_key >= e->heap_key)
            break;
        place(lru, i, lru->heap[child]);
        i = child;
    }
    place(lru, i, e);
}

int rc_lru_push(struct rc_lru *lru, struct regcache_entry *e)
{
    if (lru->count == lru->capacity) {
        size_t cap = lru->capacity ? lru->capacity * 2 : 64;
        struct regcache_entry **heap = realloc(lru->heap, cap * sizeof(*heap));
        if (!heap)
            return REGCACHE_ERR_NO_MEMORY;
        lru->heap = heap;
        lru->capacity = cap;
    }
    e->heap_key = atomic_load_explicit(&e->last_use, memory_order_relaxed);
    place(lru, lru->count++, e);
    sift_up(lru, lru->count - 1);
    return REGCACHE_OK;
}

void rc_lru_remove(struct rc_lru *lru, struct regcache_entry *e)
{
    size_t i = e->heap_idx;
    e->heap_idx = RC_LRU_NONE;
    struct regcache_entry *last = lru->heap[--lru->count];
    if (i == lru->count)
        return;
    place(lru, i, last);
    /* The moved entry may belong above or below its new slot. */
    sift_up(lru, i);
    sift_down(lru, last->heap_idx);
}

struct regcache_entry *rc_lru_pop_unused(struct rc_lru *lru, uint64_t now)
{
    /* Every pass either evicts, raises a key to a later use, or moves a held
     * entry behind the others; twice the size bounds the work when all are
     * held. */
    size_t budget = 2 * lru->count + 2;
    while (lru->count && budget--) {
        struct regcache_entry *e = lru->heap[0];
        uint64_t used = atomic_load_explicit(&e->last_use, memory_order_relaxed);
        if (used > e->heap_key) {
            e->heap_key = used;
            sift_down(lru, 0);
            continue;
        }
        if (rc_entry_claim_unused(e)) {
            rc_lru_remove(lru, e);
            return e;
        }
        /* Held: it is being used now, so it is the most recent of all. */
        e->heap_key = now > e->heap_key ? now : e->heap_key + 1;
        sift_down(lru, 0);
    }
    return NULL;
}
