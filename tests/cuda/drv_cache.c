/* A cache over the fake CUDA driver (see drv_cache.h). */
#include "drv_cache.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "fake_driver.h"

static void record_driver_view(void *arg, struct fake_handle *h)
{
    (void)arg;
    const struct drv_alloc *a = drv_alloc_at(h->start);
    h->id = a ? a->id : 0;
    h->sync_memops = a ? a->sync_memops : 0;
}

int drv_cache_setup(void **state)
{
    int rc = fx_setup(state);
    if (rc)
        return rc;
    struct fx *f = *state;
    drv_install(); /* before create: the cache picks its memory then */
    f->fb.ops.query = NULL;
    f->fb.on_handle = record_driver_view;
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    fx_create(f);
    return 0;
}

int drv_cache_teardown(void **state)
{
    int rc = fx_teardown(state);
    drv_uninstall();
    return rc;
}

regcache_t *drv_cache_create(struct fx *f, int host_memory)
{
    struct regcache_params p = f->p;
    regcache_t *c = NULL;
    p.host_memory = host_memory;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    return c;
}

void drv_cache_reopen(struct fx *f, int host_memory)
{
    regcache_destroy(f->c);
    assert_int_equal(atomic_load(&f->fb.regs), atomic_load(&f->fb.deregs));
    f->c = drv_cache_create(f, host_memory);
}

const struct fake_handle *drv_get(struct fx *f, uintptr_t addr, size_t len, regcache_entry_t **e)
{
    *e = fx_get(f, addr, len);
    return fx_handle(*e);
}
