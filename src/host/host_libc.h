/* The host memory monitor's libc hooks: the entries of libc's munmap,
 * mremap, mmap, madvise, brk, sbrk and shmdt are patched (as the interception
 * patches libcuda) with a jump to a hook that posts the range about to
 * leave to the queue of unmaps (host_events.h), in the calling thread,
 * before libc goes on.  libc's own calls - free() and realloc() unmapping
 * a chunk, malloc trimming its heap - reach the same entries.  A system
 * call made without libc is not seen: that is what the userfaultfd is
 * for. */
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

/* What a hook does with a range that leaves: [start, end) rounded out to
 * pages, posted to the queue of unmaps if it touches a watched range.
 * Lock-free and async-signal-safe; also the post of every other way that
 * hooks the calls (UCX's events, another copy's hooks). */
void rc_host_libc_post(uintptr_t start, uintptr_t end);

/* Whether madvise() with `advice` drops the pages (the next touch maps new
 * ones): MADV_DONTNEED, _FREE, _REMOVE, _DONTNEED_LOCKED. */
bool rc_host_advice_drops(int advice);

/* The ranges the hooks post: the union of the watched ranges, which only
 * grows until nothing is watched (then empty: lo > hi).  Under the
 * monitor's claims lock. */
void rc_host_libc_watch(uintptr_t lo, uintptr_t hi);

#endif
