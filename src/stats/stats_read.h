/* Reading a cache's statistics (stats_read.c), for the other files of
 * src/stats. */
#ifndef RC_STATS_READ_H
#define RC_STATS_READ_H

#include <stdbool.h>

#include "regcache.h"

struct regcache;

/* Whether the cache has seen the device slot (its budget is set). */
bool rc_stats_seen(const struct regcache *c, int slot);

/* The latency histogram of a slot (-1: all) and rail (-1: all) since the
 * last reset, into l (p50/p99 filled). */
void rc_stats_latency(const struct regcache *c, int slot, int rail, struct regcache_latency *l);

/* A reset: the counters as they stand become the baseline the figures
 * are read from, and the peaks drop to the bytes registered now. */
void rc_stats_rebase(struct regcache *c);

#endif
