/* The cache holds none of its locks while it calls the
 * backend, so a slow or blocking dereg stalls no other call, a dereg may
 * take an application lock that another thread holds around its own
 * notify_free, and reg may call back into the cache: a get of the range
 * being registered is told REGCACHE_ERR_REENTRANT (instead of waiting for
 * itself), an invalidation of it makes the registration a one-shot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "test_sync.h"

/* A: the registration whose dereg blocks.  B, C: unrelated memory. */
#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define C FX_ALLOC(2)

/* ---- a dereg that blocks stalls nothing else ----------------------------- */

/* Where the blocked dereg of A comes from. */
enum source {
    BY_NOTIFY,     /* notify_free(A) */
    BY_INVALIDATE, /* regcache_invalidate(A) */
    BY_FLUSH,      /* regcache_flush */
    BY_EVICTION,   /* a miss that makes room under max_entries */
    BY_LAST_PUT,   /* the put of an entry invalidated while held */
    BY_TAG_CHECK,  /* a hit that finds A reallocated */
};

struct blocked_case {
    const char *name;
    enum source source;
};

struct blocking {
    struct fx *f;
    struct gate dereg_gate;
    regcache_entry_t *held; /* BY_LAST_PUT: A, held by the test */
};

static void block_dereg_of_a(void *arg, const struct fake_handle *h)
{
    struct blocking *b = arg;
    if (h->start == A)
        gate_pass(&b->dereg_gate);
}

static void deregister_a(void *arg)
{
    struct blocking *b = arg;
    struct fx *f = b->f;
    const struct blocked_case *bc = f->param;
    switch (bc->source) {
    case BY_NOTIFY:
        regcache_notify_free((const void *)A, MiB);
        break;
    case BY_INVALIDATE:
        regcache_invalidate(f->c, (const void *)A, MiB);
        break;
    case BY_FLUSH:
        regcache_flush(f->c);
        break;
    case BY_EVICTION:
    case BY_TAG_CHECK:
        /* A miss on B that evicts A; a hit on A that finds it replaced. */
        fx_use(f, bc->source == BY_EVICTION ? B : A, 10);
        break;
    case BY_LAST_PUT:
        regcache_put(f->c, b->held);
        break;
    }
}

/* What another thread does meanwhile: memory it frees (its entry is
 * deregistered too, by a dereg that does not block), a miss and a hit. */
static void unrelated_work(void *arg)
{
    struct fx *f = arg;
    fx_use(f, C, 10);
    fx_use(f, C, 10);
    regcache_notify_free((const void *)C, MiB);
}

static void blocked_dereg_stalls_nothing(void **state)
{
    struct fx *f = *state;
    const struct blocked_case *bc = f->param;
    struct blocking b = { .f = f };
    gate_init(&b.dereg_gate);
    fx_device_allocs(f, 3);
    f->p.validation =
        bc->source == BY_TAG_CHECK ? REGCACHE_VALIDATE_TAG_CHECK : REGCACHE_VALIDATE_NOTIFY;
    if (bc->source == BY_EVICTION)
        f->p.max_entries = 1;
    f->fb.during_dereg = block_dereg_of_a;
    f->fb.during_dereg_arg = &b;
    fx_create(f);
    fx_use(f, A, 10);
    if (bc->source == BY_LAST_PUT) {
        b.held = fx_get(f, A, 10);
        regcache_invalidate(f->c, (const void *)A, 1);
    }
    if (bc->source == BY_TAG_CHECK)
        fake_realloc(&f->fb, A);

    struct dthread blocked, other;
    dthread_start(&blocked, deregister_a, &b);
    assert_true(gate_await(&b.dereg_gate, 1, HANG_SECONDS));
    /* With A's dereg stuck, everything else goes on. */
    dthread_start(&other, unrelated_work, f);
    bool other_done = dthread_join(&other, HANG_SECONDS);
    bool still_blocked = !atomic_load(&blocked.done);
    gate_open(&b.dereg_gate);
    assert_true(dthread_join(&blocked, HANG_SECONDS));
    f->fb.during_dereg = NULL;
    assert_true(other_done);
    assert_true(still_blocked);
    struct regcache_stats s = fx_stats(f);
    assert_int_equal(s.entries, bc->source == BY_EVICTION || bc->source == BY_TAG_CHECK);
    /* A's registration and C's are gone, each once. */
    assert_int_equal(atomic_load(&f->fb.deregs), 2);
}

/* ---- a dereg that takes the application's lock --------------------------- */

struct app {
    struct fx *f;
    pthread_mutex_t lock; /* the application's allocator lock, say */
    atomic_bool a_dereg_entered;
    struct gate go;
};

/* Every dereg takes the application's lock (recursive: the application's
 * own notify_free, under it, deregisters too). */
static void dereg_takes_app_lock(void *arg, const struct fake_handle *h)
{
    struct app *a = arg;
    if (h->start == A)
        atomic_store(&a->a_dereg_entered, true);
    pthread_mutex_lock(&a->lock);
    pthread_mutex_unlock(&a->lock);
}

/* The application frees B under its lock, as an allocator whose free hook
 * calls notify_free would, and uses C. */
static void app_frees_under_its_lock(void *arg)
{
    struct app *a = arg;
    pthread_mutex_lock(&a->lock);
    gate_pass(&a->go);
    regcache_notify_free((const void *)B, MiB);
    fx_use(a->f, C, 10);
    pthread_mutex_unlock(&a->lock);
}

static void free_a(void *arg)
{
    (void)arg;
    regcache_notify_free((const void *)A, MiB);
}

static bool a_dereg_entered(const void *arg)
{
    return atomic_load(&((const struct app *)arg)->a_dereg_entered);
}

static void dereg_taking_app_lock_does_not_deadlock(void **state)
{
    struct fx *f = *state;
    struct app a = { .f = f };
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&a.lock, &attr);
    gate_init(&a.go);
    fx_device_allocs(f, 3);
    f->fb.during_dereg = dereg_takes_app_lock;
    f->fb.during_dereg_arg = &a;
    fx_create(f);
    fx_use(f, A, 10);
    fx_use(f, B, 10);

    struct dthread app, freer;
    dthread_start(&app, app_frees_under_its_lock, &a);
    assert_true(gate_await(&a.go, 1, HANG_SECONDS)); /* it holds its lock */
    dthread_start(&freer, free_a, NULL);
    /* A's dereg waits for the application's lock... */
    assert_true(wait_until(a_dereg_entered, &a, HANG_SECONDS));
    assert_true(await_sleeping(dthread_tid(&freer), HANG_SECONDS));
    /* ...while the application, holding it, frees B and uses C. */
    gate_open(&a.go);
    bool app_done = dthread_join(&app, HANG_SECONDS);
    bool freer_done = dthread_join(&freer, HANG_SECONDS);
    if (!app_done || !freer_done)
        fail_msg("deadlock: the application %s, the free of A %s", app_done ? "ended" : "hangs",
                 freer_done ? "ended" : "hangs");
    f->fb.during_dereg = NULL;
    struct regcache_stats s = fx_stats(f);
    assert_int_equal(s.invalidations_notify, 2);
    assert_int_equal(s.entries, 1); /* C */
    assert_int_equal(atomic_load(&f->fb.deregs), 2);
}

/* ---- reg calling back into the cache -------------------------------------- */

struct reentry {
    struct fx *f;
    atomic_bool armed;
    bool invalidate; /* else get */
    unsigned rail;   /* the rail the callback asks for */
    int rc;
    regcache_entry_t *got;
    char message[512];
};

static void call_back_once(void *arg)
{
    struct reentry *r = arg;
    if (!atomic_exchange(&r->armed, false))
        return;
    if (r->invalidate) {
        r->rc = regcache_invalidate(r->f->c, (const void *)A, 1);
        return;
    }
    r->got = (regcache_entry_t *)(uintptr_t)1;
    r->rc = regcache_get_rail(r->f->c, r->rail, (const void *)(A + 100), 10, &r->got);
    snprintf(r->message, sizeof(r->message), "%s", regcache_last_error());
}

static void reentry_setup(struct fx *f, struct reentry *r)
{
    r->f = f;
    fx_device_alloc(f, 0);
    f->p.rails = 2;
    f->fb.during_reg = call_back_once;
    f->fb.during_reg_arg = r;
    fx_create(f);
}

static void reg_asking_for_its_own_range_is_reentrant(void **state)
{
    struct fx *f = *state;
    struct reentry r = { .armed = true };
    reentry_setup(f, &r);
    regcache_entry_t *e = fx_get(f, A + 200, 10);
    assert_false(atomic_load(&r.armed));
    assert_int_equal(r.rc, REGCACHE_ERR_REENTRANT);
    assert_null(r.got);
    assert_non_null(strstr(r.message, "backend callback"));
    /* The outer get was not disturbed: one registration, cached. */
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(one_shots, 0), NULL);

    /* The same from the registration of another rail of the entry. */
    r.rail = 1;
    atomic_store(&r.armed, true);
    e = fx_get_rail(f, 1, A + 200, 10);
    assert_int_equal(r.rc, REGCACHE_ERR_REENTRANT);
    assert_null(r.got);
    assert_int_equal(fx_handle(e)->rail, 1);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    assert_int_equal(fx_stats(f).entries, 1);
}

static void reg_invalidating_its_own_range_is_a_one_shot(void **state)
{
    struct fx *f = *state;
    struct reentry r = { .armed = true, .invalidate = true };
    reentry_setup(f, &r);
    regcache_entry_t *e = fx_get(f, A + 200, 10);
    assert_int_equal(r.rc, REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(one_shots, 1), FX_STAT(entries, 0), NULL);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    fx_use(f, A + 200, 10);
    assert_int_equal(fx_stats(f).entries, 1);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
}

#define CASE(s)                                                       \
    {                                                                 \
        .name = "blocked dereg by " #s " stalls nothing", .source = s \
    }
static const struct blocked_case cases[] = {
    CASE(BY_NOTIFY),   CASE(BY_INVALIDATE), CASE(BY_FLUSH),
    CASE(BY_EVICTION), CASE(BY_LAST_PUT),   CASE(BY_TAG_CHECK),
};
#undef CASE

FX_MAIN_CASES(blocked_dereg_stalls_nothing, cases, dereg_taking_app_lock_does_not_deadlock,
              reg_asking_for_its_own_range_is_reentrant,
              reg_invalidating_its_own_range_is_a_one_shot)
