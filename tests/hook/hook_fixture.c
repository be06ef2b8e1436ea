/* The hook tests' cache over the libcuda test double (see hook_fixture.h). */
#include "hook_fixture.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "fake_libcuda.h"

struct handle {
    uintptr_t start;
    size_t len;
};

static int reg(void *arg, void *addr, size_t len, int device, int rail, void **out)
{
    (void)arg, (void)device, (void)rail;
    struct handle *h = test_malloc(sizeof *h);
    *h = (struct handle){ (uintptr_t)addr, len };
    *out = h;
    return 0;
}

static void dereg(void *arg, void *handle)
{
    (void)arg;
    struct handle *h = handle;
    fakecuda_log_dereg(h->start, h->len);
    test_free(h);
}

static int query(void *arg, const void *addr, size_t len, struct regcache_mem_info *info)
{
    (void)arg, (void)len;
    int host;
    if (fakecuda_describe((uintptr_t)addr, &info->base, &info->size, &info->buffer_id,
                          &host) != 0)
        return REGCACHE_ERR_NOT_GPU;
    info->device = host ? REGCACHE_DEVICE_HOST : 0;
    info->type = host ? REGCACHE_MEM_HOST : REGCACHE_MEM_DEVICE;
    return REGCACHE_OK;
}

static const struct regcache_backend backend = { reg, dereg, NULL, query };

regcache_t *fixture_cache(void)
{
    fakecuda_reset();
    struct regcache_params p;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    p.backend = &backend;
    p.host_memory = 1;
    regcache_t *cache = NULL;
    assert_int_equal(regcache_create(&p, &cache), REGCACHE_OK);
    return cache;
}

void fixture_cache_range(regcache_t *cache, uintptr_t addr, size_t len)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get(cache, (const void *)addr, len, &e), REGCACHE_OK);
    regcache_put(cache, e);
}

uintptr_t fixture_cached_alloc(regcache_t *cache, int host)
{
    uintptr_t addr = fakecuda_alloc_unhooked(FIXTURE_SIZE, host);
    assert_true(addr != 0);
    fixture_cache_range(cache, addr, FIXTURE_SIZE);
    return addr;
}

static long find(int type, const char *fn, uintptr_t addr)
{
    const struct fakecuda_event *ev;
    size_t n = fakecuda_events(&ev);
    for (size_t i = 0; i < n; i++)
        if ((int)ev[i].type == type && ev[i].addr == addr &&
            (fn == NULL || strcmp(ev[i].fn, fn) == 0))
            return (long)i;
    return -1;
}

long fixture_dereg_at(uintptr_t addr)
{
    return find(FAKECUDA_DEREG, NULL, addr);
}

long fixture_call_of(const char *fn, uintptr_t addr)
{
    return find(FAKECUDA_CALL, fn, addr);
}

int fixture_dereg_was_live(long index)
{
    const struct fakecuda_event *ev;
    size_t n = fakecuda_events(&ev);
    return index >= 0 && (size_t)index < n && ev[index].live;
}

uint64_t fixture_notified(regcache_t *cache)
{
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(cache, &s), REGCACHE_OK);
    return s.invalidations_notify;
}
