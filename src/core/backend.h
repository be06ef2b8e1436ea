/* The registration backend as the core calls it: the built-in verbs
 * backend, or a user's struct regcache_backend behind an adapter.
 *
 * An entry may be registered on several rails (NICs).  What its rails share
 * - the dmabuf that CUDA exported for it - lives in the entry as a
 * struct rc_shared, made by the first reg that needs it and released with
 * the entry (or once every rail is registered). */
#ifndef RC_BACKEND_H
#define RC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

struct rc_shared {
    int fd;          /* dmabuf of the entry's range; -1: none yet */
    uint64_t offset; /* of the range's start within the dmabuf */
};

#define RC_SHARED_NONE ((struct rc_shared){ .fd = -1, .offset = 0 })

struct rc_backend {
    /* 0 or an errno value, as regcache_backend.reg. */
    int (*reg)(void *arg, uintptr_t addr, size_t len, int device, unsigned rail,
               struct rc_shared *shared, void **handle);
    void (*dereg)(void *arg, void *handle);
    /* Optional: release what reg put into *shared. */
    void (*release_shared)(void *arg, struct rc_shared *shared);
    void *arg;
    /* The user's backend (a copy), when this adapts one. */
    struct regcache_backend user;
};

/* Adapt a user's backend: `b->arg` points back at b, so b must not move. */
void rc_backend_adapt(struct rc_backend *b, const struct regcache_backend *user);

#endif
