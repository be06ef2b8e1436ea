/* The host memory monitor: one per process, for every cache.  A pageable
 * host range is watched from before its registration until its
 * deregistration; every unmap, remap and discard of its pages (munmap,
 * mremap, mmap(MAP_FIXED) over them, madvise(DONTNEED, FREE, REMOVE), brk
 * shrinking, shmdt, and the same done from inside libc by free() and
 * realloc()) is queued (host_events.h) before the caller's call returns,
 * and drained into invalidations in every cache.  Three ways to hear of
 * them: UCX's memory events where libucm is loaded (host_ucm.h), libc's
 * functions patched (host_libc.h) - each costs the unmapping thread a
 * post - or a userfaultfd (host_uffd.h), which also sees system calls made
 * without libc but makes the unmapping thread wait for the monitor thread.
 * See docs/design.md "Host memory monitor". */
#ifndef RC_HOST_MONITOR_H
#define RC_HOST_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host_events.h"

/* How a range is watched. */
enum rc_host_by { RC_HOST_BY_NONE, RC_HOST_BY_LIBC, RC_HOST_BY_UFFD, RC_HOST_BY_UCM };

/* Get of host memory: every unmap posted before the call is handled
 * first.  Returns at once on a thread that is draining (its own
 * invalidations' callbacks). */
void rc_host_monitor_catch_up(void);

/* How a cache that asks for `mode` (enum regcache_host_monitor, not OFF)
 * watches its ranges, with how (or why not) in why[n].  AUTO: UCX's
 * events where libucm is loaded, else libc's hooks; never the
 * userfaultfd, which changes how the watched mappings merge.  Registers
 * with UCX, patches libc or opens the userfaultfd the first time each is
 * asked for.  Thread safe. */
enum rc_host_by rc_host_monitor_open(int mode, char *why, size_t n);

/* A watched range; the entry registered over it keeps it until its
 * deregistration. */
struct rc_host_claim;

/* Watch [start, end) (page aligned) before it is registered: a claim, or
 * NULL when the range cannot be watched (the userfaultfd refuses a mapping
 * it does not report or one another userfaultfd watches; no memory).
 * Allocates; call without any lock of the cache.  Thread safe. */
struct rc_host_claim *rc_host_monitor_watch(uintptr_t start, uintptr_t end, enum rc_host_by by);

/* The entry over a claim was deregistered: its pages that no other claim
 * covers are no longer watched.  NULL is a no-op.  Thread safe. */
void rc_host_monitor_unwatch(struct rc_host_claim *claim);

/* Invalidate every watched range (the queue overflowed).  Drainer only. */
void rc_host_monitor_invalidate_watched(void);

/* Wake the monitor thread to drain.  Async-signal-safe. */
void rc_host_monitor_kick(void);

/* The last cache of the process was destroyed: stop the thread and close
 * the userfaultfd, once no range is watched.  Thread safe. */
void rc_host_monitor_idle(void);

#endif
