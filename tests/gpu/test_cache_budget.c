/* The GPU cache: budget. */
#include "gpu_cache.h"

/* ------------------------------------------------------------------------ */
/* Budget                                                                    */
/* ------------------------------------------------------------------------ */

#define BUDGET_ALLOCS 8

void budget_evicts_lru_and_never_a_held_entry(void **state)
{
    (void)state;
    regcache_t *c = new_cache(3 * MIB);
    CUdeviceptr p[BUDGET_ALLOCS];
    struct handle *h[BUDGET_ALLOCS];
    regcache_entry_t *e, *held;
    for (int i = 0; i < BUDGET_ALLOCS; i++)
        CK(cu.cuMemAlloc(&p[i], MIB));
    /* Held for the whole test. */
    struct handle *keep = get_checked(c, p[0], MIB, &held);
    atomic_store(&held_watch, keep);
    h[1] = get_checked(c, p[1], MIB, &e);
    regcache_put(c, e);
    h[2] = get_checked(c, p[2], MIB, &e);
    regcache_put(c, e);
    /* 3 MiB in use; one more evicts the least recently used unused one. */
    h[3] = get_checked(c, p[3], MIB, &e);
    regcache_put(c, e);
    assert_true(atomic_load(&dereg_count_logged) >= 1);
    assert_ptr_equal(dereg_log[0], h[1]);
    assert_false(atomic_load(&h[2]->dead));
    /* Churn: every other allocation over and over. */
    for (int round = 0; round < 50; round++) {
        for (int i = 1; i < BUDGET_ALLOCS; i++) {
            get_checked(c, p[i], MIB, &e);
            regcache_put(c, e);
            assert_true(stats_of(c).bytes <= 3 * MIB);
        }
    }
    struct regcache_stats s = stats_of(c);
    printf("budget 3 MiB: evictions %ju, registrations %ju, bytes %ju, peak %ju\n",
           (uintmax_t)s.evictions, (uintmax_t)s.registrations, (uintmax_t)s.bytes,
           (uintmax_t)s.peak_bytes);
    assert_true(s.evictions > 0);
    assert_int_equal(atomic_load(&watch_violations), 0);
    assert_false(atomic_load(&keep->dead));
    assert_ptr_equal(get_checked(c, p[0], MIB, &e), keep);
    regcache_put(c, e);
    atomic_store(&held_watch, NULL);
    regcache_put(c, held);
    regcache_destroy(c);
    for (int i = 0; i < BUDGET_ALLOCS; i++)
        CK(cu.cuMemFree(p[i]));
}
