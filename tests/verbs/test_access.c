/* The built-in verbs backend registers each entry with the access its gets
 * asked for, relaxed ordering where the rail's provider takes it: a
 * provider that refuses the flag is asked again without it, and that rail
 * is not asked for it again. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"
#include "fake_verbs.h"
#include "regcache.h"

#define BLOCK ((size_t)65536)
#define RO IBV_ACCESS_RELAXED_ORDERING

static struct ibv_pd *pds[2];

/* A built-in cache of host memory over two rails (two fake pds). */
static regcache_t *host_cache(void)
{
    struct regcache_params p;
    regcache_t *c = NULL;
    static char pd_storage[2];
    pds[0] = fake_pd();
    pds[1] = (struct ibv_pd *)&pd_storage[1];
    drv.device_count = 0;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.pds = pds;
    p.rails = 2;
    p.host_memory = 1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    return c;
}

static regcache_entry_t *get(regcache_t *c, unsigned rail, void *buf, int access)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get_access(c, rail, buf, BLOCK, access, 0, &e), REGCACHE_OK);
    return e;
}

static void test_access_of_the_get_is_registered(void **state)
{
    (void)state;
    regcache_t *c = host_cache();
    char *buf = aligned_alloc(BLOCK, BLOCK);
    regcache_entry_t *e = get(c, 0, buf, IBV_ACCESS_REMOTE_READ);
    assert_int_equal(fake_verbs.last_reg_mr.access, IBV_ACCESS_REMOTE_READ);
    regcache_entry_t *x = get(c, 0, buf, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE);
    assert_int_equal(fake_verbs.last_reg_mr.access,
                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE);
    assert_non_null(regcache_entry_mr(x));
    assert_int_equal(fake_verbs.live_mrs, 2); /* the narrower one is held */
    regcache_put(c, e);
    assert_int_equal(fake_verbs.live_mrs, 1);
    regcache_put(c, x);
    regcache_destroy(c);
    free(buf);
}

static void test_relaxed_ordering_where_the_provider_takes_it(void **state)
{
    (void)state;
    regcache_t *c = host_cache();
    char *buf = aligned_alloc(BLOCK, BLOCK);
    regcache_entry_t *e = get(c, 0, buf, IBV_ACCESS_REMOTE_READ | RO);
    assert_int_equal(fake_verbs.reg_mr_calls, 1);
    assert_int_equal(fake_verbs.last_reg_mr.access, IBV_ACCESS_REMOTE_READ | RO);
    regcache_put(c, e);
    regcache_destroy(c);
    free(buf);
}

/* Rail 1's provider refuses the flag: asked once with it, then without;
 * later registrations there leave it out from the start, while rail 0
 * keeps getting it.  The entry serves gets that ask for it. */
static void test_relaxed_ordering_falls_back_per_rail(void **state)
{
    (void)state;
    regcache_t *c = host_cache();
    fake_verbs.refuse_relaxed = 1;
    fake_verbs.refuse_relaxed_pd = pds[1];
    char *a = aligned_alloc(BLOCK, BLOCK), *b = aligned_alloc(BLOCK, BLOCK);
    int want = IBV_ACCESS_REMOTE_READ | RO;

    regcache_entry_t *e = get(c, 1, a, want);
    assert_int_equal(fake_verbs.reg_mr_calls, 2);
    assert_int_equal(fake_verbs.last_reg_mr.access, IBV_ACCESS_REMOTE_READ);
    assert_int_equal(regcache_entry_access(e), want);
    regcache_put(c, e);
    /* A hit, though the rail registered without the flag. */
    e = get(c, 1, a, want);
    assert_int_equal(fake_verbs.reg_mr_calls, 2);
    regcache_put(c, e);

    e = get(c, 1, b, want);
    assert_int_equal(fake_verbs.reg_mr_calls, 3);
    assert_int_equal(fake_verbs.last_reg_mr.access, IBV_ACCESS_REMOTE_READ);
    regcache_put(c, e);

    e = get(c, 0, b, want);
    assert_int_equal(fake_verbs.reg_mr_calls, 4);
    assert_int_equal(fake_verbs.last_reg_mr.access, want);
    regcache_put(c, e);
    regcache_destroy(c);
    free(a);
    free(b);
}

/* A refusal for another reason is no reason to drop the flag. */
static void test_other_failures_keep_relaxed_ordering(void **state)
{
    (void)state;
    regcache_t *c = host_cache();
    char *a = aligned_alloc(BLOCK, BLOCK);
    int want = IBV_ACCESS_REMOTE_READ | RO;
    fake_verbs.reg_mr_failures = 2;
    fake_verbs.reg_mr_errno = EINVAL;
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get_access(c, 0, a, BLOCK, want, 0, &e), REGCACHE_ERR_BAD_ADDRESS);
    fake_verbs.reg_mr_failures = 0;
    e = get(c, 0, a, want);
    assert_int_equal(fake_verbs.last_reg_mr.access, want);
    regcache_put(c, e);
    regcache_destroy(c);
    free(a);
}

/* Verbs registers remote write or remote atomic access only with local
 * write: a get that asks for either without it gets it added, on a get's
 * access and on params.access alike, and the memory registers. */
static void test_remote_write_and_atomic_get_local_write(void **state)
{
    (void)state;
    regcache_t *c = host_cache();
    char *a = aligned_alloc(BLOCK, BLOCK), *b = aligned_alloc(BLOCK, BLOCK);
    static const int asked[] = { IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC,
                                 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
    for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
        regcache_entry_t *e = NULL;
        assert_int_equal(regcache_get_access(c, 0, a, BLOCK, asked[i], 0, &e), REGCACHE_OK);
        assert_true(fake_verbs.last_reg_mr.access & IBV_ACCESS_LOCAL_WRITE);
        assert_int_equal(regcache_entry_access(e) & asked[i], asked[i]);
        assert_true(regcache_entry_access(e) & IBV_ACCESS_LOCAL_WRITE);
        regcache_put(c, e);
    }
    regcache_destroy(c);

    struct regcache_params p;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.pds = pds;
    p.rails = 2;
    p.host_memory = 1;
    p.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get(c, b, BLOCK, &e), REGCACHE_OK);
    assert_int_equal(fake_verbs.last_reg_mr.access,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    regcache_put(c, e);
    /* The same access asked for by a get: a hit. */
    int calls = fake_verbs.reg_mr_calls;
    assert_int_equal(regcache_get_access(c, 0, b, BLOCK, p.access, 0, &e), REGCACHE_OK);
    assert_int_equal(fake_verbs.reg_mr_calls, calls);
    regcache_put(c, e);
    regcache_destroy(c);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fake_world_setup, fake_world_teardown)
        T(test_access_of_the_get_is_registered),
        T(test_relaxed_ordering_where_the_provider_takes_it),
        T(test_relaxed_ordering_falls_back_per_rail),
        T(test_other_failures_keep_relaxed_ordering),
        T(test_remote_write_and_atomic_get_local_write),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
