/* The longest registration the NICs take (REGCACHE_MAX_MR_SIZE here; a
 * device's max_mr_size with the built-in backend, tests/verbs): a whole
 * allocation longer than it registers the request instead, and a request
 * that does not fit fails with TOO_LARGE, naming the limit, with nothing
 * registered, so that the transport splits it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define LIMIT (256 * KiB)

static int setup(void **state)
{
    setenv("REGCACHE_MAX_MR_SIZE", "256K", 1);
    return fx_setup(state);
}

static int teardown(void **state)
{
    unsetenv("REGCACHE_MAX_MR_SIZE");
    return fx_teardown(state);
}

static void whole_allocation_longer_than_the_limit_registers_the_request(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1); /* 1 MiB */
    fx_create(f);
    regcache_entry_t *e = fx_get(f, A + 10, 10);
    assert_int_equal(fx_handle(e)->start, A);
    assert_int_equal(fx_handle(e)->len, 64 * KiB);
    regcache_put(f->c, e);
    /* Elsewhere in the allocation: an entry of its own. */
    fx_use(f, A + 512 * KiB, 10);
    fx_assert_stats(f, FX_STAT(entries, 2), FX_STAT(bytes, 128 * KiB), NULL);
}

static void request_longer_than_the_limit_is_too_large(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fx_create(f);
    fx_get_fails(f, A, LIMIT + 1, REGCACHE_ERR_TOO_LARGE);
    fx_assert_error_says("327680 bytes", "262144 bytes", "REGCACHE_MAX_MR_SIZE", "split", NULL);
    /* Rounded to the alignment, a request inside the limit may not fit. */
    fx_get_fails(f, A + 10, LIMIT, REGCACHE_ERR_TOO_LARGE);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
    fx_assert_stats(f, FX_STAT(entries, 0), FX_STAT(misses, 0), FX_STAT(reg_failures, 0), NULL);
    /* What fits registers. */
    regcache_entry_t *e = fx_get(f, A, LIMIT);
    assert_int_equal(fx_handle(e)->len, LIMIT);
    regcache_put(f->c, e);
}

int main(void)
{
    return FX_RUN(setup, teardown, whole_allocation_longer_than_the_limit_registers_the_request,
                  request_longer_than_the_limit_is_too_large);
}
