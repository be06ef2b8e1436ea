/* Unmaps in flight through hooks (libc's, UCX's handlers, or those of the
 * copy of the library this one joined: host_leave.h).  A hook lists its
 * range here before it decides whether the range is watched, and takes it
 * off once its system call has returned and its last post is made.  A registration
 * over those pages meanwhile may pin the pages the call takes away, and
 * the hook may not have seen its watch: such a registration is handed out
 * once and never cached (the unmap window).  Lock-free and
 * async-signal-safe. */
#ifndef RC_HOST_UNMAPPING_H
#define RC_HOST_UNMAPPING_H

#include <stdbool.h>
#include <stdint.h>

/* [start, end) is in flight: a token for rc_host_unmapping_end().  One
 * compare-and-swap on a line that few other threads write, then a full
 * fence: after it, a watch made before is seen. */
int rc_host_unmapping_begin(uintptr_t start, uintptr_t end);
void rc_host_unmapping_end(int token);

/* Whether an unmap in flight meets [start, end).  Called after the watch
 * of the range was made (and fenced: rc_host_monitor_watch()), so that
 * every hook that did not see that watch is seen here while it lasts. */
bool rc_host_unmapping_meets(uintptr_t start, uintptr_t end);

/* The child of a fork: the threads whose unmaps were in flight are the
 * parent's. */
void rc_host_unmapping_forget(void);

#endif
