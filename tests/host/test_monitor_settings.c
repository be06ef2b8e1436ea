/* What host_monitor says is what it does.  The monitor is one per process,
 * and each cache's setting decides for that cache alone: a cache that
 * turned it off keeps the explicit contract - the monitor never drops its
 * entries, whatever another cache beside it watches - and its reason says
 * which setting turned it off.  REGCACHE_HOST_MONITOR overrides the field,
 * as every variable overrides its field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "host_fixture.h"

#define LEN (2 * MiB)

/* The way under test, from the environment; restored by put_env_back. */
static char way[8];

static void unset_env(void)
{
    strcpy(way, getenv("REGCACHE_HOST_MONITOR"));
    unsetenv("REGCACHE_HOST_MONITOR");
}

static void put_env_back(void)
{
    setenv("REGCACHE_HOST_MONITOR", way, 1);
}

/* A cache with params.host_monitor `mode`, the environment out of the
 * way. */
static regcache_t *field_cache(struct fake_backend *fb, int mode)
{
    struct regcache_params p;
    fake_init(fb);
    fake_params(fb, &p);
    p.host_memory = 1;
    p.alignment = 4096;
    p.host_monitor = mode;
    regcache_t *c;
    unset_env();
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    put_env_back();
    return c;
}

static regcache_t *off_cache(struct fake_backend *fb)
{
    return field_cache(fb, REGCACHE_HOST_MONITOR_OFF);
}

static void off_cache_is_left_alone(void **state)
{
    struct fx *f = *state;
    static struct fake_backend off_fb;
    regcache_t *off = off_cache(&off_fb);
    hx_create(f);
    char *p = hx_anon(NULL, LEN, 0);
    regcache_entry_t *e;
    fx_use(f, (uintptr_t)p, LEN);
    assert_int_equal(regcache_get(off, p, LEN, &e), REGCACHE_OK);
    regcache_put(off, e);
    hx_anon(p, LEN, MAP_FIXED);
    fx_use(f, (uintptr_t)p, LEN);
    fx_assert_stats(f, FX_STAT(misses, 2), FX_STAT(invalidations_monitor, 1), NULL);
    /* The explicit contract: the old registration until it is invalidated. */
    assert_int_equal(regcache_get(off, p, LEN, &e), REGCACHE_OK);
    regcache_put(off, e);
    assert_cache_stats(off, FX_STAT(hits, 1), FX_STAT(invalidations_monitor, 0),
                       FX_STAT(host_unmonitored, 1), NULL);
    assert_int_equal(regcache_invalidate(off, p, LEN), REGCACHE_OK);
    regcache_destroy(off);
    assert_int_equal(atomic_load(&off_fb.live), 0);
    hx_destroy_then_unmap(f, p, LEN);
}

static void reason_names_the_field(void **state)
{
    (void)state;
    struct fake_backend fb;
    regcache_t *off = off_cache(&fb);
    const char *why = regcache_validation_reason(off);
    if (!strstr(why, "host memory: not monitored (params.host_monitor is OFF)") ||
        strstr(why, "REGCACHE_HOST_MONITOR"))
        fail_msg("%s", why);
    regcache_destroy(off);
}

/* Every value of the field, named as the enum names it, whether the way
 * could be had or not. */
static void reason_names_each_value_of_the_field(void **state)
{
    (void)state;
    static const char *const names[] = { "AUTO", "OFF", "LIBC", "UFFD", "UCM" };
    for (int mode = REGCACHE_HOST_MONITOR_AUTO; mode <= REGCACHE_HOST_MONITOR_UCM; mode++) {
        struct fake_backend fb;
        regcache_t *c = field_cache(&fb, mode);
        char says[48];
        snprintf(says, sizeof says, "(params.host_monitor is %s", names[mode]);
        const char *why = regcache_validation_reason(c);
        if (!strstr(why, says))
            fail_msg("%s: %s", names[mode], why);
        regcache_destroy(c);
    }
}

static void reason_names_the_variable(void **state)
{
    struct fx *f = *state;
    setenv("REGCACHE_HOST_MONITOR", "off", 1);
    hx_create(f);
    put_env_back();
    const char *why = regcache_validation_reason(f->c);
    if (!strstr(why, "host memory: not monitored (REGCACHE_HOST_MONITOR=off)"))
        fail_msg("%s", why);
}

/* The variable wins over the field, as every variable does. */
static void variable_overrides_off(void **state)
{
    struct fx *f = *state;
    f->p.host_monitor = REGCACHE_HOST_MONITOR_OFF;
    hx_create(f);
    const char *why = regcache_validation_reason(f->c);
    char says[64];
    snprintf(says, sizeof says, "REGCACHE_HOST_MONITOR=%s", way);
    if (!strstr(why, "host memory: monitored") || !strstr(why, says))
        fail_msg("%s", why);
}

int main(void)
{
    int status = hx_start();
    if (status)
        return status;
    strcpy(way, getenv("REGCACHE_HOST_MONITOR"));
    return FX_RUN(fx_setup, fx_teardown, off_cache_is_left_alone, reason_names_the_field,
                  reason_names_each_value_of_the_field, reason_names_the_variable,
                  variable_overrides_off);
}
