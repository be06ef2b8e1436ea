/* The host memory monitor's way through UCX's memory events.  Where UCX's
 * libucm is loaded, it hooks munmap, mremap, mmap, madvise, brk, sbrk,
 * shmat and shmdt itself (libc's entries, and its own allocator's calls)
 * and hands each call to the handlers registered with
 * ucm_set_event_handler(): the monitor registers handlers there instead of
 * patching libc again, so that the process has one set of hooks and no
 * patcher patches on top of another.  libucm is found at run time (dlopen
 * of the loaded library, dlsym), never linked.
 *
 * What ucm says, and when: UCM_EVENT_VM_UNMAPPED before the call, with the
 * range it takes away (ucm works out a segment's size for shmdt, the
 * break for brk); the call's own event (UCM_EVENT_MUNMAP and the rest) to
 * handlers of priority above 0 after the call.  A range begins to leave
 * at the first (listed in flight, posted) and ends at the second (posted
 * again), as through libc's hooks (host_leave.h): this way has no unmap
 * window either. */
#ifndef RC_HOST_UCM_H
#define RC_HOST_UCM_H

#include <stdbool.h>
#include <stddef.h>

/* Whether libucm is loaded in the process. */
bool rc_host_ucm_loaded(void);

/* Register the handlers once per process and prove that an unmap and
 * free() of a 64 MiB block reach them, before the call and after it: 1,
 * or 0 with why[n] (no libucm, UCX_MEM_EVENTS=no, a test that failed: the
 * handlers are then removed again).  Thread safe. */
int rc_host_ucm_ensure(char *why, size_t n);

#endif
