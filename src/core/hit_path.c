/* The hit path: regcache_get() finding a cached entry, and regcache_put().
 *
 * What a hit costs: a hash of the page and a probe of one page-index shard
 * (its line and one 64-byte slot, both only read); one store to a hold
 * slot of the calling thread's own record and - in HOOKS mode - one
 * seq_cst fence, the only expensive instruction (the benchmark's "hits"
 * rows, HOOKS beside TAG_CHECK, show its price); then the slot's copies of the entry's rails,
 * device and LRU stamp, the shard's count again, the record's parked flag (threads.h) and the
 * epoch, a store of the hold's note and a
 * plain increment of the thread's own hit counter.  Its put loads the
 * slot, the note and the epoch, logs the use, stores the slot, passes a
 * compiler barrier and loads the cache's put flags, which say whether a
 * zombie or a device's budget needs a look.
 * Neither reads a line of the entry: with many entries a hit costs one
 * miss (the slot), not two in a row.  Only the first hit of an entry in an
 * LRU epoch writes (the entry's stamp and the slot's copy), and a put only
 * when a registration opened an epoch during its hold.  No line that
 * another thread writes is written.  TAG_CHECK hits skip the fence (their
 * slow side pays a membarrier instead, cache.h) and add one buffer-id query
 * per mapping the entry spans, made last, after the hand-out, so that only
 * a comparison waits for it.  Everything else (misses, a writer in the
 * shard, a thread with all slots in use, an entry's first hit in an LRU
 * epoch, budgets, debug checks, errors) is out of line, reached by tail
 * calls, so that a HOOKS get+put makes no call and put needs no frame
 * (bench/ab/run.sh hooks and tag compare builds of it). */
#include "access.h"
#include "asym_fence.h"
#include "cache.h"
#include "compiler.h"
#include "hold.h"
#include "host_seam.h"
#include "last_error.h"
#include "threads.h"

static COLD int bad_get(const struct regcache *c, const void *addr, size_t len, unsigned rail,
                        regcache_entry_t **out)
{
    if (!c || !addr || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get: %s is NULL",
                       !c      ? "cache"
                       : !addr ? "addr"
                               : "entry");
    if (len == 0)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get: len is 0");
    if (len > UINTPTR_MAX - (uintptr_t)addr)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get: %p + %zu wraps the address space", addr,
                       len);
    if (rail >= c->rails)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_get: rail %u, but the cache has %u", rail,
                       c->rails);
    return rc_fail(REGCACHE_ERR_FORKED,
                   "regcache_get: the cache was created before fork(); create one in the child");
}

static inline uint64_t tag_at(const struct regcache *c, uintptr_t addr)
{
    return rc_memory_tag(&c->mem, addr);
}

/* The tag at start: `first`, the one the look queried, or a query now. */
static inline uint64_t tag_at_start(const struct regcache *c, uintptr_t start, uint64_t first)
{
    return first ? first : tag_at(c, start);
}

/* TAG_CHECK, an entry of several VMM mappings: each still carries its id. */
static COLD bool all_tags_current(const struct regcache *c, const struct regcache_entry *e)
{
    if (tag_at(c, e->match_start) != e->buffer_id)
        return false;
    for (uint32_t i = 0; i < e->nmore; i++)
        if (tag_at(c, e->more[i].base) != e->more[i].buffer_id)
            return false;
    return true;
}

/* A hit, held in `slot`, on an entry that lacks the rail asked for:
 * register that rail on the entry, which the slot holds meanwhile, without
 * describing the memory again; if the entry left the cache before it could,
 * the request is a miss. */
static COLD int hit_without_rail(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                                 uintptr_t end, struct rc_req rq, regcache_entry_t **out)
{
    struct regcache_entry *e = rc_held_entry(slot);
    int rc = rc_add_rail(c, e, rq, out);
    rc_release_slot(c, slot, e);
    if (rc == REGCACHE_OK)
        return rc;
    *out = NULL;
    return rc == RC_NOT_HIT ? rc_slow_get(c, start, end, rq, out) : rc;
}

/* Count a hit (n = 1) or take one back (n = -1) on a device slot. */
static inline void add_hits(struct regcache *c, struct rc_thread *t, unsigned device_slot,
                            uint64_t n)
{
    if (__builtin_expect(c->hit_offset != 0, 1))
        rc_thread_add_hits(t, c->hit_offset, device_slot, n);
    else
        atomic_fetch_add_explicit(&c->dev[device_slot].n.shared_hits, n, memory_order_relaxed);
}

/* Hand out the hold in `slot`: the note for the put, the count, the
 * handle. */
static inline void hand_out(struct regcache *c, struct rc_thread *t, _Atomic uintptr_t *slot,
                            const struct rc_probe *p, uint64_t now, regcache_entry_t **out)
{
    *rc_hold_note_of(slot) = (struct rc_hold_note){ (uint32_t)now, p->device_slot };
    add_hits(c, t, p->device_slot, 1);
    *out = rc_slot_handle(slot);
}

/* The end of every hit: the rail's registration, then the hand-out. */
static inline int count_hit(struct regcache *c, struct rc_thread *t, _Atomic uintptr_t *slot,
                            const struct rc_probe *p, uint64_t now, uintptr_t start, uintptr_t end,
                            struct rc_req rq, regcache_entry_t **out)
{
    if (__builtin_expect(!rc_probe_serves(p, rq), 0))
        return hit_without_rail(c, slot, start, end, rq, out);
    hand_out(c, t, slot, p, now, out);
    return REGCACHE_OK;
}

/* The first hit on the entry held in `slot` in this epoch through its
 * slot in the index: stamp the entry, and the index slot's copy, so that
 * the epoch's next hits read neither.  A writer that moved slots meanwhile
 * may have put another entry there: then the copy is cleared, which costs
 * that entry one stamp at its next hit instead of losing one (exact where
 * stores become visible in order, as on x86; elsewhere the loss is an
 * entry that looks older to the LRU than it is).  Few arguments, all in
 * registers, so that the hit reaches it by a jump. */
static COLD int stamp_and_count(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                                uintptr_t end, struct rc_req rq, regcache_entry_t **out)
{
    struct regcache_entry *e = rc_held_entry(slot);
    uint64_t now = atomic_load_explicit(&c->epoch, memory_order_relaxed);
    rc_stamp(e, now);
    struct rc_probe p;
    /* The copy is a hint: with a writer inside the shard, let it be. */
    if (rc_page_index_probe(&c->index, start, end, &p) == e) {
        atomic_store_explicit(&p.slot->stamp, now, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (!rc_page_index_unchanged(&p))
            atomic_store_explicit(&p.slot->stamp, 0, memory_order_relaxed);
    }
    /* The slot holds e: its own fields are current. */
    p.rails = atomic_load_explicit(&e->rails_ready, memory_order_acquire);
    p.access = e->access;
    p.device_slot = (uint16_t)e->device_slot;
    return count_hit(c, rc_thread_current, slot, &p, now, start, end, rq, out);
}

/* A TAG_CHECK hit whose buffer id changed: the memory was freed (and maybe
 * reallocated) behind the cache's back.  Drop the entry, then the slot
 * hold that kept it from being recycled meanwhile, and serve the request
 * as a miss. */
static COLD int tag_changed(struct regcache *c, struct regcache_entry *e, _Atomic uintptr_t *slot,
                            uintptr_t start, uintptr_t end, struct rc_req rq,
                            regcache_entry_t **out)
{
    struct regcache_entry *victims = NULL;
    rc_lock(&c->lock);
    if (e->state == RC_READY) {
        rc_detach_locked(c, e, &victims, REGCACHE_REASON_FREED_TAG);
    }
    rc_unlock(&c->lock);
    rc_release_victims(c, victims);
    rc_release_slot(c, slot, e);
    *out = NULL;
    return rc_slow_get(c, start, end, rq, out);
}

/* A TAG_CHECK hit that the fast one (serve()) leaves: the entry's first
 * hit in this LRU epoch, or a rail it lacks.  It reads the entry, which
 * the slot holds, instead of the index slot's copies: the tag, or tags,
 * first.  `first` is the tag the look queried, or 0. */
static COLD int serve_tagged_slowly(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                                    uintptr_t end, struct rc_req rq, regcache_entry_t **out,
                                    uint64_t first)
{
    struct regcache_entry *e = rc_held_entry(slot);
    bool current = !e->buffer_id || (e->more ? all_tags_current(c, e)
                                             : tag_at_start(c, start, first) == e->buffer_id);
    if (!current)
        return tag_changed(c, e, slot, start, end, rq, out);
    return stamp_and_count(c, slot, start, end, rq, out);
}

/* A TAG_CHECK hit whose tag turned out changed after its hand-out: take
 * the hit back, then as tag_changed(). */
static COLD int tag_changed_after_all(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                                      uintptr_t end, struct rc_req rq, regcache_entry_t **out)
{
    add_hits(c, rc_thread_current, rc_hold_note_of(slot)->device_slot, (uint64_t)-1);
    return tag_changed(c, rc_held_entry(slot), slot, start, end, rq, out);
}

/* A TAG_CHECK hit, handed out, on an entry of several mappings: each must
 * still carry its id. */
static COLD int several_tags(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                             uintptr_t end, struct rc_req rq, regcache_entry_t **out)
{
    struct regcache_entry *e = rc_held_entry(slot);
    return all_tags_current(c, e) ? REGCACHE_OK
                                  : tag_changed_after_all(c, slot, start, end, rq, out);
}

/* Let go of a hold in a slot that only this thread fills. */
static void release_held(struct regcache *c, _Atomic uintptr_t *slot)
{
    rc_release_slot(c, slot, rc_held_entry(slot));
}

static COLD int monitor_behind(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                               uintptr_t end, struct rc_req rq, regcache_entry_t **out);
static COLD int monitor_behind_tagged(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                                      uintptr_t end, struct rc_req rq, regcache_entry_t **out,
                                      uint64_t first);

/* Serve the request from the entry that `slot` holds and that the index
 * listed when the hold became visible; p is what its slot in the index
 * said, `first` the tag the look queried or 0.  A hit that needs nothing
 * but the slot's copies (most do) is handed out before its tag query, so
 * that the fewest values live across that call (of the copies only the
 * id) and nothing but the comparison follows it; one whose tag then turns
 * out changed is taken back. */
static inline __attribute__((always_inline)) int
serve(struct regcache *c, struct rc_thread *t, _Atomic uintptr_t *slot, const struct rc_probe *p,
      uintptr_t start, uintptr_t end, struct rc_req rq, regcache_entry_t **out, bool tagged,
      uint64_t first)
{
    /* Host entries only: GPU hits compare a byte they hold already. */
    if (__builtin_expect(p->device_slot == RC_HOST_SLOT && rc_host_monitor_behind(), 0))
        return tagged ? monitor_behind_tagged(c, slot, start, end, rq, out, first)
                      : monitor_behind(c, slot, start, end, rq, out);
    uint64_t now = atomic_load_explicit(&c->epoch, memory_order_relaxed);
    if (__builtin_expect(p->stamp != now || !rc_probe_serves(p, rq), 0))
        return tagged ? serve_tagged_slowly(c, slot, start, end, rq, out, first)
                      : stamp_and_count(c, slot, start, end, rq, out);
    uint64_t id = tagged ? p->buffer_id : 0;
    bool several = tagged && p->several;
    hand_out(c, t, slot, p, now, out);
    if (!id)
        return REGCACHE_OK;
    if (__builtin_expect(several, 0))
        return several_tags(c, slot, start, end, rq, out);
    if (__builtin_expect(tag_at_start(c, start, first) != id, 0))
        return tag_changed_after_all(c, slot, start, end, rq, out);
    return REGCACHE_OK;
}

/* The host memory monitor has read an unmap it has not handled yet: the
 * entry may be of memory that is gone (host_seam.h).  Where no such
 * unmap concerns the pages the entry registered, and the entry is still
 * in the cache (an unmap handled since the look took it out), the hit
 * stands, true: a get waits for no drain of other memory's unmaps, and
 * their deregistrations.  Else, once the unmaps are handled, the slow
 * path serves; a non-blocking get waits for nothing, and its miss returns
 * AGAIN. */
static bool hit_stands(struct regcache *c, _Atomic uintptr_t *slot)
{
    struct regcache_entry *e = rc_held_entry(slot);
    if (!rc_host_concern(e->node.start, e->node.end) && !rc_entry_is_detached(e))
        return true;
    release_held(c, slot);
    if (!rc_get_nonblocking)
        rc_host_catch_up();
    return false;
}

/* Where the hit stands, it is served from the entry that the slot holds,
 * as an entry's first hit in an epoch is: few arguments, so that the hit
 * reaches these by a jump. */
static COLD int monitor_behind(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                               uintptr_t end, struct rc_req rq, regcache_entry_t **out)
{
    if (hit_stands(c, slot))
        return stamp_and_count(c, slot, start, end, rq, out);
    *out = NULL;
    return rc_slow_get(c, start, end, rq, out);
}

static COLD int monitor_behind_tagged(struct regcache *c, _Atomic uintptr_t *slot, uintptr_t start,
                                      uintptr_t end, struct rc_req rq, regcache_entry_t **out,
                                      uint64_t first)
{
    if (hit_stands(c, slot))
        return serve_tagged_slowly(c, slot, start, end, rq, out, first);
    *out = NULL;
    return rc_slow_get(c, start, end, rq, out);
}

/* Should a TAG_CHECK hit query the tag before it looks (look())? */
static inline bool query_first(struct regcache *c)
{
    return c->tag_first && rc_page_index_large(&c->index);
}

/* May a TAG_CHECK hit skip its fence?  Read after its slot store, which
 * the compiler barrier keeps before the load (asym_fence.h says why). */
static inline bool fenceless(const struct regcache *c)
{
    atomic_signal_fence(memory_order_seq_cst);
    return atomic_load_explicit(&((struct regcache *)c)->fenceless, memory_order_relaxed);
}

/* One look at the page index for [start, end), and a slot hold published
 * on what it found: the entry, held and still indexed, with *probe what
 * its slot said; or NULL, with *slot the hold to let go (the index changed
 * meanwhile) or NULL (no entry, no free slot, or - unless waiting for them
 * - a writer inside).  With query_first (tag_first caches with a large
 * index, get()), the look begins with the tag at start, into *first: the
 * index slot that the probe reads is asked for before the query, so that
 * its line, mostly a cache miss, arrives while the query answers: faster
 * with many entries, slower with few, whose line is at hand (the "hits"
 * rows of TAG_CHECK at 1 and 100k entries).  Behind the driver's query,
 * a call much longer than a backend's, even an L1 miss hides, so that with
 * it the index counts as large once its slots outgrow L1 (lifecycle.c; the
 * driver's side is measured by bench/ab/run.sh driver-tag).  Either order checks the same
 * thing, that at one moment of the get the memory carried the id of an
 * entry the index listed (a free racing the get is the caller's error
 * either way). */
static inline __attribute__((always_inline)) struct regcache_entry *
look(struct regcache *c, struct rc_thread *t, uintptr_t start, uintptr_t end, unsigned rail,
     _Atomic uintptr_t **slotp, struct rc_probe *probe, bool wait_for_writers, bool tagged,
     bool query_first, uint64_t *first)
{
    *slotp = NULL;
    struct rc_page_key k = rc_page_key(&c->index, start);
    if (query_first) {
        rc_page_index_prefetch(k);
        *first = tag_at(c, start);
    }
    struct regcache_entry *e = wait_for_writers ? rc_page_index_find(&c->index, start, end, probe)
                                                : rc_page_index_probe_at(k, start, end, probe);
    if (!e)
        return NULL;
    _Atomic uintptr_t *slot = rc_free_slot(t);
    if (!slot)
        return NULL;
    /* Release: a scanner that reads this slot then also sees this thread's
     * earlier put of it (a plain store on x86). */
    atomic_store_explicit(slot, (uintptr_t)e | rail, memory_order_release);
    *slotp = slot;
    if (tagged && __builtin_expect(fenceless(c), 1)) /* never so in HOOKS caches */
        atomic_signal_fence(memory_order_seq_cst);
    else
        rc_fence_full();
    /* Whoever takes e out of the cache takes it out of the index first,
     * then fences and looks at the holds: if this thread's fence came
     * first, that look sees the hold; else the count has moved here.  The
     * same for a parker of idle records (threads.h): it sees the hold, or
     * this look sees the record parked, where no scan would find the hold;
     * the record's line is this thread's own, and the hold was just
     * written to it. */
    rc_page_index_read_slot(probe, tagged);
    if (__builtin_expect(!rc_page_index_unchanged(probe) || rc_thread_parked(t), 0))
        return NULL;
    return e;
}

/* Whatever the first look did not serve: a thread's first get, a writer in
 * the shard, entries being replaced (a few more looks, letting go of the
 * hold the last one published), then the miss path. */
static COLD int get_again(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq,
                          regcache_entry_t **out, _Atomic uintptr_t *slot)
{
    struct rc_thread *t = rc_thread_self();
    /* Read once: a look and its serve must agree (rc_validation_recheck). */
    bool tagged = rc_tag_checking(c);
    for (int looks = 0; t && looks < 4; looks++) {
        if (slot)
            release_held(c, slot);
        slot = NULL;
        /* Parked while idle: back into the scan before a hold can count. */
        if (rc_thread_parked(t) && !rc_thread_unpark(t))
            break;
        uint64_t first = 0;
        struct rc_probe probe;
        struct regcache_entry *e =
            look(c, t, start, end, rq.rail, &slot, &probe, true, tagged, query_first(c), &first);
        if (e)
            return serve(c, t, slot, &probe, start, end, rq, out, tagged, first);
        if (!slot)
            break;
    }
    if (slot)
        release_held(c, slot);
    *out = NULL;
    return rc_slow_get(c, start, end, rq, out);
}

/* A hit, for one validation mode: every way out that does not serve it is
 * a tail call, so that a HOOKS hit calls nothing and spills nothing. */
static inline __attribute__((always_inline)) int hit(struct regcache *c, uintptr_t start,
                                                     uintptr_t end, struct rc_req rq,
                                                     regcache_entry_t **out, bool tagged,
                                                     bool query_first)
{
    struct rc_thread *t = rc_thread_current;
    uint64_t first = 0;
    _Atomic uintptr_t *slot = NULL;
    struct rc_probe probe;
    struct regcache_entry *e =
        __builtin_expect(!!t, 1)
            ? look(c, t, start, end, rq.rail, &slot, &probe, false, tagged, query_first, &first)
            : NULL;
    if (__builtin_expect(!e, 0)) {
        /* Nothing indexed there (or no slot free), and no writer that was
         * changing it: a miss, which needs no second look. */
        if (t && !slot && !rc_page_index_busy(&probe))
            return rc_slow_get(c, start, end, rq, out);
        return get_again(c, start, end, rq, out, slot);
    }
    return serve(c, t, slot, &probe, start, end, rq, out, tagged, first);
}

/* One function per mode, each reached from get() by a jump: the TAG_CHECK
 * hit's query call needs a frame that the HOOKS hit does without, and
 * get() itself, which only checks and dispatches, then needs none.  The
 * two orders of a TAG_CHECK hit are two functions, so that the one for few
 * entries carries nothing of the other. */
static __attribute__((noinline)) int hit_tagged(struct regcache *c, uintptr_t start, uintptr_t end,
                                                struct rc_req rq, regcache_entry_t **out)
{
    return hit(c, start, end, rq, out, true, false);
}

static __attribute__((noinline)) int hit_tag_first(struct regcache *c, uintptr_t start,
                                                   uintptr_t end, struct rc_req rq,
                                                   regcache_entry_t **out)
{
    return hit(c, start, end, rq, out, true, true);
}

/* Rail 0 with the cache's access (regcache_get()), as for HOOKS below:
 * the request folds into the code, and nothing of it lives across the
 * query. */
static __attribute__((noinline)) int hit_tagged_rail0(struct regcache *c, uintptr_t start,
                                                      uintptr_t end, regcache_entry_t **out)
{
    return hit(c, start, end, (struct rc_req){ 0, RC_ACCESS_DEFAULT }, out, true, false);
}

static __attribute__((noinline)) int hit_tag_first_rail0(struct regcache *c, uintptr_t start,
                                                         uintptr_t end, regcache_entry_t **out)
{
    return hit(c, start, end, (struct rc_req){ 0, RC_ACCESS_DEFAULT }, out, true, true);
}

static __attribute__((noinline)) int hit_hooks(struct regcache *c, uintptr_t start, uintptr_t end,
                                               struct rc_req rq, regcache_entry_t **out)
{
    return hit(c, start, end, rq, out, false, false);
}

/* Rail 0 with the cache's access, the common case, with both constants:
 * the check folds to one test. */
static __attribute__((noinline)) int hit_hooks_rail0(struct regcache *c, uintptr_t start,
                                                     uintptr_t end, regcache_entry_t **out)
{
    return hit(c, start, end, (struct rc_req){ 0, RC_ACCESS_DEFAULT }, out, false, false);
}

/* Rail 0 with an access given (a transport's gets): the rail folds. */
static __attribute__((noinline)) int hit_hooks_rail0_access(struct regcache *c, uintptr_t start,
                                                            uintptr_t end, unsigned want,
                                                            regcache_entry_t **out)
{
    return hit(c, start, end, (struct rc_req){ 0, want }, out, false, false);
}

/* Inlined into every entry point, so that the rail and - for gets with
 * the cache's access - the access are constants and their checks fold. */
static inline __attribute__((always_inline)) int
get(regcache_t *c, struct rc_req rq, const void *addr, size_t len, regcache_entry_t **out)
{
    uintptr_t start = (uintptr_t)addr, end = start + len;
    /* end <= start: len is 0 or the range wraps the address space. */
    if (__builtin_expect(!c || !out || !start || end <= start || (rq.rail && rq.rail >= c->rails) ||
                             rc_forked(c),
                         0)) {
        if (out)
            *out = NULL;
        return bad_get(c, addr, len, rq.rail, out);
    }
    bool rail0 = !rq.rail && rq.want == RC_ACCESS_DEFAULT; /* folds */
    if (rc_tag_checking(c)) {
        if (query_first(c))
            return rail0 ? hit_tag_first_rail0(c, start, end, out)
                         : hit_tag_first(c, start, end, rq, out);
        return rail0 ? hit_tagged_rail0(c, start, end, out) : hit_tagged(c, start, end, rq, out);
    }
    if (rq.rail)
        return hit_hooks(c, start, end, rq, out);
    return rail0 ? hit_hooks_rail0(c, start, end, out)
                 : hit_hooks_rail0_access(c, start, end, rq.want, out);
}

int regcache_get(regcache_t *c, const void *addr, size_t len, regcache_entry_t **out)
{
    return get(c, (struct rc_req){ 0, RC_ACCESS_DEFAULT }, addr, len, out);
}

int regcache_get_rail(regcache_t *c, unsigned rail, const void *addr, size_t len,
                      regcache_entry_t **out)
{
    return get(c, (struct rc_req){ rail, RC_ACCESS_DEFAULT }, addr, len, out);
}

#define GET_FLAGS ((unsigned)(REGCACHE_GET_NONBLOCK | REGCACHE_GET_LOOKUP))

static COLD int bad_access(int access, unsigned flags, regcache_entry_t **out)
{
    if (out)
        *out = NULL;
    return rc_fail(REGCACHE_ERR_INVALID, "regcache_get_access: %s %#x",
                   access < 0           ? "negative access"
                   : flags & ~GET_FLAGS ? "unknown flags"
                                        : "flags that exclude each other",
                   access < 0 ? (unsigned)access : flags);
}

/* The flag lives in a thread-local that only the paths a hit leaves read,
 * so that a hit costs what one without it does. */
static COLD int get_flagged(regcache_t *c, struct rc_req rq, const void *addr, size_t len,
                            unsigned flags, regcache_entry_t **out)
{
    if (flags == GET_FLAGS)
        return bad_access((int)rq.want, flags, out);
    bool *mode = flags == REGCACHE_GET_LOOKUP ? &rc_get_lookup : &rc_get_nonblocking;
    *mode = true;
    int rc = get(c, rq, addr, len, out);
    *mode = false;
    return rc;
}

int regcache_get_access(regcache_t *c, unsigned rail, const void *addr, size_t len, int access,
                        unsigned flags, regcache_entry_t **out)
{
    if (__builtin_expect(access < 0 || flags & ~GET_FLAGS, 0))
        return bad_access(access, flags, out);
    struct rc_req rq = { rail, (unsigned)rc_access_with_local_write(access) };
    if (__builtin_expect(flags != 0, 0))
        return get_flagged(c, rq, addr, len, flags, out);
    return get(c, rq, addr, len, out);
}

/* Out of the way of the other gets: they never write the argument, and
 * the miss that takes it knows this get by its out (cache.h). */
int regcache_get_with_arg(regcache_t *c, unsigned rail, const void *addr, size_t len, int access,
                          unsigned flags, void *get_arg, regcache_entry_t **out)
{
    rc_get_arg = (struct rc_get_arg){ get_arg, out };
    int rc = regcache_get_access(c, rail, addr, len, access, flags, out);
    rc_get_arg.out = NULL;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* put                                                                       */
/* ------------------------------------------------------------------------ */

/* A slot found empty: a second put of the same hold, or a hold taken before
 * fork() (the child forgets those). */
static COLD void put_of_empty_slot(const void *handle)
{
#ifdef RC_DEBUG
    if (rc_fork_generation() == 0)
        rc_put_misused("the entry was already put (double put)", handle);
#else
    (void)handle;
#endif
}

/* A put whose look at put_flags found some: e may be a zombie, left for
 * its last holder to release, or some device over budget or following the
 * ledger. */
static COLD void put_flagged(struct regcache *c, struct regcache_entry *e, unsigned device_slot,
                             unsigned flags)
{
    flags &= RC_PUT_ZOMBIES | RC_PUT_FENCE;
    if (flags && rc_hold_zombies_after_fence(c, flags) && rc_entry_is_detached(e))
        rc_release_if_unheld(c, e);
    rc_after_put(c, &c->dev[device_slot]);
}

/* A slot hold's put reads the slot and its note, none of the entry's
 * lines, nor its device's: the get's epoch says whether e's stamp is
 * current, and put_flags whether anything more is due.  Its rare turns
 * are tail calls. */
static inline void put_slot(struct regcache *cache, _Atomic uintptr_t *slot, const void *handle)
{
    struct regcache_entry *e = rc_held_entry(slot);
    if (__builtin_expect(!e, 0)) {
        put_of_empty_slot(handle);
        return;
    }
    struct regcache *c = rc_put_cache(cache, e, handle);
    /* Everything put needs of the hold is read before the slot is
     * cleared: from then on the owner may reuse it, and an evictor recycle
     * e. */
    struct rc_hold_note note = *rc_hold_note_of(slot);
    uint64_t now = atomic_load_explicit(&c->epoch, memory_order_relaxed);
    if (__builtin_expect((uint32_t)now != note.epoch, 0))
        rc_stamp(e, now);
    if (rc_thread_current)
        rc_thread_log_use(rc_thread_current, e);
    unsigned flags = rc_clear_slot_flags(c, slot);
    if (__builtin_expect(flags != 0, 0))
        put_flagged(c, e, note.device_slot, flags);
}

void regcache_put(regcache_t *cache, regcache_entry_t *h)
{
    uintptr_t v = (uintptr_t)h;
    if (v & RC_HANDLE_SLOT)
        put_slot(cache, (_Atomic uintptr_t *)(v & ~(uintptr_t)7), h);
    else if (h)
        rc_put_counted(cache, (struct regcache_entry *)(v & ~RC_HOLD_RAIL_MASK), h);
}
