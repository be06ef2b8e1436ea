/* REGCACHE_* environment variables override params. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capture_stderr.h"
#include "cache_fixture.h"
#include "options.h"

#define ALLOC(i) ((uintptr_t)0x7f0000000000ull + (uintptr_t)(i)*2 * MiB)

static struct fake_backend fb;

static const char *const vars[] = {
    "REGCACHE_METHOD",      "REGCACHE_VALIDATION",
    "REGCACHE_ALIGNMENT",   "REGCACHE_MAX_BYTES",
    "REGCACHE_MAX_ENTRIES", "REGCACHE_WHOLE_ALLOCATION",
    "REGCACHE_HOST_MEMORY", "REGCACHE_HOST_MONITOR",
    "REGCACHE_STATS",       "REGCACHE_WHOLE_ALLOCATION_MAX",
    "REGCACHE_LEDGER",      "REGCACHE_LEDGER_NAMESPACE",
    "REGCACHE_BAR1_BYTES",  "REGCACHE_HOOKS",
};

static int clean_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    return 0;
}

static regcache_t *create_with_env(void)
{
    struct regcache_params p;
    regcache_t *c;
    fake_init(&fb);
    for (int i = 0; i < 4; i++)
        fake_alloc(&fb, ALLOC(i), MiB, 0, REGCACHE_MEM_DEVICE);
    fake_params(&fb, &p);
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    return c;
}

static void put_get(regcache_t *c, uintptr_t addr)
{
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, (void *)addr, 10, &e), REGCACHE_OK);
    regcache_put(c, e);
}

static void max_entries_and_bytes(void **state)
{
    (void)state;
    setenv("REGCACHE_MAX_ENTRIES", "2", 1);
    regcache_t *c = create_with_env();
    for (int i = 0; i < 4; i++)
        put_get(c, ALLOC(i));
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    assert_int_equal(s.entries, 2);
    regcache_destroy(c);

    unsetenv("REGCACHE_MAX_ENTRIES");
    setenv("REGCACHE_MAX_BYTES", "1M", 1);
    setenv("REGCACHE_WHOLE_ALLOCATION_MAX", "1M", 1);
    c = create_with_env();
    for (int i = 0; i < 4; i++)
        put_get(c, ALLOC(i));
    regcache_get_stats(c, &s);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.bytes, MiB);
    regcache_destroy(c);
}

static void validation_alignment_whole(void **state)
{
    (void)state;
    setenv("REGCACHE_VALIDATION", "notify", 1);
    setenv("REGCACHE_ALIGNMENT", "4096", 1);
    setenv("REGCACHE_WHOLE_ALLOCATION", "off", 1);
    regcache_t *c = create_with_env();
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_NOTIFY);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, (void *)(ALLOC(0) + 5000), 10, &e), REGCACHE_OK);
    uintptr_t start;
    size_t len;
    regcache_entry_range(e, &start, &len);
    assert_int_equal(start, ALLOC(0) + 4096);
    assert_int_equal(len, 4096);
    regcache_put(c, e);
    regcache_destroy(c);
}

static void host_memory(void **state)
{
    (void)state;
    setenv("REGCACHE_HOST_MEMORY", "1", 1);
    regcache_t *c = create_with_env();
    put_get(c, ALLOC(10)); /* not a declared allocation: host memory */
    regcache_destroy(c);
}

/* ucm: UCX's events, which a process without libucm does not have; the
 * cache says so and keeps host memory to the explicit contract. */
static void host_monitor_ucm(void **state)
{
    (void)state;
    setenv("REGCACHE_HOST_MEMORY", "1", 1);
    setenv("REGCACHE_HOST_MONITOR", "ucm", 1);
    regcache_t *c = create_with_env();
    const char *why = regcache_validation_reason(c);
    if (!strstr(why, "host memory: not monitored (REGCACHE_HOST_MONITOR=ucm; UCX's events not "
                     "used: no libucm)"))
        fail_msg("%s", why);
    regcache_destroy(c);
}

static void bad_values_are_refused(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        { "REGCACHE_METHOD", "rdma" },
        { "REGCACHE_VALIDATION", "sometimes" },
        { "REGCACHE_HOST_MONITOR", "ucx" },
        { "REGCACHE_MAX_BYTES", "12Q" },
        { "REGCACHE_MAX_ENTRIES", "-3" },
        { "REGCACHE_ALIGNMENT", "3000" },
        { "REGCACHE_WHOLE_ALLOCATION", "maybe" },
        { "REGCACHE_STATS", "2" },
        { "REGCACHE_MAX_BYTES", "99999999999999999999G" },
        /* Strict decimal: no octal, hex, sign, blanks or unknown suffix. */
        { "REGCACHE_MAX_BYTES", "010" },
        { "REGCACHE_MAX_BYTES", "0x10" },
        { "REGCACHE_MAX_ENTRIES", " -3" },
        { "REGCACHE_MAX_ENTRIES", "3 " },
        { "REGCACHE_MAX_BYTES", "+5" },
        { "REGCACHE_MAX_BYTES", "5KB" },
        { "REGCACHE_MAX_BYTES", "" },
        { "REGCACHE_MAX_BYTES", "20000000T" },
        /* Alignment: a power of two from 4K to 1G. */
        { "REGCACHE_ALIGNMENT", "2G" },
        { "REGCACHE_ALIGNMENT", "2048" },
        { "REGCACHE_WHOLE_ALLOCATION_MAX", "1.5G" },
        { "REGCACHE_LEDGER", "sometimes" },
        { "REGCACHE_LEDGER_NAMESPACE", "a-b" },
        { "REGCACHE_BAR1_BYTES", "12Q" },
        { "REGCACHE_HOOKS", "maybe" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct regcache_params p;
        regcache_t *c;
        fake_init(&fb);
        fake_params(&fb, &p);
        setenv(bad[i][0], bad[i][1], 1);
        assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
        assert_null(c);
        /* The message names the variable, not the field it sets. */
        if (!strstr(regcache_last_error(), bad[i][0]))
            fail_msg("%s=\"%s\": message \"%s\" does not name it", bad[i][0], bad[i][1],
                     regcache_last_error());
        unsetenv(bad[i][0]);
    }
}

static void sizes_take_suffixes(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        size_t bytes;
    } ok[] = { { "0", 0 },          { "4096", 4096 },    { "64K", 64 << 10 }, { "64k", 64 << 10 },
               { "3M", 3ul << 20 }, { "2G", 2ul << 30 }, { "1T", 1ul << 40 } };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        setenv("REGCACHE_MAX_BYTES", ok[i].value, 1);
        struct regcache_params p;
        regcache_t *c;
        fake_init(&fb);
        fake_alloc(&fb, ALLOC(0), MiB, 0, REGCACHE_MEM_DEVICE);
        fake_params(&fb, &p);
        assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
        put_get(c, ALLOC(0));
        struct regcache_stats s;
        regcache_get_stats(c, &s);
        /* The budget of device 0 is the variable's value (0: none). */
        assert_int_equal(s.budget, ok[i].bytes);
        regcache_destroy(c);
    }
}

static void params_errors_name_the_field(void **state)
{
    (void)state;
    struct regcache_params p;
    regcache_t *c;
    fake_init(&fb);
    fake_params(&fb, &p);
    p.alignment = 3000;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
    assert_non_null(strstr(regcache_last_error(), "params.alignment"));
    p.alignment = (size_t)1 << 31;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
    assert_non_null(strstr(regcache_last_error(), "params.alignment"));
    p.alignment = 65536;
    p.rails = 0;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
    assert_non_null(strstr(regcache_last_error(), "params.rails"));
    p.rails = REGCACHE_MAX_RAILS + 1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
}

static void stats_dump_at_destroy(void **state)
{
    (void)state;
    setenv("REGCACHE_STATS", "1", 1);
    regcache_t *c = create_with_env();
    put_get(c, ALLOC(0));
    put_get(c, ALLOC(0));
    char buf[1024];
    assert_true(destroy_capturing_stderr(c, buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "hits 1 misses 1 registrations 1 deregistrations 1"));
    /* And why the cache validates as it does. */
    assert_non_null(strstr(buf, "validation TAG_CHECK: "));
}

/* REGCACHE_HOOKS=off keeps AUTO from patching libcuda, and says so; a
 * HOOKS cache, which would have nothing to see frees, is refused. */
static void hooks_off(void **state)
{
    (void)state;
    setenv("REGCACHE_HOOKS", "off", 1);
    regcache_t *c = create_with_env();
    assert_int_equal(regcache_validation_mode(c), REGCACHE_VALIDATE_TAG_CHECK);
    assert_non_null(strstr(regcache_validation_reason(c), "REGCACHE_HOOKS=off"));
    regcache_destroy(c);
    setenv("REGCACHE_VALIDATION", "hooks", 1);
    struct regcache_params p;
    fake_params(&fb, &p);
    c = (regcache_t *)1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(regcache_last_error(), "validation HOOKS: no hook sees every CUDA "
                                                  "free (REGCACHE_HOOKS=off"));
    assert_non_null(strstr(regcache_last_error(), "REGCACHE_VALIDATION=notify"));
}

/* The process-wide variables, read where they act, parse as
 * regcache_create() parses them: the same values, and a bad value refused
 * with the message create gives. */
static void create_refuses_as(const char *why)
{
    struct regcache_params p;
    regcache_t *c;
    fake_init(&fb);
    fake_params(&fb, &p);
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
    assert_string_equal(regcache_last_error(), why);
}

static void process_wide_options(void **state)
{
    (void)state;
    char why[256];
    bool on = false;
    const char *ns = "x";
    size_t bytes = 1;
    assert_true(rc_option_ledger(&on, why, sizeof why));
    assert_true(on);
    assert_true(rc_option_ledger_namespace(&ns, why, sizeof why));
    assert_null(ns);
    assert_true(rc_option_bar1_bytes(&bytes, why, sizeof why));
    assert_int_equal(bytes, 0);

    setenv("REGCACHE_LEDGER", "No", 1);
    assert_true(rc_option_ledger(&on, why, sizeof why));
    assert_false(on);
    setenv("REGCACHE_LEDGER", "sometimes", 1);
    assert_false(rc_option_ledger(&on, why, sizeof why));
    assert_string_equal(why, "REGCACHE_LEDGER=\"sometimes\": expected on or off");
    create_refuses_as(why);
    unsetenv("REGCACHE_LEDGER");

    setenv("REGCACHE_LEDGER_NAMESPACE", "", 1);
    assert_true(rc_option_ledger_namespace(&ns, why, sizeof why));
    assert_null(ns);
    setenv("REGCACHE_LEDGER_NAMESPACE", "ci_42", 1);
    assert_true(rc_option_ledger_namespace(&ns, why, sizeof why));
    assert_string_equal(ns, "ci_42");
    static const char *const bad_ns[] = { "a-b", "a.b", "123456789012345678901234567890123" };
    for (size_t i = 0; i < sizeof bad_ns / sizeof bad_ns[0]; i++) {
        setenv("REGCACHE_LEDGER_NAMESPACE", bad_ns[i], 1);
        assert_false(rc_option_ledger_namespace(&ns, why, sizeof why));
        assert_non_null(strstr(why, "REGCACHE_LEDGER_NAMESPACE=\""));
        create_refuses_as(why);
    }
    unsetenv("REGCACHE_LEDGER_NAMESPACE");

    setenv("REGCACHE_BAR1_BYTES", "256M", 1);
    assert_true(rc_option_bar1_bytes(&bytes, why, sizeof why));
    assert_int_equal(bytes, 256 * MiB);
    setenv("REGCACHE_BAR1_BYTES", "0x10", 1);
    assert_false(rc_option_bar1_bytes(&bytes, NULL, 0));
    assert_false(rc_option_bar1_bytes(&bytes, why, sizeof why));
    create_refuses_as(why);
    unsetenv("REGCACHE_BAR1_BYTES");
}

int main(void)
{
    return FX_RUN(clean_env, clean_env, max_entries_and_bytes, validation_alignment_whole,
                  host_memory, host_monitor_ucm, bad_values_are_refused, sizes_take_suffixes,
                  params_errors_name_the_field, stats_dump_at_destroy, hooks_off,
                  process_wide_options);
}
