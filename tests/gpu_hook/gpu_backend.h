/* A checking registration backend over the real CUDA driver, for the GPU
 * tests (C programs, the CUDA runtime program and, through ctypes, PyTorch,
 * CuPy and JAX).  No NIC exists on the test machines, so nothing is pinned:
 * each registration records what a NIC would have been given, the memory
 * under the registered range at that moment (the buffer id of every
 * allocation or VMM mapping in it) and the device the cache named.
 *
 * Every get made through gb_checked_get() compares the memory its request
 * covers NOW with what the served registration was made for: a different
 * buffer id anywhere in the request is a stale registration.  Every dereg
 * compares the memory the registration was used for (the requests it served)
 * with what it was made for: equal means the cache let go of the memory
 * before the driver freed it.  The query callback of gb_create() counts every
 * call, so a test sees that hits in HOOKS mode make none; gb_create_driver()
 * leaves the memory to the library's own CUDA query, as the built-in verbs
 * backend does. */
#ifndef GPU_BACKEND_H
#define GPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cache over this backend, validation REGCACHE_VALIDATE_*, with the
 * backend's counting query. */
int gb_create(int validation, int host_memory, regcache_t **cache);

/* Called first thing by every program: with GB_CACHE_FIRST set, create a
 * cache (validation AUTO) now and keep it to the end, so that a linked
 * library installs its in-process interception before the program
 * initialises CUDA or fetches any driver function.  0, or 1 when the cache
 * cannot be created. */
int gb_cache_first(void);

/* A cache over this backend without a query callback: the library asks the
 * CUDA driver itself.  max_bytes as in struct regcache_params (0: the BAR1
 * budget).  REGCACHE_* environment variables override both arguments. */
int gb_create_driver(int validation, size_t max_bytes, regcache_t **cache);

/* What gb_checked_get() saw. */
enum gb_outcome {
    GB_SERVED = 0,       /* served by a registration of the memory there now,
                            attributed to the expected device */
    GB_STALE = 1,        /* served by a registration made for other memory */
    GB_WRONG_DEVICE = 2, /* the registration was attributed to another device */
    GB_REFUSED = 3,      /* refused, as expected: VMM memory created without
                            gpuDirectRDMACapable, with an error code newer
                            than REGCACHE_ERR_RANGE */
    GB_FAILED = 4,       /* regcache_get failed */
    GB_UNCHECKABLE = 5   /* the driver could not be asked about the memory */
};

/* `device` argument of gb_checked_get(): accept any device. */
#define GB_ANY_DEVICE (-100)
/* `current` argument of gb_checked_get(): leave the calling thread's
 * context as it is, or make no context current during the get. */
#define GB_CURRENT_KEEP (-1)
#define GB_CURRENT_NONE (-2)

/* regcache_get on [addr, addr+len) with the primary context of device
 * `current` current (or see GB_CURRENT_*; the caller's context is restored
 * after the get), then the checks above, then regcache_put.  The
 * registration must have been made for device `device` (or GB_ANY_DEVICE).
 * *status receives regcache_get's status; msg (if size > 0) says what went
 * wrong for every outcome but GB_SERVED.  Returns an enum gb_outcome. */
int gb_checked_get(regcache_t *cache, uintptr_t addr, size_t len, int device, int current,
                   int *status, char *msg, size_t size);

/* regcache_get that tells the backend the request, as gb_checked_get does:
 * the registration then knows which memory the get was for.  For tests that
 * hold entries. */
int gb_get(regcache_t *cache, uintptr_t addr, size_t len, regcache_entry_t **entry);

/* gb_checked_get with any device and the current context kept; prints the
 * message of a failed check.  0 when served by a registration of the memory
 * there now, regcache_get's REGCACHE_ERR_* when it failed, else the
 * (positive) gb_outcome. */
int gb_touch(regcache_t *cache, uintptr_t addr, size_t len);

/* What a registration handle (regcache_entry_handle) was made for at
 * address addr: the device the cache named in *device and the buffer id of
 * the memory at addr then in *buffer_id (0: none, or addr outside the
 * registration).  0, or -1 for addr outside the registered range. */
int gb_registered_for(const void *handle, uintptr_t addr, int *device,
                      unsigned long long *buffer_id);

/* What memory addr is now, by the driver's pointer attributes. */
enum gb_kind {
    GB_KIND_NONE = 0,   /* no CUDA memory (freed, unmapped, never allocated) */
    GB_KIND_MALLOC = 1, /* cuMemAlloc / cudaMalloc */
    GB_KIND_POOL = 2,   /* stream-ordered pool: cuMemAllocAsync / cudaMallocAsync */
    GB_KIND_VMM = 3,    /* cuMemCreate + cuMemMap */
    GB_KIND_HOST = 4,   /* pinned host memory */
    GB_KIND_MANAGED = 5 /* managed (unified) memory */
};
/* The kind of the memory at addr, and its buffer id in *buffer_id (0 for
 * GB_KIND_NONE). */
int gb_memory_kind(uintptr_t addr, unsigned long long *buffer_id);

/* One of the cache's statistics by its name in struct regcache_stats
 * ("hits", "misses", ...), or -1 for an unknown name or a failed call: a
 * ctypes caller then needs no copy of the struct's layout. */
long long gb_stat(const regcache_t *cache, const char *name);

/* Backend counters, over every cache of the process. */
long gb_regs(void);
long gb_deregs(void);
long gb_deregs_valid(void); /* the memory used was the registered one at dereg */
long gb_deregs_stale(void); /* memory already gone or reused at dereg */
long gb_queries(void);

/* Whether a dereg after the memory changed is printed (default 1).  Without
 * a hook (TAG_CHECK) such deregs are expected: the cache learns of a free
 * only when it next meets the entry. */
void gb_report_stale_deregs(int on);

/* Per device (an ordinal, or REGCACHE_DEVICE_HOST): registrations and
 * deregistrations made, and the bytes registered now. */
long gb_regs_on(int device);
long gb_deregs_on(int device);
long gb_bytes_on(int device);

/* Make reg answer ENOSPC (resources exhausted, as nvidia-peermem reports a
 * full BAR1) when a registration would take `device` past `bytes`
 * registered; 0 lifts the limit. */
void gb_set_capacity(int device, size_t bytes);

/* How a program allocates and frees. */
struct gb_memory {
    const char *name;
    int host; /* pinned host memory */
    /* 0 on success */
    int (*alloc)(uintptr_t *ptr, size_t size, void *ctx);
    int (*free)(uintptr_t ptr, size_t size, void *ctx);
    void *ctx;
    int eager; /* alloc is one the hooks report: eager registration serves
                  its first get */
};

/* Under either hook: a cache in AUTO mode must be in HOOKS mode; allocations
 * cached, hit without any query, freed, reallocated; every free must reach
 * the backend's dereg while the buffer id is still valid, and no other
 * entry may go with it.  With memory->eager, then in a cache with eager
 * registration on (and host memory taken for pinned memory), the first get
 * of every new allocation must be a hit.  Prints what it saw; 0 when all
 * held. */
int gb_run(const struct gb_memory *memory);

/* After a call that destroys a context with `live` cached allocations:
 * 0 when each was deregistered before the memory went. */
int gb_expect_deregs(const char *what, long deregs_before, long live);

#ifdef __cplusplus
}
#endif

#endif
