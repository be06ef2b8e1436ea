/* A backend's callbacks may return anything: regcache_get() still returns
 * only the header's statuses.  A query that returns an errno (12, 1) or a
 * negative value that is no status fails the get with
 * REGCACHE_ERR_BACKEND, on a miss, on the second query of a VMM span and
 * after a TAG_CHECK hit's query; a status passes through; reg's values map
 * as documented.  regcache_last_error() names the value returned, and
 * nothing is left registered. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define A FX_ALLOC(0)

/* The fake's query, answering `value` instead from the `from`th call on
 * (counted from 1), so that a test can let a miss's first query succeed. */
static int (*fake_query)(void *, const void *, size_t, struct regcache_mem_info *);
static int value;
static long from, calls;

static int query_returning(void *arg, const void *addr, size_t len, struct regcache_mem_info *info)
{
    int rc = fake_query(arg, addr, len, info);
    return ++calls >= from ? value : rc;
}

/* Before the cache is created, which copies the backend. */
static void create_with_wrapped_query(struct fx *f)
{
    fake_query = f->fb.ops.query;
    f->fb.ops.query = query_returning;
    from = LONG_MAX;
    fx_create(f);
}

static void answer_from(long call, int v)
{
    value = v;
    from = call;
    calls = 0;
}

/* The get fails with `status` and a message that names the value. */
static void get_fails_naming(struct fx *f, uintptr_t addr, size_t len, int status, int v)
{
    fx_get_fails(f, addr, len, status);
    char named[32];
    snprintf(named, sizeof(named), "returned %d", v);
    fx_assert_error_says(named, NULL);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

static void query_values_that_are_no_status(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    create_with_wrapped_query(f);
    const int values[] = { ENOMEM, EPERM, -100, 1 << 20 };
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        answer_from(1, values[i]);
        get_fails_naming(f, A, 10, REGCACHE_ERR_BACKEND, values[i]);
    }
    /* A status passes through. */
    answer_from(1, REGCACHE_ERR_NOT_GPU);
    fx_get_fails(f, A, 10, REGCACHE_ERR_NOT_GPU);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(registrations, 0), NULL);
}

/* The query of the second mapping of a span. */
static void query_of_a_span_s_next_mapping(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 2; i++)
        fake_alloc_as(&f->fb, &(struct fake_alloc){ .base = A + i * MiB,
                                                    .size = MiB,
                                                    .type = REGCACHE_MEM_DEVICE,
                                                    .flags = REGCACHE_MEM_MAPPING });
    create_with_wrapped_query(f);
    answer_from(2, ENOMEM);
    get_fails_naming(f, A + MiB - 100, 200, REGCACHE_ERR_BACKEND, ENOMEM);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(registrations, 0), NULL);
}

/* A TAG_CHECK hit whose query returns an errno: the entry goes, and the
 * miss that follows fails with BACKEND. */
static void query_of_a_tag_check(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    create_with_wrapped_query(f);
    fx_use(f, A, 10);
    answer_from(1, EPERM);
    get_fails_naming(f, A, 10, REGCACHE_ERR_BACKEND, EPERM);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(invalidations_tag, 1), NULL);
}

/* reg: ENOMEM is exhaustion (nothing to evict: NO_SPACE), anything else
 * not one, a negative value included, is BACKEND. */
static void reg_values(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_create(f);
    const struct {
        int err, status;
    } cases[] = { { ENOMEM, REGCACHE_ERR_NO_SPACE },
                  { EPERM, REGCACHE_ERR_BACKEND },
                  { -REGCACHE_ERR_NO_SPACE, REGCACHE_ERR_BACKEND },
                  { REGCACHE_ERR_NO_SPACE, REGCACHE_ERR_BACKEND } };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        f->fb.fail_count = 1;
        f->fb.fail_errno = cases[i].err;
        fx_get_fails(f, A, 10, cases[i].status);
        if (cases[i].status == REGCACHE_ERR_BACKEND) {
            char named[32];
            snprintf(named, sizeof(named), "reg returned %d", cases[i].err);
            fx_assert_error_says(named, NULL);
        }
        assert_int_equal(atomic_load(&f->fb.live), 0);
    }
}

FX_MAIN(query_values_that_are_no_status, query_of_a_span_s_next_mapping, query_of_a_tag_check,
        reg_values)
