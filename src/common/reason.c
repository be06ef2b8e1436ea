/* The names of the reasons entries leave the cache. */
#include "regcache.h"

const char *regcache_reason_name(int reason)
{
    static const char *const names[REGCACHE_REASON_COUNT] = {
        [REGCACHE_REASON_EVICT_BUDGET] = "evict-budget",
        [REGCACHE_REASON_EVICT_EXHAUSTED] = "evict-exhausted",
        [REGCACHE_REASON_FLUSH] = "flush",
        [REGCACHE_REASON_FREED_HOOK] = "freed-hook",
        [REGCACHE_REASON_FREED_MONITOR] = "freed-monitor",
        [REGCACHE_REASON_FREED_TAG] = "freed-tag",
        [REGCACHE_REASON_INVALIDATE] = "invalidate",
        [REGCACHE_REASON_DESTROY] = "destroy",
        [REGCACHE_REASON_REPLACED] = "replaced",
        [REGCACHE_REASON_MERGED] = "merged",
    };
    return reason >= 0 && reason < REGCACHE_REASON_COUNT ? names[reason] : "unknown";
}
