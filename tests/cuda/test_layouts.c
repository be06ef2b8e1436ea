/* Over the fake CUDA driver: VMM mappings side by
 * side registered as one range (and VMM memory without the GPUDirect RDMA
 * flag refused before the NIC is asked), and pinned host allocations the
 * driver packs into one page, each served by an entry of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "drv_cache.h"
#include "fake_driver.h"
#include "regcache.h"

#define MIB ((size_t)1 << 20)

static void vmm_without_the_rdma_flag_registers_nothing(void **state)
{
    struct fx *f = *state;
    int a = drv_vmm(0, 4 * MIB, 0, 2 * MIB);
    drv_set_rdma_capable(a, 0);
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(4096), 4096, &e),
                     REGCACHE_ERR_NOT_RDMA_CAPABLE);
    assert_null(e);
    assert_non_null(strstr(regcache_last_error(), "gpuDirectRDMACapable"));
    assert_int_equal(atomic_load(&f->fb.regs), 0);
    fx_assert_stats(f, FX_STAT(registrations, 0), FX_STAT(entries, 0), NULL);
}

static void vmm_mappings_side_by_side_are_one_registration(void **state)
{
    struct fx *f = *state;
    /* 8 MiB reserved, two 2 MiB mappings of different handles. */
    int a = drv_vmm(0, 8 * MIB, 0, 2 * MIB);
    int b = drv_vmm(0, 8 * MIB, 2 * MIB, 2 * MIB);
    regcache_entry_t *e;
    const struct fake_handle *h = drv_get(f, drv_addr(2 * MIB - 4096), 8192, &e);
    assert_int_equal(h->start, drv_addr(0));
    assert_int_equal(h->len, 4 * MIB);
    assert_int_equal(h->id, drv.allocs[a].id);
    regcache_put(f->c, e);
    const size_t inside[] = { 0, MIB, 2 * MIB, 3 * MIB, 4 * MIB - 4096 };
    for (size_t i = 0; i < sizeof(inside) / sizeof(inside[0]); i++) {
        assert_ptr_equal(drv_get(f, drv_addr(inside[i]), 4096, &e), h);
        regcache_put(f->c, e);
    }
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    assert_int_equal(fx_stats(f).hits, 5);
    /* Remapping the second handle is caught by the next hit's tag check:
     * the old registration goes, the new mapping is registered alone. */
    drv_free(b);
    drv_realloc(b);
    h = drv_get(f, drv_addr(3 * MIB), 4096, &e);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(h->start, drv_addr(2 * MIB));
    assert_int_equal(h->len, 2 * MIB);
    assert_int_equal(h->id, drv.allocs[b].id);
    regcache_put(f->c, e);
    assert_int_equal(fx_stats(f).invalidations_tag, 1);
}

/* Two 256-byte pinned allocations 0x200 apart in one page. */
#define PACKED_A 0
#define PACKED_B 0x200

static void packed_pinned_host_allocations(struct fx *f, int *a, int *b)
{
    *a = drv_pinned_host(PACKED_A, 256);
    *b = drv_pinned_host(PACKED_B, 256);
    drv_cache_reopen(f, 1);
}

static const struct fake_handle *use(struct fx *f, size_t offset)
{
    regcache_entry_t *e;
    const struct fake_handle *h = drv_get(f, drv_addr(offset), 256, &e);
    regcache_put(f->c, e);
    return h;
}

static void packed_pinned_host_memory_has_an_entry_each(void **state)
{
    struct fx *f = *state;
    int a, b;
    packed_pinned_host_allocations(f, &a, &b);
    (void)b;
    const struct fake_handle *ha = use(f, PACKED_A), *hb = use(f, PACKED_B);
    assert_ptr_not_equal(ha, hb);
    assert_int_equal(ha->start, hb->start); /* the same page */
    assert_int_equal(ha->device, REGCACHE_DEVICE_HOST);
    /* (reg records the id at the page's start: A's, for both) */
    assert_int_equal(ha->id, drv.allocs[a].id);
    for (int round = 1; round < 10; round++) {
        assert_ptr_equal(use(f, PACKED_A), ha);
        assert_ptr_equal(use(f, PACKED_B), hb);
    }
    fx_assert_stats(f, FX_STAT(registrations, 2), FX_STAT(hits, 18), FX_STAT(entries, 2), NULL);
}

static void freeing_one_packed_allocation_spares_the_other(void **state)
{
    struct fx *f = *state;
    int a, b;
    packed_pinned_host_allocations(f, &a, &b);
    use(f, PACKED_A);
    const struct fake_handle *hb = use(f, PACKED_B);
    /* Its 256 bytes reported freed: its entry goes, B's stays. */
    regcache_notify_free((const void *)drv_addr(PACKED_A), 256);
    fx_assert_stats(f, FX_STAT(invalidations_notify, 1), FX_STAT(entries, 1), NULL);
    assert_ptr_equal(use(f, PACKED_B), hb);

    /* Freed behind the cache's back and reallocated: B's tag checks still
     * pass, A's new memory gets a registration of its own. */
    use(f, PACKED_A);
    drv_free(a);
    assert_ptr_equal(use(f, PACKED_B), hb);
    drv_realloc(a);
    const struct fake_handle *ha = use(f, PACKED_A);
    assert_int_equal(ha->id, drv.allocs[a].id);
    assert_ptr_equal(use(f, PACKED_B), hb);
    fx_assert_stats(f, FX_STAT(invalidations_tag, 1), FX_STAT(entries, 2), NULL);
    assert_int_equal(atomic_load(&f->fb.regs), 4);
    assert_int_equal(atomic_load(&f->fb.deregs), 2);
}

int main(void)
{
    return FX_RUN(drv_cache_setup, drv_cache_teardown, vmm_without_the_rdma_flag_registers_nothing,
                  vmm_mappings_side_by_side_are_one_registration,
                  packed_pinned_host_memory_has_an_entry_each,
                  freeing_one_packed_allocation_spares_the_other);
}
