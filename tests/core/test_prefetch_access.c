/* Prefetch with the access the range will be used with
 * (regcache_prefetch_access, regcache_prefetch_batch_access), under the
 * union rule of gets: registered for exactly that access, served to gets
 * it covers, widened once for a get or prefetch that needs more, and the
 * narrower entry replaced.  The backend is told the access it registers
 * (reg_access), so each registration's access is the backend's own
 * record, not the cache's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define C FX_ALLOC(2)
#define RR IBV_ACCESS_REMOTE_READ
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static void create(struct fx *f, int allocs)
{
    fx_device_allocs(f, allocs);
    fake_tell_access(&f->fb);
    fx_create(f);
}

static regcache_entry_t *get_access(struct fx *f, uintptr_t addr, int access)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get_access(f->c, 0, (const void *)addr, 4096, access, 0, &e),
                     REGCACHE_OK);
    return e;
}

static void await_idle(struct fx *f)
{
    assert_int_equal(regcache_prefetch_wait(f->c), REGCACHE_OK);
}

/* A send buffer prefetched for remote read is registered for that alone,
 * and a get for it is a hit. */
static void prefetched_with_exactly_its_access(void **state)
{
    struct fx *f = *state;
    create(f, 2);
    assert_int_equal(regcache_prefetch_access(f->c, 0, (const void *)A, 4096, RR), REGCACHE_OK);
    await_idle(f);
    regcache_entry_t *e = get_access(f, A, RR);
    assert_int_equal(regcache_entry_access(e), RR);
    assert_int_equal(fx_handle(e)->access, RR);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(registrations, 1), FX_STAT(misses, 0), FX_STAT(hits, 1), NULL);
    /* The plain prefetch keeps params.access. */
    assert_int_equal(regcache_prefetch(f->c, 0, (const void *)B, 4096), REGCACHE_OK);
    await_idle(f);
    e = fx_get(f, B, 4096);
    assert_int_equal(fx_handle(e)->access, f->p.access);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(registrations, 2), FX_STAT(misses, 0), NULL);
}

/* A prefetch needing more than the cached entry registers the union once;
 * the narrower entry leaves (held: at its put); one needing less costs a
 * lookup. */
static void prefetch_widens_by_the_union_rule(void **state)
{
    struct fx *f = *state;
    create(f, 1);
    regcache_entry_t *narrow = get_access(f, A, RR);
    assert_int_equal(regcache_prefetch_access(f->c, 0, (const void *)A, 4096, RW), REGCACHE_OK);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(registrations, 2), FX_STAT(entries, 1), NULL);
    assert_int_equal(regcache_entry_access(narrow), RR); /* held: unchanged */
    regcache_put(f->c, narrow);
    regcache_entry_t *e = get_access(f, A, RR);
    assert_int_equal(regcache_entry_access(e), RR | RW);
    assert_int_equal(fx_handle(e)->access, RR | RW);
    regcache_put(f->c, e);
    assert_int_equal(regcache_prefetch_access(f->c, 0, (const void *)A, 4096, RW), REGCACHE_OK);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(registrations, 2), FX_STAT(deregistrations, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 1);
}

/* Each item of a batch carries its access; the same range with another
 * access is queued apart (and registered once, for the union). */
static void batch_items_carry_their_access(void **state)
{
    struct fx *f = *state;
    create(f, 3);
    const struct regcache_access_range r[] = {
        { (const void *)A, 4096, 0, RR },
        { (const void *)B, 4096, 0, RW },
        { (const void *)C, 4096, 0, 0 },
    };
    size_t queued = 0;
    assert_int_equal(regcache_prefetch_batch_access(f->c, r, 3, &queued), REGCACHE_OK);
    assert_int_equal(queued, 3);
    await_idle(f);
    static const int want[] = { RR, RW, 0 };
    for (int i = 0; i < 3; i++) {
        regcache_entry_t *e = get_access(f, (uintptr_t)r[i].addr, want[i]);
        assert_int_equal(fx_handle(e)->access, want[i]);
        regcache_put(f->c, e);
    }
    fx_assert_stats(f, FX_STAT(prefetches, 3), FX_STAT(registrations, 3), FX_STAT(misses, 0), NULL);
}

static void bad_input(void **state)
{
    struct fx *f = *state;
    create(f, 1);
    assert_int_equal(regcache_prefetch_access(f->c, 0, (const void *)A, 4096, -1),
                     REGCACHE_ERR_INVALID);
    fx_assert_error_says("negative access", NULL);
    assert_int_equal(regcache_prefetch_access(f->c, 0, (const void *)A, 0, RR),
                     REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_prefetch_access(f->c, 1, (const void *)A, 4096, RR),
                     REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_prefetch_access(NULL, 0, (const void *)A, 4096, RR),
                     REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_prefetch_access(f->c, 0, NULL, 4096, RR), REGCACHE_ERR_INVALID);
    size_t queued = 7;
    assert_int_equal(regcache_prefetch_batch_access(f->c, NULL, 1, &queued), REGCACHE_ERR_INVALID);
    assert_int_equal(queued, 0);
    assert_int_equal(regcache_prefetch_batch_access(f->c, NULL, 0, &queued), REGCACHE_OK);
    /* Stops at the first bad item; those before it are queued. */
    const struct regcache_access_range r[] = {
        { (const void *)A, 4096, 0, RR },
        { (const void *)A, 4096, 0, -2 },
        { (const void *)A, 4096, 0, RW },
    };
    assert_int_equal(regcache_prefetch_batch_access(f->c, r, 3, &queued), REGCACHE_ERR_INVALID);
    assert_int_equal(queued, 1);
    await_idle(f);
    fx_assert_stats(f, FX_STAT(prefetches, 1), NULL);
}

FX_MAIN(prefetched_with_exactly_its_access, prefetch_widens_by_the_union_rule,
        batch_items_carry_their_access, bad_input)
