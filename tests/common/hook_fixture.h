/* A cache over the libcuda test double, for the tests of both hooks (the
 * preload hook and the in-process interception): its backend describes
 * memory from the double's allocation table and logs each dereg into the
 * double's event log, so a test reads in one sequence when the cache let go
 * of a range and when the driver freed it.  Also every way a program
 * reaches the double's memory functions, and the check that a call through
 * one of them lets the caches go of memory before the driver frees it. */
#ifndef HOOK_FIXTURE_H
#define HOOK_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

#define FIXTURE_SIZE ((size_t)1 << 16)

/* Parameters of a cache (validation AUTO) over the double. */
void fixture_params(struct regcache_params *p);

/* Reset the double; create a cache (validation AUTO) over it. */
regcache_t *fixture_cache(void);

/* Make [addr, addr+len) a cached registration (get, then put). */
void fixture_cache_range(regcache_t *cache, uintptr_t addr, size_t len);

/* A fresh allocation of FIXTURE_SIZE bytes (host: pinned host memory),
 * cached. */
uintptr_t fixture_cached_alloc(regcache_t *cache, int host);

/* Index in the event log of the first dereg of a range starting at addr,
 * or of the first call of fn at addr (0 for the context calls); -1 when
 * there is none. */
long fixture_dereg_at(uintptr_t addr);
long fixture_call_of(const char *fn, uintptr_t addr);

/* The first dereg of a range at addr comes before the first call of `runs`
 * at call_addr. */
void fixture_assert_dereg_before(uintptr_t addr, const char *runs, uintptr_t call_addr);

/* Was the dereg at that log index made while its memory was allocated? */
int fixture_dereg_was_live(long index);

uint64_t fixture_notified(regcache_t *cache);

/* libcuda.so.1 (the double, loaded with the test). */
void *fixture_driver(void);

/* The double's own definition of an exported name, which must exist. */
void *fixture_own(const char *symbol);

/* What a driver function does to memory, which decides how it is tested. */
enum fixture_what {
    FIX_FREE,
    FIX_FREE_ASYNC,
    FIX_FREE_HOST,
    FIX_UNMAP,
    FIX_ADDRESS_FREE,
    FIX_CTX_GONE,
    FIX_DEVICE_GONE,
    FIX_ALLOC,
    FIX_ALLOC_ASYNC,
    FIX_ALLOC_POOL,
    FIX_MAP,
    FIX_ALLOC_HOST,       /* pinned host memory: cuMemAllocHost */
    FIX_ALLOC_HOST_FLAGS, /* and cuMemHostAlloc */
    FIX_GET_PROC,
    FIX_GET_PROC_V2
};

/* A memory function as cuGetProcAddress hands it out: name, version and
 * flags asked, and the double's function that must run (the double logs
 * under that name). */
struct fixture_variant {
    const char *proc;
    int version;
    unsigned flags;
    const char *runs;
    enum fixture_what what;
};
extern const struct fixture_variant fixture_procs[];
extern const size_t fixture_n_procs;

/* Each exported name, with the address a direct call from the test binds
 * to. */
struct fixture_export {
    const char *name;
    void *direct;
    enum fixture_what what;
};
extern const struct fixture_export fixture_exports[];
extern const size_t fixture_n_exports;

/* The double's function that runs when an export is called (for the two
 * cuGetProcAddress, the cuMemFree_v2 the check fetches through them). */
const char *fixture_runs(const struct fixture_export *e);

/* In a fresh cache, call fn, a function that does `what`, on cached memory:
 * a free must let the cache go of the memory before the double frees it,
 * an allocation over a stale cached range must drop it after the double
 * allocates and before the caller gets the memory, and a cuGetProcAddress
 * must hand out a cuMemFree that does so.  An allocation must also be
 * registered ahead of its first get in a cache with eager registration on
 * (and, for pinned host memory, be left alone by one that refuses host
 * memory).  `runs` is the double's function that must run. */
void fixture_check(enum fixture_what what, void *fn, const char *runs);

/* fixture_check of every fixture_procs variant, fetched through one
 * cuGetProcAddress (five_args: the _v2 form). */
void fixture_check_procs(void *gpa, int five_args);

#endif
