/* The default per-device byte budget, from NVML's BAR1 reading. */
#include "bar1_budget.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_seam.h"
#include "options.h"

/* NVML is loaded at run time, so its few types are declared here rather than
 * needing nvml.h at build time.  Layouts as in nvml.h. */
struct nvml_bar1 {
    unsigned long long total, free, used;
};
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_by_bus_id_fn)(const char *bus_id, void **device);
typedef int (*nvml_bar1_fn)(void *device, struct nvml_bar1 *bar1);

struct nvml {
    nvml_init_fn init, shutdown;
    nvml_by_bus_id_fn by_bus_id;
    nvml_bar1_fn bar1;
};
/* Loaded without a lock (see cached_budget): racing loaders each build a
 * table and one of them is kept.  The library stays loaded. */
static _Atomic(struct nvml *) nvml_table;

/* Read once per device and kept: 0 = not read yet, else the budget + 1.
 * Lock-free, so that a fork child never waits on a parent thread that was
 * reading NVML; two threads that race both read it, harmlessly. */
#define CACHED_DEVICES 64
static atomic_size_t cached_budget[CACHED_DEVICES];

#define MIB (1024ull * 1024ull)

/* The reserve leaves BAR1 to what the budget does not count: the driver's
 * own mappings, other processes and libraries on the same GPU (BAR1 belongs
 * to the GPU, not to a process), and entries held past the budget.  A tenth
 * scales with large BARs; the 32 MiB floor keeps room for a few
 * communication buffers on the 256 MiB BAR1 of consumer GPUs. */
size_t rc_bar1_budget_rule(unsigned long long total, unsigned long long free)
{
    unsigned long long reserve = total / 10 > 32 * MIB ? total / 10 : 32 * MIB;
    if (free <= reserve)
        return 1; /* 0 would mean unlimited: keep nothing unused instead */
    unsigned long long budget = free - reserve;
    return budget > SIZE_MAX ? SIZE_MAX : (size_t)budget;
}

/* dlsym into a function pointer field (memcpy: object to function pointer,
 * as POSIX allows for dlsym results). */
static int nvml_symbol(void *lib, const char *name, void *field)
{
    void *fn = dlsym(lib, name);
    memcpy(field, &fn, sizeof fn);
    return !!fn;
}

static const struct nvml *load_nvml(void)
{
    struct nvml *t = atomic_load_explicit(&nvml_table, memory_order_acquire);
    if (t)
        return t;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    t = lib ? malloc(sizeof(*t)) : NULL;
    if (!t || !nvml_symbol(lib, "nvmlInit_v2", &t->init) ||
        !nvml_symbol(lib, "nvmlShutdown", &t->shutdown) ||
        !nvml_symbol(lib, "nvmlDeviceGetHandleByPciBusId_v2", &t->by_bus_id) ||
        !nvml_symbol(lib, "nvmlDeviceGetBAR1MemoryInfo", &t->bar1)) {
        free(t);
        return NULL;
    }
    struct nvml *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&nvml_table, &expected, t, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        free(t);
        return expected;
    }
    return t;
}

/* NVML numbers devices its own way (all GPUs, ignoring
 * CUDA_VISIBLE_DEVICES); the PCI bus id names the same GPU in both.
 * REGCACHE_BAR1_BYTES stands for an empty BAR1 of that size on every GPU,
 * read instead of NVML: tests and machines without NVML get a budget. */
static size_t read_budget(int device)
{
    const char *configured = getenv("REGCACHE_BAR1_BYTES");
    size_t size;
    if (configured && rc_parse_size(configured, &size) && size)
        return rc_bar1_budget_rule(size, size);
    const struct rc_cuda_api *api = rc_cuda_api();
    CUdevice dev;
    char bus_id[32];
    if (!api || api->DeviceGet(&dev, device) != CUDA_SUCCESS ||
        api->DeviceGetPCIBusId(bus_id, sizeof bus_id, dev) != CUDA_SUCCESS)
        return 0;
    const struct nvml *nvml = load_nvml();
    if (!nvml || nvml->init() != 0)
        return 0;
    void *handle = NULL;
    struct nvml_bar1 bar1;
    size_t budget = 0;
    if (nvml->by_bus_id(bus_id, &handle) == 0 && nvml->bar1(handle, &bar1) == 0)
        budget = rc_bar1_budget_rule(bar1.total, bar1.free);
    nvml->shutdown();
    return budget;
}

size_t rc_bar1_budget(int device)
{
    if (device < 0 || device >= CACHED_DEVICES)
        return 0;
    size_t known = atomic_load_explicit(&cached_budget[device], memory_order_acquire);
    if (known)
        return known - 1;
    size_t budget = read_budget(device);
    /* SIZE_MAX + 1 would read as "not read": the largest budget is one less. */
    if (budget == SIZE_MAX)
        budget--;
    atomic_store_explicit(&cached_budget[device], budget + 1, memory_order_release);
    return budget;
}
