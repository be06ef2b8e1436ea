/* The default per-device byte budget: a configured BAR1 size, else NVML's
 * BAR1 reading, else the GPU's memory. */
#include "bar1_budget.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_seam.h"
#include "nvml_seam.h"
#include "options.h"

/* Read once per device and kept: 0 = not read yet, else the budget + 1,
 * stored after its source.  Lock-free, so that a fork child never waits on
 * a parent thread that was reading NVML; two threads that race both read
 * it, harmlessly. */
#define CACHED_DEVICES 64
static atomic_size_t cached_budget[CACHED_DEVICES];
static atomic_int cached_source[CACHED_DEVICES];

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

/* NVML numbers devices its own way (all GPUs, ignoring
 * CUDA_VISIBLE_DEVICES); the PCI bus id names the same GPU in both.  0 when
 * NVML is missing, does not know the GPU, or reports no BAR1 (coherent
 * systems such as Grace Hopper, whose NIC reaches GPU memory without it). */
static size_t nvml_bar1_budget(const struct rc_cuda_api *api, CUdevice dev)
{
    char bus_id[32];
    const struct rc_nvml_api *nvml = rc_nvml_api();
    if (api->DeviceGetPCIBusId(bus_id, sizeof bus_id, dev) != CUDA_SUCCESS || !nvml ||
        nvml->Init() != 0)
        return 0;
    void *handle = NULL;
    struct rc_nvml_bar1 bar1;
    size_t budget = 0;
    if (nvml->DeviceGetHandleByPciBusId(bus_id, &handle) == 0 &&
        nvml->DeviceGetBAR1MemoryInfo(handle, &bar1) == 0)
        budget = rc_bar1_budget_rule(bar1.total, bar1.free);
    nvml->Shutdown();
    return budget;
}

/* REGCACHE_BAR1_BYTES stands for an empty BAR1 of that size on every GPU,
 * read instead of NVML: tests and machines without NVML get a budget.
 * Without a BAR1 reading the GPU's memory bounds what can be registered, so
 * it stands for an empty BAR1 of its size: never unlimited while the
 * driver knows the GPU. */
static size_t read_budget(int device, enum rc_budget_source *source)
{
    size_t size;
    *source = RC_BUDGET_CONFIGURED;
    if (rc_option_bar1_bytes(&size, NULL, 0) && size)
        return rc_bar1_budget_rule(size, size);
    *source = RC_BUDGET_NONE;
    const struct rc_cuda_api *api = rc_cuda_api();
    CUdevice dev;
    if (!api || api->DeviceGet(&dev, device) != CUDA_SUCCESS)
        return 0;
    size_t budget = nvml_bar1_budget(api, dev);
    if (budget) {
        *source = RC_BUDGET_NVML_BAR1;
        return budget;
    }
    if (api->DeviceTotalMem(&size, dev) != CUDA_SUCCESS || !size)
        return 0;
    *source = RC_BUDGET_DEVICE_MEMORY;
    return rc_bar1_budget_rule(size, size);
}

size_t rc_bar1_budget(int device)
{
    if (device < 0 || device >= CACHED_DEVICES)
        return 0;
    size_t known = atomic_load_explicit(&cached_budget[device], memory_order_acquire);
    if (known)
        return known - 1;
    enum rc_budget_source source;
    size_t budget = read_budget(device, &source);
    /* SIZE_MAX + 1 would read as "not read": the largest budget is one less. */
    if (budget == SIZE_MAX)
        budget--;
    atomic_store_explicit(&cached_source[device], (int)source, memory_order_relaxed);
    atomic_store_explicit(&cached_budget[device], budget + 1, memory_order_release);
    return budget;
}

enum rc_budget_source rc_bar1_budget_source(int device)
{
    if (device < 0 || device >= CACHED_DEVICES ||
        !atomic_load_explicit(&cached_budget[device], memory_order_acquire))
        return RC_BUDGET_NONE;
    return (enum rc_budget_source)atomic_load_explicit(&cached_source[device],
                                                       memory_order_relaxed);
}
