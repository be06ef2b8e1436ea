/* Registering an entry with the backend, on one rail: when the backend
 * reports exhausted resources the device's least-recently-used unused
 * entries make room and the registration is tried again. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "hold.h"
#include "last_error.h"

/* Rounds of evict-and-retry before a registration gives up. */
#define RC_EVICT_ROUNDS 16

/* The errno values with which nvidia-peermem, dmabuf and the verbs core
 * report that pinning space ran out.  EFAULT is one only while the memory
 * is still there: see rc_register_rail().  EMFILE and ENFILE: no file
 * descriptor for the dmabuf export; the dmabufs of the MRs evicted are
 * files the system counts, and the application's own may close meanwhile. */
static bool exhausted(int err)
{
    return err == ENOMEM || err == ENOSPC || err == EAGAIN || err == EFAULT || err == EMFILE ||
           err == ENFILE;
}

/* Host memory that the kernel will not pin as asked: unmapped (EFAULT),
 * PROT_NONE or without the protection the access needs (EFAULT, EPERM,
 * EINVAL from ib_umem_get).  No eviction frees such an address, so it is
 * not exhaustion.  GPU memory keeps nvidia-peermem's EFAULT rule. */
static bool bad_host_address(const struct regcache_entry *e, int err)
{
    return e->device == REGCACHE_DEVICE_HOST && (err == EFAULT || err == EINVAL || err == EPERM);
}

/* The IBV_ACCESS_* bits of params.access, in words, for the message. */
static void access_words(int access, char *buf, size_t n)
{
    static const char *const names[] = { "local write", "remote write", "remote read",
                                         "remote atomic" };
    size_t used = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (access & 1 << i && used < n)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", names[i]);
    if (!buf[0])
        snprintf(buf, n, "local read only");
}

static __attribute__((cold)) int bad_address(const struct regcache_entry *e, unsigned rail, int err)
{
    char access[80];
    access_words((int)(e->access & ~RC_ACCESS_DEFAULT), access, sizeof(access));
    return rc_fail(REGCACHE_ERR_BAD_ADDRESS,
                   "registering host memory [%#jx, %#jx) on rail %u failed: %s: it is not mapped, "
                   "or its protection does not allow the access asked for (%s); nothing was "
                   "evicted",
                   (uintmax_t)e->node.start, (uintmax_t)e->node.end, rail, strerror(err), access);
}

/* One call of the backend's reg for e on `rail`: its status (an errno),
 * and on success the handle in place. */
static inline int reg_once(struct regcache *c, struct regcache_entry *e, unsigned rail,
                           void *get_arg)
{
    void *handle = NULL;
    rc_clear_error();
    int err = c->backend.reg(c->backend.arg, e->node.start, rc_entry_len(e), e->device, rail,
                             (int)(e->access & ~RC_ACCESS_DEFAULT), get_arg, &handle);
    if (err)
        return err;
    e->handles[rail] = handle; /* counted by the caller, under the lock */
    return 0;
}

/* The registration failed with err: evict and try again while that may
 * help.  Out of line, so that a registration that succeeds at once saves
 * no registers for the loop. */
static __attribute__((noinline, cold)) int register_after_failure(struct regcache *c,
                                                                  struct regcache_entry *e,
                                                                  unsigned rail, bool speculative,
                                                                  void *get_arg, int err)
{
    struct rc_device *d = &c->dev[e->device_slot];
    size_t len = rc_entry_len(e);
    size_t evicted = 0;
    for (unsigned round = 0;; round++) {
        rc_count(&d->n.reg_failures);
        rc_stats_failed(c, e, rail);
        if (bad_host_address(e, err))
            return bad_address(e, rail, err);
        if (!exhausted(err)) {
            /* Keep what the backend itself said (a CUDA export error). */
            rc_prefix_error("registering %zu bytes at %#jx on rail %u failed: reg returned %d (%s)",
                            len, (uintmax_t)e->node.start, rail, err, strerror(err));
            return REGCACHE_ERR_BACKEND;
        }
        if (err == EFAULT && !rc_entry_memory_current(c, e))
            return rc_fail(REGCACHE_ERR_NOT_GPU,
                           "registering %zu bytes at %#jx on rail %u failed with EFAULT and the "
                           "memory is no longer what the cache was asked for (freed or "
                           "remapped): nothing was evicted",
                           len, (uintmax_t)e->node.start, rail);
        if (round == RC_EVICT_ROUNDS) {
            rc_lock(&c->lock);
            size_t left = d->lru.count, held = rc_lru_held(&d->lru);
            rc_unlock(&c->lock);
            return rc_fail(REGCACHE_ERR_NO_SPACE,
                           "registering %zu bytes at %#jx on rail %u: resources still exhausted "
                           "(%s) after %u rounds of eviction (%zu entries evicted); %zu entries "
                           "of the device remain, %zu of them held",
                           len, (uintmax_t)e->node.start, rail, strerror(err), RC_EVICT_ROUNDS,
                           evicted, left, held);
        }
        struct regcache_entry *victims = NULL;
        rc_lock(&c->lock);
        size_t have = atomic_load_explicit(&d->bytes, memory_order_relaxed);
        size_t now = rc_evict_locked(c, d, have > len ? have - len : 0, SIZE_MAX, speculative,
                                     REGCACHE_REASON_EVICT_EXHAUSTED, &victims);
        size_t left = d->lru.count;
        rc_unlock(&c->lock);
        rc_release_victims(c, victims);
        if (!now)
            return rc_fail(REGCACHE_ERR_NO_SPACE,
                           "registering %zu bytes at %#jx on rail %u: resources exhausted (%s) "
                           "and no unused entry of the device is left to evict (%zu entries, "
                           "all held; %zu evicted before)",
                           len, (uintmax_t)e->node.start, rail, strerror(err), left, evicted);
        evicted += now;
        err = reg_once(c, e, rail, get_arg);
        if (!err)
            return REGCACHE_OK;
    }
}

/* params.on_register refused the registration just made: undo it. */
static __attribute__((noinline, cold)) int refused(struct regcache *c, struct regcache_entry *e,
                                                   unsigned rail, int ret)
{
    c->backend.dereg(c->backend.arg, e->handles[rail]);
    e->handles[rail] = NULL;
    return rc_fail(REGCACHE_ERR_CALLBACK,
                   "params.on_register returned %d for [%#jx, %#jx) on rail %u: the "
                   "registration was undone",
                   ret, (uintmax_t)e->node.start, (uintmax_t)e->node.end, rail);
}

/* Timed here, on the miss path, with whatever eviction it took: what the
 * get that waited for it saw; the caller counts it under the lock. */
int rc_register_rail(struct regcache *c, struct regcache_entry *e, unsigned rail, bool speculative,
                     void *get_arg, struct rc_reg_time *t)
{
    t->begun = rc_clock_now();
    int err = reg_once(c, e, rail, get_arg);
    int rc = err ? register_after_failure(c, e, rail, speculative, get_arg, err) : REGCACHE_OK;
    if (rc != REGCACHE_OK)
        return rc;
    t->ended = rc_clock_now();
    const struct regcache_params *p = &c->opts.params;
    int ret = p->on_register
                  ? p->on_register(p->callback_arg, rc_counted_handle(e, rail), rail,
                                   e->handles[rail], c->pool.priv_size ? rc_entry_priv(e) : NULL)
                  : 0;
    return ret ? refused(c, e, rail, ret) : REGCACHE_OK;
}
