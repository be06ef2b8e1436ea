/* The host memory monitor's userfaultfd reader, regcache-uffd: a thread
 * that only reads the userfaultfd, posts what it reads to the queue of
 * unmaps (host_uffd.h) and wakes the monitor thread, which drains.  It
 * takes no lock and calls back nobody, so a thread whose unmap waits for
 * the read waits for nothing else, whatever locks it holds. */
#ifndef RC_HOST_READER_H
#define RC_HOST_READER_H

#include <stdbool.h>

/* Start the thread, with every signal blocked, once the userfaultfd is
 * open; true when it runs.  It calls `kick` to wake the monitor thread
 * after each read.  Under the monitor's life lock. */
bool rc_host_reader_start(void (*kick)(void));

/* Stop it (before the userfaultfd is closed).  Under the monitor's life
 * lock. */
void rc_host_reader_stop(void);

/* The child of a fork has no such thread. */
void rc_host_reader_forget(void);

#endif
