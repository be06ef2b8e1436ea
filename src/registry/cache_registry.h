/* Every live cache of the process, for regcache_notify_free(), and what
 * fork() does to them. */
#ifndef RC_CACHE_REGISTRY_H
#define RC_CACHE_REGISTRY_H

struct regcache;

void rc_registry_add(struct regcache *c);
/* Unlink c, then wait until no thread still walks past it (a notify in
 * progress elsewhere may be deregistering its entries). */
void rc_registry_remove(struct regcache *c);

/* fn(c, arg) on every live cache, in the order of the newest first,
 * holding no lock: a destroy of c waits until fn has returned (and only
 * for that).  Thread safe. */
void rc_registry_each(void (*fn)(struct regcache *c, void *arg), void *arg);

/* rc_cache_fence_always() on every cache: what the switch to real fences
 * calls (asym_fence.h). */
void rc_registry_fence_everywhere(void);

#endif
