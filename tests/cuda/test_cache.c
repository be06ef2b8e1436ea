/* The cache through its public API, learning about memory from the (fake)
 * CUDA driver: a custom backend without a query callback, so every miss and
 * tag check goes through rc_cuda_query(). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"
#include "drv_cache.h"
#include "fake_driver.h"
#include "regcache.h"

#define MIB ((size_t)1 << 20)

static void registers_after_setting_sync_memops(void **state)
{
    struct fx *f = *state;
    int i = drv_legacy(0, MIB);
    regcache_entry_t *e;
    const struct fake_handle *h = drv_get(f, drv_addr(4096), 4096, &e);
    assert_int_equal(h->id, drv.allocs[i].id);
    assert_int_equal(h->sync_memops, 1);
    assert_int_equal(h->device, 0);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

static void hit_checks_the_tag_once(void **state)
{
    struct fx *f = *state;
    drv_pool(0, MIB);
    regcache_entry_t *e;
    drv_get(f, drv_addr(0), MIB, &e);
    regcache_put(f->c, e);
    unsigned int queries = drv.calls[FC_GET_ATTRIBUTES];
    drv_get(f, drv_addr(4096), 4096, &e);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
    assert_int_equal(drv.calls[FC_GET_ATTRIBUTE], 1);
    assert_int_equal(drv.calls[FC_GET_ATTRIBUTES], queries);
    assert_int_equal(fx_stats(f).hits, 1);
}

static void reallocated_memory_is_registered_again(void **state)
{
    struct fx *f = *state;
    int i = drv_legacy(0, MIB);
    regcache_entry_t *e;
    drv_get(f, drv_addr(0), 4096, &e);
    regcache_put(f->c, e);
    unsigned long long old_id = drv.allocs[i].id;
    drv_free(i);
    drv_realloc(i); /* same address, new buffer id */
    const struct fake_handle *h = drv_get(f, drv_addr(0), 4096, &e);
    assert_int_not_equal(h->id, old_id);
    assert_int_equal(h->id, drv.allocs[i].id);
    assert_int_equal(h->sync_memops, 1);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
    assert_int_equal(fx_stats(f).invalidations_tag, 1);
}

static void freed_memory_on_a_hit_is_not_gpu(void **state)
{
    struct fx *f = *state;
    int i = drv_pool(0, MIB);
    regcache_entry_t *e;
    drv_get(f, drv_addr(0), MIB, &e);
    regcache_put(f->c, e);
    drv_free(i);
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(0), MIB, &e), REGCACHE_ERR_NOT_GPU);
    assert_null(e);
    fx_assert_stats(f, FX_STAT(invalidations_tag, 1), FX_STAT(entries, 0), NULL);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
}

static void managed_memory_is_refused(void **state)
{
    struct fx *f = *state;
    drv_managed(0, MIB);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(0), 4096, &e), REGCACHE_ERR_MANAGED);
    assert_null(e);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

static void host_memory_is_refused_unless_allowed(void **state)
{
    struct fx *f = *state;
    drv_pinned_host(0, MIB);
    char *heap = malloc(4096);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(f->c, heap, 100, &e), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(0), 100, &e), REGCACHE_ERR_NOT_GPU);
    assert_int_equal(atomic_load(&f->fb.regs), 0);

    regcache_t *host = drv_cache_create(f, 1);
    assert_int_equal(regcache_get(host, heap, 100, &e), REGCACHE_OK);
    const struct fake_handle *h = regcache_entry_handle(e);
    assert_int_equal(h->device, REGCACHE_DEVICE_HOST);
    assert_true(h->start <= (uintptr_t)heap && (uintptr_t)heap + 100 <= h->start + h->len);
    regcache_put(host, e);
    regcache_destroy(host);
    free(heap);
    assert_int_equal(drv.calls[FC_SET_ATTRIBUTE], 0);
}

static void range_past_the_allocation_is_refused(void **state)
{
    struct fx *f = *state;
    drv_legacy(0, MIB);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(MIB - 4096), 8192, &e),
                     REGCACHE_ERR_RANGE);
    assert_non_null(strstr(regcache_last_error(), "past the end"));
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

/* Two allocations in one page: one registration of the page each (the
 * backend cannot tell them apart, the entries can). */
static void packed_allocations_each_get_their_own_entry(void **state)
{
    struct fx *f = *state;
    int a = drv_legacy(0, 1000);
    drv_legacy(1024, 1000);
    regcache_entry_t *ea, *eb, *again;
    const struct fake_handle *ha = drv_get(f, drv_addr(0), 1000, &ea);
    const struct fake_handle *hb = drv_get(f, drv_addr(1024), 1000, &eb);
    assert_ptr_not_equal(ha, hb);
    assert_int_equal(ha->start, hb->start);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    /* Each keeps serving its own allocation. */
    assert_ptr_equal(drv_get(f, drv_addr(0), 10, &again), ha);
    regcache_put(f->c, again);
    assert_ptr_equal(drv_get(f, drv_addr(1024 + 10), 10, &again), hb);
    regcache_put(f->c, again);
    regcache_put(f->c, ea);
    regcache_put(f->c, eb);
    /* Freeing one spares the other. */
    drv_free(a);
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(0), 10, &again),
                     REGCACHE_ERR_NOT_GPU);
    assert_ptr_equal(drv_get(f, drv_addr(1024), 1000, &again), hb);
    regcache_put(f->c, again);
    assert_int_equal(atomic_load(&f->fb.regs), 2);
    assert_int_equal(atomic_load(&f->fb.deregs), 1);
}

static void driver_errors_on_a_miss_are_cuda_errors(void **state)
{
    struct fx *f = *state;
    drv_legacy(0, MIB);
    regcache_entry_t *e;
    drv.fail[FC_GET_ATTRIBUTES] = CUDA_ERROR_DEINITIALIZED;
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(0), 4096, &e), REGCACHE_ERR_CUDA);
    assert_non_null(strstr(regcache_last_error(), "CUDA_ERROR_DEINITIALIZED"));
    drv.fail[FC_GET_ATTRIBUTES] = CUDA_SUCCESS;
    drv.fail[FC_SET_ATTRIBUTE] = CUDA_ERROR_NOT_INITIALIZED;
    assert_int_equal(regcache_get(f->c, (const void *)drv_addr(0), 4096, &e), REGCACHE_ERR_CUDA);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

/* Behind the driver's tag query a hit hides even an L1 miss, so that it
 * asks for its slot's line before the query (hit_path.c) once the index
 * lists L1's worth of pages, where a backend's query waits for 16384.  A
 * cache that also takes host memory never queries first: its index keeps
 * the default mark. */
static void driver_tag_checks_query_first_once_past_l1(void **state)
{
    struct fx *f = *state;
    const size_t region = 64 << 10, pages = rc_page_index_l1_slots();
    assert_true(pages * region <= DRV_ARENA_SIZE);
    assert_true(pages < RC_INDEX_LARGE);
    drv_legacy(0, pages * region);
    regcache_t *mixed = drv_cache_create(f, 1);
    for (size_t i = 0; i < pages; i++) {
        assert_false(rc_page_index_large(&f->c->index));
        regcache_entry_t *e;
        drv_get(f, drv_addr(i * region), 4096, &e);
        regcache_put(f->c, e);
        assert_int_equal(regcache_get(mixed, (const void *)drv_addr(i * region), 4096, &e),
                         REGCACHE_OK);
        regcache_put(mixed, e);
    }
    assert_true(rc_page_index_large(&f->c->index));
    assert_false(rc_page_index_large(&mixed->index));
    regcache_destroy(mixed);
}

int main(void)
{
    return FX_RUN(drv_cache_setup, drv_cache_teardown, registers_after_setting_sync_memops,
                  hit_checks_the_tag_once, reallocated_memory_is_registered_again,
                  freed_memory_on_a_hit_is_not_gpu, managed_memory_is_refused,
                  host_memory_is_refused_unless_allowed, range_past_the_allocation_is_refused,
                  packed_allocations_each_get_their_own_entry,
                  driver_errors_on_a_miss_are_cuda_errors,
                  driver_tag_checks_query_first_once_past_l1);
}
