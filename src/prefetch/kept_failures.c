/* What failed background registrations leave for the gets that follow
 * (prefetch.h): a failure is kept while the memory it was about stays the
 * same, told once to the next get of its range and rail, forgotten when an
 * invalidation says the memory went away. */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>

#include "cache.h"
#include "last_error.h"
#include "prefetch.h"

/* Failures that say the memory is gone tell the next get nothing: memory
 * allocated there since is another story. */
static bool worth_keeping(int status)
{
    return status != REGCACHE_ERR_NOT_GPU;
}

/* Are the pages of [start, end) mapped?  msync() of pages that are not
 * fails with ENOMEM; MS_ASYNC asks for nothing else (a no-op since Linux
 * 2.6.19). */
static bool pages_mapped(const struct regcache *c, uintptr_t start, uintptr_t end)
{
    uintptr_t mask = (uintptr_t)c->host_page - 1;
    uintptr_t lo = start & ~mask, hi = end > UINTPTR_MAX - mask ? end : (end + mask) & ~mask;
    return msync((void *)lo, hi - lo, MS_ASYNC) == 0 || errno != ENOMEM;
}

/* The memory at [start, end) now.  Without the locks: a driver call. */
static struct rc_memory_id memory_now(const struct rc_prefetch *p, uintptr_t start, uintptr_t end)
{
    const struct regcache *c = p->cache;
    struct rc_memory_id id = { .tag = rc_memory_tag(&c->mem, start), .mapped = true };
    if (!id.tag)
        id.mapped = pages_mapped(c, start, end);
    return id;
}

/* How many are kept changes under the lock: a plain load and store.  While
 * any is, the feature has work an invalidation must do (forgetting). */
static void count_kept_locked(struct rc_prefetch *p, int delta)
{
    unsigned kept = atomic_load_explicit(&p->failures_kept, memory_order_relaxed) + (unsigned)delta;
    if (kept == 1 && delta > 0)
        rc_listener_pending(p->cache, p->listener, true);
    atomic_store_explicit(&p->failures_kept, kept, memory_order_relaxed);
    if (kept == 0)
        rc_listener_pending(p->cache, p->listener, false);
}

void rc_failure_keep(struct rc_prefetch *p, const struct rc_job *job, int status)
{
    bool keep = worth_keeping(status);
    struct rc_memory_id memory =
        keep ? memory_now(p, job->start, job->end) : (struct rc_memory_id){ 0 };
    rc_lock(&p->lock);
    rc_count(&p->failures);
    if (keep) {
        struct rc_failure *f = &p->failed[p->failed_next++ % RC_PREFETCH_FAILURES];
        if (!f->end)
            count_kept_locked(p, 1);
        *f = (struct rc_failure){ job->start, job->end, job->rail, status, memory, "" };
        snprintf(f->message, sizeof f->message, "%s", regcache_last_error());
    }
    rc_unlock(&p->lock);
}

/* Under the lock: drop a kept failure. */
static void forget_locked(struct rc_prefetch *p, struct rc_failure *f)
{
    f->end = 0;
    count_kept_locked(p, -1);
}

int rc_failure_take(struct rc_prefetch *p, uintptr_t start, uintptr_t end, unsigned rail)
{
    if (!rc_failures_kept(p))
        return REGCACHE_OK;
    struct rc_failure seen = { .end = 0 };
    rc_lock(&p->lock);
    for (unsigned i = 0; i < RC_PREFETCH_FAILURES && !seen.end; i++) {
        struct rc_failure *f = &p->failed[i];
        if (f->end && f->rail == rail && f->start < end && start < f->end) {
            seen = *f;
            forget_locked(p, f);
        }
    }
    rc_unlock(&p->lock);
    if (!seen.end)
        return REGCACHE_OK;
    /* Taken either way: told once, or about memory that is gone. */
    struct rc_memory_id now = memory_now(p, seen.start, seen.end);
    if (now.tag != seen.memory.tag || now.mapped != seen.memory.mapped)
        return REGCACHE_OK;
    return rc_fail(seen.status, "a background registration of [%#jx, %#jx) on rail %u failed: %s",
                   (uintmax_t)seen.start, (uintmax_t)seen.end, seen.rail, seen.message);
}

void rc_failures_forget(struct rc_prefetch *p, uintptr_t start, uintptr_t end)
{
    if (!rc_failures_kept(p))
        return;
    rc_lock(&p->lock);
    for (unsigned i = 0; i < RC_PREFETCH_FAILURES; i++)
        if (p->failed[i].end && p->failed[i].start < end && start < p->failed[i].end)
            forget_locked(p, &p->failed[i]);
    rc_unlock(&p->lock);
}
