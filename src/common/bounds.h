/* The fixed sizes the cache's tables are built with. */
#ifndef RC_BOUNDS_H
#define RC_BOUNDS_H

#include "regcache.h"

/* CUDA ordinals 0..RC_MAX_DEVICES-1, plus one slot for host memory. */
#define RC_MAX_DEVICES 64
#define RC_HOST_SLOT RC_MAX_DEVICES
#define RC_DEVICE_SLOTS (RC_MAX_DEVICES + 1)

#define RC_MAX_RAILS REGCACHE_MAX_RAILS

#endif
