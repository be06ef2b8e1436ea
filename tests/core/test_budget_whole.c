/* Whole allocations against the byte budget.  With
 * whole_allocation on, a miss registers the whole allocation only when it
 * is at most whole_allocation_max - by default a quarter of the device's
 * budget - since an allocation registered whole for a small request would
 * crowd out everything else, and one larger than the budget would be
 * evicted at every put.  Raising the cap shows that second cost.  Under the
 * cap, whole allocations fill the budget and evict one another. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define BIG FX_BASE /* an 8 MiB allocation */
#define BIG_SIZE (8 * MiB)
#define BUDGET (4 * MiB)

static void big_allocation_under_budget(struct fx *f)
{
    fake_alloc(&f->fb, BIG, BIG_SIZE, 0, REGCACHE_MEM_DEVICE);
    f->p.max_bytes = BUDGET;
    fx_create(f);
}

static void large_allocation_registers_the_request(void **state)
{
    struct fx *f = *state;
    big_allocation_under_budget(f);
    regcache_entry_t *e = fx_get(f, BIG + 3 * MiB, 4 * KiB);
    assert_int_equal(fx_handle(e)->start, BIG + 3 * MiB);
    assert_int_equal(fx_handle(e)->len, 64 * KiB);
    regcache_put(f->c, e);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(bytes, 64 * KiB), FX_STAT(budget, BUDGET),
                    FX_STAT(evictions, 0), NULL);
    /* Cached: the same request hits. */
    fx_use(f, BIG + 3 * MiB, 4 * KiB);
    assert_int_equal(fx_stats(f).hits, 1);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

/* With the cap raised above the budget, the whole 8 MiB is registered;
 * held it may pass the budget, but as soon as it is put the budget binds
 * and evicts it, so every get registers it again. */
static void whole_allocation_past_the_budget_is_evicted_at_put(struct fx *f)
{
    for (int round = 1; round <= 3; round++) {
        regcache_entry_t *e = fx_get(f, BIG + 3 * MiB, 4 * KiB);
        assert_int_equal(fx_handle(e)->start, BIG);
        assert_int_equal(fx_handle(e)->len, BIG_SIZE);
        fx_assert_stats(f, FX_STAT(bytes, BIG_SIZE), FX_STAT(entries, 1), NULL);
        regcache_put(f->c, e);
        fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(bytes, 0),
                        FX_STAT(evictions, (uint64_t)round),
                        FX_STAT(registrations, (uint64_t)round), FX_STAT(hits, 0),
                        FX_STAT(peak_bytes, BIG_SIZE), NULL);
        assert_int_equal(atomic_load(&f->fb.live), 0);
    }
}

static void raised_cap_by_params(void **state)
{
    struct fx *f = *state;
    f->p.whole_allocation_max = 16 * MiB;
    big_allocation_under_budget(f);
    whole_allocation_past_the_budget_is_evicted_at_put(f);
}

static void raised_cap_by_environment(void **state)
{
    struct fx *f = *state;
    setenv("REGCACHE_WHOLE_ALLOCATION_MAX", "16M", 1);
    big_allocation_under_budget(f);
    unsetenv("REGCACHE_WHOLE_ALLOCATION_MAX");
    whole_allocation_past_the_budget_is_evicted_at_put(f);
}

static void max_bytes_budget(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 4);
    f->p.max_bytes = 2 * MiB;
    f->p.whole_allocation_max = MiB; /* register each allocation whole */
    fx_create(f);
    for (int i = 0; i < 4; i++)
        fx_use(f, FX_ALLOC(i), 10);
    fx_assert_stats(f, FX_STAT(bytes, 2 * MiB), FX_STAT(evictions, 2), FX_STAT(peak_bytes, 2 * MiB),
                    NULL);
    assert_int_equal(atomic_load(&f->fb.live), 2);
}

FX_MAIN(large_allocation_registers_the_request, raised_cap_by_params, raised_cap_by_environment,
        max_bytes_budget)
