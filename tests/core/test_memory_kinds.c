/* Memory other than device memory: managed memory is refused, host memory
 * unknown to the driver is refused unless host_memory is on (then it is
 * registered a page at a time, without a buffer id to check), and pinned
 * host memory, which has a buffer id, is tag checked like device memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_fixture.h"

static void managed_and_host_memory(void **state)
{
    struct fx *f = *state;
    fake_alloc(&f->fb, FX_ALLOC(0), MiB, 0, REGCACHE_MEM_MANAGED);
    fx_create(f);
    fx_get_fails(f, FX_ALLOC(0), 10, REGCACHE_ERR_MANAGED);
    assert_string_not_equal(regcache_last_error(), "");
    fx_get_fails(f, FX_ALLOC(5), 10, REGCACHE_ERR_NOT_GPU);
    assert_int_equal(atomic_load(&f->fb.regs), 0);
}

static void host_memory_when_enabled(void **state)
{
    struct fx *f = *state;
    f->p.host_memory = 1;
    fx_create(f);
    long page = sysconf(_SC_PAGESIZE);
    regcache_entry_t *e = fx_get(f, FX_ALLOC(5) + 100, 10);
    uintptr_t start;
    size_t len;
    regcache_entry_range(e, &start, &len);
    assert_int_equal(start, FX_ALLOC(5));
    assert_int_equal(len, (size_t)page);
    assert_int_equal(fx_handle(e)->device, REGCACHE_DEVICE_HOST);
    regcache_put(f->c, e);
    /* No buffer id: a hit needs no query, and only invalidation drops it. */
    long queries = atomic_load(&f->fb.queries);
    fx_use(f, FX_ALLOC(5) + 200, 10);
    assert_int_equal(atomic_load(&f->fb.queries), queries);
    assert_int_equal(regcache_invalidate(f->c, (void *)FX_ALLOC(5), 1), REGCACHE_OK);
    assert_int_equal(fx_stats(f).entries, 0);
    assert_int_equal(atomic_load(&f->fb.live), 0);
}

static void pinned_host_memory_is_tag_checked(void **state)
{
    struct fx *f = *state;
    /* cuMemAllocHost memory: host memory that has a buffer id. */
    fake_alloc(&f->fb, FX_ALLOC(0), MiB, REGCACHE_DEVICE_HOST, REGCACHE_MEM_HOST);
    f->p.host_memory = 1;
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    fx_use(f, FX_ALLOC(0) + 100, 10);
    fx_use(f, FX_ALLOC(0) + 100, 10);
    assert_int_equal(fx_stats(f).hits, 1);
    uint64_t id = fake_realloc(&f->fb, FX_ALLOC(0));
    regcache_entry_t *e = fx_get(f, FX_ALLOC(0) + 100, 10);
    assert_int_equal(fx_handle(e)->device, REGCACHE_DEVICE_HOST);
    assert_int_equal(fake_id_at(&f->fb, FX_ALLOC(0)), id);
    fx_assert_stats(f, FX_STAT(invalidations_tag, 1), FX_STAT(registrations, 2), NULL);
    assert_int_equal(atomic_load(&f->fb.live), 1);
    regcache_put(f->c, e);
}

/* A request from pageable host memory into a GPU allocation right after it
 * (how eager registration first asks for a new allocation, a byte early)
 * is no one registration: refused, nothing registered. */
static void pageable_into_device_memory_is_refused(void **state)
{
    struct fx *f = *state;
    fake_alloc(&f->fb, FX_ALLOC(1), MiB, 0, REGCACHE_MEM_DEVICE);
    f->p.host_memory = 1;
    fx_create(f);
    fx_get_fails(f, FX_ALLOC(1) - 1, MiB + 1, REGCACHE_ERR_RANGE);
    assert_non_null(strstr(regcache_last_error(), "into CUDA memory"));
    assert_int_equal(atomic_load(&f->fb.regs), 0);
    fx_use(f, FX_ALLOC(1), MiB);
    fx_use(f, FX_ALLOC(1) - 100, 100);
    fx_assert_stats(f, FX_STAT(entries, 2), NULL);
}

FX_MAIN(managed_and_host_memory, host_memory_when_enabled, pinned_host_memory_is_tag_checked,
        pageable_into_device_memory_is_refused)
