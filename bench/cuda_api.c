#include "cuda_api.h"

#include <dlfcn.h>

struct bench_cu bench_cu;

/* The extra step expands cuda.h's mapping before it stringifies. */
#define NAME(name) #name
#define LOAD(name)                                          \
    if (!(*(void **)&bench_cu.name = dlsym(h, NAME(name)))) \
        return "libcuda.so.1 lacks " NAME(name);

static const char *load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return "the CUDA driver (libcuda.so.1) cannot be loaded";
    BENCH_CU_CALLS(LOAD)
    return NULL;
}

const char *bench_cu_err(CUresult r)
{
    const char *name = NULL;
    bench_cu.cuGetErrorName(r, &name);
    return name ? name : "unknown CUDA error";
}

const char *bench_cu_open(CUdevice *dev, CUcontext *ctx)
{
    CUresult r;
    const char *why = load();
    if (!why && ((r = bench_cu.cuInit(0)) || (r = bench_cu.cuDeviceGet(dev, 0)) ||
                 (r = bench_cu.cuDevicePrimaryCtxRetain(ctx, *dev)) ||
                 (r = bench_cu.cuCtxSetCurrent(*ctx))))
        why = bench_cu_err(r);
    return why;
}
