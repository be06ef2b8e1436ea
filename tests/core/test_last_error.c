/* Every failing public call leaves a message of its own in
 * regcache_last_error(), never the one of the call that failed before it.
 * The calls run in a sequence, each failing for another reason; each
 * message must name its own problem and must not say the previous one's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache_fixture.h"

static struct fx *the;

struct failing_call {
    const char *what;
    int (*call)(void); /* returns the status */
    int status;
    const char *says; /* a phrase of its message no other message has */
};

static regcache_entry_t *entry;
static struct regcache_stats stats;

static int get_host_memory(void)
{
    return regcache_get(the->c, (const void *)FX_ALLOC(9), 10, &entry);
}
static int get_null_cache(void)
{
    return regcache_get(NULL, (const void *)FX_ALLOC(0), 10, &entry);
}
static int get_null_addr(void)
{
    return regcache_get(the->c, NULL, 10, &entry);
}
static int get_len_0(void)
{
    return regcache_get(the->c, (const void *)FX_ALLOC(0), 0, &entry);
}
static int get_wrapping(void)
{
    return regcache_get(the->c, (const void *)(UINTPTR_MAX - 10), 100, &entry);
}
static int get_past_the_allocation(void)
{
    return regcache_get(the->c, (const void *)FX_ALLOC(0), 2 * MiB, &entry);
}
static int get_query_fails(void)
{
    the->fb.query_status = REGCACHE_ERR_CUDA;
    int rc = regcache_get(the->c, (const void *)FX_ALLOC(0), 10, &entry);
    the->fb.query_status = 0;
    return rc;
}
static int invalidate_null(void)
{
    return regcache_invalidate(NULL, (const void *)FX_ALLOC(0), 10);
}
static int invalidate_len_0(void)
{
    return regcache_invalidate(the->c, (const void *)FX_ALLOC(0), 0);
}
static int flush_null(void)
{
    return regcache_flush(NULL);
}
static int get_stats_null(void)
{
    return regcache_get_stats(NULL, &stats);
}
static int get_stats_null_stats(void)
{
    return regcache_get_stats(the->c, NULL);
}
static int device_stats_bad_device(void)
{
    return regcache_get_device_stats(the->c, 99, &stats);
}
static int get_rail_bad_rail(void)
{
    return regcache_get_rail(the->c, 5, (const void *)FX_ALLOC(0), 10, &entry);
}
static int params_init_null(void)
{
    return regcache_params_init(NULL);
}
static int create_null(void)
{
    regcache_t *c;
    return regcache_create(NULL, &c);
}
static int create_bad_alignment(void)
{
    struct regcache_params p = the->p;
    regcache_t *c;
    p.alignment = 3000;
    return regcache_create(&p, &c);
}
static int validation_mode_null(void)
{
    return regcache_validation_mode(NULL);
}
static int method_used_null(void)
{
    return regcache_method_used(NULL);
}

#define CALL(fn, st, phrase)               \
    {                                      \
#fn, fn, REGCACHE_ERR_##st, phrase \
    }
static const struct failing_call calls[] = {
    CALL(get_host_memory, NOT_GPU, "is not GPU memory"),
    CALL(get_null_cache, INVALID, "regcache_get: cache is NULL"),
    CALL(get_null_addr, INVALID, "regcache_get: addr is NULL"),
    CALL(get_len_0, INVALID, "regcache_get: len is 0"),
    CALL(get_wrapping, INVALID, "wraps the address space"),
    CALL(get_past_the_allocation, RANGE, "runs past the end"),
    CALL(get_query_fails, CUDA, "REGCACHE_ERR_CUDA"),
    CALL(invalidate_null, INVALID, "regcache_invalidate: cache is NULL"),
    CALL(invalidate_len_0, INVALID, "is empty"),
    CALL(flush_null, INVALID, "regcache_flush: cache is NULL"),
    CALL(get_stats_null, INVALID, "regcache_get_stats: cache is NULL"),
    CALL(get_stats_null_stats, INVALID, "regcache_get_stats: stats is NULL"),
    CALL(device_stats_bad_device, INVALID, "device 99"),
    CALL(get_rail_bad_rail, INVALID, "rail 5"),
    CALL(params_init_null, INVALID, "regcache_params_init: params is NULL"),
    CALL(create_null, INVALID, "regcache_create: params is NULL"),
    CALL(create_bad_alignment, INVALID, "params.alignment=3000"),
    CALL(validation_mode_null, INVALID, "regcache_validation_mode: cache is NULL"),
    CALL(method_used_null, INVALID, "regcache_method_used: cache is NULL"),
    /* The first again: its message comes back, not the last one's. */
    CALL(get_host_memory, NOT_GPU, "is not GPU memory"),
};
#undef CALL

#define N_CALLS (sizeof(calls) / sizeof(calls[0]))

static void each_failure_says_its_own_problem(void **state)
{
    the = *state;
    fx_device_alloc(the, 0);
    fx_create(the);
    const char *before = NULL;
    for (size_t i = 0; i < N_CALLS; i++) {
        const struct failing_call *k = &calls[i];
        int rc = k->call();
        const char *msg = regcache_last_error();
        if (rc != k->status)
            fail_msg("%s returned %s, expected %s (message \"%s\")", k->what, regcache_err_name(rc),
                     regcache_err_name(k->status), msg);
        if (!strstr(msg, k->says))
            fail_msg("%s: the message \"%s\" does not say \"%s\"", k->what, msg, k->says);
        if (before && strstr(msg, before))
            fail_msg("%s: the message \"%s\" still says the previous failure's \"%s\"", k->what,
                     msg, before);
        before = k->says;
    }
    assert_int_equal(atomic_load(&the->fb.regs), 0);
}

/* A success in between does not leave a failure's message behind, and a
 * failure after it is explained afresh. */
static void success_then_failure(void **state)
{
    the = *state;
    fx_device_alloc(the, 0);
    fx_create(the);
    assert_int_equal(get_len_0(), REGCACHE_ERR_INVALID);
    fx_use(the, FX_ALLOC(0), 10);
    assert_int_equal(get_host_memory(), REGCACHE_ERR_NOT_GPU);
    fx_assert_error_says("is not GPU memory", NULL);
    assert_null(strstr(regcache_last_error(), "len is 0"));
}

FX_MAIN(each_failure_says_its_own_problem, success_then_failure)
