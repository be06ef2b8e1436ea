/* What a holder does with its token beyond reading it: another hold of the
 * same registration (regcache_entry_hold), and the registration's leave
 * with a callback at its end (regcache_entry_invalidate).
 *
 * Neither looks anything up: the token names the entry, and the caller's
 * hold keeps it from being recycled meanwhile.  The callbacks wait on the
 * entry itself and run where every entry ends, in its deregistration
 * (release.c), so that whichever put is the last - of a hit's slot, of a
 * counted hold, of a leave notice, or destroy's - runs them, once. */
#include <stdlib.h>

#include "cache.h"
#include "hold.h"
#include "last_error.h"

/* The entry and rail of a token of cache c that the caller holds, or an
 * error naming fn. */
static int token_entry(regcache_t *c, const regcache_entry_t *h, const char *fn,
                       struct regcache_entry **e, unsigned *rail)
{
    if (!c || !h)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: %s is NULL", fn, !c ? "cache" : "entry");
    if (rc_forked(c))
        return rc_fail(REGCACHE_ERR_FORKED, "%s: the cache was created before fork()", fn);
    *e = rc_handle_decode(h, rail);
    if (!*e)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: the token %p was already put", fn, (void *)h);
    if ((*e)->cache != c)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: the token %p belongs to another cache", fn,
                       (void *)h);
    return REGCACHE_OK;
}

/* Under the lock: does the token still hold e?  A slot token read its
 * slot non-empty, and only its owner's put empties it.  A counted token
 * needs a count, on an entry not handed back for deregistration (the
 * token on_deregister gets). */
static bool token_live_locked(const regcache_entry_t *h, const struct regcache_entry *e)
{
    return ((uintptr_t)h & RC_HANDLE_SLOT) ||
           (e->state != RC_FREE &&
            atomic_load_explicit(&((struct regcache_entry *)e)->refs, memory_order_relaxed) &
                RC_COUNT_MASK);
}

static COLD int token_put(const char *fn, const regcache_entry_t *h)
{
    return rc_fail(REGCACHE_ERR_INVALID,
                   "%s: the token %p was already put, or is being deregistered (on_deregister's)",
                   fn, (void *)h);
}

int regcache_entry_hold(regcache_t *c, const regcache_entry_t *h, regcache_entry_t **token)
{
    static const char fn[] = "regcache_entry_hold";
    if (!token)
        return rc_fail(REGCACHE_ERR_INVALID, "%s: token is NULL", fn);
    *token = NULL;
    struct regcache_entry *e = NULL;
    unsigned rail;
    int rc = token_entry(c, h, fn, &e, &rail);
    if (rc != REGCACHE_OK)
        return rc;
    /* A hit's token: the entry is ready or has left the cache, never
     * pending, and that slot keeps it (hold.h) while this one is taken. */
    if ((uintptr_t)h & RC_HANDLE_SLOT) {
        *token = rc_slot_hold(c, e, rail);
        if (*token)
            return REGCACHE_OK;
    }
    /* Counted holds change only under the lock (entry.h), here on entries
     * that left the cache too: their last holder releases them. */
    rc_lock(&c->lock);
    if (!token_live_locked(h, e)) {
        rc_unlock(&c->lock);
        return token_put(fn, h);
    }
    unsigned refs = atomic_load_explicit(&e->refs, memory_order_relaxed);
    if ((refs & RC_COUNT_MASK) != RC_COUNT_MASK) {
        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
        *token = rc_counted_handle(e, rail);
    }
    rc_unlock(&c->lock);
    return *token ? REGCACHE_OK : rc_hold_limit(e);
}

int regcache_entry_invalidate(regcache_t *c, regcache_entry_t *h, void (*cb)(void *arg), void *arg)
{
    static const char fn[] = "regcache_entry_invalidate";
    struct regcache_entry *e = NULL;
    unsigned rail;
    int rc = token_entry(c, h, fn, &e, &rail);
    if (rc != REGCACHE_OK)
        return rc;
    struct rc_completion *done = NULL;
    if (cb) {
        done = malloc(sizeof(*done));
        if (!done)
            return rc_fail(REGCACHE_ERR_NO_MEMORY, "%s: out of memory for the callback", fn);
        *done = (struct rc_completion){ cb, arg, NULL };
    }
    struct regcache_entry *victims = NULL;
    rc_lock(&c->lock);
    if (!token_live_locked(h, e)) {
        rc_unlock(&c->lock);
        free(done);
        return token_put(fn, h);
    }
    if (done) {
        /* In the order the calls came. */
        struct rc_completion **at = &e->completions;
        while (*at)
            at = &(*at)->next;
        *at = done;
    }
    /* An entry that left already keeps its reason; a pending one (from
     * on_register) is handed out once by its registering get. */
    if ((e->state == RC_READY || e->state == RC_PENDING) && !rc_entry_is_detached(e))
        rc_detach_locked(c, e, &victims, REGCACHE_REASON_INVALIDATE);
    rc_check_locked(c);
    rc_unlock(&c->lock);
    rc_release_victims(c, victims);
    return REGCACHE_OK;
}
