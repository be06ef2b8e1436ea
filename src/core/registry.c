#include <pthread.h>
#include <stdint.h>

#include "cache.h"
#include "registry.h"

atomic_uint rc_fork_generation_now;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct regcache *registry_head;
/* Read without the lock so that every free in a process without a cache
 * costs one load. */
static atomic_int registry_count;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* notify_free deregisters under the registry lock; a free hook that fires
 * inside that deregistration must not take the lock again. */
static _Thread_local int in_notify;

/* The child inherits the parent's registrations in name only: its verbs
 * context is shared with the parent, so deregistering would tear down the
 * parent's MRs.  The child forgets every inherited cache; they answer
 * REGCACHE_ERR_FORKED and regcache_destroy() frees them without
 * deregistering. */
static void atfork_child(void)
{
    atomic_fetch_add(&rc_fork_generation_now, 1);
    pthread_mutex_init(&registry_lock, NULL);
    registry_head = NULL;
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
    c->registry_prev = NULL;
    c->registry_next = registry_head;
    if (registry_head)
        registry_head->registry_prev = c;
    registry_head = c;
    atomic_fetch_add(&registry_count, 1);
    pthread_mutex_unlock(&registry_lock);
}

void rc_registry_remove(struct regcache *c)
{
    pthread_mutex_lock(&registry_lock);
    if (c->registry_prev)
        c->registry_prev->registry_next = c->registry_next;
    else
        registry_head = c->registry_next;
    if (c->registry_next)
        c->registry_next->registry_prev = c->registry_prev;
    atomic_fetch_sub(&registry_count, 1);
    pthread_mutex_unlock(&registry_lock);
}

int regcache_cache_count(void)
{
    return atomic_load_explicit(&registry_count, memory_order_acquire);
}

void regcache_notify_free(const void *addr, size_t len)
{
    uintptr_t start = (uintptr_t)addr;
    if (!atomic_load_explicit(&registry_count, memory_order_acquire) || len == 0 ||
        len > UINTPTR_MAX - start || in_notify)
        return;
    in_notify = 1;
    pthread_mutex_lock(&registry_lock);
    for (struct regcache *c = registry_head; c; c = c->registry_next)
        rc_cache_invalidate(c, start, start + len, RC_BY_NOTIFY);
    pthread_mutex_unlock(&registry_lock);
    in_notify = 0;
}
