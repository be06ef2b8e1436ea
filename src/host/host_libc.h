/* The host memory monitor's libc hooks: the entries of libc's munmap,
 * mremap, mmap, madvise, brk, sbrk, shmat and shmdt are patched (as the
 * interception patches libcuda) with a jump to a hook that posts the range
 * about to leave to the queue of unmaps (host_events.h), in the calling
 * thread, before libc goes on and again once it returns.  libc's own
 * calls - free() and realloc() unmapping a chunk, malloc trimming its
 * heap - reach the same entries.  A system call made without libc (the
 * loader's own munmap at dlclose() among them) is not seen. */
#ifndef RC_HOST_LIBC_H
#define RC_HOST_LIBC_H

#include <stddef.h>
#include <stdint.h>

/* Patch libc once per process and prove that each hook is reached, through
 * the exported function and from inside free(): 1, or 0 with why[n].
 * Thread safe. */
int rc_host_libc_ensure(char *why, size_t n);

/* Whether a patcher that came later rewrote an entry (UCX's ucm, for one,
 * calls the system itself, not what it replaced): then the hooks are
 * patched again on top of it - so that they are reached first and call on
 * into its code - and every watched range is queued for invalidation,
 * since unmaps went unseen meanwhile.  A few loads when nothing changed.
 * Thread safe. */
void rc_host_libc_check(void);

#endif
