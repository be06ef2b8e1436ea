/* The body of each kind of wrapper: frees tell the caches before the real
 * call (the memory, and its buffer id, are still valid while the cache
 * deregisters), allocations tell them after it (a new allocation over a
 * cached range proves that a free went unseen) and before the caller gets
 * the memory. */
#include <stdint.h>

#include "hook.h"

/* What cuGetProcAddress found, wrapped when it allocates or frees. */
static CUresult wrap_found(CUresult result, const char *symbol, int version, void **pfn)
{
    if (result == CUDA_SUCCESS && symbol != NULL && pfn != NULL)
        *pfn = rc_hook_wrap(rc_hook_kind_of_proc(symbol, version), *pfn);
    return result;
}

CUresult rc_hook_gpa4(void *real, const char *symbol, void **pfn, int version,
                      cuuint64_t flags)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))real;
    return wrap_found(fn(symbol, pfn, version, flags), symbol, version, pfn);
}

CUresult rc_hook_gpa5(void *real, const char *symbol, void **pfn, int version,
                      cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t,
                   CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t,
                     CUdriverProcAddressQueryResult *))real;
    return wrap_found(fn(symbol, pfn, version, flags, status), symbol, version, pfn);
}

CUresult rc_hook_free(void *real, CUdeviceptr ptr)
{
    if (ptr != 0)
        rc_hook_notify_allocation(ptr);
    return ((CUresult(*)(CUdeviceptr))real)(ptr);
}

/* Stream-ordered: the memory stays usable until the stream reaches the free,
 * so the caches let go of it now, while it is certainly still valid. */
CUresult rc_hook_free_async(void *real, CUdeviceptr ptr, CUstream stream)
{
    if (ptr != 0)
        rc_hook_notify_allocation(ptr);
    return ((CUresult(*)(CUdeviceptr, CUstream))real)(ptr, stream);
}

CUresult rc_hook_free_host(void *real, void *ptr)
{
    if (ptr != NULL)
        rc_hook_notify_allocation((CUdeviceptr)(uintptr_t)ptr);
    return ((CUresult(*)(void *))real)(ptr);
}

CUresult rc_hook_free_range(void *real, CUdeviceptr ptr, size_t size)
{
    rc_hook_notify_range(ptr, size);
    return ((CUresult(*)(CUdeviceptr, size_t))real)(ptr, size);
}

/* A context takes all of its memory with it; the caches do not know which
 * context a range belongs to, so every range goes. */
CUresult rc_hook_ctx_gone(void *real, CUcontext ctx)
{
    rc_hook_notify_everything();
    return ((CUresult(*)(CUcontext))real)(ctx);
}

CUresult rc_hook_device_gone(void *real, CUdevice device)
{
    rc_hook_notify_everything();
    return ((CUresult(*)(CUdevice))real)(device);
}

CUresult rc_hook_alloc(void *real, CUdeviceptr *ptr, size_t size)
{
    CUresult r = ((CUresult(*)(CUdeviceptr *, size_t))real)(ptr, size);
    if (r == CUDA_SUCCESS)
        rc_hook_notify_range(*ptr, size);
    return r;
}

CUresult rc_hook_alloc_async(void *real, CUdeviceptr *ptr, size_t size, CUstream stream)
{
    CUresult r = ((CUresult(*)(CUdeviceptr *, size_t, CUstream))real)(ptr, size, stream);
    if (r == CUDA_SUCCESS)
        rc_hook_notify_range(*ptr, size);
    return r;
}

CUresult rc_hook_alloc_pool(void *real, CUdeviceptr *ptr, size_t size,
                            CUmemoryPool pool, CUstream stream)
{
    CUresult r = ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))real)(
        ptr, size, pool, stream);
    if (r == CUDA_SUCCESS)
        rc_hook_notify_range(*ptr, size);
    return r;
}

CUresult rc_hook_map(void *real, CUdeviceptr ptr, size_t size, size_t offset,
                     CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = ((CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                               unsigned long long))real)(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS)
        rc_hook_notify_range(ptr, size);
    return r;
}
