/* The host memory monitor's seam (host_seam.h). */
#include "host_seam.h"

#include <stddef.h>

struct rc_host_monitor_line rc_host_monitor_line;

static _Atomic(const struct rc_host_seam *) installed;

void rc_host_seam_install(const struct rc_host_seam *seam)
{
    atomic_store_explicit(&installed, seam, memory_order_release);
}

/* Behind only once something was posted, after the install. */
void rc_host_catch_up(void)
{
    const struct rc_host_seam *seam = atomic_load_explicit(&installed, memory_order_acquire);
    if (seam)
        seam->catch_up();
}

bool rc_host_concern(uintptr_t start, uintptr_t end)
{
    const struct rc_host_seam *seam = atomic_load_explicit(&installed, memory_order_acquire);
    return !seam || seam->concern(start, end);
}
