/* What the host memory monitor costs, null backend, host_memory on: the
 * munmap and mmap again of a cached 2 MiB range it watches, beside the same
 * of a range it does not (a cache with the monitor off, whose entry the
 * untimed step invalidates explicitly, as that contract asks), and a host
 * hit with the monitor on and off.  Interleaved, so that the report
 * compares neighbouring samples. */
#include "bench.h"

#include <stdatomic.h>
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

/* The unmaps and maps all succeeded (what they deregister varies). */
static int unmap_check(void *ctx, char *why, size_t len)
{
    struct mon *m = ctx;
    uint64_t failed = atomic_load(&m->use.failures);
    if (failed)
        snprintf(why, len, "%llu munmap or mmap calls failed", (unsigned long long)failed);
    return failed ? -1 : 0;
}

static void hit_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct mon *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&m->use, (uintptr_t)m->base, RANGE);
}

static regcache_t *host_cache(int monitor)
{
    static struct regcache_backend b = { bench_null_reg, bench_null_dereg, NULL, NULL };
    struct regcache_params p;
    regcache_t *c = NULL;
    regcache_params_init(&p);
    p.backend = &b;
    p.host_memory = 1;
    p.alignment = RANGE;
    p.host_monitor = monitor ? REGCACHE_HOST_MONITOR_AUTO : REGCACHE_HOST_MONITOR_OFF;
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

void bench_host_monitor(void)
{
    static const char *const what[4] = { "munmap+mmap watched", "munmap+mmap unwatched",
                                         "hit watched", "hit unwatched" };
    struct bench_row rows[4];
    struct mon m[2];
    for (int i = 0; i < 4; i++)
        rows[i] = (struct bench_row){ .workload = "host_monitor",
                                      .source = "null",
                                      .impl = "regcache",
                                      .what = what[i],
                                      .size = RANGE };
    for (int k = 0; k < 2; k++) {
        m[k] = (struct mon){ { .cache = host_cache(!k),
                               .counter = offsetof(struct regcache_stats, deregistrations) },
                             map_ranges(),
                             !k };
        char why[160] = "";
        if (!m[k].use.cache || !m[k].base)
            snprintf(why, sizeof why, "%s",
                     !m[k].base ? "cannot map the ranges" : regcache_last_error());
        else if (!k && !strstr(regcache_validation_reason(m[k].use.cache), "monitored by"))
            snprintf(why, sizeof why, "%s", regcache_validation_reason(m[k].use.cache));
        if (why[0]) {
            for (int i = 0; i < 4; i++) {
                bench_note(&rows[i], "%s", why);
                bench_emit(&rows[i]);
            }
            for (int j = 0; j <= k; j++) {
                regcache_destroy(m[j].use.cache);
                if (m[j].base)
                    munmap(m[j].base, 2 * RANGES * RANGE);
            }
            return;
        }
    }
    const struct bench_op ops[4] = {
        { unmap_run, recache, unmap_check, &m[0] },
        { unmap_run, recache, unmap_check, &m[1] },
        { hit_run, NULL, bench_use_check, &m[0] },
        { hit_run, NULL, bench_use_check, &m[1] },
    };
    recache(&m[0]);
    recache(&m[1]);
    bench_interleave(
        (struct bench_arm[]){ { &rows[0], &ops[0], RANGES, 0 }, { &rows[1], &ops[1], RANGES, 0 } },
        2);
    for (int k = 0; k < 2; k++) {
        recache(&m[k]);
        m[k].use.counter = offsetof(struct regcache_stats, misses);
        m[k].use.expect = bench_counter(&m[k].use);
    }
    bench_interleave((struct bench_arm[]){ { &rows[2], &ops[2], bench.batch, 0 },
                                           { &rows[3], &ops[3], bench.batch, 0 } },
                     2);
    for (int k = 0; k < 2; k++) {
        regcache_destroy(m[k].use.cache);
        munmap(m[k].base, 2 * RANGES * RANGE);
    }
}
