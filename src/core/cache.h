/* The cache object, shared by the files of the core: the hit path
 * (hit_path.c, hold.c), misses (miss.c, classify.c, backend_register.c), eviction and
 * budgets (evict.c, budget.c), invalidation (invalidate.c), entries leaving
 * the cache (release.c), statistics and the life cycle. */
#ifndef RC_CACHE_H
#define RC_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "backend.h"
#include "bounds.h"
#include "cache_lock.h"
#include "entry.h"
#include "entry_pool.h"
#include "fork_generation.h"
#include "interval_tree.h"
#include "listeners.h"
#include "lru.h"
#include "mem_query.h"
#include "options.h"
#include "page_index.h"
#include "range_filter.h"
#include "stats.h"

/* The columns of rc_counters.invalidations: the causes the statistics
 * tell apart (rc_leave_locked maps each reason to one). */
enum rc_cause { RC_BY_TAG, RC_BY_NOTIFY, RC_BY_EXPLICIT, RC_BY_MONITOR, RC_CAUSES };

/* Counters of one device; atomics so that stats read them without a lock. */
struct rc_counters {
    atomic_uint_fast64_t shared_hits, slow_hits, misses, registrations, deregistrations, evictions,
        invalidations[RC_CAUSES], reg_failures, one_shots, peak_bytes,
        leaves[REGCACHE_REASON_COUNT];
};

/* One device's share of the cache: its eviction order, budget and
 * counters, so that pressure on one GPU never evicts another's entries. */
struct rc_device {
    /* Read by every put (to see whether the budget binds again).  Written
     * under the cache lock. */
    atomic_size_t bytes, entries;
    atomic_size_t max_bytes, max_entries; /* SIZE_MAX = unlimited */
    atomic_bool over;                     /* more than the budget: put trims (rc_recheck_budget) */
    /* The GPU's shared BAR1 budget (ledger.h), or NULL: none (host memory,
     * REGCACHE_LEDGER=off, or it could not be had).  Set with the budget. */
    struct rc_ledger *ledger;
    bool ledger_limits;        /* no max_bytes: the ledger sets the limit */
    uint8_t budget_source;     /* enum rc_budget_source of max_bytes, for the dump */
    bool making_room;          /* a miss evicts before registering: notes skip the clock */
    uint64_t ledger_published; /* when the counters last went out (a clock reading) */
    /* Bytes of registrations in flight (under the lock): the ledger counts
     * them with `bytes`, so that no other cache takes their room. */
    size_t pending;
    /* Set once, before the first entry of the device is registered. */
    atomic_int budget_state; /* 0 unset, 1 being set, 2 set */
    size_t whole_max;        /* largest allocation registered whole */
    /* Ready entries whose access is not params.access (under the lock):
     * while there are none, a registration with params.access replaces
     * nothing of this device (rc_retire_covered_locked skips its walk). */
    size_t odd_access;
    struct rc_lru lru;
    struct rc_counters n;
} __attribute__((aligned(64)));

/* Bits of struct regcache's put_flags. */
#define RC_PUT_ZOMBIES 1u
#define RC_PUT_FENCE 2u
/* Some device is over its budget (devices_over), or takes its limit from
 * the ledger: the put looks at its own device. */
#define RC_PUT_OVER 4u
#define RC_PUT_LEDGER 8u

/* Invalidations remembered for misses in flight (invalidate.c). */
#define RC_INVAL_LOG 256

struct regcache {
    /* Read by every hit; written only by create. */
    struct rc_page_index index;
    struct rc_memory mem;
    /* Also set once later, by a HOOKS cache that finds the in-process
     * interception gone (rc_validation_recheck); hits read it with
     * rc_tag_checking(). */
    atomic_bool tag_check;
    /* Hits publish their holds without a fence: TAG_CHECK caches, where a
     * hit already costs a driver call and whose detaches and evictions pay
     * a heavy fence instead (asym_fence.h), while that fence works here.
     * Cleared when it stops working (rc_cache_fence_always). */
    atomic_bool fenceless;
    /* TAG_CHECK caches that accept no host memory, so that every entry is
     * tag-checked: their hits query the tag before they look (hit_path.c). */
    bool tag_first;
    unsigned fork_generation;
    int hit_id;        /* column in the thread records' hit counters, or -1 */
    size_t hit_offset; /* rc_thread_hits_offset(hit_id) */
    unsigned rails;

    /* The LRU epoch (lru.h): read by every hit and put, written at
     * registrations, so kept off the index's lines. */
    atomic_uint_fast64_t epoch __attribute__((aligned(64)));
    /* What a put that lets go of a slot hold must do beyond the store, in
     * one byte on a line it reads anyway: RC_PUT_ZOMBIES while the zombie
     * list is not empty, when it looks at its entry's mark (release.c says
     * why that is enough); RC_PUT_FENCE, from create on where the heavy
     * fence does not work, when it fences before that look (asym_fence.h).
     * The zombie bit is changed under the lock; the fence bit may be set
     * without it (rc_cache_fence_always), so both change it atomically.
     * RC_PUT_OVER and RC_PUT_LEDGER spare every other put the line of its
     * device (rc_after_put). */
    atomic_uchar put_flags;
    unsigned devices_over; /* under the lock: devices whose `over` is set */

    /* Misses that began (a locked add, from any thread) and that ended
     * (under the lock, so a plain store): those between their memory query
     * and their last locked step.  Then the invalidations they must learn
     * of (invalidate.c). */
    atomic_uint misses_begun __attribute__((aligned(64)));
    atomic_uint misses_ended;
    /* Listeners with work an invalidation must see done (listeners.h):
     * read by notices, which read this line anyway. */
    atomic_uint listeners_pending;
    atomic_uint_fast64_t inval_seq;
    struct {
        uintptr_t start, end;
        enum regcache_reason why;
    } inval_log[RC_INVAL_LOG];
    struct rc_range_filter filter;

    struct rc_backend backend;
    bool builtin;
    bool destroying; /* regcache_destroy() deregisters held entries too */
    int method_used;
    int validation; /* as resolved at create */
    /* HOOKS that trusts the in-process interception: each miss asks it
     * whether libcuda still carries the patches (rc_validation_recheck):
     * 1, or 0 with the reason in why[n].  NULL for other caches. */
    int (*patches_intact)(char *why, size_t n);
    char lost_reason[512]; /* why it fell back; written before tag_check */
    size_t host_page;
    size_t max_reg; /* the longest registration the NICs take (SIZE_MAX: any) */
    struct rc_options opts;
    unsigned access; /* params.access, the access of regcache_get() */
    int host_merge;  /* params.host_merge resolved: OFF, SAME_ACCESS or ALL */
    /* Entries whose params.on_leave is due, each with a counted hold that
     * keeps it registered until the notice is given (release.c). */
    _Atomic(struct regcache_entry *) notices;
    /* Entries that left the cache unused and whose deregistration (with
     * its callbacks) waits for another thread (rc_cache_notify_later). */
    _Atomic(struct regcache_entry *) deferred;

    struct rc_lock lock;           /* tree, LRU, budgets, zombies, pool, log */
    struct rc_cond registered;     /* a pending registration finished */
    unsigned registration_waiters; /* under the lock: threads waiting on it */
    struct rc_itree tree;
    struct rc_device dev[RC_DEVICE_SLOTS];
    struct regcache_entry *zombies; /* left the cache, still held */
    struct rc_entry_pool pool;
    /* Entries deregistered without the lock, waiting to return to the pool
     * at the next locked moment (release.c). */
    _Atomic(struct regcache_entry *) returned;

    /* Whether and how pageable host entries are watched (src/host says at
     * create), for the validation reason and the dump. */
    char host_note[384];
    char host_reason[400]; /* "; host memory: " and the note, or empty */

    /* Why a GPU has no shared budget, for the REGCACHE_STATS dump. */
    char ledger_note[256];

    struct rc_stats stats;

    /* Debug builds: changes since the last full check of the invariants. */
    size_t changes;

    /* Registered bytes of all devices, and their highest value so far. */
    atomic_size_t total_bytes;
    atomic_uint_fast64_t peak_bytes;

    /* The features that stand on the cache (listeners.h). */
    struct rc_listeners listeners;

    _Atomic(struct regcache *) registry_next;
    /* Unlinked, its destroy waiting for walkers (src/registry): the next
     * such cache, under the registry's lock. */
    struct regcache *departing_next;
};

/* The hit's relaxed load of tag_check, which must cost what the plain load
 * of a flag set only at create did: on x86-64 one cmpb with memory, where
 * an atomic load is a movzbl and a test.  A byte load is atomic there, and
 * the asm is no access the sanitizers track. */
static inline bool rc_tag_checking(const struct regcache *c)
{
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
    bool set;
    __asm__("cmpb $0,%1" : "=@ccne"(set) : "m"(c->tag_check));
    return set;
#else
    return atomic_load_explicit(&c->tag_check, memory_order_relaxed);
#endif
}

static inline bool rc_forked(const struct regcache *c);

/* From now on c's hits and puts fence (asym_fence.h: the heavy fence stopped
 * working).  Without the cache lock. */
static inline void rc_cache_fence_always(struct regcache *c)
{
    atomic_store_explicit(&c->fenceless, false, memory_order_relaxed);
    atomic_fetch_or_explicit(&c->put_flags, RC_PUT_FENCE, memory_order_relaxed);
}

/* ---- misses (miss.c, classify.c, backend_register.c) ---------------------------- */

/* A cache watching patches whose patches another patcher rewrote turns to
 * TAG_CHECK, with the reason regcache_validation_reason() then gives:
 * frees since may have gone unseen, and its hits check tags from now on.
 * Costs a few loads per patched function (validation.c). */
void rc_validation_recheck(struct regcache *c);

/* A validation reason goes on with what the host memory monitor does. */
void rc_validation_append_host(const struct regcache *c, char *why, size_t n);

/* out == NULL: a background registration, which hands nothing out and
 * leaves its entry speculative (src/prefetch); REGCACHE_OK also when
 * another registration of the range is in flight, RC_NO_ROOM when the
 * budget has none without evicting used entries. */
int rc_slow_get(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq,
                regcache_entry_t **out);

/* The access an entry for want (an rc_req's) registers: IBV_ACCESS_* bits,
 * with RC_ACCESS_DEFAULT when they cover params.access. */
static inline unsigned rc_access_of(const struct regcache *c, unsigned want);

/* Not a status: a background registration found no room (see above). */
#define RC_NO_ROOM 2

/* ---- looking without registering (lookup.c) ----------------------------- */

/* Set around a get with REGCACHE_GET_LOOKUP: the paths a hit leaves for
 * read it, so that a hit costs what it does without. */
extern __thread bool rc_get_lookup __attribute__((tls_model("initial-exec")));

/* Set around a get with REGCACHE_GET_NONBLOCK, the same way: its miss goes
 * to the listeners (before_miss), which register it in the background. */
extern __thread bool rc_get_nonblocking __attribute__((tls_model("initial-exec")));

/* A lookup the hit path did not serve: a held entry that covers [start,
 * end) with rq's access and rail, found under the lock, or
 * REGCACHE_ERR_NOT_CACHED.  Registers and queues nothing. */
int rc_lookup_cached(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq,
                     regcache_entry_t **out);

/* regcache_get_with_arg(): its argument for the backend, and the entry
 * pointer of that get, so that only its own miss takes the argument, not
 * a get that a callback makes meanwhile on the same thread.  Set around
 * that get only: other gets never write it, and hits never read it. */
struct rc_get_arg {
    void *arg;
    regcache_entry_t **out;
};
extern __thread struct rc_get_arg rc_get_arg __attribute__((tls_model("initial-exec")));

/* The argument of the get that hands out `out`, taken (it is passed to
 * one registration), or NULL. */
static inline void *rc_take_get_arg(regcache_entry_t **out)
{
    if (__builtin_expect(!rc_get_arg.out, 1) || rc_get_arg.out != out)
        return NULL;
    rc_get_arg.out = NULL;
    return rc_get_arg.arg;
}

/* Not a status: the hit path could not serve and the slow path must (no
 * entry, no free slot, tag changed, the entry left meanwhile). */
#define RC_NOT_HIT 1

/* e, held by the caller, lacks rq's rail: register it there (or wait for
 * a registration of that rail of e in flight) and hand out a hold of it;
 * RC_NOT_HIT when e left the cache meanwhile or lacks rq's access. */
int rc_add_rail(struct regcache *c, struct regcache_entry *e, struct rc_req rq,
                regcache_entry_t **out);

/* What a miss wants registered, derived from the memory query. */
struct rc_want {
    uintptr_t start, end;             /* the request */
    uintptr_t reg_start, reg_end;     /* what to register */
    uintptr_t match_start, match_end; /* which requests it may serve */
    uint64_t buffer_id;
    struct rc_mapping *more; /* malloc()ed; passes to the entry */
    uint32_t nmore;
    int device, slot;
    /* Pageable host memory: the mappings that hold the request, which its
     * registration and any merge with other entries stay inside; 0, 0
     * when unknown (host_merge.c). */
    uintptr_t span_start, span_end;
    bool span_shared; /* one of those mappings is shared */
    /* The access to register (rc_access_of()): the get's, and that of the
     * narrower entries of the same memory it replaces. */
    unsigned access;
    void *get_arg; /* for the backend (rc_take_get_arg()) */
    /* The clock reading that ended its registration (clock.h), 0 before:
     * the paces of what the miss publishes take it too. */
    uint64_t clock;
};

/* Describe [start, end) with the memory query and decide what to register.
 * On success w->more may need freeing by the caller (rc_want_fini). */
int rc_classify(struct regcache *c, struct rc_want *w);
void rc_want_fini(struct rc_want *w);

/* At create: params.host_merge resolved (AUTO by the callbacks). */
void rc_host_merge_setup(struct regcache *c);

/* Under the lock, on a miss of pageable host memory that no entry serves:
 * w's registration grows to the union of it and the ready pageable entries
 * it overlaps inside its mappings that c->host_merge lets it merge
 * (host_merge.c). */
void rc_host_merge_locked(struct regcache *c, struct rc_want *w);

/* Is e's access other than params.access (rc_device.odd_access)? */
static inline bool rc_odd_access(const struct regcache *c, const struct regcache_entry *e)
{
    return (e->access & ~RC_ACCESS_DEFAULT) != c->access;
}

/* Under the lock, after e was published: other ready entries of the same
 * memory that lie inside e's range and whose access e's covers leave the
 * cache (unused ones to *victims, held ones at their last put), so that
 * merged pageable entries (REGCACHE_REASON_MERGED) and access upgrades
 * (REPLACED) converge to one; pageable entries only as c->host_merge
 * lets them. */
void rc_retire_covered_locked(struct regcache *c, struct regcache_entry *e,
                              struct regcache_entry **victims);

/* Does the memory at the entry's range still carry its buffer ids? */
bool rc_entry_memory_current(struct regcache *c, const struct regcache_entry *e);

/* When a registration began and ended (clock readings, clock.h). */
struct rc_reg_time {
    uint64_t begun, ended;
};

/* Without the lock: register e on `rail` (get_arg for the backend, see
 * rc_take_get_arg()), evicting the device's unused entries (only
 * speculative ones for a speculative registration) and retrying while the
 * backend reports exhaustion.  On success *t says when,
 * for rc_stats_registered() once the lock is back, and for the entry's
 * birth: the fine clock is dear (stats.h), so each reading serves all. */
int rc_register_rail(struct regcache *c, struct regcache_entry *e, unsigned rail, bool speculative,
                     void *get_arg, struct rc_reg_time *t);

/* ---- eviction and budgets (evict.c, budget.c) --------------------------- */

/* rc_device() the first time: it sets the slot's budget. */
struct rc_device *rc_device_set(struct regcache *c, int slot);

/* The device slot, with its budget fixed when first asked for.  Inline:
 * every miss asks, and after the first time it is one load. */
static inline struct rc_device *rc_device(struct regcache *c, int slot)
{
    struct rc_device *d = &c->dev[slot];
    if (__builtin_expect(atomic_load_explicit(&d->budget_state, memory_order_acquire) == 2, 1))
        return d;
    return rc_device_set(c, slot);
}

/* Under the lock: evict LRU unused entries of d until it holds at most
 * max_bytes and max_entries; they leave for `why` (an eviction or a
 * flush).  speculative_only: no entry that a get used goes. */
size_t rc_evict_locked(struct regcache *c, struct rc_device *d, size_t max_bytes,
                       size_t max_entries, bool speculative_only, enum regcache_reason why,
                       struct regcache_entry **victims);

/* Under the lock: make room for one more entry of len bytes; a speculative
 * one evicts only speculative entries, and false says there was not
 * enough room so (a registration that is no speculation goes on over the
 * budget, which puts trim). */
bool rc_make_room_locked(struct regcache *c, struct rc_device *d, size_t len, bool speculative,
                         struct regcache_entry **victims);

/* After a put that saw d over its budget or the shared ledger's pressure
 * move: evict down to the budget again, if d is still over it (held
 * entries may have pushed it past) or this caller claims the pressure
 * (another process's cache asked for room).  Nothing in a fork child: the
 * registrations are the parent's. */
void rc_trim(struct regcache *c, struct rc_device *d);

/* Under the lock, after d's bytes or entries changed: tell the ledger.
 * `now`: the caller's clock reading (clock.h), or 0 when it has none at
 * hand, and one is taken if the counters are due to go out. */
void rc_budget_note_locked(struct regcache *c, struct rc_device *d, uint64_t now);

/* Detach every device from its ledger (destroy). */
void rc_budget_fini(struct regcache *c);

static inline bool rc_over_budget(struct rc_device *d)
{
    return atomic_load_explicit(&d->over, memory_order_relaxed);
}

/* Under the lock, after d's counts or limits changed: one flag for put to
 * read instead of four counters, and while any device's is set, a bit of
 * put_flags, which puts read anyway, that says to read it. */
static inline void rc_recheck_budget_locked(struct regcache *c, struct rc_device *d)
{
    bool over = atomic_load_explicit(&d->bytes, memory_order_relaxed) >
                    atomic_load_explicit(&d->max_bytes, memory_order_relaxed) ||
                atomic_load_explicit(&d->entries, memory_order_relaxed) >
                    atomic_load_explicit(&d->max_entries, memory_order_relaxed);
    if (over == atomic_load_explicit(&d->over, memory_order_relaxed))
        return;
    atomic_store_explicit(&d->over, over, memory_order_relaxed);
    c->devices_over += over ? 1 : (unsigned)-1;
    if (over && c->devices_over == 1)
        atomic_fetch_or_explicit(&c->put_flags, RC_PUT_OVER, memory_order_relaxed);
    else if (!over && c->devices_over == 0)
        atomic_fetch_and_explicit(&c->put_flags, (unsigned char)~RC_PUT_OVER, memory_order_relaxed);
}

/* ---- invalidation (invalidate.c) ---------------------------------------- */

/* regcache_invalidate() for a reason: the memory was freed (seen how), or
 * the caller asked. */
void rc_cache_invalidate(struct regcache *c, uintptr_t start, uintptr_t end,
                         enum regcache_reason why);

/* notify_free's per-cache step: nothing at all when no entry can overlap
 * and no miss is in flight. */
void rc_cache_notify(struct regcache *c, uintptr_t start, uintptr_t end, enum regcache_reason why);

/* rc_cache_notify(), calling back nobody: the unused entries that leave
 * wait in c->deferred, the notices of held ones in c->notices, and the
 * listeners' invalidate event (rc_listener_pending), for
 * rc_release_deferred().  True when any of those waits. */
bool rc_cache_notify_later(struct regcache *c, uintptr_t start, uintptr_t end,
                           enum regcache_reason why);

/* A miss enters before its memory query and leaves in its last locked
 * step, after its entry is published (or not); in between,
 * rc_invalidated_since() tells it whether an invalidation overlapped
 * [start, end). */
uint64_t rc_miss_enter(struct regcache *c);
void rc_miss_leave_locked(struct regcache *c);
bool rc_invalidated_since_locked(struct regcache *c, uint64_t seq, uintptr_t start, uintptr_t end,
                                 bool pageable, enum regcache_reason *why);

/* Deregister and free every entry, held ones included (destroy). */
void rc_cache_drain(struct regcache *c);

/* ---- entries leaving the cache (release.c) ------------------------------ */

static inline size_t rc_entry_len(const struct regcache_entry *e)
{
    return e->node.end - e->node.start;
}

/* Under the lock: take a ready entry out of the tree, the page index, the
 * LRU, the filter and the budget.  No lookup finds it afterwards. */
void rc_unlink_locked(struct regcache *c, struct regcache_entry *e);

/* Under the lock: e leaves the cache for `why` (rc_unlink_locked first
 * for a ready one).  Unused entries go to *victims; held ones become
 * zombies that their last holder releases; a pending one is left to its
 * registering thread. */
void rc_detach_locked(struct regcache *c, struct regcache_entry *e, struct regcache_entry **victims,
                      enum regcache_reason why);

/* Under the lock: the one place every entry that leaves the cache passes,
 * whichever way it leaves: it records why and counts it. */
void rc_leave_locked(struct regcache *c, struct regcache_entry *e, enum regcache_reason why);

/* Link e into a singly linked list through link_next. */
static inline void rc_list_push(struct regcache_entry **list, struct regcache_entry *e)
{
    e->link_next = *list;
    *list = e;
}

/* Under the lock: e, unheld and out of the cache, waits on *victims for its
 * deregistration (counted now; the backend's dereg follows without the
 * lock).  From now on nothing but that deregistration touches e until the
 * pool hands it out again. */
void rc_victim_push(struct regcache *c, struct regcache_entry **victims, struct regcache_entry *e);

/* Without the lock: deregister a list of victims and give them back. */
void rc_release_victims(struct regcache *c, struct regcache_entry *list);

/* Without the lock: a list of victims waits in c->deferred for
 * rc_release_deferred(), which releases them, gives c's notices and tells
 * the listeners of the invalidations, in whichever thread calls it. */
void rc_defer_victims(struct regcache *c, struct regcache_entry *list);
void rc_release_deferred(struct regcache *c);

/* The two halves of rc_release_victims for a caller that takes the lock
 * again anyway: deregister without the lock, then hand the list back to the
 * pool under it, where rc_release_victims pays two locked instructions to
 * pass it to the next allocation. */
void rc_deregister_victims(struct regcache *c, struct regcache_entry *list);
void rc_pool_return_locked(struct regcache *c, struct regcache_entry *list);

/* A holder let go of a detached entry: release it if nobody holds it. */
void rc_release_if_unheld(struct regcache *c, struct regcache_entry *e);

/* Under the lock: an entry from the pool, or NULL when memory ran out. */
struct regcache_entry *rc_entry_new_locked(struct regcache *c);

/* Under the lock: e, registered but not cached, becomes a zombie that its
 * holder's put releases (a one-shot registration). */
void rc_zombie_locked(struct regcache *c, struct regcache_entry *e);

/* Under the lock: every zombie goes to *victims (destroy). */
void rc_drain_entries_locked(struct regcache *c, struct regcache_entry **victims);

/* Does the reason mean the memory is gone (rather than the cache letting
 * go of a registration it could keep)? */
static inline bool rc_memory_gone(enum regcache_reason why)
{
    return why == REGCACHE_REASON_FREED_HOOK || why == REGCACHE_REASON_FREED_MONITOR ||
           why == REGCACHE_REASON_FREED_TAG || why == REGCACHE_REASON_INVALIDATE;
}

/* Without the lock: give the notices that detachers left (c->notices). */
void rc_give_notices(struct regcache *c);

/* Under the lock: e, a registration handed out once and held by the
 * caller, is due its notice; rc_give_notices() gives it. */
void rc_notice_due_locked(struct regcache *c, struct regcache_entry *e);

static inline unsigned rc_access_of(const struct regcache *c, unsigned want)
{
    unsigned bits = want == RC_ACCESS_DEFAULT ? c->access : want;
    return rc_access_covers(bits, c->access) ? bits | RC_ACCESS_DEFAULT : bits;
}

/* ---- the edge (listeners.h) --------------------------------------------- */

/* Does some listener take the event? */
static inline bool rc_listened(const struct regcache *c, enum rc_event event)
{
    return __builtin_expect((c->listeners.events & event) != 0, 0);
}

/* Only while some listener has work pending: what it keeps for the gets
 * that follow (listeners.h). */
static inline int rc_listeners_before_miss(struct regcache *c, uintptr_t start, uintptr_t end,
                                           struct rc_req rq)
{
    if (__builtin_expect(atomic_load_explicit(&c->listeners_pending, memory_order_relaxed) == 0,
                         1) ||
        !rc_listened(c, RC_ON_BEFORE_MISS))
        return REGCACHE_OK;
    return rc_listeners_call_before_miss(c, start, end, rq);
}

static inline void rc_listeners_registered_locked(struct regcache *c,
                                                  const struct regcache_entry *e)
{
    if (rc_listened(c, RC_ON_AFTER_REGISTER))
        rc_listeners_call_registered(c, e);
}

/* Published entries only: a pending one never was. */
static inline void rc_listeners_leave_locked(struct regcache *c, const struct regcache_entry *e,
                                             enum regcache_reason why)
{
    if (rc_listened(c, RC_ON_LEAVE) && e->state == RC_READY)
        rc_listeners_call_leave(c, e, why);
}

static inline void rc_listeners_deregistering(struct regcache *c, const struct regcache_entry *e)
{
    if (rc_listened(c, RC_ON_BEFORE_DEREGISTER))
        rc_listeners_call_deregister(c, e);
}

static inline void rc_listeners_allocated(struct regcache *c, uintptr_t start, uintptr_t end,
                                          bool pinned_host)
{
    if (rc_listened(c, RC_ON_ALLOC))
        rc_listeners_call_alloc(c, start, end, pinned_host);
}

/* Without the lock, before the first registration of e, pageable host
 * memory for w: the watching listener's mark, or NULL. */
static inline void *rc_listeners_before_register(struct regcache *c, const struct regcache_entry *e,
                                                 const struct rc_want *w)
{
    if (!rc_listened(c, RC_ON_BEFORE_REGISTER) || !rc_entry_pageable(e))
        return NULL;
    struct rc_watch_want ww = { e->node.start, e->node.end, w->span_start, w->span_end,
                                w->span_shared };
    return rc_listeners_call_before_register(c, &ww);
}

/* Under the lock, before e, registered, joins the cache: whether the
 * memory of a marked entry may be going already (*why says why). */
static inline bool rc_listeners_unsettled_locked(struct regcache *c, const struct regcache_entry *e,
                                                 enum regcache_reason *why)
{
    if (!e->mark)
        return false;
    enum regcache_reason r = rc_listeners_call_before_publish(c, e->mark);
    if (r == REGCACHE_REASON_COUNT)
        return false;
    *why = r;
    return true;
}

/* Without the lock, once e is deregistered: its mark goes. */
static inline void rc_listeners_unmark(struct regcache *c, struct regcache_entry *e)
{
    if (e->mark)
        rc_listeners_call_after_deregister(c, e->mark);
    e->mark = NULL;
}

static inline void rc_listeners_invalidated(struct regcache *c, uintptr_t start, uintptr_t end)
{
    if (__builtin_expect(atomic_load_explicit(&c->listeners_pending, memory_order_acquire) != 0, 0))
        rc_listeners_call_invalidate(c, start, end);
}

/* ---- statistics, checks ------------------------------------------------- */

/* A counter that threads bump without a common lock. */
static inline void rc_count(atomic_uint_fast64_t *n)
{
    atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
}

/* A value that only holders of the cache lock change (readers take no
 * lock): a plain load and store, where an atomic add would spend a locked
 * instruction, the dearest of a hit's (asym_fence.h), on what the lock
 * already serialises. */
static inline void rc_add_locked(atomic_size_t *n, size_t delta)
{
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + delta,
                          memory_order_relaxed);
}

static inline void rc_count_locked(atomic_uint_fast64_t *n)
{
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Debug builds (REGCACHE_DEBUG): check every invariant of the cache under
 * its lock and abort with a message when one fails; no-op otherwise. */
void rc_check_locked(struct regcache *c);

/* ---- fork ---------------------------------------------------------------- */

/* A cache whose generation is not the process's was inherited through
 * fork() and must not touch its registrations. */
static inline bool rc_forked(const struct regcache *c)
{
    return c->fork_generation != rc_fork_generation();
}

#endif
