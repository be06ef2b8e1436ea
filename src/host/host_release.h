/* The host memory monitor's releasing thread, regcache-dereg: it
 * deregisters the entries the monitor's drains took out of the caches and
 * gives their leave notices (rc_host_watch_release()), so that no callback
 * ever runs inside a drain, on the thread that reads the userfaultfd, or
 * in a get that caught up with the monitor.  A callback that waits for an
 * application's lock then stalls this thread alone: nothing waits for it
 * but the deregistrations after it. */
#ifndef RC_HOST_RELEASE_H
#define RC_HOST_RELEASE_H

#include <stdbool.h>

/* Start the thread, with every signal blocked; true when it runs.  Under
 * the monitor's life lock. */
bool rc_host_release_start(void);

/* Stop it, once it has released what was asked before.  Under the
 * monitor's life lock. */
void rc_host_release_stop(void);

/* There is something to release: wake the thread.  Takes a lock that the
 * thread never holds across a callback.  Thread safe; not from a signal
 * handler. */
void rc_host_release_later(void);

/* The child of a fork has no such thread. */
void rc_host_release_forget(void);

#endif
