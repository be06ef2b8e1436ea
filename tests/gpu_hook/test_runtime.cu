// Both hooks under a CUDA runtime program: the runtime never calls the
// driver through the PLT but fetches every entry point with
// cuGetProcAddress, which the preload hook wraps and whose answers (libcuda's
// exports) the in-process interception patches.  Built twice (static and
// shared cudart); run by gpu-test.sh in each way.
#include <cstdio>
#include <cuda_runtime.h>

#include "gpu_backend.h"

static cudaStream_t stream;

static int rt_alloc(uintptr_t *ptr, size_t size, void *)
{
    void *p;
    if (cudaMalloc(&p, size) != cudaSuccess)
        return 1;
    *ptr = (uintptr_t)p;
    return 0;
}

static int rt_free(uintptr_t ptr, size_t, void *)
{
    return cudaFree((void *)ptr) != cudaSuccess;
}

static int rt_alloc_async(uintptr_t *ptr, size_t size, void *)
{
    void *p;
    if (cudaMallocAsync(&p, size, stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
        return 1;
    *ptr = (uintptr_t)p;
    return 0;
}

static int rt_free_async(uintptr_t ptr, size_t, void *)
{
    return cudaFreeAsync((void *)ptr, stream) != cudaSuccess;
}

static int rt_alloc_host(uintptr_t *ptr, size_t size, void *)
{
    void *p;
    if (cudaMallocHost(&p, size) != cudaSuccess)
        return 1;
    *ptr = (uintptr_t)p;
    return 0;
}

static int rt_host_alloc(uintptr_t *ptr, size_t size, void *)
{
    void *p;
    if (cudaHostAlloc(&p, size, cudaHostAllocPortable) != cudaSuccess)
        return 1;
    *ptr = (uintptr_t)p;
    return 0;
}

static int rt_free_host(uintptr_t ptr, size_t, void *)
{
    return cudaFreeHost((void *)ptr) != cudaSuccess;
}

// cudaDeviceReset destroys the primary context with cached memory in it.
static int device_reset()
{
    regcache_t *cache;
    uintptr_t a, b;
    if (gb_create(REGCACHE_VALIDATE_AUTO, 0, &cache) != REGCACHE_OK ||
        rt_alloc(&a, 2 << 20, nullptr) || rt_alloc(&b, 2 << 20, nullptr) ||
        gb_touch(cache, a, 2 << 20) || gb_touch(cache, b, 2 << 20))
        return 1;
    long before = gb_deregs();
    if (cudaDeviceReset() != cudaSuccess)
        return 1;
    int failed = gb_expect_deregs(CUDART_NAME " cudaDeviceReset", before, 2);
    regcache_destroy(cache);
    return failed;
}

int main()
{
    if (gb_cache_first() != 0)
        return 1;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        std::printf("skipped: no CUDA device\n");
        return 77;
    }
    if (cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
        return 1;
    const gb_memory memories[] = {
        { CUDART_NAME " cudaMalloc/cudaFree", 0, rt_alloc, rt_free, nullptr, 1 },
        { CUDART_NAME " cudaMallocAsync/cudaFreeAsync", 0, rt_alloc_async, rt_free_async, nullptr,
          1 },
        { CUDART_NAME " cudaMallocHost/cudaFreeHost", 1, rt_alloc_host, rt_free_host, nullptr, 1 },
        { CUDART_NAME " cudaHostAlloc/cudaFreeHost", 1, rt_host_alloc, rt_free_host, nullptr, 1 },
    };
    int failed = 0;
    for (const gb_memory &m : memories)
        failed |= gb_run(&m);
    cudaStreamDestroy(stream);
    failed |= device_reset();
    std::printf(CUDART_NAME " runtime program: %s\n", failed ? "FAIL" : "PASS");
    return failed;
}
