/* What lets go of cached registrations: regcache_invalidate (an unused
 * entry goes at once, a held one when it is put, and neither is served
 * again), regcache_notify_free (every live cache hears it, a destroyed one
 * no longer does, and its filter misses no entry as it grows),
 * regcache_flush (the unused entries only) and
 * regcache_destroy (everything, held or not). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "asym_fence.h"
#include "cache.h"
#include "cache_fixture.h"

static void invalidate_unused_and_held_in(struct fx *f)
{
    fx_device_allocs(f, 2);
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    regcache_entry_t *held = fx_get(f, FX_ALLOC(1), 10);

    assert_int_equal(regcache_invalidate(f->c, (void *)FX_ALLOC(0), 2 * MiB + 1), REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(invalidations_explicit, 2), FX_STAT(entries, 0), NULL);
    /* The unused one is gone now; the held one stays registered... */
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(fx_handle(held)->magic, 0x5ca1ab1eu);
    /* ...but is never served again. */
    regcache_entry_t *fresh = fx_get(f, FX_ALLOC(1), 10);
    assert_ptr_not_equal(regcache_entry_handle(fresh), regcache_entry_handle(held));
    regcache_put(f->c, held);
    assert_int_equal(atomic_load(&f->fb.deregs), 2);
    regcache_put(f->c, fresh);
    assert_int_equal(fx_stats(f).entries, 1);
}

static void invalidate_unused_and_held(void **state)
{
    invalidate_unused_and_held_in(*state);
}

/* Where membarrier() fails, every put fences before it looks for zombies
 * (cache.h, put_flags): the held entry is still released at its put. */
static void invalidate_held_without_the_heavy_fence(void **state)
{
    rc_fence_setup(NULL);
    bool works = atomic_exchange(&rc_heavy_fence_works, false);
    invalidate_unused_and_held_in(*state);
    struct fx *f = *state;
    assert_int_equal(atomic_load(&f->c->put_flags), RC_PUT_FENCE);
    atomic_store(&rc_heavy_fence_works, works);
}

static void notify_free_reaches_every_cache(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_t *other;
    assert_int_equal(regcache_create(&f->p, &other), REGCACHE_OK);
    fx_use(f, FX_ALLOC(0), 10);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(other, (void *)FX_ALLOC(0), 10, &e), REGCACHE_OK);
    regcache_put(other, e);
    assert_int_equal(atomic_load(&f->fb.live), 2);
    regcache_notify_free((void *)(FX_ALLOC(0) + 100), 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    struct regcache_stats s;
    regcache_get_stats(other, &s);
    assert_int_equal(s.invalidations_notify, 1);
    assert_int_equal(fx_stats(f).invalidations_notify, 1);
    regcache_destroy(other);
    /* A destroyed cache is no longer notified. */
    regcache_notify_free((void *)FX_ALLOC(0), MiB);
}

static void flush_spares_held_entries(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 3);
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    fx_use(f, FX_ALLOC(1), 10);
    regcache_entry_t *held = fx_get(f, FX_ALLOC(2), 10);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(evictions, 0), FX_STAT(deregistrations, 2),
                    NULL);
    regcache_entry_t *again = fx_get(f, FX_ALLOC(2), 10);
    assert_ptr_equal(regcache_entry_handle(again), regcache_entry_handle(held));
    regcache_put(f->c, again);
    regcache_put(f->c, held);
}

static void destroy_with_entries_held(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fx_create(f);
    fx_get(f, FX_ALLOC(0), 10);
    regcache_entry_t *zombie = fx_get(f, FX_ALLOC(1), 10);
    regcache_invalidate(f->c, (void *)FX_ALLOC(1), 1);
    (void)zombie;
    regcache_destroy(f->c);
    f->c = NULL;
    /* teardown checks that both registrations were released */
}

/* notify_free's lock-free filter grows its table as entries spread over
 * more address chunks (each allocation here has a 2 MiB chunk of its own):
 * across every growth, a free still finds each cached entry, and a free of
 * the unallocated half of a chunk finds none. */
#define SPREAD 3000

static void notify_free_finds_entries_across_filter_growth(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, SPREAD);
    fx_create(f);
    for (int i = 0; i < SPREAD; i += 2)
        fx_use(f, FX_ALLOC(i), 10);
    /* Half of them leave, so that the tables grown next are refilled from
     * a cache that also lost entries. */
    for (int i = 0; i < SPREAD; i += 4)
        regcache_notify_free((void *)FX_ALLOC(i), MiB);
    for (int i = 1; i < SPREAD; i += 2)
        fx_use(f, FX_ALLOC(i), 10);
    size_t cached = (size_t)fx_stats(f).entries;
    assert_int_equal(cached, SPREAD - SPREAD / 4);
    for (int i = 0; i < SPREAD; i++)
        regcache_notify_free((void *)(FX_ALLOC(i) + MiB), MiB);
    assert_int_equal(fx_stats(f).entries, cached);
    for (int i = SPREAD - 1; i >= 0; i--) {
        regcache_notify_free((void *)FX_ALLOC(i), MiB);
        if (i % 4)
            cached--;
        assert_int_equal(fx_stats(f).entries, cached);
    }
    fx_assert_stats(f, FX_STAT(invalidations_notify, SPREAD), FX_STAT(entries, 0), NULL);
}

FX_MAIN(invalidate_unused_and_held, invalidate_held_without_the_heavy_fence,
        notify_free_reaches_every_cache, flush_spares_held_entries, destroy_with_entries_held,
        notify_free_finds_entries_across_filter_growth)
