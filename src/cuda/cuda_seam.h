/* The CUDA driver seam: every driver entry point the library uses, loaded
 * with dlopen("libcuda.so.1") and cuGetProcAddress by version, so that the
 * library loads on machines without a driver and so that its own calls never
 * pass through the preload hook's wrappers.  Tests replace the table.
 *
 * Every call made through the table runs in the RELAXED stream capture mode
 * (capture_mode.h), so that none breaks a capture the application has in
 * progress, on any thread - except the two marked as_is: the exchange
 * itself, and cuPointerGetAttribute, the hit path's one driver call (the
 * tag check): a query that captures allow (measured on driver 580), which
 * two exchanges would make cost three driver calls. */
#ifndef RC_CUDA_SEAM_H
#define RC_CUDA_SEAM_H

#include <cuda.h>

#include "real_dlsym.h"

/* X(field, driver name, the CUDA version whose ABI the prototype follows
 * (cuGetProcAddress hands out the matching variant), relaxed or as_is,
 * parameters, arguments).  dmabuf export needs a current context: the Ctx
 * calls let it borrow one on threads that have none. */
#define RC_CUDA_ENTRIES(X)                                                                     \
    X(Init, "cuInit", 2000, relaxed, (unsigned int flags), (flags))                            \
    X(GetErrorName, "cuGetErrorName", 6000, relaxed, (CUresult error, const char **name),      \
      (error, name))                                                                           \
    X(PointerGetAttribute, "cuPointerGetAttribute", 4000, as_is,                               \
      (void *data, CUpointer_attribute attribute, CUdeviceptr ptr), (data, attribute, ptr))    \
    X(PointerGetAttributes, "cuPointerGetAttributes", 7000, relaxed,                           \
      (unsigned int count, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr),     \
      (count, attributes, data, ptr))                                                          \
    X(PointerSetAttribute, "cuPointerSetAttribute", 6000, relaxed,                             \
      (const void *value, CUpointer_attribute attribute, CUdeviceptr ptr),                     \
      (value, attribute, ptr))                                                                 \
    X(MemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", 11070, relaxed,            \
      (void *handle, CUdeviceptr ptr, size_t size, CUmemRangeHandleType type,                  \
       unsigned long long flags),                                                              \
      (handle, ptr, size, type, flags))                                                        \
    X(DeviceGet, "cuDeviceGet", 2000, relaxed, (CUdevice * device, int ordinal),               \
      (device, ordinal))                                                                       \
    X(DeviceGetCount, "cuDeviceGetCount", 2000, relaxed, (int *count), (count))                \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", 2000, relaxed,                               \
      (int *value, CUdevice_attribute attribute, CUdevice device), (value, attribute, device)) \
    X(DeviceGetPCIBusId, "cuDeviceGetPCIBusId", 4010, relaxed,                                 \
      (char *bus_id, int len, CUdevice device), (bus_id, len, device))                         \
    X(DeviceGetUuid, "cuDeviceGetUuid", 11040, relaxed, (CUuuid * uuid, CUdevice device),      \
      (uuid, device))                                                                          \
    X(DeviceTotalMem, "cuDeviceTotalMem", 3020, relaxed, (size_t * bytes, CUdevice device),    \
      (bytes, device))                                                                         \
    X(CtxGetCurrent, "cuCtxGetCurrent", 4000, relaxed, (CUcontext * ctx), (ctx))               \
    X(CtxPushCurrent, "cuCtxPushCurrent", 4000, relaxed, (CUcontext ctx), (ctx))               \
    X(CtxPopCurrent, "cuCtxPopCurrent", 4000, relaxed, (CUcontext * ctx), (ctx))               \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, relaxed,                       \
      (CUcontext * ctx, CUdevice device), (ctx, device))                                       \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000, relaxed, (CUdevice device), \
      (device))                                                                                \
    X(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010, as_is,      \
      (CUstreamCaptureMode * mode), (mode))                                                    \
    RC_CUDA_DEVICE_KEY_ENTRIES(X)

/* Device key tables (device_memory.h): their device and host-mapped memory,
 * and the copies that write them. */
#define RC_CUDA_DEVICE_KEY_ENTRIES(X)                                                              \
    X(MemAlloc, "cuMemAlloc", 3020, relaxed, (CUdeviceptr * dptr, size_t bytes), (dptr, bytes))    \
    X(MemFree, "cuMemFree", 3020, relaxed, (CUdeviceptr dptr), (dptr))                             \
    X(MemHostAlloc, "cuMemHostAlloc", 2020, relaxed, (void **p, size_t bytes, unsigned int flags), \
      (p, bytes, flags))                                                                           \
    X(MemFreeHost, "cuMemFreeHost", 2000, relaxed, (void *p), (p))                                 \
    X(MemHostGetDevicePointer, "cuMemHostGetDevicePointer", 3020, relaxed,                         \
      (CUdeviceptr * dptr, void *p, unsigned int flags), (dptr, p, flags))                         \
    X(StreamCreate, "cuStreamCreate", 2000, relaxed, (CUstream * stream, unsigned int flags),      \
      (stream, flags))                                                                             \
    X(StreamDestroy, "cuStreamDestroy", 4000, relaxed, (CUstream stream), (stream))                \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020, relaxed,                                         \
      (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream),                           \
      (dst, src, bytes, stream))                                                                   \
    X(StreamSynchronize, "cuStreamSynchronize", 2000, relaxed, (CUstream stream), (stream))

#define RC_CUDA_FIELD(field, name, version, how, params, args) CUresult(*field) params;
struct rc_cuda_api {
    RC_CUDA_ENTRIES(RC_CUDA_FIELD)
};
#undef RC_CUDA_FIELD

/* The driver's table, loaded once (thread safe), or NULL when libcuda.so.1
 * cannot be loaded, cuInit fails, or this is a child forked after it was
 * loaded (rc_set_error() says why).  Its relaxed entries are the seam's own
 * functions, which call the driver's. */
const struct rc_cuda_api *rc_cuda_api(void);

/* Tests: use `api` instead of the driver (rc_cuda_api() then returns a table
 * whose relaxed entries exchange the mode through api's exchange and call
 * api's functions); NULL goes back to the driver.  Not while a call through
 * the seam is running. */
void rc_cuda_api_override(const struct rc_cuda_api *api);

/* Set the detail message for a failed driver call ("cuX failed:
 * CUDA_ERROR_Y (n)") and return REGCACHE_ERR_CUDA. */
int rc_cuda_error(const struct rc_cuda_api *api, const char *call, CUresult r);

#endif
