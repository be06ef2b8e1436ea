/* Memory of one GPU for a device key table (see device_memory.h). */
#include "device_memory.h"

#include <string.h>

#include "cuda_seam.h"
#include "quiet_calls.h"
#include "last_error.h"
#include "regcache.h"

/* The table's memory is the library's own: allocating and freeing it tells
 * no cache (the in-process interception would otherwise report it, and
 * eager registration might register it). */
static const struct rc_cuda_api *enter(struct rc_devmem *m)
{
    const struct rc_cuda_api *api = rc_cuda_api();
    if (api && api->CtxPushCurrent((CUcontext)m->ctx) == CUDA_SUCCESS) {
        rc_cuda_quiet(true);
        return api;
    }
    return NULL;
}

static void leave(const struct rc_cuda_api *api)
{
    CUcontext popped;
    rc_cuda_quiet(false);
    api->CtxPopCurrent(&popped);
}

int rc_devmem_open(struct rc_devmem *m, int device)
{
    memset(m, 0, sizeof *m);
    m->device = device;
    const struct rc_cuda_api *api = rc_cuda_api();
    if (!api)
        return REGCACHE_ERR_UNSUPPORTED; /* rc_cuda_api() said why */
    CUdevice dev;
    CUresult r = api->DeviceGet(&dev, device);
    if (r != CUDA_SUCCESS)
        return r == CUDA_ERROR_INVALID_DEVICE
                   ? rc_fail(REGCACHE_ERR_INVALID, "no CUDA device %d", device)
                   : rc_cuda_error(api, "cuDeviceGet", r);
    CUcontext ctx;
    r = api->DevicePrimaryCtxRetain(&ctx, dev);
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuDevicePrimaryCtxRetain", r);
    m->ctx = ctx;
    if (!enter(m)) {
        rc_devmem_close(m);
        return rc_fail(REGCACHE_ERR_CUDA, "cuCtxPushCurrent of device %d's context failed", device);
    }
    CUstream stream;
    r = api->StreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    leave(api);
    if (r != CUDA_SUCCESS) {
        int rc = rc_cuda_error(api, "cuStreamCreate", r);
        rc_devmem_close(m);
        return rc;
    }
    m->stream = stream;
    return REGCACHE_OK;
}

void rc_devmem_close(struct rc_devmem *m)
{
    const struct rc_cuda_api *api = m->ctx ? enter(m) : NULL;
    if (api) {
        if (m->stream)
            api->StreamDestroy((CUstream)m->stream);
        leave(api);
    }
    if (m->ctx) {
        api = rc_cuda_api();
        CUdevice dev;
        /* The reference retained at open: dropping it frees nothing of the
         * application's (dmabuf_export.c says the same of its own). */
        rc_cuda_quiet(true);
        if (api && api->DeviceGet(&dev, m->device) == CUDA_SUCCESS)
            api->DevicePrimaryCtxRelease(dev);
        rc_cuda_quiet(false);
    }
    memset(m, 0, sizeof *m);
}

int rc_devmem_alloc(struct rc_devmem *m, size_t bytes, uint64_t *dptr)
{
    const struct rc_cuda_api *api = enter(m);
    if (!api)
        return rc_fail(REGCACHE_ERR_CUDA, "device %d: its context cannot be made current",
                       m->device);
    CUdeviceptr p;
    CUresult r = api->MemAlloc(&p, bytes);
    leave(api);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return rc_fail(REGCACHE_ERR_NO_SPACE, "device %d: no room for %zu bytes of key table",
                       m->device, bytes);
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuMemAlloc", r);
    *dptr = (uint64_t)p;
    return REGCACHE_OK;
}

void rc_devmem_free(struct rc_devmem *m, uint64_t dptr)
{
    const struct rc_cuda_api *api = dptr ? enter(m) : NULL;
    if (!api)
        return;
    api->MemFree((CUdeviceptr)dptr);
    leave(api);
}

int rc_devmem_host_alloc(struct rc_devmem *m, size_t bytes, void **host, uint64_t *dptr)
{
    const struct rc_cuda_api *api = enter(m);
    if (!api)
        return rc_fail(REGCACHE_ERR_CUDA, "device %d: its context cannot be made current",
                       m->device);
    void *p = NULL;
    CUdeviceptr d = 0;
    CUresult r = api->MemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r == CUDA_SUCCESS) {
        r = api->MemHostGetDevicePointer(&d, p, 0);
        if (r != CUDA_SUCCESS)
            api->MemFreeHost(p);
    }
    leave(api);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "no pinned host memory for %zu bytes of key table",
                       bytes);
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuMemHostAlloc", r);
    memset(p, 0, bytes);
    *host = p;
    *dptr = (uint64_t)d;
    return REGCACHE_OK;
}

void rc_devmem_host_free(struct rc_devmem *m, void *host)
{
    const struct rc_cuda_api *api = host ? enter(m) : NULL;
    if (!api)
        return;
    api->MemFreeHost(host);
    leave(api);
}

int rc_devmem_copy(struct rc_devmem *m, const struct rc_copy *copies, size_t n)
{
    const struct rc_cuda_api *api = enter(m);
    if (!api)
        return rc_fail(REGCACHE_ERR_CUDA, "device %d: its context cannot be made current",
                       m->device);
    CUresult r = CUDA_SUCCESS;
    const char *call = "cuMemcpyHtoDAsync";
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = api->MemcpyHtoDAsync((CUdeviceptr)copies[i].dst, copies[i].src, copies[i].bytes,
                                 (CUstream)m->stream);
    /* Waited for even after a failed enqueue: the copies already queued
     * read memory the caller may reuse once this returns. */
    CUresult s = api->StreamSynchronize((CUstream)m->stream);
    if (r == CUDA_SUCCESS && s != CUDA_SUCCESS) {
        r = s;
        call = "cuStreamSynchronize";
    }
    leave(api);
    return r == CUDA_SUCCESS ? REGCACHE_OK : rc_cuda_error(api, call, r);
}
