/* The registry of live caches.
 *
 * regcache_notify_free() walks it on every CUDA free the hooks see, so the
 * walk takes no lock: caches are linked through atomic pointers, and a
 * walker says in its thread record where it is (threads.h): inside a cache
 * (the cache's address), between two (BETWEEN, while it follows a link) or
 * nowhere.  A cache being destroyed is unlinked under the registry lock and
 * then waits, for each walker, until that walker is neither inside it nor
 * between two caches - and only for that: a walker inside another cache,
 * whose dereg callback may wait for a lock that the destroying thread
 * holds, is no concern of this destroy.  Such a walker moves on along links
 * that skip the unlinked cache: the unlink rewrites every link to it, those
 * of caches already unlinked but still being destroyed as well, since a
 * walker inside one of those follows its link next.  The walker's stores
 * need only a compiler barrier before its next load of a link; the remover
 * pays a heavy fence (asym_fence.h) before it reads where walkers are.  No
 * lock is held while the walk invalidates, so backends may deregister
 * slowly, or call back. */
#include "cache_registry.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "asym_fence.h"
#include "cache.h"
#include "threads.h"

#define BETWEEN ((uintptr_t)1)

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct regcache *) registry_head;
static atomic_int registry_count;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* Unlinked caches whose destroy still waits for walkers (under the lock). */
static struct regcache *departing;
/* Walks by threads without a record (no memory for one): they cannot say
 * where they are, so a destroy waits for all of them, except its own. */
static atomic_uint anonymous_walkers;
static _Thread_local unsigned anonymous_depth;

/* The child inherits the parent's registrations in name only: its verbs
 * context is shared with the parent, so deregistering would tear down the
 * parent's MRs.  It forgets every inherited cache: they answer
 * REGCACHE_ERR_FORKED and regcache_destroy() frees them without
 * deregistering.  The lock is made anew: a parent thread may have held it. */
static void atfork_child(void)
{
    pthread_mutex_init(&registry_lock, NULL);
    atomic_store(&registry_head, NULL);
    atomic_store(&registry_count, 0);
    departing = NULL;
    atomic_store(&anonymous_walkers, anonymous_depth);
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

void rc_registry_add(struct regcache *c)
{
    pthread_once(&atfork_once, install_atfork);
    pthread_mutex_lock(&registry_lock);
    atomic_store_explicit(&c->registry_next,
                          atomic_load_explicit(&registry_head, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&registry_head, c, memory_order_release);
    atomic_fetch_add(&registry_count, 1);
    pthread_mutex_unlock(&registry_lock);
}

/* Does a walker at `at` hold, or may it be about to load, a link to c? */
static bool concerns(uintptr_t at, const struct regcache *c)
{
    return at == BETWEEN || at == (uintptr_t)c;
}

/* Wait until a walker is done with c.  Once it is seen elsewhere it cannot
 * come back: its next link is loaded after the heavy fence, and skips c. */
static void wait_for_walker(struct rc_thread *t, const struct regcache *c)
{
    if (t == rc_thread_current)
        return; /* destroy from inside a walk: the walk is ours */
    for (int d = 0; d < RC_WALK_DEPTH; d++)
        while (concerns(atomic_load_explicit(&t->walk_at[d], memory_order_acquire), c))
            sched_yield();
}

/* Every record, not only the live ones: a thread whose record was parked
 * for idleness (threads.h) walks without bringing it back. */
static void wait_for_walkers(struct regcache *c)
{
    rc_fence_heavy();
    for (struct rc_thread *t = rc_thread_first(); t; t = t->next)
        wait_for_walker(t, c);
    while (atomic_load_explicit(&anonymous_walkers, memory_order_seq_cst) > anonymous_depth)
        sched_yield();
}

/* Under the lock: every link to c, from the live caches and from those
 * being destroyed, now passes it by. */
static void unlink_locked(struct regcache *c)
{
    struct regcache *next = atomic_load_explicit(&c->registry_next, memory_order_relaxed);
    _Atomic(struct regcache *) *link = &registry_head;
    struct regcache *x;
    while ((x = atomic_load_explicit(link, memory_order_relaxed)) != c)
        link = &x->registry_next;
    atomic_store_explicit(link, next, memory_order_release);
    for (struct regcache *d = departing; d; d = d->departing_next)
        if (atomic_load_explicit(&d->registry_next, memory_order_relaxed) == c)
            atomic_store_explicit(&d->registry_next, next, memory_order_release);
}

void rc_registry_remove(struct regcache *c)
{
    pthread_mutex_lock(&registry_lock);
    unlink_locked(c);
    c->departing_next = departing;
    departing = c;
    atomic_fetch_sub(&registry_count, 1);
    pthread_mutex_unlock(&registry_lock);
    wait_for_walkers(c);
    pthread_mutex_lock(&registry_lock);
    struct regcache **p = &departing;
    while (*p != c)
        p = &(*p)->departing_next;
    *p = c->departing_next;
    pthread_mutex_unlock(&registry_lock);
}

void rc_registry_fence_everywhere(void)
{
    pthread_mutex_lock(&registry_lock);
    for (struct regcache *c = atomic_load_explicit(&registry_head, memory_order_relaxed); c;
         c = atomic_load_explicit(&c->registry_next, memory_order_relaxed))
        rc_cache_fence_always(c);
    pthread_mutex_unlock(&registry_lock);
}

int regcache_cache_count(void)
{
    return atomic_load_explicit(&registry_count, memory_order_acquire);
}

/* Where the walk at the calling thread's current depth says where it is:
 * its own word, or - deeper than the words go - the last one, which says
 * BETWEEN (every cache's concern) while those walks last. */
struct walk {
    _Atomic uintptr_t *at; /* NULL: deeper than the words */
    _Atomic uintptr_t *last;
    uintptr_t saved; /* the last word's value before, to restore */
};

static void walk_enter(struct rc_thread *t, struct walk *w)
{
    unsigned depth = t->walk_depth++;
    w->at = depth < RC_WALK_DEPTH ? &t->walk_at[depth] : NULL;
    w->last = depth == RC_WALK_DEPTH ? &t->walk_at[RC_WALK_DEPTH - 1] : NULL;
    if (w->last)
        w->saved = atomic_load_explicit(w->last, memory_order_relaxed);
    _Atomic uintptr_t *word = w->at ? w->at : w->last;
    if (word)
        atomic_store_explicit(word, BETWEEN, memory_order_release);
    rc_fence_light();
}

/* Inside c, then (after it) between c and the next: the fence orders the
 * second store before the load of the link. */
static void walk_inside(struct walk *w, struct regcache *c)
{
    if (w->at)
        atomic_store_explicit(w->at, (uintptr_t)c, memory_order_release);
}

static void walk_between(struct walk *w)
{
    if (w->at) {
        atomic_store_explicit(w->at, BETWEEN, memory_order_release);
        rc_fence_light();
    }
}

static void walk_leave(struct rc_thread *t, struct walk *w)
{
    if (w->at)
        atomic_store_explicit(w->at, 0, memory_order_release);
    else if (w->last)
        atomic_store_explicit(w->last, w->saved, memory_order_release);
    t->walk_depth--;
}

/* Without a record: counted, and every destroy waits while it lasts.  The
 * count's seq_cst increment orders it before the load of the head. */
static void anonymous_walk(void (*fn)(struct regcache *c, void *arg), void *arg)
{
    atomic_fetch_add_explicit(&anonymous_walkers, 1, memory_order_seq_cst);
    anonymous_depth++;
    for (struct regcache *c = atomic_load_explicit(&registry_head, memory_order_acquire); c;
         c = atomic_load_explicit(&c->registry_next, memory_order_acquire))
        fn(c, arg);
    anonymous_depth--;
    atomic_fetch_sub_explicit(&anonymous_walkers, 1, memory_order_release);
}

void rc_registry_each(void (*fn)(struct regcache *c, void *arg), void *arg)
{
    if (!atomic_load_explicit(&registry_count, memory_order_acquire))
        return;
    struct rc_thread *t = rc_thread_self();
    if (!t) {
        anonymous_walk(fn, arg);
        return;
    }
    struct walk w;
    walk_enter(t, &w);
    for (struct regcache *c = atomic_load_explicit(&registry_head, memory_order_acquire); c;
         c = atomic_load_explicit(&c->registry_next, memory_order_acquire)) {
        walk_inside(&w, c);
        fn(c, arg);
        walk_between(&w);
    }
    walk_leave(t, &w);
}

/* Which notice: a free, or an allocation (of pinned host memory). */
enum notice_of { FREED, ALLOCATED, ALLOCATED_HOST };

/* A notice to every cache; an allocation goes on to the listeners (eager
 * registration queues the new memory). */
struct notice {
    uintptr_t start, end;
    enum regcache_reason why;
    enum notice_of allocated;
};

static void notify_cache(struct regcache *c, void *arg)
{
    const struct notice *n = arg;
    rc_cache_notify(c, n->start, n->end, n->why);
    if (n->allocated != FREED)
        rc_listeners_allocated(c, n->start, n->end, n->allocated == ALLOCATED_HOST);
}

/* Both notices drop what overlaps the range, in every cache: before a free
 * so that nothing is served from memory about to go, after an allocation
 * so that nothing a get registered of the memory that was there before
 * (between the first notice and the free itself) survives. */
static void invalidate_all(uintptr_t start, uintptr_t end, enum regcache_reason why,
                           enum notice_of allocated)
{
    struct notice n = { start, end, why, allocated };
    rc_registry_each(notify_cache, &n);
}

static void notify(const void *addr, size_t len, enum notice_of allocated)
{
    uintptr_t start = (uintptr_t)addr;
    if (len == 0 || len > UINTPTR_MAX - start)
        return;
    invalidate_all(start, start + len, REGCACHE_REASON_FREED_HOOK, allocated);
}

void regcache_notify_free(const void *addr, size_t len)
{
    notify(addr, len, FREED);
}

void regcache_notify_alloc(const void *addr, size_t len)
{
    notify(addr, len, ALLOCATED);
}

void regcache_notify_host_alloc(const void *addr, size_t len)
{
    notify(addr, len, ALLOCATED_HOST);
}
