/* Quiet driver calls (quiet_calls.h). */
#include "quiet_calls.h"

atomic_int rc_quiet_threads;
_Thread_local bool rc_quiet;

void rc_cuda_quiet(bool on)
{
    if (rc_quiet == on)
        return;
    rc_quiet = on;
    atomic_fetch_add_explicit(&rc_quiet_threads, on ? 1 : -1, memory_order_relaxed);
}
