/* What a cache does with the host memory monitor (host_watch.h): a feature
 * on the cache's edge.  Its pageable host entries are watched from before
 * their registration until their deregistration (the entry's mark is the
 * monitor's claim), and those that cannot be are counted.  What the monitor
 * hears of leaves the caches that watch in two steps: entries are taken
 * out at once, calling back nobody, and deregistered later (with their
 * callbacks and notices) by a thread that waits for nothing. */
#include "host_watch.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "cache_registry.h"
#include "host_monitor.h"
#include "last_error.h"
#include "options.h"

/* A cache that accepts host memory: RC_HOST_BY_NONE when it does not
 * watch it. */
struct watching {
    enum rc_host_by by;
    atomic_size_t unwatched; /* its pageable entries the monitor does not watch */
};

/* The mark of a pageable entry that the monitor does not watch: counted
 * from before its registration until after its deregistration. */
static char unwatched_mark;

static void *before_register(void *arg, const struct rc_watch_want *w)
{
    struct watching *h = arg;
    /* Merged or not, the range lies inside the mappings the miss learnt. */
    enum rc_host_sharing sharing = !w->span_end     ? RC_HOST_SHARING_UNKNOWN
                                   : w->span_shared ? RC_HOST_SHARED
                                                    : RC_HOST_PRIVATE;
    struct rc_host_claim *claim = rc_host_monitor_watch(w->start, w->end, h->by, sharing);
    if (claim)
        return claim;
    atomic_fetch_add_explicit(&h->unwatched, 1, memory_order_relaxed);
    return &unwatched_mark;
}

/* An unmap in flight through hooks, libc's or UCX's, meets the pages (the
 * registration may have pinned the pages it takes away, and the hook may
 * not have seen the watch): the registration is handed out once.  An
 * unmap that ended before saw the watch after its call and posted the
 * range. */
static enum regcache_reason before_publish(void *arg, void *mark)
{
    (void)arg;
    if (mark == &unwatched_mark || !rc_host_monitor_unsettled(mark))
        return REGCACHE_REASON_COUNT;
    return REGCACHE_REASON_FREED_MONITOR;
}

static void after_deregister(void *arg, void *mark)
{
    struct watching *h = arg;
    if (mark == &unwatched_mark)
        atomic_fetch_sub_explicit(&h->unwatched, 1, memory_order_relaxed);
    else
        rc_host_monitor_unwatch(mark);
}

/* Every cache, watching or not: the last one's destroy lets the monitor
 * stop, once no range is watched. */
static void after_drain(void *arg)
{
    free(arg);
    rc_host_monitor_idle();
}

static const struct rc_listener watches = {
    .before_register = before_register,
    .before_publish = before_publish,
    .after_deregister = after_deregister,
    .after_drain = after_drain,
};

static const struct rc_listener watches_not = {
    .after_drain = after_drain,
};

static bool watches_its(const struct regcache *c)
{
    const struct watching *h = rc_listener_arg(c, &watches);
    return h && h->by != RC_HOST_BY_NONE;
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
    if (watches_its(c))
        u->later |= rc_cache_notify_later(c, u->start, u->end, REGCACHE_REASON_FREED_MONITOR);
}

static bool unmapped(uintptr_t start, uintptr_t end)
{
    struct unmapped u = { start, end, false };
    rc_registry_each(unmapped_in, &u);
    return u.later;
}

static void release_in(struct regcache *c, void *arg)
{
    (void)arg;
    if (watches_its(c))
        rc_release_deferred(c);
}

static void release(void)
{
    rc_registry_each(release_in, NULL);
}

static const struct rc_host_sink sink = {
    .unmapped = unmapped,
    .release = release,
};

/* How the cache's host memory is watched, and why, in c->host_note. */
static enum rc_host_by open_monitor(struct regcache *c, const struct rc_options *o)
{
    /* In the order of enum regcache_host_monitor. */
    static const char *const modes[] = { "AUTO", "OFF", "LIBC", "UFFD", "UCM" };
    const struct regcache_params *p = &o->params;
    /* The variable overrides the field, as every variable does. */
    char asked[48];
    if (!rc_options_set_by_env(o, offsetof(struct rc_options, params.host_monitor), asked,
                               sizeof asked))
        snprintf(asked, sizeof asked, "params.host_monitor is %s", modes[p->host_monitor]);
    if (!p->host_memory) {
        snprintf(c->host_note, sizeof c->host_note, "not accepted");
        return RC_HOST_BY_NONE;
    }
    if (p->host_monitor == REGCACHE_HOST_MONITOR_OFF) {
        snprintf(c->host_note, sizeof c->host_note,
                 "not monitored (%s): invalidate before unmapping", asked);
        return RC_HOST_BY_NONE;
    }
    return rc_host_monitor_open(p->host_monitor, asked, c->host_note, sizeof c->host_note, &sink);
}

int rc_host_watch_open(struct regcache *c, const struct rc_options *o)
{
    enum rc_host_by by = open_monitor(c, o);
    /* Unwatched or not, a cache that accepts host memory counts the
     * entries the monitor does not watch. */
    struct watching *h = o->params.host_memory ? calloc(1, sizeof *h) : NULL;
    if (o->params.host_memory && !h)
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory watching host memory");
    if (h)
        h->by = by;
    if (rc_listen(c, h ? &watches : &watches_not, h) < 0) {
        free(h);
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "no room on the cache's edge for its host memory");
    }
    return REGCACHE_OK;
}

size_t rc_host_watch_unwatched(const struct regcache *c)
{
    struct watching *h = rc_listener_arg(c, &watches);
    return h ? atomic_load_explicit(&h->unwatched, memory_order_relaxed) : 0;
}
