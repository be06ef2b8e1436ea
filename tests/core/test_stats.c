/* The statistics API: registration latency per device and rail, per-rail
 * registrations, failures and bytes, entries that left by reason, the
 * devices seen (an unknown one is an error), the reset and what it leaves,
 * the entry dump, and cache names. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define C FX_ALLOC(2)

static void sleep_2ms(void *arg)
{
    (void)arg;
    nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
}

static void two_rails(struct fx *f)
{
    fx_device_allocs(f, 3);
    f->p.rails = 2;
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    fx_create(f);
}

/* Three registrations on rail 0, one on rail 1 that the backend held for
 * 2 ms: each histogram counts its own, and the slow one's bucket lies at
 * 2 ms or above. */
static void latency_per_device_and_rail(void **state)
{
    struct fx *f = *state;
    two_rails(f);
    fx_use(f, A, 10);
    fx_use(f, B, 10);
    fx_use(f, C, 10);
    f->fb.during_reg = sleep_2ms;
    regcache_put(f->c, fx_get_rail(f, 1, A, 10));
    struct regcache_latency l;
    assert_int_equal(regcache_get_latency(f->c, 0, 0, &l), REGCACHE_OK);
    assert_int_equal(l.count, 3);
    assert_int_equal(regcache_get_latency(f->c, 0, 1, &l), REGCACHE_OK);
    assert_int_equal(l.count, 1);
    assert_true(l.p50_ns >= 2000000 && l.p99_ns == l.p50_ns);
    uint64_t sum = 0;
    for (int b = 0; b < REGCACHE_LATENCY_BUCKETS; b++)
        sum += l.bucket[b];
    assert_int_equal(sum, 1);
    assert_int_equal(regcache_get_latency(f->c, REGCACHE_DEVICE_ALL, REGCACHE_RAIL_ALL, &l),
                     REGCACHE_OK);
    assert_int_equal(l.count, 4);
    assert_true(l.p50_ns > 0 && l.p99_ns >= 2000000 && l.p99_ns >= l.p50_ns);
    struct regcache_stats s = fx_stats(f);
    assert_int_equal(s.reg_latency_p99_ns, l.p99_ns);
    assert_int_equal(s.reg_latency_p50_ns, l.p50_ns);
    assert_int_equal(regcache_get_latency(f->c, 0, 2, &l), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_get_latency(f->c, 5, 0, &l), REGCACHE_ERR_INVALID);
}

/* Registrations, failures and registered bytes per rail; the bytes go
 * with the entries. */
static void figures_per_rail(void **state)
{
    struct fx *f = *state;
    two_rails(f);
    fx_use(f, A, 10);
    fx_use(f, B, 10);
    regcache_put(f->c, fx_get_rail(f, 1, A, 10));
    f->fb.fail_errno = EINVAL;
    f->fb.fail_count = 1;
    f->fb.fail_rail = 1;
    regcache_entry_t *e;
    assert_int_equal(regcache_get_rail(f->c, 1, (void *)B, 10, &e), REGCACHE_ERR_BACKEND);
    struct regcache_stats s = fx_stats(f);
    assert_int_equal(s.rails, 2);
    assert_int_equal(s.rail_registrations[0], 2);
    assert_int_equal(s.rail_registrations[1], 1);
    assert_int_equal(s.rail_reg_failures[0], 0);
    assert_int_equal(s.rail_reg_failures[1], 1);
    assert_int_equal(s.rail_bytes[0], 2 * MiB);
    assert_int_equal(s.rail_bytes[1], MiB);
    /* No dmabuf in a custom backend. */
    assert_int_equal(s.dmabuf_mapping[0], REGCACHE_DMABUF_NONE);
    assert_int_equal(regcache_flush(f->c), REGCACHE_OK);
    s = fx_stats(f);
    assert_int_equal(s.rail_bytes[0], 0);
    assert_int_equal(s.rail_bytes[1], 0);
    assert_int_equal(s.rail_registrations[0], 2); /* counters stay */
}

/* Each way out is counted under its reason. */
static void leaves_by_reason(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 3);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    f->p.max_entries = 2;
    fx_create(f);
    fx_use(f, A, 10);
    fx_use(f, B, 10);
    fx_use(f, C, 10); /* evicts A */
    regcache_invalidate(f->c, (void *)B, 10);
    regcache_notify_free((void *)C, 10);
    fx_use(f, A, 10);
    regcache_flush(f->c);
    struct regcache_stats s = fx_stats(f);
    assert_int_equal(s.leaves[REGCACHE_REASON_EVICT_BUDGET], 1);
    assert_int_equal(s.leaves[REGCACHE_REASON_INVALIDATE], 1);
    assert_int_equal(s.leaves[REGCACHE_REASON_FREED_HOOK], 1);
    assert_int_equal(s.leaves[REGCACHE_REASON_FLUSH], 1);
    assert_int_equal(s.leaves[REGCACHE_REASON_FREED_TAG], 0);
}

/* The devices a get asked for are listed, host first; any other is an
 * error for the device statistics and the latency. */
static void devices_seen_and_unknown_device(void **state)
{
    struct fx *f = *state;
    fx_device_alloc(f, 0);
    fx_pageable_alloc(f, B, MiB);
    f->p.host_memory = 1;
    fx_create(f);
    int devices[4];
    size_t n = 99;
    assert_int_equal(regcache_get_devices(f->c, devices, 4, &n), REGCACHE_OK);
    assert_int_equal(n, 0);
    fx_use(f, A, 10);
    fx_use(f, B, 10);
    assert_int_equal(regcache_get_devices(f->c, devices, 4, &n), REGCACHE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(devices[0], REGCACHE_DEVICE_HOST);
    assert_int_equal(devices[1], 0);
    assert_int_equal(regcache_get_devices(f->c, devices, 1, &n), REGCACHE_OK);
    assert_int_equal(n, 2); /* how many there are, beyond max */
    assert_int_equal(regcache_get_devices(f->c, NULL, 0, &n), REGCACHE_OK);
    assert_int_equal(regcache_get_devices(f->c, NULL, 1, &n), REGCACHE_ERR_INVALID);
    struct regcache_stats s;
    assert_int_equal(regcache_get_device_stats(f->c, 0, &s), REGCACHE_OK);
    assert_int_equal(s.entries, 1);
    assert_int_equal(regcache_get_device_stats(f->c, REGCACHE_DEVICE_HOST, &s), REGCACHE_OK);
    assert_int_equal(s.entries, 1);
    assert_int_equal(regcache_get_device_stats(f->c, 7, &s), REGCACHE_ERR_INVALID);
    fx_assert_error_says("device 7", "regcache_get_devices", NULL);
}

/* A reset restarts the counters and the histograms; what the cache holds
 * stays. */
static void reset_restarts_counters_only(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    f->p.validation = REGCACHE_VALIDATE_NOTIFY;
    fx_create(f);
    fx_use(f, A, 10);
    fx_use(f, A, 10);
    fx_use(f, B, 10);
    regcache_invalidate(f->c, (void *)B, 10);
    assert_int_equal(regcache_reset_stats(f->c), REGCACHE_OK);
    fx_assert_stats(f, FX_STAT(hits, 0), FX_STAT(misses, 0), FX_STAT(registrations, 0),
                    FX_STAT(deregistrations, 0), FX_STAT(invalidations_explicit, 0),
                    FX_STAT(entries, 1), FX_STAT(bytes, MiB), FX_STAT(peak_bytes, MiB),
                    FX_STAT(mrs, 1), NULL);
    struct regcache_stats s = fx_stats(f);
    assert_int_equal(s.rail_registrations[0], 0);
    assert_int_equal(s.rail_bytes[0], MiB);
    assert_int_equal(s.leaves[REGCACHE_REASON_INVALIDATE], 0);
    assert_int_equal(s.reg_latency_p50_ns, 0);
    struct regcache_latency l;
    assert_int_equal(regcache_get_latency(f->c, 0, 0, &l), REGCACHE_OK);
    assert_int_equal(l.count, 0);
    fx_use(f, A, 10);
    fx_use(f, B, 10);
    fx_assert_stats(f, FX_STAT(hits, 1), FX_STAT(misses, 1), FX_STAT(registrations, 1),
                    FX_STAT(mrs, 2), FX_STAT(peak_bytes, 2 * MiB), NULL);
    assert_int_equal(regcache_reset_stats(NULL), REGCACHE_ERR_INVALID);
}

struct seen {
    struct regcache_entry_info info[8];
    int n, stop_after;
};

static int collect(void *arg, const struct regcache_entry_info *info)
{
    struct seen *s = arg;
    s->info[s->n++] = *info;
    return s->n == s->stop_after ? 42 : 0;
}

/* Every entry with its range, device, rails, holders and bytes; a
 * callback may stop the walk, and may call the library meanwhile. */
static void entry_dump(void **state)
{
    struct fx *f = *state;
    two_rails(f);
    regcache_entry_t *held = fx_get(f, A, 10);
    regcache_put(f->c, fx_get_rail(f, 1, A, 10));
    fx_use(f, B, 10);
    struct seen s = { .stop_after = 0 };
    assert_int_equal(regcache_foreach_entry(f->c, collect, &s), REGCACHE_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.info[0].start, A);
    assert_int_equal(s.info[0].bytes, MiB);
    assert_int_equal(s.info[0].device, 0);
    assert_int_equal(s.info[0].rails, 3);
    assert_int_equal(s.info[0].holders, 1);
    assert_int_equal(s.info[1].start, B);
    assert_int_equal(s.info[1].rails, 1);
    assert_int_equal(s.info[1].holders, 0);
    s = (struct seen){ .stop_after = 1 };
    assert_int_equal(regcache_foreach_entry(f->c, collect, &s), 42);
    assert_int_equal(s.n, 1);
    regcache_put(f->c, held);

    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(regcache_print_entries(f->c, out), REGCACHE_OK);
    fclose(out);
    char line[128];
    snprintf(line, sizeof line, "regcache %s: 2 entries, %zu bytes\n", regcache_name(f->c),
             2 * MiB);
    assert_non_null(strstr(text, line));
    snprintf(line, sizeof line, "  %#jx-%#jx %zu bytes device 0 rails 0x3 holders 0 age ",
             (uintmax_t)A, (uintmax_t)(A + MiB), MiB);
    assert_non_null(strstr(text, line));
    free(text);
    assert_int_equal(regcache_foreach_entry(f->c, NULL, NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_print_entries(f->c, NULL), REGCACHE_ERR_INVALID);
}

/* params.name, else REGCACHE_NAME, else cache<N>; names that are not
 * names are refused. */
static void names(void **state)
{
    struct fx *f = *state;
    f->p.name = "ucx-rail:0";
    fx_create(f);
    assert_string_equal(regcache_name(f->c), "ucx-rail:0");
    regcache_t *c;
    struct regcache_params p = f->p;
    p.name = NULL;
    setenv("REGCACHE_NAME", "nccl", 1);
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_string_equal(regcache_name(c), "nccl");
    regcache_destroy(c);
    unsetenv("REGCACHE_NAME");
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_memory_equal(regcache_name(c), "cache", 5);
    regcache_destroy(c);
    p.name = "two words";
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
    fx_assert_error_says("params.name", NULL);
    char longer[REGCACHE_NAME_MAX + 1];
    memset(longer, 'x', REGCACHE_NAME_MAX);
    longer[REGCACHE_NAME_MAX] = '\0';
    p.name = longer;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_ERR_INVALID);
    assert_null(regcache_name(NULL));
}

FX_MAIN(latency_per_device_and_rail, figures_per_rail, leaves_by_reason,
        devices_seen_and_unknown_device, reset_restarts_counters_only, entry_dump, names)
