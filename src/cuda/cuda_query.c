/* What the CUDA driver says about an address: the rc_memory of the driver. */
#include <stdint.h>

#include "cuda_seam.h"
#include "last_error.h"
#include "mem_query.h"

/* What one cuPointerGetAttributes call reports about a pointer.  For memory
 * the driver does not know (malloc, freed, unmapped VMM) the call succeeds
 * and leaves every value zero. */
struct pointer_facts {
    unsigned long long buffer_id;
    unsigned int type; /* CUmemorytype; 0 = not CUDA memory */
    unsigned int managed;
    int device;
    CUdeviceptr range_start;
    size_t range_size;
    CUdeviceptr mapping_start;
    size_t mapping_size;
    unsigned int sync_memops;
    unsigned int legacy_ipc; /* cuMemAlloc memory */
    CUmemoryPool pool;       /* cuMemAllocAsync memory */
    unsigned int rdma_capable;
};

static CUresult read_facts(const struct rc_cuda_api *api, uintptr_t addr, struct pointer_facts *f)
{
    *f = (struct pointer_facts){ 0 };
    const struct {
        CUpointer_attribute attr;
        void *value;
    } ask[] = {
        { CU_POINTER_ATTRIBUTE_BUFFER_ID, &f->buffer_id },
        { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, &f->type },
        { CU_POINTER_ATTRIBUTE_IS_MANAGED, &f->managed },
        { CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, &f->device },
        { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, &f->range_start },
        { CU_POINTER_ATTRIBUTE_RANGE_SIZE, &f->range_size },
        { CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, &f->mapping_start },
        { CU_POINTER_ATTRIBUTE_MAPPING_SIZE, &f->mapping_size },
        { CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, &f->sync_memops },
        { CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, &f->legacy_ipc },
        { CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, &f->pool },
        { CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, &f->rdma_capable },
    };
    enum { N = sizeof ask / sizeof ask[0] };
    CUpointer_attribute attrs[N];
    void *values[N];
    for (unsigned int i = 0; i < N; i++) {
        attrs[i] = ask[i].attr;
        values[i] = ask[i].value;
    }
    return api->PointerGetAttributes(N, attrs, values, (CUdeviceptr)addr);
}

/* VMM memory (cuMemCreate + cuMemMap) is neither cuMemAlloc nor pool
 * memory.  For it RANGE_START/RANGE_SIZE is the whole address reservation,
 * unmapped parts included, and MAPPING_BASE/SIZE the mapping.  For the
 * others MAPPING is a driver chunk shared with other allocations, or one of
 * several 32 MiB chunks of a large pool allocation (measured on driver
 * 580, see tests/gpu), and RANGE is the allocation. */
static int is_vmm(const struct pointer_facts *f)
{
    return !f->legacy_ipc && !f->pool && f->mapping_size != 0;
}

static void describe_host(uintptr_t base, size_t size, uint64_t id, struct regcache_mem_info *info)
{
    *info = (struct regcache_mem_info){ .base = base,
                                        .size = size,
                                        .buffer_id = id,
                                        .device = REGCACHE_DEVICE_HOST,
                                        .type = REGCACHE_MEM_HOST };
}

/* GPUDirect RDMA's rule: with SYNC_MEMOPS set, a cuMemcpy or cuMemset on
 * the memory has finished when it returns, so the NIC never reads data the
 * GPU is still writing.  Set once per allocation, before its first
 * registration (a miss's query is that moment). */
static int sync_memops(const struct rc_cuda_api *api, uintptr_t addr)
{
    unsigned int one = 1;
    CUresult r =
        api->PointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)addr);
    /* VMM (cuMemCreate) memory refuses the attribute with NOT_SUPPORTED:
     * there is nothing to set on it. */
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_SUPPORTED)
        return REGCACHE_OK;
    return rc_cuda_error(api, "cuPointerSetAttribute(SYNC_MEMOPS)", r);
}

static int cuda_query(void *ctx, const void *addr, size_t len, struct regcache_mem_info *info)
{
    const struct rc_cuda_api *api = ctx;
    uintptr_t a = (uintptr_t)addr;
    struct pointer_facts f;
    CUresult r = read_facts(api, a, &f);
    /* INVALID_VALUE: a pointer the driver has never seen, as some drivers
     * report it; like type 0, that is host memory as far as CUDA knows. */
    if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && f.type == 0)) {
        describe_host(a, len, 0, info);
        return REGCACHE_OK;
    }
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuPointerGetAttributes", r);
    /* Pinned memory (cuMemAllocHost): its allocation, which the driver packs
     * with others into one page, and its buffer id, so that the tag check
     * catches its free and reallocation as for GPU memory. */
    if (f.type == CU_MEMORYTYPE_HOST && !f.managed) {
        describe_host(f.range_start, f.range_size, f.buffer_id, info);
        return REGCACHE_OK;
    }
    *info = (struct regcache_mem_info){ .base = f.range_start,
                                        .size = f.range_size,
                                        .buffer_id = f.buffer_id,
                                        .device = f.device,
                                        .type = f.managed ? REGCACHE_MEM_MANAGED
                                                          : REGCACHE_MEM_DEVICE };
    if (f.managed)
        return REGCACHE_OK;
    if (is_vmm(&f)) {
        if (!f.rdma_capable) {
            rc_set_error("%p is VMM memory created without "
                         "CUmemAllocationProp.allocFlags.gpuDirectRDMACapable: the NIC cannot "
                         "register it (create the allocation with the flag set)",
                         addr);
            return REGCACHE_ERR_NOT_RDMA_CAPABLE;
        }
        info->base = f.mapping_start;
        info->size = f.mapping_size;
        info->flags = REGCACHE_MEM_MAPPING;
    }
    return f.sync_memops ? REGCACHE_OK : sync_memops(api, a);
}

/* The hit path: one driver call, nothing else. */
static int cuda_read_tag(void *ctx, const void *addr, size_t len, struct regcache_mem_info *info)
{
    const struct rc_cuda_api *api = ctx;
    unsigned long long id = 0;
    (void)len;
    CUresult r = api->PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)addr);
    if (r == CUDA_SUCCESS) {
        info->buffer_id = id;
        return REGCACHE_OK;
    }
    if (r == CUDA_ERROR_INVALID_VALUE)
        return REGCACHE_ERR_NOT_GPU; /* freed or unmapped */
    return rc_cuda_error(api, "cuPointerGetAttribute(BUFFER_ID)", r);
}

int rc_cuda_query(struct rc_memory *m)
{
    const struct rc_cuda_api *api = rc_cuda_api();
    if (!api)
        return REGCACHE_ERR_UNSUPPORTED;
    *m = (struct rc_memory){
        .query = cuda_query, .read_tag = cuda_read_tag, .ctx = (void *)api, .slow_tag = true
    };
    return REGCACHE_OK;
}
