/* The registry of live caches.
 *
 * regcache_notify_free() walks it on every CUDA free the hooks see, so the
 * walk takes no lock: caches are linked through atomic pointers, a walker
 * marks its thread record odd for the duration (threads.h), and a cache
 * being destroyed is unlinked under the registry lock and then waits until
 * every walker that might have reached it has left.  The walker's marker
 * store needs only a compiler barrier; the remover pays a heavy fence
 * (asym_fence.h) before it reads the markers.  No lock is held while the
 * walk invalidates, so backends may deregister slowly, or call back. */
#include "registry.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "asym_fence.h"
#include "cache.h"
#include "threads.h"

atomic_uint rc_fork_generation_now;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct regcache *) registry_head;
static atomic_int registry_count;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The child inherits the parent's registrations in name only: its verbs
 * context is shared with the parent, so deregistering would tear down the
 * parent's MRs.  It forgets every inherited cache: they answer
 * REGCACHE_ERR_FORKED and regcache_destroy() frees them without
 * deregistering.  The lock is made anew: a parent thread may have held it. */
static void atfork_child(void)
{
    atomic_fetch_add(&rc_fork_generation_now, 1);
    pthread_mutex_init(&registry_lock, NULL);
    atomic_store(&registry_head, NULL);
    atomic_store(&registry_count, 0);
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

/* Wait until each walker that was inside a walk has moved on: its marker
 * changes (it left, or left and came back, which then started after the
 * unlink). */
static bool wait_for_walker(struct rc_thread *t, void *unused)
{
    (void)unused;
    if (t == rc_thread_current)
        return false; /* destroy from inside a walk: this walk is ours */
    uint_fast64_t seen = atomic_load_explicit(&t->walk, memory_order_acquire);
    while ((seen & 1) && atomic_load_explicit(&t->walk, memory_order_acquire) == seen)
        sched_yield();
    return false;
}

static void wait_for_walkers(void)
{
    rc_fence_heavy();
    rc_thread_visit(wait_for_walker, NULL);
}

void rc_registry_remove(struct regcache *c)
{
    pthread_mutex_lock(&registry_lock);
    _Atomic(struct regcache *) *link = &registry_head;
    struct regcache *x;
    while ((x = atomic_load_explicit(link, memory_order_relaxed)) != c)
        link = &x->registry_next;
    atomic_store_explicit(link, atomic_load_explicit(&c->registry_next, memory_order_relaxed),
                          memory_order_release);
    atomic_fetch_sub(&registry_count, 1);
    pthread_mutex_unlock(&registry_lock);
    wait_for_walkers();
}

int regcache_cache_count(void)
{
    return atomic_load_explicit(&registry_count, memory_order_acquire);
}

static void walk_enter(struct rc_thread *t)
{
    if (t->walk_depth++)
        return;
    uint_fast64_t w = atomic_load_explicit(&t->walk, memory_order_relaxed);
    atomic_store_explicit(&t->walk, w + 1, memory_order_relaxed);
    rc_fence_light();
}

static void walk_leave(struct rc_thread *t)
{
    if (--t->walk_depth)
        return;
    uint_fast64_t w = atomic_load_explicit(&t->walk, memory_order_relaxed);
    atomic_store_explicit(&t->walk, w + 1, memory_order_release);
}

/* Both notices drop what overlaps the range, in every cache: before a free
 * so that nothing is served from memory about to go, after an allocation
 * so that nothing a get registered of the memory that was there before
 * (between the first notice and the free itself) survives. */
static void notify(const void *addr, size_t len)
{
    uintptr_t start = (uintptr_t)addr;
    if (!atomic_load_explicit(&registry_count, memory_order_acquire) || len == 0 ||
        len > UINTPTR_MAX - start)
        return;
    struct rc_thread *t = rc_thread_self();
    if (!t) {
        /* No record (no memory for one): walk under the lock instead. */
        pthread_mutex_lock(&registry_lock);
        for (struct regcache *c = atomic_load(&registry_head); c;
             c = atomic_load(&c->registry_next))
            rc_cache_invalidate(c, start, start + len, RC_BY_NOTIFY);
        pthread_mutex_unlock(&registry_lock);
        return;
    }
    walk_enter(t);
    for (struct regcache *c = atomic_load_explicit(&registry_head, memory_order_acquire); c;
         c = atomic_load_explicit(&c->registry_next, memory_order_acquire))
        rc_cache_notify(c, start, start + len);
    walk_leave(t);
}

void regcache_notify_free(const void *addr, size_t len)
{
    notify(addr, len);
}

void regcache_notify_alloc(const void *addr, size_t len)
{
    notify(addr, len);
}
