/* The host memory monitor: one per process, for every cache that watches
 * its host memory.  A pageable host range of a private mapping is watched
 * from before its registration until its deregistration; every unmap,
 * remap and discard of its pages (munmap, mremap, mmap(MAP_FIXED) or
 * shmat(SHM_REMAP) over them, madvise(DONTNEED, FREE, REMOVE, GUARD), brk
 * shrinking, and the same done from inside libc by free() and realloc())
 * is queued (host_events.h) before the caller's call returns, and drained
 * into invalidations in every cache that watches.  Three ways to hear of
 * them: UCX's memory events where libucm is loaded (host_ucm.h) or libc's
 * functions patched (host_libc.h) - hooks, which cost the unmapping thread
 * a post before its call and one after (host_leave.h) - or a userfaultfd
 * (host_uffd.h), which also sees system calls made without libc but makes
 * the unmapping thread wait for its reader thread (host_reader.h), and
 * cannot close the unmap window (AUTO never takes it).  The monitor
 * thread (regcache-mon) drains when no get does and gives the
 * deregistrations and notices that drains leave.  See docs/design.md
 * "Host memory monitor". */
#ifndef RC_HOST_MONITOR_H
#define RC_HOST_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host_events.h"

/* How a range is watched. */
enum rc_host_by { RC_HOST_BY_NONE, RC_HOST_BY_LIBC, RC_HOST_BY_UFFD, RC_HOST_BY_UCM };

/* Whether a range's mappings are shared, as the miss learnt it. */
enum rc_host_sharing { RC_HOST_SHARING_UNKNOWN, RC_HOST_PRIVATE, RC_HOST_SHARED };

/* Get of host memory: every unmap posted before the call is handled
 * first.  Waits only for another drain (which calls back nobody) and for a
 * read of the userfaultfd under way. */
void rc_host_monitor_catch_up(void);

/* What the monitor does with what it hears, handed to it by the caches'
 * side (host_watch.h): the entries of [start, end) leave every cache that
 * watches, calling back nobody (true when a cache has deregistrations or
 * notices to give), and later, on the monitor's thread, those are given. */
struct rc_host_sink {
    bool (*unmapped)(uintptr_t start, uintptr_t end);
    void (*release)(void);
};

/* How a cache that asks for `mode` (enum regcache_host_monitor, not OFF)
 * watches its ranges, with how (or why not) in why[n]; `asked` says who
 * asked (the variable or the field), for why; what the monitor hears goes
 * to `sink` (the same for every cache).  AUTO: UCX's events where
 * libucm is loaded, else libc's hooks, else nothing; never the
 * userfaultfd.  Registers with UCX, patches libc or opens the userfaultfd
 * the first time each is asked for.  Thread safe. */
enum rc_host_by rc_host_monitor_open(int mode, const char *asked, char *why, size_t n,
                                     const struct rc_host_sink *sink);

/* A watched range; the entry registered over it keeps it until its
 * deregistration. */
struct rc_host_claim;

/* Watch [start, end) (page aligned) before it is registered: a claim, or
 * NULL when the range cannot be watched (a shared mapping, asked of the
 * kernel when `sharing` does not say; through hooks, a loaded object's
 * segment; a mapping the userfaultfd does not
 * report or one another userfaultfd watches; no memory).  A hook in flight
 * that did not see the watch is listed (host_unmapping.h) by the time it
 * returns.  Allocates; call without any lock of the cache.  Thread
 * safe. */
struct rc_host_claim *rc_host_monitor_watch(uintptr_t start, uintptr_t end, enum rc_host_by by,
                                            enum rc_host_sharing sharing);

/* Whether an unmap in flight through hooks meets the claim's range
 * (host_unmapping.h): a registration under the claim made meanwhile may
 * pin pages the unmap takes away, and must be handed out once. */
bool rc_host_monitor_unsettled(const struct rc_host_claim *claim);

/* The entry over a claim was deregistered: its pages that no other claim
 * covers are no longer watched.  NULL is a no-op.  Thread safe. */
void rc_host_monitor_unwatch(struct rc_host_claim *claim);

/* Whether [start, end) may meet a range the hooks watch (a few loads;
 * false answers are exact).  Async-signal-safe. */
bool rc_host_monitor_may_watch(uintptr_t start, uintptr_t end);

/* Wake the monitor thread to drain: one write until it wakes, none while
 * it looks often anyway, unless the queue is half full.
 * Async-signal-safe. */
void rc_host_monitor_kick(void);

/* The last cache of the process was destroyed: stop the thread and close
 * the userfaultfd, once no range is watched.  Thread safe. */
void rc_host_monitor_idle(void);

#endif
