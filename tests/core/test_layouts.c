/* VMM spans with the fake backend.  Two adjacent mappings
 * (REGCACHE_MEM_MAPPING) of different buffer ids are registered together
 * when a request runs across both: one registration, which then serves
 * requests anywhere inside either mapping, leaves with the free of either
 * one, and is caught when one of them is replaced - by the tag check on a
 * hit (TAG_CHECK) or by the next miss that meets it (NOTIFY).  A hole after a
 * mapping, or an allocation that is no mapping, ends the span with
 * REGCACHE_ERR_RANGE. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache_fixture.h"

/* Mapping M1 at BASE, M2 right after it (1 MiB each, 64 KiB aligned). */
#define BASE FX_ALLOC(4)
#define M1 BASE
#define M2 (BASE + MiB)
/* A request across the boundary. */
#define ACROSS (M2 - 100)

static uint64_t map(struct fx *f, uintptr_t base)
{
    return fake_alloc_as(&f->fb, &(struct fake_alloc){ .base = base,
                                                       .size = MiB,
                                                       .device = 0,
                                                       .type = REGCACHE_MEM_DEVICE,
                                                       .flags = REGCACHE_MEM_MAPPING });
}

static void two_mappings(struct fx *f, int validation)
{
    map(f, M1);
    map(f, M2);
    f->p.validation = validation;
    fx_create(f);
}

static void one_registration_serves_both_mappings(void **state)
{
    struct fx *f = *state;
    two_mappings(f, REGCACHE_VALIDATE_NOTIFY);
    regcache_entry_t *e = fx_get(f, ACROSS, 200);
    struct fake_handle *h = fx_handle(e);
    assert_int_equal(h->start, M1);
    assert_int_equal(h->len, 2 * MiB);
    regcache_put(f->c, e);
    /* Anywhere inside either mapping, and across them again. */
    const uintptr_t inside[] = { M1, M1 + 10,      M1 + MiB / 2,  M2 - 10,
                                 M2, M2 + MiB / 2, M2 + MiB - 10, ACROSS };
    for (size_t i = 0; i < sizeof(inside) / sizeof(inside[0]); i++) {
        regcache_entry_t *again = fx_get(f, inside[i], 10);
        if (fx_handle(again) != h)
            fail_msg("a get at M1 + %#jx was not served by the registration of both mappings",
                     (uintmax_t)(inside[i] - M1));
        regcache_put(f->c, again);
    }
    fx_assert_stats(f, FX_STAT(registrations, 1), FX_STAT(misses, 1), FX_STAT(hits, 8),
                    FX_STAT(entries, 1), FX_STAT(bytes, 2 * MiB), NULL);
}

static void free_of_either_mapping_drops_the_entry(void **state)
{
    struct fx *f = *state;
    two_mappings(f, REGCACHE_VALIDATE_NOTIFY);
    const uintptr_t freed[] = { M1, M2 };
    for (int i = 0; i < 2; i++) {
        fx_use(f, ACROSS, 200);
        assert_int_equal(fx_stats(f).entries, 1);
        regcache_notify_free((const void *)freed[i], MiB);
        fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(invalidations_notify, (uint64_t)i + 1),
                        NULL);
        assert_int_equal(atomic_load(&f->fb.live), 0);
    }
}

/* With `new_epoch`, something else is registered before the stale get,
 * which is then the entry's first hit of an LRU epoch: that hit checks the
 * tags before it hands anything out, the others after (hit_path.c). */
static void replaced_mapping_is_caught_by_the_tag_check_in(struct fx *f, bool new_epoch)
{
    two_mappings(f, REGCACHE_VALIDATE_TAG_CHECK);
    fx_use(f, ACROSS, 200);
    fx_use(f, M1 + 10, 10); /* a hit on M1's page */
    assert_int_equal(fx_stats(f).hits, 1);
    if (new_epoch) {
        fx_device_alloc(f, 0);
        fx_use(f, FX_ALLOC(0), 10);
    }
    /* M2 is unmapped and another handle mapped in its place. */
    uint64_t id = fake_realloc(&f->fb, M2);
    regcache_entry_t *e = fx_get(f, M1 + 10, 10);
    fx_assert_stats(f, FX_STAT(invalidations_tag, 1), FX_STAT(hits, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    regcache_put(f->c, e);
    /* Across both again: registered anew, over the new mapping. */
    e = fx_get(f, ACROSS, 200);
    assert_int_equal(fx_handle(e)->start, M1);
    assert_int_equal(fx_handle(e)->len, 2 * MiB);
    assert_int_equal(fake_id_at(&f->fb, M2), id);
    regcache_put(f->c, e);
}

static void replaced_mapping_is_caught_by_the_tag_check(void **state)
{
    replaced_mapping_is_caught_by_the_tag_check_in(*state, false);
}

static void replaced_mapping_is_caught_by_the_tag_check_in_a_new_epoch(void **state)
{
    replaced_mapping_is_caught_by_the_tag_check_in(*state, true);
}

static void replaced_mapping_is_stale_to_a_miss(void **state)
{
    struct fx *f = *state;
    two_mappings(f, REGCACHE_VALIDATE_NOTIFY);
    fx_use(f, ACROSS, 200);
    uint64_t id = fake_realloc(&f->fb, M2);
    /* A request inside the new M2 that no hit has served yet: the miss
     * describes the memory and meets the old registration. */
    regcache_entry_t *e = fx_get(f, M2 + MiB / 2, 10);
    assert_int_equal(fx_handle(e)->id, id);
    fx_assert_stats(f, FX_STAT(invalidations_tag, 1), FX_STAT(entries, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    regcache_put(f->c, e);
}

static void hole_between_mappings_is_a_range_error(void **state)
{
    struct fx *f = *state;
    map(f, M1);
    map(f, M2 + MiB); /* nothing mapped at [M2, M2 + 1 MiB) */
    fx_create(f);
    fx_get_fails(f, ACROSS, 200, REGCACHE_ERR_RANGE);
    char hole[64];
    snprintf(hole, sizeof(hole), "nothing is mapped at %#jx", (uintmax_t)M2);
    fx_assert_error_says(hole, NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

static void span_onto_an_allocation_that_is_no_mapping(void **state)
{
    struct fx *f = *state;
    map(f, M1);
    fake_alloc(&f->fb, M2, MiB, 0, REGCACHE_MEM_DEVICE);
    fx_create(f);
    fx_get_fails(f, ACROSS, 200, REGCACHE_ERR_RANGE);
    fx_assert_error_says("not a VMM mapping", NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
    /* Each alone registers. */
    fx_use(f, M1, 10);
    fx_use(f, M2, 10);
    assert_int_equal(fx_stats(f).entries, 2);
}

FX_MAIN(one_registration_serves_both_mappings, free_of_either_mapping_drops_the_entry,
        replaced_mapping_is_caught_by_the_tag_check,
        replaced_mapping_is_caught_by_the_tag_check_in_a_new_epoch,
        replaced_mapping_is_stale_to_a_miss, hole_between_mappings_is_a_range_error,
        span_onto_an_allocation_that_is_no_mapping)
