/* How copies of the library in one process share one set of libc hooks.
 *
 * Two libraries that each embed regcache (its symbols hidden in both) would
 * each patch libc, each patch again on top of the other, and send every
 * mmap and munmap round both hooks for ever.  Instead the copy that patches
 * libc first owns the hooks, and stores its record beside each thunk
 * (rc_patch_set's owner); a copy that finds libc's munmap jumping into such
 * a thunk (rc_patch_owner) joins that record, and from then on the owner's
 * hooks hand every range to the joined copy's post as well.  No symbol is
 * looked up: the record is found through the patched code itself, and its
 * layout is fixed per version, so that copies of different versions still
 * find each other. */
#ifndef RC_HOST_RENDEZVOUS_H
#define RC_HOST_RENDEZVOUS_H

#include <stdbool.h>
#include <stdint.h>

/* What a joined copy's hooks would do with a range that leaves: lock-free
 * and async-signal-safe, as a hook itself. */
typedef void (*rc_rendezvous_post)(uintptr_t start, uintptr_t end);

/* This copy's record, the owner of the set it patches. */
void *rc_rendezvous_mine(void);

/* This copy's hooks passed their self-test, or failed it (then copies that
 * wait to join it patch libc themselves).  Once, after the patch. */
void rc_rendezvous_settle(bool proven);

/* Join the copy whose record is `owner` (not this copy's): 1 once its hooks
 * are proven and hand ranges to `post`; 0 when they failed their self-test
 * or their copy cannot take another; -1 when `owner` is no record this copy
 * understands.  Waits while the owner's self-test runs.  Thread safe. */
int rc_rendezvous_join(void *owner, rc_rendezvous_post post);

/* From a hook: hand [start, end) to every copy that joined this one.
 * Lock-free and async-signal-safe. */
void rc_rendezvous_forward(uintptr_t start, uintptr_t end);

#endif
