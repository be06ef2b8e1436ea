/* regcache_reset_stats(): the figures start again from now, and the
 * cache's record in the statistics segment says so at once. */
#include "cache.h"
#include "last_error.h"
#include "stats_publish.h"
#include "stats_read.h"

int regcache_reset_stats(regcache_t *c)
{
    if (!c)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_reset_stats: cache is NULL");
    /* Its locks may be held by parent threads that are not here. */
    if (rc_forked(c))
        return rc_fail(REGCACHE_ERR_FORKED,
                       "regcache_reset_stats: the cache was created before fork()");
    rc_stats_rebase(c);
    rc_stats_publish_now(c);
    return REGCACHE_OK;
}
