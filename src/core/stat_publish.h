/* A cache's record in its process's statistics segment (stat_segment.h),
 * which regcache-stat reads. */
#ifndef RC_STAT_PUBLISH_H
#define RC_STAT_PUBLISH_H

#include <stdint.h>

struct regcache;

/* At create: claim a record and write it; without one (no segment, or
 * RC_STATSEG_CACHES caches shown already) c->stat_note says why. */
void rc_statseg_attach(struct regcache *c);

/* Write c's record now (a reset). */
void rc_statseg_publish(struct regcache *c);

/* On a miss, at clock reading `now` (clock.h; the miss's own where it
 * registered): write c's record when it last went out 100 ms ago or more. */
void rc_statseg_tick(struct regcache *c, uint64_t now);

/* At destroy: give the record back; the last one removes the segment. */
void rc_statseg_detach(struct regcache *c);

#endif
