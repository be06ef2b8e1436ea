/* The leave notice (params.on_leave): once per registered entry, with the
 * reason it left, its range, rails, handles and priv; an unused entry just
 * before its deregistration, a held one whose memory is gone at once (its
 * registration still valid), a held one replaced at its last put; no cache
 * lock held, so the callback may call the API. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache.h"
#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define MAX_NOTES 64

struct note {
    int reason, held, access;
    uintptr_t start;
    size_t len;
    unsigned rails;
    void *handle0, *priv;
    long live_backend; /* registrations live at the notice */
};

struct notes {
    struct fx *f;
    pthread_mutex_t lock;
    int n;
    struct note at[MAX_NOTES];
    long total;
    /* What the callback does besides recording (re-entering the API). */
    void (*also)(struct notes *ns, const struct regcache_leave *l);
};

static void on_leave(void *arg, const struct regcache_leave *l)
{
    struct notes *ns = arg;
    pthread_mutex_lock(&ns->lock);
    if (ns->n < MAX_NOTES)
        ns->at[ns->n++] = (struct note){ .reason = l->reason,
                                         .held = l->held,
                                         .access = l->access,
                                         .start = l->start,
                                         .len = l->len,
                                         .rails = l->rails,
                                         .handle0 = l->rails & 1 ? l->handles[0] : NULL,
                                         .priv = l->priv,
                                         .live_backend = atomic_load(&ns->f->fb.live) };
    ns->total++;
    pthread_mutex_unlock(&ns->lock);
    /* The handles are still registered. */
    for (unsigned r = 0; r < REGCACHE_MAX_RAILS; r++)
        if (l->rails >> r & 1)
            assert_int_not_equal(((struct fake_handle *)l->handles[r])->magic, 0);
    if (ns->also)
        ns->also(ns, l);
}

static struct notes *listen(struct fx *f)
{
    static struct notes ns;
    memset(&ns, 0, sizeof(ns));
    pthread_mutex_init(&ns.lock, NULL);
    ns.f = f;
    f->p.on_leave = on_leave;
    f->p.callback_arg = &ns;
    f->p.priv_size = 64;
    return &ns;
}

/* The one notice so far: of the entry of [start, start + len), for why. */
static const struct note *only_note(struct notes *ns, int why)
{
    assert_int_equal(ns->n, 1);
    assert_string_equal(regcache_reason_name(ns->at[0].reason), regcache_reason_name(why));
    return &ns->at[0];
}

/* ---- one notice per reason ------------------------------------------------ */

struct reason_case {
    const char *name;
    int reason;
};

static const struct reason_case reasons[] = {
    { "evict_budget", REGCACHE_REASON_EVICT_BUDGET },
    { "evict_exhausted", REGCACHE_REASON_EVICT_EXHAUSTED },
    { "flush", REGCACHE_REASON_FLUSH },
    { "freed_hook", REGCACHE_REASON_FREED_HOOK },
    { "freed_monitor", REGCACHE_REASON_FREED_MONITOR },
    { "freed_tag", REGCACHE_REASON_FREED_TAG },
    { "invalidate", REGCACHE_REASON_INVALIDATE },
    { "destroy", REGCACHE_REASON_DESTROY },
    { "replaced", REGCACHE_REASON_REPLACED },
};

/* A's entry, cached unused, then made to leave for rc->reason. */
static void notice_of_each_reason(void **state)
{
    struct fx *f = *state;
    const struct reason_case *rc = f->param;
    struct notes *ns = listen(f);
    if (rc->reason == REGCACHE_REASON_FREED_MONITOR) {
        /* The monitor's reason is for pageable host memory only. */
        f->p.host_memory = 1;
        fx_pageable_alloc(f, A, MiB);
    } else {
        fx_device_allocs(f, 2);
    }
    if (rc->reason == REGCACHE_REASON_EVICT_BUDGET)
        f->p.max_entries = 1;
    if (rc->reason == REGCACHE_REASON_FREED_TAG)
        f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    int access = rc->reason == REGCACHE_REASON_REPLACED ? IBV_ACCESS_REMOTE_READ : f->p.access;
    regcache_entry_t *a = NULL;
    assert_int_equal(regcache_get_access(f->c, 0, (const void *)A, 10, access, 0, &a), REGCACHE_OK);
    uintptr_t start;
    size_t len;
    regcache_entry_range(a, &start, &len);
    void *handle = regcache_entry_handle(a), *priv = regcache_entry_priv(a);
    regcache_put(f->c, a);
    /* Hits and puts are never noticed. */
    assert_int_equal(regcache_get_access(f->c, 0, (const void *)A, 10, access, 0, &a), REGCACHE_OK);
    regcache_put(f->c, a);
    assert_int_equal(ns->n, 0);

    regcache_entry_t *other = NULL;
    switch (rc->reason) {
    case REGCACHE_REASON_EVICT_BUDGET:
        other = fx_get(f, B, 10);
        break;
    case REGCACHE_REASON_EVICT_EXHAUSTED:
        f->fb.fail_errno = ENOSPC;
        f->fb.fail_count = 1;
        other = fx_get(f, B, 10);
        break;
    case REGCACHE_REASON_FLUSH:
        assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
        break;
    case REGCACHE_REASON_FREED_HOOK:
        regcache_notify_free((const void *)A, MiB);
        break;
    case REGCACHE_REASON_FREED_MONITOR:
        rc_cache_invalidate(f->c, A, A + MiB, REGCACHE_REASON_FREED_MONITOR);
        break;
    case REGCACHE_REASON_FREED_TAG:
        fake_realloc(&f->fb, A);
        other = fx_get(f, A, 10);
        break;
    case REGCACHE_REASON_INVALIDATE:
        assert_int_equal(regcache_invalidate(f->c, (const void *)A, 10), REGCACHE_OK);
        break;
    case REGCACHE_REASON_DESTROY:
        regcache_destroy(f->c);
        f->c = NULL;
        break;
    case REGCACHE_REASON_REPLACED:
        other = fx_get(f, A, 10);
        break;
    }
    const struct note *n = only_note(ns, rc->reason);
    assert_int_equal(n->start, start);
    assert_int_equal(n->len, len);
    assert_int_equal(n->rails, 1);
    assert_ptr_equal(n->handle0, handle);
    assert_ptr_equal(n->priv, priv);
    assert_int_equal(n->access, access);
    /* A tag check finds the change while its get holds the entry. */
    assert_int_equal(n->held, rc->reason == REGCACHE_REASON_FREED_TAG);
    if (other)
        regcache_put(f->c, other);
}

/* ---- held entries --------------------------------------------------------- */

static void held_entry_whose_memory_is_gone_is_noticed_at_once(void **state)
{
    struct fx *f = *state;
    struct notes *ns = listen(f);
    f->p.rails = 2;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *a0 = fx_get(f, A, 10);
    regcache_entry_t *a1 = fx_get_rail(f, 1, A, 10);
    regcache_notify_free((const void *)A, MiB);
    const struct note *n = only_note(ns, REGCACHE_REASON_FREED_HOOK);
    assert_int_equal(n->held, 1);
    assert_int_equal(n->rails, 3);
    assert_int_equal(n->live_backend, 2);
    /* Still registered until the last put, and noticed only once. */
    assert_int_equal(atomic_load(&f->fb.live), 2);
    regcache_put(f->c, a0);
    regcache_put(f->c, a1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    assert_int_equal(ns->n, 1);
}

static void held_entry_replaced_is_noticed_at_its_last_put(void **state)
{
    struct fx *f = *state;
    struct notes *ns = listen(f);
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *ro = NULL;
    assert_int_equal(
        regcache_get_access(f->c, 0, (const void *)A, 10, IBV_ACCESS_REMOTE_READ, 0, &ro),
        REGCACHE_OK);
    regcache_entry_t *wide = fx_get(f, A, 10);
    /* The memory is still there: its keys stay good while it is held. */
    assert_int_equal(ns->n, 0);
    regcache_put(f->c, ro);
    const struct note *n = only_note(ns, REGCACHE_REASON_REPLACED);
    assert_int_equal(n->held, 0);
    assert_int_equal(n->access, IBV_ACCESS_REMOTE_READ);
    regcache_put(f->c, wide);
}

/* A registration whose memory is invalidated while it is being made is
 * handed out once: noticed by the time its get returns. */
static void invalidate_a(void *arg)
{
    struct fx *f = arg;
    assert_int_equal(regcache_invalidate(f->c, (const void *)A, 10), REGCACHE_OK);
}

static void one_shot_is_noticed_when_its_get_returns(void **state)
{
    struct fx *f = *state;
    struct notes *ns = listen(f);
    fx_device_alloc(f, 0);
    fx_create(f);
    f->fb.during_reg = invalidate_a;
    f->fb.during_reg_arg = f;
    regcache_entry_t *a = fx_get(f, A, 10);
    f->fb.during_reg = NULL;
    const struct note *n = only_note(ns, REGCACHE_REASON_INVALIDATE);
    assert_int_equal(n->held, 1);
    assert_ptr_equal(n->handle0, regcache_entry_handle(a));
    fx_assert_stats(f, FX_STAT(one_shots, 1), NULL);
    regcache_put(f->c, a);
    assert_int_equal(ns->n, 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* ---- re-entering the API from the notice ---------------------------------- */

static void reenter(struct notes *ns, const struct regcache_leave *l)
{
    struct fx *f = ns->f;
    (void)l;
    ns->also = NULL; /* once: the invalidation below is noticed too */
    /* A get and put of other memory, of the very range that left (it
     * registers anew: the cache no longer has it), an invalidation and the
     * statistics. */
    regcache_entry_t *b = NULL, *a = NULL;
    assert_int_equal(regcache_get(f->c, (const void *)B, 10, &b), REGCACHE_OK);
    regcache_put(f->c, b);
    assert_int_equal(regcache_get(f->c, (const void *)A, 10, &a), REGCACHE_OK);
    regcache_put(f->c, a);
    assert_int_equal(regcache_invalidate(f->c, (const void *)B, 10), REGCACHE_OK);
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(f->c, &s), REGCACHE_OK);
}

static void notice_may_call_the_api(void **state)
{
    struct fx *f = *state;
    struct notes *ns = listen(f);
    fx_device_allocs(f, 2);
    fx_create(f);
    regcache_entry_t *held = fx_get(f, A, 10);
    ns->also = reenter;
    assert_int_equal(regcache_invalidate(f->c, (const void *)A, 10), REGCACHE_OK);
    /* A's held entry, then B's from inside the callback. */
    assert_int_equal(ns->n, 2);
    assert_int_equal(ns->at[0].held, 1);
    assert_int_equal(ns->at[1].reason, REGCACHE_REASON_INVALIDATE);
    regcache_put(f->c, held);
    /* The A registered from the callback is cached. */
    fx_assert_stats(f, FX_STAT(entries, 1), NULL);
}

/* ---- every registered entry is noticed once, under races ------------------ */

#define RACE_ROUNDS 3000

static void *getter(void *arg)
{
    struct fx *f = arg;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        regcache_entry_t *e = NULL;
        int access = i % 3 == 0 ? IBV_ACCESS_REMOTE_READ : f->p.access;
        if (regcache_get_access(f->c, 0, (const void *)A, 10, access, 0, &e) == REGCACHE_OK)
            regcache_put(f->c, e);
    }
    return NULL;
}

static void every_registration_is_noticed_once(void **state)
{
    struct fx *f = *state;
    struct notes *ns = listen(f);
    fx_device_alloc(f, 0);
    fx_create(f);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, getter, f), 0);
    for (int i = 0; i < RACE_ROUNDS; i++)
        regcache_invalidate(f->c, (const void *)A, 10);
    pthread_join(t, NULL);
    struct regcache_stats s = fx_stats(f);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(ns->total, (long)s.registrations);
}

int main(void)
{
    return fx_run(fx_setup, fx_teardown,
                  "held_entry_whose_memory_is_gone_is_noticed_at_once, "
                  "held_entry_replaced_is_noticed_at_its_last_put, "
                  "one_shot_is_noticed_when_its_get_returns, notice_may_call_the_api, "
                  "every_registration_is_noticed_once",
                  FX_FNS(held_entry_whose_memory_is_gone_is_noticed_at_once,
                         held_entry_replaced_is_noticed_at_its_last_put,
                         one_shot_is_noticed_when_its_get_returns, notice_may_call_the_api,
                         every_registration_is_noticed_once),
                  5, notice_of_each_reason, reasons, sizeof(reasons) / sizeof(reasons[0]),
                  sizeof(reasons[0]));
}
