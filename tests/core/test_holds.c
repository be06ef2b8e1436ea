/* An entry's count of holders saturates instead of
 * wrapping.  A get holds an entry through one of the thread's
 * RC_HOLD_SLOTS slots; beyond them the hold is one unit of the entry's
 * count (entry.h), which a get refuses with
 * REGCACHE_ERR_HOLD_LIMIT once it is full.  Reaching 2^31-1 real holds would
 * take billions of gets, so the test sets the count (flag bits kept) just
 * short of the limit through the handle - a counted handle is the entry's
 * address with the rail in bits 1-5 - and puts it back afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "entry.h"
#include "threads.h"

#define X FX_ALLOC(0)
#define SHORT 3 /* counted holds left before the limit */

static struct regcache_entry *entry_of(regcache_entry_t *counted)
{
    uintptr_t v = (uintptr_t)counted;
    assert_int_equal(v & 1, 0); /* a counted hold, not a slot */
    return (struct regcache_entry *)(v & ~RC_HOLD_RAIL_MASK);
}

static unsigned count_of(struct regcache_entry *e)
{
    return atomic_load(&e->refs) & RC_COUNT_MASK;
}

/* Replace the count, keeping the flag bits. */
static void set_count(struct regcache_entry *e, unsigned count)
{
    unsigned refs = atomic_load(&e->refs);
    atomic_store(&e->refs, (refs & ~RC_COUNT_MASK) | count);
}

struct holds {
    regcache_entry_t *slot[RC_HOLD_SLOTS];
    regcache_entry_t *counted[SHORT];
};

/* From one counted hold of X, fill the thread's slots with hits, then
 * take counted holds up to the limit and check the one after is refused
 * cleanly. */
static void hold_up_to_the_limit(struct fx *f, struct regcache_entry *e, struct holds *h)
{
    void *backend_handle = e->handles[0];
    set_count(e, RC_COUNT_MASK - SHORT);
    for (int i = 0; i < RC_HOLD_SLOTS; i++) {
        h->slot[i] = fx_get(f, X + 10, 10);
        assert_int_equal((uintptr_t)h->slot[i] & 1, 1);
    }
    assert_int_equal(count_of(e), RC_COUNT_MASK - SHORT); /* slots count nothing */
    for (int i = 0; i < SHORT; i++) {
        h->counted[i] = fx_get(f, X + 10, 10);
        assert_ptr_equal(entry_of(h->counted[i]), e);
    }
    assert_int_equal(count_of(e), RC_COUNT_MASK);
    long regs = atomic_load(&f->fb.regs);
    fx_get_fails(f, X + 10, 10, REGCACHE_ERR_HOLD_LIMIT);
    fx_assert_error_says("already has 2147483647 holders", NULL);
    /* Refused, not corrupted: the count, the registration, the cache. */
    assert_int_equal(count_of(e), RC_COUNT_MASK);
    assert_false(rc_entry_is_detached(e));
    assert_ptr_equal(e->handles[0], backend_handle);
    assert_int_equal(atomic_load(&f->fb.regs), regs);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(one_shots, 0), NULL);
    /* A put makes room for one more hold, which is served as before. */
    regcache_put(f->c, h->counted[0]);
    h->counted[0] = fx_get(f, X + 20, 10);
    assert_ptr_equal(regcache_entry_handle(h->counted[0]), backend_handle);
    fx_get_fails(f, X + 10, 10, REGCACHE_ERR_HOLD_LIMIT);
}

static void release(struct fx *f, struct holds *h)
{
    for (int i = 0; i < RC_HOLD_SLOTS; i++)
        regcache_put(f->c, h->slot[i]);
    for (int i = 0; i < SHORT; i++)
        regcache_put(f->c, h->counted[i]);
}

/* A cache holding X's entry once, by a counted hold. */
static struct regcache_entry *held_once(struct fx *f, regcache_entry_t **first)
{
    fx_device_alloc(f, 0);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    fx_create(f);
    *first = get_counted_hold(f->c, X, 10);
    assert_non_null(*first);
    struct regcache_entry *e = entry_of(*first);
    assert_int_equal(count_of(e), 1);
    return e;
}

static void holds_saturate_at_the_limit(void **state)
{
    struct fx *f = *state;
    regcache_entry_t *first;
    struct regcache_entry *e = held_once(f, &first);
    struct holds h;
    hold_up_to_the_limit(f, e, &h);
    release(f, &h);
    assert_int_equal(count_of(e), RC_COUNT_MASK - SHORT);
    set_count(e, 1); /* back to the one real counted hold */
    regcache_put(f->c, first);
    assert_int_equal(count_of(e), 0);
    /* Still cached and serving; deregistered once, when it goes. */
    regcache_put(f->c, fx_get(f, X, 10));
    assert_int_equal(atomic_load(&f->fb.deregs), 0);
    assert_int_equal(regcache_invalidate(f->c, (const void *)X, 1), REGCACHE_OK);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* Invalidated while its count is full: it leaves the cache at once and is
 * deregistered exactly once, by the last put. */
static void entry_at_the_limit_invalidated_dies_once(void **state)
{
    struct fx *f = *state;
    regcache_entry_t *first;
    struct regcache_entry *e = held_once(f, &first);
    struct holds h;
    hold_up_to_the_limit(f, e, &h);
    regcache_notify_free((const void *)X, MiB);
    assert_true(rc_entry_is_detached(e));
    assert_int_equal(fx_stats(f).entries, 0);
    release(f, &h);
    assert_int_equal(atomic_load(&f->fb.deregs), 0);
    set_count(e, 1);
    regcache_put(f->c, first);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

/* A get on a rail the entry lacks takes a counted hold for the rail's
 * registration: refused the same way, and nothing is registered. */
static void new_rail_at_the_limit_is_refused(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    f->p.rails = 2;
    fx_create(f);
    regcache_entry_t *first = get_counted_hold(f->c, X, 10);
    assert_non_null(first);
    struct regcache_entry *e = entry_of(first);
    set_count(e, RC_COUNT_MASK);
    regcache_entry_t *got = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get_rail(f->c, 1, (const void *)X, 10, &got),
                     REGCACHE_ERR_HOLD_LIMIT);
    assert_null(got);
    fx_assert_error_says("holders", NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    assert_int_equal(atomic_load(&e->rails_ready), 1);
    set_count(e, 1);
    regcache_put(f->c, first);
    regcache_put(f->c, fx_get_rail(f, 1, X, 10));
    assert_int_equal(atomic_load(&f->fb.regs), 2);
}

FX_MAIN(holds_saturate_at_the_limit, entry_at_the_limit_invalidated_dies_once,
        new_rail_at_the_limit_is_refused)
