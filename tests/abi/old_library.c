/* Stands in for the unversioned 0.2 library at link time, so that the
 * consumer's references carry no version, as those of every program built
 * then do.  Only the names matter: the consumer runs against the real
 * library, and reaching one of these means it did not. */
#include <stdlib.h>

#define OLD(name)    \
    void name(void); \
    void name(void)  \
    {                \
        abort();     \
    }

OLD(regcache_params_init)
OLD(regcache_create)
OLD(regcache_destroy)
OLD(regcache_get)
OLD(regcache_put)
OLD(regcache_get_stats)
OLD(regcache_get_device_stats)
