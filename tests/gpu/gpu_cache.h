/* The GPU cache tests: one file per behaviour area (test_cache_<area>.c),
 * one program (test_cache.c) that runs them all, over a shared fixture
 * (gpu_fixture.c): the driver calls the tests make themselves, a counting
 * backend, and gets checked against the memory now. */
#ifndef GPU_CACHE_H
#define GPU_CACHE_H

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "bar1_budget.h"
#include "cache.h"
#include "capture_mode.h"
#include "cuda_seam.h"
#include "dmabuf_export.h"
#include "dmabuf_reg.h"
#include "regcache.h"
#include "verbs_seam.h"

#define MIB ((size_t)1 << 20)

/* Each field is named and typed after the cuda.h declaration its name
 * expands to (cuMemAlloc is cuMemAlloc_v2), and loaded by that name. */
/* clang-format off: one entry a line, which clang-format 14 does not keep */
#define DRIVER_CALLS(X)                  \
    X(cuInit)                            \
    X(cuGetErrorName)                    \
    X(cuDeviceGet)                       \
    X(cuDeviceGetCount)                  \
    X(cuDevicePrimaryCtxRetain)          \
    X(cuCtxSetCurrent)                   \
    X(cuMemAlloc)                        \
    X(cuMemFree)                         \
    X(cuMemAllocHost)                    \
    X(cuMemFreeHost)                     \
    X(cuMemAllocManaged)                 \
    X(cuStreamCreate)                    \
    X(cuStreamDestroy)                   \
    X(cuStreamSynchronize)               \
    X(cuMemAllocAsync)                   \
    X(cuMemFreeAsync)                    \
    X(cuMemAddressReserve)               \
    X(cuMemAddressFree)                  \
    X(cuMemCreate)                       \
    X(cuMemRelease)                      \
    X(cuMemMap)                          \
    X(cuMemUnmap)                        \
    X(cuMemSetAccess)                    \
    X(cuMemGetAllocationGranularity)     \
    X(cuPointerGetAttribute)             \
    X(cuThreadExchangeStreamCaptureMode) \
    X(cuStreamBeginCapture)              \
    X(cuStreamEndCapture)                \
    X(cuStreamIsCapturing)               \
    X(cuGraphInstantiate)                \
    X(cuGraphLaunch)                     \
    X(cuGraphExecDestroy)                \
    X(cuGraphDestroy)                    \
    X(cuMemsetD32Async)                  \
    X(cuMemcpyDtoH)
/* clang-format on */
#define FIELD(f) __typeof__(&f) f;
struct cu_calls {
    DRIVER_CALLS(FIELD)
};
#undef FIELD
extern struct cu_calls cu;
extern CUcontext ctx;
extern CUdevice dev;

#define CK(call)                           \
    do {                                   \
        CUresult r_ = (call);              \
        if (r_ != CUDA_SUCCESS) {          \
            const char *n_ = "?";          \
            cu.cuGetErrorName(r_, &n_);    \
            fail_msg("%s: %s", #call, n_); \
        }                                  \
    } while (0)

/* What reg recorded.  Handles are kept (marked dead) after dereg until the
 * test ends, so that a stale one handed out again is caught, not reused. */
struct handle {
    uintptr_t start;
    size_t len;
    unsigned long long id; /* buffer id of the requested memory at reg */
    unsigned int sync;     /* its SYNC_MEMOPS at reg */
    atomic_int dead;
    struct handle *next;
};

extern atomic_long regs, deregs;
/* The address the calling thread asked regcache_get for: reg runs in that
 * thread and records what the memory there is. */
extern _Thread_local uintptr_t requested;
extern struct handle *_Atomic held_watch; /* must never be deregistered */
extern atomic_int watch_violations;
extern struct handle *dereg_log[64];
extern atomic_int dereg_count_logged;

const char *driver_missing(void);
unsigned long long buffer_id(uintptr_t addr);
unsigned int sync_memops_of(uintptr_t addr);
regcache_t *new_cache(size_t max_bytes);
/* A cache in `validation`, or NULL with why printed. */
regcache_t *new_cache_validated(size_t max_bytes, enum regcache_validation validation);
int reset(void **state);
int release_handles(void **state);
struct handle *get_checked(regcache_t *c, uintptr_t addr, size_t len, regcache_entry_t **e);
int get_status(regcache_t *c, uintptr_t addr, size_t len);
struct regcache_stats stats_of(regcache_t *c);
void expect_reregistration(regcache_t *c, uintptr_t base, size_t offset, size_t len,
                           uintptr_t (*replace)(uintptr_t), const char *kind);

/* A stream of the test's own, for stream-ordered allocations. */
extern CUstream stream;

/* VMM memory of device 0 that GPUDirect RDMA may reach (vmm_prop), its
 * smallest mapping (vmm_size, set by vmm_granularity()), and a handle to map
 * at va (vmm_map()). */
extern CUmemAllocationProp vmm_prop;
extern CUmemGenericAllocationHandle vmm_handle;
extern size_t vmm_size;
void vmm_granularity(void);
void vmm_map(CUdeviceptr va);

/* The behaviours, each in the file of its area. */
void legacy_realloc_is_reregistered(void **state);
void legacy_realloc_is_reregistered_past_l1(void **state);
void pool_reuse_is_reregistered(void **state);
void vmm_remap_is_reregistered(void **state);
void packed_small_allocations_stay_apart(void **state);
void whole_allocations_of_every_size(void **state);
void managed_and_host_memory_are_refused(void **state);
void sync_memops_is_set_before_the_first_registration(void **state);
void fork_child_has_no_driver(void **state);
void dmabuf_export_of_every_kind(void **state);
void budget_evicts_lru_and_never_a_held_entry(void **state);
void threads_never_see_a_stale_handle(void **state);
void bar1_budget_of_device_0_is_read(void **state);
void pcie_mapping_refused_and_the_export_falls_back(void **state);
void export_without_fds_is_exhaustion(void **state);

#endif
