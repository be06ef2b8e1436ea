/* The hook tests' fixture over the libcuda test double (see hook_fixture.h). */
#include "hook_fixture.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "fake_libcuda.h"

struct handle {
    uintptr_t start;
    size_t len;
};

static int reg(void *arg, void *addr, size_t len, int device, int rail, void **out)
{
    (void)arg, (void)device, (void)rail;
    struct handle *h = test_malloc(sizeof *h);
    *h = (struct handle){ (uintptr_t)addr, len };
    *out = h;
    return 0;
}

static void dereg(void *arg, void *handle)
{
    (void)arg;
    struct handle *h = handle;
    fakecuda_log_dereg(h->start, h->len);
    test_free(h);
}

static int query(void *arg, const void *addr, size_t len, struct regcache_mem_info *info)
{
    (void)arg, (void)len;
    int host;
    if (fakecuda_describe((uintptr_t)addr, &info->base, &info->size, &info->buffer_id, &host) != 0)
        return REGCACHE_ERR_NOT_GPU;
    info->device = host ? REGCACHE_DEVICE_HOST : 0;
    info->type = host ? REGCACHE_MEM_HOST : REGCACHE_MEM_DEVICE;
    return REGCACHE_OK;
}

static const struct regcache_backend backend = { .reg = reg, .dereg = dereg, .query = query };

void fixture_params(struct regcache_params *p)
{
    assert_int_equal(regcache_params_init(p), REGCACHE_OK);
    p->backend = &backend;
    p->host_memory = 1;
}

regcache_t *fixture_cache(void)
{
    fakecuda_reset();
    struct regcache_params p;
    fixture_params(&p);
    regcache_t *cache = NULL;
    assert_int_equal(regcache_create(&p, &cache), REGCACHE_OK);
    return cache;
}

void fixture_cache_range(regcache_t *cache, uintptr_t addr, size_t len)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get(cache, (const void *)addr, len, &e), REGCACHE_OK);
    regcache_put(cache, e);
}

uintptr_t fixture_cached_alloc(regcache_t *cache, int host)
{
    uintptr_t addr = fakecuda_alloc_unhooked(FIXTURE_SIZE, host);
    assert_true(addr != 0);
    fixture_cache_range(cache, addr, FIXTURE_SIZE);
    return addr;
}

static long find(int type, const char *fn, uintptr_t addr)
{
    const struct fakecuda_event *ev;
    size_t n = fakecuda_events(&ev);
    for (size_t i = 0; i < n; i++)
        if ((int)ev[i].type == type && ev[i].addr == addr && (!fn || strcmp(ev[i].fn, fn) == 0))
            return (long)i;
    return -1;
}

long fixture_dereg_at(uintptr_t addr)
{
    return find(FAKECUDA_DEREG, NULL, addr);
}

long fixture_call_of(const char *fn, uintptr_t addr)
{
    return find(FAKECUDA_CALL, fn, addr);
}

int fixture_dereg_was_live(long index)
{
    const struct fakecuda_event *ev;
    size_t n = fakecuda_events(&ev);
    return index >= 0 && (size_t)index < n && ev[index].live;
}

uint64_t fixture_notified(regcache_t *cache)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(cache, &s), REGCACHE_OK);
    return s.invalidations_notify;
}

void *fixture_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    return lib;
}

void *fixture_own(const char *symbol)
{
    void *fn = fakecuda_own(symbol);
    assert_non_null(fn);
    return fn;
}

/* The names cuda.h maps to newer ABIs, and the per-thread-stream exports it
 * only declares under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
#undef cuGetProcAddress
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxReset(CUdevice device);
CUresult cuDevicePrimaryCtxRelease(CUdevice device);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *ptr, size_t size, CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *ptr, size_t size, CUmemoryPool pool,
                                      CUstream stream);

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t);

#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

const struct fixture_variant fixture_procs[] = {
    { "cuMemFree", 3020, 0, "cuMemFree_v2", FIX_FREE },
    { "cuMemFree", 12000, 0, "cuMemFree_v2", FIX_FREE },
    { "cuIpcCloseMemHandle", 4010, 0, "cuIpcCloseMemHandle", FIX_FREE },
    { "cuMemFreeAsync", 11020, 0, "cuMemFreeAsync", FIX_FREE_ASYNC },
    { "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemFreeAsync",
      FIX_FREE_ASYNC },
    { "cuMemFreeAsync", 12000, PTDS, "cuMemFreeAsync_ptsz", FIX_FREE_ASYNC },
    { "cuMemFreeHost", 2000, 0, "cuMemFreeHost", FIX_FREE_HOST },
    { "cuMemHostUnregister", 4000, 0, "cuMemHostUnregister", FIX_FREE_HOST },
    { "cuMemUnmap", 10020, 0, "cuMemUnmap", FIX_UNMAP },
    { "cuMemAddressFree", 10020, 0, "cuMemAddressFree", FIX_ADDRESS_FREE },
    { "cuCtxDestroy", 2000, 0, "cuCtxDestroy", FIX_CTX_GONE },
    { "cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2", FIX_CTX_GONE },
    { "cuDevicePrimaryCtxReset", 7000, 0, "cuDevicePrimaryCtxReset", FIX_DEVICE_GONE },
    { "cuDevicePrimaryCtxReset", 11000, 0, "cuDevicePrimaryCtxReset_v2", FIX_DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease", 7000, 0, "cuDevicePrimaryCtxRelease", FIX_DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2", FIX_DEVICE_GONE },
    { "cuMemAlloc", 3020, 0, "cuMemAlloc_v2", FIX_ALLOC },
    { "cuMemAllocAsync", 11020, 0, "cuMemAllocAsync", FIX_ALLOC_ASYNC },
    { "cuMemAllocAsync", 11020, PTDS, "cuMemAllocAsync_ptsz", FIX_ALLOC_ASYNC },
    { "cuMemAllocFromPoolAsync", 11020, 0, "cuMemAllocFromPoolAsync", FIX_ALLOC_POOL },
    { "cuMemAllocFromPoolAsync", 11020, PTDS, "cuMemAllocFromPoolAsync_ptsz", FIX_ALLOC_POOL },
    { "cuMemMap", 10020, 0, "cuMemMap", FIX_MAP },
    { "cuMemAllocHost", 3020, 0, "cuMemAllocHost_v2", FIX_ALLOC_HOST },
    { "cuMemAllocHost", 12000, 0, "cuMemAllocHost_v2", FIX_ALLOC_HOST },
    { "cuMemHostAlloc", 2020, 0, "cuMemHostAlloc", FIX_ALLOC_HOST_FLAGS },
    { "cuGetProcAddress", 11030, 0, "cuMemFree_v2", FIX_GET_PROC },
    { "cuGetProcAddress", 12000, 0, "cuMemFree_v2", FIX_GET_PROC_V2 },
};
const size_t fixture_n_procs = sizeof fixture_procs / sizeof fixture_procs[0];

const struct fixture_export fixture_exports[] = {
    { "cuMemFree_v2", (void *)cuMemFree_v2, FIX_FREE },
    { "cuIpcCloseMemHandle", (void *)cuIpcCloseMemHandle, FIX_FREE },
    { "cuMemFreeAsync", (void *)cuMemFreeAsync, FIX_FREE_ASYNC },
    { "cuMemFreeAsync_ptsz", (void *)cuMemFreeAsync_ptsz, FIX_FREE_ASYNC },
    { "cuMemFreeHost", (void *)cuMemFreeHost, FIX_FREE_HOST },
    { "cuMemHostUnregister", (void *)cuMemHostUnregister, FIX_FREE_HOST },
    { "cuMemUnmap", (void *)cuMemUnmap, FIX_UNMAP },
    { "cuMemAddressFree", (void *)cuMemAddressFree, FIX_ADDRESS_FREE },
    { "cuCtxDestroy", (void *)cuCtxDestroy, FIX_CTX_GONE },
    { "cuCtxDestroy_v2", (void *)cuCtxDestroy_v2, FIX_CTX_GONE },
    { "cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset, FIX_DEVICE_GONE },
    { "cuDevicePrimaryCtxReset_v2", (void *)cuDevicePrimaryCtxReset_v2, FIX_DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease, FIX_DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease_v2", (void *)cuDevicePrimaryCtxRelease_v2, FIX_DEVICE_GONE },
    { "cuMemAlloc_v2", (void *)cuMemAlloc_v2, FIX_ALLOC },
    { "cuMemAllocAsync", (void *)cuMemAllocAsync, FIX_ALLOC_ASYNC },
    { "cuMemAllocAsync_ptsz", (void *)cuMemAllocAsync_ptsz, FIX_ALLOC_ASYNC },
    { "cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync, FIX_ALLOC_POOL },
    { "cuMemAllocFromPoolAsync_ptsz", (void *)cuMemAllocFromPoolAsync_ptsz, FIX_ALLOC_POOL },
    { "cuMemMap", (void *)cuMemMap, FIX_MAP },
    { "cuMemAllocHost_v2", (void *)cuMemAllocHost_v2, FIX_ALLOC_HOST },
    { "cuMemHostAlloc", (void *)cuMemHostAlloc, FIX_ALLOC_HOST_FLAGS },
    { "cuGetProcAddress", (void *)cuGetProcAddress, FIX_GET_PROC },
    { "cuGetProcAddress_v2", (void *)cuGetProcAddress_v2, FIX_GET_PROC_V2 },
};
const size_t fixture_n_exports = sizeof fixture_exports / sizeof fixture_exports[0];

const char *fixture_runs(const struct fixture_export *e)
{
    return e->what == FIX_GET_PROC || e->what == FIX_GET_PROC_V2 ? "cuMemFree_v2" : e->name;
}

void fixture_assert_dereg_before(uintptr_t addr, const char *runs, uintptr_t call_addr)
{
    long dereg = fixture_dereg_at(addr), call = fixture_call_of(runs, call_addr);
    assert_true(dereg >= 0);
    assert_true(call >= 0);
    assert_true(dereg < call);
}

/* A freeing function: the cache deregisters while the memory is live. */
static void check_free(regcache_t *cache, enum fixture_what what, void *fn, const char *runs)
{
    uintptr_t p = fixture_cached_alloc(cache, what == FIX_FREE_HOST);
    CUresult r = what == FIX_FREE         ? ((CUresult(*)(CUdeviceptr))fn)(p)
                 : what == FIX_FREE_ASYNC ? ((CUresult(*)(CUdeviceptr, CUstream))fn)(p, NULL)
                                          : ((CUresult(*)(void *))fn)((void *)p);
    assert_int_equal(r, CUDA_SUCCESS);
    fixture_assert_dereg_before(p, runs, p);
    assert_true(fixture_dereg_was_live(fixture_dereg_at(p)));
    assert_int_equal(fixture_notified(cache), 1);
}

typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);

/* A range of FIXTURE_SIZE bytes reserved for a mapping. */
static CUdeviceptr reserved(void)
{
    CUdeviceptr p;
    assert_int_equal(((CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))
                          fixture_own("cuMemAddressReserve"))(&p, FIXTURE_SIZE, 0, 0, 0),
                     CUDA_SUCCESS);
    return p;
}

/* A reserved and mapped range, cached. */
static CUdeviceptr cached_mapping(regcache_t *cache)
{
    CUdeviceptr p = reserved();
    assert_int_equal(((map_fn)fixture_own("cuMemMap"))(p, FIXTURE_SIZE, 0, 0, 0), CUDA_SUCCESS);
    fixture_cache_range(cache, p, FIXTURE_SIZE);
    return p;
}

static CUresult unmap_unhooked(CUdeviceptr p)
{
    return ((CUresult(*)(CUdeviceptr, size_t))fixture_own("cuMemUnmap"))(p, FIXTURE_SIZE);
}

static void check_range(regcache_t *cache, enum fixture_what what, void *fn, const char *runs)
{
    CUdeviceptr p = cached_mapping(cache);
    /* cuMemAddressFree needs the range unmapped: unmapped behind the
     * hook's back, the cache still holds it. */
    if (what == FIX_ADDRESS_FREE)
        assert_int_equal(unmap_unhooked(p), CUDA_SUCCESS);
    assert_int_equal(((CUresult(*)(CUdeviceptr, size_t))fn)(p, FIXTURE_SIZE), CUDA_SUCCESS);
    fixture_assert_dereg_before(p, runs, p);
    assert_int_equal(fixture_notified(cache), 1);
}

/* A context goes: every cached range goes first. */
static void check_context(regcache_t *cache, enum fixture_what what, void *fn, const char *runs)
{
    static int context;
    uintptr_t a = fixture_cached_alloc(cache, 0), b = fixture_cached_alloc(cache, 1);
    CUresult r = what == FIX_CTX_GONE ? ((CUresult(*)(CUcontext))fn)((CUcontext)&context)
                                      : ((CUresult(*)(CUdevice))fn)(0);
    assert_int_equal(r, CUDA_SUCCESS);
    fixture_assert_dereg_before(a, runs, 0);
    fixture_assert_dereg_before(b, runs, 0);
    assert_true(fixture_dereg_was_live(fixture_dereg_at(a)));
    assert_int_equal(fixture_notified(cache), 2);
}

static int pinned_host(enum fixture_what what)
{
    return what == FIX_ALLOC_HOST || what == FIX_ALLOC_HOST_FLAGS;
}

/* Allocate FIXTURE_SIZE bytes through fn, a function that does `what`:
 * mapped at *ptr, a reserved range, for FIX_MAP, else where the double
 * puts them (in *ptr). */
static CUresult allocate(enum fixture_what what, void *fn, CUdeviceptr *ptr)
{
    void *host = NULL;
    CUresult r;
    switch (what) {
    case FIX_MAP:
        return ((map_fn)fn)(*ptr, FIXTURE_SIZE, 0, 0, 0);
    case FIX_ALLOC:
        return ((CUresult(*)(CUdeviceptr *, size_t))fn)(ptr, FIXTURE_SIZE);
    case FIX_ALLOC_ASYNC:
        return ((CUresult(*)(CUdeviceptr *, size_t, CUstream))fn)(ptr, FIXTURE_SIZE, NULL);
    case FIX_ALLOC_POOL:
        return ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))fn)(ptr, FIXTURE_SIZE,
                                                                                NULL, NULL);
    case FIX_ALLOC_HOST:
        r = ((CUresult(*)(void **, size_t))fn)(&host, FIXTURE_SIZE);
        break;
    default:
        r = ((CUresult(*)(void **, size_t, unsigned int))fn)(&host, FIXTURE_SIZE, 0);
        break;
    }
    *ptr = (CUdeviceptr)(uintptr_t)host;
    return r;
}

/* A stale cached range (its free went unseen) handed out again: dropped
 * after the driver allocated it and before the caller sees it. */
static void check_alloc(regcache_t *cache, enum fixture_what what, void *fn, const char *runs)
{
    CUdeviceptr p, q = 0;
    if (what == FIX_MAP) {
        p = cached_mapping(cache);
        assert_int_equal(unmap_unhooked(p), CUDA_SUCCESS);
        q = p;
    } else {
        p = fixture_cached_alloc(cache, pinned_host(what));
        fakecuda_free_unhooked(p);
    }
    assert_int_equal(allocate(what, fn, &q), CUDA_SUCCESS);
    assert_int_equal(q, p);
    long call = fixture_call_of(runs, q), dereg = fixture_dereg_at(p);
    assert_true(call >= 0);
    assert_true(dereg > call);
    assert_int_equal(fixture_notified(cache), 1);
}

/* With eager registration on, a new allocation is registered before its
 * first get, which hits; pinned host memory in a cache that refuses host
 * memory is not even queued. */
static void check_eager(enum fixture_what what, void *fn, const char *runs, int host_memory)
{
    fakecuda_reset();
    struct regcache_params params;
    fixture_params(&params);
    params.host_memory = host_memory;
    params.eager_min_bytes = FIXTURE_SIZE;
    regcache_t *cache = NULL;
    assert_int_equal(regcache_create(&params, &cache), REGCACHE_OK);
    CUdeviceptr q = what == FIX_MAP ? reserved() : 0;
    assert_int_equal(allocate(what, fn, &q), CUDA_SUCCESS);
    assert_true(fixture_call_of(runs, q) >= 0);
    assert_int_equal(regcache_prefetch_wait(cache), REGCACHE_OK);
    uint64_t queued = !pinned_host(what) || host_memory;
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(cache, &s), REGCACHE_OK);
    assert_int_equal(s.prefetches, queued);
    assert_int_equal(s.registrations, queued);
    assert_int_equal(s.prefetch_failures, 0);
    if (queued) {
        fixture_cache_range(cache, q, FIXTURE_SIZE);
        assert_int_equal(regcache_get_stats(cache, &s), REGCACHE_OK);
        assert_int_equal(s.hits, 1);
        assert_int_equal(s.misses, 0);
    }
    regcache_destroy(cache);
}

/* A cuGetProcAddress: the cuMemFree it hands out lets the caches go too. */
static void check_get_proc(enum fixture_what what, void *fn, const char *runs)
{
    void *free_fn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = what == FIX_GET_PROC_V2
                     ? ((get_proc_v2_fn)fn)("cuMemFree", &free_fn, 3020, 0, &status)
                     : ((get_proc_fn)fn)("cuMemFree", &free_fn, 3020, 0);
    assert_int_equal(r, CUDA_SUCCESS);
    assert_int_equal(status, what == FIX_GET_PROC_V2 ? CU_GET_PROC_ADDRESS_SUCCESS
                                                     : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fixture_check(FIX_FREE, free_fn, runs);
}

void fixture_check(enum fixture_what what, void *fn, const char *runs)
{
    assert_non_null(fn);
    if (what == FIX_GET_PROC || what == FIX_GET_PROC_V2) {
        check_get_proc(what, fn, runs);
        return;
    }
    regcache_t *cache = fixture_cache();
    switch (what) {
    case FIX_FREE:
    case FIX_FREE_ASYNC:
    case FIX_FREE_HOST:
        check_free(cache, what, fn, runs);
        break;
    case FIX_UNMAP:
    case FIX_ADDRESS_FREE:
        check_range(cache, what, fn, runs);
        break;
    case FIX_CTX_GONE:
    case FIX_DEVICE_GONE:
        check_context(cache, what, fn, runs);
        break;
    default:
        check_alloc(cache, what, fn, runs);
        break;
    }
    regcache_destroy(cache);
    if (what == FIX_ALLOC || what == FIX_ALLOC_ASYNC || what == FIX_ALLOC_POOL || what == FIX_MAP ||
        pinned_host(what))
        check_eager(what, fn, runs, 1);
    if (pinned_host(what))
        check_eager(what, fn, runs, 0);
}

void fixture_check_procs(void *gpa, int five_args)
{
    for (size_t i = 0; i < fixture_n_procs; i++) {
        const struct fixture_variant *v = &fixture_procs[i];
        print_message("  %s version %d flags %u -> %s\n", v->proc, v->version, v->flags, v->runs);
        void *fn = NULL;
        CUresult r = five_args ? ((get_proc_v2_fn)gpa)(v->proc, &fn, v->version, v->flags, NULL)
                               : ((get_proc_fn)gpa)(v->proc, &fn, v->version, v->flags);
        assert_int_equal(r, CUDA_SUCCESS);
        fixture_check(v->what, fn, v->runs);
    }
}
