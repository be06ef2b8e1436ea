/* The IBV_ACCESS_* bits the cache reasons about, with verbs.h's values
 * (the verbs backend checks them; the rest of the library does not
 * include verbs.h), and the one rule verbs sets on their sets. */
#ifndef RC_ACCESS_H
#define RC_ACCESS_H

#define RC_IBV_LOCAL_WRITE 1
#define RC_IBV_REMOTE_WRITE 2
#define RC_IBV_REMOTE_READ 4
#define RC_IBV_REMOTE_ATOMIC 8

/* Verbs registers remote write or remote atomic access only with local
 * write (the kernel refuses the set with EINVAL): the access a get or
 * params.access asks for is registered with it added. */
static inline int rc_access_with_local_write(int access)
{
    return access & (RC_IBV_REMOTE_WRITE | RC_IBV_REMOTE_ATOMIC) ? access | RC_IBV_LOCAL_WRITE
                                                                 : access;
}

#endif
