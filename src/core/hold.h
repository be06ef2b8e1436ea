/* The handle a user holds: how a hold is encoded, taken in a slot or
 * counted, let go of, and read through the regcache_entry_* accessors.
 *
 * A handle is a slot address with bit 0 set (a slot hold: the entry and
 * rail in one of the thread's hold slots, threads.h), or an entry address
 * with the rail in bits 1-5 (a counted hold: one unit of the entry's refs,
 * entry.h); entries are 64-byte aligned.  The hit path (hit_path.c) takes
 * and lets go of slot holds inline through the functions here; everything
 * else - counted holds, slot holds taken under the lock by the miss path,
 * misuse checks - is in hold.c, so that neither the hit nor the miss path
 * calls into the other's file for a hold. */
#ifndef RC_HOLD_H
#define RC_HOLD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "compiler.h"
#include "ledger.h"
#include "threads.h"

/* Bit 0 of a handle: a slot hold (the slot's address); else a counted hold
 * (the entry's address, rail in bits 1-5). */
#define RC_HANDLE_SLOT ((uintptr_t)1)

/* A put's look at the cache's put_flags found some: the fence first if
 * the heavy one does not work here, then whether the cache has zombies. */
COLD bool rc_hold_zombies_after_fence(struct regcache *c, unsigned flags);

/* Let go of a slot hold: the slot store, then - for an entry that left the
 * cache meanwhile - the release that its detacher left to the last holder
 * (asym_fence.h: the detacher pays for the fence this side omits).  Only
 * while the cache has zombies can the entry be one (release.c), so its own
 * line is read only then: the cache's put_flags, loaded after the store,
 * say whether to look (RC_PUT_ZOMBIES, RC_PUT_FENCE) and whether to look
 * at the budget (RC_PUT_OVER, RC_PUT_LEDGER: rc_after_put()). */
static inline unsigned rc_clear_slot_flags(struct regcache *c, _Atomic uintptr_t *slot)
{
    atomic_store_explicit(slot, 0, memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    return atomic_load_explicit(&c->put_flags, memory_order_relaxed);
}

/* The slot store, and whether the entry may be a zombie. */
static inline bool rc_clear_slot(struct regcache *c, _Atomic uintptr_t *slot)
{
    unsigned flags = rc_clear_slot_flags(c, slot) & (RC_PUT_ZOMBIES | RC_PUT_FENCE);
    return __builtin_expect(flags != 0, 0) && rc_hold_zombies_after_fence(c, flags);
}

static inline void rc_release_slot(struct regcache *c, _Atomic uintptr_t *slot,
                                   struct regcache_entry *e)
{
    if (rc_clear_slot(c, slot) && rc_entry_is_detached(e))
        rc_release_if_unheld(c, e);
}

/* A slot is free when it reads 0.  Acquire: when another thread's put
 * emptied it, that put's reads of the hold (its note above all) happen
 * before this thread writes the slot's note again; on x86 a plain load. */
static inline bool rc_slot_free(_Atomic uintptr_t *slot)
{
    return !atomic_load_explicit(slot, memory_order_acquire);
}

/* A free slot of t, NULL when all are in use.  Gets are mostly put before
 * the next get: the slot last used is free.  Else the first free one,
 * searched inline: a call would cost the hit that reaches it a frame. */
static inline _Atomic uintptr_t *rc_free_slot(struct rc_thread *t)
{
    _Atomic uintptr_t *slot = &t->holds[t->hint];
    if (__builtin_expect(rc_slot_free(slot), 1))
        return slot;
    for (unsigned i = 0; i < RC_HOLD_SLOTS; i++)
        if (rc_slot_free(&t->holds[i])) {
            t->hint = i;
            return &t->holds[i];
        }
    return NULL;
}

/* The entry a slot holds (of a hold not yet let go), and the rail. */
static inline struct regcache_entry *rc_held_entry(_Atomic uintptr_t *slot)
{
    return (struct regcache_entry *)(atomic_load_explicit(slot, memory_order_relaxed) &
                                     ~RC_HOLD_RAIL_MASK);
}

static inline unsigned rc_held_rail(_Atomic uintptr_t *slot)
{
    return (unsigned)(atomic_load_explicit(slot, memory_order_relaxed) & RC_HOLD_RAIL_MASK);
}

/* The handle of the hold in `slot`. */
static inline regcache_entry_t *rc_slot_handle(_Atomic uintptr_t *slot)
{
    return (regcache_entry_t *)((uintptr_t)slot | RC_HANDLE_SLOT);
}

/* Stamp e as used in epoch `now` (lru.h), unless it is already. */
static inline void rc_stamp(struct regcache_entry *e, uint64_t now)
{
    if (atomic_load_explicit(&e->last_use, memory_order_relaxed) != now)
        atomic_store_explicit(&e->last_use, now, memory_order_relaxed);
}

#ifdef RC_DEBUG
/* A put the caller got wrong: says what and aborts. */
COLD void rc_put_misused(const char *what, const void *handle);
#endif

/* The cache a put works on: the caller's, which must be the entry's. */
static inline struct regcache *rc_put_cache(struct regcache *cache, const struct regcache_entry *e,
                                            const void *handle)
{
#ifdef RC_DEBUG
    if (cache && cache != e->cache)
        rc_put_misused("the entry belongs to another cache", handle);
#else
    (void)handle;
#endif
    return __builtin_expect(!!cache, 1) ? cache : e->cache;
}

/* Held entries may push a device past its budget; it binds again as soon
 * as they are put.  A cache of another process on the same GPU may have
 * asked for room (one load of a word that misses write).  A fork child's
 * put changes only its copy of the cache until it would deregister or
 * evict (rc_release_if_unheld, rc_trim): the registrations are the
 * parent's.  Last in every put, so that rc_trim() is a tail call and a put
 * needs no frame.  A slot hold's put calls it only where put_flags say that
 * some device is over budget or follows the ledger. */
static inline void rc_after_put(struct regcache *c, struct rc_device *d)
{
    if (__builtin_expect(rc_over_budget(d), 0) ||
        __builtin_expect(d->ledger_limits && rc_ledger_moved(d->ledger), 0))
        rc_trim(c, d);
}

/* A slot hold of the calling thread on e, stamped as used now; NULL when
 * the thread has no free slot (or no record).  Either under the lock, on
 * e ready and in the cache (no evictor or invalidator scans the slots
 * meanwhile: they hold the lock), or on an e that a slot hold of the
 * caller's keeps (regcache_entry_hold()): then e can be neither evicted
 * nor released before this hold is visible to whoever looks, since that
 * hold is put after this call returns. */
regcache_entry_t *rc_slot_hold(struct regcache *c, struct regcache_entry *e, unsigned rail);

/* Under the lock: a hold on e, ready and in the cache, for the caller.  A
 * slot of its own where one is free, as a hit takes (its put then needs no
 * locked instruction; evictors and invalidators, which scan the slots,
 * hold the lock and so see it), else a counted hold.  REGCACHE_OK or
 * ERR_HOLD_LIMIT (without a message: rc_hold_limit() gives it). */
int rc_hold_locked(struct regcache *c, struct regcache_entry *e, unsigned rail,
                   regcache_entry_t **out);

/* The entry and rail a live handle stands for; NULL for a slot handle
 * whose slot is empty (its hold was put). */
struct regcache_entry *rc_handle_decode(const regcache_entry_t *h, unsigned *rail);

/* Let go of a counted hold of e (handle: what the caller was given, for
 * misuse reports).  Releases e if it left the cache and this was its last
 * hold. */
void rc_put_counted(struct regcache *cache, struct regcache_entry *e, const void *handle);

/* The error of a get whose entry already has as many counted holders as
 * refs can count. */
COLD int rc_hold_limit(const struct regcache_entry *e);

/* Let go of a hold that rc_hold_locked() took, recording no use: a
 * lookup taking back what it found. */
static inline void rc_hold_drop(struct regcache *c, struct regcache_entry *e, regcache_entry_t *h)
{
    if ((uintptr_t)h & RC_HANDLE_SLOT)
        rc_release_slot(c, (_Atomic uintptr_t *)((uintptr_t)h & ~(uintptr_t)7), e);
    else
        rc_put_counted(c, e, h);
}

#endif
