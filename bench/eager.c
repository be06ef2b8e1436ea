/* Eager registration (params.eager_min_bytes): how many first gets of new
 * allocations find them registered.  Each sample allocates EAGER_ALLOCS
 * allocations and gets each once, then frees them; its figure is the
 * share of those first gets that did not miss (a get that waits for the
 * allocation's registration in flight counts as a hit).  Two rows: the
 * gets after regcache_prefetch_wait() (every registration ended: each
 * should hit), and each get at once after its allocation (a race with the
 * workers, which the allocation only queued).
 *
 * On the null source the allocations are regions of its address space
 * reported with regcache_notify_alloc() and regcache_notify_free(), as
 * the hooks report the driver's; on cuda they are real cuMemAlloc
 * allocations (2 MiB) of a cache whose validation AUTO resolved to HOOKS
 * through the in-process interception, which reports them itself. */
#include "bench.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_api.h"

#define EAGER_ALLOCS 64
#define GPU_ALLOC ((size_t)2 << 20)

struct eager {
    regcache_t *cache;
    const struct bench_src *s;
    uintptr_t at[EAGER_ALLOCS];
    size_t len;
    int failed; /* the first failure, or 0 */
    char why[160];
};

static void fail(struct eager *x, int status, const char *what)
{
    if (!x->failed) {
        x->failed = status ? status : -1;
        snprintf(x->why, sizeof x->why, "%s: %s (%s)", what, regcache_strerror(status),
                 regcache_last_error());
    }
}

/* The i-th allocation of a sample. */
static void alloc_one(struct eager *x, size_t i)
{
    if (x->s->driver) {
        CUdeviceptr p = 0;
        if (bench_cu.cuMemAlloc(&p, x->len) != CUDA_SUCCESS)
            fail(x, 0, "cuMemAlloc");
        x->at[i] = (uintptr_t)p;
        return;
    }
    x->at[i] = x->s->base + i * BENCH_REGION;
    regcache_notify_alloc((void *)x->at[i], x->len);
}

static void free_all(struct eager *x)
{
    for (size_t i = 0; i < EAGER_ALLOCS; i++) {
        if (x->s->driver)
            bench_cu.cuMemFree(x->at[i]);
        else
            regcache_notify_free((void *)x->at[i], x->len);
    }
}

static uint64_t misses(const struct eager *x)
{
    struct regcache_stats st;
    regcache_get_stats(x->cache, &st);
    return st.misses;
}

static void first_get(struct eager *x, size_t i)
{
    regcache_entry_t *e;
    int st = regcache_get(x->cache, (void *)x->at[i], BENCH_GET, &e);
    if (st == REGCACHE_OK)
        regcache_put(x->cache, e);
    else
        fail(x, st, "regcache_get");
}

/* One sample: the share of first gets that hit, in percent. */
static double sample(struct eager *x, int wait)
{
    uint64_t before = misses(x);
    if (wait) {
        for (size_t i = 0; i < EAGER_ALLOCS; i++)
            alloc_one(x, i);
        int st = regcache_prefetch_wait(x->cache);
        if (st != REGCACHE_OK)
            fail(x, st, "regcache_prefetch_wait");
        for (size_t i = 0; i < EAGER_ALLOCS; i++)
            first_get(x, i);
    } else {
        for (size_t i = 0; i < EAGER_ALLOCS; i++) {
            alloc_one(x, i);
            first_get(x, i);
        }
    }
    uint64_t missed = misses(x) - before;
    free_all(x);
    regcache_prefetch_wait(x->cache);
    return 100.0 * (double)(EAGER_ALLOCS - missed) / EAGER_ALLOCS;
}

static void emit(struct bench_row *r, double *v, size_t *slots, size_t n)
{
    double *sorted = malloc(n * sizeof *sorted);
    if (!sorted) {
        bench_note(r, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++)
        sorted[i] = v[i];
    qsort(sorted, n, sizeof *sorted, bench_cmp_double);
    /* The median, and the worst sample as the tail: a rate's bad side is
     * the low one. */
    r->median = sorted[(n + 1) / 2 - 1];
    r->p99 = sorted[0];
    r->samples = v;
    r->slots = slots;
    r->nsamples = n;
    bench_emit(r);
    free(sorted);
}

void bench_eager(const struct bench_src *s)
{
    static const char *const what[2] = { "first get at once", "first get after registration" };
    struct bench_row rows[2];
    for (int w = 0; w < 2; w++)
        rows[w] = (struct bench_row){ .workload = "eager",
                                      .source = s->name,
                                      .impl = "regcache",
                                      .what = what[w],
                                      .entries = EAGER_ALLOCS,
                                      .unit = "% hits" };
    struct eager x = { .s = s, .len = s->driver ? GPU_ALLOC : BENCH_REGION };
    const char *env = getenv("REGCACHE_EAGER_MIN_BYTES");
    char was[32], why[160];
    snprintf(was, sizeof was, "%s", env ? env : "");
    setenv("REGCACHE_EAGER_MIN_BYTES", "4096", 1);
    int validation = s->driver ? REGCACHE_VALIDATE_AUTO : REGCACHE_VALIDATE_NOTIFY;
    x.cache = bench_cache(s, NULL, validation, 0, 0, why, sizeof why);
    if (env)
        setenv("REGCACHE_EAGER_MIN_BYTES", was, 1);
    else
        unsetenv("REGCACHE_EAGER_MIN_BYTES");
    for (int w = 0; w < 2; w++) {
        rows[w].asked = bench_mode_name(validation);
        if (x.cache)
            rows[w].mode = regcache_validation_mode(x.cache);
    }
    const char *none = !x.cache ? why
                       : rows[0].mode == REGCACHE_VALIDATE_TAG_CHECK
                           ? "validation is TAG_CHECK: no allocation is reported"
                           : NULL;
    double *v[2] = { calloc(bench.samples, sizeof(double)), calloc(bench.samples, sizeof(double)) };
    size_t *slots = calloc(bench.samples, sizeof(size_t));
    if (!none && (!v[0] || !v[1] || !slots))
        none = "out of memory";
    for (unsigned i = 0; !none && i < bench.samples && !x.failed; i++) {
        slots[i] = i;
        for (int w = 0; w < 2; w++)
            v[w][i] = sample(&x, w);
    }
    for (int w = 0; w < 2; w++) {
        if (none || x.failed) {
            bench_note(&rows[w], "%s%s", none ? "" : "invalid: ", none ? none : x.why);
        } else {
            emit(&rows[w], v[w], slots, bench.samples);
        }
    }
    free(v[0]);
    free(v[1]);
    free(slots);
    regcache_destroy(x.cache);
}
