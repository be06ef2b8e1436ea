#include "lru.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <utlist.h>

#include "compiler.h"
#include "entry.h"
#include "regcache.h"
#include "threads.h"

void rc_lru_init(struct rc_lru *lru, struct rc_page_index *index)
{
    lru->head = NULL;
    lru->heap = NULL;
    lru->keys = NULL;
    lru->heaped = lru->count = lru->capacity = 0;
    lru->index = index;
}

void rc_lru_fini(struct rc_lru *lru)
{
    free(lru->heap);
    free(lru->keys);
    rc_lru_init(lru, lru->index);
}

/* What moves between the heap's slots: a key and its entry. */
struct node {
    uint64_t key;
    struct regcache_entry *e;
};

static struct node node_at(const struct rc_lru *lru, size_t i)
{
    return (struct node){ lru->keys[i], lru->heap[i].e };
}

static void place(struct rc_lru *lru, size_t i, struct node n)
{
    lru->keys[i] = n.key;
    lru->heap[i].e = n.e;
    n.e->heap_idx = i;
}

/* Four children a node: half the levels of a binary heap, so half the
 * entries whose heap_idx a sift writes, and the four keys compared at each
 * level are 32 bytes of one array. */
#define ARITY 4

static size_t parent_of(size_t i)
{
    return (i - 1) / ARITY;
}

static size_t first_child(size_t i)
{
    return ARITY * i + 1;
}

/* A hole at i, for a node of key `key`, rises no higher than `top` while
 * its parent's key is greater (or equal too, `past_equal`): each such
 * parent moves down into it.  Returns where the hole stops. */
static size_t climb(struct rc_lru *lru, size_t i, size_t top, uint64_t key, bool past_equal)
{
    while (i > top) {
        size_t parent = parent_of(i);
        if (lru->keys[parent] < key || (lru->keys[parent] == key && !past_equal))
            break;
        place(lru, i, node_at(lru, parent));
        i = parent;
    }
    return i;
}

/* Fill the hole at i with n, which belongs at or above it. */
static void sift_up(struct rc_lru *lru, size_t i, struct node n)
{
    place(lru, climb(lru, i, 0, n.key, false), n);
}

/* The child with the least key of a full set of siblings, chosen by
 * selects rather than branches: which one it is follows no pattern, so
 * branches would mispredict at every level. */
static size_t least_of_four(const uint64_t *keys, size_t first)
{
    uint64_t k0 = keys[first], k1 = keys[first + 1], k2 = keys[first + 2], k3 = keys[first + 3];
    size_t a = first + (k1 < k0), b = first + 2 + (k3 < k2);
    uint64_t ka = k1 < k0 ? k1 : k0, kb = k3 < k2 ? k3 : k2;
    return a ^ ((a ^ b) & -(size_t)(kb < ka));
}

/* The hole at i walks down along the least children, each moving up into
 * it, while they are four; returns where it stops.  Out of line, so that
 * the loop keeps nothing for the caller's work after it. */
static __attribute__((noinline)) size_t hole_past_full(struct rc_lru *lru, size_t i)
{
    /* Nodes before this one have all four children. */
    size_t full = (lru->heaped - 1) / ARITY;
    while (i < full) {
        size_t child = least_of_four(lru->keys, first_child(i));
        place(lru, i, node_at(lru, child));
        i = child;
    }
    return i;
}

/* The hole at i walks down to a leaf along the least children; returns
 * the leaf. */
static size_t hole_to_leaf(struct rc_lru *lru, size_t i)
{
    i = hole_past_full(lru, i);
    size_t first = first_child(i);
    if (first >= lru->heaped)
        return i;
    size_t child = first;
    for (size_t c = first + 1; c < lru->heaped; c++)
        if (lru->keys[c] < lru->keys[child])
            child = c;
    place(lru, i, node_at(lru, child));
    return child;
}

/* Fill the hole at i with n, which belongs at or below it.  What fills
 * holes here is mostly the newest node (the last leaf, a key just
 * refreshed, a held entry sent behind), whose place is at the bottom: so
 * the hole first goes down to a leaf, comparing siblings only, and n then
 * climbs back, mostly not at all (Floyd's sift).  n climbs past equal
 * keys: it stops where a sift comparing it at every level would have, so
 * the heap ends exactly as with one. */
static void sift_down(struct rc_lru *lru, size_t i, struct node n)
{
    place(lru, climb(lru, hole_to_leaf(lru, i), i, n.key, true), n);
}

/* The stamp an entry carries now. */
static uint64_t used_at(const struct regcache_entry *e)
{
    return atomic_load_explicit(&((struct regcache_entry *)e)->last_use, memory_order_relaxed);
}

static void enqueue(struct rc_lru *lru, struct regcache_entry *e, uint64_t key)
{
    e->heap_idx = RC_LRU_QUEUED;
    e->queued_key = key;
    DL_APPEND2(lru->head, e, lru_prev, lru_next);
}

struct regcache_entry *rc_lru_tail(const struct rc_lru *lru)
{
    return lru->head ? lru->head->lru_prev : NULL;
}

static void dequeue(struct rc_lru *lru, struct regcache_entry *e)
{
    DL_DELETE2(lru->head, e, lru_prev, lru_next);
}

/* e, in neither structure, joins the LRU at `key`: behind the queue when
 * that keeps the queue's keys rising, else in the heap, which has room. */
static void file(struct rc_lru *lru, struct regcache_entry *e, uint64_t key)
{
    if (!rc_lru_tail(lru) || key > rc_lru_tail(lru)->queued_key)
        enqueue(lru, e, key);
    else
        sift_up(lru, lru->heaped++, (struct node){ key, e });
}

/* Grow the heap's arrays, then push.  Out of line and ending in a tail
 * call, so that a push with room saves fewer registers.  The arrays grow
 * one at a time; one grown alone is just larger than it need be. */
static COLD int grow_and_push(struct rc_lru *lru, struct regcache_entry *e)
{
    size_t cap = lru->capacity ? lru->capacity * 2 : 64;
    uint64_t *keys = realloc(lru->keys, cap * sizeof(*keys));
    if (!keys)
        return REGCACHE_ERR_NO_MEMORY;
    lru->keys = keys;
    struct rc_lru_node *heap = realloc(lru->heap, cap * sizeof(*heap));
    if (!heap)
        return REGCACHE_ERR_NO_MEMORY;
    lru->heap = heap;
    lru->capacity = cap;
    return rc_lru_push(lru, e);
}

int rc_lru_push(struct rc_lru *lru, struct regcache_entry *e)
{
    if (lru->count == lru->capacity)
        return grow_and_push(lru, e);
    lru->count++;
    file(lru, e, used_at(e));
    return REGCACHE_OK;
}

/* Close the hole at i that an entry left: the last node fills it. */
static void fill_hole(struct rc_lru *lru, size_t i)
{
    struct node last = node_at(lru, --lru->heaped);
    if (i == lru->heaped)
        return;
    if (i && lru->keys[parent_of(i)] > last.key)
        sift_up(lru, i, last);
    else
        sift_down(lru, i, last);
}

void rc_lru_remove(struct rc_lru *lru, struct regcache_entry *e)
{
    size_t i = e->heap_idx;
    e->heap_idx = RC_LRU_NONE;
    lru->count--;
    if (i == RC_LRU_QUEUED)
        dequeue(lru, e);
    else
        fill_hole(lru, i);
}

/* How recently each logged entry was put: its smallest distance from the
 * newest record of any thread's log.  Log records are only compared, never
 * followed: they may name entries of caches destroyed since. */
struct use_rank {
    uintptr_t entry;
    unsigned rank;
};

static int by_entry(const void *a, const void *b)
{
    const struct use_rank *x = a, *y = b;
    if (x->entry != y->entry)
        return x->entry < y->entry ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

struct ranks {
    struct use_rank *r;
    size_t n, cap;
};

/* Append one thread's log; true (stop) when out of memory: the order is
 * then by the ranks collected so far. */
static bool collect_log(struct rc_thread *t, void *arg)
{
    struct ranks *rs = arg;
    unsigned pos = atomic_load_explicit(&t->use_pos, memory_order_acquire);
    unsigned logged = pos < RC_USE_LOG ? pos : RC_USE_LOG;
    if (rs->n + logged > rs->cap) {
        size_t cap = (rs->n + logged) * 2;
        struct use_rank *grown = realloc(rs->r, cap * sizeof(*grown));
        if (!grown)
            return true;
        rs->r = grown;
        rs->cap = cap;
    }
    for (unsigned k = 0; k < logged; k++) {
        struct regcache_entry *e =
            atomic_load_explicit(&t->uses[(pos - 1 - k) % RC_USE_LOG], memory_order_relaxed);
        rs->r[rs->n++] = (struct use_rank){ (uintptr_t)e, k };
    }
    return false;
}

static size_t collect_ranks(struct use_rank **out)
{
    struct ranks rs = { NULL, 0, 0 };
    rc_thread_visit(collect_log, &rs);
    if (rs.n)
        qsort(rs.r, rs.n, sizeof(*rs.r), by_entry);
    *out = rs.r;
    return rs.n;
}

static unsigned rank_of(const struct use_rank *r, size_t n, const struct regcache_entry *e)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].entry < (uintptr_t)e)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo].entry == (uintptr_t)e ? r[lo].rank : ~0u;
}

/* Entries last used in `epoch`, the least key, have it as key too (a key
 * is at most its entry's last use).  In the queue, whose keys differ, only
 * the head can; in the heap, where keys only grow downwards, they lie on a
 * plateau of that key from the root, and a walk of them stops wherever the
 * key grows. */

/* Whether i has its four children and all are off the plateau: their
 * keys, read from the array, tell so without visiting an entry.  Mostly
 * none is on it, so the branches are predicted. */
static bool plateau_ends_at(const struct rc_lru *lru, size_t i, uint64_t epoch)
{
    size_t first = first_child(i);
    const uint64_t *k = &lru->keys[first];
    return first + ARITY <= lru->heaped && k[0] != epoch && k[1] != epoch && k[2] != epoch &&
           k[3] != epoch;
}

/* How many entries at or below i, a node of the plateau, were last used in
 * the epoch (counting stops at `enough`)? */
static COLD size_t used_in_epoch(const struct rc_lru *lru, size_t i, uint64_t epoch, size_t enough)
{
    size_t n = used_at(lru->heap[i].e) == epoch;
    if (plateau_ends_at(lru, i, epoch))
        return n;
    size_t first = first_child(i), end = first + ARITY;
    if (end > lru->heaped)
        end = lru->heaped;
    for (size_t c = first; c < end && n < enough; c++)
        if (lru->keys[c] == epoch)
            n += used_in_epoch(lru, c, epoch, enough - n);
    return n;
}

/* Were several entries last used in `epoch`, the least key?  Nearly always
 * the least entry alone was, and the queue's head and the root's children
 * say so before the count is called (it saves and restores registers for
 * its recursion). */
static bool several_used_in(const struct rc_lru *lru, uint64_t epoch)
{
    const struct regcache_entry *q = lru->head;
    size_t n = q && q->queued_key == epoch && used_at(q) == epoch;
    if (lru->heaped && lru->keys[0] == epoch)
        n += plateau_ends_at(lru, 0, epoch) ? used_at(lru->heap[0].e) == epoch
                                            : used_in_epoch(lru, 0, epoch, 2);
    return n > 1;
}

/* If e was last used in the epoch and nobody holds it, and the use logs
 * rank it less recent than *best, it is the new *best. */
static void rank_candidate(struct regcache_entry *e, uint64_t epoch, const struct use_rank *ranks,
                           size_t n, struct regcache_entry **best, unsigned *best_rank)
{
    if (used_at(e) != epoch || rc_entry_held(e))
        return;
    unsigned rank = rank_of(ranks, n, e);
    if (!*best || rank > *best_rank) {
        *best = e;
        *best_rank = rank;
    }
}

/* The least recent unused entry of the heap's plateau at or below i. */
static void least_recent(struct rc_lru *lru, size_t i, uint64_t epoch, const struct use_rank *ranks,
                         size_t n, struct regcache_entry **best, unsigned *best_rank)
{
    if (i >= lru->heaped || lru->keys[i] != epoch)
        return;
    rank_candidate(lru->heap[i].e, epoch, ranks, n, best, best_rank);
    for (size_t c = first_child(i); c < first_child(i) + ARITY; c++)
        least_recent(lru, c, epoch, ranks, n, best, best_rank);
}

/* Several entries were last used in the least key's epoch: the least
 * recent unused one by the use logs, claimed; NULL when all are held. */
static COLD struct regcache_entry *pop_within_epoch(struct rc_lru *lru, uint64_t epoch)
{
    struct use_rank *ranks;
    size_t n = collect_ranks(&ranks);
    for (;;) {
        struct regcache_entry *best = NULL;
        unsigned best_rank = 0;
        if (lru->head && lru->head->queued_key == epoch)
            rank_candidate(lru->head, epoch, ranks, n, &best, &best_rank);
        least_recent(lru, 0, epoch, ranks, n, &best, &best_rank);
        if (!best || rc_entry_claim_unused(best, lru->index)) {
            free(ranks);
            if (best)
                rc_lru_remove(lru, best);
            return best;
        }
        /* A hit took it between the look and the claim: look again. */
    }
}

/* The entry of the least key, the queue's head or the heap's root. */
struct least {
    struct regcache_entry *e;
    uint64_t key;
    bool queued;
};

static struct least least_of(const struct rc_lru *lru)
{
    struct regcache_entry *q = lru->head;
    if (q && (!lru->heaped || q->queued_key <= lru->keys[0]))
        return (struct least){ q, q->queued_key, true };
    return (struct least){ lru->heap[0].e, lru->keys[0], false };
}

/* The least entry's key becomes `key`, a later one. */
static void rekey(struct rc_lru *lru, struct least top, uint64_t key)
{
    if (top.queued) {
        dequeue(lru, top.e);
        file(lru, top.e, key);
    } else {
        sift_down(lru, 0, (struct node){ key, top.e });
    }
}

struct regcache_entry *rc_lru_pop_unused(struct rc_lru *lru, uint64_t now, uint64_t newest)
{
    /* Every pass either evicts, raises a key to a later use, or moves a held
     * entry behind the others; twice the size bounds the work when all are
     * held. */
    size_t budget = 2 * lru->count + 2;
    while (lru->count && budget--) {
        struct least top = least_of(lru);
        uint64_t used = used_at(top.e);
        if (used > top.key) {
            rekey(lru, top, used);
            continue;
        }
        /* Every key left is at least this one, and no use is older than
         * its key. */
        if (used > newest)
            return NULL;
        /* Entries last used in the same epoch are ordered by the use logs,
         * whether it is the current one or an older one; never used ones
         * (epoch 0) are in no log. */
        uint64_t epoch = top.key;
        if (epoch && (epoch >= now || several_used_in(lru, epoch))) {
            struct regcache_entry *chosen = pop_within_epoch(lru, epoch);
            if (chosen || epoch >= now)
                return chosen;
            /* All of the epoch's entries are held: move them behind. */
        }
        if (rc_entry_claim_unused(top.e, lru->index)) {
            rc_lru_remove(lru, top.e);
            return top.e;
        }
        /* Held: it is being used now, so it is the most recent of all. */
        rekey(lru, top, now);
    }
    return NULL;
}

struct regcache_entry *rc_lru_least(const struct rc_lru *lru)
{
    return lru->count ? least_of(lru).e : NULL;
}

struct regcache_entry *rc_lru_after(const struct regcache_entry *e)
{
    return e->heap_idx == RC_LRU_QUEUED ? e->lru_next : NULL;
}

size_t rc_lru_held(const struct rc_lru *lru)
{
    size_t held = 0;
    for (const struct regcache_entry *e = lru->head; e; e = e->lru_next)
        held += rc_entry_held(e);
    for (size_t i = 0; i < lru->heaped; i++)
        held += rc_entry_held(lru->heap[i].e);
    return held;
}

bool rc_lru_lists(const struct rc_lru *lru, const struct regcache_entry *e)
{
    return e->heap_idx == RC_LRU_QUEUED ||
           (e->heap_idx < lru->heaped && lru->heap[e->heap_idx].e == e);
}

static COLD void broken(const char *what, size_t at)
{
    fprintf(stderr, "regcache: LRU broken: %s at %zu\n", what, at);
    abort();
}

void rc_lru_check(const struct rc_lru *lru)
{
    size_t queued = 0;
    const struct regcache_entry *prev = NULL;
    for (const struct regcache_entry *e = lru->head; e; prev = e, e = e->lru_next, queued++)
        if (e->heap_idx != RC_LRU_QUEUED || (prev && e->lru_prev != prev) ||
            (prev && prev->queued_key >= e->queued_key))
            broken("queue", queued);
    if (prev != rc_lru_tail(lru) || queued + lru->heaped != lru->count ||
        lru->count > lru->capacity)
        broken("counts", queued);
    for (size_t i = 0; i < lru->heaped; i++) {
        const struct regcache_entry *e = lru->heap[i].e;
        if (e->heap_idx != i || (i && lru->keys[parent_of(i)] > lru->keys[i]))
            broken("heap", i);
    }
}
