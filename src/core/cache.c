/* The cache policy: hits, misses, registration, eviction, invalidation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bar1_budget.h"
#include "cache.h"
#include "last_error.h"
#include "registry.h"

/* How often a miss may evict and retry after the backend reports exhausted
 * resources, and how often it restarts when its memory is invalidated while
 * it registers. */
#define RC_EVICT_ROUNDS 16
#define RC_MISS_RESTARTS 8

static inline void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* The LRU clock.  It advances only on slow paths (each registration and
 * each eviction), so put() stamps an entry with a plain load of a line that
 * every core keeps shared: entries used since the last miss tie, and all of
 * them rank after entries that were not.  A timestamp counter would cost
 * more than the rest of put() on virtual machines. */
static inline uint64_t rc_clock_tick(struct regcache *c)
{
    return atomic_fetch_add_explicit(&c->clock, 1, memory_order_relaxed) + 1;
}

static inline bool forked(const struct regcache *c)
{
    return c->fork_generation != rc_fork_generation();
}

static inline size_t entry_len(const struct regcache_entry *e)
{
    return e->node.end - e->node.start;
}

/* ------------------------------------------------------------------------ */
/* Leaving the cache                                                         */
/* ------------------------------------------------------------------------ */

/* A singly linked list of entries that left the cache and are deregistered
 * once the lock is dropped: a slow ibv_dereg_mr never stalls other misses,
 * and a backend that frees memory cannot re-enter a held lock. */
static void victim_push(struct regcache_entry **list, struct regcache_entry *e)
{
    e->link_next = *list;
    *list = e;
}

static void zombie_push(struct regcache *c, struct regcache_entry *e)
{
    e->zombie = true;
    e->link_prev = NULL;
    e->link_next = c->zombies;
    if (c->zombies)
        c->zombies->link_prev = e;
    c->zombies = e;
}

static void zombie_unlink(struct regcache *c, struct regcache_entry *e)
{
    e->zombie = false;
    if (e->link_prev)
        e->link_prev->link_next = e->link_next;
    else
        c->zombies = e->link_next;
    if (e->link_next)
        e->link_next->link_prev = e->link_prev;
}

static void deregister(struct regcache *c, struct regcache_entry *e)
{
    if (e->registered && !forked(c)) {
        c->backend.dereg(c->backend.arg, e->handle);
        count(&c->stats.deregistrations);
    }
    e->registered = false;
}

/* Deregister entries nobody holds any more and give their memory back to
 * the pool.  A fork child's inherited cache leaves its pool alone: the
 * registrations are the parent's and destroy frees the slabs. */
static void release_victims(struct regcache *c, struct regcache_entry *list)
{
    for (struct regcache_entry *e = list; e; e = e->link_next)
        deregister(c, e);
    if (!list || forked(c))
        return;
    pthread_mutex_lock(&c->lock);
    while (list) {
        struct regcache_entry *next = list->link_next;
        rc_entry_pool_put(&c->pool, list);
        list = next;
    }
    pthread_mutex_unlock(&c->lock);
}

/* Drop one reference and return the count before; the last reference of
 * a detached entry releases it.  e must not be touched afterwards. */
static unsigned drop(struct regcache *c, struct regcache_entry *e)
{
    unsigned old = atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel);
    if (old != (RC_DETACHED | 1))
        return old;
    if (!forked(c)) {
        pthread_mutex_lock(&c->lock);
        if (e->zombie)
            zombie_unlink(c, e);
        pthread_mutex_unlock(&c->lock);
    }
    e->link_next = NULL;
    release_victims(c, e);
    return old;
}

/* Under the lock: take e out of the tree, the page index, the LRU and the
 * budget.  No lookup can find it afterwards. */
static void unlink_locked(struct regcache *c, struct regcache_entry *e)
{
    rc_itree_remove(&c->tree, &e->node);
    if (e->state != RC_READY)
        return;
    struct rc_device *d = &c->dev[e->device_slot];
    rc_page_index_remove_entry(&c->index, e);
    if (e->heap_idx != RC_LRU_NONE)
        rc_lru_remove(&d->lru, e);
    atomic_fetch_sub_explicit(&d->bytes, entry_len(e), memory_order_relaxed);
    atomic_fetch_sub_explicit(&d->entries, 1, memory_order_relaxed);
}

/* Under the lock: invalidate e.  Unused entries go to *victims; held ones
 * wait on the zombie list for their last put; a pending one is left to the
 * thread registering it, which sees the mark and starts over. */
static void detach_locked(struct regcache *c, struct regcache_entry *e,
                          struct regcache_entry **victims)
{
    unlink_locked(c, e);
    bool unused = rc_entry_detach(e);
    if (e->state == RC_PENDING)
        return;
    if (unused)
        victim_push(victims, e);
    else
        zombie_push(c, e);
}

/* Under the lock: evict least-recently-used unused entries of one device
 * until it holds at most max_bytes and max_entries, counting each in
 * *counter (NULL for a flush, which is not an eviction).  Returns how many. */
static size_t evict_locked(struct regcache *c, struct rc_device *d, size_t max_bytes,
                           size_t max_entries, atomic_uint_fast64_t *counter,
                           struct regcache_entry **victims)
{
    size_t n = 0;
    while (atomic_load_explicit(&d->bytes, memory_order_relaxed) > max_bytes ||
           atomic_load_explicit(&d->entries, memory_order_relaxed) > max_entries) {
        struct regcache_entry *e = rc_lru_pop_unused(&d->lru, rc_clock_tick(c));
        if (!e)
            break;
        unlink_locked(c, e);
        victim_push(victims, e);
        if (counter)
            count(counter);
        n++;
    }
    return n;
}

static size_t limit(size_t max)
{
    return max ? max : SIZE_MAX;
}

/* The device's budget, fixed at its first registration: params.max_bytes,
 * else what BAR1 can hold. */
static struct rc_device *device_locked(struct regcache *c, int slot)
{
    struct rc_device *d = &c->dev[slot];
    if (!d->budget_set) {
        d->max_bytes = c->opts.params.max_bytes;
        if (!d->max_bytes && slot != RC_HOST_SLOT)
            d->max_bytes = rc_bar1_budget(slot);
        d->max_entries = c->opts.params.max_entries;
        d->budget_set = true;
    }
    return d;
}

/* Evict so that one more entry of len bytes fits the device's budget. */
static void make_room_locked(struct regcache *c, struct rc_device *d, size_t len,
                             struct regcache_entry **victims)
{
    size_t max_bytes = limit(d->max_bytes), max_entries = limit(d->max_entries);
    evict_locked(c, d, max_bytes > len ? max_bytes - len : 0, max_entries - 1,
                 &c->stats.evictions, victims);
}

static struct regcache_entry *entry_of(struct rc_itree_node *n)
{
    return (struct regcache_entry *)((char *)n - offsetof(struct regcache_entry, node));
}

static int collect_overlap(struct rc_itree_node *n, void *list)
{
    victim_push(list, entry_of(n));
    return 0;
}

void rc_cache_invalidate(struct regcache *c, uintptr_t start, uintptr_t end, enum rc_cause cause)
{
    struct regcache_entry *victims = NULL, *found = NULL;
    atomic_uint_fast64_t *counter = cause == RC_BY_TAG      ? &c->stats.invalidations_tag
                                    : cause == RC_BY_NOTIFY ? &c->stats.invalidations_notify
                                                            : &c->stats.invalidations_explicit;
    if (forked(c))
        return;
    pthread_mutex_lock(&c->lock);
    /* The tree must not change while it is walked: collect, then detach. */
    rc_itree_visit_overlaps(&c->tree, start, end, collect_overlap, &found);
    while (found) {
        struct regcache_entry *e = found;
        found = e->link_next;
        /* The tree finds registered ranges; an entry goes only when its own
         * allocation overlaps, so freeing one allocation packed into a page
         * spares its neighbours. */
        if (e->match_start < end && start < e->match_end) {
            detach_locked(c, e, &victims);
            count(counter);
        }
    }
    pthread_mutex_unlock(&c->lock);
    release_victims(c, victims);
}

/* ------------------------------------------------------------------------ */
/* The miss path                                                             */
/* ------------------------------------------------------------------------ */

/* What a miss wants registered, derived from the memory query. */
struct rc_want {
    uintptr_t start, end;             /* the request */
    uintptr_t reg_start, reg_end;     /* what to register */
    uintptr_t match_start, match_end; /* which requests it may serve */
    uint64_t buffer_id;
    int device, slot;
};

static int round_out(uintptr_t start, uintptr_t end, size_t align, uintptr_t *rs, uintptr_t *re)
{
    uintptr_t mask = (uintptr_t)align - 1;
    if (end > UINTPTR_MAX - mask) {
        rc_set_error("range end %#lx cannot be rounded to %zu bytes", (unsigned long)end, align);
        return REGCACHE_ERR_INVALID;
    }
    *rs = start & ~mask;
    *re = (end + mask) & ~mask;
    return REGCACHE_OK;
}

static int classify(const struct regcache *c, const struct regcache_mem_info *info,
                    struct rc_want *w)
{
    const struct regcache_params *p = &c->opts.params;
    switch (info->type) {
    case REGCACHE_MEM_MANAGED:
        rc_set_error("%p is CUDA managed memory, which GPUDirect RDMA cannot register",
                     (void *)w->start);
        return REGCACHE_ERR_MANAGED;
    case REGCACHE_MEM_HOST:
        if (!p->host_memory) {
            rc_set_error("%p is not GPU memory (host memory is accepted only with "
                         "params.host_memory or REGCACHE_HOST_MEMORY=1)", (void *)w->start);
            return REGCACHE_ERR_NOT_GPU;
        }
        /* Pageable host memory has no buffer id: its entries live until
         * invalidated by the application (README, "Host memory").  Pinned
         * memory from cuMemAllocHost has one, and is tag-checked like GPU
         * memory. */
        w->buffer_id = info->buffer_id;
        w->device = REGCACHE_DEVICE_HOST;
        w->slot = RC_HOST_SLOT;
        if (round_out(w->start, w->end, c->host_page, &w->reg_start, &w->reg_end))
            return REGCACHE_ERR_INVALID;
        w->match_start = w->reg_start;
        w->match_end = w->reg_end;
        return REGCACHE_OK;
    case REGCACHE_MEM_DEVICE:
        break;
    default:
        rc_set_error("memory query reported unknown type %d", info->type);
        return REGCACHE_ERR_BACKEND;
    }

    if (c->builtin && c->method_used == 0) {
        rc_set_error("%p is GPU memory, but this cache found no GPU registration method "
                     "(host memory only): load nvidia_peermem or use a verbs provider with "
                     "dmabuf support", (void *)w->start);
        return REGCACHE_ERR_UNSUPPORTED;
    }
    if (info->device < 0 || info->device >= RC_MAX_DEVICES) {
        rc_set_error("device ordinal %d is outside 0..%d", info->device, RC_MAX_DEVICES - 1);
        return REGCACHE_ERR_UNSUPPORTED;
    }
    uintptr_t alloc_end = info->base + info->size;
    if (w->start < info->base || w->end > alloc_end) {
        rc_set_error("[%p, %p) is not inside the allocation [%p, %p) that holds its start",
                     (void *)w->start, (void *)w->end, (void *)info->base, (void *)alloc_end);
        return REGCACHE_ERR_RANGE;
    }
    w->buffer_id = info->buffer_id;
    w->device = info->device;
    w->slot = info->device;
    int rc = p->whole_allocation
                 ? round_out(info->base, alloc_end, p->alignment, &w->reg_start, &w->reg_end)
                 : round_out(w->start, w->end, p->alignment, &w->reg_start, &w->reg_end);
    if (rc)
        return rc;
    w->match_start = w->reg_start > info->base ? w->reg_start : info->base;
    w->match_end = w->reg_end < alloc_end ? w->reg_end : alloc_end;
    return REGCACHE_OK;
}

struct rc_lookup {
    const struct rc_want *want;
    struct regcache_entry *found, *stale;
    bool pending;
};

/* An entry whose allocation holds the request's start but whose buffer id
 * differs is a registration of memory that was freed and reallocated at the
 * same address: it must go, whatever the validation mode. */
static bool is_stale(const struct regcache_entry *e, const struct rc_want *w)
{
    return e->buffer_id && w->buffer_id && e->buffer_id != w->buffer_id &&
           e->match_start <= w->start && w->start < e->match_end;
}

static int lookup_visit(struct rc_itree_node *n, void *arg)
{
    struct rc_lookup *l = arg;
    struct regcache_entry *e = entry_of(n);
    if (is_stale(e, l->want)) {
        victim_push(&l->stale, e);
        return 0;
    }
    if (e->buffer_id != l->want->buffer_id || !rc_entry_covers(e, l->want->start, l->want->end))
        return 0;
    if (e->state == RC_PENDING) {
        l->pending = true;
        return 0;
    }
    /* Entries in the tree are never detached, so the hold succeeds. */
    if (!rc_entry_try_hold(e))
        return 0;
    l->found = e;
    return 1;
}

/* Under the lock: an entry serving w (held), or NULL with *pending when a
 * registration that will serve it is in flight.  Stale entries met on the
 * way are detached into *victims. */
static struct regcache_entry *lookup_locked(struct regcache *c, const struct rc_want *w,
                                            bool *pending, struct regcache_entry **victims)
{
    struct rc_lookup l = {.want = w};
    rc_itree_visit_overlaps(&c->tree, w->start, w->end, lookup_visit, &l);
    while (l.stale) {
        struct regcache_entry *e = l.stale;
        l.stale = e->link_next;
        detach_locked(c, e, victims);
        count(&c->stats.invalidations_tag);
    }
    *pending = l.pending;
    return l.found;
}

/* The errno values with which nvidia-peermem, dmabuf and the verbs core
 * report that pinning space ran out. */
static bool exhausted(int err)
{
    return err == ENOMEM || err == ENOSPC || err == EAGAIN || err == EFAULT;
}

/* Without the lock: register e's range, evicting the device's unused
 * entries and retrying while the backend reports exhaustion. */
static int register_entry(struct regcache *c, struct regcache_entry *e, struct rc_device *d,
                          int device)
{
    size_t len = entry_len(e);
    int err = 0;
    for (int round = 0; round <= RC_EVICT_ROUNDS; round++) {
        void *handle = NULL;
        rc_clear_error();
        err = c->backend.reg(c->backend.arg, (void *)e->node.start, len, device, &handle);
        if (!err) {
            e->handle = handle;
            e->registered = true;
            count(&c->stats.registrations);
            return REGCACHE_OK;
        }
        count(&c->stats.reg_failures);
        if (!exhausted(err)) {
            /* Keep what the backend itself said (a CUDA export error, say). */
            char detail[160];
            snprintf(detail, sizeof(detail), "%s", regcache_last_error());
            rc_set_error("registering %zu bytes at %p failed: %s%s%s", len,
                         (void *)e->node.start, strerror(err), detail[0] ? ": " : "", detail);
            return REGCACHE_ERR_BACKEND;
        }
        struct regcache_entry *victims = NULL;
        pthread_mutex_lock(&c->lock);
        size_t have = atomic_load_explicit(&d->bytes, memory_order_relaxed);
        size_t evicted = evict_locked(c, d, have > len ? have - len : 0, SIZE_MAX,
                                      &c->stats.evictions, &victims);
        pthread_mutex_unlock(&c->lock);
        release_victims(c, victims);
        if (!evicted)
            break;
    }
    rc_set_error("registering %zu bytes at %p: resources exhausted (%s) and no unused entry "
                 "of the device is left to evict", len, (void *)e->node.start, strerror(err));
    return REGCACHE_ERR_NO_SPACE;
}

static void update_peak(struct regcache *c)
{
    uint64_t total = 0;
    for (int i = 0; i <= RC_MAX_DEVICES; i++)
        total += atomic_load_explicit(&c->dev[i].bytes, memory_order_relaxed);
    uint64_t peak = atomic_load_explicit(&c->stats.peak_bytes, memory_order_relaxed);
    while (total > peak && !atomic_compare_exchange_weak_explicit(
                               &c->stats.peak_bytes, &peak, total, memory_order_relaxed,
                               memory_order_relaxed)) {
    }
}

/* Under the lock: a registered entry joins the cache.  Fails only when the
 * LRU heap cannot grow; the entry is then still pending in the tree, and
 * the caller takes it out like any failed registration. */
static int publish_locked(struct regcache *c, struct regcache_entry *e, struct rc_device *d)
{
    atomic_store_explicit(&e->last_use, rc_clock_tick(c), memory_order_relaxed);
    if (rc_lru_push(&d->lru, e) != REGCACHE_OK) {
        rc_set_error("out of memory growing the LRU heap");
        return REGCACHE_ERR_NO_MEMORY;
    }
    e->state = RC_READY;
    atomic_fetch_add_explicit(&d->bytes, entry_len(e), memory_order_relaxed);
    atomic_fetch_add_explicit(&d->entries, 1, memory_order_relaxed);
    update_peak(c);
    return REGCACHE_OK;
}

/* Under the lock: an entry from the pool, set up as pending and held by
 * the registering thread.  Its refs read RC_DETACHED while it sits in the
 * pool, so no stale reader can have raised them: the plain store is safe,
 * and from here on refs change only atomically. */
static struct regcache_entry *new_entry(struct regcache *c, const struct rc_want *w)
{
    struct regcache_entry *e = rc_entry_pool_get(&c->pool);
    if (!e)
        return NULL;
    atomic_store_explicit(&e->match_start, w->match_start, memory_order_relaxed);
    atomic_store_explicit(&e->match_end, w->match_end, memory_order_relaxed);
    e->device_slot = w->slot;
    e->buffer_id = w->buffer_id;
    e->handle = NULL;
    e->cache = c;
    atomic_store_explicit(&e->last_use, 0, memory_order_relaxed);
    memset(&e->node, 0, sizeof(e->node));
    e->node.start = w->reg_start;
    e->node.end = w->reg_end;
    e->state = RC_PENDING;
    e->registered = false;
    e->zombie = false;
    e->heap_key = 0;
    e->heap_idx = RC_LRU_NONE;
    e->pages = e->pages_inline;
    e->npages = 0;
    e->pages_cap = RC_INLINE_PAGES;
    e->link_next = e->link_prev = NULL;
    atomic_store_explicit(&e->refs, 1, memory_order_release);
    return e;
}

/* One attempt at a miss with the memory already described.  Returns
 * REGCACHE_OK with *out set, an error, or -EAGAIN when the memory was
 * invalidated while it registered and the miss must start over. */
static int miss(struct regcache *c, const struct rc_want *w, regcache_entry_t **out)
{
    struct regcache_entry *victims = NULL, *e;
    bool pending;

    pthread_mutex_lock(&c->lock);
    while ((e = lookup_locked(c, w, &pending, &victims)) == NULL && pending)
        pthread_cond_wait(&c->registered, &c->lock);
    if (e) {
        /* Another thread registered it, or its page was not indexed yet. */
        rc_page_index_add(&c->index, e, w->start);
        count(&c->stats.slow_hits);
        pthread_mutex_unlock(&c->lock);
        release_victims(c, victims);
        *out = e;
        return REGCACHE_OK;
    }
    count(&c->stats.misses);
    e = new_entry(c, w);
    if (!e) {
        pthread_mutex_unlock(&c->lock);
        release_victims(c, victims);
        rc_set_error("out of memory allocating a cache entry");
        return REGCACHE_ERR_NO_MEMORY;
    }
    /* In the tree while pending, so concurrent misses wait for this one
     * instead of registering the same range again. */
    rc_itree_insert(&c->tree, &e->node);
    struct rc_device *d = device_locked(c, w->slot);
    make_room_locked(c, d, entry_len(e), &victims);
    pthread_mutex_unlock(&c->lock);
    release_victims(c, victims);

    int rc = register_entry(c, e, d, w->device);

    pthread_mutex_lock(&c->lock);
    bool invalidated = rc_entry_is_detached(e);
    if (rc == REGCACHE_OK && !invalidated) {
        rc = publish_locked(c, e, d);
        if (rc == REGCACHE_OK)
            rc_page_index_add(&c->index, e, w->start);
    }
    if (rc != REGCACHE_OK && !invalidated) {
        rc_itree_remove(&c->tree, &e->node);
        rc_entry_detach(e);
    }
    pthread_cond_broadcast(&c->registered);
    pthread_mutex_unlock(&c->lock);

    if (rc == REGCACHE_OK && !invalidated) {
        *out = e;
        return REGCACHE_OK;
    }
    /* Detached now: the last reference (this thread's, or a hit that
     * raced into the recycled entry) deregisters it. */
    drop(c, e);
    return rc != REGCACHE_OK ? rc : -EAGAIN;
}

static int slow_get(struct regcache *c, uintptr_t start, uintptr_t end, regcache_entry_t **out)
{
    for (int attempt = 0; attempt < RC_MISS_RESTARTS; attempt++) {
        struct regcache_mem_info info;
        struct rc_want w = {.start = start, .end = end};
        int rc = c->mem.query(c->mem.ctx, (const void *)start, end - start, &info);
        if (rc == REGCACHE_OK)
            rc = classify(c, &info, &w);
        if (rc == REGCACHE_OK)
            rc = miss(c, &w, out);
        if (rc != -EAGAIN)
            return rc;
    }
    rc_set_error("[%p, %p) was invalidated during each of %d registrations", (void *)start,
                 (void *)end, RC_MISS_RESTARTS);
    return REGCACHE_ERR_NOT_GPU;
}

/* ------------------------------------------------------------------------ */
/* The hit path                                                              */
/* ------------------------------------------------------------------------ */

/* A hit whose buffer id no longer matches: the memory was freed (and maybe
 * reallocated) behind the cache's back. */
static void tag_invalidate(struct regcache *c, struct regcache_entry *e)
{
    struct regcache_entry *victims = NULL;
    pthread_mutex_lock(&c->lock);
    if (!rc_entry_is_detached(e)) {
        detach_locked(c, e, &victims);
        count(&c->stats.invalidations_tag);
    }
    pthread_mutex_unlock(&c->lock);
    release_victims(c, victims);
}

/* A reference the page index took on an entry that was replaced while it
 * looked. */
static void release_stale(struct regcache_entry *e)
{
    drop(e->cache, e);
}

static inline void count_hit(struct regcache *c)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    unsigned i = (unsigned)(((uint64_t)(sp >> 16) * 0x9e3779b97f4a7c15ull) >> 58) % RC_HIT_COUNTERS;
    atomic_fetch_add_explicit(&c->hits[i].n, 1, memory_order_relaxed);
}

int regcache_get(regcache_t *c, const void *addr, size_t len, regcache_entry_t **out)
{
    uintptr_t start = (uintptr_t)addr;
    if (out)
        *out = NULL;
    if (!c || !addr || !out || len == 0 || len > UINTPTR_MAX - start)
        return REGCACHE_ERR_INVALID;
    if (forked(c))
        return REGCACHE_ERR_FORKED;

    /* One lock-free probe of the page index: the only shared line it
     * writes is the entry's reference count. */
    struct regcache_entry *e = rc_page_index_hold(&c->index, start, start + len, release_stale);
    if (e) {
        uint64_t id;
        if (!c->tag_check || !e->buffer_id ||
            (c->mem.read_tag(c->mem.ctx, addr, &id) == REGCACHE_OK && id == e->buffer_id)) {
            count_hit(c);
            *out = e;
            return REGCACHE_OK;
        }
        tag_invalidate(c, e);
        drop(c, e);
    }
    return slow_get(c, start, start + len, out);
}

static void trim(struct regcache *c, struct rc_device *d)
{
    struct regcache_entry *victims = NULL;
    pthread_mutex_lock(&c->lock);
    evict_locked(c, d, limit(d->max_bytes), limit(d->max_entries), &c->stats.evictions,
                 &victims);
    pthread_mutex_unlock(&c->lock);
    release_victims(c, victims);
}

void regcache_put(regcache_t *cache, regcache_entry_t *e)
{
    (void)cache; /* the entry knows its cache; the argument mirrors get */
    if (!e)
        return;
    struct regcache *c = e->cache;
    /* Everything put needs from e is read before the release: once the
     * count drops, an evictor may recycle it. */
    struct rc_device *d = &c->dev[e->device_slot];
    atomic_store_explicit(&e->last_use,
                          atomic_load_explicit(&c->clock, memory_order_relaxed),
                          memory_order_relaxed);
    unsigned old = drop(c, e);
    /* Held entries may push a device past its budget; the budget binds
     * again as soon as they become unused. */
    if (old == 1 &&
        (atomic_load_explicit(&d->bytes, memory_order_relaxed) > limit(d->max_bytes) ||
         atomic_load_explicit(&d->entries, memory_order_relaxed) > limit(d->max_entries)))
        trim(c, d);
}

/* ------------------------------------------------------------------------ */
/* Entries                                                                   */
/* ------------------------------------------------------------------------ */

void *regcache_entry_handle(const regcache_entry_t *e)
{
    return e ? e->handle : NULL;
}

struct ibv_mr *regcache_entry_mr(const regcache_entry_t *e)
{
    return e && e->cache->builtin ? e->handle : NULL;
}

void regcache_entry_range(const regcache_entry_t *e, uintptr_t *start, size_t *len)
{
    if (start)
        *start = e ? e->node.start : 0;
    if (len)
        *len = e ? entry_len(e) : 0;
}

/* ------------------------------------------------------------------------ */
/* Invalidation, flush                                                       */
/* ------------------------------------------------------------------------ */

int regcache_invalidate(regcache_t *c, const void *addr, size_t len)
{
    uintptr_t start = (uintptr_t)addr;
    if (!c || len == 0 || len > UINTPTR_MAX - start)
        return REGCACHE_ERR_INVALID;
    if (forked(c))
        return REGCACHE_ERR_FORKED;
    rc_cache_invalidate(c, start, start + len, RC_BY_EXPLICIT);
    return REGCACHE_OK;
}

int regcache_flush(regcache_t *c)
{
    if (!c)
        return REGCACHE_ERR_INVALID;
    if (forked(c))
        return REGCACHE_ERR_FORKED;
    struct regcache_entry *victims = NULL;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i <= RC_MAX_DEVICES; i++)
        evict_locked(c, &c->dev[i], 0, 0, NULL, &victims);
    pthread_mutex_unlock(&c->lock);
    release_victims(c, victims);
    return REGCACHE_OK;
}

static void drain_visit(struct rc_itree_node *n, void *list)
{
    victim_push(list, entry_of(n));
}

void rc_cache_drain(struct regcache *c)
{
    struct regcache_entry *victims = NULL, *all = NULL;
    bool child = forked(c);
    /* In a fork child another thread may have held the lock at fork time;
     * the child is single-threaded here and must not wait for it. */
    if (!child)
        pthread_mutex_lock(&c->lock);
    rc_itree_visit_all(&c->tree, drain_visit, &all);
    while (all) {
        struct regcache_entry *e = all;
        all = e->link_next;
        unlink_locked(c, e);
        victim_push(&victims, e);
    }
    while (c->zombies) {
        struct regcache_entry *e = c->zombies;
        zombie_unlink(c, e);
        victim_push(&victims, e);
    }
    if (!child)
        pthread_mutex_unlock(&c->lock);
    release_victims(c, victims);
}
