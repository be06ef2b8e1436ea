#include "fake_cuda.h"

#include "cuda_seam.h"

#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

struct fake_cuda fake_cuda;

static int in_alloc(CUdeviceptr p)
{
    return p >= fake_cuda.alloc_base &&
           p - fake_cuda.alloc_base < FAKE_CUDA_ALLOC_SIZE;
}

/* Every thread has a current context: the fake has only the one. */
static CUcontext fake_context(void)
{
    static int ctx;
    return (CUcontext)&ctx;
}

static CUresult fake_init(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

static CUresult fake_get_error_name(CUresult error, const char **name)
{
    *name = error == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
}

/* Writes the attribute's default (what the driver reports for memory it
 * does not know) when `known` is 0. */
static void put_attribute(void *data, CUpointer_attribute a, CUdeviceptr p,
                          int known)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = known ? CU_MEMORYTYPE_DEVICE : 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = known ? 1 : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = known ? 0 : -2;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = known ? fake_cuda.alloc_base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = known ? FAKE_CUDA_ALLOC_SIZE : 0;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = known ? fake_context() : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(CUdeviceptr *)data = known ? p : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = 0;
        break;
    default: /* the flags: SYNC_MEMOPS, MAPPED, GPU_DIRECT_RDMA_CAPABLE... */
        *(unsigned int *)data = known ? 1 : 0;
        break;
    }
}

static CUresult fake_pointer_get_attribute(void *data, CUpointer_attribute a,
                                           CUdeviceptr p)
{
    if (!in_alloc(p))
        return CUDA_ERROR_INVALID_VALUE;
    put_attribute(data, a, p, 1);
    return CUDA_SUCCESS;
}

static CUresult fake_pointer_get_attributes(unsigned int count,
                                            CUpointer_attribute *attributes,
                                            void **data, CUdeviceptr p)
{
    for (unsigned int i = 0; i < count; i++)
        put_attribute(data[i], attributes[i], p, in_alloc(p));
    return CUDA_SUCCESS;
}

static CUresult fake_pointer_set_attribute(const void *value,
                                           CUpointer_attribute a,
                                           CUdeviceptr p)
{
    (void)value;
    (void)a;
    return in_alloc(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_mem_get_handle(void *handle, CUdeviceptr p, size_t size,
                                    CUmemRangeHandleType type,
                                    unsigned long long flags)
{
    int fd;

    fake_cuda.export_calls++;
    fake_cuda.export_ptr = p;
    fake_cuda.export_size = size;
    fake_cuda.export_fd = -1;
    if (fake_cuda.export_result != CUDA_SUCCESS)
        return fake_cuda.export_result;
    if (type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags != 0 ||
        !in_alloc(p) || size > FAKE_CUDA_ALLOC_SIZE - (p - fake_cuda.alloc_base))
        return CUDA_ERROR_INVALID_VALUE;
    fd = eventfd(0, EFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fake_cuda.export_fd = fd;
    *(int *)handle = fd;
    return CUDA_SUCCESS;
}

static CUresult fake_device_get(CUdevice *device, int ordinal)
{
    if (ordinal < 0 || ordinal >= fake_cuda.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult fake_device_get_count(int *count)
{
    *count = fake_cuda.device_count;
    return CUDA_SUCCESS;
}

static CUresult fake_device_get_attribute(int *value, CUdevice_attribute a,
                                          CUdevice device)
{
    if (device < 0 || device >= fake_cuda.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *value = a == CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
                 ? fake_cuda.dmabuf_supported[device]
                 : 1;
    return CUDA_SUCCESS;
}

static CUresult fake_device_get_pci_bus_id(char *bus_id, int len,
                                           CUdevice device)
{
    if (device < 0 || device >= fake_cuda.device_count || len < 13)
        return CUDA_ERROR_INVALID_VALUE;
    strcpy(bus_id, "0000:00:00.0");
    bus_id[9] = (char)('0' + device);
    return CUDA_SUCCESS;
}

static CUresult fake_device_get_uuid(CUuuid *uuid, CUdevice device)
{
    if (device < 0 || device >= fake_cuda.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    uuid->bytes[15] = (char)device;
    return CUDA_SUCCESS;
}

static CUresult fake_ctx_get_current(CUcontext *ctx)
{
    *ctx = fake_context();
    return CUDA_SUCCESS;
}

static CUresult fake_ctx_push_current(CUcontext ctx)
{
    return ctx == fake_context() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult fake_ctx_pop_current(CUcontext *ctx)
{
    *ctx = fake_context();
    return CUDA_SUCCESS;
}

static CUresult fake_primary_ctx_retain(CUcontext *ctx, CUdevice device)
{
    if (device < 0 || device >= fake_cuda.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *ctx = fake_context();
    return CUDA_SUCCESS;
}

static CUresult fake_primary_ctx_release(CUdevice device)
{
    return device >= 0 && device < fake_cuda.device_count
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_DEVICE;
}

static const struct rc_cuda_api fake_api = {
    .Init = fake_init,
    .GetErrorName = fake_get_error_name,
    .PointerGetAttribute = fake_pointer_get_attribute,
    .PointerGetAttributes = fake_pointer_get_attributes,
    .PointerSetAttribute = fake_pointer_set_attribute,
    .MemGetHandleForAddressRange = fake_mem_get_handle,
    .DeviceGet = fake_device_get,
    .DeviceGetCount = fake_device_get_count,
    .DeviceGetAttribute = fake_device_get_attribute,
    .DeviceGetPCIBusId = fake_device_get_pci_bus_id,
    .DeviceGetUuid = fake_device_get_uuid,
    .CtxGetCurrent = fake_ctx_get_current,
    .CtxPushCurrent = fake_ctx_push_current,
    .CtxPopCurrent = fake_ctx_pop_current,
    .DevicePrimaryCtxRetain = fake_primary_ctx_retain,
    .DevicePrimaryCtxRelease = fake_primary_ctx_release,
};

void fake_cuda_install(void)
{
    static uintptr_t base;

    /* One reservation for the whole process: its address is the "GPU
     * allocation" and must not be reused by malloc between tests. */
    if (!base) {
        void *p = mmap(NULL, FAKE_CUDA_ALLOC_SIZE, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            abort();
        base = (uintptr_t)p;
    }
    memset(&fake_cuda, 0, sizeof(fake_cuda));
    fake_cuda.alloc_base = base;
    fake_cuda.device_count = 1;
    fake_cuda.dmabuf_supported[0] = 1;
    fake_cuda.export_fd = -1;
    rc_cuda_api_override(&fake_api);
}

void fake_cuda_uninstall(void)
{
    rc_cuda_api_override(NULL);
}
