/* The GPU cache: reallocation at the same address. */
#include "gpu_cache.h"

/* ------------------------------------------------------------------------ */
/* Reallocation at the same address                                          */
/* ------------------------------------------------------------------------ */

static size_t legacy_size;

static uintptr_t legacy_replace(uintptr_t addr)
{
    CUdeviceptr p;
    CK(cu.cuMemFree((CUdeviceptr)addr));
    CK(cu.cuMemAlloc(&p, legacy_size));
    return p;
}

void legacy_realloc_is_reregistered(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    legacy_size = MIB;
    CK(cu.cuMemAlloc(&p, legacy_size));
    expect_reregistration(c, p, 4096, 8192, legacy_replace, "cuMemAlloc");
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
}

/* The same, in a cache whose index has outgrown L1: its hits on the
 * driver query the tag before they look (hit_path.c), and compare the tag
 * queried then. */
void legacy_realloc_is_reregistered_past_l1(void **state)
{
    (void)state;
    const size_t region = 64 << 10, pages = rc_page_index_l1_slots();
    regcache_t *c = new_cache(0);
    CUdeviceptr many, p;
    CK(cu.cuMemAlloc(&many, (pages + 1) * region));
    legacy_size = MIB;
    CK(cu.cuMemAlloc(&p, legacy_size));
    for (size_t i = 0; i < pages; i++) {
        regcache_entry_t *e;
        get_checked(c, many + i * region, 4096, &e);
        regcache_put(c, e);
    }
    assert_true(rc_page_index_large(&c->index));
    expect_reregistration(c, p, 4096, 8192, legacy_replace, "cuMemAlloc, index past L1");
    regcache_destroy(c);
    CK(cu.cuMemFree(p));
    CK(cu.cuMemFree(many));
}

static uintptr_t pool_replace(uintptr_t addr)
{
    CUdeviceptr p;
    CK(cu.cuMemFreeAsync((CUdeviceptr)addr, stream));
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuMemAllocAsync(&p, MIB, stream));
    CK(cu.cuStreamSynchronize(stream));
    return p;
}

void pool_reuse_is_reregistered(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr p;
    CK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CK(cu.cuMemAllocAsync(&p, MIB, stream));
    CK(cu.cuStreamSynchronize(stream));
    expect_reregistration(c, p, 0, MIB, pool_replace, "cuMemAllocAsync");
    regcache_destroy(c);
    CK(cu.cuMemFreeAsync(p, stream));
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuStreamDestroy(stream));
}

static regcache_t *vmm_cache;

static uintptr_t vmm_replace(uintptr_t addr)
{
    CK(cu.cuMemUnmap((CUdeviceptr)addr, vmm_size));
    /* Unmapped: nothing to register. */
    assert_int_equal(get_status(vmm_cache, addr, 4096), REGCACHE_ERR_NOT_GPU);
    vmm_map((CUdeviceptr)addr);
    return addr;
}

void vmm_remap_is_reregistered(void **state)
{
    (void)state;
    vmm_cache = new_cache(0);
    vmm_granularity();
    CUdeviceptr va;
    /* A reservation twice the mapping: the cache must take the mapping. */
    CK(cu.cuMemAddressReserve(&va, 2 * vmm_size, 0, 0, 0));
    CK(cu.cuMemCreate(&vmm_handle, vmm_size, &vmm_prop, 0));
    vmm_map(va);
    regcache_entry_t *e;
    get_checked(vmm_cache, va, vmm_size, &e);
    uintptr_t start;
    size_t len;
    regcache_entry_range(e, &start, &len);
    assert_int_equal(start, va);
    assert_int_equal(len, vmm_size);
    regcache_put(vmm_cache, e);
    expect_reregistration(vmm_cache, va, 0, vmm_size, vmm_replace, "VMM");
    regcache_destroy(vmm_cache);
    CK(cu.cuMemUnmap(va, vmm_size));
    CK(cu.cuMemRelease(vmm_handle));
    CK(cu.cuMemAddressFree(va, 2 * vmm_size));
}

/* Two 1000-byte allocations in one 64 KiB page: one entry each, each get
 * served by the registration of its own allocation. */
void packed_small_allocations_stay_apart(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CUdeviceptr a, b;
    CK(cu.cuMemAlloc(&a, 1000));
    CK(cu.cuMemAlloc(&b, 1000));
    printf("packed: %#jx and %#jx, ids %llu and %llu\n", (uintmax_t)a, (uintmax_t)b, buffer_id(a),
           buffer_id(b));
    assert_int_equal(a / 65536, b / 65536); /* the case under test */
    regcache_entry_t *ea, *eb, *e;
    struct handle *ha = get_checked(c, a, 1000, &ea);
    struct handle *hb = get_checked(c, b, 1000, &eb);
    assert_ptr_not_equal(ha, hb);
    assert_int_equal(ha->start, hb->start);
    assert_ptr_equal(get_checked(c, a + 500, 500, &e), ha);
    regcache_put(c, e);
    assert_ptr_equal(get_checked(c, b + 500, 500, &e), hb);
    regcache_put(c, e);
    /* Across the two: spans two allocations. */
    assert_int_equal(get_status(c, a + 500, 1000), REGCACHE_ERR_RANGE);
    regcache_put(c, ea);
    regcache_put(c, eb);
    assert_int_equal(atomic_load(&regs), 2);
    /* a freed and reallocated: b's entry untouched. */
    legacy_size = 1000;
    assert_int_equal(legacy_replace(a), a);
    assert_ptr_not_equal(get_checked(c, a, 1000, &e), ha);
    regcache_put(c, e);
    assert_ptr_equal(get_checked(c, b, 1000, &e), hb);
    regcache_put(c, e);
    assert_int_equal(atomic_load(&regs), 3);
    regcache_destroy(c);
    CK(cu.cuMemFree(a));
    CK(cu.cuMemFree(b));
}

/* Large allocations and pool allocations packed back to back are one entry
 * each, registered whole. */
void whole_allocations_of_every_size(void **state)
{
    (void)state;
    regcache_t *c = new_cache(0);
    CK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    static const size_t sizes[] = { 20 * MIB, 20 * MIB, 20 * MIB, 64 * MIB, 1024 * MIB };
    CUdeviceptr legacy[5], pool[5];
    for (int i = 0; i < 5; i++) {
        CK(cu.cuMemAlloc(&legacy[i], sizes[i]));
        CK(cu.cuMemAllocAsync(&pool[i], sizes[i], stream));
    }
    CK(cu.cuStreamSynchronize(stream));
    for (int i = 0; i < 5; i++) {
        CUdeviceptr kinds[2] = { legacy[i], pool[i] };
        for (int k = 0; k < 2; k++) {
            regcache_entry_t *e;
            get_checked(c, kinds[k], sizes[i], &e);
            uintptr_t start;
            size_t len;
            regcache_entry_range(e, &start, &len);
            assert_true(start <= kinds[k] && kinds[k] + sizes[i] <= start + len);
            assert_true(len < sizes[i] + 2 * 65536);
            regcache_put(c, e);
        }
    }
    assert_int_equal(atomic_load(&regs), 10);
    regcache_destroy(c);
    for (int i = 0; i < 5; i++) {
        CK(cu.cuMemFree(legacy[i]));
        CK(cu.cuMemFreeAsync(pool[i], stream));
    }
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuStreamDestroy(stream));
}
