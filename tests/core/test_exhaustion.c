/* What a registration that fails for want of resources is
 * classified as, and what it costs the cache.  EFAULT is exhaustion only
 * while the memory is still what the cache was asked for: for memory freed
 * (or replaced) between the query and the reg the get fails with NOT_GPU and
 * evicts nothing.  Exhaustion evicts the device's least recently used
 * unused entry and retries, 16 rounds at most: the 17th attempt follows the
 * 16th eviction.  Giving up says what is left of the device, and whether
 * what is left is held.  Any other errno is a backend failure that evicts
 * nothing, and each device's exhaustion evicts that device's entries only. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache_fixture.h"

/* The allocation every failing get asks for; the others are 0 .. n-1. */
#define TARGET 40
#define ROUNDS 16

/* n unused entries of 1 MiB each, the target's size: every round of
 * eviction evicts exactly one. */
static void cache_unused(struct fx *f, int n)
{
    fx_device_alloc(f, TARGET);
    fx_device_allocs(f, n);
    fx_create(f);
    for (int i = 0; i < n; i++)
        fx_use(f, FX_ALLOC(i), 10);
}

static void fail_next_regs(struct fx *f, int err, int count)
{
    f->fb.fail_errno = err;
    f->fb.fail_count = count;
}

/* ---- EFAULT on memory that went away ------------------------------------- */

struct gone {
    struct fx *f;
    bool reallocate;
};

/* Inside reg: the memory is freed (and maybe replaced) after the miss
 * described it, and the NIC reports EFAULT. */
static void memory_goes_during_reg(void *arg)
{
    struct gone *g = arg;
    g->f->fb.during_reg = NULL;
    if (g->reallocate)
        fake_realloc(&g->f->fb, FX_ALLOC(TARGET));
    else
        fake_free(&g->f->fb, FX_ALLOC(TARGET));
    fail_next_regs(g->f, EFAULT, 1);
}

static void efault_on_memory_that_went_away(struct fx *f, bool reallocate)
{
    struct gone g = { .f = f, .reallocate = reallocate };
    cache_unused(f, 17);
    f->fb.during_reg = memory_goes_during_reg;
    f->fb.during_reg_arg = &g;
    fx_get_fails(f, FX_ALLOC(TARGET), 10, REGCACHE_ERR_NOT_GPU);
    fx_assert_error_says("EFAULT", "no longer what the cache was asked for", "nothing was evicted",
                         NULL);
    fx_assert_stats(f, FX_STAT(evictions, 0), FX_STAT(entries, 17), FX_STAT(reg_failures, 1), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 17);
    assert_int_equal(atomic_load(&f->fb.deregs), 0);
    /* The 17 still serve, without registering again. */
    for (int i = 0; i < 17; i++)
        fx_use(f, FX_ALLOC(i), 10);
    assert_int_equal(atomic_load(&f->fb.regs), 17);
}

static void efault_after_free_is_not_gpu(void **state)
{
    efault_on_memory_that_went_away(*state, false);
}

static void efault_after_reallocation_is_not_gpu(void **state)
{
    efault_on_memory_that_went_away(*state, true);
}

/* ---- the bound on rounds ---------------------------------------------- */

static void seventeenth_attempt_follows_the_sixteenth_eviction(void **state)
{
    struct fx *f = *state;
    cache_unused(f, 22);
    fail_next_regs(f, ENOSPC, ROUNDS);
    regcache_entry_t *e = fx_get(f, FX_ALLOC(TARGET), 10);
    fx_assert_stats(f, FX_STAT(reg_failures, ROUNDS), FX_STAT(evictions, ROUNDS),
                    FX_STAT(entries, 22 - ROUNDS + 1), NULL);
    assert_int_equal(fx_handle(e)->start, FX_ALLOC(TARGET));
    regcache_put(f->c, e);
    /* The least recently used went: 0..15 register again, 16..21 hit. */
    long regs = atomic_load(&f->fb.regs);
    for (int i = 22 - 1; i >= ROUNDS; i--)
        fx_use(f, FX_ALLOC(i), 10);
    assert_int_equal(atomic_load(&f->fb.regs), regs);
}

static void exhausted_forever_counts_what_is_left(void **state)
{
    struct fx *f = *state;
    cache_unused(f, 22);
    fail_next_regs(f, ENOSPC, 1000);
    fx_get_fails(f, FX_ALLOC(TARGET), 10, REGCACHE_ERR_NO_SPACE);
    fx_assert_error_says("after 16 rounds of eviction", "(16 entries evicted)",
                         "6 entries of the device remain, 0 of them held", NULL);
    assert_null(strstr(regcache_last_error(), "no unused entry"));
    fx_assert_stats(f, FX_STAT(reg_failures, ROUNDS + 1), FX_STAT(evictions, ROUNDS),
                    FX_STAT(entries, 6), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 6);
    f->fb.fail_count = 0;
}

/* Everything of the device held: nothing to evict, and the message says
 * why; with some unused ones, those go first and the message counts them. */
static void exhausted_with_held_entries(struct fx *f, int unused)
{
    const int held = 5;
    regcache_entry_t *e[5];
    cache_unused(f, unused);
    for (int i = 0; i < held; i++) {
        fx_device_alloc(f, unused + i);
        e[i] = fx_get(f, FX_ALLOC(unused + i), 10);
    }
    fail_next_regs(f, ENOMEM, 1000);
    fx_get_fails(f, FX_ALLOC(TARGET), 10, REGCACHE_ERR_NO_SPACE);
    char want[96];
    snprintf(want, sizeof(want), "(5 entries, all held; %d evicted before)", unused);
    fx_assert_error_says("no unused entry of the device is left to evict", want, NULL);
    fx_assert_stats(f, FX_STAT(evictions, unused), FX_STAT(reg_failures, unused + 1),
                    FX_STAT(entries, held), NULL);
    assert_int_equal(atomic_load(&f->fb.live), held);
    f->fb.fail_count = 0;
    for (int i = 0; i < held; i++)
        regcache_put(f->c, e[i]);
}

static void exhausted_with_everything_held(void **state)
{
    exhausted_with_held_entries(*state, 0);
}

static void exhausted_after_evicting_the_unused(void **state)
{
    exhausted_with_held_entries(*state, 3);
}

static void evict_and_retry_on_exhaustion(void **state)
{
    struct fx *f = *state;
    static const int errnos[] = { ENOSPC, ENOMEM, EAGAIN, EFAULT };
    fx_device_allocs(f, 3);
    fx_create(f);
    for (size_t k = 0; k < sizeof(errnos) / sizeof(errnos[0]); k++) {
        fx_use(f, FX_ALLOC(0), 10);
        fx_use(f, FX_ALLOC(1), 10);
        f->fb.fail_errno = errnos[k];
        f->fb.fail_count = 1;
        long deregs = atomic_load(&f->fb.deregs);
        /* The backend refuses once; the cache evicts the least recently
         * used unused entry (FX_ALLOC(0)) and succeeds on the retry. */
        regcache_entry_t *e = fx_get(f, FX_ALLOC(2), 10);
        assert_int_equal(atomic_load(&f->fb.deregs), deregs + 1);
        regcache_put(f->c, e);
        regcache_flush(f->c);
    }
    fx_assert_stats(f, FX_STAT(reg_failures, 4), FX_STAT(evictions, 4), NULL);
}

static void held_entries_leave_no_space_until_put(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 3);
    f->fb.capacity = 2 * MiB;
    fx_create(f);
    regcache_entry_t *a = fx_get(f, FX_ALLOC(0), 10);
    regcache_entry_t *b = fx_get(f, FX_ALLOC(1), 10);
    fx_get_fails(f, FX_ALLOC(2), 10, REGCACHE_ERR_NO_SPACE);
    assert_string_not_equal(regcache_last_error(), "");
    assert_int_equal(atomic_load(&f->fb.live), 2);
    assert_int_equal(fx_stats(f).entries, 2);
    /* Once one is released the same request evicts it and succeeds. */
    regcache_put(f->c, a);
    regcache_entry_t *e = fx_get(f, FX_ALLOC(2), 10);
    assert_int_equal(atomic_load(&f->fb.live), 2);
    regcache_put(f->c, e);
    regcache_put(f->c, b);
}

static void other_backend_errors_do_not_evict(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    f->fb.fail_errno = EINVAL;
    f->fb.fail_count = 1;
    fx_get_fails(f, FX_ALLOC(1), 10, REGCACHE_ERR_BACKEND);
    fx_assert_stats(f, FX_STAT(evictions, 0), FX_STAT(entries, 1), FX_STAT(reg_failures, 1), NULL);
    /* The failed miss left nothing behind: the next get registers. */
    fx_use(f, FX_ALLOC(1), 10);
    assert_int_equal(fx_stats(f).entries, 2);
}

static void devices_have_separate_budgets(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fake_alloc(&f->fb, FX_ALLOC(2), MiB, 1, REGCACHE_MEM_DEVICE);
    f->fb.capacity = MiB; /* per device */
    fx_create(f);
    fx_use(f, FX_ALLOC(2), 10); /* device 1 */
    fx_use(f, FX_ALLOC(0), 10); /* device 0 */
    /* Device 0 is full: it evicts its own entry, never device 1's, even
     * though device 1's is older. */
    fx_use(f, FX_ALLOC(1), 10);
    long regs = atomic_load(&f->fb.regs);
    fx_use(f, FX_ALLOC(2), 10);
    assert_int_equal(atomic_load(&f->fb.regs), regs);
    assert_int_equal(fx_stats(f).evictions, 1);
}

/* Held entries push both devices past max_entries; each binds again at
 * its own puts, also once the other device is back within its budget. */
static void each_device_over_budget_trims_at_its_put(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fake_alloc(&f->fb, FX_ALLOC(2), MiB, 1, REGCACHE_MEM_DEVICE);
    fake_alloc(&f->fb, FX_ALLOC(3), MiB, 1, REGCACHE_MEM_DEVICE);
    f->p.max_entries = 1; /* per device */
    fx_create(f);
    regcache_entry_t *held[4];
    for (int i = 0; i < 4; i++)
        held[i] = fx_get(f, FX_ALLOC(i), 10);
    fx_assert_stats(f, FX_STAT(entries, 4), FX_STAT(evictions, 0), NULL);
    regcache_put(f->c, held[0]);
    regcache_put(f->c, held[1]);
    fx_assert_stats(f, FX_STAT(entries, 3), FX_STAT(evictions, 1), NULL);
    regcache_put(f->c, held[2]);
    regcache_put(f->c, held[3]);
    fx_assert_stats(f, FX_STAT(entries, 2), FX_STAT(evictions, 2), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 2);
}

FX_MAIN(efault_after_free_is_not_gpu, efault_after_reallocation_is_not_gpu,
        seventeenth_attempt_follows_the_sixteenth_eviction, exhausted_forever_counts_what_is_left,
        exhausted_with_everything_held, exhausted_after_evicting_the_unused,
        evict_and_retry_on_exhaustion, held_entries_leave_no_space_until_put,
        other_backend_errors_do_not_evict, devices_have_separate_budgets,
        each_device_over_budget_trims_at_its_put)
