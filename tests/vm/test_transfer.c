/* RDMA WRITE and READ between two RC QPs on a real provider with both keys
 * taken from cache entries, and invalidation proven at the provider: after
 * regcache_invalidate or regcache_notify_free the old rkey is refused by the
 * responder, not merely forgotten by the cache. */
#include "vm_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#define LEN ((size_t)64 << 10)

static struct vm_dev dev;

struct fixture {
    regcache_t *cache;
    struct loopback lb;
    char *src; /* malloc'd: the cache must take unaligned heap memory too */
    char *dst; /* page-aligned */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->cache = vm_cache(dev.pd, VM_ACCESS_ALL, 0);
    assert_int_equal(loopback_create(dev.pd, &f->lb), 0);
    f->src = malloc(LEN);
    assert_non_null(f->src);
    f->dst = vm_pages(LEN);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    loopback_destroy(&f->lb);
    regcache_destroy(f->cache);
    free(f->src);
    vm_pages_free(f->dst, LEN);
    free(f);
    return 0;
}

/* WRITE src -> dst, then READ dst -> src, with the keys of fresh gets on
 * every round: the first round misses, the others run on hits. */
static void write_and_read_through_cached_keys(void **state)
{
    struct fixture *f = *state;
    int before = vm_provider_mrs();

    for (int round = 0; round < 3; round++) {
        regcache_entry_t *se, *de;
        assert_int_equal(regcache_get(f->cache, f->src, LEN, &se), REGCACHE_OK);
        assert_int_equal(regcache_get(f->cache, f->dst, LEN, &de), REGCACHE_OK);

        vm_write_read(&f->lb, f->src, vm_lkey(se), f->dst, vm_rkey(de), LEN, round);

        regcache_put(f->cache, se);
        regcache_put(f->cache, de);
    }
    struct regcache_stats s = vm_stats(f->cache);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.hits, 4);
    assert_int_equal(s.registrations, 2);
    assert_int_equal(vm_provider_mrs(), before + 2);
}

/* Invalidate an unused target (by regcache_invalidate, or by
 * regcache_notify_free as the free hook does): its MR is gone at the
 * provider, the next get registers a new one that works, and the old rkey
 * is refused. */
static void invalidated_target(struct fixture *f, int by_notify)
{
    regcache_entry_t *se, *de;

    assert_int_equal(regcache_get(f->cache, f->src, LEN, &se), REGCACHE_OK);
    assert_int_equal(regcache_get(f->cache, f->dst, LEN, &de), REGCACHE_OK);
    uint32_t old_rkey = vm_rkey(de);
    regcache_put(f->cache, de);
    int before = vm_provider_mrs();

    if (by_notify)
        regcache_notify_free(f->dst, LEN);
    else
        assert_int_equal(regcache_invalidate(f->cache, f->dst, LEN), REGCACHE_OK);
    struct regcache_stats s = vm_stats(f->cache);
    assert_int_equal(by_notify ? s.invalidations_notify : s.invalidations_explicit, 1);
    assert_int_equal(vm_provider_mrs(), before - 1);

    assert_int_equal(regcache_get(f->cache, f->dst, LEN, &de), REGCACHE_OK);
    assert_int_equal(vm_stats(f->cache).misses, s.misses + 1);
    assert_int_not_equal(vm_rkey(de), old_rkey);
    assert_int_equal(vm_provider_mrs(), before);

    vm_write_read(&f->lb, f->src, vm_lkey(se), f->dst, vm_rkey(de), LEN, 7);
    /* Last on this pair: the refusal moves the QP to the error state. */
    vm_write_refused(&f->lb, f->src, vm_lkey(se), f->dst, old_rkey, LEN);

    regcache_put(f->cache, se);
    regcache_put(f->cache, de);
}

static void invalidate_replaces_mr_and_old_rkey_is_refused(void **state)
{
    invalidated_target(*state, 0);
}

static void notify_free_replaces_mr_and_old_rkey_is_refused(void **state)
{
    invalidated_target(*state, 1);
}

/* Invalidating a held entry: the holder's MR keeps working (the NIC may
 * still be using it) while new gets already get a new MR; the old MR goes
 * away at the holder's put. */
static void held_mr_lives_until_put(void **state)
{
    struct fixture *f = *state;
    regcache_entry_t *se, *old, *fresh;

    assert_int_equal(regcache_get(f->cache, f->src, LEN, &se), REGCACHE_OK);
    assert_int_equal(regcache_get(f->cache, f->dst, LEN, &old), REGCACHE_OK);
    uint32_t old_rkey = vm_rkey(old);
    int before = vm_provider_mrs();

    assert_int_equal(regcache_invalidate(f->cache, f->dst, LEN), REGCACHE_OK);
    assert_int_equal(vm_provider_mrs(), before);
    vm_write_read(&f->lb, f->src, vm_lkey(se), f->dst, old_rkey, LEN, 1);

    assert_int_equal(regcache_get(f->cache, f->dst, LEN, &fresh), REGCACHE_OK);
    assert_ptr_not_equal(fresh, old);
    assert_int_not_equal(vm_rkey(fresh), old_rkey);
    assert_int_equal(vm_provider_mrs(), before + 1);

    regcache_put(f->cache, old);
    assert_int_equal(vm_provider_mrs(), before);
    vm_write_read(&f->lb, f->src, vm_lkey(se), f->dst, vm_rkey(fresh), LEN, 2);

    /* Last on this pair: the refusal moves the QP to the error state. */
    vm_write_refused(&f->lb, f->src, vm_lkey(se), f->dst, old_rkey, LEN);

    regcache_put(f->cache, se);
    regcache_put(f->cache, fresh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(write_and_read_through_cached_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(invalidate_replaces_mr_and_old_rkey_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(notify_free_replaces_mr_and_old_rkey_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(held_mr_lives_until_put, setup, teardown),
    };
    vm_dev_open(&dev);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed;
}
