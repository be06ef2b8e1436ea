/* How copies of the library in one process share one set of libc hooks.
 *
 * Two libraries that each embed regcache (its symbols hidden in both) would
 * each patch libc, each patch again on top of the other, and send every
 * mmap and munmap round both hooks for ever.  Instead the copy that patches
 * libc first owns the hooks, and stores its record beside each thunk
 * (rc_patch_set's owner); a copy that finds libc's munmap jumping into such
 * a thunk (rc_patch_owner) joins that record, and from then on the owner's
 * hooks hand every range that leaves to the joined copy as well, before the
 * call and after it (host_leave.h), so that the joined copy's caches have
 * no unmap window either.  No symbol is looked up: the record is found
 * through the patched code itself, and its layout is fixed per version,
 * so that copies of different versions still find each other. */
#ifndef RC_HOST_RENDEZVOUS_H
#define RC_HOST_RENDEZVOUS_H

#include <stdbool.h>
#include <stdint.h>

/* What a joined copy does with a range that leaves, as a hook itself
 * would: lock-free and async-signal-safe.  `begin` before the call (a
 * token for `end`), `end` after it; `post`, once, is all an owner of
 * version 1 of the record calls. */
typedef void (*rc_rendezvous_post)(uintptr_t start, uintptr_t end);
typedef int (*rc_rendezvous_begin)(uintptr_t start, uintptr_t end);
typedef void (*rc_rendezvous_end)(uintptr_t start, uintptr_t end, int token);

struct rc_rendezvous_peer {
    rc_rendezvous_post post;
    rc_rendezvous_begin begin;
    rc_rendezvous_end end;
};

/* The most copies one owner hands ranges to: one per library that embeds
 * regcache beside the owner. */
#define RC_RENDEZVOUS_PEERS 16

/* What the owner's hook keeps from before its call to after it: which
 * joined copies began (those that joined meanwhile get a post after the
 * call only), with their tokens. */
struct rc_rendezvous_marks {
    uint32_t begun;
    int token[RC_RENDEZVOUS_PEERS];
};

/* This copy's record, the owner of the set it patches. */
void *rc_rendezvous_mine(void);

/* This copy's hooks passed their self-test, or failed it (then copies that
 * wait to join it patch libc themselves).  Once, after the patch. */
void rc_rendezvous_settle(bool proven);

/* Join the copy whose record is `owner` (not this copy's): 1 once its hooks
 * are proven and hand ranges to `me` (to me->post alone where the owner
 * is of version 1); 0 when they failed their self-test or their copy
 * cannot take another; -1 when `owner` is no record this copy understands.
 * Waits while the owner's self-test runs.  Thread safe. */
int rc_rendezvous_join(void *owner, const struct rc_rendezvous_peer *me);

/* From a hook, before its call: [start, end) to every copy that joined
 * this one, marks for after it.  Lock-free and async-signal-safe. */
void rc_rendezvous_forward_begin(uintptr_t start, uintptr_t end, struct rc_rendezvous_marks *m);

/* From the hook, after its call. */
void rc_rendezvous_forward_end(uintptr_t start, uintptr_t end, const struct rc_rendezvous_marks *m);

#endif
