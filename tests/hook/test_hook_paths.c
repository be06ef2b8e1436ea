/* Every way a program reaches a memory function of the driver - through
 * cuGetProcAddress (both forms, every version and flags variant), through
 * dlsym on the driver's handle, and through a direct (PLT) call - ends in a
 * wrapper that lets the caches go of a range before the driver frees it, and
 * drops a stale cached range when the driver hands it out again.  Runs with
 * libregcache-hook.so in LD_PRELOAD, over the libcuda test double. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "fake_libcuda.h"
#include "hook_fixture.h"

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

typedef CUresult (*gpa5_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa4_fn)(const char *, void **, int, cuuint64_t);

/* What a driver function does to memory, which decides how it is tested. */
enum what {
    FREE, FREE_ASYNC, FREE_HOST, UNMAP, ADDRESS_FREE, CTX_GONE, DEVICE_GONE,
    ALLOC, ALLOC_ASYNC, ALLOC_POOL, MAP, GPA4, GPA5
};

/* The driver function that must run (the double logs under that name). */
struct variant {
    const char *proc; /* cuGetProcAddress name */
    int version;
    unsigned flags;
    const char *runs;
    enum what what;
};

static const struct variant procs[] = {
    { "cuMemFree", 3020, 0, "cuMemFree_v2", FREE },
    { "cuMemFree", 12000, 0, "cuMemFree_v2", FREE },
    { "cuIpcCloseMemHandle", 4010, 0, "cuIpcCloseMemHandle", FREE },
    { "cuMemFreeAsync", 11020, 0, "cuMemFreeAsync", FREE_ASYNC },
    { "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemFreeAsync", FREE_ASYNC },
    { "cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
      "cuMemFreeAsync_ptsz", FREE_ASYNC },
    { "cuMemFreeHost", 2000, 0, "cuMemFreeHost", FREE_HOST },
    { "cuMemUnmap", 10020, 0, "cuMemUnmap", UNMAP },
    { "cuMemAddressFree", 10020, 0, "cuMemAddressFree", ADDRESS_FREE },
    { "cuCtxDestroy", 2000, 0, "cuCtxDestroy", CTX_GONE },
    { "cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2", CTX_GONE },
    { "cuDevicePrimaryCtxReset", 7000, 0, "cuDevicePrimaryCtxReset", DEVICE_GONE },
    { "cuDevicePrimaryCtxReset", 11000, 0, "cuDevicePrimaryCtxReset_v2", DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease", 7000, 0, "cuDevicePrimaryCtxRelease", DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2", DEVICE_GONE },
    { "cuMemAlloc", 3020, 0, "cuMemAlloc_v2", ALLOC },
    { "cuMemAllocAsync", 11020, 0, "cuMemAllocAsync", ALLOC_ASYNC },
    { "cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
      "cuMemAllocAsync_ptsz", ALLOC_ASYNC },
    { "cuMemAllocFromPoolAsync", 11020, 0, "cuMemAllocFromPoolAsync", ALLOC_POOL },
    { "cuMemAllocFromPoolAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
      "cuMemAllocFromPoolAsync_ptsz", ALLOC_POOL },
    { "cuMemMap", 10020, 0, "cuMemMap", MAP },
    { "cuGetProcAddress", 11030, 0, "cuMemFree_v2", GPA4 },
    { "cuGetProcAddress", 12000, 0, "cuMemFree_v2", GPA5 },
};

/* Each exported name, as dlsym on the driver and a direct call reach it. */
static const struct symbol {
    const char *name;
    void *direct;
    enum what what;
} symbols[] = {
    { "cuMemFree_v2", (void *)cuMemFree_v2, FREE },
    { "cuIpcCloseMemHandle", (void *)cuIpcCloseMemHandle, FREE },
    { "cuMemFreeAsync", (void *)cuMemFreeAsync, FREE_ASYNC },
    { "cuMemFreeAsync_ptsz", (void *)cuMemFreeAsync_ptsz, FREE_ASYNC },
    { "cuMemFreeHost", (void *)cuMemFreeHost, FREE_HOST },
    { "cuMemUnmap", (void *)cuMemUnmap, UNMAP },
    { "cuMemAddressFree", (void *)cuMemAddressFree, ADDRESS_FREE },
    { "cuCtxDestroy", (void *)cuCtxDestroy, CTX_GONE },
    { "cuCtxDestroy_v2", (void *)cuCtxDestroy_v2, CTX_GONE },
    { "cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset, DEVICE_GONE },
    { "cuDevicePrimaryCtxReset_v2", (void *)cuDevicePrimaryCtxReset_v2, DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease, DEVICE_GONE },
    { "cuDevicePrimaryCtxRelease_v2", (void *)cuDevicePrimaryCtxRelease_v2, DEVICE_GONE },
    { "cuMemAlloc_v2", (void *)cuMemAlloc_v2, ALLOC },
    { "cuMemAllocAsync", (void *)cuMemAllocAsync, ALLOC_ASYNC },
    { "cuMemAllocAsync_ptsz", (void *)cuMemAllocAsync_ptsz, ALLOC_ASYNC },
    { "cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync, ALLOC_POOL },
    { "cuMemAllocFromPoolAsync_ptsz", (void *)cuMemAllocFromPoolAsync_ptsz, ALLOC_POOL },
    { "cuMemMap", (void *)cuMemMap, MAP },
    { "cuGetProcAddress", (void *)cuGetProcAddress, GPA4 },
    { "cuGetProcAddress_v2", (void *)cuGetProcAddress_v2, GPA5 },
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void *driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    return lib;
}

/* The double's own function, called where a test sets memory up. */
static void *own(const char *symbol)
{
    void *fn = fakecuda_own(symbol);
    assert_non_null(fn);
    return fn;
}

static void assert_dereg_before(uintptr_t addr, const char *runs, uintptr_t call_addr)
{
    long dereg = fixture_dereg_at(addr), call = fixture_call_of(runs, call_addr);
    assert_true(dereg >= 0);
    assert_true(call >= 0);
    assert_true(dereg < call);
}

/* A freeing function: the cache deregisters while the memory is live. */
static void check_free(regcache_t *cache, enum what what, void *fn, const char *runs)
{
    uintptr_t p = fixture_cached_alloc(cache, what == FREE_HOST);
    CUresult r = what == FREE ? ((CUresult(*)(CUdeviceptr))fn)(p)
                 : what == FREE_ASYNC ? ((CUresult(*)(CUdeviceptr, CUstream))fn)(p, NULL)
                                      : ((CUresult(*)(void *))fn)((void *)p);
    assert_int_equal(r, CUDA_SUCCESS);
    assert_dereg_before(p, runs, p);
    assert_true(fixture_dereg_was_live(fixture_dereg_at(p)));
    assert_int_equal(fixture_notified(cache), 1);
}

/* A reserved and mapped range, cached. */
static CUdeviceptr cached_mapping(regcache_t *cache)
{
    CUdeviceptr p;
    assert_int_equal(((CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                   unsigned long long))own("cuMemAddressReserve"))(
                         &p, FIXTURE_SIZE, 0, 0, 0),
                     CUDA_SUCCESS);
    assert_int_equal(((CUresult(*)(CUdeviceptr, size_t, size_t,
                                   CUmemGenericAllocationHandle, unsigned long long))
                          own("cuMemMap"))(p, FIXTURE_SIZE, 0, 0, 0),
                     CUDA_SUCCESS);
    fixture_cache_range(cache, p, FIXTURE_SIZE);
    return p;
}

static CUresult unmap_unhooked(CUdeviceptr p)
{
    return ((CUresult(*)(CUdeviceptr, size_t))own("cuMemUnmap"))(p, FIXTURE_SIZE);
}

static void check_range(regcache_t *cache, enum what what, void *fn, const char *runs)
{
    CUdeviceptr p = cached_mapping(cache);
    /* cuMemAddressFree needs the range unmapped: unmapped behind the
     * hook's back, the cache still holds it. */
    if (what == ADDRESS_FREE)
        assert_int_equal(unmap_unhooked(p), CUDA_SUCCESS);
    assert_int_equal(((CUresult(*)(CUdeviceptr, size_t))fn)(p, FIXTURE_SIZE), CUDA_SUCCESS);
    assert_dereg_before(p, runs, p);
    assert_int_equal(fixture_notified(cache), 1);
}

/* A context goes: every cached range goes first. */
static void check_context(regcache_t *cache, enum what what, void *fn, const char *runs)
{
    uintptr_t a = fixture_cached_alloc(cache, 0), b = fixture_cached_alloc(cache, 1);
    CUresult r = what == CTX_GONE ? ((CUresult(*)(CUcontext))fn)(NULL)
                                  : ((CUresult(*)(CUdevice))fn)(0);
    assert_int_equal(r, CUDA_SUCCESS);
    assert_dereg_before(a, runs, 0);
    assert_dereg_before(b, runs, 0);
    assert_true(fixture_dereg_was_live(fixture_dereg_at(a)));
    assert_int_equal(fixture_notified(cache), 2);
}

/* A stale cached range (its free went unseen) handed out again: dropped
 * after the driver allocated it and before the caller sees it. */
static void check_alloc(regcache_t *cache, enum what what, void *fn, const char *runs)
{
    CUdeviceptr p, q = 0;
    CUresult r;
    if (what == MAP) {
        p = cached_mapping(cache);
        assert_int_equal(unmap_unhooked(p), CUDA_SUCCESS);
        q = p;
        r = ((CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                          unsigned long long))fn)(p, FIXTURE_SIZE, 0, 0, 0);
    } else {
        p = fixture_cached_alloc(cache, 0);
        fakecuda_free_unhooked(p);
        r = what == ALLOC ? ((CUresult(*)(CUdeviceptr *, size_t))fn)(&q, FIXTURE_SIZE)
            : what == ALLOC_ASYNC
                ? ((CUresult(*)(CUdeviceptr *, size_t, CUstream))fn)(&q, FIXTURE_SIZE, NULL)
                : ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))fn)(
                      &q, FIXTURE_SIZE, NULL, NULL);
    }
    assert_int_equal(r, CUDA_SUCCESS);
    assert_int_equal(q, p);
    long call = fixture_call_of(runs, q), dereg = fixture_dereg_at(p);
    assert_true(call >= 0);
    assert_true(dereg > call);
    assert_int_equal(fixture_notified(cache), 1);
}

static void check(enum what what, void *fn, const char *runs);

/* A cuGetProcAddress: what it hands out for cuMemFree is a wrapper too. */
static void check_gpa(enum what what, void *fn, const char *runs)
{
    void *free_fn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = what == GPA5 ? ((gpa5_fn)fn)("cuMemFree", &free_fn, 3020, 0, &status)
                              : ((gpa4_fn)fn)("cuMemFree", &free_fn, 3020, 0);
    assert_int_equal(r, CUDA_SUCCESS);
    assert_int_equal(status, what == GPA5 ? CU_GET_PROC_ADDRESS_SUCCESS
                                          : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    assert_ptr_not_equal(free_fn, own("cuMemFree_v2"));
    check(FREE, free_fn, runs);
}

static void check(enum what what, void *fn, const char *runs)
{
    assert_non_null(fn);
    if (what == GPA4 || what == GPA5) {
        check_gpa(what, fn, runs);
        return;
    }
    regcache_t *cache = fixture_cache();
    switch (what) {
    case FREE: case FREE_ASYNC: case FREE_HOST:
        check_free(cache, what, fn, runs);
        break;
    case UNMAP: case ADDRESS_FREE:
        check_range(cache, what, fn, runs);
        break;
    case CTX_GONE: case DEVICE_GONE:
        check_context(cache, what, fn, runs);
        break;
    default:
        check_alloc(cache, what, fn, runs);
        break;
    }
    regcache_destroy(cache);
}

/* Every variant through one cuGetProcAddress. */
static void check_procs(void *gpa, int five_args)
{
    for (size_t i = 0; i < N(procs); i++) {
        const struct variant *v = &procs[i];
        print_message("  %s version %d flags %u -> %s\n", v->proc, v->version, v->flags,
                      v->runs);
        void *fn = NULL;
        CUresult r = five_args
                         ? ((gpa5_fn)gpa)(v->proc, &fn, v->version, v->flags, NULL)
                         : ((gpa4_fn)gpa)(v->proc, &fn, v->version, v->flags);
        assert_int_equal(r, CUDA_SUCCESS);
        check(v->what, fn, v->runs);
    }
}

static void gpa5_from_dlsym(void **state)
{
    (void)state;
    void *gpa = dlsym(driver(), "cuGetProcAddress_v2");
    assert_ptr_not_equal(gpa, own("cuGetProcAddress_v2"));
    check_procs(gpa, 1);
}

static void gpa4_from_dlsym(void **state)
{
    (void)state;
    void *gpa = dlsym(driver(), "cuGetProcAddress");
    assert_ptr_not_equal(gpa, own("cuGetProcAddress"));
    check_procs(gpa, 0);
}

static void gpa_from_direct_calls(void **state)
{
    (void)state;
    check_procs((void *)cuGetProcAddress_v2, 1);
    check_procs((void *)cuGetProcAddress, 0);
}

/* The runtime's way: cuGetProcAddress asked for itself, both forms. */
static void gpa_from_gpa(void **state)
{
    (void)state;
    gpa5_fn gpa = (gpa5_fn)dlsym(driver(), "cuGetProcAddress_v2");
    void *four = NULL, *five = NULL;
    assert_int_equal(gpa("cuGetProcAddress", &four, 11030, 0, NULL), CUDA_SUCCESS);
    assert_int_equal(gpa("cuGetProcAddress", &five, 12000, 0, NULL), CUDA_SUCCESS);
    check_procs(four, 0);
    check_procs(five, 1);
}

static void symbols_from_dlsym(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(symbols); i++) {
        print_message("  dlsym %s\n", symbols[i].name);
        void *fn = dlsym(driver(), symbols[i].name);
        assert_ptr_not_equal(fn, own(symbols[i].name));
        check(symbols[i].what, fn,
              symbols[i].what == GPA4 || symbols[i].what == GPA5 ? "cuMemFree_v2"
                                                                 : symbols[i].name);
    }
}

static void symbols_called_directly(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(symbols); i++) {
        print_message("  direct %s\n", symbols[i].name);
        check(symbols[i].what, symbols[i].direct,
              symbols[i].what == GPA4 || symbols[i].what == GPA5 ? "cuMemFree_v2"
                                                                 : symbols[i].name);
    }
    /* And a literal call, as a driver-API program writes it. */
    regcache_t *cache = fixture_cache();
    uintptr_t p = fixture_cached_alloc(cache, 0);
    assert_int_equal(cuMemFree(p), CUDA_SUCCESS);
    assert_dereg_before(p, "cuMemFree_v2", p);
    regcache_destroy(cache);
}

/* Functions that neither allocate nor free come back untouched; one real
 * function has one wrapper however it is asked for; each flags variant its
 * own. */
static void wrapping_is_exact(void **state)
{
    (void)state;
    gpa5_fn gpa = (gpa5_fn)dlsym(driver(), "cuGetProcAddress_v2");
    void *a = NULL, *b = NULL;
    assert_int_equal(gpa("cuInit", &a, 2000, 0, NULL), CUDA_SUCCESS);
    assert_ptr_equal(a, own("cuInit"));
    assert_ptr_equal(dlsym(driver(), "cuMemGetAddressRange_v2"),
                     own("cuMemGetAddressRange_v2"));
    assert_int_equal(gpa("cuMemFree", &a, 3020, 0, NULL), CUDA_SUCCESS);
    assert_int_equal(gpa("cuMemFree", &b, 13000, 0, NULL), CUDA_SUCCESS);
    assert_ptr_equal(a, b);
    assert_int_equal(gpa("cuMemFreeAsync", &a, 11020, 0, NULL), CUDA_SUCCESS);
    assert_int_equal(gpa("cuMemFreeAsync", &b, 11020,
                         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
                     CUDA_SUCCESS);
    assert_ptr_not_equal(a, b);
    /* A name the driver does not know stays an error. */
    a = &a;
    assert_int_equal(gpa("cuNoSuchThing", &a, 12000, 0, NULL), CUDA_ERROR_NOT_FOUND);
    assert_null(a);
    /* The hook's own exports, found through its handle, are not wrapped
     * twice. */
    void *hook = dlopen(HOOK_PATH, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(hook);
    assert_ptr_equal(dlsym(hook, "cuMemFree_v2"), dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
    dlclose(hook);
}

/* A free of memory the driver cannot place: the hook cannot tell what goes,
 * so everything goes, before the driver runs. */
static void unplaceable_free_drops_everything(void **state)
{
    (void)state;
    regcache_t *cache = fixture_cache();
    uintptr_t a = fixture_cached_alloc(cache, 0), b = fixture_cached_alloc(cache, 1);
    uintptr_t nowhere = b + FAKECUDA_SLOT_SIZE * 8;
    assert_int_equal(cuMemFree(nowhere), CUDA_ERROR_INVALID_VALUE);
    assert_true(fixture_dereg_at(a) >= 0);
    assert_true(fixture_dereg_at(b) >= 0);
    assert_int_equal(fixture_notified(cache), 2);
    regcache_destroy(cache);
}

/* RTLD_NEXT and RTLD_DEFAULT still search from the caller's object: from the
 * program, "next" is the preloaded hook. */
static void pseudo_handles_keep_the_caller(void **state)
{
    (void)state;
    assert_non_null(dlsym(RTLD_NEXT, "regcache_hook_active"));
    assert_ptr_equal(dlsym(RTLD_NEXT, "cuMemFree_v2"), dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
    assert_ptr_not_equal(dlsym(RTLD_DEFAULT, "cuMemFree_v2"), own("cuMemFree_v2"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpa5_from_dlsym),
        cmocka_unit_test(gpa4_from_dlsym),
        cmocka_unit_test(gpa_from_direct_calls),
        cmocka_unit_test(gpa_from_gpa),
        cmocka_unit_test(symbols_from_dlsym),
        cmocka_unit_test(symbols_called_directly),
        cmocka_unit_test(wrapping_is_exact),
        cmocka_unit_test(unplaceable_free_drops_everything),
        cmocka_unit_test(pseudo_handles_keep_the_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
