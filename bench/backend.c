/* The one backend every cache in the harness is built with, and the CPU
 * source it describes.  Its callbacks are the only code here that follows
 * struct regcache_backend's signatures: an API change to them changes
 * this file alone. */
#include "bench.h"

#include <stdio.h>
#include <sys/mman.h>

static int reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    const struct bench_pinner *p = arg;
    return p ? p->pin(addr, len, handle) : bench_null_reg(arg, addr, len, device, rail, handle);
}

static void dereg(void *arg, void *handle)
{
    const struct bench_pinner *p = arg;
    if (p)
        p->unpin(handle);
}

int bench_backend_pin(const struct bench_pinner *p, void *addr, size_t len)
{
    void *handle;
    int err = reg((void *)p, addr, len, 0, 0, &handle);
    if (!err)
        dereg((void *)p, handle);
    return err;
}

/* Called through a pointer the compiler cannot see through, as the cache
 * calls it. */
static int (*volatile null_query_ptr)(void *, const void *, size_t,
                                      struct regcache_mem_info *) = bench_null_query;

static void null_tag(void *ctx, struct bench_lane *l, uint64_t n)
{
    const struct bench_src *s = ctx;
    uint64_t sum = 0, rng = l->rng;
    for (uint64_t i = 0; i < n; i++) {
        struct regcache_mem_info info;
        null_query_ptr(NULL, bench_pick(s->base, s->regions, &rng), BENCH_GET, &info);
        sum += info.buffer_id;
    }
    l->rng = rng;
    l->sink += sum;
}

/* A million regions of untouched, never-backed address space (UCX checks
 * the mapping's protection, so it is read-write). */
int bench_null_source(struct bench_src *s)
{
    size_t regions = bench_entries[BENCH_NELEM(bench_entries) - 1];
    void *p = mmap(NULL, (regions + 1) * BENCH_REGION, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    *s = (struct bench_src){ "null",
                             ((uintptr_t)p + BENCH_REGION - 1) & ~(BENCH_REGION - 1),
                             regions,
                             0,
                             { null_tag, NULL, NULL, NULL } };
    return 0;
}

regcache_t *bench_cache(const struct bench_src *s, const struct bench_pinner *p, int validation,
                        size_t max_entries, size_t max_bytes, char *why, size_t len)
{
    /* The cache keeps its own copy of the backend. */
    struct regcache_backend b = {
        .reg = reg, .dereg = dereg, .arg = (void *)p, .query = s->driver ? NULL : bench_null_query
    };
    struct regcache_params params;
    regcache_t *c;
    regcache_params_init(&params);
    params.backend = &b;
    params.validation = validation;
    /* 0 would mean "free BAR1" for GPU memory: ask for no limit. */
    params.max_bytes = max_bytes ? max_bytes : (size_t)1 << 56;
    params.max_entries = max_entries;
    /* Each region its own entry, also inside one large cuMemAlloc. */
    params.whole_allocation = 0;
    int st = regcache_create(&params, &c);
    if (st == REGCACHE_OK)
        return c;
    snprintf(why, len, "regcache_create: %s (%s)", regcache_strerror(st), regcache_last_error());
    return NULL;
}

void bench_host_params(struct regcache_params *p, size_t alignment,
                       enum regcache_host_monitor monitor)
{
    static const struct regcache_backend null = { .reg = bench_null_reg,
                                                  .dereg = bench_null_dereg };
    regcache_params_init(p);
    p->backend = &null;
    p->host_memory = 1;
    if (alignment)
        p->alignment = alignment;
    p->host_monitor = monitor;
}
