/* What the core knows of the host memory monitor (src/host), which stands
 * above it: the word whose halves count the unmaps the monitor heard of
 * (high) and those it handled (low), so that a get of host memory that
 * finds them apart knows unmaps wait (the monitor's queue writes it,
 * host_events.h), and the two calls such a get makes then, which the
 * monitor installs when it opens.  Process-wide. */
#ifndef RC_HOST_SEAM_H
#define RC_HOST_SEAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct rc_host_monitor_line {
    _Atomic uint64_t events;
    char pad[56];
} __attribute__((aligned(64)));
extern struct rc_host_monitor_line rc_host_monitor_line;

static inline bool rc_host_monitor_behind(void)
{
    uint64_t w = atomic_load_explicit(&rc_host_monitor_line.events, memory_order_acquire);
    return (uint32_t)(w >> 32) != (uint32_t)w;
}

struct rc_host_seam {
    /* Every unmap posted before the call is handled first. */
    void (*catch_up)(void);
    /* Whether an unmap not handled yet may concern [start, end): waits for
     * nothing. */
    bool (*concern)(uintptr_t start, uintptr_t end);
};

/* The monitor, before it can post anything: the calls a get makes while
 * it is behind.  Thread safe. */
void rc_host_seam_install(const struct rc_host_seam *seam);

/* A get that found the monitor behind: the installed calls. */
void rc_host_catch_up(void);
bool rc_host_concern(uintptr_t start, uintptr_t end);

#endif
