/* The driver seam: the override, and error messages naming the call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_seam.h"
#include "fake_driver.h"
#include "regcache.h"

static void override_replaces_the_driver(void **state)
{
    (void)state;
    const struct rc_cuda_api *before = rc_cuda_api();
    drv_install();
    const struct rc_cuda_api *faked = rc_cuda_api();
    assert_non_null(faked);
    assert_ptr_not_equal(faked, before);
    drv_uninstall();
    assert_ptr_equal(rc_cuda_api(), before);
}

static void error_message_names_call_and_code(void **state)
{
    (void)state;
    drv_install();
    const struct rc_cuda_api *api = rc_cuda_api();
    assert_int_equal(rc_cuda_error(api, "cuFoo", CUDA_ERROR_DEINITIALIZED), REGCACHE_ERR_CUDA);
    assert_string_equal(regcache_last_error(), "cuFoo failed: CUDA_ERROR_DEINITIALIZED (4)");
    assert_int_equal(rc_cuda_error(api, "cuBar", (CUresult)12345), REGCACHE_ERR_CUDA);
    assert_string_equal(regcache_last_error(), "cuBar failed: unknown CUDA error (12345)");
    drv_uninstall();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(override_replaces_the_driver),
        cmocka_unit_test(error_message_names_call_and_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
