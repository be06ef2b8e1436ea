/* Background registration on the cache's edge (prefetch.h): what it does
 * with a get's miss, an allocation, an invalidation and the destroy, and
 * the queueing of a range that each of them and the public calls share. */
#include "prefetch.h"

#include <stdlib.h>

#include "access.h"
#include "cache.h"
#include "last_error.h"

int rc_prefetch_queue(struct rc_prefetch *p, uintptr_t start, uintptr_t end, struct rc_req rq,
                      enum rc_eager from)
{
    int rc = REGCACHE_OK;
    rc_lock(&p->lock);
    if (p->stopping) {
        rc_unlock(&p->lock);
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_prefetch: the cache is being destroyed");
    }
    if (!p->jobs)
        rc = rc_queue_make_locked(p, p->cache->opts.params.prefetch_queue);
    if (rc == REGCACHE_OK && p->started == 0)
        rc = rc_workers_start_locked(p);
    if (rc != REGCACHE_OK) {
        rc_unlock(&p->lock);
        return rc_fail(rc, "out of memory starting the background registration workers");
    }
    bool already;
    struct rc_job *j = rc_queue_add_locked(p, start, end, rq, from, &already);
    if (j)
        rc_workers_wake_locked(p);
    rc_unlock(&p->lock);
    if (j || already)
        return REGCACHE_OK;
    return rc_fail(REGCACHE_ERR_QUEUE_FULL,
                   "%zu ranges are queued or being registered in the background "
                   "(params.prefetch_queue, REGCACHE_PREFETCH_QUEUE)",
                   p->capacity);
}

/* A get's miss: a failure kept for the range ends it; a non-blocking get's
 * range is queued instead, and the get ends with REGCACHE_ERR_AGAIN (or
 * why it could not be queued). */
static int before_miss(void *arg, uintptr_t start, uintptr_t end, struct rc_req rq)
{
    struct rc_prefetch *p = arg;
    if (__builtin_expect(!rc_get_nonblocking, 1))
        return rc_failure_take(p, start, end, rq.rail);
    /* A get that a callback makes from here on is a get of its own. */
    rc_get_nonblocking = false;
    int rc = rc_failure_take(p, start, end, rq.rail);
    if (rc == REGCACHE_OK)
        rc = rc_prefetch_queue(p, start, end, rq, RC_EAGER_NONE);
    if (rc == REGCACHE_OK)
        rc = rc_fail(REGCACHE_ERR_AGAIN,
                     "[%#jx, %#jx) on rail %u is being registered in the "
                     "background",
                     (uintmax_t)start, (uintmax_t)end, rq.rail);
    return rc;
}

/* Eager registration: a large enough allocation is queued on the chosen
 * rails; pinned host memory only where the cache takes host memory (a
 * cache that refuses it would only start a worker to fail on it). */
static void on_alloc(void *arg, uintptr_t start, uintptr_t end, bool pinned_host)
{
    struct rc_prefetch *p = arg;
    const struct regcache *c = p->cache;
    const struct regcache_params *params = &c->opts.params;
    if (!params->eager_min_bytes || end - start < params->eager_min_bytes ||
        (pinned_host && !params->host_memory))
        return;
    for (unsigned rail = 0; rail < c->rails; rail++)
        if (params->eager_rails >> rail & 1 &&
            rc_prefetch_queue(p, start, end, (struct rc_req){ rail, RC_ACCESS_DEFAULT },
                              pinned_host ? RC_EAGER_HOST : RC_EAGER_ALLOC) != REGCACHE_OK)
            rc_count(&p->dropped);
}

/* Kept failures are about memory that went away. */
static void on_invalidate(void *arg, uintptr_t start, uintptr_t end)
{
    rc_failures_forget(arg, start, end);
}

/* Queued jobs are dropped, the worker threads finish the registrations
 * they are in and are joined: first of the listeners, as the workers
 * register through the cache and so tell the others.  In a fork child,
 * whose workers were the parent's, nothing is waited for. */
static void on_destroy(void *arg)
{
    struct rc_prefetch *p = arg;
    if (rc_forked(p->cache)) {
        /* The parent's lock may have been held at the fork, and what it
         * guards half changed: left as is. */
        return;
    }
    rc_lock(&p->lock);
    p->stopping = true;
    rc_queue_drop_locked(p);
    rc_cond_broadcast(&p->work);
    rc_unlock(&p->lock);
    rc_workers_join(p);
}

/* Other features' threads may take kept failures until their on_destroy:
 * the memory goes last. */
static void after_drain(void *arg)
{
    struct rc_prefetch *p = arg;
    if (rc_forked(p->cache))
        return;
    rc_queue_free(p);
    free(p->threads);
    free(p);
}

static const struct rc_listener listener = {
    .before_miss = before_miss,
    .on_invalidate = on_invalidate,
    .on_alloc = on_alloc,
    .on_destroy = on_destroy,
    .after_drain = after_drain,
};

int rc_prefetch_open(struct regcache *c, const struct rc_options *o)
{
    (void)o;
    struct rc_prefetch *p = calloc(1, sizeof *p);
    if (!p)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory for background registration");
    p->cache = c;
    rc_lock_init(&p->lock);
    rc_cond_init(&p->work);
    rc_cond_init(&p->idle);
    p->listener = rc_listen(c, &listener, p);
    if (p->listener < 0) {
        free(p);
        return rc_fail(REGCACHE_ERR_NO_MEMORY,
                       "no room on the cache's edge for background registration");
    }
    return REGCACHE_OK;
}

struct rc_prefetch *rc_prefetch_of(const struct regcache *c)
{
    return rc_listener_arg(c, &listener);
}

void rc_prefetch_counts(const struct regcache *c, uint64_t *queued, uint64_t *failed,
                        uint64_t *dropped)
{
    const struct rc_prefetch *p = rc_prefetch_of(c);
    *queued = atomic_load_explicit(&p->queued, memory_order_relaxed);
    *failed = atomic_load_explicit(&p->failures, memory_order_relaxed);
    *dropped = atomic_load_explicit(&p->dropped, memory_order_relaxed);
}
