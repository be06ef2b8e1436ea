/* rc_cuda_query(): how the driver's answers become regcache_mem_info, tag
 * checks, SYNC_MEMOPS, and every driver error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake_driver.h"
#include "mem_query.h"
#include "regcache.h"

#define MIB ((size_t)1 << 20)

static struct rc_memory mem;

static int setup(void **state)
{
    (void)state;
    drv_install();
    assert_int_equal(rc_cuda_query(&mem), REGCACHE_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    drv_uninstall();
    return 0;
}

static int query(uintptr_t addr, size_t len, struct regcache_mem_info *info)
{
    memset(info, 0x5a, sizeof *info);
    return mem.query(mem.ctx, (const void *)addr, len, info);
}

static void assert_info(const struct regcache_mem_info *info, uintptr_t base, size_t size,
                        uint64_t id, int device, int type)
{
    assert_int_equal(info->base, base);
    assert_int_equal(info->size, size);
    assert_int_equal(info->buffer_id, id);
    assert_int_equal(info->device, device);
    assert_int_equal(info->type, type);
}

static void legacy_is_the_whole_allocation(void **state)
{
    (void)state;
    int i = drv_legacy(3 * MIB, MIB);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(3 * MIB + 4096), 8192, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(3 * MIB), MIB, drv.allocs[i].id, 0, REGCACHE_MEM_DEVICE);
    assert_int_equal(drv.calls[FC_GET_ATTRIBUTES], 1);
}

static void pool_is_the_single_allocation_not_the_pool_chunk(void **state)
{
    (void)state;
    int i = drv_pool(MIB, MIB);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(MIB), MIB, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(MIB), MIB, drv.allocs[i].id, 0, REGCACHE_MEM_DEVICE);
}

static void vmm_is_the_mapping_not_the_reservation(void **state)
{
    (void)state;
    /* 8 MiB reserved, two 2 MiB mappings of different handles. */
    int a = drv_vmm(0, 8 * MIB, 0, 2 * MIB);
    int b = drv_vmm(0, 8 * MIB, 2 * MIB, 2 * MIB);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(2 * MIB + 4096), 4096, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(2 * MIB), 2 * MIB, drv.allocs[b].id, 0, REGCACHE_MEM_DEVICE);
    assert_int_equal(info.flags, REGCACHE_MEM_MAPPING);
    /* A request across both: the query describes the first mapping, and
     * says it is one, so that the cache asks for the next. */
    assert_int_equal(query(drv_addr(MIB), 2 * MIB, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(0), 2 * MIB, drv.allocs[a].id, 0, REGCACHE_MEM_DEVICE);
    assert_int_equal(info.flags, REGCACHE_MEM_MAPPING);
}

static void vmm_without_the_rdma_flag_is_refused(void **state)
{
    (void)state;
    int a = drv_vmm(0, 4 * MIB, 0, 2 * MIB);
    drv_set_rdma_capable(a, 0);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(4096), 4096, &info), REGCACHE_ERR_NOT_RDMA_CAPABLE);
    assert_non_null(strstr(regcache_last_error(), "gpuDirectRDMACapable"));
    /* Pool memory reports the flag 0 on driver 580 and registers fine: only
     * VMM memory is held to it. */
    int p = drv_pool(8 * MIB, MIB);
    assert_int_equal(drv.allocs[p].rdma_capable, 0);
    assert_int_equal(query(drv_addr(8 * MIB), 4096, &info), REGCACHE_OK);
    assert_int_equal(info.flags, 0);
}

/* A mapping narrower than the allocation (an allocation across two driver
 * chunks) narrows only VMM memory: cuMemAlloc and pool allocations are their
 * RANGE. */
static void mapping_narrows_only_vmm_memory(void **state)
{
    (void)state;
    int p = drv_pool(30 * MIB, 4 * MIB);
    drv.allocs[p].map_start = drv_addr(32 * MIB);
    drv.allocs[p].map_size = 32 * MIB;
    int l = drv_legacy(40 * MIB, 4 * MIB);
    drv.allocs[l].map_start = drv_addr(42 * MIB);
    drv.allocs[l].map_size = 2 * MIB;
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(33 * MIB), 4096, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(30 * MIB), 4 * MIB, drv.allocs[p].id, 0, REGCACHE_MEM_DEVICE);
    assert_int_equal(query(drv_addr(42 * MIB), 4096, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(40 * MIB), 4 * MIB, drv.allocs[l].id, 0, REGCACHE_MEM_DEVICE);
}

static void packed_small_allocations_are_separate(void **state)
{
    (void)state;
    int a = drv_legacy(0, 1000);
    int b = drv_legacy(1024, 1000);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(1024), 1000, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(1024), 1000, drv.allocs[b].id, 0, REGCACHE_MEM_DEVICE);
    assert_int_equal(query(drv_addr(0), 1000, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(0), 1000, drv.allocs[a].id, 0, REGCACHE_MEM_DEVICE);
    assert_int_equal(info.flags, 0);
}

static void managed_is_reported_as_managed(void **state)
{
    (void)state;
    int i = drv_managed(0, MIB);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(0), 2 * MIB, &info), REGCACHE_OK);
    assert_int_equal(info.type, REGCACHE_MEM_MANAGED);
    assert_int_equal(info.buffer_id, drv.allocs[i].id);
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 0);
}

static void host_memory_is_its_allocation_or_the_request(void **state)
{
    (void)state;
    int pinned = drv_pinned_host(0, MIB);
    char *heap = malloc(100);
    struct regcache_mem_info info;
    /* Pinned host memory: the driver knows it, type HOST, its allocation
     * and the buffer id that the tag check compares. */
    assert_int_equal(query(drv_addr(4096), 100, &info), REGCACHE_OK);
    assert_info(&info, drv_addr(0), MIB, drv.allocs[pinned].id, REGCACHE_DEVICE_HOST,
                REGCACHE_MEM_HOST);
    /* malloc memory: zeros from the driver; the request is all it knows. */
    assert_int_equal(query((uintptr_t)heap, 100, &info), REGCACHE_OK);
    assert_info(&info, (uintptr_t)heap, 100, 0, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    /* ... or INVALID_VALUE, as the single-attribute call reports it. */
    drv.unknown_invalid = 1;
    assert_int_equal(query((uintptr_t)heap, 100, &info), REGCACHE_OK);
    assert_info(&info, (uintptr_t)heap, 100, 0, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 0);
    free(heap);
}

static void freed_memory_is_host_to_the_query(void **state)
{
    (void)state;
    int i = drv_legacy(0, MIB);
    drv_free(i);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(0), 4096, &info), REGCACHE_OK);
    assert_int_equal(info.type, REGCACHE_MEM_HOST);
    assert_int_equal(info.buffer_id, 0);
}

static void sync_memops_set_only_when_unset(void **state)
{
    (void)state;
    int i = drv_legacy(0, MIB);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(0), 4096, &info), REGCACHE_OK);
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 1);
    assert_int_equal(drv.allocs[i].sync_memops, 1);
    assert_int_equal(query(drv_addr(4096), 4096, &info), REGCACHE_OK);
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 1);
    /* A new allocation at the same address starts unset again. */
    drv_free(i);
    drv_realloc(i);
    assert_int_equal(query(drv_addr(0), 4096, &info), REGCACHE_OK);
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 2);
}

static void sync_memops_refused_by_vmm_is_not_an_error(void **state)
{
    (void)state;
    drv_vmm(0, 4 * MIB, 0, 2 * MIB);
    struct regcache_mem_info info;
    assert_int_equal(query(drv_addr(0), 4096, &info), REGCACHE_OK);
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 1);
    assert_int_equal(info.type, REGCACHE_MEM_DEVICE);
}

/* The errors the driver documents, and one it does not. */
static const CUresult errors[] = { CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED,
                                   CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_SUPPORTED,
                                   (CUresult)12345 };

static const char *expected_name(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_INVALID_VALUE:
        return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NOT_INITIALIZED:
        return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED:
        return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_NOT_SUPPORTED:
        return "CUDA_ERROR_NOT_SUPPORTED";
    default:
        return "unknown CUDA error";
    }
}

static void assert_cuda_error(int status, const char *call, CUresult r)
{
    assert_int_equal(status, REGCACHE_ERR_CUDA);
    assert_non_null(strstr(regcache_last_error(), call));
    assert_non_null(strstr(regcache_last_error(), expected_name(r)));
}

/* Query a legacy allocation with each error injected into `call`: the
 * query succeeds on `accepted` (the memory then has type `accepted_type`,
 * where that is not -1), and fails on every other error with a message
 * naming `what`. */
static void query_with_each_error(enum drv_call call, CUresult accepted, int accepted_type,
                                  const char *what)
{
    drv_legacy(0, MIB);
    struct regcache_mem_info info;
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
        drv.fail[call] = errors[e];
        int status = query(drv_addr(0), 4096, &info);
        if (errors[e] != accepted) {
            assert_cuda_error(status, what, errors[e]);
            continue;
        }
        assert_int_equal(status, REGCACHE_OK);
        if (accepted_type != -1)
            assert_int_equal(info.type, accepted_type);
    }
}

static void query_errors(void **state)
{
    (void)state;
    /* INVALID_VALUE: the pointer is not CUDA memory. */
    query_with_each_error(FC_GET_ATTRIBUTES, CUDA_ERROR_INVALID_VALUE, REGCACHE_MEM_HOST,
                          "cuPointerGetAttributes");
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 0);
}

static void sync_memops_errors(void **state)
{
    (void)state;
    query_with_each_error(FC_SET_ATTRIBUTE, CUDA_ERROR_NOT_SUPPORTED, -1, "SYNC_MEMOPS");
}

/* The buffer id at addr by the tag check, or what it returned. */
static int read_tag(uintptr_t addr, uint64_t *id)
{
    struct regcache_mem_info info = { .buffer_id = 77 };
    int status = mem.read_tag(mem.ctx, (const void *)addr, 1, &info);
    *id = info.buffer_id;
    return status;
}

static void read_tag_reads_the_buffer_id(void **state)
{
    (void)state;
    int i = drv_pool(0, MIB);
    uint64_t id = 0;
    assert_int_equal(read_tag(drv_addr(4096), &id), REGCACHE_OK);
    assert_int_equal(id, drv.allocs[i].id);
    assert_int_equal(drv.calls[FC_GET_ATTRIBUTE], 1);
    assert_int_equal(drv.calls[FC_GET_ATTRIBUTES], 0);
    drv_free(i);
    drv_realloc(i);
    assert_int_equal(read_tag(drv_addr(4096), &id), REGCACHE_OK);
    assert_int_equal(id, drv.allocs[i].id);
}

static void read_tag_on_freed_memory_is_not_gpu(void **state)
{
    (void)state;
    int i = drv_legacy(0, MIB);
    drv_free(i);
    uint64_t id;
    assert_int_equal(read_tag(drv_addr(0), &id), REGCACHE_ERR_NOT_GPU);
}

static void read_tag_errors(void **state)
{
    (void)state;
    drv_legacy(0, MIB);
    uint64_t id;
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
        drv.fail[FC_GET_ATTRIBUTE] = errors[e];
        int status = read_tag(drv_addr(0), &id);
        if (errors[e] == CUDA_ERROR_INVALID_VALUE)
            assert_int_equal(status, REGCACHE_ERR_NOT_GPU);
        else
            assert_cuda_error(status, "BUFFER_ID", errors[e]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(legacy_is_the_whole_allocation),
        T(pool_is_the_single_allocation_not_the_pool_chunk),
        T(vmm_is_the_mapping_not_the_reservation),
        T(vmm_without_the_rdma_flag_is_refused),
        T(mapping_narrows_only_vmm_memory),
        T(packed_small_allocations_are_separate),
        T(managed_is_reported_as_managed),
        T(host_memory_is_its_allocation_or_the_request),
        T(freed_memory_is_host_to_the_query),
        T(sync_memops_set_only_when_unset),
        T(sync_memops_refused_by_vmm_is_not_an_error),
        T(query_errors),
        T(sync_memops_errors),
        T(read_tag_reads_the_buffer_id),
        T(read_tag_on_freed_memory_is_not_gpu),
        T(read_tag_errors),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
