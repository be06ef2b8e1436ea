/* The host memory monitor: one per process, for every cache.  Pageable host
 * ranges are registered with a userfaultfd before the backend registers
 * them; the kernel then reports every unmap, remap and discard of their
 * pages (munmap, mremap, mmap(MAP_FIXED) over them, madvise(DONTNEED, FREE,
 * REMOVE), brk shrinking, and the same done from inside libc by free() and
 * realloc()), and the thread regcache-mon invalidates what overlaps them in
 * every cache.  See README "Host memory monitor" for why this mechanism. */
#ifndef RC_HOST_MONITOR_H
#define RC_HOST_MONITOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Events read (high half) and events handled (low half), both written by
 * the monitor thread only, on a line of their own.  The kernel lets an
 * unmapping thread return once the monitor has READ its event, before the
 * entries are invalidated: a get of host memory that finds the halves
 * apart waits until they meet (rc_host_monitor_catch_up). */
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

/* Wait until every event read so far is handled.  Returns at once on the
 * monitor thread itself (its own callbacks must never wait for it). */
void rc_host_monitor_catch_up(void);

/* Whether the monitor can work in this process: opens the userfaultfd once
 * (the thread starts with the first watched range).  1 with how it works
 * in why[n], or 0 with why it cannot.  Thread safe. */
int rc_host_monitor_open(char *why, size_t n);

/* A watched range; the entry registered over it keeps it until its
 * deregistration. */
struct rc_host_claim;

/* Watch [start, end) (page aligned) before it is registered: a claim, or
 * NULL when the range cannot be watched (a mapping the kernel does not
 * report, one another userfaultfd watches, no memory, no monitor).
 * Allocates; call without any lock of the cache.  Thread safe. */
struct rc_host_claim *rc_host_monitor_watch(uintptr_t start, uintptr_t end);

/* The entry over a claim was deregistered: its pages that no other claim
 * covers are no longer watched.  NULL is a no-op.  Thread safe. */
void rc_host_monitor_unwatch(struct rc_host_claim *claim);

/* The last cache of the process was destroyed: stop the thread and close
 * the userfaultfd, once no range is watched.  Thread safe. */
void rc_host_monitor_idle(void);

#endif
