/* One cache for several NICs (params.rails = 2).  One entry per
 * allocation serves every rail: one memory query, one share of the budget;
 * its registration on a rail is made when a get first asks for that rail,
 * and every rail's registration goes with the entry.  Exhaustion on one
 * rail evicts and retries like any other, and giving up there leaves the
 * entry's other rails serving.  A get on one rail never waits for a
 * registration in flight on another. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "test_sync.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)

static void two_rails(struct fx *f, int validation)
{
    fx_device_allocs(f, 2);
    f->p.rails = 2;
    f->p.validation = validation;
    fx_create(f);
}

/* Hits on rails 0 and 1 of the entry at A, each served by its own rail's
 * registration, with nothing registered again. */
static void both_rails_hit(struct fx *f)
{
    regcache_entry_t *r0 = fx_get_rail(f, 0, A + 30, 10);
    regcache_entry_t *r1 = fx_get_rail(f, 1, A + 30, 10);
    assert_int_equal(fx_handle(r0)->rail, 0);
    assert_int_equal(fx_handle(r1)->rail, 1);
    regcache_put(f->c, r0);
    regcache_put(f->c, r1);
    fx_assert_stats(f, FX_STAT(hits, 2), FX_STAT(registrations, 2), NULL);
}

static void one_entry_a_registration_per_rail(void **state)
{
    struct fx *f = *state;
    two_rails(f, REGCACHE_VALIDATE_NOTIFY);
    regcache_entry_t *r0 = fx_get(f, A + 10, 10);
    assert_int_equal(fx_handle(r0)->rail, 0);
    assert_int_equal(atomic_load(&f->fb.regs), 1); /* rail 1 only when asked */
    regcache_entry_t *r1 = fx_get_rail(f, 1, A + 20, 10);
    assert_int_equal(fx_handle(r1)->rail, 1);
    assert_int_equal(fx_handle(r1)->start, fx_handle(r0)->start);
    assert_int_equal(fx_handle(r1)->len, fx_handle(r0)->len);
    regcache_put(f->c, r0);
    regcache_put(f->c, r1);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(bytes, MiB), FX_STAT(registrations, 2), NULL);
    both_rails_hit(f);
}

/* A second rail's registration of an entry the hit path finds costs no
 * memory query beyond the hit's own: the tag check in TAG_CHECK mode, none
 * in NOTIFY mode.  The entry is known; describing its memory again would be
 * a second query per rail. */
static void second_rail_costs_one_query(int validation, struct fx *f)
{
    two_rails(f, validation);
    fx_use(f, A + 10, 10);
    long before = atomic_load(&f->fb.queries);
    fx_use(f, A + 10, 10); /* a hit: the page index knows the entry here */
    long per_hit = atomic_load(&f->fb.queries) - before;
    assert_int_equal(per_hit, validation == REGCACHE_VALIDATE_TAG_CHECK);
    before = atomic_load(&f->fb.queries);
    regcache_put(f->c, fx_get_rail(f, 1, A + 10, 10));
    long queries = atomic_load(&f->fb.queries) - before;
    if (queries != per_hit)
        fail_msg("registering rail 1 of an entry the hit path found took %ld memory queries, "
                 "a hit %ld",
                 queries, per_hit);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(hits, 1), FX_STAT(entries, 1), NULL);
}

static void second_rail_costs_one_query_hooks(void **state)
{
    second_rail_costs_one_query(REGCACHE_VALIDATE_NOTIFY, *state);
}

static void second_rail_costs_one_query_tag_check(void **state)
{
    second_rail_costs_one_query(REGCACHE_VALIDATE_TAG_CHECK, *state);
}

/* Dereg records of the rails released. */
struct rails_seen {
    int rail[8];
    int n;
};

static void note_rail(void *arg, const struct fake_handle *h)
{
    struct rails_seen *r = arg;
    if (r->n < 8)
        r->rail[r->n++] = h->rail;
}

static void both_rails(struct fx *f, uintptr_t addr)
{
    fx_use(f, addr, 10);
    regcache_put(f->c, fx_get_rail(f, 1, addr, 10));
}

static void assert_both_rails_released(struct rails_seen *r)
{
    assert_int_equal(r->n, 2);
    assert_int_equal(r->rail[0] + r->rail[1], 1); /* 0 and 1, either order */
    r->n = 0;
}

static void every_rail_goes_with_the_entry(void **state)
{
    struct fx *f = *state;
    struct rails_seen seen = { 0 };
    f->fb.during_dereg = note_rail;
    f->fb.during_dereg_arg = &seen;
    f->p.max_entries = 1;
    two_rails(f, REGCACHE_VALIDATE_NOTIFY);
    both_rails(f, A);
    regcache_notify_free((const void *)A, MiB);
    assert_both_rails_released(&seen);
    assert_int_equal(fx_stats(f).entries, 0);
    /* Eviction: B's miss makes room under the one-entry limit. */
    both_rails(f, A);
    fx_use(f, B, 10);
    assert_int_equal(fx_stats(f).evictions, 1);
    assert_both_rails_released(&seen);
    /* And flush. */
    regcache_put(f->c, fx_get_rail(f, 1, B, 10));
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    assert_both_rails_released(&seen);
    f->fb.during_dereg = NULL;
}

static void exhaustion_on_one_rail_evicts_and_retries(void **state)
{
    struct fx *f = *state;
    two_rails(f, REGCACHE_VALIDATE_NOTIFY);
    fx_use(f, A, 10); /* unused, least recently used */
    regcache_entry_t *b0 = fx_get(f, B, 10);
    f->fb.fail_rail = 1;
    f->fb.fail_errno = ENOSPC;
    f->fb.fail_count = 1;
    regcache_entry_t *b1 = fx_get_rail(f, 1, B, 10);
    assert_int_equal(fx_handle(b1)->rail, 1);
    fx_assert_stats(f, FX_STAT(reg_failures, 1), FX_STAT(evictions, 1), FX_STAT(entries, 1), NULL);
    regcache_put(f->c, b1);
    regcache_put(f->c, b0);
}

static void rail_out_of_space_leaves_the_others_serving(void **state)
{
    struct fx *f = *state;
    two_rails(f, REGCACHE_VALIDATE_NOTIFY);
    regcache_entry_t *a0 = fx_get(f, A, 10);
    struct fake_handle *h0 = fx_handle(a0);
    f->fb.fail_rail = 1;
    f->fb.fail_errno = ENOSPC;
    f->fb.fail_count = 1000;
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get_rail(f->c, 1, (const void *)A, 10, &e), REGCACHE_ERR_NO_SPACE);
    assert_null(e);
    fx_assert_error_says("on rail 1", "no unused entry of the device is left to evict", NULL);
    /* Rail 0 of the same entry keeps serving, from the same registration. */
    regcache_put(f->c, a0);
    regcache_entry_t *again = fx_get(f, A, 10);
    assert_ptr_equal(fx_handle(again), h0);
    regcache_put(f->c, again);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 1), FX_STAT(evictions, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    /* Once the NIC has room again, rail 1 registers. */
    f->fb.fail_count = 0;
    regcache_put(f->c, fx_get_rail(f, 1, A, 10));
    assert_int_equal(fx_stats(f).registrations, 2);
}

static void rail_out_of_range_is_invalid(void **state)
{
    struct fx *f = *state;
    two_rails(f, REGCACHE_VALIDATE_NOTIFY);
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get_rail(f->c, 2, (const void *)A, 10, &e), REGCACHE_ERR_INVALID);
    assert_null(e);
    fx_assert_error_says("rail 2, but the cache has 2", NULL);
    assert_int_equal(regcache_get_rail(f->c, REGCACHE_MAX_RAILS, (const void *)A, 10, &e),
                     REGCACHE_ERR_INVALID);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
    assert_int_equal(atomic_load(&f->fb.queries), 0);
}

/* Holds the first registration of the cache in the backend until opened;
 * the others pass. */
struct first_reg_blocker {
    struct gate gate;
    atomic_int calls;
};

static void block_first_reg(void *arg)
{
    struct first_reg_blocker *b = arg;
    if (atomic_fetch_add(&b->calls, 1) == 0)
        gate_pass(&b->gate);
}

struct rail_get {
    struct fx *f;
    unsigned rail;
    uintptr_t addr;
    int rc;
    regcache_entry_t *e;
};

static void run_rail_get(void *arg)
{
    struct rail_get *g = arg;
    g->rc = regcache_get_rail(g->f->c, g->rail, (const void *)g->addr, 10, &g->e);
}

/* A thread's get on `rail` of A whose registration is held in the backend;
 * the test's own get on `other` must complete meanwhile (alarm() turns a
 * wait for the held one into a failure).  Returns the other get's result;
 * the held one's is left in *held, its gate open and its thread joined. */
static int get_beside_held_registration(struct fx *f, unsigned rail, unsigned other,
                                        uintptr_t other_addr, struct rail_get *held,
                                        regcache_entry_t **e)
{
    struct first_reg_blocker b = { 0 };
    struct dthread t;
    gate_init(&b.gate);
    f->fb.during_reg = block_first_reg;
    f->fb.during_reg_arg = &b;
    *held = (struct rail_get){ .f = f, .rail = rail, .addr = A };
    dthread_start(&t, run_rail_get, held);
    assert_true(gate_await(&b.gate, 1, HANG_SECONDS));

    alarm(60);
    int rc = regcache_get_rail(f->c, other, (const void *)other_addr, 10, e);
    alarm(0);

    gate_open(&b.gate);
    assert_true(dthread_join(&t, HANG_SECONDS));
    f->fb.during_reg = NULL;
    return rc;
}

/* The entry's first registration, on rail 0, is in flight: a get on rail 1
 * registers rail 1 beside it, and both end up in the one entry. */
static void other_rail_of_pending_entry_does_not_wait(void **state)
{
    struct fx *f = *state;
    struct rail_get held;
    regcache_entry_t *e1;
    two_rails(f, REGCACHE_VALIDATE_NOTIFY);
    assert_int_equal(get_beside_held_registration(f, 0, 1, A + 20, &held, &e1), REGCACHE_OK);
    assert_int_equal(held.rc, REGCACHE_OK);
    assert_int_equal(fx_handle(e1)->rail, 1);
    assert_int_equal(fx_handle(held.e)->rail, 0);
    assert_int_equal(fx_handle(e1)->start, fx_handle(held.e)->start);
    regcache_put(f->c, e1);
    regcache_put(f->c, held.e);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 2), FX_STAT(mrs, 2),
                    FX_STAT(one_shots, 0), NULL);
    both_rails_hit(f);
}

/* The same while rail 0 is being added to an entry ready on rail 2: a get
 * on rail 1, by the hit path or by a miss elsewhere in the allocation,
 * registers rail 1 at once. */
static void other_rail_of_ready_entry_does_not_wait(uintptr_t other_addr, struct fx *f)
{
    struct rail_get held;
    regcache_entry_t *e1;
    fx_device_allocs(f, 1);
    f->p.rails = 3;
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    fx_create(f);
    regcache_put(f->c, fx_get_rail(f, 2, A, 10));
    assert_int_equal(get_beside_held_registration(f, 0, 1, other_addr, &held, &e1), REGCACHE_OK);
    assert_int_equal(held.rc, REGCACHE_OK);
    assert_int_equal(fx_handle(e1)->rail, 1);
    assert_int_equal(fx_handle(held.e)->rail, 0);
    regcache_put(f->c, e1);
    regcache_put(f->c, held.e);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(registrations, 3), FX_STAT(mrs, 3), NULL);
}

static void other_rail_by_hit_does_not_wait(void **state)
{
    other_rail_of_ready_entry_does_not_wait(A, *state);
}

static void other_rail_by_miss_does_not_wait(void **state)
{
    other_rail_of_ready_entry_does_not_wait(A + 512 * KiB, *state);
}

/* The entry's first registration fails while another rail's registration
 * of it went through: that get is served, the entry never enters the cache,
 * and the registration goes at its put. */
static void first_registration_fails_beside_another_rail(void **state)
{
    struct fx *f = *state;
    struct rail_get held;
    regcache_entry_t *e1;
    two_rails(f, REGCACHE_VALIDATE_NOTIFY);
    f->fb.fail_rail = 0;
    f->fb.fail_errno = EINVAL;
    f->fb.fail_count = 1;
    assert_int_equal(get_beside_held_registration(f, 0, 1, A + 20, &held, &e1), REGCACHE_OK);
    assert_int_equal(held.rc, REGCACHE_ERR_BACKEND);
    assert_null(held.e);
    assert_int_equal(fx_handle(e1)->rail, 1);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(mrs, 1), NULL);
    regcache_put(f->c, e1);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(mrs, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    /* The memory registers again, on either rail. */
    regcache_put(f->c, fx_get_rail(f, 1, A, 10));
    fx_assert_stats(f, FX_STAT(entries, 1), NULL);
}

FX_MAIN(one_entry_a_registration_per_rail, second_rail_costs_one_query_hooks,
        second_rail_costs_one_query_tag_check, every_rail_goes_with_the_entry,
        exhaustion_on_one_rail_evicts_and_retries, rail_out_of_space_leaves_the_others_serving,
        rail_out_of_range_is_invalid, other_rail_of_pending_entry_does_not_wait,
        other_rail_by_hit_does_not_wait, other_rail_by_miss_does_not_wait,
        first_registration_fails_beside_another_rail)
