/* The shared BAR1 budget: one cache's place in its GPU's ledger.
 *
 * BAR1 belongs to the GPU, so every cache of every process on a GPU shares
 * one budget (free BAR1 less the reserve, as the first of them read it).
 * Each (cache, GPU) pair attaches once, keeps its record current from its
 * slow paths, and asks the ledger how much it may keep:
 *   - while the GPU has room, a cache may grow into it;
 *   - once it is full, each cache may keep its fair share: the water level
 *     at which the caches' holdings fill the budget, so caches that use
 *     less leave the rest to the others (never less than budget / caches);
 *   - a cache that registers while the GPU is full but is within its share
 *     raises pressure; every other cache sees it at its next put or miss
 *     and evicts its unused entries down to its share.
 * Nothing is called across processes and nothing waits: the records are
 * lock-free atomics in shared memory (ledger_segment.h), and a process
 * that died, or a fork child, leaves nothing that blocks anyone.  Records
 * of processes that are gone are taken back when a cache attaches and when
 * pressure is raised.
 *
 * Every function is thread safe and may be called in any number of caches
 * at once; all but rc_ledger_detach() only by the process that attached (a
 * fork child's inherited caches answer REGCACHE_ERR_FORKED before them).
 * The ledger is optional: attaching fails (REGCACHE_LEDGER=off, a foreign
 * or corrupt segment, all records in use) and the cache keeps its own
 * budget, as before the ledger existed. */
#ifndef RC_LEDGER_H
#define RC_LEDGER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "budget_source.h"

struct rc_ledger;

/* What every put reads of its ledger, at the start of struct rc_ledger so
 * that the check inlines: the GPU's pressure count and the value of it this
 * cache last answered. */
struct rc_ledger_pulse {
    const _Atomic uint64_t *pressure; /* in the shared segment */
    _Atomic uint64_t seen;
};

/* The counters regcache-stat shows beside a cache's bytes and entries. */
struct rc_ledger_counts {
    uint64_t hits, misses, evictions, inval_tag, inval_notify, reg_failures;
};

/*
 * Attach a cache to the ledger of GPU `gpu_key` (rc_gpu_key()), creating it
 * if needed.  `budget` is this process's reading of the GPU's budget
 * (rc_bar1_budget(); 0 = unknown), `source` where it came from
 * (rc_bar1_budget_source()): it becomes the GPU's when no other live
 * cache is attached or none is known yet, since later readings of free
 * BAR1 already lack what the attached caches registered.  A cache with its
 * own max_bytes attaches with 0, so that its bytes are counted and shown.
 * Returns REGCACHE_OK, REGCACHE_ERR_NO_MEMORY, or REGCACHE_ERR_UNSUPPORTED
 * with regcache_last_error() saying why there is no ledger.
 */
int rc_ledger_attach(const char *gpu_key, size_t budget, enum rc_budget_source source,
                     struct rc_ledger **out);

/* Give the record back and unmap.  In a fork child, a ledger inherited from
 * the parent is only unmapped: the record is the parent's.  NULL is a
 * no-op.  Must not race with other calls on the same ledger. */
void rc_ledger_detach(struct rc_ledger *l);

/* What the cache holds on the GPU now.  The policy reads it from every
 * cache, so call it whenever bytes change (slow paths: registration,
 * eviction, invalidation). */
void rc_ledger_usage(struct rc_ledger *l, size_t bytes, size_t entries);

/* The counters to show; any cadence (they are not policy inputs). */
void rc_ledger_publish(struct rc_ledger *l, const struct rc_ledger_counts *counts);

/*
 * How many bytes the cache may keep before it registers `want` more: a
 * miss evicts unused entries down to it, then registers; a put that saw
 * pressure (want 0) evicts down to it.  Raises pressure when the GPU is
 * over budget even after that eviction.  SIZE_MAX when the GPU's budget is
 * unknown.  Scans the records (slow path only), unless the last scan found
 * none in use but this cache's and none has been claimed since.  When the
 * ledger turns out corrupt, answers from then on as if the budget given to
 * rc_ledger_attach() were this cache's alone (that budget less `want`),
 * writes nothing more to the segment, and regcache_last_error() and
 * rc_ledger_failure() say why.
 */
size_t rc_ledger_limit(struct rc_ledger *l, size_t want);

/* Why the ledger was given up while attached (found corrupt), for the
 * REGCACHE_STATS dump; NULL while it is in use. */
const char *rc_ledger_failure(const struct rc_ledger *l);

/* Whether another cache raised pressure since this ledger last answered
 * true: one load of a shared word that changes only on misses, so a put
 * may ask after releasing its last hold.  A hint: rc_ledger_pressed()
 * decides. */
static inline bool rc_ledger_moved(struct rc_ledger *l)
{
    struct rc_ledger_pulse *p = (struct rc_ledger_pulse *)l;
    return __builtin_expect(atomic_load_explicit(p->pressure, memory_order_acquire) !=
                                atomic_load_explicit(&p->seen, memory_order_relaxed),
                            0);
}

/* Whether the pressure moved, true for the one caller that claims the move
 * (of those asking at once).  Then call rc_ledger_limit(l, 0). */
bool rc_ledger_pressed(struct rc_ledger *l);

/* For tests: called, when set, by rc_ledger_attach() while it claims a
 * record, between taking the record and settling it (a test kills the
 * process there). */
extern void (*rc_ledger_claiming)(void);

/* The policy alone, for tests: the bytes a cache holding `own` may keep
 * before registering `want` on a GPU with `budget` (not 0), where the other
 * caches hold others[0..n), and whether the GPU is still over budget after
 * that eviction and registration (then it raises pressure). */
struct rc_ledger_plan {
    uint64_t keep;
    bool pressure;
};
struct rc_ledger_plan rc_ledger_plan(uint64_t budget, const uint64_t *others, size_t n,
                                     uint64_t own, uint64_t want);

#endif
