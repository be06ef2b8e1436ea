/*
 * validation HOOKS asked for explicitly, in a process without the preload
 * hook, on the real driver: the first cache of the process installs the
 * in-process interception, so memory unmapped and replaced by a new
 * physical allocation mapped at the same address is registered anew, never
 * served the registration of the memory that went away; likewise a
 * cuMemFree and a cuMemAlloc that returns the same address.
 *
 * Its own program (gpu_validation_hooks), whose first cache is the HOOKS
 * one: in a process where an AUTO cache came first, the interception would
 * already be there.  The driver is dlopened, so the program also runs, and
 * skips, where there is none.
 */
#include "gpu_cache.h"

static regcache_t *hooks_cache;

static void explicit_hooks_installs_the_interception(void **state)
{
    (void)state;
    hooks_cache = new_cache_validated(0, REGCACHE_VALIDATE_HOOKS);
    assert_non_null(hooks_cache);
    printf("validation %d (HOOKS is %d): %s\n", regcache_validation_mode(hooks_cache),
           REGCACHE_VALIDATE_HOOKS, regcache_validation_reason(hooks_cache));
    assert_int_equal(regcache_validation_mode(hooks_cache), REGCACHE_VALIDATE_HOOKS);
    assert_non_null(strstr(regcache_validation_reason(hooks_cache), "in-process interception"));
}

/* cuMemUnmap, then cuMemMap of a new physical allocation at the same
 * address: a new buffer id, and a new registration. */
static void vmm_remap_of_a_new_handle_is_reregistered(void **state)
{
    (void)state;
    assert_non_null(hooks_cache);
    regcache_t *c = hooks_cache;
    vmm_granularity();
    CUdeviceptr va;
    CUmemGenericAllocationHandle first, second;
    CK(cu.cuMemAddressReserve(&va, vmm_size, 0, 0, 0));
    CK(cu.cuMemCreate(&first, vmm_size, &vmm_prop, 0));
    CK(cu.cuMemCreate(&second, vmm_size, &vmm_prop, 0));
    CUmemAccessDesc access = { .location = vmm_prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(cu.cuMemMap(va, vmm_size, 0, first, 0));
    CK(cu.cuMemSetAccess(va, vmm_size, &access, 1));

    regcache_entry_t *e;
    struct handle *old = get_checked(c, va, 4096, &e);
    regcache_put(c, e);
    get_checked(c, va, 4096, &e); /* a hit */
    regcache_put(c, e);
    long regs_before = atomic_load(&regs);

    CK(cu.cuMemUnmap(va, vmm_size));
    CK(cu.cuMemMap(va, vmm_size, 0, second, 0));
    CK(cu.cuMemSetAccess(va, vmm_size, &access, 1));
    unsigned long long now = buffer_id(va);
    requested = va;
    int rc = regcache_get(c, (const void *)va, 4096, &e);
    struct handle *served = rc == REGCACHE_OK ? regcache_entry_handle(e) : NULL;
    printf("VMM %#jx: registered for buffer id %llu; after cuMemUnmap + cuMemMap of a new "
           "handle the memory is id %llu; the get: %s, served a registration of id %llu "
           "(%s), %ld registrations since\n",
           (uintmax_t)va, old->id, now, regcache_strerror(rc), served ? served->id : 0,
           served == old ? "the old one" : "a new one", atomic_load(&regs) - regs_before);
    assert_int_equal(rc, REGCACHE_OK);
    assert_int_not_equal(now, old->id);
    assert_ptr_not_equal(served, old);
    assert_int_equal(served->id, now);
    assert_false(atomic_load(&served->dead));
    assert_true(atomic_load(&old->dead));
    assert_int_equal(atomic_load(&regs), regs_before + 1);
    regcache_put(c, e);

    CK(cu.cuMemUnmap(va, vmm_size));
    CK(cu.cuMemRelease(first));
    CK(cu.cuMemRelease(second));
    CK(cu.cuMemAddressFree(va, vmm_size));
}

static uintptr_t legacy_replace(uintptr_t addr)
{
    CUdeviceptr p;
    CK(cu.cuMemFree((CUdeviceptr)addr));
    CK(cu.cuMemAlloc(&p, MIB));
    return p;
}

/* cuMemFree and a cuMemAlloc that returns the same address. */
static void legacy_realloc_under_hooks_is_reregistered(void **state)
{
    (void)state;
    assert_non_null(hooks_cache);
    CUdeviceptr p;
    CK(cu.cuMemAlloc(&p, MIB));
    expect_reregistration(hooks_cache, p, 4096, 8192, legacy_replace, "HOOKS, cuMemAlloc");
    regcache_destroy(hooks_cache);
    hooks_cache = NULL;
    CK(cu.cuMemFree(p));
}

int main(void)
{
    const char *why = driver_missing();
    if (why) {
        printf("skipped: %s\n", why);
        return 77;
    }
    /* In this order: the first test creates the process's first cache. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(explicit_hooks_installs_the_interception, reset),
        cmocka_unit_test(vmm_remap_of_a_new_handle_is_reregistered),
        cmocka_unit_test_teardown(legacy_realloc_under_hooks_is_reregistered, release_handles),
    };
    return cmocka_run_group_tests_name("gpu_validation_hooks", tests, NULL, NULL);
}
