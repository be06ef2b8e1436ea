/* The budget of GPU 0 on the real driver and NVML (label gpu; exits 77
 * where there is no driver or GPU): NVML's BAR1 where NVML reports it,
 * else the GPU's memory (Grace Hopper, GB10), each less the reserve, and
 * the source named accordingly.  Prints what it read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "bar1_budget.h"
#include "cuda_seam.h"
#include "nvml_seam.h"

static CUdevice device0;

/* NVML's BAR1 of GPU 0, as the library would read it; false when NVML
 * reports none. */
static int nvml_bar1(struct rc_nvml_bar1 *bar1)
{
    const struct rc_nvml_api *nvml = rc_nvml_api();
    char bus_id[32];
    void *handle;
    if (!nvml || nvml->Init() != 0)
        return 0;
    int ok = rc_cuda_api()->DeviceGetPCIBusId(bus_id, sizeof bus_id, device0) == CUDA_SUCCESS &&
             nvml->DeviceGetHandleByPciBusId(bus_id, &handle) == 0 &&
             nvml->DeviceGetBAR1MemoryInfo(handle, bar1) == 0;
    nvml->Shutdown();
    return ok;
}

static void budget_follows_what_the_gpu_reports(void **state)
{
    (void)state;
    size_t memory = 0;
    assert_int_equal(rc_cuda_api()->DeviceTotalMem(&memory, device0), CUDA_SUCCESS);
    assert_true(memory > 0);
    struct rc_nvml_bar1 bar1;
    int has_bar1 = nvml_bar1(&bar1);
    size_t budget = rc_bar1_budget(0);
    enum rc_budget_source source = rc_bar1_budget_source(0);
    printf("budget %zu MiB from %s; device memory %zu MiB", budget >> 20,
           rc_budget_source_name(source), memory >> 20);
    if (has_bar1)
        printf(", NVML BAR1 total %llu MiB free %llu MiB", bar1.total >> 20, bar1.free >> 20);
    printf("\n");
    if (has_bar1) {
        assert_int_equal(source, RC_BUDGET_NVML_BAR1);
        /* Free BAR1 may have changed between the two readings. */
        assert_true(budget > 0 && budget <= rc_bar1_budget_rule(bar1.total, bar1.total));
    } else {
        assert_int_equal(source, RC_BUDGET_DEVICE_MEMORY);
        assert_int_equal(budget, rc_bar1_budget_rule(memory, memory));
    }
}

int main(void)
{
    const struct rc_cuda_api *api = rc_cuda_api();
    int count = 0;
    if (!api || api->DeviceGetCount(&count) != CUDA_SUCCESS || count < 1 ||
        api->DeviceGet(&device0, 0) != CUDA_SUCCESS) {
        printf("skipped: no CUDA driver or no GPU here\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(budget_follows_what_the_gpu_reports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
