/* What a cache does with the host memory monitor (host_monitor.h): its
 * pageable host entries are watched from before their registration until
 * their deregistration, and those that cannot be are counted. */
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "host_monitor.h"

void rc_host_watch_setup(struct regcache *c)
{
    const struct regcache_params *p = &c->opts.params;
    if (!p->host_memory)
        snprintf(c->host_note, sizeof c->host_note, "not accepted");
    else if (p->host_monitor == REGCACHE_HOST_MONITOR_OFF)
        snprintf(c->host_note, sizeof c->host_note,
                 "not monitored (REGCACHE_HOST_MONITOR=off or params.host_monitor): "
                 "invalidate before unmapping");
    else
        c->host_by = rc_host_monitor_open(p->host_monitor, c->host_note, sizeof c->host_note);
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
    return rc_host_monitor_watch(e->node.start, e->node.end, c->host_by);
}

void rc_host_watch_set_locked(struct regcache *c, struct regcache_entry *e, const struct rc_want *w,
                              struct rc_host_claim *claim)
{
    e->claim = claim;
    e->unwatched = !claim && pageable_host(w);
    if (e->unwatched)
        atomic_fetch_add_explicit(&c->host_unwatched, 1, memory_order_relaxed);
}

void rc_host_unwatch(struct regcache *c, struct regcache_entry *e)
{
    rc_host_monitor_unwatch(e->claim);
    e->claim = NULL;
    if (e->unwatched)
        atomic_fetch_sub_explicit(&c->host_unwatched, 1, memory_order_relaxed);
    e->unwatched = false;
}
