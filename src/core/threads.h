/* Per-thread records: the memory each thread writes on the hit path, so that
 * threads sharing entries never write a common cache line.
 *
 * A record holds
 *  - the thread's hold slots: a get that hits publishes the entry here (a
 *    hazard pointer) instead of raising the entry's shared count, and its put
 *    clears the slot again.  Evictors and invalidators scan every record's
 *    slots to learn whether an entry is held;
 *  - a log of the entries its last puts released, newest last, which orders
 *    entries that were last used in the same LRU epoch (lru.h);
 *  - its hit counters, per cache and device;
 *  - where the thread is in its walks of the registry of caches, which take
 *    no lock (src/registry).
 *
 * Records are never freed: a thread that exits hands its record to the next
 * thread that needs one (a hold it still had stays in its slot until that
 * entry's put, from whatever thread, clears it).  They live in mmap()ed
 * chunks on one append-only list (for sums over every thread that ever
 * counted).  Scanners of holds look only at the live ones: a compact array
 * of the records whose thread is alive or that still had holds when their
 * thread exited, so that a process that ran many threads once does not pay
 * for each of them at every eviction.  Nor do threads that are alive but
 * idle: a record that held nothing and logged no put between two looks
 * (one every RC_PARK_EVERY scans) is parked, out of the array, and its
 * thread's next hold brings it back (rc_thread_parked()). */
#ifndef RC_THREADS_H
#define RC_THREADS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bounds.h"

#define RC_HOLD_SLOTS 8
/* Nested registry walks (a notify from a callback of a notify) that each
 * say where they are; deeper ones share the last word (src/registry). */
#define RC_WALK_DEPTH 4
#define RC_USE_LOG 256
/* Scans of holds between two looks for idle records to park. */
#define RC_PARK_EVERY 256
/* Caches that count hits in thread records; further caches count in shared
 * counters of their own (correct, slower under many threads). */
#define RC_HIT_CACHES 16

struct regcache_entry;

/* What the get that filled a hold slot leaves for its put, so that the put
 * reads no line of the entry: the LRU epoch the get saw (low bits: a put
 * in the same epoch has nothing to stamp) and the entry's device slot. */
struct rc_hold_note {
    uint32_t epoch;
    uint32_t device_slot;
};

struct rc_thread {
    /* A slot holds (entry | rail) or 0.  Only the owner makes a slot
     * non-zero; any thread's put makes it zero again. */
    _Atomic uintptr_t holds[RC_HOLD_SLOTS];
    /* notes[i] belongs to holds[i]; written by the owner before it hands
     * out the hold, read by its put.  Off the slots' line, which scanners
     * read. */
    struct rc_hold_note notes[RC_HOLD_SLOTS];

    /* walk_at[d]: where the owner's walk of the registry at nesting depth
     * d is (src/registry).  Their own line: destroy reads them while the
     * owner keeps using its slots. */
    _Atomic uintptr_t walk_at[RC_WALK_DEPTH] __attribute__((aligned(64)));
    unsigned walk_depth; /* owner only: nested walks */
    unsigned hint;       /* owner only: the slot to try first */
    /* Set while the record is out of the live array for idleness; on the
     * line of `hint`, which every get of the owner reads anyway. */
    atomic_bool parked;
    unsigned parked_pos; /* under the live lock: use_pos at the last look */
    atomic_bool in_use;
    struct rc_thread *next; /* the global list; set before publication */

    /* The use log: written by the owner only, read by evictors. */
    atomic_uint use_pos __attribute__((aligned(64)));
    _Atomic(struct regcache_entry *) uses[RC_USE_LOG];

    /* hits[cache id][device slot]: written by the owner only. */
    atomic_uint_fast64_t hits[RC_HIT_CACHES][RC_DEVICE_SLOTS] __attribute__((aligned(64)));
} __attribute__((aligned(64)));

/* The note of a hold slot: the notes follow the slots, one word each, so
 * a slot's note is a constant distance from it. */
static inline struct rc_hold_note *rc_hold_note_of(_Atomic uintptr_t *slot)
{
    _Static_assert(offsetof(struct rc_thread, notes) == sizeof(((struct rc_thread *)0)->holds) &&
                       sizeof(struct rc_hold_note) == sizeof(uintptr_t),
                   "notes[i] lies RC_HOLD_SLOTS words after holds[i]");
    return (struct rc_hold_note *)(slot + RC_HOLD_SLOTS);
}

extern __thread struct rc_thread *rc_thread_current __attribute__((tls_model("initial-exec")));

/* The calling thread's record, made on its first call; NULL only when no
 * memory could be had for one. */
struct rc_thread *rc_thread_attach(void);

static inline struct rc_thread *rc_thread_self(void)
{
    struct rc_thread *t = rc_thread_current;
    return __builtin_expect(!!t, 1) ? t : rc_thread_attach();
}

/* Is the record parked (see above)?  A hold published in it counts only
 * once this reads false after the hold's fence: the parker marks the
 * record, fences (heavily) and then looks at its slots, so one of the two
 * sees the other. */
static inline bool rc_thread_parked(struct rc_thread *t)
{
    return atomic_load_explicit(&t->parked, memory_order_relaxed);
}

/* Bring the calling thread's parked record back into the live array;
 * false when no memory could be had for that (the record stays parked and
 * must not hold). */
bool rc_thread_unpark(struct rc_thread *t);

/* The head of the list of every record ever made (NULL before the first). */
struct rc_thread *rc_thread_first(void);

/* Call fn on each live record (see above) until it returns true; true if
 * one did.  A record enters before its thread publishes its first hold
 * (and, parked, again before a hold of its counts), with seq_cst stores
 * that a scanner's seq_cst fence before this call orders (entry.h);
 * records stay readable for the life of the process. */
bool rc_thread_visit(bool (*fn)(struct rc_thread *t, void *arg), void *arg);

/* How many records a visit reads: those whose thread runs and is not
 * parked, and those that a thread left a hold in. */
size_t rc_thread_live_span(void);

/* Is e (any rail) in some thread's hold slots?  The caller has made the
 * change that stops new holds (detach, claim) visible with a seq_cst
 * operation or fence before calling; see entry.h.  Every RC_PARK_EVERY
 * calls also park the idle records. */
bool rc_thread_holds(const struct regcache_entry *e);

/* A cache is destroyed: empty every slot, in any record, that holds an
 * entry for which owns(arg, entry) is true, so that no hold outlives the
 * entry's memory (a later cache's entries may land there). */
void rc_thread_forget_holds(bool (*owns)(const void *arg, const void *entry), const void *arg);

/* Where cache `id`'s row of hit counters lies in every record, in bytes:
 * a hit adds it to its record's address instead of indexing two arrays.
 * 0, which is no row's offset, for id -1 (no row). */
static inline size_t rc_thread_hits_offset(int id)
{
    return id < 0 ? 0
                  : offsetof(struct rc_thread, hits) +
                        (size_t)id * sizeof(((struct rc_thread *)0)->hits[0]);
}

/* Add n hits (-1: take one back) on a device slot to the row at
 * `offset`: the owner's plain addition.  On x86-64 one unlocked add to
 * memory, where the atomic load and store are three instructions: its
 * store of the aligned word is seen whole by the sums' atomic loads, and
 * only the owner writes it.  The asm is no access the sanitizers track. */
static inline void rc_thread_add_hits(struct rc_thread *t, size_t offset, unsigned slot, uint64_t n)
{
    atomic_uint_fast64_t *c = (atomic_uint_fast64_t *)((char *)t + offset) + slot;
#if defined(__x86_64__)
    __asm__("addq %1,%0" : "+m"(*c) : "er"(n));
#else
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
#endif
}

/* Record that the owner released e (put): the use log's newest record. */
static inline void rc_thread_log_use(struct rc_thread *t, struct regcache_entry *e)
{
    unsigned pos = atomic_load_explicit(&t->use_pos, memory_order_relaxed);
    atomic_store_explicit(&t->uses[pos % RC_USE_LOG], e, memory_order_relaxed);
    atomic_store_explicit(&t->use_pos, pos + 1, memory_order_release);
}

/* A cache's slot in the records' hit counters: claimed at create, or -1 when
 * all RC_HIT_CACHES are taken.  The counters of a claimed id start at 0. */
int rc_thread_claim_hit_id(void);
void rc_thread_release_hit_id(int id);

/* The sum of every record's hits for (id, device slot). */
uint64_t rc_thread_sum_hits(int id, int slot);

#endif
