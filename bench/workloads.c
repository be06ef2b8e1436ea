/* The workloads that need regcache alone: pin/unpin per size, eviction
 * churn, and invalidation. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static const size_t pin_sizes[] = {
    (size_t)4 << 10, (size_t)64 << 10, (size_t)1 << 20,
    (size_t)16 << 20, (size_t)256 << 20, (size_t)1 << 30};

size_t bench_pin_size_list(const struct bench_opts *o, const size_t **sizes)
{
    (void)o;
    *sizes = pin_sizes;
    return BENCH_NELEM(pin_sizes);
}

/* A target that hits one cached range over and over. */
struct fixed {
    regcache_t *cache;
    void *addr;
    size_t len;
    uint64_t failures;
    uint64_t misses; /* the cache's count before the loop */
};

static void fixed_loop(void *ctx, uint64_t *rng, uint64_t count)
{
    struct fixed *f = ctx;
    (void)rng;
    for (uint64_t i = 0; i < count; i++) {
        regcache_entry_t *e;
        if (regcache_get(f->cache, f->addr, f->len, &e) != REGCACHE_OK) {
            f->failures++;
            continue;
        }
        regcache_put(f->cache, e);
    }
}

static int fixed_check(void *ctx, char *why, size_t why_len)
{
    struct fixed *f = ctx;
    struct regcache_stats st;
    regcache_get_stats(f->cache, &st);
    if (f->failures || st.misses != f->misses) {
        snprintf(why, why_len, "%llu gets failed, %llu missed",
                 (unsigned long long)f->failures,
                 (unsigned long long)(st.misses - f->misses));
        return -1;
    }
    return 0;
}

static struct bench_row *pin_row(const char *impl, const char *mode,
                                 const char *name, size_t size)
{
    struct bench_row *r = bench_row_add("pin", name);
    snprintf(r->impl, sizeof(r->impl), "%s", impl);
    snprintf(r->mode, sizeof(r->mode), "%s", mode);
    r->size = size;
    return r;
}

/* Each repetition timed alone: get+put of a range the cache does not hold,
 * then (untimed) an invalidation so that the next get misses again.
 * Returns the last status. */
static int miss_row(struct bench_row *r, regcache_t *cache, void *addr,
                    size_t size, const struct bench_opts *o, double raw_pin_ns)
{
    double *v = malloc(o->pin_reps * sizeof(*v));
    struct regcache_stats before, after;
    int st = REGCACHE_OK;

    if (!v) {
        snprintf(r->note, sizeof(r->note), "out of memory");
        return REGCACHE_ERR_NO_MEMORY;
    }
    regcache_get_stats(cache, &before);
    for (unsigned k = 0; k < o->pin_reps && st == REGCACHE_OK; k++) {
        regcache_entry_t *e;
        uint64_t t0 = bench_now_ns();
        st = regcache_get(cache, addr, size, &e);
        regcache_put(cache, e);
        v[k] = (double)(bench_now_ns() - t0);
        regcache_invalidate(cache, addr, size);
    }
    regcache_get_stats(cache, &after);
    if (st != REGCACHE_OK) {
        snprintf(r->note, sizeof(r->note), "failed: %s (%s)", regcache_strerror(st),
                 regcache_last_error());
        free(v);
        return st;
    }
    if (after.misses - before.misses != o->pin_reps)
        snprintf(r->note, sizeof(r->note), "only %llu of %u gets missed",
                 (unsigned long long)(after.misses - before.misses), o->pin_reps);
    struct bench_summary s = bench_summarize(v, o->pin_reps);
    free(v);
    r->median_ns = s.median;
    r->p99_ns = s.p99;
    /* Without a real backend (raw < 0) the null one costs next to nothing:
     * all of the miss is the cache's own overhead. */
    double over = r->median_ns - (raw_pin_ns > 0 ? raw_pin_ns : 0);
    bench_row_goal(r, over <= BENCH_GOAL_MISS_NS ? BENCH_MET : BENCH_MISSED,
                   "overhead <= %.0f ns beyond the backend (is %.0f ns)",
                   BENCH_GOAL_MISS_NS, over);
    return st;
}

static void hit_row(struct bench_row *r, regcache_t *cache, void *addr, size_t size,
                    const struct bench_opts *o, double raw_total_ns)
{
    struct regcache_stats st;
    regcache_entry_t *e;
    int s = regcache_get(cache, addr, size, &e); /* cached from here on */
    regcache_put(cache, e);
    regcache_get_stats(cache, &st);
    struct fixed f = {cache, addr, size, s != REGCACHE_OK, st.misses};
    struct bench_target t = {"fixed", &f, fixed_loop, fixed_check, NULL};
    bench_measure_hit(r, &t, o);
    if (raw_total_ns > 0 && r->median_ns > 0) {
        r->derived = raw_total_ns / r->median_ns;
        snprintf(r->derived_what, sizeof(r->derived_what), "x faster than raw pin+unpin");
    }
    regcache_invalidate(cache, addr, size);
}

void bench_pin_rows(const char *impl, const char *label, regcache_t *cache,
                    void *addr, size_t size, const struct bench_opts *o,
                    double raw_pin_ns, double raw_total_ns)
{
    char name[96];
    snprintf(name, sizeof(name), "miss: first get+put, %s", label);
    struct bench_row *miss = pin_row(impl, "miss", name, size);
    snprintf(name, sizeof(name), "hit: get+put, %s", label);
    struct bench_row *hit = pin_row(impl, "hit", name, size);
    if (miss_row(miss, cache, addr, size, o, raw_pin_ns) == REGCACHE_OK)
        hit_row(hit, cache, addr, size, o, raw_total_ns);
    else
        snprintf(hit->note, sizeof(hit->note), "not run: the misses failed");
}

void bench_pin_sizes(const struct bench_opts *o)
{
    size_t top = pin_sizes[BENCH_NELEM(pin_sizes) - 1];
    /* Reserved, never touched: the null backend does not read memory. */
    void *p = mmap(NULL, 2 * top, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        bench_skip("pin/unpin per size", "cannot reserve %zu bytes", 2 * top);
        return;
    }
    void *addr = (void *)(((uintptr_t)p + top - 1) & ~(uintptr_t)(top - 1));
    for (size_t k = 0; k < BENCH_NELEM(pin_sizes); k++) {
        struct bench_rc rc;
        int st = bench_rc_create(&rc, BENCH_TAG_CHECK, pin_sizes[k], 0, 0);
        if (st != REGCACHE_OK) {
            bench_skip("pin/unpin per size", "regcache_create: %s",
                       regcache_strerror(st));
            break;
        }
        struct bench_row *raw = bench_row_find("pin", "raw", "pin+unpin", 0, 0,
                                               pin_sizes[k]);
        struct bench_row *pin = bench_row_find("pin", "raw", "pin", 0, 0,
                                               pin_sizes[k]);
        bench_pin_rows("regcache", "null backend", rc.cache, addr, pin_sizes[k], o,
                       pin ? pin->median_ns : -1, raw ? raw->median_ns : -1);
        bench_rc_destroy(&rc);
    }
    munmap(p, 2 * top);
}

/* ---- eviction churn ------------------------------------------------------ */

/* A working set twice the budget, walked in a cycle: with LRU every get
 * misses and evicts the oldest entry, the worst case for the budget. */
struct cycle {
    regcache_t *cache;
    uintptr_t base;
    size_t regions, next;
    uint64_t failures;
};

static void cycle_loop(void *ctx, uint64_t *rng, uint64_t count)
{
    struct cycle *c = ctx;
    (void)rng;
    for (uint64_t i = 0; i < count; i++) {
        regcache_entry_t *e;
        void *a = (void *)(c->base + c->next * BENCH_REGION_SIZE);
        c->next = c->next + 1 == c->regions ? 0 : c->next + 1;
        if (regcache_get(c->cache, a, BENCH_GET_SIZE, &e) != REGCACHE_OK) {
            c->failures++;
            continue;
        }
        regcache_put(c->cache, e);
    }
}

static int cycle_check(void *ctx, char *why, size_t why_len)
{
    struct cycle *c = ctx;
    if (!c->failures)
        return 0;
    snprintf(why, why_len, "%llu gets failed", (unsigned long long)c->failures);
    return -1;
}

static void churn_one(const struct bench_opts *o, const struct bench_space *s,
                      size_t budget, int by_bytes)
{
    struct bench_row *r = bench_row_add("churn", by_bytes
                                                      ? "evicting get+put, max_bytes budget"
                                                      : "evicting get+put, max_entries budget");
    struct bench_rc rc;
    struct regcache_stats before, after;

    snprintf(r->impl, sizeof(r->impl), "regcache");
    snprintf(r->mode, sizeof(r->mode), "%s", by_bytes ? "max_bytes" : "max_entries");
    r->entries = budget;
    int st = bench_rc_create(&rc, BENCH_TAG_CHECK, BENCH_REGION_SIZE,
                             by_bytes ? budget * BENCH_REGION_SIZE : 0,
                             by_bytes ? 0 : budget);
    if (st != REGCACHE_OK) {
        snprintf(r->note, sizeof(r->note), "regcache_create: %s", regcache_strerror(st));
        return;
    }
    struct cycle c = {rc.cache, s->base, 2 * budget, 0, 0};
    struct bench_target t = {"cycle", &c, cycle_loop, cycle_check, NULL};
    /* Fill the cache first so that every timed get evicts. */
    cycle_loop(&c, NULL, 2 * budget);
    regcache_get_stats(rc.cache, &before);
    uint64_t t0 = bench_now_ns();
    bench_measure_hit(r, &t, o);
    double secs = (double)(bench_now_ns() - t0) * 1e-9;
    regcache_get_stats(rc.cache, &after);
    uint64_t gets = (after.hits - before.hits) + (after.misses - before.misses);
    /* Mops here: millions of evictions per second. */
    r->mops = (double)(after.evictions - before.evictions) / secs * 1e-6;
    if (!r->note[0])
        snprintf(r->note, sizeof(r->note),
                 "%.0f%% of gets missed, %.2f M evictions/s, %llu entries at end",
                 gets ? 100.0 * (double)(after.misses - before.misses) / (double)gets
                      : 0.0,
                 r->mops, (unsigned long long)after.entries);
    /* The miss penalty: what an evicting get+put costs over a hit on a
     * table of the same size. */
    struct bench_row *hit = bench_row_find("entries", "regcache", "TAG_CHECK",
                                           budget, 0, 0);
    if (hit && hit->median_ns > 0) {
        r->derived = r->median_ns - hit->median_ns;
        snprintf(r->derived_what, sizeof(r->derived_what), "ns miss penalty over a hit");
    }
    bench_rc_destroy(&rc);
}

void bench_churn(const struct bench_opts *o)
{
    /* 1000 matches a row of the hit-cost table, for the penalty. */
    size_t budget = 1000;
    struct bench_space s;
    if (bench_space_map(&s, 2 * budget) != 0) {
        bench_skip("eviction churn", "cannot map %zu regions", 2 * budget);
        return;
    }
    churn_one(o, &s, budget, 0);
    churn_one(o, &s, budget, 1);
    bench_space_unmap(&s);
}

/* ---- invalidation -------------------------------------------------------- */

/* notify_free of ranges that hold no entry: the common case, every free of
 * memory that was never registered. */
struct notify_none {
    uintptr_t base;
    size_t regions;
};

static void notify_loop(void *ctx, uint64_t *rng, uint64_t count)
{
    struct notify_none *n = ctx;
    for (uint64_t i = 0; i < count; i++)
        regcache_notify_free(bench_pick(n->base, n->regions, rng), BENCH_REGION_SIZE);
}

/* notify_free of a range holding one cached entry, which it drops; each
 * call timed alone, the entry restored untimed. */
static void notify_drop_row(const struct bench_opts *o, const struct bench_space *s,
                            regcache_t *cache, size_t entries)
{
    struct bench_row *r = bench_row_add("notify", "notify_free dropping one entry");
    double *v = malloc(o->pin_reps * sizeof(*v));
    uint64_t rng = 7;
    struct regcache_stats before, after;

    snprintf(r->impl, sizeof(r->impl), "regcache");
    r->entries = entries;
    if (!v) {
        snprintf(r->note, sizeof(r->note), "out of memory");
        return;
    }
    regcache_get_stats(cache, &before);
    for (unsigned k = 0; k < o->pin_reps; k++) {
        void *a = bench_pick(s->base, entries, &rng);
        regcache_entry_t *e;
        uint64_t t0 = bench_now_ns();
        regcache_notify_free(a, BENCH_GET_SIZE);
        v[k] = (double)(bench_now_ns() - t0);
        if (regcache_get(cache, a, BENCH_GET_SIZE, &e) == REGCACHE_OK)
            regcache_put(cache, e);
    }
    regcache_get_stats(cache, &after);
    struct bench_summary ns = bench_summarize(v, o->pin_reps);
    free(v);
    r->median_ns = ns.median;
    r->p99_ns = ns.p99;
    uint64_t dropped = after.invalidations_notify - before.invalidations_notify;
    if (dropped != o->pin_reps)
        snprintf(r->note, sizeof(r->note), "%llu of %u calls dropped an entry",
                 (unsigned long long)dropped, o->pin_reps);
}

static void notify_rows(const struct bench_opts *o, const struct bench_space *s,
                        size_t entries)
{
    struct bench_row *none = bench_row_add("notify", "notify_free, no entry in range");
    struct bench_rc rc;

    snprintf(none->impl, sizeof(none->impl), "regcache");
    none->entries = entries;
    if (bench_rc_create(&rc, BENCH_HOOKS, BENCH_REGION_SIZE, 0, 0) != REGCACHE_OK) {
        snprintf(none->note, sizeof(none->note), "regcache_create failed");
        return;
    }
    /* Cached: the first `entries` regions; freed: the regions after them. */
    for (size_t i = 0; i < entries; i++) {
        regcache_entry_t *e;
        if (regcache_get(rc.cache, (void *)(s->base + i * BENCH_REGION_SIZE),
                         BENCH_GET_SIZE, &e) == REGCACHE_OK)
            regcache_put(rc.cache, e);
    }
    struct notify_none nn = {s->base + entries * BENCH_REGION_SIZE, s->regions - entries};
    struct bench_target t = {"notify", &nn, notify_loop, NULL, NULL};
    bench_measure_hit(none, &t, o);
    if (entries)
        notify_drop_row(o, s, rc.cache, entries);
    bench_rc_destroy(&rc);
}

void bench_notify(const struct bench_opts *o)
{
    static const size_t counts[] = {0, 1000, 100000};
    struct bench_space s;
    size_t top = counts[BENCH_NELEM(counts) - 1];
    /* Room for the cached regions and as many freed ones beside them. */
    if (bench_space_map(&s, 2 * top) != 0) {
        bench_skip("invalidation", "cannot map %zu regions", 2 * top);
        return;
    }
    for (size_t k = 0; k < BENCH_NELEM(counts); k++)
        notify_rows(o, &s, counts[k]);
    bench_space_unmap(&s);
}
