/* The miss path: the backend's reg+dereg alone, the cache's get+put of
 * ranges it does not hold, and then its hit on one of them, interleaved
 * in blocks of samples so that the report can take the backend's share out of
 * each miss; with the shared BAR1 ledger on and off, both caches in the
 * same rounds, since the report compares them too. */
#include "bench.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* The three rows of one cache: reg+dereg, miss, hit. */
#define ROWS 3

struct miss {
    struct bench_use use; /* counts misses: one per miss get+put */
    const struct bench_pinner *p;
    uintptr_t base;
    size_t size;
    unsigned ops;
    struct bench_op op[ROWS];
    struct bench_row row[ROWS];
};

static void raw_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct miss *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        if (bench_backend_pin(m->p, (void *)(m->base + i * m->size), m->size) != 0)
            bench_failed(&m->use, REGCACHE_ERR_BACKEND);
}

static void miss_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct miss *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&m->use, m->base + i * m->size, m->size);
    m->use.expect += n;
}

static void hit_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct miss *m = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&m->use, m->base, m->size);
}

/* Untimed: every sample's ranges start out uncached. */
static void uncache(void *ctx)
{
    struct miss *m = ctx;
    regcache_invalidate(m->use.cache, (void *)m->base, m->ops * m->size);
}

/* m's cache (made now: regcache_create reads REGCACHE_LEDGER) and its
 * rows, from r; -1, with r emitted with a note, when there is none. */
static int miss_open(struct miss *m, const struct bench_row *r, const struct bench_src *s,
                     const struct bench_pinner *p, size_t size, unsigned ops)
{
    static const char *const what[ROWS] = { "reg+dereg", "miss", "hit" };
    char why[160];
    regcache_t *cache = bench_cache(s, p, REGCACHE_VALIDATE_NOTIFY, 0, 0, why, sizeof(why));
    *m = (struct miss){ { .cache = cache, .counter = offsetof(struct regcache_stats, misses) },
                        p,
                        s->base,
                        size,
                        ops,
                        { { raw_run, NULL, bench_use_check, m },
                          { miss_run, uncache, bench_use_check, m },
                          { hit_run, NULL, bench_use_check, m } },
                        { *r, *r, *r } };
    for (size_t i = 0; i < ROWS; i++) {
        m->row[i].impl = i ? "regcache" : "backend";
        m->row[i].what = what[i];
        m->row[i].size = size;
    }
    if (!m->use.cache) {
        bench_note(&m->row[0], "failed: %s", why);
        return -1;
    }
    for (size_t i = 1; i < ROWS; i++) {
        m->row[i].asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY);
        m->row[i].mode = regcache_validation_mode(m->use.cache);
    }
    return 0;
}

/* The rows of m[0..n) (n <= 2) interleaved, each row of every cache in
 * turn (reg+dereg on, off, miss on, off, hit on, off): a miss comes in the
 * round of the reg+dereg it is charged for and beside its twin of the
 * other cache, the pairs the report takes; then the caches go. */
static void measure(struct miss *m, size_t n)
{
    struct bench_arm arms[ROWS * 2];
    for (size_t k = 0; k < ROWS; k++)
        for (size_t i = 0; i < n; i++)
            arms[k * n + i] = (struct bench_arm){ .row = &m[i].row[k],
                                                  .op = &m[i].op[k],
                                                  .ops = k == ROWS - 1 ? bench.batch : m[i].ops };
    bench_interleave(arms, ROWS * n);
    for (size_t i = 0; i < n; i++)
        regcache_destroy(m[i].use.cache);
}

void bench_miss_rows(struct bench_row *r, const struct bench_src *s, const struct bench_pinner *p,
                     size_t size, unsigned ops)
{
    struct miss m;
    if (miss_open(&m, r, s, p, size, ops) == 0)
        measure(&m, 1);
}

/* The ledger is on unless REGCACHE_LEDGER=off, which regcache_create()
 * reads: the variable is set before each cache is made, then restored. */
void bench_misses(const struct bench_src *s)
{
    const char *env = getenv("REGCACHE_LEDGER");
    char was[64];
    snprintf(was, sizeof(was), "%s", env ? env : "");
    struct miss m[2];
    size_t n = 0;
    for (int off = 0; off < 2; off++) {
        struct bench_row r = { .workload = "misses",
                               .source = s->name,
                               .ledger = off ? "off" : "on" };
        if (off)
            setenv("REGCACHE_LEDGER", "off", 1);
        else
            unsetenv("REGCACHE_LEDGER");
        n += miss_open(&m[n], &r, s, NULL, BENCH_REGION, BENCH_MISS_BATCH) == 0;
    }
    if (env)
        setenv("REGCACHE_LEDGER", was, 1);
    else
        unsetenv("REGCACHE_LEDGER");
    measure(m, n);
}
