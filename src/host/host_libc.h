/* The host memory monitor's libc hooks: the entries of libc's munmap,
 * mremap, mmap, madvise, brk, sbrk, shmat and shmdt are patched (as the
 * interception patches libcuda) with a jump to a hook that, in the calling
 * thread, lists the range about to leave in flight and posts it to the
 * queue of unmaps (host_events.h) before libc goes on, and posts it again
 * once libc returns (host_leave.h).  libc's own calls - free() and
 * realloc() unmapping a chunk, malloc trimming its heap - reach the same
 * entries.  A system call made without libc (the loader's own munmap at
 * dlclose() among them) is not seen.  The hooks act only once their
 * self-test has proven them. */
#ifndef RC_HOST_LIBC_H
#define RC_HOST_LIBC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Patch libc once per process and prove that each hook is reached, through
 * the exported function and from inside free(): 1, or 0 with why[n].
 * Where another copy of the library patched libc already, join its hooks
 * instead (host_rendezvous.h).  A failed test takes back what it wrote.
 * Thread safe. */
int rc_host_libc_ensure(char *why, size_t n);

/* Whether the hooks still see every call, after a look at whether a
 * patcher that came later rewrote an entry (UCX's ucm, for one, calls the
 * system itself, not what it replaced).  If one did, every watched range
 * is queued for invalidation, since unmaps went unseen meanwhile, and the
 * hooks take the front again: they join another copy of the library that
 * patched on top, else they are patched again on top of the newcomer (so
 * that they are reached first and call on into its code; their old thunks,
 * which its trampoline may lead to, go straight on to the function).  A
 * patcher that keeps patching on top in turn makes them give up after a
 * few rounds: false from then on.  A few loads when nothing changed.
 * Thread safe. */
bool rc_host_libc_check(void);

/* Whether madvise() with `advice` drops the pages (the next touch maps new
 * ones, or, behind a guard, faults): MADV_DONTNEED, _FREE, _REMOVE,
 * _DONTNEED_LOCKED, _GUARD_INSTALL. */
bool rc_host_advice_drops(int advice);

#endif
