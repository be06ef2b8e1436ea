/* A cache over the libcuda test double, for the hook tests: its backend
 * describes memory from the double's allocation table and logs each dereg
 * into the double's event log, so a test reads in one sequence when the
 * cache let go of a range and when the driver freed it. */
#ifndef HOOK_FIXTURE_H
#define HOOK_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

#define FIXTURE_SIZE ((size_t)1 << 16)

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

/* Was the dereg at that log index made while its memory was allocated? */
int fixture_dereg_was_live(long index);

uint64_t fixture_notified(regcache_t *cache);

#endif
