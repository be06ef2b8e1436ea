/* A cache over the fake CUDA driver (see drv_cache.h). */
#include "drv_cache.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "fake_driver.h"

int drv_regs, drv_deregs;

static int counting_reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)arg, (void)rail;
    struct reg_handle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return ENOMEM;
    h->start = (uintptr_t)addr;
    h->len = len;
    h->device = device;
    struct drv_alloc *a = drv_alloc_at(h->start);
    if (a != NULL) {
        h->buffer_id = a->id;
        h->sync_memops = a->sync_memops;
    }
    drv_regs++;
    *handle = h;
    return 0;
}

static void counting_dereg(void *arg, void *handle)
{
    (void)arg;
    free(handle);
    drv_deregs++;
}

static const struct regcache_backend counting = {
    .reg = counting_reg, .dereg = counting_dereg, .arg = NULL, .query = NULL
};

regcache_t *drv_cache_create(int host_memory)
{
    struct regcache_params p;
    regcache_t *c = NULL;
    if (regcache_params_init(&p) != REGCACHE_OK)
        abort();
    p.backend = &counting;
    p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    p.host_memory = host_memory;
    if (regcache_create(&p, &c) != REGCACHE_OK)
        abort();
    return c;
}

regcache_t *drv_cache;

int drv_cache_setup(void **state)
{
    (void)state;
    drv_install(); /* before create: the cache picks its memory then */
    drv_regs = drv_deregs = 0;
    drv_cache = drv_cache_create(0);
    return 0;
}

int drv_cache_teardown(void **state)
{
    (void)state;
    regcache_destroy(drv_cache);
    drv_cache = NULL;
    assert_int_equal(drv_regs, drv_deregs);
    drv_uninstall();
    return 0;
}

void drv_cache_reopen(int host_memory)
{
    regcache_destroy(drv_cache);
    assert_int_equal(drv_regs, drv_deregs);
    drv_cache = drv_cache_create(host_memory);
}

const struct reg_handle *drv_get(uintptr_t addr, size_t len, regcache_entry_t **e)
{
    assert_int_equal(regcache_get(drv_cache, (const void *)addr, len, e), REGCACHE_OK);
    return regcache_entry_handle(*e);
}

struct regcache_stats drv_stats(void)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(drv_cache, &s), REGCACHE_OK);
    return s;
}
