/* A get that only looks (REGCACHE_GET_LOOKUP): a held entry when a cached
 * registration covers the range with the access on the rail, else
 * REGCACHE_ERR_NOT_CACHED - with the backend's count of registrations, the
 * queue and the statistics unchanged, and without waiting for a
 * registration in flight.  Served by the hit path, and under the lock
 * where that path cannot serve: a range not yet indexed under its page,
 * every hold slot of the thread in use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"
#include "test_sync.h"
#include "threads.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)

static int lookup_rail(struct fx *f, unsigned rail, uintptr_t addr, size_t len, int access,
                       regcache_entry_t **e)
{
    *e = (regcache_entry_t *)(uintptr_t)1;
    return regcache_get_access(f->c, rail, (const void *)addr, len, access, REGCACHE_GET_LOOKUP, e);
}

static int lookup(struct fx *f, uintptr_t addr, size_t len, regcache_entry_t **e)
{
    return lookup_rail(f, 0, addr, len, f->p.access, e);
}

/* Not cached: NOT_CACHED with *entry NULL, a message, and nothing done. */
static void assert_not_cached(struct fx *f, unsigned rail, uintptr_t addr, size_t len, int access)
{
    long regs = atomic_load(&f->fb.regs);
    struct regcache_stats before = fx_stats(f);
    regcache_entry_t *e;
    assert_int_equal(lookup_rail(f, rail, addr, len, access, &e), REGCACHE_ERR_NOT_CACHED);
    assert_null(e);
    fx_assert_error_says("no cached registration covers", NULL);
    assert_int_equal(atomic_load(&f->fb.regs), regs);
    fx_assert_stats(f, FX_STAT(misses, before.misses), FX_STAT(prefetches, before.prefetches),
                    FX_STAT(registrations, before.registrations), NULL);
}

/* Nothing cached: no registration, no queued job, no worker. */
static void lookup_of_nothing_registers_nothing(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    for (int i = 0; i < 3; i++)
        assert_not_cached(f, 0, A, 4096, f->p.access);
    assert_int_equal(regcache_prefetch_wait(f->c), REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(hits, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
    assert_string_equal(regcache_err_name(REGCACHE_ERR_NOT_CACHED), "REGCACHE_ERR_NOT_CACHED");
    assert_string_not_equal(regcache_strerror(REGCACHE_ERR_NOT_CACHED), regcache_strerror(12345));
}

/* Cached: the same registration a get holds, as a hit, put as any get. */
static void lookup_of_a_cached_range_is_a_hit(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_entry_t *g = fx_get(f, A, 4096);
    regcache_entry_t *e;
    assert_int_equal(lookup(f, A, 4096, &e), REGCACHE_OK);
    assert_ptr_equal(regcache_entry_handle(e), regcache_entry_handle(g));
    regcache_put(f->c, e);
    regcache_put(f->c, g);
    /* Unused and cached: still found. */
    assert_int_equal(lookup(f, A + 100, 100, &e), REGCACHE_OK);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(registrations, 1), FX_STAT(misses, 1), FX_STAT(hits, 2), NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

/* A whole-allocation entry is indexed under the pages its gets asked
 * for: a lookup elsewhere in it is served under the lock, and the next
 * one of that page by the hit path. */
static void lookup_of_a_page_not_yet_indexed(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    fx_use(f, A, 4096);
    regcache_entry_t *e;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(lookup(f, A + 512 * KiB, 4096, &e), REGCACHE_OK);
        assert_int_equal(fx_handle(e)->start, A);
        regcache_put(f->c, e);
    }
    fx_assert_stats(f, FX_STAT(registrations, 1), FX_STAT(hits, 2), NULL);
}

/* Every hold slot in use: the lookup's hold is a counted one. */
static void lookup_with_every_slot_in_use(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_entry_t *slots[RC_HOLD_SLOTS];
    for (int i = 0; i < RC_HOLD_SLOTS; i++)
        slots[i] = fx_get(f, A, 4096);
    regcache_entry_t *e;
    assert_int_equal(lookup(f, A, 4096, &e), REGCACHE_OK);
    assert_int_equal((uintptr_t)e & 1, 0); /* counted */
    assert_ptr_equal(regcache_entry_handle(e), regcache_entry_handle(slots[0]));
    regcache_put(f->c, e);
    for (int i = 0; i < RC_HOLD_SLOTS; i++)
        regcache_put(f->c, slots[i]);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

/* An entry narrower than the access asked, or without the rail: not
 * cached for that lookup, and nothing is upgraded or added. */
static void lookup_needs_the_access_and_the_rail(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.rails = 2;
    fx_create(f);
    regcache_entry_t *ro;
    assert_int_equal(
        regcache_get_access(f->c, 0, (const void *)A, 4096, IBV_ACCESS_REMOTE_READ, 0, &ro),
        REGCACHE_OK);
    regcache_put(f->c, ro);
    assert_not_cached(f, 0, A, 4096, IBV_ACCESS_REMOTE_WRITE);
    assert_not_cached(f, 0, A, 4096, f->p.access);
    assert_not_cached(f, 1, A, 4096, IBV_ACCESS_REMOTE_READ);
    regcache_entry_t *e;
    assert_int_equal(lookup_rail(f, 0, A, 4096, IBV_ACCESS_REMOTE_READ, &e), REGCACHE_OK);
    assert_int_equal(regcache_entry_access(e), IBV_ACCESS_REMOTE_READ);
    regcache_put(f->c, e);
    assert_int_equal(lookup_rail(f, 0, A, 4096, 0, &e), REGCACHE_OK);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(registrations, 1), FX_STAT(entries, 1), NULL);
}

static struct gate reg_gate;

static void hold_reg(void *arg)
{
    (void)arg;
    gate_pass(&reg_gate);
}

struct get_job {
    struct fx *f;
    int rc;
};

static void get_and_put(void *arg)
{
    struct get_job *j = arg;
    regcache_entry_t *e;
    j->rc = regcache_get(j->f->c, (const void *)A, 4096, &e);
    if (j->rc == REGCACHE_OK)
        regcache_put(j->f->c, e);
}

/* A registration of the range in flight: the lookup does not wait for
 * it (the registration stays held at the gate while it answers). */
static void lookup_never_waits_for_a_registration(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    gate_init(&reg_gate);
    f->fb.during_reg = hold_reg;
    fx_create(f);
    struct get_job j = { f, -1 };
    struct dthread t;
    dthread_start(&t, get_and_put, &j);
    assert_true(gate_await(&reg_gate, 1, HANG_SECONDS));
    regcache_entry_t *e;
    assert_int_equal(lookup(f, A, 4096, &e), REGCACHE_ERR_NOT_CACHED);
    assert_null(e);
    gate_open(&reg_gate);
    assert_true(dthread_join(&t, HANG_SECONDS));
    assert_int_equal(j.rc, REGCACHE_OK);
    assert_int_equal(lookup(f, A, 4096, &e), REGCACHE_OK);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

/* TAG_CHECK: an entry whose memory was replaced is no answer; it leaves,
 * as a hit would find, and nothing is registered. */
static void lookup_in_tag_check_sees_replaced_memory(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    fx_use(f, A, 4096);
    fake_realloc(&f->fb, A);
    assert_not_cached(f, 0, A, 4096, f->p.access);
    /* Off the hit path too (a page the entry was not indexed under). */
    fx_use(f, A, 4096);
    fake_realloc(&f->fb, A);
    assert_not_cached(f, 0, A + 512 * KiB, 4096, f->p.access);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(invalidations_tag, 2), FX_STAT(hits, 0), NULL);
}

/* A range freed (invalidated) is not cached any more. */
static void lookup_after_invalidation(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fx_create(f);
    fx_use(f, A, 4096);
    fx_use(f, B, 4096);
    regcache_notify_free((const void *)A, MiB);
    assert_not_cached(f, 0, A, 4096, f->p.access);
    regcache_entry_t *e;
    assert_int_equal(lookup(f, B, 4096, &e), REGCACHE_OK);
    regcache_put(f->c, e);
}

static void lookup_bad_input(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    f->p.rails = 2;
    fx_create(f);
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get_access(f->c, 0, (const void *)A, 4096, f->p.access,
                                         REGCACHE_GET_LOOKUP | REGCACHE_GET_NONBLOCK, &e),
                     REGCACHE_ERR_INVALID);
    assert_null(e);
    fx_assert_error_says("flags that exclude each other", NULL);
    assert_int_equal(lookup_rail(f, 0, A, 0, f->p.access, &e), REGCACHE_ERR_INVALID);
    assert_null(e);
    assert_int_equal(lookup_rail(f, 2, A, 4096, f->p.access, &e), REGCACHE_ERR_INVALID);
    assert_int_equal(lookup_rail(f, 0, 0, 4096, f->p.access, &e), REGCACHE_ERR_INVALID);
    assert_int_equal(lookup_rail(f, 0, A, 4096, -1, &e), REGCACHE_ERR_INVALID);
    assert_int_equal(
        regcache_get_access(NULL, 0, (const void *)A, 4096, 0, REGCACHE_GET_LOOKUP, &e),
        REGCACHE_ERR_INVALID);
    assert_int_equal(
        regcache_get_access(f->c, 0, (const void *)A, 4096, 0, REGCACHE_GET_LOOKUP, NULL),
        REGCACHE_ERR_INVALID);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

/* The flag is the lookup's alone: a get after it registers as ever. */
static void lookup_leaves_later_gets_alone(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    regcache_entry_t *e;
    assert_int_equal(lookup(f, A, 4096, &e), REGCACHE_ERR_NOT_CACHED);
    fx_use(f, A, 4096);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

FX_MAIN(lookup_of_nothing_registers_nothing, lookup_of_a_cached_range_is_a_hit,
        lookup_of_a_page_not_yet_indexed, lookup_with_every_slot_in_use,
        lookup_needs_the_access_and_the_rail, lookup_never_waits_for_a_registration,
        lookup_in_tag_check_sees_replaced_memory, lookup_after_invalidation, lookup_bad_input,
        lookup_leaves_later_gets_alone)
