/* The body of each kind of wrapper (see wrap.h). */
#include <stdint.h>

#include "capture_mode.h"
#include "regcache.h"
#include "wrap.h"

typedef CUresult (*address_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

static void notify_range(CUdeviceptr ptr, size_t size)
{
    regcache_notify_free((const void *)(uintptr_t)ptr, size);
}

/* The notice after an allocation, which closes what notify-before-free
 * alone leaves open (regcache.h). */
static void notify_allocated(CUdeviceptr ptr, size_t size)
{
    regcache_notify_alloc((const void *)(uintptr_t)ptr, size);
}

/* A context takes all of its memory with it; the caches do not know which
 * context a range belongs to, so every range goes.  regcache_notify_free()
 * returns at once when there is no cache. */
static void notify_everything(void)
{
    regcache_notify_free(NULL, UINTPTR_MAX);
}

/* The allocation holding ptr goes away.  cuMemGetAddressRange places
 * device, pool and pinned host memory alike (measured on the GPU machine);
 * when it cannot, everything goes.  A stream-ordered free may be captured
 * into a graph: the query runs in the RELAXED capture mode, so that it
 * never breaks the capture (capture_mode.h). */
static void notify_allocation(CUdeviceptr ptr)
{
    static _Atomic(void *) range, exchange;
    /* Frees in a process without a cache cost one load, not a driver call. */
    if (regcache_cache_count() == 0)
        return;
    address_range_fn fn =
        (address_range_fn)rc_wrap_driver_function(&range, "cuMemGetAddressRange_v2");
    rc_exchange_fn relax =
        (rc_exchange_fn)rc_wrap_driver_function(&exchange, "cuThreadExchangeStreamCaptureMode");
    CUdeviceptr base;
    size_t size;
    struct rc_relaxed mode = rc_relax(relax);
    bool found = fn && fn(&base, &size, ptr) == CUDA_SUCCESS;
    rc_unrelax(relax, &mode);
    if (found)
        notify_range(base, size);
    else
        notify_everything();
}

CUresult rc_wrap_free(void *real, CUdeviceptr ptr)
{
    if (ptr != 0)
        notify_allocation(ptr);
    return ((CUresult(*)(CUdeviceptr))real)(ptr);
}

/* Stream-ordered: the memory stays usable until the stream reaches the free,
 * so the caches let go of it now, while it is certainly still valid. */
CUresult rc_wrap_free_async(void *real, CUdeviceptr ptr, CUstream stream)
{
    if (ptr != 0)
        notify_allocation(ptr);
    return ((CUresult(*)(CUdeviceptr, CUstream))real)(ptr, stream);
}

CUresult rc_wrap_free_host(void *real, void *ptr)
{
    if (ptr)
        notify_allocation((CUdeviceptr)(uintptr_t)ptr);
    return ((CUresult(*)(void *))real)(ptr);
}

CUresult rc_wrap_free_range(void *real, CUdeviceptr ptr, size_t size)
{
    notify_range(ptr, size);
    return ((CUresult(*)(CUdeviceptr, size_t))real)(ptr, size);
}

CUresult rc_wrap_ctx_gone(void *real, CUcontext ctx)
{
    notify_everything();
    return ((CUresult(*)(CUcontext))real)(ctx);
}

CUresult rc_wrap_device_gone(void *real, CUdevice device)
{
    notify_everything();
    return ((CUresult(*)(CUdevice))real)(device);
}

CUresult rc_wrap_alloc(void *real, CUdeviceptr *ptr, size_t size)
{
    CUresult r = ((CUresult(*)(CUdeviceptr *, size_t))real)(ptr, size);
    if (r == CUDA_SUCCESS)
        notify_allocated(*ptr, size);
    return r;
}

CUresult rc_wrap_alloc_async(void *real, CUdeviceptr *ptr, size_t size, CUstream stream)
{
    CUresult r = ((CUresult(*)(CUdeviceptr *, size_t, CUstream))real)(ptr, size, stream);
    if (r == CUDA_SUCCESS)
        notify_allocated(*ptr, size);
    return r;
}

CUresult rc_wrap_alloc_pool(void *real, CUdeviceptr *ptr, size_t size, CUmemoryPool pool,
                            CUstream stream)
{
    CUresult r =
        ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))real)(ptr, size, pool, stream);
    if (r == CUDA_SUCCESS)
        notify_allocated(*ptr, size);
    return r;
}

CUresult rc_wrap_map(void *real, CUdeviceptr ptr, size_t size, size_t offset,
                     CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = ((CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                               unsigned long long))real)(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS)
        notify_allocated(ptr, size);
    return r;
}

/* Pinned host memory: eager registration registers it only in caches that
 * take host memory. */
CUresult rc_wrap_alloc_host(void *real, void **ptr, size_t size)
{
    CUresult r = ((CUresult(*)(void **, size_t))real)(ptr, size);
    if (r == CUDA_SUCCESS)
        regcache_notify_host_alloc(*ptr, size);
    return r;
}

CUresult rc_wrap_alloc_host_flags(void *real, void **ptr, size_t size, unsigned int flags)
{
    CUresult r = ((CUresult(*)(void **, size_t, unsigned int))real)(ptr, size, flags);
    if (r == CUDA_SUCCESS)
        regcache_notify_host_alloc(*ptr, size);
    return r;
}
