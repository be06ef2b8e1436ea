/* How a cache learns that memory was freed, as it reports it, and the
 * turn to TAG_CHECK of a cache whose hooks were lost after create
 * (regcache_create() chooses the mode). */
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "last_error.h"

void rc_validation_append_host(const struct regcache *c, char *why, size_t n)
{
    size_t used = strnlen(why, n - 1);
    snprintf(why + used, n - used, "%s", c->host_reason);
}

/* Another patcher may write libcuda's entries back after the self-test
 * proved them: frees then go unseen.  Misses look (hits stay as they are);
 * the first that finds a patch gone makes every later hit check tags. */
void rc_validation_recheck(struct regcache *c)
{
    char why[sizeof c->lost_reason];
    if (atomic_load_explicit(&c->tag_check, memory_order_relaxed) ||
        c->patches_intact(why, sizeof why))
        return;
    rc_lock(&c->lock);
    if (!atomic_load_explicit(&c->tag_check, memory_order_relaxed)) {
        snprintf(c->lost_reason, sizeof c->lost_reason, "%s", why);
        rc_validation_append_host(c, c->lost_reason, sizeof c->lost_reason);
        /* Release: a reader that sees TAG_CHECK sees the reason. */
        atomic_store_explicit(&c->tag_check, true, memory_order_release);
    }
    rc_unlock(&c->lock);
}

int regcache_validation_mode(const regcache_t *c)
{
    if (!c)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_validation_mode: cache is NULL");
    return atomic_load_explicit(&c->tag_check, memory_order_acquire) ? REGCACHE_VALIDATE_TAG_CHECK
                                                                     : c->validation;
}

const char *regcache_validation_reason(const regcache_t *c)
{
    if (!c)
        return NULL;
    bool lost = c->patches_intact && atomic_load_explicit(&c->tag_check, memory_order_acquire);
    return lost ? c->lost_reason : c->opts.validation_reason;
}
