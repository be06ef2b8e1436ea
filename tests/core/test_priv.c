/* Private data per entry and the callbacks that decorate a backend: priv is
 * zeroed at registration, filled per rail by on_register, valid until
 * on_deregister, across eviction and invalidation of held entries; a
 * refusal undoes the registration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)

/* What a transport keeps per registration: the key of each rail. */
struct keys {
    uint64_t magic;
    void *handle[REGCACHE_MAX_RAILS];
    int registered[REGCACHE_MAX_RAILS];
};

#define MAGIC 0x5eedf00dull
#define PRIV sizeof(struct keys)

struct deco {
    int registers, deregisters, refuse;
    unsigned last_rail;
    void *last_priv;
};

static int on_register(void *arg, regcache_entry_t *entry, unsigned rail, void *handle, void *priv)
{
    struct deco *d = arg;
    struct keys *k = priv;
    assert_non_null(k);
    assert_int_equal((uintptr_t)priv % 64, 0);
    assert_ptr_equal(regcache_entry_priv(entry), priv);
    assert_ptr_equal(regcache_entry_handle(entry), handle);
    /* Zeroed before the entry's first registration (on_deregister
     * scribbles over what a deregistered entry leaves); later rails find
     * what the first one wrote. */
    if (k->magic != MAGIC)
        for (size_t i = 0; i < sizeof(*k); i++)
            assert_int_equal(((unsigned char *)k)[i], 0);
    d->registers++;
    if (d->refuse)
        return d->refuse;
    k->magic = MAGIC;
    k->handle[rail] = handle;
    k->registered[rail] = 1;
    return 0;
}

static void on_deregister(void *arg, regcache_entry_t *entry, unsigned rail, void *handle,
                          void *priv)
{
    struct deco *d = arg;
    struct keys *k = priv;
    (void)entry;
    assert_int_equal(k->magic, MAGIC);
    assert_ptr_equal(k->handle[rail], handle);
    assert_true(k->registered[rail]);
    /* The backend's handle is still live here. */
    assert_int_equal(((struct fake_handle *)handle)->magic != 0, 1);
    k->registered[rail] = 0;
    int left = 0;
    for (unsigned r = 0; r < REGCACHE_MAX_RAILS; r++)
        left |= k->registered[r];
    if (!left)
        memset(k, 0xab, sizeof(*k));
    d->deregisters++;
    d->last_rail = rail;
    d->last_priv = priv;
}

static struct deco *decorate(struct fx *f)
{
    static struct deco d;
    memset(&d, 0, sizeof(d));
    f->p.priv_size = PRIV;
    f->p.on_register = on_register;
    f->p.on_deregister = on_deregister;
    f->p.callback_arg = &d;
    return &d;
}

static void priv_is_per_entry_and_shared_by_rails(void **state)
{
    struct fx *f = *state;
    struct deco *d = decorate(f);
    fx_device_allocs(f, 2);
    f->p.rails = 2;
    fx_create(f);
    regcache_entry_t *a0 = fx_get(f, A, 10);
    regcache_entry_t *a1 = fx_get_rail(f, 1, A, 10);
    regcache_entry_t *b = fx_get(f, B, 10);
    struct keys *k = regcache_entry_priv(a0);
    assert_ptr_equal(regcache_entry_priv(a1), k);
    assert_ptr_not_equal(regcache_entry_priv(b), k);
    assert_ptr_equal(k->handle[0], regcache_entry_handle(a0));
    assert_ptr_equal(k->handle[1], regcache_entry_handle(a1));
    assert_int_equal(d->registers, 3);
    /* Hits call nothing. */
    regcache_entry_t *hit = fx_get(f, A, 10);
    assert_ptr_equal(regcache_entry_priv(hit), k);
    assert_int_equal(d->registers, 3);
    regcache_put(f->c, hit);
    regcache_put(f->c, a0);
    regcache_put(f->c, a1);
    regcache_put(f->c, b);
    regcache_destroy(f->c);
    f->c = NULL;
    assert_int_equal(d->deregisters, 3);
}

static void no_priv_without_priv_size(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *a = fx_get(f, A, 10);
    assert_null(regcache_entry_priv(a));
    assert_null(regcache_entry_priv(NULL));
    regcache_put(f->c, a);
}

static void priv_lives_until_eviction_deregisters(void **state)
{
    struct fx *f = *state;
    struct deco *d = decorate(f);
    fx_device_allocs(f, 2);
    f->p.max_entries = 1;
    fx_create(f);
    regcache_entry_t *a = fx_get(f, A, 10);
    void *pa = regcache_entry_priv(a);
    regcache_put(f->c, a);
    regcache_entry_t *b = fx_get(f, B, 10); /* evicts A */
    assert_int_equal(d->deregisters, 1);
    assert_ptr_equal(d->last_priv, pa);
    /* B's own, whatever memory the pool gave it. */
    struct keys *kb = regcache_entry_priv(b);
    assert_int_equal(kb->magic, MAGIC);
    assert_ptr_equal(kb->handle[0], regcache_entry_handle(b));
    regcache_put(f->c, b);
}

/* An entry's memory handed out again by the pool starts zeroed. */
static void priv_is_zeroed_for_each_registration(void **state)
{
    struct fx *f = *state;
    struct deco *d = decorate(f);
    fx_device_allocs(f, 4);
    fx_create(f);
    for (int i = 0; i < 4; i++) {
        regcache_entry_t *e = fx_get(f, FX_ALLOC(i), 10);
        assert_int_equal(((struct keys *)regcache_entry_priv(e))->magic, MAGIC);
        regcache_put(f->c, e);
        assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    }
    assert_int_equal(d->registers, 4);
    assert_int_equal(d->deregisters, 4);
}

static void priv_of_an_invalidated_held_entry_lives_until_its_put(void **state)
{
    struct fx *f = *state;
    struct deco *d = decorate(f);
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *a = fx_get(f, A, 10);
    struct keys *k = regcache_entry_priv(a);
    assert_int_equal(regcache_invalidate(f->c, (const void *)A, 10), REGCACHE_OK);
    assert_int_equal(d->deregisters, 0);
    assert_int_equal(k->magic, MAGIC);
    assert_true(k->registered[0]);
    /* A new get registers anew, with priv of its own. */
    regcache_entry_t *again = fx_get(f, A, 10);
    assert_ptr_not_equal(regcache_entry_priv(again), k);
    regcache_put(f->c, a);
    assert_int_equal(d->deregisters, 1);
    assert_ptr_equal(d->last_priv, k);
    regcache_put(f->c, again);
}

static void refusal_undoes_the_registration(void **state)
{
    struct fx *f = *state;
    struct deco *d = decorate(f);
    d->refuse = 42;
    fx_device_alloc(f, 0);
    fx_create(f);
    fx_get_fails(f, A, 10, REGCACHE_ERR_CALLBACK);
    fx_assert_error_says("on_register returned 42", NULL);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    assert_int_equal(d->deregisters, 0);
    fx_assert_stats(f, FX_STAT(entries, 0), NULL);
    /* Accepted the next time. */
    d->refuse = 0;
    regcache_entry_t *a = fx_get(f, A, 10);
    assert_int_equal(((struct keys *)regcache_entry_priv(a))->magic, MAGIC);
    regcache_put(f->c, a);
}

static void refusal_on_a_second_rail_keeps_the_first(void **state)
{
    struct fx *f = *state;
    struct deco *d = decorate(f);
    fx_device_alloc(f, 0);
    f->p.rails = 2;
    fx_create(f);
    regcache_entry_t *a = fx_get(f, A, 10);
    d->refuse = 1;
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get_rail(f->c, 1, (const void *)A, 10, &e), REGCACHE_ERR_CALLBACK);
    assert_null(e);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    regcache_put(f->c, a);
    d->refuse = 0;
    e = fx_get_rail(f, 1, A, 10);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.live), 2);
}

static void priv_size_over_the_limit_is_invalid(void **state)
{
    struct fx *f = *state;
    f->p.priv_size = 4097;
    regcache_t *c = NULL;
    assert_int_equal(regcache_create(&f->p, &c), REGCACHE_ERR_INVALID);
    assert_null(c);
}

FX_MAIN(priv_is_per_entry_and_shared_by_rails, no_priv_without_priv_size,
        priv_lives_until_eviction_deregisters, priv_is_zeroed_for_each_registration,
        priv_of_an_invalidated_held_entry_lives_until_its_put, refusal_undoes_the_registration,
        refusal_on_a_second_rail_keeps_the_first, priv_size_over_the_limit_is_invalid)
