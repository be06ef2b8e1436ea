/* The public calls of background registration: ranges checked and queued,
 * one at a time or in batches, and the wait for them all. */
#include "access.h"
#include "cache.h"
#include "last_error.h"
#include "prefetch.h"

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
            rc_prefetch_of(c), (uintptr_t)addr, (uintptr_t)addr + len,
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
    struct rc_prefetch *p = rc_prefetch_of(c);
    rc_lock(&p->lock);
    while (p->listed) {
        p->idle_waiters++;
        rc_cond_wait(&p->idle, &p->lock);
        p->idle_waiters--;
    }
    rc_unlock(&p->lock);
    return REGCACHE_OK;
}
