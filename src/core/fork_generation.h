/* Which fork of the process this is: bumped in every fork child, so that
 * what was made before a fork (a cache, its workers' state) knows it was
 * inherited and must not touch the parent's registrations. */
#ifndef RC_FORK_GENERATION_H
#define RC_FORK_GENERATION_H

#include <stdatomic.h>

extern atomic_uint rc_fork_generation_now;

static inline unsigned rc_fork_generation(void)
{
    return atomic_load_explicit(&rc_fork_generation_now, memory_order_relaxed);
}

/* At cache creation: from now on every fork child bumps the generation
 * (its handler is installed once). */
void rc_fork_generation_watch(void);

#endif
