/* Device key tables: a feature standing on the cache's edge (listeners.h).
 * A cache created with params.device_keys gets this listener; each
 * regcache_device_keys_attach() then gives it a table on a GPU
 * (device_table.h), which it keeps in step with the cache's entries:
 *   after_register  (cache lock)  the entry is queued for the table;
 *   on_leave        (cache lock)  its record's number changes in host
 *                                 memory, its removal is numbered and
 *                                 kernels' sections are told to confirm
 *                                 keys until the writer lands it;
 *   on_invalidate                 the hold sections open at the removals
 *                                 so far have ended before a free notice
 *                                 returns (no write to the GPU);
 *   before_deregister             the hold sections open at its removal
 *                                 have ended (no write to the GPU);
 *   on_destroy                    every table is detached.
 * The tables are found under the cache lock by the first two, and under a
 * read lock of `users` by the others (detaching takes it to write, once
 * the table is out of the list). */
#include "device_keys.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bounds.h"
#include "device_table.h"
#include "hook_detect.h"
#include "intercept.h"
#include "last_error.h"
#include "listeners.h"

struct rc_device_keys {
    struct regcache *cache;
    int listener;
    pid_t pid;      /* the process that made it: a fork child uses no table */
    bool builtin;   /* the built-in verbs backend: keys are its MRs' */
    bool intercept; /* the in-process interception may be installed */
    pthread_mutex_t attach_lock;
    pthread_rwlock_t users;
    _Atomic(struct rc_dtable *) tables[RC_MAX_DEVICES];
    atomic_uint_fast64_t attached; /* bit d: tables[d] is set */
};

static bool forked(const struct rc_device_keys *f)
{
    return f->pid != getpid();
}

/* Call fn on every attached table (the caller holds the cache lock or a
 * read lock of users). */
#define EACH_TABLE(f, t)                                                                           \
    for (uint64_t bits_ = atomic_load_explicit(&(f)->attached, memory_order_acquire); bits_;       \
         bits_ &= bits_ - 1)                                                                       \
        for (struct rc_dtable *t =                                                                 \
                 atomic_load_explicit(&(f)->tables[__builtin_ctzll(bits_)], memory_order_acquire); \
             t; t = NULL)

/* ---- the listener ------------------------------------------------------- */

static uint32_t mr_lkey(void *arg, void *handle, unsigned rail)
{
    (void)arg;
    (void)rail;
    return ((struct ibv_mr *)handle)->lkey;
}

static void publish(struct rc_dtable *t, const struct rc_entry_view *v)
{
    uint32_t lkey[REGCACHE_DEVICE_RAILS] = { 0 };
    for (unsigned r = 0; r < REGCACHE_DEVICE_RAILS; r++)
        if (v->rails >> r & 1)
            lkey[r] = t->p.lkey(t->p.lkey_arg, v->handles[r], r);
    pthread_mutex_lock(&t->kt.lock);
    rc_kt_publish_locked(&t->kt, v->id, v->start, v->end, v->rails, lkey);
    pthread_mutex_unlock(&t->kt.lock);
    /* Stored only when clear: a burst of misses writes the line the writer
     * reads once, not once a miss. */
    if (!atomic_load_explicit(&t->dirty, memory_order_relaxed))
        atomic_store_explicit(&t->dirty, true, memory_order_release);
}

/* Entries registered for less than params.access are not mirrored: a
 * kernel's lookup asks for no access, so it gets the cache's. */
static void after_register(void *arg, const struct rc_entry_view *v)
{
    struct rc_device_keys *f = arg;
    if (!v->default_access || !v->rails)
        return;
    EACH_TABLE(f, t)
    publish(t, v);
}

static void on_leave(void *arg, const struct rc_entry_view *v)
{
    struct rc_device_keys *f = arg;
    EACH_TABLE(f, t)
    {
        pthread_mutex_lock(&t->kt.lock);
        uint64_t removal = rc_kt_leave_locked(&t->kt, v->id);
        if (removal)
            atomic_store_explicit(&t->numbered, removal, memory_order_release);
        pthread_mutex_unlock(&t->kt.lock);
        if (removal)
            rc_listener_pending(f->cache, f->listener, true);
    }
}

static void before_deregister(void *arg, const struct rc_entry_view *v)
{
    struct rc_device_keys *f = arg;
    pthread_rwlock_rdlock(&f->users);
    EACH_TABLE(f, t)
    {
        pthread_mutex_lock(&t->kt.lock);
        uint64_t removal = rc_kt_forget_locked(&t->kt, v->id), numbered = t->kt.removals;
        pthread_mutex_unlock(&t->kt.lock);
        if (removal)
            rc_dtable_drain(t, removal, numbered);
    }
    pthread_rwlock_unlock(&f->users);
}

/* Under a read lock of users: has every table drained the sections open
 * at each removal numbered so far? */
static bool all_drained(struct rc_device_keys *f)
{
    EACH_TABLE(f, t)
    {
        if (atomic_load_explicit(&t->drained, memory_order_acquire) <
            atomic_load_explicit(&t->numbered, memory_order_acquire))
            return false;
    }
    return true;
}

/* A free notice returns once no hold section open at a removal so far is
 * still open: a section opened later, which is all a kernel told of the
 * memory's next allocation can look it up in, confirms keys while the
 * removal is on its way to the table, and misses it once it landed.  An
 * entry deregistered here was drained already; a held one's section wait
 * is done here, and its deregistration, later, waits for nothing more. */
static void on_invalidate(void *arg, uintptr_t start, uintptr_t end)
{
    struct rc_device_keys *f = arg;
    (void)start;
    (void)end;
    pthread_rwlock_rdlock(&f->users);
    EACH_TABLE(f, t)
    {
        uint64_t numbered = atomic_load_explicit(&t->numbered, memory_order_acquire);
        rc_dtable_drain(t, numbered, numbered);
    }
    /* Cleared without the cache lock: a removal numbered meanwhile either
     * set the flag after this clear, or shows in the second look (the
     * clear acquires, and on_leave numbers before it sets). */
    if (all_drained(f)) {
        rc_listener_pending(f->cache, f->listener, false);
        if (!all_drained(f))
            rc_listener_pending(f->cache, f->listener, true);
    }
    pthread_rwlock_unlock(&f->users);
}

static int detach(struct rc_device_keys *f, int device);

/* In a fork child the tables are the parent's (their memory, their
 * threads, and maybe their locks, held at the fork): only this copy of
 * the host's side is freed. */
static void on_destroy(void *arg)
{
    struct rc_device_keys *f = arg;
    bool child = forked(f);
    for (int d = 0; d < RC_MAX_DEVICES; d++) {
        struct rc_dtable *t = atomic_load(&f->tables[d]);
        if (t && child)
            rc_dtable_destroy(t, true);
        else if (t)
            detach(f, d);
    }
    if (!child) {
        pthread_rwlock_destroy(&f->users);
        pthread_mutex_destroy(&f->attach_lock);
    }
    free(f);
}

static const struct rc_listener ops = {
    .after_register = after_register,
    .on_leave = on_leave,
    .before_deregister = before_deregister,
    .on_invalidate = on_invalidate,
    .on_destroy = on_destroy,
};

int rc_device_keys_open(struct regcache *c, const struct rc_options *o)
{
    if (!o->params.device_keys)
        return REGCACHE_OK;
    struct rc_device_keys *f = calloc(1, sizeof *f);
    if (!f)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory for the device key tables");
    f->cache = c;
    f->pid = getpid();
    f->builtin = !o->params.backend;
    f->intercept = o->intercept;
    pthread_mutex_init(&f->attach_lock, NULL);
    pthread_rwlock_init(&f->users, NULL);
    f->listener = rc_listen(c, &ops, f);
    if (f->listener < 0) {
        on_destroy(f);
        return rc_fail(REGCACHE_ERR_INVALID, "the cache's listener table is full");
    }
    return REGCACHE_OK;
}

/* ---- attach and detach -------------------------------------------------- */

struct install {
    struct rc_device_keys *f;
    struct rc_dtable *t;
};

static void replay_one(void *arg, const struct rc_entry_view *v)
{
    struct rc_dtable *t = arg;
    if (v->default_access && v->rails)
        publish(t, v);
}

/* Under the cache lock: from now on the table hears every event, and it
 * holds every entry there is. */
static void install(void *arg)
{
    struct install *in = arg;
    atomic_store_explicit(&in->f->tables[in->t->device], in->t, memory_order_release);
    atomic_fetch_or_explicit(&in->f->attached, 1ull << in->t->device, memory_order_release);
    rc_listeners_each_locked(in->f->cache, replay_one, in->t);
}

static void uninstall(void *arg)
{
    struct install *in = arg;
    atomic_fetch_and_explicit(&in->f->attached, ~(1ull << in->t->device), memory_order_release);
    atomic_store_explicit(&in->f->tables[in->t->device], NULL, memory_order_release);
}

static int detach(struct rc_device_keys *f, int device)
{
    pthread_mutex_lock(&f->attach_lock);
    struct rc_dtable *t = atomic_load(&f->tables[device]);
    if (!t) {
        pthread_mutex_unlock(&f->attach_lock);
        return rc_fail(REGCACHE_ERR_INVALID, "no device key table on device %d", device);
    }
    rc_dtable_stop(t);
    struct install in = { f, t };
    rc_listeners_locked(f->cache, uninstall, &in);
    /* Whoever found the table without the cache lock is done with it. */
    pthread_rwlock_wrlock(&f->users);
    pthread_rwlock_unlock(&f->users);
    pthread_mutex_lock(&t->kt.lock);
    rc_kt_clear_locked(&t->kt);
    uint64_t removal = ++t->kt.removals;
    pthread_mutex_unlock(&t->kt.lock);
    if (rc_dtable_flush(t) == REGCACHE_OK)
        rc_dtable_drain(t, removal, removal);
    rc_dtable_destroy(t, false);
    pthread_mutex_unlock(&f->attach_lock);
    return REGCACHE_OK;
}

static struct rc_device_keys *feature_of(const regcache_t *c, const char *call)
{
    struct rc_device_keys *f = c ? rc_listener_arg(c, &ops) : NULL;
    if (!c)
        rc_fail(REGCACHE_ERR_INVALID, "%s: cache is NULL", call);
    else if (!f)
        rc_fail(REGCACHE_ERR_INVALID, "%s: the cache was created without params.device_keys", call);
    return f;
}

static int device_ok(int device, const char *call)
{
    if (device < 0 || device >= RC_MAX_DEVICES)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: device %d is outside 0..%d", call, device,
                       RC_MAX_DEVICES - 1);
    return REGCACHE_OK;
}

/* The table's keys are only as fresh as the frees the cache hears of. */
static int frees_seen(struct rc_device_keys *f)
{
    int mode = regcache_validation_mode(f->cache);
    if (mode == REGCACHE_VALIDATE_HOOKS || mode == REGCACHE_VALIDATE_NOTIFY || rc_hook_active())
        return REGCACHE_OK;
    char why[256] = "REGCACHE_HOOKS=off: no in-process interception";
    if (f->intercept && rc_intercept_ensure(why, sizeof why))
        return REGCACHE_OK;
    return rc_fail(REGCACHE_ERR_UNSUPPORTED,
                   "regcache_device_keys_attach: a key table needs every CUDA free seen, and "
                   "this TAG_CHECK cache has no hook: %s",
                   why);
}

int regcache_device_keys_params_init(struct regcache_device_keys_params *p)
{
    if (!p)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_device_keys_params_init: params is NULL");
    *p = (struct regcache_device_keys_params){
        .size = sizeof *p,
        .page_slots = (size_t)1 << 20,
        .records = 65536,
        .max_probe = 16,
        .hold_slots = 1024,
        .ring_slots = 1024,
        .drain_timeout_ns = 1000000000u,
        .poll_ns = 100000,
    };
    return REGCACHE_OK;
}

static bool pow2(size_t n)
{
    return n && !(n & (n - 1));
}

static int resolve(const struct rc_device_keys *f, const struct regcache_device_keys_params *in,
                   struct regcache_device_keys_params *p)
{
    regcache_device_keys_params_init(p);
    if (in) {
        if (in->size != sizeof *in)
            return rc_fail(REGCACHE_ERR_INVALID,
                           "regcache_device_keys_attach: params.size %zu is not %zu: call "
                           "regcache_device_keys_params_init()",
                           in->size, sizeof *in);
        *p = *in;
    }
    const char *bad = !pow2(p->page_slots) || p->page_slots < 1024 || p->page_slots > (1u << 28)
                          ? "page_slots: a power of two from 1024 to 2^28"
                      : p->records < 2 || p->records > (1u << REGCACHE_DEVICE_RECORD_BITS)
                          ? "records: 2 to 2^24"
                      : p->max_probe < 1 || p->max_probe > 64           ? "max_probe: 1 to 64"
                      : p->hold_slots < 1 || p->hold_slots > (1u << 20) ? "hold_slots: 1 to 2^20"
                      : !pow2(p->ring_slots) || p->ring_slots < 2 || p->ring_slots > (1u << 20)
                          ? "ring_slots: a power of two from 2 to 2^20"
                      : !p->poll_ns ? "poll_ns: more than 0"
                                    : NULL;
    if (bad)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_device_keys_attach: params.%s", bad);
    if (!p->lkey && !f->builtin)
        return rc_fail(REGCACHE_ERR_INVALID,
                       "regcache_device_keys_attach: a custom backend's keys need params.lkey");
    if (!p->lkey)
        p->lkey = mr_lkey;
    return REGCACHE_OK;
}

int regcache_device_keys_attach(regcache_t *c, int device,
                                const struct regcache_device_keys_params *params,
                                struct regcache_device_table *table)
{
    static const char call[] = "regcache_device_keys_attach";
    struct rc_device_keys *f = feature_of(c, call);
    if (!f)
        return REGCACHE_ERR_INVALID;
    if (!table)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: table is NULL", call);
    if (forked(f))
        return rc_fail(REGCACHE_ERR_FORKED, "%s: the cache was created before fork()", call);
    struct regcache_device_keys_params p;
    int rc = device_ok(device, call);
    if (rc == REGCACHE_OK)
        rc = resolve(f, params, &p);
    if (rc == REGCACHE_OK)
        rc = frees_seen(f);
    if (rc != REGCACHE_OK)
        return rc;
    /* Here rather than at the first miss a kernel posts, which would wait
     * for it (NVML's start alone can take a second). */
    rc_listeners_ready_device(c, device);
    pthread_mutex_lock(&f->attach_lock);
    struct rc_dtable *t = NULL;
    if (atomic_load(&f->tables[device]))
        rc = rc_fail(REGCACHE_ERR_INVALID, "%s: device %d has a table already", call, device);
    if (rc == REGCACHE_OK)
        rc = rc_dtable_create(&t, c, device, &p);
    if (rc == REGCACHE_OK) {
        struct install in = { f, t };
        rc_listeners_locked(c, install, &in);
        rc = rc_dtable_flush(t);
        if (rc == REGCACHE_OK && rc_dtable_start(t) != REGCACHE_OK)
            rc = rc_fail(REGCACHE_ERR_NO_MEMORY, "%s: the table's thread cannot start", call);
        if (rc == REGCACHE_OK)
            *table = t->desc;
    }
    pthread_mutex_unlock(&f->attach_lock);
    if (rc != REGCACHE_OK && t && atomic_load(&f->tables[device]) == t)
        detach(f, device);
    return rc;
}

int regcache_device_keys_detach(regcache_t *c, int device)
{
    static const char call[] = "regcache_device_keys_detach";
    struct rc_device_keys *f = feature_of(c, call);
    if (!f)
        return REGCACHE_ERR_INVALID;
    if (forked(f))
        return rc_fail(REGCACHE_ERR_FORKED, "%s: the cache was created before fork()", call);
    int rc = device_ok(device, call);
    return rc == REGCACHE_OK ? detach(f, device) : rc;
}

/* The table of a device, under a read lock of users (unlock with
 * pthread_rwlock_unlock(&f->users) when not NULL).  A fork child has none:
 * the parent's locks may have been held at the fork. */
static struct rc_dtable *table_of(struct rc_device_keys *f, int device, const char *call)
{
    if (forked(f)) {
        rc_fail(REGCACHE_ERR_FORKED, "%s: the cache was created before fork()", call);
        return NULL;
    }
    if (device_ok(device, call) != REGCACHE_OK)
        return NULL;
    pthread_rwlock_rdlock(&f->users);
    struct rc_dtable *t = atomic_load_explicit(&f->tables[device], memory_order_acquire);
    if (!t) {
        pthread_rwlock_unlock(&f->users);
        rc_fail(REGCACHE_ERR_INVALID, "%s: no device key table on device %d", call, device);
    }
    return t;
}

int regcache_device_keys_table(const regcache_t *c, int device, struct regcache_device_table *table)
{
    static const char call[] = "regcache_device_keys_table";
    struct rc_device_keys *f = feature_of(c, call);
    if (!f)
        return REGCACHE_ERR_INVALID;
    if (!table)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: table is NULL", call);
    struct rc_dtable *t = table_of(f, device, call);
    if (!t)
        return forked(f) ? REGCACHE_ERR_FORKED : REGCACHE_ERR_INVALID;
    *table = t->desc;
    pthread_rwlock_unlock(&f->users);
    return REGCACHE_OK;
}

int regcache_device_keys_sync(regcache_t *c, int device)
{
    static const char call[] = "regcache_device_keys_sync";
    struct rc_device_keys *f = feature_of(c, call);
    if (!f)
        return REGCACHE_ERR_INVALID;
    struct rc_dtable *t = table_of(f, device, call);
    if (!t)
        return forked(f) ? REGCACHE_ERR_FORKED : REGCACHE_ERR_INVALID;
    int rc = rc_dtable_flush(t);
    pthread_rwlock_unlock(&f->users);
    return rc;
}

static uint64_t load(atomic_uint_fast64_t *n)
{
    return atomic_load_explicit(n, memory_order_relaxed);
}

int regcache_device_keys_stats(const regcache_t *c, int device,
                               struct regcache_device_keys_stats *s)
{
    static const char call[] = "regcache_device_keys_stats";
    struct rc_device_keys *f = feature_of(c, call);
    if (!f)
        return REGCACHE_ERR_INVALID;
    if (!s)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: stats is NULL", call);
    struct rc_dtable *t = table_of(f, device, call);
    if (!t)
        return forked(f) ? REGCACHE_ERR_FORKED : REGCACHE_ERR_INVALID;
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&t->kt.lock);
    s->records = t->kt.live;
    s->published = t->kt.published;
    s->removed = t->kt.removed;
    s->unmirrored = t->kt.unmirrored;
    pthread_mutex_unlock(&t->kt.lock);
    s->flushes = load(&t->flushes);
    s->flush_failures = load(&t->flush_failures);
    s->flush_ns_total = load(&t->flush_ns_total);
    s->flush_ns_max = load(&t->flush_ns_max);
    s->requests = load(&t->requests);
    s->request_failures = load(&t->request_failures);
    s->answer_ns_total = load(&t->answer_ns_total);
    s->answer_ns_max = load(&t->answer_ns_max);
    s->register_ns_total = load(&t->register_ns_total);
    s->register_ns_max = load(&t->register_ns_max);
    s->drains = load(&t->drains);
    s->drain_ns_total = load(&t->drain_ns_total);
    s->drain_ns_max = load(&t->drain_ns_max);
    s->drain_timeouts = load(&t->drain_timeouts);
    pthread_rwlock_unlock(&f->users);
    return REGCACHE_OK;
}
