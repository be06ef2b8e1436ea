/* The registration backend as the core calls it: the built-in verbs
 * backend, or a user's struct regcache_backend behind an adapter.
 *
 * An entry may be registered on several rails (NICs); each rail's reg is a
 * call of its own, which keeps nothing open once it returns (a dmabuf is
 * exported for it and closed after it), so that what the library holds
 * does not grow with the entries cached. */
#ifndef RC_BACKEND_H
#define RC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "regcache.h"

struct rc_backend {
    /* 0 or an errno value, as regcache_backend.reg; `access` is the
     * IBV_ACCESS_* set the entry needs, `get_arg` that of the get whose
     * miss registers (regcache_get_with_arg()), or NULL. */
    int (*reg)(void *arg, uintptr_t addr, size_t len, int device, unsigned rail, int access,
               void *get_arg, void **handle);
    void (*dereg)(void *arg, void *handle);
    /* Optional: file descriptors the backend holds now (statistics). */
    uint64_t (*fds_held)(const void *arg);
    /* Optional: how it registers, for the stats dump. */
    void (*describe)(const void *arg, char *buf, size_t n);
    /* Optional: how `rail` registers GPU `device` (-1: one not seen yet)
     * now: enum regcache_dmabuf_mapping, and 1 for data-direct. */
    void (*rail_choice)(const void *arg, int device, unsigned rail, uint32_t *mapping,
                        uint32_t *data_direct);
    void *arg;
    /* The longest registration every rail takes (the NICs' max_mr_size);
     * 0: no limit known. */
    size_t max_len;
    /* The user's backend (a copy), when this adapts one. */
    struct regcache_backend user;
};

/* Adapt a user's backend: `b->arg` points back at b, so b must not move.
 * has_reg_access: the caller's header has that member (0.4 on). */
void rc_backend_adapt(struct rc_backend *b, const struct regcache_backend *user,
                      bool has_reg_access);

#endif
