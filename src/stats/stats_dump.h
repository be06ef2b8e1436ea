/* The REGCACHE_STATS dump (stats_dump.c). */
#ifndef RC_STATS_DUMP_H
#define RC_STATS_DUMP_H

struct regcache;

/* Print c's statistics, why it validates as it does, its host memory, its
 * backend, its rails and budgets to stderr; `record_note`: why c has no
 * record in the statistics segment, or "". */
void rc_stats_dump(const struct regcache *c, const char *record_note);

#endif
