/* Hits and misses through the public API: a repeated request is served by
 * the registration its miss made, concurrent misses of one range register
 * it once, and what a hit checks before it serves - nothing in NOTIFY mode,
 * the buffer id in TAG_CHECK mode, which catches memory freed and
 * reallocated behind the cache's back, in both orders of its look and
 * query. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
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
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    long queries = atomic_load(&f->fb.queries);
    for (int i = 0; i < 10; i++)
        fx_use(f, FX_ALLOC(0), 10);
    assert_int_equal(atomic_load(&f->fb.queries), queries);
    assert_int_equal(fx_stats(f).hits, 10);
}

/* Allocation 0 freed and reallocated behind the cache's back, then freed
 * for good, with `others` further allocations cached, each under its 16
 * pages: enough of them make the index large, where a hit queries the tag
 * before it looks (hit_path.c).  The stale get is a fast hit, which hands
 * the hold out before it queries the tag and must take the hit back, when
 * nothing was registered after allocation 0 or it was hit since
 * (`hit_since`); else it is the entry's first hit of the LRU epoch, which
 * checks the tag before anything else. */
static void tag_check_catches_reallocation_among(struct fx *f, int others, bool hit_since)
{
    const int pages = (int)(MiB / (64 * KiB));
    for (int i = 0; i <= others; i++)
        fx_device_alloc(f, i);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    assert_int_equal(regcache_validation_mode(f->c), REGCACHE_VALIDATE_TAG_CHECK);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0), 10);
    regcache_put(f->c, a);
    for (int i = 1; i <= others; i++)
        for (int p = 0; p < pages; p++)
            fx_use(f, FX_ALLOC(i) + (uintptr_t)p * 64 * KiB, 10);
    assert_int_equal(rc_page_index_large(&f->c->index), others * pages + 1 >= RC_INDEX_LARGE);
    if (hit_since)
        fx_use(f, FX_ALLOC(0), 10);
    struct regcache_stats before = fx_stats(f);
    uint64_t id = fake_realloc(&f->fb, FX_ALLOC(0));
    regcache_entry_t *b = fx_get(f, FX_ALLOC(0), 10);
    assert_int_equal(fx_handle(b)->id, id);
    struct regcache_stats after = fx_stats(f);
    assert_int_equal(after.invalidations_tag - before.invalidations_tag, 1);
    assert_int_equal(after.registrations - before.registrations, 1);
    assert_int_equal(after.misses - before.misses, 1);
    assert_int_equal(after.hits, before.hits);
    regcache_put(f->c, b);
    /* Freed for good: refused, and the stale entry is gone. */
    fake_free(&f->fb, FX_ALLOC(0));
    fx_get_fails(f, FX_ALLOC(0), 10, REGCACHE_ERR_NOT_GPU);
    assert_int_equal(fx_stats(f).entries, (uint64_t)others);
    assert_int_equal(atomic_load(&f->fb.live), others);
}

static void tag_check_catches_reallocation(void **state)
{
    tag_check_catches_reallocation_among(*state, 0, false);
}

static void tag_check_catches_reallocation_after_hits(void **state)
{
    tag_check_catches_reallocation_among(*state, 0, true);
}

static void tag_check_catches_reallocation_in_a_large_index(void **state)
{
    tag_check_catches_reallocation_among(*state, RC_INDEX_LARGE / 16 + 1, false);
}

static void tag_check_catches_reallocation_after_hits_in_a_large_index(void **state)
{
    tag_check_catches_reallocation_among(*state, RC_INDEX_LARGE / 16 + 1, true);
}

FX_MAIN(miss_then_hit, put_without_the_cache, concurrent_misses_register_once,
        hooks_mode_skips_the_tag_check, tag_check_catches_reallocation,
        tag_check_catches_reallocation_after_hits, tag_check_catches_reallocation_in_a_large_index,
        tag_check_catches_reallocation_after_hits_in_a_large_index)
