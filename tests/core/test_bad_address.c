/* Host memory that the backend refuses with EFAULT, EINVAL or EPERM is a
 * bad address (unmapped, PROT_NONE, or read-only with write access asked
 * for), not exhaustion: the get fails with BAD_ADDRESS, says which range
 * and which access, and evicts nothing.  GPU memory keeps its EFAULT rule
 * (test_exhaustion). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define CACHED 8
#define TARGET FX_ALLOC(40)

struct bad_case {
    const char *name;
    int err;
};

static const struct bad_case cases[] = {
    { "EFAULT", EFAULT },
    { "EINVAL", EINVAL },
    { "EPERM", EPERM },
};

static void bad_host_address_evicts_nothing(void **state)
{
    struct fx *f = *state;
    const struct bad_case *bc = f->param;
    f->p.host_memory = 1;
    fx_create(f);
    for (int i = 0; i < CACHED; i++)
        fx_use(f, FX_ALLOC(i), 10);
    f->fb.fail_errno = bc->err;
    f->fb.fail_count = 100;
    fx_get_fails(f, TARGET + 100, 10, REGCACHE_ERR_BAD_ADDRESS);
    char range[64];
    snprintf(range, sizeof(range), "[%#jx, ", (uintmax_t)TARGET);
    fx_assert_error_says(range, "not mapped", "local write, remote write, remote read",
                         "nothing was evicted", NULL);
    /* Asked once: no round of eviction and retry. */
    fx_assert_stats(f, FX_STAT(entries, CACHED), FX_STAT(evictions, 0), FX_STAT(reg_failures, 1),
                    FX_STAT(deregistrations, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.live), CACHED);
}

/* The message names the access that was asked for. */
static void message_names_the_access(void **state)
{
    struct fx *f = *state;
    f->p.host_memory = 1;
    f->p.access = 4; /* IBV_ACCESS_REMOTE_READ */
    fx_create(f);
    f->fb.fail_errno = EFAULT;
    f->fb.fail_count = 1;
    fx_get_fails(f, TARGET, 10, REGCACHE_ERR_BAD_ADDRESS);
    fx_assert_error_says("(remote read)", NULL);
    assert_string_equal(regcache_err_name(REGCACHE_ERR_BAD_ADDRESS), "REGCACHE_ERR_BAD_ADDRESS");
}

/* Exhaustion of host memory still evicts and retries. */
static void host_exhaustion_still_evicts(void **state)
{
    struct fx *f = *state;
    f->p.host_memory = 1;
    fx_create(f);
    fx_use(f, FX_ALLOC(0), 10);
    f->fb.fail_errno = ENOMEM;
    f->fb.fail_count = 1;
    fx_use(f, TARGET, 10);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(evictions, 1), NULL);
}

FX_MAIN_CASES(bad_host_address_evicts_nothing, cases, message_names_the_access,
              host_exhaustion_still_evicts)
