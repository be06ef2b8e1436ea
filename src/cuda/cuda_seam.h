/* The CUDA driver seam: every driver entry point the library uses, loaded
 * with dlopen("libcuda.so.1") and cuGetProcAddress by version, so that the
 * library loads on machines without a driver and so that its own calls never
 * pass through the preload hook's wrappers.  Tests replace the table. */
#ifndef RC_CUDA_SEAM_H
#define RC_CUDA_SEAM_H

#include <cuda.h>

struct rc_cuda_api {
    CUresult (*Init)(unsigned int flags);
    CUresult (*GetErrorName)(CUresult error, const char **name);
    CUresult (*PointerGetAttribute)(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);
    CUresult (*PointerGetAttributes)(unsigned int count, CUpointer_attribute *attributes,
                                     void **data, CUdeviceptr ptr);
    CUresult (*PointerSetAttribute)(const void *value, CUpointer_attribute attribute,
                                    CUdeviceptr ptr);
    CUresult (*MemGetHandleForAddressRange)(void *handle, CUdeviceptr ptr, size_t size,
                                            CUmemRangeHandleType type, unsigned long long flags);
    CUresult (*DeviceGet)(CUdevice *device, int ordinal);
    CUresult (*DeviceGetCount)(int *count);
    CUresult (*DeviceGetAttribute)(int *value, CUdevice_attribute attribute, CUdevice device);
    CUresult (*DeviceGetPCIBusId)(char *bus_id, int len, CUdevice device);
    CUresult (*DeviceGetUuid)(CUuuid *uuid, CUdevice device);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice device);
    /* dmabuf export needs a current context: these let it borrow one on
     * threads that have none. */
    CUresult (*CtxGetCurrent)(CUcontext *ctx);
    CUresult (*CtxPushCurrent)(CUcontext ctx);
    CUresult (*CtxPopCurrent)(CUcontext *ctx);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice device);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice device);
    /* Device key tables (device_memory.h): their device and host-mapped
     * memory, and the copies that write them. */
    CUresult (*MemAlloc)(CUdeviceptr *dptr, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr dptr);
    CUresult (*MemHostAlloc)(void **p, size_t bytes, unsigned int flags);
    CUresult (*MemFreeHost)(void *p);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *dptr, void *p, unsigned int flags);
    CUresult (*StreamCreate)(CUstream *stream, unsigned int flags);
    CUresult (*StreamDestroy)(CUstream stream);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
    CUresult (*StreamSynchronize)(CUstream stream);
};

/* The driver's table, loaded once (thread safe), or NULL when libcuda.so.1
 * cannot be loaded or cuInit fails (rc_set_error() says why). */
const struct rc_cuda_api *rc_cuda_api(void);

/* Tests: use `api` instead of the driver; NULL goes back to the driver. */
void rc_cuda_api_override(const struct rc_cuda_api *api);

/* glibc's own dlsym, never an interposed one (the preload hook's hands out
 * wrappers), or NULL when it cannot be found. */
typedef void *(*rc_dlsym_fn)(void *handle, const char *symbol);
rc_dlsym_fn rc_cuda_real_dlsym(void);

/* Set the detail message for a failed driver call ("cuX failed:
 * CUDA_ERROR_Y (n)") and return REGCACHE_ERR_CUDA. */
int rc_cuda_error(const struct rc_cuda_api *api, const char *call, CUresult r);

#endif
