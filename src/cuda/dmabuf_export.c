/* dmabuf export of GPU memory (see dmabuf_export.h). */
#include "dmabuf_export.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cuda_seam.h"
#include "quiet_calls.h"
#include "last_error.h"
#include "regcache.h"

/* The export needs a current context; a thread that has none (a progress
 * thread of the middleware) borrows the context the memory belongs to, or
 * the primary context of its device for memory that belongs to no context
 * (pools, VMM). */
struct borrowed {
    int pushed;
    int retained;
    CUdevice device;
};

/* The release drops the reference borrow_context took a moment before, so it
 * frees no memory: the in-process interception must not take it for the end
 * of the context and drop every cached entry. */
static void release_primary(const struct rc_cuda_api *api, CUdevice device)
{
    rc_cuda_quiet(true);
    api->DevicePrimaryCtxRelease(device);
    rc_cuda_quiet(false);
}

static int borrow_context(const struct rc_cuda_api *api, uintptr_t addr, struct borrowed *b)
{
    *b = (struct borrowed){ 0 };
    CUcontext current = NULL;
    CUresult r = api->CtxGetCurrent(&current);
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuCtxGetCurrent", r);
    if (current)
        return REGCACHE_OK;

    CUcontext owner = NULL;
    int ordinal = -1;
    CUpointer_attribute attrs[] = { CU_POINTER_ATTRIBUTE_CONTEXT,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL };
    void *data[] = { &owner, &ordinal };
    r = api->PointerGetAttributes(2, attrs, data, (CUdeviceptr)addr);
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuPointerGetAttributes(CONTEXT)", r);
    if (!owner) {
        if (ordinal < 0) {
            rc_set_error("dmabuf export: %#jx is not GPU memory", (uintmax_t)addr);
            return REGCACHE_ERR_CUDA;
        }
        r = api->DeviceGet(&b->device, ordinal);
        if (r != CUDA_SUCCESS)
            return rc_cuda_error(api, "cuDeviceGet", r);
        r = api->DevicePrimaryCtxRetain(&owner, b->device);
        if (r != CUDA_SUCCESS)
            return rc_cuda_error(api, "cuDevicePrimaryCtxRetain", r);
        b->retained = 1;
    }
    r = api->CtxPushCurrent(owner);
    if (r != CUDA_SUCCESS) {
        if (b->retained)
            release_primary(api, b->device);
        return rc_cuda_error(api, "cuCtxPushCurrent", r);
    }
    b->pushed = 1;
    return REGCACHE_OK;
}

static int give_back(const struct rc_cuda_api *api, const struct borrowed *b)
{
    if (!b->pushed)
        return REGCACHE_OK;
    CUcontext popped;
    CUresult r = api->CtxPopCurrent(&popped);
    if (b->retained)
        release_primary(api, b->device);
    return r == CUDA_SUCCESS ? REGCACHE_OK : rc_cuda_error(api, "cuCtxPopCurrent", r);
}

/* EMFILE or ENFILE when no file descriptor can be opened now, else 0.  The
 * driver reports a dmabuf it could not open as an error of its own, so
 * after a failed export the cache asks the fd table itself. */
static int fds_exhausted(void)
{
    int fd = eventfd(0, EFD_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return errno == EMFILE || errno == ENFILE ? errno : 0;
}

int rc_dmabuf_export(uintptr_t addr, size_t len, int *fd, uint64_t *offset)
{
    return rc_dmabuf_export_mapped(addr, len, 0, fd, offset);
}

int rc_dmabuf_export_mapped(uintptr_t addr, size_t len, unsigned long long flags, int *fd,
                            uint64_t *offset)
{
    const struct rc_cuda_api *api = rc_cuda_api();
    if (!api)
        return REGCACHE_ERR_UNSUPPORTED;
    /* The driver exports whole host pages only. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = addr & ~(page - 1);
    uintptr_t end = (addr + len + page - 1) & ~(page - 1);

    struct borrowed b;
    int rc = borrow_context(api, addr, &b);
    if (rc != REGCACHE_OK)
        return rc;
    int out = -1;
    CUresult r = api->MemGetHandleForAddressRange(&out, (CUdeviceptr)start, end - start,
                                                  CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, flags);
    rc = give_back(api, &b);
    if (r != CUDA_SUCCESS) {
        /* Drivers without the PCIe mapping type answer either (H200:
         * NOT_SUPPORTED). */
        if (flags && (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE)) {
            rc_cuda_error(api, "cuMemGetHandleForAddressRange(DMA_BUF_FD)", r);
            rc_prefix_error("the driver refuses the PCIe mapping type "
                            "(CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)");
            return REGCACHE_ERR_UNSUPPORTED;
        }
        if (r == CUDA_ERROR_NOT_SUPPORTED) {
            rc_set_error("cuMemGetHandleForAddressRange: the driver cannot export "
                         "%#jx+%zu as a dmabuf (CUDA_ERROR_NOT_SUPPORTED)",
                         (uintmax_t)start, (size_t)(end - start));
            return REGCACHE_ERR_UNSUPPORTED;
        }
        int full = fds_exhausted();
        rc = rc_cuda_error(api, "cuMemGetHandleForAddressRange(DMA_BUF_FD)", r);
        if (!full)
            return rc;
        char buf[64];
        rc_prefix_error("no file descriptor left for the dmabuf (%s)",
                        strerror_r(full, buf, sizeof buf));
        errno = full;
        return REGCACHE_ERR_NO_SPACE;
    }
    if (rc != REGCACHE_OK) {
        close(out);
        return rc;
    }
    *fd = out;
    *offset = addr - start;
    return REGCACHE_OK;
}

int rc_dmabuf_supported(int device)
{
    const struct rc_cuda_api *api = rc_cuda_api();
    CUdevice dev;
    int supported = 0;
    if (!api || api->DeviceGet(&dev, device) != CUDA_SUCCESS ||
        api->DeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) !=
            CUDA_SUCCESS)
        return 0;
    return supported != 0;
}
