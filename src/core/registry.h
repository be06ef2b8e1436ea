/* Every live cache of the process, for regcache_notify_free(), and what
 * fork() does to them. */
#ifndef RC_REGISTRY_H
#define RC_REGISTRY_H

#include <stdatomic.h>

struct regcache;

void rc_registry_add(struct regcache *c);
void rc_registry_remove(struct regcache *c);

/* Bumped in the child after fork(); a cache whose generation differs was
 * inherited and must not touch its registrations. */
extern atomic_uint rc_fork_generation_now;
static inline unsigned rc_fork_generation(void)
{
    return atomic_load_explicit(&rc_fork_generation_now, memory_order_relaxed);
}

#endif
