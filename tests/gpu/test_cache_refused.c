/* The GPU cache: refused memory, SYNC_MEMOPS. */
#include "gpu_cache.h"

/* ------------------------------------------------------------------------ */
/* Refused memory, SYNC_MEMOPS                                               */
/* ------------------------------------------------------------------------ */

void managed_and_host_memory_are_refused(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr m;
    void *pinned;
    char *heap = malloc(MIB);
    CK(cu.cuMemAllocManaged(&m, MIB, CU_MEM_ATTACH_GLOBAL));
    CK(cu.cuMemAllocHost(&pinned, MIB));
    assert_int_equal(get_status(c, m, 4096), REGCACHE_ERR_MANAGED);
    assert_int_equal(get_status(c, (uintptr_t)pinned, 4096), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(get_status(c, (uintptr_t)heap, 4096), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(atomic_load(&regs), 0);
    regcache_destroy(c);
    CK(cu.cuMemFree(m));
    CK(cu.cuMemFreeHost(pinned));
    free(heap);
}

void sync_memops_is_set_before_the_first_registration(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    CK(cu.cuMemAlloc(&p, MIB));
    assert_int_equal(sync_memops_of(p), 0);
    regcache_entry_t *e;
    struct handle *h = get_checked(c, p, MIB, &e);
    assert_int_equal(h->sync, 1); /* already set when reg ran */
    regcache_put(c, e);
    assert_int_equal(sync_memops_of(p), 1);
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
}
