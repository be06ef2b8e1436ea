/* The shared cache fixture (see cache_fixture.h). */
#include "cache_fixture.h"
#include "stats_field.h"
#include "threads.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->param = *state;
    fake_init(&f->fb);
    fake_params(&f->fb, &f->p);
    *state = f;
    return 0;
}

int fx_teardown(void **state)
{
    struct fx *f = *state;
    regcache_destroy(f->c);
    assert_int_equal(atomic_load(&f->fb.live), 0);
    assert_int_equal(atomic_load(&f->fb.regs), atomic_load(&f->fb.deregs));
    free(f);
    return 0;
}

void fx_create(struct fx *f)
{
    assert_int_equal(regcache_create(&f->p, &f->c), REGCACHE_OK);
}

uint64_t fx_device_alloc(struct fx *f, int i)
{
    return fake_alloc(&f->fb, FX_ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
}

uint64_t fx_pageable_alloc(struct fx *f, uintptr_t addr, size_t size)
{
    return fake_alloc_as(&f->fb, &(struct fake_alloc){ .base = addr,
                                                       .size = size,
                                                       .device = REGCACHE_DEVICE_HOST,
                                                       .type = REGCACHE_MEM_HOST,
                                                       .pageable = true });
}

regcache_entry_t *fx_get_rail(struct fx *f, unsigned rail, uintptr_t addr, size_t len)
{
    regcache_entry_t *e = NULL;
    int rc = regcache_get_rail(f->c, rail, (const void *)addr, len, &e);
    if (rc != REGCACHE_OK)
        fail_msg("get of [%#jx, +%zu) on rail %u: %s (%s)", (uintmax_t)addr, len, rail,
                 regcache_err_name(rc), regcache_last_error());
    assert_non_null(e);
    return e;
}

regcache_entry_t *fx_get(struct fx *f, uintptr_t addr, size_t len)
{
    return fx_get_rail(f, 0, addr, len);
}

struct get_request {
    struct fx *f;
    uintptr_t addr;
    size_t len;
    regcache_entry_t *e;
};

static void *get_in_thread(void *arg)
{
    struct get_request *r = arg;
    if (regcache_get(r->f->c, (const void *)r->addr, r->len, &r->e) != REGCACHE_OK)
        r->e = NULL;
    return NULL;
}

regcache_entry_t *fx_get_and_exit(struct fx *f, uintptr_t addr, size_t len)
{
    struct get_request r = { f, addr, len, NULL };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, get_in_thread, &r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_non_null(r.e);
    return r.e;
}

regcache_entry_t *get_counted_hold(regcache_t *c, uintptr_t addr, size_t len)
{
    regcache_entry_t *slots[RC_HOLD_SLOTS], *e;
    int n = 0;
    for (;;) {
        if (regcache_get(c, (const void *)addr, len, &e) != REGCACHE_OK)
            break;
        if (!((uintptr_t)e & 1))
            break; /* counted */
        if (n == RC_HOLD_SLOTS) {
            /* More slots than a thread has: not what this expects. */
            regcache_put(c, e);
            e = NULL;
            break;
        }
        slots[n++] = e;
    }
    while (n)
        regcache_put(c, slots[--n]);
    return e;
}

void fx_use(struct fx *f, uintptr_t addr, size_t len)
{
    regcache_put(f->c, fx_get(f, addr, len));
}

void fx_get_fails(struct fx *f, uintptr_t addr, size_t len, int status)
{
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get(f->c, (const void *)addr, len, &e), status);
    assert_null(e);
}

struct fake_handle *fx_handle(regcache_entry_t *e)
{
    struct fake_handle *h = regcache_entry_handle(e);
    assert_non_null(h);
    return h;
}

struct regcache_stats fx_stats(struct fx *f)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(f->c, &s), REGCACHE_OK);
    return s;
}

/* Whether the named statistics of c have their values; else why not, in
 * why. */
static bool stats_are(regcache_t *c, char *why, size_t size, const char *first, va_list ap)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(c, &s), REGCACHE_OK);
    for (const char *name = first; name; name = va_arg(ap, const char *)) {
        uint64_t want = va_arg(ap, uint64_t);
        uint64_t got;
        if (!stats_field(&s, name, &got)) {
            snprintf(why, size, "struct regcache_stats has no field %s", name);
            return false;
        }
        if (got != want) {
            snprintf(why, size, "stats.%s is %ju, expected %ju", name, (uintmax_t)got,
                     (uintmax_t)want);
            return false;
        }
    }
    return true;
}

void assert_cache_stats(regcache_t *c, const char *first, ...)
{
    char why[128];
    va_list ap;
    va_start(ap, first);
    bool ok = stats_are(c, why, sizeof(why), first, ap);
    va_end(ap);
    if (!ok)
        fail_msg("%s", why);
}

void fx_assert_stats(struct fx *f, const char *first, ...)
{
    char why[128];
    va_list ap;
    va_start(ap, first);
    bool ok = stats_are(f->c, why, sizeof(why), first, ap);
    va_end(ap);
    if (!ok)
        fail_msg("%s", why);
}

void fx_device_allocs(struct fx *f, int n)
{
    for (int i = 0; i < n; i++)
        fx_device_alloc(f, i);
}

void fx_assert_error_says(const char *first, ...)
{
    const char *msg = regcache_last_error();
    va_list ap;
    va_start(ap, first);
    for (const char *want = first; want; want = va_arg(ap, const char *))
        if (!strstr(msg, want)) {
            va_end(ap);
            fail_msg("regcache_last_error() is \"%s\": expected it to say \"%s\"", msg, want);
        }
    va_end(ap);
}

int fx_run(int (*setup)(void **), int (*teardown)(void **), const char *names,
           void (*const *fns)(void **), size_t n, void (*case_fn)(void **), const void *cases,
           size_t n_cases, size_t case_size)
{
    struct CMUnitTest *tests = calloc(n_cases + n, sizeof(*tests));
    char *copy = strdup(names);
    assert_non_null(tests);
    assert_non_null(copy);
    for (size_t i = 0; i < n_cases; i++) {
        const void *one = (const char *)cases + i * case_size;
        tests[i] = (struct CMUnitTest){ .name = *(const char *const *)one,
                                        .test_func = case_fn,
                                        .setup_func = setup,
                                        .teardown_func = teardown,
                                        .initial_state = (void *)one };
    }
    char *next = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = strtok_r(i ? NULL : copy, ", ", &next);
        assert_non_null(name);
        tests[n_cases + i] = (struct CMUnitTest){
            .name = name, .test_func = fns[i], .setup_func = setup, .teardown_func = teardown
        };
    }
    int failed = _cmocka_run_group_tests("tests", tests, n_cases + n, NULL, NULL);
    free(copy);
    free(tests);
    return failed;
}
