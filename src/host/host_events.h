/* The unmaps the host memory monitor has heard of and not yet handled: a
 * bounded queue of ranges that any thread may add to - from inside libc,
 * with its locks held, or from a signal handler - without a lock, a system
 * call or an allocation, and that one thread at a time drains into the
 * caches' invalidations.
 *
 * The events word (host_seam.h) counts what was posted (high half) and
 * what is handled (low half).  A range is queued, then counted; a drain handles what was
 * counted when it began.  A get of host memory that finds the halves apart
 * drains first (or waits for the drain under way) unless no unhandled unmap
 * concerns its entry (rc_host_events_concern()), so no entry of pages an
 * unmap took away is served once that unmap has returned. */
#ifndef RC_HOST_EVENTS_H
#define RC_HOST_EVENTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "host_seam.h"

/* Queue [start, end) for invalidation and count it.  Lock-free and
 * async-signal-safe.  A full queue remembers that it overflowed instead:
 * the next drain invalidates every watched range. */
void rc_host_events_post(uintptr_t start, uintptr_t end);

/* Queue every watched range for invalidation, as a full queue does. */
void rc_host_events_post_all(void);

/* Around a read of the userfaultfd: begin counts an event with no range
 * yet, before the read that lets an unmapping thread go on; the ranges
 * read are posted before end.  No drain counts itself done while a read is
 * between the two. */
void rc_host_events_read_begin(void);
void rc_host_events_read_end(void);

/* Whether an unmap that is not handled yet may concern [start, end): one
 * queued or being invalidated that overlaps it, an overflow, or a read of
 * the userfaultfd under way (whose ranges are not known yet).  Takes no
 * lock and waits for nothing: for a get of cached memory that must not
 * wait for the drain.  An unmap that this misses was handled meanwhile:
 * its entries left the caches. */
bool rc_host_events_concern(uintptr_t start, uintptr_t end);

/* Whether the queue is half full or more: time to wake a drainer. */
bool rc_host_events_crowded(void);

/* What a drain does with what it takes: the entries of a range leave
 * every cache that watches, calling back nobody (`range`; true when a
 * cache has deregistrations or notices to give), or those of every watched
 * range after an overflow (`everything`), and then - when either left
 * something - the deregistrations and notices are left to the monitor's
 * releasing thread (`later`, host_monitor.h).  So a drain waits for
 * nothing an application's thread may hold, and a callback never runs
 * inside one. */
struct rc_host_drain {
    bool (*range)(uintptr_t start, uintptr_t end);
    bool (*everything)(void);
    void (*later)(void);
};

/* Handle what was counted, with d.  One drainer at a time: with `wait`, a
 * thread that finds another draining waits for it, then drains what is
 * left; without, it returns false at once.  Returns true when it drained.
 * Never call it from inside a hook. */
bool rc_host_events_drain(bool wait, const struct rc_host_drain *d);

/* The child of a fork starts with nothing queued. */
void rc_host_events_reset(void);

#endif
