/* The GPU cache: the BAR1 budget. */
#include "gpu_cache.h"

/* ------------------------------------------------------------------------ */
/* The BAR1 budget                                                            */
/* ------------------------------------------------------------------------ */

/* Where NVML is there, it gives device 0 a BAR1 budget (how long the cache's
 * calls take is the benchmark's business: bench/cuda.c, bench/hits.c). */
void bar1_budget_of_device_0_is_read(void **state)
{
    (void)state;
    /* NVML ships with the driver: where the driver runs, it must load. */
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml)
        fail_msg("libnvidia-ml.so.1 cannot be loaded beside the driver: %s", dlerror());
    dlclose(nvml);
    size_t budget = rc_bar1_budget(0);
    printf("BAR1 budget of device 0: %zu MiB\n", budget / MIB);
    assert_true(budget > 0);
}
