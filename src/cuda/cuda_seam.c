/* Loads the CUDA driver's entry points (see cuda_seam.h). */
#include "cuda_seam.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "last_error.h"
#include "regcache.h"

typedef CUresult (*get_proc_fn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status);

/* Each field with the CUDA version whose ABI its prototype in cuda_seam.h
 * follows: asking cuGetProcAddress for that version returns the matching
 * variant (e.g. cuPointerGetAttribute at 4000). */
static const struct entry {
    size_t offset;
    const char *name;
    int version;
} entries[] = {
#define ENTRY(field, name, version)                        \
    {                                                      \
        offsetof(struct rc_cuda_api, field), name, version \
    }
    ENTRY(Init, "cuInit", 2000),
    ENTRY(GetErrorName, "cuGetErrorName", 6000),
    ENTRY(PointerGetAttribute, "cuPointerGetAttribute", 4000),
    ENTRY(PointerGetAttributes, "cuPointerGetAttributes", 7000),
    ENTRY(PointerSetAttribute, "cuPointerSetAttribute", 6000),
    ENTRY(MemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", 11070),
    ENTRY(DeviceGet, "cuDeviceGet", 2000),
    ENTRY(DeviceGetCount, "cuDeviceGetCount", 2000),
    ENTRY(DeviceGetAttribute, "cuDeviceGetAttribute", 2000),
    ENTRY(DeviceGetPCIBusId, "cuDeviceGetPCIBusId", 4010),
    ENTRY(DeviceGetUuid, "cuDeviceGetUuid", 11040),
    ENTRY(DeviceTotalMem, "cuDeviceTotalMem", 3020),
    ENTRY(CtxGetCurrent, "cuCtxGetCurrent", 4000),
    ENTRY(CtxPushCurrent, "cuCtxPushCurrent", 4000),
    ENTRY(CtxPopCurrent, "cuCtxPopCurrent", 4000),
    ENTRY(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000),
    ENTRY(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000),
    /* Device key tables. */
    ENTRY(MemAlloc, "cuMemAlloc", 3020),
    ENTRY(MemFree, "cuMemFree", 3020),
    ENTRY(MemHostAlloc, "cuMemHostAlloc", 2020),
    ENTRY(MemFreeHost, "cuMemFreeHost", 2000),
    ENTRY(MemHostGetDevicePointer, "cuMemHostGetDevicePointer", 3020),
    ENTRY(StreamCreate, "cuStreamCreate", 2000),
    ENTRY(StreamDestroy, "cuStreamDestroy", 4000),
    ENTRY(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020),
    ENTRY(StreamSynchronize, "cuStreamSynchronize", 2000),
#undef ENTRY
};

static struct rc_cuda_api driver_api;
static const struct rc_cuda_api *loaded; /* written once, under load_once */
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static _Atomic(const struct rc_cuda_api *) override_api;

/* The preload hook interposes dlsym to hand out wrappers of
 * cuGetProcAddress; the library must reach the real driver, so it looks
 * dlsym up by version inside libc (libdl before glibc 2.34), where a lookup
 * scoped to that handle cannot find the hook's definition. */
rc_dlsym_fn rc_cuda_real_dlsym(void)
{
    static const struct {
        const char *lib, *version;
    } homes[] = { { "libc.so.6", "GLIBC_2.34" }, { "libdl.so.2", "GLIBC_2.2.5" } };
    for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
        void *lib = dlopen(homes[i].lib, RTLD_NOW | RTLD_NOLOAD);
        if (!lib)
            continue;
        void *fn = dlvsym(lib, "dlsym", homes[i].version);
        dlclose(lib);
        if (fn) {
            rc_dlsym_fn out;
            memcpy(&out, &fn, sizeof out);
            return out;
        }
    }
    return NULL;
}

static bool load_entries(get_proc_fn get_proc)
{
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = get_proc(entries[i].name, &fn, entries[i].version, CU_GET_PROC_ADDRESS_DEFAULT,
                              &status);
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
            snprintf(load_error, sizeof load_error,
                     "CUDA driver has no %s (version %d): driver too old", entries[i].name,
                     entries[i].version);
            return false;
        }
        /* memcpy: the fields are function pointers of differing types. */
        memcpy((char *)&driver_api + entries[i].offset, &fn, sizeof fn);
    }
    return true;
}

static void load(void)
{
    rc_dlsym_fn sym = rc_cuda_real_dlsym();
    if (!sym) {
        snprintf(load_error, sizeof load_error, "cannot find glibc's dlsym");
        return;
    }
    /* Never closed: the entry points stay in use until the process exits. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "cannot load the CUDA driver: %s", dlerror());
        return;
    }
    void *gp = sym(lib, "cuGetProcAddress_v2");
    if (!gp) {
        snprintf(load_error, sizeof load_error,
                 "CUDA driver has no cuGetProcAddress_v2: driver older than CUDA 12.0");
        return;
    }
    get_proc_fn get_proc;
    memcpy(&get_proc, &gp, sizeof get_proc);
    if (!load_entries(get_proc))
        return;
    CUresult r = driver_api.Init(0);
    if (r != CUDA_SUCCESS) {
        const char *name = "unknown error";
        driver_api.GetErrorName(r, &name);
        snprintf(load_error, sizeof load_error, "cuInit failed: %s (%d)", name, (int)r);
        return;
    }
    loaded = &driver_api;
}

const struct rc_cuda_api *rc_cuda_api(void)
{
    const struct rc_cuda_api *api = atomic_load_explicit(&override_api, memory_order_acquire);
    if (api)
        return api;
    pthread_once(&load_once, load);
    if (!loaded)
        rc_set_error("%s", load_error);
    return loaded;
}

void rc_cuda_api_override(const struct rc_cuda_api *api)
{
    atomic_store_explicit(&override_api, api, memory_order_release);
}

int rc_cuda_error(const struct rc_cuda_api *api, const char *call, CUresult r)
{
    const char *name = NULL;
    if (api->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUDA error";
    rc_set_error("%s failed: %s (%d)", call, name, (int)r);
    return REGCACHE_ERR_CUDA;
}
