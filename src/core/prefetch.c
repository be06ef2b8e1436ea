/* The queue of background registrations, the failures they leave, and the
 * public calls that feed it (prefetch.h). */
#include "prefetch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "access.h"
#include "cache.h"
#include "last_error.h"

__thread bool rc_get_nonblocking __attribute__((tls_model("initial-exec")));
__thread bool rc_in_worker __attribute__((tls_model("initial-exec")));

/* prefetch_failures_kept changes under p's lock: a plain load and store. */
static void add_locked_uint(atomic_uint *n, unsigned delta)
{
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + delta,
                          memory_order_relaxed);
}

static size_t bucket_of(const struct rc_prefetch *p, uintptr_t start, unsigned rail)
{
    uint64_t h = ((uint64_t)start >> 12) * 0x9e3779b97f4a7c15ull + rail;
    return (size_t)(h >> 32) % p->nbuckets;
}

/* Under the lock: the jobs and their listing, made at the first use. */
static int make_queue_locked(struct rc_prefetch *p, size_t capacity)
{
    p->jobs = calloc(capacity, sizeof(*p->jobs));
    p->buckets = calloc(2 * capacity, sizeof(*p->buckets));
    p->failed = calloc(RC_PREFETCH_FAILURES, sizeof(*p->failed));
    if (!p->jobs || !p->buckets || !p->failed) {
        free(p->jobs);
        free(p->buckets);
        free(p->failed);
        p->jobs = NULL;
        p->buckets = NULL;
        p->failed = NULL;
        return REGCACHE_ERR_NO_MEMORY;
    }
    p->capacity = capacity;
    p->nbuckets = 2 * capacity;
    for (size_t i = 0; i < capacity; i++) {
        p->jobs[i].next = p->free;
        p->free = &p->jobs[i];
    }
    return REGCACHE_OK;
}

static bool listed_locked(const struct rc_prefetch *p, uintptr_t start, uintptr_t end,
                          struct rc_req rq)
{
    for (const struct rc_job *j = p->buckets[bucket_of(p, start, rq.rail)]; j; j = j->hash_next)
        if (j->start == start && j->end == end && j->rail == rq.rail && j->want == rq.want)
            return true;
    return false;
}

int rc_prefetch_queue(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq,
                      enum rc_eager from)
{
    struct rc_prefetch *p = &c->pf;
    int rc = REGCACHE_OK;
    rc_lock(&p->lock);
    if (p->stopping) {
        rc_unlock(&p->lock);
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_prefetch: the cache is being destroyed");
    }
    if (!p->jobs)
        rc = make_queue_locked(p, c->opts.params.prefetch_queue);
    if (rc == REGCACHE_OK && p->started == 0)
        rc = rc_workers_start_locked(c);
    if (rc != REGCACHE_OK) {
        rc_unlock(&p->lock);
        return rc_fail(rc, "out of memory starting the background registration workers");
    }
    if (listed_locked(p, start, end, rq)) {
        rc_unlock(&p->lock);
        return REGCACHE_OK;
    }
    struct rc_job *j = p->free;
    if (!j) {
        rc_unlock(&p->lock);
        return rc_fail(REGCACHE_ERR_QUEUE_FULL,
                       "%zu ranges are queued or being registered in the background "
                       "(params.prefetch_queue, REGCACHE_PREFETCH_QUEUE)",
                       p->capacity);
    }
    p->free = j->next;
    *j = (struct rc_job){
        .start = start, .end = end, .rail = rq.rail, .want = rq.want, .from = from
    };
    size_t b = bucket_of(p, start, rq.rail);
    j->hash_next = p->buckets[b];
    p->buckets[b] = j;
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->listed++;
    rc_add_locked(&p->waiting, 1);
    rc_count(&p->queued);
    rc_workers_wake_locked(p);
    rc_unlock(&p->lock);
    return REGCACHE_OK;
}

struct rc_job *rc_prefetch_next_locked(struct rc_prefetch *p)
{
    struct rc_job *j = p->head;
    if (j) {
        rc_add_locked(&p->waiting, (size_t)-1);
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
    }
    return j;
}

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
static struct rc_memory_id memory_now(const struct regcache *c, uintptr_t start, uintptr_t end)
{
    struct rc_memory_id id = { .tag = rc_memory_tag(&c->mem, start), .mapped = true };
    if (!id.tag)
        id.mapped = pages_mapped(c, start, end);
    return id;
}

void rc_prefetch_done(struct regcache *c, struct rc_job *job, int status)
{
    struct rc_prefetch *p = &c->pf;
    bool keep = status < 0 && worth_keeping(status);
    struct rc_memory_id memory =
        keep ? memory_now(c, job->start, job->end) : (struct rc_memory_id){ 0 };
    rc_lock(&p->lock);
    struct rc_job **at = &p->buckets[bucket_of(p, job->start, job->rail)];
    while (*at != job)
        at = &(*at)->hash_next;
    *at = job->hash_next;
    if (status < 0) {
        rc_count(&p->failures);
        if (keep) {
            struct rc_failure *f = &p->failed[p->failed_next++ % RC_PREFETCH_FAILURES];
            if (!f->end)
                add_locked_uint(&c->prefetch_failures_kept, 1);
            *f = (struct rc_failure){ job->start, job->end, job->rail, status, memory, "" };
            snprintf(f->message, sizeof f->message, "%s", regcache_last_error());
        }
    }
    job->next = p->free;
    p->free = job;
    if (--p->listed == 0 && p->idle_waiters)
        rc_cond_broadcast(&p->idle);
    rc_unlock(&p->lock);
}

/* Under the lock: drop a kept failure. */
static void forget_locked(struct regcache *c, struct rc_failure *f)
{
    f->end = 0;
    add_locked_uint(&c->prefetch_failures_kept, (unsigned)-1);
}

int rc_prefetch_take_failure(struct regcache *c, uintptr_t start, uintptr_t end, unsigned rail)
{
    struct rc_prefetch *p = &c->pf;
    if (!rc_prefetch_failures_kept(c))
        return REGCACHE_OK;
    struct rc_failure seen = { .end = 0 };
    rc_lock(&p->lock);
    for (unsigned i = 0; i < RC_PREFETCH_FAILURES && !seen.end; i++) {
        struct rc_failure *f = &p->failed[i];
        if (f->end && f->rail == rail && f->start < end && start < f->end) {
            seen = *f;
            forget_locked(c, f);
        }
    }
    rc_unlock(&p->lock);
    if (!seen.end)
        return REGCACHE_OK;
    /* Taken either way: told once, or about memory that is gone. */
    struct rc_memory_id now = memory_now(c, seen.start, seen.end);
    if (now.tag != seen.memory.tag || now.mapped != seen.memory.mapped)
        return REGCACHE_OK;
    return rc_fail(seen.status, "a background registration of [%#jx, %#jx) on rail %u failed: %s",
                   (uintmax_t)seen.start, (uintmax_t)seen.end, seen.rail, seen.message);
}

void rc_prefetch_forget(struct regcache *c, uintptr_t start, uintptr_t end)
{
    struct rc_prefetch *p = &c->pf;
    if (!rc_prefetch_failures_kept(c))
        return;
    rc_lock(&p->lock);
    for (unsigned i = 0; i < RC_PREFETCH_FAILURES; i++)
        if (p->failed[i].end && p->failed[i].start < end && start < p->failed[i].end)
            forget_locked(c, &p->failed[i]);
    rc_unlock(&p->lock);
}

int rc_nonblock_miss(struct regcache *c, uintptr_t start, uintptr_t end, struct rc_req rq)
{
    unsigned rail = rq.rail;
    rc_get_nonblocking = false;
    int rc = rc_prefetch_take_failure(c, start, end, rail);
    if (rc == REGCACHE_OK)
        rc = rc_prefetch_queue(c, start, end, rq, RC_EAGER_NONE);
    if (rc == REGCACHE_OK)
        rc = rc_fail(REGCACHE_ERR_AGAIN,
                     "[%#jx, %#jx) on rail %u is being registered in the "
                     "background",
                     (uintmax_t)start, (uintmax_t)end, rail);
    return rc;
}

void rc_eager_notify(struct regcache *c, uintptr_t start, uintptr_t end, enum rc_eager from)
{
    const struct regcache_params *p = &c->opts.params;
    /* A cache that refuses host memory would only start a worker to fail
     * on it. */
    if (!p->eager_min_bytes || end - start < p->eager_min_bytes ||
        (from == RC_EAGER_HOST && !p->host_memory))
        return;
    for (unsigned rail = 0; rail < c->rails; rail++)
        if (p->eager_rails >> rail & 1 &&
            rc_prefetch_queue(c, start, end, (struct rc_req){ rail, RC_ACCESS_DEFAULT }, from) !=
                REGCACHE_OK)
            rc_count(&c->pf.dropped);
}

void rc_prefetch_stop(struct regcache *c)
{
    struct rc_prefetch *p = &c->pf;
    if (rc_forked(c)) {
        /* The workers were the parent's threads; its lock may have been
         * held at the fork, and what it guards half changed: left as is. */
        return;
    }
    rc_lock(&p->lock);
    p->stopping = true;
    for (struct rc_job *j; (j = rc_prefetch_next_locked(p));) {
        struct rc_job **at = &p->buckets[bucket_of(p, j->start, j->rail)];
        while (*at != j)
            at = &(*at)->hash_next;
        *at = j->hash_next;
        p->listed--;
        rc_count(&p->dropped);
    }
    rc_cond_broadcast(&p->work);
    rc_unlock(&p->lock);
    rc_workers_join(c);
    free(p->jobs);
    free(p->buckets);
    free(p->failed);
    free(p->threads);
}

/* ---- public calls -------------------------------------------------------- */

static int check_range(regcache_t *c, const char *fn, unsigned rail, const void *addr, size_t len)
{
    if (!c || !addr)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: %s is NULL", fn, !c ? "cache" : "addr");
    if (len == 0 || len > UINTPTR_MAX - (uintptr_t)addr)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: %p + %zu is %s", fn, addr, len,
                       len ? "wrapping the address space" : "empty");
    if (rail >= c->rails)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: rail %u, but the cache has %u", fn, rail,
                       c->rails);
    if (rc_forked(c))
        return rc_fail(REGCACHE_ERR_FORKED, "%s: the cache was created before fork()", fn);
    return REGCACHE_OK;
}

/* One range of a prefetch call: checked, then queued with its access, or
 * with params.access (RC_ACCESS_DEFAULT) for the calls without one. */
static int prefetch_one(regcache_t *c, const char *fn, unsigned rail, const void *addr, size_t len,
                        bool with_access, int access)
{
    int rc = check_range(c, fn, rail, addr, len);
    if (rc == REGCACHE_OK && with_access && access < 0)
        rc = rc_fail(REGCACHE_ERR_INVALID, "%s: negative access %#x", fn, (unsigned)access);
    if (rc == REGCACHE_OK)
        rc = rc_prefetch_queue(
            c, (uintptr_t)addr, (uintptr_t)addr + len,
            (struct rc_req){ rail, with_access ? (unsigned)rc_access_with_local_write(access)
                                               : RC_ACCESS_DEFAULT },
            RC_EAGER_NONE);
    return rc;
}

int regcache_prefetch(regcache_t *c, unsigned rail, const void *addr, size_t len)
{
    return prefetch_one(c, "regcache_prefetch", rail, addr, len, false, 0);
}

int regcache_prefetch_access(regcache_t *c, unsigned rail, const void *addr, size_t len, int access)
{
    return prefetch_one(c, "regcache_prefetch_access", rail, addr, len, true, access);
}

/* The batch calls, over ranges without access (plain) or with: each in
 * order until one fails; *queued says how many went. */
static int prefetch_batch(regcache_t *c, const char *fn, const struct regcache_range *plain,
                          const struct regcache_access_range *ranges, size_t n, size_t *queued)
{
    size_t done = 0;
    int rc = c && (plain || ranges || !n)
                 ? REGCACHE_OK
                 : rc_fail(REGCACHE_ERR_INVALID, "%s: %s is NULL", fn, !c ? "cache" : "ranges");
    for (; rc == REGCACHE_OK && done < n; done++) {
        rc = plain ? prefetch_one(c, fn, plain[done].rail, plain[done].addr, plain[done].len, false,
                                  0)
                   : prefetch_one(c, fn, ranges[done].rail, ranges[done].addr, ranges[done].len,
                                  true, ranges[done].access);
        if (rc != REGCACHE_OK)
            break;
    }
    if (queued)
        *queued = done;
    return rc;
}

int regcache_prefetch_batch(regcache_t *c, const struct regcache_range *ranges, size_t n,
                            size_t *queued)
{
    return prefetch_batch(c, "regcache_prefetch_batch", ranges, NULL, n, queued);
}

int regcache_prefetch_batch_access(regcache_t *c, const struct regcache_access_range *ranges,
                                   size_t n, size_t *queued)
{
    return prefetch_batch(c, "regcache_prefetch_batch_access", NULL, ranges, n, queued);
}

int regcache_prefetch_wait(regcache_t *c)
{
    if (!c)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_prefetch_wait: cache is NULL");
    if (rc_forked(c))
        return rc_fail(REGCACHE_ERR_FORKED,
                       "regcache_prefetch_wait: the cache was created before fork()");
    if (rc_in_worker)
        return rc_fail(REGCACHE_ERR_REENTRANT, "regcache_prefetch_wait from a backend callback "
                                               "of a background registration");
    struct rc_prefetch *p = &c->pf;
    rc_lock(&p->lock);
    while (p->listed) {
        p->idle_waiters++;
        rc_cond_wait(&p->idle, &p->lock);
        p->idle_waiters--;
    }
    rc_unlock(&p->lock);
    return REGCACHE_OK;
}
