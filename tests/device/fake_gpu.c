/* The device key tables' fake GPUs (see fake_gpu.h). */
#include "fake_gpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_seam.h"

struct fake_gpu fake_gpu;

#define CTX(d) ((CUcontext)(uintptr_t)(0x1000 + (d)))

static _Thread_local CUcontext current;

static CUresult init(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

static CUresult error_name(CUresult error, const char **name)
{
    *name = error == CUDA_ERROR_OUT_OF_MEMORY   ? "CUDA_ERROR_OUT_OF_MEMORY"
            : error == CUDA_ERROR_NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED"
                                                : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}

static CUresult device_get(CUdevice *device, int ordinal)
{
    if (ordinal < 0 || ordinal >= fake_gpu.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult device_count(int *count)
{
    *count = fake_gpu.devices;
    return CUDA_SUCCESS;
}

/* What a budget would be made of: not known here (no budget). */
static CUresult bus_id(char *id, int len, CUdevice device)
{
    (void)id;
    (void)len;
    (void)device;
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult total_mem(size_t *bytes, CUdevice device)
{
    (void)bytes;
    (void)device;
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult uuid(CUuuid *id, CUdevice device)
{
    (void)id;
    (void)device;
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult ctx_current(CUcontext *ctx)
{
    *ctx = current;
    return CUDA_SUCCESS;
}

/* One level deep, as the library uses them. */
static CUresult ctx_push(CUcontext ctx)
{
    current = ctx;
    return CUDA_SUCCESS;
}

static CUresult ctx_pop(CUcontext *ctx)
{
    *ctx = current;
    current = NULL;
    return CUDA_SUCCESS;
}

static CUresult primary_retain(CUcontext *ctx, CUdevice device)
{
    *ctx = CTX(device);
    atomic_fetch_add(&fake_gpu.retained, 1);
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice device)
{
    (void)device;
    atomic_fetch_sub(&fake_gpu.retained, 1);
    return CUDA_SUCCESS;
}

static void *block(size_t bytes)
{
    return aligned_alloc(256, (bytes + 255) & ~(size_t)255);
}

static CUresult mem_alloc(CUdeviceptr *p, size_t bytes)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    int one = 1;
    if (atomic_compare_exchange_strong(&fake_gpu.fail_alloc, &one, 0))
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = block(bytes);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xa5, bytes); /* device memory starts as garbage */
    atomic_fetch_add(&fake_gpu.allocs, 1);
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

static CUresult mem_free(CUdeviceptr p)
{
    free((void *)(uintptr_t)p);
    atomic_fetch_sub(&fake_gpu.allocs, 1);
    return CUDA_SUCCESS;
}

static CUresult host_alloc(void **p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!(*p = block(bytes)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&fake_gpu.host_allocs, 1);
    return CUDA_SUCCESS;
}

static CUresult host_free(void *p)
{
    free(p);
    atomic_fetch_sub(&fake_gpu.host_allocs, 1);
    return CUDA_SUCCESS;
}

static CUresult host_device_pointer(CUdeviceptr *d, void *p, unsigned int flags)
{
    (void)flags;
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream *s, unsigned int flags)
{
    (void)flags;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    *s = (CUstream)(uintptr_t)0x5000;
    atomic_fetch_add(&fake_gpu.streams, 1);
    return CUDA_SUCCESS;
}

static CUresult stream_destroy(CUstream s)
{
    (void)s;
    atomic_fetch_sub(&fake_gpu.streams, 1);
    return CUDA_SUCCESS;
}

/* A thread's copies not yet made: a stream runs them at its
 * synchronisation, reading their sources then, as late as a GPU may.  A
 * table's copies are enqueued and waited for by one thread, under its
 * writer's lock. */
struct pending {
    CUdeviceptr dst;
    const void *src;
    size_t bytes;
};
static _Thread_local struct pending *queued;
static _Thread_local size_t nqueued, queue_cap;

static CUresult copy(CUdeviceptr dst, const void *src, size_t bytes, CUstream s)
{
    (void)s;
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    int one = 1;
    if (atomic_compare_exchange_strong(&fake_gpu.fail_copy, &one, 0))
        return CUDA_ERROR_UNKNOWN;
    if (nqueued == queue_cap) {
        size_t cap = queue_cap ? 2 * queue_cap : 16;
        struct pending *q = realloc(queued, cap * sizeof *q);
        if (!q)
            return CUDA_ERROR_OUT_OF_MEMORY;
        queued = q;
        queue_cap = cap;
    }
    queued[nqueued++] = (struct pending){ dst, src, bytes };
    atomic_fetch_add(&fake_gpu.copies, 1);
    atomic_fetch_add(&fake_gpu.bytes_copied, (long)bytes);
    return CUDA_SUCCESS;
}

static void run(const struct pending *c)
{
    if (atomic_load(&fake_gpu.hold_copies)) {
        atomic_fetch_add(&fake_gpu.copies_held, 1);
        while (atomic_load(&fake_gpu.hold_copies))
            nanosleep(&(struct timespec){ 0, 100000 }, NULL);
    }
    uint64_t *to = (uint64_t *)(uintptr_t)c->dst;
    const uint64_t *from = c->src;
    size_t words = c->bytes / 8;
    int backwards = atomic_load(&fake_gpu.backwards);
    for (size_t w = 0; w < words; w++) {
        size_t i = backwards ? words - 1 - w : w;
        __atomic_store_n(&to[i], from[i], __ATOMIC_RELEASE);
        if (fake_gpu.after_word)
            fake_gpu.after_word();
    }
}

static CUresult stream_sync(CUstream s)
{
    (void)s;
    atomic_fetch_add(&fake_gpu.syncs, 1);
    for (size_t i = 0; i < nqueued; i++)
        run(&queued[i]);
    free(queued);
    queued = NULL;
    nqueued = queue_cap = 0;
    return CUDA_SUCCESS;
}

static const struct rc_cuda_api api = {
    .Init = init,
    .GetErrorName = error_name,
    .DeviceGet = device_get,
    .DeviceGetCount = device_count,
    .DeviceGetPCIBusId = bus_id,
    .DeviceTotalMem = total_mem,
    .DeviceGetUuid = uuid,
    .CtxGetCurrent = ctx_current,
    .CtxPushCurrent = ctx_push,
    .CtxPopCurrent = ctx_pop,
    .DevicePrimaryCtxRetain = primary_retain,
    .DevicePrimaryCtxRelease = primary_release,
    .MemAlloc = mem_alloc,
    .MemFree = mem_free,
    .MemHostAlloc = host_alloc,
    .MemFreeHost = host_free,
    .MemHostGetDevicePointer = host_device_pointer,
    .StreamCreate = stream_create,
    .StreamDestroy = stream_destroy,
    .MemcpyHtoDAsync = copy,
    .StreamSynchronize = stream_sync,
};

void fake_gpu_install(int devices)
{
    memset(&fake_gpu, 0, sizeof fake_gpu);
    fake_gpu.devices = devices;
    rc_cuda_api_override(&api);
}

void fake_gpu_uninstall(void)
{
    rc_cuda_api_override(NULL);
}
