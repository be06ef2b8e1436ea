/* What the host memory monitor costs, null backend, host_memory on: the
 * munmap and mmap again of a cached 2 MiB range it watches - through
 * libc's hooks, through the userfaultfd and, with UCX loaded, through UCX's
 * events - beside the same of a range it does not (a cache with the monitor
 * off, whose entry the untimed step invalidates explicitly, as that
 * contract asks), and a host hit with the monitor on and off.  Run once
 * before UCX is loaded and once after (UCX's hooks then sit on the same
 * calls).  Interleaved, so that the report compares neighbouring
 * samples. */
#include "bench.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define RANGE ((size_t)2 << 20)
#define RANGES 8 /* unmapped per sample */

struct mon {
    struct bench_use use;
    char *base; /* RANGES ranges, each a mapping of its own */
    int monitored;
};

static char *map_at(char *at)
{
    return mmap(at, RANGE, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED_NOREPLACE : 0), -1, 0);
}

/* Untimed: every range cached (and, monitored, watched) again. */
static void recache(void *ctx)
{
    struct mon *m = ctx;
    for (size_t i = 0; i < RANGES; i++) {
        char *r = m->base + 2 * i * RANGE;
        if (!m->monitored)
            regcache_invalidate(m->use.cache, r, RANGE);
        bench_get_put(&m->use, (uintptr_t)r, RANGE);
    }
}

static void unmap_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct mon *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++) {
        char *r = m->base + 2 * (i % RANGES) * RANGE;
        if (munmap(r, RANGE) || map_at(r) != r)
            bench_failed(&m->use, REGCACHE_ERR_BAD_ADDRESS);
    }
}

/* The unmaps and maps all succeeded (what they deregister varies), and so
 * did the untimed gets that cached the ranges again. */
static int unmap_check(void *ctx, char *why, size_t len)
{
    struct mon *m = ctx;
    uint64_t failed = atomic_load(&m->use.failures);
    if (failed)
        snprintf(why, len, "%llu gets, munmap or mmap calls failed, the first with %s",
                 (unsigned long long)failed, regcache_strerror(m->use.error));
    return failed ? -1 : 0;
}

static void hit_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct mon *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&m->use, (uintptr_t)m->base, RANGE);
}

static regcache_t *host_cache(enum regcache_host_monitor monitor)
{
    struct regcache_params p;
    regcache_t *c = NULL;
    bench_host_params(&p, RANGE, monitor);
    return regcache_create(&p, &c) == REGCACHE_OK ? c : NULL;
}

/* Every other 2 MiB of 2 * RANGES ranges mapped: no two ranges merge into
 * one mapping. */
static char *map_ranges(void)
{
    char *base = mmap(NULL, 2 * RANGES * RANGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    for (size_t i = 0; i < RANGES; i++)
        if (mprotect(base + 2 * i * RANGE, RANGE, PROT_READ | PROT_WRITE)) {
            munmap(base, 2 * RANGES * RANGE);
            return NULL;
        }
    return base;
}

/* The caches compared: libc's hooks, the userfaultfd, UCX's events (with
 * UCX loaded only), none.  OFF last. */
#define WAYS 4
static const enum regcache_host_monitor ways[WAYS] = { REGCACHE_HOST_MONITOR_LIBC,
                                                       REGCACHE_HOST_MONITOR_UFFD,
                                                       REGCACHE_HOST_MONITOR_UCM,
                                                       REGCACHE_HOST_MONITOR_OFF };
static const char *const way_names[WAYS] = { "libc", "uffd", "ucm", "off" };
#define OFF (WAYS - 1)

static void destroy(struct mon *m, int n)
{
    for (int j = 0; j < n; j++) {
        regcache_destroy(m[j].use.cache);
        if (m[j].base)
            munmap(m[j].base, 2 * RANGES * RANGE);
    }
}

/* Why a way cannot be measured here, or "". */
static void check_way(const struct mon *m, char *why, size_t n)
{
    if (!m->use.cache || !m->base)
        snprintf(why, n, "%s", !m->base ? "cannot map the ranges" : regcache_last_error());
    else if (m->monitored && !strstr(regcache_validation_reason(m->use.cache), "monitored by"))
        snprintf(why, n, "%s", strstr(regcache_validation_reason(m->use.cache), "host memory"));
}

/* The host hit through libc's hooks beside one with the monitor off. */
static void hits(struct mon *m)
{
    static const char *const what[2] = { "hit watched", "hit unwatched" };
    struct bench_row rows[2];
    struct bench_op ops[2];
    for (int i = 0; i < 2; i++) {
        struct mon *k = &m[i ? OFF : 0];
        rows[i] = (struct bench_row){ .workload = "host_monitor",
                                      .source = "null",
                                      .impl = "regcache",
                                      .what = what[i],
                                      .size = RANGE };
        ops[i] = (struct bench_op){ hit_run, NULL, bench_use_check, k };
        recache(k);
        k->use.counter = offsetof(struct regcache_stats, misses);
        k->use.expect = bench_counter(&k->use);
    }
    bench_interleave((struct bench_arm[]){ { &rows[0], &ops[0], bench.batch, 0 },
                                           { &rows[1], &ops[1], bench.batch, 0 } },
                     2);
}

static void measure(bool ucx_loaded)
{
    struct bench_row rows[WAYS];
    struct bench_op ops[WAYS];
    struct bench_arm arms[WAYS];
    struct mon m[WAYS];
    char what[WAYS][48];
    bool usable[WAYS];
    int n = 0;
    for (int k = 0; k < WAYS; k++) {
        snprintf(what[k], sizeof what[k], "munmap+mmap %s%s", way_names[k],
                 ucx_loaded ? ", UCX" : "");
        rows[k] = (struct bench_row){ .workload = "host_monitor",
                                      .source = "null",
                                      .impl = "regcache",
                                      .what = what[k],
                                      .size = RANGE };
        usable[k] = false;
        m[k] = (struct mon){ .base = NULL };
        if (ways[k] == REGCACHE_HOST_MONITOR_UCM && !ucx_loaded)
            continue;
        m[k] = (struct mon){ { .cache = host_cache(ways[k]),
                               .counter = offsetof(struct regcache_stats, deregistrations) },
                             map_ranges(),
                             ways[k] != REGCACHE_HOST_MONITOR_OFF };
        char why[300] = "";
        check_way(&m[k], why, sizeof why);
        usable[k] = !why[0];
        ops[k] = (struct bench_op){ unmap_run, recache, unmap_check, &m[k] };
        if (usable[k]) {
            recache(&m[k]);
            arms[n++] = (struct bench_arm){ &rows[k], &ops[k], RANGES, 0 };
        } else {
            bench_note(&rows[k], "%s", why);
        }
    }
    if (n)
        bench_interleave(arms, (size_t)n);
    if (!ucx_loaded && usable[0] && usable[OFF])
        hits(m);
    else if (!ucx_loaded)
        for (int i = 0; i < 2; i++) {
            struct bench_row r = { .workload = "host_monitor",
                                   .source = "null",
                                   .impl = "regcache",
                                   .what = i ? "hit unwatched" : "hit watched",
                                   .size = RANGE };
            bench_note(&r, "no cache watched by libc's hooks to compare");
        }
    destroy(m, WAYS);
}

static void measure_beside_ucx(void)
{
    measure(true);
}

void bench_host_monitor(void)
{
    measure(false);
    struct bench_row skipped = { .workload = "host_monitor",
                                 .source = "null",
                                 .impl = "regcache",
                                 .what = "munmap+mmap, UCX",
                                 .size = RANGE };
    bench_beside_ucx_hooks(measure_beside_ucx, &skipped);
}
