#include "fake_driver.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_seam.h"

struct drv_state drv;

struct drv_alloc *drv_alloc_at(uintptr_t p)
{
    for (int i = 0; i < DRV_MAX_ALLOCS; i++) {
        struct drv_alloc *a = &drv.allocs[i];
        if (a->live && p >= a->base && p - a->base < a->size)
            return a;
    }
    return NULL;
}

/* The calling thread's capture interaction mode; 0 is GLOBAL. */
static _Thread_local CUstreamCaptureMode thread_mode;

/* Whether a capture restricts the calling thread (fake_driver.h); with
 * `invalidate`, those that do are invalidated. */
static int restricted(int invalidate)
{
    int found = 0;
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    for (int i = 0; i < DRV_MAX_CAPTURES; i++) {
        struct drv_capture *c = &drv.captures[i];
        int own = c->owner == &thread_mode;
        if (c->active && ((own && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                          (!own && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                           c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL))) {
            found = 1;
            if (invalidate)
                c->invalidated = 1;
        }
    }
    return found;
}

/* Count the call; the injected error for it, or CUDA_SUCCESS. */
static CUresult enter(enum drv_call c)
{
    drv.calls[c]++;
    if (restricted(0))
        drv.unrelaxed[c]++;
    return drv.fail[c];
}

/* Count the call, and return the error injected for it, if any. */
#define ENTER(c)                       \
    do {                               \
        CUresult injected_ = enter(c); \
        if (injected_ != CUDA_SUCCESS) \
            return injected_;          \
    } while (0)

/* ENTER for a call that a capture refuses (fake_driver.h). */
#define ENTER_UNSAFE(c)                                   \
    do {                                                  \
        ENTER(c);                                         \
        if (restricted(1)) {                              \
            drv.refused++;                                \
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; \
        }                                                 \
    } while (0)

static CUresult drv_init(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

static CUresult drv_get_error_name(CUresult error, const char **name)
{
    ENTER(FC_ERROR_NAME);
    static const struct {
        CUresult code;
        const char *name;
    } names[] = {
        { CUDA_SUCCESS, "CUDA_SUCCESS" },
        { CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE" },
        { CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED" },
        { CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED" },
        { CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED" },
        { CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT" },
        { CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE" },
        { CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY" },
        { CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN" },
        { CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM" },
        { CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (names[i].code == error) {
            *name = names[i].name;
            return CUDA_SUCCESS;
        }
    }
    /* As the driver does for a code it does not know. */
    return CUDA_ERROR_INVALID_VALUE;
}

/* What the driver writes for one attribute; zeros for unknown memory. */
static void put_attribute(void *data, CUpointer_attribute attr, const struct drv_alloc *a)
{
    static const struct drv_alloc none = { .device = -2 };
    if (!a)
        a = &none;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a->id;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = a->type;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = a->managed;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a->device;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a->range_start;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a->range_size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = a->map_start;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = a->map_size;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned int *)data = a->sync_memops;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a->owner;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned int *)data = a->legacy_ipc;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = a->pool;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(unsigned int *)data = a->rdma_capable;
        break;
    default:
        abort(); /* the library asked for something the fake driver does not model */
    }
}

static CUresult drv_pointer_get_attribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    ENTER(FC_GET_ATTRIBUTE);
    struct drv_alloc *a = drv_alloc_at(p);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    put_attribute(data, attr, a);
    return CUDA_SUCCESS;
}

static CUresult drv_pointer_get_attributes(unsigned int count, CUpointer_attribute *attrs,
                                           void **data, CUdeviceptr p)
{
    ENTER(FC_GET_ATTRIBUTES);
    struct drv_alloc *a = drv_alloc_at(p);
    if (!a && drv.unknown_invalid)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; i++)
        put_attribute(data[i], attrs[i], a);
    return CUDA_SUCCESS;
}

static CUresult drv_pointer_set_attribute(const void *value, CUpointer_attribute attr,
                                          CUdeviceptr p)
{
    ENTER_UNSAFE(FC_SET_ATTRIBUTE);
    struct drv_alloc *a = drv_alloc_at(p);
    if (!a || attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->refuses_sync)
        return CUDA_ERROR_NOT_SUPPORTED;
    a->sync_memops = *(const unsigned int *)value;
    return CUDA_SUCCESS;
}

static CUresult drv_mem_get_handle(void *handle, CUdeviceptr p, size_t size,
                                   CUmemRangeHandleType type, unsigned long long flags)
{
    CUresult r = enter(FC_GET_HANDLE);
    drv.export_ptr = p;
    drv.export_size = size;
    drv.export_fd = -1;
    drv.export_flags = flags;
    if (r != CUDA_SUCCESS)
        return r;
    if (restricted(1)) {
        drv.refused++;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (flags == CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE) {
        drv.pcie_exports++;
        if (drv.pcie_answer != CUDA_SUCCESS)
            return drv.pcie_answer;
        flags = 0;
    }
    if (!drv.current)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct drv_alloc *a = drv_alloc_at(p);
    if (type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags != 0 || !a || p % 4096 != 0 ||
        size % 4096 != 0 || size > a->base + a->size - p)
        return CUDA_ERROR_INVALID_VALUE;
    /* A process out of file descriptors gets no dmabuf: the driver's
     * answer is its own error code, not errno. */
    int fd = eventfd(0, EFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    drv.export_fd = fd;
    *(int *)handle = fd;
    return CUDA_SUCCESS;
}

static int no_device(CUdevice device)
{
    return device < 0 || device >= drv.device_count;
}

static CUresult drv_device_get(CUdevice *device, int ordinal)
{
    ENTER(FC_DEVICE_GET);
    if (no_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult drv_device_get_count(int *count)
{
    ENTER(FC_DEVICE_COUNT);
    *count = drv.device_count;
    return CUDA_SUCCESS;
}

static CUresult drv_device_get_attribute(int *value, CUdevice_attribute attr, CUdevice device)
{
    ENTER(FC_DEVICE_GET_ATTRIBUTE);
    if (no_device(device) || attr != CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
        return CUDA_ERROR_INVALID_VALUE;
    *value = drv.dmabuf_supported[device];
    return CUDA_SUCCESS;
}

/* Bus ids no machine has (device 0's is 00ff:fe:1f.7, the next ones count
 * the device down), so NVML (where present) never finds them. */
static CUresult drv_device_get_pci_bus_id(char *bus_id, int len, CUdevice device)
{
    ENTER(FC_BUS_ID);
    if (no_device(device) || len < 13)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus_id, (size_t)len, "00ff:fe:%02x.7", (unsigned)(0x1f - device));
    return CUDA_SUCCESS;
}

static CUresult drv_device_total_mem(size_t *bytes, CUdevice device)
{
    ENTER(FC_TOTAL_MEM);
    if (no_device(device) || !drv.device_memory)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = drv.device_memory;
    return CUDA_SUCCESS;
}

/* Device 0's UUID bytes are 0x00..0x0f, so its text form is easy to check;
 * device d's are d * 16 more. */
static CUresult drv_device_get_uuid(CUuuid *uuid, CUdevice device)
{
    ENTER(FC_UUID);
    if (no_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    for (int i = 0; i < 16; i++)
        uuid->bytes[i] = (char)(device * 16 + i);
    return CUDA_SUCCESS;
}

static CUresult drv_ctx_get_current(CUcontext *ctx)
{
    ENTER(FC_CTX_GET_CURRENT);
    *ctx = drv.current;
    return CUDA_SUCCESS;
}

static CUresult drv_ctx_push_current(CUcontext ctx)
{
    ENTER_UNSAFE(FC_CTX_PUSH);
    drv.current = ctx;
    drv.pushed++;
    return CUDA_SUCCESS;
}

/* One level deep: the thread had no context before the push. */
static CUresult drv_ctx_pop_current(CUcontext *ctx)
{
    ENTER_UNSAFE(FC_CTX_POP);
    *ctx = drv.current;
    drv.current = NULL;
    drv.pushed--;
    return CUDA_SUCCESS;
}

static CUresult drv_primary_ctx_retain(CUcontext *ctx, CUdevice device)
{
    ENTER_UNSAFE(FC_PRIMARY_RETAIN);
    if (no_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    *ctx = DRV_PRIMARY_CTX;
    drv.retained++;
    return CUDA_SUCCESS;
}

static CUresult drv_primary_ctx_release(CUdevice device)
{
    ENTER_UNSAFE(FC_PRIMARY_RELEASE);
    if (no_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    drv.retained--;
    return CUDA_SUCCESS;
}

static CUresult drv_exchange_capture_mode(CUstreamCaptureMode *mode)
{
    drv.calls[FC_EXCHANGE]++;
    if (drv.fail[FC_EXCHANGE] != CUDA_SUCCESS)
        return drv.fail[FC_EXCHANGE];
    CUstreamCaptureMode was = thread_mode;
    thread_mode = *mode;
    *mode = was;
    return CUDA_SUCCESS;
}

static const struct rc_cuda_api drv_api = {
    .Init = drv_init,
    .GetErrorName = drv_get_error_name,
    .PointerGetAttribute = drv_pointer_get_attribute,
    .PointerGetAttributes = drv_pointer_get_attributes,
    .PointerSetAttribute = drv_pointer_set_attribute,
    .MemGetHandleForAddressRange = drv_mem_get_handle,
    .DeviceGet = drv_device_get,
    .DeviceGetCount = drv_device_get_count,
    .DeviceGetAttribute = drv_device_get_attribute,
    .DeviceGetPCIBusId = drv_device_get_pci_bus_id,
    .DeviceGetUuid = drv_device_get_uuid,
    .DeviceTotalMem = drv_device_total_mem,
    .CtxGetCurrent = drv_ctx_get_current,
    .CtxPushCurrent = drv_ctx_push_current,
    .CtxPopCurrent = drv_ctx_pop_current,
    .DevicePrimaryCtxRetain = drv_primary_ctx_retain,
    .DevicePrimaryCtxRelease = drv_primary_ctx_release,
    .ThreadExchangeStreamCaptureMode = drv_exchange_capture_mode,
};

void drv_install(void)
{
    static uintptr_t arena;
    /* One reservation for the process, so malloc never lands inside it;
     * 2 MiB aligned like the driver's chunks, so that offsets in the arena
     * round as device addresses do. */
    if (arena == 0) {
        const size_t align = (size_t)2 << 20;
        void *p = mmap(NULL, DRV_ARENA_SIZE + align, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            abort();
        arena = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    }
    memset(&drv, 0, sizeof drv);
    drv.arena = arena;
    drv.next_id = 100;
    drv.device_count = 1;
    drv.dmabuf_supported[0] = 1;
    drv.export_fd = -1;
    drv.current = DRV_PRIMARY_CTX;
    thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    rc_cuda_api_override(&drv_api);
}

void drv_uninstall(void)
{
    rc_cuda_api_override(NULL);
}

const struct rc_cuda_api *drv_raw_api(void)
{
    return &drv_api;
}

uintptr_t drv_addr(size_t offset)
{
    return drv.arena + offset;
}

static int add(struct drv_alloc a)
{
    for (int i = 0; i < DRV_MAX_ALLOCS; i++) {
        if (drv.allocs[i].base == 0) {
            a.live = 1;
            a.id = drv.next_id++;
            drv.allocs[i] = a;
            return i;
        }
    }
    abort();
}

/* The driver chunk of `chunk` bytes that holds [offset, offset+size). */
static struct drv_alloc chunked(size_t offset, size_t size, size_t chunk)
{
    size_t first = offset / chunk * chunk;
    size_t last = (offset + size + chunk - 1) / chunk * chunk;
    return (struct drv_alloc){ .base = drv_addr(offset),
                               .size = size,
                               .range_start = drv_addr(offset),
                               .range_size = size,
                               .map_start = drv_addr(first),
                               .map_size = last - first,
                               .type = CU_MEMORYTYPE_DEVICE,
                               .device = 0 };
}

int drv_legacy(size_t offset, size_t size)
{
    struct drv_alloc a = chunked(offset, size, (size_t)2 << 20);
    a.owner = DRV_OTHER_CTX;
    a.legacy_ipc = 1;
    a.rdma_capable = 1;
    return add(a);
}

int drv_pool(size_t offset, size_t size)
{
    struct drv_alloc a = chunked(offset, size, (size_t)32 << 20);
    a.pool = (CUmemoryPool)&drv.allocs[2];
    return add(a);
}

int drv_vmm(size_t reserve_offset, size_t reserve_size, size_t offset, size_t size)
{
    return add((struct drv_alloc){ .base = drv_addr(offset),
                                   .size = size,
                                   .range_start = drv_addr(reserve_offset),
                                   .range_size = reserve_size,
                                   .map_start = drv_addr(offset),
                                   .map_size = size,
                                   .type = CU_MEMORYTYPE_DEVICE,
                                   .device = 0,
                                   .refuses_sync = 1,
                                   .rdma_capable = 1 });
}

int drv_managed(size_t offset, size_t size)
{
    struct drv_alloc a = chunked(offset, size, (size_t)2 << 20);
    a.managed = 1;
    a.sync_memops = 1;
    return add(a);
}

int drv_pinned_host(size_t offset, size_t size)
{
    struct drv_alloc a = chunked(offset, size, (size_t)2 << 20);
    a.type = CU_MEMORYTYPE_HOST;
    return add(a);
}

void drv_set_rdma_capable(int i, int capable)
{
    drv.allocs[i].rdma_capable = (unsigned)capable;
}

void drv_free(int i)
{
    drv.allocs[i].live = 0;
}

void drv_realloc(int i)
{
    drv.allocs[i].live = 1;
    drv.allocs[i].id = drv.next_id++;
    drv.allocs[i].sync_memops = 0;
}

int drv_capture_begin(CUstreamCaptureMode mode)
{
    for (int i = 0; i < DRV_MAX_CAPTURES; i++)
        if (!drv.captures[i].active) {
            drv.captures[i] = (struct drv_capture){
                .active = 1, .mode = mode, .owner = &thread_mode, .invalidated = 0
            };
            return i;
        }
    abort();
}

CUresult drv_capture_end(int i)
{
    drv.captures[i].active = 0;
    return drv.captures[i].invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUstreamCaptureMode drv_thread_mode(void)
{
    return thread_mode;
}

unsigned int drv_unrelaxed_calls(void)
{
    unsigned int n = 0;
    for (int c = 0; c < FC_COUNT; c++)
        n += drv.unrelaxed[c];
    return n;
}

int drv_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        abort();
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}
