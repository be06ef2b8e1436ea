/* One range a call takes away, from before the call until after it: what
 * every way that hooks the calls does with it - libc's hooks, UCX's
 * handlers, and the side of a copy of the library that joined the hooks of
 * another (host_rendezvous.h).
 *
 * Before the call the range is listed in flight (host_unmapping.h),
 * whatever it is, and posted to the queue of unmaps if it may be watched,
 * so that once the call returns a get finds the queue ahead of the drain
 * and drains first.  After the call it is posted again if it may be
 * watched now - a registration made meanwhile may have pinned the pages
 * that left, under a watch made after the first look - and no longer in
 * flight.  Between the two, a registration over the range is handed out
 * once and never cached: no way that hooks the calls has an unmap window.
 * Posting wakes the monitor thread, so leave notices come without waiting
 * for the next get.  Lock-free and async-signal-safe; errno is kept. */
#ifndef RC_HOST_LEAVE_H
#define RC_HOST_LEAVE_H

#include <stdbool.h>
#include <stdint.h>

#define RC_HOST_NO_TOKEN INT32_MIN

struct rc_host_leave {
    uintptr_t start, end; /* rounded out to pages */
    int token;            /* rc_host_unmapping_begin()'s, or RC_HOST_NO_TOKEN */
};

/* Before the call that takes [start, end) (end below start: up to the
 * top).  An empty range leaves nothing to end. */
void rc_host_leave_begin(struct rc_host_leave *l, uintptr_t start, uintptr_t end);

/* After it. */
void rc_host_leave_end(const struct rc_host_leave *l);

/* A range seen leaving once, after its call: posted if it may be watched
 * (what another way's hooks cannot know before the call, such as the
 * target of a move that only its result says). */
void rc_host_leave_post(uintptr_t start, uintptr_t end);

/* What the hooks ask of the monitor, which tells them when it opens,
 * before it hooks anything: whether a range may be watched (a few loads,
 * false answers exact), and the wake of its thread.  Both
 * async-signal-safe. */
struct rc_host_watcher {
    bool (*may_watch)(uintptr_t start, uintptr_t end);
    void (*kick)(void);
};
void rc_host_leave_tell(const struct rc_host_watcher *w);

/* The page size less one: known from the library's load on, before any
 * hook or handler of it can run. */
uintptr_t rc_host_page_mask(void);

#endif
