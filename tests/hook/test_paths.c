/* Every way a program reaches a memory function of the driver - through
 * cuGetProcAddress (both forms, every version and flags variant), through
 * dlsym on the driver's handle, and through a direct (PLT) call - ends in a
 * wrapper that lets the caches go of a range before the driver frees it, and
 * drops a stale cached range when the driver hands it out again.  Runs with
 * libregcache-hook.so in LD_PRELOAD, over the libcuda test double. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "fake_libcuda.h"
#include "hook_fixture.h"

/* The names cuda.h maps to newer ABIs, and the per-thread-stream exports it
 * only declares under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);

static void get_proc_v2_from_dlsym(void **state)
{
    (void)state;
    void *gpa = dlsym(fixture_driver(), "cuGetProcAddress_v2");
    assert_ptr_not_equal(gpa, fixture_own("cuGetProcAddress_v2"));
    fixture_check_procs(gpa, 1);
}

static void get_proc_from_dlsym(void **state)
{
    (void)state;
    void *gpa = dlsym(fixture_driver(), "cuGetProcAddress");
    assert_ptr_not_equal(gpa, fixture_own("cuGetProcAddress"));
    fixture_check_procs(gpa, 0);
}

static void get_proc_from_direct_calls(void **state)
{
    (void)state;
    fixture_check_procs((void *)cuGetProcAddress_v2, 1);
    fixture_check_procs((void *)cuGetProcAddress, 0);
}

/* The runtime's way: cuGetProcAddress asked for itself, both forms. */
static void get_proc_from_get_proc(void **state)
{
    (void)state;
    get_proc_v2_fn gpa = (get_proc_v2_fn)dlsym(fixture_driver(), "cuGetProcAddress_v2");
    void *four = NULL, *five = NULL;
    assert_int_equal(gpa("cuGetProcAddress", &four, 11030, 0, NULL), CUDA_SUCCESS);
    assert_int_equal(gpa("cuGetProcAddress", &five, 12000, 0, NULL), CUDA_SUCCESS);
    fixture_check_procs(four, 0);
    fixture_check_procs(five, 1);
}

static void symbols_from_dlsym(void **state)
{
    (void)state;
    for (size_t i = 0; i < fixture_n_exports; i++) {
        const struct fixture_export *e = &fixture_exports[i];
        print_message("  dlsym %s\n", e->name);
        void *fn = dlsym(fixture_driver(), e->name);
        assert_ptr_not_equal(fn, fixture_own(e->name));
        fixture_check(e->what, fn, fixture_runs(e));
    }
}

static void symbols_called_directly(void **state)
{
    (void)state;
    for (size_t i = 0; i < fixture_n_exports; i++) {
        const struct fixture_export *e = &fixture_exports[i];
        print_message("  direct %s\n", e->name);
        fixture_check(e->what, e->direct, fixture_runs(e));
    }
    /* And a literal call, as a driver-API program writes it. */
    regcache_t *cache = fixture_cache();
    uintptr_t p = fixture_cached_alloc(cache, 0);
    assert_int_equal(cuMemFree(p), CUDA_SUCCESS);
    fixture_assert_dereg_before(p, "cuMemFree_v2", p);
    regcache_destroy(cache);
}

/* Functions that neither allocate nor free come back untouched; one real
 * function has one wrapper however it is asked for; each flags variant its
 * own. */
static void wrapping_is_exact(void **state)
{
    (void)state;
    get_proc_v2_fn gpa = (get_proc_v2_fn)dlsym(fixture_driver(), "cuGetProcAddress_v2");
    void *a = NULL, *b = NULL;
    assert_int_equal(gpa("cuInit", &a, 2000, 0, NULL), CUDA_SUCCESS);
    assert_ptr_equal(a, fixture_own("cuInit"));
    assert_ptr_equal(dlsym(fixture_driver(), "cuMemGetAddressRange_v2"),
                     fixture_own("cuMemGetAddressRange_v2"));
    assert_int_equal(gpa("cuMemFree", &a, 3020, 0, NULL), CUDA_SUCCESS);
    assert_int_equal(gpa("cuMemFree", &b, 13000, 0, NULL), CUDA_SUCCESS);
    assert_ptr_equal(a, b);
    assert_int_equal(gpa("cuMemFreeAsync", &a, 11020, 0, NULL), CUDA_SUCCESS);
    assert_int_equal(
        gpa("cuMemFreeAsync", &b, 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
        CUDA_SUCCESS);
    assert_ptr_not_equal(a, b);
    /* A name the driver does not know stays an error. */
    a = &a;
    assert_int_equal(gpa("cuNoSuchThing", &a, 12000, 0, NULL), CUDA_ERROR_NOT_FOUND);
    assert_null(a);
    /* The hook's own exports, found through its handle, are not wrapped
     * twice. */
    void *hook = dlopen(HOOK_PATH, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(hook);
    assert_ptr_equal(dlsym(hook, "cuMemFree_v2"), dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
    dlclose(hook);
}

/* A free of memory the driver cannot place: the hook cannot tell what goes,
 * so everything goes, before the driver runs. */
static void unplaceable_free_drops_everything(void **state)
{
    (void)state;
    regcache_t *cache = fixture_cache();
    uintptr_t a = fixture_cached_alloc(cache, 0), b = fixture_cached_alloc(cache, 1);
    uintptr_t nowhere = b + FAKECUDA_SLOT_SIZE * 8;
    assert_int_equal(cuMemFree(nowhere), CUDA_ERROR_INVALID_VALUE);
    assert_true(fixture_dereg_at(a) >= 0);
    assert_true(fixture_dereg_at(b) >= 0);
    assert_int_equal(fixture_notified(cache), 2);
    regcache_destroy(cache);
}

/* A stream-ordered free captured into a graph while the thread captures in
 * GLOBAL mode: the wrapper's range query runs relaxed, so the capture stays
 * intact and the cache lets go of that allocation alone. */
static void captured_free_leaves_the_capture_intact(void **state)
{
    (void)state;
    regcache_t *cache = fixture_cache();
    uintptr_t kept = fixture_cached_alloc(cache, 0), freed = fixture_cached_alloc(cache, 0);
    int capture = fakecuda_capture_begin(CU_STREAM_CAPTURE_MODE_GLOBAL);
    assert_int_equal(cuMemFreeAsync(freed, NULL), CUDA_SUCCESS);
    assert_int_equal(fakecuda_thread_mode(), CU_STREAM_CAPTURE_MODE_GLOBAL);
    assert_int_equal(fakecuda_capture_refusals(), 0);
    assert_int_equal(fakecuda_capture_end(capture), CUDA_SUCCESS);
    fixture_assert_dereg_before(freed, "cuMemFreeAsync", freed);
    assert_int_equal(fixture_dereg_at(kept), -1);
    assert_int_equal(fixture_notified(cache), 1);
    regcache_destroy(cache);
}

/* RTLD_NEXT and RTLD_DEFAULT still search from the caller's object: from the
 * program, "next" is the preloaded hook. */
static void pseudo_handles_keep_the_caller(void **state)
{
    (void)state;
    assert_non_null(dlsym(RTLD_NEXT, "regcache_hook_active"));
    assert_ptr_equal(dlsym(RTLD_NEXT, "cuMemFree_v2"), dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
    assert_ptr_not_equal(dlsym(RTLD_DEFAULT, "cuMemFree_v2"), fixture_own("cuMemFree_v2"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(get_proc_v2_from_dlsym),
        cmocka_unit_test(get_proc_from_dlsym),
        cmocka_unit_test(get_proc_from_direct_calls),
        cmocka_unit_test(get_proc_from_get_proc),
        cmocka_unit_test(symbols_from_dlsym),
        cmocka_unit_test(symbols_called_directly),
        cmocka_unit_test(wrapping_is_exact),
        cmocka_unit_test(unplaceable_free_drops_everything),
        cmocka_unit_test(captured_free_leaves_the_capture_intact),
        cmocka_unit_test(pseudo_handles_keep_the_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
