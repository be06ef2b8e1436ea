/* The driver symbols the hook defines for programs that call the driver
 * directly (linked with -lcuda: their calls bind to the first definition,
 * the hook's).  Each forwards to libcuda's own definition of the same name,
 * whose ABI the name fixes. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "hook.h"

/* cuda.h maps these names to the newest ABI; the hook defines each ABI under
 * its own name. */
#undef cuGetProcAddress
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease

#define RC_HOOK_API __attribute__((visibility("default")))

/* Each export: symbol, kind, prototype, argument names. */
#define RC_HOOK_EXPORTS(X)                                                      \
    X(cuGetProcAddress, gpa4,                                                   \
      (const char *symbol, void **pfn, int version, cuuint64_t flags),          \
      symbol, pfn, version, flags)                                              \
    X(cuGetProcAddress_v2, gpa5,                                                \
      (const char *symbol, void **pfn, int version, cuuint64_t flags,           \
       CUdriverProcAddressQueryResult *status),                                 \
      symbol, pfn, version, flags, status)                                      \
    X(cuMemFree_v2, free, (CUdeviceptr ptr), ptr)                               \
    X(cuIpcCloseMemHandle, free, (CUdeviceptr ptr), ptr)                        \
    X(cuMemFreeAsync, free_async, (CUdeviceptr ptr, CUstream stream), ptr, stream) \
    X(cuMemFreeAsync_ptsz, free_async, (CUdeviceptr ptr, CUstream stream),      \
      ptr, stream)                                                              \
    X(cuMemFreeHost, free_host, (void *ptr), ptr)                               \
    X(cuMemUnmap, free_range, (CUdeviceptr ptr, size_t size), ptr, size)        \
    X(cuMemAddressFree, free_range, (CUdeviceptr ptr, size_t size), ptr, size)  \
    X(cuCtxDestroy, ctx_gone, (CUcontext ctx), ctx)                             \
    X(cuCtxDestroy_v2, ctx_gone, (CUcontext ctx), ctx)                          \
    X(cuDevicePrimaryCtxReset, device_gone, (CUdevice device), device)          \
    X(cuDevicePrimaryCtxReset_v2, device_gone, (CUdevice device), device)       \
    X(cuDevicePrimaryCtxRelease, device_gone, (CUdevice device), device)        \
    X(cuDevicePrimaryCtxRelease_v2, device_gone, (CUdevice device), device)     \
    X(cuMemAlloc_v2, alloc, (CUdeviceptr *ptr, size_t size), ptr, size)         \
    X(cuMemAllocAsync, alloc_async,                                             \
      (CUdeviceptr *ptr, size_t size, CUstream stream), ptr, size, stream)      \
    X(cuMemAllocAsync_ptsz, alloc_async,                                        \
      (CUdeviceptr *ptr, size_t size, CUstream stream), ptr, size, stream)      \
    X(cuMemAllocFromPoolAsync, alloc_pool,                                      \
      (CUdeviceptr *ptr, size_t size, CUmemoryPool pool, CUstream stream),      \
      ptr, size, pool, stream)                                                  \
    X(cuMemAllocFromPoolAsync_ptsz, alloc_pool,                                 \
      (CUdeviceptr *ptr, size_t size, CUmemoryPool pool, CUstream stream),      \
      ptr, size, pool, stream)                                                  \
    X(cuMemMap, map,                                                            \
      (CUdeviceptr ptr, size_t size, size_t offset,                             \
       CUmemGenericAllocationHandle handle, unsigned long long flags),          \
      ptr, size, offset, handle, flags)

/* libcuda's definition of `symbol`, looked up on first use. */
static void *driver_definition(_Atomic(void *) *cache, const char *symbol)
{
    void *fn = rc_hook_driver_function(cache, symbol);
    if (fn == NULL) {
        /* What the dynamic linker does for a function no library defines. */
        fprintf(stderr, "libregcache-hook.so: %s called, but libcuda.so.1 is not "
                        "loaded or does not define it\n", symbol);
        _exit(127);
    }
    return fn;
}

/* The ptsz names are only declared by cuda.h under per-thread streams. */
#define RC_HOOK_PROTOTYPE(symbol, kind, params, ...) RC_HOOK_API CUresult symbol params;
RC_HOOK_EXPORTS(RC_HOOK_PROTOTYPE)

#define RC_HOOK_DEFINE(symbol, kind, params, ...)                               \
    CUresult symbol params                                                      \
    {                                                                           \
        static _Atomic(void *) real;                                            \
        return rc_hook_##kind(driver_definition(&real, #symbol), __VA_ARGS__);  \
    }
RC_HOOK_EXPORTS(RC_HOOK_DEFINE)

/* Does the process resolve `symbol` to the hook's definition?  Asked as the
 * hook (no -Bsymbolic, so its scope starts with the global one) and judged by
 * the defining object: the hook's own address of an exported function would
 * itself come from the global lookup. */
static int resolves_to_hook(const char *symbol)
{
    return rc_hook_is_own(rc_hook_real_dlsym()(RTLD_DEFAULT, symbol));
}

int rc_hook_exports_resolved(void)
{
    /* The order of the libraries loaded at startup never changes, so the
     * first answer holds for the life of the process: 1 yes, -1 no. */
    static atomic_int known;
    int k = atomic_load_explicit(&known, memory_order_acquire);
    if (k != 0)
        return k > 0;
#define RC_HOOK_CHECK(symbol, kind, params, ...) && resolves_to_hook(#symbol)
    int ok = resolves_to_hook("dlsym") RC_HOOK_EXPORTS(RC_HOOK_CHECK);
#undef RC_HOOK_CHECK
    atomic_store_explicit(&known, ok ? 1 : -1, memory_order_release);
    return ok;
}
