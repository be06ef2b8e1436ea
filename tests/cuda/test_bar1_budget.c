/* The BAR1 budget: the reserve rule, and the per-device reading from each
 * source in turn (a configured size, NVML's BAR1, the GPU's memory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bar1_budget.h"
#include "fake_driver.h"
#include "nvml_seam.h"

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

static void small_bar1_keeps_32_mib(void **state)
{
    (void)state;
    /* 10% of 256 MiB is under the 32 MiB floor. */
    assert_int_equal(rc_bar1_budget_rule(256 * MIB, 250 * MIB), 218 * MIB);
    assert_int_equal(rc_bar1_budget_rule(320 * MIB, 320 * MIB), 288 * MIB);
}

static void large_bar1_keeps_a_tenth(void **state)
{
    (void)state;
    assert_int_equal(rc_bar1_budget_rule(256 * GIB, 255 * GIB), 255 * GIB - 256 * GIB / 10);
    assert_int_equal(rc_bar1_budget_rule(1000 * MIB, 900 * MIB), 800 * MIB);
}

static void reserve_above_free_keeps_nothing_unused(void **state)
{
    (void)state;
    /* Never 0: that would read as "unlimited". */
    assert_int_equal(rc_bar1_budget_rule(256 * MIB, 32 * MIB), 1);
    assert_int_equal(rc_bar1_budget_rule(256 * MIB, 32 * MIB + 1), 1);
    assert_int_equal(rc_bar1_budget_rule(256 * MIB, 10 * MIB), 1);
    assert_int_equal(rc_bar1_budget_rule(256 * GIB, 0), 1);
    assert_int_equal(rc_bar1_budget_rule(0, 0), 1);
}

/* A fake NVML: each fake GPU (found by the fake driver's bus ids) reports
 * the BAR1 in nvml_bar1[device], or nvml_status[device] when not 0. */
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
static int nvml_init_status;
static int nvml_status[DRV_MAX_DEVICES];
static struct rc_nvml_bar1 nvml_bar1[DRV_MAX_DEVICES];
static unsigned nvml_inits, nvml_shutdowns;

static int nvml_init(void)
{
    nvml_inits++;
    return nvml_init_status;
}

static int nvml_shutdown(void)
{
    nvml_shutdowns++;
    return 0;
}

static int nvml_by_bus_id(const char *bus_id, void **device)
{
    unsigned slot;
    if (sscanf(bus_id, "00ff:fe:%x.7", &slot) != 1 || 0x1f - slot >= DRV_MAX_DEVICES)
        return NVML_ERROR_NOT_FOUND;
    *device = &nvml_bar1[0x1f - slot];
    return 0;
}

static int nvml_get_bar1(void *device, struct rc_nvml_bar1 *bar1)
{
    int i = (int)((struct rc_nvml_bar1 *)device - nvml_bar1);
    if (nvml_status[i])
        return nvml_status[i];
    *bar1 = nvml_bar1[i];
    return 0;
}

static const struct rc_nvml_api fake_nvml = {
    .Init = nvml_init,
    .Shutdown = nvml_shutdown,
    .DeviceGetHandleByPciBusId = nvml_by_bus_id,
    .DeviceGetBAR1MemoryInfo = nvml_get_bar1,
};

/* Four fake GPUs of 96 GiB under the fake NVML.  Each test reads its own
 * device: a device's budget is read once per process. */
static int install(void **state)
{
    (void)state;
    drv_install();
    drv.device_count = DRV_MAX_DEVICES;
    drv.device_memory = 96 * GIB;
    nvml_init_status = 0;
    memset(nvml_status, 0, sizeof nvml_status);
    nvml_inits = nvml_shutdowns = 0;
    rc_nvml_api_override(&fake_nvml);
    return 0;
}

static int uninstall(void **state)
{
    (void)state;
    rc_nvml_api_override(NULL);
    drv_uninstall();
    return 0;
}

static void nvml_bar1_is_the_budget(void **state)
{
    (void)state;
    nvml_bar1[0] = (struct rc_nvml_bar1){ .total = 256 * GIB, .free = 250 * GIB };
    assert_int_equal(rc_bar1_budget(0), 250 * GIB - 256 * GIB / 10);
    assert_int_equal(rc_bar1_budget_source(0), RC_BUDGET_NVML_BAR1);
    assert_int_equal(drv.calls[FC_TOTAL_MEM], 0);
    assert_int_equal(nvml_shutdowns, nvml_inits);
}

/* Grace Hopper and GB10: NVML reports no BAR1.  The GPU's memory bounds
 * what can be registered, less the same reserve. */
static void no_bar1_reading_budgets_device_memory(void **state)
{
    (void)state;
    nvml_status[1] = NVML_ERROR_NOT_SUPPORTED;
    assert_int_equal(rc_bar1_budget(1), 96 * GIB - 96 * GIB / 10);
    assert_int_equal(rc_bar1_budget_source(1), RC_BUDGET_DEVICE_MEMORY);
    assert_int_equal(drv.calls[FC_TOTAL_MEM], 1);
    assert_int_equal(nvml_shutdowns, nvml_inits);
}

/* NVML that does not start (or is not installed, or does not know the
 * GPU): the same fallback. */
static void nvml_unusable_budgets_device_memory(void **state)
{
    (void)state;
    nvml_init_status = NVML_ERROR_UNINITIALIZED;
    drv.device_memory = 4 * GIB;
    assert_int_equal(rc_bar1_budget(2), 4 * GIB - 4 * GIB / 10);
    assert_int_equal(rc_bar1_budget_source(2), RC_BUDGET_DEVICE_MEMORY);
}

/* Neither NVML nor the driver tells the size: unlimited, and said so;
 * read once and remembered. */
static void unknown_size_is_unlimited_and_read_once(void **state)
{
    (void)state;
    nvml_status[3] = NVML_ERROR_NOT_SUPPORTED;
    drv.device_memory = 0;
    assert_int_equal(rc_bar1_budget_source(3), RC_BUDGET_NONE);
    assert_int_equal(rc_bar1_budget(3), 0);
    assert_int_equal(rc_bar1_budget_source(3), RC_BUDGET_NONE);
    assert_int_equal(rc_bar1_budget(3), 0);
    assert_int_equal(drv.calls[FC_BUS_ID], 1);
    assert_int_equal(drv.calls[FC_TOTAL_MEM], 1);
    assert_int_equal(rc_bar1_budget(-1), 0);
    assert_int_equal(rc_bar1_budget(64), 0);
    assert_int_equal(rc_bar1_budget_source(64), RC_BUDGET_NONE);
    assert_int_equal(drv.calls[FC_DEVICE_GET], 1);
}

/* A configured BAR1 size stands for an empty BAR1 of that size: no
 * driver call, no NVML. */
static void configured_bar1_size_replaces_nvml(void **state)
{
    (void)state;
    setenv("REGCACHE_BAR1_BYTES", "320M", 1);
    assert_int_equal(rc_bar1_budget(5), 288 * MIB);
    assert_int_equal(rc_bar1_budget_source(5), RC_BUDGET_CONFIGURED);
    setenv("REGCACHE_BAR1_BYTES", "4G", 1);
    assert_int_equal(rc_bar1_budget(6), 4 * GIB - 4 * GIB / 10);
    unsetenv("REGCACHE_BAR1_BYTES");
    assert_int_equal(rc_bar1_budget(5), 288 * MIB); /* read once per device */
    assert_int_equal(drv.calls[FC_DEVICE_GET], 0);
    assert_int_equal(nvml_inits, 0);
}

/* The names regcache-stat and the REGCACHE_STATS dump show. */
static void sources_have_names(void **state)
{
    (void)state;
    assert_string_equal(rc_budget_source_name(RC_BUDGET_NONE), "none");
    assert_string_equal(rc_budget_source_name(RC_BUDGET_CONFIGURED), "configured");
    assert_string_equal(rc_budget_source_name(RC_BUDGET_NVML_BAR1), "nvml-bar1");
    assert_string_equal(rc_budget_source_name(RC_BUDGET_DEVICE_MEMORY), "device-memory");
    assert_string_equal(rc_budget_source_name(RC_BUDGET_MAX_BYTES), "max_bytes");
    assert_string_equal(rc_budget_source_name(99), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_bar1_keeps_32_mib),
        cmocka_unit_test(large_bar1_keeps_a_tenth),
        cmocka_unit_test(reserve_above_free_keeps_nothing_unused),
        cmocka_unit_test_setup_teardown(nvml_bar1_is_the_budget, install, uninstall),
        cmocka_unit_test_setup_teardown(no_bar1_reading_budgets_device_memory, install, uninstall),
        cmocka_unit_test_setup_teardown(nvml_unusable_budgets_device_memory, install, uninstall),
        cmocka_unit_test_setup_teardown(unknown_size_is_unlimited_and_read_once, install,
                                        uninstall),
        cmocka_unit_test_setup_teardown(configured_bar1_size_replaces_nvml, install, uninstall),
        cmocka_unit_test(sources_have_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
