/* A registration backend for tests: it describes made-up allocations
 * through the query callback (the cache never touches the memory), counts
 * every reg and dereg, and fails on request. */
#ifndef FAKE_BACKEND_H
#define FAKE_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "regcache.h"

#define FAKE_MAX_ALLOCS 4096

struct fake_alloc {
    uintptr_t base;
    size_t size;
    uint64_t id;
    int device, type;
    unsigned flags; /* regcache_mem_info.flags reported */
    bool pageable;  /* reported without a buffer id (the id still changes) */
    bool live;
};

/* What reg hands out: the tests check handles against it. */
struct fake_handle {
    uintptr_t start;
    size_t len;
    uint64_t id; /* buffer id of the allocation when registered (reported
                    or not) */
    int device, rail;
    unsigned sync_memops; /* recorded by an on_handle hook that asks a
                             driver (drv_cache.c), else 0 */
    int access;           /* what reg_access was told (fake_tell_access()),
                             else -1 */
    void *get_arg;        /* the get's argument reg_access was given */
    uint32_t serial;      /* the backend's registrations so far, this one
                             included: a key that names the registration */
    unsigned magic;
};

struct fake_backend {
    struct regcache_backend ops;
    pthread_mutex_t lock;
    struct fake_alloc allocs[FAKE_MAX_ALLOCS];
    int nallocs;
    uint64_t next_id;
    atomic_long regs, deregs, live, queries;
    atomic_size_t live_bytes[2]; /* device 0, device 1 */
    /* Failure injection: the next fail_count regs (on fail_rail, or any
     * when it is -1) fail with fail_errno. */
    int fail_errno, fail_count, fail_rail;
    /* Per-device capacity: reg fails with ENOSPC beyond it (a full BAR1). */
    size_t capacity;
    /* Called inside reg, to act while a registration is in flight. */
    void (*during_reg)(void *arg);
    void *during_reg_arg;
    /* Called inside reg once the handle is filled in, to record what a
     * driver says of the memory (for caches without the query callback). */
    void (*on_handle)(void *arg, struct fake_handle *h);
    void *on_handle_arg;
    /* Called inside dereg, before the handle is freed. */
    void (*during_dereg)(void *arg, const struct fake_handle *h);
    void *during_dereg_arg;
    /* Called by query after it described addr (the answer is already
     * given), to act between a miss's query and what follows it.  Tag
     * checks of backends with a query callback are queries too. */
    void (*during_query)(void *arg, const void *addr);
    void *during_query_arg;
    /* Returned by every query while non-zero (a REGCACHE_ERR_* code), as a
     * backend reports memory it cannot describe. */
    int query_status;
};

void fake_init(struct fake_backend *f);
/* Declare an allocation; returns its buffer id. */
uint64_t fake_alloc(struct fake_backend *f, uintptr_t base, size_t size, int device, int type);
/* Declare an allocation like *like (base, size, device, type, flags,
 * pageable); returns its buffer id. */
uint64_t fake_alloc_as(struct fake_backend *f, const struct fake_alloc *like);
/* The allocation at base goes away (queries report it unknown). */
void fake_free(struct fake_backend *f, uintptr_t base);
/* Free and reallocate at the same base: same range, new buffer id. */
uint64_t fake_realloc(struct fake_backend *f, uintptr_t base);
/* The buffer id now at addr, 0 if none. */
uint64_t fake_id_at(struct fake_backend *f, uintptr_t addr);
/* From now on the backend has reg_access instead of reg: each handle
 * records the access and the get's argument it was told.  Before
 * fake_params() or fx_create(). */
void fake_tell_access(struct fake_backend *f);
/* Fill params with defaults and this backend. */
void fake_params(struct fake_backend *f, struct regcache_params *p);

#endif
