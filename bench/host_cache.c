/* A GPU hit (null source, NOTIFY, BENCH_SET entries) beside a cache that
 * takes pageable host memory and beside none: the host memory monitor
 * that such a cache starts (libc's hooks or the userfaultfd, a thread)
 * must leave other caches' hits as they were.  Two caches of the same
 * kind, measured interleaved in blocks of samples: before each sample of
 * the one row a host cache holding a watched range is made, if there is
 * none, and before each of the other's it is destroyed (libc's unmapping
 * functions, once patched, stay patched: the process is as it is after a
 * host cache's life, less the cache). */
#include "bench.h"

#include <sys/mman.h>

#define HOST_RANGE ((size_t)1 << 20)

struct host_cache {
    regcache_t *host;
    char *range;
    int failed;
    char why[160];
};

static void make_host_cache(void *ctx)
{
    struct host_cache *h = ctx;
    if (h->host || h->failed)
        return;
    struct regcache_params p;
    regcache_entry_t *e;
    bench_host_params(&p, 0, REGCACHE_HOST_MONITOR_AUTO);
    int st = regcache_create(&p, &h->host);
    if (st == REGCACHE_OK && (st = regcache_get(h->host, h->range, HOST_RANGE, &e)) == REGCACHE_OK)
        regcache_put(h->host, e);
    if (st != REGCACHE_OK) {
        h->failed = 1;
        snprintf(h->why, sizeof h->why, "the host cache: %s (%s)", regcache_strerror(st),
                 regcache_last_error());
    }
}

static void drop_host_cache(void *ctx)
{
    struct host_cache *h = ctx;
    regcache_destroy(h->host);
    h->host = NULL;
}

struct arm {
    struct bench_target t;
    struct host_cache *h;
    void (*reset)(void *ctx);
};

static void arm_reset(void *ctx)
{
    struct arm *a = ctx;
    a->reset(a->h);
}

static void arm_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct arm *a = ctx;
    a->t.op.run(a->t.op.ctx, l, n);
}

static int arm_check(void *ctx, char *why, size_t len)
{
    struct arm *a = ctx;
    if (a->h->failed) {
        snprintf(why, len, "%s", a->h->why);
        return -1;
    }
    return a->t.op.check(a->t.op.ctx, why, len);
}

void bench_host_cache(const struct bench_src *s)
{
    static const char *const what[2] = { "hit beside no host cache", "hit beside a host cache" };
    struct host_cache h = { 0 };
    struct arm a[2];
    struct bench_row r[2];
    struct bench_op op[2];
    struct bench_arm arms[2];
    size_t n = 0;
    h.range = mmap(NULL, HOST_RANGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (size_t i = 0; i < 2; i++) {
        r[n] = (struct bench_row){ .workload = "host_cache", .source = s->name, .what = what[i] };
        if (h.range == MAP_FAILED) {
            bench_note(&r[n], "cannot map the host range");
            continue;
        }
        if (bench_target_open(&a[n].t, &r[n], s, REGCACHE_VALIDATE_NOTIFY, BENCH_SET, 0) != 0)
            continue;
        a[n].h = &h;
        a[n].reset = i ? make_host_cache : drop_host_cache;
        op[n] = (struct bench_op){ arm_run, arm_reset, arm_check, &a[n] };
        arms[n] = (struct bench_arm){ .row = &r[n], .op = &op[n], .ops = bench.batch };
        n++;
    }
    bench_interleave(arms, n);
    drop_host_cache(&h);
    for (size_t i = 0; i < n; i++)
        bench_target_close(&a[i].t);
    if (h.range != MAP_FAILED)
        munmap(h.range, HOST_RANGE);
}
