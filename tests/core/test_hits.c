/* Hits and misses through the public API: a repeated request is served by
 * the registration its miss made, concurrent misses of one range register
 * it once, and what a hit checks before it serves - nothing in HOOKS mode,
 * the buffer id in TAG_CHECK mode, which catches memory freed and
 * reallocated behind the cache's back. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"

static void miss_then_hit(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0) + 4 * KiB, 4 * KiB);
    void *registered = regcache_entry_handle(a);
    regcache_put(f->c, a);
    regcache_entry_t *b = fx_get(f, FX_ALLOC(0) + 4 * KiB, 4 * KiB);
    assert_ptr_equal(regcache_entry_handle(b), registered);
    regcache_put(f->c, b);
    fx_assert_stats(f, FX_STAT(misses, 1), FX_STAT(hits, 1), FX_STAT(registrations, 1),
                    FX_STAT(entries, 1), FX_STAT(bytes, MiB), NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

/* regcache_put() with no cache: both kinds of hold (in a slot, counted)
 * are let go, so the entry can then be evicted. */
static void put_without_the_cache(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    f->p.max_entries = 1;
    fx_create(f);
    regcache_put(NULL, fx_get(f, FX_ALLOC(0), 10));
    regcache_entry_t *counted = get_counted_hold(f->c, FX_ALLOC(0), 10);
    assert_non_null(counted);
    regcache_put(NULL, counted);
    fx_use(f, FX_ALLOC(1), 10);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(evictions, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
}

static void *getter(void *arg)
{
    struct fx *f = arg;
    regcache_entry_t *e = NULL;
    int rc = regcache_get(f->c, (void *)FX_ALLOC(0), 10, &e);
    if (rc == REGCACHE_OK)
        regcache_put(f->c, e);
    return (void *)(intptr_t)rc;
}

static void slow_reg(void *arg)
{
    (void)arg;
    usleep(20000);
}

static void concurrent_misses_register_once(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    f->fb.during_reg = slow_reg;
    fx_create(f);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, getter, f);
    for (int i = 0; i < 8; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        assert_int_equal((intptr_t)rc, REGCACHE_OK);
    }
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    fx_assert_stats(f, FX_STAT(misses, 1), FX_STAT(hits, 7), NULL);
}

static void hooks_mode_skips_the_tag_check(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    f->p.validation = REGCACHE_VALIDATE_HOOKS;
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    long queries = atomic_load(&f->fb.queries);
    for (int i = 0; i < 10; i++)
        fx_use(f, FX_ALLOC(0), 10);
    assert_int_equal(atomic_load(&f->fb.queries), queries);
    assert_int_equal(fx_stats(f).hits, 10);
}

static void tag_check_catches_reallocation(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    assert_int_equal(regcache_validation_mode(f->c), REGCACHE_VALIDATE_TAG_CHECK);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0), 10);
    regcache_put(f->c, a);
    /* Freed and reallocated at the same address behind the cache's back. */
    uint64_t id = fake_realloc(&f->fb, FX_ALLOC(0));
    regcache_entry_t *b = fx_get(f, FX_ALLOC(0), 10);
    assert_int_equal(fx_handle(b)->id, id);
    fx_assert_stats(f, FX_STAT(invalidations_tag, 1), FX_STAT(registrations, 2), FX_STAT(hits, 0),
                    FX_STAT(misses, 2), NULL);
    regcache_put(f->c, b);
    /* Freed for good: refused, and the stale entry is gone. */
    fake_free(&f->fb, FX_ALLOC(0));
    fx_get_fails(f, FX_ALLOC(0), 10, REGCACHE_ERR_NOT_GPU);
    assert_int_equal(fx_stats(f).entries, 0);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

FX_MAIN(miss_then_hit, put_without_the_cache, concurrent_misses_register_once,
        hooks_mode_skips_the_tag_check, tag_check_catches_reallocation)
