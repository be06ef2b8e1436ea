/* A cache's record in its process's statistics segment (stats_segment.h),
 * which regcache-stat reads, and the REGCACHE_STATS dump: a feature on the
 * cache's edge (listeners.h) that writes the record at create, on misses
 * at most every 100 ms and at a reset, gives it back at destroy and dumps
 * once the entries are deregistered. */
#ifndef RC_STATS_PUBLISH_H
#define RC_STATS_PUBLISH_H

struct regcache;
struct rc_options;

/* At create: claim a record and write it (without one - no segment, or
 * RC_STATSEG_CACHES caches shown already - the dump says why), and join
 * the cache's edge.  REGCACHE_OK or ERR_NO_MEMORY. */
int rc_stats_open(struct regcache *c, const struct rc_options *o);

/* Write c's record now (a reset). */
void rc_stats_publish_now(struct regcache *c);

#endif
