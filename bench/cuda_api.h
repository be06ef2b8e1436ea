/* The driver calls the harness and regcache-driver-tag make, through one
 * dlopened libcuda, so that both run where there is none. */
#ifndef BENCH_CUDA_API_H
#define BENCH_CUDA_API_H

#include <cuda.h>

/* cuda.h maps names to versioned ones (cuMemAlloc is cuMemAlloc_v2),
 * which is what libcuda exports: the loader looks up the mapped name. */
/* clang-format off: one entry a line, which clang-format 14 does not keep */
#define BENCH_CU_CALLS(X)       \
    X(cuInit)                   \
    X(cuGetErrorName)           \
    X(cuDeviceGet)              \
    X(cuDeviceGetName)          \
    X(cuDevicePrimaryCtxRetain) \
    X(cuCtxSetCurrent)          \
    X(cuMemAlloc)               \
    X(cuMemFree)                \
    X(cuMemGetInfo)             \
    X(cuPointerGetAttribute)    \
    X(cuPointerSetAttribute)    \
    X(cuMemGetHandleForAddressRange)
/* clang-format on */
#define BENCH_CU_FN(name) __typeof__(&name) name;

extern struct bench_cu {
    BENCH_CU_CALLS(BENCH_CU_FN)
} bench_cu;

/* Load the driver and make device 0's primary context (*ctx) current on
 * the calling thread: NULL, or why not. */
const char *bench_cu_open(CUdevice *dev, CUcontext *ctx);

/* The name of a driver error. */
const char *bench_cu_err(CUresult r);

#endif
