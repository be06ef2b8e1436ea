/* GPU keys: the UUID as nvidia-smi prints it, and the failing calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fake_driver.h"
#include "gpu_key.h"
#include "regcache.h"

static void key_is_the_uuid(void **state)
{
    (void)state;
    char key[RC_GPU_KEY_LEN];
    drv_install();
    assert_int_equal(rc_gpu_key(0, key, sizeof key), REGCACHE_OK);
    assert_string_equal(key, "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
    assert_int_equal(drv.calls[FC_UUID], 1);
    drv_uninstall();
}

static void failing_driver_names_the_call(void **state)
{
    (void)state;
    char key[RC_GPU_KEY_LEN];
    drv_install();
    assert_int_equal(rc_gpu_key(1, key, sizeof key), REGCACHE_ERR_CUDA);
    assert_string_equal(regcache_last_error(),
                        "cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE (101)");
    drv.fail[FC_UUID] = CUDA_ERROR_NOT_INITIALIZED;
    assert_int_equal(rc_gpu_key(0, key, sizeof key), REGCACHE_ERR_CUDA);
    assert_string_equal(regcache_last_error(),
                        "cuDeviceGetUuid_v2 failed: CUDA_ERROR_NOT_INITIALIZED (3)");
    drv_uninstall();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(key_is_the_uuid),
        cmocka_unit_test(failing_driver_names_the_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
