/* What a miss registers: by default the whole allocation, rounded out to
 * 64 KiB, which then serves every subrange of it (and nothing outside it);
 * with whole_allocation off, the request rounded out; allocations the
 * driver packs into one page each get an entry of their own; a request
 * across two allocations is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache_fixture.h"

static void whole_allocation_serves_every_subrange(void **state)
{
    struct fx *f = *state;
    fake_alloc(&f->fb, FX_ALLOC(0) + 1000, MiB - 2000, 0, REGCACHE_MEM_DEVICE);
    fx_create(f);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0) + 4096, 100);
    uintptr_t start;
    size_t len;
    regcache_entry_range(a, &start, &len);
    /* The allocation rounded out to the 64 KiB alignment. */
    assert_int_equal(start, FX_ALLOC(0));
    assert_int_equal(len, MiB);
    regcache_entry_t *b = fx_get(f, FX_ALLOC(0) + MiB - 1000 - 64, 64);
    assert_ptr_equal(regcache_entry_handle(a), regcache_entry_handle(b));
    regcache_put(f->c, a);
    regcache_put(f->c, b);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    /* Bytes outside the allocation are not served even though the
     * registration covers them. */
    fx_get_fails(f, FX_ALLOC(0) + 10, 10, REGCACHE_ERR_NOT_GPU);
}

static void partial_registration_rounds_the_request(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    f->p.whole_allocation = 0;
    fx_create(f);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0) + 70 * KiB, 10 * KiB);
    uintptr_t start;
    size_t len;
    regcache_entry_range(a, &start, &len);
    assert_int_equal(start, FX_ALLOC(0) + 64 * KiB);
    assert_int_equal(len, 64 * KiB);
    /* Inside the rounded range: a hit.  Beyond it: a new registration. */
    regcache_entry_t *b = fx_get(f, FX_ALLOC(0) + 64 * KiB, 64 * KiB);
    assert_ptr_equal(regcache_entry_handle(a), regcache_entry_handle(b));
    regcache_entry_t *c = fx_get(f, FX_ALLOC(0) + 100 * KiB, 64 * KiB);
    assert_ptr_not_equal(regcache_entry_handle(a), regcache_entry_handle(c));
    regcache_entry_range(c, &start, &len);
    assert_int_equal(start, FX_ALLOC(0) + 64 * KiB);
    assert_int_equal(len, 128 * KiB);
    regcache_put(f->c, a);
    regcache_put(f->c, b);
    regcache_put(f->c, c);
    assert_int_equal(fx_stats(f).entries, 2);
}

static void packed_allocations_are_never_merged(void **state)
{
    struct fx *f = *state;
    /* Two 1000-byte allocations 1 KiB apart in one 64 KiB page, as the
     * driver packs them. */
    fake_alloc(&f->fb, FX_ALLOC(0), 1000, 0, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, FX_ALLOC(0) + 1024, 1000, 0, REGCACHE_MEM_DEVICE);
    fx_create(f);
    /* Registrations, not holds: a hold means nothing after its put. */
    void *first_a = NULL, *first_b = NULL;
    for (int round = 0; round < 3; round++) {
        regcache_entry_t *a = fx_get(f, FX_ALLOC(0), 1000);
        regcache_entry_t *b = fx_get(f, FX_ALLOC(0) + 1024, 1000);
        assert_ptr_not_equal(regcache_entry_handle(a), regcache_entry_handle(b));
        if (round == 0) {
            first_a = regcache_entry_handle(a);
            first_b = regcache_entry_handle(b);
        }
        /* Each allocation keeps being served by its own entry. */
        assert_ptr_equal(regcache_entry_handle(a), first_a);
        assert_ptr_equal(regcache_entry_handle(b), first_b);
        uintptr_t sa, sb;
        regcache_entry_range(a, &sa, NULL);
        regcache_entry_range(b, &sb, NULL);
        assert_int_equal(sa, sb); /* same rounded page, separate entries */
        regcache_put(f->c, a);
        regcache_put(f->c, b);
    }
    fx_assert_stats(f, FX_STAT(registrations, 2), FX_STAT(hits, 4), NULL);
    /* Freeing one spares the other. */
    regcache_notify_free((void *)FX_ALLOC(0), 1000);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(invalidations_notify, 1), NULL);
    regcache_entry_t *b = fx_get(f, FX_ALLOC(0) + 1024, 1000);
    assert_ptr_equal(regcache_entry_handle(b), first_b);
    regcache_put(f->c, b);
    assert_int_equal(fx_stats(f).registrations, 2);
}

static void request_spanning_two_allocations_is_refused(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fake_alloc(&f->fb, FX_ALLOC(0) + MiB, MiB, 0, REGCACHE_MEM_DEVICE);
    fx_create(f);
    fx_get_fails(f, FX_ALLOC(0) + MiB - 10, 20, REGCACHE_ERR_RANGE);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

FX_MAIN(whole_allocation_serves_every_subrange, partial_registration_rounds_the_request,
        packed_allocations_are_never_merged, request_spanning_two_allocations_is_refused)
