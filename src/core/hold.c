/* The hold protocol's out-of-line side (hold.h): counted holds, the slot
 * hold a miss hands out, misuse checks and the regcache_entry_* accessors. */
#include <stdio.h>
#include <stdlib.h>

#include "asym_fence.h"
#include "hold.h"
#include "last_error.h"

bool rc_hold_zombies_after_fence(struct regcache *c, unsigned flags)
{
    if (flags & RC_PUT_FENCE) {
        rc_fence_full();
        flags = atomic_load_explicit(&c->put_flags, memory_order_relaxed);
    }
    return flags & RC_PUT_ZOMBIES;
}

regcache_entry_t *rc_slot_hold(struct regcache *c, struct regcache_entry *e, unsigned rail)
{
    struct rc_thread *t = rc_thread_current;
    _Atomic uintptr_t *slot = t ? rc_free_slot(t) : NULL;
    if (!slot)
        return NULL;
    atomic_store_explicit(slot, (uintptr_t)e | rail, memory_order_release);
    /* The cache lock keeps this cache's evictors out, not a parker of
     * idle records, who fences heavily (threads.h). */
    rc_fence_light();
    if (__builtin_expect(rc_thread_parked(t), 0) && !rc_thread_unpark(t)) {
        atomic_store_explicit(slot, 0, memory_order_relaxed);
        return NULL;
    }
    uint64_t now = atomic_load_explicit(&c->epoch, memory_order_relaxed);
    rc_stamp(e, now);
    *rc_hold_note_of(slot) = (struct rc_hold_note){ (uint32_t)now, (uint32_t)e->device_slot };
    return rc_slot_handle(slot);
}

int rc_hold_locked(struct regcache *c, struct regcache_entry *e, unsigned rail,
                   regcache_entry_t **out)
{
    regcache_entry_t *h = rc_slot_hold(c, e, rail);
    int rc = h ? REGCACHE_OK : rc_entry_try_hold(e);
    if (rc == REGCACHE_OK)
        *out = h ? h : rc_counted_handle(e, rail);
    return rc;
}

int rc_hold_limit(const struct regcache_entry *e)
{
    return rc_fail(REGCACHE_ERR_HOLD_LIMIT,
                   "the entry for [%#jx, %#jx) already has %u holders (gets without put)",
                   (uintmax_t)e->match_start, (uintmax_t)e->match_end, RC_COUNT_MASK);
}

#ifdef RC_DEBUG
void rc_put_misused(const char *what, const void *handle)
{
    fprintf(stderr, "regcache_put(%p): %s\n", handle, what);
    abort();
}
#endif

static COLD void release_counted(struct regcache *c, struct regcache_entry *e)
{
    if (!rc_forked(c))
        rc_release_if_unheld(c, e);
}

void rc_put_counted(struct regcache *cache, struct regcache_entry *e, const void *handle)
{
    struct regcache *c = rc_put_cache(cache, e, handle);
    struct rc_device *d = &c->dev[e->device_slot];
    rc_stamp(e, atomic_load_explicit(&c->epoch, memory_order_relaxed));
    if (rc_thread_current)
        rc_thread_log_use(rc_thread_current, e);
    unsigned old = atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel);
#ifdef RC_DEBUG
    if (!(old & RC_COUNT_MASK))
        rc_put_misused("the entry was already put (double put)", handle);
#endif
    if (__builtin_expect((old & RC_DETACHED) && (old & RC_COUNT_MASK) == 1, 0))
        release_counted(c, e);
    rc_after_put(c, d);
}

struct regcache_entry *rc_handle_decode(const regcache_entry_t *h, unsigned *rail)
{
    uintptr_t v = (uintptr_t)h;
    if (v & RC_HANDLE_SLOT)
        v = atomic_load_explicit((_Atomic uintptr_t *)(v & ~(uintptr_t)7), memory_order_relaxed);
    else
        v = (v & ~RC_HOLD_RAIL_MASK) | ((v >> 1) & 31);
    *rail = (unsigned)(v & RC_HOLD_RAIL_MASK);
    return (struct regcache_entry *)(v & ~RC_HOLD_RAIL_MASK);
}

void *regcache_entry_handle(const regcache_entry_t *h)
{
    unsigned rail;
    struct regcache_entry *e = h ? rc_handle_decode(h, &rail) : NULL;
    return e ? e->handles[rail] : NULL;
}

struct ibv_mr *regcache_entry_mr(const regcache_entry_t *h)
{
    unsigned rail;
    struct regcache_entry *e = h ? rc_handle_decode(h, &rail) : NULL;
    return e && e->cache->builtin ? e->handles[rail] : NULL;
}

void regcache_entry_range(const regcache_entry_t *h, uintptr_t *start, size_t *len)
{
    unsigned rail;
    struct regcache_entry *e = h ? rc_handle_decode(h, &rail) : NULL;
    if (start)
        *start = e ? e->node.start : 0;
    if (len)
        *len = e ? rc_entry_len(e) : 0;
}

int regcache_entry_access(const regcache_entry_t *h)
{
    unsigned rail;
    struct regcache_entry *e = h ? rc_handle_decode(h, &rail) : NULL;
    return e ? (int)(e->access & ~RC_ACCESS_DEFAULT) : 0;
}

void *regcache_entry_priv(const regcache_entry_t *h)
{
    unsigned rail;
    struct regcache_entry *e = h ? rc_handle_decode(h, &rail) : NULL;
    return e && e->cache->pool.priv_size ? rc_entry_priv(e) : NULL;
}
