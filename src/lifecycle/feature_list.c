/* The features a cache's params may ask for.  Each stands on the cache's
 * edge (listeners.h): at create it is asked whether the params want it,
 * and registers its listener if they do; from then on the core calls only
 * the listener table. */
#include "feature_list.h"

#include "cache.h"
#include "device_keys.h"
#include "host_watch.h"
#include "prefetch.h"
#include "stats_publish.h"

/* In the order they stop at destroy (listeners.h): background
 * registration's workers first, as they register through the cache; the
 * statistics last, as every registration before tells them. */
static int (*const features[])(struct regcache *c, const struct rc_options *o) = {
    rc_prefetch_open,
    rc_device_keys_open,
    rc_host_watch_open,
    rc_stats_open,
};

int rc_features_open(struct regcache *c)
{
    for (size_t i = 0; i < sizeof features / sizeof features[0]; i++) {
        int rc = features[i](c, &c->opts);
        if (rc != REGCACHE_OK)
            return rc;
    }
    return REGCACHE_OK;
}
