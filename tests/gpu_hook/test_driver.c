/* Both hooks under a driver-API program (linked with -lcuda, so its calls
 * bind to the preload hook's exports, or to libcuda's, which the in-process
 * interception patches): cuMemAlloc, stream-ordered allocations (also the
 * per-thread-stream variants fetched through cuGetProcAddress), VMM
 * mappings, pinned (cuMemAllocHost, cuMemHostAlloc) and registered host
 * memory, and a primary context reset; eager registration of each
 * allocation.  Run by gpu-test.sh in each way. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu_check.h"
#include "gpu_backend.h"

static CUdevice device;
static CUstream stream;

static int plain_alloc(uintptr_t *ptr, size_t size, void *ctx)
{
    (void)ctx;
    CUdeviceptr p;
    CU(cuMemAlloc(&p, size));
    *ptr = p;
    return 0;
}

static int plain_free(uintptr_t ptr, size_t size, void *ctx)
{
    (void)size, (void)ctx;
    CU(cuMemFree(ptr));
    return 0;
}

static int async_alloc(uintptr_t *ptr, size_t size, void *ctx)
{
    (void)ctx;
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, size, stream));
    CU(cuStreamSynchronize(stream));
    *ptr = p;
    return 0;
}

static int async_free(uintptr_t ptr, size_t size, void *ctx)
{
    (void)size, (void)ctx;
    CU(cuMemFreeAsync(ptr, stream));
    return 0;
}

/* The per-thread-default-stream functions, as the runtime fetches them. */
static CUresult (*ptsz_alloc_fn)(CUdeviceptr *, size_t, CUstream);
static CUresult (*ptsz_free_fn)(CUdeviceptr, CUstream);

static int ptsz_alloc(uintptr_t *ptr, size_t size, void *ctx)
{
    (void)ctx;
    CUdeviceptr p;
    CU(ptsz_alloc_fn(&p, size, CU_STREAM_PER_THREAD));
    CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    *ptr = p;
    return 0;
}

static int ptsz_free(uintptr_t ptr, size_t size, void *ctx)
{
    (void)size, (void)ctx;
    CU(ptsz_free_fn(ptr, CU_STREAM_PER_THREAD));
    return 0;
}

static int vmm_alloc(uintptr_t *ptr, size_t size, void *ctx)
{
    (void)ctx;
    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    CUmemAccessDesc access = { prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUdeviceptr p;
    CUmemGenericAllocationHandle handle;
    CU(cuMemAddressReserve(&p, size, 0, 0, 0));
    CU(cuMemCreate(&handle, size, &prop, 0));
    CU(cuMemMap(p, size, 0, handle, 0));
    /* The mapping keeps the memory: the handle can go now. */
    CU(cuMemRelease(handle));
    CU(cuMemSetAccess(p, size, &access, 1));
    *ptr = p;
    return 0;
}

static int vmm_free(uintptr_t ptr, size_t size, void *ctx)
{
    (void)ctx;
    CU(cuMemUnmap(ptr, size));
    CU(cuMemAddressFree(ptr, size));
    return 0;
}

static int host_alloc(uintptr_t *ptr, size_t size, void *ctx)
{
    (void)ctx;
    void *p;
    CU(cuMemAllocHost(&p, size));
    *ptr = (uintptr_t)p;
    return 0;
}

/* cuMemHostAlloc, as the runtime's cudaHostAlloc reaches the driver. */
static int host_alloc_flags(uintptr_t *ptr, size_t size, void *ctx)
{
    (void)ctx;
    void *p;
    CU(cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE));
    *ptr = (uintptr_t)p;
    return 0;
}

static int host_free(uintptr_t ptr, size_t size, void *ctx)
{
    (void)size, (void)ctx;
    CU(cuMemFreeHost((void *)ptr));
    return 0;
}

/* malloc()ed memory made known to CUDA: it has a buffer id until
 * cuMemHostUnregister, which must let the caches go of it first. */
static int registered_alloc(uintptr_t *ptr, size_t size, void *ctx)
{
    (void)ctx;
    void *p;
    if (posix_memalign(&p, 1 << 16, size) != 0)
        return 1;
    CUresult r = cuMemHostRegister(p, size, 0);
    if (r != CUDA_SUCCESS) {
        printf("cuMemHostRegister failed: %d\n", r);
        free(p);
        return 1;
    }
    *ptr = (uintptr_t)p;
    return 0;
}

static int registered_free(uintptr_t ptr, size_t size, void *ctx)
{
    (void)size, (void)ctx;
    CUresult r = cuMemHostUnregister((void *)ptr);
    free((void *)ptr);
    CU(r);
    return 0;
}

/* The primary context goes with two cached allocations in it. */
static int context_reset(void)
{
    regcache_t *cache;
    if (gb_create(REGCACHE_VALIDATE_AUTO, 0, &cache) != REGCACHE_OK)
        return 1;
    uintptr_t a, b;
    if (plain_alloc(&a, 2 << 20, NULL) || plain_alloc(&b, 2 << 20, NULL) ||
        gb_touch(cache, a, 2 << 20) || gb_touch(cache, b, 2 << 20))
        return 1;
    long before = gb_deregs();
    CU(cuDevicePrimaryCtxReset(device));
    int failed = gb_expect_deregs("driver cuDevicePrimaryCtxReset", before, 2);
    regcache_destroy(cache);
    return failed;
}

int main(void)
{
    if (gb_cache_first() != 0)
        return 1;
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    CUcontext ctx;
    CU(cuDeviceGet(&device, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, device));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdriverProcAddressQueryResult status;
    CU(cuGetProcAddress("cuMemAllocAsync", (void **)&ptsz_alloc_fn, 12000,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    CU(cuGetProcAddress("cuMemFreeAsync", (void **)&ptsz_free_fn, 12000,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));

    const struct gb_memory memories[] = {
        { "driver cuMemAlloc/cuMemFree", 0, plain_alloc, plain_free, NULL, 1 },
        { "driver cuMemAllocAsync/cuMemFreeAsync", 0, async_alloc, async_free, NULL, 1 },
        { "driver per-thread-stream async via cuGetProcAddress", 0, ptsz_alloc, ptsz_free, NULL,
          1 },
        /* Made without gpuDirectRDMACapable, which the library's own query
         * refuses: eager registration is left to the PyTorch test. */
        { "driver VMM cuMemMap/cuMemUnmap", 0, vmm_alloc, vmm_free, NULL, 0 },
        { "driver cuMemAllocHost/cuMemFreeHost", 1, host_alloc, host_free, NULL, 1 },
        { "driver cuMemHostAlloc/cuMemFreeHost", 1, host_alloc_flags, host_free, NULL, 1 },
        /* Registration is no allocation: nothing to register eagerly. */
        { "driver cuMemHostRegister/cuMemHostUnregister", 1, registered_alloc, registered_free,
          NULL, 0 },
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof memories / sizeof memories[0]; i++)
        failed |= gb_run(&memories[i]);
    CU(cuStreamDestroy(stream));
    failed |= context_reset();
    printf("driver program: %s\n", failed ? "FAIL" : "PASS");
    return failed;
}
