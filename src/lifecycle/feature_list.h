/* The features a cache's params may ask for (feature_list.c). */
#ifndef RC_FEATURE_LIST_H
#define RC_FEATURE_LIST_H

struct regcache;

/* At create, once the cache is set up and before it is shared: each
 * feature the params ask for registers its listener.  REGCACHE_OK, or the
 * first failure (the listeners registered so far then get on_destroy). */
int rc_features_open(struct regcache *c);

#endif
