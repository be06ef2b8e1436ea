/* The core's edge: what features standing on the cache hear of its entries.
 *
 * A feature that mirrors or reacts to the cache's entries registers one
 * listener at create, when the params ask for it; from then on the core
 * calls the listener table, never a feature by name.  Each event is named
 * for what happened to the cache, and says under which lock it comes:
 *
 *   after_register   an entry became servable (published, or one more of
 *                    its rails registered).  Under the cache lock.
 *   on_leave         a published entry left the cache (evicted,
 *                    invalidated, replaced, flushed, destroyed): no get
 *                    serves it from now on.  Under the cache lock.
 *   before_deregister  without the lock, just before the backend
 *                    deregisters an entry that left.  Every published
 *                    entry passes here once, after its on_leave.
 *   on_invalidate    without the lock, at the end of an invalidation (a
 *                    free seen, regcache_invalidate()), before the call
 *                    returns: only while some listener said it has work
 *                    pending (rc_listener_pending).
 *   on_destroy       at regcache_destroy(), before the workers stop and
 *                    the entries are deregistered: the listener's last
 *                    event (the table is empty after it).
 *
 * The hit path never looks at the table.  A miss with no listener pays one
 * load; with listeners, a few indirect calls.  Listeners under the lock
 * must be short (no system call, no waiting): whatever takes time belongs
 * in the events without it. */
#ifndef RC_LISTENERS_H
#define RC_LISTENERS_H

#include <stdbool.h>
#include <stdint.h>

#include "entry.h"
#include "regcache.h"

struct regcache;

/* What a listener is told of an entry: valid during the call. */
struct rc_entry_view {
    /* The entry's identity: the same from its after_register to its
     * before_deregister, and given to no other entry in between. */
    const void *id;
    uintptr_t start, end;     /* the requests it serves: [start, end) */
    int device;               /* CUDA ordinal or REGCACHE_DEVICE_HOST */
    unsigned rails;           /* bit r: registered on rail r */
    void *const *handles;     /* handles[r] for each rail in rails */
    bool default_access;      /* its access covers params.access */
    enum regcache_reason why; /* on_leave, before_deregister: why it left */
};

struct rc_listener {
    void (*after_register)(void *arg, const struct rc_entry_view *e);
    void (*on_leave)(void *arg, const struct rc_entry_view *e);
    void (*before_deregister)(void *arg, const struct rc_entry_view *e);
    void (*on_invalidate)(void *arg, uintptr_t start, uintptr_t end);
    void (*on_destroy)(void *arg);
};

#define RC_LISTENERS 4

/* In struct regcache, with the pending bits beside what free notices read
 * (cache.h). */
struct rc_listeners {
    unsigned n; /* set at create, read by every miss */
    struct {
        const struct rc_listener *ops;
        void *arg;
    } l[RC_LISTENERS];
};

/* At create, before the cache is shared: ops (a static table; any event
 * may be NULL) hears every event of c from now on, with arg.  Returns the
 * listener's number (for rc_listener_pending), or -1 when the table is
 * full. */
int rc_listen(struct regcache *c, const struct rc_listener *ops, void *arg);

/* The arg of c's listener with these ops, or NULL. */
void *rc_listener_arg(const struct regcache *c, const struct rc_listener *ops);

/* Listener `id` has (or no longer has) work pending that on_invalidate
 * finishes.  Set under the cache lock before the unlink of the entry that
 * a free notice's filter would then miss (release: such a notice reads
 * the bits after the filter). */
void rc_listener_pending(struct regcache *c, int id, bool on);

/* fn(arg) under the cache lock: a listener attaching something late
 * (rc_listeners_each_locked) sees no event twice and misses none. */
void rc_listeners_locked(struct regcache *c, void (*fn)(void *arg), void *arg);

/* Read now what the first registration of memory of CUDA device `device`
 * needs (its budget, which may ask NVML, and its ledger): for a feature
 * that registers from a thread where time matters.  Without the lock. */
void rc_listeners_ready_device(struct regcache *c, int device);

/* Under the cache lock: fn for every entry in the cache, as after_register
 * told it. */
void rc_listeners_each_locked(struct regcache *c,
                              void (*fn)(void *arg, const struct rc_entry_view *e), void *arg);

/* What the core calls, through the inline checks of cache.h. */
void rc_listeners_call_registered(struct regcache *c, const struct regcache_entry *e);
void rc_listeners_call_leave(struct regcache *c, const struct regcache_entry *e,
                             enum regcache_reason why);
void rc_listeners_call_deregister(struct regcache *c, const struct regcache_entry *e);
void rc_listeners_call_invalidate(struct regcache *c, uintptr_t start, uintptr_t end);
void rc_listeners_call_destroy(struct regcache *c);

#endif
