/* The core's edge: what features standing on the cache hear of it.
 *
 * A feature (background registration, statistics publishing, the host
 * memory monitor's watches, keys for GPU kernels) registers one listener
 * at create; from then on the core calls the listener table, never a
 * feature by name.  Each event is named for what happens to the cache, and
 * says under which lock it comes:
 *
 *   before_miss      a get is about to register [start, end) on rq's rail
 *                    (a new entry; for a non-blocking get also another
 *                    rail of one): REGCACHE_OK lets it, any other status
 *                    ends the get with it.  Only while some listener has
 *                    work pending (rc_listener_pending: what it keeps for
 *                    the gets that follow), and for every non-blocking
 *                    get, whose miss (rc_get_nonblocking) never registers
 *                    on the getting thread: the listener that registers in
 *                    the background takes it.  Without the lock.
 *   after_miss       a miss ended (a get's or a background one), at clock
 *                    reading `now` (clock.h).  Without the lock.
 *   before_register  an entry of pageable host memory is about to be
 *                    registered for the first time: the listener that
 *                    watches such memory (at most one takes this event)
 *                    returns its mark for the entry, which the entry keeps
 *                    until after its deregistration.  Without the lock.
 *   before_publish   an entry it marked is registered and about to join
 *                    the cache: a reason (REGCACHE_REASON_FREED_MONITOR)
 *                    when its memory may be going already - the
 *                    registration is then handed out once, never cached -
 *                    else REGCACHE_REASON_COUNT.  Under the cache lock.
 *   after_deregister an entry it marked is deregistered (or never was
 *                    registered): the mark goes.  Without the lock.
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
 *   on_alloc         memory was allocated at [start, end)
 *                    (regcache_notify_alloc(), or pinned host memory:
 *                    regcache_notify_host_alloc()), after the notice
 *                    dropped what the cache held there.  Without the lock.
 *   on_destroy       at regcache_destroy(), in the order the listeners
 *                    registered, before the entries are deregistered:
 *                    the feature stops what runs on its own (a thread
 *                    that registers through the cache stops here, and so
 *                    the listeners after it still hear it).  After it a
 *                    listener hears nothing but the drain: after_deregister
 *                    of what it marked, and after_drain.
 *   after_drain      at regcache_destroy(), once every entry is
 *                    deregistered, in the reverse order (what a listener
 *                    uses of another that registered before it is still
 *                    there): the last event (the table is empty after
 *                    it).
 *
 * The hit path never looks at the table, and an event no listener takes
 * costs one load and a branch; one that some take, an indirect call to
 * each.  Listeners under the lock must be short (no system call, no
 * waiting): whatever takes time belongs in the events without it. */
#ifndef RC_LISTENERS_H
#define RC_LISTENERS_H

#include <stdbool.h>
#include <stdint.h>

#include "entry.h"
#include "regcache.h"

struct regcache;

/* What the listener that watches pageable host memory is told of an entry
 * before its first registration: valid during the call. */
struct rc_watch_want {
    uintptr_t start, end; /* the range it registers */
    /* The mappings that hold it, as the miss learnt them (0, 0: unknown),
     * and whether one of them is shared. */
    uintptr_t span_start, span_end;
    bool span_shared;
};

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
    int (*before_miss)(void *arg, uintptr_t start, uintptr_t end, struct rc_req rq);
    void (*after_miss)(void *arg, uint64_t now);
    void *(*before_register)(void *arg, const struct rc_watch_want *w);
    enum regcache_reason (*before_publish)(void *arg, void *mark);
    void (*after_deregister)(void *arg, void *mark);
    void (*after_register)(void *arg, const struct rc_entry_view *e);
    void (*on_leave)(void *arg, const struct rc_entry_view *e);
    void (*before_deregister)(void *arg, const struct rc_entry_view *e);
    void (*on_invalidate)(void *arg, uintptr_t start, uintptr_t end);
    void (*on_alloc)(void *arg, uintptr_t start, uintptr_t end, bool pinned_host);
    void (*on_destroy)(void *arg);
    void (*after_drain)(void *arg);
};

/* The events, as bits of struct rc_listeners' masks. */
enum rc_event {
    RC_ON_BEFORE_MISS = 1u << 0,
    RC_ON_AFTER_MISS = 1u << 1,
    RC_ON_AFTER_REGISTER = 1u << 2,
    RC_ON_LEAVE = 1u << 3,
    RC_ON_BEFORE_DEREGISTER = 1u << 4,
    RC_ON_INVALIDATE = 1u << 5,
    RC_ON_ALLOC = 1u << 6,
    RC_ON_DESTROY = 1u << 7,
    RC_ON_AFTER_DRAIN = 1u << 8,
    RC_ON_BEFORE_REGISTER = 1u << 9, /* with before_publish and after_deregister */
};

#define RC_LISTENERS 8

/* In struct regcache, with the pending bits beside what free notices read
 * (cache.h).  Set at create, read by every miss. */
struct rc_listeners {
    unsigned n;
    unsigned marker; /* 1 + the listener that takes before_register, or 0 */
    unsigned events; /* the events some listener takes: the inline checks' one load */
    struct {
        const struct rc_listener *ops;
        void *arg;
        unsigned takes; /* the events it hears */
    } l[RC_LISTENERS];
};

/* At create, before the cache is shared: ops (a static table; any event
 * may be NULL) hears every event of c from now on, with arg, after the
 * listeners registered before it.  Returns the listener's number (for
 * rc_listener_pending), or -1 when the table is full, or when ops takes
 * before_register and another listener does. */
int rc_listen(struct regcache *c, const struct rc_listener *ops, void *arg);

/* The arg of c's listener with these ops, or NULL. */
void *rc_listener_arg(const struct regcache *c, const struct rc_listener *ops);

/* Listener `id` has (or no longer has) work pending that on_invalidate
 * finishes, or that its before_miss may end a get with.  Set before that
 * work can be seen: for an entry on its way out, under the cache lock
 * before the unlink that a free notice's filter would then miss (release:
 * such a notice reads the bits after the filter). */
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
int rc_listeners_call_before_miss(struct regcache *c, uintptr_t start, uintptr_t end,
                                  struct rc_req rq);
void rc_listeners_call_after_miss(struct regcache *c, uint64_t now);
void rc_listeners_call_registered(struct regcache *c, const struct regcache_entry *e);
void rc_listeners_call_leave(struct regcache *c, const struct regcache_entry *e,
                             enum regcache_reason why);
void rc_listeners_call_deregister(struct regcache *c, const struct regcache_entry *e);
void rc_listeners_call_invalidate(struct regcache *c, uintptr_t start, uintptr_t end);
void rc_listeners_call_alloc(struct regcache *c, uintptr_t start, uintptr_t end, bool pinned_host);
void *rc_listeners_call_before_register(struct regcache *c, const struct rc_watch_want *w);
enum regcache_reason rc_listeners_call_before_publish(struct regcache *c, void *mark);
void rc_listeners_call_after_deregister(struct regcache *c, void *mark);
void rc_listeners_call_destroy(struct regcache *c);
void rc_listeners_call_drained(struct regcache *c);

#endif
