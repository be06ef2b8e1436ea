/* regcache_entry_hold(): another token on a registration the caller
 * holds, without a lookup, released by its own put.  The tokens of one
 * registration are put in either order and from any thread; the
 * registration lives until the last, then stays cached (or, having left
 * the cache, is deregistered).  Holds stay balanced: after every put the
 * entry has no holder and a flush deregisters it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "entry.h"
#include "test_sync.h"
#include "threads.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)

static regcache_entry_t *hold(struct fx *f, regcache_entry_t *e)
{
    regcache_entry_t *t = NULL;
    int rc = regcache_entry_hold(f->c, e, &t);
    if (rc != REGCACHE_OK)
        fail_msg("regcache_entry_hold: %s (%s)", regcache_err_name(rc), regcache_last_error());
    assert_non_null(t);
    return t;
}

static int count_holders(void *arg, const struct regcache_entry_info *info)
{
    *(unsigned *)arg += info->holders;
    return 0;
}

/* Nobody holds anything: every entry is unheld, and a flush empties the
 * cache (the backend sees every registration go). */
static void assert_unheld(struct fx *f)
{
    unsigned holders = 0;
    assert_int_equal(regcache_foreach_entry(f->c, count_holders, &holders), REGCACHE_OK);
    assert_int_equal(holders, 0);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* A hit's token held again: the same registration and rail, either put
 * first. */
static void second_token_of_a_hit(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.rails = 2;
    fx_create(f);
    for (int order = 0; order < 2; order++) {
        regcache_entry_t *e = fx_get_rail(f, 1, A, 4096);
        regcache_entry_t *t = hold(f, e);
        assert_ptr_not_equal(t, e);
        assert_ptr_equal(regcache_entry_handle(t), regcache_entry_handle(e));
        assert_int_equal(fx_handle(t)->rail, 1);
        uintptr_t s1, s2;
        size_t l1, l2;
        regcache_entry_range(e, &s1, &l1);
        regcache_entry_range(t, &s2, &l2);
        assert_true(s1 == s2 && l1 == l2);
        regcache_put(f->c, order ? t : e);
        /* The other token still counts as a holder. */
        unsigned holders = 0;
        assert_int_equal(regcache_foreach_entry(f->c, count_holders, &holders), REGCACHE_OK);
        assert_int_equal(holders, 1);
        regcache_put(f->c, order ? e : t);
    }
    fx_assert_stats(f, FX_STAT(registrations, 1), FX_STAT(entries, 1), NULL);
    assert_unheld(f);
}

/* With every slot of the thread in use, the new token is a counted hold;
 * a counted token held again too. */
static void counted_tokens(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_entry_t *slots[RC_HOLD_SLOTS];
    for (int i = 0; i < RC_HOLD_SLOTS; i++)
        slots[i] = fx_get(f, A, 4096);
    regcache_entry_t *t = hold(f, slots[0]);
    assert_int_equal((uintptr_t)t & 1, 0);
    regcache_entry_t *u = hold(f, t);
    assert_int_equal((uintptr_t)u & 1, 0);
    assert_ptr_equal(regcache_entry_handle(u), regcache_entry_handle(slots[0]));
    for (int i = 0; i < RC_HOLD_SLOTS; i++)
        regcache_put(f->c, slots[i]);
    regcache_put(f->c, t);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    regcache_put(f->c, u);
    assert_unheld(f);
}

/* The registration outlives an invalidation while any token holds it. */
static void tokens_keep_an_invalidated_entry(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_entry_t *e = fx_get(f, A, 4096);
    regcache_entry_t *t = hold(f, e);
    assert_int_equal(regcache_invalidate(f->c, (const void *)A, 4096), REGCACHE_OK);
    /* Left the cache but held: it can be held again. */
    regcache_entry_t *u = hold(f, e);
    regcache_put(f->c, e);
    regcache_put(f->c, t);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    assert_int_not_equal(fx_handle(u)->magic, 0);
    regcache_put(f->c, u);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(deregistrations, 1), NULL);
}

struct handoff {
    struct fx *f;
    regcache_entry_t *token;
};

static void put_elsewhere(void *arg)
{
    struct handoff *h = arg;
    regcache_put(h->f->c, h->token);
}

/* Tokens handed to other threads are put there, in any order, while the
 * owner keeps making more. */
static void tokens_put_by_other_threads(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_entry_t *e = fx_get(f, A, 4096);
    enum { N = 16 };
    struct handoff h[N];
    struct dthread t[N];
    for (int i = 0; i < N; i++) {
        h[i] = (struct handoff){ f, hold(f, e) };
        dthread_start(&t[i], put_elsewhere, &h[i]);
    }
    for (int i = 0; i < N; i++)
        assert_true(dthread_join(&t[i], HANG_SECONDS));
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(registrations, 1), NULL);
    assert_unheld(f);
}

static regcache_entry_t *held_by_register;
static int register_hold_rc;

static int hold_in_on_register(void *arg, regcache_entry_t *entry, unsigned rail, void *handle,
                               void *priv)
{
    struct fx *f = arg;
    (void)rail, (void)handle, (void)priv;
    register_hold_rc = regcache_entry_hold(f->c, entry, &held_by_register);
    return 0;
}

/* on_register's token (no hold itself) may be held: the registering get
 * holds the entry meanwhile. */
static void hold_from_on_register(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.on_register = hold_in_on_register;
    f->p.callback_arg = f;
    fx_create(f);
    held_by_register = NULL;
    regcache_entry_t *e = fx_get(f, A, 4096);
    assert_int_equal(register_hold_rc, REGCACHE_OK);
    assert_non_null(held_by_register);
    assert_ptr_equal(regcache_entry_handle(held_by_register), regcache_entry_handle(e));
    regcache_put(f->c, e);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    assert_int_equal(atomic_load(&f->fb.live), 1); /* the callback's token holds it */
    regcache_put(f->c, held_by_register);
    assert_unheld(f);
}

static int deregister_hold_rc;

static void hold_in_on_deregister(void *arg, regcache_entry_t *entry, unsigned rail, void *handle,
                                  void *priv)
{
    struct fx *f = arg;
    regcache_entry_t *t = (regcache_entry_t *)(uintptr_t)1;
    (void)rail, (void)handle, (void)priv;
    deregister_hold_rc = regcache_entry_hold(f->c, entry, &t);
    assert_null(t);
}

/* on_deregister's token names an entry on its way out: refused. */
static void no_hold_from_on_deregister(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.on_deregister = hold_in_on_deregister;
    f->p.callback_arg = f;
    fx_create(f);
    deregister_hold_rc = 0;
    fx_use(f, A, 4096);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    assert_int_equal(deregister_hold_rc, REGCACHE_ERR_INVALID);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* A counted token's entry whose count is full: refused cleanly, the count
 * as it was (set through the handle, as core_holds does: 2^31-1 real holds
 * would take too long). */
static void hold_limit(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_entry_t *c = get_counted_hold(f->c, A, 4096);
    assert_non_null(c);
    struct regcache_entry *e = (struct regcache_entry *)((uintptr_t)c & ~RC_HOLD_RAIL_MASK);
    unsigned refs = atomic_load(&e->refs);
    atomic_store(&e->refs, (refs & ~RC_COUNT_MASK) | RC_COUNT_MASK);
    regcache_entry_t *t = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_entry_hold(f->c, c, &t), REGCACHE_ERR_HOLD_LIMIT);
    assert_null(t);
    fx_assert_error_says("holders", NULL);
    assert_int_equal(atomic_load(&e->refs) & RC_COUNT_MASK, RC_COUNT_MASK);
    atomic_store(&e->refs, refs);
    regcache_put(f->c, c);
    assert_unheld(f);
}

static void bad_input(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    struct fx other = { 0 };
    fake_init(&other.fb);
    fake_params(&other.fb, &other.p);
    fake_alloc(&other.fb, B, MiB, 0, REGCACHE_MEM_DEVICE);
    assert_int_equal(regcache_create(&other.p, &other.c), REGCACHE_OK);

    regcache_entry_t *e = fx_get(f, A, 4096), *t = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_entry_hold(NULL, e, &t), REGCACHE_ERR_INVALID);
    assert_null(t);
    assert_int_equal(regcache_entry_hold(f->c, NULL, &t), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_entry_hold(f->c, e, NULL), REGCACHE_ERR_INVALID);
    t = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_entry_hold(other.c, e, &t), REGCACHE_ERR_INVALID);
    assert_null(t);
    fx_assert_error_says("belongs to another cache", NULL);
    regcache_put(f->c, e);
    /* A hit's token put: its slot is empty. */
    assert_int_equal(regcache_entry_hold(f->c, e, &t), REGCACHE_ERR_INVALID);
    assert_null(t);
    fx_assert_error_says("already put", NULL);
    /* A counted token put: its entry has no counted holder. */
    regcache_entry_t *c = get_counted_hold(f->c, A, 4096);
    assert_non_null(c);
    regcache_put(f->c, c);
    assert_int_equal(regcache_entry_hold(f->c, c, &t), REGCACHE_ERR_INVALID);
    assert_null(t);
    fx_assert_error_says("already put", NULL);
    assert_unheld(f);
    regcache_destroy(other.c);
}

FX_MAIN(second_token_of_a_hit, counted_tokens, tokens_keep_an_invalidated_entry,
        tokens_put_by_other_threads, hold_from_on_register, no_hold_from_on_deregister, hold_limit,
        bad_input)
