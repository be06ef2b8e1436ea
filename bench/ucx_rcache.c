/* UCX's registration cache (ucs_rcache) under the same workload as regcache:
 * null registration, regions cached up front, random 4 KiB get+put.
 *
 * libucs is dlopened, not linked: when it loads it installs UCX's memory
 * hooks (mmap, munmap, madvise, brk) for its memory-type cache unless
 * UCX_MEM_EVENTS=no is already in the environment.  Neither cache uses them
 * here, they would tax every mapping call of the process (regcache's
 * included), and they crash ThreadSanitizer builds at thread exit. */
#include "bench.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucs/memory/rcache.h>
#include <ucs/type/status.h>

#define FN(name) __typeof__(&name) name
static struct {
    FN(ucs_rcache_create);
    FN(ucs_rcache_destroy);
    FN(ucs_rcache_get);
    FN(ucs_rcache_region_put);
    FN(ucs_status_string);
} ucs;
#undef FN

struct ucx_target {
    ucs_rcache_t *rcache;
    uintptr_t base;
    size_t regions;
    atomic_uint_fast64_t regs;     /* mem_reg calls */
    uint64_t regs_populated;       /* mem_reg calls once every region is in */
    atomic_uint_fast64_t failures;
    ucs_status_t first_error;
};

static ucs_status_t null_reg(void *context, ucs_rcache_t *rcache, void *arg,
                             ucs_rcache_region_t *region, uint16_t flags)
{
    struct ucx_target *t = context;
    (void)rcache, (void)arg, (void)region, (void)flags;
    atomic_fetch_add_explicit(&t->regs, 1, memory_order_relaxed);
    return UCS_OK;
}

static void null_dereg(void *context, ucs_rcache_t *rcache,
                       ucs_rcache_region_t *region)
{
    (void)context, (void)rcache, (void)region;
}

static void no_dump(void *context, ucs_rcache_t *rcache,
                    ucs_rcache_region_t *region, char *buf, size_t max)
{
    (void)context, (void)rcache, (void)region;
    if (max)
        buf[0] = '\0';
}

static const ucs_rcache_ops_t null_ops = {null_reg, null_dereg, no_dump};

#define PROT (PROT_READ | PROT_WRITE)

static void ucx_loop(void *ctx, uint64_t *rng, uint64_t count)
{
    struct ucx_target *t = ctx;
    for (uint64_t i = 0; i < count; i++) {
        ucs_rcache_region_t *r;
        ucs_status_t st = ucs.ucs_rcache_get(t->rcache,
                                         bench_pick(t->base, t->regions, rng),
                                         BENCH_GET_SIZE, PROT, NULL, &r);
        if (st != UCS_OK) {
            if (atomic_fetch_add(&t->failures, 1) == 0)
                t->first_error = st;
            continue;
        }
        ucs.ucs_rcache_region_put(t->rcache, r);
    }
}

static int ucx_check(void *ctx, char *why, size_t why_len)
{
    struct ucx_target *t = ctx;
    uint64_t failures = atomic_load(&t->failures);
    uint64_t regs = atomic_load(&t->regs);
    if (failures) {
        snprintf(why, why_len, "%llu ucs_rcache_get failed (%s)",
                 (unsigned long long)failures,
                 ucs.ucs_status_string(t->first_error));
        return -1;
    }
    if (regs != t->regs_populated) {
        snprintf(why, why_len, "%llu registrations in the hit loop",
                 (unsigned long long)(regs - t->regs_populated));
        return -1;
    }
    return 0;
}

static void ucx_close(void *ctx)
{
    struct ucx_target *t = ctx;
    ucs.ucs_rcache_destroy(t->rcache);
    free(t);
}

#define LOAD(name)                                                   \
    do {                                                             \
        *(void **)&ucs.name = dlsym(h, #name);                       \
        if (!ucs.name) {                                             \
            snprintf(why, why_len, "%s lacks %s", BENCH_UCS_LIBRARY, #name); \
            return 0;                                                \
        }                                                            \
    } while (0)

int bench_ucx_available(char *why, size_t why_len)
{
    if (ucs.ucs_rcache_create)
        return 1;
    setenv("UCX_MEM_EVENTS", "no", 0);
    void *h = dlopen(BENCH_UCS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, why_len, "cannot load %s: %s", BENCH_UCS_LIBRARY, dlerror());
        return 0;
    }
    LOAD(ucs_rcache_destroy);
    LOAD(ucs_rcache_get);
    LOAD(ucs_rcache_region_put);
    LOAD(ucs_status_string);
    LOAD(ucs_rcache_create); /* last: it marks the table complete */
    return 1;
}

int bench_ucx_target(struct bench_target *bt, const struct bench_space *s,
                     char *why, size_t why_len)
{
    struct ucx_target *t = calloc(1, sizeof(*t));
    ucs_rcache_params_t p = {0};
    ucs_status_t st;

    if (!t) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    t->base = s->base;
    t->regions = s->regions;
    p.region_struct_size = sizeof(ucs_rcache_region_t);
    p.alignment = UCS_RCACHE_MIN_ALIGNMENT;
    p.max_alignment = 4096; /* at most the page size */
    /* No memory events: neither cache is told about frees here, and UCX's
     * hooks would cost every munmap in the process. */
    p.ucm_events = 0;
    p.ops = &null_ops;
    p.context = t;
    p.max_regions = (unsigned long)-1;
    p.max_size = (size_t)-1;
    p.max_unreleased = (size_t)-1;
    st = ucs.ucs_rcache_create(&p, "bench", NULL, &t->rcache);
    if (st != UCS_OK) {
        snprintf(why, why_len, "ucs_rcache_create: %s", ucs.ucs_status_string(st));
        free(t);
        return -1;
    }
    /* One get of each whole region: later 4 KiB gets fall inside it.
     * ucs_rcache merges only overlapping regions, so neighbours stay
     * apart: the registration count proves it. */
    for (size_t i = 0; i < s->regions; i++) {
        ucs_rcache_region_t *r;
        st = ucs.ucs_rcache_get(t->rcache, (void *)(s->base + i * BENCH_REGION_SIZE),
                            BENCH_REGION_SIZE, PROT, NULL, &r);
        if (st != UCS_OK) {
            snprintf(why, why_len, "populating: %s", ucs.ucs_status_string(st));
            ucx_close(t);
            return -1;
        }
        ucs.ucs_rcache_region_put(t->rcache, r);
    }
    t->regs_populated = atomic_load(&t->regs);
    if (t->regs_populated != s->regions) {
        snprintf(why, why_len, "%llu UCX regions for %zu gets (merged)",
                 (unsigned long long)t->regs_populated, s->regions);
        ucx_close(t);
        return -1;
    }
    *bt = (struct bench_target){"ucs_rcache", t, ucx_loop, ucx_check, ucx_close};
    return 0;
}
