/* What a wrapper of a CUDA memory function tells the caches, shared by the
 * preload hook and the in-process interception so that both behave alike:
 * frees notify before the real call (the memory, and its buffer id, are
 * still valid while a cache deregisters), allocations after it (a new
 * allocation over a cached range proves that a free went unseen) and
 * before the caller gets the memory.  Nothing is allocated and no lock is
 * held across the real call; with no cache alive a free costs one load. */
#ifndef RC_WRAP_H
#define RC_WRAP_H

#include <stdatomic.h>
#include <stddef.h>

#include "wrap_symbols.h"

/* rc_wrap_<kind>(real, arguments...): notify and call `real`, the driver's
 * function of that kind. */
#define RC_WRAP_PROTOTYPE(kind) CUresult rc_wrap_##kind(void *real, RC_WRAP_PARAMS_##kind);
RC_WRAP_KINDS(RC_WRAP_PROTOTYPE)
#undef RC_WRAP_PROTOTYPE

/* libcuda's own definition of `symbol`, past every wrapper, remembered in
 * *cache once found; NULL while the driver is not loaded (wrap_driver.c). */
void *rc_wrap_driver_function(_Atomic(void *) *cache, const char *symbol);

#endif
