/*
 * The cache on a real GPU: real allocations of every kind, freed and
 * reallocated at the same address, with a counting backend (no NIC exists
 * here) and no query callback, so the cache asks the CUDA driver itself.
 * Every registration records the buffer id of the memory it was made for;
 * every get checks that id against the memory's id now.
 *
 * The driver is dlopened (like the library does), so the program also runs,
 * and skips, on machines without one.
 */
#include "gpu_cache.h"

int main(void)
{
    const char *why = driver_missing();
    if (why) {
        printf("skipped: %s\n", why);
        return 77;
    }
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, reset, release_handles)
        T(legacy_realloc_is_reregistered),
        T(legacy_realloc_is_reregistered_past_l1),
        T(pool_reuse_is_reregistered),
        T(vmm_remap_is_reregistered),
        T(packed_small_allocations_stay_apart),
        T(whole_allocations_of_every_size),
        T(managed_and_host_memory_are_refused),
        T(sync_memops_is_set_before_the_first_registration),
        T(fork_child_has_no_driver),
        T(dmabuf_export_of_every_kind),
        T(budget_evicts_lru_and_never_a_held_entry),
        T(threads_never_see_a_stale_handle),
        T(bar1_budget_of_device_0_is_read),
        T(pcie_mapping_refused_and_the_export_falls_back),
        T(export_without_fds_is_exhaustion),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
