/* A cache over the fake CUDA driver (fake_driver.h), on the shared cache
 * fixture (cache_fixture.h): the fake backend without its query callback,
 * so every miss and tag check asks the driver through rc_cuda_query(), and
 * each of its handles records what the driver said of the memory at the
 * registration's start when it was registered (the buffer id in id, and
 * SYNC_MEMOPS). */
#ifndef DRV_CACHE_H
#define DRV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cache_fixture.h"
#include "regcache.h"

/* cmocka setup: fx_setup(), a fresh driver and a TAG_CHECK cache over it
 * (no host memory) in fx.c. */
int drv_cache_setup(void **state);
/* cmocka teardown: fx_teardown() (every registration released once the
 * cache is gone), and the driver uninstalled. */
int drv_cache_teardown(void **state);

/* Another cache like f's, that accepts host memory or not. */
regcache_t *drv_cache_create(struct fx *f, int host_memory);
/* Replace f's cache by a fresh one that accepts host memory or not; every
 * registration of the old one must be released. */
void drv_cache_reopen(struct fx *f, int host_memory);

/* A get on f's cache that must succeed; what reg recorded. */
const struct fake_handle *drv_get(struct fx *f, uintptr_t addr, size_t len, regcache_entry_t **e);

#endif
