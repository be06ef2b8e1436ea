/* A counting registration backend over the real CUDA driver, for the hook's
 * GPU tests (C programs, the CUDA runtime program and, through ctypes,
 * PyTorch).  Its dereg asks the driver for the buffer id at the entry's
 * address: if it still matches the id seen at registration, the cache let
 * go of the memory before the driver freed it.  Its query counts every call,
 * so a test sees that hits in HOOKS mode make none. */
#ifndef GPU_BACKEND_H
#define GPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cache over this backend; validation REGCACHE_VALIDATE_*. */
int gb_create(int validation, int host_memory, regcache_t **cache);

/* Called first thing by every program: with GB_CACHE_FIRST set, create a
 * cache (validation AUTO) now and keep it to the end, so that a linked
 * library installs its in-process interception before the program
 * initialises CUDA or fetches any driver function.  0, or 1 when the cache
 * cannot be created. */
int gb_cache_first(void);

/* regcache_get then regcache_put on [addr, addr+len). */
int gb_touch(regcache_t *cache, uintptr_t addr, size_t len);

long gb_regs(void);
long gb_deregs(void);
long gb_deregs_valid(void); /* buffer id unchanged at dereg */
long gb_deregs_stale(void); /* memory already gone or reused at dereg */
long gb_queries(void);

/* How a program allocates and frees. */
struct gb_memory {
    const char *name;
    int host; /* pinned host memory */
    /* 0 on success */
    int (*alloc)(uintptr_t *ptr, size_t size, void *ctx);
    int (*free)(uintptr_t ptr, size_t size, void *ctx);
    void *ctx;
};

/* Under either hook: a cache in AUTO mode must be in HOOKS mode; allocations
 * cached, hit without any query, freed, reallocated; every free must reach
 * the backend's dereg while the buffer id is still valid, and no other
 * entry may go with it.  Prints what it saw; 0 when all held. */
int gb_run(const struct gb_memory *memory);

/* After a call that destroys a context with `live` cached allocations:
 * 0 when each was deregistered before the memory went. */
int gb_expect_deregs(const char *what, long deregs_before, long live);

#ifdef __cplusplus
}
#endif

#endif
