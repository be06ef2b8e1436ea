/* Loads NVML's entry points (see nvml_seam.h). */
#include "nvml_seam.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Loaded without a lock: racing loaders each build a table and one of them
 * is kept.  The library stays loaded. */
static _Atomic(struct rc_nvml_api *) nvml_table;
static _Atomic(const struct rc_nvml_api *) override_api;

/* dlsym into a function pointer field (memcpy: object to function pointer,
 * as POSIX allows for dlsym results). */
static int nvml_symbol(void *lib, const char *name, void *field)
{
    void *fn = dlsym(lib, name);
    memcpy(field, &fn, sizeof fn);
    return !!fn;
}

static const struct rc_nvml_api *load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    struct rc_nvml_api *t = lib ? malloc(sizeof(*t)) : NULL;
    if (!t || !nvml_symbol(lib, "nvmlInit_v2", &t->Init) ||
        !nvml_symbol(lib, "nvmlShutdown", &t->Shutdown) ||
        !nvml_symbol(lib, "nvmlDeviceGetHandleByPciBusId_v2", &t->DeviceGetHandleByPciBusId) ||
        !nvml_symbol(lib, "nvmlDeviceGetBAR1MemoryInfo", &t->DeviceGetBAR1MemoryInfo)) {
        free(t);
        return NULL;
    }
    struct rc_nvml_api *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&nvml_table, &expected, t, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        free(t);
        return expected;
    }
    return t;
}

const struct rc_nvml_api *rc_nvml_api(void)
{
    const struct rc_nvml_api *api = atomic_load_explicit(&override_api, memory_order_acquire);
    if (api)
        return api;
    api = atomic_load_explicit(&nvml_table, memory_order_acquire);
    return api ? api : load();
}

void rc_nvml_api_override(const struct rc_nvml_api *api)
{
    atomic_store_explicit(&override_api, api, memory_order_release);
}
