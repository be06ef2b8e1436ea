/* A cache's budget on GPUs that NVML gives no BAR1 reading for (the fake
 * driver's bus ids exist on no machine): the GPU's memory less the reserve
 * binds, and the REGCACHE_STATS dump says where each device's budget came
 * from, unlimited included.  Each test uses a device of its own: a
 * device's budget is read once per process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capture_stderr.h"
#include "drv_cache.h"
#include "fake_driver.h"
#include "regcache.h"

#define MIB ((size_t)1 << 20)

static int setup(void **state)
{
    int rc = drv_cache_setup(state);
    drv.device_count = DRV_MAX_DEVICES;
    setenv("REGCACHE_STATS", "1", 1);
    return rc;
}

static int teardown(void **state)
{
    unsetenv("REGCACHE_STATS");
    return drv_cache_teardown(state);
}

/* A get and put of `n` allocations of `size` bytes of `device`. */
static void use_allocations(regcache_t *c, int device, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        drv.allocs[drv_legacy((size_t)i * size, size)].device = device;
        regcache_entry_t *e;
        assert_int_equal(regcache_get(c, (const void *)drv_addr((size_t)i * size), 4096, &e),
                         REGCACHE_OK);
        regcache_put(c, e);
    }
}

static void dump_says(regcache_t *c, const char *line)
{
    char out[4096];
    destroy_capturing_stderr(c, out, sizeof out);
    if (!strstr(out, line))
        fail_msg("the dump lacks \"%s\":\n%s", line, out);
}

/* 64 MiB of GPU memory less the 32 MiB reserve: five 8 MiB allocations
 * leave four cached. */
static void device_memory_binds(void **state)
{
    struct fx *f = *state;
    drv.device_memory = 64 * MIB;
    regcache_t *c = drv_cache_create(f, 0);
    use_allocations(c, 1, 5, 8 * MIB);
    struct regcache_stats s;
    assert_int_equal(regcache_get_device_stats(c, 1, &s), REGCACHE_OK);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.bytes, 32 * MIB);
    dump_says(c, "device 1: budget 33554432 bytes from device-memory\n");
}

static void max_bytes_is_named(void **state)
{
    struct fx *f = *state;
    f->p.max_bytes = 4 * MIB;
    regcache_t *c = drv_cache_create(f, 0);
    use_allocations(c, 2, 1, MIB);
    dump_says(c, "device 2: budget 4194304 bytes from max_bytes\n");
}

/* Nothing tells the GPU's size: unlimited, but never silently. */
static void unlimited_is_said(void **state)
{
    struct fx *f = *state;
    drv.device_memory = 0;
    regcache_t *c = drv_cache_create(f, 0);
    use_allocations(c, 3, 1, MIB);
    dump_says(c, "device 3: budget unlimited: neither NVML nor the CUDA driver told this GPU's "
                 "BAR1 or memory size\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(device_memory_binds, setup, teardown),
        cmocka_unit_test_setup_teardown(max_bytes_is_named, setup, teardown),
        cmocka_unit_test_setup_teardown(unlimited_is_said, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
