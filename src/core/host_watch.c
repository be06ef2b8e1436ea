/* What a cache does with the host memory monitor (host_monitor.h): its
 * pageable host entries are watched from before their registration until
 * their deregistration, and those that cannot be are counted.  What the
 * monitor hears of leaves the caches that watch in two steps: entries are
 * taken out at once, calling back nobody, and deregistered later (with
 * their callbacks and notices) by a thread that waits for nothing. */
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "cache_registry.h"
#include "host_monitor.h"
#include "host_unmapping.h"
#include "options.h"

void rc_host_watch_setup(struct regcache *c)
{
    /* In the order of enum regcache_host_monitor. */
    static const char *const modes[] = { "AUTO", "OFF", "LIBC", "UFFD", "UCM" };
    const struct regcache_params *p = &c->opts.params;
    /* The variable overrides the field, as every variable does. */
    const char *env = rc_option_env("REGCACHE_HOST_MONITOR");
    char asked[48];
    if (env)
        snprintf(asked, sizeof asked, "REGCACHE_HOST_MONITOR=%s", env);
    else
        snprintf(asked, sizeof asked, "params.host_monitor is %s", modes[p->host_monitor]);
    if (!p->host_memory)
        snprintf(c->host_note, sizeof c->host_note, "not accepted");
    else if (p->host_monitor == REGCACHE_HOST_MONITOR_OFF)
        snprintf(c->host_note, sizeof c->host_note,
                 "not monitored (%s): invalidate before unmapping", asked);
    else
        c->host_by =
            rc_host_monitor_open(p->host_monitor, asked, c->host_note, sizeof c->host_note);
}

static bool pageable_host(const struct rc_want *w)
{
    return w->slot == RC_HOST_SLOT && !w->buffer_id;
}

struct rc_host_claim *rc_host_watch(struct regcache *c, const struct rc_want *w,
                                    const struct regcache_entry *e)
{
    if (c->host_by == RC_HOST_BY_NONE || !pageable_host(w))
        return NULL;
    /* Merged or not, the range lies inside the mappings the miss learnt. */
    enum rc_host_sharing sharing = !w->span_end     ? RC_HOST_SHARING_UNKNOWN
                                   : w->span_shared ? RC_HOST_SHARED
                                                    : RC_HOST_PRIVATE;
    return rc_host_monitor_watch(e->node.start, e->node.end, c->host_by, sharing);
}

void rc_host_watch_set_locked(struct regcache *c, struct regcache_entry *e, const struct rc_want *w,
                              struct rc_host_claim *claim)
{
    e->claim = claim;
    e->unwatched = !claim && pageable_host(w);
    if (e->unwatched)
        atomic_fetch_add_explicit(&c->host_unwatched, 1, memory_order_relaxed);
}

bool rc_host_watch_unsettled(const struct regcache_entry *e, enum regcache_reason *why)
{
    if (!e->claim || !rc_host_unmapping_meets(e->node.start, e->node.end))
        return false;
    *why = REGCACHE_REASON_FREED_MONITOR;
    return true;
}

void rc_host_unwatch(struct regcache *c, struct regcache_entry *e)
{
    rc_host_monitor_unwatch(e->claim);
    e->claim = NULL;
    if (e->unwatched)
        atomic_fetch_sub_explicit(&c->host_unwatched, 1, memory_order_relaxed);
    e->unwatched = false;
}

struct unmapped {
    uintptr_t start, end;
    bool later; /* some cache has deregistrations or notices to give */
};

/* A cache that does not watch its host memory keeps the explicit
 * contract: the monitor leaves it alone. */
static void unmapped_in(struct regcache *c, void *arg)
{
    struct unmapped *u = arg;
    if (c->host_by != RC_HOST_BY_NONE)
        u->later |= rc_cache_notify_later(c, u->start, u->end, REGCACHE_REASON_FREED_MONITOR);
}

bool rc_host_watch_unmapped(uintptr_t start, uintptr_t end)
{
    struct unmapped u = { start, end, false };
    rc_registry_each(unmapped_in, &u);
    return u.later;
}

static void release_in(struct regcache *c, void *arg)
{
    (void)arg;
    if (c->host_by != RC_HOST_BY_NONE)
        rc_release_deferred(c);
}

void rc_host_watch_release(void)
{
    rc_registry_each(release_in, NULL);
}
