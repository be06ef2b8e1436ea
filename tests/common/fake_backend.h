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
    bool live;
};

/* What reg hands out: the tests check handles against it. */
struct fake_handle {
    uintptr_t start;
    size_t len;
    uint64_t id; /* buffer id of the allocation when registered */
    int device;
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
    /* Failure injection: the next fail_count regs fail with fail_errno. */
    int fail_errno, fail_count;
    /* Per-device capacity: reg fails with ENOSPC beyond it (a full BAR1). */
    size_t capacity;
    /* Called inside reg, to act while a registration is in flight. */
    void (*during_reg)(void *arg);
    void *during_reg_arg;
};

void fake_init(struct fake_backend *f);
/* Declare an allocation; returns its buffer id. */
uint64_t fake_alloc(struct fake_backend *f, uintptr_t base, size_t size, int device, int type);
/* The allocation at base goes away (queries report it unknown). */
void fake_free(struct fake_backend *f, uintptr_t base);
/* Free and reallocate at the same base: same range, new buffer id. */
uint64_t fake_realloc(struct fake_backend *f, uintptr_t base);
/* The buffer id now at addr, 0 if none. */
uint64_t fake_id_at(struct fake_backend *f, uintptr_t addr);
/* Fill params with defaults and this backend. */
void fake_params(struct fake_backend *f, struct regcache_params *p);

#endif
