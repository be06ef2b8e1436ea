/* UCX's registration cache (ucs_rcache) beside regcache in the hits and
 * threads workloads, measured interleaved with them: the same null
 * registration, the same regions, cached up front, the same random 4 KiB
 * get+put.
 *
 * libucs is dlopened, not linked: when it loads it installs UCX's memory
 * hooks (mmap, munmap, madvise, brk) unless UCX_MEM_EVENTS=no is already in
 * the environment.  Neither cache uses them here, they would tax every
 * mapping call of the process, and they crash ThreadSanitizer builds at
 * thread exit. */
#include "bench.h"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef BENCH_UCS_LIBRARY
void bench_ucx_load(struct bench_machine *m)
{
    (void)m;
    bench_note(&(struct bench_row){ .workload = "ucx" },
               "UCX (ucs/memory/rcache.h, libucs) "
               "not found at configure time: install libucx-dev and reconfigure");
}

const char *bench_ucx_hooks(void)
{
    return "UCX (libucs) not found at configure time";
}

struct bench_ucx *bench_ucx_open(struct bench_row *r, const struct bench_src *s, size_t regions,
                                 struct bench_op *op)
{
    (void)r, (void)s, (void)regions, (void)op;
    return NULL;
}

void bench_ucx_close(struct bench_ucx *u)
{
    (void)u;
}
#else
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucs/memory/rcache.h>

#define UCS_CALLS(X)     \
    X(ucs_rcache_create) \
    X(ucs_rcache_destroy) X(ucs_rcache_get) X(ucs_rcache_region_put) X(ucs_status_string)
#define FN(name) __typeof__(&name) name;
#define LOAD(name)                                \
    if (!(*(void **)&ucs.name = dlsym(h, #name))) \
        return "it lacks " #name;

static struct {
    UCS_CALLS(FN)
} ucs;
static int loaded; /* bench_ucx_load found libucs */

struct bench_ucx {
    ucs_rcache_t *rcache;
    uintptr_t base;
    size_t regions;
    atomic_uint_fast64_t regs; /* mem_reg calls */
    uint64_t populated;        /* mem_reg calls once every region is in */
    atomic_uint_fast64_t failures;
};

static ucs_status_t null_reg(void *context, ucs_rcache_t *rcache, void *arg,
                             ucs_rcache_region_t *region, uint16_t flags)
{
    struct bench_ucx *u = context;
    (void)rcache, (void)arg, (void)region, (void)flags;
    atomic_fetch_add_explicit(&u->regs, 1, memory_order_relaxed);
    return UCS_OK;
}

static void null_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
    (void)context, (void)rcache, (void)region;
}

static void no_dump(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region, char *buf,
                    size_t max)
{
    (void)context, (void)rcache, (void)region;
    if (max)
        buf[0] = '\0';
}

static const ucs_rcache_ops_t null_ops = { null_reg, null_dereg, no_dump };

/* ucs_rcache checks that the mapping allows what is asked for. */
#define PROT (PROT_READ | PROT_WRITE)

static int get(struct bench_ucx *u, void *addr, size_t len)
{
    ucs_rcache_region_t *r;
    if (ucs.ucs_rcache_get(u->rcache, addr, len, PROT, NULL, &r) != UCS_OK)
        return -1;
    ucs.ucs_rcache_region_put(u->rcache, r);
    return 0;
}

static void ucx_run(void *ctx, struct bench_lane *l, uint64_t n)
{
    struct bench_ucx *u = ctx;
    uint64_t rng = l->rng;
    for (uint64_t i = 0; i < n; i++)
        if (get(u, bench_pick(u->base, u->regions, &rng), BENCH_GET) != 0)
            atomic_fetch_add(&u->failures, 1);
    l->rng = rng;
}

/* A get that failed or registered timed something else. */
static int ucx_check(void *ctx, char *why, size_t len)
{
    struct bench_ucx *u = ctx;
    uint64_t failures = atomic_load(&u->failures), regs = atomic_load(&u->regs) - u->populated;
    snprintf(why, len, "%llu gets failed, %llu registrations in the hit loop",
             (unsigned long long)failures, (unsigned long long)regs);
    return failures || regs ? -1 : 0;
}

const char *bench_ucx_hooks(void)
{
    if (getenv("UCX_MEM_EVENTS"))
        return "UCX_MEM_EVENTS is set";
    return dlopen(BENCH_UCS_LIBRARY, RTLD_NOW | RTLD_GLOBAL) ? NULL : dlerror();
}

static const char *load(void)
{
    setenv("UCX_MEM_EVENTS", "no", 0);
    void *h = dlopen(BENCH_UCS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return dlerror();
    UCS_CALLS(LOAD)
    return NULL;
}

/* An rcache holding regions [0, regions) at base, one UCX region each: it
 * merges only overlapping regions, which the registration count proves. */
static const char *open_ucx(struct bench_ucx *u)
{
    ucs_rcache_params_t p = {
        .region_struct_size = sizeof(ucs_rcache_region_t),
        .alignment = UCS_RCACHE_MIN_ALIGNMENT,
        .max_alignment = 4096, /* at most the page size */
        .ucm_events = 0,       /* no memory events: nothing is freed here */
        .ops = &null_ops,
        .context = u,
        .max_regions = (unsigned long)-1,
        .max_size = (size_t)-1,
        .max_unreleased = (size_t)-1,
    };
    ucs_status_t st = ucs.ucs_rcache_create(&p, "bench", NULL, &u->rcache);
    if (st != UCS_OK)
        return ucs.ucs_status_string(st);
    for (size_t i = 0; i < u->regions; i++)
        if (get(u, (void *)(u->base + i * BENCH_REGION), BENCH_REGION) != 0)
            return "ucs_rcache_get failed while populating";
    u->populated = atomic_load(&u->regs);
    return u->populated == u->regions ? NULL : "UCX merged neighbouring regions";
}

void bench_ucx_load(struct bench_machine *m)
{
    const char *why = load();
    if (why) {
        bench_note(&(struct bench_row){ .workload = "ucx" }, "cannot load %s: %s",
                   BENCH_UCS_LIBRARY, why);
        return;
    }
    snprintf(m->ucx, sizeof(m->ucx), "%s", BENCH_UCX_VERSION[0] ? BENCH_UCX_VERSION : "unknown");
    loaded = 1;
}

struct bench_ucx *bench_ucx_open(struct bench_row *r, const struct bench_src *s, size_t regions,
                                 struct bench_op *op)
{
    struct bench_ucx *u;
    const char *why = "out of memory";
    if (!loaded)
        return NULL;
    r->impl = "ucx";
    r->entries = regions;
    if ((u = calloc(1, sizeof(*u)))) {
        u->base = s->base;
        u->regions = regions;
        why = open_ucx(u);
    }
    if (why) {
        bench_note(r, "failed: %s", why);
        bench_ucx_close(u);
        return NULL;
    }
    *op = (struct bench_op){ ucx_run, NULL, ucx_check, u };
    return u;
}

void bench_ucx_close(struct bench_ucx *u)
{
    if (u && u->rcache)
        ucs.ucs_rcache_destroy(u->rcache);
    free(u);
}
#endif

/* In a child: libucs stays loaded once loaded, and the rest of the run
 * wants it without its hooks.  The child's rows go out through the same
 * file offset while the parent waits. */
void bench_beside_ucx_hooks(void (*run)(void), struct bench_row *skipped)
{
    bench_json_flush();
    pid_t pid = fork();
    if (pid == 0) {
        const char *why = bench_ucx_hooks();
        if (why)
            bench_note(skipped, "%s", why);
        else
            run();
        bench_json_flush();
        _exit(0);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        fprintf(stderr, "%s: the run with UCX's memory hooks did not end\n", skipped->workload);
}
