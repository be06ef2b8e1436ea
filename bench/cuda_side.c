/* The real-CUDA rows, run where a GPU and its driver are present: the CUDA
 * half of a registration per size, regcache over cuMemAlloc memory with the
 * driver as its tag source (no query callback), and the bare
 * cuPointerGetAttribute(BUFFER_ID) the tag check is judged against.  The
 * driver is dlopened so that the harness runs on machines without one. */
#include "bench.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FN(name) __typeof__(&name) name
static struct {
    FN(cuInit);
    FN(cuGetErrorName);
    FN(cuDeviceGet);
    FN(cuDeviceGetName);
    FN(cuDriverGetVersion);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuCtxSetCurrent);
    FN(cuMemAlloc);
    FN(cuMemFree);
    FN(cuMemGetInfo);
    FN(cuPointerGetAttribute);
    FN(cuPointerGetAttributes);
    FN(cuPointerSetAttribute);
    FN(cuMemGetHandleForAddressRange);
} cu;
#undef FN

static CUcontext ctx;

static const char *cu_err(CUresult r)
{
    const char *name = NULL;
    if (!cu.cuGetErrorName || cu.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        return "unknown CUDA error";
    return name;
}

/* Load every entry point by its versioned name (cuda.h maps cuMemAlloc to
 * cuMemAlloc_v2 and so on; #name after expansion gives that name). */
#define SYM_NAME(name) #name
#define LOAD(name)                                                    \
    do {                                                              \
        *(void **)&cu.name = dlsym(h, SYM_NAME(name));                \
        if (!cu.name) {                                               \
            snprintf(why, len, "libcuda.so.1 lacks %s", SYM_NAME(name)); \
            return -1;                                                \
        }                                                             \
    } while (0)

static int load(char *why, size_t len)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, len, "no GPU: the CUDA driver (libcuda.so.1) cannot be loaded");
        return -1;
    }
    LOAD(cuInit);
    LOAD(cuGetErrorName);
    LOAD(cuDeviceGet);
    LOAD(cuDeviceGetName);
    LOAD(cuDriverGetVersion);
    LOAD(cuDevicePrimaryCtxRetain);
    LOAD(cuCtxSetCurrent);
    LOAD(cuMemAlloc);
    LOAD(cuMemFree);
    LOAD(cuMemGetInfo);
    LOAD(cuPointerGetAttribute);
    LOAD(cuPointerGetAttributes);
    LOAD(cuPointerSetAttribute);
    LOAD(cuMemGetHandleForAddressRange);
    return 0;
}

/* The kernel driver's version ("580.159.04"), from the module's /proc
 * file; the CUDA API version when that is missing. */
static void driver_version(char *out, size_t len)
{
    char line[256];
    int api = 0;
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f && fgets(line, sizeof(line), f)) {
        for (char *tok = strtok(line, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
            unsigned a, b;
            if (sscanf(tok, "%u.%u", &a, &b) == 2 && strchr(tok, '.') != strrchr(tok, '.')) {
                snprintf(out, len, "%s", tok);
                break;
            }
        }
    }
    if (f)
        fclose(f);
    cu.cuDriverGetVersion(&api);
    size_t used = strlen(out);
    snprintf(out + used, len - used, "%sCUDA %d.%d", used ? ", " : "", api / 1000,
             api % 1000 / 10);
}

static int open_gpu(struct bench_machine *m, char *why, size_t len)
{
    CUdevice dev;
    CUresult r;
    if (load(why, len) != 0)
        return -1;
    if ((r = cu.cuInit(0)) != CUDA_SUCCESS || (r = cu.cuDeviceGet(&dev, 0)) != CUDA_SUCCESS) {
        snprintf(why, len, "no GPU (cuInit/cuDeviceGet: %s)", cu_err(r));
        return -1;
    }
    if ((r = cu.cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS ||
        (r = cu.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
        snprintf(why, len, "no CUDA context: %s", cu_err(r));
        return -1;
    }
    cu.cuDeviceGetName(m->gpu, sizeof(m->gpu), dev);
    driver_version(m->driver, sizeof(m->driver));
    return 0;
}

/* Worker threads of the multi-threaded rows start without a current
 * context: make the primary one current once per thread. */
static _Thread_local int ctx_current;

static void ensure_ctx(void)
{
    if (!ctx_current) {
        cu.cuCtxSetCurrent(ctx);
        ctx_current = 1;
    }
}

/* ---- the CUDA half of a registration, per size --------------------------- */

/* The attributes a registration needs to know about its memory. */
static CUpointer_attribute query_attrs[] = {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    CU_POINTER_ATTRIBUTE_BUFFER_ID,   CU_POINTER_ATTRIBUTE_IS_MANAGED,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
#define NATTRS (sizeof(query_attrs) / sizeof(query_attrs[0]))

static CUresult cuda_query(CUdeviceptr p)
{
    CUmemorytype type;
    int ordinal, managed;
    unsigned long long id;
    CUdeviceptr start;
    size_t size;
    void *data[NATTRS] = {&type, &ordinal, &id, &managed, &start, &size};
    return cu.cuPointerGetAttributes(NATTRS, query_attrs, data, p);
}

static CUresult cuda_export(CUdeviceptr p, size_t len, int *fd)
{
    return cu.cuMemGetHandleForAddressRange(fd, p, len,
                                            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
}

enum { STEP_QUERY, STEP_SYNC, STEP_EXPORT, STEP_CLOSE, STEP_PIN, STEP_ALL, NSTEPS };
static const char *const step_mode[NSTEPS] = {"query", "sync_memops", "dmabuf export",
                                               "close", "pin", "pin+unpin"};
static const char *const step_name[NSTEPS] = {
    "raw: cuPointerGetAttributes (6 attrs)", "raw: SYNC_MEMOPS set",
    "raw: dmabuf export", "raw: dmabuf close", "raw pin: query+sync+export",
    "raw pin+unpin"};

/* Each step timed on its own, and the pin and pin+unpin totals summed per
 * repetition, so that the medians of the totals are of real sequences. */
static int raw_rows(const struct bench_opts *o, CUdeviceptr p, size_t size,
                    double *pin_ns, double *all_ns)
{
    double *v[NSTEPS];
    unsigned one = 1;
    CUresult r = CUDA_SUCCESS;
    int ok = 1;
    for (int s = 0; s < NSTEPS; s++)
        ok &= (v[s] = malloc(o->pin_reps * sizeof(double))) != NULL;
    for (unsigned k = 0; ok && k < o->pin_reps; k++) {
        int fd = -1;
        uint64_t t0 = bench_now_ns();
        r = cuda_query(p);
        uint64_t t1 = bench_now_ns();
        if (r == CUDA_SUCCESS)
            r = cu.cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p);
        uint64_t t2 = bench_now_ns();
        if (r == CUDA_SUCCESS)
            r = cuda_export(p, size, &fd);
        uint64_t t3 = bench_now_ns();
        if (fd >= 0)
            close(fd);
        uint64_t t4 = bench_now_ns();
        if (r != CUDA_SUCCESS)
            ok = 0;
        v[STEP_QUERY][k] = (double)(t1 - t0);
        v[STEP_SYNC][k] = (double)(t2 - t1);
        v[STEP_EXPORT][k] = (double)(t3 - t2);
        v[STEP_CLOSE][k] = (double)(t4 - t3);
        v[STEP_PIN][k] = (double)(t3 - t0);
        v[STEP_ALL][k] = (double)(t4 - t0);
    }
    for (int s = 0; s < NSTEPS; s++) {
        struct bench_row *row = bench_row_add("pin", step_name[s]);
        snprintf(row->impl, sizeof(row->impl), "cuda");
        snprintf(row->mode, sizeof(row->mode), "%s", step_mode[s]);
        row->size = size;
        if (ok) {
            struct bench_summary sum = bench_summarize(v[s], o->pin_reps);
            row->median_ns = sum.median;
            row->p99_ns = sum.p99;
        } else {
            snprintf(row->note, sizeof(row->note), "failed: %s", cu_err(r));
        }
        if (s == STEP_PIN)
            *pin_ns = row->median_ns;
        if (s == STEP_ALL)
            *all_ns = row->median_ns;
    }
    for (int s = 0; s < NSTEPS; s++)
        free(v[s]);
    return ok ? 0 : -1;
}

/* A backend doing the CUDA half of a dmabuf registration (the verbs call
 * itself needs an RDMA device): export on reg, close on dereg.  The handle
 * is the fd plus one, so that fd 0 is not mistaken for "no handle". */
static int export_reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    int fd = -1;
    (void)arg, (void)device, (void)rail;
    if (cuda_export((CUdeviceptr)(uintptr_t)addr, len, &fd) != CUDA_SUCCESS)
        return EINVAL;
    *handle = (void *)(uintptr_t)(fd + 1);
    return 0;
}

static void export_dereg(void *arg, void *handle)
{
    (void)arg;
    close((int)((uintptr_t)handle - 1));
}

static regcache_t *real_cache(const struct regcache_backend *be, int mode,
                              int whole_allocation, char *why, size_t len)
{
    struct regcache_params p;
    regcache_t *c = NULL;
    regcache_params_init(&p);
    p.backend = be; /* no query: the cache asks the driver */
    p.validation = mode == BENCH_HOOKS ? REGCACHE_VALIDATE_HOOKS
                                       : REGCACHE_VALIDATE_TAG_CHECK;
    p.max_bytes = (size_t)1 << 56;
    p.whole_allocation = whole_allocation;
    int st = regcache_create(&p, &c);
    if (st != REGCACHE_OK) {
        snprintf(why, len, "regcache_create: %s (%s)", regcache_strerror(st),
                 regcache_last_error());
        return NULL;
    }
    return c;
}

/* Each size is measured on a 64 KiB-aligned range inside an allocation
 * with room to spare, and the cache registers just that range (rounded to
 * its 64 KiB alignment, whole_allocation off): so the 4 KiB row exports a
 * 4 KiB-aligned sub-range, as dmabuf export requires, and every row
 * registers what its size says rather than the allocator's block. */
#define PIN_SLACK (2 * BENCH_REGION_SIZE)

static void pin_sizes(const struct bench_opts *o)
{
    const size_t *sizes;
    size_t n = bench_pin_size_list(o, &sizes);
    static const struct regcache_backend be = {export_reg, export_dereg, NULL, NULL};
    char why[192];
    for (size_t k = 0; k < n; k++) {
        CUdeviceptr p;
        double pin = -1, all = -1;
        CUresult r = cu.cuMemAlloc(&p, sizes[k] + PIN_SLACK);
        if (r != CUDA_SUCCESS) {
            bench_skip("GPU pin/unpin", "cuMemAlloc(%zu): %s", sizes[k] + PIN_SLACK,
                       cu_err(r));
            continue;
        }
        CUdeviceptr at = (p + BENCH_REGION_SIZE - 1) & ~(CUdeviceptr)(BENCH_REGION_SIZE - 1);
        raw_rows(o, at, sizes[k], &pin, &all);
        regcache_t *c = real_cache(&be, BENCH_TAG_CHECK, 0, why, sizeof(why));
        if (c) {
            bench_pin_rows("regcache-cuda", "real driver + dmabuf export", c,
                           (void *)(uintptr_t)at, sizes[k], o, pin, all);
            regcache_destroy(c);
        } else {
            bench_skip("GPU pin/unpin through regcache", "%s", why);
        }
        cu.cuMemFree(p);
    }
}

/* ---- hit cost and threads on real GPU memory ----------------------------- */

/* Runs a target's loop with the context current in the calling thread. */
struct ctx_target {
    struct bench_target inner;
};

static void ctx_loop(void *c, uint64_t *rng, uint64_t count)
{
    struct ctx_target *t = c;
    ensure_ctx();
    t->inner.loop(t->inner.ctx, rng, count);
}

static int ctx_check(void *c, char *why, size_t len)
{
    struct ctx_target *t = c;
    return t->inner.check ? t->inner.check(t->inner.ctx, why, len) : 0;
}

static struct bench_target in_ctx(struct ctx_target *holder, struct bench_target inner)
{
    holder->inner = inner;
    return (struct bench_target){inner.name, holder, ctx_loop, ctx_check, NULL};
}

/* The bare tag source: one cuPointerGetAttribute(BUFFER_ID) per address. */
struct id_target {
    uintptr_t base;
    size_t regions;
    atomic_uint_fast64_t failures;
    atomic_ullong sink; /* keeps the queries from being optimized away */
};

static void id_loop(void *c, uint64_t *rng, uint64_t count)
{
    struct id_target *t = c;
    unsigned long long id = 0, sum = 0;
    for (uint64_t i = 0; i < count; i++) {
        void *a = bench_pick(t->base, t->regions, rng);
        if (cu.cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                     (CUdeviceptr)(uintptr_t)a) != CUDA_SUCCESS)
            atomic_fetch_add_explicit(&t->failures, 1, memory_order_relaxed);
        sum += id;
    }
    atomic_store_explicit(&t->sink, sum, memory_order_relaxed);
}

static int id_check(void *c, char *why, size_t len)
{
    struct id_target *t = c;
    uint64_t failures = atomic_load(&t->failures);
    if (!failures)
        return 0;
    snprintf(why, len, "%llu BUFFER_ID queries failed", (unsigned long long)failures);
    return -1;
}

static struct bench_row *gpu_row(const char *section, const char *impl,
                                 const char *mode, const char *name)
{
    struct bench_row *r = bench_row_add(section, name);
    snprintf(r->impl, sizeof(r->impl), "%s", impl);
    snprintf(r->mode, sizeof(r->mode), "%s", mode);
    return r;
}

/* One allocation holds every region; with whole_allocation off each 64 KiB
 * region is an entry of its own, all sharing the allocation's buffer id,
 * which the tag check reads like any other. */
static void real_entries(const struct bench_opts *o, CUdeviceptr dptr, size_t max)
{
    const struct regcache_backend *be = &bench_null_backend;
    char why[192];
    for (size_t k = 0; k < BENCH_NELEM(bench_entry_counts) && bench_entry_counts[k] <= max; k++) {
        struct bench_space s = {(uintptr_t)dptr, bench_entry_counts[k], 0, 0};
        struct id_target id = {s.base, s.regions, 0, 0};
        struct bench_target idt = {"BUFFER_ID", &id, id_loop, id_check, NULL};
        struct bench_row *bare = gpu_row("entries", "cuda", "BUFFER_ID",
                                         "bare cuPointerGetAttribute(BUFFER_ID)");
        bare->entries = s.regions;
        bench_measure_hit(bare, &idt, o);
        for (int mode = BENCH_TAG_CHECK; mode <= BENCH_HOOKS; mode++) {
            char name[96];
            struct bench_target t;
            snprintf(name, sizeof(name), "regcache %s hit, real driver",
                     bench_rc_mode_name(mode));
            struct bench_row *r = gpu_row("entries", "regcache-cuda",
                                          bench_rc_mode_name(mode), name);
            r->entries = s.regions;
            regcache_t *c = real_cache(be, mode, 0, why, sizeof(why));
            if (!c || bench_rc_target_on(&t, c, &s, why, sizeof(why)) != 0) {
                snprintf(r->note, sizeof(r->note), "failed: %s", why);
                regcache_destroy(c);
                continue;
            }
            bench_measure_hit(r, &t, o);
            bench_target_close(&t);
            regcache_destroy(c);
            if (mode == BENCH_TAG_CHECK && r->median_ns > 0 && bare->median_ns > 0) {
                double over = r->median_ns - bare->median_ns;
                bench_row_goal(r, over <= BENCH_GOAL_TAG_NS ? BENCH_MET : BENCH_MISSED,
                               "<= BUFFER_ID query + %.0f ns (is + %.1f ns)",
                               BENCH_GOAL_TAG_NS, over);
            }
        }
    }
}

static void real_threads(const struct bench_opts *o, CUdeviceptr dptr, long cores)
{
    unsigned top = bench_thread_counts[BENCH_NELEM(bench_thread_counts) - 1];
    const struct regcache_backend *be = &bench_null_backend;
    struct bench_space s = {(uintptr_t)dptr, BENCH_THREAD_ENTRIES, 0, 0};
    struct id_target id = {s.base, s.regions, 0, 0};
    struct ctx_target holder;
    struct bench_target t;
    char why[192];

    /* The driver's own scaling first: the tag check cannot beat it. */
    t = in_ctx(&holder, (struct bench_target){"BUFFER_ID", &id, id_loop, id_check, NULL});
    for (size_t k = 0; k < BENCH_NELEM(bench_thread_counts); k++) {
        struct bench_row *r = gpu_row("threads", "cuda", "BUFFER_ID",
                                      "bare cuPointerGetAttribute(BUFFER_ID)");
        r->entries = s.regions;
        r->threads = bench_thread_counts[k];
        bench_measure_threads(r, &t, o);
    }
    for (int mode = BENCH_TAG_CHECK; mode <= BENCH_HOOKS; mode++) {
        struct bench_target inner;
        regcache_t *c = real_cache(be, mode, 0, why, sizeof(why));
        int ok = c && bench_rc_target_on(&inner, c, &s, why, sizeof(why)) == 0;
        double one = -1;
        if (ok)
            t = in_ctx(&holder, inner);
        for (size_t k = 0; k < BENCH_NELEM(bench_thread_counts); k++) {
            char name[96];
            snprintf(name, sizeof(name), "regcache %s hits, real driver",
                     bench_rc_mode_name(mode));
            struct bench_row *r = gpu_row("threads", "regcache-cuda",
                                          bench_rc_mode_name(mode), name);
            r->entries = s.regions;
            r->threads = bench_thread_counts[k];
            if (!ok) {
                snprintf(r->note, sizeof(r->note), "failed: %s", why);
                continue;
            }
            bench_measure_scaling(r, &t, o, &one);
            if (r->derived > 0 && r->threads == top)
                bench_row_goal(r,
                               cores < BENCH_GOAL_SCALING_CORES ? BENCH_NOT_JUDGED
                               : r->derived >= BENCH_GOAL_SCALING ? BENCH_MET
                                                                  : BENCH_MISSED,
                               ">= %.0fx one thread on %d cores (is %.1fx on %ld)",
                               BENCH_GOAL_SCALING, BENCH_GOAL_SCALING_CORES,
                               r->derived, cores);
        }
        if (ok)
            bench_target_close(&inner);
        regcache_destroy(c);
    }
}

static void real_hits(const struct bench_opts *o, long cores)
{
    size_t free_b = 0, total_b = 0, want = bench_entry_counts[BENCH_NELEM(bench_entry_counts) - 1];
    CUdeviceptr dptr;
    cu.cuMemGetInfo(&free_b, &total_b);
    /* Leave an eighth of the free memory to the driver (1M regions, 64 GiB,
     * then fit an 80 GB GPU). */
    size_t max = free_b / 8 * 7 / BENCH_REGION_SIZE;
    if (max > want)
        max = want;
    CUresult r = cu.cuMemAlloc(&dptr, max * BENCH_REGION_SIZE);
    if (r != CUDA_SUCCESS) {
        bench_skip("GPU hit cost", "cuMemAlloc(%zu): %s", max * BENCH_REGION_SIZE, cu_err(r));
        return;
    }
    if (max < want)
        bench_skip("GPU hit cost at 1M entries", "only %zu regions fit in GPU memory", max);
    real_entries(o, dptr, max);
    real_threads(o, dptr, cores);
    cu.cuMemFree(dptr);
}

int bench_cuda_run(const struct bench_opts *o, struct bench_machine *m)
{
    char why[192];
    if (open_gpu(m, why, sizeof(why)) != 0) {
        bench_skip("real CUDA rows", "%s", why);
        return 0;
    }
    pin_sizes(o);
    real_hits(o, m->cores);
    return 1;
}
