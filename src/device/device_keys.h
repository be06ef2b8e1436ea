/* Device key tables (include/regcache_device.h): the feature's way in. */
#ifndef RC_DEVICE_KEYS_H
#define RC_DEVICE_KEYS_H

#include "options.h"

struct regcache;

/* At create: with params.device_keys, the cache gets the listener that
 * keeps its tables (none yet); REGCACHE_OK, or why not. */
int rc_device_keys_open(struct regcache *c, const struct rc_options *o);

#endif
