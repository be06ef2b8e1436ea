/* The CUDA driver functions that free or allocate memory: the one list
 * behind both ways the caches hear of frees and allocations.  The preload hook
 * (src/hook) defines an export and a lookup-table row for each; the
 * in-process interception (src/intercept) patches each in libcuda.
 *
 * A row: X(exported name, the name cuGetProcAddress hands it out for, the
 * first CUDA version with this ABI, the cuGetProcAddress flags that select
 * it, kind).  The _ptsz exports are what cuGetProcAddress returns for the
 * plain name under CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
 *
 * Not listed, on purpose: cuMemRelease (it drops a handle; the memory stays
 * mapped until cuMemUnmap), cuMemPoolTrimTo and cuMemPoolDestroy (they
 * return to the system only memory already freed into the pool, whose
 * ranges were notified by the cuMemFreeAsync that freed it; a destroyed
 * pool's live allocations stay valid until freed), and the 32-bit
 * cuMemFree/cuMemAlloc/cuMemAllocHost of CUDA < 3.2. */
#ifndef RC_WRAP_SYMBOLS_H
#define RC_WRAP_SYMBOLS_H

#include <cuda.h>

#define RC_WRAP_PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

#define RC_WRAP_SYMBOLS(X)                                                                      \
    X(cuMemFree_v2, "cuMemFree", 3020, 0, free)                                                 \
    X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, 0, free)                                \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, free_async)                                   \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, RC_WRAP_PTDS, free_async)                   \
    X(cuMemFreeHost, "cuMemFreeHost", 2000, 0, free_host)                                       \
    /* Host memory registered with cuMemHostRegister has a buffer id, which                     \
     * its unregistration takes away. */                                                        \
    X(cuMemHostUnregister, "cuMemHostUnregister", 4000, 0, free_host)                           \
    X(cuMemUnmap, "cuMemUnmap", 10020, 0, free_range)                                           \
    /* The reservation must be unmapped first; notifying again costs a                          \
     * lookup and covers a driver that unmaps on the way. */                                    \
    X(cuMemAddressFree, "cuMemAddressFree", 10020, 0, free_range)                               \
    /* The old and new context calls share their prototype. */                                  \
    X(cuCtxDestroy, "cuCtxDestroy", 2000, 0, ctx_gone)                                          \
    X(cuCtxDestroy_v2, "cuCtxDestroy", 4000, 0, ctx_gone)                                       \
    X(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000, 0, device_gone)                 \
    X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0, device_gone)             \
    /* Releasing the last reference destroys the primary context; a                             \
     * wrapper cannot see the count, so every release counts as the last. */                    \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000, 0, device_gone)             \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0, device_gone)         \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, alloc)                                              \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0, alloc_async)                                \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, RC_WRAP_PTDS, alloc_async)                \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0, alloc_pool)                 \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, RC_WRAP_PTDS, alloc_pool) \
    X(cuMemMap, "cuMemMap", 10020, 0, map)                                                      \
    /* Pinned host memory; the CUDA runtime's cudaMallocHost and                                \
     * cudaHostAlloc reach the driver through these. */                                         \
    X(cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0, alloc_host)                                 \
    X(cuMemHostAlloc, "cuMemHostAlloc", 2020, 0, alloc_host_flags)

/* Every kind of wrapper (one C prototype, one thing to tell the caches),
 * with its parameter list as RC_WRAP_PARAMS_<kind> and its argument names
 * as RC_WRAP_ARGS_<kind>, both without parentheses. */
/* clang-format off: one entry a line, which clang-format 14 does not keep */
#define RC_WRAP_KINDS(X) \
    X(free)              \
    X(free_async)        \
    X(free_host)         \
    X(free_range)        \
    X(ctx_gone)          \
    X(device_gone)       \
    X(alloc)             \
    X(alloc_async)       \
    X(alloc_pool)        \
    X(map)               \
    X(alloc_host)        \
    X(alloc_host_flags)
/* clang-format on */

#define RC_WRAP_PARAMS_free CUdeviceptr ptr
#define RC_WRAP_ARGS_free ptr
#define RC_WRAP_PARAMS_free_async CUdeviceptr ptr, CUstream stream
#define RC_WRAP_ARGS_free_async ptr, stream
#define RC_WRAP_PARAMS_free_host void *ptr
#define RC_WRAP_ARGS_free_host ptr
#define RC_WRAP_PARAMS_free_range CUdeviceptr ptr, size_t size
#define RC_WRAP_ARGS_free_range ptr, size
#define RC_WRAP_PARAMS_ctx_gone CUcontext ctx
#define RC_WRAP_ARGS_ctx_gone ctx
#define RC_WRAP_PARAMS_device_gone CUdevice device
#define RC_WRAP_ARGS_device_gone device
#define RC_WRAP_PARAMS_alloc CUdeviceptr *ptr, size_t size
#define RC_WRAP_ARGS_alloc ptr, size
#define RC_WRAP_PARAMS_alloc_async CUdeviceptr *ptr, size_t size, CUstream stream
#define RC_WRAP_ARGS_alloc_async ptr, size, stream
#define RC_WRAP_PARAMS_alloc_pool CUdeviceptr *ptr, size_t size, CUmemoryPool pool, CUstream stream
#define RC_WRAP_ARGS_alloc_pool ptr, size, pool, stream
#define RC_WRAP_PARAMS_map                                                            \
    CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, \
        unsigned long long flags
#define RC_WRAP_ARGS_map ptr, size, offset, handle, flags
#define RC_WRAP_PARAMS_alloc_host void **ptr, size_t size
#define RC_WRAP_ARGS_alloc_host ptr, size
#define RC_WRAP_PARAMS_alloc_host_flags void **ptr, size_t size, unsigned int flags
#define RC_WRAP_ARGS_alloc_host_flags ptr, size, flags

#endif
