/* Access per get: an entry serves every get whose access its own covers; a
 * get that needs more registers the union once and the narrower entry
 * leaves the cache, living on while held. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define DEFAULT (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static regcache_entry_t *get_access(struct fx *f, unsigned rail, uintptr_t addr, size_t len,
                                    int access)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get_access(f->c, rail, (const void *)addr, len, access, 0, &e),
                     REGCACHE_OK);
    assert_non_null(e);
    return e;
}

static void narrower_gets_hit_the_default_entry(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *d = fx_get(f, A, 4096);
    assert_int_equal(regcache_entry_access(d), DEFAULT);
    static const int subsets[] = { 0, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_LOCAL_WRITE, DEFAULT };
    for (size_t i = 0; i < sizeof(subsets) / sizeof(subsets[0]); i++) {
        regcache_entry_t *e = get_access(f, 0, A, 4096, subsets[i]);
        assert_ptr_equal(regcache_entry_handle(e), regcache_entry_handle(d));
        regcache_put(f->c, e);
    }
    regcache_put(f->c, d);
    fx_assert_stats(f, FX_STAT(registrations, 1), FX_STAT(misses, 1), FX_STAT(hits, 4), NULL);
}

static void upgrade_registers_the_union_once_and_retires_the_held_narrower(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *narrow = get_access(f, 0, A, 4096, IBV_ACCESS_REMOTE_READ);
    assert_int_equal(regcache_entry_access(narrow), IBV_ACCESS_REMOTE_READ);
    struct fake_handle *old = fx_handle(narrow);

    /* Verbs takes remote atomic access only with local write: added. */
    regcache_entry_t *wide = get_access(f, 0, A, 4096, IBV_ACCESS_REMOTE_ATOMIC);
    assert_int_equal(regcache_entry_access(wide),
                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE);
    assert_ptr_not_equal(fx_handle(wide), old);
    /* The narrower one left the cache but is held: still registered. */
    assert_int_equal(atomic_load(&f->fb.live), 2);
    assert_ptr_equal(fx_handle(narrow), old);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 2), NULL);
    regcache_put(f->c, narrow);
    assert_int_equal(atomic_load(&f->fb.live), 1);

    /* The union serves both accesses from now on, without registering. */
    for (int round = 0; round < 2; round++) {
        regcache_entry_t *r = get_access(f, 0, A, 4096, IBV_ACCESS_REMOTE_READ);
        regcache_entry_t *x = get_access(f, 0, A, 4096, IBV_ACCESS_REMOTE_ATOMIC);
        assert_ptr_equal(regcache_entry_handle(r), regcache_entry_handle(wide));
        assert_ptr_equal(regcache_entry_handle(x), regcache_entry_handle(wide));
        regcache_put(f->c, r);
        regcache_put(f->c, x);
    }
    regcache_put(f->c, wide);
    fx_assert_stats(f, FX_STAT(registrations, 2), FX_STAT(deregistrations, 1), FX_STAT(entries, 1),
                    NULL);
}

/* A get with the cache's access on an entry registered for less: the
 * default get is an upgrade too, and its hits then need no registration. */
static void default_get_upgrades_a_read_only_entry(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    fx_use(f, A, 4096);
    regcache_flush(f->c);
    regcache_entry_t *ro = get_access(f, 0, A, 4096, IBV_ACCESS_REMOTE_READ);
    regcache_put(f->c, ro);
    regcache_entry_t *d = fx_get(f, A, 4096);
    assert_int_equal(regcache_entry_access(d), DEFAULT);
    regcache_put(f->c, d);
    fx_use(f, A, 4096);
    fx_assert_stats(f, FX_STAT(registrations, 3), FX_STAT(entries, 1), NULL);
}

/* Every rail of an upgraded entry is registered for the union. */
static void upgrade_on_another_rail(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    f->p.rails = 2;
    fx_create(f);
    regcache_entry_t *r0 = get_access(f, 0, A, 4096, IBV_ACCESS_REMOTE_READ);
    regcache_put(f->c, r0);
    /* Remote write comes with local write (verbs' rule): the union is the
     * default access. */
    regcache_entry_t *r1 = get_access(f, 1, A, 4096, IBV_ACCESS_REMOTE_WRITE);
    assert_int_equal(regcache_entry_access(r1), DEFAULT);
    regcache_entry_t *again = get_access(f, 0, A, 4096, IBV_ACCESS_REMOTE_READ);
    assert_int_equal(regcache_entry_access(again), DEFAULT);
    assert_int_equal(fx_handle(again)->rail, 0);
    regcache_put(f->c, again);
    regcache_put(f->c, r1);
    fx_assert_stats(f, FX_STAT(entries, 1), NULL);
}

static void bad_access_and_flags_are_refused(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *e = (regcache_entry_t *)1;
    assert_int_equal(regcache_get_access(f->c, 0, (const void *)A, 10, -1, 0, &e),
                     REGCACHE_ERR_INVALID);
    assert_null(e);
    e = (regcache_entry_t *)1;
    assert_int_equal(regcache_get_access(f->c, 0, (const void *)A, 10, DEFAULT, 0x100, &e),
                     REGCACHE_ERR_INVALID);
    assert_null(e);
    assert_int_equal(regcache_get_access(f->c, 3, (const void *)A, 10, DEFAULT, 0, &e),
                     REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_get_access(NULL, 0, (const void *)A, 10, DEFAULT, 0, &e),
                     REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_entry_access(NULL), 0);
    fx_assert_stats(f, FX_STAT(registrations, 0), NULL);
}

FX_MAIN(narrower_gets_hit_the_default_entry,
        upgrade_registers_the_union_once_and_retires_the_held_narrower,
        default_get_upgrades_a_read_only_entry, upgrade_on_another_rail,
        bad_access_and_flags_are_refused)
