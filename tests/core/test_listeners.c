/* The listener table at the core's edge (listeners.h): a listener hears an
 * entry published (and each rail added), its leave under the lock for each
 * way it leaves, its deregistration afterwards without the lock, an
 * invalidation's end only while it says it has work pending (also when the
 * notice finds nothing cached), a replay of the entries in the cache, a
 * get's miss before it registers (and may end it) and every miss after it,
 * allocations, the destroy before the entries go and the drain after, the
 * last event. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"
#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define MAX_EVENTS 32

enum kind {
    REGISTERED,
    LEAVE,
    DEREGISTER,
    INVALIDATE,
    DESTROY,
    BEFORE_MISS,
    AFTER_MISS,
    ALLOC,
    DRAINED
};

struct event {
    enum kind kind;
    const void *id;
    uintptr_t start, end;
    unsigned rails;
    int reason;
    bool locked;       /* the cache lock was held during the call */
    long live_backend; /* registrations live at the call */
    int order;         /* among the events of every recorder */
};

static int events_heard;

struct recorder {
    struct fx *f;
    int id;
    int refuse; /* what before_miss answers */
    int n;
    struct event at[MAX_EVENTS];
};

static bool locked(struct recorder *r)
{
    /* Held by this thread (the only one here) exactly when a try fails. */
    if (!rc_trylock(&r->f->c->lock))
        return true;
    rc_unlock(&r->f->c->lock);
    return false;
}

static void record(struct recorder *r, enum kind kind, const struct rc_entry_view *v)
{
    assert_true(r->n < MAX_EVENTS);
    struct event *ev = &r->at[r->n++];
    *ev = (struct event){ .kind = kind,
                          .live_backend = atomic_load(&r->f->fb.live),
                          .order = events_heard++ };
    if (kind != DESTROY && kind != DRAINED)
        ev->locked = locked(r);
    if (v) {
        ev->id = v->id;
        ev->start = v->start;
        ev->end = v->end;
        ev->rails = v->rails;
        ev->reason = v->why;
    }
}

static void after_register(void *arg, const struct rc_entry_view *v)
{
    record(arg, REGISTERED, v);
}

static void on_leave(void *arg, const struct rc_entry_view *v)
{
    record(arg, LEAVE, v);
}

static void before_deregister(void *arg, const struct rc_entry_view *v)
{
    record(arg, DEREGISTER, v);
}

static void on_invalidate(void *arg, uintptr_t start, uintptr_t end)
{
    struct rc_entry_view v = { .start = start, .end = end };
    record(arg, INVALIDATE, &v);
}

static void on_destroy(void *arg)
{
    record(arg, DESTROY, NULL);
}

static const struct rc_listener ops = {
    .after_register = after_register,
    .on_leave = on_leave,
    .before_deregister = before_deregister,
    .on_invalidate = on_invalidate,
    .on_destroy = on_destroy,
};

static struct recorder *listen_to(struct fx *f)
{
    static struct recorder r;
    memset(&r, 0, sizeof r);
    r.f = f;
    fx_create(f);
    /* After the features every cache has. */
    r.id = rc_listen(f->c, &ops, &r);
    assert_true(r.id > 0);
    assert_ptr_equal(rc_listener_arg(f->c, &ops), &r);
    return &r;
}

static void expect(const struct event *ev, enum kind kind, bool locked)
{
    assert_int_equal(ev->kind, kind);
    assert_int_equal(ev->locked, locked);
}

/* A get that misses publishes once; a hit says nothing; a second rail says
 * the entry again, with both rails. */
static void published_and_rail_added(void **state)
{
    struct fx *f = *state;
    f->p.rails = 2;
    fx_device_allocs(f, 1);
    struct recorder *r = listen_to(f);
    regcache_put(f->c, fx_get(f, A + 4096, 4096));
    assert_int_equal(r->n, 1);
    expect(&r->at[0], REGISTERED, true);
    assert_int_equal(r->at[0].start, A);
    assert_int_equal(r->at[0].end, A + MiB);
    assert_int_equal(r->at[0].rails, 1);
    assert_int_equal(r->at[0].live_backend, 1);
    regcache_put(f->c, fx_get(f, A, 64));
    assert_int_equal(r->n, 1);
    regcache_put(f->c, fx_get_rail(f, 1, A, 64));
    assert_int_equal(r->n, 2);
    expect(&r->at[1], REGISTERED, true);
    assert_ptr_equal(r->at[1].id, r->at[0].id);
    assert_int_equal(r->at[1].rails, 3);
}

/* An unused entry invalidated: its leave under the lock, then its
 * deregistration without it while still registered; no invalidation's
 * end while nothing is pending. */
static void leave_then_deregister(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    struct recorder *r = listen_to(f);
    fx_use(f, A, 64);
    assert_int_equal(regcache_invalidate(f->c, (void *)A, 64), REGCACHE_OK);
    assert_int_equal(r->n, 3);
    expect(&r->at[1], LEAVE, true);
    assert_int_equal(r->at[1].reason, REGCACHE_REASON_INVALIDATE);
    expect(&r->at[2], DEREGISTER, false);
    assert_ptr_equal(r->at[2].id, r->at[0].id);
    assert_int_equal(r->at[2].reason, REGCACHE_REASON_INVALIDATE);
    assert_int_equal(r->at[2].live_backend, 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* A held entry whose memory goes: it leaves at the free, and is
 * deregistered at its put. */
static void held_entry_deregistered_at_put(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    struct recorder *r = listen_to(f);
    regcache_entry_t *e = fx_get(f, A, 64);
    regcache_notify_free((void *)A, MiB);
    assert_int_equal(r->n, 2);
    expect(&r->at[1], LEAVE, true);
    assert_int_equal(r->at[1].reason, REGCACHE_REASON_FREED_HOOK);
    regcache_put(f->c, e);
    assert_int_equal(r->n, 3);
    expect(&r->at[2], DEREGISTER, false);
    assert_ptr_equal(r->at[2].id, r->at[0].id);
}

/* Evicted for the budget by another entry's miss: the leave comes before
 * the newcomer is published, the deregistration after. */
static void evicted(void **state)
{
    struct fx *f = *state;
    f->p.max_entries = 1;
    fx_device_allocs(f, 2);
    struct recorder *r = listen_to(f);
    fx_use(f, A, 64);
    fx_use(f, B, 64);
    assert_int_equal(r->n, 4);
    expect(&r->at[1], LEAVE, true);
    assert_int_equal(r->at[1].reason, REGCACHE_REASON_EVICT_BUDGET);
    assert_int_equal(r->at[1].start, A);
    expect(&r->at[2], DEREGISTER, false);
    assert_int_equal(r->at[2].start, A);
    expect(&r->at[3], REGISTERED, true);
    assert_int_equal(r->at[3].start, B);
}

/* With work pending, every invalidation's end is heard, also that of a
 * free notice over memory the cache never held; without, none. */
static void pending_work_hears_invalidations(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    struct recorder *r = listen_to(f);
    regcache_notify_free((void *)B, 4096);
    assert_int_equal(r->n, 0);
    rc_listener_pending(f->c, r->id, true);
    regcache_notify_free((void *)B, 4096);
    assert_int_equal(r->n, 1);
    expect(&r->at[0], INVALIDATE, false);
    assert_int_equal(r->at[0].start, B);
    assert_int_equal(r->at[0].end, B + 4096);
    fx_use(f, A, 64);
    assert_int_equal(regcache_invalidate(f->c, (void *)A, 64), REGCACHE_OK);
    assert_int_equal(r->n, 5);
    expect(&r->at[4], INVALIDATE, false);
    rc_listener_pending(f->c, r->id, false);
    regcache_notify_free((void *)B, 4096);
    assert_int_equal(r->n, 5);
}

struct replay {
    int n;
    uintptr_t start[4];
};

static void replay_one(void *arg, const struct rc_entry_view *v)
{
    struct replay *rp = arg;
    rp->start[rp->n++] = v->start;
}

static struct fx *replay_fx;
static struct replay replayed;

static void replay_all(void *arg)
{
    (void)arg;
    rc_listeners_each_locked(replay_fx->c, replay_one, &replayed);
}

/* A listener attaching something late sees the entries in the cache. */
static void replay_lists_entries(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    listen_to(f);
    fx_use(f, A, 64);
    fx_use(f, B, 64);
    replay_fx = f;
    memset(&replayed, 0, sizeof replayed);
    rc_listeners_locked(f->c, replay_all, NULL);
    assert_int_equal(replayed.n, 2);
    assert_int_equal(replayed.start[0], A);
    assert_int_equal(replayed.start[1], B);
}

/* Destroy: the destroy event first and last, though entries are
 * deregistered after it. */
static void destroy_is_the_last_event(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    struct recorder *r = listen_to(f);
    fx_use(f, A, 64);
    rc_listener_pending(f->c, r->id, true);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(r->n, 2);
    assert_int_equal(r->at[1].kind, DESTROY);
    assert_int_equal(r->at[1].live_backend, 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* The table is small and fixed: a listener beyond RC_LISTENERS is
 * refused. */
static void table_is_bounded(void **state)
{
    struct fx *f = *state;
    fx_create(f);
    struct rc_listeners before = f->c->listeners;
    for (int i = (int)before.n; i < RC_LISTENERS; i++)
        assert_int_equal(rc_listen(f->c, &ops, NULL), i);
    assert_int_equal(rc_listen(f->c, &ops, NULL), -1);
    f->c->listeners = before; /* these recorders were never set up */
}

/* ---- the events of a miss, an allocation and the drain ---------------- */

static int before_miss(void *arg, uintptr_t start, uintptr_t end, struct rc_req rq)
{
    struct recorder *r = arg;
    struct rc_entry_view v = { .start = start, .end = end, .rails = 1u << rq.rail };
    record(r, BEFORE_MISS, &v);
    return r->refuse;
}

static void after_miss(void *arg, uint64_t now)
{
    (void)now;
    record(arg, AFTER_MISS, NULL);
}

static void on_alloc(void *arg, uintptr_t start, uintptr_t end, bool pinned_host)
{
    struct rc_entry_view v = { .start = start, .end = end, .rails = pinned_host };
    record(arg, ALLOC, &v);
}

static void after_drain(void *arg)
{
    record(arg, DRAINED, NULL);
}

static const struct rc_listener miss_ops = {
    .before_miss = before_miss,
    .after_miss = after_miss,
    .on_alloc = on_alloc,
    .on_destroy = on_destroy,
    .after_drain = after_drain,
};

static struct recorder *listen_to_misses(struct fx *f, struct recorder *r)
{
    memset(r, 0, sizeof *r);
    r->f = f;
    r->id = rc_listen(f->c, &miss_ops, r);
    assert_true(r->id > 0);
    return r;
}

/* A get's miss is heard before its registration (while the listener has
 * work pending), with the get's range and rail, and after it; another rail
 * of a cached entry and a hit are not; a background registration is heard
 * after its miss only (no get waits on it). */
static void misses_heard(void **state)
{
    struct fx *f = *state;
    f->p.rails = 2;
    fx_device_allocs(f, 3);
    fx_create(f);
    static struct recorder r;
    listen_to_misses(f, &r);
    fx_use(f, FX_ALLOC(2), 64);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.at[0].kind, AFTER_MISS);
    r.n = 0;
    rc_listener_pending(f->c, r.id, true);
    regcache_put(f->c, fx_get_rail(f, 1, A + 64, 64));
    assert_int_equal(r.n, 2);
    expect(&r.at[0], BEFORE_MISS, false);
    assert_int_equal(r.at[0].start, A + 64);
    assert_int_equal(r.at[0].end, A + 128);
    assert_int_equal(r.at[0].rails, 2);
    assert_int_equal(r.at[0].live_backend, 1); /* FX_ALLOC(2)'s alone */
    expect(&r.at[1], AFTER_MISS, false);
    assert_int_equal(r.at[1].live_backend, 2);
    /* Another rail of that entry is no miss of memory, and then a hit. */
    fx_use(f, A + 64, 64);
    regcache_put(f->c, fx_get(f, A + 64, 64));
    assert_int_equal(r.n, 2);
    assert_int_equal(regcache_prefetch(f->c, 0, (void *)B, 64), REGCACHE_OK);
    assert_int_equal(regcache_prefetch_wait(f->c), REGCACHE_OK);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.at[2].kind, AFTER_MISS);
}

/* What before_miss answers other than REGCACHE_OK ends the get with it:
 * nothing is registered. */
static void before_miss_ends_the_get(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    static struct recorder r;
    listen_to_misses(f, &r)->refuse = REGCACHE_ERR_QUEUE_FULL;
    rc_listener_pending(f->c, r.id, true);
    fx_get_fails(f, A, 64, REGCACHE_ERR_QUEUE_FULL);
    assert_int_equal(f->fb.regs, 0);
    assert_int_equal(r.n, 1);
    r.refuse = REGCACHE_OK;
    fx_use(f, A, 64);
    assert_int_equal(f->fb.regs, 1);
}

/* Allocations are heard after the notice, pinned host memory told apart. */
static void allocations_heard(void **state)
{
    struct fx *f = *state;
    fx_create(f);
    static struct recorder r;
    listen_to_misses(f, &r);
    regcache_notify_alloc((void *)A, MiB);
    regcache_notify_host_alloc((void *)B, 4096);
    regcache_notify_free((void *)A, MiB);
    assert_int_equal(r.n, 2);
    expect(&r.at[0], ALLOC, false);
    assert_int_equal(r.at[0].start, A);
    assert_int_equal(r.at[0].end, A + MiB);
    assert_int_equal(r.at[0].rails, 0);
    assert_int_equal(r.at[1].start, B);
    assert_int_equal(r.at[1].rails, 1);
}

/* At destroy every listener stops in the order they joined, then the
 * entries are deregistered, then each hears the drain, the last first. */
static void drain_after_entries_in_reverse(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    static struct recorder first, second;
    listen_to_misses(f, &first);
    listen_to_misses(f, &second);
    fx_use(f, A, 64);
    int misses = first.n;
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(first.n, misses + 2);
    assert_int_equal(second.n, misses + 2);
    assert_int_equal(first.at[misses].kind, DESTROY);
    assert_int_equal(first.at[misses].live_backend, 1);
    assert_int_equal(first.at[misses + 1].kind, DRAINED);
    assert_int_equal(first.at[misses + 1].live_backend, 0);
    assert_int_equal(second.at[misses].kind, DESTROY);
    assert_int_equal(second.at[misses + 1].kind, DRAINED);
    assert_true(first.at[misses].order < second.at[misses].order);
    assert_true(second.at[misses].order < second.at[misses + 1].order);
    assert_true(second.at[misses + 1].order < first.at[misses + 1].order);
}

FX_MAIN(published_and_rail_added, leave_then_deregister, held_entry_deregistered_at_put, evicted,
        pending_work_hears_invalidations, replay_lists_entries, destroy_is_the_last_event,
        table_is_bounded, misses_heard, before_miss_ends_the_get, allocations_heard,
        drain_after_entries_in_reverse)
