/* regcache driven through its public API with a backend that registers
 * nothing, so that what is timed is the cache's own path. */
#include "bench.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

const char *bench_rc_mode_name(enum bench_rc_mode mode)
{
    return mode == BENCH_HOOKS ? "HOOKS" : "TAG_CHECK";
}

/* Any non-NULL handle will do: nothing is registered. */
static char token;

static int null_reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)arg, (void)addr, (void)len, (void)device, (void)rail;
    *handle = &token;
    return 0;
}

static void null_dereg(void *arg, void *handle)
{
    (void)arg, (void)handle;
}

const struct regcache_backend bench_null_backend = {null_reg, null_dereg, NULL, NULL};

/* A fixed id: the memory never changes, so every tag check passes. */
#define NULL_BUFFER_ID 42

static int null_query(void *arg, const void *addr, size_t len,
                      struct regcache_mem_info *info)
{
    const struct bench_rc *rc = arg;
    (void)len;
    info->base = (uintptr_t)addr & ~(uintptr_t)(rc->granule - 1);
    info->size = rc->granule;
    info->buffer_id = NULL_BUFFER_ID;
    info->device = 0;
    info->type = REGCACHE_MEM_DEVICE;
    return REGCACHE_OK;
}

int bench_rc_create(struct bench_rc *rc, enum bench_rc_mode mode,
                    size_t granule, size_t max_bytes, size_t max_entries)
{
    struct regcache_params p;
    regcache_params_init(&p);
    rc->granule = granule;
    rc->backend = (struct regcache_backend){null_reg, null_dereg, rc, null_query};
    p.backend = &rc->backend;
    p.validation = mode == BENCH_HOOKS ? REGCACHE_VALIDATE_HOOKS
                                       : REGCACHE_VALIDATE_TAG_CHECK;
    /* 0 would mean "free BAR1" for device memory: ask for no limit. */
    p.max_bytes = max_bytes ? max_bytes : (size_t)1 << 56;
    p.max_entries = max_entries;
    return regcache_create(&p, &rc->cache);
}

void bench_rc_destroy(struct bench_rc *rc)
{
    regcache_destroy(rc->cache);
    rc->cache = NULL;
}

struct rc_target {
    struct bench_rc rc; /* unused when the cache came from elsewhere */
    regcache_t *cache;
    uintptr_t base;
    size_t regions;
    atomic_uint next_slice; /* thread-private variant: slices handed out */
    uint64_t misses; /* the cache's miss count once populated */
    atomic_uint_fast64_t failures;
    int first_error;
};

static void rc_loop(void *ctx, uint64_t *rng, uint64_t count)
{
    struct rc_target *t = ctx;
    for (uint64_t i = 0; i < count; i++) {
        regcache_entry_t *e;
        int st = regcache_get(t->cache, bench_pick(t->base, t->regions, rng),
                              BENCH_GET_SIZE, &e);
        if (st != REGCACHE_OK) {
            if (atomic_fetch_add(&t->failures, 1) == 0)
                t->first_error = st;
            continue;
        }
        regcache_put(t->cache, e);
    }
}

/* Thread-private working sets, as a transport with buffers per queue pair
 * uses the cache: the first time a thread runs the loop it takes the next
 * of BENCH_PRIVATE_SLICES slices of the regions and stays inside it.
 * Threads are new for every run, so each run hands out fresh slices. */
#define BENCH_PRIVATE_SLICES 16
static _Thread_local const struct rc_target *slice_owner;
static _Thread_local uintptr_t slice_base;

static void rc_private_loop(void *ctx, uint64_t *rng, uint64_t count)
{
    struct rc_target *t = ctx;
    size_t per = t->regions / BENCH_PRIVATE_SLICES;
    if (slice_owner != t) {
        unsigned k = atomic_fetch_add(&t->next_slice, 1) % BENCH_PRIVATE_SLICES;
        slice_owner = t;
        slice_base = t->base + (uintptr_t)k * per * BENCH_REGION_SIZE;
    }
    for (uint64_t i = 0; i < count; i++) {
        regcache_entry_t *e;
        int st = regcache_get(t->cache, bench_pick(slice_base, per, rng), BENCH_GET_SIZE, &e);
        if (st != REGCACHE_OK) {
            if (atomic_fetch_add(&t->failures, 1) == 0)
                t->first_error = st;
            continue;
        }
        regcache_put(t->cache, e);
    }
}

static int rc_check(void *ctx, char *why, size_t why_len)
{
    struct rc_target *t = ctx;
    struct regcache_stats st;
    uint64_t failures = atomic_load(&t->failures);
    if (failures) {
        snprintf(why, why_len, "%llu gets failed (%s)",
                 (unsigned long long)failures, regcache_strerror(t->first_error));
        return -1;
    }
    regcache_get_stats(t->cache, &st);
    if (st.misses != t->misses) {
        snprintf(why, why_len, "%llu misses in the hit loop",
                 (unsigned long long)(st.misses - t->misses));
        return -1;
    }
    return 0;
}

static void rc_close(void *ctx)
{
    struct rc_target *t = ctx;
    if (t->rc.cache)
        bench_rc_destroy(&t->rc);
    free(t);
}

/* Cache every region, then remember the miss count: the hit loop must not
 * add to it. */
static int populate(struct rc_target *t, char *why, size_t why_len)
{
    struct regcache_stats st;
    for (size_t i = 0; i < t->regions; i++) {
        regcache_entry_t *e;
        int s = regcache_get(t->cache, (void *)(t->base + i * BENCH_REGION_SIZE),
                             BENCH_GET_SIZE, &e);
        if (s != REGCACHE_OK) {
            snprintf(why, why_len, "populating: %s (%s)", regcache_strerror(s),
                     regcache_last_error());
            return -1;
        }
        regcache_put(t->cache, e);
    }
    regcache_get_stats(t->cache, &st);
    if (st.entries != t->regions) {
        snprintf(why, why_len, "%llu entries cached for %zu regions",
                 (unsigned long long)st.entries, t->regions);
        return -1;
    }
    t->misses = st.misses;
    return 0;
}

static int wrap(struct bench_target *bt, struct rc_target *t,
                const struct bench_space *s, char *why, size_t why_len)
{
    t->base = s->base;
    t->regions = s->regions;
    *bt = (struct bench_target){"regcache", t, rc_loop, rc_check, rc_close};
    if (populate(t, why, why_len) != 0) {
        rc_close(t);
        return -1;
    }
    return 0;
}

int bench_rc_target(struct bench_target *bt, const struct bench_space *s,
                    enum bench_rc_mode mode, char *why, size_t why_len)
{
    struct rc_target *t = calloc(1, sizeof(*t));
    int st;
    if (!t) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    st = bench_rc_create(&t->rc, mode, BENCH_REGION_SIZE, 0, 0);
    if (st != REGCACHE_OK) {
        snprintf(why, why_len, "regcache_create: %s (%s)", regcache_strerror(st),
                 regcache_last_error());
        free(t);
        return -1;
    }
    t->cache = t->rc.cache;
    return wrap(bt, t, s, why, why_len);
}

int bench_rc_private_target(struct bench_target *bt, const struct bench_space *s,
                            enum bench_rc_mode mode, char *why, size_t why_len)
{
    if (bench_rc_target(bt, s, mode, why, why_len) != 0)
        return -1;
    bt->loop = rc_private_loop;
    return 0;
}

int bench_rc_target_on(struct bench_target *bt, regcache_t *cache,
                       const struct bench_space *s, char *why, size_t why_len)
{
    struct rc_target *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    t->cache = cache;
    return wrap(bt, t, s, why, why_len);
}

/* The bare query: what the tag check costs the callback's owner, called
 * through a pointer the compiler cannot see through, as the cache does. */
struct query_target {
    struct bench_rc rc;
    int (*volatile query)(void *, const void *, size_t, struct regcache_mem_info *);
    uintptr_t base;
    size_t regions;
    volatile uint64_t sink;
};

static void query_loop(void *ctx, uint64_t *rng, uint64_t count)
{
    struct query_target *t = ctx;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < count; i++) {
        struct regcache_mem_info info;
        t->query(&t->rc, bench_pick(t->base, t->regions, rng), BENCH_GET_SIZE,
                 &info);
        sum += info.buffer_id;
    }
    t->sink = sum;
}

void bench_query_target(struct bench_target *bt, const struct bench_space *s)
{
    static struct query_target t;
    t.rc.granule = BENCH_REGION_SIZE;
    t.query = null_query;
    t.base = s->base;
    t.regions = s->regions;
    *bt = (struct bench_target){"trivial query", &t, query_loop, NULL, NULL};
}
