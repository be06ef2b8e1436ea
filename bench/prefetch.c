/* Registration off the critical path: the hit on a range a background
 * registration brought in, beside the hit on one a miss registered; a
 * non-blocking get that misses (it queues the range and returns); and the
 * time to register a batch of allocations with 1, 4 and 16 workers
 * (regcache_prefetch_batch and regcache_prefetch_wait), per allocation. */
#include "bench.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define SET 1000     /* regions of each hit set */
#define ALLOCS 1000  /* allocations of one batch */
#define NONBLOCK 100 /* non-blocking misses per sample */

static const unsigned worker_counts[] = { 1, 4, 16 };

/* The regions [first, first + n) of s as ranges for regcache_prefetch_batch. */
static struct regcache_range *ranges_of(const struct bench_src *s, size_t first, size_t n)
{
    struct regcache_range *r = calloc(n, sizeof(*r));
    for (size_t i = 0; r && i < n; i++)
        r[i] = (struct regcache_range){ (void *)(s->base + (first + i) * BENCH_REGION),
                                        BENCH_REGION, 0 };
    return r;
}

static int prefetch_all(regcache_t *c, const struct regcache_range *r, size_t n)
{
    size_t queued;
    int rc = regcache_prefetch_batch(c, r, n, &queued);
    return rc == REGCACHE_OK ? regcache_prefetch_wait(c) : rc;
}

/* ---- hits: got vs prefetched ---------------------------------------------- */

struct hits {
    struct bench_use use; /* counts misses: none while timed */
    uintptr_t base[2];    /* the set a miss registered, the prefetched set */
    struct bench_op op[2];
    struct bench_row row[2];
};

static void hit_set(struct hits *h, int set, struct bench_lane *l, uint64_t n)
{
    uint64_t rng = l->rng;
    for (uint64_t i = 0; i < n; i++)
        bench_get_put(&h->use, (uintptr_t)bench_pick(h->base[set], SET, &rng), BENCH_GET);
    l->rng = rng;
}

static void hit_got(void *ctx, struct bench_lane *l, uint64_t n)
{
    hit_set(ctx, 0, l, n);
}

static void hit_prefetched(void *ctx, struct bench_lane *l, uint64_t n)
{
    hit_set(ctx, 1, l, n);
}

static void hit_rows(const struct bench_src *s)
{
    struct bench_row r = { .workload = "prefetch", .source = s->name, .entries = 2 * SET };
    struct hits h = { .row = { r, r } };
    char why[160];
    h.row[0].what = "hit";
    h.row[1].what = "hit after prefetch";
    h.use.cache = bench_cache(s, NULL, REGCACHE_VALIDATE_NOTIFY, 0, 0, why, sizeof(why));
    h.use.counter = offsetof(struct regcache_stats, misses);
    h.base[0] = s->base;
    h.base[1] = s->base + SET * BENCH_REGION;
    if (!h.use.cache) {
        bench_note(&h.row[0], "failed: %s", why);
        return;
    }
    struct regcache_range *ranges = ranges_of(s, SET, SET);
    int rc = ranges ? REGCACHE_OK : REGCACHE_ERR_NO_MEMORY;
    if (bench_populate(&h.use, h.base[0], SET, why, sizeof(why)) != 0)
        bench_note(&h.row[0], "invalid: %s", why);
    else if (rc != REGCACHE_OK || (rc = prefetch_all(h.use.cache, ranges, SET)) != REGCACHE_OK)
        bench_note(&h.row[1], "invalid: prefetch: %s", regcache_strerror(rc));
    else {
        for (int i = 0; i < 2; i++) {
            h.row[i].impl = "regcache";
            h.row[i].asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY);
            h.row[i].mode = regcache_validation_mode(h.use.cache);
            h.op[i] = (struct bench_op){ i ? hit_prefetched : hit_got, NULL, bench_use_check, &h };
        }
        struct bench_arm arms[2] = { { &h.row[0], &h.op[0], bench.batch, 0 },
                                     { &h.row[1], &h.op[1], bench.batch, 0 } };
        bench_interleave(arms, 2);
    }
    free(ranges);
    regcache_destroy(h.use.cache);
}

/* ---- the non-blocking miss ------------------------------------------------ */

struct nonblock {
    struct bench_use use; /* counts ranges queued: one per get */
    uintptr_t next;       /* the next sample's first region: never cached */
    uintptr_t last;       /* the last sample's */
    size_t left;          /* regions left for samples */
    int access;           /* the cache's params.access */
    struct bench_op op;
};

static void nonblock_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct nonblock *b = ctx;
    (void)l;
    for (uint64_t i = 0; i < n; i++) {
        regcache_entry_t *e;
        int rc = regcache_get_access(b->use.cache, 0, (void *)(b->next + i * BENCH_REGION),
                                     BENCH_GET, b->access, REGCACHE_GET_NONBLOCK, &e);
        if (rc != REGCACHE_ERR_AGAIN)
            bench_failed(&b->use, rc == REGCACHE_OK ? REGCACHE_ERR_INVALID : rc);
        if (rc == REGCACHE_OK)
            regcache_put(b->use.cache, e);
    }
    b->use.expect += n;
    b->last = b->next;
    b->next += n * BENCH_REGION;
}

/* Untimed: the last sample's registrations end and leave the cache, so
 * that each sample starts from the same empty cache and idle workers. */
static void nonblock_reset(void *ctx)
{
    struct nonblock *b = ctx;
    regcache_prefetch_wait(b->use.cache);
    if (b->next != b->last)
        regcache_invalidate(b->use.cache, (void *)b->last, b->next - b->last);
}

static void nonblock_rows(const struct bench_src *s)
{
    struct bench_row r = { .workload = "prefetch", .source = s->name, .what = "nonblocking miss" };
    struct nonblock b = { .next = s->base, .last = s->base };
    struct regcache_params defaults;
    regcache_params_init(&defaults);
    b.access = defaults.access;
    char why[160];
    b.use.cache = bench_cache(s, NULL, REGCACHE_VALIDATE_NOTIFY, 0, 0, why, sizeof(why));
    b.use.counter = offsetof(struct regcache_stats, prefetches);
    if (!b.use.cache) {
        bench_note(&r, "failed: %s", why);
        return;
    }
    r.impl = "regcache";
    r.asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY);
    r.mode = regcache_validation_mode(b.use.cache);
    b.op = (struct bench_op){ nonblock_run, nonblock_reset, bench_use_check, &b };
    /* Each sample's ranges are new: a range whose registration just ended
     * may still be listed as in flight for a moment. */
    if ((size_t)(bench.samples * 2 + 50) * NONBLOCK > s->regions)
        bench_note(&r, "needs %u regions", (bench.samples * 2 + 50) * NONBLOCK);
    else
        bench_interleave(&(struct bench_arm){ &r, &b.op, NONBLOCK, 0 }, 1);
    regcache_destroy(b.use.cache);
}

/* ---- a batch of allocations by 1, 4, 16 workers ----------------------------- */

struct batch {
    struct bench_use use; /* counts registrations: one per allocation */
    struct regcache_range *ranges;
    struct bench_op op;
};

static void batch_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct batch *b = ctx;
    (void)l;
    int rc = prefetch_all(b->use.cache, b->ranges, n);
    if (rc != REGCACHE_OK)
        bench_failed(&b->use, rc);
    b->use.expect += n;
}

/* Untimed: the batch leaves the cache again. */
static void batch_reset(void *ctx)
{
    struct batch *b = ctx;
    regcache_flush(b->use.cache);
}

/* Registrations run on the workers' threads, which start without the GPU's
 * context. */
static int pin_in_context(void *addr, size_t len, void **handle)
{
    if (bench_thread_start)
        bench_thread_start();
    return bench_dmabuf.pin(addr, len, handle);
}

static void batch_rows(const struct bench_src *s)
{
    struct batch b[BENCH_NELEM(worker_counts)];
    struct bench_row rows[BENCH_NELEM(worker_counts)];
    struct bench_arm arms[BENCH_NELEM(worker_counts)];
    char whats[BENCH_NELEM(worker_counts)][48];
    struct bench_pinner pinner = { pin_in_context, bench_dmabuf.unpin };
    const struct bench_pinner *p = s->driver ? &pinner : NULL;
    const char *env = getenv("REGCACHE_WORKERS");
    char was[32], why[160];
    snprintf(was, sizeof(was), "%s", env ? env : "");
    size_t n = 0;
    struct regcache_range *ranges = ranges_of(s, 0, ALLOCS);
    for (size_t i = 0; ranges && i < BENCH_NELEM(worker_counts); i++) {
        char count[16];
        snprintf(count, sizeof(count), "%u", worker_counts[i]);
        snprintf(whats[n], sizeof(whats[n]), "register %u, %u workers", ALLOCS, worker_counts[i]);
        setenv("REGCACHE_WORKERS", count, 1);
        rows[n] = (struct bench_row){ .workload = "prefetch",
                                      .source = s->name,
                                      .what = whats[n],
                                      .entries = ALLOCS,
                                      .threads = 0 };
        b[n] = (struct batch){ .ranges = ranges };
        b[n].use.cache = bench_cache(s, p, REGCACHE_VALIDATE_NOTIFY, 0, 0, why, sizeof(why));
        b[n].use.counter = offsetof(struct regcache_stats, registrations);
        if (!b[n].use.cache) {
            bench_note(&rows[n], "failed: %s", why);
            continue;
        }
        rows[n].impl = "regcache";
        rows[n].asked = bench_mode_name(REGCACHE_VALIDATE_NOTIFY);
        rows[n].mode = regcache_validation_mode(b[n].use.cache);
        b[n].op = (struct bench_op){ batch_run, batch_reset, bench_use_check, &b[n] };
        arms[n] = (struct bench_arm){ &rows[n], &b[n].op, ALLOCS, 0 };
        n++;
    }
    if (env)
        setenv("REGCACHE_WORKERS", was, 1);
    else
        unsetenv("REGCACHE_WORKERS");
    bench_interleave(arms, n);
    for (size_t i = 0; i < n; i++)
        regcache_destroy(b[i].use.cache);
    free(ranges);
}

void bench_prefetch(const struct bench_src *s)
{
    if (!s->driver) {
        hit_rows(s);
        nonblock_rows(s);
    }
    batch_rows(s);
}
