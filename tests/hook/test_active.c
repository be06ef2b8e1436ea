/* regcache_hook_active() is true only while the hook provably sees every
 * free, and a cache with validation AUTO follows it.  One program, run by
 * ctest in four settings (HOOK_TEST_MODE):
 *   preloaded  hook in LD_PRELOAD: active, caches trust notifications;
 *   absent     no hook: caches check tags;
 *   late       hook dlopen()ed after startup: loaded, but not active;
 *   escape     hook in LD_PRELOAD, then a memory function is fetched in an
 *              ABI the hook does not wrap: no longer active. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "fake_libcuda.h"
#include "hook_fixture.h"

static int hook_says(void *where)
{
    int (*active)(void) = (int (*)(void))dlsym(where, "regcache_hook_active");
    assert_non_null(active);
    return active();
}

static int auto_mode(void)
{
    regcache_t *cache = fixture_cache();
    int mode = regcache_validation_mode(cache);
    regcache_destroy(cache);
    return mode;
}

static void preloaded(void **state)
{
    (void)state;
    assert_true(hook_says(RTLD_DEFAULT));
    assert_int_equal(auto_mode(), REGCACHE_VALIDATE_HOOKS);
}

static void absent(void **state)
{
    (void)state;
    assert_null(dlsym(RTLD_DEFAULT, "regcache_hook_active"));
    assert_int_equal(auto_mode(), REGCACHE_VALIDATE_TAG_CHECK);
}

static void late(void **state)
{
    (void)state;
    void *hook = dlopen(HOOK_PATH, RTLD_NOW | RTLD_GLOBAL);
    assert_non_null(hook);
    assert_false(hook_says(hook));
    assert_int_equal(auto_mode(), REGCACHE_VALIDATE_TAG_CHECK);
}

/* The 32-bit cuMemFree of CUDA < 3.2, by name and by version: handed out
 * unwrapped, so the hook stops vouching for itself.  The other 32-bit
 * memory functions are handed out unwrapped too. */
static void escape(void **state)
{
    (void)state;
    assert_true(hook_says(RTLD_DEFAULT));
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(driver);
    void *gpa = dlsym(driver, "cuGetProcAddress_v2");
    void *fn = NULL;
    assert_int_equal(
        ((CUresult(*)(const char *, void **, int, cuuint64_t,
                      CUdriverProcAddressQueryResult *))gpa)("cuMemFree", &fn, 2000, 0, NULL),
        CUDA_SUCCESS);
    assert_ptr_equal(fn, fakecuda_own("cuMemFree"));
    assert_false(hook_says(RTLD_DEFAULT));
    assert_int_equal(auto_mode(), REGCACHE_VALIDATE_TAG_CHECK);
    assert_ptr_equal(dlsym(driver, "cuMemAlloc"), fakecuda_own("cuMemAlloc"));
    assert_ptr_equal(dlsym(driver, "cuMemAllocHost"), fakecuda_own("cuMemAllocHost"));
}

int main(void)
{
    static const struct {
        const char *name;
        struct CMUnitTest test;
    } modes[] = {
        { "preloaded", cmocka_unit_test(preloaded) },
        { "absent", cmocka_unit_test(absent) },
        { "late", cmocka_unit_test(late) },
        { "escape", cmocka_unit_test(escape) },
    };
    const char *mode = getenv("HOOK_TEST_MODE");
    for (size_t i = 0; mode && i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(mode, modes[i].name) == 0) {
            const struct CMUnitTest tests[] = { modes[i].test };
            return cmocka_run_group_tests_name(modes[i].name, tests, NULL, NULL);
        }
    print_error("HOOK_TEST_MODE must be preloaded, absent, late or escape\n");
    return 1;
}
