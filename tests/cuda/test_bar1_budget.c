/* The BAR1 budget: the reserve rule, and the per-device reading. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "bar1_budget.h"
#include "fake_driver.h"

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

/* The fake GPU's PCI bus id exists nowhere, so NVML (present or not) gives
 * nothing: unlimited, read once and remembered. */
static void unreadable_bar1_is_unlimited_and_read_once(void **state)
{
    (void)state;
    drv_install();
    assert_int_equal(rc_bar1_budget(0), 0);
    assert_int_equal(drv.calls[FC_BUS_ID], 1);
    assert_int_equal(rc_bar1_budget(0), 0);
    assert_int_equal(drv.calls[FC_BUS_ID], 1);
    assert_int_equal(rc_bar1_budget(-1), 0);
    assert_int_equal(rc_bar1_budget(64), 0);
    assert_int_equal(drv.calls[FC_DEVICE_GET], 1);
    drv_uninstall();
}

/* A configured BAR1 size stands for an empty BAR1 of that size: no
 * driver call, no NVML. */
static void configured_bar1_size_replaces_nvml(void **state)
{
    (void)state;
    drv_install();
    setenv("REGCACHE_BAR1_BYTES", "320M", 1);
    assert_int_equal(rc_bar1_budget(5), 288 * MIB);
    setenv("REGCACHE_BAR1_BYTES", "4G", 1);
    assert_int_equal(rc_bar1_budget(6), 4 * GIB - 4 * GIB / 10);
    unsetenv("REGCACHE_BAR1_BYTES");
    assert_int_equal(rc_bar1_budget(5), 288 * MIB); /* read once per device */
    assert_int_equal(drv.calls[FC_DEVICE_GET], 0);
    drv_uninstall();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_bar1_keeps_32_mib),
        cmocka_unit_test(large_bar1_keeps_a_tenth),
        cmocka_unit_test(reserve_above_free_keeps_nothing_unused),
        cmocka_unit_test(unreadable_bar1_is_unlimited_and_read_once),
        cmocka_unit_test(configured_bar1_size_replaces_nvml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
