/* What the hook tells the caches. */
#include <stdatomic.h>
#include <stdint.h>

#include "hook.h"
#include "regcache.h"

typedef CUresult (*address_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

void rc_hook_notify_range(CUdeviceptr ptr, size_t size)
{
    regcache_notify_free((const void *)(uintptr_t)ptr, size);
}

void rc_hook_notify_everything(void)
{
    /* regcache_notify_free() returns at once when there is no cache. */
    regcache_notify_free(NULL, UINTPTR_MAX);
}

/* cuMemGetAddressRange places device, pool and pinned host memory alike
 * (measured on the GPU machine). */
void rc_hook_notify_allocation(CUdeviceptr ptr)
{
    static _Atomic(void *) range;
    /* Frees in a process without a cache cost one load, not a driver call. */
    if (regcache_cache_count() == 0)
        return;
    address_range_fn fn =
        (address_range_fn)rc_hook_driver_function(&range, "cuMemGetAddressRange_v2");
    CUdeviceptr base;
    size_t size;
    if (fn != NULL && fn(&base, &size, ptr) == CUDA_SUCCESS)
        rc_hook_notify_range(base, size);
    else
        rc_hook_notify_everything();
}
