/* A cache over the fake CUDA driver (fake_driver.h): its backend has no
 * query callback, so every miss and tag check asks the driver through
 * rc_cuda_query(), and its reg records what the driver said of the memory
 * it registered. */
#ifndef DRV_CACHE_H
#define DRV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

/* What reg saw: the handle the cache hands back. */
struct reg_handle {
    uintptr_t start;
    size_t len;
    int device;
    unsigned long long buffer_id; /* of the allocation at start, at reg */
    unsigned int sync_memops;     /* ... and its SYNC_MEMOPS then */
};

/* Registrations made and released since drv_cache_setup(). */
extern int drv_regs, drv_deregs;

/* A TAG_CHECK cache over the driver (installed first), host memory
 * accepted or not. */
regcache_t *drv_cache_create(int host_memory);

/* The cache of the tests below, made by drv_cache_setup(). */
extern regcache_t *drv_cache;

/* cmocka setup: a fresh driver and a cache over it (no host memory). */
int drv_cache_setup(void **state);
/* cmocka teardown: every registration released once the cache is gone. */
int drv_cache_teardown(void **state);
/* Replace drv_cache by a fresh one that accepts host memory or not. */
void drv_cache_reopen(int host_memory);

/* A get on drv_cache that must succeed; what reg saw. */
const struct reg_handle *drv_get(uintptr_t addr, size_t len, regcache_entry_t **e);
struct regcache_stats drv_stats(void);

#endif
