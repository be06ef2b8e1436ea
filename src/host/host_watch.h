/* A cache's side of the host memory monitor (host_monitor.h), a feature on
 * the cache's edge (listeners.h): it watches the cache's pageable host
 * entries, and what the monitor hears of leaves every cache that watches
 * (host_watch.c). */
#ifndef RC_HOST_WATCH_H
#define RC_HOST_WATCH_H

#include <stddef.h>

struct regcache;
struct rc_options;

/* At create: whether the cache's host entries are watched, and why (in
 * c->host_note); the feature joins the cache's edge.  REGCACHE_OK or
 * ERR_NO_MEMORY. */
int rc_host_watch_open(struct regcache *c, const struct rc_options *o);

/* How many of c's pageable host entries the monitor does not watch. */
size_t rc_host_watch_unwatched(const struct regcache *c);

#endif
