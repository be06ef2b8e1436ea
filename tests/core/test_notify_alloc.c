/* What NOTIFY mode asks of an application that notifies by itself:
 * regcache_notify_free() before each free, regcache_notify_alloc() after
 * each allocation.  A get that runs between the first notice and the free
 * itself registers the old memory, still there; the free and a
 * reallocation at the same address (a new buffer id) follow.  With the
 * notice after the allocation, no get that starts after it is served that
 * registration: the racing get keeps it once (a one-shot, when the
 * allocation lands while it registers) or the cache drops it (when the
 * racing get was done).  Each interleaving is forced through the fake
 * backend's seams. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define X FX_ALLOC(0)

enum moment {
    WHILE_REGISTERING, /* after reg pinned the old memory, before the entry is cached */
    AFTER_THE_GET      /* after the racing get was served and put */
};

struct moment_case {
    const char *name;
    enum moment when;
    int validation;
    bool pageable;
};

/* The application's free of X (its notice came earlier) and a new
 * allocation at the same address, with the notice that follows it. */
static void free_and_reallocate(struct fx *f)
{
    fake_realloc(&f->fb, X);
    regcache_notify_alloc((const void *)X, MiB);
}

static void in_reg(void *arg, struct fake_handle *h)
{
    struct fx *f = arg;
    (void)h;
    f->fb.on_handle = NULL;
    free_and_reallocate(f);
}

static void get_racing_a_free(void **state)
{
    struct fx *f = *state;
    const struct moment_case *mc = f->param;
    uint64_t old = mc->pageable ? fx_pageable_alloc(f, X, MiB)
                                : fake_alloc(&f->fb, X, MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.host_memory = mc->pageable;
    f->p.validation = mc->validation;
    fx_create(f);
    fx_use(f, X + 100, 10);

    /* The application is about to free X: it tells the caches first. */
    regcache_notify_free((const void *)X, MiB);
    assert_int_equal(fx_stats(f).entries, 0);
    /* A get before the free itself registers the old memory. */
    if (mc->when == WHILE_REGISTERING) {
        f->fb.on_handle = in_reg;
        f->fb.on_handle_arg = f;
    }
    regcache_entry_t *racing = fx_get(f, X + 100, 10);
    assert_int_equal(fx_handle(racing)->id, old);
    regcache_put(f->c, racing);
    if (mc->when == AFTER_THE_GET)
        free_and_reallocate(f);

    /* Every get from now on is served the new memory. */
    uint64_t now = fake_id_at(&f->fb, X);
    assert_true(now != old);
    for (int i = 0; i < 2; i++) {
        regcache_entry_t *e = fx_get(f, X + 100, 10);
        if (fx_handle(e)->id != now)
            fail_msg("get %d after the reallocation was served the registration of the freed "
                     "memory (buffer id %ju, the memory's is %ju)",
                     i, (uintmax_t)fx_handle(e)->id, (uintmax_t)now);
        regcache_put(f->c, e);
    }
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(one_shots, mc->when == WHILE_REGISTERING),
                    NULL);
}

#define CASE(w, v, p)                                                                         \
    {                                                                                         \
        .name = #w ", " #v ", pageable: " #p, .when = w, .validation = REGCACHE_VALIDATE_##v, \
        .pageable = p                                                                         \
    }
static const struct moment_case cases[] = {
    CASE(WHILE_REGISTERING, NOTIFY, false),   CASE(AFTER_THE_GET, NOTIFY, false),
    CASE(WHILE_REGISTERING, NOTIFY, true),    CASE(AFTER_THE_GET, NOTIFY, true),
    CASE(WHILE_REGISTERING, TAG_CHECK, true), CASE(AFTER_THE_GET, TAG_CHECK, true),
};
#undef CASE

static void notify_alloc_of_nothing_cached_is_harmless(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fx_create(f);
    fx_use(f, FX_ALLOC(1), 10);
    regcache_notify_alloc((const void *)X, MiB);
    regcache_notify_alloc((const void *)X, 0);
    regcache_notify_alloc((const void *)UINTPTR_MAX, 2);
    fx_assert_stats(f, FX_STAT(entries, 1), FX_STAT(invalidations_notify, 0), NULL);
}

FX_MAIN_CASES(get_racing_a_free, cases, notify_alloc_of_nothing_cached_is_harmless)
